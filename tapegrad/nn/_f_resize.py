"""Padding and resampling: ``pad`` (PyTorch's argument order) and ``interpolate``."""


from __future__ import annotations

import math
from typing import Any

from .._backend import np, xp_of
from .._tensor import Tensor, _wrap
from ..ops import _shape as S
from ..ops._common import as_tensor
from ._f_common import float_input, take

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(input: Any, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad with PyTorch's argument order: ``pad`` lists (before, after) pairs starting from the
    LAST axis, e.g. ``(left, right, top, bottom)`` for the two spatial axes of (N, C, H, W).

    ``mode``: 'constant' (``value``, default 0; negative widths crop), 'reflect',
    'replicate' or 'circular'.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.pad(tg.ones((1, 2)), (1, 2)).tolist()
    [[0.0, 1.0, 1.0, 0.0, 0.0]]
    """
    x = as_tensor(input)
    widths = tuple(int(p) for p in pad)
    if len(widths) % 2 or len(widths) // 2 > x.ndim:
        raise ValueError(
            f"pad: pad {tuple(pad)} must have an even length of at most 2 * ndim "
            f"({2 * x.ndim} for shape {x.shape}): (before, after) pairs from the last axis"
        )
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    k = len(widths) // 2
    pairs = [(0, 0)] * (x.ndim - k) + [(widths[2 * i], widths[2 * i + 1]) for i in range(k)][::-1]
    if mode != "constant":
        if value not in (None, 0, 0.0):
            raise ValueError(f"pad: value= only applies to mode='constant', got mode={mode!r}")
        crop = [(max(-a, 0), max(-b, 0)) for a, b in pairs]
        pairs = [(max(a, 0), max(b, 0)) for a, b in pairs]
        if mode == "circular":  # negative widths crop first; the rest wraps the cropped tensor
            if any(crop_a or crop_b for crop_a, crop_b in crop):
                x = x[tuple(slice(a, n - b) for (a, b), n in zip(crop, x.shape, strict=True))]
                crop = [(0, 0)] * x.ndim
            if any(a > n or b > n for (a, b), n in zip(pairs, x.shape, strict=True)):
                raise ValueError(
                    f"pad: circular padding {tuple(pad)} would wrap around {x.shape} more than "
                    "once (PyTorch raises, or leaves such values undefined); pad at most each "
                    "dimension's size"
                )
        if mode == "reflect":
            for (a, b), n in zip(pairs, x.shape, strict=True):
                if a >= n or b >= n:
                    raise ValueError(
                        f"pad: reflect padding {tuple(pad)} must be smaller than the padded "
                        f"dimensions of {x.shape}"
                    )
        out = S.pad(x, pairs, mode=_PAD_MODES[mode])
        if any(a or b for a, b in crop):  # negative widths crop the padded result, as PyTorch
            out = out[tuple(slice(a, n - b) for (a, b), n in zip(crop, out.shape, strict=True))]
        return out
    if any(a < 0 or b < 0 for a, b in pairs):  # negative widths crop first
        x = x[
            tuple(
                slice(max(-a, 0), n - max(-b, 0)) for (a, b), n in zip(pairs, x.shape, strict=True)
            )
        ]
        pairs = [(max(a, 0), max(b, 0)) for a, b in pairs]
    if not any(a or b for a, b in pairs):
        return x
    return S.pad(x, pairs, mode="constant", value=0.0 if value is None else value)


# --------------------------------------------------------------------------------------------
# interpolate: separable, one axis at a time, by gathers (sorted indices) and weights
# --------------------------------------------------------------------------------------------

_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _out_sizes(x: Tensor, size: Any, scale_factor: Any, op: str) -> tuple[list[int], list[Any]]:
    nd = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        sizes = [int(size)] * nd if isinstance(size, (int, np.integer)) else [int(s) for s in size]
        if len(sizes) != nd:
            raise ValueError(f"{op}: size {size!r} must give {nd} sizes for input {x.shape}")
        return sizes, [None] * nd
    sf = (
        [float(scale_factor)] * nd
        if isinstance(scale_factor, (int, float))
        else [float(s) for s in scale_factor]
    )
    if len(sf) != nd:
        raise ValueError(
            f"{op}: scale_factor {scale_factor!r} must give {nd} factors for input {x.shape}"
        )
    return [int(math.floor(n * f)) for n, f in zip(x.shape[2:], sf, strict=True)], sf


def interpolate(
    input: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resample the spatial axes of (N, C, ...) to ``size`` or by ``scale_factor``.

    Modes: 'nearest', 'nearest-exact', and 'linear' / 'bilinear' / 'trilinear' for 1, 2 and 3
    spatial axes (``align_corners`` as in PyTorch). Index rules follow PyTorch, including the
    use of ``1 / scale_factor`` for the source positions when a scale factor is given.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.interpolate(tg.tensor([[[1.0, 2.0]]]), scale_factor=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """
    op = "interpolate"
    x = float_input(input, op)
    if x.ndim < 3:
        raise ValueError(f"{op}: input must be (N, C, d1, ...), got shape {x.shape}")
    if antialias:
        raise NotImplementedError(f"{op}: antialias=True is not supported")
    sizes, sf = _out_sizes(x, size, scale_factor, op)
    if min(sizes) < 1:
        raise ValueError(f"{op}: the output size {tuple(sizes)} must be positive")
    if recompute_scale_factor:
        sf = [None] * len(sf)
    nd = x.ndim - 2
    if mode in ("nearest", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(f"{op}: align_corners only applies to the linear modes, not {mode!r}")
        for k in range(nd):
            ax = 2 + k
            n, o = x.shape[ax], sizes[k]
            if n == o:
                continue
            scale = np.float32(1.0 / sf[k] if sf[k] else n / o)  # PyTorch computes it in float
            dst = np.arange(o, dtype=np.float32) + (
                np.float32(0.5) if mode == "nearest-exact" else 0
            )
            idx = np.minimum(np.floor(dst * scale).astype(np.int64), n - 1)
            x = take(x, idx, ax)
        return x
    if mode not in _LINEAR_MODES:
        raise ValueError(
            f"{op}: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear' or "
            f"'trilinear', got {mode!r}"
        )
    if _LINEAR_MODES[mode] != nd:
        raise ValueError(
            f"{op}: mode {mode!r} needs {_LINEAR_MODES[mode]} spatial axes, input is {x.shape}"
        )
    ac = bool(align_corners)
    for k in range(nd):
        ax = 2 + k
        n, o = x.shape[ax], sizes[k]
        if n == o and not sf[k]:
            continue
        dst = np.arange(o, dtype=np.float64)
        if ac:
            src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
        else:
            lin_scale = float(1.0 / sf[k]) if sf[k] else n / o
            src = np.maximum((dst + 0.5) * lin_scale - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
        i1 = np.minimum(i0 + 1, n - 1)
        w1 = (src - i0).astype(x.dtype)
        shape = (o,) + (1,) * (x.ndim - ax - 1)
        xp = xp_of(x._data)
        w1t = _wrap(xp.asarray(w1.reshape(shape)))
        w0t = _wrap(xp.asarray((1 - w1).reshape(shape)))
        x = take(x, i0, ax) * w0t + take(x, i1, ax) * w1t
    return x


def upsample(
    input: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: Any = None,
) -> Tensor:
    """An alias of ``interpolate`` (PyTorch's deprecated name)."""
    return interpolate(input, size, scale_factor, mode, align_corners)
