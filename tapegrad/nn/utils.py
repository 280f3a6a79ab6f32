"""Helpers on gradients, as PyTorch's ``torch.nn.utils``, written with tapegrad ops (so a
``tg.compile`` capture sees them: no Python branch on a gradient's value).

The names with a trailing ``_`` change the ``Gradients`` value they are given, as PyTorch's
change ``.grad``: each entry is replaced by its clipped tensor, so ``opt.step(grads)`` after
them steps with the clipped gradients (a tensor taken out of ``grads`` before keeps its old
values). The names without it return new ``Gradients`` and leave theirs unchanged.
"""

from __future__ import annotations

import math
from typing import Any

from .._autodiff import Gradients
from .._tensor import Tensor
from ..ops import _binary as BI
from ..ops import _elementwise as E
from ..ops import _reduce as R
from ..ops import _shape as S

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value", "clip_grad_value_"]


def _pairs(grads: Any, name: str) -> list[tuple[Tensor, Tensor]]:
    if not isinstance(grads, Gradients):
        raise TypeError(
            f"{name}: expected the tg.Gradients from tape.gradient(...), got "
            f"{type(grads).__name__}; tapegrad keeps gradients out of the parameters: write "
            f"grads = tape.gradient(loss, model); {name}(grads, ...); opt.step(grads)"
        )
    pairs = list(grads.items())
    if not pairs:
        raise ValueError(f"{name}: the Gradients are empty")
    return pairs


def _replace(grads: Gradients, clipped: Gradients) -> None:
    # Gradients keys its entries by the source's identity; swap each entry's tensor
    for p, g in clipped.items():
        grads._d[id(p)] = (p, g)


def clip_grad_norm(
    grads: Any, max_norm: float, norm_type: float = 2.0, eps: float = 1e-6
) -> tuple[Gradients, Tensor]:
    """``(clipped gradients, total norm)``, leaving ``grads`` unchanged: every gradient times
    ``min(1, max_norm / (norm + eps))``, ``norm`` the ``norm_type``-norm of all of them
    together (``inf`` for the largest magnitude). The scale is computed with tensor ops, never
    a Python branch, so a step that clips compiles (``tg.compile``).

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, 4.0]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum() / 2
    >>> clipped, norm = tg.nn.utils.clip_grad_norm(tape.gradient(loss), 1.0)
    >>> round(norm.item(), 4), [round(v, 4) for v in clipped[w].tolist()]
    (5.0, [0.6, 0.8])
    """
    if not max_norm > 0:
        raise ValueError(f"clip_grad_norm_: max_norm must be > 0, got {max_norm}")
    pairs = _pairs(grads, "clip_grad_norm_")
    p = float(norm_type)
    if math.isinf(p):
        norm = R.amax(S.stack([R.amax(E.abs(g)).astype(pairs[0][1].dtype) for _, g in pairs]))
    else:
        total: Any = None
        for _, g in pairs:
            part = (g * g).sum() if p == 2.0 else (E.abs(g) ** p).sum()
            total = part if total is None else total + part
        norm = E.sqrt(total) if p == 2.0 else total ** (1.0 / p)
    coef = BI.minimum(max_norm / (norm + eps), 1.0)
    return Gradients((q, g * coef.astype(g.dtype)) for q, g in pairs), norm


def clip_grad_norm_(
    grads: Any, max_norm: float, norm_type: float = 2.0, eps: float = 1e-6
) -> Tensor:
    """Clip ``grads`` in place to total ``norm_type``-norm ``max_norm`` and return the norm
    before clipping, as ``torch.nn.utils.clip_grad_norm_`` (each gradient times
    ``min(1, max_norm / (norm + eps))``). ``clip_grad_norm`` returns a clipped copy instead.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, 4.0]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum() / 2
    >>> grads = tape.gradient(loss)
    >>> norm = tg.nn.utils.clip_grad_norm_(grads, 1.0)
    >>> round(norm.item(), 4), [round(v, 4) for v in grads[w].tolist()]
    (5.0, [0.6, 0.8])
    """
    clipped, norm = clip_grad_norm(grads, max_norm, norm_type, eps)
    _replace(grads, clipped)
    return norm


def clip_grad_value(grads: Any, clip_value: float) -> Gradients:
    """Every gradient clamped to ``[-clip_value, clip_value]``, leaving ``grads`` unchanged.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, -0.5]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> tg.nn.utils.clip_grad_value(tape.gradient(loss), 1.0)[w].tolist()
    [1.0, -1.0]
    """
    c = float(clip_value)
    return Gradients((p, E.clip(g, -c, c)) for p, g in _pairs(grads, "clip_grad_value_"))


def clip_grad_value_(grads: Any, clip_value: float) -> None:
    """Clamp every gradient in ``grads`` to ``[-clip_value, clip_value]`` in place, as
    ``torch.nn.utils.clip_grad_value_`` (returns None). ``clip_grad_value`` returns a copy."""
    _replace(grads, clip_grad_value(grads, clip_value))
