"""Polyphase Winograd F(2x2, 2x2) for 4x4 stride-2 convolutions: 16/9 fewer multiplies than im2col.

A 4x4 stride-2 kernel reads padded input row ``2y + i`` for output row ``y``; with ``i = 2u + a``
that is row ``y + u`` of the input's polyphase component ``a`` (its rows ``2Y + a``). So the
convolution is a 2x2 stride-1 one over 4C channels ``(c, a, b)``, the components
``P_ab[Y, X] = xpad[2Y + a, 2X + b]``, by the kernel ``w'[o, (c, a, b), u, v] = w[o, c, 2u + a,
2v + b]``. Each 2x2 tile of outputs reads a 3x3 patch of each component (a 6x6 patch of the
padded input; patches 4 apart), and Winograd's F(2, 2) (points 0, 1 and infinity: every
transform entry is 0 or +-1, additions only)

    Y = A^T [ (G w' G^T) * (B^T d B) ] A,
    B^T = [[1, -1, 0], [0, 1, 0], [0, -1, 1]],  G = [[1, 0], [1, 1], [0, 1]],  A^T = [[1, 1, 0], [0, 1, 1]]

costs a tile 9 products per channel pair where im2col's GEMM costs 16 (4 outputs x 4 taps).
Summed over the 4C channels the 9 products are 9 GEMMs: ``V`` (9, tiles, 4C) @ ``U`` (9, 4C,
O). Measured (AMD EPYC Zen 4, 2 threads, OpenBLAS): DCGAN ngf 64's 256 -> 512 layer (8x8 to 4x4,
batch 64) 15.0 ms for the 9 GEMMs against 24.5 for im2col's one, 128 -> 256 (16 -> 8) 14.0
against 23.7, 64 -> 128 (32 -> 16) 16.8 against 27.5.

Backward, both gradients are the transforms' adjoints: the input gradient ``dM = A dY A^T`` per
tile, ``dV = dM U^T`` (9 GEMMs), ``d = B dV B^T`` added back into the padded input's patches
(patches overlap by two rows and columns); the weight gradient ``dU = V^T dM`` (9 GEMMs summed
over the batch's chunks) and ``dw' = G^T dU G``. A transposed convolution's forward is this
input gradient. Output tiles past the output (odd sizes) are computed on zeros and dropped, so
every pass is the exact convolution up to float rounding. Each transform's work is split over
the threads by tiles, samples or input channels, each element written by one thread in a fixed
order (the same bits at any thread count). One parallel twin (``_par``) runs any pass's compiled
code by address (``twins.call_at``): a twin per pass calling it by name links and optimises its IR
again (the three passes' first calls at two threads, no cache, Zen 4: 24 CPU s against 8).
Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import prange

from .._backend import np
from . import jit
from .chunks import bounds, num_threads
from .conv_gemm import _nchw, _nhwc, _parallel
from .twins import call_at, entry_by

U = np.uint64

# Elements of V (9 x tiles x 4C) per chunk of the batch (32 MiB of float32): the 9 GEMMs need
# rows to run near OpenBLAS's speed. DCGAN ngf 64's 128 -> 256 layer (16 -> 8, batch 64; V 4.7M
# elements) in two chunks of 512 tiles ran its GEMMs in 16.4 ms, in one chunk 14.1.
V_BUDGET = 1 << 23


def _tiles(geom: Any) -> tuple[int, int]:
    ho, wo = geom.out_hw
    return (ho + 1) // 2, (wo + 1) // 2


def batches(geom: Any, c: int) -> list[tuple[int, int]]:
    """Sample ranges, balanced, whose V fits V_BUDGET."""
    n = geom.in_shape[0]
    th, tw = _tiles(geom)
    per = max(1, V_BUDGET // (9 * th * tw * 4 * c))
    k = -(-n // per)
    return [(n * i // k, n * (i + 1) // k) for i in range(k)]


@jit()
def _in_rows(xt, v, th, tw, t0, t1):  # type: ignore[no-untyped-def]
    """v (9, T, 4C) <- B^T d B for tiles t0 to t1 (over (sample, ty, tx)) of the padded
    channels-last xt (n, Hp, Wp, C), d each polyphase component's 3x3 patch; channel (c, a, b)
    is (2a + b) C + c, so the loop over c reads and writes contiguous runs."""
    n_, hp, wp, c_ = xt.shape
    kk = v.shape[2]
    xf = xt.reshape(-1)
    vf = v.reshape(-1)
    pl_ = U(v.shape[1] * kk)  # from one of the 9 products' planes to the next
    cc = U(c_)
    row = U(wp * c_)
    for t in range(t0, t1):
        s = t // (th * tw)
        ty = (t // tw) % th
        tx = t % tw
        for a in range(2):
            for b in range(2):
                src = U(((s * hp + 4 * ty + a) * wp + 4 * tx + b) * c_)
                dst = U(t * kk + (2 * a + b) * c_)
                for c in range(cc):
                    x0 = src + c
                    x1 = x0 + U(2) * row
                    x2 = x0 + U(4) * row
                    # B^T along the rows (component rows a, a + 2, a + 4) ...
                    e00 = xf[x0] - xf[x1]
                    e01 = xf[x0 + U(2) * cc] - xf[x1 + U(2) * cc]
                    e02 = xf[x0 + U(4) * cc] - xf[x1 + U(4) * cc]
                    e10 = xf[x1]
                    e11 = xf[x1 + U(2) * cc]
                    e12 = xf[x1 + U(4) * cc]
                    e20 = xf[x2] - e10
                    e21 = xf[x2 + U(2) * cc] - e11
                    e22 = xf[x2 + U(4) * cc] - e12
                    d = dst + c  # ... and along the columns
                    vf[d] = e00 - e01
                    vf[d + pl_] = e01
                    vf[d + U(2) * pl_] = e02 - e01
                    vf[d + U(3) * pl_] = e10 - e11
                    vf[d + U(4) * pl_] = e11
                    vf[d + U(5) * pl_] = e12 - e11
                    vf[d + U(6) * pl_] = e20 - e21
                    vf[d + U(7) * pl_] = e21
                    vf[d + U(8) * pl_] = e22 - e21


@jit()
def _out_rows(m, b, y, th, tw, s0, s1):  # type: ignore[no-untyped-def]
    """y (n, O, Ho, Wo) <- A^T M A (+ b[o] when b has O entries) for samples s0 to s1; M (9, T,
    O) tile-major."""
    n_, o_, ho, wo = y.shape
    zero = y.dtype.type(0)
    for s in range(s0, s1):
        for ty in range(th):
            for tx in range(tw):
                t = (s * th + ty) * tw + tx
                r = 2 * ty
                q = 2 * tx
                for o in range(o_):
                    c0 = m[0, t, o] + m[3, t, o]
                    c1 = m[1, t, o] + m[4, t, o]
                    c2 = m[2, t, o] + m[5, t, o]
                    d0 = m[3, t, o] + m[6, t, o]
                    d1 = m[4, t, o] + m[7, t, o]
                    d2 = m[5, t, o] + m[8, t, o]
                    bo = b[o] if b.shape[0] > 0 else zero
                    y[s, o, r, q] = c0 + c1 + bo
                    if q + 1 < wo:
                        y[s, o, r, q + 1] = c1 + c2 + bo
                    if r + 1 < ho:
                        y[s, o, r + 1, q] = d0 + d1 + bo
                        if q + 1 < wo:
                            y[s, o, r + 1, q + 1] = d1 + d2 + bo


@jit()
def _dm_rows(g, dm, th, tw, s0, s1):  # type: ignore[no-untyped-def]
    """dm (9, T, O) <- A dY A^T for samples s0 to s1 of g (n, O, Ho, Wo), zeros past it."""
    n_, o_, ho, wo = g.shape
    zero = g.dtype.type(0)
    for s in range(s0, s1):
        for ty in range(th):
            for tx in range(tw):
                t = (s * th + ty) * tw + tx
                r = 2 * ty
                q = 2 * tx
                for o in range(o_):
                    y00 = g[s, o, r, q]
                    y01 = g[s, o, r, q + 1] if q + 1 < wo else zero
                    y10 = g[s, o, r + 1, q] if r + 1 < ho else zero
                    y11 = g[s, o, r + 1, q + 1] if r + 1 < ho and q + 1 < wo else zero
                    f0 = y00 + y01
                    f1 = y10 + y11
                    dm[0, t, o] = y00
                    dm[1, t, o] = f0
                    dm[2, t, o] = y01
                    dm[3, t, o] = y00 + y10
                    dm[4, t, o] = f0 + f1
                    dm[5, t, o] = y01 + y11
                    dm[6, t, o] = y10
                    dm[7, t, o] = f1
                    dm[8, t, o] = y11


@jit()
def _in_adj_rows(dv, gt, th, tw, s0, s1):  # type: ignore[no-untyped-def]
    """gt (n, Hp, Wp, C) <- the adjoint of ``_in_rows``: B dV B^T added into each tile's 6x6
    patch, samples s0 to s1, tiles in order."""
    n_, hp, wp, c_ = gt.shape
    kk = dv.shape[2]
    gf = gt.reshape(-1)
    vf = dv.reshape(-1)
    pl_ = U(dv.shape[1] * kk)
    cc = U(c_)
    row = U(wp * c_)
    zero = gf.dtype.type(0)
    for k in range(U(s0 * hp * wp * c_), U(s1 * hp * wp * c_)):
        gf[k] = zero
    for s in range(s0, s1):
        for ty in range(th):
            for tx in range(tw):
                t = (s * th + ty) * tw + tx
                for a in range(2):
                    for b in range(2):
                        dst = U(((s * hp + 4 * ty + a) * wp + 4 * tx + b) * c_)
                        src = U(t * kk + (2 * a + b) * c_)
                        for c in range(cc):
                            d = src + c  # B along the columns ...
                            v0 = vf[d]
                            v1 = vf[d + pl_]
                            v2 = vf[d + U(2) * pl_]
                            v3 = vf[d + U(3) * pl_]
                            v4 = vf[d + U(4) * pl_]
                            v5 = vf[d + U(5) * pl_]
                            v6 = vf[d + U(6) * pl_]
                            v7 = vf[d + U(7) * pl_]
                            v8 = vf[d + U(8) * pl_]
                            e01 = v1 - v0 - v2
                            e11 = v4 - v3 - v5
                            e21 = v7 - v6 - v8
                            x0 = dst + c  # ... and along the rows
                            x1 = x0 + U(2) * row
                            x2 = x0 + U(4) * row
                            gf[x0] += v0
                            gf[x0 + U(2) * cc] += e01
                            gf[x0 + U(4) * cc] += v2
                            gf[x1] += v3 - v0 - v6
                            gf[x1 + U(2) * cc] += e11 - e01 - e21
                            gf[x1 + U(4) * cc] += v5 - v2 - v8
                            gf[x2] += v6
                            gf[x2 + U(2) * cc] += e21
                            gf[x2 + U(4) * cc] += v8


@jit()
def _w_rows(w, u, o0, o1):  # type: ignore[no-untyped-def]
    """u (9, O, 4C) <- G w' G^T for output channels o0 to o1 of w (O, C, 4, 4)."""
    c_ = w.shape[1]
    for o in range(o0, o1):
        for a in range(2):
            for b in range(2):
                k0 = (2 * a + b) * c_
                for c in range(c_):
                    w00 = w[o, c, a, b]
                    w01 = w[o, c, a, b + 2]
                    w10 = w[o, c, a + 2, b]
                    w11 = w[o, c, a + 2, b + 2]
                    k = k0 + c
                    u[0, o, k] = w00
                    u[1, o, k] = w00 + w01
                    u[2, o, k] = w01
                    u[3, o, k] = w00 + w10
                    u[4, o, k] = (w00 + w10) + (w01 + w11)
                    u[5, o, k] = w01 + w11
                    u[6, o, k] = w10
                    u[7, o, k] = w10 + w11
                    u[8, o, k] = w11


@jit()
def _w_adj_rows(du, dw, o0, o1):  # type: ignore[no-untyped-def]
    """dw (O, C, 4, 4) <- G^T dU G for output channels o0 to o1 of du (9, O, 4C) (the adjoint
    of ``_w_rows``)."""
    c_ = dw.shape[1]
    for o in range(o0, o1):
        for c in range(c_):
            for a in range(2):
                for b in range(2):
                    k = (2 * a + b) * c_ + c
                    z00 = du[0, o, k] + du[3, o, k]
                    z01 = du[1, o, k] + du[4, o, k]
                    z02 = du[2, o, k] + du[5, o, k]
                    z10 = du[3, o, k] + du[6, o, k]
                    z11 = du[4, o, k] + du[7, o, k]
                    z12 = du[5, o, k] + du[8, o, k]
                    dw[o, c, a, b] = z00 + z01
                    dw[o, c, a, b + 2] = z01 + z02
                    dw[o, c, a + 2, b] = z10 + z11
                    dw[o, c, a + 2, b + 2] = z11 + z12


@jit(parallel=True)
def _par(n, args, fp):  # type: ignore[no-untyped-def]
    """The rows kernel whose compiled code is at ``fp`` (``twins.entry``) over ``range(n)`` in
    chunks, one per thread: ``kernel(*args, lo, hi)``. One twin serves the six passes (a call
    by name would link each kernel's IR into a twin of its own and optimise it again)."""
    p = num_threads()
    for i in prange(p):
        lo, hi = bounds(n, p, i, 1)
        call_at(fp, args + (lo, hi))


def _split(kernel: Any, items: int, size: int, *args: Any) -> None:
    """``kernel(*args, 0, items)``, on several threads (``_par``) when the pass is worth it.
    Each pass's arrays share one dtype (its kinds besides: fixed), the key of its entry."""
    if _parallel(items, size):
        fp = entry_by((kernel, args[0].dtype.char), kernel, *args, 0, 0)
        _par(items, args, fp)
    else:
        kernel(*args, 0, items)


def _wtf(w: Any, dt: Any) -> Any:
    """The weights' transform U (9, O, 4C)."""
    o, c = w.shape[:2]
    u = np.empty((9, o, 4 * c), dtype=dt)
    _split(_w_rows, o, u.size, np.ascontiguousarray(w, dtype=dt), u)
    return u


def _pads(geom: Any) -> tuple[int, int]:
    return int(geom.padding[0][0]), int(geom.padding[1][0])


class _Plan:
    """One call's sizes and scratch: the batch's chunks, the tiles, the padded channels-last
    copy (n, 1, Hp, Wp, C) that ``conv_gemm``'s layout passes fill and read."""

    def __init__(self, geom: Any, dt: Any, o: int) -> None:
        self.c = c = geom.in_shape[1]
        self.th, self.tw = _tiles(geom)
        self.hp, self.wp = 4 * self.th + 2, 4 * self.tw + 2
        self.pt, self.pl = _pads(geom)
        self.parts = batches(geom, c)
        most = max(z - a for a, z in self.parts)
        tiles = most * self.th * self.tw
        self.xt = np.empty(most * self.hp * self.wp * c, dtype=dt)
        self.v = np.empty(9 * tiles * 4 * c, dtype=dt)
        self.m = np.empty(9 * tiles * o, dtype=dt)
        self.o = o

    def views(self, m: int) -> tuple[Any, Any, Any, int]:
        """For a chunk of ``m`` samples: the padded copy (5-D), V and M, and its tile count."""
        t = m * self.th * self.tw
        xt = self.xt[: m * self.hp * self.wp * self.c].reshape(m, 1, self.hp, self.wp, self.c)
        v = self.v[: 9 * t * 4 * self.c].reshape(9, t, 4 * self.c)
        return xt, v, self.m[: 9 * t * self.o].reshape(9, t, self.o), t

    def to_v(self, x: Any, xt: Any, v: Any, t: int) -> None:
        _nhwc(x, xt, self.pt, self.pl)
        _split(_in_rows, t, v.size, xt[:, 0], v, self.th, self.tw)

    def to_m(self, g: Any, m: Any) -> None:
        _split(_dm_rows, g.shape[0], m.size, g, m, self.th, self.tw)


def conv(x: Any, w: Any, b: Any, geom: Any) -> Any:
    """conv2d of (N, C, H, W) ``x`` by (O, C, 4, 4) ``w`` (+ ``b``), stride 2."""
    n = x.shape[0]
    o = w.shape[0]
    dt = x.dtype
    pl = _Plan(geom, dt, o)
    ut = _wtf(w, dt).transpose(0, 2, 1)  # (9, 4C, O): the GEMMs read it transposed
    bb = np.empty(0, dtype=dt) if b is None else np.ascontiguousarray(b, dtype=dt)
    xc = np.ascontiguousarray(x)
    out = np.empty((n, o, *geom.out_hw), dtype=dt)
    for a, z in pl.parts:
        xt, v, m, t = pl.views(z - a)
        pl.to_v(xc[a:z], xt, v, t)
        np.matmul(v, ut, out=m)
        _split(_out_rows, z - a, out[a:z].size, m, bb, out[a:z], pl.th, pl.tw)
    return out


def input_grad(g: Any, w: Any, geom: Any) -> Any:
    """The input gradient of ``conv`` (a transposed convolution's forward)."""
    n, o = g.shape[:2]
    dt = g.dtype
    pl = _Plan(geom, dt, o)
    u = _wtf(w, dt)
    gc = np.ascontiguousarray(g)
    out = np.empty((n, *geom.in_shape[1:]), dtype=dt)
    for a, z in pl.parts:
        gt, dv, dm, t = pl.views(z - a)
        pl.to_m(gc[a:z], dm)
        np.matmul(dm, u, out=dv)
        _split(_in_adj_rows, z - a, gt.size, dv, gt[:, 0], pl.th, pl.tw)
        _nchw(gt, out[a:z], pl.pt, pl.pl)
    return out


def weight_grad(g: Any, x: Any, geom: Any, wshape: Any) -> Any:
    """The weight gradient of ``conv``: the 9 products dM^T V summed over the batch's chunks."""
    o = g.shape[1]
    dt = x.dtype
    pl = _Plan(geom, dt, o)
    xc = np.ascontiguousarray(x)
    gc = np.ascontiguousarray(g, dtype=dt)
    du = np.empty((9, o, 4 * pl.c), dtype=dt)
    part = np.empty_like(du) if len(pl.parts) > 1 else du
    for i, (a, z) in enumerate(pl.parts):
        xt, v, dm, t = pl.views(z - a)
        pl.to_v(xc[a:z], xt, v, t)
        pl.to_m(gc[a:z], dm)
        np.matmul(dm.transpose(0, 2, 1), v, out=du if i == 0 else part)
        if i:
            np.add(du, part, out=du)
    dw = np.empty(wshape, dtype=dt)
    _split(_w_adj_rows, o, du.size, du, dw)
    return dw
