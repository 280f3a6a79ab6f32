"""Recurrent cells with PyTorch's arguments, and one recurrent layer-direction over a whole
sequence on the ``nn.recurrent_seq`` primitive (``ops/_rnn.py``).

Gate order is PyTorch's: LSTM ``i, f, g, o``, GRU ``r, z, n`` with
``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.
"""

from __future__ import annotations

from typing import Any

from .._autodiff import apply
from .._tensor import Tensor
from ..ops._rnn import SEQ, Workspace, composite, gru_update, lstm_update, rnn_update
from ._f_linear import linear


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
    mode = "RNN_" + nonlinearity.upper()
    return rnn_update(mode, linear(input, w_ih, b_ih), linear(hx, w_hh, b_hh))


def lstm_cell(  # noqa: PLR0917 - PyTorch's positional order
    input: Tensor,
    hx: tuple[Tensor, Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step; returns ``(h', c')``."""
    return lstm_update(linear(input, w_ih, b_ih), linear(hx[0], w_hh, b_hh), hx[1])


def gru_cell(  # noqa: PLR0917 - PyTorch's positional order
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
) -> Tensor:
    """One GRU step; returns ``h'``."""
    return gru_update(linear(input, w_ih, b_ih), linear(hx, w_hh, b_hh), hx)


def recurrent_layer(  # noqa: PLR0917
    mode: str,
    x: Tensor,
    h: Tensor,
    c: Tensor | None,
    weights: tuple[Any, ...],
    reverse: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run one direction of one layer over ``x`` (T, B, I) from state ``h`` (and ``c``).

    Returns the hidden states (T, B, H) in time order, and the final ``h`` (and ``c``).
    """
    w_ih, w_hh, b_ih, b_hh = weights
    steps = x.shape[0]
    ins = (x, h, c, w_ih, w_hh, b_ih, b_hh)
    if len({t.dtype for t in ins if t is not None}) == 1:
        if mode != "GRU" and b_ih is not None and b_hh is not None:
            # the gates are x W_ih^T + h W_hh^T + b_ih + b_hh: the two biases added once per
            # step in the cell's pass (its one column sum is both gradients), not a second
            # pass over the input projection and a second sum in backward
            b_ih, b_hh = None, b_ih + b_hh
        gi = linear(x, w_ih, b_ih)  # (T, B, G*H): the input projection of every step at once
        y = apply(SEQ, gi, h, c, w_hh, b_hh, mode=mode, reverse=reverse, keep=Workspace())
    else:  # mixed dtypes promote as the ops do
        y = composite(mode, linear(x, w_ih, b_ih), h, c, w_hh, b_hh, reverse, linear)
    h_last = y[0] if reverse else y[steps - 1]
    if mode == "LSTM":
        return y[:steps], h_last, y[steps]
    return y, h_last, None
