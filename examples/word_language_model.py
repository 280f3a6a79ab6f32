"""A word-level LSTM language model, a port of pytorch/examples' word_language_model.

    python examples/word_language_model.py            # full size (the original's defaults)
    python examples/word_language_model.py --small    # a few seconds, for tests

The model is the original's RNNModel: Embedding -> dropout -> LSTM (or GRU, RNN_TANH, RNN_RELU)
-> dropout -> Linear decoder, optionally with the decoder tied to the embedding. Training is the
original's too: plain SGD at lr 20 with the gradient clipped to a global norm of 0.25, truncated
backpropagation through time (bptt 35, the hidden state carried from batch to batch but detached),
and the learning rate divided by 4 after every epoch whose validation loss does not improve.

The original reads Wikitext-2 from disk; nothing is downloaded here, so the corpus is generated:
sentences from a small fixed English grammar (subject-verb number agreement, adjectives,
prepositional phrases and relative clauses), drawn with a seeded generator, one ``<eos>`` after
each sentence as the original's data.py does. Prints the losses, writes loss.png and a checkpoint
into --out (runs/word_language_model). benchmarks/word_language_model_torch.py trains the same
model in PyTorch on the same batches from the same initial weights.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass, fields

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    model: str = "LSTM"         # LSTM, GRU, RNN_TANH or RNN_RELU
    emsize: int = 200           # size of word embeddings
    nhid: int = 200             # hidden units per layer
    nlayers: int = 2
    lr: float = 20.0            # initial learning rate (plain SGD)
    clip: float = 0.25          # gradient clipping (global norm)
    epochs: int = 6
    batch_size: int = 20
    eval_batch_size: int = 10
    bptt: int = 35              # sequence length of truncated BPTT
    dropout: float = 0.2        # dropout after the embedding, between and after the RNN layers
    tied: bool = False          # tie the decoder weight to the embedding (needs emsize == nhid)
    max_steps: int = 0          # stop after this many training batches (0: run every epoch)
    train_sentences: int = 20_000
    valid_sentences: int = 2_000
    seed: int = 1111
    out: str = "runs/word_language_model"


# --small (and the tests): a narrow model on a short corpus, a few seconds
SMALL = {"emsize": 32, "nhid": 32, "epochs": 4, "train_sentences": 4_000,
         "valid_sentences": 300}


# -- data: sentences from a small grammar ----------------------------------------------------
NOUNS = {"sg": ["cat", "dog", "bird", "teacher", "child", "farmer", "robot", "king"],
         "pl": ["cats", "dogs", "birds", "teachers", "children", "farmers", "robots", "kings"]}
VERBS = {"sg": ["sees", "likes", "follows", "finds", "hears", "helps"],
         "pl": ["see", "like", "follow", "find", "hear", "help"]}
INTRANSITIVE = {"sg": ["sleeps", "runs", "sings", "waits"], "pl": ["sleep", "run", "sing", "wait"]}
ADJECTIVES = ["old", "small", "happy", "red", "quiet", "clever"]
PLACES = ["the garden", "the house", "the river", "the market", "the forest"]
PREPOSITIONS = ["near", "in", "behind"]


def noun_phrase(rng: np.random.Generator, depth: int = 0) -> tuple[list[str], str]:
    """A noun phrase and its number ('sg' or 'pl')."""
    num = "sg" if rng.random() < 0.5 else "pl"
    words = ["the" if num == "pl" or rng.random() < 0.6 else "a"]
    while rng.random() < 0.3 and len(words) < 3:
        words.append(ADJECTIVES[rng.integers(len(ADJECTIVES))])
    words.append(NOUNS[num][rng.integers(len(NOUNS[num]))])
    if depth == 0 and rng.random() < 0.2:  # a relative clause agrees with its head noun
        words += ["that", *verb_phrase(rng, num, depth + 1)]
    return words, num


def verb_phrase(rng: np.random.Generator, num: str, depth: int = 0) -> list[str]:
    if rng.random() < 0.3:
        words = [INTRANSITIVE[num][rng.integers(len(INTRANSITIVE[num]))]]
    else:
        obj, _ = noun_phrase(rng, depth + 1)
        words = [VERBS[num][rng.integers(len(VERBS[num]))], *obj]
    if rng.random() < 0.25:
        words += [PREPOSITIONS[rng.integers(len(PREPOSITIONS))], *PLACES[rng.integers(5)].split()]
    return words


def sentence(rng: np.random.Generator) -> list[str]:
    subject, num = noun_phrase(rng)
    return [*subject, *verb_phrase(rng, num), "."]


class Corpus:
    """Train, valid and test id streams and the dictionary (the original's data.Corpus)."""

    def __init__(self, train: int, valid: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.idx2word: list[str] = []
        self.word2idx: dict[str, int] = {}
        self.train = self.tokenize(rng, train)
        self.valid = self.tokenize(rng, valid)
        self.test = self.tokenize(rng, valid)

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def tokenize(self, rng: np.random.Generator, sentences: int) -> np.ndarray:
        ids = [self.add_word(w) for _ in range(sentences) for w in [*sentence(rng), "<eos>"]]
        return np.array(ids, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.idx2word)


def batchify(data: np.ndarray, bsz: int) -> np.ndarray:
    """(n,) -> (n // bsz, bsz): column j is the j-th contiguous slice of the stream."""
    nbatch = len(data) // bsz
    return np.ascontiguousarray(data[: nbatch * bsz].reshape(bsz, -1).T)


def get_batch(source: np.ndarray, i: int, bptt: int) -> tuple[np.ndarray, np.ndarray]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


# -- model ------------------------------------------------------------------------------------
class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, cfg: Config, ntoken: int) -> None:
        super().__init__()
        self.ntoken, self.rnn_type = ntoken, cfg.model
        self.nhid, self.nlayers = cfg.nhid, cfg.nlayers
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.Embedding(ntoken, cfg.emsize)
        if cfg.model in ("LSTM", "GRU"):
            rnn = getattr(nn, cfg.model)
            self.rnn = rnn(cfg.emsize, cfg.nhid, cfg.nlayers, dropout=cfg.dropout)
        elif cfg.model in ("RNN_TANH", "RNN_RELU"):
            self.rnn = nn.RNN(cfg.emsize, cfg.nhid, cfg.nlayers,
                              nonlinearity=cfg.model[4:].lower(), dropout=cfg.dropout)
        else:
            raise ValueError(f"model must be LSTM, GRU, RNN_TANH or RNN_RELU, got {cfg.model!r}")
        self.decoder = nn.Linear(cfg.nhid, ntoken)
        if cfg.tied:  # Press & Wolf 2016, Inan et al. 2016
            if cfg.nhid != cfg.emsize:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input: tg.Tensor, hidden: object) -> tuple[tg.Tensor, object]:
        emb = self.drop(self.encoder(input))  # (T, B, emsize)
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).reshape(-1, self.ntoken)  # (T * B, ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int) -> object:
        h = tg.zeros(self.nlayers, bsz, self.nhid)
        return (h, tg.zeros(self.nlayers, bsz, self.nhid)) if self.rnn_type == "LSTM" else h


def repackage_hidden(h: object) -> object:
    """Detach the hidden state from the batch that produced it (truncated BPTT)."""
    return h.detach() if isinstance(h, tg.Tensor) else tuple(repackage_hidden(v) for v in h)


def evaluate(model: RNNModel, source: np.ndarray, cfg: Config) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(source.shape[1])
    with tg.no_grad():
        for i in range(0, len(source) - 1, cfg.bptt):
            data, targets = get_batch(source, i, cfg.bptt)
            output, hidden = model(tg.tensor(data), hidden)
            total += len(data) * F.nll_loss(output, tg.tensor(targets)).item()
    return total / (len(source) - 1)


def plot(history: dict, ntokens: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    loss = np.array(history["train_loss"])
    w = max(1, len(loss) // 50)  # moving average of the per-batch training loss
    ax.plot(np.arange(w, len(loss) + 1), np.convolve(loss, np.ones(w) / w, mode="valid"),
            color="#3465a4", lw=1, label="training (moving average)")
    ax.plot(history["val_step"], history["val_loss"], "s-", ms=4, color="#cc0000",
            label="validation")
    ax.axhline(math.log(ntokens), color="gray", ls="--", lw=0.8,
               label=f"uniform guess, ln {ntokens}")
    ax.set(xlabel="training step", ylabel="cross-entropy (nats per word)",
           title="Word-level LSTM language model on a generated corpus")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- training ---------------------------------------------------------------------------------
def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    tg.manual_seed(cfg.seed)
    corpus = Corpus(cfg.train_sentences, cfg.valid_sentences, cfg.seed)
    train_data = batchify(corpus.train, cfg.batch_size)
    val_data = batchify(corpus.valid, cfg.eval_batch_size)
    test_data = batchify(corpus.test, cfg.eval_batch_size)
    model = RNNModel(cfg, len(corpus))
    opt = tg.optim.SGD(model.parameters(), lr=cfg.lr)
    history: dict = {"train_loss": [], "val_loss": [], "val_step": [], "lr": []}
    initial_val = evaluate(model, val_data, cfg)
    lr, best_val, best_state, step, train_time = cfg.lr, math.inf, model.state_dict(), 0, 0.0
    batches = range(0, len(train_data) - 1, cfg.bptt)
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        hidden = model.init_hidden(cfg.batch_size)
        t0 = time.perf_counter()
        for i in tqdm(batches, desc=f"epoch {epoch}", disable=quiet, unit="batch", leave=False):
            data, targets = get_batch(train_data, i, cfg.bptt)
            hidden = repackage_hidden(hidden)
            with tg.Tape() as tape:
                output, hidden = model(tg.tensor(data), hidden)
                loss = F.nll_loss(output, tg.tensor(targets))
            opt.step(tape.gradient(loss, model).clip_by_global_norm(cfg.clip))
            history["train_loss"].append(loss.item())
            step += 1
            if step == cfg.max_steps:
                break
        train_time += time.perf_counter() - t0
        val = evaluate(model, val_data, cfg)
        history["val_loss"].append(val)
        history["val_step"].append(step)
        history["lr"].append(lr)
        if not quiet:
            tqdm.write(f"| end of epoch {epoch:3d} | lr {lr:6.2f} | train loss "
                       f"{np.mean(history['train_loss'][-len(batches):]):5.2f} | valid loss "
                       f"{val:5.2f} | valid ppl {math.exp(val):8.2f}")
        if val < best_val:
            best_val, best_state = val, {k: v.numpy().copy() for k, v in model.state_dict().items()}
        else:  # anneal the learning rate when validation does not improve
            lr /= 4.0
            for group in opt.param_groups:
                group["lr"] = lr
        if step == cfg.max_steps:
            break
    model.load_state_dict(best_state)
    test = evaluate(model, test_data, cfg)
    os.makedirs(cfg.out, exist_ok=True)
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
             "config": asdict(cfg)}, os.path.join(cfg.out, "checkpoint.safetensors"))
    plot(history, len(corpus), os.path.join(cfg.out, "loss.png"))
    if not quiet:
        print(f"| end of training | test loss {test:5.2f} | test ppl {math.exp(test):8.2f} | "
              f"{step / train_time:.2f} steps/s")
    return {**history, "initial_val_loss": initial_val, "test_loss": test, "steps": step,
            "steps_per_s": step / train_time, "ntokens": len(corpus)}


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    for f in fields(Config):
        if f.type == "bool" or isinstance(f.default, bool):
            p.add_argument(f"--{f.name}", action="store_true")
        else:
            p.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    p.add_argument("--small", action="store_true", help="a few seconds, for tests")
    args = vars(p.parse_args(argv))
    small = args.pop("small")
    cfg = Config(**args)
    if small:
        cfg = Config(**{**asdict(cfg), **SMALL})
    return cfg


if __name__ == "__main__":
    main(parse_args())
