"""The engine's layout rules: small modules, imports that run downward, one owner of its state."""

from __future__ import annotations

import ast
from pathlib import Path

import tapegrad

ROOT = Path(tapegrad.__file__).parent
ENGINE = ROOT / "_autodiff"


def _imports(path: Path) -> list[str]:
    """Every module a file imports, resolved to a dotted name under ``tapegrad``."""
    tree = ast.parse(path.read_text())
    pkg = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            out += [f"{mod}.{a.name}" for a in node.names]
    return out


def test_no_engine_module_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in ENGINE.glob("*.py")}
    assert sizes and max(sizes.values()) <= 400, sizes


def test_the_engine_imports_nothing_above_it():
    for path in ENGINE.glob("*.py"):
        for mod in _imports(path):
            assert not mod.startswith(("tapegrad.nn", "tapegrad.optim", "tapegrad.ops")), (
                f"{path.name} imports {mod}"
            )
            if mod.startswith("tapegrad.") and not mod.startswith("tapegrad._autodiff"):
                top = mod.split(".")[1]
                assert top in {"_backend", "_tensor", "_dtypes"}, f"{path.name} imports {mod}"


def _state_writes(path: Path) -> list[str]:
    """Assignments to a field of the trace state (``STATE.x = ...``, ``STATE.x += ...``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                if t.value.id in {"STATE", "st"}:
                    found.append(f"{path.name}:{node.lineno}")
    return found


def test_only_the_state_module_writes_the_trace_state():
    offenders = []
    for path in ROOT.rglob("*.py"):
        if path != ENGINE / "_state.py":
            offenders += _state_writes(path)
    assert offenders == []
    assert _state_writes(ENGINE / "_state.py")  # the check itself sees writes


def test_no_module_reaches_into_the_engine_globals():
    for path in ROOT.rglob("*.py"):
        if ENGINE in path.parents:
            continue
        text = path.read_text()
        assert "_state import STATE" not in text and "_state.STATE" not in text, path
