"""Dropout1d/2d/3d: zero whole channels at random while training (identity in eval mode)."""

from __future__ import annotations

from ..._tensor import Tensor
from .. import functional as F
from .dropout import Dropout


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
