"""dtypes: numpy dtype objects under short names, and PyTorch-like promotion."""

from __future__ import annotations

from typing import Any

from ._backend import np

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

_default_float = float32


def default_float() -> np.dtype:
    """The float dtype that Python floats and float creation functions use."""
    return _default_float


def set_default_dtype(dtype: Any) -> None:
    """Set the float dtype that Python floats and float creation functions use (float32 at start)."""
    global _default_float
    d = as_dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"set_default_dtype: {d} is not a float dtype; use float32 or float64")
    _default_float = d


def as_dtype(dtype: Any) -> np.dtype:
    """Accept ``tg.float32``, numpy dtypes/types and strings ('float32', 'int64', 'bool')."""
    if dtype is None:
        return _default_float
    if isinstance(dtype, np.dtype):
        return dtype
    if dtype is bool or dtype == "bool":
        return bool_
    if dtype is float:
        return _default_float
    if dtype is int:
        return int64
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"dtype {dtype!r} is not understood: use tg.float32, tg.float64, tg.int32, "
            "tg.int64, tg.bool_ or their names as strings"
        ) from None


def is_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a floating-point dtype."""
    return dtype.kind == "f"
