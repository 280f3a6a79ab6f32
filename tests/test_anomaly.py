"""tg.detect_anomaly: the first NaN or inf names its op, module, input shapes and source line."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _autodiff


@pytest.fixture(autouse=True)
def _quiet_numpy():
    with np.errstate(all="ignore"):  # numpy's own warnings would come first
        yield


class Head(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(2, 2)
        self.lin.load_state_dict({"weight": np.eye(2), "bias": np.zeros(2)})

    def forward(self, x):
        h = self.lin(x)
        return tg.log(h)  # NaN where h < 0


class Net(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        return self.head(x)


def test_forward_names_the_op_module_shapes_and_line():
    net = Net()
    with pytest.raises(tg.AnomalyError) as e, tg.detect_anomaly(), tg.Tape():
        net(tg.tensor([[1.0, -3.0]]))
    msg = str(e.value)
    assert msg.startswith("detect_anomaly: forward: op 'log' produced 1 NaN")
    assert "in module 'head'" in msg
    assert "inputs: (1, 2) float32" in msg
    assert "test_anomaly.py:" in msg and "return tg.log(h)" in msg
    assert isinstance(e.value, FloatingPointError)


def test_forward_without_a_tape_is_checked_too():
    with (
        pytest.raises(tg.AnomalyError, match=r"op 'div' produced 1 inf .*x / y"),
        tg.detect_anomaly(),
    ):
        x, y = tg.tensor([1.0, 2.0]), tg.tensor([0.0, 1.0])
        x / y


def test_backward_names_the_op_and_its_forward_line():
    x = tg.tensor([0.0, 4.0])
    with tg.detect_anomaly():
        with tg.Tape() as tape:
            tape.watch(x)
            y = tg.sqrt(x).sum()  # finite, but its gradient at 0 is inf
        with pytest.raises(tg.AnomalyError) as e:
            tape.gradient(y, x)
    msg = str(e.value)
    assert msg.startswith("detect_anomaly: backward: the gradient of op 'sqrt'")
    assert "input 0 ((2,) float32) has 1 inf" in msg
    assert "y = tg.sqrt(x).sum()" in msg


def test_an_input_that_already_holds_nan_is_pointed_out():
    with pytest.raises(tg.AnomalyError, match=r"op 'mul' .*input 0 already held NaN or inf"):
        with tg.detect_anomaly():
            tg.tensor([np.nan, 1.0]) * tg.tensor([1.0, 2.0])


def test_finite_runs_pass_and_the_hooks_go_away_on_exit():
    net = Net()
    x = tg.tensor([[1.0, 3.0]])
    with tg.detect_anomaly():
        with tg.Tape() as tape:
            loss = net(x).sum()
        grads = tape.gradient(loss, net)
    assert np.isfinite(grads[net.head.lin.weight].numpy()).all()
    assert tg.log(tg.tensor([-1.0])).isnan().all()  # off again: no error
    prev = _autodiff.set_op_hooks(None, None)
    assert prev == (None, None)


def test_nested_contexts_restore_the_outer_one():
    with tg.detect_anomaly():
        with tg.detect_anomaly(check_forward=False):
            tg.log(tg.tensor([-1.0]))  # forward off in the inner one
        with pytest.raises(tg.AnomalyError):
            tg.log(tg.tensor([-1.0]))


def test_check_forward_off_still_checks_backward():
    x = tg.tensor([0.0])
    with tg.detect_anomaly(check_forward=False):
        with tg.Tape() as tape:
            tape.watch(x)
            y = tg.log(x).sum()  # -inf in forward: not checked
        with pytest.raises(tg.AnomalyError, match="backward: the gradient of op 'log'"):
            tape.gradient(y, x)


def test_an_engine_without_the_hooks_raises_not_implemented(monkeypatch):
    monkeypatch.delattr(_autodiff, "set_op_hooks")
    with pytest.raises(NotImplementedError, match="after_op/after_vjp"):
        with tg.detect_anomaly():
            pass


def test_a_tape_option_checks_its_block_and_its_gradient():
    net = Net()
    with pytest.raises(tg.AnomalyError, match="forward: op 'log'"), tg.Tape(detect_anomaly=True):
        net(tg.tensor([[1.0, -3.0]]))
    x = tg.tensor([0.0, 4.0])
    tape = tg.Tape(detect_anomaly=True)
    with tape:
        tape.watch(x)
        y = tg.sqrt(x).sum()  # finite forward; the gradient at 0 is inf
    with pytest.raises(tg.AnomalyError, match="backward"):
        tape.gradient(y, x)
    with tg.Tape() as plain:  # off by default: nothing checks
        plain.watch(x)
        z = tg.sqrt(x).sum()
    assert np.isinf(plain.gradient(z, x).numpy()[0])
