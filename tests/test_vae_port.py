"""examples/vae.py, the port of pytorch/examples' VAE, against its original: same weights, same
noise, same batches give the same losses and weights after several Adam steps (float64), and
the small run trains and writes its pictures."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_examples import load

import tapegrad as tg

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


def _torch_vae() -> torch.nn.Module:
    """pytorch/examples' vae/main.py model, as written there (noise passed in)."""
    nn, F = torch.nn, torch.nn.functional

    class VAE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(784, 400)
            self.fc21 = nn.Linear(400, 20)
            self.fc22 = nn.Linear(400, 20)
            self.fc3 = nn.Linear(20, 400)
            self.fc4 = nn.Linear(400, 784)

        def forward(self, x, eps):
            h1 = F.relu(self.fc1(x.view(-1, 784)))
            mu, logvar = self.fc21(h1), self.fc22(h1)
            z = mu + eps * torch.exp(0.5 * logvar)
            return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar

    return VAE().double()


def _torch_loss(recon_x, x, mu, logvar):
    bce = torch.nn.functional.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    return bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def test_vae_steps_equal_the_pytorch_original_in_float64(monkeypatch) -> None:
    m = load("vae")
    images, _ = m.digits_28x28()
    rng = np.random.default_rng(0)
    tg.manual_seed(0)
    model = m.VAE().to(tg.float64)
    twin = _torch_vae()
    with torch.no_grad():
        for name, p in twin.named_parameters():
            p.copy_(torch.from_numpy(model.state_dict()[name].numpy()))
    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    topt = torch.optim.Adam(twin.parameters(), lr=1e-3)
    noise: list[np.ndarray] = []
    # the port draws its noise with tg.randn_like; hand it the same numbers as the twin's
    monkeypatch.setattr(tg, "randn_like", lambda t: tg.tensor(noise[-1]))
    for step in range(5):
        batch = images[rng.choice(len(images), 32, replace=False)].astype(np.float64)
        noise.append(rng.standard_normal((32, 20)))
        x = tg.tensor(batch)
        with tg.Tape() as tape:
            recon, mu, logvar = model(x)
            loss = m.loss_function(recon, x, mu, logvar)
        opt.step(tape.gradient(loss, model))
        tx = torch.from_numpy(batch)
        topt.zero_grad()
        recon_t, mu_t, logvar_t = twin(tx, torch.from_numpy(noise[-1]))
        tloss = _torch_loss(recon_t, tx, mu_t, logvar_t)
        tloss.backward()
        topt.step()
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-12), step
    for name, p in twin.named_parameters():
        np.testing.assert_allclose(
            model.state_dict()[name].numpy(), p.detach().numpy(), rtol=1e-10, atol=1e-12
        )


def test_vae_small_run_trains_and_writes_its_pictures(tmp_path) -> None:
    m = load("vae")
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)
    assert r["final_train_loss"] < 0.9 * r["first_train_loss"]
    assert r["final_test_loss"] < 450  # BCE of an all-0.5 decoder is 784 ln 2 = 543 per image
    for f in ("reconstruction_2.png", "sample_2.png", "curves.png", "metrics.json"):
        assert os.path.getsize(tmp_path / f) > 0


def test_vae_compiled_run_equals_eager(tmp_path) -> None:
    m = load("vae")
    eager = m.main(m.Config(epochs=1, out=str(tmp_path / "e")), quiet=True)
    comp = m.main(m.Config(epochs=1, compile=True, out=str(tmp_path / "c")), quiet=True)
    for k in ("first_train_loss", "final_train_loss", "final_test_loss"):
        assert comp[k] == eager[k]
