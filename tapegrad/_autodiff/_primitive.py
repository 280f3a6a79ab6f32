"""Primitives: a forward on arrays beside one VJP per input, in one registry.

Every VJP has one signature, ``vjp(xp, g, ans, *args, **params) -> gradient``, and is written
once for both ways backward runs it: on arrays (``xp`` is the array namespace, numpy; the fast
path, when nothing records the backward pass) and on Tensors (``xp`` is tapegrad's ops, when an
outer tape records it: higher-order derivatives). See ``_namespace`` for what ``xp`` offers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._expr import Elementwise, vjp_function

OUT = -1  # in a primitive's ``save`` tuple: keep the output for the VJP


class Joint:
    """``defprim(..., vjp=Joint(fn))``: every input's gradient from one call,
    ``fn(xp, g, ans, *args, needs=..., **params) -> tuple`` (None where ``needs[i]`` is False),
    for VJPs that share work (layer norm's two statistics)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn


VJP = Callable[..., Any] | Joint | None | tuple[Callable[..., Any] | None, ...]


class Primitive:
    """A differentiable primitive: its forward on arrays and one VJP per input.

    ``vjps[i](xp, g, ans, *args, **params)`` returns the gradient for input ``i`` given the
    output gradient ``g``; only what ``save`` lists reaches it (the rest is None), so a VJP
    cannot hold more memory than it declares. A ``None`` VJP says the input has no gradient;
    backward raises if such an input is asked for one. ``inplace``: the forward writes its
    first input and returns it (a running statistic), so a replay keeps the call although
    nothing reads its result. ``expr``: the rules as expressions (``_expr.Elementwise``), or
    None. ``accumulate``: None, or ``accumulate(total, g, **params) -> bool`` that adds the
    first input's VJP of ``g`` into ``total`` in place and says whether it did (the backward
    pass on arrays passes a gradient sum it made itself, nobody else's array); a primitive that
    has it returns a new array from that VJP (getitem: a slice's gradient written into the
    gradient of the whole, not into zeros of the whole added to it).
    """

    __slots__ = ("name", "fwd", "vjps", "joint", "save", "save_out", "save_args", "save_prefix",
                 "inplace", "expr", "accumulate")

    def __init__(
        self,
        name: str,
        fwd: Callable[..., Any],
        vjp: VJP = None,
        save: tuple[int, ...] = (),
        inplace: bool = False,
        expr: Elementwise | None = None,
    ) -> None:
        self.name = name
        self.fwd = fwd
        self.inplace = inplace
        self.expr = expr
        self.accumulate: Callable[..., bool] | None = None
        if vjp is None and expr is not None and expr.vjps:  # the VJPs rendered from it
            vjp = tuple(None if e is None else vjp_function(e) for e in expr.vjps)
        self.joint = vjp.fn if isinstance(vjp, Joint) else None
        self.vjps = () if isinstance(vjp, Joint) else vjp if isinstance(vjp, tuple) else (vjp,)
        self.save = save
        self.save_out = OUT in save
        self.save_args = tuple(sorted(i for i in save if i != OUT))
        # When the saved inputs are exactly the first n, the input tuple itself is what is saved.
        n = len(self.save_args)
        self.save_prefix = n if self.save_args == tuple(range(n)) else -1

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


def defprim(
    name: str,
    fwd: Callable[..., Any],
    vjp: VJP = None,
    save: tuple[int, ...] = (),
    *,
    inplace: bool = False,
    expr: Elementwise | None = None,
) -> Primitive:
    """Register a primitive. ``vjp`` is one function (one input), a tuple (one per input) or a
    ``Joint``; each is called ``vjp(xp, g, ans, *args, **params)``.

    This is the stable extension point: a user-defined primitive gets gradients, higher-order
    derivatives and tape inspection like the built-in ones. Check it with
    ``tapegrad.testing.check_grads``. ``save`` lists what the VJPs read: input indices and
    ``OUT``; anything else reaches them as None. Write a VJP with operators and ``xp``'s
    functions (``xp.cos``, ``xp.where``, ``xp.sum``, ``xp.apply(prim, ...)``), so it runs on
    arrays and on Tensors alike. A None VJP declares an input non-differentiable: backward
    raises a TypeError naming the primitive if a gradient is ever needed there (rather than
    silently giving none), and so does a VJP that returns None. ``inplace=True`` declares a
    forward that updates its first input in place (``tg.compile`` then never drops the call).
    ``expr`` declares an elementwise primitive's forward and VJPs as expressions
    (``_expr.Elementwise``): without ``vjp`` its VJPs are rendered from them, and
    ``tg.compile`` fuses chains of such primitives into one loop.

    >>> import tapegrad as tg
    >>> cube = tg.defprim("doc_cube", lambda x: x**3, lambda xp, g, ans, x: g * 3 * x * x, save=(0,))
    >>> x = tg.tensor([2.0])
    >>> with tg.Tape() as tape:
    ...     tape.watch(x)
    ...     y = tg.apply(cube, x).sum()
    >>> tape.gradient(y, x).tolist()
    [12.0]
    >>> tg.undefprim("doc_cube")
    """
    if name in PRIMITIVES:
        raise ValueError(f"defprim: a primitive named {name!r} is already registered")
    p = Primitive(name, fwd, vjp, save, inplace, expr)
    PRIMITIVES[name] = p
    return p


def undefprim(name: str) -> None:
    """Remove a primitive from the registry (tests and notebooks that redefine one)."""
    PRIMITIVES.pop(name, None)


def nondiff(name: str, fwd: Callable[..., Any]) -> Primitive:
    """A function of arrays with no gradient (comparisons, a max shift), run through ``apply``
    so that ``tg.compile`` sees it; not registered, never recorded (its inputs are detached or
    its output is not float)."""
    return Primitive(name, fwd, (), ())
