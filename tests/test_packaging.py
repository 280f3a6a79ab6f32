"""The package as a user gets it: the wheel, its metadata, what importing it costs, what the demo installs.

The wheel test builds the sdist and the wheel from a copy of the source, installs the wheel into a
fresh virtual environment in a temporary folder, and runs the README's example, the flagship
example and a checkpoint round trip there. That environment sees only the distributions that
tapegrad and its ``examples`` extra need (linked from this environment's site-packages, so
nothing is downloaded): PyTorch, pytest and the rest of the test stack are not importable in it.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TEST_STACK = {"torch", "pytest", "ruff", "mypy", "hypothesis"}


def _version_in_source() -> str:
    text = (ROOT / "tapegrad" / "_version.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    assert m, "tapegrad/_version.py must hold one line __version__ = \"X.Y.Z\""
    return m.group(1)


def _closure(extras: set[str]) -> set[str]:
    """Every distribution tapegrad[extras] reaches: pyproject for tapegrad, installed metadata below.

    A self-reference (``tapegrad[other]``) in an extra is followed through pyproject too.
    """
    project = PYPROJECT["project"]
    seen: set[str] = set()
    visited: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [("tapegrad", frozenset(extras))]
    done_self: set[str] = set()
    while todo:
        name, wanted = todo.pop()
        name = canonicalize_name(name)
        if name == "tapegrad":
            reqs = [] if "" in done_self else list(project["dependencies"])
            done_self.add("")
            for e in sorted(wanted - done_self):
                assert e in project["optional-dependencies"], f"pyproject has no extra {e!r}"
                reqs += project["optional-dependencies"][e]
                done_self.add(e)
            for r in map(Requirement, reqs):
                todo.append((r.name, frozenset(r.extras)))
            continue
        if (name, wanted) in visited:
            continue
        visited.add((name, wanted))
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # a platform-specific dependency this machine does not use
        for r in map(Requirement, dist.requires or []):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in {"", *wanted}):
                todo.append((r.name, frozenset(r.extras)))
    return seen


# -- import cost --------------------------------------------------------------------------------
def test_import_leaves_optional_parts_unimported() -> None:
    code = (
        "import sys, tapegrad\n"
        "heavy = ['torch', 'matplotlib', 'mpi4py', 'cupy', 'graphviz', 'tqdm', 'sklearn', 'scipy',\n"
        "         'numba', 'concurrent.futures']\n"
        "print(tapegrad.__file__)\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert Path(out[0]).resolve().is_relative_to(ROOT / "tapegrad")
    assert out[1] == "", f"import tapegrad imported {out[1]}: import them where they are used"


# -- version and metadata in one place ----------------------------------------------------------
def test_version_has_one_source() -> None:
    import tapegrad as tg

    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert "version" not in PYPROJECT["project"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "tapegrad._version.__version__"
    assert tg.__version__ == _version_in_source()
    assert "__version__ = " not in (ROOT / "tapegrad" / "__init__.py").read_text()


def test_project_files_exist() -> None:
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert f"## [{_version_in_source()}]" in (ROOT / "CHANGELOG.md").read_text()
    assert (ROOT / "tapegrad" / "py.typed").exists()


# -- the demo installs what it uses ---------------------------------------------------------------
def _make_rules() -> tuple[dict[str, str], dict[str, tuple[str, list[str]]]]:
    """The Makefile's variables and rules (target -> (prerequisites, recipe lines))."""
    text = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+)\s*:?=\s*(.*)$", text, re.M))
    rules: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("\t") and current:
            rules[current][1].append(line.strip())
        elif (m := re.match(r"^([^\s:=#][^:=]*):(?!=)\s*(.*)$", line)) and not line.startswith("."):
            current = m.group(1).strip()
            rules[current] = (m.group(2), [])
        elif not line.strip().startswith("#"):
            current = None
    return variables, rules


def test_make_demo_installs_no_test_or_lint_stack() -> None:
    variables, rules = _make_rules()

    def expand(s: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: expand(variables.get(m.group(1), "")), s)

    # every pip install that `make demo` can run: its recipe and its prerequisites' recipes
    rules = {expand(target): rule for target, rule in rules.items()}
    targets, installs, visited = ["demo"], [], set()
    while targets:
        target = targets.pop()
        visited.add(target)
        prereqs, recipe = rules[target]
        installs += [expand(line) for line in recipe if "install" in line]
        targets += [p for p in expand(prereqs).replace("|", " ").split() if p in rules and p not in visited]
    assert "$(STAMP)" not in rules["demo"][0], "make demo must not install the test stack"
    pip_lines = [line for line in installs if "pip install" in line and "--upgrade pip" not in line]
    assert pip_lines, "make demo must install tapegrad"
    for line in pip_lines:
        specs = re.findall(r"\.\[([\w,\-]*)\]", line)
        assert specs, f"make demo installs something other than tapegrad's extras: {line}"
        extras = {e for spec in specs for e in spec.split(",") if e}
        assert extras == {"examples"}, line
        reached = _closure(extras)
        assert not (reached & TEST_STACK), f"make demo would install {sorted(reached & TEST_STACK)}"
        assert {"numpy", "safetensors", "tqdm", "matplotlib", "scikit-learn"} <= reached


# -- the wheel, installed outside the source tree ---------------------------------------------
README_EXAMPLE = re.compile(r"## The tape in 30 seconds.*?```python\n(.*?)```", re.S)

CHECKPOINT_ROUND_TRIP = """
import sys
from pathlib import Path
import importlib.metadata as md
import importlib.util
import numpy as np
import tapegrad as tg
from tapegrad import nn

root = Path(sys.argv[1]).resolve()
here = Path(tg.__file__).resolve()
assert not here.is_relative_to(root), here
assert here.is_relative_to(Path(sys.prefix).resolve()), (here, sys.prefix)
assert tg.__version__ == md.version("tapegrad") == sys.argv[2], (tg.__version__, md.version("tapegrad"))
assert (here.parent / "py.typed").exists()
for name in ("torch", "pytest", "hypothesis", "ruff", "mypy"):
    assert importlib.util.find_spec(name) is None, f"{name} is importable in the wheel's venv"

tg.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = tg.optim.Adam(model.parameters(), lr=1e-2)
x, y = tg.randn(16, 4), tg.randn(16, 2)
with tg.Tape() as tape:
    loss = ((model(x) - y) ** 2).mean()
opt.step(tape.gradient(loss, model))
tg.save_checkpoint("ckpt.safetensors", model=model, optimizer=opt, step=1)
twin = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
twin_opt = tg.optim.Adam(twin.parameters(), lr=1e-2)
state = tg.load_checkpoint("ckpt.safetensors", model=twin, optimizer=twin_opt)
assert state["step"] == 1, state
np.testing.assert_array_equal(twin(x).numpy(), model(x).numpy())
print("round trip ok", here)
"""


def _link_distributions(names: set[str], into: Path) -> None:
    """Links each distribution's top-level files (packages, modules, .dist-info) into one folder."""
    into.mkdir()
    for name in sorted(names):
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        assert dist.files is not None, f"{name} has no RECORD: cannot tell its files"
        for top in {f.parts[0] for f in dist.files if f.parts and f.parts[0] != ".."}:
            src = Path(dist.locate_file(top))
            if src.exists() and not (into / top).exists() and top != "__pycache__":
                (into / top).symlink_to(src)


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


@pytest.mark.slow  # about a minute: a build, a venv and the flagship at --small (runs in make test)
def test_wheel_installs_and_runs_outside_the_source_tree(tmp_path: Path) -> None:
    version = _version_in_source()
    src, dist_dir, run_dir = tmp_path / "src", tmp_path / "dist", tmp_path / "run"
    ignore = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__",
                                    "runs", ".*_cache", ".hypothesis", "*.safetensors")
    shutil.copytree(ROOT, src, ignore=ignore)

    # sdist and wheel (no isolation: the build backend is already installed; nothing downloaded)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist_dir), str(src)], src)
    wheel = dist_dir / f"tapegrad-{version}-py3-none-any.whl"
    sdist = dist_dir / f"tapegrad-{version}.tar.gz"
    assert wheel.exists() and sdist.exists(), sorted(os.listdir(dist_dir))
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], tmp_path)

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = Parser().parsestr(z.read(f"tapegrad-{version}.dist-info/METADATA").decode())
    assert f"tapegrad-{version}.dist-info/licenses/LICENSE" in names
    assert "tapegrad/py.typed" in names
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)
    assert meta["Name"] == "tapegrad" and meta["Version"] == version
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == PYPROJECT["project"]["requires-python"]
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Source", "Changelog"}

    # a fresh venv that sees tapegrad's and its examples' dependencies and nothing else
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    vpy = venv / "bin" / "python"
    purelib = Path(_run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        tmp_path).strip())
    deps = tmp_path / "deps"
    _link_distributions(_closure({"examples"}) - {"tapegrad"}, deps)
    (purelib / "_tapegrad_deps.pth").write_text(f"{deps}\n")
    _run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "--no-index",
          "--no-compile", "-q", str(wheel)], tmp_path)
    assert (purelib / "tapegrad" / "__init__.py").exists()

    run_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["MPLBACKEND"] = "Agg"
    (run_dir / "check.py").write_text(CHECKPOINT_ROUND_TRIP)
    assert "round trip ok" in _run([str(vpy), "check.py", str(ROOT), version], run_dir, env)

    readme = README_EXAMPLE.search((ROOT / "README.md").read_text())
    assert readme, "README.md has no 30-second example"
    (run_dir / "readme.py").write_text(readme.group(1))
    assert "released" in _run([str(vpy), "readme.py"], run_dir, env)

    shutil.copy(ROOT / "examples" / "multimodal.py", run_dir)
    out = _run([str(vpy), "multimodal.py", "--small", "--out", str(run_dir / "out")], run_dir, env)
    assert (run_dir / "out" / "metrics.json").exists(), out
    assert str(ROOT) not in _run([str(vpy), "-c", "import sys; print(sys.path)"], run_dir, env)

