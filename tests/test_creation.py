"""Creation functions, dtype inference, random numbers and Generator reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg


def test_tensor_infers_dtypes_like_pytorch() -> None:
    assert tg.tensor([1.0, 2.0]).dtype == tg.float32
    assert tg.tensor(2.5).dtype == tg.float32
    assert tg.tensor([1, 2]).dtype == tg.int64
    assert tg.tensor([True]).dtype == tg.bool_
    assert tg.tensor([[1, 2.5]]).dtype == tg.float32
    assert tg.tensor(np.zeros(2)).dtype == tg.float64  # arrays keep their dtype
    assert tg.tensor(np.float64(1.0)).dtype == tg.float64
    assert tg.tensor(np.zeros(2, np.int32)).dtype == tg.int32
    assert tg.tensor([1, 2], dtype=tg.float64).dtype == tg.float64


def test_tensor_copies_and_from_numpy_shares() -> None:
    a = np.zeros(3)
    t = tg.tensor(a)
    a[0] = 1.0
    assert t.tolist() == [0.0, 0.0, 0.0]
    x = tg.ones(2)
    y = tg.tensor(x)
    y[0] = 5.0
    assert x.tolist() == [1.0, 1.0]
    s = tg.from_numpy(a)
    a[1] = 2.0
    assert s.tolist() == [1.0, 2.0, 0.0] and s.dtype == tg.float64
    with pytest.raises(TypeError, match="numpy array"):
        tg.from_numpy([1.0])


@pytest.mark.parametrize("fn", [tg.zeros, tg.ones, tg.empty])
def test_filled_shapes_and_dtypes(fn) -> None:
    assert fn(2, 3).shape == fn((2, 3)).shape == fn([2, 3]).shape == (2, 3)
    assert fn(4).shape == (4,) and fn().shape == ()
    assert fn(2).dtype == tg.float32 and fn(2, dtype=tg.float64).dtype == tg.float64
    assert fn(2, dtype=tg.int32).dtype == tg.int32
    with pytest.raises(ValueError, match="negative"):
        fn(2, -1)


def test_values() -> None:
    assert tg.zeros(2).tolist() == [0.0, 0.0] and tg.ones((1, 2)).tolist() == [[1.0, 1.0]]
    assert tg.full((2,), 7).tolist() == [7, 7] and tg.full((2,), 7).dtype == tg.int64
    assert tg.full(2, 0.5).dtype == tg.float32 and tg.full(2, True).dtype == tg.bool_
    assert tg.full((1,), 3, dtype=tg.float64).dtype == tg.float64
    assert tg.eye(3).tolist() == torch.eye(3).tolist()
    assert tg.eye(2, 3, k=1).tolist() == [[0, 1, 0], [0, 0, 1]]


def test_like_functions() -> None:
    x = tg.ones((2, 3), dtype=tg.float64)
    for fn in (tg.zeros_like, tg.ones_like, tg.empty_like):
        y = fn(x)
        assert y.shape == (2, 3) and y.dtype == tg.float64 and y.device == "cpu"
        assert fn(x, dtype=tg.int32).dtype == tg.int32
    assert tg.full_like(x, 4).tolist() == [[4.0] * 3] * 2
    assert tg.zeros_like(np.ones(2, np.int32)).dtype == tg.int32
    assert tg.ones_like(x).tolist() == [[1.0] * 3] * 2 and tg.zeros_like(x).sum().item() == 0


@pytest.mark.parametrize(
    "args",
    [(5,), (2, 7), (1, 10, 3), (5, 0, -1), (0.0, 1.0, 0.1), (-1.0, 1.0, 0.3), (1, 2.5, 0.5)],
)
def test_arange_matches_torch(args) -> None:
    got = tg.arange(*args)
    want = torch.arange(*args)
    assert got.dtype == want.numpy().dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert tg.arange(*args, dtype=tg.float64).dtype == tg.float64


def test_arange_and_linspace_edges() -> None:
    with pytest.raises(ValueError, match="step"):
        tg.arange(0, 5, 0)
    np.testing.assert_allclose(tg.linspace(-1, 2, 7).numpy(), torch.linspace(-1, 2, 7).numpy())
    assert tg.linspace(0, 1, 4, endpoint=False).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert tg.linspace(0, 1, 3, dtype=tg.float64).dtype == tg.float64


# --- random ----------------------------------------------------------------------------------
def test_random_shapes_dtypes_and_ranges() -> None:
    assert tg.randn(2, 3).shape == (2, 3) and tg.randn(2).dtype == tg.float32
    assert tg.randn((4,), dtype=tg.float64).dtype == tg.float64
    r = tg.rand(1000)
    assert r.dtype == tg.float32 and 0.0 <= r.numpy().min() and r.numpy().max() < 1.0
    n = tg.randn(20000, dtype=tg.float64).numpy()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    i = tg.randint(3, 7, (1000,))
    assert i.dtype == tg.int64 and set(i.tolist()) == {3, 4, 5, 6}
    assert tg.randint(5, (4,)).shape == (4,) and tg.randint(5, size=(2, 2)).numpy().max() < 5
    assert tg.randint(0, 2, (3,), dtype=tg.int32).dtype == tg.int32
    u = tg.uniform(-2.0, -1.0, (500,)).numpy()
    assert u.min() >= -2 and u.max() < -1
    m = tg.normal(5.0, 0.1, (2000,), dtype=tg.float64).numpy()
    assert abs(m.mean() - 5) < 0.02
    assert sorted(tg.permutation(10).tolist()) == list(range(10))


def test_distribution_parameters_may_be_tensors() -> None:
    m = tg.normal(tg.tensor([0.0, 100.0]), tg.tensor([0.0, 0.0]))
    assert m.tolist() == [0.0, 100.0]
    assert tg.normal(tg.zeros(3, 1), 1.0).shape == (3, 1)
    assert tg.normal(0.0, tg.ones(2), size=(4, 2)).shape == (4, 2)
    u = tg.uniform(tg.tensor([0.0, 10.0]), tg.tensor([1.0, 11.0]))
    assert 0 <= u[0].item() < 1 and 10 <= u[1].item() < 11
    assert tg.bernoulli(tg.tensor([0.0, 1.0, 1.0])).tolist() == [0.0, 1.0, 1.0]
    assert tg.bernoulli(tg.tensor([1.0], dtype=tg.float64)).dtype == tg.float64
    assert tg.bernoulli(0.5, size=(2, 3)).shape == (2, 3)
    assert abs(tg.bernoulli(0.3, size=(20000,)).numpy().mean() - 0.3) < 0.02


def test_random_argument_errors() -> None:
    with pytest.raises(TypeError, match="float dtype"):
        tg.randn(2, dtype=tg.int64)
    with pytest.raises(ValueError, match="high"):
        tg.randint(5, 5, (2,))
    with pytest.raises(ValueError, match="std"):
        tg.normal(0.0, -1.0, (2,))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        tg.bernoulli(1.5)


def test_manual_seed_reproduces_the_global_stream() -> None:
    tg.manual_seed(123)
    a = (tg.randn(5).numpy(), tg.rand(3).numpy(), tg.randint(0, 100, (4,)).numpy())
    tg.manual_seed(123)
    b = (tg.randn(5).numpy(), tg.rand(3).numpy(), tg.randint(0, 100, (4,)).numpy())
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    tg.manual_seed(124)
    assert not np.array_equal(tg.randn(5).numpy(), a[0])


def test_generators_are_independent_reproducible_streams() -> None:
    g1, g2 = tg.Generator(7), tg.Generator(7)
    tg.manual_seed(0)
    first = tg.randn(3).numpy()
    np.testing.assert_array_equal(
        tg.randn(4, generator=g1).numpy(), tg.randn(4, generator=g2).numpy()
    )
    tg.manual_seed(0)
    np.testing.assert_array_equal(tg.randn(3).numpy(), first)  # untouched by the generators
    state = g1.get_state()
    x = tg.rand(3, generator=g1).numpy()
    g1.set_state(state)
    np.testing.assert_array_equal(tg.rand(3, generator=g1).numpy(), x)
    assert not np.array_equal(
        tg.randn(4, generator=tg.Generator(8)).numpy(),
        tg.randn(4, generator=tg.Generator(7)).numpy(),
    )
    g1.manual_seed(7)
    g3 = tg.Generator(7)
    for fn in (
        lambda g: tg.permutation(6, generator=g),
        lambda g: tg.bernoulli(0.5, size=(5,), generator=g),
        lambda g: tg.normal(0.0, 1.0, (3,), generator=g),
        lambda g: tg.uniform(0.0, 1.0, (3,), generator=g),
    ):
        np.testing.assert_array_equal(fn(g1).numpy(), fn(g3).numpy())
    assert tg.default_generator() is tg.manual_seed(1)


def test_float64_everywhere() -> None:
    for t in (
        tg.zeros(2, dtype=tg.float64),
        tg.full((2,), 1.0, dtype=tg.float64),
        tg.arange(3, dtype=tg.float64),
        tg.eye(2, dtype=tg.float64),
        tg.rand(2, dtype=tg.float64),
        tg.normal(0.0, 1.0, (2,), dtype=tg.float64),
        tg.uniform(0.0, 1.0, (2,), dtype=tg.float64),
        tg.bernoulli(0.5, size=(2,), dtype=tg.float64),
    ):
        assert t.dtype == tg.float64
