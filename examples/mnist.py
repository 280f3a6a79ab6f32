"""pytorch/examples' `mnist/main.py`, ported to tapegrad: same Net, loss, optimizer, schedule.

    python examples/mnist.py                      # 14 epochs, as the original
    python examples/mnist.py --small              # one epoch of 20 batches: a few seconds

The network (conv 32 - conv 64 - max pool - dropout 0.25 - fc 128 - dropout 0.5 - fc 10,
log_softmax and NLL), Adadelta with lr 1.0, StepLR(step_size=1, gamma=0.7) per epoch, batch 64,
test batch 1000, seed 1 and the unshuffled CPU loader are the original's. The data is not
MNIST (nothing is downloaded): scikit-learn's bundled 8x8 handwritten digits (1797 images),
each upscaled to a 20x20 digit centred in a 28x28 frame as MNIST's are, normalised with
MNIST's mean and std (0.1307, 0.3081); 80% train, 20% test. `--steps` stops training after that
many batches in all. Writes mnist_cnn.safetensors (with --save-model) and loss.png (the training
loss per logged batch and the test loss per epoch) into --out (runs/mnist).

The PyTorch original, reading the same data, is benchmarks/mnist_torch.py;
benchmarks/ports.py times the two side by side.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: tg.Tensor) -> tg.Tensor:  # (B, 1, 28, 28)
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)  # (B, 64, 12, 12)
        x = self.dropout1(x)
        x = tg.flatten(x, 1)  # (B, 9216)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


# -- data: MNIST-shaped digits that ship with scikit-learn --------------------------------------
MEAN, STD = 0.1307, 0.3081  # MNIST's, as the original's transforms.Normalize


def _upscale(img8: np.ndarray, size: int = 20) -> np.ndarray:
    """Bilinear resize of (N, 8, 8) images to (N, size, size)."""
    src = (np.arange(size) + 0.5) * 8 / size - 0.5
    i0 = np.clip(np.floor(src).astype(int), 0, 7)
    i1 = np.clip(i0 + 1, 0, 7)
    f = np.clip(src - i0, 0.0, 1.0)
    rows = img8[:, i0, :] * (1 - f)[None, :, None] + img8[:, i1, :] * f[None, :, None]
    return rows[:, :, i0] * (1 - f) + rows[:, :, i1] * f


def mnist_like(test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(train images, train labels, test images, test labels): float32 (N, 1, 28, 28) normalised
    as MNIST's loader normalises, int64 labels. The split is a fixed permutation of ``seed``."""
    images, labels = tg.data.load_digits(return_arrays=True)  # (1797, 1, 8, 8) in [0, 1]
    big = _upscale(np.asarray(images, np.float64)[:, 0])  # (N, 20, 20)
    frame = np.zeros((len(big), 1, 28, 28))
    frame[:, 0, 4:24, 4:24] = np.clip(big, 0.0, 1.0)  # MNIST: 20x20 digit, 4-pixel margin
    x = ((frame - MEAN) / STD).astype(np.float32)
    y = np.asarray(labels, np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


# -- training, as the original's train() and test() ---------------------------------------------
def train(args, model, train_loader, optimizer, epoch, history=None, bar=None) -> int:
    """One epoch (or until ``args.steps`` batches in all); returns the batches run."""
    model.train()
    done = 0
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.steps is not None and history is not None and history["seen"] >= args.steps:
            break
        with tg.Tape() as tape:  # replaces optimizer.zero_grad() and loss.backward()
            output = model(data)
            loss = F.nll_loss(output, target)
        optimizer.step(tape.gradient(loss, model))
        done += 1
        if history is not None:
            history["seen"] += 1
        if bar is not None:
            bar.update(1)
        if batch_idx % args.log_interval == 0:
            if history is not None:
                history["train"].append((history["seen"], loss.item()))
            if bar is not None:
                bar.set_postfix(epoch=epoch, loss=f"{loss.item():.4f}")
            if args.dry_run:
                break
    return done


def test(model, test_loader) -> tuple[float, float]:
    """Average NLL and accuracy on the test set."""
    model.eval()
    test_loss = 0.0
    correct = 0
    n = 0
    with tg.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()  # sum up batch loss
            pred = output.numpy().argmax(axis=1)  # the index of the max log-probability
            correct += int((pred == target.numpy()).sum())
            n += len(pred)
    test_loss /= n
    print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{n} "
          f"({100.0 * correct / n:.0f}%)\n")
    return test_loss, correct / n


def loaders(args) -> tuple[tg.data.DataLoader, tg.data.DataLoader]:
    x, y, xt, yt = mnist_like()
    train_loader = tg.data.DataLoader(tg.data.TensorDataset(x, y), batch_size=args.batch_size)
    test_loader = tg.data.DataLoader(tg.data.TensorDataset(xt, yt),
                                     batch_size=args.test_batch_size)
    return train_loader, test_loader


def plot_loss(history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    if history["train"]:
        s, v = zip(*history["train"], strict=True)
        ax.plot(s, v, label="train (logged batches)")
    if history["test"]:
        s, v = zip(*history["test"], strict=True)
        ax.plot(s, v, "o-", label="test (per epoch)")
    ax.set_xlabel("batch")
    ax.set_ylabel("NLL")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("tapegrad port of pytorch/examples mnist")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="tapegrad port of the PyTorch MNIST example")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N",
                        help="input batch size for training (default: 64)")
    parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N",
                        help="input batch size for testing (default: 1000)")
    parser.add_argument("--epochs", type=int, default=14, metavar="N",
                        help="number of epochs to train (default: 14)")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="stop after N training batches in all (default: all epochs)")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR",
                        help="learning rate (default: 1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M",
                        help="Learning rate step gamma (default: 0.7)")
    parser.add_argument("--dry-run", action="store_true", help="quickly check a single pass")
    parser.add_argument("--seed", type=int, default=1, metavar="S",
                        help="random seed (default: 1)")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N",
                        help="how many batches to wait before logging training status")
    parser.add_argument("--save-model", action="store_true", help="For Saving the current Model")
    parser.add_argument("--out", default="runs/mnist", help="folder for loss.png and the model")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--small", action="store_true",
                        help="a few seconds: 1 epoch of at most 20 batches")
    args = parser.parse_args(argv)
    if args.small:
        args.epochs, args.steps = 1, 20 if args.steps is None else args.steps
    return args


def main(argv=None) -> dict:
    from tqdm.auto import tqdm

    args = parse_args(argv)
    tg.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    train_loader, test_loader = loaders(args)

    model = Net()
    optimizer = tg.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = tg.optim.StepLR(optimizer, step_size=1, gamma=args.gamma)
    history: dict = {"seen": 0, "train": [], "test": []}
    total = args.epochs * len(train_loader)
    if args.steps is not None:
        total = min(total, args.steps)
    bar = tqdm(total=total, desc="mnist", unit="batch", disable=args.quiet)
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch, history, bar)
        test_loss, accuracy = test(model, test_loader)
        history["test"].append((history["seen"], test_loss))
        scheduler.step()
        if args.steps is not None and history["seen"] >= args.steps:
            break
    bar.close()

    if args.save_model:
        tg.save(model.state_dict(), os.path.join(args.out, "mnist_cnn.safetensors"))
    plot_loss(history, os.path.join(args.out, "loss.png"))
    return {"test_loss": history["test"][-1][1], "accuracy": accuracy,
            "steps": history["seen"], "first_loss": history["train"][0][1]}


if __name__ == "__main__":
    print(main())
