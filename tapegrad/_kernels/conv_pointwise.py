"""The pointwise convolution strategy: a convolution whose outputs each read the input through
one tap, or whose one output reads one window, is one GEMM over the input's pixels as they lie
(no columns). ``conv_table`` registers these entries (``pointwise_*``) and decides where they fit
(``taps``). numpy only.
"""

from __future__ import annotations

import math
from typing import Any

from .._backend import np


def _live(n: int, out: int, k: int, s: int, pad: int, d: int) -> tuple[int, ...]:
    """The taps of one axis that read the input (not only padding) at some output position."""
    return tuple(t for t in range(k)
                 if any(0 <= j * s + t * d - pad < n for j in range(out)))


def taps(geom: Any) -> tuple[slice, slice, slice, slice, bool, bool] | None:
    """How a convolution is one GEMM, or None. Along each axis either every output reads one
    input pixel through the same tap (a 1x1 kernel, a 3x3 one padded by 1 on a 1x1 map), or
    there is one output, which reads the input through a run of taps (the others read only
    padding: a 3x3 stride-2 layer on a 2x2 map). Returns the input's row and column slices
    read, the kernel's row and column taps, and whether each axis is a window (summed over)."""
    _, _, h, w = geom.in_shape
    axes = []
    for n, o, k, s, (pad, _), d in zip((h, w), geom.out_hw, geom.kernel, geom.stride,
                                       geom.padding, geom.dilation, strict=True):
        live = _live(n, o, k, s, pad, d)
        if o == 1 and live:  # one window: its live taps read inside the input
            t0, t1 = live[0], live[-1]
            axes.append((slice(t0 * d - pad, t1 * d - pad + 1, d), slice(t0, t1 + 1), True))
            continue
        if len(live) != 1:
            return None
        start = live[0] * d - pad
        if start < 0 or start + s * (o - 1) >= n:  # an output reading padding
            return None
        axes.append((slice(start, start + s * (o - 1) + 1, s), slice(live[0], live[0] + 1),
                     False))
    (rows, trows, wh), (cols, tcols, ww) = axes
    return rows, cols, trows, tcols, wh, ww


def _gemm_in(x: Any, geom: Any) -> tuple[Any, tuple[Any, ...]]:
    """The input the GEMM reads, (N, K, P): K runs over the channels and the window axes, P
    over the output pixels; and the plan (``taps``)."""
    plan = taps(geom)
    rows, cols, _, _, wh, ww = plan  # type: ignore[misc]
    xs = x[:, :, rows, cols]  # (N, C, A, B)
    k_axes = [a for a, win in ((2, wh), (3, ww)) if win]
    p_axes = [a for a, win in ((2, wh), (3, ww)) if not win]
    n, c = x.shape[:2]
    k = c * math.prod(xs.shape[a] for a in k_axes)
    if k_axes == [3] and p_axes == [2]:
        xs = xs.transpose(0, 1, 3, 2)
    return xs.reshape(n, k, -1), plan  # type: ignore[return-value]


def pointwise_conv(x: Any, w: Any, b: Any, geom: Any, groups: int) -> Any:
    """conv2d as the live taps' weights (O, K) times the input's (N, K, P)."""
    xk, (_, _, trows, tcols, _, _) = _gemm_in(x, geom)
    n, o = x.shape[0], w.shape[0]
    wk = w[:, :, trows, tcols].reshape(o, -1)  # (O, K)
    if xk.shape[2] == 1:
        y = xk[:, :, 0] @ wk.T  # (N, O): one GEMM
        if b is not None:
            y += b
    else:
        y = np.matmul(wk, xk)  # (N, O, P)
        if b is not None:
            y += b[:, None]
    return y.reshape(n, o, *geom.out_hw)


def pointwise_input_grad(g: Any, w: Any, geom: Any, groups: int) -> Any:
    rows, cols, trows, tcols, wh, ww = taps(geom)  # type: ignore[misc]
    n, o, ho, wo = g.shape
    c = w.shape[1]
    wm = w[:, :, trows, tcols]  # (O, C, ta, tb)
    wk = wm.reshape(o, -1)
    if ho * wo == 1:
        gk = g.reshape(n, o) @ wk  # (N, K)
    else:
        gk = np.matmul(wk.T, g.reshape(n, o, -1))  # (N, K, P)
    # back to (N, C, A, B): the window axes from K, the pixel axes from P
    ta, tb = wm.shape[2:]
    sizes = {2: ta if wh else ho, 3: tb if ww else wo}
    order = [a for a, win in ((2, wh), (3, ww)) if win] + [a for a, win in ((2, wh), (3, ww))
                                                           if not win]
    gs = gk.reshape(n, c, *(sizes[a] for a in order))
    if order == [3, 2]:
        gs = np.ascontiguousarray(gs.transpose(0, 1, 3, 2))
    if gs.shape[2:] == tuple(geom.in_shape[2:]) and rows.step == cols.step == 1:
        return gs  # every input pixel read: no zeros around
    gx = np.zeros(geom.in_shape, dtype=gs.dtype)
    gx[:, :, rows, cols] = gs
    return gx


def pointwise_weight_grad(g: Any, x: Any, geom: Any, groups: int, wshape: tuple[int, ...]) -> Any:
    xk, (_, _, trows, tcols, _, _) = _gemm_in(x, geom)
    n, o = g.shape[:2]
    if xk.shape[2] == 1:
        dwk = g.reshape(n, o).T @ xk[:, :, 0]  # (O, K)
    else:
        dwk = np.tensordot(g.reshape(n, o, -1), xk, axes=([0, 2], [0, 2]))
    dw = np.zeros(wshape, dtype=dwk.dtype)
    ta = trows.stop - trows.start
    tb = tcols.stop - tcols.start
    dw[:, :, trows, tcols] = dwk.reshape(o, wshape[1], ta, tb)
    return dw
