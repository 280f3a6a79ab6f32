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


class DtypeMismatchError(TypeError, ValueError, RuntimeError):
    """A float input whose dtype differs from the layer's parameters'. A TypeError, and also
    the RuntimeError / ValueError PyTorch raises for the same call (so ported code that catches
    those still does)."""


def check_dtype(layer: Any, input: Any, p: Any) -> None:
    """Raise, as PyTorch does, when a float ``input`` meets a layer whose parameter ``p`` has
    another float dtype (a float64 batch into a float32 model would otherwise run in float64,
    slower, and return float32 gradients for float64 work). ``p`` None: nothing to check."""
    dt = getattr(input, "dtype", None)
    if p is None or dt is None or dt == p.dtype or dt.kind != "f" or p.dtype.kind != "f":
        return
    raise DtypeMismatchError(
        f"{type(layer).__name__}: the input is {dt} but the layer's parameters are {p.dtype} "
        f"(PyTorch raises too: \"expected m1 and m2 to have the same dtype\"); cast the input, "
        f"x.{_CAST.get(p.dtype.name, 'astype')}(), or the model, "
        f"model.{_CAST.get(dt.name, 'to')}() (model.to({_TG.get(dt.name, dt.name)}))"
    )


_CAST = {"float32": "float", "float64": "double", "float16": "half"}
_TG = {"float32": "tg.float32", "float64": "tg.float64", "float16": "tg.float16"}
