"""Selection by measurement in the kernel dispatcher (``_kernels/registry.py``).

The suite runs with ``TAPEGRAD_TUNE=0`` (conftest: the hand thresholds choose, so every run
takes the same kernels); these tests turn the measuring on for an operation of their own, with
the table in a temporary folder. Which implementation wins is never asserted where it depends
on timing noise: the candidates here differ by a busy wait (one-thread keys are timed in CPU
time, which a sleep does not use).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tapegrad import _kernels
from tapegrad._kernels import registry

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


class _Fake(registry.Impl):
    """An implementation that spins ``delay`` seconds and counts its runs (or raises NotReady
    while ``ready`` is false)."""

    __slots__ = ("delay", "calls", "ready")

    def __init__(self, name, delay, prefer=None, ready=True):
        super().__init__("tune_test", name, lambda x: True, "elementwise:relu", prefer)
        self.delay, self.calls, self.ready = delay, 0, ready

    def run(self, x):
        if not self.ready:
            raise registry.NotReady(self.name)
        self.calls += 1
        end = time.perf_counter() + self.delay
        while time.perf_counter() < end:  # busy: one-thread keys are timed in CPU time
            pass
        return x + len(self.name)


@pytest.fixture
def tuned(monkeypatch, tmp_path):
    """Measuring on, an empty table at a temporary path, no choices kept from earlier tests."""
    monkeypatch.setattr(registry, "_TUNE", [True])
    monkeypatch.setattr(registry, "_CHOSEN", {})
    monkeypatch.setattr(registry, "_DISK", {"path": str(tmp_path / "tuning-test.json")})
    monkeypatch.setattr(registry, "_ACTIVE", [registry._TABLE])
    monkeypatch.setattr(registry, "key", lambda op, args: (op, (1, False),
                                                            tuple(registry._sig(a) for a in args)))
    monkeypatch.setitem(registry._TUNABLE, "tune_test", False)

    def install(*impls):
        monkeypatch.setitem(registry._TABLE, "tune_test", list(impls))

    return install, tmp_path / "tuning-test.json"


def test_the_key_holds_shape_dtype_layout_and_values():
    a = np.zeros((4, 6), np.float32)
    sig = registry._sig
    assert sig(a) == sig(np.ones((4, 6), np.float32))  # values do not matter
    assert sig(a) != sig(np.zeros((6, 4), np.float32))
    assert sig(a) != sig(np.zeros((4, 6), np.float64))
    assert sig(a) != sig(np.zeros((6, 4), np.float32).T)  # same shape, another layout
    assert sig(a) != sig(np.zeros((4, 12), np.float32)[:, ::2])
    assert sig((1, (2, 3))) == (1, (2, 3)) and sig(None) is None
    # a named tuple (a convolution's geometry) by its values
    from tapegrad.ops._conv import Geom

    g = Geom((1, 2, 3, 3), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (3, 3))
    assert sig(g) == sig(g._replace()) and sig(g) != sig(g._replace(stride=(2, 2)))


@numba_only
def test_the_key_holds_the_thread_count():
    from tapegrad._kernels import threads

    k = registry.key("op", (np.zeros(3),))
    assert k[0] == "op" and k[1][0] == threads.count() and k[2] == (("numpy", (3,), "<f8", (8,)),)


def test_the_table_is_per_machine_in_the_kernel_cache():
    m = registry.machine()
    assert set(m) == {"cpu", "isa", "numpy", "blas"} and m["numpy"] == np.__version__
    path = registry.table_path()
    from tapegrad._kernels.runtime import cache_dir

    assert os.path.dirname(path) == cache_dir()
    assert os.path.basename(path).startswith("tuning-") and path.endswith(".json")


def test_the_faster_implementation_is_kept_in_the_process_and_on_disk(tuned):
    install, path = tuned
    slow, fast = _Fake("slow", 0.03), _Fake("fast", 0.0)
    install(slow, fast)
    x = np.arange(3.0)
    np.testing.assert_array_equal(registry.dispatch("tune_test", lambda a: a, x), x + 4)
    assert slow.calls == 2  # its first run never scores; far slower than the best: no more
    table = json.loads(path.read_text())
    assert list(table["entries"].values()) == ["fast"] and table["machine"] == registry.machine()
    runs = fast.calls
    for _ in range(3):  # chosen: no more timing
        registry.dispatch("tune_test", lambda a: a, x)
    assert fast.calls == runs + 3 and slow.calls == 2
    # a new shape is measured afresh
    registry.dispatch("tune_test", lambda a: a, np.zeros(5))
    assert slow.calls == 4 and len(json.loads(path.read_text())["entries"]) == 2


def test_a_close_call_gets_more_runs_than_a_clear_one(tuned, monkeypatch):
    # two timed runs each settle a clear winner; two within TUNE_CLOSE of each other run on
    # (up to TUNE_REPEATS) while TUNE_CLOSE_BUDGET lasts: one noisy pair decided such keys.
    # A clock of the test's own: each run advances it by its candidate's cost, so the scores
    # are exact on a loaded machine too
    install, _ = tuned
    now = [0.0]
    monkeypatch.setattr(registry, "_clock", lambda k: lambda: now[0])

    class _Ticking(_Fake):
        __slots__ = ("cost",)

        def __init__(self, name, cost):
            super().__init__(name, 0.0)
            self.cost = cost

        def run(self, x):
            now[0] += self.cost
            return super().run(x)

    a, b = _Ticking("a", 0.004), _Ticking("b", 0.004)
    install(a, b)
    registry.dispatch("tune_test", lambda v: v, np.arange(3.0))
    assert a.calls == b.calls == 1 + registry.TUNE_REPEATS
    fast, slower = _Ticking("fast", 0.006), _Ticking("slower", 0.01)  # clear, not dropped (< 2x)
    install(fast, slower)
    registry.dispatch("tune_test", lambda v: v, np.arange(4.0))
    assert fast.calls == slower.calls == 1 + registry.TUNE_ROUNDS


class _Loading(_Fake):
    """Slow on its first run only, as a kernel that compiles or loads on its first call."""

    __slots__ = ()

    def run(self, x):
        out = super().run(x)
        self.delay = 0.0
        return out


def test_a_first_run_never_scores(tuned):
    # a per-shape kernel loads (or, with TAPEGRAD_COMPILE=wait, compiles) on its first call:
    # timed on that call alone it would lose to slower ones on every key it first meets
    install, path = tuned
    loading, steady = _Loading("loading", 0.05), _Fake("steady", 0.01)
    install(steady, loading)
    registry.dispatch("tune_test", lambda a: a, np.arange(3.0))
    assert list(json.loads(path.read_text())["entries"].values()) == ["loading"]
    assert loading.calls >= 2 and steady.calls >= 2


def test_one_thread_is_timed_in_cpu_time_more_threads_by_the_wall_clock():
    # on a shared machine the wall clock adds the time other programs held the core
    assert registry._clock(("op", (1, False), ())) is time.process_time
    assert registry._clock(("op", (4, True), ())) is time.perf_counter


def test_the_table_on_disk_decides_in_a_later_process(tuned):
    install, path = tuned
    slow, fast = _Fake("slow", 0.03), _Fake("fast", 0.0)
    install(slow, fast)
    x = np.arange(3.0)
    k = repr(registry.key("tune_test", (x,)))
    path.write_text(json.dumps({"machine": registry.machine(), "entries": {k: "slow"}}))
    for _ in range(2):
        np.testing.assert_array_equal(registry.dispatch("tune_test", lambda a: a, x), x + 4)
    assert slow.calls == 2 and fast.calls == 0  # the table's choice, nothing timed


def test_the_reference_can_be_the_choice(tuned, monkeypatch):
    install, path = tuned
    monkeypatch.setitem(registry._TUNABLE, "tune_test", True)
    slow = _Fake("slow", 0.03)
    install(slow)
    calls = []
    out = registry.dispatch("tune_test", lambda a: calls.append(1) or a * 0, np.ones(2))
    np.testing.assert_array_equal(out, np.zeros(2))
    assert list(json.loads(path.read_text())["entries"].values()) == [registry.REFERENCE]
    n = len(calls)
    registry.dispatch("tune_test", lambda a: calls.append(1) or a * 0, np.ones(2))
    assert len(calls) == n + 1 and slow.calls == 2


def test_a_compiling_implementation_is_measured_once_ready(tuned, monkeypatch):
    install, path = tuned
    slow, fast = _Fake("slow", 0.03), _Fake("fast", 0.0, ready=False)
    install(slow, fast)
    x = np.arange(3.0)
    np.testing.assert_array_equal(registry.dispatch("tune_test", lambda a: a, x), x + 4)
    assert not path.exists()  # not final: nothing written
    monkeypatch.setattr(registry, "RETUNE_AFTER", 0.0)
    fast.ready = True
    np.testing.assert_array_equal(registry.dispatch("tune_test", lambda a: a, x), x + 4)
    assert list(json.loads(path.read_text())["entries"].values()) == ["fast"]


def test_the_write_is_atomic(tuned, monkeypatch):
    install, path = tuned
    install(_Fake("slow", 0.03), _Fake("fast", 0.0))
    registry.dispatch("tune_test", lambda a: a, np.zeros(1))
    before = path.read_text()

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    registry.dispatch("tune_test", lambda a: a, np.zeros(2))  # measured, not written
    assert path.read_text() == before  # the old table whole, no temporary file left
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_corrupt_table_is_ignored_with_one_line(tuned, capsys):
    install, path = tuned
    path.write_text('{"entries": {"a": ')  # truncated
    slow, fast = _Fake("slow", 0.03), _Fake("fast", 0.0)
    install(slow, fast)
    registry.dispatch("tune_test", lambda a: a, np.zeros(1))
    registry.dispatch("tune_test", lambda a: a, np.zeros(2))
    err = capsys.readouterr().err
    assert err.count("tuning table") == 1 and str(path) in err and "JSONDecodeError" in err
    assert len(json.loads(path.read_text())["entries"]) == 2  # rewritten whole


def test_tune_0_leaves_the_choice_to_the_thresholds(tuned, monkeypatch, tmp_path):
    install, path = tuned
    monkeypatch.setattr(registry, "_TUNE", [None])
    monkeypatch.setenv("TAPEGRAD_TUNE", "0")
    assert registry.tuning() is False
    slow = _Fake("slow", 0.03, prefer=lambda x: x.size > 2)
    fast = _Fake("fast", 0.0)
    install(slow, fast)
    registry.dispatch("tune_test", lambda a: a, np.zeros(1))  # slow not preferred: fast
    registry.dispatch("tune_test", lambda a: a, np.zeros(4))  # slow preferred, first
    assert (slow.calls, fast.calls) == (1, 1) and not path.exists()
    monkeypatch.setattr(registry, "_TUNE", [None])
    monkeypatch.setenv("TAPEGRAD_TUNE", "yes")
    with pytest.raises(ValueError, match="TAPEGRAD_TUNE must be '0' or '1'"):
        registry.tuning()


_RUN = """
import hashlib, numpy as np, tapegrad as tg, tapegrad.nn.functional as F
from tapegrad._kernels import registry
rng = np.random.default_rng(0)
x = tg.tensor(rng.standard_normal((8, 12, 1, 1)).astype(np.float32))
w = tg.Parameter(rng.standard_normal((24, 12, 3, 3)).astype(np.float32))
with tg.Tape() as tape:
    tape.watch(x)
    y = F.conv2d(x, w, padding=1)
    loss = (y * y).sum()
gx, gw = tape.gradient(loss, [x, w])
h = hashlib.sha256(y.numpy().tobytes() + gx.numpy().tobytes() + gw.numpy().tobytes())
finals = sorted(v[1] for k, v in registry._CHOSEN.items() if k[0].startswith("conv2d"))
print(h.hexdigest(), len(finals), all(finals))
"""


@numba_only
def test_two_processes_give_bit_identical_results_with_the_table_kept():
    # the suite's kernel cache (compiled kernels, and this machine's table: the first process
    # measures the three passes unless an earlier run did, the second reads the table)
    env = {**os.environ, "TAPEGRAD_TUNE": "1", "TAPEGRAD_COMPILE": "wait"}
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True,
                           timeout=600, check=False)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.split())
    assert outs[0] == outs[1] and outs[0][1] == "3" and outs[0][2] == "True"
