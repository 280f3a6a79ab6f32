"""softmax and log_softmax along one axis, stable for large logits.

Each is one primitive: the max is subtracted first (a constant, so it changes nothing but
overflow), and the VJPs are the closed forms ``y * (g - sum(g * y))`` and
``g - exp(y) * sum(g)`` from the output alone, so backward keeps one array per op.
"""

from __future__ import annotations

from typing import Any

from .._amp import upper
from .._autodiff import OUT, apply, defprim
from .._backend import np
from .._kernels.registry import dispatch
from .._tensor import Tensor
from ._common import as_tensor, check_axis
from ._reduce import _max_shift_fwd


def _softmax(x: Any, axis: int) -> Any:
    e = np.asarray(np.subtract(x, _max_shift_fwd(x, axis)))  # 0-d input: a numpy scalar
    np.exp(e, out=e)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _log_softmax(x: Any, axis: int) -> Any:
    z = x - _max_shift_fwd(x, axis)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _softmax_fwd(x: Any, axis: int) -> Any:
    return dispatch("softmax", _softmax, x, axis)


def _log_softmax_fwd(x: Any, axis: int) -> Any:
    if x.size == 0:  # an empty result (without numpy's warning for the log of an empty sum)
        return x.copy()
    return dispatch("log_softmax", _log_softmax, x, axis)


def _softmax_grad(xp: Any, g: Any, ans: Any, axis: int) -> Any:
    return ans * (g - xp.sum(g * ans, axis=axis, keepdims=True))


def _log_softmax_grad(xp: Any, g: Any, ans: Any, axis: int) -> Any:
    return g - xp.exp(ans) * xp.sum(g, axis=axis, keepdims=True)


def _softmax_vjp(xp: Any, g: Any, ans: Any, x: Any, axis: int) -> Any:
    return dispatch("softmax_grad", _softmax_grad, xp, g, ans, axis)


def _log_softmax_vjp(xp: Any, g: Any, ans: Any, x: Any, axis: int) -> Any:
    return dispatch("log_softmax_grad", _log_softmax_grad, xp, g, ans, axis)


# compiled row kernels on arrays along the last axis (one pass per row forward and backward,
# against numpy's five broadcast passes); the formulas above otherwise and on Tensors
_SOFTMAX = defprim("softmax", _softmax_fwd, _softmax_vjp, (OUT,))
_LOG_SOFTMAX = defprim("log_softmax", _log_softmax_fwd, _log_softmax_vjp, (OUT,))


def _float(x: Tensor) -> Tensor:
    from .._dtypes import default_float  # noqa: PLC0415

    return x if x.dtype.kind in "fc" else x.astype(default_float())


@upper
def softmax(x: Any, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``.

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.softmax(tg.tensor([1.0, 1.0]), axis=0).tolist()]
    [0.5, 0.5]
    """
    x = _float(as_tensor(x))
    return apply(_SOFTMAX, x, axis=check_axis(axis, x.ndim, "softmax"))


@upper
def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``, stable for large logits.

    >>> import tapegrad as tg
    >>> [round(v, 4) for v in tg.log_softmax(tg.tensor([1e4, 1e4]), axis=0).tolist()]
    [-0.6931, -0.6931]
    """
    x = _float(as_tensor(x))
    return apply(_LOG_SOFTMAX, x, axis=check_axis(axis, x.ndim, "log_softmax"))
