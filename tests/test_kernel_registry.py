"""The kernel registry: every registered implementation against its numpy reference.

One sample case per registered operation (the reference a primitive dispatches with, and small
arguments its implementation fits), run in float32 and float64: the implementation's result
equals the reference's bit for bit where the arithmetic is the same (``exact``), else to float
rounding. A registered implementation without a case fails the walk. A kernel that raises
``NotReady`` (machine code still compiling) leaves the call to its reference, and
``TAPEGRAD_KERNELS=numpy`` leaves the table unused.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _kernels
from tapegrad._autodiff import ARRAYS
from tapegrad._kernels import registry
from tapegrad.nn import _f_loss as L
from tapegrad.nn import _f_pool as P
from tapegrad.ops import _attention as A
from tapegrad.ops import _conv as CV
from tapegrad.ops import _elementwise as E
from tapegrad.ops import _indexing as IX
from tapegrad.ops import _linear as LIN
from tapegrad.ops import _loss as OL
from tapegrad.ops import _norm as N
from tapegrad.ops import _pool as OP
from tapegrad.ops import _resize as RS
from tapegrad.ops import _rnn as RNN
from tapegrad.ops import _shape as SH
from tapegrad.ops import _softmax as SM
from tapegrad.ops import _special
from tapegrad.ops import _take as C

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


def _r(seed: int, shape: tuple[int, ...], dtype: type, lo: float = -3.0, hi: float = 3.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def _probs(seed: int, shape: tuple[int, ...], dtype: type):
    e = np.exp(_r(seed, shape, np.float64))
    return (e / e.sum(axis=-1, keepdims=True)).astype(dtype)


def _ce_targets_ref(x, t, c, ignore_index):
    """What ``cross_entropy`` computes without the one-pass preparation (``_no_prep``)."""
    safe, valid, w = L._valid_and_weights(t, c, None, ignore_index, x.dtype, "cross_entropy")
    return safe, w, int(np.count_nonzero(valid)), -1


def _geom(x):
    return P._pool_args(tg.tensor(x), 2, None, 0, 1, False, "max_pool2d")


def _pools(dt):
    """(x, geom) of max pooling: 2x2 windows; 3x3 stride 2 padded 1 (ResNet's, overlapping,
    with ties: values rounded to halves); 3x2 stride (1, 2) dilated (2, 1) in ceil mode."""
    x = _r(26, (2, 3, 8, 8), dt)
    tie = np.round(_r(30, (2, 3, 9, 7), dt) * 2) / 2
    odd = _r(31, (2, 2, 7, 9), dt)
    return [(x, _geom(x)),
            (tie, P._pool_args(tg.tensor(tie), 3, 2, 1, 1, False, "max_pool2d")),
            (odd, P._pool_args(tg.tensor(odd), (3, 2), (1, 2), (1, 1), (2, 1), True,
                               "max_pool2d"))]


_CONV = CV.Geom((2, 3, 6, 6), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (6, 6))


def _conv_cases(dt):
    """(x, w, b, g, geom, groups) for each convolution strategy: a 3x3 layer on a 1x1 map (one
    live tap: pointwise), 16 -> 16 3x3 stride 1 (direct, fused, blocked, Winograd), a 4x4
    stride-2 layer in two groups (pixel-major) and in one (polyphase Winograd)."""
    out = []
    for i, (n, c, hw, o, k, s, p, groups) in enumerate([
            (3, 16, 1, 32, 3, 1, 1, 1), (2, 16, 6, 16, 3, 1, 1, 1), (2, 8, 9, 6, 4, 2, 1, 2),
            (2, 8, 9, 6, 4, 2, 1, 1)]):
        ho = CV.out_size(hw, k, s, (p, p), 1)
        geom = CV.Geom((n, c, hw, hw), (k, k), (s, s), ((p, p), (p, p)), (1, 1), (ho, ho))
        out.append((_r(50 + i, (n, c, hw, hw), dt), _r(60 + i, (o, c // groups, k, k), dt),
                    _r(70 + i, (o,), dt), _r(80 + i, (n, o, ho, ho), dt), geom, groups))
    return out


def _adam_case(dt):
    p = _r(40, (64, 64), dt)
    opt = tg.optim.Adam([tg.Parameter(p.copy())], lr=0.01, weight_decay=0.1)
    state = {"step": 3, "exp_avg": _r(41, p.shape, dt), "exp_avg_sq": _r(42, p.shape, dt, 0, 1)}
    return opt.numpy_step, (p, _r(43, p.shape, dt), state, opt.param_groups[0])


def _sgd_case(dt):
    p = _r(44, (64, 64), dt)
    opt = tg.optim.SGD([tg.Parameter(p.copy())], lr=0.01, momentum=0.9, dampening=0.1,
                       weight_decay=0.1)
    state = {"momentum_buffer": _r(45, p.shape, dt)}
    return opt.numpy_step, (p, _r(46, p.shape, dt), state, opt.param_groups[0])


def _heads(dt):
    qkv = _r(30, (2, 6, 3, 2, 8), dt)
    out = A._attn_qkv(qkv, None, 0.35, None)
    return qkv, out


def _seq(mode, dt):
    """A recurrent layer-direction's inputs (gi, h0, c0, w_hh, b_hh, reverse): 5 steps, batch 3,
    hidden 4."""
    g = RNN.GATES[mode] * 4
    c0 = _r(53, (3, 4), dt) if mode == "LSTM" else None
    return (_r(50, (5, 3, g), dt), _r(51, (3, 4), dt), c0, _r(52, (g, 4), dt) * 0.5,
            _r(54, (g,), dt), False)


def _seq_grad(mode, dt):
    gi, h0, c0, w_hh, b_hh, reverse = _seq(mode, dt)
    y, ws = RNN.SEQ_REFS[mode][0](gi, h0, c0, w_hh, b_hh, reverse)
    return (_r(55, y.shape, dt), y, ws, h0, c0, w_hh, reverse)


def _recurrent_cases():
    cases = {}
    for mode, op in RNN.SEQ_OPS.items():
        fwd, bwd = RNN.SEQ_REFS[mode]
        cases[op] = (False, lambda dt, mode=mode, fwd=fwd: (fwd, _seq(mode, dt)))
        cases[op + "_grad"] = (False, lambda dt, mode=mode, bwd=bwd: (bwd, _seq_grad(mode, dt)))
    return cases


# op -> (exact, (dtype) -> (reference, args)); in-place operations are compared on what they
# write (the arguments are copied for each run)
CASES = {
    "relu": (True, lambda dt: (E._relu, (_r(1, (64, 64), dt),))),
    "leaky_relu": (True, lambda dt: (E._leaky, (_r(1, (64, 64), dt), 0.1))),
    "gelu": (False, lambda dt: (E._gelu_np, (_r(1, (64, 64), dt),))),
    "relu_grad": (True, lambda dt: (E._relu_grad, (_r(2, (128, 64), dt), _r(3, (128, 64), dt)))),
    "leaky_relu_grad": (True, lambda dt: (
        E._leaky_grad, (ARRAYS, _r(2, (128, 64), dt), _r(3, (128, 64), dt), 0.1))),
    "gelu_grad": (False, lambda dt: (
        E._gelu_grad, (ARRAYS, _r(2, (128, 64), dt), _r(3, (128, 64), dt)))),
    "softmax": (False, lambda dt: (SM._softmax, (_r(4, (6, 10), dt), -1))),
    "log_softmax": (False, lambda dt: (SM._log_softmax, (_r(4, (6, 10), dt), 1))),
    "softmax_grad": (False, lambda dt: (
        SM._softmax_grad, (ARRAYS, _r(5, (6, 10), dt), _probs(6, (6, 10), dt), -1))),
    "log_softmax_grad": (False, lambda dt: (
        SM._log_softmax_grad, (ARRAYS, _r(5, (6, 10), dt), np.log(_probs(6, (6, 10), dt)), -1))),
    "cross_entropy": (False, lambda dt: (OL._ce, (
        _r(7, (6, 10), dt), np.arange(6, dtype=np.int64), np.full(6, 1 / 6, dt), True))),
    "cross_entropy_grad": (False, lambda dt: (OL._ce_grad, (
        _r(7, (6, 10), dt), _r(8, (6,), dt), np.arange(6, dtype=np.int64), np.full(6, 0.5, dt),
        False))),
    "ce_targets": (True, lambda dt: (_ce_targets_ref, (
        _r(7, (6, 10), dt), np.array([0, 3, -100, 9, 2, -100], np.int64), 10, -100))),
    # C-contiguous, and transposed logits as CLIP's symmetric loss hands them (copied)
    "cross_entropy_probs": (False, lambda dt: [(OL._ce_probs, (
        _r(7, (6, 10), dt), _probs(9, (6, 10), dt), 0.5, True)), (OL._ce_probs, (
            _r(7, (10, 6), dt).T, _probs(9, (6, 10), dt), 1.0, False))]),
    "cross_entropy_probs_grad": (False, lambda dt: [(OL._ce_probs_grad, (
        ARRAYS, _r(8, (6,), dt), _r(7, (6, 10), dt), _probs(9, (6, 10), dt), 0.5, False, 0))]
        + [(OL._ce_probs_grad, (ARRAYS, _r(8, (6,), dt), _r(7, (10, 6), dt).T,
                                _probs(9, (6, 10), dt), 0.5, False, i)) for i in (0, 1)]
        # a numpy scalar seed, as the VJP of a scalar op hands it on
        + [(OL._ce_probs_grad, (ARRAYS, dt(1.5), _r(7, (6, 10), dt), _probs(9, (6, 10), dt),
                                0.5, True, 0))]),
    "outside_unit": (True, lambda dt: (OL._outside_unit_np, (_r(10, (5, 7), dt, 0.0, 1.0),))),
    "binary_cross_entropy": (False, lambda dt: (OL._bce, (
        _r(11, (4, 8), dt, 0.01, 0.99), _r(12, (4, 8), dt, 0, 1), 1 / 32, True))),
    "binary_cross_entropy_with_logits": (False, lambda dt: (OL._bce_logits, (
        _r(11, (4, 8), dt), _r(12, (4, 8), dt, 0, 1), 1.0, False))),
    "binary_cross_entropy_grad": (False, lambda dt: (OL._bce_grad, (
        ARRAYS, _r(13, (4, 8), dt), _r(11, (4, 8), dt, 0.01, 0.99), _r(12, (4, 8), dt, 0, 1),
        1.0, 0, False))),
    "add_bias": (True, lambda dt: (LIN._add_bias_np, (_r(14, (128, 128), dt), _r(15, (128,), dt)))),
    "linear_gemm": (False, lambda dt: [(LIN._gemm_bias, (_r(14, (110, 40), dt), _r(15, (96, 40), dt), b))
                                       for b in (_r(16, (96,), dt), None)]),
    "bias_relu": (True, lambda dt: [(LIN._bias_relu_np, (_r(14, (70, 40), dt), b))
                                    for b in (_r(15, (40,), dt), None)]),
    "relu_bias_grad": (True, lambda dt: [(LIN._relu_bias_grad_np, (
        _r(16, (70, 40), dt), np.maximum(_r(17, (70, 40), dt), 0), with_bias))
        for with_bias in (True, False)]),
    "scatter_add_rows": (False, lambda dt: (C._segment_rows_np, (
        _r(16, (20, 3), dt), np.random.default_rng(17).integers(0, 6, 20), 6, False))),
    "layer_norm": (False, lambda dt: (N._ln, (
        _r(18, (4, 8), dt), _r(19, (8,), dt), _r(20, (8,), dt), 8, 1e-5))),
    "layer_norm_grad": (False, lambda dt: (N._ln_grad, (
        ARRAYS, _r(21, (4, 8), dt), _r(18, (4, 8), dt), _r(19, (8,), dt), 8, (8,), 1e-5,
        (True, True, True)))),
    "batch_norm": (False, lambda dt: (N._bn, (
        _r(22, (4, 3, 5, 5), dt), _r(23, (3,), dt), _r(24, (3,), dt), 1e-5))),
    "batch_norm_grad": (False, lambda dt: (N._bn_grad, (
        ARRAYS, _r(25, (4, 3, 5, 5), dt), _r(22, (4, 3, 5, 5), dt), _r(23, (3,), dt), 1e-5,
        (True, True, True)))),
    "batch_stats": (False, lambda dt: (N._batch_stats_np, (_r(22, (4, 3, 5, 5), dt),))),
    "max_pool2d": (True, lambda dt: [(OP._max_pool, (x, geom)) for x, geom in _pools(dt)]),
    "max_pool2d_grad": (True, lambda dt: [
        (OP._max_pool_grad, (_r(27, (*x.shape[:2], *geom.out_hw), dt), x,
                            OP._max_pool(x, geom), geom)) for x, geom in _pools(dt)]),
    "batched_matmul": (False, lambda dt: (A._matmul_np, (
        _r(28, (2, 3, 5, 4), dt), _r(29, (2, 3, 4, 6), dt), None))),
    "attention_softmax": (False, lambda dt: (A._scores_to_probs, (
        _r(28, (2, 2, 5, 5), dt), _r(29, (2, 2, 5, 5), dt), 0.5))),
    "attention_score_grad": (False, lambda dt: (A._score_grad, (
        _probs(30, (2, 2, 5, 5), dt), _r(31, (2, 2, 5, 5), dt), _r(32, (2, 2, 5, 4), dt),
        _r(33, (2, 2, 5, 4), dt), 0.5, np.empty((2, 2, 5, 5), dt)))),
    "attention_qkv": (False, lambda dt: (A._attn_qkv, (_heads(dt)[0], None, 0.35, None))),
    "attention_qkv_grad": (False, lambda dt: (A._attn_qkv_grad, (
        ARRAYS, _r(34, (2, 2, 6, 8), dt), _heads(dt)[1], _heads(dt)[0], None, 0.35,
        (True, False), None))),
    "im2col": (True, lambda dt: (CV._im2col, (_r(35, (2, 3, 6, 6), dt), _CONV))),
    "col2im": (True, lambda dt: (CV._col2im, (_r(36, (27, 72), dt), _CONV))),
    "conv_unpack": (True, lambda dt: (CV._unpack, (
        _r(37, (1, 4, 72), dt), _r(38, (4,), dt), np.empty((2, 4, 6, 6), dt)))),
    "conv_pack": (True, lambda dt: (CV._pack, (_r(39, (2, 4, 6, 6), dt), 2))),
    "conv_bias_grad": (False, lambda dt: (CV._bias_grad, (_r(39, (2, 4, 6, 6), dt),))),
    "adam": (True, _adam_case),
    "sgd": (True, _sgd_case),
    "conv2d": (False, lambda dt: [(CV._conv2d_ref, c[:3] + c[4:]) for c in _conv_cases(dt)]),
    "conv2d_input_grad": (False, lambda dt: [(CV._input_grad_ref, (c[3], c[1], c[4], c[5]))
                                             for c in _conv_cases(dt)]),
    "conv2d_weight_grad": (False, lambda dt: [
        (CV._weight_grad_ref, (c[3], c[0], c[4], c[5], c[1].shape)) for c in _conv_cases(dt)]),
    "gelu_tanh": (False, lambda dt: (E._gelu_tanh_np, (_r(60, (64, 64), dt),))),
    "gelu_tanh_grad": (False, lambda dt: (
        E._gelu_tanh_grad, (ARRAYS, _r(61, (128, 64), dt), _r(62, (128, 64), dt)))),
    "erf": (False, lambda dt: (_special.erf, (_r(63, (64, 64), dt),))),
    "erf_grad": (False, lambda dt: (
        E._erf_grad, (ARRAYS, _r(64, (128, 64), dt), _r(65, (128, 64), dt)))),
    "getitem_rows": (True, lambda dt: (IX._getitem_np, (
        _r(66, (6, 50, 4), dt), (slice(None), np.array([[3, -1], [49, 0], [7, 7]])), True,
        (6, 50, 4)))),
    "index_grad_rows": (True, lambda dt: (IX._scatter_fwd, (
        _r(67, (6, 40, 4), dt), (slice(None), np.random.default_rng(68).integers(-9, 9, 40)),
        (6, 9, 4), True))),
    "take_rows": (True, lambda dt: (C._take_fwd, (
        _r(69, (50, 8), dt), np.array([[1, 2], [49, 0]]), 0, 50, None, False))),
}
CASES.update(_recurrent_cases())

# image layers: padding of the last two axes, resampling by index, instance norm
_IH, _IW = np.array([0, 0, 1, 2, 2, 4]), np.array([0, 1, 1, 2, 3, 3, 4])  # sorted sources
_LH = (np.array([[0, 0, 1, 3], [1, 1, 2, 4]]), np.array([[1.0, 0.75, 0.5, 0.25],
                                                           [0.0, 0.25, 0.5, 0.75]]))
_LW = (np.array([[0, 1, 1, 2, 5], [1, 2, 2, 3, 5]]), np.array([[0.5, 1.0, 0.2, 0.6, 1.0],
                                                                 [0.5, 0.0, 0.8, 0.4, 0.0]]))
CASES.update({
    "pad": (True, lambda dt: (SH._pad_np, (
        _r(60, (2, 3, 5, 6), dt), ((0, 0), (0, 0), (2, 1), (1, 3)), "reflect", 0.0))),
    "pad_grad": (False, lambda dt: (SH._reflect_grad_np, (
        _r(61, (2, 3, 8, 10), dt), ((0, 0), (0, 0), (2, 1), (1, 3)), "edge"))),
    "resize_nearest2d": (True, lambda dt: (RS._nearest_np, (_r(62, (2, 3, 5, 5), dt), _IH, _IW))),
    "resize_nearest2d_grad": (False, lambda dt: (RS._nearest_grad_np, (
        _r(63, (2, 3, 6, 7), dt), _IH, _IW, 5, 5))),
    "resize_linear2d": (True, lambda dt: (RS._linear_np, (
        _r(64, (2, 3, 5, 6), dt), _LH[0], _LH[1].astype(dt), _LW[0], _LW[1].astype(dt)))),
    "resize_linear2d_grad": (False, lambda dt: (RS._linear_grad_np, (
        _r(65, (2, 3, 4, 5), dt), _LH[0], _LH[1].astype(dt), _LW[0], _LW[1].astype(dt), 5, 6))),
    "instance_norm": (False, lambda dt: (N._in, (
        _r(66, (2, 3, 4, 5), dt), _r(67, (3,), dt), _r(68, (3,), dt), 1e-5))),
    "instance_norm_grad": (False, lambda dt: (N._in_grad, (
        ARRAYS, _r(69, (2, 3, 4, 5), dt), _r(66, (2, 3, 4, 5), dt), _r(67, (3,), dt), 1e-5,
        (True, True, True)))),
})


def _copy(a):
    if type(a) is tuple:  # the arguments (a geometry, a named tuple, is a value)
        return tuple(_copy(v) for v in a)
    if isinstance(a, np.ndarray):
        return a.copy()
    if isinstance(a, dict):
        return {k: _copy(v) for k, v in a.items()}
    return a


def _leaves(x):
    """The arrays and numbers of a result, or of the arguments an in-place run wrote."""
    if isinstance(x, (tuple, list)):
        return [v for item in x for v in _leaves(item)]
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _leaves(x[k])]
    if x is None or isinstance(x, (np.ndarray, int, float, np.number)):
        return [x]
    return []  # the optimizer's group: its parameters, not the arrays it updates


def _same(got, want, exact: bool, dtype) -> None:
    if exact:
        np.testing.assert_array_equal(got, want)
        return
    tol = 1e-10 if dtype == np.float64 else 2e-5
    g64 = np.asarray(got, np.float64)
    w64 = np.asarray(want, np.float64)
    np.testing.assert_allclose(g64, w64, rtol=tol, atol=tol * max(1.0, float(np.abs(w64).max(
        initial=0.0))))


def test_every_registered_implementation_has_a_case():
    missing = sorted({impl.op for impl in registry.implementations()} - set(CASES))
    assert not missing, f"registered implementations without a sample case here: {missing}"
    unknown = sorted(set(CASES) - {impl.op for impl in registry.implementations()})
    assert not unknown, f"cases for operations nothing registers: {unknown}"


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(CASES))
def test_implementation_equals_its_reference(op, dtype):
    exact, case = CASES[op]
    cases = case(dtype)
    for impl in registry.implementations(op):
        # one case, or a list of cases (strategies that fit different shapes): each
        # implementation runs on every case that fits it, at least one
        fitting = [c for c in (cases if isinstance(cases, list) else [cases]) if impl.fits(*c[1])]
        assert fitting, f"{impl}: no sample case fits it"
        for reference, args in fitting:
            _check_against_reference(impl, reference, args, exact, dtype)


def _check_against_reference(impl, reference, args, exact, dtype):
    a_ref, a_run = _copy(args), _copy(args)
    want = reference(*a_ref)
    got = impl.run(*a_run)
    if want is None:  # in place: compare what each wrote
        assert got is None, f"{impl} returned a value where its reference writes in place"
        want, got = a_ref, a_run
    wl, gl = _leaves(want), _leaves(got)
    assert len(wl) == len(gl), f"{impl}: {len(gl)} results, its reference {len(wl)}"
    for w, g in zip(wl, gl, strict=True):
        if w is None or g is None:
            assert w is None and g is None, impl
        elif isinstance(w, np.ndarray) or isinstance(g, np.ndarray):
            assert np.shape(g) == np.shape(w), f"{impl}: shape {np.shape(g)}, not {np.shape(w)}"
            _same(g, w, exact, dtype)
        else:
            assert g == w or _same(g, w, exact, dtype) is None, impl


@numba_only
def test_gradient_implementations_leave_tensors_to_the_reference():
    # an outer tape recording backward hands Tensors: no kernel fits, the reference records
    g, ans = tg.tensor(_r(2, (128, 64), np.float32)), tg.tensor(_r(3, (128, 64), np.float32))
    for impl in registry.implementations("relu_grad"):
        assert not impl.fits(g, ans)
    xt = tg.tensor(_r(1, (128, 64), np.float64))
    with tg.Tape() as outer:
        outer.watch(xt)
        with tg.Tape() as inner:
            inner.watch(xt)
            y = tg.gelu(xt).sum()
        (dx,) = inner.gradient(y, [xt])
        s = dx.sum()
    (ddx,) = outer.gradient(s, [xt])
    x = xt.numpy()
    pdf = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(ddx.numpy(), pdf * (2 - x * x), rtol=1e-9, atol=1e-12)


class _Compiling(registry.Impl):
    """An implementation whose machine code is never ready."""

    __slots__ = ("calls",)

    def run(self, *args):
        self.calls += 1
        raise registry.NotReady


def test_not_ready_falls_back_to_the_reference(monkeypatch):
    fake = _Compiling("relu", "compiling", lambda x: True, "elementwise:relu")
    fake.calls = 0
    monkeypatch.setitem(registry._TABLE, "relu", [fake, *registry._TABLE.get("relu", [])])
    monkeypatch.setattr(registry, "_ACTIVE", [registry._TABLE])  # as when numba is selected
    x = _r(1, (64, 64), np.float32)
    seen = []
    out = registry.dispatch("relu", lambda a: (seen.append(a), np.maximum(a, 0))[1], x)
    assert fake.calls == 1 and len(seen) == 1 and seen[0] is x
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_nothing_fits_takes_the_reference(monkeypatch):
    calls = []
    impl = registry.Impl("test_op", "never", lambda *a: False, "elementwise:relu")
    monkeypatch.setitem(registry._TABLE, "test_op", [impl])
    monkeypatch.setattr(registry, "_ACTIVE", [registry._TABLE])
    assert registry.dispatch("test_op", lambda a, b: calls.append((a, b)) or a + b, 2, 3) == 5
    assert calls == [(2, 3)]


def test_register_names_a_module_function():
    with pytest.raises(ValueError, match="module:function"):
        registry.register("relu", "bad", lambda x: True, "elementwise.relu")


def test_numpy_selection_leaves_the_table_unused():
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import tapegrad as tg\n"
        "from tapegrad._kernels import registry\n"
        "x = tg.tensor(np.linspace(-2, 2, 8192, dtype=np.float32).reshape(64, 128))\n"
        "with tg.Tape() as tape:\n"
        "    tape.watch(x)\n"
        "    y = tg.softmax(tg.relu(x), axis=-1).sum() + tg.gelu(x).sum()\n"
        "(g,) = tape.gradient(y, [x])\n"
        "assert registry._ACTIVE[0] == {} and registry.implementations(), registry._ACTIVE\n"
        "assert 'numba' not in sys.modules, 'numba was imported'\n"
        "print('references only')\n"
    )
    env = {**os.environ, "TAPEGRAD_KERNELS": "numpy"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "references only"
