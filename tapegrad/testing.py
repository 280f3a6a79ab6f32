"""Gradient checking for users' own primitives and compositions (float64).

``check_grads(f, args, order=2)`` runs the dot-product test: for random ``v_x`` and ``v_y``,
``<v_y, J v_x>`` from central differences must equal ``<J^T v_y, v_x>`` from the tape. With
``order=2`` the VJP function itself is checked the same way (its gradient goes through a
nested tape), which catches wrong second derivatives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._autodiff import Tape, trace
from ._backend import np
from ._tensor import Tensor, _wrap

__all__ = ["check_grads", "check_vjp", "numerical_jvp"]


def _as64(a: Any) -> Tensor:
    arr = a._data if isinstance(a, Tensor) else np.asarray(a)
    if arr.dtype.kind == "f" and arr.dtype != np.float64:
        raise TypeError(
            f"check_grads: inputs must be float64 for a meaningful finite-difference check, got {arr.dtype}"
        )
    return _wrap(np.asarray(arr, dtype=np.float64) if arr.dtype.kind == "f" else arr)


def numerical_jvp(
    f: Callable[..., Tensor], args: Sequence[Tensor], vs: Sequence[Any], eps: float
) -> Any:
    """``J v`` by central differences in float64."""
    plus = [_wrap(a._data + eps * v) if v is not None else a for a, v in zip(args, vs, strict=True)]
    minus = [
        _wrap(a._data - eps * v) if v is not None else a for a, v in zip(args, vs, strict=True)
    ]
    return (f(*plus)._data - f(*minus)._data) / (2 * eps)


def check_vjp(
    f: Callable[..., Tensor],
    args: Sequence[Any],
    *,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Raise AssertionError when the tape's VJP of ``f`` disagrees with central differences."""
    rng = np.random.default_rng(seed)
    args = [_as64(a) for a in args]
    diff = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    vs = [rng.standard_normal(a.shape) if i in diff else None for i, a in enumerate(args)]
    with Tape() as tape:
        traced = [trace(a, tape) if i in diff else a for i, a in enumerate(args)]
        y = f(*traced)
    vy = rng.standard_normal(y.shape)
    if tape in y._tapes:
        grads = tape.gradient(y, [traced[i] for i in diff], output_gradients=_wrap(vy))
        vjp_dot = sum(float(np.sum(g._data * vs[i])) for g, i in zip(grads, diff, strict=True))
    else:  # f does not depend on its inputs (e.g. the VJP of a linear op): a zero Jacobian
        tape.release()
        vjp_dot = 0.0
    jvp = numerical_jvp(f, args, vs, eps)
    num_dot = float(np.sum(jvp * vy))
    scale = max(abs(num_dot), abs(vjp_dot), 1.0)
    if not abs(vjp_dot - num_dot) <= atol * scale + rtol * scale:
        raise AssertionError(
            f"check_grads: the VJP disagrees with finite differences: <J^T v_y, v_x> = {vjp_dot!r}, "
            f"<v_y, J v_x> = {num_dot!r} (difference {vjp_dot - num_dot:.3e}, eps={eps})"
        )


def check_grads(
    f: Callable[..., Tensor],
    args: Sequence[Any],
    order: int = 2,
    *,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Check ``f``'s gradients to ``order`` (1 or 2) with the dot-product test in float64.

    >>> import tapegrad as tg
    >>> tg.testing.check_grads(lambda x: tg.tanh(x) * x, [tg.tensor([0.3, -1.2], dtype=tg.float64)])
    """
    check_vjp(f, args, eps=eps, rtol=rtol, atol=atol, seed=seed)
    if order >= 2:
        rng = np.random.default_rng(seed + 1)
        args64 = [_as64(a) for a in args]
        y0 = f(*args64)
        vy = _wrap(rng.standard_normal(y0.shape))
        diff = [i for i, a in enumerate(args64) if a.dtype.kind == "f"]

        def vjp_fn(*xs: Tensor) -> Tensor:
            # the VJP as a function of the inputs, reduced to one array by a fixed projection
            with Tape() as inner:
                tr = [trace(x, inner) if i in diff else x for i, x in enumerate(xs)]
                y = f(*tr)
            if inner not in y._tapes:  # f does not depend on its inputs: a zero VJP
                inner.release()
                return _wrap(np.zeros(()))
            gs = inner.gradient(y, [tr[i] for i in diff], output_gradients=vy)
            out = None
            for k, g in enumerate(gs):
                w = _wrap(np.random.default_rng(seed + 10 + k).standard_normal(g.shape))
                term = (g * w).sum()
                out = term if out is None else out + term
            return out  # type: ignore[return-value]

        check_vjp(vjp_fn, args64, eps=eps, rtol=rtol * 10, atol=atol * 10, seed=seed + 2)
