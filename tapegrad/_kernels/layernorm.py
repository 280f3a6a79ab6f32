"""Layer norm over the last ``m`` elements of each row, forward and backward (numba).

numpy's layer norm makes a pass over the whole array per step (mean, subtract, square, mean,
scale, affine; backward twice as many), each broadcasting per-row statistics along rows of
64-128 elements. Here each row is read into cache once and finished there: two-pass mean and
variance (as the reference), the affine map on the way out; backward recomputes the row's two
statistics from the input (nothing but the input is saved), then one pass per row gives the
two row sums of the input gradient and the weight and bias gradients' terms (summed in x's
dtype over blocks of 32 rows, then into float64), and one more writes the input gradient.
Rows are indexed flat at their offsets (no view per row) and the kernels allow reassociation
(``fastmath`` reassoc/contract), so the sums vectorise; a missing weight or bias is passed as
ones or zeros, since a test for it inside the loops kept them partly scalar (one thread,
(1280, 64) float32: forward 0.036 -> 0.021 ms, backward 0.060 -> 0.050). Measured alone on
(1024, 128) float32, one thread: forward 0.14 -> 0.04 ms, backward 0.25 -> 0.10 ms (PyTorch with
two threads: 0.06 and 0.12). Each has a parallel form over chunks of rows, one per thread, cut
at multiples of 32 rows (``*_par``; the registry chooses between the two by measurement):
the same bits for the output and the input gradient at any thread count; the weight and bias
gradients add the chunks' float64 sums at the end (the serial kernel adds each block of 32 rows
in turn), so they agree within float64 rounding before their cast. A chunk calls the serial
kernel's machine code by address (``twins.call_at``), so the twin's compile does not optimise
the serial kernel's IR again. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .softmax import flat_sum
from .threads import count
from .twins import call_at, entry_by

U = np.uint64
ROWS = 32  # rows: the weight and bias gradients' blocks, and where threads' chunks are cut


@jit(fastmath={"reassoc", "contract"})
def _stats(xf, b, m, eps):  # type: ignore[no-untyped-def]
    """The mean and ``1 / sqrt(var + eps)`` of the row ``xf[b:b + m]`` (biased variance, two
    passes, as the reference)."""
    dt = xf.dtype.type
    mu = flat_sum(xf, b, m) * dt(1.0 / m)
    var = dt(0)
    for j in range(U(m)):
        d = xf[b + j] - mu
        var += d * d
    sd = np.sqrt(var * dt(1.0 / m) + dt(eps))
    return mu, dt(1) / sd if sd != 0 else dt(np.inf)  # eps = 0 on a constant row: as numpy


@jit(fastmath={"reassoc", "contract"})
def _ln_fwd(x, w, b, y, eps, r0, r1):  # type: ignore[no-untyped-def]
    """Rows r0 to r1."""
    m = x.shape[1]
    xf = x.reshape(-1)
    yf = y.reshape(-1)
    for r in range(r0, r1):
        o = U(r * m)
        mu, rstd = _stats(xf, o, m, eps)
        for j in range(U(m)):
            yf[o + j] = (xf[o + j] - mu) * rstd * w[j] + b[j]


@jit(fastmath={"reassoc", "contract"})
def _ln_bwd(g, x, w, eps, gx, gwb, r0, r1):  # type: ignore[no-untyped-def]
    """Rows r0 to r1 (r0 a multiple of 32), the weight and bias gradients' sums into gwb;
    ``gx`` empty when the input's gradient is not needed."""
    m = x.shape[1]
    dt = x.dtype.type
    xf = x.reshape(-1)
    gf = g.reshape(-1)
    dx = gx.reshape(-1)
    inv_m = dt(1.0 / m)
    # the weight and bias gradients: float32 (x's dtype) sums over blocks of 32 rows, added
    # into float64 (float64 accumulators per row were 2x slower than the rest of the pass)
    aw = np.zeros(m, x.dtype)
    ab = np.zeros(m, x.dtype)
    gw = gwb[0]
    gb = gwb[1]
    for r in range(r0, r1):
        o = U(r * m)
        mu, rstd = _stats(xf, o, m, eps)
        a = dt(0)
        c = dt(0)
        for j in range(U(m)):
            gv = gf[o + j]
            xh = (xf[o + j] - mu) * rstd
            gy = gv * w[j]
            a += gy
            c += gy * xh
            aw[j] += gv * xh
            ab[j] += gv
        if dx.size:
            a *= inv_m
            c *= inv_m
            for j in range(U(m)):
                dx[o + j] = rstd * (gf[o + j] * w[j] - a - ((xf[o + j] - mu) * rstd) * c)
        if r % 32 == 31 or r == r1 - 1:
            for j in range(U(m)):
                gw[j] += aw[j]
                gb[j] += ab[j]
                aw[j] = 0
                ab[j] = 0


def _vec(a: Any, m: int, dtype: Any, fill: float) -> Any:
    """``a`` flat and contiguous, or ``fill`` repeated for None (the kernels always take a
    weight and a bias: a test inside their loops kept them from vectorising)."""
    if a is None:
        return np.full(m, fill, dtype)
    return a if a.ndim == 1 and a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)


def _rows(a: Any, m: int) -> Any:
    return (a if a.flags.c_contiguous else np.ascontiguousarray(a)).reshape(-1, m)


@jit(parallel=True)
def _ln_fwd_par(x, w, b, y, eps, fp):  # type: ignore[no-untyped-def]
    """``_ln_fwd`` of the rows in chunks, one per thread, each a call of its compiled code at
    ``fp`` (``twins.entry``; by name, its IR linked in and optimised again: 1.3 CPU s)."""
    p = num_threads()
    for i in prange(p):
        r0, r1 = bounds(x.shape[0], p, i, ROWS)
        call_at(fp, (x, w, b, y, eps, r0, r1))


@jit(parallel=True)
def _ln_bwd_par(g, x, w, eps, gx, gwb2, fp):  # type: ignore[no-untyped-def]
    """``_ln_bwd`` of the rows in ``len(gwb2)`` chunks (cut at multiples of 32 rows, so the
    blocks of the weight and bias sums are the serial kernel's), chunk i's sums into gwb2[i];
    each a call of its compiled code at ``fp`` (by name: 1.6 CPU s)."""
    p = gwb2.shape[0]
    for i in prange(p):
        r0, r1 = bounds(x.shape[0], p, i, ROWS)
        call_at(fp, (g, x, w, eps, gx, gwb2[i], r0, r1))


def layer_norm(x: Any, w: Any, b: Any, m: int, eps: float, threads: bool = False) -> Any:
    """``(x - mean) / sqrt(var + eps) * w + b`` over rows of the last ``m`` elements
    (``threads``: the rows in chunks, one per thread; the same bits)."""
    x2 = _rows(x, m)
    y = np.empty(x2.shape, x.dtype)
    wv, bv = _vec(w, m, x.dtype, 1.0), _vec(b, m, x.dtype, 0.0)
    eps = float(eps)  # the kinds entry_by's key stands for
    if threads:
        fp = entry_by(("ln_fwd", x.dtype.char), _ln_fwd, x2[:0], wv, bv, y[:0], eps, 0, 0)
        _ln_fwd_par(x2, wv, bv, y, eps, fp)
    else:
        _ln_fwd(x2, wv, bv, y, eps, 0, x2.shape[0])
    return y.reshape(x.shape)


def layer_norm_grad(g: Any, x: Any, w: Any, m: int, eps: float, needs: Any,
                    threads: bool = False) -> tuple[Any, Any, Any]:
    """The gradients for ``x``, ``w`` and ``b`` (None where ``needs`` says no); ``w`` and ``b``
    as flat (m,) arrays. ``threads``: the rows in chunks, one per thread (the input gradient's
    bits are the same; the weight's and bias's add each chunk's float64 sums)."""
    x2 = _rows(x, m)
    g2 = _rows(g, m)
    gx = np.empty(x2.shape if needs[0] else (0, m), x.dtype)
    wv = _vec(w, m, x.dtype, 1.0)
    eps = float(eps)
    if threads:
        gwb2 = np.zeros((count(), 2, m), np.float64)
        fp = entry_by(("ln_bwd", g2.dtype.char, x.dtype.char), _ln_bwd, g2[:0], x2[:0], wv, eps,
                      gx[:0], gwb2[0], 0, 0)
        _ln_bwd_par(g2, x2, wv, eps, gx, gwb2, fp)
        gwb = gwb2.sum(axis=0)
    else:
        gwb = np.zeros((2, m), np.float64)
        _ln_bwd(g2, x2, wv, eps, gx, gwb, 0, x2.shape[0])
    return (
        gx.reshape(x.shape) if needs[0] else None,
        gwb[0].astype(x.dtype) if needs[1] else None,
        gwb[1].astype(x.dtype) if needs[2] else None,
    )


def layer_norm_grad_op(
    xp: Any, g: Any, x: Any, w: Any, m: int, ns: tuple[int, ...], eps: float, needs: Any,
    threads: bool = False,
) -> tuple[Any, Any, Any]:
    """``layer_norm_grad`` with the arguments of its reference (``ops._norm``): the weight's
    and bias's gradients shaped ``ns``."""
    gx, gw, gb = layer_norm_grad(g, x, w, m, eps, needs, threads)
    return gx, None if gw is None else gw.reshape(ns), None if gb is None else gb.reshape(ns)


# the rows in chunks over the kernels' threads (chosen against one thread by measurement)
def layer_norm_par(x: Any, w: Any, b: Any, m: int, eps: float) -> Any:
    return layer_norm(x, w, b, m, eps, threads=True)


def layer_norm_grad_par(
    xp: Any, g: Any, x: Any, w: Any, m: int, ns: tuple[int, ...], eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    return layer_norm_grad_op(xp, g, x, w, m, ns, eps, needs, threads=True)
