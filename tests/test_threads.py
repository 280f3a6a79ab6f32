"""The trace state is per thread: concurrent training in threads equals the same runs in turn."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn


def _train(seed: int, steps: int, barrier: threading.Barrier | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    tg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = tg.tensor(rng.standard_normal((32, 6)))
    y = tg.tensor(rng.integers(0, 3, 32))
    model.double()
    for _ in range(steps):
        if barrier is not None:
            barrier.wait()  # every thread is inside a step at the same time
        with tg.Tape() as tape:
            loss = nn.functional.cross_entropy(model(x), y)
        assert len(tape.nodes) == 4  # only this thread's ops: linear, tanh, linear, loss
        opt.step(tape.gradient(loss, model))
    return [p.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("n", [2, 4])
def test_threads_training_at_once_equal_the_runs_in_turn(n):
    alone = [_train(seed, 15) for seed in range(n)]
    out: list = [None] * n
    errors: list = []
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            out[k] = _train(k, 15, barrier)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for got, want in zip(out, alone, strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_no_grad_in_one_thread_leaves_the_others_recording():
    inside, done = threading.Event(), threading.Event()

    def idle() -> None:
        with tg.no_grad():
            inside.set()
            done.wait(30)

    t = threading.Thread(target=idle)
    t.start()
    try:
        assert inside.wait(30)
        w = tg.Parameter(tg.tensor([1.0, 2.0]))
        assert tg.is_grad_enabled()
        with tg.Tape() as tape:
            loss = (w * w).sum()
        assert tape.gradient(loss, w).tolist() == [2.0, 4.0]
    finally:
        done.set()
        t.join(30)


def test_a_tape_records_only_the_thread_that_opened_it():
    x = tg.tensor([1.0, 2.0])
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * 3.0
        seen = []
        t = threading.Thread(target=lambda: seen.append(tg.exp(y) + x))
        t.start()
        t.join(30)
        z = (y * y).sum()
    assert len(seen) == 1 and seen[0]._tapes == ()  # read, not recorded
    assert [n.prim.name for n in tape.nodes] == ["mul_scalar", "mul", "sum"]
    assert tape.gradient(z, x).tolist() == [18.0, 36.0]


def test_with_tapes_in_other_threads_do_not_watch_this_threads_parameters():
    opened, done = threading.Event(), threading.Event()
    other: list = []

    def hold_a_tape() -> None:
        with tg.Tape() as tape:
            other.append(tape)
            opened.set()
            done.wait(30)

    t = threading.Thread(target=hold_a_tape)
    t.start()
    try:
        assert opened.wait(30)
        w = tg.Parameter(tg.ones(3))
        y = (w * 2.0).sum()  # no tape open in this thread: nothing recorded anywhere
        assert y._tapes == ()
        assert other[0].nodes == []
    finally:
        done.set()
        t.join(30)
