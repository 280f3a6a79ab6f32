"""``autograd.numpy.linalg``: tapegrad's ``tg.linalg`` where it has the name, else numpy's."""

from typing import Any

import numpy as _np

import tapegrad as _tg


def __getattr__(name: str) -> Any:
    if hasattr(_tg.linalg, name):
        return getattr(_tg.linalg, name)
    return getattr(_np.linalg, name)
