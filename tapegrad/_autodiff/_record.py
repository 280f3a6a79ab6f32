"""The record of one op (a tuple, read through ``Node``) and the checks backward makes on it.

A recorded op is a plain tuple (the cheapest object Python builds), laid out as below, and
shared by every tape that records it. INPUTS holds, per input, None (not a tensor, or a tensor
on no tape), the tensor's tid, or the Parameter itself for a trainable parameter (it is on every
tape that watches parameters). Whether an input is on a given tape is decided at backward time:
it is a leaf of that tape or the output of one of its nodes. Only what the primitive's ``save``
lists is held (ANS, ARGS), so a node keeps no more memory than its VJP declares. VERSIONS is the
sum of the saved inputs' version counters when the op ran (None when nothing is saved).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from .._tensor import Tensor
from ._state import STATE

PRIM, INPUTS, OUT_TID, OUT_SHAPE, OUT_DTYPE, ANS, ARGS, PARAMS, VERSIONS, SCOPE_AT = range(10)


def input_tid(e: Any) -> int:
    """The tid of an INPUTS entry that is not None."""
    return e if type(e) is int else e._tid


class Node(tuple):
    """A read-only view of one recorded op (what ``tape.nodes`` returns)."""

    __slots__ = ()

    prim = property(lambda self: self[PRIM])
    out_tid = property(lambda self: self[OUT_TID])
    out_shape = property(lambda self: self[OUT_SHAPE])
    out_dtype = property(lambda self: self[OUT_DTYPE])
    ans = property(lambda self: _tensor_of(self[ANS]))
    args = property(lambda self: None if self[ARGS] is None else tuple(map(_tensor_of, self[ARGS])))
    params = property(lambda self: self[PARAMS])
    versions = property(lambda self: self[VERSIONS])
    scope = property(lambda self: self[SCOPE_AT])

    @property
    def input_tids(self) -> tuple[int | None, ...]:
        """Per input, its tid (None for a constant or a tensor that was on no tape)."""
        return tuple(None if e is None else input_tid(e) for e in self[INPUTS])

    def saved_bytes(self) -> int:
        """Bytes of the arrays this node keeps alive for its VJPs."""
        return saved_bytes([self], set())

    def __repr__(self) -> str:
        return f"<node {self.prim.name} -> {tuple(self.out_shape)} {self.out_dtype}>"


class Saved:
    """A tensor a record keeps for backward: its array, tid and version, and the tensor weakly
    (the tensor names its tapes: a strong reference would close a cycle, and an unused tape
    would wait for the garbage collector)."""

    __slots__ = ("array", "ref", "tid", "version")

    def __init__(self, t: Tensor) -> None:
        self.array = t._data
        self.ref = weakref.ref(t)
        self.tid = t._tid
        self.version = t._version

    def tensor(self) -> Tensor:
        """The tensor, or, once nobody holds it, a new one with its array and tid on the tapes
        recording now (an outer tape differentiating backward finds it by tid)."""
        t = self.ref()
        if t is None:
            t = Tensor.__new__(Tensor)
            t._data, t._tid, t._version = self.array, self.tid, 0
            t._tapes = tuple(STATE.recording)
        return t


def keep(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` for a record: tensors that are on a tape become ``Saved``."""
    if len(args) == 2:  # unrolled: most saving ops are binary
        x, y = args
        sx = x.__class__ is Tensor and bool(x._tapes)
        sy = y.__class__ is Tensor and bool(y._tapes)
        if sx or sy:
            return (Saved(x) if sx else x, Saved(y) if sy else y)
        return args
    out = []
    saved = False
    for x in args:  # one loop, no comprehension (a frame of its own in Python 3.11)
        if x.__class__ is Tensor and x._tapes:
            out.append(Saved(x))
            saved = True
        else:
            out.append(x)
    return tuple(out) if saved else args


def _tensor_of(x: Any) -> Any:
    return x.tensor() if x.__class__ is Saved else x


def saved_bytes(records: Iterable[tuple[Any, ...]], seen: set[int]) -> int:
    """Bytes held by the saved arrays of ``records``, each array counted once (``seen``)."""
    n = 0
    for r in records:
        for t in (r[ANS], *(r[ARGS] or ())):
            a = t.array if t.__class__ is Saved else t._data if isinstance(t, Tensor) else None
            if a is not None and id(a) not in seen:
                seen.add(id(a))
                n += a.nbytes
    return n


def version_sum(args: tuple[Any, ...]) -> int:
    v = 0
    for x in args:
        if isinstance(x, Tensor):
            v += x._version
    return v


def saved_args(rec: Any, tensors: bool) -> tuple[Any, Any]:
    """The VJPs' saved output and inputs (None where not saved), as Tensors or as arrays, after
    checking that none of them was modified in place since the op ran (version counters)."""
    ans = rec[ANS]
    if ans is not None:
        t = ans.ref()
        if t is not None and t._version:
            raise _version_error(rec, [(-1, t)])
        ans = ans.tensor() if tensors else ans.array
    args = rec[ARGS]
    if args is None:
        return ans, (None,) * len(rec[INPUTS])
    v = 0
    arrays = []  # the arrays, gathered in the same loop (backward on arrays)
    for x in args:
        if x.__class__ is Saved:
            v += x.version if (t := x.ref()) is None else t._version
            arrays.append(x.array)
        elif isinstance(x, Tensor):
            v += x._version
            arrays.append(x._data)
        else:
            arrays.append(x)
    if v != rec[VERSIONS]:
        # The sum cannot say which one changed: name those no longer at version 0.
        live = [_tensor_of(x) for x in args]
        changed = [(i, x) for i, x in enumerate(live) if isinstance(x, Tensor) and x._version]
        raise _version_error(rec, changed)
    if tensors:
        return ans, [_tensor_of(x) for x in args]
    return ans, arrays


def where(rec: tuple[Any, ...]) -> str:
    return f" in {rec[SCOPE_AT]}" if rec[SCOPE_AT] else ""


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
        f"Tape.gradient: {what} of op '{rec[PRIM].name}' (output {tuple(rec[OUT_SHAPE])})"
        f"{where(rec)} was modified in place after the op saved it for backward, so its VJP "
        "would read the wrong values. Compute the gradient before updating it in place (e.g. "
        "before optimizer.step), or use an out-of-place op (x = x * 2 rather than x[...] = ...)."
    )


def no_vjp_error(
    rec: tuple[Any, ...], i: int, meta: tuple[Any, Any], returned_none: bool = False
) -> TypeError:
    name = rec[PRIM].name
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
        f"Tape.gradient: cannot differentiate through primitive '{name}'{where(rec)}: {why}, "
        f"but that input needs a gradient. Fix: {fix}."
    )
