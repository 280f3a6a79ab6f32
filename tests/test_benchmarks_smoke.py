"""The benchmark suite cannot rot: one step of every workload at tiny size, checked against its
PyTorch twin, plus the report, the chart and the memory probe. Nothing here is timed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import suite  # noqa: E402
import workloads as W  # noqa: E402

import tapegrad as tg  # noqa: E402

STEP_KEYS = list(W.STEP_WORKLOADS)  # a b c d e g


def _one_step(framework: str, key: str) -> tuple[float, dict[str, np.ndarray]]:
    b = W.build(framework, key, tiny=True)
    loss = b.value(b.step())
    return loss, b.state()


def _assert_same_state(got: dict, want: dict, atol: float = 2e-5) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=atol, err_msg=k)


@pytest.mark.parametrize("key", STEP_KEYS)
def test_tapegrad_step_matches_torch(key):
    init = W.make_weights(key, tiny=True)
    loss, state = _one_step("tapegrad", key)
    ref_loss, ref_state = _one_step("torch", key)
    assert np.isfinite(loss)
    assert loss == pytest.approx(ref_loss, rel=1e-4)
    _assert_same_state(state, ref_state)
    # the step updated the weights (SGD ran on real gradients)
    assert any(not np.array_equal(state[k], init[k]) for k in init)


@pytest.mark.parametrize("key", ["a", "b"])
def test_numpy_by_hand_matches_torch(key):
    loss, state = _one_step("numpy", key)
    ref_loss, ref_state = _one_step("torch", key)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    _assert_same_state(state, ref_state)


@pytest.mark.slow  # importing JAX and compiling takes several seconds
@pytest.mark.parametrize("key", ["c", "e"])
def test_jax_twin_matches_torch(key):
    pytest.importorskip("jax")
    loss, state = _one_step("jax", key)
    ref_loss, ref_state = _one_step("torch", key)
    assert loss == pytest.approx(ref_loss, rel=1e-4)
    _assert_same_state(state, ref_state)


@pytest.mark.skipif(not hasattr(tg, "compile"), reason="tg.compile is not available")
def test_compiled_steps_match_eager():
    eager = W.build("tapegrad", "b", tiny=True)
    comp = W.build("tapegrad-compiled", "b", tiny=True)
    for _ in range(4):  # the first calls capture, the later ones replay
        assert comp.value(comp.step()) == pytest.approx(eager.value(eager.step()), rel=1e-5)
    assert not comp.notes, comp.notes  # it did not fall back to eager
    _assert_same_state(comp.state(), eager.state(), atol=1e-6)


def test_gemm_count_and_flops():
    shapes = W.gemm_shapes("g", tiny=True)
    assert len(shapes) == 5  # 3 per layer, less the first layer's input gradient
    for _, a, b in shapes:
        assert a[1] == b[0]
    W.numpy_gemm_step("g", tiny=True)()
    n, w = W.dims("g", tiny=True)["batch"], W.dims("g", tiny=True)["sizes"][0]
    assert W.gemm_flops("g", tiny=True) == 5 * 2 * n * w * w


def test_report_and_chart(tmp_path):
    fws = ["tapegrad", "torch", "numpy"]
    wl = suite.time_workload("a", fws, rounds=1, min_time=1e-3, tiny=True, log=lambda *_: None)
    assert set(wl["times"]) == set(fws), wl["errors"]
    wl["memory"] = {"tapegrad": {"rise_bytes": 3 << 20}, "torch": {"rise_bytes": 4 << 20}}
    results = {
        "machine": {"cpu": "test cpu", "cores": 2, "platform": "x", "python": "3", "numpy": "2",
                    "blas": {"internal_api": "openblas", "num_threads": 2}, "env": {
                        "OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}},
        "config": {"rounds": 1, "min_time": 1e-3},
        "workloads": {"a": wl},
        "overhead": {"numpy": 1.0, "torch (no autograd)": 4.0, "tapegrad untraced": 2.0,
                     "torch autograd": 6.0, "tapegrad recorded": 3.0},
    }
    md = suite.render_markdown(results, chart="results.png")
    assert "| (a) " + W.TITLES["a"] in md
    assert "0.75x" in md  # memory: 3 MB over 4 MB
    assert "(f) per-op, recorded on a tape | 3.00 µs/op | 2.00x" in md
    assert "![speed ratios](results.png)" in md
    suite.plot(results, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 1000


def test_memory_probe_runs_in_a_subprocess():
    mem = suite.measure_memory("tapegrad", "a", timeout=120)
    assert "error" not in mem, mem
    assert mem["rise_bytes"] >= 0 and mem["baseline_bytes"] > 0


def test_overhead_benchmark_runs(monkeypatch):
    import overhead

    monkeypatch.setattr(overhead, "ROUNDS", 1)
    monkeypatch.setattr(overhead, "NUMBER", 200)
    r = suite.run_overhead()
    assert r["tapegrad recorded"] > 0 and r["tapegrad untraced"] > 0
    assert r["recorded_over_torch"] > 0


def test_profile_step_runs_and_accounts_for_the_step():
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "profile_step.py"), "a", "--steps", "2"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    head, *rows = out.strip().splitlines()
    assert "ms per step" in head
    # every primitive the step ran has a row (no time threshold: the same rows every run)
    names = {row.rsplit(None, 2)[0].strip() for row in rows}
    assert {"nn.linear forward", "nn.linear backward[0]", "nn.linear backward[1]"} <= names
    # the rows account for the time the header reports inside primitives (up to rounding)
    inside = float(head.split(" ms in primitives")[0].rsplit(None, 1)[1])
    total = sum(float(row.split()[-2]) for row in rows)
    assert total == pytest.approx(inside, abs=0.005 + 0.0005 * len(rows))


def test_ratio_is_taken_within_rounds():
    # the machine's speed drifts 3x between rounds; within each round the peer is 2x slower
    drift = [1.0, 3.0, 1.5, 2.5, 1.2]
    ours = {"median_s": 1.5, "busy": False, "samples": [(d, 0.0, r) for r, d in enumerate(drift)]}
    peer = {"median_s": 2.5, "busy": False,
            "samples": [(2 * d, 0.0, r) for r, d in enumerate(drift)]}  # fmt: skip
    assert suite.paired_ratio(peer, ours) == pytest.approx(2.0)
    old = {k: v for k, v in ours.items() if k != "samples"}  # results saved without rounds
    assert suite.paired_ratio({"median_s": 3.0}, old) == pytest.approx(2.0)


def test_a_busy_machine_still_gives_a_median(monkeypatch):
    # every round counts as busy (others took the CPU): the medians come from all rounds
    timed = suite._time_steps

    def loaded(*a, **k):
        t, n, _ = timed(*a, **k)
        return t, n, 0.9  # others took 90% of the CPU during the round

    monkeypatch.setattr(suite, "_time_steps", loaded)
    monkeypatch.setattr(suite, "wait_for_quiet", lambda budget, log=print: 0.0)
    wl = suite.time_workload("a", ["tapegrad", "numpy"], rounds=2, min_time=1e-3, tiny=True,
                             log=lambda *_: None)  # fmt: skip
    assert not wl["errors"]
    for fw in ("tapegrad", "numpy"):
        t = wl["times"][fw]
        assert t["busy"] and t["quiet_rounds"] == 0 and t["median_s"] > 0


@pytest.mark.skipif(not hasattr(tg, "compile"), reason="tg.compile is not available")
def test_compiled_siamese_losses_match_eager():
    eager = W.build("tapegrad", "i", tiny=True)
    comp = W.build("tapegrad-compiled", "i", tiny=True)
    for _ in range(4):  # the first calls capture, the later ones replay
        assert comp.value(comp.step()) == pytest.approx(eager.value(eager.step()), rel=1e-5)
    state, ref = comp.state(), eager.state()
    for k in ref:
        np.testing.assert_allclose(state[k], ref[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.skipif(not hasattr(tg, "compile"), reason="tg.compile is not available")
def test_compiled_siamese_running_statistics_match_eager():
    eager = W.build("tapegrad", "i", tiny=True)
    comp = W.build("tapegrad-compiled", "i", tiny=True)
    for _ in range(4):
        comp.step()
        eager.step()
    _assert_same_state(comp.state(), eager.state(), atol=1e-6)


def test_compiled_dcgan_step_equals_eager():
    eager = W.build("tapegrad", "h", tiny=True)
    comp = W.build("tapegrad-compiled", "h", tiny=True)
    for _ in range(4):  # the first calls capture, the later ones replay
        assert comp.value(comp.step()) == eager.value(eager.step())
    _assert_same_state(comp.state(), eager.state(), atol=0)


def test_kernel_table_times_the_same_gradients_as_torch():
    import kernels as K

    shapes = K.kernel_shapes(("c", "d", "e", "h", "i"), tiny=True)
    # every convolution of the workloads' models has a row: (h) has 5 in G and 5 in D
    assert sum(k.kind == "conv_transpose2d" for k in shapes if k.workload == "h") == 5
    assert sum(k.kind == "conv2d" for k in shapes if k.workload == "h") == 5
    # attention both as scaled_dot_product_attention and as the layers' packed projection
    assert {k.workload for k in shapes if k.kind == "attention_packed"} == {"d", "e"}
    for k in shapes:
        tg_step, torch_step = K.steps(k)
        got = tg_step()[0]  # the gradient of the op's first input
        want = torch_step()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=k.name)
    rows = K.measure(shapes[:2], rounds=1, min_time=1e-4, log=lambda *_: None)
    table = K.render(rows)
    assert len(table) == 2 + 2 and "| (c) | conv1 1->8 3x3 | 2x1x12x12 |" in table[2]
    assert all(r["tapegrad"] > 0 and r["torch"] > 0 for r in rows)


def test_jit_cost_table():
    import jit_cost

    res = {"cold": {"import_s": 0.5, "first_step_s": 12.0, "steady_step_s": 0.02,
                    "process_s": 14.0},
           "warm": {"error": "exit 1: boom"}}
    lines = jit_cost.lines(res)
    assert "| cold | 0.50 | 12.00 | 20.0 | 600x | 14.0 |" in lines
    assert "| warm | error: exit 1: boom | | | | |" in lines
    assert "| fill | error: not run | | | | |" in lines  # the wait-mode row, missing here


def test_checkpointing_benchmark_reports_equal_gradients_and_less_memory():
    import checkpointing

    m = checkpointing.measure(rounds=1, max_wait=0.0)  # a busy machine: the round as it came
    assert m["grad_diff"] == 0.0  # checkpointing recomputes the same numbers
    assert m["memory_ratio"] <= 0.5
    assert "| peak memory during the step |" in checkpointing.section(m)


def test_checkpointing_benchmark_uses_busy_rounds_when_none_is_quiet(monkeypatch):
    import checkpointing
    import suite

    monkeypatch.setattr(suite, "MAX_LOAD", -1.0)  # every round counts as busy
    monkeypatch.setattr(suite, "wait_for_quiet", lambda budget, log=print: 0.0)
    m = checkpointing.measure(rounds=1, max_wait=600.0)  # never past the deadline
    assert m["busy"] == 3 and m["rounds"] == 3  # the three busy rounds, as they came
    assert m["time_ratio"] > 0
