"""2x2 max pooling (stride 2, the common ``MaxPool2d(2)``), forward and gradient (numba).

numpy's max pooling makes one strided pass per kernel offset, and its gradient compares every
offset with the output, masks and multiplies. Here each window is read once, its four values
unrolled (measured: loops over a run-time kernel size do not vectorise and were slower than
numpy, so other geometries keep the numpy code). The forward keeps the maximum (a NaN wins, as
``np.maximum``); the gradient routes each window's gradient to its first maximum in row-major
order (PyTorch's rule) and writes zeros elsewhere, rows and columns no window reaches included.
Serial loops: at these sizes, waking a second thread on a shared two-core machine costs more
than the pass. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from .._backend import np
from . import jit


@jit()
def _max4(x, out):  # type: ignore[no-untyped-def]
    n_, c_ = x.shape[0], x.shape[1]
    ho, wo = out.shape[2], out.shape[3]
    for n in range(n_):
        for c in range(c_):
            for y in range(ho):
                for xx in range(wo):
                    a = x[n, c, 2 * y, 2 * xx]
                    b = x[n, c, 2 * y, 2 * xx + 1]
                    d = x[n, c, 2 * y + 1, 2 * xx]
                    e = x[n, c, 2 * y + 1, 2 * xx + 1]
                    m = a if a >= b else b
                    m2 = d if d >= e else e
                    m = m if m >= m2 else m2
                    if np.isnan(a) or np.isnan(b) or np.isnan(d) or np.isnan(e):
                        m = np.nan
                    out[n, c, y, xx] = m


@jit()
def _max4_grad(g, x, out, dx):  # type: ignore[no-untyped-def]
    n_, c_, h_, w_ = x.shape
    ho, wo = out.shape[2], out.shape[3]
    for n in range(n_):
        for c in range(c_):
            for y in range(ho):
                for xx in range(wo):
                    m = out[n, c, y, xx]
                    gv = g[n, c, y, xx]
                    a = x[n, c, 2 * y, 2 * xx] == m
                    b = x[n, c, 2 * y, 2 * xx + 1] == m and not a
                    d = x[n, c, 2 * y + 1, 2 * xx] == m and not (a or b)
                    e = x[n, c, 2 * y + 1, 2 * xx + 1] == m and not (a or b or d)
                    dx[n, c, 2 * y, 2 * xx] = gv if a else 0
                    dx[n, c, 2 * y, 2 * xx + 1] = gv if b else 0
                    dx[n, c, 2 * y + 1, 2 * xx] = gv if d else 0
                    dx[n, c, 2 * y + 1, 2 * xx + 1] = gv if e else 0
            for iy in range(2 * ho, h_):  # an odd last row or column: no window reaches it
                for ix in range(w_):
                    dx[n, c, iy, ix] = 0
            for iy in range(2 * ho):
                for ix in range(2 * wo, w_):
                    dx[n, c, iy, ix] = 0


def fits(geom: Any) -> bool:
    """Whether these kernels cover ``geom``: 2x2 windows, stride 2, no padding or dilation."""
    return (
        geom.kernel == (2, 2)
        and geom.stride == (2, 2)
        and geom.dilation == (1, 1)
        and geom.padding == ((0, 0), (0, 0))
    )


def max_pool(x: Any, geom: Any) -> Any:
    """``nn.max_pool2d``'s forward for ``fits(geom)``: the (N, C, H // 2, W // 2) maxima."""
    out = np.empty(x.shape[:2] + tuple(geom.out_hw), dtype=x.dtype)
    _max4(np.ascontiguousarray(x), out)
    return out


def max_pool_grad(g: Any, x: Any, out: Any, geom: Any) -> Any:
    """``nn.max_pool2d_grad``'s forward for ``fits(geom)``: ``g`` at each first maximum."""
    dx = np.empty(geom.in_shape, dtype=g.dtype)
    c = np.ascontiguousarray
    _max4_grad(c(g), c(x), c(out), dx)
    return dx
