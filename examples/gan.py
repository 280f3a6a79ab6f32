"""A GAN with two tapes open at once: one for the generator, one for the discriminator.

    python examples/gan.py            # full run
    python examples/gan.py --small    # a few seconds, for tests

The data is a ring of 8 Gaussians in 2-D (radius 2, std 0.02), the classic test of mode
collapse. Each step runs one forward pass under two tapes: the generator's parameters are
watched on one, the discriminator's on the other, and each tape is asked for the gradient of its
own model's loss. No `detach()`, no `zero_grad()`, no toggling of `requires_grad`. The
discriminator judges samples in pairs (PacGAN, Lin et al. 2018), which keeps this plain GAN from
collapsing onto one or two modes. Reports how many of the 8 modes the generator covers and how
far its samples are from the nearest mode; writes a checkpoint and samples.png (generated points
over the real data, at a few moments of training) into --out (runs/gan).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    steps: int = 4000         # one generator and one discriminator update each
    batch_size: int = 256
    lr: float = 1e-3          # Adam, both models, decaying linearly to 0
    beta1: float = 0.5        # the usual GAN momentum
    pack: int = 2             # PacGAN: the discriminator judges `pack` samples at once
    latent: int = 8           # generator noise size
    hidden: int = 128
    radius: float = 2.0       # the ring of modes
    std: float = 0.02         # each mode's standard deviation
    modes: int = 8
    cover_share: float = 0.02  # a mode is covered if >= this share of samples is within 3 std
    eval_samples: int = 2500
    snapshots: int = 4        # panels in samples.png
    seed: int = 0
    out: str = "runs/gan"


# --small (and the tests): a few seconds; wider modes and a smaller model learn in 1000 steps
SMALL = {"steps": 1000, "std": 0.1, "lr": 2e-3, "hidden": 64, "batch_size": 128,
         "eval_samples": 1000}


def ring_centers(cfg: Config) -> np.ndarray:
    angles = 2 * np.pi * np.arange(cfg.modes) / cfg.modes
    return cfg.radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)  # (modes, 2)


def sample_real(cfg: Config, n: int, rng: np.random.Generator) -> np.ndarray:
    centers = ring_centers(cfg)
    k = rng.integers(cfg.modes, size=n)
    return (centers[k] + cfg.std * rng.standard_normal((n, 2))).astype(np.float32)  # (n, 2)


def mlp(n_in: int, hidden: int, n_out: int, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_in, hidden), act(),
        nn.Linear(hidden, hidden), act(),
        nn.Linear(hidden, n_out),
    )


def mode_metrics(points: np.ndarray, cfg: Config) -> dict[str, float]:
    """Modes covered (>= cover_share of the points within 3 std), the share of points within
    3 std of some mode, and the mean distance to the nearest mode centre."""
    d = np.linalg.norm(points[:, None, :] - ring_centers(cfg)[None], axis=-1)  # (n, modes)
    nearest, dist = d.argmin(axis=1), d.min(axis=1)
    close = dist <= 3 * cfg.std
    share = np.bincount(nearest[close], minlength=cfg.modes) / len(points)
    return {"modes_covered": int((share >= cfg.cover_share).sum()),
            "high_quality": float(close.mean()),
            "mean_distance": float(dist.mean())}


# -- pictures ---------------------------------------------------------------------------------
def plot_samples(
    snaps: list[tuple[int, np.ndarray]], real: np.ndarray, cfg: Config, path: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(snaps), figsize=(3.4 * len(snaps), 3.7), squeeze=False)
    lim = cfg.radius * 1.6
    for ax, (step, pts) in zip(axes[0], snaps, strict=True):
        m = mode_metrics(pts, cfg)
        ax.scatter(pts[:, 0], pts[:, 1], s=3, c="#cc0000", alpha=0.35, label="generated")
        ax.scatter(real[:, 0], real[:, 1], s=1, c="black", label="real data")
        ax.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xlabel="x1", ylabel="x2",
               title=f"step {step}: {m['modes_covered']}/{cfg.modes} modes")
        ax.grid(alpha=0.2)
    axes[0][0].legend(loc="upper left", fontsize=8, markerscale=3)
    fig.suptitle("Generator samples (red) and the ring of 8 Gaussians (black), through training")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- training ---------------------------------------------------------------------------------
def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    tg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)
    G = mlp(cfg.latent, cfg.hidden, 2)
    D = mlp(2 * cfg.pack, cfg.hidden, 1, nn.LeakyReLU)
    opt_g = tg.optim.Adam(G.parameters(), lr=cfg.lr, betas=(cfg.beta1, 0.999))
    opt_d = tg.optim.Adam(D.parameters(), lr=cfg.lr, betas=(cfg.beta1, 0.999))
    scheds = [tg.optim.LinearLR(o, 1.0, 0.0, cfg.steps) for o in (opt_g, opt_d)]
    ones = tg.ones(cfg.batch_size // cfg.pack, 1)
    zeros = tg.zeros(cfg.batch_size // cfg.pack, 1)
    z_eval = tg.randn(cfg.eval_samples, cfg.latent)  # fixed noise: snapshots are comparable
    snap_at = {int(s) for s in np.linspace(0, cfg.steps, cfg.snapshots)[1:]} | {0}
    snaps = []
    # PacGAN: samples in groups, (B, 2) -> (B / pack, 2 * pack); a group drawn from one
    # collapsed mode is easy to tell from a group of real samples
    pack = lambda t: t.reshape(-1, 2 * cfg.pack)
    history: dict[str, list] = {"loss_d": [], "loss_g": []}

    for step in tqdm(range(cfg.steps + 1), desc="gan", disable=quiet, unit="step"):
        if step in snap_at:
            with tg.no_grad():
                snaps.append((step, G(z_eval).numpy()))
        if step == cfg.steps:
            break
        real = tg.tensor(sample_real(cfg, cfg.batch_size, rng))
        z = tg.randn(cfg.batch_size, cfg.latent)
        # Two tapes, one forward pass. A tape records an op when one of its inputs is on it:
        #   G(z)        -> only tape_g (G's parameters are on it; z is on neither)
        #   D(real)     -> only tape_d (D's parameters)
        #   D(fake)     -> both: `fake` is on tape_g, D's parameters on tape_d
        # So on tape_d, `fake` is a constant (what `fake.detach()` does by hand), and on tape_g,
        # D's parameters are constants (what freezing D does by hand). Each tape's gradient
        # covers exactly its own model; nothing has to be detached, zeroed or frozen.
        with tg.Tape(watch_parameters=False) as tape_g, tg.Tape(watch_parameters=False) as tape_d:
            tape_g.watch(G)
            tape_d.watch(D)
            fake = G(z)  # (B, 2)
            d_real, d_fake = D(pack(real)), D(pack(fake))  # (B / pack, 1) logits
            loss_d = (F.binary_cross_entropy_with_logits(d_real, ones)
                      + F.binary_cross_entropy_with_logits(d_fake, zeros))
            loss_g = F.binary_cross_entropy_with_logits(d_fake, ones)  # non-saturating loss
        # both gradients before either update: tape_g's backward reads D's weights as they were
        grads_d, grads_g = tape_d.gradient(loss_d, D), tape_g.gradient(loss_g, G)
        opt_d.step(grads_d)
        opt_g.step(grads_g)
        for sched in scheds:
            sched.step()
        history["loss_d"].append(loss_d.item())
        history["loss_g"].append(loss_g.item())

    final = mode_metrics(snaps[-1][1], cfg)
    seconds = time.perf_counter() - t0
    tg.save(
        {"model": {"generator": G.state_dict(), "discriminator": D.state_dict()},
         "optimizer": {"generator": opt_g.state_dict(), "discriminator": opt_d.state_dict()},
         "step": cfg.steps, "config": asdict(cfg)},
        os.path.join(cfg.out, "checkpoint.safetensors"),
    )
    plot_samples(snaps, sample_real(cfg, 1000, np.random.default_rng(1)), cfg,
                 os.path.join(cfg.out, "samples.png"))
    result = {**final, "modes": cfg.modes, "steps": cfg.steps,
              "final_loss_d": float(np.mean(history["loss_d"][-100:])),
              "final_loss_g": float(np.mean(history["loss_g"][-100:])),
              "seconds": round(seconds, 1)}
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        print(f"modes covered: {final['modes_covered']}/{cfg.modes}   samples within 3 std of a "
              f"mode: {100 * final['high_quality']:.1f}%   mean distance to the nearest mode: "
              f"{final['mean_distance']:.3f}   ({cfg.steps} steps, {seconds:.0f} s)")
        print(f"wrote {cfg.out}/checkpoint.safetensors, samples.png")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="SMALL: seconds, as the tests run it")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config(**SMALL) if a.small else Config()
    for k in ("steps", "lr", "out"):
        if getattr(a, k) is not None:
            setattr(cfg, k, getattr(a, k))
    main(cfg)
