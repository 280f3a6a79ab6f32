"""Gradient checkpointing: keep a block's inputs, recompute the block during backward.

``tg.checkpoint(fn, *args)`` runs ``fn`` without recording it (a Module: under ``no_grad``, its
trainable parameters taken as used; any other function: on a private tape that records nothing
for the open tapes and is freed at once, to find the parameters it uses), and records one op,
``checkpoint``, whose inputs are ``fn``'s tensor arguments and those parameters. Its VJP runs ``fn`` again on a new tape (with the
random generator as it was, so dropout draws the same masks) and differentiates it: a block's
activations exist only while the block runs forward and while its own backward runs. The
recomputation runs under ``recomputation()``: an op that would recompute an intermediate in its
own VJP to save memory (attention's probabilities) keeps it there instead, since the block's
backward follows at once and frees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._autodiff import (
    Joint,
    Tape,
    apply,
    defprim,
    is_capturing,
    is_recording,
    isolated,
    no_grad,
    recomputation,
)
from ._creation import default_generator
from ._tensor import Tensor, _wrap


def checkpoint(fn: Callable[..., Tensor], *args: Any) -> Tensor:
    """``fn(*args)``, keeping only the inputs for backward and recomputing ``fn`` there.

    ``fn`` returns one Tensor. A Module's unused parameters get zero gradients (not "missing").
    Layers that update state in forward (BatchNorm's running statistics) update it again when
    backward recomputes them, as in PyTorch. Works with several tapes, nested tapes (higher order, since the
    recomputation is recorded on the outer tape) and randomness inside the block (the same
    numbers on recompute). Under ``tg.compile``'s capture, or when nothing records, it is
    plain ``fn(*args)``.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0, 2.0]))
    >>> with tg.Tape() as tape:
    ...     y = tg.checkpoint(lambda x: tg.tanh(x * w) * w, tg.ones(2))
    ...     loss = y.sum()
    >>> [round(v, 4) for v in tape.gradient(loss, w).tolist()]
    [1.1816, 1.1053]
    """
    if not is_recording() or is_capturing():
        return fn(*args)
    state = default_generator().get_state()
    owner: Any = fn if hasattr(fn, "_parameter_list") else getattr(fn, "__self__", None)
    if hasattr(owner, "_parameter_list"):  # a Module: its parameters, and no recording at all
        with no_grad():
            out = fn(*args)
        params = [p for p in owner._parameter_list() if p.requires_grad]
    else:  # a function: the parameters it uses are found on a private tape
        with isolated(), Tape() as inner:
            private = [_leaf(a, inner) for a in args]
            out = fn(*private)
        mine = {id(a) for a in private}
        params = [t for t in inner.leaves if id(t) not in mine]
        inner.release()  # the block's activations go now
    if not isinstance(out, Tensor):
        raise TypeError(
            f"checkpoint: the function must return one Tensor, got {type(out).__name__}; "
            "checkpoint each output's computation separately, or return them stacked"
        )
    tensors = [a for a in args if _is_float(a)]
    spec = tuple(None if _is_float(a) else a for a in args)
    return apply(
        _prim(len(tensors) + len(params)), *tensors, *params,
        fn=fn, spec=spec, n=len(tensors), state=state, result=out._data,
    )  # fmt: skip


def checkpoint_module(module: Any) -> Any:
    """Make every call of ``module`` checkpointed (its names and state_dict are unchanged);
    returns the module.

    >>> import tapegrad as tg
    >>> block = tg.checkpoint_module(tg.nn.Linear(3, 3))
    >>> block(tg.ones((2, 3))).shape
    (2, 3)
    """
    forward = module.forward
    object.__setattr__(module, "forward", lambda *a: checkpoint(forward, *a))
    return module


def _is_float(a: Any) -> bool:
    return isinstance(a, Tensor) and a._data.dtype.kind in "fc"


def _leaf(a: Any, tape: Tape) -> Any:
    if not _is_float(a):
        return a
    t = _wrap(a._data)
    tape.watch(t)
    return t


def _forward(*arrays: Any, fn: Any, spec: Any, n: int, state: Any, result: Any) -> Any:
    return result  # computed by checkpoint() itself, on its private tape


def _recompute(
    xp: Any, g: Any, ans: Any, *inputs: Any, needs: Any, fn: Any, spec: Any, n: int, state: Any,
    result: Any,
) -> tuple[Any, ...]:
    """Every input's gradient: ``fn`` run again, then differentiated on a new tape."""
    gen = default_generator()
    now = gen.get_state()
    gen.set_state(state)  # the same random numbers as the forward pass
    try:
        if xp.tensors:  # an outer tape records this: recompute on the real inputs, recorded
            with Tape() as tape:
                it = iter(inputs[:n])
                args = [next(it) if s is None else s for s in spec]
                tape.watch(*inputs[:n])
                out = fn(*args)
            sources = list(inputs)
            grads = _needed(tape, out, sources, needs, g)
        else:
            with isolated(), Tape() as tape:
                it = iter(inputs[:n])
                args = [_wrap(next(it)) if s is None else s for s in spec]
                tape.watch(*[a for a, s in zip(args, spec, strict=True) if s is None])
                with recomputation():  # backward follows at once: ops keep what they'd redo
                    out = fn(*args)
            sources = [a for a, s in zip(args, spec, strict=True) if s is None]
            sources += _params_now(out, tape, n, inputs)
            grads = [x if x is None else x._data
                     for x in _needed(tape, out, sources, needs, _wrap(g))]  # fmt: skip
    finally:
        gen.set_state(now)
    return tuple(grads)  # None where the gradient is not needed


def _needed(tape: Tape, out: Any, sources: list[Any], needs: Any, g: Any) -> list[Any]:
    """The gradients of ``out`` for the sources whose gradient is asked for (None for the
    others, which backward then does not compute: a first block's input, a frozen weight)."""
    wanted = [s for s, need in zip(sources, needs, strict=True) if need]
    it = iter(tape.gradient(out, wanted, output_gradients=g) if wanted else [])
    return [next(it) if need else None for need in needs]


def _params_now(out: Any, tape: Tape, n: int, inputs: Any) -> list[Tensor]:
    """The parameters of the recomputation, in the order the checkpoint op recorded them."""
    by_array = {id(p._data): p for p in tape.leaves}
    return [by_array[id(a)] for a in inputs[n:]]


_PRIMS: dict[int, Any] = {}


def _prim(k: int) -> Any:
    # one primitive per number of inputs: it saves them all (the recomputation reads them)
    p = _PRIMS.get(k)
    if p is None:
        name = "checkpoint" if k == 1 else f"checkpoint{k}"
        p = _PRIMS[k] = defprim(name, _forward, Joint(_recompute), tuple(range(k)))
    return p
