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

from .._autodiff import Primitive, defprim
from .._backend import np, xp_of
from .._kernels.conv_table import chunks as _chunks
from .._kernels.conv_table import part as _part
from .._kernels.registry import dispatch


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
