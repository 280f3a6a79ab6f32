"""Check tapegrad's CuPy backend on a CUDA GPU, time it against PyTorch, write docs/gpu.md.

    python tools/gpu_check.py                 # on a machine with an NVIDIA GPU and CuPy
    python tools/gpu_check.py --install       # pip install '.[cuda,test]' first if CuPy is missing
    python tools/gpu_check.py --device cpu --tiny --out /tmp/gpu.md   # the pipeline on the CPU

In one run, each part under its share of --budget seconds (360: the run fits 8 minutes):
  1. the op table (tests/op_specs.py): every row's forward and gradient on the device against
     the CPU, and its forward against PyTorch on the device;
  2. the layers: forward and parameter gradients on the device against the CPU and PyTorch,
     with weights copied from tapegrad's state_dict; float16 autocast on the device;
  3. training: the flagship example's model (examples/multimodal.py), DCGAN (examples/dcgan.py)
     and a nanoGPT-sized GPT (examples/char_lm.py), a few steps on the device and on the CPU
     from the same weights: the loss must fall on both;
  4. timing: one training step of each of the three (and the GPT under float16 autocast)
     against PyTorch eager on the same device
     (median of rounds; ratio = PyTorch's time / tapegrad's, 1.0 is parity) and peak memory
     (CuPy's memory pool, torch.cuda.max_memory_allocated).
Without CuPy or without a GPU it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "docs", "gpu.md")
# shares of the budget: op table, layers, training, timing
SHARES = {"ops": 0.35, "layers": 0.1, "training": 0.3, "timing": 0.25}


# -- probing and installing ------------------------------------------------------------------
def probe_cuda() -> str | None:
    """None when CuPy sees a GPU; else the reason, in a few words."""
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        return "CuPy is not installed (pip install '.[cuda,test]', or run with --install)"
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # noqa: BLE001  (CUDARuntimeError without a driver)
        return f"CuPy finds no CUDA driver ({type(e).__name__}: {e})"
    return None if n > 0 else "CuPy finds no CUDA device"


def install() -> str:
    """pip install the project's cuda and test extras into this interpreter; '' when it worked."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", f"{ROOT}[cuda,test]"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return "" if r.returncode == 0 else (r.stderr or r.stdout).strip().splitlines()[-1]


def gpu_name(device: str) -> str:
    if device != "cuda":
        return f"none (the CPU: {platform.processor() or platform.machine()})"
    try:
        q = "--query-gpu=name,memory.total,driver_version"
        out = subprocess.run(["nvidia-smi", q, "--format=csv,noheader"], capture_output=True,
                             text=True, check=True, timeout=20).stdout.strip().splitlines()
        if out:
            return f"{out[0]} (nvidia-smi: name, memory, driver)"
    except (OSError, subprocess.SubprocessError):
        pass
    import cupy  # noqa: PLC0415

    p = cupy.cuda.runtime.getDeviceProperties(0)
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    return f"{name}, {p['totalGlobalMem'] / 2**30:.0f} GiB (CuPy)"


# -- helpers ---------------------------------------------------------------------------------
class Clock:
    """A deadline per part, so that a slow part reports what it reached instead of overrunning."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.start = time.perf_counter()

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def until(self, share: float) -> float:
        return time.perf_counter() + max(share * self.budget, 5.0)


def sync(device: str) -> None:
    if device == "cuda":
        import cupy  # noqa: PLC0415

        cupy.cuda.Device().synchronize()


def torch_device(device: str) -> str | None:
    """PyTorch's device for the comparisons, None when PyTorch cannot run there."""
    import torch  # noqa: PLC0415

    if device == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else None


def close(a: np.ndarray, b: np.ndarray, tol: tuple[float, float]) -> str:
    """'' when equal within tol, else a short description of the worst element."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        return "" if np.array_equal(a, b) else "integer results differ"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ok = np.isclose(a64, b64, rtol=tol[0], atol=tol[1], equal_nan=True)
    if ok.all():
        return ""
    i = np.unravel_index(np.argmax(~ok), ok.shape)
    return f"{int((~ok).sum())}/{ok.size} differ, e.g. {a64[i]:.6g} vs {b64[i]:.6g}"


def error(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" at {os.path.relpath(last.filename, ROOT)}:{last.lineno}" if last else ""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}{where}"


def load_example(name: str) -> Any:
    path = os.path.join(ROOT, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


# -- 1. the op table -------------------------------------------------------------------------
def run_op_table(device: str, deadline: float, limit: int | None) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from op_specs import F32, F64, SPECS  # noqa: PLC0415

    import tapegrad as tg  # noqa: PLC0415

    tdev = torch_device(device)
    rows: list[dict[str, Any]] = []
    specs = SPECS[:limit] if limit else SPECS
    for spec in specs:
        if time.perf_counter() > deadline:
            rows.append({"name": spec.name, "status": "not run (time budget)"})
            continue
        dtype = F32 if F32 in spec.dtypes else spec.dtypes[0]
        tol = spec.tol64 if dtype == F64 else (
            (max(spec.tol32[0], 1e-4), max(spec.tol32[1], 1e-5)))  # GPU reductions reorder sums
        row: dict[str, Any] = {"name": spec.name, "dtype": dtype}
        try:
            arrays = spec.inputs(dtype)
            diff = spec.diff(arrays)
            cot = None

            def run(dev: str, arrays: list[np.ndarray] = arrays, diff: list[int] = diff) -> Any:
                nonlocal cot
                xs = [tg.tensor(a, device=dev) for a in arrays]
                with tg.Tape() as tape:
                    tape.watch(*[xs[i] for i in diff])
                    y = spec.fn(*xs)
                if cot is None:
                    cot = np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype)
                gs = []
                if diff and tg._dtypes.is_float(y.dtype):
                    gs = tape.gradient(y, [xs[i] for i in diff],
                                       output_gradients=tg.tensor(cot, device=dev))
                return y.numpy(), [g.numpy() for g in gs]

            y_cpu, g_cpu = run("cpu")
            y_dev, g_dev = run(device)
            problems = [close(y_dev, y_cpu, tol) and f"forward vs CPU: {close(y_dev, y_cpu, tol)}"]
            gtol = (max(tol[0], 1e-4) * 10, max(tol[1], 1e-5) * 10)
            problems += [close(a, b, gtol) and f"gradient {i} vs CPU: {close(a, b, gtol)}"
                         for i, (a, b) in enumerate(zip(g_dev, g_cpu, strict=True))]
            if tdev is not None:
                want = spec.ref(*[torch.from_numpy(a.copy()).to(tdev) for a in arrays])
                w = want.detach().cpu().numpy()
                problems.append(close(y_dev, w, tol) and f"forward vs PyTorch: {close(y_dev, w, tol)}")
            bad = [p for p in problems if p]
            row["status"] = "pass" if not bad else "fail: " + "; ".join(bad)
        except Exception as e:  # noqa: BLE001  (a row's failure is reported, not raised)
            row["status"] = "error: " + error(e)
        rows.append(row)
    return {"rows": rows, "torch_device": tdev}


# -- 2. layers -------------------------------------------------------------------------------
def _layer_cases(tiny: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any], Any]]:
    import torch  # noqa: PLC0415

    import tapegrad as tg  # noqa: PLC0415

    n = 4 if tiny else 32
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    tn, gn = torch.nn, tg.nn
    return [
        ("Linear", lambda: gn.Linear(64, 32), lambda: tn.Linear(64, 32), f(n, 64)),
        ("Conv2d", lambda: gn.Conv2d(3, 8, 3, padding=1), lambda: tn.Conv2d(3, 8, 3, padding=1),
         f(n, 3, 16, 16)),
        ("Conv2d stride 2", lambda: gn.Conv2d(8, 16, 4, 2, 1), lambda: tn.Conv2d(8, 16, 4, 2, 1),
         f(n, 8, 16, 16)),
        ("ConvTranspose2d", lambda: gn.ConvTranspose2d(8, 4, 4, 2, 1),
         lambda: tn.ConvTranspose2d(8, 4, 4, 2, 1), f(n, 8, 8, 8)),
        ("BatchNorm2d", lambda: gn.BatchNorm2d(8), lambda: tn.BatchNorm2d(8), f(n, 8, 6, 6)),
        ("LayerNorm", lambda: gn.LayerNorm(48), lambda: tn.LayerNorm(48), f(n, 10, 48)),
        ("Embedding", lambda: gn.Embedding(50, 16), lambda: tn.Embedding(50, 16),
         r.integers(0, 50, (n, 7))),
        ("MaxPool2d", lambda: gn.MaxPool2d(2), lambda: tn.MaxPool2d(2), f(n, 3, 8, 8)),
        ("GELU", lambda: gn.GELU(approximate="tanh"), lambda: tn.GELU(approximate="tanh"),
         f(n, 40)),
        ("TransformerEncoderLayer",
         lambda: gn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
         lambda: tn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
         f(n, 9, 32)),
        ("LSTM", lambda: gn.LSTM(12, 16, batch_first=True),
         lambda: tn.LSTM(12, 16, batch_first=True), f(n, 5, 12)),
    ]


def run_layers(device: str, deadline: float, tiny: bool) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    import tapegrad as tg  # noqa: PLC0415

    tdev = torch_device(device)
    rows = []
    first = lambda y: y[0] if isinstance(y, tuple) else y
    for name, make, make_torch, x in _layer_cases(tiny):
        if time.perf_counter() > deadline:
            rows.append({"name": name, "status": "not run (time budget)"})
            continue
        try:
            tg.manual_seed(0)
            m = make()

            def run(dev: str, m: Any = m, x: np.ndarray = x) -> tuple[np.ndarray, dict]:
                m.to(dev)
                xt = tg.tensor(x, device=dev)
                with tg.Tape() as tape:
                    if x.dtype.kind == "f":
                        tape.watch(xt)
                    y = first(m(xt))
                    loss = (y * y).mean()
                g = tape.gradient(loss)
                named = g.named(m)
                if x.dtype.kind == "f":
                    named["input"] = g[xt].numpy()
                return y.numpy(), named

            y_cpu, g_cpu = run("cpu")
            y_dev, g_dev = run(device)
            tol = (1e-4, 1e-5)
            bad = [close(y_dev, y_cpu, tol) and f"forward vs CPU: {close(y_dev, y_cpu, tol)}"]
            bad += [close(g_dev[k], g_cpu[k], (1e-3, 1e-4)) and f"grad {k} vs CPU"
                    for k in g_cpu]
            if tdev is not None:
                tm = make_torch().to(tdev)
                tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in
                                    m.to("cpu").state_dict().items()})
                tx = torch.tensor(x).to(tdev)
                w = first(tm(tx)).detach().cpu().numpy()
                bad.append(close(y_dev, w, tol) and f"forward vs PyTorch: {close(y_dev, w, tol)}")
            bad = [b for b in bad if b]
            rows.append({"name": name, "status": "pass" if not bad else "fail: " + "; ".join(bad)})
        except Exception as e:  # noqa: BLE001
            rows.append({"name": name, "status": "error: " + error(e)})
    # float16 autocast: the GPU fast path (bfloat16 on the CPU, which has no float16 GEMM path)
    try:
        low = tg.float16 if device == "cuda" else tg.bfloat16
        lin = tg.nn.Linear(256, 128).to(device)
        xx = tg.tensor(np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32),
                       device=device)
        with tg.Tape() as tape, tg.autocast(low):
            y = lin(xx)
            loss = (y.astype(tg.float32) ** 2).mean()
        g = tape.gradient(loss, lin)
        ref = tg.nn.functional.linear(xx, lin.weight, lin.bias).numpy()
        err = float(np.abs(y.numpy().astype(np.float32) - ref).max() / np.abs(ref).max())
        ok = y.dtype == low and g[lin.weight].dtype == tg.float32 and err < 2e-2
        rows.append({"name": f"Linear under autocast({low})",
                     "status": "pass" if ok else f"fail: dtype {y.dtype}, relative error {err:.2g}"})
    except Exception as e:  # noqa: BLE001
        rows.append({"name": "Linear under autocast", "status": "error: " + error(e)})
    return {"rows": rows}


# -- 3 and 4. the three models, tapegrad and PyTorch -----------------------------------------
class Workload:
    """One model's training step in tapegrad and in PyTorch, on a device, from fixed batches."""

    name: str
    tg_step: Callable[[], float]
    torch_step: Callable[[], float] | None
    params: int


def _digits(n: int) -> tuple[np.ndarray, np.ndarray]:
    import tapegrad as tg  # noqa: PLC0415

    try:
        images, labels = tg.data.load_digits(return_arrays=True)
        return np.asarray(images, np.float32)[:n], np.asarray(labels)[:n]
    except ImportError:  # no scikit-learn: class prototypes plus noise, the same shapes
        r = np.random.default_rng(0)
        protos = r.uniform(0, 1, (10, 1, 8, 8)).astype(np.float32)
        labels = r.integers(0, 10, n)
        return np.clip(protos[labels] + 0.1 * r.standard_normal((n, 1, 8, 8)), 0, 1).astype(
            np.float32), labels


def multimodal(device: str, tdev: str | None, size: str) -> Workload:
    import tapegrad as tg  # noqa: PLC0415
    import tapegrad.nn.functional as F  # noqa: PLC0415

    mm = load_example("multimodal")
    cfg = mm.Config()
    cfg.batch_size = 16 if size == "tiny" else cfg.batch_size
    images, labels = _digits(cfg.batch_size)
    rng = np.random.default_rng(0)
    vocab = mm.Vocab([mm.caption(c, t, rng) for t in mm.TRAIN_TEMPLATES for c in range(10)])
    ids = np.stack([vocab.encode(mm.caption(int(c), mm.TRAIN_TEMPLATES[0], rng), cfg.max_len)
                    for c in labels])
    same = (labels[:, None] == labels[None, :]).astype(np.float32)
    target = same / same.sum(axis=1, keepdims=True)
    tg.manual_seed(0)
    model = mm.CLIP(cfg, len(vocab)).to(device)
    opt = tg.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    x, t, tt = (tg.tensor(a, device=device) for a in (images, ids, target))

    def step() -> float:
        with tg.Tape() as tape:
            logits = model(x, t)
            loss = (F.cross_entropy(logits, tt) + F.cross_entropy(logits.T, tt)) * 0.5
        opt.step(tape.gradient(loss, model).clip_by_global_norm(5.0))
        return loss.item()

    w = Workload()
    w.name, w.tg_step, w.params = "multimodal (CLIP on digits)", step, model.num_parameters()
    w.torch_step = None if tdev is None else _torch_clip(cfg, len(vocab), images, ids, target, tdev)
    return w


def _torch_clip(cfg: Any, vocab_size: int, images: np.ndarray, ids: np.ndarray,
                target: np.ndarray, dev: str) -> Callable[[], float]:
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    tF = torch.nn.functional

    class CLIP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.iproj = nn.Linear(512, cfg.embed_dim)
            self.tok = nn.Embedding(vocab_size, cfg.text_dim, padding_idx=0)
            self.pos = nn.Parameter(torch.randn(cfg.max_len, cfg.text_dim) * 0.02)
            self.block = nn.TransformerEncoderLayer(cfg.text_dim, cfg.heads, 2 * cfg.text_dim,
                                                    dropout=0.0, batch_first=True)
            self.tproj = nn.Linear(cfg.text_dim, cfg.embed_dim)
            self.logit_scale = nn.Parameter(torch.tensor(float(np.log(10.0))))

        def forward(self, x: Any, t: Any) -> Any:
            h = tF.max_pool2d(tF.relu(self.conv2(tF.relu(self.conv1(x)))), 2)
            a = tF.normalize(self.iproj(h.flatten(1)), dim=-1)
            pad = t == 0
            e = self.block(self.tok(t) + self.pos, src_key_padding_mask=pad)
            keep = (~pad).float()[..., None]
            b = tF.normalize(self.tproj((e * keep).sum(1) / keep.sum(1)), dim=-1)
            return self.logit_scale.exp() * (a @ b.T)

    model = CLIP().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    x, t, tt = (torch.tensor(a).to(dev) for a in (images, ids, target))

    def step() -> float:
        opt.zero_grad()
        logits = model(x, t)
        loss = (tF.cross_entropy(logits, tt) + tF.cross_entropy(logits.T, tt)) * 0.5
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return loss.item()

    return step


def dcgan(device: str, tdev: str | None, size: str) -> Workload:
    import tapegrad as tg  # noqa: PLC0415

    dc = load_example("dcgan")
    nz, ngf, ndf, batch = {"tiny": (16, 8, 8, 4), "medium": (64, 16, 16, 16),
                           "full": (100, 64, 64, 64)}[size]
    real = dc.generated_images(batch, 64, seed=0).astype(np.float32)
    noise = np.random.default_rng(0).standard_normal((batch, nz, 1, 1)).astype(np.float32)
    tg.manual_seed(0)
    netG, netD = dc.Generator(nz, ngf, 3).to(device), dc.Discriminator(ndf, 3).to(device)
    netG.apply(dc.weights_init)
    netD.apply(dc.weights_init)
    optD = tg.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = tg.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    crit = tg.nn.BCELoss()
    x, z = tg.tensor(real, device=device), tg.tensor(noise, device=device)

    ones = tg.ones(batch, device=device)
    zeros = tg.zeros(batch, device=device)

    def step() -> float:  # examples/dcgan.py's train_step with its labels on the device
        with tg.Tape(watch_parameters=False) as tape_d:
            tape_d.watch(netD)
            err_real = crit(netD(x), ones)
        grads_d = tape_d.gradient(err_real, netD)
        with tg.Tape(watch_parameters=False) as tape_g:
            tape_g.watch(netG)
            fake = netG(z)
            with tg.Tape(watch_parameters=False) as tape_d:
                tape_d.watch(netD)
                err_fake = crit(netD(fake.detach()), zeros)
            optD.step(grads_d + tape_d.gradient(err_fake, netD))
            err_g = crit(netD(fake), ones)
        optG.step(tape_g.gradient(err_g, netG))
        return err_real.item()  # D's loss on the real batch: it falls as D learns

    w = Workload()
    w.name, w.tg_step = f"DCGAN (64x64, ngf {ngf}, batch {batch})", step
    w.params = netG.num_parameters() + netD.num_parameters()
    w.torch_step = None if tdev is None else _torch_dcgan(nz, ngf, ndf, real, noise, tdev)
    return w


def _torch_dcgan(nz: int, ngf: int, ndf: int, real: np.ndarray, noise: np.ndarray,
                 dev: str) -> Callable[[], float]:
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    def up(i: int, o: int, s: int, p: int, last: bool = False) -> list[Any]:
        return [nn.ConvTranspose2d(i, o, 4, s, p, bias=False)] + (
            [nn.Tanh()] if last else [nn.BatchNorm2d(o), nn.ReLU(True)])

    def down(i: int, o: int, bn: bool = True) -> list[Any]:
        return [nn.Conv2d(i, o, 4, 2, 1, bias=False)] + ([nn.BatchNorm2d(o)] if bn else []) + [
            nn.LeakyReLU(0.2, True)]

    G = nn.Sequential(*up(nz, ngf * 8, 1, 0), *up(ngf * 8, ngf * 4, 2, 1),
                      *up(ngf * 4, ngf * 2, 2, 1), *up(ngf * 2, ngf, 2, 1),
                      *up(ngf, 3, 2, 1, last=True)).to(dev)
    D = nn.Sequential(*down(3, ndf, bn=False), *down(ndf, ndf * 2), *down(ndf * 2, ndf * 4),
                      *down(ndf * 4, ndf * 8), nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
                      nn.Sigmoid()).to(dev)
    optD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    crit = nn.BCELoss()
    x, z = torch.tensor(real).to(dev), torch.tensor(noise).to(dev)
    ones, zeros = torch.ones(len(real), device=dev), torch.zeros(len(real), device=dev)

    def step() -> float:
        D.zero_grad()
        errD_real = crit(D(x).view(-1), ones)
        errD_real.backward()
        fake = G(z)
        errD_fake = crit(D(fake.detach()).view(-1), zeros)
        errD_fake.backward()
        optD.step()
        G.zero_grad()
        errG = crit(D(fake).view(-1), ones)
        errG.backward()
        optG.step()
        return errD_real.item()

    return step


def nanogpt(device: str, tdev: str | None, size: str) -> Workload:
    import tapegrad as tg  # noqa: PLC0415
    import tapegrad.nn.functional as F  # noqa: PLC0415

    cl = load_example("char_lm")
    cfg = cl.Config()
    # nanoGPT's shakespeare_char size (6 layers, 6 heads, 384 wide, 256 context), batch 32
    cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.batch_size = {
        "tiny": (1, 2, 16, 8, 2), "medium": (2, 4, 128, 64, 8), "full": (6, 6, 384, 256, 32)
    }[size]
    vocab = 65
    r = np.random.default_rng(0)
    text = np.tile(r.integers(0, vocab, 97), 50)  # a repeating sequence: learnable
    start = r.integers(0, len(text) - cfg.block_size - 1, cfg.batch_size)
    idx = start[:, None] + np.arange(cfg.block_size)
    xi, yi = text[idx], text[idx + 1]
    class GPT(cl.GPT):  # the example's, with its position indices on the model's device
        def forward(self, ids: tg.Tensor) -> tg.Tensor:
            pos = tg.arange(ids.shape[1], device=ids.device)
            x = self.drop(self.wte(ids) + self.wpe(pos))  # (B, T, C)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    tg.manual_seed(0)
    model = GPT(cfg, vocab).to(device)
    opt = tg.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x, y = tg.tensor(xi, device=device), tg.tensor(yi, device=device)

    def step() -> float:
        with tg.Tape() as tape:
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.step(tape.gradient(loss, model).clip_by_global_norm(1.0))
        return loss.item()

    w = Workload()
    w.name = f"nanoGPT-sized ({cfg.n_layer}x{cfg.n_embd}, T={cfg.block_size}, B={cfg.batch_size})"
    w.tg_step, w.params = step, model.num_parameters()
    w.torch_step = None if tdev is None else _torch_gpt(cfg, vocab, xi, yi, tdev)
    return w


def _torch_gpt(cfg: Any, vocab: int, xi: np.ndarray, yi: np.ndarray,
               dev: str) -> Callable[[], float]:
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    tF = torch.nn.functional
    C, H = cfg.n_embd, cfg.n_head

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * C, C))

        def forward(self, x: Any) -> Any:
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
            heads = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
            a = tF.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
            x = x + self.c_proj(a.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, C), nn.Embedding(cfg.block_size, C)
            self.h = nn.ModuleList([Block() for _ in range(cfg.n_layer)])
            self.ln_f, self.lm_head = nn.LayerNorm(C), nn.Linear(C, vocab)

        def forward(self, ids: Any) -> Any:
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
            for b in self.h:
                x = b(x)
            return self.lm_head(self.ln_f(x))

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x, y = torch.tensor(xi).to(dev), torch.tensor(yi).to(dev)

    def step() -> float:
        opt.zero_grad()
        loss = tF.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    return step


def nanogpt_autocast(device: str, tdev: str | None, size: str) -> Workload:
    """The GPT's step under autocast: float16 on the GPU (the fast path), bfloat16 on the CPU;
    PyTorch under its autocast with the same dtype."""
    import torch  # noqa: PLC0415

    import tapegrad as tg  # noqa: PLC0415

    w = nanogpt(device, tdev, size)
    low, tlow = (tg.float16, torch.float16) if device == "cuda" else (tg.bfloat16, torch.bfloat16)
    tg_step, torch_step = w.tg_step, w.torch_step

    def step() -> float:
        with tg.autocast(low):
            return tg_step()

    def tstep() -> float:
        assert torch_step is not None
        with torch.autocast("cuda" if tdev == "cuda" else "cpu", dtype=tlow):
            return torch_step()

    w.name = f"{w.name}, autocast({low})"
    w.tg_step, w.torch_step = step, None if torch_step is None else tstep
    return w


WORKLOADS = [multimodal, dcgan, nanogpt]
TIMED = [*WORKLOADS, nanogpt_autocast]


def run_training(device: str, deadline: float, tiny: bool) -> dict[str, Any]:
    """A few steps of each model on the device (its loss must fall) and the first three on the
    CPU from the same seed (the device's losses must match them)."""
    steps = 3 if tiny else 12
    rows = []
    for make in WORKLOADS:
        row: dict[str, Any] = {"name": make.__name__}
        for dev in (device, "cpu") if device != "cpu" else ("cpu",):
            if time.perf_counter() > deadline:
                row.setdefault("status", "not run (time budget)")
                break
            try:
                w = make(dev, None, "tiny" if tiny else "medium")
                row["name"] = w.name
                losses = []
                for _ in range(steps if dev == device else 3):
                    losses.append(w.tg_step())
                    if time.perf_counter() > deadline:
                        break
                row[dev] = losses
            except Exception as e:  # noqa: BLE001
                row["status"] = f"error on {dev}: " + error(e)
                break
        if "status" not in row and len(row.get(device, ())) < 2:
            row["status"] = "not run (time budget): fewer than 2 steps"
        if "status" not in row:
            falls = row[device][-1] < row[device][0]
            gap = ""
            if device != "cpu" and "cpu" in row:
                n = min(len(row["cpu"]), len(row[device]))
                gap = close(np.array(row[device][:n]), np.array(row["cpu"][:n]), (5e-2, 1e-3))
            row["status"] = "pass" if falls and not gap else "fail: " + "; ".join(
                ([] if falls else ["the loss did not fall"]) + ([f"device vs CPU: {gap}"] if gap
                                                                 else []))
        rows.append(row)
    return {"rows": rows, "steps": steps}


def _median_step(step: Callable[[], float], device: str, rounds: int, per: int,
                 deadline: float) -> tuple[float, list[float]]:
    """The median step time over rounds, after two warm-up steps; and every step's loss."""
    losses = [step(), step()]  # warm up: kernel compiles, memory pool
    times = []
    for _ in range(rounds):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(per):
            losses.append(step())
        sync(device)
        times.append((time.perf_counter() - t0) / per)
        if time.perf_counter() > deadline:
            break
    return statistics.median(times), losses


def run_timing(device: str, deadline: float, tiny: bool) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    tdev = torch_device(device)
    rounds, per = (2, 1) if tiny else (5, 3)
    rows = []
    for make in TIMED:
        row: dict[str, Any] = {"name": make.__name__}
        if time.perf_counter() > deadline:
            row["status"] = "not run (time budget)"
            rows.append(row)
            continue
        try:
            w = make(device, tdev, "tiny" if tiny else "full")
            row["name"], row["params"] = w.name, w.params
            pool = None
            if device == "cuda":
                import cupy  # noqa: PLC0415

                pool = cupy.get_default_memory_pool()
                pool.free_all_blocks()
            ms, losses = _median_step(w.tg_step, device, rounds, per, deadline)
            row["tapegrad_ms"], row["losses"] = 1e3 * ms, losses
            if pool is not None:  # the pool keeps freed blocks: its size is the peak it needed
                row["tapegrad_mib"] = pool.total_bytes() / 2**20
            if w.torch_step is not None:
                if tdev == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                row["torch_ms"] = 1e3 * _median_step(w.torch_step, tdev or "cpu", rounds, per,
                                                     deadline + 30)[0]
                if tdev == "cuda":
                    row["torch_mib"] = torch.cuda.max_memory_allocated() / 2**20
                row["ratio"] = row["torch_ms"] / row["tapegrad_ms"]
            row["status"] = "measured"
        except Exception as e:  # noqa: BLE001
            row["status"] = "error: " + error(e)
        rows.append(row)
    return {"rows": rows, "rounds": rounds, "per": per, "torch_device": tdev}


# -- the report ------------------------------------------------------------------------------
def _count(rows: list[dict[str, Any]]) -> str:
    n = len(rows)
    ok = sum(r.get("status") in ("pass", "measured") for r in rows)
    skipped = sum(str(r.get("status", "")).startswith("not run") for r in rows)
    return f"{ok}/{n} pass" + (f", {skipped} not run (time budget)" if skipped else "")


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def write_report(results: dict[str, Any], path: str) -> str:
    """The markdown report; returns its text."""
    env, parts = results["env"], results
    lines = [
        "# tapegrad on a GPU",
        "",
        "Written by `python tools/gpu_check.py` (see the script's docstring for what each part "
        "checks). Rerun it on a CUDA machine to refresh this page.",
        "",
        f"- GPU: {env['gpu']}",
        f"- device checked: `{env['device']}`; PyTorch {env['torch']} on "
        f"`{env['torch_device'] or 'none'}`; CuPy {env['cupy']}; tapegrad {env['tapegrad']}",
        f"- date: {env['date']}; wall time {env['seconds']:.0f} s of a {env['budget']:.0f} s "
        "budget",
        "",
        "## Summary",
        "",
        "| part | result |",
        "| --- | --- |",
    ]
    for key, title in (("ops", "op table"), ("layers", "layers"), ("training", "training"),
                       ("timing", "timing")):
        p = parts.get(key, {})
        lines.append(f"| {title} | {p['error'] if 'error' in p else _count(p.get('rows', []))} |")
    t = parts.get("timing", {})
    lines += ["", "## Step time against PyTorch eager", "",
              f"Median of {t.get('rounds', 0)} rounds of {t.get('per', 0)} steps, after two "
              "warm-up steps. ratio = PyTorch's step time / tapegrad's (1.0 is parity, above 1 "
              "tapegrad is faster). Memory: CuPy's pool size after the steps (the peak it "
              "needed) and `torch.cuda.max_memory_allocated`.", "",
              "| model | parameters | tapegrad loss (first, last) | tapegrad ms | PyTorch ms | "
              "ratio | tapegrad MiB | PyTorch MiB | status |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in t.get("rows", []):
        fl = f"{r['losses'][0]:.4f}, {r['losses'][-1]:.4f}" if r.get("losses") else "n/a"
        lines.append(
            f"| {r['name']} | {r.get('params', 'n/a')} | {fl} | {_fmt(r.get('tapegrad_ms'))} | "
            f"{_fmt(r.get('torch_ms'))} | {_fmt(r.get('ratio'), '.2f')} | "
            f"{_fmt(r.get('tapegrad_mib'), '.0f')} | {_fmt(r.get('torch_mib'), '.0f')} | "
            f"{r['status']} |")
    tr = parts.get("training", {})
    lines += ["", "## Training: the loss falls on the device as on the CPU", "",
              f"{tr.get('steps', 0)} steps on the device, from the same seed and batch as 3 "
              "steps on the CPU, whose losses the device's must match (5%). Medium sizes here "
              "(the CPU is slow at the full ones); DCGAN's loss is the discriminator's on the "
              "real batch.", "",
              "| model | device losses (first, last) | CPU losses (first, last) | status |",
              "| --- | --- | --- | --- |"]
    dev = env["device"]
    for r in tr.get("rows", []):
        fl = lambda k, r=r: (f"{r[k][0]:.4f}, {r[k][-1]:.4f}" if r.get(k) else "n/a")
        lines.append(f"| {r['name']} | {fl(dev)} | {fl('cpu')} | {r['status']} |")
    for key, title in (("layers", "Layers"), ("ops", "Op table")):
        rows = parts.get(key, {}).get("rows", [])
        bad = [r for r in rows if r.get("status") != "pass"]
        lines += ["", f"## {title}: {_count(rows)}", ""]
        if key == "layers":
            lines += ["| layer | status |", "| --- | --- |"]
            lines += [f"| {r['name']} | {r['status']} |" for r in rows]
        elif bad:
            lines += ["Rows that did not pass:", "", "| row | status |", "| --- | --- |"]
            lines += [f"| {r['name']} | {r['status'].replace('|', '/')} |" for r in bad]
        else:
            lines.append("Every row passed.")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return text


# -- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--install", action="store_true",
                    help="pip install '.[cuda,test]' when CuPy is missing")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu runs the same pipeline on the CPU (for the script's own test)")
    ap.add_argument("--tiny", action="store_true", help="a few rows and tiny models")
    ap.add_argument("--budget", type=float, default=360.0,
                    help="seconds for the four parts (the run adds start-up and one step past each)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="the markdown report")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--numba", action="store_true",
                    help="CPU references through the compiled kernels (default: the numpy "
                    "reference kernels, which need no compile time)")
    a = ap.parse_args(argv)
    if not a.numba:
        os.environ.setdefault("TAPEGRAD_KERNELS", "numpy")

    if a.device == "cuda":
        why = probe_cuda()
        if why is not None and a.install and why.startswith("CuPy is not installed"):
            failed = install()
            why = f"pip install failed ({failed})" if failed else probe_cuda()
        if why is not None:
            print(f"gpu_check: skipped: {why}")
            return 0

    import torch  # noqa: PLC0415

    import tapegrad as tg  # noqa: PLC0415

    clock = Clock(a.budget)
    cupy_version = "n/a"
    if a.device == "cuda":
        import cupy  # noqa: PLC0415

        cupy_version = cupy.__version__
    results: dict[str, Any] = {"env": {
        "gpu": gpu_name(a.device), "device": a.device, "torch": torch.__version__,
        "torch_device": torch_device(a.device), "cupy": cupy_version,
        "tapegrad": tg.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "budget": a.budget,
    }}
    parts: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("ops", lambda: run_op_table(a.device, clock.until(SHARES["ops"]), 12 if a.tiny else None)),
        ("layers", lambda: run_layers(a.device, clock.until(SHARES["layers"]), a.tiny)),
        ("training", lambda: run_training(a.device, clock.until(SHARES["training"]), a.tiny)),
        ("timing", lambda: run_timing(a.device, clock.until(SHARES["timing"]), a.tiny)),
    ]
    for key, run in parts:
        t0 = time.perf_counter()
        try:
            results[key] = run()
        except Exception as e:  # noqa: BLE001  (one part's crash leaves the others to run)
            results[key] = {"error": "error: " + error(e), "rows": []}
        print(f"gpu_check: {key}: {_count(results[key].get('rows', []))} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    results["env"]["seconds"] = time.perf_counter() - clock.start
    write_report(results, a.out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(f"gpu_check: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
