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
from .elementwise import ALIGN, run

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
