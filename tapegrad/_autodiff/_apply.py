"""apply: the one door every op goes through, and the recording of an op on its tapes.

``apply`` runs a primitive's forward on arrays and, when at least one input is on a recording
tape, appends one record of the op (see ``_record``) to each such tape; tapes that record the
same op share the record. Ops that touch no open tape record nothing (inference).
"""

from __future__ import annotations

from threading import get_ident
from typing import Any

from .._dtypes import FLOAT_DTYPES as _FLOATS  # bfloat16 joins it when first used
from .._tensor import Tensor, _next_tid
from ._primitive import Primitive
from ._record import Saved, keep, version_sum
from ._state import ACTIVE, STATE

_new_tensor = Tensor.__new__


def apply(prim: Primitive, *inputs: Any, **params: Any) -> Tensor:
    """Run ``prim`` on ``inputs`` (Tensors or constants) and record it where needed.

    >>> import tapegrad as tg
    >>> from tapegrad.ops._binary import _mul
    >>> tg.apply(_mul, tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])).tolist()
    [3.0, 8.0]
    """
    n = len(inputs)
    try:  # free in 3.11 when nothing is raised
        if n == 2:  # unrolled for binary and unary ops, the most common: ~10% less overhead
            x, y = inputs
            if isinstance(x, Tensor):
                taped = bool(x._tapes)
                x = x._data
            else:
                taped = False
            if isinstance(y, Tensor):
                if y._tapes:
                    taped = True
                y = y._data
            data = prim.fwd(x, y, **params)
        elif n == 1:
            x = inputs[0]
            if isinstance(x, Tensor):
                taped = bool(x._tapes)
                x = x._data
            else:
                taped = False
            data = prim.fwd(x, **params)
        else:
            taped = False
            arrays = []
            for x in inputs:
                if isinstance(x, Tensor):
                    arrays.append(x._data)
                    if x._tapes:
                        taped = True
                else:
                    arrays.append(x)
            data = prim.fwd(*arrays, **params)
    except (ValueError, TypeError, IndexError) as e:
        raise _forward_error(prim, inputs, params, e) from e
    out = _new_tensor(Tensor)
    out._data = data
    out._tapes = ()
    out._tid = None
    out._version = 0
    if taped or ACTIVE.n:  # one plain read while nothing is traced anywhere
        st = STATE
        if taped or st.with_tapes:
            _record(prim, inputs, params, out, st)
        if ACTIVE.hooks:  # the thread-local hooks only while one is set in some thread
            cap = st.capture
            if cap is not None:
                cap.append((prim, inputs, params, out))
            if st.after_op is not None:
                st.after_op(prim, inputs, params, out)
    return out


def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"{tuple(x._data.shape)} {x._data.dtype}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"array{tuple(x.shape)} {x.dtype}"
    return type(x).__name__ if not isinstance(x, (int, float, bool)) else repr(x)


def _forward_error(
    prim: Primitive, inputs: tuple[Any, ...], params: dict[str, Any], e: Exception
) -> Exception:
    """The forward's exception, restated with the op, the input shapes/dtypes and a fix."""
    msg = str(e).strip()
    ins = ", ".join(_describe(x) for x in inputs)
    shown = {k: v for k, v in params.items() if len(repr(v)) <= 60}
    extra = "".join(f", {k}={v!r}" for k, v in shown.items())
    if "broadcast" in msg:
        fix = (
            "shapes broadcast when, aligned from the right, each pair of dimensions is equal or "
            "one of them is 1; reshape an input (e.g. x.reshape(-1, 1) or x[:, None]) or reduce "
            "it first"
        )
    elif isinstance(e, TypeError):
        fix = "check the inputs' dtypes; cast one with x.astype(...) so that they agree"
    else:
        fix = "check the inputs' shapes and dtypes against what the op expects"
    text = f"{prim.name}: {msg} (inputs: {ins}{extra}); fix: {fix}"
    try:  # the same class where its constructor takes a message (numpy's AxisError does)
        err: Exception | None = type(e)(text)
    except Exception:  # noqa: BLE001
        err = None
    if err is None or str(err) != text:  # e is one of the three caught in apply
        err = next(c for c in (ValueError, TypeError, IndexError) if isinstance(e, c))(text)
    return err


def _record(
    prim: Primitive, inputs: tuple[Any, ...], params: dict[str, Any], out: Tensor, st: Any
) -> None:
    """Append one node to every recording tape that an input of this op is on."""
    data = out._data
    dt = data.dtype
    if (ACTIVE.off and not st.grad_enabled) or (dt not in _FLOATS and dt.kind not in "fc"):
        return  # ops with integer or bool outputs carry no gradient
    # Per input: its version into vsum, its tapes into `tapes`, and its entry in the record:
    # None, its tid, or the Parameter itself when trainable. Unrolled for one and two inputs
    # (most ops): about 20% cheaper than the loop.
    n = len(inputs)
    tapes: tuple[Any, ...] = ()
    param = False
    vsum = 0
    ids: Any
    ex: Any
    ey: Any
    e: Any
    if 0 < n <= 2:
        x, y = inputs if n == 2 else (inputs[0], None)
        ex = ey = None
        if isinstance(x, Tensor):
            vsum = x._version
            ex = x._tid
            if ex is not None:
                tapes = x._tapes
                if x._is_param and x.requires_grad:  # type: ignore[attr-defined]
                    ex = x
                    param = True
        if isinstance(y, Tensor):
            vsum += y._version
            ey = y._tid
            if ey is not None:
                yt = y._tapes
                if yt and yt is not tapes:
                    tapes = yt if not tapes else tapes + tuple(t for t in yt if t not in tapes)
                if y._is_param and y.requires_grad:  # type: ignore[attr-defined]
                    ey = y
                    param = True
        ids = (ex, ey) if n == 2 else (ex,)
    else:
        ids = []
        for x in inputs:
            e = None
            if isinstance(x, Tensor):
                vsum += x._version
                e = x._tid
                if e is not None:
                    xt = x._tapes
                    if xt and xt is not tapes:
                        tapes = xt if not tapes else tapes + tuple(t for t in xt if t not in tapes)
                    if x._is_param and x.requires_grad:  # type: ignore[attr-defined]
                        e = x
                        param = True
            ids.append(e)
        ids = tuple(ids)
    if tapes:  # the inputs' tapes that record now, in this thread (see _state)
        me = get_ident()
        if len(tapes) == 1:
            t = tapes[0]
            if not (t._recording and t._owner == me):
                tapes = ()
        else:
            tapes = tuple([t for t in tapes if t._recording and t._owner == me])
    if param:  # trainable parameters are on every auto tape
        auto = st.auto
        if auto and tapes != auto:
            tapes = auto if not tapes else tapes + tuple(t for t in auto if t not in tapes)
    if not tapes:
        return

    sa = prim.save_args
    k = prim.save_prefix
    if not sa:
        args = versions = None
    elif n == k:
        args = inputs
        versions = vsum  # versions only grow: a changed sum means a saved tensor was modified
    elif 0 < k < n:  # the first k inputs (linear, conv2d: input and weight, not the bias)
        args = inputs[:k] + (None,) * (n - k)
        versions = version_sum(args)
    else:
        args = tuple([x if i in sa else None for i, x in enumerate(inputs)])
        versions = version_sum(args)
    if args is not None:
        args = keep(args)  # tensors on a tape are kept by array and weak reference (_record)
    scope = st.scope
    tid = _next_tid()
    out._tid = tid
    out._tapes = tapes
    rec = (
        prim,
        ids,
        tid,
        data.shape,
        dt,
        Saved(out) if prim.save_out else None,
        args,
        params,
        versions,
        scope[-1] if scope else None,
    )
    for tp in tapes:
        tp._nodes.append(rec)
