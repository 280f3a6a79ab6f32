"""The Tape: what it records, how it is opened and closed, and ``gradient``; with ``backward``,
``trace`` and ``stop_gradient``, the user-facing entry points of the engine."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from .._tensor import Parameter, Tensor, _next_tid, _wrap
from ._apply import apply
from ._engine import needed_tids, reverse_pass
from ._gradients import Gradients, TapeFacts
from ._primitive import defprim
from ._record import INPUTS, OUT_DTYPE, OUT_SHAPE, OUT_TID, Node, saved_bytes
from ._request import check_sources, result, source_list, target_seeds
from ._state import anomaly_mode, close, is_recording, open_with, set_recording

_new_tensor = Tensor.__new__


class Tape:
    """Records the ops that run while it is open; ``gradient`` walks the record backwards.

    Use it as a context manager (``with tg.Tape() as tape:``), which also watches every
    trainable Parameter while the block runs (``watch_parameters=False`` turns that off), or
    dfdx-style: ``x = x.trace(tape)`` opens it until ``gradient`` / ``release`` / ``stop`` and
    records every op that a traced tensor reaches; parameters join it when they meet a tensor on
    it. Any number of tapes can be open at once: an op is recorded on each open tape that one of
    its inputs is on.

    A non-persistent tape (the default) answers one ``gradient`` call, freeing each saved array
    as soon as backward has used it; ``Tape(persistent=True)`` answers any number of calls until
    ``release()``. ``Tape(detect_anomaly=True)`` runs its block and its ``gradient`` calls under
    ``tg.detect_anomaly()`` (the first NaN or inf raises, naming the op and the source line).

    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0, 3.0])
    >>> with tg.Tape() as tape:
    ...     tape.watch(x)
    ...     y = (x ** 2).sum()
    >>> tape.gradient(y, x).tolist()
    [2.0, 4.0, 6.0]
    """

    def __init__(
        self, persistent: bool = False, watch_parameters: bool = True, detect_anomaly: bool = False
    ) -> None:
        self.persistent = persistent
        self.watch_parameters = watch_parameters
        # tg.detect_anomaly around the `with` block and around gradient()
        self.detect_anomaly = detect_anomaly
        self._anomaly: Any = None
        self._nodes: list[tuple[Any, ...] | None] = []  # records, see Node
        # watched tensors (their _tapes name this tape); parameters that met the tape are found
        # in the records. Held strongly while the tape records (a traced leaf may have no other
        # holder), weakly once it stops: a watched tensor names the tape, so a strong reference
        # back would be a cycle that keeps an unused tape alive until the garbage collector.
        self._leaves: Any = {}
        self._recording = False
        self._owner = 0  # the thread that opened it (see _state)
        self._in_with = False
        self._used_with = False
        self._released = False

    # -- opening and closing --------------------------------------------------------------------
    def __enter__(self) -> Tape:
        if self._released:
            self._check_live("Tape")
        if self._in_with:
            raise RuntimeError("Tape: this tape is already open in a `with` block")
        self._used_with = True
        open_with(self)
        if self._leaves:  # (most tapes watch only parameters: nothing to hold)
            self._hold_leaves()
        if self.detect_anomaly:
            self._anomaly = anomaly_mode()
            self._anomaly.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        close(self)
        if self._leaves:
            self._hold_leaves()
        if self._anomaly is not None:
            mode, self._anomaly = self._anomaly, None
            mode.__exit__(*exc)

    def stop(self) -> None:
        """Stop recording (a traced tape records until gradient, release or stop)."""
        self.__exit__()

    def _check_live(self, op: str) -> None:
        if self._released:
            raise RuntimeError(
                f"{op}: this tape was released: a non-persistent tape frees what it saved as its "
                "first gradient() call uses it, or release() was called. Open a new tg.Tape(), "
                "or tg.Tape(persistent=True) to call gradient() several times (one backward "
                "pass each), and call tape.release() when done."
            )

    @property
    def recording(self) -> bool:
        """Whether ops that touch this tape are being recorded now."""
        return self._recording

    @property
    def released(self) -> bool:
        """Whether the tape has freed its record (no more gradient calls)."""
        return self._released

    # -- watching -----------------------------------------------------------------------------
    def watch(self, *items: Any) -> None:
        """Put tensors, or every trainable parameter of modules, on this tape as leaves.

        Outside a ``with`` block this opens the tape (dfdx style) until ``gradient``,
        ``release`` or ``stop``. Only float tensors can be watched.
        """
        self._check_live("Tape.watch")
        for it in items:
            if isinstance(it, Tensor):
                self._watch_tensor(it, "Tape.watch")
            elif hasattr(it, "parameters") and callable(it.parameters):
                for p in it.parameters():
                    if p.requires_grad:
                        self._watch_tensor(p, "Tape.watch")
            elif isinstance(it, (list, tuple)):
                self.watch(*it)
            else:
                raise TypeError(
                    f"Tape.watch: cannot watch a {type(it).__name__}; pass Tensors or Modules "
                    "(convert arrays with tg.tensor(...) first)"
                )
        if not self._recording:
            set_recording(self, True)
            self._hold_leaves()

    def _hold_leaves(self) -> None:
        # an empty dict holds nothing: it stays (most tapes watch only parameters, which the
        # records find, so this is the common case and costs nothing)
        if self._recording != (type(self._leaves) is dict) and self._leaves:
            self._leaves = (dict if self._recording else weakref.WeakValueDictionary)(
                self._leaves.items()
            )

    def _watch_tensor(self, t: Tensor, op: str) -> None:
        if t._data.dtype.kind not in "fc":
            raise TypeError(
                f"{op}: a tensor of dtype {t.dtype} (shape {tuple(t.shape)}) cannot have a "
                "gradient; only float tensors can be watched. Cast it first with "
                "x.astype(tg.float32) if it holds real values (integer token ids never need one)"
            )
        if t._tid is None:
            t._tid = _next_tid()
        if self not in t._tapes:
            t._tapes = (*(tp for tp in t._tapes if not tp._released), self)
        self._leaves[t._tid] = t

    # -- gradient -----------------------------------------------------------------------------
    def gradient(
        self,
        target: Any,
        sources: Any = None,
        output_gradients: Any = None,
        into: Gradients | None = None,
        on_ready: Callable[[Tensor, Any], None] | None = None,
    ) -> Any:
        """Differentiate ``target`` with respect to ``sources``.

        target: a scalar Tensor, a list/tuple of Tensors (their sum is differentiated), or a
        non-scalar Tensor with ``output_gradients`` of its shape (a vector-Jacobian product;
        one per target for a list). Each target must be on this tape (computed while it was
        open from tensors on it); otherwise an error says how to fix it.
        sources: None (a Gradients for every leaf that took part), a Tensor (a Tensor), a
        list/tuple of Tensors (a list/tuple, same order), or a Module (a Gradients restricted to
        its parameters; ``.missing(module)`` names any that got none and why). A tensor source
        on the tape that the target does not depend on gets zeros (as in JAX); one that is not on
        the tape at all (never watched) is an error rather than a silent zero.
        into: a Gradients to accumulate into (micro-batches); it is returned.
        on_ready: called as ``on_ready(leaf, array)`` as soon as a leaf's gradient is final,
        during the walk (the last op that used the leaf has been passed), with the gradient's
        array: data-parallel training starts reducing a bucket of gradients across processes
        while backward goes on. Read it, or copy it; never write into it (it may be shared
        with another gradient, or be a read-only seed).

        One reverse walk over the record. A non-persistent tape frees each node as soon as it
        is passed and is released at the end; a persistent one keeps everything.

        >>> import tapegrad as tg
        >>> x = tg.tensor([1.0, 2.0])
        >>> with tg.Tape() as tape:
        ...     tape.watch(x)
        ...     y = x * 3
        >>> tape.gradient(y, x, output_gradients=tg.tensor([1.0, 10.0])).tolist()
        [3.0, 30.0]
        """
        if self._released:
            self._check_live("Tape.gradient")
        seeds = target_seeds(self, target, output_gradients)
        src_list, module_req = source_list(sources, into)
        near = []  # what an outer tape might hold
        for x in (target, output_gradients):
            for t in x if isinstance(x, (list, tuple)) else (x,):
                if isinstance(t, Tensor):
                    near.append(t)
        if self.detect_anomaly and self._anomaly is None:  # outside the `with` block
            with anomaly_mode():
                results, leaves, facts = self._run(seeds, src_list, not module_req, on_ready, near)
        else:
            results, leaves, facts = self._run(seeds, src_list, not module_req, on_ready, near)
        return result(sources, src_list, module_req, results, leaves, facts, into)

    def _run(
        self,
        seeds: dict[int, Tensor],
        src_list: list[Tensor] | None,
        check: bool = False,
        on_ready: Callable[[Tensor, Any], None] | None = None,
        near: Any = (),
    ) -> tuple[dict[int, Tensor], dict[int, Tensor], TapeFacts]:
        """The reverse walk from ``seeds``: ``{tid: gradient}`` for the leaves (and non-leaf
        sources) reached, the leaves, and facts for the missing ones. With ``check``, tensor
        sources must be on this tape (an unwatched one would silently get zeros)."""
        info, leaves = self._scan()  # before the walk: a non-persistent backward clears the tape
        if check and src_list is not None:
            check_sources(self, src_list, info)
        facts, ready = TapeFacts(self, leaves), None
        if on_ready is not None:
            ready = (leaves, lambda tid, g: on_ready(leaves[tid], getattr(g, "_data", g)))
        if src_list is None:
            needed: Any = info  # every tensor on the tape
            keep: set[int] = set()
        else:  # only what depends on a source needs a gradient
            srcs = {s._tid for s in src_list if s._tid is not None and s._tid in info}
            needed = needed_tids(self._nodes, srcs)
            keep = {tid for tid in srcs if tid not in leaves}
        free = not self.persistent
        was_recording = self._recording
        if was_recording:  # backward ops are never recorded on the tape they walk
            set_recording(self, False)
        # Another tape recording now can differentiate this pass (higher order) only if it
        # holds a target, an output gradient or a leaf of this one: then it runs on Tensors.
        me = threading.get_ident()
        tensors = is_recording() and any(
            tp._recording and tp._owner == me for t in (*near, *leaves.values()) for tp in t._tapes
        )
        try:
            if not tensors:
                seeds = {tid: g._data for tid, g in seeds.items()}
            out = reverse_pass(self._nodes, seeds, needed, keep, info, free, tensors, ready)
        finally:
            if free:
                self.release()
            else:
                if was_recording:
                    set_recording(self, True)
                self._hold_leaves()
        if not tensors:
            for tid, a in out.items():  # _wrap written out: no frame per gradient
                t = _new_tensor(Tensor)
                t._data, t._tapes, t._tid, t._version = a, (), None, 0
                out[tid] = t
        return out, leaves, facts

    def _scan(self) -> tuple[dict[int, tuple[Any, Any]], dict[int, Tensor]]:
        """``({tid: (shape, dtype)} for every tensor on this tape, {tid: tensor} for its leaves)``.

        The leaves are the watched tensors plus, when the tape watches parameters, every
        trainable Parameter that one of its nodes took as input.
        """
        info: dict[int, tuple[Any, Any]] = {}
        leaves = dict(self._leaves.items())
        wp = self.watch_parameters
        for rec in self._nodes:
            if rec is None:
                continue
            info[rec[OUT_TID]] = (rec[OUT_SHAPE], rec[OUT_DTYPE])
            if wp:
                for e in rec[INPUTS]:
                    if e is not None and type(e) is not int:
                        leaves[e._tid] = e
        for tid, t in leaves.items():
            info[tid] = (t._data.shape, t._data.dtype)
        return info, leaves

    # -- release --------------------------------------------------------------------------------
    def release(self) -> None:
        """Free everything the tape holds; later gradient calls raise."""
        if self._recording or self._in_with or self._anomaly is not None:
            self.__exit__()
        self._released = True
        self._nodes = []
        if self._leaves:
            watched, self._leaves = list(self._leaves.values()), {}
            for t in watched:
                t._tapes = tuple(tp for tp in t._tapes if tp is not self)

    # -- reading the record (the hooks of summary, to_dot and explain: tapegrad/_inspect.py) ---
    @property
    def nodes(self) -> list[Node]:
        """The recorded ops, in execution order."""
        return [Node(r) for r in self._nodes if r is not None]

    @property
    def leaves(self) -> list[Tensor]:
        """The tensors gradients flow back to: watched tensors and parameters that met it."""
        return list(self._scan()[1].values())

    def bytes_held(self) -> int:
        """Bytes of the arrays the record keeps alive for backward."""
        return saved_bytes((r for r in self._nodes if r is not None), set())

    def __repr__(self) -> str:
        state = "released" if self._released else ("recording" if self._recording else "closed")
        return f"Tape({len(self.nodes)} ops, {state}{', persistent' if self.persistent else ''})"


def stop_gradient(x: Tensor) -> Tensor:
    """The same values on no tape: gradients do not flow through (``x.detach()``).

    >>> import tapegrad as tg
    >>> x = tg.tensor([2.0])
    >>> with tg.Tape() as tape:
    ...     tape.watch(x)
    ...     y = (x * tg.stop_gradient(x)).sum()
    >>> tape.gradient(y, x).tolist()
    [2.0]
    """
    return _wrap(x._data)


def backward(t: Tensor, output_gradients: Any = None) -> Gradients:
    """``tape.gradient(t)`` for the one tape ``t`` is on, as a Gradients of every leaf.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0, 2.0]))
    >>> with tg.Tape():
    ...     loss = (w * w).sum()
    >>> loss.backward()[w].tolist()
    [2.0, 4.0]
    """
    live = [tp for tp in t._tapes if not tp._released]
    if not live:
        raise RuntimeError(
            f"backward(): the tape this tensor (shape {tuple(t.shape)}) was on has been "
            "released by an earlier gradient() call; use tg.Tape(persistent=True) to "
            "differentiate it more than once"
            if t._tapes
            else f"backward(): this tensor (shape {tuple(t.shape)}) is on no tape: no op that "
            "produced it was recorded. Compute it inside `with tg.Tape() as tape:` (parameters "
            "are watched automatically) or trace an input with x.trace(tape)."
        )
    if len(live) > 1:
        raise RuntimeError(
            f"backward(): this tensor is on {len(live)} tapes ({', '.join(map(repr, live))}); "
            "say which with tape.gradient(loss)"
        )
    return live[0].gradient(t, output_gradients=output_gradients)


def trace(x: Tensor, tape: Tape | None = None) -> Tensor:
    """A new leaf with ``x``'s values on ``tape`` (dfdx's ``x.trace(grads)``); opens the tape.

    The new leaf is an identity of ``x`` recorded on ``x``'s own tapes, so traces nest (an
    outer tape sees through an inner trace: higher order). A Parameter is watched and returned.

    >>> import tapegrad as tg
    >>> tape = tg.Tape()
    >>> x = tg.tensor([1.0, 2.0]).trace(tape)
    >>> y = (x * x).sum()
    >>> tape.gradient(y, x).tolist()
    [2.0, 4.0]
    """
    if tape is None:
        raise TypeError(
            "trace: tg.trace(x, tape) / x.trace(tape) puts x on a tape (here the tape is "
            "missing); numpy's and PyTorch's trace(x), the sum of the diagonal, is "
            "tg.linalg.trace(x)"
        )
    if not isinstance(tape, Tape):
        raise TypeError(f"trace: expected a tg.Tape, got {type(tape).__name__}")
    if x._data.dtype.kind not in "fc":
        tape._watch_tensor(x, "trace")  # raises the integer-dtype error
    if isinstance(x, Parameter):
        tape.watch(x)
        return x
    t = apply(_IDENTITY, x)  # recorded on x's own tapes, so traces nest (higher order)
    tape.watch(t)
    return t


_IDENTITY = defprim("identity", lambda x: x, lambda xp, g, ans, x: g)
