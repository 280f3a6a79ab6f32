"""Row gathers along an axis and their scatter-add adjoints, in one pass each (numba).

An array seen as ``(pre, n, post)`` around the indexed axis: a gather copies ``post``-long runs
``x[p, idx[i], :]`` to ``out[p, i, :]`` (``x[idx]``, ``index_select``, ``take``, an embedding's
lookup); a scatter-add adds ``g[p, i, :]`` into ``out[p, idx[i], :]`` (their gradients,
``index_add``). numpy's fancy indexing makes a temporary per call and ``np.add.at`` runs an
unbuffered loop per element (13,264 rows of 16 float32: 2.0 ms, PyTorch's ``index_add_`` 0.15).
Along an axis with the index array as full as the data (``take_along_axis``, PyTorch's
``gather``/``scatter_add``) the same loops read an index per element.

Results never depend on the thread count: a gather's threads write disjoint output rows; a
scatter-add's threads own disjoint ranges of destination rows (each thread reads every index
and adds the rows that land in its range, in input order), so every destination sums its rows
in input order, as the serial loop does. Indices are checked (``-n <= i < n``, negatives wrap)
before any write; an index out of range leaves the call to the numpy reference, which raises.
Imported only when numba is selected.
"""

from __future__ import annotations

import math
from typing import Any

from numba import prange

from .._backend import np
from . import jit, threads
from .chunks import bounds, num_threads
from .registry import NotReady
from .table import axis_index

U = np.uint64
PARALLEL_MIN = 1 << 15  # elements moved from which a pass runs on several threads


@jit()
def _span(idx):  # type: ignore[no-untyped-def]
    lo = hi = 0
    if idx.size:
        lo = hi = idx[0]
    for i in range(idx.size):
        v = idx[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


def _rows(idx: Any, n: int) -> Any:
    """``idx`` flat as int64 in ``[0, n)`` (negatives wrapped); an index out of range raises
    ``NotReady`` (before any write), which leaves the call to the reference: it raises the
    op's own error."""
    flat = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
    lo, hi = _span(flat)
    if hi >= n or lo < -n:
        raise NotReady
    if lo < 0:
        flat = np.where(flat < 0, flat + n, flat)
    return flat


@jit()
def _take(x, idx, out, i0, i1):  # type: ignore[no-untyped-def]
    # out[p, i, :] = x[p, idx[i], :] for i0 <= i < i1 (unsigned offsets: no wraparound checks,
    # so the row copy vectorises)
    n, post = U(x.shape[1]), U(x.shape[2])
    m = U(idx.size)
    xf = x.reshape(-1)
    of = out.reshape(-1)
    for p in range(U(x.shape[0])):
        for i in range(U(i0), U(i1)):
            src = (p * n + U(idx[i])) * post
            dst = (p * m + i) * post
            for j in range(post):
                of[dst + j] = xf[src + j]


@jit(parallel=True)
def _take_par(x, idx, out):  # type: ignore[no-untyped-def]
    p = num_threads()
    for i in prange(p):
        i0, i1 = bounds(idx.size, p, i, 1)
        _take(x, idx, out, i0, i1)


@jit()
def _add(g, idx, out, d0, d1):  # type: ignore[no-untyped-def]
    # destinations d0 <= idx[i] < d1 only: out[p, idx[i], :] += g[p, i, :], in input order
    m, post = U(g.shape[1]), U(g.shape[2])
    n = U(out.shape[1])
    gf = g.reshape(-1)
    of = out.reshape(-1)
    for p in range(U(g.shape[0])):
        for i in range(m):
            d = idx[i]
            if d0 <= d < d1:
                src = (p * m + i) * post
                dst = (p * n + U(d)) * post
                for j in range(post):
                    of[dst + j] += gf[src + j]


@jit(parallel=True)
def _add_par(g, idx, out):  # type: ignore[no-untyped-def]
    p = num_threads()
    n = out.shape[1]
    for i in prange(p):
        d0, d1 = bounds(n, p, i, 1)
        _add(g, idx, out, d0, d1)


def _parallel(work: int) -> bool:
    return threads.worth(work, PARALLEL_MIN)


def take_rows(x3: Any, idx: Any) -> Any:
    """``x3[:, idx, :]`` of a C-contiguous ``(pre, n, post)`` array and ``(m,)`` int64 indices
    in ``[0, n)``: ``(pre, m, post)``."""
    out = np.empty((x3.shape[0], idx.size, x3.shape[2]), x3.dtype)
    if out.size:
        if _parallel(out.size) and idx.size > 1:
            _take_par(x3, idx, out)
        else:
            _take(x3, idx, out, 0, idx.size)
    return out


def add_rows(g3: Any, idx: Any, n: int) -> Any:
    """``out[:, idx[i], :] += g3[:, i, :]`` into zeros ``(pre, n, post)``; ``g3`` is a
    C-contiguous ``(pre, m, post)``, ``idx`` ``(m,)`` int64 in ``[0, n)``."""
    out = np.zeros((g3.shape[0], n, g3.shape[2]), g3.dtype)
    if g3.size:
        if _parallel(g3.size) and n > 1:
            _add_par(g3, idx, out)
        else:
            _add(g3, idx, out, 0, n)
    return out


# -- an integer array on one axis, slices over the others (x[idx], x[:, idx], index_add) -----
def getitem_op(x: Any, idx: Any, advanced: bool, shape: Any) -> Any:
    """``x[idx]`` for ``idx`` an integer array on one axis (``axis_index``), with the
    arguments of its reference."""
    ax, a = axis_index(idx)  # type: ignore[misc]
    n = x.shape[ax]
    flat = _rows(a, n)
    pre = math.prod(x.shape[:ax])
    y = take_rows(x.reshape(pre, n, -1), flat)
    return y.reshape(x.shape[:ax] + a.shape + x.shape[ax + 1:])


def index_grad_op(g: Any, idx: Any, shape: Any, advanced: bool) -> Any:
    """The scatter-add of ``g`` into zeros of ``shape`` at ``idx`` (``axis_index``), with the
    arguments of its reference."""
    ax, a = axis_index(idx)  # type: ignore[misc]
    n = shape[ax]
    flat = _rows(a, n)
    pre = math.prod(shape[:ax])
    post = math.prod(shape[ax + 1:])
    g3 = np.ascontiguousarray(g).reshape(pre, flat.size, post)
    return add_rows(g3, flat, n).reshape(shape)


# -- embedding's row gather and its adjoint (ops/_take.py's take) -----------------------------
def take_op(x: Any, idx: Any, axis: int, n: int, zero_row: Any, masked: bool) -> Any:
    """``x.take(idx, axis)`` with the arguments of its reference (unmasked)."""
    flat = _rows(idx, n)
    pre = math.prod(x.shape[:axis])
    y = take_rows(np.ascontiguousarray(x).reshape(pre, n, -1), flat)
    return y.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


def scatter_add_rows(g2: Any, idx: Any, n: int) -> Any:
    """``out[idx[r]] += g2[r]`` into ``n`` zero rows; ``g2`` is (M, ...), ``idx`` (M,) in
    ``[0, n)``."""
    g = np.ascontiguousarray(g2).reshape(1, g2.shape[0], -1)
    out = add_rows(g, np.ascontiguousarray(idx, dtype=np.int64).reshape(-1), n)
    return out.reshape((n,) + g2.shape[1:])


def scatter_add_rows_op(g2: Any, idx: Any, n: int, presorted: bool) -> Any:
    """``scatter_add_rows`` with the arguments of its reference (``ops/_take.py``)."""
    return scatter_add_rows(g2, idx, n)
