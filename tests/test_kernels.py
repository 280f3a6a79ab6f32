"""Compiled kernels (numba) against their numpy references and PyTorch, and the switch.

Every compiled kernel is compared with the numpy code it replaces (the reference, selected by
``TAPEGRAD_KERNELS=numpy``) on the same arrays, and through the public layers with PyTorch,
forward and backward. Skipped where numba is not installed (the numpy path is then the one the
rest of the suite tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import _kernels
from tapegrad._kernels import conv_table as CT
from tapegrad.nn import _f_pool
from tapegrad.ops import _conv, _pool

numba_only = pytest.mark.skipif(_kernels.numba() is None, reason="numba kernels not selected")


def _reference(monkeypatch, fn, *args):
    """``fn(*args)`` with the numpy kernels (the reference)."""
    with monkeypatch.context() as m:
        m.setattr(_kernels, "usable", lambda *a: False)
        return fn(*args)


def _geom(x, k=2, s=None, p=0, d=1, ceil=False):
    return _f_pool._pool_args(tg.tensor(x), k, s, p, d, ceil, "max_pool2d")


POOL_SHAPES = [(2, 3, 8, 8), (1, 1, 2, 2), (3, 2, 7, 9), (64, 8, 26, 26), (2, 2, 5, 4)]


@numba_only
@pytest.mark.parametrize("shape", POOL_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_max_pool_kernels_equal_the_numpy_reference(monkeypatch, shape, dtype, parallel):
    from tapegrad._kernels import pool

    # the two-thread twins on every call (where the pool is shared), or never
    monkeypatch.setattr(pool, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    rng = np.random.default_rng(0)
    x = np.round(rng.standard_normal(shape) * 2).astype(dtype)  # many ties in a window
    geom = _geom(x)
    out = _pool._max_pool_fwd(x, geom)
    ref = _reference(monkeypatch, _pool._max_pool_fwd, x, geom)
    assert out.dtype == ref.dtype and np.array_equal(out, ref)
    g = rng.standard_normal(out.shape).astype(dtype)
    dx = _pool._max_pool_grad_fwd(g, x, out, geom)
    ref_dx = _reference(monkeypatch, _pool._max_pool_grad_fwd, g, x, out, geom)
    assert dx.dtype == ref_dx.dtype and np.array_equal(dx, ref_dx)
    if shape[2] % 2 or shape[3] % 2:  # what no window reaches: zero
        assert not dx[:, :, 2 * out.shape[2]:].any() and not dx[..., 2 * out.shape[3]:].any()


@numba_only
def test_max_pool_kernel_propagates_nan_as_numpy(monkeypatch):
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 1, 1] = np.nan
    geom = _geom(x)
    out = _pool._max_pool_fwd(x, geom)
    ref = _reference(monkeypatch, _pool._max_pool_fwd, x, geom)
    assert np.isnan(out[0, 0, 0, 0]) and np.array_equal(out, ref, equal_nan=True)


@numba_only
def test_max_pool_kernel_reads_non_contiguous_inputs():
    x = np.random.default_rng(1).standard_normal((4, 6, 6, 3)).astype(np.float32)
    xt = x.transpose(0, 3, 1, 2)  # (4, 3, 6, 6), not contiguous
    out = F.max_pool2d(tg.tensor(xt), 2).numpy()
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(np.ascontiguousarray(xt)), 2).numpy()
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 4, 9, 8), (1, 2, 2, 2)])
def test_max_pool_2x2_matches_torch_forward_and_backward(dtype, shape):
    rng = np.random.default_rng(2)
    x = np.round(rng.standard_normal(shape), 1).astype(dtype)  # ties: the first maximum wins
    g = rng.standard_normal((shape[0], shape[1], shape[2] // 2, shape[3] // 2)).astype(dtype)
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.max_pool2d(xt, 2)
        loss = (y * tg.tensor(g)).sum()
    dx = tape.gradient(loss, xt).numpy()
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.max_pool2d(tx, 2)
    ty.backward(torch.from_numpy(g))
    assert np.array_equal(y.numpy(), ty.detach().numpy())
    assert np.array_equal(dx, tx.grad.numpy())


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120, check=False
    )


def test_tapegrad_kernels_numpy_selects_the_reference_with_one_line():
    code = (
        "import numpy as np, tapegrad as tg, tapegrad.nn.functional as F\n"
        "from tapegrad import _kernels\n"
        "F.max_pool2d(tg.ones((1, 1, 4, 4)), 2); F.max_pool2d(tg.ones((1, 1, 4, 4)), 2)\n"
        "print(_kernels.selection(), _kernels.numba() is None)\n"
    )
    r = _run(code, TAPEGRAD_KERNELS="numpy")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "numpy kernels True"
    assert r.stderr.count("tapegrad: using the numpy kernels") == 1, r.stderr


def test_a_missing_numba_selects_the_reference():
    code = (
        "import sys; sys.modules['numba'] = None\n"  # import numba now raises ImportError
        "import tapegrad as tg, tapegrad.nn.functional as F\n"
        "from tapegrad import _kernels\n"
        "print(F.max_pool2d(tg.arange(16.0).reshape(1, 1, 4, 4), 2).tolist())\n"
        "print(_kernels.numba() is None)\n"
    )
    r = _run(code, TAPEGRAD_KERNELS="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[[[[5.0, 7.0], [13.0, 15.0]]]]", "True"]
    assert "numba did not import" in r.stderr and r.stderr.count("\n") == 1


def test_an_unknown_tapegrad_kernels_value_is_an_error():
    r = _run("from tapegrad import _kernels; _kernels.numba()", TAPEGRAD_KERNELS="fortran")
    assert r.returncode != 0
    assert "TAPEGRAD_KERNELS must be 'numba' or 'numpy', got 'fortran'" in r.stderr


def test_the_cache_goes_to_the_platforms_cache_folder_not_the_package(monkeypatch, tmp_path):
    from tapegrad._kernels import runtime

    for var in ("NUMBA_CACHE_DIR", "TAPEGRAD_CACHE_DIR", "TAPEGRAD_KERNEL_FOLDER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(runtime, "_FOLDER", {})
    monkeypatch.setattr(runtime.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    digest = "kernels-" + _kernels.sources_digest(_kernels._HERE)
    assert _kernels.cache_dir() == os.path.join(str(tmp_path), "tapegrad", digest)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert _kernels.cache_dir() == os.path.join(str(tmp_path / "numba"), digest)
    monkeypatch.setenv("TAPEGRAD_CACHE_DIR", str(tmp_path / "mine"))  # tapegrad's own wins
    assert _kernels.cache_dir() == os.path.join(str(tmp_path / "mine"), digest)
    assert not str(_kernels.cache_dir()).startswith(str(_kernels._HERE))


def test_unused_earlier_cache_folders_are_removed_and_ones_in_use_kept(tmp_path):
    from tapegrad._kernels import runtime

    stale, recent = tmp_path / "kernels-0123456789abcdef", tmp_path / "kernels-00000000000000aa"
    for d in (stale, recent):
        d.mkdir()
        (d / "f.nbc").write_bytes(b"old")
    (recent / ".used").touch()  # another version's process opened it just now
    week_ago = time.time() - runtime.STALE_AFTER_S - 60
    os.utime(stale, (week_ago, week_ago))
    (tmp_path / "fused").mkdir()  # tg.compile's folder stays
    keep = tmp_path / "kernels-fedcba9876543210"
    keep.mkdir()
    runtime._prune(str(tmp_path), str(keep))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fused", "kernels-00000000000000aa", "kernels-fedcba9876543210"]
    assert (keep / ".used").exists()  # marked in use for the other versions' processes


def test_a_kernel_whose_source_file_vanished_compiles_without_the_cache(tmp_path, capfd):
    # a cache folder emptied under a running program: numba cannot cache a function whose file
    # is gone; the kernel still compiles and runs, with one line on stderr
    import importlib.util

    from tapegrad._kernels import runtime

    src = tmp_path / "vanishing_kernel.py"
    src.write_text("def twice(a):\n    return a * 2.0\n")
    spec = importlib.util.spec_from_file_location("vanishing_kernel", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src.unlink()
    before = len(runtime._NO_CACHE)
    k = runtime.jit()(mod.twice)
    assert k(np.float64(3.0)) == 6.0
    assert len(runtime._NO_CACHE) == before + 1
    err = capfd.readouterr().err
    assert err.count("cannot use the disk cache") == (1 if before == 0 else 0)


def test_the_cache_folder_changes_with_any_kernel_source(tmp_path):
    # numba keys a cached function on its own file; a helper inlined from another module must
    # invalidate it too, so the folder is named after all the modules' sources
    (tmp_path / "a.py").write_text("def f(): return 1\n")
    (tmp_path / "b.py").write_text("def g(): return 2\n")
    before = _kernels.sources_digest(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.py").write_text("def f(): return 1\n")
    (other / "b.py").write_text("def g(): return 3\n")  # only the helper's module differs
    assert _kernels.sources_digest(other) != before
    assert _kernels.sources_digest(tmp_path) == before  # stable within a process
    assert len(before) == 16 and int(before, 16) >= 0


def _conv_geom(shape, k, s, p, d):

    n, c, h, w = shape
    ho, wo = (_conv.out_size(v, kk, s, (p, p), d) for v, kk in zip((h, w), k, strict=True))
    return _conv.Geom(shape, k, (s, s), ((p, p), (p, p)), (d, d), (ho, wo))


CONV_CASES = [  # (N, C, H, W), kernel, stride, padding, dilation
    ((2, 3, 7, 6), (3, 3), 1, 0, 1),
    ((1, 2, 8, 8), (3, 3), 2, 1, 1),
    ((2, 1, 9, 7), (3, 2), 1, 2, 2),
    ((3, 4, 5, 5), (1, 1), 1, 0, 1),
    ((2, 2, 10, 11), (5, 3), 3, 2, 1),
    ((64, 8, 13, 13), (3, 3), 1, 0, 1),
]


@numba_only
@pytest.mark.parametrize(("shape", "k", "s", "p", "d"), CONV_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_and_col2im_kernels_equal_the_numpy_reference_bit_for_bit(monkeypatch, shape, k, s, p, d, dtype):

    geom = _conv_geom(shape, k, s, p, d)
    rows = shape[1] * k[0] * k[1]
    cols = np.random.default_rng(3).standard_normal((rows, shape[0] * geom.out_hw[0] * geom.out_hw[1]))
    cols = cols.astype(dtype)
    out = _conv._col2im_fwd(cols, geom)
    ref = _reference(monkeypatch, _conv._col2im_fwd, cols, geom)
    assert out.dtype == ref.dtype and np.array_equal(out, ref)
    strided = np.asfortranarray(cols)  # a non-contiguous input: copied, same result
    assert np.array_equal(_conv._col2im_fwd(strided, geom), ref)
    x = np.random.default_rng(6).standard_normal(shape).astype(dtype)
    c = _conv._im2col_fwd(x, geom)
    ref_c = _reference(monkeypatch, _conv._im2col_fwd, x, geom)
    assert c.dtype == ref_c.dtype and np.array_equal(c, ref_c)
    xt = np.random.default_rng(6).standard_normal(shape[::-1]).astype(dtype).T  # not contiguous
    assert np.array_equal(
        _conv._im2col_fwd(xt, geom), _reference(monkeypatch, _conv._im2col_fwd, xt, geom)
    )


@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "groups", "n"),
    [(1, 0, 1, 1, 3), (2, 1, 1, 2, 1), (1, 2, 2, 1, 2), (3, 1, 2, 4, 2)],
)
def test_conv2d_gradients_match_torch_in_float64(stride, padding, dilation, groups, n):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, 4, 9, 8))
    w = rng.standard_normal((8, 4 // groups, 3, 3))
    b = rng.standard_normal(8)
    xt, wt, bt = tg.tensor(x), tg.Parameter(w), tg.Parameter(b)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.conv2d(xt, wt, bt, stride, padding, dilation, groups)
        loss = (y * y).sum()
    gx, gw, gb = (t.numpy() for t in tape.gradient(loss, [xt, wt, bt]))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, stride, padding, dilation, groups)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for ours, theirs in ((gx, tx), (gw, tw), (gb, tb)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("stride", "padding", "output_padding", "groups"), [(2, 1, 1, 1), (1, 0, 0, 2)])
def test_conv_transpose2d_matches_torch_in_float64(stride, padding, output_padding, groups):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 5, 6))
    w = rng.standard_normal((4, 6 // groups, 3, 3))
    xt, wt = tg.tensor(x), tg.Parameter(w)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.conv_transpose2d(xt, wt, None, stride, padding, output_padding, groups)
        loss = (y * y).sum()
    gx, gw = (t.numpy() for t in tape.gradient(loss, [xt, wt]))
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    ty = torch.nn.functional.conv_transpose2d(tx, tw, None, stride, padding, output_padding, groups)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-10, atol=1e-10)


def _halves(monkeypatch, parallel):
    """The activations' two-thread twins on every call (where the pool is shared), or never."""
    from tapegrad._kernels import elementwise

    monkeypatch.setattr(elementwise, "PARALLEL_MIN", 0 if parallel else 1 << 62)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_relu_kernel_equals_numpy_nan_and_signed_zero_included(monkeypatch, dtype, parallel):
    from tapegrad.ops._elementwise import _relu_fwd

    _halves(monkeypatch, parallel)
    x = np.random.default_rng(7).standard_normal((64, 8, 26, 26)).astype(dtype)
    x.reshape(-1)[:4] = [np.nan, -0.0, 0.0, -np.inf]
    x.reshape(-1)[-3:] = [np.nan, -0.0, -np.inf]  # in the second half too
    out = _relu_fwd(x)
    ref = np.maximum(x, 0).astype(dtype)
    assert out.dtype == ref.dtype and np.array_equal(out, ref, equal_nan=True)
    assert not np.signbit(out).any()
    view = x[:, ::2]  # not contiguous: the numpy code
    assert np.array_equal(_relu_fwd(view), np.maximum(view, 0), equal_nan=True)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("slope", [0.2, 0.0])
@pytest.mark.parametrize("parallel", [False, True])
def test_leaky_relu_kernels_equal_numpy_nan_and_zero_included(monkeypatch, dtype, slope,
                                                              parallel):
    from tapegrad.ops._elementwise import _leaky_fwd, _leaky_vjp

    _halves(monkeypatch, parallel)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 16, 8, 9)).astype(dtype)  # an odd size: halves of 16 and a rest
    x.reshape(-1)[:4] = [np.nan, -0.0, 0.0, -np.inf]
    x.reshape(-1)[-3:] = [np.nan, -0.0, -np.inf]
    g = rng.standard_normal(x.shape).astype(dtype)
    g.reshape(-1)[4] = np.nan
    out = _leaky_fwd(x, slope)  # the compiled pass (contiguous)
    with np.errstate(invalid="ignore"):  # -inf * 0.0 is NaN, in the kernel as in numpy
        ref = np.where(x > 0, x, x * dtype(slope))
    assert out.dtype == dtype and np.array_equal(out, ref, equal_nan=True)
    assert np.array_equal(np.signbit(out), np.signbit(ref))  # -0.0 * slope keeps its sign rule
    grad = _leaky_vjp(tg._autodiff.ARRAYS, g, out, None, slope)  # from the saved output
    assert grad.dtype == dtype
    assert np.array_equal(grad, np.where(x > 0, g, g * dtype(slope)), equal_nan=True)
    view = x[:, 1::2]  # not contiguous: the numpy code, same values
    with np.errstate(invalid="ignore"):
        assert np.array_equal(_leaky_fwd(view, slope),
                              np.where(view > 0, view, view * dtype(slope)), equal_nan=True)


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_bias_kernel_equals_numpys_broadcast_add(dtype):
    from tapegrad.ops._linear import _linear_fwd

    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 5, 7)).astype(dtype)
    w = rng.standard_normal((6, 7)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    b[0] = np.nan
    want = (x.reshape(-1, 7) @ w.T + b).reshape(3, 5, 6)
    got = _linear_fwd(x, w, b)  # the compiled bias add on the folded GEMM output
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    strided = b[None].repeat(2, 0)[:, :].reshape(-1)[::2]  # a non-contiguous bias: numpy's add
    assert np.array_equal(_linear_fwd(x[0], w, strided), x[0] @ w.T + strided, equal_nan=True)


@numba_only
def test_kernels_compile_into_the_folder_tapegrad_cache_dir_names(tmp_path):
    code = (
        "import numpy as np, tapegrad\n"
        "from tapegrad._kernels import elementwise\n"
        "print(elementwise.relu(np.array([-1.0, 2.0], np.float32)).tolist())\n"
    )
    env = {"TAPEGRAD_CACHE_DIR": str(tmp_path), "TAPEGRAD_KERNELS": "", "TAPEGRAD_COMPILE": "wait"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **env},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0.0, 2.0]"
    cached = list(tmp_path.rglob("*.nbi"))
    assert any("_relu" in p.name for p in cached), cached


@numba_only
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_kernels_equal_the_numpy_reference(monkeypatch, stride, groups, bias, dtype):
    """Stride 2 takes im2col + GEMM on pixel-major columns, stride 1 with these few channels
    the direct kernels: both sum in another order than the reference (equal to rounding)."""

    rng = np.random.default_rng(8)
    geom = _conv_geom((5, 4, 9, 7), (3, 3), stride, 1, 1)
    x = rng.standard_normal((5, 4, 9, 7)).astype(dtype)
    w = rng.standard_normal((6, 4 // groups, 3, 3)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype) if bias else None
    assert (CT._direct(geom, groups, w.shape, x, w) is not None) == (stride == 1)
    tol = 1e-12 if dtype == np.float64 else 1e-5

    def same(a, ref):
        assert a.dtype == ref.dtype and a.shape == ref.shape
        np.testing.assert_allclose(a, ref, rtol=tol, atol=tol * np.abs(ref).max())

    y = _conv._conv2d_fwd(x, w, b, geom, groups)
    same(y, _reference(monkeypatch, _conv._conv2d_fwd, x, w, b, geom, groups))
    g = rng.standard_normal(y.shape).astype(dtype)
    for fn, args in (
        (_conv._input_grad_fwd, (g, w, geom, groups)),
        (_conv._weight_grad_fwd, (g, x, geom, groups, w.shape)),
    ):
        same(fn(*args), _reference(monkeypatch, fn, *args))
    gc = g[:, :, ::-1]  # a non-contiguous gradient
    assert np.array_equal(
        _conv._grad_cols(gc, groups), _reference(monkeypatch, _conv._grad_cols, gc, groups)
    )


def _adam_run(opt_cls, dtype, steps=3, **kw):
    """Parameters (one above the compiled loop's threshold, one below) after ``steps`` updates
    from fixed gradients, and the optimizer's moments."""
    rng = np.random.default_rng(3)
    params = [tg.Parameter(rng.standard_normal(s).astype(dtype)) for s in ((70, 90), (5,))]
    opt = opt_cls(params, lr=0.01, **kw)
    for _ in range(steps):
        opt.step({p: tg.tensor(rng.standard_normal(p.shape).astype(dtype)) for p in params})
    state = [(opt.state[p]["exp_avg"].copy(), opt.state[p]["exp_avg_sq"].copy()) for p in params]
    return [p.numpy().copy() for p in params], state


ADAM_CASES = [(tg.optim.Adam, {}), (tg.optim.Adam, {"weight_decay": 0.1}),
              (tg.optim.AdamW, {"weight_decay": 0.1}), (tg.optim.Adam, {"betas": (0.5, 0.999)})]


@numba_only
@pytest.mark.parametrize(("opt_cls", "kw"), ADAM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_adam_kernel_equals_the_numpy_update(monkeypatch, opt_cls, kw, dtype, parallel):
    from tapegrad._kernels import elementwise
    from tapegrad._kernels import optim as kernel

    monkeypatch.setattr(elementwise, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    calls = []
    real = kernel.adam
    monkeypatch.setattr(kernel, "adam", lambda *a: (calls.append(a[0].size), real(*a))[1])
    params, state = _adam_run(opt_cls, dtype, **kw)
    assert calls == [6300] * 3  # the large parameter took the loop, the small one numpy
    ref_params, ref_state = _reference(monkeypatch, lambda: _adam_run(opt_cls, dtype, **kw))
    for a, b in zip(params, ref_params, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    for (m, v), (rm, rv) in zip(state, ref_state, strict=True):
        assert np.array_equal(m, rm) and np.array_equal(v, rv)


@numba_only
@pytest.mark.parametrize(("opt_cls", "kw"), ADAM_CASES)
def test_adam_kernel_matches_pytorch(opt_cls, kw):
    params, _ = _adam_run(opt_cls, np.float32, **kw)
    rng = np.random.default_rng(3)
    t_params = [torch.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
                for s in ((70, 90), (5,))]
    t_opt = getattr(torch.optim, opt_cls.__name__)(t_params, lr=0.01, **kw)
    for _ in range(3):
        for p in t_params:
            p.grad = torch.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32))
        t_opt.step()
    for a, b in zip(params, t_params, strict=True):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-6, atol=1e-7)


@numba_only
def test_adam_kernel_leaves_amsgrad_and_views_to_numpy(monkeypatch):
    from tapegrad._kernels import optim as kernel

    calls = []
    monkeypatch.setattr(kernel, "adam", lambda *a: calls.append(a))
    _adam_run(tg.optim.Adam, np.float32, amsgrad=True)
    assert calls == []  # AMSGrad keeps the numpy update
    big = np.zeros((90, 140), np.float32)
    p = tg.Parameter(big[:, ::2])  # a strided view: the flat loop cannot index it
    opt = tg.optim.Adam([p], lr=0.1)
    opt.step({p: tg.tensor(np.ones((90, 70), np.float32))})
    assert calls == [] and np.allclose(p.numpy(), -0.1)


def _gelu_exact(x):
    """GELU and its derivative in float64 from math.erfc (no cancellation on either side)."""
    import math  # noqa: PLC0415

    xd = x.astype(np.float64).ravel()
    phi = np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in xd]).reshape(x.shape)
    xd = xd.reshape(x.shape)
    return xd * phi, phi + xd * np.exp(-0.5 * xd * xd) / math.sqrt(2.0 * math.pi)


def _gelu_step(x, g):
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        y = F.gelu(xt)
    (dx,) = tape.gradient(y, [xt], output_gradients=[tg.tensor(g)])
    return y.numpy(), dx.numpy()


@numba_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_gelu_kernel_against_float64_the_reference_and_pytorch(monkeypatch, dtype, parallel):
    from tapegrad._kernels import elementwise

    monkeypatch.setattr(elementwise, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    rng = np.random.default_rng(5)
    # every branch: |x / sqrt 2| under 0.9, to 6, past 6, past exp's range; both signs
    x = np.concatenate([np.linspace(-14, 10, 6001), rng.standard_normal(4000) * 3]).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    calls = []
    from tapegrad._kernels import gelu as kernel

    for name in ("gelu", "gelu_grad"):
        real = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *a, real=real: (calls.append(1), real(*a))[1])
    y, dx = _gelu_step(x, g)
    assert len(calls) == 2 and y.dtype == dtype and dx.dtype == dtype
    exact_y, exact_d = _gelu_exact(x)
    if dtype == np.float32:  # within a few float32 ulps of the float64 values, both sides
        mid = x > -4  # below, Phi < 3e-5: relative error to 1e-5, then 0 past exp's range
        np.testing.assert_allclose(y[mid], exact_y[mid], rtol=8e-6, atol=1e-30)
        np.testing.assert_allclose(y[~mid], exact_y[~mid], rtol=2e-5, atol=1e-37)
        np.testing.assert_allclose(dx, g * exact_d, rtol=8e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(y, exact_y, rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(dx, g * exact_d, rtol=1e-12, atol=1e-15)
    ref_y, ref_dx = _reference(monkeypatch, _gelu_step, x, g)
    tol = (1e-5, 4e-7) if dtype == np.float32 else (1e-12, 1e-15)  # the reference's 1 + erf
    np.testing.assert_allclose(y, ref_y, rtol=tol[0], atol=tol[1])
    np.testing.assert_allclose(dx, ref_dx, rtol=tol[0], atol=tol[1])
    tx = torch.from_numpy(x.copy()).requires_grad_()
    ty = torch.nn.functional.gelu(tx)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@numba_only
def test_gelu_kernel_keeps_nan_and_infinities(monkeypatch):
    x = np.full(8192, np.nan, np.float32)
    x[:3] = [np.inf, -np.inf, 0.0]
    y, dx = _gelu_step(x, np.ones_like(x))
    with np.errstate(invalid="ignore"):  # numpy warns of its inf * 0
        ref_y, ref_dx = _reference(monkeypatch, _gelu_step, x, np.ones_like(x))
    assert y[0] == np.inf and y[2] == 0.0 and np.isnan(y[3:]).all()
    assert np.isnan(y[1])  # -inf * Phi(-inf) = -inf * 0, as the reference and PyTorch
    assert dx[2] == 0.5 and np.isnan(dx[3:]).all()
    np.testing.assert_array_equal(y, ref_y)
    np.testing.assert_array_equal(dx, ref_dx)  # at +-inf: Phi + inf * 0, NaN in both


@numba_only
def test_gelu_gradient_of_a_sum_takes_the_kernel(monkeypatch):
    from tapegrad._kernels import gelu as kernel

    seen = []
    real = kernel.gelu_grad
    monkeypatch.setattr(kernel, "gelu_grad", lambda g, x: (seen.append(g.flags.c_contiguous),
                                                           real(g, x))[1])
    x = np.linspace(-4, 4, 9000, dtype=np.float32)
    xt = tg.tensor(x)
    with tg.Tape() as tape:
        tape.watch(xt)
        loss = F.gelu(xt).sum()  # its seed reaches gelu's VJP broadcast, not contiguous
    (dx,) = tape.gradient(loss, [xt])
    assert seen == [True]
    _, exact_d = _gelu_exact(x)
    np.testing.assert_allclose(dx.numpy(), exact_d, rtol=8e-6, atol=1e-6)
