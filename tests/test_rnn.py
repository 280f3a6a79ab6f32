"""RNN, LSTM, GRU and their cells against PyTorch with copied weights (float64): outputs, final
states, and gradients of inputs, initial states and every parameter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import _f_rnn as FR

TOL = {"rtol": 1e-10, "atol": 1e-12}
MODES = ["RNN", "RNN_relu", "LSTM", "GRU"]


def _pair(mode: str, *args, **kwargs):
    """A tapegrad layer and its torch twin holding the same float64 weights."""
    name = mode.split("_", maxsplit=1)[0]
    if mode == "RNN_relu":
        kwargs["nonlinearity"] = "relu"
    ours = getattr(nn, name)(*args, dtype=tg.float64, **kwargs)
    theirs = getattr(torch.nn, name)(*args, dtype=torch.float64, **kwargs)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _flat(out):
    if isinstance(out, tuple):
        return [t for o in out for t in _flat(o)]
    return [out]


def _run_both(ours, theirs, x, state, seed=0):
    """Forward both, backward a random cotangent of every output; compare everything."""
    rng = np.random.default_rng(seed)
    tx = torch.tensor(x, requires_grad=True)
    tstate = None
    if state is not None:
        tstate = tuple(torch.tensor(s, requires_grad=True) for s in state)
    gx = tg.tensor(x)
    gstate = None if state is None else tuple(tg.tensor(s) for s in state)
    with tg.Tape() as tape:
        tape.watch(gx)
        if gstate is not None:
            tape.watch(*gstate)
        arg = None if gstate is None else (gstate if len(gstate) == 2 else gstate[0])
        ys = _flat(ours(gx, arg))
        cots = [rng.standard_normal(y.shape) for y in ys]
        loss = sum((y * tg.tensor(c)).sum() for y, c in zip(ys, cots, strict=True))
    targ = None if tstate is None else (tstate if len(tstate) == 2 else tstate[0])
    tys = _flat(theirs(tx, targ))
    assert len(ys) == len(tys)
    for y, ty in zip(ys, tys, strict=True):
        assert y.shape == tuple(ty.shape)
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL)
    tloss = sum((ty * torch.tensor(c)).sum() for ty, c in zip(tys, cots, strict=True))
    tloss.backward()
    params = dict(ours.named_parameters())
    sources = [gx, *(gstate or ()), *params.values()]
    grads = tape.gradient(loss, sources)
    np.testing.assert_allclose(grads[0].numpy(), tx.grad.numpy(), **TOL)
    for g, ts in zip(grads[1 : 1 + len(gstate or ())], tstate or (), strict=True):
        np.testing.assert_allclose(g.numpy(), ts.grad.numpy(), **TOL)
    tparams = dict(theirs.named_parameters())
    assert list(params) == list(tparams)
    for g, (name, tp) in zip(grads[1 + len(gstate or ()) :], tparams.items(), strict=True):
        np.testing.assert_allclose(g.numpy(), tp.grad.numpy(), err_msg=name, **TOL)


def _states(mode, shape, rng):
    n = 2 if mode == "LSTM" else 1
    return tuple(rng.standard_normal(shape) for _ in range(n))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("num_layers", "bidirectional", "batch_first"),
    [(1, False, False), (2, False, False), (1, True, False), (2, True, True), (2, False, True)],
)
@pytest.mark.parametrize("given_state", [False, True])
def test_layer_matches_torch(mode, num_layers, bidirectional, batch_first, given_state) -> None:
    rng = np.random.default_rng(1)
    seq, batch, size_in, hidden = 5, 3, 4, 6
    ours, theirs = _pair(
        mode, size_in, hidden, num_layers, batch_first=batch_first, bidirectional=bidirectional
    )
    x = rng.standard_normal((batch, seq, size_in) if batch_first else (seq, batch, size_in))
    dirs = 2 if bidirectional else 1
    state = _states(mode, (num_layers * dirs, batch, hidden), rng) if given_state else None
    _run_both(ours, theirs, x, state)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("given_state", [False, True])
def test_unbatched_matches_torch(mode, given_state) -> None:
    rng = np.random.default_rng(2)
    ours, theirs = _pair(mode, 4, 5, 2, bidirectional=True)
    state = _states(mode, (4, 5), rng) if given_state else None
    _run_both(ours, theirs, rng.standard_normal((6, 4)), state)


@pytest.mark.parametrize("mode", MODES)
def test_no_bias_matches_torch(mode) -> None:
    rng = np.random.default_rng(3)
    ours, theirs = _pair(mode, 4, 5, 2, bias=False)
    assert not any("bias" in n for n, _ in ours.named_parameters())
    _run_both(ours, theirs, rng.standard_normal((4, 2, 4)), None)


def test_single_step_sequence() -> None:
    rng = np.random.default_rng(4)
    ours, theirs = _pair("LSTM", 3, 4)
    _run_both(ours, theirs, rng.standard_normal((1, 2, 3)), None)


@pytest.mark.parametrize("cell", ["RNNCell", "RNNCell_relu", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("given_state", [False, True])
def test_cell_matches_torch(cell, batched, given_state) -> None:
    rng = np.random.default_rng(5)
    ours, theirs = _pair(cell, 4, 5)
    lead = (3,) if batched else ()
    state = _states("LSTM" if cell == "LSTMCell" else "", lead + (5,), rng) if given_state else None
    _run_both(ours, theirs, rng.standard_normal(lead + (4,)), state)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_parameter_names_shapes_and_init(mode) -> None:
    ours = getattr(nn, mode)(7, 16, num_layers=2, bidirectional=True)
    theirs = getattr(torch.nn, mode)(7, 16, num_layers=2, bidirectional=True)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    bound = 1 / 4
    for p in ours.parameters():
        a = p.numpy()
        assert a.dtype == np.float32
        assert np.abs(a).max() <= bound
        assert np.abs(a).max() > 0.8 * bound  # spread over the whole interval


def test_torch_state_dict_loads_and_gives_identical_outputs() -> None:
    theirs = torch.nn.LSTM(5, 8, num_layers=2, bidirectional=True)  # float32, torch's own init
    ours = nn.LSTM(5, 8, num_layers=2, bidirectional=True)
    result = ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert not result.missing_keys and not result.unexpected_keys
    x = np.random.default_rng(6).standard_normal((4, 3, 5)).astype(np.float32)
    out, (h, c) = ours(tg.tensor(x))
    tout, (th, tc) = theirs(torch.tensor(x))
    for a, b in [(out, tout), (h, th), (c, tc)]:
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_dropout_between_layers(mode) -> None:
    tg.manual_seed(0)
    rng = np.random.default_rng(7)
    drop = getattr(nn, mode)(4, 6, num_layers=3, dropout=0.5)
    plain = getattr(nn, mode)(4, 6, num_layers=3)
    plain.load_state_dict(drop.state_dict())
    x = tg.tensor(rng.standard_normal((5, 2, 4)).astype(np.float32))
    out1, _ = drop(x)
    out2, _ = drop(x)
    assert out1.shape == (5, 2, 6)
    assert not np.allclose(out1.numpy(), out2.numpy())  # fresh masks per call in training
    ref, _ = plain(x)
    assert not np.allclose(out1.numpy(), ref.numpy())
    drop.eval()
    evaluated, _ = drop(x)
    np.testing.assert_array_equal(evaluated.numpy(), ref.numpy())
    one = getattr(nn, mode)(4, 6, num_layers=1, dropout=0.5)  # nothing between layers
    single = getattr(nn, mode)(4, 6, num_layers=1)
    single.load_state_dict(one.state_dict())
    np.testing.assert_array_equal(one(x)[0].numpy(), single(x)[0].numpy())


@pytest.mark.parametrize("cell", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cell_finite_differences(cell) -> None:
    tg.manual_seed(0)
    m = getattr(nn, cell)(3, 2, dtype=tg.float64)
    rng = np.random.default_rng(8)
    x = tg.tensor(rng.standard_normal((2, 3)))
    h = tg.tensor(rng.standard_normal((2, 2)))
    c = tg.tensor(rng.standard_normal((2, 2)))

    def f(x, h, c, w_ih, w_hh, b_ih, b_hh):
        if cell == "LSTMCell":
            hn, cn = FR.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)
            return hn * cn
        fn = FR.rnn_cell if cell == "RNNCell" else FR.gru_cell
        return fn(x, h, w_ih, w_hh, b_ih, b_hh) * 1.0

    weights = [tg.tensor(p.numpy()) for p in (m.weight_ih, m.weight_hh, m.bias_ih, m.bias_hh)]
    tg.testing.check_grads(f, [x, h, c, *weights])


def test_layer_finite_differences() -> None:
    m = nn.GRU(2, 3, num_layers=2, bidirectional=True, dtype=tg.float64)
    x = tg.tensor(np.random.default_rng(9).standard_normal((3, 2, 2)))
    tg.testing.check_grads(lambda x: m(x)[0], [x], order=1)


def test_bad_input_errors() -> None:
    lstm = nn.LSTM(4, 5, num_layers=2)
    with pytest.raises(ValueError, match=r"LSTM\(input_size=4\).*\(7, 2, 3\)"):
        lstm(tg.ones((7, 2, 3)))
    with pytest.raises(ValueError, match=r"LSTM: h_0 has shape \(1, 2, 5\), expected \(2, 2, 5\)"):
        lstm(tg.ones((7, 2, 4)), (tg.zeros((1, 2, 5)), tg.zeros((2, 2, 5))))
    with pytest.raises(ValueError, match="pair"):
        lstm(tg.ones((7, 2, 4)), tg.zeros((2, 2, 5)))
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(4, 5, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(4, 5, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match=r"GRUCell: hidden state has shape \(3,\)"):
        nn.GRUCell(4, 5)(tg.ones((2, 4)), tg.zeros(3))


def test_rnn_positional_nonlinearity() -> None:
    r = nn.RNN(3, 4, 2, "relu", False)
    assert r.nonlinearity == "relu" and r.num_layers == 2 and not r.bias
    assert "relu" in repr(r)
