"""A variational autoencoder: pytorch/examples' ``vae/main.py`` ported to tapegrad.

    python examples/vae.py                 # 10 epochs, as the original
    python examples/vae.py --small         # a few seconds, for tests
    python examples/vae.py --compile       # the same training step through tg.compile

The model, loss, optimizer and loop are the original's: a 784-400-20 encoder giving the mean and
log-variance of a Gaussian, the reparameterisation ``z = mu + eps * exp(logvar / 2)``, a
20-400-784 decoder with a sigmoid, binary cross-entropy summed over pixels plus the KL
divergence to N(0, I), Adam with lr 1e-3, batch 128. Only the data differs: no download is
allowed, so the 28x28 images are scikit-learn's 8x8 digits (``tg.data.load_digits``), resized
bilinearly to 28x28, 1437 for training and 360 held out. Writes, as the original does,
reconstruction_<epoch>.png (8 held-out images over their reconstructions) and sample_<epoch>.png
(64 decodings of z ~ N(0, I)), plus curves.png (the loss per epoch), into --out (runs/vae).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


@dataclass
class Config:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    seed: int = 1
    log_interval: int = 10
    compile: bool = False
    out: str = "runs/vae"


SMALL = {"epochs": 2}  # --small and the tests


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x: tg.Tensor) -> tuple[tg.Tensor, tg.Tensor]:
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu: tg.Tensor, logvar: tg.Tensor) -> tg.Tensor:
        std = tg.exp(0.5 * logvar)
        eps = tg.randn_like(std)
        return mu + eps * std

    def decode(self, z: tg.Tensor) -> tg.Tensor:
        h3 = F.relu(self.fc3(z))
        return tg.sigmoid(self.fc4(h3))

    def forward(self, x: tg.Tensor) -> tuple[tg.Tensor, tg.Tensor, tg.Tensor]:
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x: tg.Tensor, x: tg.Tensor, mu: tg.Tensor, logvar: tg.Tensor) -> tg.Tensor:
    """Reconstruction + KL divergence, summed over all elements and the batch."""
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    # Kingma and Welling, Auto-Encoding Variational Bayes, appendix B:
    # -0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    kld = -0.5 * tg.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def digits_28x28() -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 1, 28, 28) float32 in [0, 1], labels): the 8x8 digits resized bilinearly."""
    images, labels = tg.data.load_digits(return_arrays=True)
    big = F.interpolate(tg.tensor(images), size=(28, 28), mode="bilinear", align_corners=False)
    return np.clip(big.numpy(), 0.0, 1.0), labels


# -- pictures ---------------------------------------------------------------------------------
def save_grid(images: np.ndarray, path: str, nrow: int = 8) -> None:
    """A grid of (N, 1, 28, 28) images in [0, 1] as a PNG (torchvision's save_image)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(images)
    rows = -(-n // nrow)
    grid = np.ones((rows * 30 + 2, nrow * 30 + 2), dtype=np.float32)
    for i, im in enumerate(images):
        r, c = divmod(i, nrow)
        grid[2 + 30 * r: 30 + 30 * r, 2 + 30 * c: 30 + 30 * c] = im[0]
    plt.imsave(path, grid, cmap="gray", vmin=0.0, vmax=1.0)


def plot_curves(history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(history["epoch"], history["train_loss"], "o-", ms=3, label="training")
    ax.plot(history["epoch"], history["test_loss"], "s-", ms=3, label="held-out")
    ax.set(xlabel="epoch", ylabel="BCE + KLD per image", title="VAE loss")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- training ---------------------------------------------------------------------------------
def main(cfg: Config, quiet: bool = False) -> dict:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    tg.manual_seed(cfg.seed)
    os.makedirs(cfg.out, exist_ok=True)
    images, labels = digits_28x28()
    data = tg.data.TensorDataset(images, labels)
    test_set, train_set = tg.data.random_split(data, [0.2, 0.8], generator=tg.Generator(cfg.seed))
    train_loader = tg.data.DataLoader(train_set, cfg.batch_size, shuffle=True, seed=cfg.seed)
    test_loader = tg.data.DataLoader(test_set, cfg.batch_size)

    model = VAE()
    optimizer = tg.optim.Adam(model.parameters(), lr=cfg.lr)

    def loss_of(x: tg.Tensor) -> tg.Tensor:
        recon, mu, logvar = model(x)
        return loss_function(recon, x, mu, logvar)

    if cfg.compile:
        step = tg.compile(loss_of, model, optimizer)
    else:
        def step(x: tg.Tensor) -> tg.Tensor:
            with tg.Tape() as tape:
                loss = loss_of(x)
            optimizer.step(tape.gradient(loss, model))
            return loss

    history: dict[str, list] = {"epoch": [], "train_loss": [], "test_loss": []}
    bar = tqdm(total=cfg.epochs * len(train_loader), desc="vae", disable=quiet, unit="step")
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        train_loss = 0.0
        for batch_idx, (x, _) in enumerate(train_loader):
            loss = step(x)
            train_loss += loss.item()
            bar.update(1)
            if batch_idx % cfg.log_interval == 0:
                bar.set_postfix(epoch=epoch, loss=f"{loss.item() / len(x):.2f}")
        model.eval()
        test_loss = 0.0
        with tg.no_grad():
            for i, (x, _) in enumerate(test_loader):
                recon, mu, logvar = model(x)
                test_loss += loss_function(recon, x, mu, logvar).item()
                if i == 0:
                    n = min(len(x), 8)
                    pair = np.concatenate([x.numpy()[:n], recon.numpy().reshape(-1, 1, 28, 28)[:n]])
                    save_grid(pair, os.path.join(cfg.out, f"reconstruction_{epoch}.png"), nrow=n)
            sample = model.decode(tg.randn(64, 20)).numpy().reshape(64, 1, 28, 28)
            save_grid(sample, os.path.join(cfg.out, f"sample_{epoch}.png"))
        history["epoch"].append(epoch)
        history["train_loss"].append(train_loss / len(train_set))
        history["test_loss"].append(test_loss / len(test_set))
    bar.close()

    seconds = time.perf_counter() - t0
    plot_curves(history, os.path.join(cfg.out, "curves.png"))
    tg.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "config": asdict(cfg)}, os.path.join(cfg.out, "checkpoint.safetensors"))
    result = {"first_train_loss": history["train_loss"][0],
              "final_train_loss": history["train_loss"][-1],
              "final_test_loss": history["test_loss"][-1], "seconds": round(seconds, 1)}
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    if not quiet:
        print(f"held-out loss {result['final_test_loss']:.2f} per image after {cfg.epochs} "
              f"epochs (training {result['final_train_loss']:.2f}), {seconds:.0f} s")
        print(f"wrote {cfg.out}/reconstruction_*.png, sample_*.png, curves.png")
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=Config.epochs)
    p.add_argument("--batch-size", type=int, default=Config.batch_size)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--log-interval", type=int, default=Config.log_interval)
    p.add_argument("--compile", action="store_true", help="run the training step via tg.compile")
    p.add_argument("--out", default=Config.out)
    p.add_argument("--small", action="store_true", help="a few seconds (the tests' size)")
    a = p.parse_args()
    cfg = Config(epochs=a.epochs, batch_size=a.batch_size, seed=a.seed,
                 log_interval=a.log_interval, compile=a.compile, out=a.out)
    if a.small:
        cfg = Config(**{**asdict(cfg), **SMALL})
    main(cfg)
