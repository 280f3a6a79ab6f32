"""Adagrad (torch.optim.Adagrad)."""

from __future__ import annotations

from typing import Any

from .. import _backend as B
from .._backend import np
from ._optimizer import Optimizer


class Adagrad(Optimizer):
    r"""Adagrad (Duchi et al.), as ``torch.optim.Adagrad``.

    For each parameter ``p`` with gradient ``g``, at step ``t = 1, 2, ...`` (the sum ``s``
    starts at ``initial_accumulator_value``):

    .. code-block:: text

        g = g + weight_decay * p                       (L2 penalty)
        lr_t = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g
        p = p - lr_t * g / (sqrt(s) + eps)

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt = tg.optim.Adagrad([w], lr=0.5)
    >>> opt.step({w: tg.tensor([3.0])})
    >>> round(w.item(), 4)  # 1 - 0.5 * 3 / 3
    0.5
    """

    array_state = ("sum",)

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
    ) -> None:
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
        )
        super().__init__(params, defaults)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        self._check("lr_decay", group["lr_decay"], lo=0.0)
        self._check("weight_decay", group["weight_decay"], lo=0.0)
        self._check("initial_accumulator_value", group["initial_accumulator_value"], lo=0.0)
        self._check("eps", group["eps"], lo=0.0)

    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        return {"step": 0, "sum": B.xp_of(p).full_like(p, group["initial_accumulator_value"])}

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, eps = group["lr"], group["eps"]
        state["step"] += 1
        clr = lr / (1.0 + (state["step"] - 1) * group["lr_decay"])
        d = self.weight_decay(p, g, group)
        acc = state["sum"]
        s = self.tmp(p, 1)
        acc += np.multiply(d, d, out=s)
        np.sqrt(acc, out=s)
        s += eps
        np.divide(d, s, out=s)
        s *= clr
        p -= s
