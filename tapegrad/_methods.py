"""Bind the ops to Tensor as methods and operators (after both exist)."""

from __future__ import annotations

import math
import sys
from typing import Any

from . import _autodiff as _tape
from . import _backend as B
from . import _numpy_api
from ._backend import np
from ._tensor import TAPE_LOOP, Tensor, _wrap
from .ops import _elementwise as E
from .ops import _linalg as L
from .ops import _numpy_extra as NX
from .ops import _reduce as R
from .ops import _shape as S
from .ops import _softmax as SM
from .ops import _torch_names as TN
from .ops._common import ArgumentError, ArgumentTypeError, check_axis, operands


def _reflect(f: Any) -> Any:
    def op(self: Tensor, other: Any) -> Tensor:
        return f(other, self)

    return op


def _bitwise(f: Any, name: str) -> Any:
    """``&``, ``|``, ``^``: logical on bools, bitwise on integers (as PyTorch); no gradient."""

    def op(x: Any, y: Any) -> Tensor:
        x, y = operands(x, y)
        a = x._data if isinstance(x, Tensor) else x
        b = y._data if isinstance(y, Tensor) else y
        try:
            return _wrap(np.asarray(f(a, b)))
        except TypeError:
            raise ArgumentTypeError(
                f"{name}: needs bool or integer tensors, got {np.asarray(a).dtype} and "
                f"{np.asarray(b).dtype}; compare first (x > 0) to get bools"
            ) from None

    return op


def _invert(x: Tensor) -> Tensor:
    if x._data.dtype.kind not in "biu":
        raise TypeError(f"~: needs a bool or integer tensor, got {x.dtype}")
    return _wrap(np.invert(x._data))


def _setitem(self: Tensor, idx: Any, value: Any) -> None:
    """In-place assignment. On a recording tape it is recorded functionally: the tensor becomes
    the output of an index-put, and ops that saved its old value notice (version counter)."""
    v = value._data if isinstance(value, Tensor) else value
    nidx = S._norm_index(idx)
    if type(nidx) is tuple and len(nidx) > 2 and np.ndim(v) > 0 and S._layouts_differ(nidx, self.ndim):
        raise IndexError(S._LAYOUT_MESSAGE.format(idx=S._show(nidx), shape=self.shape))
    recording = _tape.is_grad_enabled() and (
        any(tp._recording for tp in self._tapes)
        or (isinstance(value, Tensor) and any(tp._recording for tp in value._tapes))
    )
    if recording:
        if any(tp._recording and self._tid in tp._leaves for tp in self._tapes):
            # as PyTorch: the source itself would change, so its gradient would be the new value's
            raise TypeError(
                f"setitem: writing into x[{S._show(nidx)}] (shape {self.shape}), a tensor a "
                "recording tape watches as a source of gradients; write into a copy "
                "(y = x * 1.0; y[...] = v) or build the result with tg.where"
            )
        vt = value if isinstance(value, Tensor) else _wrap(np.asarray(v, dtype=self.dtype))
        new = _index_put(self, nidx, vt)
        self._data, self._tid, self._tapes = new._data, new._tid, new._tapes
    else:
        _before_write(self, "setitem")
        try:
            self._data[nidx] = v
        except (ValueError, IndexError) as e:
            raise type(e)(
                f"setitem: {e} (tensor shape {self.shape}, index {S._show(nidx)})"
            ) from None
    self._version += 1


class _DataView(Tensor):
    """``x.data``: ``x``'s array on no tape; a write through it counts as a write to ``x``
    (``x``'s version moves), so a tape that saved ``x`` refuses to differentiate with it."""

    __slots__ = ("_base",)
    _base: Tensor


def _before_write(t: Tensor, op: str) -> None:
    """Called before ``t``'s array is changed in place outside any tape."""
    flags = getattr(t._data, "flags", None)
    if flags is not None and not flags.writeable:
        raise ValueError(
            f"{op}: this array is read-only: it is x.numpy() of a tensor (shape {t.shape}) that "
            "a tape may still differentiate, and a write through it would change saved values "
            "without the tape knowing (a wrong gradient). Write through the tensor itself "
            "(x.copy_(v), x[...] = v, x.mul_(2)), which the tape's version check sees"
        )
    if isinstance(t, _DataView):
        t._base._version += 1


def _index_put(x: Tensor, idx: Any, v: Tensor) -> Tensor:
    # out = x with x[idx] replaced by v: x where the mask is off, plus v scattered
    mask = np.zeros(x.shape, dtype=bool)
    mask[idx] = True
    keep = E.where(_wrap(mask), 0.0, x)
    vb = S.broadcast_to(v.astype(x.dtype), mask[idx].shape)
    return keep + _tape.apply(
        S._index_grad, vb, idx=idx, shape=x.shape, advanced=S._is_advanced(idx)
    )


def _repeat(self: Tensor, *sizes: Any, axis: Any = None) -> Tensor:
    """PyTorch's ``x.repeat(*sizes)``: the tensor tiled ``sizes[i]`` times along axis ``i``
    (numpy's ``tile``). numpy's element repeat is ``tg.repeat(x, n, axis)`` or
    ``x.repeat_interleave(n, dim)``; ``x.repeat(n, axis=a)`` also gives it.

    >>> import tapegrad as tg
    >>> tg.tensor([1, 2]).repeat(2).tolist(), tg.tensor([1, 2]).repeat_interleave(2).tolist()
    ([1, 2, 1, 2], [1, 1, 2, 2])
    """
    if axis is not None:
        if len(sizes) != 1:
            raise TypeError(f"repeat: with axis= (numpy's meaning) give one count, got {sizes}")
        return S.repeat(self, sizes[0], axis=axis)
    if len(sizes) == 1 and not isinstance(sizes[0], (int, np.integer)):
        sizes = tuple(sizes[0])
    if len(sizes) < self.ndim:
        raise ValueError(
            f"repeat: {len(sizes)} counts {sizes} for a tensor of shape {self.shape}; PyTorch's "
            f"x.repeat takes one count per dimension (at least {self.ndim}) and tiles; for "
            "numpy's element repeat write tg.repeat(x, n, axis) or x.repeat_interleave(n, dim)"
        )
    return S.tile(self, sizes)


def _permute(self: Tensor, *axes: Any) -> Tensor:
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = tuple(axes[0])
    return S.permute_dims(self, axes)


_NUMPY_ON_TAPE = (
    "numpy(): the tensor (shape {shape}) is on a recording tape, so the array would leave the tape "
    "and what is computed from it gets no gradient (PyTorch: \"Can't call numpy() on Tensor "
    "that requires grad\"). Stay on the tape with tapegrad ops (tg.tanh(x), not "
    "np.tanh(x.numpy())), or leave it on purpose: x.detach().numpy()"
)


def _held(t: Tensor) -> bool:
    """Whether a tape that can still run backward may hold ``t``'s array: a trainable
    parameter (any tape that recorded it), or a tensor on a tape not yet released."""
    if t._is_param and t.requires_grad:  # type: ignore[attr-defined]
        return True
    return any(not tp._released for tp in t._tapes)


def _guarded_array(t: Tensor) -> Any:
    """``t``'s array for ``numpy()``: refused on a recording tape, read-only while a tape may
    hold it, so a write that the tape cannot see is an error, never a wrong gradient
    (``x.data.numpy()`` and ``x.detach().numpy()`` leave the tape on purpose)."""
    a = _plain_numpy(t)
    leaving = isinstance(t, _DataView)
    if isinstance(t, _DataView):
        t = t._base
    if t._tid is None or a.dtype.kind not in "fc":
        return a
    if not leaving and _tape.is_grad_enabled() and (
        any(tp._recording for tp in t._tapes)
        or (t._is_param and t.requires_grad and _tape.is_recording())  # type: ignore[attr-defined]
    ):
        raise RuntimeError(_NUMPY_ON_TAPE.format(shape=t.shape))
    if _held(t) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


_plain_numpy = Tensor._host


def _numpy(self: Tensor) -> Any:
    """The values as a numpy array (copied to the host for 'cuda'); leaves every tape. A 0-d
    tensor gives a 0-d array (never a numpy scalar).

    As PyTorch's: refused on a tensor that a recording tape holds (a float tensor that needs a
    gradient); ``x.detach().numpy()`` leaves the tape on purpose. A read-only view while a tape
    that has not run backward may hold the tensor (a trainable parameter, or a tensor on an
    unreleased tape): write through the tensor (``x.copy_(v)``), which the tape sees.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(2))
    >>> w.numpy().flags.writeable, w.detach().numpy().flags.writeable
    (False, True)
    """
    return _guarded_array(self)


def _grad(self: Tensor) -> Any:
    raise AttributeError(
        f"'{type(self).__name__}' has no .grad: tapegrad keeps gradients out of the tensors. "
        "tape.gradient(...) and loss.backward() return them: grads = loss.backward() (or "
        "tape.gradient(loss, model)), then grads[p] is p's gradient and opt.step(grads) uses "
        "them. A training step reads\n" + TAPE_LOOP
    )


def _format(self: Tensor, spec: str) -> str:
    if spec and self._data.size == 1:
        return format(self._data.item(), spec)
    return format(str(self), spec)


def _core() -> dict[str, Any]:
    """The operators and the ops as methods (numpy's spellings)."""
    out: dict[str, Any] = {}
    binary = {
        "add": E.add,
        "sub": E.subtract,
        "mul": E.multiply,
        "truediv": E.divide,
        "floordiv": E.floor_divide,
        "mod": E.remainder,
        "pow": E.pow,
        "matmul": L.matmul,
    }
    for name, f in binary.items():
        out[f"__{name}__"] = f
        out[f"__r{name}__"] = _reflect(f)
    for name, sym, f in (
        ("and", "&", np.bitwise_and),
        ("or", "|", np.bitwise_or),
        ("xor", "^", np.bitwise_xor),
    ):
        op = _bitwise(f, sym)
        out[f"__{name}__"] = op
        out[f"__r{name}__"] = _reflect(op)
    dunders = {
        "__neg__": E.neg,
        "__pos__": lambda self: self,
        "__abs__": E.abs,
        "__invert__": _invert,
        "__eq__": E.equal,
        "__ne__": E.not_equal,
        "__lt__": E.less,
        "__le__": E.less_equal,
        "__gt__": E.greater,
        "__ge__": E.greater_equal,
        "__getitem__": S.getitem,
        "__setitem__": _setitem,
        "__format__": _format,
    }
    out.update(dunders)
    for mod, names in (
        (
            E,
            "exp expm1 log log1p log2 log10 sqrt rsqrt square reciprocal sin cos tan tanh "
            "sigmoid relu erf sign floor ceil round trunc isnan isfinite isinf abs clip pow "
            "maximum minimum nan_to_num",
        ),
        (
            R,
            "sum prod mean amax amin max min logsumexp cumsum cumprod norm all any",
        ),
        (
            S,
            "reshape flatten squeeze expand_dims permute_dims swapaxes moveaxis broadcast_to "
            "astype flip roll tril triu tile take take_along_axis chunk",
        ),
        (sys.modules["tapegrad.ops._numpy_extra"], "ravel"),
        (L, "matmul"),
        (SM, "softmax log_softmax"),
    ):
        for name in names.split():
            out[name] = getattr(mod, name)
    out.update({
        "clamp": E.clip,
        "unsqueeze": S.expand_dims,
        "transpose": S.transpose,
        "permute": _permute,
        "repeat": _repeat,
        "T": property(S.permute_dims),
        "mT": property(lambda self: S.swapaxes(self, -1, -2)),
        "numpy": _numpy,
        "grad": property(_grad),
        "detach": _tape.stop_gradient,
        "backward": _tape.backward,
        "trace": _tape.trace,
        "float": lambda self: S.astype(self, np.float32),
        "double": lambda self: S.astype(self, np.float64),
        "long": lambda self: S.astype(self, np.int64),
        "int": lambda self: S.astype(self, np.int32),
        "bool": lambda self: S.astype(self, np.bool_),
        "to": _to,
        "copy": _clone,
        "clone": _clone,
    })
    # PyTorch's dim=/keepdim= spellings on the reductions and shape ops (ops/_torch_names.py)
    return {n: TN.with_dim(f) if n in TN.DIM_OPS else f for n, f in out.items()}


_CLONE = _tape.defprim("clone", lambda x: x.copy(), lambda xp, g, ans, x: g)


def _clone(self: Tensor) -> Tensor:
    """A copy of the values with its own memory; gradients flow through (torch's clone)."""
    return _tape.apply(_CLONE, self)


def _to(self: Tensor, *args: Any, device: Any = None, dtype: Any = None) -> Tensor:
    """``x.to('cuda')``, ``x.to(tg.float64)``, ``x.to(device=..., dtype=...)``."""
    for a in args:
        if isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda", "gpu"):
            device = a
        else:
            dtype = a
    out = self
    if dtype is not None:
        out = S.astype(out, dtype)
    if device is not None and B.normalize_device(device) != out.device:
        out = _tape.apply(_TO_DEVICE, out, device=B.normalize_device(device))
    return out


def _to_device_vjp(xp: Any, g: Any, ans: Any, x: Any, device: str) -> Any:
    return xp.apply(_TO_DEVICE, g, device="cpu" if device == "cuda" else "cuda")


_TO_DEVICE = _tape.defprim("to_device", B.to_device, _to_device_vjp)


# ---------------------------------------------------------------------------------------------
# PyTorch spellings: the Tensor methods a PyTorch program calls, and the guards for spellings
# that numpy and PyTorch both accept with different meanings (docs/from_pytorch.md).
#
# Tape rules for in-place arithmetic (add_, sub_, mul_, div_, clamp_, fill_, zero_, copy_): on
# a tensor that no recording tape holds they change the array in place and bump the version; on
# a tensor a recording tape holds they raise (write ``x = x * 2``); a tape that saved the tensor
# before it changed raises at backward time (the version check).
# ---------------------------------------------------------------------------------------------


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


def _torch_inplace(name: str, f: Any) -> Any:
    def op(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if _tape.is_grad_enabled() and any(tp._recording for tp in self._tapes):
            raise RuntimeError(
                f"{name}: the tensor (shape {self.shape}) is on a recording tape, and an in-place "
                f"change would hide the old value from it; write the out-of-place form "
                f"(x = x.{name[:-1]}(...) or x = x * 2), or run it under tg.no_grad() on a "
                "tensor the tape did not save"
            )
        _before_write(self, name)
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


def _add(a: Any, other: Any, alpha: float = 1) -> Any:
    return a + alpha * np.asarray(other)


def _sub(a: Any, other: Any, alpha: float = 1) -> Any:
    return a - alpha * np.asarray(other)


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


def _torch() -> dict[str, Any]:
    """PyTorch's methods (in-place forms, ``new_*``, ``size()``, ``data``, ...)."""
    return {
        "size": property(lambda self: _Size(self.shape)),
                "new_tensor": _new,
        "new_zeros": _new_full_like(0),
        "new_ones": _new_full_like(1),
        "new_empty": _new_full_like(0),
        "new_full": _new_full,
        "add_": _torch_inplace("add_", _add),
        "sub_": _torch_inplace("sub_", _sub),
        "mul_": _torch_inplace("mul_", np.multiply),
        "div_": _torch_inplace("div_", np.true_divide),
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


def _torch_names() -> dict[str, Any]:
    """PyTorch's names for comparisons and shape ops (``eq``, ``narrow``, ``view_as``, ...)."""
    return {
        "eq": TN.eq,
        "ne": TN.ne,
        "lt": TN.lt,
        "le": TN.le,
        "gt": TN.gt,
        "ge": TN.ge,
        "narrow": TN.narrow,
        "select": lambda self, dim, index: NX.select(self, dim=dim, index=index),
        "view_as": lambda self, other: S.reshape(self, other.shape),
        "contiguous": lambda self: self,  # arrays here are always usable as they are
        "type": _type,
        "mm": TN.mm,
        "bmm": TN.bmm,
        "repeat_interleave": TN.repeat_interleave,
        "index_select": TN.index_select,
        "masked_fill": TN.masked_fill,
        "topk": TN.topk,
        "index_add": TN.with_dim(S.index_add),
        "scatter_add": TN.with_dim(S.scatter_add),
        "numel": lambda self: self._data.size,
        "dim": lambda self: self._data.ndim,
    }


# --- more PyTorch method spellings (PyTorch's meaning; numpy has no method of these names) ----
def _div(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """PyTorch's ``div``: true division, or rounded toward zero (``"trunc"``) or down
    (``"floor"``); a rounded quotient has no gradient, as PyTorch's."""
    if rounding_mode is None:
        return E.div(self, other)
    if rounding_mode == "floor":
        return E.floor_divide(self, other)
    if rounding_mode != "trunc":
        raise ArgumentError(
            f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
        )
    q = E.floor_divide(self, other)  # numpy's result dtype for the pair
    if q.dtype.kind not in "iu":
        return E.trunc(E.div(self, other))
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
    return S.moveaxis(S.take(x, idx, axis=ax), ax + 1, -1)


def _torch_more() -> dict[str, Any]:
    methods: dict[str, Any] = {
        "acos": NX.arccos,
        "asin": NX.arcsin,
        "atan": NX.arctan,
        "acosh": NX.arccosh,
        "asinh": NX.arcsinh,
        "atanh": NX.arctanh,
        "cosh": NX.cosh,
        "sinh": NX.sinh,
        "exp2": NX.exp2,
        "neg": E.neg,
        "negative": E.neg,
        "fmod": E.fmod,
        "mul": E.multiply,
        "multiply": E.multiply,
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
        "where": lambda self, condition, other: E.where(condition, self, other),
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


def table() -> dict[str, Any]:
    """Every method and operator this module gives ``Tensor``, each name once: a name bound by
    two parts, or one that the class body defines, is an error."""
    out: dict[str, Any] = {}
    for part in (_core(), _torch_names(), _torch(), _torch_more(), _numpy_api.PROTOCOLS):
        for name, f in part.items():
            if name in out or name in _CLASS_BODY:
                raise AssertionError(f"Tensor.{name} is declared twice")
            out[name] = f
    return out


_CLASS_BODY = frozenset(vars(Tensor))  # what the class body declares (before binding)
for _name, _f in table().items():
    setattr(Tensor, _name, _f)
