"""Helpers shared by the functional modules: argument checks and reductions."""

from __future__ import annotations

from typing import Any

from .._backend import np
from .._dtypes import is_float
from .._tensor import Tensor
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops._common import as_tensor

_REDUCTIONS = ("mean", "sum", "none")


def ntuple(value: Any, n: int, name: str, op: str) -> tuple[int, ...]:
    """``value`` (an int or a sequence of ``n`` ints) as a tuple of ``n`` ints, checked."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    t = tuple(value)
    if len(t) == 1:
        t = t * n
    if len(t) != n or not all(isinstance(v, (int, np.integer)) for v in t):
        raise ValueError(f"{op}: {name} must be an int or {n} ints, got {value!r}")
    return tuple(int(v) for v in t)


def check_positive(op: str, **sizes: Any) -> None:
    """A clear error when a window size (kernel_size, stride, dilation) is 0 or negative.

    >>> check_positive("Conv2d", kernel_size=(3, 0))
    Traceback (most recent call last):
    ...
    ValueError: Conv2d: kernel_size must be >= 1 in every dimension, got (3, 0); ...
    """
    for name, v in sizes.items():
        vals = v if isinstance(v, (tuple, list)) else (v,)
        if any(isinstance(x, (int, np.integer)) and x < 1 for x in vals):
            raise ValueError(
                f"{op}: {name} must be >= 1 in every dimension, got {v!r}; a window covers at "
                f"least one element and moves by at least one (e.g. {name}=1)"
            )


def check_eps(eps: Any, op: str) -> None:
    """``eps`` keeps ``1 / sqrt(var + eps)`` finite: it must be a positive number."""
    if not isinstance(eps, (int, float, np.integer, np.floating)) or not eps > 0:
        raise ValueError(
            f"{op}: eps must be a positive number, got {eps!r}; with eps <= 0 a constant "
            "channel (variance 0) divides by zero or takes the root of a negative number. "
            "Use the default 1e-5"
        )


def check_pair(x: Tensor, t: Tensor, op: str) -> None:
    """A clear error when a loss's input and target shapes cannot be matched element by element.

    Shapes that broadcast are left to the loss (it warns, as PyTorch does).

    >>> import tapegrad as tg
    >>> check_pair(tg.zeros((4, 3)), tg.zeros((3, 4)), "mse_loss")
    Traceback (most recent call last):
    ...
    ValueError: mse_loss: input (4, 3) and target (3, 4) do not match and do not broadcast; ...
    """
    if x.shape == t.shape:
        return
    try:
        np.broadcast_shapes(x.shape, t.shape)
    except ValueError:
        hint = (
            f"the target looks transposed: target.T or target.reshape{x.shape}"
            if t.shape == x.shape[::-1]
            else f"give the target the input's shape {x.shape} (reshape, or pick the right column)"
        )
        raise ValueError(
            f"{op}: input {x.shape} and target {t.shape} do not match and do not broadcast; "
            f"a loss compares them element by element, so {hint}"
        ) from None


def float_input(x: Any, op: str, name: str = "input") -> Tensor:
    """``x`` as a float Tensor; a clear error for integer or bool data."""
    t = as_tensor(x)
    if t.dtype.kind != "f" and not is_float(t.dtype):  # is_float: bfloat16 too
        raise TypeError(
            f"{op}: {name} must be a float tensor, got dtype {t.dtype} (shape {t.shape}); "
            "cast it with x.astype(tg.float32)"
        )
    return t


def same_float(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Promote two float tensors to one dtype (float32 with float64 gives float64)."""
    if a.dtype == b.dtype:
        return a, b
    d = np.result_type(a.dtype, b.dtype)
    return S.astype(a, d), S.astype(b, d)


def legacy_reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    """PyTorch's deprecated ``size_average``/``reduce`` pair, mapped to a ``reduction`` string."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def check_reduction(reduction: str, op: str, extra: tuple[str, ...] = ()) -> None:
    """A clear error for a ``reduction`` outside 'mean', 'sum', 'none' (and ``extra``)."""
    if reduction not in _REDUCTIONS + extra:
        allowed = ", ".join(repr(r) for r in _REDUCTIONS + extra)
        raise ValueError(f"{op}: reduction must be one of {allowed}, got {reduction!r}")


def reduce_loss(
    loss: Tensor,
    reduction: str,
    op: str,
    denom: Any = None,
    unbatched: bool = False,
    extra: tuple[str, ...] = (),
) -> Tensor:
    """Apply ``reduction`` to elementwise losses: the one reduction every loss uses.

    ``'none'`` returns them (the batch axis of an unbatched input squeezed away), ``'sum'``
    their sum, ``'mean'`` their mean, or their sum divided by ``denom`` when given (the
    summed weights: a number, or a Tensor when it carries a gradient); a zero denominator,
    or an empty mean, is NaN. Reductions in ``extra`` (kl_div's ``'batchmean'``) are the sum
    divided by ``denom`` (or the sum alone when ``denom`` is None).

    >>> import tapegrad as tg
    >>> reduce_loss(tg.tensor([1.0, 3.0]), "mean", "demo").item()
    2.0
    >>> reduce_loss(tg.tensor([1.0, 3.0]), "mean", "demo", denom=4.0).item()
    1.0
    """
    check_reduction(reduction, op, extra)
    if reduction == "none":
        return S.squeeze(loss, 0) if unbatched else loss
    if reduction == "mean" and denom is None:
        return R.mean(loss) if loss.size else R.sum(loss) * float("nan")
    total = R.sum(loss)
    if reduction == "sum" or denom is None:
        return total
    if isinstance(denom, Tensor):
        return total / denom
    return total * reciprocal(denom)


def reciprocal(denom: Any) -> float:
    """``1 / denom`` for a mean's denominator; NaN for 0 (as PyTorch's 0/0)."""
    d = float(denom)
    return 1.0 / d if d != 0 else float("nan")
