"""Shrink and threshold activations, Softmax2d."""

from __future__ import annotations

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class Hardshrink(Module):
    """``x`` where ``|x| > lambd``, else 0.

    >>> import tapegrad as tg
    >>> tg.nn.Hardshrink()(tg.tensor([0.25, -2.0])).tolist()
    [0.0, -2.0]
    """

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:
        return F.hardshrink(input, self.lambd)


class Softshrink(Module):
    """``x -/+ lambd`` outside ``[-lambd, lambd]``, else 0.

    >>> import tapegrad as tg
    >>> tg.nn.Softshrink()(tg.tensor([0.25, -2.0])).tolist()
    [0.0, -1.5]
    """

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:
        return F.softshrink(input, self.lambd)


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``.

    >>> import tapegrad as tg
    >>> tg.nn.Threshold(0.5, 9.0)(tg.tensor([0.25, 2.0])).tolist()
    [9.0, 2.0]
    """

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.threshold(input, self.threshold, self.value)


class Softmax2d(Module):
    """Softmax over the channels (axis -3) of ``(N, C, H, W)`` or ``(C, H, W)``.

    >>> import tapegrad as tg
    >>> tg.nn.Softmax2d()(tg.zeros((2, 1, 1))).tolist()
    [[[0.5]], [[0.5]]]
    """

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected a 3D or 4D input, got shape {input.shape}")
        return F.softmax(input, -3)
