"""Compile the kernels up front: ``python -m tapegrad warmup``.

Kernels otherwise compile in the background on first use while the numpy references run
(``_kernels/runtime``). Paying once before the first run suits a Docker image step, a cluster's
shared install or a benchmark: ``warmup()`` runs a training step of each common layer family in
float32 with ``TAPEGRAD_COMPILE=wait``, so every kernel those steps meet is compiled into the
cache, with a progress bar; ``warmup(script=...)`` runs a program of the user's instead (one short
run of it covers what its model needs).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable

__all__ = ["warmup", "WORKLOADS"]


def _step(model: object, *inputs: object, loss: Callable[..., object] | None = None) -> None:
    import tapegrad as tg  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set

    opt = tg.optim.AdamW(model.parameters(), lr=1e-3)  # type: ignore[attr-defined]
    for _ in range(2):
        with tg.Tape() as tape:
            out = model(*inputs)  # type: ignore[operator]
            value = loss(out) if loss is not None else (out * out).mean()
        opt.step(tape.gradient(value, model))


def _mlp() -> None:
    import tapegrad as tg  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set
    from tapegrad import nn  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set
    from tapegrad.nn import functional as F  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set

    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 256),
                          nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 10))
    x, y = tg.randn(128, 64), tg.randint(0, 10, (128,))
    _step(model, x, loss=lambda out: F.cross_entropy(out, y))
    _step(model, x, loss=lambda out: F.binary_cross_entropy_with_logits(
        out, tg.rand(128, 10)))
    _step(model, x, loss=lambda out: F.mse_loss(tg.sigmoid(out), tg.rand(128, 10)))


def _cnn() -> None:
    import tapegrad as tg  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set
    from tapegrad import nn  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set
    from tapegrad.nn import functional as F  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set

    for c in (1, 3):
        model = nn.Sequential(
            nn.Conv2d(c, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(128, 10))
        x, y = tg.randn(8, c, 16, 16), tg.randint(0, 10, (8,))
        _step(model, x, loss=lambda out, y=y: F.cross_entropy(out, y))


def _gan() -> None:
    import tapegrad as tg  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set
    from tapegrad import nn  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set

    g = nn.Sequential(
        nn.ConvTranspose2d(16, 64, 4, 1, 0, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.ConvTranspose2d(32, 3, 4, 2, 1, bias=False), nn.Tanh())
    d = nn.Sequential(
        nn.Conv2d(3, 32, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(32, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
        nn.Conv2d(64, 1, 4, 1, 0, bias=False), nn.Sigmoid())
    _step(nn.Sequential(g, d), tg.randn(8, 16, 1, 1))


def _transformer() -> None:
    import tapegrad as tg  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set
    from tapegrad import nn  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set

    for tokens in (10, 64):
        model = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
        _step(model, tg.randn(8, tokens, 64))
    emb = nn.Embedding(100, 32)
    _step(emb, tg.randint(0, 100, (8, 12)))


WORKLOADS: dict[str, Callable[[], None]] = {
    "MLP (Linear, activations, dropout, layer norm, losses, AdamW)": _mlp,
    "CNN (Conv2d, batch norm, pooling)": _cnn,
    "GAN (ConvTranspose2d, strided Conv2d)": _gan,
    "Transformer (attention, layer norm, GELU, embedding)": _transformer,
}


def warmup(script: str | None = None, args: list[str] | None = None) -> None:
    """Compile the common kernels (or those ``script`` meets when run with ``args``) into the
    cache, waiting for each; prints progress on stderr."""
    os.environ["TAPEGRAD_COMPILE"] = "wait"
    from . import _kernels  # noqa: PLC0415  # lazy: after TAPEGRAD_COMPILE is set

    if _kernels.numba() is None:
        print("tapegrad warmup: numba kernels are off; nothing to compile", file=sys.stderr)
        return
    print(f"tapegrad warmup: compiling into {_kernels.cache_dir()}", file=sys.stderr)
    if script is not None:
        sys.argv = [script, *(args or [])]
        runpy.run_path(script, run_name="__main__")
        return
    try:
        from tqdm.auto import tqdm  # noqa: PLC0415
    except ImportError:  # tqdm is optional: plain lines instead of a bar
        tqdm = None
    items = list(WORKLOADS.items())
    if tqdm is not None:
        bar = tqdm(items, desc="compiling kernels", unit="family", file=sys.stderr)
        for name, run in bar:
            bar.set_postfix_str(name.split(" (")[0])
            run()
    else:
        for i, (name, run) in enumerate(items, 1):
            print(f"[{i}/{len(items)}] {name}", file=sys.stderr)
            run()
    print("tapegrad warmup: done", file=sys.stderr)
