"""numpy's API on Tensors: numpy functions record tapegrad's ops or refuse (no silent
detachment), 0-d results are 0-d arrays, complex input is rejected, and the gradient fixes at
the edges (zero spread, NaN, kinks at 0, empty axes, linspace endpoints)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tapegrad as tg
from tapegrad.testing import check_grads

_rng = np.random.default_rng(0)  # fixed data, drawn once at import; read-only below
X = _rng.uniform(-1, 1, (3, 4))
V = _rng.uniform(-1, 1, (4,))
SQ = _rng.uniform(-1, 1, (3, 3)) + 3 * np.eye(3)
POS = _rng.uniform(0.5, 2, (3, 4))
V3 = _rng.uniform(-1, 1, (2, 3))
del _rng
for _a in (X, V, SQ, POS, V3):
    _a.setflags(write=False)  # a test that wrote into one would change the next test's input


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


# (name, numpy call) on arrays / tensors alike: every numpy function tapegrad has, by numpy
CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("sum", np.sum, (X,)),
    ("sum/axis", lambda x: np.sum(x, axis=0, keepdims=True), (X,)),
    ("mean", lambda x: np.mean(x, axis=1), (X,)),
    ("var/ddof", lambda x: np.var(x, axis=1, ddof=1), (X,)),
    ("std/ddof", lambda x: np.std(x, ddof=1), (X,)),
    ("prod", lambda x: np.prod(x, axis=0), (X,)),
    ("max", lambda x: np.max(x, axis=1), (X,)),
    ("min", np.min, (X,)),
    ("amax", lambda x: np.amax(x, axis=0), (X,)),
    ("amin", lambda x: np.amin(x, axis=0), (X,)),
    ("cumsum", lambda x: np.cumsum(x, axis=1), (X,)),
    ("cumsum/flat", np.cumsum, (X,)),
    ("cumprod", lambda x: np.cumprod(x, axis=0), (X,)),
    ("clip", lambda x: np.clip(x, -0.5, 0.5), (X,)),
    ("clip/a_min", lambda x: np.clip(x, a_min=-0.5, a_max=0.5), (X,)),
    ("where", lambda x: np.where(x > 0, x, 0.0), (X,)),
    ("reshape", lambda x: np.reshape(x, (4, 3)), (X,)),
    ("reshape/shape", lambda x: np.reshape(x, shape=(2, 6)), (X,)),
    ("ravel", np.ravel, (X,)),
    ("squeeze", lambda x: np.squeeze(x[None]), (X,)),
    ("expand_dims", lambda x: np.expand_dims(x, 1), (X,)),
    ("transpose", np.transpose, (X,)),
    ("transpose/permute_dims", lambda x: np.permute_dims(x, (1, 0)), (X,)),
    ("concatenate/concat", lambda x, y: np.concat([x, y]), (X, X)),
    ("round/around", lambda x: np.around(x * 10, 1) + x, (X,)),
    ("astype", lambda x: np.astype(x, np.float32) * 1.0, (X,)),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 1), (X,)),
    ("moveaxis", lambda x: np.moveaxis(x, 0, -1), (X,)),
    ("broadcast_to", lambda v: np.broadcast_to(v, (3, 4)), (V,)),
    ("concatenate", lambda x, y: np.concatenate([x, y], axis=1), (X, X)),
    ("stack", lambda x, y: np.stack([x, y]), (X, X)),
    ("vstack", lambda x, v: np.vstack([x, v]), (X, V)),
    ("hstack", lambda x, y: np.hstack([x, y]), (X, X)),
    ("column_stack", lambda x, y: np.column_stack([x, y]), (X, X)),
    ("dstack", lambda x, y: np.dstack([x, y]), (X, X)),
    ("split", lambda x: np.split(x, 2, axis=1), (X,)),
    ("array_split", lambda x: np.array_split(x, 3, axis=1), (X,)),
    ("hsplit", lambda x: np.hsplit(x, [1, 3]), (X,)),
    ("vsplit", lambda x: np.vsplit(x, 3), (X,)),
    ("dsplit", lambda x: np.dsplit(x[None], 2), (X,)),
    ("append", np.append, (X, V)),
    ("append/axis", lambda x, v: np.append(x, v[None], axis=0), (X, V)),
    ("flip", lambda x: np.flip(x, 1), (X,)),
    ("flipud", np.flipud, (X,)),
    ("fliplr", np.fliplr, (X,)),
    ("rot90", lambda x: np.rot90(x, 3), (X,)),
    ("rollaxis", lambda x: np.rollaxis(x[None], 2, 1), (X,)),
    ("roll", lambda x: np.roll(x, 1, axis=1), (X,)),
    ("tril", lambda x: np.tril(x, k=1), (X,)),
    ("triu", np.triu, (X,)),
    ("repeat", lambda x: np.repeat(x, 2, axis=0), (X,)),
    ("tile", lambda x: np.tile(x, (2, 1)), (X,)),
    ("take", lambda x: np.take(x, [0, 2], axis=1), (X,)),
    ("take_along_axis", lambda x: np.take_along_axis(x, np.argsort(x, 1), 1), (X,)),
    ("matmul", np.matmul, (X, V)),
    ("einsum", lambda x, y: np.einsum("ij,kj->ik", x, y), (X, X)),
    ("tensordot", lambda x, y: np.tensordot(x, y, axes=([1], [1])), (X, X)),
    ("dot", np.dot, (X, V)),
    ("vdot", np.vdot, (X, X)),
    ("inner", np.inner, (X, X)),
    ("outer", np.outer, (V, V)),
    ("kron", np.kron, (X, SQ)),
    ("cross", np.cross, (V3, V3[::-1])),
    ("trace", np.trace, (SQ,)),
    ("diag", lambda v: np.diag(v, 1), (V,)),
    ("diag/2d", np.diag, (SQ,)),
    ("diagonal", lambda x: np.diagonal(x, 1), (X,)),
    ("sort", np.sort, (X,)),
    ("sort/none", lambda x: np.sort(x, axis=None), (X,)),
    ("partition", lambda x: np.partition(x, 2, axis=1)[:, 2], (X,)),
    ("diff", lambda x: np.diff(x, 2), (X,)),
    ("select", lambda x: np.select([x > 0.5, x < -0.5], [x, 2 * x], 0.0), (X,)),
    ("atleast_1d", lambda x: np.atleast_1d(x.sum()), (X,)),
    ("atleast_2d", np.atleast_2d, (V,)),
    ("atleast_3d", np.atleast_3d, (X,)),
    ("nan_to_num", lambda x: np.nan_to_num(x, nan=1.0), (X,)),
    ("round", lambda x: np.round(x * 10, 1) + x, (X,)),
    ("sinc", np.sinc, (X,)),
    ("linspace", lambda a, b: np.linspace(a.sum(), b.sum(), 5), (X, SQ)),
    ("var", lambda x: np.var(x, axis=0), (X,)),  # numpy's ddof=0 when not given
    ("std", np.std, (X,)),
    ("einsum/interleaved", lambda x, y: np.einsum(x, [0, 1], y, [2, 1], [0, 2]), (X, X)),
    ("cross/axisa", lambda x, y: np.cross(x, y, axisa=0, axisc=0), (SQ, V3[:1])),
    ("trace/offset", lambda x: np.trace(x, offset=1), (X,)),
    ("real", np.real, (X,)),
    ("real_if_close", np.real_if_close, (X,)),
    ("gradient", lambda x: np.gradient(x, 0.5), (X,)),
    ("gradient/axis", lambda x: np.gradient(x, axis=1), (X,)),
    ("row_stack", lambda x, v: np.vstack([x, v], casting="same_kind"), (X, V)),
    ("ufunc/conjugate", np.conjugate, (X,)),
    ("ufunc/degrees", np.degrees, (X,)),
    ("linalg.eigh/UPLO", lambda a: np.linalg.eigh(a, "U")[0], (SQ,)),  # SQ is not symmetric
    ("linalg.eigh/lower", lambda a: np.linalg.eigh(a)[0], (SQ,)),
    ("linalg.eig", lambda a: np.linalg.eig(a @ a.T)[0], (SQ,)),  # symmetric: real eigenvalues
    ("linalg.norm", np.linalg.norm, (X,)),
    ("linalg.norm/ord", lambda x: np.linalg.norm(x, ord=1, axis=1), (X,)),
    ("linalg.inv", np.linalg.inv, (SQ,)),
    ("linalg.solve", lambda a, v: np.linalg.solve(a, v[:3]), (SQ, V)),
    ("linalg.det", np.linalg.det, (SQ,)),
    ("linalg.slogdet", lambda a: np.linalg.slogdet(a)[1], (SQ,)),
    ("linalg.cholesky", lambda a: np.linalg.cholesky(a @ a.T), (SQ,)),
    ("linalg.eigh", lambda a: np.linalg.eigh(a + a.T)[0], (SQ,)),
    ("linalg.qr", lambda x: np.abs(np.linalg.qr(x.T)[1]), (X,)),
    ("linalg.svd", lambda x: np.linalg.svd(x, compute_uv=False), (X,)),
    ("linalg.pinv", np.linalg.pinv, (X,)),
    ("linalg.matrix_power", lambda a: np.linalg.matrix_power(a, 3), (SQ,)),
    # ufuncs (__array_ufunc__), and operators with an array on the left
    ("ufunc/exp", np.exp, (X,)),
    ("ufunc/log", np.log, (POS,)),
    ("ufunc/add", np.add, (X, X)),
    ("ufunc/power", lambda x: np.power(x, 3), (X,)),
    ("ufunc/sqrt", np.sqrt, (POS,)),
    ("ufunc/arctan2", np.arctan2, (X, POS)),
    ("ufunc/hypot", np.hypot, (X, POS)),
    ("ufunc/logaddexp", np.logaddexp, (X, POS)),
    ("ufunc/logaddexp2", np.logaddexp2, (X, POS)),
    ("ufunc/maximum", lambda x: np.maximum(x, 0.1), (X,)),
    ("ufunc/fmax", np.fmax, (X, POS)),
    ("ufunc/fmin", np.fmin, (X, POS)),
    ("ufunc/abs", np.abs, (X,)),
    ("ufunc/fabs", np.fabs, (X,)),
    ("ufunc/negative", np.negative, (X,)),
    ("ufunc/square", np.square, (X,)),
    ("ufunc/sinh", np.sinh, (X,)),
    ("ufunc/cosh", np.cosh, (X,)),
    ("ufunc/arcsin", lambda x: np.arcsin(x * 0.9), (X,)),
    ("ufunc/arccos", lambda x: np.arccos(x * 0.9), (X,)),
    ("ufunc/arctan", np.arctan, (X,)),
    ("ufunc/arcsinh", np.arcsinh, (X,)),
    ("ufunc/arccosh", lambda x: np.arccosh(x + 2), (POS,)),
    ("ufunc/arctanh", lambda x: np.arctanh(x * 0.9), (X,)),
    ("ufunc/exp2", np.exp2, (X,)),
    ("ufunc/deg2rad", np.deg2rad, (X,)),
    ("ufunc/rad2deg", np.rad2deg, (X,)),
    ("ufunc/matmul", lambda x, y: np.matmul(x, y.T), (X, X)),
    ("ufunc/add.reduce", lambda x: np.add.reduce(x, axis=1), (X,)),
    ("ufunc/multiply.reduce", np.multiply.reduce, (X,)),
    ("ufunc/maximum.reduce", lambda x: np.maximum.reduce(x, axis=0), (X,)),
    ("ufunc/add.accumulate", lambda x: np.add.accumulate(x, axis=1), (X,)),
    ("operator/array-left", lambda x: X * x + X, (X,)),
    ("operator/scalar-left", lambda x: np.float64(2.0) ** x, (X,)),
]


@pytest.mark.parametrize(("name", "call", "arrays"), CASES, ids=[c[0] for c in CASES])
def test_numpy_functions_record_tapegrad_ops(name: str, call: Callable, arrays: tuple) -> None:
    want = _flat(call(*arrays))
    xs = [tg.tensor(a) for a in arrays]
    with tg.Tape() as tape:
        tape.watch(*xs)
        got = _flat(call(*xs))
        total = sum((g.sum() for g in got), tg.tensor(0.0, dtype=tg.float64))
    assert len(got) == len(want), name
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, tg.Tensor), f"numpy.{name} on a Tensor returned {type(g).__name__}"
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-12, atol=1e-12)
    # the result stays on the tape: the gradient reaches the inputs
    grads = tape.gradient(total, xs)
    assert all(g.shape == x.shape for g, x in zip(grads, xs, strict=True))
    assert any(np.any(g.numpy() != 0) for g in grads), f"numpy.{name}: zero gradient"


# numpy functions whose results have no gradient (indices, bools, new constants)
CONSTANT_CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("all", lambda x: np.all(x > 0, axis=1), (X,)),
    ("any", lambda x: np.any(x > 0), (X,)),
    ("argmax", lambda x: np.argmax(x, axis=1), (X,)),
    ("argmin", np.argmin, (X,)),
    ("zeros_like", np.zeros_like, (X,)),
    ("ones_like", np.ones_like, (X,)),
    ("full_like", lambda x: np.full_like(x, 2.5), (X,)),
    ("empty_like", lambda x: np.empty_like(x).shape, (X,)),
    ("imag", np.imag, (X,)),
    ("angle", np.angle, (X,)),
]
# spellings whose case above goes by another name
ALSO = {"permute_dims": "transpose", "concat": "concatenate", "around": "round",
        "trace": "trace"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "call", "arrays"), CONSTANT_CASES, ids=[c[0] for c in CONSTANT_CASES]
)
def test_numpy_functions_without_gradients_return_tensors(
    name: str, call: Callable, arrays: tuple
) -> None:
    got, want = call(*[tg.tensor(a) for a in arrays]), call(*arrays)
    if isinstance(want, tuple):
        assert got == want
        return
    assert isinstance(got, tg.Tensor), f"numpy.{name} on a Tensor returned {type(got).__name__}"
    np.testing.assert_array_equal(got.numpy(), want)


def test_every_numpy_function_tapegrad_runs_has_a_case() -> None:
    from tapegrad import _numpy_api  # noqa: PLC0415

    cases = {c[0].split("/")[0] for c in CASES + CONSTANT_CASES}
    value_fns = {getattr(np, n) for n in _numpy_api._VALUES if hasattr(np, n)}
    missing = []
    for f in _numpy_api._table():
        if isinstance(f, np.ufunc) or f in value_fns:
            continue  # ufuncs have their own cases; value functions are tested below
        name = ("linalg." if "linalg" in (f.__module__ or "") else "") + f.__name__
        if name not in cases and ALSO.get(name) not in cases:
            missing.append(name)
    assert not missing, f"numpy functions dispatched to tapegrad without a case: {missing}"


def test_numpy_dot_gradient_is_the_product_rule() -> None:
    x = tg.tensor([1.0, 2.0], dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(x)
        y = (np.dot(x, x) * x).sum()
    assert tape.gradient(y, x).tolist() == [11.0, 17.0]  # d/dx (x.x) sum(x) = 2x sum + x.x


def test_numpy_array_gradient_through_numpy_calls_matches_torch() -> None:
    a = np.random.default_rng(1).uniform(-1, 1, (3, 3)) + 3 * np.eye(3)
    x = tg.tensor(a)
    with tg.Tape() as tape:
        tape.watch(x)
        y = np.sum(np.linalg.inv(x) @ np.sinh(x)) + np.linalg.slogdet(x)[1]
    g = tape.gradient(y, x)
    t = torch.tensor(a, requires_grad=True)
    ty = torch.sum(torch.linalg.inv(t) @ torch.sinh(t)) + torch.linalg.slogdet(t)[1]
    ty.backward()
    np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        np.median,
        lambda x: np.percentile(x, 50),
        np.unique,
        lambda x: np.convolve(x[0], x[1]),
        np.fft.fft,
        lambda x: np.interp(x, [0, 1], [0, 1]),
        lambda x: np.linalg.eigvals(x[:, :3]),
        lambda x: np.add.at(x, [0], 1.0),
    ],
    ids=["median", "percentile", "unique", "convolve", "fft", "interp", "eigvals", "ufunc.at"],
)
def test_numpy_functions_tapegrad_lacks_raise_instead_of_detaching(call: Callable) -> None:
    x = tg.tensor(X)
    with pytest.raises(TypeError, match=r"numpy\.\S+.*(leave the tape|detach)"):
        call(x)


def test_numpy_array_of_taped_tensors_raises_and_names_stack() -> None:
    x = tg.tensor([1.0, 2.0])
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * 2
        with pytest.raises(TypeError, match=r"tg\.stack.*detach\(\)\.numpy\(\)"):
            np.array([y, y])
        with pytest.raises(TypeError, match="recording tape"):
            np.asarray(x)
        assert np.asarray(y.detach()).tolist() == [2.0, 4.0]  # leaving on purpose works
    assert np.array([y, y]).shape == (2, 2)  # once the tape stops, numpy may read it


def test_trainable_parameter_inside_a_tape_is_not_read_by_numpy() -> None:
    w = tg.Parameter(tg.ones(2))
    assert np.asarray(w).tolist() == [1.0, 1.0]
    with tg.Tape(), pytest.raises(TypeError, match="recording tape"):
        np.asarray(w)


def test_zero_d_results_are_zero_d_arrays() -> None:
    x = tg.tensor([1.0, 2.0], dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(x)
        loss = (x * x).sum()
    a = np.asarray(loss)
    assert type(a) is np.ndarray and a.shape == () and a == 5.0
    assert type(loss.numpy()) is np.ndarray
    assert float(loss) == 5.0 and np.allclose(loss, 5.0)
    assert isinstance(np.sum(x), tg.Tensor) and np.sum(x).item() == 3.0


def test_out_and_where_arguments_are_refused_with_the_fix() -> None:
    x = tg.tensor(X)
    with pytest.raises(TypeError, match="out=.*assign the result"):
        np.exp(x, out=np.empty((3, 4)))
    with pytest.raises(TypeError, match="out=.*assign the result"):
        np.sum(x, out=np.empty(()))
    with pytest.raises(TypeError, match="where=.*tg.where"):
        np.add(x, 1.0, where=X > 0)


def test_value_functions_run_on_values() -> None:
    x = tg.tensor(X)
    assert np.shape(x) == (3, 4) and np.ndim(x) == 2 and np.size(x) == 12
    assert np.allclose(x, X) and np.array_equal(x, x)
    assert np.argsort(x, axis=1).tolist() == np.argsort(X, axis=1).tolist()
    assert np.count_nonzero(x > 0) == np.count_nonzero(X > 0)


def test_numpy_split_keeps_numpy_semantics() -> None:
    with pytest.raises(ValueError, match="equal"):
        np.split(tg.arange(5), 2)
    assert [t.tolist() for t in np.split(tg.arange(6), [1, 4])] == [[0], [1, 2, 3], [4, 5]]


# --- complex input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda: tg.tensor([1 + 2j]),
        lambda: tg.tensor(np.ones(2, dtype=np.complex64)),
        lambda: tg.exp(np.ones(2) * 1j),
        lambda: tg.tensor([1.0]) + np.ones(1) * 1j,
        lambda: tg.abs(np.array([3 + 4j])),
    ],
)
def test_complex_input_is_rejected_with_the_fix(call: Callable) -> None:
    with pytest.raises(TypeError, match=r"complex dtype complex\d+ is not supported.*a\.real"):
        call()


# --- gradient fixes at the edges -----------------------------------------------------------------
def _grad(f: Callable, a: np.ndarray) -> np.ndarray:
    x = tg.tensor(a)
    with tg.Tape() as tape:
        tape.watch(x)
        y = f(x).sum()
    return tape.gradient(y, x).numpy()


def _torch_grad(f: Callable, a: np.ndarray) -> np.ndarray:
    t = torch.tensor(a, requires_grad=True)
    f(t).sum().backward()
    return t.grad.numpy()


@pytest.mark.parametrize(
    ("f", "ft", "a"),
    [
        (lambda x: tg.std(x, ddof=0), lambda t: t.std(correction=0), np.ones(3)),
        (lambda x: tg.std(x, axis=1, ddof=0), lambda t: t.std(dim=1, correction=0), X[:, :1].copy()),
        (lambda x: tg.std(x, axis=1, ddof=1), lambda t: t.std(dim=1), np.ones((2, 3))),
        (lambda x: tg.var(x, axis=1, ddof=0), lambda t: t.var(dim=1, correction=0), X[:, :1].copy()),
        (lambda x: tg.std(x, axis=0, ddof=0), lambda t: t.std(dim=0, correction=0), X),
    ],
    ids=["std-equal", "std-size-1", "std-ddof-equal", "var-size-1", "std-regular"],
)
def test_std_var_with_zero_spread_match_torch(f: Callable, ft: Callable, a: np.ndarray) -> None:
    g = _grad(f, a)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, _torch_grad(ft, a), rtol=1e-10, atol=1e-12)


def test_std_ddof_dim_keepdim_match_torch() -> None:
    got = tg.std(tg.tensor(X), dim=1, keepdim=True, ddof=1)
    np.testing.assert_allclose(got.numpy(), torch.tensor(X).std(dim=1, keepdim=True).numpy())
    check_grads(lambda x: tg.std(x, axis=1, ddof=1), [tg.tensor(X)])


@pytest.mark.parametrize(
    ("f", "ft"),
    [
        (tg.elu, TF.elu),
        (tg.nn.functional.selu, TF.selu),
        (lambda x: tg.nn.functional.celu(x, 0.5), lambda t: TF.celu(t, 0.5)),
        (lambda x: tg.elu(x, 2.0), lambda t: TF.elu(t, 2.0)),
    ],
    ids=["elu", "selu", "celu", "elu-alpha"],
)
def test_elu_family_gradient_at_zero_matches_torch(f: Callable, ft: Callable) -> None:
    a = np.array([-1.0, 0.0, 1.0])
    np.testing.assert_allclose(_grad(f, a), _torch_grad(ft, a), rtol=1e-12)


def test_clip_keeps_nan_and_matches_torch() -> None:
    a = np.array([np.nan, -2.0, 0.5, 3.0])
    out = tg.clip(tg.tensor(a), -1.0, 1.0)
    assert np.isnan(out.numpy()[0]) and out.numpy()[1:].tolist() == [-1.0, 0.5, 1.0]
    want = _torch_grad(lambda t: t.clamp(-1.0, 1.0), a)
    np.testing.assert_array_equal(_grad(lambda x: tg.clip(x, a_min=-1.0, a_max=1.0), a), want)
    assert np.isnan(np.clip(tg.tensor(a), -1, 1).numpy()[0])


@pytest.mark.parametrize("f", [tg.softmax, tg.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis(f: Callable) -> None:
    x = tg.zeros((2, 0), dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(x)
        y = f(x, axis=1)
        total = y.sum()
    assert y.shape == (2, 0)
    assert tape.gradient(total, x).shape == (2, 0)
    assert f(tg.zeros((0, 3)), axis=1).shape == (0, 3)


def test_atan2_at_the_origin_follows_torch() -> None:
    y, x = tg.tensor(0.0, dtype=tg.float64), tg.tensor(0.0, dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(y, x)
        out = tg.atan2(y, x)
    gy, gx = tape.gradient(out, [y, x])
    ty = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    tx = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    torch.atan2(ty, tx).backward()
    assert (gy.item(), gx.item()) == (ty.grad.item(), tx.grad.item()) == (0.0, 0.0)
    check_grads(tg.atan2, [tg.tensor(X), tg.tensor(POS)])


def test_linspace_endpoints_are_differentiable() -> None:
    s, e = tg.tensor(0.5, dtype=tg.float64), tg.tensor(2.0, dtype=tg.float64)
    y = tg.linspace(s, e, 7)
    np.testing.assert_array_equal(y.numpy(), np.linspace(0.5, 2.0, 7))
    w = tg.arange(7, dtype=tg.float64)
    with tg.Tape() as tape:
        tape.watch(s, e)
        out = (tg.linspace(s, e, 7) * w).sum()
    gs, ge = tape.gradient(out, [s, e])
    i = np.arange(7)
    assert np.isclose(gs.item(), np.sum(i * (1 - i / 6))) and np.isclose(ge.item(), np.sum(i * i / 6))
    check_grads(lambda a, b: tg.linspace(a, b, 5, endpoint=False), [s, e])


# --- first and second order of the new functions not in the op table -------------------------------
@pytest.mark.parametrize(
    ("f", "args"),
    [
        (lambda x: tg.sort(x, axis=0), (X,)),
        (lambda x: tg.partition(x, 1, axis=1)[:, 1], (X,)),
        (lambda x: tg.select([x > 0.5, x < -0.5], [x * x, x], 1.0), (X,)),
        (lambda x: tg.linalg.norm(x, -np.inf, axis=1), (X,)),
        (lambda x: tg.linalg.norm(x, -1, axis=(0, 1)), (X,)),
        (lambda x: tg.linalg.norm(x, -2, axis=(0, 1)), (X,)),
        (lambda x: tg.linalg.norm(x, 0.5, axis=0), (POS,)),
        (lambda a: tg.linalg.det(a) * tg.linalg.inv(a), (SQ,)),
        (lambda a: tg.linalg.solve(a, tg.linalg.cholesky(a @ a.T)), (SQ,)),
        (lambda x: tg.hstack(tg.array_split(x, 3, axis=1)[::-1]), (X,)),
        (lambda x: tg.rollaxis(tg.atleast_3d(x), 2), (X,)),
    ],
    ids=["sort", "partition", "select", "norm-neg-inf", "norm-neg-1", "norm-neg-2", "norm-half",
         "det-inv", "solve-cholesky", "array_split", "rollaxis"],
)  # fmt: skip
def test_check_grads_second_order(f: Callable, args: tuple) -> None:
    check_grads(f, [tg.tensor(a) for a in args])


def test_linalg_norm_matches_numpy_for_every_ord() -> None:
    for ord_ in [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]:
        got = tg.linalg.norm(tg.tensor(X), ord_)
        np.testing.assert_allclose(got.numpy(), np.linalg.norm(X, ord_), rtol=1e-12)
    for ord_ in [None, 0, 1, -1, 2, 3, 0.5, np.inf, -np.inf]:
        got = tg.linalg.norm(tg.tensor(X), ord_, axis=1, keepdims=True)
        want = np.linalg.norm(X, ord_, axis=1, keepdims=True)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_matrix_trace_does_not_collide_with_the_tape_trace() -> None:
    assert tg.matrix_trace(tg.tensor(SQ)).item() == pytest.approx(np.trace(SQ))
    assert tg.linalg.trace(tg.tensor(SQ)).item() == pytest.approx(np.trace(SQ))
    assert np.trace(tg.tensor(X), 1).item() == pytest.approx(np.trace(X, 1))


def test_linalg_errors_name_the_function_and_shape() -> None:
    with pytest.raises(ValueError, match=r"linalg\.inv: needs square matrices.*\(3, 4\)"):
        tg.linalg.inv(tg.tensor(X))
    with pytest.raises(ValueError, match=r"linalg\.svd: full_matrices=True.*full_matrices=False"):
        tg.linalg.svd(tg.tensor(X))
    with pytest.raises(ValueError, match=r"cross: needs vectors of length 3"):
        tg.cross(tg.tensor(X), tg.tensor(X))


# --- floating-point warnings ---------------------------------------------------------------------
def test_kernels_do_not_warn_on_inf_and_nan_results() -> None:
    # the suite runs with warnings as errors: any numpy RuntimeWarning here fails the test
    mask = tg.log(tg.tril(tg.ones((3, 3), dtype=tg.float64)))  # the additive causal mask
    assert np.isneginf(mask.numpy()[0, 1]) and mask.numpy()[1, 0] == 0.0
    x = tg.tensor([0.0, 1.0, -1.0], dtype=tg.float64)
    assert np.isinf(tg.arctanh(tg.tensor([1.0])).item())
    for f in (tg.log, tg.sqrt, tg.reciprocal, tg.rsqrt, lambda t: t**0.5):
        with tg.Tape() as tape:
            tape.watch(x)
            y = f(x)
        g = tape.gradient(y, x, output_gradients=tg.ones_like(x)).numpy()
        assert not np.isfinite(g[0])
    assert np.isnan(tg.softmax(tg.tensor([[-np.inf, -np.inf]]), axis=1).numpy()).all()


def test_fp_warnings_come_back_when_asked_for() -> None:
    prev = tg.set_fp_warnings(True)
    try:
        with pytest.warns(RuntimeWarning, match="divide by zero"):
            tg.log(tg.tensor([0.0]))
    finally:
        tg.set_fp_warnings(prev)
    assert prev is False


def test_bitwise_operators_with_an_array_on_the_left() -> None:
    a, t = np.array([True, True, False]), tg.tensor([True, False, False])
    assert (a & t).tolist() == [True, False, False] and (a | t).tolist() == [True, True, False]
    assert (a ^ t).tolist() == [False, True, False] and np.invert(t).tolist() == [False, True, True]
    assert (np.array([3, 5]) & tg.tensor([1, 4])).tolist() == [1, 4]


def test_singular_values_and_eigenvalues_alone_have_gradients_when_repeated() -> None:
    a = np.diag([2.0, 2.0, 1.0])[:, :2] + 0.0  # (3, 2) with equal singular values
    x = tg.tensor(a)
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.linalg.svd(x, compute_uv=False).sum()
    t = torch.tensor(a, requires_grad=True)
    torch.linalg.svdvals(t).sum().backward()
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), t.grad.numpy(), atol=1e-12)
    s = np.diag([1.0, 1.0, 3.0])
    x = tg.tensor(s)
    with tg.Tape() as tape:
        tape.watch(x)
        w = (tg.linalg.eigh(x)[0] * tg.tensor([1.0, 1.0, 2.0], dtype=tg.float64)).sum()
    t = torch.tensor(s, requires_grad=True)
    (torch.linalg.eigvalsh(t) * torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(tape.gradient(w, x).numpy(), t.grad.numpy(), atol=1e-12)


# --- numpy spellings that HIPS autograd's tests use ---------------------------------------------
def _f64(a: np.ndarray) -> tg.Tensor:
    return tg.tensor(np.asarray(a, dtype=np.float64))


@pytest.mark.parametrize(
    ("f", "ref"),
    [
        (lambda x: tg.r_[x, x], lambda x: np.r_[x, x]),
        (lambda x: tg.r_[x[0], 2.0, 1:4], lambda x: np.r_[x[0], 2.0, 1:4]),
        (lambda x: tg.c_[x, X], lambda x: np.c_[x, X]),
        (lambda x: tg.c_[x[0], x[1]], lambda x: np.c_[x[0], x[1]]),
    ],
)
def test_r_and_c_concatenate_as_numpy_on_the_tape(f: Callable, ref: Callable) -> None:
    np.testing.assert_allclose(f(_f64(X)).numpy(), ref(X))
    check_grads(f, [_f64(X)])


def test_r_refuses_numpy_string_directives() -> None:
    with pytest.raises(TypeError, match="string directives"):
        tg.r_["0,2", tg.ones(2)]


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
def test_gradient_matches_numpy_and_finite_differences(axis: Any) -> None:
    a = np.random.default_rng(1).standard_normal((4, 3, 5))
    got, want = _flat(tg.gradient(_f64(a), axis=axis)), _flat(np.gradient(a, axis=axis))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)
    check_grads(lambda x: tg.stack(_flat(tg.gradient(x, axis=axis))), [_f64(a)])


def test_gradient_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="edge_order=1"):
        tg.gradient(tg.ones(4), axis=0, edge_order=2)
    with pytest.raises(ValueError, match="need 2"):
        tg.gradient(tg.ones((1, 3)), axis=0)


def test_degrees_radians_and_real_parts() -> None:
    x = _f64(X)
    np.testing.assert_allclose(tg.degrees(x).numpy(), np.degrees(X))
    np.testing.assert_allclose(tg.radians(x).numpy(), np.radians(X))
    np.testing.assert_array_equal(tg.angle(x, deg=True).numpy(), np.angle(X, deg=True))
    np.testing.assert_array_equal(tg.conj(x).numpy(), X)
    check_grads(lambda t: tg.degrees(t) + tg.real(t) + tg.imag(t) + tg.angle(t), [x])


def test_einsum_interleaved_form_matches_numpy_and_torch() -> None:
    a = np.random.default_rng(2).standard_normal((2, 3, 4))
    b = np.random.default_rng(3).standard_normal((4, 5))
    got = tg.einsum(_f64(a), [Ellipsis, 0, 1], _f64(b), [1, 2], [Ellipsis, 0, 2])
    np.testing.assert_allclose(got.numpy(), np.einsum(a, [Ellipsis, 0, 1], b, [1, 2]))
    check_grads(lambda x, y: tg.einsum(x, [0, 1, 2], y, [2, 3]), [_f64(a), _f64(b)])
    ta = torch.tensor(a, requires_grad=True)
    torch.einsum(ta, [0, 1, 2], torch.tensor(b), [2, 3]).square().sum().backward()
    g = tg.grad(lambda x: tg.einsum(x, [0, 1, 2], _f64(b), [2, 3]).square().sum())(_f64(a))
    np.testing.assert_allclose(g.numpy(), ta.grad.numpy(), rtol=1e-10)
    with pytest.raises(ValueError, match="sublist"):
        tg.einsum(_f64(b), [0, "j"])


@pytest.mark.parametrize("kw", [{}, {"axisa": 0}, {"axisb": 0, "axisc": 0}, {"axis": 0}])
def test_cross_takes_numpy_axis_arguments(kw: dict) -> None:
    a = np.random.default_rng(4).standard_normal((3, 3))
    b = np.random.default_rng(5).standard_normal((3, 3))
    np.testing.assert_allclose(tg.cross(_f64(a), _f64(b), **kw).numpy(), np.cross(a, b, **kw))
    check_grads(lambda x, y: tg.cross(x, y, **kw), [_f64(a), _f64(b)])


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_reads_one_triangle_as_numpy(uplo: str) -> None:
    a = np.random.default_rng(6).standard_normal((2, 4, 4))  # not symmetric
    w, v = tg.linalg.eigh(_f64(a), uplo)
    ww, vv = np.linalg.eigh(a, uplo)
    np.testing.assert_allclose(w.numpy(), ww, rtol=1e-10)
    np.testing.assert_allclose(np.abs(v.numpy()), np.abs(vv), rtol=1e-8, atol=1e-10)
    check_grads(lambda x: tg.linalg.eigh(x, uplo)[0], [_f64(a)])
    # torch reads the same triangle: the eigenvalues' gradient agrees on it
    ta = torch.tensor(a, requires_grad=True)
    (torch.linalg.eigvalsh(ta, UPLO=uplo) ** 2).sum().backward()
    g = tg.grad(lambda x: (tg.linalg.eigh(x, uplo)[0] ** 2).sum())(_f64(a)).numpy()
    tri = np.tril if uplo == "L" else np.triu
    np.testing.assert_allclose(tri(g), tri(ta.grad.numpy() + np.swapaxes(ta.grad.numpy(), -1, -2)
                               - ta.grad.numpy() * np.eye(4)), rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="UPLO"):
        tg.linalg.eigh(_f64(a), "X")


def test_tensor_ravel_method() -> None:
    x = _f64(X)
    np.testing.assert_array_equal(x.ravel().numpy(), X.ravel())
    check_grads(lambda t: t.ravel() * 2.0, [x])


def test_a_list_of_taped_tensors_given_to_an_op_stays_on_the_tape() -> None:
    x = _f64(V)
    g = tg.grad(lambda t: tg.mean([t[0], t[1] * 2.0, 3.0]))(x)
    tv = torch.tensor(V, requires_grad=True)
    torch.stack([tv[0], tv[1] * 2.0, torch.tensor(3.0, dtype=torch.float64)]).mean().backward()
    np.testing.assert_allclose(g.numpy(), tv.grad.numpy())
    check_grads(lambda t: tg.linalg.norm([t[0], [t[1], t[2]]][1]), [x])


def test_writing_into_a_watched_source_raises_instead_of_a_wrong_gradient() -> None:
    with tg.Tape() as tape:
        x = _f64(V).trace(tape)
        with pytest.raises(TypeError, match="write into a copy"):
            x[1] = 3.0
        y = x * 1.0
        y[1] = 3.0  # an op's output may be written
    g = tape.gradient(y, x, output_gradients=tg.ones(4, dtype=tg.float64))
    assert g.tolist() == [1.0, 0.0, 1.0, 1.0]


def test_check_grads_accepts_a_function_that_ignores_its_input() -> None:
    check_grads(lambda t: tg.tensor(np.ones(3)), [_f64(V)])


def test_eig_of_a_real_spectrum_matches_numpy_and_complex_raises() -> None:
    p = np.random.default_rng(7).uniform(-1, 1, (4, 4)) + 2 * np.eye(4)
    a = p @ (np.array([1.0, 2.5, 4.0, 6.0])[:, None] * np.linalg.inv(p))  # not symmetric
    w, v = np.linalg.eig(_f64(a))
    ww, vv = np.linalg.eig(a)
    np.testing.assert_allclose(w.numpy(), ww, rtol=1e-10)
    np.testing.assert_allclose(v.numpy(), vv, rtol=1e-8, atol=1e-10)
    check_grads(lambda x: tg.linalg.eig(x)[0], [_f64(a)])
    check_grads(lambda x: tg.linalg.eig(x)[1] ** 2, [_f64(a)])
    with pytest.raises(ValueError, match="complex eigenvalues.*eigh"):
        tg.linalg.eig(tg.tensor([[0.0, 1.0], [-1.0, 0.0]]))


def test_numpy_where_with_one_argument_gives_the_indices() -> None:
    c = X > 0
    got, want = np.where(tg.tensor(c)), np.where(c)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w)
    with pytest.raises(ValueError, match="both x and y"):
        np.where(tg.tensor(c), tg.tensor(X))
