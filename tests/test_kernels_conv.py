"""Direct and im2col + GEMM convolution, transposed convolution and batch-norm kernels against
their numpy references and PyTorch.

The compiled kernels sum in another order than the numpy reference, so they are compared to
float rounding (float64: 1e-12 relative; float32: 1e-5). Through the public functions, forward
and backward are compared with PyTorch in float64 at 1e-10, over strides, paddings (asymmetric
ones included), dilations, groups, output paddings, batch 1 and non-contiguous inputs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels
from tapegrad._kernels import conv_table as CT
from tapegrad.ops import _conv, _norm

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


def _reference(monkeypatch, fn, *args):
    """``fn(*args)`` with the numpy kernels (the reference)."""
    with monkeypatch.context() as m:
        m.setattr(_kernels, "usable", lambda *a: False)
        return fn(*args)


def _close(a, ref, dtype):
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert a.dtype == ref.dtype and a.shape == ref.shape
    np.testing.assert_allclose(a, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


def _passes_match_reference(monkeypatch, x, w, b, g, geom, groups, dtype):
    """conv2d forward (with the bias, when given, and without), its input gradient and its
    weight gradient each equal the numpy reference."""
    cases = [(_conv._conv2d_fwd, (x, w, None, geom, groups)),
             (_conv._input_grad_fwd, (g, w, geom, groups)),
             (_conv._weight_grad_fwd, (g, x, geom, groups, w.shape))]  # fmt: skip
    if b is not None:
        cases.insert(0, (_conv._conv2d_fwd, (x, w, b, geom, groups)))
    for fn, args in cases:
        _close(fn(*args), _reference(monkeypatch, fn, *args), dtype)


def _geom(shape, k, pad, d):
    n, c, h, w = shape
    ho = _conv.out_size(h, k[0], 1, pad[0], d[0])
    wo = _conv.out_size(w, k[1], 1, pad[1], d[1])
    return _conv.Geom(shape, k, (1, 1), pad, d, (ho, wo))


DIRECT_CASES = [  # (N, C, H, W), O, kernel, ((top, bottom), (left, right)), dilation, groups
    ((2, 3, 7, 6), 5, (3, 3), ((0, 0), (0, 0)), (1, 1), 1),
    ((1, 1, 28, 28), 8, (3, 3), ((0, 0), (0, 0)), (1, 1), 1),  # batch 1, one channel
    ((2, 4, 8, 9), 6, (3, 3), ((1, 1), (1, 1)), (1, 1), 2),
    ((2, 2, 9, 7), 3, (3, 2), ((2, 2), (2, 2)), (2, 2), 1),
    ((3, 4, 5, 5), 4, (1, 1), ((0, 0), (0, 0)), (1, 1), 4),  # depthwise-like, 1x1
    ((2, 2, 10, 11), 4, (5, 4), ((2, 2), (0, 3)), (1, 1), 2),  # kernel rows of 3 + 1
    ((2, 4, 6, 6), 8, (2, 2), ((0, 1), (0, 1)), (1, 1), 1),  # 'same' with an even kernel
    ((2, 3, 6, 7), 3, (3, 3), ((3, 3), (4, 4)), (1, 2), 3),  # padding past the dilated kernel
]


@numba_only
@pytest.mark.parametrize(("shape", "o", "k", "pad", "d", "groups"), DIRECT_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_conv_kernels_equal_the_numpy_reference(
    monkeypatch, shape, o, k, pad, d, groups, dtype
):
    rng = np.random.default_rng(0)
    monkeypatch.setattr(CT, "DIRECT_SMALL_OUTPUT", True)  # the kernels on every shape
    geom = _geom(shape, k, pad, d)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((o, shape[1] // groups, *k)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    assert CT._direct(geom, groups, w.shape, x, w, b) is not None
    y = _conv._conv2d_fwd(x, w, b, geom, groups)
    g = rng.standard_normal(y.shape).astype(dtype)
    _passes_match_reference(monkeypatch, x, w, b, g, geom, groups, dtype)


@numba_only
def test_direct_conv_kernels_read_non_contiguous_inputs(monkeypatch):
    rng = np.random.default_rng(1)
    geom = _geom((3, 4, 8, 7), (3, 3), ((1, 1), (1, 1)), (1, 1))
    x = rng.standard_normal((3, 7, 8, 4)).astype(np.float32).transpose(0, 3, 2, 1)[:, :, ::-1]
    assert x.shape == geom.in_shape  # (3, 4, 8, 7), rows reversed, columns strided
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)[:, :, ::-1, :]
    g = rng.standard_normal((3, 5, 7, 8)).astype(np.float32).transpose(0, 1, 3, 2)
    assert not (x.flags.c_contiguous or w.flags.c_contiguous or g.flags.c_contiguous)
    _passes_match_reference(monkeypatch, x, w, None, g, geom, 1, np.float32)


STACK_CASES = [  # planes that share padding, crop, or take a tail of one output channel
    ((7, 3, 9, 8), 5, (3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # odd batch, odd O
    ((5, 4, 6, 7), 6, (3, 3), ((0, 2), (2, 0)), (1, 1), 2),  # asymmetric pads
    ((4, 2, 8, 8), 3, (3, 3), ((3, 3), (4, 4)), (1, 1), 1),  # the input gradient crops
    ((6, 2, 7, 9), 4, (5, 3), ((1, 0), (0, 1)), (1, 2), 2),  # generic taps, dilated columns
    ((3, 1, 5, 4), 1, (3, 3), ((0, 0), (0, 0)), (1, 1), 1),  # one channel in and out
]


@numba_only
@pytest.mark.parametrize(("run", "parallel_min"), [(1, 0), (150, 0), (1 << 20, 1 << 62)])
@pytest.mark.parametrize(("shape", "o", "k", "pad", "d", "groups"), STACK_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_chunks_and_two_thread_halves_equal_the_numpy_reference(
    monkeypatch, run, parallel_min, shape, o, k, pad, d, groups, dtype
):
    # run 1: one sample per chunk; 150: several, the last one partial; 1 << 20: the whole
    # batch in one chunk, on one thread
    from tapegrad._kernels import conv_direct, threads

    monkeypatch.setattr(conv_direct, "RUN", run)
    monkeypatch.setattr(conv_direct, "PARALLEL_MIN", parallel_min)
    monkeypatch.setattr(CT, "DIRECT_SMALL_OUTPUT", True)
    assert conv_direct._parallel(shape[0], 1) == (parallel_min == 0 and threads.active())
    rng = np.random.default_rng(3)
    geom = _geom(shape, k, pad, d)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((o, shape[1] // groups, *k)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    assert CT._direct(geom, groups, w.shape, x, w, b) is conv_direct
    y = _conv._conv2d_fwd(x, w, b, geom, groups)
    g = rng.standard_normal(y.shape).astype(dtype)
    _passes_match_reference(monkeypatch, x, w, b, g, geom, groups, dtype)


@numba_only
def test_direct_planes_share_padding_only_when_no_side_crops():
    from tapegrad._kernels import conv_direct

    assert conv_direct._period(8, 1, 1, 8, 2) == 9  # 3x3 'same': one zero row between planes
    assert conv_direct._period(13, 0, 0, 11, 2) == 13  # no padding: the planes touch
    assert conv_direct._period(11, 2, 2, 13, 2) == 13  # an unpadded layer's input gradient
    assert conv_direct._period(8, -1, 2, 7, 2) == 9  # a crop: each plane its own rows


@numba_only
def test_many_channels_and_strides_keep_the_gemm():
    geom = _geom((2, 256, 8, 8), (3, 3), ((1, 1), (1, 1)), (1, 1))
    x = np.zeros((2, 256, 8, 8), np.float32)
    assert CT._direct(geom, 1, (256, 256, 3, 3), x) is None  # 256 * 256 channels
    assert CT._direct(geom, 1, (128, 128, 3, 3), x) is None
    assert CT._direct(geom, 1, (32, 16, 3, 3), x) is None  # 512 pairs: the GEMM
    assert CT._direct(geom, 1, (16, 16, 3, 3), x) is not None  # 16 * 16: the limit
    assert CT._direct(geom, 16, (256, 16, 3, 3), x) is not None  # 16 * 16 per group
    strided = geom._replace(stride=(2, 1))
    assert CT._direct(strided, 1, (4, 256, 3, 3), x) is None
    assert CT._direct(geom, 1, (4, 256, 3, 3), x.astype(np.float16)) is None
    # an output plane smaller than the kernel (a DCGAN generator's 1x1 -> 4x4 first layer)
    tiny = _geom((2, 16, 4, 4), (4, 4), ((0, 0), (0, 0)), (1, 1))
    assert tiny.out_hw == (1, 1)
    assert CT._direct(tiny, 1, (8, 16, 4, 4), np.zeros((2, 16, 4, 4), np.float32)) is None


def test_pixel_major_chunks_hold_gemm_rows_past_the_budget(monkeypatch):
    from tapegrad._kernels import conv_gemm  # noqa: PLC0415

    # DCGAN ngf 64's 256 -> 512 4x4 stride 2 to 4x4: 16 output pixels a sample
    geom = _conv.Geom((64, 256, 8, 8), (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), (4, 4))
    chunks = CT._pm_chunks(conv_gemm, geom, 1, (512, 256, 4, 4))
    per = CT.GEMM_ROWS // 16  # the budget alone: 2 samples
    assert chunks == [(i, min(64, i + per)) for i in range(0, 64, per)]
    monkeypatch.setattr(CT, "GEMM_ROWS", 1)
    assert len(CT._pm_chunks(conv_gemm, geom, 1, (512, 256, 4, 4))) == 32
    # the rows never shrink a chunk the budget allows
    wide = geom._replace(in_shape=(64, 16, 8, 8))
    monkeypatch.setattr(CT, "GEMM_ROWS", 256)
    assert CT._pm_chunks(conv_gemm, wide, 1, (32, 16, 4, 4)) == CT.chunks(
        wide, 16 * 16, 16 * 10 * 10)


GEMM_CASES = [  # (N, C, H, W), O, kernel, stride, ((top, bottom), (left, right)), dilation, groups
    ((5, 16, 12, 12), 32, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),  # DCGAN's 4x4 s2 p1
    ((3, 3, 13, 11), 20, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),  # odd sizes, 3 channels
    ((4, 16, 8, 8), 32, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # stride 1, 3x3
    ((3, 12, 9, 10), 24, (3, 2), (2, 3), ((2, 0), (1, 2)), (1, 1), 3),  # asymmetric, groups
    ((2, 8, 11, 9), 32, (3, 3), (1, 2), ((2, 2), (0, 3)), (2, 3), 2),  # dilation, groups
    ((3, 32, 7, 7), 20, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),  # 1x1 s2 downsample
    ((2, 24, 4, 5), 1, (4, 4), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),  # one output pixel
    ((2, 20, 6, 7), 18, (3, 3), (3, 2), ((4, 4), (3, 5)), (1, 1), 1),  # padding past kernels
    ((2, 64, 10, 18), 8, (3, 3), (1, 2), ((1, 1), (1, 1)), (1, 1), 1),  # channel-first columns
    ((2, 64, 18, 18), 8, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),  # strided, 1024 long: NHWC
    ((3, 128, 5, 6), 16, (3, 3), (2, 1), ((1, 1), (1, 1)), (1, 1), 2),  # rows short: NHWC
    ((2, 64, 9, 9), 16, (3, 3), (1, 2), ((1, 1), (2, 2)), (1, 2), 1),  # row scatter, dilated
]


@numba_only
@pytest.mark.parametrize(("shape", "o", "k", "s", "pad", "d", "groups"), GEMM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("budget", [1, 1 << 18])  # one sample per chunk; the default chunks
@pytest.mark.parametrize("parallel", [False, True])  # the copying passes' two-thread twins
def test_gemm_conv_kernels_equal_the_numpy_reference(
    monkeypatch, shape, o, k, s, pad, d, groups, dtype, budget, parallel
):
    from tapegrad._kernels import conv_gemm  # noqa: PLC0415

    monkeypatch.setattr(conv_gemm, "PASS_MIN", 0 if parallel else 1 << 62)
    monkeypatch.setattr(CT, "COLS_BUDGET", budget)
    monkeypatch.setattr(CT, "GEMM_ROWS", 1)  # chunks by the budget alone
    # stride-1 layers this narrow run direct; wider ones (over DIRECT_MAX) take these paths
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "_blocked", lambda *a, **k: None)
    rng = np.random.default_rng(3)
    n, c, h, w_ = shape
    ho = _conv.out_size(h, k[0], s[0], pad[0], d[0])
    wo = _conv.out_size(w_, k[1], s[1], pad[1], d[1])
    geom = _conv.Geom(shape, k, s, pad, d, (ho, wo))
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((o, c // groups, *k)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    g = rng.standard_normal((n, o, ho, wo)).astype(dtype)
    assert CT._direct(geom, groups, w.shape, x, w, b) is None
    long = c // groups * k[0] * k[1] >= CT.PIXEL_MAJOR_COLUMNS
    pixel_major = c // groups < CT.PIXEL_MAJOR_CHANNELS or wo < 8 or s == (1, 1) or long
    assert (CT._pixel_major(geom, groups, w.shape, x, w, b) is not None) == pixel_major
    _passes_match_reference(monkeypatch, x, w, b, g, geom, groups, dtype)


@numba_only
def test_gemm_conv_kernels_read_non_contiguous_inputs(monkeypatch):
    rng = np.random.default_rng(4)
    geom = _conv.Geom((3, 16, 9, 8), (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), (4, 4))
    x = rng.standard_normal((3, 8, 9, 16)).astype(np.float32).transpose(0, 3, 2, 1)[:, :, ::-1]
    w = rng.standard_normal((24, 16, 4, 4)).astype(np.float32)[:, :, ::-1, :]
    g = rng.standard_normal((3, 24, 4, 4)).astype(np.float32).transpose(0, 1, 3, 2)
    assert not (x.flags.c_contiguous or w.flags.c_contiguous or g.flags.c_contiguous)
    monkeypatch.setattr(CT, "_blocked", lambda *a, **k: None)
    _passes_match_reference(monkeypatch, x, w, None, g, geom, 1, np.float32)


BLOCKED_CASES = [  # (N, C, H, W), O, kernel, stride, ((top, bottom), (left, right)), dilation
    ((4, 16, 8, 8), 32, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # CLIP's conv2
    ((5, 16, 12, 12), 32, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # DCGAN's 4x4 s2 p1
    ((3, 3, 13, 11), 16, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # 3 channels: the tail
    ((1, 32, 22, 23), 16, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1)),  # batch 1, partial blocks
    ((1, 16, 12, 12), 32, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # batch 1, channels-last
    ((2, 20, 9, 7), 48, (3, 2), (1, 1), ((2, 0), (1, 1)), (1, 1)),  # asymmetric padding
    ((2, 16, 11, 9), 32, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2)),  # dilation
    ((2, 8, 9, 10), 16, (3, 3), (2, 3), ((1, 1), (4, 4)), (1, 1)),  # padding past the kernel
    ((3, 32, 7, 7), 16, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1)),  # 1x1 s2, a 4-pixel row
    ((3, 16, 11, 8), 32, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # 5 rows of 4: in pairs
    ((2, 16, 3, 4), 16, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # rows under a block
    ((2, 32, 5, 6), 16, (4, 3), (3, 2), ((2, 1), (0, 2)), (2, 1)),  # strides and dilation
    # no padding, unit column stride, 16+ channels: channel-first (conv_blocked.channel_first)
    ((3, 16, 10, 12), 32, (3, 2), (2, 1), ((0, 0), (0, 0)), (1, 2)),  # row stride, dilation
    ((2, 20, 8, 30), 16, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1)),  # 20 channels: 8 + 8 + 4
]


def _conv_case(rng, shape, o, k, s, pad, d, dtype):
    """A convolution's geometry, input, weights and output gradient, drawn from ``rng``."""
    n, c, h, w_ = shape
    ho = _conv.out_size(h, k[0], s[0], pad[0], d[0])
    wo = _conv.out_size(w_, k[1], s[1], pad[1], d[1])
    geom = _conv.Geom(shape, k, s, pad, d, (ho, wo))
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((o, c, *k)).astype(dtype)
    return geom, x, w, rng.standard_normal((n, o, ho, wo)).astype(dtype)


@numba_only
@pytest.mark.parametrize(("shape", "o", "k", "s", "pad", "d"), BLOCKED_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])  # the parallel twins, on every call
def test_blocked_conv_kernels_equal_the_numpy_reference(
    monkeypatch, shape, o, k, s, pad, d, dtype, parallel
):
    from tapegrad._kernels import conv_blocked, conv_gemm  # noqa: PLC0415

    # on two threads: odd batches split unevenly, a batch of one by rows (or weight blocks)
    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    monkeypatch.setattr(conv_gemm, "PASS_MIN", 0 if parallel else 1 << 62)
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1 << 30)  # the blocked kernels, not Winograd
    rng = np.random.default_rng(8)
    geom, x, w, g = _conv_case(rng, shape, o, k, s, pad, d, dtype)
    c = shape[1]
    b = rng.standard_normal(o).astype(dtype)
    assert CT._blocked(geom, 1, w.shape, x, w, b) is not None
    input_grad = c % 16 == 0
    assert (CT._blocked(geom, 1, w.shape, g, w, input_grad=True) is not None) == input_grad
    _passes_match_reference(monkeypatch, x, w, b, g, geom, 1, dtype)


@numba_only
@pytest.mark.parametrize("shape", [(5, 16, 12, 12), (1, 16, 12, 12)])  # by samples, by rows
def test_blocked_twins_give_the_serial_result_at_every_thread_count(monkeypatch, shape):
    """The parallel twins split their rows or samples into one chunk per numba thread: forward
    and input gradient equal one thread's bit for bit, the weight gradient (the chunks' sums
    added) to rounding."""
    import numba  # noqa: PLC0415

    from tapegrad._kernels import conv_blocked, threads  # noqa: PLC0415

    if not threads.active() or numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip(f"kernels serial here: {threads.describe()}")
    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 0)
    geom, x, w, g = _conv_case(np.random.default_rng(3), shape, 32, (4, 4), (2, 2),
                               ((1, 1), (1, 1)), (1, 1), np.float32)
    old = numba.get_num_threads()
    outs = {}
    try:
        for t in sorted({1, 2, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(t)
            outs[t] = (conv_blocked.conv(x, w, None, geom), conv_blocked.input_grad(g, w, geom),
                       conv_blocked.weight_grad(g, x, geom, w.shape))
    finally:
        numba.set_num_threads(old)
    one = outs.pop(1)
    for t, (y, dx, dw) in outs.items():
        np.testing.assert_array_equal(y, one[0], err_msg=f"forward at {t} threads")
        np.testing.assert_array_equal(dx, one[1], err_msg=f"input gradient at {t} threads")
        np.testing.assert_allclose(dw, one[2], rtol=1e-5, atol=1e-4 * np.abs(one[2]).max())


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("c", "h", "w", "pt", "pl", "hp", "wp"), [
    (16, 8, 8, 1, 1, 10, 10), (32, 8, 8, 0, 0, 8, 8), (3, 7, 5, 2, 1, 10, 6),
    (48, 9, 17, 1, 2, 11, 20), (16, 8, 8, 1, 1, 9, 9), (17, 16, 24, 0, 3, 15, 26)])
def test_blocked_sample_copy_equals_the_scalar_channels_last_copy(dtype, c, h, w, pt, pl, hp, wp):
    """conv_blocked._nhwc1 (whole tiles transposed in registers, the rest scalar) writes what
    conv_gemm._nhwc_k does: padding zeros, partial tiles, rows and columns cut off."""
    from tapegrad._kernels import conv_blocked, conv_gemm  # noqa: PLC0415

    x = np.random.default_rng(1).standard_normal((1, c, h, w)).astype(dtype)
    got, want = np.full((1, hp, wp, c), 7, dtype), np.full((1, hp, wp, c), 9, dtype)
    conv_blocked._nhwc1(x, got, pt, pl)
    conv_gemm._nhwc_k(x, want.reshape(1, 1, hp, wp, c), pt, pl, 0, 1)
    np.testing.assert_array_equal(got, want)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_transposing_store_puts_each_pixel_and_channel_in_its_plane(dtype):
    """block_put_t stores a block of k pixels (1 .. OB, powers of two) by OB channels to
    channel-first planes ``stride`` apart, touching nothing else."""
    import numba  # noqa: PLC0415

    from tapegrad._kernels import conv_vec as cb  # noqa: PLC0415

    for k in (1, 2, 4, 8, 16):
        rows = ", ".join(f"row_load(a, np.uint64({i * cb.OB}))" for i in range(k))
        ns = {"row_load": cb.row_load, "block_put_t": cb.block_put_t, "np": np}
        exec(f"def put(a, out, stride):\n    block_put_t(out, np.uint64(3), np.uint64(stride), "  # noqa: S102
             f"({rows},))", ns)
        a = np.arange(k * cb.OB, dtype=dtype)
        got = np.full(cb.OB * 37 + 20, -1, dtype)
        numba.njit(ns["put"])(a, got, 37)
        want = np.full_like(got, -1)
        for i in range(k):
            want[3 + i + 37 * np.arange(cb.OB)] = a[i * cb.OB:(i + 1) * cb.OB]
        np.testing.assert_array_equal(got, want, err_msg=f"{k} pixels")


@numba_only
def test_blocked_passes_run_channel_first_on_unpadded_unit_stride_rows():
    from tapegrad._kernels import conv_blocked  # noqa: PLC0415

    geom = _geom((2, 32, 26, 26), (3, 3), ((0, 0), (0, 0)), (1, 1))
    assert conv_blocked.channel_first(geom, 32)  # mnist's 32 -> 64
    assert not conv_blocked.channel_first(geom, 8)  # narrow: channels-last runs of kw * C
    padded = _geom((2, 32, 26, 26), (3, 3), ((1, 1), (1, 1)), (1, 1))
    assert not conv_blocked.channel_first(padded, 32)
    assert not conv_blocked.channel_first(geom._replace(stride=(1, 2)), 32)
    assert conv_blocked.channel_first(geom._replace(stride=(2, 1)), 32)


@numba_only
@pytest.mark.parametrize("parallel", [False, True])
def test_blocked_passes_on_an_empty_batch_return_empty_outputs_and_zero_weight_grads(
    monkeypatch, parallel
):
    from tapegrad._kernels import conv_blocked, conv_gemm  # noqa: PLC0415

    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    monkeypatch.setattr(conv_gemm, "PASS_MIN", 0 if parallel else 1 << 62)
    for pad in (((1, 1), (1, 1)), ((0, 0), (0, 0))):  # channels-last copies; channel-first
        geom, x, w, g = _conv_case(np.random.default_rng(2), (0, 16, 12, 12), 32, (4, 4), (2, 2),
                                   pad, (1, 1), np.float32)
        assert conv_blocked.conv(x, w, None, geom).shape == g.shape
        assert conv_blocked.input_grad(g, w, geom).shape == x.shape
        dw = conv_blocked.weight_grad(g, x, geom, w.shape)
        assert dw.shape == w.shape and not dw.any()


@numba_only
def test_generated_blocked_module_is_imported_once_on_a_helper_thread():
    import threading  # noqa: PLC0415

    from tapegrad._kernels import conv_blocked  # noqa: PLC0415

    mod = conv_blocked._module(conv_blocked.P, conv_blocked.PC, conv_blocked.OB)
    assert conv_blocked._module(conv_blocked.P, conv_blocked.PC, conv_blocked.OB) is mod
    seen = []
    assert conv_blocked._aside(lambda a: seen.append(threading.current_thread()) or a, 7) == 7
    assert seen and seen[0] is not threading.current_thread()

    def fails():
        raise ValueError("from the helper")

    with pytest.raises(ValueError, match="from the helper"):
        conv_blocked._aside(fails)


@numba_only
def test_blocked_takes_narrow_single_group_layers(monkeypatch):
    from tapegrad._kernels import conv_blocked  # noqa: PLC0415

    x = np.zeros((2, 16, 8, 8), np.float32)
    geom = _geom(x.shape, (3, 3), ((1, 1), (1, 1)), (1, 1))
    assert CT._blocked(geom, 1, (32, 16, 3, 3), x) is not None
    assert CT._blocked(geom, 1, (24, 16, 3, 3), x) is None  # not whole blocks of 16
    assert CT._blocked(geom, 2, (32, 8, 3, 3), x) is None  # groups
    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 1 << 62)  # one thread
    assert CT._blocked(geom, 1, (128, 64, 3, 3), x) is None  # 64 channels: the GEMMs
    assert CT._blocked(geom, 1, (32, 16, 3, 3), x.astype(np.float16)) is None
    # the input gradient: the forward's rule with the channels swapped, at any stride
    strided = geom._replace(stride=(2, 2))
    assert CT._blocked(strided, 1, (32, 16, 3, 3), x, input_grad=True) is not None
    assert CT._blocked(geom, 1, (32, 8, 3, 3), x, input_grad=True) is None
    assert CT._blocked(geom, 1, (64, 16, 3, 3), x, input_grad=True) is None  # sums 64


WIDE_CASES = [  # as BLOCKED_CASES, 64 channels and more: taken on two threads only, with rows
    # (the output's for the forward, the input's for the input gradient) of at least a block
    ((2, 64, 9, 9), 64, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # ResNet's 3x3
    ((3, 80, 18, 17), 32, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # DCGAN's 4x4 s2, 80 in
    ((2, 64, 17, 16), 128, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # stride 2, 128 out
]


@numba_only
@pytest.mark.parametrize(("shape", "o", "k", "s", "pad", "d"), WIDE_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_kernels_on_wide_layers_equal_the_numpy_reference(monkeypatch, shape, o, k, s,
                                                                  pad, d, dtype):
    from tapegrad._kernels import conv_blocked, threads  # noqa: PLC0415

    if not threads.active():
        pytest.skip(f"kernels serial here: {threads.describe()}")
    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 0)  # on two threads from any size
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1 << 30)
    geom, x, w, g = _conv_case(np.random.default_rng(10), shape, o, k, s, pad, d, dtype)
    n, c, h, _ = shape
    # without AVX-512 the wide route takes only layers of few weights (the GEMMs serve the rest)
    monkeypatch.setattr(conv_blocked, "WIDE", False)
    few = c * o * k[0] * k[1] <= conv_blocked.WIDE_AVX2_WEIGHTS
    assert (CT._blocked(geom, 1, w.shape, x, w, forward=True) is None) != few
    assert (CT._blocked(geom, 1, w.shape, g, w, input_grad=True) is None) == (
        o >= 64 and not few)
    monkeypatch.setattr(conv_blocked, "WIDE_AVX2_WEIGHTS", c * o * k[0] * k[1] - 1)
    assert CT._blocked(geom, 1, w.shape, x, w, forward=True) is None
    monkeypatch.setattr(conv_blocked, "WIDE", True)  # the kernels themselves, on any machine
    assert CT._blocked(geom, 1, w.shape, x, w, forward=True) is not None
    assert CT._blocked(geom, 1, w.shape, x, w) is not None
    assert CT._blocked(geom, 1, w.shape, g, w, input_grad=True) is not None
    assert CT._blocked(geom, 1, (o, c, 1, 1), x, w) is None  # 1x1: the GEMMs
    if conv_blocked.P == 8:  # the row rules below, in AVX-512's blocks of 8 pixels
        _wide_rows_select(geom, w, x, g, o, c, h, k)
    _passes_match_reference(monkeypatch, x, w, None, g, geom, 1, dtype)


def _wide_rows_select(geom, w, x, g, o, c, h, k):
    """The wide route's rules on rows (blocks of 8 pixels): which short rows it leaves."""
    n = geom.in_shape[0]
    short = geom._replace(out_hw=(geom.out_hw[0], 3), in_shape=(n, c, h, 5))
    assert CT._blocked(short, 1, w.shape, x, w, forward=True) is None  # rows under a block
    # rows of half a block (or more): the forward's blocks take two, below SHORT_ROWS_CHANNELS
    half = geom._replace(out_hw=(geom.out_hw[0], 4), in_shape=(n, c, h, 7))
    assert CT._blocked(half, 1, w.shape, x, w, forward=True) is not None
    assert CT._blocked(half, 1, (o, 256, *k), x, w, forward=True) is None
    # the weight gradient keeps short rows below SHORT_ROWS_CHANNELS input channels
    assert CT._blocked(short, 1, w.shape, x, w) is not None
    assert CT._blocked(short, 1, (o, 256, *k), x, w) is None
    # the input gradient sums the output channels: narrow (any row) when fewer than 64; from
    # SHORT_ROWS_CHANNELS its rows are the input's in one stride class (15 // 2: under a block)
    assert (CT._blocked(short, 1, w.shape, g, w, input_grad=True) is None) == (o >= 64)
    strided = geom._replace(stride=(2, 2), in_shape=(n, c, h, 15))
    assert CT._blocked(strided, 1, (128, c, *k), g, w, input_grad=True) is not None
    assert CT._blocked(strided, 1, (256, c, *k), g, w, input_grad=True) is None
    assert CT._blocked(strided._replace(in_shape=(n, c, h, 16)), 1, (256, c, *k), g, w,
                            input_grad=True) is not None


def _strided_case(rng, c, o):
    """A 3x3 padding-1 convolution of 3 samples of c channels at 9x8 to o channels whose input
    (transposed, rows reversed), weights (rows reversed) and output gradient (transposed) are
    all non-contiguous views, in float32."""
    geom = _geom((3, c, 9, 8), (3, 3), ((1, 1), (1, 1)), (1, 1))
    x = rng.standard_normal((3, 8, 9, c)).astype(np.float32).transpose(0, 3, 2, 1)[:, :, ::-1]
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)[:, :, ::-1, :]
    g = rng.standard_normal((3, o, 8, 9)).astype(np.float32).transpose(0, 1, 3, 2)
    assert not (x.flags.c_contiguous or w.flags.c_contiguous or g.flags.c_contiguous)
    return geom, x, w, g


@numba_only
def test_blocked_kernels_read_non_contiguous_inputs(monkeypatch):
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1 << 30)
    geom, x, w, g = _strided_case(np.random.default_rng(9), 16, 32)
    assert CT._blocked(geom, 1, w.shape, g, w, input_grad=True) is not None
    _passes_match_reference(monkeypatch, x, w, None, g, geom, 1, np.float32)


def _second_order_matches_torch(x, w, s, p):
    """conv2d's output, gradients and gradients of the gradients' squared norms equal
    PyTorch's in float64."""
    xt, wt = tg.tensor(x), tg.Parameter(w)
    with tg.Tape(persistent=True) as outer:
        outer.watch(xt)
        with tg.Tape() as tape:
            tape.watch(xt)
            y = F.conv2d(xt, wt, stride=s, padding=p)
            loss = (y * y).sum()
        gx, gw = tape.gradient(loss, [xt, wt])
        second = (gx * gx).sum() + (gw * gw).sum()
    hx, hw = outer.gradient(second, [xt, wt])
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    ty = torch.nn.functional.conv2d(tx, tw, stride=s, padding=p)
    tgx, tgw = torch.autograd.grad((ty * ty).sum(), [tx, tw], create_graph=True)
    thx, thw = torch.autograd.grad((tgx * tgx).sum() + (tgw * tgw).sum(), [tx, tw])
    pairs = [(y, ty), (gx, tgx), (gw, tgw), (hx, thx), (hw, thw)]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize(("shape", "o", "k", "s", "p"),
                         [((2, 16, 7, 6), 16, 3, 1, 1), ((2, 3, 9, 10), 16, 4, 2, 1)])
def test_blocked_conv2d_matches_torch_to_second_order_in_float64(monkeypatch, shape, o, k, s, p):
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1 << 30)
    rng = np.random.default_rng(10)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((o, shape[1], k, k))
    _second_order_matches_torch(x, w, s, p)


WINOGRAD_CASES = [  # (N, C, H, W), O, ((top, bottom), (left, right))
    ((2, 3, 7, 6), 5, ((1, 1), (1, 1))),  # odd output rows: a half tile
    ((3, 4, 8, 9), 6, ((0, 0), (0, 0))),  # unpadded, odd output columns
    ((2, 5, 5, 7), 4, ((2, 1), (0, 2))),  # asymmetric, up to 2 (the input gradient pads 0)
    ((1, 8, 3, 3), 4, ((2, 2), (2, 2))),  # batch 1, a 5x5 output from a 3x3 input
    ((2, 4, 3, 4), 3, ((0, 0), (0, 0))),  # a 1x2 output: one tile, three quarters unused
]


@numba_only
@pytest.mark.parametrize(("shape", "o", "pad"), WINOGRAD_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("budget", [1, 1 << 18])  # one sample per chunk; the default chunks
@pytest.mark.parametrize("parallel", [False, True])  # the copying passes' two-thread twins
def test_winograd_kernels_equal_the_numpy_reference(
    monkeypatch, shape, o, pad, dtype, budget, parallel
):
    from tapegrad._kernels import conv_gemm  # noqa: PLC0415

    monkeypatch.setattr(conv_gemm, "PASS_MIN", 0 if parallel else 1 << 62)
    monkeypatch.setattr(CT, "COLS_BUDGET", budget)
    monkeypatch.setattr(CT, "WINOGRAD_CHANNELS", 1)  # every 3x3 stride-1 layer
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "_blocked", lambda *a, **k: None)
    monkeypatch.setattr(CT, "_fused", lambda *a, **k: None)
    rng = np.random.default_rng(5)
    geom, x, w, g = _conv_case(rng, shape, o, (3, 3), (1, 1), pad, (1, 1), dtype)
    b = rng.standard_normal(o).astype(dtype)
    assert CT._winograd(geom, 1, w.shape, x, w, b) is not None
    _passes_match_reference(monkeypatch, x, w, b, g, geom, 1, dtype)


def _only_3x3_stride_1_single_group(select, geom, x, wshape):
    """``select(geom, groups, wshape, x)`` (a path's rule) takes none of the layers that differ
    from a 3x3, stride-1, undilated, single-group float32 layer it takes in one respect."""
    o, c = wshape[:2]
    assert select(geom, 1, wshape, x) is not None
    assert select(geom, 2, (o, c // 2, 3, 3), x) is None  # groups
    assert select(geom._replace(stride=(1, 2)), 1, wshape, x) is None
    assert select(geom._replace(dilation=(2, 2)), 1, wshape, x) is None
    five = _geom(x.shape, (5, 5), ((2, 2), (2, 2)), (1, 1))
    assert select(five, 1, (o, c, 5, 5), x) is None
    assert select(geom, 1, wshape, x.astype(np.float16)) is None


@numba_only
def test_winograd_takes_wide_3x3_stride_1_layers_only():
    x = np.zeros((2, 64, 8, 8), np.float32)
    geom = _geom(x.shape, (3, 3), ((1, 1), (1, 1)), (1, 1))
    assert CT._winograd(geom, 1, (64, 64, 3, 3), x) is not None
    assert CT._winograd(geom, 1, (32, 64, 3, 3), x) is None  # 32 output channels
    assert CT._winograd(geom._replace(padding=((3, 3), (1, 1))), 1, (64, 64, 3, 3), x) is None
    _only_3x3_stride_1_single_group(CT._winograd, geom, x, (64, 64, 3, 3))


@numba_only
def test_winograd_reads_non_contiguous_inputs(monkeypatch):
    monkeypatch.setattr(CT, "WINOGRAD_CHANNELS", 1)
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    monkeypatch.setattr(CT, "_blocked", lambda *a, **k: None)
    monkeypatch.setattr(CT, "_fused", lambda *a, **k: None)
    geom, x, w, g = _strided_case(np.random.default_rng(6), 6, 7)
    assert CT._winograd(geom, 1, w.shape, x, w) is not None
    _passes_match_reference(monkeypatch, x, w, None, g, geom, 1, np.float32)


FUSED_CASES = [  # (N, C, H, W), O, ((top, bottom), (left, right)): C and O multiples of 16
    ((2, 16, 7, 6), 16, ((1, 1), (1, 1))),  # odd output rows: a half tile
    ((3, 32, 8, 9), 32, ((0, 0), (0, 0))),  # unpadded, odd output columns (input gradient: 2)
    ((2, 16, 5, 7), 32, ((2, 1), (0, 2))),  # asymmetric
    ((1, 16, 3, 3), 16, ((2, 2), (2, 2))),  # batch 1, a 5x5 output from a 3x3 input
    ((2, 16, 3, 4), 16, ((0, 0), (0, 0))),  # a 1x2 output: one tile, three quarters unused
    ((2, 16, 6, 6), 16, ((3, 3), (3, 3))),  # padding 3: the input gradient's windows crop
    ((5, 48, 9, 9), 32, ((1, 1), (1, 1))),  # 125 tiles: groups of 32 and a partial one
]


@numba_only
@pytest.mark.parametrize(("shape", "o", "pad"), FUSED_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])  # the two-thread twin, on every call
def test_fused_winograd_kernel_equals_the_numpy_reference(monkeypatch, shape, o, pad, dtype,
                                                          parallel):
    from tapegrad._kernels import conv_blocked  # noqa: PLC0415

    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1)
    monkeypatch.setattr(CT, "FUSED_PREFER_CHANNELS", 1)
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    rng = np.random.default_rng(11)
    geom, x, w, g = _conv_case(rng, shape, o, (3, 3), (1, 1), pad, (1, 1), dtype)
    b = rng.standard_normal(o).astype(dtype)
    assert CT._fused(geom, 1, w.shape, x, w, b) is not None
    assert CT._fused(geom, 1, w.shape, g, w, input_grad=True) is not None
    assert CT._fused(geom, 1, w.shape, g, x, weight_grad=True) is not None
    _passes_match_reference(monkeypatch, x, w, b, g, geom, 1, dtype)


@numba_only
def test_fused_winograd_takes_3x3_stride_1_layers_with_whole_blocks():
    x = np.zeros((2, 32, 8, 8), np.float32)
    geom = _geom(x.shape, (3, 3), ((1, 1), (1, 1)), (1, 1))
    assert CT._fused(geom, 1, (64, 32, 3, 3), x) is not None
    assert CT._fused(geom, 1, (64, 8, 3, 3), x) is None  # sums 8 channels
    assert CT._fused(geom, 1, (40, 32, 3, 3), x) is None  # not whole blocks of 16
    assert CT._fused(geom, 1, (64, 32, 3, 3), x, input_grad=True) is not None
    assert CT._fused(geom, 1, (32, 40, 3, 3), x, input_grad=True) is None  # makes 40
    assert CT._fused(geom, 1, (8, 32, 3, 3), x, input_grad=True) is None  # sums 8
    # the weight gradient: 16+ input channels in blocks of 8, output channels in blocks of 16
    assert CT._fused(geom, 1, (16, 16, 3, 3), x, weight_grad=True) is not None
    assert CT._fused(geom, 1, (16, 8, 3, 3), x, weight_grad=True) is None
    assert CT._fused(geom, 1, (16, 20, 3, 3), x, weight_grad=True) is None
    assert CT._fused(geom, 1, (24, 16, 3, 3), x, weight_grad=True) is None
    _only_3x3_stride_1_single_group(CT._fused, geom, x, (64, 32, 3, 3))


def test_fused_kernels_are_preferred_from_32_input_channels():
    x = np.zeros((2, 16, 8, 8), np.float32)
    geom = _geom(x.shape, (3, 3), ((1, 1), (1, 1)), (1, 1))
    # CLIP's 16 -> 32: the blocked kernels are the hand thresholds' choice for every pass
    for p in ("conv", "input_grad", "weight_grad"):
        assert not CT.fused_prefer(geom, 1, (32, 16, 3, 3), (), p)
        assert CT.fused_prefer(geom, 1, (16, 32, 3, 3), (), p)
    if _kernels.numba() is not None:
        for op, p in CT.PASSES.items():
            got = [n for n in CT.STRATEGIES
                   if CT.predicates(n)[1](geom, 1, (32, 16, 3, 3), (x, x), p)]
            assert got[0] == "blocked", (op, got)


@numba_only
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_permutes_equal_numpys_transposes(monkeypatch, parallel, dtype):
    from tapegrad._kernels import conv  # noqa: PLC0415

    monkeypatch.setattr(conv, "PERMUTE_MIN", 0 if parallel else 1 << 62)
    rng = np.random.default_rng(3)
    for shape in [(1, 1, 1, 1), (3, 5, 2, 3), (17, 33, 3, 3), (48, 20, 4, 4)]:
        w = rng.standard_normal(shape).astype(dtype)
        tco = np.ascontiguousarray(w.transpose(2, 3, 1, 0))
        otc = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
        for order, a, perm in [("oct->tco", w, (2, 3, 1, 0)), ("oct->toc", w, (2, 3, 0, 1)),
                               ("oct->otc", w, (0, 2, 3, 1)), ("tco->oct", tco, (3, 2, 0, 1)),
                               ("otc->oct", otc, (0, 3, 1, 2))]:
            got = conv.permute_weights(a[::1], order)
            assert got.flags.c_contiguous and got.dtype == dtype
            np.testing.assert_array_equal(got, a.transpose(perm))
        with pytest.raises(ValueError, match="unknown order"):
            conv.permute_weights(w, "oct->cot")


@numba_only
def test_fused_winograd_reads_non_contiguous_inputs(monkeypatch):
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1)
    monkeypatch.setattr(CT, "FUSED_PREFER_CHANNELS", 1)
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    geom, x, w, g = _strided_case(np.random.default_rng(12), 16, 32)
    assert CT._fused(geom, 1, w.shape, g, w, input_grad=True) is not None
    _passes_match_reference(monkeypatch, x, w, None, g, geom, 1, np.float32)


@pytest.mark.parametrize(("shape", "o", "p"), [((2, 16, 7, 6), 16, 1), ((1, 32, 6, 5), 16, 0)])
def test_fused_winograd_conv2d_matches_torch_to_second_order_in_float64(monkeypatch, shape, o,
                                                                        p):
    monkeypatch.setattr(CT, "FUSED_CHANNELS", 1)
    monkeypatch.setattr(CT, "FUSED_PREFER_CHANNELS", 1)
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    rng = np.random.default_rng(13)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((o, shape[1], 3, 3))
    _second_order_matches_torch(x, w, 1, p)


@pytest.mark.parametrize(("shape", "o", "p"), [((2, 3, 7, 6), 5, 1), ((1, 4, 6, 5), 2, 0)])
def test_winograd_conv2d_matches_torch_to_second_order_in_float64(monkeypatch, shape, o, p):
    monkeypatch.setattr(CT, "WINOGRAD_CHANNELS", 1)
    monkeypatch.setattr(CT, "DIRECT_MAX", 0)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((o, shape[1], 3, 3))
    _second_order_matches_torch(x, w, 1, p)


CONV_TORCH = [  # shape, O, kernel, stride, padding, dilation, groups
    ((1, 2, 9, 8), 4, (3, 3), 1, 1, 1, 1),
    ((3, 4, 9, 8), 8, (3, 3), 1, "same", 2, 2),
    ((2, 4, 9, 8), 6, (2, 4), 1, "same", 1, 1),
    ((2, 3, 10, 9), 6, (3, 3), 1, 0, (2, 1), 3),
    ((2, 4, 9, 8), 8, (4, 4), 2, 1, 1, 2),
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(("shape", "o", "k", "s", "p", "d", "groups"), CONV_TORCH)
def test_conv2d_matches_torch_forward_and_backward_in_float64(shape, o, k, s, p, d, groups):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((o, shape[1] // groups, *k))
    b = rng.standard_normal(o)
    xt, wt, bt = tg.tensor(x), tg.Parameter(w), tg.Parameter(b)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.conv2d(xt, wt, bt, s, p, d, groups)
        loss = (y * y).sum()
    grads = tape.gradient(loss, [xt, wt, bt])
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, s, p, d, groups)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(grads, (tx, tw, tb), strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-10)


CONVT_TORCH = [  # shape, C_out / groups, kernel, stride, padding, output_padding, groups, dilation
    ((2, 4, 5, 6), 3, (3, 3), 1, 0, 0, 1, 1),  # stride 1: the direct kernels
    ((1, 4, 5, 5), 2, (3, 3), 1, 1, 0, 2, 2),  # batch 1, groups, dilation
    ((3, 6, 4, 4), 4, (4, 4), 2, 1, 0, 1, 1),  # DCGAN's k4 s2 p1
    ((2, 4, 5, 6), 3, (3, 2), 2, 1, 1, 2, 1),  # output_padding
    ((2, 2, 3, 4), 3, (3, 3), 3, 0, 2, 1, 2),  # output_padding below the dilation
]


@pytest.mark.parametrize(("shape", "co", "k", "s", "p", "op", "groups", "d"), CONVT_TORCH)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d_matches_torch_in_float64(shape, co, k, s, p, op, groups, d, bias):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((shape[1], co, *k))
    b = rng.standard_normal(co * groups) if bias else None
    xt, wt = tg.tensor(x), tg.Parameter(w)
    bt = tg.Parameter(b) if bias else None
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.conv_transpose2d(xt, wt, bt, s, p, op, groups, d)
        loss = (y * y).sum()
    srcs = [xt, wt] + ([bt] if bias else [])
    grads = tape.gradient(loss, srcs)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True) if bias else None
    ty = torch.nn.functional.conv_transpose2d(tx, tw, tb, s, p, op, groups, d)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(grads, [tx, tw] + ([tb] if bias else []), strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_conv_transpose2d_float32_non_contiguous_matches_torch():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 6, 8, 2)).astype(np.float32).transpose(3, 2, 1, 0)  # (2, 8, 6, 6)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    xt, wt = tg.tensor(x), tg.Parameter(w)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.conv_transpose2d(xt, wt, None, 1, 1)
        loss = (y * y).sum()
    gx, gw = tape.gradient(loss, [xt, wt])
    tx = torch.tensor(np.ascontiguousarray(x), requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv_transpose2d(tx, tw, None, 1, 1)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_conv_transpose2d_second_order_matches_torch():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((3, 2, 3, 3))
    xt, wt = tg.tensor(x), tg.Parameter(w)
    with tg.Tape() as outer:
        outer.watch(xt)
        with tg.Tape() as inner:
            inner.watch(xt)
            y = F.conv_transpose2d(xt, wt, stride=2)
            loss = (y * y).sum()
        gx = inner.gradient(loss, xt)
        pen = (gx * gx).sum()
    gw = outer.gradient(pen, wt).numpy()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv_transpose2d(tx, tw, stride=2)
    (tgx,) = torch.autograd.grad((ty * ty).sum(), tx, create_graph=True)
    (tgx * tgx).sum().backward()
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------------------------
# batch norm
# --------------------------------------------------------------------------------------------

# planes of at most 32 elements take the (N, C * M) kernels, larger ones the per-channel ones
BN_SHAPES = [(4, 3), (5, 3, 7), (2, 4, 5, 6), (1, 2, 3, 4), (2, 3, 2, 3, 4), (3, 5, 4, 4),
             (2, 3, 6, 7), (1, 2, 9, 9)]


@numba_only
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_kernels_equal_the_numpy_reference(monkeypatch, shape, affine, dtype):
    from tapegrad._kernels import batchnorm

    assert batchnorm.SMALL_PLANE == 32  # the shapes above sit on both sides of it
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)  # a mean far from zero
    c = shape[1]
    w = rng.standard_normal(c).astype(dtype) if affine else None
    b = rng.standard_normal(c).astype(dtype) if affine else None
    y = _norm._bn_fwd(x, w, b, 1e-5)
    _close(y, _reference(monkeypatch, _norm._bn_fwd, x, w, b, 1e-5), dtype)
    g = rng.standard_normal(shape).astype(dtype)
    from tapegrad._autodiff import ARRAYS

    for needs in ((True, affine, affine), (False, affine, affine)):
        ours = _norm._bn_grads(ARRAYS, g, None, x, w, b, 1e-5, needs)
        ref = _reference(monkeypatch, _norm._bn_grads, ARRAYS, g, None, x, w, b, 1e-5, needs)
        for a, r in zip(ours, ref, strict=True):
            assert (a is None) == (r is None)
            if a is not None:
                _close(a, r, dtype)
    mean, var = _norm.batch_stats(x)
    rmean, rvar = _reference(monkeypatch, _norm.batch_stats, x)
    _close(mean.astype(dtype), rmean.astype(dtype), dtype)
    _close(var.astype(dtype), rvar.astype(dtype), dtype)


@numba_only
@pytest.mark.parametrize("shape", [(64, 32, 24, 24), (3, 5, 7, 2), (2, 1, 4, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_gradient_on_two_threads_equals_one_thread_and_numpy(monkeypatch, shape, dtype):
    from tapegrad._kernels import conv

    g = np.random.default_rng(9).standard_normal(shape).astype(dtype)
    runs = []
    for minimum in (1 << 62, 0):  # one thread; then the channels' halves on two (pool shared)
        monkeypatch.setattr(conv, "SUM_PARALLEL_MIN", minimum)
        runs.append(_conv._bias_grad_fwd(g, shape))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0].dtype == dtype
    _close(runs[0], g.astype(np.float64).sum(axis=(0, 2, 3)).astype(dtype), dtype)


@numba_only
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_on_two_threads_equals_one_thread_bit_for_bit(monkeypatch, shape, dtype):
    from tapegrad._autodiff import ARRAYS
    from tapegrad._kernels import batchnorm

    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)
    w, b = rng.standard_normal(shape[1]).astype(dtype), rng.standard_normal(shape[1]).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    runs = []
    for minimum in (1 << 62, 0):  # one thread; then the channels' halves on two (pool shared)
        monkeypatch.setattr(batchnorm, "PARALLEL_MIN", minimum)
        runs.append((_norm._bn_fwd(x, w, b, 1e-5),
                     *_norm._bn_grads(ARRAYS, g, None, x, w, b, 1e-5, (True, True, True)),
                     *_norm.batch_stats(x)))
    for a, r in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, r)


def test_batch_norm_reads_the_batch_statistics_once_for_both_running_estimates(monkeypatch):
    calls = []
    stats = _norm.batch_stats
    monkeypatch.setattr(_norm, "batch_stats", lambda x: calls.append(x.shape) or stats(x))
    x = np.random.default_rng(8).standard_normal((4, 3, 5, 5)).astype(np.float32)
    bn = tg.nn.BatchNorm2d(3)
    tbn = torch.nn.BatchNorm2d(3)
    for _ in range(2):
        bn(tg.tensor(x))
        tbn(torch.from_numpy(x))
    assert calls == [x.shape] * 2  # one pass a step, not one per estimate
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-6)
    calls.clear()
    rv = tg.ones(3)
    F.batch_norm(tg.tensor(x), None, rv, training=True)  # the variance alone: its own pass
    assert calls == [x.shape]


def _bn_step(x, bn):
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        loss = (bn(xt) ** 2).sum()
    grads = tape.gradient(loss, [xt, bn.weight, bn.bias])
    return [a.numpy() for a in grads] + [bn.running_mean.numpy(), bn.running_var.numpy()]


@numba_only
@pytest.mark.parametrize("shape", [(6, 4, 4, 4), (3, 4, 8, 8)])  # either side of SMALL_PLANE
def test_batch_norm_statistics_are_read_once_for_forward_running_estimates_and_backward(
        monkeypatch, shape):
    from tapegrad._kernels import batchnorm

    x = (np.random.default_rng(13).standard_normal(shape) * 3 + 2).astype(np.float32)
    kept = []
    stats = batchnorm.channel_stats
    for keep in (True, False):
        computed = []
        monkeypatch.setattr(batchnorm, "channel_stats", lambda a: computed.append(1) or stats(a))
        if not keep:  # nothing kept: each pass computes the statistics again
            monkeypatch.setattr(batchnorm, "_keep", lambda x, stats: None)
        bn = tg.nn.BatchNorm2d(shape[1])
        kept.append(_bn_step(x, bn) + _bn_step(x, bn))
        assert len(computed) == (0 if keep else 2)  # the running estimates' pass, each step
    for a, b in zip(*kept, strict=True):  # the same bits either way
        np.testing.assert_array_equal(a, b)
    tbn = torch.nn.BatchNorm2d(shape[1])
    for _ in range(2):
        tbn(torch.from_numpy(x))
    np.testing.assert_allclose(kept[0][-2], tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kept[0][-1], tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)


@numba_only
def test_batch_norm_running_estimates_never_take_statistics_of_a_batch_changed_since():
    x = np.random.default_rng(14).standard_normal((4, 3, 5, 5)).astype(np.float32)
    xt = tg.tensor(x)
    F.batch_norm(xt, None, None, training=True)  # the kernel keeps x's statistics
    xt._data += 10.0  # the same array, changed in place
    rm, rv = tg.zeros(3), tg.ones(3)
    w = tg.ones(3, dtype=tg.float64)  # weights of another dtype: no primitive forward first
    F.batch_norm(xt, rm, rv, weight=w, training=True)
    np.testing.assert_allclose(rm.numpy(), 0.1 * (x + 10.0).mean(axis=(0, 2, 3)), rtol=1e-5)


@numba_only
@pytest.mark.parametrize("shape", [(6, 4, 4, 4), (3, 4, 8, 8)])  # either side of SMALL_PLANE
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_kernels_keep_a_nan_to_its_channel(monkeypatch, shape, dtype):
    from tapegrad._autodiff import ARRAYS

    rng = np.random.default_rng(12)
    x = rng.standard_normal(shape).astype(dtype)
    x[1, 2, 0, 3] = np.nan
    w, b = rng.standard_normal(4).astype(dtype), rng.standard_normal(4).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    with np.errstate(invalid="ignore"):
        y = _norm._bn_fwd(x, w, b, 1e-5)
        ref = _reference(monkeypatch, _norm._bn_fwd, x, w, b, 1e-5)
        gx = _norm._bn_grads(ARRAYS, g, None, x, w, b, 1e-5, (True, True, True))
        gref = _reference(
            monkeypatch, _norm._bn_grads, ARRAYS, g, None, x, w, b, 1e-5, (True, True, True)
        )
    assert np.isnan(y[:, 2]).all() and not np.isnan(np.delete(y, 2, axis=1)).any()
    for a, r in zip((y, *gx), (ref, *gref), strict=True):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(r))
        ok = ~np.isnan(r)
        _close(np.where(ok, a, 0), np.where(ok, r, 0), dtype)


@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_matches_torch_forward_backward_and_running_stats(shape, affine):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape) * 2 + 1
    c = shape[1]
    w, b = rng.standard_normal(c), rng.standard_normal(c)
    g = rng.standard_normal(shape)
    xt = tg.tensor(x)
    wt, bt = (tg.Parameter(w), tg.Parameter(b)) if affine else (None, None)
    rm, rv = tg.zeros(c, dtype=tg.float64), tg.ones(c, dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.batch_norm(xt, rm, rv, wt, bt, True, 0.1, 1e-5)
        loss = (y * tg.tensor(g)).sum()
    srcs = [xt] + ([wt, bt] if affine else [])
    grads = tape.gradient(loss, srcs)
    tx = torch.tensor(x, requires_grad=True)
    tw, tb = (torch.tensor(a, requires_grad=True) for a in (w, b)) if affine else (None, None)
    trm, trv = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    ty = torch.nn.functional.batch_norm(tx, trm, trv, tw, tb, True, 0.1, 1e-5)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for ours, theirs in zip(grads, [tx] + ([tw, tb] if affine else []), strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-12, atol=1e-12)


def test_batch_norm_float32_non_contiguous_matches_torch():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((6, 5, 8, 4)) * 4 + 30).astype(np.float32).transpose(3, 2, 1, 0)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    bn = tg.nn.BatchNorm2d(8)
    bn.load_state_dict({"weight": w, "bias": b}, strict=False)
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = bn(xt)
        loss = (y * tg.tensor(g)).sum()
    gx, gw, gb = tape.gradient(loss, [xt, bn.weight, bn.bias])
    tbn = torch.nn.BatchNorm2d(8)
    tbn.load_state_dict({"weight": torch.from_numpy(w), "bias": torch.from_numpy(b)}, strict=False)
    tx = torch.tensor(np.ascontiguousarray(x), requires_grad=True)
    ty = tbn(tx)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(gw.numpy(), tbn.weight.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gb.numpy(), tbn.bias.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5)


def test_batch_norm_second_order_matches_torch():
    rng = np.random.default_rng(9)
    x, w, b = rng.standard_normal((4, 3, 2, 2)), rng.standard_normal(3), rng.standard_normal(3)
    xt, wt, bt = tg.tensor(x), tg.Parameter(w), tg.Parameter(b)
    with tg.Tape() as outer:
        outer.watch(xt)
        with tg.Tape() as inner:
            inner.watch(xt)
            y = F.batch_norm(xt, None, None, wt, bt, True)
            loss = (y * y * y).sum()
        gx = inner.gradient(loss, xt)
        pen = (gx * gx).sum()
    gx2, gw2 = outer.gradient(pen, [xt, wt])
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.batch_norm(tx, None, None, tw, tb, True)
    (tgx,) = torch.autograd.grad((ty * ty * ty).sum(), tx, create_graph=True)
    (tgx * tgx).sum().backward()
    np.testing.assert_allclose(gx2.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(gw2.numpy(), tw.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (1, 2, 7), (2, 3, 2, 2, 3)])
def test_instance_norm_matches_torch_with_running_stats(shape):
    rng = np.random.default_rng(10)
    x = rng.standard_normal(shape) * 2 + 3
    c = shape[1]
    w, b = rng.standard_normal(c), rng.standard_normal(c)
    g = rng.standard_normal(shape)
    xt, wt, bt = tg.tensor(x), tg.Parameter(w), tg.Parameter(b)
    rm, rv = tg.zeros(c, dtype=tg.float64), tg.ones(c, dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.instance_norm(xt, rm, rv, wt, bt, True, 0.1, 1e-5)
        loss = (y * tg.tensor(g)).sum()
    grads = tape.gradient(loss, [xt, wt, bt])
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    trm, trv = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    ty = torch.nn.functional.instance_norm(tx, trm, trv, tw, tb, True, 0.1, 1e-5)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for ours, theirs in zip(grads, (tx, tw, tb), strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-12, atol=1e-12)


def test_batch_norm_gradients_pass_finite_differences():
    from tapegrad.testing import check_grads

    rng = np.random.default_rng(11)
    x, w, b = rng.standard_normal((3, 2, 4)), rng.standard_normal(2), rng.standard_normal(2)

    def f(x, w, b):
        return F.batch_norm(x, None, None, w, b, True) ** 3

    check_grads(f, (tg.tensor(x), tg.tensor(w), tg.tensor(b)), order=2)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_bias_gradient_kernel_equals_the_numpy_sum(dtype):
    g = np.random.default_rng(12).standard_normal((5, 6, 7, 3)).astype(dtype)
    for arr in (g, g[:, :, ::-1, ::2]):  # contiguous, then not
        ours = _conv._bias_grad_fwd(arr, arr.shape)
        _close(ours, arr.sum(axis=(0, 2, 3)), dtype)


def test_gemm_conv_of_an_empty_batch_matches_torch():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 6, 4, 4))
    x = tg.tensor(np.zeros((0, 6, 9, 9)))
    wt = tg.tensor(w)
    with tg.Tape() as tape:
        tape.watch(x, wt)
        y = F.conv2d(x, wt, stride=2, padding=1)
        loss = y.sum()
    gx, gw = tape.gradient(loss, [x, wt])
    ty = torch.nn.functional.conv2d(
        torch.zeros(0, 6, 9, 9, dtype=torch.float64), torch.from_numpy(w), stride=2, padding=1
    )
    assert y.shape == tuple(ty.shape) == (0, 8, 4, 4)
    assert gx.shape == (0, 6, 9, 9)
    np.testing.assert_array_equal(gw.numpy(), np.zeros_like(w))


POINTWISE_CASES = [  # (N, C, H, W), O, kernel, stride, ((top, bottom), (left, right)), dilation
    ((5, 16, 1, 1), 32, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # ResNet-18 on a 1x1 map
    ((5, 16, 1, 1), 24, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # its stride-2 entry
    ((3, 8, 2, 2), 16, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1)),  # its 1x1 downsample
    ((2, 8, 4, 5), 6, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1)),  # a 1x1 layer: every pixel
    ((2, 8, 5, 7), 6, (1, 1), (2, 3), ((0, 0), (0, 0)), (1, 1)),  # strided: zeros around
    ((2, 4, 1, 3), 6, (3, 1), (1, 1), ((1, 1), (0, 0)), (1, 1)),  # one axis padded
    ((2, 4, 1, 1), 6, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2)),  # dilated: the centre
    ((3, 8, 2, 2), 16, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # one window: 2x2 of 3x3
    ((2, 8, 4, 4), 6, (4, 4), (1, 1), ((0, 0), (0, 0)), (1, 1)),  # DCGAN's last: 4x4 to 1x1
    ((2, 4, 5, 1), 6, (1, 3), (1, 1), ((0, 0), (1, 1)), (1, 1)),  # a window across columns
    ((2, 4, 5, 5), 6, (3, 3), (1, 1), ((0, 0), (0, 0)), (2, 2)),  # a dilated window
    ((2, 4, 2, 4), 6, (3, 1), (2, 1), ((1, 1), (0, 0)), (1, 1)),  # window 2 rows, 4 pixels
]


@pytest.mark.parametrize(("shape", "o", "k", "s", "pad", "d"), POINTWISE_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pointwise_convolutions_equal_the_reference(monkeypatch, shape, o, k, s, pad, d, dtype):
    geom, x, w, g = _conv_case(np.random.default_rng(9), shape, o, k, s, pad, d, dtype)
    b = np.random.default_rng(10).standard_normal(o).astype(dtype)
    assert CT.taps(geom) is not None
    for got, ref in [
        (CT.pointwise_conv(x, w, b, geom, 1), _conv._conv2d_ref(x, w, b, geom, 1)),
        (CT.pointwise_conv(x, w, None, geom, 1), _conv._conv2d_ref(x, w, None, geom, 1)),
        (CT.pointwise_input_grad(g, w, geom, 1), _conv._input_grad_ref(g, w, geom, 1)),
        (CT.pointwise_weight_grad(g, x, geom, 1, w.shape),
         _conv._weight_grad_ref(g, x, geom, 1, w.shape)),
    ]:
        _close(got, ref, dtype)


def test_pointwise_needs_one_tap_or_one_window():
    def geom(hw, k, s, p, d=1):
        ho = _conv.out_size(hw, k, s, (p, p), d)
        return _conv.Geom((1, 1, hw, hw), (k, k), (s, s), ((p, p), (p, p)), (d, d), (ho, ho))

    one = slice(0, 1, 1), slice(1, 2)
    assert CT.taps(geom(1, 3, 1, 1)) == (one[0], one[0], one[1], one[1], True, True)
    whole = slice(0, 2, 1), slice(1, 3)  # 3x3 stride 2 on 2x2: taps 1-2 read the input
    assert CT.taps(geom(2, 3, 2, 1)) == (whole[0], whole[0], whole[1], whole[1], True, True)
    assert CT.taps(geom(2, 3, 1, 1)) is None  # a 2x2 map to 2x2 reads through every tap
    assert CT.taps(geom(4, 1, 1, 1)) is None  # a 1x1 kernel padded: the border reads zeros
    every = slice(0, 5, 2), slice(0, 1)
    assert CT.taps(geom(5, 1, 2, 0)) == (every[0], every[0], every[1], every[1], False, False)
    x = np.zeros((1, 1, 1, 1), np.float32)
    assert CT.pointwise_fits(geom(1, 3, 1, 1), 1, (1, 1, 3, 3), (x,), "conv")
    assert not CT.pointwise_fits(geom(1, 3, 1, 1), 2, (1, 1, 3, 3), (x,), "conv")  # groups
    assert CT.pointwise_prefer(geom(1, 3, 2, 1), 1, (1, 1, 3, 3), (x,), "conv")  # one pixel
    assert not CT.pointwise_prefer(geom(5, 1, 2, 0), 1, (1, 1, 1, 1), (x,), "conv")


def _out_pixels(shape, k, s, pad, d):
    return math.prod(_conv.out_size(n, *a) for n, *a in zip(shape[2:], k, s, pad, d, strict=True))


PIXELS_CASES = [c for c in POINTWISE_CASES if _out_pixels(c[0], *c[2:]) <= 16] + [
    # small maps whose pixels read through several taps
    ((3, 16, 2, 2), 24, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # ResNet's 2x2: one window
    ((3, 8, 4, 4), 16, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # 4x4 to 2x2: four windows
    ((2, 8, 8, 8), 6, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1)),  # DCGAN's 8x8 to 4x4
    ((2, 4, 3, 3), 5, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2)),  # dilated: a padded corner
    ((2, 4, 1, 5), 5, (3, 3), (1, 2), ((1, 1), (0, 2)), (1, 1)),  # uneven padding
    ((2, 4, 2, 3), 5, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1)),  # kernel wider than the map
    ((0, 4, 2, 2), 5, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # an empty batch
]


@pytest.mark.parametrize(("shape", "o", "k", "s", "pad", "d"), PIXELS_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_window_convolutions_equal_the_reference(shape, o, k, s, pad, d, dtype):
    from tapegrad._kernels import conv_pixels

    geom, x, w, g = _conv_case(np.random.default_rng(11), shape, o, k, s, pad, d, dtype)
    b = np.random.default_rng(12).standard_normal(o).astype(dtype)
    assert conv_pixels.fits(geom, 1) and not conv_pixels.fits(geom, 2)
    for got, ref in [
        (conv_pixels.conv(x, w, b, geom), _conv._conv2d_ref(x, w, b, geom, 1)),
        (conv_pixels.conv(x, w, None, geom), _conv._conv2d_ref(x, w, None, geom, 1)),
        (conv_pixels.input_grad(g, w, geom), _conv._input_grad_ref(g, w, geom, 1)),
        (conv_pixels.weight_grad(g, x, geom, w.shape),
         _conv._weight_grad_ref(g, x, geom, 1, w.shape)),
    ]:
        assert got.shape == ref.shape and got.dtype == ref.dtype and got.flags.c_contiguous
        if ref.size:  # an empty batch: empty outputs, a zero weight gradient
            _close(got, ref, dtype)


def test_per_window_groups_pixels_reading_the_same_window():
    from tapegrad._kernels import conv_pixels

    def geom(hw, k, s, p):
        ho = _conv.out_size(hw, k, s, (p, p), 1)
        return _conv.Geom((1, 1, hw, hw), (k, k), (s, s), ((p, p), (p, p)), (1, 1), (ho, ho))

    # 3x3 padded by 1 on 2x2: one window (the whole input), each pixel through its four taps
    assert conv_pixels.plan(geom(2, 3, 1, 1)) == [
        ((0, 2, 0, 2), [(0, 1, 1), (1, 1, 0), (2, 0, 1), (3, 0, 0)])]
    # 4x4 to 2x2 at stride 2: four windows of 2 or 3 rows and columns
    assert [w for w, _ in conv_pixels.plan(geom(4, 3, 2, 1))] == [
        (0, 2, 0, 2), (0, 2, 1, 3), (1, 3, 0, 2), (1, 3, 1, 3)]
    assert not conv_pixels.fits(geom(5, 1, 1, 0), 1)  # 25 pixels: past PIXELS_MAX
    assert CT.pixels_prefer(geom(2, 3, 1, 1), 1, (256, 256, 3, 3), (), "conv")
    assert not CT.pixels_prefer(geom(2, 3, 1, 1), 1, (64, 64, 3, 3), (), "conv")  # narrow
    assert not CT.pixels_prefer(geom(1, 3, 1, 1), 1, (256, 256, 3, 3), (), "conv")  # pointwise's


@numba_only
def test_a_1x1_map_takes_the_pointwise_gemm():
    from tapegrad._kernels import registry  # noqa: PLC0415

    x, w = np.ones((4, 64, 1, 1), np.float32), np.ones((64, 64, 3, 3), np.float32)
    geom = _conv.Geom((4, 64, 1, 1), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1))
    chosen = [i.name for i in registry.implementations("conv2d")
              if i.fits(x, w, None, geom, 1) and i.prefer(x, w, None, geom, 1)]
    assert chosen[0] == "pointwise"  # before the fused Winograd kernels
    np.testing.assert_array_equal(_conv._conv2d_fwd(x, w, None, geom, 1), np.full(
        (4, 64, 1, 1), 64, np.float32))
