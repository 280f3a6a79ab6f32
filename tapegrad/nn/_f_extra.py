"""More functional forms for PyTorch coverage: shrink activations, threshold, 1-d adaptive
pooling, the legacy upsample names and three margin losses, composed of existing ops."""

from __future__ import annotations

from typing import Any

from .._tensor import Tensor
from ..ops import _elementwise as E
from ..ops import _shape as S
from ._f_common import float_input, legacy_reduction, reduce_loss
from ._f_loss import _pair
from ._f_norm import pairwise_distance
from ._f_pool import adaptive_avg_pool2d, adaptive_max_pool2d
from ._f_resize import interpolate


def hardshrink(input: Any, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.hardshrink(tg.tensor([-1.0, 0.2, 0.75])).tolist()
    [-1.0, 0.0, 0.75]
    """
    x = float_input(input, "hardshrink")
    return E.where(E.abs(x) > lambd, x, 0.0)


def softshrink(input: Any, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.softshrink(tg.tensor([-1.0, 0.2, 1.5])).tolist()
    [-0.5, 0.0, 1.0]
    """
    x = float_input(input, "softshrink")
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
    return E.where(x > lambd, x - lambd, E.where(x < -lambd, x + lambd, 0.0))


def threshold(input: Any, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, else ``value``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.threshold(tg.tensor([0.5, 2.0]), 1.0, -1.0).tolist()
    [-1.0, 2.0]
    """
    x = float_input(input, "threshold")
    return E.where(x > threshold, x, value)


def adaptive_avg_pool1d(input: Any, output_size: int) -> Tensor:
    """Average pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` positions.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.adaptive_avg_pool1d(tg.arange(4.0).reshape(1, 1, 4), 2).tolist()
    [[[0.5, 2.5]]]
    """
    x = float_input(input, "adaptive_avg_pool1d")
    return S.squeeze(adaptive_avg_pool2d(S.expand_dims(x, -2), (1, output_size)), -2)


def adaptive_max_pool1d(input: Any, output_size: int, return_indices: bool = False) -> Tensor:
    """Max pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` positions.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.adaptive_max_pool1d(tg.arange(4.0).reshape(1, 1, 4), 2).tolist()
    [[[1.0, 3.0]]]
    """
    if return_indices:
        raise NotImplementedError("adaptive_max_pool1d: return_indices=True is not offered")
    x = float_input(input, "adaptive_max_pool1d")
    return S.squeeze(adaptive_max_pool2d(S.expand_dims(x, -2), (1, output_size)), -2)


def upsample_nearest(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:
    """PyTorch's legacy name for ``interpolate(..., mode='nearest')``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.upsample_nearest(tg.zeros((1, 1, 2, 2)), scale_factor=2).shape
    (1, 1, 4, 4)
    """
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:
    """PyTorch's legacy name for ``interpolate(..., mode='bilinear', align_corners=True)``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.upsample_bilinear(tg.zeros((1, 1, 2, 2)), size=3).shape
    (1, 1, 3, 3)
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


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
    loss = E.maximum(z, 0.0) + E.log1p(E.exp(-E.abs(z)))
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
    pos = E.where(y == 1, x, 0.0)
    neg = E.where(y == -1, E.maximum(margin - x, 0.0), 0.0)
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
        d_neg = E.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    loss = E.maximum(d_pos - d_neg + margin, 0.0)
    return reduce_loss(loss, reduction, "triplet_margin_loss")


__all__ = [
    "adaptive_avg_pool1d", "adaptive_max_pool1d", "hardshrink", "hinge_embedding_loss",
    "soft_margin_loss", "softshrink", "threshold", "triplet_margin_loss", "upsample_bilinear",
    "upsample_nearest",
]  # fmt: skip
