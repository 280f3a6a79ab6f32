"""tapegrad.nn.init: statistics of each initialiser, PyTorch's formulas, in-place semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import init

N = 200_000  # elements: the sample mean and std are within ~1% of the truth


def big(*shape: int, dtype=tg.float64) -> tg.Tensor:
    return tg.zeros(*shape, dtype=dtype)


def stats(t: tg.Tensor) -> tuple[float, float]:
    a = t.numpy()
    return float(a.mean()), float(a.std())


def test_uniform_and_normal_statistics():
    t = init.uniform_(big(N), -2.0, 4.0)
    mean, std = stats(t)
    a = t.numpy()
    assert a.min() >= -2.0 and a.max() < 4.0
    assert abs(mean - 1.0) < 0.02 and abs(std - 6 / math.sqrt(12)) < 0.02
    mean, std = stats(init.normal_(big(N), 3.0, 0.5))
    assert abs(mean - 3.0) < 0.01 and abs(std - 0.5) < 0.01


def test_constants_eye_dirac_match_pytorch():
    for ours, ref in [
        (init.zeros_(tg.ones(3, 4)), torch.nn.init.zeros_(torch.ones(3, 4))),
        (init.ones_(tg.zeros(3, 4)), torch.nn.init.ones_(torch.zeros(3, 4))),
        (init.constant_(tg.zeros(2, 2), 0.3), torch.nn.init.constant_(torch.zeros(2, 2), 0.3)),
        (init.eye_(tg.zeros(3, 5)), torch.nn.init.eye_(torch.zeros(3, 5))),
        (init.dirac_(tg.zeros(4, 2, 3, 3)), torch.nn.init.dirac_(torch.zeros(4, 2, 3, 3))),
        (init.dirac_(tg.zeros(4, 2, 3), groups=2), torch.nn.init.dirac_(torch.zeros(4, 2, 3), 2)),
    ]:
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


@pytest.mark.parametrize(
    ("nonlinearity", "param"),
    [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
     ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None), ("conv_transpose2d", None)],
)  # fmt: skip
def test_calculate_gain_matches_pytorch(nonlinearity, param):
    assert init.calculate_gain(nonlinearity, param) == pytest.approx(
        torch.nn.init.calculate_gain(nonlinearity, param), rel=1e-12
    )


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="unsupported nonlinearity"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="negative_slope"):
        init.calculate_gain("leaky_relu", "a")


def test_fans():
    assert init.calculate_fan_in_and_fan_out(big(8, 3, 5, 5)) == (75, 200)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.xavier_uniform_(big(5))


def test_xavier():
    t = init.xavier_uniform_(big(400, 500), gain=2.0)
    bound = 2.0 * math.sqrt(6 / 900)
    assert np.abs(t.numpy()).max() <= bound
    assert abs(stats(t)[1] - bound / math.sqrt(3)) < 0.01 * bound
    t = init.xavier_normal_(big(400, 500))
    assert abs(stats(t)[1] - math.sqrt(2 / 900)) < 0.01 * math.sqrt(2 / 900)


@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming(mode):
    shape = (100, 50, 2, 2)  # fan_in 200, fan_out 400
    fan = 200 if mode == "fan_in" else 400
    t = init.kaiming_normal_(big(*shape), mode=mode, nonlinearity="relu")
    assert abs(stats(t)[1] - math.sqrt(2 / fan)) < 0.01 * math.sqrt(2 / fan)
    t = init.kaiming_uniform_(big(*shape), a=0.1, mode=mode)
    std = math.sqrt(2 / (1 + 0.01)) / math.sqrt(fan)
    assert np.abs(t.numpy()).max() <= math.sqrt(3) * std
    assert abs(stats(t)[1] - std) < 0.01 * std
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_uniform_(big(3, 3), mode="fan_avg")


def test_trunc_normal_statistics():
    t = init.trunc_normal_(big(N), mean=0.5, std=1.0, a=-1.0, b=1.5)
    a = t.numpy()
    assert a.min() >= -1.0 and a.max() <= 1.5
    # the truncated normal's moments: alpha, beta = -1.5, 1.0 in standard units
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))
    al, be = -1.5, 1.0
    z = cdf(be) - cdf(al)
    mean = 0.5 + (pdf(al) - pdf(be)) / z
    var = 1 + (al * pdf(al) - be * pdf(be)) / z - ((pdf(al) - pdf(be)) / z) ** 2
    assert abs(a.mean() - mean) < 0.005 and abs(a.std() - math.sqrt(var)) < 0.005
    # a narrow window far in the tail still fills it (the inverse CDF needs no rejection)
    a = init.trunc_normal_(big(1000), a=4.0, b=4.5).numpy()
    assert a.min() >= 4.0 and a.max() <= 4.5 and a.std() > 0
    # PyTorch's ViT default: std 0.02, bounds at +-2 (absolute, so barely truncated)
    assert abs(stats(init.trunc_normal_(big(N), std=0.02))[1] - 0.02) < 0.0005


@pytest.mark.parametrize("shape", [(30, 50), (50, 30), (6, 2, 3, 3)])
def test_orthogonal(shape):
    t = init.orthogonal_(big(*shape), gain=1.5)
    m = t.numpy().reshape(shape[0], -1)
    small = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
    np.testing.assert_allclose(small, 1.5**2 * np.eye(small.shape[0]), atol=1e-10)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.orthogonal_(big(3))


def test_in_place_version_and_generator():
    p = tg.Parameter(tg.zeros(4, 4))
    data = p._data
    v = p._version
    assert init.normal_(p) is p
    assert p._data is data and p._version == v + 1  # in place, version bumped
    assert p.dtype == tg.float32
    a = init.uniform_(big(5), generator=tg.Generator(7)).numpy()
    b = init.uniform_(big(5), generator=tg.Generator(7)).numpy()
    np.testing.assert_array_equal(a, b)
    tg.manual_seed(11)
    c = init.normal_(big(5)).numpy()
    tg.manual_seed(11)
    np.testing.assert_array_equal(c, init.normal_(big(5)).numpy())
    with pytest.raises(TypeError, match="Tensor"):
        init.zeros_(np.zeros(3))


def test_init_is_not_recorded():
    p = tg.Parameter(tg.zeros(3))
    with tg.Tape() as tape:
        init.normal_(p)
    assert len(tape.nodes) == 0


# -- the layers' default initialisation (PyTorch's) -------------------------------------------


def test_linear_default_init_bound():
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(b).max() <= bound


def test_conv_default_init_bounds():
    conv = nn.Conv2d(16, 32, 3, groups=2)
    bound = 1 / math.sqrt(8 * 9)  # fan_in = in_channels / groups * k * k
    assert np.abs(conv.weight.numpy()).max() <= bound
    assert np.abs(conv.weight.numpy()).max() > 0.95 * bound
    assert np.abs(conv.bias.numpy()).max() <= bound
    up = nn.ConvTranspose2d(16, 32, 3)
    bound = 1 / math.sqrt(32 * 9)  # PyTorch: fan_in from the weight's second axis (out)
    assert np.abs(up.weight.numpy()).max() <= bound
    assert np.abs(up.weight.numpy()).max() > 0.95 * bound


def test_other_layer_defaults():
    emb = nn.Embedding(2000, 100)
    assert abs(emb.weight.numpy().std() - 1.0) < 0.01
    mha = nn.MultiheadAttention(64, 4)
    bound = math.sqrt(6 / (64 + 3 * 64))
    assert np.abs(mha.in_proj_weight.numpy()).max() <= bound
    assert not mha.in_proj_bias.numpy().any() and not mha.out_proj.bias.numpy().any()
    bn = nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0] * 3 and bn.bias.tolist() == [0.0] * 3
    assert nn.PReLU(3, init=0.1).weight.numpy().tolist() == pytest.approx([0.1] * 3)
