"""Mutation testing of tapegrad with cosmic-ray, on a fixed random sample of mutants per package.

    python tools/mutants.py                      # every package, 150 mutants each, seed 0
    python tools/mutants.py --packages ops --sample 40
    python tools/mutants.py --rerun build/mutants/before  # only the survivors of an earlier run

Each package is mutated in its own copy of the tree (build/mutants/<package>/src), so the
working tree is never touched. cosmic-ray enumerates every mutant of the package; a
``random.Random(seed)`` sample of ``--sample`` of them (sorted by file, operator and
occurrence first, so the sample depends only on the code and the seed) is run, and the rest
are marked skipped. Each mutant runs the package's fast test selection (``SELECTION``) with
``-x``: a failing test kills it. The summary (killed/total, and every survivor with its diff)
is written to build/mutants/<package>.json and printed.

``--rerun DIR`` runs only the mutants that survived in DIR's summaries (matched by file,
operator, occurrence and position): the mutants killed there stay killed as long as no test
was removed, so "after" costs only the survivors.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the ops modules that hold nn.functional's primitives: mutated with nn's tests
NN_OPS = ["_attention", "_conv", "_dropout", "_linear", "_loss", "_norm", "_pool", "_resize",
          "_rnn", "_take"]  # fmt: skip

PACKAGES: dict[str, list[str]] = {
    "engine": ["tapegrad/_autodiff"],
    "ops": sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tapegrad/ops").glob("*.py")
                  if p.stem not in NN_OPS),
    "nn": sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tapegrad/nn").glob("_f_*.py"))
    + ["tapegrad/nn/functional.py"] + [f"tapegrad/ops/{m}.py" for m in NN_OPS],
    "optim": ["tapegrad/optim"],
}

# the fast tests that exercise each package (the slow memory/100k-op tests are left out);
# files that do not exist (yet) are dropped
SELECTION: dict[str, list[str]] = {
    "engine": [
        "tests/test_tape.py",
        "tests/test_tape_errors.py",
        "tests/test_functional.py",
        "tests/test_mutation_gaps.py",
    ],
    "ops": ["tests/test_ops.py", "tests/test_ops_hypothesis.py", "tests/test_mutation_gaps.py"],
    "nn": [
        "tests/test_functional_nn.py",
        "tests/test_losses.py",
        "tests/test_ties_and_scales.py",
        "tests/test_mutation_gaps.py",
    ],
    "optim": [
        "tests/test_optim.py",
        "tests/test_optim_adaptive.py",
        "tests/test_conformance_optim.py",
        "tests/test_lbfgs.py",
        "tests/test_schedulers.py",
        "tests/test_mutation_gaps.py",
    ],
}
DESELECT = "not 100k_op_chain and not memory_stays_flat"


def _copy_tree(dest: Path, rev: str | None) -> None:
    """The tracked and untracked (not ignored) files of the working tree, as they are now, or
    the tree of commit ``rev`` (to measure the tests of an earlier commit)."""
    if dest.exists():
        shutil.rmtree(dest)
    if rev is not None:
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _test_command(package: str, src: Path) -> str:
    tests = [t for t in SELECTION[package] if (src / t).exists()]
    return (
        f"nice -n 19 {sys.executable} -m pytest -x -q -p no:randomly -p no:cacheprovider "
        f'-o addopts="" -k "{DESELECT}" ' + " ".join(tests)
    )


def _key(spec) -> str:
    return f"{spec.module_path}|{spec.operator_name}|{spec.occurrence}|{tuple(spec.start_pos)}"


def _sample(db, n: int, seed: int, only: set[str] | None) -> list[str]:
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    items = sorted(db.work_items, key=lambda w: _key(w.mutations[0]))
    if only is not None:
        keep = [w for w in items if _key(w.mutations[0]) in only]
    else:
        keep = random.Random(seed).sample(items, min(n, len(items)))
    chosen = {w.job_id for w in keep}
    skipped = [w.job_id for w in items if w.job_id not in chosen]
    db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    return sorted(chosen)


def _summary(db, package: str, population: int, seed: int, sample: int) -> dict:
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    rows = []
    for item, result in db.completed_work_items:
        if result.worker_outcome == WorkerOutcome.SKIPPED:
            continue
        spec = item.mutations[0]
        rows.append(
            {
                "key": _key(spec),
                "file": str(spec.module_path),
                "line": spec.start_pos[0],
                "operator": spec.operator_name,
                "outcome": (result.test_outcome or result.worker_outcome).value,
                "diff": result.diff,
            }
        )
    killed = sum(r["outcome"] == TestOutcome.KILLED for r in rows)
    return {
        "package": package,
        "population": population,
        "sample": sample,
        "seed": seed,
        "run": len(rows),
        "killed": killed,
        "survived": [r for r in rows if r["outcome"] == TestOutcome.SURVIVED],
        "incompetent": sum(r["outcome"] == TestOutcome.INCOMPETENT for r in rows),
        "rows": rows,
    }


def run_package(package: str, args: argparse.Namespace) -> dict:
    from cosmic_ray.work_db import use_db

    work = ROOT / args.out / package
    src = work / "src"
    _copy_tree(src, args.rev)
    command = _test_command(package, src)
    baseline = subprocess.run(
        command, check=False, shell=True, cwd=src, capture_output=True, text=True
    )
    if baseline.returncode != 0:
        raise SystemExit(f"{package}: the tests fail without a mutant:\n{baseline.stdout[-3000:]}")
    paths = ", ".join(json.dumps(p) for p in PACKAGES[package])
    (work / "config.toml").write_text(
        "[cosmic-ray]\n"
        f"module-path = [{paths}]\n"
        f"timeout = {args.timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n"
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    session = work / "session.sqlite"
    session.unlink(missing_ok=True)
    cr = [str(Path(sys.executable).parent / "cosmic-ray")]
    subprocess.run([*cr, "init", str(work / "config.toml"), str(session)], cwd=src, check=True)
    only = None
    if args.rerun:
        before = json.loads((ROOT / args.rerun / f"{package}.json").read_text())
        only = {r["key"] for r in before["survived"]}
    with use_db(str(session)) as db:
        population = db.num_work_items
        _sample(db, args.sample, args.seed, only)
    subprocess.run(
        ["nice", "-n", "19", *cr, "exec", str(work / "config.toml"), str(session)],
        cwd=src,
        check=True,
    )
    with use_db(str(session)) as db:
        summary = _summary(db, package, population, args.seed, args.sample)
    if args.rerun:  # the mutants killed in the earlier run count as killed
        summary["rerun_of"] = str(args.rerun)
        summary["killed"] += before["killed"]
        summary["run"] = before["run"]
    (ROOT / args.out / f"{package}.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", default=",".join(PACKAGES))
    parser.add_argument("--sample", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", default="build/mutants")
    parser.add_argument("--rerun", default=None, help="a directory of earlier summaries")
    parser.add_argument("--rev", default=None, help="mutate a copy of this commit, not the tree")
    args = parser.parse_args(argv)
    for package in args.packages.split(","):
        s = run_package(package, args)
        print(
            f"{package}: {s['killed']}/{s['run']} killed "
            f"(sample {s['run']} of {s['population']}, seed {s['seed']}), "
            f"{len(s['survived'])} survived"
        )
        for r in s["survived"]:
            print(f"  survived {r['file']}:{r['line']} {r['operator']}")


if __name__ == "__main__":
    main()
