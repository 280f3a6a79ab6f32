"""Convolutions: im2col as a strided view, then one GEMM; direct kernels for few channels.

im2col copies the sliding windows of the zero-padded input into a (C * kh * kw, N * Ho * Wo)
matrix; a convolution is then one matrix product with the weights (batched over groups).
col2im is its adjoint: it adds each window back where it came from (kh * kw strided adds, no
``np.add.at``). conv2d, its input gradient and its weight gradient are three primitives whose
VJPs are each other, so everything built on them (conv1d, the transposed convolutions)
differentiates to any order. These are the references: the compiled strategies (pointwise
GEMMs, direct, Winograd, register-blocked and pixel-major kernels) are chosen among them by
the kernel dispatcher, measured per shape (``_kernels/conv_table.py``, ``_kernels/registry.py``).
"""


from __future__ import annotations

from typing import Any, NamedTuple

from .._amp import lower
from .._autodiff import Primitive, apply, defprim
from .._backend import np, xp_of
from .._kernels.conv_table import chunks as _chunks
from .._kernels.conv_table import part as _part
from .._kernels.registry import dispatch
from .._tensor import Tensor
from ..ops import _shape as S
from ..ops._common import ArgumentError
from ._f_common import check_positive, float_input, ntuple, same_float


class Geom(NamedTuple):
    """The window geometry of a 2-D convolution over an (N, C, H, W) input."""

    in_shape: tuple[int, int, int, int]  # (N, C, H, W) of the (unpadded) input
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[tuple[int, int], tuple[int, int]]  # ((top, bottom), (left, right))
    dilation: tuple[int, int]
    out_hw: tuple[int, int]  # (Ho, Wo): the number of windows along each axis


def out_size(n: int, k: int, s: int, pad: tuple[int, int], d: int) -> int:
    """The number of windows of a dilated kernel along one padded axis."""
    return (n + pad[0] + pad[1] - d * (k - 1) - 1) // s + 1


def pad_array(x: Any, padding: tuple[tuple[int, int], ...], value: float = 0.0) -> Any:
    """``x`` with its last ``len(padding)`` axes padded by ``value`` (a copy only when needed)."""
    if not any(a or b for a, b in padding):
        return x
    lead = x.ndim - len(padding)
    shape = x.shape[:lead] + tuple(
        n + a + b for n, (a, b) in zip(x.shape[lead:], padding, strict=True)
    )
    out = xp_of(x).full(shape, value, dtype=x.dtype)
    out[
        (...,) + tuple(slice(a, a + n) for n, (a, _) in zip(x.shape[lead:], padding, strict=True))
    ] = x
    return out


def _windows(xp_: Any, geom: Geom) -> Any:
    """A strided view of the windows of a padded (N, C, Hp, Wp) array: (C, kh, kw, N, Ho, Wo)."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    n, c = xp_.shape[:2]
    s_n, s_c, s_h, s_w = xp_.strides
    shape = (c, kh, kw, n, ho, wo)
    strides = (s_c, s_h * dh, s_w * dw, s_n, s_h * sh, s_w * sw)
    return xp_of(xp_).lib.stride_tricks.as_strided(xp_, shape, strides, writeable=False)


def _im2col_fwd(x: Any, geom: Geom) -> Any:
    return dispatch("im2col", _im2col, x, geom)  # compiled: one pass, no padded copy


def _im2col(x: Any, geom: Geom) -> Any:
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    n, c = x.shape[:2]
    v = _windows(pad_array(x, geom.padding), geom)  # (C, kh, kw, N, Ho, Wo)
    return v.reshape(c * kh * kw, n * ho * wo)  # the one copy: into the GEMM layout


def _col2im_fwd(cols: Any, geom: Geom) -> Any:
    return dispatch("col2im", _col2im, cols, geom)  # compiled: the same sums in the same order


def _col2im(cols: Any, geom: Geom) -> Any:
    n, c, h, w = geom.in_shape
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, geom.out_hw
    (pt, pb), (pl, pr) = geom.padding
    # accumulate in (C, N, Hp, Wp) so each strided add reads and writes in memory order
    acc = xp_of(cols).zeros((c, n, h + pt + pb, w + pl + pr), dtype=cols.dtype)
    c6 = cols.reshape(c, kh, kw, n, ho, wo)
    for i in range(kh):
        rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
        for j in range(kw):
            acc[:, :, rows, j * dw : j * dw + sw * (wo - 1) + 1 : sw] += c6[:, i, j]
    return xp_of(cols).ascontiguousarray(acc[:, :, pt : pt + h, pl : pl + w].transpose(1, 0, 2, 3))


# --------------------------------------------------------------------------------------------
# conv2d: a fused primitive (im2col + one GEMM, bias added in the same pass); it saves x and w,
# not the (kh * kw times larger) columns. Its input and weight gradients are primitives too
# (nn.conv2d_input_grad, nn.conv2d_weight_grad), whose VJPs are convolutions and each other,
# so backward runs the same array code whether or not a tape records it, to any order.
# All three work through the batch in chunks, so the columns of a few samples exist at a time.
# --------------------------------------------------------------------------------------------


def _conv2d_fwd(x: Any, w: Any, b: Any, geom: Geom, groups: int) -> Any:
    return dispatch("conv2d", _conv2d_ref, x, w, b, geom, groups)  # _kernels/conv_table.py


def _conv2d_ref(x: Any, w: Any, b: Any, geom: Geom, groups: int) -> Any:
    n, o = x.shape[0], w.shape[0]
    ho, wo = geom.out_hw
    wm = w.reshape(groups, o // groups, -1)
    out = xp_of(x).empty((n, o, ho, wo), dtype=np.result_type(x.dtype, w.dtype))
    for a, z in _chunks(geom, wm.shape[-1] * groups):
        cols = _im2col_fwd(x[a:z], _part(geom, z - a))  # (C*kh*kw, n*Ho*Wo)
        y = np.matmul(wm, cols.reshape(groups, -1, cols.shape[1]))  # (G, O/G, n*Ho*Wo)
        # compiled: the planes copied out in one pass, the bias added on the way
        dispatch("conv_unpack", _unpack, y, b, out[a:z])
    return out


def _unpack(y: Any, b: Any, out: Any) -> None:
    """The GEMM's (G, O/G, n*Ho*Wo) result ``y`` (+ ``b``) written into (n, O, Ho, Wo) ``out``."""
    n, o, ho, wo = out.shape
    y = y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)
    if b is None:
        out[...] = y
    else:
        np.add(y, b.reshape(1, o, 1, 1), out=out)


def _grad_cols(g: Any, groups: int) -> Any:
    """The output gradient (n, O, Ho, Wo) as (G, O/G, n*Ho*Wo), the GEMM layout."""
    return dispatch("conv_pack", _pack, g, groups)


def _pack(g: Any, groups: int) -> Any:
    o = g.shape[1]
    return g.transpose(1, 0, 2, 3).reshape(groups, o // groups, -1)


def _input_grad_fwd(g: Any, w: Any, geom: Geom, groups: int) -> Any:
    """The gradient of conv2d for its input: the columns ``w^T g``, added back by col2im."""
    return dispatch("conv2d_input_grad", _input_grad_ref, g, w, geom, groups)


def _input_grad_ref(g: Any, w: Any, geom: Geom, groups: int) -> Any:
    n, o = g.shape[:2]
    wt = w.reshape(groups, o // groups, -1).swapaxes(-1, -2)  # (G, C/G*kh*kw, O/G)
    _, c, h, wd = geom.in_shape
    out = xp_of(g).empty((n, c, h, wd), dtype=np.result_type(g.dtype, w.dtype))
    for a, z in _chunks(geom, wt.shape[1] * groups):
        cols = np.matmul(wt, _grad_cols(g[a:z], groups))
        out[a:z] = _col2im_fwd(cols.reshape(-1, cols.shape[-1]), _part(geom, z - a))
    return out


def _weight_grad_fwd(g: Any, x: Any, geom: Geom, groups: int, wshape: tuple[int, ...]) -> Any:
    """The gradient of conv2d for its weight: ``g`` times the columns of ``x``, summed."""
    return dispatch("conv2d_weight_grad", _weight_grad_ref, g, x, geom, groups, wshape)


def _weight_grad_ref(g: Any, x: Any, geom: Geom, groups: int, wshape: tuple[int, ...]) -> Any:
    acc: Any = None
    for a, z in _chunks(geom, wshape[1] * wshape[2] * wshape[3] * groups):
        cols = _im2col_fwd(x[a:z], _part(geom, z - a))
        part = np.matmul(
            _grad_cols(g[a:z], groups), cols.reshape(groups, -1, cols.shape[-1]).swapaxes(-1, -2)
        )
        acc = part if acc is None else np.add(acc, part, out=acc)
    if acc is None:  # an empty batch
        return xp_of(x).zeros(wshape, dtype=np.result_type(g.dtype, x.dtype))
    return acc.reshape(wshape)


def _bias_grad_fwd(g: Any, shape: tuple[int, ...]) -> Any:
    return dispatch("conv_bias_grad", _bias_grad, g)


def _bias_grad(g: Any) -> Any:
    return g.sum(axis=(0, 2, 3))


# conv2d's bias gradient (a primitive, so that arrays and tensors run the same kernel)
CONV2D_BIAS_GRAD: Primitive = defprim(
    "nn.conv2d_bias_grad",
    _bias_grad_fwd,
    lambda xp, c, ans, g, shape: xp.broadcast_to(xp.reshape(c, (1, -1, 1, 1)), shape),
)


CONV2D_INPUT_GRAD: Primitive = defprim(
    "nn.conv2d_input_grad",
    _input_grad_fwd,
    (
        lambda xp, c, ans, g, w, geom, groups: xp.apply(
            CONV2D, c, w, None, geom=geom, groups=groups
        ),
        lambda xp, c, ans, g, w, geom, groups: xp.apply(
            CONV2D_WEIGHT_GRAD, g, c, geom=geom, groups=groups, wshape=w.shape
        ),
    ),
    (0, 1),
)
CONV2D_WEIGHT_GRAD: Primitive = defprim(
    "nn.conv2d_weight_grad",
    _weight_grad_fwd,
    (
        lambda xp, c, ans, g, x, geom, groups, wshape: xp.apply(
            CONV2D, x, c, None, geom=geom, groups=groups
        ),
        lambda xp, c, ans, g, x, geom, groups, wshape: xp.apply(
            CONV2D_INPUT_GRAD, g, c, geom=geom, groups=groups
        ),
    ),
    (0, 1),
)
CONV2D: Primitive = defprim(
    "nn.conv2d",
    _conv2d_fwd,
    (
        lambda xp, g, ans, x, w, b, geom, groups: xp.apply(
            CONV2D_INPUT_GRAD, g, w, geom=geom, groups=groups
        ),
        lambda xp, g, ans, x, w, b, geom, groups: xp.apply(
            CONV2D_WEIGHT_GRAD, g, x, geom=geom, groups=groups, wshape=w.shape
        ),
        lambda xp, g, ans, x, w, b, geom, groups: xp.apply(CONV2D_BIAS_GRAD, g, shape=g.shape),
    ),
    (0, 1),
)


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
