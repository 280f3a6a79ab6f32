"""Activation layers (PyTorch's names and arguments), built on tapegrad's elementwise ops:
the rectifiers, sigmoids, softmaxes, shrink and threshold forms."""

from __future__ import annotations

from typing import Any

from ..._tensor import Parameter, Tensor
from .. import functional as F
from .. import init
from .._module import Module
from ._utils import new_param


class ReLU(Module):
    """``max(0, x)``. ``inplace`` is accepted for PyTorch compatibility; tapegrad never mutates.

    >>> import tapegrad as tg
    >>> tg.nn.ReLU()(tg.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """

    inplace: bool

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """``x`` for ``x > 0``, else ``negative_slope * x``.

    >>> import tapegrad as tg
    >>> tg.nn.LeakyReLU(0.5)(tg.tensor([-1.0, 2.0])).tolist()
    [-0.5, 2.0]
    """

    negative_slope: float
    inplace: bool

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class PReLU(Module):
    """LeakyReLU with a learned slope: ``x`` for ``x > 0``, else ``a * x``.

    ``weight`` (the slopes ``a``) has shape ``(num_parameters,)``, initialised to ``init``;
    with ``num_parameters > 1`` there is one slope per channel (dimension 1 of the input).
    (PyTorch's attribute ``num_parameters`` hides ``Module.num_parameters()`` on this layer;
    count its parameters with ``sum(p.size for p in prelu.parameters())``.)

    >>> import tapegrad as tg
    >>> tg.nn.PReLU()(tg.tensor([-2.0, 3.0])).tolist()
    [-0.5, 3.0]
    """

    num_parameters: int  # type: ignore[assignment]
    init: float
    weight: Parameter

    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype: Any = None
    ) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = new_param(num_parameters, dtype=dtype, device=device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``weight = init``."""
        init.constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:
        if self.num_parameters > 1 and (input.ndim < 2 or input.shape[1] != self.num_parameters):
            raise ValueError(
                f"PReLU(num_parameters={self.num_parameters}): input has shape {input.shape}; "
                f"dimension 1 (channels) must be {self.num_parameters}"
            )
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class ELU(Module):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""

    alpha: float
    inplace: bool

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class GELU(Module):
    """``x * Phi(x)`` (``approximate='none'``) or its tanh approximation (``'tanh'``).

    >>> import tapegrad as tg
    >>> round(tg.nn.GELU()(tg.tensor([1.0])).item(), 4)
    0.8413
    """

    approximate: str

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)`` (swish)."""

    inplace: bool

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.silu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    def forward(self, input: Tensor) -> Tensor:
        return F.sigmoid(input)


class Tanh(Module):
    """``tanh(x)``."""

    def forward(self, input: Tensor) -> Tensor:
        return F.tanh(input)


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold``."""

    beta: float
    threshold: float

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, beta=self.beta, threshold=self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


def _softmax_dim(ndim: int, dim: int | None) -> int:
    # PyTorch's legacy rule when dim is None: dim 0 for 0-, 1- and 3-D inputs, else dim 1
    if dim is not None:
        return dim
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """``exp(x) / sum(exp(x))`` along ``dim``.

    >>> import tapegrad as tg
    >>> tg.nn.Softmax(dim=-1)(tg.tensor([[0.0, 0.0]])).tolist()
    [[0.5, 0.5]]
    """

    dim: int | None

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, dim=_softmax_dim(input.ndim, self.dim))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``x - logsumexp(x)`` along ``dim``."""

    dim: int | None

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, dim=_softmax_dim(input.ndim, self.dim))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class ReLU6(Module):
    """``min(max(0, x), 6)`` (MobileNet).

    >>> import tapegrad as tg
    >>> tg.nn.ReLU6()(tg.tensor([-1.0, 3.0, 9.0])).tolist()
    [0.0, 3.0, 6.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.relu6(input)


class Hardtanh(Module):
    """``x`` clamped to ``[min_val, max_val]``.

    >>> import tapegrad as tg
    >>> tg.nn.Hardtanh()(tg.tensor([-2.0, 0.5])).tolist()
    [-1.0, 0.5]
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.hardtanh(input, self.min_val, self.max_val)


class Hardsigmoid(Module):
    """``relu6(x + 3) / 6`` (MobileNetV3).

    >>> import tapegrad as tg
    >>> tg.nn.Hardsigmoid()(tg.tensor([0.0])).tolist()
    [0.5]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.hardsigmoid(input)


class Hardswish(Module):
    """``x * relu6(x + 3) / 6`` (MobileNetV3).

    >>> import tapegrad as tg
    >>> tg.nn.Hardswish()(tg.tensor([3.0])).tolist()
    [3.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.hardswish(input)


class Mish(Module):
    """``x * tanh(softplus(x))``.

    >>> import tapegrad as tg
    >>> tg.nn.Mish()(tg.tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.mish(input)


class SELU(Module):
    """Scaled ELU with the self-normalising constants.

    >>> import tapegrad as tg
    >>> tg.nn.SELU()(tg.tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.selu(input)


class CELU(Module):
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``.

    >>> import tapegrad as tg
    >>> tg.nn.CELU()(tg.tensor([1.0])).tolist()
    [1.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.celu(input, self.alpha)


class GLU(Module):
    """Gated linear unit: the first half of ``dim`` times the sigmoid of the second.

    >>> import tapegrad as tg
    >>> tg.nn.GLU()(tg.tensor([[1.0, 2.0, 0.0, 0.0]])).tolist()  # [1, 2] * sigmoid([0, 0])
    [[0.5, 1.0]]
    """

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.glu(input, self.dim)


class LogSigmoid(Module):
    """``log(sigmoid(x))``, stable for large ``|x|``.

    >>> import tapegrad as tg
    >>> round(tg.nn.LogSigmoid()(tg.tensor([0.0])).item(), 4)
    -0.6931
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.logsigmoid(input)


class Softsign(Module):
    """``x / (1 + |x|)``.

    >>> import tapegrad as tg
    >>> tg.nn.Softsign()(tg.tensor([1.0])).tolist()
    [0.5]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.softsign(input)


class Tanhshrink(Module):
    """``x - tanh(x)``.

    >>> import tapegrad as tg
    >>> tg.nn.Tanhshrink()(tg.tensor([0.0])).tolist()
    [0.0]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.tanhshrink(input)


class Softmin(Module):
    """``softmax(-x)`` along ``dim``.

    >>> import tapegrad as tg
    >>> tg.nn.Softmin(dim=0)(tg.tensor([1.0, 1.0])).tolist()
    [0.5, 0.5]
    """

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmin(input, self.dim)


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
