"""Convolution layers: Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..._tensor import Parameter, Tensor
from ...ops import pad
from .. import functional as F
from .. import init
from .._f_common import check_positive
from .._module import Module
from ._utils import check_dtype, new_param, ntuple

# PyTorch's padding_mode names and numpy's pad modes
_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


class _ConvNd(Module):
    """Shared by the convolutions: arguments, parameters, PyTorch's default init and repr."""

    _nd: int = 2
    _transposed: bool = False
    in_channels: int
    out_channels: int
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...] | str
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    groups: int
    padding_mode: str
    weight: Parameter
    bias: Parameter | None

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
        *,
        output_padding: int | Sequence[int] = 0,
    ) -> None:
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                f"divisible by groups ({groups})"
            )
        if padding_mode != "zeros" and padding_mode not in _PAD_MODES:
            raise ValueError(
                f"{name}: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', "
                f"got {padding_mode!r}"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", name)
        self.stride = ntuple(stride, nd, "stride", name)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"{name}: padding must be 'same', 'valid' or ints, got {padding!r}"
                )
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{name}: padding='same' needs stride 1, got {self.stride}")
            self.padding = padding
        else:
            self.padding = ntuple(padding, nd, "padding", name)
        self.dilation = ntuple(dilation, nd, "dilation", name)
        check_positive(
            name, kernel_size=self.kernel_size, stride=self.stride, dilation=self.dilation
        )
        self.output_padding = ntuple(output_padding, nd, "output_padding", name)
        self.groups = groups
        self.padding_mode = padding_mode
        kw = {"dtype": dtype, "device": device}
        if self._transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = new_param(*shape, **kw)
        self.bias = new_param(out_channels, **kw) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight, bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (kaiming_uniform_, a=sqrt(5)).

        ``fan_in = weight.shape[1] * prod(kernel_size)``, as PyTorch computes it (for a
        transposed convolution that is ``out_channels / groups * prod(kernel_size)``).
        """
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init.calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def _pad_input(self, input: Tensor) -> tuple[Tensor, Any]:
        """For padding modes other than zeros: pad here and convolve without padding."""
        if self.padding_mode == "zeros":
            return input, self.padding
        if self.padding == "same":
            tot = [d * (k - 1) for k, d in zip(self.kernel_size, self.dilation, strict=True)]
            widths = [(t // 2, t - t // 2) for t in tot]
        elif self.padding == "valid":
            return input, 0
        else:
            widths = [(int(p), int(p)) for p in self.padding]
        lead = [(0, 0)] * (input.ndim - self._nd)
        return pad(input, lead + widths, mode=_PAD_MODES[self.padding_mode]), 0

    def _check_input(self, input: Tensor) -> None:
        check_dtype(self, input, self.weight)
        nd = self._nd
        if input.ndim not in (nd + 1, nd + 2) or input.shape[-nd - 1] != self.in_channels:
            raise ValueError(
                f"{type(self).__name__}({self.in_channels}, {self.out_channels}): expected input "
                f"of shape (N, {self.in_channels}, ...) with {nd} spatial dimensions, got "
                f"{input.shape}"
            )

    def extra_repr(self) -> str:
        nd = self._nd
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * nd:
            pad_s = self.padding if isinstance(self.padding, str) else str(self.padding)
            s += f", padding={pad_s}"
        if self.dilation != (1,) * nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    r"""1-D convolution (cross-correlation) of ``(N, C_in, L)`` into ``(N, C_out, L_out)``.

    ``weight`` has shape ``(out_channels, in_channels / groups, kernel_size)`` and ``bias``
    ``(out_channels,)``, both ``U(-k, k)`` with ``k = 1 / sqrt(in_channels / groups *
    kernel_size)``. ``padding`` is an int, ``'same'`` or ``'valid'``; ``padding_mode`` is
    ``'zeros'``, ``'reflect'``, ``'replicate'`` or ``'circular'``.

    >>> import tapegrad as tg
    >>> tg.nn.Conv1d(3, 4, 3, padding=1)(tg.ones((2, 3, 10))).shape
    (2, 4, 10)
    """

    _nd = 1

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        x, padding = self._pad_input(input)
        return F.conv1d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    r"""2-D convolution (cross-correlation) of ``(N, C_in, H, W)`` into ``(N, C_out, H', W')``.

    ``weight`` has shape ``(out_channels, in_channels / groups, kH, kW)`` and ``bias``
    ``(out_channels,)``, both ``U(-k, k)`` with ``k = 1 / sqrt(in_channels / groups * kH * kW)``
    (PyTorch's default). ``H' = (H + 2 padding - dilation (kH - 1) - 1) // stride + 1``.

    >>> import tapegrad as tg
    >>> conv = tg.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    >>> conv(tg.ones((2, 3, 16, 16))).shape, conv.weight.shape
    ((2, 8, 8, 8), (8, 3, 3, 3))
    """

    _nd = 2

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        x, padding = self._pad_input(input)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        if padding_mode != "zeros":
            raise ValueError(
                f"{type(self).__name__}: only padding_mode='zeros' is supported (as PyTorch)"
            )
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be ints, got {padding!r}")
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            padding_mode, device, dtype, output_padding=output_padding,
        )  # fmt: skip

    def _output_padding(self, input: Tensor, output_size: Sequence[int] | None) -> tuple[int, ...]:
        """The output_padding that gives ``output_size`` (PyTorch's rule), or the fixed one."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        size = tuple(int(s) for s in output_size)[-nd:]
        if len(size) != nd:
            raise ValueError(
                f"{type(self).__name__}: output_size must have {nd} (or {nd + 2}) entries, got "
                f"{tuple(output_size)}"
            )
        out = []
        for i in range(nd):
            n_in = input.shape[input.ndim - nd + i]
            smallest = (
                (n_in - 1) * self.stride[i]
                - 2 * int(self.padding[i])
                + self.dilation[i] * (self.kernel_size[i] - 1)
                + 1
            )
            largest = smallest + self.stride[i] - 1
            if not smallest <= size[i] <= largest:
                raise ValueError(
                    f"{type(self).__name__}: output_size {size} is not reachable from input "
                    f"{input.shape}: dimension {i} must lie in [{smallest}, {largest}]"
                )
            out.append(size[i] - smallest)
        return tuple(out)


class ConvTranspose1d(_ConvTransposeNd):
    r"""Transposed 1-D convolution (the gradient of Conv1d with respect to its input).

    ``weight`` has shape ``(in_channels, out_channels / groups, kernel_size)``; init as Conv1d
    with ``fan_in = out_channels / groups * kernel_size`` (PyTorch's rule).

    >>> import tapegrad as tg
    >>> tg.nn.ConvTranspose1d(4, 2, 3, stride=2)(tg.ones((1, 4, 5))).shape
    (1, 2, 11)
    """

    _nd = 1

    def forward(self, input: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        self._check_input(input)
        return F.conv_transpose1d(
            input, self.weight, self.bias, self.stride, self.padding,
            self._output_padding(input, output_size), self.groups, self.dilation,
        )  # fmt: skip


class ConvTranspose2d(_ConvTransposeNd):
    r"""Transposed 2-D convolution (the gradient of Conv2d with respect to its input).

    ``weight`` has shape ``(in_channels, out_channels / groups, kH, kW)`` and ``bias``
    ``(out_channels,)``, both ``U(-k, k)`` with ``k = 1 / sqrt(out_channels / groups * kH * kW)``
    (PyTorch computes fan_in from the weight's second axis). The output size is
    ``(H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1``; ``output_size=``
    in forward picks the output_padding that reaches it.

    >>> import tapegrad as tg
    >>> up = tg.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)
    >>> up(tg.ones((1, 4, 5, 5)), output_size=(10, 10)).shape
    (1, 2, 10, 10)
    """

    _nd = 2

    def forward(self, input: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        self._check_input(input)
        return F.conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding,
            self._output_padding(input, output_size), self.groups, self.dilation,
        )  # fmt: skip
