"""Recurrent layers: RNN, LSTM, GRU and their single-step cells RNNCell, LSTMCell, GRUCell."""

from __future__ import annotations

import math
from typing import Any

from ..._creation import zeros
from ..._tensor import Parameter, Tensor
from ...ops import _shape as S
from ...ops._rnn import GATES
from .. import _f_rnn as FR
from .. import init
from .._f_common import float_input
from .._f_dropout import dropout as _dropout
from .._module import Module
from ._utils import check_dtype, new_param


def _init_uniform(module: Module, hidden_size: int) -> None:
    """Every parameter ``~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))`` (PyTorch's)."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


class RNNBase(Module):
    """The shared body of RNN, LSTM and GRU: parameters per layer and direction, the loop over
    layers, directions and time, dropout between layers, and PyTorch's input and state shapes."""

    mode: str
    input_size: int
    hidden_size: int
    num_layers: int
    bias: bool
    batch_first: bool
    dropout: float
    bidirectional: bool
    proj_size: int

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if proj_size != 0:
            raise NotImplementedError(f"{name}: proj_size is not supported; use proj_size=0")
        if not 0.0 <= float(dropout) <= 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(
                f"{name}: hidden_size and num_layers must be positive, got hidden_size="
                f"{hidden_size}, num_layers={num_layers}"
            )
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate = GATES[mode] * hidden_size
        dirs = 2 if bidirectional else 1
        for layer in range(num_layers):
            size_in = input_size if layer == 0 else hidden_size * dirs
            for sfx in self._suffixes(layer):
                shapes: dict[str, tuple[int, ...]] = {
                    "weight_ih": (gate, size_in),
                    "weight_hh": (gate, hidden_size),
                }
                if bias:
                    shapes |= {"bias_ih": (gate,), "bias_hh": (gate,)}
                for kind, shape in shapes.items():
                    setattr(self, kind + sfx, new_param(*shape, dtype=dtype, device=device))
        self.reset_parameters()

    def _suffixes(self, layer: int) -> list[str]:
        return [f"_l{layer}"] + ([f"_l{layer}_reverse"] if self.bidirectional else [])

    def reset_parameters(self) -> None:
        """Every weight and bias ``~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``."""
        _init_uniform(self, self.hidden_size)

    def _weights(self, sfx: str) -> tuple[Any, ...]:
        return tuple(
            getattr(self, f"{kind}{sfx}", None)
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )

    def _check_state(self, state: Tensor, shape: tuple[int, ...], what: str) -> Tensor:
        state = float_input(state, type(self).__name__)
        if state.shape != shape:
            raise ValueError(
                f"{type(self).__name__}: {what} has shape {state.shape}, expected {shape} "
                "(num_layers * num_directions, batch, hidden_size), without batch for 2-D input"
            )
        return state

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, Any]:
        name = type(self).__name__
        x = float_input(input, name)
        check_dtype(self, x, getattr(self, "weight_ih_l0", None))
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}(input_size={self.input_size}): input has shape {x.shape}; expected "
                f"({'batch, seq' if self.batch_first else 'seq, batch'}, {self.input_size}) "
                f"(batch_first={self.batch_first}) or unbatched (seq, {self.input_size})"
            )
        batched = x.ndim == 3
        if not batched:
            x = S.expand_dims(x, 1)
        elif self.batch_first:
            x = S.swapaxes(x, 0, 1)  # (T, B, I)
        batch = x.shape[1]
        dirs = 2 if self.bidirectional else 1
        shape = (self.num_layers * dirs, batch, self.hidden_size)
        want = shape if batched else (shape[0], shape[2])
        lstm = self.mode == "LSTM"
        if hx is None:
            h0 = zeros(*shape, dtype=x.dtype, device=x.device)
            c0 = h0 if lstm else None
        else:
            if lstm:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise ValueError(f"{name}: the initial state must be a pair (h_0, c_0)")
                h0 = self._check_state(hx[0], want, "h_0")
                c0 = self._check_state(hx[1], want, "c_0")
            else:
                h0, c0 = self._check_state(hx, want, "h_0"), None
            if not batched:
                h0 = S.expand_dims(h0, 1)
                c0 = S.expand_dims(c0, 1) if c0 is not None else None
        hs: list[Tensor] = []
        cs: list[Tensor] = []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = _dropout(x, self.dropout, True)
            outs = []
            for d, sfx in enumerate(self._suffixes(layer)):
                k = layer * dirs + d
                seq, h, c = FR.recurrent_layer(
                    self.mode, x, h0[k], c0[k] if c0 is not None else None,
                    self._weights(sfx), reverse=d == 1,
                )  # fmt: skip
                outs.append(seq)  # (T, B, H)
                hs.append(h)
                if c is not None:
                    cs.append(c)
            x = outs[0] if dirs == 1 else S.concat(outs, axis=-1)
        h_n = S.stack(hs, axis=0)
        c_n = S.stack(cs, axis=0) if lstm else None
        if not batched:
            x = S.squeeze(x, 1)
            h_n = S.squeeze(h_n, 1)
            c_n = S.squeeze(c_n, 1) if c_n is not None else None
        elif self.batch_first:
            x = S.swapaxes(x, 0, 1)
        return x, ((h_n, c_n) if lstm else h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    r"""Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, ``act`` = tanh or
    relu (``nonlinearity``), stacked ``num_layers`` deep, optionally bidirectional.

    Input ``(seq, batch, input_size)`` (``(batch, seq, ...)`` with ``batch_first``) or unbatched
    ``(seq, input_size)``; returns ``(output, h_n)`` as PyTorch, with ``output`` holding the last
    layer's states for every step and ``h_n`` ``(num_layers * num_directions, batch, hidden)``.
    Parameters ``weight_ih_l{k}`` ``(hidden, in)``, ``weight_hh_l{k}`` ``(hidden, hidden)``,
    ``bias_ih_l{k}``, ``bias_hh_l{k}`` (``..._reverse`` for the backward direction), all drawn
    from ``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``.

    >>> import tapegrad as tg
    >>> rnn = tg.nn.RNN(3, 5, num_layers=2)
    >>> out, h_n = rnn(tg.ones((7, 2, 3)))
    >>> out.shape, h_n.shape
    ((7, 2, 5), (2, 2, 5))
    """

    nonlinearity: str

    def __init__(self, *args: Any, nonlinearity: str = "tanh", **kwargs: Any) -> None:
        if len(args) > 3:  # PyTorch's positional order: input_size, hidden_size, num_layers,
            nonlinearity = args[3]  # nonlinearity, bias, ...
            args = args[:3] + args[4:]
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_" + nonlinearity.upper(), *args, **kwargs)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTM(RNNBase):
    r"""Long short-term memory, PyTorch's equations and gate order ``i, f, g, o``:

    ``i, f, o = sigmoid(.)``, ``g = tanh(.)`` of ``x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh``
    sliced in four; ``c_t = f * c_{t-1} + i * g``, ``h_t = o * tanh(c_t)``.

    Returns ``(output, (h_n, c_n))``; the initial state is the pair ``(h_0, c_0)`` (zeros when
    omitted). Parameters as in :class:`RNN`, with ``4 * hidden_size`` rows.

    >>> import tapegrad as tg
    >>> lstm = tg.nn.LSTM(3, 5, batch_first=True, bidirectional=True)
    >>> out, (h_n, c_n) = lstm(tg.ones((2, 7, 3)))
    >>> out.shape, h_n.shape, lstm.weight_ih_l0_reverse.shape
    ((2, 7, 10), (2, 2, 5), (20, 3))
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    r"""Gated recurrent unit, PyTorch's equations and gate order ``r, z, n``:

    ``r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)``, ``z`` likewise,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.

    >>> import tapegrad as tg
    >>> out, h_n = tg.nn.GRU(3, 5)(tg.ones((7, 3)))  # unbatched
    >>> out.shape, h_n.shape
    ((7, 5), (1, 5))
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("GRU", *args, **kwargs)


class _CellBase(Module):
    input_size: int
    hidden_size: int
    bias: bool
    weight_ih: Parameter
    weight_hh: Parameter
    bias_ih: Parameter | None
    bias_hh: Parameter | None

    def __init__(  # noqa: PLR0917
        self, gates: int, input_size: int, hidden_size: int, bias: bool, device: Any, dtype: Any
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = new_param(gates * hidden_size, input_size, dtype=dtype, device=device)
        self.weight_hh = new_param(gates * hidden_size, hidden_size, dtype=dtype, device=device)
        self.bias_ih = new_param(gates * hidden_size, dtype=dtype, device=device) if bias else None
        self.bias_hh = new_param(gates * hidden_size, dtype=dtype, device=device) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias ``~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``."""
        _init_uniform(self, self.hidden_size)

    def _prepare(self, input: Any, hx: Any) -> tuple[Tensor, Tensor, bool]:
        name = type(self).__name__
        x = float_input(input, name)
        check_dtype(self, x, self.weight_ih)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}(input_size={self.input_size}): input has shape {x.shape}; expected "
                f"(batch, {self.input_size}) or unbatched ({self.input_size},)"
            )
        batched = x.ndim == 2
        if not batched:
            x = S.expand_dims(x, 0)
        want = (x.shape[0], self.hidden_size)
        if hx is None:
            return x, zeros(*want, dtype=x.dtype, device=x.device), batched
        h = float_input(hx, name)
        if h.shape != (want if batched else want[1:]):
            raise ValueError(
                f"{name}: hidden state has shape {h.shape}, expected "
                f"{want if batched else want[1:]} for input of shape {input.shape}"
            )
        return x, (h if batched else S.expand_dims(h, 0)), batched

    def _weights(self) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


def _unbatch(h: Tensor, batched: bool) -> Tensor:
    return h if batched else S.squeeze(h, 0)


class RNNCell(_CellBase):
    """One Elman step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    >>> import tapegrad as tg
    >>> tg.nn.RNNCell(3, 5)(tg.ones((2, 3))).shape
    (2, 5)
    """

    nonlinearity: str

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}"
            )
        self.nonlinearity = nonlinearity
        super().__init__(1, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Any, hx: Any = None) -> Tensor:
        x, h, batched = self._prepare(input, hx)
        return _unbatch(FR.rnn_cell(x, h, *self._weights(), self.nonlinearity), batched)


class LSTMCell(_CellBase):
    """One LSTM step; ``hx`` is the pair ``(h, c)``; returns ``(h', c')``.

    >>> import tapegrad as tg
    >>> h, c = tg.nn.LSTMCell(3, 5)(tg.ones((2, 3)))
    >>> h.shape, c.shape
    ((2, 5), (2, 5))
    """

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(4, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, Tensor]:
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise ValueError("LSTMCell: the state must be a pair (h, c)")
        x, h, batched = self._prepare(input, None if hx is None else hx[0])
        _, c, _ = self._prepare(input, None if hx is None else hx[1])
        h, c = FR.lstm_cell(x, (h, c), *self._weights())
        return _unbatch(h, batched), _unbatch(c, batched)


class GRUCell(_CellBase):
    """One GRU step: ``h' = (1 - z) * n + z * h`` (see :class:`GRU`).

    >>> import tapegrad as tg
    >>> tg.nn.GRUCell(3, 5)(tg.ones(3)).shape
    (5,)
    """

    def __init__(  # noqa: PLR0917 - PyTorch's positional signature
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(3, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Any, hx: Any = None) -> Tensor:
        x, h, batched = self._prepare(input, hx)
        return _unbatch(FR.gru_cell(x, h, *self._weights()), batched)
