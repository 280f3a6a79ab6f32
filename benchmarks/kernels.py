"""Per-kernel table: forward+backward ms of each convolution and pooling shape of workloads (c)
and (e), in tapegrad with the compiled kernels, tapegrad with the numpy reference, and PyTorch.

    python benchmarks/kernels.py            # the best of 7 rounds, each round all three back to back (the best: this shared machine stalls)

The numpy reference is selected in-process by switching the kernels off (as
``TAPEGRAD_KERNELS=numpy`` would for a whole process).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels

# (name, input shape, out channels or None for 2x2 max pooling, padding)
SHAPES = [
    ("(c) conv1 1->8 3x3", (64, 1, 28, 28), 8, 0),
    ("(c) conv2 8->16 3x3", (64, 8, 13, 13), 16, 0),
    ("(c) pool1 2x2", (64, 8, 26, 26), None, 0),
    ("(c) pool2 2x2", (64, 16, 11, 11), None, 0),
    ("(e) conv1 1->16 3x3 pad 1", (128, 1, 8, 8), 16, 1),
    ("(e) conv2 16->32 3x3 pad 1", (128, 16, 4, 4), 32, 1),
    ("(e) pool1 2x2", (128, 16, 8, 8), None, 0),
    ("(e) pool2 2x2", (128, 32, 4, 4), None, 0),
]


def _time(fn: Callable[[], Any], min_time: float = 0.1) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n * 1e3


def _steps(shape: tuple[int, ...], out: int | None, pad: int) -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((out or 1, shape[1], 3, 3)) * 0.1).astype(np.float32)
    xt, wt = tg.tensor(x), tg.Parameter(w)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()

    def tg_step() -> None:
        with tg.Tape() as tape:
            tape.watch(xt)
            y = F.conv2d(xt, wt, padding=pad) if out else F.max_pool2d(xt, 2)
            loss = y.sum()
        tape.gradient(loss, [xt, wt] if out else [xt])

    def torch_step() -> None:
        tx.grad = tw.grad = None
        y = (
            torch.nn.functional.conv2d(tx, tw, padding=pad)
            if out
            else torch.nn.functional.max_pool2d(tx, 2)
        )
        y.sum().backward()

    return tg_step, torch_step


def main() -> None:
    torch.set_num_threads(2)
    print(f"tapegrad kernels: {_kernels.selection()}")
    print("| shape | tapegrad (compiled) ms | tapegrad (numpy) ms | PyTorch ms | compiled vs PyTorch |")
    print("|---|---|---|---|---|")
    for name, shape, out, pad in SHAPES:
        tg_step, torch_step = _steps(shape, out, pad)
        rows: dict[str, list[float]] = {"nb": [], "np": [], "torch": []}
        usable = _kernels.usable
        for _ in range(7):
            rows["nb"].append(_time(tg_step))
            _kernels.usable = lambda *a: False  # type: ignore[assignment]
            try:
                rows["np"].append(_time(tg_step))
            finally:
                _kernels.usable = usable  # type: ignore[assignment]
            rows["torch"].append(_time(torch_step))
        nb, npy, th = (min(rows[k]) for k in ("nb", "np", "torch"))
        print(f"| {name} | {nb:.3f} | {npy:.3f} | {th:.3f} | {th / nb:.2f}x |")


if __name__ == "__main__":
    main()
