"""tapegrad against PyTorch eager, JAX jit and hand-written numpy, side by side in one run.

    python benchmarks/suite.py               # full run: BENCHMARKS.md, benchmarks/results.png
    python benchmarks/suite.py --quick       # smoke run: workloads a, b, f, and h, i and their
                                             # kernel table at tiny size, fewer rounds; prints
    python benchmarks/suite.py --blas-env    # also re-run (g) with OPENBLAS_CORETYPE and
                                             # OPENBLAS_L2_SIZE unset, in a subprocess
    python benchmarks/suite.py --only b,g    # some workloads (no file written unless --out)
    python benchmarks/suite.py --from-json benchmarks/results.json   # re-render the report

Each workload (see workloads.py) runs one full training step (forward, backward, SGD update)
per framework from the same weights and batch. Rounds alternate between frameworks (the order
rotates each round); each round times enough steps to last ``--min-time`` seconds, and the
report gives the median per-step time over the rounds. A round during which other processes
took more than MAX_LOAD of the CPU is set aside and re-run once the machine is quiet (waiting at
most ``--max-wait`` seconds per workload); ratios that rest on busy rounds are marked. Ratios
are tapegrad's steps/s over the peer's (above 1: tapegrad is faster). Peak memory is measured
in a fresh subprocess per (framework, workload): the rise of the peak RSS over a few steps
after warm-up steps. The per-kernel table (benchmarks/kernels.py) times each convolution,
pooling, normalisation, loss and attention shape of workloads c, d, e, h and i forward and
backward in tapegrad and PyTorch.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # run as a script or imported by the smoke test
    sys.path.insert(0, str(HERE))

import jit_cost  # noqa: E402
import kernels as K  # noqa: E402
import workloads as W  # noqa: E402

# tapegrad steps/s over PyTorch eager's that the project aims for
TARGETS = {"a": 2.0, "b": 1.25, "c": 1.5, "d": 1.1, "e": 1.1, "h": 1.0, "i": 1.0}
GEMM_TARGET = 0.90  # (g): tapegrad's FLOP rate over numpy's raw GEMM rate
MEMORY_TARGET = 1.01  # peak memory per step over PyTorch's: at most equal (within 1%)
MEMORY_FLOOR = 1 << 20  # below 1 MB on both sides a rise is page and allocator noise
OVERHEAD_TARGETS = {"recorded": 1.0, "untraced": 0.5}  # benchmarks/overhead.py's, as speed ratios
BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
MAX_LOAD = 0.15  # a round is "quiet" when other processes took at most this share of the CPU
WARMUP_STEPS = 3  # tg.compile captures twice before it replays
MEMORY_STEPS = 3
# Allocator settings for the memory subprocesses: a fixed mmap threshold (glibc's default) turns
# off glibc's dynamic threshold, so freed large arrays leave RSS instead of staying cached.
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


# -- the machine -----------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    """CPU, cores, numpy's BLAS (threadpoolctl), the OpenBLAS variables, library versions."""
    import numpy as np

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    blas = W.numpy_blas_info()
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": {k: blas.get(k) for k in ("internal_api", "version", "architecture", "corename",
                                          "num_threads", "threading_layer") if k in blas},
        "env": {k: os.environ.get(k) for k in BLAS_VARS},
        "loadavg_start": _loadavg(),
    }
    try:
        info["tapegrad_commit"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"], check=False, cwd=ROOT, capture_output=True,
            text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["tapegrad_commit"] = ""
    return info


def _library_info() -> dict[str, Any]:
    torch = W._torch()
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    out = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "torch_blas": m.group(1) if m else "?"}
    try:
        import jax

        out["jax"] = jax.__version__
    except ImportError:
        out["jax"] = None
    return out


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# -- timing ----------------------------------------------------------------------------------
def _gemm_bench(tiny: bool = False) -> W.Bench:
    return W.Bench("numpy-gemm", "g", W.numpy_gemm_step("g", tiny), lambda _: 0.0)


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, all) clock ticks of the whole machine so far, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return sum(v[:8]) - idle, sum(v[:8])


# Seconds to wait before each framework's round: after a call OpenBLAS's worker threads keep
# spinning for about 0.1 s (2^28 cycles, OPENBLAS_THREAD_TIMEOUT's default), PyTorch's OpenMP
# threads for a while too, and a round that starts at once shares the second core with them
# (benchmarks/kernels.py: PyTorch's convolutions measured up to 2x slower right after tapegrad's).
# One untimed step follows the pause: the first step after it ran slower (the (g) step 10-20%).
SETTLE = 0.25


def _time_steps(bench: W.Bench, n: int, min_time: float) -> tuple[float, int, float | None]:
    """One round: ``n`` steps, then more one at a time until ``min_time`` seconds have passed.
    Returns seconds per step, the number of steps, and the share of the machine's CPU that
    other processes (and the hypervisor, as steal) took meanwhile, when /proc/stat tells."""
    j0, c0 = _cpu_jiffies(), os.times()
    t0 = time.perf_counter()
    out = None
    for _ in range(n):
        out = bench.step()
    bench.value(out)  # JAX dispatches asynchronously: wait for the last step
    while time.perf_counter() - t0 < min_time:  # the estimate of n was short
        bench.value(bench.step())
        n += 1
    dt = time.perf_counter() - t0
    j1, c1 = _cpu_jiffies(), os.times()
    load = None
    if j0 and j1 and j1[1] > j0[1]:
        hz = os.sysconf("SC_CLK_TCK")
        ours = (c1.user + c1.system) - (c0.user + c0.system)
        others = (j1[0] - j0[0]) / hz - ours
        load = max(0.0, others / ((j1[1] - j0[1]) / hz))
    return dt / n, n, load


def machine_load(window: float = 0.5) -> float | None:
    """Share of the machine's CPU that other processes took during ``window`` seconds."""
    j0, c0 = _cpu_jiffies(), os.times()
    time.sleep(window)
    j1, c1 = _cpu_jiffies(), os.times()
    if not (j0 and j1 and j1[1] > j0[1]):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    ours = (c1.user + c1.system) - (c0.user + c0.system)
    return max(0.0, ((j1[0] - j0[0]) / hz - ours) / ((j1[1] - j0[1]) / hz))


def wait_for_quiet(budget: float, log=print) -> float:
    """Wait (up to ``budget`` seconds) until other processes leave the CPU; seconds waited."""
    t0 = time.perf_counter()
    said = False
    while time.perf_counter() - t0 < budget:
        load = machine_load()
        if load is None or load <= MAX_LOAD:
            break
        if not said:
            log(f"  waiting for the machine to quieten (others use {100 * load:.0f}% of the CPU)")
            said = True
        time.sleep(min(2.0, max(0.0, budget - (time.perf_counter() - t0))))
    return time.perf_counter() - t0


def time_workload(key: str, fws: list[str], rounds: int, min_time: float,
                  tiny: bool = False, log=print, max_wait: float = 0.0) -> dict[str, Any]:
    """Median seconds per step of each framework on workload ``key``, rounds alternating.

    A round during which other processes took more than ``MAX_LOAD`` of the machine's CPU is
    set aside and run again once the machine is quiet (waiting ``max_wait`` seconds at most in
    all), up to ``3 * rounds`` rounds; the median is over the quiet rounds, or over all of them
    when too few were quiet.
    """
    deadline = time.perf_counter() + max_wait
    res: dict[str, Any] = {"title": W.TITLES[key], "times": {}, "errors": {}, "first_loss": {},
                           "notes": {}, "unsupported": {}, "tiny": tiny}
    benches: dict[str, W.Bench] = {}
    for fw in fws:
        if not W.supports(fw, key):
            if fw != "numpy":  # the hand-written numpy steps are (a) and (b) by design
                res["unsupported"][fw] = W.unsupported(fw, key)
            continue
        try:
            b = W.build(fw, key, tiny)
            res["first_loss"][fw] = b.value(b.step())
            for _ in range(WARMUP_STEPS - 1):
                b.value(b.step())
            benches[fw] = b
        except Exception as e:  # report it, keep measuring the others
            res["errors"][fw] = f"{type(e).__name__}: {e}"
            log(f"  {fw}: {res['errors'][fw]}")
    if key == "g":
        benches["numpy-gemm"] = _gemm_bench(tiny)
    steps: dict[str, list[int]] = {fw: [] for fw in benches}
    guess: dict[str, int] = {}  # steps for the next round, from the last round's pace
    for fw, b in benches.items():
        t0 = time.perf_counter()
        b.value(b.step())
        guess[fw] = max(1, int(min_time / (time.perf_counter() - t0)))
    waited = wait_for_quiet(max(0.0, deadline - time.perf_counter()), log)
    quiet: dict[str, list[float]] = {fw: [] for fw in benches}
    samples: dict[str, list[tuple[float, float | None]]] = {fw: [] for fw in benches}
    order = list(benches)
    for r in range(3 * rounds):
        todo = [fw for fw in order if len(quiet[fw]) < rounds and fw not in res["errors"]]
        if not todo:
            break
        k = r % len(todo)
        for fw in todo[k:] + todo[:k]:  # rotate who goes first
            gc.collect()
            time.sleep(SETTLE)  # the last framework's worker threads stop spinning first
            benches[fw].value(benches[fw].step())  # and one step untimed: back to steady state
            try:
                t, n, load = _time_steps(benches[fw], guess[fw], min_time)
                steps[fw].append(n)
                guess[fw] = max(1, int(min_time / t))
            except Exception as e:
                res["errors"][fw] = f"{type(e).__name__}: {e}"
                continue
            samples[fw].append((t, load, r))
            if load is None or load <= MAX_LOAD:
                quiet[fw].append(t)
            else:  # let the other work pass
                waited += wait_for_quiet(max(0.0, deadline - time.perf_counter()), log)
    res["waited_s"] = round(waited, 1)
    for fw, smp in samples.items():
        if smp and fw not in res["errors"]:
            busy = len(quiet[fw]) < min(3, rounds)  # too few quiet rounds: use them all
            use = [s[0] for s in smp] if busy else quiet[fw]
            res["times"][fw] = {"median_s": statistics.median(use), "samples": smp,
                                "steps_per_round": int(statistics.median(steps[fw])),
                                "quiet_rounds": len(quiet[fw]),
                                "rounds": len(smp), "busy": busy}
        if benches[fw].notes:
            res["notes"][fw] = "; ".join(benches[fw].notes)
    if key == "g":
        res["gemm"] = {"flops": W.gemm_flops("g", tiny), "products": len(W.gemm_shapes("g", tiny))}
    benches.clear()
    gc.collect()
    return res


# -- memory ----------------------------------------------------------------------------------
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def memory_child(fw: str, key: str, tiny: bool = False) -> dict[str, Any]:
    """In this (fresh) process: the rise of peak RSS during MEMORY_STEPS steps after warm-up."""
    b = W.build(fw, key, tiny)
    for _ in range(WARMUP_STEPS):
        b.value(b.step())
    gc.collect()
    tg = sys.modules.get("tapegrad")
    if tg is not None:  # its kept array blocks are not live memory either: steps take them again
        tg.empty_cache()
    try:
        ctypes.CDLL(None).malloc_trim(0)  # return freed heap pages: the baseline is live memory
    except (OSError, AttributeError):
        pass
    reset = True
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak (VmHWM) so the warm-up step (and JIT) does not count
    except OSError:
        reset = False
    base = _status_kb("VmRSS")
    for _ in range(MEMORY_STEPS):
        b.value(b.step())
    peak = _status_kb("VmHWM")
    return {"rise_bytes": max(0, peak - base) * 1024, "baseline_bytes": base * 1024,
            "peak_reset": reset}


def measure_memory(fw: str, key: str, timeout: float = 600, tiny: bool = False) -> dict[str, Any]:
    """``memory_child`` in a fresh interpreter (the same method for every framework)."""
    env = {**os.environ, **MEMORY_ENV}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", fw, key]
    if tiny:
        cmd.append("--tiny")
    try:
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {p.returncode}: {tail}"}
    return json.loads(lines[-1])


# -- (f) per-op overhead, (g) with and without the OpenBLAS variables --------------------------
def run_overhead() -> dict[str, float]:
    """benchmarks/overhead.py's main(), its own alternating rounds; restores torch's threads."""
    import overhead

    torch = W._torch()
    threads = torch.get_num_threads()
    try:
        return overhead.main()
    finally:
        torch.set_num_threads(threads)  # overhead.py pins torch to one thread


def run_blas_env(rounds: int, min_time: float, max_wait: float, log=print) -> dict[str, Any]:
    """Workload (g) in two subprocesses: the OpenBLAS variables as found, and both unset."""
    out: dict[str, Any] = {}
    for label in ("as found", "unset"):
        env = dict(os.environ)
        if label == "unset":
            for k in BLAS_VARS:
                env.pop(k, None)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "g.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--only", "g", "--no-memory",
                   "--frameworks", "tapegrad,torch", "--rounds", str(rounds), "--min-time",
                   str(min_time), "--max-wait", str(max_wait), "--json", str(path)]
            log(f"(g) with the OpenBLAS variables {label}: {' '.join(cmd[1:])}")
            p = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                out[label] = {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
                continue
            r = json.loads(path.read_text())
        g = r["workloads"]["g"]
        out[label] = {"env": {k: env.get(k) for k in BLAS_VARS}, "blas": r["machine"]["blas"],
                      "times": {fw: t["median_s"] for fw, t in g["times"].items()},
                      "timings": g["times"],
                      "busy": any(t.get("busy") for t in g["times"].values()),
                      "flops": g["gemm"]["flops"]}
    return out


# -- the report ------------------------------------------------------------------------------
def _by_round(t: dict[str, Any]) -> dict[int, float]:
    """``{round: seconds per step}`` of the samples the median used (quiet ones, or all)."""
    out = {}
    for s in t.get("samples", []):
        if len(s) > 2 and (t.get("busy") or s[1] is None or s[1] <= MAX_LOAD):
            out[s[2]] = s[0]
    return out


def paired_ratio(t_num: dict[str, Any], t_den: dict[str, Any]) -> float:
    """The median over rounds of ``t_num``'s time over ``t_den``'s in the same round.

    Each round times every framework back to back, so a ratio within a round cancels the
    machine's drift from round to round (on a shared machine, often larger than the gap being
    measured). Falls back to the ratio of the medians when fewer than 3 rounds pair up (or for
    results saved before samples carried their round).
    """
    a, b = _by_round(t_num), _by_round(t_den)
    common = sorted(set(a) & set(b))
    if len(common) >= 3:
        return statistics.median(a[r] / b[r] for r in common)
    return t_num["median_s"] / t_den["median_s"]


def speed_ratio(wl: dict[str, Any], peer: str, ours: str = "tapegrad") -> float | None:
    """tapegrad's steps/s over ``peer``'s on one workload (None when either is missing)."""
    t = wl["times"]
    if ours not in t or peer not in t:
        return None
    return paired_ratio(t[peer], t[ours])


def is_busy(wl: dict[str, Any] | None, *fws: str) -> bool:
    """Whether any of ``fws`` was timed while other processes kept the CPU busy."""
    return wl is not None and any(wl["times"].get(fw, {}).get("busy") for fw in fws)


def memory_ratio(wl: dict[str, Any], fw: str = "tapegrad") -> float | None:
    """``fw``'s peak-memory rise over PyTorch's; None when missing or both below the floor."""
    mem = wl.get("memory", {})
    ours, ref = mem.get(fw, {}).get("rise_bytes"), mem.get("torch", {}).get("rise_bytes")
    if ours is None or not ref or max(ours, ref) < MEMORY_FLOOR:
        return None
    return ours / ref


def _memory_cell(wl: dict[str, Any] | None) -> str:
    if wl is None or not wl.get("memory"):
        return "—"
    r = memory_ratio(wl)
    mem = wl["memory"]
    if r is None and "rise_bytes" in mem.get("tapegrad", {}) and "rise_bytes" in mem.get(
            "torch", {}):
        return f"both < {MEMORY_FLOOR >> 20} MB"
    return "—" if r is None else f"{r:.2f}x {_check(r, MEMORY_TARGET, False)}"


def gemm_fraction(wl: dict[str, Any], fw: str = "tapegrad") -> float | None:
    """``fw``'s FLOP rate on (g) over numpy's raw GEMM rate on the same products."""
    t = wl["times"]
    if fw not in t or "numpy-gemm" not in t:
        return None
    return paired_ratio(t["numpy-gemm"], t[fw])


def _x(r: float | None, busy: bool = False) -> str:
    return "—" if r is None else f"{r:.2f}x" + ("†" if busy else "")


def _check(value: float | None, target: float, higher: bool = True) -> str:
    if value is None:
        return "—"
    ok = value >= target if higher else value <= target
    return "✓" if ok else "✗"


def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per workload with the speed ratios the chart and the table show."""
    rows = []
    for key, wl in results["workloads"].items():
        rows.append({
            "key": key, "label": f"({key})",
            "torch": speed_ratio(wl, "torch"), "jax": speed_ratio(wl, "jax"),
            "numpy": speed_ratio(wl, "numpy"),
            "compiled": speed_ratio(wl, "torch", ours="tapegrad-compiled"),
            "target": TARGETS.get(key), "unsupported": wl.get("unsupported", {}),
            "busy": {"torch": is_busy(wl, "tapegrad", "torch"),
                     "jax": is_busy(wl, "tapegrad", "jax"),
                     "numpy": is_busy(wl, "tapegrad", "numpy"),
                     "compiled": is_busy(wl, "tapegrad-compiled", "torch")},
        })
    ov = results.get("overhead")
    if ov:
        rows.append({"key": "f-rec", "label": "(f) recorded",
                     "torch": ov["torch autograd"] / ov["tapegrad recorded"], "jax": None,
                     "numpy": None, "compiled": None, "target": OVERHEAD_TARGETS["recorded"]})
        rows.append({"key": "f-unt", "label": "(f) untraced",
                     "torch": ov["torch (no autograd)"] / ov["tapegrad untraced"], "jax": None,
                     "numpy": ov["numpy"] / ov["tapegrad untraced"], "compiled": None,
                     "target": OVERHEAD_TARGETS["untraced"], "target_peer": "numpy"})
    return rows


def render_markdown(results: dict[str, Any], chart: str | None = None) -> str:
    m = results["machine"]
    cfg = results["config"]
    out = ["# Benchmarks", ""]
    out += [
        "tapegrad against PyTorch eager, JAX `jit` and hand-written numpy, measured side by side",
        "in one run of `make bench` (`python benchmarks/suite.py`). Every workload runs one full",
        "training step (forward, backward, plain SGD with lr 0.01) from the same initial weights",
        "(drawn once with numpy and copied into every framework) on the same batch. Rounds",
        "alternate between frameworks; each round times enough steps to last"
        f" {cfg['min_time']:g} s, and the",
        f"step times are medians over {cfg['rounds']} rounds. **A ratio is tapegrad's steps/s"
        " over the peer's, the median over rounds of the two measured in the same round:",
        "above 1.0, tapegrad is faster.** (Each round times every framework back to back, so a",
        "ratio within a round cancels the machine's drift between rounds.) Memory is the rise of",
        "peak RSS during a step, as a ratio to PyTorch's (below 1.0, tapegrad uses less).",
        "",
    ]
    hw = [f"- Machine: {m['cpu']}, {m['cores']} cores ({m['platform']})"]
    blas = m.get("blas") or {}
    arch = blas.get("architecture") or blas.get("corename") or "?"
    hw.append(f"- numpy's BLAS (threadpoolctl): internal_api `{blas.get('internal_api', '?')}`"
              f" {blas.get('version', '')}, architecture/corename `{arch}`, num_threads"
              f" {blas.get('num_threads', '?')}")
    env = ", ".join(f"`{k}`={v!r}" if v is not None else f"`{k}` unset"
                    for k, v in m["env"].items())
    hw.append(f"- Environment as found: {env}")
    lib = results.get("libraries", {})
    if lib:
        hw.append(f"- Python {m['python']}, numpy {m['numpy']}, PyTorch {lib.get('torch')} "
                  f"(BLAS {lib.get('torch_blas')}, {lib.get('torch_threads')} threads, set equal "
                  f"to numpy's BLAS threads), JAX {lib.get('jax') or 'not installed'}")
    hw.append(f"- tapegrad `{m.get('tapegrad_commit', '')}`; load average at start "
              f"{m.get('loadavg_start')}, at end {m.get('loadavg_end')} (a shared machine: "
              "other work adds noise)")
    out += hw + [""]

    # the headline table
    out += ["## Speed and memory ratios", ""]
    has_compiled = any(r["compiled"] is not None or "tapegrad-compiled" in r.get("unsupported", {})
                       for r in table_rows(results))
    head = ["workload", "tapegrad per step", "vs PyTorch eager", "target", "vs JAX jit",
            "vs numpy"]
    if has_compiled:
        head.append("tg.compile vs PyTorch")
    head.append("memory vs PyTorch (target ≤ 1.0)")  # met within 1%: page-level noise
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table_rows(results):
        key = row["key"]
        wl = results["workloads"].get(key)
        ov = results.get("overhead") or {}
        if wl is not None:
            t = wl["times"].get("tapegrad")
            per = f"{1e3 * t['median_s']:.3g} ms" if t else "—"
            title = f"({key}) {wl['title']}" + (" (run at its smoke-test size, not these shapes)" if wl.get("tiny") else "")
        elif key == "f-rec":
            per, title = f"{ov['tapegrad recorded']:.2f} µs/op", "(f) per-op, recorded on a tape"
        else:
            per, title = f"{ov['tapegrad untraced']:.2f} µs/op", "(f) per-op, untraced"
        if key == "g":
            frac = gemm_fraction(wl)
            target = ("—" if frac is None else
                      f"GEMM {100 * frac:.0f}% of numpy's (≥ {100 * GEMM_TARGET:.0f}%) "
                      f"{_check(frac, GEMM_TARGET)}")
        elif key == "f-unt":
            target = f"≥ {row['target']:.2f} vs numpy {_check(row['numpy'], row['target'])}"
        elif row["target"] is not None:
            target = f"≥ {row['target']:.2f} {_check(row['torch'], row['target'])}" + (
                "†" if row.get("busy", {}).get("torch") else "")
        else:
            target = "—"
        busy = row.get("busy", {})
        cells = [title, per, _x(row["torch"], busy.get("torch", False)), target,
                 _x(row["jax"], busy.get("jax", False)), _x(row["numpy"], busy.get("numpy", False))]
        if has_compiled:
            cells.append("not run (see notes)" if "tapegrad-compiled" in row.get("unsupported", {})
                         else _x(row["compiled"], busy.get("compiled", False)))
        cells.append(_memory_cell(wl))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    if any(any(r.get("busy", {}).values()) for r in table_rows(results)):
        out += ["† timed while other processes kept the CPU busy (fewer than 3 rounds in which "
                f"others took at most {100 * MAX_LOAD:.0f}% of the CPU, within the wait limit): "
                "not a reliable ratio; re-run `make bench` on a quiet machine.", ""]
    if chart:
        out += [f"![speed ratios]({chart})", ""]

    # absolute step times
    fws = [fw for fw in ("tapegrad", "tapegrad-compiled", "torch", "jax", "numpy", "numpy-gemm")
           if any(fw in wl["times"] or fw in wl["errors"] for wl in results["workloads"].values())]
    if fws:
        out += ["## Step times", "",
                "Median milliseconds per training step; in parentheses the steps per round and "
                "the rounds set aside and re-run because other processes took more than "
                f"{100 * MAX_LOAD:.0f}% of the CPU meanwhile ('busy'). The last column compares "
                "the first step's loss across frameworks (same weights, same batch).", ""]
        head = ["workload", *fws, "first-step loss, max relative difference"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key, wl in results["workloads"].items():
            cells = [f"({key})"]
            for fw in fws:
                t = wl["times"].get(fw)
                if t:
                    busy = t.get("rounds", 0) - t.get("quiet_rounds", t.get("rounds", 0))
                    extra = f", {busy} busy" if busy else ""
                    cells.append(f"{1e3 * t['median_s']:.3g}{'†' if t.get('busy') else ''} "
                                 f"({t['steps_per_round']}{extra})")
                else:
                    cells.append("error" if fw in wl["errors"] else "—")
            losses = list(wl["first_loss"].values())
            if len(losses) > 1:
                ref = max(abs(v) for v in losses) or 1.0
                cells.append(f"{(max(losses) - min(losses)) / ref:.1e}")
            else:
                cells.append("—")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")

    # (g): GEMM efficiency
    g = results["workloads"].get("g")
    if g and "gemm" in g:
        flops = g["gemm"]["flops"]
        out += ["## GEMM efficiency (g)", "",
                f"One step of (g) needs {g['gemm']['products']} matrix products, "
                f"{flops / 1e9:.1f} GFLOP: three per linear layer",
                "(forward, input gradient, weight gradient) less the first layer's input "
                "gradient, which no framework computes. numpy's raw rate is those products "
                "alone, same shapes and layouts, into preallocated outputs.", "",
                "| framework | ms per step | GFLOP/s | fraction of numpy's GEMM rate |",
                "|---|---|---|---|"]
        for fw in ("numpy-gemm", "tapegrad", "tapegrad-compiled", "torch", "jax"):
            t = g["times"].get(fw)
            if not t:
                continue
            frac = gemm_fraction(g, fw)
            name = "numpy GEMMs only" if fw == "numpy-gemm" else fw
            mark = "†" if t.get("busy") else ""
            out.append(f"| {name} | {1e3 * t['median_s']:.1f}{mark} | "
                       f"{flops / t['median_s'] / 1e9:.1f} | {100 * frac:.0f}% |")
        out.append("")

    # memory
    mems = {key: wl["memory"] for key, wl in results["workloads"].items() if wl.get("memory")}
    if mems:
        mfws = [fw for fw in ("tapegrad", "tapegrad-compiled", "torch", "jax", "numpy")
                if any(fw in m for m in mems.values())]
        out += ["## Peak memory per step", "",
                f"MB by which peak RSS rose during {MEMORY_STEPS} steps after {WARMUP_STEPS} "
                "warm-up steps, each (framework, workload) in a fresh process: the peak is reset "
                "(`/proc/self/clear_refs`) and freed heap pages returned (`malloc_trim`) after "
                "warm-up, so weights, inputs and JIT compilation are not counted; "
                f"`{' '.join(f'{k}={v}' for k, v in MEMORY_ENV.items())}` for every process. "
                "The ratio column is tapegrad over PyTorch.", ""]
        head = ["workload", *mfws, "tapegrad / PyTorch"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key, mem in mems.items():
            cells = [f"({key})"]
            for fw in mfws:
                v = mem.get(fw)
                if v is None:
                    cells.append("—")
                elif "error" in v:
                    cells.append("error")
                else:
                    cells.append(f"{v['rise_bytes'] / 2**20:.2f}")
            cells.append(_memory_cell(results["workloads"][key]))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")

    kern = results.get("kernels")
    if kern and kern.get("rows"):
        out += ["## Per-kernel forward + backward", "",
                "Each convolution, transposed convolution, pooling, normalisation, loss and "
                "attention shape of workloads (c), (d), (e), (h) and (i)"
                + (" (at their smoke-test sizes)" if kern.get("tiny") else "")
                + ", run alone forward and backward (a random output gradient; gradients for "
                "the input and the weights) in tapegrad and in PyTorch from the same arrays "
                "(`benchmarks/kernels.py`). Median ms over "
                f"{kern['rounds']} alternating rounds of at least {1e3 * kern['min_time']:.0f} ms "
                "each; the ratio is the median over rounds of PyTorch's time over tapegrad's "
                "in the same round (above 1: tapegrad is faster).", "",
                *K.render(kern["rows"]), ""]
    jit = results.get("jit")
    if jit:
        out += ["## JIT cost of the flagship's first step", "", *jit_cost.lines(jit), ""]

    be = results.get("blas_env")
    if be:
        out += ["## (g) with and without the OpenBLAS variables", "",
                "Workload (g) re-run in two subprocesses: with `OPENBLAS_CORETYPE` and "
                "`OPENBLAS_L2_SIZE` as found, and with both unset."
                + (" Both were unset as found, so the two rows are the same configuration and "
                   "differ only by noise." if all(v is None for v in m["env"].values()) else ""),
                "",
                "| variables | values | BLAS architecture | tapegrad ms/step | numpy GEMM ms | "
                "tapegrad GEMM fraction | vs PyTorch eager |", "|---|---|---|---|---|---|---|"]
        for label, r in be.items():
            if "error" in r:
                out.append(f"| {label} | error: {r['error']} | | | | | |")
                continue
            t = r["times"]
            tg_s, gemm_s, torch_s = t.get("tapegrad"), t.get("numpy-gemm"), t.get("torch")
            vals = ", ".join(f"{k}={v}" for k, v in r["env"].items() if v is not None) or "none"
            arch = r["blas"].get("architecture") or r["blas"].get("corename") or "?"
            tt = r.get("timings", {})
            pair = (lambda a, b: paired_ratio(tt[a], tt[b])) if tt else (
                lambda a, b: t[a] / t[b])
            frac = f"{100 * pair('numpy-gemm', 'tapegrad'):.0f}%" if tg_s and gemm_s else "—"
            vs = f"{pair('torch', 'tapegrad'):.2f}x" if tg_s and torch_s else "—"
            mark = "†" if r.get("busy") else ""
            out.append(f"| {label} | {vals} | {arch} | {1e3 * tg_s:.1f}{mark} | "
                       f"{1e3 * gemm_s:.1f}{mark} | {frac} | {vs} |")
        out.append("")

    notes = []
    for key, wl in results["workloads"].items():
        for fw, e in wl["errors"].items():
            notes.append(f"- ({key}) {fw} failed: `{e}`")
        for fw, n in wl["notes"].items():
            notes.append(f"- ({key}) {fw}: {n}")
        for fw, why in wl.get("unsupported", {}).items():
            notes.append(f"- ({key}) {fw} not run: {why}.")
    for key, wl in results["workloads"].items():
        for fw, v in (wl.get("memory") or {}).items():
            if "error" in v:
                notes.append(f"- ({key}) {fw} memory: `{v['error']}`")
    if notes:
        out += ["## Notes", "", *notes, ""]
    out += ["## Method", "",
            "- Peers: PyTorch eager (`torch.set_num_threads` equal to numpy's BLAS threads); "
            "JAX `jax.jit` of the whole step (value_and_grad and the SGD update, weights "
            "donated) where JAX is installed, its own thread pool; numpy with forward, "
            "backward and SGD written by hand for (a) and (b). `tg.compile` (a replay of a "
            "captured step) is timed as an extra column when it exists.",
            "- (e) is the CLIP model of `examples/multimodal.py` (its `CLIP`, `Config`, "
            "`clip_loss`) against a PyTorch twin with the same architecture, loaded from the "
            "tapegrad `state_dict`, and a JAX twin; plain SGD here, not the example's AdamW.",
            "- (h) is one iteration of pytorch/examples' `dcgan` loop (D on real, D on the "
            "detached fake, D's Adam step, then G's Adam step through D(fake); BCE; lr 2e-4, "
            "betas (0.5, 0.999)) at the original architecture with ngf = ndf = 16 instead of 64 "
            "(64 costs 16x the FLOPs, over a second a step on 2 cores). tapegrad holds one tape "
            "per network. (i) is torchvision's ResNet-18 `layer2` applied to both inputs of a "
            "siamese pair with shared weights, its pooled features' |difference| scored by a "
            "linear head, BCE with logits, plain SGD.",
            "- (f) is `benchmarks/overhead.py`: one 4-element multiply, recorded on a tape vs "
            "PyTorch autograd, and untraced vs numpy and PyTorch without autograd.",
            "- Load guard: the machine is shared. A round during which other processes (or the "
            "hypervisor, as steal time) took more than "
            f"{100 * results['config'].get('max_load', MAX_LOAD):.0f}% of the CPU (from "
            "`/proc/stat`, less this process's own CPU time) is set aside and re-run once the "
            "machine is quiet, waiting at most "
            f"{results['config'].get('max_wait', 0):.0f} s per workload. Under such load, "
            "two-thread OpenBLAS (numpy, tapegrad) and PyTorch's OpenMP pool slow down by 10x "
            "or more while JAX's pool barely does, so busy rounds say nothing about the "
            "libraries; ratios that had to use them are marked †.",
            "- Raw numbers (every round, with the load during it) are in "
            "`benchmarks/results.json`; `python benchmarks/suite.py --from-json "
            "benchmarks/results.json` re-renders this page.", ""]
    analysis = Path(__file__).with_name("analysis.md")  # hand-written: where the time goes
    if analysis.exists():
        out += [analysis.read_text().rstrip(), ""]
    return "\n".join(out)


def plot(results: dict[str, Any], path: str | Path) -> None:
    """Bar chart of the speed ratios, log scale, with a line at 1.0 and the targets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = table_rows(results)
    series = [("torch", "vs PyTorch eager", "#3465a4"), ("jax", "vs JAX jit", "#73a839"),
              ("numpy", "vs numpy by hand", "#c17d11"),
              ("compiled", "tg.compile vs PyTorch eager", "#75507b")]
    series = [s for s in series if any(r[s[0]] is not None for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) + 2), 4.2))
    width = 0.8 / max(1, len(series))
    xs = np.arange(len(rows))
    offsets = {k: (i - (len(series) - 1) / 2) * width for i, (k, _, _) in enumerate(series)}
    for k, label, color in series:
        vals = [r[k] if r[k] is not None else np.nan for r in rows]
        bars = ax.bar(xs + offsets[k], vals, width, label=label, color=color)
        for bar, r in zip(bars, rows, strict=True):
            if r.get("busy", {}).get(k):
                bar.set_hatch("///")  # timed while other processes kept the CPU busy
        ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.2g}" for v in vals], fontsize=7,
                     padding=1)
    for x, r in zip(xs, rows, strict=True):
        peer = r.get("target_peer", "torch")
        if r["target"] is not None and peer in offsets:
            off = offsets[peer]
            ax.plot([x + off - width / 2, x + off + width / 2], [r["target"]] * 2, color="k",
                    lw=2)
    ax.axhline(1.0, color="#cc0000", lw=1, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(xs, [r["label"] for r in rows])
    ax.set_ylabel("tapegrad steps/s over the peer's")
    if any(any(r.get("busy", {}).values()) for r in rows):
        ax.set_xlabel("hatched: timed while other processes kept the CPU busy (unreliable)",
                      fontsize=8)
    ax.set_title("tapegrad's speed over each peer (above 1: tapegrad faster; black: target)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------------
def write_report(results: dict[str, Any], out: str | None, json_path: str | None) -> None:
    """Print the markdown; write it to ``out`` with the chart beside it, and the raw JSON."""
    chart = None
    if out:
        png = HERE / "results.png" if Path(out).resolve() == ROOT / "BENCHMARKS.md" else \
            Path(out).with_suffix(".png")
        png.parent.mkdir(parents=True, exist_ok=True)
        plot(results, png)
        chart = os.path.relpath(png, Path(out).resolve().parent)
    md = render_markdown(results, chart)
    print()
    print(md)
    if out:
        Path(out).write_text(md)
        print(f"wrote {out} and {chart}")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1, default=str))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="workloads a, b, f, and h, i at tiny size; fewer rounds")
    ap.add_argument("--only", help="comma-separated workloads (a,b,c,d,e,f,g,h,i)")
    ap.add_argument("--frameworks", help="comma-separated subset of " + ",".join(
        ["tapegrad", "tapegrad-compiled", "torch", "jax", "numpy"]))
    ap.add_argument("--rounds", type=int, help="rounds per workload (default 7; 3 with --quick)")
    ap.add_argument("--min-time", type=float, help="seconds per round (default 0.2)")
    ap.add_argument("--max-wait", type=float,
                    help="seconds per workload to wait for other processes to leave the CPU "
                    "(default 300; 10 with --quick)")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    ap.add_argument("--blas-env", action="store_true",
                    help="also run (g) with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset")
    ap.add_argument("--out", help="markdown report (default BENCHMARKS.md for a full run)")
    ap.add_argument("--json", help="raw results (default benchmarks/results.json with --out)")
    ap.add_argument("--from-json", metavar="RESULTS",
                    help="re-render the report and chart from a saved results.json; no timing")
    ap.add_argument("--memory-child", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true",
                    help="every workload at its smoke-test size (--quick: h and i are tiny)")
    ap.add_argument("--no-kernels", action="store_true", help="skip the per-kernel table")
    ap.add_argument("--no-jit", action="store_true",
                    help="skip the cold/warm numba cache first-step measurement (full run only)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(*args.memory_child, tiny=args.tiny)))
        return {}
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
        write_report(results, args.out or str(ROOT / "BENCHMARKS.md"), None)
        return results
    keys = ["a", "b", "f", "h", "i"] if args.quick else ["a", "b", "c", "d", "e", "f", "g", "h",
                                                          "i"]
    tiny_keys = set("abcdeghi") if args.tiny else set("hi") if args.quick else set()
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        for k in keys:
            if k != "f":
                W.dims(k)  # unknown names fail here, before any timing
    rounds = args.rounds or (3 if args.quick else 7)
    min_time = args.min_time or (0.1 if args.quick else 0.2)
    max_wait = args.max_wait if args.max_wait is not None else (10.0 if args.quick else 300.0)
    out = args.out
    if out is None and not args.quick and not args.only:
        out = str(ROOT / "BENCHMARKS.md")
    json_path = args.json or (str(HERE / "results.json") if out else None)

    machine = machine_info()  # before torch and JAX load their own thread pools
    fws = W.frameworks()
    if args.frameworks:
        want = [f.strip() for f in args.frameworks.split(",")]
        fws = [fw for fw in fws if fw in want]
    results: dict[str, Any] = {
        "machine": machine, "libraries": _library_info(),
        "config": {"rounds": rounds, "min_time": min_time, "quick": args.quick,
                   "max_load": MAX_LOAD, "max_wait": max_wait,
                   "frameworks": fws, "workloads": keys},
        "workloads": {}, "overhead": None, "blas_env": None, "kernels": None, "jit": None,
    }
    print(f"frameworks: {', '.join(fws)}; {rounds} rounds of >= {min_time:g} s")
    for key in keys:
        t0 = time.perf_counter()
        if key == "f":
            print("(f) per-op overhead (benchmarks/overhead.py)")
            wait_for_quiet(max_wait)
            results["overhead"] = run_overhead()
            continue
        tiny = key in tiny_keys
        print(f"({key}) {W.TITLES[key]}" + (" (tiny size)" if tiny else ""))
        wl = time_workload(key, fws, rounds, min_time, tiny=tiny, log=print, max_wait=max_wait)
        results["workloads"][key] = wl
        for fw, t in wl["times"].items():
            print(f"  {fw:18s} {1e3 * t['median_s']:9.3f} ms/step")
        print(f"  ({time.perf_counter() - t0:.0f} s)")
    if not args.no_memory:
        for key, wl in results["workloads"].items():
            wl["memory"] = {}
            for fw in fws:
                if W.supports(fw, key) and fw not in wl["errors"]:
                    wl["memory"][fw] = mem = measure_memory(fw, key, tiny=key in tiny_keys)
                    shown = mem.get("error") or f"{mem['rise_bytes'] / 2**20:.2f} MB"
                    print(f"  memory ({key}) {fw}: {shown}")
    kernel_keys = tuple(k for k in keys if k in K.KERNEL_WORKLOADS)
    if kernel_keys and not args.no_kernels:
        print(f"per-kernel table ({', '.join(kernel_keys)})")
        wait_for_quiet(max_wait)
        small = bool(tiny_keys) and set(kernel_keys) <= tiny_keys
        results["kernels"] = {
            "tiny": small, "rounds": min(rounds, 5), "min_time": min_time / 4,
            "rows": K.measure(K.kernel_shapes(kernel_keys, small), min(rounds, 5),
                              min_time / 4, log=print)}
    if not (args.quick or args.only or args.no_jit):
        print("JIT cost: the flagship's first step, cold and warm numba cache (jit_cost.py)")
        results["jit"] = jit_cost.measure()
        print("\n".join(jit_cost.lines(results["jit"])))
    if args.blas_env:
        results["blas_env"] = run_blas_env(rounds, min_time, max_wait)
    machine["loadavg_end"] = _loadavg()

    write_report(results, out, json_path)
    return results


if __name__ == "__main__":
    main()
