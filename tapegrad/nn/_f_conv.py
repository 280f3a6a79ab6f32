"""Convolutions with PyTorch's arguments: conv1d, conv2d and the transposed convolutions, all
on the ``nn.conv2d`` primitives (``ops/_conv.py``: im2col + one GEMM, and its gradients)."""


from __future__ import annotations

from typing import Any

from .._amp import lower
from .._autodiff import apply
from .._tensor import Tensor
from ..ops import _shape as S
from ..ops._common import ArgumentError
from ..ops._conv import CONV2D, CONV2D_INPUT_GRAD, Geom, out_size
from ._f_common import check_positive, float_input, ntuple, same_float

# --------------------------------------------------------------------------------------------
# argument handling
# --------------------------------------------------------------------------------------------


def _padding(
    padding: Any,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    op: str,
) -> tuple[tuple[int, int], ...]:
    nd = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding != "same":
            raise ValueError(
                f"{op}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}"
            )
        if any(s != 1 for s in stride):
            raise ValueError(
                f"{op}: padding='same' needs stride 1 (got stride={stride}); pad explicitly "
                "with an int padding for strided convolutions"
            )
        # the total d*(k-1) split with the extra element at the end, as PyTorch does
        return tuple(
            (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
            for k, d in zip(kernel, dilation, strict=True)
        )
    p = ntuple(padding, nd, "padding", op)
    if any(v < 0 for v in p):
        raise ValueError(f"{op}: padding must be non-negative, got {padding!r}")
    return tuple((v, v) for v in p)


def _check_conv(x: Tensor, w: Tensor, groups: int, op: str, nd: int) -> None:
    if x.ndim != nd + 2:
        raise ValueError(
            f"{op}: input must be {nd + 2}-D (N, C{', H, W' if nd == 2 else ', L'}) or "
            f"{nd + 1}-D unbatched, got shape {x.shape}"
        )
    if w.ndim != nd + 2:
        raise ValueError(f"{op}: weight must be {nd + 2}-D, got shape {w.shape}")
    if groups < 1 or x.shape[1] % groups:
        raise ValueError(
            f"{op}: groups={groups} must be >= 1 and divide the {x.shape[1]} input channels "
            f"(input shape {x.shape})"
        )


def _as_batched(x: Tensor, nd: int) -> tuple[Tensor, bool]:
    if x.ndim == nd + 1:
        return S.expand_dims(x, 0), True
    return x, False


@lower
def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation, as PyTorch): (N, C, H, W) * (O, C/groups, kh, kw).

    ``padding`` is an int, a pair, ``'valid'`` (none) or ``'same'`` (output size equals input
    size; stride 1). One GEMM per call (batched over groups) on an im2col layout.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.conv2d(tg.ones((1, 1, 4, 4)), tg.ones((2, 1, 3, 3)), padding=1).shape
    (1, 2, 4, 4)
    """
    x = float_input(input, "conv2d")
    w = float_input(weight, "conv2d", "weight")
    x, w = same_float(x, w)
    x, unbatched = _as_batched(x, 2)
    _check_conv(x, w, groups, "conv2d", 2)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if cg * groups != c or o % groups:
        raise ValueError(
            f"conv2d: weight {w.shape} expects {cg * groups} input channels with groups={groups} "
            f"and {o} output channels divisible by groups; the input {x.shape} has {c} channels"
        )
    k = (kh, kw)
    s = ntuple(stride, 2, "stride", "conv2d")
    d = ntuple(dilation, 2, "dilation", "conv2d")
    check_positive("conv2d", kernel_size=k, stride=s, dilation=d)
    if min(s) < 1 or min(d) < 1:
        raise ValueError(f"conv2d: stride {s} and dilation {d} must be positive")
    pad = _padding(padding, k, s, d, "conv2d")
    ho, wo = (
        out_size(v, kk, ss, pp, dd) for v, kk, ss, pp, dd in zip((h, wd), k, s, pad, d, strict=True)
    )
    if ho < 1 or wo < 1:
        span = tuple(dd * (kk - 1) + 1 for kk, dd in zip(k, d, strict=True))
        raise ArgumentError(
            f"conv2d: the input {x.shape} padded by {pad} is smaller than the dilated kernel "
            f"{span}; pad the input or use a "
            "smaller kernel"
        )
    geom = Geom((n, c, h, wd), k, s, pad, d, (ho, wo))  # type: ignore[arg-type]
    b = None
    if bias is not None:
        b = S.astype(float_input(bias, "conv2d", "bias"), x.dtype)
        if b.shape != (o,):
            raise ValueError(f"conv2d: bias must have shape ({o},), got {b.shape}")
    out = apply(CONV2D, x, w, b, geom=geom, groups=groups)
    return S.squeeze(out, 0) if unbatched else out


@lower
def conv1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution: (N, C, L) * (O, C/groups, k), as a conv2d over a height of 1.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.conv1d(tg.ones((2, 3, 10)), tg.ones((4, 3, 3)), stride=2).shape
    (2, 4, 4)
    """
    x = float_input(input, "conv1d")
    w = float_input(weight, "conv1d", "weight")
    x, unbatched = _as_batched(x, 1)
    _check_conv(x, w, groups, "conv1d", 1)
    s = ntuple(stride, 1, "stride", "conv1d")
    d = ntuple(dilation, 1, "dilation", "conv1d")
    check_positive("conv1d", kernel_size=tuple(w.shape[2:]), stride=s, dilation=d)
    if isinstance(padding, str):
        pad2: Any = padding
    else:
        pad2 = (0, ntuple(padding, 1, "padding", "conv1d")[0])
    out = conv2d(S.expand_dims(x, 2), S.expand_dims(w, 2), bias, (1, s[0]), pad2, (1, d[0]), groups)
    out = S.squeeze(out, 2)
    return S.squeeze(out, 0) if unbatched else out


@lower
def conv_transpose2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """Transposed 2-D convolution (the gradient of conv2d with respect to its input).

    ``weight`` is (C_in, C_out / groups, kh, kw), as in PyTorch. The output size is
    ``(H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1``.
    Computed as the input gradient of the matching conv2d (``nn.conv2d_input_grad``).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.conv_transpose2d(tg.ones((1, 4, 5, 5)), tg.ones((4, 2, 3, 3)), stride=2).shape
    (1, 2, 11, 11)
    """
    op = "conv_transpose2d"
    x = float_input(input, op)
    w = float_input(weight, op, "weight")
    x, w = same_float(x, w)
    x, unbatched = _as_batched(x, 2)
    _check_conv(x, w, groups, op, 2)
    n, cin, h, wd = x.shape
    if w.shape[0] != cin:
        raise ValueError(
            f"{op}: weight {w.shape} expects {w.shape[0]} input channels (its first axis), the "
            f"input {x.shape} has {cin}"
        )
    cout = w.shape[1] * groups
    k = (w.shape[2], w.shape[3])
    s = ntuple(stride, 2, "stride", op)
    d = ntuple(dilation, 2, "dilation", op)
    p = ntuple(padding, 2, "padding", op)
    op_ = ntuple(output_padding, 2, "output_padding", op)
    for a, ss, dd in zip(op_, s, d, strict=True):
        if not 0 <= a < max(ss, dd):
            raise ValueError(
                f"{op}: output_padding {op_} must be smaller than the stride {s} or the "
                f"dilation {d}"
            )
    hout, wout = (
        (v - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1
        for v, ss, pp, dd, kk, oo in zip((h, wd), s, p, d, k, op_, strict=True)
    )
    if hout < 1 or wout < 1:
        raise ValueError(f"{op}: the output size ({hout}, {wout}) is not positive")
    pads = ((p[0], p[0]), (p[1], p[1]))
    geom = Geom((n, cout, hout, wout), k, s, pads, d, (h, wd))  # type: ignore[arg-type]
    # the input gradient of the conv2d that maps the output back to x (its VJPs are conv2d
    # and that conv2d's weight gradient): no zero-stuffing, chunked, direct when stride 1
    out = apply(CONV2D_INPUT_GRAD, x, w, geom=geom, groups=groups)
    if bias is not None:
        b = S.astype(float_input(bias, op, "bias"), x.dtype)
        if b.shape != (cout,):
            raise ValueError(f"{op}: bias must have shape ({cout},), got {b.shape}")
        out = out + S.reshape(b, (1, cout, 1, 1))
    return S.squeeze(out, 0) if unbatched else out


@lower
def conv_transpose1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """Transposed 1-D convolution, as a conv_transpose2d over a height of 1."""
    x = float_input(input, "conv_transpose1d")
    x, unbatched = _as_batched(x, 1)
    w = float_input(weight, "conv_transpose1d", "weight")
    one = ntuple
    out = conv_transpose2d(
        S.expand_dims(x, 2),
        S.expand_dims(w, 2),
        bias,
        (1, one(stride, 1, "stride", "conv_transpose1d")[0]),
        (0, one(padding, 1, "padding", "conv_transpose1d")[0]),
        (0, one(output_padding, 1, "output_padding", "conv_transpose1d")[0]),
        groups,
        (1, one(dilation, 1, "dilation", "conv_transpose1d")[0]),
    )
    out = S.squeeze(out, 2)
    return S.squeeze(out, 0) if unbatched else out
