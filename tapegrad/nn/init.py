"""Parameter initialisation, in place, with PyTorch's names, arguments and formulas.

Every function fills a Tensor or Parameter in place (its version goes up, so a tape that saved
it notices), records nothing on any tape, draws from tapegrad's global generator unless
``generator=`` is given, and returns the tensor.

>>> import tapegrad as tg
>>> w = tg.Parameter(tg.empty(256, 128))
>>> _ = tg.nn.init.kaiming_uniform_(w, a=5 ** 0.5)  # Linear's default: U(-1/sqrt(128), 1/sqrt(128))
>>> bool(abs(w).max().item() <= 128 ** -0.5)
True
"""

from __future__ import annotations

import math
from typing import Any

from .. import _backend as B
from .._backend import np
from .._creation import Generator, _rng
from .._tensor import Tensor

__all__ = [
    "calculate_fan_in_and_fan_out",
    "calculate_gain",
    "constant_",
    "dirac_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]


def _check(tensor: Any, op: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"init.{op}: expected a Tensor or Parameter, got {type(tensor).__name__}")
    return tensor


def _fill(tensor: Tensor, values: Any) -> Tensor:
    """Write host values into ``tensor`` in place (cast to its dtype) and bump its version."""
    a = np.asarray(values).astype(tensor.dtype, copy=False)
    data = tensor._data
    if B.device_of(data) != "cpu":
        a = B.to_device(a, B.device_of(data))
    if getattr(getattr(data, "flags", None), "writeable", True):
        data[...] = a
    else:  # a read-only view (e.g. a broadcast): give the tensor its own array
        tensor._data = np.array(np.broadcast_to(a, tensor.shape))
    tensor._version += 1
    return tensor


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for an activation (PyTorch's table).

    linear, conv*, sigmoid: 1; tanh: 5/3; relu: sqrt(2); leaky_relu: sqrt(2 / (1 + slope^2))
    (slope ``param``, default 0.01); selu: 3/4.

    >>> import tapegrad as tg
    >>> round(tg.nn.init.calculate_gain("relu"), 6)
    1.414214
    """
    linear = (
        "linear conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d"
    ).split()
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = float(param)
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(
        f"calculate_gain: unsupported nonlinearity {nonlinearity!r}; use one of linear, "
        "conv1d/2d/3d, conv_transpose1d/2d/3d, sigmoid, tanh, relu, leaky_relu, selu"
    )


def calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight: ``size(1) * receptive``, ``size(0) * receptive``.

    ``receptive`` is the product of the dimensions after the first two (a conv kernel's size).
    """
    if tensor.ndim < 2:
        raise ValueError(
            f"init: fan in and fan out need a tensor with at least 2 dimensions, got shape "
            f"{tensor.shape}; use uniform_/normal_ or constant_ for biases"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(
    tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of ``U(a, b)``."""
    _check(tensor, "uniform_")
    if not a <= b:
        raise ValueError(f"init.uniform_: need a <= b, got a={a}, b={b}")
    return _fill(tensor, _rng(generator).uniform(a, b, tensor.shape))


def normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of ``N(mean, std^2)``."""
    _check(tensor, "normal_")
    if std < 0:
        raise ValueError(f"init.normal_: std must be >= 0, got {std}")
    return _fill(tensor, _rng(generator).normal(mean, std, tensor.shape))


def trunc_normal_(  # noqa: PLR0917 - PyTorch's positional signature
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator: Generator | None = None,
) -> Tensor:
    """Fill with ``N(mean, std^2)`` truncated to ``[a, b]`` (``a`` and ``b`` are absolute values).

    Sampled by the inverse CDF: ``u ~ U(Phi(alpha), Phi(beta))``, ``x = mean + std * Phi^-1(u)``
    with ``alpha, beta = (a - mean) / std, (b - mean) / std``, then clipped to ``[a, b]``.
    """
    _check(tensor, "trunc_normal_")
    if not a < b or std <= 0:
        raise ValueError(f"init.trunc_normal_: need a < b and std > 0, got a={a}, b={b}, std={std}")
    lo = 0.5 * (1.0 + math.erf((a - mean) / std / math.sqrt(2.0)))
    hi = 0.5 * (1.0 + math.erf((b - mean) / std / math.sqrt(2.0)))
    u = _rng(generator).uniform(2 * lo - 1, 2 * hi - 1, tensor.shape)
    x = mean + std * math.sqrt(2.0) * _erfinv(u)
    return _fill(tensor, np.clip(x, a, b))


def _erfinv(y: Any) -> Any:
    """Inverse error function on (-1, 1), Giles' approximation (relative error below 1e-6)."""
    y = np.clip(y, -1 + 1e-15, 1 - 1e-15)
    w = -np.log((1.0 - y) * (1.0 + y))
    central = w < 5.0
    wc = w - 2.5
    pc = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):  # fmt: skip
        pc = c + pc * wc
    wt = np.sqrt(w) - 3.0
    pt = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):  # fmt: skip
        pt = c + pt * wt
    return np.where(central, pc, pt) * y


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    _check(tensor, "constant_")
    return _fill(tensor, np.full(tensor.shape, val))


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1."""
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0."""
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (Linear layers keep their input)."""
    _check(tensor, "eye_")
    if tensor.ndim != 2:
        raise ValueError(f"init.eye_: needs a 2-D tensor, got shape {tensor.shape}")
    return _fill(tensor, np.eye(tensor.shape[0], tensor.shape[1]))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D conv weight with the Dirac delta (the conv keeps its input)."""
    _check(tensor, "dirac_")
    if tensor.ndim not in (3, 4, 5) or tensor.shape[0] % groups:
        raise ValueError(
            f"init.dirac_: needs a 3-5 D weight whose first dimension divides by groups={groups}, "
            f"got shape {tensor.shape}"
        )
    out_per = tensor.shape[0] // groups
    vals = np.zeros(tensor.shape)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per, tensor.shape[1])):
            vals[(g * out_per + d, d, *centre)] = 1.0
    return _fill(tensor, vals)


def xavier_uniform_(
    tensor: Tensor, gain: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Glorot uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    _check(tensor, "xavier_uniform_")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator=generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Glorot normal: ``N(0, std^2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    _check(tensor, "xavier_normal_")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator=generator)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:
    """He uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(3 / fan)``.

    ``gain = calculate_gain(nonlinearity, a)``; ``fan`` is fan_in or fan_out (``mode``).
    ``a=sqrt(5)`` gives PyTorch's Linear/Conv default, ``bound = 1 / sqrt(fan_in)``.
    """
    _check(tensor, "kaiming_uniform_")
    if tensor.size == 0:
        return tensor  # nothing to fill (PyTorch warns and returns)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator=generator)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:
    """He normal: ``N(0, std^2)``, ``std = gain / sqrt(fan)`` (``gain`` as in kaiming_uniform_)."""
    _check(tensor, "kaiming_normal_")
    if tensor.size == 0:
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator=generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """A (semi-)orthogonal matrix times ``gain`` (dimensions after the first are flattened).

    The Q of the QR decomposition of a Gaussian matrix, with signs fixed by ``diag(R)`` so that
    the result is uniformly distributed (Saxe et al. 2013).

    >>> import tapegrad as tg
    >>> w = tg.nn.init.orthogonal_(tg.empty(3, 5))
    >>> bool(abs(w @ w.T - tg.eye(3)).max().item() < 1e-5)
    True
    """
    _check(tensor, "orthogonal_")
    if tensor.ndim < 2:
        raise ValueError(
            f"init.orthogonal_: needs a tensor with at least 2 dimensions, got shape {tensor.shape}"
        )
    if tensor.size == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.size // rows
    flat = _rng(generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).reshape(tensor.shape))
