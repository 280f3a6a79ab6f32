"""More loss layers: SoftMarginLoss, HingeEmbeddingLoss, TripletMarginLoss."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._f_common import legacy_reduction
from .._module import Module


class SoftMarginLoss(Module):
    """``log(1 + exp(-y x))``, ``y`` in {1, -1}.

    >>> import tapegrad as tg
    >>> round(tg.nn.SoftMarginLoss()(tg.tensor([0.0]), tg.tensor([1.0])).item(), 4)
    0.6931
    """

    def __init__(
        self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"
    ) -> None:
        super().__init__()
        self.reduction = legacy_reduction(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class HingeEmbeddingLoss(Module):
    """``x`` for ``y = 1``, ``max(0, margin - x)`` for ``y = -1``.

    >>> import tapegrad as tg
    >>> tg.nn.HingeEmbeddingLoss()(tg.tensor([2.0]), tg.tensor([-1.0])).item()
    0.0
    """

    def __init__(
        self,
        margin: float = 1.0,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.margin = margin
        self.reduction = legacy_reduction(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(Module):
    """``max(d(a, p) - d(a, n) + margin, 0)``.

    >>> import tapegrad as tg
    >>> a = tg.zeros((1, 2))
    >>> tg.nn.TripletMarginLoss()(a, a, a + 5.0).item()
    0.0
    """

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap
        self.reduction = legacy_reduction(size_average, reduce, reduction)

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
            reduction=self.reduction,
        )  # fmt: skip
