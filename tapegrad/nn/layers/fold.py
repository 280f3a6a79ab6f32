"""Fold and Unfold: sliding-window columns (im2col) and their sum back into an image."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class Unfold(Module):
    """``(N, C, H, W) -> (N, C kh kw, L)``: each sliding window as a column.

    >>> import tapegrad as tg
    >>> tg.nn.Unfold(kernel_size=(2, 3))(tg.zeros((1, 2, 4, 5))).shape
    (1, 12, 9)
    """

    def __init__(
        self, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
    ) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)


class Fold(Module):
    """``(N, C kh kw, L) -> (N, C, H, W)``: columns summed back into place.

    >>> import tapegrad as tg
    >>> tg.nn.Fold(output_size=(4, 5), kernel_size=(2, 3))(tg.zeros((1, 12, 9))).shape
    (1, 2, 4, 5)
    """

    def __init__(
        self,
        output_size: Any,
        kernel_size: Any,
        dilation: Any = 1,
        padding: Any = 0,
        stride: Any = 1,
    ) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return F.fold(
            input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )
