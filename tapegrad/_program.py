"""What a captured program is made of, shared by the capture (``_compile``) and fusion
(``_fuse``): the one instruction class for everything that is not a primitive's forward, what an
instruction runs, and the walk over a step's output tree.

An instruction is ``(op, operands, params, slot)``; ``op`` is a ``Primitive`` (its forward runs)
or an ``Op``. Both answer ``fwd``, ``name`` (shown in the generated source) and ``inplace``
(the call writes its first operand: never dropped, no loop reaches across it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ._autodiff import Primitive


class Op:
    """An instruction that is not a primitive's forward: a backward step on arrays (``prim``
    and ``vjp``: the VJP of input ``vjp`` of ``prim``; ``vjp`` None for a joint VJP or an engine
    step), a fused loop, an optimizer's update, or a piece of a rewritten primitive.
    ``fwd(*operands, **params)`` runs it."""

    __slots__ = ("fwd", "inplace", "name", "prim", "vjp")

    def __init__(
        self, fwd: Callable[..., Any], name: str, prim: Primitive | None = None,
        vjp: int | None = None, inplace: bool = False,
    ) -> None:  # fmt: skip
        self.fwd = fwd
        self.name = name
        self.prim = prim
        self.vjp = vjp
        self.inplace = inplace


def rule(op: Any) -> tuple[Primitive | None, int | None]:
    """``(primitive, None)`` for a primitive's forward, ``(primitive, i)`` for the VJP of its
    input ``i``, else ``(None, None)``."""
    if isinstance(op, Primitive):
        return op, None
    if isinstance(op, Op) and op.vjp is not None:
        return op.prim, op.vjp
    return None, None


def leaves(tree: Any) -> Iterator[Any]:
    """The slots of a step's output tree (``("t", slot)``, tuples, lists, dicts), in order."""
    kind, v = tree
    if kind == "t":
        yield v
    elif kind in ("tuple", "list"):
        for x in v:
            yield from leaves(x)
    elif kind == "dict":
        for _, x in v:
            yield from leaves(x)
