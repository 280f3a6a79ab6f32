"""The backward pass: one reverse walk over a tape's record, on arrays or on Tensors.

Per node: the VJPs with ``xp``, then unbroadcast, cast and accumulate, once, for every
primitive. Each of those calls goes through ``call(fn, step, xp, args, kw)``, which records it
too while tg.compile captures (docs/design.md, "Backward on arrays" and "Tape replay"): ``step``
says what runs, ``(primitive, i)`` for the VJP of input ``i`` (``i`` None: a joint VJP), else
the engine's own step by name (``"unbroadcast"``, ``"astype"``, ``"add"``, ``"item"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backend import np
from .._tensor import Tensor, _wrap
from ._namespace import ARRAYS, tensor_namespace
from ._record import INPUTS, OUT_TID, PARAMS, PRIM, Node, input_tid, no_vjp_error, saved_args
from ._state import STATE

_NDARRAY = np.ndarray


def needed_tids(nodes: list[Any], sources: set[int]) -> set[int]:
    """The tids that depend on ``sources`` (and so need a gradient), sources included."""
    needed = set(sources)
    for rec in nodes:
        if rec is not None and rec[OUT_TID] not in needed:
            for e in rec[INPUTS]:
                if e is not None and (e if type(e) is int else e._tid) in needed:  # input_tid
                    needed.add(rec[OUT_TID])
                    break
    return needed


def reverse_pass(
    nodes: list[Any],
    seeds: dict[int, Any],
    needed: Any,
    keep: set[int],
    info: dict[int, tuple[Any, Any]],
    free: bool,
    tensors: bool,
    ready: tuple[dict[int, Any], Callable[[int, Any], None]] | None = None,
) -> dict[int, Any]:
    """Backward from ``seeds`` (``{tid: output gradient}``): ``{tid: gradient}`` for every tensor
    in ``needed`` that was reached and is a leaf or in ``keep``. ``tensors`` runs the VJPs on
    Tensors (an outer tape records them: higher order), else on arrays. ``free`` drops each
    node from ``nodes`` as it passes (the last reference, unless another tape shares it).
    ``ready = (leaves, fn)`` calls ``fn(tid, gradient)`` for each leaf as soon as the walk has
    passed the last op that used it (its first use in forward order): its gradient is final."""
    xp = tensor_namespace() if tensors else ARRAYS
    cap = None if tensors else STATE.capture
    call = _call if cap is None else cap.call  # tg.compile's capture records each step
    grads = dict(seeds)
    results: dict[int, Any] = {}
    final_at = _final_at(nodes, ready[0]) if ready is not None else {}
    after_vjp = STATE.after_vjp
    # On arrays with no capture and no anomaly hook (training), VJPs are called directly:
    # ``call``'s frame and the step's name cost ~10% of a small model's backward.
    direct = cap is None and not tensors and after_vjp is None
    # tids whose gradient in `grads` is an array this pass made (a sum, or a fresh VJP result of
    # a primitive with `accumulate`) that no one else holds: later terms are added into it
    owned: set[int] = set()
    for k in range(len(nodes) - 1, -2, -1):
        if final_at and k + 1 in final_at:  # every op after k is passed: these leaves' gradients are final
            for t in final_at[k + 1]:
                if t in grads:
                    ready[1](t, grads[t])  # type: ignore[index]
        if k < 0:
            break
        rec = nodes[k]
        if rec is None:
            continue
        if free:
            nodes[k] = None
        tid = rec[OUT_TID]
        g = grads.pop(tid, None)
        if g is None:
            continue
        owned.discard(tid)
        if tid in keep:
            results[tid] = g
        prim, params = rec[PRIM], rec[PARAMS]
        ans, args = saved_args(rec, tensors)
        joint = None
        if prim.joint is not None:
            w = {i for i, e in enumerate(rec[INPUTS]) if e is not None and input_tid(e) in needed}
            needs = tuple(i in w for i in range(len(rec[INPUTS])))
            joint = call(prim.joint, (prim, None), xp, (g, ans, *args), {**params, "needs": needs})
        vjps = prim.vjps
        for i, e in enumerate(rec[INPUTS]):
            if e is None:
                continue
            itid = e if type(e) is int else e._tid
            if itid not in needed:
                continue
            if (i == 0 and itid in owned and prim.accumulate is not None
                    and g.dtype == grads[itid].dtype and prim.accumulate(grads[itid], g, **params)):
                continue  # added into the sum in place
            if joint is not None:
                gi = joint[i] if direct else call(_item, "item", xp, (joint,), {"i": i})
            else:
                vjp = vjps[i] if i < len(vjps) else None
                if vjp is None:
                    raise no_vjp_error(rec, i, info[itid])
                if direct:
                    gi = vjp(xp, g, ans, *args, **params)
                else:
                    gi = call(vjp, (prim, i), xp, (g, ans, *args), params)
            if gi is None:
                raise no_vjp_error(rec, i, info[itid], returned_none=True)
            if tensors and not isinstance(gi, Tensor):
                gi = _wrap(gi)
            shape, dtype = info[itid]
            if gi.shape != shape:
                kw = {"shape": shape, "opname": prim.name}
                gi = call(unbroadcast, "unbroadcast", xp, (gi,), kw)
            if gi.dtype is not dtype and gi.dtype != dtype:
                gi = call(_astype, "astype", xp, (gi,), {"dtype": dtype})
            if after_vjp is not None:
                after_vjp(Node(rec), i, gi)
            prev = grads.get(itid)
            if prev is None:
                grads[itid] = gi
                if direct and i == 0 and prim.accumulate is not None and type(gi) is _NDARRAY:
                    owned.add(itid)  # its VJP's result is new: later terms may go into it
            elif not direct:
                grads[itid] = call(_add, "add", xp, (prev, gi), {})
            elif itid in owned:
                np.add(prev, gi, out=prev)  # a sum this pass made: no new array per term
            else:
                grads[itid] = prev = prev + gi
                if type(prev) is _NDARRAY:
                    owned.add(itid)
            prev = gi = None
        # drop this node's arrays now, not when the names are next rebound
        ans = args = joint = g = None
    results.update(grads)  # leaves keep their gradients in `grads`
    return results


def _final_at(nodes: list[Any], leaves: dict[int, Any]) -> dict[int, list[int]]:
    """``{node index: the leaves whose first use (in forward order) it is}``."""
    seen: set[int] = set()
    out: dict[int, list[int]] = {}
    for k, rec in enumerate(nodes):
        if rec is not None:
            for e in rec[INPUTS]:
                if e is not None and (t := input_tid(e)) in leaves and t not in seen:
                    seen.add(t)
                    out.setdefault(k, []).append(t)
    return out


def unbroadcast(xp: Any, g: Any, shape: tuple[int, ...], opname: str) -> Any:
    """Sum ``g`` back to ``shape``: broadcasting is undone here, once, for every primitive."""
    gshape = tuple(g.shape)
    lead = len(gshape) - len(shape)
    if lead < 0 or any(n not in (1, m) for n, m in zip(shape, gshape[lead:], strict=True)):
        raise ValueError(
            f"Tape.gradient: the VJP of '{opname}' returned a gradient of shape "
            f"{gshape}, which does not broadcast to its input's shape {tuple(shape)}"
        )
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1
    )
    if axes:
        g = xp.sum(g, axis=axes, keepdims=True)
    return g if g.shape == shape else xp.reshape(g, shape)


def _item(xp: Any, t: Any, i: int) -> Any:
    return t[i]


def _astype(xp: Any, g: Any, dtype: Any) -> Any:
    if dtype == np.float16 and isinstance(g, np.ndarray):
        with np.errstate(over="ignore"):  # inf in a float16 gradient is GradScaler's signal
            return g.astype(dtype)
    return g.astype(dtype)


def _add(xp: Any, a: Any, b: Any) -> Any:
    return a + b


def _call(fn: Callable[..., Any], step: Any, xp: Any, args: tuple[Any, ...], kw: Any) -> Any:
    return fn(xp, *args, **kw)
