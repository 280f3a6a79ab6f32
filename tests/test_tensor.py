"""The Tensor surface: properties, conversions, DLPack, repr, operators, dtypes and promotion."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch

import tapegrad as tg


def test_properties() -> None:
    x = tg.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.ndim == 3 and x.size == 24 and len(x) == 2
    assert x.dtype == tg.float32 and x.device == "cpu"
    assert x.T.shape == (4, 3, 2) and x.mT.shape == (2, 4, 3)
    assert tg.tensor(1.0).shape == () and tg.tensor(1.0).ndim == 0
    with pytest.raises(TypeError, match="0-d"):
        len(tg.tensor(1.0))


def test_numpy_item_and_python_scalars() -> None:
    x = tg.tensor([[1.5, 2.5]])
    np.testing.assert_array_equal(x.numpy(), [[1.5, 2.5]])
    assert isinstance(x.numpy(), np.ndarray)
    one = tg.tensor([[2.5]])
    assert one.item() == 2.5 and isinstance(one.item(), float)
    assert float(one) == 2.5 and int(one) == 2 and bool(one) is True
    assert int(tg.tensor(7)) == 7 and isinstance(tg.tensor(7).item(), int)
    assert bool(tg.tensor([0.0])) is False
    with pytest.raises(ValueError, match="2 elements"):
        x.item()
    with pytest.raises(TypeError, match="one-element"):
        float(x)
    with pytest.raises(TypeError, match="one-element"):
        int(x)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    assert x.tolist() == [[1.5, 2.5]]


def test_array_protocol() -> None:
    x = tg.tensor([1.0, 2.0])
    a = np.asarray(x)
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0]
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert np.array([x, x]).shape == (2, 2)
    copied, shared = np.array(x), np.asarray(x)
    copied[0] = 9.0
    assert x.tolist() == [1.0, 2.0]  # np.array copies, as for any array-like
    assert np.shares_memory(shared, x.numpy())  # np.asarray and .numpy() share (as PyTorch)


def test_dlpack_round_trips_share_memory() -> None:
    x = tg.tensor([1.0, 2.0, 3.0])
    t = torch.from_dlpack(x)
    t[0] = 10.0
    assert x.tolist() == [10.0, 2.0, 3.0]  # the same memory
    back = tg.from_dlpack(t)
    back_np = tg.from_dlpack(np.arange(3))
    assert back.dtype == tg.float32 and back.tolist() == [10.0, 2.0, 3.0]
    assert back_np.dtype == tg.int64
    assert np.from_dlpack(x).tolist() == [10.0, 2.0, 3.0]
    assert x.__dlpack_device__() == (1, 0)  # kDLCPU


def test_repr_is_readable() -> None:
    assert repr(tg.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(tg.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(tg.tensor([1.0], dtype=tg.float64)) == "tensor([1.], dtype=float64)"
    assert repr(tg.tensor([1], dtype=tg.int32)) == "tensor([1], dtype=int32)"
    assert repr(tg.tensor([True])) == "tensor([ True], dtype=bool)"
    assert repr(tg.tensor(2.5)) == "tensor(2.5)"
    assert repr(tg.Parameter(tg.ones(2))) == "Parameter([1., 1.])"
    assert "..." in repr(tg.zeros(1000))  # long tensors are summarised
    x = tg.ones(2)
    with tg.Tape() as tape:
        tape.watch(x)
        assert "on 1 tape" in repr(x * 2)
    assert f"{tg.tensor(3.14159):.2f}" == "3.14"


def test_iteration_and_hash_by_identity() -> None:
    x = tg.tensor([[1, 2], [3, 4]])
    assert [r.tolist() for r in x] == [[1, 2], [3, 4]]
    a, b = tg.ones(2), tg.ones(2)
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b"


# --- operators -------------------------------------------------------------------------------
def test_arithmetic_operators_broadcast_and_reflect() -> None:
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    v = tg.tensor([10.0, 20.0])
    assert (x + v).tolist() == [[11, 22], [13, 24]]
    assert (v - x).tolist() == [[9, 18], [7, 16]]
    assert (2 - x).tolist() == [[1, 0], [-1, -2]]
    assert (2.0 * x).tolist() == (x * 2).tolist() == [[2, 4], [6, 8]]
    assert (1 / tg.tensor([2.0, 4.0])).tolist() == [0.5, 0.25]
    assert (2 ** tg.tensor([1.0, 3.0])).tolist() == [2.0, 8.0]
    assert (x**2).tolist() == [[1, 4], [9, 16]]
    assert (-x).tolist() == [[-1, -2], [-3, -4]] and (+x) is x
    assert abs(tg.tensor([-1.5])).tolist() == [1.5]
    assert (tg.tensor([7, -7]) // 2).tolist() == [3, -4]
    assert (tg.tensor([7, -7]) % 3).tolist() == [1, 2]
    assert (7.5 // tg.tensor([2.0])).tolist() == [3.0] and (7 % tg.tensor([4])).tolist() == [3]
    assert (x @ v).tolist() == [50.0, 110.0]
    assert (np.ones(2) @ tg.eye(2)).tolist() == [1.0, 1.0]


def test_numpy_arrays_on_the_left_give_tensors() -> None:
    x = tg.tensor([1.0, 2.0])
    for out in (np.ones(2) + x, np.ones(2) * x, np.ones(2) - x, np.ones(2) / x):
        assert isinstance(out, tg.Tensor)
    assert (np.array([3.0, 4.0], np.float32) - x).tolist() == [2.0, 2.0]


def test_comparisons_and_logic() -> None:
    x = tg.tensor([1.0, 2.0, 3.0])
    assert (x > 1.5).dtype == tg.bool_ and (x > 1.5).tolist() == [False, True, True]
    assert (x == tg.tensor([1.0, 0.0, 3.0])).tolist() == [True, False, True]
    assert (x != 2).tolist() == [True, False, True]
    assert (x <= 2).tolist() == [True, True, False] and (x >= 2).tolist() == [False, True, True]
    assert (1.5 < x).tolist() == [False, True, True]
    a, b = tg.tensor([True, False, True]), tg.tensor([True, True, False])
    assert (a & b).tolist() == [True, False, False]
    assert (a | b).tolist() == [True, True, True]
    assert (a ^ b).tolist() == [False, True, True]
    assert (~a).tolist() == [False, True, False]
    assert (True & a).tolist() == [True, False, True]
    assert (tg.tensor([6]) & tg.tensor([3])).tolist() == [2]  # bitwise on integers (PyTorch)
    assert tg.logical_not(tg.tensor([0, 2])).tolist() == [True, False]
    with pytest.raises(TypeError, match="~"):
        ~tg.tensor([1.0])


# --- dtypes and promotion --------------------------------------------------------------------
TG_DTYPES = {
    "float32": tg.float32,
    "float64": tg.float64,
    "int32": tg.int32,
    "int64": tg.int64,
    "bool": tg.bool_,
}
TORCH_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}


def _operand(kind: str, lib: str):
    """A tensor of a dtype (optionally 0-d, '0d:' prefix) or a Python scalar."""
    scalars = {"py_int": 3, "py_float": 2.5, "py_bool": True}
    if kind in scalars:
        return scalars[kind]
    zero_d = kind.startswith("0d:")
    name = kind.removeprefix("0d:")
    vals = 1 if zero_d else [1, 2]
    if lib == "tg":
        return tg.tensor(vals, dtype=TG_DTYPES[name])
    return torch.tensor(vals, dtype=TORCH_DTYPES[name])


KINDS = [*TG_DTYPES, "0d:float64", "0d:int64", "0d:float32", "py_int", "py_float", "py_bool"]
OPS = {"add": operator.add, "mul": operator.mul, "truediv": operator.truediv, "maximum": None}
PROMOTION_CASES = [
    (op, lhs, rhs)
    for op in OPS
    for lhs in TG_DTYPES
    for rhs in KINDS
    if not (op == "maximum" and rhs.startswith("py_"))  # torch.maximum takes tensors only
]


@pytest.mark.parametrize(("op", "lhs", "rhs"), PROMOTION_CASES)
def test_binary_promotion_follows_pytorch(op: str, lhs: str, rhs: str) -> None:
    a, b = _operand(lhs, "tg"), _operand(rhs, "tg")
    ta, tb = _operand(lhs, "torch"), _operand(rhs, "torch")
    if op == "maximum":
        want, got = torch.maximum(ta, tb), tg.maximum(a, b)
    else:
        want, got = OPS[op](ta, tb), OPS[op](a, b)
    assert got.dtype == want.numpy().dtype, f"{lhs} {op} {rhs}: {got.dtype} vs torch {want.dtype}"
    np.testing.assert_allclose(got.numpy().astype(float), want.numpy().astype(float), rtol=1e-6)


@pytest.mark.parametrize(
    "spec",
    [
        tg.float64,
        np.float64,
        np.dtype("float64"),
        "float64",
        torch.empty(0, dtype=torch.float64).numpy().dtype,
    ],
)
def test_dtype_argument_forms(spec) -> None:
    assert tg.zeros(2, dtype=spec).dtype == tg.float64
    assert tg.tensor([1], dtype=spec).dtype == tg.float64


def test_dtype_names_and_python_types() -> None:
    assert tg.float32 is not None and tg.float32 == np.dtype("float32")
    assert tg.bool is tg.bool_ and tg.bool_ == np.dtype(bool)
    assert tg.zeros(1, dtype="int32").dtype == tg.int32
    assert tg.zeros(1, dtype="bool").dtype == tg.bool_
    assert tg.zeros(1, dtype=bool).dtype == tg.bool_
    assert tg.zeros(1, dtype=int).dtype == tg.int64
    assert tg.zeros(1, dtype=float).dtype == tg.float32  # the default float
    with pytest.raises(TypeError, match="not understood"):
        tg.zeros(1, dtype="floaty")


def test_set_default_dtype() -> None:
    try:
        tg.set_default_dtype(tg.float64)
        assert tg.tensor([1.5]).dtype == tg.float64 and tg.randn(2).dtype == tg.float64
        assert (tg.tensor([1]) * 0.5).dtype == tg.float64
    finally:
        tg.set_default_dtype(tg.float32)
    assert tg.tensor([1.5]).dtype == tg.float32
    with pytest.raises(TypeError, match="float"):
        tg.set_default_dtype(tg.int64)


def test_casts() -> None:
    x = tg.tensor([1.7, -1.7])
    assert x.astype(tg.int64).tolist() == [1, -1]
    assert x.to(tg.float64).dtype == tg.float64 and x.double().dtype == tg.float64
    assert x.long().dtype == tg.int64 and x.int().dtype == tg.int32 and x.bool().dtype == tg.bool_
    assert x.float() is x
    assert x.to("cpu") is x


def test_integer_ops_keep_integers_and_float_functions_give_floats() -> None:
    i = tg.tensor([1, 2, 3])
    assert (i + 1).dtype == tg.int64 and (i * i).dtype == tg.int64
    assert (i / 2).dtype == tg.float32 and (i * 0.5).dtype == tg.float32
    assert tg.exp(i).dtype == tg.float32 and tg.sqrt(i).dtype == tg.float32
    assert tg.sum(tg.tensor([True, True])).item() == 2
    assert tg.mean(i).dtype == tg.float32 and tg.mean(i).item() == 2.0


# --- methods, in-place, copies ---------------------------------------------------------------
def test_methods_mirror_the_functions() -> None:
    x = tg.arange(24).reshape(2, 3, 4).astype(tg.float64)
    assert x.sum(axis=1).shape == (2, 4) and x.mean().item() == 11.5
    assert x.max().item() == 23 and x.argmax().item() == 23
    assert x.transpose(0, 1).shape == (3, 2, 4)  # two axes of a 3-D tensor swap (PyTorch)
    assert x.transpose(2, 0, 1).shape == (4, 2, 3) and x.permute(1, 0, 2).shape == (3, 2, 4)
    assert x.reshape(6, 4).shape == x.view(-1, 4).shape == (6, 4)
    assert x.flatten().shape == (24,) and x.unsqueeze(0).shape == (1, 2, 3, 4)
    assert x.softmax(axis=-1).shape == x.shape and x.clamp(0, 5).max().item() == 5
    assert [t.shape for t in x.split(2, axis=2)] == [(2, 3, 2), (2, 3, 2)]


def test_setitem_outside_a_tape_is_a_plain_assignment() -> None:
    x = tg.zeros(2, 3)
    x[0, 1] = 5.0
    x[1] = tg.tensor([1.0, 2.0, 3.0])
    x[:, 2] = 7
    assert x.tolist() == [[0, 5, 7], [1, 2, 7]]
    with pytest.raises(IndexError, match="setitem"):
        x[5] = 1.0


def test_setitem_on_a_tape_is_recorded() -> None:
    w = tg.tensor([1.0, 2.0, 3.0])
    with tg.Tape() as tape:
        tape.watch(w)
        y = w * 2
        y[0] = 0.0
        loss = (y * y).sum()
    assert tape.gradient(loss, w).tolist() == [0.0, 16.0, 24.0]


def test_clone_copies_and_passes_gradients_detach_stops_them() -> None:
    x = tg.tensor([1.0, 2.0])
    c = x.clone()
    c[0] = 9.0
    assert x.tolist() == [1.0, 2.0]
    with tg.Tape() as tape:
        tape.watch(x)
        y = (x.clone() * 3 + x.detach()).sum()
    assert tape.gradient(y, x).tolist() == [3.0, 3.0]


def test_constructor_accepts_tensors_arrays_and_lists() -> None:
    assert tg.Tensor([1, 2]).dtype == tg.int64
    assert tg.Tensor(np.zeros(2, np.float64)).dtype == tg.float64
    assert tg.Tensor(tg.ones(2), dtype=tg.float64).dtype == tg.float64
    assert tg.tensor([tg.tensor(1.0), tg.tensor(2.0)]).tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="cannot make a tensor"):
        tg.tensor(["a"])
