"""Elementwise kernels (numba): one pass, unsigned flat indices so the loop vectorises.

``relu``: ``np.maximum(x, 0)`` on float32 broadcasts a Python int and was 3-4x slower than this
loop on the benchmark activations. Same values, NaN and the sign of zero included (``-0.0``
gives ``+0.0``, as numpy). ``leaky_relu``: one pass where the composition
``where(x > 0, x, slope * x)`` was three ops forward and four backward. ``add_rows``: a linear
layer's bias added to its GEMM's output in place.

Binary cross-entropy on probabilities and on logits: the loss (per element, or its sum) and
the gradients for input and target, each one loop, and the [0, 1] range check of the inputs
in one pass; on a GAN's 64 outputs the numpy formulas were ten to fifteen calls, several
times the arithmetic. The activations (and their gradients, ``activation.py``) have parallel
forms over chunks of the flat array, one per thread (``chunks.bounds``, cut at multiples of 16),
from ``PARALLEL_MIN`` elements when numpy's BLAS shares numba's threads: each element sees the
same arithmetic, so results are the same bits at any thread count. The activations take their
arrays flat (views), so each compiles once a dtype, not once a rank and dtype. Imported only when numba is
selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads

U = np.uint64
PARALLEL_MIN = 1 << 16  # elements from which an activation runs on several threads
ALIGN = 16  # elements: where the flat arrays are cut between threads (whole vectors)


def parallel(n: int) -> bool:
    """Whether an elementwise pass over n elements runs on several threads (shared with BLAS)."""
    from . import threads  # noqa: PLC0415

    return threads.worth(n, PARALLEL_MIN)


def run(serial: Any, par: Any, n: int, *args: Any) -> None:
    """A pass over ``n`` elements: ``par(*args)`` (chunks of the flat arrays, one per thread)
    when it runs on several threads, else ``serial(*args, 0, n)``."""
    if parallel(n):
        par(*args)
    else:
        serial(*args, 0, n)


@jit()
def _relu(x, out, k0, k1):  # type: ignore[no-untyped-def]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    zero = of.dtype.type(0)
    for k in range(U(k0), U(k1)):
        v = xf[k]
        of[k] = v if v > zero or np.isnan(v) else zero


@jit(parallel=True)
def _relu_par(x, out):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        k0, k1 = bounds(x.size, p, i, ALIGN)
        _relu(x, out, k0, k1)


def relu(x: Any) -> Any:
    """``max(x, 0)`` of a C-contiguous float array, NaN kept."""
    out = np.empty_like(x)
    run(_relu, _relu_par, x.size, x.reshape(-1), out.reshape(-1))  # flat: one compile a dtype
    return out


@jit()
def _leaky_relu(x, out, s, k0, k1):  # type: ignore[no-untyped-def]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    zero = of.dtype.type(0)
    for k in range(U(k0), U(k1)):
        v = xf[k]
        of[k] = v if v > zero else v * s


@jit(parallel=True)
def _leaky_relu_par(x, out, s):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        k0, k1 = bounds(x.size, p, i, ALIGN)
        _leaky_relu(x, out, s, k0, k1)


def leaky_relu(x: Any, slope: float) -> Any:
    """``x if x > 0 else slope * x`` of a C-contiguous float array (NaN stays NaN)."""
    out = np.empty_like(x)
    run(_leaky_relu, _leaky_relu_par, x.size, x.reshape(-1), out.reshape(-1), x.dtype.type(slope))
    return out


@jit()
def _add_rows(y, b):  # type: ignore[no-untyped-def]
    n, m = y.shape
    yf = y.reshape(-1)
    for i in range(U(n)):
        r = i * U(m)
        for j in range(U(m)):
            yf[r + j] += b[j]


def add_rows(y: Any, b: Any) -> None:
    """``y += b`` in place for a C-contiguous (N, M) ``y`` and an (M,) ``b`` of its dtype: a
    linear layer's bias. numpy's broadcast add runs its inner loop once per row; this loop
    was 2-3x faster on (512, 64..256) float32 (e.g. 11 against 22 us at (512, 192))."""
    _add_rows(y, b)


# --------------------------------------------------------------------------------------------
# binary cross-entropy (on probabilities and on logits), forward and gradients in one pass:
# on a GAN's 64 outputs the numpy formulas were ten to fifteen calls of a few microseconds
# each, several times the arithmetic
# --------------------------------------------------------------------------------------------


@jit()
def _clamped_logs(v, one):  # type: ignore[no-untyped-def]
    """``max(log(v), -100)`` and ``max(log(1 - v), -100)``, NaN kept (log(0) = -inf)."""
    lo = one * -100
    a = np.log(v)
    b = np.log(one - v)
    return (lo if a < lo else a), (lo if b < lo else b)


@jit()
def _bce(x, t, out):  # type: ignore[no-untyped-def]
    """Per-element ``-(t log x + (1 - t) log(1 - x))`` into ``out`` (when not empty); returns
    the float64 sum."""
    xf = x.reshape(-1)
    tf = t.reshape(-1)
    of = out.reshape(-1)
    one = xf.dtype.type(1)
    tot = 0.0
    for k in range(U(xf.size)):
        lx, l1 = _clamped_logs(xf[k], one)
        v = -(tf[k] * lx + (one - tf[k]) * l1)
        if of.size:
            of[k] = v
        tot += v
    return tot


@jit()
def _bce_grads(g, x, t, gx, gt):  # type: ignore[no-untyped-def]
    """The gradients of ``_bce`` times ``g`` (one value, or one per element) for x
    (``(x - t) / max(x (1 - x), 1e-12)``, PyTorch's formula) and t (``log(1 - x) - log x``,
    clamped); an empty ``gx`` or ``gt`` is skipped."""
    xf = x.reshape(-1)
    tf = t.reshape(-1)
    gf = g.reshape(-1)
    dx = gx.reshape(-1)
    dt_ = gt.reshape(-1)
    one = xf.dtype.type(1)
    eps = xf.dtype.type(1e-12)
    wide = gf.size > 1
    for k in range(U(xf.size)):
        gk = gf[k] if wide else gf[0]
        v = xf[k]
        if dx.size:
            d = (one - v) * v
            dx[k] = gk * (v - tf[k]) / (eps if d < eps else d)
        if dt_.size:
            lx, l1 = _clamped_logs(v, one)
            dt_[k] = gk * (l1 - lx)


@jit()
def _bce_logits(x, t, out):  # type: ignore[no-untyped-def]
    """Per-element ``(1 - t) x + max(-x, 0) + log1p(exp(-|x|))`` into ``out`` (when not
    empty); returns the float64 sum."""
    xf = x.reshape(-1)
    tf = t.reshape(-1)
    of = out.reshape(-1)
    one = xf.dtype.type(1)
    zero = xf.dtype.type(0)
    tot = 0.0
    for k in range(U(xf.size)):
        v = xf[k]
        sp = (-v if v < zero else zero) + np.log1p(np.exp(-abs(v)))
        r = (one - tf[k]) * v + sp
        if of.size:
            of[k] = r
        tot += r
    return tot


@jit()
def _bce_logits_grads(g, x, t, gx, gt):  # type: ignore[no-untyped-def]
    """The gradients of ``_bce_logits`` times ``g``: ``sigmoid(x) - t`` for x, ``-x`` for t."""
    xf = x.reshape(-1)
    tf = t.reshape(-1)
    gf = g.reshape(-1)
    dx = gx.reshape(-1)
    dt_ = gt.reshape(-1)
    one = xf.dtype.type(1)
    zero = xf.dtype.type(0)
    wide = gf.size > 1
    for k in range(U(xf.size)):
        gk = gf[k] if wide else gf[0]
        v = xf[k]
        if dx.size:
            e = np.exp(-abs(v))
            r = one / (one + e)
            s = r if v >= zero else e * r
            dx[k] = gk * (s - tf[k])
        if dt_.size:
            dt_[k] = -gk * v


def bce(x: Any, t: Any, scale: float, total: bool, logits: bool) -> Any:
    """Binary cross-entropy of C-contiguous ``x`` and ``t`` of one shape: per element, or
    (``total``) their sum times ``scale`` as a 0-d array."""
    out = np.empty(x.shape if not total else (0,), x.dtype)
    tot = (_bce_logits if logits else _bce)(x, t, out)
    return np.asarray(tot * scale, dtype=x.dtype) if total else out


def bce_grads(g: Any, x: Any, t: Any, scale: float, needs: Any, logits: bool) -> tuple[Any, Any]:
    """The gradients of ``bce`` for x and t (None where ``needs`` says no)."""
    gs = np.ascontiguousarray(g * x.dtype.type(scale) if scale != 1.0 else g, dtype=x.dtype)
    gx = np.empty(x.shape if needs[0] else (0,), x.dtype)
    gt = np.empty(x.shape if needs[1] else (0,), x.dtype)
    (_bce_logits_grads if logits else _bce_grads)(gs, x, t, gx, gt)
    return (gx if needs[0] else None), (gt if needs[1] else None)


@jit()
def _outside_unit(a):  # type: ignore[no-untyped-def]
    af = a.reshape(-1)
    zero = af.dtype.type(0)
    one = af.dtype.type(1)
    for k in range(U(af.size)):
        if af[k] < zero or af[k] > one:
            return True
    return False


def outside_unit(a: Any) -> bool:
    """Whether a C-contiguous float array has a value below 0 or above 1 (NaN is neither)."""
    return bool(_outside_unit(a))


# entries with the arguments of their references (nn/_f_loss.py)
def bce_probs(x: Any, t: Any, scale: float, total: bool) -> Any:
    return bce(x, t, scale, total, logits=False)


def bce_with_logits(x: Any, t: Any, scale: float, total: bool) -> Any:
    return bce(x, t, scale, total, logits=True)


def bce_grad_op(xp: Any, g: Any, x: Any, t: Any, scale: float, i: int, logits: bool) -> Any:
    return bce_grads(g, x, t, scale, (i == 0, i == 1), logits)[i]
