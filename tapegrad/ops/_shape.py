"""Shape primitives and compositions: reshape, transpose, broadcast, concat, pad, ..."""

from __future__ import annotations

import builtins
import itertools
import math
from typing import Any

from .._autodiff import Primitive, apply, defprim
from .._backend import np
from .._kernels.registry import dispatch
from .._tensor import Tensor, _wrap
from ._common import ArgumentError, as_tensor, check_axis, normalize_axis, operands, result_dtype


def _as_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


# --- primitives ------------------------------------------------------------------------------
_reshape = defprim(
    "reshape",
    lambda x, shape, old: np.reshape(x, shape),
    lambda xp, g, ans, x, shape, old: xp.reshape(g, old),
)
_permute = defprim(
    "permute_dims",
    np.transpose,
    lambda xp, g, ans, x, axes: xp.permute_dims(g, tuple(int(i) for i in np.argsort(axes))),
)
# the engine sums the gradient back to the input's shape, so the VJP is the identity
_broadcast_to = defprim(
    "broadcast_to", np.broadcast_to, lambda xp, g, ans, x, shape: g
)
_astype = defprim(
    "astype",
    lambda x, dtype: x.astype(dtype),
    lambda xp, g, ans, x, dtype: g,  # the engine casts the gradient back to the input's dtype
)


def _concat_vjp(i: int) -> Any:
    def vjp(xp: Any, g: Any, ans: Any, *args: Any, axis: int, sizes: tuple[int, ...]) -> Any:
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


def _pad_fwd(x: Any, pad_width: Any, mode: Any, value: float) -> Any:
    return dispatch("pad", _pad_np, x, pad_width, mode, value)  # _kernels/pad.py


def _pad_np(x: Any, pad_width: Any, mode: Any, value: float) -> Any:
    if mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=value)
    return np.pad(x, pad_width, mode=mode)


def _pad_vjp(xp: Any, g: Any, ans: Any, x: Any, *, pad_width: Any, mode: str, value: float) -> Any:
    if mode == "constant":
        idx = tuple(slice(b, g.shape[i] - a) for i, (b, a) in enumerate(pad_width))
        return g[idx]
    return xp.apply(_pad_reflect_grad, g, pad_width=pad_width, mode=mode)


def _reflect_grad_fwd(g: Any, pad_width: Any, mode: Any) -> Any:
    return dispatch("pad_grad", _reflect_grad_np, g, pad_width, mode)


def _reflect_grad_np(g: Any, pad_width: Any, mode: Any) -> Any:
    # the adjoint of reflect padding: scatter each padded position back to its source
    shape = tuple(n - b - a for n, (b, a) in zip(g.shape, pad_width, strict=True))
    out = g
    for ax, (b, a) in enumerate(pad_width):
        n = shape[ax]
        idx = np.pad(np.arange(n), (b, a), mode=mode)
        res = np.zeros_like(g, shape=out.shape[:ax] + (n,) + out.shape[ax + 1 :])
        where: Any = (slice(None),) * ax + (idx,)
        np.add.at(res, where, out)
        out = res
    return out


def _reflect_grad_vjp(xp: Any, gg: Any, ans: Any, g: Any, pad_width: Any, mode: str) -> Any:
    return xp.apply(_pad, gg, pad_width=pad_width, mode=mode, value=0.0)


_pad: Primitive = defprim("pad", _pad_fwd, _pad_vjp)
_pad_reflect_grad: Primitive = defprim("pad_grad", _reflect_grad_fwd, _reflect_grad_vjp)

_flip: Primitive = defprim("flip", np.flip, lambda xp, g, ans, x, axis: xp.apply(_flip, g, axis=axis))
_roll: Primitive = defprim(
    "roll",
    np.roll,
    lambda xp, g, ans, x, shift, axis: xp.apply(
        _roll, g, shift=tuple(-s for s in shift) if isinstance(shift, tuple) else -shift, axis=axis
    ),
)
_tril: Primitive = defprim("tril", np.tril, lambda xp, g, ans, x, k: xp.apply(_tril, g, k=k))
_triu: Primitive = defprim("triu", np.triu, lambda xp, g, ans, x, k: xp.apply(_triu, g, k=k))


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
    """Merge the axes ``start_axis..end_axis`` (inclusive) into one; a 0-d tensor becomes 1-D.

    >>> import tapegrad as tg
    >>> tg.flatten(tg.zeros((2, 3, 4)), 1).shape
    (2, 12)
    """
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = check_axis(start_axis, x.ndim, "flatten"), check_axis(end_axis, x.ndim, "flatten")
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s : e + 1]),) + x.shape[e + 1 :])


def squeeze(x: Any, axis: Any = None) -> Tensor:
    """Remove size-1 axes (all of them, or those in ``axis``, which must have size 1)."""
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
    """Insert size-1 axes at ``axis`` (an int or a tuple, positions in the result).

    >>> import tapegrad as tg
    >>> tg.expand_dims(tg.zeros((2, 3)), (0, 2)).shape
    (1, 2, 1, 3)
    """
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
    given = tuple(axes)
    axes = tuple(check_axis(int(a), x.ndim, "permute_dims") for a in given)
    if sorted(axes) != list(range(x.ndim)):
        raise ArgumentError(
            f"permute_dims: {given} is not a permutation of the {x.ndim} axes of a tensor of "
            f"shape {x.shape}; name each axis once, e.g. {tuple(range(x.ndim))[::-1]}"
        )
    if axes == tuple(range(x.ndim)):
        return x
    return apply(_permute, x, axes=axes)


_TRANSPOSE_MESSAGE = (
    "transpose: transpose{args} on a tensor of shape {shape} is ambiguous: PyTorch's "
    "transpose(dim0, dim1) swaps two axes, numpy's transpose(axes) permutes all of them; write "
    "transpose(x, d0, d1) or swapaxes(x, d0, d1) to swap two, permute_dims(x, ({perm})) to "
    "permute all"
)


def transpose(x: Any, *args: Any, axes: Any = None, dim0: Any = None, dim1: Any = None) -> Tensor:
    """PyTorch's ``transpose(x, dim0, dim1)`` (swap two axes, any number of dimensions), or
    numpy's ``transpose(x, axes)`` given a tuple, no axes (reverse them), or one int per axis
    of a tensor with other than two dimensions; any other call raises. ``x.transpose`` is the
    same.

    >>> import tapegrad as tg
    >>> x = tg.arange(6).reshape(2, 3)
    >>> x.transpose(0, 1).shape, x.transpose(-2, -1).shape, tg.transpose(x, (1, 0)).shape
    ((3, 2), (3, 2), (3, 2))
    """
    x = as_tensor(x)
    args += tuple(d for d in (dim0, dim1) if d is not None)
    if axes is not None:
        args = (axes,) + args
    if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
        return permute_dims(x, None if args[0] is None else tuple(args[0]))
    ints = builtins.all(isinstance(a, (int, np.integer)) for a in args)
    if ints and len(args) == 2:
        return swapaxes(x, args[0], args[1])
    if ints and (len(args) == 0 or (len(args) == x.ndim and x.ndim != 2)):
        return permute_dims(x, args or None)
    perm = ", ".join(str(i) for i in range(x.ndim - 1, -1, -1))
    raise TypeError(_TRANSPOSE_MESSAGE.format(args=args, shape=x.shape, perm=perm))


def swapaxes(x: Any, axis1: int, axis2: int) -> Tensor:
    """Exchange two axes."""
    x = as_tensor(x)
    (a,) = normalize_axis(axis1, x.ndim, "swapaxes")
    (b,) = normalize_axis(axis2, x.ndim, "swapaxes")
    p = list(range(x.ndim))
    p[a], p[b] = p[b], p[a]
    return permute_dims(x, p)


def moveaxis(x: Any, source: int, destination: int) -> Tensor:
    """Move axis ``source`` to position ``destination``, keeping the others in order."""
    x = as_tensor(x)
    (s,) = normalize_axis(source, x.ndim, "moveaxis")
    (d,) = normalize_axis(destination, x.ndim, "moveaxis")
    p = [i for i in range(x.ndim) if i != s]
    p.insert(d, s)
    return permute_dims(x, p)


def broadcast_to(x: Any, shape: Any) -> Tensor:
    """``x`` repeated along size-1 and new leading axes to ``shape`` (a view; the gradient
    sums back)."""
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
        if x.ndim != nd or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape, strict=True)) if i != ax
        ):
            raise ValueError(
                f"concat: shapes {[t.shape for t in xs]} differ outside axis {ax}; all must match "
                "except along the axis they are joined on"
            )
    dt = result_dtype(*[x.dtype for x in xs])
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


def split(x: Any, indices_or_sections: Any, *args: Any, axis: Any = None, dim: Any = None) -> list[Tensor]:
    """numpy's split with ``axis=``: ``n`` equal sections, or the indices to split at.
    PyTorch's with ``dim=``: pieces of size ``n``, or of the listed sizes. A call that names
    neither (``split(x, 2)``, ``split(x, 2, 1)``) raises where the two meanings differ.

    >>> import tapegrad as tg
    >>> x = tg.arange(6)
    >>> [p.tolist() for p in tg.split(x, 3, axis=0)], [p.tolist() for p in tg.split(x, 4, dim=0)]
    ([[0, 1], [2, 3], [4, 5]], [[0, 1, 2, 3], [4, 5]])
    """
    if len(args) > 1 or (args and (axis is not None or dim is not None)):
        raise TypeError("split: give the axis once (positionally, as axis= or as dim=)")
    x = as_tensor(x)
    k = indices_or_sections
    if dim is not None:  # PyTorch: sizes
        (ax,) = normalize_axis(dim, x.ndim, "split")
        n = x.shape[ax]
        sizes = [int(k)] * -(-n // int(k)) if isinstance(k, (int, np.integer)) else [int(s) for s in k]
        if isinstance(k, (int, np.integer)):
            sizes[-1] = n - int(k) * (len(sizes) - 1)
        elif builtins.sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to axis {ax}'s size {n}")
        cuts = list(itertools.accumulate(sizes))[:-1]
        return split(x, cuts, axis=ax)
    explicit = axis is not None
    (ax,) = normalize_axis(axis if explicit else (args[0] if args else 0), x.ndim, "split")
    n = x.shape[ax]
    if not explicit and not (isinstance(k, (int, np.integer)) and int(k) * int(k) == n):
        what = "sections" if isinstance(k, (int, np.integer)) else "split indices"
        torch = "pieces of that size" if what == "sections" else "piece sizes"
        raise ValueError(
            f"split: split(x, {k!r}) on an axis of size {n} means {what} in numpy and {torch} "
            f"in PyTorch; say which: split(x, {k!r}, axis={ax}) for numpy's, split(x, {k!r}, "
            f"dim={ax}) for PyTorch's (or chunk)"
        )
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
    return [x[pre + (slice(a, b),)] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def chunk(x: Any, chunks: int, axis: int = 0) -> list[Tensor]:
    """PyTorch's chunk: ``chunks`` pieces of ceil(n / chunks) (the last may be smaller)."""
    x = as_tensor(x)
    (ax,) = normalize_axis(axis, x.ndim, "chunk")
    n = x.shape[ax]
    step = -(-n // chunks)
    return split(x, list(range(step, n, step)), axis=ax)


_PAD_MODES = ("constant", "reflect", "edge", "symmetric", "wrap")


def pad(x: Any, pad_width: Any, mode: str = "constant", value: float = 0.0) -> Tensor:
    """numpy-style padding. ``pad_width``: an int (every side), a ``(before, after)`` pair
    (every axis) or one pair per axis. ``mode``: 'constant' (with ``value``), 'reflect'
    (mirror without repeating the edge), 'edge', 'symmetric' or 'wrap'.

    >>> import tapegrad as tg
    >>> tg.pad(tg.tensor([1, 2, 3]), (2, 1), mode="reflect").tolist()
    [3, 2, 1, 2, 3, 2]
    """
    x = as_tensor(x)
    arr = np.asarray(pad_width)
    if arr.dtype.kind not in "iu" or arr.shape not in ((), (1,), (2,), (1, 2), (x.ndim, 2)):
        raise ValueError(
            f"pad: pad_width must be an int, a (before, after) pair or one pair per axis "
            f"({x.ndim} pairs for shape {x.shape}), got {pad_width!r}"
        )
    pairs = arr if arr.ndim == 2 and len(arr) == x.ndim else arr.reshape(1, -1)
    pw = tuple((int(a), int(b)) for a, b in np.broadcast_to(pairs, (x.ndim, 2)))
    if builtins.any(a < 0 or b < 0 for a, b in pw):
        raise ValueError(f"pad: pad widths must be >= 0, got {pw}")
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode {mode!r} is not one of {', '.join(map(repr, _PAD_MODES))}")
    if mode == "reflect":
        for (a, b), n in zip(pw, x.shape, strict=True):
            if a >= n or b >= n:
                raise ValueError(
                    f"pad: reflect padding {pw} must be smaller than each padded size of "
                    f"{x.shape} (the edge is not repeated); use mode='symmetric' or pad less"
                )
    elif mode != "constant" and builtins.any(
        n == 0 and (a or b) for (a, b), n in zip(pw, x.shape, strict=True)
    ):
        raise ValueError(f"pad: mode {mode!r} cannot pad an empty axis of {x.shape}")
    return apply(_pad, x, pad_width=pw, mode=mode, value=value)


def tile(x: Any, reps: Any) -> Tensor:
    """numpy's tile, composed from broadcast and reshape."""
    x = as_tensor(x)
    reps = _as_shape(reps)
    nd = builtins.max(x.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    inter = []
    for r, n in zip(reps, x.shape, strict=True):
        inter += [r, n]
    y = broadcast_to(reshape(x, tuple(v for n in x.shape for v in (1, n))), tuple(inter))
    return reshape(y, tuple(r * n for r, n in zip(reps, x.shape, strict=True)))


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
    """Shift elements cyclically by ``shift`` along ``axis`` (of the flattened tensor when
    None); ``shift`` and ``axis`` may be tuples of equal length.

    >>> import tapegrad as tg
    >>> tg.roll(tg.arange(4), 1).tolist()
    [3, 0, 1, 2]
    """
    x = as_tensor(x)
    if axis is None:
        if isinstance(shift, (list, tuple)):  # PyTorch's roll(x, (k,)): one shift, flattened
            if len(shift) != 1:
                raise ArgumentError(
                    f"roll: {len(shift)} shifts {tuple(shift)} need as many axes; without axis "
                    "the flattened tensor takes one shift"
                )
            shift = shift[0]
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    if isinstance(axis, (list, tuple)):
        axis = tuple(check_axis(int(a), x.ndim, "roll") for a in axis)
        shift = tuple(int(s) for s in shift) if isinstance(shift, (list, tuple)) else int(shift)
        if isinstance(shift, tuple) and len(shift) != len(axis):
            raise ValueError(f"roll: {len(shift)} shifts for {len(axis)} axes; give one per axis")
    else:
        axis = check_axis(int(axis), x.ndim, "roll")
        shift = int(shift)
    return apply(_roll, x, shift=shift, axis=axis)


def flip(x: Any, axis: Any = None) -> Tensor:
    """Reverse the order of elements along ``axis`` (an int, a tuple, or None for all)."""
    x = as_tensor(x)
    axes = normalize_axis(axis, x.ndim, "flip")
    return apply(_flip, x, axis=axes)


def tril(x: Any, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes (on and below diagonal ``k``), zeros above."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"tril: needs at least 2 dimensions, got shape {x.shape}")
    return apply(_tril, x, k=k)


def triu(x: Any, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes (on and above diagonal ``k``), zeros below."""
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
    from .._dtypes import as_dtype  # noqa: PLC0415

    ind = _int_index(indices, "one_hot")
    _check_bounds(ind, num_classes, "one_hot", ind.ndim, negative=False)
    return _wrap((ind[..., None] == np.arange(num_classes)).astype(as_dtype(dtype)))
