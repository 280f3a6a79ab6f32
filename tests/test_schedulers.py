"""Learning-rate schedules: the scheduler objects against torch.optim.lr_scheduler over 30 steps,
the pure functions against the objects, state dicts and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.optim import lr_scheduler as tls

import tapegrad as tg
from tapegrad import optim
from tapegrad.optim import schedules

STEPS = 30
LRS = (0.1, 0.03)  # two groups with different base lrs


def _opts(tg_opt=optim.SGD, torch_opt=torch.optim.SGD, **kw):
    ours = tg_opt([{"params": [tg.Parameter(tg.zeros(1))], "lr": lr} for lr in LRS], **kw)
    theirs = torch_opt(
        [{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in LRS], **kw
    )
    return ours, theirs


def _sequences(sched, opt, steps=STEPS, extra=None):
    lrs, groups, extras = [], [], []
    for _ in range(steps):
        lrs.append(sched.get_last_lr())
        groups.append([g["lr"] for g in opt.param_groups])
        if extra is not None:
            extras.append([extra(g) for g in opt.param_groups])
        opt.step({}, allow_missing=True) if isinstance(opt, optim.Optimizer) else opt.step()
        sched.step()
    return np.array(lrs), np.array(groups), np.array(extras)


CASES = [
    (optim.StepLR, tls.StepLR, dict(step_size=7, gamma=0.5)),
    (optim.MultiStepLR, tls.MultiStepLR, dict(milestones=[3, 10, 10, 22], gamma=0.3)),
    (optim.ExponentialLR, tls.ExponentialLR, dict(gamma=0.9)),
    (optim.CosineAnnealingLR, tls.CosineAnnealingLR, dict(T_max=12, eta_min=0.001)),  # > T_max too
    (optim.CosineAnnealingLR, tls.CosineAnnealingLR, dict(T_max=30)),
    (optim.LinearLR, tls.LinearLR, dict(start_factor=0.25, end_factor=0.9, total_iters=10)),
    (optim.LinearLR, tls.LinearLR, dict()),
    (
        optim.OneCycleLR,
        tls.OneCycleLR,
        dict(max_lr=[0.5, 0.2], total_steps=STEPS, cycle_momentum=False),
    ),
    (
        optim.OneCycleLR,
        tls.OneCycleLR,
        dict(max_lr=0.5, total_steps=STEPS + 5, anneal_strategy="linear", cycle_momentum=False),
    ),
    (
        optim.OneCycleLR,
        tls.OneCycleLR,
        dict(max_lr=0.5, epochs=3, steps_per_epoch=10, three_phase=True, cycle_momentum=False),
    ),
]


@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"), CASES, ids=lambda x: getattr(x, "__name__", None) or str(x)
)
def test_lr_sequence_matches_torch(ours, theirs, kwargs):
    o, t = _opts()
    s, ts = ours(o, **kwargs), theirs(t, **kwargs)
    a, ag, _ = _sequences(s, o)
    b, bg, _ = _sequences(ts, t)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(ag, bg, rtol=1e-9, atol=1e-15)
    assert not np.allclose(a[0], a[-1])  # the schedule moved


def test_lambda_lr_matches_torch_with_one_function_per_group():
    fns = [lambda s: 0.95**s, lambda s: 1.0 / (1 + s)]
    o, t = _opts()
    a, _, _ = _sequences(optim.LambdaLR(o, fns), o)
    b, _, _ = _sequences(tls.LambdaLR(t, fns), t)
    np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_cycles_sgd_momentum_like_torch(three_phase):
    o, t = _opts(momentum=0.9)
    kw = dict(
        max_lr=0.5, total_steps=STEPS, three_phase=three_phase, base_momentum=0.8, max_momentum=0.9
    )
    a, _, am = _sequences(optim.OneCycleLR(o, **kw), o, extra=lambda g: g["momentum"])
    b, _, bm = _sequences(tls.OneCycleLR(t, **kw), t, extra=lambda g: g["momentum"])
    np.testing.assert_allclose(a, b, rtol=1e-9)
    np.testing.assert_allclose(am, bm, rtol=1e-9)
    assert am.min() == pytest.approx(0.8) and am.max() == pytest.approx(0.9)


def test_one_cycle_cycles_adam_beta1_like_torch():
    o, t = _opts(optim.Adam, torch.optim.Adam, betas=(0.9, 0.99))
    kw = dict(max_lr=0.01, total_steps=STEPS)
    a, _, am = _sequences(optim.OneCycleLR(o, **kw), o, extra=lambda g: g["betas"])
    b, _, bm = _sequences(tls.OneCycleLR(t, **kw), t, extra=lambda g: g["betas"])
    np.testing.assert_allclose(a, b, rtol=1e-9)
    np.testing.assert_allclose(am, bm, rtol=1e-9)
    assert np.all(am[:, :, 1] == 0.99)


def test_one_cycle_errors():
    o, _ = _opts()
    s = optim.OneCycleLR(o, max_lr=0.1, total_steps=3, cycle_momentum=False)
    s.step()
    s.step()
    s.step()  # step == total_steps is allowed (as in torch)
    with pytest.raises(ValueError, match="tried to step 4 times; the schedule has total_steps=3"):
        s.step()
    with pytest.raises(ValueError, match="neither momentum nor betas"):
        optim.OneCycleLR(optim.Adagrad([tg.Parameter(tg.zeros(1))]), max_lr=0.1, total_steps=3)
    with pytest.raises(ValueError, match="give total_steps"):
        optim.OneCycleLR(o, max_lr=0.1)
    with pytest.raises(ValueError, match="2 parameter groups but 3 values of max_lr"):
        optim.OneCycleLR(o, max_lr=[0.1, 0.2, 0.3], total_steps=3)


@pytest.mark.parametrize(
    ("cls", "kwargs", "fn"),
    [
        (optim.StepLR, dict(step_size=4, gamma=0.5), lambda s, b: schedules.step_lr(s, b, 4, 0.5)),
        (
            optim.MultiStepLR,
            dict(milestones=[5, 9]),
            lambda s, b: schedules.multistep_lr(s, b, [5, 9]),
        ),
        (optim.ExponentialLR, dict(gamma=0.8), lambda s, b: schedules.exponential_lr(s, b, 0.8)),
        (
            optim.CosineAnnealingLR,
            dict(T_max=10),
            lambda s, b: schedules.cosine_annealing_lr(s, b, 10),
        ),
        (
            optim.LinearLR,
            dict(total_iters=8),
            lambda s, b: schedules.linear_lr(s, b, total_iters=8),
        ),
        (
            optim.WarmupCosine,
            dict(warmup_steps=5, total_steps=20, min_lr=1e-3),
            lambda s, b: schedules.warmup_cosine(s, b, 5, 20, min_lr=1e-3),
        ),
        (
            optim.OneCycleLR,
            dict(max_lr=1.0, total_steps=STEPS, cycle_momentum=False),
            lambda s, b: schedules.one_cycle_lr(s, 1.0, STEPS),
        ),
    ],
)
def test_objects_evaluate_the_pure_functions(cls, kwargs, fn):
    o, _ = _opts()
    a, _, _ = _sequences(cls(o, **kwargs), o)
    want = np.array([[fn(s, b) for b in LRS] for s in range(STEPS)])
    np.testing.assert_allclose(a, want, rtol=1e-12)


def test_warmup_cosine_shape():
    lrs = [
        schedules.warmup_cosine(s, 1.0, warmup_steps=4, total_steps=14, min_lr=0.1)
        for s in range(20)
    ]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4] == 1.0 and lrs[9] == pytest.approx(0.55)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lrs[14:] == [0.1] * 6
    # the same as a torch LambdaLR with the same rule
    t = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    ts = tls.LambdaLR(t, lambda s: schedules.warmup_cosine(s, 1.0, 4, 14, 0.1))
    got = []
    for _ in range(20):
        got.append(ts.get_last_lr()[0])
        t.step()
        ts.step()
    np.testing.assert_allclose(got, lrs, rtol=1e-12)


def test_scheduler_state_dict_resumes_identically():
    o, _ = _opts(momentum=0.9)
    s = optim.OneCycleLR(o, max_lr=0.5, total_steps=STEPS)
    for _ in range(10):
        s.step()
    osd, ssd = o.state_dict(), s.state_dict()
    rest, _, _ = _sequences(s, o, steps=15)
    o2, _ = _opts(momentum=0.9)
    s2 = optim.OneCycleLR(o2, max_lr=0.5, total_steps=STEPS)
    o2.load_state_dict(osd)
    s2.load_state_dict(ssd)
    assert s2.last_epoch == 10
    rest2, _, _ = _sequences(s2, o2, steps=15)
    np.testing.assert_array_equal(rest, rest2)
    with pytest.raises(KeyError, match="unknown keys"):
        s2.load_state_dict({"bogus": 1})


def test_state_dict_survives_a_save_load_round_trip(tmp_path):
    o, _ = _opts()
    s = optim.MultiStepLR(o, milestones=[2, 4], gamma=0.5)
    for _ in range(3):
        s.step()
    tg.save({"sched": s.state_dict()}, tmp_path / "s.safetensors")
    o2, _ = _opts()
    s2 = optim.MultiStepLR(o2, milestones=[2, 4], gamma=0.5)
    s2.load_state_dict(tg.load(tmp_path / "s.safetensors")["sched"])
    s.step()
    s2.step()
    assert s.get_last_lr() == s2.get_last_lr() == [0.1 * 0.25, 0.03 * 0.25]


def test_resume_with_last_epoch_needs_initial_lr():
    o, _ = _opts()
    with pytest.raises(KeyError, match="has no 'initial_lr'"):
        optim.StepLR(o, step_size=2, last_epoch=5)
    optim.StepLR(o, step_size=2)  # sets initial_lr
    s = optim.StepLR(o, step_size=2, last_epoch=5)
    assert s.last_epoch == 6 and s.get_last_lr()[0] == pytest.approx(0.1 * 0.1**3)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: schedules.step_lr(1, 0.1, step_size=0), "step_size must be a positive integer"),
        (lambda: schedules.cosine_annealing_lr(1, 0.1, T_max=0), "T_max must be positive"),
        (
            lambda: schedules.linear_lr(1, 0.1, start_factor=0.0),
            r"start_factor must be in \(0, 1\]",
        ),
        (lambda: schedules.linear_lr(1, 0.1, end_factor=1.5), r"end_factor must be in \[0, 1\]"),
        (lambda: schedules.one_cycle_lr(1, 0.1, 10, anneal_strategy="exp"), "'cos' or 'linear'"),
        (
            lambda: schedules.warmup_cosine(1, 0.1, warmup_steps=10, total_steps=5),
            "warmup_steps <= total_steps",
        ),
        (lambda: schedules.exponential_lr(-1, 0.1, 0.9), "step must be >= 0"),
    ],
)
def test_schedule_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cosine_continues_past_t_max_like_torch():
    assert schedules.cosine_annealing_lr(15, 1.0, T_max=10) == pytest.approx(
        (1 + math.cos(1.5 * math.pi)) / 2
    )


def test_scheduler_needs_a_tapegrad_optimizer():
    t = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(TypeError, match="expected a tapegrad optimizer"):
        optim.StepLR(t, step_size=1)
