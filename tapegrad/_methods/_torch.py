"""Tensor's PyTorch surface: the methods a PyTorch program calls (in-place forms, ``new_*``,
``size()``, ``data``, names such as ``eq``, ``narrow``, ``view``) and the guards for spellings
that numpy and PyTorch both accept with different meanings (docs/from_pytorch.md)."""

from __future__ import annotations

import math
from typing import Any

from .. import _autodiff as _tape
from .._backend import np
from .._tensor import Tensor, _wrap
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _indexing as IX
from ..ops import _numpy_elementwise as NE
from ..ops import _numpy_extra as NX
from ..ops import _numpy_shape as NS
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops import _torch_names as TN
from ..ops._common import ArgumentError, check_axis
from ._numpy import _before_write, _bitwise, _DataView, _reflect, _to

# Tape rules for in-place arithmetic (add_, sub_, mul_, div_, clamp_, fill_, zero_, copy_): on
# a tensor that no recording tape holds they change the array in place and bump the version; on
# a tensor a recording tape holds they raise (write ``x = x * 2``); a tape that saved the tensor
# before it changed raises at backward time (the version check).


class _Size(int):
    """``x.size``: numpy's element count (an int), callable as PyTorch's ``x.size()`` (the
    shape) and ``x.size(dim)`` (one dimension)."""

    _shape: tuple[int, ...]

    def __new__(cls, shape: tuple[int, ...]) -> _Size:
        out = super().__new__(cls, math.prod(shape))  # np.prod costs 5 us a call
        out._shape = shape
        return out

    def __call__(self, dim: int | None = None) -> Any:
        if dim is None:
            return self._shape
        return self._shape[check_axis(dim, len(self._shape), "size")]


def _torch_inplace(name: str, f: Any, ufunc: Any = None) -> Any:
    """The method ``name``: ``f(array, *args)`` stored into the tensor's array; where ``ufunc``
    is given, a call with one operand runs it straight into the array (``out=``), as PyTorch's
    in-place arithmetic computes in the tensor's dtype (a Python number does not widen it)."""

    def op(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if _tape.is_grad_enabled() and any(tp._recording for tp in self._tapes):
            raise RuntimeError(
                f"{name}: the tensor (shape {self.shape}) is on a recording tape, and an in-place "
                f"change would hide the old value from it; write the out-of-place form "
                f"(x = x.{name[:-1]}(...) or x = x * 2), or run it under tg.no_grad() on a "
                "tensor the tape did not save"
            )
        _before_write(self, name)
        if ufunc is not None and len(args) == 1 and not kwargs:
            other = args[0]
            try:
                ufunc(self._data, other._data if isinstance(other, Tensor) else other,
                      out=self._data)
            except (TypeError, ValueError, OverflowError):
                pass  # a shape or dtype the tensor cannot hold: the path below names it
            else:
                self._version += 1
                return self
        args = tuple(a._data if isinstance(a, Tensor) else a for a in args)
        kwargs = {k: v._data if isinstance(v, Tensor) else v for k, v in kwargs.items()}
        new = np.asarray(f(self._data, *args, **kwargs))
        if np.broadcast_shapes(new.shape, self.shape) != self.shape:
            raise ValueError(f"{name}: the result has shape {new.shape}, the tensor {self.shape}")
        if new.dtype != self.dtype and not np.can_cast(new.dtype, self.dtype, "same_kind"):
            raise TypeError(
                f"{name}: a {new.dtype} result cannot be stored in a {self.dtype} tensor"
            )
        self._data[...] = new
        self._version += 1
        return self

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"In place, as PyTorch's ``{name}`` (refused on a recording tape)."
    return op


def _operand(other: Any) -> Any:
    """An in-place operand: a Python float kept as one (it takes the tensor's dtype)."""
    return other if isinstance(other, float) else np.asarray(other)


def _add(a: Any, other: Any, alpha: float = 1) -> Any:
    return a + alpha * _operand(other)


def _sub(a: Any, other: Any, alpha: float = 1) -> Any:
    return a - alpha * _operand(other)


def _clamp(a: Any, min: Any = None, max: Any = None) -> Any:
    return np.clip(a, min, max)


def _new(self: Tensor, data: Any, dtype: Any = None) -> Tensor:
    a = data._data if isinstance(data, Tensor) else data
    return _wrap(np.array(a, dtype=self.dtype if dtype is None else dtype))


def _new_full_like(fill: Any) -> Any:
    def op(self: Tensor, *size: Any, dtype: Any = None) -> Tensor:
        if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
            size = tuple(size[0])
        return _wrap(np.full(size, fill, dtype=self.dtype if dtype is None else dtype))

    return op


def _new_full(self: Tensor, size: Any, fill_value: Any, dtype: Any = None) -> Tensor:
    return _wrap(np.full(tuple(size), fill_value, dtype=self.dtype if dtype is None else dtype))


def _data_view(self: Tensor) -> Tensor:
    """PyTorch's ``x.data``: a tensor sharing memory with ``x``, on no tape. A write through it
    (``x.data.mul_(2)``, ``x.data[0] = 1``) moves ``x``'s version, so a tape that saved ``x``
    before raises at backward instead of giving a wrong gradient."""
    v = _DataView.__new__(_DataView)
    base = self._base if isinstance(self, _DataView) else self
    v._data, v._tapes, v._tid, v._version, v._base = self._data, (), None, 0, base
    return v


def _set_data(self: Tensor, value: Any) -> None:
    a = value._data if isinstance(value, Tensor) else np.asarray(value)
    self._data = a
    self._version += 1


def _split(self: Tensor, split_size_or_sections: Any, *args: Any, axis: Any = None,
           dim: Any = None) -> Any:  # fmt: skip
    """``tg.split`` as a method: ``axis=`` numpy's meaning, ``dim=`` PyTorch's; a call that
    names neither raises where the two differ."""
    return S.split(self, split_size_or_sections, *args, axis=axis, dim=dim)


def _arg_torch(f: Any) -> Any:
    def op(self: Tensor, axis: Any = None, keepdims: bool = False, *,
           dim: Any = None, keepdim: Any = None) -> Tensor:  # fmt: skip
        ax = axis if dim is None else dim
        return f(self, axis=ax, keepdims=keepdims or bool(keepdim))  # type: ignore[no-any-return]

    op.__name__ = op.__qualname__ = f.__name__
    op.__doc__ = f.__doc__
    return op


def _spread(f: Any) -> Any:
    def op(self: Tensor, axis: Any = None, keepdims: bool = False, correction: Any = None, *,
           dim: Any = None, unbiased: Any = None, keepdim: Any = None, ddof: Any = None) -> Tensor:  # fmt: skip
        if correction is None and unbiased is not None:
            correction = 1 if unbiased else 0
        out = f(self, axis=axis, keepdims=keepdims, correction=correction, ddof=ddof, dim=dim,
                keepdim=keepdim)  # fmt: skip
        return out  # type: ignore[no-any-return]

    op.__name__ = op.__qualname__ = f.__name__
    op.__doc__ = (
        f"``x.{f.__name__}(axis, ddof=0)`` (numpy's) or ``x.{f.__name__}(dim=..., "
        "correction=1)`` (PyTorch's; ``dim=`` alone implies it); a call that names neither the "
        "correction nor ``dim=`` raises, since the two libraries differ there."
    )
    return op


def torch() -> dict[str, Any]:
    """PyTorch's methods (in-place forms, ``new_*``, ``size()``, ``data``, ...)."""
    return {
        "size": property(lambda self: _Size(self.shape)),
                "new_tensor": _new,
        "new_zeros": _new_full_like(0),
        "new_ones": _new_full_like(1),
        "new_empty": _new_full_like(0),
        "new_full": _new_full,
        "add_": _torch_inplace("add_", _add, np.add),
        "sub_": _torch_inplace("sub_", _sub, np.subtract),
        "mul_": _torch_inplace("mul_", np.multiply, np.multiply),
        "div_": _torch_inplace("div_", np.true_divide, np.true_divide),
        "clamp_": _torch_inplace("clamp_", _clamp),
        "fill_": _torch_inplace("fill_", np.full_like),
        "zero_": _torch_inplace("zero_", np.zeros_like),
        "copy_": _torch_inplace("copy_", lambda a, src: src),
        "data": property(_data_view, _set_data),
        "split": _split,
        "argmax": _arg_torch(R.argmax),
        "argmin": _arg_torch(R.argmin),
        "var": _spread(R.var),
        "std": _spread(R.std),
    }


# --- PyTorch's spellings (dim= / keepdim=, comparisons by name, narrow, view_as, type) --------
def _type(self: Tensor, dtype: Any = None) -> Any:
    """``x.type(dtype)``: a cast (PyTorch's Tensor.type). ``x.type()`` raises: PyTorch's gives a
    legacy type name (``'torch.FloatTensor'``), which a tapegrad tensor has no equivalent of."""
    if dtype is None:
        raise TypeError(
            f"type: x.type() is PyTorch's legacy type name ('torch.FloatTensor'), which tapegrad "
            f"has no equivalent of; the dtype is x.dtype ({self.dtype}), and x.type(dtype) casts"
        )
    return S.astype(self, dtype)


def torch_names() -> dict[str, Any]:
    """PyTorch's names for comparisons and shape ops (``eq``, ``narrow``, ``view_as``, ...)."""
    return {
        "eq": TN.eq,
        "ne": TN.ne,
        "lt": TN.lt,
        "le": TN.le,
        "gt": TN.gt,
        "ge": TN.ge,
        "narrow": TN.narrow,
        "select": lambda self, dim, index: NS.select(self, dim=dim, index=index),
        "view_as": lambda self, other: S.reshape(self, other.shape),
        "contiguous": lambda self: self,  # arrays here are always usable as they are
        "type": _type,
        "mm": TN.mm,
        "bmm": TN.bmm,
        "repeat_interleave": TN.repeat_interleave,
        "index_select": TN.index_select,
        "masked_fill": TN.masked_fill,
        "topk": TN.topk,
        "index_add": TN.with_dim(IX.index_add),
        "scatter_add": TN.with_dim(IX.scatter_add),
        "numel": lambda self: self._data.size,
        "dim": lambda self: self._data.ndim,
    }


# --- more PyTorch method spellings (PyTorch's meaning; numpy has no method of these names) ----
def _div(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """PyTorch's ``div``: true division, or rounded toward zero (``"trunc"``) or down
    (``"floor"``); a rounded quotient has no gradient, as PyTorch's."""
    if rounding_mode is None:
        return BI.div(self, other)
    if rounding_mode == "floor":
        return BI.floor_divide(self, other)
    if rounding_mode != "trunc":
        raise ArgumentError(
            f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
        )
    q = BI.floor_divide(self, other)  # numpy's result dtype for the pair
    if q.dtype.kind not in "iu":
        return E.trunc(BI.div(self, other))
    a_, b_ = (v._data if isinstance(v, Tensor) else np.asarray(v) for v in (self, other))
    return _wrap(np.asarray(np.trunc(np.true_divide(a_, b_)).astype(q.dtype)))


def _expand(self: Tensor, *sizes: Any) -> Tensor:
    """PyTorch's ``expand``: broadcast to ``sizes`` (-1 keeps a dimension)."""
    if len(sizes) == 1 and not isinstance(sizes[0], (int, np.integer)):
        sizes = tuple(sizes[0])
    lead = len(sizes) - self.ndim
    if lead < 0:
        raise ValueError(f"expand: {len(sizes)} sizes for a tensor of shape {self.shape}")
    shape = tuple(self.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(sizes))
    return S.broadcast_to(self, shape)


def _view(self: Tensor, *shape: Any) -> Tensor:
    """PyTorch's ``view``: a reshape, or with one dtype the same bytes read as that dtype (no
    gradient, as PyTorch's)."""
    if len(shape) == 1 and (
        isinstance(shape[0], np.dtype)
        or (isinstance(shape[0], type) and issubclass(shape[0], np.generic))
    ):
        return _wrap(np.ascontiguousarray(self._data).view(shape[0]))
    return S.reshape(self, *shape)


def _unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """PyTorch's ``unfold``: the windows of ``size`` every ``step`` along ``dimension``, as a
    new last axis (gradients flow back to every window)."""
    ax = check_axis(dimension, max(self.ndim, 1), "unfold")
    n = self.shape[ax] if self.ndim else 1
    if step <= 0 or not 0 <= size <= n:
        raise ArgumentError(
            f"unfold: size {size} and step {step} along dimension {dimension} of size {n}: need "
            f"0 <= size <= {n} and step > 0"
        )
    count = (n - size) // step + 1
    idx = np.arange(count)[:, None] * step + np.arange(size)[None, :]  # (count, size)
    x = self if self.ndim else S.reshape(self, (1,))
    return S.moveaxis(IX.take(x, idx, axis=ax), ax + 1, -1)


def torch_more() -> dict[str, Any]:
    methods: dict[str, Any] = {
        "acos": NE.arccos,
        "asin": NE.arcsin,
        "atan": NE.arctan,
        "acosh": NE.arccosh,
        "asinh": NE.arcsinh,
        "atanh": NE.arctanh,
        "cosh": NE.cosh,
        "sinh": NE.sinh,
        "exp2": NE.exp2,
        "neg": E.neg,
        "negative": E.neg,
        "fmod": BI.fmod,
        "mul": BI.multiply,
        "multiply": BI.multiply,
        "div": _div,
        "divide": _div,
        "lerp": TN.lerp,
        "isclose": TN.isclose,
        "masked_select": TN.masked_select,
        "cummax": TN.cummax,
        "cummin": TN.cummin,
        "logcumsumexp": TN.logcumsumexp,
        "unflatten": TN.unflatten,
        "gather": TN.gather,
        "bitwise_not": TN.bitwise_not,
        "argsort": TN.with_dim(TN.argsort),
        "expand": _expand,
        "half": lambda self: S.astype(self, np.float16),
        "cpu": lambda self: _to(self, "cpu"),
        "where": lambda self, condition, other: BI.where(condition, self, other),
        "sort": TN.sort,
        "view": _view,
        "unfold": _unfold,
        "diag": lambda self, diagonal=0: NX.diag(self, diagonal),
        "diagonal": lambda self, offset=0, dim1=0, dim2=1: NX.diagonal(self, offset, dim1, dim2),
        "bitwise_left_shift": _bitwise(np.left_shift, "bitwise_left_shift"),
        "bitwise_right_shift": _bitwise(np.right_shift, "bitwise_right_shift"),
    }
    for name, sym, f in (("lshift", "<<", np.left_shift), ("rshift", ">>", np.right_shift)):
        op = _bitwise(f, sym)
        methods[f"__{name}__"] = op
        methods[f"__r{name}__"] = _reflect(op)
    return methods

