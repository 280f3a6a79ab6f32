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
from tapegrad.ops import _attention, _conv

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
    geom = _conv.Geom(x.shape, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (8, 8))
    qkv = rng.standard_normal((n // 4, 32, 3, 4, 16)).astype(np.float32)
    ga = rng.standard_normal((n // 4, 4, 32, 16)).astype(np.float32)
    out = _attention._attn_qkv_fwd(qkv, None, 0.25)
    grads = _attention._attn_grads_arrays(ga, out, *_attention._qkv(qkv), None, 0.25,
                                            (True, True, True, False))
    return (_conv._conv2d_fwd(x, w, None, geom, 1), _conv._input_grad_fwd(g, w, geom, 1),
            _conv._weight_grad_fwd(g, x, geom, 1, w.shape), out, *grads[:3])


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
# the weight gradient's sum over the batch splits across the parent's threads (each thread's
# samples summed, then the threads' sums in order): float rounding apart from the child's one
assert all(np.array_equal(x, y) for i, (x, y) in enumerate(zip(convs, want, strict=True)) if i != 2)
np.testing.assert_allclose(convs[2], want[2], rtol=1e-5, atol=1e-4)
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


# --------------------------------------------------------------------------------------------
# the kernels' one parallel form: chunks over however many threads they are given
# --------------------------------------------------------------------------------------------


def test_chunk_bounds_cover_the_range_in_order_cut_at_the_alignment():
    from tapegrad._kernels.chunks import bounds  # noqa: PLC0415

    for n in (0, 1, 15, 16, 17, 100, 1000, 4097):
        for parts in (1, 2, 3, 4, 7, 16):
            for align in (1, 16, 32):
                cuts = [bounds.py_func(n, parts, i, align) for i in range(parts)]
                assert cuts[0][0] == 0 and cuts[-1][1] == n
                assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:], strict=False))
                assert all(lo <= hi for lo, hi in cuts)
                assert all(lo % align == 0 for lo, _ in cuts)
                sizes = [hi - lo for lo, hi in cuts[:-1]]  # the last takes the remainder
                assert not sizes or max(sizes) - min(sizes) <= align
                if n >= parts * align:
                    assert all(hi > lo for lo, hi in cuts)  # every thread gets work


# Every converted kernel at 1, 2 and 3 threads (numba allows more threads than cores), its
# parallel form forced at any size: the same bits, except where a sum splits across threads
# (layer norm's weight and bias gradients, the direct convolution's weight gradient)
_AT_THREAD_COUNTS = """
import warnings
warnings.simplefilter("error")  # a kernel numba cannot cache, say
import numpy as np
from numba import njit
import tapegrad as tg
from tapegrad._kernels.chunks import num_threads
from tapegrad._kernels import (activation, attention, attention_heads, batchnorm, conv,
                               conv_direct, conv_gemm, elementwise, gelu, layernorm, optim, pool,
                               softmax, threads)
from tapegrad.ops._conv import Geom

for mod, name in ((elementwise, "PARALLEL_MIN"), (attention, "PARALLEL_MIN"),
                  (attention_heads, "PARALLEL_MIN"), (batchnorm, "PARALLEL_MIN"),
                  (conv, "SUM_PARALLEL_MIN"),
                  (conv_direct, "PARALLEL_MIN"), (conv_gemm, "PASS_MIN"), (pool, "PARALLEL_MIN")):
    setattr(mod, name, 0)
assert threads.active(), threads.describe()
rng = np.random.default_rng(0)
f32 = np.float32


def r(*shape, dtype=f32):
    return rng.standard_normal(shape).astype(dtype)


def adam(p, g, m, v, wd, decoupled):
    p, m, v = p.copy(), m.copy(), v.copy()
    group = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": wd,
             "decoupled_weight_decay": decoupled}
    optim.adam(p, g, m, v, group, 3)
    return p, m, v


def sgd(p, g, buf, group):
    p, state = p.copy(), ({} if buf is None else {"momentum_buffer": buf.copy()})
    optim.sgd_step(p, g, state, {"lr": 0.1, "weight_decay": 0.0, "momentum": 0.0,
                                 "dampening": 0.0, "nesterov": False, **group})
    return (p,) + tuple(state.values())


def inplace(fn, a, *args):
    a = a.copy()
    fn(a, *args)
    return a


x = r(2999)  # not a multiple of 16 or 3
x64 = r(2999, dtype=np.float64)
g = r(2999)
s = r(5, 3, 7, 9)  # 15 (batch, head) blocks
mask = np.where(rng.random((5, 1, 7, 9)) < 0.2, -np.inf, 0).astype(f32)
gs, os_ = r(5, 3, 7, 4), r(5, 3, 7, 4)
qkv = r(5, 7, 3, 3, 16)
ga = r(5, 3, 7, 16)
bn_small, bn_large = r(7, 5, 3, 3), r(3, 7, 9, 9)
wc, bc = r(5), r(5)
wc7, bc7 = r(7), r(7)
ln = r(203, 24)  # rows not a multiple of 32 or 3
wl, bl = r(24), r(24)
xc = r(7, 4, 9, 9)
wk = r(6, 4, 3, 3)
gc = r(7, 6, 9, 9)
geom = Geom(xc.shape, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (9, 9))
xg = r(5, 6, 10, 10)
wg = r(8, 3, 4, 4)
geom2 = Geom(xg.shape, (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), (5, 5))
gg = r(5, 8, 5, 5)
pgeom = Geom((7, 5, 9, 10), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), (4, 5))
xp = r(7, 5, 9, 10)
CASES = {
    "relu": lambda: elementwise.relu(x),
    "leaky_relu": lambda: elementwise.leaky_relu(x64, 0.1),
    "relu_grad": lambda: activation.relu_grad(g, x),
    "leaky_relu_grad": lambda: activation.leaky_relu_grad(g, x, 0.1),
    "gelu": lambda: gelu.gelu(x),
    "gelu_grad": lambda: gelu.gelu_grad(g, x),
    "gelu_tanh": lambda: gelu.gelu_tanh(x64),
    "gelu_tanh_grad": lambda: gelu.gelu_tanh_grad_op(np, g, x),
    "erf": lambda: gelu.erf(x),
    "erf_grad": lambda: gelu.erf_grad_op(np, x64, x64),
    "adam": lambda: adam(x, g, g * 0.1, g * g, 0.0, False),
    "adamw": lambda: adam(x, g, g * 0.1, g * g, 0.01, True),
    "sgd": lambda: sgd(x, g, None, {}),
    "sgd momentum first": lambda: sgd(x, g, None, {"momentum": 0.9, "weight_decay": 0.01}),
    "sgd nesterov": lambda: sgd(x64, x64 * 0.5, x64 * 0.1, {"momentum": 0.9, "nesterov": True,
                                                           "dampening": 0.0}),
    "sgd decoupled": lambda: sgd(x, g, g * 0.1, {"momentum": 0.9, "dampening": 0.1,
                                                 "weight_decay": 0.01,
                                                 "decoupled_weight_decay": True}),
    "softmax_rows": lambda: inplace(attention.softmax_rows, s, mask, 0.5),
    "softmax": lambda: softmax.softmax(s, False, True),
    "log_softmax": lambda: softmax.softmax(s, True, True),
    "softmax_grad": lambda: softmax.softmax_grad(s * 0.3, softmax.softmax(s, False), False, True),
    "log_softmax_grad": lambda: softmax.softmax_grad(s * 0.3, softmax.softmax(s, True), True,
                                                     True),
    "score_grad_rows": lambda: inplace(
        lambda dp: attention.score_grad_rows(attention.softmax_rows(sp := s.copy(), None, 0.5)
                                             or sp, dp, gs, os_, 0.5, None), s * 0.3),
    "attention_heads.forward": lambda: attention_heads.forward(qkv, None, 0.25),
    "attention_heads.backward": lambda: attention_heads.backward(
        qkv, ga, attention_heads.forward(qkv, None, 0.25), None, 0.25, None),
    "batch_norm small": lambda: batchnorm.batch_norm(bn_small, wc, bc, 1e-5),
    "batch_norm": lambda: batchnorm.batch_norm(bn_large, wc7, bc7, 1e-5),
    "batch_norm_grad small": lambda: batchnorm.batch_norm_grad(bn_small * 2, bn_small, wc,
                                                               1e-5, True),
    "batch_norm_grad": lambda: batchnorm.batch_norm_grad(bn_large * 2, bn_large, wc7, 1e-5,
                                                         True),
    "channel_stats": lambda: batchnorm.channel_stats(bn_large),
    "layer_norm": lambda: layernorm.layer_norm(ln, wl, bl, 24, 1e-5, True),
    "layer_norm_grad input": lambda: layernorm.layer_norm_grad(ln * 2, ln, wl, 24, 1e-5,
                                                               (True, False, False), True)[0],
    "channel_sum": lambda: conv.channel_sum(gc),
    "direct": lambda: conv_direct.direct(xc, wk, wc[:1].repeat(6), geom, 1),
    "direct_input_grad": lambda: conv_direct.direct_input_grad(gc, wk, geom, 1),
    "gemm conv": lambda: conv_gemm.conv(xg, wg, None, geom2, 2, [(0, 3), (3, 5)]),
    "gemm input_grad": lambda: conv_gemm.input_grad(gg, wg, geom2, 2, [(0, 2), (2, 5)]),
    "gemm weight_grad": lambda: conv_gemm.weight_grad(gg, xg, geom2, 2, wg.shape, [(0, 5)]),
    "max_pool": lambda: pool.max_pool(xp, pgeom),
    "max_pool_grad": lambda: pool.max_pool_grad(xp[:, :, :8], xp, pool.max_pool(xp, pgeom),
                                                pgeom),
}
SUMS = {  # a sum split across threads: float rounding
    "layer_norm_grad weights": lambda: layernorm.layer_norm_grad(ln * 2, ln, wl, 24, 1e-5,
                                                                 (True, True, True), True)[1:],
    "direct_weight_grad": lambda: conv_direct.direct_weight_grad(gc, xc, geom, 1, wk.shape),
}


def flat(v):
    return [np.asarray(a) for a in (v if isinstance(v, tuple) else (v,))]


got = {}
for k in (1, 2, 3):
    tg.set_num_threads(k)
    assert tg.get_num_threads() == k and threads.worth(1, 0) == (k > 1)
    assert njit(lambda: num_threads())() == k  # the chunks compiled code makes
    got[k] = {name: flat(fn()) for name, fn in {**CASES, **SUMS}.items()}
for k in (2, 3):
    for name in CASES:
        for a, b in zip(got[1][name], got[k][name], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), (name, k)
    for name in SUMS:
        for a, b in zip(got[1][name], got[k][name], strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=f"{name} at {k}")
print("ok", len(CASES) + len(SUMS))
"""


def _run(code, timeout=600, **env):
    full = {**os.environ, **env}
    for k, v in env.items():
        if v is None:
            del full[k]
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                         check=False, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_every_parallel_kernel_gives_the_same_results_at_1_2_and_3_threads():
    out = _run(_AT_THREAD_COUNTS, NUMBA_NUM_THREADS="3", OMP_NUM_THREADS=None)
    assert out[0] == "ok" and int(out[1]) >= 28


_LOW_MASK = """
import numba, numpy as np
from tapegrad._kernels import threads
assert threads.active(), threads.describe()
a = np.ones((768, 768), np.float32)
numba.set_num_threads(1)  # this Python thread's mask below OpenBLAS's threads
print(float((a @ a)[0, 0]), numba.get_num_threads())
"""


def test_products_finish_when_the_calling_threads_numba_count_is_below_blas():
    # a product's jobs wait on each other: on one thread they would never finish
    env = {"NUMBA_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": None}
    assert _run(_LOW_MASK, timeout=120, **env) == ["768.0", "1"]
