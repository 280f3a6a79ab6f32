"""im2col + GEMM convolutions on pixel-major (NHWC) columns, chunk by chunk of the batch.

Each chunk of samples is first copied once into a zero-padded channels-last buffer
(n, G, Hp, Wp, C/G); a column row is then one output pixel, kh runs of kw * C/G contiguous
channels (one run per tap when dilated), so the gather copies long runs at any stride (the
channel-first columns of ``conv.im2col`` copy runs of Wo, gathered at the stride: 4 GB/s at
stride 2). K is ordered (kh, kw, C/G); the weights are permuted to match. The GEMMs take the
orientations OpenBLAS ran fastest at the benchmark shapes (one thread): the forward is
(pixels, K) @ (K, O), 1.2-2.2x faster than (O, K) @ (pixels, K)^T, and its (pixels, O) result
is transposed into (n, O, Ho, Wo) in one pass with the bias; the input gradient multiplies the
output gradient, packed as (O, pixels) in plane-long runs and read transposed by BLAS, by the
(O, K) weights, adds the columns back into the channels-last buffer and copies it out
channel-first; the weight gradient is (O, pixels) @ (pixels, K) per chunk, summed.

Measured (forward + both gradients of one layer, one thread, CPU time; channel-first before,
pixel-major after, PyTorch's oneDNN): DCGAN 4x4 stride-2 3->16 15.6 -> 10.4 ms (13.1),
16->32 19.8 -> 13.2 (14.5), 32->64 13.9 -> 12.5 (10.9), 64->128 12.4 -> 11.4 (9.3); 3x3 16->32
on 8x8 5.4 -> 4.6 (2.8). The GEMMs are now about three quarters of the time. At 64+ channels
on rows 8+ pixels wide and a stride above 1 the transposes cost more than they save and
``_f_conv._pixel_major`` keeps the channel-first path (stride-1 layers of any width come here:
by wall time, 128 -> 128 at 14x14 13.1 against 14.2 ms). The copying passes run in chunks, one
per thread, when numpy's BLAS shares numba's threads (``PASS_MIN``, ``threads.active()``); they
copy or add each element the same way at any thread count (the same bits).
Imported only when numba is selected.
"""
from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .conv import _pack, permute_weights
from .twins import call_at, entry

U = np.uint64


@jit()
def _nhwc_rows(x, xt, pt, pl, i0, i1):  # type: ignore[no-untyped-def]
    """Rows i0 to i1 (counted over (sample, group, row) of xt) of ``_nhwc_k``."""
    n_, c_, h_, w_ = x.shape
    _, g_, hp, wp, cg = xt.shape
    xf = x.reshape(-1)
    tf = xt.reshape(-1)
    zero = tf.dtype.type(0)
    hw = U(h_ * w_)
    x0 = min(wp, pl)
    x1 = max(x0, min(wp, w_ + pl))
    for t in range(i0, i1):
        s = t // (g_ * hp)
        g = (t // hp) % g_
        r = t % hp
        d = U(t * wp * cg)
        sr = r - pt
        if sr < 0 or sr >= h_:
            for k in range(U(wp * cg)):
                tf[d + k] = zero
            continue
        for k in range(U(x0 * cg)):
            tf[d + k] = zero
        for k in range(U(x1 * cg), U(wp * cg)):
            tf[d + k] = zero
        src = U(((s * c_ + g * cg) * h_ + sr) * w_ + x0 - pl)
        d += U(x0 * cg)
        nq = x1 - x0
        # contiguous reads, writes strided by cg; from 16 channels in tiles of 8 pixels by 16
        # channels (a cold 64-channel 32x32 batch: 3.0 ms against 10.3 in one sweep of the row
        # per channel; 16 -> 32 channels 1.4 against 1.8)
        tq = 8 if cg >= 16 else max(nq, 1)
        for q0 in range(0, nq, tq):
            q1 = min(nq, q0 + tq)
            for c0 in range(0, cg, 16):
                for c in range(U(c0), U(min(cg, c0 + 16))):
                    sc = src + c * hw
                    dc = d + c
                    for q in range(U(q0), U(q1)):
                        tf[dc + q * U(cg)] = xf[sc + q]


@jit()
def _nhwc_k(x, xt, pt, pl, s0, s1):  # type: ignore[no-untyped-def]
    """xt (n, G, Hp, Wp, Cg) <- x (n, C, H, W) moved down pt rows and right pl columns, zeros
    elsewhere (rows and columns past Hp, Wp dropped); samples s0 to s1."""
    rows = xt.shape[1] * xt.shape[2]
    _nhwc_rows(x, xt, pt, pl, s0 * rows, s1 * rows)


@jit()
def _gather_k(xt, cols, kh, kw, sh, sw, dh, dw, ho, wo, i0, i1):  # type: ignore[no-untyped-def]
    """cols (G, n * Ho * Wo, kh * kw * Cg) <- the windows of padded xt (n, G, Hp, Wp, Cg): the
    output rows i0 to i1, counted over (group, sample, output row)."""
    n_, g_, hp, wp, cg = xt.shape
    tf = xt.reshape(-1)
    cf = cols.reshape(-1)
    m = n_ * ho * wo
    kg = kh * kw * cg
    run = U(kw * cg) if dw == 1 else U(cg)
    for t in range(i0, i1):
        g = t // (n_ * ho)
        s = (t // ho) % n_
        y = t % ho
        base = (s * g_ + g) * hp
        for x in range(wo):
            d = U((g * m + (s * ho + y) * wo + x) * kg)
            for i in range(kh):
                src = U(((base + y * sh + i * dh) * wp + x * sw) * cg)
                if dw == 1:
                    for k in range(run):
                        cf[d + k] = tf[src + k]
                    d += run
                else:
                    for j in range(kw):
                        sj = src + U(j * dw * cg)
                        for k in range(run):
                            cf[d + k] = tf[sj + k]
                        d += run


@jit()
def _scatter_k(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo, s0, s1):  # type: ignore[no-untyped-def]
    """The adjoint of ``_gather``: gt (n, G, Hp, Wp, Cg) = the sum of the windows of cols."""
    n_, g_, hp, wp, cg = gt.shape
    tf = gt.reshape(-1)
    cf = cols.reshape(-1)
    m = n_ * ho * wo
    kg = kh * kw * cg
    run = U(kw * cg) if dw == 1 else U(cg)
    per = g_ * hp * wp * cg  # one sample's part of gt
    for k in range(s0 * per, s1 * per):
        tf[k] = 0
    for g in range(g_):
        for s in range(s0, s1):
            base = (s * g_ + g) * hp
            for y in range(ho):
                for x in range(wo):
                    d = U((g * m + (s * ho + y) * wo + x) * kg)
                    for i in range(kh):
                        dst = U(((base + y * sh + i * dh) * wp + x * sw) * cg)
                        if dw == 1:
                            for k in range(run):
                                tf[dst + k] += cf[d + k]
                            d += run
                        else:
                            for j in range(kw):
                                sj = dst + U(j * dw * cg)
                                for k in range(run):
                                    tf[sj + k] += cf[d + k]
                                d += run


@jit()
def _scatter_rows(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo, i0, i1):  # type: ignore[no-untyped-def]
    """``_scatter_k`` for the rows i0 to i1 of gt (counted over (sample, group, row)): each
    pixel written once, the sum of the taps that reach it in the order of their windows (later
    windows reach a pixel through earlier taps), so that rows split without races. From
    SCATTER_ROWS channels per group; below, the runs of Cg are too short for its per-tap
    work."""
    n_, g_, hp, wp, cg = gt.shape
    tf = gt.reshape(-1)
    cf = cols.reshape(-1)
    m = n_ * ho * wo
    kg = kh * kw * cg
    zero = tf.dtype.type(0)
    # the taps that reach each padded row (i, window row) and column (j, window column)
    ti, ty, tn = _taps(hp, kh, sh, dh, ho)
    tj, tx, tm = _taps(wp, kw, sw, dw, wo)
    for t in range(i0, i1):
        s = t // (g_ * hp)
        g = (t // hp) % g_
        r = t % hp
        for q in range(wp):
            dst = U((t * wp + q) * cg)
            for c in range(U(cg)):
                tf[dst + c] = zero
            for a in range(tn[r]):
                row = (g * m + (s * ho + ty[r, a]) * wo) * kg + ti[r, a] * kw * cg
                for b in range(tm[q]):
                    src = U(row + tx[q, b] * kg + tj[q, b] * cg)
                    for c in range(U(cg)):
                        tf[dst + c] += cf[src + c]


@jit()
def _taps(n, k, st, dl, out):  # type: ignore[no-untyped-def]
    """For each of ``n`` padded positions, the taps (kernel index, window) of a kernel of ``k``
    taps (stride ``st``, dilation ``dl``, ``out`` windows) that read it, kernel indices
    descending (windows ascending), and their count."""
    tk = np.empty((n, k), dtype=np.int64)
    tw = np.empty((n, k), dtype=np.int64)
    cnt = np.zeros(n, dtype=np.int64)
    for p in range(n):
        for i in range(k - 1, -1, -1):
            e = p - i * dl
            if e >= 0 and e % st == 0 and e // st < out:
                tk[p, cnt[p]] = i
                tw[p, cnt[p]] = e // st
                cnt[p] += 1
    return tk, tw, cnt


@jit()
def _nchw_k(gt, out, pt, pl, i0, i1):  # type: ignore[no-untyped-def]
    """out (n, C, H, W) <- gt (n, G, Hp, Wp, Cg) moved up pt rows and left pl columns (zeros
    where gt has no row or column): the planes i0 to i1, counted over (sample, channel)."""
    n_, c_, h_, w_ = out.shape
    _, g_, hp, wp, cg = gt.shape
    of = out.reshape(-1)
    tf = gt.reshape(-1)
    zero = of.dtype.type(0)
    for t in range(i0, i1):
        s = t // c_
        c = t % c_
        g = c // cg
        cc = c % cg
        for r in range(h_):
            d = U((t * h_ + r) * w_)
            sr = r + pt
            if sr >= hp:
                for k in range(U(w_)):
                    of[d + k] = zero
                continue
            x1 = max(0, min(w_, wp - pl))
            src = U((((s * g_ + g) * hp + sr) * wp + pl) * cg + cc)
            for k in range(U(x1)):
                of[d + k] = tf[src + k * U(cg)]
            for k in range(U(x1), U(w_)):
                of[d + k] = zero


@jit()
def _unpack_t_k(y, b, out, i0, i1):  # type: ignore[no-untyped-def]
    """out (n, O, HW) <- y (G, n * HW, O / G) (+ b[o] when b has O entries): the planes i0 to
    i1, counted over (sample, output channel)."""
    n_, o_, hw = out.shape
    g_, _, og = y.shape
    yf = y.reshape(-1)
    of = out.reshape(-1)
    for t in range(i0, i1):
        s = t // o_
        o = t % o_
        g = o // og
        src = U((g * n_ * hw + s * hw) * og + o % og)
        dst = U(t * hw)
        bo = b[o] if b.shape[0] > 0 else of.dtype.type(0)
        for k in range(U(hw)):
            of[dst + k] = yf[src + k * U(og)] + bo


# Each pass's parallel form on numba's threads: its rows (or planes; the scatter: its channels)
# in chunks, one per thread (disjoint writes), used from PASS_MIN elements when numpy's BLAS shares
# the threads (threads.active()). Measured on (e)'s conv2 (16 -> 32 at 8x8, batch 128, forward
# and both gradients): the passes were a third of the blocked path's time once the products ran
# on two threads. Splitting within a sample, not by samples, lets a chunk of one sample (wide
# layers' chunks: GEMM_ROWS pixels) use both: DCGAN ngf 64's 64 -> 128 4x4 stride 2 at 32x32,
# batch 64, per batch, one thread against two: gather 1.9 / 0.9 ms, transposes in and out
# 3.3 / 1.2 and 2.8 / 1.4 (the GEMMs: 25-27 ms).
PASS_MIN = 1 << 17
# Channels per group from which the input gradient's scatter splits rows (``_scatter_rows``),
# batch 64, 4x4 stride 2, ms per batch at 1 / 4 / 16 samples a chunk, against ``_scatter_k``:
# 64 channels at 32x32 2.4 / 1.6 / 2.0 against 3.6 / 2.2 / 2.5; 32 at 16x16 0.77 / 0.66 /
# 0.37 against 0.62 / 0.34 / 0.30; 16 at 32x32 2.2 / 1.2 / 1.2 against 1.1 / 0.6 / 0.6.
SCATTER_ROWS = 64


@jit(parallel=True)
def _nhwc_par(x, xt, pt, pl):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(xt.shape[0] * xt.shape[1] * xt.shape[2], p, i, 1)
        _nhwc_rows(x, xt, pt, pl, i0, i1)


@jit(parallel=True)
def _gather_par(xt, cols, kh, kw, sh, sw, dh, dw, ho, wo, fp):  # type: ignore[no-untyped-def]
    """``_gather_k``'s rows in chunks, each a call of its compiled code at ``fp``
    (``twins.entry``; by name, its IR linked in and optimised again: 2.3 CPU s)."""
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(xt.shape[0] * xt.shape[1] * ho, p, i, 1)
        call_at(fp, (xt, cols, kh, kw, sh, sw, dh, dw, ho, wo, i0, i1))


@jit(parallel=True)
def _scatter_par(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(gt.shape[0], p, i, 1)
        _scatter_k(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo, i0, i1)


@jit(parallel=True)
def _scatter_rows_par(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(gt.shape[0] * gt.shape[1] * gt.shape[2], p, i, 1)
        _scatter_rows(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo, i0, i1)


@jit(parallel=True)
def _nchw_par(gt, out, pt, pl):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(out.shape[0] * out.shape[1], p, i, 1)
        _nchw_k(gt, out, pt, pl, i0, i1)


@jit(parallel=True)
def _unpack_t_par(y, b, out):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(out.shape[0] * out.shape[1], p, i, 1)
        _unpack_t_k(y, b, out, i0, i1)


def _parallel(items: int, size: int) -> bool:
    """Whether a pass over ``items`` rows writing ``size`` elements runs on several threads."""
    from . import threads  # noqa: PLC0415

    return items >= 2 and threads.worth(size, PASS_MIN)


def _split(kernel: Any, par: Any, items: int, size: int, *args: Any) -> None:
    """``par(*args)`` when the pass runs on several threads, else ``kernel(*args, 0, items)``."""
    if _parallel(items, size):
        par(*args)
    else:
        kernel(*args, 0, items)


def _nhwc(x: Any, xt: Any, pt: int, pl: int) -> None:
    # the offsets as Python ints: numpy integers of other widths would each compile their own
    _split(_nhwc_rows, _nhwc_par, xt.shape[0] * xt.shape[1] * xt.shape[2], xt.size, x, xt,
           int(pt), int(pl))


_GATHER: dict[str, int] = {}


def _gather_at(dt: Any) -> int:
    """``_gather_k``'s compiled code for dtype ``dt`` (``twins.entry``, by a call over no
    rows), kept by dtype: its other argument types are fixed."""
    fp = _GATHER.get(dt.char)
    if fp is None:
        fp = _GATHER[dt.char] = entry(_gather_k, np.empty((0,) * 5, dt), np.empty((0,) * 3, dt),
                                      *(0,) * 10)
    return fp


def _gather(xt: Any, cols: Any, *geom: int) -> None:
    rows = xt.shape[0] * xt.shape[1] * geom[6]
    if _parallel(rows, cols.size):
        _gather_par(xt, cols, *geom, _gather_at(xt.dtype))
    else:
        _gather_k(xt, cols, *geom, 0, rows)


def _scatter(cols: Any, gt: Any, *geom: int) -> None:
    if gt.shape[4] >= SCATTER_ROWS:
        _split(_scatter_rows, _scatter_rows_par, gt.shape[0] * gt.shape[1] * gt.shape[2],
               cols.size, cols, gt, *geom)
    else:
        _split(_scatter_k, _scatter_par, gt.shape[0], cols.size, cols, gt, *geom)


def _nchw(gt: Any, out: Any, pt: int, pl: int) -> None:
    _split(_nchw_k, _nchw_par, out.shape[0] * out.shape[1], out.size, gt, out, pt, pl)


def _unpack_t(y: Any, b: Any, out: Any) -> None:
    _split(_unpack_t_k, _unpack_t_par, out.shape[0] * out.shape[1], out.size, y, b, out)


def padded_hw(geom: Any) -> tuple[int, int]:
    """The padded input rows and columns that the windows reach (trailing ones are never read)."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    return (ho - 1) * sh + (kh - 1) * dh + 1, (wo - 1) * sw + (kw - 1) * dw + 1


def _dims(geom: Any, groups: int) -> tuple[int, ...]:
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    hp, wp = padded_hw(geom)
    return kh, kw, sh, sw, dh, dw, ho, wo, hp, wp, geom.in_shape[1] // groups


def _wmat(w: Any, groups: int) -> Any:
    """(O, Cg, kh, kw) weights as (G, O/G, kh * kw * Cg), the order of a column row."""
    o = w.shape[0]
    return permute_weights(w, "oct->otc").reshape(groups, o // groups, -1)


def _most(chunks: Any) -> int:
    return max((z - a for a, z in chunks), default=0)


def conv(x: Any, w: Any, b: Any, geom: Any, groups: int, chunks: Any) -> Any:
    """conv2d of (N, C, H, W) ``x`` by (O, C/G, kh, kw) ``w`` (+ ``b``), chunk by chunk."""
    n, c = x.shape[:2]
    o = w.shape[0]
    kh, kw, sh, sw, dh, dw, ho, wo, hp, wp, cg = _dims(geom, groups)
    pt, pl = geom.padding[0][0], geom.padding[1][0]
    dt = x.dtype
    wm = _wmat(w.astype(dt, copy=False), groups).transpose(0, 2, 1)  # (G, Kg, O/G)
    most = _most(chunks)
    xt_buf = np.empty(most * c * hp * wp, dtype=dt)
    cols_buf = np.empty(most * ho * wo * c * kh * kw, dtype=dt)
    y_buf = np.empty(most * ho * wo * o, dtype=dt)
    out = np.empty((n, o, ho, wo), dtype=dt)
    bb = np.empty(0, dtype=dt) if b is None else np.ascontiguousarray(b, dtype=dt)
    xc = np.ascontiguousarray(x)
    for a, z in chunks:
        m = z - a
        xt = xt_buf[: m * c * hp * wp].reshape(m, groups, hp, wp, cg)
        _nhwc(xc[a:z], xt, pt, pl)
        cols = cols_buf[: m * ho * wo * c * kh * kw].reshape(groups, m * ho * wo, -1)
        _gather(xt, cols, kh, kw, sh, sw, dh, dw, ho, wo)
        y = y_buf[: m * ho * wo * o].reshape(groups, m * ho * wo, o // groups)
        np.matmul(cols, wm, out=y)
        _unpack_t(y, bb, out[a:z].reshape(m, o, ho * wo))
    return out


def input_grad(g: Any, w: Any, geom: Any, groups: int, chunks: Any) -> Any:
    """The input gradient of ``conv``: the columns ``g^T w`` added back into (N, C, H, W)."""
    n, o = g.shape[:2]
    c = geom.in_shape[1]
    kh, kw, sh, sw, dh, dw, ho, wo, hp, wp, cg = _dims(geom, groups)
    pt, pl = geom.padding[0][0], geom.padding[1][0]
    dt = g.dtype
    wm = _wmat(w.astype(dt, copy=False), groups)  # (G, O/G, Kg)
    most = _most(chunks)
    gt_buf = np.empty(most * c * hp * wp, dtype=dt)
    cols_buf = np.empty(most * ho * wo * c * kh * kw, dtype=dt)
    gp_buf = np.empty(most * ho * wo * o, dtype=dt)
    out = np.empty((n, *geom.in_shape[1:]), dtype=dt)
    gc = np.ascontiguousarray(g)
    for a, z in chunks:
        m = z - a
        gp = gp_buf[: m * ho * wo * o].reshape(o, m * ho * wo)
        _pack(gc[a:z].reshape(m, o, ho * wo), gp)
        cols = cols_buf[: m * ho * wo * c * kh * kw].reshape(groups, m * ho * wo, -1)
        # (G, P, O/G) as a transposed view: the GEMM reads it as it is
        np.matmul(gp.reshape(groups, o // groups, -1).transpose(0, 2, 1), wm, out=cols)
        gt = gt_buf[: m * c * hp * wp].reshape(m, groups, hp, wp, cg)
        _scatter(cols, gt, kh, kw, sh, sw, dh, dw, ho, wo)
        _nchw(gt, out[a:z], pt, pl)
    return out


def weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any, chunks: Any) -> Any:
    """The weight gradient of ``conv``: ``g`` times the columns of ``x``, summed over chunks."""
    c = x.shape[1]
    o = g.shape[1]
    kh, kw, sh, sw, dh, dw, ho, wo, hp, wp, cg = _dims(geom, groups)
    pt, pl = geom.padding[0][0], geom.padding[1][0]
    dt = x.dtype
    most = _most(chunks)
    xt_buf = np.empty(most * c * hp * wp, dtype=dt)
    cols_buf = np.empty(most * ho * wo * c * kh * kw, dtype=dt)
    gp_buf = np.empty(most * ho * wo * o, dtype=dt)
    acc = np.zeros((groups, o // groups, kh * kw * cg), dtype=dt)
    part = np.empty_like(acc)
    xc = np.ascontiguousarray(x)
    gc = np.ascontiguousarray(g, dtype=dt)
    for a, z in chunks:
        m = z - a
        xt = xt_buf[: m * c * hp * wp].reshape(m, groups, hp, wp, cg)
        _nhwc(xc[a:z], xt, pt, pl)
        cols = cols_buf[: m * ho * wo * c * kh * kw].reshape(groups, m * ho * wo, -1)
        _gather(xt, cols, kh, kw, sh, sw, dh, dw, ho, wo)
        gp = gp_buf[: m * ho * wo * o].reshape(o, m * ho * wo)
        _pack(gc[a:z].reshape(m, o, ho * wo), gp)
        np.matmul(gp.reshape(groups, o // groups, -1), cols, out=part)
        np.add(acc, part, out=acc)
    # (G, O/G, kh, kw, Cg) -> (O, Cg, kh, kw)
    return permute_weights(acc.reshape(o, kh, kw, cg), "otc->oct").reshape(wshape)
