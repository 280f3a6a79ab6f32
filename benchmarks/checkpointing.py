"""Gradient checkpointing on a 12-block transformer stack: peak memory and step time, with and
without ``tg.checkpoint`` on every block.

    python benchmarks/checkpointing.py [--append BENCHMARKS.md]

The stack is 12 ``TransformerEncoderLayer``s (d_model 64, 4 heads, feed-forward 256, no dropout)
on a batch of 8 sequences of 64 tokens; one training step is the forward, ``tape.gradient`` and
an SGD update. Peak memory is the highest traced allocation (``tracemalloc``: numpy's arrays)
during the step, after a warm-up step; times alternate between the two variants over several
rounds, and the ratio is the median of the within-round ratios. A round during which other
processes took more than 15% of the CPU (suite.py's load guard, from /proc/stat) is set aside
and run again once the machine is quiet (up to ``--max-wait`` seconds in all): numpy's two BLAS
threads slow down several times over when another process holds a core. The gradients of the
two variants are compared too (they must be equal).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

import tapegrad as tg
from tapegrad import nn

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import suite  # noqa: E402 - its load guard

D, HEADS, FF, BLOCKS, BATCH, SEQ = 64, 4, 256, 12, 8, 64


def _stack() -> nn.ModuleList:
    tg.manual_seed(0)
    return nn.ModuleList(
        [nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=FF, dropout=0.0, batch_first=True)
         for _ in range(BLOCKS)]
    )  # fmt: skip


def _step(blocks: nn.ModuleList, opt: tg.optim.Optimizer, x: tg.Tensor, ckpt: bool) -> tg.Gradients:
    with tg.Tape() as tape:
        h = x
        for b in blocks:
            h = tg.checkpoint(b, h) if ckpt else b(h)
        loss = (h * h).mean()
    grads = tape.gradient(loss, blocks)
    opt.step(grads)
    return grads


def _others(j0: tuple[int, int] | None, c0: object) -> float:
    """Share of the CPU other processes took since (j0, c0) (0 when /proc/stat is missing)."""
    j1, c1 = suite._cpu_jiffies(), suite.os.times()
    if not (j0 and j1 and j1[1] > j0[1]):
        return 0.0
    hz = suite.os.sysconf("SC_CLK_TCK")
    ours = (c1.user + c1.system) - (c0.user + c0.system)  # type: ignore[attr-defined]
    return max(0.0, ((j1[0] - j0[0]) / hz - ours) / ((j1[1] - j0[1]) / hz))


def measure(rounds: int = 21, max_wait: float = 300.0) -> dict[str, float]:
    x = tg.tensor(np.random.default_rng(0).standard_normal((BATCH, SEQ, D)).astype(np.float32))
    runs = {}
    for ckpt in (False, True):
        blocks = _stack()
        runs[ckpt] = (blocks, tg.optim.SGD(blocks.parameters(), lr=0.0))  # lr 0: same weights
    g_plain = _step(*runs[False], x, False)  # warm-up (kernels compiled), and the gradients
    g_ckpt = _step(*runs[True], x, True)
    diff = max(
        float(np.abs(a.numpy() - b.numpy()).max())
        for a, b in zip(g_plain.values(), g_ckpt.values(), strict=True)
    )
    peaks = {}
    for ckpt in (False, True):
        tracemalloc.start()
        try:
            _step(*runs[ckpt], x, ckpt)
            peaks[ckpt] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    times: dict[bool, list[float]] = {False: [], True: []}
    aside: dict[bool, list[float]] = {False: [], True: []}  # busy rounds, if none is quiet
    deadline = time.perf_counter() + max_wait
    busy = 0
    k = 0
    while len(times[False]) < rounds and k < 3 * rounds:
        order = (False, True) if k % 2 == 0 else (True, False)  # the order rotates
        k += 1
        got: dict[bool, float] = {}
        loads = []
        for ckpt in order:
            j0, c0 = suite._cpu_jiffies(), suite.os.times()
            t0 = time.perf_counter()
            _step(*runs[ckpt], x, ckpt)
            got[ckpt] = time.perf_counter() - t0
            loads.append(_others(j0, c0))
        if max(loads) > suite.MAX_LOAD and time.perf_counter() < deadline:
            busy += 1  # set aside: wait for the machine to quieten, then run it again
            for ckpt in order:
                aside[ckpt].append(got[ckpt])
            suite.wait_for_quiet(max(0.0, deadline - time.perf_counter()), log=lambda *_: None)
            continue
        for ckpt in order:
            times[ckpt].append(got[ckpt])
    if not times[False]:  # never quiet: the rounds as they came
        times = aside
    return {
        "peak_plain_mb": peaks[False] / 2**20,
        "peak_ckpt_mb": peaks[True] / 2**20,
        "memory_ratio": peaks[True] / peaks[False],
        "ms_plain": 1e3 * statistics.median(times[False]),
        "ms_ckpt": 1e3 * statistics.median(times[True]),
        "time_ratio": statistics.median(
            c / p for p, c in zip(times[False], times[True], strict=True)
        ),
        "grad_diff": diff,
        "rounds": len(times[False]),
        "busy": busy,
    }


def section(m: dict[str, float]) -> str:
    mem_ok = "✓" if m["memory_ratio"] <= 0.5 else "✗"
    time_ok = "✓" if m["time_ratio"] <= 1.4 else "✗"
    return f"""
## Gradient checkpointing (`benchmarks/checkpointing.py`)

{BLOCKS} `TransformerEncoderLayer` blocks (d_model {D}, {HEADS} heads, feed-forward {FF}), batch
{BATCH} x {SEQ} tokens, one SGD step; `tg.checkpoint` on every block against the plain step.
Peak memory is the highest traced allocation during a step (`tracemalloc`, after a warm-up
step); step times are medians over {m['rounds']} alternating rounds ({m['busy']} set aside because
other processes were busy), the ratio the median of the within-round ratios. The largest gradient difference between the two is
{m['grad_diff']:.1e}.

| | plain | checkpointed | ratio | target |
|---|---|---|---|---|
| peak memory during the step | {m['peak_plain_mb']:.2f} MB | {m['peak_ckpt_mb']:.2f} MB | {m['memory_ratio']:.2f}x | ≤ 0.50 {mem_ok} |
| step time | {m['ms_plain']:.1f} ms | {m['ms_ckpt']:.1f} ms | {m['time_ratio']:.2f}x | ≤ 1.40 {time_ok} |
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--append", help="markdown file to append the section to")
    ap.add_argument("--max-wait", type=float, default=300.0,
                    help="seconds to wait in all for other processes to leave the CPU")
    args = ap.parse_args()
    text = section(measure(args.rounds, args.max_wait))
    print(text)
    if args.append:
        with open(args.append, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
