"""A character-level GPT trained on the documentation that ships inside Python.

    python examples/char_lm.py            # full run
    python examples/char_lm.py --small    # a few seconds, for tests

The text is the docstrings of about fifty standard-library modules (their module, class and
function docstrings, as `inspect.getdoc` gives them), so nothing is downloaded; 90% trains, the
last 10% measures. The model is a small decoder-only transformer in the style of nanoGPT, built
from tapegrad layers: token and position embeddings, pre-norm blocks of causal self-attention
(`F.scaled_dot_product_attention(..., is_causal=True)`) and a GELU MLP, a final layer norm and a
linear head. Prints the validation loss as it falls and a few samples at the end; writes a
checkpoint and loss.png into --out (runs/char_lm).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass
from types import ModuleType

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    steps: int = 1000         # optimizer updates
    batch_size: int = 32
    block_size: int = 64      # context length, in characters
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    lr: float = 3e-3          # peak of a warmup + cosine schedule (AdamW)
    warmup: int = 100
    weight_decay: float = 0.1
    eval_interval: int = 100  # steps between validation estimates
    eval_batches: int = 8     # batches per validation estimate
    max_chars: int = 0        # cap on the corpus size (0: all of it)
    sample_chars: int = 300   # length of each printed sample
    temperature: float = 0.8
    seed: int = 0
    out: str = "runs/char_lm"


# --small (and the tests): a few seconds; a narrower model on the first 50,000 characters
SMALL = {"steps": 60, "eval_interval": 30, "eval_batches": 2, "n_embd": 32, "max_chars": 50_000,
         "sample_chars": 20}


# -- data: docstrings from the standard library ------------------------------------------------
MODULES = [
    "textwrap", "string", "json", "argparse", "collections", "functools", "itertools", "re",
    "pathlib", "dataclasses", "random", "statistics", "heapq", "bisect", "fractions", "decimal",
    "datetime", "calendar", "difflib", "shlex", "logging", "unittest", "typing", "contextlib",
    "abc", "enum", "os", "shutil", "tempfile", "csv", "zipfile", "tarfile", "email",
    "http.client", "urllib.parse", "socket", "threading", "subprocess", "pickle", "copy",
    "pprint", "inspect", "ast", "tokenize", "doctest", "timeit", "uuid", "gzip", "html",
    "configparser", "sched", "queue", "weakref", "operator", "numbers",
]


def stdlib_docs(max_chars: int = 0) -> str:
    """Module, class and function docstrings of MODULES, ASCII only, in a fixed order."""
    parts = []
    for name in MODULES:
        with warnings.catch_warnings():  # some modules warn on import or attribute access
            warnings.simplefilter("ignore")
            parts += module_docs(importlib.import_module(name))
    text = "\n\n".join(parts).encode("ascii", "ignore").decode()
    return text[:max_chars] if max_chars else text


def module_docs(mod: ModuleType) -> list[str]:
    """The module's docstring, then its public functions' and classes' (those defined there)."""
    parts = [inspect.cleandoc(mod.__doc__)] if mod.__doc__ else []
    for attr, obj in sorted(vars(mod).items()):
        if attr.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            doc = inspect.getdoc(obj)
            if doc:
                parts.append(doc)
    return parts


class CharVocab:
    def __init__(self, text: str) -> None:
        self.itos = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def encode(self, s: str) -> np.ndarray:
        return np.array([self.stoi[c] for c in s], dtype=np.int64)

    def decode(self, ids: np.ndarray) -> str:
        return "".join(self.itos[i] for i in ids)

    def __len__(self) -> int:
        return len(self.itos)


def get_batch(
    data: np.ndarray, cfg: Config, rng: np.random.Generator
) -> tuple[tg.Tensor, tg.Tensor]:
    """Random windows: inputs (B, T) and the same windows shifted by one character."""
    start = rng.integers(0, len(data) - cfg.block_size - 1, cfg.batch_size)
    idx = start[:, None] + np.arange(cfg.block_size)  # (B, T)
    return tg.tensor(data[idx]), tg.tensor(data[idx + 1])


# -- model ------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # query, key, value in one GEMM
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        B, T, C = x.shape
        q, k, v = tg.split(self.c_attn(x), 3, axis=-1)  # 3 x (B, T, C)
        heads = lambda t: t.reshape(B, T, self.n_head, C // self.n_head).transpose(0, 2, 1, 3)
        y = F.scaled_dot_product_attention(  # (B, nh, T, hs); position t sees 0..t only
            heads(q), heads(k), heads(v), is_causal=True,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.c_proj(y.transpose(0, 2, 1, 3).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            # the tanh form of GELU, as GPT-2 uses
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(approximate="tanh"),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd), nn.Dropout(cfg.dropout),
        )

    def forward(self, x: tg.Tensor) -> tg.Tensor:  # (B, T, C)
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config, vocab_size: int) -> None:
        super().__init__()
        self.block_size = cfg.block_size
        self.wte = nn.Embedding(vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, vocab_size)

    def forward(self, ids: tg.Tensor) -> tg.Tensor:  # (B, T) int64
        T = ids.shape[1]
        x = self.drop(self.wte(ids) + self.wpe(tg.arange(T)))  # (B, T, C)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, T, vocab) logits

    def generate(
        self, ids: np.ndarray, n: int, temperature: float, rng: np.random.Generator
    ) -> np.ndarray:
        """Append ``n`` sampled characters to the (T,) prompt ``ids``."""
        out = list(ids)
        was_training = self.training
        self.eval()  # no dropout while sampling
        with tg.no_grad():
            for _ in range(n):
                ctx = tg.tensor(np.array(out[-self.block_size :])[None])  # (1, T)
                logits = self(ctx)[0, -1].numpy().astype(np.float64) / temperature
                p = np.exp(logits - logits.max())
                out.append(int(rng.choice(len(p), p=p / p.sum())))
        self.train(was_training)
        return np.array(out)


def estimate_loss(model: GPT, data: np.ndarray, cfg: Config, seed: int) -> float:
    """Mean cross-entropy over a fixed set of random windows (the same each call)."""
    rng = np.random.default_rng(seed)
    model.eval()
    with tg.no_grad():
        losses = []
        for _ in range(cfg.eval_batches):
            x, y = get_batch(data, cfg, rng)
            logits = model(x)  # (B, T, vocab)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            losses.append(loss.item())
    model.train()
    return float(np.mean(losses))


# -- pictures ---------------------------------------------------------------------------------
def plot(history: dict, vocab_size: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.array(history["step"])
    w = max(1, len(steps) // 60)  # moving average of the per-batch training loss
    ax.plot(steps[w - 1 :], np.convolve(history["loss"], np.ones(w) / w, mode="valid"),
            color="#3465a4", lw=1, label="training (moving average)")
    ax.plot(history["eval_step"], history["train_est"], "o", ms=3, color="#3465a4", alpha=0.6,
            label="training (estimate)")
    ax.plot(history["eval_step"], history["val"], "s-", ms=4, color="#cc0000", label="validation")
    ax.axhline(math.log(vocab_size), color="gray", ls="--", lw=0.8,
               label=f"uniform guess, ln {vocab_size}")
    ax.set(xlabel="training step", ylabel="cross-entropy (nats per character)",
           title="Character-level GPT on Python's docstrings")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- training ---------------------------------------------------------------------------------
def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    tg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)
    text = stdlib_docs(cfg.max_chars)
    vocab = CharVocab(text)
    data = vocab.encode(text)
    n_train = int(0.9 * len(data))
    train_data, val_data = data[:n_train], data[n_train:]

    model = GPT(cfg, len(vocab))
    # weight decay on the matrices (weights, embeddings), not on biases or norm gains (nanoGPT)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = tg.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.99))
    sched = tg.optim.WarmupCosine(opt, warmup_steps=min(cfg.warmup, cfg.steps // 5),
                                  total_steps=cfg.steps, min_lr=cfg.lr / 10)
    if not quiet:
        print(f"{len(text)} characters of docstrings, vocabulary {len(vocab)}, "
              f"{model.num_parameters()} parameters")
    history: dict[str, list] = {"step": [], "loss": [], "eval_step": [], "val": [], "train_est": []}

    def evaluate(step: int) -> None:
        history["eval_step"].append(step)
        history["val"].append(estimate_loss(model, val_data, cfg, seed=1))
        history["train_est"].append(estimate_loss(model, train_data, cfg, seed=2))
        if not quiet:
            tqdm.write(f"step {step:5d}  train {history['train_est'][-1]:.3f}  "
                       f"val {history['val'][-1]:.3f}")

    evaluate(0)
    for step in tqdm(range(1, cfg.steps + 1), desc="char_lm", disable=quiet, unit="step"):
        x, y = get_batch(train_data, cfg, rng)
        with tg.Tape() as tape:
            logits = model(x)  # (B, T, vocab)
            loss = F.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1))
        opt.step(tape.gradient(loss, model).clip_by_global_norm(1.0))
        sched.step()
        history["step"].append(step)
        history["loss"].append(loss.item())
        if step % cfg.eval_interval == 0 or step == cfg.steps:
            evaluate(step)

    seconds = time.perf_counter() - t0
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": cfg.steps,
             "config": asdict(cfg), "vocab": "".join(vocab.itos)},
            os.path.join(cfg.out, "checkpoint.safetensors"))
    plot(history, len(vocab), os.path.join(cfg.out, "loss.png"))
    samples = []
    for prompt in ("Return the ", "The "):
        ids = model.generate(vocab.encode(prompt), cfg.sample_chars, cfg.temperature, rng)
        samples.append(vocab.decode(ids))
    result = {"initial_val_loss": history["val"][0], "final_val_loss": history["val"][-1],
              "best_val_loss": min(history["val"]), "final_train_loss": history["train_est"][-1],
              "vocab_size": len(vocab), "characters": len(text), "steps": cfg.steps,
              "parameters": model.num_parameters(), "seconds": round(seconds, 1),
              "samples": samples}
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        for s in samples:
            print("-" * 80)
            print(s)
        print("-" * 80)
        print(f"validation loss {result['initial_val_loss']:.3f} -> {result['final_val_loss']:.3f} "
              f"nats/char ({cfg.steps} steps, {seconds:.0f} s)")
        print(f"wrote {cfg.out}/checkpoint.safetensors, loss.png")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="SMALL: seconds, as the tests run it")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--n-layer", type=int, dest="n_layer")
    ap.add_argument("--n-embd", type=int, dest="n_embd")
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config(**SMALL) if a.small else Config()
    for k in ("steps", "lr", "n_layer", "n_embd", "out"):
        if getattr(a, k) is not None:
            setattr(cfg, k, getattr(a, k))
    main(cfg)
