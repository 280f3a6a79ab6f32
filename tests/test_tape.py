"""The tape's rules (DESIGN.md section 2), one test or group per rule, checked against PyTorch.

Gradients are compared with ``torch.autograd`` in float64 on the same values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import check_grads


def f64(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def tt(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def close(a: tg.Tensor, b: torch.Tensor, tol: float = 1e-10) -> None:
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


class Affine(tg.nn.Module):
    """A small module with raw parameters (independent of the nn layers)."""

    def __init__(self, n_in: int, n_out: int, seed: int = 0) -> None:
        super().__init__()
        self.weight = tg.Parameter(f64(n_in, n_out, seed=seed))
        self.bias = tg.Parameter(f64(n_out, seed=seed + 1))

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return x @ self.weight + self.bias


# -- the record --------------------------------------------------------------------------------


def test_record_is_in_execution_order_and_topological():
    w = tg.Parameter(f64(3))
    with tg.Tape() as tape:
        a = w * 2.0
        b = tg.exp(a)
        c = a + b
        loss = c.sum()
    names = [n.prim.name for n in tape.nodes]
    assert names == ["mul_scalar", "exp", "add", "sum"]
    seen = {w._tid}
    for n in tape.nodes:  # every input on the tape was produced earlier (or is a leaf)
        assert all(t is None or t in seen for t in n.input_tids)
        seen.add(n.out_tid)
    assert tape.nodes[-1].out_tid == loss._tid


def test_ops_touching_no_open_tape_record_nothing():
    x, y = tg.tensor(f64(4)), tg.tensor(f64(4, seed=1))
    with tg.Tape() as tape:
        z = x * y + 1.0  # no input on the tape: inference
    assert tape.nodes == [] and z._tapes == () and z._tid is None
    z2 = x * y  # no tape open at all
    assert z2._tapes == ()


def test_integer_outputs_are_never_recorded():
    x = tg.tensor(f64(5))
    with tg.Tape() as tape:
        tape.watch(x)
        m = x > 0
        i = tg.argmax(x)
    assert tape.nodes == []
    assert m._tapes == () and i._tapes == ()


# -- what is on a tape -------------------------------------------------------------------------


def test_with_block_watches_parameters_automatically():
    w = tg.Parameter(f64(3))
    with tg.Tape() as tape:
        loss = (w * w).sum()
    np.testing.assert_allclose(tape.gradient(loss)[w].numpy(), 2 * w.numpy())


def test_parameters_are_watched_only_while_the_block_runs():
    w = tg.Parameter(f64(3))
    with tg.Tape() as tape:
        a = w * 2.0
    b = w * 3.0  # after the block: not recorded
    assert len(tape.nodes) == 1 and b._tapes == ()
    assert a._tapes == (tape,)


def test_watch_parameters_false_and_explicit_watch():
    w, v = tg.Parameter(f64(3)), tg.Parameter(f64(3, seed=1))
    with tg.Tape(watch_parameters=False) as tape:
        a = (w * v).sum()
    assert tape.nodes == [] and a._tapes == ()

    with tg.Tape(watch_parameters=False) as tape:
        tape.watch(w)
        loss = (w * v).sum()
    g = tape.gradient(loss)
    assert list(g.keys()) == [w]
    np.testing.assert_allclose(g[w].numpy(), v.numpy())


def test_watch_a_module_watches_its_trainable_parameters():
    m = Affine(3, 2)
    m.bias.requires_grad = False
    with tg.Tape(watch_parameters=False) as tape:
        tape.watch(m)
        loss = m(tg.tensor(f64(4, 3))).sum()
    g = tape.gradient(loss)
    assert m.weight in g and m.bias not in g


def test_frozen_parameters_are_not_watched():
    w = tg.Parameter(f64(3), requires_grad=False)
    with tg.Tape() as tape:
        y = (w * 2.0).sum()
    assert tape.nodes == [] and y._tapes == ()


def test_trace_makes_a_new_leaf_and_opens_the_tape():
    tape = tg.Tape()
    x = tg.tensor(f64(3))
    xt = x.trace(tape)
    assert xt is not x and tape.recording
    y = (xt * xt).sum()
    np.testing.assert_allclose(tape.gradient(y, xt).numpy(), 2 * x.numpy())
    assert tape.released and not tape.recording


def test_dfdx_style_parameters_join_when_they_meet_the_tape():
    w = tg.Parameter(f64(3, 2))
    u = tg.Parameter(f64(3, 2, seed=1))
    tape = tg.Tape()
    x = tg.tensor(f64(4, 3)).trace(tape)
    y = (x @ w).sum() + (tg.tensor(f64(4, 3)) @ u).sum()  # u meets only an untraced input
    assert tape.leaves == [x, w]
    g = tape.gradient(y)
    assert w in g and u not in g and x in g
    np.testing.assert_allclose(g[w].numpy(), x.numpy().sum(0)[:, None] * np.ones((1, 2)))
    assert "never met the tape" in g.why_missing(u)


# -- several tapes -----------------------------------------------------------------------------


def test_two_tapes_at_once_op_recorded_on_both_where_tensors_meet():
    t1, t2 = tg.Tape(persistent=True), tg.Tape(persistent=True)
    xa, xb = f64(4), f64(4, seed=1)
    a = tg.tensor(xa).trace(t1)
    b = tg.tensor(xb).trace(t2)
    ea = tg.exp(a)  # only on t1
    c = ea * b  # inputs on t1 and t2: recorded on both
    y = c.sum()
    assert set(y._tapes) == {t1, t2}
    assert [n.prim.name for n in t1.nodes] == ["exp", "mul", "sum"]
    assert [n.prim.name for n in t2.nodes] == ["mul", "sum"]
    assert t1.nodes[1] == t2.nodes[0]  # one shared record
    ta, tb = tt(xa), tt(xb)
    ga, gb = torch.autograd.grad((torch.exp(ta) * tb).sum(), (ta, tb))
    close(t1.gradient(y, a), ga)
    close(t2.gradient(y, b), gb)
    # each tape only reaches its own leaves: b is not on t1
    assert b not in t1.gradient(y) and a not in t2.gradient(y)
    with pytest.raises(ValueError, match="not on this tape"):
        t1.gradient(y, b)
    t1.release()
    t2.release()


def test_nested_with_tapes_both_record_parameters():
    w = tg.Parameter(f64(3))
    with tg.Tape() as outer:
        a = w * 2.0
        with tg.Tape() as inner:
            b = (a * w).sum()
    assert len(outer.nodes) == 3 and len(inner.nodes) == 2
    tw = tt(w.numpy())
    (g_outer,) = torch.autograd.grad(((tw * 2.0) * tw).sum(), tw)
    (g_inner,) = torch.autograd.grad(((tw.detach() * 2.0) * tw).sum(), tw)
    close(inner.gradient(b, w), g_inner)  # a is not on inner: a constant there
    close(outer.gradient(b, w), g_outer)


def test_tensors_from_two_with_tapes_meet():
    x, y = tg.tensor(f64(3)), tg.tensor(f64(3, seed=1))
    with tg.Tape(persistent=True) as t1, tg.Tape(persistent=True) as t2:
        t1.watch(x)
        t2.watch(y)
        z = (tg.sin(x) * y).sum()
    assert set(z._tapes) == {t1, t2}
    tx, ty = tt(x.numpy()), tt(y.numpy())
    gx, gy = torch.autograd.grad((torch.sin(tx) * ty).sum(), (tx, ty))
    close(t1.gradient(z, x), gx)
    close(t2.gradient(z, y), gy)
    assert list(t1.gradient(z).keys()) == [x]


# -- gradient() --------------------------------------------------------------------------------


def test_gradient_sources_none_tensor_list_tuple_and_module():
    m = Affine(3, 2)
    xa = f64(5, 3, seed=3)
    x = tg.tensor(xa)
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        loss = tg.tanh(m(x)).sum()
    tw, tb, tx = tt(m.weight.numpy()), tt(m.bias.numpy()), tt(xa)
    gw, gb, gx = torch.autograd.grad(torch.tanh(tx @ tw + tb).sum(), (tw, tb, tx))

    g = tape.gradient(loss)
    assert isinstance(g, tg.Gradients) and set(g.keys()) == {m.weight, m.bias, x}
    close(g[m.weight], gw)
    close(g[x], gx)
    close(tape.gradient(loss, m.bias), gb)
    lst = tape.gradient(loss, [x, m.weight])
    assert isinstance(lst, list) and len(lst) == 2
    close(lst[0], gx)
    tup = tape.gradient(loss, (m.weight, m.bias))
    assert isinstance(tup, tuple)
    close(tup[1], gb)
    gm = tape.gradient(loss, m)
    assert isinstance(gm, tg.Gradients) and set(gm.keys()) == {m.weight, m.bias}
    assert gm.named(m).keys() == {"weight", "bias"}
    np.testing.assert_allclose(gm.named(m)["weight"], gw.numpy())
    tape.release()


def test_list_targets_differentiate_their_sum():
    w = tg.Parameter(f64(4))
    with tg.Tape() as tape:
        l1 = (w * w).sum()
        l2 = tg.sin(w).mean()
    tw = tt(w.numpy())
    (ref,) = torch.autograd.grad((tw * tw).sum() + torch.sin(tw).mean(), tw)
    close(tape.gradient([l1, l2], w), ref)


def test_output_gradients_is_a_vjp_like_torch_grad_outputs():
    xa, va = f64(3, 4), f64(3, 2, seed=1)
    wa = f64(4, 2, seed=2)
    x, w = tg.tensor(xa), tg.Parameter(wa)
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.tanh(x @ w)  # (3, 2)
    gx, gw = tape.gradient(y, [x, w], output_gradients=tg.tensor(va))
    tx, tw = tt(xa), tt(wa)
    rx, rw = torch.autograd.grad(torch.tanh(tx @ tw), (tx, tw), grad_outputs=torch.tensor(va))
    close(gx, rx)
    close(gw, rw)


def test_output_gradients_for_a_list_of_targets():
    xa = f64(3)
    x = tg.tensor(xa)
    with tg.Tape() as tape:
        tape.watch(x)
        y1, y2 = x * 2.0, tg.exp(x)
    v1, v2 = f64(3, seed=1), f64(3, seed=2)
    g = tape.gradient([y1, y2], x, output_gradients=[v1, v2])
    tx = tt(xa)
    (r,) = torch.autograd.grad((tx * 2.0, torch.exp(tx)), tx, (torch.tensor(v1), torch.tensor(v2)))
    close(g, r)


def test_target_can_be_a_leaf_and_unreached_tensor_sources_get_zeros():
    x, y = tg.tensor(f64(3)), tg.tensor(f64(2))
    with tg.Tape() as tape:
        tape.watch(x, y)
        z = (x * 3.0).sum()
    gx, gy = tape.gradient(z, [x, y])
    np.testing.assert_allclose(gx.numpy(), 3.0)
    np.testing.assert_array_equal(gy.numpy(), np.zeros(2))
    with tg.Tape() as tape:
        tape.watch(x)
    v = f64(3, seed=4)
    np.testing.assert_array_equal(tape.gradient(x, x, output_gradients=v).numpy(), v)


def test_shared_subexpression_accumulates():
    xa = f64(5)
    x = tg.tensor(xa)
    with tg.Tape() as tape:
        tape.watch(x)
        a = tg.sin(x)
        y = (a * a + a * 3.0 + tg.exp(a)).sum()
    tx = tt(xa)
    ta = torch.sin(tx)
    (r,) = torch.autograd.grad((ta * ta + ta * 3.0 + torch.exp(ta)).sum(), tx)
    close(tape.gradient(y, x), r)


def test_broadcasting_is_undone_once_in_the_engine():
    xa, ba = f64(4, 3), f64(3)
    x, b = tg.tensor(xa), tg.Parameter(ba)
    s = tg.Parameter(np.array(2.0))
    with tg.Tape() as tape:
        tape.watch(x)
        y = ((x + b) * s).sum()
    g = tape.gradient(y)
    assert g[b].shape == (3,) and g[s].shape == () and g[x].shape == (4, 3)
    np.testing.assert_allclose(g[b].numpy(), 4 * 2.0)
    np.testing.assert_allclose(g[s].numpy(), (xa + ba).sum())


def test_gradient_is_cast_to_the_input_dtype():
    w32 = tg.Parameter(np.ones(3, np.float32))
    x64 = tg.tensor(f64(3))
    with tg.Tape() as tape:
        y = (w32 * x64).sum()  # float64 result
    g = tape.gradient(y)[w32]
    assert g.dtype == np.float32
    np.testing.assert_allclose(g.numpy(), x64.numpy().astype(np.float32))


# -- persistent vs not -------------------------------------------------------------------------


def test_non_persistent_tape_is_released_after_one_gradient():
    w = tg.Parameter(f64(3))
    with tg.Tape() as tape:
        loss = (w * w).sum()
    assert len(tape.nodes) == 2
    tape.gradient(loss)
    assert tape.released and tape.nodes == [] and tape.bytes_held() == 0
    with pytest.raises(RuntimeError, match=r"persistent=True"):
        tape.gradient(loss)


def test_persistent_tape_answers_many_calls_until_release():
    xa = f64(3)
    x = tg.tensor(xa)
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        y = (x**3).sum()
        z = tg.sin(x).sum()
    held = tape.bytes_held()
    assert held > 0
    g1 = tape.gradient(y, x)
    g2 = tape.gradient(z, x)
    g3 = tape.gradient(y, x)
    np.testing.assert_allclose(g1.numpy(), 3 * xa**2)
    np.testing.assert_allclose(g2.numpy(), np.cos(xa))
    np.testing.assert_array_equal(g1.numpy(), g3.numpy())
    assert tape.bytes_held() == held and not tape.released
    tape.release()
    assert tape.released and tape.bytes_held() == 0 and x._tapes == ()
    with pytest.raises(RuntimeError, match="released"):
        tape.gradient(y, x)


def test_gradient_inside_the_with_block_stops_recording_on_that_tape():
    w = tg.Parameter(f64(3))
    with tg.Tape(persistent=True) as tape:
        loss = (w * w).sum()
        g = tape.gradient(loss, w)
        after = w * 2.0  # still recording once gradient() returns
    assert g._tapes == ()  # the backward ops were not recorded on the tape they walked
    assert after._tapes == (tape,)
    tape.release()


# -- backward() --------------------------------------------------------------------------------


def test_backward_is_gradient_on_the_one_tape():
    w = tg.Parameter(f64(3))
    with tg.Tape():
        loss = (w * w * w).sum()
    g = loss.backward()
    assert isinstance(g, tg.Gradients) and list(g.keys()) == [w]
    np.testing.assert_allclose(g[w].numpy(), 3 * w.numpy() ** 2)
    x = tg.tensor(f64(2))
    tape = tg.Tape()
    y = x.trace(tape) * 2.0  # dfdx style: backward() finds the one tape
    np.testing.assert_allclose(tg.backward(y, np.ones(2)).values()[0].numpy(), 2.0)


def test_stop_ends_recording():
    tape = tg.Tape()
    x = tg.tensor(f64(2)).trace(tape)
    a = (x * 2.0).sum()
    tape.stop()
    b = x * 3.0
    assert not tape.recording and a._tapes == (tape,) and b._tapes == ()
    np.testing.assert_allclose(tape.gradient(a, x).numpy(), 2.0)


# -- no_grad / stop_gradient -------------------------------------------------------------------


def test_no_grad_stops_all_recording():
    w = tg.Parameter(f64(3))
    with tg.Tape() as tape:
        with tg.no_grad():
            a = w * 2.0
            assert not tg.is_grad_enabled()
        b = (a * w).sum()
    assert tg.is_grad_enabled()
    assert a._tapes == ()
    np.testing.assert_allclose(tape.gradient(b, w).numpy(), 2 * w.numpy())


def test_no_grad_as_decorator():
    w = tg.Parameter(f64(3))

    @tg.no_grad()
    def f(v):
        return v * 2.0

    with tg.Tape() as tape:
        f(w)
    assert tape.nodes == []


@pytest.mark.parametrize("cut", [tg.stop_gradient, tg.detach, lambda t: t.detach()])
def test_stop_gradient_cuts_one_edge(cut):
    xa = f64(4)
    x = tg.tensor(xa)
    with tg.Tape() as tape:
        tape.watch(x)
        y = (x * cut(tg.exp(x))).sum()
    tx = tt(xa)
    (r,) = torch.autograd.grad((tx * torch.exp(tx).detach()).sum(), tx)
    close(tape.gradient(y, x), r)


# -- higher order ------------------------------------------------------------------------------


def test_gradient_penalty_matches_torch_create_graph():
    wa, xa = f64(3, 2), f64(5, 3, seed=1)
    w = tg.Parameter(wa)
    x = tg.tensor(xa)
    with tg.Tape() as outer:
        with tg.Tape() as inner:
            inner.watch(x)
            y = tg.tanh(x @ w).sum()
        gx = inner.gradient(y, x)  # recorded on outer
        penalty = (gx * gx).sum()
    g = outer.gradient(penalty, w)

    tw, tx = tt(wa), tt(xa)
    (tgx,) = torch.autograd.grad(torch.tanh(tx @ tw).sum(), tx, create_graph=True)
    (ref,) = torch.autograd.grad((tgx * tgx).sum(), tw)
    close(gx, tgx)
    close(g, ref)


def test_hessian_vector_product_matches_torch():
    xa, va = f64(4), f64(4, seed=1)
    x, v = tg.tensor(xa), tg.tensor(va)
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = (tg.sin(x) * x * x).sum() + (x.sum() ** 3)
        g = inner.gradient(y, x)
        gv = (g * v).sum()
    hvp = outer.gradient(gv, x)

    tx = tt(xa)
    ty = (torch.sin(tx) * tx * tx).sum() + tx.sum() ** 3
    (tg_,) = torch.autograd.grad(ty, tx, create_graph=True)
    (ref,) = torch.autograd.grad((tg_ * torch.tensor(va)).sum(), tx)
    close(hvp, ref)
    hess = torch.autograd.functional.hessian(
        lambda t: (torch.sin(t) * t * t).sum() + t.sum() ** 3, torch.tensor(xa)
    )
    np.testing.assert_allclose(hvp.numpy(), hess.numpy() @ va, rtol=1e-10)


def test_third_order_through_traces():
    xa = f64(3)
    t1, t2, t3 = tg.Tape(), tg.Tape(), tg.Tape()
    x1 = tg.tensor(xa).trace(t1)
    x2 = x1.trace(t2)
    x3 = x2.trace(t3)
    y = (x3**4).sum()
    d1 = t3.gradient(y, x3)  # 4 x^3, on t1 and t2
    d2 = t2.gradient(d1.sum(), x2)  # 12 x^2
    d3 = t1.gradient(d2.sum(), x1)  # 24 x
    np.testing.assert_allclose(d1.numpy(), 4 * xa**3)
    np.testing.assert_allclose(d2.numpy(), 12 * xa**2)
    np.testing.assert_allclose(d3.numpy(), 24 * xa)


def test_check_grads_through_the_tape():
    w = tg.tensor(f64(3, 2))
    check_grads(lambda x, w: tg.tanh(x @ w).sum() * tg.exp(x).mean(), [tg.tensor(f64(4, 3)), w])


# -- Gradients value ---------------------------------------------------------------------------


def _two_grads():
    a, b = tg.Parameter(f64(3)), tg.Parameter(f64(2, 2, seed=1))
    with tg.Tape() as tape:
        loss = (a * a).sum() + (b * 3.0).sum()
    return a, b, tape.gradient(loss)


def test_gradients_mapping_interface():
    a, b, g = _two_grads()
    assert len(g) == 2 and a in g and b in g and list(g) == [a, b]
    np.testing.assert_allclose(g[a].numpy(), 2 * a.numpy())
    assert g.get(a) is g[a]
    c = tg.Parameter(f64(1))
    assert g.get(c) is None and g.get(c, 0) == 0
    with pytest.raises(KeyError, match="no gradient for"):
        g[c]
    assert [t for t, _ in g.items()] == g.keys() == [a, b]
    assert len(g.values()) == 2
    assert "Gradients(2 tensors" in repr(g)


def test_gradients_arithmetic_and_accumulation():
    a, b, g = _two_grads()
    s = g + g
    np.testing.assert_allclose(s[a].numpy(), 4 * a.numpy())
    np.testing.assert_allclose((g * 0.5)[b].numpy(), 1.5)
    np.testing.assert_allclose((0.5 * g)[b].numpy(), 1.5)
    np.testing.assert_allclose((g / 2)[b].numpy(), 1.5)
    np.testing.assert_allclose(sum([g, g, g])[a].numpy(), 6 * a.numpy())
    # a tensor present on one side only is kept
    c = tg.Parameter(f64(3, seed=2))
    with tg.Tape() as tape:
        lc = (c * a).sum()
    gc = tape.gradient(lc)
    both = g + gc
    assert set(both.keys()) == {a, b, c}
    np.testing.assert_allclose(both[a].numpy(), 2 * a.numpy() + c.numpy())
    np.testing.assert_allclose(both[c].numpy(), a.numpy())


def test_gradient_into_accumulates_micro_batches():
    w = tg.Parameter(f64(3))
    xs = [f64(3, seed=s) for s in range(3)]
    acc = tg.Gradients()
    for xa in xs:
        with tg.Tape() as tape:
            loss = (w * tg.tensor(xa)).sum()
        out = tape.gradient(loss, into=acc)
        assert out is acc
    np.testing.assert_allclose(acc[w].numpy(), sum(xs))


def test_global_norm_and_clip_match_torch():
    a, b, g = _two_grads()
    ta, tb = tt(a.numpy()), tt(b.numpy())
    ((ta * ta).sum() + (tb * 3.0).sum()).backward()
    norm = torch.nn.utils.clip_grad_norm_([ta, tb], max_norm=1.5)
    assert g.global_norm() == pytest.approx(norm.item(), rel=1e-12)
    c = g.clip_by_global_norm(1.5)
    close(c[a], ta.grad)
    close(c[b], tb.grad)
    assert c.global_norm() == pytest.approx(1.5, rel=1e-5)
    assert g.clip_by_global_norm(1e9) is g
    with pytest.raises(ValueError, match="max_norm"):
        g.clip_by_global_norm(0.0)


# -- missing gradients -------------------------------------------------------------------------


class TwoBranch(tg.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = Affine(3, 2)
        self.unused = Affine(3, 2, seed=5)
        self.frozen = tg.Parameter(f64(2), requires_grad=False)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return self.used(x) * self.frozen


def test_missing_lists_parameters_by_dotted_path_with_a_reason():
    m = TwoBranch()
    x = tg.tensor(f64(4, 3))
    with tg.Tape() as tape:
        loss = m(x).sum()
    g = tape.gradient(loss, m)
    assert set(g.keys()) == {m.used.weight, m.used.bias}
    miss = g.missing(m)
    assert set(miss) == {"unused.weight", "unused.bias"}  # frozen ones are expected to have none
    assert all("never met the tape" in r for r in miss.values())
    assert g.missing(m.parameters()).keys() == miss.keys()
    assert g.why_missing(m.used.weight) is None
    assert g.why_missing(m.frozen) == "it is frozen (requires_grad=False)"
    with pytest.raises(KeyError, match="unused.weight: it never met the tape"):
        g[m.unused.weight]
    assert set(g.missing()) == {"unused.weight", "unused.bias"}


def test_missing_reason_for_a_cut_branch():
    m = TwoBranch()
    x = tg.tensor(f64(4, 3))
    with tg.Tape() as tape:
        loss = (tg.stop_gradient(m.unused(x)) * m.used(x)).sum()
    g = tape.gradient(loss)
    assert "no path leads from it to the target" in g.why_missing(m.unused.weight)
    assert set(g.missing(m)) == {"unused.weight", "unused.bias"}


def test_missing_reason_with_watch_parameters_false():
    m = TwoBranch()
    x = tg.tensor(f64(4, 3))
    with tg.Tape(watch_parameters=False) as tape:
        tape.watch(m.used.weight)
        loss = m(x).sum()
    g = tape.gradient(loss, m)
    assert "watch_parameters=False" in g.missing(m)["used.bias"]


# -- iterative backward ------------------------------------------------------------------------


def test_backward_through_a_100k_op_chain_is_iterative():
    x = tg.tensor(np.array([0.5]))
    tape = tg.Tape()
    h = xt = x.trace(tape)
    for i in range(100_000):
        h = h * 1.001 if i % 1000 == 0 else -h  # 99,900 negations: the sign comes back
    assert len(tape.nodes) == 100_000
    g = tape.gradient(h.sum(), xt)
    np.testing.assert_allclose(g.numpy(), [1.001**100], rtol=1e-12)


def test_on_ready_reports_each_leaf_once_its_gradient_is_final():
    # w1 is used first (so its gradient is final last), w2 by one op only, w3 never reached
    w1 = tg.Parameter(tg.tensor([1.0, 2.0]))
    w2 = tg.Parameter(tg.tensor([3.0, 4.0]))
    w3 = tg.Parameter(tg.tensor([5.0, 6.0]))
    with tg.Tape() as tape:
        h = w1 * 2.0
        u = (w3 * 0.0).sum()  # a branch that does not reach the loss
        loss = (h * w2).sum() + (h * w1).sum()
    del u
    seen = []

    def ready(p, g):
        # final: equals what gradient() returns, and may be changed in place
        seen.append((p, g.copy()))
        g *= 10.0

    grads = tape.gradient(loss, [w1, w2], on_ready=ready)
    names = [id(p) for p, _ in seen]
    assert names == [id(w2), id(w1)]  # w2's last use comes later in forward order
    np.testing.assert_array_equal(seen[0][1], [2.0, 4.0])  # d/dw2 = h
    np.testing.assert_array_equal(seen[1][1], 2.0 * np.array([3.0, 4.0]) + 4.0 * np.array([1.0, 2.0]))
    np.testing.assert_array_equal(grads[1].numpy(), [20.0, 40.0])  # changed in place
    np.testing.assert_array_equal(grads[0].numpy(), 10.0 * (2.0 * np.array([3.0, 4.0]) + 4.0 * np.array([1.0, 2.0])))


def test_on_ready_under_an_outer_tape_gets_arrays_too():
    w = tg.Parameter(tg.tensor([1.0, 2.0]))
    with tg.Tape() as outer, tg.Tape() as tape:
        loss = (w * w * w).sum()
        got = []
        g = tape.gradient(loss, w, on_ready=lambda p, a: got.append((p, type(a))))
        gs = g.sum()
    assert got == [(w, np.ndarray)]
    assert outer.gradient(gs, w).tolist() == [6.0, 12.0]


def test_op_hooks_see_every_op_and_every_gradient_then_go_away():
    from tapegrad import _autodiff

    ops, vjps = [], []
    x = tg.tensor([1.0, 2.0])
    prev = _autodiff.set_op_hooks(
        lambda prim, ins, params, out: ops.append((prim.name, out.shape)),
        lambda node, i, g: vjps.append((node.prim.name, i, g.shape)),
    )
    try:
        y = tg.exp(x)  # untraced ops are seen too
        with tg.Tape() as tape:
            tape.watch(x)
            z = (tg.exp(x) * 3.0).sum()
        tape.gradient(z, x)
    finally:
        _autodiff.set_op_hooks(*prev)
    assert prev == (None, None)
    assert [n for n, _ in ops] == ["exp", "exp", "mul_scalar", "sum"]
    assert [(n, i) for n, i, _ in vjps] == [("sum", 0), ("mul_scalar", 0), ("exp", 0)]
    before = len(ops)
    tg.exp(y)
    assert len(ops) == before  # removed


def test_gradient_sums_add_in_place_without_touching_shared_arrays():
    """Backward adds later terms into a sum it made itself: a slice's gradient goes into the
    whole's (a split's pieces), a second term into the first sum; an array that two inputs
    share (add's VJP hands both the same one) is never written."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 9)), rng.standard_normal((4, 9))

    def loss_of(u, v):
        s = u * v
        p, q, r = s.split(3, dim=1)  # three slices of one tensor
        rest = (p * q).sum() + (r**2).sum() + (s * 3).sum() + (u[:, ::2] * 5).sum() + (u * v).sum()
        # recorded last, so walked first: add hands one gradient array to both u and v, then
        # u's other terms arrive
        return rest + (u + v).sum()

    x, y = tg.Parameter(tg.tensor(a)), tg.Parameter(tg.tensor(b))
    with tg.Tape() as tape:
        loss = loss_of(x, y)
    gx, gy = tape.gradient(loss, [x, y])
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    loss_of(tx, ty).backward()
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gy.numpy(), ty.grad.numpy(), rtol=1e-12)


def test_split_pieces_gradient_matches_finite_differences():
    from tapegrad.testing import check_grads

    def f(t):
        p, q, r = t.split(2, dim=0)
        return (p * q).sum() + (r**3).sum() + (t * t).sum()

    check_grads(f, [tg.tensor(np.random.default_rng(1).standard_normal((6, 3)))])
