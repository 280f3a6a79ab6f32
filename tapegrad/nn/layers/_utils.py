"""Small helpers shared by the layer files."""

from __future__ import annotations

from typing import Any

from ..._creation import empty
from ..._tensor import Parameter


def new_param(*shape: int, dtype: Any = None, device: Any = None) -> Parameter:
    """An uninitialised Parameter; the layer's ``reset_parameters`` fills it."""
    return Parameter(empty(*shape, dtype=dtype, device=device))


def ntuple(value: Any, n: int, name: str, layer: str) -> tuple[int, ...]:
    """``3`` -> ``(3, 3)`` for n=2; a tuple must already have ``n`` items."""
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{layer}: {name} must be an int or {n} ints, got {value!r}")
        return tuple(int(v) for v in value)
    return (int(value),) * n
