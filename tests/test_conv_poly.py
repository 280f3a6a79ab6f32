"""The polyphase Winograd kernels (``_kernels/conv_poly.py``) for 4x4 stride-2 convolutions:
forward, input gradient and weight gradient against the numpy reference (float64 to 1e-12,
float32 to 1e-5 relative), serial and parallel, over paddings, odd output sizes and chunked
batches; the same bits at every thread count and on a rerun; and the dispatcher's table."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad import _kernels
from tapegrad._kernels import conv_table as CT
from tapegrad.ops import _conv as CV

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


def _case(rng, n, c, h, w, o, pad, dtype):
    (pt, pb), (pl, pr) = pad
    ho, wo = (h + pt + pb - 4) // 2 + 1, (w + pl + pr - 4) // 2 + 1
    geom = CV.Geom((n, c, h, w), (4, 4), (2, 2), pad, (1, 1), (ho, wo))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, 4, 4)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    g = rng.standard_normal((n, o, ho, wo)).astype(dtype)
    return geom, x, wt, b, g


def _close(a, ref, dtype):
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert a.dtype == ref.dtype and a.shape == ref.shape
    np.testing.assert_allclose(a, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


CASES = [  # (N, C, H, W), O, ((top, bottom), (left, right))
    ((2, 3, 8, 8), 5, ((1, 1), (1, 1))),  # DCGAN's: 8x8 to 4x4
    ((3, 4, 9, 7), 6, ((1, 1), (1, 1))),  # odd outputs: the last tiles half outside
    ((2, 2, 10, 11), 3, ((0, 0), (0, 0))),  # no padding, odd columns
    ((1, 3, 7, 7), 2, ((2, 2), (2, 2))),  # padding past a tile's first rows
    ((2, 5, 6, 9), 4, ((1, 0), (0, 1))),  # asymmetric
    ((4, 16, 16, 16), 32, ((1, 1), (1, 1))),  # large enough for the parallel passes
]


@numba_only
@pytest.mark.parametrize(("shape", "o", "pad"), CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_poly_passes_equal_the_numpy_reference(monkeypatch, shape, o, pad, dtype, parallel):
    from tapegrad._kernels import conv_gemm, conv_poly  # noqa: PLC0415

    monkeypatch.setattr(conv_gemm, "PASS_MIN", 0 if parallel else 1 << 62)
    geom, x, w, b, g = _case(np.random.default_rng(5), *shape, o, pad, dtype)
    assert CT.poly_fits(geom, 1, w.shape, (x, w, b), "conv")
    _close(conv_poly.conv(x, w, b, geom), CV._conv2d_ref(x, w, b, geom, 1), dtype)
    _close(conv_poly.conv(x, w, None, geom), CV._conv2d_ref(x, w, None, geom, 1), dtype)
    _close(conv_poly.input_grad(g, w, geom), CV._input_grad_ref(g, w, geom, 1), dtype)
    _close(conv_poly.weight_grad(g, x, geom, w.shape),
           CV._weight_grad_ref(g, x, geom, 1, w.shape), dtype)


@numba_only
def test_poly_chunks_of_the_batch_give_the_whole_batch_result(monkeypatch):
    """A batch cut into chunks (V over its budget): the forward and input gradient equal the
    one-chunk result bit for bit, the weight gradient (the chunks' sums added) to rounding."""
    from tapegrad._kernels import conv_poly  # noqa: PLC0415

    geom, x, w, _, g = _case(np.random.default_rng(6), 5, 8, 8, 8, 16, ((1, 1), (1, 1)),
                             np.float32)
    whole = (conv_poly.conv(x, w, None, geom), conv_poly.input_grad(g, w, geom),
             conv_poly.weight_grad(g, x, geom, w.shape))
    monkeypatch.setattr(conv_poly, "V_BUDGET", 9 * 4 * 4 * 8 * 2)  # two samples a chunk
    assert conv_poly.batches(geom, 8) == [(0, 1), (1, 3), (3, 5)]
    np.testing.assert_array_equal(conv_poly.conv(x, w, None, geom), whole[0])
    np.testing.assert_array_equal(conv_poly.input_grad(g, w, geom), whole[1])
    dw = conv_poly.weight_grad(g, x, geom, w.shape)
    np.testing.assert_allclose(dw, whole[2], rtol=1e-5, atol=1e-5 * np.abs(whole[2]).max())


@numba_only
def test_poly_passes_give_the_same_bits_at_every_thread_count_and_on_a_rerun(monkeypatch):
    import numba  # noqa: PLC0415

    from tapegrad._kernels import conv_gemm, conv_poly, threads  # noqa: PLC0415

    if not threads.active() or numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip(f"kernels serial here: {threads.describe()}")
    monkeypatch.setattr(conv_gemm, "PASS_MIN", 0)
    geom, x, w, b, g = _case(np.random.default_rng(7), 5, 16, 12, 12, 32, ((1, 1), (1, 1)),
                             np.float32)

    def run():
        return (conv_poly.conv(x, w, b, geom), conv_poly.input_grad(g, w, geom),
                conv_poly.weight_grad(g, x, geom, w.shape))

    old = numba.get_num_threads()
    outs = {}
    try:
        for t in sorted({1, 2, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(t)
            outs[t] = run()
        again = run()
    finally:
        numba.set_num_threads(old)
    one = outs[1]
    for t, res in [*outs.items(), ("rerun", again)]:
        for name, a, ref in zip(("forward", "input gradient", "weight gradient"), res, one,
                                strict=True):
            np.testing.assert_array_equal(a, ref, err_msg=f"{name} at {t} threads")


def test_poly_fits_only_4x4_stride_2_single_group_layers_of_2x2_outputs_and_more():
    def fits(shape, k, s, groups, d=(1, 1)):
        n, c, h, w = shape
        ho, wo = (CV.out_size(v, k, s, (1, 1), d[0]) for v in (h, w))
        geom = CV.Geom(shape, (k, k), (s, s), ((1, 1), (1, 1)), d, (ho, wo))
        x = np.zeros(shape, np.float32)
        wt = np.zeros((8, c // groups, k, k), np.float32)
        return CT.poly_fits(geom, groups, wt.shape, (x, wt), "conv")

    if _kernels.numba() is None:  # usable() is False: nothing fits
        assert not fits((2, 4, 8, 8), 4, 2, 1)
        return
    assert fits((2, 4, 8, 8), 4, 2, 1)
    assert not fits((2, 4, 8, 8), 4, 2, 2)  # groups
    assert not fits((2, 4, 8, 8), 3, 2, 1)  # kernel
    assert not fits((2, 4, 8, 8), 4, 1, 1)  # stride
    assert not fits((2, 4, 2, 2), 4, 2, 1)  # a 1x1 output: the weight transform outweighs it
