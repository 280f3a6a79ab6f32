"""Compiled CPU kernels (numba), chosen inside primitives' forwards; numpy stays the reference.

``numba()`` decides once per process which implementation the hot primitives use: the
compiled kernels when numba imports, the numpy code otherwise. ``TAPEGRAD_KERNELS=numpy``
selects numpy; when numba is missing or fails to import, numpy is selected with one line on
stderr saying why. Kernels compile on first use with ``cache=True``, into a folder named after a
digest of the kernel modules' sources (``cache_dir``): beside this package, or, when the package
directory is not writable (a read-only site-packages), under ``$XDG_CACHE_HOME/tapegrad/numba``
(``~/.cache/tapegrad/numba``), or under ``NUMBA_CACHE_DIR`` when set.

A kernel runs only on numpy arrays of float32 or float64 (``usable``); anything else (CuPy
arrays, float16) takes the numpy path. A primitive's forward picks its kernel from the same
inputs every time, so the array and Tensor backward paths (and ``tg.compile``) run the same
code.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from .._backend import np
from .registry import NotReady, dispatch, register

__all__ = ["numba", "usable", "selection", "cache_dir", "NotReady", "dispatch", "register"]

_HERE = Path(__file__).resolve().parent
_state: dict[str, Any] = {"decided": False, "numba": None, "why": ""}
_lock = threading.Lock()


def cache_dir() -> str:
    """Where compiled kernels are cached: a folder named after a digest of the kernel modules'
    sources, under ``NUMBA_CACHE_DIR`` when set, else beside this package (``__pycache__``), or
    ``$XDG_CACHE_HOME/tapegrad/numba`` when the package directory is not writable.

    numba keys a cached function on its own file only; kernels inline helpers from other
    modules (``softmax.fexp`` in attention and layer norm), so a change there alone would load
    stale machine code. With the digest in the path, any change to any kernel module compiles
    every kernel afresh.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        base = os.environ["NUMBA_CACHE_DIR"]
    elif os.access(_HERE, os.W_OK):
        base = str(_HERE / "__pycache__")
    else:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(home, "tapegrad", "numba")
    where = os.path.join(base, "kernels-" + sources_digest(_HERE))
    if base == str(_HERE / "__pycache__"):
        _prune(base, where)
    return where


_PRUNED: set[str] = set()


def _prune(base: str, keep: str) -> None:
    """Remove the package's caches of earlier kernel sources (best effort, once a process)."""
    if keep in _PRUNED:
        return
    _PRUNED.add(keep)
    for old in Path(base).glob("kernels-*"):
        if str(old) != keep:
            shutil.rmtree(old, ignore_errors=True)
    for old in Path(base).glob("*.nb[ic]"):  # numba's own cache files, from before the digest
        old.unlink(missing_ok=True)


_DIGESTS: dict[Path, str] = {}


def sources_digest(folder: Path) -> str:
    """A short digest of the ``*.py`` files in ``folder`` (names and contents), once a process."""
    d = _DIGESTS.get(folder)
    if d is None:
        h = hashlib.blake2b(digest_size=8)
        for f in sorted(folder.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        d = _DIGESTS[folder] = h.hexdigest()
    return d


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


def jit(
    parallel: bool = False, fastmath: Any = False, signatures: Any = None, inline: str = "never",
    ieee: bool = False,
) -> Any:
    """``numba.njit(cache=True, ...)`` with tapegrad's cache directory (for kernel modules);
    ``signatures`` compiles those up front (a recursive function needs them); ``inline="always"``
    inlines a small helper into its callers (no call, no reference counting of its arrays);
    ``ieee``: division as numpy's (inf or NaN, no ZeroDivisionError check, which keeps LLVM
    from vectorising a loop that divides)."""
    nb = numba()
    assert nb is not None, "kernel modules are imported only when numba is selected"

    def deco(fn: Any) -> Any:
        where = cache_dir()
        config = nb.core.config
        old = config.CACHE_DIR
        os.makedirs(where, exist_ok=True)
        config.CACHE_DIR = where  # read when the cache is attached, just below
        try:
            opts = {"cache": True, "parallel": parallel, "fastmath": fastmath, "nogil": True,
                    "inline": inline}
            if signatures is not None:
                return nb.njit(signatures, error_model="numpy", **opts)(fn)
            if ieee:
                opts["error_model"] = "numpy"
            return nb.njit(**opts)(fn)
        finally:
            config.CACHE_DIR = old

    return deco
