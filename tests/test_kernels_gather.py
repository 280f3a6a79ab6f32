"""Row gathers and scatter-adds along an axis (``_kernels/gather.py``): ``x[idx]``,
``index_select``, ``take``, ``index_add``, embedding, and ``take_along_axis``/``scatter_add``
with an index expanded from a column: against PyTorch, the numpy references and finite
differences, forward and backward, at 1, 2 and 3 threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


def _calls(monkeypatch):
    from tapegrad._kernels import gather

    seen = []
    for name in ("getitem_op", "index_grad_op", "take_op", "scatter_add_rows_op"):
        real = getattr(gather, name)
        monkeypatch.setattr(gather, name, lambda *a, real=real, name=name: (seen.append(name),
                                                                             real(*a))[1])
    return seen


def _gcn_layer(lib, h, w, src, dst, coef, n):
    """One graph convolution as message passing: gather the sources' rows, scale, index_add
    into the destinations (pytorch/examples gcn's spmm with the adjacency as edges)."""
    if lib is torch:
        msg = (h @ w).index_select(0, src) * coef[:, None]
        return torch.zeros(n, w.shape[1], dtype=h.dtype).index_add(0, dst, msg)
    msg = tg.index_select(h @ w, 0, src) * coef[:, None]
    return tg.index_add(tg.zeros((n, w.shape[1]), dtype=h.dtype), 0, dst, msg)


def _graph(dtype, n=300, e=2000, f=24, o=16, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), np.sort(rng.integers(0, n, e))
    return (rng.standard_normal((n, f)).astype(dtype), rng.standard_normal((f, o)).astype(dtype),
            src, dst, rng.uniform(0.1, 1, e).astype(dtype), n)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_graph_convolution_against_pytorch(monkeypatch, dtype):
    h, w, src, dst, coef, n = _graph(dtype)
    seen = _calls(monkeypatch)
    ht, wt = tg.tensor(h), tg.tensor(w)
    with tg.Tape() as tape:
        tape.watch(ht, wt)
        y = _gcn_layer(tg, ht, wt, src, dst, tg.tensor(coef), n)
        loss = (y * y).sum()
    gh, gw = tape.gradient(loss, [ht, wt])
    assert seen.count("getitem_op") == 2 and seen.count("index_grad_op") == 2, seen
    th, tw = torch.tensor(h, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = _gcn_layer(torch, th, tw, torch.from_numpy(src), torch.from_numpy(dst),
                    torch.from_numpy(coef), n)
    (ty * ty).sum().backward()
    tol = 2e-5 if dtype == np.float32 else 1e-12  # of each result's largest entry (sums cancel)
    for a, b in ((y, ty), (gh, th.grad), (gw, tw.grad)):
        want = b.detach().numpy()
        np.testing.assert_allclose(a.numpy(), want, rtol=tol, atol=tol * np.abs(want).max())


@numba_only
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_index_ops_equal_the_references_bit_for_bit(monkeypatch, axis):
    rng = np.random.default_rng(axis)
    x = rng.standard_normal((6, 7, 8))
    idx = rng.integers(-x.shape[axis], x.shape[axis], (3, 5))  # 2-d, negative indices
    src = rng.standard_normal(x.shape[:axis] + (15,) + x.shape[axis + 1:])
    pos = np.abs(idx.reshape(-1)) % x.shape[axis]

    def run():
        xt, st = tg.tensor(x), tg.tensor(src)
        with tg.Tape() as tape:
            tape.watch(xt, st)
            a = tg.take(xt, idx, axis=axis)
            b = tg.index_add(xt, axis, pos, st, alpha=0.5)
            c = xt[(slice(None),) * axis + (idx,)]
            loss = (a * a).sum() + (b * b * b).sum() + (c * 3.0).sum()
        return [a.numpy(), b.numpy(), c.numpy(), *(g.numpy() for g in tape.gradient(loss, [xt, st]))]

    seen = _calls(monkeypatch)
    got = run()
    assert {"getitem_op", "index_grad_op"} <= set(seen), seen
    from tapegrad._kernels import registry

    monkeypatch.setattr(registry, "_ACTIVE", [{}])  # the numpy references
    for g, w in zip(got, run(), strict=True):
        # a scatter sums each destination's rows in input order, as np.add.at
        np.testing.assert_array_equal(g, w)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expanded_index_scatter_add_and_gather_against_pytorch(monkeypatch, dtype):
    rng = np.random.default_rng(3)
    n, e, f = 40, 300, 12
    dst = rng.integers(0, n, e)
    msg = rng.standard_normal((e, f)).astype(dtype)
    x = rng.standard_normal((n, f)).astype(dtype)
    seen = _calls(monkeypatch)
    for expand in (True, False):  # a zero-stride view, and the same values materialised
        ind = tg.broadcast_to(tg.tensor(dst[:, None]), (e, f)) if expand else tg.tensor(np.repeat(
            dst[:, None], f, 1))
        mt, xt = tg.tensor(msg), tg.tensor(x)
        with tg.Tape() as tape:
            tape.watch(mt, xt)
            out = tg.scatter_add(tg.zeros((n, f), dtype=mt.dtype), 0, ind, mt)
            back = tg.take_along_axis(xt, ind, 0)
            loss = (out * out).sum() + (back * mt).sum()
        gm, gx = tape.gradient(loss, [mt, xt])
        tm, tx = torch.tensor(msg, requires_grad=True), torch.tensor(x, requires_grad=True)
        ti = torch.from_numpy(dst)[:, None].expand(e, f)
        tout = torch.zeros(n, f, dtype=tm.dtype).scatter_add(0, ti, tm)
        tback = torch.gather(tx, 0, ti)
        ((tout * tout).sum() + (tback * tm).sum()).backward()
        tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
        for a, b in ((out, tout), (back, tback), (gm, tm.grad), (gx, tx.grad)):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), **tol)
    assert seen.count("index_grad_op") >= 4 and seen.count("getitem_op") >= 4, seen


@numba_only
def test_a_general_index_keeps_the_reference():
    # a gather index that differs across columns: the per-element (grid) path, still right
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 6))
    ind = rng.integers(0, 5, (7, 6))
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = tg.take_along_axis(xt, ind, 0)
        loss = (y * y).sum()
    (g,) = tape.gradient(loss, [xt])
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.gather(tx, 0, torch.from_numpy(ind))
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-13)


def test_gradients_against_finite_differences():
    rng = np.random.default_rng(5)
    x = tg.tensor(rng.standard_normal((30, 20)))
    src = tg.tensor(rng.standard_normal((30, 50)))
    idx = rng.integers(-20, 20, 50)
    pos = np.abs(idx) % 20
    tg.testing.check_grads(lambda a: a[:, idx] * a[:, idx], [x], order=2)
    tg.testing.check_grads(lambda a, s: tg.index_add(a, 1, pos, s * s), [x, src], order=2)
    w = tg.tensor(rng.standard_normal((20, 16)))
    tg.testing.check_grads(lambda t: F.embedding(tg.tensor(pos.reshape(5, 10)), t) ** 2, [w])


@numba_only
def test_out_of_range_indices_raise_as_before():
    x = tg.tensor(np.zeros((300, 4), np.float32))
    with pytest.raises(IndexError, match="out of bounds|valid"):
        x[np.array([0, 300])]
    with pytest.raises(IndexError, match="index_add"):
        tg.index_add(x, 0, np.array([300]), tg.zeros((1, 4)))


@numba_only
def test_every_thread_count_gives_the_same_bits():
    import subprocess
    import sys

    code = """
import numpy as np
import tapegrad as tg
from tapegrad._kernels import gather
rng = np.random.default_rng(0)
g = rng.standard_normal((2, 20000, 3)).astype(np.float32)
idx = rng.integers(0, 997, 20000)
x = rng.standard_normal((2, 997, 3)).astype(np.float32)
gather.PARALLEL_MIN = 0
out = {}
for k in (1, 2, 3):
    tg.set_num_threads(k)
    out[k] = (gather.add_rows(g, idx, 997), gather.take_rows(x, idx))
for k in (2, 3):
    for a, b in zip(out[1], out[k]):
        assert np.array_equal(a, b), k
want = np.zeros((2, 997, 3), np.float32)
np.add.at(want, (slice(None), idx), g)
assert np.array_equal(out[1][0], want)
print("ok")
"""
    import os

    env = {**os.environ, "TAPEGRAD_COMPILE": "wait", "NUMBA_NUM_THREADS": "3"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
