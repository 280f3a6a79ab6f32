"""The kernel registry: compiled alternatives to primitives' numpy references, and the one
dispatcher that picks among them.

A primitive keeps its numpy forward (and VJP) as the reference and asks the dispatcher for the
work: ``dispatch(op, reference, *args)``. Kernel alternatives for a named operation
(``"softmax"``, ``"softmax_grad"``, ...) are declared with ``register`` in one table
(``table.py``, imported on the first dispatch): a ``fits(*args)`` that is cheap and imports
nothing heavy, and a ``run`` given as ``"module:function"`` in this package, imported on first
use (so ``import tapegrad`` never imports numba). ``fits`` and ``run`` take the reference's
arguments. The first alternative that fits runs; when none fits, or when the one that fits
raises ``NotReady`` (its machine code is still compiling in the background), the reference
runs. ``TAPEGRAD_KERNELS=numpy`` (or numba missing) leaves the table unused: every call takes
its reference.

The same dispatcher serves a primitive's forward, backward on arrays and ``tg.compile``'s
replay, so all three run the same code for the same inputs. A gradient operation whose
reference is written against ``xp`` takes ``xp`` first; on Tensors (an outer tape recording
backward) no kernel fits, so the reference runs and is recorded.

A ``run`` that updates arrays its caller passed in (an optimizer's step, running statistics)
must raise ``NotReady`` before its first write, so that the reference then starts from the
caller's untouched arrays.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["NotReady", "Impl", "register", "dispatch", "implementations"]


class NotReady(Exception):  # noqa: N818 - a signal, not an error
    """A compiled kernel's machine code for these argument types is not ready yet (it is being
    compiled in the background). Raised before the kernel runs, so nothing has been written."""


class Impl:
    """One alternative for an operation: ``fits(*args)`` says whether it covers the call;
    ``run(*args)`` calls the function ``target`` names (``"module:function"`` under
    ``tapegrad._kernels``), looked up in its module at each call (so that a test may wrap it)."""

    __slots__ = ("op", "name", "fits", "target", "_module", "_fn")

    def __init__(self, op: str, name: str, fits: Callable[..., bool], target: str) -> None:
        self.op, self.name, self.fits, self.target = op, name, fits, target
        self._module: Any = None
        self._fn = target.split(":")[1]

    def load(self) -> Callable[..., Any]:
        """The function ``target`` names (importing its kernel module on first use)."""
        if self._module is None:
            self._module = importlib.import_module(f"tapegrad._kernels.{self.target.split(':')[0]}")
        return getattr(self._module, self._fn)

    def run(self, *args: Any) -> Any:
        module = self._module
        if module is None:
            return self.load()(*args)
        return getattr(module, self._fn)(*args)

    def __repr__(self) -> str:
        return f"Impl({self.op!r}, {self.name!r}, {self.target!r})"


_TABLE: dict[str, list[Impl]] = {}
# the table dispatch reads: None until the first dispatch, then _TABLE (kernels selected) or
# an empty dict (TAPEGRAD_KERNELS=numpy, numba missing)
_ACTIVE: list[dict[str, list[Impl]] | None] = [None]


def register(op: str, name: str, fits: Callable[..., bool], run: str) -> Impl:
    """Declare ``run`` (``"module:function"``) as an implementation of ``op`` where ``fits``;
    implementations registered earlier are preferred."""
    if ":" not in run:
        raise ValueError(f"register({op!r}, {name!r}): run must be 'module:function', got {run!r}")
    impl = Impl(op, name, fits, run)
    _TABLE.setdefault(op, []).append(impl)
    return impl


def _activate() -> dict[str, list[Impl]]:
    from . import numba, table  # noqa: F401, PLC0415 - once: the table's registrations

    active = _TABLE if numba() is not None else {}
    _ACTIVE[0] = active
    return active


def implementations(op: str | None = None) -> list[Impl]:
    """The registered implementations (of one operation, or all), in dispatch order."""
    from . import table  # noqa: F401, PLC0415 - the registrations

    if op is not None:
        return list(_TABLE.get(op, ()))
    return [impl for impls in _TABLE.values() for impl in impls]


def dispatch(op: str, reference: Callable[..., Any], *args: Any) -> Any:
    """Run the first registered implementation of ``op`` that fits the arguments, else (or
    while its machine code is compiling) ``reference(*args)``.

    >>> from tapegrad._kernels.registry import dispatch
    >>> dispatch("no such operation", max, 2, 3)
    3
    """
    active = _ACTIVE[0]
    impls = (active if active is not None else _activate()).get(op)
    if impls:
        for impl in impls:
            if impl.fits(*args):
                try:
                    return impl.run(*args)
                except NotReady:
                    break
    return reference(*args)
