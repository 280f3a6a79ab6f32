"""Elementwise rules as expressions: one declaration rendered to numpy calls and to loop source.

An elementwise primitive may declare, at its ``defprim``, its forward and each input's VJP as
an ``Expr`` built from ``X(i)`` (input ``i``), ``G`` (the output gradient), ``ANS`` (the
output), ``P("name")`` (a param), numbers, ``+ - * /``, unary minus, ``relu`` and
``positive``. ``Elementwise(fwd, vjps)`` holds them. ``vjp_function`` renders a VJP as Python
over arrays or Tensors (the primitive's VJP itself, so the rule is written once);
``render(expr, operand, constant)`` writes it as scalar source for a loop (``tg.compile``'s
fusion). A subexpression of numbers and params only is computed in Python, as the numpy code
computes it, then cast by the caller (``constant``).

>>> e = G * (1.0 - ANS * ANS)  # tanh's VJP
>>> render(e, {0: "g", 1: "y"}.__getitem__, lambda v: f"T({v!r})", {})
'(g * (T(1.0) - (y * y)))'
>>> vjp_function(e)(None, 0.5, 0.5)
0.375
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

_BINARY = ("+", "-", "*", "/")


class Expr:
    """A node: ``op`` is ``"g"``, ``"ans"``, ``"x"`` (``args = (i,)``), ``"num"``, ``"param"``,
    a binary operator, ``"neg"``, ``"relu"``, ``"positive"``, ``"call"`` (an opaque function of
    inputs, ``args = (fn, *input indices)``: run outside a loop, whose result it reads),
    ``"sumsq"`` (the sum of squares of its operand over every element: a loop's total) or
    ``"sum_rows"`` (its operand summed over the leading axes)."""

    __slots__ = ("args", "op")

    def __init__(self, op: str, *args: Any) -> None:
        self.op = op
        self.args = args

    def _bin(self, op: str, other: Any, right: bool = False) -> Expr:
        o = other if isinstance(other, Expr) else Expr("num", other)
        return Expr(op, o, self) if right else Expr(op, self, o)

    def __add__(self, o: Any) -> Expr:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> Expr:
        return self._bin("+", o, True)

    def __sub__(self, o: Any) -> Expr:
        return self._bin("-", o)

    def __rsub__(self, o: Any) -> Expr:
        return self._bin("-", o, True)

    def __mul__(self, o: Any) -> Expr:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> Expr:
        return self._bin("*", o, True)

    def __truediv__(self, o: Any) -> Expr:
        return self._bin("/", o)

    def __rtruediv__(self, o: Any) -> Expr:
        return self._bin("/", o, True)

    def __neg__(self) -> Expr:
        return Expr("neg", self)

    def __repr__(self) -> str:
        return render(self, lambda p: f"#{p}", repr, None)

    def nodes(self) -> list[Expr]:
        """This node and every node below it."""
        out, todo = [], [self]
        while todo:
            e = todo.pop()
            out.append(e)
            todo += [a for a in e.args if isinstance(a, Expr)]
        return out

    def is_number(self) -> bool:
        """Made of numbers and params only (computed in Python, then cast)."""
        return all(e.op in ("num", "param", "neg", *_BINARY) for e in self.nodes())

    def reads(self, forward: bool = False) -> tuple[int, ...]:
        """The operand positions read outside a ``call``, ascending: ``(g, ans, inputs...)``
        for a VJP, the inputs for a forward (see ``position``)."""
        todo, found = [self], set()
        while todo:
            e = todo.pop()
            if e.op in ("g", "ans", "x"):
                found.add(e.args[0] if forward and e.op == "x" else position(e))
            elif e.op != "call":
                todo += [a for a in e.args if isinstance(a, Expr)]
        return tuple(sorted(found))

    def split(self) -> Expr | None:
        """The ``call`` node in this expression, if any (at most one)."""
        return next((e for e in self.nodes() if e.op == "call"), None)

    def params(self) -> tuple[str, ...]:
        return tuple(sorted({e.args[0] for e in self.nodes() if e.op == "param"}))


G, ANS = Expr("g"), Expr("ans")
VJP_OFFSET = 2  # in a VJP's operands (g, ans, inputs...) input i is at 2 + i


def X(i: int) -> Expr:  # noqa: N802 - reads as the maths
    return Expr("x", i)


def P(name: str) -> Expr:  # noqa: N802
    return Expr("param", name)


def relu(e: Expr) -> Expr:
    """``e`` where positive or NaN, else 0."""
    return Expr("relu", e)


def positive(e: Expr) -> Expr:
    """1 where ``e > 0``, else 0."""
    return Expr("positive", e)


def call(fn: Callable[..., Any], *inputs: int) -> Expr:
    """``fn(*inputs)`` run whole (a GEMM), not elementwise."""
    return Expr("call", fn, *inputs)


def sumsq(e: Expr) -> Expr:
    """The sum of ``e * e`` over every element (numpy's pairwise order)."""
    return Expr("sumsq", e)


def sum_rows(e: Expr) -> Expr:
    """The sum of ``e`` over every leading axis (a bias's gradient), rows in numpy's order."""
    return Expr("sum_rows", e)


def position(e: Expr) -> int:
    """A leaf's operand position: ``G`` 0, ``ANS`` 1, ``X(i)`` ``VJP_OFFSET + i`` in a VJP;
    a forward's operands are its inputs, so ``render`` is given ``X(i)`` at ``i`` there."""
    return {"g": 0, "ans": 1}.get(e.op, VJP_OFFSET + e.args[0] if e.op == "x" else -1)


class Elementwise:
    """A primitive's rules as expressions: ``fwd`` (None when a loop cannot run it, e.g. numpy's
    transcendental functions, which numba's are not bit for bit) and one VJP per input (None:
    not elementwise)."""

    __slots__ = ("fwd", "vjps")

    def __init__(self, fwd: Expr | None, vjps: tuple[Expr | None, ...] = ()) -> None:
        self.fwd = fwd
        self.vjps = vjps


def number(e: Expr, params: dict[str, Any]) -> Any:
    """A numbers-and-params subexpression's value, computed in Python (as the numpy code)."""
    if e.op == "num":
        return e.args[0]
    if e.op == "param":
        return params[e.args[0]]
    if e.op == "neg":
        return -number(e.args[0], params)
    a, b = number(e.args[0], params), number(e.args[1], params)
    return a + b if e.op == "+" else a - b if e.op == "-" else a * b if e.op == "*" else a / b


def render(
    e: Expr, operand: Callable[[int], str], constant: Callable[[Any], str],
    params: dict[str, Any] | None, forward: bool = False,
) -> str:  # fmt: skip
    """Scalar source of ``e``: ``operand(position)`` names an operand (in a forward, input i is
    at i); a numbers-only subexpression is ``constant(value)`` (with ``params``; ``None``
    renders params by name, for display)."""
    def r(e: Expr) -> str:
        if params is not None and e.op != "num" and e.is_number():
            return constant(number(e, params))
        op, a = e.op, e.args
        if op in ("g", "ans", "x"):
            return operand(a[0] if forward and op == "x" else position(e))
        if op == "call":  # its result, computed before the loop: operand -1
            return operand(-1)
        if op == "num":
            return constant(a[0])
        if op == "param":
            return str(a[0])
        if op == "neg":
            return f"(-{r(a[0])})"
        if op in _BINARY:
            return f"({r(a[0])} {op} {r(a[1])})"
        v = r(a[0])
        if op == "relu":
            return f"({v} if {v} > T(0) or np.isnan({v}) else T(0))"
        if op == "positive":
            return f"(T(1) if {v} > T(0) else T(0))"
        raise ValueError(f"render: {op} has no scalar form")

    return r(e)


def vjp_function(e: Expr) -> Callable[..., Any]:
    """``vjp(xp, g, ans, *inputs, **params)`` computing ``e`` with Python operators, so on
    arrays (numpy's calls, in the expression's order) and on Tensors alike."""
    def num(v: Any) -> str:
        return repr(float(v)) if isinstance(v, float) else repr(v)

    def py(e: Expr) -> str:
        op, a = e.op, e.args
        if op == "x":
            return f"x[{a[0]}]"
        if op in ("g", "ans"):
            return op
        if op == "num":
            return num(a[0])
        if op == "param":
            return f"p[{a[0]!r}]"
        if op == "neg":
            return f"(-{py(a[0])})"
        if op in _BINARY:
            return f"({py(a[0])} {op} {py(a[1])})"
        if op == "positive":
            return f"({py(a[0])} > 0)"
        raise ValueError(f"vjp_function: {op} has no array form")

    src = f"def vjp(xp, g, ans, *x, **p):\n    return {py(e)}\n"
    ns: dict[str, Any] = {}
    exec(builtins.compile(src, f"<vjp {py(e)}>", "exec"), ns)  # noqa: S102
    return ns["vjp"]
