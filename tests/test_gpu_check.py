"""tools/gpu_check.py: it skips cleanly without CuPy or a GPU, runs its whole pipeline on the CPU,
and writes a report with the structure docs/gpu.md documents."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_check.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path: Path, shim: str | None, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    paths = [str(ROOT)]
    if shim is not None:  # a fake `cupy` package first on the path
        (tmp_path / "shim" / "cupy").mkdir(parents=True)
        (tmp_path / "shim" / "cupy" / "__init__.py").write_text(shim)
        paths.insert(0, str(tmp_path / "shim"))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "gpu.md"), *args],
                          capture_output=True, text=True, env=env, timeout=timeout, check=False)


NO_CUPY = "raise ImportError('No module named cupy')\n"
NO_DEVICE = """
class _Runtime:
    @staticmethod
    def getDeviceCount():
        return 0
class cuda:
    runtime = _Runtime
"""
NO_DRIVER = """
class CUDARuntimeError(RuntimeError):
    pass
class _Runtime:
    @staticmethod
    def getDeviceCount():
        raise CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
class cuda:
    runtime = _Runtime
"""


@pytest.mark.parametrize(
    ("shim", "why"),
    [(NO_CUPY, "CuPy is not installed"), (NO_DEVICE, "CuPy finds no CUDA device"),
     (NO_DRIVER, "CuPy finds no CUDA driver (CUDARuntimeError")],
    ids=["no-cupy", "no-device", "no-driver"],
)
def test_skips_with_one_line_and_exit_0(tmp_path: Path, shim: str, why: str) -> None:
    r = _run(tmp_path, shim)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu_check: skipped: {why}"), r.stdout
    assert not (tmp_path / "gpu.md").exists()  # nothing written, docs/gpu.md left alone


def test_install_failure_skips_cleanly(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    gc = _module()
    calls = []
    monkeypatch.setattr(gc, "probe_cuda", lambda: "CuPy is not installed (...)")
    monkeypatch.setattr(gc, "install", lambda: calls.append(1) or "ERROR: no network")
    assert gc.main(["--install"]) == 0
    assert calls == [1]
    assert capsys.readouterr().out == "gpu_check: skipped: pip install failed (ERROR: no network)\n"


def test_the_pipeline_runs_on_the_cpu(tmp_path: Path) -> None:
    r = _run(tmp_path, NO_CUPY, "--device", "cpu", "--tiny", "--budget", "300", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    text = (tmp_path / "gpu.md").read_text()
    assert "| op table | 12/12 pass |" in text
    assert "| layers | 12/12 pass |" in text
    assert "| training | 3/3 pass |" in text
    assert "| timing | 4/4 pass |" in text
    for name in ("multimodal (CLIP on digits)", "DCGAN (64x64, ngf 8, batch 4)",
                 "nanoGPT-sized (1x16, T=8, B=2) |"):
        assert text.count(name) == 2, name  # one timing row, one training row
    assert "nanoGPT-sized (1x16, T=8, B=2), autocast(bfloat16) |" in text
    assert "error" not in text and "fail" not in text


def _results() -> dict[str, Any]:
    return {
        "env": {"gpu": "NVIDIA H100 80GB HBM3, 81559 MiB, 550.54", "device": "cuda",
                "torch": "2.13.0", "torch_device": "cuda", "cupy": "13.3.0",
                "tapegrad": "0.1.0", "date": "2026-12-07 08:00 UTC", "seconds": 301.0,
                "budget": 420.0},
        "ops": {"rows": [{"name": "add-same", "status": "pass"},
                         {"name": "matmul", "status": "fail: forward vs CPU: 3/12 differ | x"},
                         {"name": "erf", "status": "not run (time budget)"}]},
        "layers": {"error": "error: ImportError: no module at gpu_check.py:1", "rows": []},
        "training": {"steps": 12, "rows": [
            {"name": "multimodal (CLIP on digits)", "cuda": [2.7, 1.9], "cpu": [2.7, 1.9],
             "status": "pass"},
            {"name": "dcgan", "status": "error on cuda: TypeError: x"}]},
        "timing": {"rounds": 5, "per": 3, "rows": [
            {"name": "multimodal (CLIP on digits)", "params": 78849, "tapegrad_ms": 4.0,
             "losses": [2.7, 2.5, 2.0],
             "torch_ms": 3.0, "ratio": 0.75, "tapegrad_mib": 120.0, "torch_mib": 80.0,
             "status": "measured"},
            {"name": "nanogpt", "status": "not run (time budget)"}]},
    }


def test_report_structure(tmp_path: Path) -> None:
    gc = _module()
    text = gc.write_report(_results(), str(tmp_path / "sub" / "gpu.md"))
    assert (tmp_path / "sub" / "gpu.md").read_text() == text
    assert text.startswith("# tapegrad on a GPU\n")
    assert "- GPU: NVIDIA H100 80GB HBM3, 81559 MiB, 550.54" in text
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert heads == [
        "## Summary",
        "## Step time against PyTorch eager",
        "## Training: the loss falls on the device as on the CPU",
        "## Layers: 0/0 pass",
        "## Op table: 1/3 pass, 1 not run (time budget)",
    ]
    assert "| op table | 1/3 pass, 1 not run (time budget) |" in text
    assert "| layers | error: ImportError: no module at gpu_check.py:1 |" in text
    assert ("| multimodal (CLIP on digits) | 78849 | 2.7000, 2.0000 | 4.0 | 3.0 | 0.75 | 120 | 80 "
            "| measured |" in text)
    assert "| nanogpt | n/a | n/a | n/a | n/a | n/a | n/a | n/a | not run (time budget) |" in text
    assert "| multimodal (CLIP on digits) | 2.7000, 1.9000 | 2.7000, 1.9000 | pass |" in text
    assert "| dcgan | n/a | n/a | error on cuda: TypeError: x |" in text
    # failing op rows are listed, with table pipes escaped; passing ones are not
    assert "| matmul | fail: forward vs CPU: 3/12 differ / x |" in text
    assert "| add-same |" not in text
    for ln in text.splitlines():  # every table row has its header's column count
        if ln.startswith("| ") and not ln.startswith("| ---"):
            assert ln.count("|") in (3, 5, 10), ln


def test_close_describes_the_worst_element() -> None:
    gc = _module()
    import numpy as np

    assert gc.close(np.ones(3), np.ones(3), (1e-6, 0)) == ""
    assert gc.close(np.ones(3), np.ones(4), (1e-6, 0)) == "shape (3,) vs (4,)"
    assert gc.close(np.array([1.0, 2.0]), np.array([1.0, 2.5]), (1e-6, 0)) == (
        "1/2 differ, e.g. 2 vs 2.5")
    assert gc.close(np.array([1, 2]), np.array([1, 3]), (0, 0)) == "integer results differ"


# -- the CuPy backend's CPU-visible rules ------------------------------------------------------
def test_normalize_device_names() -> None:
    from tapegrad import _backend as B

    assert [B.normalize_device(d) for d in (None, "cpu", "cuda", "gpu", "cuda:0")] == [
        "cpu", "cpu", "cuda", "cuda", "cuda"]
    with pytest.raises(ValueError, match=r"device 'cuda:1': tapegrad uses one GPU"):
        B.normalize_device("cuda:1")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        B.normalize_device("tpu")


def test_backend_recognises_cupy_arrays_made_before_it_imported_cupy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    import numpy as np

    from tapegrad import _backend as B

    fake = types.ModuleType("cupy")

    class ndarray:  # noqa: N801  (CuPy's name)
        pass

    ndarray.__module__ = "cupy._core.core"
    fake.ndarray = ndarray  # type: ignore[attr-defined]
    fake.asnumpy = lambda a: np.zeros(2)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(B, "_cupy", None)
    a = ndarray()
    assert B.is_array(a) and B.device_of(a) == "cuda" and B.xp_of(a) is fake
    assert B._cupy is fake  # imported on sight of the array
    assert B.to_device(a, "cpu").tolist() == [0.0, 0.0]
    assert B.xp_of(np.ones(2)) is np and not B.is_array([1.0])
