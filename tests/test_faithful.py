"""A PyTorch spelling that tapegrad accepts means what it means in PyTorch, or raises.

Each test compares with torch (the oracle) on the call a PyTorch user writes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg


def _same(t: tg.Tensor, ref: torch.Tensor) -> None:
    assert t.shape == tuple(ref.shape)
    np.testing.assert_allclose(np.asarray(t.numpy(), dtype=float), ref.double().numpy())


# --- transpose / repeat -------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 3), (2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("dims", [(0, 1), (1, 0), (-2, -1), (-1, 0)])
def test_transpose_two_ints_swaps_like_torch(shape: tuple[int, ...], dims: tuple[int, int]) -> None:
    a = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    ref = torch.tensor(a).transpose(*dims)
    _same(tg.tensor(a).transpose(*dims), ref)
    _same(tg.transpose(tg.tensor(a), *dims), ref)
    _same(tg.swapaxes(tg.tensor(a), *dims), ref)
    _same(tg.tensor(a).transpose(dim0=dims[0], dim1=dims[1]), ref)


def test_transpose_numpy_forms_kept_and_ambiguous_raises() -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    x = tg.tensor(a)
    _same(x.transpose((2, 0, 1)), torch.tensor(a).permute(2, 0, 1))
    _same(x.transpose(2, 0, 1), torch.tensor(a).permute(2, 0, 1))
    _same(tg.transpose(x, (1, 2, 0)), torch.tensor(a).permute(1, 2, 0))
    _same(x.transpose(), torch.tensor(a).permute(2, 1, 0))
    _same(x.T, torch.tensor(a).permute(2, 1, 0))
    _same(x.mT, torch.tensor(a).mT)
    _same(x.permute(1, 0, 2), torch.tensor(a).permute(1, 0, 2))
    m = tg.tensor(a[0])
    _same(m.transpose((0, 1)), torch.tensor(a[0]))  # a tuple: numpy's permutation
    with pytest.raises(TypeError, match="swaps two axes.*permutes all"):
        x.transpose(0)
    with pytest.raises(TypeError, match="permute"):
        tg.tensor(np.zeros((2, 3, 4, 5))).transpose(0, 1, 2)


def test_transpose_gradient_is_the_swap() -> None:
    w = tg.Parameter(np.arange(4.0).reshape(2, 2))
    with tg.Tape() as tape:
        loss = (w.transpose(0, 1) * tg.tensor([[1.0, 2.0], [3.0, 4.0]])).sum()
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), [[1.0, 3.0], [2.0, 4.0]])


@pytest.mark.parametrize(
    "shape,sizes",
    [((3,), (3,)), ((3, 2), (2, 1)), ((3, 2), (2, 2, 3)), ((2,), (1, 2)), ((2, 3), ((2, 2),))],
)
def test_repeat_tiles_like_torch(shape: tuple[int, ...], sizes: tuple) -> None:
    a = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    _same(tg.tensor(a).repeat(*sizes), torch.tensor(a).repeat(*sizes))


def test_repeat_errors_and_numpy_forms() -> None:
    a = np.arange(6.0).reshape(3, 2)
    with pytest.raises(ValueError, match="repeat_interleave"):
        tg.tensor(a).repeat(2)  # torch: fewer counts than dimensions
    _same(tg.repeat(tg.tensor(a), 2, axis=0), torch.tensor(a).repeat_interleave(2, 0))
    _same(tg.tensor(a).repeat_interleave(2, 1), torch.tensor(a).repeat_interleave(2, 1))
    _same(tg.tensor(a).repeat_interleave(2), torch.tensor(a).repeat_interleave(2))
    _same(tg.tensor(a).repeat(2, axis=1), torch.tensor(a).repeat_interleave(2, 1))
    w = tg.Parameter(np.array([1.0, 2.0]))
    with tg.Tape() as tape:
        loss = (w.repeat(3) * tg.arange(6.0)).sum()
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), [0 + 2 + 4, 1 + 3 + 5])


# --- clip_grad_norm_ / clip_grad_value_ change the Gradients they are given --------------------
def _two_param_grads() -> tuple[list[tg.Parameter], tg.Gradients, list[torch.Tensor]]:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in ((3, 4), (5,))]
    ps = [tg.Parameter(a) for a in arrays]
    with tg.Tape() as tape:
        loss = (ps[0] ** 3).sum() + (ps[1] ** 3).sum()
    tps = [torch.tensor(a, requires_grad=True) for a in arrays]
    ((tps[0] ** 3).sum() + (tps[1] ** 3).sum()).backward()
    return ps, tape.gradient(loss), tps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_in_place_like_torch(norm_type: float) -> None:
    ps, grads, tps = _two_param_grads()
    norm = tg.nn.utils.clip_grad_norm_(grads, 0.5, norm_type=norm_type)
    tnorm = torch.nn.utils.clip_grad_norm_(tps, 0.5, norm_type=norm_type)
    assert abs(norm.item() - tnorm.item()) < 1e-9
    for p, t in zip(ps, tps, strict=True):
        np.testing.assert_allclose(grads[p].numpy(), t.grad.numpy(), rtol=1e-10)
    w = tg.Parameter(np.zeros(3))
    opt = tg.optim.SGD([w], lr=1.0)
    with tg.Tape() as tape:
        loss = (w * tg.tensor([30.0, 40.0, 0.0])).sum()
    g = tape.gradient(loss)
    tg.nn.utils.clip_grad_norm_(g, 1.0)
    opt.step(g)  # steps with the clipped gradient
    np.testing.assert_allclose(w.numpy(), [-0.6, -0.8, 0.0], rtol=1e-5)


def test_clip_grad_value_in_place_and_copies() -> None:
    ps, grads, tps = _two_param_grads()
    copy = tg.nn.utils.clip_grad_value(grads, 0.3)
    before = grads[ps[0]].numpy().copy()
    np.testing.assert_array_equal(grads[ps[0]].numpy(), before)  # the copy left grads alone
    assert tg.nn.utils.clip_grad_value_(grads, 0.3) is None
    torch.nn.utils.clip_grad_value_(tps, 0.3)
    for p, t in zip(ps, tps, strict=True):
        np.testing.assert_allclose(grads[p].numpy(), t.grad.numpy())
        np.testing.assert_allclose(copy[p].numpy(), t.grad.numpy())
    with pytest.raises(TypeError, match="opt.step\\(grads\\)"):
        tg.nn.utils.clip_grad_norm_([p for p in ps], 1.0)
