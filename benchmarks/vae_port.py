"""examples/vae.py beside pytorch/examples' VAE: training steps per second, side by side.

    python benchmarks/vae_port.py [--rounds 7] [--steps 20]

Both train from the same initial weights on the same batches of 128 (the port's 28x28 digits),
the original's step: forward, BCE + KLD, backward, Adam. Rounds alternate between tapegrad
eager, tapegrad's tg.compile and PyTorch eager, each timing --steps steps; a ratio is
tapegrad's steps/s over PyTorch's within a round, and the figure printed is their median.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import numpy as np

import tapegrad as tg

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_port():
    path = os.path.join(HERE, "..", "examples", "vae.py")
    spec = importlib.util.spec_from_file_location("examples_vae", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _torch_step_fn(state: dict, batches: list[np.ndarray]):
    import torch

    if HERE not in sys.path:  # originals.py beside this file (imported as a module elsewhere)
        sys.path.insert(0, HERE)
    from originals import VAE  # pytorch/examples vae/main.py
    from originals import vae_loss_function as loss_function

    model = VAE()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(state[name]))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = [torch.from_numpy(b) for b in batches]

    def step(i: int) -> None:
        x = data[i % len(data)]
        optimizer.zero_grad()
        recon, mu, logvar = model(x)
        loss_function(recon, x, mu, logvar).backward()
        optimizer.step()

    return step


def _tapegrad_step_fn(port, state: dict, batches: list[np.ndarray], compiled: bool):
    model = port.VAE()
    model.load_state_dict({k: tg.tensor(v) for k, v in state.items()})
    optimizer = tg.optim.Adam(model.parameters(), lr=1e-3)
    data = [tg.tensor(b) for b in batches]

    def loss_of(x):
        recon, mu, logvar = model(x)
        return port.loss_function(recon, x, mu, logvar)

    if compiled:
        run = tg.compile(loss_of, model, optimizer)
    else:
        def run(x):
            with tg.Tape() as tape:
                loss = loss_of(x)
            optimizer.step(tape.gradient(loss, model))

    return lambda i: run(data[i % len(data)])


def main(rounds: int = 7, steps: int = 20) -> dict:
    import torch
    from threadpoolctl import threadpool_info

    torch.set_num_threads(max(1, threadpool_info()[0]["num_threads"]) if threadpool_info() else 1)
    port = _load_port()
    images, _ = port.digits_28x28()
    rng = np.random.default_rng(0)
    batches = [images[rng.choice(len(images), 128, replace=False)] for _ in range(8)]
    tg.manual_seed(1)
    state = {k: v.numpy().copy() for k, v in port.VAE().state_dict().items()}
    fns = {
        "tapegrad": _tapegrad_step_fn(port, state, batches, compiled=False),
        "tapegrad-compiled": _tapegrad_step_fn(port, state, batches, compiled=True),
        "torch": _torch_step_fn(state, batches),
    }
    for fn in fns.values():  # warm-up (tg.compile captures on its first two calls)
        for i in range(3):
            fn(i)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for i in range(steps):
                fn(i)
            times[name].append((time.perf_counter() - t0) / steps)
    ratios = {
        k: statistics.median(t / a for t, a in zip(times["torch"], times[k], strict=True))
        for k in ("tapegrad", "tapegrad-compiled")
    }
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print("VAE step (batch 128), ms:", ", ".join(f"{k} {v:.2f}" for k, v in ms.items()))
    for k, r in ratios.items():
        print(f"{k} steps/s over PyTorch's (median of {rounds} within-round ratios): {r:.2f}x")
    return {"ms": ms, "ratios": ratios}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    main(a.rounds, a.steps)
