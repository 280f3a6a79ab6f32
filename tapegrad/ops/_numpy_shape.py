"""numpy's shape functions that tapegrad lacked: stacking and splitting, rotating, differences,
``select`` (numpy's and PyTorch's), and the concatenating index objects ``r_`` / ``c_``."""

from __future__ import annotations

from typing import Any

from .._backend import np
from .._tensor import Tensor, _wrap
from . import _binary as BI
from . import _shape as S
from ._common import as_tensor, check_axis


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
        out = BI.where(c, v, out)
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


def row_stack(xs: Any) -> Tensor:
    """numpy's older name of ``vstack``."""
    return vstack(xs)


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
