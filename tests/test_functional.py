"""tg.grad and tg.value_and_grad: argnums, has_aux, Module arguments, nesting; against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg


def f64(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def tt(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def close(a: tg.Tensor, b: torch.Tensor) -> None:
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


class MLP(tg.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = tg.Parameter(f64(3, 4, seed=1))
        self.b1 = tg.Parameter(f64(4, seed=2))
        self.w2 = tg.Parameter(f64(4, 1, seed=3))
        self.spare = tg.Parameter(f64(2, seed=4))  # never used
        self.frozen = tg.Parameter(f64(1, seed=5), requires_grad=False)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return tg.tanh(x @ self.w1 + self.b1) @ self.w2 + self.frozen


def torch_mlp(m: MLP):
    ps = {k: tt(getattr(m, k).numpy()) for k in ("w1", "b1", "w2")}
    frozen = torch.tensor(m.frozen.numpy())
    return ps, lambda x: torch.tanh(x @ ps["w1"] + ps["b1"]) @ ps["w2"] + frozen


def test_grad_of_a_tensor_argument():
    xa = f64(5)
    g = tg.grad(lambda x: (tg.sin(x) * x).sum())(tg.tensor(xa))
    tx = tt(xa)
    (r,) = torch.autograd.grad((torch.sin(tx) * tx).sum(), tx)
    close(g, r)


def test_arrays_and_numbers_are_accepted():
    g = tg.grad(lambda x: (x * x).sum())(np.array([1.0, 2.0]))
    assert g.dtype == np.float64 and g.tolist() == [2.0, 4.0]
    assert tg.grad(lambda x: x * x)(3.0).item() == 6.0


@pytest.mark.parametrize("argnums", [1, -1, (0, 1), (1, 0)])
def test_argnums_int_and_tuple(argnums):
    xa, ya = f64(3), f64(3, seed=1)
    f = lambda x, y: (x * tg.exp(y)).sum()  # noqa: E731
    g = tg.grad(f, argnums=argnums)(tg.tensor(xa), tg.tensor(ya))
    tx, ty = tt(xa), tt(ya)
    rx, ry = torch.autograd.grad((tx * torch.exp(ty)).sum(), (tx, ty))
    if isinstance(argnums, int):
        close(g, ry)
    else:
        assert isinstance(g, tuple) and len(g) == 2
        refs = {0: rx, 1: ry}
        for gi, n in zip(g, argnums):
            close(gi, refs[n])


def test_value_and_grad_returns_the_value():
    xa = f64(4)
    v, g = tg.value_and_grad(lambda x: (x**2).sum())(tg.tensor(xa))
    assert v.item() == pytest.approx((xa**2).sum())
    np.testing.assert_allclose(g.numpy(), 2 * xa)


def test_has_aux():
    xa = f64(4)

    def f(x):
        y = x * 3.0
        return y.sum(), {"y": y, "n": 4}

    (v, aux), g = tg.value_and_grad(f, has_aux=True)(tg.tensor(xa))
    assert aux["n"] == 4 and np.allclose(aux["y"].numpy(), 3 * xa)
    np.testing.assert_allclose(g.numpy(), 3.0)
    g2, aux2 = tg.grad(f, has_aux=True)(tg.tensor(xa))
    np.testing.assert_allclose(g2.numpy(), 3.0)
    assert aux2["n"] == 4


def test_module_argument_gives_gradients_over_its_parameters():
    m = MLP()
    xa = f64(6, 3, seed=9)
    loss_fn = lambda model, x: (model(x) ** 2).mean()  # noqa: E731
    v, g = tg.value_and_grad(loss_fn)(m, tg.tensor(xa))
    assert isinstance(g, tg.Gradients)
    assert set(g.keys()) == {m.w1, m.b1, m.w2}
    ps, tf = torch_mlp(m)
    tl = (tf(torch.tensor(xa)) ** 2).mean()
    refs = torch.autograd.grad(tl, list(ps.values()))
    assert v.item() == pytest.approx(tl.item(), rel=1e-12)
    for (name, _), r in zip(ps.items(), refs):
        close(g[getattr(m, name)], r)
    assert set(g.named(m)) == {"w1", "b1", "w2"}
    # the unused parameter is reported; the frozen one is expected to have none
    assert list(g.missing(m)) == ["spare"]
    assert "no path leads from it to the target" in g.missing(m)["spare"]


def test_module_and_tensor_arguments_together_in_one_pass():
    m = MLP()
    xa = f64(6, 3, seed=9)
    gm, gx = tg.grad(lambda model, x: model(x).sum(), argnums=(0, 1))(m, tg.tensor(xa))
    ps, tf = torch_mlp(m)
    tx = tt(xa)
    refs = torch.autograd.grad(tf(tx).sum(), [*ps.values(), tx])
    close(gm[m.w1], refs[0])
    close(gx, refs[-1])


def test_parameters_not_in_argnums_are_not_differentiated():
    w = tg.Parameter(f64(3))
    g = tg.grad(lambda x: (x * w).sum())(tg.tensor(f64(3, seed=1)))
    np.testing.assert_allclose(g.numpy(), w.numpy())
    gw = tg.grad(lambda p: (p * p).sum())(w)  # a Parameter argument gives a Tensor
    np.testing.assert_allclose(gw.numpy(), 2 * w.numpy())
    assert w._tapes == ()  # nothing left behind


def test_unused_argument_gets_zeros():
    g = tg.grad(lambda x, y: (x * 2.0).sum(), argnums=(0, 1))(tg.tensor(f64(2)), tg.tensor(f64(3)))
    np.testing.assert_allclose(g[0].numpy(), 2.0)
    np.testing.assert_array_equal(g[1].numpy(), np.zeros(3))


def test_constant_function_gives_zeros():
    g = tg.grad(lambda x: tg.tensor(1.0))(tg.tensor(f64(3)))
    np.testing.assert_array_equal(g.numpy(), np.zeros(3))


def test_nested_grad_second_derivative():
    xa = f64(4)
    d2 = tg.grad(lambda x: tg.grad(lambda y: (tg.sin(y) * y).sum())(x).sum())(tg.tensor(xa))
    np.testing.assert_allclose(d2.numpy(), 2 * np.cos(xa) - xa * np.sin(xa), rtol=1e-12)


def test_grad_inside_an_outer_tape_is_recorded():
    xa = f64(3)
    x = tg.tensor(xa)
    with tg.Tape() as outer:
        outer.watch(x)
        g = tg.grad(lambda y: (y**3).sum())(x)  # 3 x^2, recorded on outer
        s = g.sum()
    np.testing.assert_allclose(outer.gradient(s, x).numpy(), 6 * xa)


def test_gradient_penalty_through_grad_matches_torch():
    m = MLP()
    xa = f64(5, 3, seed=2)

    def penalty(model):
        gx = tg.grad(lambda x: model(x).sum())(tg.tensor(xa))
        return (gx * gx).sum()

    g = tg.grad(penalty)(m)
    ps, tf = torch_mlp(m)
    tx = tt(xa)
    (tgx,) = torch.autograd.grad(tf(tx).sum(), tx, create_graph=True)
    refs = torch.autograd.grad((tgx * tgx).sum(), list(ps.values()))
    for (name, _), r in zip(ps.items(), refs):
        close(g[getattr(m, name)], r)


# -- errors ------------------------------------------------------------------------------------


def test_errors():
    with pytest.raises(ValueError, match=r"argnums=2 but the function was called with 1"):
        tg.grad(lambda x: x.sum(), argnums=2)(tg.ones(3))
    with pytest.raises(ValueError, match="names an argument twice"):
        tg.grad(lambda x: x.sum(), argnums=(0, -1))(tg.ones(3))
    with pytest.raises(TypeError, match=r"argument 0 has dtype int64 \(shape \(3,\)\).*argnums"):
        tg.grad(lambda x: x.sum())(tg.tensor(np.arange(3)))
    with pytest.raises(TypeError, match=r"scalar Tensor.*shape \(3,\).*output_gradients"):
        tg.grad(lambda x: x * 2.0)(tg.ones(3))
    with pytest.raises(TypeError, match="has_aux=True"):
        tg.grad(lambda x: (x.sum(), 1))(tg.ones(3))
    with pytest.raises(TypeError, match=r"must return a pair \(value, aux\)"):
        tg.grad(lambda x: x.sum(), has_aux=True)(tg.ones(3))
