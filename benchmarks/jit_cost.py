"""JIT cost: the first training step of the flagship (examples/multimodal.py) in a fresh process,
with an empty kernel cache (cold: the default background mode, where steps run the numpy
references while the kernels compile in a helper process), then with ``TAPEGRAD_COMPILE=wait``
in the same cache (fill: what the first process left uncompiled compiles in the caller, and the
tunable ops time their candidates), then again (warm: kernels and choices load from disk).

    python benchmarks/jit_cost.py          # prints a markdown table

Each process imports tapegrad, builds the example's CLIP model, AdamW and one-cycle schedule at
its default Config, and runs the example's step (one tape over both encoders, the gradient, a
clipped AdamW step) on its first batch: the first step's time, and the median of the next
``STEADY`` steps. ``TAPEGRAD_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` point the processes at one new temporary directory, so
no cache of the checkout or of the user is read or written.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEADY = 5


def child() -> dict[str, float]:
    """In this fresh process: import, build, and time the flagship's first steps (seconds)."""
    t0 = time.perf_counter()
    import numpy as np

    import tapegrad as tg

    t_import = time.perf_counter() - t0
    sys.path.insert(0, str(HERE))
    import workloads as W

    mm = W._clip_module()
    cfg = mm.Config()
    tg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    images, labels = tg.data.load_digits(return_arrays=True)
    vocab = mm.Vocab([mm.caption(c, t, rng) for t in mm.TRAIN_TEMPLATES for c in range(10)
                      for _ in range(len(mm.ADJ))] + list(mm.ADJ))
    model = mm.CLIP(cfg, len(vocab))
    opt = tg.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = tg.optim.OneCycleLR(opt, max_lr=cfg.lr, total_steps=100)
    idx = rng.permutation(len(labels))[: cfg.batch_size]
    caps = [mm.caption(c, mm.TRAIN_TEMPLATES[0], rng) for c in labels[idx]]
    ids = np.stack([vocab.encode(s, cfg.max_len) for s in caps])
    x, t = tg.tensor(images[idx]), tg.tensor(ids)

    def step() -> float:
        with tg.Tape() as tape:  # as examples/multimodal.py's loop
            loss = mm.clip_loss(model(x, t), labels[idx])
        opt.step(tape.gradient(loss, model).clip_by_global_norm(5.0))
        sched.step()
        return loss.item()

    t1 = time.perf_counter()
    step()
    first = time.perf_counter() - t1
    rest = []
    for _ in range(STEADY):
        t1 = time.perf_counter()
        step()
        rest.append(time.perf_counter() - t1)
    return {"import_s": t_import, "first_step_s": first, "steady_step_s": statistics.median(rest)}


def run_child(cache: str, mode: str = "background", timeout: float = 900) -> dict[str, Any]:
    """``child()`` in a fresh interpreter with its kernel cache in ``cache``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "TAPEGRAD_CACHE_DIR": cache,
           "TAPEGRAD_COMPILE": mode,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TAPEGRAD_KERNELS", None)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"], env=env,
                       capture_output=True, text=True, check=False, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1]}
    return {**json.loads(lines[-1]), "process_s": wall}


def measure() -> dict[str, Any]:
    """Cold, then warm, in one new cache directory (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="tapegrad-jit-") as cache:
        cold = run_child(cache)
        fill = run_child(cache, "wait")
        warm = run_child(cache)
    return {"cold": cold, "fill": fill, "warm": warm}


def lines(res: dict[str, Any]) -> list[str]:
    """Markdown: what was measured, and the table."""
    out = ["The first training step of `examples/multimodal.py` (its CLIP at the default Config, "
           "AdamW, one tape over both encoders) in a fresh process, `NUMBA_CACHE_DIR` pointed at "
           "a new empty directory (cold: the default background mode; steps run the numpy "
           "references while kernels compile in a helper process), then with "
           "`TAPEGRAD_COMPILE=wait` in that cache (fill: what is still missing compiles in the "
           "caller, and the convolutions' strategies are timed once for this machine), then "
           "again (warm: kernels and choices load from disk). "
           f"Steady step: the median of the next {STEADY} steps. Measured by "
           "`benchmarks/jit_cost.py`.", "",
           "| numba cache | import tapegrad s | first step s | steady step ms | "
           "first step over steady | whole process s |", "|---|---|---|---|---|---|"]
    for label in ("cold", "fill", "warm"):
        r = res.get(label) or {}
        if "error" in r or not r:
            out.append(f"| {label} | error: {r.get('error', 'not run')} | | | | |")
            continue
        out.append(f"| {label} | {r['import_s']:.2f} | {r['first_step_s']:.2f} | "
                   f"{1e3 * r['steady_step_s']:.1f} | "
                   f"{r['first_step_s'] / r['steady_step_s']:.0f}x | {r['process_s']:.1f} |")
    return out


if __name__ == "__main__":
    if "--child" in sys.argv:
        print(json.dumps(child()))
    else:
        print("\n".join(lines(measure())))
