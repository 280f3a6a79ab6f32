"""PixelShuffle and PixelUnshuffle: move channels into space and back (sub-pixel convolution)."""

from __future__ import annotations

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class PixelShuffle(Module):
    """``(*, C r^2, H, W) -> (*, C, H r, W r)``.

    >>> import tapegrad as tg
    >>> tg.nn.PixelShuffle(3)(tg.zeros((1, 9, 4, 4))).shape
    (1, 1, 12, 12)
    """

    upscale_factor: int

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, input: Tensor) -> Tensor:
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``.

    >>> import tapegrad as tg
    >>> tg.nn.PixelUnshuffle(2)(tg.zeros((1, 1, 4, 4))).shape
    (1, 4, 2, 2)
    """

    downscale_factor: int

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = int(downscale_factor)

    def forward(self, input: Tensor) -> Tensor:
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
