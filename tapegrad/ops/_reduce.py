"""Reductions over ``axis`` (int, tuple or None) with ``keepdims``."""

from __future__ import annotations

import builtins
from typing import Any

from .._backend import np
from .._tape import OUT, apply, defprim
from .._tensor import Tensor, _wrap
from ._common import as_tensor, normalize_axis


def _expand(g: Tensor, axes: tuple[int, ...], keepdims: bool, shape: tuple[int, ...]) -> Tensor:
    """``g`` of a reduction, reshaped with 1s at the reduced axes, then broadcast to ``shape``."""
    from ._shape import broadcast_to, reshape  # noqa: PLC0415

    if not keepdims:
        kshape = tuple(1 if i in axes else n for i, n in enumerate(shape))
        g = reshape(g, kshape)
    return broadcast_to(g, shape)


def _keep(ans: Tensor, axes: tuple[int, ...], keepdims: bool, shape: tuple[int, ...]) -> Tensor:
    from ._shape import reshape  # noqa: PLC0415

    if keepdims:
        return ans
    return reshape(ans, tuple(1 if i in axes else n for i, n in enumerate(shape)))


_sum = defprim(
    "sum",
    lambda x, axis, keepdims, shape: np.sum(x, axis=axis, keepdims=keepdims),
    lambda g, ans, x, axis, keepdims, shape: _expand(g, axis, keepdims, shape),
)
_prod = defprim(
    "prod",
    lambda x, axis, keepdims, shape: np.prod(x, axis=axis, keepdims=keepdims),
    # exact for inputs without zeros; with zeros, the product of the others (cumprod trick)
    lambda g, ans, x, axis, keepdims, shape: _prod_grad(g, ans, x, axis, keepdims, shape),
    (0, OUT),
)


def _amax_vjp(g: Tensor, ans: Tensor, x: Tensor, axis: Any, keepdims: bool, shape: Any) -> Tensor:
    # ties share the gradient evenly (as torch.amax)
    m = (x == _keep(ans, axis, keepdims, shape)).astype(x.dtype)
    return _expand(g, axis, keepdims, shape) * m / sum(m, axis=axis, keepdims=True)


_amax = defprim(
    "amax",
    lambda x, axis, keepdims, shape: np.amax(x, axis=axis, keepdims=keepdims),
    _amax_vjp,
    (0, OUT),
)
_amin = defprim(
    "amin",
    lambda x, axis, keepdims, shape: np.amin(x, axis=axis, keepdims=keepdims),
    _amax_vjp,
    (0, OUT),
)


def _prod_grad(g: Tensor, ans: Tensor, x: Tensor, axis: Any, keepdims: bool, shape: Any) -> Tensor:
    from ._elementwise import where  # noqa: PLC0415

    nz = x != 0
    if builtins.bool(nz._data.all()):
        return _expand(g, axis, keepdims, shape) * _keep(ans, axis, keepdims, shape) / x
    # product of the other elements: prod over the axis with x replaced by 1 at one zero,
    # computed as prod(where(x==0, 1, x)) / where(x==0, 1, x), masked where >1 zero exists
    safe = where(nz, x, 1.0)
    p = prod(safe, axis=axis, keepdims=True)
    zeros = sum((~nz).astype(x.dtype), axis=axis, keepdims=True)
    others = where(nz, where(zeros > 0, 0.0 * x, p / safe), where(zeros > 1, 0.0 * x, p + 0.0 * x))
    return _expand(g, axis, keepdims, shape) * others


def _reduce(prim: Any, x: Any, axis: Any, keepdims: bool, name: str) -> Tensor:
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, name)
    return apply(prim, x, axis=axes, keepdims=keepdims, shape=x.shape)


def sum(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
    """Sum over ``axis`` (int, tuple or None for all).

    >>> import tapegrad as tg
    >>> tg.sum(tg.ones((2, 3)), axis=1).tolist()
    [3.0, 3.0]
    """
    x = as_tensor(x)
    if dtype is not None:
        x = x.astype(dtype)
    elif x.dtype.kind == "b":
        x = x.astype(np.int64)
    return _reduce(_sum, x, axis, keepdims, "sum")


def prod(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce(_prod, x, axis, keepdims, "prod")


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis``."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "mean")
    if x.dtype.kind not in "fc":
        x = x.astype(np.float32)
    n = 1
    for a in axes:
        n *= x.shape[a]
    if n == 0:
        raise ValueError(f"mean: reducing axis {axis!r} of an empty tensor of shape {x.shape}")
    return apply(_sum, x, axis=axes, keepdims=keepdims, shape=x.shape) * (1.0 / n)


def _nonempty(x: Tensor, axes: tuple[int, ...], name: str) -> None:
    for a in axes:
        if x.shape[a] == 0:
            raise ValueError(f"{name}: cannot reduce axis {a} of size 0 (shape {x.shape})")


def amax(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Maximum over ``axis``. Tied maxima split the gradient evenly (as torch.amax)."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "amax")
    _nonempty(x, axes, "amax")
    return apply(_amax, x, axis=axes, keepdims=keepdims, shape=x.shape)


def amin(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Minimum over ``axis``. Tied minima split the gradient evenly (as torch.amin)."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "amin")
    _nonempty(x, axes, "amin")
    return apply(_amin, x, axis=axes, keepdims=keepdims, shape=x.shape)


max, min = amax, amin


def var(x: Any, axis: Any = None, keepdims: bool = False, correction: float = 0) -> Tensor:
    """Variance with ``correction`` (0: population, 1: Bessel's; the Array API's argument)."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "var")
    n = 1
    for a in axes:
        n *= x.shape[a]
    d = x - mean(x, axis=axes, keepdims=True)
    return sum(d * d, axis=axes, keepdims=keepdims) * (1.0 / builtins.max(n - correction, 0))


def std(x: Any, axis: Any = None, keepdims: bool = False, correction: float = 0) -> Tensor:
    from ._elementwise import sqrt  # noqa: PLC0415

    return sqrt(var(x, axis=axis, keepdims=keepdims, correction=correction))


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))``, shifted by the max for stability."""
    from ._elementwise import exp, log  # noqa: PLC0415
    from ._shape import squeeze  # noqa: PLC0415

    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "logsumexp")
    m = _wrap(np.amax(x._data, axis=axes, keepdims=True))  # a constant shift: no gradient
    m = _wrap(np.where(np.isfinite(m._data), m._data, 0).astype(x.dtype, copy=False))
    out = log(sum(exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else squeeze(out, axes)


def _arg(f: Any, name: str) -> Any:
    def op(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        if axis is not None:
            normalize_axis(axis, x.ndim, name)
        return _wrap(np.asarray(f(x._data, axis=axis, keepdims=keepdims)).astype(np.int64, copy=False))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Index of the {name[3:]} along ``axis`` (flattened when None); int64, no gradient."
    return op


argmax = _arg(np.argmax, "argmax")
argmin = _arg(np.argmin, "argmin")


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    return _wrap(np.asarray(np.all(x._data, axis=normalize_axis(axis, x.ndim, "all"), keepdims=keepdims)))


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    return _wrap(np.asarray(np.any(x._data, axis=normalize_axis(axis, x.ndim, "any"), keepdims=keepdims)))


def _cumsum_vjp(g: Tensor, ans: Any, x: Any, axis: int) -> Tensor:
    from ._shape import flip  # noqa: PLC0415

    return flip(cumsum(flip(g, axis), axis), axis)


_cumsum = defprim("cumsum", lambda x, axis: np.cumsum(x, axis=axis), _cumsum_vjp)


def cumsum(x: Any, axis: int | None = None) -> Tensor:
    """Cumulative sum along ``axis`` (the flattened tensor when None)."""
    x = as_tensor(x)
    if axis is None:
        x, axis = x.reshape(-1), 0
    (axis,) = normalize_axis(axis, x.ndim, "cumsum")
    return apply(_cumsum, x, axis=axis)


def cumprod(x: Any, axis: int | None = None) -> Tensor:
    """Cumulative product along ``axis``; composed from log/exp for positive inputs and a
    running-product formula elsewhere (exact with zeros via the gradient of the primitive)."""
    x = as_tensor(x)
    if axis is None:
        x, axis = x.reshape(-1), 0
    (axis,) = normalize_axis(axis, x.ndim, "cumprod")
    return apply(_cumprod, x, axis=axis)


def _cumprod_vjp(g: Tensor, ans: Tensor, x: Tensor, axis: int) -> Tensor:
    from ._elementwise import where  # noqa: PLC0415
    from ._shape import flip  # noqa: PLC0415

    if builtins.bool((x._data != 0).all()):
        return flip(cumsum(flip(g * ans, axis), axis), axis) / x
    # with zeros: d ans_j / d x_i = prod_{k<=j, k!=i} x_k; build it column by column
    n = x.shape[axis]
    from ._shape import concat, moveaxis  # noqa: PLC0415

    xm = moveaxis(x, axis, -1)
    gm = moveaxis(g, axis, -1)
    cols = []
    for i in range(n):
        others = where(_onehot_mask(n, i, xm), 1.0 + 0.0 * xm, xm)
        cp = cumprod(others, axis=-1)
        contrib = sum((gm * cp)[..., i:], axis=-1, keepdims=True)
        cols.append(contrib)
    return moveaxis(concat(cols, axis=-1), -1, axis)


def _onehot_mask(n: int, i: int, like: Tensor) -> Tensor:
    m = np.zeros(n, dtype=bool)
    m[i] = True
    return _wrap(np.broadcast_to(m, like.shape))


_cumprod = defprim("cumprod", lambda x, axis: np.cumprod(x, axis=axis), _cumprod_vjp, (0, OUT))


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Vector p-norm over ``axis`` (default 2) or the Frobenius norm (``ord='fro'``)."""
    from ._elementwise import abs as _abs  # noqa: PLC0415
    from ._elementwise import sqrt  # noqa: PLC0415

    x = as_tensor(x)
    if ord in (None, 2, "fro"):
        return sqrt(sum(x * x, axis=axis, keepdims=keepdims))
    if ord == 1:
        return sum(_abs(x), axis=axis, keepdims=keepdims)
    if ord in (float("inf"), "inf"):
        return amax(_abs(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and ord > 0:
        return sum(_abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)
    raise ValueError(f"norm: ord {ord!r} is not supported (use 1, 2, a p > 0, inf or 'fro')")
