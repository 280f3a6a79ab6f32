"""Two tasks, one persistent tape: per-task gradients and PCGrad on handwritten digits.

    python examples/multitask.py            # full run: plain sum vs PCGrad
    python examples/multitask.py --small    # a few seconds, for tests

Each digit image is drawn with a random pen intensity (its pixels scaled by c in [0.25, 1]).
A shared MLP trunk feeds two heads: one classifies the digit, the other recovers c. One
`tg.Tape(persistent=True)` records the forward pass once; `tape.gradient(loss_cls, model)` and
`tape.gradient(loss_reg, model)` then give each task's own gradients (each head gets only its
task's, the trunk gets both) before `tape.release()` frees the record.

PCGrad (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning"): when the two tasks'
gradients on the shared trunk point against each other (negative dot product), each is projected
onto the normal plane of the other before they are added. The script trains the same model from
the same initialisation twice, with the plain sum and with PCGrad, and reports both: test
accuracy, the intensity's mean absolute error, and how often the task gradients conflicted. On
these two tasks the trunk gradients are close to orthogonal (their cosine hovers around 0 and is
negative about half the time), so the projections are small and both runs end close together;
PCGrad pays off when tasks pull against each other harder. Writes checkpoints and curves.png into
--out (runs/multitask).
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
    epochs: int = 40          # passes over the training images, for each method
    batch_size: int = 64
    lr: float = 1e-3          # Adam
    hidden: int = 128         # trunk width
    reg_weight: float = 1.0   # weight of the intensity loss in the total
    test_fraction: float = 0.25
    seed: int = 0
    out: str = "runs/multitask"


# --small (and the tests): a few seconds
SMALL = {"epochs": 3}


# -- data: digits drawn with a random pen intensity --------------------------------------------
def make_data(cfg: Config) -> dict[str, np.ndarray]:
    images, labels = tg.data.load_digits(return_arrays=True)
    rng = np.random.default_rng(cfg.seed)
    c = rng.uniform(0.25, 1.0, len(labels)).astype(np.float32)  # the regression target
    x = images.reshape(len(labels), -1) * c[:, None]  # (N, 64)
    perm = rng.permutation(len(labels))
    n_test = int(len(labels) * cfg.test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return {"x_train": x[train], "y_train": labels[train], "c_train": c[train],
            "x_test": x[test], "y_test": labels[test], "c_test": c[test]}


# -- model ------------------------------------------------------------------------------------
class MultiTask(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.classify = nn.Linear(hidden, 10)
        self.intensity = nn.Linear(hidden, 1)

    def forward(self, x: tg.Tensor) -> tuple[tg.Tensor, tg.Tensor]:  # (B, 64)
        h = self.trunk(x)  # (B, hidden)
        return self.classify(h), self.intensity(h)[:, 0]  # (B, 10), (B,)


# -- PCGrad ------------------------------------------------------------------------------------
def flat(g: tg.Gradients, params: list[tg.Parameter]) -> tg.Tensor:
    """The gradients of ``params`` as one vector, (S,) with S the parameters' total size."""
    return tg.concat([g[p].reshape(-1) for p in params])


def cosine(a: tg.Tensor, b: tg.Tensor) -> float:
    return (a * b).sum().item() / (tg.norm(a).item() * tg.norm(b).item() + 1e-12)


def pcgrad(g_a: tg.Gradients, g_b: tg.Gradients, shared: list[tg.Parameter]) -> tg.Gradients:
    """Combine two tasks' gradients with PCGrad.

    Over the shared parameters' flattened gradients a and b: if a . b < 0, a -= (a.b/|b|^2) b
    and b -= (b.a/|a|^2) a (both against the original vectors, as in the paper for two tasks),
    then a + b. Each head's own parameters keep their single task's gradient.
    """
    a, b = flat(g_a, shared), flat(g_b, shared)
    dot = (a * b).sum().item()
    if dot < 0:  # conflict: drop the component of each that points against the other
        a, b = a - (dot / (b * b).sum().item()) * b, b - (dot / (a * a).sum().item()) * a
    merged = a + b  # (S,)
    # the heads: each has only its own task's gradient, so the plain sum is that gradient
    pairs = dict((g_a + g_b).items())
    offset = 0
    for p in shared:
        pairs[p] = merged[offset : offset + p.size].reshape(p.shape)
        offset += p.size
    return tg.Gradients(pairs.items())


# -- training ---------------------------------------------------------------------------------
def evaluate(model: MultiTask, x: np.ndarray, y: np.ndarray, c: np.ndarray) -> dict[str, float]:
    with tg.no_grad():
        logits, c_hat = model(tg.tensor(x))
    return {"accuracy": float((logits.numpy().argmax(-1) == y).mean()),
            "intensity_mae": float(np.abs(c_hat.numpy() - c).mean())}


def train(cfg: Config, data: dict[str, np.ndarray], method: str, quiet: bool) -> dict:
    from tqdm.auto import tqdm

    tg.manual_seed(cfg.seed)  # both methods start from the same weights and batches
    rng = np.random.default_rng(cfg.seed)
    model = MultiTask(cfg.hidden)
    shared = list(model.trunk.parameters())
    opt = tg.optim.Adam(model.parameters(), lr=cfg.lr)
    n = len(data["y_train"])
    steps_per_epoch = n // cfg.batch_size
    hist: dict[str, list] = {"epoch": [], "accuracy": [], "intensity_mae": [], "cos": []}
    step = 0
    bar = tqdm(total=cfg.epochs * steps_per_epoch, desc=method, disable=quiet, unit="step")
    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(n)
        for k in range(steps_per_epoch):
            idx = order[k * cfg.batch_size : (k + 1) * cfg.batch_size]
            x = tg.tensor(data["x_train"][idx])
            # one forward pass, recorded once, differentiated twice
            with tg.Tape(persistent=True) as tape:
                logits, c_hat = model(x)
                loss_cls = F.cross_entropy(logits, tg.tensor(data["y_train"][idx]))
                loss_reg = F.mse_loss(c_hat, tg.tensor(data["c_train"][idx])) * cfg.reg_weight
            g_cls = tape.gradient(loss_cls, model)  # trunk + classify (intensity: none)
            g_reg = tape.gradient(loss_reg, model)  # trunk + intensity (classify: none)
            tape.release()  # frees the saved activations now rather than when `tape` goes
            opt.step(pcgrad(g_cls, g_reg, shared) if method == "pcgrad" else g_cls + g_reg)
            hist["cos"].append(cosine(flat(g_cls, shared), flat(g_reg, shared)))
            step += 1
            bar.update(1)
        m = evaluate(model, data["x_test"], data["y_test"], data["c_test"])
        hist["epoch"].append(epoch)
        hist["accuracy"].append(m["accuracy"])
        hist["intensity_mae"].append(m["intensity_mae"])
        bar.set_postfix(acc=f"{m['accuracy']:.3f}", mae=f"{m['intensity_mae']:.3f}")
    bar.close()
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
             "config": asdict(cfg), "method": method},
            os.path.join(cfg.out, f"checkpoint_{method}.safetensors"))
    cos = np.array(hist["cos"])
    return {"accuracy": hist["accuracy"][-1], "intensity_mae": hist["intensity_mae"][-1],
            "conflict_fraction": float((cos < 0).mean()), "mean_cos": float(cos.mean()),
            "steps": step, "history": hist}


# -- pictures ---------------------------------------------------------------------------------
def plot(runs: dict[str, dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9))
    colors = {"sum": "#3465a4", "pcgrad": "#cc0000"}
    labels = {"sum": "plain sum", "pcgrad": "PCGrad"}
    for method, r in runs.items():
        h = r["history"]
        axes[0].plot(h["epoch"], [100 * a for a in h["accuracy"]], color=colors[method],
                     label=labels[method])
        axes[1].plot(h["epoch"], h["intensity_mae"], color=colors[method], label=labels[method])
        cos = np.array(h["cos"])
        w = max(1, len(cos) // 50)  # moving average: the raw cosine is noisy
        smooth = np.convolve(cos, np.ones(w) / w, mode="valid")
        axes[2].plot(np.arange(len(smooth)) + w, smooth, color=colors[method],
                     label=f"{labels[method]} ({100 * r['conflict_fraction']:.0f}% of steps < 0)")
    axes[0].set(xlabel="epoch", ylabel="test accuracy (%)", title="Digit classification")
    axes[1].set(xlabel="epoch", ylabel="mean absolute error", title="Pen intensity regression")
    axes[2].axhline(0, color="gray", lw=0.8)
    axes[2].set(xlabel="training step", ylabel="cosine (moving average)",
                title="Cosine between the tasks' trunk gradients")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(cfg: Config, quiet: bool = False) -> dict:
    t0 = time.perf_counter()
    os.makedirs(cfg.out, exist_ok=True)
    data = make_data(cfg)
    runs = {method: train(cfg, data, method, quiet) for method in ("sum", "pcgrad")}
    plot(runs, os.path.join(cfg.out, "curves.png"))
    result = {method: {k: v for k, v in r.items() if k != "history"} for method, r in runs.items()}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        for method, r in runs.items():
            print(f"{method:>6}: test accuracy {100 * r['accuracy']:.1f}%   intensity MAE "
                  f"{r['intensity_mae']:.4f}   task gradients conflicted on "
                  f"{100 * r['conflict_fraction']:.0f}% of steps "
                  f"(mean cosine {r['mean_cos']:+.3f})")
        print(f"wrote {cfg.out}/checkpoint_sum.safetensors, checkpoint_pcgrad.safetensors, "
              f"curves.png ({result['seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="SMALL: seconds, as the tests run it")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--reg-weight", type=float, dest="reg_weight")
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config(**SMALL) if a.small else Config()
    for k in ("epochs", "lr", "reg_weight", "out"):
        if getattr(a, k) is not None:
            setattr(cfg, k, getattr(a, k))
    main(cfg)
