"""``autograd.numpy.linalg``: tapegrad's ``tg.linalg`` where it has the name, else numpy's."""

from typing import Any

import numpy as _np

import tapegrad as _tg


def _dot(a: Any, b: Any) -> Any:  # autograd's private matrix product
    return _tg.matmul(a, b)


def T(a: Any) -> Any:  # autograd's private transpose of the last two axes  # noqa: N802
    return _tg.swapaxes(a, -1, -2)


def __getattr__(name: str) -> Any:
    if hasattr(_tg.linalg, name):
        return getattr(_tg.linalg, name)
    return getattr(_np.linalg, name)
