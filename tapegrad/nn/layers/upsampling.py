"""Upsample: resize by a factor or to a size (nearest, linear, bilinear, bicubic, ...), and
PyTorch's fixed-mode UpsamplingNearest2d and UpsamplingBilinear2d."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class Upsample(Module):
    """Resize ``(N, C, ...)`` to ``size`` or by ``scale_factor`` with ``F.interpolate``.

    ``mode`` is ``'nearest'`` (default), ``'linear'``, ``'bilinear'``, ``'bicubic'``,
    ``'trilinear'`` or ``'nearest-exact'`` (what the functional form supports);
    ``align_corners`` as in PyTorch.

    >>> import tapegrad as tg
    >>> tg.nn.Upsample(scale_factor=2)(tg.ones((1, 3, 4, 4))).shape
    (1, 3, 8, 8)
    """

    size: Any
    scale_factor: Any
    mode: str
    align_corners: bool | None
    recompute_scale_factor: bool | None

    def __init__(
        self,
        size: Any = None,
        scale_factor: Any = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        self.size = size
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor is not None else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(
            input, self.size, self.scale_factor, self.mode, self.align_corners,
            recompute_scale_factor=self.recompute_scale_factor,
        )  # fmt: skip

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


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
