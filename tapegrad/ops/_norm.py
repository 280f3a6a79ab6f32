"""Normalisation's primitives: layer, batch and instance norm, and the running statistics.

``layer_norm`` is one primitive (``nn.layer_norm``: statistics, normalisation and the affine
map in one forward; one backward that recomputes the two statistics from the input rather than
keeping the normalised copy). Its VJPs are written once over an ops namespace, on tensors
(differentiable, for higher order) and on arrays (the backward pass nothing records), with the
same numbers either way. ``batch_norm`` in training is one primitive too (``nn.batch_norm``,
the same plan per channel; compiled kernels under it, see ``_kernels/batchnorm.py`` and
``_kernels/layernorm.py``), and so is ``instance_norm`` (``nn.instance_norm``: per sample and
channel, with its affine map; ``_kernels/norm_instance.py``). The running statistics are
updated in place by non-differentiable primitives (``nn.running_mean_``, ``nn.running_var_``,
``nn.increment_``) that ``tg.compile`` sees. PyTorch's surface is ``nn/_f_norm.py``.
"""


from __future__ import annotations

import math
import threading
from typing import Any

from .._autodiff import ARRAYS, PRIMITIVES, Joint, apply, defprim, no_grad
from .._backend import xp_of
from .._kernels.registry import dispatch
from .._tensor import Tensor


def _ones_like_row(a: Any, n: int) -> Any:
    return xp_of(a).ones(n, dtype=a.dtype)


# Row and column sums are products with a vector of ones (one BLAS call, several times faster
# than numpy's reduction over a short last axis).
_RSQRT = PRIMITIVES["rsqrt"]


def _rowsum(xp: Any, a: Any) -> Any:
    return xp.reshape(xp.matmul(a, xp.const(_ones_like_row(xp.data(a), a.shape[1]))), (-1, 1))


def _colsum(xp: Any, a: Any) -> Any:
    return xp.matmul(xp.const(_ones_like_row(xp.data(a), a.shape[0])), a)


def _ln_stats(xp: Any, x: Any, m: int, eps: float) -> tuple[Any, Any]:
    """Over rows of ``m`` elements: ``(x - mean) * rstd`` (R, m) and ``rstd`` (R, 1)."""
    x2 = xp.reshape(x, (-1, m))
    d = x2 - _rowsum(xp, x2) * (1.0 / m)
    rstd = xp.apply(_RSQRT, _rowsum(xp, d * d) * (1.0 / m) + eps)
    return d * rstd, rstd


def _ln(x: Any, w: Any, b: Any, m: int, eps: float) -> Any:
    y, _ = _ln_stats(ARRAYS, x, m, eps)
    if w is not None:
        y *= w.reshape(-1)
    if b is not None:
        y += b.reshape(-1)
    return y.reshape(x.shape)


def _ln_fwd(x: Any, w: Any, b: Any, axes: tuple[int, ...], eps: float) -> Any:
    m = math.prod(x.shape[a] for a in axes)
    return dispatch("layer_norm", _ln, x, w, b, m, eps)  # one pass per row


def _ln_grad(
    xp: Any, g: Any, x: Any, w: Any, m: int, ns: tuple[int, ...], eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    xhat, rstd = _ln_stats(xp, x, m, eps)
    g2 = xp.reshape(g, (-1, m))
    gx = gw = gb = None
    if needs[1]:
        gw = xp.reshape(_colsum(xp, g2 * xhat), ns)
    if needs[2]:
        gb = xp.reshape(_colsum(xp, g2), ns)
    if needs[0]:
        gy = g2 if w is None else g2 * xp.reshape(w, (m,))
        gx = rstd * (gy - _rowsum(xp, gy) * (1.0 / m) - xhat * (_rowsum(xp, gy * xhat) * (1.0 / m)))
        gx = xp.reshape(gx, x.shape)
    return gx, gw, gb


def _ln_grads(
    xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any, axes: tuple[int, ...], eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    # backward recomputes the two statistics from the saved input (no normalised copy kept)
    m = math.prod(x.shape[a] for a in axes)
    ns = x.shape[x.ndim - len(axes) :]
    return dispatch("layer_norm_grad", _ln_grad, xp, g, x, w, m, ns, eps, needs)


LAYER_NORM = defprim("nn.layer_norm", _ln_fwd, Joint(_ln_grads), (0, 1))


# --------------------------------------------------------------------------------------------
# batch norm (training): statistics, normalisation and the affine map in one primitive; the
# backward recomputes the two statistics from x (no normalised copy kept). On arrays, compiled
# kernels make each a few passes per channel: measured (benchmarks/conv_kernels.py) the
# composition's seven recorded ops cost several times the two kernels.
# --------------------------------------------------------------------------------------------


def _bn_stats(xp: Any, x: Any, eps: float, axes: Any = None) -> tuple[Any, Any]:
    """``(x - mean) * rstd`` and ``rstd`` over ``axes`` (default: all but the channel axis 1),
    both broadcastable to x."""
    if axes is None:
        axes = (0,) + tuple(range(2, x.ndim))
    mu = xp.mean(x, axis=axes, keepdims=True)
    d = x - mu
    rstd = xp.apply(_RSQRT, xp.mean(d * d, axis=axes, keepdims=True) + eps)
    return d * rstd, rstd


def _channel(v: Any, ndim: int) -> Any:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _bn(x: Any, w: Any, b: Any, eps: float, axes: Any = None) -> Any:
    y, _ = _bn_stats(ARRAYS, x, eps, axes)
    if w is not None:
        y *= _channel(w, x.ndim)
    if b is not None:
        y += _channel(b, x.ndim)
    return y


def _bn_fwd(x: Any, w: Any, b: Any, eps: float) -> Any:
    return dispatch("batch_norm", _bn, x, w, b, eps)


def _bn_grad(
    xp: Any, g: Any, x: Any, w: Any, eps: float, needs: Any, axes: Any = None
) -> tuple[Any, Any, Any]:
    """Batch norm's gradients, statistics over ``axes`` (default: all but the channel axis;
    instance norm's: the spatial axes); the weight and bias sum over all but the channel."""
    spatial = tuple(range(2, x.ndim))
    axes = (0, *spatial) if axes is None else axes
    m = math.prod(x.shape[a] for a in axes)
    xhat, rstd = _bn_stats(xp, x, eps, axes)
    gx = gw = gb = None
    if needs[1]:
        gw = xp.sum(g * xhat, axis=(0, *spatial))
    if needs[2]:
        gb = xp.sum(g, axis=(0, *spatial))
    if needs[0]:
        gy = g if w is None else g * xp.reshape(w, (1, -1) + (1,) * (x.ndim - 2))
        gx = rstd * (
            gy
            - xp.sum(gy, axis=axes, keepdims=True) * (1.0 / m)
            - xhat * (xp.sum(gy * xhat, axis=axes, keepdims=True) * (1.0 / m))
        )
    return gx, gw, gb


def _bn_grads(
    xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any, eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    return dispatch("batch_norm_grad", _bn_grad, xp, g, x, w, eps, needs)


BATCH_NORM = defprim("nn.batch_norm", _bn_fwd, Joint(_bn_grads), (0, 1))


def batch_stats(x: Any) -> tuple[Any, Any]:
    """Per-channel mean and biased variance of the array ``x`` (N, C, ...), float64 for the
    compiled kernels, x's dtype for numpy."""
    return dispatch("batch_stats", _batch_stats_np, x)


def _batch_stats_np(x: Any) -> tuple[Any, Any]:
    axes = (0,) + tuple(range(2, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    d = x - mu
    return mu.reshape(-1), (d * d).mean(axis=axes)


# The running mean's update keeps its batch statistics for the running variance's, which
# follows at once on the same batch (``share``): one pass over the batch for both, not two.
# ``fresh``: the update follows batch norm's forward on this very batch at once, whose compiled
# kernel kept the statistics (``_kernels/batchnorm.py``); otherwise the statistics are computed
# from a view of ``x``, which no kept entry names.
_shared = threading.local()


def _batch_stats_of(x: Any, fresh: bool) -> tuple[Any, Any]:
    return batch_stats(x if fresh else x[...])


def _running_mean_fwd(rm: Any, x: Any, momentum: float, share: bool = False,
                      fresh: bool = False) -> Any:
    stats = _batch_stats_of(x, fresh)
    if share:
        _shared.stats = (x, stats)
    rm[...] = (1.0 - momentum) * rm + momentum * stats[0].astype(rm.dtype)
    return rm


def _running_var_fwd(rv: Any, x: Any, momentum: float, n: int, fresh: bool = False) -> Any:
    kept = getattr(_shared, "stats", None)
    _shared.stats = None
    _, var = kept[1] if kept is not None and kept[0] is x else _batch_stats_of(x, fresh)
    var = var * (n / (n - 1))  # unbiased, for the running estimate
    rv[...] = (1.0 - momentum) * rv + momentum * var.astype(rv.dtype)
    return rv


# In-place updates of the running statistics, as non-differentiable primitives so that a
# tg.compile capture sees them (in place: the op changes its first input, and a compiled program
# keeps it although nothing reads its result).
RUNNING_MEAN = defprim("nn.running_mean_", _running_mean_fwd, (None, None), inplace=True)
RUNNING_VAR = defprim("nn.running_var_", _running_var_fwd, (None, None), inplace=True)


def _increment(c: Any) -> Any:
    c += 1
    return c


_INCREMENT = defprim("nn.increment_", _increment, None, inplace=True)


def increment_(counter: Tensor) -> None:
    """``counter += 1`` in place (BatchNorm's ``num_batches_tracked``), seen by tg.compile."""
    with no_grad():
        apply(_INCREMENT, counter)
    counter._version += 1


# Instance norm in training is one primitive with its affine map (``nn.instance_norm``):
# statistics per (sample, channel) over the spatial axes, the same plan as batch norm's;
# compiled kernels under it (``_kernels/norm_instance.py``) finish each plane in cache, where
# batch norm's primitive over (1, N * C, ...) plus the affine products made five more passes.
def _in(x: Any, w: Any, b: Any, eps: float) -> Any:
    return _bn(x, w, b, eps, tuple(range(2, x.ndim)))


def _in_fwd(x: Any, w: Any, b: Any, eps: float) -> Any:
    return dispatch("instance_norm", _in, x, w, b, eps)


def _in_grad(xp: Any, g: Any, x: Any, w: Any, eps: float, needs: Any) -> tuple[Any, Any, Any]:
    return _bn_grad(xp, g, x, w, eps, needs, tuple(range(2, x.ndim)))


def _in_grads(
    xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any, eps: float, needs: Any
) -> tuple[Any, Any, Any]:
    return dispatch("instance_norm_grad", _in_grad, xp, g, x, w, eps, needs)


INSTANCE_NORM = defprim("nn.instance_norm", _in_fwd, Joint(_in_grads), (0, 1))


