"""Register-blocked direct convolutions on channels-last arrays (numba), no columns, no GEMM.

The forward computes a block of ``P`` neighbouring output pixels times ``OB`` output channels
at once: ``P * OB`` sums held in registers while the loop runs over the taps and input
channels, each step one broadcast input value per pixel times one vector of ``OB`` weights (the
weights laid out ``(kh, kw, C, O)``, so the vector is contiguous). The weight gradient is the
same block turned around: ``PC`` input channels times ``OB`` output channels of one tap, summed
over a sample's output pixels. The input gradient (``tgrad``, any stride) blocks input pixels
``sw`` apart in a row: they take the same taps from consecutive output-gradient pixels, so a
strided layer's input gradient (a transposed convolution's forward) needs no zero-stuffing and
does only the multiply-adds that count. The channels a kernel writes come in whole blocks.
The same blocks serve Winograd F(2x2, 3x3) for 3x3 stride-1 layers (``wfwd``, ``wgradw``):
the 16 products of a group of tiles summed over the channels, its transforms in cache.

numba has no register arrays: an array of sums lives in memory, and the loop then does a load
and a store per multiply-add (4-10 GFLOP/s measured). A block's sums are therefore one value,
a tuple of LLVM vectors of ``OB`` sums (``Row``), which intrinsics (``conv_vec``) load, update
and store a block a call (``block_fma``, ``block_put``, ...); SROA keeps them in registers: 96-115 GFLOP/s on
one core of the AVX-512 machine, its peak. The kernels are generated from templates for the
machine's vector width (``_source``), written once into the kernel cache folder and imported
from there, so numba caches their machine code like any other kernel's (float64 compiles only
when used). Written out a statement a sum (as they first were, scalars for LLVM's SLP vectorizer
to pack), a kernel was thousands of statements and 6-20 s of compile; a call a block, 0.6-1.9 s
(docs/design.md, "Compile budget"; ``tests/test_compile_budget.py`` holds them to a budget).

Each kernel has a parallel twin (``*_par``: its rows, or weight-gradient blocks, in one
contiguous chunk per numba thread, exactly the serial result at any thread count), used from
``PARALLEL_MIN`` multiply-adds when numpy's BLAS shares numba's pool (``threads.active()``):
alone the twins ran 2x faster on two threads, but beside OpenBLAS's own threads, which spin on
the second core for about 0.1 s after each GEMM, a step ran 1.9-2.1x slower (docs/design.md).

The passes that read channels-last copies (padded layers, strided rows, narrow inputs) run a
sample at a time inside one compiled call (``fwds``, ``tgrads``, ``wgrads`` and the
channel-first ``tgradcs``, ``wgradcs``): a sample is copied into a one-sample buffer and at once
run through its kernel, while the copy is in cache; in parallel each thread takes a contiguous
chunk of the batch with a buffer of its own (the weight gradient its own sums too, added at the
end, in chunk order). Against the
earlier chunks of the batch (copies within half the columns' budget, each chunk's copy and
kernel a call on the two threads), DCGAN's layers at batch 64, forward / input gradient /
weight gradient, ms: 3 -> 16 at 64x64 1.41 / - / 1.97 -> 0.83 / - / 0.83 (PyTorch 0.62 /
- / 0.74), 16 -> 32 at 32x32 2.32 / 1.99 / 3.19 -> 1.52 / 1.56 / 1.62 (1.39 / 2.57 / 1.50),
32 -> 64 at 16x16 1.72 / 1.57 / 2.27 -> 1.42 / 1.37 / 1.48 (1.19 / 1.73 / 1.31); the scratch
is a sample's copy per thread, not a chunk's. The copies move whole tiles of 8 pixels by 16
channels transposed in registers (``tile_t``), and the channels-last forward and input
gradient store their blocks to the channel-first planes the same way (``block_put_t``); a
scalar a value, they had cost a fifth to a third of CLIP's 16 -> 32 at 8x8 (1.1-1.4x faster).
Imported only when numba is selected.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
import threading
from typing import Any

from .._backend import np
from . import NotReady, cache_dir, jit, numba
from .conv_gemm import _nhwc, padded_hw, permute_weights
from .conv_vec import OB, TILE, tile_t
from .runtime import mode
from .twins import call_at  # noqa: F401 - the generated twins import it from here

U = np.uint64


def _vector_floats() -> int:
    """float32 lanes of the widest vector register LLVM targets on this machine."""
    import llvmlite.binding as ll  # noqa: PLC0415 - numba's own dependency

    feats = ll.get_host_cpu_features()
    return 16 if feats.get("avx512f", False) else 8


# Output tiles per group of the fused Winograd kernels (wfwd, wgradw): a group's transformed
# inputs, 16 x C x TILES, stay in the core's cache. 128 -> 128 at 14x14 (batch 8), forward on two
# threads: 16 / 32 / 64 tiles 1.62 / 1.43 / 1.53 ms; mnist's 32 -> 64 at 26x26 (batch 64) 6.7 /
# 6.4 / 6.6.
TILES = 32
P = 8 if _vector_floats() == 16 else 4  # output pixels per forward block
PC = P  # input channels per weight-gradient block


def _sums(k: int, ind: str) -> list[str]:
    """A block of ``k`` rows of zero sums, ``acc`` (``z``: the zero of the element type)."""
    return [ind + "zrow = row_zero(z)", ind + "acc = (" + "zrow, " * k + ")"]


def _step(k: int, ind: str, wc: str, x: str, rows: int = 1) -> list[str]:
    """One step of the reduction: a row of OB weights from ``wc`` on, times each of the
    block's ``k`` inputs (``x``: "array, offset of pixel 0, from one pixel to the next", and
    with ``rows`` = 2 ", from the block's first row of pixels to its second") into its sums."""
    fma = "block_fma2" if rows == 2 else "block_fma"
    return [ind + wc, ind + "wv = row_load(wf, wc)", ind + f"acc = {fma}({x}, acc, wv)"]


def _blocks(p: int, count: str, at: str, block: Any, ind: int) -> list[str]:
    """The branches, indented ``ind``, of a row's loop ``while {at} < {count}:``: blocks of
    ``p`` pixels, of ``p // 2`` in rows narrower than ``p``, single pixels in rows narrower
    still. Each branch has its size as a literal (held in a variable, the sums ran at half the
    speed); a row's last partial block is a whole one ending at its last pixel, recomputing a
    few."""
    a, b = " " * ind, " " * (ind + 4)
    out = []
    for k, cond in ((p, f"if {count} >= {p}:"), (p // 2, f"elif {count} >= {p // 2}:")):
        out += [a + cond, b + f"{at} = min({at}, {count} - {k})"]
        out += block(k, b)
        out.append(b + f"{at} += {k}")
    out.append(a + "else:")
    out += block(1, b)
    out.append(b + f"{at} += 1")
    return out


def _through(k: int, ob: int, ind: str, dst: str, row: str, step: str, bias: str) -> list[str]:
    """A block's ``k`` x ``ob`` sums to a channel-first output (``dst[base]``, channel ``j`` at
    ``base + j * row``, pixel ``i`` at ``+ i * step``), plus ``bias`` (formatted with ``j``),
    through a block of scratch in the sums' layout: stored straight to the output, LLVM
    vectorized the block along its pixels instead (gathering the inputs: 2.5x slower)."""
    lines = [ind + f"block_store(tmp, U(0), U({ob}), acc)"]
    return lines + [
        ind + f"for jt in range({ob}):",
        ind + "    bj = " + bias.format(j="jt"),
        ind + f"    for it in range({k}):",
        ind + f"        {dst}[base + U(jt) * {row} + U(it) * {step}] = tmp[U(it * {ob} + jt)] + bj",
    ]


def _fwd_source(p: int, ob: int) -> str:
    """``fwd(xt, wk, b, y, sh, sw, dh, dw, r0, r1)``: rows r0 .. r1 of y (m, O, Ho, Wo) (m * Ho
    rows of Wo) <- xt (m, Hp, Wp, C) (padded, channels-last) by wk (kh, kw, C, O), plus b (O),
    O a multiple of ``ob``."""
    out = [
        "def fwd(xt, wk, b, y, sh, sw, dh, dw, r0, r1):",
        "    m, hp, wp, c_ = xt.shape",
        "    kh, kw, cr, o_ = wk.shape  # cr: C, or kw * C with a row's taps folded in",
        "    _, _, ho, wo = y.shape",
        "    xf = xt.reshape(-1)",
        "    wf = wk.reshape(-1)",
        "    yf = y.reshape(-1)",
        "    z = yf.dtype.type(0)",
        "    cu = U(cr)",
        "    ou = U(o_)",
        "    oplane = U(ho * wo)",
        "    ps = U(sw * c_)  # from one output pixel's window to the next's",
        "    rs = U(sh * wp * c_)  # from one output row's windows to the next's",
        f"    pair = wo == {p // 2}  # rows of half a block: a block takes two (adjacent in y)",
        "    r = r0",
        "    while r < r1:",
        "        n = r // ho",
        "        oy = r % ho",
        "        two = pair and r + 1 < r1 and oy + 1 < ho",
        f"        for ob in range(0, o_, {ob}):",
        "            if two:",
        "                ox = 0",
    ]

    def block(k: int, ind: str, rows: int = 1) -> list[str]:
        lines = _sums(k, ind)
        lines += [
            ind + "for ky in range(kh):",
            ind + "    for kx in range(kw):",
            ind + "        xb = U(((n * hp + oy * sh + ky * dh) * wp + ox * sw + kx * dw) * c_)",
            ind + "        wb = U((ky * kw + kx) * cr * o_ + ob)",
            ind + "        for c in range(cu):",
        ]
        # pixel i of the block: in two rows, row i // (k // 2), column i % (k // 2)
        lines += _step(k, ind + " " * 12, "wc = wb + c * ou",
                       "xf, xb + c, ps" + ", rs" * (rows == 2), rows=rows)
        lines.append(ind + "base = U(((n * o_ + ob) * ho + oy) * wo + ox)")
        return lines + [ind + "block_put_t(yf, base, oplane, block_shift(acc, row_load(b, ob)))"]

    out += block(p, " " * 16, rows=2)
    out += ["            else:", "                ox = 0", "                while ox < wo:"]
    out += _blocks(p, "wo", "ox", block, 20)
    out.append("        r += 2 if two else 1")
    return "\n".join(out) + "\n"


def _fwdc_source(p: int, ob: int) -> str:
    """``fwdc(x, wk, b, y, sh, sw, dh, dw, r0, r1)``: ``fwd`` on the channel-first arrays as
    they are: rows r0 .. r1 of y (m, O, Ho, Wo) (m * Ho rows of Wo) <- x (m, C, H, W) by wk
    (kh, kw, C, O), plus b (O); no padding, column stride ``sw`` 1 (``channel_first``). A
    block's pixels read neighbouring inputs at literal offsets, loads that fold into the
    multiply-adds as broadcasts (with the stride in the address LLVM gathered them into a
    vector and shuffled them out: 2-3x slower)."""
    out = [
        "def fwdc(x, wk, b, y, sh, sw, dh, dw, r0, r1):",
        "    m, c_, hp, wp = x.shape",
        "    kh, kw, _, o_ = wk.shape",
        "    _, _, ho, wo = y.shape",
        "    xf = x.reshape(-1)",
        "    wf = wk.reshape(-1)",
        "    yf = y.reshape(-1)",
        "    z = yf.dtype.type(0)",
        "    cu = U(c_)",
        "    ou = U(o_)",
        "    plane = U(hp * wp)",
        "    oplane = U(ho * wo)",
        "    for r in range(r0, r1):",
        "        n = r // ho",
        "        oy = r % ho",
        f"        for ob in range(0, o_, {ob}):",
        "            ox = 0",
        "            while ox < wo:",
    ]

    def block(k: int, ind: str) -> list[str]:
        lines = _sums(k, ind)
        lines += [
            ind + "for ky in range(kh):",
            ind + "    for kx in range(kw):",
            ind + "        xb = U(((n * c_) * hp + oy * sh + ky * dh) * wp + ox + kx * dw)",
            ind + "        wb = U((ky * kw + kx) * c_ * o_ + ob)",
            ind + "        for c in range(cu):",
        ]
        lines += _step(k, ind + " " * 12, "wc = wb + c * ou", "xf, xb + c * plane, U(1)")
        lines.append(ind + "yb = U(((n * o_ + ob) * ho + oy) * wo + ox)")
        return lines + [ind + "block_put(yf, yb, U(1), oplane, block_shift(acc, row_load(b, ob)))"]

    out += _blocks(p, "wo", "ox", block, 16)
    return "\n".join(out) + "\n"


def _wgrad_source(pc: int, ob: int, first: bool = False) -> str:
    """``wgrad(xt, gt, dwk, sh, sw, dh, dw, t0, t1)``: blocks t0 .. t1 of dwk (kh, kw, C, O)
    += the weight gradient of ``fwd`` over the chunk (xt (m, Hp, Wp, C) its padded input, gt
    (m, Ho, Wo, O) its output's gradient, channels-last); blocks of one tap, ``pc`` input and
    ``ob`` output channels at a time (``pc // 2`` and then single channels for the rest). With
    ``first``, ``wgradc``: the input channel-first as it is, xt (m, C, H, W) (no padding:
    ``channel_first``), taps not folded."""
    out = [
        f"def wgrad{'c' * first}(xt, gt, dwk, sh, sw, dh, dw, t0, t1):",
        "    m, c_, hp, wp = xt.shape" if first else "    m, hp, wp, c_ = xt.shape",
        "    _, ho, wo, o_ = gt.shape",
        "    kh, kw, cr, _ = dwk.shape  # cr: C, or kw * C with a row's taps folded in",
        "    xf = xt.reshape(-1)",
        "    gf = gt.reshape(-1)",
        "    df = dwk.reshape(-1)",
        "    ou = U(o_)",
        "    z = df.dtype.type(0)",
        "    plane = U(hp * wp)  # from one input channel to the next",
        "    ps = U(sw)" if first else "    ps = U(sw * c_)",
        f"    ncb = (cr + {pc} - 1) // {pc}",
        f"    nob = o_ // {ob}",
        "    for t in range(t0, t1):",
        f"        ob = (t % nob) * {ob}",
        "        t2 = t // nob",
        f"        c0 = (t2 % ncb) * {pc}",
        "        tap = t2 // ncb",
        "        ky = tap // kw",
        "        kx = tap % kw",
        f"        if c0 + {pc} <= cr:",
    ]

    def block(k: int, ind: str, c0: str) -> list[str]:
        # a sample's sums start from zero and are added to dwk after it: partial sums of Ho * Wo
        # terms, so the rounding error grows with the batch as a blocked GEMM's does
        lines = [ind + f"db = U(((ky * kw + kx) * cr + {c0}) * o_ + ob)", ind + "for n in range(m):"]
        ind2 = ind + "    "
        lines += _sums(k, ind2)
        lines += [
            ind2 + "for oy in range(ho):",
            ind2 + (f"    xb = U(((n * c_ + {c0}) * hp + oy * sh + ky * dh) * wp + kx * dw)" if first
                    else f"    xb = U(((n * hp + oy * sh + ky * dh) * wp + kx * dw) * c_ + {c0})"),
            ind2 + "    gb = U((n * ho + oy) * wo * o_ + ob)",
            ind2 + "    for ox in range(U(wo)):",
            ind2 + "        xo = xb + ox * ps",
            ind2 + "        go = gb + ox * ou",
            ind2 + "        gv = row_load(gf, go)",
            ind2 + f"        acc = block_fma(xf, xo, {'plane' if first else 'U(1)'}, acc, gv)",
            ind2 + "block_add(df, db, ou, acc)",
        ]
        return lines

    h = pc // 2
    out += block(pc, " " * 12, "c0")
    out.append("        else:")
    out.append("            c1 = c0")
    out.append(f"            if c1 + {h} <= cr:")
    out += block(h, " " * 16, "c1")
    out.append(f"                c1 += {h}")
    out.append("            for c2 in range(c1, cr):")
    out += block(1, " " * 16, "c2")
    return "\n".join(out) + "\n"


def _tgrad_source(p: int, ob: int, first: bool = False) -> str:
    """``tgrad(gt, wk, xg, sh, sw, dh, dw, pt, pl, ot, ol, r0, r1)``: rows r0 .. r1 of xg
    (m, C, H, W) (m * H rows of W) <- the input gradient of a convolution (stride, dilation,
    padding top / left), from its output gradient gt (m, Hg, Wg, O) channels-last (with
    ``first``, ``tgradc``: (m, O, Hg, Wg) channel-first), placed ``ot`` rows down and ``ol``
    columns right in zeros wide enough for every window, and wk (kh, kw, O, C), C a multiple
    of ``ob``. Input pixel (iy, ix) takes tap (ky, kx) where iy + pt - ky * dh and ix + pl -
    kx * dw are multiples of the stride: the pixels of a row ``sw`` apart take the same taps
    from consecutive output gradient pixels, so they make the blocks (a row is ``sw``
    classes)."""
    out = [
        f"def tgrad{'c' * first}(gt, wk, xg, sh, sw, dh, dw, pt, pl, ot, ol, r0, r1):",
        "    m, o_, hg, wg = gt.shape" if first else "    m, hg, wg, o_ = gt.shape",
        "    kh, kw, _, c_ = wk.shape",
        "    _, _, h_, w_ = xg.shape",
        "    gf = gt.reshape(-1)",
        "    wf = wk.reshape(-1)",
        "    xf = xg.reshape(-1)",
        "    z = xf.dtype.type(0)",
        "    ou = U(o_)",
        "    cu = U(c_)",
        "    xplane = U(h_ * w_)",
        "    gplane = U(hg * wg)  # from one output channel to the next (channel-first)",
        "    ss = U(sw)  # from a block's pixel to the next (same class)",
        "" if first else f"    tmp = np.empty({p * ob}, xf.dtype)",  # first: stored straight
        "    for r in range(r0, r1):",
        "        n = r // h_",
        "        iy = r % h_",
        f"        for cb in range(0, c_, {ob}):",
        "            for ix0 in range(min(sw, w_)):",
        "                nj = (w_ - ix0 + sw - 1) // sw",
        "                j = 0",
        "                while j < nj:",
    ]

    def block(k: int, ind: str) -> list[str]:
        lines = _sums(k, ind)
        lines += [
            ind + "for ky in range(kh):",
            ind + "    ty = iy + pt - ky * dh",
            ind + "    if ty % sh != 0:",
            ind + "        continue",
            ind + "    gy = ty // sh + ot",
            ind + "    for kx in range(kw):",
            ind + "        tx = ix0 + pl - kx * dw",
            ind + "        if tx % sw != 0:",
            ind + "            continue",
            ind + ("        gb = U((n * o_ * hg + gy) * wg + tx // sw + ol + j)" if first
                   else "        gb = U(((n * hg + gy) * wg + tx // sw + ol + j) * o_)"),
            ind + "        wb = U((ky * kw + kx) * o_ * c_ + cb)",
            ind + "        for o in range(ou):",
        ]
        g = "gf, gb + o * gplane, U(1)" if first else "gf, gb + o, ou"
        lines += _step(k, ind + " " * 12, "wc = wb + o * cu", g)
        lines.append(ind + "base = U(((n * c_ + cb) * h_ + iy) * w_ + ix0 + j * sw)")
        if first:  # its loads run along the block's pixels too: stored straight to the planes
            return lines + [ind + "block_put(xf, base, ss, xplane, acc)"]
        # unit stride: a block's pixels are neighbours in the planes (a stride's classes are not)
        return lines + [ind + "if ss == U(1):", ind + "    block_put_t(xf, base, xplane, acc)",
                        ind + "else:"] + _through(k, ob, ind + "    ", "xf", "xplane", "ss", "z")

    out += _blocks(p, "nj", "j", block, 20)
    return "\n".join(out) + "\n"


def _patches(ind_: str, base: str, dst: str, rows: bool = False) -> list[str]:
    """Winograd's input transform, ``B^T d B``, of a group's 4x4 input patches d (the group's
    tiles t0 .. t0 + nt of the batch), a row of tiles at a time: per channel, the rows' sums
    ``B^T d`` along the row's padded columns into eb (4 rows of ``ewp``), then the columns'
    ``... B`` of each tile (its columns 2 tx .. 2 tx + 3): the sums in unrolled blocks of 16
    columns, which LLVM vectorizes, the tiles in blocks of 8 (their columns two apart, left
    scalar). Tile by tile, all 16 values as scalars, the transform cost as much as the
    products on layers of 32-64 channels. For tile q of the row (tile ia + q of the group) and
    channel c, the 16 values go to v, position (a, b) at ``dst`` + b * vp (``dst`` formatted
    with the position's row ``a`` and ``a4`` = 4 a; ``vq`` = vb + q, ``base`` setting vb per
    channel). Rows and columns past the input's edges
    read zeros (rows off the input read the zero row zr). With ``rows``, only the position
    rows a0 .. a1 are stored. Indented ``ind_`` spaces."""
    i0 = " " * int(ind_)
    i1, i2, i3 = i0 + "    ", i0 + "        ", i0 + "            "
    comb = ("{0} - {2}", "{1} + {2}", "{2} - {1}", "{1} - {3}")
    out = [
        i0 + "t = t0",
        i0 + "while t < t0 + nt:",
        i1 + "s = t // per",
        i1 + "tx = t % tw",
        i1 + "ns = min(t0 + nt - t, tw - tx)  # the tiles left in this row",
        i1 + "ia = t - t0",
        i1 + "y0 = 2 * ((t % per) // tw) - pt",
        i1 + "ja = 2 * tx  # padded columns ja .. jb, those from lo to hi read x",
        i1 + "jb = ja + 2 * ns + 2",
        i1 + "lo = min(max(ja, pl), jb)",
        i1 + "hi = max(min(jb, pl + w_), lo)",
    ]
    out += [i1 + f"ok{r} = 0 <= y0 + {r} < h_" for r in range(4)]
    out += [i1 + f"src{r} = xf if ok{r} else zr" for r in range(4)]
    out += [
        i1 + "for c in range(c_):",
        i2 + "xb = (s * c_ + c) * plane + y0 * w_ - pl",
    ]
    out += [i2 + f"b{r} = U(xb + {r} * w_ if ok{r} else -pl)" for r in range(4)]
    out += [i2 + "for j in range(U(ja), U(lo)):",
            i3 + "; ".join(f"eb[U({a}) * ewp + j] = z" for a in range(4)),
            i2 + "for j in range(U(hi), U(jb)):",
            i3 + "; ".join(f"eb[U({a}) * ewp + j] = z" for a in range(4))]

    # one column (then one tile) an iteration: unrolled in blocks of 16 columns and 8 tiles the
    # transform ran no faster, and made two thirds of the Winograd kernels' code
    out += [i2 + "for jj in range(U(lo), U(hi)):"]
    out += [i3 + f"d{r} = src{r}[b{r} + jj]" for r in range(4)]
    out += [i3 + f"eb[U({a}) * ewp + jj] = " + comb[a].format("d0", "d1", "d2", "d3")
            for a in range(4)]
    out += [i2 + base, i2 + "for q in range(ns):", i3 + "jj = U(ja + 2 * q)",
            i3 + "vq = vb + U(q)"]
    for a in range(4):
        ind = i3
        if rows:
            out.append(i3 + f"if a0 <= {a} < a1:")
            ind = i3 + "    "
        out.append(ind + f"er = jj + U({a}) * ewp; vr = {dst.format(a=a, a4=4 * a)}")
        out.append(ind + "; ".join(f"e{m} = eb[er + U({m})]" for m in range(4)))
        out += [ind + f"v[vr + U({b}) * vp] = " + comb[b].format("e0", "e1", "e2", "e3")
                for b in range(4)]
    out.append(i1 + "t += ns")
    return out


def _wpatch_source() -> str:
    """``wpatch(xf, zr, v, eb, t0, nt, per, tw, pt, pl, h_, w_, c_, plane, ewp, vp, tg, z, a0,
    a1)``: ``_patches`` for ``wfwd`` (a0, a1 = 0, 4) and ``wgradw``, a function of its own
    (``HELPERS``): compiled once, not in each kernel."""
    out = ["def wpatch(xf, zr, v, eb, t0, nt, per, tw, pt, pl, h_, w_, c_, plane, ewp, vp, tg, z, a0,",
           "           a1):"]
    out += _patches("4", "vb = U(c * tg + ia)", "vq + U(({a} - a0) * 4) * vp", rows=True)
    return "\n".join(out) + "\n"


def _wfwd_source(p: int, ob: int) -> str:
    """``wfwd(x, u, b, y, pt, pl, tg, g0, g1)``: Winograd F(2x2, 3x3) on the channel-first
    arrays as they are: groups g0 .. g1 of ``tg`` output tiles (2x2 pixels each, numbered
    across the batch: sample, tile row, tile column) of y (m, O, Ho, Wo) <- x (m, C, H, W)
    (padding ``pt`` / ``pl`` read as zeros) by the transformed weights u (16, C, O) (``G w
    G^T``), plus b (O). A group's input patches are transformed into v (16, C, tg) (``B^T d
    B``, ``_patches``), the 16 products summed over C in blocks of ``p`` tiles x ``ob`` output
    channels (a tile's values read at literal offsets, folded into the multiply-adds as
    broadcasts), ``ob`` channels at a time into m (16, tg, ob), then transformed to the tiles'
    pixels (``A^T M A``). Scratch: the group's v and m, in cache; no copies of x or y."""
    out = [
        "def wfwd(x, u, b, y, pt, pl, tg, g0, g1):",
        "    m_, c_, h_, w_ = x.shape",
        "    _, _, o_ = u.shape",
        "    _, _, ho, wo = y.shape",
        "    th = (ho + 1) // 2",
        "    tw = (wo + 1) // 2",
        "    per = th * tw",
        "    total = m_ * per",
        "    xf = x.reshape(-1)",
        "    wf = u.reshape(-1)",
        "    yf = y.reshape(-1)",
        "    z = yf.dtype.type(0)",
        "    cu = U(c_)",
        "    ou = U(o_)",
        "    tu = U(tg)",
        "    plane = h_ * w_",
        "    vp = U(c_ * tg + 16)  # from one of the 16 positions to the next: not a power of two",
        f"    mp = U(tg * {ob} + 16)",
        "    v = np.empty(16 * vp, yf.dtype)",
        "    mm = np.empty(16 * mp, yf.dtype)",
        "    ewp = U(2 * tw + 18)  # a row of tiles' padded columns, and a cache line",
        "    eb = np.empty(4 * (2 * tw + 18), yf.dtype)",
        f"    ot = np.empty({4 * ob}, yf.dtype)",
        "    oplane = U(ho * wo)",
        "    zr = np.zeros(w_, yf.dtype)",
        "    zero = np.int64(0)",
        "    for gi in range(g0, g1):",
        "        t0 = gi * tg",
        "        nt = min(tg, total - t0)",
    ]
    out += ["        wpatch(xf, zr, v, eb, t0, nt, per, tw, pt, pl, h_, w_, c_, plane, ewp, vp, tg, z,",
            "               zero, zero + 4)"]
    out += [
        f"        for ob in range(0, o_, {ob}):",
        "            for p in range(16):",
        "                wb = U(p * c_ * o_ + ob)",
        "                it = 0",
        "                while it < nt:",
    ]

    def block(k: int, ind: str) -> list[str]:
        lines = _sums(k, ind)
        lines += [ind + "vb = U(p) * vp + U(it)", ind + "for c in range(cu):"]
        lines += _step(k, ind + "    ", "wc = wb + c * ou", "v, vb + c * tu, U(1)")
        lines.append(ind + f"mb = U(p) * mp + U(it * {ob})")
        return lines + [ind + f"block_store(mm, mb, U({ob}), acc)"]

    out += _blocks(p, "nt", "it", block, 20)
    out += [
        "            for i in range(nt):  # the output transform, A^T M A, plus the bias",
        "                t = t0 + i",
        "                s = t // per",
        "                oy = 2 * ((t % per) // tw)",
        "                ox = 2 * (t % tw)",
        # the block's four pixels for its channels into ot (a loop along the channels, which
        # LLVM vectorizes: stored to the planes from here it ran scalar), then to the planes
        f"                for j in range(U({ob})):",
        f"                    mo = U(i * {ob}) + j",
    ]
    for pos in range(16):
        out.append(f"                    m{pos} = mm[mo + U({pos}) * mp]")
    out += [
        "                    p0 = m0 + m4 + m8; p1 = m1 + m5 + m9",
        "                    p2 = m2 + m6 + m10; p3 = m3 + m7 + m11",
        "                    s0 = m4 - m8 - m12; s1 = m5 - m9 - m13",
        "                    s2 = m6 - m10 - m14; s3 = m7 - m11 - m15",
        "                    bj = b[U(ob) + j]",
        "                    ot[j] = p0 + p1 + p2 + bj",
        f"                    ot[U({ob}) + j] = p1 - p2 - p3 + bj",
        f"                    ot[U({2 * ob}) + j] = s0 + s1 + s2 + bj",
        f"                    ot[U({3 * ob}) + j] = s1 - s2 - s3 + bj",
        "                yb = U(((s * o_ + ob) * ho + oy) * wo + ox)",
        "                if ox + 1 < wo and oy + 1 < ho:",
        f"                    for j in range(U({ob})):",
        "                        yj = yb + j * oplane",
        f"                        yf[yj] = ot[j]; yf[yj + U(1)] = ot[U({ob}) + j]",
        f"                        yf[yj + U(wo)] = ot[U({2 * ob}) + j]",
        f"                        yf[yj + U(wo + 1)] = ot[U({3 * ob}) + j]",
        "                else:  # a tile past the last column or row",
        f"                    for j in range(U({ob})):",
        "                        yj = yb + j * oplane",
        "                        yf[yj] = ot[j]",
        "                        if ox + 1 < wo:",
        f"                            yf[yj + U(1)] = ot[U({ob}) + j]",
        "                        if oy + 1 < ho:",
        f"                            yf[yj + U(wo)] = ot[U({2 * ob}) + j]",
        "                            if ox + 1 < wo:",
        f"                                yf[yj + U(wo + 1)] = ot[U({3 * ob}) + j]",
    ]
    return "\n".join(out) + "\n"


def _wdm_source() -> str:
    """``wdm(gf, gt, wf, t0, nt, per, tw, ho, wo, o_, mp, z, a0, a1)``: ``wgradw``'s dM = A dY
    A^T of a group's tiles t0 .. t0 + nt, the position rows a0 .. a1, into wf; gt scratch (4
    O). A function of its own (``HELPERS``), which ``wgradw`` calls by address: compiled once,
    not in the kernel."""
    out = ["def wdm(gf, gt, wf, t0, nt, per, tw, ho, wo, o_, mp, z, a0, a1):",
           "    ou = U(o_)",
           "    oplane = ho * wo"]
    out += [
        "    for i in range(nt):  # dM = A dY A^T of each tile's 2x2 output gradient",
        "        t = t0 + i",
        "        s = t // per",
        "        oy = 2 * ((t % per) // tw)",
        "        ox = 2 * (t % tw)",
        "        right = ox + 1 < wo",
        "        down = oy + 1 < ho",
        # the tile's four pixels of every channel into gt (zeros past the edges), then each
        # row of dM in a loop along the channels, which LLVM vectorizes
        "        gb = U((s * o_ * ho + oy) * wo + ox)",
        "        if right and down:",
        "            for o in range(ou):",
        "                go = gb + o * U(oplane)",
        "                gt[o] = gf[go]; gt[ou + o] = gf[go + U(1)]",
        "                gt[U(2) * ou + o] = gf[go + U(wo)]",
        "                gt[U(3) * ou + o] = gf[go + U(wo + 1)]",
        "        else:",
        "            for o in range(ou):",
        "                go = gb + o * U(oplane)",
        "                gt[o] = gf[go]",
        "                gt[ou + o] = gf[go + U(1)] if right else z",
        "                gt[U(2) * ou + o] = gf[go + U(wo)] if down else z",
        "                gt[U(3) * ou + o] = gf[go + U(wo + 1)] if right and down else z",
        "        mb = U(i * o_)",
    ]
    rows = (("g00", "u0", "u1", "-g01"), ("g00 + g10", "u0 + w0", "u1 + w1", "-g01 - g11"),
            ("g00 - g10", "u0 - w0", "u1 - w1", "g11 - g01"), ("-g10", "-w0", "-w1", "g11"))
    for a, vals in enumerate(rows):
        out += [
            f"        if a0 <= {a} < a1:",
            "            for o in range(ou):",
            "                g00 = gt[o]; g01 = gt[ou + o]",
            "                g10 = gt[U(2) * ou + o]; g11 = gt[U(3) * ou + o]",
            "                u0 = g00 + g01; u1 = g00 - g01; w0 = g10 + g11; w1 = g10 - g11",
        ]
        out += [f"                wf[mb + o + U(({a} - a0) * 4 + {b}) * mp] = {e}"
                for b, e in enumerate(vals)]
    return "\n".join(out) + "\n"


def _wgradw_source(pc: int, ob: int, tg: int) -> str:
    """``wgradw(x, g, du, pt, pl, a0, a1, g0, g1, wp, wd)``: du (16, C, O) += the weight gradient of
    ``wfwd`` in the transformed weights, ``dU = sum over tiles of V^T dM``, for the positions
    in rows a0 .. a1 (of 4) of the 4x4 transform, over groups g0 .. g1 of ``tg`` tiles; x (m,
    C, H, W) the input, g (m, O, Ho, Wo) the output's gradient, channel-first as they are. A
    group's ``V = B^T d B`` ((C, tg) per position) and ``dM = A dY A^T`` (the adjoint of the
    output transform, (tg, O) per position) are formed for those rows only, then summed in
    blocks of ``pc`` input x ``ob`` output channels (a block's channels ``tg`` apart, a
    literal offset); C a multiple of ``pc``. The parallel twin gives each thread a chunk of the rows:
    disjoint sums, no transform done twice. The input transform and dM are the compiled code of
    ``wpatch`` at ``wp`` and ``wdm`` at ``wd`` (``_PARTS``, bound by ``_kernel``): with
    ``wpatch`` called by name (its IR linked in, optimised again) and dM inline the kernel took
    1.5-2.0 CPU s to compile."""
    out = [
        "def wgradw(x, g, du, pt, pl, a0, a1, g0, g1, wp, wd):",
        f"    tg = np.int64({tg})  # a variable, not a literal: wpatch compiles once for both",
        "    m_, c_, h_, w_ = x.shape",
        "    _, o_, ho, wo = g.shape",
        "    th = (ho + 1) // 2",
        "    tw = (wo + 1) // 2",
        "    per = th * tw",
        "    total = m_ * per",
        "    xf = x.reshape(-1)",
        "    gf = g.reshape(-1)",
        "    df = du.reshape(-1)",
        "    z = df.dtype.type(0)",
        "    ou = U(o_)",
        "    plane = h_ * w_",
        "    npos = 4 * (a1 - a0)",
        "    vp = U(tg * c_ + 16)  # from one position to the next: not a power of two",
        "    mp = U(tg * o_ + 16)",
        "    v = np.empty(npos * vp, df.dtype)",
        "    wf = np.empty(npos * mp, df.dtype)  # dM, read as the blocks' vectors",
        "    gt = np.empty(4 * o_, df.dtype)",
        "    ewp = U(2 * tw + 18)",
        "    eb = np.empty(4 * (2 * tw + 18), df.dtype)",
        "    zr = np.zeros(w_, df.dtype)",
        "    for gi in range(g0, g1):",
        "        t0 = gi * tg",
        "        nt = min(tg, total - t0)",
    ]
    out += ["        call_at(wp, (xf, zr, v, eb, t0, nt, per, tw, pt, pl, h_, w_, c_, plane, ewp, vp,",
            "                    tg, z, a0, a1))"]
    out += ["        call_at(wd, (gf, gt, wf, t0, nt, per, tw, ho, wo, o_, mp, z, a0, a1))"]
    out += [
        "        for p in range(npos):",
        "            for c0 in range(0, c_, " + str(pc) + "):",
        f"                for ob in range(0, o_, {ob}):",
    ]
    ind = " " * 20
    out += _sums(pc, ind)
    out += [ind + "vb = U(p) * vp + U(c0 * tg)", ind + "gb = U(p) * mp + U(ob)",
            ind + "for i in range(U(nt)):"]
    out += _step(pc, ind + "    ", "wc = gb + i * ou", f"v, vb + i, U({tg})")
    out.append(ind + "db = U(((4 * a0 + p) * c_ + c0) * o_ + ob)")
    out.append(ind + "block_add(df, db, ou, acc)")
    return "\n".join(out) + "\n"


def _source(p: int, pc: int, ob: int) -> str:
    body = "\n\n".join(
        (_fwd_source(p, ob), _wgrad_source(pc, ob), _tgrad_source(p, ob), _fwdc_source(p, ob),
         _tgrad_source(p, ob, first=True), _wgrad_source(pc, ob, first=True),
         _wpatch_source(), _wfwd_source(p, ob), _wdm_source(), _wgradw_source(pc, ob, TILES),
         _PAR_SOURCE,
         _SAMPLE_SOURCE)
    )
    # U(<literal>) as a module constant, typed once: numba types every call of U on its own
    # (the calls were a third of the kernels' typing, and compile time follows its length)
    lits = sorted({int(m) for m in re.findall(r"\bU\((\d+)\)", body)})
    body = re.sub(r"\bU\((\d+)\)", r"U\1", body)
    head = (
        '"""Generated by tapegrad._kernels.conv_blocked (its template, for this machine)."""\n'
        "import numpy as np\n"
        "from tapegrad._kernels.conv_blocked import call_at\n"
        "from tapegrad._kernels.conv_vec import block_add, block_fma, block_fma2, block_put, "
        "block_put_t, block_shift, block_store, row_load, row_zero\n"
        "U = np.uint64\n" + "".join(f"U{n} = U({n})\n" for n in lits) + "\n\n"
    )
    return head + body


# Each kernel's parallel twin: its range of rows (or weight-gradient blocks) in as many
# contiguous chunks as numba has threads, one chunk a ``prange`` iteration; the chunks write
# disjoint parts of the output, so the result is the serial kernel's at any thread count. A
# chunk calls the serial kernel's machine code by address (``call_at``; ``fp``, bound by
# ``_twin``): called by name, numba linked the serial kernel's IR into the twin and its parfor
# body and optimised it again (1.4-4.1 CPU s a twin, against 0.4-0.8).
_PAR_SOURCE = """from numba import prange
from tapegrad._kernels.conv_blocked import call_at
from tapegrad._kernels.chunks import bounds, num_threads


def fwd_par(xt, wk, b, y, sh, sw, dh, dw, r0, r1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(r1 - r0, k, i, 1)
        call_at(fp, (xt, wk, b, y, sh, sw, dh, dw, r0 + lo, r0 + hi))


def wgrad_par(xt, gt, dwk, sh, sw, dh, dw, t0, t1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(t1 - t0, k, i, 1)
        call_at(fp, (xt, gt, dwk, sh, sw, dh, dw, t0 + lo, t0 + hi))


def tgrad_par(gt, wk, xg, sh, sw, dh, dw, pt, pl, ot, ol, r0, r1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(r1 - r0, k, i, 1)
        call_at(fp, (gt, wk, xg, sh, sw, dh, dw, pt, pl, ot, ol, r0 + lo, r0 + hi))


def fwdc_par(x, wk, b, y, sh, sw, dh, dw, r0, r1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(r1 - r0, k, i, 1)
        call_at(fp, (x, wk, b, y, sh, sw, dh, dw, r0 + lo, r0 + hi))


def wgradc_par(x, gt, dwk, sh, sw, dh, dw, t0, t1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(t1 - t0, k, i, 1)
        call_at(fp, (x, gt, dwk, sh, sw, dh, dw, t0 + lo, t0 + hi))


def tgradc_par(g, wk, xg, sh, sw, dh, dw, pt, pl, ot, ol, r0, r1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(r1 - r0, k, i, 1)
        call_at(fp, (g, wk, xg, sh, sw, dh, dw, pt, pl, ot, ol, r0 + lo, r0 + hi))


def wfwd_par(x, u, b, y, pt, pl, tg, g0, g1, fp):
    k = num_threads()
    for i in prange(k):
        lo, hi = bounds(g1 - g0, k, i, 1)
        call_at(fp, (x, u, b, y, pt, pl, tg, g0 + lo, g0 + hi))


def wgradw_par(x, g, du, pt, pl, a0, a1, g0, g1, wp, wd, fp):
    k = min(num_threads(), 4)
    for i in prange(k):  # the transform's 4 rows in k chunks (a0, a1 as given are not used)
        lo, hi = bounds(4, k, i, 1)
        call_at(fp, (x, g, du, pt, pl, lo, hi, g0, g1, wp, wd))
"""

# The passes on channels-last copies, a sample at a time: samples n0 .. n1, each copied into a
# one-sample buffer (xt, gt: (1, ...) channels-last, or gp: (1, O, Hg, Wg) zeros around the
# output gradient's place) and at once run through its kernel while the copy is in cache. Their
# twins split the samples into as many contiguous chunks as the buffers' first axis holds
# (``_chunks``), each chunk on a thread with its buffer; the weight gradient's also with its
# own sums (dwk (k * kh, ...): chunk i's in rows i * kh .. (i + 1) * kh), added by the caller.
# The integer arguments are int64 variables, never literals: numba compiles a callee afresh
# for each literal value it is called with. The twins call the passes as the kernels' twins
# call theirs (``call_at``).
_SAMPLE_SOURCE = """from numba import prange
from tapegrad._kernels.chunks import bounds
from tapegrad._kernels.conv_blocked import _nhwc1, _pad_k, call_at


def fwds(x, wk, b, y, xt, sh, sw, dh, dw, pt, pl, n0, n1):
    zero = np.int64(0)
    for n in range(n0, n1):
        _nhwc1(x[n:n + 1], xt, pt, pl)
        fwd(xt, wk, b, y[n:n + 1], sh, sw, dh, dw, zero, y.shape[2])


def tgrads(g, wk, xg, gt, sh, sw, dh, dw, pt, pl, ot, ol, n0, n1):
    zero = np.int64(0)
    for n in range(n0, n1):
        _nhwc1(g[n:n + 1], gt, ot, ol)
        tgrad(gt, wk, xg[n:n + 1], sh, sw, dh, dw, pt, pl, ot, ol, zero, xg.shape[2])


def tgradcs(g, wk, xg, gp, sh, sw, dh, dw, pt, pl, ot, ol, n0, n1):
    zero = np.int64(0)
    for n in range(n0, n1):  # gp's zeros around g's place stay zeros from sample to sample
        _pad_k(g[n:n + 1], gp, ot, ol, zero, gp.shape[1])
        tgradc(gp, wk, xg[n:n + 1], sh, sw, dh, dw, pt, pl, ot, ol, zero, xg.shape[2])


def wgrads(x, g, dwk, xt, gt, sh, sw, dh, dw, pt, pl, nb, n0, n1):
    zero = np.int64(0)
    for n in range(n0, n1):
        _nhwc1(x[n:n + 1], xt, pt, pl)
        _nhwc1(g[n:n + 1], gt, zero, zero)
        wgrad(xt, gt, dwk, sh, sw, dh, dw, zero, nb)


def wgradcs(x, g, dwk, gt, sh, sw, dh, dw, nb, n0, n1):
    zero = np.int64(0)
    for n in range(n0, n1):
        _nhwc1(g[n:n + 1], gt, zero, zero)
        wgradc(x[n:n + 1], gt, dwk, sh, sw, dh, dw, zero, nb)


def fwds_par(x, wk, b, y, xt, sh, sw, dh, dw, pt, pl, n0, n1, fp):
    k = xt.shape[0]
    for i in prange(k):
        lo, hi = bounds(n1 - n0, k, i, 1)
        call_at(fp, (x, wk, b, y, xt[i:i + 1], sh, sw, dh, dw, pt, pl, n0 + lo, n0 + hi))


def tgrads_par(g, wk, xg, gt, sh, sw, dh, dw, pt, pl, ot, ol, n0, n1, fp):
    k = gt.shape[0]
    for i in prange(k):
        lo, hi = bounds(n1 - n0, k, i, 1)
        call_at(fp, (g, wk, xg, gt[i:i + 1], sh, sw, dh, dw, pt, pl, ot, ol, n0 + lo,
                     n0 + hi))


def tgradcs_par(g, wk, xg, gp, sh, sw, dh, dw, pt, pl, ot, ol, n0, n1, fp):
    k = gp.shape[0]
    for i in prange(k):
        lo, hi = bounds(n1 - n0, k, i, 1)
        call_at(fp, (g, wk, xg, gp[i:i + 1], sh, sw, dh, dw, pt, pl, ot, ol, n0 + lo,
                     n0 + hi))


def wgrads_par(x, g, dwk, xt, gt, sh, sw, dh, dw, pt, pl, nb, n0, n1, fp):
    k = xt.shape[0]
    kh = dwk.shape[0] // k
    for i in prange(k):
        lo, hi = bounds(n1 - n0, k, i, 1)
        call_at(fp, (x, g, dwk[i * kh:(i + 1) * kh], xt[i:i + 1], gt[i:i + 1], sh, sw, dh, dw,
                     pt, pl, nb, n0 + lo, n0 + hi))


def wgradcs_par(x, g, dwk, gt, sh, sw, dh, dw, nb, n0, n1, fp):
    k = gt.shape[0]
    kh = dwk.shape[0] // k
    for i in prange(k):
        lo, hi = bounds(n1 - n0, k, i, 1)
        call_at(fp, (x, g, dwk[i * kh:(i + 1) * kh], gt[i:i + 1], sh, sw, dh, dw, nb, n0 + lo,
                     n0 + hi))
"""


_MODULES: dict[tuple[int, int, int], Any] = {}


def _aside(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on a helper thread, waited for: how the generated module is imported and
    its kernels compile or load (a kernel's first use, never while a module is imported).

    Both keep some allocations for good and free many more around them; in the main thread
    they left glibc's main heap in free fragments, where a step's large arrays then landed and
    whose freed pages stay resident (a fresh mapping is returned on ``free``). A thread of its
    own allocates from another arena. The rise of peak RSS over three steps after warm-up
    (the benchmark's memory measure), fresh processes: (i) 21.5-24.8 MB with the module
    imported again for every kernel (as it was), 17.2 imported once, 16.6-16.7 imported once
    and aside; (e) 8.2-11.1, 7.0-7.3, 6.6-6.7; (h) 35-38, 33.9-34.2, 33.8 (PyTorch 17.3, 7.4,
    36.2).
    """
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller
            out.append((False, e))

    t = threading.Thread(target=run, name="tapegrad-kernel-load")
    t.start()
    t.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def _module(p: int, pc: int, ob: int) -> Any:
    """The generated kernels, written once into the cache folder (atomically, as several
    processes may start at once) and imported from there, so numba caches them; into a
    temporary folder, compiled afresh each process, when the cache folder cannot be written.
    Imported once a process, on a helper thread (``_aside``; its source is large: each import
    kept a copy of every function alive, 0.7 MB each, behind the kernels compiled from it)."""
    mod = _MODULES.get((p, pc, ob))
    if mod is None:
        mod = _MODULES[(p, pc, ob)] = _aside(_import, p, pc, ob)
    return mod


def _import(p: int, pc: int, ob: int) -> Any:
    src = _source(p, pc, ob)
    base = f"conv_blocked_p{p}_c{pc}_o{ob}.py"
    try:
        path = _write(cache_dir(), base, src)
    except OSError:
        path = _write(tempfile.mkdtemp(prefix="tapegrad-"), base, src)
    name = f"{__name__}_{base[len('conv_blocked_'):-3]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache finds the kernels' globals through it
    spec.loader.exec_module(mod)
    for name in HELPERS:  # compiled when a kernel calling them is, within its settings
        setattr(mod, name, jit(fastmath={"contract"}, ieee=True)(getattr(mod, name)))
    return mod


def _write(where: str, base: str, src: str) -> str:
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, base)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == src:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(src)
    os.replace(tmp, path)
    return path


# Functions of the generated module that kernels call, compiled on their own (once for all
# their callers, each dtype).
HELPERS = ("wpatch", "wdm")
_KERNELS: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()
_BUILDING: set[tuple[str, str]] = set()  # kernels a thread is making (background mode)
_building_lock = threading.Lock()

# Each kernel's arguments: its arrays ("t": 4-d, "v": 1-d, "w": 3-d, of the element type,
# C-contiguous) and how many integers follow them.
_ARGS = {
    "fwd": ("ttvt", 6), "fwdc": ("ttvt", 6), "wgrad": ("ttt", 6), "wgradc": ("ttt", 6),
    "tgrad": ("ttt", 10), "tgradc": ("ttt", 10), "wfwd": ("twvt", 5), "wgradw": ("ttw", 8),
    "fwds": ("ttvtt", 8), "tgrads": ("tttt", 10), "tgradcs": ("tttt", 10),
    "wgrads": ("ttttt", 9), "wgradcs": ("tttt", 7),
}
# The kernel each one calls by its global name: a twin its serial kernel, a sample-at-a-time
# pass the kernel it runs on each sample.
_CALLS = {"fwds": "fwd", "tgrads": "tgrad", "tgradcs": "tgradc", "wgrads": "wgrad",
          "wgradcs": "wgradc"}
# The helpers a kernel calls by address (``call_at``), its last integer arguments, bound by
# ``_kernel``: by name, a helper's IR was linked into the kernel and optimised again (``wgradw``
# with ``wpatch`` by name and dM inline: 1.5-2.0 CPU s).
_PARTS = {"wgradw": ("wpatch", "wdm")}


def _kernel(name: str, dtype: Any, parallel: bool = False, wait: bool = False) -> Any:
    """Kernel ``name`` (a key of ``_ARGS``) compiled for ``dtype`` (on first use, each dtype
    apart: float64 is for tests and checks, and each compile takes seconds); with
    ``parallel``, its parallel twin (which compiles the serial kernel first).

    In the ``background`` compile mode (``runtime``) a kernel not made yet raises ``NotReady``
    (the convolution's reference runs) while a thread of this process makes it: the compiler
    process finds kernels by module and name, and these are made by this call
    (docs/design.md, "Compile budget")."""
    key = (name + "_par" * parallel, np.dtype(dtype).char)
    k = _KERNELS.get(key)
    if k is not None:
        return k
    if not wait and mode() == "background":
        with _building_lock:
            if key not in _BUILDING:
                _BUILDING.add(key)
                threading.Thread(target=_kernel, args=(name, dtype, parallel, True),
                                 daemon=True, name="tapegrad-conv-blocked").start()
        raise NotReady(f"conv_blocked {key[0]}")
    callee = name if parallel else _CALLS.get(name)
    called = None if callee is None else _kernel(callee, dtype, wait=True)
    with _lock:
        if key not in _KERNELS:
            nb = numba()
            assert nb is not None
            mod = _module(P, PC, OB)
            e = {"f": "f4", "d": "f8"}[key[1]]
            kinds = {"t": e + "[:, :, :, ::1]", "v": e + "[::1]", "w": e + "[:, :, ::1]"}
            arrays, ints = _ARGS[name]
            sig = f"void({', '.join(kinds[a] for a in arrays)}{', int64' * (ints + parallel)})"
            cfg = nb.core.config
            old = cfg.SLP_VECTORIZE
            cfg.SLP_VECTORIZE = 1  # for these kernels only: it packs the scalar sums in vectors
            try:
                if callee is not None and not parallel:  # resolved by its global name
                    setattr(mod, callee, called)
                fn = getattr(getattr(mod, key[0]), "py_func", getattr(mod, key[0]))
                k = _aside(jit(parallel=parallel, fastmath={"contract"}, signatures=[sig]), fn)
                made = k if called is None or not parallel else _twin(k, called)
                parts = _PARTS.get(name, ())
                if parts:
                    made = _bind(made, k, *[_aside(_part_at, mod, h, key[1]) for h in parts])
                _KERNELS[key] = made
            finally:
                cfg.SLP_VECTORIZE = old
    return _KERNELS[key]


def _twin(twin: Any, serial: Any) -> Any:
    """``twin`` with its last argument bound to the address of ``serial``'s compiled entry
    point, which its chunks call (``call_at``): the twin holds no copy of the serial kernel,
    so it compiles in the time of its ``prange`` alone."""
    serial = getattr(serial, "kernel", serial)  # a kernel with a part bound (``_bind``)
    cres = serial.overloads[serial.signatures[0]]
    fp = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    assert fp, f"conv_blocked: no entry point {cres.fndesc.llvm_func_name}"

    def run(*args: Any) -> None:
        twin(*args, fp)

    run.twin, run.serial = twin, serial  # type: ignore[attr-defined] # keeps the code alive
    return run


def _part_at(mod: Any, name: str, char: str) -> int:
    """The address of helper ``name``'s compiled code (generated module ``mod``) for dtype
    ``char``, compiled (or loaded) for the argument types its kernel passes, in the kernels'
    settings (numba's own compile: never ``NotReady``)."""
    helper = getattr(mod, name)
    dt = np.dtype(char)
    e, z = np.empty(0, dt), dt.type(0)
    args = {"wpatch": (e, e, e, e, *(0,) * 10, U(0), U(0), 0, z, 0, 0),
            "wdm": (e, e, e, *(0,) * 7, U(0), z, 0, 0)}[name]
    sig = tuple(helper.typeof_pyval(a) for a in args)
    helper.compile(sig)
    cres = helper.overloads[sig]
    fp = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    assert fp, f"conv_blocked: no entry point {cres.fndesc.llvm_func_name}"
    return int(fp)


def _bind(run: Any, kernel: Any, *at: int) -> Any:
    """``run`` with its last integer arguments (before a twin's own address) bound to ``at``,
    its parts' addresses (``_PARTS``); ``kernel`` the compiled kernel, for ``_twin``."""

    def bound(*args: Any) -> None:
        run(*args, *at)

    bound.kernel, bound.run = kernel, run  # type: ignore[attr-defined] # keeps the code alive
    return bound


# Multiply-adds from which a kernel call runs on numba's threads (when numpy's BLAS and the
# kernels share numba's pool, threads.active()): about 50 us of one core's work.
PARALLEL_MIN = 1 << 22


def _on_two(macs: int) -> bool:
    """Whether a call of ``macs`` multiply-adds runs on numba's threads: large, the pool
    shared."""
    from . import threads  # noqa: PLC0415

    return threads.worth(macs, PARALLEL_MIN)


def _chunks(n: int, parallel: bool) -> int:
    """How many chunks a sample-at-a-time pass splits ``n`` samples into: one a thread when it
    runs in parallel (each with its own one-sample buffer), else one."""
    nb = numba()
    return min(n, nb.get_num_threads()) if parallel and n > 1 and nb is not None else 1


def _pick(name: str, dtype: Any, macs: int) -> Any:
    """The serial kernel, or its parallel twin when the call runs on numba's threads."""
    return _kernel(name, dtype, parallel=_on_two(macs))


# Channels summed over (C for the forward and weight gradient, O for the input gradient) below
# which the blocks serve a convolution on one thread. Forward / weight gradient / input gradient
# against the paths they replace (alternating in one process, one thread against numpy's two
# BLAS threads): 16 -> 32 at 8x8 1.13 / 1.04 / 0.95 ms against 2.31 / 2.97 / 2.40, DCGAN's 4x4
# stride-2 3 -> 16 at 64x64 3.2 / 4.9 against 8.8 / 14.3, 16 -> 32 3.6 / 3.7 against 9.5 / 11.3,
# 32 -> 64 3.3 / 3.3 against 5.3 / 6.0; from 64 channels up the GEMMs won (64 -> 128 4x4 stride
# 2 on 8x8: 4.6 / 5.1 against 3.1 / 3.0; 64 -> 128 3x3 stride 2 on 28x28 4.1 / 4.5 against 3.8
# / 4.4). On two threads (the twins, numpy's BLAS sharing numba's pool) the blocks serve wider
# layers too, kernels larger than 1x1, from PARALLEL_MIN multiply-adds (docs/design.md):
# forward / input gradient / weight gradient against the GEMM and Winograd paths, e.g. 128 ->
# 128 3x3 at 14x14 (batch 8) 3.0 / 3.4 / 2.9 against 3.6 / 4.4 / 4.1 ms, DCGAN's 64 -> 128 4x4
# stride 2 at 32x32 (batch 64) 39 / 33 / 49 against 70 / 48 / 67; 1x1 kernels stay GEMMs (0.62
# against 0.24 ms forward at 64 -> 128, stride 2).
CHANNELS = 64
# Whether the wide route (CHANNELS or more, two threads) exists: on AVX-512 only. With AVX2's
# eight-float vectors a block is P = 4 pixels and the twins reached about 70 GFLOP/s on two
# cores against the GEMM's 125: forward / input gradient / weight gradient at batch 64, as
# PyTorch's time over tapegrad's (alternating in one process, AMD Zen3), blocked against the
# GEMM paths: DCGAN ngf 64's 256 -> 512 4x4 stride 2 to 4x4 0.48 / 0.49 / 0.46 against 1.06 /
# 0.82 / 1.20, 128 -> 256 0.73 / 0.68 / 0.57 against 0.92 / 0.93 / 0.83, ngf 16's 64 -> 128
# 0.59 / 0.86 / 0.66 against 0.78 / 0.98 / 0.93; (i)'s 64 -> 128 3x3 stride 2 at 28x28 (batch
# 16) 0.66 / 0.95 / 0.66 against 0.66 / 0.91 / 0.86. Layers whose weights fit in half a core's
# L2 cache (WIDE_AVX2_WEIGHTS elements) still take it: ngf 16's 32 -> 64 input gradient (64
# summed, 32K weights) 1.04 against 0.65.
WIDE = P == 8
WIDE_AVX2_WEIGHTS = 1 << 16


def takes(groups: int, c: int, o: int, taps: int, macs: int, row: int) -> bool:
    """Whether the forward and weight gradient serve this convolution (``taps`` = kh * kw,
    ``macs`` its multiply-adds, ``row`` the pixels of a row the pass runs along in blocks of
    ``P``: the output's for the forward and weight gradient, the input's in one stride class
    for the input gradient): one group, output channels a multiple of the block, and fewer than
    CHANNELS input channels, or, on two threads with AVX-512 (WIDE; on AVX2 up to
    WIDE_AVX2_WEIGHTS weights), any number with a kernel larger than 1x1 and rows of at least a
    block. (Rows shorter than a block leave part of each block idle, and the
    weight gradient stores its sums after every few pixels: DCGAN's 256 -> 512 4x4 stride 2 to
    4x4, forward 86 ms blocked against 55; at ngf 64 its input gradient (4 pixels a class) 35.7
    against the GEMM's 27.0, weight gradient 42.0 against 30.9; its generator's first input
    gradient, to 4x4 from 1x1, 3.5 against 0.95.) (Padding the output channels to a block with
    zero weights cost more than it saved: 3 output channels padded to 16, DCGAN's last layer,
    6.6 ms against the GEMM's 3.0.)"""
    if groups != 1 or o % OB:
        return False
    if c < CHANNELS:
        return True
    from . import threads  # noqa: PLC0415

    return ((WIDE or c * o * taps <= WIDE_AVX2_WEIGHTS) and taps > 1 and row >= P
            and threads.worth(macs, PARALLEL_MIN))


def takes_input_grad(groups: int, c: int, o: int, taps: int, macs: int, row: int) -> bool:
    """Whether the input gradient does: the forward's conditions with the channels swapped."""
    return takes(groups, o, c, taps, macs, row)


def channel_first(geom: Any, c: int) -> bool:
    """Whether the three passes run on the channel-first arrays as they are (``fwdc``,
    ``tgradc``, ``wgradc``) rather than on channels-last copies: convolutions without padding
    at unit column stride (every window inside the input, a block's pixels next to each other)
    summing at least 16 channels (narrower inputs sum a window row's kw * C inputs as one run
    channels-last). Measured, alternating in one process (mnist's 32 -> 64 3x3 on 26x26, batch
    64): forward / input gradient / weight gradient 10.5 / 14.5 / 13.4 ms channels-last, 7.4 /
    12.3 / 11.0 channel-first: the copies of its 5.5 MB input and 9.4 MB output gradient took
    as long as the products. Padded layers measured no faster channel-first (the padded copy
    costs what the two transposes did: DCGAN's 32 -> 64 4x4 stride 2 2.0 / 2.1 / 2.5 ms either
    way), and a stride in a block's addresses made LLVM gather the inputs into a vector."""
    return geom.stride[1] == 1 and c >= 16 and not any(p for side in geom.padding for p in side)


@jit()
def _pad_k(a, out, top, left, p0, p1):  # type: ignore[no-untyped-def]
    """Planes p0 .. p1 of out (m, C, rows, cols) <- a's (m, C, H, W) ``top`` rows down and
    ``left`` columns right; out's other places are left as they are (zeros)."""
    _, _, h_, w_ = a.shape
    _, _, rows, cols = out.shape
    af = a.reshape(-1)
    of = out.reshape(-1)
    for p in range(p0, p1):
        for r in range(h_):
            src = U((p * h_ + r) * w_)
            dst = U((p * rows + top + r) * cols + left)
            for q in range(U(w_)):
                of[dst + q] = af[src + q]


@jit()
def _nhwc1(x, xt, pt, pl):  # type: ignore[no-untyped-def]
    """xt (1, Hp, Wp, C) <- sample x (1, C, H, W) moved down pt rows and right pl columns,
    zeros elsewhere (rows and columns past Hp, Wp dropped): ``conv_gemm._nhwc_k`` for one
    sample, its whole tiles of TILE pixels by OB channels transposed in registers (``tile_t``;
    CLIP's 16 -> 32 at 8x8 spent a fifth of its weight gradient in the scalar copies)."""
    _, c_, h_, w_ = x.shape
    _, hp, wp, _ = xt.shape
    xf = x.reshape(-1)
    tf = xt.reshape(-1)
    zero = tf.dtype.type(0)
    plane = U(h_ * w_)
    cu = U(c_)
    x0 = min(wp, pl)
    x1 = max(x0, min(wp, w_ + pl))
    nq = x1 - x0
    qf = U(nq - nq % TILE)
    cf = U(c_ - c_ % 16)  # OB
    for r in range(hp):
        d = U(r * wp * c_)
        sr = r - pt
        if sr < 0 or sr >= h_:
            for k in range(U(wp * c_)):
                tf[d + k] = zero
            continue
        for k in range(U(x0 * c_)):
            tf[d + k] = zero
        for k in range(U(x1 * c_), U(wp * c_)):
            tf[d + k] = zero
        src = U(sr * w_ + x0 - pl)
        d += U(x0 * c_)
        for q0 in range(U(0), qf, U(8)):
            for c0 in range(U(0), cf, U(16)):
                tile_t(xf, src + c0 * plane + q0, plane, tf, d + q0 * cu + c0, cu)
        for c in range(cf, cu):
            for q in range(U(0), qf):
                tf[d + q * cu + c] = xf[src + c * plane + q]
        for q in range(qf, U(nq)):
            for c in range(cu):
                tf[d + q * cu + c] = xf[src + c * plane + q]


def input_grad(g: Any, w: Any, geom: Any) -> Any:
    """The input gradient of ``conv`` (any stride): ``tgrad`` on ``g`` a sample at a time, each
    placed in zeros that every window reaches, channel-first when ``channel_first`` holds, else
    copied channels-last (a single sample: its rows in chunks on numba's threads)."""
    o, c, kh, kw = w.shape
    (sh, sw), (dh, dw) = geom.stride, geom.dilation
    n, _, h, wd = geom.in_shape
    ho, wo = geom.out_hw
    pt, pl = geom.padding[0][0], geom.padding[1][0]
    ot, hg = _reach(h, ho, kh, sh, dh, pt)
    ol, wg = _reach(wd, wo, kw, sw, dw, pl)
    dt = g.dtype
    wk = permute_weights(w.astype(dt, copy=False), "oct->toc")  # (kh, kw, O, C)
    out = np.empty((n, c, h, wd), dtype=dt)
    gc = np.ascontiguousarray(g, dtype=dt)
    first = channel_first(geom, c)
    two = _on_two(n * h * wd * c * o * kh * kw // (sh * sw))
    k = _chunks(n, two)
    args = (sh, sw, dh, dw, pt, pl, ot, ol)
    if first:  # the zeros around g's place stay zeros from sample to sample
        gp = np.zeros((k, o, hg, wg), dtype=dt)
        if n == 1 and two:
            _pad_k(gc, gp, ot, ol, 0, o)
            _kernel("tgradc", dt, True)(gp, wk, out, *args, 0, h)
        else:
            _kernel("tgradcs", dt, k > 1)(gc, wk, out, gp, *args, 0, n)
        return out
    gt = np.empty((k, hg, wg, o), dtype=dt)
    if n == 1 and two:
        _nhwc(gc, gt.reshape(1, 1, hg, wg, o), ot, ol)
        _kernel("tgrad", dt, True)(gt, wk, out, *args, 0, h)
    else:
        _kernel("tgrads", dt, k > 1)(gc, wk, out, gt, *args, 0, n)
    return out


def conv(x: Any, w: Any, b: Any, geom: Any) -> Any:
    """conv2d of (N, C, H, W) ``x`` by (O, C, kh, kw) ``w`` (+ ``b``): in one call on ``x`` as
    it is when ``channel_first`` holds, else a sample at a time on channels-last copies (a
    single sample: its rows in chunks on numba's threads)."""
    n, c = x.shape[:2]
    o = w.shape[0]
    (sh, sw), (dh, dw), (ho, wo) = geom.stride, geom.dilation, geom.out_hw
    dt = x.dtype
    wk = permute_weights(w.astype(dt, copy=False), "oct->tco")  # (kh, kw, C, O)
    bb = np.zeros(o, dtype=dt) if b is None else np.ascontiguousarray(b, dtype=dt)
    out = np.empty((n, o, ho, wo), dtype=dt)
    xc = np.ascontiguousarray(x)
    macs = n * ho * wo * o * c * w.shape[2] * w.shape[3]
    if channel_first(geom, c):
        _pick("fwdc", dt, macs)(xc, wk, bb, out, sh, sw, dh, dw, 0, n * ho)
        return out
    hp, wp = padded_hw(geom)
    pt, pl = geom.padding[0][0], geom.padding[1][0]
    wk = _fold(wk, dw)
    two = _on_two(macs)
    k = _chunks(n, two)
    xt = np.empty((k, hp, wp, c), dtype=dt)
    if n == 1 and two:
        _nhwc(xc, xt.reshape(1, 1, hp, wp, c), pt, pl)
        _kernel("fwd", dt, True)(xt, wk, bb, out, sh, sw, dh, dw, 0, ho)
    else:
        _kernel("fwds", dt, k > 1)(xc, wk, bb, out, xt, sh, sw, dh, dw, pt, pl, 0, n)
    return out


def _fold(wk: Any, dw: int) -> Any:
    """(kh, kw, C, O) weights (or their gradient) as (kh, 1, kw * C, O) when the taps of a row
    are adjacent (dilation 1): a window row's kw * C inputs are then one contiguous run, so
    the kernels sum over it in one loop (3-channel layers: one run of 12, not 4 of 3). A view."""
    kh, kw, c, o = wk.shape
    return wk.reshape(kh, 1, kw * c, o) if dw == 1 else wk


def _reach(size: int, out: int, k: int, s: int, d: int, pad: int) -> tuple[int, int]:
    """The output gradient's offset and padded size along one axis: input pixel i reads
    output pixels (i + pad - t * d) / s for the taps t, from (pad - (k - 1) * d) / s at the
    first pixel to (size - 1 + pad) / s at the last."""
    off = max(0, -((pad - (k - 1) * d) // s))
    return off, off + max(out, (size - 1 + pad) // s + 1)


def weight_grad(g: Any, x: Any, geom: Any, wshape: Any) -> Any:
    """The weight gradient of ``conv`` in (kh, kw, C, O) order, a sample at a time: the output
    gradient copied channels-last, the input too unless ``channel_first`` holds. In parallel
    each thread sums a chunk of the samples into sums of its own (a single sample: a chunk of
    the blocks of the sums)."""
    n, c = x.shape[:2]
    o, _, kh, kw = wshape
    (sh, sw), (dh, dw), (ho, wo) = geom.stride, geom.dilation, geom.out_hw
    hp, wp = padded_hw(geom)
    pt, pl = geom.padding[0][0], geom.padding[1][0]
    dt = x.dtype
    first = channel_first(geom, c)
    two = _on_two(n * ho * wo * o * c * kh * kw)
    k = _chunks(n, two)
    dwk = np.zeros((k * kh, kw, c, o), dtype=dt)
    dwf = dwk if first else _fold(dwk, dw)  # a view: the kernel's sums land in dwk
    blocks = kh * dwf.shape[1] * -(-dwf.shape[2] // PC) * (o // OB)  # the kernel's count
    xc = np.ascontiguousarray(x)
    gc = np.ascontiguousarray(g, dtype=dt)
    gt = np.empty((k, ho, wo, o), dtype=dt)
    xt = None if first else np.empty((k, hp, wp, c), dtype=dt)
    if n == 1 and two:
        _nhwc(gc, gt.reshape(1, 1, ho, wo, o), 0, 0)
        if xt is not None:
            _nhwc(xc, xt.reshape(1, 1, hp, wp, c), pt, pl)
        _kernel("wgradc" if first else "wgrad", dt, True)(
            xc if xt is None else xt, gt, dwf, sh, sw, dh, dw, 0, blocks)
    elif xt is None:
        _kernel("wgradcs", dt, k > 1)(xc, gc, dwf, gt, sh, sw, dh, dw, blocks, 0, n)
    else:
        _kernel("wgrads", dt, k > 1)(xc, gc, dwf, xt, gt, sh, sw, dh, dw, pt, pl, blocks, 0, n)
    del xt, gt  # freed before the sums below: a backward's peak is here
    if k > 1:  # the chunks' sums, in chunk order
        dwk = dwk.reshape(k, kh, kw, c, o).sum(axis=0)
    return permute_weights(dwk.reshape(kh, kw, c, o), "tco->oct").reshape(wshape)
