"""Primitives, the tape, and the backward engine.

Every differentiable operation bottoms out in ``apply(prim, *inputs, **params)``. ``apply`` runs
the primitive's forward on arrays and, when at least one input is on a recording tape, appends
one record of the op (a tuple, read through ``Node``) to each such tape; tapes that record the
same op share the record. A tape's record is in execution order, which is a topological order,
so backward is one reverse walk (no recursion) that frees each record as it passes it.

VJP rules are written with tapegrad ops on Tensors. When no outer tape records, those ops take
the untraced fast path; when an outer tape is open during ``gradient``, they are recorded on it,
which is how higher-order derivatives work.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ._backend import np
from ._tensor import Parameter, Tensor, _next_tid, _wrap

OUT = -1  # in a primitive's ``save`` tuple: keep the output for the VJP

# Tapes opened by ``with``, in order of opening.
_WITH_TAPES: list[Tape] = []
# The tapes that watch every trainable Parameter right now (open by ``with``, recording,
# watch_parameters=True); a tuple kept in sync so ``_record`` reads one global.
_AUTO: tuple[Tape, ...] = ()
_GRAD_ENABLED = True
# The module path stack, pushed by Module.__call__, so nodes can say which layer made them.
_SCOPE: list[str] = []
# While not None, ``apply`` appends (prim, inputs, params, out) for every call (tg.compile).
_CAPTURE: list[Any] | None = None
# The tapes recording right now, however they were opened. While none is, nothing a backward
# pass computes can be recorded, so backward runs the primitives' array VJPs (``raw``).
_RECORDING: weakref.WeakSet[Tape] = weakref.WeakSet()

_new_tensor = Tensor.__new__


class Primitive:
    """A differentiable primitive: its forward on arrays and one VJP per input.

    ``vjps[i](g, ans, *args, **params)`` returns the gradient for input ``i`` given the output
    gradient ``g``; ``ans`` and ``args`` are Tensors, and only what ``save`` lists is passed
    (the rest is None), so a VJP cannot hold more memory than it declares. A ``None`` VJP says
    the input has no gradient; backward raises if such an input is asked for one.

    ``raw`` (optional) holds the same VJPs on arrays: ``raw[i](g, ans, *args, **params)`` with
    ``g``, ``ans`` and the tensor args as arrays, returning an array. Backward uses them when no
    tape is recording (the backward pass itself need not be differentiable), which skips the
    per-op bookkeeping of tensor ops; they must compute exactly what ``vjps`` compute.
    """

    __slots__ = (
        "name", "fwd", "vjps", "raw", "joint", "save", "save_out", "save_args", "save_prefix"
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        fwd: Callable[..., Any],
        vjps: tuple[Callable[..., Any] | None, ...],
        save: tuple[int, ...],
        raw: Any = None,
    ) -> None:
        self.name = name
        self.fwd = fwd
        self.vjps = vjps
        # ``joint(g, ans, *args, needs=..., **params)``: every input's array gradient in one
        # call (a tuple; None where ``needs[i]`` is False), for VJPs that share work
        self.joint = None
        if isinstance(raw, Joint):
            self.joint, raw = raw.fn, None
        elif raw is True:  # the tensor VJPs use operators only: they run on arrays as written
            raw = vjps
        elif raw is not None and not isinstance(raw, tuple):
            raw = (raw,)
        if raw is not None and len(raw) != len(vjps):
            raise ValueError(f"defprim {name!r}: raw= needs one array VJP per VJP ({len(vjps)})")
        self.raw = raw
        self.save = save
        self.save_out = OUT in save
        self.save_args = tuple(sorted(i for i in save if i != OUT))
        # When the saved inputs are exactly the first n, the input tuple itself is what is saved.
        n = len(self.save_args)
        self.save_prefix = n if self.save_args == tuple(range(n)) else -1

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


class Joint:
    """``defprim(..., raw=Joint(fn))``: the array VJPs as one function that returns every
    input's gradient at once (``needs`` says which are wanted), when they share work."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn


def defprim(
    name: str,
    fwd: Callable[..., Any],
    vjp: Callable[..., Any] | None | tuple[Callable[..., Any] | None, ...] = None,
    save: tuple[int, ...] = (),
    raw: Any = None,
) -> Primitive:
    """Register a primitive. ``vjp`` is one function (one input) or a tuple (one per input).

    This is the stable extension point: a user-defined primitive gets gradients, higher-order
    derivatives and tape inspection like the built-in ones. Check it with
    ``tapegrad.testing.check_grads``. ``save`` lists what the VJPs read: input indices and
    ``OUT``; anything else reaches them as None. ``raw`` optionally gives the VJPs on arrays
    (same layout as ``vjp``), or ``True`` when the VJPs use only operators and so work on arrays
    as they are; backward prefers them when nothing records it. A None VJP declares an input
    non-differentiable: backward raises a TypeError naming the primitive if a gradient is ever
    needed there (rather than silently giving none), and so does a VJP that returns None.

    >>> import tapegrad as tg
    >>> from tapegrad._tape import OUT
    >>> cube = tg.defprim("doc_cube", lambda x: x**3, lambda g, ans, x: g * 3 * x * x, save=(0,))
    >>> x = tg.tensor([2.0])
    >>> with tg.Tape() as tape:
    ...     tape.watch(x)
    ...     y = tg.apply(cube, x).sum()
    >>> tape.gradient(y, x).tolist()
    [12.0]
    """
    vjps = vjp if isinstance(vjp, tuple) else (vjp,)
    if name in PRIMITIVES:
        raise ValueError(f"defprim: a primitive named {name!r} is already registered")
    p = Primitive(name, fwd, vjps, save, raw)
    PRIMITIVES[name] = p
    return p


def nondiff(name: str, fwd: Callable[..., Any]) -> Primitive:
    """A function of arrays with no gradient (comparisons, a max shift), run through ``apply``
    so that ``tg.compile`` sees it; not registered, never recorded (its inputs are detached or
    its output is not float)."""
    return Primitive(name, fwd, (), ())


# A recorded op is a plain tuple (the cheapest object Python builds), laid out as below, and
# shared by every tape that records it; ``Tape.nodes`` wraps each in a ``Node`` for reading.
# INPUTS holds, per input, None (not a tensor, or a tensor on no tape), the tensor's tid, or
# the Parameter itself for a trainable parameter (it is on every tape that watches parameters).
# Whether an input is on a given tape is decided at backward time: it is a leaf of that tape or
# the output of one of its nodes. Only what the primitive's ``save`` lists is held (ANS, ARGS),
# so a node keeps no more memory than its VJP declares. VERSIONS is the sum of the saved inputs'
# version counters when the op ran (None when nothing is saved).
_PRIM, _INPUTS, _OUT_TID, _OUT_SHAPE, _OUT_DTYPE, _ANS, _ARGS, _PARAMS, _VERSIONS, _SCOPE_AT = (
    range(10)
)


def _input_tid(e: Any) -> int:
    return e if type(e) is int else e._tid


class Node(tuple):
    """A read-only view of one recorded op (what ``tape.nodes`` returns)."""

    __slots__ = ()

    prim = property(lambda self: self[_PRIM])
    out_tid = property(lambda self: self[_OUT_TID])
    out_shape = property(lambda self: self[_OUT_SHAPE])
    out_dtype = property(lambda self: self[_OUT_DTYPE])
    ans = property(lambda self: self[_ANS])
    args = property(lambda self: self[_ARGS])
    params = property(lambda self: self[_PARAMS])
    versions = property(lambda self: self[_VERSIONS])
    scope = property(lambda self: self[_SCOPE_AT])

    @property
    def input_tids(self) -> tuple[int | None, ...]:
        """Per input, its tid (None for a constant or a tensor that was on no tape)."""
        return tuple(None if e is None else _input_tid(e) for e in self[_INPUTS])

    def saved_bytes(self) -> int:
        """Bytes of the arrays this node keeps alive for its VJPs."""
        return _saved_bytes([self], set())

    def __repr__(self) -> str:
        return f"<node {self.prim.name} -> {tuple(self.out_shape)} {self.out_dtype}>"


def _saved_bytes(records: Iterable[tuple[Any, ...]], seen: set[int]) -> int:
    n = 0
    for r in records:
        for t in (r[_ANS], *(r[_ARGS] or ())):
            if isinstance(t, Tensor) and id(t._data) not in seen:
                seen.add(id(t._data))
                n += t._data.nbytes
    return n


# --------------------------------------------------------------------------------------------
# apply: the one door every op goes through
# --------------------------------------------------------------------------------------------


def apply(prim: Primitive, *inputs: Any, **params: Any) -> Tensor:
    """Run ``prim`` on ``inputs`` (Tensors or constants) and record it where needed.

    >>> import tapegrad as tg
    >>> from tapegrad.ops._elementwise import _mul
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
        elif n == 3:  # linear, conv2d, where: input, weight, bias
            x, y, z = inputs
            taped = False
            if isinstance(x, Tensor):
                taped = bool(x._tapes)
                x = x._data
            if isinstance(y, Tensor):
                if y._tapes:
                    taped = True
                y = y._data
            if isinstance(z, Tensor):
                if z._tapes:
                    taped = True
                z = z._data
            data = prim.fwd(x, y, z, **params)
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
    if taped or _WITH_TAPES:
        _record(prim, inputs, params, out)
    if _CAPTURE is not None:
        _CAPTURE.append((prim, inputs, params, out))
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
    try:
        err = type(e)(text)
        if str(err) == text:
            return err
    except Exception:  # noqa: BLE001, S110 - exceptions with other constructors (numpy's)
        pass
    for cls in (ValueError, TypeError, IndexError):
        if isinstance(e, cls):
            return cls(text)
    return ValueError(text)  # pragma: no cover


_FLOATS = frozenset(np.dtype(c) for c in "efdgFDG")


def _record(prim: Primitive, inputs: tuple[Any, ...], params: dict[str, Any], out: Tensor) -> None:
    """Append one node to every recording tape that an input of this op is on."""
    data = out._data
    dt = data.dtype
    if not _GRAD_ENABLED or (dt not in _FLOATS and dt.kind not in "fc"):
        return  # ops with integer or bool outputs carry no gradient
    # Per input: its version into vsum, its tapes into `tapes`, and its entry in the record:
    # None, its tid, or the Parameter itself when trainable. Unrolled for one and two inputs
    # (most ops): about 20% cheaper than the loop.
    n = len(inputs)
    tapes: tuple[Tape, ...] = ()
    param = False
    vsum = 0
    ids: Any
    ex: Any
    ey: Any
    e: Any
    if n == 2:
        x, y = inputs
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
        ids = (ex, ey)
    elif n == 1:
        x = inputs[0]
        ex = None
        if isinstance(x, Tensor):
            vsum = x._version
            ex = x._tid
            if ex is not None:
                tapes = x._tapes
                if x._is_param and x.requires_grad:  # type: ignore[attr-defined]
                    ex = x
                    param = True
        ids = (ex,)
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
    if tapes:
        if len(tapes) == 1:
            if not tapes[0]._recording:
                tapes = ()
        else:
            tapes = tuple([t for t in tapes if t._recording])
    if param and _AUTO and tapes != _AUTO:  # trainable parameters are on every auto tape
        tapes = _AUTO if not tapes else tapes + tuple(t for t in _AUTO if t not in tapes)
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
        versions = _version_sum(args)
    else:
        args = tuple([x if i in sa else None for i, x in enumerate(inputs)])
        versions = _version_sum(args)
    tid = _next_tid()
    out._tid = tid
    out._tapes = tapes
    rec = (
        prim,
        ids,
        tid,
        data.shape,
        dt,
        out if prim.save_out else None,
        args,
        params,
        versions,
        _SCOPE[-1] if _SCOPE else None,
    )
    for tp in tapes:
        tp._nodes.append(rec)


def _version_sum(args: tuple[Any, ...]) -> int:
    return sum([x._version for x in args if isinstance(x, Tensor)])


def _sync_auto() -> None:
    global _AUTO
    _AUTO = tuple(tp for tp in _WITH_TAPES if tp._recording and tp.watch_parameters)


# --------------------------------------------------------------------------------------------
# Gradients: a value, keyed by tensor identity
# --------------------------------------------------------------------------------------------


class MissingGradientError(KeyError):
    """No gradient for a tensor; the message says why (a KeyError, printed without quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _TapeFacts:
    """What a Gradients remembers of its tape to explain a missing gradient (not the tape
    itself, which would keep every saved array alive)."""

    __slots__ = ("leaf_tids", "watch_parameters", "with_style", "watched")

    def __init__(self, tape: Tape, leaves: dict[int, Tensor]) -> None:
        self.leaf_tids = frozenset(leaves)
        self.watch_parameters = tape.watch_parameters
        self.with_style = tape._used_with
        self.watched = frozenset(id(t) for t in tape._watched)

    def reason(self, t: Tensor) -> str:
        if t._is_param and not t.requires_grad and id(t) not in self.watched:  # type: ignore[attr-defined]
            return "it is frozen (requires_grad=False)"
        if t._tid is not None and t._tid in self.leaf_tids:
            return _NO_PATH
        if t._is_param and not self.watch_parameters:
            return (
                "the tape was opened with watch_parameters=False and never watched it "
                "(watch it with tape.watch(param) or tape.watch(module))"
            )
        if self.with_style:
            return (
                "it never met the tape: it was not used while the tape was open (used outside "
                "the `with` block, or only inside tg.no_grad())"
            )
        return (
            "it never met the tape: it was not used in the forward pass, or used only by ops "
            "whose inputs were on no open tape (trace that branch's float input too with "
            "x.trace(tape), watch its parameters with tape.watch(module), or open the tape with "
            "`with tg.Tape() as tape:`)"
        )


_NO_PATH = (
    "it is on the tape but no path leads from it to the target: it was not used to compute "
    "the target (its branch does not reach it), or only through stop_gradient/detach or "
    "tg.no_grad()"
)


def _tname(t: Tensor) -> str:
    return getattr(t, "name", None) or f"tensor of shape {tuple(t.shape)}"


class Gradients:
    """Gradients keyed by tensor identity: ``g[p]``, ``g.get(p)``, ``items()``, ``+``, ``*``.

    A value, not state on tensors: accumulate micro-batches with ``g = g + g2`` or
    ``tape.gradient(loss, into=g)``. Values are Tensors (so a gradient penalty can
    differentiate them); ``named(module)`` gives numpy arrays by dotted name.
    ``missing(module)`` lists the parameters that got no gradient and why.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, 4.0]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> g = tape.gradient(loss)
    >>> g[w].tolist(), round(g.global_norm(), 4)
    ([6.0, 8.0], 10.0)
    >>> (g + g)[w].tolist(), (0.5 * g)[w].tolist()
    ([12.0, 16.0], [3.0, 4.0])
    """

    __slots__ = ("_d", "_reasons", "_facts")

    def __init__(self, pairs: Iterable[tuple[Tensor, Tensor]] = ()) -> None:
        self._d: dict[int, tuple[Tensor, Tensor]] = {id(t): (t, g) for t, g in pairs}
        # id -> (tensor, reason) for tensors known to have been asked for and got none
        self._reasons: dict[int, tuple[Tensor, str]] = {}
        self._facts: _TapeFacts | None = None

    # -- mapping ------------------------------------------------------------------------------
    def __getitem__(self, t: Tensor) -> Tensor:
        e = self._d.get(id(t))
        if e is None:
            raise MissingGradientError(f"no gradient for {_tname(t)}: {self.why_missing(t)}")
        return e[1]

    def get(self, t: Tensor, default: Any = None) -> Any:
        """The gradient of ``t``, or ``default`` when it has none."""
        e = self._d.get(id(t))
        return default if e is None else e[1]

    def __contains__(self, t: object) -> bool:
        return id(t) in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[Tensor]:
        return (t for t, _ in self._d.values())

    def keys(self) -> list[Tensor]:
        """The tensors that have a gradient."""
        return [t for t, _ in self._d.values()]

    def values(self) -> list[Tensor]:
        """The gradients, in the order of ``keys()``."""
        return [g for _, g in self._d.values()]

    def items(self) -> list[tuple[Tensor, Tensor]]:
        """``(tensor, gradient)`` pairs."""
        return list(self._d.values())

    # -- arithmetic ---------------------------------------------------------------------------
    def _derive(self, pairs: Iterable[tuple[Tensor, Tensor]]) -> Gradients:
        out = Gradients(pairs)
        out._reasons = dict(self._reasons)
        out._facts = self._facts
        return out

    def __add__(self, other: Gradients) -> Gradients:
        if not isinstance(other, Gradients):
            return NotImplemented
        out = self._derive(self._d.values())
        out._accumulate(other)
        return out

    def __radd__(self, other: Any) -> Gradients:
        if isinstance(other, (int, float)) and other == 0:  # sum([g1, g2, ...]) starts at 0
            return self
        return NotImplemented

    def __mul__(self, s: float) -> Gradients:
        if not isinstance(s, (int, float, np.number)) or isinstance(s, bool):
            return NotImplemented
        return self._derive((t, g * s) for t, g in self._d.values())

    __rmul__ = __mul__

    def __truediv__(self, s: float) -> Gradients:
        return self * (1.0 / s)

    def _accumulate(self, other: Gradients) -> None:
        for k, (t, g) in other._d.items():
            e = self._d.get(k)
            self._d[k] = (t, g if e is None else e[1] + g)
        for k, tr in other._reasons.items():
            if k not in self._d:
                self._reasons[k] = tr
        for k in list(self._reasons):
            if k in self._d:
                del self._reasons[k]
        if self._facts is None:
            self._facts = other._facts

    # -- norms --------------------------------------------------------------------------------
    def global_norm(self) -> float:
        """The L2 norm of all gradients together, as a Python float."""
        total = 0.0
        for _, g in self._d.values():
            a = g._data
            total += float((a * a).sum())
        return float(np.sqrt(total))

    def clip_by_global_norm(self, max_norm: float) -> Gradients:
        """Scaled by ``max_norm / (norm + 1e-6)`` when the global norm exceeds ``max_norm``
        (as ``torch.nn.utils.clip_grad_norm_``); unchanged otherwise."""
        if not max_norm > 0:
            raise ValueError(f"clip_by_global_norm: max_norm must be > 0, got {max_norm}")
        scale = max_norm / (self.global_norm() + 1e-6)
        return self if scale >= 1.0 else self * scale

    # -- names and missing gradients -----------------------------------------------------------
    def named(self, module: Any) -> dict[str, Any]:
        """``{dotted_name: numpy array}`` for the parameters of ``module`` that have a gradient."""
        out = {}
        for name, p in module.named_parameters():
            g = self.get(p)
            if g is not None:
                out[name] = g.numpy()
        return out

    def why_missing(self, t: Tensor) -> str | None:
        """Why ``t`` has no gradient here (None when it has one).

        >>> import tapegrad as tg
        >>> a, b = tg.Parameter(tg.ones(2)), tg.Parameter(tg.ones(2))
        >>> with tg.Tape() as tape:
        ...     loss = (a * 2).sum()
        >>> tape.gradient(loss).why_missing(b)
        'it never met the tape: it was not used while the tape was open (used outside the `with` block, or only inside tg.no_grad())'
        """
        if id(t) in self._d:
            return None
        e = self._reasons.get(id(t))
        if e is not None:
            return e[1]
        if self._facts is not None:
            return self._facts.reason(t)
        if t._is_param and not t.requires_grad:  # type: ignore[attr-defined]
            return "it is frozen (requires_grad=False)"
        return "these Gradients hold no entry for it"

    def missing(self, params: Any = None) -> dict[str, str]:
        """``{dotted_name: reason}`` for the trainable parameters that got no gradient.

        ``params`` is a Module (names are its dotted paths), an iterable of Parameters (named by
        ``p.name``), or None: the tensors this request knows were asked for or met the tape and
        got none. Frozen parameters (``requires_grad=False``) are expected to have none and are
        not listed. Optimizers use it to refuse a step that would silently skip a parameter.

        >>> import tapegrad as tg
        >>> class Two(tg.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.used = tg.Parameter(tg.ones(2))
        ...         self.unused = tg.Parameter(tg.ones(2))
        >>> m = Two()
        >>> with tg.Tape() as tape:
        ...     loss = (m.used * 3).sum()
        >>> list(tape.gradient(loss, m).missing(m))
        ['unused']
        """
        if params is None:
            return {_tname(t): r for t, r in self._reasons.values()}
        if hasattr(params, "named_parameters"):
            named: Iterable[tuple[str, Tensor]] = params.named_parameters()
        else:
            named = (
                (getattr(p, "name", None) or f"parameters[{i}] (shape {tuple(p.shape)})", p)
                for i, p in enumerate(params)
            )
        out = {}
        for name, p in named:
            if id(p) in self._d or (p._is_param and not p.requires_grad):  # type: ignore[attr-defined]
                continue
            out[name] = self.why_missing(p) or ""
        return out

    def __repr__(self) -> str:
        names = [str(_tname(t)) for t, _ in self._d.values()]
        more = "..." if len(names) > 6 else ""
        miss = f", {len(self._reasons)} missing" if self._reasons else ""
        return f"Gradients({len(names)} tensors: {', '.join(names[:6])}{more}{miss})"


# --------------------------------------------------------------------------------------------
# The tape
# --------------------------------------------------------------------------------------------

_RELEASED_MSG = (
    "Tape.gradient: this tape was released: a non-persistent tape frees what it saved as its "
    "first gradient() call uses it, or release() was called. Open it with "
    "tg.Tape(persistent=True) to call gradient() several times (one backward pass each), and "
    "call tape.release() when done."
)


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
    ``release()``.

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
        self._nodes: list[tuple[Any, ...] | None] = []  # records, see Node
        # watched tensors; parameters that met the tape are found in the records (_scan)
        self._leaves: dict[int, Tensor] = {}
        self._watched: list[Tensor] = []  # tensors whose _tapes name this tape
        self._recording = False
        self._in_with = False
        self._used_with = False
        self._released = False

    # -- opening and closing --------------------------------------------------------------------
    def _set_recording(self, flag: bool) -> None:
        self._recording = flag
        if flag:
            _RECORDING.add(self)
        else:
            _RECORDING.discard(self)
        if self._in_with:
            _sync_auto()

    def __enter__(self) -> Tape:
        if self._released:
            raise RuntimeError(
                "Tape: this tape was released (after a non-persistent gradient() call or "
                "release()); open a new tg.Tape()"
            )
        if self._in_with:
            raise RuntimeError("Tape: this tape is already open in a `with` block")
        self._in_with = True
        self._used_with = True
        _WITH_TAPES.append(self)
        self._set_recording(True)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._recording = False
        _RECORDING.discard(self)
        if self._in_with:
            self._in_with = False
            with contextlib.suppress(ValueError):
                _WITH_TAPES.remove(self)
            _sync_auto()

    def stop(self) -> None:
        """Stop recording (a traced tape records until gradient, release or stop)."""
        self.__exit__()

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
        if self._released:
            raise RuntimeError("Tape.watch: this tape was released; open a new tg.Tape()")
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
            self._set_recording(True)

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
        non-scalar Tensor with ``output_gradients`` of its shape (a vector-Jacobian product;
        one per target for a list). Each target must be on this tape (computed while it was
        open from tensors on it); otherwise an error says how to fix it.
        sources: None (a Gradients for every leaf that took part), a Tensor (a Tensor), a
        list/tuple of Tensors (a list/tuple, same order), or a Module (a Gradients restricted to
        its parameters; ``.missing(module)`` names any that got none and why). A tensor source
        on the tape that the target does not depend on gets zeros (as in JAX); one that is not on
        the tape at all (never watched) is an error rather than a silent zero.
        into: a Gradients to accumulate into (micro-batches); it is returned.

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
            raise RuntimeError(_RELEASED_MSG)
        seeds = self._seeds(target, output_gradients)
        module_req = isinstance(sources, _module_class())
        if sources is None:
            src_list: list[Tensor] | None = None
        elif module_req:
            src_list = sources._parameter_list()
        elif isinstance(sources, Tensor):
            src_list = [sources]
        elif isinstance(sources, (list, tuple)):
            src_list = list(sources)
            for s in src_list:
                if not isinstance(s, Tensor):
                    raise TypeError(
                        "Tape.gradient: sources must be Tensors or a Module, got a "
                        f"{type(s).__name__} in the list"
                    )
        else:
            raise TypeError(
                "Tape.gradient: sources must be None, a Tensor, a list/tuple of Tensors or a "
                f"Module, got {type(sources).__name__}"
            )
        if into is not None and src_list is not None and not module_req:
            raise TypeError(
                "Tape.gradient(into=...): accumulation needs a Gradients result: pass "
                "sources=None or a Module"
            )

        # Leaves are collected before the walk: a non-persistent backward clears the tape.
        scan = self._scan()
        if src_list is not None and not module_req:
            self._check_sources(src_list, scan[0])
        results, leaves, facts = self._run(seeds, src_list, scan)
        if src_list is None:
            out = Gradients((t, results[tid]) for tid, t in leaves.items() if tid in results)
            out._reasons = {id(t): (t, _NO_PATH) for tid, t in leaves.items() if tid not in results}
            out._facts = facts
        elif module_req:
            out = _module_gradients(src_list, results, facts)
        else:
            zs = _tensor_gradients(src_list, results)
            return zs[0] if isinstance(sources, Tensor) else type(sources)(zs)
        if into is not None:
            into._accumulate(out)
            return into
        return out

    def _check_sources(self, sources: list[Tensor], info: dict[int, Any]) -> None:
        """Tensor sources must be on this tape: an unwatched one would silently get zeros."""
        for k, t in enumerate(sources):
            if t._tid is not None and t._tid in info:
                continue
            if t._is_param and t.requires_grad and self.watch_parameters and self._used_with:  # type: ignore[attr-defined]
                continue  # auto-watched by the `with` block, just never used: a zero gradient
            which = f"source {k}" if len(sources) > 1 else "the source"
            if t._is_param:
                why = _TapeFacts(self, {}).reason(t)
            else:
                why = (
                    "it was never watched and no op recorded here produced it. Watch it with "
                    "tape.watch(x) before using it, or trace it with x = x.trace(tape); a tensor "
                    "made with .numpy(), detach() or inside tg.no_grad() has left every tape"
                )
            raise ValueError(
                f"Tape.gradient: {which} ({_tname(t)}, {t.dtype}) is not on this tape: {why}"
            )

    def _run(
        self,
        seeds: dict[int, Tensor],
        src_list: list[Tensor] | None,
        scan: tuple[dict[int, tuple[Any, Any]], dict[int, Tensor]] | None = None,
    ) -> tuple[dict[int, Tensor], dict[int, Tensor], _TapeFacts]:
        """Backward from ``seeds``: (``{tid: gradient}``, the leaves, facts for missing ones)."""
        info, leaves = self._scan() if scan is None else scan
        facts = _TapeFacts(self, leaves)
        return self._backward(seeds, src_list, info, leaves), leaves, facts

    def _seeds(self, target: Any, output_gradients: Any, strict: bool = True) -> dict[int, Tensor]:
        """``{tid: output gradient}`` for the targets; with ``strict``, each must be on this tape
        (otherwise it is a constant here and is skipped)."""
        targets = list(target) if isinstance(target, (list, tuple)) else [target]
        if output_gradients is None:
            ogs: list[Any] = [None] * len(targets)
        else:
            ogs = (
                list(output_gradients)
                if isinstance(output_gradients, (list, tuple))
                else [output_gradients]
            )
            if len(ogs) != len(targets):
                raise ValueError(
                    f"Tape.gradient: {len(targets)} target(s) but {len(ogs)} output_gradients; "
                    "give one per target"
                )
        seeds: dict[int, Tensor] = {}
        for k, (t, og) in enumerate(zip(targets, ogs, strict=True)):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"Tape.gradient: the target must be a Tensor, got {type(t).__name__}"
                )
            if og is None:
                if t._data.size != 1:
                    raise ValueError(
                        f"Tape.gradient: the target has shape {tuple(t.shape)} ({t.dtype}); a "
                        "non-scalar target needs output_gradients= (a tensor of the same shape: "
                        "the vector of a vector-Jacobian product), or reduce it first, e.g. "
                        "loss.sum() or loss.mean()"
                    )
                seed = _wrap(np.ones_like(t._data))
            else:
                seed = og if isinstance(og, Tensor) else Tensor(og, dtype=t.dtype)
                if seed.shape != t.shape:
                    raise ValueError(
                        f"Tape.gradient: output_gradients has shape {tuple(seed.shape)} but the "
                        f"target has shape {tuple(t.shape)}; they must match"
                    )
            tid = t._tid
            if tid is not None and (self in t._tapes or tid in self._leaves):
                prev = seeds.get(tid)
                seeds[tid] = seed if prev is None else prev + seed
            elif strict:
                which = f"target {k} of {len(targets)}" if len(targets) > 1 else "the target"
                raise ValueError(
                    f"Tape.gradient: {which} (shape {tuple(t.shape)}) is not on this tape: no op "
                    "that produced it was recorded here. Compute it while the tape is open "
                    "(inside `with tape:`) from watched tensors or parameters, or trace an input "
                    "with x.trace(tape); tensors that went through .numpy(), detach() or "
                    "tg.no_grad() have left every tape."
                )
        return seeds

    def _scan(self) -> tuple[dict[int, tuple[Any, Any]], dict[int, Tensor]]:
        """``({tid: (shape, dtype)} for every tensor on this tape, {tid: tensor} for its leaves)``.

        The leaves are the watched tensors plus, when the tape watches parameters, every
        trainable Parameter that one of its nodes took as input.
        """
        info: dict[int, tuple[Any, Any]] = {}
        leaves = dict(self._leaves)
        wp = self.watch_parameters
        for rec in self._nodes:
            if rec is None:
                continue
            info[rec[_OUT_TID]] = (rec[_OUT_SHAPE], rec[_OUT_DTYPE])
            if wp:
                for e in rec[_INPUTS]:
                    if e is not None and type(e) is not int:
                        leaves[e._tid] = e
        for tid, t in leaves.items():
            info[tid] = (t._data.shape, t._data.dtype)
        return info, leaves

    def _backward(
        self,
        seeds: dict[int, Tensor],
        src_list: list[Tensor] | None,
        info: dict[int, tuple[Any, Any]],
        leaves: dict[int, Tensor],
    ) -> dict[int, Tensor]:
        """The reverse walk: ``{tid: gradient}`` for the leaves (and non-leaf sources) reached."""
        nodes = self._nodes
        if src_list is None:
            needed: Any = info  # every tensor on the tape
            keep: set[int] = set()
        else:
            # only what depends on a source needs a gradient
            needed = {s._tid for s in src_list if s._tid is not None and s._tid in info}
            keep = {tid for tid in needed if tid not in leaves}
            for rec in nodes:
                if rec is not None and rec[_OUT_TID] not in needed:
                    for e in rec[_INPUTS]:
                        if e is not None and _input_tid(e) in needed:
                            needed.add(rec[_OUT_TID])
                            break
        grads = dict(seeds)
        results: dict[int, Tensor] = {}
        free = not self.persistent
        was_recording = self._recording
        self._set_recording(False)  # backward ops are never recorded on the tape they walk
        if not _RECORDING or not _GRAD_ENABLED:
            # Nothing can record this pass: run it on arrays (see Primitive.raw).
            try:
                raw = self._backward_arrays(
                    {tid: g._data for tid, g in seeds.items()}, needed, keep, info, free
                )
            finally:
                if free:
                    self._release()
                else:
                    self._set_recording(was_recording)
            return {tid: _wrap(a) for tid, a in raw.items()}
        try:
            for rec, g, args in self._reverse_walk(grads, keep, results, free):
                prim, ins, ans, params = rec[_PRIM], rec[_INPUTS], rec[_ANS], rec[_PARAMS]
                for i, itid in _wanted(ins, needed):
                    _, gi = _call_vjp(prim.vjps, rec, i, info[itid], g, ans, *args, **params)
                    if not isinstance(gi, Tensor):
                        gi = _wrap(gi)
                    shape, dtype = info[itid]
                    gd = gi._data
                    if gd.shape != shape:
                        gi = _unbroadcast(gi, shape, prim.name)
                    if gd.dtype is not dtype and gd.dtype != dtype:
                        gi = gi.astype(dtype)
                    prev = grads.get(itid)
                    grads[itid] = gi if prev is None else prev + gi
        finally:
            if free:
                self._release()
            else:
                self._set_recording(was_recording)
        results.update(grads)  # leaves keep their gradients in `grads`
        return results

    def _reverse_walk(
        self, grads: dict[int, Any], keep: set[int], results: dict[int, Any], free: bool
    ) -> Iterator[tuple[Any, Any, Any]]:
        """Backward's walk over the record, last op first: ``(node, its output's gradient, the
        saved inputs)`` for each node that has a gradient (popped from ``grads``; kept in
        ``results`` too when asked for). A non-persistent walk drops each node as it passes."""
        nodes = self._nodes
        for k in range(len(nodes) - 1, -1, -1):
            rec = nodes[k]
            if rec is None:
                continue
            if free:
                nodes[k] = None  # the last reference, unless another tape shares the node
            tid = rec[_OUT_TID]
            g = grads.pop(tid, None)
            if g is None:
                continue
            if tid in keep:
                results[tid] = g
            yield rec, g, _saved_args(rec, rec[_INPUTS], rec[_ANS], rec[_ARGS], rec[_VERSIONS])

    def _backward_arrays(
        self,
        grads: dict[int, Any],
        needed: Any,
        keep: set[int],
        info: dict[int, tuple[Any, Any]],
        free: bool,
    ) -> dict[int, Any]:
        """``_backward`` on arrays, for a pass that no tape records: a primitive's ``raw`` VJPs
        where it has them, else its tensor VJPs on wrapped arrays (nothing records either)."""
        results: dict[int, Any] = {}
        a_args: Any = None
        a_ans = joint = tg = g2 = None
        cap = _CAPTURE  # tg.compile records each array computation of this pass too
        for rec, g, args in self._reverse_walk(grads, keep, results, free):
            prim, ins, ans, params = rec[_PRIM], rec[_INPUTS], rec[_ANS], rec[_PARAMS]
            raws = prim.raw
            wanted = dict(_wanted(ins, needed))  # {input index: its tid}
            if raws is not None or prim.joint is not None:
                a_ans = None if ans is None else ans._data
                a_args = [x._data if isinstance(x, Tensor) else x for x in args]
                if prim.joint is not None:
                    needs = tuple(i in wanted for i in range(len(ins)))
                    joint = prim.joint(g, a_ans, *a_args, needs=needs, **params)
                    if cap is not None:
                        kw = {**params, "needs": needs}
                        _emit(cap, prim.joint, prim.name, (g, a_ans, *a_args), kw, joint)
            else:
                tg = _wrap(g)
            for i, itid in wanted.items():
                if joint is not None:
                    gi = joint[i]
                    if gi is None:
                        raise _no_vjp_error(rec, i, info[itid], returned_none=True)
                    if cap is not None:
                        _emit(cap, _item, "item", (joint,), {"i": i}, gi)
                elif raws is not None:
                    vjp, gi = _call_vjp(raws, rec, i, info[itid], g, a_ans, *a_args, **params)
                    if cap is not None:
                        _emit(cap, vjp, f"{prim.name} vjp{i}", (g, a_ans, *a_args), params, gi)
                else:
                    _, gt = _call_vjp(prim.vjps, rec, i, info[itid], tg, ans, *args, **params)
                    gi = gt._data if isinstance(gt, Tensor) else gt
                shape, dtype = info[itid]
                if gi.shape != shape:
                    g2 = _unbroadcast_array(gi, shape, prim.name)
                    if cap is not None:
                        kw = {"shape": shape, "opname": prim.name}
                        _emit(cap, _unbroadcast_array, "unbroadcast", (gi,), kw, g2)
                    gi = g2
                if gi.dtype is not dtype and gi.dtype != dtype:
                    g2 = gi.astype(dtype)
                    if cap is not None:
                        _emit(cap, _astype_array, "astype", (gi,), {"dtype": dtype}, g2)
                    gi = g2
                prev = grads.get(itid)
                if prev is None:
                    grads[itid] = gi
                else:
                    grads[itid] = g2 = prev + gi
                    if cap is not None:
                        _emit(cap, np.add, "add", (prev, gi), {}, g2)
                prev = gi = g2 = None
            # drop this node's arrays now, not when the names are next rebound
            ans = a_args = a_ans = joint = tg = None
        results.update(grads)
        return results

    # -- release --------------------------------------------------------------------------------
    def _release(self) -> None:
        self.__exit__()
        self._released = True
        self._nodes = []
        self._leaves = {}
        for t in self._watched:
            t._tapes = tuple(tp for tp in t._tapes if tp is not self)
        self._watched = []

    def release(self) -> None:
        """Free everything the tape holds; later gradient calls raise."""
        self._release()

    # -- inspection (see _inspect.py) -----------------------------------------------------------
    def summary(self) -> str:
        """A table of the recorded ops: op, output shape, dtype, bytes held, module path."""
        from ._inspect import summary  # noqa: PLC0415

        return summary(self)

    def to_dot(self, group: str = "op") -> str:
        """Graphviz DOT source of the recorded DAG (parameters labelled by module path); with
        ``group="module"``, one box per module."""
        from ._inspect import to_dot  # noqa: PLC0415

        return to_dot(self, group)

    def render(self, path: str, format: str = "svg", group: str = "op") -> str:
        """Draw the DAG to ``path`` (``.svg`` or ``.png``) with graphviz; returns the file written."""
        from ._inspect import render  # noqa: PLC0415

        return render(self, path, format, group)

    def explain(self, target: Tensor, source: Tensor) -> str:
        """The chain of ops from ``source`` to ``target`` on this tape, or why there is none."""
        from ._inspect import explain  # noqa: PLC0415

        return explain(self, target, source)

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
        return _saved_bytes((r for r in self._nodes if r is not None), set())

    def __repr__(self) -> str:
        state = "released" if self._released else ("recording" if self._recording else "closed")
        return f"Tape({len(self.nodes)} ops, {state}{', persistent' if self.persistent else ''})"


_MODULE: list[type] = []


def _module_class() -> type:
    """``tg.nn.Module`` (nn sits above the tape, so it is looked up once, on first use)."""
    if not _MODULE:
        from .nn._module import Module  # noqa: PLC0415

        _MODULE.append(Module)
    return _MODULE[0]


def _module_gradients(
    params: list[Tensor], results: dict[int, Tensor], facts: _TapeFacts
) -> Gradients:
    """A Gradients over ``params``: the ones reached, and a reason for each trainable one not."""
    out = Gradients()
    for p in params:
        g = results.get(p._tid) if p._tid is not None else None
        if g is not None:
            out._d[id(p)] = (p, g)
        elif p.requires_grad:  # type: ignore[attr-defined]
            out._reasons[id(p)] = (p, facts.reason(p))
    out._facts = facts
    return out


def _tensor_gradients(sources: list[Tensor], results: dict[int, Tensor]) -> list[Tensor]:
    out = []
    for s in sources:
        g = results.get(s._tid) if s._tid is not None else None
        # A source that does not reach the target has a zero derivative (as in JAX).
        out.append(g if g is not None else _wrap(np.zeros_like(s._data)))
    return out


def _check_versions(rec: tuple[Any, ...]) -> None:
    args = rec[_ARGS]
    if args is not None and _version_sum(args) != rec[_VERSIONS]:
        # The sum cannot say which one changed: name those no longer at version 0.
        changed = [(i, x) for i, x in enumerate(args) if isinstance(x, Tensor) and x._version]
        raise _version_error(rec, changed)
    ans = rec[_ANS]
    if ans is not None and ans._version != 0:
        raise _version_error(rec, [(-1, ans)])


def _where(rec: tuple[Any, ...]) -> str:
    return f" in {rec[_SCOPE_AT]}" if rec[_SCOPE_AT] else ""


def _version_error(rec: tuple[Any, ...], changed: list[tuple[int, Tensor]]) -> RuntimeError:
    def show(i: int, x: Tensor) -> str:
        name = getattr(x, "name", None)
        which = "its output" if i < 0 else f"input {i}"
        return (
            f"{which}" + (f" '{name}'" if name else "") + f" (shape {tuple(x.shape)}, {x.dtype}, "
            f"now at version {x._version})"
        )

    what = " or ".join(show(i, x) for i, x in changed) or "a saved input"
    if len(changed) > 1:
        what = "one of " + what
    return RuntimeError(
        f"Tape.gradient: {what} of op '{rec[_PRIM].name}' (output {tuple(rec[_OUT_SHAPE])})"
        f"{_where(rec)} was modified in place after the op saved it for backward, so its VJP "
        "would read the wrong values. Compute the gradient before updating it in place (e.g. "
        "before optimizer.step), or use an out-of-place op (x = x * 2 rather than x[...] = ...)."
    )


def _no_vjp_error(
    rec: tuple[Any, ...], i: int, meta: tuple[Any, Any], returned_none: bool = False
) -> TypeError:
    name = rec[_PRIM].name
    what = f"input {i} ({tuple(meta[0])} {meta[1]})"
    if returned_none:
        why = f"its VJP for {what} returned None"
        fix = "a VJP must return a gradient (zeros for a zero derivative)"
    else:
        why = f"it declares no VJP for {what}"
        fix = (
            f"give defprim('{name}', ...) a VJP for input {i}, or cut the path with "
            "tg.stop_gradient(x) if no gradient should flow there"
        )
    return TypeError(
        f"Tape.gradient: cannot differentiate through primitive '{name}'{_where(rec)}: {why}, "
        f"but that input needs a gradient. Fix: {fix}."
    )


class _ArrayOp:
    """An array computation of the backward pass as ``tg.compile`` captures it: a name and a
    function called as ``fwd(*inputs, **params)``, like a primitive's forward."""

    __slots__ = ("fwd", "name")

    def __init__(self, fwd: Callable[..., Any], name: str) -> None:
        self.fwd = fwd
        self.name = name


_ARRAY_OPS: dict[tuple[int, str], _ArrayOp] = {}


def _emit(cap: list[Any], fn: Any, name: str, inputs: tuple[Any, ...], params: Any, out: Any) -> None:
    """Append one array computation of backward to a ``tg.compile`` capture (arrays wrapped
    in Tensors: the program finds their slots by array identity)."""
    op = _ARRAY_OPS.get((id(fn), name))
    if op is None:
        op = _ARRAY_OPS[(id(fn), name)] = _ArrayOp(fn, name)
    ins = tuple(x if x is None or isinstance(x, (int, float)) else _wrap(x) for x in inputs)
    cap.append((op, ins, params, _wrap(out)))


def _item(t: Any, i: int) -> Any:
    return t[i]


def _astype_array(g: Any, dtype: Any) -> Any:
    return g.astype(dtype)


def _call_vjp(table: Any, rec: Any, i: int, info_i: Any, *args: Any, **params: Any) -> Any:
    """``(vjp, its result)`` for input ``i`` of a node, from ``table`` (the tensor or the array
    VJPs): an error naming the primitive if it has none there, or if it returns None."""
    vjp = table[i] if i < len(table) else None
    if vjp is None:
        raise _no_vjp_error(rec, i, info_i)
    gi = vjp(*args, **params)
    if gi is None:
        raise _no_vjp_error(rec, i, info_i, returned_none=True)
    return vjp, gi


def _wanted(ins: Any, needed: Any) -> Iterator[tuple[int, int]]:
    """``(index, tid)`` of a node's inputs that need a gradient."""
    for i, e in enumerate(ins):
        if e is not None:
            itid = e if type(e) is int else e._tid
            if itid in needed:
                yield i, itid


def _saved_args(rec: Any, ins: Any, ans: Any, args: Any, versions: Any) -> Any:
    """The VJPs' saved inputs (Nones when none were saved), after checking that none of them,
    nor a saved output, was modified in place since the op ran (their version counters)."""
    if args is None:
        args = (None,) * len(ins)
    else:
        v = 0
        for x in args:
            if isinstance(x, Tensor):
                v += x._version
        if v != versions:
            _check_versions(rec)
    if ans is not None and ans._version:
        _check_versions(rec)
    return args


def _unbroadcast_axes(gshape: tuple[int, ...], shape: tuple[int, ...], opname: str) -> Any:
    """The axes to sum a gradient of ``gshape`` over to get back to ``shape``."""
    lead = len(gshape) - len(shape)
    if lead < 0 or any(n not in (1, m) for n, m in zip(shape, gshape[lead:], strict=True)):
        raise ValueError(
            f"Tape.gradient: the VJP of '{opname}' returned a gradient of shape "
            f"{tuple(gshape)}, which does not broadcast to its input's shape {tuple(shape)}"
        )
    return tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1
    )


def _unbroadcast_array(g: Any, shape: tuple[int, ...], opname: str) -> Any:
    """``_unbroadcast`` on an array (the same sums, so the same numbers)."""
    axes = _unbroadcast_axes(g.shape, shape, opname)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    return g if g.shape == shape else np.reshape(g, shape)


def _unbroadcast(g: Tensor, shape: tuple[int, ...], opname: str) -> Tensor:
    """Sum ``g`` back to ``shape``: broadcasting is undone here, once, for every primitive."""
    from .ops._reduce import sum as _sum  # noqa: PLC0415
    from .ops._shape import reshape  # noqa: PLC0415

    axes = _unbroadcast_axes(tuple(g.shape), shape, opname)
    if axes:
        g = _sum(g, axis=axes, keepdims=True)
    return g if g.shape == shape else reshape(g, shape)


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
    """False inside ``tg.no_grad()``."""
    return _GRAD_ENABLED


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
        if t._tapes:
            raise RuntimeError(
                f"backward(): the tape this tensor (shape {tuple(t.shape)}) was on has been "
                "released by an earlier gradient() call; use tg.Tape(persistent=True) to "
                "differentiate it more than once"
            )
        raise RuntimeError(
            f"backward(): this tensor (shape {tuple(t.shape)}) is on no tape: no op that produced "
            "it was recorded. Compute it inside `with tg.Tape() as tape:` (parameters are "
            "watched automatically) or trace an input with x.trace(tape)."
        )
    if len(live) > 1:
        raise RuntimeError(
            f"backward(): this tensor is on {len(live)} tapes ({', '.join(map(repr, live))}); "
            "say which with tape.gradient(loss)"
        )
    return live[0].gradient(t, output_gradients=output_gradients)


def trace(x: Tensor, tape: Tape) -> Tensor:
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


_IDENTITY = defprim("identity", lambda x: x, lambda g, ans, x: g)
