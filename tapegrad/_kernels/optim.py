"""Optimizer updates (numba): SGD's, Adam's and AdamW's per-parameter arithmetic in one pass.

Each loop serves the eager optimizer (through the kernel table) and ``tg.compile``'s replay.
The eager update in ``optim/_adam.py`` is nine numpy passes over the parameter's arrays
(``m *= beta1``, ``m += (1 - beta1) * g``, ...); this loop does the same operations in the same
order on each element, with the scalars cast to the parameter's dtype as numpy casts a Python
number, so the results are equal bit for bit. From ``elementwise.PARALLEL_MIN`` elements, while
numpy's BLAS shares numba's threads, chunks of the flat arrays run one per thread (the same bits;
SGD's update of the MLP 784-512-512-10, arrays out of cache, two threads: 498 -> 416 us).
Imported only when numba is selected.
"""

from __future__ import annotations

import math
from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .elementwise import ALIGN, run

U = np.uint64


@jit(ieee=True)
def _adam(p, g, m, v, lr, wd, b1, b2, eps_bc2, step_size, coupled, decoupled, k0, k1):  # type: ignore[no-untyped-def]
    pf = p.reshape(-1)
    gf = g.reshape(-1)
    mf = m.reshape(-1)
    vf = v.reshape(-1)
    t = pf.dtype.type
    shrink = t(1.0 - lr * wd)
    wdt, b1t, c1, b2t, c2 = t(wd), t(b1), t(1.0 - b1), t(b2), t(1.0 - b2)
    eps, size = t(eps_bc2), t(step_size)
    for k in range(U(k0), U(k1)):
        if decoupled:
            pf[k] = pf[k] * shrink
        d = gf[k]
        if coupled:
            d = pf[k] * wdt + d
        mk = mf[k] * b1t + d * c1
        mf[k] = mk
        vk = vf[k] * b2t + (d * d) * c2
        vf[k] = vk
        pf[k] = pf[k] - mk / (np.sqrt(vk) + eps) * size


@jit(parallel=True)
def _adam_par(p, g, m, v, lr, wd, b1, b2, eps_bc2, step_size, coupled, decoupled):  # type: ignore[no-untyped-def]
    parts = num_threads()
    for i in prange(parts):
        k0, k1 = bounds(p.size, parts, i, ALIGN)
        _adam(p, g, m, v, lr, wd, b1, b2, eps_bc2, step_size, coupled, decoupled, k0, k1)


def fits(p: Any, *arrays: Any) -> bool:
    """Whether the loop can update ``p`` from ``arrays``: numpy float arrays of one dtype and
    shape, all C-contiguous (the loops index them flat)."""
    return (type(p) is np.ndarray and p.dtype in (np.float32, np.float64)
            and p.flags.c_contiguous
            and all(type(a) is np.ndarray and a.dtype == p.dtype and a.shape == p.shape
                    and a.flags.c_contiguous for a in arrays))


def adam(p: Any, g: Any, m: Any, v: Any, group: dict[str, Any], t: int) -> None:
    """Adam's step ``t`` (from 1) in place: ``p``, ``m``, ``v`` updated from ``g`` with the
    hyperparameters of the optimizer's ``group`` (``optim.Adam``'s arithmetic, its scalars
    formed as it forms them: eps and the step size carry beta2's bias correction's square
    root)."""
    lr, wd = float(group["lr"]), float(group.get("weight_decay", 0.0))
    beta1, beta2 = group["betas"]
    decoupled = bool(wd) and bool(group.get("decoupled_weight_decay", False))
    bc2_sqrt = math.sqrt(1.0 - beta2**t)
    p, g, m, v = (a.reshape(-1) for a in (p, g, m, v))  # views: one compile a dtype, any rank
    run(_adam, _adam_par, p.size, p, g, m, v, lr, wd, float(beta1), float(beta2),
           float(group["eps"] * bc2_sqrt), float(lr / (1.0 - beta1**t) * bc2_sqrt),
           bool(wd) and not decoupled, decoupled)


def adam_step(p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
    """``adam`` with the arguments of its reference (``optim.Adam.numpy_step``): step
    ``state["step"]`` (already counted), the moments in ``state``. One compiled call: it
    raises ``NotReady`` before writing anything."""
    adam(p, g, state["exp_avg"], state["exp_avg_sq"], group, state["step"])


# SGD's flags: a bit mask (an int dispatches in a fraction of a tuple of bools' time)
COUPLED, DECOUPLED, MOMENTUM, FIRST, NESTEROV = 1, 2, 4, 8, 16


@jit(ieee=True)
def _sgd(p, g, buf, lr, wd, mom, damp, flags, k0, k1):  # type: ignore[no-untyped-def]
    pf = p.reshape(-1)
    gf = g.reshape(-1)
    bf = buf.reshape(-1)
    t = pf.dtype.type
    coupled = (flags & 1) != 0
    decoupled = (flags & 2) != 0
    momentum = (flags & 4) != 0
    first = (flags & 8) != 0
    nesterov = (flags & 16) != 0
    shrink = t(1.0 - lr * wd)
    wdt, momt, c, lrt = t(wd), t(mom), t(1.0 - damp), t(lr)
    for k in range(U(k0), U(k1)):
        if decoupled:
            pf[k] = pf[k] * shrink
        d = gf[k]
        if coupled:
            d = pf[k] * wdt + d
        if momentum:
            if first:
                b = d
            else:
                b = bf[k] * momt
                b = b + (d * c if damp != 0.0 else d)
            bf[k] = b
            if nesterov:
                s = (b * momt + d) * lrt
            else:
                s = b * lrt
        else:
            s = d * lrt
        pf[k] = pf[k] - s


@jit(parallel=True)
def _sgd_par(p, g, buf, lr, wd, mom, damp, flags):  # type: ignore[no-untyped-def]
    parts = num_threads()
    for i in prange(parts):
        k0, k1 = bounds(p.size, parts, i, ALIGN)
        _sgd(p, g, buf, lr, wd, mom, damp, flags, k0, k1)


def sgd_step(p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
    """SGD's step in place, with the arguments of its reference (``optim.SGD.numpy_step``):
    ``p`` and the momentum buffer in ``state`` (made on the first step, kept once the loop has
    run) updated from ``g``, numpy's operations in numpy's order. One compiled call: it raises
    ``NotReady`` before writing anything."""
    lr, wd, mom = float(group["lr"]), float(group["weight_decay"]), float(group["momentum"])
    flags = 0
    if wd:
        flags = DECOUPLED if group.get("decoupled_weight_decay", False) else COUPLED
    buf = state.get("momentum_buffer")
    new = None
    if mom:
        flags |= MOMENTUM | (NESTEROV if group["nesterov"] else 0)
        if buf is None:  # the first step seeds the buffer with the gradient
            flags |= FIRST
            buf = new = np.empty_like(p)
    run(_sgd, _sgd_par, p.size, p, g, p if buf is None else buf, lr, wd, mom,
        float(group["dampening"]), flags)
    if new is not None:
        state["momentum_buffer"] = new
