"""numpy's protocols on Tensor: numpy functions run tapegrad's ops, or refuse; never detach.

``numpy.f(tensor)`` dispatches here (``__array_function__`` for numpy functions,
``__array_ufunc__`` for ufuncs). A function tapegrad has runs as tapegrad's op, so the tape
records it; a function that only reads shapes or compares values (``numpy.shape``,
``numpy.allclose``, ``numpy.argsort``) runs on the values; anything else raises a TypeError
that names what to use instead. ``numpy.asarray(t)`` / ``numpy.array([t1, t2])`` go through
``__array__``, which refuses a tensor that a recording tape holds (as PyTorch refuses
``numpy()`` on a tensor that requires grad): ``t.detach().numpy()`` leaves the tape on purpose.
"""

from __future__ import annotations

import sys
from typing import Any

from ._autodiff import is_recording
from ._backend import np
from ._tensor import Tensor, _wrap


def _ops() -> Any:
    return sys.modules["tapegrad"]


# numpy functions whose tapegrad op has the same name and numpy's arguments
_SAME = (
    "abs all any amax amin argmax argmin sum prod mean cumsum cumprod "
    "clip where reshape ravel squeeze expand_dims transpose permute_dims swapaxes moveaxis "
    "broadcast_to concatenate concat stack vstack hstack column_stack dstack array_split hsplit "
    "vsplit dsplit append flip flipud fliplr rot90 rollaxis roll tril triu repeat tile take "
    "take_along_axis matmul einsum tensordot dot vdot inner outer kron cross diag diagonal "
    "sort partition diff select atleast_1d atleast_2d atleast_3d astype nan_to_num "
    "zeros_like ones_like full_like empty_like sinc linspace real imag angle real_if_close "
    "gradient row_stack"
).split()
_RENAMED = {"trace": "matrix_trace", "split": "array_split_equal", "max": "amax", "min": "amin"}
_LINALG = "svd solve inv pinv det slogdet cholesky eig eigh qr norm matrix_power".split()
# functions of shapes or comparisons of values: no gradient to lose, run on the values
_VALUES = (
    "shape ndim size allclose isclose array_equal array_equiv count_nonzero argsort argwhere "
    "nonzero flatnonzero searchsorted result_type iscomplexobj isrealobj may_share_memory "
    "shares_memory min_scalar_type can_cast"
).split()
# ufuncs by numpy name -> tapegrad op name
_UFUNCS = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "true_divide": "divide", "floor_divide": "floor_divide", "remainder": "remainder",
    "power": "pow", "float_power": "pow", "negative": "neg", "positive": "positive",
    "absolute": "abs", "fabs": "fabs", "conjugate": "conj", "sign": "sign", "matmul": "matmul",
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "square": "square",
    "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
    "sinh": "sinh", "cosh": "cosh", "arcsin": "arcsin", "arccos": "arccos",
    "arctan": "arctan", "arcsinh": "arcsinh", "arccosh": "arccosh", "arctanh": "arctanh",
    "arctan2": "atan2", "hypot": "hypot", "logaddexp": "logaddexp", "logaddexp2": "logaddexp2",
    "maximum": "maximum", "minimum": "minimum", "fmax": "fmax", "fmin": "fmin",
    "deg2rad": "deg2rad", "rad2deg": "rad2deg", "radians": "deg2rad", "degrees": "rad2deg",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "round", "fix": "trunc",
    "equal": "equal", "not_equal": "not_equal", "less": "less", "less_equal": "less_equal",
    "greater": "greater", "greater_equal": "greater_equal", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "logical_not": "logical_not",
    "isnan": "isnan", "isfinite": "isfinite", "isinf": "isinf",
}  # fmt: skip
_BITWISE = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}
_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "amax", "minimum": "amin"}
_ACCUMULATE = {"add": "cumsum", "multiply": "cumprod"}

_FUNCTIONS: dict[Any, Any] = {}


# numpy signatures that differ from tapegrad's op: small adapters
def _reshape(
    a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> Any:
    if order != "C":
        raise TypeError("numpy.reshape on a Tensor: only order='C' is supported")
    return _ops().reshape(a, shape if shape is not None else newshape)


def _round(a: Any, decimals: int = 0) -> Any:
    tg = _ops()
    if decimals == 0:
        return tg.round(a)
    scale = 10.0**decimals
    return tg.round(a * scale) / scale


def _nan_to_num(
    x: Any, copy: bool = True, nan: float = 0.0, posinf: Any = None, neginf: Any = None
) -> Any:
    return _ops().nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


def _einsum(subscripts: str, *operands: Any, optimize: Any = False, **kwargs: Any) -> Any:
    return _ops().einsum(subscripts, *operands, **kwargs)


def _var(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: float = 0,
    keepdims: bool = False, **kwargs: Any,
) -> Any:
    # numpy's var divides by n - ddof (ddof=0 unless given): say so, tapegrad's var asks
    return _ops().var(a, axis=axis, keepdims=keepdims, ddof=ddof, **kwargs)


def _std(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: float = 0,
    keepdims: bool = False, **kwargs: Any,
) -> Any:
    return _ops().std(a, axis=axis, keepdims=keepdims, ddof=ddof, **kwargs)


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None and y is None:  # numpy's where(condition): the indices of the true elements
        return _on_values(np.nonzero)(condition)
    if x is None or y is None:
        raise ValueError("numpy.where: give both x and y, or neither (for the indices)")
    return _ops().where(condition, x, y)


def _astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    return _ops().astype(x, dtype)


def _sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, **kw: Any) -> Any:
    return _ops().sort(a, axis=axis, kind=kind, order=order, **kw)  # numpy's meaning, said


def _gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    if axis is None and np.ndim(f) == 1:
        axis = 0  # numpy's meaning: one array for a 1-d input
    return _ops().gradient(f, *varargs, axis=axis, edge_order=edge_order)


_ADAPTED = {
    "sort": _sort,
    "gradient": _gradient,
    "reshape": _reshape,
    "round": _round,
    "around": _round,
    "nan_to_num": _nan_to_num,
    "einsum": _einsum,
    "astype": _astype,
    "var": _var,
    "where": _where,
    "std": _std,
}


def _table() -> dict[Any, Any]:
    if not _FUNCTIONS:  # built on first use (tapegrad's namespace is complete by then)
        table: dict[Any, Any] = {}
        ops = _ops()
        pairs = [(n, n) for n in _SAME] + list(_RENAMED.items())
        for np_name, tg_name in pairs:
            f, g = getattr(np, np_name, None), getattr(ops, tg_name, None)
            if f is not None and g is not None:
                table[f] = g
        for np_name, adapter in _ADAPTED.items():
            if hasattr(np, np_name):
                table[getattr(np, np_name)] = adapter
        for name in _LINALG:
            table[getattr(np.linalg, name)] = getattr(sys.modules["tapegrad.linalg"], name)
        for name in _VALUES:
            f = getattr(np, name, None)
            if f is not None:
                table[f] = _on_values(f)
        _FUNCTIONS.update(table)  # one step: threads never see a partial table
    return _FUNCTIONS


def _values(x: Any) -> Any:
    if isinstance(x, Tensor):
        return np.asarray(x._data)
    if isinstance(x, (list, tuple)):
        return type(x)(_values(v) for v in x)
    return x


def _on_values(f: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        out = f(*_values(args), **{k: _values(v) for k, v in kwargs.items()})
        if isinstance(out, np.ndarray) and out.dtype.kind in "biu":
            return _wrap(out)
        if isinstance(out, tuple) and out and all(isinstance(o, np.ndarray) for o in out):
            return tuple(_wrap(o) for o in out)
        return out

    return run


# numpy's defaults that its own wrappers pass on (np.row_stack calls vstack(casting="same_kind"))
_DEFAULTS = {"casting": "same_kind", "where": True, "subok": True, "order": "K"}


def _no_out(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    if kwargs.get("out") is not None:
        raise TypeError(
            f"numpy.{name}(..., out=...) on a Tensor: tapes record new tensors, not writes into "
            f"existing ones; drop out= and assign the result (y = numpy.{name}(...))"
        )
    kwargs.pop("out", None)
    for k, default in _DEFAULTS.items():
        if k in kwargs and kwargs[k] is default:  # numpy's own default, passed along by numpy
            del kwargs[k]
    for k in ("where", "casting", "order", "subok", "initial"):
        if k in kwargs:
            raise TypeError(
                f"numpy.{name}(..., {k}=...) is not supported on Tensors; compute it with "
                "tapegrad ops (tg.where for masks)"
            )
    return kwargs


def _unsupported(name: str) -> TypeError:
    return TypeError(
        f"numpy.{name} has no tapegrad counterpart and would leave the tape (its result would "
        f"get no gradient). Compose it from tapegrad ops (tg.{name.rsplit('.', maxsplit=1)[-1]} does not "
        f"exist), or call numpy.{name} on t.detach().numpy() to leave the tape on purpose"
    )


def _array_function(self: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    f = _table().get(func)
    mod = getattr(func, "__module__", "numpy") or "numpy"
    name = ("linalg." if "linalg" in mod else "") + func.__name__
    if f is None:
        raise _unsupported(name)
    return f(*args, **_no_out(name, dict(kwargs)))


def _array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    name = ufunc.__name__
    ops = _ops()
    kwargs = _no_out(name, kwargs)
    if method == "__call__":
        if name in _BITWISE:  # the Tensor's own operator (`array & tensor`)
            a, b = inputs
            dunder = _BITWISE[name]
            return (
                getattr(a, f"__{dunder}__")(b)
                if isinstance(a, Tensor)
                else getattr(b, f"__r{dunder}__")(a)
            )
        if name == "invert":
            return ~inputs[0]
        op = _UFUNCS.get(name)
        f = getattr(ops, op, None) if op else None
        if f is None:
            raise _unsupported(name)
        if kwargs.get("dtype") is not None:
            return f(*inputs).astype(kwargs["dtype"])
        return f(*inputs)
    table = _REDUCE if method == "reduce" else _ACCUMULATE if method == "accumulate" else {}
    if name in table:
        axis = kwargs.get("axis", 0) if len(inputs) < 2 else inputs[1]
        extra = {"keepdims": kwargs["keepdims"]} if kwargs.get("keepdims") else {}
        return getattr(ops, table[name])(inputs[0], axis=axis, **extra)
    raise TypeError(
        f"numpy.{name}.{method} on a Tensor would leave the tape; use tapegrad's reductions "
        "(tg.sum, tg.prod, tg.amax, tg.amin, tg.cumsum, tg.cumprod) or call it on "
        "t.detach().numpy() to leave the tape on purpose"
    )


def _on_recording_tape(t: Tensor) -> bool:
    if any(tp._recording for tp in t._tapes):
        return True
    # a trainable Parameter joins a recording tape at its first op
    return bool(t._is_param and t.requires_grad and is_recording())  # type: ignore[attr-defined]


def _array(self: Tensor, dtype: Any = None, copy: Any = None) -> Any:
    if _on_recording_tape(self):
        raise TypeError(
            f"numpy.asarray/numpy.array on a tensor of shape {self.shape} that a recording tape "
            "holds would leave the tape (the result gets no gradient). Stay on the tape with "
            "tapegrad ops (tg.stack([t1, t2]) for numpy.array([t1, t2])), or leave it on "
            "purpose with t.detach().numpy()"
        )
    a = np.asarray(self.numpy())  # a 0-d result is a 0-d array, never a numpy scalar
    if dtype is not None and a.dtype != dtype:
        return a.astype(dtype)
    return a.copy() if copy else a  # np.array(t) copies; np.asarray(t) shares


# Tensor's numpy protocols, bound with its other methods (_methods.table)
PROTOCOLS = {"__array_function__": _array_function, "__array_ufunc__": _array_ufunc,
             "__array__": _array}
