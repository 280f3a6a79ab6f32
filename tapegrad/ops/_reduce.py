"""Reductions over ``axis`` (int, tuple or None) with ``keepdims``, and cumulative ops."""

from __future__ import annotations

import builtins
from typing import Any

from .._autodiff import OUT, apply, defprim, nondiff
from .._backend import np, xp_of
from .._dtypes import default_float
from .._tensor import Tensor, _wrap
from . import _binary as BI
from ._binary import where
from ._common import as_tensor, check_axis, normalize_axis
from ._elementwise import abs as _abs
from ._elementwise import exp, log, sqrt
from ._indexing import take_along_axis
from ._shape import reshape, squeeze


def _kept(axes: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a reduction over ``axes`` of ``shape`` with keepdims: 1s at the axes."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _expand(xp: Any, g: Any, axes: tuple[int, ...], keepdims: bool, shape: tuple[int, ...]) -> Any:
    """``g`` of a reduction, reshaped with 1s at the reduced axes, then broadcast to ``shape``."""
    if not keepdims:
        g = xp.reshape(g, _kept(axes, shape))
    return g if g.shape == shape else xp.broadcast_to(g, shape)


def _extreme_vjp(xp: Any, g: Any, ans: Any, x: Any, *, axis: Any, keepdims: bool, shape: Any) -> Any:
    # ties share the gradient evenly (as torch.amax); the mask is a constant
    m = (xp.data(x) == np.reshape(xp.data(ans), _kept(axis, shape))).astype(x.dtype)
    m /= m.sum(axis=axis, keepdims=True)
    return _expand(xp, g, axis, keepdims, shape) * xp.const(m)


def _prod_vjp(xp: Any, g: Any, ans: Any, x: Any, *, axis: Any, keepdims: bool, shape: Any) -> Any:
    if builtins.bool((xp.data(x) != 0).all()):
        return _expand(xp, g, axis, keepdims, shape) * xp.reshape(ans, _kept(axis, shape)) / x
    return _expand(xp, g, axis, keepdims, shape) * _prod_of_others(xp, x, axis)


_sum = defprim(
    "sum",
    lambda x, axis, keepdims, shape: np.sum(x, axis=axis, keepdims=keepdims),
    lambda xp, g, ans, x, axis, keepdims, shape: _expand(xp, g, axis, keepdims, shape),
)
_prod = defprim(
    "prod",
    lambda x, axis, keepdims, shape: np.prod(x, axis=axis, keepdims=keepdims),
    _prod_vjp,
    (0, OUT),
)
_amax = defprim(
    "amax",
    lambda x, axis, keepdims, shape: np.amax(x, axis=axis, keepdims=keepdims),
    _extreme_vjp,
    (0, OUT),
)
_amin = defprim(
    "amin",
    lambda x, axis, keepdims, shape: np.amin(x, axis=axis, keepdims=keepdims),
    _extreme_vjp,
    (0, OUT),
)


def _prod_of_others(xp: Any, x: Any, axes: tuple[int, ...]) -> Any:
    """Per element, the product of the other elements over ``axes``: exact with zeros and
    differentiable again (exclusive cumulative products from both ends, as PyTorch does)."""
    rest = tuple(i for i in range(x.ndim) if i not in axes)
    perm = rest + tuple(axes)
    xm = xp.permute_dims(x, perm)
    flat = xp.reshape(xm, xm.shape[: len(rest)] + (-1,))  # (..., n): the reduced axes as one
    one = xp.const(np.ones_like(xp.data(x), shape=flat.shape[:-1] + (1,)))

    def exclusive(t: Any) -> Any:  # [1, t0, t0 t1, ...]
        return xp.cumprod(xp.concat([one, t[..., :-1]], axis=-1), axis=-1)

    others = exclusive(flat) * xp.flip(exclusive(xp.flip(flat, -1)), -1)
    return xp.permute_dims(xp.reshape(others, xm.shape), tuple(int(i) for i in np.argsort(perm)))


def _reduce(prim: Any, x: Any, axis: Any, keepdims: bool, name: str) -> Tensor:
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, name)
    return apply(prim, x, axis=axes, keepdims=keepdims, shape=x.shape)


def _count(x: Tensor, axes: tuple[int, ...]) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def sum(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
    """Sum over ``axis`` (an int, a tuple, or None for all); bools and ints sum to int64.

    >>> import tapegrad as tg
    >>> tg.sum(tg.ones((2, 3)), axis=1).tolist()
    [3.0, 3.0]
    """
    x = as_tensor(x)
    if dtype is not None:
        x = x.astype(dtype)
    elif x.dtype.kind in "bi":
        x = x.astype(np.int64)
    return _reduce(_sum, x, axis, keepdims, "sum")


def prod(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Product over ``axis``; the gradient is exact where inputs are zero."""
    x = as_tensor(x)
    if x.dtype.kind in "bi":
        x = x.astype(np.int64)
    return _reduce(_prod, x, axis, keepdims, "prod")


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (integers give the default float).

    >>> import tapegrad as tg
    >>> tg.mean(tg.tensor([[1.0, 2.0], [3.0, 5.0]]), axis=0).tolist()
    [2.0, 3.5]
    """
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "mean")
    if x.dtype.kind not in "fc":
        x = x.astype(default_float())
    n = _count(x, axes)
    if n == 0:
        raise ValueError(f"mean: axis {axis!r} of a tensor of shape {x.shape} has no elements")
    return apply(_sum, x, axis=axes, keepdims=keepdims, shape=x.shape) * (1.0 / n)


def _nonempty(x: Tensor, axes: tuple[int, ...], name: str) -> None:
    for a in axes:
        if x.shape[a] == 0:
            raise ValueError(f"{name}: cannot reduce axis {a} of size 0 (shape {x.shape})")


def amax(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Maximum over ``axis``. Tied maxima split the gradient evenly (as torch.amax).

    >>> import tapegrad as tg
    >>> tg.amax(tg.tensor([[1.0, 5.0], [7.0, 2.0]]), axis=1).tolist()
    [5.0, 7.0]
    """
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


_MAX_MESSAGE = (
    "{name}: tg.{name}(x, {dim}) or x.{name}({spell}) means the {name}imum over axis {dim} in "
    "numpy and a (values, indices) pair in PyTorch (which reads axis= as dim=); write "
    "tg.a{name}(x, axis={dim}) or x.a{name}(axis={dim}) for the values, or {name}(x, dim={dim}) for "
    "PyTorch's (values, indices) pair"
)


def _extreme(name: str, values: Any, indices: Any, pairwise: str) -> Any:
    def op(x: Any, *args: Any, axis: Any = None, keepdims: bool = False, dim: Any = None,
           keepdim: Any = None) -> Any:  # fmt: skip
        if args and len(args) == 1 and isinstance(args[0], (int, np.integer)):
            raise TypeError(_MAX_MESSAGE.format(name=name, dim=args[0], spell=args[0]))
        if axis is not None and dim is None:
            raise TypeError(_MAX_MESSAGE.format(name=name, dim=axis, spell=f"axis={axis}"))
        if args:  # PyTorch's max(x, other): the elementwise maximum
            if len(args) != 1 or axis is not None or dim is not None:
                raise TypeError(f"{name}: takes one other tensor, or axis= (numpy) or dim= "
                                f"(PyTorch), got {args!r}")  # fmt: skip
            return getattr(BI, pairwise)(x, args[0])
        if dim is not None:
            from ._torch_names import ValuesIndices  # noqa: PLC0415 # cycle: _torch_names imports this module

            x = as_tensor(x)
            if x.ndim == 0:
                return ValuesIndices(x, indices(x))
            ax = check_axis(dim, x.ndim, name)
            idx = indices(x, axis=ax, keepdims=True)
            # the gradient reaches the returned index only, as PyTorch's max(dim)
            vals = take_along_axis(x, idx, ax)
            if not keepdim:
                vals, idx = squeeze(vals, ax), squeeze(idx, ax)
            return ValuesIndices(vals, idx)
        return values(x, axis=axis, keepdims=keepdims or builtins.bool(keepdim))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"The {name}imum of all elements (tied extremes split the gradient), PyTorch's "
        f"``{name}(x, dim=d, keepdim=False)`` (a ``(values, indices)`` pair) and "
        f"``{name}(x, other)`` (the elementwise {pairwise}); ``{name}(x, 1)`` and "
        f"``{name}(x, axis=1)`` raise, since numpy reads them as the values and PyTorch as the "
        f"pair: ``a{name}(x, axis)`` gives the values.\n\n"
        f"    >>> import tapegrad as tg\n"
        f"    >>> tg.{name}(tg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).indices.tolist()\n"
        f"    {[1, 0] if name == 'max' else [0, 1]}\n"
    )
    return op




def var(
    x: Any,
    axis: Any = None,
    keepdims: bool = False,
    correction: float | None = None,
    *,
    ddof: float | None = None,
    dim: Any = None,
    keepdim: bool | None = None,
) -> Tensor:
    """Variance over ``axis`` with ``correction`` (0: population, 1: Bessel's; Array API).
    numpy's ``ddof`` and PyTorch's ``dim`` / ``keepdim`` are accepted too.

    >>> import tapegrad as tg
    >>> f"{tg.var(tg.tensor([1.0, 2.0, 3.0, 4.0]), correction=1).item():.4f}"
    '1.6667'
    """
    x = as_tensor(x)
    axis, keepdims, c = _spread_args("var", axis, keepdims, correction, ddof, dim, keepdim)
    axes = normalize_axis(axis, x.ndim, "var")
    n = _count(x, axes)
    if n - c <= 0:
        raise ValueError(
            f"var: {n} elements over axis {axis!r} (shape {x.shape}) with correction="
            f"{c} leave no degrees of freedom; use correction=0 or more elements"
        )
    d = x - mean(x, axis=axes, keepdims=True)
    return sum(d * d, axis=axes, keepdims=keepdims) * (1.0 / (n - c))


def _spread_args(
    name: str, axis: Any, keepdims: bool, correction: Any, ddof: Any, dim: Any, keepdim: Any
) -> tuple[Any, bool, float]:
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{name}: give axis or dim, not both")
        axis = dim
    if keepdim is not None:
        keepdims = keepdim
    if ddof is not None and correction is not None and ddof != correction:
        raise TypeError(f"{name}: give correction or ddof (numpy's name), not both")
    if ddof is None and correction is None:
        if dim is None and keepdim is None:
            # numpy divides by n, PyTorch (which also takes axis=) by n - 1: never guess
            raise TypeError(
                f"{name}: numpy's {name} divides by n (ddof=0) and PyTorch's by n - 1 "
                f"(correction=1), and this call could mean either; say which: "
                f"{name}(x, axis, ddof=0) for numpy's, {name}(x, dim=..., correction=1) (or "
                "unbiased=True) for PyTorch's"
            )
        correction = 1  # PyTorch's keywords: PyTorch's call, with its default correction
    c = ddof if ddof is not None else correction
    return axis, keepdims, c


def std(
    x: Any,
    axis: Any = None,
    keepdims: bool = False,
    correction: float | None = None,
    *,
    ddof: float | None = None,
    dim: Any = None,
    keepdim: bool | None = None,
) -> Tensor:
    """Standard deviation: ``sqrt(var(x, axis, keepdims, correction))``. Where the spread
    is zero (equal values, or an axis of size 1) the gradient is 0, as PyTorch's.

    >>> import tapegrad as tg
    >>> tg.std(tg.tensor([[1.0, 3.0]]), ddof=1, dim=1).tolist()
    [1.4142135381698608]
    """

    v = var(x, axis, keepdims, correction, ddof=ddof, dim=dim, keepdim=keepdim)
    pos = _wrap(v._data > 0)  # a constant mask: sqrt's derivative at 0 is infinite
    return where(pos, sqrt(where(pos, v, 1.0)), 0.0)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, shifted by the max so large inputs do not overflow.

    >>> import tapegrad as tg
    >>> f"{tg.logsumexp(tg.tensor([1000.0, 1000.0], dtype=tg.float64)).item():.4f}"
    '1000.6931'
    """

    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "logsumexp")
    _nonempty(x, axes, "logsumexp")
    m = max_shift(x, axes)
    out = log(sum(exp(x - m), axis=axes, keepdims=True)) + m
    if keepdims:
        return out
    return reshape(out, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def _arg(f: Any, name: str) -> Any:
    def op(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        if axis is not None:
            axis = check_axis(axis, x.ndim, name)
            if x.ndim == 0:
                axis = None
        if x.size == 0:
            raise ValueError(f"{name}: the tensor of shape {x.shape} is empty")
        return _wrap(np.asarray(f(x._data, axis=axis, keepdims=keepdims), dtype=np.int64))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"Index of the {name[3:]} along ``axis`` (of the flattened tensor when None); int64."
    )
    return op


argmax = _arg(np.argmax, "argmax")
argmin = _arg(np.argmin, "argmin")
max = _extreme("max", amax, argmax, "maximum")
min = _extreme("min", amin, argmin, "minimum")


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Whether every element over ``axis`` is true (non-zero), as a bool tensor."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "all")
    return _wrap(np.asarray(np.all(x._data, axis=axes, keepdims=keepdims)))


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Whether some element over ``axis`` is true (non-zero), as a bool tensor."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "any")
    return _wrap(np.asarray(np.any(x._data, axis=axes, keepdims=keepdims)))


# --- cumulative ------------------------------------------------------------------------------
def _cumsum_vjp(xp: Any, g: Any, ans: Any, x: Any, axis: int) -> Any:
    return xp.flip(xp.cumsum(xp.flip(g, axis), axis=axis), axis)


def _cumprod_vjp(xp: Any, g: Any, ans: Any, x: Any, axis: int) -> Any:
    if builtins.bool((xp.data(x) != 0).all()):
        return xp.flip(xp.cumsum(xp.flip(g * ans, axis), axis=axis), axis) / x
    # with zeros: d ans_j / d x_i = prod_{k <= j, k != i} x_k, built for all i at once
    n = x.shape[axis]
    xm = xp.moveaxis(x, axis, -1)  # (..., n)
    ap = xp_of(xp.data(x))
    eye = ap.eye(n, dtype=bool).reshape((n,) + (1,) * (xm.ndim - 1) + (n,))
    others = xp.where(xp.const(eye), 1.0, xm)  # (n_i, ..., n_k): x with x_i replaced by 1
    cp = xp.cumprod(others, axis=-1)  # (n_i, ..., n_j)
    upper = xp.const(ap.triu(ap.ones((n, n), dtype=x.dtype)).reshape(eye.shape))  # j >= i
    gm = xp.moveaxis(g, axis, -1)
    contrib = xp.sum(gm * cp * upper, axis=-1)  # (n_i, ...)
    return xp.moveaxis(contrib, 0, axis)


_cumsum = defprim("cumsum", lambda x, axis: np.cumsum(x, axis=axis), _cumsum_vjp)
_cumprod = defprim("cumprod", lambda x, axis: np.cumprod(x, axis=axis), _cumprod_vjp, (0, OUT))


def _cumulative(prim: Any, x: Any, axis: int | None, name: str) -> Tensor:
    x = as_tensor(x)
    if x.dtype.kind in "bi":
        x = x.astype(np.int64)
    if axis is None or x.ndim == 0:
        if axis is not None:
            check_axis(axis, 0, name)
        shape = x.shape
        out = apply(prim, reshape(x, (-1,)), axis=0)
        return out if axis is None else reshape(out, shape)
    return apply(prim, x, axis=check_axis(axis, x.ndim, name))


def cumsum(x: Any, axis: int | None = None) -> Tensor:
    """Cumulative sum along ``axis`` (of the flattened tensor when None).

    >>> import tapegrad as tg
    >>> tg.cumsum(tg.tensor([1, 2, 3]), axis=0).tolist()
    [1, 3, 6]
    """
    return _cumulative(_cumsum, x, axis, "cumsum")


def cumprod(x: Any, axis: int | None = None) -> Tensor:
    """Cumulative product along ``axis`` (flattened when None); gradients exact with zeros."""
    return _cumulative(_cumprod, x, axis, "cumprod")


def norm(
    x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False, *, p: Any = None,
    dtype: Any = None,
) -> Tensor:  # fmt: skip
    """Vector p-norm over ``axis`` (2 by default; all axes when None, which for a matrix is the
    Frobenius norm, also ``ord='fro'``). ``ord`` may be 1, 2, any p > 0, inf, -inf (the
    smallest magnitude) or 0 (the count of nonzeros). PyTorch's ``x.norm(p=2, dim=1,
    keepdim=True)`` spells the same (``p`` for ``ord``); a matrix norm is ``tg.linalg.norm``.

    Every p-norm has gradient 0 at 0 (as PyTorch), not NaN or inf.

    >>> import tapegrad as tg
    >>> tg.norm(tg.tensor([3.0, 4.0])).item(), tg.ones((2, 4)).norm(p=1, dim=1).tolist()
    (5.0, [4.0, 4.0])
    """

    if p is not None:
        if ord is not None:
            raise TypeError("norm: give ord= (numpy's name) or p= (PyTorch's), not both")
        ord = p
    x = as_tensor(x)
    if dtype is not None:
        x = x.astype(dtype)
    if ord == 0:  # no gradient: a count
        return sum((x != 0).astype(x.dtype if x.dtype.kind == "f" else default_float()),
                   axis=axis, keepdims=keepdims)  # fmt: skip
    if ord in (float("-inf"), "-inf"):
        return amin(_abs(x), axis=axis, keepdims=keepdims)
    if x.dtype.kind not in "fc":
        x = x.astype(default_float())
    if ord == 1:
        return sum(_abs(x), axis=axis, keepdims=keepdims)
    if ord in (float("inf"), "inf"):
        return amax(_abs(x), axis=axis, keepdims=keepdims)
    if ord in (None, 2, "fro"):
        s, root = sum(x * x, axis=axis, keepdims=keepdims), sqrt
    elif isinstance(ord, (int, float)) and ord > 0:
        s = sum(_abs(x) ** ord, axis=axis, keepdims=keepdims)  # 0 also when |x|^p underflows

        def root(t: Tensor) -> Tensor:
            return t ** (1.0 / ord)
    else:
        raise ValueError(f"norm: ord {ord!r} is not supported (use 1, 2, a p > 0, inf or 'fro')")
    zero = s == 0
    if not builtins.bool(zero._data.any()):
        return root(s)
    # the double-where keeps d s^(1/p)/ds (infinite at 0) out of the gradient
    return where(zero, 0.0, root(where(zero, 1.0, s)))


def _max_shift_fwd(x: Any, axis: Any) -> Any:
    if x.size == 0:  # no maximum of nothing: no shift (softmax of an empty axis is empty)
        return xp_of(x).zeros_like(x.sum(axis=axis, keepdims=True))
    m = np.amax(x, axis=axis, keepdims=True)
    return np.where(np.isfinite(m), m, 0).astype(x.dtype, copy=False)


_MAX_SHIFT = nondiff("max_shift", _max_shift_fwd)


def max_shift(x: Tensor, axis: Any) -> Tensor:
    """The max over ``axis`` (kept), 0 where it is not finite: a constant (no gradient) to
    subtract before ``exp`` so that softmax and logsumexp never overflow."""
    return apply(_MAX_SHIFT, _wrap(x._data), axis=axis)
