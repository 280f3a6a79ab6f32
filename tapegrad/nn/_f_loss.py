"""Losses: plain functions sharing one ``reduction`` vocabulary ('mean', 'sum', 'none').

Classification losses are built on log-softmax with the max subtracted first, so logits
shifted by 1e4 give the same loss. ``cross_entropy`` with class indices, with probability
targets, binary cross-entropy (with logits too) and ``mse_loss`` run on the fused primitives
of ``ops/_loss.py`` where they cover the call; the rest are compositions of tapegrad ops.
"""


from __future__ import annotations

import warnings
from typing import Any

from .._amp import upper
from .._autodiff import apply, is_capturing
from .._backend import np, xp_of
from .._tensor import Tensor, _wrap
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops import _softmax as SM
from ..ops._common import ArgumentError
from ..ops._loss import (
    BCE,
    BCE_LOGITS,
    CE,
    CE_PROBS,
    PICK,
    ce_targets,
    outside_unit,
)
from ..ops._take import take
from ._f_common import (
    check_pair,
    check_reduction,
    float_input,
    legacy_reduction,
    reciprocal,
    reduce_loss,
    same_float,
)

# --------------------------------------------------------------------------------------------
# class-index targets: shared checks and the weighted reductions
# --------------------------------------------------------------------------------------------


def _class_target(x: Tensor, target: Any, op: str) -> tuple[Tensor, Any, bool]:
    """(N, C, d1, ...) input and (N, d1, ...) integer targets; (C,) with a scalar is unbatched."""
    t = target._data if isinstance(target, Tensor) else np.asarray(target)
    if x.ndim == 1:
        x = S.expand_dims(x, 0)
        t = t.reshape(1) if t.ndim == 0 else t
        unbatched = True
    else:
        unbatched = False
    if x.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C, ...) or (C,), got shape {x.shape}")
    expected = (x.shape[0],) + x.shape[2:]
    if t.shape != expected:
        raise ValueError(
            f"{op}: target of shape {t.shape} does not match input {x.shape}; class-index "
            f"targets must have shape {expected} (the input without its class axis 1)"
        )
    return x, t, unbatched


def _valid_and_weights(
    t: Any, c: int, weight: Any, ignore_index: int, dtype: Any, op: str
) -> tuple[Any, Any, Any]:
    """Targets made safe to index, the validity mask and the per-position weights (arrays)."""
    valid = t != ignore_index
    tv = t[valid]
    if tv.size and (tv.min() < 0 or tv.max() >= c):
        bad = tv[(tv < 0) | (tv >= c)][0]
        raise IndexError(
            f"{op}: target {int(bad)} is out of bounds for {c} classes (valid: 0..{c - 1}, or "
            f"ignore_index={ignore_index})"
        )
    safe = xp_of(t).where(valid, t, 0).astype(np.int64, copy=False)
    vmask = valid.astype(dtype)
    if weight is None:
        return safe, vmask, vmask
    w = weight._data if isinstance(weight, Tensor) else np.asarray(weight)
    if w.shape != (c,):
        raise ValueError(f"{op}: weight must have shape ({c},) (one per class), got {w.shape}")
    return safe, vmask, w.astype(dtype, copy=False)[safe] * vmask


@upper
def nll_loss(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of class indices given log-probabilities (N, C, ...).

    ``'mean'`` divides by the summed weights of the non-ignored targets (as PyTorch).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> logp = F.log_softmax(tg.tensor([[0.0, 0.0]]), dim=1)
    >>> round(F.nll_loss(logp, tg.tensor([1])).item(), 4)
    0.6931
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction, "nll_loss")
    x = float_input(input, "nll_loss")
    x, t, unb = _class_target(x, target, "nll_loss")
    safe, _, w = _valid_and_weights(t, x.shape[1], weight, ignore_index, x.dtype, "nll_loss")
    loss = -apply(PICK, x, t=safe) * _wrap(w)
    return reduce_loss(loss, reduction, "nll_loss", denom=w.sum(), unbatched=unb)


@upper
def cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy between logits (N, C, d1, ...) and class indices (N, d1, ...) or class
    probabilities (the input's shape).

    ``weight`` rescales each class; ``ignore_index`` targets contribute nothing; with
    ``label_smoothing`` the target mixes ``1 - label_smoothing`` of itself with a uniform
    distribution. Stable for logits of any magnitude (the max is subtracted first).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> logits = tg.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
    >>> round(F.cross_entropy(logits, tg.tensor([0, 2])).item(), 4)
    0.1755
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    x = float_input(input, "cross_entropy")
    tdata = target._data if isinstance(target, Tensor) else np.asarray(target)
    if tdata.dtype.kind == "f":
        return _cross_entropy_probs(x, target, weight, reduction, label_smoothing)
    if tdata.dtype.kind not in "iu":
        raise TypeError(
            f"cross_entropy: target must hold class indices (integers) or probabilities "
            f"(floats), got dtype {tdata.dtype}"
        )
    x, t, unb = _class_target(x, target, "cross_entropy")
    c = x.shape[1]
    prep = None
    if weight is None and label_smoothing == 0.0 and x.ndim == 2 and not is_capturing():
        # the checks, safe indices and coefficients in one compiled pass over the targets
        prep = ce_targets(x._data, t, c, ignore_index)
    if prep is not None:
        safe, coef, n_valid, bad = prep
        if bad >= 0:
            _valid_and_weights(t, c, None, ignore_index, x.dtype, "cross_entropy")  # raises
        empty = reduction == "mean" and n_valid == 0
        if reduction == "mean" and not empty:
            coef *= coef.dtype.type(reciprocal(n_valid))
        out = apply(CE, x, safe, coef, total=reduction != "none")
        if empty:  # every target ignored: PyTorch's 0/0 is a NaN loss with a zero gradient
            out = out + float("nan")
        return S.squeeze(out, 0) if reduction == "none" and unb else out
    safe, valid, w = _valid_and_weights(t, c, weight, ignore_index, x.dtype, "cross_entropy")
    nan: Any = None  # added to a mean whose weights sum to 0 (NaN there, else 0)
    if isinstance(target, Tensor) and label_smoothing == 0.0 and is_capturing():
        safe_t, coef_t, nan = _ce_operands(
            target, t.shape, weight, ignore_index, x.dtype, reduction
        )
    elif reduction == "mean" and w.sum() == 0:
        safe_t, coef_t, nan = safe, w, float("nan")
    else:
        # the fused primitive sums inside: a mean's division is folded into the weights
        safe_t, coef_t = safe, w * reciprocal(w.sum()) if reduction == "mean" else w
    out = apply(CE, x, safe_t, coef_t, total=reduction != "none")
    if nan is not None:  # every target ignored: PyTorch's 0/0 is a NaN loss, a zero gradient
        out = out + nan
    if reduction == "none" and unb:
        out = S.squeeze(out, 0)
    if label_smoothing == 0.0:
        return out
    # the uniform part: -sum_c weight_c * log_softmax(x)_c per position, ignored ones zeroed
    logp = SM.log_softmax(x, axis=1)
    if weight is not None:
        wc = float_input(weight, "cross_entropy", "weight")._data.astype(x.dtype, copy=False)
        logp = logp * _wrap(wc.reshape((1, c) + (1,) * (x.ndim - 2)))
    smooth = -R.sum(logp, axis=1) * _wrap(valid)
    smooth = reduce_loss(smooth, reduction, "cross_entropy", denom=w.sum(), unbatched=unb)
    return out * (1.0 - label_smoothing) + smooth * (label_smoothing / c)


def _ce_operands(
    target: Tensor, shape: tuple[int, ...], weight: Any, ignore_index: int, dtype: Any, reduction: str
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The class indices made safe to gather, the per-position coefficients (weights, a
    mean's division folded in) and, for a mean, what to add to the loss (NaN where every
    weight is 0, as PyTorch's 0/0; the coefficients are 0 there, so the gradient is 0),
    computed with tensor ops from the target tensor, so that a
    compiled step recomputes them from each batch's target (the checks ran on the arrays).
    Only while tg.compile captures (eager computes the same numbers on arrays, faster): the
    reciprocal is taken in float64 and rounded once, as ``reciprocal`` and numpy do."""
    t = S.reshape(target, shape)
    valid = BI.not_equal(t, ignore_index)
    safe = S.astype(BI.where(valid, t, 0), np.int64)
    w = S.astype(valid, dtype)
    if weight is not None:
        wc = float_input(weight, "cross_entropy", "weight")
        w = take(S.astype(wc, dtype), safe, 0) * w
    if reduction != "mean":
        return safe, w, None
    total = R.sum(w)
    empty = BI.equal(total, 0)  # every target ignored: NaN, as PyTorch's 0/0
    inv = 1.0 / S.astype(BI.where(empty, 1.0, total), np.float64)
    w = w * S.astype(BI.where(empty, 0.0, inv), dtype)
    return safe, w, S.astype(BI.where(empty, float("nan"), 0.0), dtype)


def _cross_entropy_probs(
    x: Tensor, target: Any, weight: Any, reduction: str, label_smoothing: float
) -> Tensor:
    t = float_input(target, "cross_entropy", "target")
    x, t = same_float(x, t)
    unb = x.ndim == 1
    if unb:
        x, t = S.expand_dims(x, 0), S.expand_dims(t, 0)
    if t.shape != x.shape:
        raise ArgumentError(
            f"cross_entropy: probability targets must have the input's shape {x.shape}, got "
            f"{t.shape} (class-index targets must be integers)"
        )
    c = x.shape[1]
    if label_smoothing > 0.0:
        t = t * (1.0 - label_smoothing) + label_smoothing / c
    if weight is None and x.ndim == 2 and x.size:
        check_reduction(reduction, "cross_entropy")
        scale = 1.0 / x.shape[0] if reduction == "mean" else 1.0
        out = apply(CE_PROBS, x, t, scale=scale, total=reduction != "none")
        return S.squeeze(out, 0) if reduction == "none" and unb else out
    logp = SM.log_softmax(x, axis=1)
    if weight is not None:
        w = float_input(weight, "cross_entropy", "weight")
        if w.shape != (c,):
            raise ValueError(f"cross_entropy: weight must have shape ({c},), got {w.shape}")
        logp = logp * S.reshape(S.astype(w, x.dtype), (1, c) + (1,) * (x.ndim - 2))
    loss = -R.sum(logp * t, axis=1)  # (N, d1, ...)
    return reduce_loss(loss, reduction, "cross_entropy", unbatched=unb)


# --------------------------------------------------------------------------------------------
# binary targets
# --------------------------------------------------------------------------------------------


def _pair(input: Any, target: Any, op: str) -> tuple[Tensor, Tensor]:
    """Input and target as float tensors of one dtype, broadcast together (PyTorch warns)."""
    if input.__class__ is Tensor and target.__class__ is Tensor:  # the common case, checked lean
        xd, td = input._data, target._data
        if xd.dtype is td.dtype and xd.dtype.kind == "f" and xd.shape == td.shape:
            return input, target
    x = float_input(input, op)
    t = float_input(target, op, "target")
    x, t = same_float(x, t)
    check_pair(x, t, op)
    if x.shape != t.shape:
        warnings.warn(
            f"{op}: target size {t.shape} differs from input size {x.shape}; they will "
            "broadcast, which is likely not intended",
            UserWarning,
            stacklevel=3,
        )
        shape = np.broadcast_shapes(x.shape, t.shape)
        x, t = S.broadcast_to(x, shape), S.broadcast_to(t, shape)
    return x, t


def _times_weight(loss: Tensor, weight: Any, op: str) -> Tensor:
    if weight is None:
        return loss
    return loss * S.astype(float_input(weight, op, "weight"), loss.dtype)


@upper
def binary_cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``-(t log(x) + (1 - t) log(1 - x))`` on probabilities; each log is clamped at -100.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> round(F.binary_cross_entropy(tg.tensor([0.5]), tg.tensor([1.0])).item(), 4)
    0.6931
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "binary_cross_entropy")
    a = x._data
    if a.size and outside_unit(a):
        raise ValueError(
            "binary_cross_entropy: input values must be probabilities in [0, 1], got min "
            f"{float(a.min())} max {float(a.max())}; for logits use "
            "binary_cross_entropy_with_logits"
        )
    b = t._data
    if b.size and outside_unit(b):  # NaN passes through, as in PyTorch
        raise ValueError(
            "binary_cross_entropy: target values must be in [0, 1], got min "
            f"{float(b.min())} max {float(b.max())}; rescale the targets (e.g. labels in "
            "{-1, 1}: (t + 1) / 2)"
        )
    if weight is None and x.size:
        check_reduction(reduction, "binary_cross_entropy")
        total = reduction != "none"
        return apply(BCE, x, t, scale=1.0 / x.size if reduction == "mean" else 1.0, total=total)
    loss = -(t * _clamped_log(x) + (1.0 - t) * _clamped_log(1.0 - x))
    return reduce_loss(
        _times_weight(loss, weight, "binary_cross_entropy"), reduction, "binary_cross_entropy"
    )


def _clamped_log(p: Tensor) -> Tensor:
    """``max(log(p), -100)`` without evaluating log(0)."""
    pos = p > 0
    return BI.where(pos, BI.maximum(E.log(BI.where(pos, p, 1.0)), -100.0), -100.0)


@upper
def binary_cross_entropy_with_logits(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression:
    ``(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)``.

    ``pos_weight`` weighs the positive term, broadcast along the last (class) axis.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> round(F.binary_cross_entropy_with_logits(tg.tensor([0.0]), tg.tensor([1.0])).item(), 4)
    0.6931
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "binary_cross_entropy_with_logits")
    if weight is None and pos_weight is None and x.size:
        check_reduction(reduction, "binary_cross_entropy_with_logits")
        scale = 1.0 / x.size if reduction == "mean" else 1.0
        return apply(BCE_LOGITS, x, t, scale=scale, total=reduction != "none")
    sp = E.softplus(-x)  # log(1 + exp(-x)), linear beyond the threshold: never overflows
    if pos_weight is None:
        loss = (1.0 - t) * x + sp
    else:
        pw = S.astype(
            float_input(pos_weight, "binary_cross_entropy_with_logits", "pos_weight"), x.dtype
        )
        loss = (1.0 - t) * x + ((pw - 1.0) * t + 1.0) * sp
    loss = _times_weight(loss, weight, "binary_cross_entropy_with_logits")
    return reduce_loss(loss, reduction, "binary_cross_entropy_with_logits")


@upper
def kl_div(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """Kullback-Leibler divergence ``target * (log(target) - input)`` with ``input`` given as
    log-probabilities (and ``target`` too when ``log_target``).

    ``reduction='batchmean'`` divides the sum by the batch size (the mathematically right
    KL); ``'mean'`` divides by the number of elements (as PyTorch).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> p = tg.tensor([[0.5, 0.5]])
    >>> F.kl_div(p.log(), p, reduction="batchmean").item()
    0.0
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction, "kl_div", ("batchmean",))  # before the inputs are read
    x, t = _pair(input, target, "kl_div")
    if log_target:
        loss = E.exp(t) * (t - x)
    else:
        pos = t > 0
        # xlogy: 0 * log(0) is 0, and log never sees a zero
        loss = BI.where(pos, t * E.log(BI.where(pos, t, 1.0)), 0.0) - t * x
    batch = x.shape[0] if reduction == "batchmean" and x.ndim else None
    return reduce_loss(loss, reduction, "kl_div", denom=batch, extra=("batchmean",))
