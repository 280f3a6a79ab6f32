"""Pooling with PyTorch's arguments over (N, C, H, W): max, average and their adaptive forms,
on the pooling primitives of ``ops/_pool.py``."""


from __future__ import annotations

from typing import Any

from .._autodiff import apply
from .._backend import np, xp_of
from .._tensor import Tensor, _wrap
from ..ops import _linalg as L
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops._conv import Geom
from ..ops._pool import MAX_POOL, POOL_GATHER, SUM_POOL, max_index
from ._f_common import check_positive, float_input, ntuple

# --------------------------------------------------------------------------------------------
# argument handling
# --------------------------------------------------------------------------------------------


def _pool_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    if ceil_mode:
        out = -(-span // s) + 1
        if (out - 1) * s >= n + p:  # the last window must start inside the input or left pad
            out -= 1
        return out
    return span // s + 1


def _pool_args(
    x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, op: str
) -> Geom:
    if x.ndim != 4:
        raise ValueError(f"{op}: input must be (N, C, H, W) or (C, H, W), got shape {x.shape}")
    k = ntuple(kernel_size, 2, "kernel_size", op)
    s = (
        k
        if stride is None or (not isinstance(stride, int) and len(stride) == 0)
        else ntuple(stride, 2, "stride", op)
    )
    p = ntuple(padding, 2, "padding", op)
    d = ntuple(dilation, 2, "dilation", op)
    if min(k) < 1 or min(s) < 1 or min(d) < 1:
        raise ValueError(f"{op}: kernel_size {k}, stride {s} and dilation {d} must be positive")
    if any(pp > kk // 2 for pp, kk in zip(p, k, strict=True)):
        raise ValueError(f"{op}: padding {p} must be at most half the kernel size {k}")
    n, c, h, w = x.shape
    ho, wo = (
        _pool_size(v, kk, ss, pp, dd, ceil_mode)
        for v, kk, ss, pp, dd in zip((h, w), k, s, p, d, strict=True)
    )
    if ho < 1 or wo < 1:
        raise ValueError(f"{op}: the input {x.shape} is too small for kernel {k} (padding {p})")
    # ceil_mode windows may run past the input: pad the far side so they fit
    pad = tuple(
        (pp, max(pp, (o - 1) * ss + dd * (kk - 1) + 1 - v - pp))
        for v, kk, ss, pp, dd, o in zip((h, w), k, s, p, d, (ho, wo), strict=True)
    )
    return Geom((n, c, h, w), k, s, pad, d, (ho, wo))  # type: ignore[arg-type]


def _batched(x: Tensor) -> tuple[Tensor, bool]:
    if x.ndim == 3:
        return S.expand_dims(x, 0), True
    return x, False


def _unbatch(t: Tensor, unbatched: bool) -> Tensor:
    return S.squeeze(t, 0) if unbatched else t


def max_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """2-D max pooling; ``stride`` defaults to ``kernel_size``; padding counts as -inf.

    The gradient goes to the first maximum of each window (PyTorch's rule); with
    ``return_indices=True`` also returns those positions as flat indices into H * W.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.max_pool2d(tg.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    x = float_input(input, "max_pool2d")
    x, unb = _batched(x)
    geom = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    out = apply(MAX_POOL, x, geom=geom)
    if return_indices:
        idx = max_index(x._data, out._data, geom)
        return _unbatch(out, unb), _unbatch(_wrap(idx), unb)
    return _unbatch(out, unb)


def max_pool1d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """1-D max pooling over (N, C, L), as max_pool2d over a height of 1."""
    one = ntuple
    k = one(kernel_size, 1, "kernel_size", "max_pool1d")[0]
    s = k if stride is None else one(stride, 1, "stride", "max_pool1d")[0]
    check_positive("max_pool1d", kernel_size=k, stride=s)
    res = max_pool2d(
        S.expand_dims(float_input(input, "max_pool1d"), -2),
        (1, k),
        (1, s),
        (0, one(padding, 1, "padding", "max_pool1d")[0]),
        (1, one(dilation, 1, "dilation", "max_pool1d")[0]),
        ceil_mode,
        return_indices,
    )
    if return_indices:
        return S.squeeze(res[0], -2), S.squeeze(res[1], -2)
    return S.squeeze(res, -2)


def _divisor(geom: Geom, p: tuple[int, ...], count_include_pad: bool, dtype: Any) -> Any:
    """PyTorch's avg-pool divisor per output position, as an (Ho, Wo) array."""
    counts = []
    for v, k, s, pp, o in zip(
        geom.in_shape[2:], geom.kernel, geom.stride, p, geom.out_hw, strict=True
    ):
        start = np.arange(o) * s - pp
        end = np.minimum(start + k, v + pp)
        if count_include_pad:
            counts.append(end - start)
        else:
            counts.append(np.minimum(end, v) - np.maximum(start, 0))
    return np.outer(counts[0], counts[1]).astype(dtype)


def avg_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-D average pooling with PyTorch's divisor rules (``count_include_pad``, ``ceil_mode``,
    ``divisor_override``).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.avg_pool2d(tg.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    x = float_input(input, "avg_pool2d")
    x, unb = _batched(x)
    geom = _pool_args(x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    sums = apply(SUM_POOL, x, geom=geom)
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError("avg_pool2d: divisor_override must be non-zero")
        return _unbatch(sums * (1.0 / divisor_override), unb)
    p = ntuple(padding, 2, "padding", "avg_pool2d")
    div = _divisor(geom, p, count_include_pad, x.dtype)
    if (div == div.flat[0]).all():
        return _unbatch(sums * (1.0 / float(div.flat[0])), unb)
    return _unbatch(sums * _wrap(xp_of(x._data).asarray(1.0 / div)), unb)


def avg_pool1d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """1-D average pooling over (N, C, L), as avg_pool2d over a height of 1."""
    one = ntuple
    k = one(kernel_size, 1, "kernel_size", "avg_pool1d")[0]
    s = k if stride is None else one(stride, 1, "stride", "avg_pool1d")[0]
    check_positive("avg_pool1d", kernel_size=k, stride=s)
    out = avg_pool2d(
        S.expand_dims(float_input(input, "avg_pool1d"), -2),
        (1, k),
        (1, s),
        (0, one(padding, 1, "padding", "avg_pool1d")[0]),
        ceil_mode,
        count_include_pad,
    )
    return S.squeeze(out, -2)


# --------------------------------------------------------------------------------------------
# adaptive pooling: window i covers [floor(i * n / o), ceil((i + 1) * n / o))
# --------------------------------------------------------------------------------------------


def _adaptive_out(x: Tensor, output_size: Any, op: str) -> tuple[int, int]:
    if x.ndim != 4:
        raise ValueError(f"{op}: input must be (N, C, H, W) or (C, H, W), got shape {x.shape}")
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size, output_size)
    o = tuple(x.shape[2 + i] if v is None else int(v) for i, v in enumerate(output_size))
    if len(o) != 2 or min(o) < 1:
        raise ValueError(f"{op}: output_size must be 1 or 2 positive ints, got {output_size!r}")
    return o  # type: ignore[return-value]


def _bounds(n: int, o: int) -> list[tuple[int, int]]:
    return [((i * n) // o, -(-((i + 1) * n) // o)) for i in range(o)]


def _avg_matrix(n: int, o: int, dtype: Any) -> Any:
    m = np.zeros((o, n), dtype=dtype)
    for i, (a, b) in enumerate(_bounds(n, o)):
        m[i, a:b] = 1.0 / (b - a)
    return m


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Tensor:
    """Average pooling to a fixed output size (``None`` keeps that input size).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.adaptive_avg_pool2d(tg.ones((2, 3, 7, 5)), 1).shape
    (2, 3, 1, 1)
    """
    x = float_input(input, "adaptive_avg_pool2d")
    x, unb = _batched(x)
    oh, ow = _adaptive_out(x, output_size, "adaptive_avg_pool2d")
    h, w = x.shape[2:]
    if (oh, ow) == (1, 1):
        return _unbatch(R.mean(x, axis=(2, 3), keepdims=True), unb)
    if h % oh == 0 and w % ow == 0:
        return _unbatch(avg_pool2d(x, (h // oh, w // ow)), unb)
    # windows of unequal size: two small linear maps, (oh, H) @ x @ (W, ow)
    xp = xp_of(x._data)
    ah = _wrap(xp.asarray(_avg_matrix(h, oh, x.dtype)))
    aw = _wrap(xp.asarray(_avg_matrix(w, ow, x.dtype).T))
    return _unbatch(L.matmul(L.matmul(ah, x), aw), unb)


def adaptive_max_pool2d(input: Any, output_size: Any, return_indices: bool = False) -> Any:
    """Max pooling to a fixed output size; the gradient goes to each window's first maximum.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.adaptive_max_pool2d(tg.arange(16.0).reshape(1, 1, 4, 4), 1).tolist()
    [[[[15.0]]]]
    """
    x = float_input(input, "adaptive_max_pool2d")
    x, unb = _batched(x)
    oh, ow = _adaptive_out(x, output_size, "adaptive_max_pool2d")
    n, c, h, w = x.shape
    if h % oh == 0 and w % ow == 0:
        return max_pool2d(input, (h // oh, w // ow), return_indices=return_indices)
    a = x._data
    xp = xp_of(a)
    # separable: the first maximum along W in each column window, then along H
    colmax = xp.empty((n, c, h, ow), dtype=a.dtype)
    colarg = xp.empty((n, c, h, ow), dtype=np.int64)
    for j, (s0, s1) in enumerate(_bounds(w, ow)):
        seg = a[..., s0:s1]
        k = xp.argmax(seg, axis=-1)
        colarg[..., j] = k + s0
        colmax[..., j] = xp.take_along_axis(seg, k[..., None], axis=-1)[..., 0]
    idx = xp.empty((n, c, oh, ow), dtype=np.int64)
    for i, (s0, s1) in enumerate(_bounds(h, oh)):
        r = xp.argmax(colmax[:, :, s0:s1], axis=2)  # (N, C, ow)
        col = xp.take_along_axis(colarg[:, :, s0:s1], r[:, :, None], axis=2)[:, :, 0]
        idx[:, :, i] = (r + s0) * w + col
    out = _unbatch(apply(POOL_GATHER, x, idx=idx, overlap=True), unb)
    if return_indices:
        return out, _unbatch(_wrap(idx), unb)
    return out


def adaptive_avg_pool1d(input: Any, output_size: int) -> Tensor:
    """Average pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` positions.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.adaptive_avg_pool1d(tg.arange(4.0).reshape(1, 1, 4), 2).tolist()
    [[[0.5, 2.5]]]
    """
    x = float_input(input, "adaptive_avg_pool1d")
    return S.squeeze(adaptive_avg_pool2d(S.expand_dims(x, -2), (1, output_size)), -2)


def adaptive_max_pool1d(input: Any, output_size: int, return_indices: bool = False) -> Tensor:
    """Max pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` positions.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.adaptive_max_pool1d(tg.arange(4.0).reshape(1, 1, 4), 2).tolist()
    [[[1.0, 3.0]]]
    """
    if return_indices:
        raise NotImplementedError("adaptive_max_pool1d: return_indices=True is not offered")
    x = float_input(input, "adaptive_max_pool1d")
    return S.squeeze(adaptive_max_pool2d(S.expand_dims(x, -2), (1, output_size)), -2)
