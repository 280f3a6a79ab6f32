"""The tapegrad ports of pytorch/examples beside their PyTorch originals: same data, same steps.

    python benchmarks/ports.py                      # mnist and dcgan (ngf = ndf = 64)
    python benchmarks/ports.py --only dcgan --ngf 16 --rounds 7

examples/mnist.py runs against benchmarks/mnist_torch.py (the original's `train()` over the same
batches), examples/dcgan.py against benchmarks/dcgan_torch.py (the original's loop body on the
same real batches and noise). Both start from the same weights (the original's initialisation,
copied into the port). Rounds alternate between the two (the order rotates); each round runs
``--steps`` training steps; the ratio is the median over rounds of PyTorch's time over
tapegrad's in the same round (above 1: the port is faster). PyTorch gets as many threads as
numpy's BLAS.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import dcgan_torch  # noqa: E402
import mnist_torch  # noqa: E402
import suite  # noqa: E402 - its SETTLE pause
import workloads as W  # noqa: E402


def copy_weights(src: Any, dst: Any) -> None:
    """A torch module's state_dict into its tapegrad twin (same names)."""
    dst.load_state_dict({k: v.detach().numpy().copy() for k, v in src.state_dict().items()})


def mnist_pair(steps: int, batch_size: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(port, original): each runs its own ``train()`` over the same ``steps`` batches."""
    tg, torch = W._tg(), W._torch()
    mn = mnist_torch.port("mnist")
    x, y, _, _ = mn.mnist_like()
    reps = -(-steps * batch_size // len(y))
    x, y = np.concatenate([x] * reps)[: steps * batch_size], np.concatenate([y] * reps)[
        : steps * batch_size]
    torch.manual_seed(1)
    t_model = mnist_torch.Net()
    model = mn.Net()
    copy_weights(t_model, model)
    t_opt = torch.optim.Adadelta(t_model.parameters(), lr=1.0)
    opt = tg.optim.Adadelta(model.parameters(), lr=1.0)
    args = SimpleNamespace(log_interval=10**9, dry_run=False, steps=None)
    loader = tg.data.DataLoader(tg.data.TensorDataset(x, y), batch_size=batch_size)
    t_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
        batch_size=batch_size)
    return (lambda: mn.train(args, model, loader, opt, 1),
            lambda: mnist_torch.train(args, t_model, "cpu", t_loader, t_opt, 1))


def dcgan_pair(steps: int, batch_size: int, ngf: int, ndf: int,
               nz: int = 100) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(port, original): each runs its ``train_step`` on the same real batches and noise."""
    tg, torch = W._tg(), W._torch()
    dc = mnist_torch.port("dcgan")
    dcgan_torch.nz, dcgan_torch.ngf, dcgan_torch.ndf = nz, ngf, ndf
    torch.manual_seed(1)
    t_g, t_d = dcgan_torch.Generator(1), dcgan_torch.Discriminator(1)
    t_g.apply(dcgan_torch.weights_init)
    t_d.apply(dcgan_torch.weights_init)
    net_g, net_d = dc.Generator(nz, ngf, 3), dc.Discriminator(ndf, 3)
    copy_weights(t_g, net_g)
    copy_weights(t_d, net_d)
    real = dc.generated_images(steps * batch_size, 64).reshape(steps, batch_size, 3, 64, 64)
    noise = np.random.default_rng(0).standard_normal((steps, batch_size, nz, 1, 1)).astype(
        np.float32)

    def adam(params: Any, lib: Any) -> Any:
        return lib.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))

    t_opts = (adam(t_d.parameters(), torch), adam(t_g.parameters(), torch))
    opts = (adam(net_d.parameters(), tg), adam(net_g.parameters(), tg))
    t_crit, crit = torch.nn.BCELoss(), tg.nn.BCELoss()
    t_batches = [(torch.from_numpy(r), torch.from_numpy(z)) for r, z in zip(real, noise,
                                                                            strict=True)]
    batches = [(tg.tensor(r), tg.tensor(z)) for r, z in zip(real, noise, strict=True)]

    def port() -> None:
        for r, z in batches:
            dc.train_step(net_d, net_g, *opts, crit, r, z)

    def original() -> None:
        for r, z in t_batches:
            dcgan_torch.train_step(t_d, t_g, *t_opts, t_crit, r, z)

    return port, original


def time_pair(port: Callable[[], Any], original: Callable[[], Any], rounds: int) -> dict:
    """Seconds per round of each, rounds alternating; the paired ratio (original over port)."""
    port()  # warm up: JIT compilation, allocator, oneDNN's kernel choice
    original()
    times: dict[str, list[float]] = {"tapegrad": [], "torch": []}
    fns = {"tapegrad": port, "torch": original}
    order = list(fns)
    for r in range(rounds):
        for name in order[r % 2:] + order[:r % 2]:
            time.sleep(suite.SETTLE)  # the other library's worker threads stop spinning first
            fns[name]()  # one round untimed: the first after the pause runs slower
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    ratio = statistics.median(t / p for t, p in zip(times["torch"], times["tapegrad"],
                                                    strict=True))
    return {"tapegrad_s": statistics.median(times["tapegrad"]),
            "torch_s": statistics.median(times["torch"]), "ratio": ratio, "rounds": rounds}


def main(argv: list[str] | None = None) -> dict[str, dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="mnist, dcgan or both (comma-separated)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="training steps per round")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--ngf", type=int, default=64, help="dcgan generator width (original: 64)")
    ap.add_argument("--ndf", type=int, default=64, help="dcgan discriminator width (original: 64)")
    args = ap.parse_args(argv)
    which = args.only.split(",") if args.only else ["mnist", "dcgan"]
    out = {}
    for name in which:
        if name == "mnist":
            pair = mnist_pair(args.steps, args.batch_size)
            label = f"mnist, batch {args.batch_size}"
        elif name == "dcgan":
            pair = dcgan_pair(args.steps, args.batch_size, args.ngf, args.ndf)
            label = f"dcgan, batch {args.batch_size}, ngf {args.ngf}, ndf {args.ndf}"
        else:
            raise SystemExit(f"ports.py: unknown example {name!r}; known: mnist, dcgan")
        out[name] = r = {"label": label, **time_pair(*pair, args.rounds)}
        print(f"{label}: tapegrad {1e3 * r['tapegrad_s'] / args.steps:.1f} ms/step, PyTorch "
              f"{1e3 * r['torch_s'] / args.steps:.1f} ms/step, {r['ratio']:.2f}x "
              f"(median of {args.rounds} rounds of {args.steps} steps)", flush=True)
    return out


if __name__ == "__main__":
    main()
