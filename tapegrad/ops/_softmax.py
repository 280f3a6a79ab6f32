"""softmax and log_softmax, stable for large logits (compositions; no gradient code)."""

from __future__ import annotations

from typing import Any

from .._tensor import Tensor
from ._common import as_tensor, check_axis
from ._elementwise import exp, log
from ._reduce import max_shift, sum


def _shift(x: Tensor, axis: int) -> Tensor:
    # subtracting the max changes nothing mathematically; as a constant it needs no gradient
    return x - max_shift(x, axis)


def softmax(x: Any, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``.

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.softmax(tg.tensor([1.0, 1.0]), axis=0).tolist()]
    [0.5, 0.5]
    """
    x = as_tensor(x)
    axis = check_axis(axis, x.ndim, "softmax")
    e = exp(_shift(x, axis))
    return e / sum(e, axis=axis, keepdims=True)


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``, stable for large logits.

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.log_softmax(tg.tensor([1e4, 1e4]), axis=0).tolist()]
    [-0.6931, -0.6931]
    """
    x = as_tensor(x)
    axis = check_axis(axis, x.ndim, "log_softmax")
    z = _shift(x, axis)
    return z - log(sum(exp(z), axis=axis, keepdims=True))
