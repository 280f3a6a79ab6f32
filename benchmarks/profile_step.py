"""Where a tapegrad training step spends its time, per primitive.

Every primitive's forward and array VJPs are wrapped with a timer, one workload's step (the one
``suite.py`` times) runs a few times, and the time per step is printed per primitive, largest
first, with the part of the step spent outside primitives (Python, the tape, the optimizer).

    python benchmarks/profile_step.py d          # workload (d), 10 steps
    python benchmarks/profile_step.py c --steps 30 --torch

``--torch`` also prints ``torch.profiler``'s table for the PyTorch twin of the step.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as W  # noqa: E402

from tapegrad._autodiff import PRIMITIVES  # noqa: E402


def _timed(name: str, f: Any, acc: dict[str, float]) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            acc[name] += time.perf_counter() - t0

    return run


def instrument(acc: dict[str, float]) -> None:
    """Wrap every registered primitive's forward and VJPs with a timer into ``acc``."""
    for p in PRIMITIVES.values():
        p.fwd = _timed(f"{p.name} forward", p.fwd, acc)
        if p.joint is not None:
            p.joint = _timed(f"{p.name} backward", p.joint, acc)
        p.vjps = tuple(
            None if f is None else _timed(f"{p.name} backward[{i}]", f, acc)
            for i, f in enumerate(p.vjps)
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=W.STEP_WORKLOADS)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--torch", action="store_true", help="also profile the PyTorch step")
    args = ap.parse_args()

    acc: dict[str, float] = collections.defaultdict(float)
    instrument(acc)
    bench = W.build("tapegrad", args.workload)
    for _ in range(3):
        bench.step()
    acc.clear()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        bench.step()
    step = (time.perf_counter() - t0) / args.steps
    inside = sum(acc.values()) / args.steps
    print(f"tapegrad ({args.workload}): {1e3 * step:.2f} ms per step, {1e3 * inside:.2f} ms in "
          f"primitives, {1e3 * (step - inside):.2f} ms outside (Python, tape, optimizer)")
    # every primitive the step ran, however short (a time threshold would make the list vary)
    for name, t in sorted(acc.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {name:34s} {1e3 * t / args.steps:8.3f} ms")

    if args.torch:
        from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

        tb = W.build("torch", args.workload)
        for _ in range(3):
            tb.step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                tb.step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
