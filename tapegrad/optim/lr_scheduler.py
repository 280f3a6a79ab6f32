"""Scheduler objects mirroring ``torch.optim.lr_scheduler``: ``step()``, ``get_last_lr()``,
``state_dict()``.

Each one evaluates a pure function from :mod:`tapegrad.optim.schedules` at its step count and
writes the result into the optimizer's groups (closed forms: one scheduler drives one
optimizer; to combine schedules, write the combination as a function and use
:class:`LambdaLR`). As in PyTorch, creating a scheduler sets the lr for step 0, and each
``step()`` (after ``optimizer.step``) moves to the next step.

>>> import tapegrad as tg
>>> opt = tg.optim.SGD([tg.Parameter(tg.zeros(1))], lr=1.0)
>>> sched = tg.optim.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(5):
...     lrs.append(sched.get_last_lr()[0])
...     sched.step()
>>> lrs
[1.0, 1.0, 0.5, 0.5, 0.25]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import schedules as S
from ._optimizer import Optimizer

__all__ = [
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "StepLR",
    "WarmupCosine",
]


class LRScheduler:
    """Base class: holds the optimizer, the base lrs and the step count (``last_epoch``).

    Subclasses implement ``lr_at(base_lr, step) -> float``.
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"{type(self).__name__}: expected a tapegrad optimizer, got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(
                        f"{type(self).__name__}: last_epoch={last_epoch} resumes a schedule, but "
                        f"param group {i} has no 'initial_lr'; load the optimizer's state dict "
                        "first, or start with last_epoch=-1"
                    )
        self.base_lrs: list[float] = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = []
        self.step()

    def lr_at(self, base_lr: float, step: int) -> float:
        """The learning rate at ``step`` for a group whose base lr is ``base_lr``."""
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        """The learning rates for the current step, one per parameter group."""
        return [self.lr_at(b, self.last_epoch) for b in self.base_lrs]

    def step(self) -> None:
        """Advance one step and write the new learning rates into the optimizer."""
        self.last_epoch += 1
        lrs = self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        self._last_lr = lrs

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` (or the constructor) set."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer and functions (JSON-able numbers and lists)."""
        return {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in self.__dict__.items()
            if k != "optimizer" and not callable(v) and k != "lr_lambdas"
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from ``state_dict()``: only the keys it returns, each of its type.

        An unknown key (the optimizer, another scheduler's settings) raises ``KeyError``, a
        value of the wrong type (a string where a number was, per-group lists of the wrong
        length) ``ValueError``, before anything changes.

        >>> import tapegrad as tg
        >>> opt = tg.optim.SGD([tg.Parameter(tg.zeros(1))], lr=1.0)
        >>> sched = tg.optim.StepLR(opt, step_size=2)
        >>> sched.load_state_dict({"optimizer": None})
        Traceback (most recent call last):
        ...
        KeyError: "StepLR.load_state_dict: unknown keys ['optimizer']; StepLR's state has ...
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict):
            raise ValueError(
                f"{name}.load_state_dict: expected a dict, got {type(state_dict).__name__}"
            )
        own = self.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise KeyError(
                f"{name}.load_state_dict: unknown keys {unknown}; {name}'s state has "
                f"{sorted(own)} (was the state saved from another kind of scheduler?)"
            )
        n = len(self.optimizer.param_groups)
        new = {}
        for k, v in state_dict.items():
            cur = self.__dict__[k]
            ok = _same_kind(cur, v)
            if ok and k in ("base_lrs", "_last_lr") and len(v) != n:
                ok = False
            if not ok:
                shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:60] + "..."
                raise ValueError(
                    f"{name}.load_state_dict: '{k}' is {shown}, expected a value like {cur!r}"
                )
            new[k] = type(cur)(v) if isinstance(cur, (list, tuple)) else v
        self.__dict__.update(new)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_kind(cur: Any, v: Any) -> bool:
    """Whether a loaded value ``v`` may replace ``cur`` (numbers, bools, strings, None, lists
    of numbers; an int stays an int)."""
    if isinstance(cur, bool) or cur is None or isinstance(cur, str):
        return type(v) is type(cur)
    if isinstance(cur, int):
        return isinstance(v, int) and not isinstance(v, bool)
    if isinstance(cur, float):
        return _number(v)
    if isinstance(cur, (list, tuple)):
        return isinstance(v, (list, tuple)) and all(_number(x) for x in v)
    return False


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (step // step_size)`` (see :func:`schedules.step_lr`)."""

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        S.step_lr(0, 1.0, step_size, gamma)  # validate now, not at the first step
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, step: int) -> float:
        return S.step_lr(step, base_lr, self.step_size, self.gamma)


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (milestones passed)`` (see :func:`schedules.multistep_lr`)."""

    def __init__(
        self,
        optimizer: Optimizer,
        milestones: Sequence[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, step: int) -> float:
        return S.multistep_lr(step, base_lr, self.milestones, self.gamma)


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** step`` (see :func:`schedules.exponential_lr`)."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, step: int) -> float:
        return S.exponential_lr(step, base_lr, self.gamma)


class CosineAnnealingLR(LRScheduler):
    """Cosine from ``base_lr`` to ``eta_min`` over ``T_max`` steps
    (see :func:`schedules.cosine_annealing_lr`)."""

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        S.cosine_annealing_lr(0, 1.0, T_max, eta_min)
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, step: int) -> float:
        return S.cosine_annealing_lr(step, base_lr, self.T_max, self.eta_min)


class LinearLR(LRScheduler):
    """A linearly changing factor on the base lr (see :func:`schedules.linear_lr`)."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        S.linear_lr(0, 1.0, start_factor, end_factor, total_iters)
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, step: int) -> float:
        return S.linear_lr(step, base_lr, self.start_factor, self.end_factor, self.total_iters)


class WarmupCosine(LRScheduler):
    """Linear warmup then cosine decay (see :func:`schedules.warmup_cosine`)."""

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_steps: int,
        total_steps: int,
        min_lr: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        S.warmup_cosine(0, 1.0, warmup_steps, total_steps, min_lr)
        self.warmup_steps, self.total_steps, self.min_lr = warmup_steps, total_steps, min_lr
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, step: int) -> float:
        return S.warmup_cosine(step, base_lr, self.warmup_steps, self.total_steps, self.min_lr)


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(step)``; one function, or one per parameter group.

    The functions are not part of ``state_dict()`` (recreate the scheduler with them, then
    load the state).

    >>> import tapegrad as tg
    >>> opt = tg.optim.SGD([tg.Parameter(tg.zeros(1))], lr=0.1)
    >>> sched = tg.optim.LambdaLR(opt, lambda s: 0.5 ** s)
    >>> sched.step(); sched.get_last_lr()
    [0.05]
    """

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        n = len(optimizer.param_groups)
        if callable(lr_lambda):
            self.lr_lambdas = [lr_lambda] * n
        else:
            fns = list(lr_lambda)
            if len(fns) != n:
                raise ValueError(f"LambdaLR: {n} parameter groups but {len(fns)} lr_lambdas")
            self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [b * f(self.last_epoch) for b, f in zip(self.base_lrs, self.lr_lambdas, strict=True)]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (see :func:`schedules.one_cycle_lr`), as torch's OneCycleLR.

    With ``cycle_momentum`` (the default) it also cycles SGD's ``momentum`` or Adam's
    ``beta1`` between ``max_momentum`` and ``base_momentum``
    (:func:`schedules.one_cycle_momentum`). Give ``total_steps``, or ``epochs`` and
    ``steps_per_epoch``.
    """

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        optimizer: Optimizer,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        n = len(optimizer.param_groups)
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or both epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        self.total_steps = int(total_steps)
        self.max_lrs = _per_group("max_lr", max_lr, n)
        self.base_momentums = _per_group("base_momentum", base_momentum, n)
        self.max_momentums = _per_group("max_momentum", max_momentum, n)
        self.pct_start, self.anneal_strategy, self.three_phase = (
            pct_start,
            anneal_strategy,
            three_phase,
        )
        self.div_factor, self.final_div_factor = div_factor, final_div_factor
        self.cycle_momentum = cycle_momentum
        self.use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum and not self.use_beta1 and "momentum" not in optimizer.defaults:
            raise ValueError(
                f"OneCycleLR: {type(optimizer).__name__} has neither momentum nor betas; pass "
                "cycle_momentum=False"
            )
        self._lr(0, 1.0)  # validate the settings now
        if last_epoch == -1:
            for g, m in zip(optimizer.param_groups, self.max_lrs, strict=True):
                g["initial_lr"] = m / div_factor
        super().__init__(optimizer, last_epoch)

    def _lr(self, step: int, max_lr: float) -> float:
        return S.one_cycle_lr(
            step, max_lr, self.total_steps, pct_start=self.pct_start,
            anneal_strategy=self.anneal_strategy, div_factor=self.div_factor,
            final_div_factor=self.final_div_factor, three_phase=self.three_phase,
        )  # fmt: skip

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        lrs = [self._lr(step, m) for m in self.max_lrs]
        if self.cycle_momentum:
            for g, lo, hi in zip(
                self.optimizer.param_groups, self.base_momentums, self.max_momentums, strict=True
            ):
                mom = S.one_cycle_momentum(
                    step, self.total_steps, base_momentum=lo, max_momentum=hi,
                    pct_start=self.pct_start, anneal_strategy=self.anneal_strategy,
                    three_phase=self.three_phase,
                )  # fmt: skip
                if self.use_beta1:
                    g["betas"] = (mom, g["betas"][1])
                else:
                    g["momentum"] = mom
        return lrs


def _per_group(name: str, v: float | Sequence[float], n: int) -> list[float]:
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ValueError(f"OneCycleLR: {n} parameter groups but {len(v)} values of {name}")
        return [float(x) for x in v]
    return [float(v)] * n  # type: ignore[arg-type]
