"""Bind the ops to Tensor as methods and operators (after both exist)."""

from __future__ import annotations

from typing import Any

from . import _autodiff as _tape
from . import _backend as B
from ._backend import np
from ._tensor import Tensor, _wrap
from .ops import _elementwise as E
from .ops import _linalg as L
from .ops import _reduce as R
from .ops import _shape as S
from .ops import _softmax as SM
from .ops._common import operands


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
            raise TypeError(
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
    recording = _tape.is_grad_enabled() and (
        any(tp._recording for tp in self._tapes)
        or (isinstance(value, Tensor) and any(tp._recording for tp in value._tapes))
    )
    if recording:
        vt = value if isinstance(value, Tensor) else _wrap(np.asarray(v, dtype=self.dtype))
        new = _index_put(self, nidx, vt)
        self._data, self._tid, self._tapes = new._data, new._tid, new._tapes
    else:
        try:
            self._data[nidx] = v
        except (ValueError, IndexError) as e:
            raise type(e)(
                f"setitem: {e} (tensor shape {self.shape}, index {S._show(nidx)})"
            ) from None
    self._version += 1


def _index_put(x: Tensor, idx: Any, v: Tensor) -> Tensor:
    # out = x with x[idx] replaced by v: x where the mask is off, plus v scattered
    mask = np.zeros(x.shape, dtype=bool)
    mask[idx] = True
    keep = E.where(_wrap(mask), 0.0, x)
    vb = S.broadcast_to(v.astype(x.dtype), mask[idx].shape)
    return keep + _tape.apply(
        S._index_grad, vb, idx=idx, shape=x.shape, advanced=S._is_advanced(idx)
    )


def _transpose(self: Tensor, *axes: Any) -> Tensor:
    """numpy's ``x.transpose(*axes)``; two axes of a tensor with more than two dimensions swap
    them (PyTorch's ``x.transpose(0, 1)``, which numpy would reject)."""
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = tuple(axes[0])
    if len(axes) == 2 and self.ndim > 2:
        return S.swapaxes(self, axes[0], axes[1])
    return S.permute_dims(self, axes or None)


def _permute(self: Tensor, *axes: Any) -> Tensor:
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = tuple(axes[0])
    return S.permute_dims(self, axes)


def _format(self: Tensor, spec: str) -> str:
    if spec and self._data.size == 1:
        return format(self._data.item(), spec)
    return format(str(self), spec)


def _bind() -> None:
    T = Tensor
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
        setattr(T, f"__{name}__", f)
        setattr(T, f"__r{name}__", _reflect(f))
    for name, sym, f in (
        ("and", "&", np.bitwise_and),
        ("or", "|", np.bitwise_or),
        ("xor", "^", np.bitwise_xor),
    ):
        op = _bitwise(f, sym)
        setattr(T, f"__{name}__", op)
        setattr(T, f"__r{name}__", _reflect(op))
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
        "__hash__": object.__hash__,  # identity, like PyTorch: tensors key dicts by object
        "__format__": _format,
    }
    for name, f in dunders.items():
        setattr(T, name, f)

    for mod, names in (
        (
            E,
            "exp expm1 log log1p log2 log10 sqrt rsqrt square reciprocal sin cos tan tanh "
            "sigmoid relu erf sign floor ceil round trunc isnan isfinite isinf abs clip pow "
            "maximum minimum nan_to_num",
        ),
        (
            R,
            "sum prod mean var std amax amin max min argmax argmin logsumexp cumsum cumprod "
            "norm all any",
        ),
        (
            S,
            "reshape flatten squeeze expand_dims permute_dims swapaxes moveaxis broadcast_to "
            "astype flip roll tril triu repeat tile take take_along_axis split chunk",
        ),
        (L, "matmul"),
        (SM, "softmax log_softmax"),
    ):
        for name in names.split():
            setattr(T, name, getattr(mod, name))
    methods: dict[str, Any] = {
        "clamp": E.clip,
        "view": S.reshape,
        "unsqueeze": S.expand_dims,
        "transpose": _transpose,
        "permute": _permute,
        "T": property(S.permute_dims),
        "mT": property(lambda self: S.swapaxes(self, -1, -2)),
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
        "copy_": _copy_,
        "fill_": lambda self, v: _inplace(self, lambda a: a.fill(v)),
        "zero_": lambda self: _inplace(self, lambda a: a.fill(0)),
    }
    for name, f in methods.items():
        setattr(T, name, f)


def _inplace(self: Tensor, f: Any) -> Tensor:
    f(self._data)
    self._version += 1
    return self


def _copy_(self: Tensor, src: Any) -> Tensor:
    a = src._data if isinstance(src, Tensor) else np.asarray(src)
    if np.broadcast_shapes(np.shape(a), self.shape) != self.shape:
        raise ValueError(f"copy_: cannot copy shape {np.shape(a)} into {self.shape}")
    self._data[...] = a
    self._version += 1
    return self


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

_bind()


# --- PyTorch's spellings (dim= / keepdim=, comparisons by name, narrow, view_as, type) --------
def _type(self: Tensor, dtype: Any = None) -> Any:
    """``x.type()``: the dtype's name; ``x.type(dtype)``: a cast (PyTorch's Tensor.type)."""
    return str(self.dtype) if dtype is None else S.astype(self, dtype)


def _bind_torch_names() -> None:
    from .ops import _torch_names as TN  # noqa: PLC0415

    T = Tensor
    for name in TN.DIM_OPS:
        f = getattr(T, name, None)
        if f is not None and not isinstance(f, property):
            setattr(T, name, TN.with_dim(f))
    methods: dict[str, Any] = {
        "eq": TN.eq,
        "ne": TN.ne,
        "lt": TN.lt,
        "le": TN.le,
        "gt": TN.gt,
        "ge": TN.ge,
        "narrow": TN.narrow,
        "view_as": lambda self, other: S.reshape(self, other.shape),
        "contiguous": lambda self: self,  # arrays here are always usable as they are
        "type": _type,
    }
    for name, f in methods.items():
        setattr(T, name, f)


_bind_torch_names()
