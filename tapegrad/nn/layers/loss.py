"""Loss modules: thin wrappers of the functional losses with PyTorch's arguments.

Each stores its options (and, like PyTorch, its class ``weight``/``pos_weight`` as a buffer)
and calls the function of the same name in ``tapegrad.nn.functional``. ``reduction`` is
``'mean'``, ``'sum'`` or ``'none'``; the deprecated ``size_average``/``reduce`` pair is mapped
to it as PyTorch does.
"""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._f_common import legacy_reduction
from .._module import Module


def _buffer(t: Any) -> Tensor | None:
    if t is None or isinstance(t, Tensor):
        return t
    return Tensor(t)


class _Loss(Module):
    reduction: str

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__()
        self.reduction = legacy_reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    weight: Tensor | None

    def __init__(
        self,
        weight: Any = None,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight))


class MSELoss(_Loss):
    """Mean squared error ``(input - target)^2``, reduced.

    >>> import tapegrad as tg
    >>> tg.nn.MSELoss()(tg.tensor([1.0, 2.0]), tg.tensor([0.0, 0.0])).item()
    2.5
    """

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error ``|input - target|``, reduced."""

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits ``(N, C, ...)`` against class indices ``(N, ...)`` or class
    probabilities ``(N, C, ...)``; ``weight`` rescales classes, ``ignore_index`` skips targets,
    ``label_smoothing`` mixes the target with the uniform distribution.

    >>> import tapegrad as tg
    >>> loss = tg.nn.CrossEntropyLoss()(tg.tensor([[0.0, 0.0]]), tg.tensor([1]))
    >>> round(loss.item(), 4)
    0.6931
    """

    ignore_index: int
    label_smoothing: float

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        weight: Any = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.cross_entropy(
            input, target, weight=self.weight, ignore_index=self.ignore_index,
            reduction=self.reduction, label_smoothing=self.label_smoothing,
        )  # fmt: skip


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of log-probabilities ``(N, C, ...)`` at class indices."""

    ignore_index: int

    def __init__(
        self,
        weight: Any = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.nll_loss(
            input, target, weight=self.weight, ignore_index=self.ignore_index,
            reduction=self.reduction,
        )  # fmt: skip


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities in [0, 1] (log clamped at -100, as PyTorch)."""

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits (a stable log-sigmoid); ``pos_weight`` weighs positives.

    >>> import tapegrad as tg
    >>> round(tg.nn.BCEWithLogitsLoss()(tg.tensor([0.0]), tg.tensor([1.0])).item(), 4)
    0.6931
    """

    weight: Tensor | None
    pos_weight: Tensor | None

    def __init__(
        self,
        weight: Any = None,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        pos_weight: Any = None,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("pos_weight", _buffer(pos_weight))

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, weight=self.weight, reduction=self.reduction,
            pos_weight=self.pos_weight,
        )  # fmt: skip


class KLDivLoss(_Loss):
    """``target * (log target - input)`` with ``input`` in log space (``log_target`` says
    whether ``target`` is too); use ``reduction='batchmean'`` for the mathematical KL."""

    log_target: bool

    def __init__(
        self,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        log_target: bool = False,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class HuberLoss(_Loss):
    """``0.5 d^2`` for ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, with ``d = input -
    target``."""

    delta: float

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class SmoothL1Loss(_Loss):
    """``0.5 d^2 / beta`` for ``|d| < beta``, else ``|d| - 0.5 beta`` (Huber divided by beta)."""

    beta: float

    def __init__(
        self,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        beta: float = 1.0,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class _MarginLoss(_Loss):
    margin: float

    def __init__(
        self,
        margin: float = 0.0,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin


class CosineEmbeddingLoss(_MarginLoss):
    """``1 - cos(x1, x2)`` for ``y = 1``, ``max(0, cos(x1, x2) - margin)`` for ``y = -1``."""

    def forward(self, input1: Tensor, input2: Tensor, target: Any) -> Tensor:
        return F.cosine_embedding_loss(
            input1, input2, target, margin=self.margin, reduction=self.reduction
        )


class MarginRankingLoss(_MarginLoss):
    """``max(0, -y (x1 - x2) + margin)``."""

    def forward(self, input1: Tensor, input2: Tensor, target: Any) -> Tensor:
        return F.margin_ranking_loss(
            input1, input2, target, margin=self.margin, reduction=self.reduction
        )


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
