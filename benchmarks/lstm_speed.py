"""Forward + backward time of recurrent models, tapegrad against PyTorch, side by side.

    python benchmarks/lstm_speed.py [--repeats 15] [--model lm|mnist_rnn]

``lm`` is word_language_model's default shape: a 2-layer LSTM, seq 35, batch 20, input and
hidden 200, forward and backward of ``(out * out).sum()``. ``mnist_rnn`` is pytorch/examples'
mnist_rnn training step: ``LSTM(28, 64, batch_first=True)`` over the 28 rows of a batch of 64
images, ``Linear(64, 10)`` on the last step, cross-entropy, Adam. Both float32 on the CPU with
the same weights and inputs, one BLAS thread each (set before numpy and torch load, so that
neither competes with the other's threads); the two libraries alternate step by step and the
medians and their ratio are printed.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# OpenMP workers that wait actively after a parallel region (numba's, under tapegrad's
# kernels) take the cores from the other library's next steps: measured, PyTorch's mnist_rnn
# step went from 6 to 26 ms of CPU time after tapegrad's steps; passive waiting keeps it at 8.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tapegrad as tg  # noqa: E402

SEQ, BATCH, SIZE, HIDDEN, LAYERS = 35, 20, 200, 200, 2


def _copy(ours: tg.nn.Module, theirs: torch.nn.Module) -> None:
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})


def lm_steps() -> tuple[Callable[[], None], Callable[[], None], str]:
    """word_language_model's LSTM: forward and backward of ``(out * out).sum()``."""
    ours = tg.nn.LSTM(SIZE, HIDDEN, LAYERS)
    theirs = torch.nn.LSTM(SIZE, HIDDEN, LAYERS)
    _copy(ours, theirs)
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

    what = f"LSTM fwd+bwd (seq {SEQ}, batch {BATCH}, {LAYERS} layers, hidden {HIDDEN})"
    return step_tg, step_torch, what


class _MnistRnn(tg.nn.Module):
    """pytorch/examples mnist_rnn's model: an LSTM over image rows, a Linear on the last step."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.rnn = tg.nn.LSTM(28, hidden, batch_first=True)
        self.fc = tg.nn.Linear(hidden, 10)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        out, _ = self.rnn(x)  # (B, 28, H)
        return self.fc(out[:, -1])


class _TorchMnistRnn(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(28, hidden, batch_first=True)
        self.fc = torch.nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


def mnist_rnn_steps(hidden: int = 64) -> tuple[Callable[[], None], Callable[[], None], str]:
    """One training step of mnist_rnn: forward, cross-entropy, backward, Adam."""
    ours, theirs = _MnistRnn(hidden), _TorchMnistRnn(hidden)
    _copy(ours, theirs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    gx, gy, tx, ty = tg.tensor(x), tg.tensor(y), torch.tensor(x), torch.tensor(y)
    opt = tg.optim.Adam(ours.parameters(), lr=1e-3)
    topt = torch.optim.Adam(theirs.parameters(), lr=1e-3)

    def step_tg() -> None:
        with tg.Tape() as tape:
            loss = tg.nn.functional.cross_entropy(ours(gx), gy)
        opt.step(tape.gradient(loss, ours))

    def step_torch() -> None:
        topt.zero_grad()
        torch.nn.functional.cross_entropy(theirs(tx), ty).backward()
        topt.step()

    return step_tg, step_torch, f"mnist_rnn step (LSTM(28, {hidden}) + Linear, batch 64, Adam)"


def main(repeats: int = 15, model: str = "lm", hidden: int = 64, block: int = 5) -> dict[str, float]:
    step_tg, step_torch, what = lm_steps() if model == "lm" else mnist_rnn_steps(hidden)
    torch.set_num_threads(1)
    # wall time, and the process's CPU time: on a shared machine a step preempted by others
    # loses wall time but not CPU time. The libraries alternate in blocks of `block` steps and
    # each block's first step is not counted: right after the other library's step, threads it
    # left spinning (OpenMP's workers wait actively for a while) compete for the cores.
    times: dict[str, list[float]] = {"tapegrad": [], "torch": [], "tapegrad cpu": [],
                                     "torch cpu": []}  # fmt: skip
    for i in range(repeats // block + 1):  # the first round is warm-up
        for name, fn in (("tapegrad", step_tg), ("torch", step_torch)):
            for k in range(block + 1):
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                if i and k:
                    times[name].append(time.perf_counter() - t0)
                    times[name + " cpu"].append(time.process_time() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for clock in ("", " cpu"):
        ours, theirs = med["tapegrad" + clock], med["torch" + clock]
        print(
            f"{what}{clock or ' wall'}: tapegrad {ours * 1e3:.2f} ms, torch {theirs * 1e3:.2f} "
            f"ms, speed {theirs / ours:.2f}x PyTorch's (median of {len(times['torch'])})"
        )
    return med


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--model", choices=("lm", "mnist_rnn"), default="lm")
    p.add_argument("--hidden", type=int, default=64, help="mnist_rnn's hidden size")
    p.add_argument("--block", type=int, default=5, help="steps per library in a row")
    a = p.parse_args()
    main(a.repeats, a.model, a.hidden, a.block)
