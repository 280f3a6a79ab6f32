"""Losses: plain functions sharing one ``reduction`` vocabulary ('mean', 'sum', 'none').

Classification losses are built on log-softmax with the max subtracted first, so logits
shifted by 1e4 give the same loss. ``cross_entropy`` with class indices is one fused primitive
(log-softmax + NLL: one pass forward, ``softmax - one_hot`` backward, instead of about a dozen
ops), whose VJP is itself a primitive with differentiable VJPs, so higher order works.

The losses a training step ends in are one primitive each where that is measurably faster:
cross-entropy with probability targets on (N, C) logits (``nn.cross_entropy_probs``), binary
cross-entropy and its logits form without weights (``nn.binary_cross_entropy``,
``nn.binary_cross_entropy_with_logits``, PyTorch's gradient formulas). On small batches their
cost was per-call overhead (ten to fifteen numpy calls or recorded ops of a few microseconds
each), so on numpy float arrays each forward and gradient is one compiled pass
(``_kernels/softmax.py``, ``_kernels/elementwise.py``), and cross-entropy's class indices are
checked, made safe and weighted in one pass too; the numpy formulas beside them are the
reference and the Tensor (higher-order) path. Measured fwd+bwd of one op, PyTorch's time over
tapegrad's with one thread each (docs/design.md): cross-entropy 64x10 0.48x -> 0.82x, with
128x128 soft targets 0.48x -> 1.07x, BCE on 64 outputs after a sigmoid 0.22x -> 0.63x, BCE
with logits on 8 0.35x -> 0.80x; the rest is the tape's per-op cost and the sigmoid.
"""


from __future__ import annotations

import warnings
from typing import Any

from .._amp import upper
from .._autodiff import PRIMITIVES, Primitive, apply, defprim, is_capturing
from .._autodiff._expr import Elementwise, G, P, X, sumsq
from .._backend import np, xp_of
from .._kernels.registry import dispatch
from .._tensor import Tensor, _wrap
from ..ops import _elementwise as E
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops import _softmax as SM
from ..ops._common import ArgumentError
from ._f_common import (
    check_pair,
    check_reduction,
    float_input,
    legacy_reduction,
    reciprocal,
    reduce_loss,
    same_float,
    take,
)

# --------------------------------------------------------------------------------------------
# class-axis gather (NLL) and the fused log-softmax + NLL
# --------------------------------------------------------------------------------------------


def _one_hot_like(x: Any, t: Any) -> Any:
    oh = xp_of(x).zeros_like(x)
    xp_of(x).put_along_axis(oh, t[:, None], 1, axis=1)
    return oh


def _pick_fwd(x: Any, t: Any) -> Any:
    if x.ndim == 2:
        return x[xp_of(x).arange(x.shape[0]), t]
    return xp_of(x).take_along_axis(x, t[:, None], axis=1)[:, 0]


def _pick_grad_fwd(g: Any, t: Any, shape: tuple[int, ...]) -> Any:
    out = xp_of(g).zeros(shape, dtype=g.dtype)
    xp_of(g).put_along_axis(out, t[:, None], g[:, None], axis=1)  # one class per position
    return out


# x[n, t[n, ...], ...] along the class axis 1, and its adjoint (a put, no collisions)
_PICK = defprim(
    "nn.pick",
    _pick_fwd,
    lambda xp, g, ans, x, t: xp.apply(_PICK_GRAD, g, t=t, shape=x.shape),
    (0,),
)
_PICK_GRAD: Primitive = defprim(
    "nn.pick_grad", _pick_grad_fwd, lambda xp, gg, ans, g, t, shape: xp.apply(_PICK, gg, t=t)
)


def _lse(x: Any) -> Any:
    """logsumexp over axis 1, shifted by the max (finite for logits of any size)."""
    xp = xp_of(x)
    m = x.max(axis=1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    return xp.log(xp.exp(x - m).sum(axis=1)) + m[:, 0]


def _softmax_minus_one_hot(x: Any, t: Any) -> Any:
    """``softmax(x) - one_hot(t)`` along axis 1, in one buffer."""
    xp = xp_of(x)
    m = x.max(axis=1, keepdims=True)
    e = xp.exp(x - xp.where(xp.isfinite(m), m, 0))
    e /= e.sum(axis=1, keepdims=True)
    if e.ndim == 2:
        e[xp.arange(e.shape[0]), t] -= 1
    else:
        picked = xp.take_along_axis(e, t[:, None], axis=1)
        xp.put_along_axis(e, t[:, None], picked - 1, axis=1)
    return e


# The fused log-softmax + NLL (one pass forward; softmax - one_hot backward, instead of about
# a dozen recorded ops). ``coef`` holds each position's weight (0 where ignored, the class
# weight, and the 1 / sum-of-weights of 'mean'); ``total`` sums the weighted losses in the same
# call. The VJP is itself a primitive with differentiable VJPs, so higher order works.
def _ce(x: Any, t: Any, coef: Any, total: bool) -> Any:
    loss = (_lse(x) - _pick_fwd(x, t)) * coef  # -log_softmax(x)[t], weighted
    return loss.sum() if total else loss


def _ce_fwd(x: Any, t: Any, coef: Any, total: bool) -> Any:
    return dispatch("cross_entropy", _ce, x, t, coef, total)


def _ce_grad(x: Any, g: Any, t: Any, coef: Any, total: bool) -> Any:
    e = _softmax_minus_one_hot(x, t)
    e *= (g * coef)[:, None]
    return e


def _ce_grad_fwd(x: Any, g: Any, t: Any, coef: Any, total: bool) -> Any:
    return dispatch("cross_entropy_grad", _ce_grad, x, g, t, coef, total)


def _ce_grad_vjp_x(xp: Any, gg: Any, ans: Any, x: Any, g: Any, t: Any, coef: Any, total: bool):
    # the Hessian of logsumexp, diag(p) - p p^T, applied to gg scaled by the upstream g
    p = xp.apply(SM._SOFTMAX, x, axis=1)
    u = gg * xp.expand_dims(g * coef, 1)
    return p * u - p * xp.sum(p * u, axis=1, keepdims=True)


def _ce_grad_vjp_g(xp: Any, gg: Any, ans: Any, x: Any, g: Any, t: Any, coef: Any, total: bool):
    d = xp.apply(SM._SOFTMAX, x, axis=1) - xp.const(_one_hot_like(xp.data(x), xp.data(t)))
    per_position = xp.sum(gg * d, axis=1) * coef
    return xp.sum(per_position) if total else per_position


# The class indices t and the per-position coefficients are operands (not parameters): a
# tg.compile capture then sees them as functions of the step's target tensor.
_CE = defprim(
    "nn.cross_entropy",
    _ce_fwd,
    (
        lambda xp, g, ans, x, t, coef, total: xp.apply(_CE_GRAD, x, g, t, coef, total=total),
        None,
        None,
    ),
    (0, 1, 2),
)
_CE_GRAD: Primitive = defprim(
    "nn.cross_entropy_grad", _ce_grad_fwd, (_ce_grad_vjp_x, _ce_grad_vjp_g, None, None), (0, 1, 2, 3)
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
    loss = -apply(_PICK, x, t=safe) * _wrap(w)
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
        prep = dispatch("ce_targets", _no_prep, x._data, t, c, ignore_index)
    if prep is not None:
        safe, coef, n_valid, bad = prep
        if bad >= 0:
            _valid_and_weights(t, c, None, ignore_index, x.dtype, "cross_entropy")  # raises
        empty = reduction == "mean" and n_valid == 0
        if reduction == "mean" and not empty:
            coef *= coef.dtype.type(reciprocal(n_valid))
        out = apply(_CE, x, safe, coef, total=reduction != "none")
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
    out = apply(_CE, x, safe_t, coef_t, total=reduction != "none")
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


def _no_prep(x: Any, t: Any, c: int, ignore_index: int) -> None:
    """The reference of ``ce_targets``: no one-pass preparation (``cross_entropy`` then checks
    and weighs the targets with ``_valid_and_weights``)."""
    return None


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
    valid = E.not_equal(t, ignore_index)
    safe = S.astype(E.where(valid, t, 0), np.int64)
    w = S.astype(valid, dtype)
    if weight is not None:
        wc = float_input(weight, "cross_entropy", "weight")
        w = take(S.astype(wc, dtype), safe, 0) * w
    if reduction != "mean":
        return safe, w, None
    total = R.sum(w)
    empty = E.equal(total, 0)  # every target ignored: NaN, as PyTorch's 0/0
    inv = 1.0 / S.astype(E.where(empty, 1.0, total), np.float64)
    w = w * S.astype(E.where(empty, 0.0, inv), dtype)
    return safe, w, S.astype(E.where(empty, float("nan"), 0.0), dtype)


def _ce_probs(x: Any, t: Any, scale: float, total: bool) -> Any:
    loss = -(t * (x - _lse(x)[:, None])).sum(axis=1)
    return xp_of(x).asarray(loss.sum() * scale, dtype=x.dtype) if total else loss


def _ce_probs_fwd(x: Any, t: Any, scale: float, total: bool) -> Any:
    return dispatch("cross_entropy_probs", _ce_probs, x, t, scale, total)


def _ce_probs_grad(xp: Any, g: Any, x: Any, t: Any, scale: float, total: bool, i: int) -> Any:
    gr = g * scale if total else xp.expand_dims(g * scale, 1)
    if i == 0:  # softmax(x) * sum(t) - t
        p = xp.apply(SM._SOFTMAX, x, axis=1)
        return gr * (p * xp.sum(t, axis=1, keepdims=True) - t)
    return -gr * xp.apply(SM._LOG_SOFTMAX, x, axis=1)


def _ce_probs_vjp(i: int) -> Any:
    def vjp(xp: Any, g: Any, ans: Any, x: Any, t: Any, scale: float, total: bool) -> Any:
        return dispatch("cross_entropy_probs_grad", _ce_probs_grad, xp, g, x, t, scale, total, i)

    return vjp


# Cross-entropy with probability targets on (N, C) logits, without class weights: one
# primitive (log-softmax, product, row sum, reduction were five recorded ops and six numpy
# passes), computed per row from the log-sum-exp; on arrays compiled, one pass per row.
_CE_PROBS = defprim(
    "nn.cross_entropy_probs", _ce_probs_fwd, (_ce_probs_vjp(0), _ce_probs_vjp(1)), (0, 1)
)


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
        out = apply(_CE_PROBS, x, t, scale=scale, total=reduction != "none")
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
    if a.size and _outside_unit(a):
        raise ValueError(
            "binary_cross_entropy: input values must be probabilities in [0, 1], got min "
            f"{float(a.min())} max {float(a.max())}; for logits use "
            "binary_cross_entropy_with_logits"
        )
    b = t._data
    if b.size and _outside_unit(b):  # NaN passes through, as in PyTorch
        raise ValueError(
            "binary_cross_entropy: target values must be in [0, 1], got min "
            f"{float(b.min())} max {float(b.max())}; rescale the targets (e.g. labels in "
            "{-1, 1}: (t + 1) / 2)"
        )
    if weight is None and x.size:
        check_reduction(reduction, "binary_cross_entropy")
        total = reduction != "none"
        return apply(_BCE, x, t, scale=1.0 / x.size if reduction == "mean" else 1.0, total=total)
    loss = -(t * _clamped_log(x) + (1.0 - t) * _clamped_log(1.0 - x))
    return reduce_loss(
        _times_weight(loss, weight, "binary_cross_entropy"), reduction, "binary_cross_entropy"
    )


def _outside_unit_np(a: Any) -> bool:
    return bool(((a < 0) | (a > 1)).any())


def _outside_unit(a: Any) -> bool:
    """Whether the array ``a`` holds a value outside [0, 1] (NaN does not count)."""
    return dispatch("outside_unit", _outside_unit_np, a)


def _bce_logs(xp: Any, x: Any) -> tuple[Any, Any]:
    """``max(log(x), -100)`` and ``max(log(1 - x), -100)`` (log(0) is -inf, then clamped)."""
    with np.errstate(divide="ignore"):
        return xp.maximum(xp.log(x), -100.0), xp.maximum(xp.log(1.0 - x), -100.0)


def _bce(x: Any, t: Any, scale: float, total: bool) -> Any:
    lx, l1x = _bce_logs(xp_of(x), x)
    loss = -(t * lx + (1.0 - t) * l1x)
    if not total:
        return loss
    return xp_of(x).asarray(loss.sum() * scale, dtype=x.dtype)


def _bce_fwd(x: Any, t: Any, scale: float, total: bool) -> Any:
    # one pass (the formula is about ten numpy calls)
    return dispatch("binary_cross_entropy", _bce, x, t, scale, total)


def _bce_grad(xp: Any, g: Any, x: Any, t: Any, scale: float, i: int, logits: bool) -> Any:
    if logits:
        if i == 0:
            return (g * scale) * (xp.apply(_SIGMOID, x) - t)
        return (g * -scale) * x
    if i == 0:
        return (g * scale) * (x - t) / xp.maximum((1.0 - x) * x, 1e-12)
    lx, l1x = _bce_logs(xp, x)
    return (g * scale) * (l1x - lx)


def _bce_vjp(i: int, logits: bool) -> Any:
    """The VJP of (logits) binary cross-entropy for input ``i``: one compiled pass on arrays."""

    def vjp(xp: Any, g: Any, ans: Any, x: Any, t: Any, scale: float, total: bool) -> Any:
        return dispatch("binary_cross_entropy_grad", _bce_grad, xp, g, x, t, scale, i, logits)

    return vjp


# Binary cross-entropy on probabilities, without a weight, as one primitive: the clamped logs,
# products and reduction were about fifteen recorded ops, the whole cost of a DCGAN's loss on
# 64 outputs (0.41 ms fwd+bwd against PyTorch's 0.11). The gradients are PyTorch's formulas:
# ``(x - t) / max(x (1 - x), 1e-12)`` for x and the difference of the clamped logs for t.
_BCE = defprim(
    "nn.binary_cross_entropy",
    _bce_fwd,
    (_bce_vjp(0, False), _bce_vjp(1, False)),
    (0, 1),
)


_SIGMOID = PRIMITIVES["sigmoid"]


def _bce_logits(x: Any, t: Any, scale: float, total: bool) -> Any:
    xp = xp_of(x)
    loss = (1.0 - t) * x + (xp.maximum(-x, 0) + xp.log1p(xp.exp(-xp.abs(x))))
    if not total:
        return loss
    return xp.asarray(loss.sum() * scale, dtype=x.dtype)


def _bce_logits_fwd(x: Any, t: Any, scale: float, total: bool) -> Any:
    return dispatch("binary_cross_entropy_with_logits", _bce_logits, x, t, scale, total)


# With logits, without weights: one primitive too (PyTorch's formula,
# ``(1 - t) x + max(-x, 0) + log1p(exp(-|x|))``; gradients ``sigmoid(x) - t`` and ``-x``).
_BCE_LOGITS = defprim(
    "nn.binary_cross_entropy_with_logits",
    _bce_logits_fwd,
    (_bce_vjp(0, True), _bce_vjp(1, True)),
    (0, 1),
)


def _clamped_log(p: Tensor) -> Tensor:
    """``max(log(p), -100)`` without evaluating log(0)."""
    pos = p > 0
    return E.where(pos, E.maximum(E.log(E.where(pos, p, 1.0)), -100.0), -100.0)


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
        return apply(_BCE_LOGITS, x, t, scale=scale, total=reduction != "none")
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
        loss = E.where(pos, t * E.log(E.where(pos, t, 1.0)), 0.0) - t * x
    batch = x.shape[0] if reduction == "batchmean" and x.ndim else None
    return reduce_loss(loss, reduction, "kl_div", denom=batch, extra=("batchmean",))


# --------------------------------------------------------------------------------------------
# regression losses
# --------------------------------------------------------------------------------------------


def _times_same_shape(loss: Tensor, weight: Any, op: str) -> Tensor:
    """``weight * loss`` for a weight of the loss's shape (mse, l1, huber)."""
    w = S.astype(float_input(weight, op, "weight"), loss.dtype)
    if w.shape != loss.shape:
        raise ValueError(f"{op}: weight must have the input's shape {loss.shape}, got {w.shape}")
    return loss * w


def _weighted_mean(loss: Tensor, weight: Any, reduction: str, op: str) -> Tensor:
    """``weight * loss`` reduced, the mean dividing by ``sum(weight)`` (PyTorch's mse/l1 rule)."""
    check_reduction(reduction, op)
    w = S.astype(float_input(weight, op, "weight"), loss.dtype)
    return reduce_loss(_times_same_shape(loss, w, op), reduction, op, denom=R.sum(w))


# mse with 'mean' or 'sum': one primitive (the difference, square and sum would be four
# recorded ops); it keeps its inputs, which are alive anyway, and recomputes the difference.
def _mse_fwd(x: Any, t: Any, scale: float) -> Any:
    d = x - t
    d *= d
    return xp_of(x).asarray(d.sum() * scale, dtype=x.dtype)


MSE = defprim(
    "nn.mse_loss", _mse_fwd, None, (0, 1),
    expr=Elementwise(sumsq(X(0) - X(1)) * P("scale"), (
        G * (2.0 * P("scale")) * (X(0) - X(1)), G * (-2.0 * P("scale")) * (X(0) - X(1)))),
)


@upper
def mse_loss(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    weight: Any = None,
) -> Tensor:
    """Squared error ``(input - target) ** 2``; with ``weight``, 'mean' is
    ``sum(weight * err) / sum(weight)``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.mse_loss(tg.tensor([1.0, 2.0]), tg.tensor([0.0, 0.0])).item()
    2.5
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "mse_loss")
    n = x._data.size
    if weight is None and reduction in ("mean", "sum") and n:
        return apply(MSE, x, t, scale=1.0 / n if reduction == "mean" else 1.0)
    d = x - t
    loss = d * d
    if weight is not None:
        return _weighted_mean(loss, weight, reduction, "mse_loss")
    return reduce_loss(loss, reduction, "mse_loss")


@upper
def l1_loss(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    weight: Any = None,
) -> Tensor:
    """Absolute error ``|input - target|``; with ``weight``, 'mean' is
    ``sum(weight * err) / sum(weight)``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "l1_loss")
    loss = E.abs(x - t)
    if weight is not None:
        return _weighted_mean(loss, weight, reduction, "l1_loss")
    return reduce_loss(loss, reduction, "l1_loss")


def _huber(d: Tensor, delta: float) -> Tensor:
    a = E.abs(d)
    return E.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)


@upper
def huber_loss(
    input: Any, target: Any, reduction: str = "mean", delta: float = 1.0, weight: Any = None
) -> Tensor:
    """``0.5 d ** 2`` where ``|d| < delta``, else ``delta (|d| - delta / 2)``; d = input - target.

    With ``weight``, 'mean' is the plain mean of ``weight * loss`` (as PyTorch).
    """
    x, t = _pair(input, target, "huber_loss")
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    loss = _huber(x - t, delta)
    if weight is not None:
        loss = _times_same_shape(loss, weight, "huber_loss")
    return reduce_loss(loss, reduction, "huber_loss")


@upper
def smooth_l1_loss(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """``0.5 d ** 2 / beta`` where ``|d| < beta``, else ``|d| - beta / 2`` (Huber / beta)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _pair(input, target, "smooth_l1_loss")
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    d = x - t
    if beta == 0:
        return reduce_loss(E.abs(d), reduction, "smooth_l1_loss")
    a = E.abs(d)
    loss = E.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return reduce_loss(loss, reduction, "smooth_l1_loss")


# --------------------------------------------------------------------------------------------
# embedding and ranking losses
# --------------------------------------------------------------------------------------------


def _signs(target: Any, like: Tensor) -> Tensor:
    """The +1/-1 targets as a constant of the input's dtype."""
    t = target._data if isinstance(target, Tensor) else np.asarray(target)
    return _wrap(t.astype(like.dtype))


def cosine_embedding_loss(
    input1: Any,
    input2: Any,
    target: Any,
    margin: float = 0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where it is -1.

    The cosine is taken along the last axis with ``1e-12`` added to each squared norm.
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    a = float_input(input1, "cosine_embedding_loss", "input1")
    b = float_input(input2, "cosine_embedding_loss", "input2")
    a, b = same_float(a, b)
    y = _signs(target, a)
    if a.shape != b.shape or a.ndim not in (1, 2) or y.shape != a.shape[:-1]:
        raise ValueError(
            "cosine_embedding_loss: inputs must be (N, D) with target (N,), or (D,) with a "
            f"scalar target; got {a.shape}, {b.shape} and target {y.shape}"
        )
    eps = 1e-12
    dot = R.sum(a * b, axis=-1)
    den = E.sqrt((R.sum(a * a, axis=-1) + eps) * (R.sum(b * b, axis=-1) + eps))
    cos = dot / den
    pos = E.where(y == 1, 1.0 - cos, 0.0)
    neg = E.where(y == -1, E.clip(cos - margin, min=0.0), 0.0)
    return reduce_loss(pos + neg, reduction, "cosine_embedding_loss")


def margin_ranking_loss(
    input1: Any,
    input2: Any,
    target: Any,
    margin: float = 0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``; ``target`` is 1 or -1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    a = float_input(input1, "margin_ranking_loss", "input1")
    b = float_input(input2, "margin_ranking_loss", "input2")
    a, b = same_float(a, b)
    y = _signs(target, a)
    if not (a.shape == b.shape == y.shape):
        raise ValueError(
            f"margin_ranking_loss: input1 {a.shape}, input2 {b.shape} and target {y.shape} "
            "must have one shape"
        )
    loss = E.clip(-y * (a - b) + margin, min=0.0)
    return reduce_loss(loss, reduction, "margin_ranking_loss")
