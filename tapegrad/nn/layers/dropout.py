"""Dropout and Dropout1d/2d/3d: zero elements (or whole channels) at random while training
(identity in eval mode)."""

from __future__ import annotations

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class Dropout(Module):
    """While training, zero each element with probability ``p`` and scale the rest by
    ``1 / (1 - p)``; in eval mode, the identity. Draws from tapegrad's global generator.

    >>> import tapegrad as tg
    >>> drop = tg.nn.Dropout(0.5).eval()
    >>> drop(tg.ones(3)).tolist()
    [1.0, 1.0, 1.0]
    """

    p: float
    inplace: bool

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must lie in [0, 1], got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return input
        return F.dropout(input, self.p, training=True)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zero whole channels of ``(N, C, L)`` with probability ``p`` while training.

    >>> import tapegrad as tg
    >>> tg.nn.Dropout1d(0.5).eval()(tg.ones((1, 2, 3))).tolist()  # the identity in eval mode
    [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout1d(input, self.p, self.training)


class Dropout2d(Dropout):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` while training.

    >>> import tapegrad as tg
    >>> tg.nn.Dropout2d(0.5).eval()(tg.ones((1, 2, 1, 2))).tolist()  # the identity in eval mode
    [[[[1.0, 1.0]], [[1.0, 1.0]]]]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout2d(input, self.p, self.training)


class Dropout3d(Dropout):
    """Zero whole channels of ``(N, C, D, H, W)`` with probability ``p`` while training.

    >>> import tapegrad as tg
    >>> tg.nn.Dropout3d(0.5).eval()(tg.ones((1, 2, 1, 1, 2))).tolist()  # the identity in eval mode
    [[[[[1.0, 1.0]]], [[[1.0, 1.0]]]]]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout3d(input, self.p, self.training)
