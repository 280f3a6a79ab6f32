"""Activation gradients (numba): one pass, no boolean mask.

``relu_grad``: numpy's ``g * (y > 0)`` builds a boolean mask (one byte per element) and then a
product that promotes it; here one loop reads ``g`` and the saved output and writes the
gradient, the same values (``g * 0`` where the output is not positive, so a NaN gradient stays
NaN as in the reference). ``leaky_relu_grad``: ``g`` where the output is positive, else
``slope * g``, in one pass. The arrays go in flat (views): one compile a dtype, whatever the
rank. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .elementwise import ALIGN, parallel, run

U = np.uint64


@jit()
def _relu_grad(g, y, out, k0, k1):  # type: ignore[no-untyped-def]
    gf = g.reshape(-1)
    yf = y.reshape(-1)
    of = out.reshape(-1)
    zero = of.dtype.type(0)
    one = of.dtype.type(1)
    for k in range(U(k0), U(k1)):
        of[k] = gf[k] * (one if yf[k] > zero else zero)


@jit(parallel=True)
def _relu_grad_par(g, y, out):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        k0, k1 = bounds(out.size, p, i, ALIGN)
        _relu_grad(g, y, out, k0, k1)


def relu_grad(g: Any, y: Any) -> Any:
    """``g * (y > 0)`` for C-contiguous ``g`` and ``y`` of one shape."""
    out = np.empty_like(g)
    run(_relu_grad, _relu_grad_par, out.size, g.reshape(-1), y.reshape(-1), out.reshape(-1))
    return out


@jit()
def _leaky_relu_grad(g, y, out, s, k0, k1):  # type: ignore[no-untyped-def]
    gf = g.reshape(-1)
    xf = y.reshape(-1)
    of = out.reshape(-1)
    zero = of.dtype.type(0)
    for k in range(U(k0), U(k1)):
        of[k] = gf[k] if xf[k] > zero else gf[k] * s


@jit(parallel=True)
def _leaky_relu_grad_par(g, y, out, s):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        k0, k1 = bounds(out.size, p, i, ALIGN)
        _leaky_relu_grad(g, y, out, s, k0, k1)


def leaky_relu_grad(g: Any, y: Any, slope: float) -> Any:
    """``g if y > 0 else slope * g`` for C-contiguous ``g`` and the saved output ``y`` (positive
    exactly where the input is, for a slope >= 0) of one shape and dtype."""
    out = np.empty_like(g)
    run(_leaky_relu_grad, _leaky_relu_grad_par, out.size, g.reshape(-1), y.reshape(-1),
        out.reshape(-1), g.dtype.type(slope))
    return out


def leaky_relu_grad_op(xp: Any, g: Any, y: Any, slope: float) -> Any:
    """``leaky_relu_grad`` with the arguments of its reference (``ops._elementwise``)."""
    return leaky_relu_grad(g, y, slope)


# --------------------------------------------------------------------------------------------
# a linear layer followed by ReLU (``ops._linear``'s ``nn.linear_relu``): the bias add and the
# ReLU in one pass over the product's output, in place; backward, the ReLU mask and the bias's
# gradient (the masked gradient's column sums) in one pass over the incoming gradient
# --------------------------------------------------------------------------------------------


@jit()
def _bias_relu(y, b, r0, r1):  # type: ignore[no-untyped-def]
    """Rows r0 to r1 of the (N, M) ``y``: ``max(y + b, 0)`` in place (no add when ``b`` is
    empty), NaN kept and ``-0.0`` giving ``+0.0`` as ``relu``."""
    m = y.shape[1]
    yf = y.reshape(-1)
    zero = yf.dtype.type(0)
    if b.size:
        for i in range(U(r0), U(r1)):
            r = i * U(m)
            for j in range(U(m)):
                v = yf[r + j] + b[j]
                yf[r + j] = v if v > zero or np.isnan(v) else zero
    else:
        for i in range(U(r0), U(r1)):
            r = i * U(m)
            for j in range(U(m)):
                v = yf[r + j]
                yf[r + j] = v if v > zero or np.isnan(v) else zero


@jit(parallel=True)
def _bias_relu_par(y, b):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        r0, r1 = bounds(y.shape[0], p, i, 1)
        _bias_relu(y, b, r0, r1)


def bias_relu(y: Any, b: Any) -> None:
    """``y = max(y + b, 0)`` in place for a C-contiguous (N, M) ``y`` and an (M,) ``b`` of its
    dtype, or None (no bias): the epilogue of a linear layer's product, one pass where the
    bias add and ``relu`` were two (and ``relu``'s a new array)."""
    b = y[:0, 0] if b is None else b  # empty: no bias
    if parallel(y.size):
        _bias_relu_par(y, b)
    else:
        _bias_relu(y, b, 0, y.shape[0])


@jit()
def _relu_bias_grad(g, y, out, db, c0, c1):  # type: ignore[no-untyped-def]
    """Columns c0 to c1: ``out = g * (y > 0)`` and, when ``db`` is not empty, its column sums
    row after row from the first (numpy's ``add.reduce(out, axis=0)`` order: the same bits)."""
    n, m = g.shape
    gf = g.reshape(-1)
    yf = y.reshape(-1)
    of = out.reshape(-1)
    zero = of.dtype.type(0)
    one = of.dtype.type(1)
    if not db.size:
        for i in range(U(n)):
            r = i * U(m)
            for j in range(U(c0), U(c1)):
                of[r + j] = gf[r + j] * (one if yf[r + j] > zero else zero)
        return
    for j in range(U(c0), U(c1)):
        db[j] = zero
    for i in range(U(n)):
        r = i * U(m)
        if i == 0:
            for j in range(U(c0), U(c1)):
                v = gf[j] * (one if yf[j] > zero else zero)
                of[j] = v
                db[j] = v
        else:
            for j in range(U(c0), U(c1)):
                v = gf[r + j] * (one if yf[r + j] > zero else zero)
                of[r + j] = v
                db[j] += v


@jit(parallel=True)
def _relu_bias_grad_par(g, y, out, db):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        c0, c1 = bounds(g.shape[1], p, i, ALIGN)
        _relu_bias_grad(g, y, out, db, c0, c1)


def relu_bias_grad(g: Any, y: Any, with_bias: bool) -> tuple[Any, Any]:
    """``gp = g * (y > 0)`` for C-contiguous (N, M) ``g`` and saved output ``y``, and the bias's
    gradient ``gp.sum(axis=0)`` (None unless ``with_bias``), in one pass over ``g``."""
    out = np.empty_like(g)
    db = np.empty(g.shape[1] if with_bias else 0, g.dtype)
    if parallel(g.size):
        _relu_bias_grad_par(g, y, out, db)
    else:
        _relu_bias_grad(g, y, out, db, 0, g.shape[1])
    return out, (db if with_bias else None)
