"""tg.compile's elementwise fusion: fused programs equal eager steps bit for bit, and fuse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _fuse, _fused_update, _kernels, _source, nn

pytestmark = pytest.mark.skipif(
    _kernels.numba() is None, reason="fusion compiles its loops with numba"
)


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _same_bits(a, b) -> bool:
    """Equal bit for bit (zeros' signs included); any NaN equals any NaN (neither numpy nor
    the CPU promise a NaN's sign or payload)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(_bits(a)[~nan], _bits(b)[~nan])


def _run(make_model, make_opt, loss_fn, batches, compiled: bool):
    """Losses and final parameters of one training run, eager or compiled."""
    tg.manual_seed(0)
    model = make_model()
    opt = make_opt(model.parameters())
    losses = []
    step = None
    if compiled:
        step = tg.compile(lambda *b: loss_fn(model, *b), model, opt)
        for b in batches:
            losses.append(step(*b).numpy())
    else:
        for b in batches:
            with tg.Tape() as tape:
                loss = loss_fn(model, *(tg.tensor(v) for v in b))
            opt.step(tape.gradient(loss, model))
            losses.append(loss.numpy())
    return losses, [p.numpy().copy() for p in model.parameters()], step


def _assert_equal_runs(make_model, make_opt, loss_fn, batches):
    eager, p_eager, _ = _run(make_model, make_opt, loss_fn, batches, compiled=False)
    comp, p_comp, step = _run(make_model, make_opt, loss_fn, batches, compiled=True)
    for k, (a, b) in enumerate(zip(eager, comp, strict=True)):
        assert _same_bits(a, b), f"step {k}: loss {a} eager, {b} compiled"
    for a, b in zip(p_eager, p_comp, strict=True):
        assert _same_bits(a, b)
    return step


def _mlp():
    return nn.Sequential(
        nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2), nn.Tanh()
    )


def _mse(model, x, y):
    return F.mse_loss(model(x), y)


OPTIMIZERS = {
    "sgd": lambda p: tg.optim.SGD(p, lr=0.05),
    "sgd-momentum": lambda p: tg.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "sgd-nesterov": lambda p: tg.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    "sgd-dampening-decoupled": lambda p: tg.optim.SGD(
        p, lr=0.05, momentum=0.5, dampening=0.3, weight_decay=1e-2, decoupled_weight_decay=True
    ),
    "adam": lambda p: tg.optim.Adam(p, lr=1e-2),
    "adam-l2": lambda p: tg.optim.Adam(p, lr=1e-2, weight_decay=1e-2),
    "adamw": lambda p: tg.optim.AdamW(p, lr=1e-2),
}


def _batches(xs, ys, n=8, seed=1, scale=1.0):
    rng = np.random.default_rng(seed)
    return [
        (
            (rng.standard_normal(xs) * scale).astype(np.float32),
            rng.standard_normal(ys).astype(np.float32),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_fused_mlp_equals_eager_bit_for_bit(opt):
    step = _assert_equal_runs(_mlp, OPTIMIZERS[opt], _mse, _batches((64, 5), (64, 2), n=10))
    # two bias+ReLU loops forward; the MSE loss with its VJP, tanh's VJP and the last bias's
    # gradient, then each ReLU's VJP with the bias gradient below it
    assert step.fused_kernels == 5, step.source
    assert "fused[nn.mse_loss, nn.mse_loss vjp0, tanh vjp0, nn.linear vjp2]" in step.source


def test_fused_mlp_equals_eager_on_large_and_tiny_values():
    # inputs spanning many binades: overflow to inf, subnormal products, exact zeros
    batches = _batches((64, 5), (64, 2), n=4, seed=2, scale=1e18)
    batches += [(np.zeros((64, 5), np.float32), np.zeros((64, 2), np.float32))]
    batches += _batches((64, 5), (64, 2), n=3, seed=3, scale=1e-20)
    _assert_equal_runs(_mlp, OPTIMIZERS["adam"], _mse, batches)


def test_fused_cnn_equals_eager():
    def cnn():
        return nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(4 * 3 * 3, 16), nn.ReLU(), nn.Linear(16, 3),
        )  # fmt: skip

    batches = _batches((8, 1, 8, 8), (8, 3), n=6, seed=4)
    for opt in ("sgd", "adam"):
        step = _assert_equal_runs(cnn, OPTIMIZERS[opt], _mse, batches)
        assert step.fused_kernels >= 1, step.source


@pytest.mark.parametrize("opt", ["sgd-momentum", "adam"])
def test_fused_transformer_layer_equals_eager(opt):
    def layer():
        return nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)

    step = _assert_equal_runs(layer, OPTIMIZERS[opt], _mse, _batches((4, 5, 8), (4, 5, 8), n=6))
    assert step.fused_kernels >= 1, step.source


def test_every_fused_op_equals_numpy_on_special_values():
    """A loss that chains the arithmetic fusion knows; inputs with zeros of both signs,
    huge and subnormal values, so that rounding, overflow and division by zero all occur."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.w = tg.Parameter(tg.randn(6))
            self.v = tg.Parameter(tg.randn(4, 6))

        def forward(self, x):
            h = self.lin(x)  # the bias add joins the loop below
            a = tg.relu(h) * self.v - h / (self.w * 3.0 + 0.5)
            b = tg.sigmoid(a) * a + tg.tanh(h) * 0.25 - (-a) / 7.0
            c = tg.exp(a * 0.01) + tg.sqrt(tg.relu(b) + 1.0) + (h * h) * 0.125
            return c

    def loss_fn(model, x, y):
        return F.mse_loss(model(x), y)

    rng = np.random.default_rng(5)
    specials = np.array([0.0, -0.0, 1e-40, -1e-42, 1e4, -3e3, 1e-30, 7.0], np.float32)
    batches = []
    for k in range(6):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        if k % 2:
            x.flat[rng.choice(x.size, 8, replace=False)] = specials
        batches.append((x, rng.standard_normal((4, 6)).astype(np.float32)))
    with np.errstate(all="ignore"):
        step = _assert_equal_runs(Net, OPTIMIZERS["adam"], loss_fn, batches)
        p_final = _run(Net, OPTIMIZERS["adam"], loss_fn, batches, compiled=True)[1]
    assert all(np.isfinite(p).any() for p in p_final)  # the run kept numbers to compare
    fused = [line for line in step.source.splitlines() if "# fused[" in line]
    assert step.fused_kernels == len(fused) >= 3, step.source
    text = "\n".join(fused)
    for name in ("nn.linear, relu", "mul", "div", "sigmoid vjp0", "sqrt vjp0", "exp vjp0", "neg"):
        assert name in text, (name, text)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_fused_loop_matches_numpy_on_many_random_inputs(dtype):
    """One loop (bias add, ReLU, ReLU's VJP and the bias gradient's column sum) against the
    numpy code it replaces, on many random shapes and magnitudes."""
    rng = np.random.default_rng(6)
    for _ in range(30):
        rows, cols = int(rng.integers(1, 300)), int(rng.integers(2, 70))
        scale = 10.0 ** rng.integers(-30, 30)
        y, g = ((rng.standard_normal((rows, cols)) * scale).astype(dtype) for _ in range(2))
        b = (rng.standard_normal(cols) * scale).astype(dtype)
        y[0, 0], y[-1, -1] = -0.0, np.nan
        h = y + b
        h = np.maximum(h, 0).astype(dtype)
        gg = g * (h > 0)
        h2, gg2, s2 = _fused_layer(rows, cols, dtype).fwd(y, b, g)
        assert _same_bits(h2, h) and _same_bits(gg2, gg) and _same_bits(s2, gg.sum(axis=0))


def _fused_layer(rows, cols, dtype):
    """The fused loop of ``relu(linear(x, w, b))`` forward and backward (one loop: the VJP's
    inputs are ready where the forward runs), called as ``fwd(x @ w.T, b, g)``."""
    from tapegrad import _autodiff  # noqa: PLC0415
    from tapegrad._compile import _Program  # noqa: PLC0415

    x = tg.tensor(np.ones((rows, cols), dtype))
    w = tg.Parameter(tg.tensor(np.eye(cols, dtype=dtype)))
    b = tg.Parameter(tg.zeros(cols, dtype=dtype))
    prog = _Program([x])
    _autodiff.start_capture(prog)
    try:
        with tg.Tape() as tape:
            out = tg.relu(F.linear(x, w, b))
        seed = tg.tensor(np.ones((rows, cols), dtype))
        grads = tape.gradient(out, [w, b], output_gradients=seed)
    finally:
        _autodiff.stop_capture()
    prog.finish((out, *grads))
    assert _fuse.fuse(prog, [x._data]) == 1
    (kern,) = [p for p, *_ in prog.instrs if isinstance(p, _fuse.FusedKernel)]
    assert kern.members == ["nn.linear", "relu", "relu vjp0", "nn.linear vjp2"]
    return kern


def test_fused_loops_have_no_fused_multiply_add():
    # a * b + c must round twice, as numpy does: LLVM may not contract it into an FMA
    _assert_equal_runs(_mlp, OPTIMIZERS["adam"], _mse, _batches((16, 5), (16, 2), n=3))
    import numba  # noqa: PLC0415

    texts = []
    for kern in _fuse._CACHE.values():  # recompiled uncached: numba hides a cached loop's asm
        fresh = numba.njit(**_source.JIT_OPTIONS)(kern.py_func)
        for sig in kern.signatures:
            fresh.compile(sig)
            texts.append(fresh.inspect_asm(sig))
    asm = "\n".join(texts).lower()
    assert "mulps" in asm or "mulss" in asm or "mulsd" in asm  # the loops were read
    assert not any(op in asm for op in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub"))


def test_without_numba_programs_run_unfused_and_equal(monkeypatch):
    monkeypatch.setattr(_kernels, "numba", lambda: None)
    step = _assert_equal_runs(_mlp, OPTIMIZERS["adam"], _mse, _batches((16, 5), (16, 2), n=4))
    assert step.fused_kernels == 0 and "def run(inputs):" in step.source


def test_tapegrad_kernels_numpy_turns_fusion_off():
    code = (
        "import tapegrad as tg, tapegrad.nn.functional as F\n"
        "m = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.ReLU(), tg.nn.Linear(4, 1))\n"
        "step = tg.compile(lambda x, y: F.mse_loss(m(x), y), m, tg.optim.SGD(m.parameters()))\n"
        "x, y = tg.randn(8, 3), tg.randn(8, 1)\n"
        "for _ in range(3): step(x, y)\n"
        "print('fused', step.fused_kernels)\n"
    )
    env = {
        **os.environ,
        "TAPEGRAD_KERNELS": "numpy",
        "PYTHONPATH": str(Path(tg.__file__).parents[1]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert "fused 0" in out.stdout, out.stdout + out.stderr


def test_amsgrad_and_other_optimizers_keep_their_own_update():
    # AMSGrad and RMSprop have no fused loop: update_one runs, results still equal eager
    for make in (
        lambda p: tg.optim.Adam(p, lr=1e-2, amsgrad=True),
        lambda p: tg.optim.RMSprop(p, lr=1e-2),
    ):
        _assert_equal_runs(_mlp, make, _mse, _batches((16, 5), (16, 2), n=4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pairwise_sum_is_numpys_sum(dtype):
    from tapegrad._kernels.reduce import pairwise_sum  # noqa: PLC0415

    rng = np.random.default_rng(7)
    for n in [*range(1, 140), 255, 256, 257, 1000, 8191, 8192, 8193, 100_003]:
        a = (rng.standard_normal(n) * rng.exponential(1.0, n) * 1e3).astype(dtype)
        zero = dtype(0)
        assert _same_bits(zero + pairwise_sum(a, 0, n, zero), a.sum()), n


def test_loops_are_compiled_once_per_chain():
    batches = _batches((16, 5), (16, 2), n=3)
    _assert_equal_runs(_mlp, OPTIMIZERS["sgd"], _mse, batches)
    before = len(_fuse._CACHE)
    # the same chains again (another model, other values): no new loop
    _assert_equal_runs(_mlp, OPTIMIZERS["adam"], _mse, _batches((16, 5), (16, 2), n=3, seed=9))
    assert len(_fuse._CACHE) == before


def test_a_loop_that_fails_to_compile_leaves_the_program_unfused(monkeypatch):
    def broken(src):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(_fuse, "_compile", broken)
    monkeypatch.setattr(_fused_update, "_KINDS", {})  # the optimizer loops are loaded anew (and fail)
    monkeypatch.setitem(sys.modules, "tapegrad._kernels.optim", None)  # import fails
    with pytest.warns(RuntimeWarning) as record:
        step = _assert_equal_runs(_mlp, OPTIMIZERS["sgd"], _mse, _batches((16, 5), (16, 2), n=3))
    messages = " | ".join(str(w.message) for w in record)
    assert len(record) == 2, messages
    assert "elementwise fusion failed (RuntimeError: no compiler today)" in messages
    assert "optimizer loops failed to load (ModuleNotFoundError: " in messages
    assert step.fused_kernels == 0 and _fused_update._KINDS == {None: False}


def _twice_step(model, opt):
    """Two updates in one step, the second forward reading the parameters the first updated."""

    def step(x, y):
        with tg.Tape() as tape:
            a = _mse(model, x, y)
        opt.step(tape.gradient(a, model))
        with tg.Tape() as tape:
            b = _mse(model, x * 0.5, y)
        opt.step(tape.gradient(b, model))
        return a, b

    return step


@pytest.mark.parametrize("opt", ["sgd-momentum", "adam"])
def test_no_loop_reaches_across_an_update(opt):
    # the second forward's loops must read the parameters after the first update, as eager
    batches = _batches((16, 5), (16, 2), n=5, seed=11)
    runs = []
    for compiled in (False, True):
        tg.manual_seed(0)
        model = _mlp()
        step = _twice_step(model, OPTIMIZERS[opt](model.parameters()))
        run = tg.compile(step) if compiled else step
        losses = [[t.numpy() for t in run(tg.tensor(x), tg.tensor(y))] for x, y in batches]
        runs.append((losses, [p.numpy().copy() for p in model.parameters()]))
        if compiled:
            assert run.fused_kernels >= 4 and run.source.count(".update (fused)") == 12
    (l0, p0), (l1, p1) = runs
    assert all(_same_bits(a, b) for s0, s1 in zip(l0, l1, strict=True) for a, b in zip(s0, s1))
    assert all(_same_bits(a, b) for a, b in zip(p0, p1, strict=True))


@pytest.mark.parametrize("opt", ["sgd-momentum", "adamw"])
@pytest.mark.parametrize("change", ["schedule", "load", "schedule+load"])
@pytest.mark.parametrize("fused", [True, False])
def test_fused_updates_read_the_group_and_the_state_when_they_run(opt, change, fused, monkeypatch):
    # a schedule changes the learning rate between steps, or the optimizer's state is loaded
    # (new group dicts and state: the program looks the group up when it runs)
    if not fused:
        monkeypatch.setattr(_fuse, "enabled", lambda: False)
    batches = _batches((16, 5), (16, 2), n=8, seed=12)
    finals = []
    for compiled in (False, True):
        tg.manual_seed(0)
        model = _mlp()
        o = OPTIMIZERS[opt](model.parameters())
        sched = tg.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
        step = tg.compile(lambda x, y, m=model: _mse(m, x, y), model, o) if compiled else None
        saved = None
        for k, (x, y) in enumerate(batches):
            if step is not None:
                step(x, y)
            else:
                with tg.Tape() as tape:
                    loss = _mse(model, tg.tensor(x), tg.tensor(y))
                o.step(tape.gradient(loss, model))
            if "schedule" in change:
                sched.step()
            if k == 3:
                saved = o.state_dict()
            if k == 5 and "load" in change:
                o.load_state_dict(saved)
        finals.append([p.numpy().copy() for p in model.parameters()])
        if step is not None:
            assert (".update (fused)" in step.source) == fused
    assert all(_same_bits(a, b) for a, b in zip(*finals, strict=True))


def test_an_input_in_another_layout_gets_its_own_program():
    batches = _batches((16, 5), (16, 2), n=4, seed=13)
    batches += [(np.asfortranarray(x), y) for x, y in _batches((16, 5), (16, 2), n=3, seed=14)]
    batches += [(x, np.asfortranarray(y)) for x, y in _batches((16, 5), (16, 2), n=3, seed=15)]
    step = _assert_equal_runs(_mlp, OPTIMIZERS["adam"], _mse, batches)
    assert len(step._sources) == 3


def test_an_op_after_an_update_does_not_join_a_loop_before_it():
    # h * w reads h (made by the first loop) and w after its update: it runs after the update
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 8)
            self.w = tg.Parameter(tg.randn(8))

    def make():
        tg.manual_seed(0)
        m = Net()
        opt = tg.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            with tg.Tape() as tape:
                h = tg.relu(m.lin(x))
                a = F.mse_loss(h * m.w, y)
            opt.step(tape.gradient(a, m))
            with tg.Tape() as tape:
                b = F.mse_loss(h * m.w, y)
            opt.step({m.w: tape.gradient(b, m.w)}, allow_missing=True)
            return a, b

        return m, step

    batches = _batches((16, 5), (16, 8), n=4, seed=16)
    runs = []
    for compiled in (False, True):
        m, step = make()
        run = tg.compile(step) if compiled else step
        runs.append([[t.numpy() for t in run(tg.tensor(x), tg.tensor(y))] for x, y in batches])
        runs[-1].append([p.numpy().copy() for p in m.parameters()])
        if compiled:
            assert run.fused_kernels >= 2, run.source
    assert all(_same_bits(a, b) for r0, r1 in zip(*runs, strict=True) for a, b in zip(r0, r1))


def test_a_loop_writes_over_an_operand_that_dies_there_and_equals_eager():
    """ReLU after a convolution and ReLU's VJP after pooling's run as one-op loops that write
    over the array they read (it is dead from there): fewer live arrays, same bits."""
    rng = np.random.default_rng(3)

    def make():
        return nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 3)
        )

    batches = [
        (rng.standard_normal((5, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 5))
        for _ in range(4)
    ]
    step = _assert_equal_runs(
        make, OPTIMIZERS["sgd"], lambda m, x, y: F.cross_entropy(m(x), y), batches
    )
    src = step.source
    conv = next(line for line in src.splitlines() if "# nn.conv2d" in line and "vjp" not in line)
    relu = next(line for line in src.splitlines() if "fused[relu]" in line)
    conv_out = conv.split("=")[0].strip()
    assert f"o0={conv_out}" in relu, src  # ReLU wrote over the convolution's output
    assert "fused[relu vjp0]" in src and "o0=" in src.split("fused[relu vjp0]")[0].splitlines()[-1]


def _one_weight(seed, forward):
    """A model factory: one (4, 3) float32 weight ``w`` drawn from ``seed``, ``forward(m, *x)``."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            w0 = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
            self.w = tg.Parameter(tg.tensor(w0))

        def forward(self, *x):
            return forward(self, *x)

    return M


def test_an_operand_still_read_later_or_not_owned_is_never_written_over():
    """x is read again after the ReLU, and a view of a parameter is the parameter's memory:
    neither is given to a loop as its output, and compiled equals eager."""
    rng = np.random.default_rng(4)

    def forward(m, x):
        h = x @ m.w
        r = F.relu(h)  # h is read again below: not dead at the ReLU
        v = F.relu(m.w.reshape(3, 4))  # a view of the parameter: never written over
        return (r * h).sum() + v.sum()

    batches = [(rng.standard_normal((6, 4)).astype(np.float32),) for _ in range(4)]
    step = _assert_equal_runs(_one_weight(5, forward), OPTIMIZERS["sgd"], lambda m, x: m(x), batches)
    assert "fused[relu]" in step.source and "fused[relu, mul]" in step.source, step.source
    for line in step.source.splitlines():
        if "fused[relu]" in line or "fused[relu, mul]" in line:
            assert "o0=" not in line, step.source


def test_an_operand_whose_row_the_loop_also_reads_is_not_written_over():
    """``relu(x - x[0])`` with ``x`` dead after it: the loop reads ``x[0]`` (a view of ``x``)
    for every row, so writing the result over ``x`` would change what later rows read."""

    def forward(m, a):
        x = F.relu(a * 2.0)  # a loop's fresh output; nothing reads it after the next line
        return (F.relu(x - x[0]) @ m.w).sum()

    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal((6, 4)).astype(np.float32),) for _ in range(4)]
    step = _assert_equal_runs(_one_weight(6, forward), OPTIMIZERS["sgd"], lambda m, a: m(a), batches)
    line = next(s for s in step.source.splitlines() if "fused[sub, relu]" in s)
    assert "o0=" not in line, step.source
