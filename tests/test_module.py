"""The Module system: discovery by walking attributes, names, state_dict, modes, copies."""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import nn


class Block(nn.Module):
    fc: nn.Linear
    scale: tg.Parameter

    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.scale = tg.Parameter(tg.ones(d))  # set after the child: PyTorch lists it first
        self.register_buffer("steps", tg.zeros((), dtype=tg.int64))
        self.register_buffer("cache", tg.zeros(d), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.scale


class TorchBlock(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.scale = torch.nn.Parameter(torch.ones(d))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("cache", torch.zeros(d), persistent=False)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.blocks = nn.ModuleList([Block(4) for _ in range(2)])
        self.extra = [Block(4)]  # a plain list is walked too
        self.heads = {"a": nn.Linear(4, 1)}

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        x = self.extra[0](x)
        return self.heads["a"](x)


class TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(3, 4)
        self.blocks = torch.nn.ModuleList([TorchBlock(4) for _ in range(2)])
        self.extra = torch.nn.ModuleList([TorchBlock(4)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 1)})


def test_names_and_order_match_pytorch():
    net, ref = Net(), TorchNet()
    assert list(net.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in net.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in net.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert net.num_parameters() == sum(p.numel() for p in ref.parameters())


def test_parameter_knows_its_path():
    net = Net()
    assert net.blocks[1].fc.weight.name == "blocks.1.fc.weight"
    assert net.extra[0].scale.name == "extra.0.scale"
    assert net.heads["a"].bias.name == "heads.a.bias"
    assert nn.Linear(2, 2).weight.name == "weight"


def test_children_and_modules():
    net = Net()
    assert [n for n, _ in net.named_children()] == ["embed", "blocks", "extra.0", "heads.a"]
    names = [n for n, _ in net.named_modules()]
    assert names[:4] == ["", "embed", "blocks", "blocks.0"]
    assert "blocks.1.fc" in names and "extra.0.fc" in names
    assert len(list(net.modules())) == len(names)
    assert net.get_submodule("blocks.1.fc") is net.blocks[1].fc
    assert net.get_parameter("extra.0.fc.bias") is net.extra[0].fc.bias
    with pytest.raises(AttributeError, match="no submodule 'nope'"):
        net.get_submodule("nope")


def test_buffers_persistent_and_not():
    b = Block(3)
    assert [n for n, _ in b.named_buffers()] == ["steps", "cache"]
    assert "cache" not in b.state_dict()
    assert "steps" in b.state_dict()
    b.register_buffer("cache", b.cache, persistent=True)
    assert "cache" in b.state_dict()
    with pytest.raises(TypeError, match="register_buffer"):
        b.register_buffer("w", tg.Parameter(tg.ones(2)))


def test_shared_parameters_and_modules():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

    class TorchTied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

    t, r = Tied(), TorchTied()
    assert [n for n, _ in t.named_parameters()] == [n for n, _ in r.named_parameters()]
    assert list(t.state_dict()) == list(r.state_dict())
    assert t.emb.weight.name == "emb.weight"  # the first path wins

    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    tseq = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    tseq.append(tseq[0])
    assert list(seq.state_dict()) == list(tseq.state_dict())
    assert len(list(seq.parameters())) == 2


def test_cycle_does_not_hang():
    a = nn.Sequential(nn.Linear(2, 2))
    a.back = a  # a reference to itself (ignored by Sequential's fields, walked by Module's)
    outer = nn.Module()
    outer.inner = a
    a[0].parent = outer
    assert list(outer.state_dict()) == ["inner.0.weight", "inner.0.bias"]


def test_load_state_dict_sources_and_copy():
    net, ref = Net(), TorchNet()
    sd = ref.state_dict()
    res = net.load_state_dict(sd)  # torch tensors, read with np.asarray
    assert res.missing_keys == [] and res.unexpected_keys == []
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())
    arrays = {k: v.numpy().copy() for k, v in sd.items()}
    w = net.embed.weight
    v0 = w._version
    net.load_state_dict(arrays)
    assert net.embed.weight is w and w._version == v0 + 1  # the same Parameter, updated
    arrays["embed.weight"][:] = 7.0  # the model holds a copy
    assert not np.any(net.embed.weight.numpy() == 7.0)
    # tensors of another dtype are cast to the model's dtype
    net.load_state_dict(
        {
            k: tg.tensor(v.astype(np.float64) if v.dtype.kind == "f" else v)
            for k, v in arrays.items()
        }
    )
    assert net.embed.weight.dtype == tg.float32


def test_load_state_dict_errors():
    lin = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match=r"missing keys \['bias'\]"):
        lin.load_state_dict({"weight": np.zeros((2, 3))})
    with pytest.raises(RuntimeError, match=r"unexpected keys \['extra'\]"):
        lin.load_state_dict({"weight": np.zeros((2, 3)), "bias": np.zeros(2), "extra": np.zeros(1)})
    with pytest.raises(
        RuntimeError, match=r"'weight': \(3, 2\) in the state dict, \(2, 3\) in the model"
    ):
        lin.load_state_dict({"weight": np.zeros((3, 2)), "bias": np.zeros(2)})
    with pytest.raises(RuntimeError, match="prefix 'module.'"):
        lin.load_state_dict({"module.weight": np.zeros((2, 3)), "module.bias": np.zeros(2)})
    res = lin.load_state_dict({"weight": np.ones((2, 3)), "other": np.zeros(1)}, strict=False)
    assert res.missing_keys == ["bias"] and res.unexpected_keys == ["other"]
    np.testing.assert_array_equal(lin.weight.numpy(), np.ones((2, 3)))
    with pytest.raises(TypeError, match="mapping"):
        lin.load_state_dict([1, 2])


def test_state_dict_round_trip_to_torch():
    net, ref = Net(), TorchNet()
    sd = {k: torch.from_numpy(v.numpy().copy()) for k, v in net.state_dict().items()}
    ref.load_state_dict(sd, strict=True)
    for k, v in ref.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), net.state_dict()[k].numpy())


def test_state_dict_values_share_memory_and_keep_vars():
    lin = nn.Linear(2, 2)
    sd = lin.state_dict()
    assert not isinstance(sd["weight"], tg.Parameter)
    assert np.shares_memory(sd["weight"].numpy(), lin.weight._data)
    assert lin.state_dict(keep_vars=True)["weight"] is lin.weight
    assert list(lin.state_dict(prefix="enc.")) == ["enc.weight", "enc.bias"]


def test_train_eval_recursive():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())


def test_requires_grad_freezes():
    net = Net()
    net.embed.requires_grad_(False)
    x = tg.ones((2, 3))
    with tg.Tape() as tape:
        loss = net(x).sum()
    g = tape.gradient(loss, net)
    assert net.embed.weight not in g and net.blocks[0].fc.weight in g
    assert "frozen" in g.why_missing(net.embed.weight)
    assert net.num_parameters(trainable_only=True) == net.num_parameters() - 16


def test_gradients_match_torch():
    net, ref = Net(), TorchNet()
    net.load_state_dict(ref.state_dict())
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    with tg.Tape() as tape:
        loss = net(tg.tensor(x)).sum()
    g = tape.gradient(loss, net).named(net)

    def tforward(m, x):
        x = m.embed(x)
        for b in [*m.blocks, *m.extra]:
            x = b.fc(x) * b.scale
        return m.heads["a"](x)

    tforward(ref, torch.from_numpy(x)).sum().backward()
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(g[name], p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_apply_children_first():
    net = Net()
    order = []
    net.apply(lambda m: order.append(type(m).__name__))
    assert order[-1] == "Net"
    assert order.index("Linear") < order.index("Block")

    def zero(m):
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)

    net.apply(zero)
    assert float(abs(net.embed.weight).sum()) == 0.0


def test_to_dtype_keeps_identity():
    b = Block(3)
    w = b.fc.weight
    b.to(tg.float64)
    assert b.fc.weight is w and w.dtype == tg.float64
    assert b.steps.dtype == tg.int64  # integer buffers keep their dtype
    assert b.cache.dtype == tg.float64
    b.float()
    assert w.dtype == tg.float32
    b.double()
    assert b.scale.dtype == tg.float64
    with pytest.raises(TypeError, match="float dtype"):
        b.to(tg.int32)


def test_repr_matches_pytorch():
    ours = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1, bias=False), nn.GELU())
    ref = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1, bias=False), torch.nn.GELU()
    )
    assert repr(ours) == repr(ref)
    assert repr(nn.Identity()) == "Identity()"


def test_scope_on_tape_nodes():
    net = Net()
    with tg.Tape() as tape:
        net(tg.ones((1, 3))).sum()
    scopes = [n.scope for n in tape.nodes]
    assert "blocks.1.fc" in scopes and "extra.0.fc" in scopes and "heads.a" in scopes
    assert "blocks.0" in scopes  # Block's own multiply
    with tg.Tape() as tape:
        nn.Linear(2, 2)(tg.ones((1, 2)))
    assert {n.scope for n in tape.nodes} == {"Linear"}  # a root is named by its class


def test_deepcopy_gives_fresh_leaves():
    net = Net()
    twin = copy.deepcopy(net)
    for (n1, p1), (n2, p2) in zip(net.named_parameters(), twin.named_parameters()):
        assert n1 == n2 and p1 is not p2 and p1._tid != p2._tid
        assert p2.name == p1.name
        np.testing.assert_array_equal(p1.numpy(), p2.numpy())
        assert not np.shares_memory(p1._data, p2._data)
    x = tg.ones((2, 3))
    with tg.Tape() as tape:
        loss = net(x).sum() + 2 * twin(x).sum()
    g = tape.gradient(loss)
    np.testing.assert_allclose(g[twin.embed.bias].numpy(), 2 * g[net.embed.bias].numpy(), rtol=1e-6)


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[1], nn.ReLU) and isinstance(seq[-1], nn.Linear)
    assert list(seq[1:].state_dict()) == ["2.weight", "2.bias"]  # keys kept, as PyTorch
    seq.append(nn.Tanh())
    seq.insert(0, nn.Identity())
    assert [type(m).__name__ for m in seq] == ["Identity", "Linear", "ReLU", "Linear", "Tanh"]
    assert list(seq.state_dict()) == ["1.weight", "1.bias", "3.weight", "3.bias"]
    del seq[0]
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert seq(tg.ones((4, 2))).shape == (4, 1)

    named = nn.Sequential(OrderedDict(conv=nn.Linear(2, 2), act=nn.ReLU()))
    assert named.conv is named[0] and list(named.state_dict()) == ["conv.weight", "conv.bias"]
    with pytest.raises(AttributeError):
        _ = named.missing
    with pytest.raises(TypeError, match="items must be Modules"):
        nn.Sequential(lambda x: x)

    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml += [nn.Linear(1, 2)]
    ml.insert(0, nn.ReLU())
    assert len(ml) == 3 and list(ml.state_dict())[0] == "1.weight"
    del ml[0]
    assert list(ml.state_dict())[0] == "0.weight"
    with pytest.raises(NotImplementedError, match="iterate"):
        ml(tg.ones(1))
    with pytest.raises(IndexError, match="out of range"):
        ml[5]

    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    md["b"] = nn.Linear(1, 2)
    assert "b" in md and list(md) == ["a", "b"] and len(md) == 2
    assert list(md.state_dict()) == ["a.weight", "a.bias", "b.weight", "b.bias"]
    md.pop("a")
    assert list(md.keys()) == ["b"]
    with pytest.raises(KeyError, match="keys are"):
        md["zzz"]


def test_residual():
    inner = nn.Linear(3, 3)
    res = nn.Residual(inner)
    x = tg.tensor(np.random.default_rng(1).standard_normal((2, 3)), dtype=tg.float32)
    np.testing.assert_allclose(res(x).numpy(), (x + inner(x)).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="same shape"):
        nn.Residual(nn.Linear(3, 2))(x)


def test_frozen_parameter_not_watched():
    lin = nn.Linear(2, 2).requires_grad_(False)
    with tg.Tape() as tape:
        lin(tg.ones((1, 2))).sum()
    assert len(tape.nodes) == 0


def test_module_without_super_init():
    class Bare(nn.Module):
        def __init__(self):
            self.w = tg.Parameter(tg.ones(2))

        def forward(self, x):
            return x * self.w

    b = Bare()
    assert b.training and list(b.state_dict()) == ["w"]
    assert b(tg.ones(2)).tolist() == [1.0, 1.0]
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_registered_private_names_are_fields():
    class Legacy(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("_float_tensor", tg.zeros(1))
            self.register_parameter("_scale", tg.Parameter(tg.ones(2)))
            self._cache = tg.zeros(3)  # private: never walked

    class TorchLegacy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("_float_tensor", torch.zeros(1))
            self.register_parameter("_scale", torch.nn.Parameter(torch.ones(2)))

    m = Legacy()
    assert list(m.state_dict()) == list(TorchLegacy().state_dict()) == ["_scale", "_float_tensor"]
    assert m._scale.name == "_scale"
    with pytest.raises(KeyError, match="without '.'"):
        m.register_buffer("a.b", tg.zeros(1))


def test_apply_is_post_order_like_pytorch():
    ours = nn.Sequential(nn.Sequential(nn.Linear(1, 1), nn.ReLU()), nn.Linear(1, 1))
    ref = torch.nn.Sequential(
        torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU()), torch.nn.Linear(1, 1)
    )
    got, want = [], []
    ours.apply(lambda m: got.append(type(m).__name__))
    ref.apply(lambda m: want.append(type(m).__name__))
    assert got == want


def test_named_modules_with_duplicates_and_cycles():
    shared = nn.Linear(1, 1)
    seq = nn.Sequential(shared, shared)
    assert [n for n, _ in seq.named_modules()] == ["", "0"]
    assert [n for n, _ in seq.named_modules(remove_duplicate=False)] == ["", "0", "1"]
    outer = nn.Module()
    outer.inner = nn.Module()
    outer.inner.up = outer  # a cycle
    assert [n for n, _ in outer.named_modules(remove_duplicate=False)] == ["", "inner"]
    assert outer.get_submodule("inner") is outer.inner
    assert repr(outer) == "Module(\n  (inner): Module(\n    (up): Module(...)\n  )\n)"


def test_cached_parameter_list_follows_every_change():
    """tape.gradient(loss, model) reuses the parameter list until the module tree changes."""
    from tapegrad import nn

    def same(m):  # the cached list and parameters() (which reads it) against a fresh walk
        walked = [id(p) for _, p in m.named_parameters()]
        assert [id(p) for p in m._parameter_list()] == walked
        assert [id(p) for p in m.parameters()] == walked

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.ModuleList([nn.Linear(2, 2)])
            self.heads = nn.ModuleDict({"a": nn.Linear(2, 1)})
            self.seq = nn.Sequential(nn.Linear(2, 2))

    m = Net()
    same(m)
    first = m._parameter_list()
    assert m._parameter_list() == first  # cached
    m.body.append(nn.Linear(2, 3))
    same(m)
    m.body[0] = nn.Linear(2, 2)
    same(m)
    m.heads["b"] = nn.Linear(2, 4)
    same(m)
    m.heads.pop("a")
    same(m)
    m.seq.append(nn.Linear(2, 2))
    same(m)
    del m.seq[0]
    same(m)
    m.seq[0].weight = nn.Parameter(tg.ones((2, 2)))  # replaced on a submodule
    same(m)
    m.extra = nn.Parameter(tg.ones(1))
    same(m)
    del m.extra
    same(m)
    m.body.insert(0, nn.Linear(2, 2))
    same(m)
    m.heads.clear()
    same(m)

    class Plain(nn.Module):  # a plain list can change without the module seeing it
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(2, 2)]

    p = Plain()
    same(p)
    p.layers.append(nn.Linear(2, 2))
    same(p)
    assert len(p._parameter_list()) == 4
