"""pytorch/examples' `dcgan/main.py` (commit 77f55b9), the timing twin of examples/dcgan.py.

    python benchmarks/dcgan_torch.py --steps 20 --batchSize 16 --ngf 16 --ndf 16

Adapted only where it must be to run here on the same data as the port, and to be importable:
the dataset is examples/dcgan.py's `generated_images()` in a TensorDataset (no torchvision, no
download; `--dataset` is gone), images are written with the port's `save_image` (torchvision's
is not installed), the script body is in `main()` (so that importing the module runs nothing),
the loop body is `train_step()` with the noise drawn by the caller (so that benchmarks/ports.py
and the tests can feed both frameworks the same batch), `--steps` stops after that many batches,
`--workers` defaults to 0 (the data is in memory), CPU only. The networks read the module's
`nz`, `ngf`, `ndf`, `nc`, as in the original.
"""

# ruff: noqa: UP008, UP031 - the original's code, kept as written there
import argparse
import os
import random

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data
from mnist_torch import port

nz, ngf, ndf, nc = 100, 64, 64, 3  # set from the arguments by main(), as the original's globals


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(     nz, ngf * 8, 4, 1, 0, bias=False),
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
            nn.ConvTranspose2d(ngf * 2,     ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(    ngf,      nc, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):
        output = self.main(input)
        return output


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.ngpu = ngpu
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
            nn.Sigmoid()
        )

    def forward(self, input):
        output = self.main(input)

        return output.view(-1, 1).squeeze(1)


real_label = 1
fake_label = 0


def train_step(netD, netG, optimizerD, optimizerG, criterion, real_cpu, noise, device="cpu"):
    ############################
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    ###########################
    # train with real
    netD.zero_grad()
    batch_size = real_cpu.size(0)
    label = torch.full((batch_size,), real_label,
                       dtype=real_cpu.dtype, device=device)

    output = netD(real_cpu)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean().item()

    # train with fake
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean().item()
    errD = errD_real + errD_fake
    optimizerD.step()

    ############################
    # (2) Update G network: maximize log(D(G(z)))
    ###########################
    netG.zero_grad()
    label.fill_(real_label)  # fake labels are real for generator cost
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    return errD.item(), errG.item(), D_x, D_G_z1, D_G_z2


def main():
    global nz, ngf, ndf
    parser = argparse.ArgumentParser()
    parser.add_argument('--n-images', type=int, default=2048, help='size of the generated set')
    parser.add_argument('--workers', type=int, help='number of data loading workers', default=0)
    parser.add_argument('--batchSize', '--batch-size', type=int, default=64, help='input batch size')
    parser.add_argument('--nz', type=int, default=100, help='size of the latent z vector')
    parser.add_argument('--ngf', type=int, default=64)
    parser.add_argument('--ndf', type=int, default=64)
    parser.add_argument('--niter', type=int, default=25, help='number of epochs to train for')
    parser.add_argument('--steps', type=int, default=None, help='stop after this many batches')
    parser.add_argument('--lr', type=float, default=0.0002, help='learning rate, default=0.0002')
    parser.add_argument('--beta1', type=float, default=0.5, help='beta1 for adam. default=0.5')
    parser.add_argument('--dry-run', action='store_true', help='check a single training cycle works')
    parser.add_argument('--ngpu', type=int, default=1, help='number of GPUs to use')
    parser.add_argument('--outf', default='runs/dcgan_torch', help='folder to output images and model checkpoints')
    parser.add_argument('--manualSeed', type=int, help='manual seed')

    opt = parser.parse_args()
    print(opt)

    try:
        os.makedirs(opt.outf)
    except OSError:
        pass

    if opt.manualSeed is None:
        opt.manualSeed = random.randint(1, 10000)
    print("Random Seed: ", opt.manualSeed)
    random.seed(opt.manualSeed)
    torch.manual_seed(opt.manualSeed)

    device = torch.device("cpu")
    dcgan = port("dcgan")
    dataset = torch.utils.data.TensorDataset(
        torch.from_numpy(dcgan.generated_images(opt.n_images, 64, seed=opt.manualSeed)))
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize,
                                             shuffle=True, num_workers=int(opt.workers))

    ngpu = int(opt.ngpu)
    nz = int(opt.nz)
    ngf = int(opt.ngf)
    ndf = int(opt.ndf)

    netG = Generator(ngpu).to(device)
    netG.apply(weights_init)
    print(netG)
    netD = Discriminator(ngpu).to(device)
    netD.apply(weights_init)
    print(netD)

    criterion = nn.BCELoss()

    fixed_noise = torch.randn(opt.batchSize, nz, 1, 1, device=device)

    # setup optimizer
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    if opt.dry_run:
        opt.niter = 1

    done = 0
    for epoch in range(opt.niter):
        for i, data in enumerate(dataloader, 0):
            real_cpu = data[0].to(device)
            noise = torch.randn(real_cpu.size(0), nz, 1, 1, device=device)
            errD, errG, D_x, D_G_z1, D_G_z2 = train_step(
                netD, netG, optimizerD, optimizerG, criterion, real_cpu, noise, device)
            done += 1

            print('[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f'
                  % (epoch, opt.niter, i, len(dataloader),
                     errD, errG, D_x, D_G_z1, D_G_z2))
            if i % 100 == 0:
                dcgan.save_image(real_cpu.numpy(), '%s/real_samples.png' % opt.outf)
                fake = netG(fixed_noise)
                dcgan.save_image(fake.detach().numpy(),
                                 '%s/fake_samples_epoch_%03d.png' % (opt.outf, epoch))

            if opt.dry_run or (opt.steps is not None and done >= opt.steps):
                break
        # do checkpointing
        torch.save(netG.state_dict(), '%s/netG_epoch_%d.pth' % (opt.outf, epoch))
        torch.save(netD.state_dict(), '%s/netD_epoch_%d.pth' % (opt.outf, epoch))
        if opt.dry_run or (opt.steps is not None and done >= opt.steps):
            break


if __name__ == '__main__':
    main()
