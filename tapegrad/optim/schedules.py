"""Learning-rate schedules as pure functions of the step.

Each function maps a step (0, 1, 2, ...) and the schedule's settings to a learning rate, with
the same formulas as ``torch.optim.lr_scheduler`` (closed forms). Use them directly
(``group["lr"] = cosine_annealing_lr(step, 0.1, T_max=100)``), through
:class:`tapegrad.optim.LambdaLR`, or through the scheduler objects in
:mod:`tapegrad.optim.lr_scheduler`, which call them.

>>> from tapegrad.optim import schedules
>>> [schedules.step_lr(s, 1.0, step_size=2, gamma=0.5) for s in range(5)]
[1.0, 1.0, 0.5, 0.5, 0.25]
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

__all__ = [
    "constant_lr",
    "cosine_annealing_lr",
    "exponential_lr",
    "linear_lr",
    "multistep_lr",
    "one_cycle_lr",
    "one_cycle_momentum",
    "step_lr",
    "warmup_cosine",
]


def _check_step(name: str, step: int) -> None:
    if step < 0:
        raise ValueError(f"{name}: step must be >= 0, got {step}")


def constant_lr(step: int, base_lr: float) -> float:
    """``base_lr`` at every step.

    >>> constant_lr(7, 0.1)
    0.1
    """
    _check_step("constant_lr", step)
    return base_lr


def step_lr(step: int, base_lr: float, step_size: int, gamma: float = 0.1) -> float:
    """``base_lr * gamma ** (step // step_size)`` (torch's StepLR).

    >>> step_lr(25, 1.0, step_size=10, gamma=0.1)
    0.010000000000000002
    """
    _check_step("step_lr", step)
    if step_size <= 0:
        raise ValueError(f"step_lr: step_size must be a positive integer, got {step_size}")
    return base_lr * gamma ** (step // step_size)


def multistep_lr(step: int, base_lr: float, milestones: Sequence[int], gamma: float = 0.1) -> float:
    """``base_lr * gamma ** (number of milestones <= step)`` (torch's MultiStepLR).

    >>> multistep_lr(5, 1.0, milestones=[2, 4], gamma=0.5)
    0.25
    """
    _check_step("multistep_lr", step)
    return base_lr * gamma ** bisect.bisect_right(sorted(milestones), step)


def exponential_lr(step: int, base_lr: float, gamma: float) -> float:
    """``base_lr * gamma ** step`` (torch's ExponentialLR).

    >>> exponential_lr(2, 1.0, gamma=0.5)
    0.25
    """
    _check_step("exponential_lr", step)
    return base_lr * gamma**step


def cosine_annealing_lr(step: int, base_lr: float, T_max: int, eta_min: float = 0.0) -> float:
    """``eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2`` (torch's
    CosineAnnealingLR; past ``T_max`` it rises again, as torch's does).

    >>> cosine_annealing_lr(5, 1.0, T_max=10)
    0.5
    """
    _check_step("cosine_annealing_lr", step)
    if T_max <= 0:
        raise ValueError(f"cosine_annealing_lr: T_max must be positive, got {T_max}")
    return eta_min + (base_lr - eta_min) * (1.0 + math.cos(math.pi * step / T_max)) / 2.0


def linear_lr(
    step: int,
    base_lr: float,
    start_factor: float = 1.0 / 3,
    end_factor: float = 1.0,
    total_iters: int = 5,
) -> float:
    """The factor goes linearly from ``start_factor`` to ``end_factor`` over ``total_iters``
    steps, then stays (torch's LinearLR).

    >>> linear_lr(2, 1.0, start_factor=0.5, end_factor=1.0, total_iters=4)
    0.75
    """
    _check_step("linear_lr", step)
    if not 0.0 < start_factor <= 1.0:
        raise ValueError(f"linear_lr: start_factor must be in (0, 1], got {start_factor}")
    if not 0.0 <= end_factor <= 1.0:
        raise ValueError(f"linear_lr: end_factor must be in [0, 1], got {end_factor}")
    if total_iters <= 0:
        raise ValueError(f"linear_lr: total_iters must be positive, got {total_iters}")
    frac = min(step, total_iters) / total_iters
    return base_lr * (start_factor + (end_factor - start_factor) * frac)


def _anneal(start: float, end: float, pct: float, strategy: str) -> float:
    if strategy == "cos":
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
    return (end - start) * pct + start


def _one_cycle(
    name: str,
    step: int,
    total_steps: int,
    values: Sequence[float],
    *,
    pct_start: float,
    anneal_strategy: str,
    three_phase: bool,
) -> float:
    _check_step(name, step)
    if total_steps <= 0:
        raise ValueError(f"{name}: total_steps must be positive, got {total_steps}")
    if not 0.0 <= pct_start <= 1.0:
        raise ValueError(f"{name}: pct_start must be in [0, 1], got {pct_start}")
    if anneal_strategy not in ("cos", "linear"):
        raise ValueError(
            f"{name}: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
        )
    if step > total_steps:
        raise ValueError(
            f"{name}: tried to step {step} times; the schedule has total_steps={total_steps}"
        )
    if three_phase:
        ends = [pct_start * total_steps - 1, 2 * pct_start * total_steps - 2, total_steps - 1]
    else:
        ends = [pct_start * total_steps - 1, total_steps - 1]
    start = 0.0
    for i, end in enumerate(ends):
        if step <= end or i == len(ends) - 1:
            pct = (step - start) / (end - start)
            return _anneal(values[i], values[i + 1], pct, anneal_strategy)
        start = end
    raise AssertionError("unreachable")


def one_cycle_lr(
    step: int,
    max_lr: float,
    total_steps: int,
    *,
    pct_start: float = 0.3,
    anneal_strategy: str = "cos",
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
    three_phase: bool = False,
) -> float:
    """The 1cycle policy (Smith & Topin; torch's OneCycleLR): from ``max_lr / div_factor`` up
    to ``max_lr`` over the first ``pct_start`` of the steps, then down to
    ``max_lr / div_factor / final_div_factor`` (with ``three_phase``: back to the initial lr
    first, then down).

    >>> round(one_cycle_lr(29, 1.0, total_steps=100), 6)  # the peak: step pct_start*100 - 1
    1.0
    """
    initial = max_lr / div_factor
    values = (
        [initial, max_lr, initial, initial / final_div_factor]
        if three_phase
        else [initial, max_lr, initial / final_div_factor]
    )
    return _one_cycle(
        "one_cycle_lr", step, total_steps, values,
        pct_start=pct_start, anneal_strategy=anneal_strategy, three_phase=three_phase,
    )  # fmt: skip


def one_cycle_momentum(
    step: int,
    total_steps: int,
    *,
    base_momentum: float = 0.85,
    max_momentum: float = 0.95,
    pct_start: float = 0.3,
    anneal_strategy: str = "cos",
    three_phase: bool = False,
) -> float:
    """The momentum (or Adam's beta1) that goes with :func:`one_cycle_lr`: it moves inversely
    to the learning rate, from ``max_momentum`` down to ``base_momentum`` and back.

    >>> round(one_cycle_momentum(29, 100), 6)
    0.85
    """
    values = (
        [max_momentum, base_momentum, max_momentum, max_momentum]
        if three_phase
        else [max_momentum, base_momentum, max_momentum]
    )
    return _one_cycle(
        "one_cycle_momentum", step, total_steps, values,
        pct_start=pct_start, anneal_strategy=anneal_strategy, three_phase=three_phase,
    )  # fmt: skip


def warmup_cosine(
    step: int, base_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0
) -> float:
    """Linear warmup, then cosine decay to ``min_lr`` (the usual transformer schedule).

    For ``step < warmup_steps`` the lr is ``base_lr * (step + 1) / warmup_steps`` (it reaches
    ``base_lr`` on the last warmup step); from ``warmup_steps`` to ``total_steps`` it follows
    half a cosine from ``base_lr`` to ``min_lr``; after ``total_steps`` it stays ``min_lr``.

    >>> [round(warmup_cosine(s, 1.0, warmup_steps=2, total_steps=6), 3) for s in range(8)]
    [0.5, 1.0, 1.0, 0.854, 0.5, 0.146, 0.0, 0.0]
    """
    _check_step("warmup_cosine", step)
    if warmup_steps < 0 or total_steps < warmup_steps:
        raise ValueError(
            "warmup_cosine: need 0 <= warmup_steps <= total_steps, got "
            f"warmup_steps={warmup_steps}, total_steps={total_steps}"
        )
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
