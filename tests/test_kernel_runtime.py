"""When kernels compile and where they are cached (``_kernels/runtime``): the numpy references
run while a compiler process prepares the machine code, an unwritable or corrupt cache never
breaks a run, and ``python -m tapegrad warmup`` / ``info``.

Each test runs a fresh Python process with its own cache folder, so that it sees the first call
of a kernel (the suite itself compiles in the calling thread: ``TAPEGRAD_COMPILE=wait``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tapegrad import _kernels

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")

RELU = (
    "import numpy as np\n"
    "from tapegrad import _kernels as K\n"
    "from tapegrad._kernels import elementwise\n"
    "x = np.array([-1.0, 2.0], np.float32)\n"
)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CACHE_DIR", "TAPEGRAD_CACHE_DIR", "TAPEGRAD_COMPILE")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
        env={**base, "TAPEGRAD_KERNELS": "", **env},
    )


@numba_only
def test_a_kernel_not_compiled_yet_gives_way_to_the_reference_then_runs(tmp_path):
    code = RELU + (
        "try:\n"
        "    elementwise.relu(x)\n"
        "    print('ran at once')\n"
        "except K.NotReady:\n"
        "    print('not ready')\n"
        "print(K.compiling())\n"
        "print(K.dispatch('no such op', lambda a: 'reference', x))\n"
        "assert K.wait_compiled(240)\n"
        "print(K.compiling(), elementwise.relu(x).tolist())\n"
    )
    r = _run(code, TAPEGRAD_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:4] == ["not ready", "1", "reference", "0 [0.0, 2.0]"]
    assert r.stderr == ""
    assert any("_relu" in p.name for p in tmp_path.rglob("*.nbi"))  # the compiler process wrote it
    # the next process finds it in the cache: no wait at all
    r = _run(RELU + "print(elementwise.relu(x).tolist(), K.compiling())",
             TAPEGRAD_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0.0, 2.0] 0"


@numba_only
def test_wait_mode_compiles_in_the_caller(tmp_path):
    r = _run(RELU + "print(elementwise.relu(x).tolist(), K.compiling())",
             TAPEGRAD_CACHE_DIR=str(tmp_path), TAPEGRAD_COMPILE="wait")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0.0, 2.0] 0"


def test_an_unknown_compile_mode_is_an_error():
    r = _run("from tapegrad._kernels import runtime; runtime.mode()", TAPEGRAD_COMPILE="later")
    assert r.returncode != 0
    assert "TAPEGRAD_COMPILE must be 'background' or 'wait', got 'later'" in r.stderr


@numba_only
@pytest.mark.parametrize("compile_mode", ["wait", "background"])
def test_an_unwritable_cache_folder_costs_one_line_and_nothing_else(tmp_path, compile_mode):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # root writes anywhere: a file in the path stops it
    folder = blocker / "cache"
    code = RELU + (
        "import tapegrad as tg\n"
        "K.wait_compiled(240)\n"
        "print(elementwise.relu(x).tolist() if K.compiling() == 0 else 'still compiling')\n"
    )
    if compile_mode == "background":  # the reference first, then the kernel from the temp folder
        code = RELU + (
            "try:\n    elementwise.relu(x)\nexcept K.NotReady:\n    pass\n"
            "assert K.wait_compiled(240)\n"
            "print(elementwise.relu(x).tolist())\n"
        )
    r = _run(code, TAPEGRAD_CACHE_DIR=str(folder), TAPEGRAD_COMPILE=compile_mode)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0.0, 2.0]"
    lines = r.stderr.strip().split("\n")
    assert len(lines) == 1, r.stderr
    assert str(folder) in lines[0] and "TAPEGRAD_CACHE_DIR" in lines[0]
    assert "TAPEGRAD_KERNELS=numpy" in lines[0]


@numba_only
def test_a_corrupt_cache_entry_compiles_again(tmp_path):
    code = RELU + "print(elementwise.relu(x).tolist())\n"
    r = _run(code, TAPEGRAD_CACHE_DIR=str(tmp_path), TAPEGRAD_COMPILE="wait")
    assert r.returncode == 0, r.stderr
    entries = [p for p in tmp_path.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert entries
    for p in entries:
        p.write_bytes(b"\x80\x04garbage")
    for compile_mode in ("wait", "background"):
        r = _run(code.replace("print(", "K.wait_compiled(240)\nprint(", 1)
                 if compile_mode == "wait" else RELU + (
                     "try:\n    elementwise.relu(x)\nexcept K.NotReady:\n    pass\n"
                     "K.wait_compiled(240)\nprint(elementwise.relu(x).tolist())\n"),
                 TAPEGRAD_CACHE_DIR=str(tmp_path), TAPEGRAD_COMPILE=compile_mode)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[0.0, 2.0]"
        assert r.stderr.count("\n") <= 1, r.stderr
        if r.stderr:
            assert "could not be read" in r.stderr and "TAPEGRAD_CACHE_DIR" in r.stderr


def test_info_names_the_kernels_and_the_cache_folder(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "tapegrad", "info"], capture_output=True, text=True, timeout=120,
        check=False, env={**os.environ, "TAPEGRAD_CACHE_DIR": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kernels: ")
    if _kernels.numba() is not None:
        assert f"cache folder: {tmp_path}" in r.stdout


@numba_only
def test_warmup_runs_a_program_with_waiting_compilation(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, os\n"
        "import numpy as np\n"
        "from tapegrad._kernels import elementwise, runtime\n"
        "print(sys.argv[1:], runtime.mode())\n"
        "print(elementwise.relu(np.array([-3.0], np.float32)).tolist())\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "tapegrad", "warmup", str(script), "--steps", "1"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "TAPEGRAD_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["['--steps', '1'] wait", "[0.0]"]
    assert "compiling into" in r.stderr and str(tmp_path / "cache") in r.stderr
    assert any("_relu" in p.name for p in (tmp_path / "cache").rglob("*.nbi"))


@numba_only
def test_processes_sharing_a_cache_compile_each_kernel_once(tmp_path):
    code = RELU + (
        "from tapegrad._kernels import runtime\n"
        "print(elementwise.relu(x).tolist(), len(runtime.COMPILED))\n"
    )
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env = {**base, "TAPEGRAD_KERNELS": "", "TAPEGRAD_COMPILE": "wait",
           "TAPEGRAD_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    counts = [int(out.split()[-1]) for out, _ in outs]
    assert sorted(counts) == [0, 1], outs  # the second waited on the lock, then loaded


@numba_only
def test_the_shared_thread_pool_waits_for_the_compiler_process(tmp_path):
    code = RELU + (
        "from tapegrad._kernels import threads\n"
        "try:\n    elementwise.relu(x)\nexcept K.NotReady:\n    pass\n"
        "print(K.compiling(), threads.active(), threads._state['pid'] is None)\n"
        "assert K.wait_compiled(240)\n"
        "threads.active()\n"
        "print(K.compiling(), threads._state['pid'] is None)\n"
    )
    r = _run(code, TAPEGRAD_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    # while compiling: BLAS keeps its own threads, nothing decided; after: decided (on or off)
    assert r.stdout.split("\n")[:2] == ["1 False True", "0 False"]


def _plus_one(a):
    return a + 1


@numba_only
def test_a_first_call_never_waits_for_a_compile_in_another_thread(monkeypatch):
    import threading

    import numpy as np
    from numba.core.compiler_lock import global_compiler_lock

    from tapegrad._kernels import runtime

    kernel = runtime.jit()(_plus_one)
    held, release = threading.Event(), threading.Event()

    def compile_elsewhere():
        with global_compiler_lock:  # as a thread compiling a generated kernel holds it
            held.set()
            release.wait(30)

    t = threading.Thread(target=compile_elsewhere)
    t.start()
    assert held.wait(30)
    try:
        monkeypatch.setenv("TAPEGRAD_COMPILE", "background")
        with pytest.raises(_kernels.NotReady):
            kernel(np.float64(1.0))
    finally:
        release.set()
        t.join(30)
    monkeypatch.setenv("TAPEGRAD_COMPILE", "wait")
    assert kernel(np.float64(1.0)) == 2.0  # the lock is free: compiled (or loaded) and run


@numba_only
def test_generated_convolutions_are_made_on_a_thread_in_the_background_mode(monkeypatch):
    import numpy as np

    from tapegrad._kernels import conv_blocked as cb

    key = ("wgrad", np.dtype(np.float64).char)
    monkeypatch.setattr(cb, "_KERNELS", {k: v for k, v in cb._KERNELS.items() if k != key})
    monkeypatch.setattr(cb, "_BUILDING", set())
    monkeypatch.setenv("TAPEGRAD_COMPILE", "background")
    with pytest.raises(_kernels.NotReady):
        cb._kernel("wgrad", np.float64)
    assert key in cb._BUILDING  # a thread is making it
    for t in [t for t in __import__("threading").enumerate() if t.name == "tapegrad-conv-blocked"]:
        t.join(600)
    assert key in cb._KERNELS and cb._kernel("wgrad", np.float64) is cb._KERNELS[key]


def _plus_one(x):  # a kernel source for the test below (made, never compiled)
    return x + 1


@numba_only
def test_making_a_kernel_waits_for_another_thread_setting_numbas_cache_folder():
    """numba reads its cache folder from a global twice while attaching a cache; a thread that
    restored it between another's two reads left that one's cache in the working directory. The
    set-and-restore is one thread at a time: while another holds it, making a kernel waits."""
    import threading

    from tapegrad._kernels import runtime

    done = threading.Event()

    def make():
        runtime.jit()(_plus_one)
        done.set()

    with runtime._CONFIG_LOCK:  # another thread between its set and its restore
        t = threading.Thread(target=make, daemon=True)
        t.start()
        assert not done.wait(0.5), "a kernel was made while another thread held numba's folder"
    assert done.wait(60)
    t.join(60)
