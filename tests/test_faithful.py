"""A PyTorch spelling that tapegrad accepts means what it means in PyTorch, or raises.

Each test compares with torch (the oracle) on the call a PyTorch user writes.
"""

from __future__ import annotations

import warnings

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


# --- writes that bypass the tape -----------------------------------------------------------------
def test_numpy_on_a_recording_tape_raises_like_torch() -> None:
    w = tg.Parameter(np.array([0.5, -1.0]))
    with tg.Tape():
        with pytest.raises(RuntimeError, match=r"x\.detach\(\)\.numpy\(\)"):
            tg.tensor(np.tanh(w.numpy()))  # would drop this path from the gradient
        y = w * 2
        with pytest.raises(RuntimeError, match="requires grad"):
            y.numpy()
        assert y.detach().numpy().tolist() == [1.0, -2.0]  # leaving on purpose
        assert w.data.numpy().tolist() == [0.5, -1.0]
        assert y.tolist() == [1.0, -2.0] and "tensor" in repr(y)  # reading stays possible
        with tg.no_grad():
            assert w.numpy().tolist() == [0.5, -1.0]
    tw = torch.tensor([0.5, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        tw.numpy()


def test_write_through_numpy_between_forward_and_gradient_is_refused() -> None:
    w = tg.Parameter(np.array([1.0, 2.0]))
    with tg.Tape() as tape:
        loss = (w * w).sum()
    a = w.numpy()
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[:] = 5.0
    x = tg.tensor([1.0, 2.0])
    with tg.Tape() as t2:
        t2.watch(x)
        y = (x * x).sum()
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[:] = 5.0
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), [2.0, 4.0])  # not 10
    np.testing.assert_array_equal(t2.gradient(y, x).numpy(), [2.0, 4.0])
    x.numpy()[:] = 5.0  # the tape is released: nothing can be wrong any more
    assert x.tolist() == [5.0, 5.0]
    w.copy_(tg.tensor([3.0, 3.0]))  # the way to write a parameter: the tape sees it
    assert w.tolist() == [3.0, 3.0]


def test_write_through_data_is_seen_by_the_version_check() -> None:
    w = tg.Parameter(np.array([1.0, 2.0]))
    with tg.Tape() as tape:
        w.data.mul_(3.0)  # before any op saved w: harmless, as in PyTorch
        loss = (w * w).sum()
    w.data[0] = 10.0  # after: the tape saved w's old values
    with pytest.raises(RuntimeError, match="modified|changed|version|in place"):
        tape.gradient(loss, w)
    v = tg.Parameter(np.array([1.0, 2.0]))
    with tg.Tape() as tape:
        loss = (v * v).sum()
    with pytest.raises(ValueError, match="read-only"):
        v.data.numpy()[:] = 0.0
    np.testing.assert_array_equal(tape.gradient(loss, v).numpy(), [2.0, 4.0])


# --- errors that teach the tape ------------------------------------------------------------------
def test_pytorch_training_loop_spellings_show_the_tapegrad_line() -> None:
    model = tg.nn.Linear(2, 1)
    opt = tg.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match=r"opt\.step\(grads\)"):
        opt.zero_grad()
    with pytest.raises(TypeError, match=r"tape\.gradient\(loss, model\)"):
        opt.step()
    with pytest.raises(AttributeError, match=r"grads\[p\]"):
        model.weight.grad
    with tg.Tape():
        loss = model(tg.ones((3, 2))).sum()
    grads = loss.backward()
    with pytest.raises(AttributeError, match=r"loss\.backward\(\)"):
        model.weight.grad
    assert not hasattr(model.weight, "grad")
    opt.step(grads)


def test_tensor_requires_grad_true_is_watched_like_torch() -> None:
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert isinstance(x, tg.Parameter)
    with tg.Tape() as tape:
        y = (x**2).sum()
    tx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (tx**2).sum().backward()
    np.testing.assert_allclose(tape.gradient(y)[x].numpy(), tx.grad.numpy())
    with pytest.raises(TypeError, match="only float"):
        tg.tensor([1, 2], requires_grad=True)
    assert not isinstance(tg.tensor([1.0]), tg.Parameter)


def test_single_source_gradient_indexed_by_its_source_explains() -> None:
    w = tg.Parameter(np.array([1.0, 2.0]))
    with tg.Tape() as tape:
        loss = (w * w).sum()
    g = tape.gradient(loss, w)
    assert g.tolist() == [2.0, 4.0]  # shaped like the sources: w's gradient itself
    with pytest.raises(IndexError, match=r"pass a list \[w\]"):
        g[w]


# --- dtype discipline ----------------------------------------------------------------------------
_LAYERS = {
    "Linear": (lambda: tg.nn.Linear(3, 2), lambda: torch.nn.Linear(3, 2), (4, 3)),
    "Conv1d": (lambda: tg.nn.Conv1d(3, 2, 1), lambda: torch.nn.Conv1d(3, 2, 1), (1, 3, 5)),
    "Conv2d": (lambda: tg.nn.Conv2d(3, 2, 1), lambda: torch.nn.Conv2d(3, 2, 1), (1, 3, 4, 4)),
    "ConvTranspose2d": (
        lambda: tg.nn.ConvTranspose2d(3, 2, 2),
        lambda: torch.nn.ConvTranspose2d(3, 2, 2),
        (1, 3, 4, 4),
    ),
    "RNN": (lambda: tg.nn.RNN(3, 2), lambda: torch.nn.RNN(3, 2), (5, 1, 3)),
    "LSTM": (lambda: tg.nn.LSTM(3, 2), lambda: torch.nn.LSTM(3, 2), (5, 1, 3)),
    "GRUCell": (lambda: tg.nn.GRUCell(3, 2), lambda: torch.nn.GRUCell(3, 2), (1, 3)),
    "LayerNorm": (lambda: tg.nn.LayerNorm(3), lambda: torch.nn.LayerNorm(3), (2, 3)),
    "BatchNorm1d": (lambda: tg.nn.BatchNorm1d(3), lambda: torch.nn.BatchNorm1d(3), (2, 3)),
    "GroupNorm": (lambda: tg.nn.GroupNorm(1, 3), lambda: torch.nn.GroupNorm(1, 3), (2, 3, 2)),
    "MultiheadAttention": (
        lambda: tg.nn.MultiheadAttention(4, 2),
        lambda: torch.nn.MultiheadAttention(4, 2),
        (3, 1, 4),
    ),
}


def _call(layer: object, x: object, name: str) -> object:
    return layer(x, x, x) if name == "MultiheadAttention" else layer(x)  # type: ignore[operator]


@pytest.mark.parametrize("name", sorted(_LAYERS))
def test_float64_input_into_float32_layer_raises_like_torch(name: str) -> None:
    make, make_torch, shape = _LAYERS[name]
    a = np.ones(shape)
    with pytest.raises((RuntimeError, ValueError)):  # the oracle: PyTorch refuses the mix too
        _call(make_torch(), torch.tensor(a), name)
    layer = make()
    with pytest.raises(TypeError, match=r"float64.*float32.*x\.float\(\).*model\.double\(\)"):
        _call(layer, tg.tensor(a), name)
    _call(layer, tg.tensor(a, dtype=tg.float32), name)  # the fixes work
    _call(layer.double(), tg.tensor(a), name)
    with pytest.raises(TypeError, match=r"float32.*float64.*x\.double\(\)"):
        _call(layer, tg.tensor(a, dtype=tg.float32), name)


# --- feature dropout's input ranks ---------------------------------------------------------------
def _varying_axes(y: np.ndarray) -> list[int]:
    """The axes along which the keep mask changes (a mask shared along an axis is constant)."""
    m = y != 0
    return [d for d in range(m.ndim) if not (m == m.take([0], axis=d)).all()]


_RANKS = [
    # name, shape, axes the mask varies over (PyTorch 2.13), warns
    ("dropout1d", (8, 6), [0], False),
    ("dropout1d", (4, 6, 5), [0, 1], False),
    ("dropout2d", (40, 6), [0, 1], True),  # (N, C): element-wise, with PyTorch's warning
    ("dropout2d", (8, 6, 5), [0, 1], True),  # (N, C, L), not (C, H, W)
    ("dropout2d", (4, 6, 2, 2), [0, 1], False),
    ("dropout2d", (2, 6, 2, 2, 2), [0, 1], True),
    ("dropout3d", (40, 6), [0], True),
    ("dropout3d", (6, 2, 2, 2), [0], False),
    ("dropout3d", (3, 6, 2, 2, 2), [0, 1], False),
]


@pytest.mark.parametrize("name,shape,axes,warns", _RANKS, ids=lambda v: str(v).replace(" ", ""))
def test_feature_dropout_ranks_as_torch(name: str, shape: tuple, axes: list, warns: bool) -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as tw:
        warnings.simplefilter("always")
        ref = getattr(torch.nn.functional, name)(torch.ones(shape), 0.5, True).numpy()
    assert _varying_axes(ref) == axes and bool(tw) == warns  # the oracle says so
    tg.manual_seed(0)
    f = getattr(tg.nn.functional, name)
    if warns:
        with pytest.warns(UserWarning, match=f"{name}: Received a"):
            y = f(tg.ones(shape), 0.5, True).numpy()
    else:
        y = f(tg.ones(shape), 0.5, True).numpy()
    assert _varying_axes(y) == axes
    assert set(np.unique(y)) == {0.0, 2.0}


def test_dropout2d_on_n_c_drops_elements_not_rows() -> None:
    tg.manual_seed(1)
    with pytest.warns(UserWarning, match="2-D input"):
        y = tg.nn.Dropout2d(0.5)(tg.ones((200, 8))).numpy()
    assert (y == 0).all(axis=1).mean() < 0.05  # whole rows dropped only by chance (0.4%)
    assert 0.4 < (y == 0).mean() < 0.6
    for name, shape in (("dropout1d", (6,)), ("dropout1d", (2, 2, 2, 2)), ("dropout2d", (6,))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dropout2d warns, then raises, in both
            with pytest.raises(RuntimeError, match=name):
                getattr(tg.nn.functional, name)(tg.ones(shape), 0.5)
            with pytest.raises(RuntimeError):
                getattr(torch.nn.functional, name)(torch.ones(shape), 0.5)


# --- functions PyTorch code calls ----------------------------------------------------------------
def _grad_of(f, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """``f``'s value and the gradient of ``sum(f(x) * weights)`` in tapegrad and in torch."""
    w = tg.Parameter(a)
    with tg.Tape() as tape:
        y = f(w, tg)
        loss = (y * tg.tensor(np.arange(1.0, 1.0 + y.size).reshape(y.shape))).sum()
    tx = torch.tensor(a, requires_grad=True)
    ty = f(tx, torch)
    (ty * torch.arange(1.0, 1.0 + ty.numel(), dtype=torch.float64).reshape(ty.shape)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), tx.grad.numpy(), rtol=1e-10)
    return y.detach().numpy(), tape


@pytest.mark.parametrize(
    "f",
    [
        lambda x, m: x.norm(p=2, dim=1),
        lambda x, m: x.norm(p=1, dim=0, keepdim=True),
        lambda x, m: x.norm(p=3),
        lambda x, m: x.norm(),
        lambda x, m: m.mm(x, x.T),
        lambda x, m: x.mm(x.T),
        lambda x, m: x.index_select(1, m.tensor([2, 0, 2])),
        lambda x, m: m.index_select(x, 0, m.tensor([1])),
        lambda x, m: x.masked_fill(x > 0.5, -1.0),
        lambda x, m: m.topk(x, 2)[0],
        lambda x, m: m.topk(x, 1, dim=0, largest=False).values,
        lambda x, m: x.topk(2, dim=1).values,
        lambda x, m: x.index_add(0, m.tensor([1, 1, 0]), x[[0, 1, 0]] * 2),
        lambda x, m: x.scatter_add(1, m.tensor([[0, 0], [2, 1]]), x[:, :2]),
        lambda x, m: m.repeat_interleave(x, 2, dim=1),
    ],
)
def test_missing_functions_equal_torch_with_gradients(f) -> None:  # type: ignore[no-untyped-def]
    a = np.array([[0.3, -1.2, 0.9], [2.0, 0.7, -0.4]])
    _grad_of(f, a)


def test_topk_indices_numel_dim_and_constructors() -> None:
    a = np.array([[0.3, -1.2, 0.9], [2.0, 0.7, -0.4]])
    v, i = tg.topk(tg.tensor(a), 2, dim=1)
    tv, ti = torch.topk(torch.tensor(a), 2, dim=1)
    assert i.tolist() == ti.tolist() and i.dtype == tg.int64
    x = tg.tensor(a)
    assert x.numel() == torch.tensor(a).numel() == 6 and x.dim() == 2
    t = tg.Tensor(3, 4)
    assert t.shape == (3, 4) and t.dtype == tg.float32 and t.shape == tuple(torch.Tensor(3, 4).shape)
    assert tg.Tensor(2, 3, 4).shape == (2, 3, 4)


def test_randperm_and_multinomial() -> None:
    tg.manual_seed(0)
    p = tg.randperm(10)
    assert sorted(p.tolist()) == list(range(10)) and p.dtype == tg.int64
    tg.manual_seed(0)
    assert tg.randperm(10).tolist() == p.tolist()  # the global seed makes it repeatable
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    draws = tg.multinomial(tg.tensor(probs), 20000, replacement=True).numpy()
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 20000, probs, atol=0.02)
    rows = tg.multinomial(tg.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 5.0, 1.0]]), 2)
    assert rows.shape == (2, 2) and rows.dtype == tg.int64
    for row, w in zip(rows.tolist(), ([1, 0, 1, 1], [0, 0, 5, 1]), strict=True):
        assert len(set(row)) == 2 and all(w[j] > 0 for j in row)  # no repeats, no zero weights
    assert tg.multinomial(tg.tensor([1.0, 0.0, 0.0]), 3).tolist() == [0, 1, 2]
    assert torch.multinomial(torch.tensor([1.0, 0.0, 0.0]), 3).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="without replacement"):
        tg.multinomial(tg.tensor([1.0, 0.0]), 3)
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([1.0, 0.0]), 3)


# --- results a PyTorch op suite found different ------------------------------------------------
@pytest.mark.parametrize("e", [0.0, -1.0, -0.5, 0.5, 2.0, -2.0, 1.5])
def test_pow_values_and_gradients_at_zero_equal_torch(e: float) -> None:
    xs = np.array([0.0, -0.0, 2.0, -2.0, 0.5])
    with np.errstate(all="ignore"):
        for tensor_exponent in (False, True):
            x = tg.Parameter(xs.copy())
            y = tg.Parameter(np.full(xs.shape, e))
            with tg.Tape() as tape:
                out = x ** (y if tensor_exponent else e)
            grads = tape.gradient(out, [x, y], output_gradients=tg.ones(xs.shape, dtype=tg.float64))
            tx = torch.tensor(xs, requires_grad=True)
            ty = torch.tensor(np.full(xs.shape, e), requires_grad=True)
            tout = tx ** (ty if tensor_exponent else e)
            tout.backward(torch.ones(xs.shape, dtype=torch.float64))
            same = np.testing.assert_array_equal  # inf, -inf and nan included
            same(out.detach().numpy(), tout.detach().numpy())
            same(grads[0].numpy(), tx.grad.numpy())
            if tensor_exponent:
                same(grads[1].numpy(), ty.grad.numpy())


def test_max_min_dim_pair_other_tensor_and_ambiguous_int() -> None:
    a = np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]])
    for name in ("max", "min"):
        for f in (getattr(tg, name), lambda x, *a, _n=name, **k: getattr(x, _n)(*a, **k)):
            v, i = f(tg.tensor(a), dim=1)
            tv, ti = getattr(torch, name)(torch.tensor(a), dim=1)
            _same(v, tv)
            assert i.tolist() == ti.tolist()
            v, i = f(tg.tensor(a), dim=0, keepdim=True)
            assert v.shape == (1, 3) and i.shape == (1, 3)
            _same(f(tg.tensor(a), tg.tensor(a[::-1].copy())),
                  getattr(torch, name)(torch.tensor(a), torch.tensor(a[::-1].copy())))  # fmt: skip
            _same(f(tg.tensor(a)), getattr(torch, name)(torch.tensor(a)))
            with pytest.raises(TypeError, match=r"axis=1.*dim=1"):
                f(tg.tensor(a), 1)
    assert np.max(tg.tensor(a), 1).tolist() == [5.0, 7.0]  # numpy's function keeps its meaning
    # the gradient of max(dim)'s values reaches the returned index only, as torch's
    _, tape = _grad_of(lambda x, m: m.max(x, dim=1)[0], a)


def test_roll_one_shift_in_a_tuple_without_dims() -> None:
    a = np.arange(6.0).reshape(3, 2)
    _same(tg.roll(tg.tensor(a), (1,)), torch.roll(torch.tensor(a), (1,)))
    _same(tg.tensor(a).roll((2,)), torch.tensor(a).roll((2,)))
    with pytest.raises(ValueError, match="axes"):
        tg.roll(tg.tensor(a), (1, 1))
    with pytest.raises(RuntimeError):
        torch.roll(torch.tensor(a), (1, 1))


@pytest.mark.parametrize(
    "idx",
    [
        (slice(None), [0, 1], slice(None), [1, 2]),
        ([0, 1], slice(None), [1, 2]),
        (Ellipsis, [0, 1]),
        ([0, 1], slice(None), 0),
        (slice(None), [0, 1], 0),
        (Ellipsis, 0, [0, 1]),
        (1, [0, 1], [1, 2]),
        (None, [0, 1], slice(None), [1, 2]),
    ],
    ids=str,
)
def test_advanced_index_layout_equals_torch(idx: tuple) -> None:
    a = np.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)
    tidx = tuple(torch.tensor(i) if isinstance(i, list) else i for i in idx)
    _same(tg.tensor(a)[idx], torch.tensor(a)[tidx])


@pytest.mark.parametrize(
    "idx",
    [
        (0, slice(None), [0, 1]),
        (slice(None), 0, slice(None), [0, 1]),
        (0, Ellipsis, [0, 1]),
        (slice(None), [0, 1], slice(None), 0),  # equal shapes (2, 2, 4), transposed values
    ],
    ids=str,
)
def test_int_and_array_split_by_a_slice_raises(idx: tuple) -> None:
    a = np.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)
    tidx = tuple(torch.tensor(i) if isinstance(i, list) else i for i in idx)
    assert not np.array_equal(a[idx], torch.tensor(a)[tidx].numpy())  # the two libraries differ
    with pytest.raises(IndexError, match=r"x\[i\]\[...\].*x\[\[i\], ...\]"):
        tg.tensor(a)[idx]


def test_creation_functions_take_requires_grad() -> None:
    for make in (
        lambda: tg.zeros(2, 3, requires_grad=True),
        lambda: tg.ones((2, 3), requires_grad=True),
        lambda: tg.randn(2, 3, requires_grad=True),
        lambda: tg.rand(2, 3, requires_grad=True),
        lambda: tg.full((2, 3), 0.5, requires_grad=True),
    ):
        x = make()
        assert isinstance(x, tg.Parameter) and x.shape == (2, 3)
        with tg.Tape() as tape:
            y = (x * 3.0).sum()
        np.testing.assert_array_equal(tape.gradient(y)[x].numpy(), np.full((2, 3), 3.0))
    assert not isinstance(tg.zeros(2), tg.Parameter)
    with pytest.raises(TypeError, match="only float"):
        tg.full((2,), 1, requires_grad=True)


def test_assignment_through_a_mixed_index_raises_unless_a_scalar() -> None:
    x = tg.zeros((2, 3, 4))
    with pytest.raises(IndexError, match="numpy and PyTorch place"):
        x[0, :, [0, 1]] = tg.ones((3, 2))  # PyTorch's (3, 2); numpy's would be (2, 3)
    x[0, :, [0, 1]] = 1.0  # a scalar lands in the same places in both
    t = torch.zeros((2, 3, 4))
    t[0, :, [0, 1]] = 1.0
    _same(x, t)
