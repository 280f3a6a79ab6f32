"""The row passes of scaled dot-product attention (numba); the products are OpenBLAS's
(``bmm``, or numpy's matmul).

``softmax_rows`` turns the raw scores ``q k^T`` (B, H, L, S) into probabilities in place:
scale, additive mask, max, ``exp``, sum and division in one pass per row, where numpy makes
a pass over the whole score array for each. ``score_grad_rows`` turns ``dp = g v^T`` into the
scores' gradient ``p * (dp - g_i . out_i) * scale`` in place, reading ``g`` and the output
row by row (both (B, H, L, Dv) views of any strides). A row whose scores are all ``-inf``
(fully masked) gives zeros. The mask is a contiguous 4-D array whose axes of length 1
broadcast (stride 0). A kernel doing the products here as well, written as plain numba loops, was
measured slower than numpy's batched matmul (OpenBLAS) plus these row
passes: forward 3x slower at (128, 4, 10, 16) and 11x at (16, 4, 64, 32) (numba does not keep
a register tile of the product; its loops run at a fifth of a BLAS kernel's rate). Written in
eight explicit lanes with the SLP vectorizer on, such a kernel now serves packed self-attention
of up to 24 tokens (``attention_heads``); longer sequences keep this path. Each pass
has a parallel form (``*_par``: the (batch, head) blocks in chunks, one per thread, the serial
kernel on each, the same bits) used from ``PARALLEL_MIN`` scores when numpy's BLAS shares numba's
threads; at (16, 4, 64, 64) the softmax pass takes 0.095 ms on two threads against 0.19 on one.
Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .softmax import as_int, fexp, flat_max, flat_sum

U = np.uint64
PARALLEL_MIN = 1 << 15  # scores from which a row pass runs on several threads


@jit()
def _softmax_rows(s, mf, ms, scale, r0, r1):  # type: ignore[no-untyped-def]
    """The rows of (batch, head) blocks r0 to r1 (flat, b * n_h + h)."""
    n_b, n_h, n_l, n_s = s.shape
    sf = s.reshape(-1)
    si = as_int(sf)  # the row maximum on the floats' bits: an integer maximum vectorises
    dt = sf.dtype.type
    zero = dt(0)
    for bh in range(r0, r1):
        b = bh // n_h
        h = bh - b * n_h
        for i in range(n_l):
            r = U(((b * n_h + h) * n_l + i) * n_s)  # flat offsets: no view per row
            if mf is not None:
                mb = U(b * ms[0] + h * ms[1] + i * ms[2])
                if ms[3] == 1:
                    for j in range(U(n_s)):
                        sf[r + j] = sf[r + j] * scale + mf[mb + j]
                else:
                    mv = mf[mb]
                    for j in range(U(n_s)):
                        sf[r + j] = sf[r + j] * scale + mv
            else:
                for j in range(U(n_s)):
                    sf[r + j] *= scale
            m = flat_max(si, r, n_s)
            if not np.isfinite(m):
                m = zero
            for j in range(U(n_s)):
                sf[r + j] = fexp(sf[r + j] - m)
            tot = flat_sum(sf, r, n_s)
            inv = dt(1) / tot if tot > zero else zero  # fully masked: zeros
            for j in range(U(n_s)):
                sf[r + j] *= inv


@jit()
def _score_grad_rows(p, dp, g, out, scale, dmask, r0, r1):  # type: ignore[no-untyped-def]
    """The rows of (batch, head) blocks r0 to r1 (flat, b * n_h + h)."""
    n_b, n_h, n_l, n_s = p.shape
    dv = g.shape[3]
    pf = p.reshape(-1)
    df = dp.reshape(-1)
    for bh in range(r0, r1):
        b = bh // n_h
        h = bh - b * n_h
        for i in range(n_l):
            c = pf.dtype.type(0)
            for d in range(dv):
                c += g[b, h, i, d] * out[b, h, i, d]
            r = ((b * n_h + h) * n_l + i) * n_s
            prow = pf[r : r + n_s]
            drow = df[r : r + n_s]
            for j in range(U(n_s)):
                drow[j] = prow[j] * (drow[j] - c)
            if dmask is not None:
                mrow = dmask.reshape(-1)[r : r + n_s]
                for j in range(U(n_s)):
                    mrow[j] = drow[j]
            for j in range(U(n_s)):
                drow[j] *= scale


def mask_strides(mask: Any) -> tuple[Any, Any]:
    """A 4-D mask as a flat contiguous array and its element strides (0 where it broadcasts)."""
    m = np.ascontiguousarray(mask)
    st = [0 if m.shape[a] == 1 else m.strides[a] // m.itemsize for a in range(4)]
    return m.reshape(-1), np.array(st, dtype=np.int64)


@jit(parallel=True)
def _softmax_rows_par(s, mf, ms, scale):  # type: ignore[no-untyped-def]
    """``_softmax_rows`` of the (batch, head) blocks in chunks, one per thread."""
    p = num_threads()
    for i in prange(p):
        r0, r1 = bounds(s.shape[0] * s.shape[1], p, i, 1)
        _softmax_rows(s, mf, ms, scale, r0, r1)


@jit(parallel=True)
def _score_grad_rows_par(p, dp, g, out, scale, dmask):  # type: ignore[no-untyped-def]
    """``_score_grad_rows`` of the (batch, head) blocks in chunks, one per thread."""
    parts = num_threads()
    for i in prange(parts):
        r0, r1 = bounds(p.shape[0] * p.shape[1], parts, i, 1)
        _score_grad_rows(p, dp, g, out, scale, dmask, r0, r1)


def _parallel(s: Any) -> bool:
    """Whether a row pass over (B, H, L, S) ``s`` runs on several threads (shared with BLAS)."""
    from . import threads  # noqa: PLC0415

    return s.shape[0] * s.shape[1] >= 2 and threads.worth(s.size, PARALLEL_MIN)


def softmax_rows(s: Any, mask: Any, scale: float) -> None:
    """``s = softmax(s * scale + mask)`` in place over the last axis of (B, H, L, S) ``s``;
    ``mask`` is None or 4-D and broadcasts to ``s``."""
    mf, ms = (None, None) if mask is None else mask_strides(mask)
    sc = s.dtype.type(scale)
    if _parallel(s):
        _softmax_rows_par(s, mf, ms, sc)
    else:
        _softmax_rows(s, mf, ms, sc, 0, s.shape[0] * s.shape[1])


def score_grad_rows(p: Any, dp: Any, g: Any, out: Any, scale: float, dmask: Any) -> None:
    """``dp = p * (dp - sum(g * out, -1)) * scale`` in place; ``dmask`` (when given) gets the
    same before the scale (the gradient of an additive mask)."""
    sc = p.dtype.type(scale)
    if _parallel(p):
        _score_grad_rows_par(p, dp, g, out, sc, dmask)
    else:
        _score_grad_rows(p, dp, g, out, sc, dmask, 0, p.shape[0] * p.shape[1])


def softmax_rows_op(s: Any, mask: Any, scale: float) -> Any:
    """``softmax_rows`` with the arguments of its reference (``nn._f_attention``): ``s``
    turned into probabilities in place, and returned."""
    softmax_rows(s, mask, scale)
    return s
