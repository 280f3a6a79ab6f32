"""Elementwise rules declared once as expressions: what tg.compile's loops run is what the
primitives compute, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg  # noqa: F401 - registers the primitives
from tapegrad._autodiff import PRIMITIVES
from tapegrad._autodiff._expr import ANS, Elementwise, G, P, X, render, vjp_function

# every rule tg.compile's loops run (the forwards and VJPs fusion knew by name before)
FUSED = {
    "add": (True, 2), "sub": (True, 2), "mul": (True, 2), "div": (True, 2), "neg": (True, 1),
    "square": (True, 1), "mul_scalar": (True, 1), "div_scalar": (True, 1), "relu": (True, 1),
    "tanh": (False, 1), "sigmoid": (False, 1), "exp": (False, 1), "sqrt": (False, 1),
    "nn.mse_loss": (True, 2), "nn.linear": (True, 1),
}
PARAMS = {"mul_scalar": {"c": 0.3}, "div_scalar": {"c": 3}, "nn.mse_loss": {"scale": 0.125}}


def _bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_the_fused_rules_are_declared_at_their_primitives():
    for name, (fwd, n_vjps) in FUSED.items():
        ew = PRIMITIVES[name].expr
        assert isinstance(ew, Elementwise), name
        assert (ew.fwd is not None) == fwd, name
        assert sum(e is not None for e in ew.vjps) == n_vjps, name


def _arith(e) -> bool:
    return all(n.op not in ("relu", "call", "sumsq", "sum_rows") for n in e.nodes())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(FUSED))
def test_each_expression_computes_its_primitive_bit_for_bit(name, dtype):
    prim, rng = PRIMITIVES[name], np.random.default_rng(3)
    n_in = len(prim.vjps) or 1
    shapes = [(5, 7), (4, 7), (4,)] if name == "nn.linear" else [(5, 7)] * n_in
    xs = [(rng.standard_normal(s) + 2.5).astype(dtype) for s in shapes]
    kw = PARAMS.get(name, {})
    ans = prim.fwd(*xs, **kw)
    g = rng.standard_normal(np.shape(ans)).astype(dtype)
    ew = prim.expr
    if ew.fwd is not None and _arith(ew.fwd):
        assert _bits(_forward(ew.fwd, xs, kw), ans), name
    split = ew.fwd.split() if ew.fwd is not None else None
    if split is not None:  # a call (the GEMM) plus the rest: the forward without the rest
        y = split.args[0](*(xs[i] for i in split.args[1:]))
        assert _bits(y + xs[2], ans), name
    for i, e in enumerate(ew.vjps):
        if e is not None and _arith(e):
            want = prim.vjps[i](np, g, ans, *xs, **kw)
            assert _bits(vjp_function(e)(np, g, ans, *xs, **kw), want), (name, i)


def _forward(e, xs, kw):
    """A forward expression on arrays: its inputs are at 0, 1, ... (a VJP's at 2, 3, ...)."""
    return vjp_function(e)(np, None, None, *xs, **kw)


def test_loop_source_keeps_the_numpy_order():
    e = G * ANS * (1.0 - ANS)  # sigmoid's VJP: (g * y) * (1 - y), not g * (y * (1 - y))
    src = render(e, {0: "g", 1: "y"}.__getitem__, lambda v: f"T({v!r})", {})
    assert src == "((g * y) * (T(1.0) - y))"
    both = X(0) * (2.0 * P("s"))  # numbers and params fold in Python
    assert render(both, {2: "x"}.__getitem__, repr, {"s": 0.25}) == "(x * 0.5)"
    assert render(X(1) - X(0), str, repr, {}, forward=True) == "(1 - 0)"
