"""Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions: 2.25x fewer multiplies than im2col.

The output is cut into 2x2 tiles; each reads a 4x4 patch of the (zero-padded) input. With the
transforms of Lavin and Gray ("Fast Algorithms for Convolutional Neural Networks", 2015),

    Y = A^T [ (G w G^T) * (B^T d B) ] A        (4x4 elementwise product, summed over channels),

a tile costs 16 products per channel pair where the direct sum costs 36 (2x2 outputs x 9 taps).
Summed over the channels, the 16 elementwise products are 16 GEMMs, (tiles, C) @ (C, O): the
input transform ``_in_tf`` writes ``V`` tile-major, (tiles, 16, C), ``matmul`` gives ``M``
(tiles, 16, O) through strided views, the output transform ``_out_tf`` writes the 2x2 outputs
channels-last and ``_to_nchw`` copies them out as (n, O, Ho, Wo), the bias added on the way.
The weights' transform ``U = G w G^T`` is one small numpy product.

Backward, both gradients come from the same algorithm:
- the input gradient is the forward convolution of the output gradient with the weights
  flipped and their channel axes swapped, padded by 2 - p (``input_grad``);
- the weight gradient is the adjoint of the forward in ``U``: ``dM = A dY A^T`` per tile
  (``_out_tf_adjoint``), ``dU = V^T dM`` (16 GEMMs, summed over chunks of the batch), and
  ``dw = G^T dU G``.

All of it is exact arithmetic on the convolution's sums, so results equal the im2col path's to
float rounding (float32: a few units in the last place of the largest output). Each chunk of
the batch first goes channels-last (``conv_gemm._nhwc``), so the transforms read and write
contiguous runs of channels. Serial kernels. Imported only when numba is selected.
"""

from __future__ import annotations

import math
from typing import Any

from .._backend import np
from . import jit
from .conv_gemm import _most, _nhwc, permute_weights

U = np.uint64

# the F(2x2, 3x3) weight transform
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


@jit()
def _tile(s, ty, tx, th, tw, hp, wp, k):  # type: ignore[no-untyped-def]
    """Offsets of tile (ty, tx) of sample s for k channels: its 16 rows in the tile-major
    array (tiles, 16, k), and its first two rows in the channels-last (n, hp, wp, k) one."""
    q = U((((s * th + ty) * tw + tx) * 16) * k)
    d0 = U(((s * hp + 2 * ty) * wp + 2 * tx) * k)
    return q, d0, d0 + U(wp * k)


@jit()
def _in_tf(xt, v, th, tw):  # type: ignore[no-untyped-def]
    """v (n * th * tw, 16, C) <- B^T d B for each 4x4 patch d of xt (n, 1, Hp, Wp, C), where
    patch (ty, tx) starts at row 2 ty, column 2 tx (Hp >= 2 th + 2, Wp >= 2 tw + 2)."""
    n_, _, hp, wp, c_ = xt.shape
    xf = xt.reshape(-1)
    vf = v.reshape(-1)
    cc = U(c_)
    row = U(wp * c_)
    for s in range(n_):
        for ty in range(th):
            for tx in range(tw):
                # one tile's 16 rows of C are contiguous in v: 16 short write streams
                q0, r0, r1 = _tile(s, ty, tx, th, tw, hp, wp, c_)
                r2 = r1 + row
                r3 = r2 + row
                for j in range(U(4)):
                    cj = j * cc
                    d = q0 + j * cc
                    for c in range(cc):  # B^T d, column j: the rows combined
                        a = cj + c
                        x0 = xf[r0 + a]
                        x1 = xf[r1 + a]
                        x2 = xf[r2 + a]
                        x3 = xf[r3 + a]
                        vf[d + c] = x0 - x2
                        vf[d + U(4) * cc + c] = x1 + x2
                        vf[d + U(8) * cc + c] = x2 - x1
                        vf[d + U(12) * cc + c] = x1 - x3
                # ... B: the columns of each combined row, in place
                for i in range(U(4)):
                    d = q0 + U(4) * i * cc
                    for c in range(cc):
                        e0 = vf[d + c]
                        e1 = vf[d + cc + c]
                        e2 = vf[d + U(2) * cc + c]
                        e3 = vf[d + U(3) * cc + c]
                        vf[d + c] = e0 - e2
                        vf[d + cc + c] = e1 + e2
                        vf[d + U(2) * cc + c] = e2 - e1
                        vf[d + U(3) * cc + c] = e1 - e3


@jit()
def _out_tf(m, yt, th, tw):  # type: ignore[no-untyped-def]
    """yt (n, 2 th, 2 tw, O) <- A^T M A for each tile of m (n * th * tw, 16, O)."""
    n_, hp, wp, o_ = yt.shape
    mf = m.reshape(-1)
    yf = yt.reshape(-1)
    oo = U(o_)
    for s in range(n_):
        for ty in range(th):
            for tx in range(tw):
                q, d0, d1 = _tile(s, ty, tx, th, tw, hp, wp, o_)
                for o in range(oo):
                    # A^T M: rows 0 + 1 + 2 and 1 - 2 - 3, then the same on the columns
                    p0 = mf[q + o] + mf[q + U(4) * oo + o] + mf[q + U(8) * oo + o]
                    p1 = mf[q + oo + o] + mf[q + U(5) * oo + o] + mf[q + U(9) * oo + o]
                    p2 = mf[q + U(2) * oo + o] + mf[q + U(6) * oo + o] + mf[q + U(10) * oo + o]
                    p3 = mf[q + U(3) * oo + o] + mf[q + U(7) * oo + o] + mf[q + U(11) * oo + o]
                    r0 = mf[q + U(4) * oo + o] - mf[q + U(8) * oo + o] - mf[q + U(12) * oo + o]
                    r1 = mf[q + U(5) * oo + o] - mf[q + U(9) * oo + o] - mf[q + U(13) * oo + o]
                    r2 = mf[q + U(6) * oo + o] - mf[q + U(10) * oo + o] - mf[q + U(14) * oo + o]
                    r3 = mf[q + U(7) * oo + o] - mf[q + U(11) * oo + o] - mf[q + U(15) * oo + o]
                    yf[d0 + o] = p0 + p1 + p2
                    yf[d0 + oo + o] = p1 - p2 - p3
                    yf[d1 + o] = r0 + r1 + r2
                    yf[d1 + oo + o] = r1 - r2 - r3


@jit()
def _out_tf_adjoint(gt, dm, th, tw):  # type: ignore[no-untyped-def]
    """dm (n * th * tw, 16, O) <- A dY A^T for each 2x2 tile dY of gt (n, 1, 2 th, 2 tw, O):
    the adjoint of ``_out_tf``."""
    n_, _, hp, wp, o_ = gt.shape
    gf = gt.reshape(-1)
    mf = dm.reshape(-1)
    oo = U(o_)
    for s in range(n_):
        for ty in range(th):
            for tx in range(tw):
                q, d0, d1 = _tile(s, ty, tx, th, tw, hp, wp, o_)
                for o in range(oo):
                    g00 = gf[d0 + o]
                    g01 = gf[d0 + oo + o]
                    g10 = gf[d1 + o]
                    g11 = gf[d1 + oo + o]
                    # A dY: rows g0, g0 + g1, g0 - g1, -g1; then the same on the columns
                    u0 = g00 + g01
                    u1 = g00 - g01
                    w0 = g10 + g11
                    w1 = g10 - g11
                    mf[q + o] = g00
                    mf[q + oo + o] = u0
                    mf[q + U(2) * oo + o] = u1
                    mf[q + U(3) * oo + o] = -g01
                    mf[q + U(4) * oo + o] = g00 + g10
                    mf[q + U(5) * oo + o] = u0 + w0
                    mf[q + U(6) * oo + o] = u1 + w1
                    mf[q + U(7) * oo + o] = -g01 - g11
                    mf[q + U(8) * oo + o] = g00 - g10
                    mf[q + U(9) * oo + o] = u0 - w0
                    mf[q + U(10) * oo + o] = u1 - w1
                    mf[q + U(11) * oo + o] = g11 - g01
                    mf[q + U(12) * oo + o] = -g10
                    mf[q + U(13) * oo + o] = -w0
                    mf[q + U(14) * oo + o] = -w1
                    mf[q + U(15) * oo + o] = g11


@jit()
def _to_nchw(yt, b, out, s0):  # type: ignore[no-untyped-def]
    """out[s0 + s] (O, Ho, Wo) <- yt[s] (Hp, Wp, O) (+ b[o] when b has O entries)."""
    n_, hp, wp, o_ = yt.shape
    _, _, ho, wo = out.shape
    yf = yt.reshape(-1)
    of = out.reshape(-1)
    zero = of.dtype.type(0)
    for s in range(n_):
        for o in range(o_):
            bo = b[o] if b.shape[0] > 0 else zero
            for r in range(ho):
                src = U(((s * hp + r) * wp) * o_ + o)
                dst = U((((s0 + s) * o_ + o) * ho + r) * wo)
                for k in range(U(wo)):
                    of[dst + k] = yf[src + k * U(o_)] + bo


def tiles(out_hw: tuple[int, int]) -> tuple[int, int]:
    """Tile rows and columns covering an (Ho, Wo) output."""
    ho, wo = out_hw
    return (ho + 1) // 2, (wo + 1) // 2


def per_sample(geom: Any, c: int, o: int) -> int:
    """Scratch elements one sample needs: V, M, and one buffer for the channels-last padded
    input and then the channels-last output (or output gradient)."""
    th, tw = tiles(geom.out_hw)
    return 16 * th * tw * (c + o) + _side(th, tw, c, o)


def _side(th: int, tw: int, c: int, o: int) -> int:
    """Elements per sample of the buffer the channels-last input and output take in turn."""
    return max((2 * th + 2) * (2 * tw + 2) * c, 4 * th * tw * o)


def _kron(dt: Any) -> Any:
    """(16, 9): row a * 4 + b, column i * 3 + j holds G[a, i] G[b, j]."""
    return np.kron(_G, _G).astype(dt)


def _u(w: Any, dt: Any, flip: bool = False) -> Any:
    """The transformed weights G w G^T of (O, C, 3, 3) ``w``: (16, C, O), or with ``flip`` those
    of the input gradient's weights (taps reversed, channel axes swapped): (16, O, C). One
    (16, 9) @ (9, C O) product."""
    o, c = w.shape[:2]
    k = _kron(dt)
    if flip:  # reversed taps: the columns of the transform reversed, not the weights
        return (k[:, ::-1] @ np.ascontiguousarray(w, dtype=dt).reshape(o * c, 9).T).reshape(
            16, o, c)
    # the taps first, (C, O) after: the product's rows are then (C, O) as the GEMMs take them
    w9 = permute_weights(w.astype(dt, copy=False), "oct->tco").reshape(9, c * o)
    return (k @ w9).reshape(16, c, o)


def _conv(x: Any, u: Any, b: Any, pads: tuple[int, int], out_hw: tuple[int, int],
          chunks: Any) -> Any:
    n, c = x.shape[:2]
    o = u.shape[2]
    ho, wo = out_hw
    th, tw = tiles(out_hw)
    hp, wp = 2 * th + 2, 2 * tw + 2
    dt = u.dtype
    most = _most(chunks)
    side = np.empty(most * _side(th, tw, c, o), dtype=dt)  # the input copy, then the output
    v_buf = np.empty(16 * most * th * tw * c, dtype=dt)
    m_buf = np.empty(16 * most * th * tw * o, dtype=dt)
    out = np.empty((n, o, ho, wo), dtype=dt)
    bb = np.empty(0, dtype=dt) if b is None else np.ascontiguousarray(b, dtype=dt)
    xc = np.ascontiguousarray(x)
    for a, z in chunks:
        k = z - a
        xt = side[: k * hp * wp * c].reshape(k, 1, hp, wp, c)
        _nhwc(xc[a:z], xt, pads[0], pads[1])
        v = v_buf[: 16 * k * th * tw * c].reshape(k * th * tw, 16, c)
        _in_tf(xt, v, th, tw)
        m = m_buf[: 16 * k * th * tw * o].reshape(k * th * tw, 16, o)
        # 16 GEMMs (tiles, C) @ (C, O), reading and writing tile-major arrays in place
        np.matmul(v.transpose(1, 0, 2), u, out=m.transpose(1, 0, 2))
        yt = side[: k * 4 * th * tw * o].reshape(k, 2 * th, 2 * tw, o)
        _out_tf(m, yt, th, tw)
        _to_nchw(yt, bb, out, a)
    return out


def fused(x: Any, u: Any, b: Any, pads: tuple[int, int], out_hw: tuple[int, int]) -> Any:
    """The F(2x2, 3x3) convolution of channel-first ``x`` by the transformed weights ``u``
    (16, C, O) (+ ``b``), read ``pads`` (top, left) up and left of the first window, in one
    call of the fused kernel (``conv_blocked.wfwd``): no copies, scratch per group of tiles."""
    from . import conv_blocked as cb  # noqa: PLC0415

    n = x.shape[0]
    o = u.shape[2]
    ho, wo = out_hw
    dt = u.dtype
    out = np.empty((n, o, ho, wo), dtype=dt)
    bb = np.zeros(o, dtype=dt) if b is None else np.ascontiguousarray(b, dtype=dt)
    th, tw = tiles(out_hw)
    groups = -(-(n * th * tw) // cb.TILES)
    kernel = cb._pick("wfwd", dt, n * ho * wo * x.shape[1] * o * 9)
    kernel(np.ascontiguousarray(x, dtype=dt), u, bb, out, pads[0], pads[1], cb.TILES, 0, groups)
    return out


def fused_conv(x: Any, w: Any, b: Any, geom: Any) -> Any:
    """``conv`` through ``fused`` (O a multiple of 16)."""
    (pt, _), (pl, _) = geom.padding
    return fused(x, _u(w, x.dtype), b, (pt, pl), geom.out_hw)


def fused_input_grad(g: Any, w: Any, geom: Any) -> Any:
    """``input_grad`` through ``fused`` (C a multiple of 16; any padding: read 2 - p up and
    left, a negative padding crops)."""
    (pt, _), (pl, _) = geom.padding
    return fused(g, _u(w, g.dtype, flip=True), None, (2 - pt, 2 - pl), geom.in_shape[2:])


def fused_weight_grad(g: Any, x: Any, geom: Any, wshape: Any) -> Any:
    """``weight_grad`` through the fused kernel (``conv_blocked.wgradw``, O a multiple of 16,
    C of 8): ``dU`` summed over the batch's tiles in one call, no copies, then ``G^T dU G``."""
    from . import conv_blocked as cb  # noqa: PLC0415

    n, c = x.shape[:2]
    o = g.shape[1]
    (pt, _), (pl, _) = geom.padding
    dt = x.dtype
    th, tw = tiles(geom.out_hw)
    du = np.zeros((16, c, o), dtype=dt)
    kernel = cb._pick("wgradw", dt, n * math.prod(geom.out_hw) * c * o * 9)
    kernel(np.ascontiguousarray(x), np.ascontiguousarray(g, dtype=dt), du, pt, pl, 0, 4, 0,
           -(-(n * th * tw) // cb.TILES))
    d9 = _kron(dt).T @ du.reshape(16, c * o)  # G^T dU G
    del du
    return permute_weights(d9.reshape(3, 3, c, o), "tco->oct").reshape(wshape)


def conv(x: Any, w: Any, b: Any, geom: Any, chunks: Any) -> Any:
    """conv2d of (N, C, H, W) ``x`` by (O, C, 3, 3) ``w`` (+ ``b``), stride 1, chunk by chunk."""
    (pt, _), (pl, _) = geom.padding
    return _conv(x, _u(w, x.dtype), b, (pt, pl), geom.out_hw, chunks)


def input_grad(g: Any, w: Any, geom: Any, chunks: Any) -> Any:
    """The input gradient of ``conv``: ``g`` convolved with the flipped, channel-swapped weights,
    padded by 2 - p (each padding at most 2)."""
    (pt, _), (pl, _) = geom.padding
    return _conv(g, _u(w, g.dtype, flip=True), None, (2 - pt, 2 - pl), geom.in_shape[2:], chunks)


def weight_grad(g: Any, x: Any, geom: Any, wshape: Any, chunks: Any) -> Any:
    """The weight gradient of ``conv``: ``dU = V^T (A dY A^T)`` summed over chunks, then
    ``G^T dU G``."""
    c = x.shape[1]
    o = g.shape[1]
    (pt, _), (pl, _) = geom.padding
    th, tw = tiles(geom.out_hw)
    hp, wp = 2 * th + 2, 2 * tw + 2
    dt = x.dtype
    most = _most(chunks)
    side = np.empty(most * _side(th, tw, c, o), dtype=dt)  # the input copy, then the gradient's
    v_buf = np.empty(16 * most * th * tw * c, dtype=dt)
    m_buf = np.empty(16 * most * th * tw * o, dtype=dt)
    acc = np.zeros((16, c, o), dtype=dt)
    # the products summed into acc a quarter of the positions at a time: the chunk's partial
    # sums need a quarter of acc's memory (this pass holds a step's peak in conv nets)
    part = np.empty((4, c, o), dtype=dt)
    xc = np.ascontiguousarray(x)
    gc = np.ascontiguousarray(g, dtype=dt)
    for a, z in chunks:
        k = z - a
        xt = side[: k * hp * wp * c].reshape(k, 1, hp, wp, c)
        _nhwc(xc[a:z], xt, pt, pl)
        v = v_buf[: 16 * k * th * tw * c].reshape(k * th * tw, 16, c)
        _in_tf(xt, v, th, tw)
        gt = side[: k * 4 * th * tw * o].reshape(k, 1, 2 * th, 2 * tw, o)
        _nhwc(gc[a:z], gt, 0, 0)  # zeros past Ho, Wo
        dm = m_buf[: 16 * k * th * tw * o].reshape(k * th * tw, 16, o)
        _out_tf_adjoint(gt, dm, th, tw)
        for q in range(0, 16, 4):
            np.matmul(v[:, q : q + 4].transpose(1, 2, 0), dm[:, q : q + 4].transpose(1, 0, 2),
                      out=part)
            np.add(acc[q : q + 4], part, out=acc[q : q + 4])
    del side, v_buf, m_buf, part, xt, v, gt, dm
    # dw = G^T dU G as one (9, 16) @ (16, C * O) product: no intermediate larger than dw
    d9 = _kron(dt).T @ acc.reshape(16, c * o)
    del acc
    return permute_weights(d9.reshape(3, 3, c, o), "tco->oct").reshape(wshape)
