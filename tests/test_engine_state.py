"""The trace state's process-wide counters: the hot path reads them before any thread-local field,
so each must be nonzero exactly while what it counts is open, in any thread."""

from __future__ import annotations

import threading

import numpy as np

import tapegrad as tg
from tapegrad._autodiff._state import ACTIVE


def _counts() -> tuple[int, int, int]:
    return ACTIVE.n, ACTIVE.hooks, ACTIVE.off


def test_no_grad_counts_while_open_nested_and_after_an_error():
    before = _counts()
    with tg.no_grad():
        assert ACTIVE.off == before[2] + 1
        with tg.no_grad():
            assert ACTIVE.off == before[2] + 2
    try:
        with tg.no_grad():
            raise KeyError("inside")
    except KeyError:
        pass
    assert _counts() == before


def test_no_grad_in_one_thread_leaves_another_threads_tape_recording():
    w = tg.Parameter(tg.ones(3))
    opened, done = threading.Event(), threading.Event()

    def other() -> None:
        with tg.no_grad():
            opened.set()
            done.wait(5)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert opened.wait(5)
        assert ACTIVE.off >= 1  # the other thread's no_grad is open
        with tg.Tape() as tape:
            y = (w * w).sum()
        assert len(tape.nodes) == 2
        np.testing.assert_allclose(tape.gradient(y, w).numpy(), 2 * np.ones(3))
        with tg.Tape() as tape, tg.no_grad():
            w * w
        assert len(tape.nodes) == 0  # this thread's own no_grad still stops recording
    finally:
        done.set()
        t.join()


def test_hooks_count_while_a_check_or_capture_runs():
    before = _counts()
    with tg.detect_anomaly():
        assert ACTIVE.hooks == before[1] + 1
        w = tg.Parameter(tg.ones(2))
        with tg.Tape():
            try:
                w * tg.tensor([np.nan, 1.0])
            except Exception as e:  # noqa: BLE001 - the check after the op ran
                assert "nan" in str(e).lower()
            else:
                raise AssertionError("detect_anomaly's after-op check did not run")
    assert _counts() == before
