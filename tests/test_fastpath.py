"""apply1 / apply2 record exactly what apply records, in every case they write out or pass on."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._autodiff import apply, set_op_hooks
from tapegrad._autodiff._fastpath import apply1, apply2
from tapegrad._autodiff._record import ARGS, INPUTS, PRIM, VERSIONS
from tapegrad.ops._binary import _mul, _sub
from tapegrad.ops._elementwise import PRIMITIVES


def _summary(tape):
    out = []
    for r in tape._nodes:
        ids = tuple(e if e is None or type(e) is int else "param" for e in r[INPUTS])
        args = None if r[ARGS] is None else tuple(type(a).__name__ for a in r[ARGS])
        out.append((r[PRIM].name, tuple(e is None for e in ids), args, r[VERSIONS]))
    return out


SCENARIOS = ["watched", "param", "two_tapes", "same_two_tapes", "param_and_trace", "no_grad",
             "other_thread", "unsaved"]


@pytest.mark.parametrize("case", SCENARIOS)
def test_fast_doors_record_as_apply(case):
    def run(binary, unary):
        x = tg.tensor(np.array([1.0, -2.0, 3.0]))
        y = tg.tensor(np.array([0.5, 4.0, -1.0]))
        w = tg.Parameter(tg.tensor(np.array([2.0, 3.0, 4.0])))
        t1, t2 = tg.Tape(persistent=True), tg.Tape(persistent=True)
        prim = _sub if case == "unsaved" else _mul
        if case == "watched" or case == "unsaved":
            with t1:
                t1.watch(x)
                z = unary(PRIMITIVES["exp"], binary(prim, x, y))
        elif case == "param":
            with t1:
                z = unary(PRIMITIVES["exp"], binary(prim, w, y))
        elif case in ("two_tapes", "same_two_tapes"):
            a = x.trace(t1)
            b = y.trace(t2) if case == "two_tapes" else y.trace(t1)
            if case == "same_two_tapes":
                t2.watch(a)
            z = unary(PRIMITIVES["exp"], binary(prim, a, b))
            t1.stop()
            t2.stop()
        elif case == "param_and_trace":
            a = x.trace(t1)
            with t2:
                z = unary(PRIMITIVES["exp"], binary(prim, a, w))
            t1.stop()
        elif case == "no_grad":
            with t1:
                t1.watch(x)
                with tg.no_grad():
                    z = binary(prim, x, y)
                z = unary(PRIMITIVES["exp"], binary(prim, z, x))
        else:  # a tape open in another thread: this thread's ops are not on it
            a = x.trace(t1)
            other = []
            th = threading.Thread(target=lambda: other.append(binary(prim, a, y)))
            th.start()
            th.join()
            z = unary(PRIMITIVES["exp"], binary(prim, a, y))
            t1.stop()
        grads = []
        for t in (t1, t2):
            if t in z._tapes:
                g = t.gradient(z, output_gradients=tg.ones(3, dtype=z.dtype))
                grads.append(sorted(str(np.asarray(v).tolist()) for _, v in g.items()))
        return _summary(t1), _summary(t2), grads, z.numpy().tolist()

    fast = run(apply2, apply1)
    slow = run(apply, apply)
    assert fast == slow
    assert fast[0] or fast[1]  # something was recorded


def test_fast_doors_under_a_capture_hook():
    seen = []
    x = tg.tensor([1.0, 2.0])
    set_op_hooks(lambda prim, inputs, params, out: seen.append(prim.name), None)
    try:
        apply1(PRIMITIVES["exp"], apply2(_mul, x, x))
    finally:
        set_op_hooks(None, None)
    assert seen == ["mul", "exp"]


def test_fast_door_names_the_op_on_bad_shapes():
    with pytest.raises(ValueError, match=r"mul: .*\(2,\) float32, \(3,\) float32"):
        apply2(_mul, tg.ones(2), tg.ones(3))
