"""Instance normalisation with its affine map, forward and backward, per (sample, channel)
plane (numba).

As batch norm's primitive over (1, N * C, ...) followed by the affine map, a forward took
three passes and two temporaries past the statistics, and a backward five more (the two
broadcast products' adjoints, each a reduction over the batch and spatial axes). Here each
plane of M elements is finished in cache: two reads for the statistics (the mean, then the
centred squares: float64 sums, as ``batchnorm.py``), one write of ``(x - mean) * (rstd * w) + b``.
The backward recomputes the same statistics (the same bits: the same code), reads ``g`` and
``x`` once for the plane's two sums (the weight's and bias's per-plane terms, added over the
batch at the end in float64) and writes the input gradient in one more pass. The parallel
forms (``*_par``) run the planes in chunks, one per thread: the same bits at any thread count.
Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads

U = np.uint64
PARALLEL_MIN = 1 << 15  # elements from which a pass runs on several threads


@jit(fastmath={"reassoc", "contract"})
def _stats(xf, base, m):  # type: ignore[no-untyped-def]
    """Mean and biased variance (float64) of the plane ``xf[base:base + m]``."""
    s = 0.0
    for k in range(U(m)):
        s += xf[base + k]
    mean = s / m
    s2 = 0.0
    for k in range(U(m)):
        d = xf[base + k] - mean
        s2 += d * d
    return mean, s2 / m


@jit(fastmath={"reassoc", "contract"})
def _fwd(x, w, b, eps, y, p0, p1):  # type: ignore[no-untyped-def]
    """Planes p0 to p1 of the (P, M) ``x``; plane p is channel ``p % len(w)``."""
    m = x.shape[1]
    c_ = max(w.shape[0], b.shape[0], 1)
    xf = x.reshape(-1)
    yf = y.reshape(-1)
    dt = xf.dtype.type
    for p in range(p0, p1):
        c = p % c_
        base = U(p * m)
        mean, var = _stats(xf, base, m)
        rstd = 1.0 / np.sqrt(var + eps)
        scale = dt(rstd * (w[c] if w.shape[0] > 0 else 1.0))
        shift = dt(b[c] if b.shape[0] > 0 else 0.0)
        mu = dt(mean)
        for k in range(U(m)):
            yf[base + k] = (xf[base + k] - mu) * scale + shift


@jit(fastmath={"reassoc", "contract"})
def _bwd(g, x, w, eps, gx, gwb, p0, p1):  # type: ignore[no-untyped-def]
    """Planes p0 to p1: the input gradient (unless ``gx`` is empty) and each plane's terms of
    the weight's and bias's gradients into ``gwb[p]`` (float64)."""
    m = x.shape[1]
    c_ = max(w.shape[0], 1)
    xf = x.reshape(-1)
    gf = g.reshape(-1)
    df = gx.reshape(-1)
    dt = xf.dtype.type
    for p in range(p0, p1):
        base = U(p * m)
        mean, var = _stats(xf, base, m)
        rstd = 1.0 / np.sqrt(var + eps)
        mu = dt(mean)
        sg = 0.0
        sgx = 0.0
        for k in range(U(m)):
            gv = gf[base + k]
            sg += gv
            sgx += gv * (xf[base + k] - mu)
        gwb[p, 0] = sgx * rstd  # sum of g * xhat
        gwb[p, 1] = sg
        if df.size == 0:
            continue
        a = rstd * (w[p % c_] if w.shape[0] > 0 else 1.0)
        k1 = dt(sg / m)
        k2 = dt(sgx * rstd * rstd / m)
        aa = dt(a)
        for k in range(U(m)):
            df[base + k] = aa * (gf[base + k] - k1 - (xf[base + k] - mu) * k2)


@jit(parallel=True)
def _fwd_par(x, w, b, eps, y):  # type: ignore[no-untyped-def]
    n = num_threads()
    for i in prange(n):
        p0, p1 = bounds(x.shape[0], n, i, 1)
        _fwd(x, w, b, eps, y, p0, p1)


@jit(parallel=True)
def _bwd_par(g, x, w, eps, gx, gwb):  # type: ignore[no-untyped-def]
    n = num_threads()
    for i in prange(n):
        p0, p1 = bounds(x.shape[0], n, i, 1)
        _bwd(g, x, w, eps, gx, gwb, p0, p1)


def _parallel(x2: Any) -> bool:
    from . import threads  # noqa: PLC0415 # lazy: the pool's module builds a numba intrinsic on import

    return x2.shape[0] > 1 and threads.worth(x2.size, PARALLEL_MIN)


def _vec(a: Any, dtype: Any) -> Any:
    return np.empty(0, dtype) if a is None else np.ascontiguousarray(a).reshape(-1)


def instance_norm(x: Any, w: Any, b: Any, eps: float) -> Any:
    """``(x - mean) / sqrt(var + eps) * w + b``, the statistics per (sample, channel) over the
    spatial axes of (N, C, ...)."""
    x2 = np.ascontiguousarray(x).reshape(x.shape[0] * x.shape[1], -1)
    y = np.empty(x2.shape, x.dtype)
    args = (x2, _vec(w, x.dtype), _vec(b, x.dtype), float(eps), y)
    if _parallel(x2):
        _fwd_par(*args)
    else:
        _fwd(*args, 0, x2.shape[0])
    return y.reshape(x.shape)


def instance_norm_grad(
    xp: Any, g: Any, x: Any, w: Any, eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    """The gradients for ``x``, ``w`` and ``b`` (None where ``needs`` says no)."""
    n, c = x.shape[:2]
    x2 = np.ascontiguousarray(x).reshape(n * c, -1)
    g2 = np.ascontiguousarray(g).reshape(x2.shape)
    gx = np.empty(x2.shape if needs[0] else (0, 0), x.dtype)
    gwb = np.empty((n * c, 2), np.float64)
    args = (g2, x2, _vec(w, x.dtype), float(eps), gx, gwb)
    if _parallel(x2):
        _bwd_par(*args)
    else:
        _bwd(*args, 0, x2.shape[0])
    sums = gwb.reshape(n, c, 2).sum(axis=0).astype(x.dtype)
    return (gx.reshape(x.shape) if needs[0] else None,
            sums[:, 0].copy() if needs[1] else None,
            sums[:, 1].copy() if needs[2] else None)
