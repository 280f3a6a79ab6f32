"""tapegrad.nn.functional against torch.nn.functional in float64: forward values, input gradients
and weight gradients across the options, plus gradient checks (to second order on the fused
primitives)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_compare import close as _close
from torch_compare import compare

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad._autodiff import PRIMITIVES
from tapegrad.nn._f_linear import linear_relu
from tapegrad.nn._f_rnn import recurrent_layer
from tapegrad.ops._attention import attention_qkv
from tapegrad.testing import check_grads


def _rand(rng, shape):
    return rng.standard_normal(shape)


# --------------------------------------------------------------------------------------------
# activations
# --------------------------------------------------------------------------------------------

ACTIVATIONS = [
    ("relu", lambda f, x: f.relu(x)),
    ("relu6", lambda f, x: f.relu6(x * 4)),
    ("hardtanh", lambda f, x: f.hardtanh(x, -0.5, 0.7)),
    ("gelu", lambda f, x: f.gelu(x)),
    ("gelu_tanh", lambda f, x: f.gelu(x, approximate="tanh")),
    ("silu", lambda f, x: f.silu(x)),
    ("mish", lambda f, x: f.mish(x)),
    ("sigmoid", lambda f, x: f.sigmoid(x)),
    ("tanh", lambda f, x: f.tanh(x)),
    ("hardsigmoid", lambda f, x: f.hardsigmoid(x * 3)),
    ("hardswish", lambda f, x: f.hardswish(x * 3)),
    ("logsigmoid", lambda f, x: f.logsigmoid(x * 10)),
    ("softsign", lambda f, x: f.softsign(x)),
    ("tanhshrink", lambda f, x: f.tanhshrink(x)),
    ("leaky_relu", lambda f, x: f.leaky_relu(x, 0.2)),
    ("elu", lambda f, x: f.elu(x, alpha=0.7)),
    ("selu", lambda f, x: f.selu(x)),
    ("celu", lambda f, x: f.celu(x, alpha=1.5)),
    ("softplus", lambda f, x: f.softplus(x)),
    ("softplus_beta", lambda f, x: f.softplus(x * 10, beta=2.0, threshold=5.0)),
    ("softmax0", lambda f, x: f.softmax(x, dim=0)),
    ("softmax1", lambda f, x: f.softmax(x, dim=-1)),
    ("softmin", lambda f, x: f.softmin(x, dim=1)),
    ("log_softmax", lambda f, x: f.log_softmax(x, dim=1)),
    ("glu", lambda f, x: f.glu(x, dim=-1)),
]


@pytest.mark.parametrize("name,fn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_matches_torch(name, fn):
    x = _rand(np.random.default_rng(1), (3, 4, 6))
    # PyTorch's hardsigmoid backward multiplies by 1/6 rounded to float32 (3e-8 relative)
    rtol = 1e-7 if name == "hardsigmoid" else 1e-10
    compare(lambda t: fn(F, t), lambda t: fn(TF, t), [x], rtol=rtol)


def test_prelu_input_and_weight_gradients():
    rng = np.random.default_rng(2)
    x = _rand(rng, (2, 3, 4, 4))
    compare(F.prelu, TF.prelu, [x, rng.uniform(0.1, 0.5, 3)])
    compare(F.prelu, TF.prelu, [x, np.array([0.25])])


def test_softmax_dtype_argument_casts_first():
    x = tg.tensor([[1.0, 2.0]], dtype=tg.float32)
    assert F.softmax(x, dim=1, dtype=tg.float64).dtype == tg.float64


# --------------------------------------------------------------------------------------------
# linear, bilinear
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(shape, bias):
    rng = np.random.default_rng(3)
    arrays = [_rand(rng, shape), _rand(rng, (7, 5)), _rand(rng, 7) if bias else None]
    compare(F.linear, TF.linear, arrays)


def test_linear_error_names_shapes():
    with pytest.raises(ValueError, match=r"in_features \(6\)"):
        F.linear(tg.ones((2, 5)), tg.ones((3, 6)))


def test_bilinear():
    rng = np.random.default_rng(4)
    arrays = [_rand(rng, (2, 3, 4)), _rand(rng, (2, 3, 5)), _rand(rng, (6, 4, 5)), _rand(rng, 6)]
    compare(F.bilinear, TF.bilinear, arrays)


# --------------------------------------------------------------------------------------------
# convolutions
# --------------------------------------------------------------------------------------------

CONV2D_CASES = [
    dict(),
    dict(stride=2),
    dict(stride=(2, 3), padding=(1, 2)),
    dict(padding=1, dilation=2),
    dict(padding="same"),
    dict(padding="same", dilation=(2, 1)),
    dict(padding="valid", stride=(1, 2)),
    dict(groups=2, padding=1),
    dict(groups=4, stride=2, dilation=(1, 2)),
]


@pytest.mark.parametrize("kw", CONV2D_CASES, ids=[str(k) for k in CONV2D_CASES])
@pytest.mark.parametrize("kernel", [(3, 3), (2, 4)])
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_conv2d(kw, kernel):
    rng = np.random.default_rng(5)
    g = kw.get("groups", 1)
    x = _rand(rng, (2, 4, 9, 10))
    w = _rand(rng, (8, 4 // g) + kernel)
    b = _rand(rng, 8)
    compare(lambda *a: F.conv2d(*a, **kw), lambda *a: TF.conv2d(*a, **kw), [x, w, b])


def test_conv2d_without_bias_and_unbatched():
    rng = np.random.default_rng(6)
    compare(
        lambda x, w: F.conv2d(x, w, stride=2),
        lambda x, w: TF.conv2d(x, w, stride=2),
        [_rand(rng, (3, 8, 8)), _rand(rng, (5, 3, 3, 3))],
    )


def test_conv2d_float32_matches_torch():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, 12, 12)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    y = F.conv2d(tg.tensor(x), tg.tensor(w), padding=1)
    assert y.dtype == tg.float32
    _close(y, TF.conv2d(torch.tensor(x), torch.tensor(w), padding=1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kw", [dict(), dict(stride=2, padding=1), dict(padding="same", dilation=2), dict(groups=3)]
)
def test_conv1d(kw):
    rng = np.random.default_rng(8)
    x = _rand(rng, (2, 6, 11))
    w = _rand(rng, (9, 6 // kw.get("groups", 1), 3))
    compare(lambda *a: F.conv1d(*a, **kw), lambda *a: TF.conv1d(*a, **kw), [x, w, _rand(rng, 9)])


CONVT_CASES = [
    dict(),
    dict(stride=2),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(3, 2), padding=(1, 0), output_padding=(2, 1)),
    dict(dilation=2, padding=1),
    dict(stride=1, dilation=3, output_padding=2),
    dict(groups=2, stride=2),
]


@pytest.mark.parametrize("kw", CONVT_CASES, ids=[str(k) for k in CONVT_CASES])
def test_conv_transpose2d(kw):
    rng = np.random.default_rng(9)
    g = kw.get("groups", 1)
    x = _rand(rng, (2, 4, 5, 6))
    w = _rand(rng, (4, 6 // g, 3, 2))
    compare(
        lambda *a: F.conv_transpose2d(*a, **kw),
        lambda *a: TF.conv_transpose2d(*a, **kw),
        [x, w, _rand(rng, 6)],
    )


def test_conv_transpose1d():
    rng = np.random.default_rng(10)
    kw = dict(stride=3, padding=1, output_padding=1)
    compare(
        lambda *a: F.conv_transpose1d(*a, **kw),
        lambda *a: TF.conv_transpose1d(*a, **kw),
        [_rand(rng, (2, 3, 7)), _rand(rng, (3, 4, 4)), _rand(rng, 4)],
    )


def test_conv2d_errors_name_the_shapes():
    with pytest.raises(ValueError, match="3 channels"):
        F.conv2d(tg.ones((1, 3, 5, 5)), tg.ones((2, 4, 3, 3)))
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        F.conv2d(tg.ones((1, 1, 2, 2)), tg.ones((1, 1, 3, 3)))
    with pytest.raises(ValueError, match="stride 1"):
        F.conv2d(tg.ones((1, 1, 5, 5)), tg.ones((1, 1, 3, 3)), stride=2, padding="same")


def test_conv2d_second_order():
    rng = np.random.default_rng(11)
    x = tg.tensor(_rand(rng, (2, 2, 5, 4)))
    w = tg.tensor(_rand(rng, (4, 1, 3, 2)))
    b = tg.tensor(_rand(rng, 4))
    check_grads(
        lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2), [x, w, b], order=2
    )


def test_conv_transpose2d_second_order():
    rng = np.random.default_rng(12)
    x = tg.tensor(_rand(rng, (1, 2, 3, 3)))
    w = tg.tensor(_rand(rng, (2, 3, 2, 2)))
    check_grads(lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), [x, w], order=2)


def test_conv2d_gradient_penalty_matches_torch():
    # d/dw of ||d loss / d x||^2: a gradient through the VJP (double backward)
    rng = np.random.default_rng(13)
    x, w = _rand(rng, (2, 3, 6, 6)), _rand(rng, (4, 3, 3, 3))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (gx,) = torch.autograd.grad(
        torch.tanh(TF.conv2d(tx, tw, padding=1)).sum(), tx, create_graph=True
    )
    (gw_t,) = torch.autograd.grad((gx * gx).sum(), tw)
    X, W = tg.tensor(x), tg.Parameter(tg.tensor(w))
    with tg.Tape() as outer:
        with tg.Tape() as inner:
            inner.watch(X)
            loss = tg.tanh(F.conv2d(X, W, padding=1)).sum()
        gxx = inner.gradient(loss, X)
        pen = (gxx * gxx).sum()
    _close(outer.gradient(pen, W), gw_t, what="gradient penalty")


# --------------------------------------------------------------------------------------------
# pooling
# --------------------------------------------------------------------------------------------

MAXPOOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1)),
    dict(kernel_size=2, stride=1, dilation=2),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
]


@pytest.mark.parametrize("kw", MAXPOOL_CASES, ids=[str(k) for k in MAXPOOL_CASES])
def test_max_pool2d(kw):
    x = _rand(np.random.default_rng(14), (2, 3, 9, 8))
    compare(lambda t: F.max_pool2d(t, **kw), lambda t: TF.max_pool2d(t, **kw), [x])


def test_max_pool2d_return_indices_and_unbatched():
    x = _rand(np.random.default_rng(15), (3, 6, 7))
    out, idx = F.max_pool2d(tg.tensor(x), 3, 2, 1, return_indices=True)
    tout, tidx = TF.max_pool2d(torch.tensor(x), 3, 2, 1, return_indices=True)
    _close(out, tout)
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())


def test_max_pool2d_ties_go_to_the_first_element():
    x = tg.tensor([[[[1.0, 2.0, 2.0, 1.0], [2.0, 2.0, 0.0, 0.0]]]], dtype=tg.float64)
    tx = torch.tensor(x.numpy(), requires_grad=True)
    TF.max_pool2d(tx, 2, 1).sum().backward()
    with tg.Tape() as tape:
        tape.watch(x)
        y = F.max_pool2d(x, 2, 1).sum()
    _close(tape.gradient(y, x), tx.grad)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_max_pool1d(kw):
    x = _rand(np.random.default_rng(16), (2, 3, 11))
    compare(lambda t: F.max_pool1d(t, **kw), lambda t: TF.max_pool1d(t, **kw), [x])


AVGPOOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=3, stride=1, padding=1, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 1), count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, divisor_override=3),
]


@pytest.mark.parametrize("kw", AVGPOOL_CASES, ids=[str(k) for k in AVGPOOL_CASES])
def test_avg_pool2d(kw):
    x = _rand(np.random.default_rng(17), (2, 3, 9, 8))
    compare(lambda t: F.avg_pool2d(t, **kw), lambda t: TF.avg_pool2d(t, **kw), [x])


def test_avg_pool1d():
    x = _rand(np.random.default_rng(18), (2, 3, 10))
    kw = dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)
    compare(lambda t: F.avg_pool1d(t, **kw), lambda t: TF.avg_pool1d(t, **kw), [x])


@pytest.mark.parametrize("size", [1, (2, 3), (3, 5), (4, None), 7])
def test_adaptive_avg_pool2d(size):
    x = _rand(np.random.default_rng(19), (2, 3, 8, 10))
    compare(
        lambda t: F.adaptive_avg_pool2d(t, size), lambda t: TF.adaptive_avg_pool2d(t, size), [x]
    )


@pytest.mark.parametrize("size", [1, (2, 5), (3, 4), 7])
def test_adaptive_max_pool2d(size):
    x = _rand(np.random.default_rng(20), (2, 3, 8, 10))
    compare(
        lambda t: F.adaptive_max_pool2d(t, size), lambda t: TF.adaptive_max_pool2d(t, size), [x]
    )
    _, idx = F.adaptive_max_pool2d(tg.tensor(x), size, return_indices=True)
    _, tidx = TF.adaptive_max_pool2d(torch.tensor(x), size, return_indices=True)
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())


def test_pooling_second_order():
    x = tg.tensor(_rand(np.random.default_rng(21), (1, 2, 5, 5)))
    check_grads(lambda t: F.max_pool2d(t, 3, 1, 1) ** 2, [x], order=2)
    check_grads(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False) ** 2, [x], order=2)


# --------------------------------------------------------------------------------------------
# dropout
# --------------------------------------------------------------------------------------------


def test_dropout_identity_when_not_training_or_p_zero():
    x = tg.randn(4, 5)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x


def test_dropout_is_seeded_scaled_and_masks_the_gradient():
    x = tg.ones((200, 50), dtype=tg.float64)
    tg.manual_seed(3)
    a = F.dropout(x, 0.3)
    tg.manual_seed(3)
    with tg.Tape() as tape:
        tape.watch(x)
        b = F.dropout(x, 0.3)
        total = b.sum()
    g = tape.gradient(total, x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    vals = set(np.unique(a.numpy()).tolist())
    assert vals == {0.0, 1.0 / 0.7}
    assert abs((a.numpy() == 0).mean() - 0.3) < 0.02
    np.testing.assert_array_equal(g.numpy(), b.numpy())  # d(x * mask)/dx = mask
    assert float(F.dropout(x, 1.0).sum()) == 0.0


def test_dropout2d_drops_whole_channels():
    tg.manual_seed(0)
    y = F.dropout2d(tg.ones((8, 16, 3, 3)), 0.5).numpy()
    per_channel = y.reshape(8, 16, -1)
    assert (per_channel == per_channel[..., :1]).all()
    assert 0 < (per_channel[..., 0] == 0).sum() < 128


def test_dropout_rejects_bad_p():
    with pytest.raises(ValueError, match="probability"):
        F.dropout(tg.ones(3), 1.5)


# --------------------------------------------------------------------------------------------
# normalisation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,ns", [((4, 6), (6,)), ((2, 3, 4, 5), (4, 5))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, ns, affine):
    rng = np.random.default_rng(22)
    arrays = [_rand(rng, shape)] + ([_rand(rng, ns), _rand(rng, ns)] if affine else [None, None])
    compare(
        lambda x, w, b: F.layer_norm(x, ns, w, b, 1e-4),
        lambda x, w, b: TF.layer_norm(x, ns, w, b, 1e-4),
        arrays,
    )


def test_layer_norm_grads_first_and_second_order():
    rng = np.random.default_rng(23)
    x, w, b = (tg.tensor(_rand(rng, s)) for s in ((3, 5), (5,), (5,)))
    check_grads(lambda x, w, b: F.layer_norm(x, (5,), w, b), [x, w, b], order=2)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_batch_norm_training_updates_running_stats(shape):
    rng = np.random.default_rng(24)
    x, w, b = _rand(rng, shape), _rand(rng, 3), _rand(rng, 3)
    rm, rv = tg.tensor(rng.standard_normal(3)), tg.tensor(rng.uniform(0.5, 2.0, 3))
    trm, trv = torch.tensor(rm.numpy()), torch.tensor(rv.numpy())
    compare(
        lambda x, w, b: F.batch_norm(x, rm, rv, w, b, True, 0.2, 1e-3),
        lambda x, w, b: TF.batch_norm(x, trm, trv, w, b, True, 0.2, 1e-3),
        [x, w, b],
    )
    _close(rm, trm, what="running_mean")
    _close(rv, trv, what="running_var")


def test_batch_norm_eval_uses_running_stats():
    rng = np.random.default_rng(25)
    rm, rv = rng.standard_normal(4), rng.uniform(0.5, 2.0, 4)
    compare(
        lambda x, w, b: F.batch_norm(x, tg.tensor(rm), tg.tensor(rv), w, b),
        lambda x, w, b: TF.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b),
        [_rand(rng, (3, 4, 5)), _rand(rng, 4), _rand(rng, 4)],
    )


def test_batch_norm_rejects_one_value_per_channel():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(tg.ones((1, 3)), None, None, training=True)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm(groups):
    rng = np.random.default_rng(26)
    compare(
        lambda x, w, b: F.group_norm(x, groups, w, b),
        lambda x, w, b: TF.group_norm(x, groups, w, b),
        [_rand(rng, (2, 6, 3, 4)), _rand(rng, 6), _rand(rng, 6)],
    )


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm(eps):
    rng = np.random.default_rng(27)
    compare(
        lambda x, w: F.rms_norm(x, (3, 4), w, eps),
        lambda x, w: TF.rms_norm(x, (3, 4), w, eps),
        [_rand(rng, (2, 3, 4)), _rand(rng, (3, 4))],
    )


def test_instance_norm_with_running_stats():
    rng = np.random.default_rng(28)
    rm, rv = tg.zeros(3, dtype=tg.float64), tg.ones(3, dtype=tg.float64)
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    compare(
        lambda x, w, b: F.instance_norm(x, rm, rv, w, b),
        lambda x, w, b: TF.instance_norm(x, trm, trv, w, b),
        [_rand(rng, (2, 3, 4, 5)), _rand(rng, 3), _rand(rng, 3)],
    )
    _close(rm, trm)
    _close(rv, trv)


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, -1), (3.0, 0), (math.inf, 1)])
def test_normalize(p, dim):
    x = _rand(np.random.default_rng(29), (4, 5))
    compare(lambda t: F.normalize(t, p, dim), lambda t: TF.normalize(t, p, dim), [x])


def test_normalize_and_cosine_similarity_at_the_zero_vector_have_finite_gradients():
    z = np.zeros((2, 3))
    compare(lambda t: F.normalize(t, dim=1), lambda t: TF.normalize(t, dim=1), [z])
    compare(F.cosine_similarity, TF.cosine_similarity, [z, np.ones((2, 3))], rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize("dim", [1, -1])
def test_cosine_similarity(dim):
    rng = np.random.default_rng(30)
    compare(
        lambda a, b: F.cosine_similarity(a, b, dim),
        lambda a, b: TF.cosine_similarity(a, b, dim),
        [_rand(rng, (4, 5, 3)), _rand(rng, (1, 5, 3))],
    )


def test_pairwise_distance():
    rng = np.random.default_rng(31)
    compare(F.pairwise_distance, TF.pairwise_distance, [_rand(rng, (4, 5)), _rand(rng, (4, 5))])


# --------------------------------------------------------------------------------------------
# embedding, one_hot, pad, interpolate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(padding_idx):
    rng = np.random.default_rng(32)
    idx = np.array([[0, 2, 2, 4], [4, 1, 2, 0]])
    compare(
        lambda w: F.embedding(tg.tensor(idx), w, padding_idx=padding_idx),
        lambda w: TF.embedding(torch.tensor(idx), w, padding_idx=padding_idx),
        [_rand(rng, (5, 3))],
    )


def test_embedding_padding_row_gets_no_gradient_even_at_second_order():
    rng = np.random.default_rng(33)
    w, r = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    idx = np.array([[1, 3, 1], [0, 3, 2]])
    tw = torch.tensor(w, requires_grad=True)
    (gw,) = torch.autograd.grad(
        (TF.embedding(torch.tensor(idx), tw, 3) ** 3).sum(), tw, create_graph=True
    )
    (ggw,) = torch.autograd.grad((gw * torch.tensor(r)).sum(), tw)
    W = tg.tensor(w)
    with tg.Tape() as outer:
        outer.watch(W)
        with tg.Tape() as inner:
            inner.watch(W)
            loss = (F.embedding(tg.tensor(idx), W, padding_idx=3) ** 3).sum()
        g1 = inner.gradient(loss, W)
        pen = (g1 * tg.tensor(r)).sum()
    g2 = outer.gradient(pen, W)
    _close(g1, gw)
    _close(g2, ggw)
    assert np.all(g1.numpy()[3] == 0) and np.all(g2.numpy()[3] == 0)


def test_embedding_max_norm_renormalises_rows_in_place():
    rng = np.random.default_rng(34)
    w = rng.standard_normal((6, 4)) * 3
    tw = torch.tensor(w)
    tgw = tg.tensor(w)
    idx = np.array([1, 3, 3])
    y = F.embedding(tg.tensor(idx), tgw, max_norm=1.5)
    ty = TF.embedding(torch.tensor(idx), tw, max_norm=1.5)
    _close(y, ty)
    _close(tgw, tw)


def test_embedding_rejects_out_of_range_indices():
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        F.embedding(tg.tensor([3]), tg.ones((3, 2)))


def test_one_hot():
    idx = np.array([[0, 3], [2, 1]])
    for n in (-1, 5):
        out = F.one_hot(tg.tensor(idx), n)
        assert out.dtype == tg.int64
        np.testing.assert_array_equal(out.numpy(), TF.one_hot(torch.tensor(idx), n).numpy())


PAD_CASES = [
    ((1, 2), "constant", 0.5),
    ((1, 0, 2, 1), "constant", None),
    ((-1, 2, 0, -2), "constant", 1.0),
    ((2, 1, 1, 2), "reflect", None),
    ((2, 1, 1, 3), "replicate", None),
    ((1, 2, 2, 1), "circular", None),
]


@pytest.mark.parametrize("pad,mode,value", PAD_CASES, ids=[str(c) for c in PAD_CASES])
def test_pad(pad, mode, value):
    x = _rand(np.random.default_rng(35), (2, 3, 4, 5))
    kw = {} if value is None else {"value": value}
    compare(lambda t: F.pad(t, pad, mode, **kw), lambda t: TF.pad(t, pad, mode, **kw), [x])


INTERP_CASES = [
    dict(size=(7, 9), mode="nearest"),
    dict(scale_factor=2, mode="nearest"),
    dict(scale_factor=(0.5, 1.7), mode="nearest"),
    dict(size=(3, 11), mode="nearest-exact"),
    dict(size=(7, 9), mode="bilinear", align_corners=False),
    dict(size=(7, 9), mode="bilinear", align_corners=True),
    dict(size=(3, 2), mode="bilinear", align_corners=False),
    dict(scale_factor=1.5, mode="bilinear", align_corners=False),
    dict(scale_factor=(2, 0.6), mode="bilinear", align_corners=True),
]


@pytest.mark.parametrize("kw", INTERP_CASES, ids=[str(k) for k in INTERP_CASES])
def test_interpolate_2d(kw):
    x = _rand(np.random.default_rng(36), (2, 3, 5, 6))
    compare(lambda t: F.interpolate(t, **kw), lambda t: TF.interpolate(t, **kw), [x])


@pytest.mark.parametrize(
    "kw",
    [
        dict(size=9, mode="linear", align_corners=False),
        dict(scale_factor=3, mode="linear", align_corners=True),
        dict(size=13, mode="nearest"),
    ],
)
def test_interpolate_1d(kw):
    x = _rand(np.random.default_rng(37), (2, 3, 5))
    compare(lambda t: F.interpolate(t, **kw), lambda t: TF.interpolate(t, **kw), [x])


def test_interpolate_second_order():
    x = tg.tensor(_rand(np.random.default_rng(38), (1, 1, 3, 4)))
    check_grads(lambda t: F.interpolate(t, size=(5, 3), mode="bilinear") ** 2, [x], order=2)


# --------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------


def _qkv(rng, lq=4, ls=6, e=5, ev=3):
    return [_rand(rng, (2, 3, lq, e)), _rand(rng, (2, 3, ls, e)), _rand(rng, (2, 3, ls, ev))]


def test_sdpa_plain_and_scaled():
    rng = np.random.default_rng(39)
    compare(F.scaled_dot_product_attention, TF.scaled_dot_product_attention, _qkv(rng))
    compare(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, scale=0.3),
        _qkv(rng),
    )


@pytest.mark.parametrize("lq,ls", [(4, 4), (4, 6), (6, 4)])
def test_sdpa_causal(lq, ls):
    rng = np.random.default_rng(40)
    compare(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
        _qkv(rng, lq, ls),
    )


@pytest.mark.parametrize("lq,ls", [(4, 4), (4, 6), (6, 4)])
def test_sdpa_causal_composed_path_is_one_softmax(lq, ls):
    # 5-D inputs take the composition (as dropout does): a causal row always keeps its first
    # key, so one softmax primitive serves it; the result and gradients are PyTorch's
    rng = np.random.default_rng(43)
    arrays = [a[None] for a in _qkv(rng, lq, ls)]
    compare(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
        arrays,
    )
    q, k, v = (tg.tensor(a) for a in arrays)
    with tg.Tape() as tape:
        tape.watch(q)
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ops = tape.summary()
    assert "softmax" in ops and "exp" not in ops


def test_sdpa_bool_mask_with_a_fully_masked_row_gives_zeros():
    rng = np.random.default_rng(41)
    mask = rng.random((3, 4, 6)) > 0.4
    mask[1, 2] = False  # head 1, query 2 may attend to nothing
    y = compare(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=tg.tensor(mask)),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(mask)),
        _qkv(rng),
    )
    assert np.all(y.numpy()[:, 1, 2] == 0)


def test_sdpa_float_mask_gets_a_gradient():
    rng = np.random.default_rng(42)
    arrays = _qkv(rng) + [_rand(rng, (4, 6))]
    compare(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
        arrays,
    )


def test_sdpa_grouped_query_heads():
    rng = np.random.default_rng(43)
    q, k, v = _rand(rng, (2, 6, 4, 5)), _rand(rng, (2, 2, 3, 5)), _rand(rng, (2, 2, 3, 5))
    compare(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        [q, k, v],
    )


def test_sdpa_dropout_is_seeded():
    q, k, v = (tg.randn(1, 2, 5, 4) for _ in range(3))
    tg.manual_seed(7)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    tg.manual_seed(7)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), F.scaled_dot_product_attention(q, k, v).numpy())


def test_sdpa_gradcheck():
    rng = np.random.default_rng(44)
    q, k, v = (tg.tensor(a) for a in _qkv(rng, 3, 4, 2, 2))
    mask = tg.tensor(np.tril(np.ones((3, 4), bool)))
    check_grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), [q, k, v], order=1
    )


# --------------------------------------------------------------------------------------------
# every fused "nn." primitive has a gradient check (a new one without a row fails here)
# --------------------------------------------------------------------------------------------


def _prim_rows():
    rng = np.random.default_rng(45)
    x4 = tg.tensor(_rand(rng, (2, 2, 5, 4)))
    w4 = tg.tensor(_rand(rng, (3, 2, 2, 3)))
    return {
        "nn.conv2d": (lambda x, w: F.conv2d(x, w, padding=(1, 0), dilation=(2, 1)), [x4, w4]),
        # conv2d's VJPs: their own VJPs run at second order, and at third through each other
        "nn.conv2d_input_grad": (lambda w: F.conv2d(x4, w, stride=2) ** 2, [w4]),
        "nn.conv2d_weight_grad": (
            lambda x, w: F.conv2d(x, w, padding=1, groups=1) ** 2,
            [x4, tg.tensor(_rand(rng, (3, 2, 3, 3)))],
        ),
        "nn.conv2d_bias_grad": (  # second order reaches the bias gradient's broadcast VJP
            lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2) ** 2,
            [tg.tensor(_rand(rng, (1, 3, 3, 2))), w4, tg.tensor(_rand(rng, (2,)))],
        ),
        "nn.batch_norm": (
            lambda x, w, b: F.batch_norm(x, None, None, w, b, True) ** 3,
            [x4, tg.tensor(_rand(rng, (x4.shape[1],))), tg.tensor(_rand(rng, (x4.shape[1],)))],
        ),
        "nn.linear": (
            F.linear,
            [
                tg.tensor(_rand(rng, (2, 3, 4))),
                tg.tensor(_rand(rng, (5, 4))),
                tg.tensor(_rand(rng, 5)),
            ],
        ),
        "nn.linear_relu": (
            linear_relu,
            [
                tg.tensor(_rand(rng, (2, 3, 4))),
                tg.tensor(_rand(rng, (5, 4))),
                tg.tensor(_rand(rng, 5)),
            ],
        ),
        "nn.take": (
            lambda w: F.embedding(tg.tensor([[2, 0, 2]]), w),
            [tg.tensor(_rand(rng, (3, 2)))],
        ),
        "nn.take_grad": (
            lambda x: F.interpolate(x, scale_factor=2.0) ** 2,
            [tg.tensor(_rand(rng, (1, 1, 3)))],
        ),
        "nn.resize_nearest2d": (lambda x: F.interpolate(x, size=(7, 3)), [x4]),
        "nn.resize_nearest2d_grad": (lambda x: F.interpolate(x, scale_factor=2) ** 2, [x4]),
        "nn.resize_linear2d": (
            lambda x: F.interpolate(x, size=(3, 7), mode="bilinear", align_corners=True), [x4]),
        "nn.resize_linear2d_grad": (
            lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear") ** 2, [x4]),
        "nn.instance_norm": (
            lambda x, w, b: F.instance_norm(x, weight=w, bias=b) ** 2,
            [x4, tg.tensor(_rand(rng, (x4.shape[1],))), tg.tensor(_rand(rng, (x4.shape[1],)))],
        ),
        "nn.max_pool2d": (lambda x: F.max_pool2d(x, 2, 1) ** 2, [x4]),
        "nn.max_pool2d_grad": (lambda x: F.max_pool2d(x, 3, 2, 1) ** 2, [x4]),
        "nn.max_pool2d_select": (lambda x: F.max_pool2d(x, (2, 1), dilation=(2, 1)) ** 2, [x4]),
        "nn.pool_gather": (lambda x: F.adaptive_max_pool2d(x, (3, 3)) ** 2, [x4]),
        "nn.pool_scatter": (lambda x: F.adaptive_max_pool2d(x, (2, 3)) ** 2, [x4]),
        "nn.sum_pool2d": (lambda x: F.avg_pool2d(x, 2, 1, 1) ** 2, [x4]),
        "nn.sum_pool2d_grad": (lambda x: F.avg_pool2d(x, 2) ** 2, [x4]),
        "nn.pick": (
            lambda x: F.nll_loss(x, tg.tensor([1, 0, 2]), reduction="none") ** 2,
            [tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.pick_grad": (
            lambda x: F.nll_loss(x, tg.tensor([[1, 0]]), weight=tg.tensor([1.0, 2.0, 3.0])),
            [tg.tensor(_rand(rng, (1, 3, 2)))],
        ),
        "nn.layer_norm": (
            lambda x, w, b: F.layer_norm(x, (5, 4), w, b),
            [x4, tg.tensor(_rand(rng, (5, 4))), tg.tensor(_rand(rng, (5, 4)))],
        ),
        "nn.attention": (
            lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) ** 2,
            [
                tg.tensor(_rand(rng, (2, 2, 3, 4))),
                tg.tensor(_rand(rng, (2, 2, 5, 4))),
                tg.tensor(_rand(rng, (2, 2, 5, 3))),
                tg.tensor(_rand(rng, (3, 5))),
            ],
        ),
        "nn.recurrent_seq": (  # an LSTM layer's time loop, with both states differentiated
            lambda x, h, c, wi, wh, b: recurrent_layer("LSTM", x, h, c, (wi, wh, b, None))[0],
            [tg.tensor(_rand(rng, s)) for s in ((3, 2, 2), (2, 3), (2, 3), (12, 2), (12, 3), 12)],
        ),
        "nn.attention_qkv": (  # a packed self-attention projection (B, L, 3, H, D)
            lambda qkv, m: attention_qkv(qkv, m, 0.6) ** 2,
            [tg.tensor(_rand(rng, (2, 3, 3, 2, 4))), tg.tensor(_rand(rng, (1, 1, 3, 3)))],
        ),
        "nn.mse_loss": (
            lambda x, t: F.mse_loss(x, t) + F.mse_loss(t, x, reduction="sum"),
            [tg.tensor(_rand(rng, (3, 4))), tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.huber_loss": (  # both branches: differences on either side of delta and beta
            lambda x, t: F.huber_loss(x, t, delta=0.7) + F.smooth_l1_loss(t, x, reduction="sum",
                                                                          beta=0.4),
            [tg.tensor(_rand(rng, (3, 4))), tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.binary_cross_entropy": (
            lambda x, t: F.binary_cross_entropy(F.sigmoid(x), F.sigmoid(t))
            + (F.binary_cross_entropy(F.sigmoid(t), F.sigmoid(x), reduction="none") ** 2).sum(),
            [tg.tensor(_rand(rng, (3, 4))), tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.binary_cross_entropy_with_logits": (
            lambda x, t: F.binary_cross_entropy_with_logits(x, F.sigmoid(t))
            + (F.binary_cross_entropy_with_logits(t, x, reduction="none") ** 2).sum(),
            [tg.tensor(_rand(rng, (3, 4))), tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.cross_entropy_probs": (
            lambda x, t: F.cross_entropy(x, F.softmax(t, dim=1))
            + (F.cross_entropy(t, F.softmax(x, dim=1), reduction="none") ** 2).sum(),
            [tg.tensor(_rand(rng, (3, 4))), tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.cross_entropy": (
            lambda x: F.cross_entropy(x, tg.tensor([1, 0, 2])),
            [tg.tensor(_rand(rng, (3, 4)))],
        ),
        "nn.cross_entropy_grad": (
            lambda x: F.cross_entropy(x, tg.tensor([[1, -100, 0]]), reduction="sum"),
            [tg.tensor(_rand(rng, (1, 3, 3)))],
        ),
    }


def test_every_nn_primitive_has_a_gradient_check_row():
    # in-place state updates ("..._": batch norm's running statistics) have no gradient; the
    # layer tests compare them with PyTorch
    registered = {n for n in PRIMITIVES if n.startswith("nn.") and not n.endswith("_")}
    assert registered == set(_prim_rows()), registered ^ set(_prim_rows())


@pytest.mark.parametrize("name", sorted(_prim_rows()))
def test_nn_primitive_gradients_to_second_order(name):
    f, args = _prim_rows()[name]
    check_grads(f, args, order=2)
