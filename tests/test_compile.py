"""tg.compile: the replayed step equals the eager step exactly."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


def _mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2), nn.Tanh()
    )


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3)
    )


def _compiled_fn(step):
    """The generated function of a compiled step's (first) program."""
    return next(e.run for es in step._programs.values() for e in es if callable(e.run))


def _run(make_model, make_opt, batches, compiled: bool):
    tg.manual_seed(0)
    model = make_model()
    opt = make_opt(model.parameters())
    losses = []
    if compiled:
        step = tg.compile(lambda x, y: F.mse_loss(model(x), y), model, opt)
        for x, y in batches:
            losses.append(step(x, y).item())
        return losses, model, step
    for x, y in batches:
        with tg.Tape() as tape:
            loss = F.mse_loss(model(tg.tensor(x)), tg.tensor(y))
        opt.step(tape.gradient(loss, model))
        losses.append(loss.item())
    return losses, model, None


CASES = {
    "mlp-sgd": (_mlp, lambda p: tg.optim.SGD(p, lr=0.05, momentum=0.9), (64, 5), (64, 2)),
    "mlp-adam": (_mlp, lambda p: tg.optim.Adam(p, lr=1e-2), (16, 5), (16, 2)),
    "cnn-sgd": (_cnn, lambda p: tg.optim.SGD(p, lr=0.05), (8, 1, 8, 8), (8, 3)),
    "transformer-adam": (
        lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True),
        lambda p: tg.optim.Adam(p, lr=1e-3),
        (4, 5, 8),
        (4, 5, 8),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_replay_equals_eager_exactly(case):
    make_model, make_opt, xs, ys = CASES[case]
    rng = np.random.default_rng(1)
    batches = [
        (rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32))
        for _ in range(8)
    ]
    eager, m_eager, _ = _run(make_model, make_opt, batches, compiled=False)
    comp, m_comp, step = _run(make_model, make_opt, batches, compiled=True)
    assert comp == eager  # bit for bit: same kernels, same order
    for a, b in zip(m_eager.parameters(), m_comp.parameters(), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    assert "def run(inputs):" in step.source  # it did compile (two captures agreed)


def test_new_shapes_recapture():
    rng = np.random.default_rng(2)
    batches = [
        (rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal((n, 2)).astype(np.float32))
        for n in (4, 4, 4, 7, 7, 7, 4)
    ]
    # each batch size gets its own program, and every step still equals the eager one
    eager, m_eager, _ = _run(_mlp, lambda p: tg.optim.SGD(p, lr=0.01), batches, compiled=False)
    comp, m_comp, step = _run(_mlp, lambda p: tg.optim.SGD(p, lr=0.01), batches, compiled=True)
    assert comp == eager
    for a, b in zip(m_eager.parameters(), m_comp.parameters(), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    assert len(step._sources) == 2  # one program per input signature


def test_data_dependent_step_falls_back_to_eager():
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = tg.optim.SGD(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)

    def loss_fn(x, y):
        mask = tg.tensor(rng.random((16, 8)) > 0.5)  # a mask made with numpy: a constant
        return F.mse_loss(model[2](model[1](model[0](x)) * mask), y)

    step = tg.compile(loss_fn, model, opt)
    x, y = tg.randn(16, 4), tg.randn(16, 1)
    step(x, y)
    with pytest.warns(RuntimeWarning, match="keeps running eagerly") as rec:
        step(x, y)
    msg = str(rec[0].message)
    # names the op, the user's line and what to do
    assert "'astype'" in msg and "test_compile.py:" in msg and "mask" in msg and "Fix:" in msg, msg
    before = [p.numpy().copy() for p in model.parameters()]
    step(x, y)  # still trains
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(before, model.parameters(), strict=True))


def test_a_step_with_dropout_and_noise_compiles_and_equals_eager_with_the_stream_after():
    def run(compiled: bool):
        tg.manual_seed(3)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        opt = tg.optim.Adam(model.parameters(), lr=1e-2)

        def loss_fn(x, y):  # dropout, plus reparameterisation noise as in a VAE
            h = model(x)
            return F.mse_loss(h + 0.1 * tg.randn_like(h) if hasattr(tg, "randn_like") else h + 0.1 * tg.randn(*h.shape), y)

        batches = [(tg.tensor(np.full((8, 6), k, np.float32)), tg.ones((8, 2))) for k in range(6)]
        if compiled:
            step = tg.compile(loss_fn, model, opt)
            with __import__("warnings").catch_warnings():
                __import__("warnings").simplefilter("error")  # no fallback
                losses = [step(x, y).item() for x, y in batches]
            assert step.source  # it compiled
        else:
            losses = []
            for x, y in batches:
                with tg.Tape() as tape:
                    loss = loss_fn(x, y)
                opt.step(tape.gradient(loss, model))
                losses.append(loss.item())
        return losses, [p.numpy() for p in model.parameters()], tg.rand(4).tolist()

    eager, comp = run(False), run(True)
    assert comp[0] == eager[0]
    for a, b in zip(comp[1], eager[1], strict=True):
        assert np.array_equal(a, b)
    assert comp[2] == eager[2]  # the random stream afterwards too


def test_switching_to_eval_mode_gets_its_own_program():
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    opt = tg.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights stay put
    step = tg.compile(lambda x, y: F.mse_loss(model(x), y), model, opt)
    x, y = tg.randn(16, 4), tg.randn(16, 1)
    for _ in range(3):
        step(x, y)
    model.eval()
    evals = [step(x, y).item() for _ in range(3)]
    assert evals[0] == evals[1] == evals[2]  # no dropout in eval mode
    with tg.no_grad():
        assert evals[0] == F.mse_loss(model(x), y).item()
    assert len(step._sources) == 2


def _deep(n_layers: int = 6):
    tg.manual_seed(0)
    model = nn.ModuleList([nn.Linear(32, 32) for _ in range(n_layers)])
    opt = tg.optim.SGD(model.parameters(), lr=0.01)

    def loss_fn(x, y):
        h = x
        for layer in model:  # the shifts are elementwise kernels whose values die at once
            h = h + tg.tanh(layer(h) + 0.5)
        return F.mse_loss(h, y)

    return model, opt, loss_fn


def test_the_program_frees_intermediates_and_reuses_buffers(monkeypatch):
    monkeypatch.setattr("tapegrad._fuse.enabled", lambda: False)  # unfused: numpy kernels' buffers
    model, opt, loss_fn = _deep()
    step = tg.compile(loss_fn, model, opt)
    x, y = tg.randn(64, 32), tg.randn(64, 32)
    losses = [step(x, y).item() for _ in range(3)]
    model2, opt2, loss_fn2 = _deep()  # the same weights, stepped eagerly
    for want in losses:
        with tg.Tape() as tape:
            loss = loss_fn2(x, y)
        opt2.step(tape.gradient(loss, model2))
        assert loss.item() == want
    src = step.source
    assert "del " in src  # intermediates go as soon as they are dead
    run = _compiled_fn(step)
    buffers = {id(v) for name, v in run.__globals__.items() if name.startswith("B")}
    assert src.count("out=B") > len(buffers) > 0  # several kernels share a buffer


def test_a_compiled_step_holds_no_more_memory_than_eager():
    import tracemalloc

    def peak(compiled: bool) -> int:
        model, opt, loss_fn = _deep()
        x, y = tg.randn(64, 32), tg.randn(64, 32)
        step = tg.compile(loss_fn, model, opt)

        def eager():
            with tg.Tape() as tape:
                loss = loss_fn(x, y)
            opt.step(tape.gradient(loss, model))

        run = (lambda: step(x, y)) if compiled else eager
        for _ in range(3):  # the two capture steps, then the steady state
            run()
        held = 0  # the program's buffers live between steps: count them in
        if compiled:
            prog = _compiled_fn(step)
            bufs = {id(v): v for k, v in prog.__globals__.items() if k.startswith("B")}
            held = sum(v.nbytes for v in bufs.values())
        tracemalloc.start()
        try:
            for _ in range(2):
                run()
            return held + tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(True) <= peak(False)


def test_zero_dim_intermediates_compile():
    # adds of 0-d values give numpy scalars on the probe run: they still get a buffer
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = tg.optim.SGD(model.parameters(), lr=0.05)

    def loss_fn(x, y):
        fit = F.mse_loss(model(x), y)
        reg = (model[0].weight ** 2).sum()
        return (fit + reg) * 0.5

    x, y = tg.randn(16, 4), tg.randn(16, 1)
    step = tg.compile(loss_fn, model, opt)
    compiled = [step(x, y).item() for _ in range(4)]
    assert step.source
    tg.manual_seed(0)
    model2 = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt2 = tg.optim.SGD(model2.parameters(), lr=0.05)
    eager = []
    for _ in range(4):
        with tg.Tape() as tape:
            loss = (F.mse_loss(model2(x), y) + (model2[0].weight ** 2).sum()) * 0.5
        opt2.step(tape.gradient(loss, model2))
        eager.append(loss.item())
    assert compiled == eager



def test_a_layers_small_gradients_come_before_its_input_gradient():
    """Within one node's VJPs the weight and bias gradients (small) run before the input
    gradient (large), so the weight's update can free its gradient before the input gradient
    is allocated; the numbers are those of eager."""
    make_model, make_opt, xs, ys = CASES["cnn-sgd"]
    rng = np.random.default_rng(2)
    batches = [
        (rng.standard_normal((32, 1, 8, 8)).astype(np.float32),
         rng.standard_normal((32, 3)).astype(np.float32))
        for _ in range(4)
    ]  # fmt: skip
    eager, _, _ = _run(make_model, make_opt, batches, compiled=False)
    comp, _, step = _run(make_model, make_opt, batches, compiled=True)
    assert comp == eager
    lines = step.source.splitlines()
    w = next(k for k, s in enumerate(lines) if "# nn.linear vjp1" in s)
    x = next(k for k, s in enumerate(lines) if "# nn.linear vjp0" in s)
    assert w < x, step.source


@pytest.mark.skipif(tg._kernels.numba() is None, reason="one-op loops are numba's")
def test_a_compiled_cnn_step_peaks_below_eager():
    """ReLU writes over the convolution output it reads, ReLU's VJP over the gradient it
    reads: the compiled step's peak is below eager's, buffers counted."""
    import tracemalloc

    make_model, make_opt, _, _ = CASES["cnn-sgd"]
    x = np.random.default_rng(3).standard_normal((64, 1, 16, 16)).astype(np.float32)
    y = np.random.default_rng(4).standard_normal((64, 3)).astype(np.float32)

    def make():
        return nn.Sequential(
            nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 49, 3)
        )

    def peak(compiled: bool) -> int:
        tg.manual_seed(0)
        model = make()
        opt = make_opt(model.parameters())
        step = tg.compile(lambda a, b: F.mse_loss(model(a), b), model, opt)
        xt, yt = tg.tensor(x), tg.tensor(y)

        def eager():
            with tg.Tape() as tape:
                loss = F.mse_loss(model(xt), yt)
            opt.step(tape.gradient(loss, model))

        run = (lambda: step(xt, yt)) if compiled else eager
        for _ in range(3):
            run()
        held = 0
        if compiled:
            prog = _compiled_fn(step)
            held = sum(
                v.nbytes for k, v in prog.__globals__.items() if k.startswith("B")
            )
        tracemalloc.start()
        try:
            run()
            return held + tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    conv_out = 64 * 8 * 14 * 14 * 4
    assert peak(True) <= peak(False) - conv_out // 4
