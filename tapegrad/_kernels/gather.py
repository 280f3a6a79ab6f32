"""The scatter-add adjoint of a row gather (embedding's gradient), in one pass (numba).

numpy sums duplicate rows with a stable argsort, a gather of the gradient in that order and
``add.reduceat``: three passes and a sort. Here each gradient row is added to its table row in
input order (the order of the stable sort; ``reduceat`` groups its sums differently, so the two
agree to rounding). Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from .._backend import np
from . import jit

U = np.uint64


@jit()
def _scatter_add(g, idx, out):  # type: ignore[no-untyped-def]
    m = g.shape[1]
    for r in range(idx.size):
        dst = out[idx[r]]
        src = g[r]
        for j in range(U(m)):
            dst[j] += src[j]


def scatter_add_rows(g2: Any, idx: Any, n: int) -> Any:
    """``out[idx[r]] += g2[r]`` into ``n`` zero rows; ``g2`` is (M, ...), ``idx`` (M,) in
    ``[0, n)``."""
    out = np.zeros((n,) + g2.shape[1:], dtype=g2.dtype)
    g = np.ascontiguousarray(g2).reshape(g2.shape[0], -1)
    _scatter_add(g, np.ascontiguousarray(idx, dtype=np.int64), out.reshape(n, -1))
    return out


def scatter_add_rows_op(g2: Any, idx: Any, n: int, presorted: bool) -> Any:
    """``scatter_add_rows`` with the arguments of its reference (``nn._f_common``)."""
    return scatter_add_rows(g2, idx, n)
