"""The trace state is per thread: concurrent training in threads equals the same runs in turn."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn


def _setup(seed: int):
    # built in the main thread: initialisation draws from the global generator, which is
    # process-wide (as PyTorch's): threads that draw from it at once interleave their draws
    rng = np.random.default_rng(seed)
    tg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).double()
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt, tg.tensor(rng.standard_normal((32, 6))), tg.tensor(rng.integers(0, 3, 32))


def _train(setup, steps: int, barrier: threading.Barrier | None = None) -> list[np.ndarray]:
    model, opt, x, y = setup
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
    alone = [_train(_setup(seed), 15) for seed in range(n)]
    setups = [_setup(seed) for seed in range(n)]
    out: list = [None] * n
    errors: list = []
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            out[k] = _train(setups[k], 15, barrier)
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


class _Slow:
    """A per-sample dataset (read by the collate path), as a file-backed one would be."""

    def __init__(self, n: int):
        rng = np.random.default_rng(7)
        self.x = rng.standard_normal((n, 6))
        self.y = rng.integers(0, 3, n)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_dataloader_workers_give_the_batches_of_no_workers(workers):
    ds = _Slow(53)
    base = [(x.numpy(), y.numpy()) for x, y in tg.data.DataLoader(ds, 8, shuffle=True, seed=1)]
    got = [
        (x.numpy(), y.numpy())
        for x, y in tg.data.DataLoader(ds, 8, shuffle=True, seed=1, num_workers=workers)
    ]
    assert len(got) == len(base) == 7
    for (a, b), (c, d) in zip(got, base, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_training_from_worker_threads_equals_training_without():
    def train(workers: int) -> list[np.ndarray]:
        tg.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()
        opt = tg.optim.Adam(model.parameters(), lr=1e-2)
        loader = tg.data.DataLoader(_Slow(64), 16, shuffle=True, seed=3, num_workers=workers)
        for _ in range(2):
            for x, y in loader:
                with tg.Tape() as tape:
                    loss = nn.functional.cross_entropy(model(x), y)
                opt.step(tape.gradient(loss, model))
        return [p.numpy().copy() for p in model.parameters()]

    for a, b in zip(train(2), train(0), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_loader_resumed_mid_epoch_with_workers():
    ds = _Slow(40)
    full = [y.numpy() for _, y in tg.data.DataLoader(ds, 8, shuffle=True, seed=2, num_workers=2)]
    a = tg.data.DataLoader(ds, 8, shuffle=True, seed=2, num_workers=2)
    it = iter(a)
    first = [next(it)[1].numpy() for _ in range(2)]
    state = a.state_dict()
    b = tg.data.DataLoader(ds, 8, shuffle=True, seed=2, num_workers=2)
    b.load_state_dict(state)
    rest = [y.numpy() for _, y in b]
    for u, v in zip(first + rest, full, strict=True):
        np.testing.assert_array_equal(u, v)


def test_num_workers_must_be_a_count():
    with pytest.raises(ValueError, match="num_workers"):
        tg.data.DataLoader(_Slow(4), 2, num_workers=-1)
