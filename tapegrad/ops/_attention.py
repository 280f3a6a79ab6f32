"""Scaled dot-product attention as one fused primitive (``nn.attention``; ``nn.attention_qkv``
on a packed projection).

``nn.attention`` computes ``softmax(q k^T * scale + mask) v`` over (B, H, L, D) inputs in one
op: the scores' scale, mask and softmax are one pass per row (a compiled kernel when numba is
selected), the two products batched GEMMs (numpy's matmul; with the kernels' shared thread
pool, ``bmm``: the B x H small products spread over the cores), and the output is written
(B, L, H, D) in memory, so the heads merge back into (B, L, H * D) without a copy. Backward
recomputes the probabilities from ``q`` and ``k`` (one more product) instead of keeping the
(B, H, L, S) array from forward (except in a checkpoint's recomputation, where backward
follows at once), and writes the gradients of ``q``, ``k``, ``v`` in the same (B, L, H, D)
layout.
Fused because it is measurably faster and lighter than the dozen ops of the composition (see
docs/design.md); a fully masked row gives zeros (PyTorch's ``scaled_dot_product_attention``).
"""

from __future__ import annotations

from typing import Any

from .._autodiff import OUT, Joint, apply, defprim, is_recomputing
from .._backend import xp_of
from .._kernels.registry import dispatch
from .._tensor import Tensor
from . import _binary as BI
from . import _elementwise as E
from . import _linalg as L
from . import _reduce as R
from . import _shape as S


def _blhd(xp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """A (B, H, L, D) view of a new C-contiguous (B, L, H, D) array."""
    n_b, n_h, n_l, d_ = shape
    return xp.empty((n_b, n_l, n_h, d_), dtype).transpose(0, 2, 1, 3)


def _matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` for (B, H, M, K) and (B, H, K, N), into ``out`` when given: with the kernels,
    the (B x H) small products on the kernels' threads (``bmm``; numpy's matmul runs them one
    after another on one core), else numpy's."""
    return dispatch("batched_matmul", _matmul_np, a, b, out)


def _matmul_np(a: Any, b: Any, out: Any) -> Any:
    return xp_of(a).matmul(a, b, out=out)


def _probs(q: Any, k: Any, mask: Any, scale: float) -> Any:
    """``softmax(q k^T * scale + mask)`` (B, H, L, S), zero rows where all is masked."""
    xp = xp_of(q)
    s = _matmul(q, xp.swapaxes(k, -1, -2))
    return dispatch("attention_softmax", _scores_to_probs, s, mask, scale)


def _scores_to_probs(s: Any, mask: Any, scale: float) -> Any:
    """The scores ``s`` turned into probabilities in place (and returned)."""
    xp = xp_of(s)
    s *= scale
    if mask is not None:
        s += mask
    m = s.max(axis=-1, keepdims=True)
    s -= xp.where(xp.isfinite(m), m, 0)
    xp.exp(s, out=s)
    den = s.sum(axis=-1, keepdims=True)
    s /= xp.where(den > 0, den, 1)
    return s


def _attn_fwd(q: Any, k: Any, v: Any, mask: Any, scale: float, keep: Any = None) -> Any:
    p = _probs(q, k, mask, scale)
    if keep is not None:  # a checkpoint's recomputation: backward follows at once
        keep.append(p)
    out = _blhd(xp_of(q), q.shape[:3] + v.shape[3:], p.dtype)
    return _matmul(p, v, out)


def _attn_grads_arrays(
    g: Any, out: Any, q: Any, k: Any, v: Any, mask: Any, scale: float, needs: Any,
    keep: Any = None, into: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """The gradients of q, k, v (new (B, H, L, D) views of (B, L, H, D) arrays, or written into
    ``into``'s three views) and of the mask."""
    xp = xp_of(q)
    # recomputed: forward keeps no (B, H, L, S) array, unless a recomputation kept it
    p = keep.pop() if keep else _probs(q, k, mask, scale)
    dv = None
    if needs[2]:
        dv = _blhd(xp, v.shape, p.dtype) if into is None else into[2]
        _matmul(xp.swapaxes(p, -1, -2), g, dv)
    ds = _matmul(g, xp.swapaxes(v, -1, -2))  # dp, turned into the scores' gradient in place
    dmask = xp.empty_like(ds) if needs[3] else None
    dispatch("attention_score_grad", _score_grad, p, ds, g, out, scale, dmask)
    dq = dk = None
    if needs[0]:
        dq = _blhd(xp, q.shape, p.dtype) if into is None else into[0]
        _matmul(ds, k, dq)
    if needs[1]:
        dk = _blhd(xp, k.shape, p.dtype) if into is None else into[1]
        _matmul(xp.swapaxes(ds, -1, -2), q, dk)
    return dq, dk, dv, dmask


def _attn_grads(
    xp: Any, g: Any, ans: Any, q: Any, k: Any, v: Any, mask: Any, scale: float, needs: Any,
    keep: Any = None,
) -> tuple[Any, Any, Any, Any]:
    if not xp.tensors:
        return _attn_grads_arrays(g, ans, q, k, v, mask, scale, needs, keep)
    # an outer tape records backward: the same gradients from differentiable ops
    s = L.matmul(q, S.swapaxes(k, -1, -2)) * scale
    p = safe_softmax(s if mask is None else s + mask)
    dp = L.matmul(g, S.swapaxes(v, -1, -2))
    ds = p * (dp - R.sum(g * ans, axis=-1, keepdims=True))
    dq = L.matmul(ds, k) * scale if needs[0] else None
    dk = L.matmul(S.swapaxes(ds, -1, -2), q) * scale if needs[1] else None
    dv = L.matmul(S.swapaxes(p, -1, -2), g) if needs[2] else None
    return dq, dk, dv, (ds if needs[3] else None)


# q, k, v, mask -> the attention output (B, H, L, Dv), stored (B, L, H, Dv)
_ATTN = defprim("nn.attention", _attn_fwd, Joint(_attn_grads), (0, 1, 2, 3, OUT))


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``softmax(q k^T * scale + mask) v`` for (B, H, L, D), (B, H, S, D), (B, H, S, Dv) of one
    float dtype; ``mask`` is None or an additive float mask, 4-D, broadcasting to (B, H, L, S).
    Fully masked rows give zeros. The result is a (B, H, L, Dv) view of a (B, L, H, Dv) array.

    >>> import tapegrad as tg
    >>> q = k = v = tg.ones((2, 4, 5, 8))
    >>> attention(q, k, v, None, 0.5).shape
    (2, 4, 5, 8)
    """
    return apply(_ATTN, q, k, v, mask, scale=float(scale), **_keep())


def _keep() -> dict[str, Any]:
    """In a checkpoint's recomputation, a list the forward puts its probabilities in for the
    backward that follows at once; otherwise nothing (backward recomputes them)."""
    return {"keep": []} if is_recomputing() else {}


# -- self-attention on one packed (B, L, 3, H, D) projection ----------------------------------
# A self-attention layer's input projection is one GEMM of width 3E; its output, viewed
# (B, L, 3, H, D), holds q, k and v. Taking it whole, the op reads the three as views and writes
# their gradients into one array of that shape, so backward is one GEMM for the projection's
# input and one for its weight (three of each, and two full-size adds for the shared input,
# with three separate projections; three full-size scatters with a sliced packed one).


def _score_grad(p: Any, ds: Any, g: Any, out: Any, scale: float, dmask: Any) -> None:
    """``dp`` (``ds``) turned into the scores' gradient in place; ``dmask`` (when given) gets
    it before the scale."""
    ds -= (g * out).sum(axis=-1, keepdims=True)
    ds *= p
    if dmask is not None:
        dmask[...] = ds
    ds *= scale


def _qkv(a: Any) -> tuple[Any, Any, Any]:
    """q, k, v as (B, H, L, D) views of a (B, L, 3, H, D) array or Tensor."""
    if isinstance(a, Tensor):
        return tuple(S.permute_dims(a[:, :, i], (0, 2, 1, 3)) for i in range(3))  # type: ignore[return-value]
    return tuple(a[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # type: ignore[return-value]


def _attn_qkv(qkv: Any, mask: Any, scale: float, keep: Any) -> Any:
    q, k, v = _qkv(qkv)
    return _attn_fwd(q, k, v, mask, scale, keep)


def _attn_qkv_fwd(qkv: Any, mask: Any, scale: float, keep: Any = None) -> Any:
    # small heads: one compiled pass per (batch, head) block, and backward recomputes
    return dispatch("attention_qkv", _attn_qkv, qkv, mask, scale, keep)


def _attn_qkv_grads(
    xp: Any, g: Any, ans: Any, qkv: Any, mask: Any, scale: float, needs: Any, keep: Any = None
) -> tuple[Any, Any]:
    return dispatch("attention_qkv_grad", _attn_qkv_grad, xp, g, ans, qkv, mask, scale, needs, keep)


def _attn_qkv_grad(
    xp: Any, g: Any, ans: Any, qkv: Any, mask: Any, scale: float, needs: Any, keep: Any
) -> tuple[Any, Any]:
    q, k, v = _qkv(qkv)
    if not xp.tensors:
        d = xp_of(qkv).empty(qkv.shape, dtype=qkv.dtype) if needs[0] else None
        into = None if d is None else _qkv(d)
        wanted = (needs[0], needs[0], needs[0], needs[1])
        dmask = _attn_grads_arrays(g, ans, q, k, v, mask, scale, wanted, keep, into)[3]
        return d, dmask
    dq, dk, dv, dmask = _attn_grads(xp, g, ans, q, k, v, mask, scale, (True,) * 3 + (needs[1],))
    d = S.stack([S.permute_dims(t, (0, 2, 1, 3)) for t in (dq, dk, dv)], axis=2)
    return d, dmask


# packed (B, L, 3, H, D), mask -> the attention output (B, H, L, D), stored (B, L, H, D)
_ATTN_QKV = defprim("nn.attention_qkv", _attn_qkv_fwd, Joint(_attn_qkv_grads), (0, 1, OUT))


def attention_qkv(qkv: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``attention(q, k, v, mask, scale)`` with q, k, v the three slices of one (B, L, 3, H, D)
    Tensor (a packed self-attention projection, viewed). The result is (B, H, L, D), a view of
    a (B, L, H, D) array.

    >>> import tapegrad as tg
    >>> attention_qkv(tg.ones((2, 5, 3, 4, 8)), None, 0.5).shape
    (2, 4, 5, 8)
    """
    return apply(_ATTN_QKV, qkv, mask, scale=float(scale), **_keep())


def safe_softmax(s: Tensor) -> Tensor:
    """Softmax over the last axis that gives 0 (not NaN) on rows where every score is -inf."""
    e = E.exp(s - R.max_shift(s, -1))
    den = R.sum(e, axis=-1, keepdims=True)
    pos = den > 0
    return e / BI.where(pos, den, 1.0)
