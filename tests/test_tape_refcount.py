"""A tape and what it saved are freed by reference counting alone: no cycle waits for the GC."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _forward(model, x, style: str):
    if style == "with":
        with tg.Tape() as tape:
            loss = (model(x) ** 2).mean()
    elif style == "watch":
        tape = tg.Tape()
        tape.watch(x)
        loss = (model(x) ** 2).mean()
        tape.stop()
    else:  # dfdx style
        tape = tg.Tape()
        loss = (model(x.trace(tape)) ** 2).mean()
        tape.stop()
    return tape, loss


@pytest.mark.parametrize("style", ["with", "watch", "trace"])
def test_a_tape_never_used_is_freed_when_dropped(no_gc, style):
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x = tg.tensor(np.ones((4, 8), np.float32))
    tape, loss = _forward(model, x, style)
    assert tape.nodes  # it recorded and saved arrays
    refs = [weakref.ref(tape), weakref.ref(loss)]
    del tape, loss, x  # a watched input names its tape: it goes too
    assert [r() for r in refs] == [None, None]


def test_memory_stays_flat_over_1000_steps_that_drop_their_tapes(no_gc):
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64))
    x = tg.tensor(np.ones((32, 64), np.float32))
    tracemalloc.start()
    try:
        for step in range(1000):
            with tg.Tape() as tape:
                h = model(x)
                loss = (h * h).sum()
            if step == 20:
                base = tracemalloc.get_traced_memory()[0]
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    del tape, h, loss
    assert grown < 256 * 1024, grown  # one step holds about 100 KiB of saved arrays


def test_the_loss_keeps_its_tape_for_backward(no_gc):
    w = tg.Parameter(tg.tensor([1.0, 2.0]))
    with tg.Tape():
        loss = (tg.tanh(w) * w).sum()
    gc.collect()
    g = loss.backward()[w].numpy()
    t = np.tanh([1.0, 2.0])
    np.testing.assert_allclose(g, t + np.array([1.0, 2.0]) * (1 - t * t), rtol=1e-6)


def test_in_place_change_of_a_saved_output_is_still_caught_after_it_is_dropped_and_kept():
    x = tg.tensor(np.ones(3))
    with tg.Tape() as tape:
        tape.watch(x)
        h = tg.tanh(x)
        loss = h.sum()
        h[0] = 5.0
    with pytest.raises(RuntimeError, match="modified in place"):
        tape.gradient(loss, x)


def test_higher_order_through_intermediates_nobody_holds():
    x = tg.tensor(np.array([0.3, -0.7]))
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = (tg.tanh(tg.sin(x) * 2.0) ** 3).sum()  # intermediates held only by the record
        g = inner.gradient(y, x)
        s = (g * g).sum()
    h = outer.gradient(s, x).numpy()
    xt = __import__("torch").tensor([0.3, -0.7], dtype=__import__("torch").float64, requires_grad=True)
    torch = __import__("torch")
    yt = (torch.tanh(torch.sin(xt) * 2.0) ** 3).sum()
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (ht,) = torch.autograd.grad((gt * gt).sum(), xt)
    np.testing.assert_allclose(h, ht.numpy(), rtol=1e-12)
