"""Data-parallel scaling: the MLP (b) on 2 processes x 1 thread against 1 process x 1 thread.

    python benchmarks/scaling.py                 # prints the row
    python benchmarks/scaling.py --append BENCHMARKS.md

Each process trains workload (b) (784-512-512-10, batch 128 per process, SGD) with one BLAS
thread, bound to a core of its own (``mpirun --bind-to core``; ``--mca mpi_yield_when_idle 1``
so that a waiting rank yields its core instead of spinning); gradients are averaged with
``tapegrad.distributed`` every step. Throughput is samples per second over all processes, so
perfect scaling is 2.0. The one-process run goes through the same code, where the reducer
copies nothing and communicates nothing (a plain training step). Each configuration runs in
several rounds (alternating 1 and 2 processes) and the medians are reported. Two steps
alternate within a run: the overlapped one reduces its buckets while backward runs
(``tape.gradient(..., on_ready=reducer.ready)``; the time spent in ``reducer.wait``
afterwards is what the overlap leaves exposed) and the blocking one runs ``all_reduce``
after backward. The slowest rank's median sets each number (the others wait for it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _blas_threads() -> int | None:
    """The BLAS thread count numpy runs with (threadpoolctl, when installed)."""
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415
    except ImportError:
        return None
    n = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(n) if n else None


def worker(steps: int) -> None:
    import workloads as W  # noqa: PLC0415

    import tapegrad as tg  # noqa: PLC0415
    import tapegrad.distributed as dist  # noqa: PLC0415

    dist.init()
    threads = _blas_threads()
    if threads not in (None, 1):
        raise RuntimeError(f"scaling: numpy's BLAS runs {threads} threads; the run needs 1")
    d = W.dims("b")
    model = W._tg_model("b", d)
    model.load_state_dict(W.make_weights("b"))
    dist.broadcast_parameters(model)
    opt = tg.optim.SGD(model.parameters(), lr=W.LR)
    x, y = (tg.tensor(a) for a in W.make_batch("b"))
    loss_fn = W._tg_loss("b", d)
    params = list(model.parameters())
    reducer = dist.Reducer(params)
    comm = dist.get_communicator()
    t_over, t_exposed, t_block, t_fb = [], [], [], []
    for s in range(steps + 3):
        comm.barrier()
        t0 = time.perf_counter()
        with tg.Tape() as tape:  # overlapped: buckets reduced while backward goes on
            loss = loss_fn(model(x), y)
        grads = tape.gradient(loss, model, on_ready=reducer.ready)
        t1 = time.perf_counter()
        reducer.wait(grads)  # what the overlap leaves exposed
        t2 = time.perf_counter()
        opt.step(grads)
        t3 = time.perf_counter()
        comm.barrier()
        t4 = time.perf_counter()
        with tg.Tape() as tape:  # blocking: backward, then one Allreduce per bucket
            loss = loss_fn(model(x), y)
        grads = dist.all_reduce(tape.gradient(loss, model))
        opt.step(grads)
        t5 = time.perf_counter()
        if s >= 3:  # warm-up steps left out
            t_over.append(t3 - t0)
            t_exposed.append(t2 - t1)
            t_block.append(t5 - t4)
            t_fb.append(t1 - t0)
    times = comm.allgather_object(
        [statistics.median(v) for v in (t_over, t_exposed, t_block, t_fb)]
    )
    cpus = comm.allgather_object(sorted(os.sched_getaffinity(0)))
    if comm.rank == 0:
        worst = [max(t[i] for t in times) for i in range(4)]  # the slowest rank sets the pace
        print("RESULT " + json.dumps(worst), flush=True)
        print(f"CPUS {cpus} BLAS threads {threads}", flush=True)


def launch(n: int, steps: int, bind: str = "core") -> list[float]:
    mpirun = Path(sys.executable).parent / "mpirun"
    cmd = [str(mpirun), "-n", str(n)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [
        "--bind-to",
        bind,
        "--mca",  # a waiting rank yields its core (the machine is shared) instead of spinning
        "mpi_yield_when_idle",
        "1",
        sys.executable,
        __file__,
        "--worker",
        "--steps",
        str(steps),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
    line = [s for s in r.stdout.splitlines() if s.startswith("RESULT ")]
    print(*(s for s in r.stdout.splitlines() if s.startswith("CPUS ")), file=sys.stderr)
    if r.returncode != 0 or not line:
        raise RuntimeError(f"scaling: mpirun -n {n} failed:\n{r.stderr[-2000:]}")
    return json.loads(line[0][7:])


def measure(rounds: int, steps: int, bind: str = "core") -> dict[str, float]:
    one, two = [], []
    load = []
    for _ in range(rounds):
        one.append(launch(1, steps, bind))
        two.append(launch(2, steps, bind))
        load.append(os.getloadavg()[0])
    batch = 128
    ratios = [(2 * batch / b[0]) / (batch / a[0]) for a, b in zip(one, two, strict=True)]
    return {
        "step_1": statistics.median(a[0] for a in one),
        "step_2": statistics.median(b[0] for b in two),
        "ratio": statistics.median(ratios),
        "exposed": statistics.median(b[1] / b[0] for b in two),
        "exposed_ms": statistics.median(b[1] for b in two) * 1e3,
        "blocking_2": statistics.median(b[2] for b in two),
        "blocking_ratio": statistics.median(
            (2 * batch / b[2]) / (batch / a[2]) for a, b in zip(one, two, strict=True)
        ),
        "fb_1": statistics.median(a[3] for a in one),
        "fb_2": statistics.median(b[3] for b in two),
        "rounds": rounds,
        "load": statistics.median(load),
    }


def row(m: dict[str, float]) -> str:
    ok = "✓" if m["ratio"] >= 1.8 else "✗"
    return (
        f"| (b) MLP 784-512-512-10, batch 128 per process | {m['step_1'] * 1e3:.2f} ms | "
        f"{m['step_2'] * 1e3:.2f} ms | {m['ratio']:.2f}x (≥ 1.80 {ok}) | "
        f"{100 * m['exposed']:.1f}% ({m['exposed_ms']:.2f} ms) | "
        f"{m['blocking_2'] * 1e3:.2f} ms ({m['blocking_ratio']:.2f}x) | "
        f"{m['fb_1'] * 1e3:.2f} / {m['fb_2'] * 1e3:.2f} ms | {m['load']:.1f} |"
    )


HEADER = """
## Data-parallel scaling (`benchmarks/scaling.py`)

Workload (b) on MPI (`tapegrad.distributed`), one BLAS thread per process, each process bound
to its own core (`mpirun --bind-to core --mca mpi_yield_when_idle 1`), batch 128 per process;
the one-process run is a plain step (the reducer does nothing in a world of one); throughput is
samples/s over all processes (2.00x is perfect scaling); medians over {rounds} rounds, 1 and 2
processes alternating. The step reduces its buckets while backward runs (`tape.gradient(..., on_ready=
reducer.ready)`); exposed all-reduce is the share of the 2-process step spent in
`reducer.wait` after backward. The last column is the same step with the blocking
`all_reduce` after backward (its throughput ratio in parentheses). Forward+backward alone,
1 and 2 processes, shows how much of a shortfall is the CPU shared with other work rather than
communication (it would not change with perfect scaling); the load average (median over the
rounds) is at the end.

| workload | 1 process x 1 thread, per step | 2 processes x 1 thread, per step (overlapped) | throughput ratio | exposed all-reduce | blocking all_reduce, per step | forward+backward, 1 / 2 processes | load |
|---|---|---|---|---|---|---|---|
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--append", help="markdown file to append the section to")
    ap.add_argument("--bind", default="core", help="mpirun --bind-to (core, none, ...)")
    args = ap.parse_args()
    if args.worker:
        worker(args.steps)
        return
    m = measure(args.rounds, args.steps, args.bind)
    text = HEADER.format(rounds=args.rounds) + row(m) + "\n"
    print(text)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
