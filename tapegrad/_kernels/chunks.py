"""Contiguous chunks of a range, one per thread: the one parallel form of the kernels.

A parallel kernel is its serial kernel over a range (of elements, rows, channels, samples) run
as ``prange`` over ``numba.get_num_threads()`` chunks of that range, each chunk the serial
kernel's (``for i in prange(p): lo, hi = bounds(n, p, i, align)``): one thread runs it whole,
sixteen run sixteen chunks. Cuts fall on multiples of ``align`` (vector-aligned runs, or the
blocks a reduction sums in), so each element sees the serial kernel's arithmetic. Imported only
when numba is selected.
"""

from __future__ import annotations

from . import jit


@jit(inline="always")
def bounds(n, parts, i, align):  # type: ignore[no-untyped-def]
    """Chunk ``i`` of ``parts`` of ``range(n)``: cut at multiples of ``align``, balanced to
    within one ``align``; the last chunk ends at ``n`` (a chunk may be empty)."""
    units = n // align
    lo = units * i // parts * align
    hi = n if i == parts - 1 else units * (i + 1) // parts * align
    return lo, hi
