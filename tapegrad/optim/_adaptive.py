"""Adadelta, Adamax, NAdam and RAdam (torch.optim's, with its arguments and defaults)."""

from __future__ import annotations

import math
from typing import Any

from .. import _backend as B
from .._backend import np
from ._optimizer import Optimizer


class _Betas(Optimizer):
    """The checks shared by the optimizers with ``betas`` and ``eps``."""

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(
                f"{type(self).__name__}: betas must be a pair (beta1, beta2), got {betas!r}"
            )
        group["betas"] = tuple(betas)
        self._check("betas[0]", betas[0], lo=0.0, hi=1.0, hi_open=True)
        self._check("betas[1]", betas[1], lo=0.0, hi=1.0, hi_open=True)
        self._check("eps", group["eps"], lo=0.0)
        self._check("weight_decay", group["weight_decay"], lo=0.0)


class Adadelta(Optimizer):
    r"""Adadelta (Zeiler), as ``torch.optim.Adadelta``.

    For each parameter ``p`` with gradient ``g`` (``v = u = 0`` at the start):

    .. code-block:: text

        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g * g
        delta = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.Adadelta([w])
    >>> opt.step({w: tg.tensor([1.0])})
    >>> round(w.item(), 6)  # the first step is about sqrt(eps / (1 - rho))
    0.996838
    """

    array_state = ("square_avg", "acc_delta")

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        self._check("rho", group["rho"], lo=0.0, hi=1.0)
        self._check("eps", group["eps"], lo=0.0)
        self._check("weight_decay", group["weight_decay"], lo=0.0)

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        xp = B.xp_of(p)
        return {"step": 0, "square_avg": xp.zeros_like(p), "acc_delta": xp.zeros_like(p)}

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        rho, eps = group["rho"], group["eps"]
        state["step"] += 1
        g = self.weight_decay(p, g, group)
        v, u = state["square_avg"], state["acc_delta"]
        v *= rho
        v += (1.0 - rho) * (g * g)
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u *= rho
        u += (1.0 - rho) * (delta * delta)
        p -= group["lr"] * delta


class Adamax(_Betas):
    r"""Adamax (Adam with the infinity norm; Kingma & Ba), as ``torch.optim.Adamax``.

    At step ``t = 1, 2, ...`` (``m = u = 0`` at the start):

    .. code-block:: text

        g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        u = max(beta2 * u, |g| + eps)
        p = p - lr / (1 - beta1**t) * m / u

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.Adamax([w], lr=0.1)
    >>> opt.step({w: tg.tensor([2.0])})
    >>> round(w.item(), 6)
    0.9
    """

    array_state = ("exp_avg", "exp_inf")

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        )

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        xp = B.xp_of(p)
        return {"step": 0, "exp_avg": xp.zeros_like(p), "exp_inf": xp.zeros_like(p)}

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        state["step"] += 1
        g = self.weight_decay(p, g, group)
        m, u = state["exp_avg"], state["exp_inf"]
        m += (1.0 - beta1) * (g - m)  # PyTorch's lerp
        u *= beta2
        np.maximum(u, np.abs(g) + group["eps"], out=u)
        p -= group["lr"] / (1.0 - beta1 ** state["step"]) * (m / u)


class NAdam(_Betas):
    r"""NAdam (Adam with Nesterov momentum; Dozat), as ``torch.optim.NAdam``.

    At step ``t = 1, 2, ...`` (``m = v = 0`` and ``mu_product = 1`` at the start):

    .. code-block:: text

        g = g + weight_decay * p                   (or p = p * (1 - lr * weight_decay) when
                                                    decoupled_weight_decay)
        mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
        mu_product = mu_product * mu_t
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        d = sqrt(v / (1 - beta2**t)) + eps
        p = p - lr * (1 - mu_t) / (1 - mu_product) * g / d
              - lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / d

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.NAdam([w], lr=0.1)
    >>> opt.step({w: tg.tensor([2.0])})
    >>> round(w.item(), 4)
    0.8944
    """

    array_state = ("exp_avg", "exp_avg_sq")
    scalar_state = ("mu_product",)

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        self._check("momentum_decay", group["momentum_decay"], lo=0.0)

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        xp = B.xp_of(p)
        return {
            "step": 0,
            "mu_product": 1.0,
            "exp_avg": xp.zeros_like(p),
            "exp_avg_sq": xp.zeros_like(p),
        }

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, eps, psi = group["lr"], group["eps"], group["momentum_decay"]
        beta1, beta2 = group["betas"]
        state["step"] += 1
        t = state["step"]
        g = self.weight_decay(p, g, group)
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (t * psi)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((t + 1) * psi)))
        # a float32 product, as PyTorch keeps it (a float64 one differs by ~1e-9 in 50 steps)
        state["mu_product"] = float(np.float32(state["mu_product"]) * np.float32(mu))
        mu_product = state["mu_product"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m += (1.0 - beta1) * (g - m)  # PyTorch's lerp
        v *= beta2
        v += (1.0 - beta2) * (g * g)
        d = np.sqrt(v / (1.0 - beta2**t)) + eps
        p += (-lr * (1.0 - mu) / (1.0 - mu_product)) * (g / d)
        p += (-lr * mu_next / (1.0 - mu_product * mu_next)) * (m / d)


class RAdam(_Betas):
    r"""RAdam (rectified Adam; Liu et al.), as ``torch.optim.RAdam``.

    At step ``t = 1, 2, ...`` (``m = v = 0`` at the start), with
    ``rho_inf = 2 / (1 - beta2) - 1``:

    .. code-block:: text

        g = g + weight_decay * p                   (or p = p * (1 - lr * weight_decay) when
                                                    decoupled_weight_decay)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)
        if rho_t > 5:
            r = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2) rho_t))
            p = p - lr * m / (1 - beta1**t) * r * sqrt(1 - beta2**t) / (sqrt(v) + eps)
        else:
            p = p - lr * m / (1 - beta1**t)

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.RAdam([w], lr=0.1)
    >>> opt.step({w: tg.tensor([2.0])})  # early steps are SGD with momentum
    >>> round(w.item(), 4)
    0.8
    """

    array_state = ("exp_avg", "exp_avg_sq")

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        xp = B.xp_of(p)
        return {"step": 0, "exp_avg": xp.zeros_like(p), "exp_avg_sq": xp.zeros_like(p)}

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, eps = group["lr"], group["eps"]
        beta1, beta2 = group["betas"]
        state["step"] += 1
        t = state["step"]
        g = self.weight_decay(p, g, group)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m += (1.0 - beta1) * (g - m)  # PyTorch's lerp
        v *= beta2
        v += (1.0 - beta2) * (g * g)
        bc1, bc2 = 1.0 - beta1**t, 1.0 - beta2**t
        step = m / bc1 * lr
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * t * (beta2**t) / bc2
        if rho_t > 5.0:
            rect = math.sqrt(
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            )
            step = step * (math.sqrt(bc2) / (np.sqrt(v) + eps)) * rect
        p -= step
