"""Tape replay: capture a training step as a straight-line program and run it again.

``tg.compile(step_fn)`` returns a step function. ``step_fn(*batch)`` is an ordinary eager step:
any number of tapes, ``tape.gradient`` calls and ``optimizer.step(grads)`` calls (a GAN's
discriminator and generator updates, a scheduler's learning rate, clipped gradients), returning
its losses. ``tg.compile(loss_fn, model, optimizer)`` is the one-tape, one-optimizer case.

The first calls run eagerly while every primitive that runs, forward and backward, every
optimizer update and every in-place update of a module's state (batch norm's running
statistics) is captured. Two captures with different batches must agree op for op: then the
step is compiled to one generated Python function (``step.source`` shows it) that calls the
primitives' forwards, their VJPs (which the engine captures during backward on arrays) and the
optimizers' per-parameter updates directly: no Tensors, no tape, no per-op bookkeeping,
preallocated output buffers for elementwise kernels.

A step whose ops depend on the batch other than through tensor operands (an integer index taken
from the labels, a mask made with numpy, Python control flow on values) captures differently
each time; it is detected and keeps running eagerly, with one warning that names the op, the
line and the fix. Input shapes or dtypes, or the train/eval state of the modules the step
calls, that change trigger a new capture (one program per signature and state).
"""

from __future__ import annotations

import builtins
import itertools
import linecache
import math
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from . import _autodiff, _fuse, _fused_update
from ._autodiff import Tape
from ._backend import np
from ._creation import Generator
from ._program import Op, leaves, rule
from ._tensor import Tensor, _wrap
from .nn._hooks import on_call
from .ops._common import as_tensor
from .optim._optimizer import on_update

# a step of backward on arrays, called like a primitive's forward: ``fwd(*ins, **kw)``
_ARRAY_OPS: dict[tuple[int, Any], Op] = {}

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


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):  # NaN is the same NaN
        return isinstance(b, float) and math.isnan(b)
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return a is b


class _Update(Op):
    """An optimizer's per-parameter update as a program instruction:
    ``fwd(parameter, gradient array, group)`` is the optimizer's ``update_one``."""

    __slots__ = ("opt",)

    def __init__(self, opt: Any, fwd: Any = None, name: str = "update_one") -> None:
        # or a compiled loop (_fused_update.update); it writes the parameter, its first operand
        super().__init__(opt.update_one if fwd is None else fwd,
                         f"{type(opt).__name__}.{name}", inplace=True)
        self.opt = opt


class _Ref:
    """A value compared by identity between two captures (an optimizer's parameter group,
    whose learning rate a scheduler may change between steps)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ref) and other.v is self.v

    def __hash__(self) -> int:
        return id(self.v)

    def __repr__(self) -> str:
        return f"<the same {type(self.v).__name__}>"


class _GroupAt:
    """An optimizer's parameter group by its place, looked up when the program runs:
    ``load_state_dict`` replaces the group dicts, a scheduler then sets the new ones' rate."""

    __slots__ = ("k", "opt")

    def __init__(self, opt: Any, k: int) -> None:
        self.opt = opt
        self.k = k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _GroupAt) and other.opt is self.opt and other.k == self.k

    def __hash__(self) -> int:
        return hash((id(self.opt), self.k))

    def __repr__(self) -> str:
        return f"<{type(self.opt).__name__}.param_groups[{self.k}]>"


def _effect(prim: Any, kw: dict[str, Any]) -> bool:
    """Whether a call must run although nothing reads its result: an in-place update (an
    in-place primitive, an optimizer update) or a random draw (it moves a generator)."""
    return prim.inplace or any(isinstance(v, Generator) for v in kw.values())


def _owner(a: Any) -> Any:
    """The array that owns ``a``'s memory (``a`` itself unless it is a view)."""
    while isinstance(a, np.ndarray) and isinstance(a.base, np.ndarray):
        a = a.base
    return a


class _Program(list):  # the capture sink: the engine calls append(...) for every primitive call
    """One captured step, turned into slots and instructions as it runs.

    Nothing of the step is held: values are found by the identity of their Tensor or their
    array, checked through weak references, so a capture keeps no more memory alive than the
    eager step itself (holding every intermediate until the end would leave the allocator's
    heap with a large free region that later steps then fill page by page)."""

    def __init__(self, inputs: list[Tensor]) -> None:
        super().__init__()
        # per slot: ("input", k) | ("leaf", Tensor) | ("op", instruction index)
        self.kinds: list[tuple[str, Any]] = []
        self.instrs: list[tuple[Any, tuple[Any, ...], dict[str, Any], int]] = []
        self.where: list[str] = []
        self.meta: dict[int, tuple[Any, ...]] = {}  # op slot -> (shape, dtype, strides, ufunc)
        self.owner_of: dict[int, int] = {}  # op slot -> the slot that owns its memory
        self.outputs: Any = None
        self.problem: str | None = None
        self._by_tensor: dict[int, tuple[Any, int]] = {}
        self._by_array: dict[int, tuple[Any, int]] = {}
        self._seen: dict[int, int] = {}  # leaf slot -> its version when first met
        self._bumps: dict[int, int] = {}  # leaf slot -> in-place changes the capture saw
        self._owners: dict[int, tuple[Any, int]] = {}  # id(owner array) -> (ref, slot)
        for k, t in enumerate(inputs):
            self._bind(t, self._new("input", k))

    # -- slots --------------------------------------------------------------------------------
    def _new(self, kind: str, v: Any) -> int:
        self.kinds.append((kind, v))
        return len(self.kinds) - 1

    @staticmethod
    def _ref(x: Any) -> Any:
        try:
            return weakref.ref(x)
        except TypeError:  # a numpy scalar: held (it is small), compared by identity
            return lambda x=x: x

    def _bind(self, t: Tensor, s: int) -> None:
        self._by_tensor[id(t)] = (self._ref(t), s)
        self._by_array[id(t._data)] = (self._ref(t._data), s)

    def _find(self, table: dict[int, tuple[Any, int]], x: Any) -> int | None:
        hit = table.get(id(x))
        return hit[1] if hit is not None and hit[0]() is x else None

    def slot(self, t: Tensor) -> int:
        s = self._find(self._by_tensor, t)
        if s is None:  # a detached view or an array wrapped by backward: found by its array
            s = self._find(self._by_array, t._data)
        if s is None:  # made outside the program: a parameter, a module's state, a constant
            s = self._new("leaf", t)
            self._seen[s] = t._version
            self._bind(t, s)
            own = _owner(t._data)  # views of a parameter made by ops share its owner
            if isinstance(own, np.ndarray) and self._find(self._owners, own) is None:
                self._owners[id(own)] = (self._ref(own), s)
                self.owner_of[s] = s
        return s

    # -- the capture --------------------------------------------------------------------------
    def call(self, fn: Callable[..., Any], step: Any, xp: Any, args: tuple[Any, ...], kw: Any) -> Any:
        """One array step of backward (a VJP, unbroadcast, cast, add), run and recorded with
        its arrays wrapped in Tensors: the program finds their slots by array identity.
        ``step`` is ``(primitive, input index)`` for a VJP, else the engine step's name."""
        out = fn(xp, *args, **kw)
        op = _ARRAY_OPS.get((id(fn), step))
        if op is None:  # an add of gradients is np.add: a program can give it an output buffer
            form = np.add if step == "add" else (lambda *a, **k: fn(xp, *a, **k))
            if isinstance(step, tuple):
                prim, i = step
                name = prim.name if i is None else f"{prim.name} vjp{i}"
                op = Op(form, name, prim, i)
            else:
                op = Op(form, step)
            _ARRAY_OPS[(id(fn), step)] = op
        ins = tuple(x if x is None or isinstance(x, (int, float)) else _wrap(x) for x in args)
        self.append((op, ins, kw, _wrap(out)))
        return out

    def append(self, item: Any) -> None:
        prim, ins, kw, out = item
        args = tuple(self._operand(x) for x in ins)
        if prim.inplace and args and args[0][0] == "s":
            self._changed(args[0][1])
        self._instr(prim, args, kw, out)

    def _operand(self, x: Any) -> tuple[str, Any]:
        if isinstance(x, Tensor):
            return ("s", self.slot(x))
        if isinstance(x, np.ndarray):  # a raw array: an input's or an op's when it is one
            s = self._find(self._by_array, x)
            if s is not None:
                return ("s", s)
        return ("v", x)

    def update(self, opt: Any, updates: dict[int, _Update], p: Tensor, g: Any, group: Any) -> None:
        u = updates.get(id(opt))
        if u is None:
            u = updates[id(opt)] = _Update(opt)
        ps, gs = self.slot(p), self.slot(_wrap(g))
        self._changed(ps)
        k = next((k for k, gr in enumerate(opt.param_groups) if gr is group), None)
        where = _Ref(group) if k is None else _GroupAt(opt, k)
        self._instr(u, (("p", ps), ("s", gs), ("v", where)), {}, None)

    def _changed(self, s: int) -> None:
        if self.kinds[s][0] == "leaf":
            self._bumps[s] = self._bumps.get(s, 0) + 1

    def _instr(self, prim: Any, args: tuple[Any, ...], kw: dict[str, Any], out: Any) -> None:
        o = self._new("op", len(self.instrs))
        self.instrs.append((prim, args, kw, o))
        self.where.append(_user_line())
        if out is None:
            return
        self._bind(out, o)
        v = out._data
        if isinstance(v, (np.ndarray, np.generic)):
            self.meta[o] = (
                v.shape,
                v.dtype,
                getattr(v, "strides", ()),
                isinstance(prim.fwd, np.ufunc),
            )
            own = _owner(v)
            hit = self._find(self._owners, own)
            if hit is None:
                self._owners[id(own)] = (self._ref(own), o)
                hit = o
            self.owner_of[o] = hit

    def finish(self, result: Any) -> None:
        """The step's result (Tensors in tuples, lists and dicts) becomes the program's outputs;
        a parameter or state tensor changed in place by code the capture did not see (its
        version moved more often than the captured updates) makes the step uncompilable."""
        self.outputs = _tree(result, self.slot)
        for s, v0 in self._seen.items():
            t = self.kinds[s][1]
            if t._version - v0 != self._bumps.get(s, 0):
                self.problem = (
                    f"a tensor of shape {t.shape} was changed in place by code that is not a "
                    "tapegrad op or an optimizer's step (e.g. x._data[...] = ..., or an "
                    "optimizer that overrides step()). Fix: change it with tapegrad ops or "
                    "an optimizer's step, or keep that change outside the step"
                )
                return
        self._by_tensor.clear()
        self._by_array.clear()
        self._owners.clear()

    # -- comparing two captures ---------------------------------------------------------------
    def difference(self, other: _Program) -> str | None:
        """None when two captures agree op for op; else which op differs, where the user's code
        made it, and why that keeps the step from compiling."""
        if self.problem or other.problem:
            return self.problem or other.problem
        n = min(len(self.instrs), len(other.instrs))
        for i in range(n):
            (pa, aa, ka, _), (pb, ab, kb, _) = self.instrs[i], other.instrs[i]
            if pa is not pb:
                why = f"it is '{pa.name}' in one call and '{pb.name}' in the other"
                fix = "Python control flow on tensor values (if/while on .item()) changes the ops"
            elif not _same(ka, kb):
                k = next(k for k in {**ka, **kb} if not _same(ka.get(k), kb.get(k)))
                why = f"its argument {k}= differs between calls ({_short(ka.get(k))} and {_short(kb.get(k))})"
                fix = "pass values that change per batch as tensor operands, not as Python values"
            elif not _same(aa, ab) or not all(
                self._same_slot(other, x[1]) for x in aa if x[0] in "sp"
            ):
                why = "an operand that is a constant to the program (made outside tapegrad's ops, e.g. with numpy, or from .numpy()/.item()) differs between calls"
                fix = "compute it with tapegrad ops on the step's inputs, or pass it as an input of the step"
            else:
                continue
            return f"op {i} '{pa.name}' at {self.where[i]}: {why}. Fix: {fix}"
        if len(self.instrs) != len(other.instrs):
            longer = self.where if len(self.where) > n else other.where
            return (
                f"the two calls ran {len(self.instrs)} and {len(other.instrs)} ops (the first "
                f"extra op at {longer[n]}). Fix: Python control flow on tensor values changes "
                "the ops; keep it outside the step"
            )
        if not _same(self.outputs, other.outputs):
            return "the step returned different things in the two calls. Fix: return the same tensors every call"
        return None

    def _same_slot(self, other: _Program, s: int) -> bool:
        (ka, va), (kb, vb) = self.kinds[s], other.kinds[s]
        if ka != kb:
            return False
        if ka != "leaf" or va is vb:
            return True
        return _same(va._data, vb._data)

    # -- code generation ----------------------------------------------------------------------
    def fuse(self, inputs: list[Any]) -> None:
        """Elementwise chains become compiled loops, and SGD's and Adam's updates too: each
        update instruction is replaced, in place and with its operands, by one that runs the
        optimizer's arithmetic as a loop for that parameter (``tapegrad._fuse``)."""
        _fuse.fuse(self, inputs)
        if not _fuse.enabled():  # numba not selected: every update keeps its own code
            return
        for i, (prim, args, kw, o) in enumerate(self.instrs):
            if isinstance(prim, _Update) and prim.fwd == prim.opt.update_one:
                loop = _fused_update.update(prim.opt)
                if loop is not None:
                    self.instrs[i] = (_Update(prim.opt, loop, "update (fused)"), args, kw, o)

    def build(self, first: _Program) -> Callable[..., Any]:
        """Generate ``run(inputs) -> output arrays`` as straight-line code.

        A leaf that is the same tensor in both captures (a parameter, a module's state, a
        tensor made once outside the step) is read by identity every run; any other is a
        constant. Dead ops are dropped (updates and random draws are never dead); each
        intermediate is deleted after its last use, so the program holds no more than eager
        does; elementwise kernels write into buffers kept between steps, and a buffer whose
        value (and every view of it) is dead is reused by a later kernel of the same shape,
        dtype and layout.
        """
        outputs = set(leaves(self.outputs))
        live = set(outputs)
        for prim, args, kw, o in reversed(self.instrs):  # dead-code elimination
            if o in live or _effect(prim, kw):
                live.add(o)
                live.update(v for k, v in args if k in "sp")
        order = self._early_updates(
            self._small_first([i for i, ins in enumerate(self.instrs) if ins[3] in live])
        )
        ufunc = {i for i in order if self.meta.get(self.instrs[i][3], (0, 0, 0, False))[3]
                 and self.instrs[i][3] not in outputs and not self.instrs[i][2]}  # fmt: skip
        forever = len(order)
        last: dict[int, int] = {}  # op slot -> position of its last use
        for pos, i in enumerate(order):  # a value nothing reads is not even named
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
            if s not in live or kind == "op":
                continue
            if kind == "input":
                head.append(f"    v{s} = inputs[{v}]")
            elif first.kinds[s][1] is v:  # the same tensor both times: read it every run
                ns[f"L{s}"] = v
                head.append(f"    v{s} = L{s}._data")
            else:
                ns[f"C{s}"] = v._data
                head.append(f"    v{s} = C{s}")
        # buffers: one per elementwise kernel, shared by kernels whose values do not overlap
        pos_of = {self.instrs[i][3]: pos for pos, i in enumerate(order)}
        group_end: dict[int, int] = {}  # owner slot -> last use of any value on its memory
        for o, own in self.owner_of.items():
            if o in last:
                group_end[own] = max(group_end.get(own, -1), last[o])
        free: dict[tuple[Any, ...], list[Any]] = {}
        pending: list[tuple[int, tuple[Any, ...], Any]] = []  # (dead after pos, key, buffer)
        for i in sorted(ufunc, key=lambda i: pos_of[self.instrs[i][3]]):
            o = self.instrs[i][3]
            pos = pos_of[o]
            for item in [p for p in pending if p[0] < pos]:
                free.setdefault(item[1], []).append(item[2])
                pending.remove(item)
            shape, dtype, strides, _ = self.meta[o]
            key = (shape, dtype.str, _layout(strides))
            ns[f"B{o}"] = free[key].pop() if free.get(key) else _empty(shape, dtype, key[2])
            pending.append((max(last[o], group_end.get(o, -1)), key, ns[f"B{o}"]))

        body: list[str] = []
        for pos, i in enumerate(order):
            prim, args, kw, o = self.instrs[i]
            ns[f"f{i}"] = prim.fwd
            argstr = []
            for k, v in args:
                if k == "s":
                    argstr.append(f"v{v}")
                elif k == "p":  # the parameter itself (an optimizer updates it in place)
                    ns[f"L{v}"] = self.kinds[v][1]
                    argstr.append(f"L{v}")
                elif isinstance(v, _GroupAt):  # the group in place now
                    ns[f"o{i}"] = v.opt
                    argstr.append(f"o{i}.param_groups[{v.k}]")
                else:
                    val = v.v if isinstance(v, _Ref) else v
                    ns[f"a{i}_{len(argstr)}"] = val
                    argstr.append(f"a{i}_{len(argstr)}")
            for name, val in kw.items():
                ns[f"k{i}_{name}"] = val
                argstr.append(f"{name}=k{i}_{name}")
            if i in ufunc:
                argstr.append(f"out=B{o}")
            elif isinstance(prim, _fuse.FusedKernel):  # write over an operand dead from here
                for n in prim.donors:
                    k, v = args[n]
                    if (
                        k == "s" and self.kinds[v][0] == "op" and f"B{v}" not in ns
                        and self.owner_of.get(v, v) == v and last.get(v) == pos
                        and group_end.get(v, pos) == pos
                        # no other operand reads its memory (a row of it, read for every row)
                        and not any(k2 == "s" and v2 != v and self.owner_of.get(v2, v2) == v
                                    for k2, v2 in args)
                    ):  # fmt: skip
                        argstr.append(f"o0=v{v}")
                        break
            target = f"v{o} = " if o in last else ""
            body.append(f"    {target}f{i}({', '.join(argstr)})  # {prim.name}")
            gone = dies_at.get(pos)
            if gone:  # dropping a name only drops a reference: a view keeps its base alive
                body.append("    del " + ", ".join(f"v{m}" for m in gone))
        outs = list(leaves(self.outputs))
        ret = "    return (" + "".join(f"v{s}, " for s in outs) + ")"
        self.source = "\n".join([*head, *body, ret])
        exec(builtins.compile(self.source, "<tg.compile>", "exec"), ns)  # noqa: S102
        return ns["run"]

    def _small_first(self, order: list[int]) -> list[int]:
        """The VJPs of one node (consecutive VJP instructions of one primitive reading the same
        output gradient) ordered by the size of what they make, smallest first: a layer's weight and
        bias gradients are computed (and their updates can run) before its input gradient is
        allocated, and inputs the small ones were the last to read are freed by then. They
        read only the node's saved values, so the order changes no number."""

        def node(i: int) -> Any:
            op, args, _, o = self.instrs[i]
            prim, vjp = rule(op)
            if vjp is None or not args or args[0][0] != "s" or o not in self.meta:
                return None
            return (prim, args[0][1])

        def size(i: int) -> int:
            return math.prod(self.meta[self.instrs[i][3]][0])

        out: list[int] = []
        for k, run in itertools.groupby(order, key=node):
            items = list(run)
            out += items if k is None else sorted(items, key=size)
        return out

    def _early_updates(self, order: list[int]) -> list[int]:
        """Each optimizer update moved up to just after its gradient is computed and the last
        earlier op that reads the parameter (or a view of it), so its gradient is freed there
        rather than held until every gradient exists (eager's ``step`` after ``gradient``). The
        numbers are unchanged: every op still reads the parameter before or after the same
        updates as in eager."""
        group = {s: self.owner_of.get(s, s) for s in range(len(self.kinds))}
        out: list[int] = []
        for i in order:
            prim, args, _, _ = self.instrs[i]
            if not isinstance(prim, _Update):
                out.append(i)
                continue
            p, g = group[args[0][1]], args[1][1]
            at = len(out)
            while at > 0:
                _, prev_args, _, prev_o = self.instrs[out[at - 1]]
                if prev_o == g or any(k in "sp" and group[v] == p for k, v in prev_args):
                    break
                at -= 1
            out.insert(at, i)
        return out


def _layout(strides: tuple[int, ...]) -> tuple[int, ...]:
    """The order of the axes from the largest stride down (numpy's order="K" layout)."""
    return tuple(sorted(range(len(strides)), key=lambda d: -abs(strides[d])))


def _empty(shape: tuple[int, ...], dtype: Any, order: tuple[int, ...]) -> Any:
    """An uninitialised array laid out as a kernel's output was (C order, or its transpose)."""
    base = np.empty([shape[d] for d in order], dtype)
    return base.transpose(np.argsort(order)) if order != tuple(range(len(shape))) else base


def _tree(x: Any, leaf: Callable[[Tensor], Any]) -> Any:
    """The structure of a step's result with each Tensor replaced by ``leaf(tensor)``."""
    if isinstance(x, Tensor):
        return ("t", leaf(x))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_tree(v, leaf) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _tree(v, leaf)) for k, v in x.items()))
    if x is None:
        return ("none", None)
    raise TypeError(
        f"tg.compile: a step returns Tensors (alone or in tuples, lists and dicts) or None, got "
        f"{type(x).__name__}; return the tensor and call .item() on the result outside the step"
    )


def _rebuild(tree: Any, values: Any) -> Any:
    kind, v = tree
    if kind == "t":
        a = next(values)
        return _wrap(a.copy() if isinstance(a, np.ndarray) else a)
    if kind == "tuple":
        return tuple(_rebuild(x, values) for x in v)
    if kind == "list":
        return [_rebuild(x, values) for x in v]
    if kind == "dict":
        return {k: _rebuild(x, values) for k, x in v}
    return None


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


class _Entry:
    """The program(s) for one input signature and one train/eval state of the modules the
    step calls: the first capture while the second is awaited, then the compiled function,
    or "eager"."""

    __slots__ = ("modes", "modules", "prog", "run", "source", "tree")

    def __init__(self, modules: list[Any], prog: _Program) -> None:
        self.modules = modules
        self.modes = tuple([m.training for m in modules])
        self.prog: _Program | None = prog
        self.run: Any = None
        self.source = ""
        self.tree: Any = None

    def matches(self) -> bool:
        return tuple([m.training for m in self.modules]) == self.modes


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

    def __init__(self, step_fn: Callable[..., Any]) -> None:
        self.step_fn = step_fn
        self._programs: dict[Any, list[_Entry]] = {}  # input signature -> entries
        self._warned = False
        self._updates: dict[int, _Update] = {}
        self._latest = ""

    @property
    def source(self) -> str:
        """The generated code of the most recent compiled program."""
        return self._latest

    @property
    def fused_kernels(self) -> int:
        """How many fused elementwise loops the most recent compiled program runs (0 unfused)."""
        return self.source.count("  # fused[")

    @property
    def _sources(self) -> dict[Any, str]:
        return {(k, e.modes): e.source for k, es in self._programs.items() for e in es if e.source}

    def __call__(self, *batch: Any) -> Any:
        inputs = [b if type(b) is Tensor else as_tensor(b) for b in batch]
        arrays = [t._data for t in inputs]
        # one program per input signature and per train/eval state of the modules called
        # (C order too: fused loops read an input as a flat array)
        key = tuple([(a.shape, a.dtype, a.flags.c_contiguous) for a in arrays])
        entries = self._programs.get(key)
        if entries is None:
            entries = self._programs[key] = []
        entry = None
        for e in entries:
            if e.matches():
                entry = e
                break
        if entry is not None and entry.run is not None:
            if entry.run == "eager":
                return self.step_fn(*inputs)
            return _rebuild(entry.tree, iter(entry.run(arrays)))
        result, prog, modules = self._capture(inputs)
        if entry is None:
            entries.append(_Entry(modules, prog))
            return result
        assert entry.prog is not None
        first, entry.prog = entry.prog, None
        diff = first.difference(prog)
        if diff is None:
            prog.fuse([t._data for t in inputs])  # elementwise chains -> compiled loops
            entry.run, entry.tree = prog.build(first), prog.outputs
            entry.source = self._latest = prog.source
            return result
        entry.run = "eager"
        if not self._warned:
            self._warned = True
            warnings.warn(
                "tg.compile: the step's ops depend on the batch other than through tensor "
                f"operands, so it keeps running eagerly: {diff}",
                RuntimeWarning,
                stacklevel=2,
            )
        return result

    def _capture(self, inputs: list[Tensor]) -> tuple[Any, _Program, list[Any]]:
        """Run the step eagerly while capturing its primitives, optimizer updates and the
        modules it calls."""
        prog = _Program(inputs)
        me = threading.get_ident()
        updates = self._updates

        def on_update_call(opt: Any, p: Tensor, g: Any, group: Any) -> None:
            if threading.get_ident() == me:
                prog.update(opt, updates, p, g, group)

        called: dict[int, Any] = {}

        def on_module(m: Any) -> None:
            called[id(m)] = m

        if _autodiff.is_capturing():
            raise RuntimeError("tg.compile: captures do not nest")
        with on_update(on_update_call), on_call(on_module):
            _autodiff.start_capture(prog)
            try:
                result = self.step_fn(*inputs)
            finally:
                _autodiff.stop_capture()
        prog.finish(result)
        return result, prog, list(called.values())


def _one_tape_step(
    loss_fn: Callable[..., Tensor], model: Any, optimizer: Any
) -> Callable[..., Tensor]:
    def step(*batch: Any) -> Tensor:
        with Tape() as tape:
            loss = loss_fn(*batch)
        optimizer.step(tape.gradient(loss, model))
        return loss

    return step


def compile(step_fn: Callable[..., Any], model: Any = None, optimizer: Any = None) -> CompiledStep:
    """A training step that replays a captured program (docs/compile.md).

    ``tg.compile(step_fn)``: ``step_fn(*batch)`` is a whole eager training step (any tapes,
    ``tape.gradient`` and ``optimizer.step`` calls; several models and optimizers) that returns
    its losses (a Tensor, or Tensors in a tuple, list or dict); the compiled ``step(*batch)``
    returns the same structure. ``tg.compile(loss_fn, model, optimizer)``: ``loss_fn(*batch)``
    computes the loss with ``model``; each call applies ``optimizer.step`` to the gradients of
    ``model``'s parameters and returns the loss. Results equal the eager step exactly (same
    kernels, same order), the random stream after it too.

    With numba, chains of elementwise ops (bias adds, ReLU, the arithmetic operators, their
    VJPs, bias-gradient sums, the MSE loss) run as one compiled loop each, and SGD's and
    Adam's updates as one loop per parameter; the loops repeat numpy's operations in numpy's
    order, so results stay equal bit for bit. ``step.fused_kernels`` counts the loops
    (``# fused[...]`` lines in ``step.source``); ``TAPEGRAD_KERNELS=numpy`` turns them off.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(2))
    >>> opt = tg.optim.SGD([w], lr=0.25)
    >>> def train_step(x):
    ...     with tg.Tape() as tape:
    ...         loss = (w * x).sum()
    ...     opt.step(tape.gradient(loss))
    ...     return loss
    >>> step = tg.compile(train_step)
    >>> [step(tg.ones(2)).item() for _ in range(3)], w.tolist()
    ([2.0, 1.5, 1.0], [0.25, 0.25])
    """
    if model is None and optimizer is None:
        return CompiledStep(step_fn)
    if model is None or optimizer is None:
        raise TypeError(
            "tg.compile: pass a whole step, tg.compile(step_fn), or a loss with its model and "
            "optimizer, tg.compile(loss_fn, model, optimizer); got only "
            + ("an optimizer" if model is None else "a model")
        )
    return CompiledStep(_one_tape_step(step_fn, model, optimizer))
