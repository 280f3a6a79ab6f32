"""Self-attention of small heads (numba): one (batch, head) block at a time, its products,
softmax and weighted sum in one pass while the block is in cache, forward and backward.

For short sequences and narrow heads (a text encoder's 4 heads of 16 over 10 tokens) one
block's products are 10 x 10 x 16: OpenBLAS's call costs more than its arithmetic, and the
batched path (``bmm`` and the row passes of ``attention``) makes two calls a block forward and
five backward. Here a block's keys (transposed) and values are copied once into small
scratch, and every product runs eight lanes at a time along a contiguous axis: the scores of
eight keys from one query (keys padded to a multiple of 8 with zeros), or eight columns of a
weighted sum of rows. The eight sums are written as scalars and packed into vector registers
by LLVM's SLP vectorizer, which numba leaves off by default and which these kernels compile
with (as ``conv_blocked``'s); no sum is reordered across lanes, so no fast-math is needed.
Backward recomputes a row's probabilities and writes the gradients of q, k and v (packed as
the input is) and of an additive mask.

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
from .chunks import bounds, num_threads
from .softmax import fexp
from .twins import call_at, entry

U = np.uint64
MAX_LEN = 24  # tokens: faster than the batched path up to here (docs/design.md)
MAX_WIDTH = 64  # a head's width


@jit(fastmath={"contract"}, inline="always")
def _lanes_vm(a, ao, t, to, sp, n, out, oo):  # type: ignore[no-untyped-def]
    """``out[oo + j] = sum_c a[ao + c] * t[to + c * sp + j]`` for j < sp (a multiple of 8)."""
    z = out.dtype.type(0)
    for j0 in range(U(0), U(sp), U(8)):
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
        for c in range(U(n)):
            ac = a[U(ao) + c]
            tb = U(to) + c * U(sp) + j0
            a0 += ac * t[tb]
            a1 += ac * t[tb + U(1)]
            a2 += ac * t[tb + U(2)]
            a3 += ac * t[tb + U(3)]
            a4 += ac * t[tb + U(4)]
            a5 += ac * t[tb + U(5)]
            a6 += ac * t[tb + U(6)]
            a7 += ac * t[tb + U(7)]
        o = U(oo) + j0
        out[o] = a0
        out[o + U(1)] = a1
        out[o + U(2)] = a2
        out[o + U(3)] = a3
        out[o + U(4)] = a4
        out[o + U(5)] = a5
        out[o + U(6)] = a6
        out[o + U(7)] = a7


@jit(fastmath={"contract"}, inline="always")
def _lanes_mv(p, po, ps, n, t, to, stride, d, out, oo, scale):  # type: ignore[no-untyped-def]
    """``out[oo + c] = scale * sum_j p[po + j * ps] * t[to + j * stride + c]`` for c < d (a
    multiple of 8): a weighted sum of n rows, eight columns at a time in registers."""
    z = out.dtype.type(0)
    for c0 in range(U(0), U(d), U(8)):
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
        for j in range(U(n)):
            pj = p[U(po) + j * U(ps)]
            tb = U(to) + j * U(stride) + c0
            a0 += pj * t[tb]
            a1 += pj * t[tb + U(1)]
            a2 += pj * t[tb + U(2)]
            a3 += pj * t[tb + U(3)]
            a4 += pj * t[tb + U(4)]
            a5 += pj * t[tb + U(5)]
            a6 += pj * t[tb + U(6)]
            a7 += pj * t[tb + U(7)]
        o = U(oo) + c0
        out[o] = a0 * scale
        out[o + U(1)] = a1 * scale
        out[o + U(2)] = a2 * scale
        out[o + U(3)] = a3 * scale
        out[o + U(4)] = a4 * scale
        out[o + U(5)] = a5 * scale
        out[o + U(6)] = a6 * scale
        out[o + U(7)] = a7 * scale


@jit(fastmath={"contract"}, inline="always")
def _softmax(s, n, mf, ms, mb, scale):  # type: ignore[no-untyped-def]
    """``s = exp(s * scale + mask - max)`` in place over the row's n scores, 0 on the padding
    up to s.size (a multiple of 8); returns 1 / the sum (0 for a fully masked row). Eight lanes
    at a time."""
    dt = s.dtype.type
    zero = dt(0)
    sp = s.size
    if mf is not None:
        for j in range(n):
            s[j] = s[j] * scale + mf[mb + j * ms[3]]
    else:
        for j in range(n):
            s[j] *= scale
    for j in range(n, sp):
        s[j] = -np.inf  # exp gives 0
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = dt(-np.inf)
    for j0 in range(U(0), U(sp), U(8)):
        m0 = max(m0, s[j0])
        m1 = max(m1, s[j0 + U(1)])
        m2 = max(m2, s[j0 + U(2)])
        m3 = max(m3, s[j0 + U(3)])
        m4 = max(m4, s[j0 + U(4)])
        m5 = max(m5, s[j0 + U(5)])
        m6 = max(m6, s[j0 + U(6)])
        m7 = max(m7, s[j0 + U(7)])
    m = max(m0, m1, m2, m3, m4, m5, m6, m7)
    if not np.isfinite(m):
        m = zero
    for j in range(U(sp)):  # one loop the vectorizer takes whole (the padding gives 0)
        s[j] = fexp(s[j] - m)
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = zero
    for j0 in range(U(0), U(sp), U(8)):
        t0 += s[j0]
        t1 += s[j0 + U(1)]
        t2 += s[j0 + U(2)]
        t3 += s[j0 + U(3)]
        t4 += s[j0 + U(4)]
        t5 += s[j0 + U(5)]
        t6 += s[j0 + U(6)]
        t7 += s[j0 + U(7)]
    tot = ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7))
    return dt(1) / tot if tot > zero else zero


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
def _load(xf, base, row, kd, n_l, d, sp, kt, vt):  # type: ignore[no-untyped-def]
    """A block's keys into ``kt`` (d x sp) and, when ``vt`` is given, its values into ``vt``
    (d x sp), both transposed; the padding columns stay zero."""
    for j in range(n_l):
        kj = base + j * row + kd
        for c in range(d):
            kt[c * sp + j] = xf[kj + c]
        if vt is not None:
            for c in range(d):
                vt[c * sp + j] = xf[kj + kd + c]


@jit(fastmath={"contract"})
def _fwd_blocks(xf, n_l, n_h, d, mf, ms, scale, of, r0, r1):  # type: ignore[no-untyped-def]
    """Blocks r0 to r1 (flat, b * n_h + h) of the output (B, L, H, D), flat in ``of``."""
    sp = (n_l + 7) // 8 * 8
    dt = xf.dtype
    kt = np.zeros(d * sp, dt)
    s = np.zeros(sp, dt)
    row = 3 * n_h * d  # from one token's q (k, v) to the next's
    kd = n_h * d  # from a token's q to its k, and from its k to its v
    for bh in range(r0, r1):
        b = bh // n_h
        h = bh - b * n_h
        base = b * n_l * row + h * d
        _load(xf, base, row, kd, n_l, d, sp, kt, None)
        for i in range(n_l):
            _lanes_vm(xf, base + i * row, kt, 0, sp, d, s, 0)
            mb = 0 if mf is None else b * ms[0] + h * ms[1] + i * ms[2]
            inv = _softmax(s, n_l, mf, ms, mb, scale)
            _lanes_mv(s, 0, 1, n_l, xf, base + 2 * kd, row, d, of, ((b * n_l + i) * n_h + h) * d, inv)


@jit(parallel=True, fastmath={"contract"})
def _fwd_par(xf, n_l, n_h, d, mf, ms, scale, of, n, fp):  # type: ignore[no-untyped-def]
    """``_fwd_blocks`` in chunks of blocks, one per thread, each a call of its compiled code at
    ``fp`` (``twins.entry``): a call by name would link its IR into this twin and
    optimise it again (1.5 CPU s to compile, ``_bwd_par`` 2.9)."""
    p = num_threads()
    for t in prange(p):
        r0, r1 = bounds(n, p, t, 1)
        call_at(fp, (xf, n_l, n_h, d, mf, ms, scale, of, r0, r1))


@jit(fastmath={"contract"})
def _bwd_sums(xf, gf, sb, pb, dxf, base, gbase, row, grow, n_l, d):  # type: ignore[no-untyped-def]
    """One block's q, k and v gradients in ``dxf`` from its score gradients ``sb`` and
    probabilities ``pb`` (rows of sp): dq_i = ds_i K, dk_j = sum_i ds_ij q_i, dv_j = sum_i p_ij
    g_i, a weighted sum of rows each (one copy of its code: each copy inlined was compile time)."""
    sp = (n_l + 7) // 8 * 8
    kd = row // 3
    one = xf.dtype.type(1)
    for t in range(3 * n_l):
        if t < n_l:  # dq_t
            w, po, ps, rows, to, st, oo = sb, t * sp, 1, xf, base + kd, row, base + t * row
        else:  # dk_j, then dv_j
            j, v = divmod(t - n_l, 2)
            w, po, ps, rows = pb if v else sb, j, sp, gf if v else xf
            to, st, oo = gbase if v else base, grow if v else row, base + j * row + kd + v * kd
        _lanes_mv(w, po, ps, n_l, rows, to, st, d, dxf, oo, one)


@jit(fastmath={"contract"})
def _bwd_scores(xf, gf, kt, vt, pb, sb, base, gbase, row, grow, n_l, d):  # type: ignore[no-untyped-def]
    """One block's keys and values into ``kt`` and ``vt`` (transposed), its scores q_i K^T
    into the rows of ``pb`` and dp = g_i V^T into those of ``sb`` (rows of sp)."""
    sp = (n_l + 7) // 8 * 8
    kd = row // 3
    _load(xf, base, row, kd, n_l, d, sp, kt, vt)
    for t in range(2 * n_l):
        i, v = divmod(t, 2)
        _lanes_vm(gf if v else xf, gbase + i * grow if v else base + i * row, vt if v else kt, 0,
                  sp, d, sb if v else pb, i * sp)


@jit(fastmath={"contract"})
def _bwd_blocks(xf, gf, of, n_l, n_h, d, mf, ms, scale, dxf, dmf, r0, r1, fq, fs):  # type: ignore[no-untyped-def]
    """Blocks r0 to r1 of the packed gradient ``dxf`` (B, L, 3, H, D), given the output
    gradient ``gf`` and output ``of`` (B, L, H, D); ``dmf`` (B, H, L, L) or None. A block's
    products run in ``_bwd_scores`` and ``_bwd_sums``, their compiled code at ``fq`` and ``fs``
    (``twins.entry``): compiled into this kernel, the three took 2.5 CPU s."""
    sp = (n_l + 7) // 8 * 8
    dt = xf.dtype
    kt = np.zeros(d * sp, dt)
    vt = np.zeros(d * sp, dt)
    pb = np.zeros(n_l * sp, dt)  # the block's probabilities, a row of sp per query
    sb = np.zeros(n_l * sp, dt)  # and its scores' gradients
    row = 3 * n_h * d
    grow = n_h * d  # from one token's output (gradient) row to the next's
    for bh in range(r0, r1):
        b = bh // n_h
        h = bh - b * n_h
        base = b * n_l * row + h * d
        gbase = b * n_l * grow + h * d
        call_at(fq, (xf, gf, kt, vt, pb, sb, base, gbase, row, grow, n_l, d))
        for i in range(n_l):
            go = gbase + i * grow
            p = pb[i * sp : (i + 1) * sp]
            ds = sb[i * sp : (i + 1) * sp]
            mb = 0 if mf is None else b * ms[0] + h * ms[1] + i * ms[2]
            inv = _softmax(p, n_l, mf, ms, mb, scale)
            ci = _lanes_dot(gf, go, of, go, d)
            mo = ((b * n_h + h) * n_l + i) * n_l
            for j in range(n_l):
                pj = p[j] * inv
                p[j] = pj
                e = pj * (ds[j] - ci)
                if dmf is not None:
                    dmf[mo + j] = e
                ds[j] = e * scale
        call_at(fs, (xf, gf, sb, pb, dxf, base, gbase, row, grow, n_l, d))


@jit(parallel=True, fastmath={"contract"})
def _bwd_par(xf, gf, of, n_l, n_h, d, mf, ms, scale, dxf, dmf, n, fq, fs, fp):  # type: ignore[no-untyped-def]
    """``_bwd_blocks`` in chunks of blocks, through its compiled code at ``fp`` (as
    ``_fwd_par``)."""
    p = num_threads()
    for t in prange(p):
        r0, r1 = bounds(n, p, t, 1)
        call_at(fp, (xf, gf, of, n_l, n_h, d, mf, ms, scale, dxf, dmf, r0, r1, fq, fs))


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
        if par:
            _fwd_par(*args, n_b * n_h, entry(_fwd_blocks, *args, 0, 0))
        else:
            _fwd_blocks(*args, 0, n_b * n_h)
    return out.transpose(0, 2, 1, 3)


_PARTS: dict[str, tuple[int, int]] = {}


def _parts(dt: Any) -> tuple[int, int]:
    """The addresses of ``_bwd_scores``' and ``_bwd_sums``' compiled code for dtype ``dt``
    (``twins.entry``, by calls over no rows), kept by dtype: their arguments are flat arrays of
    the input's dtype and int64s."""
    fps = _PARTS.get(dt.char)
    if fps is None:
        z = np.zeros(0, dt)
        fps = _PARTS[dt.char] = (entry(_bwd_scores, z, z, z, z, z, z, 0, 0, 0, 0, 0, 0),
                                 entry(_bwd_sums, z, z, z, z, z, 0, 0, 0, 0, 0, 0))
    return fps


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
        fqs = _parts(x.dtype)
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
