"""Compiled CPU kernels (numba), chosen inside primitives' forwards; numpy stays the reference.

``numba()`` decides once per process which implementation the hot primitives use: the
compiled kernels when numba imports, the numpy code otherwise. ``TAPEGRAD_KERNELS=numpy``
selects numpy; when numba is missing or fails to import, numpy is selected with one line on
stderr saying why. Kernels compile on first use with ``cache=True``: into numba's cache beside
this package, or, when the package directory is not writable (a read-only site-packages), into
``$XDG_CACHE_HOME/tapegrad/numba`` (``~/.cache/tapegrad/numba``), unless ``NUMBA_CACHE_DIR``
names one.

A kernel runs only on numpy arrays of float32 or float64 (``usable``); anything else (CuPy
arrays, float16) takes the numpy path. A primitive's forward picks its kernel from the same
inputs every time, so the array and Tensor backward paths (and ``tg.compile``) run the same
code.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from .._backend import np

__all__ = ["numba", "usable", "selection", "cache_dir"]

_HERE = Path(__file__).resolve().parent
_state: dict[str, Any] = {"decided": False, "numba": None, "why": ""}
_lock = threading.Lock()


def cache_dir() -> str | None:
    """Where compiled kernels are cached, or None for numba's default (beside the source)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    if os.access(_HERE, os.W_OK):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tapegrad", "numba")


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


def jit(parallel: bool = False, fastmath: Any = False, signatures: Any = None) -> Any:
    """``numba.njit(cache=True, ...)`` with tapegrad's cache directory (for kernel modules);
    ``signatures`` compiles those up front (a recursive function needs them)."""
    nb = numba()
    assert nb is not None, "kernel modules are imported only when numba is selected"

    def deco(fn: Any) -> Any:
        where = cache_dir()
        config = nb.core.config
        old = config.CACHE_DIR
        if where is not None:
            os.makedirs(where, exist_ok=True)
            config.CACHE_DIR = where  # read when the cache is attached, just below
        try:
            opts = {"cache": True, "parallel": parallel, "fastmath": fastmath, "nogil": True}
            if signatures is not None:
                return nb.njit(signatures, error_model="numpy", **opts)(fn)
            return nb.njit(**opts)(fn)
        finally:
            config.CACHE_DIR = old

    return deco
