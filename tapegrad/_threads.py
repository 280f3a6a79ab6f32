"""How many threads the compiled kernels and numpy's BLAS use: ``set_num_threads`` /
``get_num_threads`` (PyTorch's names).

One number governs both. The default respects what the user already set: ``NUMBA_NUM_THREADS``
(which numba reads at import and never exceeds) and ``OMP_NUM_THREADS`` (the smaller of the two
when both are set), else every core this process may run on. numpy's OpenBLAS reads its own
variables at load (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``) and keeps them until
``set_num_threads`` is called. With ``TAPEGRAD_KERNELS=numpy`` numba is never imported and the
number is BLAS's alone. Unlike numba's own ``set_num_threads`` (which holds for the calling
thread only), the number holds for every Python thread.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from ._backend import np

__all__ = ["set_num_threads", "get_num_threads"]

_blas: dict[str, Any] = {}


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _env_threads(name: str) -> int | None:
    """A positive thread count from environment variable ``name``, or None (unset or not a
    positive integer; OpenMP's list form ``4,2`` gives its first number)."""
    raw = os.environ.get(name, "").split(",")[0].strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def default_threads(launched: int | None = None) -> int:
    """The thread count before any ``set_num_threads``: the smaller of ``NUMBA_NUM_THREADS`` and
    ``OMP_NUM_THREADS`` where set, else the cores; at most ``launched`` (numba's threads)."""
    given = [n for n in (_env_threads("NUMBA_NUM_THREADS"), _env_threads("OMP_NUM_THREADS")) if n]
    n = min(given) if given else cores()
    return min(n, launched) if launched else n


# OpenBLAS's thread count getter and setter, under the names of scipy-openblas64 (numpy's
# wheels), scipy-openblas32 and a plain build
_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
            ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
            ("openblas_get_num_threads", "openblas_set_num_threads"))


def numpy_openblas() -> Any:
    """numpy's own OpenBLAS (the copy its wheel bundles in ``numpy.libs``, not another package's)
    as a ctypes library, or None."""
    if "lib" in _blas:
        return _blas["lib"]
    libs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(np.__file__))),
                        "numpy.libs")
    try:
        names = sorted(f for f in os.listdir(libs) if "openblas" in f and ".so" in f)
    except OSError:
        names = []
    _blas["lib"] = None
    for name in names:
        lib = ctypes.CDLL(os.path.join(libs, name))  # already loaded by numpy: the same handle
        for get_name, put_name in _SYMBOLS:
            get, put = getattr(lib, get_name, None), getattr(lib, put_name, None)
            if get is not None and put is not None:
                get.restype = ctypes.c_int
                put.argtypes = [ctypes.c_int]
                put.restype = None
                _blas.update(lib=lib, get=get, put=put)
                return lib
    return None


def blas_threads() -> int | None:
    """numpy's OpenBLAS's thread count, or None when numpy's BLAS is not the bundled OpenBLAS."""
    return int(_blas["get"]()) if numpy_openblas() is not None else None


def set_blas_threads(n: int) -> None:
    """Set numpy's OpenBLAS's thread count (nothing when its BLAS is another library)."""
    if numpy_openblas() is not None:
        _blas["put"](n)


def _check(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(
            f"set_num_threads: expected a positive integer, got {n!r}; "
            f"e.g. tg.set_num_threads(4) (this machine has {cores()} cores)"
        )
    return int(n)


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in the compiled kernels and numpy's BLAS, from every Python thread.

    The kernels run on numba's threads, of which numba starts ``NUMBA_NUM_THREADS`` (the cores,
    unless set before import): a larger ``n`` is capped there, for BLAS too, so that BLAS's
    work fits the threads it shares with the kernels. Results do not depend on ``n`` beyond
    float rounding in sums that split across threads.

    >>> import tapegrad as tg
    >>> before = tg.get_num_threads()
    >>> tg.set_num_threads(1)
    >>> tg.get_num_threads()
    1
    >>> tg.set_num_threads(before)
    """
    n = _check(n)
    from . import _kernels  # noqa: PLC0415  # cycle: the kernels import this module

    if _kernels.numba() is None:
        set_blas_threads(n)
        _blas["n"] = n
        return
    from ._kernels import threads  # noqa: PLC0415  # lazy: it imports numba

    threads.set_threads(n)


def get_num_threads() -> int:
    """The number of threads the compiled kernels and numpy's BLAS use (``set_num_threads``).

    >>> import tapegrad as tg
    >>> tg.get_num_threads() >= 1
    True
    """
    from . import _kernels  # noqa: PLC0415  # cycle: the kernels import this module

    if _kernels.numba() is None:
        if "n" not in _blas:
            _blas["n"] = blas_threads() or default_threads()
        return int(_blas["n"])
    from ._kernels import threads  # noqa: PLC0415  # lazy: it imports numba

    return threads.count()
