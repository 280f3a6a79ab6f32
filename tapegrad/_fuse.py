"""Elementwise fusion for ``tg.compile``: chains of elementwise ops become one compiled loop.

``fuse(program, example_inputs)`` rewrites a captured program (``_compile._Program``) before it
is turned into code. Instructions whose primitive declares its rule as an expression
(``defprim(..., expr=...)``: the arithmetic operators, ReLU, the VJPs of tanh, sigmoid, exp,
sqrt, ReLU and MSE, the bias add of ``nn.linear`` and the sums that undo a bias's broadcasting)
and that run over one domain (an output shape and dtype) are grouped; each group becomes one
numba loop that reads its inputs once and writes only the values used outside it. A GEMM, a
transcendental function (numpy's ``exp``/``tanh`` are not numba's, bit for bit) or any op with
no expression ends a chain. Grouping reads each value's shape, dtype and layout from the
capture's ``meta`` (nothing runs), and no loop reaches across an optimizer update or an
in-place op (``_fused_update`` gives optimizer updates their compiled loops).

Bit-for-bit equality with the unfused program is kept by writing every operation of the numpy
code in the same order and dtype: constants are cast to the arrays' dtype as numpy casts a
Python number, numba runs without fastmath (LLVM fuses no multiply-add then) and with numpy's
error model (division by zero gives inf, as numpy), and a sum over leading axes adds the rows in
numpy's order, starting from zero. ``tests/test_fuse.py`` checks equality bit for bit.

Kernels are generated as source, compiled with ``numba.njit(cache=True)`` from a file in the
kernel runtime's cache folder (``_kernels.runtime.cache_dir``: named after a digest of the kernel
modules, so a change to ``_kernels/reduce.py``, which loops call, starts afresh) named by the
source's digest (``runtime.text_digest``), so numba's disk cache serves the next process; a
file whose text is not that source is rewritten, never run. Loops are kept per process by
source. Without numba, or with ``TAPEGRAD_KERNELS=numpy``, programs run unfused.
"""

from __future__ import annotations

import builtins
import math
import operator
import threading
import warnings
from collections.abc import Callable
from typing import Any

from . import _kernels
from ._autodiff._expr import Expr, render
from ._backend import np
from ._program import Op, leaves, rule
from ._source import load as _load

__all__ = ["fuse", "FusedKernel"]


def _c(v: Any) -> str:
    """A Python number as numpy casts it next to an array: to the array's dtype ``T``."""
    return f"T({float(v)!r})"


def _rule(op: Any) -> tuple[Expr | None, bool]:
    """The expression an instruction runs, as its primitive declares it (``defprim(...,
    expr=...)``), and whether it is a forward; (None, False) when none is declared."""
    prim, i = rule(op)
    ew = None if prim is None else prim.expr
    if ew is None:
        return None, False
    if i is None:
        return ew.fwd, True
    return (ew.vjps[i] if i < len(ew.vjps) else None), False


def _sums_rows(op: Any, e: Expr | None) -> bool:
    """A sum over all leading axes (a bias's gradient, or the engine's unbroadcast): an extra
    output of the chain that makes the value summed."""
    return (e is not None and e.op == "sum_rows") or (
        isinstance(op, Op) and op.prim is None and op.name == "unbroadcast")


def _total(e: Expr | None) -> tuple[Expr, Expr] | None:
    """``(d, scale)`` of an expression ``sumsq(d) * scale`` (the MSE loss), else None."""
    if e is None or e.op != "*" or e.args[0].op != "sumsq" or not e.args[1].is_number():
        return None
    return e.args[0].args[0], e.args[1]


_GETITEM = Op(operator.getitem, "fused output")
_CALLS: dict[Any, Op] = {}  # a split primitive's call (nn.linear's GEMM) as an instruction


class FusedKernel(Op):
    """One fused loop: ``fwd(*operands)`` returns its output array, or a tuple of them."""

    __slots__ = ("donors", "members", "source")

    def __init__(
        self, fwd: Callable[..., Any], name: str, members: list[str], source: str,
        donors: tuple[int, ...] = (),
    ) -> None:  # fmt: skip
        super().__init__(fwd, name)
        self.members = members
        self.source = source
        # operands of the loop's shape, read at index k only in iteration k: the loop may
        # write its first output over one of them (``fwd(..., o0=operand)``) when it is dead
        self.donors = donors


# -- what grouping knows of each value: its description, no value -----------------------------
class _Like:
    """A value as the capture described it (``_Program.meta``): shape, dtype and layout."""

    __slots__ = ("c_contiguous", "dtype", "ndim", "shape", "size")

    def __init__(self, shape: tuple[int, ...], dtype: Any, strides: tuple[int, ...]) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.c_contiguous = _c_contiguous(self.shape, tuple(strides), self.dtype.itemsize)

    @classmethod
    def of(cls, a: Any) -> _Like | None:
        if not isinstance(a, (np.ndarray, np.generic)):
            return None
        return cls(a.shape, a.dtype, getattr(a, "strides", ()))


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """numpy's C-contiguous flag from a shape and strides (axes of length 1 may have any)."""
    if 0 in shape:
        return True
    if len(strides) != len(shape):
        return not shape
    step = itemsize
    for n, st in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1:
            if st != step:
                return False
            step *= n
    return True


def _values(prog: Any, inputs: list[Any]) -> dict[int, _Like]:
    """Each slot's description: the example inputs', the leaves' arrays', and the ops' from the
    capture's ``meta`` (no op is run: a probe would hold every value of the step at once)."""
    values: dict[int, _Like] = {}
    for s, (kind, v) in enumerate(prog.kinds):
        like = None
        if kind == "input":
            like = _Like.of(inputs[v])
        elif kind == "leaf":
            like = _Like.of(v._data)
        elif s in prog.meta:
            shape, dtype, strides, _ = prog.meta[s]
            like = _Like(shape, dtype, strides)
        if like is not None:
            values[s] = like
    return values


# -- grouping -----------------------------------------------------------------------------------
_FULL, _ROW, _SCALAR, _CONST = "full", "row", "scalar", "const"


def _classify(v: Any, shape: tuple[int, ...], dtype: Any) -> str | None:
    """How an operand meets a loop over ``shape``: the same shape, one value per last-axis
    position (a bias), one value, or a Python number; None when the loop cannot read it."""
    if isinstance(v, (bool, np.generic)) or v is None:  # a numpy scalar keeps its own dtype
        return None
    if isinstance(v, (int, float)):
        return _CONST if abs(v) < 2**53 or not isinstance(v, int) else None
    if not isinstance(v, _Like) or v.dtype != dtype:  # a raw array operand is a constant
        return None
    if v.size == 1 and v.ndim <= len(shape):
        return _SCALAR
    if not v.c_contiguous:
        return None
    if v.shape == shape:
        return _FULL
    if (
        len(shape) >= 2
        and v.shape[-1] == shape[-1]
        and v.size == shape[-1]
        and v.ndim <= len(shape)
    ):
        return _ROW
    return None


class _Group:
    def __init__(self, pos: int, shape: tuple[int, ...], dtype: Any) -> None:
        self.pos = pos  # where the group runs: its first member's place
        self.shape = shape
        self.dtype = dtype
        self.members: list[int] = []  # instruction indices, in order
        self.reductions: list[int] = []
        self.slots: set[int] = set()  # values the group computes
        self.reads: set[int] = set()  # values it reads from outside
        self.totals: set[int] = set()  # values known only after its loop (the MSE loss)
        self.last = pos  # its last member's place in the program

    def size(self) -> int:
        return len(self.members) + len(self.reductions)


def _describe(prog: Any, i: int, values: dict[int, Any]) -> tuple[str, Any] | None:
    """("map", (shape, dtype, operand positions)) or ("sum", (input slot, shape, dtype)) for an
    op a loop can run, else None."""
    prim, args, kw, o = prog.instrs[i]
    out = values.get(o)
    if not isinstance(out, _Like) or out.dtype not in (np.float32, np.float64):
        return None
    e, forward = _rule(prim)
    if _sums_rows(prim, e):
        g = values.get(args[0][1]) if args[0][0] == "s" else None  # the gradient summed
        if (
            isinstance(g, _Like) and g.ndim >= 2 and g.c_contiguous
            and g.dtype == out.dtype and g.shape[-1] >= 2  # a last axis of 1 numpy sums pairwise
            and out.size == g.shape[-1] and out.shape[-1] == g.shape[-1]
        ):  # fmt: skip
            return ("sum", (args[0][1], g.shape, g.dtype))
        return None
    if e is None:
        return None
    if any(_classify(kw.get(n), out.shape, out.dtype) != _CONST for n in e.params()):
        return None  # a param the loop reads as a constant: a Python number
    reads = e.reads(forward)
    total = _total(e)
    if total is not None:  # sum(d * d) * scale: the squares summed in numpy's order
        x = values.get(args[reads[0]][1]) if reads and args[reads[0]][0] == "s" else None
        if (
            out.ndim == 0 and isinstance(x, _Like) and x.dtype == out.dtype
            and _classify(x, x.shape, x.dtype) == _FULL
            and all(args[p][0] == "s" and _classify(values.get(args[p][1]), x.shape, x.dtype)
                    for p in reads)
        ):  # fmt: skip
            return ("total", (x.shape, x.dtype, reads))
        return None
    if not out.c_contiguous or any(n.op in ("sumsq", "sum_rows") for n in e.nodes()):
        return None
    if e.split() is not None:  # a call's output (N..., out) plus rows (out,): a bias
        ok = out.ndim >= 2 and all(
            p < len(args) and args[p][0] == "s"
            and _classify(values.get(args[p][1]), out.shape, out.dtype) == _ROW for p in reads
        )  # fmt: skip
        return ("map", (out.shape, out.dtype, reads)) if ok else None
    for p in reads:
        if p >= len(args):
            return None
        k, v = args[p]
        if _classify(values.get(v) if k == "s" else v, out.shape, out.dtype) is None:
            return None
    return ("map", (out.shape, out.dtype, reads))


def _groups(prog: Any, values: dict[int, Any]) -> list[_Group]:
    produced_at: dict[int, int] = {}  # slot -> instruction index that makes it
    for i, (_, _, _, o) in enumerate(prog.instrs):
        produced_at[o] = i
    groups: list[_Group] = []
    group_of: dict[int, _Group] = {}  # slot -> group computing it

    def ready(slot: int, g: _Group) -> bool:  # available where the group runs
        return slot in g.slots or produced_at.get(slot, -1) < g.pos

    barrier = -1  # the last op that changes memory in place: no loop reaches across it
    for i, (prim, args, _, o) in enumerate(prog.instrs):
        if _changes(prim):  # a loop runs where its first op was: it would read the old values
            barrier = i
            continue
        d = _describe(prog, i, values)
        if d is None:
            continue
        if d[0] == "sum":
            src, shape, dtype = d[1]
            g = group_of.get(src)
            if g is not None and g.pos > barrier and g.shape == shape and g.dtype == dtype:
                g.reductions.append(i)
                g.slots.add(o)
                g.last = i
                group_of[o] = g
            continue
        shape, dtype, reads = d[1]
        slots = [args[p][1] for p in reads if args[p][0] == "s"]
        best = None

        def fits(g: _Group | None) -> bool:
            return (
                g is not None and g.pos > barrier and g.shape == shape and g.dtype == dtype
                and all(ready(t, g) and t not in g.totals for t in slots)
            )  # fmt: skip

        if _rule(prim)[0].split() is None:  # type: ignore[union-attr] # a call runs first: it only starts a group
            for s in slots:
                g = group_of.get(s)
                if fits(g) and (best is None or g.pos > best.pos):  # type: ignore[union-attr]
                    best = g
            # or the group just before it, when they read the same values (MSE and its VJP)
            if best is None and groups and groups[-1].last == i - 1 and fits(groups[-1]):
                if groups[-1].reads.intersection(slots):
                    best = groups[-1]
        if best is None:
            best = _Group(i, shape, dtype)
            groups.append(best)
        best.members.append(i)
        best.last = i
        best.reads.update(t for t in slots if t not in best.slots)
        if d[0] == "total":
            best.totals.add(o)
        else:
            best.slots.add(o)
        group_of[o] = best
    # a chain that only passes its gradient on gains nothing; one op alone only when it is not
    # a ufunc (a ufunc writes into a buffer kept between steps), as its loop may then write
    # over an operand that dies there (``FusedKernel.donors``)
    return [
        g
        for g in groups
        if any(not _identity(prog.instrs[m][0]) for m in g.members)
        and (g.size() >= 2 or _alone(prog, g))
    ]


def _alone(prog: Any, g: _Group) -> bool:
    prim, _, _, o = prog.instrs[g.members[0]]
    return _rule(prim)[0].split() is None and not prog.meta.get(o, (0, 0, 0, True))[3]  # type: ignore[union-attr]


def _identity(op: Any) -> bool:
    """A VJP that passes its gradient on unchanged (``add``'s, ``sub``'s first)."""
    e = _rule(op)[0]
    return e is not None and e.op == "g"


def _changes(prim: Any) -> bool:
    """Whether an instruction writes memory that others read: an optimizer update (its first
    operand is the parameter itself) or an in-place primitive."""
    return bool(prim.inplace)


# -- code generation ----------------------------------------------------------------------------
def _kernel(
    prog: Any, g: _Group, values: dict[int, Any], keep: set[int]
) -> tuple[Any, list[Any], list[int]]:
    """One group as a loop: (the op that runs it, its operands, the slots it writes)."""
    ins: dict[Any, str] = {}  # operand slot (("gemm", m) for a split linear) -> kernel variable
    kinds: dict[str, str] = {}
    expr: dict[int, str] = {}  # slot computed in the loop -> its variable
    body: list[str] = []
    total = None  # (slot, scale) of the MSE loss the loop also computes
    for m in g.members:
        prim, args, kw, o = prog.instrs[m]
        e, forward = _rule(prim)
        assert e is not None
        code: dict[int, str] = {}
        for p in (*((-1,) if e.split() is not None else ()), *e.reads(forward)):
            if p >= 0 and args[p][0] == "v":
                code[p] = _c(args[p][1])
                continue
            v = args[p][1] if p >= 0 else None
            if v in expr:
                code[p] = expr[v]
                continue
            key: Any = ("gemm", m) if p < 0 else v  # a call's result: made before the loop
            if key not in ins:
                ins[key] = f"a{len(ins)}"
                kinds[ins[key]] = _FULL if v is None else _classify(values[v], g.shape, g.dtype)  # type: ignore[assignment]
            var = ins[key]
            kind = kinds[var]
            code[p] = f"{var}f[k]" if kind == _FULL else f"{var}f[j]" if kind == _ROW else var
        tot = _total(e)
        if tot is not None:
            total = (o, render(tot[1], code.__getitem__, _c, kw, forward))
            body += [f"d = {render(tot[0], code.__getitem__, _c, kw, forward)}", "sqf[k] = d * d"]
            continue
        expr[o] = f"t{len(expr)}"  # named by place, so equal chains give equal sources
        body.append(f"{expr[o]} = {render(e, code.__getitem__, _c, kw, forward)}")
    outs = [
        prog.instrs[m][3]
        for m in g.members
        if prog.instrs[m][3] in keep and prog.instrs[m][3] not in g.totals
    ]
    sums = [(prog.instrs[r][3], prog.instrs[r][1][0][1]) for r in g.reductions]
    names = [prog.instrs[m][0].name for m in (*g.members, *g.reductions)]
    two = any(kind == _ROW for kind in kinds.values()) or bool(sums)
    operands = list(ins.values())
    sig = [*operands, *(f"o{n}" for n in range(len(outs))), *(f"r{n}" for n in range(len(sums)))]
    sig += ["sqf"] if total else []
    lines = [f"def kernel({', '.join([*sig, 'rows', 'cols'])}):"]
    lines += [
        f"    {var}f = {var}.reshape(-1)" for var, kind in kinds.items() if kind in (_FULL, _ROW)
    ]
    lines += [f"    o{n}f = o{n}.reshape(-1)" for n in range(len(outs))]
    loop = [*body, *(f"o{n}f[k] = {expr[s]}" for n, s in enumerate(outs)),
            *(f"r{n}[j] += {expr[src]}" for n, (_, src) in enumerate(sums))]  # fmt: skip
    if two:  # rows x cols: a bias or a column sum is indexed by the column
        lines += [
            "    for i in range(U(rows)):",
            "        base = i * U(cols)",
            "        for j in range(U(cols)):",
            "            k = base + j",
            *(f"            {line}" for line in loop),
        ]
    else:
        lines += ["    for k in range(U(rows) * U(cols)):", *(f"        {line}" for line in loop)]
    head = ["import numpy as np"]
    if total:  # numpy's d.sum() (from zero, pairwise), times the scale in the dtype
        # the cache folder's digest covers reduce.py: numba never runs a stale pairwise_sum
        head.append("from tapegrad._kernels.reduce import pairwise_sum")
        lines += [
            "    zero = T(0)",
            f"    return (zero + pairwise_sum(sqf, 0, rows * cols, zero)) * {total[1]}",
        ]
    dt = "float32" if g.dtype == np.float32 else "float64"
    src = "\n".join([*head, f"T = np.{dt}", "U = np.uint64", "", "", *lines, ""])
    # the Python side: allocate the outputs, read scalar operands, call the loop
    cols = g.shape[-1] if g.shape else 1
    call = [
        f"x{n}.reshape(-1)[0]" if kinds[v] == _SCALAR else f"x{n}" for n, v in enumerate(operands)
    ]
    xs = [f"x{n}" for n in range(len(operands))]
    w = [f"def fused({', '.join([*xs, 'o0=None'] if outs else xs)}):"]
    res = []
    for n in range(len(outs)):
        if n == 0:  # given: a dead operand's array (see ``donors``)
            w.append(f"    if o0 is None:\n        o0 = empty({g.shape!r}, T)")
        else:
            w.append(f"    o{n} = empty({g.shape!r}, T)")
        res.append(f"o{n}")
    for n, (s, _) in enumerate(sums):
        w.append(f"    r{n} = zeros({cols}, T)")  # numpy's sum starts from zero too (-0.0 + 0)
        shape = values[s].shape
        res.append(f"r{n}" if shape == (cols,) else f"r{n}.reshape({shape!r})")
    made = [*(f"o{n}" for n in range(len(outs))), *(f"r{n}" for n in range(len(sums)))]
    if total:
        w.append(f"    sq = empty({math.prod(g.shape)}, T)")
        made.append("sq")
        res.append("asarray(tot, T)")
    w.append(f"    tot = kernel({', '.join([*call, *made])}, {math.prod(g.shape) // cols}, {cols})")
    w.append(f"    return {res[0] if len(res) == 1 else '(' + ', '.join(res) + ',)'}")
    ns: dict[str, Any] = {
        "kernel": _compile(src),
        "empty": np.empty,
        "zeros": np.zeros,
        "asarray": np.asarray,
        "T": g.dtype.type,
    }
    exec(builtins.compile("\n".join(w), "<tg.compile fused>", "exec"), ns)  # noqa: S102
    args = [("s", v) if not isinstance(v, tuple) else v for v in ins]
    donors = tuple(n for n, v in enumerate(operands) if kinds[v] == _FULL) if outs else ()
    op = FusedKernel(ns["fused"], "fused[" + ", ".join(names) + "]", names, src, donors)
    return op, args, [*outs, *(s for s, _ in sums), *([total[0]] if total else [])]


_CACHE: dict[str, Any] = {}


_lock = threading.Lock()


def _compile(src: str) -> Any:
    """The numba loop for ``src``: from this process's cache, else compiled from a file named by
    the source's hash (numba caches the machine code beside it)."""
    kern = _CACHE.get(src)
    if kern is not None:
        return kern
    with _lock:
        kern = _CACHE.get(src)
        if kern is None:
            kern = _CACHE[src] = _load(src)
    return kern



# -- the rewrite --------------------------------------------------------------------------------
def enabled() -> bool:
    """Whether programs are fused: numba is selected (see ``tapegrad._kernels``)."""
    return _kernels.numba() is not None


def fuse(prog: Any, example_inputs: list[Any]) -> int:
    """Rewrite ``prog``'s instructions so that each elementwise chain is one fused kernel;
    return how many kernels it made (0 when numba is not selected).

    Fusion only makes a program faster: if it fails (numba cannot compile a loop), the
    program stays unfused and a RuntimeWarning says why.
    """
    if not enabled():
        return 0
    n_slots = len(prog.kinds)
    try:
        return _fuse(prog, example_inputs)
    except Exception as e:  # noqa: BLE001 - any failure keeps the unfused program
        del prog.kinds[n_slots:]
        warnings.warn(
            f"tg.compile: elementwise fusion failed ({type(e).__name__}: {e}); the step runs "
            "unfused (TAPEGRAD_KERNELS=numpy turns fusion off)",
            RuntimeWarning,
            stacklevel=3,
        )
        return 0


def _fuse(prog: Any, example_inputs: list[Any]) -> int:
    values = _values(prog, example_inputs)
    groups = _groups(prog, values)
    if not groups:
        return 0
    # the step's outputs stay materialised; gradients are read by updates, so kept below
    keep: set[int] = set(leaves(prog.outputs))
    grouped: dict[int, _Group] = {}
    for group in groups:
        for m in (*group.members, *group.reductions):
            grouped[m] = group
    members = set(grouped)
    for i, (_, args, _, _) in enumerate(prog.instrs):
        if i not in members:
            keep.update(v for k, v in args if k == "s")
    for group in groups:  # a value read by another group is kept too
        for m in group.members:
            for k, v in prog.instrs[m][1]:
                if k == "s" and v not in group.slots:
                    keep.add(v)

    def new_slot() -> int:
        prog.kinds.append(("op", -1))
        return len(prog.kinds) - 1

    instrs: list[Any] = []
    where: list[str] = []
    made: list[int] = []  # slots a loop now writes (fresh arrays, no ufunc's buffer)
    for i, ins in enumerate(prog.instrs):
        g = grouped.get(i)
        if g is None:
            instrs.append(ins)
            where.append(prog.where[i])
            continue
        if g.members[0] != i:
            continue
        kern, args, outs = _kernel(prog, g, values, keep)
        made += outs
        first = prog.instrs[g.members[0]]
        split = _rule(first[0])[0].split()  # type: ignore[union-attr]
        if split is not None:  # its call (a GEMM), then the loop that adds the rest
            y = new_slot()
            fn = split.args[0]
            op = _CALLS.get(fn)
            if op is None:
                op = _CALLS[fn] = Op(fn, f"{first[0].name} without the loop's terms")
            instrs.append((op, tuple(first[1][p] for p in split.args[1:]), {}, y))
            where.append(prog.where[i])
            args = [("s", y) if a == ("gemm", g.members[0]) else a for a in args]
        if len(outs) == 1:
            instrs.append((kern, tuple(args), {}, outs[0]))
            where.append(prog.where[i])
        else:
            t = new_slot()
            instrs.append((kern, tuple(args), {}, t))
            where.append(prog.where[i])
            for n, s in enumerate(outs):
                instrs.append((_GETITEM, (("s", t), ("v", n)), {}, s))
                where.append(prog.where[i])
    for o in made:
        if o in prog.meta:
            prog.meta[o] = (*prog.meta[o][:3], False)
    prog.instrs = instrs
    prog.where = where
    return len(groups)
