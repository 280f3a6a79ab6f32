"""RMSprop (torch.optim.RMSprop)."""

from __future__ import annotations

from typing import Any

from .. import _backend as B
from .._backend import np
from ._optimizer import Optimizer


class RMSprop(Optimizer):
    r"""RMSprop (Hinton), optionally centered and with momentum, as ``torch.optim.RMSprop``.

    For each parameter ``p`` with gradient ``g`` (``v``, ``a`` and ``b`` start at 0):

    .. code-block:: text

        g = g + weight_decay * p                       (L2 penalty)
        v = alpha * v + (1 - alpha) * g * g
        a = alpha * a + (1 - alpha) * g                (centered)
        d = sqrt(v - a * a) + eps   if centered,   else   d = sqrt(v) + eps
        b = momentum * b + g / d;   p = p - lr * b     (momentum > 0)
        p = p - lr * g / d                             (otherwise)

    eps is added outside the square root and ``v`` starts at zero (PyTorch); TensorFlow's
    variant (eps inside, ``v`` starting at one) is not offered.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.RMSprop([w], lr=0.01, alpha=0.99)
    >>> opt.step({w: tg.tensor([2.0])})
    >>> round(w.item(), 4)  # 1 - 0.01 * 2 / sqrt(0.01 * 4)
    0.9
    """

    array_state = ("square_avg", "momentum_buffer", "grad_avg")

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
        )
        super().__init__(params, defaults)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        self._check("alpha", group["alpha"], lo=0.0, hi=1.0)
        self._check("eps", group["eps"], lo=0.0)
        self._check("weight_decay", group["weight_decay"], lo=0.0)
        self._check("momentum", group["momentum"], lo=0.0)

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        xp = B.xp_of(p)
        st: dict[str, Any] = {"step": 0, "square_avg": xp.zeros_like(p)}
        if group["momentum"] > 0:
            st["momentum_buffer"] = xp.zeros_like(p)
        if group["centered"]:
            st["grad_avg"] = xp.zeros_like(p)
        return st

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        mom = group["momentum"]
        state["step"] += 1
        d = self.weight_decay(p, g, group)
        v = state["square_avg"]
        s = self.tmp(p, 1)
        v *= alpha
        np.multiply(d, d, out=s)
        s *= 1.0 - alpha
        v += s
        if group["centered"]:
            a = state.get("grad_avg")
            if a is None:
                a = state["grad_avg"] = B.xp_of(p).zeros_like(p)
            a *= alpha
            a += np.multiply(d, 1.0 - alpha, out=s)
            np.multiply(a, a, out=s)
            np.subtract(v, s, out=s)
            np.sqrt(s, out=s)
        else:
            np.sqrt(v, out=s)
        s += eps
        np.divide(d, s, out=s)  # g / denom
        if mom > 0:
            b = state.get("momentum_buffer")
            if b is None:
                b = state["momentum_buffer"] = B.xp_of(p).zeros_like(p)
            b *= mom
            b += s
            np.multiply(b, lr, out=s)
        else:
            s *= lr
        p -= s
