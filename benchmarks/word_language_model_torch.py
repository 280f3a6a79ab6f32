"""The PyTorch twin of examples/word_language_model.py: the same model, corpus, batches, initial
weights and training loop, in PyTorch (a benchmark and test dependency only).

    python benchmarks/word_language_model_torch.py [--max_steps 100] [--dropout 0] ...
    python benchmarks/word_language_model_torch.py --compare --max_steps 100

The initial weights are the tapegrad model's (built from the same seed, then copied into torch);
the corpus and its batches come from the example's own functions. With dropout > 0 the masks
differ (each library draws its own), so loss curves agree only statistically; at dropout 0 they
agree step by step up to float32 rounding. ``--compare`` runs both, one after the other in one
process, and prints the per-step loss gap and the speed ratio (steps/s, tapegrad over PyTorch).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from dataclasses import replace
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as TF
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_example() -> ModuleType:
    """examples/word_language_model.py, imported by path (examples/ is not a package)."""
    name = "examples_word_language_model"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(ROOT, "examples", "word_language_model.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


class RNNModel(nn.Module):
    """The original's RNNModel (pytorch/examples, word_language_model/model.py)."""

    def __init__(self, cfg, ntoken: int) -> None:
        super().__init__()
        self.ntoken, self.rnn_type = ntoken, cfg.model
        self.nhid, self.nlayers = cfg.nhid, cfg.nlayers
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.Embedding(ntoken, cfg.emsize)
        if cfg.model in ("LSTM", "GRU"):
            rnn = getattr(nn, cfg.model)
            self.rnn = rnn(cfg.emsize, cfg.nhid, cfg.nlayers, dropout=cfg.dropout)
        else:
            self.rnn = nn.RNN(cfg.emsize, cfg.nhid, cfg.nlayers,
                              nonlinearity=cfg.model[4:].lower(), dropout=cfg.dropout)
        self.decoder = nn.Linear(cfg.nhid, ntoken)
        if cfg.tied:
            self.decoder.weight = self.encoder.weight

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return TF.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        h = weight.new_zeros(self.nlayers, bsz, self.nhid)
        return (h, weight.new_zeros(self.nlayers, bsz, self.nhid)) if self.rnn_type == "LSTM" else h


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def evaluate(model: RNNModel, source: np.ndarray, cfg, ex: ModuleType) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(source.shape[1])
    with torch.no_grad():
        for i in range(0, len(source) - 1, cfg.bptt):
            data, targets = ex.get_batch(source, i, cfg.bptt)
            output, hidden = model(torch.from_numpy(data), hidden)
            total += len(data) * TF.nll_loss(output, torch.from_numpy(targets)).item()
    return total / (len(source) - 1)


def main(cfg, quiet: bool = False) -> dict:
    """Train as the example's main does (same corpus, batch order and initial weights)."""
    import tapegrad as tg

    ex = load_example()
    tg.manual_seed(cfg.seed)  # the tapegrad model's initial weights, as the example draws them
    corpus = ex.Corpus(cfg.train_sentences, cfg.valid_sentences, cfg.seed)
    init = ex.RNNModel(cfg, len(corpus)).state_dict()
    torch.manual_seed(cfg.seed)
    model = RNNModel(cfg, len(corpus))
    model.load_state_dict({k: torch.tensor(v.numpy()) for k, v in init.items()})
    train_data = ex.batchify(corpus.train, cfg.batch_size)
    val_data = ex.batchify(corpus.valid, cfg.eval_batch_size)
    history: dict = {"train_loss": [], "val_loss": [], "val_step": [], "lr": []}
    initial_val = evaluate(model, val_data, cfg, ex)
    lr, best_val, step, train_time = cfg.lr, math.inf, 0, 0.0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        hidden = model.init_hidden(cfg.batch_size)
        t0 = time.perf_counter()
        for i in range(0, len(train_data) - 1, cfg.bptt):
            data, targets = ex.get_batch(train_data, i, cfg.bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(torch.from_numpy(data), hidden)
            loss = TF.nll_loss(output, torch.from_numpy(targets))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
            history["train_loss"].append(loss.item())
            step += 1
            if step == cfg.max_steps:
                break
        train_time += time.perf_counter() - t0
        val = evaluate(model, val_data, cfg, ex)
        history["val_loss"].append(val)
        history["val_step"].append(step)
        history["lr"].append(lr)
        if not quiet:
            print(f"| end of epoch {epoch:3d} | lr {lr:6.2f} | valid loss {val:5.2f}")
        if val < best_val:
            best_val = val
        else:
            lr /= 4.0
        if step == cfg.max_steps:
            break
    return {**history, "initial_val_loss": initial_val, "steps": step,
            "steps_per_s": step / train_time}


if __name__ == "__main__":
    ex = load_example()
    compare = "--compare" in sys.argv
    cfg = ex.parse_args([a for a in sys.argv[1:] if a != "--compare"])
    if compare:
        ours = ex.main(replace(cfg, out=os.path.join(cfg.out, "tapegrad")), quiet=True)
    theirs = main(cfg)
    print(f"torch: {theirs['steps']} steps, {theirs['steps_per_s']:.2f} steps/s, "
          f"final valid loss {theirs['val_loss'][-1]:.4f}")
    if compare:
        a, b = np.array(ours["train_loss"]), np.array(theirs["train_loss"])
        gap = np.abs(a - b) / b
        print(f"tapegrad: {ours['steps']} steps, {ours['steps_per_s']:.2f} steps/s, "
              f"final valid loss {ours['val_loss'][-1]:.4f}")
        print(f"training loss, relative gap per step: max {gap.max():.2e}, mean {gap.mean():.2e}")
        print(f"speed ratio (steps/s, tapegrad / torch): "
              f"{ours['steps_per_s'] / theirs['steps_per_s']:.2f}")
