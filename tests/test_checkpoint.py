"""Gradient checkpointing: the same gradients as without it, less memory during backward."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn


def _stack(n: int, dropout: float = 0.0, d: int = 32):
    tg.manual_seed(0)
    return nn.ModuleList(
        [nn.TransformerEncoderLayer(d, 4, dim_feedforward=2 * d, dropout=dropout, batch_first=True)
         for _ in range(n)]
    )  # fmt: skip


def _grads(blocks, x, ckpt: bool, seed: int = 5):
    tg.manual_seed(seed)
    with tg.Tape() as tape:
        h = x
        for b in blocks:
            h = tg.checkpoint(b, h) if ckpt else b(h)
        loss = (h * h).mean()
    g = tape.gradient(loss, blocks)
    return loss.item(), [g[p].numpy() for p in blocks.parameters()], tg.rand(3).tolist()


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_checkpointed_gradients_equal_plain_ones(dropout):
    blocks = _stack(3, dropout)
    x = tg.randn(2, 6, 32)
    plain, ck = _grads(blocks, x, False), _grads(blocks, x, True)
    assert ck[0] == plain[0]
    for a, b in zip(ck[1], plain[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ck[2] == plain[2]  # the random stream after backward is as without checkpointing


def test_inputs_and_several_tapes():
    w = tg.Parameter(tg.tensor(np.array([0.5, -1.5])))
    x = tg.tensor(np.array([1.0, 2.0]))
    block = lambda x: tg.sin(x * w) * x  # noqa: E731
    with tg.Tape() as t1, tg.Tape() as t2:
        t1.watch(x)
        y = tg.checkpoint(block, x)
        l1, l2 = y.sum(), (y * y).sum()
    gx, gw = t1.gradient(l1, [x, w])
    gw2 = t2.gradient(l2, w)
    xt = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    wt = torch.tensor([0.5, -1.5], dtype=torch.float64, requires_grad=True)
    yt = torch.sin(xt * wt) * xt
    gxt, gwt = torch.autograd.grad(yt.sum(), [xt, wt], retain_graph=True)
    (gw2t,) = torch.autograd.grad((yt * yt).sum(), [wt])
    np.testing.assert_allclose(gx.numpy(), gxt.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), gwt.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw2.numpy(), gw2t.numpy(), rtol=1e-12)


def test_second_order_through_a_checkpoint():
    x = tg.tensor(np.array([0.3, -0.8]))
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = tg.checkpoint(lambda v: (tg.tanh(v) ** 3).sum() * v, x).sum()
        g = inner.gradient(y, x)
        s = (g * g).sum()
    h = outer.gradient(s, x).numpy()
    xt = torch.tensor([0.3, -0.8], dtype=torch.float64, requires_grad=True)
    yt = ((torch.tanh(xt) ** 3).sum() * xt).sum()
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (ht,) = torch.autograd.grad((gt * gt).sum(), xt)
    np.testing.assert_allclose(h, ht.numpy(), rtol=1e-10)


def test_checkpoint_module_keeps_names_and_numbers():
    tg.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    b = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    b.load_state_dict(a.state_dict())
    tg.checkpoint_module(b[0])
    tg.checkpoint_module(b[2])
    assert list(b.state_dict()) == list(a.state_dict())
    x = tg.randn(5, 4)
    grads = []
    for m in (a, b):
        with tg.Tape() as tape:
            loss = (m(x) ** 2).sum()
        names = [n.prim.name for n in tape.nodes]
        assert any(n.startswith("checkpoint") for n in names) == (m is b), names
        g = tape.gradient(loss, m)
        grads.append([g[p].numpy() for p in m.parameters()])
    for u, v in zip(*grads, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-6)


def test_compile_with_checkpointed_blocks_equals_eager():
    def run(compiled: bool):
        blocks = _stack(2, 0.1, d=16)
        opt = tg.optim.SGD(blocks.parameters(), lr=0.01)

        def loss_fn(x):
            h = x
            for b in blocks:
                h = tg.checkpoint(b, h)
            return (h * h).mean()

        x = tg.tensor(np.linspace(-1, 1, 2 * 5 * 16, dtype=np.float32).reshape(2, 5, 16))
        if compiled:
            step = tg.compile(loss_fn, blocks, opt)
            return [step(x).item() for _ in range(4)]
        out = []
        for _ in range(4):
            with tg.Tape() as tape:
                loss = loss_fn(x)
            opt.step(tape.gradient(loss, blocks))
            out.append(loss.item())
        return out

    tg.manual_seed(1)
    eager = run(False)
    tg.manual_seed(1)
    assert run(True) == eager


def _backward_peak(ckpt: bool) -> int:
    blocks = _stack(12, d=64)
    # 256 tokens: enough that activations, not the parameter gradients (the same with and
    # without checkpointing), make the peak, as in a real training step
    x = tg.randn(8, 32, 64)
    tracemalloc.start()
    try:
        with tg.Tape() as tape:
            h = x
            for b in blocks:
                h = tg.checkpoint(b, h) if ckpt else b(h)
            loss = (h * h).mean()
        tape.gradient(loss, blocks)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_checkpointing_twelve_blocks_halves_peak_memory():
    plain, ck = _backward_peak(False), _backward_peak(True)
    assert ck <= 0.5 * plain, (ck, plain)


def test_backward_computes_no_gradient_the_checkpoint_is_not_asked_for():
    """The block's input needs no gradient (it is data): the recomputation's backward asks
    only for the weight's, so the input's VJP never runs."""
    from tapegrad._autodiff import apply, defprim

    calls = {"x": 0, "w": 0}

    def vjp_x(xp, g, ans, x, w):
        calls["x"] += 1
        return g * w

    def vjp_w(xp, g, ans, x, w):
        calls["w"] += 1
        return (g * x).sum(axis=0)

    mul = defprim("test.counted_mul", lambda x, w: x * w, (vjp_x, vjp_w), (0, 1))
    try:
        w = tg.Parameter(tg.tensor(np.array([0.5, -1.0, 2.0])))
        x = tg.tensor(np.arange(6.0).reshape(2, 3))
        with tg.Tape() as tape:
            loss = tg.checkpoint(lambda a: tg.tanh(apply(mul, a, w)), x).sum()
        got = tape.gradient(loss, w).numpy()
    finally:  # the registry lists the library's ops (tests/test_ops.py checks each has a row)
        tg.undefprim("test.counted_mul")
    want = ((1 - np.tanh(x.numpy() * w.numpy()) ** 2) * x.numpy()).sum(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert calls == {"x": 0, "w": 1}


def test_the_recomputation_keeps_attention_probabilities_for_its_backward(monkeypatch):
    """Outside a checkpoint, attention's backward recomputes its probabilities (forward keeps
    none); in a checkpoint's recomputation backward follows at once, so the forward keeps them:
    one probability pass per block fewer, the same gradients."""
    from tapegrad._kernels import registry
    from tapegrad.ops import _attention

    calls = []
    real = _attention._probs

    def counting(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(_attention, "_probs", counting)
    # the batched attention path (short sequences of heads of 8k take the small-head kernels,
    # whose one pass per block recomputes the probabilities inside backward either way)
    for op in ("attention_qkv", "attention_qkv_grad"):
        monkeypatch.setitem(registry._TABLE, op, [])
    blocks = _stack(2)
    x = tg.randn(2, 6, 32)
    plain = _grads(blocks, x, False)
    n_plain = len(calls)
    ck = _grads(blocks, x, True)
    n_ck = len(calls) - n_plain
    assert n_plain == 2 * 2  # forward, and again in backward, per block
    assert n_ck == 2 * 2  # the checkpoint's forward, the recomputation; none in backward
    for a, b in zip(ck[1], plain[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not tg._autodiff.is_recomputing()  # the switch is off again after backward
