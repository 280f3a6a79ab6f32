"""The losses' fused primitives (``nn.cross_entropy`` and the rest), their VJPs and kernels.

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

from typing import Any

from .._autodiff import PRIMITIVES, Primitive, defprim
from .._autodiff._expr import Elementwise, G, P, X, sumsq
from .._backend import np, xp_of
from .._kernels.registry import dispatch
from . import _softmax as SM

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
PICK = defprim(
    "nn.pick",
    _pick_fwd,
    lambda xp, g, ans, x, t: xp.apply(PICK_GRAD, g, t=t, shape=x.shape),
    (0,),
)
PICK_GRAD: Primitive = defprim(
    "nn.pick_grad", _pick_grad_fwd, lambda xp, gg, ans, g, t, shape: xp.apply(PICK, gg, t=t)
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
CE = defprim(
    "nn.cross_entropy",
    _ce_fwd,
    (
        lambda xp, g, ans, x, t, coef, total: xp.apply(CE_GRAD, x, g, t, coef, total=total),
        None,
        None,
    ),
    (0, 1, 2),
)
CE_GRAD: Primitive = defprim(
    "nn.cross_entropy_grad", _ce_grad_fwd, (_ce_grad_vjp_x, _ce_grad_vjp_g, None, None), (0, 1, 2, 3)
)


def _no_prep(x: Any, t: Any, c: int, ignore_index: int) -> None:
    """The reference of ``ce_targets``: no one-pass preparation (``cross_entropy`` then checks
    and weighs the targets with ``_valid_and_weights``)."""
    return None


def ce_targets(x: Any, t: Any, c: int, ignore_index: int) -> Any:
    """Cross-entropy's class indices checked, made safe and weighed in one compiled pass, or
    None where no kernel serves (then ``cross_entropy`` does it with numpy)."""
    return dispatch("ce_targets", _no_prep, x, t, c, ignore_index)


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
CE_PROBS = defprim(
    "nn.cross_entropy_probs", _ce_probs_fwd, (_ce_probs_vjp(0), _ce_probs_vjp(1)), (0, 1)
)


def _outside_unit_np(a: Any) -> bool:
    return bool(((a < 0) | (a > 1)).any())


def outside_unit(a: Any) -> bool:
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
BCE = defprim(
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
BCE_LOGITS = defprim(
    "nn.binary_cross_entropy_with_logits",
    _bce_logits_fwd,
    (_bce_vjp(0, True), _bce_vjp(1, True)),
    (0, 1),
)

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



# Huber with 'mean' or 'sum' (smooth L1 is Huber over ``delta``): one primitive, as mse's, where
# the composition (difference, abs, comparison, two branches, where, reduction) recorded nine ops
# a call. Its gradient is the difference clipped to ``[-delta, delta]``; written with ``xp`` so it
# also runs on Tensors (gradients of gradients).
def _huber_fwd(x: Any, t: Any, delta: float, scale: float) -> Any:
    xp = xp_of(x)
    d = x - t
    a = xp.abs(d)
    loss = xp.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))
    return xp.asarray(loss.sum() * scale, dtype=x.dtype)


def _huber_vjp(sign: float) -> Any:
    def vjp(xp: Any, g: Any, ans: Any, x: Any, t: Any, delta: float, scale: float) -> Any:
        return g * (sign * scale) * xp.clip(x - t, -delta, delta)

    return vjp


HUBER = defprim("nn.huber_loss", _huber_fwd, (_huber_vjp(1.0), _huber_vjp(-1.0)), (0, 1))
