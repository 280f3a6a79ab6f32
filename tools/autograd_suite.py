"""Run HIPS autograd's own tests through tapegrad (``import autograd`` maps to tapegrad).

    python tools/autograd_suite.py --autograd-src /path/to/autograd [--json out.json]

``--autograd-src`` is a checkout of https://github.com/HIPS/autograd (a plain folder, or a bare
git directory read with ``git show``). Its test files are copied into a temporary folder next
to an adapter package (``tools/autograd_shim/autograd``) and run with pytest; each test is
counted as passed or failed, and a failure is classified: ``complex`` (needs complex numbers,
out of scope), ``internal`` (autograd's own internals: ``autograd.core``, its wrappers' names and
docstrings; out of scope), ``missing`` (a numpy function or spelling tapegrad lacks), ``wrong_gradient``
(the finite-difference check disagrees), ``wrong_value`` (an assertion of the test) or
``error`` (anything else). Autograd internals (``core``, ``extend``, ``vspace``, boxes) are not
tapegrad's API: those files are not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "tools" / "autograd_shim"
# the test files that exercise numpy functions and differential operators only
FILES = (
    "test_numpy.py test_linalg.py test_systematic.py test_scalar_ops.py test_binary_ops.py "
    "test_wrappers.py test_jacobian.py test_truediv.py test_graphs.py"
).split()
HELPERS = ["numpy_utils.py"]
CATEGORIES = ("passed", "complex", "internal", "missing", "wrong_gradient", "wrong_value", "error")

_CONFTEST = """
import json, os
import numpy as np
import pytest

from autograd_suite import classify as _classify

_OUT = os.environ["AUTOGRAD_SUITE_OUT"]
_rows = []


@pytest.fixture(autouse=True)
def random_seed():
    np.random.seed(42)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        text = "" if rep.passed else str(rep.longrepr)
        cat = "passed" if rep.passed else ("skipped" if rep.skipped else _classify(text))
        last = [ln for ln in text.splitlines() if ln.startswith("E ")]
        _rows.append({"test": item.nodeid, "category": cat, "reason": " | ".join(last[:3])[:400]})


def pytest_sessionfinish(session):
    with open(_OUT, "w") as fh:
        json.dump(_rows, fh, indent=1)
"""


def classify(text: str) -> str:
    """A failed test's category from its report text."""
    low = text.lower()
    if "complex" in low:
        return "complex"
    if "no module named 'autograd." in low or "__name__ ==" in low or "__doc__" in low:
        return "internal"
    if "check_grads: the vjp disagrees" in low:
        return "wrong_gradient"
    missing = (
        "has no tapegrad counterpart", "neither tapegrad nor numpy has it", "has no attribute",
        "unexpected keyword argument", "is not supported", "cannot import name",
    )  # fmt: skip
    if any(m in low for m in missing):
        return "missing"
    if "assertionerror" in low:
        return "wrong_value"
    return "error"


def read_source(src: Path, relpath: str) -> tuple[str | None, str]:
    """A file of a checkout (a plain folder, or a bare git directory such as a mirror), and the
    checkout's commit ("" when ``src`` is not a git directory)."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(src), *args], capture_output=True, text=True, check=True
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        commit = ""
    p = src / relpath
    if p.is_file():
        return p.read_text(), commit
    try:
        return git("show", f"HEAD:{relpath}"), commit
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None, commit


def _read(src: Path, name: str) -> str | None:
    return read_source(src, f"tests/{name}")[0]


def run(src: Path, files: list[str] | None = None, timeout: float = 1500) -> list[dict]:
    """Run the test files from ``src``; one row per test: test, category, reason."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        shutil.copytree(SHIM / "autograd", t / "autograd")
        for name in (files or FILES) + HELPERS:
            text = _read(src, name)
            if text is None:
                raise FileNotFoundError(f"autograd_suite: no tests/{name} under {src}")
            (t / name).write_text(text)
        (t / "conftest.py").write_text(_CONFTEST)
        (t / "pytest.ini").write_text("[pytest]\n")
        out = t / "rows.json"
        env = dict(
            os.environ,
            AUTOGRAD_SUITE_OUT=str(out),
            PYTHONPATH=os.pathsep.join([str(t), str(ROOT), str(ROOT / "tools")]),
        )
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-c",
            str(t / "pytest.ini"),
            "--rootdir",
            str(t),
            "-W",
            "ignore",
            "--continue-on-collection-errors",
            *(files or FILES),
        ]
        proc = subprocess.run(
            cmd, check=False, cwd=t, env=env, capture_output=True, text=True, timeout=timeout
        )
        rows = json.loads(out.read_text()) if out.exists() else []
        # a file that fails to import counts each of its tests as an error, with pytest's reason
        for line in proc.stdout.splitlines():
            if line.startswith("ERROR ") and "::" not in line:
                name = line.split()[1]
                tests = [
                    ln for ln in (t / name).read_text().splitlines() if ln.startswith("def test")
                ]
                rows += [
                    {
                        "test": f"{name}::{ln[4:].split('(')[0]}",
                        "category": "error",
                        "reason": f"the file does not import: {line[:300]}",
                    }
                    for ln in tests
                ]
        return rows


def summary(rows: list[dict]) -> dict[str, int]:
    counts = {c: sum(r["category"] == c for r in rows) for c in CATEGORIES}
    out = counts["complex"] + counts["internal"] + sum(r["category"] == "skipped" for r in rows)
    counts["in_scope"] = len(rows) - out
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--autograd-src", required=True, type=Path)
    ap.add_argument("--json", type=Path, help="write every test's row here")
    ap.add_argument("files", nargs="*", help="test files to run (default: all in scope)")
    a = ap.parse_args()
    rows = run(a.autograd_src, a.files or None)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    for r in rows:
        if r["category"] not in ("passed", "complex", "internal", "skipped"):
            print(f"{r['category']:15} {r['test']}  {r['reason'][:200]}")
    c = summary(rows)
    rate = c["passed"] / c["in_scope"] if c["in_scope"] else 0.0
    print(json.dumps(c), f"pass rate (real-valued): {c['passed']}/{c['in_scope']} = {rate:.1%}")


if __name__ == "__main__":
    main()
