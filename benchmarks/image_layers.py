"""Instance norm, reflection/replicate padding, upsampling and PixelShuffle against PyTorch,
forward + backward per layer at fast_neural_style's and super_resolution's shapes, and one
training step (forward, backward, Adam) of each program at a small size.

    TAPEGRAD_COMPILE=wait OMP_WAIT_POLICY=passive python benchmarks/image_layers.py [--threads 1]

Side by side in one process, alternating, median of the rounds; the figure is PyTorch's time
over tapegrad's (above 1: tapegrad is faster).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import tapegrad as tg


# (name, tapegrad layer, torch layer, input shape)
def _layers() -> list[tuple[str, Any, Any, tuple[int, ...]]]:
    tn, nn = torch.nn, tg.nn
    return [
        ("ReflectionPad2d(4) 1x3x128x128", nn.ReflectionPad2d(4), tn.ReflectionPad2d(4),
         (1, 3, 128, 128)),
        ("ReflectionPad2d(1) 1x128x32x32", nn.ReflectionPad2d(1), tn.ReflectionPad2d(1),
         (1, 128, 32, 32)),
        ("ReflectionPad2d(1) 4x32x128x128", nn.ReflectionPad2d(1), tn.ReflectionPad2d(1),
         (4, 32, 128, 128)),
        ("ReplicationPad2d(2) 2x32x64x64", nn.ReplicationPad2d(2), tn.ReplicationPad2d(2),
         (2, 32, 64, 64)),
        ("InstanceNorm2d(32, affine) 1x32x128x128", nn.InstanceNorm2d(32, affine=True),
         tn.InstanceNorm2d(32, affine=True), (1, 32, 128, 128)),
        ("InstanceNorm2d(128, affine) 1x128x32x32", nn.InstanceNorm2d(128, affine=True),
         tn.InstanceNorm2d(128, affine=True), (1, 128, 32, 32)),
        ("InstanceNorm2d(64, affine) 4x64x64x64", nn.InstanceNorm2d(64, affine=True),
         tn.InstanceNorm2d(64, affine=True), (4, 64, 64, 64)),
        ("Upsample(nearest, 2) 1x128x32x32", nn.Upsample(scale_factor=2),
         tn.Upsample(scale_factor=2), (1, 128, 32, 32)),
        ("Upsample(nearest, 2) 2x64x64x64", nn.Upsample(scale_factor=2),
         tn.Upsample(scale_factor=2), (2, 64, 64, 64)),
        ("Upsample(bilinear, 2) 1x64x64x64", nn.Upsample(scale_factor=2, mode="bilinear"),
         tn.Upsample(scale_factor=2, mode="bilinear"), (1, 64, 64, 64)),
        ("Upsample(bilinear, 2, ac) 1x64x64x64",
         nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
         tn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), (1, 64, 64, 64)),
        ("PixelShuffle(3) 1x9x64x64", nn.PixelShuffle(3), tn.PixelShuffle(3), (1, 9, 64, 64)),
        ("PixelShuffle(3) 1x9x224x224", nn.PixelShuffle(3), tn.PixelShuffle(3),
         (1, 9, 224, 224)),
        ("PixelUnshuffle(2) 2x16x64x64", nn.PixelUnshuffle(2), tn.PixelUnshuffle(2),
         (2, 16, 64, 64)),
    ]


def _tg_step(layer: Any, x: Any, gy: Any) -> Callable[[], Any]:
    def run() -> Any:
        with tg.Tape() as tape:
            tape.watch(x)
            y = layer(x)
        return tape.gradient(y, [x], output_gradients=gy)

    return run


def _torch_step(layer: Any, x: Any, gy: Any) -> Callable[[], Any]:
    def run() -> Any:
        y = layer(x)
        return torch.autograd.grad(y, [x] + [p for p in layer.parameters()], gy)

    return run


def _median_ratio(a: Callable[[], Any], b: Callable[[], Any], rounds: int, reps: int) -> tuple:
    for _ in range(3):
        a()
        b()
    ta, tb = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            a()
        t1 = time.perf_counter()
        for _ in range(reps):
            b()
        t2 = time.perf_counter()
        ta.append((t1 - t0) / reps)
        tb.append((t2 - t1) / reps)
    ma, mb = statistics.median(ta), statistics.median(tb)
    return ma, mb


def layers(rounds: int, only: str | None) -> None:
    rng = np.random.default_rng(0)
    for name, tl, ttl, shape in _layers():
        if only and only not in name:
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        xt = torch.tensor(x, requires_grad=True)
        y = ttl(xt)
        gy = rng.standard_normal(tuple(y.shape)).astype(np.float32)
        a = _tg_step(tl, tg.tensor(x), tg.tensor(gy))
        b = _torch_step(ttl, xt, torch.tensor(gy))
        reps = max(1, int(2e6 // x.size))
        ma, mb = _median_ratio(a, b, rounds, reps)
        print(f"{name:42s} tapegrad {ma * 1e3:8.3f} ms  torch {mb * 1e3:8.3f} ms  "
              f"ratio {mb / ma:5.2f}x", flush=True)


# -- the two programs (pytorch/examples, neural_style/transformer_net.py, super_resolution/model.py)
def _transformer_net(nn: Any) -> Any:
    class ConvLayer(nn.Module):
        def __init__(self, cin: int, cout: int, k: int, s: int) -> None:
            super().__init__()
            self.reflection_pad = nn.ReflectionPad2d(k // 2)
            self.conv2d = nn.Conv2d(cin, cout, k, s)

        def forward(self, x: Any) -> Any:
            return self.conv2d(self.reflection_pad(x))

    class ResidualBlock(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1 = ConvLayer(c, c, 3, 1)
            self.in1 = nn.InstanceNorm2d(c, affine=True)
            self.conv2 = ConvLayer(c, c, 3, 1)
            self.in2 = nn.InstanceNorm2d(c, affine=True)
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            out = self.relu(self.in1(self.conv1(x)))
            return self.in2(self.conv2(out)) + x

    class UpsampleConvLayer(nn.Module):
        def __init__(self, cin: int, cout: int, k: int, s: int, upsample: int) -> None:
            super().__init__()
            self.upsample = upsample
            self.reflection_pad = nn.ReflectionPad2d(k // 2)
            self.conv2d = nn.Conv2d(cin, cout, k, s)

        def forward(self, x: Any) -> Any:
            x = nn.functional.interpolate(x, mode="nearest", scale_factor=self.upsample)
            return self.conv2d(self.reflection_pad(x))

    class TransformerNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = ConvLayer(3, 32, 9, 1)
            self.in1 = nn.InstanceNorm2d(32, affine=True)
            self.conv2 = ConvLayer(32, 64, 3, 2)
            self.in2 = nn.InstanceNorm2d(64, affine=True)
            self.conv3 = ConvLayer(64, 128, 3, 2)
            self.in3 = nn.InstanceNorm2d(128, affine=True)
            self.res1, self.res2, self.res3 = (ResidualBlock(128) for _ in range(3))
            self.res4, self.res5 = ResidualBlock(128), ResidualBlock(128)
            self.deconv1 = UpsampleConvLayer(128, 64, 3, 1, 2)
            self.in4 = nn.InstanceNorm2d(64, affine=True)
            self.deconv2 = UpsampleConvLayer(64, 32, 3, 1, 2)
            self.in5 = nn.InstanceNorm2d(32, affine=True)
            self.deconv3 = ConvLayer(32, 3, 9, 1)
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            y = self.relu(self.in1(self.conv1(x)))
            y = self.relu(self.in2(self.conv2(y)))
            y = self.relu(self.in3(self.conv3(y)))
            y = self.res5(self.res4(self.res3(self.res2(self.res1(y)))))
            y = self.relu(self.in4(self.deconv1(y)))
            y = self.relu(self.in5(self.deconv2(y)))
            return self.deconv3(y)

    return TransformerNet()


def _super_resolution(nn: Any, r: int = 3) -> Any:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = nn.ReLU()
            self.conv1 = nn.Conv2d(1, 64, 5, 1, 2)
            self.conv2 = nn.Conv2d(64, 64, 3, 1, 1)
            self.conv3 = nn.Conv2d(64, 32, 3, 1, 1)
            self.conv4 = nn.Conv2d(32, r * r, 3, 1, 1)
            self.pixel_shuffle = nn.PixelShuffle(r)

        def forward(self, x: Any) -> Any:
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            x = self.relu(self.conv3(x))
            return self.pixel_shuffle(self.conv4(x))

    return Net()


def programs(rounds: int) -> None:
    rng = np.random.default_rng(1)
    for name, make, shape, tshape in (
        ("fast_neural_style 1x3x64x64", _transformer_net, (1, 3, 64, 64), (1, 3, 64, 64)),
        ("super_resolution 4x1x64x64 (r=3)", _super_resolution, (4, 1, 64, 64),
         (4, 1, 192, 192)),
    ):
        tm, om = make(tg.nn), make(torch.nn)
        tm.load_state_dict({k: v.detach().numpy() for k, v in om.state_dict().items()})
        x = rng.standard_normal(shape).astype(np.float32)
        t = rng.standard_normal(tshape).astype(np.float32)
        topt = tg.optim.Adam(tm.parameters(), lr=1e-3)
        oopt = torch.optim.Adam(om.parameters(), lr=1e-3)
        xg, tgt = tg.tensor(x), tg.tensor(t)
        xo, tto = torch.tensor(x), torch.tensor(t)

        def port() -> None:
            with tg.Tape() as tape:
                loss = tg.nn.functional.mse_loss(tm(xg), tgt)
            topt.step(tape.gradient(loss, tm))

        def original() -> None:
            oopt.zero_grad()
            torch.nn.functional.mse_loss(om(xo), tto).backward()
            oopt.step()

        ma, mb = _median_ratio(port, original, rounds, 1)
        print(f"{name:42s} tapegrad {ma * 1e3:8.2f} ms  torch {mb * 1e3:8.2f} ms  "
              f"ratio {mb / ma:5.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=None)
    ap.add_argument("--skip-programs", action="store_true")
    ap.add_argument("--skip-layers", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tg.set_num_threads(a.threads)
    print(f"{platform.processor() or platform.machine()}, {a.threads} thread(s) each, float32")
    if not a.skip_layers:
        layers(a.rounds, a.only)
    if not a.skip_programs:
        programs(a.rounds)


if __name__ == "__main__":
    main()
