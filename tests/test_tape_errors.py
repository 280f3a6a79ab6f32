"""Every tape error names the op, the shapes/dtypes involved and the fix."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._autodiff import OUT, Primitive


def f64(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


# -- gradient() misuse -------------------------------------------------------------------------


def test_second_gradient_on_a_released_tape_names_persistent():
    w = tg.Parameter(f64(3))
    with tg.Tape() as tape:
        loss = (w * w).sum()
    tape.gradient(loss)
    with pytest.raises(RuntimeError, match=r"released.*tg\.Tape\(persistent=True\)"):
        tape.gradient(loss)
    with pytest.raises(RuntimeError, match="released"):
        tape.watch(w)
    with pytest.raises(RuntimeError, match="released"):
        with tape:
            pass


def test_gradient_after_release_raises():
    w = tg.Parameter(f64(3))
    with tg.Tape(persistent=True) as tape:
        loss = (w * w).sum()
    tape.release()
    with pytest.raises(RuntimeError, match=r"persistent=True"):
        tape.gradient(loss)


def test_non_scalar_target_needs_output_gradients():
    x = tg.tensor(f64(2, 3))
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(ValueError, match=r"shape \(2, 3\) \(float64\).*output_gradients=.*sum\(\)"):
        tape.gradient(y, x)


def test_output_gradients_must_match_the_target():
    x = tg.tensor(f64(3))
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(
        ValueError, match=r"output_gradients has shape \(2,\).*target has shape \(3,\)"
    ):
        tape.gradient(y, x, output_gradients=np.ones(2))
    with pytest.raises(ValueError, match=r"2 target\(s\) but 1 output_gradients"):
        tape.gradient([y, y], x, output_gradients=[np.ones(3)])
    tape.release()


def test_bad_sources_and_targets():
    x = tg.tensor(f64(3))
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        y = (x * 2.0).sum()
    with pytest.raises(TypeError, match="sources must be None, a Tensor"):
        tape.gradient(y, "x")
    with pytest.raises(TypeError, match="got a ndarray in the list"):
        tape.gradient(y, [x, np.ones(3)])
    with pytest.raises(TypeError, match="target must be a Tensor, got float"):
        tape.gradient(1.0, x)
    with pytest.raises(TypeError, match=r"into=.*sources=None or a Module"):
        tape.gradient(y, x, into=tg.Gradients())
    tape.release()


def test_target_not_on_the_tape():
    x = tg.tensor(f64(3))
    with tg.Tape() as tape:
        tape.watch(x)
    y = (x * 2.0).sum()  # computed after the block
    with pytest.raises(
        ValueError, match=r"the target \(shape \(\)\) is not on this tape.*x\.trace\(tape\)"
    ):
        tape.gradient(y)


def test_a_source_that_was_never_watched():
    x, y = tg.tensor(f64(3)), tg.tensor(f64(2))
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        z = (x * 2.0).sum()
    with pytest.raises(
        ValueError,
        match=r"source 1 \(tensor of shape \(2,\), float64\) is not on this tape.*tape\.watch\(x\)",
    ):
        tape.gradient(z, [x, y])
    frozen = tg.Parameter(f64(3), requires_grad=False)
    with pytest.raises(ValueError, match=r"the source .* is not on this tape: it is frozen"):
        tape.gradient(z, frozen)
    # a trainable parameter is watched by the `with` block even if unused: a zero gradient
    unused = tg.Parameter(f64(3))
    np.testing.assert_array_equal(tape.gradient(z, unused).numpy(), np.zeros(3))
    tape.release()


def test_every_target_of_a_list_must_be_on_the_tape():
    x = tg.tensor(f64(3))
    with tg.Tape() as tape:
        tape.watch(x)
        y1 = (x * 2.0).sum()
    y2 = (x * 3.0).sum()  # after the block: a constant on this tape, almost surely a mistake
    with pytest.raises(ValueError, match=r"target 1 of 2 \(shape \(\)\) is not on this tape"):
        tape.gradient([y1, y2], x)


def test_reentering_an_open_tape():
    tape = tg.Tape()
    with tape:
        with pytest.raises(RuntimeError, match="already open"):
            with tape:
                pass


# -- watching ----------------------------------------------------------------------------------


def test_watching_an_integer_tensor():
    ids = tg.tensor(np.array([1, 2, 3]))
    tape = tg.Tape()
    with pytest.raises(
        TypeError, match=r"Tape\.watch: a tensor of dtype int64 \(shape \(3,\)\).*only float"
    ):
        tape.watch(ids)
    with pytest.raises(TypeError, match=r"trace: a tensor of dtype int64"):
        ids.trace(tape)
    with pytest.raises(TypeError, match="cannot watch a ndarray"):
        tape.watch(np.ones(3))


# -- backward() --------------------------------------------------------------------------------


def test_backward_on_no_tape():
    y = (tg.tensor(f64(3)) * 2.0).sum()
    with pytest.raises(RuntimeError, match=r"on no tape.*with tg\.Tape\(\) as tape"):
        y.backward()


def test_backward_on_several_tapes():
    t1, t2 = tg.Tape(), tg.Tape()
    a = tg.tensor(f64(3)).trace(t1)
    b = tg.tensor(f64(3)).trace(t2)
    y = (a * b).sum()
    with pytest.raises(RuntimeError, match=r"on 2 tapes.*tape\.gradient\(loss\)"):
        y.backward()
    t1.release()
    t2.release()


def test_backward_after_the_tape_was_released():
    w = tg.Parameter(f64(3))
    with tg.Tape():
        loss = (w * w).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"released.*persistent=True"):
        loss.backward()


# -- primitives without a VJP --------------------------------------------------------------------


def test_a_primitive_without_a_vjp_raises_naming_it():
    nograd = Primitive(
        "test_nograd", lambda x, y: x * y, (lambda xp, g, ans, x, y: g * y, None), (0, 1)
    )
    x, y = tg.tensor(f64(3)), tg.tensor(f64(3, seed=1))
    with tg.Tape() as tape:
        tape.watch(x, y)
        z = tg.apply(nograd, x, y).sum()
    with pytest.raises(
        TypeError,
        match=r"primitive 'test_nograd'.*no VJP for input 1 \(\(3,\) float64\).*stop_gradient",
    ):
        tape.gradient(z)


def test_a_primitive_without_a_vjp_is_fine_when_that_input_needs_none():
    nograd = Primitive(
        "test_nograd2", lambda x, y: x * y, (lambda xp, g, ans, x, y: g * y, None), (0, 1)
    )
    x, y = tg.tensor(f64(3)), tg.tensor(f64(3, seed=1))
    with tg.Tape() as tape:
        tape.watch(x)
        z = tg.apply(nograd, x, y).sum()  # y is on no tape
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), y.numpy())


def test_a_vjp_returning_none_raises():
    bad = Primitive("test_none_vjp", lambda x: x * 2, (lambda xp, g, ans, x: None,), ())
    x = tg.tensor(f64(3))
    with tg.Tape() as tape:
        tape.watch(x)
        z = tg.apply(bad, x).sum()
    with pytest.raises(TypeError, match=r"'test_none_vjp'.*returned None.*zeros"):
        tape.gradient(z, x)


def test_a_vjp_with_a_wrong_shape_raises():
    bad = Primitive("test_bad_shape", lambda x: x * 2, (lambda xp, g, ans, x: tg.ones((5,)),), ())
    x = tg.tensor(f64(3))
    with tg.Tape() as tape:
        tape.watch(x)
        z = tg.apply(bad, x).sum()
    with pytest.raises(
        ValueError, match=r"'test_bad_shape' returned a gradient of shape \(5,\).*\(3,\)"
    ):
        tape.gradient(z, x)


# -- forward failures --------------------------------------------------------------------------


@pytest.mark.parametrize("op,name", [(lambda a, b: a + b, "add"), (lambda a, b: a * b, "mul")])
def test_broadcasting_error_names_the_op_shapes_and_fix(op, name):
    a = tg.tensor(np.ones((2, 3), np.float32))
    b = tg.tensor(np.ones(4, np.float32))
    with pytest.raises(ValueError) as e:
        op(a, b)
    msg = str(e.value)
    assert msg.startswith(f"{name}: ")
    assert "(2, 3) float32, (4,) float32" in msg
    assert "broadcast" in msg and "fix:" in msg and "x[:, None]" in msg


def test_forward_errors_keep_their_type_and_cause():
    boom = Primitive(
        "test_boom", lambda x: (_ for _ in ()).throw(IndexError("bad index")), (None,), ()
    )
    with pytest.raises(IndexError, match=r"test_boom: bad index \(inputs: \(3,\) float64\)") as e:
        tg.apply(boom, tg.tensor(f64(3)))
    assert isinstance(e.value.__cause__, IndexError)


# -- in-place modification (version counter) ---------------------------------------------------


def test_modifying_a_saved_input_in_place_is_detected():
    w = tg.Parameter(f64(3))
    w.name = "layer.weight"
    x = tg.tensor(f64(3, seed=1))
    with tg.Tape() as tape:
        loss = (w * x).sum()  # mul saves w and x
    w.copy_(np.zeros(3))  # e.g. an optimizer step before gradient()
    with pytest.raises(
        RuntimeError,
        match=r"input 0 'layer\.weight' \(shape \(3,\), float64, now at version 1\) of op 'mul'.*modified in place.*before optimizer\.step",
    ):
        tape.gradient(loss)


def test_modifying_a_saved_output_in_place_is_detected():
    x = tg.tensor(f64(3))
    with tg.Tape() as tape:
        tape.watch(x)
        h = tg.tanh(x)  # tanh saves its output
        loss = h.sum()
        h[0] = 5.0  # recorded functionally, but tanh's saved output changed
    with pytest.raises(RuntimeError, match=r"its output \(shape \(3,\).*of op 'tanh'"):
        tape.gradient(loss, x)


def test_modifying_an_unsaved_input_is_fine():
    x = tg.tensor(f64(3))
    with tg.Tape() as tape:
        tape.watch(x)
        y = x + 1.0  # add saves nothing
        c = tg.tensor(f64(3, seed=2))
        z = (y + c).sum()
    c[0] = 7.0
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), np.ones(3))


def test_in_place_before_recording_does_not_count():
    w = tg.Parameter(f64(3))
    w.copy_(np.ones(3))  # version 1 before the op
    with tg.Tape() as tape:
        loss = (w * w).sum()
    np.testing.assert_allclose(tape.gradient(loss)[w].numpy(), 2.0)


def test_output_gradient_of_a_primitive_saving_out_checks_version():
    sq = Primitive(
        "test_sq_out", lambda x: x * x, (lambda xp, g, ans, x: g * 2.0 * tg.sqrt(ans),), (OUT,)
    )
    x = tg.tensor(np.array([2.0, 3.0]))
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.apply(sq, x)
        loss = y.sum()
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [4.0, 6.0])
    # the same recording, with the saved output changed in place before backward
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.apply(sq, x)
        loss = y.sum()
    y.copy_(np.zeros(2))
    with pytest.raises(
        RuntimeError, match=r"its output \(shape \(2,\), float64, now at version 1\) of op 'test_sq_out'"
    ):
        tape.gradient(loss, x)
