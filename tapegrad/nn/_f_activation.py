"""Activations under their ``torch.nn.functional`` names (compositions of tapegrad ops).

``inplace=`` is accepted for signature compatibility and ignored: tapegrad never mutates an
input that a tape may have saved, so every function returns a new tensor.
"""

from __future__ import annotations

import warnings
from typing import Any

from .._amp import upper
from .._dtypes import as_dtype
from .._tensor import Tensor
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _shape as S
from ..ops import _softmax as SM
from ._f_common import float_input

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def relu(input: Any, inplace: bool = False) -> Tensor:
    """``max(x, 0)``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.relu(tg.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    return E.relu(input)


def hardtanh(
    input: Any, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """``x`` clamped to ``[min_val, max_val]``; zero gradient outside and on the bounds
    (as PyTorch)."""
    x = float_input(input, "hardtanh")
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} is larger than max_val {max_val}")
    return BI.where(x <= min_val, min_val, BI.where(x >= max_val, max_val, x))


def relu6(input: Any, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0)


def gelu(input: Any, approximate: str = "none") -> Tensor:
    """GELU, ``x * Phi(x)``; ``approximate='tanh'`` uses the tanh form.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> round(F.gelu(tg.tensor([1.0])).item(), 4)
    0.8413
    """
    return E.gelu(float_input(input, "gelu"), approximate=approximate)


def silu(input: Any, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    return E.silu(float_input(input, "silu"))


def mish(input: Any, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    x = float_input(input, "mish")
    return x * E.tanh(E.softplus(x))


def sigmoid(input: Any) -> Tensor:
    """``1 / (1 + exp(-x))``, without overflow for large ``|x|``."""
    return E.sigmoid(input)


def tanh(input: Any) -> Tensor:
    """Hyperbolic tangent."""
    return E.tanh(input)


def hardsigmoid(input: Any, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``."""
    return relu6(float_input(input, "hardsigmoid") + 3.0) * (1.0 / 6.0)


def hardswish(input: Any, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``."""
    x = float_input(input, "hardswish")
    return x * hardsigmoid(x)


def logsigmoid(input: Any) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, stable for large ``|x|``."""
    return -E.softplus(-float_input(input, "logsigmoid"))


def softsign(input: Any) -> Tensor:
    """``x / (1 + |x|)``."""
    x = float_input(input, "softsign")
    return x / (E.abs(x) + 1.0)


def tanhshrink(input: Any) -> Tensor:
    """``x - tanh(x)``."""
    x = float_input(input, "tanhshrink")
    return x - E.tanh(x)


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where positive, else ``negative_slope * x``."""
    return E.leaky_relu(float_input(input, "leaky_relu"), negative_slope)


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, else ``alpha * (exp(x) - 1)``."""
    return E.elu(float_input(input, "elu"), alpha)


def selu(input: Any, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return E.elu(float_input(input, "selu"), _SELU_ALPHA) * _SELU_SCALE


def celu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, else ``alpha * (exp(x / alpha) - 1)``."""
    x = float_input(input, "celu")
    if alpha == 0:
        raise ValueError("celu: alpha must be non-zero")
    return BI.where(x > 0, x, E.expm1(BI.where(x > 0, 0.0, x) * (1.0 / alpha)) * alpha)


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""
    return E.softplus(float_input(input, "softplus"), beta=beta, threshold=threshold)


def prelu(input: Any, weight: Any) -> Tensor:
    """``x`` where positive, else ``weight * x``; ``weight`` has 1 or C (channel axis 1) entries."""
    x = float_input(input, "prelu")
    w = float_input(weight, "prelu", "weight")
    if w.size != 1:
        c = x.shape[1] if x.ndim >= 2 else x.shape[0]
        if w.size != c:
            raise ValueError(
                f"prelu: weight has {w.size} entries, the input {x.shape} has {c} channels "
                "(axis 1); give 1 or one per channel"
            )
        if x.ndim >= 2:
            w = S.reshape(w, (1, c) + (1,) * (x.ndim - 2))
    else:
        w = S.reshape(w, ())
    return BI.where(x > 0, x, w * x)


def glu(input: Any, dim: int = -1) -> Tensor:
    """Gated linear unit: ``a * sigmoid(b)`` with ``a, b`` the halves of ``x`` along ``dim``."""
    x = float_input(input, "glu")
    if x.shape[dim] % 2:
        raise ValueError(f"glu: dimension {dim} of {x.shape} has odd size; it must split in half")
    a, b = S.split(x, 2, axis=dim)
    return a * E.sigmoid(b)


def _softmax_dim(x: Tensor, dim: int | None, name: str) -> int:
    if dim is not None:
        return dim
    warnings.warn(
        f"{name}: implicit dimension choice is deprecated (as in PyTorch); pass dim=",
        UserWarning,
        stacklevel=3,
    )
    return 0 if x.ndim in (0, 1, 3) else 1


def _cast(x: Any, dtype: Any, op: str) -> Tensor:
    x = float_input(x, op) if dtype is None else S.astype(x, as_dtype(dtype))
    return x


@upper
def softmax(input: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``; ``dtype`` casts the input first.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.softmax(tg.tensor([[0.0, 0.0]]), dim=1).tolist()
    [[0.5, 0.5]]
    """
    x = _cast(input, dtype, "softmax")
    return SM.softmax(x, axis=_softmax_dim(x, dim, "softmax"))


@upper
def softmin(input: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """``softmax(-x)`` along ``dim``."""
    x = _cast(input, dtype, "softmin")
    return SM.softmax(-x, axis=_softmax_dim(x, dim, "softmin"))


@upper
def log_softmax(
    input: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None
) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``, stable for large logits."""
    x = _cast(input, dtype, "log_softmax")
    return SM.log_softmax(x, axis=_softmax_dim(x, dim, "log_softmax"))


def hardshrink(input: Any, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.hardshrink(tg.tensor([-1.0, 0.2, 0.75])).tolist()
    [-1.0, 0.0, 0.75]
    """
    x = float_input(input, "hardshrink")
    return BI.where(E.abs(x) > lambd, x, 0.0)


def softshrink(input: Any, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.softshrink(tg.tensor([-1.0, 0.2, 1.5])).tolist()
    [-0.5, 0.0, 1.0]
    """
    x = float_input(input, "softshrink")
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
    return BI.where(x > lambd, x - lambd, BI.where(x < -lambd, x + lambd, 0.0))


def threshold(input: Any, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, else ``value``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.threshold(tg.tensor([0.5, 2.0]), 1.0, -1.0).tolist()
    [-1.0, 2.0]
    """
    x = float_input(input, "threshold")
    return BI.where(x > threshold, x, value)
