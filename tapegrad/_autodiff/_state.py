"""The trace state, per thread: open tapes, the grad switch, the module scope, the hooks.

Only this module's functions change it, except the module scope list that ``scope_list``
hands ``Module.__call__`` to push and pop (it runs for every layer call). Hot paths read
``ACTIVE.n`` (open ``with`` tapes, captures and hooks, all threads) before any thread-local
field (docs/design.md, "Tape rules").
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any


class _Active:
    """How many ``with`` tapes, captures and hooks are open (``n``), how many captures and hooks
    of them (``hooks``), and how many ``no_grad`` blocks (``off``), in all threads together.
    A plain read of one of these costs a fifth of a thread-local field's (about 15 ns against
    70): the hot paths read them first, and a thread-local field only where one is nonzero."""

    __slots__ = ("n", "hooks", "off", "lock")

    def __init__(self) -> None:
        self.n = self.hooks = self.off = 0
        self.lock = threading.Lock()

    def add(self, k: int, hooks: int = 0, off: int = 0) -> None:
        with self.lock:
            self.n += k
            self.hooks += hooks
            self.off += off


ACTIVE = _Active()


class TraceState(threading.local):
    """What is being traced right now, in this thread."""

    def __init__(self) -> None:
        self.with_tapes: list[Any] = []  # tapes opened by ``with``, in order of opening
        # the tapes that watch every trainable Parameter now (open by ``with``, recording,
        # watch_parameters=True): kept in sync so recording reads one field
        self.auto: tuple[Any, ...] = ()
        self.grad_enabled = True
        self.scope: list[str] = []  # module paths pushed by Module.__call__
        # while not None, every primitive call (forward through ``apply``, backward on arrays
        # through the engine) is appended here as (op, inputs, params, output): tg.compile
        self.capture: Any = None
        # the tapes recording now, however opened; while none is, backward runs on arrays
        self.recording: weakref.WeakSet[Any] = weakref.WeakSet()
        # checks run after every op (forward) and every VJP (backward): tg.detect_anomaly
        self.after_op: Any = None  # after_op(prim, inputs, params, out)
        self.after_vjp: Any = None  # after_vjp(node, input_index, gradient)
        # True while gradient checkpointing recomputes a block: its backward follows at once
        self.recomputing = False


STATE = TraceState()


# -- the grad switch ---------------------------------------------------------------------------
@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Nothing inside is recorded on any tape (inference, parameter updates).

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(2))
    >>> with tg.Tape() as tape:
    ...     with tg.no_grad():
    ...         y = w * 2
    >>> len(tape.nodes)
    0
    """
    prev = STATE.grad_enabled
    STATE.grad_enabled = False
    ACTIVE.add(0, off=1)
    try:
        yield
    finally:
        STATE.grad_enabled = prev
        ACTIVE.add(0, off=-1)


def is_grad_enabled() -> bool:
    """False inside ``tg.no_grad()``."""
    return STATE.grad_enabled


def is_recording() -> bool:
    """Whether an op on a tape could be recorded now (a tape records and grad is enabled)."""
    return STATE.grad_enabled and bool(STATE.recording)


# -- module scope --------------------------------------------------------------------------------
def scope_list() -> list[str]:
    """This thread's module scope stack: ``Module.__call__`` appends its path while it runs
    and pops it after, so the ops recorded meanwhile name it."""
    return STATE.scope


def current_scope() -> str | None:
    """The path of the innermost module running now, or None."""
    return STATE.scope[-1] if STATE.scope else None


# -- tg.compile's capture ----------------------------------------------------------------------
def start_capture(records: Any) -> None:
    """Until ``stop_capture``, append every primitive call to ``records`` as (primitive,
    inputs, params, output), and run backward's array steps through
    ``records.call(fn, step, xp, args, kw)``, which must return ``fn(xp, *args, **kw)`` (no
    nesting; ``step`` is ``(primitive, input index)`` for a VJP, see ``_engine``)."""
    if STATE.capture is not None:
        raise RuntimeError("tg.compile: captures do not nest")
    STATE.capture = records
    ACTIVE.add(1, hooks=1)


def is_capturing() -> bool:
    """Whether tg.compile is capturing in this thread."""
    return STATE.capture is not None


def stop_capture() -> None:
    if STATE.capture is not None:
        STATE.capture = None
        ACTIVE.add(-1, hooks=-1)


_ANOMALY: list[Any] = []  # tg.detect_anomaly, installed by tapegrad._anomaly (it sits above)


def set_anomaly_mode(factory: Any) -> None:
    """Install the context manager that ``Tape(detect_anomaly=True)`` opens."""
    _ANOMALY[:] = [factory]


def anomaly_mode() -> Any:
    return _ANOMALY[0]()


# -- checks after each op (tg.detect_anomaly) -------------------------------------------------
def set_op_hooks(after_op: Any, after_vjp: Any) -> tuple[Any, Any]:
    """Install ``after_op(prim, inputs, params, out)``, called after every op in this thread,
    and ``after_vjp(node, input_index, gradient)``, called for every gradient backward computes;
    None removes one. Returns the previous pair (to restore on exit)."""
    st = STATE
    prev = (st.after_op, st.after_vjp)
    k = (after_op is not None) - (prev[0] is not None)
    ACTIVE.add(k, hooks=k)
    st.after_op, st.after_vjp = after_op, after_vjp
    return prev


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Inside, this thread's open tapes pause: ops record only on tapes opened inside (gradient
    checkpointing runs a block on a private tape). They resume on exit."""
    st = STATE
    paused = list(st.recording)
    saved = (st.with_tapes, st.auto, st.recording)
    for t in paused:
        t._recording = False
    st.with_tapes, st.auto, st.recording = [], (), weakref.WeakSet()
    try:
        yield
    finally:
        st.with_tapes, st.auto, st.recording = saved
        for t in paused:
            t._recording = True


@contextlib.contextmanager
def recomputation() -> Iterator[None]:
    """Inside, ops run again for a backward that follows at once (gradient checkpointing's
    recomputation of a block): an op whose VJP would recompute an intermediate to save memory
    (attention's probabilities) keeps it instead, since it is freed with the block anyway."""
    st = STATE
    prev = st.recomputing
    st.recomputing = True
    try:
        yield
    finally:
        st.recomputing = prev


def is_recomputing() -> bool:
    """True inside ``recomputation()`` in this thread."""
    return STATE.recomputing


# -- tapes opening and closing (called by Tape) ------------------------------------------------
def set_recording(tape: Any, flag: bool) -> None:
    st = STATE.__dict__  # this thread's fields: one thread-local lookup for the four uses
    tape._recording = flag
    if flag:
        tape._owner = threading.get_ident()
        st["recording"].add(tape)
    else:
        st["recording"].discard(tape)
    auto = []
    for tp in st["with_tapes"]:
        if tp._recording and tp.watch_parameters:
            auto.append(tp)
    st["auto"] = tuple(auto)


def open_with(tape: Any) -> None:
    tape._in_with = True
    STATE.with_tapes.append(tape)
    ACTIVE.add(1)
    set_recording(tape, True)


def close(tape: Any) -> None:
    """Stop ``tape`` recording and, if a ``with`` block opened it, close that."""
    if tape._in_with:
        tape._in_with = False
        try:  # not contextlib.suppress: three Python frames at every close
            STATE.with_tapes.remove(tape)
            ACTIVE.add(-1)
        except ValueError:
            pass
    set_recording(tape, False)
