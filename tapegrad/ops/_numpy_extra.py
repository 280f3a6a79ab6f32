"""numpy's functions that tapegrad lacked: elementwise kernels, stacking and splitting, sort.

Elementwise functions with a numpy kernel (sinh, arcsin, logaddexp, hypot, ...) are primitives
beside their VJPs, so they keep numpy's accuracy; the rest are compositions of existing ops.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from .._autodiff import OUT, apply, defprim
from .._backend import np
from .._dtypes import default_float
from .._tensor import Tensor, _wrap
from . import _elementwise as E
from . import _indexing as IX
from . import _linalg as L
from . import _reduce as R
from . import _shape as S
from ._common import ArgumentError, as_tensor, check_axis, operands
from ._elementwise import _floatin, _unary
from ._torch_names import ValuesIndices

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
    return E.where((x >= y) | E.isnan(y), x, y)


def fmin(x: Any, y: Any) -> Tensor:
    """Elementwise minimum that ignores NaN (as torch.fmin)."""
    x, y = operands(as_tensor(x), as_tensor(y))
    return E.where((x <= y) | E.isnan(y), x, y)


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
    px = E.where(zero, 1.0, x) * math.pi
    return E.where(zero, 1.0, E.sin(px) / px)


def deg2rad(x: Any) -> Tensor:
    """Degrees to radians."""
    return _f(x) * (math.pi / 180.0)


def rad2deg(x: Any) -> Tensor:
    """Radians to degrees."""
    return _f(x) * (180.0 / math.pi)


def _f(x: Any) -> Tensor:
    x = as_tensor(x)
    return x if x.dtype.kind in "fc" else x.astype(default_float())


# --- shapes: stacking, splitting, rotating -----------------------------------------------------
def ravel(x: Any) -> Tensor:
    """The elements as a 1-D tensor (row-major)."""
    return S.reshape(as_tensor(x), (-1,))


def atleast_1d(*xs: Any) -> Any:
    """Each input with at least one dimension (numpy's rules; a tuple for several inputs)."""
    out = [S.reshape(t, (1,)) if t.ndim == 0 else t for t in map(as_tensor, xs)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*xs: Any) -> Any:
    """Each input with at least two dimensions: ``(N,) -> (1, N)``."""
    out = []
    for t in map(as_tensor, xs):
        out.append(S.reshape(t, (1, 1)) if t.ndim == 0 else t[None] if t.ndim == 1 else t)
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*xs: Any) -> Any:
    """Each input with at least three dimensions: ``(N,) -> (1, N, 1)``, ``(M, N) -> (M, N, 1)``."""
    out = []
    for t in map(as_tensor, xs):
        if t.ndim == 0:
            out.append(S.reshape(t, (1, 1, 1)))
        elif t.ndim == 1:
            out.append(t[None, :, None])
        else:
            out.append(t[:, :, None] if t.ndim == 2 else t)
    return out[0] if len(out) == 1 else tuple(out)


def _seq(xs: Any, name: str) -> list[Tensor]:
    if isinstance(xs, Tensor) or not isinstance(xs, (list, tuple)):
        xs = list(as_tensor(xs))
    if not xs:
        raise ValueError(f"{name}: need at least one tensor to stack")
    return [as_tensor(x) for x in xs]


def vstack(xs: Any) -> Tensor:
    """Stack along the first axis (1-D inputs become rows).

    >>> import tapegrad as tg
    >>> tg.vstack([tg.ones(2), tg.zeros(2)]).tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    """
    return S.concatenate([atleast_2d(x) for x in _seq(xs, "vstack")], axis=0)


def hstack(xs: Any) -> Tensor:
    """Stack along the second axis (the first for 1-D inputs)."""
    ts = [atleast_1d(x) for x in _seq(xs, "hstack")]
    return S.concatenate(ts, axis=0 if ts[0].ndim == 1 else 1)


def dstack(xs: Any) -> Tensor:
    """Stack along the third axis."""
    return S.concatenate([atleast_3d(x) for x in _seq(xs, "dstack")], axis=2)


def column_stack(xs: Any) -> Tensor:
    """1-D inputs as columns of a 2-D tensor; 2-D inputs side by side."""
    ts = [t[:, None] if t.ndim == 1 else atleast_2d(t) for t in _seq(xs, "column_stack")]
    return S.concatenate(ts, axis=1)


def append(x: Any, values: Any, axis: int | None = None) -> Tensor:
    """``values`` after ``x`` (both flattened when ``axis`` is None)."""
    x, v = as_tensor(x), as_tensor(values)
    if axis is None:
        return S.concatenate([ravel(x), ravel(v)], axis=0)
    return S.concatenate([x, v], axis=axis)


def array_split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """numpy's array_split: ``n`` sections (the first ``size % n`` one longer), or indices.

    >>> import tapegrad as tg
    >>> [t.tolist() for t in tg.array_split(tg.arange(5), 3)]
    [[0, 1], [2, 3], [4]]
    """
    x = as_tensor(x)
    ax = check_axis(axis, x.ndim, "array_split")
    n = x.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError(f"array_split: the number of sections must be > 0, got {k}")
        each, extra = divmod(n, k)
        sizes = [each + 1] * extra + [each] * (k - extra)
        bounds = [0, *np.cumsum(sizes).tolist()]
    else:
        bounds = [0, *[int(i) for i in indices_or_sections], n]
    pre = (slice(None),) * ax
    return [x[pre + (slice(a, b),)] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def array_split_equal(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """numpy's split: like array_split, but ``n`` sections must divide the axis equally."""
    x = as_tensor(x)
    if isinstance(indices_or_sections, (int, np.integer)):
        ax = check_axis(axis, x.ndim, "split")
        k = int(indices_or_sections)
        if k <= 0 or x.shape[ax] % k:
            raise ValueError(
                f"split: axis {ax} of size {x.shape[ax]} does not divide into {k} equal "
                "sections; pass the split indices, or use array_split"
            )
    return array_split(x, indices_or_sections, axis)


def hsplit(x: Any, indices_or_sections: Any) -> list[Tensor]:
    """Split along the second axis (the first for 1-D)."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise ValueError("hsplit: needs a tensor with at least 1 dimension")
    return array_split_equal(x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(x: Any, indices_or_sections: Any) -> list[Tensor]:
    """Split along the first axis (at least 2 dimensions)."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"vsplit: needs at least 2 dimensions, got shape {x.shape}")
    return array_split_equal(x, indices_or_sections, 0)


def dsplit(x: Any, indices_or_sections: Any) -> list[Tensor]:
    """Split along the third axis (at least 3 dimensions)."""
    x = as_tensor(x)
    if x.ndim < 3:
        raise ValueError(f"dsplit: needs at least 3 dimensions, got shape {x.shape}")
    return array_split_equal(x, indices_or_sections, 2)


def flipud(x: Any) -> Tensor:
    """Reverse the first axis."""
    return S.flip(as_tensor(x), 0)


def fliplr(x: Any) -> Tensor:
    """Reverse the second axis."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"fliplr: needs at least 2 dimensions, got shape {x.shape}")
    return S.flip(x, 1)


def rot90(x: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane of ``axes`` (numpy's direction).

    >>> import tapegrad as tg
    >>> tg.rot90(tg.tensor([[1, 2], [3, 4]])).tolist()
    [[2, 4], [1, 3]]
    """
    x = as_tensor(x)
    a0, a1 = (check_axis(a, x.ndim, "rot90") for a in axes)
    if a0 == a1:
        raise ValueError(f"rot90: axes must differ, got {axes}")
    k %= 4
    if k == 0:
        return x * 1
    if k == 2:
        return S.flip(x, (a0, a1))
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return S.permute_dims(S.flip(x, a1), tuple(perm))
    return S.flip(S.permute_dims(x, tuple(perm)), a1)


def rollaxis(x: Any, axis: int, start: int = 0) -> Tensor:
    """numpy's rollaxis: move ``axis`` to sit before ``start``."""
    x = as_tensor(x)
    n = x.ndim
    axis = check_axis(axis, n, "rollaxis")
    if not -n <= start <= n:
        raise np.exceptions.AxisError(f"rollaxis: start {start} is out of range -{n}..{n}")
    start = start + n if start < 0 else start
    if axis < start:
        start -= 1
    perm = list(range(n))
    perm.remove(axis)
    perm.insert(start, axis)
    return S.permute_dims(x, tuple(perm))


def diff(x: Any, n: int = 1, axis: int = -1) -> Tensor:
    """The ``n``-th discrete difference along ``axis``."""
    x = as_tensor(x)
    ax = check_axis(axis, x.ndim, "diff")
    pre = (slice(None),) * ax
    for _ in range(n):
        x = x[pre + (slice(1, None),)] - x[pre + (slice(None, -1),)]
    return x


_UNSET: Any = object()  # select's default not given (PyTorch's select then needs an index)


def select(
    condlist: Any,
    choicelist: Any = None,
    default: Any = _UNSET,
    *,
    dim: int | None = None,
    index: int | None = None,
) -> Tensor:
    """numpy's ``select(condlist, choicelist, default)``: the first choice whose condition
    holds, elementwise, ``default`` where none does. With an int second argument (or ``dim=`` /
    ``index=``) it is PyTorch's ``select(input, dim, index)``: ``input`` at ``index`` along
    ``dim``, that axis removed.

    >>> import tapegrad as tg
    >>> x = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> tg.select(x, 1, 0).tolist()
    [1.0, 3.0]
    >>> tg.select([x > 2], [x], default=0.0).tolist()
    [[0.0, 0.0], [3.0, 4.0]]
    """
    if dim is not None or index is not None or _is_int(choicelist):
        if dim is None:
            dim, choicelist = choicelist, None
        if index is None:
            index, default = default, _UNSET
        if choicelist is not None or default is not _UNSET or not (_is_int(dim) and _is_int(index)):
            raise TypeError(
                "select: give PyTorch's select(input, dim, index) with two ints, or numpy's "
                "select(condlist, choicelist, default) with two lists"
            )
        return _select_index(as_tensor(condlist), int(dim), int(index))  # type: ignore[arg-type]
    if choicelist is None:
        raise TypeError(
            "select: missing the second argument: numpy's select(condlist, choicelist) or "
            "PyTorch's select(input, dim, index)"
        )
    default = 0 if default is _UNSET else default
    if len(condlist) != len(choicelist):
        raise ValueError(
            f"select: {len(condlist)} conditions for {len(choicelist)} choices; give one each"
        )
    out: Any = default
    for c, v in zip(reversed(condlist), reversed(choicelist), strict=True):
        out = E.where(c, v, out)
    return as_tensor(out)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _select_index(x: Tensor, dim: int, index: int) -> Tensor:
    """PyTorch's select: ``x`` at ``index`` along ``dim``."""
    ax = check_axis(dim, x.ndim, "select")
    n = x.shape[ax]
    if not -n <= index < n:
        raise IndexError(
            f"select: index {index} is out of range for dim {dim} of size {n} (shape {x.shape})"
        )
    return x[(slice(None),) * ax + (index,)]


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
        return E.multiply(x, y)
    if x.ndim <= 2 and y.ndim <= 2:
        return L.matmul(x, y)
    return L.tensordot(x, y, axes=([-1], [-2 if y.ndim >= 2 else 0]))


def inner(x: Any, y: Any) -> Tensor:
    """Sum over the last axes of ``x`` and ``y`` (a product for scalars)."""
    x, y = as_tensor(x), as_tensor(y)
    if x.ndim == 0 or y.ndim == 0:
        return E.multiply(x, y)
    return L.tensordot(x, y, axes=([-1], [-1]))


def vdot(x: Any, y: Any) -> Tensor:
    """The dot product of the flattened inputs."""
    return R.sum(E.multiply(ravel(x), ravel(y)))


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


# --- numpy spellings: aliases, index tricks, real parts, finite differences --------------------
degrees = rad2deg
radians = deg2rad


def row_stack(xs: Any) -> Tensor:
    """numpy's older name of ``vstack``."""
    return vstack(xs)


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


class _IndexConcat:
    """``tg.r_[...]`` / ``tg.c_[...]``: numpy's concatenating index objects, on the tape.

    Items are tensors, arrays, numbers or slices (``1:10`` is numpy's ``arange``); numpy's
    string directives (``r_['0,2', ...]``) are not supported.
    """

    def __init__(self, name: str, columns: bool) -> None:
        self._name, self._columns = name, columns

    def __getitem__(self, key: Any) -> Tensor:
        items = key if isinstance(key, tuple) else (key,)
        ts = []
        for it in items:
            if isinstance(it, str):
                raise TypeError(
                    f"{self._name}[{it!r}, ...]: string directives are not supported; use "
                    "tg.concatenate / tg.stack with an axis"
                )
            t = _wrap(np.r_[it]) if isinstance(it, slice) else as_tensor(it, self._name)
            if self._columns:
                t = S.reshape(t, (1, 1)) if t.ndim == 0 else t[:, None] if t.ndim == 1 else t
            elif t.ndim == 0:
                t = S.reshape(t, (1,))
            ts.append(t)
        return S.concatenate(ts, axis=-1 if self._columns else 0)

    def __repr__(self) -> str:
        return f"tg.{self._name}"


r_ = _IndexConcat("r_", columns=False)
c_ = _IndexConcat("c_", columns=True)


# --- numpy's spellings of existing ops, and the NaN-skipping and order reductions ----------------
def negative(x: Any) -> Tensor:
    """numpy's ``negative``: ``-x``."""
    return E.neg(x)


def power(x: Any, y: Any) -> Tensor:
    """numpy's ``power``: ``x ** y`` (``pow``)."""
    return E.pow(x, y)


def rint(x: Any) -> Tensor:
    """numpy's ``rint``: to the nearest integer, halves to even (``round``); zero gradient."""
    return E.round(x)


def arctan2(y: Any, x: Any) -> Tensor:
    """numpy's ``arctan2(y, x)`` (``atan2``): the angle of the point (x, y)."""
    return E.atan2(y, x)


def mod(x: Any, y: Any) -> Tensor:
    """numpy's ``mod``: ``x mod y`` with the sign of ``y`` (``remainder``, Python's ``%``)."""
    return E.remainder(x, y)


def nansum(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The sum with NaNs counted as 0; their gradient is 0 (numpy's and PyTorch's ``nansum``).

    >>> import tapegrad as tg
    >>> tg.nansum(tg.tensor([1.0, float("nan"), 2.0])).item()
    3.0
    """
    x = as_tensor(x)
    return R.sum(E.where(E.isnan(x), 0.0, x), axis, keepdims)


def nanmean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The mean of the values that are not NaN (NaN where there are none), as numpy and PyTorch.

    >>> import tapegrad as tg
    >>> tg.nanmean(tg.tensor([1.0, float("nan"), 2.0])).item()
    1.5
    """
    x = as_tensor(x)
    count = R.sum(S.astype(E.logical_not(E.isnan(x)), x.dtype), axis, keepdims)
    none = E.equal(count, 0)  # all NaN: NaN, without 0/0's warning
    return E.where(none, float("nan"), nansum(x, axis, keepdims) / E.where(none, 1.0, count))


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
