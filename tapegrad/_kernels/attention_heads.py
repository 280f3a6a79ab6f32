"""Self-attention of small heads (numba): one (batch, head) block at a time, its products,
softmax and weighted sum in one pass while the block is in cache, forward and backward.

For short sequences and narrow heads (a text encoder's 4 heads of 16 over 10 tokens) one
block's products are 10 x 10 x 16: OpenBLAS's call costs more than its arithmetic, and the
batched path (``bmm`` and the row passes of ``attention``) makes two calls a block forward and
five backward. Here a block's queries are copied once, transposed, into small scratch (queries
padded to lp, a multiple of 8, with zeros), and its scores are kept key by key: a row of lp
queries per key. Every product is one call of ``_mm``: tiles of four rows by sixteen columns
along a contiguous axis, 64 running sums (eight chains of multiply-adds in flight, where one
row of eight sums a query waited on each step's latency). The sums are written as scalars and
packed into vector registers by LLVM's SLP vectorizer, which numba leaves off by default and
which these kernels compile with (as ``conv_blocked``'s); no sum is reordered across lanes, so
no fast-math is needed. With the queries along the lanes, the softmax over keys runs down the
columns (maxima and sums eight queries at a time, no sum across lanes). Backward recomputes
the probabilities and writes the gradients of q, k and v (packed as the input is) and of an
additive mask. The products and the softmax are compiled once each and called at their
addresses (``twins.call_at``), so the block kernels stay small to compile.

CLIP's text tower's shape, (128, 10, 3, 4, 16) float32 (AMD EPYC Zen 4, 2 cores, side by
side with the former kernel of one query's eight lanes at a time): forward + backward 1.6-2.0x
as fast at one thread, 1.4-1.6x at two; at one thread forward about 1,400 cycles a block
at 3.65 GHz (3,400-3,900 before), backward about 3,600 (5,900-6,200).

The input is the packed (B, L, 3, H, D) projection of ``attention_qkv`` (C-contiguous), D a
multiple of 8. Sums run in another order than BLAS's: results agree with the batched path to
float rounding. Blocks split in chunks over numba's threads, one chunk per thread, when the work
is large enough (each block's arithmetic is the serial kernel's: the same bits).
Imported only when numba is selected.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from numba import prange

from .._backend import np
from . import jit, numba
from .attention_tiles import _mm, _mm8
from .chunks import bounds, num_threads
from .softmax import fexp
from .twins import call_at, entry, entry_by

U = np.uint64
MAX_LEN = 24  # tokens: faster than the batched path up to here (docs/design.md)
MAX_WIDTH = 64  # a head's width


@jit(fastmath={"contract"})
def _softmax_cols(s, n, lp, mf, ms, mb):  # type: ignore[no-untyped-def]
    """The softmax over the keys of (n keys x lp queries) scaled scores ``s``, in place and
    normalised (0 where a query's keys are all masked), ``mf[mb + i * ms[2] + j * ms[3]]``
    added to query i's score of key j: down the columns, eight queries at a time (no sum
    across lanes). Compiled once for the forward and backward kernels, called at an address
    (``_fwd_blocks``' ``fc``)."""
    dt = s.dtype.type
    zero = dt(0)
    lo = dt(-3.4028234663852886e38)  # float32's lowest: a row of -inf gives exp(-inf) = 0
    if mf is not None:
        for j in range(n):
            mj = mb + j * ms[3]
            if ms[2] == 0:  # a key's mask the same for every query (padding): a vector add
                v = mf[mj]
                for i in range(lp):
                    s[j * lp + i] += v
            else:
                for i in range(n):
                    s[j * lp + i] += mf[mj + i * ms[2]]
    for i0 in range(U(0), U(lp), U(8)):
        m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = lo
        for j in range(U(n)):
            o = j * U(lp) + i0
            m0 = max(m0, s[o])
            m1 = max(m1, s[o + U(1)])
            m2 = max(m2, s[o + U(2)])
            m3 = max(m3, s[o + U(3)])
            m4 = max(m4, s[o + U(4)])
            m5 = max(m5, s[o + U(5)])
            m6 = max(m6, s[o + U(6)])
            m7 = max(m7, s[o + U(7)])
        for j in range(U(n)):
            o = j * U(lp) + i0
            s[o] -= m0
            s[o + U(1)] -= m1
            s[o + U(2)] -= m2
            s[o + U(3)] -= m3
            s[o + U(4)] -= m4
            s[o + U(5)] -= m5
            s[o + U(6)] -= m6
            s[o + U(7)] -= m7
    for k in range(U(n * lp)):  # one loop the vectorizer takes whole
        s[k] = fexp(s[k])
    for i0 in range(U(0), U(lp), U(8)):
        t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = zero
        for j in range(U(n)):
            o = j * U(lp) + i0
            t0 += s[o]
            t1 += s[o + U(1)]
            t2 += s[o + U(2)]
            t3 += s[o + U(3)]
            t4 += s[o + U(4)]
            t5 += s[o + U(5)]
            t6 += s[o + U(6)]
            t7 += s[o + U(7)]
        t0 = dt(1) / t0 if t0 > zero else zero
        t1 = dt(1) / t1 if t1 > zero else zero
        t2 = dt(1) / t2 if t2 > zero else zero
        t3 = dt(1) / t3 if t3 > zero else zero
        t4 = dt(1) / t4 if t4 > zero else zero
        t5 = dt(1) / t5 if t5 > zero else zero
        t6 = dt(1) / t6 if t6 > zero else zero
        t7 = dt(1) / t7 if t7 > zero else zero
        for j in range(U(n)):
            o = j * U(lp) + i0
            s[o] *= t0
            s[o + U(1)] *= t1
            s[o + U(2)] *= t2
            s[o + U(3)] *= t3
            s[o + U(4)] *= t4
            s[o + U(5)] *= t5
            s[o + U(6)] *= t6
            s[o + U(7)] *= t7


@jit(fastmath={"contract"}, inline="always")
def _lanes_dot(a, ao, b, bo, d):  # type: ignore[no-untyped-def]
    """``sum_c a[ao + c] * b[bo + c]`` for c < d (a multiple of 8), in eight running sums."""
    z = a.dtype.type(0)
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = z
    for c0 in range(U(0), U(d), U(8)):
        i = U(ao) + c0
        k = U(bo) + c0
        t0 += a[i] * b[k]
        t1 += a[i + U(1)] * b[k + U(1)]
        t2 += a[i + U(2)] * b[k + U(2)]
        t3 += a[i + U(3)] * b[k + U(3)]
        t4 += a[i + U(4)] * b[k + U(4)]
        t5 += a[i + U(5)] * b[k + U(5)]
        t6 += a[i + U(6)] * b[k + U(6)]
        t7 += a[i + U(7)] * b[k + U(7)]
    return ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7))


@jit(fastmath={"contract"}, inline="always")
def _load(src, so, ss, n_l, d, lp, dst, f):  # type: ignore[no-untyped-def]
    """The n_l rows of d at ``src[so + i * ss]`` times ``f`` into ``dst`` (d x lp),
    transposed; the padding columns stay zero. Written out eight a step: as a loop over c,
    LLVM vectorized the strided stores' addresses and stored lane by lane, at about twice the
    time."""
    for i in range(U(n_l)):
        r = U(so) + i * U(ss)
        for c0 in range(U(0), U(d), U(8)):
            o = c0 * U(lp) + i
            q = r + c0
            dst[o] = src[q] * f
            o += U(lp)
            dst[o] = src[q + U(1)] * f
            o += U(lp)
            dst[o] = src[q + U(2)] * f
            o += U(lp)
            dst[o] = src[q + U(3)] * f
            o += U(lp)
            dst[o] = src[q + U(4)] * f
            o += U(lp)
            dst[o] = src[q + U(5)] * f
            o += U(lp)
            dst[o] = src[q + U(6)] * f
            o += U(lp)
            dst[o] = src[q + U(7)] * f


@jit(fastmath={"contract"})
def _fwd_blocks(xf, n_l, n_h, d, mf, ms, scale, of, r0, r1, fc, fm, f8):  # type: ignore[no-untyped-def]
    """Blocks r0 to r1 (flat, b * n_h + h) of the output (B, L, H, D), flat in ``of``; the
    products by ``_mm``'s compiled code at ``fm``: a block's scores, key by key (rows of lp
    queries), their softmax by ``_softmax_cols`` at ``fc``, then the weighted sums of the
    values."""
    lp = (n_l + 7) // 8 * 8
    dt = xf.dtype
    qt = np.zeros(d * lp, dt)
    s = np.zeros(n_l * lp, dt)
    row = 3 * n_h * d  # from one token's q (k, v) to the next's
    kd = n_h * d  # from a token's q to its k, and from its k to its v
    for bh in range(r0, r1):
        b = bh // n_h
        h = bh - b * n_h
        base = b * n_l * row + h * d
        _load(xf, base, row, n_l, d, lp, qt, scale)
        call_at(fm, (xf, base + kd, row, 1, n_l, d, qt, 0, lp, lp, s, 0, lp, f8))
        mb = 0 if mf is None else b * ms[0] + h * ms[1]
        call_at(fc, (s, n_l, lp, mf, ms, mb))
        call_at(fm, (s, 0, 1, lp, n_l, n_l, xf, base + 2 * kd, row, d, of,
                     (b * n_l * n_h + h) * d, n_h * d, f8))


@jit(parallel=True, fastmath={"contract"})
def _fwd_par(xf, n_l, n_h, d, mf, ms, scale, of, n, fc, fm, f8, fp):  # type: ignore[no-untyped-def]
    """``_fwd_blocks`` in chunks of blocks, one per thread, each a call of its compiled code at
    ``fp`` (``twins.entry``): a call by name would link its IR into this twin and
    optimise it again (1.5 CPU s to compile, ``_bwd_par`` 2.9)."""
    p = num_threads()
    for t in prange(p):
        r0, r1 = bounds(n, p, t, 1)
        call_at(fp, (xf, n_l, n_h, d, mf, ms, scale, of, r0, r1, fc, fm, f8))


@jit(fastmath={"contract"})
def _bwd_sums(xf, gf, sb, pb, dxf, base, gbase, row, grow, n_l, d, fm, f8):  # type: ignore[no-untyped-def]
    """One block's q, k and v gradients in ``dxf`` from its score gradients ``sb`` and
    probabilities ``pb`` (n_l keys x lp queries), by ``_mm`` at ``fm``: dQ = dS K,
    dK = dS^T Q, dV = P^T G."""
    lp = (n_l + 7) // 8 * 8
    kd = row // 3
    call_at(fm, (sb, 0, 1, lp, n_l, n_l, xf, base + kd, row, d, dxf, base, row, f8))
    call_at(fm, (sb, 0, lp, 1, n_l, n_l, xf, base, row, d, dxf, base + kd, row, f8))
    call_at(fm, (pb, 0, lp, 1, n_l, n_l, gf, gbase, grow, d, dxf, base + 2 * kd, row, f8))


@jit(fastmath={"contract"})
def _bwd_scores(xf, gf, qt, gt, pb, sb, base, gbase, row, grow, n_l, d, scale, fm, f8):  # type: ignore[no-untyped-def]
    """One block's queries and output gradients into ``qt`` and ``gt`` (transposed), its
    scaled scores K Q^T into ``pb`` and dP^T = V G^T into ``sb`` (rows of lp), by ``_mm`` at
    ``fm``."""
    lp = (n_l + 7) // 8 * 8
    kd = row // 3
    _load(xf, base, row, n_l, d, lp, qt, scale)
    _load(gf, gbase, grow, n_l, d, lp, gt, xf.dtype.type(1))
    call_at(fm, (xf, base + kd, row, 1, n_l, d, qt, 0, lp, lp, pb, 0, lp, f8))
    call_at(fm, (xf, base + 2 * kd, row, 1, n_l, d, gt, 0, lp, lp, sb, 0, lp, f8))


@jit(fastmath={"contract"})
def _bwd_blocks(xf, gf, of, n_l, n_h, d, mf, ms, scale, dxf, dmf, r0, r1, fc, fq, fs, fm, f8):  # type: ignore[no-untyped-def]
    """Blocks r0 to r1 of the packed gradient ``dxf`` (B, L, 3, H, D), given the output
    gradient ``gf`` and output ``of`` (B, L, H, D); ``dmf`` (B, H, L, L) or None. A block's
    products run in ``_bwd_scores`` and ``_bwd_sums``, their compiled code at ``fq`` and ``fs``
    (``twins.entry``; compiled into this kernel, the three took 2.5 CPU s), its softmax at
    ``fc``."""
    lp = (n_l + 7) // 8 * 8
    dt = xf.dtype
    qt = np.zeros(d * lp, dt)
    gt = np.zeros(d * lp, dt)
    pb = np.zeros(n_l * lp, dt)  # the block's probabilities, a row of lp queries per key
    sb = np.zeros(n_l * lp, dt)  # and its scores' gradients
    ci = np.zeros(lp, dt)
    row = 3 * n_h * d
    grow = n_h * d  # from one token's output (gradient) row to the next's
    for bh in range(r0, r1):
        b = bh // n_h
        h = bh - b * n_h
        base = b * n_l * row + h * d
        gbase = b * n_l * grow + h * d
        call_at(fq, (xf, gf, qt, gt, pb, sb, base, gbase, row, grow, n_l, d, scale, fm, f8))
        mb = 0 if mf is None else b * ms[0] + h * ms[1]
        call_at(fc, (pb, n_l, lp, mf, ms, mb))
        for i in range(n_l):
            go = gbase + i * grow
            ci[i] = _lanes_dot(gf, go, of, go, d)
        mo = (b * n_h + h) * n_l * n_l
        for j in range(n_l):
            for i in range(n_l):
                e = pb[j * lp + i] * (sb[j * lp + i] - ci[i])
                if dmf is not None:
                    dmf[mo + i * n_l + j] = e
                sb[j * lp + i] = e * scale
        call_at(fs, (xf, gf, sb, pb, dxf, base, gbase, row, grow, n_l, d, fm, f8))


@jit(parallel=True, fastmath={"contract"})
def _bwd_par(xf, gf, of, n_l, n_h, d, mf, ms, scale, dxf, dmf, n, fc, fq, fs, fm, f8, fp):  # type: ignore[no-untyped-def]
    """``_bwd_blocks`` in chunks of blocks, through its compiled code at ``fp`` (as
    ``_fwd_par``)."""
    p = num_threads()
    for t in prange(p):
        r0, r1 = bounds(n, p, t, 1)
        call_at(fp, (xf, gf, of, n_l, n_h, d, mf, ms, scale, dxf, dmf, r0, r1, fc, fq, fs, fm, f8))


_lock = threading.Lock()
_compiled: set[tuple[Any, ...]] = set()  # argument kinds whose kernels are loaded or compiled


@contextlib.contextmanager
def _slp(kind: tuple[Any, ...]) -> Iterator[None]:
    """LLVM's SLP vectorizer on while a call of a new argument kind may compile the kernels
    (their first call in a process without a cache): it packs the eight lanes' scalar sums
    into vector registers (off, as numba leaves it, they run scalar at about half the speed).
    Later calls of that kind run as they are."""
    if kind in _compiled:
        yield
        return
    cfg = numba().core.config  # type: ignore[union-attr]
    with _lock:
        old = cfg.SLP_VECTORIZE
        cfg.SLP_VECTORIZE = 1
        try:
            yield
            _compiled.add(kind)
        finally:
            cfg.SLP_VECTORIZE = old


def fits(x: Any) -> bool:
    """Whether packed (B, L, 3, H, D) ``x`` has small heads: the kernels' shapes."""
    n_l, d = x.shape[1], x.shape[4]
    return 1 <= n_l <= MAX_LEN and d % 8 == 0 and 8 <= d <= MAX_WIDTH


# a call's size (its input's elements times the sequence length: about the multiply-adds of one
# product over all blocks) from which the blocks split over the threads
PARALLEL_MIN = 1 << 16


def _parallel(x: Any) -> bool:
    """Whether the blocks split over several threads (shared with BLAS)."""
    from . import threads  # noqa: PLC0415

    return x.shape[0] * x.shape[3] >= 8 and threads.worth(x.size * x.shape[1], PARALLEL_MIN)


def _mask(mask: Any) -> tuple[Any, Any]:
    if mask is None:
        return None, None
    from .attention import mask_strides  # noqa: PLC0415

    return mask_strides(mask)


def forward(x: Any, mask: Any, scale: float) -> Any:
    """``softmax(q k^T * scale + mask) v`` for the (B, H, L, D) q, k, v packed in C-contiguous
    (B, L, 3, H, D) ``x``: a (B, H, L, D) view of a new (B, L, H, D) array. ``mask`` is None or
    4-D, of x's dtype, and broadcasts to (B, H, L, L)."""
    n_b, n_l, _, n_h, d = x.shape
    out = np.empty((n_b, n_l, n_h, d), x.dtype)
    mf, ms = _mask(mask)
    sc = x.dtype.type(scale)
    args = (x.reshape(-1), n_l, n_h, d, mf, ms, sc, out.reshape(-1))
    par = _parallel(x)
    with _slp(("fwd", x.dtype.char, mf is None, par)):
        fms = (_cols(x.dtype, mf, ms), *_parts(x.dtype)[2:])
        if par:
            _fwd_par(*args, n_b * n_h, *fms, entry(_fwd_blocks, *args, 0, 0, *fms))
        else:
            _fwd_blocks(*args, 0, n_b * n_h, *fms)
    return out.transpose(0, 2, 1, 3)


_PARTS: dict[str, tuple[int, int, int, int]] = {}


def _parts(dt: Any) -> tuple[int, int, int, int]:
    """The addresses of ``_bwd_scores``', ``_bwd_sums``', ``_mm``'s and ``_mm8``'s compiled
    code for dtype ``dt`` (``twins.entry``, by calls over no rows), kept by dtype: their
    arguments are flat arrays of the input's dtype, int64s and a scalar of that dtype."""
    fps = _PARTS.get(dt.char)
    if fps is None:
        z = np.zeros(0, dt)
        f8 = entry(_mm8, z, 0, 0, 0, 0, 0, z, 0, 0, 16, z, 0, 0)
        fm = entry(_mm, z, 0, 0, 0, 0, 0, z, 0, 0, 16, z, 0, 0, f8)  # products of none
        fps = _PARTS[dt.char] = (
            entry(_bwd_scores, z, z, z, z, z, z, 0, 0, 0, 0, 0, 0, dt.type(1), fm, f8),
            entry(_bwd_sums, z, z, z, z, z, 0, 0, 0, 0, 0, 0, fm, f8),
            fm,
            f8,
        )
    return fps


def _cols(dt: Any, mf: Any, ms: Any) -> int:
    """The address of ``_softmax_cols``' compiled code for dtype ``dt``, with a mask or not."""
    z = np.zeros(0, dt)
    return entry_by(("cols", dt.char, mf is None), _softmax_cols, z, 0, 0, mf, ms, 0)


def backward(x: Any, g: Any, out: Any, mask: Any, scale: float, dmask: Any) -> Any:
    """The gradient of packed ``x``: a new (B, L, 3, H, D) array, given the output gradient ``g``
    and the output ``out`` ((B, H, L, D) of any strides); ``dmask`` (when given, (B, H, L, L)
    C-contiguous) gets the additive mask's, before the scale (as ``attention``'s)."""
    n_b, n_l, _, n_h, d = x.shape
    gb = np.ascontiguousarray(g.transpose(0, 2, 1, 3))
    ob = np.ascontiguousarray(out.transpose(0, 2, 1, 3))
    dx = np.empty_like(x)
    mf, ms = _mask(mask)
    sc = x.dtype.type(scale)
    dm = None if dmask is None else dmask.reshape(-1)
    args = (x.reshape(-1), gb.reshape(-1), ob.reshape(-1), n_l, n_h, d, mf, ms, sc,
            dx.reshape(-1), dm)
    par = _parallel(x)
    with _slp(("bwd", x.dtype.char, mf is None, dm is None, par)):
        fqs = (_cols(x.dtype, mf, ms), *_parts(x.dtype))
        if par:
            _bwd_par(*args, n_b * n_h, *fqs, entry(_bwd_blocks, *args, 0, 0, *fqs))
        else:
            _bwd_blocks(*args, 0, n_b * n_h, *fqs)
    return dx


# entries with the arguments of their references (nn/_f_attention.py)
def forward_op(x: Any, mask: Any, scale: float, keep: Any) -> Any:
    return forward(x, mask, scale)  # backward recomputes: nothing is kept


def backward_op(
    xp: Any, g: Any, out: Any, x: Any, mask: Any, scale: float, needs: Any, keep: Any
) -> tuple[Any, Any]:
    n_b, n_l, _, n_h, _ = x.shape
    dmask = np.empty((n_b, n_h, n_l, n_l), x.dtype) if needs[1] else None
    return backward(x, g, out, mask, scale, dmask), dmask
