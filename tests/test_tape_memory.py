"""Memory: a node holds only what its VJP declares, and a non-persistent backward frees each saved
array as soon as it has been used (traced with tracemalloc, which numpy reports to)."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._autodiff import OUT, Primitive

BATCH, WIDTH, LAYERS = 512, 32, 50
ACT = BATCH * WIDTH * 8  # bytes of one float64 activation


# -- each VJP sees only what it declares ---------------------------------------------------------


def _spy(save: tuple[int, ...], seen: list) -> Primitive:
    def vjp(i):
        def f(xp, g, ans, x, y):
            seen.append((i, ans, x, y))
            return g

        return f

    return Primitive(f"test_spy{save}", lambda x, y: x + y, (vjp(0), vjp(1)), save)


@pytest.mark.parametrize("on_tensors", [False, True])
@pytest.mark.parametrize(
    "save,want",
    [((), (False, False, False)), ((OUT,), (True, False, False)), ((1,), (False, False, True)),
     ((0, 1, OUT), (True, True, True))],
)  # fmt: skip
def test_a_vjp_receives_only_what_its_primitive_saves(save, want, on_tensors):
    seen: list = []
    prim = _spy(save, seen)
    x, y = tg.tensor(np.ones(3)), tg.tensor(np.ones(3))
    with tg.Tape() as tape:
        tape.watch(x, y)
        z = tg.apply(prim, x, y)
    node = tape.nodes[0]
    assert (node.ans is not None, *(a is not None for a in (node.args or (None, None)))) == want
    if on_tensors:  # an outer tape that holds x records the backward pass: VJPs get Tensors
        with tg.Tape() as outer:
            outer.watch(x)
            tape.gradient(z, [x, y], output_gradients=np.ones(3))
        z_, x_, y_ = z, x, y
    else:  # nothing records it: the VJPs get the arrays
        tape.gradient(z, [x, y], output_gradients=np.ones(3))
        z_, x_, y_ = z._data, x._data, y._data
    assert len(seen) == 2
    for _, ans, xs, ys in seen:
        assert ans is z_ if want[0] else ans is None
        assert (xs is x_) == want[1] and (xs is None) == (not want[1])
        assert (ys is y_) == want[2] and (ys is None) == (not want[2])


def test_builtin_ops_keep_their_output_rather_than_their_input():
    x = tg.tensor(np.ones(4))
    with tg.Tape() as tape:
        tape.watch(x)
        tg.exp(x)
        tg.tanh(x)
        x + x
    exp, tanh, add = tape.nodes
    assert exp.ans is not None and exp.args is None
    assert tanh.ans is not None and tanh.args is None
    assert add.ans is None and add.args is None and add.saved_bytes() == 0


def _weights(seed: int = 0) -> list[tg.Parameter]:
    rng = np.random.default_rng(seed)
    return [tg.Parameter(rng.standard_normal(WIDTH)) for _ in range(LAYERS)]


def test_bytes_held_is_exactly_what_the_vjps_declared():
    ws = _weights()
    x = tg.tensor(np.random.default_rng(1).standard_normal((BATCH, WIDTH)))
    with tg.Tape() as tape:
        h = x
        for w in ws:
            h = tg.tanh(h * w)  # mul keeps (h, w); tanh keeps its output, the next h
        loss = h.sum()
    # each tanh output once (shared by tanh and the next matmul), each weight, and x
    assert tape.bytes_held() == x.nbytes + LAYERS * ACT + sum(w.nbytes for w in ws)
    tape.gradient(loss)
    assert tape.bytes_held() == 0


# -- freeing during backward -------------------------------------------------------------------


def _probe(marks: list[int]) -> Primitive:
    # an identity whose VJP notes the traced memory at that point of the backward pass
    def vjp(xp, g, ans, x):
        marks.append(tracemalloc.get_traced_memory()[0])
        return g

    return Primitive("test_memprobe", lambda x: x, (vjp,), ())


def _run(persistent: bool) -> dict:
    ws = _weights()
    marks: list[int] = []
    probe = _probe(marks)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        x = tg.tensor(np.random.default_rng(1).standard_normal((BATCH, WIDTH)))
        with tg.Tape(persistent=persistent) as tape:
            h = x
            for i, w in enumerate(ws):
                h = tg.tanh(h * w)  # elementwise: no BLAS threads in a memory test
                if i % 10 == 9:
                    h = tg.apply(probe, h)
            loss = h.sum()
        del h, x
        fwd_now, fwd_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        grads = tape.gradient(loss)
        after, bwd_peak = tracemalloc.get_traced_memory()
        assert len(grads) == LAYERS
        out = {"base": base, "fwd_now": fwd_now, "fwd_peak": fwd_peak, "bwd_peak": bwd_peak,
               "after": after, "marks": marks}  # fmt: skip
        if persistent:
            del grads
            tape.release()
            out["released"] = tracemalloc.get_traced_memory()[0]
        return out
    finally:
        tracemalloc.stop()


def test_non_persistent_backward_frees_saved_arrays_as_it_goes():
    m = _run(persistent=False)
    held = m["fwd_now"] - m["base"]
    assert held > LAYERS * ACT  # the forward holds every activation
    # peak during backward: what the forward left, plus a few activation-sized temporaries
    assert m["bwd_peak"] <= m["fwd_now"] + 8 * ACT
    assert m["bwd_peak"] <= m["fwd_peak"] + 8 * ACT
    # every 10 layers of backward, about 10 activations are gone
    marks = m["marks"]
    assert len(marks) == LAYERS // 10
    for before, later in zip(marks, marks[1:]):
        assert before - later > 6 * ACT
    # at the end only the weight gradients remain (no activation)
    assert m["after"] - m["base"] < sum(w.nbytes for w in _weights()) * 2 + 4 * ACT


def test_persistent_tape_keeps_saved_arrays_until_release():
    m = _run(persistent=True)
    marks = m["marks"]
    assert len(marks) == LAYERS // 10
    # nothing is freed while walking: memory only grows by the gradients computed so far
    for before, later in zip(marks, marks[1:]):
        assert later - before > -ACT
    assert m["after"] >= m["fwd_now"] - 2 * ACT
    # release() drops every saved activation
    assert m["after"] - m["released"] > (LAYERS - 2) * ACT


def test_an_open_tape_that_holds_nothing_of_another_does_not_record_its_backward():
    """A GAN step: the generator's tape is open while the discriminator's tape computes its
    gradient. The generator's tape holds neither the target nor a leaf of that pass, so it
    cannot differentiate it: the pass runs on arrays and the generator's tape gains nothing."""
    rng = np.random.default_rng(0)
    g_w = tg.Parameter(tg.tensor(rng.standard_normal((4, 4))))
    d_w = tg.Parameter(tg.tensor(rng.standard_normal((4, 1))))
    noise, real = tg.tensor(rng.standard_normal((8, 4))), tg.tensor(rng.standard_normal((8, 4)))
    with tg.Tape(watch_parameters=False) as tape_g:
        tape_g.watch(g_w)
        fake = tg.tanh(noise @ g_w)
        held = tape_g.bytes_held()
        nodes = len(tape_g.nodes)
        with tg.Tape(watch_parameters=False) as tape_d:
            tape_d.watch(d_w)
            loss_d = ((real @ d_w) ** 2).mean() + ((fake.detach() @ d_w) ** 2).mean()
        grad_d = tape_d.gradient(loss_d, d_w)
        assert len(tape_g.nodes) == nodes and tape_g.bytes_held() == held
    want = 2 * (real.numpy().T @ (real.numpy() @ d_w.numpy())) / 8 + 2 * (
        fake.numpy().T @ (fake.numpy() @ d_w.numpy())
    ) / 8
    np.testing.assert_allclose(grad_d.numpy(), want, rtol=1e-12)


def test_an_open_tape_that_holds_the_target_records_the_backward_pass():
    x = tg.tensor(np.array([1.0, 2.0]))
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = (x**3).sum()
        (g,) = inner.gradient(y, [x])  # 3 x^2, recorded on outer (it holds y and x)
        s = g.sum()
    np.testing.assert_allclose(outer.gradient(s, x).numpy(), [6.0, 12.0])
