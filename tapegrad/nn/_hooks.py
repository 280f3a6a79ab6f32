"""Module-wide state owned here and changed only through these functions: the call hook
(``on_call``: how ``tg.compile`` learns which modules a step calls) and the structure counter
(a cached parameter list is valid while it stands)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

_ON_CALL: list[Any] = [None]  # the function ``on_call`` installed, or None
_STRUCTURE = [0]  # moves whenever a module's fields or a container's items change


@contextlib.contextmanager
def on_call(fn: Callable[[Any], None]) -> Iterator[None]:
    """Within the block, every module call first calls ``fn(module)`` (``tg.compile`` learns
    which modules a step calls so). One at a time: a second ``on_call`` inside the first raises.

    >>> import tapegrad as tg
    >>> seen = []
    >>> with on_call(seen.append):
    ...     _ = tg.nn.ReLU()(tg.ones(2))
    >>> [type(m).__name__ for m in seen]
    ['ReLU']
    """
    if _ON_CALL[0] is not None:
        raise RuntimeError("on_call: a hook is already installed (captures do not nest)")
    _ON_CALL[0] = fn
    try:
        yield
    finally:
        _ON_CALL[0] = None


def call_hook() -> Callable[[Any], None] | None:
    """The function ``on_call`` installed, or None."""
    return _ON_CALL[0]


def structure_changed() -> None:
    """Invalidate cached parameter lists (a module's fields or a container's items changed)."""
    _STRUCTURE[0] += 1


def structure() -> int:
    """The structure counter: equal values mean no module's fields changed in between."""
    return _STRUCTURE[0]
