"""Looking at a tape: a table of its ops, a graphviz picture, and why a gradient is missing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._tape import Tape
    from ._tensor import Tensor


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def summary(tape: Tape) -> str:
    """One line per recorded op: index, op, output shape, dtype, bytes saved, module path."""
    nodes = tape.nodes
    rows = [("#", "op", "output", "dtype", "saved", "module")]
    total = 0
    for i, n in enumerate(nodes):
        b = n.saved_bytes()
        total += b
        rows.append((str(i), n.prim.name, str(n.out_shape), str(n.out_dtype), _fmt_bytes(b), n.scope or ""))
    widths = [max(len(r[c]) for r in rows) for c in range(6)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append(f"{len(nodes)} ops, {len(tape._leaves)} leaves, {_fmt_bytes(total)} held for backward")
    return "\n".join(lines)


def _leaf_label(t: Any) -> str:
    name = getattr(t, "name", None)
    return f"{name}\\n{tuple(t.shape)}" if name else f"input\\n{tuple(t.shape)}"


def to_dot(tape: Tape) -> str:
    """Graphviz DOT source of the DAG: parameters labelled by their dotted module path, ops
    grouped into one cluster per module."""
    nodes = tape.nodes
    lines = [
        "digraph tape {",
        '  rankdir=TB; node [fontname="Helvetica", fontsize=10]; edge [color="#555555"];',
    ]
    producers = {n.out_tid: i for i, n in enumerate(nodes)}
    clusters: dict[str, list[str]] = {}
    for i, n in enumerate(nodes):
        label = f"{n.prim.name}\\n{tuple(n.out_shape)}"
        clusters.setdefault(n.scope or "", []).append(
            f'op{i} [label="{label}", shape=box, style="rounded,filled", fillcolor="#dbe9f6"];'
        )
    for k, (scope, items) in enumerate(clusters.items()):
        if scope:
            lines.append(f'  subgraph cluster_{k} {{ label="{scope}"; style=dashed; color="#999999";')
            lines += ["    " + s for s in items]
            lines.append("  }")
        else:
            lines += ["  " + s for s in items]
    for tid, t in tape._leaves.items():
        color = "#f9e3c3" if getattr(t, "_is_param", False) else "#e2f0d9"
        lines.append(f'  leaf{tid} [label="{_leaf_label(t)}", shape=ellipse, style=filled, fillcolor="{color}"];')
    for i, n in enumerate(nodes):
        for m in n.inputs:
            if m is None:
                continue
            tid = m[0]
            if tid in producers:
                lines.append(f"  op{producers[tid]} -> op{i};")
            elif tid in tape._leaves:
                lines.append(f"  leaf{tid} -> op{i};")
    lines.append("}")
    return "\n".join(lines)


def explain(tape: Tape, target: Tensor, source: Tensor) -> str:
    """The chain of ops from ``source`` to ``target`` on this tape, or why there is none."""
    if source.dtype.kind not in "fc":
        return f"no path: the source has integer dtype {source.dtype}; integer tensors carry no gradient"
    on_tape = source._tid is not None and (source._tid in tape._leaves or any(
        n.out_tid == source._tid for n in tape.nodes))
    if not on_tape:
        if getattr(source, "_is_param", False) and not source.requires_grad:  # type: ignore[attr-defined]
            return "no path: the source is a frozen parameter (requires_grad=False)"
        return (
            "no path: the source is not on this tape: it was never watched and no recorded op "
            "produced it (watch it with tape.watch(x), trace it with x.trace(tape), or, for a "
            "parameter, use it inside `with tg.Tape()`; a tensor made from .numpy() or detach() "
            "or inside no_grad() has left every tape)"
        )
    if target._tid is None or tape not in target._tapes:
        return (
            "no path: the target is not on this tape: it was computed only from tensors on no open "
            "tape, or left the tape through .numpy(), detach()/stop_gradient or no_grad()"
        )
    nodes = tape.nodes
    parent: dict[int, tuple[int, int]] = {}  # tid -> (node index, input tid)
    reach = {source._tid}
    for i, n in enumerate(nodes):
        for m in n.inputs:
            if m is not None and m[0] in reach:
                reach.add(n.out_tid)
                parent.setdefault(n.out_tid, (i, m[0]))
                break
    if target._tid not in reach:
        return (
            "no path: the source is on this tape but the target does not depend on it through "
            "recorded ops (its branch does not reach the target, or the path was cut by "
            "stop_gradient/detach, no_grad, or a round trip through .numpy())"
        )
    steps = []
    tid = target._tid
    while tid != source._tid:
        i, prev = parent[tid]
        n = nodes[i]
        steps.append(f"{n.prim.name}{tuple(n.out_shape)}" + (f" in {n.scope}" if n.scope else ""))
        tid = prev
    name = getattr(source, "name", None) or f"source{tuple(source.shape)}"
    return " -> ".join([name, *reversed(steps)])
