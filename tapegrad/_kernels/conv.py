"""im2col and col2im in one compiled pass each (numba), feeding the convolutions' GEMMs.

numpy builds the columns by copying a 6-D strided view of a zero-padded copy of the input
(short inner runs, and an extra pass for the padding), and col2im makes kh * kw strided adds
over a padded buffer, then a transposing copy. Here each column row (channel, kernel offset)
is filled run by run straight from the input, zeros where a window reaches into the padding;
col2im adds the rows back in the same (i, j) order as the numpy reference, so both give the
same bits. Flat indexing throughout (an array view per row costs more than the row at these
sizes), unsigned indices in the inner runs (numba's negative-index wraparound check
otherwise stops them vectorising: 10x measured), unit-stride runs compiled apart. Measured
against numpy on the benchmark convolutions: col2im 3-4x faster, im2col 1.2-1.3x (numpy's
strided copy is already one pass). ``unpack`` and ``pack`` move the GEMM's (O, n * Ho * Wo)
layout to and from (n, O, Ho, Wo) in contiguous runs of one plane (the forward adds the bias on
the way), where numpy's strided copies run over the whole 4-D transpose.

The direct stride-1 kernels for few channels are in ``conv_direct``. Imported only when numba
is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads

U = np.uint64


@jit()
def _bounds(j, dw, pl, sw, w_in, wo):  # type: ignore[no-untyped-def]
    """Output columns [x0, x1) whose input column x * sw + j * dw - pl lies in [0, w_in)."""
    off = j * dw - pl
    x0 = 0
    if off < 0:
        x0 = min(wo, (-off + sw - 1) // sw)
    hi = w_in - 1 - off
    x1 = min(wo, hi // sw + 1) if hi >= 0 else 0
    return x0, max(x0, x1)


@jit()
def _im2col(x, cols, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo):  # type: ignore[no-untyped-def]
    n_, c_, h_, w_in = x.shape
    xf = x.reshape(-1)
    cf = cols.reshape(-1)
    m = n_ * ho * wo
    zero = cf.dtype.type(0)
    for r in range(c_ * kh * kw):
        c = r // (kh * kw)
        i = (r // kw) % kh
        j = r % kw
        off = j * dw - pl
        x0, x1 = _bounds(j, dw, pl, sw, w_in, wo)
        for n in range(n_):
            src0 = (n * c_ + c) * h_ * w_in
            for y in range(ho):
                iy = y * sh + i * dh - pt
                # unsigned indices: no negative-index wraparound, so the runs vectorise
                ub = U(r * m + (n * ho + y) * wo)
                if iy < 0 or iy >= h_:
                    for k in range(U(wo)):
                        cf[ub + k] = zero
                    continue
                for k in range(U(x0)):
                    cf[ub + k] = zero
                for k in range(U(x1), U(wo)):
                    cf[ub + k] = zero
                ub += U(x0)
                us = U(src0 + iy * w_in + off + x0 * sw)
                if sw == 1:
                    for k in range(U(x1 - x0)):
                        cf[ub + k] = xf[us + k]
                else:
                    for k in range(U(x1 - x0)):
                        cf[ub + k] = xf[us + k * U(sw)]


@jit()
def _col2im(cols, out, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo):  # type: ignore[no-untyped-def]
    n_, c_, h_, w_in = out.shape
    of = out.reshape(-1)
    cf = cols.reshape(-1)
    m = n_ * ho * wo
    of[:] = 0
    for c in range(c_):
        for i in range(kh):
            for j in range(kw):
                r = (c * kh + i) * kw + j
                off = j * dw - pl
                x0, x1 = _bounds(j, dw, pl, sw, w_in, wo)
                for n in range(n_):
                    dst0 = (n * c_ + c) * h_ * w_in
                    for y in range(ho):
                        iy = y * sh + i * dh - pt
                        if iy < 0 or iy >= h_:
                            continue
                        ud = U(dst0 + iy * w_in + off + x0 * sw)
                        ub = U(r * m + (n * ho + y) * wo + x0)
                        if sw == 1:
                            for k in range(U(x1 - x0)):
                                of[ud + k] += cf[ub + k]
                        else:
                            for k in range(U(x1 - x0)):
                                of[ud + k * U(sw)] += cf[ub + k]


def _args(geom: Any) -> tuple[int, ...]:
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    (pt, _), (pl, _) = geom.padding
    return kh, kw, sh, sw, pt, pl, dh, dw, ho, wo


def im2col(x: Any, geom: Any) -> Any:
    """(C * kh * kw, N * Ho * Wo) columns of (N, C, H, W) ``x``, as the numpy ``_im2col_fwd``."""
    n, c = x.shape[:2]
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    cols = np.empty((c * kh * kw, n * ho * wo), dtype=x.dtype)
    _im2col(np.ascontiguousarray(x), cols, *_args(geom))
    return cols


def col2im(cols: Any, geom: Any) -> Any:
    """The adjoint of ``im2col``: each column added back where it came from, (N, C, H, W)."""
    out = np.empty(geom.in_shape, dtype=cols.dtype)
    _col2im(np.ascontiguousarray(cols), out, *_args(geom))
    return out


@jit()
def _unpack(y, b, out):  # type: ignore[no-untyped-def]
    # y (O, n * HW) -> out (n, O, HW), plus b[o] when b has O entries: one contiguous run of
    # HW per (sample, channel)
    n_, o_, hw = out.shape
    yf = y.reshape(-1)
    of = out.reshape(-1)
    for n in range(n_):
        for o in range(o_):
            src = U((o * n_ + n) * hw)
            dst = U((n * o_ + o) * hw)
            if b.shape[0] > 0:
                bo = b[o]
                for k in range(U(hw)):
                    of[dst + k] = yf[src + k] + bo
            else:
                for k in range(U(hw)):
                    of[dst + k] = yf[src + k]


@jit()
def _pack(g, out):  # type: ignore[no-untyped-def]
    # g (n, O, HW) -> out (O, n * HW): the output gradient in the GEMM's layout
    n_, o_, hw = g.shape
    gf = g.reshape(-1)
    of = out.reshape(-1)
    for o in range(o_):
        for n in range(n_):
            src = U((n * o_ + o) * hw)
            dst = U((o * n_ + n) * hw)
            for k in range(U(hw)):
                of[dst + k] = gf[src + k]


def unpack(y: Any, b: Any, out: Any) -> None:
    """Write the (O, n * Ho * Wo) GEMM result ``y`` (+ ``b``) into contiguous (n, O, Ho, Wo) ``out``."""
    n, o = out.shape[:2]
    bb = np.empty(0, dtype=out.dtype) if b is None else np.ascontiguousarray(b, dtype=out.dtype)
    _unpack(np.ascontiguousarray(y).reshape(o, -1), bb, out.reshape(n, o, -1))


def pack(g: Any) -> Any:
    """The (n, O, Ho, Wo) gradient ``g`` as (O, n * Ho * Wo)."""
    n, o = g.shape[:2]
    out = np.empty((o, g.size // o), dtype=g.dtype)
    _pack(np.ascontiguousarray(g).reshape(n, o, -1), out)
    return out


@jit(fastmath={"reassoc", "contract"})
def _channel_sum(g, out, o0, o1):  # type: ignore[no-untyped-def]
    """Channels o0 to o1."""
    n_, o_, m = g.shape
    gf = g.reshape(-1)
    for o in range(o0, o1):
        s = 0.0  # float64: a batch of planes summed without float32 drift
        for n in range(n_):
            b = U((n * o_ + o) * m)
            for k in range(U(m)):
                s += gf[b + k]
        out[o] = s


@jit(parallel=True)
def _channel_sum_par(g, out):  # type: ignore[no-untyped-def]
    """``_channel_sum`` of the channels in chunks, one per thread (the same bits)."""
    p = num_threads()
    for i in prange(p):
        o0, o1 = bounds(g.shape[1], p, i, 1)
        _channel_sum(g, out, o0, o1)


SUM_PARALLEL_MIN = 1 << 16  # elements from which the bias gradient runs on several threads


def channel_sum(g: Any) -> Any:
    """The bias gradient: ``g`` (N, O, ...) summed over every axis but 1, in g's dtype."""
    from . import threads  # noqa: PLC0415

    n, o = g.shape[:2]
    out = np.empty(o, dtype=np.float64)
    g3 = np.ascontiguousarray(g).reshape(n, o, -1)
    if o >= 2 and threads.worth(g.size, SUM_PARALLEL_MIN):
        _channel_sum_par(g3, out)
    else:
        _channel_sum(g3, out, 0, o)
    return out.astype(g.dtype)


def pack_groups(g: Any, groups: int) -> Any:
    """``pack`` as (G, O/G, n * Ho * Wo), the GEMM layout (the reference's arguments)."""
    return pack(g).reshape(groups, g.shape[1] // groups, -1)


# --------------------------------------------------------------------------------------------
# the weights' permutes: tiled transposes, in chunks of tiles on numba's threads
# --------------------------------------------------------------------------------------------

TILE = 16  # a tile's rows and columns: 16 float32 are one cache line


@jit()
def _transpose_k(a, out, t0, t1):  # type: ignore[no-untyped-def]
    """Tiles t0 to t1 (counted over (batch, row tile, column tile)) of out[b, s, r] = a[b, r, s]."""
    _, r_, s_ = a.shape
    tr = (r_ + TILE - 1) // TILE
    ts = (s_ + TILE - 1) // TILE
    af = a.reshape(-1)
    of = out.reshape(-1)
    for t in range(t0, t1):
        b = t // (tr * ts)
        r0 = (t // ts) % tr * TILE
        s0 = t % ts * TILE
        base = U(b * r_ * s_)
        for s in range(s0, min(s0 + TILE, s_)):
            dst = base + U(s * r_)
            for r in range(r0, min(r0 + TILE, r_)):
                of[dst + U(r)] = af[base + U(r * s_ + s)]


@jit(parallel=True)
def _transpose_par(a, out, tiles):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        t0, t1 = bounds(tiles, p, i, 1)
        _transpose_k(a, out, t0, t1)


PERMUTE_MIN = 1 << 15  # elements from which a permute runs on several threads


def swap(a: Any, r: int, s: int) -> Any:
    """The contiguous (B, S, R) transpose of ``a`` read as (B, R, S): the same elements, moved
    (numpy's strided copies of a 4-D weight permute run 4-10x slower on a 2M-element
    weight)."""
    from . import threads  # noqa: PLC0415

    a3 = np.ascontiguousarray(a).reshape(-1, r, s)
    out = np.empty((a3.shape[0], s, r), dtype=a3.dtype)
    tiles = a3.shape[0] * -(-r // TILE) * -(-s // TILE)
    if tiles >= 2 and threads.worth(a3.size, PERMUTE_MIN):
        _transpose_par(a3, out, tiles)
    else:
        _transpose_k(a3, out, 0, tiles)
    return out


def permute_weights(w: Any, order: str) -> Any:
    """4-D weights (or their gradient) permuted, a new contiguous array, in one or two tiled
    transposes (T = kh * kw): ``"oct->tco"`` (O, C, kh, kw) to (kh, kw, C, O), ``"oct->toc"``
    to (kh, kw, O, C), ``"oct->otc"`` to (O, kh, kw, C); ``"tco->oct"`` and ``"otc->oct"``
    back to (O, C, kh, kw)."""
    if order == "oct->tco":  # (O, C, T) -> (O, T, C) -> (T, C, O)
        o, c, kh, kw = w.shape
        return swap(swap(w, c, kh * kw), o, kh * kw * c).reshape(kh, kw, c, o)
    if order == "tco->oct":  # (T, C, O) -> (T, O, C) -> (O, C, T)
        kh, kw, c, o = w.shape
        return swap(swap(w, c, o), kh * kw, o * c).reshape(o, c, kh, kw)
    if order == "oct->toc":
        o, c, kh, kw = w.shape
        return swap(w, o * c, kh * kw).reshape(kh, kw, o, c)
    if order == "oct->otc":
        o, c, kh, kw = w.shape
        return swap(w, c, kh * kw).reshape(o, kh, kw, c)
    if order == "otc->oct":
        o, kh, kw, c = w.shape
        return swap(w, kh * kw, c).reshape(o, c, kh, kw)
    raise ValueError(f"permute_weights: unknown order {order!r}")
