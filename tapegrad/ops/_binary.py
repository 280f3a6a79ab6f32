"""Elementwise binary primitives (arithmetic, comparisons and logic) and ``where``: each
forward beside its VJP; a float tensor with a Python number keeps nothing for backward."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._autodiff import OUT, apply, defprim, nondiff
from .._autodiff._expr import ANS, Elementwise, G, P, X
from .._autodiff._fastpath import apply2
from .._backend import np
from .._dtypes import default_float
from .._tensor import Tensor, _wrap
from ._common import as_tensor, operands


# --- binary ----------------------------------------------------------------------------------
class IntegerPowerError(ValueError, RuntimeError):
    """An integer to a negative integer power: numpy's ValueError and PyTorch's RuntimeError."""


def _pow_fwd(x: Any, y: Any) -> Any:
    if isinstance(y, (int, np.integer)) and y < 0 and x.dtype.kind in "iu":
        raise IntegerPowerError(
            f"an integer tensor ({x.dtype}, shape {x.shape}) to the negative integer power "
            f"{y} is not an integer (PyTorch and numpy raise too); cast first: x.float() ** {y}"
        )
    if type(y) is float and y == -0.5:  # PyTorch's rsqrt: -inf at -0.0
        return np.reciprocal(np.sqrt(x))
    return np.power(x, y)


def _pow_vjp_x(xp: Any, g: Any, ans: Any, x: Any, y: Any) -> Any:
    if xp.is_operand(y):
        # y == 0 gives 0 even at x == 0, where x ** (y - 1) is infinite (as PyTorch)
        y0 = y == 0
        return g * xp.where(y0, 0.0, y * x ** xp.where(y0, 1.0, y - 1.0))
    if y == 0:
        return xp.zeros_like(g)
    if y == 1:
        return g
    if y == 2:
        return g * (2.0 * x)
    if y == 0.5:  # PyTorch's sqrt: 0.5 / sqrt(x), -inf at -0.0
        return g * (0.5 / xp.sqrt(x))
    return g * (y * x ** (y - 1))


def _pow_vjp_y(xp: Any, g: Any, ans: Any, x: Any, y: Any) -> Any:
    # d(x ** y)/dy = x ** y * log(x), as PyTorch at the edges: where x == 0, 0 for y >= 0 and
    # x ** y * -inf for y < 0; nan where x < 0 (log is undefined there)
    if not xp.is_operand(x):
        if x > 0:
            return g * ans * math.log(x)
        return g * xp.where(y >= 0, 0.0, -math.inf) if x == 0 else g * math.nan
    # ans is +-inf there: ans * -inf without multiplying (a second-order pass would see 0 * inf)
    edge = xp.where(x < 0, math.nan, xp.where(y >= 0, 0.0, xp.where(ans > 0, -math.inf, math.inf)))
    return g * xp.where(x > 0, ans * xp.log(xp.where(x > 0, x, 1.0)), edge)


_add = defprim("add", np.add, expr=Elementwise(X(0) + X(1), (G, G)))
_sub = defprim("sub", np.subtract, expr=Elementwise(X(0) - X(1), (G, -G)))
_mul = defprim("mul", np.multiply, None, (0, 1), expr=Elementwise(X(0) * X(1), (G * X(1), G * X(0))))
_div = defprim("div", np.true_divide, None, (1, OUT),
               expr=Elementwise(X(0) / X(1), (G / X(1), -G * ANS / X(1))))
_pow = defprim("pow", _pow_fwd, (_pow_vjp_x, _pow_vjp_y), (0, 1, OUT))
_maximum = defprim(
    "maximum",
    np.maximum,
    (
        lambda xp, g, ans, x, y: g * _tie_weight(x, y, True),
        lambda xp, g, ans, x, y: g * _tie_weight(y, x, True),
    ),
    (0, 1),
)
_minimum = defprim(
    "minimum",
    np.minimum,
    (
        lambda xp, g, ans, x, y: g * _tie_weight(x, y, False),
        lambda xp, g, ans, x, y: g * _tie_weight(y, x, False),
    ),
    (0, 1),
)
def _radius2(xp: Any, x: Any, y: Any) -> Any:
    # x^2 + y^2, 1 at the origin: there both partials are 0 (as PyTorch), not 0 / 0
    r = x * x + y * y
    return xp.where(r == 0, 1.0, r)


_atan2 = defprim(
    "atan2",
    np.arctan2,
    (
        lambda xp, g, ans, x, y: g * y / _radius2(xp, x, y),
        lambda xp, g, ans, x, y: -g * x / _radius2(xp, x, y),
    ),
    (0, 1),
)
_remainder = defprim(
    "remainder",
    np.remainder,
    (
        lambda xp, g, ans, x, y: g,
        lambda xp, g, ans, x, y: -g * xp.const(np.floor_divide(xp.data(x), xp.data(y))),
    ),
    (0, 1),
)
_floor_divide = defprim(
    "floor_divide",
    np.floor_divide,
    (lambda xp, g, ans, x, y: xp.zeros_like(g), lambda xp, g, ans, x, y: xp.zeros_like(g)),
)


def _tie_weight(a: Any, b: Any, larger: bool) -> Any:
    """1 where ``a`` wins, 0.5 on ties (PyTorch splits the gradient of max/min ties evenly)."""
    win = (a > b) if larger else (a < b)
    return win.astype(a.dtype) + (a == b).astype(a.dtype) * 0.5


def _binary(
    prim: Any, name: str, doc: str, scalar: Any = None
) -> Callable[[Any, Any], Tensor]:
    """The public op of a binary primitive; ``scalar``, if given, is the primitive for a float
    tensor with a Python number (commutative ops only)."""

    def op(x: Any, y: Any) -> Tensor:
        if isinstance(x, Tensor) and isinstance(y, Tensor):  # Parameters too
            if x._data.dtype is not y._data.dtype:
                x, y = operands(x, y)
                return apply(prim, x, y)
            return apply2(prim, x, y)  # the hot path: two tensors of one dtype
        if scalar is not None:
            if _float_and_number(x, y):
                return apply(scalar, x, c=y)
            if _float_and_number(y, x):
                return apply(scalar, y, c=x)
        x, y = operands(x, y)
        return apply(prim, x, y)  # apply names the op and both shapes if they do not broadcast

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


add = _binary(
    _add,
    "add",
    """``x + y`` with numpy broadcasting and PyTorch's dtype promotion.

    >>> import tapegrad as tg
    >>> (tg.ones((2, 3)) + tg.arange(3)).tolist()
    [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    """,
)
subtract = _binary(_sub, "subtract", "``x - y`` with broadcasting.")
# A tensor times a Python number: the number is a param, so nothing is saved for backward
# (mul would keep the tensor alive for the number's gradient, which is never asked for).
_mul_scalar = defprim(
    "mul_scalar", lambda x, c: np.multiply(x, c),  # noqa: PLW0108
    expr=Elementwise(X(0) * P("c"), (G * P("c"),)),
)
_div_scalar = defprim(
    "div_scalar", lambda x, c: np.true_divide(x, c),  # noqa: PLW0108
    expr=Elementwise(X(0) / P("c"), (G / P("c"),)),
)


def _float_and_number(t: Any, v: Any) -> bool:
    """Whether ``t`` is a float Tensor and ``v`` a Python number (a ``*_scalar`` primitive's
    operands: the number becomes a param, so backward saves nothing for it)."""
    return (type(v) is float or type(v) is int) and isinstance(t, Tensor) and (
        t._data.dtype.kind in "fc"
    )


multiply = _binary(_mul, "multiply", "``x * y`` with broadcasting.", _mul_scalar)
pow = _binary(
    _pow,
    "pow",
    """``x ** y``; ``y`` a tensor or a Python number.

    The gradient for ``y`` is ``x ** y * log(x)``; where ``x == 0`` it is 0 for ``y >= 0`` and
    -inf for ``y < 0``, and nan where ``x < 0`` (as PyTorch).

    >>> import tapegrad as tg
    >>> tg.pow(tg.tensor([2.0, 3.0]), 2).tolist()
    [4.0, 9.0]
    """,
)
maximum = _binary(
    _maximum, "maximum", "Elementwise maximum; a tie gives half the gradient to each side."
)
minimum = _binary(
    _minimum, "minimum", "Elementwise minimum; a tie gives half the gradient to each side."
)
atan2 = _binary(
    _atan2, "atan2", "``arctan(x / y)`` in the right quadrant (numpy's ``arctan2(x1, x2)``)."
)
remainder = _binary(
    _remainder, "remainder", "``x mod y`` with the sign of ``y`` (Python's ``%``, torch.remainder)."
)
floor_divide = _binary(
    _floor_divide, "floor_divide", "``floor(x / y)`` (Python's ``//``); zero gradient."
)
_fmod = defprim(
    "fmod",
    np.fmod,
    (
        lambda xp, g, ans, x, y: g,
        lambda xp, g, ans, x, y: -g * xp.const(np.trunc(np.true_divide(xp.data(x), xp.data(y)))),
    ),
    (0, 1),
)
fmod = _binary(
    _fmod, "fmod", "``x mod y`` with the sign of ``x`` (C's ``fmod``, numpy's and PyTorch's)."
)


def _copysign_dx(x: Any, ans: Any) -> Any:
    """``ans / x`` (the sign flip, +-1), 0 where ``x`` is 0 (as PyTorch)."""
    r = np.zeros_like(ans)
    np.divide(ans, x, out=r, where=x != 0)
    return r


def _copysign_fwd(x: Any, y: Any) -> Any:
    out = np.copysign(x, y)
    return out if x.dtype.kind == "f" else out.astype(default_float())


_copysign = defprim(
    "copysign",
    _copysign_fwd,
    (
        lambda xp, g, ans, x, y: g * xp.const(_copysign_dx(xp.data(x), xp.data(ans))),
        lambda xp, g, ans, x, y: xp.zeros_like(g),
    ),
    (0, OUT),
)
copysign = _binary(
    _copysign,
    "copysign",
    """``|x|`` with the sign of ``y`` (its sign bit: -0.0 counts as negative); the gradient for
    ``x`` is the sign flip (0 where ``x`` is 0), for ``y`` 0, as PyTorch.""",
)


def divide(x: Any, y: Any) -> Tensor:
    """``x / y`` (true division: two integer operands give the default float, as PyTorch)."""
    if _float_and_number(x, y):
        return apply(_div_scalar, x, c=y)
    x, y = operands(x, y)
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    if (not xt or x._data.dtype.kind in "biu") and (not yt or y._data.dtype.kind in "biu"):
        f = default_float()
        x = x.astype(f) if xt else x
        y = y.astype(f) if yt else y
    return apply(_div, x, y)


sub, mul, div, true_divide = subtract, multiply, divide, divide


# --- comparisons and logic: bool outputs, never recorded -------------------------------------
def _cmp(name: str, f: Any) -> Any:
    prim = nondiff(name, f)

    def op(x: Any, y: Any) -> Tensor:
        x, y = operands(x, y)
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            x = as_tensor(x)
        return apply(prim, x, y)  # apply restates a broadcasting error with the op and shapes

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}`` as a bool tensor (no gradient)."
    return op


equal = _cmp("equal", np.equal)
not_equal = _cmp("not_equal", np.not_equal)
less = _cmp("less", np.less)
less_equal = _cmp("less_equal", np.less_equal)
greater = _cmp("greater", np.greater)
greater_equal = _cmp("greater_equal", np.greater_equal)
logical_and = _cmp("logical_and", np.logical_and)
logical_or = _cmp("logical_or", np.logical_or)
logical_xor = _cmp("logical_xor", np.logical_xor)


# --- where ---------------------------------------------------------------------------------------
_where = defprim(
    "where",
    np.where,
    (None, lambda xp, g, ans, c, x, y: g * c, lambda xp, g, ans, c, x, y: g * xp.logical_not(c)),
    (0,),
)


def where(condition: Any, x: Any, y: Any) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (all three broadcast together).

    >>> import tapegrad as tg
    >>> x = tg.tensor([-1.0, 2.0])
    >>> tg.where(x > 0, x, 0.0).tolist()
    [0.0, 2.0]
    """
    c = as_tensor(condition)
    if c._data.dtype.kind != "b":
        c = _wrap(c._data != 0)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        x = as_tensor(x)
    x, y = operands(x, y)
    return apply(_where, c, x, y)
