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
from tapegrad.nn import _f_loss as L

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
    assert not L._bce_kernel(xs, ts)
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
