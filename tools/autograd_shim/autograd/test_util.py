"""``autograd.test_util`` on ``tapegrad.testing.check_grads`` (the dot-product test, float64)."""

from __future__ import annotations

from itertools import product
from typing import Any

import numpy as _np

import tapegrad as _tg
from tapegrad.testing import check_grads as _tg_check_grads

from . import _f64

TOL = 1e-6
RTOL = 1e-6


def scalar_close(a: Any, b: Any) -> bool:
    return bool(abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL)


def _out(y: Any) -> Any:
    if isinstance(y, (list, tuple)):
        return _tg.concat([_tg.reshape(_out(v), (-1,)) for v in y]) if y else _tg.zeros(0)
    if isinstance(y, dict):
        return _out([y[k] for k in sorted(y)])
    if isinstance(y, _tg.Tensor):
        return y.astype(_tg.float64) if y.dtype.kind != "f" else y
    return _tg.tensor(_np.asarray(y, dtype=_np.float64))


def check_grads(fun: Any, argnum: Any = 0, modes: Any = None, order: int = 2) -> Any:
    nums = (argnum,) if isinstance(argnum, int) else tuple(argnum)

    def run(*args: Any, **kwargs: Any) -> None:
        full = list(args)
        # a differentiated list or tuple of arrays is checked as its arrays
        leaves: list[Any] = []
        shapes: list[Any] = []
        for n in nums:
            a = full[n]
            items = list(a) if isinstance(a, (list, tuple)) else [a]
            leaves += [_np.asarray(_f64(v), dtype=_np.float64) for v in items]
            shapes.append(type(a) if isinstance(a, (list, tuple)) else None)

        def f(*xs: Any) -> Any:
            a, k = list(full), 0
            for n, kind in zip(nums, shapes, strict=True):
                if kind is None:
                    a[n], k = xs[k], k + 1
                else:
                    m = len(full[n])
                    a[n], k = kind(xs[k : k + m]), k + m
            return _out(fun(*a, **kwargs))

        _tg_check_grads(f, leaves, order=min(order, 2))

    return run


def check_equivalent(x: Any, y: Any) -> None:
    xa, ya = _np.asarray(_out(x).numpy()), _np.asarray(_out(y).numpy())
    assert xa.shape == ya.shape, f"shape mismatch: {xa.shape} vs {ya.shape}"
    assert _np.allclose(xa, ya, rtol=RTOL, atol=TOL), f"value mismatch:\nx: {xa}\ny: {ya}"


def combo_check(fun: Any, *args: Any, **kwargs: Any) -> Any:
    def _combo(*arg_lists: Any, **kw_lists: Any) -> None:
        kv = [[(k, x) for x in xs] for k, xs in kw_lists.items()]
        for a in product(*arg_lists):
            for kw in product(*kv):
                check_grads(fun, *args, **kwargs)(*a, **dict(kw))

    return _combo
