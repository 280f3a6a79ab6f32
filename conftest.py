"""Shared fixtures: every test starts from the same random state, on one BLAS thread.

The suite's arrays are small: a second BLAS thread only adds spin-waiting (and on a busy
2-core machine makes small matmuls several times slower), and timing is never tested here.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tapegrad as tg

_LIMIT = threadpool_limits(limits=1)  # for the whole session, doctests included


@pytest.fixture(autouse=True)
def _seed() -> None:
    tg.manual_seed(0)
    np.random.seed(0)
