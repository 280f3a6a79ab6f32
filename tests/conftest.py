"""Shared fixtures: every test starts from the same random state."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg


@pytest.fixture(autouse=True)
def _seed() -> None:
    tg.manual_seed(0)
    np.random.seed(0)
