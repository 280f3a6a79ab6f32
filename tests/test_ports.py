"""The ports benchmarks/ports.py times (pytorch/examples' mnist, dcgan, siamese_network, mnist_rnn,
gcn, fast_neural_style, super_resolution, vae, word_language_model, regression; nanoGPT): at
their tiny size, in float64 and from copied weights, a few training steps of each port give the
original's losses and weights. The mnist and dcgan examples also run as scripts. Nothing is
timed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import mnist_torch  # noqa: E402
import ports  # noqa: E402

import tapegrad as tg  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


def test_mnist_like_data_has_mnist_shape_and_normalisation():
    mn = mnist_torch.port("mnist")
    x, y, xt, yt = mn.mnist_like()
    assert x.shape[1:] == (1, 28, 28) and x.dtype == np.float32
    assert len(x) + len(xt) == 1797 and set(np.unique(y)) == set(range(10))
    background = (0.0 - mn.MEAN) / mn.STD  # the 4-pixel margin is blank, as in MNIST
    np.testing.assert_allclose(x[:, :, :4], background, rtol=1e-6)
    assert x.max() == pytest.approx((1.0 - mn.MEAN) / mn.STD, rel=0.05)


def test_mnist_port_runs(tmp_path):
    mn = mnist_torch.port("mnist")
    out = mn.main(["--epochs", "2", "--steps", "3", "--batch-size", "16", "--test-batch-size",
                   "400", "--log-interval", "1", "--out", str(tmp_path), "--quiet",
                   "--save-model"])
    assert out["steps"] == 3
    assert np.isfinite(out["test_loss"]) and 0.0 <= out["accuracy"] <= 1.0
    assert out["first_loss"] == pytest.approx(np.log(10), rel=0.1)  # about uniform at first
    assert (tmp_path / "loss.png").stat().st_size > 1000
    state = tg.load(str(tmp_path / "mnist_cnn.safetensors"))
    assert state["fc1.weight"].shape == (128, 9216)


def test_generated_images_are_64x64_rgb_in_range():
    dc = mnist_torch.port("dcgan")
    x = dc.generated_images(16)
    assert x.shape == (16, 3, 64, 64) and x.dtype == np.float32
    assert x.min() >= -1.0 and x.max() <= 1.0
    assert not np.allclose(x[0], x[1])
    np.testing.assert_array_equal(x, dc.generated_images(16))  # the same set every run


def test_dcgan_port_runs(tmp_path):
    dc = mnist_torch.port("dcgan")
    out = dc.main(["--steps", "2", "--batch-size", "4", "--ngf", "4", "--ndf", "4", "--n-images",
                   "12", "--outf", str(tmp_path), "--manualSeed", "3", "--quiet"])
    assert out["steps"] == 2
    assert np.isfinite([out["last_loss_D"], out["last_loss_G"]]).all()
    assert out["first_loss_D"] == pytest.approx(2 * np.log(2), rel=0.3)  # D is unsure at first
    for name in ("real_samples.png", "fake_samples_epoch_000.png", "fake_samples_final.png",
                 "netG_epoch_0.safetensors"):
        assert (tmp_path / name).stat().st_size > 100, name


def _losses(values) -> np.ndarray:
    """Losses as floats: tensors, numbers, or tuples of them (dcgan's errD, errG)."""
    def one(v):
        if isinstance(v, (tuple, list)):
            return [one(u) for u in v]
        return float(v.item() if hasattr(v, "item") else v)

    return np.asarray(one(list(values)), np.float64)


def _assert_same_weights(tg_model, torch_model, free=()) -> None:
    """Every tensor of the state_dict within 1e-8 of the original's, relative to the tensor's
    largest entry (Adam's and Adadelta's first steps divide by the gradient's size, so an entry
    whose gradient is near zero carries that gradient's rounding)."""
    want = torch_model.state_dict()
    got = tg_model.state_dict()
    assert set(got) == set(want)
    for k, v in want.items():
        y = v.detach().numpy().astype(np.float64)
        x = np.asarray(got[k].numpy(), np.float64)
        assert x.shape == y.shape, k
        if k in free:
            assert np.isfinite(x).all(), k
            continue
        np.testing.assert_allclose(x, y, rtol=1e-8, atol=1e-8 * float(np.abs(y).max(initial=0)),
                                   err_msg=k)


@pytest.mark.filterwarnings("ignore:dropout2d. Received a 2-D input")  # mnist_rnn, both sides
@pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # gcn's torch.sparse_coo_tensor
@pytest.mark.parametrize("name", list(ports.PROGRAMS))
def test_port_equals_its_original_in_float64(name):
    pair = ports.PROGRAMS[name]("tiny", np.float64)
    got, want = _losses(pair.port()), _losses(pair.original())
    assert len(got) == pair.steps and np.isfinite(got).all()
    if want.size:  # mnist's original train() returns no loss: its weights are compared
        np.testing.assert_allclose(got, want, rtol=1e-8)
    for tg_model, torch_model in pair.models:
        _assert_same_weights(tg_model, torch_model, pair.free)


def test_every_program_has_three_sizes_and_the_suite_has_ten():
    assert len(ports.PROGRAMS) >= 10
    for name, build in ports.PROGRAMS.items():
        assert build.__doc__, name
    with pytest.raises(KeyError):
        ports.regression("huge")


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_ports_timing_script_runs(capsys, tmp_path):
    out = ports.main(["--size", "tiny", "--rounds", "1", "--only", "regression,gcn",
                      "--json", str(tmp_path / "r.json")])
    assert set(out) == {"regression", "gcn"}
    for r in out.values():
        assert r["tapegrad_s"] > 0 and r["torch_s"] > 0 and r["ratio"] > 0
    printed = capsys.readouterr().out
    assert "regression, batch 8:" in printed and "geometric mean over 2 programs" in printed
    assert json.loads((tmp_path / "r.json").read_text())["size"] == "tiny"
    ports.main(["--table", str(tmp_path / "r.json")])
    table = capsys.readouterr().out
    assert "| regression | batch 8 |" in table and "| geometric mean |" in table
    with pytest.raises(SystemExit, match="unknown program"):
        ports.main(["--only", "resnet50"])


@pytest.mark.parametrize("name", ["mnist", "dcgan"])
def test_small_flag_shrinks_the_run(name):
    mod = mnist_torch.port(name)
    args = mod.parse_args(["--small"])
    assert args.steps <= 20
    if name == "dcgan":
        assert (args.batchSize, args.ngf, args.ndf) == (16, 16, 16)
    else:
        assert args.epochs == 1


def test_profile_lists_the_ports_costs(capsys):
    rows = ports.main(["--size", "tiny", "--only", "regression", "--profile"])["regression"]
    names = [k for k, _ in rows["profile"]]
    assert any("linear" in k for k in names), names
    assert names[-1].startswith("outside primitives")
    assert "ms/step in tapegrad" in capsys.readouterr().out
