"""The fused recurrent primitive (``nn.recurrent_seq``): against PyTorch in float32 and
float64, its compiled kernels against the numpy references, finite differences to second order,
a persistent tape's second gradient, the reference path and ``tg.compile``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn
from tapegrad._kernels import numba as kernels_numba
from tapegrad._kernels import registry
from tapegrad.ops import _rnn as FR

FUSED = ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"]
TOL = {np.float64: {"rtol": 1e-9, "atol": 1e-11}, np.float32: {"rtol": 2e-4, "atol": 2e-5}}


def _layer(lib, mode: str, *args, **kwargs):
    """``lib.nn``'s layer for ``mode`` (``RNN_TANH``, ``RNN_RELU``: RNN and its nonlinearity)."""
    name, _, act = mode.partition("_")
    if act:
        kwargs["nonlinearity"] = act.lower()
    return getattr(lib.nn, name)(*args, **kwargs)


def _pair(mode: str, dtype, *args, **kwargs):
    """A tapegrad layer and its torch twin with the same weights, in ``dtype``."""
    ours = _layer(tg, mode, *args, dtype=tg.float64, **kwargs)
    theirs = _layer(torch, mode, *args, dtype=torch.float64, **kwargs)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    if dtype == np.float32:
        ours = _layer(tg, mode, *args, **kwargs)
        ours.load_state_dict({k: v.detach().numpy().astype(np.float32)
                              for k, v in theirs.state_dict().items()})  # fmt: skip
        theirs = theirs.float()
    return ours, theirs


def _states(mode, shape, rng, dtype):
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(2 if mode == "LSTM" else 1))


def _flat(out):
    return [t for o in out for t in _flat(o)] if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("mode", FUSED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("num_layers", "bidirectional", "batch_first", "given_state"),
    [(1, False, True, False), (2, True, False, True), (2, True, True, False),
     (2, False, False, True)],
)  # fmt: skip
def test_matches_torch(mode, dtype, num_layers, bidirectional, batch_first, given_state) -> None:
    rng = np.random.default_rng(0)
    seq, batch, size_in, hidden = 6, 3, 5, 7
    ours, theirs = _pair(mode, dtype, size_in, hidden, num_layers, batch_first=batch_first,
                         bidirectional=bidirectional)  # fmt: skip
    x = rng.standard_normal((batch, seq, size_in) if batch_first else (seq, batch, size_in))
    x = x.astype(dtype)
    dirs = 2 if bidirectional else 1
    state = _states(mode, (num_layers * dirs, batch, hidden), rng, dtype) if given_state else None
    gx, tx = tg.tensor(x), torch.tensor(x, requires_grad=True)
    gs = None if state is None else tuple(tg.tensor(s) for s in state)
    ts = None if state is None else tuple(torch.tensor(s, requires_grad=True) for s in state)
    with tg.Tape() as tape:
        tape.watch(gx, *(gs or ()))
        ys = _flat(ours(gx, None if gs is None else gs if len(gs) == 2 else gs[0]))
        cots = [rng.standard_normal(y.shape).astype(dtype) for y in ys]
        loss = sum((y * tg.tensor(c)).sum() for y, c in zip(ys, cots, strict=True))
    tys = _flat(theirs(tx, None if ts is None else ts if len(ts) == 2 else ts[0]))
    tol = TOL[dtype]
    for y, ty in zip(ys, tys, strict=True):
        assert y.dtype == dtype
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **tol)
    sum((ty * torch.tensor(c)).sum() for ty, c in zip(tys, cots, strict=True)).backward()
    params = dict(ours.named_parameters())
    grads = tape.gradient(loss, [gx, *(gs or ()), *params.values()])
    expect = [tx.grad, *(t.grad for t in ts or ()),
              *(p.grad for p in dict(theirs.named_parameters()).values())]  # fmt: skip
    for g, e in zip(grads, expect, strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g.numpy(), e.numpy(), **tol)


def _inputs(mode: str, dtype, reverse: bool, bias: bool = True, seed: int = 0):
    rng = np.random.default_rng(seed)
    steps, batch, hidden = 5, 3, 4
    g = FR.GATES[mode] * hidden
    arrs = [rng.standard_normal((steps, batch, g)), rng.standard_normal((batch, hidden)),
            rng.standard_normal((batch, hidden)) if mode == "LSTM" else None,
            rng.standard_normal((g, hidden)) * 0.5, rng.standard_normal(g) if bias else None]
    return [None if a is None else a.astype(dtype) for a in arrs]  # fmt: skip


@pytest.mark.parametrize("mode", FUSED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
def test_kernels_match_references(mode, dtype, reverse) -> None:
    """Every registered implementation of the forward and the backward against its reference."""
    if kernels_numba() is None:
        pytest.skip("compiled kernels are not selected")
    op = FR.SEQ_OPS[mode]
    gi, h0, c0, w_hh, b_hh = _inputs(mode, dtype, reverse)
    y, ws = FR.SEQ_REFS[mode][0](gi, h0, c0, w_hh, b_hh, reverse)
    g = np.random.default_rng(1).standard_normal(y.shape).astype(dtype)
    grad_args = (g, y, ws, h0, c0, w_hh, reverse)
    expect = FR.SEQ_REFS[mode][1](*grad_args)
    tol = {"rtol": 1e-5, "atol": 2e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-14}
    impls = registry.implementations(op)
    assert impls, f"no kernel registered for {op}"
    for impl in impls:
        assert impl.fits(gi, h0, c0, w_hh, b_hh, reverse)
        y2, ws2 = impl.run(gi, h0, c0, w_hh, b_hh, reverse)
        np.testing.assert_allclose(y2, y, **tol)
        if ws is not None:
            np.testing.assert_allclose(ws2, ws, **tol)
    for impl in registry.implementations(op + "_grad"):
        assert impl.fits(*grad_args)
        for got, want in zip(impl.run(*grad_args), expect, strict=True):
            assert got.dtype == dtype
            np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("mode", FUSED)
@pytest.mark.parametrize("shape", [(3, 20, 200), (4, 3, 5)])
def test_column_blocks_equal_one_product(mode, shape) -> None:
    """The per-step product in column blocks (word_language_model's 4 blocks of 200, and
    uneven blocks of 3 and 2 columns) against the one-product kernel, both directions."""
    if kernels_numba() is None:
        pytest.skip("compiled kernels are not selected")
    from tapegrad._kernels import rnn as K  # noqa: PLC0415 - imports numba

    steps, batch, hidden = shape
    rng = np.random.default_rng(3)
    n_g = FR.GATES[mode] * hidden
    assert K.column_blocks(batch, n_g, hidden) >= 2 and K.column_blocks(batch, hidden, n_g) >= 2
    gi, g = rng.standard_normal((steps, batch, n_g)), rng.standard_normal((steps + 1, batch, hidden))
    h0, c0 = rng.standard_normal((batch, hidden)), rng.standard_normal((batch, hidden))
    w_hh, b_hh = rng.standard_normal((n_g, hidden)) * 0.1, rng.standard_normal(n_g)
    c0 = c0 if mode == "LSTM" else None
    op = FR.SEQ_OPS[mode]
    one, blocked = getattr(K, op), getattr(K, op + "_blocked")
    for reverse in (False, True):
        want, got = one(gi, h0, c0, w_hh, b_hh, reverse), blocked(gi, h0, c0, w_hh, b_hh, reverse)
        for w, v in zip(want, got, strict=True):
            if w is not None:
                np.testing.assert_allclose(v, w, rtol=1e-12, atol=1e-13)
        y, ws = want
        gy = g if mode == "LSTM" else g[:steps]
        args = (gy, y, ws, h0, c0, w_hh, reverse)
        for w, v in zip(getattr(K, op + "_grad")(*args), getattr(K, op + "_grad_blocked")(*args),
                        strict=True):  # fmt: skip
            np.testing.assert_allclose(v, w, rtol=1e-12, atol=1e-13)


def _seq_fn(mode: str, reverse: bool, bias: bool):
    def f(gi, h0, *rest):
        c0 = rest[0] if mode == "LSTM" else None
        w_hh, *b = rest[1:] if mode == "LSTM" else rest
        return tg.apply(FR.SEQ, gi, h0, c0, w_hh, b[0] if bias else None, mode=mode,
                        reverse=reverse, keep=FR.Workspace())  # fmt: skip

    return f


@pytest.mark.parametrize("mode", FUSED)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_finite_differences_second_order(mode, reverse, bias) -> None:
    """The primitive's VJP (arrays) and, to second order, its VJP on Tensors."""
    args = [tg.tensor(a) for a in _inputs(mode, np.float64, reverse, bias) if a is not None]
    tg.testing.check_grads(_seq_fn(mode, reverse, bias), args, order=2)


@pytest.mark.parametrize("mode", FUSED)
def test_gradient_penalty_matches_torch(mode) -> None:
    """Second order through an outer tape: d/dW of |d loss / d x|^2, against torch."""
    rng = np.random.default_rng(3)
    ours, theirs = _pair(mode, np.float64, 3, 4, 2, bidirectional=True)
    x = rng.standard_normal((5, 2, 3))
    gx, tx = tg.tensor(x), torch.tensor(x, requires_grad=True)
    with tg.Tape() as outer:
        with tg.Tape() as inner:
            inner.watch(gx)
            loss = (ours(gx)[0] ** 2).sum()
        penalty = (inner.gradient(loss, gx) ** 2).sum()
    grads = outer.gradient(penalty, list(ours.parameters()))
    (dx,) = torch.autograd.grad((theirs(tx)[0] ** 2).sum(), tx, create_graph=True)
    (dx**2).sum().backward()
    for g, p in zip(grads, theirs.parameters(), strict=True):
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("mode", FUSED)
def test_persistent_tape_and_reference_path(mode, monkeypatch) -> None:
    """A second gradient (the workspace recomputed) and the numpy reference (no kernels) give
    the first gradient."""
    rng = np.random.default_rng(4)
    layer = _layer(tg, mode, 3, 4, dtype=tg.float64)
    x = tg.tensor(rng.standard_normal((6, 2, 3)))

    def grads():
        with tg.Tape(persistent=True) as tape:
            tape.watch(x)
            loss = (layer(x)[0] ** 3).sum()
        first = tape.gradient(loss, [x, *layer.parameters()])
        second = tape.gradient(loss, [x, *layer.parameters()])
        tape.release()
        for a, b in zip(first, second, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        return first

    fused = grads()
    for op in (FR.SEQ_OPS[mode], FR.SEQ_OPS[mode] + "_grad"):
        monkeypatch.setitem(registry._TABLE, op, [])
    for a, b in zip(grads(), fused, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


def test_compiled_step_matches_eager() -> None:
    """``tg.compile`` captures and replays the fused op (its workspace parameter compares equal
    between captures, so the step compiles, without a warning)."""
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((4, 5, 3)), rng.integers(0, 2, 4)) for _ in range(5)]

    def run(compiled: bool) -> tuple[list[float], object]:
        tg.manual_seed(0)
        lstm = nn.LSTM(3, 6, batch_first=True, dtype=tg.float64)
        fc = nn.Linear(6, 2, dtype=tg.float64)
        params = [*lstm.parameters(), *fc.parameters()]
        opt = tg.optim.Adam(params, lr=1e-2)

        def step(x, y):
            with tg.Tape() as tape:
                loss = tg.nn.functional.cross_entropy(fc(lstm(x)[0][:, -1]), y)
            opt.step(tape.gradient(loss))
            return loss

        fn = tg.compile(step) if compiled else step
        return [float(fn(tg.tensor(x), tg.tensor(y)).item()) for x, y in batches], fn

    losses, step = run(True)
    assert any(callable(e.run) for es in step._programs.values() for e in es)
    np.testing.assert_allclose(losses, run(False)[0], rtol=1e-12)


@pytest.mark.parametrize("mode", FUSED)
def test_recorded_ops_do_not_grow_with_the_sequence(mode) -> None:
    """One recorded op per layer and direction for the time loop, whatever the length."""

    def recorded(steps: int) -> tuple[int, int]:
        layer = _layer(tg, mode, 3, 4, 2, bidirectional=True)
        with tg.Tape() as tape:
            layer(tg.ones((steps, 2, 3)))
        names = [node[0].name for node in tape._nodes]
        return len(names), names.count("nn.recurrent_seq")

    assert recorded(3) == recorded(11)
    assert recorded(3)[1] == 4
