"""Tensor's numpy surface: the operators, the ops as methods under numpy's names, indexing and
item assignment, ``numpy()`` and the write guards that keep a tape's saved values honest."""

from __future__ import annotations

from typing import Any

from .. import _autodiff as _tape
from .. import _backend as B
from .._backend import np
from .._tensor import TAPE_LOOP, Tensor, _wrap
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _indexing as IX
from ..ops import _linalg as L
from ..ops import _numpy_shape as NS
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops import _softmax as SM
from ..ops import _torch_names as TN
from ..ops._common import ArgumentTypeError, operands


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
    nidx = IX._norm_index(idx)
    if type(nidx) is tuple and len(nidx) > 2 and np.ndim(v) > 0 and IX._layouts_differ(nidx, self.ndim):
        raise IndexError(IX._LAYOUT_MESSAGE.format(idx=IX._show(nidx), shape=self.shape))
    recording = _tape.is_grad_enabled() and (
        any(tp._recording for tp in self._tapes)
        or (isinstance(value, Tensor) and any(tp._recording for tp in value._tapes))
    )
    if recording:
        if any(tp._recording and self._tid in tp._leaves for tp in self._tapes):
            # as PyTorch: the source itself would change, so its gradient would be the new value's
            raise TypeError(
                f"setitem: writing into x[{IX._show(nidx)}] (shape {self.shape}), a tensor a "
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
                f"setitem: {e} (tensor shape {self.shape}, index {IX._show(nidx)})"
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
    keep = BI.where(_wrap(mask), 0.0, x)
    vb = S.broadcast_to(v.astype(x.dtype), mask[idx].shape)
    return keep + _tape.apply(
        IX._index_grad, vb, idx=idx, shape=x.shape, advanced=IX._is_advanced(idx)
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


def core() -> dict[str, Any]:
    """The operators and the ops as methods (numpy's spellings)."""
    out: dict[str, Any] = {}
    binary = {
        "add": BI.add,
        "sub": BI.subtract,
        "mul": BI.multiply,
        "truediv": BI.divide,
        "floordiv": BI.floor_divide,
        "mod": BI.remainder,
        "pow": BI.pow,
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
        "__eq__": BI.equal,
        "__ne__": BI.not_equal,
        "__lt__": BI.less,
        "__le__": BI.less_equal,
        "__gt__": BI.greater,
        "__ge__": BI.greater_equal,
        "__getitem__": IX.getitem,
        "__setitem__": _setitem,
        "__format__": _format,
    }
    out.update(dunders)
    for mod, names in (
        (
            E,
            "exp expm1 log log1p log2 log10 sqrt rsqrt square reciprocal sin cos tan tanh "
            "sigmoid relu erf sign floor ceil round trunc isnan isfinite isinf abs clip "
            "nan_to_num",
        ),
        (BI, "pow maximum minimum"),
        (
            R,
            "sum prod mean amax amin max min logsumexp cumsum cumprod norm all any",
        ),
        (
            S,
            "reshape flatten squeeze expand_dims permute_dims swapaxes moveaxis broadcast_to "
            "astype flip roll tril triu tile chunk",
        ),
        (IX, "take take_along_axis"),
        (NS, "ravel"),
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

