"""Compiled kernels of the transformer's ops against their numpy references and PyTorch.

The fused attention (``nn.attention``), softmax and log-softmax along the last axis, layer norm
and ReLU's gradient each have a numba kernel beside the numpy code they replace (the reference,
selected by ``TAPEGRAD_KERNELS=numpy`` or here by turning ``usable`` off). Kernels agree with the
reference to float32 rounding (float64: to 1e-12), forward and backward, on masked,
non-contiguous, batch-1 and odd-length inputs; the public functions agree with PyTorch in
float32 and float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels, nn
from tapegrad._autodiff import ARRAYS
from tapegrad._kernels import table
from tapegrad.ops import _attention as A
from tapegrad.ops import _elementwise as E
from tapegrad.ops import _norm as N
from tapegrad.ops import _softmax as SM

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")

TOL = {np.float32: (2e-5, 2e-6), np.float64: (1e-12, 1e-13)}  # rtol, atol


def _reference(monkeypatch, fn, *args, **kw):
    """``fn(*args, **kw)`` with the numpy code (the kernels' reference)."""
    with monkeypatch.context() as m:
        m.setattr(_kernels, "usable", lambda *a: False)
        return fn(*args, **kw)


def _close(a, b, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    assert a.dtype == b.dtype == dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * scale)


def _noncontig(rng, shape, dtype):
    """A (B, H, L, D) view of a (B, L, H, D) array, as the transformer passes them."""
    b, h, n, d = shape
    return rng.standard_normal((b, n, h, d)).astype(dtype).transpose(0, 2, 1, 3)


# --------------------------------------------------------------------------------------------
# the float32 exp and the row reductions
# --------------------------------------------------------------------------------------------


@numba_only
def test_float32_exp_is_within_two_ulp_and_keeps_nan_and_limits():
    from tapegrad._kernels import softmax as KS

    x = np.concatenate(
        [np.linspace(-87.0, 0.0, 200001), np.linspace(0, 80, 1001), [-np.inf, -100.0, np.nan]]
    ).astype(np.float32)
    s = x.copy()
    KS.exp_row(s, np.float32(0.0))
    exact = np.exp(x[:-3].astype(np.float64))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(s[:-3] - exact) / ulp) <= 2.0
    assert s[-3] == 0.0 and s[-2] == 0.0 and np.isnan(s[-1])


@numba_only
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 130])
def test_row_max_and_sum(n):
    from tapegrad._kernels import softmax as KS

    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert KS.row_max(a) == (a.max() if n else -np.inf)
    np.testing.assert_allclose(KS.row_sum(a), a.sum(dtype=np.float64), rtol=1e-5, atol=1e-6)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 16, 65])
def test_flat_max_orders_floats_as_integers(dtype, n):
    from tapegrad._kernels import softmax as KS

    rng = np.random.default_rng(n)
    a = np.concatenate([[7.0], rng.standard_normal(n) * 1e3, [5.0]]).astype(dtype)
    ai = KS.as_int(a)
    assert KS.flat_max(ai, np.uint64(1), n) == a[1 : 1 + n].max()  # an offset run
    neg = -np.abs(a)  # all negative: the flipped magnitude bits order them
    assert KS.flat_max(KS.as_int(neg), np.uint64(0), a.size) == neg.max()
    special = np.array([-np.inf, -0.0, -1e-30, -np.inf], dtype)
    assert KS.flat_max(KS.as_int(special), np.uint64(0), 4) == dtype(-0.0)
    assert KS.flat_max(KS.as_int(special), np.uint64(3), 1) == -np.inf
    special[1] = np.nan
    assert np.isnan(KS.flat_max(KS.as_int(special), np.uint64(0), 4))


# --------------------------------------------------------------------------------------------
# nn.attention: kernel against the numpy reference
# --------------------------------------------------------------------------------------------


def _mask(rng, kind, b, h, n_l, n_s, dtype):
    if kind is None:
        return None
    if kind == "padding":  # (B, 1, 1, S), batch 0 fully masked
        m = np.where(rng.random((b, 1, 1, n_s)) < 0.3, -np.inf, 0.0)
        m[0] = -np.inf
    elif kind == "causal":  # (1, 1, L, S)
        m = np.triu(np.full((n_l, n_s), -np.inf), 1)[None, None]
    elif kind == "float":  # (B, H, L, S), finite
        m = rng.standard_normal((b, h, n_l, n_s))
    else:  # one column per row: (B, H, L, 1)
        m = rng.standard_normal((b, h, n_l, 1))
    return m.astype(dtype)


ATTN_SHAPES = [(2, 3, 5, 7, 4, 6), (1, 1, 1, 1, 3, 3), (3, 2, 10, 10, 16, 16), (2, 4, 9, 17, 8, 5)]


@numba_only
@pytest.mark.parametrize("shape", ATTN_SHAPES)
@pytest.mark.parametrize("mask", [None, "padding", "causal", "float", "column"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_kernels_equal_the_numpy_reference(monkeypatch, shape, mask, dtype):
    b, h, n_l, n_s, d, dv = shape
    rng = np.random.default_rng(sum(shape))
    q = _noncontig(rng, (b, h, n_l, d), dtype)
    k = _noncontig(rng, (b, h, n_s, d), dtype)
    v = rng.standard_normal((b, h, n_s, dv)).astype(dtype)
    m = _mask(rng, mask, b, h, n_l, n_s, dtype)
    out = A._attn_fwd(q, k, v, m, 0.37)
    ref = _reference(monkeypatch, A._attn_fwd, q, k, v, m, 0.37)
    _close(out, ref, dtype)
    assert out.transpose(0, 2, 1, 3).flags.c_contiguous  # stored (B, L, H, Dv)
    g = rng.standard_normal(out.shape).astype(dtype)
    needs = (True, True, True, m is not None)
    got = A._attn_grads_arrays(g, out, q, k, v, m, 0.37, needs)
    want = _reference(monkeypatch, A._attn_grads_arrays, g, ref, q, k, v, m, 0.37, needs)
    for a, r in zip(got, want, strict=True):
        if r is None:
            assert a is None
        else:
            _close(a, r, dtype, scale=10.0)
    if mask == "padding":  # a fully masked row: zero output and no gradient
        assert not out[0].any() and not got[0][0].any()


def _shared_pool():
    from tapegrad._kernels import threads

    if not threads.active():
        pytest.skip(f"kernels serial here: {threads.describe()}")


def _bmm_operand(rng, lead, rows, cols, dtype, how):
    """A (*lead, rows, cols) operand: contiguous, transposed (column-major), or a strided view."""
    if how == "t":
        return np.swapaxes(rng.standard_normal((*lead, cols, rows)).astype(dtype), -1, -2)
    if how == "view":  # rows of a wider array, the leading axes swapped
        a = rng.standard_normal((*lead[::-1], rows, cols + 3)).astype(dtype)[..., 1:cols + 1]
        return np.moveaxis(a, tuple(range(len(lead))), tuple(range(len(lead)))[::-1])
    return rng.standard_normal((*lead, rows, cols)).astype(dtype)


@numba_only
@pytest.mark.parametrize("lead", [(5,), (3, 4), (1, 1)])
@pytest.mark.parametrize("mnk", [(64, 64, 32), (10, 10, 16), (2, 3, 1), (5, 2, 7)])
@pytest.mark.parametrize("how", [("c", "c"), ("c", "t"), ("t", "c"), ("view", "t")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bmm_on_the_kernels_threads_equals_numpy_matmul_bit_for_bit(lead, mnk, how, dtype):
    from tapegrad._kernels import bmm

    _shared_pool()
    m, n, k = mnk
    rng = np.random.default_rng(m * n * k)
    a = _bmm_operand(rng, lead, m, k, dtype, how[0])
    b = _bmm_operand(rng, lead, k, n, dtype, how[1])
    out = np.full((*lead, n, m), np.nan, dtype).swapaxes(-1, -2)  # not row-major: refused
    assert not bmm.bmm(a, b, out) and np.isnan(out).all()
    out = A._blhd(np, (*lead, m, n), dtype) if len(lead) == 2 else np.empty((*lead, m, n), dtype)
    assert bmm.bmm(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))  # the same ?gemm calls, other threads


@numba_only
def test_bmm_leaves_to_numpy_what_it_does_not_cover():
    from tapegrad._kernels import bmm

    _shared_pool()
    f32 = np.ones((2, 3, 4), np.float32)
    cases = [
        (np.ones((2, 64, 65), np.float32), np.ones((2, 65, 64), np.float32),
         np.empty((2, 64, 64), np.float32)),  # too large: OpenBLAS would split it
        (f32, np.ones((2, 4, 5), np.float64), np.empty((2, 3, 5), np.float32)),  # two dtypes
        (f32, np.ones((1, 4, 5), np.float32), np.empty((2, 3, 5), np.float32)),  # broadcasting
        (np.ones((2, 3, 8), np.float32)[..., ::2], np.ones((2, 4, 5), np.float32),
         np.empty((2, 3, 5), np.float32)),  # no unit stride
        (np.ones((2, 2, 2, 3, 4), np.float32), np.ones((2, 2, 2, 4, 5), np.float32),
         np.empty((2, 2, 2, 3, 5), np.float32)),  # three leading axes
        (np.ones((2, 3, 0), np.float32), np.ones((2, 0, 5), np.float32),
         np.empty((2, 3, 5), np.float32)),  # nothing to sum
        (f32, np.ones((2, 4, 1), np.float32), np.empty((2, 3, 1), np.float32)),  # numpy's gemv
        (f32[:, :1], np.ones((2, 4, 5), np.float32), np.empty((2, 1, 5), np.float32)),
        (f32.astype(np.int64), np.ones((2, 4, 5), np.int64), np.empty((2, 3, 5), np.int64)),
    ]
    for a, b, out in cases:
        out[...] = 7
        assert not bmm.bmm(a, b, out) and (out == 7).all()


@numba_only
@pytest.mark.parametrize("shape", ATTN_SHAPES)
@pytest.mark.parametrize("mask", [None, "padding", "float"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_on_two_threads_equals_one_thread_bit_for_bit(monkeypatch, shape, mask, dtype):
    from tapegrad._kernels import attention, bmm

    _shared_pool()
    b, h, n_l, n_s, d, dv = shape
    rng = np.random.default_rng(sum(shape) + 1)
    q = _noncontig(rng, (b, h, n_l, d), dtype)
    k = _noncontig(rng, (b, h, n_s, d), dtype)
    v = rng.standard_normal((b, h, n_s, dv)).astype(dtype)
    m = _mask(rng, mask, b, h, n_l, n_s, dtype)
    g = rng.standard_normal((b, h, n_l, dv)).astype(dtype)
    needs = (True, True, True, m is not None)
    runs = []
    for twins in (False, True):  # numpy's products and serial rows; then all on two threads
        monkeypatch.setattr(attention, "PARALLEL_MIN", 0 if twins else 1 << 62)
        monkeypatch.setattr(bmm, "MAX_WORK", 65536 * 4 if twins else 0)
        out = A._attn_fwd(q, k, v, m, 0.37)
        runs.append((out, *A._attn_grads_arrays(g, out, q, k, v, m, 0.37, needs)))
    for x, y in zip(*runs, strict=True):
        if y is None:
            assert x is None
        else:
            np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------------------------
# nn.attention_qkv's small-head kernels (one pass per block) against the numpy reference
# --------------------------------------------------------------------------------------------

# (b, h, L, D): one query; 24 keys (three lane blocks: a product's last 16 columns overlap);
# 40 wide (the same for the weighted sums); widths of 8 (the products' 8-column tiles)
HEAD_SHAPES = [(3, 2, 10, 16), (1, 1, 1, 8), (2, 4, 24, 8), (2, 3, 7, 64), (5, 4, 9, 16),
               (2, 3, 17, 40)]


@numba_only
@pytest.mark.parametrize("shape", HEAD_SHAPES)
@pytest.mark.parametrize("mask", [None, "padding", "causal", "float", "column"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_head_kernels_equal_the_numpy_reference(monkeypatch, shape, mask, dtype):

    b, h, n_l, d = shape
    rng = np.random.default_rng(sum(shape) + 7)
    qkv = rng.standard_normal((b, n_l, 3, h, d)).astype(dtype)
    m = _mask(rng, mask, b, h, n_l, n_l, dtype)
    assert table.heads_fits(qkv, m)  # the shapes the kernels take
    out = A._attn_qkv_fwd(qkv, m, 0.37)
    ref = _reference(monkeypatch, A._attn_qkv_fwd, qkv, m, 0.37)
    _close(out, ref, dtype)
    assert out.transpose(0, 2, 1, 3).flags.c_contiguous  # stored (B, L, H, D)
    g = _noncontig(rng, out.shape, dtype)
    needs = (True, m is not None)
    got = A._attn_qkv_grads(ARRAYS, g, out, qkv, m, 0.37, needs)
    want = _reference(monkeypatch, A._attn_qkv_grads, ARRAYS, g, ref, qkv, m, 0.37, needs)
    for a, r in zip(got, want, strict=True):
        if r is None:
            assert a is None
        else:
            _close(a, r, dtype, scale=10.0)
    if mask == "padding":  # batch 0 fully masked: zero output and no gradient
        assert not out[0].any() and not got[0][0].any()


@numba_only
def test_packed_attention_mask_gradient_alone_equals_the_reference(monkeypatch):
    """Only the mask's gradient asked for (the packed input's is not): no packed gradient
    comes back, and the mask's equals the reference's."""
    rng = np.random.default_rng(11)
    qkv = rng.standard_normal((3, 10, 3, 2, 16)).astype(np.float32)
    m = _mask(rng, "float", 3, 2, 10, 10, np.float32)
    out = A._attn_qkv_fwd(qkv, m, 0.37)
    g = rng.standard_normal(out.shape).astype(np.float32)
    got = A._attn_qkv_grads(ARRAYS, g, out, qkv, m, 0.37, (False, True))
    want = _reference(monkeypatch, A._attn_qkv_grads, ARRAYS, g, out, qkv, m, 0.37, (True, True))
    assert got[0] is None
    _close(got[1], want[1], np.float32, scale=10.0)


@numba_only
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_head_kernels_on_two_threads_equal_one_thread_bit_for_bit(monkeypatch, mask, dtype):
    from tapegrad._kernels import attention_heads

    _shared_pool()
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((9, 10, 3, 4, 16)).astype(dtype)
    m = _mask(rng, mask, 9, 4, 10, 10, dtype)
    g = rng.standard_normal((9, 4, 10, 16)).astype(dtype)
    runs = []
    for two in (False, True):  # each block is one thread's either way: the same bits
        monkeypatch.setattr(attention_heads, "PARALLEL_MIN", 0 if two else 1 << 62)
        assert attention_heads._parallel(qkv) == two
        out = A._attn_qkv_fwd(qkv, m, 0.25)
        runs.append((out, *A._attn_qkv_grads(ARRAYS, g, out, qkv, m, 0.25, (True, True))))
    for x, y in zip(*runs, strict=True):
        np.testing.assert_array_equal(x, y)


@numba_only
def test_small_head_kernels_leave_other_shapes_to_the_batched_path():
    f32 = np.float32
    assert not table.heads_fits(np.ones((2, 25, 3, 2, 16), f32), None)  # sequence too long
    assert not table.heads_fits(np.ones((2, 10, 3, 2, 12), f32), None)  # width not 8k
    assert not table.heads_fits(np.ones((2, 10, 3, 2, 72), f32), None)  # too wide
    x = np.ones((2, 3, 10, 2, 16), f32).transpose(0, 2, 1, 3, 4)
    assert not table.heads_fits(x, None)  # not C-contiguous
    assert not table.heads_fits(np.ones((2, 10, 3, 2, 16), f32), np.ones((2, 1, 1, 10)))


# --------------------------------------------------------------------------------------------
# softmax, log_softmax, layer norm, relu: kernel against the numpy reference
# --------------------------------------------------------------------------------------------

ROWS = [(1, 1), (3, 7), (4, 64), (2, 3, 130), (5, 9)]


def _rows(rng, shape, dtype, special):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if special:
        x[0] = -np.inf  # a fully masked row
        if x.shape[-1] > 2:
            x[-1, ..., 1] = np.inf
            x[-1, ..., 0] = np.nan if x.ndim == 2 else x[-1, ..., 0]
    return x


@numba_only
@pytest.mark.parametrize("shape", ROWS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_kernels_equal_the_numpy_reference(monkeypatch, shape, dtype, log):
    rng = np.random.default_rng(len(shape) + shape[-1])
    fwd = SM._log_softmax_fwd if log else SM._softmax_fwd
    vjp = SM._log_softmax_vjp if log else SM._softmax_vjp
    for x in (_rows(rng, shape, dtype, False) + 1e4, _rows(rng, shape, dtype, True)):
        with np.errstate(invalid="ignore", divide="ignore"):
            y = fwd(x, -1)
            ref = _reference(monkeypatch, fwd, x, -1)
            np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
            ok = np.isfinite(ref)
            _close(np.where(ok, y, 0), np.where(ok, ref, 0), dtype)
            g = rng.standard_normal(shape).astype(dtype)
            yy = np.where(ok, ref, -np.inf if log else 0).astype(dtype)
            rows_ok = ok.all(axis=-1, keepdims=True)
            dx = np.where(rows_ok, vjp(ARRAYS, g, yy, None, -1), 0)
            dref = np.where(rows_ok, _reference(monkeypatch, vjp, ARRAYS, g, yy, None, -1), 0)
        _close(dx, dref, dtype, scale=10.0)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_kernel_reads_non_contiguous_rows(monkeypatch, dtype):
    x = np.random.default_rng(3).standard_normal((6, 5, 4)).astype(dtype).transpose(2, 0, 1)
    _close(SM._softmax_fwd(x, -1), _reference(monkeypatch, SM._softmax_fwd, x, -1), dtype)
    # another axis than the last takes the numpy code
    _close(SM._softmax_fwd(x, 1), _reference(monkeypatch, SM._softmax_fwd, x, 1), dtype)


LN_CASES = [((4, 16), (1,)), ((2, 3, 128), (2,)), ((1, 1, 5), (2,)), ((3, 4, 6), (1, 2))]


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_kernels_keep_nan_and_inf_rows_to_their_rows(monkeypatch, dtype):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 3, 40)).astype(dtype)
    x[1, 2, 7] = np.nan
    x[3, 0, 0] = np.inf
    x[4, 1] = 2.5  # a constant row: var 0, only eps
    w, b = rng.standard_normal(40).astype(dtype), rng.standard_normal(40).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    with np.errstate(invalid="ignore"):
        y = N._ln_fwd(x, w, b, (2,), 1e-5)
        ref = _reference(monkeypatch, N._ln_fwd, x, w, b, (2,), 1e-5)
        gx = N._ln_grads(ARRAYS, g, y, x, w, b, (2,), 1e-5, (True, False, False))[0]
        gref = _reference(
            monkeypatch, N._ln_grads, ARRAYS, g, y, x, w, b, (2,), 1e-5, (True, False, False)
        )[0]
    for a, r in ((y, ref), (gx, gref)):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(r))
        assert np.isnan(a[1, 2]).all() and np.isnan(a[3, 0]).all()
        ok = ~np.isnan(r)
        _close(np.where(ok, a, 0), np.where(ok, r, 0), dtype, scale=10.0)


@numba_only
@pytest.mark.parametrize("shape,axes", LN_CASES)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_kernels_equal_the_numpy_reference(monkeypatch, shape, axes, affine, dtype):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 4 + 3).astype(dtype)
    x = np.asfortranarray(x) if affine == "weight" else x  # a non-contiguous input too
    ns = tuple(shape[a] for a in axes)
    w = rng.standard_normal(ns).astype(dtype) if affine != "none" else None
    b = rng.standard_normal(ns).astype(dtype) if affine == "both" else None
    y = N._ln_fwd(x, w, b, axes, 1e-5)
    _close(y, _reference(monkeypatch, N._ln_fwd, x, w, b, axes, 1e-5), dtype)
    g = rng.standard_normal(shape).astype(dtype)
    for needs in ((True, w is not None, b is not None), (False, w is not None, False)):
        got = N._ln_grads(ARRAYS, g, y, x, w, b, axes=axes, eps=1e-5, needs=needs)
        want = _reference(
            monkeypatch, N._ln_grads, ARRAYS, g, y, x, w, b, axes=axes, eps=1e-5, needs=needs
        )
        for a, r in zip(got, want, strict=True):
            if r is None:
                assert a is None
            else:
                _close(a, r, dtype, scale=10.0)


@numba_only
@pytest.mark.parametrize("rows", [64, 100, 1024])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_on_two_threads_equals_one_thread(monkeypatch, rows, dtype):
    from tapegrad._kernels import layernorm

    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, 96)) * 4 + 3).astype(dtype)
    w, b = rng.standard_normal(96).astype(dtype), rng.standard_normal(96).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    runs = []
    for threads in (False, True):  # one thread; then the rows' halves on two (pool shared)
        y = layernorm.layer_norm(x, w, b, 96, 1e-5, threads)
        runs.append((y, *layernorm.layer_norm_grad(g, x, w, 96, 1e-5, (True, True, True),
                                                   threads)))
    for a, r in zip(runs[0][:1], [N._ln(x, w, b, 96, 1e-5)], strict=True):  # the reference
        _close(a, r, dtype)
    for a, r in zip(runs[0][:2], runs[1][:2], strict=True):  # output, input gradient: same bits
        np.testing.assert_array_equal(a, r)
    for a, r in zip(runs[0][2:], runs[1][2:], strict=True):  # the halves' float64 sums added
        _close(a, r, dtype)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_relu_grad_kernel_equals_the_reference_without_a_mask(monkeypatch, dtype, parallel):
    from tapegrad._kernels import elementwise

    monkeypatch.setattr(elementwise, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    rng = np.random.default_rng(5)
    y = np.maximum(rng.standard_normal((64, 130)), 0).astype(dtype)
    g = rng.standard_normal(y.shape).astype(dtype)
    g[0, :3] = g[-1, -3:] = [np.nan, np.inf, -np.inf]
    y[0, :3] = y[-1, -3:] = 0.0
    dx = E._relu_vjp(ARRAYS, g, y, None)
    with np.errstate(invalid="ignore"):  # inf * 0 in the reference
        ref = _reference(monkeypatch, E._relu_vjp, ARRAYS, g, y, None)
    assert dx.dtype == dtype
    np.testing.assert_array_equal(dx, ref)


# --------------------------------------------------------------------------------------------
# the public functions against PyTorch, float32 and float64
# --------------------------------------------------------------------------------------------


def _grads_of(fn, arrays, g):
    ts = [tg.tensor(a) for a in arrays]
    with tg.Tape() as tape:
        tape.watch(*ts)
        y = fn(*ts)
    return y.numpy(), [a.numpy() for a in tape.gradient(y, ts, output_gradients=tg.tensor(g))]


def _torch_grads_of(fn, arrays, g):
    ts = [torch.tensor(np.ascontiguousarray(a), requires_grad=True) for a in arrays]
    y = fn(*ts)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _against_torch(fn, tfn, arrays, dtype, seed=0):
    ty = tfn(*[torch.tensor(np.ascontiguousarray(a)) for a in arrays]).numpy()
    g = np.random.default_rng(seed).standard_normal(ty.shape).astype(dtype)
    y, gs = _grads_of(fn, arrays, g)
    ty, tgs = _torch_grads_of(tfn, arrays, g)
    tol = {np.float32: (2e-5, 2e-5), np.float64: (1e-10, 1e-10)}[dtype]
    np.testing.assert_allclose(y, ty, rtol=tol[0], atol=tol[1])
    for a, b in zip(gs, tgs, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol[0], atol=tol[1])


SDPA_MASKS = [None, "bool", "float", "causal"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask", SDPA_MASKS)
@pytest.mark.parametrize("shape", [(1, 1, 3, 4, 5), (2, 3, 6, 6, 8)])
def test_sdpa_matches_torch(dtype, mask, shape):
    b, h, n_l, n_s, d = shape
    rng = np.random.default_rng(11)
    q = _noncontig(rng, (b, h, n_l, d), dtype)
    k, v = _noncontig(rng, (b, h, n_s, d), dtype), _noncontig(rng, (b, h, n_s, d), dtype)
    kw_tg: dict = {}
    kw_t: dict = {}
    if mask == "bool":
        m = rng.random((n_l, n_s)) > 0.3
        m[:, 0] = True  # PyTorch's backward is NaN on a fully masked row
        kw_tg["attn_mask"], kw_t["attn_mask"] = tg.tensor(m), torch.tensor(m)
    elif mask == "float":
        m = rng.standard_normal((b, 1, n_l, n_s)).astype(dtype)
        kw_tg["attn_mask"], kw_t["attn_mask"] = tg.tensor(m), torch.tensor(m)
    elif mask == "causal":
        kw_tg["is_causal"] = kw_t["is_causal"] = True
    _against_torch(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw_tg),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw_t),
        [q, k, v],
        dtype,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_three_dimensional_and_float_mask_gradient_match_torch(dtype):
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((2, 5, 4)).astype(dtype) for _ in range(3))
    m = rng.standard_normal((5, 5)).astype(dtype)
    _against_torch(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda q, k, v, m: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [q, k, v, m],
        dtype,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("width", [16, 32])
def test_encoder_layer_with_padding_matches_torch(dtype, batch, width):
    """The transformer layer (fused attention, layer norm, ReLU) against PyTorch's, float32
    and float64, with a key padding mask and a causal mask; heads of 4 (the batched attention
    path) and of 8 (the small-head kernels)."""
    torch_dtype = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
    tg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 4, dim_feedforward=24, dropout=0.0,
                                       batch_first=True)
    layer = layer.to(dtype=dtype)
    tl = torch.nn.TransformerEncoderLayer(width, 4, 24, dropout=0.0, batch_first=True)
    tl = tl.to(torch_dtype)
    tl.load_state_dict({k: torch.tensor(v.numpy()) for k, v in layer.state_dict().items()})
    layer.load_state_dict({k: v.detach().numpy().astype(dtype) for k, v in tl.state_dict().items()})
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 7, width)).astype(dtype)
    pad = np.zeros((batch, 7), bool)
    pad[-1, 5:] = True
    causal = np.triu(np.ones((7, 7), bool), 1)
    g = rng.standard_normal(x.shape).astype(dtype)
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = layer(xt, src_mask=tg.tensor(causal), src_key_padding_mask=tg.tensor(pad))
    grads = tape.gradient(y, [xt, *layer.parameters()], output_gradients=tg.tensor(g))
    tx = torch.tensor(x, requires_grad=True)
    ty = tl(tx, src_mask=torch.tensor(causal), src_key_padding_mask=torch.tensor(pad))
    ty.backward(torch.tensor(g))
    tol = {np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-11)}[dtype]
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=tol[0], atol=tol[1])
    want = [tx.grad] + [p.grad for p in tl.parameters()]
    names = ["x"] + [n for n, _ in tl.named_parameters()]
    assert len(grads) == len(want)
    for name, a, b in zip(names, grads, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol[0], atol=tol[1], err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 8), (3, 5, 64)])
def test_softmax_log_softmax_layer_norm_match_torch(dtype, shape):
    rng = np.random.default_rng(13)
    x = rng.standard_normal(shape[::-1]).astype(dtype).T  # not contiguous
    tf = torch.nn.functional
    _against_torch(lambda x: F.softmax(x, dim=-1), lambda x: tf.softmax(x, dim=-1), [x], dtype)
    _against_torch(
        lambda x: F.log_softmax(x, dim=-1), lambda x: tf.log_softmax(x, dim=-1), [x], dtype
    )
    n = shape[-1]
    w, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    _against_torch(
        lambda x, w, b: F.layer_norm(x, (n,), w, b),
        lambda x, w, b: tf.layer_norm(x, (n,), w, b),
        [x, w, b],
        dtype,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_probability_targets_match_torch(dtype, smoothing):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((6, 5)).astype(dtype)
    t = rng.random((6, 5)).astype(dtype)
    t /= t.sum(axis=1, keepdims=True)
    w = rng.random(5).astype(dtype) + 0.5
    tf = torch.nn.functional

    def ours(x):
        return F.cross_entropy(x, tg.tensor(t), weight=tg.tensor(w), label_smoothing=smoothing)

    def theirs(x):
        return tf.cross_entropy(
            x, torch.tensor(t), weight=torch.tensor(w), label_smoothing=smoothing
        )

    _against_torch(ours, theirs, [x], dtype)
    labels = np.array([0, 4, -100, 2, 2, 1])

    def ours_idx(x):
        return F.cross_entropy(
            x, tg.tensor(labels), weight=tg.tensor(w), ignore_index=-100, label_smoothing=smoothing
        )

    def theirs_idx(x):
        return tf.cross_entropy(
            x, torch.tensor(labels), weight=torch.tensor(w), ignore_index=-100,
            label_smoothing=smoothing,
        )  # fmt: skip

    _against_torch(ours_idx, theirs_idx, [x], dtype)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(40, 3), (7, 2, 5), (1, 4)])
def test_scatter_add_kernel_equals_the_sorted_reference(monkeypatch, dtype, shape):
    from tapegrad.ops import _take as C

    rng = np.random.default_rng(6)
    g = rng.standard_normal(shape).astype(dtype)
    idx = rng.integers(0, 5, shape[0])
    got = C._segment_rows(g, idx, 6, False)
    want = _reference(monkeypatch, C._segment_rows, g, idx, 6, False)
    _close(got, want, dtype)
    assert not got[5].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_with_padding_matches_torch(dtype):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((9, 4)).astype(dtype)
    ids = rng.integers(0, 9, (3, 6))
    ids[0, :3] = 2
    _against_torch(
        lambda w: F.embedding(tg.tensor(ids), w, padding_idx=2),
        lambda w: torch.nn.functional.embedding(torch.tensor(ids), w, padding_idx=2),
        [w],
        dtype,
    )
