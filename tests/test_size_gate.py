"""The dispatcher's fast paths. The size gate: ``SMALLEST[op]`` is the fewest elements any
implementation of ``op`` takes, so a caller below it may run the reference itself."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._kernels import registry
from tapegrad._kernels.registry import SMALLEST, implementations


def _cases(n: int) -> dict[str, tuple]:
    a = np.ones(n, np.float32)
    rows = np.ones((n // 8, 8), np.float32)
    group = {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0, "amsgrad": False}
    adam_state = {"exp_avg": np.zeros(n, np.float32), "exp_avg_sq": np.zeros(n, np.float32)}
    return {
        "relu": (a,),
        "relu_grad": (a, a),
        "add_bias": (rows, np.ones(8, np.float32)),
        "sgd": (a, a, {}, group),
        "adam": (a, a, adam_state, group),
        "linear_gemm": (np.ones((n // 8, 8), np.float32), np.ones((64, 8), np.float32), None),
    }


@pytest.mark.parametrize("op", ["relu", "relu_grad", "add_bias", "sgd", "adam", "linear_gemm"])
def test_no_implementation_fits_below_the_gate(op):
    implementations()  # the table's registrations
    n = SMALLEST[op]
    assert n > 0
    below, at = _cases(n - 8)[op], _cases(n)[op]
    assert below[0].size < n <= at[0].size
    for impl in implementations(op):
        assert not impl.fits(*below), impl
        assert impl.fits(*at), impl  # the gate is the implementations' own threshold


def test_an_implementation_without_min_size_opens_the_gate(monkeypatch):
    monkeypatch.setattr(registry, "_TABLE", {})
    monkeypatch.setattr(registry, "SMALLEST", {})
    registry.register("gated", "big", lambda x: x.size >= 100, "elementwise:relu", min_size=100)
    assert registry.SMALLEST["gated"] == 100
    with pytest.raises(ValueError, match="module:function"):
        registry.register("gated", "bad", lambda x: True, "elementwise.relu")
    assert registry.SMALLEST["gated"] == 100  # a refused registration leaves the gate
    registry.register("gated", "any", lambda x: True, "elementwise:relu")
    assert registry.SMALLEST["gated"] == 0


def test_small_ops_below_the_gate_match_the_reference():
    x = tg.Parameter(tg.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)))
    with tg.Tape() as tape:
        y = (tg.nn.functional.relu(x) * 3.0).sum()
    g = tape.gradient(y, x)
    assert np.array_equal(g.numpy(), 3.0 * (x.numpy() > 0))
    opt = tg.optim.SGD([x], lr=0.5)
    before = x.numpy().copy()
    opt.step(tg.Gradients([(x, g)]))
    assert np.array_equal(x.numpy(), before - 0.5 * g.numpy())


def test_the_key_written_out_is_the_sig_of_each_argument():
    a = np.zeros((4, 6), np.float32)
    args = (a, a.T, None, 3, (1, (2, 3)), np.zeros(5, np.int64)[::2])
    k = registry.key("op", args)
    assert k == ("op", registry._threads(), tuple(registry._sig(x) for x in args))
    assert repr(k) == repr(("op", registry._threads(), tuple(map(registry._sig, args))))
