"""Optimizers against torch.optim (float64, identical weights and gradient sequences), the
missing-gradient error, state dicts, validation, and the weight EMA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import optim

STEPS = 50
SHAPES = [(3, 4), (5,), (2, 2, 2)]


def _grad_seq(steps: int, seed: int = 0) -> list[list[np.ndarray]]:
    # magnitudes vary from step to step so amsgrad's running max and momentum both matter
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=s) * rng.uniform(0.1, 3.0) for s in SHAPES] for _ in range(steps)]


def _pair(seed: int = 1) -> tuple[list[tg.Parameter], list[torch.Tensor]]:
    rng = np.random.default_rng(seed)
    init = [rng.normal(size=s) for s in SHAPES]
    ours = [tg.Parameter(tg.tensor(a, dtype=tg.float64)) for a in init]
    theirs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in init]
    return ours, theirs


def _groups(params, lrs):
    # two groups: the first parameter alone, the rest together
    return [{"params": params[:1], "lr": lrs[0]}, {"params": params[1:], "lr": lrs[1]}]


def _run(tg_cls, torch_cls, kwargs, grouped=False, steps=STEPS):
    ours, theirs = _pair()
    if grouped:
        opt = tg_cls(_groups(ours, (0.05, 0.002)), **kwargs)
        topt = torch_cls(_groups(theirs, (0.05, 0.002)), **kwargs)
    else:
        opt, topt = tg_cls(ours, **kwargs), torch_cls(theirs, **kwargs)
    for gs in _grad_seq(steps):
        opt.step(tg.Gradients((p, tg.tensor(g)) for p, g in zip(ours, gs)))
        for t, g in zip(theirs, gs):
            t.grad = torch.tensor(g)
        topt.step()
    for p, t in zip(ours, theirs):
        assert p.dtype == tg.float64
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
    return opt, topt


CASES = [
    (optim.SGD, torch.optim.SGD, dict(lr=0.01)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.9)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.9, dampening=0.3)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.9, nesterov=True)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.01, weight_decay=0.1)),
    (optim.SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.8, nesterov=True, weight_decay=0.05)),
    (optim.Adam, torch.optim.Adam, dict(lr=0.01)),
    (optim.Adam, torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6)),
    (optim.Adam, torch.optim.Adam, dict(lr=0.01, amsgrad=True)),
    (optim.Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    (optim.Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (optim.Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    (optim.AdamW, torch.optim.AdamW, dict(lr=0.01)),
    (optim.AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-4)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01, centered=True)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01, momentum=0.9)),
    (
        optim.RMSprop,
        torch.optim.RMSprop,
        dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.1),
    ),
    (optim.Adagrad, torch.optim.Adagrad, dict(lr=0.1)),
    (optim.Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01)),
    (
        optim.Adagrad,
        torch.optim.Adagrad,
        dict(lr=0.1, weight_decay=0.1, initial_accumulator_value=0.5),
    ),
]


@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"), CASES, ids=lambda x: getattr(x, "__name__", None) or str(x)
)
def test_matches_torch(ours, theirs, kwargs):
    _run(ours, theirs, kwargs)


@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"),
    [
        (optim.SGD, torch.optim.SGD, dict(momentum=0.9)),
        (optim.Adam, torch.optim.Adam, dict(amsgrad=True)),
        (optim.AdamW, torch.optim.AdamW, dict()),
        (optim.RMSprop, torch.optim.RMSprop, dict(centered=True, momentum=0.5)),
        (optim.Adagrad, torch.optim.Adagrad, dict(lr_decay=0.01)),
    ],
    ids=lambda x: getattr(x, "__name__", None) or str(x),
)
def test_param_groups_with_different_lrs_match_torch(ours, theirs, kwargs):
    opt, _ = _run(ours, theirs, kwargs, grouped=True)
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.002]


def test_group_hyperparameters_override_defaults():
    a, b = tg.Parameter(tg.ones(2)), tg.Parameter(tg.ones(2))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "momentum": 0.5}], lr=0.1, momentum=0.9)
    assert opt.param_groups[0]["momentum"] == 0.9 and opt.param_groups[1]["momentum"] == 0.5
    assert opt.param_groups[1]["lr"] == 0.1


def test_float32_parameters_stay_float32_and_version_bumps():
    w = tg.Parameter(tg.ones(3))
    opt = optim.Adam([w], lr=0.1)
    v0 = w._version
    opt.step({w: tg.ones(3)})
    assert w.dtype == tg.float32 and w._version == v0 + 1
    np.testing.assert_allclose(w.numpy(), 0.9, rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True),
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
        lambda ps: optim.Adam(ps, weight_decay=0.1, amsgrad=True),
        lambda ps: optim.RMSprop(ps, weight_decay=0.1, centered=True, momentum=0.9),
        lambda ps: optim.Adagrad(ps, weight_decay=0.1),
    ],
)
def test_step_never_modifies_the_gradients(make):
    ps, _ = _pair()
    opt = make(ps)
    gs = _grad_seq(3)
    for step in gs:
        grads = tg.Gradients((p, tg.tensor(g.copy())) for p, g in zip(ps, step))
        opt.step(grads)
        for p, g in zip(ps, step):
            np.testing.assert_array_equal(grads[p].numpy(), g)


def test_end_to_end_with_tape_gradients_matches_torch():
    rng = np.random.default_rng(3)
    w0, x, y = rng.normal(size=(4, 3)), rng.normal(size=(8, 4)), rng.normal(size=(8, 3))
    w = tg.Parameter(tg.tensor(w0, dtype=tg.float64))
    tw = torch.tensor(w0, requires_grad=True)
    opt, topt = optim.Adam([w], lr=0.05), torch.optim.Adam([tw], lr=0.05)
    xt, yt = tg.tensor(x), tg.tensor(y)
    for _ in range(20):
        with tg.Tape() as tape:
            loss = ((xt @ w - yt) ** 2).mean()
        opt.step(tape.gradient(loss))
        topt.zero_grad()
        ((torch.tensor(x) @ tw - torch.tensor(y)) ** 2).mean().backward()
        topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-10)


# -- missing gradients ------------------------------------------------------------------------


class _Lin(tg.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = tg.Parameter(tg.randn(n_out, n_in, dtype=tg.float64))
        self.bias = tg.Parameter(tg.zeros(n_out, dtype=tg.float64))

    def forward(self, x):
        return x @ self.weight.T + self.bias


class _Net(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = _Lin(3, 4)
        self.head = _Lin(4, 2)
        self.aux = _Lin(4, 1)  # never used in forward

    def forward(self, x):
        return self.head(self.encoder(x))


def _loss(model):
    x = tg.ones(5, 3, dtype=tg.float64)
    return (model(x) ** 2).mean()


def test_missing_gradient_names_the_parameter_and_the_tape_reason():
    model = _Net()
    opt = optim.SGD(model.parameters(), lr=0.1)
    with tg.Tape() as tape:
        loss = _loss(model)
    grads = tape.gradient(loss, model)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError) as e:
        opt.step(grads)
    msg = str(e.value)
    assert "'aux.weight'" in msg and "'aux.bias'" in msg
    assert "encoder.weight" not in msg
    assert grads.why_missing(model.aux.weight) in msg  # the tape's own reason
    assert "allow_missing=True" in msg
    # nothing was updated: the check runs before any parameter moves
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_missing_gradient_from_a_whole_tape_request_gives_the_tape_reason():
    model = _Net()
    opt = optim.Adam(model.parameters())
    with tg.Tape() as tape:
        loss = _loss(model)
    grads = tape.gradient(loss)  # every leaf that took part; aux never met the tape
    with pytest.raises(
        RuntimeError, match=r"'aux\.weight' \(shape \(1, 4\)\): it never met the tape"
    ):
        opt.step(grads)


def test_missing_gradient_without_a_tape_lists_likely_causes():
    model = _Net()
    opt = optim.SGD(model.parameters(), lr=0.1)
    grads = tg.Gradients((p, tg.zeros_like(p)) for p in model.encoder.parameters())
    with pytest.raises(
        RuntimeError, match=r"'head\.weight'.*got no gradient.*not used in the forward"
    ):
        opt.step(grads)
    with pytest.raises(RuntimeError, match=r"'head\.bias'.*got no gradient"):
        opt.step({p: tg.zeros_like(p) for p in model.encoder.parameters()})


def test_allow_missing_skips_and_frozen_parameters_are_skipped():
    model = _Net()
    model.encoder.requires_grad_(False)
    opt = optim.SGD(model.parameters(), lr=0.1)
    aux0 = model.aux.weight.numpy().copy()
    enc0 = model.encoder.weight.numpy().copy()
    head0 = model.head.weight.numpy().copy()
    with tg.Tape() as tape:
        loss = _loss(model)
    grads = tape.gradient(loss, model)
    opt.step(grads, allow_missing=True)
    np.testing.assert_array_equal(model.aux.weight.numpy(), aux0)
    np.testing.assert_array_equal(model.encoder.weight.numpy(), enc0)
    assert not np.array_equal(model.head.weight.numpy(), head0)
    # frozen alone (aux frozen too) needs no allow_missing
    model.aux.requires_grad_(False)
    with tg.Tape() as tape:
        loss = _loss(model)
    opt.step(tape.gradient(loss, model))


def test_unnamed_parameter_and_wrong_gradient_shape():
    w = tg.Parameter(tg.ones(2, 3))
    opt = optim.SGD([w], lr=0.1)
    with pytest.raises(RuntimeError, match=r"unnamed parameter \(shape \(2, 3\)\)"):
        opt.step(tg.Gradients())
    with pytest.raises(
        ValueError, match=r"gradient .* has shape \(3,\) but the parameter has shape \(2, 3\)"
    ):
        opt.step({w: tg.ones(3)})
    with pytest.raises(TypeError, match="expected the tg.Gradients"):
        opt.step([tg.ones(2, 3)])


# -- state dicts ------------------------------------------------------------------------------


ALL = [
    lambda ps: optim.SGD(_groups(ps, (0.1, 0.01)), momentum=0.9, nesterov=True),
    lambda ps: optim.Adam(_groups(ps, (0.1, 0.01)), amsgrad=True, weight_decay=0.01),
    lambda ps: optim.AdamW(ps, lr=0.01),
    lambda ps: optim.RMSprop(ps, centered=True, momentum=0.5),
    lambda ps: optim.Adagrad(ps, lr_decay=0.01),
]


def _steps(opt, ps, gs):
    for step in gs:
        opt.step(tg.Gradients((p, tg.tensor(g)) for p, g in zip(ps, step)))


@pytest.mark.parametrize("make", ALL)
def test_state_dict_round_trip_mid_training_continues_identically(make):
    gs = _grad_seq(30)
    ps, _ = _pair()
    opt = make(ps)
    _steps(opt, ps, gs[:15])
    sd = opt.state_dict()
    snapshot = [p.numpy().copy() for p in ps]
    _steps(opt, ps, gs[15:])  # the uninterrupted run
    # the state dict is a copy: the later steps did not change it
    assert sd["state"][0] != {} and all(isinstance(k, int) for k in sd["state"])
    fresh = [tg.Parameter(tg.tensor(a)) for a in snapshot]
    opt2 = make(fresh)
    opt2.load_state_dict(sd)
    _steps(opt2, fresh, gs[15:])
    for a, b in zip(ps, fresh):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_state_dict_layout_is_pytorchs():
    ps, theirs = _pair()
    opt = optim.Adam(_groups(ps, (0.1, 0.01)), amsgrad=True)
    topt = torch.optim.Adam(_groups(theirs, (0.1, 0.01)), amsgrad=True)
    gs = _grad_seq(1)[0]
    opt.step(tg.Gradients((p, tg.tensor(g)) for p, g in zip(ps, gs)))
    for t, g in zip(theirs, gs):
        t.grad = torch.tensor(g)
    topt.step()
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in tsd["param_groups"]]
    assert sd["state"].keys() == tsd["state"].keys()
    for i in sd["state"]:
        assert set(sd["state"][i]) == set(tsd["state"][i])
        assert isinstance(sd["state"][i]["exp_avg"], np.ndarray)
    for ours, theirs_g in zip(sd["param_groups"], tsd["param_groups"]):
        for k in ("lr", "betas", "eps", "weight_decay", "amsgrad"):
            assert ours[k] == theirs_g[k]


@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"),
    [
        (optim.SGD, torch.optim.SGD, dict(lr=0.01)),
        (optim.SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.9)),
        (optim.Adam, torch.optim.Adam, dict(lr=0.01, amsgrad=True)),
        (optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01, momentum=0.9, centered=True)),
        (optim.Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01)),
    ],
    ids=lambda x: getattr(x, "__name__", None) or str(x),
)
def test_loads_a_pytorch_state_dict_converted_to_numpy(ours, theirs, kwargs):
    params, tparams = _pair()
    topt = theirs(tparams, **kwargs)
    gs = _grad_seq(20)
    for step in gs[:10]:
        for t, g in zip(tparams, step):
            t.grad = torch.tensor(g)
        topt.step()
    tsd = topt.state_dict()
    sd = {
        "state": {
            k: {n: (v.numpy() if isinstance(v, torch.Tensor) else v) for n, v in st.items()}
            for k, st in tsd["state"].items()
        },
        "param_groups": tsd["param_groups"],
    }
    for p, t in zip(params, tparams):
        p._data[...] = t.detach().numpy()
    opt = ours(params, **kwargs)
    opt.load_state_dict(sd)
    if "step" in tsd["state"].get(0, {}):
        assert opt.state[params[0]]["step"] == 10
    _steps(opt, params, gs[10:])
    for step in gs[10:]:
        for t, g in zip(tparams, step):
            t.grad = torch.tensor(g)
        topt.step()
    for p, t in zip(params, tparams):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_load_state_dict_skips_none_entries():
    w = tg.Parameter(tg.ones(2))
    opt = optim.SGD([w], lr=0.1)
    sd = {"state": {0: {"momentum_buffer": None}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    opt.load_state_dict(sd)
    assert opt.state[w] == {}
    assert opt.param_groups[0]["momentum"] == 0.0  # keys the saved group lacks keep their values


def test_load_state_dict_rejects_mismatches():
    ps, _ = _pair()
    opt = optim.Adam(ps)
    _steps(opt, ps, _grad_seq(1))
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="1 parameter groups"):
        optim.Adam(_groups(ps, (0.1, 0.1))).load_state_dict(sd)
    with pytest.raises(ValueError, match="group 0 has 3 parameters in the state dict but 2 here"):
        optim.Adam(ps[:2]).load_state_dict(sd)
    other = [tg.Parameter(tg.zeros(*s[::-1], dtype=tg.float64)) for s in SHAPES]
    with pytest.raises(
        ValueError, match=r"state 'exp_avg' .* has shape \(3, 4\), the parameter has shape \(4, 3\)"
    ):
        optim.Adam(other).load_state_dict(sd)


def test_load_state_dict_accepts_string_keys_and_list_betas():
    ps, _ = _pair()
    opt = optim.Adam(ps, betas=(0.8, 0.9))
    _steps(opt, ps, _grad_seq(2))
    sd = opt.state_dict()
    sd = {
        "state": {str(k): v for k, v in sd["state"].items()},
        "param_groups": [{**g, "betas": list(g["betas"])} for g in sd["param_groups"]],
    }
    opt2 = optim.Adam(ps)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["betas"] == (0.8, 0.9)
    assert opt2.state[ps[2]]["step"] == 2


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "err", "match"),
    [
        (lambda p: optim.SGD(p, lr=-0.1), ValueError, r"invalid lr=-0.1"),
        (lambda p: optim.SGD(p, momentum=-1), ValueError, "invalid momentum"),
        (lambda p: optim.SGD(p, dampening=1.5), ValueError, "invalid dampening"),
        (lambda p: optim.SGD(p, nesterov=True), ValueError, "nesterov=True needs momentum > 0"),
        (
            lambda p: optim.SGD(p, momentum=0.9, dampening=0.1, nesterov=True),
            ValueError,
            "dampening = 0",
        ),
        (lambda p: optim.SGD(p, weight_decay=-1e-4), ValueError, "invalid weight_decay"),
        (
            lambda p: optim.Adam(p, betas=(1.0, 0.999)),
            ValueError,
            r"invalid betas\[0\]=1.0.*\[0.0, 1.0\)",
        ),
        (lambda p: optim.Adam(p, betas=(0.9, -0.1)), ValueError, r"invalid betas\[1\]"),
        (lambda p: optim.Adam(p, betas=(0.9,)), ValueError, "betas must be a pair"),
        (lambda p: optim.Adam(p, eps=-1.0), ValueError, "invalid eps"),
        (lambda p: optim.Adam(p, lr=float("nan")), ValueError, "invalid lr"),
        (lambda p: optim.Adam(p, lr="0.1"), TypeError, "lr must be a number"),
        (lambda p: optim.AdamW(p, weight_decay=-0.1), ValueError, "invalid weight_decay"),
        (lambda p: optim.RMSprop(p, alpha=1.5), ValueError, "invalid alpha"),
        (lambda p: optim.RMSprop(p, momentum=-0.5), ValueError, "invalid momentum"),
        (lambda p: optim.Adagrad(p, lr_decay=-1), ValueError, "invalid lr_decay"),
        (
            lambda p: optim.Adagrad(p, initial_accumulator_value=-1),
            ValueError,
            "initial_accumulator_value",
        ),
        (
            lambda p: optim.SGD([{"params": p, "learning_rate": 0.1}]),
            ValueError,
            "unknown hyperparameter 'learning_rate'",
        ),
        (
            lambda p: optim.SGD([{"params": p}, {"params": p[:1]}]),
            ValueError,
            "more than one group",
        ),
        (lambda p: optim.SGD([]), ValueError, "empty parameter list"),
        (lambda p: optim.SGD(p[0]), TypeError, "single tensor"),
        (lambda p: optim.SGD([tg.tensor([1, 2])]), TypeError, "dtype int64 cannot be optimized"),
    ],
)
def test_hyperparameters_are_validated(make, err, match):
    ps = [tg.Parameter(tg.ones(2)), tg.Parameter(tg.ones(3))]
    with pytest.raises(err, match=match):
        make(ps)


def test_accepts_a_module_and_repr_lists_groups():
    model = _Net()
    opt = optim.AdamW(model, lr=0.01)
    assert len(opt.param_groups[0]["params"]) == 6
    assert "Parameter Group 0" in repr(opt) and "weight_decay: 0.01" in repr(opt)
    named = optim.SGD(model.named_parameters(), lr=0.1)
    assert named.param_groups[0]["params"] == list(model.parameters())


def test_add_param_group():
    a, b = tg.Parameter(tg.ones(2)), tg.Parameter(tg.ones(2))
    opt = optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": [b], "lr": 0.5})
    opt.step({a: tg.ones(2), b: tg.ones(2)})
    np.testing.assert_allclose(a.numpy(), 0.9, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), 0.5, rtol=1e-6)


# -- EMA --------------------------------------------------------------------------------------


class _WithBuffer(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = tg.Parameter(tg.zeros(3, dtype=tg.float64))
        self.running = tg.zeros(3, dtype=tg.float64)  # a buffer


def test_model_ema_averages_parameters_and_copies_buffers():
    model = _WithBuffer()
    ema = optim.ModelEMA(model, decay=0.9)
    rng = np.random.default_rng(0)
    ref = np.zeros(3)
    for _ in range(5):
        new = rng.normal(size=3)
        model.w.copy_(tg.tensor(new))
        model.running.copy_(tg.tensor(new * 2))
        ema.update()
        ref = 0.9 * ref + 0.1 * new
    avg = ema.averaged_state_dict()
    np.testing.assert_allclose(avg["w"].numpy(), ref, rtol=1e-12)
    np.testing.assert_array_equal(avg["running"].numpy(), model.running.numpy())
    assert ema.num_updates == 5


def test_model_ema_swapped_restores_and_copy_to_writes():
    model = _WithBuffer()
    ema = optim.EMA(model, decay=0.5)
    model.w.copy_(tg.ones(3))
    ema.update()
    with ema.swapped() as m:
        np.testing.assert_allclose(m.w.numpy(), 0.5)
    np.testing.assert_allclose(model.w.numpy(), 1.0)
    ema.copy_to()
    np.testing.assert_allclose(model.w.numpy(), 0.5)


def test_model_ema_callable_decay_and_state_dict_round_trip():
    model = _WithBuffer()
    ema = optim.ModelEMA(model, decay=lambda n: min(0.99, (1 + n) / (10 + n)))
    model.w.copy_(tg.ones(3))
    ema.update()  # decay(0) = 0.1
    np.testing.assert_allclose(ema.shadow["w"], 0.9)
    sd = ema.state_dict()
    ema2 = optim.ModelEMA(_WithBuffer(), decay=lambda n: min(0.99, (1 + n) / (10 + n)))
    ema2.load_state_dict(sd)
    assert ema2.num_updates == 1
    np.testing.assert_array_equal(ema2.shadow["w"], ema.shadow["w"])
    with pytest.raises(ValueError, match="decay must be in"):
        optim.ModelEMA(model, decay=1.5)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
        {"momentum": 0.5, "dampening": 0.3},
        {"weight_decay": 0.1, "decoupled_weight_decay": True},
    ],
)
def test_sgd_on_a_large_parameter_updates_in_pieces_with_the_same_numbers(kw, monkeypatch):
    from tapegrad.optim import _sgd

    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(300_001).astype(np.float32)
    grads = [rng.standard_normal(300_001).astype(np.float32) for _ in range(3)]

    def run(chunk: int) -> np.ndarray:
        monkeypatch.setattr(_sgd, "CHUNK", chunk)
        p = tg.nn.Parameter(tg.tensor(p0.copy()))
        opt = tg.optim.SGD([p], lr=0.1, **kw)
        for g in grads:
            opt.step({p: tg.tensor(g)})
        return p.numpy().copy()

    pieces, whole = run(1 << 12), run(1 << 30)  # 74 pieces over the threads, and one pass
    assert np.array_equal(pieces, whole)
    if kw.get("decoupled_weight_decay"):  # torch.optim.SGD has no such option
        return
    pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt_t = torch.optim.SGD([pt], lr=0.1, **kw)
    for g in grads:
        pt.grad = torch.from_numpy(g)
        opt_t.step()
    np.testing.assert_allclose(pieces, pt.detach().numpy(), rtol=1e-5, atol=1e-6)
