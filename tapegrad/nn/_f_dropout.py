"""Dropout under its ``torch.nn.functional`` names: the input times a mask of 0 and
``1 / (1 - p)`` (``ops/_dropout.py``), whole channels for the feature forms.

``inplace=`` is accepted for signature compatibility and ignored: tapegrad never mutates an
input that a tape may have saved, so every function returns a new tensor.
"""

from __future__ import annotations

import warnings
from typing import Any

from .._tensor import Tensor
from ..ops._dropout import keep_mask
from ._f_common import float_input


def _check_p(p: float, op: str) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability p must be in [0, 1], got {p}")


def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Identity when ``training`` is False or ``p`` is 0. Masks come from tapegrad's global
    generator, so ``tg.manual_seed`` makes them repeatable.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.dropout(tg.ones(4), p=0.5, training=False).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    x = float_input(input, "dropout")
    _check_p(p, "dropout")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    return x * keep_mask(x, p, x.shape)


def _feature_dropout(x: Tensor, p: float, training: bool, op: str, batched: bool) -> Tensor:
    _check_p(p, op)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    lead = 2 if batched else 1  # one draw per (n, c), or per c of an unbatched input
    return x * keep_mask(x, p, x.shape[:lead] + (1,) * (x.ndim - lead))


def _rank_warning(op: str, ndim: int, ranks: str, spatial: int) -> None:
    warnings.warn(  # PyTorch's warning
        f"{op}: Received a {ndim}-D input to {op}, which is deprecated and will result in an "
        f"error in a future release. To retain the behavior and silence this warning, please "
        f"use dropout instead. Note that {op} exists to provide channel-wise dropout on inputs "
        f"with {spatial} spatial dimensions, a channel dimension, and an optional batch "
        f"dimension (i.e. {ranks} inputs).",
        UserWarning,
        stacklevel=3,
    )


def dropout1d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, L), or of unbatched (C, L), with probability ``p``; other
    ranks raise (PyTorch's rules)."""
    x = float_input(input, "dropout1d")
    if x.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {x.ndim}D input (shape "
            f"{x.shape}); dropout1d drops channels of (N, C, L) or (C, L): use dropout for "
            "element-wise dropout"
        )
    return _feature_dropout(x, p, training, "dropout1d", x.ndim == 3)


def dropout2d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels with probability ``p``, as PyTorch: the first two axes are always
    (N, C), so (N, C, H, W) drops (H, W) maps and a 3-D input is (N, C, L) (a warning says so);
    other ranks warn as PyTorch does, and a 2-D (N, C) input then drops single elements."""
    x = float_input(input, "dropout2d")
    if x.ndim not in (3, 4):
        _rank_warning("dropout2d", x.ndim, "3D or 4D", 2)
    if x.ndim < 2:
        raise RuntimeError(
            f"dropout2d: Feature dropout requires at least 2 dimensions in the input, got shape "
            f"{x.shape}; use dropout for element-wise dropout"
        )
    if x.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
            "the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            UserWarning,
            stacklevel=2,
        )
    return _feature_dropout(x, p, training, "dropout2d", True)


def dropout3d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, D, H, W), or of unbatched (C, D, H, W), with probability
    ``p``; other ranks warn as PyTorch does and are read as unbatched."""
    x = float_input(input, "dropout3d")
    if x.ndim not in (4, 5):
        _rank_warning("dropout3d", x.ndim, "4D or 5D", 3)
    return _feature_dropout(x, p, training, "dropout3d", x.ndim == 5)
