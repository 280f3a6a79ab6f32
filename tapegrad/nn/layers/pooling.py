"""Pooling layers: MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._f_common import check_positive
from .._module import Module


class _MaxPoolNd(Module):
    kernel_size: Any
    stride: Any
    padding: Any
    dilation: Any
    return_indices: bool
    ceil_mode: bool

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        check_positive(
            type(self).__name__, kernel_size=kernel_size, stride=self.stride, dilation=dilation
        )
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """The maximum over windows of ``kernel_size`` along the last axis of ``(N, C, L)``."""

    def forward(self, input: Tensor) -> Any:
        return F.max_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class MaxPool2d(_MaxPoolNd):
    """The maximum over ``kernel_size`` windows of ``(N, C, H, W)`` (stride defaults to the
    kernel size; padding pads with -inf). Ties split the gradient evenly (as torch.amax).

    >>> import tapegrad as tg
    >>> tg.nn.MaxPool2d(2)(tg.arange(16.0).reshape(1, 1, 4, 4)).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """

    def forward(self, input: Tensor) -> Any:
        return F.max_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class _AvgPoolNd(Module):
    kernel_size: Any
    stride: Any
    padding: Any
    ceil_mode: bool
    count_include_pad: bool

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        check_positive(type(self).__name__, kernel_size=kernel_size, stride=self.stride)
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """The mean over windows of ``kernel_size`` along the last axis of ``(N, C, L)``."""

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad,
        )  # fmt: skip


class AvgPool2d(_AvgPoolNd):
    """The mean over ``kernel_size`` windows of ``(N, C, H, W)`` (stride defaults to the kernel
    size). Zero padding counts in the mean unless ``count_include_pad=False``;
    ``divisor_override`` replaces the window size as the divisor.

    >>> import tapegrad as tg
    >>> tg.nn.AvgPool2d(2)(tg.arange(16.0).reshape(1, 1, 4, 4)).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """

    divisor_override: int | None

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip


class AdaptiveAvgPool2d(Module):
    """The mean over windows chosen so that the output is ``output_size`` (an int, a pair, or
    None in a position to keep that input size). ``AdaptiveAvgPool2d(1)`` is global average
    pooling.

    >>> import tapegrad as tg
    >>> tg.nn.AdaptiveAvgPool2d((1, 1))(tg.arange(6.0).reshape(1, 1, 2, 3)).tolist()
    [[[[2.5]]]]
    """

    output_size: Any

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(Module):
    """The maximum over windows chosen so that the output is ``output_size``."""

    output_size: Any
    return_indices: bool

    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input: Tensor) -> Any:
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


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
