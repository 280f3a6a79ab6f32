"""Bind the ops to Tensor as methods and operators (after both exist): one table over numpy's
surface (``_numpy.py``) and PyTorch's (``_torch.py``), each name declared once."""

from __future__ import annotations

from typing import Any

from .. import _numpy_api
from .._tensor import Tensor
from ._numpy import core as _core
from ._torch import torch as _torch
from ._torch import torch_more as _torch_more
from ._torch import torch_names as _torch_names


def table() -> dict[str, Any]:
    """Every method and operator this package gives ``Tensor``, each name once: a name bound by
    two parts, or one that the class body defines, is an error."""
    out: dict[str, Any] = {}
    for part in (_core(), _torch_names(), _torch(), _torch_more(), _numpy_api.PROTOCOLS):
        for name, f in part.items():
            if name in out or name in _CLASS_BODY:
                raise AssertionError(f"Tensor.{name} is declared twice")
            out[name] = f
    return out


_CLASS_BODY = frozenset(vars(Tensor))  # what the class body declares (before binding)
for _name, _f in table().items():
    setattr(Tensor, _name, _f)
