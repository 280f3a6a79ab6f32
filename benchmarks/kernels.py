"""Per-kernel table: forward+backward ms of each convolution, transposed convolution, pooling,
batch norm, layer norm, softmax / cross-entropy and attention shape that workloads (c), (d), (e),
(h) and (i) run, in tapegrad and in PyTorch, side by side.

    python benchmarks/kernels.py                   # all shapes; the median of 5 rounds
    python benchmarks/kernels.py --only h,i        # some workloads' shapes
    python benchmarks/kernels.py --numpy-reference # also tapegrad with its numpy reference kernels

Each row runs one op forward and backward (a random output gradient, gradients for every float
input and weight) from the same arrays in both frameworks. Rounds alternate between the two (the
order rotates); each round times enough calls to last ``min_time`` seconds; the ratio is the
median over rounds of PyTorch's time over tapegrad's in the same round (above 1: tapegrad is
faster). ``make bench`` (benchmarks/suite.py) prints this table and writes it into BENCHMARKS.md.
The numpy reference is selected in-process by switching the compiled kernels off (as
``TAPEGRAD_KERNELS=numpy`` would for a whole process).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workloads as W  # noqa: E402

KERNEL_WORKLOADS = ("c", "d", "e", "h", "i")


@dataclass
class Kernel:
    """One op at one shape: ``kind`` names the op, ``shapes`` its float inputs (input first),
    ``params`` its keyword arguments."""

    workload: str
    name: str
    kind: str
    shapes: tuple[tuple[int, ...], ...]
    params: dict[str, Any] = field(default_factory=dict)


def _conv(key: str, name: str, x: tuple[int, ...], c_out: int, k: int, stride: int = 1,
          padding: int = 0, transpose: bool = False) -> Kernel:
    w = (x[1], c_out, k, k) if transpose else (c_out, x[1], k, k)
    kind = "conv_transpose2d" if transpose else "conv2d"
    title = f"{name} {x[1]}->{c_out} {k}x{k}" + (f" s{stride}" if stride > 1 else "") + (
        f" p{padding}" if padding else "")
    return Kernel(key, title, kind, (x, w), {"stride": stride, "padding": padding})


def kernel_shapes(keys: tuple[str, ...] = KERNEL_WORKLOADS, tiny: bool = False) -> list[Kernel]:
    """The op shapes of workloads ``keys`` (their batch sizes; ``tiny``: the smoke-test sizes)."""
    out: list[Kernel] = []
    for key in keys:
        d = W.dims(key, tiny)
        if key == "c":
            b, s = d["batch"], d["image"]
            s1 = s - 2
            s2 = s1 // 2 - 2
            out += [_conv("c", "conv1", (b, 1, s, s), 8, 3),
                    _conv("c", "conv2", (b, 8, s1 // 2, s1 // 2), 16, 3),
                    Kernel("c", "max pool 2x2", "max_pool2d", ((b, 8, s1, s1),)),
                    Kernel("c", "max pool 2x2", "max_pool2d", ((b, 16, s2, s2),)),
                    Kernel("c", "cross-entropy, 10 classes", "cross_entropy", ((b, 10),))]
        elif key == "d":
            b, t, m, h = d["batch"], d["seq"], d["d_model"], d["nhead"]
            out += [Kernel("d", f"layer norm {m}", "layer_norm", ((b, t, m),)),
                    Kernel("d", f"attention {h} heads x {m // h}", "attention",
                           ((b, h, t, m // h),) * 3),
                    Kernel("d", f"self-attention {h} x {m // h}, packed q/k/v",
                           "attention_packed", ((b, t, 3, h, m // h),)),
                    Kernel("d", "softmax over keys", "softmax", ((b, h, t, t),))]
        elif key == "e":
            b, t, m, h = d["batch"], d["max_len"], d["text_dim"], d["heads"]
            out += [_conv("e", "conv1", (b, 1, 8, 8), 16, 3, padding=1),
                    _conv("e", "conv2", (b, 16, 8, 8), 32, 3, padding=1),
                    Kernel("e", "max pool 2x2", "max_pool2d", ((b, 32, 8, 8),)),
                    Kernel("e", f"layer norm {m}", "layer_norm", ((b, t, m),)),
                    Kernel("e", f"attention {h} heads x {m // h}", "attention",
                           ((b, h, t, m // h),) * 3),
                    Kernel("e", f"self-attention {h} x {m // h}, packed q/k/v",
                           "attention_packed", ((b, t, 3, h, m // h),)),
                    Kernel("e", f"cross-entropy {b}x{b}, soft targets", "cross_entropy_soft",
                           ((b, b),))]
        elif key == "h":
            b, nz, g, f, nc = d["batch"], d["nz"], d["ngf"], d["ndf"], d["nc"]
            gen, disc = W._dcgan_spec(d)
            size = 1
            for i, (a, c, s, p, bn) in enumerate(gen):
                out.append(_conv("h", f"G convT{i + 1}", (b, a, size, size), c, 4, s, p,
                                 transpose=True))
                size = size * 2 if s == 2 else 4
                if bn:
                    out.append(Kernel("h", f"G batch norm {c}x{size}x{size}", "batch_norm",
                                      ((b, c, size, size),)))
            size = 64
            for i, (a, c, s, p, bn) in enumerate(disc):
                out.append(_conv("h", f"D conv{i + 1}", (b, a, size, size), c, 4, s, p))
                size = size // 2 if s == 2 else 1
                if bn:
                    out.append(Kernel("h", f"D batch norm {c}x{size}x{size}", "batch_norm",
                                      ((b, c, size, size),)))
            out.append(Kernel("h", "binary cross-entropy", "bce", ((b,),)))
            del nz, g, f, nc
        elif key == "i":
            b, c_in, c, s = d["batch"], d["c_in"], d["c_out"], d["image"]
            h = (s + 1) // 2
            out += [_conv("i", "conv 3x3", (b, c_in, s, s), c, 3, 2, 1),
                    _conv("i", "conv 3x3", (b, c, h, h), c, 3, 1, 1),
                    _conv("i", "downsample", (b, c_in, s, s), c, 1, 2, 0),
                    Kernel("i", f"batch norm {c}x{h}x{h}", "batch_norm", ((b, c, h, h),)),
                    Kernel("i", "global average pool", "avg_pool", ((b, c, h, h),)),
                    Kernel("i", "BCE with logits", "bce_logits", ((b,),))]
        else:
            raise KeyError(f"no kernel shapes for workload {key!r}; known: {KERNEL_WORKLOADS}")
    return out


def _op(kind: str, F: Any, args: list[Any], extra: list[Any], params: dict[str, Any]) -> Any:
    """The op in framework ``F`` (tapegrad's or torch's functional namespace)."""
    if kind == "conv2d":
        return F.conv2d(args[0], args[1], **params)
    if kind == "conv_transpose2d":
        return F.conv_transpose2d(args[0], args[1], **params)
    if kind == "max_pool2d":
        return F.max_pool2d(args[0], 2)
    if kind == "avg_pool":
        return F.adaptive_avg_pool2d(args[0], 1)
    if kind == "batch_norm":
        return F.batch_norm(args[0], None, None, args[1], args[2], training=True)
    if kind == "layer_norm":
        return F.layer_norm(args[0], (args[0].shape[-1],), args[1], args[2])
    if kind == "softmax":
        return F.softmax(args[0], dim=-1)
    if kind == "attention":
        return F.scaled_dot_product_attention(*args)
    if kind == "attention_packed":  # one (B, L, 3, H, D) projection, as the layers make it
        if F.__name__.startswith("torch"):
            q, k, v = (t.transpose(1, 2) for t in args[0].unbind(2))
            return F.scaled_dot_product_attention(q, k, v)
        from tapegrad.ops._attention import attention_qkv  # noqa: PLC0415
        return attention_qkv(args[0], None, args[0].shape[-1] ** -0.5)
    if kind in ("cross_entropy", "cross_entropy_soft"):
        return F.cross_entropy(args[0], extra[0])
    if kind == "bce":
        return F.binary_cross_entropy(F.sigmoid(args[0]), extra[0])
    if kind == "bce_logits":
        return F.binary_cross_entropy_with_logits(args[0], extra[0])
    raise KeyError(kind)


def _arrays(k: Kernel) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The differentiable arrays (inputs, then weights) and the fixed ones (targets)."""
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in k.shapes]
    if k.kind.startswith("conv"):
        arrs[1] *= 0.1
    if k.kind in ("batch_norm", "layer_norm"):
        c = k.shapes[0][1] if k.kind == "batch_norm" else k.shapes[0][-1]
        arrs += [np.ones(c, np.float32), np.zeros(c, np.float32)]
    extra: list[np.ndarray] = []
    if k.kind == "cross_entropy":
        extra.append(rng.integers(0, k.shapes[0][1], k.shapes[0][0]).astype(np.int64))
    elif k.kind == "cross_entropy_soft":
        p = rng.random(k.shapes[0]).astype(np.float32)
        extra.append(p / p.sum(1, keepdims=True))
    elif k.kind in ("bce", "bce_logits"):
        extra.append(rng.integers(0, 2, k.shapes[0]).astype(np.float32))
    return arrs, extra


def steps(k: Kernel) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(tapegrad step, PyTorch step): one forward and backward of kernel ``k`` each."""
    tg = W._tg()
    torch = W._torch()
    arrs, extra = _arrays(k)
    tgf = tg.nn.functional
    xs = [tg.tensor(a) for a in arrs]
    ex = [tg.tensor(a) for a in extra]
    ts = [torch.from_numpy(a.copy()).requires_grad_() for a in arrs]
    tex = [torch.from_numpy(a) for a in extra]
    with torch.no_grad():
        shape = tuple(_op(k.kind, torch.nn.functional, ts, tex, k.params).shape)
    cot = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    cot_tg, cot_t = tg.tensor(cot), torch.from_numpy(cot)

    def tg_step() -> Any:
        with tg.Tape(watch_parameters=False) as tape:
            tape.watch(*xs)
            y = _op(k.kind, tgf, xs, ex, k.params)
        return tape.gradient(y, xs, output_gradients=cot_tg)

    def torch_step() -> Any:
        for t in ts:
            t.grad = None
        y = _op(k.kind, torch.nn.functional, ts, tex, k.params)
        y.backward(cot_t)
        return ts[0].grad

    return tg_step, torch_step


# Seconds to wait before each timed round. After a call, OpenBLAS's worker threads (numpy's
# GEMMs) keep spinning on the cores for about 2^28 cycles (OPENBLAS_THREAD_TIMEOUT's default,
# about 0.1 s), and PyTorch's OpenMP threads spin too: a round that starts right after the other
# library's ran shares the second core with that spin. Without the pause PyTorch's times here
# were up to 2x its times alone (DCGAN D conv2 forward + backward: 15-28 ms interleaved against
# 7.6-9.6 ms in a process of its own).
SETTLE = 0.25


def _time(fn: Callable[[], Any], min_time: float) -> float:
    """Milliseconds per call over at least ``min_time`` seconds."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / n * 1e3


def measure(kernels: list[Kernel], rounds: int = 5, min_time: float = 0.05,
            numpy_reference: bool = False, log: Callable[[str], Any] = print) -> list[dict]:
    """Median ms (forward+backward) of each kernel per framework, rounds alternating."""
    from tapegrad import _kernels

    rows = []
    for k in kernels:
        tg_step, torch_step = steps(k)
        fns: dict[str, Callable[[], Any]] = {"tapegrad": tg_step, "torch": torch_step}
        if numpy_reference:
            def reference(step: Callable[[], Any] = tg_step) -> Any:
                usable = _kernels.usable
                _kernels.usable = lambda *a: False  # type: ignore[assignment]
                try:
                    return step()
                finally:
                    _kernels.usable = usable  # type: ignore[assignment]

            fns["tapegrad (numpy reference)"] = reference
        for fn in fns.values():  # warm up: JIT compilation, allocator
            fn()
            fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        order = list(fns)
        for r in range(rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:
                time.sleep(SETTLE)  # the other library's worker threads stop spinning
                fns[name]()  # one call untimed: the first after the pause runs slower
                times[name].append(_time(fns[name], min_time))
        ratio = statistics.median(t / o for t, o in zip(times["torch"], times["tapegrad"],
                                                        strict=True))
        row = {"workload": k.workload, "name": k.name, "kind": k.kind,
               "shapes": [list(s) for s in k.shapes], "ratio": ratio,
               **{name: statistics.median(v) for name, v in times.items()}}
        rows.append(row)
        log(f"  ({k.workload}) {k.name:34s} tapegrad {row['tapegrad']:8.3f} ms  "
            f"torch {row['torch']:8.3f} ms  {ratio:.2f}x")
    return rows


def render(rows: list[dict]) -> list[str]:
    """The markdown table of ``measure``'s rows."""
    ref = any("tapegrad (numpy reference)" in r for r in rows)
    head = ["workload", "op", "input shape", "tapegrad ms", "PyTorch ms", "PyTorch / tapegrad"]
    if ref:
        head.insert(4, "tapegrad numpy-reference ms")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"({r['workload']})", r["name"], "x".join(map(str, r["shapes"][0])),
                 f"{r['tapegrad']:.3f}", f"{r['torch']:.3f}", f"{r['ratio']:.2f}x"]
        if ref:
            cells.insert(4, f"{r.get('tapegrad (numpy reference)', float('nan')):.3f}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated workloads (c,d,e,h,i)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.05, help="seconds per round and op")
    ap.add_argument("--tiny", action="store_true", help="the smoke-test sizes")
    ap.add_argument("--numpy-reference", action="store_true",
                    help="also time tapegrad with its numpy reference kernels")
    args = ap.parse_args(argv)
    keys = tuple(k.strip() for k in args.only.split(",")) if args.only else KERNEL_WORKLOADS
    from tapegrad import _kernels

    print(f"tapegrad kernels: {_kernels.selection()}")
    rows = measure(kernel_shapes(keys, args.tiny), args.rounds, args.min_time,
                   args.numpy_reference)
    print("\n".join(render(rows)))
    return rows


if __name__ == "__main__":
    main()
