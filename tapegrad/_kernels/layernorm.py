"""Layer norm over the last ``m`` elements of each row, forward and backward (numba).

numpy's layer norm makes a pass over the whole array per step (mean, subtract, square, mean,
scale, affine; backward twice as many), each broadcasting per-row statistics along rows of
64-128 elements. Here each row is read into cache once and finished there: two-pass mean and
variance (as the reference), the affine map on the way out; backward recomputes the row's two
statistics from the input (nothing but the input is saved) and adds the weight and bias
gradients into float64 column sums. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from .._backend import np
from . import jit
from .softmax import row_sum

U = np.uint64


@jit()
def _stats(xr, m, eps):  # type: ignore[no-untyped-def]
    """The row's mean and ``1 / sqrt(var + eps)`` (biased variance, two passes)."""
    dt = xr.dtype.type
    mu = row_sum(xr) * dt(1.0 / m)
    a0 = a1 = a2 = a3 = dt(0)
    n4 = U(m - m % 4)
    for j in range(U(0), n4, U(4)):
        d0 = xr[j] - mu
        d1 = xr[j + U(1)] - mu
        d2 = xr[j + U(2)] - mu
        d3 = xr[j + U(3)] - mu
        a0 += d0 * d0
        a1 += d1 * d1
        a2 += d2 * d2
        a3 += d3 * d3
    var = (a0 + a1) + (a2 + a3)
    for j in range(n4, U(m)):
        d = xr[j] - mu
        var += d * d
    var = var * dt(1.0 / m)
    sd = np.sqrt(var + dt(eps))
    return mu, dt(1) / sd if sd != 0 else dt(np.inf)  # eps = 0 on a constant row: as numpy


@jit()
def _ln_fwd(x, w, b, y, eps):  # type: ignore[no-untyped-def]
    n_r, m = x.shape
    for r in range(n_r):
        xr = x[r]
        yr = y[r]
        mu, rstd = _stats(xr, m, eps)
        for j in range(U(m)):
            yr[j] = (xr[j] - mu) * rstd
        if w is not None:
            for j in range(U(m)):
                yr[j] *= w[j]
        if b is not None:
            for j in range(U(m)):
                yr[j] += b[j]


@jit()
def _ln_bwd(g, x, w, eps, gx, gw, gb):  # type: ignore[no-untyped-def]
    n_r, m = x.shape
    dt = x.dtype.type
    xh = np.empty(m, x.dtype)
    gy = np.empty(m, x.dtype)
    tmp = np.empty(m, x.dtype)
    for r in range(n_r):
        xr = x[r]
        gr = g[r]
        mu, rstd = _stats(xr, m, eps)
        for j in range(U(m)):
            xh[j] = (xr[j] - mu) * rstd
        if gw is not None:
            for j in range(U(m)):
                gw[j] += gr[j] * xh[j]
        if gb is not None:
            for j in range(U(m)):
                gb[j] += gr[j]
        if gx is not None:
            if w is not None:
                for j in range(U(m)):
                    gy[j] = gr[j] * w[j]
            else:
                for j in range(U(m)):
                    gy[j] = gr[j]
            a = row_sum(gy) * dt(1.0 / m)
            for j in range(U(m)):
                tmp[j] = gy[j] * xh[j]
            c = row_sum(tmp) * dt(1.0 / m)
            gxr = gx[r]
            for j in range(U(m)):
                gxr[j] = rstd * (gy[j] - a - xh[j] * c)


def layer_norm(x: Any, w: Any, b: Any, m: int, eps: float) -> Any:
    """``(x - mean) / sqrt(var + eps) * w + b`` over rows of the last ``m`` elements."""
    x2 = np.ascontiguousarray(x).reshape(-1, m)
    y = np.empty(x2.shape, x.dtype)
    _ln_fwd(x2, None if w is None else w.reshape(-1), None if b is None else b.reshape(-1), y, eps)
    return y.reshape(x.shape)


def layer_norm_grad(g: Any, x: Any, w: Any, m: int, eps: float, needs: Any) -> tuple[Any, Any, Any]:
    """The gradients for ``x``, ``w`` and ``b`` (None where ``needs`` says no); ``w`` and ``b``
    as flat (m,) arrays."""
    x2 = np.ascontiguousarray(x).reshape(-1, m)
    g2 = np.ascontiguousarray(g).reshape(-1, m)
    gx = np.empty(x2.shape, x.dtype) if needs[0] else None
    gw = np.zeros(m, np.float64) if needs[1] else None
    gb = np.zeros(m, np.float64) if needs[2] else None
    _ln_bwd(g2, x2, None if w is None else np.ascontiguousarray(w).reshape(-1), eps, gx, gw, gb)
    return (
        None if gx is None else gx.reshape(x.shape),
        None if gw is None else gw.astype(x.dtype),
        None if gb is None else gb.astype(x.dtype),
    )
