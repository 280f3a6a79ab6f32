"""``scaled_dot_product_attention`` with PyTorch's arguments: the fused ``nn.attention``
primitive (``ops/_attention.py``) where it covers the call, else the composition it replaces."""

from __future__ import annotations

import math
from typing import Any

from .._amp import lower
from .._backend import np, xp_of
from .._tensor import Tensor, _wrap
from ..ops import _binary as BI
from ..ops import _linalg as L
from ..ops import _shape as S
from ..ops import _softmax as SM
from ..ops._attention import attention, safe_softmax
from ..ops._common import ArgumentError
from ._f_common import float_input
from ._f_dropout import dropout


@lower
def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` over (..., L, E), (..., S, E), (..., S, Ev).

    ``attn_mask``: bool (True = may attend) or float (added to the scores), broadcast to
    (..., L, S). ``is_causal``: position i attends to j <= i (top-left aligned, as PyTorch).
    ``scale`` defaults to ``1 / sqrt(E)``. A row that may attend to nothing gives zeros.
    ``dropout_p`` drops attention weights (always, as PyTorch's function does: pass 0.0 at
    evaluation). ``enable_gqa``: key/value heads (axis -3) are shared by groups of query heads.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> q = k = v = tg.ones((2, 4, 5, 8))
    >>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
    (2, 4, 5, 8)
    """
    op = "scaled_dot_product_attention"
    q = float_input(query, op, "query")
    k = float_input(key, op, "key")
    v = float_input(value, op, "value")
    if (
        q.ndim < 2
        or k.ndim < 2
        or v.ndim < 2
        or q.shape[-1] != k.shape[-1]
        or k.shape[-2] != v.shape[-2]
    ):
        raise ValueError(
            f"{op}: query {q.shape}, key {k.shape}, value {v.shape} must be (..., L, E), "
            "(..., S, E), (..., S, Ev)"
        )
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hq % hk or v.shape[-3] != hk:
            raise ValueError(f"{op}: {hq} query heads are not a multiple of {hk} key/value heads")
        k = S.repeat(k, hq // hk, axis=-3)
        v = S.repeat(v, hq // hk, axis=-3)
    n_l, n_s = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if is_causal and attn_mask is not None:
        raise ArgumentError(f"{op}: give attn_mask or is_causal=True, not both")
    if dropout_p == 0.0 and _one_pass_fits(q, k, v, attn_mask):
        return _fused(q, k, v, attn_mask, is_causal, sc)
    s = L.matmul(q, S.swapaxes(k, -1, -2)) * sc  # (..., L, S)
    if is_causal:
        causal = np.tril(np.ones((n_l, n_s), dtype=bool))
        s = BI.where(_wrap(xp_of(s._data).asarray(causal)), s, -math.inf)
    if attn_mask is not None:
        mask = attn_mask if isinstance(attn_mask, Tensor) else _wrap(np.asarray(attn_mask))
        try:
            np.broadcast_shapes(mask.shape, s.shape)
        except ValueError:
            raise ValueError(
                f"{op}: attn_mask of shape {mask.shape} does not broadcast to the scores "
                f"{s.shape} (..., L, S)"
            ) from None
        if mask.dtype.kind == "b":
            s = BI.where(mask, s, -math.inf)
        else:
            s = s + S.astype(mask, s.dtype)
    # only an attn_mask can mask a whole row (a causal row always keeps its first key): a plain
    # softmax (one primitive) serves the others, the zero-safe composition only those
    p = safe_softmax(s) if attn_mask is not None else SM.softmax(s, axis=-1)
    if dropout_p > 0.0:
        p = dropout(p, dropout_p, training=True)
    return L.matmul(p, v)


def _one_pass_fits(q: Tensor, k: Tensor, v: Tensor, attn_mask: Any) -> bool:
    """Whether ``nn.attention`` covers this call: 3-D or 4-D inputs with the same leading
    dimensions and dtype, a mask of at most as many dimensions that broadcasts to the scores."""
    lead = q.shape[:-2]
    if q.ndim not in (3, 4) or k.shape[:-2] != lead or v.shape[:-2] != lead:
        return False
    if not (q.dtype == k.dtype == v.dtype) or q.size == 0 or k.size == 0:
        return False
    if attn_mask is None:
        return True
    shape = tuple(attn_mask.shape)
    if len(shape) > q.ndim:
        return False
    try:
        return np.broadcast_shapes(shape, lead + (q.shape[-2], k.shape[-2])) == lead + (
            q.shape[-2],
            k.shape[-2],
        )
    except ValueError:
        return False


def _fused(q: Tensor, k: Tensor, v: Tensor, attn_mask: Any, is_causal: bool, sc: float) -> Tensor:
    n_l, n_s = q.shape[-2], k.shape[-2]
    xp = xp_of(q._data)
    mask: Tensor | None = None
    if is_causal:
        causal = np.triu(np.full((n_l, n_s), -np.inf, dtype=q.dtype), 1)
        mask = _wrap(xp.asarray(causal))
    elif attn_mask is not None:
        m = attn_mask if isinstance(attn_mask, Tensor) else _wrap(xp.asarray(attn_mask))
        if m.dtype.kind == "b":
            mask = _wrap(xp.where(m._data, 0.0, -np.inf).astype(q.dtype))
        else:
            mask = S.astype(m, q.dtype)
    if mask is not None:
        mask = S.reshape(mask, (1,) * (q.ndim - mask.ndim) + mask.shape)
    if q.ndim == 3:  # one head
        q, k, v = S.expand_dims(q, 1), S.expand_dims(k, 1), S.expand_dims(v, 1)
        mask = None if mask is None else S.expand_dims(mask, 1)
        return S.squeeze(attention(q, k, v, mask, sc), 1)
    return attention(q, k, v, mask, sc)
