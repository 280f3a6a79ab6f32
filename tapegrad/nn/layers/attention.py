"""MultiheadAttention, with PyTorch's arguments, masks and parameter names."""

from __future__ import annotations

import math
from typing import Any

from ... import _backend as B
from ..._backend import np
from ..._creation import zeros
from ..._tensor import Parameter, Tensor, _wrap
from ...ops import concat, softmax
from ...ops._attention import attention, attention_qkv
from .. import functional as F
from .. import init
from .._module import Module
from ._utils import check_dtype, new_param
from .linear import Linear


def _as_mask(mask: Any, name: str, dtype: Any, device: str) -> Tensor | None:
    """PyTorch's canonical mask: a bool mask (True = may not attend) becomes an additive float
    mask of 0 and -inf; a float mask is added to the scores as it is."""
    if mask is None:
        return None
    m = mask if isinstance(mask, Tensor) else _wrap(B.to_device(np.asarray(mask), device))
    if m.dtype.kind == "b":
        xp = B.xp_of(m._data)
        return _wrap(xp.where(m._data, -np.inf, 0.0).astype(dtype))
    if m.dtype.kind != "f":
        raise TypeError(
            f"MultiheadAttention: {name} must be bool (True = masked out) or float (added to the "
            f"scores), got dtype {m.dtype}"
        )
    return m if m.dtype == dtype else m.astype(dtype)


class MultiheadAttention(Module):
    r"""Multi-head attention: ``softmax(Q K^T / sqrt(d) + mask) V`` per head, then ``out_proj``.

    ``Q, K, V = query W_q^T + b_q, key W_k^T + b_k, value W_v^T + b_v`` where the three weights
    are the row blocks of ``in_proj_weight`` ``(3 E, E)`` (or ``q_proj_weight``,
    ``k_proj_weight`` ``(E, kdim)``, ``v_proj_weight`` ``(E, vdim)`` when ``kdim``/``vdim``
    differ from ``E``) and the biases those of ``in_proj_bias`` ``(3 E,)``. Initialisation as
    PyTorch: the projection weights ``xavier_uniform_``, ``in_proj_bias`` and ``out_proj.bias``
    zero, ``out_proj.weight`` Linear's default, ``bias_k``/``bias_v`` ``xavier_normal_``.

    Inputs are ``(L, N, E)`` (or ``(N, L, E)`` with ``batch_first=True``, or unbatched
    ``(L, E)``). ``attn_mask`` ``(L, S)`` or ``(N * num_heads, L, S)`` and ``key_padding_mask``
    ``(N, S)`` are bool (True = may not attend) or float (added to the scores). Returns
    ``(output, weights)``; ``weights`` is None unless ``need_weights``, and averaged over heads
    unless ``average_attn_weights=False``.

    >>> import tapegrad as tg
    >>> mha = tg.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> x = tg.randn(3, 5, 8)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    ((3, 5, 8), (3, 5, 5))
    """

    embed_dim: int
    kdim: int
    vdim: int
    num_heads: int
    head_dim: int
    dropout: float
    batch_first: bool
    add_zero_attn: bool
    in_proj_weight: Parameter | None
    q_proj_weight: Parameter | None
    k_proj_weight: Parameter | None
    v_proj_weight: Parameter | None
    in_proj_bias: Parameter | None
    bias_k: Parameter | None
    bias_v: Parameter | None
    out_proj: Linear

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim ({embed_dim}) must be a positive multiple of "
                f"num_heads ({num_heads})"
            )
        kw = {"dtype": dtype, "device": device}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.add_zero_attn = add_zero_attn
        if self._qkv_same_embed_dim:
            self.in_proj_weight = new_param(3 * embed_dim, embed_dim, **kw)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = new_param(embed_dim, embed_dim, **kw)
            self.k_proj_weight = new_param(embed_dim, self.kdim, **kw)
            self.v_proj_weight = new_param(embed_dim, self.vdim, **kw)
            self.in_proj_weight = None
        self.in_proj_bias = new_param(3 * embed_dim, **kw) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = new_param(1, 1, embed_dim, **kw)
            self.bias_v = new_param(1, 1, embed_dim, **kw)
        else:
            self.bias_k = self.bias_v = None
        self.reset_parameters()

    @property
    def _qkv_same_embed_dim(self) -> bool:
        return self.kdim == self.embed_dim and self.vdim == self.embed_dim

    def reset_parameters(self) -> None:
        """Projection weights ``xavier_uniform_``; biases zero; ``bias_k/v`` ``xavier_normal_``."""
        if self.in_proj_weight is not None:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)  # type: ignore[arg-type]
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
        if self.out_proj.bias is not None:
            init.zeros_(self.out_proj.bias)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V split into heads: (N, H, L, D), (N, H, S, D), (N, H, S, D)."""
        E, H, D = self.embed_dim, self.num_heads, self.head_dim
        N, L = query.shape[:2]
        b = self.in_proj_bias
        if self.in_proj_weight is not None:
            # Row blocks of the packed weight, one product each (self-attention without the
            # extras takes forward's packed path instead): one (3E)-wide product split three
            # ways costs three full-size scatters in backward, slicing the weight three (E, E).
            w = self.in_proj_weight
            wq, wk, wv = w[:E], w[E : 2 * E], w[2 * E :]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight  # type: ignore[assignment]
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E : 2 * E], b[2 * E :])
        out = []
        for x, wi, bi in ((query, wq, bq), (key, wk, bk), (value, wv, bv)):
            y = F.linear(x, wi, bi).reshape(N, x.shape[1], H, D)
            out.append(y.permute_dims((0, 2, 1, 3)))  # (N, H, len, D)
        return out[0], out[1], out[2]

    def forward(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        check_dtype(self, query, self.out_proj.weight)
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(
                f"MultiheadAttention: query, key and value must all be 3-D (batched) or 2-D "
                f"(unbatched), got shapes {query.shape}, {key.shape}, {value.shape}"
            )
        # work batch first: (N, L, E), keeping `query is key is value` (the packed projection)
        if not batched or not self.batch_first:
            same_qk, same_kv = query is key, key is value
            to_nle = (lambda t: t[None]) if not batched else (lambda t: t.swapaxes(0, 1))
            query = to_nle(query)
            key = query if same_qk else to_nle(key)
            value = key if same_kv else to_nle(value)
            if not batched and key_padding_mask is not None:
                m = key_padding_mask
                key_padding_mask = m[None] if isinstance(m, Tensor) else np.asarray(m)[None]
        N, L, E = query.shape
        S = key.shape[1]
        H, D = self.num_heads, self.head_dim
        if E != self.embed_dim:
            raise ValueError(
                f"MultiheadAttention(embed_dim={self.embed_dim}): query has shape "
                f"{query.shape}; its feature dimension must be {self.embed_dim}"
            )
        if key.shape[:2] != value.shape[:2] or key.shape[0] != N:
            raise ValueError(
                f"MultiheadAttention: key {key.shape} and value {value.shape} must share batch "
                f"and sequence dimensions, and the batch size of query {query.shape}"
            )
        dtype, device = query.dtype, query.device
        mask = _as_mask(attn_mask, "attn_mask", dtype, device)
        kpm = _as_mask(key_padding_mask, "key_padding_mask", dtype, device)
        if mask is None and is_causal:  # PyTorch needs the mask too; here the hint builds it
            causal = np.triu(np.full((L, S), -np.inf, dtype=dtype), 1)
            mask = _wrap(B.to_device(causal, device))
        if mask is not None:
            if mask.shape == (L, S):
                mask = mask.reshape(1, 1, L, S)
            elif mask.shape == (N * H, L, S):
                mask = mask.reshape(N, H, L, S)
            else:
                raise ValueError(
                    f"MultiheadAttention: attn_mask has shape {mask.shape}; it must be (L, S) = "
                    f"{(L, S)} or (N * num_heads, L, S) = {(N * H, L, S)}"
                )
        if kpm is not None:
            if kpm.shape != (N, S):
                raise ValueError(
                    f"MultiheadAttention: key_padding_mask has shape {kpm.shape}; it must be "
                    f"(N, S) = {(N, S)}"
                )
            kpm = kpm.reshape(N, 1, 1, S)

        p = self.dropout if self.training else 0.0
        if (
            query is key is value
            and self.in_proj_weight is not None
            and self.bias_k is None
            and not self.add_zero_attn
            and not need_weights
            and p == 0
        ):  # self-attention: one projection GEMM, q, k, v read as views of its output
            if mask is not None and kpm is not None:
                mask = mask + kpm
            elif mask is None:
                mask = kpm
            qkv = F.linear(query, self.in_proj_weight, self.in_proj_bias)
            heads = attention_qkv(qkv.reshape(N, L, 3, H, D), mask, 1.0 / math.sqrt(D))
            return self._merge(heads, N, L, E, batched), None
        q, k, v = self._project(query, key, value)  # (N, H, L, D), (N, H, S, D), (N, H, S, D)
        if self.bias_k is not None and self.bias_v is not None:
            # one more key and value, the same for every batch element
            bk = self.bias_k.reshape(1, 1, H, D).permute_dims((0, 2, 1, 3))  # (1, H, 1, D)
            bv = self.bias_v.reshape(1, 1, H, D).permute_dims((0, 2, 1, 3))
            k = concat([k, bk.broadcast_to((N, H, 1, D))], axis=2)
            v = concat([v, bv.broadcast_to((N, H, 1, D))], axis=2)
            mask, kpm = _pad_last(mask), _pad_last(kpm)
        if self.add_zero_attn:
            z = zeros(N, H, 1, D, dtype=dtype, device=q.device)
            k = concat([k, z], axis=2)
            v = concat([v, z], axis=2)
            mask, kpm = _pad_last(mask), _pad_last(kpm)

        if mask is not None and kpm is not None:
            mask = mask + kpm  # usually constants: one add on the tape, not two
        elif mask is None:
            mask = kpm
        if not need_weights and p == 0 and q.dtype == k.dtype == v.dtype:
            # one fused op; its output is stored (N, L, H, D), so the merge below is a view
            heads = attention(q, k, v, mask, 1.0 / math.sqrt(D))
            weights = None
        else:
            scores = (q * (1.0 / math.sqrt(D))) @ k.swapaxes(-1, -2)  # (N, H, L, S)
            if mask is not None:
                scores = scores + mask
            weights = softmax(scores, axis=-1)
            if p > 0:
                weights = F.dropout(weights, p, training=True)  # returned dropped, as PyTorch
            heads = weights @ v
        out = self._merge(heads, N, L, E, batched)
        if weights is None or not need_weights:
            return out, None
        w = weights.mean(axis=1) if average_attn_weights else weights
        return out, (w if batched else w[0])


    def _merge(self, heads: Tensor, N: int, L: int, E: int, batched: bool) -> Tensor:
        """(N, H, L, D) heads -> the output projection, in the caller's layout."""
        out = self.out_proj(heads.permute_dims((0, 2, 1, 3)).reshape(N, L, E))  # (N, L, E)
        if not batched:
            return out[0]
        return out if self.batch_first else out.swapaxes(0, 1)


def _pad_last(mask: Tensor | None) -> Tensor | None:
    """One more key position (bias_k or the zero key), which every query may attend."""
    if mask is None:
        return None
    zero = _wrap(B.xp_of(mask._data).zeros(mask.shape[:-1] + (1,), dtype=mask.dtype))
    return concat([mask, zero], axis=-1)
