"""The ``xp`` a VJP is written against: numpy on arrays, or tapegrad's ops on Tensors.

A VJP uses operators and ``xp``'s functions under their numpy / Array API names (``xp.sum``,
``xp.where``, ``xp.reshape``, ``xp.matmul``, ...), plus four engine helpers that both
namespaces give:

- ``xp.apply(prim, *args, **params)``: another primitive (its forward on arrays; recorded on
  Tensors), for VJPs that are themselves primitives (conv's input gradient, col2im, ...);
- ``xp.data(x)``: the array behind an operand, for a constant computed from the values (a mask);
- ``xp.const(a)``: such an array as an operand (a Tensor on no tape, or the array itself);
- ``xp.is_operand(x)``: whether ``x`` is an operand (a Tensor, or an array) rather than a
  Python number.

The tensor namespace is installed by the ops package (``set_tensor_namespace``), so the engine
imports nothing above it.
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

    @staticmethod
    def data(x: Any) -> Any:
        return x

    @staticmethod
    def const(a: Any) -> Any:
        return a

    @staticmethod
    def is_operand(x: Any) -> bool:
        return is_array(x)

    @staticmethod
    def concat(xs: Any, axis: int = 0) -> Any:
        return np.concatenate(xs, axis=axis)

    @staticmethod
    def permute_dims(x: Any, axes: Any) -> Any:
        return np.transpose(x, axes)


ARRAYS = ArrayNamespace()

_TENSORS: list[Any] = []


def set_tensor_namespace(ns: Any) -> None:
    """Install the namespace of Tensor ops (called once by the ops package)."""
    _TENSORS[:] = [ns]


def tensor_namespace() -> Any:
    return _TENSORS[0]
