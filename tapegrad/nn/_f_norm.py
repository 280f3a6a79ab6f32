"""Normalisation: layer, batch, group and RMS norm, ``normalize`` and ``cosine_similarity``.

``layer_norm`` is one primitive (``nn.layer_norm``: statistics, normalisation and the affine
map in one forward; one backward that recomputes the two statistics from the input rather than
keeping the normalised copy). Its VJPs are written once over an ops namespace, on tensors
(differentiable, for higher order) and on arrays (the backward pass nothing records), with the
same numbers either way. ``batch_norm`` in training is one primitive too (``nn.batch_norm``,
the same plan per channel; compiled kernels under it, see ``_kernels/batchnorm.py`` and ``_kernels/layernorm.py``), and
so is ``instance_norm`` (``nn.instance_norm``: per sample and channel, with its affine map;
``_kernels/norm_instance.py``). The others are compositions of tapegrad ops.
"""


from __future__ import annotations

import math
import threading
from typing import Any

from .._amp import upper
from .._autodiff import ARRAYS, PRIMITIVES, Joint, apply, defprim, no_grad
from .._backend import np, xp_of
from .._kernels.registry import dispatch
from .._tensor import Tensor
from ..ops import _elementwise as E
from ..ops import _reduce as R
from ..ops import _shape as S
from ._f_common import check_eps, float_input


def _norm_shape(normalized_shape: Any) -> tuple[int, ...]:
    if isinstance(normalized_shape, (int, np.integer)):
        return (int(normalized_shape),)
    return tuple(int(v) for v in normalized_shape)


def _standardize(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance), and the mean."""
    mu = R.mean(x, axis=axes, keepdims=True)
    d = x - mu
    var = R.mean(d * d, axis=axes, keepdims=True)
    return d * E.rsqrt(var + eps), mu


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


def _affine(y: Tensor, weight: Any, bias: Any, shape: tuple[int, ...], op: str) -> Tensor:
    """``y * weight + bias``, each (when given) reshaped to ``shape`` for broadcasting."""
    if weight is not None:
        w = float_input(weight, op, "weight")
        y = y * S.reshape(w, shape)
    if bias is not None:
        b = float_input(bias, op, "bias")
        y = y + S.reshape(b, shape)
    return y


@upper
def layer_norm(
    input: Any,
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` axes, then ``* weight + bias``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> [round(v, 4) for v in F.layer_norm(tg.tensor([1.0, 2.0, 3.0]), (3,)).tolist()]
    [-1.2247, 0.0, 1.2247]
    """
    x = float_input(input, "layer_norm")
    ns = _norm_shape(normalized_shape)
    k = len(ns)
    if x.shape[x.ndim - k :] != ns or k > x.ndim:
        raise ValueError(
            f"layer_norm: normalized_shape {ns} must match the trailing dimensions of the "
            f"input {x.shape}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != ns:
            raise ValueError(f"layer_norm: {name} must have shape {ns}, got {tuple(t.shape)}")
    axes = tuple(range(x.ndim - k, x.ndim))
    w = None if weight is None else float_input(weight, "layer_norm", "weight")
    b = None if bias is None else float_input(bias, "layer_norm", "bias")
    if x.size and all(t is None or t.dtype == x.dtype for t in (w, b)):
        return apply(LAYER_NORM, x, w, b, axes=axes, eps=float(eps))
    y, _ = _standardize(x, axes, eps)
    return _affine(y, weight, bias, ns, "layer_norm")


@upper
def rms_norm(
    input: Any, normalized_shape: Any, weight: Any = None, eps: float | None = None
) -> Tensor:
    """``x / sqrt(mean(x ** 2) + eps) * weight`` over the trailing ``normalized_shape`` axes.

    ``eps`` defaults to the machine epsilon of the input's dtype (as PyTorch).
    """
    x = float_input(input, "rms_norm")
    ns = _norm_shape(normalized_shape)
    k = len(ns)
    if x.shape[x.ndim - k :] != ns or k > x.ndim:
        raise ValueError(
            f"rms_norm: normalized_shape {ns} must match the trailing dimensions of the input "
            f"{x.shape}"
        )
    if eps is None:
        eps = float(np.finfo(x.dtype).eps)
    ms = R.mean(x * x, axis=tuple(range(x.ndim - k, x.ndim)), keepdims=True)
    y = x * E.rsqrt(ms + eps)
    return _affine(y, weight, None, ns, "rms_norm")


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


def _batch_stats(x: Any) -> tuple[Any, Any]:
    """Per-channel mean and biased variance of the array ``x`` (N, C, ...), float64 for the
    compiled kernels, x's dtype for numpy."""
    return dispatch("batch_stats", _batch_stats_np, x)


def _batch_stats_np(x: Any) -> tuple[Any, Any]:
    axes = (0,) + tuple(range(2, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    d = x - mu
    return mu.reshape(-1), (d * d).mean(axis=axes)


@upper
def batch_norm(
    input: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalisation over every axis but the channel axis 1.

    Training: normalise with the batch statistics (biased variance) and, when given, update
    ``running_mean`` / ``running_var`` in place:
    ``running = (1 - momentum) * running + momentum * batch``, with the unbiased variance
    ``var * n / (n - 1)`` in the running estimate. Evaluation: normalise with the running
    statistics.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> rm, rv = tg.zeros(2), tg.ones(2)
    >>> y = F.batch_norm(tg.tensor([[1.0, 2.0], [3.0, 6.0]]), rm, rv, training=True)
    >>> [round(v, 4) for v in rm.tolist()], [round(v, 4) for v in rv.tolist()]
    ([0.2, 0.4], [1.1, 1.7])
    """
    x = float_input(input, "batch_norm")
    check_eps(eps, "batch_norm")
    if x.ndim < 2:
        raise ValueError(f"batch_norm: input must be (N, C, ...), got shape {x.shape}")
    c = x.shape[1]
    shape = (1, c) + (1,) * (x.ndim - 2)
    axes = (0,) + tuple(range(2, x.ndim))
    for name, t in (
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if t is not None and tuple(t.shape) != (c,):
            raise ValueError(
                f"batch_norm: {name} must have shape ({c},) for an input with {c} channels "
                f"(shape {x.shape}), got {tuple(t.shape)}"
            )
    if training:
        n = x.size // c
        if n <= 1:
            raise ValueError(
                f"batch_norm: expected more than 1 value per channel when training, got input "
                f"shape {x.shape}"
            )
        if running_mean is not None or running_var is not None:
            _update_running(x, running_mean, running_var, momentum, n)
        w = None if weight is None else float_input(weight, "batch_norm", "weight")
        b = None if bias is None else float_input(bias, "batch_norm", "bias")
        if all(t is None or t.dtype == x.dtype for t in (w, b)):
            return apply(BATCH_NORM, x, w, b, eps=float(eps))
        y, _ = _standardize(x, axes, eps)
        return _affine(y, weight, bias, shape, "batch_norm")
    if running_mean is None or running_var is None:
        raise ValueError(
            "batch_norm: evaluation (training=False) needs running_mean and running_var; pass "
            "them or use training=True to normalise with batch statistics"
        )
    rm = S.reshape(S.astype(float_input(running_mean, "batch_norm"), x.dtype), shape)
    rv = S.reshape(S.astype(float_input(running_var, "batch_norm"), x.dtype), shape)
    y = (x - rm) * E.rsqrt(rv + eps)
    return _affine(y, weight, bias, shape, "batch_norm")


# The running mean's update keeps its batch statistics for the running variance's, which
# follows at once on the same batch (``share``): one pass over the batch for both, not two.
_shared = threading.local()


def _running_mean_fwd(rm: Any, x: Any, momentum: float, share: bool = False) -> Any:
    stats = _batch_stats(x)
    if share:
        _shared.stats = (x, stats)
    rm[...] = (1.0 - momentum) * rm + momentum * stats[0].astype(rm.dtype)
    return rm


def _running_var_fwd(rv: Any, x: Any, momentum: float, n: int) -> Any:
    kept = getattr(_shared, "stats", None)
    _shared.stats = None
    _, var = kept[1] if kept is not None and kept[0] is x else _batch_stats(x)
    var = var * (n / (n - 1))  # unbiased, for the running estimate
    rv[...] = (1.0 - momentum) * rv + momentum * var.astype(rv.dtype)
    return rv


# In-place updates of the running statistics, as non-differentiable primitives so that a
# tg.compile capture sees them (in place: the op changes its first input, and a compiled program
# keeps it although nothing reads its result).
_RUNNING_MEAN = defprim("nn.running_mean_", _running_mean_fwd, (None, None), inplace=True)
_RUNNING_VAR = defprim("nn.running_var_", _running_var_fwd, (None, None), inplace=True)


def _increment(c: Any) -> Any:
    c += 1
    return c


_INCREMENT = defprim("nn.increment_", _increment, None, inplace=True)


def increment_(counter: Tensor) -> None:
    """``counter += 1`` in place (BatchNorm's ``num_batches_tracked``), seen by tg.compile."""
    with no_grad():
        apply(_INCREMENT, counter)
    counter._version += 1


def _update_running(
    x: Any, running_mean: Any, running_var: Any, momentum: float, n: int
) -> None:
    """The in-place running-statistics update from the batch ``x`` (never recorded)."""
    if momentum is None:
        raise ValueError(
            "batch_norm: momentum=None (a cumulative average) is computed by the BatchNorm "
            "layer; pass the factor it uses as momentum"
        )
    with no_grad():
        if running_mean is not None:
            apply(_RUNNING_MEAN, running_mean, x, momentum=momentum,
                  share=running_var is not None)
            running_mean._version += 1
        if running_var is not None:
            apply(_RUNNING_VAR, running_var, x, momentum=momentum, n=n)
            running_var._version += 1


@upper
def group_norm(
    input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """Normalise (N, C, ...) over groups of ``C / num_groups`` channels and all spatial axes.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.group_norm(tg.randn(2, 4, 3), 2).shape
    (2, 4, 3)
    """
    x = float_input(input, "group_norm")
    if x.ndim < 2:
        raise ValueError(f"group_norm: input must be (N, C, ...), got shape {x.shape}")
    n, c = x.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ValueError(
            f"group_norm: num_groups={num_groups} must divide the {c} channels (input {x.shape})"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ValueError(f"group_norm: {name} must have shape ({c},), got {tuple(t.shape)}")
    xg = S.reshape(x, (n, num_groups, -1))
    y, _ = _standardize(xg, (2,), eps)
    y = S.reshape(y, x.shape)
    return _affine(y, weight, bias, (1, c) + (1,) * (x.ndim - 2), "group_norm")


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


@upper
def instance_norm(
    input: Any,
    running_mean: Any = None,
    running_var: Any = None,
    weight: Any = None,
    bias: Any = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel of each sample over its spatial axes (N, C, ...)."""
    x = float_input(input, "instance_norm")
    if x.ndim < 3:
        raise ValueError(f"instance_norm: input must be (N, C, ...), got shape {x.shape}")
    if not use_input_stats:
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    check_eps(eps, "instance_norm")
    n, c = x.shape[:2]
    if math.prod(x.shape[2:]) <= 1:
        raise ValueError(
            f"instance_norm: expected more than 1 spatial element when normalising with the "
            f"input's statistics, got input shape {x.shape}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ValueError(
                f"instance_norm: {name} must have shape ({c},) for an input with {c} channels "
                f"(shape {x.shape}), got {tuple(t.shape)}"
            )
    w = None if weight is None else float_input(weight, "instance_norm", "weight")
    b = None if bias is None else float_input(bias, "instance_norm", "bias")
    if running_mean is not None or running_var is not None:
        # the per-sample statistics averaged over the batch, as PyTorch does
        mean, var = _batch_stats(x._data.reshape((1, n * c) + x.shape[2:]))
        k = math.prod(x.shape[2:])
        var = (var.reshape(n, c) * (k / max(k - 1, 1))).mean(axis=0)
        m = mean.reshape(n, c).mean(axis=0)
        if running_mean is not None:
            running_mean.copy_(
                ((1 - momentum) * running_mean._data + momentum * m).astype(running_mean.dtype)
            )
        if running_var is not None:
            running_var.copy_(
                ((1 - momentum) * running_var._data + momentum * var).astype(running_var.dtype)
            )
    if all(t is None or t.dtype == x.dtype for t in (w, b)):
        return apply(INSTANCE_NORM, x, w, b, eps=float(eps))
    y, _ = _standardize(x, tuple(range(2, x.ndim)), eps)
    return _affine(y, weight, bias, (1, c) + (1,) * (x.ndim - 2), "instance_norm")


# --------------------------------------------------------------------------------------------
# norms along an axis
# --------------------------------------------------------------------------------------------


def vector_norm(x: Tensor, p: float, dim: Any, keepdim: bool) -> Tensor:
    """The ``p``-norm along ``dim`` with a zero (not NaN) gradient at the zero vector."""
    if p == 2:
        s = R.sum(x * x, axis=dim, keepdims=keepdim)
        pos = s > 0
        # double where: sqrt never sees 0, so its gradient stays finite where the norm is 0
        return E.where(pos, E.sqrt(E.where(pos, s, 1.0)), 0.0)
    if p == 1:
        return R.sum(E.abs(x), axis=dim, keepdims=keepdim)
    if math.isinf(p):
        a = E.abs(x)
        return (
            R.amax(a, axis=dim, keepdims=keepdim)
            if p > 0
            else R.amin(a, axis=dim, keepdims=keepdim)
        )
    if p <= 0:
        raise ValueError(f"normalize: p must be positive, got {p}")
    s = R.sum(E.abs(x) ** p, axis=dim, keepdims=keepdim)
    pos = s > 0
    return E.where(pos, E.where(pos, s, 1.0) ** (1.0 / p), 0.0)


def normalize(
    input: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None
) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.normalize(tg.tensor([[3.0, 4.0]]), dim=1).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    if out is not None:
        raise ValueError("normalize: out= is not supported; use the returned tensor")
    x = float_input(input, "normalize")
    n = vector_norm(x, p, dim, True)
    return x / E.maximum(n, eps)


def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (each norm clamped to ``eps``).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.cosine_similarity(tg.tensor([[1.0, 0.0]]), tg.tensor([[1.0, 1.0]])).tolist()
    [0.7071067690849304]
    """
    a = float_input(x1, "cosine_similarity", "x1")
    b = float_input(x2, "cosine_similarity", "x2")
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"cosine_similarity: shapes {a.shape} and {b.shape} do not broadcast"
        ) from None
    a, b = S.broadcast_to(a, shape), S.broadcast_to(b, shape)
    na = E.maximum(vector_norm(a, 2, dim, True), eps)
    nb = E.maximum(vector_norm(b, 2, dim, True), eps)
    return R.sum((a / na) * (b / nb), axis=dim)


def pairwise_distance(
    x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last axis."""
    a = float_input(x1, "pairwise_distance", "x1")
    b = float_input(x2, "pairwise_distance", "x2")
    return vector_norm(a - b + eps, p, -1, keepdim)
