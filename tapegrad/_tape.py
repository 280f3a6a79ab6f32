"""Primitives, the tape, and the backward engine.

Every differentiable operation bottoms out in ``apply(prim, *inputs, **params)``. ``apply`` runs
the primitive's forward on arrays and, when at least one input is on a recording tape, appends a
``Node`` to each such tape. The tape's node list is in execution order, which is a topological
order, so backward is one reverse walk (no recursion).

VJP rules are written with tapegrad ops on Tensors. When no outer tape records, those ops take
the untraced fast path; when an outer tape is open during ``gradient``, they are recorded on it,
which is how higher-order derivatives work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ._backend import np
from ._tensor import Parameter, Tensor, _next_tid, _wrap

OUT = -1  # in a primitive's ``save`` tuple: keep the output for the VJP

# Tapes opened by ``with``, in order; trainable Parameters are on those with auto-watch.
_WITH_TAPES: list[Tape] = []
_GRAD_ENABLED = True
# The module path stack, pushed by Module.__call__, so nodes can say which layer made them.
_SCOPE: list[str] = []


class Primitive:
    """A differentiable primitive: its forward on arrays and one VJP per input.

    ``vjps[i](g, ans, *args, **params)`` returns the gradient for input ``i`` given the output
    gradient ``g``; ``ans`` and ``args`` are Tensors, and only what ``save`` lists is passed
    (the rest is None), so a VJP cannot hold more memory than it declares.
    """

    __slots__ = ("name", "fwd", "vjps", "save", "save_out", "save_args", "nondiff")

    def __init__(
        self,
        name: str,
        fwd: Callable[..., Any],
        vjps: tuple[Callable[..., Any] | None, ...],
        save: tuple[int, ...],
    ) -> None:
        self.name = name
        self.fwd = fwd
        self.vjps = vjps
        self.save = save
        self.save_out = OUT in save
        self.save_args = tuple(i for i in save if i != OUT)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


def defprim(
    name: str,
    fwd: Callable[..., Any],
    vjp: Callable[..., Any] | None | tuple[Callable[..., Any] | None, ...] = None,
    save: tuple[int, ...] = (),
) -> Primitive:
    """Register a primitive. ``vjp`` is one function (one input) or a tuple (one per input).

    This is the stable extension point: a user-defined primitive gets gradients, higher-order
    derivatives and tape inspection like the built-in ones. Check it with
    ``tapegrad.testing.check_grads``.
    """
    vjps = vjp if isinstance(vjp, tuple) else (vjp,)
    if name in PRIMITIVES:
        raise ValueError(f"defprim: a primitive named {name!r} is already registered")
    p = Primitive(name, fwd, vjps, save)
    PRIMITIVES[name] = p
    return p


class Node:
    """One recorded op on one tape."""

    __slots__ = (
        "prim",
        "inputs",
        "out_tid",
        "out_shape",
        "out_dtype",
        "ans",
        "args",
        "params",
        "versions",
        "scope",
    )

    def __init__(self, prim, inputs, out, args, params, versions, scope):  # type: ignore[no-untyped-def]
        self.prim = prim
        self.inputs = inputs  # per input: (tid, shape, dtype) when on this tape, else None
        self.out_tid = out._tid
        self.out_shape = out._data.shape
        self.out_dtype = out._data.dtype
        self.ans = out if prim.save_out else None
        self.args = args  # saved inputs (Tensors or constants), None where not saved
        self.params = params
        self.versions = versions
        self.scope = scope

    def saved_bytes(self) -> int:
        seen: set[int] = set()
        n = 0
        for t in (self.ans, *self.args):
            if isinstance(t, Tensor) and id(t._data) not in seen:
                seen.add(id(t._data))
                n += t._data.nbytes
        return n


# --------------------------------------------------------------------------------------------
# apply: the one door every op goes through
# --------------------------------------------------------------------------------------------


def apply(prim: Primitive, *inputs: Any, **params: Any) -> Tensor:
    """Run ``prim`` on ``inputs`` (Tensors or constants) and record it where needed."""
    arrays = [x._data if isinstance(x, Tensor) else x for x in inputs]
    out = _wrap(prim.fwd(*arrays, **params))
    if _WITH_TAPES or _any_taped(inputs):
        _record(prim, inputs, params, out)
    return out


def _any_taped(inputs: tuple[Any, ...]) -> bool:
    for x in inputs:
        if isinstance(x, Tensor) and x._tapes:
            return True
    return False


def _record(prim: Primitive, inputs: tuple[Any, ...], params: dict[str, Any], out: Tensor) -> None:
    if not _GRAD_ENABLED or out._data.dtype.kind not in "fc":
        return
    tapes: list[Tape] = []
    for x in inputs:
        if not isinstance(x, Tensor):
            continue
        for tp in x._tapes:
            if tp._recording and tp not in tapes:
                tapes.append(tp)
        if x._is_param and x.requires_grad:  # type: ignore[attr-defined]
            for tp in _WITH_TAPES:
                if tp._auto_params and tp._recording and tp not in tapes:
                    tapes.append(tp)
    if not tapes:
        return
    out._tid = _next_tid()
    out._tapes = tuple(tapes)
    save_args = prim.save_args
    args = tuple(x if i in save_args else None for i, x in enumerate(inputs))
    versions = tuple(
        (x, x._version)
        for x in (*(inputs[i] for i in save_args), out if prim.save_out else None)
        if isinstance(x, Tensor)
    )
    scope = _SCOPE[-1] if _SCOPE else None
    for tp in tapes:
        metas = []
        for x in inputs:
            if isinstance(x, Tensor) and tp._is_on(x) and x._data.dtype.kind in "fc":
                metas.append((x._tid, x._data.shape, x._data.dtype))
            else:
                metas.append(None)
        tp._nodes.append(Node(prim, tuple(metas), out, args, params, versions, scope))


# --------------------------------------------------------------------------------------------
# Gradients: a value, keyed by tensor identity
# --------------------------------------------------------------------------------------------


class Gradients:
    """Gradients keyed by tensor identity: ``g[p]``, ``g.get(p)``, ``items()``, ``+``, ``*``.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, 4.0]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> g = tape.gradient(loss)
    >>> g[w].tolist(), round(g.global_norm(), 4)
    ([6.0, 8.0], 10.0)
    """

    __slots__ = ("_d", "missing")

    def __init__(self, pairs: Iterable[tuple[Tensor, Tensor]] = (), missing: dict | None = None):
        self._d: dict[int, tuple[Tensor, Tensor]] = {}
        for t, g in pairs:
            self._d[id(t)] = (t, g)
        # tensor -> reason, for sources that were asked for and got no gradient
        self.missing: dict[Tensor, str] = dict(missing or {})

    def __getitem__(self, t: Tensor) -> Tensor:
        try:
            return self._d[id(t)][1]
        except KeyError:
            name = getattr(t, "name", None) or f"tensor of shape {t.shape}"
            why = self.missing.get(t)
            raise KeyError(
                f"no gradient for {name}" + (f": {why}" if why else "")
            ) from None

    def get(self, t: Tensor, default: Any = None) -> Any:
        e = self._d.get(id(t))
        return default if e is None else e[1]

    def __contains__(self, t: object) -> bool:
        return id(t) in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[Tensor]:
        return (t for t, _ in self._d.values())

    def keys(self) -> list[Tensor]:
        return [t for t, _ in self._d.values()]

    def values(self) -> list[Tensor]:
        return [g for _, g in self._d.values()]

    def items(self) -> list[tuple[Tensor, Tensor]]:
        return list(self._d.values())

    def __add__(self, other: Gradients) -> Gradients:
        if not isinstance(other, Gradients):
            return NotImplemented
        out = Gradients(self._d.values())
        for t, g in other._d.values():
            e = out._d.get(id(t))
            out._d[id(t)] = (t, g if e is None else e[1] + g)
        out.missing = {t: r for t, r in {**self.missing, **other.missing}.items() if t not in out}
        return out

    def __mul__(self, s: float) -> Gradients:
        if isinstance(s, Gradients):
            return NotImplemented
        return Gradients(((t, g * s) for t, g in self._d.values()), self.missing)

    __rmul__ = __mul__

    def __truediv__(self, s: float) -> Gradients:
        return self * (1.0 / s)

    def _accumulate(self, other: Gradients) -> None:
        for t, g in other._d.values():
            e = self._d.get(id(t))
            self._d[id(t)] = (t, g if e is None else e[1] + g)
        for t, r in other.missing.items():
            if t not in self:
                self.missing[t] = r

    def global_norm(self) -> float:
        """The L2 norm of all gradients together, as a Python float."""
        total = 0.0
        for _, g in self._d.values():
            a = g._data
            total += float((a * a).sum())
        return float(np.sqrt(total))

    def clip_by_global_norm(self, max_norm: float) -> Gradients:
        """A copy scaled so that its global norm is at most ``max_norm`` (as torch's clip_grad_norm_)."""
        if max_norm <= 0:
            raise ValueError(f"clip_by_global_norm: max_norm must be > 0, got {max_norm}")
        norm = self.global_norm()
        scale = min(1.0, max_norm / (norm + 1e-6))
        return self if scale >= 1.0 else self * scale

    def named(self, module: Any) -> dict[str, Any]:
        """``{dotted_name: numpy array}`` for the parameters of ``module`` that have a gradient."""
        out = {}
        for name, p in module.named_parameters():
            g = self.get(p)
            if g is not None:
                out[name] = g.numpy()
        return out

    def __repr__(self) -> str:
        names = [getattr(t, "name", None) or f"<{t.shape}>" for t, _ in self._d.values()]
        miss = f", {len(self.missing)} missing" if self.missing else ""
        return f"Gradients({len(self._d)} tensors: {', '.join(map(str, names[:6]))}{'...' if len(names) > 6 else ''}{miss})"


# --------------------------------------------------------------------------------------------
# The tape
# --------------------------------------------------------------------------------------------

_RELEASED_MSG = (
    "Tape.gradient: this tape was released after its first gradient call (a non-persistent "
    "tape frees what it saved as backward uses it). Open it with tg.Tape(persistent=True) to "
    "call gradient() several times, and call tape.release() when done."
)


class Tape:
    """Records the ops that run while it is open; ``gradient`` walks the record backwards.

    Use it as a context manager (``with tg.Tape() as tape:``), which also watches every
    trainable Parameter, or dfdx-style: ``x = x.trace(tape)`` opens it and records every op
    that a traced tensor reaches; parameters join the tape when they meet a tensor on it.

    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0, 3.0])
    >>> with tg.Tape() as tape:
    ...     tape.watch(x)
    ...     y = (x ** 2).sum()
    >>> tape.gradient(y, x).tolist()
    [2.0, 4.0, 6.0]
    """

    def __init__(self, persistent: bool = False, watch_parameters: bool = True) -> None:
        self.persistent = persistent
        self.watch_parameters = watch_parameters
        self._nodes: list[Node | None] = []
        self._leaves: dict[int, Tensor] = {}  # watched tensors and parameters that met the tape
        self._watched: list[Tensor] = []
        self._recording = False
        self._auto_params = False
        self._released = False
        self._in_with = False
        self._calls = 0

    # -- opening and closing --------------------------------------------------------------------
    def __enter__(self) -> Tape:
        if self._released:
            raise RuntimeError("Tape: this tape was released; open a new tg.Tape()")
        self._recording = True
        self._in_with = True
        self._auto_params = self.watch_parameters
        _WITH_TAPES.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._recording = False
        self._in_with = False
        self._auto_params = False
        with contextlib.suppress(ValueError):
            _WITH_TAPES.remove(self)

    def stop(self) -> None:
        """Stop recording (a traced tape records until gradient, release or stop)."""
        self.__exit__()

    @property
    def recording(self) -> bool:
        return self._recording

    def _is_on(self, x: Tensor) -> bool:
        if self in x._tapes:
            return True
        if x._is_param and x.requires_grad and self.watch_parameters:  # type: ignore[attr-defined]
            # auto-watched inside `with`, or a parameter meeting the tape (dfdx style)
            self._leaves[x._tid] = x  # type: ignore[index]
            return True
        return False

    # -- watching -----------------------------------------------------------------------------
    def watch(self, *items: Any) -> None:
        """Put tensors (or every parameter of modules) on this tape, as leaves.

        Outside a ``with`` block this opens the tape (dfdx style) until ``gradient``,
        ``release`` or ``stop``.
        """
        if self._released:
            raise RuntimeError("Tape.watch: this tape was released; open a new tg.Tape()")
        for it in items:
            if isinstance(it, Tensor):
                self._watch_tensor(it)
            elif hasattr(it, "parameters") and callable(it.parameters):
                for p in it.parameters():
                    self._watch_tensor(p)
            elif isinstance(it, (list, tuple)):
                self.watch(*it)
            else:
                raise TypeError(
                    f"Tape.watch: cannot watch a {type(it).__name__}; pass Tensors or Modules "
                    "(convert arrays with tg.tensor(...) first)"
                )
        self._recording = True

    def _watch_tensor(self, t: Tensor) -> None:
        if t._data.dtype.kind not in "fc":
            raise TypeError(
                f"Tape.watch: a tensor of dtype {t.dtype} (shape {t.shape}) cannot have a "
                "gradient; only float tensors can be watched. Cast it first with "
                "x.astype(tg.float32) if it holds real values (integer token ids never need one)"
            )
        if t._tid is None:
            t._tid = _next_tid()
        if self not in t._tapes:
            t._tapes = tuple(tp for tp in t._tapes if not tp._released) + (self,)
            self._watched.append(t)
        self._leaves[t._tid] = t

    # -- gradient -----------------------------------------------------------------------------
    def gradient(
        self,
        target: Any,
        sources: Any = None,
        output_gradients: Any = None,
        into: Gradients | None = None,
    ) -> Any:
        """Differentiate ``target`` with respect to ``sources``.

        target: a scalar Tensor, a list/tuple of Tensors (their sum is differentiated), or a
        non-scalar Tensor with ``output_gradients`` (a vector-Jacobian product).
        sources: None (a Gradients for every leaf that took part), a Tensor, a list/tuple of
        Tensors (gradients shaped the same way), or a Module (a Gradients for its parameters,
        with ``.missing`` naming any that got none and why).
        into: a Gradients to accumulate into (micro-batches); returned.
        """
        if self._released:
            raise RuntimeError(_RELEASED_MSG)
        from .nn._module import Module  # noqa: PLC0415 - nn is above the tape

        targets = list(target) if isinstance(target, (list, tuple)) else [target]
        if output_gradients is not None:
            ogs = list(output_gradients) if isinstance(output_gradients, (list, tuple)) else [output_gradients]
            if len(ogs) != len(targets):
                raise ValueError(
                    f"Tape.gradient: {len(targets)} targets but {len(ogs)} output_gradients"
                )
        else:
            ogs = [None] * len(targets)

        # what is asked for
        module_req = isinstance(sources, Module)
        if sources is None:
            src_list = None
        elif module_req:
            src_list = [p for p in sources.parameters()]
        elif isinstance(sources, Tensor):
            src_list = [sources]
        elif isinstance(sources, (list, tuple)):
            src_list = list(sources)
            for s in src_list:
                if not isinstance(s, Tensor):
                    raise TypeError(
                        f"Tape.gradient: sources must be Tensors or a Module, got {type(s).__name__}"
                    )
        else:
            raise TypeError(
                "Tape.gradient: sources must be None, a Tensor, a list/tuple of Tensors or a "
                f"Module, got {type(sources).__name__}"
            )

        grads: dict[int, Tensor] = {}
        seeded = False
        for t, og in zip(targets, ogs):
            if not isinstance(t, Tensor):
                raise TypeError(f"Tape.gradient: target must be a Tensor, got {type(t).__name__}")
            if og is None:
                if t._data.size != 1:
                    raise ValueError(
                        f"Tape.gradient: target has shape {t.shape}; a non-scalar target needs "
                        "output_gradients= (a tensor of the same shape: the vector of the "
                        "vector-Jacobian product), or reduce it first, e.g. loss.sum() or loss.mean()"
                    )
                seed = _wrap(np.ones_like(t._data))
            else:
                seed = og if isinstance(og, Tensor) else Tensor(og, dtype=t.dtype)
                if seed.shape != t.shape:
                    raise ValueError(
                        f"Tape.gradient: output_gradients has shape {seed.shape}, target has "
                        f"shape {t.shape}; they must match"
                    )
            if t._tid is not None and (self in t._tapes or t._tid in self._leaves):
                prev = grads.get(t._tid)
                grads[t._tid] = seed if prev is None else prev + seed
                seeded = True
        if not seeded and src_list is None:
            raise ValueError(
                "Tape.gradient: the target is not on this tape: no op that produced it was "
                "recorded here. Compute it inside `with tape:` from watched tensors or "
                "parameters, or trace an input with x.trace(tape)."
            )

        src_tids = None if src_list is None else {s._tid for s in src_list if s._tid is not None}
        nodes = self._nodes
        needed = self._needed(src_tids) if src_tids is not None else None
        results: dict[int, Tensor] = {}
        was_recording = self._recording
        self._recording = False  # backward ops are never recorded on the tape they walk
        free = not self.persistent
        try:
            for k in range(len(nodes) - 1, -1, -1):
                node = nodes[k]
                if node is None:
                    continue
                tid = node.out_tid
                if src_tids is not None and tid in src_tids:
                    g = grads.get(tid)
                    if g is not None:
                        results[tid] = g
                    g = grads.pop(tid, None)
                else:
                    g = grads.pop(tid, None)
                if g is None:
                    if free:
                        nodes[k] = None
                    continue
                self._backward_node(node, g, grads, needed)
                if free:
                    nodes[k] = None
        finally:
            self._recording = was_recording and not free
            if free:
                self._release()
        self._calls += 1
        results.update(grads)  # leaves keep their gradients in `grads`

        if src_list is None:
            pairs = [(t, results[tid]) for tid, t in self._leaves.items() if tid in results]
            out = Gradients(pairs)
            out.missing = {
                t: "it met this tape but no path leads from it to the target"
                for tid, t in self._leaves.items()
                if tid not in results
            }
        elif module_req:
            pairs = []
            missing = {}
            for p in src_list:
                g = results.get(p._tid) if p._tid is not None else None
                if g is None:
                    missing[p] = self._why_missing(p)
                else:
                    pairs.append((p, g))
            out = Gradients(pairs, missing)
        else:
            zs = [self._source_grad(s, results) for s in src_list]
            out = zs[0] if isinstance(sources, Tensor) else type(sources)(zs)
        if into is not None:
            if not isinstance(out, Gradients):
                raise TypeError("Tape.gradient(into=...): needs sources=None or a Module")
            into._accumulate(out)
            return into
        return out

    @staticmethod
    def _source_grad(s: Tensor, results: dict[int, Tensor]) -> Tensor:
        g = results.get(s._tid) if s._tid is not None else None
        # A source that does not reach the target has a zero derivative (as in JAX).
        return g if g is not None else _wrap(np.zeros_like(s._data))

    def _needed(self, src_tids: set[int]) -> set[int]:
        """The tids that depend on a source: only those need gradients."""
        needed = set(src_tids)
        for node in self._nodes:
            if node is None:
                continue
            for m in node.inputs:
                if m is not None and m[0] in needed:
                    needed.add(node.out_tid)
                    break
        return needed

    def _backward_node(
        self, node: Node, g: Tensor, grads: dict[int, Tensor], needed: set[int] | None
    ) -> None:
        for x, v in node.versions:
            if x._version != v:
                name = getattr(x, "name", None) or f"a tensor of shape {x.shape}"
                raise RuntimeError(
                    f"Tape.gradient: {name} was modified in place after op '{node.prim.name}' "
                    "saved it for the backward pass (its version went from "
                    f"{v} to {x._version}). Compute the gradient before updating it in place, "
                    "or use out-of-place ops (x = x + 1 rather than x[...] = ...)."
                )
        prim = node.prim
        for i, meta in enumerate(node.inputs):
            if meta is None:
                continue
            tid, shape, dtype = meta
            if needed is not None and tid not in needed:
                continue
            vjp = prim.vjps[i]
            if vjp is None:
                continue
            gi = vjp(g, node.ans, *node.args, **node.params)
            if gi is None:
                continue
            if not isinstance(gi, Tensor):
                gi = _wrap(gi)
            if gi._data.shape != shape:
                gi = _unbroadcast(gi, shape, prim.name)
            if gi._data.dtype != dtype:
                gi = gi.astype(dtype)
            prev = grads.get(tid)
            grads[tid] = gi if prev is None else prev + gi

    def _why_missing(self, p: Tensor) -> str:
        if p._is_param and not p.requires_grad:  # type: ignore[attr-defined]
            return "it is frozen (requires_grad=False)"
        if p._tid is None or p._tid not in self._leaves:
            if p._is_param and not self.watch_parameters and p not in self._watched:
                return (
                    "the tape was opened with watch_parameters=False and never watched it "
                    "(tape.watch(param) or tape.watch(module))"
                )
            return (
                "it never met this tape: it was not used in the forward pass, or used only by ops "
                "whose inputs were on no open tape (in dfdx style, trace that branch's input with "
                "x.trace(tape), or open the tape with `with tg.Tape() as tape:`)"
            )
        return (
            "it met this tape but no path leads from it to the target (its branch does not "
            "reach the loss, or the path was cut by stop_gradient/detach/no_grad)"
        )

    def missing(self, module: Any, grads: Gradients) -> dict[str, str]:
        """``{dotted_name: reason}`` for the parameters of ``module`` that got no gradient."""
        out = {}
        for name, p in module.named_parameters():
            if p not in grads:
                out[name] = grads.missing.get(p) or self._why_missing(p)
        return out

    # -- release --------------------------------------------------------------------------------
    def _release(self) -> None:
        self._released = True
        self._recording = False
        self._nodes = []
        for t in self._watched:
            t._tapes = tuple(tp for tp in t._tapes if tp is not self)
        self._watched = []

    def release(self) -> None:
        """Free everything the tape holds; later gradient calls raise."""
        self.__exit__()
        self._release()

    # -- inspection (see _inspect.py) -----------------------------------------------------------
    def summary(self) -> str:
        from ._inspect import summary  # noqa: PLC0415

        return summary(self)

    def to_dot(self) -> str:
        from ._inspect import to_dot  # noqa: PLC0415

        return to_dot(self)

    def explain(self, target: Tensor, source: Tensor) -> str:
        from ._inspect import explain  # noqa: PLC0415

        return explain(self, target, source)

    @property
    def nodes(self) -> list[Node]:
        return [n for n in self._nodes if n is not None]

    def bytes_held(self) -> int:
        return sum(n.saved_bytes() for n in self.nodes)

    def __repr__(self) -> str:
        state = "released" if self._released else ("recording" if self._recording else "closed")
        return f"Tape({len(self.nodes)} ops, {state}{', persistent' if self.persistent else ''})"


def _unbroadcast(g: Tensor, shape: tuple[int, ...], opname: str) -> Tensor:
    """Sum ``g`` back to ``shape``: broadcasting is undone here, once, for every primitive."""
    from .ops._reduce import sum as _sum  # noqa: PLC0415

    lead = g.ndim - len(shape)
    if lead < 0:
        raise AssertionError(f"{opname}: gradient of shape {g.shape} cannot reduce to {shape}")
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1
    )
    if axes:
        g = _sum(g, axis=axes, keepdims=True)
    if g.shape != shape:
        from .ops._shape import reshape  # noqa: PLC0415

        g = reshape(g, shape)
    return g


# --------------------------------------------------------------------------------------------
# Switches and the backward() shortcut
# --------------------------------------------------------------------------------------------


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
    global _GRAD_ENABLED
    prev = _GRAD_ENABLED
    _GRAD_ENABLED = False
    try:
        yield
    finally:
        _GRAD_ENABLED = prev


def is_grad_enabled() -> bool:
    return _GRAD_ENABLED


def stop_gradient(x: Tensor) -> Tensor:
    """The same values on no tape: gradients do not flow through (``x.detach()``)."""
    return _wrap(x._data)


def backward(t: Tensor, output_gradients: Any = None) -> Gradients:
    """``tape.gradient(t)`` for the one tape ``t`` is on, as a Gradients of every leaf."""
    live = [tp for tp in t._tapes if not tp._released]
    if not live:
        raise RuntimeError(
            f"backward(): this tensor (shape {t.shape}) is on no tape: no op that produced it was "
            "recorded. Compute it inside `with tg.Tape() as tape:` (parameters are watched "
            "automatically) or trace an input with x.trace(tape)."
        )
    if len(live) > 1:
        raise RuntimeError(
            f"backward(): this tensor is on {len(live)} tapes ({', '.join(map(repr, live))}); "
            "say which with tape.gradient(loss)"
        )
    return live[0].gradient(t, output_gradients=output_gradients)


def trace(x: Tensor, tape: Tape) -> Tensor:
    """A new leaf with ``x``'s values on ``tape`` (dfdx's ``x.trace(grads)``); opens the tape."""
    if isinstance(x, Parameter):
        tape.watch(x)
        return x
    t = apply(_IDENTITY, x)  # recorded on x's own tapes, so traces nest (higher order)
    tape.watch(t)
    return t


_IDENTITY = defprim("identity", lambda x: x, lambda g, ans, x: g)
