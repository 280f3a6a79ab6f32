"""Random op graphs against PyTorch: values and gradients of every leaf.

Each example draws one to three leaves (0-d, size-0 and size-1 dimensions, shapes that
broadcast together, non-contiguous arrays, float32 or float64) and one to six ops, each applied
to a random earlier node (unary, reductions along a random axis, shape ops, binary ops with
another node, matmul), then compares the last node and the vector-Jacobian product for a random
cotangent with PyTorch. Runs are derandomized, so the suite is the same on every run.

Where tapegrad and PyTorch follow different documented conventions the graph avoids the case:
the mean and the logsumexp over an empty axis are a ValueError in tapegrad (PyTorch returns
NaN and -inf; tested below).
numpy's floating-point warnings (the log of an empty sum in ``logsumexp``, say) pass through
tapegrad's ops as RuntimeWarnings where PyTorch is silent, so the graphs run under
``np.errstate(all="ignore")``. Ties of ``amax`` split evenly in both, and ``abs``, ``relu`` and ``clip`` have the same
subgradients, so those need no exception.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

# name -> (tapegrad, torch); each takes the node(s) and returns a new node
UNARY = {
    "tanh": (tg.tanh, torch.tanh),
    "sigmoid": (tg.sigmoid, torch.sigmoid),
    "sin": (tg.sin, torch.sin),
    "abs": (tg.abs, torch.abs),
    "relu": (tg.relu, torch.relu),
    "neg": (lambda x: -x, lambda x: -x),
    "square": (lambda x: x * x, lambda x: x * x),
    "exp_tanh": (lambda x: tg.exp(tg.tanh(x)), lambda x: torch.exp(torch.tanh(x))),
    "log1p_sq": (lambda x: tg.log(x * x + 1.0), lambda x: torch.log(x * x + 1.0)),
    "sqrt1p_sq": (lambda x: tg.sqrt(x * x + 1.0), lambda x: torch.sqrt(x * x + 1.0)),
    "clip": (lambda x: tg.clip(x, -0.5, 0.5), lambda x: torch.clamp(x, -0.5, 0.5)),
    "scale": (lambda x: x * 0.5 - 0.25, lambda x: x * 0.5 - 0.25),
}
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / (b * b + 1.0), lambda a, b: a / (b * b + 1.0)),
    "maximum": (tg.maximum, torch.maximum),
}
AXIS = ["sum", "mean", "amax", "softmax", "log_softmax", "logsumexp"]
SHAPE = ["flatten", "swap", "unsqueeze", "stride2", "first", "concat", "matmul"]


def _axis_op(name, axis, keepdims):
    if name == "sum":
        return (
            lambda x: tg.sum(x, axis=axis, keepdims=keepdims),
            lambda x: torch.sum(x, dim=axis, keepdim=keepdims),
        )
    if name == "mean":
        return (
            lambda x: tg.mean(x, axis=axis, keepdims=keepdims),
            lambda x: torch.mean(x, dim=axis, keepdim=keepdims),
        )
    if name == "amax":
        return (
            lambda x: tg.amax(x, axis=axis, keepdims=keepdims),
            lambda x: torch.amax(x, dim=axis, keepdim=keepdims),
        )
    if name == "logsumexp":
        return (
            lambda x: tg.logsumexp(x, axis=axis, keepdims=keepdims),
            lambda x: torch.logsumexp(x, dim=axis, keepdim=keepdims),
        )
    f = tg.softmax if name == "softmax" else tg.log_softmax
    g = torch.softmax if name == "softmax" else torch.log_softmax
    return (lambda x: f(x, axis=axis), lambda x: g(x, dim=axis))


def _shape_op(name):
    return {
        "flatten": (lambda x: tg.reshape(x, (-1,)), lambda x: torch.reshape(x, (-1,))),
        "swap": (lambda x: tg.swapaxes(x, -1, -2), lambda x: torch.swapaxes(x, -1, -2)),
        "unsqueeze": (lambda x: tg.expand_dims(x, 0), lambda x: torch.unsqueeze(x, 0)),
        "stride2": (lambda x: x[..., ::2], lambda x: x[..., ::2]),
        "first": (lambda x: x[0], lambda x: x[0]),
        "concat": (lambda x: tg.concat([x, x * 2.0], axis=0), lambda x: torch.cat([x, x * 2.0], 0)),
        "matmul": (lambda x: x @ tg.swapaxes(x, -1, -2), lambda x: x @ torch.swapaxes(x, -1, -2)),
    }[name]


def _leaf(rng, shape, dtype, layout):
    """A random array of ``shape``: C-ordered, transposed (Fortran-like) or strided."""
    if layout == "transposed" and len(shape) >= 2:
        return np.ascontiguousarray(rng.uniform(-2, 2, shape[::-1]).astype(dtype)).T
    if layout == "strided" and len(shape) >= 1:
        wide = rng.uniform(-2, 2, (*shape[:-1], 2 * shape[-1])).astype(dtype)
        return wide[..., ::2]
    return rng.uniform(-2, 2, shape).astype(dtype)


@st.composite
def graphs(draw):
    shapes = draw(
        hnp.mutually_broadcastable_shapes(
            num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3
        )
    )
    n_leaves = draw(st.integers(1, 3))
    leaves = list(shapes.input_shapes[:n_leaves])
    layouts = [draw(st.sampled_from(["c", "transposed", "strided"])) for _ in leaves]
    dtype = draw(st.sampled_from(["float64", "float32"]))
    steps = []
    node_shapes = [tuple(s) for s in leaves]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(node_shapes) - 1))
        s = node_shapes[i]
        kinds = ["unary", "binary"] + (["axis"] if s else []) + ["shape"]
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            name = draw(st.sampled_from(sorted(UNARY)))
            steps.append(("unary", name, i, None))
            out = s
        elif kind == "binary":
            name = draw(st.sampled_from(sorted(BINARY)))
            j = draw(st.integers(0, len(node_shapes) - 1))
            try:
                out = np.broadcast_shapes(s, node_shapes[j])
                reduce_other = False
            except ValueError:  # the other operand summed to a scalar always broadcasts
                out, reduce_other = s, True
            steps.append(("binary", name, i, (j, reduce_other)))
        elif kind == "axis":
            name = draw(st.sampled_from(AXIS))
            axis = draw(st.integers(-len(s), len(s) - 1))
            keep = draw(st.booleans())
            if name == "amax" and s[axis] == 0:  # PyTorch and numpy refuse: no maximum of nothing
                name = "sum"
            if name in ("mean", "logsumexp") and s[axis] == 0:  # a convention: tapegrad refuses
                name = "sum"
            steps.append(("axis", name, i, (axis, keep)))
            if name in ("softmax", "log_softmax"):
                out = s
            else:
                ax = axis % len(s)
                out = tuple(1 if k == ax else d for k, d in enumerate(s) if keep or k != ax)
        else:
            options = ["flatten", "unsqueeze"]
            if len(s) >= 1:
                options += ["stride2", "concat"]
                if s[0] > 0:
                    options.append("first")
            if len(s) >= 2:
                options += ["swap", "matmul"]
            name = draw(st.sampled_from(options))
            steps.append(("shape", name, i, None))
            out = _shape_after(name, s)
        node_shapes.append(tuple(out))
    seed = draw(st.integers(0, 2**31 - 1))
    return leaves, layouts, dtype, steps, seed


def _shape_after(name, s):
    if name == "flatten":
        return (int(np.prod(s)),)
    if name == "unsqueeze":
        return (1, *s)
    if name == "stride2":
        return (*s[:-1], (s[-1] + 1) // 2)
    if name == "first":
        return s[1:]
    if name == "concat":
        return (2 * s[0], *s[1:])
    if name == "swap":
        return (*s[:-2], s[-1], s[-2])
    return (*s[:-1], s[-2])  # matmul with its own transpose


def _run(leaves, steps, side):
    """The nodes of the graph on one side (0: tapegrad, 1: torch)."""
    nodes = list(leaves)
    for kind, name, i, arg in steps:
        x = nodes[i]
        if kind == "unary":
            y = UNARY[name][side](x)
        elif kind == "binary":
            j, reduce_other = arg
            other = nodes[j]
            if reduce_other:
                other = tg.sum(other) if side == 0 else torch.sum(other)
            y = BINARY[name][side](x, other)
        elif kind == "axis":
            y = _axis_op(name, *arg)[side](x)
        else:
            y = _shape_op(name)[side](x)
        nodes.append(y)
    return nodes


def _tolerances(dtype):
    return (1e-9, 1e-11) if dtype == "float64" else (2e-4, 2e-5)


def check_graph(leaves, layouts, dtype, steps, seed):
    rng = np.random.default_rng(seed)
    arrays = [_leaf(rng, tuple(s), dtype, lay) for s, lay in zip(leaves, layouts, strict=True)]
    xs = [tg.from_numpy(a) for a in arrays]
    with tg.Tape() as tape, np.errstate(all="ignore"):  # numpy's warnings: see the docstring
        tape.watch(*xs)
        out = _run(xs, steps, 0)[-1]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = _run(ts, steps, 1)[-1]
    assert out.shape == tuple(want.shape), (out.shape, tuple(want.shape))
    assert out.dtype == np.dtype(dtype)
    rtol, atol = _tolerances(dtype)
    w = want.detach().numpy()
    scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0))
    np.testing.assert_allclose(out.numpy(), w, rtol=rtol, atol=atol * scale)
    cot = rng.uniform(-1, 1, out.shape).astype(dtype)
    with np.errstate(all="ignore"):
        grads = tape.gradient(out, xs, output_gradients=tg.tensor(cot))
    tgrads = torch.autograd.grad(want, ts, torch.from_numpy(cot), allow_unused=True)
    for g, tg_, a in zip(grads, tgrads, arrays, strict=True):
        ref = np.zeros_like(a) if tg_ is None else tg_.numpy()
        assert g.shape == a.shape and g.dtype == a.dtype
        scale = float(np.max(np.abs(ref[np.isfinite(ref)]), initial=1.0))
        np.testing.assert_allclose(g.numpy(), ref, rtol=rtol, atol=atol * scale)


_FAST = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_SLOW = settings(_FAST, max_examples=1000)


@_FAST
@given(graphs())
def test_random_graphs_agree_with_pytorch(g):
    check_graph(*g)


@pytest.mark.slow
@_SLOW
@given(graphs())
def test_many_random_graphs_agree_with_pytorch(g):
    check_graph(*g)


@pytest.mark.parametrize(
    "leaves, steps",
    [
        ([(0,)], [("axis", "softmax", 0, (0, False))]),
        ([()], [("unary", "relu", 0, None), ("unary", "abs", 1, None)]),
        ([(1, 3), (3, 1)], [("binary", "maximum", 0, (1, False)), ("shape", "matmul", 2, None)]),
        ([(2, 3)], [("shape", "swap", 0, None), ("shape", "flatten", 1, None)]),
    ],
)
def test_edge_cases_agree_with_pytorch(leaves, steps):
    for dtype in ("float64", "float32"):
        check_graph(leaves, ["transposed"] * len(leaves), dtype, steps, 0)


def test_the_mean_over_an_empty_axis_is_a_clear_error_where_pytorch_gives_nan():
    assert torch.isnan(torch.mean(torch.zeros((0, 3)), dim=0)).all()
    assert torch.isinf(torch.logsumexp(torch.zeros((2, 0)), dim=1)).all()
    with pytest.raises(ValueError, match=r"logsumexp: cannot reduce axis 1 of size 0"):
        tg.logsumexp(tg.zeros((2, 0)), axis=1)
    with pytest.raises(
        ValueError, match=r"mean: axis 0 of a tensor of shape \(0, 3\) has no elements"
    ):
        tg.mean(tg.zeros((0, 3)), axis=0)
