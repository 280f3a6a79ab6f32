"""Recurrent cells and one recurrent layer over time (compositions of tapegrad ops).

The input projection of a whole sequence is one GEMM (``x @ W_ih^T + b_ih`` over ``(T*B, I)``);
each time step then adds one GEMM of the hidden state against all gates at once and slices the
gates from that one ``(B, G*H)`` array. Gate order is PyTorch's: LSTM ``i, f, g, o``, GRU
``r, z, n`` with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.
"""

from __future__ import annotations

from typing import Any

from .._tensor import Tensor
from ..ops import _elementwise as E
from ..ops import _shape as S
from ._f_linear import linear

# gates per cell: how many hidden-sized blocks W_ih and W_hh stack
GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _rnn_step(mode: str, gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    pre = gi + linear(h, w_hh, b_hh)
    return E.tanh(pre) if mode == "RNN_TANH" else E.relu(pre)


def _lstm_step(
    gi: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, b_hh: Tensor | None
) -> tuple[Tensor, Tensor]:
    gates = gi + linear(h, w_hh, b_hh)  # (B, 4H): i, f, g, o
    i, f, g, o = S.split(gates, 4, axis=-1)
    c = E.sigmoid(f) * c + E.sigmoid(i) * E.tanh(g)
    return E.sigmoid(o) * E.tanh(c), c


def _gru_step(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    gh = linear(h, w_hh, b_hh)  # (B, 3H): r, z, n
    i_r, i_z, i_n = S.split(gi, 3, axis=-1)
    h_r, h_z, h_n = S.split(gh, 3, axis=-1)
    r = E.sigmoid(i_r + h_r)
    z = E.sigmoid(i_z + h_z)
    n = E.tanh(i_n + r * h_n)
    return n + z * (h - n)  # (1 - z) * n + z * h


def rnn_cell(  # noqa: PLR0917 - PyTorch's positional order
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    nonlinearity: str = "tanh",
) -> Tensor:
    """One Elman step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return _rnn_step("RNN_" + nonlinearity.upper(), linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def lstm_cell(  # noqa: PLR0917 - PyTorch's positional order
    input: Tensor,
    hx: tuple[Tensor, Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step; returns ``(h', c')``."""
    return _lstm_step(linear(input, w_ih, b_ih), hx[0], hx[1], w_hh, b_hh)


def gru_cell(  # noqa: PLR0917 - PyTorch's positional order
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
) -> Tensor:
    """One GRU step; returns ``h'``."""
    return _gru_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def recurrent_layer(  # noqa: PLR0917
    mode: str,
    x: Tensor,
    h: Tensor,
    c: Tensor | None,
    weights: tuple[Any, ...],
    reverse: bool = False,
) -> tuple[list[Tensor], Tensor, Tensor | None]:
    """Run one direction of one layer over ``x`` (T, B, I) from state ``h`` (and ``c``).

    Returns the T hidden states in time order, and the final ``h`` (and ``c``).
    """
    w_ih, w_hh, b_ih, b_hh = weights
    steps = x.shape[0]
    gi_all = linear(x, w_ih, b_ih)  # (T, B, G*H): the input projection of every step at once
    outs: list[Tensor] = [h] * steps
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        gi = gi_all[t]  # (B, G*H)
        if mode == "LSTM":
            assert c is not None
            h, c = _lstm_step(gi, h, c, w_hh, b_hh)
        elif mode == "GRU":
            h = _gru_step(gi, h, w_hh, b_hh)
        else:
            h = _rnn_step(mode, gi, h, w_hh, b_hh)
        outs[t] = h
    return outs, h, c
