"""PyTorch's spellings of numpy-named ops: dim= / keepdim=, cat, eq..., narrow, view_as, type."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import tapegrad as tg

A = np.random.default_rng(0).uniform(-1, 1, (2, 3, 4))
A.setflags(write=False)  # shared by the tests: none may change it


def _same(got: tg.Tensor, want: torch.Tensor) -> None:
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)


DIM_CASES: list[tuple[str, Callable, Callable]] = [
    ("sum", lambda x: tg.sum(x, dim=1, keepdim=True), lambda t: t.sum(dim=1, keepdim=True)),
    ("mean", lambda x: x.mean(dim=(0, 2)), lambda t: t.mean(dim=(0, 2))),
    ("prod", lambda x: tg.prod(x, dim=2), lambda t: t.prod(dim=2)),
    ("amax", lambda x: tg.amax(x, dim=1, keepdim=True), lambda t: t.amax(dim=1, keepdim=True)),
    ("amin", lambda x: x.amin(dim=0), lambda t: t.amin(dim=0)),
    ("var", lambda x: x.var(dim=1, keepdim=True), lambda t: t.var(dim=1, keepdim=True)),  # PyTorch's default correction
    ("var-fn", lambda x: tg.var(x, dim=1), lambda t: t.var(dim=1)),
    ("var-numpy", lambda x: tg.var(x, axis=1, ddof=0), lambda t: t.var(dim=1, correction=0)),
    ("std", lambda x: tg.std(x, dim=2, ddof=1), lambda t: t.std(dim=2)),
    ("logsumexp", lambda x: tg.logsumexp(x, dim=1), lambda t: t.logsumexp(dim=1)),
    ("cumsum", lambda x: x.cumsum(dim=2), lambda t: t.cumsum(dim=2)),
    ("cumprod", lambda x: tg.cumprod(x, dim=1), lambda t: t.cumprod(dim=1)),
    ("softmax", lambda x: tg.softmax(x, dim=0), lambda t: t.softmax(dim=0)),
    ("log_softmax", lambda x: x.log_softmax(dim=1), lambda t: t.log_softmax(dim=1)),
    ("unsqueeze", lambda x: x.unsqueeze(dim=1), lambda t: t.unsqueeze(dim=1)),
    ("squeeze", lambda x: x[:, :1].squeeze(dim=1), lambda t: t[:, :1].squeeze(dim=1)),
    ("flatten", lambda x: x.flatten(start_dim=1), lambda t: t.flatten(start_dim=1)),
    ("cat", lambda x: tg.cat([x, x], dim=2), lambda t: torch.cat([t, t], dim=2)),
    ("stack", lambda x: tg.stack([x, x], dim=1), lambda t: torch.stack([t, t], dim=1)),
    ("narrow", lambda x: x.narrow(2, 1, 2), lambda t: t.narrow(2, 1, 2)),
    ("narrow/neg", lambda x: tg.narrow(x, -1, -3, 2), lambda t: torch.narrow(t, -1, -3, 2)),
    ("view_as", lambda x: x.view_as(tg.zeros((4, 6))), lambda t: t.view_as(torch.zeros(4, 6))),
]


@pytest.mark.parametrize(("name", "f", "ft"), DIM_CASES, ids=[c[0] for c in DIM_CASES])
def test_torch_spellings_match_torch_with_gradients(name: str, f: Callable, ft: Callable) -> None:
    x = tg.tensor(A)
    with tg.Tape() as tape:
        tape.watch(x)
        y = f(x)
        total = (y * y).sum()
    t = torch.tensor(A, requires_grad=True)
    ty = ft(t)
    (ty * ty).sum().backward()
    _same(y, ty)
    _same(tape.gradient(total, x), t.grad)


def test_comparisons_by_name_match_torch() -> None:
    x, y = tg.tensor(A), tg.tensor(A[::-1].copy())
    t, u = torch.tensor(A), torch.tensor(A[::-1].copy())
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        assert getattr(tg, name)(x, y).tolist() == getattr(torch, name)(t, u).tolist()
        assert getattr(x, name)(0.0).tolist() == getattr(t, name)(0.0).tolist()


def test_dtypes_type_contiguous_and_like_creators() -> None:
    assert tg.float == tg.float32 and tg.long == tg.int64 and tg.double == tg.float64
    x = tg.tensor(A)
    assert x.contiguous() is x
    assert x.type(tg.long).dtype == tg.int64
    with pytest.raises(TypeError, match=r"type: x.type\(\) is PyTorch's legacy type name"):
        x.type()
    assert tg.randn_like(x).shape == x.shape and tg.randn_like(x).dtype == tg.float64
    r = tg.rand_like(tg.zeros((3, 2)))
    assert r.dtype == tg.float32 and float(r.numpy().min()) >= 0.0


def test_dim_and_axis_together_is_an_error() -> None:
    with pytest.raises(TypeError, match="sum: give axis= or dim="):
        tg.sum(tg.tensor(A), axis=0, dim=0)
    with pytest.raises(IndexError, match="narrow: start 3 and length 2 do not fit"):
        tg.narrow(tg.tensor(A), 1, 3, 2)


def test_sort_says_which_meaning() -> None:
    import torch

    a = np.array([[3.0, 1.0, 3.0], [0.0, 2.0, -1.0]], np.float32)
    x, t = tg.tensor(a), torch.tensor(a)
    for kw in ({"dim": 0}, {"dim": -1, "descending": True}, {"dim": 1, "stable": True}):
        v, i = tg.sort(x, **kw)
        tv, ti = torch.sort(t, **kw)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(tg.sort(x, axis=0).numpy(), np.sort(a, axis=0))
    np.testing.assert_array_equal(tg.sort(x, axis=None).numpy(), np.sort(a, axis=None))
    np.testing.assert_array_equal(np.sort(x).numpy(), np.sort(a))  # numpy's own call: numpy's
    for call in (lambda: tg.sort(x), lambda: tg.sort(x, 0)):
        with pytest.raises(TypeError, match=r"sort: .*axis=.* for numpy's, .*dim=.* for PyTorch's"):
            call()
    with pytest.raises(TypeError, match="not both"):
        tg.sort(x, axis=0, dim=0)


def test_gradient_says_which_meaning_on_1d() -> None:
    import torch

    a = np.array([1.0, 2.0, 4.0, 7.0, 11.0])
    x = tg.tensor(a)
    (g,) = tg.gradient(x, dim=0)
    (tgr,) = torch.gradient(torch.tensor(a), dim=0)
    np.testing.assert_allclose(g.numpy(), tgr.numpy())
    (g2,) = tg.gradient(x, spacing=2.0)
    np.testing.assert_allclose(g2.numpy(), torch.gradient(torch.tensor(a), spacing=2.0)[0].numpy())
    np.testing.assert_allclose(tg.gradient(x, axis=0).numpy(), np.gradient(a))
    np.testing.assert_allclose(np.gradient(x).numpy(), np.gradient(a))
    with pytest.raises(TypeError, match=r"gradient: .*axis=0\) for numpy's, .*dim=0\) for PyTorch's"):
        tg.gradient(x)
    m = np.arange(12.0).reshape(3, 4) ** 2
    gs = tg.gradient(tg.tensor(m), dim=1)
    assert isinstance(gs, tuple) and len(gs) == 1
    np.testing.assert_allclose(gs[0].numpy(), torch.gradient(torch.tensor(m), dim=1)[0].numpy())
# --- spellings found running a PyTorch op suite unchanged (tools/torch_suite.py) -------------
def _value_and_grad(f: Callable, ft: Callable, a: np.ndarray) -> None:
    """``f`` on tapegrad and ``ft`` on PyTorch agree in value and in the gradient of the sum."""
    x, t = tg.tensor(a), torch.tensor(a, requires_grad=True)
    with tg.Tape() as tape:
        tape.watch(x)
        out = f(x)
        total = out.sum()
    ref = ft(t)
    _same(out, ref)
    (gt,) = torch.autograd.grad(ref.sum(), t)
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), gt.numpy(), rtol=1e-12, atol=1e-12)


NEW_CASES: list[tuple[str, Callable, Callable]] = [
    ("acos", lambda x: (x * 0.9).acos(), lambda t: (t * 0.9).acos()),
    ("asin", lambda x: tg.asin(x * 0.9), lambda t: torch.asin(t * 0.9)),
    ("atan", lambda x: x.atan(), lambda t: t.atan()),
    ("acosh", lambda x: (x * x + 1.5).acosh(), lambda t: (t * t + 1.5).acosh()),
    ("asinh", tg.asinh, torch.asinh),
    ("atanh", lambda x: (x * 0.9).atanh(), lambda t: (t * 0.9).atanh()),
    ("cosh-sinh-exp2", lambda x: x.cosh() + x.sinh() + x.exp2(), lambda t: t.cosh() + t.sinh() + t.exp2()),
    ("neg-mul-fmod", lambda x: x.neg().mul(3.0).fmod(0.7), lambda t: t.neg().mul(3.0).fmod(0.7)),
    ("div", lambda x: x.div(x + 3.0), lambda t: t.div(t + 3.0)),
    ("div-trunc", lambda x: x.div(0.3, rounding_mode="trunc"), lambda t: t.div(0.3, rounding_mode="trunc")),
    ("div-floor", lambda x: x.div(0.3, rounding_mode="floor"), lambda t: t.div(0.3, rounding_mode="floor")),
    ("lerp", lambda x: x.lerp(x * x, 0.3), lambda t: t.lerp(t * t, 0.3)),
    ("masked_select", lambda x: x.masked_select(x[0] > 0), lambda t: t.masked_select(t[0] > 0)),
    ("cummax", lambda x: tg.cummax(x, dim=2).values, lambda t: torch.cummax(t, dim=2).values),
    ("cummin", lambda x: x.cummin(1)[0], lambda t: t.cummin(1)[0]),
    ("std_mean", lambda x: tg.stack(tg.std_mean(x, dim=1)), lambda t: torch.stack(torch.std_mean(t, dim=1))),
    ("std_mean-axis", lambda x: tg.stack(tg.std_mean(x, axis=(0, 2), correction=0)),
     lambda t: torch.stack(torch.std_mean(t, axis=(0, 2), correction=0))),
    ("unflatten", lambda x: x.unflatten(2, (2, -1)), lambda t: t.unflatten(2, (2, -1))),
    ("gather", lambda x: x.gather(2, tg.tensor([[[3, 0], [1, 1]]])), lambda t: t.gather(2, torch.tensor([[[3, 0], [1, 1]]]))),
    ("sort", lambda x: x.sort(1, descending=True).values, lambda t: t.sort(1, descending=True).values),
    ("expand", lambda x: x[:, :1].expand(4, -1, 3, -1), lambda t: t[:, :1].expand(4, -1, 3, -1)),
    ("diagonal", lambda x: x.diagonal(1, 1, 2), lambda t: t.diagonal(1, 1, 2)),
    ("diag", lambda x: x[0].diag(1), lambda t: t[0].diag(1)),
    ("where", lambda x: x.where(x > 0, -x), lambda t: t.where(t > 0, -t)),
]  # fmt: skip


@pytest.mark.parametrize("name,f,ft", NEW_CASES, ids=[c[0] for c in NEW_CASES])
def test_new_pytorch_functions_equal_torch_with_gradients(name: str, f: Callable, ft: Callable) -> None:
    _value_and_grad(f, ft, A.copy())


def test_new_pytorch_functions_without_gradients_equal_torch() -> None:
    x, t = tg.tensor(A), torch.tensor(A)
    for g, gt in (
        (x.argsort(dim=1, descending=True), t.argsort(dim=1, descending=True)),
        (x.sort(-1).indices, t.sort(-1).indices),
        (tg.cummax(x, 0).indices, torch.cummax(t, 0).indices),
        (x.isclose(x + 1e-9), t.isclose(t + 1e-9)),
        (tg.bitwise_not(tg.tensor([1, -2])), torch.bitwise_not(torch.tensor([1, -2]))),
        (tg.tensor([1, 2]) << 3, torch.tensor([1, 2]) << 3),
        (tg.tensor([-9, 9]) >> 1, torch.tensor([-9, 9]) >> 1),
        (tg.tensor([-7, 7]).div(2, rounding_mode="trunc"), torch.tensor([-7, 7]).div(2, rounding_mode="trunc")),
    ):  # fmt: skip
        assert g.tolist() == gt.tolist() and str(g.dtype) == str(gt.dtype).split(".")[-1]
    # ties: argsort keeps the order (PyTorch's stable=True); cummax points at the latest tie
    ties = [0.0, 1.0, 1.0, 0.0, 1.0]
    assert tg.tensor(ties).argsort(descending=True).tolist() == torch.tensor(ties).argsort(
        descending=True, stable=True).tolist()  # fmt: skip
    assert tg.cummax(tg.tensor(ties), 0).indices.tolist() == torch.cummax(torch.tensor(ties), 0).indices.tolist()
    nan = [1.0, float("nan"), 3.0, float("nan")]
    assert tg.cummin(tg.tensor(nan), 0).indices.tolist() == torch.cummin(torch.tensor(nan), 0).indices.tolist()
    assert x.half().dtype == tg.float16 and x.cpu().shape == x.shape
    with pytest.raises(IndexError):
        tg.cummax(tg.tensor(1.0), dim=1)  # PyTorch: IndexError too


def test_max_min_axis_keyword_raises_naming_both() -> None:
    # PyTorch reads axis= as dim= and returns (values, indices); numpy returns the values
    a = tg.tensor(A)
    assert isinstance(torch.tensor(A).max(axis=1), tuple)
    for call in (lambda: a.max(axis=1), lambda: tg.min(a, axis=0), lambda: a.max(axis=1, keepdims=True)):
        with pytest.raises(TypeError, match=r"numpy and a \(values, indices\) pair in PyTorch.*amax|amin"):
            call()
    _same(a.amax(axis=1), torch.tensor(A).max(axis=1).values)


def test_integer_to_a_negative_integer_power_raises_like_torch() -> None:
    with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
        torch.tensor([2, 3]) ** -2
    with pytest.raises(RuntimeError, match=r"negative integer power -2.*x.float\(\) \*\* -2"):
        tg.tensor([2, 3]) ** -2
    with pytest.raises(ValueError):  # numpy raises ValueError: the error is both
        tg.tensor([2, 3], dtype=tg.int32) ** -1
    _same(tg.tensor([2.0, 4.0]) ** -2, torch.tensor([2.0, 4.0], dtype=torch.float64) ** -2)


@pytest.mark.parametrize("mode", ["circular", "replicate", "reflect"])
def test_pad_negative_widths_crop_like_torch(mode: str) -> None:
    import tapegrad.nn.functional as F  # noqa: PLC0415

    x = A[:, :3, :4].copy().reshape(1, 2, 3, 4)
    for pad in [(1, -2, 2, -1), (-1, 2, 1, -1), (0, 0, 0, -2), (2, 1, 0, 0)]:
        _value_and_grad(lambda v, p=pad: F.pad(v, p, mode=mode),
                        lambda t, p=pad: torch.nn.functional.pad(t, p, mode=mode), x)  # fmt: skip


def test_circular_pad_that_wraps_twice_raises() -> None:
    import tapegrad.nn.functional as F  # noqa: PLC0415

    with pytest.raises(RuntimeError):
        torch.nn.functional.pad(torch.ones(1, 1, 5, 5), (3, 6, 0, 0), mode="circular")
    for pad in [(3, 6, 0, 0), (2, -4, 0, 0)]:  # PyTorch leaves the second's values undefined
        with pytest.raises(ValueError, match="more than once"):
            F.pad(tg.ones((1, 1, 5, 5)), pad, mode="circular")


def test_linspace_bool_and_creation_keywords_like_torch() -> None:
    with pytest.raises(RuntimeError):
        torch.linspace(5, 10, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="bool"):
        tg.linspace(5, 10, 3, dtype=tg.bool)
    r = tg.randint(high=3, size=(2, 4), requires_grad=False)
    assert r.shape == (2, 4) and r.dtype == tg.int64 and 0 <= r.numpy().min() and r.numpy().max() < 3
    assert isinstance(tg.zeros_like(tg.ones(2), requires_grad=True), tg.Parameter)
    assert isinstance(tg.full_like(tg.ones(2), 3.0, requires_grad=True), tg.Parameter)
    assert not isinstance(tg.ones_like(tg.ones(2), requires_grad=False), tg.Parameter)


def test_bad_arguments_raise_pytorch_runtime_error_and_numpy_value_error() -> None:
    """Code written for either library catches the error: both types, as each library raises."""
    import tapegrad.nn.functional as F  # noqa: PLC0415

    x, t = tg.tensor(A), torch.tensor(A)
    calls = [
        (lambda m, v: v.permute((0, 2)), RuntimeError),
        (lambda m, v: v.flip((1, 1)), RuntimeError),
        (lambda m, v: v.roll((1, 2)), RuntimeError),
        (lambda m, v: v.roll(shifts=1, dims=(0, 1)), RuntimeError),
        (lambda m, v: v[0, 0].matmul(v[:, :2, 0]), RuntimeError),
        (lambda m, v: v.diagonal(dim1=0, dim2=0), RuntimeError),
        (lambda m, v: v.clip(None, None), RuntimeError),
        (lambda m, v: v.div(v, rounding_mode="typo"), RuntimeError),
        (lambda m, v: v.unfold(2, 9, 1), RuntimeError),
        (lambda m, v: m.tensor([1.0]) << 2, RuntimeError),
        (lambda m, v: m.einsum("ij,jk->ik", [v[0], v[1]]), RuntimeError),
    ]
    for call, err in calls:
        with pytest.raises(err):
            call(torch, t)
        with pytest.raises(err):
            call(tg, x)
    with pytest.raises(ValueError):  # numpy's type is kept
        tg.permute_dims(x, (0, 0, 1))
    for f in (F.conv2d, torch.nn.functional.conv2d):  # the kernel is larger than the input
        with pytest.raises(RuntimeError):
            f((tg if f is F.conv2d else torch).ones((1, 1, 3, 3)),
              (tg if f is F.conv2d else torch).ones((1, 1, 5, 5)))  # fmt: skip


def test_more_pytorch_spellings_equal_torch() -> None:
    a = A.astype(np.float32)
    x, t = tg.tensor(a), torch.tensor(a)
    # view(dtype): the same bytes read as another dtype
    assert x.view(tg.int32).tolist() == t.view(torch.int32).tolist()
    assert x.view(6, 4).shape == (6, 4)
    # softmax of a 0-d tensor
    _same(tg.softmax(tg.tensor(2.0, dtype=tg.float64), dim=0), torch.softmax(torch.tensor(2.0, dtype=torch.float64), 0))
    # einsum with a list of operands (PyTorch's form)
    _same(tg.einsum("ij,ij->i", [tg.tensor(A[0]), tg.tensor(A[1])]),
          torch.einsum("ij,ij->i", [torch.tensor(A[0]), torch.tensor(A[1])]))  # fmt: skip
    # argsort with PyTorch's keywords, as a function too; numpy's form keeps its meaning
    assert tg.argsort(x, dim=1, descending=True).tolist() == torch.argsort(t, dim=1, descending=True).tolist()
    assert tg.argsort(x, None).tolist() == np.argsort(a, None, kind="stable").tolist()
    # roll: one shift per dim, as PyTorch's keywords ask
    _same(tg.tensor(A).roll(shifts=(1, 2), dims=(0, 2)), torch.tensor(A).roll(shifts=(1, 2), dims=(0, 2)))
    for args in [(0, 2, 1), (2, 2, 2), (1, 0, 3), (-1, 3, 1)]:
        _value_and_grad(lambda v, a_=args: v.unfold(*a_), lambda v, a_=args: v.unfold(*a_), A.copy())


def test_logcumsumexp_values_and_gradients_equal_torch_at_the_edges() -> None:
    _value_and_grad(lambda v: tg.logcumsumexp(v, dim=2), lambda v: torch.logcumsumexp(v, 2), A.copy())
    for a in ([[-np.inf, -np.inf, 1.0]], [[1.0, np.inf, 2.0]], [[1000.0, -1000.0, 3.0]]):
        x, t = tg.tensor(np.array(a)), torch.tensor(np.array(a), requires_grad=True)
        with tg.Tape() as tape:
            tape.watch(x)
            y = x.logcumsumexp(1)
            total = y.sum()
        ref = torch.logcumsumexp(t, 1)
        (gt,) = torch.autograd.grad(ref.sum(), t)
        np.testing.assert_array_equal(y.numpy(), ref.detach().numpy())
        np.testing.assert_allclose(tape.gradient(total, x).numpy(), gt.numpy(), rtol=1e-12)
    x = tg.tensor(A)
    with tg.Tape() as outer:  # no second derivative: an error, never a wrong number
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            total = tg.logcumsumexp(x, 1).sum()
        with pytest.raises(NotImplementedError, match="second derivative"):
            inner.gradient(total, x)
