"""Convolution, pooling and batch-norm layers, forward + backward, tapegrad against PyTorch.

Each row times one layer's forward and backward (the gradients a training step asks for) in
tapegrad and in PyTorch eager, on the same arrays, alternating the two within every round; the
ratio is PyTorch's time over tapegrad's in the same round (above 1: tapegrad is faster), and
the table shows the medians over rounds. The shapes are those of workload (c) (the small CNN),
of a DCGAN at 64x64 (generator ConvTranspose2d + BatchNorm2d, discriminator Conv2d + BatchNorm2d,
ngf = ndf = 16, batch 64) and of a ResNet-18 stage (64 -> 128 channels, stride 2, 1x1
downsample). ``--steps`` adds whole fwd+bwd steps of the DCGAN and of the ResNet stage.

    PYTHONPATH=. python benchmarks/conv_kernels.py                  # every layer, 7 rounds
    PYTHONPATH=. python benchmarks/conv_kernels.py --only c --rounds 11
    PYTHONPATH=. python benchmarks/conv_kernels.py --only steps --steps
    TAPEGRAD_KERNELS=numpy PYTHONPATH=. python benchmarks/conv_kernels.py   # the reference
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402  (its load guard: the machine is shared)

TF = torch.nn.functional

# (group, name, kind, input shape, spec); conv spec: (out, kernel, stride, padding, input grad)
CASES: list[tuple[str, str, str, tuple[int, ...], tuple[Any, ...]]] = [
    ("c", "conv1 1->8 3x3", "conv", (64, 1, 28, 28), (8, 3, 1, 0, False)),
    ("c", "conv2 8->16 3x3", "conv", (64, 8, 13, 13), (16, 3, 1, 0, True)),
    ("c", "maxpool 2x2 (64,8,26,26)", "pool", (64, 8, 26, 26), (2, 2, 0)),
    ("c", "maxpool 2x2 (64,16,11,11)", "pool", (64, 16, 11, 11), (2, 2, 0)),
    ("h", "G convT 128->64 k4s2 4->8", "convT", (64, 128, 4, 4), (64, 4, 2, 1, True)),
    ("h", "G convT 32->16 k4s2 16->32", "convT", (64, 32, 16, 16), (16, 4, 2, 1, True)),
    ("h", "G convT 16->3 k4s2 32->64", "convT", (64, 16, 32, 32), (3, 4, 2, 1, True)),
    ("h", "D conv 3->16 k4s2 64->32", "conv", (64, 3, 64, 64), (16, 4, 2, 1, False)),
    ("h", "D conv 32->64 k4s2 16->8", "conv", (64, 32, 16, 16), (64, 4, 2, 1, True)),
    ("h", "BatchNorm2d (64,16,32,32)", "bn", (64, 16, 32, 32), ()),
    ("h", "BatchNorm2d (64,64,8,8)", "bn", (64, 64, 8, 8), ()),
    ("i", "conv 64->128 3x3 s2 28->14", "conv", (16, 64, 28, 28), (128, 3, 2, 1, True)),
    ("i", "conv 128->128 3x3 14x14", "conv", (16, 128, 14, 14), (128, 3, 1, 1, True)),
    ("i", "conv 1x1 64->128 s2 28->14", "conv", (16, 64, 28, 28), (128, 1, 2, 0, True)),
    ("i", "conv 64->128 3x3 s2 56->28", "conv", (16, 64, 56, 56), (128, 3, 2, 1, True)),
    ("i", "conv 128->128 3x3 28x28", "conv", (16, 128, 28, 28), (128, 3, 1, 1, True)),
    ("i", "BatchNorm2d (16,128,14,14)", "bn", (16, 128, 14, 14), ()),
]


def _layer(kind: str, shape: tuple[int, ...], spec: tuple[Any, ...]) -> tuple[Any, Any]:
    """A tapegrad step and a PyTorch step: the layer's forward, then its backward."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = tg.tensor(x)
    tx = torch.from_numpy(x.copy())
    if kind == "pool":
        k, s, p = spec
        tx.requires_grad_()

        def tg_pool() -> None:
            with tg.Tape() as tape:
                tape.watch(xt)
                loss = F.max_pool2d(xt, k, s, p).sum()
            tape.gradient(loss, xt)

        def torch_pool() -> None:
            tx.grad = None
            TF.max_pool2d(tx, k, s, p).sum().backward()

        return tg_pool, torch_pool
    if kind == "bn":
        c = shape[1]
        w, b = np.ones(c, np.float32), np.zeros(c, np.float32)
        wt, bt = tg.Parameter(w), tg.Parameter(b)
        rm, rv = tg.zeros(c), tg.ones(c)
        tw, tb = (torch.from_numpy(a.copy()).requires_grad_() for a in (w, b))
        trm, trv = torch.zeros(c), torch.ones(c)
        tx.requires_grad_()
        gy = rng.standard_normal(shape).astype(np.float32)
        tgy = torch.from_numpy(gy)

        def tg_bn() -> None:
            with tg.Tape() as tape:
                tape.watch(xt)
                y = F.batch_norm(xt, rm, rv, wt, bt, True)
            tape.gradient(y, [xt, wt, bt], output_gradients=tg.tensor(gy))

        def torch_bn() -> None:
            tx.grad = tw.grad = tb.grad = None
            TF.batch_norm(tx, trm, trv, tw, tb, True).backward(tgy)

        return tg_bn, torch_bn
    out, k, s, p, need_x = spec
    cin = shape[1]
    wshape = (cin, out, k, k) if kind == "convT" else (out, cin, k, k)
    w = (rng.standard_normal(wshape) / np.sqrt(cin * k * k)).astype(np.float32)
    b = np.zeros(out, np.float32)
    wt, bt = tg.Parameter(w), tg.Parameter(b)
    tw, tb = (torch.from_numpy(a.copy()).requires_grad_() for a in (w, b))
    tx.requires_grad_(need_x)
    f_tg = F.conv_transpose2d if kind == "convT" else F.conv2d
    f_th = TF.conv_transpose2d if kind == "convT" else TF.conv2d
    sources = [xt, wt, bt] if need_x else [wt, bt]

    def tg_conv() -> None:
        with tg.Tape() as tape:
            if need_x:
                tape.watch(xt)
            loss = f_tg(xt, wt, bt, s, p).sum()
        tape.gradient(loss, sources)

    def torch_conv() -> None:
        tx.grad = tw.grad = tb.grad = None
        f_th(tx, tw, tb, s, p).sum().backward()

    return tg_conv, torch_conv


# -- whole steps -------------------------------------------------------------------------------


def _dcgan(nn: Any, nz: int = 100, ngf: int = 16, ndf: int = 16) -> tuple[Any, Any]:
    g = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
        nn.BatchNorm2d(ngf * 8),
        nn.ReLU(),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
        nn.BatchNorm2d(ngf * 4),
        nn.ReLU(),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
        nn.BatchNorm2d(ngf * 2),
        nn.ReLU(),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
        nn.BatchNorm2d(ngf),
        nn.ReLU(),
        nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False),
        nn.Tanh(),
    )
    d = nn.Sequential(
        nn.Conv2d(3, ndf, 4, 2, 1, bias=False),
        nn.LeakyReLU(0.2),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
        nn.BatchNorm2d(ndf * 2),
        nn.LeakyReLU(0.2),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
        nn.BatchNorm2d(ndf * 4),
        nn.LeakyReLU(0.2),
        nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
        nn.BatchNorm2d(ndf * 8),
        nn.LeakyReLU(0.2),
        nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
    )
    return g, d


def _stage(nn: Any, cin: int = 64, cout: int = 128) -> Any:
    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    return nn.Sequential(Block(cin, cout, 2), Block(cout, cout, 1))


def _copy(src: Any, dst: Any) -> None:
    """Load the PyTorch model's weights into the tapegrad twin."""
    dst.load_state_dict({k: v.detach().numpy().copy() for k, v in src.state_dict().items()})


def _steps(name: str) -> tuple[Any, Any]:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "dcgan":
        tg_g, tg_d = _dcgan(tg.nn)
        th_g, th_d = _dcgan(torch.nn)
        _copy(th_g, tg_g)
        _copy(th_d, tg_d)
        z = rng.standard_normal((64, 100, 1, 1)).astype(np.float32)
        real = rng.uniform(-1, 1, (64, 3, 64, 64)).astype(np.float32)
        ones = np.ones((64, 1, 1, 1), np.float32)
        zt, rt, ot = tg.tensor(z), tg.tensor(real), tg.tensor(ones)
        tz, tr, to = torch.from_numpy(z), torch.from_numpy(real), torch.from_numpy(ones)
        bce_tg, bce_th = F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits
        params = list(tg_g.parameters()) + list(tg_d.parameters())

        def tg_gan() -> None:
            with tg.Tape() as tape:
                loss = bce_tg(tg_d(tg_g(zt)), ot) + bce_tg(tg_d(rt), ot)
            tape.gradient(loss, params)

        def torch_gan() -> None:
            for m in (th_g, th_d):
                m.zero_grad(set_to_none=True)
            (bce_th(th_d(th_g(tz)), to) + bce_th(th_d(tr), to)).backward()

        return tg_gan, torch_gan
    shape = (16, 64, 56, 56) if name == "resnet56" else (16, 64, 28, 28)
    tg_s, th_s = _stage(tg.nn), _stage(torch.nn)
    _copy(th_s, tg_s)
    x = rng.standard_normal(shape).astype(np.float32)
    xt, tx = tg.tensor(x), torch.from_numpy(x)
    sp = list(tg_s.parameters())

    def tg_res() -> None:
        with tg.Tape() as tape:
            y = tg_s(xt)
            loss = (y * y).mean()
        tape.gradient(loss, sp)

    def torch_res() -> None:
        th_s.zero_grad(set_to_none=True)
        y = th_s(tx)
        (y * y).mean().backward()

    return tg_res, torch_res


STEPS = [
    ("steps", "DCGAN G+D fwd+bwd, batch 64, 64x64", "dcgan"),
    ("steps", "ResNet stage 64->128, (16,64,56,56)", "resnet56"),
    ("steps", "ResNet stage 64->128, (16,64,28,28)", "resnet28"),
]


def _time(fn: Callable[[], Any], min_time: float) -> float:
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        t = time.perf_counter() - t0
        if t >= min_time:
            return t / n * 1e3


def _others(j0: Any, c0: Any) -> float:
    """Share of the CPU other processes took since the (jiffies, times) pair ``j0, c0``."""
    j1, c1 = suite._cpu_jiffies(), os.times()
    if not (j0 and j1 and j1[1] > j0[1]):
        return 0.0
    hz = os.sysconf("SC_CLK_TCK")
    ours = (c1.user + c1.system) - (c0.user + c0.system)
    return max(0.0, ((j1[0] - j0[0]) / hz - ours) / ((j1[1] - j0[1]) / hz))


def measure(
    tg_fn: Any, th_fn: Any, rounds: int, min_time: float, max_wait: float
) -> tuple[float, float, float, int]:
    """Median tapegrad ms, median PyTorch ms, median of the per-round ratios PyTorch / tapegrad,
    and the number of rounds kept although other processes were busy (``max_wait`` ran out)."""
    tg_fn()
    th_fn()
    a, b, r = [], [], []
    busy = 0
    deadline = time.perf_counter() + max_wait
    while len(r) < rounds:
        suite.wait_for_quiet(max(0.0, deadline - time.perf_counter()), log=lambda *_: None)
        j0, c0 = suite._cpu_jiffies(), os.times()
        if len(r) % 2:  # alternate which goes first
            tb = _time(th_fn, min_time)
            ta = _time(tg_fn, min_time)
        else:
            ta = _time(tg_fn, min_time)
            tb = _time(th_fn, min_time)
        if _others(j0, c0) > suite.MAX_LOAD:
            if time.perf_counter() < deadline:
                continue  # set aside: re-run once the machine is quiet
            busy += 1
        a.append(ta)
        b.append(tb)
        r.append(tb / ta)
    return statistics.median(a), statistics.median(b), statistics.median(r), busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="c,h,i", help="comma-separated groups: c, h, i, steps")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.1, help="seconds per framework and round")
    ap.add_argument("--steps", action="store_true", help="also time whole DCGAN / ResNet steps")
    ap.add_argument("--match", default="", help="only rows whose name contains this")
    ap.add_argument(
        "--max-wait",
        type=float,
        default=60.0,
        help="seconds per row to wait for other processes to leave the CPU",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=2,
        help="threads for PyTorch and numpy's BLAS (1: a steadier proxy when the "
        "machine is busy; the serial kernels are unaffected)",
    )
    args = ap.parse_args()
    groups = set(args.only.split(","))
    if args.steps:
        groups.add("steps")
    torch.set_num_threads(args.threads)
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    threadpool_limits(args.threads, user_api="blas")
    print(f"tapegrad kernels: {_kernels.selection()}; {args.rounds} rounds; {args.threads} threads")
    print("| group | layer, forward + backward | tapegrad ms | PyTorch ms | vs PyTorch |")
    print("|---|---|---|---|---|")
    rows: list[tuple[str, str, Any]] = [
        (grp, name, (lambda k=kind, s=shape, p=spec: _layer(k, s, p)))
        for grp, name, kind, shape, spec in CASES
    ]
    rows += [(grp, name, (lambda w=which: _steps(w))) for grp, name, which in STEPS]
    for grp, name, make in rows:
        if grp not in groups or args.match not in name:
            continue
        tg_fn, th_fn = make()
        a, b, r, busy = measure(tg_fn, th_fn, args.rounds, args.min_time, args.max_wait)
        mark = f" ({busy} busy)" if busy else ""
        print(f"| {grp} | {name} | {a:.2f} | {b:.2f} | {r:.2f}x{mark} |", flush=True)


if __name__ == "__main__":
    main()
