"""Gradient checkpointing on a 12-block transformer stack: peak memory and step time, with and
without ``tg.checkpoint`` on every block.

    python benchmarks/checkpointing.py [--append BENCHMARKS.md]

The stack is 12 ``TransformerEncoderLayer``s (d_model 64, 4 heads, feed-forward 256, no dropout)
on a batch of 8 sequences of 64 tokens; one training step is the forward, ``tape.gradient`` and
an SGD update. Peak memory is the highest traced allocation (``tracemalloc``: numpy's arrays)
during the step, after a warm-up step; times alternate between the two variants over several
rounds, and the ratio is the median of the within-round ratios. The gradients of the two
variants are compared too (they must be equal).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

import tapegrad as tg
from tapegrad import nn

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


def measure(rounds: int = 7) -> dict[str, float]:
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
    for _ in range(rounds):
        for ckpt in (False, True):
            t0 = time.perf_counter()
            _step(*runs[ckpt], x, ckpt)
            times[ckpt].append(time.perf_counter() - t0)
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
        "rounds": rounds,
    }


def section(m: dict[str, float]) -> str:
    mem_ok = "✓" if m["memory_ratio"] <= 0.5 else "✗"
    time_ok = "✓" if m["time_ratio"] <= 1.4 else "✗"
    return f"""
## Gradient checkpointing (`benchmarks/checkpointing.py`)

{BLOCKS} `TransformerEncoderLayer` blocks (d_model {D}, {HEADS} heads, feed-forward {FF}), batch
{BATCH} x {SEQ} tokens, one SGD step; `tg.checkpoint` on every block against the plain step.
Peak memory is the highest traced allocation during a step (`tracemalloc`, after a warm-up
step); step times are medians over {m['rounds']} alternating rounds, the ratio the median of
the within-round ratios. The largest gradient difference between the two is
{m['grad_diff']:.1e}.

| | plain | checkpointed | ratio | target |
|---|---|---|---|---|
| peak memory during the step | {m['peak_plain_mb']:.2f} MB | {m['peak_ckpt_mb']:.2f} MB | {m['memory_ratio']:.2f}x | ≤ 0.50 {mem_ok} |
| step time | {m['ms_plain']:.1f} ms | {m['ms_ckpt']:.1f} ms | {m['time_ratio']:.2f}x | ≤ 1.40 {time_ok} |
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--append", help="markdown file to append the section to")
    args = ap.parse_args()
    text = section(measure(args.rounds))
    print(text)
    if args.append:
        with open(args.append, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
