"""Looking at a tape: a table of its ops, a graphviz picture, and why a gradient is missing.

These read the record without changing it; they are what ``Tape.summary``, ``Tape.to_dot`` and
``Tape.explain`` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._autodiff import Tape

if TYPE_CHECKING:
    from ._autodiff import Tape
    from ._tensor import Tensor


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _leaf_name(t: Any) -> str:
    name = getattr(t, "name", None)
    return name if name else ("parameter" if getattr(t, "_is_param", False) else "input")


def summary(tape: Tape) -> str:
    """One line per recorded op: index, op, output shape, dtype, bytes saved, module path.

    The footer counts the ops, the leaves and the bytes the record holds for backward (an array
    saved by several ops counts once).

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(3))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> print(tape.summary())
    #  op   output  dtype    saved  module
    --------------------------------------
    0  mul  (3,)    float32  12 B
    1  sum  ()      float32  0 B
    2 ops, 1 leaf, 12 B held for backward
    """
    nodes = tape.nodes
    rows = [("#", "op", "output", "dtype", "saved", "module")]
    for i, n in enumerate(nodes):
        rows.append(
            (
                str(i),
                n.prim.name,
                str(tuple(n.out_shape)),
                str(n.out_dtype),
                _fmt_bytes(n.saved_bytes()),
                n.scope or "",
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(6)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    nleaves = len(tape.leaves)
    held = tape.bytes_held()
    lines.append(
        f"{len(nodes)} op{'s' if len(nodes) != 1 else ''}, {nleaves} "
        f"lea{'ves' if nleaves != 1 else 'f'}, {_fmt_bytes(held)} held for backward"
        + (" (released)" if tape.released else "")
    )
    return "\n".join(lines)


def _quote(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(tape: Tape, group: str = "op") -> str:
    """Graphviz DOT source of the recorded DAG.

    ``group="op"`` draws every op; ``group="module"`` draws one box per module path (with its op
    count and output shape), which keeps a whole model's training step readable.

    Ops are boxes (name and output shape), grouped in one dashed cluster per module path;
    leaves are ellipses, parameters labelled by their dotted module path; an edge goes from
    each input on this tape to the op that used it. Render it with graphviz
    (``dot -Tsvg``) or ``graphviz.Source(tape.to_dot())``.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(2))
    >>> w.name = "layer.weight"
    >>> with tg.Tape() as tape:
    ...     y = (w * w).sum()
    >>> dot = tape.to_dot()
    >>> "layer.weight" in dot and dot.count("->") == 3
    True
    """
    if group == "module":
        return _to_dot_modules(tape)
    if group != "op":
        raise ValueError(f"to_dot: group must be 'op' or 'module', got {group!r}")
    nodes = tape.nodes
    leaves = {t._tid: t for t in tape.leaves}
    lines = [
        "digraph tape {",
        '  rankdir=TB; node [fontname="Helvetica", fontsize=10]; edge [color="#555555"];',
    ]
    producers = {n.out_tid: i for i, n in enumerate(nodes)}
    clusters: dict[str, list[str]] = {}
    for i, n in enumerate(nodes):
        label = _quote(f"{n.prim.name}\n{tuple(n.out_shape)}").replace("\n", "\\n")
        clusters.setdefault(n.scope or "", []).append(
            f'op{i} [label="{label}", shape=box, style="rounded,filled", fillcolor="#dbe9f6"];'
        )
    for k, (scope, items) in enumerate(clusters.items()):
        if scope:
            lines.append(
                f'  subgraph cluster_{k} {{ label="{_quote(scope)}"; style=dashed; color="#999999";'
            )
            lines += ["    " + s for s in items]
            lines.append("  }")
        else:
            lines += ["  " + s for s in items]
    for tid, t in leaves.items():
        color = "#f9e3c3" if getattr(t, "_is_param", False) else "#e2f0d9"
        label = _quote(f"{_leaf_name(t)}\n{tuple(t.shape)}").replace("\n", "\\n")
        lines.append(
            f'  leaf{tid} [label="{label}", shape=ellipse, style=filled, fillcolor="{color}"];'
        )
    for i, n in enumerate(nodes):
        for tid in n.input_tids:
            if tid is None:
                continue
            if tid in producers and producers[tid] < i:
                lines.append(f"  op{producers[tid]} -> op{i};")
            elif tid in leaves:
                lines.append(f"  leaf{tid} -> op{i};")
    lines.append("}")
    return "\n".join(lines)


def _to_dot_modules(tape: Tape) -> str:
    nodes = tape.nodes
    leaves = {t._tid: t for t in tape.leaves}
    top = "(top level)"
    scope_of = {n.out_tid: (n.scope or top) for n in nodes}
    order: dict[str, list[Any]] = {}
    for n in nodes:
        order.setdefault(n.scope or top, []).append(n)
    ids = {sc: f"m{k}" for k, sc in enumerate(order)}
    lines = [
        "digraph tape {",
        '  rankdir=TB; node [fontname="Helvetica", fontsize=11]; edge [color="#555555"];',
    ]
    for sc, ns in order.items():
        ops: dict[str, int] = {}
        for n in ns:
            ops[n.prim.name] = ops.get(n.prim.name, 0) + 1
        names = ", ".join(f"{k}" + (f" x{v}" if v > 1 else "") for k, v in list(ops.items())[:4])
        more = ", ..." if len(ops) > 4 else ""
        label = f"{sc}\n{len(ns)} ops: {_quote(names)}{more}\nout {tuple(ns[-1].out_shape)}"
        fill = "#fde2e1" if sc == top else "#dbe9f6"
        lines.append(f'  {ids[sc]} [label="{label}", shape=box, style="rounded,filled", fillcolor="{fill}"];')
    edges: set[tuple[str, str]] = set()
    for n in nodes:
        dst = ids[n.scope or top]
        for tid in n.input_tids:
            if tid is None:
                continue
            if tid in scope_of:
                src = ids[scope_of[tid]]
                if src != dst:
                    edges.add((src, dst))
            elif tid in leaves:
                edges.add((f"leaf{tid}", dst))
    for tid, t in leaves.items():
        color = "#f9e3c3" if getattr(t, "_is_param", False) else "#e2f0d9"
        label = _quote(f"{_leaf_name(t)}\n{tuple(t.shape)}").replace("\n", "\\n")
        lines.append(f'  leaf{tid} [label="{label}", shape=ellipse, style=filled, fillcolor="{color}", fontsize=9];')
    lines += [f"  {a} -> {b};" for a, b in sorted(edges)]
    lines.append("}")
    return "\n".join(lines)


def render(tape: Tape, path: str, format: str = "svg", group: str = "op") -> str:
    """Write the DAG as SVG or PNG through graphviz's ``dot`` program (Debian: ``graphviz``).

    ``path`` may carry the extension or not; the written file's path is returned.
    """
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    if format not in ("svg", "png", "pdf"):
        raise ValueError(f"render: format must be 'svg', 'png' or 'pdf', got {format!r}")
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError(
            "render: graphviz's `dot` program is not installed (Debian/Ubuntu: "
            "apt-get install graphviz; macOS: brew install graphviz); tape.to_dot() gives the "
            "DOT source without it"
        )
    out = path if path.endswith("." + format) else f"{path}.{format}"
    src = to_dot(tape, group)
    subprocess.run([dot, f"-T{format}", "-o", out], input=src.encode(), check=True)
    return out


def explain(tape: Tape, target: Tensor, source: Tensor) -> str:
    """The chain of ops from ``source`` to ``target`` on this tape, or why there is none.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(2))
    >>> w.name = "w"
    >>> with tg.Tape(persistent=True) as tape:
    ...     loss = tg.tanh(w * 3.0).sum()
    >>> tape.explain(loss, w)
    'w (2,) -> mul_scalar (2,) -> tanh (2,) -> sum ()'
    """
    if tape.released:
        return (
            "no path: the tape was released (a non-persistent tape frees its record in its "
            "first gradient() call); record with tg.Tape(persistent=True) to inspect it after"
        )
    if source.dtype.kind not in "fc":
        return (
            f"no path: the source has dtype {source.dtype}; integer and bool tensors carry no "
            "gradient (an embedding's gradient goes to its float table, not to the indices)"
        )
    on_tape = {t._tid for t in tape.leaves} | {n.out_tid for n in tape.nodes}
    if source._tid is None or source._tid not in on_tape:
        if getattr(source, "_is_param", False):
            if not source.requires_grad:  # type: ignore[attr-defined]
                return "no path: the source is a frozen parameter (requires_grad=False)"
            if not tape.watch_parameters:
                return (
                    "no path: the tape was opened with watch_parameters=False and never watched "
                    "this parameter (tape.watch(param) or tape.watch(module))"
                )
            return (
                "no path: the parameter never met this tape: it was not used while the tape "
                "recorded, or only by ops whose inputs were on no open tape (in dfdx style, "
                "trace that branch's input with x.trace(tape))"
            )
        return (
            "no path: the source is not on this tape: it was never watched and no recorded op "
            "produced it (watch it with tape.watch(x) or trace it with x.trace(tape); a tensor "
            "made with .numpy(), detach() or inside tg.no_grad() has left every tape)"
        )
    if target._tid is None or target._tid not in on_tape:
        return (
            "no path: the target is not on this tape: it was computed only from tensors on no "
            "open tape, or left the tape through .numpy(), detach()/stop_gradient or no_grad()"
        )
    nodes = tape.nodes
    parent: dict[int, tuple[int, int]] = {}  # tid -> (node index, the input tid it came from)
    reach = {source._tid}
    for i, n in enumerate(nodes):
        for tid in n.input_tids:
            if tid is not None and tid in reach:
                reach.add(n.out_tid)
                parent.setdefault(n.out_tid, (i, tid))
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
        steps.append(f"{n.prim.name} {tuple(n.out_shape)}" + (f" in {n.scope}" if n.scope else ""))
        tid = prev
    name = getattr(source, "name", None) or "source"
    return " -> ".join([f"{name} {tuple(source.shape)}", *reversed(steps)])


def _bind() -> None:
    """Tape's inspection methods (``tape.summary()``, ...) are these functions: they read the
    record only through the engine's hooks ``Tape.nodes``, ``Tape.leaves``, ``Node`` and
    ``Tape.bytes_held``."""
    for f in (summary, to_dot, render, explain):
        assert f.__name__ not in Tape.__dict__, f"Tape.{f.__name__} is declared twice"
        setattr(Tape, f.__name__, f)


_bind()
