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

Stride-1 convolutions with few channels skip the columns and the GEMM (``direct``,
``direct_input_grad``, ``direct_weight_grad``): each sample is copied once into a zero-padded
(C, Hp, Wp) plane set, and an output plane is computed "wide", as Ho rows of Wp (not Wo)
columns, so that every kernel tap is one multiply-add over a single contiguous run of
(Ho - 1) * Wp + Wo elements (the Wp - Wo extra columns per row are dropped when copying out).
Long runs vectorise; three taps of a kernel row and two output channels share each pass (one
load of the input feeds six multiply-adds). The input gradient is the same kernel on the output
gradient with the weights flipped and transposed; the weight gradient is a dot product per tap
over the same wide runs. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from .._backend import np
from . import jit

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


# --------------------------------------------------------------------------------------------
# direct convolution (stride 1), for layers whose few channels make the GEMM's operands thin
# --------------------------------------------------------------------------------------------


@jit()
def _place(x, n, xp, pt, pl):  # type: ignore[no-untyped-def]
    """xp (C, Hp, Wp) <- sample n of x (N, C, H, W) moved down pt rows and right pl columns
    (negative: cropped), zeros elsewhere."""
    _, c_, h_, w_ = x.shape
    _, hp, wp = xp.shape
    xf = x.reshape(-1)
    pf = xp.reshape(-1)
    zero = pf.dtype.type(0)
    x0 = min(wp, max(0, pl))
    x1 = max(x0, min(wp, w_ + pl))
    for c in range(c_):
        for r in range(hp):
            dst = U((c * hp + r) * wp)
            sr = r - pt
            if sr < 0 or sr >= h_:
                for k in range(U(wp)):
                    pf[dst + k] = zero
                continue
            for k in range(U(x0)):
                pf[dst + k] = zero
            for k in range(U(x1), U(wp)):
                pf[dst + k] = zero
            src = U((n * c_ + c) * h_ * w_ + sr * w_ + x0 - pl)
            dst += U(x0)
            for k in range(U(x1 - x0)):
                pf[dst + k] = xf[src + k]


@jit()
def _direct(x, w, b, out, pt, pl, dh, dw, groups):  # type: ignore[no-untyped-def]
    n_, c_ = x.shape[0], x.shape[1]
    o_, cg, kh, kw = w.shape
    ho, wo = out.shape[2], out.shape[3]
    hp = ho + dh * (kh - 1)
    wp = wo + dw * (kw - 1)
    run = U((ho - 1) * wp + wo)  # one wide plane: row y at y * wp
    xp = np.empty((c_, hp, wp), dtype=x.dtype)
    acc = np.empty(2 * ho * wp, dtype=x.dtype)
    pf = xp.reshape(-1)
    wf = w.reshape(-1)
    of = out.reshape(-1)
    og = o_ // groups
    m = U(ho * wp)
    zero = acc.dtype.type(0)
    r1 = U(dh * wp)
    r2 = r1 + r1
    d1 = U(dw)
    d2 = d1 + d1
    for n in range(n_):
        _place(x, n, xp, pt, pl)
        o = 0
        while o < o_:
            two = o + 1 < o_ and (o + 1) // og == o // og  # a pair of one group
            gr = o // og
            b0 = b[o] if b.shape[0] > 0 else zero
            b1 = b[o + 1] if two and b.shape[0] > 0 else zero
            for q in range(run):
                acc[q] = b0
                acc[m + q] = b1
            for cc in range(cg):
                c = gr * cg + cc
                if kh == 3 and kw == 3:  # the nine taps in one pass (1.2-1.3x on (c)'s conv2)
                    wa = (o * cg + cc) * 9
                    wb = wa + cg * 9 if two else wa
                    a0, a1, a2, a3, a4 = wf[wa], wf[wa + 1], wf[wa + 2], wf[wa + 3], wf[wa + 4]
                    a5, a6, a7, a8 = wf[wa + 5], wf[wa + 6], wf[wa + 7], wf[wa + 8]
                    c0, c1, c2, c3, c4 = wf[wb], wf[wb + 1], wf[wb + 2], wf[wb + 3], wf[wb + 4]
                    c5, c6, c7, c8 = wf[wb + 5], wf[wb + 6], wf[wb + 7], wf[wb + 8]
                    u = U(c * hp * wp)
                    for q in range(run):
                        p = u + q
                        v0, v1, v2 = pf[p], pf[p + d1], pf[p + d2]
                        v3, v4, v5 = pf[p + r1], pf[p + r1 + d1], pf[p + r1 + d2]
                        v6, v7, v8 = pf[p + r2], pf[p + r2 + d1], pf[p + r2 + d2]
                        acc[q] += (
                            a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3 + a4 * v4
                            + a5 * v5 + a6 * v6 + a7 * v7 + a8 * v8
                        )
                        acc[m + q] += (  # a lone last channel writes a plane never read
                            c0 * v0 + c1 * v1 + c2 * v2 + c3 * v3 + c4 * v4
                            + c5 * v5 + c6 * v6 + c7 * v7 + c8 * v8
                        )
                    continue
                for i in range(kh):
                    base = U(c * hp * wp + i * dh * wp)
                    wa = (o * cg + cc) * kh * kw + i * kw
                    wb = wa + cg * kh * kw
                    j = 0
                    while j + 3 <= kw:  # three taps of the row per pass
                        a0, a1, a2 = wf[wa + j], wf[wa + j + 1], wf[wa + j + 2]
                        c0 = c1 = c2 = zero
                        if two:
                            c0, c1, c2 = wf[wb + j], wf[wb + j + 1], wf[wb + j + 2]
                        u0 = base + U(j * dw)
                        u1 = u0 + U(dw)
                        u2 = u1 + U(dw)
                        for q in range(run):
                            v0, v1, v2 = pf[u0 + q], pf[u1 + q], pf[u2 + q]
                            acc[q] += a0 * v0 + a1 * v1 + a2 * v2
                            acc[m + q] += c0 * v0 + c1 * v1 + c2 * v2
                        j += 3
                    while j < kw:
                        a0 = wf[wa + j]
                        c0 = wf[wb + j] if two else zero
                        u0 = base + U(j * dw)
                        for q in range(run):
                            v0 = pf[u0 + q]
                            acc[q] += a0 * v0
                            acc[m + q] += c0 * v0
                        j += 1
            for t in range(2 if two else 1):
                ob = (n * o_ + o + t) * ho * wo
                for y in range(ho):
                    s = U(t * ho * wp + y * wp)
                    d = U(ob + y * wo)
                    for k in range(U(wo)):
                        of[d + k] = acc[s + k]
            o += 2 if two else 1


@jit()
def _place_wide(g, n, gw, wp):  # type: ignore[no-untyped-def]
    """gw (O, Ho * wp) <- sample n of g (N, O, Ho, Wo), each row padded with zeros to wp."""
    _, o_, ho, wo = g.shape
    gf = g.reshape(-1)
    df = gw.reshape(-1)
    zero = df.dtype.type(0)
    for o in range(o_):
        for y in range(ho):
            d = U((o * ho + y) * wp)
            s = U(((n * o_ + o) * ho + y) * wo)
            for k in range(U(wo)):
                df[d + k] = gf[s + k]
            for k in range(U(wo), U(wp)):
                df[d + k] = zero


# reassociation lets the dot products vectorise (sums in another order: float rounding only)
@jit(fastmath={"reassoc", "contract"})
def _direct_wgrad(g, x, dwt, pt, pl, dh, dw, groups):  # type: ignore[no-untyped-def]
    n_, c_ = x.shape[0], x.shape[1]
    o_, cg, kh, kw = dwt.shape
    ho, wo = g.shape[2], g.shape[3]
    hp = ho + dh * (kh - 1)
    wp = wo + dw * (kw - 1)
    run = U((ho - 1) * wp + wo)
    xp = np.empty((c_, hp, wp), dtype=x.dtype)
    gw = np.empty((o_, ho * wp), dtype=x.dtype)
    pf = xp.reshape(-1)
    gf = gw.reshape(-1)
    df = dwt.reshape(-1)
    og = o_ // groups
    zero = df.dtype.type(0)
    r1 = U(dh * wp)
    r2 = r1 + r1
    d1 = U(dw)
    d2 = d1 + d1
    for k in range(df.size):
        df[k] = zero
    for n in range(n_):
        _place(x, n, xp, pt, pl)
        _place_wide(g, n, gw, wp)
        for o in range(o_):
            gb = U(o * ho * wp)
            gr = o // og
            for cc in range(cg):
                base0 = U((gr * cg + cc) * hp * wp)
                if kh == 3 and kw == 3:  # nine dot products per pass: 1.4x on (c)'s conv2
                    wa = (o * cg + cc) * 9
                    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = s8 = zero
                    for q in range(run):
                        gv = gf[gb + q]
                        p = base0 + q
                        s0 += gv * pf[p]
                        s1 += gv * pf[p + d1]
                        s2 += gv * pf[p + d2]
                        s3 += gv * pf[p + r1]
                        s4 += gv * pf[p + r1 + d1]
                        s5 += gv * pf[p + r1 + d2]
                        s6 += gv * pf[p + r2]
                        s7 += gv * pf[p + r2 + d1]
                        s8 += gv * pf[p + r2 + d2]
                    df[wa] += s0
                    df[wa + 1] += s1
                    df[wa + 2] += s2
                    df[wa + 3] += s3
                    df[wa + 4] += s4
                    df[wa + 5] += s5
                    df[wa + 6] += s6
                    df[wa + 7] += s7
                    df[wa + 8] += s8
                    continue
                for i in range(kh):
                    base = base0 + U(i * dh * wp)
                    wa = (o * cg + cc) * kh * kw + i * kw
                    j = 0
                    while j + 3 <= kw:
                        u0 = base + U(j * dw)
                        u1 = u0 + U(dw)
                        u2 = u1 + U(dw)
                        s0 = s1 = s2 = zero
                        for q in range(run):
                            gv = gf[gb + q]
                            s0 += gv * pf[u0 + q]
                            s1 += gv * pf[u1 + q]
                            s2 += gv * pf[u2 + q]
                        df[wa + j] += s0
                        df[wa + j + 1] += s1
                        df[wa + j + 2] += s2
                        j += 3
                    while j < kw:
                        u0 = base + U(j * dw)
                        s0 = zero
                        for q in range(run):
                            s0 += gf[gb + q] * pf[u0 + q]
                        df[wa + j] += s0
                        j += 1


def _pads(geom: Any) -> tuple[int, int, int, int]:
    (pt, _), (pl, _) = geom.padding
    return pt, pl, geom.dilation[0], geom.dilation[1]


def direct(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    """The stride-1 convolution of (N, C, H, W) ``x`` with (O, C / groups, kh, kw) ``w`` (+ ``b``)."""
    n, o = x.shape[0], w.shape[0]
    out = np.empty((n, o) + tuple(geom.out_hw), dtype=x.dtype)
    bb = np.empty(0, dtype=x.dtype) if b is None else np.ascontiguousarray(b, dtype=x.dtype)
    c = np.ascontiguousarray
    _direct(c(x), c(w), bb, out, *_pads(geom), groups)
    return out


def direct_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    """The input gradient of ``direct``: ``g`` convolved with the flipped, transposed weights."""
    o, cg, kh, kw = w.shape
    n, c, h, wd = geom.in_shape
    pt, pl, dh, dw = _pads(geom)
    # (O, C/G, kh, kw) -> (C, O/G, kh, kw), each kernel turned by 180 degrees
    wt = w.reshape(groups, o // groups, cg, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
    wt = np.ascontiguousarray(wt.reshape(c, o // groups, kh, kw))
    out = np.empty((n, c, h, wd), dtype=g.dtype)
    empty = np.empty(0, dtype=g.dtype)
    _direct(np.ascontiguousarray(g), wt, empty, out, dh * (kh - 1) - pt, dw * (kw - 1) - pl,
            dh, dw, groups)
    return out


def direct_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: tuple[int, ...]) -> Any:
    """The weight gradient of ``direct``: one dot product per tap, summed over the batch."""
    dwt = np.empty(wshape, dtype=g.dtype)
    c = np.ascontiguousarray
    _direct_wgrad(c(g), c(x), dwt, *_pads(geom), groups)
    return dwt


@jit(fastmath={"reassoc", "contract"})
def _channel_sum(g, out):  # type: ignore[no-untyped-def]
    n_, o_, m = g.shape
    gf = g.reshape(-1)
    for o in range(o_):
        s = 0.0  # float64: a batch of planes summed without float32 drift
        for n in range(n_):
            b = U((n * o_ + o) * m)
            for k in range(U(m)):
                s += gf[b + k]
        out[o] = s


def channel_sum(g: Any) -> Any:
    """The bias gradient: ``g`` (N, O, ...) summed over every axis but 1, in g's dtype."""
    n, o = g.shape[:2]
    out = np.empty(o, dtype=np.float64)
    _channel_sum(np.ascontiguousarray(g).reshape(n, o, -1), out)
    return out.astype(g.dtype)
