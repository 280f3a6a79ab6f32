"""The fused binary cross-entropy primitives and their compiled kernels.

``binary_cross_entropy`` and ``binary_cross_entropy_with_logits`` without weights are one
primitive each (``nn.binary_cross_entropy``, ``nn.binary_cross_entropy_with_logits``); on
numpy float arrays one compiled pass computes the loss and one the gradients. They are compared
with the numpy formulas beside them (the reference, selected by turning ``usable`` off) in both
dtypes, on the values where the clamps and the stable forms matter (0, 1, NaN, large logits),
per element and reduced, and with PyTorch forward and backward.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels
from tapegrad._autodiff import ARRAYS
from tapegrad._kernels import table
from tapegrad.ops import _loss as L

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")

TOL = {np.float32: (2e-6, 1e-6), np.float64: (1e-13, 1e-14)}  # rtol, atol


def _reference(monkeypatch, fn, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(_kernels, "usable", lambda *a: False)
        return fn(*args, **kw)


def _close(a, b, dtype):
    rtol, atol = TOL[dtype]
    assert a.dtype == b.dtype == dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


def _inputs(rng, shape, dtype, logits):
    if logits:
        x = rng.standard_normal(shape) * 4
        x.flat[0] = 1e4
        if x.size > 2:
            x.flat[1], x.flat[2] = -1e4, -30.0
    else:
        x = rng.uniform(0.0, 1.0, shape)
        x.flat[0] = 0.0
        if x.size > 2:
            x.flat[1], x.flat[2] = 1.0, 1e-45
    t = rng.uniform(0.0, 1.0, shape)
    return x.astype(dtype), t.astype(dtype)


@numba_only
@pytest.mark.parametrize("shape", [(64,), (1,), (3, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("logits", [False, True])
@pytest.mark.parametrize("total,scale", [(False, 1.0), (True, 1.0), (True, 0.125)])
def test_bce_kernels_equal_the_numpy_reference(monkeypatch, shape, dtype, logits, total, scale):
    rng = np.random.default_rng(len(shape) + logits)
    x, t = _inputs(rng, shape, dtype, logits)
    fwd = L._bce_logits_fwd if logits else L._bce_fwd
    y = fwd(x, t, scale, total)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ref = _reference(monkeypatch, fwd, x, t, scale, total)
    _close(y, ref, dtype)
    g = np.asarray(1.5, dtype) if total else rng.standard_normal(shape).astype(dtype)
    for i in (0, 1):
        vjp = L._bce_vjp(i, logits)
        got = vjp(ARRAYS, g, y, x, t, scale, total)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            want = _reference(monkeypatch, vjp, ARRAYS, g, y, x, t, scale, total)
        _close(got, np.broadcast_to(want, shape).astype(dtype), dtype)


@numba_only
@pytest.mark.parametrize("logits", [False, True])
def test_bce_kernels_keep_nan_and_skip_non_contiguous_input(monkeypatch, logits):
    x, t = _inputs(np.random.default_rng(2), (6, 4), np.float64, logits)
    x[2, 1] = np.nan
    fwd = L._bce_logits_fwd if logits else L._bce_fwd
    y = fwd(x, t, 1.0, False)
    assert np.isnan(y[2, 1]) and np.isfinite(np.delete(y.ravel(), 9)).all()
    assert np.isnan(fwd(x, t, 1.0, True))
    xs, ts = x[:, ::2], t[:, ::2]  # strided: the numpy formula
    assert not table.bce_fits(xs, ts)
    with np.errstate(invalid="ignore", divide="ignore"):
        _close(fwd(xs, ts, 1.0, False), _reference(monkeypatch, fwd, xs, ts, 1.0, False), np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("logits", [False, True])
def test_fused_bce_matches_torch_forward_and_backward(dtype, reduction, logits):
    x, t = _inputs(np.random.default_rng(5), (64,), dtype, logits)
    if not logits:
        x[:3] = 1e-3, 0.999, 0.5  # away from the clamps (the reference test has them)
    tf = torch.nn.functional
    ours = F.binary_cross_entropy_with_logits if logits else F.binary_cross_entropy
    theirs = tf.binary_cross_entropy_with_logits if logits else tf.binary_cross_entropy
    xt, tt = tg.tensor(x), tg.tensor(t)
    with tg.Tape() as tape:
        tape.watch(xt, tt)
        y = ours(xt, tt, reduction=reduction)
        loss = (y * y).sum()
    gx, gt = tape.gradient(loss, [xt, tt])
    a, b = torch.tensor(x, requires_grad=True), torch.tensor(t, requires_grad=True)
    ty = theirs(a, b, reduction=reduction)
    (ty * ty).sum().backward()
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gx.numpy(), a.grad.numpy(), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gt.numpy(), b.grad.numpy(), rtol=rtol, atol=rtol)


def test_bce_range_check_names_the_values():
    with pytest.raises(ValueError, match="min -0.5 max 0.5"):
        F.binary_cross_entropy(tg.tensor([-0.5, 0.5]), tg.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="target values"):
        F.binary_cross_entropy(tg.tensor([0.5, 0.5]), tg.tensor([1.0, 2.0]))
    y = F.binary_cross_entropy(tg.tensor([np.nan, 0.5]), tg.tensor([1.0, 0.0]), reduction="none")
    assert np.isnan(y.numpy()[0])  # NaN passes the check, as in PyTorch


# --------------------------------------------------------------------------------------------
# cross-entropy on (N, C) logits: class indices and probability targets
# --------------------------------------------------------------------------------------------


def _logits(rng, shape, dtype, special):
    x = rng.standard_normal(shape) * 3
    if special:
        x[0] += 1e4  # shifted logits
        if shape[0] > 2:
            x[1, 0] = -np.inf  # a class that can never be picked
            x[2, 1] = np.nan  # a NaN row
    return x.astype(dtype)


@numba_only
@pytest.mark.parametrize("shape", [(64, 10), (1, 3), (5, 7)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("total", [False, True])
def test_cross_entropy_kernels_equal_the_numpy_reference(monkeypatch, shape, dtype, total):
    rng = np.random.default_rng(shape[0])
    x = _logits(rng, shape, dtype, special=not total)
    t = rng.integers(1, shape[1], shape[0]).astype(np.int64)
    coef = rng.uniform(0.0, 2.0, shape[0]).astype(dtype)
    assert table.ce_fits(x, t, coef)
    with np.errstate(invalid="ignore"):
        _close(L._ce_fwd(x, t, coef, total), _reference(monkeypatch, L._ce_fwd, x, t, coef, total),
               dtype)
        g = np.asarray(0.5, dtype) if total else rng.standard_normal(shape[0]).astype(dtype)
        got = L._ce_grad_fwd(x, g, t, coef, total)
        want = _reference(monkeypatch, L._ce_grad_fwd, x, g, t, coef, total)
    _close(got, want, dtype)


@numba_only
@pytest.mark.parametrize("shape", [(128, 128), (1, 4), (6, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("total,scale", [(False, 1.0), (True, 0.25)])
def test_probability_cross_entropy_kernels_equal_the_numpy_reference(
    monkeypatch, shape, dtype, total, scale
):
    rng = np.random.default_rng(shape[1])
    x = _logits(rng, shape, dtype, special=not total)
    t = rng.random(shape).astype(dtype)
    t /= t.sum(1, keepdims=True)
    with np.errstate(invalid="ignore"):
        y = L._ce_probs_fwd(x, t, scale, total)
        # the reference in float64: at logits near 1e4 the kernel subtracts the row's maximum
        # before the log-sum-exp, the float32 reference after it (1e-5 less accurate)
        x64, t64 = x.astype(np.float64), t.astype(np.float64)
        ref = _reference(monkeypatch, L._ce_probs_fwd, x64, t64, scale, total).astype(dtype)
        _close(y, ref, dtype)
        g = np.asarray(1.5, dtype) if total else rng.standard_normal(shape[0]).astype(dtype)
        for i in (0, 1):
            vjp = L._ce_probs_vjp(i)
            got = vjp(ARRAYS, g, y, x, t, scale, total)
            want = _reference(monkeypatch, vjp, ARRAYS, g, y, x, t, scale, total)
            ok = np.isfinite(want)  # -inf logits: inf * 0 in the reference's log-softmax
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want) & ~np.isinf(x))
            _close(np.where(ok, got, 0), np.where(ok, want, 0), dtype)
    if total:  # a numpy scalar seed (the VJP of ``loss * 0.5``) takes the kernels too
        assert table.seed_fits(g[()], x)
        assert table.seed_fits(np.float64(1.5), x) == (dtype == np.float64)
        np.testing.assert_array_equal(L._ce_probs_vjp(0)(ARRAYS, g[()], y, x, t, scale, total),
                                      L._ce_probs_vjp(0)(ARRAYS, g, y, x, t, scale, total))
    # strided and transposed logits (CLIP's loss over logits.T): the kernels on a copy
    for xs in (np.repeat(x, 2, axis=1)[:, ::2], np.ascontiguousarray(x.T).T):
        assert table.ce_probs_fits(xs, t)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(L._ce_probs_fwd(xs, t, scale, total), y)
            for i in (0, 1):
                vjp = L._ce_probs_vjp(i)
                np.testing.assert_array_equal(vjp(ARRAYS, g, y, xs, t, scale, total),
                                              vjp(ARRAYS, g, y, x, t, scale, total))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_cross_entropy_paths_match_torch(dtype, reduction):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5)).astype(dtype)
    t = np.array([0, 4, -100, 2, 2, 1])
    p = rng.random((6, 5)).astype(dtype)
    p /= p.sum(1, keepdims=True)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    tf = torch.nn.functional
    for target, ttarget in ((tg.tensor(t), torch.tensor(t)), (tg.tensor(p), torch.tensor(p))):
        xt = tg.tensor(x)
        with tg.Tape() as tape:
            tape.watch(xt)
            y = F.cross_entropy(xt, target, reduction=reduction)
            loss = (y * y).sum()
        (gx,) = tape.gradient(loss, [xt])
        a = torch.tensor(x, requires_grad=True)
        ty = tf.cross_entropy(a, ttarget, reduction=reduction)
        (ty * ty).sum().backward()
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=rtol)
        np.testing.assert_allclose(gx.numpy(), a.grad.numpy(), rtol=rtol, atol=rtol)
    with pytest.raises(IndexError, match="target 5 is out of bounds for 5 classes"):
        F.cross_entropy(tg.tensor(x), tg.tensor([0, 5, 1, 1, 1, 1]))
    every = F.cross_entropy(tg.tensor(x), tg.tensor([-100] * 6))
    assert np.isnan(every.item())  # every target ignored: 0 / 0, as PyTorch
