"""Compile budgets: no kernel's code grows past what numba and LLVM compile in a few seconds.

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

# Bytecode instructions of a kernel module's function: about 2 s of compile on the 2-core
# machine at most (the largest, conv_direct._wgrad, has 1,100).
BYTECODE_BUDGET = 1500
# The generated convolution kernels, their register blocks written out (one statement a
# multiply-add): 3,600-5,800 today, from 4,400-16,800; a block kept as a loop that LLVM unrolls
# would bring them under BYTECODE_BUDGET (docs/design.md, "Compile budget").
GENERATED_BUDGET = 6000
# Instructions of a kernel's optimised LLVM IR, wrappers included (wfwd: 4,100, from 6,300).
LLVM_BUDGET = 5000


def _bytecode(fn):
    return len(list(dis.get_instructions(fn)))


def _generated(p):
    """The generated convolution kernels at ``p`` pixels a block, as Python functions."""
    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    ns: dict = {}
    exec(compile(cb._source(p, p, cb.OB), f"<conv_blocked p{p}>", "exec"), ns)  # noqa: S102
    return {name: ns[name] for name in cb._ARGS}


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
                n = _bytecode(obj.py_func)
                assert n <= BYTECODE_BUDGET, f"{mod.__name__}.{name}: {n} bytecode instructions"
    assert seen > 20  # the walk found the kernels


def test_the_bytecode_measure_grows_with_unrolled_code():
    loop, unrolled = {}, {}
    exec("def f(a):\n    s = 0.0\n    for i in range(64):\n        s += a[i]\n", loop)  # noqa: S102
    exec("def f(a):\n    s = 0.0\n" + "".join(f"    s += a[{i}]\n" for i in range(64)),  # noqa: S102
         unrolled)
    assert _bytecode(unrolled["f"]) > 10 * _bytecode(loop["f"])


@numba_only
@pytest.mark.slow
def test_generated_winograd_kernel_compiles_within_the_llvm_budget():
    """The fused Winograd forward at AVX-512's blocks (P = 8), compiled afresh in float32
    (about 4 s of CPU): its optimised IR within LLVM_BUDGET."""
    import numba  # noqa: PLC0415
    from numba.core.registry import CPUDispatcher  # noqa: PLC0415

    fn = _generated(8)["wfwd"]
    sig = numba.core.sigutils.normalize_signature(
        "void(f4[:, :, :, ::1], f4[:, :, ::1], f4[::1], f4[:, :, :, ::1], "
        "int64, int64, int64, int64, int64)")[0]
    cfg = numba.core.config
    old = cfg.SLP_VECTORIZE
    cfg.SLP_VECTORIZE = 1  # as conv_blocked._kernel compiles it
    try:
        disp = CPUDispatcher(fn, targetoptions={"nopython": True, "fastmath": {"contract"},
                                                "error_model": "numpy", "nogil": True})
        disp.compile(sig)
    finally:
        cfg.SLP_VECTORIZE = old
    n = llvm_instructions(disp.inspect_llvm(disp.signatures[0]))
    assert 500 < n <= LLVM_BUDGET, f"wfwd: {n} LLVM instructions"
