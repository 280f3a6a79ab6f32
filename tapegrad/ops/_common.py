"""Helpers shared by the op modules: operand conversion, dtype promotion, axes and errors."""

from __future__ import annotations

from typing import Any

from .._backend import is_array, np
from .._dtypes import default_float
from .._tensor import Tensor, _wrap, complex_error


class ArgumentError(ValueError, RuntimeError):
    """A bad argument value or shape: numpy's ``ValueError`` and PyTorch's ``RuntimeError``, so
    code written for either library catches it."""


class ArgumentTypeError(TypeError, RuntimeError):
    """An argument of a dtype the op does not take: numpy's ``TypeError`` and PyTorch's
    ``RuntimeError``."""


def as_tensor(x: Any, name: str = "op") -> Tensor:
    """A Tensor from a Tensor, array or Python data (Python floats become the default float)."""
    if isinstance(x, Tensor):
        return x
    if is_array(x):
        if x.dtype.kind == "c":
            raise TypeError(complex_error("a tapegrad op" if name == "op" else name, x.dtype))
        return _wrap(x)
    if isinstance(x, (list, tuple)) and _holds_tensor(x):
        return _stack_nested(x, _first_tensor(x).dtype)  # stays on the tape (numpy.array([t, t]))
    return Tensor(x)


def _holds_tensor(x: Any) -> bool:
    return any(isinstance(v, Tensor) or (isinstance(v, (list, tuple)) and _holds_tensor(v)) for v in x)


def _first_tensor(x: Any) -> Any:
    for v in x:
        t = v if isinstance(v, Tensor) else _first_tensor(v) if isinstance(v, (list, tuple)) else None
        if t is not None:
            return t
    return None


def _stack_nested(x: Any, dtype: Any) -> Tensor:
    from . import _shape as S  # noqa: PLC0415 - _shape imports this module

    if isinstance(x, (list, tuple)):
        return S.stack([_stack_nested(v, dtype) for v in x])
    return x if isinstance(x, Tensor) else _wrap(np.asarray(x, dtype=dtype))


def operands(x: Any, y: Any) -> tuple[Any, Any]:
    """Make binary operands agree on dtype the way PyTorch does.

    Two tensors of one dtype pass through untouched (the hot path). Python scalars stay Python
    scalars, which numpy treats as "weak" (the tensor keeps its dtype), except a float with an
    integer or bool tensor, which gives the default float. An integer tensor meeting a float
    tensor takes the float's dtype (numpy would widen int64 + float32 to float64), and a 0-d
    tensor does not widen a dimensioned one of the same kind (float64 scalar * float32 matrix
    stays float32).
    """
    if isinstance(x, Tensor):
        if isinstance(y, Tensor):
            dx, dy = x._data.dtype, y._data.dtype
            if dx is dy or dx == dy:
                return x, y
            return _promote(x, y)
        return _with_scalar(x, y)
    if isinstance(y, Tensor):
        t, s = _with_scalar(y, x)
        return s, t
    return as_tensor(x), as_tensor(y)


def _with_scalar(t: Tensor, s: Any) -> tuple[Tensor, Any]:
    """A tensor and a non-Tensor operand, both converted by PyTorch's rules."""
    if isinstance(s, bool):  # before int: bool is an int subclass
        return t, s
    if isinstance(s, (int, np.integer)):
        return t, int(s)
    if isinstance(s, (float, np.floating)):
        if t._data.dtype.kind in "biu":
            t = t.astype(default_float())
        return t, float(s)  # a Python float is weak; np.float64 would widen float32
    if isinstance(s, np.bool_):
        return t, bool(s)
    if is_array(s):
        return _promote(t, as_tensor(s))
    if isinstance(s, (list, tuple)):
        return _promote(t, Tensor(s))
    raise TypeError(
        f"unsupported operand type {type(s).__name__} with a Tensor; use a Tensor, an array "
        "or a Python number"
    )


def _promote(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    dx, dy = x._data.dtype, y._data.dtype
    if dx == dy:
        return x, y
    fx, fy = dx.kind in "fc", dy.kind in "fc"
    if fx and not fy:
        return x, y.astype(dx)
    if fy and not fx:
        return x.astype(dy), y
    bx, by = dx.kind == "b", dy.kind == "b"
    if bx != by:  # bool meets an integer: the integer's dtype
        return (x.astype(dy), y) if bx else (x, y.astype(dx))
    # same kind: a 0-d tensor does not widen a dimensioned one (PyTorch); else numpy's rule
    if x._data.ndim == 0 and y._data.ndim > 0:
        return x.astype(dy), y
    if y._data.ndim == 0 and x._data.ndim > 0:
        return x, y.astype(dx)
    d = np.promote_types(dx, dy)
    return x.astype(d), y.astype(d)


def result_dtype(*dtypes: Any) -> Any:
    """The common dtype of several tensors by the rules of ``operands`` (ints join floats)."""
    floats = [d for d in dtypes if d.kind in "fc"]
    return np.result_type(*(floats or dtypes))


def normalize_axis(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints, checked.

    A 0-d tensor accepts axis 0 or -1 (as PyTorch) and reduces over nothing.
    """
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
        out.append(check_axis(int(a), ndim, op))
    if ndim == 0:
        return ()
    if len(set(out)) != len(out):
        raise ArgumentError(f"{op}: axis {axis!r} repeats a dimension")
    return tuple(sorted(out))


def check_axis(axis: int, ndim: int, op: str) -> int:
    """One axis, made non-negative; a clear error (an IndexError and a ValueError) if out of range."""
    n = max(ndim, 1)
    if not -n <= axis < n:
        raise np.exceptions.AxisError(
            f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions "
            f"(valid: {-n}..{n - 1})"
        )
    return axis % n
