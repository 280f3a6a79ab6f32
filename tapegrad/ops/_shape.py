"""Shape primitives and compositions: reshape, transpose, broadcast, concat, pad, ..."""

from __future__ import annotations

import builtins
import itertools
import math
from typing import Any

from .._autodiff import Primitive, apply, defprim
from .._backend import np
from .._dtypes import as_dtype
from .._kernels.registry import dispatch
from .._tensor import Tensor
from ._common import ArgumentError, as_tensor, check_axis, normalize_axis, result_dtype


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
        from ._indexing import take  # noqa: PLC0415  # cycle: _indexing imports this module

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
