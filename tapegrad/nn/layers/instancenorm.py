"""InstanceNorm1d/2d/3d: each channel of each sample normalised over its spatial axes."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .norm import _NormBase


class _InstanceNorm(_NormBase):
    """``y = (x - mean) / sqrt(var + eps) * weight + bias``, the statistics per sample and
    channel (biased variance); PyTorch's defaults: no affine map, no running statistics."""

    _rank: int = 3
    momentum: float

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        name = type(self).__name__
        if input.ndim not in (self._rank - 1, self._rank):
            raise ValueError(
                f"{name}: expected a {self._rank - 1}D (unbatched) or {self._rank}D input, "
                f"got shape {input.shape}"
            )
        unbatched = input.ndim == self._rank - 1
        x = input.unsqueeze(0) if unbatched else input
        if x.shape[1] != self.num_features and self.affine:
            raise ValueError(
                f"{name}: expected {self.num_features} channels (axis 1), got shape {x.shape}"
            )
        use_input_stats = self.training or not self.track_running_stats
        # num_batches_tracked stays 0: PyTorch's InstanceNorm keeps it only for state_dict names
        y = F.instance_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias,
            use_input_stats, self.momentum, self.eps,
        )  # fmt: skip
        return y[0] if unbatched else y

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class InstanceNorm1d(_InstanceNorm):
    """Instance norm of ``(N, C, L)`` or ``(C, L)``.

    >>> import tapegrad as tg
    >>> y = tg.nn.InstanceNorm1d(2)(tg.randn(4, 2, 8))
    >>> abs(float(y[0, 0].mean())) < 1e-6
    True
    """

    _rank = 3


class InstanceNorm2d(_InstanceNorm):
    """Instance norm of ``(N, C, H, W)`` or ``(C, H, W)`` (style transfer's normalisation).

    >>> import tapegrad as tg
    >>> tg.nn.InstanceNorm2d(3, affine=True)(tg.randn(2, 3, 5, 5)).shape
    (2, 3, 5, 5)
    """

    _rank = 4


class InstanceNorm3d(_InstanceNorm):
    """Instance norm of ``(N, C, D, H, W)`` or ``(C, D, H, W)``.

    >>> import tapegrad as tg
    >>> tg.nn.InstanceNorm3d(1)(tg.randn(1, 1, 2, 3, 3)).shape
    (1, 1, 2, 3, 3)
    """

    _rank = 5
