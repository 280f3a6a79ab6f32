"""Shared fixtures: every test starts from the same random state, on one BLAS thread; the
random test order's seed is printed at the end.

The suite's arrays are small: a second BLAS thread only adds spin-waiting (and on a busy
2-core machine makes small matmuls several times slower), and timing is never tested here.
"""

from __future__ import annotations

import os

# Kernels compile where they are first called, as numba does, so that every test runs the code it
# names from its first call (by default they compile in a process beside and the numpy
# references run meanwhile); subprocesses the tests start inherit it.
os.environ.setdefault("TAPEGRAD_COMPILE", "wait")
# The hand thresholds choose among kernels (no timing), so every run takes the same kernels
# whatever the machine measures; tests/test_tuning.py turns the measuring on where it tests it.
os.environ.setdefault("TAPEGRAD_TUNE", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import tapegrad as tg  # noqa: E402

_LIMIT = threadpool_limits(limits=1)  # for the whole session, doctests included


@pytest.fixture(autouse=True)
def _seed() -> None:
    tg.manual_seed(0)
    np.random.seed(0)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """Print the order's seed at the end (``-q`` hides pytest-randomly's header line)."""
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(
            f"random test order, seed {seed}: rerun it with -p randomly --randomly-seed={seed}"
        )
