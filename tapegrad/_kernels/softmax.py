"""Softmax and log-softmax along the last axis, forward and backward, one pass per row (numba).

numpy's softmax makes five passes over the whole array (max, subtract, exp, sum, divide) with
broadcasts along short rows; here each row is read once into cache and finished there. The
float32 ``exp`` is a polynomial (Cephes' ``expf``: ``2^n * p(r)``, ``|r| <= ln(2) / 2``,
within 1 ulp of the correctly rounded result over the range softmax uses) with ``2^n`` built
from the exponent bits, so LLVM vectorises the row loop; arguments below -87.3 give 0 (no
subnormals), NaN stays NaN. float64 uses numpy's ``exp``. ``row_sum`` and ``row_max`` (used by
the attention kernel) keep eight accumulators. The softmax kernels index the flat arrays at
each row's offset (a view per row costs reference counting, more than a row of 64), sum with
reassociation allowed in small helpers (``flat_sum``, ``flat_dot``: the exp itself is compiled
without it, its range reduction depends on the order) and take a row's maximum on the floats'
bits as integers (``flat_max``: numba's float maximum does not vectorise). Measured on rows of
64 (4096 rows, float32, one thread): forward 0.34 -> 0.22 ms (the exp is 0.14 of it),
backward 0.18 -> 0.045 ms.

Cross-entropy on (N, C) logits reuses the row pass: each row's shift and log-sum-exp, then the
loss at the target class (or against probability targets) and the gradient
``softmax - one_hot`` (or ``softmax * sum(t) - t``), one call each instead of about ten numpy
calls on a 64 x 10 batch. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .twins import call_at, entry_by

U = np.uint64


@intrinsic
def _bits_to_f32(typingctx, x):  # type: ignore[no-untyped-def]
    """The float32 whose bits are the int32 ``x``."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def _bits_to_float(typingctx, x):  # type: ignore[no-untyped-def]
    """The float of ``x``'s width (int32: float32, int64: float64) whose bits are ``x``."""
    if x == types.int32:
        sig, ty = types.float32(types.int32), ir.FloatType()
    else:
        sig, ty = types.float64(types.int64), ir.DoubleType()

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ty)

    return sig, codegen


def fexp(x: Any) -> Any:
    """``exp(x)`` in the kernels: the polynomial for float32, ``np.exp`` for float64."""
    return np.exp(x)


@overload(fexp)
def _fexp(x):  # type: ignore[no-untyped-def]
    if x == types.float32:

        def impl(x):  # type: ignore[no-untyped-def]
            t = x * np.float32(1.4426950408889634)
            t = min(max(t, np.float32(-126.0)), np.float32(126.0))
            n = np.floor(t + np.float32(0.5))
            r = x - n * np.float32(0.693359375)
            r = r + n * np.float32(2.12194440e-4)
            p = np.float32(1.9875691500e-4)
            p = p * r + np.float32(1.3981999507e-3)
            p = p * r + np.float32(8.3334519073e-3)
            p = p * r + np.float32(4.1665795894e-2)
            p = p * r + np.float32(1.6666665459e-1)
            p = p * r + np.float32(5.0000001201e-1)
            p = p * r * r + r + np.float32(1.0)
            two_n = _bits_to_f32((np.int32(n) + np.int32(127)) << np.int32(23))
            return np.float32(0.0) if x < np.float32(-87.33654) else p * two_n

        return impl

    def impl_numpy(x):  # type: ignore[no-untyped-def]
        return np.exp(x)

    return impl_numpy


@jit()
def row_max(s):  # type: ignore[no-untyped-def]
    """The maximum of a 1-D array (NaN ignored, -inf when empty), in eight running maxima."""
    n = s.size
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = s.dtype.type(-np.inf)
    n8 = U(n - n % 8)
    for j in range(U(0), n8, U(8)):
        a0 = max(a0, s[j])
        a1 = max(a1, s[j + U(1)])
        a2 = max(a2, s[j + U(2)])
        a3 = max(a3, s[j + U(3)])
        a4 = max(a4, s[j + U(4)])
        a5 = max(a5, s[j + U(5)])
        a6 = max(a6, s[j + U(6)])
        a7 = max(a7, s[j + U(7)])
    m = max(a0, a1, a2, a3, a4, a5, a6, a7)
    for j in range(n8, U(n)):
        m = max(m, s[j])
    return m


@jit()
def row_sum(s):  # type: ignore[no-untyped-def]
    """The sum of a 1-D array, in eight interleaved partial sums."""
    n = s.size
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = s.dtype.type(0)
    n8 = U(n - n % 8)
    for j in range(U(0), n8, U(8)):
        a0 += s[j]
        a1 += s[j + U(1)]
        a2 += s[j + U(2)]
        a3 += s[j + U(3)]
        a4 += s[j + U(4)]
        a5 += s[j + U(5)]
        a6 += s[j + U(6)]
        a7 += s[j + U(7)]
    tot = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
    for j in range(n8, U(n)):
        tot += s[j]
    return tot


@jit()
def exp_row(s, m):  # type: ignore[no-untyped-def]
    """``s = exp(s - m)`` in place; returns the sum."""
    for j in range(U(s.size)):
        s[j] = fexp(s[j] - m)
    return row_sum(s)


@jit(fastmath={"reassoc", "contract"})
def flat_sum(a, b, n):  # type: ignore[no-untyped-def]
    """The sum of ``a[b:b + n]`` (flat ``a``), reassociated so that it vectorises."""
    s = a.dtype.type(0)
    for j in range(U(n)):
        s += a[b + j]
    return s


@jit(fastmath={"reassoc", "contract"})
def flat_dot(a, c, b, n):  # type: ignore[no-untyped-def]
    """``sum(a[b:b + n] * c[b:b + n])`` (flat arrays), reassociated so that it vectorises."""
    s = a.dtype.type(0)
    for j in range(U(n)):
        s += a[b + j] * c[b + j]
    return s


def as_int(a: Any) -> Any:
    """``a`` (float32 / float64) viewed as integers of its width, for ``flat_max``."""
    return a.view(np.int32 if a.dtype == np.float32 else np.int64)


@overload(as_int)
def _as_int(a):  # type: ignore[no-untyped-def]
    if a.dtype == types.float32:
        return lambda a: a.view(np.int32)
    return lambda a: a.view(np.int64)


def _int_consts(ai: Any) -> Any:
    """The sign shift, the magnitude mask and the lowest value of ``ai``'s integer type."""
    raise NotImplementedError  # compiled only


@overload(_int_consts)
def _int_consts_impl(ai):  # type: ignore[no-untyped-def]
    if ai.dtype == types.int32:
        return lambda ai: (np.int32(31), np.int32(0x7FFFFFFF), np.int32(-0x80000000))
    return lambda ai: (
        np.int64(63), np.int64(0x7FFFFFFFFFFFFFFF), np.int64(-0x8000000000000000)
    )


@jit()
def flat_max(ai, b, n):  # type: ignore[no-untyped-def]
    """The maximum of ``a[b:b + n]`` for a flat float array ``a`` given as ``ai = as_int(a)``
    (made once by the caller: a view made per row costs more than a short row), compared as
    integers: a float's bits with the magnitude bits flipped when it is negative order as the
    floats do, and an integer maximum vectorises where a float one does not (3x on rows of
    64). A NaN with the sign bit clear is the maximum, one with it set is below -inf; an empty
    range gives that negative NaN."""
    it = ai.dtype.type
    sh, mag, m = _int_consts(ai)
    for j in range(U(n)):
        v = ai[b + j]
        m = max(m, it(v ^ ((v >> sh) & mag)))
    return _bits_to_float(it(m ^ ((m >> sh) & mag)))


@jit()
def _softmax(x, out, log, r0, r1):  # type: ignore[no-untyped-def]
    """Rows r0 to r1 (``log``: 1 for log-softmax)."""
    n_c = x.shape[1]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    dt = x.dtype.type
    xi = as_int(xf)
    for r in range(r0, r1):
        b = U(r * n_c)
        m = flat_max(xi, b, n_c)
        if not np.isfinite(m):  # as the reference's max shift: none when the max is not finite
            m = dt(0)
        for j in range(U(n_c)):
            of[b + j] = fexp(xf[b + j] - m)
        tot = flat_sum(of, b, n_c)
        if log:
            lse = np.log(tot)
            for j in range(U(n_c)):
                of[b + j] = (xf[b + j] - m) - lse
        else:
            inv = dt(1) / tot if tot != 0 else dt(np.nan)  # 0 / 0, as numpy
            for j in range(U(n_c)):
                of[b + j] *= inv


@jit()
def _softmax_grad(g, y, out, log, r0, r1):  # type: ignore[no-untyped-def]
    """Rows r0 to r1."""
    n_c = y.shape[1]
    gf = g.reshape(-1)
    yf = y.reshape(-1)
    of = out.reshape(-1)
    for r in range(r0, r1):
        b = U(r * n_c)
        if log:  # g - exp(y) * sum(g)
            c = flat_sum(gf, b, n_c)
            for j in range(U(n_c)):
                of[b + j] = gf[b + j] - fexp(yf[b + j]) * c
        else:  # y * (g - sum(g * y))
            c = flat_dot(gf, yf, b, n_c)
            for j in range(U(n_c)):
                of[b + j] = yf[b + j] * (gf[b + j] - c)


@jit(parallel=True)
def _softmax_par(x, out, log, fp):  # type: ignore[no-untyped-def]
    """``_softmax`` of the rows in chunks, one per thread, each a call of its compiled code
    at ``fp`` (``twins.entry``)."""
    p = num_threads()
    for i in prange(p):
        r0, r1 = bounds(x.shape[0], p, i, 1)
        call_at(fp, (x, out, log, r0, r1))


@jit(parallel=True)
def _softmax_grad_par(g, y, out, log, fp):  # type: ignore[no-untyped-def]
    """``_softmax_grad`` of the rows in chunks, one per thread (``fp``: its compiled code)."""
    p = num_threads()
    for i in prange(p):
        r0, r1 = bounds(y.shape[0], p, i, 1)
        call_at(fp, (g, y, out, log, r0, r1))


def _rows(a: Any) -> Any:
    return np.ascontiguousarray(a).reshape(-1, a.shape[-1])


def softmax(x: Any, log: bool, threads: bool = False) -> Any:
    """softmax (or log-softmax) of ``x`` along its last axis (``threads``: the rows in chunks,
    one per thread; the same bits)."""
    out = np.empty(x.shape, x.dtype)
    x2, o2, lg = _rows(x), out.reshape(-1, x.shape[-1]), int(log)
    if threads:
        fp = entry_by(("softmax", x.dtype.char), _softmax, x2[:0], o2[:0], lg, 0, 0)
        _softmax_par(x2, o2, lg, fp)
    else:
        _softmax(x2, o2, lg, 0, x2.shape[0])
    return out


def softmax_grad(g: Any, y: Any, log: bool, threads: bool = False) -> Any:
    """The VJP of ``softmax`` (or log-softmax) along the last axis, from its output ``y``."""
    out = np.empty(y.shape, y.dtype)
    g2, y2, o2, lg = _rows(g), _rows(y), out.reshape(-1, y.shape[-1]), int(log)
    if threads:
        fp = entry_by(("softmax_grad", y.dtype.char), _softmax_grad, g2[:0], y2[:0], o2[:0], lg,
                      0, 0)
        _softmax_grad_par(g2, y2, o2, lg, fp)
    else:
        _softmax_grad(g2, y2, o2, lg, 0, y2.shape[0])
    return out


# --------------------------------------------------------------------------------------------
# cross-entropy on (N, C) logits: the log-sum-exp of each row and what the loss needs from it,
# in one pass per row (the numpy formulas were about ten calls of a few microseconds each on
# a 64 x 10 batch, several times the arithmetic)
# --------------------------------------------------------------------------------------------


@jit()
def _row_lse(xf, xi, b, n_c, buf):  # type: ignore[no-untyped-def]
    """The row's shift ``m`` (its maximum, 0 when not finite) and the sum of
    ``buf[j] = exp(x[j] - m)`` (written into the scratch row ``buf``: a sum inside the exp loop
    would keep the exp from vectorising, 5x slower)."""
    dt = xf.dtype.type
    m = flat_max(xi, b, n_c)
    if not np.isfinite(m):
        m = dt(0)
    for j in range(U(n_c)):
        buf[j] = fexp(xf[b + j] - m)
    return m, flat_sum(buf, U(0), n_c)


@jit()
def _ce_targets(t, c, ignore_index, safe, coef):  # type: ignore[no-untyped-def]
    """Class indices made safe to gather (ignored ones: 0) and 1 / 0 validity coefficients;
    returns the number of valid targets and the position of the first out-of-range one
    (-1 when none)."""
    n_valid = 0
    for i in range(t.size):
        v = t[i]
        if v == ignore_index:
            safe[i] = 0
            coef[i] = 0
        elif v < 0 or v >= c:
            return n_valid, i
        else:
            safe[i] = v
            coef[i] = 1
            n_valid += 1
    return n_valid, -1


@jit()
def _ce(x, t, coef, out):  # type: ignore[no-untyped-def]
    n_r, n_c = x.shape
    xf = x.reshape(-1)
    xi = as_int(xf)
    buf = np.empty(n_c, x.dtype)
    tot = 0.0
    for r in range(n_r):
        b = U(r * n_c)
        m, s = _row_lse(xf, xi, b, n_c, buf)
        v = ((np.log(s) + m) - xf[b + U(t[r])]) * coef[r]
        if out.size:
            out[r] = v
        tot += v
    return tot


@jit()
def _ce_grad(x, g, t, coef, out):  # type: ignore[no-untyped-def]
    n_r, n_c = x.shape
    xf = x.reshape(-1)
    xi = as_int(xf)
    of = out.reshape(-1)
    buf = np.empty(n_c, x.dtype)
    for r in range(n_r):
        b = U(r * n_c)
        m, s = _row_lse(xf, xi, b, n_c, buf)
        gr = (g[r] if g.size > 1 else g[0]) * coef[r]
        for j in range(U(n_c)):
            of[b + j] = buf[j] / s
        of[b + U(t[r])] -= 1
        for j in range(U(n_c)):
            of[b + j] *= gr


@jit()
def _ce_probs(x, t, out):  # type: ignore[no-untyped-def]
    n_r, n_c = x.shape
    xf = x.reshape(-1)
    xi = as_int(xf)
    tf = t.reshape(-1)
    buf = np.empty(n_c, x.dtype)
    tot = 0.0
    for r in range(n_r):
        b = U(r * n_c)
        m, s = _row_lse(xf, xi, b, n_c, buf)
        ls = np.log(s)
        for j in range(U(n_c)):
            buf[j] = tf[b + j] * ((xf[b + j] - m) - ls)
        v = -flat_sum(buf, U(0), n_c)
        if out.size:
            out[r] = v
        tot += v
    return tot


@jit()
def _ce_probs_grad(x, t, g, gx, gt):  # type: ignore[no-untyped-def]
    n_r, n_c = x.shape
    xf = x.reshape(-1)
    xi = as_int(xf)
    tf = t.reshape(-1)
    dx = gx.reshape(-1)
    dtf = gt.reshape(-1)
    buf = np.empty(n_c, x.dtype)
    for r in range(n_r):
        b = U(r * n_c)
        m, s = _row_lse(xf, xi, b, n_c, buf)
        gr = g[r] if g.size > 1 else g[0]
        if dx.size:
            ts = flat_sum(tf, b, n_c) / s
            for j in range(U(n_c)):
                dx[b + j] = gr * (buf[j] * ts - tf[b + j])
        if dtf.size:
            ls = np.log(s)
            for j in range(U(n_c)):
                dtf[b + j] = -gr * ((xf[b + j] - m) - ls)


def ce_targets(t: Any, c: int, ignore_index: int, dtype: Any) -> tuple[Any, Any, int, int]:
    """For 1-d integer targets: the safe indices, the 1 / 0 coefficients (``dtype``), the
    number of valid targets and the position of the first out-of-range target (-1: none)."""
    safe = np.empty(t.shape, np.int64)
    coef = np.empty(t.shape, dtype)
    n_valid, bad = _ce_targets(t, c, ignore_index, safe, coef)
    return safe, coef, int(n_valid), int(bad)


def cross_entropy(x: Any, t: Any, coef: Any, total: bool) -> Any:
    """``(logsumexp(x) - x[t]) * coef`` per row of C-contiguous (N, C) ``x``, or their sum."""
    out = np.empty(x.shape[0] if not total else 0, x.dtype)
    tot = _ce(x, t, coef, out)
    return np.asarray(tot, dtype=x.dtype) if total else out


def cross_entropy_grad(x: Any, g: Any, t: Any, coef: Any) -> Any:
    """``(softmax(x) - one_hot(t)) * (g * coef)[:, None]``."""
    out = np.empty(x.shape, x.dtype)
    _ce_grad(x, np.ascontiguousarray(g, dtype=x.dtype).reshape(-1), t, coef, out)
    return out


def _c(a: Any) -> Any:
    """``a`` C-contiguous: the kernels index rows flat. A transposed operand (CLIP's loss
    over ``logits.T``) is copied, a few microseconds at 128x128 against the reference's
    numpy passes and its recorded softmax in backward."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def cross_entropy_probs(x: Any, t: Any, scale: float, total: bool) -> Any:
    """``-sum(t * log_softmax(x), axis=1)`` for (N, C) ``x`` and ``t``, or its sum times
    ``scale``."""
    out = np.empty(x.shape[0] if not total else 0, x.dtype)
    tot = _ce_probs(_c(x), _c(t), out)
    return np.asarray(tot * scale, dtype=x.dtype) if total else out


def cross_entropy_probs_grads(g: Any, x: Any, t: Any, scale: float, needs: Any) -> Any:
    """The gradients of ``cross_entropy_probs`` for x and t (None where ``needs`` says no)."""
    gs = np.ascontiguousarray(g * x.dtype.type(scale) if scale != 1.0 else g, dtype=x.dtype)
    gx = np.empty(x.shape if needs[0] else (0,), x.dtype)
    gt = np.empty(x.shape if needs[1] else (0,), x.dtype)
    _ce_probs_grad(_c(x), _c(t), gs.reshape(-1), gx, gt)
    return (gx if needs[0] else None), (gt if needs[1] else None)


# entries with the arguments of their references (ops/_softmax.py, ops/_loss.py)
def softmax_last(x: Any, axis: int) -> Any:
    return softmax(x, log=False)


def log_softmax_last(x: Any, axis: int) -> Any:
    return softmax(x, log=True)


def softmax_grad_last(xp: Any, g: Any, y: Any, axis: int) -> Any:
    return softmax_grad(g, y, log=False)


def log_softmax_grad_last(xp: Any, g: Any, y: Any, axis: int) -> Any:
    return softmax_grad(g, y, log=True)


def softmax_last_par(x: Any, axis: int) -> Any:
    return softmax(x, log=False, threads=True)


def log_softmax_last_par(x: Any, axis: int) -> Any:
    return softmax(x, log=True, threads=True)


def softmax_grad_last_par(xp: Any, g: Any, y: Any, axis: int) -> Any:
    return softmax_grad(g, y, log=False, threads=True)


def log_softmax_grad_last_par(xp: Any, g: Any, y: Any, axis: int) -> Any:
    return softmax_grad(g, y, log=True, threads=True)


def cross_entropy_grad_op(x: Any, g: Any, t: Any, coef: Any, total: bool) -> Any:
    return cross_entropy_grad(x, g, t, coef)


def ce_targets_op(x: Any, t: Any, c: int, ignore_index: int) -> tuple[Any, Any, int, int]:
    return ce_targets(t, c, ignore_index, x.dtype)


def cross_entropy_probs_grad_op(
    xp: Any, g: Any, x: Any, t: Any, scale: float, total: bool, i: int
) -> Any:
    return cross_entropy_probs_grads(g, x, t, scale, (i == 0, i == 1))[i]
