"""Shape primitives and compositions: reshape, transpose, broadcast, concat, pad, ..."""

from __future__ import annotations

import builtins
import math
from typing import Any

from .._backend import np
from .._tape import apply, defprim
from .._tensor import Tensor, _wrap
from ._common import as_tensor, normalize_axis


def _as_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


# --- primitives ------------------------------------------------------------------------------
_reshape = defprim(
    "reshape",
    lambda x, shape, old: np.reshape(x, shape),
    lambda g, ans, x, shape, old: reshape(g, old),
)
_permute = defprim(
    "permute_dims",
    lambda x, axes: np.transpose(x, axes),
    lambda g, ans, x, axes: permute_dims(g, tuple(int(i) for i in np.argsort(axes))),
)
# the engine sums the gradient back to the input's shape, so the VJP is the identity
_broadcast_to = defprim(
    "broadcast_to", lambda x, shape: np.broadcast_to(x, shape), lambda g, ans, x, shape: g
)
_astype = defprim(
    "astype",
    lambda x, dtype: x.astype(dtype),
    lambda g, ans, x, dtype: g,  # the engine casts the gradient back to the input's dtype
)


def _concat_vjp(i: int) -> Any:
    def vjp(g: Tensor, ans: Any, *args: Any, axis: int, sizes: tuple[int, ...]) -> Tensor:
        start = builtins.sum(sizes[:i])
        idx = (slice(None),) * axis + (slice(start, start + sizes[i]),)
        return g[idx]

    return vjp


_CONCAT: dict[int, Any] = {}


def _concat_prim(n: int) -> Any:
    # one primitive per arity, so each input has its own VJP slot
    p = _CONCAT.get(n)
    if p is None:
        p = defprim(
            f"concat{n}" if n != 2 else "concat",
            lambda *xs, axis, sizes: np.concatenate(xs, axis=axis),
            tuple(_concat_vjp(i) for i in range(n)),
        )
        _CONCAT[n] = p
    return p


def _pad_fwd(x: Any, pad_width: Any, mode: str, value: float) -> Any:
    if mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=value)
    return np.pad(x, pad_width, mode=mode)


def _pad_vjp(g: Tensor, ans: Any, x: Any, pad_width: Any, mode: str, value: float) -> Tensor:
    if mode == "constant":
        idx = tuple(slice(b, g.shape[i] - a) for i, (b, a) in enumerate(pad_width))
        return g[idx]
    return apply(_pad_reflect_grad, g, pad_width=pad_width, mode=mode)


def _reflect_grad_fwd(g: Any, pad_width: Any, mode: str) -> Any:
    # the adjoint of reflect padding: scatter each padded position back to its source
    shape = tuple(n - b - a for n, (b, a) in zip(g.shape, pad_width))
    out = g
    for ax, (b, a) in enumerate(pad_width):
        n = shape[ax]
        idx = np.pad(np.arange(n), (b, a), mode=mode)
        res = np.zeros(out.shape[:ax] + (n,) + out.shape[ax + 1 :], dtype=g.dtype)
        np.add.at(res, (slice(None),) * ax + (idx,), out)
        out = res
    return out


def _reflect_grad_vjp(gg: Tensor, ans: Any, g: Any, pad_width: Any, mode: str) -> Tensor:
    return pad(gg, pad_width, mode=mode)


_pad = defprim("pad", _pad_fwd, _pad_vjp)
_pad_reflect_grad = defprim("pad_grad", _reflect_grad_fwd, _reflect_grad_vjp)

_flip = defprim(
    "flip", lambda x, axis: np.flip(x, axis), lambda g, ans, x, axis: flip(g, axis)
)
_roll = defprim(
    "roll",
    lambda x, shift, axis: np.roll(x, shift, axis),
    lambda g, ans, x, shift, axis: roll(g, tuple(-s for s in shift) if isinstance(shift, tuple) else -shift, axis),
)
_tril = defprim("tril", lambda x, k: np.tril(x, k), lambda g, ans, x, k: tril(g, k))
_triu = defprim("triu", lambda x, k: np.triu(x, k), lambda g, ans, x, k: triu(g, k))


# --- public functions ------------------------------------------------------------------------
def reshape(x: Any, *shape: Any) -> Tensor:
    """Reshape (one dimension may be -1).

    >>> import tapegrad as tg
    >>> tg.arange(6).reshape(2, 3).shape
    (2, 3)
    """
    x = as_tensor(x)
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    new = _as_shape(shape)
    if new == x.shape:
        return x
    n = x.size
    if new.count(-1) > 1:
        raise ValueError(f"reshape: at most one dimension can be -1, got {new}")
    known = math.prod(s for s in new if s != -1)
    if (-1 in new and (known == 0 or n % known)) or (-1 not in new and known != n):
        raise ValueError(
            f"reshape: cannot reshape a tensor of shape {x.shape} ({n} elements) into {new}"
            + ("" if -1 in new else f" ({known} elements); the sizes must multiply to {n}")
        )
    if -1 in new:
        new = tuple(n // known if s == -1 else s for s in new)
    return apply(_reshape, x, shape=new, old=x.shape)


def flatten(x: Any, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = normalize_axis(start_axis, x.ndim, "flatten")[0], normalize_axis(end_axis, x.ndim, "flatten")[0]
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s : e + 1]),) + x.shape[e + 1 :])


def squeeze(x: Any, axis: Any = None) -> Tensor:
    x = as_tensor(x)
    axes = (
        tuple(i for i, n in enumerate(x.shape) if n == 1)
        if axis is None
        else normalize_axis(axis, x.ndim, "squeeze")
    )
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has size {x.shape[a]} (shape {x.shape}), not 1")
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def expand_dims(x: Any, axis: Any) -> Tensor:
    x = as_tensor(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = x.ndim + len(axes)
    axes = normalize_axis(axes, nd, "expand_dims")
    it = iter(x.shape)
    return reshape(x, tuple(1 if i in axes else next(it) for i in range(nd)))


unsqueeze = expand_dims


def permute_dims(x: Any, axes: Any = None) -> Tensor:
    """Reorder the axes (reverse them when None)."""
    x = as_tensor(x)
    if axes is None:
        axes = tuple(range(x.ndim - 1, -1, -1))
    axes = tuple(int(a) % builtins.max(x.ndim, 1) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: {axes} is not a permutation of the {x.ndim} axes of {x.shape}")
    if axes == tuple(range(x.ndim)):
        return x
    return apply(_permute, x, axes=axes)


def transpose(x: Any, axes: Any = None) -> Tensor:
    """numpy's ``transpose``: reverses the axes, or permutes them by ``axes``."""
    return permute_dims(x, axes)


def swapaxes(x: Any, axis1: int, axis2: int) -> Tensor:
    x = as_tensor(x)
    (a,) = normalize_axis(axis1, x.ndim, "swapaxes")
    (b,) = normalize_axis(axis2, x.ndim, "swapaxes")
    p = list(range(x.ndim))
    p[a], p[b] = p[b], p[a]
    return permute_dims(x, p)


def moveaxis(x: Any, source: int, destination: int) -> Tensor:
    x = as_tensor(x)
    (s,) = normalize_axis(source, x.ndim, "moveaxis")
    (d,) = normalize_axis(destination, x.ndim, "moveaxis")
    p = [i for i in range(x.ndim) if i != s]
    p.insert(d, s)
    return permute_dims(x, p)


def broadcast_to(x: Any, shape: Any) -> Tensor:
    x = as_tensor(x)
    shape = _as_shape(shape)
    if x.shape == shape:
        return x
    try:
        np.broadcast_shapes(x.shape, shape)
    except ValueError:
        raise ValueError(
            f"broadcast_to: cannot broadcast shape {x.shape} to {shape}: each dimension must "
            "match or be 1 (aligned from the right)"
        ) from None
    return apply(_broadcast_to, x, shape=shape)


def astype(x: Any, dtype: Any) -> Tensor:
    """A copy converted to ``dtype``; float-to-float casts pass the gradient through."""
    from .._dtypes import as_dtype  # noqa: PLC0415

    x = as_tensor(x)
    d = as_dtype(dtype)
    if x.dtype == d:
        return x
    return apply(_astype, x, dtype=d)


def concat(xs: Any, axis: int = 0) -> Tensor:
    """Join tensors along an existing ``axis``."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("concat: needs at least one tensor")
    nd = xs[0].ndim
    (ax,) = normalize_axis(axis, builtins.max(nd, 1), "concat")
    for x in xs:
        if x.ndim != nd or any(a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if i != ax):
            raise ValueError(
                f"concat: shapes {[t.shape for t in xs]} differ outside axis {ax}; all must match "
                "except along the axis they are joined on"
            )
    dt = np.result_type(*[x.dtype for x in xs])
    xs = [x.astype(dt) for x in xs]
    if len(xs) == 1:
        return xs[0]
    return apply(_concat_prim(len(xs)), *xs, axis=ax, sizes=tuple(x.shape[ax] for x in xs))


concatenate = concat


def stack(xs: Any, axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new ``axis``."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("stack: needs at least one tensor")
    shapes = {x.shape for x in xs}
    if len(shapes) > 1:
        raise ValueError(f"stack: all tensors must have one shape, got {[x.shape for x in xs]}")
    return concat([expand_dims(x, axis) for x in xs], axis=axis)


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """numpy's split: ``n`` equal sections, or the indices to split at."""
    x = as_tensor(x)
    (ax,) = normalize_axis(axis, x.ndim, "split")
    n = x.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(
                f"split: axis {ax} of size {n} does not divide into {k} equal sections; "
                "pass the split indices instead, or use chunk()"
            )
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        bounds = [0, *[int(i) for i in indices_or_sections], n]
    pre = (slice(None),) * ax
    return [x[pre + (slice(a, b),)] for a, b in zip(bounds[:-1], bounds[1:])]


def chunk(x: Any, chunks: int, axis: int = 0) -> list[Tensor]:
    """PyTorch's chunk: ``chunks`` pieces of ceil(n / chunks) (the last may be smaller)."""
    x = as_tensor(x)
    (ax,) = normalize_axis(axis, x.ndim, "chunk")
    n = x.shape[ax]
    step = -(-n // chunks)
    return split(x, list(range(step, n, step)), axis=ax)


def pad(x: Any, pad_width: Any, mode: str = "constant", value: float = 0.0) -> Tensor:
    """numpy-style padding: ``pad_width`` is ((before, after),) per axis, or one pair / int."""
    x = as_tensor(x)
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64).reshape(-1, 2) if np.ndim(pad_width) else np.asarray([[pad_width, pad_width]]), (x.ndim, 2))
    pw = tuple((int(a), int(b)) for a, b in pw)
    if builtins.any(a < 0 or b < 0 for a, b in pw):
        raise ValueError(f"pad: negative pad widths {pw}")
    if mode not in ("constant", "reflect", "edge", "symmetric", "wrap"):
        raise ValueError(f"pad: mode {mode!r} is not one of 'constant', 'reflect', 'edge', 'symmetric', 'wrap'")
    if mode == "reflect":
        for (a, b), n in zip(pw, x.shape):
            if a >= n or b >= n:
                raise ValueError(f"pad: reflect padding {pw} must be smaller than the sizes {x.shape}")
    return apply(_pad, x, pad_width=pw, mode=mode, value=value)


def tile(x: Any, reps: Any) -> Tensor:
    """numpy's tile, composed from broadcast and reshape."""
    x = as_tensor(x)
    reps = _as_shape(reps)
    nd = builtins.max(x.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    inter = []
    for r, n in zip(reps, x.shape):
        inter += [r, n]
    y = broadcast_to(reshape(x, tuple(v for n in x.shape for v in (1, n))), tuple(inter))
    return reshape(y, tuple(r * n for r, n in zip(reps, x.shape)))


def repeat(x: Any, repeats: int, axis: int | None = None) -> Tensor:
    """numpy's repeat with an int count: each element repeated along ``axis``."""
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    (ax,) = normalize_axis(axis, x.ndim, "repeat")
    if not isinstance(repeats, (int, np.integer)):
        idx = np.repeat(np.arange(x.shape[ax]), np.asarray(repeats))
        return take(x, idx, axis=ax)
    y = expand_dims(x, ax + 1)
    y = broadcast_to(y, x.shape[: ax + 1] + (int(repeats),) + x.shape[ax + 1 :])
    return reshape(y, x.shape[:ax] + (x.shape[ax] * int(repeats),) + x.shape[ax + 1 :])


def roll(x: Any, shift: Any, axis: Any = None) -> Tensor:
    x = as_tensor(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    if isinstance(shift, list):
        shift = tuple(shift)
    if isinstance(axis, list):
        axis = tuple(axis)
    return apply(_roll, x, shift=shift, axis=axis)


def flip(x: Any, axis: Any = None) -> Tensor:
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "flip")
    return apply(_flip, x, axis=axes)


def tril(x: Any, k: int = 0) -> Tensor:
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"tril: needs at least 2 dimensions, got shape {x.shape}")
    return apply(_tril, x, k=k)


def triu(x: Any, k: int = 0) -> Tensor:
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"triu: needs at least 2 dimensions, got shape {x.shape}")
    return apply(_triu, x, k=k)


# --- indexing --------------------------------------------------------------------------------
def _norm_index(idx: Any) -> Any:
    """Tensors inside an index become arrays; lists become integer/bool arrays."""
    if isinstance(idx, tuple):
        return tuple(_norm_index(i) for i in idx)
    if isinstance(idx, Tensor):
        return idx._data
    if isinstance(idx, list):
        return np.asarray(idx)
    return idx


def _is_advanced(idx: Any) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return builtins.any(hasattr(i, "dtype") and getattr(i, "ndim", 0) >= 0 and not isinstance(i, (int, np.integer)) for i in items)


def _scatter_fwd(g: Any, idx: Any, shape: tuple[int, ...], advanced: bool) -> Any:
    z = np.zeros(shape, dtype=g.dtype)
    if advanced:
        np.add.at(z, idx, g)  # duplicate indices accumulate
    else:
        z[idx] = g
    return z


_getitem = defprim(
    "getitem",
    lambda x, idx, advanced: x[idx],
    lambda g, ans, x, idx, advanced: apply(
        _index_grad, g, idx=idx, shape=x.shape, advanced=advanced
    ),
    (0,),
)
_index_grad = defprim(
    "index_grad",
    lambda g, idx, shape, advanced: _scatter_fwd(g, idx, shape, advanced),
    lambda gg, ans, g, idx, shape, advanced: gg[idx],
)


def getitem(x: Tensor, idx: Any) -> Tensor:
    """``x[idx]``: ints, slices (any step), None, Ellipsis, integer arrays and bool masks."""
    idx = _norm_index(idx)
    try:
        data = x._data[idx]
    except IndexError as e:
        raise IndexError(f"index: {e} (tensor shape {x.shape}, index {_show(idx)})") from None
    adv = _is_advanced(idx)
    if isinstance(data, np.generic):
        data = np.asarray(data)
    out = _wrap(data)
    from .. import _tape  # noqa: PLC0415

    if _tape._WITH_TAPES or x._tapes:
        _tape._record(_getitem, (x,), {"idx": idx, "advanced": adv}, out)
    return out


def _show(idx: Any) -> str:
    items = idx if isinstance(idx, tuple) else (idx,)
    return "[" + ", ".join(
        f"array{tuple(i.shape)}" if hasattr(i, "shape") and getattr(i, "ndim", 0) else repr(i) for i in items
    ) + "]"


def take(x: Any, indices: Any, axis: int | None = None) -> Tensor:
    """Elements at integer ``indices`` along ``axis`` (the flattened tensor when None)."""
    x = as_tensor(x)
    ind = _norm_index(indices)
    if axis is None:
        return getitem(reshape(x, (-1,)), ind)
    (ax,) = normalize_axis(axis, x.ndim, "take")
    return getitem(x, (slice(None),) * ax + (np.asarray(ind),))


def take_along_axis(x: Any, indices: Any, axis: int) -> Tensor:
    """numpy's take_along_axis (PyTorch's gather)."""
    x = as_tensor(x)
    ind = np.asarray(_norm_index(indices))
    (ax,) = normalize_axis(axis, x.ndim, "take_along_axis")
    if ind.ndim != x.ndim:
        raise ValueError(
            f"take_along_axis: indices have {ind.ndim} dimensions, x has {x.ndim}; they must match"
        )
    shape = np.broadcast_shapes(tuple(1 if i == ax else n for i, n in enumerate(x.shape)),
                                tuple(1 if i == ax else n for i, n in enumerate(ind.shape)))
    ind = np.broadcast_to(ind, tuple(ind.shape[i] if i == ax else shape[i] for i in range(x.ndim)))
    grids = np.ogrid[tuple(slice(n) for n in ind.shape)]
    idx = tuple(ind if i == ax else grids[i] for i in range(x.ndim))
    return getitem(x, idx)


def scatter_add(x: Any, axis: int, index: Any, src: Any) -> Tensor:
    """PyTorch's scatter_add: ``out[..., index[i], ...] += src[i]`` along ``axis``; duplicates add."""
    x = as_tensor(x)
    src = as_tensor(src)
    ind = np.asarray(_norm_index(index))
    (ax,) = normalize_axis(axis, x.ndim, "scatter_add")
    grids = np.ogrid[tuple(slice(n) for n in ind.shape)]
    idx = tuple(ind if i == ax else grids[i] for i in range(x.ndim))
    return x + apply(_index_grad, src[tuple(slice(n) for n in ind.shape)], idx=idx, shape=x.shape, advanced=True)


def index_add(x: Any, axis: int, index: Any, source: Any) -> Tensor:
    """PyTorch's index_add: ``out[..., index[i], ...] += source[..., i, ...]``; duplicates add."""
    x = as_tensor(x)
    source = as_tensor(source)
    ind = np.asarray(_norm_index(index))
    (ax,) = normalize_axis(axis, x.ndim, "index_add")
    idx = (slice(None),) * ax + (ind,)
    return x + apply(_index_grad, source, idx=idx, shape=x.shape, advanced=True)


def one_hot(indices: Any, num_classes: int, dtype: Any = None) -> Tensor:
    """Integer class indices to one-hot rows (float32 unless ``dtype``); no gradient."""
    from .._dtypes import as_dtype  # noqa: PLC0415

    ind = as_tensor(indices)._data
    if ind.dtype.kind not in "iu":
        raise TypeError(f"one_hot: indices must be integers, got {ind.dtype}")
    if ind.size and (ind.min() < 0 or ind.max() >= num_classes):
        raise IndexError(
            f"one_hot: indices must lie in [0, {num_classes}), got min {ind.min()} max {ind.max()}"
        )
    return _wrap((ind[..., None] == np.arange(num_classes)).astype(as_dtype(dtype)))
