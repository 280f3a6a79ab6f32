"""Tensor methods with PyTorch's spelling, and the spellings whose numpy and PyTorch meanings
differ (docs/from_pytorch.md has one row per case; each row has a test here)."""

import numpy as np
import pytest
import torch

import tapegrad as tg


def _pair(*shape):
    a = np.random.default_rng(0).standard_normal(shape)
    return tg.tensor(a), torch.tensor(a)


def test_bmm_mm_equal_torch_with_gradients():
    a, ta = _pair(2, 3, 4)
    b, tb = _pair(2, 4, 5)
    ta.requires_grad_(True)
    tb.requires_grad_(True)
    with tg.Tape() as tape:
        tape.watch(a, b)
        y = a.bmm(b)
        loss = (y * y).sum()
    ga, gb = tape.gradient(loss, [a, b])
    ty = ta.bmm(tb)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ga.numpy(), ta.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(gb.numpy(), tb.grad.numpy(), rtol=1e-10)
    m = a[0].mm(b[0])
    np.testing.assert_allclose(m.numpy(), (ta[0] @ tb[0]).detach().numpy(), rtol=1e-12)


def test_bmm_mm_refuse_other_ranks():
    with pytest.raises(ValueError, match=r"bmm: needs \(B, n, k\)"):
        tg.zeros(3, 4).bmm(tg.zeros(4, 2))
    with pytest.raises(ValueError, match="mm: needs two 2-d"):
        tg.zeros(2, 3, 4).mm(tg.zeros(4, 2))


def test_new_tensor_family_keeps_dtype():
    x = tg.zeros(2, dtype=tg.float64)
    assert x.new_tensor([1, 2]).dtype == tg.float64
    assert x.new_tensor([1, 2]).tolist() == [1.0, 2.0]
    assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros((2, 3)).dtype == tg.float64
    assert x.new_ones((2,)).tolist() == [1.0, 1.0]
    assert x.new_full((2, 2), 7.0).tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert x.new_zeros(3, dtype=tg.int64).dtype == tg.int64
    assert x.new_empty(4).shape == (4,)


def test_inplace_arithmetic_equals_torch_and_bumps_version():
    a, ta = _pair(3, 4)
    b, tb = _pair(3, 4)
    v = a._version
    a.add_(b, alpha=2).sub_(1.5).mul_(b).div_(3.0).clamp_(-0.5, 0.5)
    ta.add_(tb, alpha=2).sub_(1.5).mul_(tb).div_(3.0).clamp_(-0.5, 0.5)
    np.testing.assert_allclose(a.numpy(), ta.numpy(), rtol=1e-14)
    assert a._version == v + 5
    a.fill_(2.0)
    assert a.numpy().tolist() == [[2.0] * 4] * 3
    a.copy_(b)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    a.zero_()
    assert not a.numpy().any()
    assert a._version == v + 8


def test_inplace_arithmetic_in_float32_is_torchs_bits():
    """A Python number does not widen float32 in-place arithmetic (PyTorch computes in the
    tensor's dtype): the hand-written SGD step ``p.sub_(lr * g)`` and its friends, bit for bit."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((50, 70)).astype(np.float32)
    g = rng.standard_normal((50, 70)).astype(np.float32)
    x, tx = tg.tensor(a.copy()), torch.tensor(a.copy())
    y, ty = tg.tensor(g), torch.tensor(g)
    x.sub_(0.1 * y).add_(0.3).mul_(1.7).div_(3.1).sub_(0.7).add_(y).mul_(y).div_(2)
    tx.sub_(0.1 * ty).add_(0.3).mul_(1.7).div_(3.1).sub_(0.7).add_(ty).mul_(ty).div_(2)
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    x.add_(y[0])  # a row broadcast
    tx.add_(ty[0])
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    x.add_(x)  # the operand is the tensor itself
    tx.add_(tx)
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    with pytest.raises(ValueError, match=r"add_: the result has shape \(3, 50, 70\)"):
        x.add_(tg.ones((3, 50, 70)))  # would broadcast the tensor itself: refused, unchanged
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_inplace_int_tensor_refuses_float_result():
    x = tg.tensor([1, 2, 3])
    with pytest.raises(TypeError, match="div_: a float64 result cannot be stored in a int64"):
        x.div_(2)


def test_inplace_on_recording_tape_raises():
    w = tg.Parameter(tg.ones(3))
    with tg.Tape():
        y = w * 2
        with pytest.raises(RuntimeError, match="mul_: the tensor .* on a recording tape"):
            y.mul_(2)


def test_inplace_on_saved_tensor_is_caught_at_backward():
    x = tg.tensor([1.0, 2.0, 3.0])
    with tg.Tape() as tape:
        tape.watch(x)
        y = (x * x).sum()
    # the `with` block has ended, so the change is allowed; the tape saved x and notices
    x.mul_(2)
    with pytest.raises(Exception, match="(?i)version|modified|in place|in-place"):
        tape.gradient(y, x)


def test_data_is_a_view_off_the_tape():
    w = tg.Parameter(tg.ones(3))
    with tg.Tape() as tape:
        d = w.data
        assert not d._tapes
        d.mul_(3)  # allowed: .data is on no tape
        loss = (w * w).sum()
    assert w.numpy().tolist() == [3.0, 3.0, 3.0]
    assert tape.gradient(loss, w).tolist() == [6.0, 6.0, 6.0]
    w.data = tg.zeros(3)
    assert w.numpy().tolist() == [0.0, 0.0, 0.0]


# --- spellings with two meanings (docs/from_pytorch.md) ---------------------------------------


def test_size_is_numpy_count_and_torch_call():
    x = tg.zeros(4, 6)
    assert x.size == 24 and x.size + 1 == 25
    assert x.size(0) == 4 and x.size(-1) == 6
    assert x.size() == (4, 6) == tuple(torch.zeros(4, 6).size())


def test_split_int_with_two_meanings_raises():
    x = tg.zeros(2, 6)
    with pytest.raises(ValueError, match="means sections in numpy and pieces of that size in PyTorch"):
        x.split(6, 1)
    with pytest.raises(ValueError, match=r"split\(x, 1, dim=1\) for PyTorch's"):
        x.split(1, 1)
    with pytest.raises(ValueError, match="split indices in numpy and piece sizes in PyTorch"):
        x.split([2], 1)  # indices (numpy) or sizes (PyTorch)
    with pytest.raises(ValueError, match="sections in numpy"):
        tg.split(x, 3, 1)  # the function too
    # the two meanings agree when the axis has k * k elements
    t = torch.zeros(2, 4)
    assert [p.shape for p in tg.zeros(2, 4).split(2, 1)] == [tuple(p.shape) for p in t.split(2, 1)]
    # axis= is numpy's meaning, dim= PyTorch's, for ints and lists alike
    assert [p.shape for p in x.split([2], axis=1)] == [(2, 2), (2, 4)]
    assert [p.shape for p in x.split(3, axis=1)] == [(2, 2), (2, 2), (2, 2)]
    tx = torch.zeros(2, 6)
    for k in (1, 4, [2, 4], [1, 1, 4]):
        want = [tuple(p.shape) for p in tx.split(k, dim=1)]
        assert [p.shape for p in x.split(k, dim=1)] == want
        assert [p.shape for p in tg.split(x, k, dim=1)] == want
    chunks = [tuple(p.shape) for p in torch.zeros(2, 6).chunk(4, 1)]
    assert [p.shape for p in x.chunk(4, 1)] == chunks


def test_max_positional_dim_raises_and_dim_keyword_is_torch():
    a, ta = _pair(3, 5)
    with pytest.raises(TypeError, match="x.max\\(1\\) means the maximum over axis 1 in numpy"):
        a.max(1)
    with pytest.raises(TypeError, match="x.min\\(0\\) means the minimum"):
        a.min(0)
    # PyTorch reads axis= as dim= (a pair), numpy as the values: axis= raises, amax gives values
    with pytest.raises(TypeError, match="x.max\\(axis=1\\) means the maximum over axis 1"):
        a.max(axis=1)
    np.testing.assert_array_equal(a.amax(axis=1).numpy(), ta.amax(1).numpy())
    v, i = a.max(dim=1)
    tv, ti = ta.max(1)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    out = a.min(dim=0, keepdim=True)
    np.testing.assert_array_equal(out.indices.numpy(), ta.min(0, keepdim=True).indices.numpy())
    assert a.max().item() == ta.max().item()


def test_argmax_torch_keywords():
    a, ta = _pair(3, 5)
    got = a.argmax(dim=1, keepdim=True)
    assert got.shape == (3, 1)
    np.testing.assert_array_equal(got.numpy(), ta.argmax(dim=1, keepdim=True).numpy())
    np.testing.assert_array_equal(a.argmin(1).numpy(), ta.argmin(1).numpy())
    np.testing.assert_array_equal(a.argmax(axis=0).numpy(), ta.argmax(0).numpy())


def test_transpose_two_axes_is_torch_swap():
    a, ta = _pair(2, 3, 4)
    assert a.transpose(0, 2).shape == tuple(ta.transpose(0, 2).shape)


def test_var_std_numpy_default_and_torch_keywords():
    a, ta = _pair(4, 5)
    # a call that names neither the correction nor dim= could mean either: it raises
    for call in (a.std, lambda: a.var(axis=1), lambda: a.std(1), lambda: tg.var(a)):
        with pytest.raises(TypeError, match=r"ddof=0.*correction=1"):
            call()
    # numpy's meaning, said explicitly
    np.testing.assert_allclose(a.std(ddof=0).item(), a.numpy().std(), rtol=1e-14)
    np.testing.assert_allclose(a.var(axis=1, ddof=0).numpy(), a.numpy().var(axis=1), rtol=1e-14)
    # PyTorch's keywords get PyTorch's default (Bessel's correction)
    np.testing.assert_allclose(a.var(dim=1).numpy(), ta.var(dim=1).numpy(), rtol=1e-14)
    np.testing.assert_allclose(
        a.std(dim=0, keepdim=True).numpy(), ta.std(dim=0, keepdim=True).numpy(), rtol=1e-14
    )
    np.testing.assert_allclose(
        a.std(dim=1, unbiased=False).numpy(), ta.std(dim=1, unbiased=False).numpy(), rtol=1e-14
    )
    np.testing.assert_allclose(a.var(ddof=1).item(), ta.var().item(), rtol=1e-14)
