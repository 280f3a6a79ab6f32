"""Elementwise unary primitives: each forward beside its VJP; clip, nan_to_num and the
activations built on them (binary rules: ``ops/_binary.py``).

VJPs that can be written from the output keep the output (``save=(OUT,)``) instead of the
input, so backward holds less memory (exp, tanh, sigmoid, sqrt, relu).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._autodiff import OUT, PRIMITIVES, apply, defprim, nondiff
from .._autodiff._expr import ANS, Elementwise, G, X, positive
from .._autodiff._expr import relu as relu_expr
from .._autodiff._fastpath import apply1
from .._backend import np
from .._dtypes import default_float
from .._kernels.registry import SMALLEST, dispatch
from .._tensor import Tensor, _wrap
from . import _special
from ._binary import where
from ._common import ArgumentError, as_tensor

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _unary(
    name: str, fwd: Any, vjp: Any, save: tuple[int, ...] = (0,), doc: str = "",
    expr: Elementwise | None = None,
) -> Callable[[Any], Tensor]:
    prim = defprim(name, fwd, vjp, save, expr=expr)

    def op(x: Any) -> Tensor:
        return apply1(prim, x if isinstance(x, Tensor) else as_tensor(x))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc or f"Elementwise ``{name}``."
    return op


def _floatin(f: Any) -> Any:
    """Integer inputs to a float function give the default float (like torch.exp on ints)."""

    def fwd(x: Any) -> Any:
        if x.dtype.kind not in "fc":
            x = x.astype(default_float())
        return f(x)

    return fwd


# --- unary -----------------------------------------------------------------------------------
neg = _unary("neg", np.negative, None, (), expr=Elementwise(-X(0), (-G,)))
sign = _unary(
    "sign", np.sign, lambda xp, g, ans, x: xp.zeros_like(g), (), "-1, 0 or 1 by sign; zero gradient."
)
abs = _unary("abs", np.abs, lambda xp, g, ans, x: g * xp.sign(x), doc="Elementwise ``|x|``.")
# numpy's exp, tanh, sqrt are not numba's bit for bit: no forward expression (loops skip them)
exp = _unary("exp", _floatin(np.exp), None, (OUT,), expr=Elementwise(None, (G * ANS,)))
expm1 = _unary(
    "expm1", _floatin(np.expm1), lambda xp, g, ans, x: g * (ans + 1.0), (OUT,),
    "``exp(x) - 1``, accurate for small ``x``.",
)  # fmt: skip
log = _unary("log", _floatin(np.log), lambda xp, g, ans, x: g / x, doc="Natural logarithm.")
log1p = _unary(
    "log1p", _floatin(np.log1p), lambda xp, g, ans, x: g / (x + 1.0),
    doc="``log(1 + x)``, accurate for small ``x``.",
)  # fmt: skip
log2 = _unary("log2", _floatin(np.log2), lambda xp, g, ans, x: g / (x * math.log(2.0)))
log10 = _unary("log10", _floatin(np.log10), lambda xp, g, ans, x: g / (x * math.log(10.0)))
sqrt = _unary("sqrt", _floatin(np.sqrt), None, (OUT,), expr=Elementwise(None, (G * 0.5 / ANS,)))
rsqrt = _unary(
    "rsqrt", _floatin(lambda x: 1.0 / np.sqrt(x)), lambda xp, g, ans, x: g * -0.5 * ans**3, (OUT,),
    "``1 / sqrt(x)``.",
)  # fmt: skip
square = _unary("square", np.square, None, doc="``x * x``.",
                expr=Elementwise(X(0) * X(0), (G * 2.0 * X(0),)))
reciprocal = _unary(
    "reciprocal", _floatin(np.reciprocal), lambda xp, g, ans, x: -g * ans * ans, (OUT,), "``1 / x``."
)


sin = _unary("sin", _floatin(np.sin), lambda xp, g, ans, x: g * xp.cos(x))
cos = _unary("cos", _floatin(np.cos), lambda xp, g, ans, x: -g * xp.sin(x))
tan = _unary("tan", _floatin(np.tan), lambda xp, g, ans, x: g * (1.0 + ans * ans), (OUT,))
tanh = _unary("tanh", _floatin(np.tanh), None, (OUT,),
              expr=Elementwise(None, (G * (1.0 - ANS * ANS),)))


def _sigmoid(x: Any) -> Any:
    # exp of a non-positive number only: no overflow for large |x|
    e = np.exp(-np.abs(x))
    r = 1.0 / (1.0 + e)
    return np.where(x >= 0, r, e * r)


sigmoid = _unary(
    "sigmoid", _floatin(_sigmoid), None, (OUT,),
    "``1 / (1 + exp(-x))``, without overflow for large ``|x|``.",
    Elementwise(None, (G * ANS * (1.0 - ANS),)),
)  # fmt: skip


def _relu(x: Any) -> Any:
    y = np.maximum(x, 0)
    return y if y.dtype is x.dtype else y.astype(x.dtype)  # bool -> int64 back to bool


def _relu_fwd(x: Any) -> Any:
    if x.size < SMALLEST.get("relu", 0):  # too small for any kernel: no dispatcher
        return _relu(x)
    return dispatch("relu", _relu, x)


def _relu_grad(g: Any, ans: Any) -> Any:
    return g * (ans > 0)


def _relu_vjp(xp: Any, g: Any, ans: Any, x: Any) -> Any:
    if g.size < SMALLEST.get("relu_grad", 0):
        return _relu_grad(g, ans)
    return dispatch("relu_grad", _relu_grad, g, ans)


relu = _unary(
    "relu", _relu_fwd, _relu_vjp, (OUT,), "``max(x, 0)``; the gradient at 0 is 0 (as PyTorch).",
    # the functions dispatch to kernels; a loop runs the expressions (the same numbers)
    Elementwise(relu_expr(X(0)), (G * positive(ANS),)),
)  # fmt: skip
def _erf_fwd(x: Any) -> Any:
    if x.dtype.kind not in "fc":
        x = x.astype(default_float())
    return dispatch("erf", _special.erf, x)


def _erf_grad(xp: Any, g: Any, x: Any) -> Any:
    return g * _TWO_OVER_SQRT_PI * xp.exp(-(x * x))


# a compiled pass each way on float arrays (_kernels/gelu.py: float32 polynomials, libm's erf
# in float64); the numpy reference is float64-accurate in about forty passes
erf = _unary(
    "erf", _erf_fwd, lambda xp, g, ans, x: dispatch("erf_grad", _erf_grad, xp, g, x),
    doc="The error function (float64-accurate rational approximation).",
)  # fmt: skip
_SIGMOID = PRIMITIVES["sigmoid"]
# a primitive rather than log1p(exp(x)): stable for large |x| without a where on both branches
_softplus = defprim(
    "softplus",
    _floatin(lambda x: np.logaddexp(x, 0).astype(x.dtype, copy=False)),
    lambda xp, g, ans, x: g * xp.apply(_SIGMOID, x),
    (0,),
)


def _zero_grad(name: str, f: Any) -> Any:
    return _unary(
        name, f, lambda xp, g, ans, x: xp.zeros_like(g), (), f"Elementwise ``{name}``; zero gradient."
    )  # fmt: skip


floor = _zero_grad("floor", np.floor)
ceil = _zero_grad("ceil", np.ceil)
_round = _zero_grad("round", np.round)  # halves to even, as numpy and PyTorch


def round(x: Any, decimals: int = 0) -> Tensor:
    """Elementwise rounding to ``decimals`` places, halves to even (numpy's and PyTorch's
    ``round(x, decimals)``; a negative ``decimals`` rounds to tens, hundreds...); zero gradient.

    >>> import tapegrad as tg
    >>> tg.round(tg.tensor([1.25, 2.5, 36.0]), decimals=1).tolist()
    [1.2000000476837158, 2.5, 36.0]
    >>> tg.round(tg.tensor([1.5, 2.5, 36.0]), -1).tolist()
    [0.0, 0.0, 40.0]
    """
    if isinstance(decimals, bool) or not isinstance(decimals, (int, np.integer)):
        raise TypeError(f"round: decimals must be an int, got {decimals!r}")
    if decimals == 0:
        return _round(x)
    if decimals > 0:  # scale, round, unscale: numpy's and PyTorch's order of operations
        scale = 10.0 ** int(decimals)
        return _round(as_tensor(x) * scale) / scale
    scale = 10.0 ** -int(decimals)
    return _round(as_tensor(x) / scale) * scale
trunc = _zero_grad("trunc", np.trunc)


_ISNAN = nondiff("isnan", np.isnan)
_ISFINITE = nondiff("isfinite", np.isfinite)
_ISINF = nondiff("isinf", np.isinf)
_LOGICAL_NOT = nondiff("logical_not", np.logical_not)


def isnan(x: Any) -> Tensor:
    """Elementwise NaN test as a bool tensor."""
    return apply(_ISNAN, as_tensor(x))


def isfinite(x: Any) -> Tensor:
    """Elementwise finiteness test as a bool tensor."""
    return apply(_ISFINITE, as_tensor(x))


def isinf(x: Any) -> Tensor:
    """Elementwise infinity test as a bool tensor."""
    return apply(_ISINF, as_tensor(x))


cbrt = _unary(
    "cbrt",
    _floatin(np.cbrt),
    lambda xp, g, ans, x: g / (3.0 * ans * ans),
    (OUT,),
    "The cube root (negative for a negative ``x``); the gradient at 0 is infinite.",
)


def logical_not(x: Any) -> Tensor:
    """Elementwise ``not`` as a bool tensor."""
    return apply(_LOGICAL_NOT, as_tensor(x))


# --- clip, nan_to_num ----------------------------------------------------------------------------
def clip(
    x: Any, min: Any = None, max: Any = None, *, a_min: Any = None, a_max: Any = None
) -> Tensor:
    """Clamp to ``[min, max]`` (PyTorch's clamp: ``minimum(maximum(x, min), max)``); numpy's
    ``a_min`` / ``a_max`` are accepted too. NaN stays NaN (as numpy and PyTorch).

    The gradient passes where ``x`` is inside, and to tensor bounds where they bind.

    >>> import tapegrad as tg
    >>> tg.clip(tg.tensor([-2.0, 0.5, 3.0, float("nan")]), -1.0, 1.0).tolist()
    [-1.0, 0.5, 1.0, nan]
    """
    x = as_tensor(x)
    min = a_min if min is None else min
    max = a_max if max is None else max
    if min is None and max is None:
        raise ArgumentError("clip: give min, max or both")
    out = x
    if min is not None:
        out = where(out >= min, out, min)
    if max is not None:
        out = where(out <= max, out, max)
    if x._data.dtype.kind in "fc" and np.isnan(x._data).any():
        out = where(isnan(x), _wrap(x._data), out)  # NaN stays, with no gradient (PyTorch)
    return out


def nan_to_num(
    x: Any, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
) -> Tensor:
    """Replace NaN and infinities (by default with 0 and the dtype's extremes).

    The gradient passes where ``x`` was finite.
    """
    x = as_tensor(x)
    if x._data.dtype.kind not in "fc":
        return x
    repl = np.nan_to_num(x._data, nan=nan, posinf=posinf, neginf=neginf)
    return where(isfinite(x), x, _wrap(repl))


# --- activations (compositions; no gradient code) --------------------------------------------
def _leaky(x: Any, slope: float) -> Any:
    return np.where(x > 0, x, x * slope).astype(x.dtype, copy=False)


def _leaky_fwd(x: Any, slope: float) -> Any:
    return dispatch("leaky_relu", _leaky, x, slope)


def _leaky_grad(xp: Any, g: Any, ans: Any, slope: float) -> Any:
    return xp.where(ans > 0, g, g * slope)


def _leaky_vjp(xp: Any, g: Any, ans: Any, x: Any, slope: float) -> Any:
    # with slope >= 0 the output is positive exactly where the input is: the output is saved
    # (the next layer keeps it anyway), not the input
    return dispatch("leaky_relu_grad", _leaky_grad, xp, g, ans, slope)


_leaky_relu = defprim("leaky_relu", _leaky_fwd, _leaky_vjp, (OUT,))


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    """``x`` for ``x > 0``, else ``negative_slope * x`` (the gradient at 0 is the slope's, as
    PyTorch). One op on float tensors with a slope >= 0; integer inputs and negative slopes
    take the composition (integers give a float result)."""
    x = as_tensor(x)
    if x.dtype.kind != "f" or not negative_slope >= 0:
        return where(x > 0, x, x * negative_slope)
    return apply(_leaky_relu, x, slope=float(negative_slope))


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    x = as_tensor(x)
    # where, not minimum: at 0 minimum's tie would halve the gradient; PyTorch takes alpha
    return where(x > 0, x, expm1(where(x > 0, 0.0, x)) * alpha)


def _gelu_np(x: Any) -> Any:
    phi = np.add(_special.erf(x * (1.0 / math.sqrt(2.0))), 1.0).astype(x.dtype, copy=False)
    return np.multiply(x, 0.5, dtype=x.dtype) * phi


def _gelu_fwd(x: Any) -> Any:
    return dispatch("gelu", _gelu_np, x)


def _gelu_grad(xp: Any, g: Any, x: Any) -> Any:
    # Phi(x) + x * exp(-x^2 / 2) / sqrt(2 pi), in ops a Tensor backward can differentiate
    phi = (xp.apply(PRIMITIVES["erf"], x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5
    return g * (phi + x * xp.exp(x * x * -0.5) * (1.0 / math.sqrt(2.0 * math.pi)))


def _gelu_vjp(xp: Any, g: Any, ans: Any, x: Any) -> Any:
    return dispatch("gelu_grad", _gelu_grad, xp, g, x)


# exact GELU as one op on float tensors: a compiled pass each way (_kernels/gelu.py), float32
# throughout; the numpy reference computes erf in float64
_gelu = defprim("gelu", _gelu_fwd, _gelu_vjp, (0,))


def _gelu_tanh_np(x: Any) -> Any:
    u = np.multiply(x + np.multiply(x * x, x, dtype=x.dtype) * 0.044715, _SQRT_2_OVER_PI,
                    dtype=x.dtype)
    return np.multiply(x, 0.5, dtype=x.dtype) * (np.tanh(u) + 1.0).astype(x.dtype, copy=False)


def _gelu_tanh_grad(xp: Any, g: Any, x: Any) -> Any:
    # d/dx x (1 + tanh u) / 2 = (1 + tanh u) / 2 + x (1 - tanh^2 u) u' / 2, in ops a Tensor
    # backward can differentiate
    th = xp.tanh((x + x * x * x * 0.044715) * _SQRT_2_OVER_PI)
    du = (x * x * (3.0 * 0.044715) + 1.0) * _SQRT_2_OVER_PI
    return g * ((th + 1.0) * 0.5 + x * (1.0 - th * th) * du * 0.5)


# tanh GELU as one op on float tensors: a compiled pass each way (_kernels/gelu.py) where the
# composition makes ten
_gelu_tanh = defprim(
    "gelu_tanh",
    lambda x: dispatch("gelu_tanh", _gelu_tanh_np, x),
    lambda xp, g, ans, x: dispatch("gelu_tanh_grad", _gelu_tanh_grad, xp, g, x),
    (0,),
)


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """GELU: ``x * Phi(x)`` with the erf form (``approximate='none'``) or the tanh form.

    >>> import tapegrad as tg
    >>> f"{tg.gelu(tg.tensor(1.0)).item():.4f} {tg.gelu(tg.tensor(1.0), 'tanh').item():.4f}"
    '0.8413 0.8412'
    """
    x = as_tensor(x)
    if approximate == "tanh":
        if x.dtype.kind == "f":
            return apply(_gelu_tanh, x)
        return 0.5 * x * (1.0 + tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if x.dtype.kind != "f":
        return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))
    return apply(_gelu, x)


def silu(x: Any) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    x = as_tensor(x)
    return x * sigmoid(x)


def softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta x)) / beta``, linear where ``beta x > threshold`` (as PyTorch)."""
    x = as_tensor(x)
    sp = apply(_softplus, x) if beta == 1.0 else apply(_softplus, x * beta) / beta
    return where(x * beta > threshold, x, sp)
