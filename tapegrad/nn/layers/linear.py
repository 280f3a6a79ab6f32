"""Linear layers: Identity, Linear, Bilinear."""

from __future__ import annotations

import math
from typing import Any

from ..._amp import _STATE as _AUTOCAST
from ..._autodiff import apply
from ..._tensor import Parameter, Tensor
from ...ops._linear import LINEAR
from .. import functional as F
from .. import init
from .._f_linear import _plain
from .._module import Module
from ._utils import check_dtype, new_param


class Identity(Module):
    """Returns its input unchanged; arguments are accepted and ignored (as PyTorch).

    >>> import tapegrad as tg
    >>> tg.nn.Identity(54, unused="x")(tg.ones(2)).tolist()
    [1.0, 1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Linear(Module):
    r"""An affine map of the last dimension: ``y = x W^T + b``.

    ``weight`` has shape ``(out_features, in_features)`` and ``bias`` ``(out_features,)``, both
    drawn from ``U(-k, k)`` with ``k = 1 / sqrt(in_features)`` (PyTorch's default:
    ``kaiming_uniform_(weight, a=sqrt(5))`` and a bias bound of ``1 / sqrt(fan_in)``).

    >>> import tapegrad as tg
    >>> lin = tg.nn.Linear(4, 3)
    >>> lin(tg.ones((2, 4))).shape, lin.weight.shape
    ((2, 3), (3, 4))
    """

    in_features: int
    out_features: int
    weight: Parameter
    bias: Parameter | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = new_param(out_features, in_features, dtype=dtype, device=device)
        self.bias = new_param(out_features, dtype=dtype, device=device) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight, bias ~ U(-1/sqrt(in_features), 1/sqrt(in_features))``."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        w, b = self.weight, self.bias
        if _AUTOCAST.dtype is None and _plain(input, w, b):  # F.linear's common case, directly
            return apply(LINEAR, input, w, b)
        if input.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"Linear(in_features={self.in_features}, out_features={self.out_features}): "
                f"input has shape {input.shape}; its last dimension must be {self.in_features}"
            )
        check_dtype(self, input, self.weight)
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Bilinear(Module):
    r"""``y = x1^T A x2 + b``: ``y[..., o] = sum_ij x1[..., i] A[o, i, j] x2[..., j] + b[o]``.

    ``weight`` has shape ``(out_features, in1_features, in2_features)`` and ``bias``
    ``(out_features,)``, both drawn from ``U(-k, k)`` with ``k = 1 / sqrt(in1_features)``.

    >>> import tapegrad as tg
    >>> tg.nn.Bilinear(3, 4, 5)(tg.ones((2, 3)), tg.ones((2, 4))).shape
    (2, 5)
    """

    in1_features: int
    in2_features: int
    out_features: int
    weight: Parameter
    bias: Parameter | None

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        shape = (out_features, in1_features, in2_features)
        self.weight = new_param(*shape, dtype=dtype, device=device)
        self.bias = new_param(out_features, dtype=dtype, device=device) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight, bias ~ U(-1/sqrt(in1_features), 1/sqrt(in1_features))``."""
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        if input1.shape[-1:] != (self.in1_features,) or input2.shape[-1:] != (self.in2_features,):
            raise ValueError(
                f"Bilinear({self.in1_features}, {self.in2_features}, {self.out_features}): inputs "
                f"have shapes {input1.shape} and {input2.shape}; their last dimensions must be "
                f"{self.in1_features} and {self.in2_features}"
            )
        check_dtype(self, input1, self.weight)
        check_dtype(self, input2, self.weight)
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
