"""Normalisation with PyTorch's arguments: layer, batch, group, instance and RMS norm,
``normalize``, ``cosine_similarity`` and ``pairwise_distance``; layer, batch and instance norm
run on the primitives of ``ops/_norm.py``, the others are compositions of tapegrad ops."""


from __future__ import annotations

import math
from typing import Any

from .._amp import upper
from .._autodiff import apply, no_grad
from .._backend import np
from .._tensor import Tensor
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops._norm import (
    BATCH_NORM,
    INSTANCE_NORM,
    LAYER_NORM,
    RUNNING_MEAN,
    RUNNING_VAR,
    batch_stats,
)
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
        track = running_mean is not None or running_var is not None
        w = None if weight is None else float_input(weight, "batch_norm", "weight")
        b = None if bias is None else float_input(bias, "batch_norm", "bias")
        if all(t is None or t.dtype == x.dtype for t in (w, b)):
            out = apply(BATCH_NORM, x, w, b, eps=float(eps))
            if track:  # after the forward: its compiled kernel's statistics serve the update
                _update_running(x, running_mean, running_var, momentum, n, fresh=True)
            return out
        if track:
            _update_running(x, running_mean, running_var, momentum, n)
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


def _update_running(
    x: Any, running_mean: Any, running_var: Any, momentum: float, n: int, fresh: bool = False
) -> None:
    """The in-place running-statistics update from the batch ``x`` (never recorded);
    ``fresh``: batch norm's primitive has just normalised ``x``."""
    if momentum is None:
        raise ValueError(
            "batch_norm: momentum=None (a cumulative average) is computed by the BatchNorm "
            "layer; pass the factor it uses as momentum"
        )
    with no_grad():
        if running_mean is not None:
            apply(RUNNING_MEAN, running_mean, x, momentum=momentum,
                  share=running_var is not None, fresh=fresh)
            running_mean._version += 1
        if running_var is not None:
            apply(RUNNING_VAR, running_var, x, momentum=momentum, n=n, fresh=fresh)
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
        mean, var = batch_stats(x._data.reshape((1, n * c) + x.shape[2:]))
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
        return BI.where(pos, E.sqrt(BI.where(pos, s, 1.0)), 0.0)
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
    return BI.where(pos, BI.where(pos, s, 1.0) ** (1.0 / p), 0.0)


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
    return x / BI.maximum(n, eps)


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
    na = BI.maximum(vector_norm(a, 2, dim, True), eps)
    nb = BI.maximum(vector_norm(b, 2, dim, True), eps)
    return R.sum((a / na) * (b / nb), axis=dim)


def pairwise_distance(
    x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last axis."""
    a = float_input(x1, "pairwise_distance", "x1")
    b = float_input(x2, "pairwise_distance", "x2")
    return vector_norm(a - b + eps, p, -1, keepdim)
