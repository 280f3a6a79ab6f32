"""Batch normalisation in training mode, forward and backward, per channel (numba).

numpy's composition (mean, subtract, square, mean, rsqrt, multiply, affine: each its own pass
and temporary, recorded as seven ops) becomes two kernels over (N, C, M) arrays, one channel at
a time: the statistics take two reads of the channel (the mean, then the centred squares: no
cancellation, unlike a sum of squares), and the forward writes ``(x - mean) * (rstd * w) + b``
in a third. The backward recomputes the same statistics (bit for bit: the same code on the same
input), reads ``g`` and ``x`` once for the two sums it needs, and writes the input gradient in
one more pass. Sums accumulate in float64 (float32 inputs included), reassociated so that they
vectorise. Each kernel takes a range of channels; its parallel form (``*_par``) runs the
channels in chunks, one per thread: the same bits at any thread count. Planes of at most ``SMALL_PLANE``
(32) elements take ``_fwd_small`` / ``_bwd_small`` instead: per sample, one contiguous pass
over the (C * M) block into float64 accumulators per element, reduced per channel at the end,
rather than N loops of M elements per channel. Measured alone (float32, one thread), forward /
backward ms, per channel -> small: (64, 128, 4, 4) 0.16 / 0.29 -> 0.09 / 0.19; at 8x8 the two
are equal (0.14 / 0.25 against 0.15 / 0.27), above it the per-channel kernels win.
Imported only when numba is selected.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads

U = np.uint64
PARALLEL_MIN = 1 << 16  # elements from which a pass runs on several threads


@jit(fastmath={"reassoc", "contract"})
def _stats(xf, n_, c, c_, m):  # type: ignore[no-untyped-def]
    """Mean and biased variance of channel c of the flat (N, C, M) array xf, in float64."""
    s = 0.0
    for n in range(n_):
        b = U((n * c_ + c) * m)
        for k in range(U(m)):
            s += xf[b + k]
    cnt = n_ * m
    mean = s / cnt
    s2 = 0.0
    for n in range(n_):
        b = U((n * c_ + c) * m)
        for k in range(U(m)):
            d = xf[b + k] - mean
            s2 += d * d
    return mean, s2 / cnt


@jit(fastmath={"reassoc", "contract"})
def _fwd(x, w, b, eps, out, stats, c0, c1):  # type: ignore[no-untyped-def]
    """Channels c0 to c1."""
    n_, c_, m = x.shape
    xf = x.reshape(-1)
    of = out.reshape(-1)
    for c in range(c0, c1):
        mean, var = _stats(xf, n_, c, c_, m)
        stats[0, c] = mean
        stats[1, c] = var
        rstd = 1.0 / np.sqrt(var + eps)
        scale = xf.dtype.type(rstd * (w[c] if w.shape[0] > 0 else 1.0))
        shift = xf.dtype.type(b[c] if b.shape[0] > 0 else 0.0)
        mu = xf.dtype.type(mean)
        for n in range(n_):
            base = U((n * c_ + c) * m)
            for k in range(U(m)):
                of[base + k] = (xf[base + k] - mu) * scale + shift


@jit(fastmath={"reassoc", "contract"})
def _bwd(g, x, w, eps, gx, gwb, st, c0, c1):  # type: ignore[no-untyped-def]
    """Channels c0 to c1; the forward's statistics ``st`` (2, C) where given (else (2, 0):
    computed again)."""
    n_, c_, m = x.shape
    xf = x.reshape(-1)
    gf = g.reshape(-1)
    df = gx.reshape(-1)
    cnt = n_ * m
    for c in range(c0, c1):
        if st.shape[1] > 0:
            mean, var = st[0, c], st[1, c]
        else:
            mean, var = _stats(xf, n_, c, c_, m)
        rstd = 1.0 / np.sqrt(var + eps)
        mu = xf.dtype.type(mean)
        sg = 0.0
        sgx = 0.0
        for n in range(n_):
            base = U((n * c_ + c) * m)
            for k in range(U(m)):
                gv = gf[base + k]
                sg += gv
                sgx += gv * (xf[base + k] - mu)
        gwb[0, c] = sgx * rstd  # the weight's gradient: sum of g * xhat
        gwb[1, c] = sg  # the bias's
        if df.size == 0:
            continue
        a = rstd * (w[c] if w.shape[0] > 0 else 1.0)
        k1 = xf.dtype.type(sg / cnt)
        k2 = xf.dtype.type(sgx * rstd * rstd / cnt)
        aa = xf.dtype.type(a)
        for n in range(n_):
            base = U((n * c_ + c) * m)
            for k in range(U(m)):
                df[base + k] = aa * (gf[base + k] - k1 - (xf[base + k] - mu) * k2)


# Small planes (DCGAN's 4x4 and 8x8): a channel's (N, M) block is N runs of M elements, and
# the per-channel passes above pay a loop setup per run. Here each sample's (C, M) block is one
# contiguous run: the sums go into float64 accumulators per element of the block, reduced per
# channel at the end, and the per-channel constants are expanded to the block once.


@jit(fastmath={"reassoc", "contract"})
def _stats_small(xf, n_, cm, c0, c1, m, mean_e, mean, var):  # type: ignore[no-untyped-def]
    """Per-channel mean and biased variance (float64) of channels c0 to c1 of the flat
    (N, C * M) array ``xf``; ``mean_e`` gets the mean expanded to the block's (C * M) elements
    (those of the channels) in x's dtype."""
    acc = np.zeros(cm, np.float64)
    k0 = U(c0 * m)
    k1 = U(c1 * m)
    for n in range(n_):
        b = U(n * cm)
        for k in range(k0, k1):
            acc[k] += xf[b + k]
    cnt = n_ * m
    for c in range(c0, c1):
        s = 0.0
        for k in range(U(c * m), U((c + 1) * m)):
            s += acc[k]
        mean[c] = s / cnt
        for k in range(U(c * m), U((c + 1) * m)):
            mean_e[k] = mean[c]
            acc[k] = 0.0
    for n in range(n_):
        b = U(n * cm)
        for k in range(k0, k1):
            d = xf[b + k] - mean_e[k]
            acc[k] += d * d
    for c in range(c0, c1):
        s = 0.0
        for k in range(U(c * m), U((c + 1) * m)):
            s += acc[k]
        var[c] = s / cnt


@jit(fastmath={"reassoc", "contract"})
def _fwd_small(x, w, b, eps, out, stats, c0, c1):  # type: ignore[no-untyped-def]
    """Channels c0 to c1."""
    n_, c_, m = x.shape
    cm = c_ * m
    xf = x.reshape(-1)
    of = out.reshape(-1)
    mean_e = np.empty(cm, x.dtype)
    _stats_small(xf, n_, cm, c0, c1, m, mean_e, stats[0], stats[1])
    scale_e = np.empty(cm, x.dtype)
    shift_e = np.empty(cm, x.dtype)
    for c in range(c0, c1):
        sc = 1.0 / np.sqrt(stats[1, c] + eps) * (w[c] if w.shape[0] > 0 else 1.0)
        sh = (b[c] if b.shape[0] > 0 else 0.0) - stats[0, c] * sc
        for k in range(U(c * m), U((c + 1) * m)):
            scale_e[k] = sc
            shift_e[k] = sh
    for n in range(n_):
        base = U(n * cm)
        for k in range(U(c0 * m), U(c1 * m)):
            of[base + k] = xf[base + k] * scale_e[k] + shift_e[k]


@jit(fastmath={"reassoc", "contract"})
def _bwd_small(g, x, w, eps, gx, gwb, kept, c0, c1):  # type: ignore[no-untyped-def]
    """Channels c0 to c1; the forward's statistics ``kept`` (2, C) where given (else (2, 0))."""
    n_, c_, m = x.shape
    cm = c_ * m
    k0 = U(c0 * m)
    k1 = U(c1 * m)
    xf = x.reshape(-1)
    gf = g.reshape(-1)
    df = gx.reshape(-1)
    cnt = n_ * m
    mean_e = np.empty(cm, x.dtype)
    if kept.shape[1] > 0:
        st = kept
        for c in range(c0, c1):
            for k in range(U(c * m), U((c + 1) * m)):
                mean_e[k] = st[0, c]
    else:
        st = np.empty((2, c_), np.float64)
        _stats_small(xf, n_, cm, c0, c1, m, mean_e, st[0], st[1])
    sg = np.zeros(cm, np.float64)
    sgx = np.zeros(cm, np.float64)
    for n in range(n_):
        base = U(n * cm)
        for k in range(k0, k1):
            gv = gf[base + k]
            sg[k] += gv
            sgx[k] += gv * (xf[base + k] - mean_e[k])
    a_e = np.empty(cm, x.dtype)
    k1_e = np.empty(cm, x.dtype)
    k2_e = np.empty(cm, x.dtype)
    for c in range(c0, c1):
        s0 = 0.0
        s1 = 0.0
        for k in range(U(c * m), U((c + 1) * m)):
            s0 += sg[k]
            s1 += sgx[k]
        rstd = 1.0 / np.sqrt(st[1, c] + eps)
        gwb[0, c] = s1 * rstd
        gwb[1, c] = s0
        a = rstd * (w[c] if w.shape[0] > 0 else 1.0)
        for k in range(U(c * m), U((c + 1) * m)):
            a_e[k] = a
            k1_e[k] = s0 / cnt
            k2_e[k] = s1 * rstd * rstd / cnt
    if df.size == 0:
        return
    for n in range(n_):
        base = U(n * cm)
        for k in range(k0, k1):
            df[base + k] = a_e[k] * (gf[base + k] - k1_e[k] - (xf[base + k] - mean_e[k]) * k2_e[k])


SMALL_PLANE = 32  # planes of at most this many elements take the (N, C * M) passes


def _vec(a: Any, dtype: Any) -> Any:
    return np.empty(0, dtype=dtype) if a is None else np.ascontiguousarray(a, dtype=dtype)


# Parallel forms: the channels in chunks, one per thread, each the serial kernel (the same
# bits), from PARALLEL_MIN elements when numpy's BLAS shares numba's threads


@jit(parallel=True)
def _fwd_par(x, w, b, eps, out, stats):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        c0, c1 = bounds(x.shape[1], p, i, 1)
        _fwd(x, w, b, eps, out, stats, c0, c1)


@jit(parallel=True)
def _fwd_small_par(x, w, b, eps, out, stats):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        c0, c1 = bounds(x.shape[1], p, i, 1)
        _fwd_small(x, w, b, eps, out, stats, c0, c1)


@jit(parallel=True)
def _bwd_par(g, x, w, eps, gx, gwb, st):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        c0, c1 = bounds(x.shape[1], p, i, 1)
        _bwd(g, x, w, eps, gx, gwb, st, c0, c1)


@jit(parallel=True)
def _bwd_small_par(g, x, w, eps, gx, gwb, st):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        c0, c1 = bounds(x.shape[1], p, i, 1)
        _bwd_small(g, x, w, eps, gx, gwb, st, c0, c1)


def _parallel(x3: Any) -> bool:
    """Whether a pass over (N, C, M) ``x3`` runs on several threads (shared with BLAS)."""
    from . import threads  # noqa: PLC0415

    return x3.shape[1] >= 2 and threads.worth(x3.size, PARALLEL_MIN)


def batch_norm(x: Any, w: Any, b: Any, eps: float) -> tuple[Any, Any]:
    """``y`` for (N, C, ...) ``x`` normalised per channel with batch statistics, and the
    (2, C) float64 mean and biased variance."""
    n, c = x.shape[:2]
    x3 = np.ascontiguousarray(x).reshape(n, c, -1)
    out = np.empty(x.shape, dtype=x.dtype)
    stats = np.empty((2, c), dtype=np.float64)
    args = (x3, _vec(w, x.dtype), _vec(b, x.dtype), float(eps), out.reshape(x3.shape), stats)
    small = x3.shape[2] <= SMALL_PLANE
    if _parallel(x3):
        (_fwd_small_par if small else _fwd_par)(*args)
    else:
        (_fwd_small if small else _fwd)(*args, 0, c)
    return out, stats


def batch_norm_grad(g: Any, x: Any, w: Any, eps: float, need_x: bool,
                    stats: Any = None) -> tuple[Any, Any, Any]:
    """The gradients of ``batch_norm`` for x (None unless ``need_x``), weight and bias; with
    ``stats``, the forward's (2, C) float64 statistics of ``x``, not computed again."""
    n, c = x.shape[:2]
    x3 = np.ascontiguousarray(x).reshape(n, c, -1)
    g3 = np.ascontiguousarray(g, dtype=x.dtype).reshape(x3.shape)
    gx = np.empty(x.shape if need_x else (0,), dtype=x.dtype)
    gwb = np.empty((2, c), dtype=np.float64)
    st = np.empty((2, 0), dtype=np.float64) if stats is None else stats
    args = (g3, x3, _vec(w, x.dtype), float(eps), gx.reshape(x3.shape) if need_x else gx, gwb,
            st)
    small = x3.shape[2] <= SMALL_PLANE
    if _parallel(x3):
        (_bwd_small_par if small else _bwd_par)(*args)
    else:
        (_bwd_small if small else _bwd)(*args, 0, c)
    return (gx if need_x else None), gwb[0].astype(x.dtype), gwb[1].astype(x.dtype)


# The forward's statistics, kept for the backward of the same batch (as PyTorch's
# ``save_mean`` / ``save_invstd``) and for the running estimates' update that follows the
# forward at once (``nn.functional.batch_norm``): each reads ``x`` twice less. Keyed by the
# input array's identity, checked through a weak reference (a new array at a freed one's
# address finds a dead reference), the latest KEPT batches only; the engine refuses a backward
# whose saved input changed in place, and the running update takes only the statistics of the
# forward just run (``_fresh``). Both passes compute the same numbers with the same code, so a
# hit or a miss gives the same bits.
KEPT = 256
_kept: dict[int, tuple[Any, Any]] = {}
_fresh = threading.local()


def _keep(x: Any, stats: Any) -> None:
    if len(_kept) >= KEPT:
        try:
            _kept.pop(next(iter(_kept)), None)
        except (StopIteration, RuntimeError):  # emptied or changed by another thread
            pass
    try:
        _kept[id(x)] = (weakref.ref(x), stats)
    except TypeError:  # an array type without weak references: nothing kept
        return
    _fresh.x = _kept[id(x)][0]


def kept_stats(x: Any) -> Any:
    """The (2, C) statistics ``batch_norm_y`` computed for this very array ``x``, or None."""
    hit = _kept.get(id(x))
    return hit[1] if hit is not None and hit[0]() is x else None


@jit(fastmath={"reassoc", "contract"})
def _all_stats(x, stats, c0, c1):  # type: ignore[no-untyped-def]
    n_, c_, m = x.shape
    xf = x.reshape(-1)
    for c in range(c0, c1):
        stats[0, c], stats[1, c] = _stats(xf, n_, c, c_, m)


@jit(parallel=True)
def _all_stats_par(x, stats):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        c0, c1 = bounds(x.shape[1], p, i, 1)
        _all_stats(x, stats, c0, c1)


def channel_stats(x: Any) -> Any:
    """The (2, C) float64 per-channel mean and biased variance of (N, C, ...) ``x``."""
    n, c = x.shape[:2]
    stats = np.empty((2, c), dtype=np.float64)
    x3 = np.ascontiguousarray(x).reshape(n, c, -1)
    if _parallel(x3):
        _all_stats_par(x3, stats)
    else:
        _all_stats(x3, stats, 0, c)
    return stats


# entries with the arguments of their references (nn/_f_norm.py)
def batch_norm_y(x: Any, w: Any, b: Any, eps: float) -> Any:
    y, stats = batch_norm(x, w, b, eps)
    _keep(x, stats)
    return y


def batch_norm_grad_op(
    xp: Any, g: Any, x: Any, w: Any, eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    gx, gw, gb = batch_norm_grad(g, x, w, eps, bool(needs[0]), kept_stats(x))
    return gx, (gw if needs[1] else None), (gb if needs[2] else None)


def channel_mean_var(x: Any) -> tuple[Any, Any]:
    """Per-channel mean and biased variance (float64) of ``x`` (N, C, ...)."""
    fresh, _fresh.x = getattr(_fresh, "x", None), None
    st = kept_stats(x) if fresh is not None and fresh() is x else None
    if st is None:
        st = channel_stats(x)
    return st[0], st[1]
