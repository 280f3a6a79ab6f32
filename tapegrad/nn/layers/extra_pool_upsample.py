"""1-d adaptive pooling and PyTorch's fixed-mode upsampling layers."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module
from .upsampling import Upsample


class AdaptiveAvgPool1d(Module):
    """Average pooling of ``(N, C, L)`` to ``output_size`` positions.

    >>> import tapegrad as tg
    >>> tg.nn.AdaptiveAvgPool1d(1)(tg.ones((2, 3, 5))).shape
    (2, 3, 1)
    """

    def __init__(self, output_size: int) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveMaxPool1d(Module):
    """Max pooling of ``(N, C, L)`` to ``output_size`` positions.

    >>> import tapegrad as tg
    >>> tg.nn.AdaptiveMaxPool1d(2)(tg.tensor([[[1.0, 5.0, 2.0, 4.0, 3.0]]])).tolist()
    [[[5.0, 4.0]]]
    """

    def __init__(self, output_size: int, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class UpsamplingNearest2d(Upsample):
    """``Upsample(mode='nearest')``.

    >>> import tapegrad as tg
    >>> tg.nn.UpsamplingNearest2d(scale_factor=2)(tg.tensor([[[[1.0, 2.0]]]])).tolist()
    [[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]]]
    """

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample(mode='bilinear', align_corners=True)``.

    >>> import tapegrad as tg
    >>> tg.nn.UpsamplingBilinear2d(size=3)(tg.zeros((1, 1, 2, 2))).shape
    (1, 1, 3, 3)
    """

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
