"""Two inputs, two outputs, raw tensors and one tape: the smallest tapegrad model.

    python examples/two_inputs_raw.py

A float input (a 4-number "sensor" reading) and an integer input (a token id) feed two branches;
the fused trunk has two heads (a class and a value) with two losses. One `with tg.Tape()` block
records everything: every Parameter gets its gradient, nothing is merged or moved by hand.
"""

from __future__ import annotations

import numpy as np

import tapegrad as tg

# -- config -----------------------------------------------------------------------------------
STEPS = 300     # full-batch gradient steps
LR = 0.1
N = 256         # synthetic examples
SEED = 0


def make_data(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    x = rng.standard_normal((N, 4))                 # float input
    tok = rng.integers(0, 5, N)                     # integer input: a token id in 0..4
    cls = ((x[:, 0] + (tok >= 2)) > 0.5).astype(np.int64)  # needs both inputs
    val = x[:, 1] * 0.5 + tok * 0.3                 # regression target, needs both
    return x.astype(np.float32), tok, cls, val.astype(np.float32)


def main(steps: int = STEPS, verbose: bool = True) -> dict:
    tg.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x, tok, cls, val = make_data(rng)
    P = tg.Parameter
    params = {
        "w_x": P(tg.randn(4, 16) * 0.5), "b_x": P(tg.zeros(16)),     # float branch
        "emb": P(tg.randn(5, 16) * 0.5),                             # token branch
        "w_cls": P(tg.randn(16, 2) * 0.3), "b_cls": P(tg.zeros(2)),  # head 1
        "w_val": P(tg.randn(16, 1) * 0.3), "b_val": P(tg.zeros(1)),  # head 2
    }
    xt, tokt = tg.tensor(x), tg.tensor(tok)
    onehot = tg.one_hot(tg.tensor(cls), 2)
    for step in range(steps + 1):
        with tg.Tape() as tape:
            h = tg.tanh(xt @ params["w_x"] + params["b_x"] + params["emb"][tokt])  # (N, 16)
            logits = h @ params["w_cls"] + params["b_cls"]                      # (N, 2)
            pred = (h @ params["w_val"] + params["b_val"])[:, 0]                # (N,)
            loss_cls = -(tg.log_softmax(logits, axis=-1) * onehot).sum(axis=-1).mean()
            loss_val = ((pred - val) ** 2).mean()
        grads = tape.gradient([loss_cls, loss_val])  # two outputs: their sum is differentiated
        for p in params.values():
            p.copy_(p - LR * grads[p])
        if verbose and step % 50 == 0:
            print(f"step {step:4d}  classification {loss_cls.item():.4f}  regression {loss_val.item():.4f}")
    acc = float((logits.numpy().argmax(-1) == cls).mean())
    if verbose:
        print(f"train accuracy {acc:.3f}")
    return {"accuracy": acc, "loss_cls": loss_cls.item(), "loss_val": loss_val.item()}


if __name__ == "__main__":
    main()
