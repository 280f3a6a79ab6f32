"""The op table: one row per registered primitive (and per important composition).

Each row names the tapegrad function, its PyTorch reference, the input shapes (broadcasting
included), the input domain (positive for log and sqrt, away from kinks and ties, integer index
arrays), the dtypes its forward is checked in, and tolerances. ``tests/test_ops.py`` runs every
row: forward and gradient against PyTorch in float64, forward in the other dtypes, and
``tapegrad.testing.check_grads`` to second order; it fails when a registered primitive has no
row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as TF

import tapegrad as tg
from tapegrad._autodiff import PRIMITIVES
from tapegrad.ops import _shape as S

Array = np.ndarray
Domain = Callable[[np.random.Generator, tuple[int, ...]], Array]

F64 = "float64"
F32 = "float32"
I64 = "int64"


# --- input domains ---------------------------------------------------------------------------
def real(lo: float = -2.0, hi: float = 2.0) -> Domain:
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def positive(lo: float = 0.5, hi: float = 2.0) -> Domain:
    return real(lo, hi)


def away_from_zero(lo: float = 0.3, hi: float = 2.0) -> Domain:
    """Either sign, |x| in [lo, hi]: keeps finite differences off the kink at 0."""
    return lambda rng, shape: rng.choice([-1.0, 1.0], shape) * rng.uniform(lo, hi, shape)


def off_grid() -> Domain:
    """Integers plus a fraction in [0.15, 0.35]: away from the steps of floor/ceil/round/trunc."""
    return lambda rng, shape: rng.integers(-3, 3, shape) + rng.uniform(0.15, 0.35, shape)


def grid(offset: float) -> Domain:
    """Integers plus ``offset``: two such inputs with offsets 0.25 and 0.75 never tie."""
    return lambda rng, shape: rng.integers(-3, 3, shape) + offset


def distinct(spacing: float = 0.5) -> Domain:
    """All values different by at least ``spacing`` (no ties for max/min)."""

    def f(rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
        n = int(np.prod(shape))
        return (rng.permutation(n) - n / 2).reshape(shape) * spacing + rng.uniform(0, 0.1)

    return f


def with_zeros(*flat_positions: int) -> Domain:
    """Reals with exact zeros at the given flat positions (prod/cumprod's special case)."""

    def f(rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
        a = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        a.reshape(-1)[list(flat_positions)] = 0.0
        return a

    return f


def ints(lo: int, hi: int) -> Domain:
    return lambda rng, shape: rng.integers(lo, hi, shape)


def bools(p: float = 0.5) -> Domain:
    return lambda rng, shape: rng.random(shape) < p


def fixed(values: Any) -> Domain:
    a = np.asarray(values)
    return lambda rng, shape: a.copy()


# --- the row type ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """One row: ``fn(*inputs)`` in tapegrad against ``ref(*inputs)`` in PyTorch.

    ``domains`` has one sampler per input; float inputs are cast to each dtype in ``dtypes``
    (rounded to integers for "int64"), integer and bool inputs are kept as they are and never
    differentiated. ``order`` is the check_grads order (0: no finite-difference check, for
    rows that sit on a kink on purpose, such as ties). ``eps``/``grad_tol`` tune check_grads.
    """

    name: str
    prim: str | None  # the registered primitive this row covers; None for a composition
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    domains: tuple[Domain, ...]
    dtypes: tuple[str, ...] = (F64, F32)
    tol32: tuple[float, float] = (1e-5, 1e-6)  # (rtol, atol) for float32 forwards
    tol64: tuple[float, float] = (1e-10, 1e-12)  # for float64 forwards and gradients
    order: int = 2
    eps: float = 1e-6
    grad_tol: tuple[float, float] = (1e-5, 1e-6)

    def inputs(self, dtype: str, seed: int = 0) -> list[Array]:
        rng = np.random.default_rng(seed)
        out = []
        for shape, dom in zip(self.shapes, self.domains, strict=True):
            a = np.asarray(dom(rng, shape))
            if a.dtype.kind == "f":
                a = np.round(a * 3).astype(np.int64) if dtype == I64 else a.astype(dtype)
            out.append(np.asarray(a))
        return out

    def diff(self, arrays: list[Array]) -> list[int]:
        """The inputs that get gradients: the float ones."""
        return [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]


def row(name: str, prim: str | None, fn: Callable, ref: Callable, *inputs: Any, **kw: Any) -> Spec:
    """``inputs`` are (shape, domain) pairs."""
    shapes = tuple(tuple(s) for s, _ in inputs)
    domains = tuple(d for _, d in inputs)
    return Spec(name, prim, fn, ref, shapes, domains, **kw)


R = real()
P = positive()
NZ = away_from_zero()
A = (3, 4)
B = (2, 3, 4)

SPECS: list[Spec] = []


def add(*specs: Spec) -> None:
    SPECS.extend(specs)


# --- unary elementwise -----------------------------------------------------------------------
_UNARY: list[tuple[str, Callable, Callable, Domain, dict[str, Any]]] = [
    ("neg", tg.neg, torch.neg, R, {"dtypes": (F64, F32, I64)}),
    ("abs", tg.abs, torch.abs, NZ, {"dtypes": (F64, F32, I64)}),
    ("sign", tg.sign, torch.sign, NZ, {"dtypes": (F64, F32, I64)}),
    ("exp", tg.exp, torch.exp, R, {"dtypes": (F64, F32, I64)}),
    ("expm1", tg.expm1, torch.expm1, real(-1e-3, 1), {}),
    ("log", tg.log, torch.log, P, {"dtypes": (F64, F32, I64)}),
    ("log1p", tg.log1p, torch.log1p, real(-0.5, 2), {}),
    ("log2", tg.log2, torch.log2, P, {}),
    ("log10", tg.log10, torch.log10, P, {}),
    ("sqrt", tg.sqrt, torch.sqrt, P, {"dtypes": (F64, F32, I64)}),
    ("rsqrt", tg.rsqrt, torch.rsqrt, P, {}),
    ("square", tg.square, torch.square, R, {"dtypes": (F64, F32, I64)}),
    ("reciprocal", tg.reciprocal, torch.reciprocal, NZ, {}),
    ("sin", tg.sin, torch.sin, R, {}),
    ("cos", tg.cos, torch.cos, R, {}),
    ("tan", tg.tan, torch.tan, real(-1.2, 1.2), {}),
    ("tanh", tg.tanh, torch.tanh, R, {}),
    ("sigmoid", tg.sigmoid, torch.sigmoid, real(-6, 6), {}),
    ("relu", tg.relu, torch.relu, NZ, {"dtypes": (F64, F32, I64)}),
    ("erf", tg.erf, torch.erf, real(-4, 4), {"tol64": (1e-14, 1e-15)}),
    ("floor", tg.floor, torch.floor, off_grid(), {}),
    ("ceil", tg.ceil, torch.ceil, off_grid(), {}),
    ("round", tg.round, torch.round, off_grid(), {}),
    ("trunc", tg.trunc, torch.trunc, off_grid(), {}),
]
for _name, _fn, _ref, _dom, _kw in _UNARY:
    add(row(_name, _name, _fn, _ref, (B, _dom), **_kw))
add(
    row("softplus", "softplus", tg.softplus, TF.softplus, (B, real(-30, 30))),
    row("erf/tails", "erf", tg.erf, torch.erf, ((40,), real(-7, 7)), tol64=(1e-14, 1e-300)),
    row("sigmoid/large", "sigmoid", tg.sigmoid, torch.sigmoid, ((20,), real(-60, 60))),
    row("exp/scalar", "exp", tg.exp, torch.exp, ((), R)),
)

# --- binary elementwise ----------------------------------------------------------------------
_BCAST = [("same", A, A), ("row", A, (4,)), ("col", (3, 1), (1, 4)), ("scalar", A, ())]
for _tag, _sx, _sy in _BCAST:
    add(
        row(f"add/{_tag}", "add", tg.add, torch.add, (_sx, R), (_sy, R), dtypes=(F64, F32, I64)),
        row(f"sub/{_tag}", "sub", tg.subtract, torch.sub, (_sx, R), (_sy, R), dtypes=(F64, F32, I64)),
        row(f"mul/{_tag}", "mul", tg.multiply, torch.mul, (_sx, R), (_sy, R), dtypes=(F64, F32, I64)),
        row(f"div/{_tag}", "div", tg.divide, torch.div, (_sx, R), (_sy, NZ), dtypes=(F64, F32, I64)),
    )
add(
    row("add/3d", "add", tg.add, torch.add, ((2, 1, 4), R), ((3, 1), R)),
    row("pow/tensor", "pow", tg.pow, torch.pow, (A, P), ((4,), R)),
    row("pow/square", "pow", lambda x: x**2, lambda x: x**2, (B, R), dtypes=(F64, F32, I64)),
    row("pow/cube", "pow", lambda x: x**3, lambda x: x**3, (B, R)),
    row("pow/half", "pow", lambda x: x**0.5, lambda x: x**0.5, (B, P)),
    row("pow/neg", "pow", lambda x: x**-1.5, lambda x: x**-1.5, (B, P)),
    row("pow/zero", "pow", lambda x: x**0, lambda x: x**0, (B, R)),
    row("pow/rpow", "pow", lambda x: 2.0**x, lambda x: 2.0**x, (B, R)),
    row("pow/zero_base", "pow", tg.pow, torch.pow, ((3,), fixed([0.0, 0.0, 2.0])), ((3,), fixed([2.0, 0.0, 0.0])), order=0),
    row("maximum", "maximum", tg.maximum, torch.maximum, (A, grid(0.25)), ((4,), grid(0.75))),
    row("minimum", "minimum", tg.minimum, torch.minimum, (A, grid(0.25)), ((3, 1), grid(0.75))),
    row("maximum/ties", "maximum", tg.maximum, torch.maximum, ((4,), fixed([1.0, 2.0, 3.0, -1.0])), ((4,), fixed([1.0, 0.0, 3.0, 5.0])), order=0),
    row("minimum/ties", "minimum", tg.minimum, torch.minimum, ((4,), fixed([1.0, 2.0, 3.0, -1.0])), ((4,), fixed([1.0, 0.0, 3.0, 5.0])), order=0),
    row("sub/rscalar", "sub", lambda y: 2.0 - y, lambda y: 2.0 - y, (A, R)),
    row("div/rscalar", "div", lambda y: 2.0 / y, lambda y: 2.0 / y, (A, NZ)),
    row("mul_scalar", "mul_scalar", lambda x: x * 2.5, lambda x: x * 2.5, (A, R)),
    row("mul_scalar/left_int", "mul_scalar", lambda x: 3 * x, lambda x: 3 * x, (A, R)),
    row("div_scalar", "div_scalar", lambda x: x / -1.5, lambda x: x / -1.5, (A, R)),
    row("remainder/rscalar", "remainder", lambda y: 7.5 % y, lambda y: torch.remainder(torch.full_like(y, 7.5), y), (A, real(0.7, 3))),
    row("maximum/scalar", "maximum", lambda x: tg.maximum(x, 0.5), lambda x: torch.clamp(x, min=0.5), (A, grid(0.25))),
    row("atan2/scalar", "atan2", lambda y: tg.atan2(1.5, y), lambda y: torch.atan2(torch.tensor(1.5, dtype=y.dtype), y), (A, NZ)),
    row("maximum/int", "maximum", tg.maximum, torch.maximum, (A, R), (A, R), dtypes=(I64,)),
    row("atan2", "atan2", tg.atan2, torch.atan2, (A, NZ), ((4,), NZ)),
    row("remainder", "remainder", tg.remainder, torch.remainder, (A, real(-5, 5)), ((4,), NZ), dtypes=(F64, F32, I64)),
    row("fmod", "fmod", tg.fmod, torch.fmod, (A, real(-5, 5)), ((4,), NZ), dtypes=(F64, F32, I64)),
    row("copysign", "copysign", tg.copysign, torch.copysign, (A, NZ), ((4,), NZ)),
    row("cbrt", "cbrt", tg.cbrt, lambda x: torch.sign(x) * x.abs() ** (1 / 3), (B, NZ)),
    row("nansum", None, lambda x: tg.nansum(x, 1), lambda x: torch.nansum(x, 1), (B, R)),
    row("nanmean", None, lambda x: tg.nanmean(x, -1, True), lambda x: torch.nanmean(x, -1, True), (B, R)),
    row("ptp", None, lambda x: tg.ptp(x, 0), lambda x: torch.amax(x, 0) - torch.amin(x, 0), (B, R)),
    row("median", None, lambda x: tg.median(x, -1), lambda x: torch.quantile(x, 0.5, dim=-1), (B, R)),
    row("median/odd", None, lambda x: tg.median(x, 1), lambda x: torch.quantile(x, 0.5, dim=1), (B, R)),
    row("floor_divide", "floor_divide", tg.floor_divide, lambda x, y: torch.div(x, y, rounding_mode="floor"), (A, real(-5, 5)), ((4,), NZ), dtypes=(F64, F32, I64)),
    row("where", "where", tg.where, torch.where, (A, bools()), (A, R), (A, R)),
    row("where/broadcast", "where", tg.where, torch.where, ((3, 1), bools()), ((4,), R), (A, R)),
    row("where/scalar", "where", lambda c, x: tg.where(c, x, 0.0), lambda c, x: torch.where(c, x, 0.0), (A, bools()), (A, R)),
)

# --- activations and other compositions ------------------------------------------------------
add(
    row("leaky_relu", "leaky_relu", lambda x: tg.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1), (B, NZ), dtypes=(F64, F32)),
    row("leaky_relu/negative_slope", None, lambda x: tg.leaky_relu(x, -0.3), lambda x: TF.leaky_relu(x, -0.3), (B, NZ)),
    row("elu", None, lambda x: tg.elu(x, 1.5), lambda x: TF.elu(x, 1.5), (B, NZ)),
    row("gelu/erf", "gelu", tg.gelu, TF.gelu, (B, real(-4, 4)), tol64=(1e-13, 1e-14), dtypes=(F64, F32)),
    row("gelu/tanh", "gelu_tanh", lambda x: tg.gelu(x, "tanh"), lambda x: TF.gelu(x, approximate="tanh"), (B, real(-4, 4)), dtypes=(F64, F32)),
    row("silu", None, tg.silu, TF.silu, (B, real(-4, 4))),
    row("softplus/beta", None, lambda x: tg.softplus(x, beta=2.0, threshold=5.0), lambda x: TF.softplus(x, beta=2.0, threshold=5.0), (B, real(-4, 4))),
    row("clip", None, lambda x: tg.clip(x, -0.5, 0.7), lambda x: torch.clamp(x, -0.5, 0.7), (B, R)),
    row("clip/tensor_bounds", None, tg.clip, torch.clamp, (A, grid(0.25)), ((4,), grid(-0.45)), ((3, 1), grid(0.6))),
    row("nan_to_num", None, tg.nan_to_num, torch.nan_to_num, ((6,), fixed([1.0, np.nan, np.inf, -np.inf, -2.0, 0.5])), order=0),
    row("nan_to_num/values", None, lambda x: tg.nan_to_num(x, nan=1.0, posinf=9.0, neginf=-9.0), lambda x: torch.nan_to_num(x, nan=1.0, posinf=9.0, neginf=-9.0), ((6,), fixed([1.0, np.nan, np.inf, -np.inf, -2.0, 0.5])), order=0),
    row("softmax", "softmax", lambda x: tg.softmax(x, axis=-1), lambda x: torch.softmax(x, -1), (B, R)),
    row("softmax/axis0", None, lambda x: tg.softmax(x, axis=0), lambda x: torch.softmax(x, 0), (B, R)),
    row("softmax/large", None, lambda x: tg.softmax(x + 1e4, axis=-1), lambda x: torch.softmax(x + 1e4, -1), (A, R), tol64=(1e-9, 1e-12), eps=1e-4, grad_tol=(1e-4, 1e-6)),
    row("log_softmax", "log_softmax", lambda x: tg.log_softmax(x, axis=1), lambda x: torch.log_softmax(x, 1), (B, R)),
    row("log_softmax/large", None, lambda x: tg.log_softmax(x * 1e4, axis=-1), lambda x: torch.log_softmax(x * 1e4, -1), (A, distinct(0.5)), tol64=(1e-9, 1e-9), order=1),
)

# --- reductions ------------------------------------------------------------------------------
_AXES: list[tuple[str, Any, bool]] = [
    ("all", None, False),
    ("axis1", 1, False),
    ("axis-1/keep", -1, True),
    ("axes02", (0, 2), False),
    ("axes02/keep", (0, 2), True),
]


def _dims(axis: Any) -> Any:
    return tuple(range(3)) if axis is None else axis


for _tag, _ax, _kd in _AXES:
    add(
        row(f"sum/{_tag}", "sum", lambda x, a=_ax, k=_kd: tg.sum(x, axis=a, keepdims=k), lambda x, a=_ax, k=_kd: torch.sum(x, dim=_dims(a), keepdim=k), (B, R), dtypes=(F64, F32, I64)),
        row(f"mean/{_tag}", None, lambda x, a=_ax, k=_kd: tg.mean(x, axis=a, keepdims=k), lambda x, a=_ax, k=_kd: torch.mean(x, dim=_dims(a), keepdim=k), (B, R)),
        row(f"amax/{_tag}", "amax", lambda x, a=_ax, k=_kd: tg.amax(x, axis=a, keepdims=k), lambda x, a=_ax, k=_kd: torch.amax(x, dim=_dims(a), keepdim=k), (B, distinct()), dtypes=(F64, F32, I64)),
        row(f"amin/{_tag}", "amin", lambda x, a=_ax, k=_kd: tg.amin(x, axis=a, keepdims=k), lambda x, a=_ax, k=_kd: torch.amin(x, dim=_dims(a), keepdim=k), (B, distinct())),
        row(f"var/{_tag}", None, lambda x, a=_ax, k=_kd: tg.var(x, axis=a, keepdims=k, correction=1), lambda x, a=_ax, k=_kd: torch.var(x, dim=_dims(a), keepdim=k, correction=1), (B, R)),
        row(f"logsumexp/{_tag}", None, lambda x, a=_ax, k=_kd: tg.logsumexp(x, axis=a, keepdims=k), lambda x, a=_ax, k=_kd: torch.logsumexp(x, dim=_dims(a), keepdim=k), (B, R)),
    )
add(
    row("sum/scalar", "sum", tg.sum, torch.sum, ((), R)),
    row("var/population", None, lambda x: tg.var(x, axis=0, ddof=0), lambda x: torch.var(x, dim=0, correction=0), (A, R)),
    row("std", None, lambda x: tg.std(x, axis=1, correction=1), lambda x: torch.std(x, dim=1, correction=1), (A, R)),
    row("logsumexp/large", None, lambda x: tg.logsumexp(x * 1e3, axis=1), lambda x: torch.logsumexp(x * 1e3, dim=1), (A, distinct(0.5)), tol64=(1e-12, 1e-9), order=1),
    row("amax/ties", "amax", lambda x: tg.amax(x, axis=1), lambda x: torch.amax(x, dim=1), ((2, 3), fixed([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])), order=0),
    row("amin/ties", "amin", tg.amin, torch.amin, ((2, 2), fixed([[1.0, 5.0], [1.0, 1.0]])), order=0),
    row("max/alias", "amax", tg.max, torch.max, (A, distinct())),
    row("prod/all", "prod", tg.prod, torch.prod, (A, real(0.5, 1.5)), dtypes=(F64, F32, I64)),
    row("prod/axis", "prod", lambda x: tg.prod(x, axis=1, keepdims=True), lambda x: torch.prod(x, 1, keepdim=True), (B, real(-1.5, 1.5))),
    row("prod/axes", "prod", lambda x: tg.prod(x, axis=(0, 2)), lambda x: x.prod(2).prod(0), (B, real(0.5, 1.5))),
    row("prod/one_zero", "prod", lambda x: tg.prod(x, axis=1), lambda x: torch.prod(x, 1), (A, with_zeros(1, 5, 6))),
    row("prod/zeros_all", "prod", tg.prod, torch.prod, (A, with_zeros(2, 7))),
    row("cumsum", "cumsum", lambda x: tg.cumsum(x, axis=1), lambda x: torch.cumsum(x, 1), (B, R), dtypes=(F64, F32, I64)),
    row("cumsum/flat", "cumsum", tg.cumsum, lambda x: torch.cumsum(x.reshape(-1), 0), (A, R)),
    row("logcumsumexp", "logcumsumexp", lambda x: tg.logcumsumexp(x, 1), lambda x: torch.logcumsumexp(x, 1), (B, R), order=1),
    row("cumprod", "cumprod", lambda x: tg.cumprod(x, axis=-1), lambda x: torch.cumprod(x, -1), (B, real(0.5, 1.5))),
    row("cumprod/zeros", "cumprod", lambda x: tg.cumprod(x, axis=1), lambda x: torch.cumprod(x, 1), (A, with_zeros(1, 6, 7))),
    row("cumprod/zeros_axis0", "cumprod", lambda x: tg.cumprod(x, axis=0), lambda x: torch.cumprod(x, 0), (A, with_zeros(0, 5))),
    row("norm/2", None, lambda x: tg.norm(x, axis=1), lambda x: torch.linalg.vector_norm(x, 2, dim=1), (B, R)),
    row("norm/fro", None, lambda x: tg.norm(x, "fro"), lambda x: torch.linalg.matrix_norm(x, "fro"), (A, R)),
    row("norm/1", None, lambda x: tg.norm(x, 1, axis=-1, keepdims=True), lambda x: torch.linalg.vector_norm(x, 1, dim=-1, keepdim=True), (B, NZ)),
    row("norm/inf", None, lambda x: tg.norm(x, float("inf"), axis=0), lambda x: torch.linalg.vector_norm(x, float("inf"), dim=0), (A, distinct())),
    row("norm/3", None, lambda x: tg.norm(x, 3, axis=1), lambda x: torch.linalg.vector_norm(x, 3, dim=1), (A, NZ)),
    row("norm/at_zero", None, lambda x: tg.norm(x * 0.0, axis=1), lambda x: torch.linalg.vector_norm(x * 0.0, dim=1), (A, R), order=1),
)

# --- shape -----------------------------------------------------------------------------------
add(
    row("reshape", "reshape", lambda x: tg.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), (B, R), dtypes=(F64, F32, I64)),
    row("flatten", "reshape", lambda x: tg.flatten(x, 1), lambda x: torch.flatten(x, 1), (B, R)),
    row("squeeze", "reshape", lambda x: tg.squeeze(x, 1), lambda x: x.squeeze(1), ((3, 1, 2), R)),
    row("expand_dims", "reshape", lambda x: tg.expand_dims(x, (0, 2)), lambda x: x.unsqueeze(0).unsqueeze(2), (A, R)),
    row("permute_dims", "permute_dims", lambda x: tg.permute_dims(x, (2, 0, 1)), lambda x: x.permute(2, 0, 1), (B, R), dtypes=(F64, F32, I64)),
    row("transpose", "permute_dims", tg.transpose, lambda x: x.permute(2, 1, 0), (B, R)),
    row("swapaxes", "permute_dims", lambda x: tg.swapaxes(x, 0, -1), lambda x: torch.swapaxes(x, 0, -1), (B, R)),
    row("moveaxis", "permute_dims", lambda x: tg.moveaxis(x, 0, 2), lambda x: torch.movedim(x, 0, 2), (B, R)),
    row("broadcast_to", "broadcast_to", lambda x: tg.broadcast_to(x, (2, 3, 4)), lambda x: torch.broadcast_to(x, (2, 3, 4)), ((3, 1), R), dtypes=(F64, F32, I64)),
    row("astype", "astype", lambda x: x.astype(tg.float32).astype(tg.float64), lambda x: x.float().double(), (A, R), dtypes=(F64,), eps=1e-3, grad_tol=(1e-4, 1e-5)),
    row("concat", "concat", lambda x, y: tg.concat([x, y], axis=1), lambda x, y: torch.cat([x, y], 1), ((3, 2), R), (A, R), dtypes=(F64, F32, I64)),
    row("concat3", "concat3", lambda x, y, z: tg.concat([x, y, z], axis=0), lambda x, y, z: torch.cat([x, y, z], 0), ((1, 4), R), (A, R), ((2, 4), R)),
    row("concat/promote", "concat", lambda x, y: tg.concat([x, y.astype(tg.int64)]), lambda x, y: torch.cat([x, y.long()]), ((2,), R), ((3,), R), order=1),
    row("stack", "concat", lambda x, y: tg.stack([x, y], axis=1), lambda x, y: torch.stack([x, y], 1), (A, R), (A, R)),
    row("split", "getitem", lambda x: tg.stack(tg.split(x, 2, axis=2)), lambda x: torch.stack(torch.tensor_split(x, 2, 2)), (B, R)),
    row("split/indices", "getitem", lambda x: tg.concat(tg.split(x, [1, 3], axis=-1)[::-1], axis=-1), lambda x: torch.cat(torch.tensor_split(x, [1, 3], -1)[::-1], -1), (B, R)),
    row("chunk", "getitem", lambda x: tg.concat(tg.chunk(x, 3, axis=0)[1:]), lambda x: torch.cat(torch.chunk(x, 3, 0)[1:]), ((7, 2), R)),
    row("pad/constant", "pad", lambda x: tg.pad(x, ((0, 1), (2, 1)), value=0.5), lambda x: TF.pad(x, (2, 1, 0, 1), value=0.5), (A, R), dtypes=(F64, F32, I64)),
    row("pad/reflect", "pad", lambda x: tg.pad(x, ((0, 0), (2, 1)), mode="reflect"), lambda x: TF.pad(x[None], (2, 1), mode="reflect")[0], (A, R)),
    row("pad/reflect2d", "pad", lambda x: tg.pad(x, ((0, 0), (1, 2), (2, 1)), mode="reflect"), lambda x: TF.pad(x[None], (2, 1, 1, 2), mode="reflect")[0], (B, R)),
    row("pad/edge", "pad", lambda x: tg.pad(x, ((0, 0), (1, 2)), mode="edge"), lambda x: TF.pad(x[None], (1, 2), mode="replicate")[0], (A, R)),
    row("pad/wrap", "pad", lambda x: tg.pad(x, ((0, 0), (2, 1)), mode="wrap"), lambda x: TF.pad(x[None], (2, 1), mode="circular")[0], (A, R)),
    row("pad_grad", "pad_grad", lambda g: tg.apply(S._pad_reflect_grad, g, pad_width=((0, 0), (2, 1)), mode="reflect"), lambda g: _reflect_adjoint(g, 2, 1), ((3, 7), R)),
    row("tile", "broadcast_to", lambda x: tg.tile(x, (2, 1, 3)), lambda x: torch.tile(x, (2, 1, 3)), (A, R)),
    row("repeat", "broadcast_to", lambda x: tg.repeat(x, 2, axis=1), lambda x: torch.repeat_interleave(x, 2, 1), (A, R)),
    row("repeat/counts", "getitem", lambda x: tg.repeat(x, [1, 0, 2], axis=0), lambda x: torch.repeat_interleave(x, torch.tensor([1, 0, 2]), 0), (A, R)),
    row("roll", "roll", lambda x: tg.roll(x, 2, axis=1), lambda x: torch.roll(x, 2, 1), (B, R), dtypes=(F64, F32, I64)),
    row("roll/axes", "roll", lambda x: tg.roll(x, (1, -1), axis=(0, 2)), lambda x: torch.roll(x, (1, -1), (0, 2)), (B, R)),
    row("roll/flat", "roll", lambda x: tg.roll(x, 5), lambda x: torch.roll(x, 5), (A, R)),
    row("flip", "flip", lambda x: tg.flip(x, axis=(0, 2)), lambda x: torch.flip(x, (0, 2)), (B, R), dtypes=(F64, F32, I64)),
    row("flip/all", "flip", tg.flip, lambda x: torch.flip(x, (0, 1)), (A, R)),
    row("tril", "tril", lambda x: tg.tril(x, -1), lambda x: torch.tril(x, -1), (B, R), dtypes=(F64, F32, I64)),
    row("triu", "triu", lambda x: tg.triu(x, 1), lambda x: torch.triu(x, 1), ((4, 3), R), dtypes=(F64, F32, I64)),
    row("clone", "clone", lambda x: x.clone(), torch.clone, (A, R)),
    row("identity", "identity", lambda x: tg.apply(PRIMITIVES["identity"], x), lambda x: x + 0, (A, R)),
)


def _reflect_adjoint(g: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """The VJP of reflect padding on the last axis, from PyTorch's autograd."""
    x = torch.zeros(g.shape[0], g.shape[1] - before - after, dtype=g.dtype, requires_grad=True)
    y = TF.pad(x[None], (before, after), mode="reflect")[0]
    return torch.autograd.grad(y, x, g, create_graph=True)[0]


# --- indexing --------------------------------------------------------------------------------
_IDX = np.array([2, 0, 2, 1])  # with a repeat: its gradient accumulates
add(
    row("getitem/int", "getitem", lambda x: x[1], lambda x: x[1], (B, R), dtypes=(F64, F32, I64)),
    row("getitem/slices", "getitem", lambda x: x[1:, ::2], lambda x: x[1:, ::2], (B, R)),
    row("getitem/negative_step", "getitem", lambda x: x[::-1, 3:0:-2], lambda x: torch.flip(x, (0,))[:, [3, 1]], (A, R)),
    row("getitem/none_ellipsis", "getitem", lambda x: x[None, ..., -1], lambda x: x[None, ..., -1], (B, R)),
    row("getitem/scalar", "getitem", lambda x: x[0, 2, 1], lambda x: x[0, 2, 1], (B, R)),
    row("getitem/int_array", "getitem", lambda x: x[_IDX], lambda x: x[torch.from_numpy(_IDX)], (A, R), dtypes=(F64, F32, I64)),
    row("getitem/int_array_2d", "getitem", lambda x: x[:, np.array([[0, 2], [2, 2]])], lambda x: x[:, torch.tensor([[0, 2], [2, 2]])], (B, R)),
    row("getitem/tensor_index", "getitem", lambda x, i: x[i], lambda x, i: x[i], (A, R), ((5,), ints(-3, 3))),
    row("getitem/two_arrays", "getitem", lambda x: x[[0, 2, 2], [1, 1, 3]], lambda x: x[[0, 2, 2], [1, 1, 3]], (A, R)),
    row("getitem/mixed", "getitem", lambda x: x[1:, _IDX, ::2], lambda x: x[1:, torch.from_numpy(_IDX)][..., ::2], ((3, 3, 4), R)),
    row("getitem/bool_mask", "getitem", lambda x, m: x[m], lambda x, m: x[m], (A, R), (A, bools())),
    row("getitem/bool_rows", "getitem", lambda x, m: x[m], lambda x, m: x[m], (B, R), ((2,), fixed([True, False]))),
    row("take", "getitem", lambda x: tg.take(x, _IDX, axis=1), lambda x: torch.index_select(x, 1, torch.from_numpy(_IDX)), (B, R)),
    row("take/flat", "getitem", lambda x: tg.take(x, [5, 0, 5, 11]), lambda x: torch.take(x, torch.tensor([5, 0, 5, 11])), (A, R)),
    row("take_along_axis", "getitem", lambda x, i: tg.take_along_axis(x, i, axis=1), lambda x, i: torch.take_along_dim(x, i, 1), (A, R), ((3, 5), ints(0, 4))),
    row("take_along_axis/broadcast", "getitem", lambda x, i: tg.take_along_axis(x, i, axis=0), lambda x, i: torch.take_along_dim(x, i, 0), (A, R), ((2, 1), ints(0, 3))),
    row("scatter_add", "index_grad", lambda x, s, i: tg.scatter_add(x, 0, i, s), lambda x, s, i: torch.scatter_add(x, 0, i, s), (A, R), ((4, 3), R), ((4, 3), ints(0, 3))),
    row("scatter_add/axis1", "index_grad", lambda x, s, i: tg.scatter_add(x, 1, i, s), lambda x, s, i: torch.scatter_add(x, 1, i, s), (A, R), ((2, 5), R), ((2, 5), ints(0, 4))),
    row("index_add", "index_grad", lambda x, s: tg.index_add(x, 1, _IDX, s), lambda x, s: torch.index_add(x, 1, torch.from_numpy(_IDX), s), (A, R), ((3, 4), R)),
    row("index_add/alpha", "index_grad", lambda x, s: tg.index_add(x, 0, [1, 1], s, alpha=2.0), lambda x, s: torch.index_add(x, 0, torch.tensor([1, 1]), s, alpha=2.0), (A, R), ((2, 4), R)),
)

# --- linear algebra --------------------------------------------------------------------------
_MATMUL = [
    ("2d", (3, 4), (4, 2)),
    ("1d_2d", (4,), (4, 2)),
    ("2d_1d", (3, 4), (4,)),
    ("1d_1d", (4,), (4,)),
    ("batched", (2, 3, 4), (2, 4, 5)),
    ("broadcast", (2, 1, 3, 4), (5, 4, 2)),
    ("3d_1d", (2, 3, 4), (4,)),
    ("1d_3d", (4,), (2, 4, 3)),
]
for _tag, _sx, _sy in _MATMUL:
    add(row(f"matmul/{_tag}", "matmul", tg.matmul, torch.matmul, (_sx, R), (_sy, R), dtypes=(F64, F32, I64)))
_EINSUM: list[tuple[str, tuple[tuple[int, ...], ...]]] = [
    ("ij,jk->ik", ((3, 4), (4, 2))),
    ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
    ("i,i->", ((4,), (4,))),
    ("ij,ij->ij", (A, A)),
    ("ij,kj", (A, (2, 4))),
    ("...ij,jk->...ik", ((2, 3, 4), (4, 2))),
    ("iij,jk->ik", ((3, 3, 4), (4, 2))),
    ("ij,jj->i", ((2, 3), (3, 3))),
    ("ij,k->ijk", ((2, 3), (2,))),
    ("ibj,jk->k", ((3, 2, 4), (4, 2))),
    ("ij,jk,kl->il", ((2, 3), (3, 4), (4, 2))),
    ("ii->i", ((3, 3),)),
    ("ii", ((3, 3),)),
    ("iji->j", ((3, 2, 3),)),
    ("ijk->kij", (B,)),
    ("ij->", (A,)),
]
for _sub, _shapes in _EINSUM:
    add(
        row(
            f"einsum/{_sub}", "einsum" if len(_shapes) == 2 else f"einsum{len(_shapes)}", lambda *xs, s=_sub: tg.einsum(s, *xs),
            lambda *xs, s=_sub: torch.einsum(s, *xs), *[(sh, R) for sh in _shapes],
            dtypes=(F64, F32), tol64=(1e-12, 1e-13),
        )
    )  # fmt: skip
add(
    row("outer", None, tg.outer, torch.outer, ((3,), R), ((4,), R)),
    row("tensordot", None, lambda x, y: tg.tensordot(x, y, 2), lambda x, y: torch.tensordot(x, y, 2), (B, R), ((3, 4, 2), R)),
    row("tensordot/pairs", None, lambda x, y: tg.tensordot(x, y, ([0, 2], [2, 0])), lambda x, y: torch.tensordot(x, y, ([0, 2], [2, 0])), (B, R), ((4, 5, 2), R)),
)

# --- where a registered primitive is tested instead of here ----------------------------------
# name prefix or exact name -> where its checks live (keep this short)
ELSEWHERE = {
    "nn.": "tests/test_functional_nn.py (the fused nn primitives: conv, linear, pooling, losses)",
    "to_device": "needs CuPy and a GPU: the host <-> device copy has no CPU-only form",
    "checkpoint": "tests/test_checkpoint.py (recomputes a block: checked against the plain block and PyTorch)",
}
# per-arity primitives are named concat, concat3, ... and einsum, einsum1, einsum3, ...
ARITY_FAMILIES = ("concat", "einsum", "checkpoint")

# --- numpy's extra functions (tapegrad/ops/_numpy_*.py, _linalg_decomp.py) ------------------
add(
    row("sinh", "sinh", tg.sinh, torch.sinh, (B, R)),
    row("cosh", "cosh", tg.cosh, torch.cosh, (B, R)),
    row("arcsin", "arcsin", tg.arcsin, torch.asin, (B, real(-0.9, 0.9))),
    row("arccos", "arccos", tg.arccos, torch.acos, (B, real(-0.9, 0.9))),
    row("arctan", "arctan", tg.arctan, torch.atan, (B, R)),
    row("arcsinh", "arcsinh", tg.arcsinh, torch.asinh, (B, R)),
    row("arccosh", "arccosh", tg.arccosh, torch.acosh, (B, real(1.2, 3.0))),
    row("arctanh", "arctanh", tg.arctanh, torch.atanh, (B, real(-0.9, 0.9))),
    row("exp2", "exp2", tg.exp2, torch.exp2, (B, R)),
    row("logaddexp", "logaddexp", tg.logaddexp, torch.logaddexp, (A, R), ((4,), R)),
    row("logaddexp/large", "logaddexp", tg.logaddexp, torch.logaddexp, (A, real(-800, 800)), (A, real(-800, 800))),
    row("logaddexp2", "logaddexp2", tg.logaddexp2, torch.logaddexp2, (A, R), ((4,), R)),
    row("hypot", "hypot", tg.hypot, torch.hypot, (A, NZ), ((4,), NZ)),
    row("fmax", None, tg.fmax, torch.fmax, (A, grid(0.25)), (A, grid(0.75))),
    row("fmin", None, tg.fmin, torch.fmin, (A, grid(0.25)), (A, grid(0.75))),
    row("fabs", None, tg.fabs, torch.abs, (B, NZ)),
    row("sinc", None, tg.sinc, torch.sinc, (B, NZ)),
    row("deg2rad", None, tg.deg2rad, torch.deg2rad, (B, R)),
    row("rad2deg", None, tg.rad2deg, torch.rad2deg, (B, R)),
    row("sort", None, lambda x: tg.sort(x, axis=1), lambda x: torch.sort(x, dim=1).values, (B, distinct())),
    row("diff", None, lambda x: tg.diff(x, 2, axis=1), lambda x: torch.diff(x, 2, dim=1), ((3, 5), R)),
    row("rot90", None, lambda x: tg.rot90(x, 1, (1, 2)), lambda x: torch.rot90(x, 1, (1, 2)), (B, R)),
    row("rot90/3", None, lambda x: tg.rot90(x, 3), lambda x: torch.rot90(x, 3), (B, R)),
    row("vstack", None, lambda x, y: tg.vstack([x, y]), lambda x, y: torch.vstack([x, y]), ((4,), R), (A, R)),
    row("hstack", None, lambda x, y: tg.hstack([x, y]), lambda x, y: torch.hstack([x, y]), (A, R), ((3, 2), R)),
    row("dstack", None, lambda x, y: tg.dstack([x, y]), lambda x, y: torch.dstack([x, y]), (A, R), (A, R)),
    row("column_stack", None, lambda x, y: tg.column_stack([x, y]), lambda x, y: torch.column_stack([x, y]), ((3,), R), (A, R)),
    row("dot", None, tg.dot, lambda x, y: torch.tensordot(x, y, ([-1], [-2])), (B, R), ((2, 4, 5), R)),
    row("inner", None, tg.inner, torch.inner, (A, R), ((2, 4), R)),
    row("kron", None, tg.kron, torch.kron, (A, R), ((2, 3), R)),
    row("cross", None, tg.cross, torch.linalg.cross, ((4, 3), R), ((4, 3), R)),
    row("diagonal", None, lambda x: tg.diagonal(x, 1, 1, 2), lambda x: torch.diagonal(x, 1, 1, 2), (B, R)),
    row("diag", None, lambda x: tg.diag(x, -1), lambda x: torch.diag(x, -1), ((4,), R)),
    row("matrix_trace", None, tg.matrix_trace, torch.trace, (A, R)),
)


def well_conditioned(rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
    """Random square matrices plus ``n`` on the diagonal: far from singular."""
    return rng.uniform(-1, 1, shape) + shape[-1] * np.eye(shape[-1])


def _sym_t(a: torch.Tensor) -> torch.Tensor:
    # eigh reads one triangle (numpy, torch); both sides symmetrize so gradients compare
    return (a + a.mT) / 2


def _spd(a: Any) -> Any:
    eye = tg.eye if isinstance(a, tg.Tensor) else torch.eye
    return a @ a.mT + 3 * eye(a.shape[-1], dtype=a.dtype)


def _eigh_sign_free(w: Any, v: Any, cat: Callable) -> Any:
    return cat([w.reshape(-1), (v * v).reshape(-1)])


def real_spectrum(rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
    """``P diag(1..n) P^-1``: a general matrix with real eigenvalues one apart."""
    n = shape[-1]
    p = rng.uniform(-1, 1, shape) + 2 * np.eye(n)
    return p @ (np.arange(1.0, n + 1)[:, None] * np.linalg.inv(p))


def _eig_tg(a: Any) -> Any:
    w, v = tg.linalg.eig(a)
    i = np.argsort(w.detach().numpy())  # LAPACKs may order eigenvalues differently
    return tg.concatenate([w[i], (v[:, i] * v[:, i]).reshape(-1)])


def _eig_torch(a: Any) -> Any:
    w, v = torch.linalg.eig(a)
    i = torch.argsort(w.real)
    return torch.cat([w.real[i], (v[:, i].abs() ** 2).reshape(-1)])


def _svd_sign_free(u: Any, s: Any, vh: Any, cat: Callable) -> Any:
    return cat([s.reshape(-1), (u * u).reshape(-1), (vh * vh).reshape(-1), (u[..., :1] * vh[..., :1, :]).reshape(-1)])


SQ = (2, 3, 3)
WC = well_conditioned
add(
    row("linalg.inv", "linalg.inv", tg.linalg.inv, torch.linalg.inv, (SQ, WC), tol64=(1e-9, 1e-11)),
    row("linalg.solve", "linalg.solve", tg.linalg.solve, torch.linalg.solve, (SQ, WC), ((2, 3, 2), R), tol64=(1e-9, 1e-11)),
    row("linalg.solve/vector", "linalg.solve", tg.linalg.solve, torch.linalg.solve, ((3, 3), WC), ((3,), R), tol64=(1e-9, 1e-11)),
    row("linalg.det", "linalg.det", tg.linalg.det, torch.linalg.det, (SQ, WC), tol64=(1e-9, 1e-11)),
    row("linalg.slogdet", "linalg.logabsdet", lambda a: tg.linalg.slogdet(a)[1], lambda a: torch.linalg.slogdet(a)[1], (SQ, WC), tol64=(1e-9, 1e-11)),
    row("linalg.cholesky", "linalg.cholesky", lambda a: tg.linalg.cholesky(_spd(a)), lambda a: torch.linalg.cholesky(_spd(a)), (SQ, R), tol64=(1e-9, 1e-11)),
    row("linalg.eigh", "linalg.eigh", lambda a: _eigh_sign_free(*tg.linalg.eigh((a + tg.swapaxes(a, -1, -2)) / 2), tg.concatenate), lambda a: _eigh_sign_free(*torch.linalg.eigh(_sym_t(a)), torch.cat), ((3, 3), distinct()), tol64=(1e-9, 1e-10)),
    row("linalg.eig", "linalg.eig", _eig_tg, _eig_torch, ((3, 3), real_spectrum), tol64=(1e-8, 1e-10)),
    row("linalg.qr", "linalg.qr", lambda a: tg.concatenate([t.reshape(-1) for t in tg.linalg.qr(a)]), lambda a: torch.cat([t.reshape(-1) for t in torch.linalg.qr(a)]), ((4, 3), R), tol64=(1e-9, 1e-10)),
    row("linalg.svd", "linalg.svd", lambda a: _svd_sign_free(*tg.linalg.svd(a, full_matrices=False), tg.concatenate), lambda a: _svd_sign_free(*torch.linalg.svd(a, full_matrices=False), torch.cat), ((4, 3), R), tol64=(1e-9, 1e-10)),
    row("linalg.svd/wide", "linalg.svd", lambda a: _svd_sign_free(*tg.linalg.svd(a, full_matrices=False), tg.concatenate), lambda a: _svd_sign_free(*torch.linalg.svd(a, full_matrices=False), torch.cat), ((3, 4), R), tol64=(1e-9, 1e-10)),
    row("linalg.pinv", None, tg.linalg.pinv, torch.linalg.pinv, ((4, 3), R), tol64=(1e-9, 1e-10)),
    row("linalg.matrix_power", None, lambda a: tg.linalg.matrix_power(a, 5), lambda a: torch.linalg.matrix_power(a, 5), (SQ, R), tol64=(1e-9, 1e-10)),
    row("linalg.matrix_power/neg", None, lambda a: tg.linalg.matrix_power(a, -2), lambda a: torch.linalg.matrix_power(a, -2), (SQ, WC), tol64=(1e-9, 1e-10)),
    row("linalg.norm/nuc", None, lambda a: tg.linalg.norm(a, "nuc", axis=(1, 2)), lambda a: torch.linalg.matrix_norm(a, "nuc"), (B, R), tol64=(1e-9, 1e-10)),
    row("linalg.norm/2", None, lambda a: tg.linalg.norm(a, 2, axis=(1, 2)), lambda a: torch.linalg.matrix_norm(a, 2), (B, R), tol64=(1e-9, 1e-10)),
    row("linalg.norm/inf", None, lambda a: tg.linalg.norm(a, np.inf, axis=(1, 2)), lambda a: torch.linalg.matrix_norm(a, float("inf")), (B, R), tol64=(1e-9, 1e-10)),
    row("linalg.norm/1", None, lambda a: tg.linalg.norm(a, 1, axis=(0, 2), keepdims=True), lambda a: torch.linalg.matrix_norm(a, 1, dim=(0, 2), keepdim=True), (B, R), tol64=(1e-9, 1e-10)),
    row("linalg.norm/vec3", None, lambda a: tg.linalg.norm(a, 3, axis=1), lambda a: torch.linalg.vector_norm(a, 3, dim=1), (B, NZ)),
    row("linalg.norm/fro", None, tg.linalg.norm, torch.linalg.norm, (A, R)),
)  # fmt: skip
