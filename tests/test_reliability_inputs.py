"""Bad input gets an error naming the function, the shapes or values, and the fix; state dicts
are accepted only with the keys and types their owner has."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim

# -- losses: input and target shapes ------------------------------------------------------------

_PAIR_LOSSES = [
    "mse_loss",
    "l1_loss",
    "huber_loss",
    "smooth_l1_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
]


@pytest.mark.parametrize("name", _PAIR_LOSSES)
def test_losses_name_shapes_that_do_not_broadcast(name):
    x, t = tg.full((4, 3), 0.5), tg.full((3, 4), 0.5)
    with pytest.raises(
        ValueError,
        match=rf"^{name}: input \(4, 3\) and target \(3, 4\) do not match and do not broadcast;"
        r".*target\.T",
    ):
        getattr(F, name)(x, t)
    with pytest.raises(
        ValueError, match=rf"{name}: input \(4, 3\) and target \(5,\).*shape \(4, 3\)"
    ):
        getattr(F, name)(x, tg.full((5,), 0.5))


def test_loss_layers_give_the_same_message():
    with pytest.raises(ValueError, match=r"mse_loss: input \(4, 3\) and target \(3, 4\)"):
        nn.MSELoss()(tg.zeros((4, 3)), tg.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"l1_loss: input \(2, 5\) and target \(5, 2\)"):
        nn.L1Loss()(tg.zeros((2, 5)), tg.zeros((5, 2)))


def test_broadcastable_shapes_keep_pytorchs_warning():
    with pytest.warns(UserWarning, match=r"mse_loss: target size \(4, 1\) differs"):
        F.mse_loss(tg.zeros((4, 3)), tg.zeros((4, 1)))


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: F.cross_entropy(tg.zeros((4, 3)), tg.tensor([0, 1, 2])),
            r"cross_entropy: target of shape \(3,\) does not match input \(4, 3\)",
        ),
        (
            lambda: F.cross_entropy(tg.zeros((4, 3)), tg.zeros((3, 4))),
            r"cross_entropy: probability targets must have the input's shape \(4, 3\), got \(3, 4\)",
        ),
        (
            lambda: F.nll_loss(tg.zeros((4, 3)), tg.tensor([0, 1])),
            r"nll_loss: target of shape \(2,\) does not match input \(4, 3\)",
        ),
        (
            lambda: F.cosine_embedding_loss(tg.zeros((4, 3)), tg.zeros((3, 4)), tg.ones(4)),
            r"cosine_embedding_loss: .*got \(4, 3\), \(3, 4\)",
        ),
        (
            lambda: F.margin_ranking_loss(tg.zeros(4), tg.zeros(3), tg.ones(4)),
            r"margin_ranking_loss: input1 \(4,\), input2 \(3,\)",
        ),
    ],
)
def test_class_and_ranking_losses_name_mismatched_shapes(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("bad", [1.5, -0.5])
def test_binary_cross_entropy_targets_outside_0_1_raise_as_in_pytorch(bad):
    x = np.full(3, 0.5)
    t = np.array([0.0, bad, 1.0])
    with pytest.raises(RuntimeError):  # PyTorch refuses too
        torch.nn.functional.binary_cross_entropy(torch.tensor(x), torch.tensor(t))
    with pytest.raises(
        ValueError,
        match=rf"binary_cross_entropy: target values must be in \[0, 1\].*{bad}.*rescale",
    ):
        F.binary_cross_entropy(tg.tensor(x), tg.tensor(t))


def test_binary_cross_entropy_soft_targets_inside_0_1_still_match_pytorch():
    x = np.array([0.2, 0.5, 0.9])
    t = np.array([0.0, 0.3, 1.0])
    want = torch.nn.functional.binary_cross_entropy(torch.tensor(x), torch.tensor(t)).item()
    assert F.binary_cross_entropy(tg.tensor(x), tg.tensor(t)).item() == pytest.approx(
        want, rel=1e-12
    )


# -- windows: kernel_size, stride, dilation ----------------------------------------------------


@pytest.mark.parametrize(
    "make, name, what",
    [
        (lambda: nn.Conv2d(3, 4, 0), "Conv2d", "kernel_size"),
        (lambda: nn.Conv2d(3, 4, -2), "Conv2d", "kernel_size"),
        (lambda: nn.Conv2d(3, 4, (3, 0)), "Conv2d", "kernel_size"),
        (lambda: nn.Conv2d(3, 4, 3, stride=0), "Conv2d", "stride"),
        (lambda: nn.Conv2d(3, 4, 3, dilation=0), "Conv2d", "dilation"),
        (lambda: nn.Conv1d(3, 4, 0), "Conv1d", "kernel_size"),
        (lambda: nn.Conv1d(3, 4, 2, stride=-1), "Conv1d", "stride"),
        (lambda: nn.ConvTranspose2d(3, 4, 0), "ConvTranspose2d", "kernel_size"),
        (lambda: nn.MaxPool2d(0), "MaxPool2d", "kernel_size"),
        (lambda: nn.MaxPool2d(2, stride=0), "MaxPool2d", "stride"),
        (lambda: nn.MaxPool1d(-1), "MaxPool1d", "kernel_size"),
        (lambda: nn.AvgPool2d((2, 0)), "AvgPool2d", "kernel_size"),
        (lambda: nn.AvgPool1d(2, 0), "AvgPool1d", "stride"),
    ],
)
def test_layers_refuse_windows_of_zero_or_less(make, name, what):
    with pytest.raises(ValueError, match=rf"^{name}: {what} must be >= 1 in every dimension, got"):
        make()


@pytest.mark.parametrize(
    "call, name, what",
    [
        (
            lambda: F.conv2d(tg.zeros((1, 3, 6, 6)), tg.zeros((4, 3, 3, 3)), stride=0),
            "conv2d",
            "stride",
        ),
        (lambda: F.conv2d(tg.zeros((1, 3, 6, 6)), tg.zeros((4, 3, 0, 3))), "conv2d", "kernel_size"),
        (lambda: F.conv1d(tg.zeros((1, 3, 6)), tg.zeros((4, 3, 3)), stride=0), "conv1d", "stride"),
        (lambda: F.max_pool1d(tg.zeros((1, 3, 6)), 0), "max_pool1d", "kernel_size"),
        (lambda: F.avg_pool1d(tg.zeros((1, 3, 6)), 2, 0), "avg_pool1d", "stride"),
        (lambda: F.max_pool2d(tg.zeros((1, 3, 6, 6)), 0), "max_pool2d", "kernel_size"),
    ],
)
def test_functional_windows_of_zero_or_less_name_the_function(call, name, what):
    with pytest.raises(ValueError, match=rf"^{name}: .*{what}.*(must be|positive)"):
        call()


# -- batch norm eps ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0, 0.0, -1e-5, float("nan")])
def test_batch_norm_refuses_eps_of_zero_or_less(eps):
    for layer in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
        with pytest.raises(ValueError, match=rf"{layer.__name__}: eps must be a positive number"):
            layer(3, eps=eps)
    with pytest.raises(ValueError, match=r"batch_norm: eps must be a positive number.*1e-5"):
        F.batch_norm(tg.zeros((2, 3)), None, None, training=True, eps=eps)


# -- Module.load_state_dict -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, kind",
    [("abc", "str"), (object(), "object"), ([[1.0, 2.0], [3.0]], "list"), ({"a": 1}, "dict")],
)
def test_module_load_state_dict_names_non_numeric_values(value, kind):
    lin = nn.Linear(2, 1)
    before = lin.weight.numpy().copy()
    with pytest.raises(
        TypeError, match=rf"load_state_dict: Linear: 'weight' is a {kind} .*not an array of numbers"
    ):
        lin.load_state_dict({"weight": value, "bias": np.zeros(1)})
    np.testing.assert_array_equal(lin.weight.numpy(), before)  # nothing changed


# -- optimizer and scheduler state dicts --------------------------------------------------------


def _model_and(opt_cls, **kw):
    model = nn.Linear(3, 2)
    opt = opt_cls(model.parameters(), **kw)
    with tg.Tape() as tape:
        loss = (model(tg.ones((1, 3))) ** 2).sum()
    opt.step(tape.gradient(loss, model))
    return model, opt


def test_adam_refuses_sgds_state_and_keeps_its_own():
    _, sgd = _model_and(optim.SGD, lr=0.1, momentum=0.9)
    _, adam = _model_and(optim.Adam, lr=1e-3)
    before = adam.state_dict()
    with pytest.raises(
        ValueError,
        match=r"Adam.load_state_dict: group 0 has hyperparameter 'momentum', which Adam "
        r"does not take.*another optimizer's state dict",
    ):
        adam.load_state_dict(sgd.state_dict())
    assert adam.param_groups[0]["lr"] == 1e-3
    after = adam.state_dict()
    assert after["param_groups"] == before["param_groups"]
    np.testing.assert_array_equal(after["state"][0]["exp_avg"], before["state"][0]["exp_avg"])


def test_sgd_refuses_adams_state_entries():
    _, sgd = _model_and(optim.SGD, lr=0.1, momentum=0.9)
    _, adam = _model_and(optim.Adam, lr=1e-3)
    sd = adam.state_dict()
    sd["param_groups"] = sgd.state_dict()["param_groups"]
    with pytest.raises(ValueError, match=r"SGD.load_state_dict: state of .* has entry 'exp_avg'"):
        sgd.load_state_dict(sd)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda sd: sd["param_groups"][0].update(lr="fast"), r"lr='fast' has the wrong type"),
        (lambda sd: sd["param_groups"][0].update(amsgrad=1), r"amsgrad=1 has the wrong type"),
        (
            lambda sd: sd["param_groups"][0].update(betas=[0.9]),
            r"betas=\[0\.9\] has the wrong type",
        ),
        (lambda sd: sd["param_groups"][0].update(lr=-1.0), r"invalid lr=-1\.0"),
        (
            lambda sd: sd["param_groups"][0].update(params=["a", "b"]),
            r"'params' must be parameter indices",
        ),
        (lambda sd: sd["param_groups"][0].update(maximize=True), r"maximize=True is not supported"),
        (lambda sd: sd["state"][0].update(step="3"), r"'step' must be a count >= 0"),
        (lambda sd: sd["state"][0].update(step=float("inf")), r"'step' must be a count >= 0"),
        (lambda sd: sd["state"][0].update(step=10**400), r"'step' must be a count >= 0"),
        (lambda sd: sd["state"][0].update(exp_avg="zeros"), r"'exp_avg' is a str, not an array"),
        (lambda sd: sd["state"][0].pop("exp_avg_sq"), r"lacks \['exp_avg_sq'\]"),
        (lambda sd: sd["state"].update({"x": {}}), r"parameter index 'x' matches no parameter"),
        (lambda sd: sd.update(extra=1), r"unexpected top-level keys \['extra'\]"),
        (lambda sd: sd.update(state=[]), r"'state' \(a dict\)"),
    ],
)
def test_optimizer_state_of_the_wrong_type_is_refused(change, match):
    _, adam = _model_and(optim.Adam, lr=1e-3)
    sd = adam.state_dict()
    change(sd)
    with pytest.raises((ValueError, TypeError), match=match):
        adam.load_state_dict(sd)
    assert adam.param_groups[0]["lr"] == 1e-3


def test_scheduler_refuses_the_optimizer_key_and_wrong_types():
    _, opt = _model_and(optim.SGD, lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2)
    other = optim.SGD([tg.Parameter(tg.zeros(1))], lr=5.0)
    with pytest.raises(KeyError, match=r"StepLR.load_state_dict: unknown keys \['optimizer'\]"):
        sched.load_state_dict({"optimizer": other})
    assert sched.optimizer is opt
    with pytest.raises(
        KeyError, match=r"unknown keys \['T_max', 'eta_min'\].*another kind of scheduler"
    ):
        sched.load_state_dict(optim.lr_scheduler.CosineAnnealingLR(other, T_max=3).state_dict())
    for bad, match in [
        ({"last_epoch": "3"}, r"'last_epoch' is '3', expected a value like 0"),
        ({"last_epoch": 2.5}, r"'last_epoch' is 2\.5"),
        ({"gamma": None}, r"'gamma' is None"),
        ({"base_lrs": [0.1, 0.2]}, r"'base_lrs' is \[0\.1, 0\.2\]"),
        ({"base_lrs": ["a"]}, r"'base_lrs' is \['a'\]"),
    ]:
        with pytest.raises(ValueError, match=r"StepLR.load_state_dict: " + match):
            sched.load_state_dict(bad)
    assert sched.last_epoch == 0 and sched.base_lrs == [0.1]
    sd = sched.state_dict()
    sched.step()
    sched.load_state_dict(sd)  # its own state still loads
    assert sched.last_epoch == 0
