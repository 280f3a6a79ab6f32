"""Adadelta, Adamax, NAdam and RAdam against torch.optim (float64, 50 steps, with and without
weight decay), their defaults, and state dict round trips."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import optim

SHAPES = [(3, 4), (5,), (2, 2, 2)]
NAMES = ["Adadelta", "Adamax", "NAdam", "RAdam"]


def _grads(steps: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(0)
    return [[rng.normal(size=s) * rng.uniform(0.1, 3.0) for s in SHAPES] for _ in range(steps)]


def _params() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.normal(size=s) for s in SHAPES]


def _ours(name, kwargs):
    ps = [tg.Parameter(tg.tensor(a, dtype=tg.float64)) for a in _params()]
    return ps, getattr(optim, name)(ps, **kwargs)


def _step(opt, ps, gs) -> None:
    opt.step(tg.Gradients((p, tg.tensor(g)) for p, g in zip(ps, gs, strict=True)))


CASES = [
    ("Adadelta", {}),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1)),
    ("Adamax", {}),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    ("NAdam", {}),
    ("NAdam", dict(lr=0.01, momentum_decay=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", {}),
    ("RAdam", dict(lr=0.01, betas=(0.9, 0.9), weight_decay=0.1)),  # rectified from step 6
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
]


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_matches_torch_over_50_steps(name, kwargs):
    ps, opt = _ours(name, kwargs)
    ts = [torch.tensor(a, requires_grad=True) for a in _params()]
    topt = getattr(torch.optim, name)(ts, **kwargs)
    for gs in _grads(50):
        _step(opt, ps, gs)
        for t, g in zip(ts, gs, strict=True):
            t.grad = torch.tensor(g)
        topt.step()
    for p, t in zip(ps, ts, strict=True):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-13)
    # the same state entries as PyTorch, with the same values
    for i, p in enumerate(ps):
        ours, theirs = opt.state[p], topt.state[ts[i]]
        assert set(ours) == set(theirs)
        for k, v in theirs.items():
            np.testing.assert_allclose(np.asarray(ours[k]), v.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_pytorchs(name):
    ours = inspect.signature(getattr(optim, name)).parameters
    theirs = inspect.signature(getattr(torch.optim, name)).parameters
    for k, p in ours.items():
        if k != "params":
            assert p.default == theirs[k].default, k
    _, opt = _ours(name, {})
    tdefaults = getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)]).defaults
    assert {k: v for k, v in tdefaults.items() if k in opt.defaults} == opt.defaults


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_state_dict_round_trip_continues_exactly(name, kwargs):
    grads = _grads(20)
    ps, opt = _ours(name, kwargs)
    for gs in grads:
        _step(opt, ps, gs)
    ps2, opt2 = _ours(name, kwargs)
    for gs in grads[:10]:
        _step(opt2, ps2, gs)
    saved = opt2.state_dict()
    # through JSON (string keys, lists), then into a fresh optimizer on the same weights
    text = json.dumps(saved, default=lambda a: a.tolist())
    ps3 = [tg.Parameter(tg.tensor(p.numpy().copy())) for p in ps2]
    opt3 = getattr(optim, name)(ps3, **kwargs)
    opt3.load_state_dict(json.loads(text))
    for gs in grads[10:]:
        _step(opt3, ps3, gs)
    for p, q in zip(ps, ps3, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_bad_hyperparameters_are_named():
    w = [tg.Parameter(tg.ones(2))]
    with pytest.raises(ValueError, match="rho"):
        optim.Adadelta(w, rho=1.5)
    with pytest.raises(ValueError, match="betas"):
        optim.Adamax(w, betas=(0.9,))
    with pytest.raises(ValueError, match="momentum_decay"):
        optim.NAdam(w, momentum_decay=-1.0)
    with pytest.raises(ValueError, match="eps"):
        optim.RAdam(w, eps=-1.0)
    with pytest.raises(ValueError, match="mu_product"):
        opt = optim.NAdam(w)
        opt.load_state_dict(
            {"state": {0: {"step": 1, "mu_product": "x", "exp_avg": [0, 0], "exp_avg_sq": [0, 0]}},
             "param_groups": opt.state_dict()["param_groups"]}
        )  # fmt: skip
