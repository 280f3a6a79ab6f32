"""Programs that tests/test_distributed.py runs under mpirun (and, for references, in-process).

mpirun -n 2 python tests/mpi_worker.py train OUT.npz
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist

STEPS, LOCAL_BATCH, D_IN = 20, 4, 6
HANG_TIMEOUT = 3.0  # seconds: dist.init(timeout=...) of the "hang" programs


def make_model(dtype: str) -> tg.nn.Module:
    """Small layers, and a (1024, 64) weight of 256 kB (float32) that is over half a bucket
    when the bucket is 0.5 MB: a bucket of its own, reduced in place on the blocking path."""
    tg.manual_seed(0)
    model = tg.nn.Sequential(
        tg.nn.Linear(D_IN, 64), tg.nn.Tanh(), tg.nn.Linear(64, 1024), tg.nn.Tanh(),
        tg.nn.Linear(1024, 3),
    )
    return model.to(dtype) if dtype != "float32" else model


def data(world: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(STEPS, world * LOCAL_BATCH, D_IN) inputs and integer targets: the concatenated batches."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((STEPS, world * LOCAL_BATCH, D_IN)).astype(dtype)
    y = rng.integers(0, 3, (STEPS, world * LOCAL_BATCH))
    return x, y


def train(dtype: str, world: int, rank: int, overlap: bool = False) -> dict[str, np.ndarray]:
    """20 SGD-momentum steps on this rank's rows of each concatenated batch."""
    model = make_model(dtype)
    if rank > 0:  # a different start on the other ranks: broadcast_parameters must fix it
        for p in model.parameters():
            p._data = p._data * 0 + 1
    dist.broadcast_parameters(model)
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = data(world, dtype)
    lo, hi = rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH
    n_local = LOCAL_BATCH if dist.world_size() > 1 else world * LOCAL_BATCH
    if dist.world_size() == 1:
        lo, hi = 0, n_local
    reducer = dist.Reducer(list(model.parameters()), bucket_mb=0.0002)  # several buckets
    for s in range(STEPS):
        with tg.Tape() as tape:
            loss = tg.nn.functional.cross_entropy(
                model(tg.tensor(x[s, lo:hi])), tg.tensor(y[s, lo:hi])
            )
        if overlap:  # buckets reduced while backward goes on
            grads = reducer.wait(tape.gradient(loss, model, on_ready=reducer.ready))
        else:
            grads = dist.all_reduce(tape.gradient(loss, model), model=model, bucket_mb=0.5)
        opt.step(grads)
    return {k: v.numpy() for k, v in model.state_dict().items()}


def main_train(out: str) -> None:
    dist.init()
    w, r = dist.world_size(), dist.rank()
    res = {}
    for dtype in ("float64", "float32"):
        for overlap in (False, True):
            for k, v in train(dtype, w, r, overlap).items():
                res[f"{dtype}/{int(overlap)}/{k}"] = v
    gathered = dist.get_communicator().allgather_object(res)
    if r == 0:
        for other in gathered[1:]:  # every rank holds the same model
            for k, v in res.items():
                assert np.array_equal(other[k], v), k
        np.savez(out, **res)


def ckpt_run(ckpt: str, out: str, resume: bool) -> None:
    """10 steps over a DistributedSampler with dropout; a checkpoint after step 5."""
    dist.init()
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(D_IN, 16), tg.nn.Dropout(0.3), tg.nn.Linear(16, 3)).to(
        "float64"
    )
    dist.broadcast_parameters(model)
    tg.manual_seed(100 + dist.rank())  # dropout masks differ per rank
    opt = tg.optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(2)
    ds = tg.data.TensorDataset(rng.standard_normal((30, D_IN)), rng.integers(0, 3, 30))
    loader = tg.data.DataLoader(ds, batch_size=4, sampler=tg.data.DistributedSampler(ds, seed=7))
    step = 0
    if resume:
        step = dist.load_checkpoint(ckpt, model, opt, loader=loader)["step"]
    while step < 10:
        for xb, yb in loader:
            with tg.Tape() as tape:
                loss = tg.nn.functional.cross_entropy(model(xb), yb)
            opt.step(dist.all_reduce(tape.gradient(loss, model)))
            step += 1
            if step == 5 and not resume:
                dist.save_checkpoint(ckpt, model, opt, step=step, loader=loader)
            if step == 10:
                break
    if dist.is_main():
        np.savez(out, **{k: v.numpy() for k, v in model.state_dict().items()})


def failing(how: str) -> None:
    """Rank 1 fails at step 3: killed, raising, hanging (in user code, before the blocking
    ``all_reduce`` or the overlapped ``Reducer.wait``), or with another model from the start."""
    dist.init(timeout=HANG_TIMEOUT if how.startswith("hang") else 1800.0)
    model = tg.nn.Linear(3, 2 + (dist.rank() if how == "mismatch" else 0))
    dist.broadcast_parameters(model)
    reducer = dist.Reducer(list(model.parameters()))
    for step in range(100000):
        if dist.rank() == 1 and step == 3:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "raise":
                raise RuntimeError("rank 1 failed on purpose")
            if how.startswith("hang"):
                time.sleep(3600)
        with tg.Tape() as tape:
            loss = model(tg.ones(2, 3)).sum()
        if how == "hang-overlapped":
            reducer.wait(tape.gradient(loss, model, on_ready=reducer.ready))
        else:
            dist.all_reduce(tape.gradient(loss, model))
        time.sleep(0.01)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "train":
        main_train(sys.argv[2])
    elif cmd == "ckpt":
        ckpt_run(sys.argv[2], sys.argv[3], sys.argv[4] == "resume")
    else:
        failing(cmd)
