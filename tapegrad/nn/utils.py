"""Helpers on gradients, as PyTorch's ``torch.nn.utils``, written with tapegrad ops (so a
``tg.compile`` capture sees them: no Python branch on a gradient's value)."""

from __future__ import annotations

from typing import Any

from .._autodiff import Gradients
from .._tensor import Tensor
from ..ops import _elementwise as E

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(grads: Any, max_norm: float, eps: float = 1e-6) -> tuple[Gradients, Tensor]:
    """``(clipped gradients, total norm)``: every gradient times
    ``min(1, max_norm / (norm + eps))``, ``norm`` the L2 norm of all of them together, as
    ``torch.nn.utils.clip_grad_norm_`` (which scales ``.grad`` in place; tapegrad's gradients
    are values, so the scaled ones are returned). The scale is computed with tensor ops, never
    a Python branch, so a step that clips compiles (``tg.compile``).

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, 4.0]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum() / 2
    >>> clipped, norm = tg.nn.utils.clip_grad_norm_(tape.gradient(loss), 1.0)
    >>> round(norm.item(), 4), [round(v, 4) for v in clipped[w].tolist()]
    (5.0, [0.6, 0.8])
    """
    if not max_norm > 0:
        raise ValueError(f"clip_grad_norm_: max_norm must be > 0, got {max_norm}")
    if not isinstance(grads, Gradients):
        raise TypeError(
            f"clip_grad_norm_: expected the tg.Gradients from tape.gradient(...), got "
            f"{type(grads).__name__}"
        )
    pairs = list(grads.items())
    if not pairs:
        raise ValueError("clip_grad_norm_: the Gradients are empty")
    total: Any = None
    for _, g in pairs:
        sq = (g * g).sum()
        total = sq if total is None else total + sq
    norm = E.sqrt(total)
    coef = E.minimum(max_norm / (norm + eps), 1.0)
    return Gradients((p, g * coef.astype(g.dtype)) for p, g in pairs), norm
