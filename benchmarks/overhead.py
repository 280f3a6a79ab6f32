"""Per-op overhead: one small op (4 elements), untraced and recorded on a tape, against numpy and
PyTorch (with and without autograd), measured side by side in one run.

    python benchmarks/overhead.py

Prints microseconds per op (median of several rounds, rounds alternating between libraries) and
the ratios the project tracks: recorded / PyTorch-autograd and untraced / numpy.
"""

from __future__ import annotations

import statistics
import timeit

import numpy as np

import tapegrad as tg

ROUNDS = 7
NUMBER = 20000


def _per_op(fn) -> float:
    return min(timeit.repeat(fn, number=NUMBER, repeat=1)) / NUMBER * 1e6


def main() -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    a = np.ones(4, np.float32)
    b = np.ones(4, np.float32)
    x, y = tg.tensor(a), tg.tensor(b)
    w = tg.Parameter(tg.ones(4))
    ta, tb = torch.ones(4), torch.ones(4)
    tw = torch.ones(4, requires_grad=True)

    tape = tg.Tape()

    def recorded() -> None:
        with tape:
            for _ in range(100):
                w * y
        tape._nodes.clear()

    def torch_grad() -> None:
        for _ in range(100):
            tw * tb

    cases = {
        "numpy": lambda: a * b,
        "torch (no autograd)": lambda: ta * tb,
        "tapegrad untraced": lambda: x * y,
    }
    samples: dict[str, list[float]] = {k: [] for k in [*cases, "torch autograd", "tapegrad recorded"]}
    for _ in range(ROUNDS):
        for name, fn in cases.items():
            samples[name].append(_per_op(fn))
        samples["torch autograd"].append(
            min(timeit.repeat(torch_grad, number=NUMBER // 100, repeat=1)) / NUMBER * 1e6
        )
        samples["tapegrad recorded"].append(
            min(timeit.repeat(recorded, number=NUMBER // 100, repeat=1)) / NUMBER * 1e6
        )
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{'op (4-element mul)':28s} {'us/op':>8s}")
    for k, v in med.items():
        print(f"{k:28s} {v:8.2f}")
    r1 = med["tapegrad recorded"] / med["torch autograd"]
    r2 = med["tapegrad untraced"] / med["numpy"]
    print(f"\nrecorded / torch autograd : {r1:.2f}x (target <= 1.0)")
    print(f"untraced / numpy          : {r2:.2f}x (target <= 2.0)")
    return {"recorded_over_torch": r1, "untraced_over_numpy": r2, **med}


if __name__ == "__main__":
    main()
