"""Helpers shared by the op modules: operand conversion and dtype promotion."""

from __future__ import annotations

from typing import Any

from .._backend import is_array, np
from .._dtypes import default_float
from .._tensor import Tensor, _wrap


def as_tensor(x: Any, name: str = "op") -> Tensor:
    """A Tensor from a Tensor, array or Python data (Python floats become the default float)."""
    if isinstance(x, Tensor):
        return x
    if is_array(x):
        return _wrap(x)
    return Tensor(x)


def operands(x: Any, y: Any) -> tuple[Any, Any]:
    """Make binary operands agree on dtype the way PyTorch does.

    Two tensors of one dtype pass through untouched (the hot path). Python scalars stay Python
    scalars (numpy keeps the tensor's dtype for them), except a float with an integer tensor,
    which gives the default float. An integer tensor meeting a float tensor takes the float's
    dtype (numpy would widen int64 + float32 to float64).
    """
    xt = isinstance(x, Tensor)
    yt = isinstance(y, Tensor)
    if xt and yt:
        dx, dy = x._data.dtype, y._data.dtype
        if dx is dy or dx == dy:
            return x, y
        return _promote(x, y)
    if xt:
        return x, _scalar_operand(x, y)
    if yt:
        return _scalar_operand(y, x), y
    return as_tensor(x), as_tensor(y)


def _scalar_operand(t: Tensor, s: Any) -> Any:
    if isinstance(s, bool):
        return s
    if isinstance(s, float) and t._data.dtype.kind in "biu":
        return np.asarray(s, dtype=default_float())
    if isinstance(s, (int, float)):
        return s
    if is_array(s):
        return _promote(t, _wrap(s))[1]
    if isinstance(s, (list, tuple)) or isinstance(s, np.generic):
        return _promote(t, Tensor(s))[1]
    raise TypeError(f"unsupported operand type: {type(s).__name__} with a Tensor")


def _promote(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    kx, ky = x._data.dtype.kind, y._data.dtype.kind
    fx, fy = kx in "fc", ky in "fc"
    if fx and not fy:
        return x, y.astype(x.dtype)
    if fy and not fx:
        return x.astype(y.dtype), y
    return x, y  # numpy's rules between two floats or two ints (float32+float64 -> float64)


def normalize_axis(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints, checked."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= a < max(ndim, 1):
            raise IndexError(
                f"{op}: axis {a} is out of range for a tensor with {ndim} dimensions "
                f"(valid: {-ndim}..{ndim - 1})"
            )
        out.append(int(a) % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis!r} repeats a dimension")
    return tuple(sorted(out))
