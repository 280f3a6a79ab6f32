"""Images + text, one tape, no bookkeeping: a CLIP-style model on handwritten digits.

    python examples/multimodal.py            # full run (make demo)
    python examples/multimodal.py --small    # a few seconds, for tests

Two inputs (8x8 digit images and generated captions such as "a handwritten seven" or "the digit
7, drawn quickly"), two encoders, one symmetric contrastive loss. Every parameter of both
encoders gets its gradient from one `with tg.Tape() as tape:` block: no tape is carried by one
input, nothing is merged by hand. Held-out caption templates measure whether the text encoder
learned the words rather than the sentences. Writes a checkpoint, loss/accuracy curves, a grid of
retrieval examples and a picture of one training step's tape into --out (runs/multimodal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    epochs: int = 30          # passes over the training images
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 1e-4
    embed_dim: int = 64       # shared image/text embedding size
    text_dim: int = 64        # token embedding / transformer width
    heads: int = 4
    max_len: int = 10         # tokens per caption (padded)
    test_fraction: float = 0.25
    seed: int = 0
    out: str = "runs/multimodal"


# -- captions: generated from the label, some templates held out for evaluation ----------------
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
ADJ = ["handwritten", "scribbled", "sketched", "hand drawn", "small", "bold", "thin", "messy", "neat"]
TRAIN_TEMPLATES = [
    "a handwritten {w}",
    "the digit {n}, drawn quickly",
    "{w}, slightly tilted",
    "an image of the number {w}",
    "a {adj} {n}",
    "this is a {w}",
    "{adj} {w} on a grid",
    "the number {n}",
    "a {adj} digit {w}",
    "{n}",
    "quickly drawn {w}, a bit messy",
    "digit: {w}",
]
HELDOUT_TEMPLATES = [
    "a picture of a {adj} {w}",
    "{w} drawn by hand",
    "the {adj} number {n}, slightly tilted",
    "an image showing the digit {w}",
]
PAD, UNK = "<pad>", "<unk>"


def caption(label: int, template: str, rng: np.random.Generator) -> str:
    return template.format(w=WORDS[label], n=str(label), adj=ADJ[rng.integers(len(ADJ))])


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z]+|\d", text.lower())


class Vocab:
    """A word-level tokenizer built from the training captions."""

    def __init__(self, texts: list[str]) -> None:
        words = sorted({t for s in texts for t in tokenize(s)})
        self.itos = [PAD, UNK, *words]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def encode(self, text: str, max_len: int) -> np.ndarray:
        ids = [self.stoi.get(t, 1) for t in tokenize(text)][:max_len]
        return np.array(ids + [0] * (max_len - len(ids)), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.itos)


# -- model ------------------------------------------------------------------------------------
class ImageEncoder(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.proj = nn.Linear(32 * 4 * 4, dim)

    def forward(self, x: tg.Tensor) -> tg.Tensor:  # (B, 1, 8, 8)
        x = F.relu(self.conv1(x))
        x = self.pool(F.relu(self.conv2(x)))  # (B, 32, 4, 4)
        return self.proj(x.reshape(x.shape[0], -1))  # (B, dim)


class TextEncoder(nn.Module):
    def __init__(self, vocab_size: int, width: int, heads: int, max_len: int, dim: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, width, padding_idx=0)
        self.pos = nn.Parameter(tg.randn(max_len, width) * 0.02)
        self.block = nn.TransformerEncoderLayer(
            width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True
        )
        self.proj = nn.Linear(width, dim)

    def forward(self, ids: tg.Tensor) -> tg.Tensor:  # (B, T) int64
        pad = ids == 0  # (B, T) True where padding
        h = self.tok(ids) + self.pos  # (B, T, C)
        h = self.block(h, src_key_padding_mask=pad)
        keep = (~pad).astype(h.dtype)[..., None]  # (B, T, 1)
        pooled = (h * keep).sum(axis=1) / keep.sum(axis=1)  # mean over real tokens
        return self.proj(pooled)


class CLIP(nn.Module):
    def __init__(self, cfg: Config, vocab_size: int) -> None:
        super().__init__()
        self.image = ImageEncoder(cfg.embed_dim)
        self.text = TextEncoder(vocab_size, cfg.text_dim, cfg.heads, cfg.max_len, cfg.embed_dim)
        self.logit_scale = nn.Parameter(tg.tensor(math.log(10.0)))

    def forward(self, images: tg.Tensor, ids: tg.Tensor) -> tg.Tensor:
        a = F.normalize(self.image(images), dim=-1)
        b = F.normalize(self.text(ids), dim=-1)
        return tg.exp(self.logit_scale) * (a @ b.T)  # (B, B) similarity logits


def clip_loss(logits: tg.Tensor, labels: np.ndarray) -> tg.Tensor:
    """Symmetric contrastive loss; captions of the same digit count as matches (soft targets)."""
    same = (labels[:, None] == labels[None, :]).astype(np.float32)
    target = tg.tensor(same / same.sum(axis=1, keepdims=True))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) * 0.5


# -- evaluation -------------------------------------------------------------------------------
def class_text_embeddings(model: CLIP, vocab: Vocab, cfg: Config, templates: list[str]) -> tg.Tensor:
    """One embedding per digit: the mean over the given caption templates (10, D)."""
    rng = np.random.default_rng(123)
    ids = np.stack([vocab.encode(caption(c, t, rng), cfg.max_len) for t in templates for c in range(10)])
    emb = F.normalize(model.text(tg.tensor(ids)), dim=-1).reshape(len(templates), 10, -1)
    return F.normalize(emb.mean(axis=0), dim=-1)


def evaluate(model: CLIP, vocab: Vocab, cfg: Config, images: np.ndarray, labels: np.ndarray) -> dict:
    model.eval()
    with tg.no_grad():
        img = F.normalize(model.image(tg.tensor(images)), dim=-1).numpy()  # (N, D)
        txt = class_text_embeddings(model, vocab, cfg, HELDOUT_TEMPLATES).numpy()  # (10, D)
        i2t = float(((img @ txt.T).argmax(axis=1) == labels).mean())
        # text -> image: each held-out caption retrieves the image it is closest to
        rng = np.random.default_rng(7)
        caps = [(c, caption(c, t, rng)) for t in HELDOUT_TEMPLATES for c in range(10)]
        ids = np.stack([vocab.encode(s, cfg.max_len) for _, s in caps])
        temb = F.normalize(model.text(tg.tensor(ids)), dim=-1).numpy()
        best = (temb @ img.T).argmax(axis=1)
        t2i = float(np.mean([labels[b] == c for (c, _), b in zip(caps, best, strict=True)]))
    model.train()
    return {"image_to_text": i2t, "text_to_image": t2i, "pred": (img @ txt.T).argmax(axis=1)}


# -- pictures ---------------------------------------------------------------------------------
def plot_curves(history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(history["step"], history["loss"], color="#3465a4", lw=1)
    ax1.set(xlabel="training step", ylabel="contrastive loss", title="Training loss")
    ax1.grid(alpha=0.3)
    ax2.plot(history["epoch"], [100 * v for v in history["i2t"]], "o-", label="image -> text")
    ax2.plot(history["epoch"], [100 * v for v in history["t2i"]], "s-", label="text -> image")
    ax2.set(xlabel="epoch", ylabel="held-out top-1 accuracy (%)", ylim=(0, 100),
            title="Retrieval on held-out images and captions")
    ax2.xaxis.get_major_locator().set_params(integer=True)
    ax2.legend(loc="lower right")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_retrievals(images: np.ndarray, labels: np.ndarray, pred: np.ndarray, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 8, figsize=(12, 5.4))
    rng = np.random.default_rng(0)
    for ax, i in zip(axes.ravel(), rng.choice(len(images), axes.size, replace=False), strict=True):
        ax.imshow(images[i, 0], cmap="gray_r")
        ok = pred[i] == labels[i]
        ax.set_title(f"'{WORDS[pred[i]]}'", color="#2e7d32" if ok else "#c62828", fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Held-out images and the caption each retrieves (green: right, red: wrong)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_tape_picture(tape: tg.Tape, path_base: str) -> str:
    """The step's tape, one box per module: DOT source always, PNG when graphviz is installed."""
    with open(path_base + ".dot", "w") as f:
        f.write(tape.to_dot(group="module"))
    try:
        return tape.render(path_base, format="png", group="module")
    except RuntimeError as e:  # graphviz's `dot` program is optional
        print(f"(tape picture left as DOT source: {e})")
        return path_base + ".dot"


# -- training ---------------------------------------------------------------------------------
def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    tg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)

    images, labels = tg.data.load_digits(return_arrays=True)
    perm = rng.permutation(len(labels))
    n_test = int(len(labels) * cfg.test_fraction)
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    vocab = Vocab([caption(c, t, rng) for t in TRAIN_TEMPLATES for c in range(10) for _ in range(len(ADJ))]
                  + [a for a in ADJ])

    model = CLIP(cfg, len(vocab))
    opt = tg.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = len(train_idx) // cfg.batch_size
    total = cfg.epochs * steps_per_epoch
    sched = tg.optim.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total)
    history: dict[str, list] = {"step": [], "loss": [], "epoch": [], "i2t": [], "t2i": []}
    step = 0
    tape_pic = None
    bar = tqdm(total=total, desc="multimodal", disable=quiet, unit="step")
    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(train_idx)
        for k in range(0, len(order) - cfg.batch_size + 1, cfg.batch_size):  # full batches only
            idx = order[k : k + cfg.batch_size]
            y = labels[idx]
            caps = [caption(c, TRAIN_TEMPLATES[rng.integers(len(TRAIN_TEMPLATES))], rng) for c in y]
            ids = np.stack([vocab.encode(s, cfg.max_len) for s in caps])
            with tg.Tape() as tape:  # both inputs, both encoders: one tape, no bookkeeping
                logits = model(tg.tensor(images[idx]), tg.tensor(ids))
                loss = clip_loss(logits, y)
            if tape_pic is None:
                tape_pic = save_tape_picture(tape, os.path.join(cfg.out, "tape"))
                summary = tape.summary()
            grads = tape.gradient(loss, model)
            opt.step(grads.clip_by_global_norm(5.0))
            sched.step()
            step += 1
            history["step"].append(step)
            history["loss"].append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
        m = evaluate(model, vocab, cfg, images[test_idx], labels[test_idx])
        history["epoch"].append(epoch)
        history["i2t"].append(m["image_to_text"])
        history["t2i"].append(m["text_to_image"])
        bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", i2t=f"{m['image_to_text']:.3f}")
    bar.close()

    final = evaluate(model, vocab, cfg, images[test_idx], labels[test_idx])
    seconds = time.perf_counter() - t0
    tg.save(
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
         "config": asdict(cfg), "vocab": vocab.itos, "rng": tg.default_generator().get_state()},
        os.path.join(cfg.out, "checkpoint.safetensors"),
    )
    plot_curves(history, os.path.join(cfg.out, "curves.png"))
    plot_retrievals(images[test_idx], labels[test_idx], final["pred"], os.path.join(cfg.out, "retrievals.png"))
    result = {
        "image_to_text": final["image_to_text"],
        "text_to_image": final["text_to_image"],
        "final_loss": history["loss"][-1],
        "steps": step,
        "seconds": round(seconds, 1),
        "parameters": model.num_parameters(),
    }
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        print(summary.splitlines()[-1])
        print(f"held-out image->text top-1: {100 * result['image_to_text']:.1f}%   "
              f"text->image top-1: {100 * result['text_to_image']:.1f}%   "
              f"({step} steps, {seconds:.0f} s, {result['parameters']} parameters)")
        print(f"wrote {cfg.out}/checkpoint.safetensors, curves.png, retrievals.png, {os.path.basename(tape_pic or '')}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="a few epochs, for tests")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config()
    if a.small:
        cfg.epochs = 3
    if a.epochs:
        cfg.epochs = a.epochs
    if a.out:
        cfg.out = a.out
    main(cfg)
