"""Rearranging functions: pixel (un)shuffle and sliding-window fold/unfold, composed of
reshapes, slices and pads (no gradient code of their own)."""

from __future__ import annotations

from typing import Any

from .. import ops
from .._tensor import Tensor
from ..ops import _shape as S
from ..ops._common import as_tensor
from ._f_resize import pad


def pixel_shuffle(input: Any, upscale_factor: int) -> Tensor:
    """``(*, C r^2, H, W) -> (*, C, H r, W r)``, as PyTorch's.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.pixel_shuffle(tg.arange(4.0).reshape(1, 4, 1, 1), 2).tolist()
    [[[[0.0, 1.0], [2.0, 3.0]]]]
    """
    x = as_tensor(input)
    r = int(upscale_factor)
    if x.ndim < 3 or r < 1 or x.shape[-3] % (r * r):
        raise ValueError(
            f"pixel_shuffle: needs (*, C * {r}**2, H, W) with upscale_factor >= 1, got shape "
            f"{x.shape}"
        )
    *lead, c, h, w = x.shape
    nl = len(lead)
    y = S.reshape(x, (*lead, c // (r * r), r, r, h, w))
    y = S.permute_dims(y, (*range(nl), nl, nl + 3, nl + 1, nl + 4, nl + 2))
    return S.reshape(y, (*lead, c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Any, downscale_factor: int) -> Tensor:
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``, the inverse of ``pixel_shuffle``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.pixel_unshuffle(tg.arange(16.0).reshape(1, 1, 4, 4), 2)[0, :, 0, 0].tolist()
    [0.0, 1.0, 4.0, 5.0]
    """
    x = as_tensor(input)
    r = int(downscale_factor)
    if x.ndim < 3 or r < 1 or x.shape[-1] % r or x.shape[-2] % r:
        raise ValueError(
            f"pixel_unshuffle: needs (*, C, H, W) with H and W divisible by downscale_factor "
            f"{r}, got shape {x.shape}"
        )
    *lead, c, h, w = x.shape
    nl = len(lead)
    y = S.reshape(x, (*lead, c, h // r, r, w // r, r))
    y = S.permute_dims(y, (*range(nl), nl, nl + 2, nl + 4, nl + 1, nl + 3))
    return S.reshape(y, (*lead, c * r * r, h // r, w // r))


def _pair(v: Any, name: str, op: str) -> tuple[int, int]:
    t = tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * 2
    if len(t) != 2:
        raise ValueError(f"{op}: {name} must be an int or 2 ints, got {v!r}")
    return t  # type: ignore[return-value]


def _windows(
    op: str, size: tuple[int, int], kernel_size: Any, dilation: Any, padding: Any, stride: Any
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int], list[int]]:
    k = _pair(kernel_size, "kernel_size", op)
    d = _pair(dilation, "dilation", op)
    p = _pair(padding, "padding", op)
    s = _pair(stride, "stride", op)
    if min(k + d + s) < 1 or min(p) < 0:
        raise ValueError(f"{op}: kernel_size, dilation, stride must be >= 1 and padding >= 0")
    out = [(size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]
    if min(out) < 1:
        raise ValueError(
            f"{op}: a {k} kernel (dilation {d}, padding {p}) does not fit spatial size {size}"
        )
    return k, d, p, s, out


def unfold(
    input: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
) -> Tensor:
    """Sliding windows as columns: ``(N, C, H, W) -> (N, C kh kw, L)`` (PyTorch's im2col).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.unfold(tg.ones((2, 3, 4, 4)), 2).shape
    (2, 12, 9)
    """
    x = as_tensor(input)
    if x.ndim != 4:
        raise ValueError(f"unfold: input must be (N, C, H, W), got shape {x.shape}")
    n, c, h, w = x.shape
    k, d, p, s, (oh, ow) = _windows("unfold", (h, w), kernel_size, dilation, padding, stride)
    xp = pad(x, (p[1], p[1], p[0], p[0])) if any(p) else x
    cols = [
        xp[:, :, i * d[0] : i * d[0] + s[0] * (oh - 1) + 1 : s[0],
           j * d[1] : j * d[1] + s[1] * (ow - 1) + 1 : s[1]]
        for i in range(k[0]) for j in range(k[1])
    ]  # fmt: skip
    return S.reshape(ops.stack(cols, axis=2), (n, c * k[0] * k[1], oh * ow))


def fold(
    input: Any,
    output_size: Any,
    kernel_size: Any,
    dilation: Any = 1,
    padding: Any = 0,
    stride: Any = 1,
) -> Tensor:
    """Sum sliding-window columns back into an image: ``(N, C kh kw, L) -> (N, C, H, W)``, the
    adjoint of ``unfold`` (overlapping windows add up).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.fold(F.unfold(tg.ones((1, 1, 3, 3)), 2), (3, 3), 2)[0, 0].tolist()
    [[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
    """
    x = as_tensor(input)
    size = _pair(output_size, "output_size", "fold")
    k, d, p, s, (oh, ow) = _windows("fold", size, kernel_size, dilation, padding, stride)
    kk = k[0] * k[1]
    if x.ndim != 3 or x.shape[1] % kk or x.shape[2] != oh * ow:
        raise ValueError(
            f"fold: input must be (N, C * {kk}, {oh * ow}) for output_size {size} and kernel "
            f"{k}, got shape {x.shape}"
        )
    n, c = x.shape[0], x.shape[1] // kk
    cols = S.reshape(x, (n, c, kk, oh, ow))
    hp, wp = size[0] + 2 * p[0], size[1] + 2 * p[1]
    out: Tensor | None = None
    for i in range(k[0]):
        for j in range(k[1]):
            piece = cols[:, :, i * k[1] + j]  # (N, C, oh, ow)
            # spread by the stride (zeros between), then shift into place
            spread = pad(S.reshape(piece, (n, c, oh, 1, ow, 1)), (0, s[1] - 1, 0, 0, 0, s[0] - 1))
            spread = S.reshape(spread, (n, c, oh * s[0], ow * s[1]))
            spread = spread[:, :, : s[0] * (oh - 1) + 1, : s[1] * (ow - 1) + 1]
            top, left = i * d[0], j * d[1]
            placed = pad(
                spread,
                (left, wp - left - spread.shape[3], top, hp - top - spread.shape[2]),
            )
            out = placed if out is None else out + placed
    assert out is not None
    return out[:, :, p[0] : p[0] + size[0], p[1] : p[1] + size[1]]
