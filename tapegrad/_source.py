"""Generated loop source compiled with numba (``tg.compile``'s fused loops): one loader, the
kernel runtime's cache folder and digest.

``load(src)`` writes ``src`` into ``_kernels.runtime.cache_dir()`` (named after a digest of the
kernel modules, so a change to a kernel a loop calls starts afresh) under the name of its own
digest (``runtime.text_digest``), then compiles its ``kernel`` with ``numba.njit(cache=True)``
from that file, so numba's disk cache serves the next process. A file whose text is not the
source is rewritten, never run.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import types
from typing import Any

from . import _kernels
from ._kernels.runtime import cache_dir, text_digest

# no fastmath: LLVM then neither reorders nor contracts a * b + c into an FMA; numpy's error
# model: x / 0 gives inf or nan as numpy does (numba's default would raise)
JIT_OPTIONS = {"nogil": True, "error_model": "numpy", "fastmath": False}


def load(src: str) -> Any:
    """The numba loop of ``src`` (its function ``kernel``), compiled from a cached file."""
    nb = _kernels.numba()
    assert nb is not None
    name = "tg_fused_" + text_digest(src)
    path = os.path.join(cache_dir(), name + ".py")
    if _read(path) != src:  # absent, or not the source it is named for (torn, edited, planted)
        try:
            _write(path, src)
        except OSError:
            return _load_from_string(nb, name, src)
    # the text run is the source itself, never the file read again; the file is what numba's
    # disk cache stamps (its size and time) and names its machine code by
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod  # numba's disk cache finds the module's globals by name
    exec(builtins.compile(src, path, "exec"), mod.__dict__)  # noqa: S102
    return nb.njit(cache=True, **JIT_OPTIONS)(mod.kernel)


def _load_from_string(nb: Any, name: str, src: str) -> Any:
    ns: dict[str, Any] = {}
    exec(builtins.compile(src, f"<{name}>", "exec"), ns)  # noqa: S102
    return nb.njit(**JIT_OPTIONS)(ns["kernel"])


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: str, src: str) -> None:
    """Write ``src`` to ``path`` atomically: a reader sees the old file or the new one."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(src)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
