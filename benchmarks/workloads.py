"""The benchmark workloads, one training step each, written once per framework.

Every workload has the same shapes, the same initial weights (drawn once with numpy, named as
PyTorch's ``state_dict`` names them, and copied into each framework), the same batch and plain
SGD (lr 0.01). ``build(framework, key)`` returns a ``Bench`` whose ``step()`` runs one full
training step (forward, backward, update) and returns the loss in the framework's own type.

    >>> b = build("tapegrad", "a", tiny=True)
    >>> loss = b.value(b.step())

Frameworks: ``tapegrad``, ``tapegrad-compiled`` (when ``tg.compile`` exists), ``torch`` (eager),
``jax`` (``jax.jit`` of the whole step, when installed) and ``numpy`` (forward, backward and update
written by hand; workloads a and b).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LR = 0.01
SEED = 0

# -- the workloads --------------------------------------------------------------------------------
TITLES = {
    "a": "MLP 5-32-32-2 (dfdx), batch 64, MSE",
    "b": "MLP 784-512-512-10, batch 128, cross-entropy",
    "c": "CNN 1x28x28 conv8-conv16-fc10, batch 64, cross-entropy",
    "d": "TransformerEncoderLayer d128 h4 ff512, seq 64, batch 16, MSE",
    "e": "CLIP (examples/multimodal.py), batch 128",
    "g": "MLP 4096-4096-4096, batch 256, MSE (GEMM efficiency)",
    "h": "DCGAN 64x64x3 step (pytorch/examples dcgan, nz 100, ngf = ndf = 16), batch 64, BCE, "
         "two Adam",
    "i": "ResNet-18 layer2 (2 BasicBlocks 64->128, stride 2) siamese pair 64x28x28, batch 8, "
         "BCE",
}
STEP_WORKLOADS = tuple(TITLES)  # (f), per-op overhead, is benchmarks/overhead.py


def dims(key: str, tiny: bool = False) -> dict[str, Any]:
    """Shapes of workload ``key``; ``tiny`` shrinks them for the smoke test."""
    if key == "a":
        return {"sizes": [5, 32, 32, 2], "batch": 4 if tiny else 64, "loss": "mse", "out": "tanh"}
    if key == "b":
        sizes = [12, 16, 16, 10] if tiny else [784, 512, 512, 10]
        return {"sizes": sizes, "batch": 8 if tiny else 128, "loss": "ce", "out": None}
    if key == "c":
        return {"image": 12 if tiny else 28, "batch": 2 if tiny else 64}
    if key == "d":
        if tiny:
            return {"d_model": 16, "nhead": 2, "ff": 32, "seq": 5, "batch": 2}
        return {"d_model": 128, "nhead": 4, "ff": 512, "seq": 64, "batch": 16}
    if key == "e":
        if tiny:
            return {"embed_dim": 16, "text_dim": 16, "heads": 2, "max_len": 6, "batch": 8,
                    "vocab": 20}
        return {"embed_dim": 64, "text_dim": 64, "heads": 4, "max_len": 10, "batch": 128,
                "vocab": 64}
    if key == "g":
        w = 32 if tiny else 4096
        return {"sizes": [w, w, w], "batch": 8 if tiny else 256, "loss": "mse", "out": None}
    if key == "h":
        # pytorch/examples uses ngf = ndf = 64: 16x the FLOPs, over a second a step on 2 cores
        if tiny:
            return {"nz": 8, "ngf": 2, "ndf": 2, "nc": 3, "batch": 4}
        return {"nz": 100, "ngf": 16, "ndf": 16, "nc": 3, "batch": 64}
    if key == "i":
        if tiny:
            return {"c_in": 4, "c_out": 8, "image": 8, "batch": 2}
        return {"c_in": 64, "c_out": 128, "image": 28, "batch": 8}
    raise KeyError(f"unknown workload {key!r}; known: {', '.join(TITLES)}")


def _cnn_flat(image: int) -> int:
    s = ((image - 2) // 2 - 2) // 2  # conv3 -> pool2 -> conv3 -> pool2
    return 16 * s * s


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    # PyTorch's default Linear/Conv init bound, 1/sqrt(fan_in)
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def _linear_w(rng, w: dict, name: str, n_in: int, n_out: int) -> None:
    w[f"{name}.weight"] = _uniform(rng, (n_out, n_in), n_in)
    w[f"{name}.bias"] = _uniform(rng, (n_out,), n_in)


def make_weights(key: str, tiny: bool = False) -> dict[str, np.ndarray]:
    """Initial weights, float32, keyed by PyTorch ``state_dict`` names."""
    d = dims(key, tiny)
    rng = np.random.default_rng(SEED)
    w: dict[str, np.ndarray] = {}
    if key in "abg":
        s = d["sizes"]
        for i in range(len(s) - 1):
            _linear_w(rng, w, f"layers.{i}", s[i], s[i + 1])
    elif key == "c":
        w["conv1.weight"] = _uniform(rng, (8, 1, 3, 3), 9)
        w["conv1.bias"] = _uniform(rng, (8,), 9)
        w["conv2.weight"] = _uniform(rng, (16, 8, 3, 3), 72)
        w["conv2.bias"] = _uniform(rng, (16,), 72)
        _linear_w(rng, w, "fc", _cnn_flat(d["image"]), 10)
    elif key == "d":
        m, ff = d["d_model"], d["ff"]
        bound = math.sqrt(6.0 / (m + 3 * m))  # xavier_uniform on in_proj, as PyTorch
        w["self_attn.in_proj_weight"] = rng.uniform(-bound, bound, (3 * m, m)).astype(np.float32)
        w["self_attn.in_proj_bias"] = np.zeros(3 * m, np.float32)
        _linear_w(rng, w, "self_attn.out_proj", m, m)
        w["self_attn.out_proj.bias"][:] = 0.0
        _linear_w(rng, w, "linear1", m, ff)
        _linear_w(rng, w, "linear2", ff, m)
        for n in ("norm1", "norm2"):
            w[f"{n}.weight"] = np.ones(m, np.float32)
            w[f"{n}.bias"] = np.zeros(m, np.float32)
    elif key in "hi":
        w = _conv_weights(key, d, rng)
    elif key == "e":
        # (e) starts from the tapegrad model's own initialisation, copied into the twins
        tg = _tg()
        tg.manual_seed(SEED)
        model = _clip_module().CLIP(_clip_config(d), d["vocab"])
        w = {k: np.array(v.numpy(), dtype=np.float32) for k, v in model.state_dict().items()}
    else:
        dims(key)
    return w


def make_batch(key: str, tiny: bool = False) -> tuple[np.ndarray, ...]:
    """One fixed batch of inputs and targets (numpy), reused every step."""
    d = dims(key, tiny)
    rng = np.random.default_rng(SEED + 1)
    if key in "abg":
        s, n = d["sizes"], d["batch"]
        x = rng.standard_normal((n, s[0])).astype(np.float32)
        if d["loss"] == "ce":
            return x, rng.integers(0, s[-1], n).astype(np.int64)
        return x, rng.standard_normal((n, s[-1])).astype(np.float32)
    if key == "c":
        x = rng.standard_normal((d["batch"], 1, d["image"], d["image"])).astype(np.float32)
        return x, rng.integers(0, 10, d["batch"]).astype(np.int64)
    if key == "d":
        shape = (d["batch"], d["seq"], d["d_model"])
        x = rng.standard_normal(shape).astype(np.float32)
        return x, rng.standard_normal(shape).astype(np.float32)
    if key == "e":
        n, t = d["batch"], d["max_len"]
        images = rng.random((n, 1, 8, 8)).astype(np.float32)
        ids = rng.integers(1, d["vocab"], (n, t)).astype(np.int64)
        lengths = rng.integers(1, t + 1, n)  # at least one real token per caption
        ids[np.arange(t)[None, :] >= lengths[:, None]] = 0  # pad after the caption
        return images, ids, rng.integers(0, 10, n).astype(np.int64)
    if key == "h":  # real images in [-1, 1] (Normalize(0.5, 0.5)) and one fixed noise batch
        n = d["batch"]
        real = np.tanh(rng.standard_normal((n, d["nc"], 64, 64))).astype(np.float32)
        return real, rng.standard_normal((n, d["nz"], 1, 1)).astype(np.float32)
    if key == "i":  # two feature maps per pair (a ResNet stem's output) and same/different
        shape = (d["batch"], d["c_in"], d["image"], d["image"])
        x1 = np.maximum(rng.standard_normal(shape), 0).astype(np.float32)
        x2 = np.maximum(rng.standard_normal(shape), 0).astype(np.float32)
        return x1, x2, rng.integers(0, 2, d["batch"]).astype(np.float32)
    dims(key)
    raise AssertionError


@dataclass
class Bench:
    """One framework's training step for one workload.

    ``step()`` runs a step and returns its loss (framework type); ``value(loss)`` turns that
    into a float and waits for it (JAX dispatches asynchronously); ``state()`` returns the
    current weights as numpy arrays under the ``state_dict`` names.
    """

    framework: str
    key: str
    step: Callable[[], Any]
    value: Callable[[Any], float] = float
    state: Callable[[], dict[str, np.ndarray]] = field(default=dict)
    notes: list[str] = field(default_factory=list)  # e.g. why a compiled step ran eagerly


def frameworks() -> list[str]:
    """The frameworks that can run here, in the order the report lists them."""
    out = ["tapegrad"]
    if hasattr(_tg(), "compile"):
        out.append("tapegrad-compiled")
    out.append("torch")
    if importlib.util.find_spec("jax") is not None:
        out.append("jax")
    out.append("numpy")
    return out


# (framework, workload) pairs with no step, and why: the report prints the reason
UNSUPPORTED = {
    ("jax", "h"): "no JAX twin written",
    ("jax", "i"): "no JAX twin written",
}


def unsupported(framework: str, key: str) -> str | None:
    """Why ``framework`` has no step for workload ``key``, or None when it has one."""
    if framework == "numpy" and key not in "ab":
        return "hand-written numpy covers (a) and (b) only"
    return UNSUPPORTED.get((framework, key))


def supports(framework: str, key: str) -> bool:
    """Whether ``framework`` has a step for workload ``key`` (hand-written numpy: a and b)."""
    return unsupported(framework, key) is None


def build(framework: str, key: str, tiny: bool = False) -> Bench:
    """The training step of workload ``key`` in ``framework``, from the shared weights."""
    builders = {
        "tapegrad": _build_tapegrad,
        "tapegrad-compiled": lambda k, w, b, d: _build_tapegrad(k, w, b, d, compiled=True),
        "torch": _build_torch,
        "jax": _build_jax,
        "numpy": _build_numpy,
    }
    if framework not in builders:
        raise KeyError(f"unknown framework {framework!r}; known: {', '.join(builders)}")
    if not supports(framework, key):
        raise ValueError(f"{framework} has no step for workload {key!r}")
    if key == "h":
        return _build_dcgan(framework, make_weights(key, tiny), make_batch(key, tiny),
                            dims(key, tiny))
    return builders[framework](key, make_weights(key, tiny), make_batch(key, tiny), dims(key, tiny))


# -- (h) DCGAN and (i) a siamese ResNet stage: one model definition for tapegrad and PyTorch ----
# tapegrad.nn and torch.nn share the layer names and arguments, so each model is written once
# as a function of the ``nn`` and ``F`` namespaces.
def _dcgan_spec(d: dict[str, Any]) -> tuple[list[tuple], list[tuple]]:
    """(in, out, stride, padding, batch norm) of each 4x4 layer of netG and netD (examples/dcgan)."""
    nz, g, f, nc = d["nz"], d["ngf"], d["ndf"], d["nc"]
    gen = [(nz, 8 * g, 1, 0, True), (8 * g, 4 * g, 2, 1, True), (4 * g, 2 * g, 2, 1, True),
           (2 * g, g, 2, 1, True), (g, nc, 2, 1, False)]
    disc = [(nc, f, 2, 1, False), (f, 2 * f, 2, 1, True), (2 * f, 4 * f, 2, 1, True),
            (4 * f, 8 * f, 2, 1, True), (8 * f, 1, 1, 0, False)]
    return gen, disc


def _dcgan_models(nn: Any, d: dict[str, Any]) -> tuple[Any, Any]:
    """netG (z -> 64x64 image, tanh) and netD (image -> probability), as pytorch/examples."""
    gen, disc = _dcgan_spec(d)
    g_layers: list[Any] = []
    for a, b, s, p, bn in gen:
        g_layers.append(nn.ConvTranspose2d(a, b, 4, s, p, bias=False))
        if bn:
            g_layers += [nn.BatchNorm2d(b), nn.ReLU(True)]
    g_layers.append(nn.Tanh())
    d_layers: list[Any] = []
    for i, (a, b, s, p, bn) in enumerate(disc):
        d_layers.append(nn.Conv2d(a, b, 4, s, p, bias=False))
        if bn:
            d_layers.append(nn.BatchNorm2d(b))
        if i < len(disc) - 1:
            d_layers.append(nn.LeakyReLU(0.2, inplace=True))
    d_layers.append(nn.Sigmoid())

    class Generator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.main = nn.Sequential(*g_layers)

        def forward(self, z: Any) -> Any:  # (B, nz, 1, 1) -> (B, nc, 64, 64)
            return self.main(z)

    class Discriminator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.main = nn.Sequential(*d_layers)

        def forward(self, x: Any) -> Any:  # (B, nc, 64, 64) -> (B,)
            return self.main(x).reshape(-1)

    return Generator(), Discriminator()


def _module_weights(model: Any, prefix: str, rng: np.random.Generator,
                    conv_std: float | None) -> dict[str, np.ndarray]:
    """Initial weights for a torch ``model``'s state_dict: convolutions N(0, conv_std) (DCGAN's
    ``weights_init``) or Kaiming normal, fan_out (torchvision's ResNet) when ``conv_std`` is None;
    batch norm weight N(1, 0.02) for DCGAN, else 1; linear layers PyTorch's default uniform."""
    out: dict[str, np.ndarray] = {}
    sd = model.state_dict()
    for name, t in sd.items():
        shape, key = tuple(t.shape), prefix + name
        if name.startswith("head."):  # (i)'s linear head
            out[key] = _uniform(rng, shape, sd["head.weight"].shape[1])
        elif name.endswith("num_batches_tracked"):
            out[key] = np.zeros((), np.int64)
        elif name.endswith("running_var"):
            out[key] = np.ones(shape, np.float32)
        elif name.endswith(("running_mean", "bias")):
            out[key] = np.zeros(shape, np.float32)
        elif len(shape) == 4:
            std = conv_std or math.sqrt(2.0 / (shape[0] * shape[2] * shape[3]))
            out[key] = (rng.standard_normal(shape) * std).astype(np.float32)
        elif conv_std:  # batch norm weight, DCGAN's N(1, 0.02)
            out[key] = (1.0 + 0.02 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[key] = np.ones(shape, np.float32)
    return out


def _conv_weights(key: str, d: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    torch = _torch()
    if key == "h":
        net_g, net_d = _dcgan_models(torch.nn, d)
        return {**_module_weights(net_g, "netG.", rng, 0.02),
                **_module_weights(net_d, "netD.", rng, 0.02)}
    return _module_weights(_siamese(torch.nn, torch.nn.functional, d), "", rng, None)


def _siamese(nn: Any, F: Any, d: dict[str, Any]) -> Any:
    """torchvision's ResNet-18 ``layer2`` (two BasicBlocks, the first with stride 2 and a 1x1
    conv + BN downsample) applied to both inputs with shared weights; the head scores
    ``|f1 - f2|`` of the globally pooled features as one logit (same / different)."""
    c_in, c = d["c_in"], d["c_out"]

    class BasicBlock(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int = 1,
                     downsample: Any = None) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class Siamese(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            down = nn.Sequential(nn.Conv2d(c_in, c, 1, 2, bias=False), nn.BatchNorm2d(c))
            self.layer2 = nn.Sequential(BasicBlock(c_in, c, 2, down), BasicBlock(c, c))
            self.head = nn.Linear(c, 1)

        def embed(self, x: Any) -> Any:  # (B, c_in, H, W) -> (B, c)
            f = F.adaptive_avg_pool2d(self.layer2(x), 1)
            return f.reshape(f.shape[0], -1)

        def forward(self, x1: Any, x2: Any) -> Any:  # -> (B,) logits
            return self.head(abs(self.embed(x1) - self.embed(x2))).reshape(-1)

    return Siamese()


def _build_dcgan(framework: str, weights, batch, d) -> Bench:
    """One iteration of pytorch/examples dcgan's loop: D on real, D on the detached fake, D's
    Adam step, then G's step through D(fake). lr 2e-4, betas (0.5, 0.999), as there."""
    if framework == "torch":
        torch = _torch()
        net_g, net_d = _dcgan_models(torch.nn, d)
        for name, net in (("netG.", net_g), ("netD.", net_d)):
            net.load_state_dict({k[len(name):]: torch.from_numpy(np.array(v)) for k, v in
                                 weights.items() if k.startswith(name)})
        opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
        criterion = torch.nn.BCELoss()
        real, noise = (torch.from_numpy(b) for b in batch)
        label = torch.empty(len(real))

        def run() -> Any:
            net_d.zero_grad()
            label.fill_(1.0)
            err_real = criterion(net_d(real), label)
            err_real.backward()
            fake = net_g(noise)
            label.fill_(0.0)
            err_fake = criterion(net_d(fake.detach()), label)
            err_fake.backward()
            err_d = err_real + err_fake
            opt_d.step()
            net_g.zero_grad()
            label.fill_(1.0)  # fake labels are real for the generator's cost
            err_g = criterion(net_d(fake), label)
            err_g.backward()
            opt_g.step()
            return err_d, err_g

        def state() -> dict[str, np.ndarray]:
            return {f"{p}{k}": v.detach().numpy().copy() for p, net in
                    (("netG.", net_g), ("netD.", net_d)) for k, v in net.state_dict().items()}

        return Bench("torch", "h", run, _pair_value, state)
    if framework not in ("tapegrad", "tapegrad-compiled"):
        raise ValueError(f"{framework} has no step for workload 'h': {unsupported(framework, 'h')}")
    tg = _tg()
    F = tg.nn.functional
    net_g, net_d = _dcgan_models(tg.nn, d)
    for name, net in (("netG.", net_g), ("netD.", net_d)):
        net.load_state_dict({k[len(name):]: v for k, v in weights.items() if k.startswith(name)})
    opt_d = tg.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = tg.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real, noise = tg.tensor(batch[0]), tg.tensor(batch[1])
    ones, zeros = tg.ones(len(batch[0])), tg.zeros(len(batch[0]))

    def dcgan_step(real: Any, noise: Any) -> Any:
        # PyTorch's order: D's gradient on the real batch first (its activations go then),
        # then the generator on its own tape, D on the detached fake (the two gradients of D
        # summed, as two backward calls accumulate them), and D on the fake for G's gradient
        with tg.Tape(watch_parameters=False) as tape_d:
            tape_d.watch(net_d)
            err_real = F.binary_cross_entropy(net_d(real), ones)
        grads_d = tape_d.gradient(err_real, net_d)
        with tg.Tape(watch_parameters=False) as tape_g:
            tape_g.watch(net_g)
            fake = net_g(noise)
            with tg.Tape(watch_parameters=False) as tape_d:
                tape_d.watch(net_d)
                err_fake = F.binary_cross_entropy(net_d(fake.detach()), zeros)
            opt_d.step(grads_d + tape_d.gradient(err_fake, net_d))
            err_g = F.binary_cross_entropy(net_d(fake), ones)
        opt_g.step(tape_g.gradient(err_g, net_g))
        return err_real + err_fake, err_g

    def state_tg() -> dict[str, np.ndarray]:
        return {f"{p}{k}": np.array(v.numpy(), copy=True) for p, net in
                (("netG.", net_g), ("netD.", net_d)) for k, v in net.state_dict().items()}

    if framework == "tapegrad-compiled":  # tg.compile(step_fn): two tapes, two optimizers
        compiled = tg.compile(dcgan_step)
        return Bench(framework, "h", lambda: compiled(real, noise), _pair_value, state_tg)
    return Bench("tapegrad", "h", lambda: dcgan_step(real, noise), _pair_value, state_tg)


def _pair_value(losses: Any) -> float:
    """(h)'s value: the discriminator's loss plus the generator's."""
    return sum(float(v.item()) for v in losses)


# -- tapegrad -----------------------------------------------------------------------------------
@cache
def _tg() -> Any:
    import tapegrad

    return tapegrad


@cache
def _clip_module() -> Any:
    """examples/multimodal.py, imported by path (examples/ is not a package)."""
    name = "tapegrad_example_multimodal"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "multimodal.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def _clip_config(d: dict[str, Any]) -> Any:
    return _clip_module().Config(
        embed_dim=d["embed_dim"], text_dim=d["text_dim"], heads=d["heads"],
        max_len=d["max_len"], batch_size=d["batch"],
    )


def _tg_model(key: str, d: dict[str, Any]) -> Any:
    tg = _tg()
    nn, F = tg.nn, tg.nn.functional

    class MLP(nn.Module):
        def __init__(self, sizes: list[int], out: str | None) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in pairwise(sizes)])
            self.out = out

        def forward(self, x: Any) -> Any:
            for layer in self.layers[:-1]:
                x = F.relu(layer(x))
            x = self.layers[-1](x)
            return tg.tanh(x) if self.out == "tanh" else x

    class CNN(nn.Module):
        def __init__(self, flat: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3)
            self.conv2 = nn.Conv2d(8, 16, 3)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(flat, 10)

        def forward(self, x: Any) -> Any:  # (B, 1, H, W)
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))  # (B, 16, s, s)
            return self.fc(x.reshape(x.shape[0], -1))

    if key in "abg":
        return MLP(d["sizes"], d["out"])
    if key == "c":
        return CNN(_cnn_flat(d["image"]))
    if key == "d":
        return nn.TransformerEncoderLayer(
            d["d_model"], d["nhead"], dim_feedforward=d["ff"], dropout=0.0, batch_first=True
        )
    if key == "e":
        return _clip_module().CLIP(_clip_config(d), d["vocab"])
    if key == "i":
        return _siamese(nn, F, d)
    raise KeyError(key)


def _tg_loss(key: str, d: dict[str, Any]) -> Callable[..., Any]:
    F = _tg().nn.functional
    if key == "e":
        return _clip_module().clip_loss
    if key == "i":
        return F.binary_cross_entropy_with_logits
    if key == "c" or d.get("loss") == "ce":
        return F.cross_entropy
    return F.mse_loss


def _build_tapegrad(key, weights, batch, d, compiled: bool = False) -> Bench:
    tg = _tg()
    model = _tg_model(key, d)
    model.load_state_dict(weights)
    opt = tg.optim.SGD(model.parameters(), lr=LR)
    loss_fn = _tg_loss(key, d)
    if key == "e":
        images, ids, labels = tg.tensor(batch[0]), tg.tensor(batch[1]), batch[2]
        inputs: tuple[Any, ...] = (images, ids)

        def objective(images: Any, ids: Any) -> Any:
            return loss_fn(model(images, ids), labels)
    elif key == "i":
        x1, x2, same = tg.tensor(batch[0]), tg.tensor(batch[1]), tg.tensor(batch[2])
        inputs = (x1, x2)

        def objective(x1: Any, x2: Any) -> Any:
            return loss_fn(model(x1, x2), same)
    else:
        inputs = (tg.tensor(batch[0]), tg.tensor(batch[1]))

        def objective(x: Any, y: Any) -> Any:
            return loss_fn(model(x), y)

    def state() -> dict[str, np.ndarray]:
        return {k: np.array(v.numpy(), copy=True) for k, v in model.state_dict().items()}

    if compiled:
        step_c = tg.compile(objective, model, opt)
        notes: list[str] = []
        calls = [0]

        def run_compiled() -> Any:
            if calls[0] >= 3:  # captured (or given up) by now: nothing more to listen for
                return step_c(*inputs)
            calls[0] += 1
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loss = step_c(*inputs)
            if caught and str(caught[0].message) not in notes:  # e.g. it could not be captured
                notes.append(str(caught[0].message))
            return loss

        return Bench("tapegrad-compiled", key, run_compiled, _item, state, notes)

    def run() -> Any:
        with tg.Tape() as tape:
            loss = objective(*inputs)
        grads = tape.gradient(loss, model)
        opt.step(grads)
        return loss

    return Bench("tapegrad", key, run, _item, state)


def _item(loss: Any) -> float:
    return float(loss.item())


# -- PyTorch eager --------------------------------------------------------------------------------
def blas_threads() -> int:
    """Threads numpy's BLAS uses (threadpoolctl), so that PyTorch gets the same number."""
    info = numpy_blas_info()
    return int(info["num_threads"]) if info else (os.cpu_count() or 1)


def numpy_blas_info() -> dict[str, Any]:
    """threadpoolctl's record of the BLAS numpy uses (not PyTorch's), or {} when unknown."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    own = [i for i in blas if "numpy" in str(i.get("filepath", ""))]
    return (own or blas or [{}])[0]


@cache
def _torch() -> Any:
    import torch

    torch.set_num_threads(blas_threads())
    return torch


def _torch_model(key: str, d: dict[str, Any]) -> Any:
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class MLP(nn.Module):
        def __init__(self, sizes: list[int], out: str | None) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(sizes))
            self.out = out

        def forward(self, x: Any) -> Any:
            for layer in self.layers[:-1]:
                x = F.relu(layer(x))
            x = self.layers[-1](x)
            return torch.tanh(x) if self.out == "tanh" else x

    class CNN(nn.Module):
        def __init__(self, flat: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3)
            self.conv2 = nn.Conv2d(8, 16, 3)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(flat, 10)

        def forward(self, x: Any) -> Any:
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            return self.fc(x.flatten(1))

    if key in "abg":
        return MLP(d["sizes"], d["out"])
    if key == "c":
        return CNN(_cnn_flat(d["image"]))
    if key == "d":
        return nn.TransformerEncoderLayer(
            d["d_model"], d["nhead"], dim_feedforward=d["ff"], dropout=0.0, batch_first=True
        )
    if key == "e":
        return _torch_clip(d)
    if key == "i":
        return _siamese(nn, F, d)
    raise KeyError(key)


def _torch_clip(d: dict[str, Any]) -> Any:
    """The PyTorch twin of examples/multimodal.py's CLIP: same layers, same parameter names."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    dim, width = d["embed_dim"], d["text_dim"]

    class ImageEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.pool = nn.MaxPool2d(2)
            self.proj = nn.Linear(32 * 4 * 4, dim)

        def forward(self, x: Any) -> Any:  # (B, 1, 8, 8)
            x = F.relu(self.conv1(x))
            x = self.pool(F.relu(self.conv2(x)))  # (B, 32, 4, 4)
            return self.proj(x.flatten(1))

    class TextEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(d["vocab"], width, padding_idx=0)
            self.pos = nn.Parameter(torch.zeros(d["max_len"], width))
            self.block = nn.TransformerEncoderLayer(
                width, d["heads"], dim_feedforward=2 * width, dropout=0.0, batch_first=True
            )
            self.proj = nn.Linear(width, dim)

        def forward(self, ids: Any) -> Any:  # (B, T)
            pad = ids == 0
            h = self.tok(ids) + self.pos  # (B, T, C)
            h = self.block(h, src_key_padding_mask=pad)
            keep = (~pad).to(h.dtype)[..., None]  # (B, T, 1)
            return self.proj((h * keep).sum(1) / keep.sum(1))

    class CLIP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.image = ImageEncoder()
            self.text = TextEncoder()
            self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))

        def forward(self, images: Any, ids: Any) -> Any:
            a = F.normalize(self.image(images), dim=-1)
            b = F.normalize(self.text(ids), dim=-1)
            return self.logit_scale.exp() * (a @ b.T)  # (B, B)

    return CLIP()


def _torch_clip_loss(logits: Any, labels: Any) -> Any:
    F = _torch().nn.functional
    same = (labels[:, None] == labels[None, :]).to(logits.dtype)
    target = same / same.sum(1, keepdim=True)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) * 0.5


def _build_torch(key, weights, batch, d) -> Bench:
    torch = _torch()
    model = _torch_model(key, d)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    inputs = tuple(torch.from_numpy(b) for b in batch)
    F = torch.nn.functional
    if key == "e":
        images, ids, labels = inputs

        def objective() -> Any:
            return _torch_clip_loss(model(images, ids), labels)
    elif key == "i":
        x1, x2, same = inputs

        def objective() -> Any:
            return F.binary_cross_entropy_with_logits(model(x1, x2), same)
    else:
        x, y = inputs
        loss_fn = F.cross_entropy if y.dtype == torch.int64 else F.mse_loss

        def objective() -> Any:
            return loss_fn(model(x), y)

    def run() -> Any:
        loss = objective()
        loss.backward()
        opt.step()
        # gradients freed at the end of the step, as in every other framework here
        opt.zero_grad(set_to_none=True)
        return loss

    def state() -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}

    return Bench("torch", key, run, _item, state)


# -- JAX jit ------------------------------------------------------------------------------------
def _jax_loss_fn(key: str, d: dict[str, Any]) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def linear(p, name, x):
        return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    def ce(logits, y):  # y: int labels or probabilities
        logp = jax.nn.log_softmax(logits, axis=-1)
        if y.ndim == logits.ndim:
            return -jnp.mean(jnp.sum(y * logp, axis=-1))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def mse(a, b):
        return jnp.mean((a - b) ** 2)

    def conv(p, name, x, padding):
        out = lax.conv_general_dilated(
            x, p[f"{name}.weight"], (1, 1), [(padding, padding)] * 2,
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )
        return out + p[f"{name}.bias"][None, :, None, None]

    def pool2(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def layer_norm(p, name, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]

    def encoder_layer(p, pre, x, nhead, pad=None):  # post-norm, ReLU: PyTorch's defaults
        b, t, m = x.shape
        hd = m // nhead
        qkv = x @ p[f"{pre}self_attn.in_proj_weight"].T + p[f"{pre}self_attn.in_proj_bias"]
        q, k, v = (z.reshape(b, t, nhead, hd).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, -1))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)  # (B, H, T, T)
        if pad is not None:
            scores = jnp.where(pad[:, None, None, :], -jnp.inf, scores)
        att = jax.nn.softmax(scores, axis=-1) @ v  # (B, H, T, hd)
        att = linear(p, f"{pre}self_attn.out_proj", att.transpose(0, 2, 1, 3).reshape(b, t, m))
        x = layer_norm(p, f"{pre}norm1", x + att)
        ff = linear(p, f"{pre}linear2", jax.nn.relu(linear(p, f"{pre}linear1", x)))
        return layer_norm(p, f"{pre}norm2", x + ff)

    def normalize(x):
        return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    if key in "abg":
        n = len(d["sizes"]) - 1

        def mlp_loss(p, x, y):
            for i in range(n - 1):
                x = jax.nn.relu(linear(p, f"layers.{i}", x))
            x = linear(p, f"layers.{n - 1}", x)
            if d["out"] == "tanh":
                x = jnp.tanh(x)
            return ce(x, y) if d["loss"] == "ce" else mse(x, y)

        return mlp_loss
    if key == "c":

        def cnn_loss(p, x, y):
            x = pool2(jax.nn.relu(conv(p, "conv1", x, 0)))
            x = pool2(jax.nn.relu(conv(p, "conv2", x, 0)))
            return ce(linear(p, "fc", x.reshape(x.shape[0], -1)), y)

        return cnn_loss
    if key == "d":
        return lambda p, x, y: mse(encoder_layer(p, "", x, d["nhead"]), y)
    if key == "e":

        def clip_loss(p, images, ids, labels):
            x = jax.nn.relu(conv(p, "image.conv1", images, 1))
            x = pool2(jax.nn.relu(conv(p, "image.conv2", x, 1)))
            img = linear(p, "image.proj", x.reshape(x.shape[0], -1))
            pad = ids == 0
            h = p["text.tok.weight"][ids] + p["text.pos"]
            h = encoder_layer(p, "text.block.", h, d["heads"], pad)
            keep = (~pad).astype(h.dtype)[..., None]
            txt = linear(p, "text.proj", (h * keep).sum(1) / keep.sum(1))
            logits = jnp.exp(p["logit_scale"]) * (normalize(img) @ normalize(txt).T)
            same = (labels[:, None] == labels[None, :]).astype(logits.dtype)
            target = same / same.sum(1, keepdims=True)
            return (ce(logits, target) + ce(logits.T, target)) * 0.5

        return clip_loss
    raise KeyError(key)


def _build_jax(key, weights, batch, d) -> Bench:
    import jax
    import jax.numpy as jnp

    loss_fn = _jax_loss_fn(key, d)
    if key == "e":
        # padding_idx=0: the padding row of the embedding gets no gradient, as in PyTorch
        inner = loss_fn

        def loss_fn(p, images, ids, labels):
            p = {**p, "text.tok.weight": p["text.tok.weight"].at[0].set(
                jax.lax.stop_gradient(p["text.tok.weight"][0]))}
            return inner(p, images, ids, labels)

    @partial(jax.jit, donate_argnums=0)  # the old weights' buffers are reused, as in place
    def step(p, *batch):
        loss, g = jax.value_and_grad(loss_fn)(p, *batch)
        return jax.tree_util.tree_map(lambda w, gw: w - LR * gw, p, g), loss

    params = {k: jnp.asarray(v) for k, v in weights.items()}
    inputs = tuple(jnp.asarray(b) for b in batch)
    holder = [params]

    def run() -> Any:
        holder[0], loss = step(holder[0], *inputs)
        return loss

    def state() -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in holder[0].items()}

    return Bench("jax", key, run, lambda loss: float(loss.block_until_ready()), state)


# -- hand-written numpy ---------------------------------------------------------------------------
def _build_numpy(key, weights, batch, d) -> Bench:
    """Forward, backward and SGD by hand, in place where a careful numpy user would."""
    p = {k: v.copy() for k, v in weights.items()}
    x, y = batch
    n = len(d["sizes"]) - 1
    W = [p[f"layers.{i}.weight"] for i in range(n)]
    b = [p[f"layers.{i}.bias"] for i in range(n)]
    onehot = None
    if d["loss"] == "ce":
        onehot = np.zeros((len(y), d["sizes"][-1]), np.float32)
        onehot[np.arange(len(y)), y] = 1.0

    def run() -> float:
        acts = [x]  # inputs of each layer
        h = x
        for i in range(n):
            h = h @ W[i].T
            h += b[i]
            if i < n - 1:
                np.maximum(h, 0.0, out=h)
                acts.append(h)
        if d["loss"] == "ce":  # h: logits (B, C)
            z = h - h.max(1, keepdims=True)
            e = np.exp(z)
            s = e.sum(1, keepdims=True)
            loss = float(np.mean(np.log(s[:, 0]) - z[np.arange(len(y)), y]))
            g = e / s
            g -= onehot
            g *= 1.0 / len(y)
        else:
            out = np.tanh(h) if d["out"] == "tanh" else h
            diff = out - y
            loss = float(np.mean(diff * diff))
            g = diff * (2.0 / diff.size)
            if d["out"] == "tanh":
                g *= 1.0 - out * out
        for i in range(n - 1, -1, -1):
            gW = g.T @ acts[i]
            gb = g.sum(0)
            if i > 0:
                g = g @ W[i]
                g *= acts[i] > 0  # ReLU's gradient
            W[i] -= LR * gW
            b[i] -= LR * gb
        return loss

    return Bench("numpy", key, run, float, lambda: {k: v.copy() for k, v in p.items()})


def gemm_shapes(key: str = "g", tiny: bool = False) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """The matrix products one training step of an MLP workload needs, as (name, A, B) shapes.

    Three per linear layer (forward ``x @ W.T``, input gradient ``g @ W``, weight gradient
    ``g.T @ x``), less the first layer's input gradient, which no framework computes.
    """
    d = dims(key, tiny)
    s, n = d["sizes"], d["batch"]
    out = []
    for i, (a, b) in enumerate(pairwise(s)):
        out.append((f"forward {i}", (n, a), (a, b)))
        if i > 0:
            out.append((f"input grad {i}", (n, b), (b, a)))
        out.append((f"weight grad {i}", (b, n), (n, a)))
    return out


def gemm_flops(key: str = "g", tiny: bool = False) -> float:
    """Floating-point operations in ``gemm_shapes`` (2 M N K each)."""
    return float(sum(2 * a[0] * a[1] * b[1] for _, a, b in gemm_shapes(key, tiny)))


def numpy_gemm_step(key: str = "g", tiny: bool = False) -> Callable[[], None]:
    """numpy running exactly the products of one step, same layouts (transposed views as BLAS
    flags), into preallocated outputs: the raw GEMM rate the MLP step is measured against."""
    d = dims(key, tiny)
    rng = np.random.default_rng(SEED)
    s, n = d["sizes"], d["batch"]
    W = [rng.standard_normal((b, a)).astype(np.float32) for a, b in pairwise(s)]
    acts = [rng.standard_normal((n, a)).astype(np.float32) for a in s[:-1]]
    grads = [rng.standard_normal((n, b)).astype(np.float32) for b in s[1:]]
    outs = [np.empty((n, b), np.float32) for b in s[1:]]
    gin = [np.empty((n, a), np.float32) for a in s[:-1]]
    gw = [np.empty_like(w) for w in W]

    def run() -> None:
        for i in range(len(W)):
            np.matmul(acts[i], W[i].T, out=outs[i])
            if i > 0:
                np.matmul(grads[i], W[i], out=gin[i])
            np.matmul(grads[i].T, acts[i], out=gw[i])

    return run
