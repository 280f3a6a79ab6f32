"""Adam and AdamW (torch.optim.Adam / AdamW)."""

from __future__ import annotations

import math
from typing import Any

from .. import _backend as B
from .._backend import np
from .._kernels.registry import SMALLEST, dispatch
from ._optimizer import Optimizer


class Adam(Optimizer):
    r"""Adam (Kingma & Ba), with AMSGrad and L2 or decoupled weight decay.

    For each parameter ``p`` with gradient ``g``, at step ``t = 1, 2, ...`` (``m = v = 0`` at
    the start):

    .. code-block:: text

        g = g + weight_decay * p                       (L2; or p = p * (1 - lr * weight_decay)
                                                        when decoupled_weight_decay, as AdamW)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        v_max = max(v_max, v)                          (amsgrad; then v_max replaces v below)
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    Numerics equal ``torch.optim.Adam`` for the same hyperparameters.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0, -1.0]))
    >>> opt = tg.optim.Adam([w], lr=0.1)
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> opt.step(tape.gradient(loss))
    >>> [round(x, 4) for x in w.tolist()]
    [0.9, -0.9]
    """

    array_state = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

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

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        xp = B.xp_of(p)
        st: dict[str, Any] = {
            "step": 0,
            "exp_avg": xp.zeros_like(p),
            "exp_avg_sq": xp.zeros_like(p),
        }
        if group["amsgrad"]:
            st["max_exp_avg_sq"] = xp.zeros_like(p)
        return st

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] += 1
        if p.size < SMALLEST.get("adam", 0):  # too small for any kernel: no dispatcher
            self.numpy_step(p, g, state, group)
            return
        # one compiled pass on large float parameters (_kernels/optim.py), the same arithmetic
        dispatch("adam", self.numpy_step, p, g, state, group)

    def numpy_step(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        """The update of ``p`` in place at step ``state["step"]`` (already counted), in numpy:
        the reference of the compiled pass."""
        lr, eps = group["lr"], group["eps"]
        beta1, beta2 = group["betas"]
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        d = self.weight_decay(p, g, group)
        s = self.tmp(p, 1)
        m *= beta1
        m += np.multiply(d, 1.0 - beta1, out=s)
        v *= beta2
        np.multiply(d, d, out=s)
        s *= 1.0 - beta2
        v += s
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            if vmax is None:
                vmax = state["max_exp_avg_sq"] = B.xp_of(p).zeros_like(p)
            np.maximum(vmax, v, out=vmax)
            v = vmax
        # lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), with sqrt(bc2) folded into the scalars
        # (one array op fewer)
        bc2_sqrt = math.sqrt(1.0 - beta2**t)
        np.sqrt(v, out=s)
        s += eps * bc2_sqrt
        np.divide(m, s, out=s)
        s *= lr / (1.0 - beta1**t) * bc2_sqrt
        p -= s


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``.

    The same rule as :class:`Adam` with ``decoupled_weight_decay=True``: before the Adam step
    the weights shrink, ``p = p * (1 - lr * weight_decay)``; the gradient is not changed.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.AdamW([w], lr=0.1, weight_decay=0.5)
    >>> opt.step({w: tg.tensor([0.0])})  # no gradient signal: only the decay acts
    >>> round(w.item(), 4)
    0.95
    """

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, decoupled_weight_decay=True)
