"""Regression, embedding, ranking and margin losses (compositions of tapegrad ops; ``mse_loss``
on the ``nn.mse_loss`` primitive), with the ``reduction`` vocabulary of ``_f_loss.py``."""


from __future__ import annotations

from typing import Any

from .._amp import upper
from .._autodiff import apply
from .._backend import np
from .._tensor import Tensor, _wrap
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops._loss import HUBER, MSE
from ._f_common import check_reduction, float_input, legacy_reduction, reduce_loss, same_float
from ._f_loss import _pair
from ._f_norm import pairwise_distance

# --------------------------------------------------------------------------------------------
# regression losses
# --------------------------------------------------------------------------------------------


def _times_same_shape(loss: Tensor, weight: Any, op: str) -> Tensor:
    """``weight * loss`` for a weight of the loss's shape (mse, l1, huber)."""
    w = S.astype(float_input(weight, op, "weight"), loss.dtype)
    if w.shape != loss.shape:
        raise ValueError(f"{op}: weight must have the input's shape {loss.shape}, got {w.shape}")
    return loss * w


def _sum_scale(x: Tensor, reduction: str) -> float | None:
    """The factor on the summed loss where a loss runs as one primitive ('mean': 1 / n, 'sum':
    1), or None where it does not ('none', or an empty input)."""
    n = x._data.size
    if reduction not in ("mean", "sum") or not n:
        return None
    return 1.0 / n if reduction == "mean" else 1.0


def _weighted_mean(loss: Tensor, weight: Any, reduction: str, op: str) -> Tensor:
    """``weight * loss`` reduced, the mean dividing by ``sum(weight)`` (PyTorch's mse/l1 rule)."""
    check_reduction(reduction, op)
    w = S.astype(float_input(weight, op, "weight"), loss.dtype)
    return reduce_loss(_times_same_shape(loss, w, op), reduction, op, denom=R.sum(w))


@upper
def mse_loss(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    weight: Any = None,
) -> Tensor:
    """Squared error ``(input - target) ** 2``; with ``weight``, 'mean' is
    ``sum(weight * err) / sum(weight)``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.mse_loss(tg.tensor([1.0, 2.0]), tg.tensor([0.0, 0.0])).item()
    2.5
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "mse_loss")
    scale = _sum_scale(x, reduction)
    if weight is None and scale is not None:
        return apply(MSE, x, t, scale=scale)
    d = x - t
    loss = d * d
    if weight is not None:
        return _weighted_mean(loss, weight, reduction, "mse_loss")
    return reduce_loss(loss, reduction, "mse_loss")


@upper
def l1_loss(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    weight: Any = None,
) -> Tensor:
    """Absolute error ``|input - target|``; with ``weight``, 'mean' is
    ``sum(weight * err) / sum(weight)``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "l1_loss")
    loss = E.abs(x - t)
    if weight is not None:
        return _weighted_mean(loss, weight, reduction, "l1_loss")
    return reduce_loss(loss, reduction, "l1_loss")


def _huber(d: Tensor, delta: float) -> Tensor:
    a = E.abs(d)
    return BI.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)


@upper
def huber_loss(
    input: Any, target: Any, reduction: str = "mean", delta: float = 1.0, weight: Any = None
) -> Tensor:
    """``0.5 d ** 2`` where ``|d| < delta``, else ``delta (|d| - delta / 2)``; d = input - target.

    With ``weight``, 'mean' is the plain mean of ``weight * loss`` (as PyTorch).
    """
    x, t = _pair(input, target, "huber_loss")
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    scale = _sum_scale(x, reduction)
    if weight is None and scale is not None:
        return apply(HUBER, x, t, delta=float(delta), scale=scale)
    loss = _huber(x - t, delta)
    if weight is not None:
        loss = _times_same_shape(loss, weight, "huber_loss")
    return reduce_loss(loss, reduction, "huber_loss")


@upper
def smooth_l1_loss(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """``0.5 d ** 2 / beta`` where ``|d| < beta``, else ``|d| - beta / 2`` (Huber / beta)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "smooth_l1_loss")
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    scale = _sum_scale(x, reduction)
    if beta > 0 and scale is not None:  # Huber over beta
        return apply(HUBER, x, t, delta=float(beta), scale=scale / beta)
    d = x - t
    if beta == 0:
        return reduce_loss(E.abs(d), reduction, "smooth_l1_loss")
    a = E.abs(d)
    loss = BI.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return reduce_loss(loss, reduction, "smooth_l1_loss")


# --------------------------------------------------------------------------------------------
# embedding and ranking losses
# --------------------------------------------------------------------------------------------


def _signs(target: Any, like: Tensor) -> Tensor:
    """The +1/-1 targets as a constant of the input's dtype."""
    t = target._data if isinstance(target, Tensor) else np.asarray(target)
    return _wrap(t.astype(like.dtype))


def cosine_embedding_loss(
    input1: Any,
    input2: Any,
    target: Any,
    margin: float = 0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where it is -1.

    The cosine is taken along the last axis with ``1e-12`` added to each squared norm.
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    a = float_input(input1, "cosine_embedding_loss", "input1")
    b = float_input(input2, "cosine_embedding_loss", "input2")
    a, b = same_float(a, b)
    y = _signs(target, a)
    if a.shape != b.shape or a.ndim not in (1, 2) or y.shape != a.shape[:-1]:
        raise ValueError(
            "cosine_embedding_loss: inputs must be (N, D) with target (N,), or (D,) with a "
            f"scalar target; got {a.shape}, {b.shape} and target {y.shape}"
        )
    eps = 1e-12
    dot = R.sum(a * b, axis=-1)
    den = E.sqrt((R.sum(a * a, axis=-1) + eps) * (R.sum(b * b, axis=-1) + eps))
    cos = dot / den
    pos = BI.where(y == 1, 1.0 - cos, 0.0)
    neg = BI.where(y == -1, E.clip(cos - margin, min=0.0), 0.0)
    return reduce_loss(pos + neg, reduction, "cosine_embedding_loss")


def margin_ranking_loss(
    input1: Any,
    input2: Any,
    target: Any,
    margin: float = 0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``; ``target`` is 1 or -1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    a = float_input(input1, "margin_ranking_loss", "input1")
    b = float_input(input2, "margin_ranking_loss", "input2")
    a, b = same_float(a, b)
    y = _signs(target, a)
    if not (a.shape == b.shape == y.shape):
        raise ValueError(
            f"margin_ranking_loss: input1 {a.shape}, input2 {b.shape} and target {y.shape} "
            "must have one shape"
        )
    loss = E.clip(-y * (a - b) + margin, min=0.0)
    return reduce_loss(loss, reduction, "margin_ranking_loss")


def soft_margin_loss(
    input: Any, target: Any, size_average: Any = None, reduce: Any = None, reduction: str = "mean"
) -> Tensor:
    """``log(1 + exp(-y x))`` for targets ``y`` of 1 or -1.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> round(F.soft_margin_loss(tg.tensor([0.0]), tg.tensor([1.0])).item(), 4)
    0.6931
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, y = _pair(input, target, "soft_margin_loss")
    z = -y * x
    # log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)), stable for large |z|
    loss = BI.maximum(z, 0.0) + E.log1p(E.exp(-E.abs(z)))
    return reduce_loss(loss, reduction, "soft_margin_loss")


def hinge_embedding_loss(
    input: Any,
    target: Any,
    margin: float = 1.0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``x`` where the target is 1, ``max(0, margin - x)`` where it is -1.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> y = tg.tensor([1.0, -1.0])
    >>> F.hinge_embedding_loss(tg.tensor([0.25, 0.25]), y, reduction="none").tolist()
    [0.25, 0.75]
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, y = _pair(input, target, "hinge_embedding_loss")
    pos = BI.where(y == 1, x, 0.0)
    neg = BI.where(y == -1, BI.maximum(margin - x, 0.0), 0.0)
    return reduce_loss(pos + neg, reduction, "hinge_embedding_loss")


def triplet_margin_loss(  # noqa: PLR0917 - PyTorch's positional signature
    anchor: Any,
    positive: Any,
    negative: Any,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the ``p``-norm pairwise distance.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> a = tg.zeros((1, 2))
    >>> F.triplet_margin_loss(a, a, a + 5.0).item()
    0.0
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    a = float_input(anchor, "triplet_margin_loss", "anchor")
    d_pos = pairwise_distance(a, positive, p, eps)
    d_neg = pairwise_distance(a, negative, p, eps)
    if swap:
        d_neg = BI.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    loss = BI.maximum(d_pos - d_neg + margin, 0.0)
    return reduce_loss(loss, reduction, "triplet_margin_loss")
