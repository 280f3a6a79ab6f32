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


def main(repeats: int = 15, model: str = "lm", hidden: int = 64) -> dict[str, float]:
    step_tg, step_torch, what = lm_steps() if model == "lm" else mnist_rnn_steps(hidden)
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
        f"{what}: tapegrad {med['tapegrad'] * 1e3:.2f} ms, torch {med['torch'] * 1e3:.2f} ms, "
        f"speed {med['torch'] / med['tapegrad']:.2f}x PyTorch's (median of {repeats})"
    )
    return med


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--model", choices=("lm", "mnist_rnn"), default="lm")
    p.add_argument("--hidden", type=int, default=64, help="mnist_rnn's hidden size")
    a = p.parse_args()
    main(a.repeats, a.model, a.hidden)
