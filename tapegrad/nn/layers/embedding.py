"""Embedding: a lookup table of vectors indexed by integer ids."""

from __future__ import annotations

from typing import Any

from ..._backend import np
from ..._tensor import Parameter, Tensor
from .. import functional as F
from .. import init
from .._module import Module
from ._utils import new_param


class Embedding(Module):
    """``weight[input]``: row ``i`` of ``weight`` is the vector of id ``i``.

    ``weight`` has shape ``(num_embeddings, embedding_dim)``, drawn from ``N(0, 1)``; the row
    ``padding_idx`` (if given) starts at zero and gets no gradient. ``max_norm`` rescales, in
    place, the looked-up rows whose ``norm_type``-norm exceeds it (as PyTorch).

    >>> import tapegrad as tg
    >>> emb = tg.nn.Embedding(10, 3, padding_idx=0)
    >>> emb(tg.tensor([[0, 4], [9, 0]])).shape, emb.weight[0].tolist()
    ((2, 2, 3), [0.0, 0.0, 0.0])
    """

    num_embeddings: int
    embedding_dim: int
    padding_idx: int | None
    max_norm: float | None
    norm_type: float
    scale_grad_by_freq: bool
    sparse: bool
    weight: Parameter

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Any = None,
        _freeze: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx {padding_idx} is out of range for "
                    f"{num_embeddings} embeddings"
                )
            padding_idx %= num_embeddings
        if sparse:
            raise NotImplementedError(
                "Embedding: sparse gradients are not supported; use sparse=False"
            )
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = new_param(num_embeddings, embedding_dim, dtype=dtype, device=device)
            self.reset_parameters()
        else:
            w = Parameter(_weight, dtype=dtype)
            if w.shape != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"Embedding: _weight has shape {w.shape}, expected "
                    f"{(num_embeddings, embedding_dim)}"
                )
            self.weight = w
        self.weight.requires_grad = not _freeze

    def reset_parameters(self) -> None:
        """``weight ~ N(0, 1)``, with the ``padding_idx`` row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    @classmethod
    def from_pretrained(  # noqa: PLR0917 - PyTorch's positional signature
        cls,
        embeddings: Any,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding holding a copy of ``embeddings`` (2-D), frozen unless ``freeze=False``."""
        rows, cols = np.shape(embeddings._data if isinstance(embeddings, Tensor) else embeddings)
        return cls(
            rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
            _weight=embeddings, _freeze=freeze,
        )  # fmt: skip

    def forward(self, input: Any) -> Tensor:
        return F.embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
            self.scale_grad_by_freq, self.sparse,
        )  # fmt: skip

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        return s
