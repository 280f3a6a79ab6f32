"""Indexing primitives and compositions: ``x[idx]`` and its adjoint (scatter-add), take,
take_along_axis, scatter_add, index_add, one_hot."""

from __future__ import annotations

import builtins
from typing import Any

from .._autodiff import Primitive, apply, defprim
from .._backend import np
from .._dtypes import as_dtype
from .._kernels.registry import dispatch
from .._tensor import Tensor, _wrap
from ._common import as_tensor, check_axis, operands
from ._shape import reshape


def _norm_index(idx: Any) -> Any:
    """Tensors inside an index become arrays; lists become integer/bool arrays."""
    if isinstance(idx, tuple):
        return tuple(_norm_index(i) for i in idx)
    if isinstance(idx, Tensor):
        return idx._data
    if isinstance(idx, list):
        return np.asarray([i._data if isinstance(i, Tensor) else i for i in idx])
    return idx


def _is_advanced(idx: Any) -> bool:
    """Whether ``idx`` holds an integer or bool array (so positions may repeat)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    return builtins.any(hasattr(i, "dtype") and not isinstance(i, (int, np.integer)) for i in items)


def _scatter_fwd(g: Any, idx: Any, shape: tuple[int, ...], advanced: bool) -> Any:
    z = np.zeros_like(g, shape=shape)
    if advanced:
        np.add.at(z, idx, g)  # duplicate indices accumulate
    else:
        z[idx] = g
    return z


def _index_grad_fwd(g: Any, idx: Any, shape: tuple[int, ...], advanced: bool) -> Any:
    if advanced:  # an index array on one axis: one compiled pass (_kernels/gather.py)
        return dispatch("index_grad_rows", _scatter_fwd, g, idx, shape, advanced)
    return _scatter_fwd(g, idx, shape, advanced)


def _getitem_np(x: Any, idx: Any, advanced: bool, shape: tuple[int, ...]) -> Any:
    return np.asarray(x[idx])


def _getitem_fwd(x: Any, idx: Any, advanced: bool, shape: tuple[int, ...]) -> Any:
    if advanced:
        return dispatch("getitem_rows", _getitem_np, x, idx, advanced, shape)
    return np.asarray(x[idx])


# scatter-add into zeros of ``shape``: getitem's adjoint, also scatter_add / index_add
_index_grad: Primitive = defprim(
    "index_grad",
    _index_grad_fwd,
    lambda xp, gg, ans, g, idx, shape, advanced: xp.apply(
        _getitem, gg, idx=idx, advanced=advanced, shape=gg.shape
    ),
)
# the VJP needs only the input's shape, so indexing a large tensor keeps nothing alive
_getitem: Primitive = defprim(
    "getitem",
    _getitem_fwd,
    lambda xp, g, ans, x, idx, advanced, shape: xp.apply(
        _index_grad, g, idx=idx, shape=shape, advanced=advanced
    ),
)


def _getitem_accumulate(total: Any, g: Any, idx: Any, advanced: bool, shape: tuple[int, ...]) -> bool:
    """``total += index_grad(g)`` in place for a basic index (positions never repeat): the
    slices of a split add into one gradient instead of each making zeros of the whole."""
    if advanced or type(total) is not np.ndarray:
        return False
    total[idx] += g
    return True


_getitem.accumulate = _getitem_accumulate


_LAYOUT_MESSAGE = (
    "index: x[{idx}] (tensor shape {shape}) mixes an integer and an index array separated by a "
    "slice, where numpy and PyTorch place the array's axes differently (numpy counts the integer "
    "as an index array, so the axes go first; PyTorch selects with the integer first and keeps "
    "them in place). Write the integer as its own step, x[i][...], for PyTorch's layout, or as "
    "an index array, x[[i], ...], for numpy's"
)


def _layouts_differ(idx: tuple[Any, ...], ndim: int) -> bool:
    """Whether numpy and PyTorch place the advanced axes of ``idx`` differently: numpy counts
    integers as index arrays (separated arrays go first), PyTorch selects with them first (the
    same place when nothing before PyTorch's place gives an axis, as an Ellipsis over none)."""
    kinds = []
    for i in idx:
        if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            kinds.append("i")
        elif hasattr(i, "dtype") and getattr(i, "ndim", 0) > 0:
            kinds.append("a")
        else:
            kinds.append("s")  # slice, None, Ellipsis
    if "a" not in kinds or "i" not in kinds:
        return False

    def adjacent(ks: list[str], marks: str) -> bool:
        where = [k for k, c in enumerate(ks) if c in marks]
        return where[-1] - where[0] + 1 == len(where)

    # numpy: separated index arrays (ints included) go first; PyTorch: adjacent arrays (ints
    # gone) stay where the first one is, which is first too when nothing precedes it
    torch_kinds = [c for c in kinds if c != "i"]
    if adjacent(kinds, "ia") or not adjacent(torch_kinds, "a"):
        return False
    rest = [i for i, c in zip(idx, kinds, strict=True) if c != "i"]
    before = rest[: torch_kinds.index("a")]
    used = builtins.sum(
        getattr(i, "ndim", 1) if getattr(i, "dtype", None) == np.bool_ else 1
        for i in idx
        if i is not None and i is not Ellipsis
    )
    # axes in front of PyTorch's place: a slice or None gives one, an Ellipsis what it covers
    return builtins.sum(ndim - used if i is Ellipsis else 1 for i in before) > 0


def getitem(x: Tensor, idx: Any) -> Tensor:
    """``x[idx]``: ints, slices (any step), None, Ellipsis, integer arrays and bool masks
    (Tensors or numpy arrays). Gathered positions that repeat accumulate their gradients.

    >>> import tapegrad as tg
    >>> x = tg.arange(12).reshape(3, 4)
    >>> x[1:, ::2].tolist(), x[[0, 2], 1].tolist()
    ([[4, 6], [8, 10]], [1, 9])
    """
    idx = _norm_index(idx)
    if type(idx) is tuple and len(idx) > 2 and _layouts_differ(idx, x.ndim):
        raise IndexError(_LAYOUT_MESSAGE.format(idx=_show(idx), shape=x.shape))
    try:
        return apply(_getitem, x, idx=idx, advanced=_is_advanced(idx), shape=x.shape)
    except IndexError as e:
        items = idx if isinstance(idx, tuple) else (idx,)
        if builtins.any(getattr(i, "dtype", np.dtype(int)).kind == "f" for i in items):
            raise IndexError(
                f"index: a float tensor cannot index a tensor (shape {x.shape}, index "
                f"{_show(idx)}). If this is g[w] with g = tape.gradient(loss, w): a single "
                "tensor as sources gives its gradient itself (results are shaped like sources), "
                "so use g; pass a list [w] or a module, or no sources, for a mapping to index"
            ) from None
        raise IndexError(
            f"index: {e.__cause__ or e} (tensor shape {x.shape}, index {_show(idx)}); valid "
            "integer indices along an axis of size n are -n..n-1"
        ) from None


def _show(idx: Any) -> str:
    items = idx if isinstance(idx, tuple) else (idx,)
    shown = (f"array{tuple(np.shape(i))}" if np.ndim(i) else repr(i) for i in items)
    return "[" + ", ".join(shown) + "]"


def _int_index(indices: Any, op: str) -> Any:
    ind = np.asarray(_norm_index(indices))
    if ind.dtype.kind not in "iu":
        if ind.size == 0:
            return ind.astype(np.int64)
        raise TypeError(f"{op}: indices must be integers, got dtype {ind.dtype}")
    return ind


def _check_bounds(ind: Any, n: int, op: str, axis: int, negative: bool = True) -> None:
    if ind.size == 0:
        return
    lo, hi = int(ind.min()), int(ind.max())
    if hi >= n or lo < (-n if negative else 0):
        bad = hi if hi >= n else lo
        valid = f"{-n}..{n - 1}" if negative else f"0..{n - 1}"
        raise IndexError(
            f"{op}: index {bad} is out of bounds for axis {axis} of size {n} (valid: {valid})"
        )


def take(x: Any, indices: Any, axis: int | None = None) -> Tensor:
    """Elements at integer ``indices`` along ``axis`` (of the flattened tensor when None).

    >>> import tapegrad as tg
    >>> tg.take(tg.tensor([[1, 2], [3, 4]]), [1, 0], axis=1).tolist()
    [[2, 1], [4, 3]]
    """
    x = as_tensor(x)
    ind = _int_index(indices, "take")
    if axis is None:
        x, ax = reshape(x, (-1,)), 0
    else:
        ax = check_axis(axis, x.ndim, "take")
    _check_bounds(ind, x.shape[ax], "take", ax)
    return getitem(x, (slice(None),) * ax + (ind,))


def take_along_axis(x: Any, indices: Any, axis: int) -> Tensor:
    """numpy's take_along_axis (PyTorch's gather): ``out[i][j] = x[i][indices[i][j]]`` for
    ``axis=1``; ``indices`` has ``x``'s number of dimensions and broadcasts elsewhere.

    >>> import tapegrad as tg
    >>> tg.take_along_axis(tg.tensor([[1, 2], [3, 4]]), tg.tensor([[1], [0]]), axis=1).tolist()
    [[2], [3]]
    """
    x = as_tensor(x)
    ind = _int_index(indices, "take_along_axis")
    ax = check_axis(axis, x.ndim, "take_along_axis")
    if ind.ndim != x.ndim:
        raise ValueError(
            f"take_along_axis: indices have {ind.ndim} dimensions (shape {ind.shape}), x has "
            f"{x.ndim} (shape {x.shape}); they must match (add axes with expand_dims)"
        )
    others = [(1 if i == ax else n) for i, n in enumerate(x.shape)]
    try:
        shape = np.broadcast_shapes(
            tuple(others), tuple(1 if i == ax else n for i, n in enumerate(ind.shape))
        )
    except ValueError:
        raise ValueError(
            f"take_along_axis: indices of shape {ind.shape} do not broadcast against x of shape "
            f"{x.shape} outside axis {ax}"
        ) from None
    _check_bounds(ind, x.shape[ax], "take_along_axis", ax)
    ind = np.broadcast_to(ind, tuple(ind.shape[i] if i == ax else shape[i] for i in range(x.ndim)))
    return getitem(x, _line_index(ind, ax, x.shape) or _grid_index(ind, ax))


def _line_index(ind: Any, ax: int, shape: tuple[int, ...]) -> tuple[Any, ...] | None:
    """``(:, ..., line)``, the same selection as ``_grid_index(ind, ax)`` with one index per
    position along ``ax``, when ``ind`` (of ``shape`` outside ``ax``) repeats one line over
    the other axes (an index expanded from a column, as message passing's ``scatter_add``
    writes it): a row gather or scatter then serves (``_kernels/gather.py``); None otherwise."""
    if ind.ndim < 2 or ind.size == 0 or builtins.any(
        n != m for i, (n, m) in enumerate(zip(ind.shape, shape, strict=True)) if i != ax
    ):
        return None
    line = ind[tuple(slice(None) if i == ax else 0 for i in range(ind.ndim))]
    # an expanded index has zero strides off the axis; otherwise compare the values (one pass,
    # where the per-element scatter costs far more)
    wide = builtins.all(ind.strides[i] == 0 or ind.shape[i] == 1
                        for i in range(ind.ndim) if i != ax)
    if not wide and not (ind == line.reshape(line.shape + (1,) * (ind.ndim - ax - 1))).all():
        return None
    return (slice(None),) * ax + (line,)


def _grid_index(ind: Any, ax: int) -> tuple[Any, ...]:
    """An advanced index that puts ``ind`` on axis ``ax`` and ranges on the others."""
    grids = np.ogrid[tuple(slice(n) for n in ind.shape)]
    return tuple(ind if i == ax else grids[i] for i in range(ind.ndim))


def scatter_add(x: Any, axis: int, index: Any, src: Any) -> Tensor:
    """PyTorch's scatter_add: ``out[index[i][j]][j] += src[i][j]`` for ``axis=0``; repeated
    indices accumulate. ``index`` has ``x``'s number of dimensions and ``src`` is at least
    its size.

    >>> import tapegrad as tg
    >>> tg.scatter_add(tg.zeros(3), 0, tg.tensor([0, 2, 0]), tg.tensor([1.0, 2.0, 3.0])).tolist()
    [4.0, 0.0, 2.0]
    """
    x = as_tensor(x)
    src = as_tensor(src)
    ind = _int_index(index, "scatter_add")
    ax = check_axis(axis, x.ndim, "scatter_add")
    if ind.ndim != x.ndim or src.ndim != x.ndim:
        raise ValueError(
            f"scatter_add: index (shape {ind.shape}) and src (shape {src.shape}) must have as "
            f"many dimensions as x (shape {x.shape})"
        )
    for i, n in enumerate(ind.shape):
        if n > src.shape[i] or (i != ax and n > x.shape[i]):
            raise ValueError(
                f"scatter_add: index of shape {ind.shape} is larger than src {src.shape} or, "
                f"outside axis {ax}, than x {x.shape}"
            )
    _check_bounds(ind, x.shape[ax], "scatter_add", ax, negative=False)
    part = src[tuple(slice(n) for n in ind.shape)]
    x, part = operands(x, part)
    idx = _line_index(ind, ax, x.shape) or _grid_index(ind, ax)
    return x + apply(_index_grad, part, idx=idx, shape=x.shape, advanced=True)


def index_add(x: Any, axis: int, index: Any, source: Any, alpha: float = 1.0) -> Tensor:
    """PyTorch's index_add: ``out[..., index[i], ...] += alpha * source[..., i, ...]`` along
    ``axis``; repeated indices accumulate.

    >>> import tapegrad as tg
    >>> tg.index_add(tg.zeros(3), 0, tg.tensor([2, 2]), tg.tensor([1.0, 5.0])).tolist()
    [0.0, 0.0, 6.0]
    """
    x = as_tensor(x)
    source = as_tensor(source)
    ind = _int_index(index, "index_add")
    ax = check_axis(axis, x.ndim, "index_add")
    want = x.shape[:ax] + (ind.size,) + x.shape[ax + 1 :]
    if ind.ndim != 1 or source.shape != want:
        raise ValueError(
            f"index_add: index must be 1-D (got shape {ind.shape}) and source must have shape "
            f"{want} (x's shape with axis {ax} the length of index), got {source.shape}"
        )
    _check_bounds(ind, x.shape[ax], "index_add", ax, negative=False)
    if alpha != 1.0:
        source = source * alpha
    x, source = operands(x, source)
    idx = (slice(None),) * ax + (ind,)
    return x + apply(_index_grad, source, idx=idx, shape=x.shape, advanced=True)


def one_hot(indices: Any, num_classes: int, dtype: Any = None) -> Tensor:
    """Integer class indices to one-hot rows along a new last axis (default float unless
    ``dtype``); no gradient.

    >>> import tapegrad as tg
    >>> tg.one_hot(tg.tensor([2, 0]), 3).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """

    ind = _int_index(indices, "one_hot")
    _check_bounds(ind, num_classes, "one_hot", ind.ndim, negative=False)
    return _wrap((ind[..., None] == np.arange(num_classes)).astype(as_dtype(dtype)))
