"""numpy's BLAS on numba's threads (tapegrad/_kernels/threads.py): products equal to OpenBLAS's
own threads', safe from several Python threads at once and across a fork, and off on request."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from tapegrad import _kernels
from tapegrad.nn import _f_attention, _f_conv

pytestmark = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


def _threads():
    from tapegrad._kernels import threads  # noqa: PLC0415

    if not threads.active():
        pytest.skip(f"the pool is not shared here: {threads.describe()}")
    return threads


SHAPES = [(1024, 128, 384), (256, 512, 512), (128, 784, 512), (33, 700, 65), (3, 5, 7)]


def _operands(dtype):
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype))
            for m, k, n in SHAPES]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_on_the_shared_pool_equal_openblas_own_threads(dtype):
    threads = _threads()
    pairs = _operands(dtype)
    shared = [a @ b for a, b in pairs] + [a.T @ a for a, _ in pairs]
    state = threads._state
    state["setter"](None)  # OpenBLAS's own threads, for the comparison
    try:
        own = [a @ b for a, b in pairs] + [a.T @ a for a, _ in pairs]
    finally:
        state["setter"](ctypes.c_void_p(state["cb"].address))
    for x, y in zip(shared, own, strict=True):
        np.testing.assert_array_equal(x, y)  # the same jobs, only other threads run them


def _passes(n=64):
    """A convolution's three passes and attention's forward and gradients (parallel kernels,
    attention's products on numba's threads), in float32."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, 16, 8, 8)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    g = rng.standard_normal((n, 32, 8, 8)).astype(np.float32)
    geom = _f_conv.Geom(x.shape, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (8, 8))
    qkv = rng.standard_normal((n // 4, 32, 3, 4, 16)).astype(np.float32)
    ga = rng.standard_normal((n // 4, 4, 32, 16)).astype(np.float32)
    out = _f_attention._attn_qkv_fwd(qkv, None, 0.25)
    grads = _f_attention._attn_grads_arrays(ga, out, *_f_attention._qkv(qkv), None, 0.25,
                                            (True, True, True, False))
    return (_f_conv._conv2d_fwd(x, w, None, geom, 1), _f_conv._input_grad_fwd(g, w, geom, 1),
            _f_conv._weight_grad_fwd(g, x, geom, 1, w.shape), out, *grads[:3])


def test_python_threads_at_once_get_the_results_of_one_thread(monkeypatch):
    _threads()
    from tapegrad._kernels import conv_blocked  # noqa: PLC0415

    monkeypatch.setattr(conv_blocked, "PARALLEL_MIN", 0)  # every conv call on two threads
    pairs = _operands(np.float32)
    want = [a @ b for a, b in pairs], _passes()
    got: list = []
    errors: list = []

    def work():
        try:
            for _ in range(5):
                got.append(([a @ b for a, b in pairs], _passes()))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not errors and not any(t.is_alive() for t in ts) and len(got) == 20
    for products, convs in got:
        for x, y in zip(products + list(convs), want[0] + list(want[1]), strict=True):
            np.testing.assert_array_equal(x, y)


_FORK = """
import os, pickle, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_kernels_threads import _passes, _operands
from tapegrad._kernels import conv_blocked, threads
conv_blocked.PARALLEL_MIN = 0
assert threads.active()
want = _passes()  # the parent has used the pool
a, b = _operands(np.float32)[1]
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # the child: OpenBLAS's own threads, serial kernels
    os.close(r)
    with os.fdopen(w, "wb") as f:
        pickle.dump((threads.active(), threads.describe(), a @ b, _passes()), f)
    os._exit(0)
os.close(w)
with os.fdopen(r, "rb") as f:
    active, why, product, convs = pickle.load(f)
assert os.waitpid(pid, 0)[1] == 0
assert not active and why == "a forked child", (active, why)
assert np.array_equal(product, a @ b)
assert all(np.array_equal(x, y) for x, y in zip(convs, want, strict=True))
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_runs_products_and_kernels_on_its_own():
    _threads()
    code = _FORK.format(tests=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]


def test_the_shared_pool_can_be_switched_off():
    code = ("from tapegrad._kernels import threads; import numpy as np; "
            "a = np.ones((512, 512), np.float32); "
            "print(threads.active(), threads.describe(), float((a @ a)[0, 0]))")
    env = {**os.environ, "TAPEGRAD_SHARED_POOL": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=300).stdout.split()
    assert out == ["False", "TAPEGRAD_SHARED_POOL=0", "512.0"]


@pytest.mark.parametrize("key", ["c", "d", "e", "h", "i"])
@pytest.mark.parametrize("twins", [False, True])
def test_steady_steps_call_every_kernel_through_its_compiled_fast_path(monkeypatch, key, twins):
    # a kernel called with arguments its compiled signatures do not match exactly (an omitted
    # default, say) goes through numba's typing in Python on every call: 150 us each, found
    # once as 5 ms of a 12 ms layer
    import cProfile  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    from tapegrad._kernels import attention, bmm, conv_blocked, conv_direct, conv_gemm  # noqa: PLC0415

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
    import workloads as W  # noqa: PLC0415

    for mod, name in ((conv_blocked, "PARALLEL_MIN"), (conv_direct, "PARALLEL_MIN"),
                      (conv_gemm, "PASS_MIN"), (attention, "PARALLEL_MIN")):
        monkeypatch.setattr(mod, name, 0 if twins else 1 << 62)  # the twins, or none
    monkeypatch.setattr(bmm, "MAX_WORK", bmm.MAX_WORK if twins else 0)
    bench = W.build("tapegrad", key, tiny=True)
    for _ in range(2):
        bench.value(bench.step())
    prof = cProfile.Profile()
    prof.enable()
    bench.value(bench.step())
    prof.disable()
    slow = {k: v[1] for k, v in pstats.Stats(prof).stats.items() if k[2] == "_compile_for_args"}
    assert not slow
