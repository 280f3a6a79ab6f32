"""``autograd.numpy`` as tapegrad's numpy-style namespace, numpy for the rest.

A name tapegrad has is tapegrad's (so the tape records it); creation functions and constants
stay numpy's (autograd's give float64 arrays, which need no gradient); any other name is
numpy's own function, which dispatches Tensors to tapegrad through ``__array_function__`` /
``__array_ufunc__`` or refuses them.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

import tapegrad as _tg
from tapegrad import _numpy_api as _api

from . import linalg, random  # noqa: F401

# names numpy creates constants with (float64 arrays), and tapegrad names that are not numpy's
_NUMPY_FIRST = set(
    "arange empty eye full ones zeros linspace identity load save testing linalg random bool "
    "double long float16 float32 float64 int8 int16 int32 int64 uint8 bool_ from_dlpack "
    "array asarray".split()
)
__version__ = _np.__version__


def _has_tensor(x: Any) -> bool:
    if isinstance(x, _tg.Tensor):
        return True
    if isinstance(x, (list, tuple)):
        return any(_has_tensor(v) for v in x)
    return False


def array(obj: Any, *args: Any, **kwargs: Any) -> Any:
    # autograd stacks a nested list holding boxes; tapegrad's stack records it on the tape
    return _nested(obj) if _has_tensor(obj) else _np.array(obj, *args, **kwargs)


def _nested(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return _tg.stack([_nested(v) for v in x])
    return x if isinstance(x, _tg.Tensor) else _tg.tensor(_np.asarray(x, dtype=_np.float64))


def make_diagonal(d: Any, offset: int = 0, axis1: int = -1, axis2: int = -2) -> Any:
    """autograd's own inverse of ``diagonal``: ``d``'s last axis on a diagonal."""
    if offset != 0 or sorted((axis1 % (_np.ndim(d) + 1), axis2 % (_np.ndim(d) + 1))) != [
        _np.ndim(d) - 1,
        _np.ndim(d),
    ]:
        raise NotImplementedError("make_diagonal: only offset=0 on the last two axes")
    d = d if isinstance(d, _tg.Tensor) else _np.asarray(d)
    n = _np.shape(d)[-1]
    return _tg.expand_dims(d, -1) * _np.eye(n)


# numpy's meaning of names tapegrad shares with PyTorch (tg.sort(x) alone asks which one)
sort = _api._sort
gradient = _api._gradient


def __getattr__(name: str) -> Any:
    # numpy's meaning where tapegrad's name differs or asks: numpy's own adapters
    if name in _api._RENAMED:
        return getattr(_tg, _api._RENAMED[name])
    if name in _api._ADAPTED:
        return _api._ADAPTED[name]
    if name not in _NUMPY_FIRST and hasattr(_tg, name):
        return getattr(_tg, name)
    if hasattr(_np, name):
        return getattr(_np, name)
    raise AttributeError(f"autograd.numpy.{name}: neither tapegrad nor numpy has it")
