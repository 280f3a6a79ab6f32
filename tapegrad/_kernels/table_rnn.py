"""The recurrent kernels' entries in the registry (numpy only: the kernels load on first use)."""

from __future__ import annotations

from typing import Any

from .._backend import np
from .registry import register

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _arrays(*arrays: Any) -> bool:
    """numpy arrays (None skipped), C-contiguous, of one float dtype: what the kernels read."""
    dt = None
    for a in arrays:
        if a is None:
            continue
        if type(a) is not np.ndarray or not a.flags.c_contiguous or a.dtype not in _FLOATS:
            return False
        if dt is None:
            dt = a.dtype
        elif a.dtype != dt:
            return False
    return True


def _seq_fits(gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool) -> bool:
    return _arrays(gi, h0, c0, w_hh, b_hh) and gi.shape[0] > 0


def _grad_fits(g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool) -> bool:
    return _arrays(g, y, ws, h0, c0, w_hh) and y.shape[0] > 0


for _op in ("lstm_seq", "gru_seq", "rnn_tanh_seq", "rnn_relu_seq"):
    register(_op, "numba", _seq_fits, f"rnn:{_op}")
    register(_op + "_grad", "numba", _grad_fits, f"rnn:{_op}_grad")
