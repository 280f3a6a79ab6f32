"""Every row of the op table (tests/op_specs.py) against PyTorch, plus the op-level errors.

Per row: the forward in float64 and in the row's other dtypes (values and result dtype equal
to PyTorch's), the gradient of a random output cotangent in float64, and
``tapegrad.testing.check_grads`` to the row's order (second by default). A registered
primitive without a row fails ``test_every_primitive_has_a_row``.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from op_specs import ARITY_FAMILIES, ELSEWHERE, F64, SPECS, Spec

import tapegrad as tg
from tapegrad._autodiff import PRIMITIVES
from tapegrad.ops import _special
from tapegrad.testing import check_grads


def _np_dtype(t: torch.Tensor) -> np.dtype:
    return torch.empty(0, dtype=t.dtype).numpy().dtype


def _assert_close(got: tg.Tensor, want: torch.Tensor, tol: tuple[float, float], what: str) -> None:
    w = want.detach().numpy()
    g = got.numpy()
    assert g.shape == w.shape, f"{what}: shape {g.shape}, PyTorch {w.shape}"
    assert g.dtype == w.dtype, f"{what}: dtype {g.dtype}, PyTorch {w.dtype}"
    np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1], equal_nan=True, err_msg=what)


def _forward_cases() -> list:
    return [pytest.param(s, d, id=f"{s.name}-{d}") for s in SPECS for d in s.dtypes]


def _ids(specs: list[Spec]) -> list[str]:
    return [s.name for s in specs]


GRAD_SPECS = [s for s in SPECS if F64 in s.dtypes]
CHECK_SPECS = [s for s in GRAD_SPECS if s.order > 0]


@pytest.mark.parametrize(("spec", "dtype"), _forward_cases())
def test_forward_matches_torch(spec: Spec, dtype: str) -> None:
    arrays = spec.inputs(dtype)
    got = spec.fn(*[tg.tensor(a) for a in arrays])
    want = spec.ref(*[torch.from_numpy(a.copy()) for a in arrays])
    tol = spec.tol64 if dtype == F64 else spec.tol32
    if dtype not in ("float32", "float64"):
        tol = (0.0, 0.0) if _np_dtype(want).kind in "biu" else spec.tol32
    _assert_close(got, want, tol, f"{spec.name} forward in {dtype}")


@pytest.mark.parametrize("spec", GRAD_SPECS, ids=_ids(GRAD_SPECS))
def test_gradient_matches_torch(spec: Spec) -> None:
    arrays = spec.inputs(F64)
    diff = spec.diff(arrays)
    xs = [tg.tensor(a) for a in arrays]
    with tg.Tape() as tape:
        tape.watch(*[xs[i] for i in diff])
        y = spec.fn(*xs)
    cot = np.random.default_rng(1).standard_normal(y.shape)
    grads = tape.gradient(y, [xs[i] for i in diff], output_gradients=tg.tensor(cot))

    ts = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    ty = spec.ref(*ts)
    want = torch.autograd.grad(ty, [ts[i] for i in diff], torch.from_numpy(cot), allow_unused=True)
    for i, g, w in zip(diff, grads, want, strict=True):
        assert g.shape == xs[i].shape, f"gradient of input {i} has shape {g.shape}"
        w0 = torch.zeros_like(ts[i]) if w is None else w
        _assert_close(g, w0, spec.tol64, f"{spec.name} gradient of input {i}")


@pytest.mark.parametrize("spec", CHECK_SPECS, ids=_ids(CHECK_SPECS))
def test_check_grads(spec: Spec) -> None:
    arrays = spec.inputs(F64)
    rtol, atol = spec.grad_tol
    check_grads(
        spec.fn,
        [tg.tensor(a) for a in arrays],
        order=spec.order,
        eps=spec.eps,
        rtol=rtol,
        atol=atol,
    )


# --- the table covers the registry -----------------------------------------------------------
def _family(name: str) -> str:
    m = re.fullmatch(rf"({'|'.join(ARITY_FAMILIES)})\d*", name)
    return m.group(1) if m else name


def _tested_elsewhere(name: str) -> bool:
    return any(name.startswith(k) if k.endswith(".") else name == k for k in ELSEWHERE)


def _without_row(names) -> list[str]:
    covered = {_family(s.prim) for s in SPECS if s.prim is not None}
    return sorted(n for n in names if _family(n) not in covered and not _tested_elsewhere(_family(n)))


def test_every_primitive_has_a_row() -> None:
    # the engine's doctests register examples ("doc_cube") for the whole process: not ops
    missing = _without_row(n for n in PRIMITIVES if not n.startswith("doc_"))
    assert not missing, (
        f"primitives without a row in tests/op_specs.py: {missing}; add a row (function, torch "
        "reference, domain, shapes) or, if another test file checks it, an ELSEWHERE entry"
    )


def test_the_coverage_check_catches_a_new_primitive() -> None:
    assert _without_row(["exp", "concat7", "einsum4", "nn.anything", "to_device"]) == []
    assert _without_row(["my_new_op", "concatenate_all", "nnx.op"]) == [
        "concatenate_all",
        "my_new_op",
        "nnx.op",
    ]


def test_rows_name_registered_primitives() -> None:
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names)), "row names must be unique"
    for s in GRAD_SPECS:  # running a row registers its per-arity primitive
        s.fn(*[tg.tensor(a) for a in s.inputs(F64)])
    unknown = sorted({s.prim for s in SPECS if s.prim is not None} - set(PRIMITIVES))
    assert not unknown, f"rows name primitives that are not registered: {unknown}"


@pytest.mark.parametrize(
    "spec", [s for s in GRAD_SPECS if s.prim], ids=_ids([s for s in GRAD_SPECS if s.prim])
)
def test_row_records_its_primitive(spec: Spec) -> None:
    arrays = spec.inputs(F64)
    xs = [tg.tensor(a) for a in arrays]
    with tg.Tape() as tape:
        tape.watch(*[xs[i] for i in spec.diff(arrays)])
        spec.fn(*xs)
    recorded = {n.prim.name for n in tape.nodes}
    assert spec.prim in recorded, f"{spec.name} recorded {sorted(recorded)}, not {spec.prim}"


# --- erf: the kernel itself ------------------------------------------------------------------
def test_erf_kernel_is_float64_accurate() -> None:
    x = np.concatenate(
        [
            np.linspace(-7, 7, 20001),
            np.geomspace(1e-300, 30, 2000),
            -np.geomspace(1e-300, 30, 2000),
            [0.46875, 0.46875 + 1e-15, 4.0, 4.0 + 1e-14, 6.0, 27.0, 1e300],
        ]
    )
    want = np.array([math.erf(v) for v in x])
    got = _special.erf(x)
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert rel.max() < 1e-15


def test_erf_kernel_special_values_and_dtypes() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan] + [0.3] * 40)  # above the loop size
    got = _special.erf(x)
    assert got[0] == 0.0 and not np.signbit(got[0]) and np.signbit(got[1])
    assert got[2] == 1.0 and got[3] == -1.0 and np.isnan(got[4])
    small = np.array([np.nan, -np.inf, 0.5])  # the per-element path for tiny arrays
    np.testing.assert_array_equal(np.isnan(_special.erf(small)), [True, False, False])
    x32 = np.linspace(-3, 3, 101, dtype=np.float32)
    out = _special.erf(x32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, torch.erf(torch.from_numpy(x32)).numpy(), rtol=2e-7, atol=1e-7)
    assert _special.erf(np.float64(0.5)) == pytest.approx(math.erf(0.5), rel=1e-15)


# --- documented semantics --------------------------------------------------------------------
def test_amax_ties_split_the_gradient_evenly() -> None:
    x = tg.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.amax(x, axis=1).sum()
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [[0, 0.5, 0.5], [1 / 3] * 3])


def test_maximum_tie_gives_half_to_each_side() -> None:
    x, y = tg.tensor([1.0, 2.0]), tg.tensor([1.0, 0.0])
    with tg.Tape() as tape:
        tape.watch(x, y)
        z = tg.maximum(x, y).sum()
    gx, gy = tape.gradient(z, [x, y])
    assert gx.tolist() == [0.5, 1.0] and gy.tolist() == [0.5, 0.0]


def test_softmax_stable_under_a_large_shift() -> None:
    x = tg.randn(4, 10)
    for f in (tg.softmax, tg.log_softmax):
        np.testing.assert_allclose(f(x + 1e4).numpy(), f(x).numpy(), rtol=1e-3, atol=1e-3)
        assert np.isfinite(f(x * 1e4).numpy()).all()


def test_norm_gradient_at_zero_is_zero() -> None:
    x = tg.zeros(3, dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(x)
        n = tg.norm(x)
    assert tape.gradient(n, x).tolist() == [0.0, 0.0, 0.0]


def test_elementwise_ops_on_large_inputs_stay_finite() -> None:
    x = tg.tensor([-800.0, -50.0, 0.0, 50.0, 800.0], dtype=tg.float64)
    for f in (tg.sigmoid, tg.softplus, tg.silu, tg.tanh, tg.gelu, tg.erf):
        assert np.isfinite(f(x).numpy()).all(), f.__name__
        assert np.isfinite(f(x.astype(tg.float32)).numpy()).all(), f.__name__


# --- ops without gradients: against PyTorch ---------------------------------------------------
def test_tests_and_logic_match_torch() -> None:
    a = np.array([1.0, np.nan, np.inf, -np.inf, 0.0])
    x, t = tg.tensor(a), torch.from_numpy(a)
    for f, ref in ((tg.isnan, torch.isnan), (tg.isfinite, torch.isfinite), (tg.isinf, torch.isinf)):
        assert f(x).dtype == tg.bool_ and f(x).tolist() == ref(t).tolist()
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    tp, tq = torch.from_numpy(p), torch.from_numpy(q)
    for f, ref in (
        (tg.logical_and, torch.logical_and),
        (tg.logical_or, torch.logical_or),
        (tg.logical_xor, torch.logical_xor),
    ):
        assert f(tg.tensor(p), tg.tensor(q)).tolist() == ref(tp, tq).tolist()
    assert tg.logical_not(tg.tensor(p)).tolist() == torch.logical_not(tp).tolist()
    assert tg.logical_and(tg.tensor([2, 0]), 1).tolist() == [True, False]


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_argmin_all_any_match_torch(axis, keepdims) -> None:
    a = np.random.default_rng(0).permutation(12).reshape(3, 4).astype(np.float64)
    x, t = tg.tensor(a), torch.from_numpy(a)
    for f, ref in ((tg.argmax, torch.argmax), (tg.argmin, torch.argmin)):
        got, want = f(x, axis=axis, keepdims=keepdims), ref(t, dim=axis, keepdim=keepdims)
        assert got.dtype == tg.int64 and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    b = a > 5
    dims = {"dim": axis} if axis is not None else {}
    for f, ref in ((tg.all, torch.all), (tg.any, torch.any)):
        got = f(tg.tensor(b), axis=axis, keepdims=keepdims)
        want = (
            ref(torch.from_numpy(b), **dims, keepdim=keepdims)
            if axis is not None
            else ref(torch.from_numpy(b))
        )
        assert got.dtype == tg.bool_
        np.testing.assert_array_equal(got.numpy(), want.numpy().reshape(got.shape))


def test_one_hot_matches_torch() -> None:
    idx = np.array([[0, 2], [1, 1]])
    got = tg.one_hot(tg.tensor(idx), 3)
    assert got.dtype == tg.float32
    np.testing.assert_array_equal(
        got.numpy(), torch.nn.functional.one_hot(torch.from_numpy(idx), 3).numpy()
    )
    assert tg.one_hot(tg.tensor([1]), 2, dtype=tg.int64).tolist() == [[0, 1]]


def test_ops_accept_numpy_arrays_and_python_data() -> None:
    assert tg.exp(np.zeros(2)).tolist() == [1.0, 1.0]
    assert tg.add([1, 2], 3).tolist() == [4, 5]
    assert tg.sum(np.ones((2, 2)), axis=0).tolist() == [2.0, 2.0]
    assert tg.concat([np.ones(1), [2.0]]).tolist() == [1.0, 2.0]
    assert tg.where([True, False], 1.0, 0.0).tolist() == [1.0, 0.0]


# --- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        (lambda: tg.ones((2, 3)) + tg.ones(4), ValueError, ["add", "(2,3)", "(4,)", "broadcast"]),
        (lambda: tg.ones((2, 3)) * tg.ones((3, 2)), ValueError, ["mul", "(2, 3)", "(3, 2)"]),
        (lambda: tg.ones(3) < tg.ones(2), ValueError, ["less", "(3,)", "(2,)"]),
        (lambda: tg.where(tg.ones(3) > 0, tg.ones(2), 0.0), ValueError, ["where", "broadcast"]),
        (
            lambda: tg.ones((32, 784)) @ tg.ones((512, 10)),
            ValueError,
            ["matmul", "(32, 784)", "(512, 10)", "784", "512"],
        ),
        (
            lambda: tg.matmul(tg.ones((2, 2, 3)), tg.ones((3, 3, 4))),
            ValueError,
            ["matmul", "batch"],
        ),
        (lambda: tg.matmul(tg.ones(()), tg.ones(3)), ValueError, ["matmul", "at least 1"]),
        (lambda: tg.ones((2, 3)).reshape(4, 2), ValueError, ["reshape", "(2, 3)", "(4, 2)", "6"]),
        (lambda: tg.ones((2, 3)).reshape(-1, -1), ValueError, ["reshape", "-1"]),
        (lambda: tg.sum(tg.ones((2, 3)), axis=2), IndexError, ["sum", "axis 2", "2 dimensions"]),
        (lambda: tg.softmax(tg.ones((2, 3)), axis=-3), IndexError, ["softmax", "axis -3"]),
        (
            lambda: tg.permute_dims(tg.ones((2, 3)), (0, 0)),
            ValueError,
            ["permute_dims", "permutation"],
        ),
        (lambda: tg.ones((2, 3))[2], IndexError, ["index", "out of bounds", "(2, 3)"]),
        (lambda: tg.ones((2, 3))[:, [0, 3]], IndexError, ["index", "out of bounds", "axis 1"]),
        (lambda: tg.ones((2, 3))[0, 0, 0], IndexError, ["index", "too many"]),
        (lambda: tg.take(tg.ones((2, 3)), [3], axis=1), IndexError, ["take", "index 3", "size 3"]),
        (
            lambda: tg.take_along_axis(tg.ones((2, 3)), tg.tensor([[5]]), axis=1),
            IndexError,
            ["take_along_axis", "5"],
        ),
        (
            lambda: tg.scatter_add(tg.zeros(3), 0, tg.tensor([3]), tg.ones(1)),
            IndexError,
            ["scatter_add", "index 3"],
        ),
        (
            lambda: tg.index_add(tg.zeros(3), 0, tg.tensor([-1]), tg.ones(1)),
            IndexError,
            ["index_add", "-1"],
        ),
        (lambda: tg.one_hot(tg.tensor([0, 4]), 3), IndexError, ["one_hot", "4"]),
        (
            lambda: tg.concat([tg.ones((2, 3)), tg.ones((2, 4))]),
            ValueError,
            ["concat", "(2, 3)", "(2, 4)"],
        ),
        (lambda: tg.stack([tg.ones(2), tg.ones(3)]), ValueError, ["stack", "(2,)", "(3,)"]),
        (lambda: tg.split(tg.ones(5), 2), ValueError, ["split", "5", "2"]),
        (
            lambda: tg.pad(tg.ones((2, 3)), ((1, 1), (1, 1), (1, 1))),
            ValueError,
            ["pad", "pad_width", "(2, 3)"],
        ),
        (
            lambda: tg.pad(tg.ones(3), 3, mode="reflect"),
            ValueError,
            ["pad", "reflect", "symmetric"],
        ),
        (
            lambda: tg.broadcast_to(tg.ones(3), (2, 4)),
            ValueError,
            ["broadcast_to", "(3,)", "(2, 4)"],
        ),
        (lambda: tg.var(tg.ones(1), correction=1), ValueError, ["var", "correction", "freedom"]),
        (
            lambda: tg.einsum("ij,jk->ik", tg.ones((2, 3)), tg.ones((4, 2))),
            ValueError,
            ["einsum", "'j'", "3", "4"],
        ),
        (lambda: tg.einsum("ij->ik", tg.ones((2, 3))), ValueError, ["einsum"]),
        (lambda: tg.amax(tg.ones((0, 3)), axis=0), ValueError, ["amax", "size 0"]),
        (
            lambda: tg.tensordot(tg.ones((2, 3)), tg.ones((2, 3)), 1),
            ValueError,
            ["tensordot", "(2, 3)"],
        ),
        (lambda: tg.gelu(tg.ones(2), approximate="fast"), ValueError, ["gelu", "'fast'"]),
        (lambda: tg.ones(2) & tg.ones(2), TypeError, ["&", "float32", "x > 0"]),
    ],
)
def test_errors_name_the_op_the_shapes_and_the_fix(call, kind, words) -> None:
    with pytest.raises(kind) as info:
        call()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in: {msg}"
