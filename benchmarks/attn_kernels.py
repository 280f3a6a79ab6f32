"""The transformer's compiled kernels side by side with their numpy references and PyTorch.

Each row times one op's forward plus its backward at the shapes of workloads (d) and (e):
tapegrad's primitive forward and array VJP with the numba kernels, the same with the numpy
reference (``usable`` turned off), and PyTorch's forward + ``backward`` (autograd, so its
time includes autograd's few microseconds per op). Rounds alternate between the three; a
ratio is the median over rounds of the two times measured in the same round (above 1.0, the
kernel is faster).

    PYTHONPATH=. python benchmarks/attn_kernels.py            # every row, 9 rounds
    PYTHONPATH=. python benchmarks/attn_kernels.py --rounds 5 --only attention
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tapegrad import _kernels
from tapegrad._autodiff import ARRAYS
from tapegrad.ops import _attention as A
from tapegrad.ops import _elementwise as E
from tapegrad.ops import _norm as N
from tapegrad.ops import _softmax as SM


def _blhd(rng: np.random.Generator, b: int, h: int, n: int, d: int) -> np.ndarray:
    """(B, H, L, D) views of (B, L, H * D) projections, as the transformer passes them."""
    return rng.standard_normal((b, n, h, d)).astype(np.float32).transpose(0, 2, 1, 3)


def attention_case(b: int, h: int, n: int, d: int, padded: bool) -> tuple[Callable, Callable]:
    rng = np.random.default_rng(0)
    q, k, v = (_blhd(rng, b, h, n, d) for _ in range(3))
    mask = None
    if padded:
        lengths = rng.integers(1, n + 1, b)
        pad = np.arange(n)[None, :] >= lengths[:, None]
        mask = np.where(pad, -np.inf, 0.0).astype(np.float32)[:, None, None, :]
    sc = 1.0 / np.sqrt(d)
    g = rng.standard_normal((b, h, n, d)).astype(np.float32)
    needs = (True, True, True, False)

    def ours() -> Any:
        out = A._attn_fwd(q, k, v, mask, sc)
        return A._attn_grads_arrays(g, out, q, k, v, mask, sc, needs)

    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    tm = None if mask is None else torch.from_numpy(mask)
    tg_ = torch.from_numpy(g)

    def theirs() -> Any:
        y = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
        y.backward(tg_)
        return y

    return ours, theirs


def softmax_case(shape: tuple[int, ...], log: bool) -> tuple[Callable, Callable]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    fwd = SM._log_softmax_fwd if log else SM._softmax_fwd
    vjp = SM._log_softmax_vjp if log else SM._softmax_vjp

    def ours() -> Any:
        return vjp(ARRAYS, g, fwd(x, -1), x, -1)

    tx, tgr = torch.from_numpy(x).requires_grad_(), torch.from_numpy(g)
    tf = torch.log_softmax if log else torch.softmax

    def theirs() -> Any:
        y = tf(tx, -1)
        y.backward(tgr)
        return y

    return ours, theirs


def layer_norm_case(rows: int, m: int) -> tuple[Callable, Callable]:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((rows, m)).astype(np.float32)
    w, b = rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    g = rng.standard_normal((rows, m)).astype(np.float32)
    needs = (True, True, True)

    def ours() -> Any:
        y = N._ln_fwd(x, w, b, (1,), 1e-5)
        return N._ln_grads(ARRAYS, g, y, x, w, b, axes=(1,), eps=1e-5, needs=needs)

    tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
    tgr = torch.from_numpy(g)

    def theirs() -> Any:
        y = torch.nn.functional.layer_norm(tx, (m,), tw, tb)
        y.backward(tgr)
        return y

    return ours, theirs


def relu_case(shape: tuple[int, ...]) -> tuple[Callable, Callable]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    y = E._relu_fwd(x)

    def ours() -> Any:
        return E._relu_vjp(ARRAYS, g, y, x)

    ty, tgr = torch.from_numpy(y), torch.from_numpy(g)

    def theirs() -> Any:  # the backward alone, as ours
        return torch.ops.aten.threshold_backward(tgr, ty, 0.0)

    return ours, theirs


CASES: dict[str, Callable[[], tuple[Callable, Callable]]] = {
    "attention (d) 16x4x64x32": lambda: attention_case(16, 4, 64, 32, False),
    "attention (e) 128x4x10x16, padding mask": lambda: attention_case(128, 4, 10, 16, True),
    "softmax 1024x64 rows": lambda: softmax_case((16, 4, 64, 64), False),
    "log_softmax 128x128 (e) logits": lambda: softmax_case((128, 128), True),
    "layer_norm (d) 1024x128": lambda: layer_norm_case(1024, 128),
    "layer_norm (e) 1280x64": lambda: layer_norm_case(1280, 64),
    "relu backward (d) 1024x512": lambda: relu_case((1024, 512)),
}


def _time(f: Callable[[], Any], min_time: float) -> float:
    f()
    n, t0 = 0, time.perf_counter()
    while True:
        f()
        n += 1
        t = time.perf_counter() - t0
        if t >= min_time:
            return t / n


def _reference(f: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        usable = _kernels.usable
        _kernels.usable = lambda *a: False  # type: ignore[assignment]
        try:
            return f()
        finally:
            _kernels.usable = usable  # type: ignore[assignment]

    return run


def _blas_threads() -> int:
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return int(blas[0]["num_threads"]) if blas else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=0.05, help="seconds per timing")
    ap.add_argument("--only", default="", help="rows whose name contains this")
    ap.add_argument(
        "--threads", type=int, default=0, help="PyTorch's threads (default: numpy's BLAS threads)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads or _blas_threads())
    print(f"kernels: {_kernels.selection()}; {args.rounds} rounds; times in microseconds")
    print(f"{'forward + backward':42s} {'numba':>8s} {'numpy':>8s} {'torch':>8s}"
          f" {'vs numpy':>9s} {'vs torch':>9s}")  # fmt: skip
    for name, make in CASES.items():
        if args.only not in name:
            continue
        ours, theirs = make()
        ref = _reference(ours)
        rows = []
        for _ in range(args.rounds):
            rows.append([_time(f, args.min_time) for f in (ours, ref, theirs)])
        t = np.array(rows)
        med = np.median(t, axis=0) * 1e6
        r_np = np.median(t[:, 1] / t[:, 0])
        r_t = np.median(t[:, 2] / t[:, 0])
        print(f"{name:42s} {med[0]:8.1f} {med[1]:8.1f} {med[2]:8.1f} {r_np:8.2f}x {r_t:8.2f}x")


if __name__ == "__main__":
    main()
