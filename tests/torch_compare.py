"""Run a tapegrad function and its PyTorch twin on the same float64 inputs and compare the
outputs and the gradients (shared by the nn function and loss tests)."""

from __future__ import annotations

import numpy as np
import torch

import tapegrad as tg

RTOL, ATOL = 1e-10, 1e-12


def close(a, b, rtol=RTOL, atol=ATOL, what=""):
    a = a.numpy() if isinstance(a, tg.Tensor) else np.asarray(a)
    if isinstance(b, tg.Tensor):
        b = b.numpy()
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


def compare(tg_fn, torch_fn, arrays, diff=None, seed=0, rtol=RTOL, atol=ATOL):
    """Run both functions on the same float64 inputs; compare outputs and the VJP of a random
    output gradient for every float input in ``diff`` (all float inputs by default)."""
    rng = np.random.default_rng(seed)
    if diff is None:
        diff = [
            i for i, a in enumerate(arrays) if a is not None and np.asarray(a).dtype.kind == "f"
        ]
    tins = [None if a is None else tg.tensor(a) for a in arrays]
    with tg.Tape() as tape:
        for i in diff:
            tape.watch(tins[i])
        y = tg_fn(*tins)
    pins = [
        None if a is None else torch.tensor(a, requires_grad=i in diff)
        for i, a in enumerate(arrays)
    ]
    ty = torch_fn(*pins)
    close(y, ty, rtol, atol, "forward")
    if not diff:
        return y
    g = rng.standard_normal(y.shape)
    grads = tape.gradient(y, [tins[i] for i in diff], output_gradients=tg.tensor(g))
    ty.backward(torch.tensor(g))
    for k, i in enumerate(diff):
        close(grads[k], pins[i].grad, rtol, atol, f"gradient of input {i}")
    return y
