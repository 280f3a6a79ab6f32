"""The digits CNN trained data-parallel: one model on N processes, gradients averaged by MPI.

    mpirun -n 2 python examples/data_parallel.py            # 2 processes on this machine
    mpirun -n 2 python examples/data_parallel.py --small    # a few seconds, for tests
    mpirun -n 8 --hostfile hosts python examples/data_parallel.py   # several machines
    python examples/data_parallel.py                         # 1 process: no MPI needed

(install with pip install 'tapegrad[mpi]'; as root add --allow-run-as-root, and
--oversubscribe to start more processes than cores; on one machine, OMP_NUM_THREADS=1 with
--bind-to core gives each process a core of its own, and --mca mpi_yield_when_idle 1 keeps a
waiting process from spinning on a core that other jobs share.) Each process builds the model, takes rank
0's weights (broadcast_parameters), reads its own shard of every epoch
(tg.data.DistributedSampler) and averages the gradients with the others every step
(dist.all_reduce). The global batch is batch_size x N. Rank 0 prints, evaluates and writes
the checkpoint (with every rank's random state and loader position), so --resume continues
the run under the same number of processes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist
import tapegrad.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_cnn import DigitsCNN, evaluate  # noqa: E402  (the model of examples/digits_cnn.py)


# -- config -----------------------------------------------------------------------------------
@dataclass
class Config:
    epochs: int = 20
    batch_size: int = 32      # per process: the global batch is batch_size x world size
    lr: float = 3e-3
    weight_decay: float = 1e-4
    width: int = 32
    dropout: float = 0.25
    test_fraction: float = 0.25
    seed: int = 0
    out: str = "runs/data_parallel"
    resume: bool = False


SMALL = {"epochs": 2, "width": 8}


def main(cfg: Config) -> dict:
    dist.init()
    rank, world = dist.rank(), dist.world_size()
    tg.manual_seed(cfg.seed)
    data = tg.data.load_digits()
    test_set, train_set = tg.data.random_split(
        data, [cfg.test_fraction, 1 - cfg.test_fraction], generator=tg.Generator(cfg.seed)
    )
    sampler = tg.data.DistributedSampler(train_set, seed=cfg.seed, drop_last=True)
    loader = tg.data.DataLoader(train_set, cfg.batch_size, sampler=sampler, drop_last=True,
                                progress=True)  # the bar shows on rank 0 only
    model = DigitsCNN(cfg.width, cfg.dropout)
    dist.broadcast_parameters(model)  # every rank starts from rank 0's weights
    tg.manual_seed(cfg.seed + 1 + rank)  # dropout masks: a stream of its own per rank
    opt = tg.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ckpt = os.path.join(cfg.out, "checkpoint.safetensors")
    os.makedirs(cfg.out, exist_ok=True)
    step = 0
    if cfg.resume and os.path.exists(ckpt):
        step = dist.load_checkpoint(ckpt, model, opt, loader=loader)["step"]
    t0 = time.perf_counter()
    while step < cfg.epochs * len(loader):
        for x, y in loader:  # this rank's (B, 1, 8, 8), (B,)
            with tg.Tape() as tape:
                loss = F.cross_entropy(model(x), y)
            grads = dist.all_reduce(tape.gradient(loss, model))
            opt.step(grads)
            step += 1
        dist.save_checkpoint(ckpt, model, opt, step=step, config=asdict(cfg), loader=loader)
    m = evaluate(model, tg.data.DataLoader(test_set, 512))
    result = {"test_accuracy": m["accuracy"], "steps": step, "world_size": world,
              "seconds": round(time.perf_counter() - t0, 1)}
    if dist.is_main():
        print(f"{world} process(es): held-out accuracy {100 * m['accuracy']:.2f}% after {step} "
              f"steps of {cfg.batch_size} x {world} images, {result['seconds']} s; wrote {ckpt}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a few seconds (tests)")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    ap.add_argument("--out", default=Config.out)
    args = ap.parse_args()
    cfg = Config(**(SMALL if args.small else {}), out=args.out, resume=args.resume)
    np.seterr(over="ignore")
    main(cfg)
