"""Compiled CPU kernels (numba), chosen inside primitives' forwards; numpy stays the reference.

``numba()`` decides once per process which implementation the hot primitives use: the
compiled kernels when numba imports, the numpy code otherwise. ``TAPEGRAD_KERNELS=numpy``
selects numpy; when numba is missing or fails to import, numpy is selected with one line on
stderr saying why. When kernels compile and where they are cached: ``runtime`` (by default the
numpy references run while a compiler process beside this one prepares the machine code).

A kernel runs only on numpy arrays of float32 or float64 (``usable``); anything else (CuPy
arrays, float16) takes the numpy path. A primitive's forward picks its kernel from the same
inputs every time, so the array and Tensor backward paths (and ``tg.compile``) run the same
code.
"""

from __future__ import annotations

import os
import sys
import threading
from types import ModuleType
from typing import Any

from .._backend import np
from .registry import NotReady, dispatch, register
from .runtime import HERE, cache_dir, compiling, jit, sources_digest, wait_compiled

__all__ = [
    "numba", "usable", "selection", "cache_dir", "NotReady", "dispatch", "register", "jit",
    "sources_digest", "wait_compiled", "compiling",
]

_HERE = HERE
_state: dict[str, Any] = {"decided": False, "numba": None, "why": ""}
_lock = threading.Lock()


def _load() -> ModuleType | None:
    choice = os.environ.get("TAPEGRAD_KERNELS", "").strip().lower()
    if choice == "numpy":
        _state["why"] = "numpy kernels (TAPEGRAD_KERNELS=numpy)"
        print("tapegrad: using the numpy kernels (TAPEGRAD_KERNELS=numpy)", file=sys.stderr)
        return None
    if choice not in ("", "numba"):
        raise ValueError(
            f"TAPEGRAD_KERNELS must be 'numba' or 'numpy', got {os.environ['TAPEGRAD_KERNELS']!r}"
        )
    try:
        import numba  # noqa: PLC0415
        import numba.core.config  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001 - any failure to import selects the reference
        _state["why"] = f"numpy kernels (numba did not import: {type(e).__name__}: {e})"
        print(
            f"tapegrad: using the numpy kernels: numba did not import ({type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return None
    _state["why"] = f"numba {numba.__version__} kernels"
    return numba


def numba() -> ModuleType | None:
    """The numba module when compiled kernels are selected, else None (decided once)."""
    if not _state["decided"]:
        with _lock:  # threads meeting their first kernel at once decide (and print) once
            if not _state["decided"]:
                _state["numba"] = _load()
                _state["decided"] = True
    return _state["numba"]


def selection() -> str:
    """Which kernels this process uses, in words.

    >>> from tapegrad._kernels import selection
    >>> selection().split()[-1]
    'kernels'
    """
    numba()
    return str(_state["why"]).split(" (")[0]


def usable(*arrays: Any) -> bool:
    """Whether compiled kernels are selected and can run on these arrays (numpy, float32/64)."""
    if numba() is None:
        return False
    dt = None
    for a in arrays:
        if a is None:
            continue
        if type(a) is not np.ndarray or a.dtype not in (np.float32, np.float64):
            return False
        if dt is None:
            dt = a.dtype
        elif a.dtype != dt:
            return False
    return True
