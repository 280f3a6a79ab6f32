"""Two layer-level benchmarks against PyTorch, side by side in one run:
conv2d forward+backward on (64, 16, 28, 28) with 32 3x3 filters, and one TransformerEncoderLayer
training step (d_model 128, 4 heads, feed-forward 512, sequence 64, batch 16).

    python benchmarks/layers.py

Rounds alternate between the two libraries; medians of 7; same thread count for both.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
from threadpoolctl import threadpool_info

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


def _time(fn, min_time: float = 0.3) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def conv_pair():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16, 28, 28)).astype(np.float32)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    b = np.zeros(32, np.float32)
    xt, wt, bt = tg.tensor(x), tg.Parameter(w), tg.Parameter(b)

    def tg_step():
        with tg.Tape() as tape:
            loss = F.conv2d(xt, wt, bt, padding=1).sum()
        tape.gradient(loss, [wt, bt])

    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)

    def torch_step():
        loss = torch.nn.functional.conv2d(tx, tw, tb, padding=1).sum()
        torch.autograd.grad(loss, [tw, tb])

    return tg_step, torch_step


def transformer_pair():
    tg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
    tlayer = torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
    tlayer.load_state_dict({k: torch.tensor(v.numpy()) for k, v in layer.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64, 128)).astype(np.float32)
    y = rng.standard_normal((16, 64, 128)).astype(np.float32)
    xt, yt = tg.tensor(x), tg.tensor(y)
    opt = tg.optim.SGD(layer.parameters(), lr=0.01)
    tx, ty = torch.tensor(x), torch.tensor(y)
    topt = torch.optim.SGD(tlayer.parameters(), lr=0.01)

    def tg_step():
        with tg.Tape() as tape:
            loss = F.mse_loss(layer(xt), yt)
        opt.step(tape.gradient(loss, layer))

    def torch_step():
        topt.zero_grad()
        torch.nn.functional.mse_loss(tlayer(tx), ty).backward()
        topt.step()

    return tg_step, torch_step


def main(rounds: int = 7) -> None:
    threads = max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)
    torch.set_num_threads(threads)
    print(f"threads: {threads} (numpy's BLAS and PyTorch)")
    for name, (a, b) in {"conv2d fwd+bwd (64,16,28,28) x 32 3x3": conv_pair(),
                         "TransformerEncoderLayer step": transformer_pair()}.items():
        ta, tb = [], []
        for _ in range(rounds):
            ta.append(_time(a))
            tb.append(_time(b))
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"{name:40s} tapegrad {ma * 1e3:7.1f} ms  torch {mb * 1e3:7.1f} ms  "
              f"speed ratio (tapegrad/torch steps/s) {mb / ma:.2f}x")


if __name__ == "__main__":
    main()
