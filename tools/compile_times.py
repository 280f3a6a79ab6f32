"""Compile time of every kernel specialisation a set of workloads triggers, from empty caches.

Runs each workload's first training step (float32) with ``NUMBA_CACHE_DIR`` and
``TAPEGRAD_CACHE_DIR`` set to a fresh temporary folder, so every kernel compiles, and records
numba's compile events: a kernel's own time (the compiles it triggers of the kernels it calls
are counted for those), in the compiling thread's CPU seconds (``time.thread_time``): on a shared machine wall time counts the
other processes' work too (a kernel took 3-6x its CPU time in wall time on the 2-core machine
under a load of 7-10). Prints a table, slowest first, with the optimised LLVM IR's instruction
count, a measure ``tests/test_compile_budget.py`` holds to a budget.

    PYTHONPATH=. python tools/compile_times.py                      # every workload
    PYTHONPATH=. python tools/compile_times.py --only flagship      # multimodal.py --small, a step
    PYTHONPATH=. python tools/compile_times.py --blocked            # the generated conv kernels
    PYTHONPATH=. python tools/compile_times.py --top 15             # the slowest 15
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def llvm_instructions(ir: str) -> int:
    """Instructions in LLVM IR text: the lines inside function bodies that are not labels,
    comments or the closing brace."""
    n, inside = 0, False
    for line in ir.splitlines():
        if line.startswith("define "):
            inside = True
        elif line.startswith("}"):
            inside = False
        elif inside:
            s = line.strip()
            if s and not s.endswith(":") and not s.startswith(";") and ":" not in s.split()[0]:
                n += 1
    return n


# -- workloads: one training step each -------------------------------------------------------
def _step(model: Any, loss_fn: Any, *inputs: Any) -> None:
    import tapegrad as tg  # noqa: PLC0415

    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    with tg.Tape() as tape:
        loss = loss_fn(model(*inputs))
    opt.step(tape.gradient(loss, model))


def conv_linear(batch: int) -> None:
    """A Conv2d + Linear classifier on 28x28 images."""
    import tapegrad as tg  # noqa: PLC0415
    import tapegrad.nn.functional as F  # noqa: PLC0415
    from tapegrad import nn  # noqa: PLC0415

    model = nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3),
                          nn.ReLU(), nn.Flatten(), nn.Linear(32 * 11 * 11, 10))
    x = tg.randn(batch, 1, 28, 28)
    y = tg.tensor(np.arange(batch) % 10)
    _step(model, lambda out: F.cross_entropy(out, y), x)


def transformer(batch: int) -> None:
    """A TransformerEncoderLayer (d_model 64, 4 heads) on sequences of 16."""
    import tapegrad as tg  # noqa: PLC0415
    from tapegrad import nn  # noqa: PLC0415

    model = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.1, batch_first=True)
    _step(model, lambda out: (out * out).mean(), tg.randn(batch, 16, 64))


def dcgan(batch: int) -> None:
    """DCGAN's layers at 64x64 (ngf = ndf = 16): the generator's transposed convolutions and
    the discriminator's strided convolutions, with batch norm."""
    import tapegrad as tg  # noqa: PLC0415
    from tapegrad import nn  # noqa: PLC0415

    g = nn.Sequential(
        nn.ConvTranspose2d(32, 64, 4, 1, 0, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.ConvTranspose2d(32, 16, 4, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.ConvTranspose2d(16, 3, 4, 2, 1, bias=False), nn.Tanh())
    d = nn.Sequential(
        nn.Conv2d(3, 16, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(16, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.LeakyReLU(0.2),
        nn.Conv2d(32, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
        nn.Conv2d(64, 1, 4, 1, 0, bias=False))
    _step(nn.Sequential(g, d), lambda out: (out * out).mean(), tg.randn(batch, 32, 1, 1))


def winograd(batch: int) -> None:
    """3x3 stride-1 layers wide enough for the Winograd and wide blocked paths (128 channels
    at 14x14)."""
    import tapegrad as tg  # noqa: PLC0415
    from tapegrad import nn  # noqa: PLC0415

    model = nn.Sequential(nn.Conv2d(64, 128, 3, 2, 1), nn.ReLU(), nn.Conv2d(128, 128, 3, 1, 1))
    _step(model, lambda out: (out * out).mean(), tg.randn(batch, 64, 28, 28))


def flagship() -> None:
    """examples/multimodal.py --small: its first training step."""
    spec = importlib.util.spec_from_file_location("multimodal", ROOT / "examples/multimodal.py")
    assert spec is not None and spec.loader is not None
    mm = importlib.util.module_from_spec(spec)
    sys.modules["multimodal"] = mm
    spec.loader.exec_module(mm)
    tg = mm.tg
    cfg = mm.Config()
    tg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    images, labels = tg.data.load_digits(return_arrays=True)
    texts = [mm.caption(c, t, rng) for t in mm.TRAIN_TEMPLATES for c in range(10)] + mm.ADJ
    vocab = mm.Vocab(texts)
    model = mm.CLIP(cfg, len(vocab))
    opt = tg.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = tg.optim.OneCycleLR(opt, max_lr=cfg.lr, total_steps=10)
    idx = rng.permutation(len(labels))[: cfg.batch_size]
    y = labels[idx]
    caps = [mm.caption(c, mm.TRAIN_TEMPLATES[0], rng) for c in y]
    ids = np.stack([vocab.encode(s, cfg.max_len) for s in caps])
    with tg.Tape() as tape:
        loss = mm.clip_loss(model(tg.tensor(images[idx]), tg.tensor(ids)), y)
    opt.step(tape.gradient(loss, model).clip_by_global_norm(5.0))
    sched.step()
    loss.item()


WORKLOADS = {
    "flagship": flagship,
    "conv_linear_b1": lambda: conv_linear(1), "conv_linear_b8": lambda: conv_linear(8),
    "transformer_b1": lambda: transformer(1), "transformer_b8": lambda: transformer(8),
    "dcgan_b1": lambda: dcgan(1), "dcgan_b8": lambda: dcgan(8),
    "winograd_b1": lambda: winograd(1), "winograd_b8": lambda: winograd(8),
}


# -- recording ---------------------------------------------------------------------------------
class Recorder:
    """numba's compile events, as (dispatcher, signature, own seconds, workload) rows: a
    compile's own time is its span less the spans of the compiles nested in it."""

    def __init__(self) -> None:
        from numba.core import event  # noqa: PLC0415

        self.rows: list[list[Any]] = []
        self._stack: list[list[Any]] = []
        self.workload = ""
        outer = self

        class Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                outer._stack.append([time.thread_time(), 0.0])

            def on_end(self, ev: Any) -> None:
                t0, nested = outer._stack.pop()
                span = time.thread_time() - t0
                if outer._stack:
                    outer._stack[-1][1] += span
                d = ev.data
                outer.rows.append([d["dispatcher"], d["args"], span - nested, outer.workload])

        self.listener = Listener()
        event.register("numba:compile", self.listener)


def kernel_name(disp: Any) -> str:
    f = disp.py_func
    mod = f.__module__.replace("tapegrad._kernels.", "")
    return f"{mod}.{f.__qualname__}"


def signature_text(args: Any) -> str:
    return ", ".join(str(a) for a in args)


def ir_size(disp: Any, args: Any) -> int | None:
    """Instructions of the optimised LLVM IR of ``disp`` for ``args`` (None when numba cannot
    show it, e.g. a signature it compiled under other types)."""
    try:
        return llvm_instructions(disp.inspect_llvm(tuple(args)))
    except Exception:  # noqa: BLE001 - the table shows a blank
        return None


def blocked() -> None:
    """Every generated conv_blocked kernel for float32, serial and parallel, via its loader."""
    from tapegrad._kernels import conv_blocked as cb  # noqa: PLC0415

    for name in cb._ARGS:
        for par in (False, True):
            cb._kernel(name, np.float32, parallel=par)


def table(rows: list[list[Any]], top: int) -> None:
    rows = sorted(rows, key=lambda r: -r[2])
    total = sum(r[2] for r in rows)
    print(f"{'CPU s':>8} {'IR instr':>9}  kernel [signature] (workload)")
    for r in rows[:top]:
        ins = "" if r[4] is None else r[4]
        print(f"{r[2]:8.2f} {ins:>9}  {r[0]} [{r[1]}] ({r[3]})")
    print(f"{len(rows)} compilations, {total:.1f} s in all")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="these workloads")
    ap.add_argument("--blocked", action="store_true", help="the generated conv kernels only")
    ap.add_argument("--top", type=int, default=1000, help="rows to print")
    ap.add_argument("--keep-cache", action="store_true",
                    help="use the cache folders as set (default: a fresh empty folder)")
    a = ap.parse_args()
    if not (a.keep_cache and os.environ.get("NUMBA_CACHE_DIR")):  # read when kernels load
        # both: TAPEGRAD_CACHE_DIR, when set, comes first (runtime.user_cache_base)
        fresh = tempfile.mkdtemp(prefix="tapegrad-compile-times-")
        os.environ["NUMBA_CACHE_DIR"] = os.environ["TAPEGRAD_CACHE_DIR"] = fresh
    os.environ.setdefault("TAPEGRAD_KERNELS", "numba")
    os.environ.setdefault("TAPEGRAD_COMPILE", "wait")  # compile here, where the events are
    rec = Recorder()
    import tapegrad  # noqa: F401, PLC0415

    runs = {"blocked": blocked} if a.blocked else {k: WORKLOADS[k] for k in a.only or WORKLOADS}
    clock = {}
    for name, fn in runs.items():
        rec.workload = name
        t = time.perf_counter()
        fn()
        clock[name] = time.perf_counter() - t
        print(f"{name}: first step {clock[name]:.1f} s", file=sys.stderr, flush=True)
    rows: dict[tuple[int, str], list[Any]] = {}
    for disp, args, own, wl in rec.rows:
        if not hasattr(disp, "py_func"):
            continue
        key = (id(disp), signature_text(args))
        if key in rows:  # a compile event nested in another for the same function and types
            rows[key][2] += own
        else:
            rows[key] = [kernel_name(disp), key[1], own, wl, ir_size(disp, args)]
    table(list(rows.values()), a.top)
    print("first steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in clock.items()))


if __name__ == "__main__":
    main()
