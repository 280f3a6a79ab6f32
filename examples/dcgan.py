"""pytorch/examples' `dcgan/main.py`, ported to tapegrad: same networks, init, loss and loop.

    python examples/dcgan.py                                   # 25 epochs, as the original
    python examples/dcgan.py --small         # 10 batches of 16 at ngf = ndf = 16: a few seconds

The generator (ConvTranspose2d + BatchNorm2d + ReLU from a 100-d noise vector up to a 64x64x3
tanh image) and the discriminator (Conv2d + BatchNorm2d + LeakyReLU(0.2) down to a sigmoid),
their `weights_init` (N(0, 0.02) convolutions, N(1, 0.02) batch norm scales), BCE, two Adam
optimizers (lr 2e-4, betas (0.5, 0.999)), batch 64, and the loop's order (D on real, D on the
detached fake, D's step, then G's step through D(fake)) are the original's. The data is a
generated set of 64x64 colour images (a disk on a two-colour gradient; nothing is downloaded),
in [-1, 1] as the original's Normalize((0.5,) * 3, (0.5,) * 3) gives. Every 100 batches it
writes real_samples.png and fake_samples_epoch_NNN.png (8 per row, as torchvision's
save_image) into --outf (runs/dcgan), and the networks at the end of each epoch.

tapegrad needs no zero_grad and no detach bookkeeping for the networks: one tape watches the
generator, one the discriminator; each is asked for its own network's gradient. The PyTorch
original, reading the same data, is benchmarks/dcgan_torch.py; benchmarks/ports.py times the two
side by side.
"""

from __future__ import annotations

import argparse
import os
import random

import numpy as np

import tapegrad as tg
from tapegrad import nn


# -- data: a generated image set ------------------------------------------------------------------
def generated_images(n: int, size: int = 64, seed: int = 0) -> np.ndarray:
    """``n`` float32 (3, size, size) images in [-1, 1]: a coloured disk on a vertical gradient."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)  # (H, W) in [0, 1]
    top, bottom, disk = (rng.random((n, 3, 1, 1)) for _ in range(3))
    img = top * (1 - yy) + bottom * yy  # (N, 3, H, W)
    cx, cy = (rng.uniform(0.25, 0.75, (n, 1, 1)) for _ in range(2))
    r = rng.uniform(0.12, 0.3, (n, 1, 1))
    inside = ((xx - cx) ** 2 + (yy - cy) ** 2 < r**2)[:, None]  # (N, 1, H, W)
    img = np.where(inside, disk, img)
    return (img * 2 - 1).astype(np.float32)


def save_image(images: np.ndarray, path: str, nrow: int = 8, padding: int = 2) -> None:
    """A grid PNG of (N, C, H, W) images scaled to [0, 1] by their min and max (torchvision's
    ``save_image(normalize=True)``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray(images, np.float64)
    x = (x - x.min()) / max(x.max() - x.min(), 1e-5)
    n, c, h, w = x.shape
    rows = -(-n // nrow)
    cols = min(n, nrow)
    grid = np.zeros((padding + rows * (h + padding), padding + cols * (w + padding), 3))
    for k in range(n):
        i, j = divmod(k, nrow)
        top, left = padding + i * (h + padding), padding + j * (w + padding)
        grid[top:top + h, left:left + w] = x[k].transpose(1, 2, 0) if c == 3 else x[k, 0, ..., None]
    plt.imsave(path, grid)


# -- the networks ---------------------------------------------------------------------------------
def weights_init(m: nn.Module) -> None:
    """Custom weights initialization called on netG and netD."""
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, nz: int = 100, ngf: int = 64, nc: int = 3) -> None:
        super().__init__()
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
            # state size. (nc) x 64 x 64
        )

    def forward(self, input: tg.Tensor) -> tg.Tensor:
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf: int = 64, nc: int = 3) -> None:
        super().__init__()
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input: tg.Tensor) -> tg.Tensor:
        output = self.main(input)
        return output.reshape(-1, 1).squeeze(1)


# -- one iteration of the original's loop ---------------------------------------------------------
real_label = 1.0
fake_label = 0.0


def train_step(netD, netG, optimizerD, optimizerG, criterion, real_cpu, noise):
    """(1) Update D: maximize log(D(x)) + log(1 - D(G(z))); (2) update G: maximize log(D(G(z))).

    Returns errD, errG, D(x), D(G(z)) before and after D's step, as the original prints them.
    As in the original, D's gradient on the real batch is taken (and D(x)'s activations freed)
    before the generator runs; the generator's tape then records ``fake`` and D's pass over it.
    The two gradients of D are summed, as the original's two ``backward`` calls accumulate them.
    """
    batch_size = real_cpu.shape[0]
    label_real = tg.full((batch_size,), real_label, dtype=real_cpu.dtype)
    label_fake = tg.full((batch_size,), fake_label, dtype=real_cpu.dtype)
    # train with real
    with tg.Tape(watch_parameters=False) as tape_d:
        tape_d.watch(netD)
        output = netD(real_cpu)
        errD_real = criterion(output, label_real)
    D_x = output.mean().item()
    grads_d = tape_d.gradient(errD_real, netD)
    with tg.Tape(watch_parameters=False) as tape_g:
        tape_g.watch(netG)
        fake = netG(noise)
        # train with fake
        with tg.Tape(watch_parameters=False) as tape_d:
            tape_d.watch(netD)
            output = netD(fake.detach())
            errD_fake = criterion(output, label_fake)
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step(grads_d + tape_d.gradient(errD_fake, netD))
        # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label_real)
        D_G_z2 = output.mean().item()
    optimizerG.step(tape_g.gradient(errG, netG))
    return errD.item(), errG.item(), D_x, D_G_z1, D_G_z2


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="tapegrad port of the PyTorch DCGAN example")
    parser.add_argument("--n-images", type=int, default=2048, help="size of the generated set")
    parser.add_argument("--batch-size", "--batchSize", dest="batchSize", type=int, default=64,
                        help="input batch size")
    parser.add_argument("--nz", type=int, default=100, help="size of the latent z vector")
    parser.add_argument("--ngf", type=int, default=64, help="number of generator filters")
    parser.add_argument("--ndf", type=int, default=64, help="number of discriminator filters")
    parser.add_argument("--niter", type=int, default=25, help="number of epochs to train for")
    parser.add_argument("--steps", type=int, default=None,
                        help="stop after this many batches in all (default: all epochs)")
    parser.add_argument("--lr", type=float, default=0.0002, help="learning rate, default=0.0002")
    parser.add_argument("--beta1", type=float, default=0.5, help="beta1 for adam. default=0.5")
    parser.add_argument("--dry-run", action="store_true", help="check a single training cycle works")
    parser.add_argument("--outf", default="runs/dcgan", help="folder for images and checkpoints")
    parser.add_argument("--manualSeed", type=int, help="manual seed")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--small", action="store_true",
                        help="a few seconds: 10 batches of 16, ngf = ndf = 16, 256 images")
    opt = parser.parse_args(argv)
    if opt.small:
        opt.steps = 10 if opt.steps is None else opt.steps
        opt.batchSize, opt.ngf, opt.ndf, opt.n_images = 16, 16, 16, 256
    return opt


def main(argv=None) -> dict:
    from tqdm.auto import tqdm

    opt = parse_args(argv)
    os.makedirs(opt.outf, exist_ok=True)
    if opt.manualSeed is None:
        opt.manualSeed = random.randint(1, 10000)
    print("Random Seed: ", opt.manualSeed)
    random.seed(opt.manualSeed)
    tg.manual_seed(opt.manualSeed)

    dataset = tg.data.TensorDataset(generated_images(opt.n_images, 64, seed=opt.manualSeed))
    dataloader = tg.data.DataLoader(dataset, batch_size=opt.batchSize, shuffle=True)
    nz, nc = opt.nz, 3

    netG = Generator(nz, opt.ngf, nc)
    netG.apply(weights_init)
    netD = Discriminator(opt.ndf, nc)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = tg.randn(opt.batchSize, nz, 1, 1)

    # setup optimizer
    optimizerD = tg.optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = tg.optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    if opt.dry_run:
        opt.niter = 1
    total = opt.niter * len(dataloader)
    if opt.steps is not None:
        total = min(total, opt.steps)
    bar = tqdm(total=total, desc="dcgan", unit="batch", disable=opt.quiet)
    history: list[tuple[float, float]] = []
    for epoch in range(opt.niter):
        for i, data in enumerate(dataloader, 0):
            real_cpu = data[0]
            noise = tg.randn(real_cpu.shape[0], nz, 1, 1)
            errD, errG, D_x, D_G_z1, D_G_z2 = train_step(
                netD, netG, optimizerD, optimizerG, criterion, real_cpu, noise)
            history.append((errD, errG))
            bar.update(1)
            bar.set_postfix(epoch=epoch, Loss_D=f"{errD:.4f}", Loss_G=f"{errG:.4f}",
                            D_x=f"{D_x:.4f}", D_G_z=f"{D_G_z1:.4f}/{D_G_z2:.4f}")
            if i % 100 == 0:
                save_image(real_cpu.numpy(), f"{opt.outf}/real_samples.png")
                with tg.no_grad():
                    fake = netG(fixed_noise)
                save_image(fake.numpy(), f"{opt.outf}/fake_samples_epoch_{epoch:03d}.png")
            if opt.dry_run or len(history) >= total:
                break
        # do checkpointing
        tg.save(netG.state_dict(), f"{opt.outf}/netG_epoch_{epoch}.safetensors")
        tg.save(netD.state_dict(), f"{opt.outf}/netD_epoch_{epoch}.safetensors")
        if opt.dry_run or len(history) >= total:
            break
    bar.close()
    with tg.no_grad():
        fake = netG(fixed_noise)
    save_image(fake.numpy(), f"{opt.outf}/fake_samples_final.png")
    return {"steps": len(history), "first_loss_D": history[0][0],
            "first_loss_G": history[0][1], "last_loss_D": history[-1][0],
            "last_loss_G": history[-1][1]}


if __name__ == "__main__":
    print(main())
