"""``nn.linear``: the affine map as one fused primitive, its VJPs and its loop expression;
``nn.linear_relu``: the same followed by ReLU."""

from __future__ import annotations

from typing import Any

from .._autodiff import OUT, Joint, apply, defprim
from .._autodiff._expr import Elementwise, G, X, call, sum_rows
from .._backend import np
from .._kernels.registry import SMALLEST, dispatch

# --------------------------------------------------------------------------------------------
# linear: a fused primitive (x @ w.T + b in one call: the transpose, product and bias add would
# be three recorded ops); leading axes are folded into one GEMM. VJPs use differentiable ops.
# --------------------------------------------------------------------------------------------


def _add_bias_np(y: Any, b: Any) -> None:
    y += b


def _add_bias(y: Any, b: Any) -> None:
    """``y += b`` in place on the GEMM's fresh output ``y``."""
    dispatch("add_bias", _add_bias_np, y, b)


def _gemm_bias(x: Any, w: Any, b: Any) -> Any:
    """``x @ w.T + b`` for 2-D ``x``: the product, then the bias added in place."""
    y = x @ w.T
    if b is not None:
        if y.size < SMALLEST.get("add_bias", 0):  # too small for any kernel: no dispatcher
            y += b
        else:
            _add_bias(y, b)
    return y


def _linear_fwd(x: Any, w: Any, b: Any = None) -> Any:
    if x.ndim == 2:  # the common case, without the reshapes
        if x.size < SMALLEST.get("linear_gemm", 0):  # too small for any kernel: no dispatcher
            return _gemm_bias(x, w, b)
        return dispatch("linear_gemm", _gemm_bias, x, w, b)
    y = dispatch("linear_gemm", _gemm_bias, x.reshape(-1, x.shape[-1]), w, b)
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


# --------------------------------------------------------------------------------------------
# linear_relu: relu(x @ w.T + b), fused because it is measurably faster (a transformer's
# feed-forward block): the bias add and the ReLU are one in-place pass over the product's output
# (two passes and a new array as linear then relu), and backward takes the ReLU mask and the
# bias's gradient in one pass over the incoming gradient, then the two products of linear.
# --------------------------------------------------------------------------------------------


def _bias_relu_np(y: Any, b: Any) -> None:
    if b is not None:
        y += b
    np.maximum(y, 0, out=y)


def _linear_relu_fwd(x: Any, w: Any, b: Any = None) -> Any:
    x2 = x if x.ndim == 2 else x.reshape(-1, x.shape[-1])
    y = x2 @ w.T
    dispatch("bias_relu", _bias_relu_np, y, b)
    return y if x.ndim == 2 else y.reshape(x.shape[:-1] + (w.shape[0],))


def _relu_bias_grad_np(g: Any, ans: Any, with_bias: bool) -> tuple[Any, Any]:
    gp = g * (ans > 0)
    return gp, (np.add.reduce(gp, axis=0) if with_bias else None)


def _linear_relu_grads(
    xp: Any, g: Any, ans: Any, x: Any, w: Any, b: Any, needs: Any
) -> tuple[Any, Any, Any]:
    with_bias = len(needs) > 2 and bool(needs[2])  # b itself is not saved
    if xp.tensors:  # an outer tape records backward: differentiable ops
        gp = g * (ans > 0)
        db = _linear_vjp_b(xp, gp, None, x, w, b) if with_bias else None
    else:
        g2 = g if g.ndim == 2 else g.reshape(-1, g.shape[-1])
        a2 = ans if ans.ndim == 2 else ans.reshape(-1, ans.shape[-1])
        gp, db = dispatch("relu_bias_grad", _relu_bias_grad_np, g2, a2, with_bias)
        gp = gp.reshape(g.shape)
    dx = _linear_vjp_x(xp, gp, None, x, w, b) if needs[0] else None
    dw = _linear_vjp_w(xp, gp, None, x, w, b) if needs[1] else None
    return dx, dw, db


LINEAR_RELU = defprim("nn.linear_relu", _linear_relu_fwd, Joint(_linear_relu_grads), (0, 1, OUT))


def linear_relu(x: Any, w: Any, b: Any = None) -> Any:
    """``relu(x @ w.T + b)`` for Tensors of one float dtype: x (..., in), w (out, in), b (out,)
    or None; shapes are the caller's to check (``nn.functional.linear``'s rules).

    >>> import tapegrad as tg
    >>> linear_relu(tg.ones((2, 3)), tg.ones((4, 3)) * -1, tg.ones(4)).tolist()[0]
    [0.0, 0.0, 0.0, 0.0]
    """
    return apply(LINEAR_RELU, x, w, b)
