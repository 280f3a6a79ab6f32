"""PyTorch's spellings of numpy-named ops: ``dim=`` / ``keepdim=``, ``cat``, ``eq``, ``narrow``.

The ops keep numpy's names (``axis``, ``keepdims``) in their signatures; ``with_dim`` makes the
public function (and the Tensor method) accept PyTorch's names too. The modules' own functions
stay unwrapped, so internal calls pay nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .._tensor import Tensor
from . import _elementwise as E
from . import _shape as S
from ._common import as_tensor, check_axis

F = TypeVar("F", bound=Callable[..., Any])
_RENAMES = (("dim", "axis"), ("keepdim", "keepdims"), ("start_dim", "start_axis"),
            ("end_dim", "end_axis"))  # fmt: skip


def with_dim(f: F) -> F:
    """``f`` accepting PyTorch's ``dim`` / ``keepdim`` (and ``start_dim`` / ``end_dim``) for
    numpy's ``axis`` / ``keepdims`` (``start_axis`` / ``end_axis``)."""

    @functools.wraps(f)
    def g(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            for torch_name, name in _RENAMES:
                if torch_name in kwargs:
                    if name in kwargs:
                        raise TypeError(
                            f"{f.__name__}: give {name}= or {torch_name}= (PyTorch's name), not both"
                        )
                    kwargs[name] = kwargs.pop(torch_name)
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


eq, ne, lt, le, gt, ge = E.equal, E.not_equal, E.less, E.less_equal, E.greater, E.greater_equal

# public ops whose axis / keepdims PyTorch spells dim / keepdim
DIM_OPS = (
    "sum prod mean amax amin logsumexp cumsum cumprod norm all any softmax log_softmax squeeze "
    "expand_dims unsqueeze flip roll concatenate concat stack take_along_axis chunk flatten "
    "moveaxis"
).split()
