"""The recurrent time loop as one primitive (``nn.recurrent_seq``), its references and VJP.

The input projection of a whole sequence is one GEMM (``x @ W_ih^T + b_ih`` over ``(T*B, I)``);
the time loop is one primitive, ``nn.recurrent_seq``, whose forward runs every step (per step
one GEMM of the hidden state against all gates at once, then the gates in one pass) and whose
backward runs the steps in reverse, every gate's gradient in one pass per step, with the
gradient of ``W_hh`` one GEMM over the whole sequence. Fused because the composition records
about 25 ops per step, whose per-op cost dominated small models (mnist_rnn, docs/recurrent.md).
The numpy loops here are the reference; compiled kernels (``_kernels/rnn.py``) run the same
loop without returning to Python between steps. When an outer tape records backward (higher
order), the VJP differentiates the composition of tapegrad ops (``composite``) instead.

Gate order is PyTorch's: LSTM ``i, f, g, o``, GRU ``r, z, n`` with
``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._autodiff import OUT, Joint, Tape, apply, defprim
from .._backend import xp_of
from .._kernels import dispatch
from .._tensor import Tensor
from . import _elementwise as E
from . import _shape as S
from ._linear import LINEAR

# gates per cell: how many hidden-sized blocks W_ih and W_hh stack
GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def rnn_update(mode: str, gi: Tensor, gh: Tensor) -> Tensor:
    """An Elman step from its two projections: ``h' = act(gi + gh)``."""
    pre = gi + gh
    return E.tanh(pre) if mode == "RNN_TANH" else E.relu(pre)


def lstm_update(gi: Tensor, gh: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """An LSTM step from its two projections (B, 4H): ``(h', c')``."""
    gates = gi + gh  # (B, 4H): i, f, g, o
    i, f, g, o = S.split(gates, 4, axis=-1)
    c = E.sigmoid(f) * c + E.sigmoid(i) * E.tanh(g)
    return E.sigmoid(o) * E.tanh(c), c


def gru_update(gi: Tensor, gh: Tensor, h: Tensor) -> Tensor:
    """A GRU step from its two projections (B, 3H): r, z, n."""
    i_r, i_z, i_n = S.split(gi, 3, axis=-1)
    h_r, h_z, h_n = S.split(gh, 3, axis=-1)
    r = E.sigmoid(i_r + h_r)
    z = E.sigmoid(i_z + h_z)
    n = E.tanh(i_n + r * h_n)
    return n + z * (h - n)  # (1 - z) * n + z * h


def _order(steps: int, reverse: bool) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return apply(LINEAR, x, w, b)


def composite(  # noqa: PLR0917
    mode: str, gi: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor, b_hh: Tensor | None,
    reverse: bool, linear: Callable[..., Tensor] = _linear,
) -> Tensor:
    """``nn.recurrent_seq``'s output as a composition of tapegrad ops (one step at a time);
    ``linear`` projects the state (``F.linear`` where the dtypes differ and promote)."""
    outs: list[Tensor] = [h] * gi.shape[0]
    for t in _order(gi.shape[0], reverse):
        gh = linear(h, w_hh, b_hh)
        if mode == "LSTM":
            assert c is not None
            h, c = lstm_update(gi[t], gh, c)
        elif mode == "GRU":
            h = gru_update(gi[t], gh, h)
        else:
            h = rnn_update(mode, gi[t], gh)
        outs[t] = h
    y = S.stack(outs, axis=0)  # (T, B, H)
    return y if c is None else S.concat([y, S.expand_dims(c, 0)], axis=0)


class Workspace:
    """What a forward computed for its backward beyond its output (the gate activations),
    handed over once: backward takes it if it is still the one of this output, else recomputes
    it (a persistent tape's second gradient). Equal to any other, since ``tg.compile`` compares
    an op's parameters between two captures."""

    __slots__ = ("ws", "y")

    def __init__(self) -> None:
        self.y: Any = None
        self.ws: Any = None

    def put(self, y: Any, ws: Any) -> None:
        self.y, self.ws = y, ws

    def take(self, y: Any) -> Any:
        ws = self.ws if self.y is y else None
        self.y = self.ws = None
        return ws

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workspace)

    def __hash__(self) -> int:
        return 0


# ---------------------------------------------------------------------------------------------
# The numpy references (the kernels in _kernels/rnn.py follow them operation for operation).
# Sigmoid is 0.5 * tanh(x / 2) + 0.5: no overflow for any x, one transcendental.
# ---------------------------------------------------------------------------------------------


def _sigmoid_(xp: Any, a: Any) -> None:
    a *= 0.5
    xp.tanh(a, out=a)
    a *= 0.5
    a += 0.5


def _lstm_seq(gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool) -> Any:
    """The states (T + 1, B, H): h_t at t, the last cell state at T; and the workspace
    (T, B, 6H): the gates i, f, g, o after their activations, c_t and tanh(c_t)."""
    xp = xp_of(gi)
    steps, n_b, n_g = gi.shape
    n_h = n_g // 4
    y = xp.empty((steps + 1, n_b, n_h), gi.dtype)
    ws = xp.empty((steps, n_b, 6 * n_h), gi.dtype)
    h, c = h0, c0
    w_t = xp.ascontiguousarray(w_hh.T)  # in its own rows: a faster product (_kernels/rnn.py)
    for t in _order(steps, reverse):
        a = ws[t, :, :n_g]
        a[...] = h @ w_t
        a += gi[t]
        if b_hh is not None:
            a += b_hh
        _sigmoid_(xp, a[:, : 2 * n_h])
        xp.tanh(a[:, 2 * n_h : 3 * n_h], out=a[:, 2 * n_h : 3 * n_h])
        _sigmoid_(xp, a[:, 3 * n_h :])
        c_new = ws[t, :, 4 * n_h : 5 * n_h]
        xp.multiply(a[:, n_h : 2 * n_h], c, out=c_new)
        c_new += a[:, :n_h] * a[:, 2 * n_h : 3 * n_h]
        c = c_new
        tc = ws[t, :, 5 * n_h :]
        xp.tanh(c, out=tc)
        xp.multiply(a[:, 3 * n_h : n_g], tc, out=y[t])
        h = y[t]
    y[steps] = c
    return y, ws


def _lstm_seq_grad(g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool) -> Any:
    """The gradient of the gates' pre-activations (T, B, 4H) (which is ``gi``'s), of h0, of c0."""
    xp = xp_of(g)
    steps, n_b, _ = ws.shape
    n_h = h0.shape[-1]
    dgates = xp.empty((steps, n_b, 4 * n_h), g.dtype)
    dh = xp.zeros_like(h0)
    dc = g[steps].copy()
    for s, t in enumerate(_order(steps, not reverse)):
        w = ws[t]
        i, f, gg, o = (w[:, k * n_h : (k + 1) * n_h] for k in range(4))
        tc = w[:, 5 * n_h :]
        tp = t + 1 if reverse else t - 1
        cp = c0 if s == steps - 1 else ws[tp, :, 4 * n_h : 5 * n_h]
        dhv = g[t] + dh
        dct = dc + dhv * o * (1 - tc * tc)
        d = dgates[t]
        d[:, :n_h] = dct * gg * (i * (1 - i))
        d[:, n_h : 2 * n_h] = dct * cp * (f * (1 - f))
        d[:, 2 * n_h : 3 * n_h] = dct * i * (1 - gg * gg)
        d[:, 3 * n_h :] = dhv * tc * (o * (1 - o))
        dc = dct * f
        dh = d @ w_hh
    return dgates, dh, dc


def _gru_seq(gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool) -> Any:
    """The states (T, B, H) and the workspace (T, B, 4H): r, z, n and ``W_hn h + b_hn``."""
    xp = xp_of(gi)
    steps, n_b, n_g = gi.shape
    n_h = n_g // 3
    y = xp.empty((steps, n_b, n_h), gi.dtype)
    ws = xp.empty((steps, n_b, 4 * n_h), gi.dtype)
    h = h0
    w_t = xp.ascontiguousarray(w_hh.T)
    for t in _order(steps, reverse):
        w = ws[t]
        gh = h @ w_t  # (B, 3H)
        if b_hh is not None:
            gh += b_hh
        rz = w[:, : 2 * n_h]
        xp.add(gi[t, :, : 2 * n_h], gh[:, : 2 * n_h], out=rz)
        _sigmoid_(xp, rz)
        w[:, 3 * n_h :] = gh[:, 2 * n_h :]
        n = w[:, 2 * n_h : 3 * n_h]
        xp.multiply(rz[:, :n_h], gh[:, 2 * n_h :], out=n)
        n += gi[t, :, 2 * n_h :]
        xp.tanh(n, out=n)
        xp.subtract(h, n, out=y[t])  # h' = (h - n) z + n
        y[t] *= rz[:, n_h:]
        y[t] += n
        h = y[t]
    return y, ws


def _gru_seq_grad(g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool) -> Any:
    """The gradients of ``gi`` and of the hidden projection ``h W_hh^T + b_hh`` (T, B, 3H),
    and of h0."""
    xp = xp_of(g)
    steps, n_b, _ = ws.shape
    n_h = h0.shape[-1]
    dgi = xp.empty((steps, n_b, 3 * n_h), g.dtype)
    dgh = xp.empty_like(dgi)
    dh = xp.zeros_like(h0)
    for s, t in enumerate(_order(steps, not reverse)):
        hp = h0 if s == steps - 1 else y[t + 1 if reverse else t - 1]
        r, z, n, hn = (ws[t, :, k * n_h : (k + 1) * n_h] for k in range(4))
        dhv = g[t] + dh
        dpn = dhv * (1 - z) * (1 - n * n)
        dpr = dpn * hn * (r * (1 - r))
        dpz = dhv * (hp - n) * (z * (1 - z))
        dgi[t, :, :n_h] = dgh[t, :, :n_h] = dpr
        dgi[t, :, n_h : 2 * n_h] = dgh[t, :, n_h : 2 * n_h] = dpz
        dgi[t, :, 2 * n_h :] = dpn
        dgh[t, :, 2 * n_h :] = dpn * r
        dh = dgh[t] @ w_hh
        dh += dhv * z
    return dgi, dgh, dh


def _rnn_seq(gi: Any, h0: Any, w_hh: Any, b_hh: Any, reverse: bool, relu: bool) -> Any:
    """The states (T, B, H); no workspace (the states give the activation's derivative)."""
    xp = xp_of(gi)
    y = xp.empty(gi.shape, gi.dtype)
    h = h0
    w_t = xp.ascontiguousarray(w_hh.T)
    for t in _order(gi.shape[0], reverse):
        a = y[t]
        a[...] = h @ w_t
        a += gi[t]
        if b_hh is not None:
            a += b_hh
        if relu:
            xp.maximum(a, 0, out=a)
        else:
            xp.tanh(a, out=a)
        h = a
    return y, None


def _rnn_seq_grad(g: Any, y: Any, w_hh: Any, h0: Any, reverse: bool, relu: bool) -> Any:
    """The pre-activations' gradient (T, B, H) and h0's."""
    xp = xp_of(g)
    dpre = xp.empty(y.shape, g.dtype)
    dh = xp.zeros_like(h0)
    for t in _order(y.shape[0], not reverse):
        hv = y[t]
        dhv = g[t] + dh
        dpre[t] = xp.where(hv > 0, dhv, 0) if relu else dhv * (1 - hv * hv)
        dh = dpre[t] @ w_hh
    return dpre, dh


def _rnn_tanh_seq(gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool) -> Any:
    return _rnn_seq(gi, h0, w_hh, b_hh, reverse, False)


def _rnn_relu_seq(gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool) -> Any:
    return _rnn_seq(gi, h0, w_hh, b_hh, reverse, True)


def _rnn_tanh_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool
) -> Any:
    return _rnn_seq_grad(g, y, w_hh, h0, reverse, False)


def _rnn_relu_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool
) -> Any:
    return _rnn_seq_grad(g, y, w_hh, h0, reverse, True)


# per mode: the registry's operation, and the references of its forward and backward.
# Forward: (gi, h0, c0, w_hh, b_hh, reverse) -> (states, workspace); backward:
# (g, states, workspace, h0, c0, w_hh, reverse) -> LSTM (dgi, dh0, dc0), GRU (dgi, dgh, dh0),
# RNN (dgi, dh0).
SEQ_OPS = {"LSTM": "lstm_seq", "GRU": "gru_seq", "RNN_TANH": "rnn_tanh_seq",
           "RNN_RELU": "rnn_relu_seq"}  # fmt: skip
SEQ_REFS = {
    "LSTM": (_lstm_seq, _lstm_seq_grad),
    "GRU": (_gru_seq, _gru_seq_grad),
    "RNN_TANH": (_rnn_tanh_seq, _rnn_tanh_seq_grad),
    "RNN_RELU": (_rnn_relu_seq, _rnn_relu_seq_grad),
}


def _w_hh_grad(dg: Any, y: Any, h0: Any, reverse: bool) -> Any:
    """``sum_t dg_t^T h_{t-1}`` (the state each step read): two GEMMs over the sequence."""
    steps, _, n_g = dg.shape
    n_h = h0.shape[-1]
    first = steps - 1 if reverse else 0
    dw = dg[first].T @ h0
    if steps > 1:
        d, hs = (dg[: steps - 1], y[1:steps]) if reverse else (dg[1:], y[: steps - 1])
        dw += d.reshape(-1, n_g).T @ hs.reshape(-1, n_h)
    return dw


def _seq_fwd(  # noqa: PLR0917
    gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, mode: str, reverse: bool, keep: Workspace
) -> Any:
    y, ws = dispatch(SEQ_OPS[mode], SEQ_REFS[mode][0], gi, h0, c0, w_hh, b_hh, reverse)
    keep.put(y, ws)
    return y


def _seq_grads(  # noqa: PLR0917
    xp: Any, g: Any, ans: Any, gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, *, needs: Any,
    mode: str, reverse: bool, keep: Workspace,
) -> tuple[Any, ...]:
    ins = (gi, h0, c0, w_hh, b_hh)
    if xp.tensors:  # an outer tape records backward: differentiate the composition
        with Tape() as tape:
            tape.watch(*[x for x in ins if x is not None])
            y = composite(mode, gi, h0, c0, w_hh, b_hh, reverse)
        wanted = [x for x, need in zip(ins, needs, strict=True) if need and x is not None]
        it = iter(tape.gradient(y, wanted, output_gradients=g) if wanted else [])
        return tuple(next(it) if need and x is not None else None
                     for x, need in zip(ins, needs, strict=True))  # fmt: skip
    op, (fwd, bwd) = SEQ_OPS[mode], SEQ_REFS[mode]
    ws = keep.take(ans)
    if ws is None and mode in ("LSTM", "GRU"):  # recomputed (a persistent tape's 2nd gradient)
        _, ws = dispatch(op, fwd, gi, h0, c0, w_hh, b_hh, reverse)
    g = xp.ascontiguousarray(g)
    grads = dispatch(op + "_grad", bwd, g, ans, ws, h0, c0, w_hh, reverse)
    dc0 = None
    if mode == "LSTM":
        dgi, dh0, dc0 = grads
        dgh = dgi  # the gates' pre-activations are gi + h W_hh^T + b_hh
    elif mode == "GRU":
        dgi, dgh, dh0 = grads
    else:
        dgi, dh0 = grads
        dgh = dgi
    dw = _w_hh_grad(dgh, ans, h0, reverse) if needs[3] else None
    db = dgh.sum(axis=(0, 1)) if needs[4] and b_hh is not None else None
    return dgi, dh0, dc0, dw, db


# gi, h0, c0, w_hh, b_hh -> the states: (T + 1, B, H) for LSTM (the last cell state at T),
# (T, B, H) for GRU and RNN (c0 None)
SEQ = defprim("nn.recurrent_seq", _seq_fwd, Joint(_seq_grads), (0, 1, 2, 3, 4, OUT))


