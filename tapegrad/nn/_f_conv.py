"""Convolutions: im2col as a strided view, then one GEMM; direct kernels for few channels.

im2col copies the sliding windows of the zero-padded input into a (C * kh * kw, N * Ho * Wo)
matrix; a convolution is then one matrix product with the weights (batched over groups).
col2im is its adjoint: it adds each window back where it came from (kh * kw strided adds, no
``np.add.at``). conv2d, its input gradient and its weight gradient are three primitives whose
VJPs are each other, so everything built on them (conv1d, the transposed convolutions)
differentiates to any order. Stride-1 convolutions up to ``DIRECT_MAX`` channel pairs per group
run compiled direct kernels instead (``_direct``, ``_kernels/conv_direct.py``). With numba,
single-group layers run register-blocked direct kernels (``_blocked``,
``_kernels/conv_blocked.py``) when fewer than 64 channels are summed over, or, on two threads,
with kernels larger than 1x1 and rows of at least a block; the remaining wide 3x3 stride-1
layers run Winograd F(2x2, 3x3) (``_winograd``, ``_kernels/conv_winograd.py``), and the others
with fewer than 64 channels per group (or short output rows), or stride 1, build pixel-major
columns (``_pixel_major``, ``_kernels/conv_gemm.py``).
"""


from __future__ import annotations

import math
from typing import Any, NamedTuple

from .. import _kernels as K
from .._amp import lower
from .._autodiff import Primitive, apply, defprim
from .._backend import np, xp_of
from .._kernels.registry import dispatch
from .._tensor import Tensor
from ..ops import _shape as S
from ..ops._common import ArgumentError
from ._f_common import check_positive, float_input, ntuple, same_float


class Geom(NamedTuple):
    """The window geometry of a 2-D convolution over an (N, C, H, W) input."""

    in_shape: tuple[int, int, int, int]  # (N, C, H, W) of the (unpadded) input
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[tuple[int, int], tuple[int, int]]  # ((top, bottom), (left, right))
    dilation: tuple[int, int]
    out_hw: tuple[int, int]  # (Ho, Wo): the number of windows along each axis


def out_size(n: int, k: int, s: int, pad: tuple[int, int], d: int) -> int:
    """The number of windows of a dilated kernel along one padded axis."""
    return (n + pad[0] + pad[1] - d * (k - 1) - 1) // s + 1


def pad_array(x: Any, padding: tuple[tuple[int, int], ...], value: float = 0.0) -> Any:
    """``x`` with its last ``len(padding)`` axes padded by ``value`` (a copy only when needed)."""
    if not any(a or b for a, b in padding):
        return x
    lead = x.ndim - len(padding)
    shape = x.shape[:lead] + tuple(
        n + a + b for n, (a, b) in zip(x.shape[lead:], padding, strict=True)
    )
    out = xp_of(x).full(shape, value, dtype=x.dtype)
    out[
        (...,) + tuple(slice(a, a + n) for n, (a, _) in zip(x.shape[lead:], padding, strict=True))
    ] = x
    return out


def _windows(xp_: Any, geom: Geom) -> Any:
    """A strided view of the windows of a padded (N, C, Hp, Wp) array: (C, kh, kw, N, Ho, Wo)."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    n, c = xp_.shape[:2]
    s_n, s_c, s_h, s_w = xp_.strides
    shape = (c, kh, kw, n, ho, wo)
    strides = (s_c, s_h * dh, s_w * dw, s_n, s_h * sh, s_w * sw)
    return xp_of(xp_).lib.stride_tricks.as_strided(xp_, shape, strides, writeable=False)


def _im2col_fwd(x: Any, geom: Geom) -> Any:
    return dispatch("im2col", _im2col, x, geom)  # compiled: one pass, no padded copy


def _im2col(x: Any, geom: Geom) -> Any:
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    n, c = x.shape[:2]
    v = _windows(pad_array(x, geom.padding), geom)  # (C, kh, kw, N, Ho, Wo)
    return v.reshape(c * kh * kw, n * ho * wo)  # the one copy: into the GEMM layout


def _col2im_fwd(cols: Any, geom: Geom) -> Any:
    return dispatch("col2im", _col2im, cols, geom)  # compiled: the same sums in the same order


def _col2im(cols: Any, geom: Geom) -> Any:
    n, c, h, w = geom.in_shape
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    (pt, pb), (pl, pr) = geom.padding
    # accumulate in (C, N, Hp, Wp) so each strided add reads and writes in memory order
    acc = xp_of(cols).zeros((c, n, h + pt + pb, w + pl + pr), dtype=cols.dtype)
    c6 = cols.reshape(c, kh, kw, n, ho, wo)
    for i in range(kh):
        rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
        for j in range(kw):
            acc[:, :, rows, j * dw : j * dw + sw * (wo - 1) + 1 : sw] += c6[:, i, j]
    return xp_of(cols).ascontiguousarray(acc[:, :, pt : pt + h, pl : pl + w].transpose(1, 0, 2, 3))


# --------------------------------------------------------------------------------------------
# conv2d: a fused primitive (im2col + one GEMM, bias added in the same pass); it saves x and w,
# not the (kh * kw times larger) columns. Its input and weight gradients are primitives too
# (nn.conv2d_input_grad, nn.conv2d_weight_grad), whose VJPs are convolutions and each other,
# so backward runs the same array code whether or not a tape records it, to any order.
# All three work through the batch in chunks, so the columns of a few samples exist at a time.
# --------------------------------------------------------------------------------------------

COLS_BUDGET = 1 << 18  # elements of im2col columns per chunk (1 MiB of float32)


def _chunks(geom: Geom, ckk: int, extra: int = 0, pixels: int = 1,
            budget: int | None = None) -> list[tuple[int, int]]:
    """Sample ranges whose columns (``ckk`` rows, Ho * Wo per sample), plus ``extra`` elements
    of other per-sample scratch, fit the budget (COLS_BUDGET unless given); at least
    ``pixels`` output pixels each."""
    n = geom.in_shape[0]
    hw = geom.out_hw[0] * geom.out_hw[1]
    most = COLS_BUDGET if budget is None else budget
    per = max(1, most // max(1, ckk * hw + extra), -(-pixels // max(1, hw)))
    return [(i, min(n, i + per)) for i in range(0, n, per)]


def _part(geom: Geom, n: int) -> Geom:
    return geom._replace(in_shape=(n, *geom.in_shape[1:]))


# (C / groups) * (O / groups) up to which stride-1 convolutions run direct. The direct kernels
# run on one thread, the GEMM paths on numpy's BLAS threads: measured by wall time on 2 cores
# (forward and both gradients, alternating in one process), direct wins on narrow layers (1 -> 8
# at 28x28: 0.95 ms against 1.87 through the GEMM; 8 -> 16 at 13x13: 1.40 against 1.86) and
# the pixel-major GEMM from 16 -> 32 at 8x8 (3.66 against 4.09 ms) up (32 -> 64 at 26x26: 45
# against 61; 128 -> 128 at 14x14: 13.1 against 20.5).
DIRECT_MAX = 256
DIRECT_SMALL_OUTPUT = False  # whether outputs smaller than the kernel run direct (tests: True)


def _direct(geom: Geom, groups: int, wshape: tuple[int, ...], *arrays: Any) -> Any:
    """The compiled direct-conv module when this convolution takes it, else None.

    Stride 1 and up to DIRECT_MAX channel pairs per group: no columns, and the two halves of a
    large batch run on two threads (measured: benchmarks/conv_kernels.py, benchmarks/kernels.py).
    Not when the output plane is smaller than the kernel (a DCGAN generator's first layer, a 1x1
    input under a 4x4 kernel): the direct input gradient then runs over planes padded by the
    kernel's size for a few outputs, 8x slower than the GEMM (28 against 3.3 ms, 64x100x1x1
    -> 128x4x4 forward and backward).
    """
    if (
        geom.stride != (1, 1)
        or wshape[0] * wshape[1] > DIRECT_MAX * groups
        or (not DIRECT_SMALL_OUTPUT and (geom.out_hw[0] < geom.kernel[0] or geom.out_hw[1] < geom.kernel[1]))
        or not K.usable(*arrays)
    ):
        return None
    from .._kernels import conv_direct  # noqa: PLC0415

    return conv_direct


# Input and output channels (each) from which 3x3 stride-1 convolutions run Winograd F(2x2, 3x3)
# (_kernels/conv_winograd.py). Forward and both gradients of one layer by wall time, alternating
# in one process against the pixel-major GEMM: 128 -> 128 at 14x14 (batch 8) 6.8 / 7.0 / 7.0
# against 7.5 / 6.9 / 8.2 ms, 64 -> 64 at 28x28 6.8 / 6.9 / 8.3 against 10.1 / 8.2 / 10.1; on
# narrower layers its transforms cost more than the products it saves (16 -> 32 at 8x8: 2.7 /
# 2.9 / 2.5 against 2.0 / 1.7 / 2.7; 32 -> 64 at 26x26: 23 / 30 / 26 against 22 / 15 / 24).
# The blocked kernels, tried first, take these layers when they run on two threads.
WINOGRAD_CHANNELS = 64


def _winograd(geom: Geom, groups: int, wshape: tuple[int, ...], *arrays: Any) -> Any:
    """The compiled Winograd module when this convolution takes it, else None: a 3x3 kernel,
    stride and dilation 1, one group, paddings of at most 2 (the input gradient pads by 2 - p),
    and at least WINOGRAD_CHANNELS input and output channels."""
    if (
        geom.kernel != (3, 3)
        or geom.stride != (1, 1)
        or geom.dilation != (1, 1)
        or groups != 1
        or min(wshape[0], wshape[1]) < WINOGRAD_CHANNELS
        or max(max(p) for p in geom.padding) > 2
        or not K.usable(*arrays)
    ):
        return None
    from .._kernels import conv_winograd  # noqa: PLC0415

    return conv_winograd


# Channels summed over (C for the forward and the weight gradient, O for the input gradient) from
# which 3x3 stride-1 layers run the fused Winograd kernels (conv_winograd.fused*, generated in
# conv_blocked: wfwd, wgradw). Forward / input gradient / weight gradient on two threads, ms,
# against the paths they replace (blocked, Winograd through GEMMs) and PyTorch, alternating in
# one process: 128 -> 128 at 14x14 (batch 8) 1.50 / 1.37 / 1.58 against 2.58 / 2.54 / 2.68
# (PyTorch 1.97 / 2.01 / 2.32); 64 -> 64 at 28x28 1.43 / 1.41 / 1.65 against 2.77 / 2.79 / 3.05
# (2.06 / 2.14 / 2.26); mnist's 32 -> 64 at 26x26 (batch 64, no padding) 4.8 / 6.5 / 6.7
# against 6.8 / 10.5 / 9.0 (6.8 / 7.4 / 7.7); CLIP's 16 -> 32 at 8x8 (batch 128) 0.37 / 0.44 /
# 0.54 against 0.53 / 0.62 / 0.79 (0.37 / 0.41 / 0.45). The direct kernels, tried first, keep
# layers of up to DIRECT_MAX channel pairs (16 -> 16 at 32x32: 1.8 ms either way).
FUSED_CHANNELS = 16


def _fused(geom: Geom, groups: int, wshape: tuple[int, ...], *arrays: Any,
           input_grad: bool = False, weight_grad: bool = False) -> Any:
    """The compiled Winograd module when its fused kernels serve this convolution's forward (or
    ``input_grad``: its input gradient): a 3x3 kernel, stride and dilation 1, one group, at
    least FUSED_CHANNELS channels summed, and the channels made a multiple of the kernel's
    block (16); for the ``weight_grad`` (whose sums run over the tiles) at least FUSED_CHANNELS
    input channels, in blocks of 8, and output channels in blocks of 16."""
    if geom.kernel != (3, 3) or geom.stride != (1, 1) or geom.dilation != (1, 1) or groups != 1:
        return None
    o, c = wshape[:2]
    if weight_grad:
        fits = c >= FUSED_CHANNELS and c % 8 == 0 and o % 16 == 0
    else:
        summed, made = (o, c) if input_grad else (c, o)
        fits = summed >= FUSED_CHANNELS and made % 16 == 0
    if not fits or not K.usable(*arrays):
        return None
    from .._kernels import conv_winograd  # noqa: PLC0415

    return conv_winograd


def _wino_chunks(wg: Any, geom: Geom, wshape: tuple[int, ...]) -> list[tuple[int, int]]:
    """Winograd's chunks: its per-sample scratch (V, M and the channels-last copies) within the
    columns' budget."""
    return _chunks(geom, 0, wg.per_sample(geom, wshape[1], wshape[0]))


# Channels summed over from which the gradients of wide layers count their rows as the blocks
# see them: the weight gradient's output rows, the input gradient's input rows in one stride
# class (below, any weight gradient and the input gradient's whole rows qualify), so short
# rows leave the blocks for the GEMMs. DCGAN ngf 64's 256 -> 512 4x4 stride 2 to 4x4 (rows of
# 4): input / weight gradient 35.7 / 42.0 ms blocked, 27.0 / 30.9 through the GEMM; at ngf 16
# (64 -> 128) 1.91 / 2.40 against 1.93 / 2.14, while the GEMM's columns raised (h)'s peak
# memory by about 0.8 MB, to PyTorch's.
SHORT_ROWS_CHANNELS = 256


def _blocked(geom: Geom, groups: int, wshape: tuple[int, ...], *arrays: Any,
             input_grad: bool = False, forward: bool = False) -> Any:
    """The compiled register-blocked module (_kernels/conv_blocked.py) when it serves this
    convolution's weight gradient (``forward``: its forward; ``input_grad``: its input
    gradient)."""
    if not K.usable(*arrays):
        return None
    from .._kernels import conv_blocked as cb  # noqa: PLC0415

    take = cb.takes_input_grad if input_grad else cb.takes
    macs = geom.in_shape[0] * wshape[0] * wshape[1] * wshape[2] * wshape[3] * math.prod(
        geom.out_hw)
    # the pixels in a row of blocks: the output's for the forward and the weight gradient (its
    # sums run along them), for the input gradient the input's in one stride class
    wide = wshape[0 if input_grad else 1] >= SHORT_ROWS_CHANNELS
    if input_grad:
        row = geom.in_shape[3] // (geom.stride[1] if wide else 1)
    else:
        row = geom.out_hw[1] if forward or wide else cb.P
        if (forward and 2 * row == cb.P and geom.out_hw[0] > 1 and not wide
                and not cb.channel_first(geom, wshape[1])):
            row = cb.P  # the channels-last forward's blocks take two rows of half a block
    return cb if take(groups, wshape[1], wshape[0], wshape[2] * wshape[3], macs, row) else None


PIXEL_MAJOR_CHANNELS = 64  # C / groups below which (or Wo below 8) columns are pixel-major
# Column length (C / groups * kh * kw) from which strided layers build pixel-major columns too:
# channel-first chunks then hold at most 256 pixels (the budget over the column length), a
# pixel-major chunk at least GEMM_ROWS. As PyTorch's time over tapegrad's (forward / input
# gradient / weight gradient, alternating in one process, AMD Zen3, batch 64), channel-first
# against pixel-major: DCGAN ngf 64's 64 -> 128 4x4 stride 2 to 16x16 (1024 long) 0.56 / 0.73
# / 0.73 against 0.70 / 0.93 / 1.09, 128 -> 256 to 8x8 0.73 / 0.78 / 0.67 against 0.93 / 0.75
# / 1.00; (i)'s 64 -> 128 3x3 stride 2 (576 long, batch 16) 0.62 / 0.83 / 0.64 against 0.68 /
# 0.63 / 0.56.
PIXEL_MAJOR_COLUMNS = 1024


def _pixel_major(geom: Geom, groups: int, wshape: tuple[int, ...], *arrays: Any) -> Any:
    """The compiled pixel-major (NHWC) im2col + GEMM module when it serves this convolution.

    Its runs are kw * C/G channels long and cost two transposes (input in, output out); the
    channel-first columns' runs are Wo long. Measured (one core, CPU time, forward + both
    gradients): pixel-major 1.1-1.5x faster on every (h) and (e) layer (C/G <= 64, or Wo = 4),
    channel-first 1.2x faster on (i)'s 64- and 128-channel layers at 14 and 28 pixels wide
    (strided layers with columns of PIXEL_MAJOR_COLUMNS and more: pixel-major).
    By wall time on 2 cores, stride-1 layers of 64 or more channels are faster pixel-major too
    (128 -> 128 at 14x14: 13.1 against 14.2 ms; 64 -> 64: 3.9 against 4.2), the strided ones
    channel-first ((i)'s 64 -> 128 s2: 6.8 against 8.1 ms, its 1x1 s2: 1.3 against 2.1).
    """
    wide = wshape[1] >= PIXEL_MAJOR_CHANNELS and geom.out_hw[1] >= 8
    long = wshape[1] * wshape[2] * wshape[3] >= PIXEL_MAJOR_COLUMNS
    if (wide and geom.stride != (1, 1) and not long) or not K.usable(*arrays):
        return None
    from .._kernels import conv_gemm  # noqa: PLC0415

    return conv_gemm


# Output pixels (GEMM rows) per chunk of the pixel-major path, past the budget where needed:
# OpenBLAS runs a 64 x 4096 x 512 product at 133 GFLOP/s on two cores, 256 x 4096 x 512 at
# 152, 1024 x 4096 x 512 at 187. DCGAN ngf 64's 256 -> 512 4x4 stride 2 to 4x4 (4 samples of
# 16 pixels a chunk in the budget) forward / input gradient / weight gradient: 41.9 / 31.5 /
# 55.5 ms at 64 rows, 27.3 / 27.0 / 30.9 at 256 (PyTorch 18.8 / 20.7 / 24.3). More rows make
# fewer, longer sums in the weight gradient's products and let a chunk's copying passes run in
# two halves (conv_gemm.PASS_MIN): its 64 -> 128 to 16x16 (1024 long), batch 64, forward /
# input gradient / weight gradient 40.4 / 39.1 / 52.4 ms at 256 rows, 35.0 / 39.6 / 42.6 at
# 1024 (PyTorch 36.0 / 36.7 / 39.9). Its columns count against peak memory: (h)'s step (ngf
# 16) rose by 34.8 MB at 256 rows, 36.7 at 512, 39.7 at 1024 (PyTorch 38.1).
GEMM_ROWS = 512


def _pm_chunks(pm: Any, geom: Geom, groups: int, wshape: tuple[int, ...]) -> list[tuple[int, int]]:
    """The pixel-major path's chunks: its channels-last input copy counts against the budget, so
    its temporaries stay within the channel-first path's, unless a chunk would have fewer than
    GEMM_ROWS output pixels."""
    hp, wp = pm.padded_hw(geom)
    return _chunks(geom, wshape[1] * wshape[2] * wshape[3] * groups, geom.in_shape[1] * hp * wp,
                   GEMM_ROWS)


def _compiled(strategies: Any, reference: Any, *args: Any) -> Any:
    """``strategies(*args)``: the compiled path this convolution takes, or None; the numpy
    ``reference(*args)`` when none fits or while the one that fits is compiling (NotReady)."""
    try:
        out = strategies(*args)
    except K.NotReady:
        out = None
    return reference(*args) if out is None else out


def _conv2d_fwd(x: Any, w: Any, b: Any, geom: Geom, groups: int) -> Any:
    return _compiled(_conv2d_kernels, _conv2d_ref, x, w, b, geom, groups)


def _conv2d_kernels(x: Any, w: Any, b: Any, geom: Geom, groups: int) -> Any:
    direct = _direct(geom, groups, w.shape, x, w, b)
    if direct is not None:
        return direct.direct(x, w, b, geom, groups)
    fw = _fused(geom, groups, w.shape, x, w, b)
    if fw is not None:
        return fw.fused_conv(x, w, b, geom)
    bl = _blocked(geom, groups, w.shape, x, w, b, forward=True)
    if bl is not None:
        return bl.conv(x, w, b, geom)
    wg = _winograd(geom, groups, w.shape, x, w, b)
    if wg is not None:
        return wg.conv(x, w, b, geom, _wino_chunks(wg, geom, w.shape))
    pm = _pixel_major(geom, groups, w.shape, x, w, b)
    if pm is not None:
        return pm.conv(x, w, b, geom, groups, _pm_chunks(pm, geom, groups, w.shape))
    return None


def _conv2d_ref(x: Any, w: Any, b: Any, geom: Geom, groups: int) -> Any:
    n, o = x.shape[0], w.shape[0]
    ho, wo = geom.out_hw
    wm = w.reshape(groups, o // groups, -1)
    out = xp_of(x).empty((n, o, ho, wo), dtype=np.result_type(x.dtype, w.dtype))
    for a, z in _chunks(geom, wm.shape[-1] * groups):
        cols = _im2col_fwd(x[a:z], _part(geom, z - a))  # (C*kh*kw, n*Ho*Wo)
        y = np.matmul(wm, cols.reshape(groups, -1, cols.shape[1]))  # (G, O/G, n*Ho*Wo)
        # compiled: the planes copied out in one pass, the bias added on the way
        dispatch("conv_unpack", _unpack, y, b, out[a:z])
    return out


def _unpack(y: Any, b: Any, out: Any) -> None:
    """The GEMM's (G, O/G, n*Ho*Wo) result ``y`` (+ ``b``) written into (n, O, Ho, Wo) ``out``."""
    n, o, ho, wo = out.shape
    y = y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)
    if b is None:
        out[...] = y
    else:
        np.add(y, b.reshape(1, o, 1, 1), out=out)


def _grad_cols(g: Any, groups: int) -> Any:
    """The output gradient (n, O, Ho, Wo) as (G, O/G, n*Ho*Wo), the GEMM layout."""
    return dispatch("conv_pack", _pack, g, groups)


def _pack(g: Any, groups: int) -> Any:
    o = g.shape[1]
    return g.transpose(1, 0, 2, 3).reshape(groups, o // groups, -1)


def _input_grad_fwd(g: Any, w: Any, geom: Geom, groups: int) -> Any:
    """The gradient of conv2d for its input: the columns ``w^T g``, added back by col2im."""
    return _compiled(_input_grad_kernels, _input_grad_ref, g, w, geom, groups)


def _input_grad_kernels(g: Any, w: Any, geom: Geom, groups: int) -> Any:
    direct = _direct(geom, groups, w.shape, g, w)
    if direct is not None:
        return direct.direct_input_grad(g, w, geom, groups)
    fw = _fused(geom, groups, w.shape, g, w, input_grad=True)
    if fw is not None:
        return fw.fused_input_grad(g, w, geom)
    bl = _blocked(geom, groups, w.shape, g, w, input_grad=True)
    if bl is not None:
        return bl.input_grad(g, w, geom)
    wg = _winograd(geom, groups, w.shape, g, w)
    if wg is not None:
        return wg.input_grad(g, w, geom, _wino_chunks(wg, geom, w.shape))
    pm = _pixel_major(geom, groups, w.shape, g, w)
    if pm is not None:
        return pm.input_grad(g, w, geom, groups, _pm_chunks(pm, geom, groups, w.shape))
    return None


def _input_grad_ref(g: Any, w: Any, geom: Geom, groups: int) -> Any:
    n, o = g.shape[:2]
    wt = w.reshape(groups, o // groups, -1).swapaxes(-1, -2)  # (G, C/G*kh*kw, O/G)
    _, c, h, wd = geom.in_shape
    out = xp_of(g).empty((n, c, h, wd), dtype=np.result_type(g.dtype, w.dtype))
    for a, z in _chunks(geom, wt.shape[1] * groups):
        cols = np.matmul(wt, _grad_cols(g[a:z], groups))
        out[a:z] = _col2im_fwd(cols.reshape(-1, cols.shape[-1]), _part(geom, z - a))
    return out


def _weight_grad_fwd(g: Any, x: Any, geom: Geom, groups: int, wshape: tuple[int, ...]) -> Any:
    """The gradient of conv2d for its weight: ``g`` times the columns of ``x``, summed."""
    return _compiled(_weight_grad_kernels, _weight_grad_ref, g, x, geom, groups, wshape)


def _weight_grad_kernels(g: Any, x: Any, geom: Geom, groups: int,
                         wshape: tuple[int, ...]) -> Any:
    direct = _direct(geom, groups, wshape, g, x)
    if direct is not None:
        return direct.direct_weight_grad(g, x, geom, groups, wshape)
    fw = _fused(geom, groups, wshape, g, x, weight_grad=True)
    if fw is not None:
        return fw.fused_weight_grad(g, x, geom, wshape)
    bl = _blocked(geom, groups, wshape, g, x)
    if bl is not None:
        return bl.weight_grad(g, x, geom, wshape)
    wg = _winograd(geom, groups, wshape, g, x)
    if wg is not None:
        return wg.weight_grad(g, x, geom, wshape, _wino_chunks(wg, geom, wshape))
    pm = _pixel_major(geom, groups, wshape, g, x)
    if pm is not None:
        return pm.weight_grad(g, x, geom, groups, wshape, _pm_chunks(pm, geom, groups, wshape))
    return None


def _weight_grad_ref(g: Any, x: Any, geom: Geom, groups: int, wshape: tuple[int, ...]) -> Any:
    acc: Any = None
    for a, z in _chunks(geom, wshape[1] * wshape[2] * wshape[3] * groups):
        cols = _im2col_fwd(x[a:z], _part(geom, z - a))
        part = np.matmul(
            _grad_cols(g[a:z], groups), cols.reshape(groups, -1, cols.shape[-1]).swapaxes(-1, -2)
        )
        acc = part if acc is None else np.add(acc, part, out=acc)
    if acc is None:  # an empty batch
        return xp_of(x).zeros(wshape, dtype=np.result_type(g.dtype, x.dtype))
    return acc.reshape(wshape)


def _bias_grad_fwd(g: Any, shape: tuple[int, ...]) -> Any:
    return dispatch("conv_bias_grad", _bias_grad, g)


def _bias_grad(g: Any) -> Any:
    return g.sum(axis=(0, 2, 3))


# conv2d's bias gradient (a primitive, so that arrays and tensors run the same kernel)
CONV2D_BIAS_GRAD: Primitive = defprim(
    "nn.conv2d_bias_grad",
    _bias_grad_fwd,
    lambda xp, c, ans, g, shape: xp.broadcast_to(xp.reshape(c, (1, -1, 1, 1)), shape),
)


CONV2D_INPUT_GRAD: Primitive = defprim(
    "nn.conv2d_input_grad",
    _input_grad_fwd,
    (
        lambda xp, c, ans, g, w, geom, groups: xp.apply(
            CONV2D, c, w, None, geom=geom, groups=groups
        ),
        lambda xp, c, ans, g, w, geom, groups: xp.apply(
            CONV2D_WEIGHT_GRAD, g, c, geom=geom, groups=groups, wshape=w.shape
        ),
    ),
    (0, 1),
)
CONV2D_WEIGHT_GRAD: Primitive = defprim(
    "nn.conv2d_weight_grad",
    _weight_grad_fwd,
    (
        lambda xp, c, ans, g, x, geom, groups, wshape: xp.apply(
            CONV2D, x, c, None, geom=geom, groups=groups
        ),
        lambda xp, c, ans, g, x, geom, groups, wshape: xp.apply(
            CONV2D_INPUT_GRAD, g, c, geom=geom, groups=groups
        ),
    ),
    (0, 1),
)
CONV2D: Primitive = defprim(
    "nn.conv2d",
    _conv2d_fwd,
    (
        lambda xp, g, ans, x, w, b, geom, groups: xp.apply(
            CONV2D_INPUT_GRAD, g, w, geom=geom, groups=groups
        ),
        lambda xp, g, ans, x, w, b, geom, groups: xp.apply(
            CONV2D_WEIGHT_GRAD, g, x, geom=geom, groups=groups, wshape=w.shape
        ),
        lambda xp, g, ans, x, w, b, geom, groups: xp.apply(CONV2D_BIAS_GRAD, g, shape=g.shape),
    ),
    (0, 1),
)


# --------------------------------------------------------------------------------------------
# argument handling
# --------------------------------------------------------------------------------------------


def _padding(
    padding: Any,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    op: str,
) -> tuple[tuple[int, int], ...]:
    nd = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding != "same":
            raise ValueError(
                f"{op}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}"
            )
        if any(s != 1 for s in stride):
            raise ValueError(
                f"{op}: padding='same' needs stride 1 (got stride={stride}); pad explicitly "
                "with an int padding for strided convolutions"
            )
        # the total d*(k-1) split with the extra element at the end, as PyTorch does
        return tuple(
            (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
            for k, d in zip(kernel, dilation, strict=True)
        )
    p = ntuple(padding, nd, "padding", op)
    if any(v < 0 for v in p):
        raise ValueError(f"{op}: padding must be non-negative, got {padding!r}")
    return tuple((v, v) for v in p)


def _check_conv(x: Tensor, w: Tensor, groups: int, op: str, nd: int) -> None:
    if x.ndim != nd + 2:
        raise ValueError(
            f"{op}: input must be {nd + 2}-D (N, C{', H, W' if nd == 2 else ', L'}) or "
            f"{nd + 1}-D unbatched, got shape {x.shape}"
        )
    if w.ndim != nd + 2:
        raise ValueError(f"{op}: weight must be {nd + 2}-D, got shape {w.shape}")
    if groups < 1 or x.shape[1] % groups:
        raise ValueError(
            f"{op}: groups={groups} must be >= 1 and divide the {x.shape[1]} input channels "
            f"(input shape {x.shape})"
        )


def _as_batched(x: Tensor, nd: int) -> tuple[Tensor, bool]:
    if x.ndim == nd + 1:
        return S.expand_dims(x, 0), True
    return x, False


@lower
def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation, as PyTorch): (N, C, H, W) * (O, C/groups, kh, kw).

    ``padding`` is an int, a pair, ``'valid'`` (none) or ``'same'`` (output size equals input
    size; stride 1). One GEMM per call (batched over groups) on an im2col layout.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.conv2d(tg.ones((1, 1, 4, 4)), tg.ones((2, 1, 3, 3)), padding=1).shape
    (1, 2, 4, 4)
    """
    x = float_input(input, "conv2d")
    w = float_input(weight, "conv2d", "weight")
    x, w = same_float(x, w)
    x, unbatched = _as_batched(x, 2)
    _check_conv(x, w, groups, "conv2d", 2)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if cg * groups != c or o % groups:
        raise ValueError(
            f"conv2d: weight {w.shape} expects {cg * groups} input channels with groups={groups} "
            f"and {o} output channels divisible by groups; the input {x.shape} has {c} channels"
        )
    k = (kh, kw)
    s = ntuple(stride, 2, "stride", "conv2d")
    d = ntuple(dilation, 2, "dilation", "conv2d")
    check_positive("conv2d", kernel_size=k, stride=s, dilation=d)
    if min(s) < 1 or min(d) < 1:
        raise ValueError(f"conv2d: stride {s} and dilation {d} must be positive")
    pad = _padding(padding, k, s, d, "conv2d")
    ho, wo = (
        out_size(v, kk, ss, pp, dd) for v, kk, ss, pp, dd in zip((h, wd), k, s, pad, d, strict=True)
    )
    if ho < 1 or wo < 1:
        span = tuple(dd * (kk - 1) + 1 for kk, dd in zip(k, d, strict=True))
        raise ArgumentError(
            f"conv2d: the input {x.shape} padded by {pad} is smaller than the dilated kernel "
            f"{span}; pad the input or use a "
            "smaller kernel"
        )
    geom = Geom((n, c, h, wd), k, s, pad, d, (ho, wo))  # type: ignore[arg-type]
    b = None
    if bias is not None:
        b = S.astype(float_input(bias, "conv2d", "bias"), x.dtype)
        if b.shape != (o,):
            raise ValueError(f"conv2d: bias must have shape ({o},), got {b.shape}")
    out = apply(CONV2D, x, w, b, geom=geom, groups=groups)
    return S.squeeze(out, 0) if unbatched else out


@lower
def conv1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution: (N, C, L) * (O, C/groups, k), as a conv2d over a height of 1.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.conv1d(tg.ones((2, 3, 10)), tg.ones((4, 3, 3)), stride=2).shape
    (2, 4, 4)
    """
    x = float_input(input, "conv1d")
    w = float_input(weight, "conv1d", "weight")
    x, unbatched = _as_batched(x, 1)
    _check_conv(x, w, groups, "conv1d", 1)
    s = ntuple(stride, 1, "stride", "conv1d")
    d = ntuple(dilation, 1, "dilation", "conv1d")
    check_positive("conv1d", kernel_size=tuple(w.shape[2:]), stride=s, dilation=d)
    if isinstance(padding, str):
        pad2: Any = padding
    else:
        pad2 = (0, ntuple(padding, 1, "padding", "conv1d")[0])
    out = conv2d(S.expand_dims(x, 2), S.expand_dims(w, 2), bias, (1, s[0]), pad2, (1, d[0]), groups)
    out = S.squeeze(out, 2)
    return S.squeeze(out, 0) if unbatched else out


@lower
def conv_transpose2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """Transposed 2-D convolution (the gradient of conv2d with respect to its input).

    ``weight`` is (C_in, C_out / groups, kh, kw), as in PyTorch. The output size is
    ``(H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1``.
    Computed as the input gradient of the matching conv2d (``nn.conv2d_input_grad``).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.conv_transpose2d(tg.ones((1, 4, 5, 5)), tg.ones((4, 2, 3, 3)), stride=2).shape
    (1, 2, 11, 11)
    """
    op = "conv_transpose2d"
    x = float_input(input, op)
    w = float_input(weight, op, "weight")
    x, w = same_float(x, w)
    x, unbatched = _as_batched(x, 2)
    _check_conv(x, w, groups, op, 2)
    n, cin, h, wd = x.shape
    if w.shape[0] != cin:
        raise ValueError(
            f"{op}: weight {w.shape} expects {w.shape[0]} input channels (its first axis), the "
            f"input {x.shape} has {cin}"
        )
    cout = w.shape[1] * groups
    k = (w.shape[2], w.shape[3])
    s = ntuple(stride, 2, "stride", op)
    d = ntuple(dilation, 2, "dilation", op)
    p = ntuple(padding, 2, "padding", op)
    op_ = ntuple(output_padding, 2, "output_padding", op)
    for a, ss, dd in zip(op_, s, d, strict=True):
        if not 0 <= a < max(ss, dd):
            raise ValueError(
                f"{op}: output_padding {op_} must be smaller than the stride {s} or the "
                f"dilation {d}"
            )
    hout, wout = (
        (v - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1
        for v, ss, pp, dd, kk, oo in zip((h, wd), s, p, d, k, op_, strict=True)
    )
    if hout < 1 or wout < 1:
        raise ValueError(f"{op}: the output size ({hout}, {wout}) is not positive")
    pads = ((p[0], p[0]), (p[1], p[1]))
    geom = Geom((n, cout, hout, wout), k, s, pads, d, (h, wd))  # type: ignore[arg-type]
    # the input gradient of the conv2d that maps the output back to x (its VJPs are conv2d
    # and that conv2d's weight gradient): no zero-stuffing, chunked, direct when stride 1
    out = apply(CONV2D_INPUT_GRAD, x, w, geom=geom, groups=groups)
    if bias is not None:
        b = S.astype(float_input(bias, op, "bias"), x.dtype)
        if b.shape != (cout,):
            raise ValueError(f"{op}: bias must have shape ({cout},), got {b.shape}")
        out = out + S.reshape(b, (1, cout, 1, 1))
    return S.squeeze(out, 0) if unbatched else out


@lower
def conv_transpose1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """Transposed 1-D convolution, as a conv_transpose2d over a height of 1."""
    x = float_input(input, "conv_transpose1d")
    x, unbatched = _as_batched(x, 1)
    w = float_input(weight, "conv_transpose1d", "weight")
    one = ntuple
    out = conv_transpose2d(
        S.expand_dims(x, 2),
        S.expand_dims(w, 2),
        bias,
        (1, one(stride, 1, "stride", "conv_transpose1d")[0]),
        (0, one(padding, 1, "padding", "conv_transpose1d")[0]),
        (0, one(output_padding, 1, "output_padding", "conv_transpose1d")[0]),
        groups,
        (1, one(dilation, 1, "dilation", "conv_transpose1d")[0]),
    )
    out = S.squeeze(out, 2)
    return S.squeeze(out, 0) if unbatched else out
