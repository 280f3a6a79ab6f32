"""``nn.linear_relu`` (a linear layer's product, bias and ReLU as one primitive) against the
composition it replaces: values, gradients, higher order, float32 bits, the kernels' epilogue."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.nn._f_linear import linear_relu
from tapegrad.testing import check_grads

RNG = np.random.default_rng(3)


def _args(shape_x, n_out, bias=True, dtype=np.float64):
    x = tg.tensor(RNG.standard_normal(shape_x).astype(dtype))
    w = tg.tensor(RNG.standard_normal((n_out, shape_x[-1])).astype(dtype))
    b = tg.tensor(RNG.standard_normal(n_out).astype(dtype)) if bias else None
    return x, w, b


def _value_and_grads(fn, x, w, b):
    leaves = [t for t in (x, w, b) if t is not None]
    with tg.Tape() as tape:
        tape.watch(*leaves)
        y = fn(x, w, b)
        loss = (y * y).sum() + y.sum()
    return y.numpy(), [g.numpy() for g in tape.gradient(loss, leaves)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape_x", "bias"), [
    ((70, 40), True), ((70, 40), False), ((4, 16, 40), True), ((40,), True), ((3, 40), True),
])
def test_equals_linear_then_relu(shape_x, bias, dtype):
    x, w, b = _args(shape_x, 96, bias, dtype)
    y, grads = _value_and_grads(linear_relu, x, w, b)
    y_ref, grads_ref = _value_and_grads(lambda *a: F.relu(F.linear(*a)), x, w, b)
    assert y.dtype == dtype and y.shape == y_ref.shape
    # the same product and the same order of the bias's sums: the same bits
    np.testing.assert_array_equal(y, y_ref)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_array_equal(g, g_ref)


def test_nan_and_zero_follow_relu():
    x = tg.tensor(np.array([[1.0, -2.0], [np.nan, -1.0]]))
    w = tg.tensor(np.eye(2))
    b = tg.tensor(np.array([0.0, 0.5]))
    got = linear_relu(x, w, b).numpy()
    np.testing.assert_array_equal(got, F.relu(F.linear(x, w, b)).numpy())
    assert got[0].tolist() == [1.0, 0.0] and np.isnan(got[1]).all()  # NaN * 0 in the product


def test_gradient_check_to_second_order():
    x, w, b = _args((5, 6), 7)
    check_grads(linear_relu, [x, w, b])
    check_grads(linear_relu, [x, w])


def test_kernels_give_the_reference_bits_at_every_thread_count():
    pytest.importorskip("numba")
    code = """
import numpy as np
import tapegrad as tg
from tapegrad._kernels import activation as A
from tapegrad.ops import _linear as LIN
rng = np.random.default_rng(0)
y0 = rng.standard_normal((300, 96)).astype(np.float32)
b = rng.standard_normal(96).astype(np.float32)
g = rng.standard_normal((300, 96)).astype(np.float32)
want_y = y0.copy()
LIN._bias_relu_np(want_y, b)
want = LIN._relu_bias_grad_np(g, want_y, True)
for k in (1, 2, 3):
    tg.set_num_threads(k)
    y = y0.copy()
    A._bias_relu_par(y, b)
    assert np.array_equal(y, want_y), k
    out, db = np.empty_like(g), np.empty(96, np.float32)
    A._relu_bias_grad_par(g, want_y, out, db)
    assert np.array_equal(out, want[0]) and np.array_equal(db, want[1]), k
print("ok")
"""
    env = {**os.environ, "TAPEGRAD_COMPILE": "wait", "NUMBA_NUM_THREADS": "3"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_encoder_layer_takes_the_fused_block_with_the_same_results():
    layer = tg.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                          batch_first=True, dtype=tg.float64)
    x = tg.tensor(RNG.standard_normal((2, 5, 16)))

    def run():
        with tg.Tape() as tape:
            y = layer(x)
            ops = tape.summary()
            grads = tape.gradient((y * y).sum(), layer)
        return y.numpy(), grads.named(layer), ops

    y, grads, ops = run()
    assert "nn.linear_relu" in ops
    layer.activation = lambda t: F.relu(t)  # noqa: PLW0108 - not F.relu itself: unfused
    y_ref, grads_ref, ops_ref = run()
    assert "nn.linear_relu" not in ops_ref
    np.testing.assert_array_equal(y, y_ref)
    assert grads.keys() == grads_ref.keys()
    for name, g in grads.items():
        np.testing.assert_array_equal(g, grads_ref[name], err_msg=name)


def test_the_fused_block_still_counts_as_linear1s_call():
    layer = tg.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                          batch_first=True, dtype=tg.float64)
    x = tg.tensor(RNG.standard_normal((2, 5, 16)))
    with tg.Tape() as tape:
        layer(x)
    scopes = {n.prim.name: n.scope for n in tape.nodes}
    assert scopes["nn.linear_relu"] == "linear1"  # the op is recorded in linear1's scope


def test_a_replaced_linear1_runs_its_own_forward():
    class Doubled(tg.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2.0

    layer = tg.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                          batch_first=True, dtype=tg.float64)
    doubled = Doubled(16, 32, dtype=tg.float64)
    doubled.load_state_dict(layer.linear1.state_dict())
    x = tg.tensor(RNG.standard_normal((2, 5, 16)))
    y_plain = layer(x).numpy()
    layer.linear1 = doubled
    with tg.Tape() as tape:
        layer(x)
    assert "nn.linear_relu" not in tape.summary()
    y = layer(x).numpy()
    assert not np.allclose(y, y_plain)
    layer.activation = lambda t: F.relu(t)  # noqa: PLW0108 - the unfused spelling, as reference
    np.testing.assert_array_equal(layer(x).numpy(), y)
