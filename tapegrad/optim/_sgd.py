"""Stochastic gradient descent with momentum (torch.optim.SGD)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._backend import np
from .._kernels.registry import SMALLEST, dispatch
from ._optimizer import Optimizer

if TYPE_CHECKING:  # the pool is made on first use: no thread machinery at import time
    from concurrent.futures import ThreadPoolExecutor

CHUNK = 1 << 16  # elements per piece when updating a large parameter (256 KiB of float32)
SMALL = 1 << 14  # up to here a temporary costs less than finding the scratch buffer
_POOL: list[Any] = []


def _pool() -> tuple[ThreadPoolExecutor, int]:
    """Threads for updating large parameters: one per core, at most 4, made on first use."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        n = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
        _POOL.append((ThreadPoolExecutor(max(1, n - 1), thread_name_prefix="tapegrad-sgd"), n))
    return _POOL[0]


class SGD(Optimizer):
    r"""Stochastic gradient descent with momentum, dampening and Nesterov momentum.

    For each parameter ``p`` with gradient ``g`` (``b`` is the momentum buffer):

    .. code-block:: text

        g = g + weight_decay * p                          (L2 penalty)
        b = g                                  first step
        b = momentum * b + (1 - dampening) * g  later steps
        g = g + momentum * b   if nesterov,   else  g = b   (when momentum > 0)
        p = p - lr * g

    With ``decoupled_weight_decay=True`` the weights decay directly,
    ``p = p * (1 - lr * weight_decay)``, and the gradient is left alone (Loshchilov & Hutter;
    an addition to torch's SGD, as in dfdx). Otherwise numerics equal ``torch.optim.SGD``.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0, 2.0]))
    >>> opt = tg.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> opt.step(tape.gradient(loss))
    >>> [round(x, 4) for x in w.tolist()]
    [0.8, 1.6]
    """

    array_state = ("momentum_buffer",)

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        params: Any,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)
        self._piece_scratch: dict[Any, list[Any]] = {}  # dtype -> per-thread pieces (large params)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        self._check("momentum", group["momentum"], lo=0.0)
        self._check("dampening", group["dampening"], lo=0.0, hi=1.0)
        self._check("weight_decay", group["weight_decay"], lo=0.0)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(
                f"SGD: nesterov=True needs momentum > 0 and dampening = 0, got "
                f"momentum={group['momentum']}, dampening={group['dampening']}"
            )

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        buf = state.get("momentum_buffer")
        if (
            p.size > 16 * CHUNK  # below ~1M elements one pass is as fast
            and (buf is not None or not group["momentum"])
            and isinstance(p, np.ndarray)
            and p.flags.c_contiguous
            and g.flags.c_contiguous
            and (buf is None or buf.flags.c_contiguous)
        ):
            self._update_in_pieces(p, g, buf, group)
            return
        if p.size < SMALLEST.get("sgd", 0):  # too small for any kernel: no dispatcher
            self.numpy_step(p, g, state, group)
            return
        # one compiled pass on float parameters (_kernels/optim.py), the same arithmetic
        dispatch("sgd", self.numpy_step, p, g, state, group)

    def _update_in_pieces(self, p: Any, g: Any, buf: Any, group: dict[str, Any]) -> None:
        """A large parameter a cache-sized piece at a time, the pieces split between threads.

        The temporaries of a piece stay in cache, so memory traffic is reading ``p`` and ``g``
        and writing ``p``; numpy releases the GIL in each elementwise loop, so the threads
        overlap. Elementwise math: the same numbers as one pass over the whole array.
        """
        pf, gf = p.reshape(-1), g.reshape(-1)
        bf = None if buf is None else buf.reshape(-1)
        pool, nt = _pool()
        pieces = list(range(0, p.size, CHUNK))
        per = -(-len(pieces) // nt)

        scratches = self._piece_scratch.get(p.dtype)  # two pieces per thread, kept between steps
        if scratches is None:
            scratches = self._piece_scratch[p.dtype] = [
                np.empty((2, CHUNK), p.dtype) for _ in range(nt)
            ]

        def run(k: int) -> None:
            scratch = scratches[k]

            def tmp(like: Any, slot: int = 0) -> Any:
                return scratch[slot][: like.size]

            for a in pieces[k * per : (k + 1) * per]:
                part = {} if bf is None else {"momentum_buffer": bf[a : a + CHUNK]}
                self.numpy_step(pf[a : a + CHUNK], gf[a : a + CHUNK], part, group, tmp)

        futures = [pool.submit(run, k) for k in range(1, nt)]
        run(0)
        for f in futures:
            f.result()

    def numpy_step(
        self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], tmp: Any = None
    ) -> None:
        """The update in numpy (the reference of the compiled loop); scratch from ``tmp``
        (``self.tmp`` unless given)."""
        lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
        if not (mom or wd) and p.size <= SMALL:  # plain SGD on a small array: no scratch lookup
            p -= g * lr
            return
        if tmp is None:
            tmp = self.tmp
        d = self.weight_decay(p, g, group, tmp)
        s = tmp(p, 1)
        if mom:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d.copy()
            else:
                buf *= mom
                damp = group["dampening"]
                if damp:
                    buf += np.multiply(d, 1.0 - damp, out=s)
                else:
                    buf += d
            if group["nesterov"]:
                np.multiply(buf, mom, out=s)
                s += d
                s *= lr
            else:
                np.multiply(buf, lr, out=s)
        else:
            np.multiply(d, lr, out=s)
        p -= s
