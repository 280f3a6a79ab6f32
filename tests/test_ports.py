"""The tapegrad ports of pytorch/examples (examples/mnist.py, examples/dcgan.py): they run a few
steps at reduced size, and their first step equals the PyTorch original's (benchmarks/
mnist_torch.py, benchmarks/dcgan_torch.py) from copied weights, in float64. Nothing is timed."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import dcgan_torch  # noqa: E402
import mnist_torch  # noqa: E402
import ports  # noqa: E402

import tapegrad as tg  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


def _assert_same_weights(tg_model, torch_model, rtol: float = 1e-10) -> None:
    want = torch_model.state_dict()
    got = tg_model.state_dict()
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k].numpy(), np.float64),
                                   v.detach().numpy().astype(np.float64), rtol=rtol, atol=1e-12,
                                   err_msg=k)


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


def test_mnist_first_step_equals_the_original():
    mn = mnist_torch.port("mnist")
    x, y, _, _ = mn.mnist_like()
    x, y = x[:4].astype(np.float64), y[:4]
    torch.manual_seed(0)
    ref = mnist_torch.Net().double()
    model = mn.Net().double()
    ports.copy_weights(ref, model)
    for m in (ref, model):  # dropout draws differ between the libraries: switch it off
        m.dropout1.p = m.dropout2.p = 0.0
    ref_opt = torch.optim.Adadelta(ref.parameters(), lr=1.0)
    opt = tg.optim.Adadelta(model.parameters(), lr=1.0)
    args = SimpleNamespace(log_interval=1, dry_run=False, steps=None)
    history = {"seen": 0, "train": [], "test": []}
    mn.train(args, model, [(tg.tensor(x), tg.tensor(y))], opt, 1, history)
    with torch.no_grad():
        ref_loss = torch.nn.functional.nll_loss(ref(torch.from_numpy(x)), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=8)
    mnist_torch.train(args, ref, "cpu", loader, ref_opt, 1)
    assert history["train"][0][1] == pytest.approx(ref_loss.item(), rel=1e-12)
    _assert_same_weights(model, ref)


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


@pytest.mark.parametrize("width", [4])
def test_dcgan_first_steps_equal_the_original(monkeypatch, width):
    dc = mnist_torch.port("dcgan")
    nz, batch = 8, 4
    monkeypatch.setattr(dcgan_torch, "nz", nz)
    monkeypatch.setattr(dcgan_torch, "ngf", width)
    monkeypatch.setattr(dcgan_torch, "ndf", width)
    torch.manual_seed(0)
    ref_g, ref_d = dcgan_torch.Generator(1).double(), dcgan_torch.Discriminator(1).double()
    ref_g.apply(dcgan_torch.weights_init)
    ref_d.apply(dcgan_torch.weights_init)
    net_g, net_d = dc.Generator(nz, width, 3).double(), dc.Discriminator(width, 3).double()
    ports.copy_weights(ref_g, net_g)
    ports.copy_weights(ref_d, net_d)

    def adam(params, lib):
        return lib.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))

    ref_opts = (adam(ref_d.parameters(), torch), adam(ref_g.parameters(), torch))
    opts = (adam(net_d.parameters(), tg), adam(net_g.parameters(), tg))
    rng = np.random.default_rng(0)
    for _ in range(2):  # the second step starts from the first one's Adam state and BN stats
        real = dc.generated_images(batch, seed=int(rng.integers(1000))).astype(np.float64)
        noise = rng.standard_normal((batch, nz, 1, 1))
        got = dc.train_step(net_d, net_g, *opts, tg.nn.BCELoss(), tg.tensor(real),
                            tg.tensor(noise))
        want = dcgan_torch.train_step(ref_d, ref_g, *ref_opts, torch.nn.BCELoss(),
                                      torch.from_numpy(real), torch.from_numpy(noise))
        np.testing.assert_allclose(got, want, rtol=1e-10)  # errD, errG, D(x), D(G(z)) x 2
        _assert_same_weights(net_g, ref_g, rtol=1e-9)
        _assert_same_weights(net_d, ref_d, rtol=1e-9)


def test_ports_timing_script_runs(capsys):
    out = ports.main(["--rounds", "1", "--steps", "1", "--batch-size", "4", "--ngf", "2",
                      "--ndf", "2"])
    assert set(out) == {"mnist", "dcgan"}
    for r in out.values():
        assert r["tapegrad_s"] > 0 and r["torch_s"] > 0 and r["ratio"] > 0
    assert "dcgan, batch 4, ngf 2, ndf 2:" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["mnist", "dcgan"])
def test_small_flag_shrinks_the_run(name):
    mod = mnist_torch.port(name)
    args = mod.parse_args(["--small"])
    assert args.steps <= 20
    if name == "dcgan":
        assert (args.batchSize, args.ngf, args.ndf) == (16, 16, 16)
    else:
        assert args.epochs == 1
