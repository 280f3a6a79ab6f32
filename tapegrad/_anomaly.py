"""NaN and inf detection: ``tg.detect_anomaly()`` names the first op that produced one.

Built on the engine's two per-thread hooks (``set_op_hooks``): ``after_op(prim, inputs,
params, out)``, called after every op, and ``after_vjp(node, input_index, gradient)``, called
for every gradient backward computes. While the context is open each op's output is checked
in forward, each gradient in backward; the first NaN or inf raises ``AnomalyError`` naming the
op, the module that ran it, its inputs' shapes and dtypes, and the user's source line that
called it (remembered in forward, so a backward anomaly names the line of its forward op).
Off by default; when off the engine pays nothing (the hooks are None).
"""

from __future__ import annotations

import linecache
import os
import sys
from typing import Any

from . import _autodiff
from ._backend import np
from ._tensor import Tensor

__all__ = ["AnomalyError", "detect_anomaly"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class AnomalyError(FloatingPointError):
    """A NaN or inf appeared in an op's output or gradient under ``tg.detect_anomaly()``."""


def _user_frame() -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost caller outside the tapegrad package."""
    f: Any = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if not os.path.abspath(name).startswith(_PACKAGE):
            return name, f.f_lineno, f.f_code.co_name
        f = f.f_back
    return None


def _where(frame: tuple[str, int, str] | None) -> str:
    if frame is None:
        return "inside tapegrad (no caller outside it)"
    name, line, func = frame
    code = linecache.getline(name, line).strip()
    return f"{name}:{line} in {func}" + (f": {code}" if code else "")


def _describe(x: Any) -> str:
    a = x._data if isinstance(x, Tensor) else x
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return f"{tuple(a.shape)} {a.dtype}"
    return repr(x) if isinstance(x, (int, float, bool)) else type(x).__name__


def _bad(a: Any) -> tuple[int, int] | None:
    """(NaN count, inf count) of a float array, or None when every value is finite."""
    if a.dtype.kind not in "fc" or bool(np.isfinite(a).all()):
        return None
    a = np.asarray(a)
    return int(np.isnan(a).sum()), int(np.isinf(a).sum())


def _counts(bad: tuple[int, int]) -> str:
    nan, inf = bad
    return " and ".join(s for s in (f"{nan} NaN" * bool(nan), f"{inf} inf" * bool(inf)) if s)


class detect_anomaly:
    """Raise ``AnomalyError`` at the first op whose output (forward) or gradient (backward)
    holds a NaN or an inf, naming the op, its module path, its inputs' shapes and the source
    line that called it. Wrap both the forward pass and ``tape.gradient`` in it.

    ``check_forward`` / ``check_backward`` turn either half off. Checking every value of
    every op makes the code several times slower, and the block remembers where each recorded
    op was called (about 200 bytes per op until it exits): use it to find a bug, not to train.

    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([1.0, -1.0])
    >>> with np.errstate(invalid="ignore"), tg.detect_anomaly():  # numpy would warn first
    ...     y = tg.sqrt(x)
    Traceback (most recent call last):
    ...
    tapegrad._anomaly.AnomalyError: detect_anomaly: forward: op 'sqrt' produced 1 NaN ...
    """

    def __init__(self, check_forward: bool = True, check_backward: bool = True) -> None:
        self.check_forward = check_forward
        self.check_backward = check_backward
        # out tid -> (caller frame, module path, input descriptions), for backward's message
        self._origin: dict[int, tuple[Any, str | None, str]] = {}
        self._prev: Any = None

    def __enter__(self) -> detect_anomaly:
        hooks = getattr(_autodiff, "set_op_hooks", None)
        if hooks is None:  # an engine without the two hooks
            raise NotImplementedError(
                "detect_anomaly needs the engine hooks after_op/after_vjp (set_op_hooks), which "
                "this build of tapegrad lacks"
            )
        self._prev = hooks(self._after_op, self._after_vjp if self.check_backward else None)
        return self

    def __exit__(self, *exc: Any) -> None:
        _autodiff.set_op_hooks(*self._prev)
        self._origin.clear()

    # -- the hooks -----------------------------------------------------------------------------
    def _after_op(self, prim: Any, inputs: tuple[Any, ...], params: Any, out: Tensor) -> None:
        frame = _user_frame()
        ins = ", ".join(_describe(x) for x in inputs)
        scope = _autodiff.current_scope()
        if out._tid is not None and self.check_backward:
            self._origin[out._tid] = (frame, scope, ins)
        if not self.check_forward:
            return
        bad = _bad(out._data)
        if bad is None:
            return
        already = [
            i for i, x in enumerate(inputs) if isinstance(x, Tensor) and _bad(x._data) is not None
        ]
        note = (
            f"; input {already[0]} already held NaN or inf (it came from outside the checked "
            "ops: your data, a parameter, or code run before detect_anomaly)"
            if already
            else ""
        )
        raise AnomalyError(
            f"detect_anomaly: forward: op '{prim.name}' produced {_counts(bad)} in its output "
            f"{_describe(out)}{_in(scope)}; inputs: {ins}{note}. Called at {_where(frame)}"
        )

    def _after_vjp(self, node: Any, i: int, grad: Any) -> None:
        a = grad._data if isinstance(grad, Tensor) else grad
        bad = _bad(a)
        if bad is None:
            return
        frame, scope, ins = self._origin.get(node.out_tid, (None, node.scope, "unknown"))
        where = (
            f"Its forward was called at {_where(frame)}"
            if frame is not None
            else "Its forward ran before detect_anomaly was entered (no source line)"
        )
        raise AnomalyError(
            f"detect_anomaly: backward: the gradient of op '{node.prim.name}'{_in(scope)} with "
            f"respect to its input {i} ({tuple(a.shape)} {a.dtype}) has {_counts(bad)}; the "
            f"op's inputs: {ins}, output {tuple(node.out_shape)} {node.out_dtype}. {where}"
        )


def _in(scope: str | None) -> str:
    return f" in module '{scope}'" if scope else ""


_autodiff.set_anomaly_mode(detect_anomaly)  # what Tape(detect_anomaly=True) opens
