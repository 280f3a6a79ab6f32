"""WGAN-GP with nested tapes: a gradient penalty is a gradient of a gradient.

    python examples/gradient_penalty.py            # full run
    python examples/gradient_penalty.py --small    # a few seconds, for tests

A Wasserstein GAN with gradient penalty (Gulrajani et al. 2017) on the ring of 8 Gaussians of
examples/gan.py. The critic must be 1-Lipschitz, which WGAN-GP asks for softly: at points x_hat
between real and generated samples, the penalty (||d critic / d x_hat|| - 1)^2 is added to the
critic's loss. Two tapes, one inside the other: the inner tape gives d critic / d x_hat; the
outer tape is open while the inner one runs its backward pass, so it records that pass too and
can differentiate the penalty with respect to the critic's parameters. Reports the penalty and
the gradient norms at x_hat (they settle near 1), the modes covered and the mean distance to the
nearest mode; writes a checkpoint and wgan_gp.png into --out (runs/gradient_penalty).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

import tapegrad as tg
from tapegrad import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gan import mlp, mode_metrics, ring_centers, sample_real  # noqa: E402  (same data, same MLPs)


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    steps: int = 1000         # generator updates
    n_critic: int = 5         # critic updates per generator update
    batch_size: int = 256
    lr: float = 1e-3          # Adam, both models, decaying linearly to 0
    betas: tuple[float, float] = (0.5, 0.9)
    gp_weight: float = 1.0    # lambda, the penalty's weight (10 oscillates at this lr)
    latent: int = 8
    hidden: int = 128
    radius: float = 2.0       # the data, as in gan.py
    std: float = 0.02
    modes: int = 8
    cover_share: float = 0.02  # a mode is covered if >= this share of samples is within 3 std
    eval_samples: int = 2500
    seed: int = 0
    out: str = "runs/gradient_penalty"


# --small (and the tests): a few seconds
SMALL = {"steps": 60, "eval_samples": 1000}


def input_gradient_norms(critic: nn.Module, x_hat: tg.Tensor) -> tg.Tensor:
    """||d critic / d x|| at each row of x_hat, (B,): differentiable when an outer tape is open."""
    # Only x_hat is watched: this tape exists to differentiate with respect to the input.
    with tg.Tape(watch_parameters=False) as inner:
        inner.watch(x_hat)
        # each row's critic value depends on its own row only, so the gradient of the sum
        # holds every row's gradient
        total = critic(x_hat).sum()
    # If an outer tape is recording (it is, in critic_step), this backward pass is recorded on
    # it: the returned gradient is a function of the critic's parameters that it can
    # differentiate again.
    grad_x = inner.gradient(total, x_hat)  # (B, 2)
    return tg.norm(grad_x, axis=1)  # (B,)


# -- pictures ---------------------------------------------------------------------------------
def plot(
    G: nn.Module, D: nn.Module, history: dict, norms: np.ndarray, cfg: Config, path: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5))
    lim = cfg.radius * 1.6
    grid = np.linspace(-lim, lim, 120, dtype=np.float32)
    gx, gy = np.meshgrid(grid, grid)
    with tg.no_grad():
        pts = G(tg.randn(cfg.eval_samples, cfg.latent)).numpy()
        crit = D(tg.tensor(np.stack([gx.ravel(), gy.ravel()], 1))).numpy().reshape(gx.shape)
    ax = axes[0, 0]
    cs = ax.contourf(gx, gy, crit, levels=20, cmap="Blues", alpha=0.8)
    fig.colorbar(cs, ax=ax, label="critic value")
    c = ring_centers(cfg)
    ax.scatter(pts[:, 0], pts[:, 1], s=3, c="#cc0000", alpha=0.35, label="generated")
    ax.scatter(c[:, 0], c[:, 1], s=60, marker="x", c="black", label="real modes")
    m = mode_metrics(pts, cfg)
    ax.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xlabel="x1", ylabel="x2",
           title=f"Samples over the critic ({m['modes_covered']}/{cfg.modes} modes covered "
           "within 3 std)")
    ax.legend(loc="upper left", fontsize=8, markerscale=2)

    steps = np.arange(1, len(history["penalty"]) + 1)
    w = max(1, len(steps) // 60)  # moving average over critic updates
    smooth = lambda v: np.convolve(v, np.ones(w) / w, mode="valid")
    ax = axes[0, 1]
    ax.plot(steps[w - 1 :], smooth(history["penalty"]), color="#cc0000")
    ax.set_yscale("log")
    ax.set(xlabel="critic update", ylabel="(||g|| - 1)^2, moving average (log scale)",
           title="Gradient penalty at x_hat")
    ax.grid(alpha=0.3, which="both")

    ax = axes[1, 0]
    ax.plot(steps[w - 1 :], smooth(history["w_estimate"]), color="#3465a4")
    ax.set(xlabel="critic update", ylabel="E[D(real)] - E[D(fake)], moving average",
           title="The critic's estimate of the Wasserstein distance")
    ax.grid(alpha=0.3)

    ax = axes[1, 1]
    ax.hist(norms, bins=40, color="#4e9a06", alpha=0.8)
    ax.axvline(1.0, color="black", ls="--", label="target norm 1")
    ax.set(xlabel="||d critic / d x_hat||", ylabel="count of x_hat",
           title="Critic gradient norms at fresh x_hat, end of training")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- training ---------------------------------------------------------------------------------
def interpolates(real: tg.Tensor, fake: tg.Tensor) -> tg.Tensor:
    eps = tg.rand(real.shape[0], 1)  # (B, 1): one mixing weight per pair
    return eps * real + (1 - eps) * fake  # (B, 2)


def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    tg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)
    G = mlp(cfg.latent, cfg.hidden, 2)
    D = mlp(2, cfg.hidden, 1)
    opt_g = tg.optim.Adam(G.parameters(), lr=cfg.lr, betas=cfg.betas)
    opt_d = tg.optim.Adam(D.parameters(), lr=cfg.lr, betas=cfg.betas)
    scheds = [tg.optim.LinearLR(o, 1.0, 0.0, cfg.steps) for o in (opt_g, opt_d)]
    history: dict[str, list] = {"penalty": [], "w_estimate": [], "grad_norm": []}

    def critic_step() -> None:
        real = tg.tensor(sample_real(cfg, cfg.batch_size, rng))
        with tg.no_grad():  # the critic's update treats generated samples as data
            fake = G(tg.randn(cfg.batch_size, cfg.latent))
        x_hat = interpolates(real, fake)
        with tg.Tape(watch_parameters=False) as outer:
            outer.watch(D)
            norms = input_gradient_norms(D, x_hat)  # the inner tape's backward, recorded here
            penalty = ((norms - 1) ** 2).mean()
            w_estimate = D(real).mean() - D(fake).mean()
            loss = -w_estimate + cfg.gp_weight * penalty
        opt_d.step(outer.gradient(loss, D))  # differentiates through the inner backward pass
        history["penalty"].append(penalty.item())
        history["w_estimate"].append(w_estimate.item())
        history["grad_norm"].append(float(norms.numpy().mean()))

    bar = tqdm(range(cfg.steps), desc="wgan-gp", disable=quiet, unit="step")
    for _ in bar:
        for _ in range(cfg.n_critic):
            critic_step()
        with tg.Tape(watch_parameters=False) as tape:
            tape.watch(G)  # D's parameters are constants here: only G is updated
            loss_g = -D(G(tg.randn(cfg.batch_size, cfg.latent))).mean()
        opt_g.step(tape.gradient(loss_g, G))
        for sched in scheds:
            sched.step()
        bar.set_postfix(gp=f"{history['penalty'][-1]:.4f}", w=f"{history['w_estimate'][-1]:.3f}")

    # the penalty and the gradient norms on fresh interpolates, at the end
    real = tg.tensor(sample_real(cfg, cfg.eval_samples, rng))
    with tg.no_grad():
        z_eval = tg.randn(cfg.eval_samples, cfg.latent)
        fake = G(z_eval)
    norms = input_gradient_norms(D, interpolates(real, fake)).numpy()
    m = mode_metrics(fake.numpy(), cfg)
    seconds = time.perf_counter() - t0
    k = max(1, len(history["penalty"]) // 10)  # first and last tenth of the critic updates
    result = {
        **m, "modes": cfg.modes, "steps": cfg.steps,
        "penalty_start": float(np.mean(history["penalty"][:k])),
        "penalty_end": float(np.mean(history["penalty"][-k:])),
        "grad_norm_mean": float(norms.mean()),
        "grad_norm_within_0.2_of_1": float((np.abs(norms - 1) < 0.2).mean()),
        "seconds": round(seconds, 1),
    }
    tg.save(
        {"model": {"generator": G.state_dict(), "critic": D.state_dict()},
         "optimizer": {"generator": opt_g.state_dict(), "critic": opt_d.state_dict()},
         "step": cfg.steps, "config": asdict(cfg)},
        os.path.join(cfg.out, "checkpoint.safetensors"),
    )
    plot(G, D, history, norms, cfg, os.path.join(cfg.out, "wgan_gp.png"))
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        print(f"gradient penalty: {result['penalty_start']:.4f} (first tenth of training) -> "
              f"{result['penalty_end']:.4f} (last tenth)")
        print(f"critic gradient norm at interpolates: mean {result['grad_norm_mean']:.3f}, "
              f"{100 * result['grad_norm_within_0.2_of_1']:.0f}% within 0.2 of 1")
        print(f"modes covered: {m['modes_covered']}/{cfg.modes}   samples within 3 std of a mode: "
              f"{100 * m['high_quality']:.1f}%   mean distance to the nearest mode: "
              f"{m['mean_distance']:.3f}   ({cfg.steps} steps, {seconds:.0f} s)")
        print(f"wrote {cfg.out}/checkpoint.safetensors, wgan_gp.png")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="SMALL: seconds, as the tests run it")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--gp-weight", type=float, dest="gp_weight")
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config(**SMALL) if a.small else Config()
    for k in ("steps", "gp_weight", "out"):
        if getattr(a, k) is not None:
            setattr(cfg, k, getattr(a, k))
    main(cfg)
