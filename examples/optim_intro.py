"""Optimizers, the dfdx way: a small MLP, SGD with Nesterov momentum, a loss that goes down.

    python examples/optim_intro.py            # 20 updates
    python examples/optim_intro.py --small    # 5 updates, as in dfdx's 05-optim example
    python examples/optim_intro.py --steps 50 --lr 0.05

A port of dfdx's `05-optim.rs`. The model is Linear(5, 32), ReLU, Linear(32, 32), ReLU,
Linear(32, 2), Tanh; the data is one random (3, 5) input and one random (3, 2) target; the loss
is their mean squared error (the Tanh output cannot reach a target beyond +-1, so the loss levels
off above zero, at a floor the script prints). The first update is written dfdx-style
(`x.trace(tape)` puts the input on a tape, `loss.backward()` returns the gradients); the rest use
the `with tg.Tape()` block, which records the same thing. Writes a checkpoint into --out
(runs/optim_intro).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    steps: int = 20           # optimizer updates after the first one
    lr: float = 0.1           # dfdx: SgdConfig { lr: 1e-1, momentum: Nesterov(0.9) }
    momentum: float = 0.9
    seed: int = 0
    out: str = "runs/optim_intro"


# --small: the 5 updates of dfdx's example
SMALL = {"steps": 5}


def mlp() -> nn.Sequential:
    """dfdx: ((Linear<5, 32>, ReLU), (Linear<32, 32>, ReLU), (Linear<32, 2>, Tanh))."""
    return nn.Sequential(
        nn.Linear(5, 32), nn.ReLU(),
        nn.Linear(32, 32), nn.ReLU(),
        nn.Linear(32, 2), nn.Tanh(),
    )


def main(cfg: Config, quiet: bool = False) -> dict:
    tg.manual_seed(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)
    model = mlp()
    opt = tg.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=True)

    # some dummy data to optimize with
    x = tg.randn(3, 5)
    y = tg.randn(3, 2)

    # dfdx-style first step: tracing the input opens a tape; the parameters join it when they
    # meet the traced input, and backward() hands back every gradient as a value.
    tape = tg.Tape()
    prediction = model(x.trace(tape))
    loss = F.mse_loss(prediction, y)
    losses = [loss.item()]
    if not quiet:
        print(f"loss before any update: {losses[0]:.6f}")
    grads = loss.backward()
    opt.step(grads)  # raises, naming the parameter, if one got no gradient ("unused params")

    # the same thing, written with the `with` block (it watches every parameter)
    for i in range(cfg.steps):
        with tg.Tape() as tape:
            loss = F.mse_loss(model(x), y)
        opt.step(tape.gradient(loss, model))
        losses.append(loss.item())
        if not quiet:
            print(f"loss after {i + 1:2d} update(s): {losses[-1]:.6f}")

    with tg.no_grad():
        final = F.mse_loss(model(x), y).item()
    # tanh stays in (-1, 1): a target beyond +-1 keeps the loss above this floor
    floor = float(((abs(y.numpy()) - 1).clip(min=0) ** 2).mean())
    tg.save(
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": cfg.steps + 1,
         "config": asdict(cfg)},
        os.path.join(cfg.out, "checkpoint.safetensors"),
    )
    if not quiet:
        print(f"final loss {final:.6f} (from {losses[0]:.6f}; the tanh output cannot go below "
              f"{floor:.6f} on these targets)")
        print(f"wrote {cfg.out}/checkpoint.safetensors")
    return {"initial_loss": losses[0], "final_loss": final, "floor": floor, "losses": losses}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="5 updates, as in dfdx")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = Config(**SMALL) if a.small else Config()
    for k in ("steps", "lr", "out"):
        if getattr(a, k) is not None:
            setattr(cfg, k, getattr(a, k))
    main(cfg)
