"""Autocast: the mixed-precision state and the casts that matmul, conv and attention run through.

Inside ``tg.autocast(dtype)`` the ops marked ``@lower`` (matmul, linear, conv, attention, einsum)
take their float32 inputs in the low dtype and return the low dtype; the ops marked ``@upper``
(softmax, log-softmax, losses, norms) take low-dtype inputs up to float32, as PyTorch's autocast
lists do. Every cast is a recorded ``astype``, so gradients reach float32 parameters in float32.

The low-precision product: on the CPU (and for bfloat16, which CuPy lacks) the inputs are rounded
to the low dtype, multiplied in float32 and the result rounded: float32 accumulation, the same
numbers as a bfloat16 GEMM that accumulates in float32, through the float32 kernels. On the GPU,
float16 runs natively (cuBLAS accumulates float16 GEMMs in float32); CuPy has no bfloat16.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any

from . import _dtypes as D
from ._backend import np
from ._tensor import Tensor

__all__ = ["autocast", "get_autocast_dtype", "is_autocast_enabled", "lower", "upper"]


class _State(threading.local):
    dtype: Any = None  # the active low dtype, None outside autocast (per thread, as PyTorch)


_STATE = _State()


def is_autocast_enabled() -> bool:
    """Whether an enabled ``tg.autocast`` is active in this thread."""
    return _STATE.dtype is not None


def get_autocast_dtype() -> Any:
    """The low dtype of the active ``tg.autocast``, or None outside one."""
    return _STATE.dtype


class autocast(contextlib.ContextDecorator):  # noqa: N801  (PyTorch's name)
    """Run matmul, linear, conv and attention in ``dtype`` with float32 accumulation.

    ``dtype`` is ``tg.bfloat16`` (the default; its range is float32's, so no loss scaling is
    needed) or ``tg.float16`` (use ``tg.amp.GradScaler`` against underflowing gradients).
    Parameters stay float32; their gradients come back float32. Softmax, log-softmax, the
    losses and the norms compute in float32. Nests; ``enabled=False`` turns it off inside.
    Works as a decorator too.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones((3, 2)))
    >>> with tg.Tape() as tape, tg.autocast(tg.bfloat16):
    ...     y = tg.ones((4, 3)) @ w
    ...     loss = tg.nn.functional.mse_loss(y, tg.zeros((4, 2)))
    >>> y.dtype, loss.dtype, tape.gradient(loss)[w].dtype
    (dtype(bfloat16), dtype('float32'), dtype('float32'))
    """

    def __init__(self, dtype: Any = None, enabled: bool = True) -> None:
        d = D.bfloat16_dtype() if dtype is None else D.as_dtype(dtype)
        if d != D.float16 and d.name != "bfloat16":
            raise ValueError(
                f"autocast: dtype must be tg.bfloat16 or tg.float16, got {d}; float32 and "
                "float64 need no autocast (leave it off)"
            )
        self.dtype = d
        self.enabled = bool(enabled)
        self._prev: list[Any] = []

    def __enter__(self) -> autocast:
        self._prev.append(_STATE.dtype)
        _STATE.dtype = self.dtype if self.enabled else None
        return self

    def __exit__(self, *exc: Any) -> None:
        _STATE.dtype = self._prev.pop()


def _low_dtypes() -> tuple[Any, ...]:
    return (D.float16, D.bfloat16_dtype()) if D._bfloat16 is not None else (D.float16,)


def _map(f: Callable[[Any], Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return tuple(f(a) for a in args), {k: f(v) for k, v in kwargs.items()}


def _cast(t: Any, d: Any) -> Any:
    from .ops._shape import astype  # noqa: PLC0415  # cycle: ops import this module

    if d == D.float16:
        with np.errstate(over="ignore"):  # out of float16's range is inf, as in PyTorch
            return astype(t, d)
    return astype(t, d)


def _float(t: Any) -> bool:
    return isinstance(t, Tensor) and D.is_float(t._data.dtype)


def _run_off(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    saved, _STATE.dtype = _STATE.dtype, None
    try:
        return fn(*args, **kwargs)
    finally:
        _STATE.dtype = saved


def _outputs(out: Any, f: Callable[[Any], Any]) -> Any:
    if isinstance(out, tuple):
        return tuple(f(o) if isinstance(o, Tensor) else o for o in out)
    return f(out) if isinstance(out, Tensor) else out


def _run_low(fn: Callable[..., Any], low: Any, args: Any, kwargs: Any) -> Any:
    floats = [a for a in (*args, *kwargs.values()) if _float(a)]
    if not floats or any(a._data.dtype == D.float64 for a in floats):
        return _run_off(fn, args, kwargs)  # float64 is never autocast (PyTorch)
    on_gpu = any(a.device == "cuda" for a in floats)
    if on_gpu and low != D.float16:
        raise TypeError(
            f"autocast({low}) on device 'cuda': CuPy has no bfloat16 arrays; use "
            "tg.autocast(tg.float16) with tg.amp.GradScaler on the GPU"
        )
    lowered = _map(lambda a: _cast(a, low) if _float(a) else a, args, kwargs)
    if on_gpu and low == D.float16:  # the fast path: CuPy runs float16 GEMMs natively
        return _run_off(fn, *lowered)
    # the CPU path: low-precision values, float32 product, the result rounded to the low dtype
    up = _map(lambda a: _cast(a, D.float32) if _float(a) else a, *lowered)
    return _outputs(_run_off(fn, *up), lambda o: _cast(o, low) if _float(o) else o)


def lower(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an op that autocast runs in the low dtype (matmul, linear, conv, attention).

    The decorated function runs with autocast off inside, so the ops it calls are not cast
    again; outside autocast it costs one extra call.
    """

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        low = _STATE.dtype
        if low is None:
            return fn(*args, **kwargs)
        return _run_low(fn, low, args, kwargs)

    return op


def upper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an op that autocast runs in float32 (softmax, log-softmax, losses, norms)."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        if _STATE.dtype is None:
            return fn(*args, **kwargs)
        lows = _low_dtypes()

        def up(a: Any) -> Any:
            return _cast(a, D.float32) if _float(a) and a._data.dtype in lows else a

        return _run_off(fn, *_map(up, args, kwargs))

    return op

