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
