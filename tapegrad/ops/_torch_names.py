"""PyTorch's spellings of numpy-named ops: ``dim=`` / ``keepdim=``, ``cat``, ``eq``, ``narrow``.

The ops keep numpy's names (``axis``, ``keepdims``) in their signatures; ``with_dim`` makes the
public function (and the Tensor method) accept PyTorch's names too. The modules' own functions
stay unwrapped, so internal calls pay nothing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

from .._autodiff import OUT, apply, defprim
from .._backend import np
from .._dtypes import default_float
from .._tensor import Tensor, _wrap
from . import _binary as BI
from . import _indexing as IX
from . import _linalg as L
from . import _reduce as R
from . import _shape as S
from ._common import ArgumentError, as_tensor, check_axis

F = TypeVar("F", bound=Callable[..., Any])
_RENAMES = (("dim", "axis"), ("keepdim", "keepdims"), ("start_dim", "start_axis"),
            ("end_dim", "end_axis"), ("dims", "axis"), ("shifts", "shift"),
            ("diagonal", "k"))  # fmt: skip


def with_dim(f: F) -> F:
    """``f`` accepting PyTorch's ``dim`` / ``keepdim`` (and ``start_dim`` / ``end_dim``, ``dims``,
    ``shifts``, ``diagonal``) for numpy's ``axis`` / ``keepdims`` (``start_axis`` / ``end_axis``,
    ``axis``, ``shift``, ``k``)."""

    @functools.wraps(f)
    def g(*args: Any, **kwargs: Any) -> Any:
        torch_dim = "dim" in kwargs
        torch_roll = "shifts" in kwargs or "dims" in kwargs
        if kwargs:
            for torch_name, name in _RENAMES:
                if torch_name in kwargs:
                    if name in kwargs:
                        raise TypeError(
                            f"{f.__name__}: give {name}= or {torch_name}= (PyTorch's name), not both"
                        )
                    kwargs[name] = kwargs.pop(torch_name)
        if f.__name__ == "squeeze":
            return _squeeze(f, torch_dim, *args, **kwargs)
        if f.__name__ == "roll" and torch_roll:
            _roll_counts(args, kwargs)
        return f(*args, **kwargs)

    return g  # type: ignore[return-value]


def _roll_counts(args: tuple, kwargs: dict) -> None:
    """PyTorch's ``roll(shifts=, dims=)`` takes one shift per dim (numpy broadcasts one shift)."""
    shift = kwargs["shift"] if "shift" in kwargs else (args[1] if len(args) > 1 else None)
    axis = kwargs["axis"] if "axis" in kwargs else (args[2] if len(args) > 2 else None)
    ns = len(shift) if isinstance(shift, (tuple, list)) else 1
    nd = len(axis) if isinstance(axis, (tuple, list)) else 1
    if axis is not None and ns != nd:
        raise ArgumentError(
            f"roll: shifts={shift!r} and dims={axis!r} must have the same length (PyTorch's "
            "spelling; numpy's roll(x, shift, axis=...) applies one shift to every axis)"
        )


def _squeeze(f: Callable[..., Any], torch_dim: bool, x: Any, axis: Any = None) -> Any:
    """``squeeze(x, dim=d)`` is PyTorch's (an axis whose size is not 1 stays); ``squeeze(x, a)`` /
    ``axis=a`` numpy's, which raises there, naming PyTorch's spelling."""
    if axis is None:
        return f(x)
    x = as_tensor(x)
    if torch_dim:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        keep = tuple(a for a in axes if x.shape[check_axis(a, x.ndim, "squeeze")] == 1)
        return f(x, keep) if keep else x
    try:
        return f(x, axis)
    except ValueError as e:
        raise ValueError(
            f"{e}; numpy's squeeze(x, axis) raises there, PyTorch's squeeze(x, dim) leaves that "
            "axis: write dim= for PyTorch's meaning"
        ) from None


def with_unbiased(f: F) -> F:
    """``var`` / ``std`` accepting PyTorch's older ``unbiased=`` (``correction`` 1 or 0)."""

    @functools.wraps(f)
    def g(*args: Any, unbiased: bool | None = None, **kwargs: Any) -> Any:
        if unbiased is not None:
            if kwargs.get("correction") is not None:
                raise TypeError(f"{f.__name__}: give correction= or unbiased=, not both")
            kwargs["correction"] = 1 if unbiased else 0
        return f(*args, **kwargs)

    return g  # type: ignore[return-value]


def cat(tensors: Any, dim: int = 0) -> Tensor:
    """PyTorch's name for ``concatenate``.

    >>> import tapegrad as tg
    >>> tg.cat([tg.ones((1, 2)), tg.zeros((1, 2))], dim=0).tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    """
    return S.concatenate(tensors, axis=dim)


def narrow(x: Any, dim: int, start: int, length: int) -> Tensor:
    """``length`` elements from ``start`` along ``dim`` (PyTorch's narrow).

    >>> import tapegrad as tg
    >>> tg.narrow(tg.arange(6).reshape(2, 3), 1, 1, 2).tolist()
    [[1, 2], [4, 5]]
    """
    x = as_tensor(x)
    ax = check_axis(dim, x.ndim, "narrow")
    n = x.shape[ax]
    s = start + n if start < 0 else start
    if not (0 <= s <= n and 0 <= length <= n - s):
        raise IndexError(
            f"narrow: start {start} and length {length} do not fit in dimension {dim} of size "
            f"{n} (shape {x.shape})"
        )
    return x[(slice(None),) * ax + (slice(s, s + length),)]


eq, ne, lt, le, gt, ge = BI.equal, BI.not_equal, BI.less, BI.less_equal, BI.greater, BI.greater_equal

# public ops whose axis / keepdims PyTorch spells dim / keepdim
DIM_OPS = (
    "sum prod mean amax amin logsumexp cumsum cumprod norm all any softmax log_softmax squeeze "
    "expand_dims unsqueeze flip roll concatenate concat stack take_along_axis chunk flatten "
    "moveaxis argmax argmin argsort cross tril triu index_add scatter_add"
).split()


class ValuesIndices(tuple):  # type: ignore[type-arg]
    """PyTorch's ``(values, indices)`` result of ``max(dim=...)``/``min(dim=...)``."""

    def __new__(cls, values: Tensor, indices: Tensor) -> ValuesIndices:
        return super().__new__(cls, (values, indices))

    @property
    def values(self) -> Tensor:
        return self[0]  # type: ignore[no-any-return]

    @property
    def indices(self) -> Tensor:
        return self[1]  # type: ignore[no-any-return]


# --- PyTorch functions with no numpy twin (PyTorch's meaning and argument order) -------------
def mm(input: Any, mat2: Any) -> Tensor:
    """PyTorch's ``mm``: (n, k) @ (k, m); both must be 2-d (``matmul`` broadcasts).

    >>> import tapegrad as tg
    >>> tg.mm(tg.ones((2, 3)), tg.ones((3, 4))).shape
    (2, 4)
    """
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(
            f"mm: needs two 2-d tensors, got {a.shape} and {b.shape}; use matmul (@) to broadcast"
        )
    return L.matmul(a, b)


def bmm(input: Any, mat2: Any) -> Tensor:
    """PyTorch's ``bmm``: (B, n, k) @ (B, k, m); both must be 3-d with one batch size."""
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(
            f"bmm: needs (B, n, k) and (B, k, m), got {a.shape} and {b.shape}; "
            "use matmul (@) to broadcast"
        )
    return L.matmul(a, b)


def index_select(input: Any, dim: int, index: Any) -> Tensor:
    """PyTorch's ``index_select``: the entries at a 1-d integer ``index`` along ``dim``.

    >>> import tapegrad as tg
    >>> tg.index_select(tg.arange(6).reshape(2, 3), 1, tg.tensor([2, 0])).tolist()
    [[2, 0], [5, 3]]
    """
    x = as_tensor(input)
    ind = index._data if isinstance(index, Tensor) else np.asarray(index)
    if ind.ndim > 1 or ind.dtype.kind not in "iu":
        raise IndexError(
            f"index_select: index must be a 0-d or 1-d integer tensor, got dtype {ind.dtype} "
            f"and shape {ind.shape}"
        )
    return IX.take(x, ind.reshape(-1), axis=dim)


def masked_fill(input: Any, mask: Any, value: Any) -> Tensor:
    """PyTorch's ``masked_fill``: ``value`` where the bool ``mask`` (broadcast to the input's
    shape) is True; the input's dtype is kept. Gradients flow to the input where the mask is
    False (and to a tensor ``value`` where it is True).

    >>> import tapegrad as tg
    >>> tg.masked_fill(tg.zeros(3), tg.tensor([True, False, True]), 5.0).tolist()
    [5.0, 0.0, 5.0]
    """
    x = as_tensor(input)
    m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"masked_fill: the mask must be bool, got {m.dtype}; compare first (x > 0)")
    if np.broadcast_shapes(m.shape, x.shape) != x.shape:
        raise ValueError(f"masked_fill: mask of shape {m.shape} does not broadcast to {x.shape}")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got {value.shape}")
        value = value.astype(x.dtype)
    return BI.where(as_tensor(m), value, x).astype(x.dtype)


def topk(input: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """PyTorch's ``topk``: the ``k`` largest (or smallest) entries along ``dim`` as a
    ``(values, indices)`` pair, largest first; the gradient reaches the values' positions.
    Ties keep the earlier index first.

    >>> import tapegrad as tg
    >>> v, i = tg.topk(tg.tensor([1.0, 5.0, 3.0]), 2)
    >>> v.tolist(), i.tolist()
    ([5.0, 3.0], [1, 2])
    """
    x = as_tensor(input)
    ax = check_axis(dim, max(x.ndim, 1), "topk")
    n = x.shape[ax] if x.ndim else 1
    if not 0 <= k <= n:
        raise IndexError(f"topk: k={k} is out of range for dimension {dim} of size {n}")
    a = x._data if x.ndim else x._data.reshape(1)
    key = -a if largest else a
    if key.dtype.kind == "b":
        key = key.astype(np.int8)
    idx = np.take(np.argsort(key, axis=ax, kind="stable"), np.arange(k), axis=ax)
    if x.ndim == 0:
        return ValuesIndices(x, _wrap(np.zeros((), np.int64)))
    return ValuesIndices(IX.take_along_axis(x, idx, ax), _wrap(idx.astype(np.int64)))


def repeat_interleave(input: Any, repeats: Any, dim: Any = None) -> Tensor:
    """PyTorch's ``repeat_interleave`` (numpy's ``repeat``): each element ``repeats`` times.

    >>> import tapegrad as tg
    >>> tg.repeat_interleave(tg.tensor([1, 2]), 2).tolist()
    [1, 1, 2, 2]
    """
    if isinstance(repeats, Tensor):
        repeats = repeats._data
        repeats = int(repeats) if repeats.ndim == 0 else repeats
    return S.repeat(as_tensor(input), repeats, axis=dim)



# --- more PyTorch names with no numpy twin (found running PyTorch op suites unchanged) --------
def lerp(input: Any, end: Any, weight: Any) -> Tensor:
    """PyTorch's ``lerp``: ``input + weight * (end - input)``.

    >>> import tapegrad as tg
    >>> tg.lerp(tg.tensor([0.0, 2.0]), tg.tensor([4.0, 4.0]), 0.5).tolist()
    [2.0, 3.0]
    """
    x = as_tensor(input)
    return x + weight * (end - x)


def isclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:  # fmt: skip
    """``|input - other| <= atol + rtol * |other|`` elementwise, as a bool tensor (numpy's and
    PyTorch's ``isclose``, with their defaults).

    >>> import tapegrad as tg
    >>> tg.isclose(tg.tensor([1.0, 2.0]), tg.tensor([1.0, 2.1])).tolist()
    [True, False]
    """
    a = input._data if isinstance(input, Tensor) else np.asarray(input)
    b = other._data if isinstance(other, Tensor) else np.asarray(other)
    return _wrap(np.asarray(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))


def masked_select(input: Any, mask: Any) -> Tensor:
    """PyTorch's ``masked_select``: the 1-d tensor of the entries where the bool ``mask``
    (broadcast with the input) is True; the gradient reaches those entries.

    >>> import tapegrad as tg
    >>> tg.masked_select(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), tg.tensor([True, False])).tolist()
    [1.0, 3.0]
    """
    x = as_tensor(input)
    m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"masked_select: the mask must be bool, got {m.dtype}; compare first (x > 0)")
    shape = np.broadcast_shapes(m.shape, x.shape)
    return IX.getitem(S.broadcast_to(x, shape), np.broadcast_to(m, shape))


def _cumulative(name: str, accumulate: Any) -> Any:
    def op(input: Any, dim: int) -> ValuesIndices:
        x = as_tensor(input)
        ax = check_axis(dim, max(x.ndim, 1), name)
        if x.ndim == 0:
            return ValuesIndices(x, _wrap(np.zeros((), np.int64)))
        a = x._data
        run = accumulate.accumulate(a, axis=ax)
        # the index of the latest element equal to the running extreme (PyTorch's choice)
        pos = np.arange(a.shape[ax]).reshape([-1 if i == ax else 1 for i in range(a.ndim)])
        hit = (a == run) | (np.isnan(a) if a.dtype.kind == "f" else False)
        # after a nan, the latest nan (the running extreme is nan)
        idx = np.maximum.accumulate(np.where(hit, pos, 0), axis=ax).astype(np.int64)
        return ValuesIndices(IX.take_along_axis(x, idx, ax), _wrap(idx))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"PyTorch's ``{name}(input, dim)``: the running {name[3:]}imum along ``dim`` and the "
        "index it came from, as a ``(values, indices)`` pair; the gradient reaches those "
        f"indices.\n\n    >>> import tapegrad as tg\n"
        f"    >>> tg.{name}(tg.tensor([1.0, 3.0, 2.0]), 0).values.tolist()\n"
        f"    {[1.0, 3.0, 3.0] if name == 'cummax' else [1.0, 1.0, 1.0]}\n"
    )
    return op


cummax = _cumulative("cummax", np.maximum)
cummin = _cumulative("cummin", np.minimum)


def std_mean(input: Any, dim: Any = None, *, correction: float = 1, keepdim: bool = False,
             unbiased: Any = None, axis: Any = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """PyTorch's ``std_mean``: ``(std, mean)`` over ``dim`` (all when None), ``correction=1``
    (Bessel's) unless given.

    >>> import tapegrad as tg
    >>> [t.item() for t in tg.std_mean(tg.tensor([1.0, 3.0]))]
    [1.4142135381698608, 2.0]
    """
    if unbiased is not None:
        correction = 1 if unbiased else 0
    if axis is not None:  # PyTorch's alias of dim
        if dim is not None:
            raise TypeError("std_mean: give dim or axis, not both")
        dim = axis
    x = as_tensor(input)
    return (R.std(x, dim, keepdim, correction), R.mean(x, dim, keepdim))


def unflatten(input: Any, dim: int, sizes: Any) -> Tensor:
    """PyTorch's ``unflatten``: axis ``dim`` split into ``sizes`` (one may be -1).

    >>> import tapegrad as tg
    >>> tg.unflatten(tg.zeros((2, 6)), 1, (2, 3)).shape
    (2, 2, 3)
    """
    x = as_tensor(input)
    ax = check_axis(dim, x.ndim, "unflatten")
    return S.reshape(x, (*x.shape[:ax], *sizes, *x.shape[ax + 1 :]))


def gather(input: Any, dim: int, index: Any) -> Tensor:
    """PyTorch's ``gather``: ``out[i][j] = input[index[i][j]][j]`` for ``dim=0``; ``index`` has
    the input's number of dimensions and may be smaller than it along the other axes.

    >>> import tapegrad as tg
    >>> tg.gather(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, tg.tensor([[1], [0]])).tolist()
    [[2.0], [3.0]]
    """
    x = as_tensor(input)
    ind = index._data if isinstance(index, Tensor) else np.asarray(index)
    ax = check_axis(dim, max(x.ndim, 1), "gather")
    if ind.ndim != x.ndim or ind.dtype.kind not in "iu" or any(
        i != ax and n > m for i, (n, m) in enumerate(zip(ind.shape, x.shape, strict=True))
    ):
        raise IndexError(
            f"gather: index (dtype {ind.dtype}, shape {ind.shape}) must be an integer tensor with "
            f"the input's {x.ndim} dimensions, no larger than {x.shape} except along dim {dim}"
        )
    crop = tuple(slice(None) if i == ax else slice(0, n) for i, n in enumerate(ind.shape))
    return IX.take_along_axis(IX.getitem(x, crop), ind, ax)


def bitwise_not(input: Any) -> Tensor:
    """``~input``: logical not on bools, bitwise not on integers."""
    x = as_tensor(input)
    if x._data.dtype.kind not in "biu":
        raise TypeError(f"bitwise_not: needs a bool or integer tensor, got {x.dtype}")
    return _wrap(np.invert(x._data))


def argsort(input: Any, axis: int | None = -1, descending: bool = False, stable: bool = False,
            kind: Any = None) -> Tensor:  # fmt: skip
    """The indices that sort along ``axis`` (PyTorch's ``dim``; the flattened tensor when None,
    as numpy), largest first when ``descending``; ties keep their order (numpy's
    ``kind='stable'``, PyTorch's ``stable=True``; a stable order is a valid answer for any
    ``kind``).

    >>> import tapegrad as tg
    >>> tg.argsort(tg.tensor([2.0, 1.0, 3.0]), descending=True).tolist()
    [2, 0, 1]
    """
    x = as_tensor(input)
    if axis is None:
        x, axis = S.reshape(x, (-1,)), 0
    if x.ndim == 0:
        return _wrap(np.zeros((), np.int64))
    ax = check_axis(axis, x.ndim, "argsort")
    a = x._data
    if descending:  # a stable descending order: sort the reversed axis, then map back
        n = a.shape[ax]
        rev = np.flip(a, axis=ax)
        idx = n - 1 - np.flip(np.argsort(rev, axis=ax, kind="stable"), axis=ax)
        return _wrap(idx.astype(np.int64))
    return _wrap(np.argsort(a, axis=ax, kind="stable").astype(np.int64))


def sort(input: Any, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    """PyTorch's ``sort``: a ``(values, indices)`` pair along ``dim`` (ties keep their order);
    the gradient reaches the values' positions. numpy's ``tg.sort(x, axis)`` gives the values.

    >>> import tapegrad as tg
    >>> tg.tensor([2.0, 1.0, 3.0]).sort(descending=True).indices.tolist()
    [2, 0, 1]
    """
    x = as_tensor(input)
    idx = argsort(x, dim, descending)
    if x.ndim == 0:
        return ValuesIndices(x, idx)
    return ValuesIndices(IX.take_along_axis(x, idx._data, check_axis(dim, x.ndim, "sort")), idx)


def _logcumsumexp_fwd(x: Any, axis: int) -> Any:
    with np.errstate(invalid="ignore"):  # inf - inf inside logaddexp: nan, as PyTorch
        return np.logaddexp.accumulate(x, axis=axis)


def _logcumsumexp_vjp(xp: Any, g: Any, ans: Any, x: Any, axis: int) -> Any:
    # d y_j / d x_i = exp(x_i - y_j) for i <= j; summed over j >= i in log space, the positive and
    # negative parts of g apart, so that nothing overflows (TensorFlow's and PyTorch's rule)
    def from_the_end(z: Any) -> Any:
        return xp.flip(xp.apply(_LOGCUMSUMEXP, xp.flip(z, axis), axis=axis), axis)

    if xp.tensors:  # an outer tape records this backward pass
        raise NotImplementedError(
            "logcumsumexp: a second derivative (an outer tape recording the backward pass) is "
            "not supported; compose it as tg.log(tg.cumsum(tg.exp(x), axis)) for that"
        )

    def log_part(v: Any) -> Any:
        return xp.where(v > 0, xp.log(xp.where(v > 0, v, 1.0)), -math.inf) - ans

    with np.errstate(invalid="ignore", over="ignore"):  # -inf - -inf where all x are -inf
        return xp.exp(from_the_end(log_part(g)) + x) - xp.exp(from_the_end(log_part(-g)) + x)


_LOGCUMSUMEXP = defprim("logcumsumexp", _logcumsumexp_fwd, _logcumsumexp_vjp, (0, OUT))


def logcumsumexp(input: Any, dim: int) -> Tensor:
    """PyTorch's ``logcumsumexp``: ``log(cumsum(exp(x)))`` along ``dim``, computed without
    overflow (a running ``logaddexp``).

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.logcumsumexp(tg.tensor([0.0, 0.0, 1000.0]), 0).tolist()]
    [0.0, 0.6931, 1000.0]
    """
    x = as_tensor(input)
    if x.dtype.kind != "f":
        x = x.astype(default_float())
    if x.ndim == 0:
        check_axis(dim, 1, "logcumsumexp")
        return x
    return apply(_LOGCUMSUMEXP, x, axis=check_axis(dim, x.ndim, "logcumsumexp"))
