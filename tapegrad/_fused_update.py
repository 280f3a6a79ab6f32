"""Optimizer updates in a compiled step (``tg.compile``): SGD's and Adam's per-parameter
arithmetic is the eager optimizer's own compiled loop (``_kernels/optim.py``); SGD's is called
for every parameter it fits, Adam's is dispatched as the optimizer dispatches it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from . import _kernels
from ._kernels.registry import NotReady, dispatch
from ._kernels.table import flat_floats
from .optim import SGD, Adam, AdamW
from .optim._sgd import CHUNK

_KINDS: dict[Any, bool] = {}  # SGD -> True, Adam and AdamW -> False (filled on first use)
_SGD_STEP: list[Any] = []  # _kernels.optim.sgd_step, once loaded


def _loops_made() -> bool:
    """Import the optimizers' loops once; False (with a warning) when numba cannot."""
    if _KINDS:
        return None not in _KINDS
    try:
        from ._kernels.optim import sgd_step  # noqa: PLC0415  # lazy: it imports numba
    except Exception as e:  # noqa: BLE001 - the optimizer's own update still works
        _KINDS[None] = False  # no loops: every optimizer keeps update_one
        warnings.warn(
            f"tg.compile: the fused optimizer loops failed to load ({type(e).__name__}: "
            f"{e}); optimizers update with their own code",
            RuntimeWarning,
            stacklevel=4,
        )
        return False
    _KINDS.update({SGD: True, Adam: False, AdamW: False})
    _SGD_STEP[:] = [sgd_step]
    return True


def update(opt: Any) -> Callable[[Any, Any, dict[str, Any]], None] | None:
    """``fwd(p, g, group)``, ``opt.update_one`` for one parameter with SGD's or Adam's
    arithmetic in a compiled loop; None when ``opt`` is not exactly ``SGD``, ``Adam`` or
    ``AdamW`` or numba is not selected. Each call makes a new function, for one parameter of a
    program: it reads ``group`` (the learning rate a scheduler sets) every time it runs. A
    parameter a loop cannot take (another dtype, a view, AMSGrad, an SGD parameter large enough
    for its threaded path) gets ``update_one``, and so does one whose loop is still compiling.

    Which loop the parameter takes is decided the first time its arrays are seen (a program
    makes gradients of the same layout every step) and again whenever one is replaced.
    """
    if _kernels.numba() is None or not _loops_made():
        return None
    kind = type(opt)
    sgd = _KINDS.get(kind)
    if sgd is None:
        return None
    sgd_step = _SGD_STEP[0]
    seen: list[Any] = [None, False]  # the arrays last checked, whether the loop takes them

    def fwd(p: Any, g: Any, group: dict[str, Any]) -> None:
        a = p._data
        state = opt.state  # read each time: loading a state dict may replace it
        st = state.get(p)
        if st is None:
            st = state[p] = opt.init_single(a, group)
        if sgd:
            arrays: tuple[Any, ...] = (a, st.get("momentum_buffer"))
        else:
            arrays = (a, st["exp_avg"], st["exp_avg_sq"])
        old = seen[0]
        if old is None or any(x is not y for x, y in zip(arrays, old, strict=True)):
            # first step, or an array was replaced: check the layouts once
            seen[0], seen[1] = arrays, _choose(g, arrays, sgd)
        if not seen[1] or (not sgd and group["amsgrad"]):
            opt.update_one(p, g, group)
            return
        if sgd:
            try:
                sgd_step(a, g, st, group)
            except NotReady:  # its machine code is still compiling: numpy's, the same bits
                opt.numpy_step(a, g, st, group)
            seen[0] = (a, st.get("momentum_buffer"))
        else:
            st["step"] += 1
            dispatch("adam", opt.numpy_step, a, g, st, group)
        p._version += 1

    return fwd


def _choose(g: Any, arrays: tuple[Any, ...], sgd: bool) -> bool:
    """Whether a loop can update the parameter ``arrays[0]`` from ``g`` and its state: numpy
    float arrays of one shape and dtype, all C-contiguous (``_kernels.table.flat_floats``);
    Adam's update always dispatches (its own layout check is the kernel's fits)."""
    a = arrays[0]
    if not sgd:
        return True
    if a.size > 16 * CHUNK:  # huge: SGD's threaded pieces
        return False
    return flat_floats(a, g, *(x for x in arrays[1:] if x is not None))
