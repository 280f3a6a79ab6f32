"""numpy's pairwise summation, bit for bit, for fused loops that end in a sum (numba).

numpy sums a contiguous run of floats by blocks of at most 128 (eight accumulators, combined
as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, the rest added in order), halving
longer runs at a multiple of eight (``loops_utils.h.src``, ``pairwise_sum``). Imported only
when numba is selected.
"""

from __future__ import annotations

from . import jit


# typed up front: numba infers a recursive function's types only from explicit signatures
@jit(signatures=[f"{t}({t}[::1], int64, int64, {t})" for t in ("float32", "float64")])
def pairwise_sum(a, lo, n, zero):  # type: ignore[no-untyped-def]
    """The sum of ``a[lo:lo + n]`` (1-d, contiguous) in numpy's pairwise order; ``zero`` is
    a zero of ``a``'s dtype (a short run starts from it, as numpy's does)."""
    if n < 8:
        res = zero
        for i in range(n):
            res += a[lo + i]
        return res
    if n <= 128:
        r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
        r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
        i = 8
        end = n - n % 8
        while i < end:
            r0 += a[lo + i]
            r1 += a[lo + i + 1]
            r2 += a[lo + i + 2]
            r3 += a[lo + i + 3]
            r4 += a[lo + i + 4]
            r5 += a[lo + i + 5]
            r6 += a[lo + i + 6]
            r7 += a[lo + i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[lo + i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(a, lo, n2, zero) + pairwise_sum(a, lo + n2, n - n2, zero)
