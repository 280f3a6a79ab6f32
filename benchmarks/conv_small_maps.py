"""Convolutions on small maps: ResNet-18 on 8x8 digits (pytorch/examples siamese_network's
network on sklearn-sized images), tapegrad against PyTorch.

Its feature maps run from 4x4 down to 1x1 (64 to 512 channels, batch 64): layers 2-4 are 3x3
convolutions padded by 1 on 1x1 maps (one live tap: a GEMM). Each row times one Conv2d's
forward + backward (input and weight gradients), or a whole forward + backward step of the
network, in tapegrad and PyTorch on the same arrays, alternating within every round; the ratio
is PyTorch's time over tapegrad's in the same round (above 1: tapegrad is faster), the table
the medians over rounds.

    OMP_WAIT_POLICY=passive TAPEGRAD_COMPILE=wait PYTHONPATH=. python benchmarks/conv_small_maps.py
    ... --rounds 15 --only step
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch

import tapegrad as tg
import tapegrad.nn as tnn
import tapegrad.nn.functional as F

TF = torch.nn.functional
BATCH = 64

# (name, input shape, out channels, kernel, stride, padding) of ResNet-18 on 8x8 inputs
LAYERS = [
    ("conv1 1->64 7x7 s2 8x8", (BATCH, 1, 8, 8), 64, 7, 2, 3),
    ("layer1 64->64 3x3 2x2", (BATCH, 64, 2, 2), 64, 3, 1, 1),
    ("layer2 64->128 3x3 s2 2x2", (BATCH, 64, 2, 2), 128, 3, 2, 1),
    ("layer2 down 64->128 1x1 s2", (BATCH, 64, 2, 2), 128, 1, 2, 0),
    ("layer2 128->128 3x3 1x1", (BATCH, 128, 1, 1), 128, 3, 1, 1),
    ("layer3 256->256 3x3 1x1", (BATCH, 256, 1, 1), 256, 3, 1, 1),
    ("layer4 256->512 3x3 s2 1x1", (BATCH, 256, 1, 1), 512, 3, 2, 1),
    ("layer4 512->512 3x3 1x1", (BATCH, 512, 1, 1), 512, 3, 1, 1),
]


def _conv_pair(shape: tuple[int, ...], o: int, k: int, s: int, p: int) -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((o, shape[1], k, k)) * 0.05).astype(np.float32)
    xt, wt = tg.tensor(x), tg.Parameter(w)
    xp, wp = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)

    def ours() -> None:
        with tg.Tape() as tape:
            tape.watch(xt)
            y = F.conv2d(xt, wt, stride=s, padding=p)
        tape.gradient(y, [xt, wt], output_gradients=tg.ones(y.shape))

    def theirs() -> None:
        y = TF.conv2d(xp, wp, stride=s, padding=p)
        xp.grad = wp.grad = None
        y.backward(torch.ones_like(y))

    return ours, theirs


# -- ResNet-18 (torchvision's layout), one definition per library ----------------------------
def _resnet(nn: Any, one_channel: bool = True) -> Any:
    class BasicBlock(nn.Module):
        def __init__(self, c_in: int, c: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)
            self.downsample = None
            if stride != 1 or c_in != c:
                self.downsample = nn.Sequential(nn.Conv2d(c_in, c, 1, stride, bias=False),
                                                nn.BatchNorm2d(c))

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            idt = x if self.downsample is None else self.downsample(x)
            return self.relu(out + idt)

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            chans = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
            self.layer1, self.layer2, self.layer3, self.layer4 = (
                nn.Sequential(BasicBlock(a, b, s), BasicBlock(b, b, 1)) for a, b, s in chans)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, 10)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).reshape(x.shape[0], -1))

    return ResNet18()


def _step_pair() -> tuple[Any, Any]:
    torch.manual_seed(0)
    theirs_m = _resnet(torch.nn)
    ours_m = _resnet(tnn)
    ours_m.load_state_dict({k: v.detach().numpy() for k, v in theirs_m.state_dict().items()})
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (BATCH, 1, 8, 8)).astype(np.float32)
    t = rng.integers(0, 10, BATCH)
    xt, tt = tg.tensor(x), tg.tensor(t)
    xp, tp = torch.tensor(x), torch.tensor(t)

    def ours() -> None:
        with tg.Tape() as tape:
            loss = F.cross_entropy(ours_m(xt), tt)
        tape.gradient(loss, ours_m)

    def theirs() -> None:
        theirs_m.zero_grad()
        TF.cross_entropy(theirs_m(xp), tp).backward()

    return ours, theirs


def _ratio(ours: Any, theirs: Any, rounds: int, reps: int) -> tuple[float, float, float]:
    for _ in range(3):  # compile, measure, warm up
        ours()
        theirs()
    ratios, to, tt = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            ours()
        t1 = time.perf_counter()
        for _ in range(reps):
            theirs()
        t2 = time.perf_counter()
        to.append((t1 - t0) / reps)
        tt.append((t2 - t1) / reps)
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(ratios), statistics.median(to) * 1e3, statistics.median(tt) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--only", choices=["layers", "step"], default=None)
    ap.add_argument("--threads", type=int, default=None, help="both libraries' (default: tg's)")
    args = ap.parse_args()
    if args.threads:
        tg.set_num_threads(args.threads)
    torch.set_num_threads(tg.get_num_threads())
    print(f"threads {tg.get_num_threads()}; ratio = PyTorch time / tapegrad time (median)")
    if args.only in (None, "layers"):
        for name, shape, o, k, s, p in LAYERS:
            r, a, b = _ratio(*_conv_pair(shape, o, k, s, p), args.rounds, 5)
            print(f"{name:32s} {r:6.2f}x   tapegrad {a:7.3f} ms  PyTorch {b:7.3f} ms", flush=True)
    if args.only in (None, "step"):
        r, a, b = _ratio(*_step_pair(), args.rounds, 2)
        print(f"{'resnet18 8x8 step (batch 64)':32s} {r:6.2f}x   tapegrad {a:7.3f} ms  "
              f"PyTorch {b:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
