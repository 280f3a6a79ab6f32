"""numpy's elementwise functions that tapegrad lacked, and numpy's spellings of existing ones.

Those with a numpy kernel (sinh, arcsin, logaddexp, hypot, ...) are primitives beside their VJPs,
so they keep numpy's accuracy; the rest are compositions of existing ops.
"""

from __future__ import annotations

import math
from typing import Any

from .._autodiff import OUT, apply, defprim
from .._backend import np
from .._dtypes import default_float
from .._tensor import Tensor
from . import _binary as BI
from . import _elementwise as E
from ._common import as_tensor, operands
from ._elementwise import _floatin, _unary

_LN2 = math.log(2.0)

# --- elementwise primitives --------------------------------------------------------------------
sinh = _unary("sinh", _floatin(np.sinh), lambda xp, g, ans, x: g * xp.cosh(x))
cosh = _unary("cosh", _floatin(np.cosh), lambda xp, g, ans, x: g * xp.sinh(x))
arcsin = _unary("arcsin", _floatin(np.arcsin), lambda xp, g, ans, x: g / xp.sqrt(1.0 - x * x))
arccos = _unary("arccos", _floatin(np.arccos), lambda xp, g, ans, x: -g / xp.sqrt(1.0 - x * x))
arctan = _unary("arctan", _floatin(np.arctan), lambda xp, g, ans, x: g / (1.0 + x * x))
arcsinh = _unary("arcsinh", _floatin(np.arcsinh), lambda xp, g, ans, x: g / xp.sqrt(x * x + 1.0))
arccosh = _unary("arccosh", _floatin(np.arccosh), lambda xp, g, ans, x: g / xp.sqrt(x * x - 1.0))
arctanh = _unary("arctanh", _floatin(np.arctanh), lambda xp, g, ans, x: g / (1.0 - x * x))
exp2 = _unary("exp2", _floatin(np.exp2), lambda xp, g, ans, x: g * ans * _LN2, (OUT,), "``2 ** x``.")
for _prim_op in (sinh, cosh, arcsin, arccos, arctan, arcsinh, arccosh, arctanh, exp2):
    _prim_op.__module__ = __name__  # defined here (the API docs resolve names by module)

_logaddexp = defprim(
    "logaddexp",
    np.logaddexp,
    (
        lambda xp, g, ans, x, y: g * xp.exp(x - ans),
        lambda xp, g, ans, x, y: g * xp.exp(y - ans),
    ),
    (0, 1, OUT),
)
_logaddexp2 = defprim(
    "logaddexp2",
    np.logaddexp2,
    (
        lambda xp, g, ans, x, y: g * xp.exp2(x - ans),
        lambda xp, g, ans, x, y: g * xp.exp2(y - ans),
    ),
    (0, 1, OUT),
)
_hypot = defprim(
    "hypot",
    np.hypot,
    (lambda xp, g, ans, x, y: g * x / ans, lambda xp, g, ans, x, y: g * y / ans),
    (0, 1, OUT),
)


def _float_pair(x: Any, y: Any) -> tuple[Tensor, Tensor]:
    x, y = operands(as_tensor(x), as_tensor(y))
    if x.dtype.kind not in "fc":
        x, y = x.astype(default_float()), y.astype(default_float())
    return x, y


def logaddexp(x: Any, y: Any) -> Tensor:
    """``log(exp(x) + exp(y))`` without overflow.

    >>> import tapegrad as tg
    >>> x = tg.tensor(1000.0, dtype=tg.float64)
    >>> round(tg.logaddexp(x, x).item(), 4)
    1000.6931
    """
    return apply(_logaddexp, *_float_pair(x, y))


def logaddexp2(x: Any, y: Any) -> Tensor:
    """``log2(2**x + 2**y)`` without overflow."""
    return apply(_logaddexp2, *_float_pair(x, y))


def hypot(x: Any, y: Any) -> Tensor:
    """``sqrt(x**2 + y**2)`` without overflow (the gradient at (0, 0) is NaN, as PyTorch).

    >>> import tapegrad as tg
    >>> tg.hypot(tg.tensor(3.0), tg.tensor(4.0)).item()
    5.0
    """
    return apply(_hypot, *_float_pair(x, y))


def fmax(x: Any, y: Any) -> Tensor:
    """Elementwise maximum that ignores NaN (NaN only where both are); the gradient goes to
    ``x`` where ``x >= y`` or ``y`` is NaN (as torch.fmax)."""
    x, y = operands(as_tensor(x), as_tensor(y))
    return BI.where((x >= y) | E.isnan(y), x, y)


def fmin(x: Any, y: Any) -> Tensor:
    """Elementwise minimum that ignores NaN (as torch.fmin)."""
    x, y = operands(as_tensor(x), as_tensor(y))
    return BI.where((x <= y) | E.isnan(y), x, y)


def fabs(x: Any) -> Tensor:
    """``|x|`` as a float (numpy's fabs)."""
    x = as_tensor(x)
    return E.abs(_f(x))


def positive(x: Any) -> Tensor:
    """``+x``: a copy (numpy's positive)."""
    return as_tensor(x) * 1


def sinc(x: Any) -> Tensor:
    """Normalised sinc ``sin(pi x) / (pi x)``, 1 at 0 (where the gradient is 0).

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.sinc(tg.tensor([0.0, 0.5])).tolist()]
    [1.0, 0.6366]
    """
    x = _f(x)
    zero = x == 0
    px = BI.where(zero, 1.0, x) * math.pi
    return BI.where(zero, 1.0, E.sin(px) / px)


def deg2rad(x: Any) -> Tensor:
    """Degrees to radians."""
    return _f(x) * (math.pi / 180.0)


def rad2deg(x: Any) -> Tensor:
    """Radians to degrees."""
    return _f(x) * (180.0 / math.pi)


def _f(x: Any) -> Tensor:
    x = as_tensor(x)
    return x if x.dtype.kind in "fc" else x.astype(default_float())


# --- numpy spellings: aliases, real parts, names of existing ops ---------------------------------
degrees = rad2deg
radians = deg2rad


def _real_only(x: Any, name: str) -> Tensor:
    x = as_tensor(x, name)
    if x.dtype.kind == "c":
        raise TypeError(f"{name}: tapegrad's tensors are real-valued, got {x.dtype}")
    return x


def real(x: Any) -> Tensor:
    """The real part: a real tensor itself."""
    return _real_only(x, "real")


def real_if_close(x: Any, tol: float = 100) -> Tensor:
    """numpy's ``real_if_close``: a real tensor itself."""
    return _real_only(x, "real_if_close")


def imag(x: Any) -> Tensor:
    """The imaginary part: zeros for a real tensor (no gradient flows)."""
    return _real_only(x, "imag") * 0.0


def conj(x: Any) -> Tensor:
    """The complex conjugate: a real tensor itself."""
    return _real_only(x, "conj")


conjugate = conj


def angle(x: Any, deg: bool = False) -> Tensor:
    """The argument of each element: pi for negative reals, 0 otherwise (zero gradient).

    >>> import tapegrad as tg
    >>> tg.angle(tg.tensor([-2.0, 3.0]), deg=True).tolist()
    [180.0, 0.0]
    """
    x = _f(_real_only(x, "angle"))
    half = 180.0 if deg else math.pi
    return (x < 0).astype(x.dtype) * half + x * 0.0  # x * 0.0 keeps it on the tape


def negative(x: Any) -> Tensor:
    """numpy's ``negative``: ``-x``."""
    return E.neg(x)


def power(x: Any, y: Any) -> Tensor:
    """numpy's ``power``: ``x ** y`` (``pow``)."""
    return BI.pow(x, y)


def rint(x: Any) -> Tensor:
    """numpy's ``rint``: to the nearest integer, halves to even (``round``); zero gradient."""
    return E.round(x)


def arctan2(y: Any, x: Any) -> Tensor:
    """numpy's ``arctan2(y, x)`` (``atan2``): the angle of the point (x, y)."""
    return BI.atan2(y, x)


def mod(x: Any, y: Any) -> Tensor:
    """numpy's ``mod``: ``x mod y`` with the sign of ``y`` (``remainder``, Python's ``%``)."""
    return BI.remainder(x, y)
