"""Behaviour that random-normal inputs never show: tied maxima in pooling and reductions (which
element gets the gradient), dropout's 1/(1-p) scale and which axes share one mask draw.

Inputs here are small integers, so most windows hold several equal maxima; every gradient is
compared with PyTorch's exactly (float64, atol 1e-12)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn

EXACT = dict(rtol=0, atol=1e-12)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261203)


def _ties(rng: np.random.Generator, shape: tuple[int, ...], levels: int = 3) -> np.ndarray:
    """Small integers as float64: most pooling windows hold two or more equal maxima."""
    return rng.integers(0, levels, shape).astype(np.float64)


def _both(tg_fn, torch_fn, x: np.ndarray, cot_seed: int = 0):
    """Forward and input gradient of both functions for one random output cotangent."""
    t = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(t)
        y = tg_fn(t)
    out = y[0] if isinstance(y, tuple) else y
    cot = np.random.default_rng(cot_seed).standard_normal(out.shape)
    (g,) = tape.gradient(out, [t], output_gradients=tg.tensor(cot))
    tt = torch.tensor(x, requires_grad=True)
    ty = torch_fn(tt)
    tout = ty[0] if isinstance(ty, tuple) else ty
    tout.backward(torch.tensor(cot))
    return y, ty, g.numpy(), tt.grad.numpy()


# -- max pooling: which tied element gets the gradient --------------------------------------

MAX_POOL_2D = [
    dict(kernel_size=2),  # MaxPool2d(2): tiled windows, the common case
    dict(kernel_size=2, stride=2),
    dict(kernel_size=(2, 3), stride=(2, 3)),  # tiled, non-square
    dict(kernel_size=3),  # tiled, with a remainder row and column dropped
    dict(kernel_size=2, stride=1),  # overlapping windows
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=2, stride=2, ceil_mode=True),  # a partial last window
    dict(kernel_size=2, stride=1, dilation=2),
]


@pytest.mark.parametrize("kw", MAX_POOL_2D, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 6, 7), (3, 6, 6)], ids=["batched", "unbatched"])
def test_max_pool2d_with_ties_matches_torch_values_indices_and_gradient(kw, shape, rng):
    x = _ties(rng, shape)
    (y, idx), (ty, tidx), g, tg_ = _both(
        lambda t: F.max_pool2d(t, return_indices=True, **kw),
        lambda t: TF.max_pool2d(t, return_indices=True, **kw),
        x,
    )
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


@pytest.mark.parametrize(
    "kw", [dict(kernel_size=2), dict(kernel_size=3, stride=1), dict(kernel_size=2, padding=1)],
    ids=str,
)  # fmt: skip
def test_max_pool1d_with_ties_matches_torch(kw, rng):
    x = _ties(rng, (2, 3, 10))
    y, ty, g, tg_ = _both(lambda t: F.max_pool1d(t, **kw), lambda t: TF.max_pool1d(t, **kw), x)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


def test_max_pool2d_all_equal_window_gives_the_whole_gradient_to_its_first_element():
    # the smallest case that tells "first" from "all tied" or "last": one 2x2 window of ones
    x = tg.ones((1, 1, 2, 2), dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(x)
        y = F.max_pool2d(x, 2)
    g = tape.gradient(y, x, output_gradients=tg.tensor(np.full((1, 1, 1, 1), 3.0)))
    np.testing.assert_array_equal(g.numpy(), [[[[3.0, 0.0], [0.0, 0.0]]]])


def test_max_pool2d_layer_on_tied_input_matches_torch(rng):
    x = _ties(rng, (2, 2, 8, 8), levels=2)
    y, ty, g, tg_ = _both(nn.MaxPool2d(2), torch.nn.MaxPool2d(2), x)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


@pytest.mark.parametrize("out", [1, 2, 3, (2, 3), (4, 5), (5, 3)], ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 6, 6), (3, 7, 5)], ids=["batched", "unbatched"])
def test_adaptive_max_pool2d_with_ties_matches_torch(out, shape, rng):
    # output sizes that divide the input (a plain max pool) and that do not (overlapping windows)
    x = _ties(rng, shape)
    (y, idx), (ty, tidx), g, tg_ = _both(
        lambda t: F.adaptive_max_pool2d(t, out, return_indices=True),
        lambda t: TF.adaptive_max_pool2d(t, out, return_indices=True),
        x,
    )
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


@pytest.mark.parametrize("out", [1, 3, 4], ids=str)
def test_adaptive_max_pool1d_with_ties_matches_torch(out, rng):
    x = _ties(rng, (2, 3, 9))
    y, ty, g, tg_ = _both(
        lambda t: F.adaptive_max_pool1d(t, out), lambda t: TF.adaptive_max_pool1d(t, out), x
    )
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


def test_adaptive_max_pool2d_layer_on_tied_input_matches_torch(rng):
    x = _ties(rng, (2, 2, 7, 7), levels=2)
    y, ty, g, tg_ = _both(nn.AdaptiveMaxPool2d((3, 2)), torch.nn.AdaptiveMaxPool2d((3, 2)), x)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


# -- reductions and elementwise max/min on ties --------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (-1, -3)], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin_split_the_gradient_among_ties_like_torch(name, axis, keepdims, rng):
    x = _ties(rng, (3, 4, 5), levels=2)
    dim = tuple(range(3)) if axis is None else axis
    y, ty, g, tg_ = _both(
        lambda t: getattr(tg, name)(t, axis=axis, keepdims=keepdims),
        lambda t: getattr(torch, name)(t, dim=dim, keepdim=keepdims),
        x,
    )
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(g, tg_, **EXACT)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_give_half_to_each_side_of_a_tie(name):
    x = np.array([1.0, 2.0, 3.0, 2.0])
    y = np.array([1.0, 1.0, 3.0, 5.0])  # ties at 0 and 2
    cot = np.array([2.0, 3.0, 4.0, 5.0])
    a, b = tg.tensor(x), tg.tensor(y)
    with tg.Tape() as tape:
        tape.watch(a, b)
        out = getattr(tg, name)(a, b)
    ga, gb = tape.gradient(out, [a, b], output_gradients=tg.tensor(cot))
    ta = torch.tensor(x, requires_grad=True)
    tb = torch.tensor(y, requires_grad=True)
    getattr(torch, name)(ta, tb).backward(torch.tensor(cot))
    np.testing.assert_allclose(ga.numpy(), ta.grad.numpy(), **EXACT)
    np.testing.assert_allclose(gb.numpy(), tb.grad.numpy(), **EXACT)
    assert ga.numpy()[0] == gb.numpy()[0] == 1.0  # half of 2.0 each


# -- dropout: the scale and the mask layout -------------------------------------------------


def _dropout_grad(fn, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(t)
        y = fn(t)
    return y.numpy(), tape.gradient(y, t, output_gradients=tg.ones(y.shape, dtype=y.dtype)).numpy()


@pytest.mark.parametrize("p", [0.2, 0.5, 0.75])
@pytest.mark.parametrize(
    "name,shape,lead",
    [
        ("dropout", (6, 5, 4), 3),
        ("dropout1d", (6, 5, 4), 2),  # (N, C, L): one draw per (n, c)
        ("dropout1d", (5, 4), 1),  # unbatched (C, L): one draw per channel
        ("dropout2d", (4, 5, 3, 3), 2),
        ("dropout3d", (3, 4, 2, 3, 2), 2),
        ("dropout3d", (4, 2, 3, 2), 1),
    ],
    ids=lambda v: str(v).replace(" ", ""),
)
def test_dropout_scales_kept_values_and_drops_whole_channels(name, shape, lead, p, rng):
    x = rng.uniform(1.0, 2.0, shape)  # never zero: a zero output means dropped
    tg.manual_seed(3)
    y, g = _dropout_grad(lambda t: getattr(F, name)(t, p=p, training=True), x)
    kept = y != 0
    # kept values are scaled by exactly 1/(1-p), and so is their gradient; dropped ones get 0
    np.testing.assert_allclose(y[kept], x[kept] / (1 - p), rtol=1e-15)
    np.testing.assert_allclose(g, kept / (1 - p), rtol=1e-15)
    # one draw for each index of the leading ``lead`` axes, shared by everything after them
    groups = kept.reshape(int(np.prod(shape[:lead])), -1)
    assert (groups.all(axis=1) | ~groups.any(axis=1)).all(), f"{name} mask is not per channel"
    assert groups.any() and not groups.all(), "both outcomes should occur in this many draws"


@pytest.mark.parametrize("name", ["dropout1d", "dropout2d", "dropout3d"])
def test_feature_dropout_draws_each_channel_independently(name):
    # many channels: the fraction kept is near 1 - p, and not all (n, c) share one draw
    ndim = {"dropout1d": 3, "dropout2d": 4, "dropout3d": 5}[name]
    x = np.ones((40, 50) + (2,) * (ndim - 2))
    tg.manual_seed(0)
    y = getattr(F, name)(tg.tensor(x), p=0.3).numpy()
    per_channel = y.reshape(40, 50, -1)[..., 0]
    assert 0.6 < (per_channel != 0).mean() < 0.8
    assert len({tuple(row) for row in (per_channel != 0)}) > 30


@pytest.mark.parametrize(
    "layer,shape",
    [(nn.Dropout(0.4), (8, 6)), (nn.Dropout1d(0.4), (4, 6, 5)), (nn.Dropout2d(0.4), (2, 6, 3, 4)),
     (nn.Dropout3d(0.4), (2, 6, 2, 2, 2))],
    ids=["Dropout", "Dropout1d", "Dropout2d", "Dropout3d"],
)  # fmt: skip
def test_dropout_layers_scale_in_training_and_are_the_identity_in_eval(layer, shape, rng):
    x = rng.uniform(1.0, 2.0, shape)
    layer.train()
    tg.manual_seed(5)
    y = layer(tg.tensor(x)).numpy()
    kept = y != 0
    assert kept.any() and not kept.all()
    np.testing.assert_allclose(y[kept], x[kept] / 0.6, rtol=1e-15)
    layer.eval()
    np.testing.assert_array_equal(layer(tg.tensor(x)).numpy(), x)


@pytest.mark.parametrize("name", ["dropout", "dropout1d", "dropout2d", "dropout3d"])
def test_dropout_edge_probabilities(name):
    x = np.arange(1.0, 1.0 + 2 * 3 * 2 * 2 * 2).reshape(2, 3, 2, 2, 2)
    if name == "dropout1d":
        x = x.reshape(2, 3, 8)
    elif name == "dropout2d":
        x = x.reshape(2, 3, 4, 2)
    f = getattr(F, name)
    np.testing.assert_array_equal(f(tg.tensor(x), p=0.0).numpy(), x)
    np.testing.assert_array_equal(f(tg.tensor(x), p=1.0).numpy(), np.zeros_like(x))
    np.testing.assert_array_equal(f(tg.tensor(x), p=0.9, training=False).numpy(), x)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=rf"{name}: dropout probability p must be in \[0, 1\]"):
            f(tg.tensor(x), p=bad)
