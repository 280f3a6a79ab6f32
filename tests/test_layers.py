"""Every layer against its PyTorch twin with copied weights: forward, input and parameter
gradients in float64 (rtol 1e-6), plus the finite-difference gradient check on a few."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn

# replaced by a new generator for each test (_fresh_rng): no test sees another's draws
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _fresh_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets a new generator, seeded alike whatever ran before it (any order, any -k)."""
    monkeypatch.setitem(globals(), "RNG", np.random.default_rng(0))


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def twin_check(
    ours: nn.Module,
    ref: torch.nn.Module,
    inputs: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    pick: Callable[[Any], Any] = lambda out: out,
    train: bool = False,
    rtol: float = 1e-10,
    atol: float = 1e-12,
) -> tuple[Any, Any]:
    """Load ``ref``'s state_dict into ``ours`` (strict) in float64 and compare the output, the
    gradients of the float inputs and of every parameter (matched by name) for a random
    output gradient. Returns the two outputs."""
    kwargs = kwargs or {}
    ref = ref.double().train(train)
    ours.to(tg.float64).train(train)
    ours.load_state_dict(ref.state_dict(), strict=True)
    t_in = [
        torch.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
        for a in inputs
    ]
    t_out = pick(ref(*t_in, **kwargs))
    # its own generator: other test files call twin_check, and their tests do not reset RNG
    g = np.random.default_rng(101).standard_normal(tuple(t_out.shape))
    t_params = dict(ref.named_parameters())
    t_leaves = [t for t in t_in if isinstance(t, torch.Tensor) and t.requires_grad]
    t_leaves += list(t_params.values())
    t_grads = torch.autograd.grad(t_out, t_leaves, torch.tensor(g), allow_unused=True)

    params = dict(ours.named_parameters())
    assert list(params) == list(t_params)
    with tg.Tape() as tape:
        x_in = [tg.tensor(a) if isinstance(a, np.ndarray) else a for a in inputs]
        for x in x_in:
            if isinstance(x, tg.Tensor) and x.dtype.kind == "f":
                tape.watch(x)
        out = pick(ours(*x_in, **kwargs))
    leaves = [x for x in x_in if isinstance(x, tg.Tensor) and x.dtype.kind == "f"]
    leaves += [params[k] for k in t_params]
    grads = tape.gradient(out, leaves, output_gradients=tg.tensor(g))

    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=rtol, atol=atol)
    names = [f"input {i}" for i in range(len(leaves) - len(t_params))] + list(t_params)
    for name, ours_g, ref_g in zip(names, grads, t_grads, strict=True):
        want = np.zeros(ours_g.shape) if ref_g is None else ref_g.numpy()
        np.testing.assert_allclose(
            ours_g.numpy(), want, rtol=rtol, atol=atol, err_msg=f"gradient of {name}"
        )
    return out, t_out


# -- linear -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    twin_check(nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias), [randn(2, 4, 5)])


def test_linear_bad_input():
    with pytest.raises(ValueError, match="last dimension must be 5"):
        nn.Linear(5, 3)(tg.ones((2, 4)))


def test_bilinear():
    twin_check(nn.Bilinear(3, 4, 2), torch.nn.Bilinear(3, 4, 2), [randn(5, 3), randn(5, 4)])


def test_identity_flatten_unflatten():
    twin_check(nn.Identity(), torch.nn.Identity(), [randn(2, 3)])
    twin_check(nn.Flatten(), torch.nn.Flatten(), [randn(2, 3, 4)])
    twin_check(nn.Flatten(0, 1), torch.nn.Flatten(0, 1), [randn(2, 3, 4)])
    twin_check(nn.Unflatten(1, (3, -1)), torch.nn.Unflatten(1, (3, -1)), [randn(2, 12)])
    with pytest.raises(ValueError, match="cannot hold"):
        nn.Unflatten(1, (5, 2))(tg.ones((2, 12)))


# -- convolution ------------------------------------------------------------------------------

CONV2D_CASES = [
    {},
    {"stride": 2, "padding": 1},
    {"padding": "same", "dilation": 2},
    {"padding": "valid", "bias": False},
    {"groups": 2, "stride": (2, 1), "padding": (1, 2)},
    {"padding": 1, "padding_mode": "reflect"},
    {"padding": 2, "padding_mode": "replicate"},
    {"padding": "same", "padding_mode": "circular"},
]


@pytest.mark.parametrize("kw", CONV2D_CASES)
def test_conv2d(kw):
    twin_check(nn.Conv2d(4, 6, 3, **kw), torch.nn.Conv2d(4, 6, 3, **kw), [randn(2, 4, 7, 8)])


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 2, "dilation": 2}, {"groups": 2},
                                {"padding": "same", "padding_mode": "reflect"}])  # fmt: skip
def test_conv1d(kw):
    twin_check(nn.Conv1d(4, 6, 3, **kw), torch.nn.Conv1d(4, 6, 3, **kw), [randn(2, 4, 9)])


@pytest.mark.parametrize(
    "kw",
    [{}, {"stride": 2, "padding": 1, "output_padding": 1}, {"groups": 2, "dilation": 2},
     {"stride": 3, "bias": False}],
)  # fmt: skip
def test_conv_transpose2d(kw):
    twin_check(
        nn.ConvTranspose2d(4, 6, 3, **kw), torch.nn.ConvTranspose2d(4, 6, 3, **kw),
        [randn(2, 4, 5, 4)],
    )  # fmt: skip


def test_conv_transpose_output_size():
    ours, ref = (
        nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1),
        torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1),
    )
    out, _ = twin_check(ours, ref, [randn(1, 3, 4, 4)], {"output_size": (8, 8)})
    assert out.shape == (1, 2, 8, 8)  # the values: twin_check
    with pytest.raises(ValueError, match="not reachable"):
        ours(tg.ones((1, 3, 4, 4), dtype=tg.float64), output_size=(12, 12))  # twin_check doubled it
    twin_check(nn.ConvTranspose1d(3, 2, 4, stride=2), torch.nn.ConvTranspose1d(3, 2, 4, stride=2),
               [randn(2, 3, 5)])  # fmt: skip


def test_conv_errors():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match=r"expected input of shape \(N, 3"):
        nn.Conv2d(3, 4, 3)(tg.ones((1, 2, 5, 5)))
    with pytest.raises(ValueError, match="stride 1"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")


# -- pooling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
           {"kernel_size": 3, "stride": 2, "ceil_mode": True}, {"kernel_size": 2, "dilation": 2}],
)  # fmt: skip
def test_max_pool2d(kw):
    twin_check(nn.MaxPool2d(**kw), torch.nn.MaxPool2d(**kw), [randn(2, 3, 7, 8)])


@pytest.mark.parametrize(
    "kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
           {"kernel_size": 3, "padding": 1, "count_include_pad": False},
           {"kernel_size": 3, "stride": 2, "ceil_mode": True}, {"kernel_size": 2, "divisor_override": 3}],
)  # fmt: skip
def test_avg_pool2d(kw):
    twin_check(nn.AvgPool2d(**kw), torch.nn.AvgPool2d(**kw), [randn(2, 3, 7, 8)])


@pytest.mark.parametrize("size", [1, (3, 2), (None, 5), 4])
def test_adaptive_pools(size):
    twin_check(nn.AdaptiveAvgPool2d(size), torch.nn.AdaptiveAvgPool2d(size), [randn(2, 3, 7, 5)])
    twin_check(nn.AdaptiveMaxPool2d(size), torch.nn.AdaptiveMaxPool2d(size), [randn(2, 3, 7, 5)])


def test_pool1d():
    twin_check(nn.MaxPool1d(3, 2), torch.nn.MaxPool1d(3, 2), [randn(2, 3, 9)])
    twin_check(nn.AvgPool1d(3, 2, 1), torch.nn.AvgPool1d(3, 2, 1), [randn(2, 3, 9)])


def test_max_pool_return_indices():
    x = randn(1, 2, 4, 4)
    x[0, 0, :2, :2] = 1.5  # a window of four tied maxima: the first one's index
    out, idx = nn.MaxPool2d(2, return_indices=True)(tg.tensor(x))
    t_out, t_idx = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(out.numpy(), t_out.numpy())
    np.testing.assert_array_equal(np.asarray(idx.numpy()), t_idx.numpy())


# -- normalisation ----------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [{}, {"affine": False}, {"bias": False}, {"momentum": None},
                                {"track_running_stats": False}])  # fmt: skip
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5)])
def test_batch_norm1d_train_and_eval(kw, shape):
    ours, ref = nn.BatchNorm1d(3, **kw), torch.nn.BatchNorm1d(3, **kw)
    for _ in range(3):  # training steps update the running statistics identically
        twin_check(ours, ref, [randn(*shape) * 2 + 1], train=True)
    for (name, a), (tname, b) in zip(
        ours.state_dict().items(), ref.state_dict().items(), strict=True
    ):
        assert name == tname
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-12)
    twin_check(ours, ref, [randn(*shape)], train=False)


def test_batch_norm2d():
    ours, ref = nn.BatchNorm2d(4, momentum=0.3), torch.nn.BatchNorm2d(4, momentum=0.3)
    for _ in range(2):
        twin_check(ours, ref, [randn(3, 4, 5, 5) + 2], train=True)
    assert int(ours.num_batches_tracked.item()) == 2
    np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), rtol=1e-6)
    twin_check(ours, ref, [randn(3, 4, 5, 5)], train=False)
    with pytest.raises(ValueError, match="expected 4D input"):
        ours(tg.ones((2, 4)))


def test_batch_norm_eval_does_not_update():
    bn = nn.BatchNorm1d(2).eval()
    bn(tg.tensor(randn(5, 2), dtype=tg.float32))
    assert bn.running_mean.tolist() == [0.0, 0.0] and int(bn.num_batches_tracked.item()) == 0


@pytest.mark.parametrize("kw", [{}, {"elementwise_affine": False}, {"bias": False}, {"eps": 1e-3}])
def test_layer_norm(kw):
    twin_check(nn.LayerNorm((3, 4), **kw), torch.nn.LayerNorm((3, 4), **kw), [randn(2, 3, 4)])


@pytest.mark.parametrize("kw", [{}, {"affine": False}, {"eps": 1e-3}])
def test_group_norm(kw):
    twin_check(nn.GroupNorm(2, 6, **kw), torch.nn.GroupNorm(2, 6, **kw), [randn(3, 6, 4)])
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("kw", [{}, {"eps": 1e-4}, {"elementwise_affine": False}])
def test_rms_norm(kw):
    twin_check(nn.RMSNorm(4, **kw), torch.nn.RMSNorm(4, **kw), [randn(2, 3, 4)])


# -- embedding and dropout --------------------------------------------------------------------


def test_embedding_with_padding_idx():
    ids = RNG.integers(0, 10, (4, 5))
    ids[0, 0] = 2
    out, _ = twin_check(nn.Embedding(10, 3, padding_idx=2), torch.nn.Embedding(10, 3, padding_idx=2),
                        [ids])  # fmt: skip
    assert out.shape == (4, 5, 3)
    assert nn.Embedding(10, 3, padding_idx=-1).padding_idx == 9
    assert nn.Embedding(4, 2, padding_idx=1).weight.numpy()[1].tolist() == [0.0, 0.0]


def test_embedding_max_norm_and_pretrained():
    ours, ref = nn.Embedding(6, 4, max_norm=1.0), torch.nn.Embedding(6, 4, max_norm=1.0)
    ids = np.array([[0, 1, 1, 3]])
    twin_check(ours, ref, [ids])
    np.testing.assert_allclose(ours.weight.numpy(), ref.weight.detach().numpy(), rtol=1e-6)
    w = randn(3, 2)
    emb = nn.Embedding.from_pretrained(tg.tensor(w))
    assert not emb.weight.requires_grad and emb.weight.shape == (3, 2)
    np.testing.assert_array_equal(emb(tg.tensor([2])).numpy()[0], w[2])
    with pytest.raises(IndexError):
        emb(tg.tensor([3]))


def test_dropout_train_and_eval():
    drop = nn.Dropout(0.25)
    x = tg.ones((200, 100), dtype=tg.float64)
    tg.manual_seed(3)
    with tg.Tape() as tape:
        tape.watch(x)
        y = drop(x)
        total = y.sum()
    vals = y.numpy()
    np.testing.assert_allclose(np.unique(vals), [0.0, 1 / 0.75])
    assert abs((vals == 0).mean() - 0.25) < 0.01
    g = tape.gradient(total, x).numpy()
    np.testing.assert_array_equal(g, vals)  # the gradient passes through the same mask
    assert drop.eval()(x) is x
    assert nn.Dropout(0.0)(x) is x
    assert float(nn.Dropout(1.0)(x).sum()) == 0.0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        nn.Dropout(1.5)


# -- activations ------------------------------------------------------------------------------

ACTIVATIONS = [
    ("ReLU", {}), ("LeakyReLU", {"negative_slope": 0.2}), ("ELU", {"alpha": 0.7}),
    ("GELU", {}), ("GELU", {"approximate": "tanh"}), ("SiLU", {}), ("Sigmoid", {}), ("Tanh", {}),
    ("Softplus", {}), ("Softplus", {"beta": 2.0, "threshold": 1.0}), ("Softmax", {"dim": -1}),
    ("Softmax", {"dim": 1}), ("LogSoftmax", {"dim": 0}), ("PReLU", {}),
    ("PReLU", {"num_parameters": 3, "init": 0.1}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "kw"), ACTIVATIONS)
def test_activation(name, kw):
    twin_check(getattr(nn, name)(**kw), getattr(torch.nn, name)(**kw), [randn(4, 3, 5)])


@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 4, 5), (2, 3, 4, 5)])
def test_softmax_implicit_dim(shape):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns about the implicit dim
        twin_check(nn.Softmax(), torch.nn.Softmax(), [randn(*shape)])
        twin_check(nn.LogSoftmax(), torch.nn.LogSoftmax(), [randn(*shape)])


# -- upsampling -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [{"scale_factor": 2}, {"size": (5, 7)}, {"scale_factor": 2, "mode": "bilinear"},
     {"size": (6, 5), "mode": "bilinear", "align_corners": True},
     {"scale_factor": 1.5, "mode": "nearest-exact"}],
)  # fmt: skip
def test_upsample(kw):
    twin_check(nn.Upsample(**kw), torch.nn.Upsample(**kw), [randn(2, 3, 4, 3)])


# -- losses -----------------------------------------------------------------------------------

LOSSES = [
    ("MSELoss", {}, "float"), ("MSELoss", {"reduction": "sum"}, "float"),
    ("L1Loss", {"reduction": "none"}, "float"), ("HuberLoss", {"delta": 0.5}, "float"),
    ("SmoothL1Loss", {"beta": 0.5}, "float"), ("CrossEntropyLoss", {}, "class"),
    ("CrossEntropyLoss", {"label_smoothing": 0.1, "ignore_index": 1}, "class"),
    ("CrossEntropyLoss", {"reduction": "sum"}, "prob"), ("NLLLoss", {}, "class"),
    ("BCEWithLogitsLoss", {}, "binary"), ("BCELoss", {}, "binary_prob"),
    ("KLDivLoss", {"reduction": "batchmean"}, "logprob"), ("MSELoss", {"size_average": False}, "float"),
]  # fmt: skip


def _loss_inputs(kind: str) -> list[np.ndarray]:
    x = randn(6, 4)
    if kind == "float":
        return [x, randn(6, 4)]
    if kind == "class":
        return [x, RNG.integers(0, 4, 6)]
    if kind == "prob":
        p = RNG.random((6, 4))
        return [x, p / p.sum(1, keepdims=True)]
    if kind == "binary":
        return [x, (RNG.random((6, 4)) > 0.5).astype(np.float64)]
    if kind == "binary_prob":
        return [1 / (1 + np.exp(-x)), RNG.random((6, 4))]
    p = RNG.random((6, 4))
    return [np.log(RNG.dirichlet(np.ones(4), 6)), p / p.sum(1, keepdims=True)]


@pytest.mark.parametrize(("name", "kw", "kind"), LOSSES)
def test_loss_modules(name, kw, kind):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # size_average is deprecated in PyTorch
        twin_check(getattr(nn, name)(**kw), getattr(torch.nn, name)(**kw), _loss_inputs(kind))


def test_weighted_losses_keep_weight_as_buffer():
    w = np.array([1.0, 2.0, 0.5, 1.0])
    ours, ref = (
        nn.CrossEntropyLoss(weight=tg.tensor(w)),
        torch.nn.CrossEntropyLoss(weight=torch.tensor(w)),
    )
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["weight"]
    twin_check(ours, ref, _loss_inputs("class"))
    pw = np.array([1.0, 3.0, 0.5, 2.0])
    ours, ref = (
        nn.BCEWithLogitsLoss(pos_weight=pw),
        torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw)),
    )
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["pos_weight"]
    twin_check(ours, ref, _loss_inputs("binary"))


# -- finite differences and repr --------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "shapes", "order"),
    [(lambda: nn.Linear(3, 2), [(2, 3)], 2), (lambda: nn.LayerNorm(3), [(2, 3)], 2),
     (lambda: nn.Conv2d(2, 2, 2), [(2, 2, 3, 3)], 2), (lambda: nn.GroupNorm(1, 2), [(2, 2, 3)], 2),
     (nn.PReLU, [(2, 3)], 2), (lambda: nn.Bilinear(3, 3, 2), [(2, 3), (2, 3)], 1)],
)  # fmt: skip
def test_check_grads(make, shapes, order):
    layer = make().double()  # the layer's forward, differentiated with respect to its inputs
    tg.testing.check_grads(layer, [tg.tensor(randn(*s)) for s in shapes], order=order)


REPRS = [
    ("Linear", (3, 4)), ("Bilinear", (2, 3, 4)), ("Conv2d", (2, 3, 3)),
    ("Conv2d", (2, 4, (3, 5))), ("Conv1d", (2, 3, 3)), ("ConvTranspose2d", (2, 3, 3)),
    ("MaxPool2d", (2,)), ("AvgPool2d", (3, 2, 1)), ("AdaptiveAvgPool2d", ((1, 1),)),
    ("BatchNorm1d", (3,)), ("BatchNorm2d", (3,)), ("LayerNorm", (4,)), ("GroupNorm", (2, 4)),
    ("RMSNorm", (3,)), ("Embedding", (5, 2)), ("Dropout", (0.1,)), ("ReLU", ()), ("GELU", ()),
    ("LeakyReLU", ()), ("ELU", ()), ("Softmax", (1,)), ("LogSoftmax", (-1,)), ("Softplus", ()),
    ("PReLU", ()), ("Flatten", ()), ("Unflatten", (1, (2, 3))), ("SiLU", ()), ("Tanh", ()),
    ("Identity", ()), ("CrossEntropyLoss", ()), ("MSELoss", ()),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args"), REPRS)
def test_repr_matches_pytorch(name, args):
    assert repr(getattr(nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


def test_conv_repr_options():
    kw = {"stride": 2, "padding": 1, "dilation": 2, "groups": 2, "bias": False,
          "padding_mode": "reflect"}  # fmt: skip
    assert repr(nn.Conv2d(4, 4, 3, **kw)) == repr(torch.nn.Conv2d(4, 4, 3, **kw))
    assert repr(nn.Conv2d(4, 4, 3, padding="same")) == repr(
        torch.nn.Conv2d(4, 4, 3, padding="same")
    )
    assert repr(nn.Upsample(scale_factor=2)) == repr(torch.nn.Upsample(scale_factor=2))
    assert repr(nn.Upsample(size=(3, 4), mode="bilinear")) == repr(
        torch.nn.Upsample(size=(3, 4), mode="bilinear")
    )


def test_layer_dtype_argument():
    lin = nn.Linear(3, 2, dtype=tg.float64)
    assert lin.weight.dtype == tg.float64 and lin.bias.dtype == tg.float64
    assert nn.LayerNorm(3, dtype="float64").weight.dtype == tg.float64
    assert nn.BatchNorm1d(3, dtype=tg.float64).running_mean.dtype == tg.float64
