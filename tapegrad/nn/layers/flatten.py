"""Flatten and Unflatten: reshape layers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..._tensor import Tensor
from ...ops import flatten
from .._module import Module


class Flatten(Module):
    """Flatten dimensions ``start_dim`` to ``end_dim`` into one (by default all but the batch).

    >>> import tapegrad as tg
    >>> tg.nn.Flatten()(tg.ones((2, 3, 4, 5))).shape
    (2, 60)
    """

    start_dim: int
    end_dim: int

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expand dimension ``dim`` into ``unflattened_size`` (one entry may be -1).

    >>> import tapegrad as tg
    >>> tg.nn.Unflatten(1, (3, 4))(tg.ones((2, 12))).shape
    (2, 3, 4)
    """

    dim: int
    unflattened_size: tuple[int, ...]

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        d = self.dim % input.ndim
        size = self.unflattened_size
        known = math.prod(s for s in size if s != -1)
        if (-1 not in size and known != input.shape[d]) or (-1 in size and input.shape[d] % known):
            raise ValueError(
                f"Unflatten(dim={self.dim}, unflattened_size={size}): dimension {self.dim} of an "
                f"input of shape {input.shape} has {input.shape[d]} elements, which {size} "
                "cannot hold"
            )
        return input.reshape(input.shape[:d] + size + input.shape[d + 1 :])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
