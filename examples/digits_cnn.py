"""A small CNN on scikit-learn's 8x8 handwritten digits: the "MNIST" of this repository.

    python examples/digits_cnn.py            # full run (>= 97% held-out accuracy)
    python examples/digits_cnn.py --small    # a few seconds, for tests

Three 3x3 convolutions with batch norm, two max-pools, dropout and a linear classifier, trained
with AdamW and a one-cycle learning rate on 75% of the 1797 images; the other 25% are held out
and only used to measure. The data comes from `tg.data.load_digits()` (bundled with
scikit-learn, nothing is downloaded) through `tg.data.random_split` and `tg.data.DataLoader`.
Writes a checkpoint, curves.png (loss and accuracy per epoch) and confusion.png (the held-out
confusion matrix) into --out (runs/digits_cnn).
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
    epochs: int = 25
    batch_size: int = 64
    lr: float = 3e-3          # peak of the one-cycle schedule
    weight_decay: float = 1e-4
    width: int = 32           # channels of the first convolution
    dropout: float = 0.25
    test_fraction: float = 0.25
    seed: int = 0
    out: str = "runs/digits_cnn"


# --small (and the tests): a few seconds
SMALL = {"epochs": 2}


# -- model ------------------------------------------------------------------------------------
class DigitsCNN(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        c1, c2 = width, 2 * width
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(),   # (B, c1, 8, 8)
            nn.Conv2d(c1, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(),  # (B, c1, 8, 8)
            nn.MaxPool2d(2),                                                 # (B, c1, 4, 4)
            nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(),  # (B, c2, 4, 4)
            nn.MaxPool2d(2),                                                 # (B, c2, 2, 2)
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(c2 * 2 * 2, 10)
        )

    def forward(self, x: tg.Tensor) -> tg.Tensor:  # (B, 1, 8, 8)
        return self.classifier(self.features(x))  # (B, 10) logits


def evaluate(model: DigitsCNN, loader: tg.data.DataLoader) -> dict:
    model.eval()  # batch norm uses its running statistics, dropout is off
    losses, preds, labels = [], [], []
    with tg.no_grad():
        for x, y in loader:
            logits = model(x)
            losses.append(F.cross_entropy(logits, y, reduction="sum").item())
            preds.append(logits.numpy().argmax(-1))
            labels.append(y.numpy())
    model.train()
    pred, label = np.concatenate(preds), np.concatenate(labels)
    return {"loss": sum(losses) / len(label), "accuracy": float((pred == label).mean()),
            "pred": pred, "label": label}


# -- pictures ---------------------------------------------------------------------------------
def plot_curves(history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(history["epoch"], history["train_loss"], "o-", ms=3,
             label="training (mean over epoch)")
    ax1.plot(history["epoch"], history["test_loss"], "s-", ms=3, label="held-out")
    ax1.set_yscale("log")
    ax1.set(xlabel="epoch", ylabel="cross-entropy (log scale)", title="Loss")
    ax1.legend()
    ax1.grid(alpha=0.3, which="both")
    ax2.plot(history["epoch"], [100 * a for a in history["train_acc"]], "o-", ms=3,
             label="training")
    ax2.plot(history["epoch"], [100 * a for a in history["test_acc"]], "s-", ms=3,
             label="held-out")
    ax2.axhline(97, color="gray", ls="--", lw=0.8, label="97% target")
    low = min(80.0, 100 * min(history["train_acc"] + history["test_acc"]) - 2)
    ax2.set(xlabel="epoch", ylabel="accuracy (%)", ylim=(low, 100.5), title="Accuracy")
    ax2.legend(loc="lower right")
    ax2.grid(alpha=0.3)
    for ax in (ax1, ax2):
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_confusion(pred: np.ndarray, label: np.ndarray, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = np.zeros((10, 10), dtype=np.int64)
    np.add.at(cm, (label, pred), 1)
    fig, ax = plt.subplots(figsize=(5.6, 5))
    im = ax.imshow(cm, cmap="Blues")
    for i in range(10):
        for j in range(10):
            if cm[i, j]:
                ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=9,
                        color="white" if cm[i, j] > cm.max() / 2 else "black")
    ax.set_xticks(range(10))
    ax.set_yticks(range(10))
    ax.set(xlabel="predicted digit", ylabel="true digit",
           title=f"Held-out confusion matrix ({100 * (pred == label).mean():.1f}% correct)")
    fig.colorbar(im, ax=ax, label="images")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- training ---------------------------------------------------------------------------------
def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    tg.manual_seed(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)
    data = tg.data.load_digits()
    test_set, train_set = tg.data.random_split(
        data, [cfg.test_fraction, 1 - cfg.test_fraction], generator=tg.Generator(cfg.seed)
    )
    # drop_last: a last batch of 3 images would give batch norm noisy statistics
    train_loader = tg.data.DataLoader(train_set, cfg.batch_size, shuffle=True, drop_last=True,
                                      seed=cfg.seed)
    test_loader = tg.data.DataLoader(test_set, 512)

    model = DigitsCNN(cfg.width, cfg.dropout)
    opt = tg.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = tg.optim.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.epochs * len(train_loader))
    history: dict[str, list] = {k: [] for k in
                                ("epoch", "train_loss", "train_acc", "test_loss", "test_acc")}
    step = 0
    bar = tqdm(total=cfg.epochs * len(train_loader), desc="digits_cnn", disable=quiet, unit="step")
    for epoch in range(1, cfg.epochs + 1):
        loss_sum = correct = seen = 0.0
        for x, y in train_loader:  # (B, 1, 8, 8), (B,)
            with tg.Tape() as tape:
                logits = model(x)
                loss = F.cross_entropy(logits, y)
            opt.step(tape.gradient(loss, model))
            sched.step()
            step += 1
            loss_sum += loss.item() * len(y)
            correct += float((logits.numpy().argmax(-1) == y.numpy()).sum())
            seen += len(y)
            bar.update(1)
        m = evaluate(model, test_loader)
        for k, v in (("epoch", epoch), ("train_loss", loss_sum / seen),
                     ("train_acc", correct / seen), ("test_loss", m["loss"]),
                     ("test_acc", m["accuracy"])):
            history[k].append(v)
        bar.set_postfix(loss=f"{loss_sum / seen:.3f}", test_acc=f"{m['accuracy']:.3f}")
    bar.close()

    seconds = time.perf_counter() - t0
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
             "config": asdict(cfg)}, os.path.join(cfg.out, "checkpoint.safetensors"))
    plot_curves(history, os.path.join(cfg.out, "curves.png"))
    plot_confusion(m["pred"], m["label"], os.path.join(cfg.out, "confusion.png"))
    result = {"test_accuracy": m["accuracy"], "test_loss": m["loss"],
              "train_accuracy": history["train_acc"][-1],
              "first_train_loss": history["train_loss"][0],
              "final_train_loss": history["train_loss"][-1], "steps": step,
              "parameters": model.num_parameters(), "seconds": round(seconds, 1)}
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        print(f"held-out accuracy {100 * m['accuracy']:.2f}% on {len(m['label'])} images "
              f"(training {100 * result['train_accuracy']:.2f}%)   {step} steps, {seconds:.0f} s, "
              f"{result['parameters']} parameters")
        print(f"wrote {cfg.out}/checkpoint.safetensors, curves.png, confusion.png")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="SMALL: seconds, as the tests run it")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config(**SMALL) if a.small else Config()
    for k in ("epochs", "lr", "out"):
        if getattr(a, k) is not None:
            setattr(cfg, k, getattr(a, k))
    main(cfg)
