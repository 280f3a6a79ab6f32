"""Direct stride-1 convolution kernels (numba): no im2col columns, no GEMM.

A chunk of samples is copied once into zero-padded planes stacked one under the other (channel
c's planes of the whole chunk are one run), and the output is computed "wide": output element q
of the stack is the window whose top-left corner is input element q, so every kernel tap is one
multiply-add over a single contiguous run covering all the chunk's samples. Elements of a plane
beyond (Ho, Wo) are computed and dropped when copying out. Neighbouring planes share their zero
padding (``_period``: a 3x3 'same' layer on 8x8 takes 9x9 per sample, not 10x10), runs are
rounded up to 16 elements (slack at the end of the stack), so the vectorised loops never fall
into a scalar remainder, and a chunk holds about ``RUN`` elements per plane.
A 3x3 kernel's nine taps and two output channels share one pass (one load of the input feeds
18 multiply-adds, contracted to FMAs); other kernels go tap by tap, two channels per load.
The input gradient is the same kernel on the output gradient with the weights flipped and
transposed (its padding negative where the forward's crops); the weight gradient is, per pair of
output channels and input channel, eighteen dot products in one pass over the same stacked
runs, the output gradient laid out wide with zeros where the forward's dropped elements were.
Calls of at least ``PARALLEL_MIN`` multiply-adds run the batch in chunks of samples, one per
thread (``_fwd_par``, ``_wgrad_par``: ``prange`` over the chunks) when numpy's BLAS shares
numba's threads (``threads.active()``); otherwise, and always below it, on the calling thread.
The outputs and the input gradient are the same bits at any thread count; the weight gradient
sums each chunk's samples and then the chunks, so it differs by float rounding. With a
pool thread of its own the split lost inside whole steps, where numpy's BLAS threads spun on
the second core after each GEMM (median of 6 alternating rounds in one process: (c) 4.3 ms
split against 3.6 serial, (i) 168 against 160, (e) 17.2 against 16.7).

Measured on the 2-core machine (float32; forward, input gradient, weight gradient, ms, one
thread, against the kernels these replaced): (c)'s conv2 8->16 on 13x13 0.51 / 0.68 / 0.67 ->
0.41 / 0.54 / 0.37; (e)'s conv2 16->32 on 8x8 3.0 / 3.2 / 3.2 -> 1.4 / 1.8 / 1.3. What each
step gave: a sum indexed signed + unsigned is a float index in numba and stopped the bias fill
vectorising (0.12 ms of (c)'s conv2 forward); stacking plus rounded runs 1.1-1.6x; shared padding
1.2x on 8x8 'same' layers; two output channels per weight-gradient pass 1.2-1.9x; four output
channels per forward pass instead of two: no gain (36 weights spill, the loop turns load-bound);
reassociating the forward sums: no gain. Two threads: 1.4-1.9x from about 4M multiply-adds on a
quiet second core ((c)'s conv1 forward, 3.6M, lost 10%), a loss when other processes hold it.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .twins import call_at, entry

U = np.uint64
LANE = 16  # runs are multiples of this: no scalar remainder loop
RUN = 2048  # elements per stacked plane in one chunk (a chunk is whole samples, at least one)
# multiply-adds from which a call splits its batch over numba's threads, when numpy's
# BLAS shares them (threads.active()): (c)'s conv1 forward, 3.6M, lost 10% on two threads
PARALLEL_MIN = 1 << 23


@jit()
def _place(x, n0, nb, xp, pt, pl):  # type: ignore[no-untyped-def]
    """xp (C, P, Hp, Wp) <- samples n0 .. n0 + nb of x (N, C, H, W), each moved down pt rows and
    right pl columns (negative: cropped) into plane s of its channel; zeros elsewhere (the
    planes past nb are the slack that the last runs read)."""
    _, c_, h_, w_ = x.shape
    _, _, hp, wp = xp.shape
    pf = xp.reshape(-1)
    xf = x.reshape(-1)
    plane = xp.shape[1] * hp * wp
    zero = pf.dtype.type(0)
    x0 = min(wp, max(0, pl))
    x1 = max(x0, min(wp, w_ + pl))
    for c in range(c_):
        for s in range(nb):
            for r in range(hp):
                dst = U(c * plane + (s * hp + r) * wp)
                sr = r - pt
                if sr < 0 or sr >= h_:
                    for k in range(U(wp)):
                        pf[dst + k] = zero
                    continue
                for k in range(U(x0)):
                    pf[dst + k] = zero
                for k in range(U(x1), U(wp)):
                    pf[dst + k] = zero
                src = U(((n0 + s) * c_ + c) * h_ * w_ + sr * w_ + x0 - pl)
                dst += U(x0)
                for k in range(U(x1 - x0)):
                    pf[dst + k] = xf[src + k]
        for k in range(U(c * plane + nb * hp * wp), U((c + 1) * plane)):
            pf[k] = zero  # the slack the last runs read past the chunk


@jit(fastmath={"contract"})
def _fwd(n0, n1, x, wk, b, out, nbc, hp, wp, pt, pl, dh, dw, groups, fpl):  # type: ignore[no-untyped-def]
    """out[n0:n1] <- the convolution of x[n0:n1] with wk (O, cg, kh, kw), plus b when it has
    entries; planes of hp x wp, nbc samples per chunk; ``_place``'s compiled code at ``fpl``
    (called by name, its IR would be linked in and compiled again here)."""
    c_ = x.shape[1]
    ogb, cg, kh, kw = wk.shape
    o_, ho, wo = out.shape[1], out.shape[2], out.shape[3]
    og = o_ // groups
    hw = hp * wp
    nfull = (nbc * hw + LANE - 1) // LANE * LANE
    slack = (kh - 1) * dh * wp + (kw - 1) * dw + LANE
    per = (nfull + slack + hw - 1) // hw  # planes' room per channel, slack included
    xp = np.empty((c_, per, hp, wp), dtype=x.dtype)
    plane = per * hw
    pf = xp.reshape(-1)
    acc = np.empty((2, nfull), dtype=x.dtype)
    a_ = acc.reshape(-1)
    wf = wk.reshape(-1)
    of = out.reshape(-1)
    zero = acc.dtype.type(0)
    r1 = U(dh * wp)
    r2 = r1 + r1
    d1 = U(dw)
    d2 = d1 + d1
    m1 = U(nfull)
    for na in range(n0, n1, nbc):
        nb = min(nbc, n1 - na)
        run = U((nb * hw + LANE - 1) // LANE * LANE)
        call_at(fpl, (x, na, nb, xp, pt, pl))
        for gr in range(groups):
            for ob in range(0, og, 2):
                o = gr * og + ob  # the block's first output channel
                two = ob + 1 < og
                for t in range(2):
                    bt = b[o + t] if b.shape[0] > 0 and ob + t < og else zero
                    at = U(t * nfull)  # unsigned + unsigned: a mixed sum is a float index
                    for q in range(run):
                        a_[at + q] = bt
                for cc in range(cg):
                    u = U((gr * cg + cc) * plane)
                    if kh == 3 and kw == 3:
                        w0 = (o * cg + cc) * 9
                        w1 = w0 + cg * 9 if two else w0
                        a0, a1, a2, a3, a4 = wf[w0], wf[w0 + 1], wf[w0 + 2], wf[w0 + 3], wf[w0 + 4]
                        a5, a6, a7, a8 = wf[w0 + 5], wf[w0 + 6], wf[w0 + 7], wf[w0 + 8]
                        # a lone last channel (odd channels per group) runs as a pair with
                        # itself, its twin's sums dropped: one loop to compile, not two
                        b0, b1, b2, b3, b4 = wf[w1], wf[w1 + 1], wf[w1 + 2], wf[w1 + 3], wf[w1 + 4]
                        b5, b6, b7, b8 = wf[w1 + 5], wf[w1 + 6], wf[w1 + 7], wf[w1 + 8]
                        for q in range(run):
                            p = u + q
                            v0, v1, v2 = pf[p], pf[p + d1], pf[p + d2]
                            v3, v4, v5 = pf[p + r1], pf[p + r1 + d1], pf[p + r1 + d2]
                            v6, v7, v8 = pf[p + r2], pf[p + r2 + d1], pf[p + r2 + d2]
                            a_[q] += (
                                a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3 + a4 * v4
                                + a5 * v5 + a6 * v6 + a7 * v7 + a8 * v8
                            )
                            a_[m1 + q] += (
                                b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3 + b4 * v4
                                + b5 * v5 + b6 * v6 + b7 * v7 + b8 * v8
                            )
                        continue
                    k = cg * kh * kw if two else 0
                    for i in range(kh):
                        for j in range(kw):
                            w0 = ((o * cg + cc) * kh + i) * kw + j
                            a0, b0 = wf[w0], wf[w0 + k]
                            ut = u + U(i * dh * wp + j * dw)
                            for q in range(run):
                                v0 = pf[ut + q]
                                a_[q] += a0 * v0
                                a_[m1 + q] += b0 * v0
                for t in range(2 if two else 1):
                    for s in range(nb):
                        d0 = ((na + s) * o_ + o + t) * ho * wo
                        for y in range(ho):
                            src = U(t * nfull + s * hw + y * wp)
                            d = U(d0 + y * wo)
                            for k in range(U(wo)):
                                of[d + k] = a_[src + k]


# reassociation lets the dot products vectorise (sums in another order: float rounding only)
@jit(fastmath={"reassoc", "contract"})
def _wgrad_pair(gf, pf, df, g0, p0, run, nfull, wa, cw, rw, dw):  # type: ignore[no-untyped-def]
    """The nine taps' dot products of a pair of output channels (rows g0 and g0 + nfull of the
    wide output gradient ``gf``) with one input channel's stacked planes (from ``p0`` of
    ``pf``) over ``run`` elements, added to their weight gradients at ``wa`` and ``wa + cw``
    of ``df``; rows ``rw`` and columns ``dw`` apart (dilated). ``_wgrad``'s, called at its
    address (compiled inside it, ``_wgrad`` took 1.4 CPU s against 0.8)."""
    zero = df.dtype.type(0)
    gb = U(g0)
    gc = gb + U(nfull)
    base0 = U(p0)
    r1 = U(rw)
    r2 = r1 + r1
    d1 = U(dw)
    d2 = d1 + d1
    wb = wa + cw
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = s8 = zero
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = t8 = zero
    for q in range(U(run)):
        gv = gf[gb + q]
        hv = gf[gc + q]
        p = base0 + q
        v0, v1, v2 = pf[p], pf[p + d1], pf[p + d2]
        v3, v4, v5 = pf[p + r1], pf[p + r1 + d1], pf[p + r1 + d2]
        v6, v7, v8 = pf[p + r2], pf[p + r2 + d1], pf[p + r2 + d2]
        s0 += gv * v0
        s1 += gv * v1
        s2 += gv * v2
        s3 += gv * v3
        s4 += gv * v4
        s5 += gv * v5
        s6 += gv * v6
        s7 += gv * v7
        s8 += gv * v8
        t0 += hv * v0
        t1 += hv * v1
        t2 += hv * v2
        t3 += hv * v3
        t4 += hv * v4
        t5 += hv * v5
        t6 += hv * v6
        t7 += hv * v7
        t8 += hv * v8
    df[wa] += s0
    df[wa + 1] += s1
    df[wa + 2] += s2
    df[wa + 3] += s3
    df[wa + 4] += s4
    df[wa + 5] += s5
    df[wa + 6] += s6
    df[wa + 7] += s7
    df[wa + 8] += s8
    df[wb] += t0
    df[wb + 1] += t1
    df[wb + 2] += t2
    df[wb + 3] += t3
    df[wb + 4] += t4
    df[wb + 5] += t5
    df[wb + 6] += t6
    df[wb + 7] += t7
    df[wb + 8] += t8


# reassociation lets the dot products vectorise (sums in another order: float rounding only)
@jit(fastmath={"reassoc", "contract"})
def _wgrad(g, x, dwt, n0, n1, nbc, hp, wp, pt, pl, dh, dw, groups, fpl, fpw, fpair):  # type: ignore[no-untyped-def]
    """dwt (O, cg, kh, kw) <- the weight gradient summed over samples n0 .. n1; ``_place``'s,
    ``_place_wide_hw``'s and ``_wgrad_pair``'s compiled code at ``fpl``, ``fpw`` and ``fpair``
    (as ``_fwd``)."""
    c_ = x.shape[1]
    o_, cg, kh, kw = dwt.shape
    og = o_ // groups
    hw = hp * wp
    nfull = (nbc * hw + LANE - 1) // LANE * LANE
    slack = (kh - 1) * dh * wp + (kw - 1) * dw + LANE
    per = (nfull + slack + hw - 1) // hw
    xp = np.empty((c_, per, hp, wp), dtype=x.dtype)
    plane = per * hw
    pf = xp.reshape(-1)
    gw = np.empty((o_, nfull), dtype=x.dtype)
    gf = gw.reshape(-1)
    df = dwt.reshape(-1)
    zero = df.dtype.type(0)
    r1 = U(dh * wp)
    r2 = r1 + r1
    d1 = U(dw)
    d2 = d1 + d1
    for k in range(df.size):
        df[k] = zero
    for na in range(n0, n1, nbc):
        nb = min(nbc, n1 - na)
        run_ = (nb * hw + LANE - 1) // LANE * LANE
        run = U(run_)
        call_at(fpl, (x, na, nb, xp, pt, pl))
        call_at(fpw, (g, na, nb, gw, hp, wp))
        for o in range(o_):
            gb = U(o * nfull)
            gr = o // og
            pair = kh == 3 and kw == 3 and o % 2 == 0 and o + 1 < o_ and (o + 1) // og == gr
            if o % 2 == 1 and kh == 3 and kw == 3 and o // og == (o - 1) // og:
                continue  # done with its even partner
            for cc in range(cg):
                base0 = U((gr * cg + cc) * plane)
                if pair:  # two output channels' nine dot products per pass
                    call_at(fpair, (gf, pf, df, o * nfull, (gr * cg + cc) * plane, run_, nfull,
                                    (o * cg + cc) * 9, cg * 9, dh * wp, dw))
                    continue
                if kh == 3 and kw == 3:  # nine dot products per pass
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
                    for j in range(kw):
                        ut = base0 + U(i * dh * wp + j * dw)
                        s0 = zero
                        for q in range(run):
                            s0 += gf[gb + q] * pf[ut + q]
                        df[((o * cg + cc) * kh + i) * kw + j] += s0


@jit()
def _place_wide_hw(g, n0, nb, gw, hp, wp):  # type: ignore[no-untyped-def]
    """gw (O, R) <- samples n0 .. n0 + nb of g (N, O, Ho, Wo): sample s's row y at
    s * hp * wp + y * wp, zeros in the other (dropped) elements."""
    _, o_, ho, wo = g.shape
    gf = g.reshape(-1)
    df = gw.reshape(-1)
    r = gw.shape[1]
    zero = df.dtype.type(0)
    for k in range(df.size):
        df[k] = zero
    for o in range(o_):
        for s in range(nb):
            for y in range(ho):
                d = U(o * r + (s * hp + y) * wp)
                src = U((((n0 + s) * o_ + o) * ho + y) * wo)
                for k in range(U(wo)):
                    df[d + k] = gf[src + k]


# --------------------------------------------------------------------------------------------
# the entry points: chunk size, weight layout, the split over threads
# --------------------------------------------------------------------------------------------


@jit(parallel=True, fastmath={"contract"})
def _fwd_par(x, wk, b, out, nbc, hp, wp, pt, pl, dh, dw, groups, fpl, fp):  # type: ignore[no-untyped-def]
    """``_fwd`` over the batch in chunks of samples, one per thread; each chunk calls ``_fwd``'s
    compiled code at ``fp`` (``twins.entry``): a call by name would link and optimise ``_fwd``'s IR
    again inside this twin (6.6 CPU s to compile, against about 1 s)."""
    p = num_threads()
    for i in prange(p):
        n0, n1 = bounds(x.shape[0], p, i, 1)
        call_at(fp, (n0, n1, x, wk, b, out, nbc, hp, wp, pt, pl, dh, dw, groups, fpl))


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _wgrad_par(g, x, dwt2, nbc, hp, wp, pt, pl, dh, dw, groups, fpl, fpw, fpair, fp):  # type: ignore[no-untyped-def]
    """``_wgrad`` of the batch in ``len(dwt2)`` chunks of samples, chunk i's into dwt2[i],
    through ``_wgrad``'s compiled code at ``fp`` (as ``_fwd_par``)."""
    p = dwt2.shape[0]
    for i in prange(p):
        n0, n1 = bounds(x.shape[0], p, i, 1)
        call_at(fp, (g, x, dwt2[i], n0, n1, nbc, hp, wp, pt, pl, dh, dw, groups, fpl, fpw,
                     fpair))


_PARTS: dict[tuple[str, str], int] = {}


def _part(name: str, dt: Any) -> int:
    """The address of ``_place``'s, ``_place_wide_hw``'s or ``_wgrad_pair``'s compiled code
    (``name`` "place", "wide", "pair") for dtype ``dt``: found once (``twins.entry``, by a call
    that does no work) and kept by name and dtype: the other argument types are fixed, and a
    convolution's arrays share one dtype (``_kernels.usable``)."""
    fp = _PARTS.get((name, dt.char))
    if fp is None:
        e4, z9 = np.empty((0, 0, 0, 0), dt), np.zeros(9, dt)
        nothing = {"place": (_place, e4, 0, 0, e4, 0, 0),
                   "wide": (_place_wide_hw, e4, 0, 0, np.empty((0, 0), dt), 1, 1),
                   "pair": (_wgrad_pair, z9, z9, z9, 0, 0, 0, 0, 0, 0, 0, 0)}[name]
        fp = _PARTS[name, dt.char] = entry(*nothing)
    return fp


def _parallel(n: int, work: int) -> bool:
    """Whether a call splits its batch over numba's threads (shared with BLAS)."""
    from . import threads  # noqa: PLC0415

    return n >= 2 and threads.worth(work, PARALLEL_MIN)


def _chunk(hp: int, wp: int) -> int:
    return max(1, RUN // (hp * wp))


def _period(n: int, lo: int, hi: int, n_out: int, span: int) -> int:
    """Rows (or columns) one sample's plane takes in the stack along one axis.

    With both paddings non-negative, neighbouring planes share their zero padding: a window
    that runs past one plane's last data row reads the next plane's top padding, which is what
    it should see. Otherwise (a cropping input gradient) each plane has its own rows."""
    if lo >= 0 and hi >= 0:
        return max(n + max(lo, hi), n_out)
    return n_out + span


def _conv(x: Any, w: Any, b: Any, out: Any, pads: tuple[int, int, int, int], dh: int, dw: int,
          groups: int) -> Any:
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ho, wo = out.shape[2:]
    pt, pb, pl, pr = pads
    hp = _period(h, pt, pb, ho, dh * (kh - 1))
    wp = _period(wd, pl, pr, wo, dw * (kw - 1))
    bb = np.empty(0, dtype=x.dtype) if b is None else np.ascontiguousarray(b, dtype=x.dtype)
    c_ = np.ascontiguousarray
    work = n * hp * wp * o * cg * kh * kw
    ints = (_chunk(hp, wp), hp, wp, pt, pl, dh, dw, groups)
    xc = c_(x)
    args = (xc, c_(w), bb, out, *(int(v) for v in ints), _part("place", xc.dtype))
    if _parallel(n, work):
        _fwd_par(*args, entry(_fwd, 0, 0, *args))
    else:
        _fwd(0, n, *args)
    return out


def _pads(geom: Any) -> tuple[int, int, int, int]:
    (pt, pb), (pl, pr) = geom.padding
    return pt, pb, pl, pr


def direct(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    """The stride-1 convolution of (N, C, H, W) ``x`` with (O, C / groups, kh, kw) ``w`` (+ ``b``)."""
    out = np.empty((x.shape[0], w.shape[0]) + tuple(geom.out_hw), dtype=x.dtype)
    dh, dw = geom.dilation
    return _conv(x, w, b, out, _pads(geom), dh, dw, groups)


def direct_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    """The input gradient of ``direct``: ``g`` convolved with the flipped, transposed weights."""
    o, cg, kh, kw = w.shape
    n, c, h, wd = geom.in_shape
    pt, pb, pl, pr = _pads(geom)
    dh, dw = geom.dilation
    eh, ew = dh * (kh - 1), dw * (kw - 1)
    # (O, C/G, kh, kw) -> (C, O/G, kh, kw), each kernel turned by 180 degrees
    wt = w.reshape(groups, o // groups, cg, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
    wt = wt.reshape(c, o // groups, kh, kw)
    out = np.empty((n, c, h, wd), dtype=g.dtype)
    return _conv(g, wt, None, out, (eh - pt, eh - pb, ew - pl, ew - pr), dh, dw, groups)


def direct_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: tuple[int, ...]) -> Any:
    """The weight gradient of ``direct``: one dot product per tap, summed over the batch."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = wshape
    ho, wo = geom.out_hw
    pt, pb, pl, pr = _pads(geom)
    dh, dw = geom.dilation
    hp = _period(h, pt, pb, ho, dh * (kh - 1))
    wp = _period(wd, pl, pr, wo, dw * (kw - 1))
    c = np.ascontiguousarray
    work = n * hp * wp * o * cg * kh * kw
    gc, xc = c(g), c(x)
    dt = xc.dtype
    args = (*(int(v) for v in (_chunk(hp, wp), hp, wp, pt, pl, dh, dw, groups)),
            _part("place", dt), _part("wide", dt), _part("pair", dt) if (kh, kw) == (3, 3) else 0)
    if _parallel(n, work):
        from . import threads  # noqa: PLC0415

        dwt2 = np.empty((threads.count(), *wshape), dtype=g.dtype)
        fp = entry(_wgrad, gc, xc, dwt2[0], 0, 0, *args)
        _wgrad_par(gc, xc, dwt2, *args, fp)
        return dwt2.sum(axis=0)
    dwt = np.empty(wshape, dtype=g.dtype)
    _wgrad(gc, xc, dwt, 0, n, *args)
    return dwt
