"""Batched products of small matrices on the kernels' threads: numpy's OpenBLAS ``?gemm``, one
call per matrix, from a ``prange``.

numpy's batched ``matmul`` calls BLAS once per matrix, one after another: attention's products
are (batch x heads) matrices of 64 x 64 x 32 and smaller, each below OpenBLAS's threshold for
splitting a product, so they run on one core. ``bmm`` makes the same calls (row-major
``cblas_?gemm``, the same transposes and leading dimensions numpy passes, so the same bits) from
a ``prange`` over the matrices, on numba's threads: the pool OpenBLAS hands its own parallel
work to (``threads.active``), so no other thread competes for the cores. The function is
called through its address (an ``intrinsic``: LLVM ``inttoptr`` and a call), which stays an
argument, so the kernel is cached like the others.

Only products each OpenBLAS runs on the calling thread qualify (``MAX_WORK``): a larger one
would hand its jobs to the pool from inside the ``prange``, where GNU OpenMP runs a nested
region on one thread and the jobs, which wait on each other, would never finish.
Imported only when numba is selected.
"""

from __future__ import annotations

import ctypes
from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads

# m * n * k of one product: OpenBLAS splits a product from 65536 * GEMM_MULTITHREAD_THRESHOLD
# (4 in its builds, numpy's included); at or below it the product runs on the caller's thread
MAX_WORK = 65536 * 4
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_gemm: dict[Any, int] = {}


def _intrinsic() -> Any:
    """``call_gemm(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc)``: a row-major
    ``cblas_?gemm`` at address ``fn`` with 64-bit integers, beta 0 (``alpha``'s type picks s or d)."""
    from llvmlite import ir  # noqa: PLC0415 - numba's own dependency
    from numba.core import types  # noqa: PLC0415
    from numba.core.extending import intrinsic  # noqa: PLC0415

    @intrinsic
    def call_gemm(typingctx: Any, fn: Any, ta: Any, tb: Any, m: Any, n: Any, k: Any, alpha: Any,
                  a: Any, lda: Any, b: Any, ldb: Any, c: Any, ldc: Any) -> Any:
        if alpha not in (types.float32, types.float64):
            return None
        i64, ip = types.int64, types.intp
        sig = types.void(ip, i64, i64, i64, i64, i64, alpha, ip, i64, ip, i64, ip, i64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            i8p = ir.IntType(8).as_pointer()
            i32, l64 = ir.IntType(32), ir.IntType(64)
            fl = ir.FloatType() if alpha == types.float32 else ir.DoubleType()
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, l64, l64, l64, fl, i8p, l64,
                                                   i8p, l64, fl, i8p, l64])
            f = builder.inttoptr(args[0], fnty.as_pointer())
            (ta_, tb_, m_, n_, k_, al, pa, la, pb, lb, pc, lc) = args[1:]
            builder.call(f, [ir.Constant(i32, ROW_MAJOR), builder.trunc(ta_, i32),
                             builder.trunc(tb_, i32), m_, n_, k_, al,
                             builder.inttoptr(pa, i8p), la, builder.inttoptr(pb, i8p), lb,
                             ir.Constant(fl, 0.0), builder.inttoptr(pc, i8p), lc])
            return context.get_dummy_value()

        return sig, codegen

    return call_gemm


call_gemm = _intrinsic()


@jit(parallel=True)
def _bmm(fn, n0, n1, pa, sa, pb, sb, pc, sc, ta, tb, m, n, k, lda, ldb, ldc, alpha):  # type: ignore[no-untyped-def]
    for i in prange(n0 * n1):
        i0 = i // n1
        i1 = i - i0 * n1
        call_gemm(fn, ta, tb, m, n, k, alpha, pa + i0 * sa[0] + i1 * sa[1], lda,
                  pb + i0 * sb[0] + i1 * sb[1], ldb, pc + i0 * sc[0] + i1 * sc[1], ldc)


def _address(dtype: Any) -> int | None:
    """The address of numpy's OpenBLAS ``cblas_sgemm`` / ``cblas_dgemm`` (64-bit integers), or
    None."""
    key = np.dtype(dtype)
    if key not in _gemm:
        from .threads import _numpy_openblas  # noqa: PLC0415

        found = _numpy_openblas()
        name = "scipy_cblas_sgemm64_" if key == np.float32 else "scipy_cblas_dgemm64_"
        f = None if found is None else getattr(found[0], name, None)
        _gemm[key] = 0 if f is None else int(ctypes.cast(f, ctypes.c_void_p).value or 0)
    return _gemm[key] or None


def _operand(x: Any) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a row-major BLAS operand, or None."""
    isz = x.itemsize
    s_row, s_col = x.strides[-2], x.strides[-1]
    rows, cols = x.shape[-2:]
    if s_col == isz and s_row % isz == 0 and s_row // isz >= cols:
        return NO_TRANS, s_row // isz
    if s_row == isz and s_col % isz == 0 and s_col // isz >= rows:
        return TRANS, s_col // isz
    return None


def bmm(a: Any, b: Any, out: Any) -> bool:
    """``out[...] = a @ b`` for (..., M, K), (..., K, N) and (..., M, N) arrays of one float dtype
    with the same one or two leading dimensions (no broadcasting), on the kernels' threads.
    Returns False, touching nothing, where it does not apply (the caller then uses numpy):
    products too large (``MAX_WORK``), of one row or column (numpy calls ``?gemv`` for those:
    other bits), matrices BLAS cannot read in place, or no OpenBLAS ``?gemm`` to call."""
    lead = a.shape[:-2]
    if not 1 <= len(lead) <= 2 or b.shape[:-2] != lead or out.shape[:-2] != lead:
        return False
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if b.shape[-2] != k or out.shape[-2:] != (m, n) or min(m, n) < 2 or k < 1 or m * n * k > MAX_WORK:
        return False  # a product with one row or column: numpy's matmul calls ?gemv
    if not (a.dtype == b.dtype == out.dtype) or a.dtype not in (np.float32, np.float64):
        return False
    oa, ob = _operand(a), _operand(b)
    isz = out.itemsize
    if oa is None or ob is None or out.strides[-1] != isz:
        return False
    ldc = out.strides[-2] // isz
    if out.strides[-2] % isz or ldc < n:
        return False
    fn = _address(a.dtype)
    if fn is None:
        return False

    def lead_strides(x: Any) -> Any:
        s = (0,) * (2 - len(lead)) + x.strides[:-2]
        return np.array(s, dtype=np.int64)

    n0, n1 = ((1,) + lead) if len(lead) == 1 else lead
    _bmm(fn, np.int64(n0), np.int64(n1),
         np.intp(a.ctypes.data), lead_strides(a), np.intp(b.ctypes.data), lead_strides(b),
         np.intp(out.ctypes.data), lead_strides(out), np.int64(oa[0]), np.int64(ob[0]),
         np.int64(m), np.int64(n), np.int64(k), np.int64(oa[1]), np.int64(ob[1]), np.int64(ldc),
         a.dtype.type(1))
    return True


from . import threads  # noqa: E402 - the entry below; threads needs nothing from this module


def batched_matmul(a: Any, b: Any, out: Any) -> Any:
    """``a @ b`` (into ``out`` when given): the (B x H) small products on the kernels' threads
    when two threads are worth it and ``bmm`` takes them, else numpy's matmul (the
    reference's arithmetic)."""
    if threads.worth(a.shape[0] * a.shape[1], 2):
        o = np.empty(a.shape[:-1] + b.shape[-1:], a.dtype) if out is None else out
        if bmm(a, b, o):
            return o
    return np.matmul(a, b, out=out)


# --------------------------------------------------------------------------------------------
# a linear layer's product as (w @ x.T).T: OpenBLAS runs ``x @ w.T`` (its B operand transposed)
# 5-10% slower than ``w @ x.T`` at few rows and wide layers (MLP 784-512-512 at batch 128,
# float32, one thread: 1.20 against 1.14 ms and 0.82 against 0.78 ms with the bias below; at
# 1024 rows x 128 -> 512 it is 3x slower); the transpose back to C order is the bias pass
# ``nn.linear`` makes anyway. The dispatcher chooses between the two by measurement.
# --------------------------------------------------------------------------------------------


@jit()
def _t_bias(yt, b, y, i0, i1):  # type: ignore[no-untyped-def]
    """Rows i0 to i1 of ``y = yt.T + b`` (``b`` empty: no bias), in blocks of 16 rows: each
    row of ``yt`` is read 16 values at a time."""
    n_o = yt.shape[0]
    for r0 in range(i0, i1, 16):
        r1 = min(r0 + 16, i1)
        if b.size:
            for j in range(n_o):
                bj = b[j]
                for i in range(r0, r1):
                    y[i, j] = yt[j, i] + bj
        else:
            for j in range(n_o):
                for i in range(r0, r1):
                    y[i, j] = yt[j, i]


@jit(parallel=True)
def _t_bias_par(yt, b, y):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(y.shape[0], p, i, 16)
        _t_bias(yt, b, y, i0, i1)


def linear_t(x: Any, w: Any, b: Any) -> Any:
    """``x @ w.T + b`` (C-contiguous (N, O)) for 2-D ``x`` (N, I), ``w`` (O, I) and ``b`` (O,)
    or None, computed as ``w @ x.T`` and transposed back with the bias added in the same pass."""
    yt = w @ x.T  # (O, N)
    y = np.empty((x.shape[0], w.shape[0]), yt.dtype)
    bb = yt[:0, 0] if b is None else b
    if threads.worth(y.size, 1 << 16):
        _t_bias_par(yt, bb, y)
    else:
        _t_bias(yt, bb, y, 0, y.shape[0])
    return y
