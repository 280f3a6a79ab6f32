"""numpy's long tail: sort and order statistics, products and diagonals, finite differences
(``gradient``), the NaN-skipping reductions; each a composition of existing ops."""

from __future__ import annotations

import builtins
from typing import Any

from .._backend import np
from .._tensor import Tensor, _wrap
from . import _binary as BI
from . import _elementwise as E
from . import _indexing as IX
from . import _linalg as L
from . import _reduce as R
from . import _shape as S
from ._common import ArgumentError, as_tensor, check_axis, operands
from ._numpy_elementwise import _f
from ._numpy_shape import ravel
from ._torch_names import ValuesIndices

_UNSAID: Any = object()  # an argument the caller did not give


def sort(x: Any, *args: Any, axis: Any = _UNSAID, kind: Any = None, order: Any = None,
         dim: Any = _UNSAID, descending: bool = False, stable: bool = False) -> Any:
    """Sorted along an axis; the gradient goes back to where each value came from (a gather
    with a constant permutation).

    numpy's ``sort(x, axis=...)`` gives the sorted tensor (flattened first when ``axis=None``);
    PyTorch's ``sort(x, dim=...)`` (or with ``descending=`` / ``stable=``) gives a ``(values,
    indices)`` pair. ``tg.sort(x)`` and ``tg.sort(x, 1)`` could mean either, so they raise.

    >>> import tapegrad as tg
    >>> tg.sort(tg.tensor([3.0, 1.0, 2.0]), axis=-1).tolist()
    [1.0, 2.0, 3.0]
    >>> v, i = tg.sort(tg.tensor([3.0, 1.0, 2.0]), dim=-1, descending=True)
    >>> v.tolist(), i.tolist()
    ([3.0, 2.0, 1.0], [0, 2, 1])
    """
    x = as_tensor(x)
    if args:
        raise TypeError(
            f"sort: tg.sort(x, {', '.join(map(repr, args))}) could mean numpy's sort (the sorted "
            "tensor) or PyTorch's (a (values, indices) pair). Write tg.sort(x, axis=...) for "
            "numpy's, tg.sort(x, dim=...) for PyTorch's"
        )
    torch_form = dim is not _UNSAID or descending or stable
    if torch_form and (axis is not _UNSAID or kind is not None or order is not None):
        raise TypeError("sort: give numpy's axis=/kind= or PyTorch's dim=/descending=/stable=, "
                        "not both")
    if torch_form:
        d = -1 if dim is _UNSAID else dim
        ax = check_axis(d, max(x.ndim, 1), "sort")
        if x.ndim == 0:
            return ValuesIndices(x, _wrap(np.zeros((), np.int64)))
        key = -x._data if descending else x._data
        if key.dtype.kind == "b":
            key = key.astype(np.int8)
        idx = np.argsort(key, axis=ax, kind="stable").astype(np.int64)
        return ValuesIndices(IX.take_along_axis(x, _wrap(idx), ax), _wrap(idx))
    if axis is _UNSAID:
        raise TypeError(
            "sort: tg.sort(x) could mean numpy's sort (the sorted tensor) or PyTorch's (a (values, "
            "indices) pair). Write tg.sort(x, axis=-1) for numpy's, tg.sort(x, dim=-1) for "
            "PyTorch's"
        )
    if order is not None:
        raise ValueError("sort: order= (numpy's structured-array fields) is not supported")
    if axis is None:
        x, axis = ravel(x), 0
    ax = check_axis(axis, x.ndim, "sort")
    idx = np.argsort(x._data, axis=ax, kind="stable")
    return IX.take_along_axis(x, _wrap(idx), ax)


def partition(x: Any, kth: Any, axis: int | None = -1) -> Tensor:
    """numpy's partition: the ``kth`` element in its sorted place, smaller ones before it."""
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = check_axis(axis, x.ndim, "partition")
    idx = np.argpartition(x._data, kth, axis=ax)
    return IX.take_along_axis(x, _wrap(idx), ax)


def argsort(x: Any, axis: int | None = -1) -> Tensor:
    """The indices that sort ``x`` along ``axis`` (stable; no gradient)."""
    x = as_tensor(x)
    return _wrap(np.argsort(x._data, axis=axis, kind="stable"))




# --- products, diagonals -------------------------------------------------------------------------
def dot(x: Any, y: Any) -> Tensor:
    """numpy's dot: a product with a scalar, matmul for 1-D and 2-D, else a sum over ``x``'s
    last axis and ``y``'s second-to-last.

    >>> import tapegrad as tg
    >>> tg.dot(tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])).item()
    11.0
    """
    x, y = as_tensor(x), as_tensor(y)
    if x.ndim == 0 or y.ndim == 0:
        return BI.multiply(x, y)
    if x.ndim <= 2 and y.ndim <= 2:
        return L.matmul(x, y)
    return L.tensordot(x, y, axes=([-1], [-2 if y.ndim >= 2 else 0]))


def inner(x: Any, y: Any) -> Tensor:
    """Sum over the last axes of ``x`` and ``y`` (a product for scalars)."""
    x, y = as_tensor(x), as_tensor(y)
    if x.ndim == 0 or y.ndim == 0:
        return BI.multiply(x, y)
    return L.tensordot(x, y, axes=([-1], [-1]))


def vdot(x: Any, y: Any) -> Tensor:
    """The dot product of the flattened inputs."""
    return R.sum(BI.multiply(ravel(x), ravel(y)))


def kron(x: Any, y: Any) -> Tensor:
    """The Kronecker product: blocks ``x[i, j] * y``.

    >>> import tapegrad as tg
    >>> tg.kron(tg.tensor([1, 10]), tg.tensor([1, 2])).tolist()
    [1, 2, 10, 20]
    """
    x, y = as_tensor(x), as_tensor(y)
    nd = builtins.max(x.ndim, y.ndim)
    x = S.reshape(x, (1,) * (nd - x.ndim) + x.shape)
    y = S.reshape(y, (1,) * (nd - y.ndim) + y.shape)
    xs = S.reshape(x, tuple(v for n in x.shape for v in (n, 1)))
    ys = S.reshape(y, tuple(v for n in y.shape for v in (1, n)))
    return S.reshape(xs * ys, tuple(a * b for a, b in zip(x.shape, y.shape, strict=True)))


def cross(
    x: Any, y: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: int | None = None
) -> Tensor:
    """The cross product of 3-vectors along ``axisa`` / ``axisb`` (inputs broadcast), put on
    ``axisc``; ``axis`` sets all three (numpy's arguments).

    >>> import tapegrad as tg
    >>> tg.cross(tg.tensor([1.0, 0.0, 0.0]), tg.tensor([0.0, 1.0, 0.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = operands(as_tensor(x), as_tensor(y))
    x, y = S.moveaxis(x, axisa, -1), S.moveaxis(y, axisb, -1)
    if x.shape[-1] != 3 or y.shape[-1] != 3:
        raise ValueError(
            f"cross: needs vectors of length 3 along axisa={axisa} and axisb={axisb}, got "
            f"shapes {x.shape} and {y.shape} after moving them last"
        )
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    y0, y1, y2 = y[..., 0], y[..., 1], y[..., 2]
    out = S.stack([x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0], axis=-1)
    return S.moveaxis(out, -1, axisc)


def diagonal(x: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The diagonal ``offset`` of the planes of ``axis1`` and ``axis2``, as the last axis."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"diagonal: needs at least 2 dimensions, got shape {x.shape}")
    a1, a2 = check_axis(axis1, x.ndim, "diagonal"), check_axis(axis2, x.ndim, "diagonal")
    if a1 == a2:
        raise ArgumentError(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}")
    rest = [i for i in range(x.ndim) if i not in (a1, a2)]
    x = S.permute_dims(x, (*rest, a1, a2))
    n1, n2 = x.shape[-2:]
    rows = np.arange(builtins.max(0, -offset), builtins.min(n1, n2 - offset))
    return x[..., rows, rows + offset]


def matrix_trace(x: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """numpy's trace: the sum of a diagonal (``tg.trace`` is the tape function).

    >>> import tapegrad as tg
    >>> tg.matrix_trace(tg.tensor([[1.0, 2.0], [3.0, 4.0]])).item()
    5.0
    """
    return R.sum(diagonal(x, offset, axis1, axis2), axis=-1)


def diag(v: Any, k: int = 0) -> Tensor:
    """A 1-D input on diagonal ``k`` of a square matrix, or a 2-D input's diagonal ``k``."""
    v = as_tensor(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError(f"diag: needs a 1-D or 2-D input, got shape {v.shape}")
    n = v.shape[0]
    m = S.expand_dims(v, -1) * _wrap(np.eye(n, dtype=v.dtype))
    a = builtins.abs(k)
    return S.pad(m, ((0, a), (a, 0)) if k >= 0 else ((a, 0), (0, a)))


def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1, spacing: Any = _UNSAID,
             dim: Any = _UNSAID) -> Any:
    """Central differences inside, one-sided at the edges: numpy's ``gradient(f, *varargs,
    axis=...)`` (one tensor for one axis, else a list) or PyTorch's ``gradient(f, spacing=...,
    dim=...)`` (always a tuple).

    ``varargs`` / ``spacing`` are scalar spacings (one, or one per axis). On a 1-d tensor,
    ``tg.gradient(x)`` could mean either (numpy's one tensor, PyTorch's tuple of one), so it
    raises: say ``axis=0`` or ``dim=0``.

    >>> import tapegrad as tg
    >>> tg.gradient(tg.tensor([1.0, 2.0, 4.0, 7.0]), axis=0).tolist()
    [1.0, 1.5, 2.5, 3.0]
    >>> tg.gradient(tg.tensor([1.0, 2.0, 4.0, 7.0]), dim=0)[0].tolist()
    [1.0, 1.5, 2.5, 3.0]
    """
    f = _f(f)
    if spacing is not _UNSAID or dim is not _UNSAID:
        if varargs or axis is not None:
            raise TypeError("gradient: give numpy's spacings and axis= or PyTorch's spacing= and "
                            "dim=, not both")
        d = None if dim is _UNSAID else dim
        if isinstance(d, int):
            d = [d]
        h = 1.0 if spacing is _UNSAID else spacing
        spacings = tuple(h) if isinstance(h, (list, tuple)) else (h,)
        out = gradient(f, *spacings, axis=list(range(f.ndim)) if d is None else list(d),
                       edge_order=edge_order)
        return tuple(out) if isinstance(out, list) else (out,)
    if f.ndim == 1 and axis is None:
        raise TypeError(
            "gradient: on a 1-d tensor tg.gradient(x) could mean numpy's gradient (one tensor) or "
            "PyTorch's (a tuple of one). Write tg.gradient(x, axis=0) for numpy's, "
            "tg.gradient(x, dim=0) for PyTorch's"
        )
    axes = (
        list(range(f.ndim))
        if axis is None
        else [check_axis(a, f.ndim, "gradient") for a in (axis if isinstance(axis, (list, tuple)) else [axis])]
    )
    if edge_order != 1:
        raise ValueError(f"gradient: only edge_order=1 is supported, got {edge_order}")
    hs = list(varargs) if len(varargs) > 1 else list(varargs) * len(axes) or [1.0] * len(axes)
    if len(hs) != len(axes) or any(np.ndim(h) != 0 for h in hs):
        raise ValueError(
            f"gradient: give one scalar spacing, or one per axis ({len(axes)}); got {len(varargs)} "
            "(coordinate arrays are not supported)"
        )
    out = []
    for a, h in zip(axes, hs, strict=True):
        n = f.shape[a]
        if n < 2:
            raise ValueError(f"gradient: axis {a} has {n} element(s) of shape {f.shape}; need 2")

        def part(lo: int, hi: int, a: int = a) -> Tensor:
            return f[(slice(None),) * a + (slice(lo, hi),)]

        pieces = [part(1, 2) - part(0, 1)]
        if n > 2:
            pieces.append((part(2, n) - part(0, n - 2)) * 0.5)
        pieces.append(part(n - 1, n) - part(n - 2, n - 1))
        out.append(S.concatenate(pieces, axis=a) / float(h))
    return out[0] if len(out) == 1 else out


def nansum(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The sum with NaNs counted as 0; their gradient is 0 (numpy's and PyTorch's ``nansum``).

    >>> import tapegrad as tg
    >>> tg.nansum(tg.tensor([1.0, float("nan"), 2.0])).item()
    3.0
    """
    x = as_tensor(x)
    return R.sum(BI.where(E.isnan(x), 0.0, x), axis, keepdims)


def nanmean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The mean of the values that are not NaN (NaN where there are none), as numpy and PyTorch.

    >>> import tapegrad as tg
    >>> tg.nanmean(tg.tensor([1.0, float("nan"), 2.0])).item()
    1.5
    """
    x = as_tensor(x)
    count = R.sum(S.astype(E.logical_not(E.isnan(x)), x.dtype), axis, keepdims)
    none = BI.equal(count, 0)  # all NaN: NaN, without 0/0's warning
    return BI.where(none, float("nan"), nansum(x, axis, keepdims) / BI.where(none, 1.0, count))


def ptp(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """numpy's ``ptp``: the range, ``max - min`` along ``axis`` (ties share the gradient)."""
    return R.amax(x, axis, keepdims) - R.amin(x, axis, keepdims)


def median(x: Any, axis: int | None = None, keepdims: bool = False, **kwargs: Any) -> Tensor:
    """numpy's ``median``: the middle value along ``axis`` (all values when None); with an even
    count, the mean of the two middle ones. The gradient goes to the middle value(s).

    PyTorch's ``torch.median`` differs: the lower of the two middle values, and with ``dim`` a
    (values, indices) pair; ``dim=`` / ``keepdim=`` therefore raise here.

    >>> import tapegrad as tg
    >>> tg.median(tg.tensor([4.0, 1.0, 3.0, 2.0])).item()
    2.5
    """
    if kwargs:
        raise TypeError(
            f"median: got {sorted(kwargs)}; tg.median is numpy's median(x, axis, keepdims) "
            "(the mean of the two middle values of an even count); PyTorch's median(x, dim) is a "
            "(values, indices) pair of the lower middle value (its values along the last axis: "
            "tg.sort(x, axis=-1)[..., (n - 1) // 2])"
        )
    x = as_tensor(x)
    if axis is None:
        out = median(ravel(x), 0)
        return S.reshape(out, (1,) * x.ndim) if keepdims else out
    ax = check_axis(axis, x.ndim, "median")
    n = x.shape[ax]
    if n == 0:
        raise ValueError(f"median: axis {axis} of shape {x.shape} is empty")
    s = sort(x, axis=ax)
    pre = (slice(None),) * ax
    mid = s[pre + (slice((n - 1) // 2, n // 2 + 1),)]
    return R.mean(mid, ax, keepdims)
