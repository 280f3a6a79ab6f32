"""Row gathers along one axis (``nn.take``: embedding, interpolation), with a scatter-add
adjoint that avoids np.add.at."""

from __future__ import annotations

from typing import Any

from .._autodiff import Primitive, apply, defprim
from .._backend import np, xp_of
from .._kernels.registry import dispatch
from .._tensor import Tensor


def _segment_rows(g2: Any, idx: Any, n: int, presorted: bool) -> Any:
    """Sum the rows of ``g2`` (M, ...) into ``n`` rows by ``idx`` (M,): sort + add.reduceat."""
    return dispatch("scatter_add_rows", _segment_rows_np, g2, idx, n, presorted)


def _segment_rows_np(g2: Any, idx: Any, n: int, presorted: bool) -> Any:
    xp = xp_of(g2)
    out = xp.zeros((n,) + g2.shape[1:], dtype=g2.dtype)
    if idx.size == 0:
        return out
    if not presorted:
        order = xp.argsort(idx, kind="stable")
        idx = idx[order]
        g2 = g2[order]
    starts = xp.flatnonzero(xp.concatenate([xp.ones(1, dtype=bool), idx[1:] != idx[:-1]]))
    out[idx[starts]] = xp.add.reduceat(g2, starts, axis=0)
    return out


def _take_fwd(x: Any, idx: Any, axis: int, n: int, zero_row: Any, masked: bool) -> Any:
    y = xp_of(x).take(x, idx, axis=axis)
    if masked and zero_row is not None:
        keep = (idx != zero_row).reshape((1,) * axis + idx.shape + (1,) * (x.ndim - axis - 1))
        y = y * keep
    return y


def _take_fwd_op(x: Any, idx: Any, axis: int, n: int, zero_row: Any, masked: bool) -> Any:
    return dispatch("take_rows", _take_fwd, x, idx, axis, n, zero_row, masked)


def _take_grad_fwd(g: Any, idx: Any, axis: int, n: int, zero_row: Any) -> Any:
    # the idx dimensions of g moved to the front and summed into n rows
    xp = xp_of(g)
    k = idx.ndim
    gm = xp.moveaxis(g, tuple(range(axis, axis + k)), tuple(range(k)))
    flat = idx.reshape(-1)
    presorted = bool(flat.size < 2 or (flat[1:] >= flat[:-1]).all())
    out = _segment_rows(gm.reshape((flat.size,) + gm.shape[k:]), flat, n, presorted)
    if zero_row is not None:
        out[zero_row] = 0
    return xp.moveaxis(out, 0, axis)


# x.take(idx, axis): a gather whose adjoint sums duplicate rows with a sorted add.reduceat
# (np.add.at is several times slower). ``zero_row`` gets no gradient (embedding's padding_idx).
# The indices are an operand (not a parameter), so a tg.compile capture sees them as the
# step's input they come from (an embedding's token ids) instead of a constant.
_TAKE = defprim(
    "nn.take",
    _take_fwd_op,
    (
        lambda xp, g, ans, x, idx, axis, n, zero_row, masked: xp.apply(
            _TAKE_GRAD, g, idx, axis=axis, n=n, zero_row=zero_row
        ),
        None,
    ),
    save=(1,),
)
_TAKE_GRAD: Primitive = defprim(
    "nn.take_grad",
    _take_grad_fwd,
    (
        lambda xp, gg, ans, g, idx, axis, n, zero_row: xp.apply(
            _TAKE, gg, idx, axis=axis, n=n, zero_row=zero_row, masked=True
        ),
        None,
    ),
    save=(1,),
)


def take(x: Tensor, idx: Any, axis: int, zero_row: int | None = None) -> Tensor:
    """``x`` gathered at integer ``idx`` (any shape) along ``axis``; duplicates sum in backward.

    ``zero_row``: an index along ``axis`` whose row gets no gradient.
    """
    if not isinstance(idx, Tensor):
        idx = np.asarray(idx)
    return apply(_TAKE, x, idx, axis=axis, n=x.shape[axis], zero_row=zero_row, masked=False)
