"""Pooling's primitives over (N, C, H, W): max, window sums and the adaptive gather.

Max pooling is ``nn.max_pool2d``: kh * kw strided ``maximum`` passes, no index bookkeeping in
the forward. Its VJP ``nn.max_pool2d_grad`` finds each window's first maximum (PyTorch's rule:
ties go to the first element in row-major order, not split) by comparing the windows with the
output, and routes the gradient there; ``nn.max_pool2d_select`` (pick the value at that first
maximum) is the VJP of that, and the other way round, so higher order works. Adaptive max
pooling over unequal windows gathers by a flat index (``nn.pool_gather``, adjoint
``nn.pool_scatter``). Average pooling is a window sum (``nn.sum_pool2d``, adjoint
``nn.sum_pool2d_grad``) times a constant divisor.
"""


from __future__ import annotations

from typing import Any

from .._autodiff import OUT, Primitive, defprim
from .._backend import np, xp_of
from .._kernels.registry import dispatch
from ._conv import Geom, pad_array


def _window(a: Any, geom: Geom, i: int, j: int) -> Any:
    """The strided view of padded ``a`` that kernel offset (i, j) reads, (N, C, Ho, Wo)."""
    (sh, sw), (dh, dw), (ho, wo) = geom.stride, geom.dilation, geom.out_hw
    return a[
        :, :, i * dh : i * dh + sh * (ho - 1) + 1 : sh, j * dw : j * dw + sw * (wo - 1) + 1 : sw
    ]


def _offsets(geom: Geom) -> list[tuple[int, int, int]]:
    kh, kw = geom.kernel
    return [(i * kw + j, i, j) for i in range(kh) for j in range(kw)]


def _overlap(geom: Geom) -> bool:
    (kh, kw), (sh, sw), (dh, dw) = geom.kernel, geom.stride, geom.dilation
    return sh < dh * (kh - 1) + 1 or sw < dw * (kw - 1) + 1


# --------------------------------------------------------------------------------------------
# gather / scatter by a flat index into each (H * W) plane
# --------------------------------------------------------------------------------------------


def _gather_fwd(x: Any, idx: Any, overlap: bool) -> Any:
    n, c = x.shape[:2]
    flat = x.reshape(n, c, -1)
    return xp_of(x).take_along_axis(flat, idx.reshape(n, c, -1), axis=2).reshape(idx.shape)


def _scatter_fwd(g: Any, idx: Any, overlap: bool, in_hw: tuple[int, int]) -> Any:
    xp = xp_of(g)
    n, c = g.shape[:2]
    hw = in_hw[0] * in_hw[1]
    if not overlap:  # windows do not overlap: every input element receives at most once
        out = xp.zeros((n, c, hw), dtype=g.dtype)
        xp.put_along_axis(out, idx.reshape(n, c, -1), g.reshape(n, c, -1), axis=2)
    else:  # a global bincount sums the collisions (np.add.at is far slower)
        base = (xp.arange(n * c, dtype=idx.dtype) * hw).reshape(n, c, 1)
        gidx = (idx.reshape(n, c, -1) + base).reshape(-1)
        out = xp.bincount(gidx, weights=g.reshape(-1), minlength=n * c * hw).astype(g.dtype)
    return out.reshape((n, c) + tuple(in_hw))


POOL_GATHER = defprim(
    "nn.pool_gather",
    _gather_fwd,
    lambda xp, g, ans, x, idx, overlap: xp.apply(
        POOL_SCATTER, g, idx=idx, overlap=overlap, in_hw=x.shape[2:]
    ),
    (0,),
)
POOL_SCATTER: Primitive = defprim(
    "nn.pool_scatter",
    _scatter_fwd,
    lambda xp, gg, ans, g, idx, overlap, in_hw: xp.apply(POOL_GATHER, gg, idx=idx, overlap=overlap),
)


# --------------------------------------------------------------------------------------------
# window sums (average pooling without the divisor)
# --------------------------------------------------------------------------------------------


def _tiles(geom: Geom) -> bool:
    """Windows tile the input exactly (stride == kernel, no padding, no dilation, no remainder)."""
    _, _, h, w = geom.in_shape
    (kh, kw), (sh, sw), (ho, wo) = geom.kernel, geom.stride, geom.out_hw
    return (
        (kh, kw) == (sh, sw)
        and geom.dilation == (1, 1)
        and not any(a or b for a, b in geom.padding)
        and (ho * kh, wo * kw) == (h, w)
    )


def _sum_pool_fwd(x: Any, geom: Geom) -> Any:
    n, c = x.shape[:2]
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    if _tiles(geom):
        return x.reshape(n, c, ho, kh, wo, kw).sum(axis=(3, 5))
    xp_ = pad_array(x, geom.padding)
    out = None
    for _, i, j in _offsets(geom):
        v = _window(xp_, geom, i, j)
        if out is None:
            out = v.copy()
        else:
            out += v
    return out


def _sum_pool_grad_fwd(g: Any, geom: Geom) -> Any:
    n, c, h, w = geom.in_shape
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    xp = xp_of(g)
    if _tiles(geom):
        big = xp.broadcast_to(g.reshape(n, c, ho, 1, wo, 1), (n, c, ho, kh, wo, kw))
        return big.reshape(n, c, h, w)
    (pt, pb), (pl, pr) = geom.padding
    acc = xp.zeros((n, c, h + pt + pb, w + pl + pr), dtype=g.dtype)
    for _, i, j in _offsets(geom):
        _window(acc, geom, i, j)[...] += g
    return xp.ascontiguousarray(acc[:, :, pt : pt + h, pl : pl + w])


SUM_POOL = defprim(
    "nn.sum_pool2d", _sum_pool_fwd, lambda xp, g, ans, x, geom: xp.apply(SUM_POOL_GRAD, g, geom=geom)
)
SUM_POOL_GRAD: Primitive = defprim(
    "nn.sum_pool2d_grad",
    _sum_pool_grad_fwd,
    lambda xp, gg, ans, g, geom: xp.apply(SUM_POOL, gg, geom=geom),
)


def _max_pool_fwd(x: Any, geom: Geom) -> Any:
    return dispatch("max_pool2d", _max_pool, x, geom)


def _max_pool(x: Any, geom: Geom) -> Any:
    xp_ = pad_array(x, geom.padding, -np.inf)
    out = None
    for _, i, j in _offsets(geom):
        v = _window(xp_, geom, i, j)
        out = v.copy() if out is None else xp_of(x).maximum(out, v, out=out)  # NaN propagates
    return out


def _first_max(x: Any, out: Any, geom: Geom) -> Any:
    """The kernel offset (0 .. kh * kw - 1) of each window's first maximum."""
    xp = xp_of(x)
    xp_ = pad_array(x, geom.padding, -np.inf)
    kk = geom.kernel[0] * geom.kernel[1]
    arg = xp.zeros(out.shape, dtype=np.int16 if kk < 2**15 else np.int32)
    for k, i, j in reversed(_offsets(geom)):  # walking backwards, the first match wins
        arg = xp.where(_window(xp_, geom, i, j) == out, k, arg)
    return arg


def _tiled(geom: Geom) -> bool:
    """Whether the windows tile the input: stride = kernel, no dilation, no padding."""
    return (
        geom.stride == geom.kernel
        and geom.dilation == (1, 1)
        and geom.padding == ((0, 0), (0, 0))
    )


def _max_pool_grad_tiled(g: Any, x: Any, out: Any, geom: Geom) -> Any:
    """``_max_pool_grad_fwd`` for tiled windows: the input viewed as (N, C, Ho, kh, Wo, kw),
    one comparison with the output per kernel offset, each window's first match taken."""
    xp = xp_of(g)
    n, c, h, w = geom.in_shape
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    x6 = x[:, :, : ho * kh, : wo * kw].reshape(n, c, ho, kh, wo, kw)
    acc = xp.empty((n, c, ho, kh, wo, kw), dtype=g.dtype)
    taken = None
    for i in range(kh):
        for j in range(kw):
            m = x6[:, :, :, i, :, j] == out
            if taken is None:
                taken = m
            else:
                m &= ~taken
                taken |= m
            xp.multiply(g, m, out=acc[:, :, :, i, :, j])
    r = acc.reshape(n, c, ho * kh, wo * kw)
    if (ho * kh, wo * kw) == (h, w):
        return r
    full = xp.zeros((n, c, h, w), dtype=g.dtype)  # rows and columns no window reaches
    full[:, :, : ho * kh, : wo * kw] = r
    return full


def _max_pool_grad_fwd(g: Any, x: Any, out: Any, geom: Geom) -> Any:
    return dispatch("max_pool2d_grad", _max_pool_grad, g, x, out, geom)


def _max_pool_grad(g: Any, x: Any, out: Any, geom: Geom) -> Any:
    xp = xp_of(g)
    if _tiled(geom):
        return _max_pool_grad_tiled(g, x, out, geom)
    arg = _first_max(x, out, geom)
    n, c, h, w = geom.in_shape
    (pt, pb), (pl, pr) = geom.padding
    acc = xp.zeros((n, c, h + pt + pb, w + pl + pr), dtype=g.dtype)
    overlap = _overlap(geom)
    for k, i, j in _offsets(geom):
        part = xp.where(arg == k, g, 0)
        if overlap:
            _window(acc, geom, i, j)[...] += part
        else:  # disjoint windows: a plain strided store
            _window(acc, geom, i, j)[...] = part
    return xp.ascontiguousarray(acc[:, :, pt : pt + h, pl : pl + w])


def _max_pool_select_fwd(gg: Any, x: Any, out: Any, geom: Geom) -> Any:
    arg = _first_max(x, out, geom)
    ggp = pad_array(gg, geom.padding)
    res = xp_of(gg).zeros(out.shape, dtype=gg.dtype)
    for k, i, j in _offsets(geom):
        res = xp_of(gg).where(arg == k, _window(ggp, geom, i, j), res)
    return res


# x and the output only locate the maxima: piecewise constant, so they join no tape (const)
MAX_POOL = defprim(
    "nn.max_pool2d",
    _max_pool_fwd,
    lambda xp, g, ans, x, geom: xp.apply(
        MAX_POOL_GRAD, g, xp.const(xp.data(x)), xp.const(xp.data(ans)), geom=geom
    ),
    (0, OUT),
)
# the gradient routed to each window's first maximum (linear in g); _SELECT is its adjoint
MAX_POOL_GRAD: Primitive = defprim(
    "nn.max_pool2d_grad",
    _max_pool_grad_fwd,
    (lambda xp, gg, ans, g, x, out, geom: xp.apply(MAX_POOL_SELECT, gg, x, out, geom=geom), None, None),
    (1, 2),
)
MAX_POOL_SELECT: Primitive = defprim(
    "nn.max_pool2d_select",
    _max_pool_select_fwd,
    (lambda xp, g, ans, gg, x, out, geom: xp.apply(MAX_POOL_GRAD, g, x, out, geom=geom), None, None),
    (1, 2),
)


def max_index(x: Any, out: Any, geom: Geom) -> Any:
    """The flat (H * W) index of each window's first maximum, (N, C, Ho, Wo) int64."""
    xp = xp_of(x)
    w = geom.in_shape[3]
    (sh, sw), (dh, dw), (ho, wo) = geom.stride, geom.dilation, geom.out_hw
    (pt, _), (pl, _) = geom.padding
    table = xp.asarray([i * dh * w + j * dw for _, i, j in _offsets(geom)], dtype=np.int64)
    base = (xp.arange(ho) * sh - pt).reshape(ho, 1) * w + (xp.arange(wo) * sw - pl)
    return table[_first_max(x, out, geom)] + base


