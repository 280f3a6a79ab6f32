"""Tape replay: capture one training step as a straight-line program and run it again.

``tg.compile(loss_fn, model, optimizer)`` returns a step function. Its first calls run eagerly
(a tape, ``gradient``, ``optimizer.step``) while every primitive that runs, forward and backward,
is captured. Two captures with different batches must agree op for op: then the program is
compiled to one generated Python function (``step.source`` shows it) that calls the primitives'
forwards and VJPs on arrays (which the engine captures during backward) directly:
no Tensors, no tape, no per-op bookkeeping, preallocated output buffers for elementwise kernels.
The optimizer's per-parameter update then runs in place.

A step whose ops depend on the batch other than through tensor operands (an integer index taken
from the labels, a random dropout mask, Python control flow on values) captures differently each
time; it is detected and keeps running eagerly, with one warning. Input shapes or dtypes that
change trigger a new capture (one program per signature).
"""

from __future__ import annotations

import builtins
import linecache
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

from . import _autodiff
from ._autodiff import Gradients, Tape
from ._backend import np
from ._creation import Generator
from ._tensor import Tensor, _wrap
from .nn._module import structure_version
from .ops._common import as_tensor
from .optim._optimizer import Optimizer


class _Records(list):
    """The capture: (primitive, inputs, params, output) per call, and where the user's code
    made each call (for the message when two captures differ)."""

    def __init__(self) -> None:
        super().__init__()
        self.where: list[str] = []

    def append(self, item: Any) -> None:
        super().append(item)
        self.where.append(_user_line())

    def call(self, fn: Callable[..., Any], name: str, xp: Any, args: tuple[Any, ...], kw: Any) -> Any:
        """One array step of backward (a VJP, unbroadcast, cast, add), run and recorded with
        its arrays wrapped in Tensors: the program finds their slots by array identity."""
        out = fn(xp, *args, **kw)
        op = _ARRAY_OPS.get((id(fn), name))
        if op is None:  # an add of gradients is np.add: a program can give it an output buffer
            form = np.add if name == "add" else (lambda *a, **k: fn(xp, *a, **k))
            op = _ARRAY_OPS[(id(fn), name)] = _ArrayOp(form, name)
        ins = tuple(x if x is None or isinstance(x, (int, float)) else _wrap(x) for x in args)
        self.append((op, ins, kw, _wrap(out)))
        return out


class _ArrayOp:
    """A step of backward on arrays, called like a primitive's forward: ``fwd(*ins, **kw)``."""

    __slots__ = ("fwd", "name")

    def __init__(self, fwd: Callable[..., Any], name: str) -> None:
        self.fwd = fwd
        self.name = name


_ARRAY_OPS: dict[tuple[int, str], _ArrayOp] = {}


_PKG = os.path.dirname(os.path.abspath(__file__))


def _user_line() -> str:
    """``file:line: code`` of the innermost caller outside tapegrad (and the standard library)."""
    f: Any = sys._getframe(2)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_PKG) and "contextlib" not in fn:
            code = (linecache.getline(fn, f.f_lineno) or "").strip()
            return f"{fn}:{f.f_lineno}: {code}"
        f = f.f_back
    return "(unknown)"


class _Capture:
    """Records every primitive call: (primitive, inputs, params, output)."""

    def __init__(self) -> None:
        self.records = _Records()

    def __enter__(self) -> _Capture:
        _autodiff.start_capture(self.records)
        return self

    def __exit__(self, *exc: Any) -> None:
        _autodiff.stop_capture()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return a is b


class _Program:
    """A captured step turned into slots and instructions."""

    def __init__(self, cap: _Capture, inputs: list[Tensor], params: list[Tensor],
                 loss: Tensor, grads: Gradients) -> None:
        slot: dict[int, int] = {}
        self.kinds: list[tuple[str, Any]] = []  # per slot: ("input", k) | ("param", p) | ("const", arr) | ("op", i)

        def new(kind: str, v: Any) -> int:
            self.kinds.append((kind, v))
            return len(self.kinds) - 1

        by_array: dict[int, int] = {}  # a detached view shares its array, so its slot too
        for k, t in enumerate(inputs):
            slot[id(t)] = by_array[id(t._data)] = new("input", k)
        for p in params:
            # the backward's array computations read p's array: find it by array too
            by_array[id(p._data)] = slot.setdefault(id(p), new("param", p))
        self.instrs: list[tuple[Any, tuple[Any, ...], dict[str, Any], int]] = []
        for prim, ins, kw, out in cap.records:
            args: list[Any] = []
            for x in ins:
                if isinstance(x, Tensor):
                    s = slot.get(id(x))
                    if s is None:
                        s = by_array.get(id(x._data))
                    if s is None:
                        s = slot[id(x)] = new("const", x._data)
                    args.append(("s", s))
                else:
                    args.append(("v", x))
            o = new("op", len(self.instrs))
            slot[id(out)] = by_array[id(out._data)] = o
            self.instrs.append((prim, tuple(args), kw, o))
        self.where = list(cap.records.where)
        self.loss_slot = slot.get(id(loss))
        self.grad_slots = []
        for p, g in grads.items():
            s = slot.get(id(g))
            if s is None:  # backward on arrays: the gradient is a new wrapper of an op's array
                s = by_array.get(id(g._data))
            if s is None:
                s = new("const", g._data)
            self.grad_slots.append((p, s))

    def signature(self) -> list[Any]:
        return [(p.name, a, kw) for p, a, kw, _ in self.instrs] + [
            (k, v if k != "param" else id(v)) for k, v in self.kinds if k != "op"
        ]

    def difference(self, other: _Program) -> str | None:
        """None when two captures agree op for op; else which op differs, where the user's code
        made it, and why that keeps the step from compiling."""
        if len(self.instrs) == len(other.instrs) and _same(self.signature(), other.signature()):
            return None
        for i, ((pa, aa, ka, _), (pb, ab, kb, _)) in enumerate(zip(self.instrs, other.instrs, strict=False)):
            if pa is not pb:
                why = f"it is '{pa.name}' in one call and '{pb.name}' in the other"
                fix = "Python control flow on tensor values (if/while on .item()) changes the ops"
            elif not _same(ka, kb):
                k = next(k for k in {**ka, **kb} if not _same(ka.get(k), kb.get(k)))
                why = f"its argument {k}= differs between calls ({_short(ka.get(k))} and {_short(kb.get(k))})"
                fix = "pass values that change per batch as tensor operands, not as Python values"
            elif not _same(self._consts(aa), other._consts(ab)):
                why = "an operand that is a constant to the program (made outside tapegrad's ops, e.g. with numpy, or from .numpy()/.item()) differs between calls"
                fix = "compute it with tapegrad ops on the step's inputs, or pass it as an input of the step"
            else:
                continue
            return f"op {i} '{pa.name}' at {self.where[i]}: {why}. Fix: {fix}"
        n = min(len(self.instrs), len(other.instrs))
        longer = self.where if len(self.where) > n else other.where
        return (
            f"the two calls ran {len(self.instrs)} and {len(other.instrs)} ops (the first extra "
            f"op at {longer[n]}). Fix: Python control flow on tensor values changes the ops; keep "
            "it outside the step"
        )

    def _consts(self, args: tuple[Any, ...]) -> list[Any]:
        return [self.kinds[v][1] if k == "s" and self.kinds[v][0] == "const" else None for k, v in args]

    def build(self, example_inputs: list[Any]) -> Callable[..., Any]:
        """Generate ``run(inputs) -> (loss array, grad arrays)`` as straight-line code.

        Dead ops are dropped; each intermediate is deleted after its last use (with everything
        that may be a view of it), so the program holds no more than eager does; elementwise
        kernels write into buffers kept between steps, and a buffer whose value is dead is
        reused by a later kernel of the same shape and dtype.
        """
        outputs: set[int] = {s for s in (self.loss_slot, *(s for _, s in self.grad_slots)) if s is not None}
        live = set(outputs)
        for _, args, _, o in reversed(self.instrs):  # dead-code elimination
            if o in live:
                live.update(v for k, v in args if k == "s")
        order = [i for i, ins in enumerate(self.instrs) if ins[3] in live]
        ufunc = {i for i in order if isinstance(self.instrs[i][0].fwd, np.ufunc)
                 and self.instrs[i][3] not in outputs and not self.instrs[i][2]}  # fmt: skip
        forever = len(order)
        last: dict[int, int] = {}  # op slot -> position of its last use
        for pos, i in enumerate(order):
            last.setdefault(self.instrs[i][3], pos)
            for k, v in self.instrs[i][1]:
                if k == "s" and self.kinds[v][0] == "op":
                    last[v] = pos
        for o in outputs:
            last[o] = forever
        dies_at: dict[int, list[int]] = {}
        for o, pos in last.items():
            if pos < forever:
                dies_at.setdefault(pos, []).append(o)

        ns: dict[str, Any] = {}
        head = ["def run(inputs):"]
        for s, (kind, v) in enumerate(self.kinds):
            if s not in live:
                continue
            if kind == "input":
                head.append(f"    v{s} = inputs[{v}]")
            elif kind == "param":
                ns[f"P{s}"] = v
                head.append(f"    v{s} = P{s}._data")  # read each step: the optimizer updates in place
            elif kind == "const":
                ns[f"C{s}"] = v
                head.append(f"    v{s} = C{s}")
        body: list[tuple[str, str]] = []  # (line without buffer, line with buffer)
        buffered: list[int] = []
        for pos, i in enumerate(order):
            prim, args, kw, o = self.instrs[i]
            ns[f"f{i}"] = prim.fwd
            argstr = []
            for k, v in args:
                if k == "s":
                    argstr.append(f"v{v}")
                else:
                    ns[f"a{i}_{len(argstr)}"] = v
                    argstr.append(f"a{i}_{len(argstr)}")
            for name, val in kw.items():
                ns[f"k{i}_{name}"] = val
                argstr.append(f"{name}=k{i}_{name}")
            plain = f"    v{o} = f{i}({', '.join(argstr)})  # {prim.name}"
            if i in ufunc:  # elementwise kernels write into a buffer kept between steps
                buffered.append(o)
                body.append((plain, f"    v{o} = f{i}({', '.join(argstr)}, out=B{o})  # {prim.name}"))
            else:
                body.append((plain, plain))
            gone = dies_at.get(pos)
            if gone:  # dropping a name only drops a reference: a view keeps its base alive
                line = "    del " + ", ".join(f"v{m}" for m in gone)
                body.append((line, line))
        grads = ", ".join(f"v{s}" for _, s in self.grad_slots)
        ret = f"    return v{self.loss_slot}, ({grads}{',' if len(self.grad_slots) == 1 else ''})"
        # One run without buffers tells each buffer's shape and dtype, and which values may
        # share memory with it (views): a buffer is reused only once all of those are dead.
        probe = "\n".join([*head, *(a for a, _ in body if "    del " not in a), "    return locals()"])
        pns = dict(ns)
        exec(builtins.compile(probe, "<tg.compile probe>", "exec"), pns)  # noqa: S102
        gens = {id(v): v for _, _, kw, _ in self.instrs for v in kw.values() if isinstance(v, Generator)}
        states = [(g, g.get_state()) for g in gens.values()]
        try:
            values = {o: v for name, v in pns["run"](example_inputs).items()
                      if name[0] == "v" and (o := int(name[1:])) in last}  # fmt: skip
        finally:  # the probe's random draws must not advance the generators
            for g, st in states:
                g.set_state(st)
        pos_of = {self.instrs[i][3]: pos for pos, i in enumerate(order)}
        free: dict[tuple[Any, ...], list[Any]] = {}
        pending: list[tuple[int, tuple[Any, ...], Any]] = []  # (dead after pos, key, buffer)
        for o in buffered:
            pos = pos_of[o]
            for item in [p for p in pending if p[0] < pos]:
                free.setdefault(item[1], []).append(item[2])
                pending.remove(item)
            arr = values[o]
            key = (arr.shape, arr.dtype.str)
            ns[f"B{o}"] = free[key].pop() if free.get(key) else np.empty_like(arr)
            dead = max([last[o], *(last[m] for m, v in values.items() if _shares(v, arr))])
            pending.append((dead, key, ns[f"B{o}"]))
        self.source = "\n".join([*head, *(b for _, b in body), ret])
        exec(builtins.compile(self.source, "<tg.compile>", "exec"), ns)  # noqa: S102
        return ns["run"]


def _shares(v: Any, arr: Any) -> bool:
    """Whether ``v`` (an array, or a tuple of them) may share memory with ``arr``."""
    if isinstance(v, tuple):
        return any(_shares(x, arr) for x in v)
    return isinstance(v, np.ndarray) and bool(np.may_share_memory(v, arr))


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


class CompiledStep:
    """A training step that replays a captured program (see the module docstring).

    >>> import tapegrad as tg
    >>> class Lin(tg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = tg.Parameter(tg.ones((3, 1)))
    ...     def forward(self, x):
    ...         return x @ self.w
    >>> m = Lin()
    >>> opt = tg.optim.SGD(m.parameters(), lr=0.1)
    >>> step = tg.compile(lambda x, y: ((m(x) - y) ** 2).mean(), m, opt)
    >>> x, y = tg.ones((4, 3)), tg.zeros((4, 1))
    >>> [round(step(x, y).item(), 4) for _ in range(4)]
    [9.0, 1.44, 0.2304, 0.0369]
    """

    def __init__(self, loss_fn: Callable[..., Tensor], model: Any, optimizer: Any) -> None:
        self.loss_fn = loss_fn
        self.model = model
        self.optimizer = optimizer
        self._programs: dict[Any, Any] = {}  # signature -> _Program (pending) | run fn | "eager"
        self._sources: dict[Any, str] = {}
        self._warned = False
        self._params: list[Any] = []
        self._layers: tuple[int, list[Any]] | None = None

    @property
    def source(self) -> str:
        """The generated code of the most recent compiled program."""
        return next(reversed(self._sources.values()), "")

    def __call__(self, *batch: Any) -> Tensor:
        inputs = [as_tensor(b) for b in batch]
        # one program per input signature and per train/eval state of the model's layers
        key = (tuple((t.shape, t.dtype.str) for t in inputs), self._modes())
        entry = self._programs.get(key)
        if callable(entry):
            loss, gs = entry([t._data for t in inputs])
            self._update(gs)
            return _wrap(loss.copy() if isinstance(loss, np.ndarray) else loss)
        if entry == "eager":
            return self._eager(inputs, None)[0]
        cap = _Capture()
        loss, prog = self._eager(inputs, cap)
        if entry is None:
            self._programs[key] = prog
        elif (diff := entry.difference(prog)) is None:
            self._params = [p for p, _ in prog.grad_slots]
            self._programs[key] = prog.build([t._data for t in inputs])
            self._sources[key] = prog.source
        else:
            self._programs[key] = "eager"
            if not self._warned:
                self._warned = True
                warnings.warn(
                    "tg.compile: the step's ops depend on the batch other than through tensor "
                    f"operands, so it keeps running eagerly: {diff}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return loss

    def _modes(self) -> tuple[bool, ...]:
        """The train/eval flags of the model's layers; the layer list is cached until any
        module's structure changes (flags themselves are read every step)."""
        modules = getattr(self.model, "modules", None)
        if modules is None:
            return ()
        cached = self._layers
        if cached is None or cached[0] != structure_version():
            cached = self._layers = (structure_version(), list(modules()))
        return tuple([m.training for m in cached[1]])

    def _update(self, gs: Any) -> None:
        """``optimizer.step`` on the program's gradients. An optimizer that keeps the base
        class's ``step`` gets ``update_one`` called directly (the gradients' shapes
        and presence were checked when the step was captured); any other gets ``step``."""
        opt = self.optimizer
        params = self._params
        if type(opt).step is not Optimizer.step:
            opt.step(Gradients(zip(params, (_wrap(g) for g in gs), strict=True)))
            return
        group_of = {id(p): group for group in opt.param_groups for p in group["params"]}
        for p, g in zip(params, gs, strict=True):
            group = group_of.get(id(p))
            if group is not None and p.requires_grad:
                opt.update_one(p, g, group)

    def _eager(self, inputs: list[Tensor], cap: _Capture | None) -> tuple[Tensor, Any]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        if cap is None:
            with Tape() as tape:
                loss = self.loss_fn(*inputs)
            grads = tape.gradient(loss, self.model)
            self.optimizer.step(grads)
            return loss, None
        with cap:
            with Tape() as tape:
                loss = self.loss_fn(*inputs)
            grads = tape.gradient(loss, self.model)
        prog = _Program(cap, inputs, params, loss, grads)
        self.optimizer.step(grads)
        return loss, prog


def compile(loss_fn: Callable[..., Tensor], model: Any, optimizer: Any) -> CompiledStep:
    """A training step ``step(*batch) -> loss`` that replays a captured forward+backward program.

    ``loss_fn(*batch)`` computes the loss with ``model``; each call also applies
    ``optimizer.step`` to the gradients of ``model``'s parameters. Results equal the eager step
    exactly (same kernels, same order).
    """
    return CompiledStep(loss_fn, model, optimizer)
