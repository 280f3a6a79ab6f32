"""Dropout's mask: a non-differentiable primitive (``dropout_mask``) drawn from tapegrad's
global generator (``tg.manual_seed`` makes it repeatable)."""

from __future__ import annotations

from typing import Any

from .. import _backend as B
from .. import _creation
from .._autodiff import apply, nondiff
from .._backend import np
from .._tensor import Tensor


def _keep_mask_fwd(*, gen: Any, shape: tuple[int, ...], dtype: Any, p: float, device: str) -> Any:
    dt = dtype if dtype in (np.float32, np.float64) else np.float32
    keep = gen._rng.random(shape, dtype=dt) >= p
    m = keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))
    return B.to_device(m, device)


# through apply, so that tg.compile captures the draw and replays it on the same generator
_KEEP_MASK = nondiff("dropout_mask", _keep_mask_fwd)


def keep_mask(x: Tensor, p: float, shape: tuple[int, ...]) -> Tensor:
    """A constant mask of 0 and ``1 / (1 - p)`` (kept with probability ``1 - p``)."""
    gen = _creation.default_generator()
    return apply(_KEEP_MASK, gen=gen, shape=shape, dtype=x.dtype, p=p, device=x.device)

