"""Resampling of two spatial axes: one primitive per mode (``nn.resize_nearest2d``,
``nn.resize_linear2d``), each with its adjoint as a primitive (higher order), compiled kernels
under them (``_kernels/resample.py``). The indices and weights come from the caller
(``interpolate``: PyTorch's index rules)."""

from __future__ import annotations

from typing import Any

from .._autodiff import Primitive, defprim
from .._backend import np
from .._kernels.registry import dispatch


def _fold_sorted(a: Any, idx: Any, n: int, axis: int) -> Any:
    """The adjoint of ``a``'s gather at the sorted ``idx`` along ``axis`` (n rows)."""
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    out = np.zeros(a.shape[:axis] + (n,) + a.shape[axis + 1 :], a.dtype)
    out[(slice(None),) * axis + (idx[starts],)] = np.add.reduceat(a, starts, axis=axis)
    return out


# The forward references return C-ordered arrays, as the kernels do: the output's layout does not
# depend on whether a kernel was ready (fancy indexing leaves the gathered axes outermost in memory).
def _nearest_np(x: Any, ih: Any, iw: Any) -> Any:
    return np.ascontiguousarray(x[:, :, ih[:, None], iw])


def _nearest_grad_np(g: Any, ih: Any, iw: Any, h: int, w: int) -> Any:
    return _fold_sorted(_fold_sorted(g, ih, h, 2), iw, w, 3)


def _weights(idx: Any, wt: Any, n: int) -> Any:
    """The (len, n) matrix of a linear resampling along one axis."""
    a = np.zeros((idx.shape[1], n), wt.dtype)
    rows = np.arange(idx.shape[1])
    np.add.at(a, (rows, idx[0]), wt[0])
    np.add.at(a, (rows, idx[1]), wt[1])
    return a


def _linear_np(x: Any, ih: Any, wh: Any, iw: Any, ww: Any) -> Any:
    t = x[:, :, ih[0]] * wh[0][:, None] + x[:, :, ih[1]] * wh[1][:, None]
    return np.ascontiguousarray(t[..., iw[0]] * ww[0] + t[..., iw[1]] * ww[1])


def _linear_grad_np(g: Any, ih: Any, wh: Any, iw: Any, ww: Any, h: int, w: int) -> Any:
    gt = g @ _weights(iw, ww.astype(g.dtype), w)  # (N, C, OH, W)
    return _weights(ih, wh.astype(g.dtype), h).T @ gt


def _nearest_fwd(x: Any, ih: Any, iw: Any, h: int, w: int) -> Any:
    return dispatch("resize_nearest2d", _nearest_np, x, ih, iw)


def _nearest_grad_fwd(g: Any, ih: Any, iw: Any, h: int, w: int) -> Any:
    return dispatch("resize_nearest2d_grad", _nearest_grad_np, g, ih, iw, h, w)


def _linear_fwd(x: Any, ih: Any, wh: Any, iw: Any, ww: Any, h: int, w: int) -> Any:
    return dispatch("resize_linear2d", _linear_np, x, ih, wh, iw, ww)


def _linear_grad_fwd(g: Any, ih: Any, wh: Any, iw: Any, ww: Any, h: int, w: int) -> Any:
    return dispatch("resize_linear2d_grad", _linear_grad_np, g, ih, wh, iw, ww, h, w)


RESIZE_NEAREST: Primitive = defprim("nn.resize_nearest2d", _nearest_fwd, (
    lambda xp, g, ans, x, ih, iw, h, w: xp.apply(RESIZE_NEAREST_GRAD, g, ih, iw, h=h, w=w),
    None, None), save=(1, 2))
RESIZE_NEAREST_GRAD: Primitive = defprim("nn.resize_nearest2d_grad", _nearest_grad_fwd, (
    lambda xp, gg, ans, g, ih, iw, h, w: xp.apply(RESIZE_NEAREST, gg, ih, iw, h=h, w=w),
    None, None), save=(1, 2))
RESIZE_LINEAR: Primitive = defprim("nn.resize_linear2d", _linear_fwd, (
    lambda xp, g, ans, x, ih, wh, iw, ww, h, w: xp.apply(
        RESIZE_LINEAR_GRAD, g, ih, wh, iw, ww, h=h, w=w),
    None, None, None, None), save=(1, 2, 3, 4))
RESIZE_LINEAR_GRAD: Primitive = defprim("nn.resize_linear2d_grad", _linear_grad_fwd, (
    lambda xp, gg, ans, g, ih, wh, iw, ww, h, w: xp.apply(RESIZE_LINEAR, gg, ih, wh, iw, ww, h=h, w=w),
    None, None, None, None), save=(1, 2, 3, 4))

