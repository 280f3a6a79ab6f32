"""Normalisation layers: BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d, LayerNorm, GroupNorm,
RMSNorm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._creation import ones, zeros
from ..._tensor import Parameter, Tensor
from ...ops._norm import increment_
from .. import functional as F
from .. import init
from .._f_common import check_eps
from .._module import Module
from ._utils import check_dtype, new_param


class _NormBase(Module):
    """The state of BatchNorm and InstanceNorm: an optional affine map and optional running
    statistics, allocated and reset here (PyTorch's ``_NormBase``)."""

    num_features: int
    eps: float
    momentum: float | None
    affine: bool
    track_running_stats: bool
    weight: Parameter | None
    bias: Parameter | None
    running_mean: Tensor | None
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        num_features: int,
        eps: float,
        momentum: float | None,
        affine: bool,
        track_running_stats: bool,
        device: Any = None,
        dtype: Any = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self.weight = new_param(num_features, **kw) if affine else None
        self.bias = new_param(num_features, **kw) if affine and bias else None
        if track_running_stats:
            self.running_mean = zeros(num_features, **kw)
            self.running_var = ones(num_features, **kw)
            self.num_batches_tracked = zeros((), dtype="int64", device=device)
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """``running_mean = 0``, ``running_var = 1``, ``num_batches_tracked = 0``."""
        if self.track_running_stats:
            init.zeros_(self.running_mean)  # type: ignore[arg-type]
            init.ones_(self.running_var)  # type: ignore[arg-type]
            init.zeros_(self.num_batches_tracked)  # type: ignore[arg-type]

    def reset_parameters(self) -> None:
        """Running statistics reset; ``weight = 1``, ``bias = 0``."""
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)


class _BatchNorm(_NormBase):
    """Shared by BatchNorm1d and BatchNorm2d; subclasses say which input ranks they take."""

    _ranks: tuple[int, ...] = ()

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        check_eps(eps, type(self).__name__)
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias
        )

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in self._ranks:
            want = " or ".join(f"{r}D" for r in self._ranks)
            raise ValueError(
                f"{type(self).__name__}({self.num_features}): expected {want} input, got shape "
                f"{input.shape}"
            )
        check_dtype(self, input, self.weight)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.num_batches_tracked is not None:
            increment_(self.num_batches_tracked)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked._data)
        # batch statistics while training, or always when no running statistics are kept
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    r"""Batch normalisation of ``(N, C)`` or ``(N, C, L)`` inputs, per channel ``C``.

    ``y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias``, with batch statistics (biased
    variance) while training and the running statistics in eval mode. While training,
    ``running = (1 - momentum) * running + momentum * batch`` (the unbiased variance), or the
    cumulative average when ``momentum=None``; ``num_batches_tracked`` counts the steps.
    ``weight`` starts at 1 and ``bias`` at 0.

    >>> import tapegrad as tg
    >>> bn = tg.nn.BatchNorm1d(2)
    >>> y = bn(tg.tensor([[1.0, 2.0], [3.0, 6.0]]))
    >>> [round(v, 4) for v in bn.running_mean.tolist()], int(bn.num_batches_tracked.item())
    ([0.2, 0.4], 1)
    """

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    r"""Batch normalisation of ``(N, C, H, W)`` inputs, per channel ``C`` (as BatchNorm1d).

    >>> import tapegrad as tg
    >>> tg.nn.BatchNorm2d(3)(tg.randn(4, 3, 5, 5)).shape
    (4, 3, 5, 5)
    """

    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of ``(N, C, D, H, W)`` inputs, per channel ``C`` (as BatchNorm1d)."""

    _ranks = (5,)


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(n) for n in normalized_shape)


class LayerNorm(Module):
    r"""Normalise over the trailing ``normalized_shape`` dimensions of each sample.

    ``y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias`` (biased variance); ``weight``
    (ones) and ``bias`` (zeros) have shape ``normalized_shape``.

    >>> import tapegrad as tg
    >>> ln = tg.nn.LayerNorm(3)
    >>> [round(v, 4) for v in ln(tg.tensor([1.0, 2.0, 3.0])).tolist()]
    [-1.2247, 0.0, 1.2247]
    """

    normalized_shape: tuple[int, ...]
    eps: float
    elementwise_affine: bool
    weight: Parameter | None
    bias: Parameter | None

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = {"dtype": dtype, "device": device}
        self.weight = new_param(*self.normalized_shape, **kw) if elementwise_affine else None
        self.bias = new_param(*self.normalized_shape, **kw) if elementwise_affine and bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight = 1``, ``bias = 0``."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        check_dtype(self, input, self.weight)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class GroupNorm(Module):
    r"""Normalise ``(N, C, ...)`` over groups of ``C / num_groups`` channels (and all positions).

    ``y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias`` per sample and group; ``weight``
    (ones) and ``bias`` (zeros) are per channel, shape ``(num_channels,)``.

    >>> import tapegrad as tg
    >>> tg.nn.GroupNorm(2, 4)(tg.randn(3, 4, 5)).shape
    (3, 4, 5)
    """

    num_groups: int
    num_channels: int
    eps: float
    affine: bool
    weight: Parameter | None
    bias: Parameter | None

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                f"({num_groups})"
            )
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        kw = {"dtype": dtype, "device": device}
        self.weight = new_param(num_channels, **kw) if affine else None
        self.bias = new_param(num_channels, **kw) if affine and bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight = 1``, ``bias = 0``."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        check_dtype(self, input, self.weight)
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )


class RMSNorm(Module):
    r"""``y = x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims.

    ``eps=None`` uses the machine epsilon of the input's dtype (as PyTorch); ``weight`` starts
    at 1.

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.nn.RMSNorm(2)(tg.tensor([3.0, 4.0])).tolist()]
    [0.8485, 1.1314]
    """

    normalized_shape: tuple[int, ...]
    eps: float | None
    elementwise_affine: bool
    weight: Parameter | None

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = {"dtype": dtype, "device": device}
        self.weight = new_param(*self.normalized_shape, **kw) if elementwise_affine else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight = 1``."""
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input: Tensor) -> Tensor:
        check_dtype(self, input, self.weight)
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


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
