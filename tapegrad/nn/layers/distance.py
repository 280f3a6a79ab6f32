"""CosineSimilarity and PairwiseDistance, as layers over their functional forms."""

from __future__ import annotations

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class CosineSimilarity(Module):
    """``x1 . x2 / max(|x1| |x2|, eps)`` along ``dim``.

    >>> import tapegrad as tg
    >>> x = tg.ones((2, 3), dtype=tg.float64)
    >>> [round(v, 6) for v in tg.nn.CosineSimilarity(dim=1)(x, -x).tolist()]
    [-1.0, -1.0]
    """

    dim: int
    eps: float

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``|x1 - x2 + eps|_p`` along the last axis.

    >>> import tapegrad as tg
    >>> tg.nn.PairwiseDistance(eps=0.0)(tg.zeros((1, 2)), tg.tensor([[3.0, 4.0]])).tolist()
    [5.0]
    """

    norm: float
    eps: float
    keepdim: bool

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
