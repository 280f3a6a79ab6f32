"""Keep freed array memory for reuse instead of returning it to the OS after every op.

A training step allocates and frees the same large temporaries every time (im2col columns,
activations, gradients). glibc's malloc serves blocks above a dynamic threshold with ``mmap``
and returns them on ``free``, and trims the top of the heap when it holds more than about
twice that threshold free; on many machines the next step then pays a page fault on every
4 KiB of every such array. Raising both thresholds once (``mallopt``) keeps that memory in the
heap, where the next step reuses it: on the benchmark CNN this cut a step by about a third.

It is process-wide, like ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` (which it
never overrides: if either is set, it does nothing), and it is skipped off glibc. The cost is
that up to ``TRIM`` bytes of freed memory stay with the process. Set ``TAPEGRAD_TUNE_MALLOC=0``
before importing tapegrad to keep the system's defaults.
"""

from __future__ import annotations

import ctypes
import os
import sys

MMAP = 32 << 20  # blocks below 32 MiB (glibc's largest allowed) come from the heap
TRIM = 128 << 20  # keep up to 128 MiB of free heap for reuse
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")

tuned = False  # whether the thresholds were set (tapegrad._malloc.tuned)


def tune() -> bool:
    """Raise glibc's mmap and trim thresholds unless told not to; whether it did."""
    global tuned
    if os.environ.get("TAPEGRAD_TUNE_MALLOC", "1") == "0" or any(k in os.environ for k in _ENV):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl or another libc: nothing to tune
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM))
    return tuned
