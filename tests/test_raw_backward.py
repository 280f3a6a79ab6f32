"""Backward on arrays (no tape records the pass) equals backward on tensors.

When no tape is recording, ``Tape.gradient`` runs the primitives' VJPs on arrays (``xp`` is
numpy) instead of on tensors (``xp`` is tapegrad's ops). Both must give the same numbers: the
tensor path is the one higher-order gradients take. Bit for bit, except where a VJP runs a
compiled kernel on arrays (attention, softmax, log-softmax, layer norm: one pass per row, its
sums in another order), which agrees with the tensor formulas to float32 rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _autodiff, _kernels, nn


def _grads(model, loss_fn, tensor_path: bool):
    with tg.Tape() as tape:
        loss = loss_fn(model)
    if tensor_path:  # another tape recording: the backward pass must run on tensors
        with tg.Tape(watch_parameters=False):
            assert _autodiff.is_recording()
            grads = tape.gradient(loss, model)
    else:
        assert not _autodiff.is_recording()
        grads = tape.gradient(loss, model)
    return [grads[p].numpy() for p in model.parameters()]


def _rng():
    return np.random.default_rng(0)


def _mlp():
    m = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))
    x = tg.tensor(_rng().standard_normal((8, 5)).astype(np.float32))
    y = tg.tensor(_rng().standard_normal((8, 2)).astype(np.float32))
    return m, lambda m: F.mse_loss(m(x), y)


def _cnn():
    m = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 3, 2, groups=1),
        nn.Sigmoid(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(3, 3),
    )  # fmt: skip
    x = tg.tensor(_rng().standard_normal((4, 2, 7, 7)).astype(np.float32))
    y = tg.tensor(np.array([0, 2, 1, 1]))
    return m, lambda m: F.cross_entropy(m(x), y)


def _transformer():
    m = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    x = tg.tensor(_rng().standard_normal((2, 5, 16)).astype(np.float32))
    mask = tg.tensor(np.array([[False] * 5, [False, False, False, True, True]]))
    return m, lambda m: (m(x, src_key_padding_mask=mask) ** 2).mean()


class _Ops(nn.Module):
    """Elementwise, shape, reduction and softmax primitives in one graph."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(tg.tensor(_rng().uniform(0.5, 1.5, (3, 4))))
        self.v = nn.Parameter(tg.tensor(_rng().standard_normal((4,))))

    def forward(self) -> tg.Tensor:
        w, v = self.w, self.v
        a = tg.exp(w) * tg.log(w) - tg.sqrt(w) / (w + 1.0) + tg.abs(v) ** 2
        b = tg.log_softmax(a, axis=0) + tg.softmax(a * v, axis=-1)
        c = tg.where(a > 1.0, tg.sin(a), tg.cos(a)) + tg.erf(a) + F.gelu(a) + F.silu(a)
        d = tg.amax(c, axis=1).sum() + b.T.reshape(2, 6)[1:, ::2].sum() + (w @ v).mean()
        return d + F.layer_norm(a, (4,), v, None).sum() + tg.atan2(w, v + 2.0).sum()


CASES = {
    "mlp": _mlp,
    "cnn": _cnn,
    "transformer": _transformer,
    "ops": lambda: (_Ops(), lambda m: m()),
}
# the cases whose arrays VJPs include compiled row kernels when numba is selected
ROUNDING = {"transformer", "ops"}


@pytest.mark.parametrize("case", CASES)
def test_array_backward_equals_tensor_backward(case):
    model, loss_fn = CASES[case]()
    fast = _grads(model, loss_fn, tensor_path=False)
    slow = _grads(model, loss_fn, tensor_path=True)
    assert len(fast) == len(slow) > 0
    # float32 rounding of the largest terms (softmax's gradient cancels: small results)
    scale = max(float(np.abs(b).max()) for b in slow)
    for a, b in zip(fast, slow, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if case in ROUNDING and _kernels.numba() is not None:
            tol = 1e-5 if a.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale)
        else:
            assert np.array_equal(a, b), np.abs(a - b).max()
