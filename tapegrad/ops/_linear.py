"""``nn.linear``: the affine map as one fused primitive, its VJPs and its loop expression."""

from __future__ import annotations

from typing import Any

from .._autodiff import defprim
from .._autodiff._expr import Elementwise, G, X, call, sum_rows
from .._backend import np
from .._kernels.registry import dispatch

# --------------------------------------------------------------------------------------------
# linear: a fused primitive (x @ w.T + b in one call: the transpose, product and bias add would
# be three recorded ops); leading axes are folded into one GEMM. VJPs use differentiable ops.
# --------------------------------------------------------------------------------------------


def _add_bias_np(y: Any, b: Any) -> None:
    y += b


def _add_bias(y: Any, b: Any) -> None:
    """``y += b`` in place on the GEMM's fresh output ``y``."""
    dispatch("add_bias", _add_bias_np, y, b)


def _linear_fwd(x: Any, w: Any, b: Any = None) -> Any:
    if x.ndim == 2:  # the common case, without the reshapes
        y = x @ w.T
        if b is not None:
            _add_bias(y, b)
        return y
    x2 = x.reshape(-1, x.shape[-1])
    y = x2 @ w.T
    if b is not None:
        _add_bias(y, b)
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def _linear_vjp_x(xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any) -> Any:
    if g.ndim <= 2:
        return xp.matmul(g, w)  # (N, out) @ (out, in)
    g2 = xp.reshape(g, (-1, g.shape[-1]))
    return xp.reshape(xp.matmul(g2, w), x.shape)  # one GEMM over the folded leading axes


def _linear_vjp_w(xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any) -> Any:
    if g.ndim == 2:
        return xp.matmul(g.T, x)  # (out, N) @ (N, in)
    return xp.matmul(xp.reshape(g, (-1, g.shape[-1])).T, xp.reshape(x, (-1, x.shape[-1])))


def _linear_vjp_b(xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any) -> Any:
    if g.ndim == 2 and not xp.tensors:
        return np.add.reduce(g, axis=0)  # numpy's sum() wrapper costs as much on small layers
    return xp.sum(g, axis=tuple(range(g.ndim - 1))) if g.ndim > 1 else g


LINEAR = defprim(
    "nn.linear", _linear_fwd, (_linear_vjp_x, _linear_vjp_w, _linear_vjp_b), (0, 1),
    # for tg.compile's loops: the GEMM (the forward without a bias), then the bias added in
    # the loop that follows; the bias's gradient sums the rows
    expr=Elementwise(call(_linear_fwd, 0, 1) + X(2), (None, None, sum_rows(G))),
)
