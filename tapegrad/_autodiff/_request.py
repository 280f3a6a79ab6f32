"""A gradient request: targets made seeds, sources checked and listed, and the result shaped
as the sources were given (a Tensor, a list, a Gradients)."""

from __future__ import annotations

from typing import Any

from .._backend import np
from .._tensor import Tensor, _wrap
from ._gradients import NO_PATH, Gradients, TapeFacts, tname


def source_list(sources: Any, into: Any) -> tuple[list[Tensor] | None, bool]:
    """``(the source tensors or None for every leaf, whether sources is a Module)``."""
    module_req = callable(getattr(sources, "_parameter_list", None))  # a Module, by protocol
    if sources is None:
        src_list: list[Tensor] | None = None
    elif module_req:
        src_list = sources._parameter_list()
    elif isinstance(sources, Tensor):
        src_list = [sources]
    elif isinstance(sources, (list, tuple)) and all(isinstance(s, Tensor) for s in sources):
        src_list = list(sources)
    else:
        many = isinstance(sources, (list, tuple))
        bad = next(s for s in sources if not isinstance(s, Tensor)) if many else sources
        raise TypeError(
            "Tape.gradient: sources must be None, a Tensor, a list/tuple of Tensors or a "
            f"Module, got a {type(bad).__name__}" + (" in the list" if many else "")
        )
    if into is not None and src_list is not None and not module_req:
        raise TypeError(
            "Tape.gradient(into=...): accumulation needs a Gradients result: pass "
            "sources=None or a Module"
        )
    return src_list, module_req


def result(
    sources: Any,
    src_list: list[Tensor] | None,
    module_req: bool,
    results: dict[int, Tensor],
    leaves: dict[int, Tensor],
    facts: TapeFacts,
    into: Gradients | None,
) -> Any:
    """The backward pass's ``{tid: gradient}`` shaped as ``sources`` asked."""
    def get(t: Tensor) -> Any:
        return results.get(t._tid) if t._tid is not None else None

    if src_list is not None and not module_req:
        # A source that does not reach the target has a zero derivative (as in JAX).
        zs = [g if (g := get(s)) is not None else _wrap(np.zeros_like(s._data)) for s in src_list]
        return zs[0] if isinstance(sources, Tensor) else type(sources)(zs)
    ts = leaves.values() if src_list is None else src_list
    out = Gradients()
    d = out._d
    missing = []
    for t in ts:  # one loop: no generator, no call per tensor
        tid = t._tid
        g = None if tid is None else results.get(tid)
        if g is not None:
            d[id(t)] = (t, g)
        else:
            missing.append(t)
    for t in missing:  # a reason for each trainable one not reached
        if id(t) not in d and (src_list is None or t.requires_grad):  # type: ignore[attr-defined]
            out._reasons[id(t)] = (t, NO_PATH if src_list is None else facts.reason(t))
    out._facts = facts
    if into is not None:
        into._accumulate(out)
        return into
    return out


def check_sources(tape: Any, sources: list[Tensor], info: dict[int, Any]) -> None:
    """Tensor sources must be on this tape: an unwatched one would silently get zeros."""
    for k, t in enumerate(sources):
        if t._tid is not None and t._tid in info:
            continue
        if t._is_param and t.requires_grad and tape.watch_parameters and tape._used_with:  # type: ignore[attr-defined]
            continue  # auto-watched by the `with` block, just never used: a zero gradient
        which = f"source {k}" if len(sources) > 1 else "the source"
        if t._is_param:
            why = TapeFacts(tape, {}).reason(t)
        else:
            why = (
                "it was never watched and no op recorded here produced it. Watch it with "
                "tape.watch(x) before using it, or trace it with x = x.trace(tape); a tensor "
                "made with .numpy(), detach() or inside tg.no_grad() has left every tape"
            )
        raise ValueError(
            f"Tape.gradient: {which} ({tname(t)}, {t.dtype}) is not on this tape: {why}"
        )


def target_seeds(
    tape: Any, target: Any, output_gradients: Any, strict: bool = True
) -> dict[int, Tensor]:
    """``{tid: output gradient}`` for the targets; with ``strict``, each must be on this tape
    (otherwise it is a constant here and is skipped)."""
    if (
        output_gradients is None
        and target.__class__ is Tensor
        and target._data.size == 1
        and target._tid is not None
        and tape in target._tapes
    ):  # one scalar loss: the common case, without the general path's lists
        one = np.empty_like(target._data)  # numpy's ones_like is Python: two C calls instead
        one.fill(1)
        return {target._tid: _wrap(one)}
    targets = list(target) if isinstance(target, (list, tuple)) else [target]
    ogs = output_gradients if isinstance(output_gradients, (list, tuple)) else [output_gradients]
    if output_gradients is None:
        ogs = [None] * len(targets)
    elif len(ogs) != len(targets):
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
        if tid is not None and (tape in t._tapes or tid in tape._leaves):
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
