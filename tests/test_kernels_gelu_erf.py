"""GELU's tanh form and erf as compiled passes (``_kernels/gelu.py``): against float64 truth,
their numpy references, PyTorch and finite differences, forward and backward."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels
from tapegrad.ops import _elementwise as E

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")
_C = math.sqrt(2.0 / math.pi)


def _tanh_exact(x):
    """The tanh form and its derivative in float64, as ``x * sigmoid(2u)`` (no cancellation)."""
    xd = x.astype(np.float64)
    u = _C * (xd + 0.044715 * xd**3)
    s = 0.5 * (1.0 + np.tanh(u))  # sigmoid(2u), from tanh: exact enough in float64 for x > -9
    s = np.where(u < 0, 1.0 / (1.0 + np.exp(np.minimum(-2.0 * u, 700.0))), s)
    return xd * s, s + xd * s * (1.0 - s) * 2.0 * _C * (1.0 + 3 * 0.044715 * xd * xd)


def _step(fn, x, g):
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = fn(xt)
    (dx,) = tape.gradient(y, [xt], output_gradients=[tg.tensor(g)])
    return y.numpy(), dx.numpy()


def _kernel_calls(monkeypatch, names):
    from tapegrad._kernels import gelu as kernel

    calls = []
    for name in names:
        real = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *a, real=real, name=name: (calls.append(name),
                                                                             real(*a))[1])
    return calls


def _numpy_refs(monkeypatch):
    from tapegrad._kernels import registry

    monkeypatch.setattr(registry, "_ACTIVE", [{}])


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_tanh_gelu_against_float64_the_reference_and_pytorch(monkeypatch, dtype, parallel):
    from tapegrad._kernels import elementwise

    monkeypatch.setattr(elementwise, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    rng = np.random.default_rng(7)
    x = np.concatenate([np.linspace(-12, 10, 6001), rng.standard_normal(3000) * 3]).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    calls = _kernel_calls(monkeypatch, ("gelu_tanh", "gelu_tanh_grad_op"))
    y, dx = _step(lambda t: F.gelu(t, approximate="tanh"), x, g)
    assert calls == ["gelu_tanh", "gelu_tanh_grad_op"] and y.dtype == dx.dtype == dtype
    ey, ed = _tanh_exact(x)
    if dtype == np.float32:  # x / (1 + exp(-2u)): relative precision on both sides
        mid = x > -4
        np.testing.assert_allclose(y[mid], ey[mid], rtol=3e-6, atol=1e-30)
        np.testing.assert_allclose(y[~mid], ey[~mid], rtol=6e-5, atol=1e-37)
        np.testing.assert_allclose(dx, g * ed, rtol=1e-5, atol=3e-6)
    else:
        np.testing.assert_allclose(y, ey, rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(dx, g * ed, rtol=1e-12, atol=1e-14)
    with monkeypatch.context() as m:
        _numpy_refs(m)
        ry, rdx = _step(lambda t: F.gelu(t, approximate="tanh"), x, g)
    # the reference's 1 + tanh and 1 - tanh^2 cancel (to 3e-6 absolute in float32)
    tol = (1e-5, 4e-6) if dtype == np.float32 else (1e-12, 1e-14)
    np.testing.assert_allclose(y, ry, rtol=tol[0], atol=tol[1])
    np.testing.assert_allclose(dx, rdx, rtol=tol[0], atol=tol[1])
    tx = torch.from_numpy(x.copy()).requires_grad_()
    ty = torch.nn.functional.gelu(tx, approximate="tanh")
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_erf_against_float64_the_reference_and_pytorch(monkeypatch, dtype, parallel):
    from tapegrad._kernels import elementwise

    monkeypatch.setattr(elementwise, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    rng = np.random.default_rng(8)
    # both branches (|x| under 0.9 and above), erf's saturation, tiny values (relative precision)
    x = np.concatenate([np.linspace(-7, 7, 7001), rng.standard_normal(3000),
                        [1e-30, -1e-20, 1e-8, 0.0]]).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    calls = _kernel_calls(monkeypatch, ("erf", "erf_grad_op"))
    y, dx = _step(tg.erf, x, g)
    assert calls == ["erf", "erf_grad_op"] and y.dtype == dx.dtype == dtype
    xd = x.astype(np.float64)
    ey = np.array([math.erf(v) for v in xd])
    ed = 2.0 / math.sqrt(math.pi) * np.exp(-xd * xd)
    if dtype == np.float32:  # within 2.5 float32 ulps
        np.testing.assert_allclose(y, ey, rtol=2.5 * 2**-23, atol=1e-37)
        np.testing.assert_allclose(dx, g * ed, rtol=5e-6, atol=1e-37)
    else:
        np.testing.assert_array_equal(y, ey)  # libm's erf
        np.testing.assert_allclose(dx, g * ed, rtol=1e-14, atol=1e-300)
    with monkeypatch.context() as m:
        _numpy_refs(m)
        ry, rdx = _step(tg.erf, x, g)
    tol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(y, ry, rtol=tol, atol=1e-37)
    np.testing.assert_allclose(dx, rdx, rtol=tol * 4, atol=1e-37)
    tx = torch.from_numpy(x.copy()).requires_grad_()
    torch.erf(tx).backward(torch.from_numpy(g))
    np.testing.assert_allclose(y, torch.erf(tx).detach().numpy(), rtol=1e-6, atol=2e-7)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-7)


@numba_only
@pytest.mark.parametrize("approximate", ["tanh", "erf"])
def test_nan_and_infinities_as_pytorch(approximate):
    x = np.array([np.inf, -np.inf, 0.0, np.nan, -0.0], np.float32)
    g = np.ones_like(x)
    fn = tg.erf if approximate == "erf" else (lambda t: F.gelu(t, approximate="tanh"))
    y, dx = _step(fn, x, g)
    tx = torch.from_numpy(x.copy()).requires_grad_()
    ty = torch.erf(tx) if approximate == "erf" else torch.nn.functional.gelu(tx,
                                                                           approximate="tanh")
    ty.backward(torch.ones(5))
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_array_equal(dx, tx.grad.numpy())


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_gradients_to_second_order(approximate):
    x = tg.tensor(np.linspace(-4, 3, 23), dtype=tg.float64)
    tg.testing.check_grads(lambda t: F.gelu(t, approximate=approximate), [x], order=2)
    tg.testing.check_grads(tg.erf, [x], order=2)


def test_integer_inputs_take_the_composition():
    y = tg.gelu(tg.tensor([1, -2]), approximate="tanh")
    assert y.dtype == tg.float32
    np.testing.assert_allclose(y.numpy(), F.gelu(tg.tensor([1.0, -2.0]), "tanh").numpy(), 1e-6)
    assert tg.erf(tg.tensor([0, 1])).dtype == tg.float32


def test_reference_matches_the_composition():
    x = np.random.default_rng(3).standard_normal((7, 5))
    comp = 0.5 * x * (1.0 + np.tanh(_C * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(E._gelu_tanh_np(x), comp, rtol=1e-14, atol=1e-300)
