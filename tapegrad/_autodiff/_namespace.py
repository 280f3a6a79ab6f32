"""The ``xp`` a VJP is written against: numpy on arrays, or tapegrad's ops on Tensors.

numpy's names, plus ``apply``, ``data``, ``const`` and ``is_operand`` (docs/design.md,
"Primitives"). The ops package installs the Tensor namespace.
"""

from __future__ import annotations

from typing import Any

from .._backend import is_array, np


class ArrayNamespace:
    """numpy under tapegrad's op names: VJPs on arrays."""

    tensors = False

    def __getattr__(self, name: str) -> Any:
        f = getattr(np, name)
        setattr(self, name, f)  # looked up once
        return f

    @staticmethod
    def apply(prim: Any, *args: Any, **params: Any) -> Any:
        return prim.fwd(*args, **params)

    data = const = staticmethod(lambda x: x)  # arrays are their own data and constants
    is_operand = staticmethod(is_array)

    concat = staticmethod(lambda xs, axis=0: np.concatenate(xs, axis=axis))
    permute_dims = staticmethod(np.transpose)


ARRAYS = ArrayNamespace()

_TENSORS: list[Any] = []


def set_tensor_namespace(ns: Any) -> None:
    """Install the namespace of Tensor ops (called once by the ops package)."""
    _TENSORS[:] = [ns]


def tensor_namespace() -> Any:
    return _TENSORS[0]
