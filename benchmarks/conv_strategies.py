"""Every convolution strategy on the layers of the real programs, pass by pass, beside PyTorch.

For each convolution layer of a program (``benchmarks/ports.py``'s full or small size), each of
the three passes (forward, input gradient, weight gradient) runs every strategy of the table
that fits (``_kernels/conv_table.py``), the numpy reference, and PyTorch's own pass (its
``convolution`` / ``convolution_backward``), alternating in every round; the table prints the
median time of each (on one thread the CPU time, as the tuner measures), the fastest strategy,
the one the dispatcher keeps for that key (measured, or the hand thresholds' with
``TAPEGRAD_TUNE=0``) and PyTorch's time over the kept
strategy's (above 1: tapegrad is faster). A transposed convolution's forward is the input
gradient of the conv2d it inverts, its input gradient that conv2d's forward.

    OMP_WAIT_POLICY=passive TAPEGRAD_COMPILE=wait PYTHONPATH=. python \\
        benchmarks/conv_strategies.py --program dcgan --size full --rounds 3
    ... --program siamese_network --match layer4
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ.setdefault("TAPEGRAD_COMPILE", "wait")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tapegrad._kernels import registry  # noqa: E402
from tapegrad.ops import _conv as fc  # noqa: E402

# (name, N, C, H, W, O, k, stride, padding, transposed, passes): a transposed layer's shapes
# are those of the conv2d it inverts (input (N, C, H, W) = its output, O its input channels);
# passes: "f" forward, "i" input gradient, "w" weight gradient, as the program needs them


def _dcgan(n: int, w: int) -> list[tuple[Any, ...]]:
    g = [("G convT nz->8w 1->4", n, 8 * w, 4, 4, 100, 4, 1, 0, True, "fw")]
    for a, b, s in ((8, 4, 4), (4, 2, 8), (2, 1, 16)):
        g.append((f"G convT {a}w->{b}w {s}->{2 * s}", n, b * w, 2 * s, 2 * s, a * w, 4, 2, 1,
                  True, "fiw"))
    g.append(("G convT w->3 32->64", n, 3, 64, 64, w, 4, 2, 1, True, "fiw"))
    d = [("D conv 3->w 64->32", n, 3, 64, 64, w, 4, 2, 1, False, "fiw")]
    for a, b, s in ((1, 2, 32), (2, 4, 16), (4, 8, 8)):
        d.append((f"D conv {a}w->{b}w {s}->{s // 2}", n, a * w, s, s, b * w, 4, 2, 1, False,
                  "fiw"))
    d.append(("D conv 8w->1 4->1", n, 8 * w, 4, 4, 1, 4, 1, 0, False, "fiw"))
    return g + d


def _siamese(n: int, side: int) -> list[tuple[Any, ...]]:
    s = (side + 1) // 2  # after conv1 (7x7 stride 2 padded 3)
    s = (s + 1) // 2  # after the max pool (3x3 stride 2 padded 1)
    out = [("conv1 1->64 7x7 s2", n, 1, side, side, 64, 7, 2, 3, False, "fw")]
    c = 64
    for i, o in enumerate((64, 128, 256, 512)):
        if o != c:
            out.append((f"layer{i + 1} {c}->{o} 3x3 s2 {s}", n, c, s, s, o, 3, 2, 1, False,
                        "fiw"))
            out.append((f"layer{i + 1} down {c}->{o} 1x1 s2 {s}", n, c, s, s, o, 1, 2, 0,
                        False, "fiw"))
            s = (s + 1) // 2
        out.append((f"layer{i + 1} {o}->{o} 3x3 {s}", n, o, s, s, o, 3, 1, 1, False, "fiw"))
        c = o
    return out


def _style(n: int, side: int) -> list[tuple[Any, ...]]:
    s2, s4 = side // 2, side // 4
    net = [  # TransformerNet: reflection padding outside the convolution (padding 0 here)
        ("T conv 3->32 9x9", n, 3, side + 8, side + 8, 32, 9, 1, 0, False, "fw"),
        ("T conv 32->64 3x3 s2", n, 32, side + 2, side + 2, 64, 3, 2, 0, False, "fiw"),
        ("T conv 64->128 3x3 s2", n, 64, s2 + 2, s2 + 2, 128, 3, 2, 0, False, "fiw"),
        ("T res 128->128 3x3", n, 128, s4 + 2, s4 + 2, 128, 3, 1, 0, False, "fiw"),
        ("T up 128->64 3x3", n, 128, s2 + 2, s2 + 2, 64, 3, 1, 0, False, "fiw"),
        ("T up 64->32 3x3", n, 64, side + 2, side + 2, 32, 3, 1, 0, False, "fiw"),
        ("T conv 32->3 9x9", n, 32, side + 8, side + 8, 3, 9, 1, 0, False, "fiw"),
    ]
    vgg = []  # VGG-16 to relu4_3, frozen: the content pass needs input gradients only
    c, s = 3, side
    for block, (o, reps) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3))):
        for r in range(reps):
            vgg.append((f"VGG {block + 1}.{r + 1} {c}->{o} {s}", n, c, s, s, o, 3, 1, 1, False,
                        "fi"))  # the content pass reaches the image: input gradients
            c = o
        s //= 2
    return net + vgg


def _mnist(n: int) -> list[tuple[Any, ...]]:
    return [("conv1 1->32 3x3 28", n, 1, 28, 28, 32, 3, 1, 0, False, "fw"),
            ("conv2 32->64 3x3 26", n, 32, 26, 26, 64, 3, 1, 0, False, "fiw")]


def _clip(n: int) -> list[tuple[Any, ...]]:
    """The image side of make bench's (e) (examples/multimodal.py's CLIP on 8x8 images)."""
    return [("conv1 1->16 3x3 p1 8", n, 1, 8, 8, 16, 3, 1, 1, False, "fw"),
            ("conv2 16->32 3x3 p1 8", n, 16, 8, 8, 32, 3, 1, 1, False, "fiw")]


PROGRAMS: dict[str, dict[str, Callable[[], list[tuple[Any, ...]]]]] = {
    "clip": {"full": lambda: _clip(128), "small": lambda: _clip(32)},
    "mnist": {"full": lambda: _mnist(64), "small": lambda: _mnist(16)},
    "dcgan": {"full": lambda: _dcgan(64, 64), "small": lambda: _dcgan(16, 16)},
    "siamese_network": {"full": lambda: _siamese(64, 28), "small": lambda: _siamese(16, 8)},
    "fast_neural_style": {"full": lambda: _style(4, 256), "small": lambda: _style(2, 64)},
}


def _geom(n: int, c: int, h: int, w: int, k: int, s: int, p: int) -> fc.Geom:
    ho, wo = ((v + 2 * p - k) // s + 1 for v in (h, w))
    return fc.Geom((n, c, h, w), (k, k), (s, s), ((p, p), (p, p)), (1, 1), (ho, wo))


def _passes(layer: tuple[Any, ...], dtype: Any) -> list[tuple[str, str, tuple, Callable, Any]]:
    """(label, op, args, the reference, PyTorch's pass) for each pass the program runs."""
    name, n, c, h, w, o, k, s, p, transposed, which = layer
    rng = np.random.default_rng(0)
    geom = _geom(n, c, h, w, k, s, p)
    ho, wo = geom.out_hw
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(dtype)
    g = rng.standard_normal((n, o, ho, wo)).astype(dtype)
    tx, tw, tg_ = (torch.from_numpy(a) for a in (x, wt, g))
    conv = dict(stride=[s, s], padding=[p, p], dilation=[1, 1])

    def t_fwd() -> Any:
        return torch.ops.aten.convolution(tx, tw, None, transposed=False,
                                          output_padding=[0, 0], groups=1, **conv)

    def t_back(mask: list[bool]) -> Callable[[], Any]:
        return lambda: torch.ops.aten.convolution_backward(
            tg_, tx, tw, None, transposed=False, output_padding=[0, 0], groups=1,
            output_mask=mask, **conv)

    t_in, t_w = t_back([True, False, False]), t_back([False, True, False])
    # a transposed layer: its forward is conv2d's input gradient, its input gradient conv2d
    fwd = ("input grad", t_in) if transposed else ("forward", t_fwd)
    inp = ("forward", t_fwd) if transposed else ("input grad", t_in)
    todo = {"f": fwd, "i": inp, "w": ("weight grad", t_w)}
    out = []
    for flag in which:
        label, theirs = todo[flag]
        if label == "forward":
            out.append((label, "conv2d", (x, wt, None, geom, 1), fc._conv2d_ref, theirs))
        elif label == "input grad":
            out.append((label, "conv2d_input_grad", (g, wt, geom, 1), fc._input_grad_ref,
                        theirs))
        else:
            out.append((label, "conv2d_weight_grad", (g, x, geom, 1, wt.shape),
                        fc._weight_grad_ref, theirs))
    return out


def _clock() -> Callable[[], float]:
    """On one thread the process's CPU time (as the tuner measures: the time other programs
    hold the core does not count), else the wall clock."""
    one = os.environ.get("OPENBLAS_NUM_THREADS", "") == "1"
    return time.process_time if one else time.perf_counter


def _time(f: Callable[[], Any]) -> float:
    clock = _clock()
    t0 = clock()
    f()
    return clock() - t0


def measure(layer: tuple[Any, ...], rounds: int, dtype: Any) -> list[str]:
    rows = []
    for label, op, args, ref, theirs in _passes(layer, dtype):
        impls = [i for i in registry.implementations(op) if i.fits(*args)]
        cands: dict[str, Callable[[], Any]] = {i.name: (lambda i=i: i.run(*args)) for i in impls}
        cands["reference"] = lambda ref=ref: ref(*args)
        cands["torch"] = theirs
        registry.dispatch(op, ref, *args)  # the kept choice for this key (measured on first use)
        kept = registry._CHOSEN[registry.key(op, args)][0]
        for f in cands.values():
            f()  # compile or load
        times: dict[str, list[float]] = {k: [] for k in cands}
        names = list(cands)
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                times[k].append(_time(cands[k]))
        med = {k: statistics.median(v) for k, v in times.items()}
        ours = {k: v for k, v in med.items() if k != "torch"}
        best = min(ours, key=ours.__getitem__)
        cells = "  ".join(f"{k} {1e3 * v:.1f}" for k, v in sorted(ours.items(),
                                                                   key=lambda kv: kv[1]))
        rows.append(f"{layer[0]:28s} {label:11s} torch {1e3 * med['torch']:8.1f} ms | kept "
                    f"{kept} {med['torch'] / med[kept]:.2f}x | best {best} "
                    f"{med['torch'] / med[best]:.2f}x | {cells}")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", choices=list(PROGRAMS), required=True)
    ap.add_argument("--size", choices=("small", "full"), default="full")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--match", default="", help="only layers whose name contains this")
    ap.add_argument("--float64", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OPENBLAS_NUM_THREADS", "1")))
    dtype = np.float64 if args.float64 else np.float32
    for layer in PROGRAMS[args.program][args.size]():
        if args.match in layer[0]:
            measure(layer, args.rounds, dtype)


if __name__ == "__main__":
    main()
