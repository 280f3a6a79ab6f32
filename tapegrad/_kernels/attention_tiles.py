"""The products of the small-head attention kernels (``attention_heads``), in register tiles.

``_mm`` computes a block's products in tiles of four rows by sixteen columns (64 running sums:
eight chains of multiply-adds in flight), ``_mm8`` those eight columns wide, along a contiguous
axis; the sums are written as scalars for LLVM's SLP vectorizer to pack
(``attention_heads._slp``). ``attention_heads``' block kernels call them at their compiled
code's addresses (``twins.call_at``): compiled once each. Imported only when numba is selected.
"""

from __future__ import annotations

from .._backend import np
from . import jit
from .twins import call_at

U = np.uint64


@jit(fastmath={"contract"})
def _mm8(a, ao, ars, acs, m, n, t, to, ts, w, out, oo, os):  # type: ignore[no-untyped-def]
    """``out[oo + r * os + j] = sum_c a[ao + r * ars + c * acs] * t[to + c * ts + j]`` for
    r < m, c < n and j < w (a multiple of 8): tiles of four rows by eight columns, their 32
    running sums independent (a sum's chain of multiply-adds waits 4 cycles a step). A last
    tile of fewer rows repeats its last row (the same sums written twice)."""
    z = out.dtype.type(0)
    last = U(m - 1)
    for r0 in range(U(0), U(m), U(4)):
        p0 = U(ao) + r0 * U(ars)
        p1 = U(ao) + min(r0 + U(1), last) * U(ars)
        p2 = U(ao) + min(r0 + U(2), last) * U(ars)
        p3 = U(ao) + min(r0 + U(3), last) * U(ars)
        o0 = U(oo) + r0 * U(os)
        o1 = U(oo) + min(r0 + U(1), last) * U(os)
        o2 = U(oo) + min(r0 + U(2), last) * U(os)
        o3 = U(oo) + min(r0 + U(3), last) * U(os)
        for j0 in range(U(0), U(w), U(8)):
            a0_0 = a0_1 = a0_2 = a0_3 = a0_4 = a0_5 = a0_6 = a0_7 = z
            a1_0 = a1_1 = a1_2 = a1_3 = a1_4 = a1_5 = a1_6 = a1_7 = z
            a2_0 = a2_1 = a2_2 = a2_3 = a2_4 = a2_5 = a2_6 = a2_7 = z
            a3_0 = a3_1 = a3_2 = a3_3 = a3_4 = a3_5 = a3_6 = a3_7 = z
            for c in range(U(n)):
                tb = U(to) + c * U(ts) + j0
                tv = t[tb : tb + U(8)]
                t0 = tv[0]
                t1 = tv[1]
                t2 = tv[2]
                t3 = tv[3]
                t4 = tv[4]
                t5 = tv[5]
                t6 = tv[6]
                t7 = tv[7]
                cc = c * U(acs)
                x0 = a[p0 + cc]
                x1 = a[p1 + cc]
                x2 = a[p2 + cc]
                x3 = a[p3 + cc]
                a0_0 += x0 * t0
                a0_1 += x0 * t1
                a0_2 += x0 * t2
                a0_3 += x0 * t3
                a0_4 += x0 * t4
                a0_5 += x0 * t5
                a0_6 += x0 * t6
                a0_7 += x0 * t7
                a1_0 += x1 * t0
                a1_1 += x1 * t1
                a1_2 += x1 * t2
                a1_3 += x1 * t3
                a1_4 += x1 * t4
                a1_5 += x1 * t5
                a1_6 += x1 * t6
                a1_7 += x1 * t7
                a2_0 += x2 * t0
                a2_1 += x2 * t1
                a2_2 += x2 * t2
                a2_3 += x2 * t3
                a2_4 += x2 * t4
                a2_5 += x2 * t5
                a2_6 += x2 * t6
                a2_7 += x2 * t7
                a3_0 += x3 * t0
                a3_1 += x3 * t1
                a3_2 += x3 * t2
                a3_3 += x3 * t3
                a3_4 += x3 * t4
                a3_5 += x3 * t5
                a3_6 += x3 * t6
                a3_7 += x3 * t7
            ov = out[o0 + j0 : o0 + j0 + U(8)]
            ov[0] = a0_0
            ov[1] = a0_1
            ov[2] = a0_2
            ov[3] = a0_3
            ov[4] = a0_4
            ov[5] = a0_5
            ov[6] = a0_6
            ov[7] = a0_7
            ov = out[o1 + j0 : o1 + j0 + U(8)]
            ov[0] = a1_0
            ov[1] = a1_1
            ov[2] = a1_2
            ov[3] = a1_3
            ov[4] = a1_4
            ov[5] = a1_5
            ov[6] = a1_6
            ov[7] = a1_7
            ov = out[o2 + j0 : o2 + j0 + U(8)]
            ov[0] = a2_0
            ov[1] = a2_1
            ov[2] = a2_2
            ov[3] = a2_3
            ov[4] = a2_4
            ov[5] = a2_5
            ov[6] = a2_6
            ov[7] = a2_7
            ov = out[o3 + j0 : o3 + j0 + U(8)]
            ov[0] = a3_0
            ov[1] = a3_1
            ov[2] = a3_2
            ov[3] = a3_3
            ov[4] = a3_4
            ov[5] = a3_5
            ov[6] = a3_6
            ov[7] = a3_7


@jit(fastmath={"contract"})
def _mm(a, ao, ars, acs, m, n, t, to, ts, w, out, oo, os, f8):  # type: ignore[no-untyped-def]
    """``_mm8``'s product in tiles of four rows by sixteen columns (64 running sums: twice
    the chains in flight), a last block of columns overlapping the one before when w is an odd
    multiple of 8; w = 8 by ``_mm8``'s compiled code at ``f8``."""
    if w < 16:
        call_at(f8, (a, ao, ars, acs, m, n, t, to, ts, w, out, oo, os))
        return
    z = out.dtype.type(0)
    last = U(m - 1)
    for r0 in range(U(0), U(m), U(4)):
        p0 = U(ao) + r0 * U(ars)
        p1 = U(ao) + min(r0 + U(1), last) * U(ars)
        p2 = U(ao) + min(r0 + U(2), last) * U(ars)
        p3 = U(ao) + min(r0 + U(3), last) * U(ars)
        o0 = U(oo) + r0 * U(os)
        o1 = U(oo) + min(r0 + U(1), last) * U(os)
        o2 = U(oo) + min(r0 + U(2), last) * U(os)
        o3 = U(oo) + min(r0 + U(3), last) * U(os)
        for j in range(U(0), U(w), U(16)):
            j0 = min(j, U(w - 16))
            a0_0 = a0_1 = a0_2 = a0_3 = a0_4 = a0_5 = a0_6 = a0_7 = z
            a0_8 = a0_9 = a0_10 = a0_11 = a0_12 = a0_13 = a0_14 = a0_15 = z
            a1_0 = a1_1 = a1_2 = a1_3 = a1_4 = a1_5 = a1_6 = a1_7 = z
            a1_8 = a1_9 = a1_10 = a1_11 = a1_12 = a1_13 = a1_14 = a1_15 = z
            a2_0 = a2_1 = a2_2 = a2_3 = a2_4 = a2_5 = a2_6 = a2_7 = z
            a2_8 = a2_9 = a2_10 = a2_11 = a2_12 = a2_13 = a2_14 = a2_15 = z
            a3_0 = a3_1 = a3_2 = a3_3 = a3_4 = a3_5 = a3_6 = a3_7 = z
            a3_8 = a3_9 = a3_10 = a3_11 = a3_12 = a3_13 = a3_14 = a3_15 = z
            for c in range(U(n)):
                tb = U(to) + c * U(ts) + j0
                tv = t[tb : tb + U(16)]
                t0 = tv[0]
                t1 = tv[1]
                t2 = tv[2]
                t3 = tv[3]
                t4 = tv[4]
                t5 = tv[5]
                t6 = tv[6]
                t7 = tv[7]
                t8 = tv[8]
                t9 = tv[9]
                t10 = tv[10]
                t11 = tv[11]
                t12 = tv[12]
                t13 = tv[13]
                t14 = tv[14]
                t15 = tv[15]
                cc = c * U(acs)
                x0 = a[p0 + cc]
                x1 = a[p1 + cc]
                x2 = a[p2 + cc]
                x3 = a[p3 + cc]
                a0_0 += x0 * t0
                a0_1 += x0 * t1
                a0_2 += x0 * t2
                a0_3 += x0 * t3
                a0_4 += x0 * t4
                a0_5 += x0 * t5
                a0_6 += x0 * t6
                a0_7 += x0 * t7
                a0_8 += x0 * t8
                a0_9 += x0 * t9
                a0_10 += x0 * t10
                a0_11 += x0 * t11
                a0_12 += x0 * t12
                a0_13 += x0 * t13
                a0_14 += x0 * t14
                a0_15 += x0 * t15
                a1_0 += x1 * t0
                a1_1 += x1 * t1
                a1_2 += x1 * t2
                a1_3 += x1 * t3
                a1_4 += x1 * t4
                a1_5 += x1 * t5
                a1_6 += x1 * t6
                a1_7 += x1 * t7
                a1_8 += x1 * t8
                a1_9 += x1 * t9
                a1_10 += x1 * t10
                a1_11 += x1 * t11
                a1_12 += x1 * t12
                a1_13 += x1 * t13
                a1_14 += x1 * t14
                a1_15 += x1 * t15
                a2_0 += x2 * t0
                a2_1 += x2 * t1
                a2_2 += x2 * t2
                a2_3 += x2 * t3
                a2_4 += x2 * t4
                a2_5 += x2 * t5
                a2_6 += x2 * t6
                a2_7 += x2 * t7
                a2_8 += x2 * t8
                a2_9 += x2 * t9
                a2_10 += x2 * t10
                a2_11 += x2 * t11
                a2_12 += x2 * t12
                a2_13 += x2 * t13
                a2_14 += x2 * t14
                a2_15 += x2 * t15
                a3_0 += x3 * t0
                a3_1 += x3 * t1
                a3_2 += x3 * t2
                a3_3 += x3 * t3
                a3_4 += x3 * t4
                a3_5 += x3 * t5
                a3_6 += x3 * t6
                a3_7 += x3 * t7
                a3_8 += x3 * t8
                a3_9 += x3 * t9
                a3_10 += x3 * t10
                a3_11 += x3 * t11
                a3_12 += x3 * t12
                a3_13 += x3 * t13
                a3_14 += x3 * t14
                a3_15 += x3 * t15
            ov = out[o0 + j0 : o0 + j0 + U(16)]
            ov[0] = a0_0
            ov[1] = a0_1
            ov[2] = a0_2
            ov[3] = a0_3
            ov[4] = a0_4
            ov[5] = a0_5
            ov[6] = a0_6
            ov[7] = a0_7
            ov[8] = a0_8
            ov[9] = a0_9
            ov[10] = a0_10
            ov[11] = a0_11
            ov[12] = a0_12
            ov[13] = a0_13
            ov[14] = a0_14
            ov[15] = a0_15
            ov = out[o1 + j0 : o1 + j0 + U(16)]
            ov[0] = a1_0
            ov[1] = a1_1
            ov[2] = a1_2
            ov[3] = a1_3
            ov[4] = a1_4
            ov[5] = a1_5
            ov[6] = a1_6
            ov[7] = a1_7
            ov[8] = a1_8
            ov[9] = a1_9
            ov[10] = a1_10
            ov[11] = a1_11
            ov[12] = a1_12
            ov[13] = a1_13
            ov[14] = a1_14
            ov[15] = a1_15
            ov = out[o2 + j0 : o2 + j0 + U(16)]
            ov[0] = a2_0
            ov[1] = a2_1
            ov[2] = a2_2
            ov[3] = a2_3
            ov[4] = a2_4
            ov[5] = a2_5
            ov[6] = a2_6
            ov[7] = a2_7
            ov[8] = a2_8
            ov[9] = a2_9
            ov[10] = a2_10
            ov[11] = a2_11
            ov[12] = a2_12
            ov[13] = a2_13
            ov[14] = a2_14
            ov[15] = a2_15
            ov = out[o3 + j0 : o3 + j0 + U(16)]
            ov[0] = a3_0
            ov[1] = a3_1
            ov[2] = a3_2
            ov[3] = a3_3
            ov[4] = a3_4
            ov[5] = a3_5
            ov[6] = a3_6
            ov[7] = a3_7
            ov[8] = a3_8
            ov[9] = a3_9
            ov[10] = a3_10
            ov[11] = a3_11
            ov[12] = a3_12
            ov[13] = a3_13
            ov[14] = a3_14
            ov[15] = a3_15
