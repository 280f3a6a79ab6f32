"""Elementwise primitives (unary and binary): each forward beside its VJP.

VJPs that can be written from the output keep the output (``save=(OUT,)``) instead of the
input, so backward holds less memory (exp, tanh, sigmoid, sqrt, relu).
"""

from __future__ import annotations

import math
from typing import Any

from .._backend import np
from .._tape import OUT, apply, defprim
from .._tensor import Tensor
from ._common import as_tensor, operands

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _erf_array(x: Any) -> Any:
    # numpy has no erf; use math.erf elementwise through a vectorized ufunc-like helper when
    # scipy is missing. Abramowitz-Stegun is not exact enough, so use math.erf on floats.
    return _ERF(x).astype(x.dtype, copy=False)


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _unary(name: str, fwd: Any, vjp: Any, save: tuple[int, ...] = (0,), doc: str = "") -> Any:
    prim = defprim(name, fwd, vjp, save)

    def op(x: Any) -> Tensor:
        return apply(prim, as_tensor(x))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc or f"Elementwise {name}."
    return op


def _floatin(f: Any) -> Any:
    """Integer inputs to a float function give the default float (like torch.exp on ints)."""

    def fwd(x: Any) -> Any:
        if x.dtype.kind not in "fc":
            x = x.astype(np.float32)
        return f(x)

    return fwd


# --- unary -----------------------------------------------------------------------------------
neg = _unary("neg", np.negative, lambda g, ans, x: -g, ())
abs = _unary("abs", np.abs, lambda g, ans, x: g * sign(x))
sign = _unary("sign", np.sign, lambda g, ans, x: zeros_like_grad(g), ())
exp = _unary("exp", _floatin(np.exp), lambda g, ans, x: g * ans, (OUT,))
expm1 = _unary("expm1", _floatin(np.expm1), lambda g, ans, x: g * (ans + 1.0), (OUT,))
log = _unary("log", _floatin(np.log), lambda g, ans, x: g / x)
log1p = _unary("log1p", _floatin(np.log1p), lambda g, ans, x: g / (x + 1.0))
log2 = _unary("log2", _floatin(np.log2), lambda g, ans, x: g / (x * math.log(2.0)))
log10 = _unary("log10", _floatin(np.log10), lambda g, ans, x: g / (x * math.log(10.0)))
sqrt = _unary("sqrt", _floatin(np.sqrt), lambda g, ans, x: g * 0.5 / ans, (OUT,))
rsqrt = _unary(
    "rsqrt", _floatin(lambda x: 1.0 / np.sqrt(x)), lambda g, ans, x: g * -0.5 * ans**3, (OUT,)
)
square = _unary("square", np.square, lambda g, ans, x: g * 2.0 * x)
reciprocal = _unary(
    "reciprocal", _floatin(np.reciprocal), lambda g, ans, x: -g * ans * ans, (OUT,)
)
sin = _unary("sin", _floatin(np.sin), lambda g, ans, x: g * cos(x))
cos = _unary("cos", _floatin(np.cos), lambda g, ans, x: -g * sin(x))
tan = _unary("tan", _floatin(np.tan), lambda g, ans, x: g * (1.0 + ans * ans), (OUT,))
tanh = _unary("tanh", _floatin(np.tanh), lambda g, ans, x: g * (1.0 - ans * ans), (OUT,))


def _sigmoid(x: Any) -> Any:
    # exp of a non-positive number only: no overflow for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


sigmoid = _unary("sigmoid", _floatin(_sigmoid), lambda g, ans, x: g * ans * (1.0 - ans), (OUT,))
relu = _unary(
    "relu", lambda x: np.maximum(x, 0).astype(x.dtype, copy=False),
    lambda g, ans, x: g * (ans > 0), (OUT,),
)  # fmt: skip
erf = _unary(
    "erf",
    _floatin(_erf_array),
    lambda g, ans, x: g * (2.0 / math.sqrt(math.pi)) * exp(-(x * x)),
)


def _softplus(x: Any) -> Any:
    return np.logaddexp(x, 0).astype(x.dtype, copy=False)


softplus_prim = defprim("softplus", _floatin(_softplus), lambda g, ans, x: g * sigmoid(x), (0,))


def zeros_like_grad(g: Tensor) -> Tensor:
    return g * 0.0


def _zero_grad(name: str, f: Any) -> Any:
    return _unary(name, f, lambda g, ans, x: zeros_like_grad(g), (), f"Elementwise {name}; its gradient is zero.")


floor = _zero_grad("floor", np.floor)
ceil = _zero_grad("ceil", np.ceil)
round = _zero_grad("round", np.round)
trunc = _zero_grad("trunc", np.trunc)


def isnan(x: Any) -> Tensor:
    """Elementwise NaN test as a bool tensor."""
    return _from_bool(np.isnan(as_tensor(x)._data))


def isfinite(x: Any) -> Tensor:
    """Elementwise finiteness test as a bool tensor."""
    return _from_bool(np.isfinite(as_tensor(x)._data))


def isinf(x: Any) -> Tensor:
    """Elementwise infinity test as a bool tensor."""
    return _from_bool(np.isinf(as_tensor(x)._data))


# --- binary ----------------------------------------------------------------------------------
_add = defprim("add", np.add, (lambda g, ans, x, y: g, lambda g, ans, x, y: g))
_sub = defprim("sub", np.subtract, (lambda g, ans, x, y: g, lambda g, ans, x, y: -g))
_mul = defprim("mul", np.multiply, (lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x), (0, 1))
_div = defprim(
    "div",
    np.true_divide,
    (lambda g, ans, x, y: g / y, lambda g, ans, x, y: -g * ans / y),
    (1, OUT),
)


def _pow_fwd(x: Any, y: Any) -> Any:
    if isinstance(y, int) and y < 0 and x.dtype.kind in "iu":
        x = x.astype(np.float32)
    return np.power(x, y)


_pow = defprim(
    "pow",
    _pow_fwd,
    (
        lambda g, ans, x, y: g * y * x ** (y - 1) if not isinstance(y, Tensor) else g * y * x ** (y - 1.0),
        lambda g, ans, x, y: g * ans * log(where(x > 0, x, 1.0)) * (x > 0),
    ),
    (0, 1, OUT),
)
_maximum = defprim(
    "maximum",
    np.maximum,
    (
        lambda g, ans, x, y: g * _tie_weight(x, y, True),
        lambda g, ans, x, y: g * _tie_weight(y, x, True),
    ),
    (0, 1),
)
_minimum = defprim(
    "minimum",
    np.minimum,
    (
        lambda g, ans, x, y: g * _tie_weight(x, y, False),
        lambda g, ans, x, y: g * _tie_weight(y, x, False),
    ),
    (0, 1),
)
_atan2 = defprim(
    "atan2",
    np.arctan2,
    (
        lambda g, ans, x, y: g * y / (x * x + y * y),
        lambda g, ans, x, y: -g * x / (x * x + y * y),
    ),
    (0, 1),
)
_remainder = defprim(
    "remainder",
    np.remainder,
    (lambda g, ans, x, y: g, lambda g, ans, x, y: -g * floor_divide(x, y)),
    (0, 1),
)
_floor_divide = defprim(
    "floor_divide",
    np.floor_divide,
    (lambda g, ans, x, y: zeros_like_grad(g), lambda g, ans, x, y: zeros_like_grad(g)),
)


def _tie_weight(a: Tensor, b: Any, larger: bool) -> Tensor:
    """1 where ``a`` wins, 0.5 on ties (PyTorch splits the gradient of max/min ties evenly)."""
    win = (a > b) if larger else (a < b)
    return win.astype(a.dtype) + (a == b).astype(a.dtype) * 0.5


def add(x: Any, y: Any) -> Tensor:
    """``x + y`` with numpy broadcasting."""
    x, y = operands(x, y)
    return apply(_add, x, y)


def subtract(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_sub, x, y)


def multiply(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_mul, x, y)


def divide(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_div, x, y)


def pow(x: Any, y: Any) -> Tensor:
    """``x ** y``; ``y`` a tensor or a Python number. The gradient for ``y`` needs ``x > 0``."""
    x, y = operands(x, y)
    return apply(_pow, x, y)


def maximum(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_maximum, x, y)


def minimum(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_minimum, x, y)


def atan2(x: Any, y: Any) -> Tensor:
    """``arctan(x / y)`` by quadrant (numpy's ``arctan2(x1, x2)``)."""
    x, y = operands(x, y)
    return apply(_atan2, x, y)


def remainder(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_remainder, x, y)


def floor_divide(x: Any, y: Any) -> Tensor:
    x, y = operands(x, y)
    return apply(_floor_divide, x, y)


sub, mul, div, true_divide = subtract, multiply, divide, divide


# --- comparisons and logic: bool outputs, never recorded -------------------------------------
def _cmp(name: str, f: Any) -> Any:
    def op(x: Any, y: Any) -> Tensor:
        x, y = operands(x, y)
        a = x._data if isinstance(x, Tensor) else x
        b = y._data if isinstance(y, Tensor) else y
        return _from_bool(f(a, b))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}`` as a bool tensor (no gradient)."
    return op


def _from_bool(a: Any) -> Tensor:
    from .._tensor import _wrap  # noqa: PLC0415

    return _wrap(np.asarray(a) if not hasattr(a, "dtype") else a)


equal = _cmp("equal", np.equal)
not_equal = _cmp("not_equal", np.not_equal)
less = _cmp("less", np.less)
less_equal = _cmp("less_equal", np.less_equal)
greater = _cmp("greater", np.greater)
greater_equal = _cmp("greater_equal", np.greater_equal)
logical_and = _cmp("logical_and", np.logical_and)
logical_or = _cmp("logical_or", np.logical_or)
logical_xor = _cmp("logical_xor", np.logical_xor)


def logical_not(x: Any) -> Tensor:
    return _from_bool(np.logical_not(as_tensor(x)._data))


# --- where, clip, nan_to_num -----------------------------------------------------------------
_where = defprim(
    "where",
    np.where,
    (None, lambda g, ans, c, x, y: g * c, lambda g, ans, c, x, y: g * logical_not(c)),
    (0,),
)


def where(condition: Any, x: Any, y: Any) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (broadcast together)."""
    c = as_tensor(condition)
    if c.dtype.kind != "b":
        c = c != 0
    x, y = operands(x, y)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        x = as_tensor(x)
    return apply(_where, c, x, y)


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:
    """Clamp to ``[min, max]``; the gradient passes where ``x`` is inside (PyTorch's clamp)."""
    x = as_tensor(x)
    if min is None and max is None:
        raise ValueError("clip: give min, max or both")
    out = x
    if min is not None:
        out = where(x >= min, out, min if not isinstance(min, Tensor) else min.astype(x.dtype))
    if max is not None:
        out = where(x <= max, out, max if not isinstance(max, Tensor) else max.astype(x.dtype))
    return out


def nan_to_num(x: Any, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """Replace NaN and infinities; the gradient passes where ``x`` was finite."""
    x = as_tensor(x)
    fi = np.finfo(x.dtype) if x.dtype.kind == "f" else None
    posinf = posinf if posinf is not None else (fi.max if fi else 0)
    neginf = neginf if neginf is not None else (fi.min if fi else 0)
    repl = np.nan_to_num(x._data, nan=nan, posinf=posinf, neginf=neginf)
    return where(isfinite(x), x, _from_bool(repl))


# --- activations (compositions; no gradient code) --------------------------------------------
def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    x = as_tensor(x)
    return where(x > 0, x, x * negative_slope)


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    x = as_tensor(x)
    return where(x > 0, x, (exp(minimum(x, 0.0)) - 1.0) * alpha)


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """GELU: ``x * Phi(x)`` (approximate='none') or the tanh form (approximate='tanh')."""
    x = as_tensor(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def silu(x: Any) -> Tensor:
    x = as_tensor(x)
    return x * sigmoid(x)


def softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta x)) / beta``, linear above ``threshold`` (as PyTorch)."""
    x = as_tensor(x)
    if beta == 1.0:
        sp = apply(softplus_prim, x)
    else:
        sp = apply(softplus_prim, x * beta) / beta
    return where(x * beta > threshold, x, sp)
