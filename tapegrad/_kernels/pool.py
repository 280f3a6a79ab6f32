"""2x2 max pooling (stride 2, the common ``MaxPool2d(2)``), forward and gradient, and the
gradient over any other window (numba).

numpy's max pooling makes one strided pass per kernel offset, and its gradient compares every
offset with the output, masks and multiplies. Here each window is read once, its four values
unrolled (measured: loops over a run-time kernel size do not vectorise and were slower than
numpy, so other geometries keep the numpy code). The forward keeps the maximum (a NaN wins, as
``np.maximum``); the gradient routes each window's gradient to its first maximum in row-major
order (PyTorch's rule) and writes zeros elsewhere, rows and columns no window reaches included.
Each has a parallel form (``*_par``: the planes in chunks, one per thread, the same bits) used
from ``PARALLEL_MIN`` input elements when numpy's BLAS shares numba's threads (before that pool,
waking a second thread cost more than the pass); a chunk calls the serial kernel's machine code
by address (``twins.call_at``: the twin's compile does not optimise its IR again). The gradient writes each element once (zeros only where no window
reaches: an odd last row or column). Other windows (ResNet's 3x3 stride 2 padded 1) keep numpy's
forward, whose kh * kw maximum passes vectorise, and take ``max_pool_window_grad``: one pass over
the windows instead of the reference's comparison, selection and addition per tap.
Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .twins import call_at, entry, entry_by

U = np.uint64
PARALLEL_MIN = 1 << 16  # input elements from which a pass runs on several threads


@jit()
def _max4(x, out, p0, p1):  # type: ignore[no-untyped-def]
    """The maxima of planes p0 to p1 (flat, n * C + c)."""
    h_, w_ = x.shape[2], x.shape[3]
    ho, wo = out.shape[2], out.shape[3]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    # unsigned indices: no negative-index wraparound, so the loops vectorise
    for p in range(U(p0), U(p1)):
        for y in range(U(ho)):
            r0 = p * U(h_ * w_) + U(2) * y * U(w_)
            r1 = r0 + U(w_)
            o = (p * U(ho) + y) * U(wo)
            for xx in range(U(wo)):
                a = xf[r0 + U(2) * xx]
                b = xf[r0 + U(2) * xx + U(1)]
                d = xf[r1 + U(2) * xx]
                e = xf[r1 + U(2) * xx + U(1)]
                m = a if a >= b else b
                m2 = d if d >= e else e
                m = m if m >= m2 else m2
                if np.isnan(a) or np.isnan(b) or np.isnan(d) or np.isnan(e):
                    m = np.nan
                of[o + xx] = m


@jit()
def _max4_grad(g, x, out, dx, p0, p1):  # type: ignore[no-untyped-def]
    """The gradient of planes p0 to p1 (flat, n * C + c)."""
    h_, w_ = x.shape[2], x.shape[3]
    ho, wo = out.shape[2], out.shape[3]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    gf = g.reshape(-1)
    df = dx.reshape(-1)
    zero = df.dtype.type(0)
    for p in range(U(p0), U(p1)):
        if h_ > 2 * ho:  # the last row no window reaches (odd height)
            b = p * U(h_ * w_) + U(2 * ho * w_)
            for k in range(U(w_)):
                df[b + k] = zero
        if w_ > 2 * wo:  # the last column (odd width)
            for y in range(U(2 * ho)):
                df[p * U(h_ * w_) + y * U(w_) + U(w_ - 1)] = zero
        for y in range(U(ho)):
            r0 = p * U(h_ * w_) + U(2) * y * U(w_)
            r1 = r0 + U(w_)
            o = (p * U(ho) + y) * U(wo)
            for xx in range(U(wo)):
                m = of[o + xx]
                gv = gf[o + xx]
                i0 = r0 + U(2) * xx
                i1 = r1 + U(2) * xx
                a = xf[i0] == m
                b = xf[i0 + U(1)] == m and not a
                d = xf[i1] == m and not (a or b)
                e = xf[i1 + U(1)] == m and not (a or b or d)
                df[i0] = gv if a else zero
                df[i0 + U(1)] = gv if b else zero
                df[i1] = gv if d else zero
                df[i1 + U(1)] = gv if e else zero


@jit()
def _maxk_grad(g, x, out, dx, kh, kw, sh, sw, pt, pl, dh, dw, p0, p1):  # type: ignore[no-untyped-def]
    """The max-pooling gradient of planes p0 to p1 (flat, n * C + c) over any window geometry
    (padding reads as -inf): each window's gradient goes to its first tap (row-major) equal to
    the maximum, dropped where that tap is padding. The windows run from the last to the
    first, so each input element sums its windows' parts in the order of their taps, as the
    reference's one pass per tap does (the same bits)."""
    h_, w_ = x.shape[2], x.shape[3]
    ho, wo = out.shape[2], out.shape[3]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    gf = g.reshape(-1)
    df = dx.reshape(-1)
    low = xf.dtype.type(-np.inf)
    for k in range(U(p0 * h_ * w_), U(p1 * h_ * w_)):
        df[k] = 0
    for p in range(p0, p1):
        base = p * h_ * w_
        for y in range(ho - 1, -1, -1):
            for xx in range(wo - 1, -1, -1):
                o = U((p * ho + y) * wo + xx)
                m = of[o]
                found = False
                for i in range(kh):
                    r = y * sh + i * dh - pt
                    for j in range(kw):
                        c = xx * sw + j * dw - pl
                        inside = 0 <= r < h_ and 0 <= c < w_
                        at = U(base + r * w_ + c) if inside else U(0)
                        v = xf[at] if inside else low
                        if v == m:
                            if inside:
                                df[at] += gf[o]
                            found = True
                            break
                    if found:
                        break


@jit(parallel=True)
def _maxk_grad_par(g, x, out, dx, kh, kw, sh, sw, pt, pl, dh, dw, fp):  # type: ignore[no-untyped-def]
    """``_maxk_grad`` of the planes in chunks, one per thread, each a call of its compiled
    code at ``fp`` (``twins.entry``)."""
    p = num_threads()
    for i in prange(p):
        p0, p1 = bounds(x.shape[0] * x.shape[1], p, i, 1)
        call_at(fp, (g, x, out, dx, kh, kw, sh, sw, pt, pl, dh, dw, p0, p1))


def _window_args(geom: Any) -> tuple[int, ...]:
    (kh, kw), (sh, sw), (dh, dw) = geom.kernel, geom.stride, geom.dilation
    return kh, kw, sh, sw, geom.padding[0][0], geom.padding[1][0], dh, dw


def max_pool_window_grad(g: Any, x: Any, out: Any, geom: Any) -> Any:
    """``nn.max_pool2d_grad``'s forward for any window geometry: one pass over the windows
    (the reference compares every tap's strided view with the output, then adds per tap)."""
    dx = np.empty(geom.in_shape, dtype=g.dtype)
    c = np.ascontiguousarray
    g, x, out = c(g), c(x), c(out)
    a = _window_args(geom)
    if _parallel(x):
        fp = entry(_maxk_grad, g[:0], x[:0], out[:0], dx[:0], *a, 0, 0)
        _maxk_grad_par(g, x, out, dx, *a, fp)
    else:
        _maxk_grad(g, x, out, dx, *a, 0, x.shape[0] * x.shape[1])
    return dx


def fits(geom: Any) -> bool:
    """Whether these kernels cover ``geom``: 2x2 windows, stride 2, no padding or dilation."""
    return (
        geom.kernel == (2, 2)
        and geom.stride == (2, 2)
        and geom.dilation == (1, 1)
        and geom.padding == ((0, 0), (0, 0))
    )


@jit(parallel=True)
def _max4_par(x, out, fp):  # type: ignore[no-untyped-def]
    """``_max4`` of the planes in chunks, one per thread, each a call of its compiled code at
    ``fp`` (``twins.entry``; by name, its IR linked in and optimised again)."""
    p = num_threads()
    for i in prange(p):
        p0, p1 = bounds(x.shape[0] * x.shape[1], p, i, 1)
        call_at(fp, (x, out, p0, p1))


@jit(parallel=True)
def _max4_grad_par(g, x, out, dx, fp):  # type: ignore[no-untyped-def]
    """``_max4_grad`` of the planes in chunks, one per thread, each a call of its compiled
    code at ``fp`` (by name: 1.6 CPU s)."""
    p = num_threads()
    for i in prange(p):
        p0, p1 = bounds(x.shape[0] * x.shape[1], p, i, 1)
        call_at(fp, (g, x, out, dx, p0, p1))


def _parallel(x: Any) -> bool:
    """Whether a pass over (N, C, H, W) ``x`` runs on several threads (shared with BLAS)."""
    from . import threads  # noqa: PLC0415

    return x.shape[0] * x.shape[1] >= 2 and threads.worth(x.size, PARALLEL_MIN)


def max_pool(x: Any, geom: Any) -> Any:
    """``nn.max_pool2d``'s forward for ``fits(geom)``: the (N, C, H // 2, W // 2) maxima."""
    out = np.empty(x.shape[:2] + tuple(geom.out_hw), dtype=x.dtype)
    x = np.ascontiguousarray(x)
    if _parallel(x):
        _max4_par(x, out, entry_by(("max4", x.dtype.char), _max4, x[:0], out[:0], 0, 0))
    else:
        _max4(x, out, 0, x.shape[0] * x.shape[1])
    return out


def max_pool_grad(g: Any, x: Any, out: Any, geom: Any) -> Any:
    """``nn.max_pool2d_grad``'s forward for ``fits(geom)``: ``g`` at each first maximum."""
    dx = np.empty(geom.in_shape, dtype=g.dtype)
    c = np.ascontiguousarray
    g, x, out = c(g), c(x), c(out)
    if _parallel(x):
        fp = entry_by(("max4_grad", g.dtype.char, x.dtype.char, out.dtype.char), _max4_grad, g[:0],
                      x[:0], out[:0], dx[:0], 0, 0)
        _max4_grad_par(g, x, out, dx, fp)
    else:
        _max4_grad(g, x, out, dx, 0, x.shape[0] * x.shape[1])
    return dx
