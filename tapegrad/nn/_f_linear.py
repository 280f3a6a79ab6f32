"""Affine maps and lookups: linear, bilinear, embedding, one_hot."""


from __future__ import annotations

from typing import Any

from .._amp import lower
from .._autodiff import apply
from .._backend import np, xp_of
from .._tensor import Tensor, _wrap
from ..ops import _elementwise as E
from ..ops import _linalg as L
from ..ops import _reduce as R
from ..ops import _shape as S
from ..ops._linear import LINEAR, LINEAR_RELU
from ..ops._take import take
from ._f_common import float_input, same_float


def _plain(input: Any, weight: Any, bias: Any) -> bool:
    """Tensors of one float dtype and matching shapes: the primitive takes them as they are."""
    if isinstance(input, Tensor) and isinstance(weight, Tensor):
        xd, wd = input._data, weight._data
        return (
            xd.dtype is wd.dtype
            and xd.dtype.kind == "f"
            and wd.ndim == 2
            and xd.ndim >= 1
            and xd.shape[-1] == wd.shape[1]
            and (
                bias is None
                or (
                    isinstance(bias, Tensor)
                    and bias._data.dtype is xd.dtype
                    and bias._data.shape == (wd.shape[0],)
                )
            )
        )
    return False


@lower
def linear(input: Any, weight: Any, bias: Any = None) -> Tensor:
    """``input @ weight.T + bias`` with ``weight`` (out_features, in_features), as PyTorch.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.linear(tg.ones((2, 3)), tg.ones((4, 3)), tg.zeros(4)).tolist()[0]
    [3.0, 3.0, 3.0, 3.0]
    """
    if _plain(input, weight, bias):  # the common case, checked lean
        return apply(LINEAR, input, weight, bias)
    x = float_input(input, "linear")
    w = float_input(weight, "linear", "weight")
    x, w = same_float(x, w)
    if w.ndim == 1:  # a weight vector: a dot product over the last axis
        if x.shape[-1] != w.shape[0]:
            raise ValueError(
                f"linear: input {x.shape} and weight {w.shape}: {x.shape[-1]} != {w.shape[0]}"
            )
        y = L.matmul(x, w)
        return y if bias is None else y + S.astype(float_input(bias, "linear", "bias"), x.dtype)
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be (out_features, in_features), got shape {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(
            f"linear: input {x.shape} @ weight.T {w.shape[::-1]}: the input's last axis "
            f"({x.shape[-1] if x.ndim else 'none'}) must equal in_features ({w.shape[1]}); "
            "the weight is (out_features, in_features) as in PyTorch"
        )
    b = None
    if bias is not None:
        b = S.astype(float_input(bias, "linear", "bias"), x.dtype)
        if b.shape != (w.shape[0],):
            raise ValueError(f"linear: bias must have shape ({w.shape[0]},), got {b.shape}")
    return apply(LINEAR, x, w, b)


@lower
def linear_relu(input: Any, weight: Any, bias: Any = None) -> Tensor:
    """``relu(linear(input, weight, bias))``; on Tensors of one float dtype one primitive
    (``nn.linear_relu``: the bias add and ReLU in one pass after the product).

    >>> import tapegrad as tg
    >>> linear_relu(tg.ones((2, 3)), -tg.ones((4, 3)), tg.full((4,), 5.0)).tolist()[0]
    [2.0, 2.0, 2.0, 2.0]
    """
    if _plain(input, weight, bias):
        return apply(LINEAR_RELU, input, weight, bias)
    return E.relu(linear(input, weight, bias))


def bilinear(input1: Any, input2: Any, weight: Any, bias: Any = None) -> Tensor:
    """``y_k = x1^T W_k x2 + b_k`` with ``weight`` (out, in1, in2).

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.bilinear(tg.ones((5, 2)), tg.ones((5, 3)), tg.ones((4, 2, 3))).shape
    (5, 4)
    """
    x1 = float_input(input1, "bilinear", "input1")
    x2 = float_input(input2, "bilinear", "input2")
    w = float_input(weight, "bilinear", "weight")
    if (
        w.ndim != 3
        or x1.shape[-1] != w.shape[1]
        or x2.shape[-1] != w.shape[2]
        or x1.shape[:-1] != x2.shape[:-1]
    ):
        raise ValueError(
            f"bilinear: inputs {x1.shape} and {x2.shape} do not fit weight {w.shape}: need "
            "(..., in1), (..., in2) with the same leading axes and weight (out, in1, in2)"
        )
    out, in1, in2 = w.shape
    lead = x1.shape[:-1]
    a = S.reshape(x1, (-1, in1))  # (B, in1)
    wm = S.reshape(S.permute_dims(w, (1, 0, 2)), (in1, out * in2))
    t = S.reshape(L.matmul(a, wm), (-1, out, in2))  # (B, out, in2)
    y = R.sum(t * S.expand_dims(S.reshape(x2, (-1, in2)), 1), axis=-1)  # (B, out)
    if bias is not None:
        y = y + float_input(bias, "bilinear", "bias")
    return S.reshape(y, lead + (out,))


def embedding(
    input: Any,
    weight: Any,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` (num_embeddings, dim) at integer ``input`` (any shape).

    The row at ``padding_idx`` gets no gradient. ``max_norm`` renormalises, in place, the
    looked-up rows whose ``norm_type``-norm exceeds it (as PyTorch). Gradients are dense
    (``sparse`` is accepted and ignored); repeated indices sum with a sort, not np.add.at.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.embedding(tg.tensor([[0, 2]]), tg.eye(3)).tolist()
    [[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    """
    w = float_input(weight, "embedding", "weight")
    idx = input._data if isinstance(input, Tensor) else np.asarray(input)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {idx.dtype}")
    if w.ndim != 2:
        raise ValueError(f"embedding: weight must be (num_embeddings, dim), got shape {w.shape}")
    n = w.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(
            f"embedding: indices must lie in [0, {n}), got min {int(idx.min())} max "
            f"{int(idx.max())}"
        )
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for {n} rows")
        padding_idx = padding_idx % n
    if scale_grad_by_freq:
        raise NotImplementedError(
            "embedding: scale_grad_by_freq=True is not supported; scale the loss instead"
        )
    if max_norm is not None:
        _renorm_rows(w, idx, max_norm, norm_type)
    return take(w, input if isinstance(input, Tensor) else idx, 0, zero_row=padding_idx)


def _renorm_rows(w: Tensor, idx: Any, max_norm: float, norm_type: float) -> None:
    """Scale the rows of ``w`` named by ``idx`` down to norm ``max_norm``, in place, no gradient."""
    rows = xp_of(idx).unique(idx.reshape(-1))
    data = w._data[rows]
    norms = (xp_of(data).abs(data) ** norm_type).sum(axis=1) ** (1.0 / norm_type)
    big = norms > max_norm
    if bool(big.any()):
        scale = max_norm / (norms[big] + 1e-7)
        w._data[rows[big]] = data[big] * scale[:, None].astype(data.dtype)
        w._version += 1


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """Integer class indices (any shape) to int64 one-hot vectors along a new last axis.

    ``num_classes=-1`` uses ``max + 1``.

    >>> import tapegrad as tg
    >>> import tapegrad.nn.functional as F
    >>> F.one_hot(tg.tensor([0, 2])).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    idx = tensor._data if isinstance(tensor, Tensor) else np.asarray(tensor)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"one_hot: indices must be integers, got dtype {idx.dtype}")
    if idx.size and idx.min() < 0:
        raise ValueError(f"one_hot: indices must be non-negative, got {int(idx.min())}")
    if num_classes == -1:
        num_classes = int(idx.max()) + 1 if idx.size else 0
    if idx.size and idx.max() >= num_classes:
        raise ValueError(f"one_hot: index {int(idx.max())} does not fit num_classes={num_classes}")
    xp = xp_of(idx)
    return _wrap((idx[..., None] == xp.arange(num_classes)).astype(np.int64))
