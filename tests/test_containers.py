"""Containers against PyTorch: the same operations on a torch container and on a tapegrad one
give the same parameter names and shapes, state_dict keys, module paths, items and outputs."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
import torch

import tapegrad as tg


class Torch:
    nn: Any = torch.nn

    @staticmethod
    def lin() -> Any:
        return torch.nn.Linear(3, 3).double()

    @staticmethod
    def param(n: int) -> Any:
        return torch.nn.Parameter(torch.zeros(n, dtype=torch.float64))

    @staticmethod
    def tensor(n: int) -> Any:
        return torch.zeros(n, dtype=torch.float64)


class Ours:
    nn: Any = tg.nn

    @staticmethod
    def lin() -> Any:
        return tg.nn.Linear(3, 3).double()

    @staticmethod
    def param(n: int) -> Any:
        return tg.Parameter(np.zeros(n))

    @staticmethod
    def tensor(n: int) -> Any:
        return tg.tensor(np.zeros(n))


def _seq(L: Any) -> Any:
    return L.nn.Sequential(L.lin(), L.nn.ReLU(), L.lin())


def _od(L: Any) -> Any:
    return L.nn.Sequential(OrderedDict(fc=L.lin(), act=L.nn.Tanh(), out=L.lin()))


def _ml(L: Any) -> Any:
    return L.nn.ModuleList([L.lin(), L.nn.ReLU(), L.lin()])


def _md(L: Any) -> Any:
    return L.nn.ModuleDict({"a": L.lin(), "b": L.nn.ReLU(), "c": L.lin()})


def _pl(L: Any) -> Any:
    return L.nn.ParameterList([L.param(1), L.param(2)])


def _pd(L: Any) -> Any:
    return L.nn.ParameterDict({"x": L.param(1), "y": L.param(2)})


def _set(c: Any, k: Any, v: Any) -> None:
    c[k] = v


def _del(c: Any, k: Any) -> None:
    del c[k]


def _iadd(c: Any, other: Any) -> Any:
    c += other
    return c


# (name, build, operation): the operation runs on the container built by ``build`` and may
# return a new container (a slice, a sum) to compare instead
CASES: list[tuple[str, Any, Any]] = [
    ("seq add_module on empty", lambda L: L.nn.Sequential(),
     lambda L, c: (c.add_module("0", L.lin()), c.add_module("act", L.nn.ReLU()))),
    ("seq register_module", _seq, lambda L, c: c.register_module("fc", L.lin())),
    ("seq register_parameter", _seq, lambda L, c: c.register_parameter("scale", L.param(3))),
    ("seq register_buffer", _seq, lambda L, c: c.register_buffer("buf", L.tensor(2))),
    ("seq module attribute", _seq, lambda L, c: setattr(c, "extra", L.lin())),
    ("seq append", _seq, lambda L, c: c.append(L.nn.Tanh())),
    ("seq extend", _seq, lambda L, c: c.extend([L.nn.Tanh(), L.lin()])),
    ("seq insert 0", _seq, lambda L, c: c.insert(0, L.lin())),
    ("seq insert -1", _seq, lambda L, c: c.insert(-1, L.lin())),
    ("seq insert len", _seq, lambda L, c: c.insert(3, L.lin())),
    ("seq setitem", _seq, lambda L, c: _set(c, 1, L.lin())),
    ("seq setitem -1", _seq, lambda L, c: _set(c, -1, L.nn.Tanh())),
    ("seq delitem", _seq, lambda L, c: _del(c, 0)),
    ("seq delitem slice", _seq, lambda L, c: _del(c, slice(0, 2))),
    ("seq slice", _seq, lambda L, c: c[1:]),
    ("seq pop", _seq, lambda L, c: c.pop(0)),
    ("seq pop -1", _seq, lambda L, c: c.pop(-1)),
    ("seq iadd", _seq, lambda L, c: _iadd(c, L.nn.Sequential(L.nn.Tanh(), L.lin()))),
    ("seq add", _seq, lambda L, c: c + L.nn.Sequential(L.lin())),
    ("seq named setitem", _od, lambda L, c: _set(c, 0, L.lin())),
    ("seq named delitem", _od, lambda L, c: _del(c, 1)),
    ("seq named slice", _od, lambda L, c: c[1:]),
    ("seq named attribute", _od, lambda L, c: setattr(c, "act", L.nn.ReLU())),
    ("list append", _ml, lambda L, c: c.append(L.lin())),
    ("list extend", _ml, lambda L, c: c.extend([L.lin(), L.nn.Tanh()])),
    ("list insert 0", _ml, lambda L, c: c.insert(0, L.lin())),
    ("list insert 1", _ml, lambda L, c: c.insert(1, L.lin())),
    ("list insert len", _ml, lambda L, c: c.insert(3, L.lin())),
    ("list setitem", _ml, lambda L, c: _set(c, 1, L.lin())),
    ("list setitem -1", _ml, lambda L, c: _set(c, -1, L.nn.ReLU())),
    ("list delitem", _ml, lambda L, c: _del(c, 0)),
    ("list delitem -1", _ml, lambda L, c: _del(c, -1)),
    ("list delitem slice", _ml, lambda L, c: _del(c, slice(0, 3, 2))),
    ("list slice", _ml, lambda L, c: c[1:]),
    ("list pop", _ml, lambda L, c: c.pop(1)),
    ("list iadd", _ml, lambda L, c: _iadd(c, [L.lin()])),
    ("list add", _ml, lambda L, c: c + L.nn.ModuleList([L.lin()])),
    ("list add_module", _ml, lambda L, c: c.add_module("3", L.lin())),
    ("list register_parameter", _ml, lambda L, c: c.register_parameter("w", L.param(2))),
    ("dict setitem", _md, lambda L, c: _set(c, "d", L.lin())),
    ("dict setitem existing", _md, lambda L, c: _set(c, "a", L.nn.Tanh())),
    ("dict update mapping", _md, lambda L, c: c.update({"c": L.nn.ReLU(), "e": L.lin()})),
    ("dict update pairs", _md, lambda L, c: c.update([("z", L.lin()), ("a", L.lin())])),
    ("dict delitem", _md, lambda L, c: _del(c, "a")),
    ("dict pop", _md, lambda L, c: c.pop("c")),
    ("dict clear", _md, lambda L, c: c.clear()),
    ("dict add_module", _md, lambda L, c: c.add_module("m", L.lin())),
    ("plist append", _pl, lambda L, c: c.append(L.param(3))),
    ("plist append tensor", _pl, lambda L, c: c.append(L.tensor(4))),
    ("plist extend", _pl, lambda L, c: c.extend([L.param(3), L.param(4)])),
    ("plist iadd", _pl, lambda L, c: _iadd(c, [L.param(5)])),
    ("plist setitem", _pl, lambda L, c: _set(c, 0, L.param(6))),
    ("plist setitem -1", _pl, lambda L, c: _set(c, -1, L.tensor(7))),
    ("plist slice", _pl, lambda L, c: c[1:]),
    ("pdict setitem", _pd, lambda L, c: _set(c, "z", L.param(3))),
    ("pdict setitem tensor", _pd, lambda L, c: _set(c, "t", L.tensor(3))),
    ("pdict setitem existing", _pd, lambda L, c: _set(c, "x", L.param(4))),
    ("pdict update", _pd, lambda L, c: c.update({"y": L.param(5), "w": L.param(1)})),
    ("pdict update pairs", _pd, lambda L, c: c.update([("q", L.param(2))])),
    ("pdict delitem", _pd, lambda L, c: _del(c, "x")),
    ("pdict pop", _pd, lambda L, c: c.pop("y")),
    ("pdict clear", _pd, lambda L, c: c.clear()),
]  # fmt: skip


def _summary(c: Any) -> dict[str, Any]:
    out = {
        "parameters": [(n, tuple(p.shape)) for n, p in c.named_parameters()],
        "state_dict": list(c.state_dict()),
        "buffers": [n for n, _ in c.named_buffers()],
        "modules": [(n, type(m).__name__) for n, m in c.named_modules()],
        "children": [n for n, _ in c.named_children()],
        "len": len(c),
    }
    if isinstance(c, (torch.nn.ParameterDict, tg.nn.ParameterDict)):
        out["items"] = [(k, tuple(v.shape)) for k, v in c.items()]
    elif isinstance(c, (torch.nn.ParameterList, tg.nn.ParameterList)):
        out["items"] = [tuple(v.shape) for v in c]
    elif isinstance(c, (torch.nn.ModuleDict, tg.nn.ModuleDict)):
        out["items"] = [(k, type(m).__name__) for k, m in c.items()]
    else:
        out["items"] = [type(m).__name__ for m in c]
    return out


@pytest.mark.parametrize(("name", "build", "op"), CASES, ids=[c[0] for c in CASES])
def test_container_operation_as_pytorch(name: str, build: Any, op: Any) -> None:
    ref, ours = build(Torch), build(Ours)
    r_ret, o_ret = op(Torch, ref), op(Ours, ours)
    if type(r_ret) is type(ref):  # a slice or a sum: compare the new container
        ref, ours = r_ret, o_ret
    elif isinstance(r_ret, (torch.nn.Module, torch.Tensor)):
        assert type(o_ret).__name__ == type(r_ret).__name__  # pop returns the item
    assert _summary(ours) == _summary(ref)
    # copy the weights in by name; a Sequential then computes the same function
    ours.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    for (n, p), (tn, tp) in zip(ours.named_parameters(), ref.named_parameters(), strict=True):
        assert n == tn
        np.testing.assert_array_equal(p.numpy(), tp.detach().numpy())
    if isinstance(ref, torch.nn.Sequential):
        x = np.random.default_rng(0).standard_normal((4, 3))
        np.testing.assert_allclose(
            ours(tg.tensor(x)).numpy(),
            ref(torch.tensor(x)).detach().numpy(),
            rtol=1e-12,
            atol=1e-14,
        )


def test_pop_returns_the_item_and_renumbers() -> None:
    seq = tg.nn.Sequential(tg.nn.Linear(2, 2), tg.nn.ReLU(), tg.nn.Linear(2, 2))
    last = seq[2]
    assert (
        seq.pop(-1) is last and len(seq) == 2 and list(seq.state_dict()) == ["0.weight", "0.bias"]
    )
    ml = tg.nn.ModuleList([tg.nn.ReLU(), tg.nn.Tanh()])
    assert isinstance(ml.pop(0), tg.nn.ReLU) and list(ml._modules) == ["0"]


def test_add_module_to_an_empty_sequential_runs_it() -> None:
    seq = tg.nn.Sequential()
    lin = tg.nn.Linear(2, 1)
    seq.add_module("0", lin)
    assert (
        len(seq) == 1
        and seq[0] is lin
        and [n for n, _ in seq.named_parameters()]
        == [
            "0.weight",
            "0.bias",
        ]
    )
    x = tg.ones((3, 2))
    np.testing.assert_array_equal(seq(x).numpy(), lin(x).numpy())


def test_container_changes_invalidate_the_cached_parameter_list() -> None:
    for c, change in [
        (tg.nn.Sequential(tg.nn.Linear(2, 2)), lambda c: c.add_module("x", tg.nn.Linear(2, 2))),
        (tg.nn.ModuleList([tg.nn.Linear(2, 2)]), lambda c: c.pop(0)),
        (tg.nn.ParameterList([tg.zeros(2)]), lambda c: c.append(tg.zeros(3))),
        (tg.nn.ParameterDict({"a": tg.zeros(2)}), lambda c: c.pop("a")),
    ]:
        assert c._parameter_list() == list(c.parameters())
        change(c)
        walked = [id(p) for _, p in c.named_parameters()]  # the walk, never cached
        assert [id(p) for p in c._parameter_list()] == walked
        assert [id(p) for p in c.parameters()] == walked


def test_bad_items_are_named() -> None:
    with pytest.raises(TypeError, match="items must be Modules"):
        tg.nn.ModuleList().append(3)
    with pytest.raises(TypeError, match="keys must be strings"):
        tg.nn.ParameterDict()[1] = tg.zeros(1)
    with pytest.raises(IndexError, match="out of range"):
        tg.nn.ParameterList([tg.zeros(1)])[3]
    with pytest.raises(KeyError, match="its keys are"):
        del tg.nn.ModuleDict()["missing"]
