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

# Every float dtype the engine differentiates; bfloat16 (kind "V" in numpy) joins on first use.
FLOAT_DTYPES: set[np.dtype] = {np.dtype(c) for c in "efdg"}
_bfloat16: np.dtype | None = None

_default_float = float32


def bfloat16_dtype() -> np.dtype:
    """numpy's bfloat16 from the ``ml_dtypes`` package, imported on first use."""
    global _bfloat16
    if _bfloat16 is None:
        try:
            import ml_dtypes  # noqa: PLC0415
        except ImportError as e:
            raise ImportError(
                "tg.bfloat16 needs the ml_dtypes package on the CPU: "
                "pip install 'tapegrad[amp]' (or use tg.float16)"
            ) from e
        _bfloat16 = np.dtype(ml_dtypes.bfloat16)
        FLOAT_DTYPES.add(_bfloat16)
    return _bfloat16


def __getattr__(name: str) -> Any:
    if name == "bfloat16":  # lazily: `import tapegrad` does not import ml_dtypes
        return bfloat16_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return bfloat16_dtype()
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"dtype {dtype!r} is not understood: use tg.float32, tg.float64, tg.int32, "
            "tg.int64, tg.bool_ or their names as strings"
        ) from None


def is_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a floating-point dtype (bfloat16 included)."""
    return dtype.kind == "f" or dtype in FLOAT_DTYPES
