"""Forward + backward time of a 2-layer LSTM, tapegrad against PyTorch, side by side.

    python benchmarks/lstm_speed.py [--repeats 15]

The shape is word_language_model's default: seq 35, batch 20, input 200, hidden 200, float32,
both on the CPU with the same weights, one BLAS thread each (set before numpy and torch load, so
that neither competes with the other's threads); prints each library's median and the ratio.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tapegrad as tg  # noqa: E402

SEQ, BATCH, SIZE, HIDDEN, LAYERS = 35, 20, 200, 200, 2


def main(repeats: int = 15) -> dict[str, float]:
    ours = tg.nn.LSTM(SIZE, HIDDEN, LAYERS)
    theirs = torch.nn.LSTM(SIZE, HIDDEN, LAYERS)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((SEQ, BATCH, SIZE)).astype(np.float32)
    gx, tx = tg.tensor(x), torch.tensor(x, requires_grad=True)

    def step_tg() -> None:
        with tg.Tape() as tape:
            tape.watch(gx)
            out, _ = ours(gx)
            loss = (out * out).sum()
        tape.gradient(loss)

    def step_torch() -> None:
        theirs.zero_grad()
        out, _ = theirs(tx)
        (out * out).sum().backward()

    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"tapegrad": [], "torch": []}
    for i in range(repeats + 2):  # interleaved, the first two are warm-up
        for name, fn in (("tapegrad", step_tg), ("torch", step_torch)):
            t0 = time.perf_counter()
            fn()
            if i >= 2:
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"LSTM fwd+bwd (seq {SEQ}, batch {BATCH}, {LAYERS} layers, hidden {HIDDEN}): "
        f"tapegrad {med['tapegrad'] * 1e3:.1f} ms, torch {med['torch'] * 1e3:.1f} ms, "
        f"ratio {med['tapegrad'] / med['torch']:.2f}x (median of {repeats})"
    )
    return med


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=15)
    main(p.parse_args().repeats)
