"""The differential test: each callable name tapegrad shares with torch, torch.Tensor,
torch.nn.functional and numpy is called in both with generated arguments (1-, 2- and 3-d, every
positional and keyword form of its recipe in tests/differential_cases.py); the values, shape,
dtype and gradient must be equal, or tapegrad must refuse with its own error. A divergence fails,
unless it is listed (with its reason) as deliberate or as open in differential_cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from differential_cases import (
    DELIBERATE,
    LIBS,
    OPEN,
    RECIPES,
    ROOT,
    SURFACES,
    classify,
    make_inputs,
    outcome,
    shared_names,
    table,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg

SETTINGS = settings(max_examples=3, derandomize=True, deadline=None, database=None)

CASES = [
    (surface, name)
    for surface in SURFACES
    for name in sorted(RECIPES[surface])
    if (surface, name) not in OPEN
    and hasattr(tg.Tensor if surface == "Tensor" else LIBS[surface][1], name)
]


@pytest.mark.parametrize(("surface", "name"), CASES, ids=[f"{s}.{n}" for s, n in CASES])
@SETTINGS
@given(data=st.data())
def test_shared_name_means_the_same_or_raises(surface, name, data):
    recipe = RECIPES[surface][name]
    rank = data.draw(st.sampled_from(recipe.ranks), label="rank")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    xs = make_inputs(np.random.default_rng(seed), recipe, rank, dtype)
    for i in range(len(recipe.forms)):
        status, detail = outcome(surface, name, recipe, xs, i)
        if status == "differs" and (surface, name) in DELIBERATE:
            continue
        assert status in ("same", "raises", "skip"), (
            f"{surface}.{name} form {i} on shapes {[x.shape for x in xs]}: {status}: {detail}"
        )


def test_the_surface_is_enumerated_and_each_name_has_a_row():
    rows = table()
    for surface in SURFACES:
        names = shared_names(surface)
        assert len(names) > 50, surface
        for n in names:
            assert f"| `{n}` |" in rows
    assert sum(len(r) for r in RECIPES.values()) > 300


@pytest.mark.parametrize("key", sorted(OPEN), ids=[f"{s}.{n}" for s, n in sorted(OPEN)])
def test_open_divergences_are_still_there(key):
    """An open entry that now means the same should leave the list (and the table says so)."""
    status, _ = classify(*key)
    assert status in ("differs", "raises a generic error"), f"{key} is fixed: remove it from OPEN"


@pytest.mark.parametrize("key", sorted(DELIBERATE), ids=[f"{s}.{n}" for s, n in DELIBERATE])
def test_deliberate_differences_still_differ(key):
    status, _ = classify(*key)
    assert status != "same", f"{key} now means the same: remove it from DELIBERATE"


def test_trace_without_a_tape_names_both_meanings():
    x = tg.tensor(np.eye(3, dtype=np.float32))
    with pytest.raises(TypeError, match=r"tg\.linalg\.trace\(x\)") as e:
        x.trace()
    assert "puts x on a tape" in str(e.value)
    assert float(tg.linalg.trace(x)) == 3.0


def test_torch_keywords_dims_shifts_diagonal_and_dim_on_arg_functions():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, t = tg.tensor(a), torch.tensor(a)
    assert np.array_equal(tg.flip(x, dims=(0,)).numpy(), torch.flip(t, dims=(0,)).numpy())
    assert np.array_equal(
        tg.roll(x, shifts=1, dims=1).numpy(), torch.roll(t, shifts=1, dims=1).numpy()
    )
    assert np.array_equal(x.triu(diagonal=1).numpy(), t.triu(diagonal=1).numpy())
    assert np.array_equal(tg.argmax(x, dim=1).numpy(), torch.argmax(t, dim=1).numpy())
    assert np.array_equal(tg.argsort(x, dim=0).numpy(), torch.argsort(t, dim=0).numpy())
    with pytest.raises(TypeError, match="not both"):
        tg.flip(x, dims=(0,), axis=1)


def test_committed_table_matches_the_generator():
    text = (ROOT / "docs" / "from_pytorch.md").read_text()
    from differential_cases import BEGIN, END

    assert BEGIN in text and END in text, "run python tests/differential_cases.py"
    committed = BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    assert committed == table(), (
        "docs/from_pytorch.md's differential table is stale: run python tests/differential_cases.py"
    )


def test_every_recipe_runs_in_the_reference():
    """A recipe the reference library rejects in every form checks nothing: fix the recipe."""
    bad = []
    for surface in SURFACES:
        ref = torch.Tensor if surface == "Tensor" else LIBS[surface][0]
        for name in RECIPES[surface]:
            if hasattr(ref, name) and classify(surface, name)[0] == "not covered":
                bad.append(f"{surface}.{name}")
    assert bad == []


def test_the_comparison_sees_wrong_values_and_wrong_gradients(monkeypatch):
    sin = tg.sin
    assert classify("torch", "sin")[0] == "same"
    monkeypatch.setattr(tg, "sin", tg.cos)
    status, detail = classify("torch", "sin")
    assert status == "differs" and "values differ" in detail
    monkeypatch.setattr(tg, "sin", lambda x: sin(x.detach()) + 0 * x)
    status, detail = classify("torch", "sin")
    assert status == "differs" and "gradient of input 0" in detail
    monkeypatch.setattr(tg, "sin", lambda x: sin(x).astype(tg.float64))
    assert "dtype" in classify("torch", "sin")[1]


def test_var_std_take_pytorchs_unbiased_keyword():
    a = np.arange(12, dtype=np.float32).reshape(3, 4) ** 1.5
    x, t = tg.tensor(a), torch.tensor(a)
    for u in (True, False):
        np.testing.assert_allclose(
            tg.std(x, dim=0, unbiased=u).numpy(), torch.std(t, dim=0, unbiased=u).numpy(), 1e-6
        )
        np.testing.assert_allclose(
            tg.var(x, 1, unbiased=u).numpy(), torch.var(t, 1, unbiased=u).numpy(), 1e-6
        )
    with pytest.raises(TypeError, match="not both"):
        tg.var(x, correction=0, unbiased=True)


def test_squeeze_dim_is_pytorchs_and_axis_names_it_when_it_raises():
    x, t = tg.ones((3, 1, 2)), torch.ones((3, 1, 2))
    assert x.squeeze(dim=0).shape == tuple(t.squeeze(dim=0).shape) == (3, 1, 2)
    assert tg.squeeze(x, dim=(0, 1)).shape == tuple(torch.squeeze(t, dim=(0, 1)).shape)
    assert x.squeeze(1).shape == (3, 2)
    with pytest.raises(ValueError, match=r"size 3 .* write dim= for PyTorch's meaning"):
        x.squeeze(0)
    with pytest.raises(ValueError, match="numpy's squeeze"):
        tg.squeeze(x, axis=0)


def test_normal_takes_the_dtype_of_a_float_tensor_mean_or_std():
    m = tg.zeros(3, dtype=tg.float64)
    assert torch.normal(torch.zeros(3, dtype=torch.float64), 1.0).dtype == torch.float64
    assert tg.normal(m, 1.0).dtype == tg.float64
    assert tg.normal(0.0, 1.0, (2,)).dtype == tg.float32
    assert tg.normal(m, 1.0, dtype=tg.float32).dtype == tg.float32


@pytest.mark.parametrize("case", ["2-d", "weight", "3-d"])
def test_cross_entropy_with_every_target_ignored_has_pytorchs_zero_gradient(case):
    import tapegrad.nn.functional as F

    shape = (3, 4, 2) if case == "3-d" else (3, 4)
    a = np.random.default_rng(0).random(shape, dtype=np.float32)
    tgt = np.ones((3, 2) if case == "3-d" else (3,), np.int64)
    w = np.arange(1, 5, dtype=np.float32) if case == "weight" else None
    t = torch.tensor(a, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(
        t, torch.tensor(tgt), None if w is None else torch.tensor(w), ignore_index=1
    )
    ref.backward()
    x = tg.tensor(a)
    with tg.Tape() as tape:
        tape.watch(x)
        loss = F.cross_entropy(x, tg.tensor(tgt), None if w is None else tg.tensor(w), ignore_index=1)
    assert np.isnan(loss.item()) and np.isnan(ref.item())
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), t.grad.numpy())


def test_cross_entropy_with_every_target_ignored_in_a_compiled_step_leaves_the_weights():
    import tapegrad.nn.functional as F

    a = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    p = tg.Parameter(tg.zeros(4))
    opt = tg.optim.SGD([p], lr=0.5)

    def train_step(x, tgt):
        with tg.Tape() as tape:
            loss = F.cross_entropy(x + p, tgt, ignore_index=1)
        opt.step(tape.gradient(loss))
        return loss

    step = tg.compile(train_step)
    for _ in range(2):
        assert np.isfinite(step(tg.tensor(a), tg.tensor([0, 1, 2])).item())
    before = p.numpy().copy()
    assert np.isnan(step(tg.tensor(a), tg.tensor([1, 1, 1])).item())
    np.testing.assert_array_equal(p.numpy(), before)


INT_CASES = {
    "x / 2": lambda m, x: x / 2,
    "x / x": lambda m, x: x / x,
    "x * 1.5": lambda m, x: x * 1.5,
    "x // 2": lambda m, x: x // 2,
    "x ** 2": lambda m, x: x**2,
    "x ** 0.5": lambda m, x: x**0.5,
    "sum": lambda m, x: x.sum(),
    "int32 sum": lambda m, x: x.int().sum(),
    "bool sum": lambda m, x: (x > 2).sum(),
    "cumsum": lambda m, x: m.cumsum(x, 0),
    "sqrt": lambda m, x: m.sqrt(x),
    "exp": lambda m, x: m.exp(x),
    "sum(dtype=float64)": lambda m, x: x.sum(dtype=m.float64),
    "true_divide": lambda m, x: m.true_divide(x, 2),
    "arange / 2": lambda m, x: m.arange(3) / 2,
    "int + 0-d float tensor": lambda m, x: x + m.tensor(1.5),
    "float row + int row": lambda m, x: x.float()[0] + x[1],
    "int32 + int64": lambda m, x: x.int() + x,
    "float16 * 2": lambda m, x: x.to(m.float16) * 2,
    "zeros(dtype=int32)": lambda m, x: m.zeros(2, dtype=m.int32),
    "full((2,), 3)": lambda m, x: m.full((2,), 3),
}


@pytest.mark.parametrize("case", sorted(INT_CASES))
def test_integer_inputs_promote_as_pytorch(case):
    """Integer tensors: the result dtype (numpy's promotion differs: int / int is float64 there)."""
    a = np.array([[1, 2, 3], [4, 5, 6]])
    f = INT_CASES[case]
    ref, got = f(torch, torch.tensor(a)), f(tg, tg.tensor(a))
    assert str(got.dtype) == str(ref.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.numpy().astype(float), ref.numpy().astype(float), rtol=1e-3)


@pytest.mark.parametrize("decimals", [0, 1, 2, -1])
def test_round_takes_decimals_as_numpy_and_pytorch_with_a_zero_gradient(decimals):
    a = (np.random.default_rng(1).standard_normal((3, 4)) * 50).astype(np.float32)
    t = torch.tensor(a, requires_grad=True)
    ref = torch.round(t, decimals=decimals)
    ref.sum().backward()
    x = tg.tensor(a)
    with tg.Tape() as tape:
        tape.watch(x)
        got = tg.round(x, decimals)
        total = got.sum()
    np.testing.assert_array_equal(got.numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(got.numpy(), np.round(a, decimals))
    np.testing.assert_array_equal(x.round(decimals=decimals).numpy(), got.numpy())
    np.testing.assert_array_equal(tape.gradient(total, x).numpy(), t.grad.numpy())
    with pytest.raises(TypeError, match="round: decimals must be an int"):
        tg.round(x, 1.5)


def test_select_is_pytorchs_with_ints_and_numpys_with_lists():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    t = torch.tensor(a, requires_grad=True)
    torch.select(t, 1, -1).sum().backward()
    x = tg.tensor(a)
    with tg.Tape() as tape:
        tape.watch(x)
        total = tg.select(x, 1, -1).sum()
    np.testing.assert_array_equal(tape.gradient(total, x).numpy(), t.grad.numpy())
    for d, i in [(0, 1), (-1, 0), (2, 3)]:
        ref = torch.select(t, d, i).detach().numpy()
        np.testing.assert_array_equal(tg.select(x, d, i).numpy(), ref)
        np.testing.assert_array_equal(x.select(d, i).numpy(), ref)
        np.testing.assert_array_equal(tg.select(x, dim=d, index=i).numpy(), ref)
    np.testing.assert_array_equal(
        tg.select([x > 5, x > 2], [x, -x], 0.5).numpy(), np.select([a > 5, a > 2], [a, -a], 0.5)
    )
    with pytest.raises(IndexError, match="select: index 5 is out of range for dim 0 of size 2"):
        tg.select(x, 0, 5)
    with pytest.raises(TypeError, match=r"PyTorch's select\(input, dim, index\)"):
        tg.select(x, 0)


@pytest.mark.parametrize(
    ("shape", "index", "raises"),
    [
        ((2, 3), (0, ..., [0, 1]), False),  # the Ellipsis covers no axis: one layout
        ((2, 3, 4), (0, 1, ..., [0, 1]), False),
        ((2, 3, 4), ([0, 1], ..., 0), False),
        ((2, 3, 4), (0, ..., [0, 1]), True),  # numpy (2, 3), PyTorch (3, 2)
        ((2, 3, 4), (slice(None), 0, ..., [0, 1]), True),
        ((2, 3, 4), (0, slice(None), [0, 1]), True),
    ],
)
def test_an_int_and_an_array_raise_only_where_numpy_and_pytorch_lay_them_out_differently(
    shape, index, raises
):
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    x, t = tg.tensor(a), torch.tensor(a)
    tindex = tuple(torch.tensor(i) if isinstance(i, list) else i for i in index)
    if raises:
        assert not np.array_equal(a[index], t[tindex].numpy())
        with pytest.raises(IndexError, match="separated by a slice"):
            x[index]
        with pytest.raises(IndexError, match="separated by a slice"):
            x[index] = tg.tensor(np.ones(a[index].shape, np.float32))
        return
    np.testing.assert_array_equal(x[index].numpy(), t[tindex].numpy())
    np.testing.assert_array_equal(x[index].numpy(), a[index])
    x[index] = tg.tensor(np.full(a[index].shape, -1, np.float32))
    t[tindex] = -1
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_numpys_elementwise_names_mean_what_they_mean_in_numpy():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4)) * 4, rng.standard_normal((3, 4)) + 3
    x, y = tg.tensor(a), tg.tensor(b)
    for name in ("cbrt", "negative", "rint"):
        np.testing.assert_array_equal(getattr(tg, name)(x).numpy(), getattr(np, name)(a))
    for name in ("copysign", "fmod", "mod", "arctan2"):
        np.testing.assert_array_equal(getattr(tg, name)(x, y).numpy(), getattr(np, name)(a, b))
    np.testing.assert_allclose(tg.power(abs(x), y).numpy(), np.power(abs(a), b), rtol=1e-15)
    assert tg.copysign(tg.tensor([1, -2]), tg.tensor([-1, 1])).dtype == tg.float32
    assert tg.copysign(tg.tensor([1.0, -2.0]), tg.tensor([-0.0, 0.0])).tolist() == [-1.0, 2.0]


def test_nansum_and_nanmean_skip_nans_with_pytorchs_gradient():
    a = np.random.default_rng(3).standard_normal((3, 4))
    a[0, 1] = a[2, 3] = np.nan
    for name, kw in [("nansum", {}), ("nansum", {"dim": 0}), ("nanmean", {"dim": 1})]:
        t = torch.tensor(a, requires_grad=True)
        ref = getattr(torch, name)(t, **kw)
        ref.sum().backward()
        x = tg.tensor(a)
        with tg.Tape() as tape:
            tape.watch(x)
            got = getattr(tg, name)(x, **kw)
            total = got.sum()
        np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-14)
        np.testing.assert_allclose(tape.gradient(total, x).numpy(), t.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(tg.nanmean(tg.tensor(a), 0).numpy(), np.nanmean(a, 0), rtol=1e-14)
    a[1] = np.nan  # a row of NaNs: NaN (PyTorch's value), with no 0/0 warning
    got = tg.nanmean(tg.tensor(a), 1).numpy()
    np.testing.assert_array_equal(got, torch.nanmean(torch.tensor(a), 1).numpy())


@pytest.mark.parametrize("n", [3, 4])
def test_median_is_numpys_and_pytorchs_dim_spelling_raises(n):
    a = np.random.default_rng(4).permutation(np.arange(2.0 * n)).reshape(2, n)
    x = tg.tensor(a)
    for kw in [{}, {"axis": 1}, {"axis": 0, "keepdims": True}, {"keepdims": True}]:
        np.testing.assert_array_equal(tg.median(x, **kw).numpy(), np.median(a, **kw))
    with tg.Tape() as tape:
        tape.watch(x)
        total = tg.median(x, 1).sum()
    g = tape.gradient(total, x).numpy()
    ranks = np.argsort(np.argsort(a, 1), 1)
    middle = (ranks == (n - 1) // 2) | (ranks == n // 2)
    np.testing.assert_array_equal(g, middle / middle.sum(1, keepdims=True))
    with pytest.raises(TypeError, match=r"median: .*numpy's median.*PyTorch's median"):
        tg.median(x, dim=1)
    assert tg.ptp(x, 1).tolist() == np.ptp(a, 1).tolist()
