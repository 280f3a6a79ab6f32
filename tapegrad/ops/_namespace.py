"""The Tensor namespace VJPs run against when an outer tape records the backward pass.

It is tapegrad's ops under their numpy names (see ``tapegrad._autodiff._namespace``), so a VJP
written once with ``xp.<name>`` computes the same numbers on arrays and, differentiably, on
Tensors.
"""

from __future__ import annotations

import sys
from typing import Any

from .._autodiff import apply
from .._backend import np
from .._tensor import Tensor, _wrap


class TensorNamespace:
    """tapegrad's ops for VJPs on Tensors."""

    tensors = True
    apply = staticmethod(apply)
    const = staticmethod(_wrap)

    def __getattr__(self, name: str) -> Any:
        f = getattr(sys.modules["tapegrad.ops"], name)
        setattr(self, name, f)  # looked up once
        return f

    @staticmethod
    def data(x: Any) -> Any:
        return x._data if isinstance(x, Tensor) else x

    @staticmethod
    def is_operand(x: Any) -> bool:
        return isinstance(x, Tensor)

    @staticmethod
    def zeros_like(x: Tensor) -> Tensor:
        # a constant: the derivative of a piecewise-constant function is zero, whatever g holds
        return _wrap(np.zeros_like(x._data))
