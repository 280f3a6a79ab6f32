"""The kernel table: which compiled implementation serves which operation, and where it fits.

One block per op family. Each ``register(op, name, fits, "module:function")`` names the
operation a primitive dispatches (``registry.dispatch(op, reference, *args)``), a ``fits``
taking the reference's arguments, and the kernel module's entry function, which takes them
too. This module imports numpy only (``import tapegrad`` never imports numba): the kernel
modules are imported when an entry first runs. A threshold in a ``fits`` carries the
measurement that set it. ``fits`` receives Tensors when an outer tape records backward; the
dtype check (``usable``) then says no and the reference runs.

Entries that write into arrays they are given (``add_bias``, ``attention_softmax``,
``attention_score_grad``, ``batched_matmul``, ``conv_unpack``: arrays their primitive has just
made; ``adam``: the optimizer's parameter and moments) make one compiled call, so a
``NotReady`` comes before their first write and the reference starts from the arrays as given.
"""

from __future__ import annotations

from typing import Any

from .. import _kernels as _K
from .._backend import np
from . import conv_table as ct  # numpy only, as this table
from .registry import register, threads_module, tunable

_USABLE = _K.usable
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def floats(*arrays: Any) -> bool:
    """Numpy arrays of one float dtype (float32 or float64), None skipped: ``usable`` without
    its selection check (the table is read only when the kernels are selected). A test that
    replaces ``usable`` (to take the references) is obeyed."""
    if _K.usable is not _USABLE:
        return bool(_K.usable(*arrays))
    dt = None
    for a in arrays:
        if a is None:
            continue
        if type(a) is not np.ndarray:
            return False
        if dt is None:
            dt = a.dtype
            if dt not in (_F32, _F64):
                return False
        elif a.dtype != dt:
            return False
    return True


def flat_floats(p: Any, *arrays: Any) -> bool:
    """Numpy float arrays of ``p``'s dtype and shape, all C-contiguous (loops index them
    flat)."""
    return (type(p) is np.ndarray and p.dtype in (np.float32, np.float64)
            and p.flags.c_contiguous
            and all(type(a) is np.ndarray and a.dtype == p.dtype and a.shape == p.shape
                    and a.flags.c_contiguous for a in arrays))


# -- elementwise activations (elementwise.py, activation.py) ----------------------------------
_ACT_MIN = 1 << 12  # from here the loop's call costs less than numpy's extra pass (activation
# benchmarks, benchmarks/kernels.py)
_ACT_GRAD_MIN = 1 << 13  # one pass without a boolean mask; below, numba's dispatch costs what
# the pass saves


def _act(x: Any, *_: Any) -> bool:
    return x.size >= _ACT_MIN and floats(x) and x.flags.c_contiguous


def _act_grad(g: Any, ans: Any, *_: Any) -> bool:
    return (g.size >= _ACT_GRAD_MIN and floats(g, ans) and g.shape == ans.shape
            and g.flags.c_contiguous and ans.flags.c_contiguous)



register("relu", "loop", _act, "elementwise:relu", min_size=_ACT_MIN)
register("leaky_relu", "loop", _act, "elementwise:leaky_relu")
register("relu_grad", "loop", _act_grad, "activation:relu_grad", min_size=_ACT_GRAD_MIN)
register("leaky_relu_grad", "loop", lambda xp, g, ans, slope: _act_grad(g, ans),
         "activation:leaky_relu_grad_op")


# -- losses (softmax.py, elementwise.py) ------------------------------------------------------
def ce_fits(x: Any, t: Any, coef: Any, *_: Any) -> bool:
    """(N, C) C-contiguous float logits, int64 class indices, coefficients of x's dtype."""
    return (x.ndim == 2 and floats(x, coef) and x.flags.c_contiguous
            and type(t) is np.ndarray and t.dtype == np.int64)


def seed_fits(g: Any, x: Any) -> bool:
    """An output gradient of ``x``'s dtype: an array, or the numpy scalar a scalar op's VJP
    hands on (CLIP's ``(loss_a + loss_b) * 0.5``: every step took the reference)."""
    return (type(g) is np.ndarray or type(g) is x.dtype.type) and g.dtype == x.dtype


def ce_probs_fits(x: Any, t: Any, *_: Any) -> bool:
    # any layout: the kernels copy a transposed operand (CLIP's loss over logits.T)
    return floats(x, t) and x.ndim == 2 and x.shape == t.shape


def bce_fits(x: Any, t: Any, *_: Any) -> bool:
    return floats(x, t) and x.shape == t.shape and x.flags.c_contiguous and t.flags.c_contiguous


register("cross_entropy", "rows", ce_fits, "softmax:cross_entropy")
register("cross_entropy_grad", "rows",
         lambda x, g, t, coef, total: ce_fits(x, t, coef) and seed_fits(g, x),
         "softmax:cross_entropy_grad_op")
register("ce_targets", "one pass", lambda x, t, c, ignore_index: floats(x),
         "softmax:ce_targets_op")
register("cross_entropy_probs", "rows", ce_probs_fits, "softmax:cross_entropy_probs")
register("cross_entropy_probs_grad", "rows",
         lambda xp, g, x, t, scale, total, i: ce_probs_fits(x, t) and seed_fits(g, x),
         "softmax:cross_entropy_probs_grad_op")
register("outside_unit", "loop", lambda a: floats(a) and a.flags.c_contiguous,
         "elementwise:outside_unit")
register("binary_cross_entropy", "loop", bce_fits, "elementwise:bce_probs")
register("binary_cross_entropy_with_logits", "loop", bce_fits, "elementwise:bce_with_logits")
register("binary_cross_entropy_grad", "loop",
         lambda xp, g, x, t, scale, i, logits: bce_fits(x, t) and floats(g, x),
         "elementwise:bce_grad_op")


# -- linear's bias (elementwise.py) --------------------------------------------------------
_ADD_BIAS_MIN = 16384  # below, numba's dispatch costs what the loop saves


def _add_bias(y: Any, b: Any) -> bool:
    return (y.size >= _ADD_BIAS_MIN and y.ndim == 2 and b.ndim == 1 and floats(y, b)
            and y.flags.c_contiguous and b.flags.c_contiguous)


register("add_bias", "loop", _add_bias, "elementwise:add_rows", min_size=_ADD_BIAS_MIN)


# -- layer norm, batch norm (layernorm.py, batchnorm.py) --------------------------------------
register("batch_norm", "channels", lambda x, w, b, eps: floats(x, w, b),
         "batchnorm:batch_norm_y")
register("batch_norm_grad", "channels", lambda xp, g, x, w, eps, needs: floats(g, x, w),
         "batchnorm:batch_norm_grad_op")
register("batch_stats", "channels", floats, "batchnorm:channel_mean_var")


# -- pooling (pool.py) ------------------------------------------------------------------------
def _pool2(geom: Any) -> bool:
    """2x2 windows, stride 2, no padding or dilation: the kernels' geometry."""
    return (geom.kernel == (2, 2) and geom.stride == (2, 2) and geom.dilation == (1, 1)
            and geom.padding == ((0, 0), (0, 0)))


register("max_pool2d", "2x2", lambda x, geom: floats(x) and _pool2(geom), "pool:max_pool")
register("max_pool2d_grad", "2x2", lambda g, x, out, geom: floats(g, x, out) and _pool2(geom),
         "pool:max_pool_grad")


# -- attention (bmm.py, attention.py, attention_heads.py) -------------------------------------
HEADS_MAX_LEN = 24  # tokens: faster than the batched path up to here (docs/design.md)
HEADS_MAX_WIDTH = 64  # a head's width


def heads_fits(qkv: Any, mask: Any, *_: Any) -> bool:
    """Packed (B, L, 3, H, D) C-contiguous with small heads (short sequences, head widths a
    multiple of 8), a 4-D mask or none."""
    if not (floats(qkv, mask) and qkv.flags.c_contiguous and (mask is None or mask.ndim == 4)):
        return False
    n_l, d = qkv.shape[1], qkv.shape[4]
    return 1 <= n_l <= HEADS_MAX_LEN and d % 8 == 0 and 8 <= d <= HEADS_MAX_WIDTH


register("batched_matmul", "threads", floats, "bmm:batched_matmul")
register("attention_softmax", "rows", lambda s, mask, scale: floats(s, mask),
         "attention:softmax_rows_op")
register("attention_score_grad", "rows",
         lambda p, ds, g, out, scale, dmask: floats(p, ds, g, out),
         "attention:score_grad_rows")
register("attention_qkv", "small heads", heads_fits, "attention_heads:forward_op")
register("attention_qkv_grad", "small heads",
         lambda xp, g, ans, qkv, mask, scale, needs, keep: bool(needs[0]) and heads_fits(qkv, mask),
         "attention_heads:backward_op")


# -- convolutions' layout passes (conv.py) ---------------------------------------------------
register("im2col", "one pass", lambda x, geom: floats(x), "conv:im2col")
register("col2im", "one pass", lambda cols, geom: floats(cols), "conv:col2im")
register("conv_unpack", "one pass", lambda y, b, out: floats(y, b), "conv:unpack")
register("conv_pack", "one pass", lambda g, groups: floats(g), "conv:pack_groups")
# one pass per plane: about 2x numpy's strided sum, float64 accumulation
register("conv_bias_grad", "planes", floats, "conv:channel_sum")


# -- optimizers (optim.py) --------------------------------------------------------------------
_OPTIM_MIN = 4096  # Adam's and SGD's loops (below)


def _adam(p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> bool:
    # from 4096 elements: one pass where numpy makes nine, bit for bit the same; below,
    # numba's dispatch costs more than it saves
    return (not group["amsgrad"] and p.size >= _OPTIM_MIN
            and flat_floats(p, g, state["exp_avg"], state["exp_avg_sq"]))


register("adam", "loop", _adam, "optim:adam_step", min_size=_OPTIM_MIN)


def _sgd(p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> bool:
    # from 4096 elements, as Adam's loop: one pass where numpy makes up to four, bit for bit
    # the same; the optimizer's threaded pieces take parameters over 1M elements first
    return p.size >= _OPTIM_MIN and flat_floats(p, g, *(
        [] if state.get("momentum_buffer") is None else [state["momentum_buffer"]]))


register("sgd", "loop", _sgd, "optim:sgd_step", min_size=_OPTIM_MIN)


# -- recurrent layers (rnn.py): a layer-direction's whole sequence, forward and backward ------
def _c_floats(*arrays: Any) -> bool:
    """``floats``, each C-contiguous (None skipped): what the recurrent kernels read."""
    return floats(*arrays) and all(a is None or a.flags.c_contiguous for a in arrays)


def _seq_fits(gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool) -> bool:
    return _c_floats(gi, h0, c0, w_hh, b_hh) and gi.shape[0] > 0


def _grad_fits(g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool) -> bool:
    return _c_floats(g, y, ws, h0, c0, w_hh) and y.shape[0] > 0


def _per_step_large(h0: Any, w_hh: Any) -> bool:
    # the per-step product (B, H) @ (H, G*H) past OpenBLAS's small-matrix size (rnn.SMALL_PRODUCT)
    return h0.shape[0] * w_hh.shape[0] * w_hh.shape[1] > 100**3


# the per-step product in column blocks, or as one: measured per shape
for _op in ("lstm_seq", "gru_seq", "rnn_tanh_seq", "rnn_relu_seq"):
    register(_op, "numba, column blocks", _seq_fits, f"rnn:{_op}_blocked",
             prefer=lambda gi, h0, c0, w_hh, b_hh, reverse: _per_step_large(h0, w_hh))
    register(_op, "numba", _seq_fits, f"rnn:{_op}")
    register(_op + "_grad", "numba, column blocks", _grad_fits, f"rnn:{_op}_grad_blocked",
             prefer=lambda g, y, ws, h0, c0, w_hh, reverse: _per_step_large(h0, w_hh))
    register(_op + "_grad", "numba", _grad_fits, f"rnn:{_op}_grad")
    tunable(_op)
    tunable(_op + "_grad")


# -- image layers: padding, resampling, instance norm (pad.py, resample.py, norm_instance.py) --
_PAD_MODES = ("reflect", "edge", "wrap")


def _widths_fit(pad_width: Any, inner: Any, mode: str) -> bool:
    """No padding before the last two axes; reflection narrower than the padded size."""
    if mode not in _PAD_MODES or any(a or b for a, b in pad_width[:-2]) or min(inner) < 1:
        return False
    return mode != "reflect" or all(
        a < n and b < n for (a, b), n in zip(pad_width[-2:], inner, strict=True))


def _pad_fits(x: Any, pad_width: Any, mode: str, *_: Any) -> bool:
    """Reflection, edge or wrap padding of the last two axes only, of a float array."""
    return x.ndim >= 2 and floats(x) and _widths_fit(pad_width, x.shape[-2:], mode)


def _pad_grad_fits(g: Any, pad_width: Any, mode: str) -> bool:
    return g.ndim >= 2 and floats(g) and _widths_fit(
        pad_width, [n - a - b for (a, b), n in zip(pad_width[-2:], g.shape[-2:], strict=True)],
        mode)


register("pad", "rows", _pad_fits, "pad:pad")
register("pad_grad", "rows", _pad_grad_fits, "pad:pad_grad")


def _planes4(x: Any) -> bool:
    return x.ndim == 4 and x.size > 0 and floats(x)


register("resize_nearest2d", "rows", lambda x, ih, iw: _planes4(x), "resample:nearest")
register("resize_nearest2d_grad", "rows", lambda g, ih, iw, h, w: _planes4(g),
         "resample:nearest_grad")
register("resize_linear2d", "rows", lambda x, ih, wh, iw, ww: _planes4(x) and floats(x, wh, ww),
         "resample:linear")
register("resize_linear2d_grad", "rows",
         lambda g, ih, wh, iw, ww, h, w: _planes4(g) and floats(g, wh, ww),
         "resample:linear_grad")
register("instance_norm", "planes",
         lambda x, w, b, eps: x.ndim >= 3 and x.size > 0 and floats(x, w, b),
         "norm_instance:instance_norm")
register("instance_norm_grad", "planes",
         lambda xp, g, x, w, eps, needs: x.ndim >= 3 and x.size > 0 and floats(g, x, w)
         and g.shape == x.shape,
         "norm_instance:instance_norm_grad")


# -- convolutions' strategies (conv_table.py): chosen by measurement per shape ---------------
def _conv_strategies() -> None:
    for op, p in ct.PASSES.items():
        for name in ct.STRATEGIES:
            fits, prefer = ct.predicates(name)
            register(op, name, ct.adapt(fits, p), f"conv_table:{name}_{p}", ct.adapt(prefer, p))
        tunable(op, reference=True)  # the reference: numpy's im2col + GEMM (ops/_conv.py)


_conv_strategies()
# -- GELU (erf and tanh forms), erf (gelu.py) -------------------------------------------------
def _special(x: Any) -> bool:
    # at every size: the references compute erf in some forty numpy passes, tanh GELU in ten
    # (1 thread, float32: 8 elements 1.6 us against 4.3 for GELU's reference and 1.8 against
    # 1.6 for erf's, 64 elements 1.6 against 33; tanh GELU 1.6 against 4.5)
    return x.size > 0 and floats(x) and x.flags.c_contiguous


def _special_grad(xp: Any, g: Any, x: Any) -> bool:
    # a broadcast seed (the gradient of a sum) is copied by the entry
    return g.shape == x.shape and _special(x) and floats(g, x)


for _op in ("gelu", "gelu_tanh", "erf"):
    register(_op, "loop", _special, f"gelu:{_op}")
    register(_op + "_grad", "loop", _special_grad, f"gelu:{_op}_grad_op")


# -- gathers along an axis and their scatter-adds (gather.py) ---------------------------------
def axis_index(idx: Any) -> tuple[int, Any] | None:
    """``(axis, array)`` when ``idx`` is an integer array alone or after ``axis`` full slices
    (``x[a]``, ``x[:, a]``, ``index_select``, ``index_add``); None otherwise."""
    if type(idx) is np.ndarray:
        return (0, idx) if idx.dtype.kind in "iu" and idx.ndim else None
    if type(idx) is not tuple or not idx:
        return None
    last = idx[-1]
    if type(last) is not np.ndarray or last.dtype.kind not in "iu" or not last.ndim:
        return None
    for s in idx[:-1]:
        if type(s) is not slice or s != slice(None):
            return None
    return len(idx) - 1, last


def _rows_fit(x: Any, idx: Any) -> bool:
    # from 256 elements moved: below, numpy's fancy indexing costs what numba's call does
    return x.size >= 256 and floats(x) and x.flags.c_contiguous and axis_index(idx) is not None


register("getitem_rows", "one pass", lambda x, idx, advanced, shape: _rows_fit(x, idx),
         "gather:getitem_op")
# np.add.at loops per element: the kernel at every size
register("index_grad_rows", "one pass",
         lambda g, idx, shape, advanced: floats(g) and axis_index(idx) is not None,
         "gather:index_grad_op")
register("take_rows", "one pass",
         lambda x, idx, axis, n, zero_row, masked: (
             not masked and x.size >= 256 and floats(x) and type(idx) is np.ndarray
             and idx.dtype.kind in "iu"),
         "gather:take_op")
register("scatter_add_rows", "one pass",
         lambda g2, idx, n, presorted: bool(idx.size) and floats(g2) and idx.dtype.kind in "iu",
         "gather:scatter_add_rows_op")


# -- max pooling's gradient over any window (pool.py): ResNet's 3x3 stride-2 padded pooling ---
# after the 2x2 kernel; the reference makes about 3 kh * kw strided passes (siamese_network at
# 28x28, (64, 64, 14, 14) 3x3 stride 2 padded 1, float32, one thread: 29.7 against 13.7 ms,
# PyTorch's forward and backward 15.5). The forward keeps numpy's kh * kw maximum passes (9.0
# ms against 15.1 for a loop over each window, which does not vectorise).
register("max_pool2d_grad", "window", lambda g, x, out, geom: floats(g, x, out),
         "pool:max_pool_window_grad")


# -- a linear layer followed by ReLU (activation.py): its epilogue and its gradient's first pass
def _rows2(y: Any, *others: Any) -> bool:
    return (y.ndim == 2 and floats(y, *others) and y.flags.c_contiguous
            and all(a is None or (a.flags.c_contiguous and a.shape[-1] == y.shape[1])
                    for a in others))


# every size: one pass where the reference makes two (the add, then numpy's maximum)
register("bias_relu", "loop", lambda y, b: _rows2(y, b) and (b is None or b.ndim == 1),
         "activation:bias_relu")
register("relu_bias_grad", "loop",
         lambda g, ans, with_bias: _rows2(g, ans) and g.shape == ans.shape,
         "activation:relu_bias_grad")


# -- a linear layer's product (bmm.py): x @ w.T or (w @ x.T).T, chosen by measurement ---------
# below 4096 input elements the transposed product never won by more than 0.4 us, where choosing
# costs about 2 us a call (Zen 4, x (N, I) -> O, x @ w.T / transposed: 32x4->1 2.0 / 2.5 us,
# 64x5->32 3.3 / 4.1, 64x32->32 4.8 / 6.2, 64x32->2 2.6 / 2.3, 128x64->64 19.9 / 26.4): the
# small layers of an MLP (make bench (a), pytorch/examples regression) skip the dispatcher
_LINEAR_T_MIN = 1 << 12


def _linear_t_fits(x: Any, w: Any, b: Any) -> bool:
    return (x.ndim == 2 and x.size >= _LINEAR_T_MIN and floats(x, w, b) and x.shape[0] >= 16
            and w.flags.c_contiguous
            and (b is None or b.flags.c_contiguous))


# by hand (TAPEGRAD_TUNE=0): few rows and a wide layer, where it was measured faster (the
# MLP's 128 x 784 -> 512 and 128 x 512 -> 512 at one thread; 1024 rows x 128 -> 512 lost 3x)
register("linear_gemm", "transposed product", _linear_t_fits, "bmm:linear_t",
         prefer=lambda x, w, b: x.shape[0] <= 256 and w.shape[0] >= 2 * x.shape[0],
         min_size=_LINEAR_T_MIN)
tunable("linear_gemm", reference=True)


# -- softmax along the last axis (softmax.py): one thread or the rows in chunks, by measurement
def _last(x: Any, axis: int) -> bool:
    return axis in (-1, x.ndim - 1) and x.size > 0 and floats(x)


def _last_grad(xp: Any, g: Any, ans: Any, axis: int) -> bool:
    return _last(ans, axis) and floats(g, ans)


_ROWS_PARALLEL_MIN = 1 << 15  # elements: the hand threshold of the rows in chunks (softmax over
# keys, 16x4x64x64 float32, two threads: forward 0.196 -> 0.106 ms, backward 0.039 -> 0.026;
# 64x10: 0.0035 against 0.0047, the threads' start-up)


def _rows_threads(x: Any, *_: Any) -> bool:
    """Whether the hand threshold runs a row pass over ``x`` in chunks on several threads."""
    return bool(threads_module().worth(x.size, _ROWS_PARALLEL_MIN))


for _op, _fits in (("softmax", _last), ("log_softmax", _last), ("softmax_grad", _last_grad),
                   ("log_softmax_grad", _last_grad)):
    _grad = _op.endswith("_grad")
    _pick = (lambda xp, g, ans, axis: _rows_threads(ans)) if _grad else _rows_threads
    _fn = _op.replace("_grad", "_grad_last") if _grad else _op + "_last"
    register(_op, "rows, threads", _fits, f"softmax:{_fn}_par", prefer=_pick)
    register(_op, "rows", _fits, f"softmax:{_fn}")
    tunable(_op)


# -- layer norm (layernorm.py): one thread or the rows in chunks, by measurement --------------
def _ln_fits(x: Any, w: Any, b: Any, m: int, eps: float) -> bool:
    return floats(x, w, b)


def _ln_grad_fits(xp: Any, g: Any, x: Any, w: Any, m: int, ns: Any, eps: float,
                  needs: Any) -> bool:
    return floats(g, x, w)


def _ln_threads(x: Any, m: int) -> bool:
    # the hand threshold: 64 rows (two chunks of 32) and _ROWS_PARALLEL_MIN elements
    return x.size >= 64 * m and _rows_threads(x)


register("layer_norm", "rows, threads", _ln_fits, "layernorm:layer_norm_par",
         prefer=lambda x, w, b, m, eps: _ln_threads(x, m))
register("layer_norm", "rows", _ln_fits, "layernorm:layer_norm")
register("layer_norm_grad", "rows, threads", _ln_grad_fits, "layernorm:layer_norm_grad_par",
         prefer=lambda xp, g, x, w, m, ns, eps, needs: _ln_threads(x, m))
register("layer_norm_grad", "rows", _ln_grad_fits, "layernorm:layer_norm_grad_op")
tunable("layer_norm")
tunable("layer_norm_grad")
