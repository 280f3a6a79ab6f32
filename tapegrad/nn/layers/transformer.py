"""Transformer layers with PyTorch's structure, arguments and parameter names.

TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and
Transformer. ``norm_first=False`` is the original post-norm block, ``x = norm(x + f(x))``;
``norm_first=True`` the pre-norm block, ``x = x + f(norm(x))``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..._backend import np
from ..._dtypes import as_dtype
from ..._tensor import Tensor, _wrap
from .. import functional as F
from .. import init
from .._f_linear import linear_relu
from .._module import Module
from .attention import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .norm import LayerNorm


def _activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation):
        return activation
    raise ValueError(
        f"Transformer: activation must be 'relu', 'gelu' or a callable, got {activation!r}"
    )


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: their construction in PyTorch's attribute
    order (so state_dict keys and order match) and the attention and feed-forward blocks."""

    def _build(  # noqa: PLR0917 - the layers' arguments, passed on in order
        self,
        attentions: tuple[str, ...],
        norms: int,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float,
        activation: str | Callable[[Tensor], Tensor],
        layer_norm_eps: float,
        batch_first: bool,
        norm_first: bool,
        bias: bool,
        device: Any,
        dtype: Any,
    ) -> None:
        kw = {"dtype": dtype, "device": device}
        for name in attentions:
            attn = MultiheadAttention(
                d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
            )
            setattr(self, name, attn)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    def _attn_block(
        self,
        attn: MultiheadAttention,
        x: Tensor,
        mem: Tensor,
        drop: Dropout,
        *,
        mask: Any,
        key_padding_mask: Any,
        is_causal: bool,
    ) -> Tensor:
        out = attn(
            x, mem, mem, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
            is_causal=is_causal,
        )[0]  # fmt: skip
        return drop(out)

    def _ff_block(self, x: Tensor, drop: Dropout) -> Tensor:
        lin = self.linear1
        if self.activation is F.relu and type(lin) is Linear:
            # linear1's product, bias add and ReLU as one primitive, still as linear1's call (a
            # replaced or subclassed linear1 runs its own forward)
            h = lin._called(linear_relu, x, lin.weight, lin.bias)
        else:
            h = self.activation(self.linear1(x))
        return drop(self.linear2(self.dropout(h)))


class TransformerEncoderLayer(_TransformerLayer):
    r"""Self-attention then a feed-forward block, each with a residual connection and LayerNorm.

    Post-norm (default): ``x = norm1(x + sa(x)); x = norm2(x + ff(x))``. Pre-norm
    (``norm_first=True``): ``x = x + sa(norm1(x)); x = x + ff(norm2(x))``, with
    ``ff(x) = linear2(dropout(activation(linear1(x))))``. Parameters are named as in PyTorch
    (``self_attn.in_proj_weight``, ``linear1.weight``, ``norm1.weight``, ...).

    >>> import tapegrad as tg
    >>> layer = tg.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(tg.randn(2, 5, 16)).shape
    (2, 5, 16)
    """

    self_attn: MultiheadAttention
    linear1: Linear
    dropout: Dropout
    linear2: Linear
    norm_first: bool
    norm1: LayerNorm
    norm2: LayerNorm
    dropout1: Dropout
    dropout2: Dropout

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self._build(
            ("self_attn",), 2, d_model, nhead, dim_feedforward, dropout, activation,
            layer_norm_eps, batch_first, norm_first, bias, device, dtype,
        )  # fmt: skip

    def forward(
        self,
        src: Tensor,
        src_mask: Any = None,
        src_key_padding_mask: Any = None,
        is_causal: bool = False,
    ) -> Tensor:
        def sa(y: Tensor) -> Tensor:
            return self._attn_block(
                self.self_attn, y, y, self.dropout1, mask=src_mask,
                key_padding_mask=src_key_padding_mask, is_causal=is_causal,
            )  # fmt: skip

        x = src
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + self._ff_block(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + self._ff_block(x, self.dropout2))
        return x


class TransformerDecoderLayer(_TransformerLayer):
    r"""Self-attention, attention over the encoder's output (``memory``), then a feed-forward
    block; each with a residual connection and LayerNorm (post-norm unless ``norm_first``).

    Post-norm: ``x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x))``.

    >>> import tapegrad as tg
    >>> layer = tg.nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(tg.randn(2, 5, 16), tg.randn(2, 7, 16)).shape
    (2, 5, 16)
    """

    self_attn: MultiheadAttention
    multihead_attn: MultiheadAttention
    linear1: Linear
    dropout: Dropout
    linear2: Linear
    norm_first: bool
    norm1: LayerNorm
    norm2: LayerNorm
    norm3: LayerNorm
    dropout1: Dropout
    dropout2: Dropout
    dropout3: Dropout

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self._build(
            ("self_attn", "multihead_attn"), 3, d_model, nhead, dim_feedforward, dropout,
            activation, layer_norm_eps, batch_first, norm_first, bias, device, dtype,
        )  # fmt: skip

    def forward(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        def sa(y: Tensor) -> Tensor:
            return self._attn_block(
                self.self_attn, y, y, self.dropout1, mask=tgt_mask,
                key_padding_mask=tgt_key_padding_mask, is_causal=tgt_is_causal,
            )  # fmt: skip

        def mha(y: Tensor) -> Tensor:
            return self._attn_block(
                self.multihead_attn, y, memory, self.dropout2, mask=memory_mask,
                key_padding_mask=memory_key_padding_mask, is_causal=memory_is_causal,
            )  # fmt: skip

        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            x = x + self._ff_block(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + mha(x))
            x = self.norm3(x + self._ff_block(x, self.dropout3))
        return x


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (deep copies, so they start equal, as in
    PyTorch), then ``norm`` if given. Parameters are ``layers.0.self_attn.in_proj_weight``, ...

    ``enable_nested_tensor`` and ``mask_check`` are accepted for PyTorch compatibility; they
    select PyTorch kernels and change nothing here.

    >>> import tapegrad as tg
    >>> layer = tg.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    >>> enc = tg.nn.TransformerEncoder(layer, num_layers=2)
    >>> enc(tg.randn(5, 3, 8)).shape, len(enc.layers)
    ((5, 3, 8), 2)
    """

    layers: ModuleList
    num_layers: int
    norm: Module | None

    def __init__(
        self,
        encoder_layer: Module,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        src: Tensor,
        mask: Any = None,
        src_key_padding_mask: Any = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(
                x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                is_causal=bool(is_causal),
            )  # fmt: skip
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` if given.

    >>> import tapegrad as tg
    >>> layer = tg.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16)
    >>> tg.nn.TransformerDecoder(layer, 2)(tg.randn(4, 3, 8), tg.randn(6, 3, 8)).shape
    (4, 3, 8)
    """

    layers: ModuleList
    num_layers: int
    norm: Module | None

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal,
            )  # fmt: skip
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    r"""The encoder-decoder Transformer (Vaswani et al. 2017) with PyTorch's structure.

    ``encoder`` is a TransformerEncoder of ``num_encoder_layers`` layers with a final
    LayerNorm, ``decoder`` a TransformerDecoder likewise; every parameter with more than one
    dimension is re-initialised with ``xavier_uniform_`` (PyTorch's ``_reset_parameters``).
    Inputs are ``(S, N, E)`` / ``(T, N, E)``, or batch first with ``batch_first=True``.

    >>> import tapegrad as tg
    >>> model = tg.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1,
    ...                           num_decoder_layers=1, dim_feedforward=16, batch_first=True)
    >>> model(tg.randn(2, 6, 8), tg.randn(2, 4, 8)).shape
    (2, 4, 8)
    """

    encoder: Module
    decoder: Module
    d_model: int
    nhead: int
    batch_first: bool

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        common = {
            "dim_feedforward": dim_feedforward,
            "dropout": dropout,
            "activation": activation,
            "layer_norm_eps": layer_norm_eps,
            "batch_first": batch_first,
            "norm_first": norm_first,
            "bias": bias,
        }
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, **common, **kw)  # type: ignore[arg-type]
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer2 = TransformerDecoderLayer(d_model, nhead, **common, **kw)  # type: ignore[arg-type]
            norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
            self.decoder = TransformerDecoder(layer2, num_decoder_layers, norm2)
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``xavier_uniform_`` on every parameter with more than one dimension."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Any = None,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        src_key_padding_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise ValueError(
                f"Transformer: src {src.shape} and tgt {tgt.shape} must have the same batch size "
                f"(axis {batch_axis}{' with batch_first' if self.batch_first else ''})"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(
                f"Transformer(d_model={self.d_model}): the feature dimension of src {src.shape} "
                f"and tgt {tgt.shape} must be {self.d_model}"
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
            is_causal=src_is_causal,
        )  # fmt: skip
        return self.decoder(
            tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """A float ``(sz, sz)`` causal mask: 0 on and below the diagonal, -inf above.

        >>> import tapegrad as tg
        >>> tg.nn.Transformer.generate_square_subsequent_mask(3).tolist()
        [[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]]
        """
        mask = np.triu(np.full((sz, sz), -np.inf, dtype=as_dtype(dtype)), 1)
        out = _wrap(mask)
        return out if device is None else out.to(device)
