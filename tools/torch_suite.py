"""Run tinygrad's op tests (written against PyTorch) with ``torch`` bound to tapegrad.

    python tools/torch_suite.py --src /path/to/tinygrad [--json out.json] [-k substring]

``--src`` is a checkout of https://github.com/tinygrad/tinygrad (a plain folder, or a bare git
directory read with ``git show``). Its ``test/backend/test_ops.py`` calls
``helper_test_op(shapes, torch_fxn, tinygrad_fxn)`` in each test; the tinygrad side is ignored.
Each test method runs twice, unchanged: once in a copy of the module where ``torch`` is PyTorch
(the reference: inputs, outputs and gradients are recorded), then in a copy where ``torch`` is
tapegrad (``import tapegrad as torch``), where the same calls get the same inputs as tapegrad
tensors and their outputs and gradients are compared with the reference under the test's own
tolerances (shape and dtype equal, values ``allclose``). ``helper_test_exception`` passes when
tapegrad raises the exception type PyTorch raises.

Scope, decided on the PyTorch run alone (before tapegrad runs), in this order:

- ``skipped``: the test is skipped on a CPU (its own ``unittest.skip*`` decorators);
- ``tinygrad_only``: the test calls neither helper, so it has no torch-side function;
- ``torch_error``: the PyTorch run does not complete (its body uses tinygrad objects);
- ``dtype``: PyTorch creates a tensor of a dtype tapegrad does not have (``uint16``,
  ``uint32``, ``uint64``, complex, float8, ...), found with a ``TorchDispatchMode`` watching
  every op;
- ``random``: the PyTorch run draws from PyTorch's random generator (``torch.randint`` in the
  test's body, dropout, ...): tapegrad's generator cannot draw the same numbers.

Every other test is in scope and is ``passed``, ``failed`` (tapegrad raises, or runs past the
time limit) or ``wrong`` (an output or gradient differs in shape, dtype or value; tapegrad returns
where PyTorch raises; or an assertion of the test fails on tapegrad's values).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import traceback
import types
import unittest
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from autograd_suite import read_source

TEST_FILE = "test/backend/test_ops.py"
OUT_OF_SCOPE = ("skipped", "tinygrad_only", "torch_error", "dtype", "random")
# aten ops that draw from PyTorch's generator (rand, randn, randint, randperm, random_, ...)
RANDOM_OPS = {"bernoulli", "normal", "uniform", "multinomial", "native_dropout", "exponential",
              "cauchy", "geometric", "poisson", "log_normal"}  # fmt: skip
IN_SCOPE = ("passed", "failed", "wrong")
TIME_LIMIT = 120  # seconds for one test on tapegrad


class Wrong(AssertionError):
    """tapegrad's result differs from PyTorch's."""


class _Any:
    """Stands in for every tinygrad object: any attribute, call or operator gives another."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> _Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()

    def __call__(self, *args: Any, **kwargs: Any) -> _Any:
        return _Any()

    def __getitem__(self, key: Any) -> _Any:
        return _Any()

    def __iter__(self) -> Any:
        return iter(())

    def __contains__(self, item: Any) -> bool:
        return True

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> _Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    __hash__ = object.__hash__


def _binary(self: _Any, *other: Any) -> _Any:
    return _Any()


for _op in "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift lt le gt ge".split():
    for _name in (f"__{_op}__", f"__r{_op}__"):
        setattr(_Any, _name, _binary)
for _name in ("__neg__", "__invert__", "__abs__"):
    setattr(_Any, _name, _binary)


class _DTypes(_Any):
    """tinygrad's ``dtypes``: a numpy dtype's ``max`` / ``min`` where a test uses them as numbers."""

    _ALIASES = {"int": "int32", "float": "float32", "half": "float16", "double": "float64",
                "long": "int64", "default_float": "float32", "default_int": "int32"}  # fmt: skip

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            d = np.dtype(self._ALIASES.get(name, name))
        except TypeError:
            return _Any()
        info: Any = np.iinfo(d) if d.kind in "iu" else np.finfo(d) if d.kind == "f" else None
        if info is None:
            return _Any()
        return types.SimpleNamespace(max=info.max, min=info.min, itemsize=d.itemsize)


def _tinygrad_stubs() -> dict[str, types.ModuleType]:
    """The tinygrad modules test_ops.py imports, configured as its CPU run."""

    class Device:
        DEFAULT = "CPU"

        def __class_getitem__(cls, key: Any) -> _Any:
            return _Any()

    class NIRRenderer:
        pass

    mods = {n: types.ModuleType(n) for n in
            ("tinygrad", "tinygrad.helpers", "tinygrad.tensor", "tinygrad.renderer",
             "tinygrad.renderer.nir")}  # fmt: skip
    h = mods["tinygrad.helpers"]
    h.getenv = lambda key, default=0: default  # type: ignore[attr-defined]
    h.DEBUG, h.IMAGE = 0, 0  # type: ignore[attr-defined]
    h.DEV = types.SimpleNamespace(renderer="", interface="")  # type: ignore[attr-defined]
    h.Context = _Any  # type: ignore[attr-defined]
    t = mods["tinygrad"]
    t.Tensor, t.Device, t.dtypes = _Any(), Device, _DTypes()  # type: ignore[attr-defined]
    mods["tinygrad.tensor"]._to_np_dtype = lambda d: np.float32  # type: ignore[attr-defined]
    mods["tinygrad.renderer.nir"].NIRRenderer = NIRRenderer  # type: ignore[attr-defined]
    return mods


def load_module(source: str, torch_module: Any, name: str) -> dict[str, Any]:
    """Execute test_ops.py's text with stub tinygrad modules; its ``torch`` is ``torch_module``."""
    stubs = _tinygrad_stubs()
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    ns: dict[str, Any] = {"__name__": name}
    try:
        exec(compile(source, TEST_FILE, "exec"), ns)  # noqa: S102 - the suite under test
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    ns["torch"] = torch_module
    return ns


def _draw(shps: Any, low: float, high: float) -> list[np.ndarray]:
    """test_ops.py's random inputs (it reseeds numpy's global generator, as here)."""
    np.random.seed(0)
    return [np.random.uniform(low=low, high=high, size=s).astype(np.float32) for s in shps]


def _torch_inputs(torch: Any, shps: Any, vals: Any, low: float, high: float, fwd: bool) -> list:
    """test_ops.py's ``prepare_test_op`` on the PyTorch side."""
    if shps is None:
        ts = [torch.tensor(x, requires_grad=not fwd) for x in vals]
    else:
        ts = [torch.tensor(d, requires_grad=not fwd) for d in _draw(shps, low, high)]
    return [t.type(torch.int32) if t.dtype == torch.int64 else t for t in ts]


class Reference:
    """The PyTorch side: runs each helper call and records what tapegrad must reproduce."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.calls: list[dict] = []

    def helper_test_op(self, shps: Any, torch_fxn: Any, tinygrad_fxn: Any = None,
                       atol: float = 1e-6, rtol: float = 1e-3, grad_atol: float = 1e-4,
                       grad_rtol: float = 1e-3, forward_only: bool = False, vals: Any = None,
                       low: float = -2, high: float = 2) -> None:  # fmt: skip
        ts = _torch_inputs(self.torch, shps, vals, low, high, forward_only)
        out = torch_fxn(*ts)
        grads = None
        if not forward_only and ts:
            grads = [g.detach().numpy() for g in self.torch.autograd.grad(torch_fxn(*ts).sum(), ts)]
        self.calls.append({
            "kind": "op", "inputs": [t.detach().numpy() for t in ts], "out": out.detach().numpy(),
            "grads": grads, "tol": (atol, rtol, grad_atol, grad_rtol), "draw": (shps, low, high),
        })  # fmt: skip

    def helper_test_exception(self, case: Any, shps: Any, torch_fxn: Any, tinygrad_fxn: Any = None,
                              expected: Any = Exception, forward_only: bool = False,
                              exact: bool = False, vals: Any = None, low: float = -1.5,
                              high: float = 1.5) -> None:  # fmt: skip
        ts = _torch_inputs(self.torch, shps, vals, low, high, forward_only)
        with case.assertRaises(expected):
            torch_fxn(*ts)
        self.calls.append({"kind": "raises", "inputs": [t.detach().numpy() for t in ts],
                           "expected": expected, "draw": (shps, low, high)})  # fmt: skip


def _compare(what: str, got: Any, want: np.ndarray, atol: float, rtol: float) -> None:
    got = np.asarray(got)
    if got.shape != want.shape:
        raise Wrong(f"{what}: shape {got.shape}, PyTorch {want.shape}")
    if got.dtype != want.dtype:
        raise Wrong(f"{what}: dtype {got.dtype}, PyTorch {want.dtype}")
    try:
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
        else:
            np.testing.assert_equal(got, want)
    except AssertionError as e:
        raise Wrong(f"{what}: {str(e).strip()[:600]}") from None


class Candidate:
    """The tapegrad side: replays the recorded calls with tapegrad tensors and compares."""

    def __init__(self, tg: Any, calls: list[dict]) -> None:
        self.tg = tg
        self.calls = list(calls)

    def _next(self, kind: str) -> dict:
        if not self.calls or self.calls[0]["kind"] != kind:
            raise Wrong(f"the test made a {kind} call that PyTorch's run did not")
        ref = self.calls.pop(0)
        shps, low, high = ref["draw"]
        if shps is not None:  # leave numpy's generator where PyTorch's run left it
            _draw(shps, low, high)
        return ref

    def _inputs(self, ref: dict) -> list:
        return [self.tg.tensor(a) for a in ref["inputs"]]

    def _array(self, what: str, t: Any) -> np.ndarray:
        if not isinstance(t, self.tg.Tensor):
            raise TypeError(f"{what}: the function returned {type(t).__name__}, not a Tensor")
        return t.detach().numpy()

    def helper_test_op(self, shps: Any, torch_fxn: Any, *args: Any, **kwargs: Any) -> None:
        ref = self._next("op")
        atol, rtol, grad_atol, grad_rtol = ref["tol"]
        out = torch_fxn(*self._inputs(ref))
        _compare("forward", self._array("forward", out), ref["out"], atol, rtol)
        if ref["grads"] is None:
            return
        xs = self._inputs(ref)
        with self.tg.Tape() as tape:
            tape.watch(*xs)
            total = torch_fxn(*xs).sum()
        grads = tape.gradient(total, xs)
        for i, (g, want) in enumerate(zip(grads, ref["grads"], strict=True)):
            got = np.zeros_like(want) if g is None else self._array("gradient", g)
            _compare(f"gradient of input {i}", got, want, grad_atol, grad_rtol)

    def helper_test_exception(self, case: Any, shps: Any, torch_fxn: Any, *args: Any,
                              **kwargs: Any) -> None:  # fmt: skip
        ref = self._next("raises")
        try:
            torch_fxn(*self._inputs(ref))
        except ref["expected"]:
            return
        want = ref["expected"] if isinstance(ref["expected"], tuple) else (ref["expected"],)
        names = " or ".join(e.__name__ for e in want)
        raise Wrong(f"returns a value where PyTorch raises {names}")


def _allowed_dtypes(torch: Any, tg: Any) -> set:
    """PyTorch dtypes that tapegrad has under the same name."""
    out = set()
    for name in dir(torch):
        d = getattr(torch, name, None)
        if isinstance(d, torch.dtype):
            with contextlib.suppress(Exception):
                if getattr(tg, str(d).split(".")[-1], None) is not None:
                    out.add(d)
    return out


def _dtype_watch(torch: Any, seen: set) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # noqa: ANN204
            out = func(*args, **(kwargs or {}))
            op = str(func).split(".")[-2] if "." in str(func) else str(func)
            if op.startswith("rand") or op.rstrip("_") in RANDOM_OPS:
                seen.add("random")
            for v in [*args, *(kwargs or {}).values(), out]:
                for t in v if isinstance(v, (list, tuple)) else [v]:
                    if isinstance(t, torch.Tensor):
                        seen.add(t.dtype)
            return out

    return Watch()


class _Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout(f"ran past {TIME_LIMIT} s")


def _reason(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1:]
    where = f" ({Path(last[0].filename).name}:{last[0].lineno})" if last else ""
    return f"{type(e).__name__}: {str(e).strip()}"[:400] + where


def _run_method(ns: dict, cls: str, name: str, helper: Any) -> None:
    ns["helper_test_op"] = helper.helper_test_op
    case = ns[cls](name)
    case.helper_test_exception = lambda *a, **k: helper.helper_test_exception(case, *a, **k)
    np.random.seed(1337)  # the test's own draws are the same on both sides
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            getattr(case, name)()


def run_test(ref_ns: dict, tg_ns: dict, cls: str, name: str, allowed: set) -> dict:
    """One test's row: test, category, reason."""
    import torch  # noqa: PLC0415

    import tapegrad  # noqa: PLC0415

    row = {"test": f"{cls}.{name}", "category": "", "reason": ""}
    method = getattr(ref_ns[cls], name)
    if getattr(method, "__unittest_skip__", False) or getattr(ref_ns[cls], "__unittest_skip__", 0):
        return {**row, "category": "skipped", "reason": getattr(method, "__unittest_skip_why__", "")}
    reference, seen = Reference(torch), set()
    try:
        with _dtype_watch(torch, seen):
            _run_method(ref_ns, cls, name, reference)
    except unittest.SkipTest as e:
        return {**row, "category": "skipped", "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - the reference cannot run it
        return {**row, "category": "torch_error", "reason": _reason(e)}
    if not reference.calls:
        return {**row, "category": "tinygrad_only", "reason": "calls neither helper"}
    if "random" in seen:
        return {**row, "category": "random", "reason": "draws from PyTorch's generator"}
    lacking = sorted(str(d) for d in seen - allowed)
    if lacking:
        return {**row, "category": "dtype", "reason": "PyTorch uses " + ", ".join(lacking)}
    candidate = Candidate(tapegrad, reference.calls)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(TIME_LIMIT)
    try:
        _run_method(tg_ns, cls, name, candidate)
        if candidate.calls:
            raise Wrong(f"{len(candidate.calls)} of PyTorch's calls were not made")
    except unittest.SkipTest as e:
        return {**row, "category": "failed", "reason": f"skipped on tapegrad only: {e}"}
    except AssertionError as e:  # Wrong, or an assertion of the test on tapegrad's values
        return {**row, "category": "wrong", "reason": _reason(e)}
    except Exception as e:  # noqa: BLE001
        return {**row, "category": "failed", "reason": _reason(e)}
    finally:
        signal.alarm(0)
    return {**row, "category": "passed"}


def run(src: Path, select: str = "") -> tuple[list[dict], str]:
    """Every test's row, and the suite's commit (or "" for a plain folder)."""
    import torch  # noqa: PLC0415

    import tapegrad  # noqa: PLC0415

    text, commit = read_source(src, TEST_FILE)
    if text is None:
        raise FileNotFoundError(f"torch_suite: no {TEST_FILE} under {src}")
    ref_ns = load_module(text, torch, "test_ops_torch")
    tg_ns = load_module(text, tapegrad, "test_ops_tapegrad")
    allowed = _allowed_dtypes(torch, tapegrad)
    rows = []
    for cls, obj in list(ref_ns.items()):
        if not (isinstance(obj, type) and issubclass(obj, unittest.TestCase)):
            continue
        for name in unittest.TestLoader().getTestCaseNames(obj):
            if select in f"{cls}.{name}":
                rows.append(run_test(ref_ns, tg_ns, cls, name, allowed))
    return rows, commit


def summary(rows: list[dict]) -> dict[str, int]:
    counts = {c: sum(r["category"] == c for r in rows) for c in IN_SCOPE + OUT_OF_SCOPE}
    counts["in_scope"] = sum(counts[c] for c in IN_SCOPE)
    return counts


def table(rows: list[dict], commit: str) -> str:
    """The result page in Markdown: the counts, the scope rule and one row per test."""
    c = summary(rows)
    rule = __doc__.split("Scope, decided", 1)[1].split("Every other test", 1)[0]
    lines = [
        "# PyTorch op suite",
        "",
        "tinygrad's op tests, written against PyTorch, run unchanged with `torch` bound to "
        "tapegrad (`python tools/torch_suite.py --src <tinygrad checkout> --markdown "
        "docs/torch_op_suite.md` writes this page; `tests/test_torch_suite.py` checks it).",
        "",
        f"tinygrad `{TEST_FILE}` at commit `{commit or 'unknown'}`: "
        f"**{c['passed']} of {c['in_scope']} in-scope tests pass "
        f"({c['passed'] / max(c['in_scope'], 1):.1%})**, {c['failed']} fail, {c['wrong']} give a "
        "wrong result; out of scope: " + ", ".join(f"{c[k]} {k}" for k in OUT_OF_SCOPE) + ".",
        "",
        "Out of scope, decided" + rule.rstrip().replace("``", "`"),
        "",
        "*passed*: values and gradients equal PyTorch's (shape, dtype, and the test's "
        "tolerances); *failed*: tapegrad raises (a missing name, or an error where numpy and "
        "PyTorch disagree); *wrong*: a different result.",
        "",
        "| test | result | reason |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        reason = r["reason"].replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| `{r['test']}` | {r['category']} | {reason} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--json", type=Path, help="write every test's row here")
    ap.add_argument("--markdown", type=Path, help="write the result table here")
    ap.add_argument("-k", default="", help="run the tests whose name contains this")
    a = ap.parse_args()
    rows, commit = run(a.src, a.k)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if a.markdown:
        a.markdown.write_text(table(rows, commit))
    for r in rows:
        if r["category"] in ("failed", "wrong"):
            print(f"{r['category']:8} {r['test']}  {r['reason'][:240]}")
    c = summary(rows)
    rate = c["passed"] / c["in_scope"] if c["in_scope"] else 0.0
    print(json.dumps(c), f"pass rate (in scope): {c['passed']}/{c['in_scope']} = {rate:.1%}")


if __name__ == "__main__":
    main()
