"""Instance norm, reflection/replicate/circular padding, resampling and pixel shuffle: values
and gradients against PyTorch, gradients against finite differences (float64, to second
order), and the compiled kernels' parallel forms at 1, 2 and 3 threads."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels
from tapegrad.testing import check_grads

TF = torch.nn.functional


def _both(f_tg, f_torch, x, *params, dtype=np.float64, seed=0):
    """Values and gradients (input, then params) of f(x, *params) in tapegrad and PyTorch."""
    rng = np.random.default_rng(seed)
    xs = [x, *params]
    ts = [torch.tensor(a, requires_grad=True) for a in xs]
    yt = f_torch(*ts)
    gy = rng.standard_normal(tuple(yt.shape)).astype(dtype)
    gts = torch.autograd.grad(yt, ts, torch.tensor(gy))
    tgs = [tg.tensor(a) for a in xs]
    with tg.Tape() as tape:
        tape.watch(*tgs)
        y = f_tg(*tgs)
    gs = tape.gradient(y, tgs, output_gradients=tg.tensor(gy))
    return (y.numpy(), [g.numpy() for g in gs]), (yt.detach().numpy(), [g.numpy() for g in gts])


def _close(got, want, dtype):
    tol = 1e-10 if dtype == np.float64 else 2e-5
    (y, gs), (yt, gts) = got, want
    assert y.shape == yt.shape and y.dtype == dtype
    np.testing.assert_allclose(y, yt, rtol=tol, atol=tol)
    for g, gt in zip(gs, gts, strict=True):
        assert g.shape == gt.shape
        np.testing.assert_allclose(g, gt, rtol=tol * 10, atol=tol * 10)


PADS = [((2, 3, 5, 7), (1, 2, 3, 1)), ((2, 4, 9), (3, 2)), ((1, 2, 4, 4), (3, 3, 3, 3)),
        ((1, 1, 6, 5), (0, 4, 1, 0))]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize(("shape", "pad"), PADS)
def test_pad_matches_torch(shape, pad, mode, dtype):
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    _close(*_both(lambda a: F.pad(a, pad, mode=mode), lambda a: TF.pad(a, pad, mode=mode), x,
                  dtype=dtype), dtype)


def test_padding_layers_and_conv_padding_mode_match_torch():
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8))
    for ours, theirs, a in (
        (tg.nn.ReflectionPad2d((1, 2, 3, 0)), torch.nn.ReflectionPad2d((1, 2, 3, 0)), x),
        (tg.nn.ReplicationPad2d(2), torch.nn.ReplicationPad2d(2), x),
        (tg.nn.ReflectionPad1d(3), torch.nn.ReflectionPad1d(3), x[0]),
    ):
        _close(*_both(ours, theirs, a), np.float64)
    conv = torch.nn.Conv2d(3, 4, 3, padding=2, padding_mode="reflect").double()
    ours = tg.nn.Conv2d(3, 4, 3, padding=2, padding_mode="reflect", dtype=tg.float64)
    ours.load_state_dict({k: v.detach().numpy() for k, v in conv.state_dict().items()})
    np.testing.assert_allclose(ours(tg.tensor(x)).numpy(),
                               conv(torch.tensor(x)).detach().numpy(), rtol=1e-10, atol=1e-10)


RESIZES = [
    dict(scale_factor=2), dict(size=(3, 11)), dict(scale_factor=(0.5, 3)), dict(size=(5, 8)),
    dict(scale_factor=1.7), dict(size=(1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bilinear-ac"])
@pytest.mark.parametrize("kw", RESIZES)
def test_interpolate_matches_torch(kw, mode, dtype):
    kw = dict(kw, mode=mode)
    if mode == "bilinear-ac":
        kw.update(mode="bilinear", align_corners=True)
    elif mode == "bilinear":
        kw.update(align_corners=False)
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 7)).astype(dtype)
    _close(*_both(lambda a: F.interpolate(a, **kw), lambda a: TF.interpolate(a, **kw), x,
                  dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", ["wb", "w", "b", ""])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 9), (3, 2, 2, 3, 2), (2, 3, 1, 2)])
def test_instance_norm_matches_torch(shape, affine, dtype):
    rng = np.random.default_rng(4)
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    params = [rng.standard_normal(c).astype(dtype) for k in "wb" if k in affine]

    def call(fn):
        def f(a, *p):
            it = iter(p)
            return fn(a, weight=next(it) if "w" in affine else None,
                      bias=next(it) if "b" in affine else None)
        return f

    got, want = _both(call(F.instance_norm), call(TF.instance_norm), x, *params, dtype=dtype)
    if dtype == np.float64:
        _close(got, want, dtype)
    else:
        _close_loose(got, want)


def _close_loose(got, want):
    (y, gs), (yt, gts) = got, want
    np.testing.assert_allclose(y, yt, rtol=1e-4, atol=1e-4)
    for g, gt in zip(gs, gts, strict=True):
        np.testing.assert_allclose(g, gt, rtol=1e-4, atol=1e-4)


def test_instance_norm_layer_with_running_stats_matches_torch():
    rng = np.random.default_rng(5)
    ours = tg.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, dtype=tg.float64)
    theirs = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True).double()
    for _ in range(2):
        x = rng.standard_normal((2, 3, 4, 5))
        np.testing.assert_allclose(ours(tg.tensor(x)).numpy(),
                                   theirs(torch.tensor(x)).detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), atol=1e-12)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), atol=1e-12)


def test_instance_norm_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"instance_norm: expected more than 1 spatial element"):
        F.instance_norm(tg.zeros((2, 3, 1, 1)))
    with pytest.raises(ValueError, match=r"instance_norm: weight must have shape \(3,\)"):
        F.instance_norm(tg.zeros((2, 3, 4)), weight=tg.ones(4))


@pytest.mark.parametrize("r", [2, 3])
def test_pixel_shuffle_matches_torch(r):
    x = np.random.default_rng(6).standard_normal((2, 2 * r * r, 3, 4))
    for ours, theirs, a in (
        (lambda t: F.pixel_shuffle(t, r), lambda t: TF.pixel_shuffle(t, r), x),
        (lambda t: F.pixel_unshuffle(t, r), lambda t: TF.pixel_unshuffle(t, r),
         x.reshape(2, 2, 3 * r, 4 * r)),
    ):
        _close(*_both(ours, theirs, a), np.float64)


def _x64(*shape, seed=7):
    return tg.tensor(np.random.default_rng(seed).standard_normal(shape))


@pytest.mark.parametrize("fn", [
    lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"),
    lambda x: F.pad(x, (2, 0, 1, 3), mode="replicate"),
    lambda x: F.pad(x, (1, 1, 2, 2), mode="circular"),
    lambda x: F.interpolate(x, scale_factor=2),
    lambda x: F.interpolate(x, size=(3, 7), mode="nearest-exact"),
    lambda x: F.interpolate(x, scale_factor=(1.5, 2), mode="bilinear"),
    lambda x: F.interpolate(x, size=(6, 3), mode="bilinear", align_corners=True),
    lambda x: F.pixel_shuffle(x, 2),
    lambda x: F.pixel_unshuffle(x, 2),
])
def test_gradients_against_finite_differences(fn):
    check_grads(fn, [_x64(2, 4, 4, 4)])


def test_instance_norm_gradients_against_finite_differences():
    f = lambda x, w, b: F.instance_norm(x, weight=w, bias=b) ** 2  # noqa: E731 - curvature
    check_grads(f, [_x64(2, 3, 3, 4), _x64(3, seed=8), _x64(3, seed=9)], rtol=1e-4, atol=1e-5)


_THREADS = r"""
import numpy as np, numba
from tapegrad._kernels import norm_instance as NI, pad as PD, resample as RS
rng = np.random.default_rng(0)
x = rng.standard_normal((3, 5, 37, 41)).astype(np.float32)
w, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
xp, x2 = np.ascontiguousarray(x).reshape(15, 37, 41), x.reshape(15, -1)
ih, iw = np.arange(74) // 2, np.minimum((np.arange(60) * 0.7).astype(np.int64), 40)
rs = np.searchsorted(ih, np.arange(38)).astype(np.int64)
lh = (np.stack([np.arange(37), np.minimum(np.arange(37) + 1, 36)]),
      np.stack([np.full(37, 0.25, np.float32), np.full(37, 0.75, np.float32)]))
lrs = np.stack([np.searchsorted(lh[0][k], np.arange(38)) for k in (0, 1)]).astype(np.int64)
iwl = np.stack([iw, np.minimum(iw + 1, 40)])
wwl = np.stack([np.full(60, 0.4, np.float32), np.full(60, 0.6, np.float32)])
def runs():
    out = []
    y = np.empty((15, 41, 44), np.float32); PD._fwd_par(xp, y, 3, 1, 0); out.append(y)
    gx = np.empty_like(xp); PD._bwd_par(y, gx, 3, 1, 0); out.append(gx)
    y = np.empty((15, 74, 60), np.float32); RS._near_fwd_par(xp, y, ih, iw, 0); out.append(y)
    gx = np.empty_like(xp); RS._near_bwd_par(y, gx, rs, iw, 0); out.append(gx)
    y = np.empty((15, 37, 60), np.float32)
    RS._lin_fwd_par(xp, y, lh[0], lh[1], iwl, wwl); out.append(y)
    gt, gx = np.empty((15, 37, 41), np.float32), np.empty_like(xp)
    RS._lin_bwd_par(y, gt, gx, lh[1], lrs, iwl, wwl); out.append(gx)
    y = np.empty_like(x2); NI._fwd_par(x2, w, b, 1e-5, y); out.append(y)
    gx, gwb = np.empty_like(x2), np.empty((15, 2)); NI._bwd_par(y, x2, w, 1e-5, gx, gwb)
    out += [gx, gwb]
    return out
res = {}
for n in (1, 2, 3):
    numba.set_num_threads(n)
    res[n] = runs()
for n in (2, 3):
    for a, b_ in zip(res[1], res[n]):
        assert a.tobytes() == b_.tobytes(), n
print("same")
"""


@pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")
def test_parallel_kernels_give_the_same_bits_at_1_2_and_3_threads():
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", _THREADS], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0 and "same" in out.stdout, out.stderr[-3000:]


def test_compiled_step_equals_the_eager_step():
    nn = tg.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pad, self.conv = nn.ReflectionPad2d(1), nn.Conv2d(2, 4, 3)
            self.norm = nn.InstanceNorm2d(4, affine=True)
            self.up = nn.Upsample(scale_factor=2)
            self.up2 = nn.Upsample(size=(13, 9), mode="bilinear")

        def forward(self, x):
            return self.up2(self.up(self.norm(self.conv(self.pad(x))))).relu()

    def run(compiled):
        tg.manual_seed(0)
        m = Net()
        opt = tg.optim.Adam(m.parameters(), lr=1e-2)

        def step(x, t):
            with tg.Tape() as tape:
                loss = ((m(x) - t) ** 2).mean()
            opt.step(tape.gradient(loss, m))
            return loss

        s = tg.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        losses = [s(tg.tensor(rng.standard_normal((2, 2, 6, 5)).astype(np.float32)),
                    tg.tensor(rng.standard_normal((2, 4, 13, 9)).astype(np.float32))).item()
                  for _ in range(3)]
        return losses, [p.numpy().copy() for p in m.parameters()]

    (eager, pe), (compiled, pc) = run(False), run(True)
    assert eager == compiled
    for a, b in zip(pe, pc, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_references_give_c_ordered_outputs_as_the_kernels(mode):
    """The output's layout does not depend on whether a kernel was ready: ``.numpy()`` of an
    upsampled batch can be viewed flat (PyTorch's ``x.view(-1, 784)`` after ``from_numpy``)."""
    from tapegrad.ops import _resize

    x = np.random.default_rng(0).random((4, 1, 8, 8)).astype(np.float32)
    ih = np.minimum(np.arange(28) * 8 // 28, 7)
    if mode == "nearest":
        out = _resize._nearest_np(x, ih, ih)
    else:
        idx = np.stack([ih, np.minimum(ih + 1, 7)])
        wt = np.stack([np.full(28, 0.75, np.float32), np.full(28, 0.25, np.float32)])
        out = _resize._linear_np(x, idx, wt, idx, wt)
    assert out.shape == (4, 1, 28, 28) and out.flags["C_CONTIGUOUS"]
