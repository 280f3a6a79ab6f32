"""Property tests: binary ops over broadcast shapes, and indexing (basic and advanced) against
numpy's shapes and values and PyTorch's gradients."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

SETTINGS = settings(max_examples=60, deadline=None)
BINARY_SETTINGS = settings(max_examples=250, deadline=None)  # about 35 examples per op

BINARY = {
    "add": (tg.add, torch.add),
    "subtract": (tg.subtract, torch.sub),
    "multiply": (tg.multiply, torch.mul),
    "divide": (tg.divide, torch.div),
    "maximum": (tg.maximum, torch.maximum),
    "atan2": (tg.atan2, torch.atan2),
    "pow": (tg.pow, torch.pow),
}


def _vjp(fn, arrays: list[np.ndarray], cot: np.ndarray, diff: list[int]) -> tuple:
    xs = [tg.tensor(a) for a in arrays]
    with tg.Tape() as tape:
        tape.watch(*[xs[i] for i in diff])
        y = fn(*xs)
    return y, tape.gradient(y, [xs[i] for i in diff], output_gradients=tg.tensor(cot))


def _torch_vjp(fn, arrays: list[np.ndarray], cot: np.ndarray, diff: list[int]) -> tuple:
    ts = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    y = fn(*ts)
    return y, torch.autograd.grad(y, [ts[i] for i in diff], torch.from_numpy(cot))


# pow needs a positive base; the others take either sign (away from zero, where all are smooth)
SIGNED = {"add", "subtract", "multiply", "divide", "maximum", "atan2"}


def _away_from_zero(rng: np.random.Generator, shape: tuple[int, ...], signed: bool) -> np.ndarray:
    a = rng.uniform(0.5, 4.0, shape)
    return a * rng.choice([-1.0, 1.0], shape) if signed else a


@BINARY_SETTINGS
@given(
    op=st.sampled_from(sorted(BINARY)),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3),
    seed=st.integers(0, 2**16),
)
def test_binary_ops_broadcast_like_numpy_with_gradients_of_the_input_shapes(op, shapes, seed):
    rng = np.random.default_rng(seed)
    sx, sy = shapes.input_shapes
    # x and y from the same range, so either may be the larger (maximum's gradient goes both
    # ways); continuous draws never tie (ties: tests/test_ties_and_scales.py)
    x = _away_from_zero(rng, sx, op in SIGNED)
    y = _away_from_zero(rng, sy, op in SIGNED)
    cot = rng.standard_normal(shapes.result_shape)
    f, ref = BINARY[op]
    out, (gx, gy) = _vjp(f, [x, y], cot, [0, 1])
    want, (wx, wy) = _torch_vjp(ref, [x, y], cot, [0, 1])
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-12)
    assert gx.shape == sx and gy.shape == sy
    np.testing.assert_allclose(gx.numpy(), wx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), wy.numpy(), rtol=1e-10, atol=1e-12)


@SETTINGS
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3),
    seed=st.integers(0, 2**16),
)
def test_where_broadcasts_three_ways(shapes, seed):
    rng = np.random.default_rng(seed)
    sc, sx, sy = shapes.input_shapes
    c, x, y = rng.random(sc) < 0.5, rng.standard_normal(sx), rng.standard_normal(sy)
    cot = rng.standard_normal(shapes.result_shape)
    out, (gx, gy) = _vjp(tg.where, [c, x, y], cot, [1, 2])
    want, (wx, wy) = _torch_vjp(torch.where, [c, x, y], cot, [1, 2])
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    np.testing.assert_allclose(gx.numpy(), wx.numpy(), atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), wy.numpy(), atol=1e-12)


SHAPES = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5)


@st.composite
def basic_case(draw):
    shape = draw(SHAPES)
    idx = draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    return shape, idx


def _scatter_reference(shape, idx, cot) -> np.ndarray:
    """The adjoint of ``x[idx]`` by numpy: add the cotangent back where it was read."""
    g = np.zeros(shape)
    np.add.at(g, idx, cot)
    return g


def _torch_index(idx):
    """PyTorch has no negative slice steps: say which indices it can take as they are."""
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(not (isinstance(i, slice) and (i.step or 1) < 0) for i in items)


@SETTINGS
@given(case=basic_case(), seed=st.integers(0, 2**16))
def test_basic_indexing_matches_numpy_and_its_gradient_scatters_back(case, seed):
    shape, idx = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    want = x[idx]
    cot = rng.standard_normal(np.shape(want))
    out, (g,) = _vjp(lambda t: t[idx], [x], cot, [0])
    assert out.shape == np.shape(want)
    np.testing.assert_array_equal(out.numpy(), want)
    assert g.shape == shape
    np.testing.assert_allclose(g.numpy(), _scatter_reference(shape, idx, cot))
    if _torch_index(idx):
        _, (w,) = _torch_vjp(lambda t: t[idx], [x], cot, [0])
        np.testing.assert_allclose(g.numpy(), w.numpy())


@st.composite
def advanced_case(draw):
    shape = draw(SHAPES)
    # which axes get integer arrays: any non-empty subset, not only the leading ones (arrays
    # apart from each other move their axis to the front, as in numpy); the others take ``:``
    picked = draw(
        st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)).filter(any)
    )
    ishape = draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=4))
    arrays = tuple(
        draw(hnp.arrays(np.int64, ishape, elements=st.integers(-n, n - 1))) if p else slice(None)
        for n, p in zip(shape, picked)
    )
    as_tensor = draw(st.booleans())
    return shape, arrays, as_tensor


@SETTINGS
@given(case=advanced_case(), seed=st.integers(0, 2**16))
def test_integer_array_indexing_accumulates_repeats_like_torch(case, seed):
    shape, arrays, as_tensor = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if as_tensor:
        idx = tuple(tg.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays)
    else:
        idx = arrays
    want = x[arrays]
    cot = rng.standard_normal(want.shape)
    out, (g,) = _vjp(lambda t: t[idx], [x], cot, [0])
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)
    tidx = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in arrays)
    _, (w,) = _torch_vjp(lambda t: t[tidx], [x], cot, [0])
    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


@st.composite
def mask_case(draw):
    shape = draw(SHAPES)
    k = draw(st.integers(1, len(shape)))
    mask = draw(hnp.arrays(np.bool_, shape[:k]))
    return shape, mask


@SETTINGS
@given(case=mask_case(), seed=st.integers(0, 2**16))
def test_boolean_mask_indexing_matches_numpy_and_torch(case, seed):
    shape, mask = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    want = x[mask]
    cot = rng.standard_normal(want.shape)
    out, (g,) = _vjp(lambda t: t[tg.tensor(mask)], [x], cot, [0])
    np.testing.assert_array_equal(out.numpy(), want)
    _, (w,) = _torch_vjp(lambda t: t[torch.from_numpy(mask)], [x], cot, [0])
    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
    data=st.data(),
)
def test_reductions_over_any_axes_reduce_and_expand_back(shape, data):
    n = len(shape)
    # negative axes too: -1 is the last; unique modulo the rank
    axes = data.draw(
        st.none()
        | st.lists(st.integers(-n, n - 1), unique_by=lambda a: a % n, min_size=1).map(tuple)
    )
    keepdims = data.draw(st.booleans())
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    dims = tuple(range(len(shape))) if axes is None else axes
    reductions = ((tg.sum, torch.sum), (tg.mean, torch.mean), (tg.amax, torch.amax),
                  (tg.amin, torch.amin))  # fmt: skip
    for f, ref in reductions:
        want = ref(torch.from_numpy(x), dim=dims, keepdim=keepdims)
        cot = rng.standard_normal(tuple(want.shape))
        out, (g,) = _vjp(lambda t, f=f: f(t, axis=axes, keepdims=keepdims), [x], cot, [0])
        _, (w,) = _torch_vjp(lambda t, ref=ref: ref(t, dim=dims, keepdim=keepdims), [x], cot, [0])
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)
