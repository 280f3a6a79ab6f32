"""tape.summary(), tape.to_dot() and tape.explain() on small graphs whose answers are known."""

from __future__ import annotations

import re

import numpy as np

import tapegrad as tg


class Lin(tg.nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = tg.Parameter(np.ones((n_in, n_out)))
        self.bias = tg.Parameter(np.zeros(n_out))

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return x @ self.weight + self.bias


class Net(tg.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = Lin(3, 2)
        self.head = Lin(2, 1)
        self.spare = Lin(2, 1)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return self.head(tg.tanh(self.enc(x)))


def _record(persistent: bool = True):
    net = Net()
    x = tg.tensor(np.ones((4, 3)))
    tape = tg.Tape(persistent=persistent)
    with tape:
        loss = net(x).sum()
    return net, x, tape, loss


# -- summary -----------------------------------------------------------------------------------


def test_summary_lists_each_op_with_shape_dtype_bytes_and_module():
    net, x, tape, loss = _record()
    lines = tape.summary().splitlines()
    assert lines[0].split() == ["#", "op", "output", "dtype", "saved", "module"]
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in lines[2:-1]]
    assert [r[1] for r in rows] == ["matmul", "add", "tanh", "matmul", "add", "sum"]
    assert [r[2] for r in rows] == ["(4, 2)", "(4, 2)", "(4, 2)", "(4, 1)", "(4, 1)", "()"]
    assert all(r[3] == "float64" for r in rows)
    # matmul keeps x (96 B) and the weight (48 B); tanh keeps its output (64 B); add keeps nothing
    assert [r[4] for r in rows] == ["144 B", "0 B", "64 B", "80 B", "0 B", "0 B"]
    assert [r[5] if len(r) > 5 else "" for r in rows] == ["enc", "enc", "Net", "head", "head", ""]
    # x, enc.weight, the tanh output and head.weight: the tanh output is held once although
    # tanh and the head's matmul both keep it (96 + 48 + 64 + 16)
    assert lines[-1] == "6 ops, 4 leaves, 224 B held for backward"
    assert tape.bytes_held() == 224
    tape.release()
    assert tape.summary().splitlines()[-1] == "0 ops, 0 leaves, 0 B held for backward (released)"


# -- to_dot ------------------------------------------------------------------------------------


def test_to_dot_is_the_dag_with_parameters_named_by_module_path():
    net, x, tape, loss = _record()
    dot = tape.to_dot()
    assert dot.startswith("digraph tape {") and dot.endswith("}")
    ops = dict(re.findall(r'(op\d+) \[label="(\w+)\\n', dot))
    assert sorted(ops.values()) == sorted(["matmul", "add", "tanh", "matmul", "add", "sum"])
    leaves = dict(re.findall(r'(leaf\d+) \[label="([\w.]+)\\n', dot))
    assert sorted(leaves.values()) == ["enc.bias", "enc.weight", "head.bias", "head.weight"]
    edges = re.findall(r"(\w+) -> (\w+);", dot)
    named = {(leaves.get(a, ops.get(a)), ops[b]) for a, b in edges}
    assert ("enc.weight", "matmul") in named and ("head.bias", "add") in named
    assert ("tanh", "matmul") in named and ("add", "sum") in named
    assert len(edges) == 9  # 5 chain edges + 4 parameter edges (x is not on the tape)
    assert 'label="enc"' in dot and 'label="head"' in dot  # one cluster per module
    tape.release()


def test_to_dot_shows_watched_inputs_and_only_edges_on_this_tape():
    a, b = tg.tensor(np.ones(2)), tg.tensor(np.ones(2))
    t1, t2 = tg.Tape(persistent=True), tg.Tape(persistent=True)
    with t1, t2:
        t1.watch(a)
        t2.watch(b)
        (a * b).sum()
    d1 = t1.to_dot()
    assert d1.count('label="input') == 1 and d1.count("->") == 2  # a -> mul -> sum
    t1.release()
    t2.release()


# -- explain -----------------------------------------------------------------------------------


def test_explain_gives_the_path():
    net, x, tape, loss = _record()
    assert tape.explain(loss, net.enc.weight) == (
        "enc.weight (3, 2) -> matmul (4, 2) in enc -> add (4, 2) in enc -> tanh (4, 2) in Net "
        "-> matmul (4, 1) in head -> add (4, 1) in head -> sum ()"
    )
    assert tape.explain(loss, net.head.bias) == "head.bias (1,) -> add (4, 1) in head -> sum ()"
    tape.release()


def test_explain_says_why_there_is_no_path():
    net, x, tape, loss = _record()
    assert "not on this tape" in tape.explain(loss, x)  # never watched
    assert "never met this tape" in tape.explain(loss, net.spare.weight)
    assert "integer" in tape.explain(loss, tg.tensor(np.arange(3)))
    net.spare.bias.requires_grad = False
    assert "frozen" in tape.explain(loss, net.spare.bias)
    assert "target is not on this tape" in tape.explain(tg.ones(2).sum(), net.enc.weight)
    tape.release()
    assert "released" in tape.explain(loss, net.enc.weight)

    w = tg.Parameter(np.ones(2))
    v = tg.Parameter(np.ones(2))
    with tg.Tape(persistent=True) as tape:
        side = (v * 2.0).sum()
        loss = (w * tg.stop_gradient(v)).sum()
    assert "does not depend on it" in tape.explain(loss, v)
    assert tape.explain(side, v) == "source (2,) -> mul_scalar (2,) -> sum ()"
    tape.release()
