"""Compile budgets: no kernel's code grows past what numba and LLVM compile in about 2 s.

Compile time itself is not asserted (the machine is shared: a timing test would be flaky). Two
deterministic measures of a kernel's size stand for it, each with a budget calibrated by
``tools/compile_times.py`` (docs/design.md, "Compile budget"):

- the Python bytecode of the kernel's function: numba's front end (SSA, type inference,
  lowering), most of a large kernel's compile time, grows with it (the generated convolution
  kernels at 4,400-16,800 instructions took 5-20 s);
- the instructions of the optimised LLVM IR: LLVM's passes and code generation.
"""

from __future__ import annotations

import dis
import importlib
import pkgutil

import pytest

from tapegrad import _kernels
from tools.compile_times import llvm_instructions

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")

# Calibrated on the 2-core AMD EPYC (Zen 4, family 25 model 17, AVX-512) machine with
# tools/compile_times.py, a kernel's own CPU seconds from an empty cache at a load of 13-16
# (docs/design.md, "Compile budget"): the generated kernels at 540-1,130 bytecode instructions
# and 1,600-4,700 LLVM instructions compiled in 0.7-1.9 s each; the budgets leave a margin
# below 2 s.
# Bytecode instructions of a kernel module's function with the helpers numba inlines into it
# (``inline="always"``: typed and lowered again at each call site), once per call site. The
# largest, attention_tiles._mm (a 4 x 16 tile of written-out sums), 1,206;
# attention_heads._bwd_blocks with its products inlined, 2,391, took 2.5 s (494 today: its
# products called by address).
BYTECODE_BUDGET = 1300
# The generated convolution kernels: 540-1,130 today, from 3,600-5,800 when the sums of a
# block were written out one statement each (4,400-16,800 before that).
GENERATED_BUDGET = 1300
# Instructions of a generated kernel's optimised LLVM IR, wrappers and the helpers it links in
# included: 1,600-4,700 today (the Winograd kernels the most, with the 1,400 of their shared
# input transform, compiled once), 0.7-1.9 s; written a statement a sum they had 1,500-4,500 in
# 5.6-7.8 s, so this measure alone does not see that growth: the bytecode budget does.
LLVM_BUDGET = 5000
# The parallel twins (``*_par``): a ``prange`` over chunks, each a call of the serial kernel's
# compiled entry point (``conv_blocked.call_at``): 780-1,210 instructions, 0.4-0.8 s. Calling
# the serial kernel by name linked its IR into the twin and its parfor body, optimised again:
# 2,900-6,400 instructions, 1.4-4.1 s.
TWIN_LLVM_BUDGET = 1500
# Tighter LLVM budgets of generated kernels that call their helpers by address
# (conv_blocked._PARTS): wgradw 1,164 today (0.4-0.6 CPU s); with wpatch linked in by name and
# dM inline 4,667 (1.5-2.0 CPU s).
GENERATED_LLVM = {"wgradw": 2000}


def _bytecode(fn):
    return len(list(dis.get_instructions(fn)))


def _inlined_bytecode(fn):
    """``fn``'s bytecode and that of each ``inline="always"`` kernel it calls, once per call
    site (recursively): the code numba's front end types and lowers for it."""
    from numba.core.dispatcher import Dispatcher  # noqa: PLC0415

    n = 0
    for ins in dis.get_instructions(fn):
        n += 1
        obj = fn.__globals__.get(ins.argval) if ins.opname == "LOAD_GLOBAL" else None
        if isinstance(obj, Dispatcher) and obj.targetoptions.get("inline") == "always":
            n += _inlined_bytecode(obj.py_func)
    return n


def _generated(p):
    """The generated convolution kernels at ``p`` pixels a block, and the helpers they call,
    as Python functions."""
    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    ns: dict = {}
    exec(compile(cb._source(p, p, cb.OB), f"<conv_blocked p{p}>", "exec"), ns)  # noqa: S102
    return {name: ns[name] for name in (*cb._ARGS, *cb.HELPERS)}


def _twins(p):
    """The parallel twins of the generated kernels at ``p`` pixels a block."""
    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    ns: dict = {}
    exec(compile(cb._source(p, p, cb.OB), f"<conv_blocked p{p}>", "exec"), ns)  # noqa: S102
    return {f"{name}_par": ns[f"{name}_par"] for name in cb._ARGS}


@numba_only
@pytest.mark.parametrize("p", [8, 4])  # AVX-512's blocks (the largest) and AVX2's
def test_generated_conv_kernels_stay_within_the_bytecode_budget(p):
    sizes = {name: _bytecode(fn) for name, fn in _generated(p).items()}
    over = {k: v for k, v in sizes.items() if v > GENERATED_BUDGET}
    assert not over, f"generated kernels past {GENERATED_BUDGET} bytecode instructions: {over}"
    assert min(sizes.values()) > 10  # the measure counts something


@numba_only
def test_every_kernel_module_function_stays_within_the_bytecode_budget():
    from numba.core.dispatcher import Dispatcher  # noqa: PLC0415

    seen = 0
    for info in pkgutil.iter_modules(_kernels.__path__):
        mod = importlib.import_module(f"{_kernels.__name__}.{info.name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, Dispatcher) and obj.py_func.__module__ == mod.__name__:
                seen += 1
                n = _inlined_bytecode(obj.py_func)
                assert n <= BYTECODE_BUDGET, f"{mod.__name__}.{name}: {n} bytecode instructions"
    assert seen > 20  # the walk found the kernels


# Tighter budgets for the kernels cut below 2 s (inlined bytecode: today, and before the cut).
KERNEL_BYTECODE = {
    ("attention_heads", "_bwd_blocks"): 1100,  # 494 (2,391 with its products inlined)
    ("conv_direct", "_fwd"): 860,  # 808 (908 with a lone 3x3 channel's loop of its own)
    ("conv_direct", "_wgrad"): 800,  # 676 (1,100 with the pair pass inside)
}


@numba_only
@pytest.mark.parametrize(("module", "name"), sorted(KERNEL_BYTECODE))
def test_kernels_cut_below_two_seconds_stay_within_their_bytecode_budgets(module, name):
    fn = getattr(importlib.import_module(f"{_kernels.__name__}.{module}"), name).py_func
    n, budget = _inlined_bytecode(fn), KERNEL_BYTECODE[module, name]
    assert 100 < n <= budget, f"{module}.{name}: {n} bytecode instructions (budget {budget})"


def test_the_bytecode_measure_counts_an_inlined_helper_at_each_call_site():
    import numba  # noqa: PLC0415

    ns: dict = {"numba": numba}
    exec(  # noqa: S102
        "@numba.njit(inline='always')\ndef h(a):\n    return a[0] + a[1] + a[2] + a[3]\n"
        "def once(a):\n    return h(a)\n"
        "def twice(a):\n    return h(a) + h(a)\n", ns)
    helper = _bytecode(ns["h"].py_func)
    assert _inlined_bytecode(ns["once"]) == _bytecode(ns["once"]) + helper
    assert _inlined_bytecode(ns["twice"]) == _bytecode(ns["twice"]) + 2 * helper


def test_the_bytecode_measure_grows_with_unrolled_code():
    loop, unrolled = {}, {}
    exec("def f(a):\n    s = 0.0\n    for i in range(64):\n        s += a[i]\n", loop)  # noqa: S102
    exec("def f(a):\n    s = 0.0\n" + "".join(f"    s += a[{i}]\n" for i in range(64)),  # noqa: S102
         unrolled)
    assert _bytecode(unrolled["f"]) > 10 * _bytecode(loop["f"])


# Kernels that call other kernels' compiled code by address (``twins.call_at``), and the kernels
# they must not call by name: a call by name links the callee's IR into the caller, optimised
# and emitted again (CPU s to compile, by name -> by address, 2-core AMD EPYC Zen 4): the twins
# conv_direct._fwd_par, _wgrad_par 5.6-6.6 -> 0.5-0.7, attention_heads._bwd_par 2.9 -> 0.5,
# _fwd_par 1.5 -> 0.4, conv_gemm._gather_par 2.7 -> 0.4; the serial attention_heads._bwd_blocks
# 2.5 -> 1.2 (its products in _bwd_scores, _bwd_sums), conv_direct._wgrad 1.7 -> 0.8 (_place,
# _place_wide_hw, _wgrad_pair), conv_direct._fwd 1.8 -> 0.9 (_place); layernorm._ln_fwd_par,
# _ln_bwd_par 1.4-1.6 -> 0.5, pool._max4_grad_par 1.7-2.0 -> 0.5-0.6, _max4_par 0.7 -> 0.4.
BY_ADDRESS = {
    "conv_direct": {"_fwd_par": ("_fwd",), "_wgrad_par": ("_wgrad",), "_fwd": ("_place",),
                    "_wgrad": ("_place", "_place_wide_hw", "_wgrad_pair")},
    "attention_heads": {"_fwd_par": ("_fwd_blocks",), "_bwd_par": ("_bwd_blocks",),
                        "_bwd_blocks": ("_bwd_scores", "_bwd_sums")},
    "conv_gemm": {"_gather_par": ("_gather_k",)},
    "layernorm": {"_ln_fwd_par": ("_ln_fwd",), "_ln_bwd_par": ("_ln_bwd",)},
    "pool": {"_max4_par": ("_max4",), "_max4_grad_par": ("_max4_grad",),
             "_maxk_grad_par": ("_maxk_grad",)},
}


@numba_only
@pytest.mark.parametrize("module", sorted(BY_ADDRESS))
def test_kernels_call_their_parts_by_address_not_by_name(module):
    """As the generated twins: through ``call_at``, not the callee by name."""
    mod = importlib.import_module(f"{_kernels.__name__}.{module}")
    for name, callees in BY_ADDRESS[module].items():
        names = getattr(mod, name).py_func.__code__.co_names
        named = set(callees).intersection(names)
        assert not named, f"{module}.{name} calls {sorted(named)} by name, not through call_at"
        assert "call_at" in names, f"{module}.{name}"
        for callee in callees:  # still a kernel of that module
            assert hasattr(getattr(mod, callee), "py_func"), f"{module}.{callee}"


@numba_only
@pytest.mark.slow
@pytest.mark.parametrize("name", ["wfwd", "wgradw", "fwd", "tgrad"])  # the largest
def test_generated_kernel_compiles_within_the_llvm_budget(name):
    """A generated kernel at AVX-512's blocks (P = 8), compiled afresh in float32 as
    conv_blocked._kernel compiles it (1-2 CPU s): its optimised IR within LLVM_BUDGET."""
    import numba  # noqa: PLC0415
    from numba.core.registry import CPUDispatcher  # noqa: PLC0415

    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    opts = {"nopython": True, "fastmath": {"contract"}, "error_model": "numpy", "nogil": True}
    fns = _generated(8)
    ns = fns[name].__globals__
    for helper in cb.HELPERS:  # as the generated module's import makes them
        ns[helper] = CPUDispatcher(fns[helper], targetoptions=opts)
    kinds = {"t": "f4[:, :, :, ::1]", "v": "f4[::1]", "w": "f4[:, :, ::1]"}
    arrays, ints = cb._ARGS[name]
    sig = numba.core.sigutils.normalize_signature(
        f"void({', '.join(kinds[a] for a in arrays)}{', int64' * ints})")[0]
    cfg = numba.core.config
    old = cfg.SLP_VECTORIZE
    cfg.SLP_VECTORIZE = 1  # as conv_blocked._kernel compiles it
    try:
        disp = CPUDispatcher(fns[name], targetoptions=opts)
        disp.compile(sig)
    finally:
        cfg.SLP_VECTORIZE = old
    n = llvm_instructions(disp.inspect_llvm(disp.signatures[0]))
    budget = GENERATED_LLVM.get(name, LLVM_BUDGET)
    assert 500 < n <= budget, f"{name}: {n} LLVM instructions (budget {budget})"


@numba_only
@pytest.mark.parametrize("p", [8, 4])
def test_generated_kernels_call_their_parts_by_address_not_by_name(p):
    """conv_blocked._PARTS: each through ``call_at``, its address an argument (by name, its IR
    linked into the kernel and optimised again)."""
    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    fns = _generated(p)
    assert cb._PARTS
    for name, parts in cb._PARTS.items():
        names = fns[name].__code__.co_names
        named = set(parts).intersection(names)
        assert not named, f"{name} calls {sorted(named)} by name, not through call_at"
        assert "call_at" in names, name
        assert set(parts) <= set(cb.HELPERS), name  # each a generated helper


@numba_only
def test_parallel_twins_call_no_generated_kernel_by_name():
    """A twin calls its serial kernel through the compiled entry point (``call_at``): a call
    by name would link the serial kernel's IR into the twin and compile it again (the twins
    then took 1.4-4.1 s, past the budget)."""
    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    twins = _twins(8)
    assert len(twins) == len(cb._ARGS)
    generated = {*cb._ARGS, *cb.HELPERS}
    for name, fn in twins.items():
        called = generated.intersection(fn.__code__.co_names)
        assert not called, f"{name} calls {sorted(called)} by name, not through call_at"
        assert "call_at" in fn.__code__.co_names, name


@numba_only
@pytest.mark.slow
@pytest.mark.parametrize("name", ["fwds_par", "wgrads_par"])  # the largest
def test_parallel_twin_compiles_within_the_twin_llvm_budget(name):
    """A twin at AVX-512's blocks compiled afresh in float32 as conv_blocked._kernel compiles
    it (0.5-0.8 CPU s): its optimised IR, parfor body included, within TWIN_LLVM_BUDGET, which
    the serial kernel's IR linked in (1,600-4,700 instructions on its own) would pass."""
    import numba  # noqa: PLC0415
    from numba.core.registry import CPUDispatcher  # noqa: PLC0415

    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    opts = {"nopython": True, "fastmath": {"contract"}, "error_model": "numpy", "nogil": True,
            "parallel": True}
    kinds = {"t": "f4[:, :, :, ::1]", "v": "f4[::1]", "w": "f4[:, :, ::1]"}
    arrays, ints = cb._ARGS[name[:-4]]
    sig = numba.core.sigutils.normalize_signature(
        f"void({', '.join(kinds[a] for a in arrays)}{', int64' * (ints + 1)})")[0]
    disp = CPUDispatcher(_twins(8)[name], targetoptions=opts)
    disp.compile(sig)
    n = llvm_instructions(disp.inspect_llvm(disp.signatures[0]))
    assert 300 < n <= TWIN_LLVM_BUDGET, f"{name}: {n} LLVM instructions"


# Optimised LLVM instructions of kernels that call their parts by address (BY_ADDRESS), compiled
# afresh in float32 as their first call compiles them: today -> the budget (with their parts
# linked in by name, before).
FRESH_LLVM = {
    ("attention_heads", "_bwd_blocks"): 2500,  # 1,770 (3,113: 2.5 CPU s)
    ("attention_heads", "_fwd_par"): TWIN_LLVM_BUDGET,  # 646 (2,358)
    ("attention_heads", "_bwd_par"): TWIN_LLVM_BUDGET,  # 782 (4,387)
    ("conv_gemm", "_gather_par"): TWIN_LLVM_BUDGET,  # 768 (4,337)
    ("conv_direct", "_fwd"): 3000,  # 2,108 (6,858, _place's 2,682 among them)
    ("conv_direct", "_wgrad"): 3000,  # 1,999 (7,624)
    ("layernorm", "_ln_fwd_par"): TWIN_LLVM_BUDGET,  # 639 (2,012)
    ("layernorm", "_ln_bwd_par"): TWIN_LLVM_BUDGET,  # 739 (2,367)
    ("pool", "_max4_par"): 900,  # 603 (989)
    ("pool", "_max4_grad_par"): TWIN_LLVM_BUDGET,  # 772 (2,488)
}


def _first_calls(monkeypatch):
    """The kernels of FRESH_LLVM called once in float32, the parallel forms chosen."""
    import numpy as np  # noqa: PLC0415

    from tapegrad._kernels import attention_heads as ah  # noqa: PLC0415
    from tapegrad._kernels import conv_direct as cd  # noqa: PLC0415
    from tapegrad._kernels import conv_gemm as cg  # noqa: PLC0415
    from tapegrad._kernels import layernorm as ln  # noqa: PLC0415
    from tapegrad._kernels import pool  # noqa: PLC0415

    monkeypatch.setattr(ah, "_parallel", lambda x: True)
    monkeypatch.setattr(pool, "_parallel", lambda x: True)
    monkeypatch.setattr(cd, "_parallel", lambda n, work: True)
    monkeypatch.setattr(cg, "_parallel", lambda items, size: True)
    rng = np.random.default_rng(0)
    f4 = np.float32
    x = rng.standard_normal((2, 5, 3, 2, 8)).astype(f4)
    out = ah.forward(x, None, 0.5)
    ah.backward(x, np.ones_like(out), out, None, 0.5, None)
    for serial in (False, True):  # the serial kernels as well as their twins
        monkeypatch.setattr(ah, "_parallel", lambda x, s=serial: not s)
        out = ah.forward(x, None, 0.5)
        ah.backward(x, np.ones_like(out), out, None, 0.5, None)

    class Geom:
        padding, dilation, out_hw = ((1, 1), (1, 1)), (1, 1), (6, 6)

    xc = rng.standard_normal((2, 2, 6, 6)).astype(f4)
    w = rng.standard_normal((4, 2, 3, 3)).astype(f4)
    cd.direct(xc, w, None, Geom, 1)
    cd.direct_weight_grad(rng.standard_normal((2, 4, 6, 6)).astype(f4), xc, Geom, 1, w.shape)
    xt = rng.standard_normal((2, 1, 8, 8, 2)).astype(f4)
    cg._gather(xt, np.empty((1, 72, 18), f4), 3, 3, 1, 1, 1, 1, 6, 6)
    xl = rng.standard_normal((70, 16)).astype(f4)
    ln.layer_norm(xl, np.ones(16, f4), None, 16, 1e-5, True)
    ln.layer_norm_grad(xl, xl, np.ones(16, f4), 16, 1e-5, (True, True, True), True)

    class Pool:
        kernel, stride, dilation, padding = (2, 2), (2, 2), (1, 1), ((0, 0), (0, 0))
        in_shape, out_hw = (2, 3, 6, 6), (3, 3)

    xp = rng.standard_normal(Pool.in_shape).astype(f4)
    out = pool.max_pool(xp, Pool)
    pool.max_pool_grad(out, xp, out, Pool)


@numba_only
@pytest.mark.slow
def test_kernels_calling_by_address_compile_within_their_llvm_budgets(monkeypatch):
    """Each compiled afresh (about 0.5-1 CPU s each): its optimised IR within its budget, which
    its parts linked in by name (as before) exceed."""
    import numba  # noqa: PLC0415
    from numba.core.registry import CPUDispatcher  # noqa: PLC0415

    _first_calls(monkeypatch)
    cfg = numba.core.config
    over = {}
    for (module, name), budget in FRESH_LLVM.items():
        disp = getattr(importlib.import_module(f"{_kernels.__name__}.{module}"), name)
        sig = next(s for s in disp.signatures if "float32" in str(s))
        opts = {k: v for k, v in disp.targetoptions.items() if k != "cache"}
        old = cfg.SLP_VECTORIZE
        cfg.SLP_VECTORIZE = 1 if module == "attention_heads" else old  # as attention_heads._slp
        try:
            fresh = CPUDispatcher(disp.py_func, targetoptions=opts)
            fresh.compile(sig)
        finally:
            cfg.SLP_VECTORIZE = old
        n = llvm_instructions(fresh.inspect_llvm(fresh.signatures[0]))
        if not 300 < n <= budget:
            over[f"{module}.{name}"] = (n, budget)
    assert not over, f"LLVM instructions (and budgets): {over}"
