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

U = np.uint64


@jit()
def _max4(x, out):  # type: ignore[no-untyped-def]
    n_, c_, h_, w_ = x.shape
    ho, wo = out.shape[2], out.shape[3]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    # unsigned indices: no negative-index wraparound, so the loops vectorise
    for p in range(U(n_ * c_)):
        for y in range(U(ho)):
            r0 = p * U(h_ * w_) + U(2) * y * U(w_)
            r1 = r0 + U(w_)
            o = (p * U(ho) + y) * U(wo)
            for xx in range(U(wo)):
                a = xf[r0 + U(2) * xx]
                b = xf[r0 + U(2) * xx + U(1)]
                d = xf[r1 + U(2) * xx]
                e = xf[r1 + U(2) * xx + U(1)]
                m = a if a >= b else b
                m2 = d if d >= e else e
                m = m if m >= m2 else m2
                if np.isnan(a) or np.isnan(b) or np.isnan(d) or np.isnan(e):
                    m = np.nan
                of[o + xx] = m


@jit()
def _max4_grad(g, x, out, dx):  # type: ignore[no-untyped-def]
    n_, c_, h_, w_ = x.shape
    ho, wo = out.shape[2], out.shape[3]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    gf = g.reshape(-1)
    df = dx.reshape(-1)
    zero = df.dtype.type(0)
    for k in range(U(df.size)):  # rows and columns no window reaches stay zero
        df[k] = zero
    for p in range(U(n_ * c_)):
        for y in range(U(ho)):
            r0 = p * U(h_ * w_) + U(2) * y * U(w_)
            r1 = r0 + U(w_)
            o = (p * U(ho) + y) * U(wo)
            for xx in range(U(wo)):
                m = of[o + xx]
                gv = gf[o + xx]
                i0 = r0 + U(2) * xx
                i1 = r1 + U(2) * xx
                a = xf[i0] == m
                b = xf[i0 + U(1)] == m and not a
                d = xf[i1] == m and not (a or b)
                e = xf[i1 + U(1)] == m and not (a or b or d)
                df[i0] = gv if a else zero
                df[i0 + U(1)] = gv if b else zero
                df[i1] = gv if d else zero
                df[i1 + U(1)] = gv if e else zero


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
