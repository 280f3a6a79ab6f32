"""The trace state is per thread: concurrent training in threads equals the same runs in turn.
``tg.set_num_threads`` / ``tg.get_num_threads`` govern the kernels and numpy's BLAS together."""

from __future__ import annotations

import os
import subprocess
import sys
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


# --------------------------------------------------------------------------------------------
# tg.set_num_threads / tg.get_num_threads
# --------------------------------------------------------------------------------------------


def _blas_threads() -> int | None:
    from threadpoolctl import threadpool_info  # noqa: PLC0415 - test-only dependency

    found = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"
             and "numpy.libs" in p["filepath"]]
    return found[0] if found else None


@pytest.fixture
def restore_threads():
    from tapegrad import _threads  # noqa: PLC0415

    kernels, blas = tg.get_num_threads(), _threads.blas_threads()
    yield
    tg.set_num_threads(kernels)
    if blas is not None:
        _threads.set_blas_threads(blas)


def test_set_num_threads_round_trips_and_sets_numpys_blas(restore_threads):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 200)), rng.standard_normal((200, 400))
    want = a @ b
    counts = sorted({1, min(2, os.cpu_count() or 1)})
    for n in counts:
        tg.set_num_threads(n)
        assert tg.get_num_threads() == n
        if _blas_threads() is not None:
            assert _blas_threads() == n
        np.testing.assert_allclose(a @ b, want, rtol=1e-12)  # products run at each count


def test_the_count_holds_in_every_python_thread(restore_threads):
    tg.set_num_threads(1)
    seen: list = []

    def ask() -> None:
        seen.append(tg.get_num_threads())
        from tapegrad import _kernels  # noqa: PLC0415

        nb = _kernels.numba()
        if nb is not None:  # numba's own count is per thread: the kernels' follows tapegrad's
            seen.append(nb.get_num_threads())

    t = threading.Thread(target=ask)
    t.start()
    t.join(60)
    assert seen and all(n == 1 for n in seen), seen


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "4"])
def test_set_num_threads_names_the_bad_value(bad):
    with pytest.raises(ValueError, match=r"set_num_threads: expected a positive integer, got"):
        tg.set_num_threads(bad)


_REPORT = """
import sys
import tapegrad as tg
from tapegrad import _threads
n = tg.get_num_threads()
tg.set_num_threads(7)
print(n, tg.get_num_threads(), _threads.blas_threads(), "numba" in sys.modules)
"""


def _report(**env: str | None) -> list[str]:
    full = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "TAPEGRAD_KERNELS"):
        full.pop(k, None)
    full.update({k: v for k, v in env.items() if v is not None})
    out = subprocess.run([sys.executable, "-c", _REPORT], env=full, capture_output=True,
                         text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def _numba_selected() -> bool:
    from tapegrad import _kernels  # noqa: PLC0415

    return _kernels.numba() is not None


@pytest.mark.parametrize(
    ("env", "default", "capped"),
    [
        ({"OMP_NUM_THREADS": "1"}, "1", None),
        ({"NUMBA_NUM_THREADS": "3"}, "3", "3"),  # more threads than this machine's cores
        ({"NUMBA_NUM_THREADS": "3", "OMP_NUM_THREADS": "2"}, "2", "3"),
    ],
)
def test_the_default_respects_the_environment_and_numba_caps_the_count(env, default, capped):
    if not _numba_selected():
        pytest.skip("numba kernels not selected")
    n, after, blas, imported = _report(**env)
    assert n == default and imported == "True"
    if capped is not None:  # numba starts NUMBA_NUM_THREADS threads: BLAS is capped with it
        assert after == capped and blas in (capped, "None")


def test_without_numba_the_count_is_blas_alone_and_numba_is_never_imported():
    n, after, blas, imported = _report(TAPEGRAD_KERNELS="numpy", OPENBLAS_NUM_THREADS="1")
    assert n == "1" and after == "7" and blas in ("7", "None") and imported == "False"
