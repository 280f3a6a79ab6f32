"""The layers added for PyTorch coverage against their torch twins: PyTorch's weights copied in
by state_dict (the same names), float64, forward and the gradients of the input and of every
parameter; and the coverage table in docs/coverage.md regenerated and compared."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
TOL = {"rtol": 1e-10, "atol": 1e-12}


# PyTorch's CPU kernels for these two compute their gradient with float32 constants
# (hardsigmoid's 1/6, celu's 1/alpha): agreement to float32 precision, not float64's
LOOSE = {"Hardsigmoid": {"rtol": 1e-7, "atol": 1e-9}, "CELU": {"rtol": 1e-7, "atol": 1e-9}}


def twin(name, args, kwargs, shapes, seed=0, train=True):
    """Build ``tg.nn.<name>`` and ``torch.nn.<name>``, load torch's state_dict into tapegrad,
    run both on the same float64 inputs, compare outputs and all gradients."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tol = LOOSE.get(name, TOL)
    tm = getattr(torch.nn, name)(*args, **kwargs).double()
    m = getattr(tg.nn, name)(*args, **kwargs).double()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    assert sorted(sd) == sorted(m.state_dict()), f"{name}: state_dict names differ"
    m.load_state_dict(sd)
    m.train(train)
    tm.train(train)
    arrays = [rng.standard_normal(s) for s in shapes]
    xs = [tg.tensor(a) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    with tg.Tape() as tape:
        tape.watch(*xs)
        y = m(*xs)
    ty = tm(*txs)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL, err_msg=f"{name} forward")
    g = rng.standard_normal(y.shape)
    params = [p for _, p in m.named_parameters()]
    grads = tape.gradient(y, xs + params, output_gradients=tg.tensor(g))
    ty.backward(torch.tensor(g))
    for k, tx in enumerate(txs):
        np.testing.assert_allclose(grads[k].numpy(), tx.grad.numpy(), **tol, err_msg=name)
    tparams = dict(tm.named_parameters())
    for k, (pname, _) in enumerate(m.named_parameters()):
        np.testing.assert_allclose(
            grads[len(xs) + k].numpy(), tparams[pname].grad.numpy(), **TOL, err_msg=pname
        )
    for key, v in tm.state_dict().items():  # running statistics updated alike
        np.testing.assert_allclose(m.state_dict()[key].numpy(), v.numpy(), **TOL, err_msg=key)
    return m, tm


CASES = [
    ("ReflectionPad1d", (2,), {}, [(2, 3, 5)]),
    ("ReflectionPad2d", ((1, 2, 0, 3),), {}, [(2, 3, 5, 6)]),
    ("ReflectionPad3d", (1,), {}, [(1, 2, 3, 4, 3)]),
    ("ReplicationPad1d", ((3, 1),), {}, [(2, 3, 4)]),
    ("ReplicationPad2d", (2,), {}, [(2, 3, 4, 4)]),
    ("ReplicationPad3d", ((1, 0, 2, 1, 0, 1),), {}, [(1, 2, 3, 3, 3)]),
    ("ZeroPad1d", (2,), {}, [(2, 3, 4)]),
    ("ZeroPad2d", ((1, 0, 2, 1),), {}, [(2, 3, 4, 4)]),
    ("ZeroPad3d", (1,), {}, [(1, 2, 2, 2, 2)]),
    ("ConstantPad1d", (2, 3.5), {}, [(2, 3, 4)]),
    ("ConstantPad2d", ((1, 2, 0, 1), -1.0), {}, [(2, 3, 4, 4)]),
    ("ConstantPad3d", (1, 0.5), {}, [(1, 2, 2, 2, 2)]),
    ("CircularPad1d", (2,), {}, [(2, 3, 4)]),
    ("CircularPad2d", ((1, 2, 2, 1),), {}, [(2, 3, 4, 4)]),
    ("CircularPad3d", (1,), {}, [(1, 2, 2, 3, 3)]),
    ("PixelShuffle", (2,), {}, [(2, 8, 3, 4)]),
    ("PixelShuffle", (3,), {}, [(9, 2, 2)]),
    ("PixelUnshuffle", (2,), {}, [(2, 3, 4, 6)]),
    ("Unfold", ((2, 3),), {"dilation": (1, 2), "padding": 1, "stride": (2, 1)}, [(2, 3, 6, 7)]),
    ("Fold", ((5, 6), 2), {"stride": 1}, [(2, 12, 20)]),
    ("Fold", ((7, 6), (3, 2)), {"dilation": (2, 1), "padding": 1, "stride": (2, 3)}, [(1, 12, 9)]),
    ("InstanceNorm1d", (3,), {}, [(4, 3, 7)]),
    ("InstanceNorm1d", (3,), {"affine": True}, [(3, 7)]),
    ("InstanceNorm2d", (3,), {"affine": True}, [(2, 3, 4, 5)]),
    ("InstanceNorm2d", (3,), {"affine": True, "track_running_stats": True}, [(2, 3, 4, 5)]),
    ("InstanceNorm3d", (2,), {"affine": True}, [(2, 2, 3, 3, 3)]),
    ("CosineSimilarity", (), {"dim": 1}, [(4, 5), (4, 5)]),
    ("CosineSimilarity", (), {"dim": 0, "eps": 1e-6}, [(4, 5, 2), (4, 1, 2)]),
    ("PairwiseDistance", (), {}, [(4, 5), (4, 5)]),
    ("PairwiseDistance", (), {"p": 1.0, "keepdim": True}, [(4, 5), (4, 5)]),
    ("ReLU6", (), {}, [(3, 4)]),
    ("Hardtanh", (-0.5, 0.7), {}, [(3, 4)]),
    ("Hardsigmoid", (), {}, [(3, 4)]),
    ("Hardswish", (), {}, [(3, 4)]),
    ("Mish", (), {}, [(3, 4)]),
    ("SELU", (), {}, [(3, 4)]),
    ("CELU", (0.7,), {}, [(3, 4)]),
    ("GLU", (), {"dim": 0}, [(4, 3)]),
    ("LogSigmoid", (), {}, [(3, 4)]),
    ("Softsign", (), {}, [(3, 4)]),
    ("Tanhshrink", (), {}, [(3, 4)]),
    ("Softmin", (), {"dim": 1}, [(3, 4)]),
    ("Hardshrink", (0.3,), {}, [(3, 4)]),
    ("Softshrink", (0.3,), {}, [(3, 4)]),
    ("Threshold", (0.1, -2.0), {}, [(3, 4)]),
    ("Softmax2d", (), {}, [(2, 3, 2, 2)]),
    ("AdaptiveAvgPool1d", (3,), {}, [(2, 3, 7)]),
    ("AdaptiveMaxPool1d", (3,), {}, [(2, 3, 7)]),
    ("UpsamplingNearest2d", (), {"scale_factor": 2}, [(1, 2, 3, 3)]),
    ("UpsamplingBilinear2d", (), {"size": (5, 4)}, [(1, 2, 3, 3)]),
    ("TripletMarginLoss", (), {"margin": 2.0}, [(4, 5), (4, 5), (4, 5)]),
    ("TripletMarginLoss", (), {"p": 1.0, "swap": True, "reduction": "none"}, [(4, 5)] * 3),
]


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("SoftMarginLoss", {}), ("SoftMarginLoss", {"reduction": "sum"}),
     ("HingeEmbeddingLoss", {"margin": 0.5}), ("HingeEmbeddingLoss", {"reduction": "none"})],
)  # fmt: skip
def test_target_losses_equal_torch(name, kwargs):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3)) * 3
    y = np.where(rng.random((4, 3)) > 0.5, 1.0, -1.0)
    gx = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(gx)
        out = getattr(tg.nn, name)(**kwargs)(gx, tg.tensor(y))
    tx = torch.tensor(x, requires_grad=True)
    tout = getattr(torch.nn, name)(**kwargs)(tx, torch.tensor(y))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), **TOL)
    g = rng.standard_normal(out.shape)
    (grad,) = tape.gradient(out, [gx], output_gradients=tg.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(grad.numpy(), tx.grad.numpy(), **TOL)


def test_soft_margin_loss_stable_for_large_margins():
    # log(1 + exp(1e4)) is 1e4; PyTorch's formula overflows to inf there
    x = tg.tensor(np.array([1e4, -1e4]))
    y = tg.tensor(np.array([-1.0, -1.0]))
    assert F.soft_margin_loss(x, y, reduction="none").tolist() == [1e4, 0.0]


@pytest.mark.parametrize(("name", "args", "kwargs", "shapes"), CASES, ids=str)
def test_layer_equals_torch(name, args, kwargs, shapes):
    twin(name, args, kwargs, shapes)


def test_instance_norm_eval_uses_running_stats():
    m, tm = twin("InstanceNorm2d", (3,), {"track_running_stats": True}, [(2, 3, 4, 4)])
    m.eval()
    tm.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4))
    np.testing.assert_allclose(m(tg.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(), **TOL)
    assert int(m.num_batches_tracked.item()) == int(tm.num_batches_tracked) == 0


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_nd_layers(p):
    x = tg.ones((2, 3, 4, 4))
    assert np.array_equal(tg.nn.Dropout2d(p).eval()(x).numpy(), x.numpy())
    y = tg.nn.Dropout2d(p)(x).numpy()
    assert (y == 0).all() if p == 1.0 else np.array_equal(y, x.numpy())
    assert tg.nn.Dropout1d(0.5)(tg.ones((2, 3, 4))).shape == (2, 3, 4)
    assert tg.nn.Dropout3d(0.5)(tg.ones((2, 3, 1, 2, 2))).shape == (2, 3, 1, 2, 2)


def test_dropout2d_zeroes_whole_channels():
    tg.manual_seed(0)
    y = tg.nn.Dropout2d(0.5)(tg.ones((8, 4, 3, 3))).numpy()
    per_channel = y.reshape(8, 4, -1)
    assert ((per_channel == 0).all(-1) | (per_channel == 2).all(-1)).all()


def test_functional_forms_equal_torch():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 8, 3, 3))
    np.testing.assert_array_equal(
        F.pixel_shuffle(tg.tensor(a), 2).numpy(),
        torch.nn.functional.pixel_shuffle(torch.tensor(a), 2).numpy(),
    )
    u = F.unfold(tg.tensor(a), 2, padding=1)
    np.testing.assert_array_equal(
        u.numpy(), torch.nn.functional.unfold(torch.tensor(a), 2, padding=1).numpy()
    )


def test_bad_input_errors():
    with pytest.raises(ValueError, match=r"pixel_shuffle: needs \(\*, C \* 2\*\*2, H, W\)"):
        F.pixel_shuffle(tg.zeros((1, 3, 2, 2)), 2)
    with pytest.raises(ValueError, match="pixel_unshuffle: .* divisible"):
        F.pixel_unshuffle(tg.zeros((1, 1, 3, 4)), 2)
    with pytest.raises(ValueError, match="ReflectionPad2d: padding must be an int or 4 ints"):
        tg.nn.ReflectionPad2d((1, 2))
    with pytest.raises(ValueError, match=r"fold: input must be \(N, C \* 4, 16\)"):
        F.fold(tg.zeros((1, 4, 15)), (5, 5), 2)
    with pytest.raises(ValueError, match="unfold: a .* kernel .* does not fit"):
        F.unfold(tg.zeros((1, 1, 2, 2)), 3)
    with pytest.raises(ValueError, match="InstanceNorm2d: expected a 3D .* or 4D input"):
        tg.nn.InstanceNorm2d(3)(tg.zeros((3, 4)))


def test_pixel_shuffle_gradcheck():
    x = tg.tensor(np.random.default_rng(0).standard_normal((1, 4, 2, 3)))
    tg.testing.check_grads(lambda t: F.pixel_shuffle(t, 2), (x,))


# --- docs/coverage.md -------------------------------------------------------------------------


def _gen():
    spec = importlib.util.spec_from_file_location("gen_coverage", ROOT / "docs" / "gen_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_coverage_table_is_current():
    committed = (ROOT / "docs" / "coverage.md").read_text()
    assert _gen().render() == committed, "docs/coverage.md is stale: run docs/gen_coverage.py"


def test_coverage_table_names_only_what_tapegrad_has():
    rows = re.findall(
        r"^\| `(nn|F)\.(\w+)` \| (.*) \|$", (ROOT / "docs" / "coverage.md").read_text(), re.M
    )
    assert len(rows) == len(torch.nn.modules.__all__) + len(_gen().torch_functions())
    for ns, name, status in rows:
        home = tg.nn if ns == "nn" else tg.nn.functional
        assert (status == "implemented") == hasattr(home, name), f"{ns}.{name}: {status}"
        assert status == "implemented" or status.startswith("not planned: "), status


def test_layers_used_by_examples_are_implemented():
    missing = [n for n in _gen().USED_BY_EXAMPLES if not hasattr(tg.nn, n)]
    assert not missing, f"layers used by pytorch/examples or torchvision missing: {missing}"
