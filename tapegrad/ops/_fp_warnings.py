"""numpy's floating-point warnings inside tapegrad's kernels: off unless asked for.

``log(0) = -inf`` (an additive mask from a 0/1 mask), ``sqrt``'s gradient at 0 and a softmax over
a fully masked row (NaN) are results, as in PyTorch, not warnings. The primitives whose kernels produce them by design run under
``numpy.errstate(divide/invalid/over='ignore')``; ``set_fp_warnings(True)`` lets numpy's own
settings apply again (to find where an inf or NaN first appears). Only these primitives pay the
errstate (measured: about 5 us a call on a shared machine). Division, ``exp`` and the
arithmetic operators, the hottest ops, are left out and follow numpy's settings, as does
arithmetic on operands that are already inf or NaN (``inf - inf``).
"""

from __future__ import annotations

import functools
from typing import Any

from .._autodiff import PRIMITIVES
from .._backend import np

_WARN = [False]
_WRAPPED: set[Any] = set()
# forwards and VJPs with poles, domain edges or overflow on finite input
QUIET = (
    "log log1p log2 log10 sqrt rsqrt reciprocal pow exp2 arcsin arccos arccosh arctanh softmax "
    "log_softmax atan2 hypot"
).split()


def set_fp_warnings(flag: bool) -> bool:
    """Let numpy warn (or raise, per ``numpy.seterr``) on inf / NaN from tapegrad's kernels;
    returns the previous setting. Off by default, as PyTorch is silent.

    >>> import tapegrad as tg
    >>> tg.log(tg.tensor([0.0, 1.0])).tolist()
    [-inf, 0.0]
    >>> tg.set_fp_warnings(False)
    False
    """
    prev = _WARN[0]
    _WARN[0] = bool(flag)
    return prev


def _quiet(f: Any) -> Any:
    if f is None:
        return None

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _WARN[0]:
            return f(*args, **kwargs)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return f(*args, **kwargs)

    return run


def install() -> None:
    """Wrap the forwards and VJPs of the primitives in ``QUIET`` (once, when ops load)."""
    for name in QUIET:
        p = PRIMITIVES.get(name)
        if p is None or p.fwd in _WRAPPED:
            continue
        p.fwd = _quiet(p.fwd)
        _WRAPPED.add(p.fwd)
        p.vjps = tuple(_quiet(v) for v in p.vjps)
        if p.joint is not None:
            p.joint = _quiet(p.joint)
