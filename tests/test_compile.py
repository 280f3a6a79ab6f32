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
    tg.manual_seed(0)
    model = _mlp()
    opt = tg.optim.SGD(model.parameters(), lr=0.01)
    step = tg.compile(lambda x, y: F.mse_loss(model(x), y), model, opt)
    for n in (4, 4, 4, 7, 7, 7, 4):
        loss = step(tg.randn(n, 5), tg.randn(n, 2))
        assert loss.shape == ()
    assert len(step._sources) == 2  # one program per input signature


def test_data_dependent_step_falls_back_to_eager():
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    opt = tg.optim.SGD(model.parameters(), lr=0.01)
    step = tg.compile(lambda x, y: F.mse_loss(model(x), y), model, opt)
    x, y = tg.randn(16, 4), tg.randn(16, 1)
    step(x, y)
    with pytest.warns(RuntimeWarning, match="keeps running eagerly"):
        step(x, y)
    before = [p.numpy().copy() for p in model.parameters()]
    step(x, y)  # still trains
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(before, model.parameters(), strict=True))
