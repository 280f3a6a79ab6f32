"""More activation layers (PyTorch's names and arguments) over ``F``'s functional forms."""

from __future__ import annotations

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


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
