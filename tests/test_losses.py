"""The losses of tapegrad.nn.functional against torch.nn.functional in float64: every reduction,
weights, ignore_index, label smoothing, K-dimensional inputs, probability targets; stability for
logits shifted by 1e4; gradient checks on the fused cross-entropy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_compare import close as _close
from torch_compare import compare

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.testing import check_grads

REDUCTIONS = ["mean", "sum", "none"]


def _targets(rng, shape, c, ignore=None):
    t = rng.integers(0, c, shape)
    if ignore is not None:
        t.flat[::3] = ignore
    return t


# --------------------------------------------------------------------------------------------
# cross_entropy and nll_loss with class indices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4), (2, 5, 3, 2)], ids=["2d", "3d", "4d"])
def test_cross_entropy_class_indices(reduction, weighted, smoothing, shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    t = _targets(rng, (shape[0],) + shape[2:], shape[1], ignore=-100)
    w = rng.uniform(0.5, 2.0, shape[1]) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    compare(
        lambda x: F.cross_entropy(x, tg.tensor(t), None if w is None else tg.tensor(w), **kw),
        lambda x: TF.cross_entropy(
            x, torch.tensor(t), None if w is None else torch.tensor(w), **kw
        ),
        [x],
    )


def test_cross_entropy_custom_ignore_index_and_unbatched():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 4))
    t = np.array([1, 3, 3, 0, 2])
    compare(
        lambda x: F.cross_entropy(x, tg.tensor(t), ignore_index=3),
        lambda x: TF.cross_entropy(x, torch.tensor(t), ignore_index=3),
        [x],
    )
    v = rng.standard_normal(4)
    compare(
        lambda x: F.cross_entropy(x, tg.tensor(2)),
        lambda x: TF.cross_entropy(x, torch.tensor(2)),
        [v],
    )


def test_cross_entropy_all_ignored_mean_is_nan_like_torch():
    x = tg.tensor(np.zeros((2, 3)))
    out = F.cross_entropy(x, tg.tensor([-100, -100]))
    assert np.isnan(out.item())
    assert np.isnan(TF.cross_entropy(torch.zeros(2, 3), torch.tensor([-100, -100])).item())


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probability_targets(reduction, weighted, smoothing):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5, 3))
    p = rng.random((4, 5, 3))
    p /= p.sum(axis=1, keepdims=True)
    w = rng.uniform(0.5, 2.0, 5) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    compare(
        lambda x, p: F.cross_entropy(x, p, None if w is None else tg.tensor(w), **kw),
        lambda x, p: TF.cross_entropy(x, p, None if w is None else torch.tensor(w), **kw),
        [x, p],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 3))
    t = _targets(rng, (4, 3), 6, ignore=-1)
    w = rng.uniform(0.5, 2.0, 6) if weighted else None
    kw = dict(reduction=reduction, ignore_index=-1)
    compare(
        lambda x: F.nll_loss(x, tg.tensor(t), None if w is None else tg.tensor(w), **kw),
        lambda x: TF.nll_loss(x, torch.tensor(t), None if w is None else torch.tensor(w), **kw),
        [x],
    )


def test_legacy_size_average_and_reduce():
    rng = np.random.default_rng(4)
    x, t = rng.standard_normal((4, 3)), rng.integers(0, 3, 4)
    for sa, red in [(False, None), (None, False), (True, True)]:
        a = F.cross_entropy(tg.tensor(x), tg.tensor(t), size_average=sa, reduce=red)
        with pytest.warns(UserWarning):
            b = TF.cross_entropy(torch.tensor(x), torch.tensor(t), size_average=sa, reduce=red)
        _close(a, b)


def test_cross_entropy_is_stable_for_logits_shifted_by_1e4():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 10))
    t = rng.integers(0, 10, 8)
    p = rng.random((8, 10))
    p /= p.sum(1, keepdims=True)
    for shift in (1e4, -1e4):
        for target in (t, p):
            ref = F.cross_entropy(tg.tensor(x), tg.tensor(target))
            got = F.cross_entropy(tg.tensor(x + shift), tg.tensor(target))
            _close(got, ref, rtol=1e-9, atol=1e-9)  # float64: exact up to the shift's rounding
            got32 = F.cross_entropy(tg.tensor((x + shift).astype(np.float32)), tg.tensor(target))
            assert np.isfinite(got32.item()) and abs(got32.item() - ref.item()) < 5e-3
        _close(
            F.nll_loss(F.log_softmax(tg.tensor(x + shift), dim=1), tg.tensor(t)),
            F.cross_entropy(tg.tensor(x), tg.tensor(t)),
            rtol=1e-9,
        )


def test_cross_entropy_gradient_is_finite_for_huge_logits():
    x = tg.tensor(np.array([[1e4, -1e4, 0.0], [-5e3, 5e3, 1e4]], np.float32))
    with tg.Tape() as tape:
        tape.watch(x)
        loss = F.cross_entropy(x, tg.tensor([0, 1]))
    g = tape.gradient(loss, x).numpy()
    assert np.isfinite(g).all() and np.isfinite(loss.item())
    tx = torch.tensor(x.numpy(), requires_grad=True)
    TF.cross_entropy(tx, torch.tensor([0, 1])).backward()
    _close(loss, TF.cross_entropy(tx, torch.tensor([0, 1])), rtol=1e-5)
    _close(g, tx.grad, rtol=1e-5, atol=1e-6)


def test_cross_entropy_grads_first_and_second_order():
    rng = np.random.default_rng(6)
    x = tg.tensor(rng.standard_normal((4, 3, 2)))
    t = tg.tensor(np.array([[0, 2], [1, -100], [2, 2], [0, 1]]))
    w = tg.tensor(np.array([0.5, 1.0, 2.0]))
    check_grads(lambda x: F.cross_entropy(x, t, w, label_smoothing=0.1), [x], order=2)
    check_grads(lambda x: F.cross_entropy(x, t, reduction="none"), [x], order=2)


def test_cross_entropy_double_backward_matches_torch():
    rng = np.random.default_rng(7)
    x, t, r = rng.standard_normal((5, 4)), rng.integers(0, 4, 5), rng.standard_normal((5, 4))
    tx = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(TF.cross_entropy(tx, torch.tensor(t)), tx, create_graph=True)
    (gg,) = torch.autograd.grad((g * torch.tensor(r)).sum(), tx)
    X = tg.tensor(x)
    with tg.Tape() as outer:
        outer.watch(X)
        with tg.Tape() as inner:
            inner.watch(X)
            loss = F.cross_entropy(X, tg.tensor(t))
        g1 = inner.gradient(loss, X)
        pen = (g1 * tg.tensor(r)).sum()
    _close(g1, g)
    _close(outer.gradient(pen, X), gg)


def test_cross_entropy_errors():
    with pytest.raises(IndexError, match="out of bounds for 3 classes"):
        F.cross_entropy(tg.ones((2, 3)), tg.tensor([0, 3]))
    with pytest.raises(ValueError, match="target of shape"):
        F.cross_entropy(tg.ones((2, 3)), tg.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(tg.ones((2, 3)), tg.tensor([0, 1]), reduction="avg")


# --------------------------------------------------------------------------------------------
# binary losses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    rng = np.random.default_rng(8)
    x = rng.uniform(0.05, 0.95, (4, 3))
    t = rng.random((4, 3))
    w = rng.uniform(0.5, 2.0, (4, 3)) if weighted else None
    compare(
        lambda x, t: F.binary_cross_entropy(
            x, t, None if w is None else tg.tensor(w), reduction=reduction
        ),
        lambda x, t: TF.binary_cross_entropy(
            x, t, None if w is None else torch.tensor(w), reduction=reduction
        ),
        [x, t],
    )


def test_binary_cross_entropy_clamps_the_log_at_minus_100():
    x = tg.tensor(np.array([0.0, 1.0, 0.5]))
    t = tg.tensor(np.array([1.0, 0.0, 1.0]))
    _close(
        F.binary_cross_entropy(x, t, reduction="none"),
        TF.binary_cross_entropy(torch.tensor(x.numpy()), torch.tensor(t.numpy()), reduction="none"),
    )
    with pytest.raises(ValueError, match="probabilities"):
        F.binary_cross_entropy(tg.tensor([1.5]), tg.tensor([1.0]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_binary_cross_entropy_with_logits(reduction, weighted, pos_weighted):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 3)) * 3
    t = rng.random((4, 3))
    w = rng.uniform(0.5, 2.0, (4, 3)) if weighted else None
    pw = rng.uniform(0.5, 3.0, 3) if pos_weighted else None
    kw = dict(reduction=reduction)
    compare(
        lambda x, t: F.binary_cross_entropy_with_logits(
            x,
            t,
            None if w is None else tg.tensor(w),
            pos_weight=None if pw is None else tg.tensor(pw),
            **kw,
        ),
        lambda x, t: TF.binary_cross_entropy_with_logits(
            x,
            t,
            None if w is None else torch.tensor(w),
            pos_weight=None if pw is None else torch.tensor(pw),
            **kw,
        ),
        [x, t],
    )


def test_binary_cross_entropy_with_logits_extreme_and_zero_logits():
    x = np.array([[100.0, -100.0, 0.0, 1e4, -1e4]])
    t = np.array([[0.0, 1.0, 0.5, 1.0, 0.0]])
    compare(
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"),
        lambda x, t: TF.binary_cross_entropy_with_logits(x, t, reduction="none"),
        [x, t],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
def test_kl_div(reduction, log_target):
    rng = np.random.default_rng(10)
    x = np.log(rng.dirichlet(np.ones(5), size=4))
    t = rng.dirichlet(np.ones(5), size=4)
    if log_target:
        t = np.log(t)
    kw = dict(reduction=reduction, log_target=log_target)
    compare(lambda x, t: F.kl_div(x, t, **kw), lambda x, t: TF.kl_div(x, t, **kw), [x, t])


def test_kl_div_zero_target_counts_as_zero():
    # 0 * log(0) is 0 in the value and the input gradient (PyTorch's target gradient is NaN
    # there; tapegrad's is finite)
    rng = np.random.default_rng(11)
    x = np.log(rng.dirichlet(np.ones(4), size=3))
    t = rng.dirichlet(np.ones(4), size=3)
    t[0, 1] = t[2, 3] = 0.0
    compare(
        lambda x, t: F.kl_div(x, t, reduction="sum"),
        lambda x, t: TF.kl_div(x, t, reduction="sum"),
        [x, t],
        diff=[0],
    )
    with tg.Tape() as tape:
        tt = tg.tensor(t)
        tape.watch(tt)
        loss = F.kl_div(tg.tensor(x), tt, reduction="sum")
    assert np.isfinite(tape.gradient(loss, tt).numpy()).all()


# --------------------------------------------------------------------------------------------
# regression losses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_mse_and_l1(name, reduction, weighted):
    rng = np.random.default_rng(11)
    x, t = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    w = rng.uniform(0.5, 2.0, (3, 4)) if weighted else None
    compare(
        lambda x, t: getattr(F, name)(
            x, t, reduction=reduction, weight=None if w is None else tg.tensor(w)
        ),
        lambda x, t: getattr(TF, name)(
            x, t, reduction=reduction, weight=None if w is None else torch.tensor(w)
        ),
        [x, t],
    )


def test_mse_loss_broadcast_warns():
    with pytest.warns(UserWarning, match="broadcast"):
        F.mse_loss(tg.ones((3, 2)), tg.ones((2,)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("weighted", [False, True])
def test_huber_loss(reduction, delta, weighted):
    rng = np.random.default_rng(12)
    x, t = rng.standard_normal((4, 5)) * 2, rng.standard_normal((4, 5))
    w = rng.uniform(0.5, 2.0, (4, 5)) if weighted else None
    compare(
        lambda x, t: F.huber_loss(x, t, reduction, delta, None if w is None else tg.tensor(w)),
        lambda x, t: TF.huber_loss(x, t, reduction, delta, None if w is None else torch.tensor(w)),
        [x, t],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_smooth_l1_loss(reduction, beta):
    rng = np.random.default_rng(13)
    x, t = rng.standard_normal((4, 5)) * 2, rng.standard_normal((4, 5))
    compare(
        lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=beta),
        lambda x, t: TF.smooth_l1_loss(x, t, reduction=reduction, beta=beta),
        [x, t],
    )


# --------------------------------------------------------------------------------------------
# embedding and ranking losses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.3])
def test_cosine_embedding_loss(reduction, margin):
    rng = np.random.default_rng(14)
    a, b = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    y = np.array([1, -1, 1, -1, -1, 1])
    compare(
        lambda a, b: F.cosine_embedding_loss(a, b, tg.tensor(y), margin, reduction=reduction),
        lambda a, b: TF.cosine_embedding_loss(a, b, torch.tensor(y), margin, reduction=reduction),
        [a, b],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.5])
def test_margin_ranking_loss(reduction, margin):
    rng = np.random.default_rng(15)
    a, b = rng.standard_normal(7), rng.standard_normal(7)
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0])
    compare(
        lambda a, b: F.margin_ranking_loss(a, b, tg.tensor(y), margin, reduction=reduction),
        lambda a, b: TF.margin_ranking_loss(a, b, torch.tensor(y), margin, reduction=reduction),
        [a, b],
    )


def test_losses_keep_float32():
    x = tg.randn(4, 3)
    t = tg.randint(0, 3, (4,))
    assert F.cross_entropy(x, t).dtype == tg.float32
    assert F.mse_loss(x, tg.zeros((4, 3))).dtype == tg.float32
    assert F.binary_cross_entropy_with_logits(x, tg.ones((4, 3))).dtype == tg.float32
