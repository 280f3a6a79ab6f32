"""Padding and resampling: ``pad`` (PyTorch's argument order) and ``interpolate``.

Resampling two spatial axes is one primitive per mode (``nn.resize_nearest2d``,
``nn.resize_linear2d``, each with its adjoint as a primitive: ``ops/_resize.py``), compiled
kernels under them (``_kernels/resample.py``): as a gather per axis it made four to five temporaries of the
output's size and a numpy scatter-add per axis in backward. Other ranks stay compositions of
gathers.
"""


from __future__ import annotations

import math
from typing import Any

from .._autodiff import apply
from .._backend import np, xp_of
from .._tensor import Tensor, _wrap
from ..ops import _shape as S
from ..ops._common import as_tensor
from ..ops._resize import RESIZE_LINEAR, RESIZE_NEAREST
from ..ops._take import take
from ._f_common import float_input

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
        idxs = []
        for k in range(nd):
            n, o = x.shape[2 + k], sizes[k]
            scale = np.float32(1.0 / sf[k] if sf[k] else n / o)  # PyTorch computes it in float
            dst = np.arange(o, dtype=np.float32) + (
                np.float32(0.5) if mode == "nearest-exact" else 0
            )
            idxs.append(None if n == o else
                        np.minimum(np.floor(dst * scale).astype(np.int64), n - 1))
        if nd == 2 and xp_of(x._data) is np and any(i is not None for i in idxs):  # one pass (_kernels/resample.py)
            h, w = x.shape[2:]
            ih, iw = (np.arange(n) if i is None else i for i, n in zip(idxs, (h, w), strict=True))
            return apply(RESIZE_NEAREST, x, ih, iw, h=h, w=w)
        for k, idx in enumerate(idxs):
            if idx is not None:
                x = take(x, idx, 2 + k)
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
    axes: list[Any] = []  # per axis: None (unchanged) or (indices (2, o), weights (2, o))
    for k in range(nd):
        n, o = x.shape[2 + k], sizes[k]
        if n == o and not sf[k]:
            axes.append(None)
            continue
        dst = np.arange(o, dtype=np.float64)
        if ac:
            src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
        else:
            lin_scale = float(1.0 / sf[k]) if sf[k] else n / o
            src = np.maximum((dst + 0.5) * lin_scale - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
        w1 = (src - i0).astype(x.dtype)
        axes.append((np.stack([i0, np.minimum(i0 + 1, n - 1)]), np.stack([1 - w1, w1])))
    if nd == 2 and xp_of(x._data) is np and any(a is not None for a in axes):
        h, w = x.shape[2:]
        (ih, wh), (iw, ww) = (
            (np.stack([np.arange(n)] * 2), np.stack([np.ones(n, x.dtype), np.zeros(n, x.dtype)]))
            if a is None else a for a, n in zip(axes, (h, w), strict=True))
        return apply(RESIZE_LINEAR, x, ih, wh, iw, ww, h=h, w=w)  # one pass (_kernels/resample.py)
    for k, a in enumerate(axes):
        if a is None:
            continue
        ax = 2 + k
        (i0, i1), (w0, w1) = a
        shape = (len(i0),) + (1,) * (x.ndim - ax - 1)
        xp = xp_of(x._data)
        w1t = _wrap(xp.asarray(w1.reshape(shape)))
        w0t = _wrap(xp.asarray(w0.reshape(shape)))
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


def upsample_nearest(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:
    """PyTorch's legacy name for ``interpolate(..., mode='nearest')``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.upsample_nearest(tg.zeros((1, 1, 2, 2)), scale_factor=2).shape
    (1, 1, 4, 4)
    """
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:
    """PyTorch's legacy name for ``interpolate(..., mode='bilinear', align_corners=True)``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.upsample_bilinear(tg.zeros((1, 1, 2, 2)), size=3).shape
    (1, 1, 3, 3)
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
