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

    @staticmethod
    def broadcast_to(a: Any, shape: Any) -> Any:
        """``np.broadcast_to``; a small result is filled instead (numpy's view is built in
        Python: a reduction's gradient on a 64 x 2 batch took 2.1 us that way, 0.5 filled)."""
        if type(a) is np.ndarray and a.size == 1 and a.ndim <= len(shape) <= 4:
            n = 1
            for d in shape:
                n *= d
            if n <= 4096:
                out = np.empty(shape, a.dtype)
                out.fill(a.reshape(()))
                return out
        return np.broadcast_to(a, shape)

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
