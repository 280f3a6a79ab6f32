"""Convolution's strategy table: the kernels that compute conv2d, its input gradient and its
weight gradient, each with where it fits, where the hand thresholds prefer it, and its entry.

``table.py`` registers these for the three operations the conv primitives dispatch
(``conv2d``, ``conv2d_input_grad``, ``conv2d_weight_grad``; ``nn/_f_conv.py`` keeps the numpy
im2col + GEMM reference), in the order the hand thresholds try them: pointwise (one live tap
or one window: a GEMM with no columns), one GEMM per input window on maps of a few pixels
(``conv_pixels``), direct (stride 1, few channels), fused Winograd, register-blocked,
Winograd through GEMMs, pixel-major im2col + GEMM. The three operations are tunable with the
reference among the alternatives: the dispatcher times the ones that fit a new shape and keeps
the fastest (``registry``); ``TAPEGRAD_TUNE=0`` leaves the choice to the thresholds below, each
written beside the measurement that set it. A ``fits`` says what a kernel computes correctly
(and bounds the slow corners a measurement would pay for); ``_direct``, ``_fused``, ... (the
``prefer`` side) return the kernel module where the thresholds choose it, else None.

This module imports numpy only (``conv_pixels`` too is numpy only); the kernel modules are
imported by the entries and the preferences, which run only when numba is selected.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _kernels as _K
from . import conv_pixels  # numpy only, as this module
from .conv_pointwise import (  # numpy only too: the pointwise strategy's entries, registered here
    pointwise_conv,
    pointwise_input_grad,
    pointwise_weight_grad,
    taps,
)

__all__ = ["pointwise_conv", "pointwise_input_grad", "pointwise_weight_grad", "taps"]

COLS_BUDGET = 1 << 18  # elements of im2col columns per chunk (1 MiB of float32)


def chunks(geom: Any, ckk: int, extra: int = 0, pixels: int = 1,
            budget: int | None = None) -> list[tuple[int, int]]:
    """Sample ranges whose columns (``ckk`` rows, Ho * Wo per sample), plus ``extra`` elements
    of other per-sample scratch, fit the budget (COLS_BUDGET unless given); at least
    ``pixels`` output pixels each."""
    n = geom.in_shape[0]
    hw = geom.out_hw[0] * geom.out_hw[1]
    most = COLS_BUDGET if budget is None else budget
    per = max(1, most // max(1, ckk * hw + extra), -(-pixels // max(1, hw)))
    return [(i, min(n, i + per)) for i in range(0, n, per)]


def part(geom: Any, n: int) -> Any:
    return geom._replace(in_shape=(n, *geom.in_shape[1:]))


# (C / groups) * (O / groups) up to which stride-1 convolutions run direct. The direct kernels
# run on one thread, the GEMM paths on numpy's BLAS threads: measured by wall time on 2 cores
# (forward and both gradients, alternating in one process), direct wins on narrow layers (1 -> 8
# at 28x28: 0.95 ms against 1.87 through the GEMM; 8 -> 16 at 13x13: 1.40 against 1.86) and
# the pixel-major GEMM from 16 -> 32 at 8x8 (3.66 against 4.09 ms) up (32 -> 64 at 26x26: 45
# against 61; 128 -> 128 at 14x14: 13.1 against 20.5).
DIRECT_MAX = 256
DIRECT_SMALL_OUTPUT = False  # whether outputs smaller than the kernel run direct (tests: True)


def _direct(geom: Any, groups: int, wshape: tuple[int, ...], *arrays: Any) -> Any:
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
        or not _K.usable(*arrays)
    ):
        return None
    from . import conv_direct  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_direct


# Input and output channels (each) from which 3x3 stride-1 convolutions run Winograd F(2x2, 3x3)
# (_kernels/conv_winograd.py). Forward and both gradients of one layer by wall time, alternating
# in one process against the pixel-major GEMM: 128 -> 128 at 14x14 (batch 8) 6.8 / 7.0 / 7.0
# against 7.5 / 6.9 / 8.2 ms, 64 -> 64 at 28x28 6.8 / 6.9 / 8.3 against 10.1 / 8.2 / 10.1; on
# narrower layers its transforms cost more than the products it saves (16 -> 32 at 8x8: 2.7 /
# 2.9 / 2.5 against 2.0 / 1.7 / 2.7; 32 -> 64 at 26x26: 23 / 30 / 26 against 22 / 15 / 24).
# The blocked kernels, tried first, take these layers when they run on two threads.
WINOGRAD_CHANNELS = 64


def _winograd(geom: Any, groups: int, wshape: tuple[int, ...], *arrays: Any) -> Any:
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
        or not _K.usable(*arrays)
    ):
        return None
    from . import conv_winograd  # noqa: PLC0415 # lazy: kernel modules import numba on first use

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


def _fused(geom: Any, groups: int, wshape: tuple[int, ...], *arrays: Any,
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
    if not fits or not _K.usable(*arrays):
        return None
    from . import conv_winograd  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_winograd


def _wino_chunks(wg: Any, geom: Any, wshape: tuple[int, ...]) -> list[tuple[int, int]]:
    """Winograd's chunks: its per-sample scratch (V, M and the channels-last copies) within the
    columns' budget."""
    return chunks(geom, 0, wg.per_sample(geom, wshape[1], wshape[0]))


# Channels summed over from which the gradients of wide layers count their rows as the blocks
# see them: the weight gradient's output rows, the input gradient's input rows in one stride
# class (below, any weight gradient and the input gradient's whole rows qualify), so short
# rows leave the blocks for the GEMMs. DCGAN ngf 64's 256 -> 512 4x4 stride 2 to 4x4 (rows of
# 4): input / weight gradient 35.7 / 42.0 ms blocked, 27.0 / 30.9 through the GEMM; at ngf 16
# (64 -> 128) 1.91 / 2.40 against 1.93 / 2.14, while the GEMM's columns raised (h)'s peak
# memory by about 0.8 MB, to PyTorch's.
SHORT_ROWS_CHANNELS = 256


def _blocked(geom: Any, groups: int, wshape: tuple[int, ...], *arrays: Any,
             input_grad: bool = False, forward: bool = False) -> Any:
    """The compiled register-blocked module (_kernels/conv_blocked.py) when it serves this
    convolution's weight gradient (``forward``: its forward; ``input_grad``: its input
    gradient)."""
    if not _K.usable(*arrays):
        return None
    from . import conv_blocked as cb  # noqa: PLC0415 # lazy: kernel modules import numba on first use

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


def _pixel_major(geom: Any, groups: int, wshape: tuple[int, ...], *arrays: Any) -> Any:
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
    if (wide and geom.stride != (1, 1) and not long) or not _K.usable(*arrays):
        return None
    from . import conv_gemm  # noqa: PLC0415 # lazy: kernel modules import numba on first use

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


def _pm_chunks(pm: Any, geom: Any, groups: int, wshape: tuple[int, ...]) -> list[tuple[int, int]]:
    """The pixel-major path's chunks: its channels-last input copy counts against the budget, so
    its temporaries stay within the channel-first path's, unless a chunk would have fewer than
    GEMM_ROWS output pixels."""
    hp, wp = pm.padded_hw(geom)
    return chunks(geom, wshape[1] * wshape[2] * wshape[3] * groups, geom.in_shape[1] * hp * wp,
                   GEMM_ROWS)




# --------------------------------------------------------------------------------------------
# small maps: a convolution whose outputs each read the input through one tap, or whose one
# output reads one window, is one GEMM over the input's pixels as they lie (no columns)
# --------------------------------------------------------------------------------------------


def _pixels(geom: Any) -> int:
    return int(geom.out_hw[0] * geom.out_hw[1])


def pointwise_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return groups == 1 and _K.usable(*arrays) and taps(geom) is not None


# Output pixels (a sample) up to which the hand thresholds take the pointwise GEMM. ResNet-18 on
# 8x8 digits (batch 64): layers 2-4 run 3x3 convolutions on 1x1 maps (and their stride-2
# entries from 2x2 maps to 1x1), where the fused Winograd kernels had transformed the 512 x
# 512 weights on every call for a product of 64 rows. Forward and both gradients, as PyTorch's
# time over tapegrad's (one thread each, alternating in one process, AMD EPYC Zen 4, a busy
# machine: benchmarks/conv_small_maps.py), before / after: 128 -> 128 0.28 / 2.33, 256 -> 256
# 0.27 / 3.51, 512 -> 512 0.19 / 3.98, its 1x1 stride-2 downsample 64 -> 128 0.06 / 6.97.
POINTWISE_PIXELS = 1


def pointwise_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return _pixels(geom) <= POINTWISE_PIXELS


# Output pixels (2 up to this many), and channel pairs from PIXELS_CHANNELS, for which the hand
# thresholds take one GEMM per input window (conv_pixels.py; the tuner measures every map up
# to its PIXELS_MAX). ResNet-18 on 28x28 digits, batch 64, CPU ms on one thread (AMD EPYC Zen 4,
# alternating in one process: benchmarks/conv_strategies.py), forward / input gradient / weight
# gradient: 256 -> 256 on 2x2 maps 3.4 / 2.9 / 3.0 against the fused Winograd kernels' 3.4 /
# 3.2 / 3.7 (PyTorch 2.8 / 2.6 / 4.5); 128 -> 256 stride 2 from 4x4 2.3 / 2.1 / 2.0 against
# the pixel-major GEMM's 2.6 / 2.2 / 2.4 (PyTorch 1.9 / 2.6 / 2.7). On 8x8 digits (batch 16)
# the 64 -> 64 layer on 2x2 maps is faster pixel-major (0.1 against 0.2 ms).
PIXELS_PREFER = 4
PIXELS_CHANNELS = 128 * 128


def pixels_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return conv_pixels.fits(geom, groups) and _K.usable(*arrays)


def pixels_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return 1 < _pixels(geom) <= PIXELS_PREFER and wshape[0] * wshape[1] >= PIXELS_CHANNELS


def pixels_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    return conv_pixels.conv(x, w, b, geom)


def pixels_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    return conv_pixels.input_grad(g, w, geom)


def pixels_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    return conv_pixels.weight_grad(g, x, geom, wshape)


# --------------------------------------------------------------------------------------------
# the table: each strategy's fits and preference for the three passes, and its entries
# --------------------------------------------------------------------------------------------

# Bounds on what a measurement runs: the direct kernels run on one thread, so past 16 times the
# preferred channel pairs they only cost the measurement time.
DIRECT_FITS = 16


def _w3(geom: Any, groups: int) -> bool:
    return (geom.kernel == (3, 3) and geom.stride == (1, 1) and geom.dilation == (1, 1)
            and groups == 1)


def direct_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return (geom.stride == (1, 1) and wshape[0] * wshape[1] <= DIRECT_FITS * DIRECT_MAX * groups
            and _K.usable(*arrays))


def direct_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return _direct(geom, groups, wshape, *arrays) is not None


def fused_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return _fused(geom, groups, wshape, *arrays, input_grad=p == "input_grad",
                  weight_grad=p == "weight_grad") is not None


# Input channels (summed by the forward and the weight gradient, made by the input gradient)
# from which the fused kernels are preferred; below, the blocked kernels are. Two threads,
# alternating in one process (AMD EPYC Zen 4, 2 cores), fused against blocked (PyTorch), ms:
# CLIP's 16 -> 32 at 8x8 (batch 128) input gradient 0.87 against 0.67 (0.92), 16 -> 32 at
# 16x16 (batch 32) 0.78 against 0.60 (0.83); with 32 input channels they tie (32 -> 32 at 8x8
# 1.14 against 1.12, 32 -> 64 1.90 against 1.84) and from 64 the fused kernels win (mnist's 64
# -> 32 at 26x26: 9.3 against 10.6). Since the blocked passes copy a sample channels-last and
# store their blocks transposed in registers, CLIP's 16 -> 32 forward / weight gradient 0.55 /
# 0.64 against 0.70 / 0.96 (direct 0.82 / 0.75). With the fused kernels preferred, the tuner
# kept them for CLIP's forward (another choice must be faster by TUNE_MARGIN).
FUSED_PREFER_CHANNELS = 32


def fused_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    # where it fits: on 2x2 maps too (ResNet-18's layer1 on 8x8 digits, 64 -> 64, batch 64:
    # forward and both gradients 0.88 ms against the pixel-major GEMM's 1.04 and the
    # reference's 1.70, one thread, alternating in one process, AMD EPYC Zen 4)
    return wshape[1] >= FUSED_PREFER_CHANNELS


def poly_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    """A 4x4 kernel, stride 2, no dilation, one group, outputs of at least 2x2."""
    return (geom.kernel == (4, 4) and geom.stride == (2, 2) and geom.dilation == (1, 1)
            and groups == 1 and min(geom.out_hw) >= 2 and _K.usable(*arrays))


# Channel pairs (C x O) from which the hand thresholds take the polyphase Winograd kernels
# (conv_poly.py) for 4x4 stride-2 layers. DCGAN ngf 64 (batch 64, 2 threads, AMD EPYC Zen 4,
# benchmarks/conv_strategies.py), forward / input gradient / weight gradient, ms, against the
# kernels kept before (PyTorch): 256 -> 512 8x8 to 4x4 18.0 / 18.2 / 17.3 against pixel-major
# 27.6 / 26.6 / 31.4 (20.6 / 23.8 / 27.6); 128 -> 256 16 -> 8 about 21 / 22 / 22 against
# blocked 21.9 / 23.6 / 29.1 (21.0 / 25.5 / 24.4); at 64 -> 128 (32 -> 16) the blocked kernels
# stay faster (22.0 / 23.0 / 30.0 against 31.9 / 25.7 / 34.3).
POLY_PAIRS = 128 * 256


def poly_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return wshape[0] * wshape[1] >= POLY_PAIRS


def blocked_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    """One group and the channels made a multiple of the blocks' 16 (``conv_blocked.OB``)."""
    return groups == 1 and wshape[1 if p == "input_grad" else 0] % 16 == 0 and _K.usable(*arrays)


def blocked_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return _blocked(geom, groups, wshape, *arrays, input_grad=p == "input_grad",
                    forward=p == "conv") is not None


def winograd_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return (_w3(geom, groups) and max(max(q) for q in geom.padding) <= 2
            and _K.usable(*arrays))


def winograd_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return _winograd(geom, groups, wshape, *arrays) is not None


def pixel_major_fits(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return bool(_K.usable(*arrays))


def pixel_major_prefer(geom: Any, groups: int, wshape: Any, arrays: Any, p: str) -> bool:
    return _pixel_major(geom, groups, wshape, *arrays) is not None


# the strategies in the order the hand thresholds try them, and the three passes (the
# operation each dispatches)
STRATEGIES = ("pointwise", "pixels", "direct", "fused", "poly", "blocked", "winograd",
              "pixel_major")
PASSES = {"conv2d": "conv", "conv2d_input_grad": "input_grad",
          "conv2d_weight_grad": "weight_grad"}


def adapt(pred: Any, p: str) -> Any:
    """``pred(geom, groups, wshape, arrays, pass)`` as a function of pass ``p``'s arguments."""
    if p == "conv":
        return lambda x, w, b, geom, groups: pred(geom, groups, w.shape, (x, w, b), p)
    if p == "input_grad":
        return lambda g, w, geom, groups: pred(geom, groups, w.shape, (g, w), p)
    return lambda g, x, geom, groups, wshape: pred(geom, groups, wshape, (g, x), p)


def predicates(name: str) -> tuple[Any, Any]:
    """Strategy ``name``'s fits and preference, taking (geom, groups, wshape, arrays, pass)."""
    return globals()[f"{name}_fits"], globals()[f"{name}_prefer"]


def direct_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    from . import conv_direct  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_direct.direct(x, w, b, geom, groups)


def direct_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    from . import conv_direct  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_direct.direct_input_grad(g, w, geom, groups)


def direct_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    from . import conv_direct  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_direct.direct_weight_grad(g, x, geom, groups, wshape)


def fused_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    from . import conv_winograd  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_winograd.fused_conv(x, w, b, geom)


def fused_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    from . import conv_winograd  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_winograd.fused_input_grad(g, w, geom)


def fused_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    from . import conv_winograd  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_winograd.fused_weight_grad(g, x, geom, wshape)


def blocked_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    from . import conv_blocked  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_blocked.conv(x, w, b, geom)


def blocked_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    from . import conv_blocked  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_blocked.input_grad(g, w, geom)


def blocked_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    from . import conv_blocked  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_blocked.weight_grad(g, x, geom, wshape)


def winograd_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    from . import conv_winograd as wg  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return wg.conv(x, w, b, geom, _wino_chunks(wg, geom, w.shape))


def winograd_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    from . import conv_winograd as wg  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return wg.input_grad(g, w, geom, _wino_chunks(wg, geom, w.shape))


def winograd_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    from . import conv_winograd as wg  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return wg.weight_grad(g, x, geom, wshape, _wino_chunks(wg, geom, wshape))


def pixel_major_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    from . import conv_gemm as pm  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return pm.conv(x, w, b, geom, groups, _pm_chunks(pm, geom, groups, w.shape))


def pixel_major_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    from . import conv_gemm as pm  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return pm.input_grad(g, w, geom, groups, _pm_chunks(pm, geom, groups, w.shape))


def pixel_major_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    from . import conv_gemm as pm  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return pm.weight_grad(g, x, geom, groups, wshape, _pm_chunks(pm, geom, groups, wshape))


def poly_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    from . import conv_poly  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_poly.conv(x, w, b, geom)


def poly_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    from . import conv_poly  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_poly.input_grad(g, w, geom)


def poly_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: Any) -> Any:
    from . import conv_poly  # noqa: PLC0415 # lazy: kernel modules import numba on first use

    return conv_poly.weight_grad(g, x, geom, wshape)
