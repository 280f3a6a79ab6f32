"""Recurrent layers over a whole sequence in one compiled call each way (numba).

A layer-direction's input projection ``gi = x W_ih^T + b_ih`` (T, B, G*H) is one GEMM outside;
these kernels run the time loop: per step the hidden state's product with ``W_hh`` (numpy's
OpenBLAS ``cblas_?gemm``, called from the loop through its address as ``bmm`` does, so no
Python runs between steps; one product, or ``*_blocked``: column blocks under OpenBLAS's
small-matrix size, ``SMALL_PRODUCT``), then every gate in one vectorised pass per row (sigmoid and tanh
from one polynomial ``exp``, ``softmax.fexp``; calling libm's ``tanh`` per element was ten
times slower). Forward writes the states and a workspace of what backward reads (the gate
activations; LSTM also ``c`` and ``tanh(c)``); backward runs the steps in reverse with all
gate gradients in one pass per step and one GEMM back through ``W_hh``. The weight gradients
are GEMMs over the whole sequence, done by the caller (``ops/_rnn.py``), which also holds the
numpy references these follow operation for operation. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from .._backend import np
from . import NotReady, jit
from .bmm import NO_TRANS, _address, call_gemm
from .softmax import fexp


def _gemm(dtype: Any) -> Any:
    """numpy's OpenBLAS ``cblas_?gemm`` for ``dtype``, as an address; NotReady (the reference
    runs) where numpy's OpenBLAS cannot be found."""
    fn = _address(dtype)
    if fn is None:
        raise NotReady
    return np.intp(fn)


def _transposed(w_hh: Any) -> Any:
    """``W_hh^T`` (H, G) in its own rows: OpenBLAS's product with a transposed operand was 1.7x
    slower at (20, 200) @ (200, 800) (word_language_model's step), its copy costs one pass."""
    return np.ascontiguousarray(w_hh.T)


# OpenBLAS's small-matrix kernels (SkylakeX, as numpy's wheel selects on Zen 4) take a
# product of M * N * K up to 100^3 without packing its operands; a larger per-step product
# packs all of W_hh every step. In column blocks under that size, 35 steps of
# (20, 200) @ (200, 800) took 2.24 ms against 2.8 ms as one product, (20, 800) @ (800, 200)
# 2.45 against 3.06 (one thread, AMD EPYC Zen 4). Whether blocks win elsewhere is measured
# (the two are registered side by side and tuned).
SMALL_PRODUCT = 100**3


def column_blocks(m: int, n: int, k: int) -> int:
    """How many column blocks split an (m, k) @ (k, n) product into products of at most
    ``SMALL_PRODUCT`` (at least 2, at most n).

    >>> column_blocks(20, 800, 200), column_blocks(20, 200, 800), column_blocks(3, 16, 4)
    (4, 4, 2)
    """
    return max(1, min(n, max(2, -(-(m * n * k) // SMALL_PRODUCT))))


def _blocks(blocked: bool, m: int, n: int, k: int) -> int:
    return column_blocks(m, n, k) if blocked else 1


@jit(inline="always")
def _ptr(a, offset):  # type: ignore[no-untyped-def]
    return np.intp(a.ctypes.data) + offset * a.itemsize  # an element's address, as BLAS takes it


@jit(inline="always")
def _product(fn, one, m, n, k, pa, pb, pc, isz, blocks):  # type: ignore[no-untyped-def]
    """C (m, n) = A (m, k) @ B (k, n), row-major operands at addresses ``pa``, ``pb``, ``pc``
    (element size ``isz``), as ``blocks`` products of column blocks (1: one product)."""
    w = (n + blocks - 1) // blocks
    for j in range(0, n, w):
        call_gemm(fn, NO_TRANS, NO_TRANS, m, min(w, n - j), k, one, pa, k, pb + j * isz, n,
                  pc + j * isz, n)


# ----------------------------------------------------------------------------------- LSTM


@jit(ieee=True)
def _lstm_fwd(fn, one, gi, h0, c0, w_t, b, k, reverse, y, ws, blocks):  # type: ignore[no-untyped-def]
    steps, n_b, n_g = gi.shape
    n_h = n_g // 4
    two = one + one
    gates = np.empty((n_b, n_g), gi.dtype)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        tp = t + 1 if reverse else t - 1  # the step before: its h in y, its c in ws
        # gates = h @ w_hh^T, h read where the step before wrote it (no state copies)
        _product(fn, one, n_b, n_g, n_h, _ptr(h0, 0) if s == 0 else _ptr(y, tp * n_b * n_h),
                 _ptr(w_t, 0), _ptr(gates, 0), gi.itemsize, blocks)
        for n in range(n_b):
            a, pre, x = ws[t, n], gates[n], gi[t, n]
            # every gate in one vectorised loop: sigmoid where k = 1, tanh where k = 2
            # (tanh(x) = 2 sigmoid(2x) - 1)
            for j in range(n_g):
                a[j] = k[j] / (one + fexp(-k[j] * (pre[j] + x[j] + b[j]))) - (k[j] - one)
            # the cell in short loops over one block each: as one loop over c, h and y
            # (which the compiler cannot prove distinct) it ran scalar, 5x slower
            i, f, g, o = a[:n_h], a[n_h : 2 * n_h], a[2 * n_h : 3 * n_h], a[3 * n_h : 4 * n_h]
            cw, tc = a[4 * n_h : 5 * n_h], a[5 * n_h :]
            cr = c0[n] if s == 0 else ws[tp, n, 4 * n_h : 5 * n_h]
            yr = y[t, n]
            for j in range(n_h):
                cw[j] = f[j] * cr[j] + i[j] * g[j]
            for j in range(n_h):
                tc[j] = two / (one + fexp(-two * cw[j])) - one
            for j in range(n_h):
                yr[j] = o[j] * tc[j]  # o tanh(c)
    y[steps] = ws[0 if reverse else steps - 1, :, 4 * n_h : 5 * n_h]  # the last c


@jit(ieee=True)
def _lstm_bwd(fn, one, g, ws, c0, w_hh, reverse, dgates, dh0, dc0, blocks):  # type: ignore[no-untyped-def]
    steps, n_b, n_g = dgates.shape
    n_h = n_g // 4
    dh = np.zeros_like(dh0)
    dc = g[steps].copy()
    dhv = np.empty(n_h, g.dtype)
    dct = np.empty(n_h, g.dtype)
    for s in range(steps):
        t = s if reverse else steps - 1 - s
        first = s == steps - 1  # the step forward ran first: its c_{t-1} is c0
        tp = t + 1 if reverse else t - 1
        for n in range(n_b):
            # one loop per stored block (see _lstm_fwd): vectorised, where one loop storing
            # five blocks ran scalar
            a, d, gr, dhr, dcr = ws[t, n], dgates[t, n], g[t, n], dh[n], dc[n]
            i, f, gg, o = a[:n_h], a[n_h : 2 * n_h], a[2 * n_h : 3 * n_h], a[3 * n_h : 4 * n_h]
            tc = a[5 * n_h :]
            cp = c0[n] if first else ws[tp, n, 4 * n_h : 5 * n_h]
            for j in range(n_h):
                dhv[j] = gr[j] + dhr[j]
            for j in range(n_h):
                dct[j] = dcr[j] + dhv[j] * o[j] * (one - tc[j] * tc[j])
            di, df, dg, do = d[:n_h], d[n_h : 2 * n_h], d[2 * n_h : 3 * n_h], d[3 * n_h :]
            for j in range(n_h):
                di[j] = dct[j] * gg[j] * (i[j] * (one - i[j]))
            for j in range(n_h):
                df[j] = dct[j] * cp[j] * (f[j] * (one - f[j]))
            for j in range(n_h):
                dg[j] = dct[j] * i[j] * (one - gg[j] * gg[j])
            for j in range(n_h):
                do[j] = dhv[j] * tc[j] * (o[j] * (one - o[j]))
            for j in range(n_h):
                dcr[j] = dct[j] * f[j]
        # dh = dgates[t] @ w_hh
        _product(fn, one, n_b, n_h, n_g, _ptr(dgates, t * n_b * n_g), _ptr(w_hh, 0),
                 _ptr(dh, 0), g.itemsize, blocks)
    dh0[:, :] = dh
    dc0[:, :] = dc


def lstm_seq(  # noqa: PLR0917
    gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """``ops/_rnn._lstm_seq``'s kernel: the states (T + 1, B, H) and the workspace."""
    fn = _gemm(gi.dtype)
    steps, n_b, n_g = gi.shape
    n_h = n_g // 4
    y = np.empty((steps + 1, n_b, n_h), gi.dtype)
    ws = np.empty((steps, n_b, 6 * n_h), gi.dtype)
    b = np.zeros(n_g, gi.dtype) if b_hh is None else b_hh
    k = np.ones(n_g, gi.dtype)
    k[2 * n_h : 3 * n_h] = 2
    _lstm_fwd(fn, gi.dtype.type(1), gi, h0, c0, _transposed(w_hh), b, k, bool(reverse), y, ws,
              _blocks(blocked, n_b, n_g, n_h))
    return y, ws


def lstm_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """``ops/_rnn._lstm_seq_grad``'s kernel: the gates' gradient (T, B, 4H), dh0, dc0."""
    fn = _gemm(g.dtype)
    steps, n_b, _ = ws.shape
    dgates = np.empty((steps, n_b, w_hh.shape[0]), g.dtype)
    dh0, dc0 = np.empty_like(h0), np.empty_like(c0)
    n_g, n_h = w_hh.shape
    _lstm_bwd(fn, g.dtype.type(1), g, ws, c0, w_hh, bool(reverse), dgates, dh0, dc0,
              _blocks(blocked, n_b, n_h, n_g))
    return dgates, dh0, dc0


# ------------------------------------------------------------------------------------ GRU


@jit(ieee=True)
def _gru_fwd(fn, one, gi, h0, w_t, b, reverse, y, ws, blocks):  # type: ignore[no-untyped-def]
    steps, n_b, n_g = gi.shape
    n_h = n_g // 3
    two = one + one
    h = h0.copy()
    gh = np.empty((n_b, n_g), gi.dtype)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        # gh = h @ w_hh^T
        _product(fn, one, n_b, n_g, n_h, _ptr(h, 0), _ptr(w_t, 0), _ptr(gh, 0), gi.itemsize,
                 blocks)
        for n in range(n_b):
            a, p, x, hr, yr = ws[t, n], gh[n], gi[t, n], h[n], y[t, n]
            for j in range(2 * n_h):  # r, z
                a[j] = one / (one + fexp(-(x[j] + (p[j] + b[j]))))
            # one loop per stored block, as in _lstm_fwd (vectorised)
            r, z, nw, hn = a[:n_h], a[n_h : 2 * n_h], a[2 * n_h : 3 * n_h], a[3 * n_h : 4 * n_h]
            ph, bh, xn = p[2 * n_h :], b[2 * n_h :], x[2 * n_h :]
            for j in range(n_h):
                hn[j] = ph[j] + bh[j]
            for j in range(n_h):
                nw[j] = two / (one + fexp(-two * (r[j] * hn[j] + xn[j]))) - one
            for j in range(n_h):
                yr[j] = (hr[j] - nw[j]) * z[j] + nw[j]  # (1 - z) n + z h
            hr[:] = yr


@jit(ieee=True)
def _gru_bwd(fn, one, g, y, ws, h0, w_hh, reverse, dgi, dgh, dh0, blocks):  # type: ignore[no-untyped-def]
    steps, n_b, n_g = dgi.shape
    n_h = n_g // 3
    dh = np.zeros_like(dh0)
    direct = np.empty_like(dh0)
    for s in range(steps):
        t = s if reverse else steps - 1 - s
        tp = t + 1 if reverse else t - 1
        for n in range(n_b):
            hp = h0[n] if s == steps - 1 else y[tp, n]
            a = ws[t, n]
            for j in range(n_h):
                dhv = g[t, n, j] + dh[n, j]
                r = a[j]
                z = a[n_h + j]
                nn = a[2 * n_h + j]
                dpn = dhv * (one - z) * (one - nn * nn)
                dpr = dpn * a[3 * n_h + j] * (r * (one - r))
                dpz = dhv * (hp[j] - nn) * (z * (one - z))
                dgi[t, n, j] = dpr
                dgi[t, n, n_h + j] = dpz
                dgi[t, n, 2 * n_h + j] = dpn
                dgh[t, n, j] = dpr
                dgh[t, n, n_h + j] = dpz
                dgh[t, n, 2 * n_h + j] = dpn * r
                direct[n, j] = dhv * z
        # dh = dgh[t] @ w_hh + dh' z
        _product(fn, one, n_b, n_h, n_g, _ptr(dgh, t * n_b * n_g), _ptr(w_hh, 0), _ptr(dh, 0),
                 g.itemsize, blocks)
        dh += direct
    dh0[:, :] = dh


def gru_seq(  # noqa: PLR0917
    gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """``ops/_rnn._gru_seq``'s kernel: the states (T, B, H) and the workspace."""
    fn = _gemm(gi.dtype)
    steps, n_b, n_g = gi.shape
    y = np.empty((steps, n_b, n_g // 3), gi.dtype)
    ws = np.empty((steps, n_b, 4 * (n_g // 3)), gi.dtype)
    b = np.zeros(n_g, gi.dtype) if b_hh is None else b_hh
    _gru_fwd(fn, gi.dtype.type(1), gi, h0, _transposed(w_hh), b, bool(reverse), y, ws,
             _blocks(blocked, n_b, n_g, n_g // 3))
    return y, ws


def gru_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """``ops/_rnn._gru_seq_grad``'s kernel: the gradients of gi and of the hidden projection
    (T, B, 3H), and dh0."""
    fn = _gemm(g.dtype)
    steps, n_b, _ = ws.shape
    dgi = np.empty((steps, n_b, w_hh.shape[0]), g.dtype)
    dgh = np.empty_like(dgi)
    dh0 = np.empty_like(h0)
    n_g, n_h = w_hh.shape
    _gru_bwd(fn, g.dtype.type(1), g, y, ws, h0, w_hh, bool(reverse), dgi, dgh, dh0,
             _blocks(blocked, n_b, n_h, n_g))
    return dgi, dgh, dh0


# ------------------------------------------------------------------------------------ RNN


@jit(ieee=True)
def _rnn_fwd(fn, one, gi, h0, w_t, b, relu, reverse, y, blocks):  # type: ignore[no-untyped-def]
    steps, n_b, n_h = gi.shape
    two = one + one
    zero = one - one
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        tp = t + 1 if reverse else t - 1
        src = _ptr(h0, 0) if s == 0 else _ptr(y, tp * n_b * n_h)
        # y[t] = h @ w_hh^T
        _product(fn, one, n_b, n_h, n_h, src, _ptr(w_t, 0), _ptr(y, t * n_b * n_h),
                 gi.itemsize, blocks)
        for n in range(n_b):
            yr, x = y[t, n], gi[t, n]
            if relu:
                for j in range(n_h):
                    v = yr[j] + x[j] + b[j]
                    yr[j] = v if v > zero else zero
            else:
                for j in range(n_h):
                    yr[j] = two / (one + fexp(-two * (yr[j] + x[j] + b[j]))) - one


@jit(ieee=True)
def _rnn_bwd(fn, one, g, y, w_hh, relu, reverse, dpre, dh0, blocks):  # type: ignore[no-untyped-def]
    steps, n_b, n_h = dpre.shape
    zero = one - one
    dh = np.zeros_like(dh0)
    for s in range(steps):
        t = s if reverse else steps - 1 - s
        for n in range(n_b):
            d, hv, gr, dr = dpre[t, n], y[t, n], g[t, n], dh[n]
            if relu:
                for j in range(n_h):
                    d[j] = gr[j] + dr[j] if hv[j] > zero else zero
            else:
                for j in range(n_h):
                    d[j] = (gr[j] + dr[j]) * (one - hv[j] * hv[j])
        # dh = dpre[t] @ w_hh
        _product(fn, one, n_b, n_h, n_h, _ptr(dpre, t * n_b * n_h), _ptr(w_hh, 0), _ptr(dh, 0),
                 g.itemsize, blocks)
    dh0[:, :] = dh


def _rnn_seq(  # noqa: PLR0917
    gi: Any, h0: Any, w_hh: Any, b_hh: Any, reverse: bool, relu: bool, blocked: bool
) -> Any:
    fn = _gemm(gi.dtype)
    y = np.empty(gi.shape, gi.dtype)
    b = np.zeros(gi.shape[-1], gi.dtype) if b_hh is None else b_hh
    n_b, n_h = h0.shape
    _rnn_fwd(fn, gi.dtype.type(1), gi, h0, _transposed(w_hh), b, relu, bool(reverse), y,
             _blocks(blocked, n_b, n_h, n_h))
    return y, None


def _rnn_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, h0: Any, w_hh: Any, reverse: bool, relu: bool, blocked: bool
) -> Any:
    fn = _gemm(g.dtype)
    dpre = np.empty(y.shape, g.dtype)
    dh0 = np.empty_like(h0)
    n_b, n_h = h0.shape
    _rnn_bwd(fn, g.dtype.type(1), g, y, w_hh, relu, bool(reverse), dpre, dh0,
             _blocks(blocked, n_b, n_h, n_h))
    return dpre, dh0


def rnn_tanh_seq(  # noqa: PLR0917
    gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """``ops/_rnn._rnn_tanh_seq``'s kernel: the states (T, B, H), no workspace."""
    return _rnn_seq(gi, h0, w_hh, b_hh, reverse, False, blocked)


def rnn_relu_seq(  # noqa: PLR0917
    gi: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """``ops/_rnn._rnn_relu_seq``'s kernel."""
    return _rnn_seq(gi, h0, w_hh, b_hh, reverse, True, blocked)


def rnn_tanh_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """The pre-activations' gradient (T, B, H) and dh0."""
    return _rnn_seq_grad(g, y, h0, w_hh, reverse, False, blocked)


def rnn_relu_seq_grad(  # noqa: PLR0917
    g: Any, y: Any, ws: Any, h0: Any, c0: Any, w_hh: Any, reverse: bool, blocked: bool = False
) -> Any:
    """The pre-activations' gradient (T, B, H) and dh0."""
    return _rnn_seq_grad(g, y, h0, w_hh, reverse, True, blocked)


def _in_blocks(entry: Any) -> Any:
    """``entry`` with the per-step product in column blocks (``column_blocks``)."""

    def run(*args: Any) -> Any:
        return entry(*args, blocked=True)

    run.__name__ = run.__qualname__ = entry.__name__ + "_blocked"
    run.__doc__ = f"``{entry.__name__}`` with the per-step product in column blocks."
    return run


lstm_seq_blocked, lstm_seq_grad_blocked = _in_blocks(lstm_seq), _in_blocks(lstm_seq_grad)
gru_seq_blocked, gru_seq_grad_blocked = _in_blocks(gru_seq), _in_blocks(gru_seq_grad)
rnn_tanh_seq_blocked = _in_blocks(rnn_tanh_seq)
rnn_tanh_seq_grad_blocked = _in_blocks(rnn_tanh_seq_grad)
rnn_relu_seq_blocked = _in_blocks(rnn_relu_seq)
rnn_relu_seq_grad_blocked = _in_blocks(rnn_relu_seq_grad)
