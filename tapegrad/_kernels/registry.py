"""The kernel registry: compiled alternatives to primitives' numpy references, and the one
dispatcher that picks among them.

A primitive keeps its numpy forward (and VJP) as the reference and asks the dispatcher for the
work: ``dispatch(op, reference, *args)``. Kernel modules declare alternatives for a named
operation (``"softmax"``, ``"softmax_grad"``, ...) with ``register``: a ``fits(*args)`` that is
cheap and imports nothing heavy, and a ``run`` given as ``"module:function"`` in this package,
imported on first use (so ``import tapegrad`` never imports numba). The first alternative that
fits runs; when none fits, or when the one that fits raises ``NotReady`` (its machine code is
still compiling in the background), the reference runs. ``TAPEGRAD_KERNELS=numpy`` (or numba
missing) leaves the table's entries unused: every call takes its reference.

The same dispatcher serves a primitive's forward, backward on arrays and ``tg.compile``'s
replay, so all three run the same code for the same inputs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NotReady", "Impl", "register", "dispatch", "implementations"]


class NotReady(Exception):  # noqa: N818 - a signal, not an error
    """A compiled kernel's machine code for these argument types is not ready yet (it is being
    compiled in the background). Raised before the kernel runs, so nothing has been written."""


@dataclass
class Impl:
    """One alternative for an operation: ``fits(*args, **kw)`` says whether it covers the call;
    ``run`` (``"module:function"`` under ``tapegrad._kernels``) does the work."""

    op: str
    name: str
    fits: Callable[..., bool]
    target: str
    _run: Callable[..., Any] | None = field(default=None, repr=False)

    @property
    def run(self) -> Callable[..., Any]:
        if self._run is None:
            mod, fn = self.target.split(":")
            self._run = getattr(importlib.import_module(f"tapegrad._kernels.{mod}"), fn)
        return self._run


_TABLE: dict[str, list[Impl]] = {}


def register(op: str, name: str, fits: Callable[..., bool], run: str) -> Impl:
    """Declare ``run`` (``"module:function"``) as an implementation of ``op`` where ``fits``."""
    impl = Impl(op, name, fits, run)
    _TABLE.setdefault(op, []).append(impl)
    return impl


def implementations(op: str | None = None) -> list[Impl]:
    """The registered implementations (of one operation, or all), in dispatch order."""
    if op is not None:
        return list(_TABLE.get(op, ()))
    return [impl for impls in _TABLE.values() for impl in impls]


def dispatch(op: str, reference: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run the first registered implementation of ``op`` that fits the arguments, else (or
    while its machine code is compiling) ``reference(*args, **kwargs)``."""
    from . import numba  # noqa: PLC0415 - decided once; None selects the references

    impls = _TABLE.get(op)
    if impls and numba() is not None:
        for impl in impls:
            if impl.fits(*args, **kwargs):
                try:
                    return impl.run(*args, **kwargs)
                except NotReady:
                    break
    return reference(*args, **kwargs)
