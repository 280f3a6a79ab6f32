"""Linear algebra: matmul (numpy's 1-D, batched and broadcast rules), einsum, outer, tensordot."""

from __future__ import annotations

import builtins
import re
from typing import Any

from .._amp import lower
from .._autodiff import apply, defprim
from .._backend import np, xp_of
from .._tensor import Tensor
from ._common import ArgumentError, as_tensor, check_axis, operands, result_dtype
from ._shape import reshape


def _matmul_vjp_x(xp: Any, g: Any, ans: Any, x: Any, y: Any) -> Any:
    if x.ndim == 1 and y.ndim == 1:
        return g * y
    if y.ndim == 1:
        return xp.expand_dims(g, -1) * y  # (..., n, 1) * (k,) -> (..., n, k)
    if x.ndim == 1:
        return xp.reshape(
            xp.matmul(xp.expand_dims(g, -2), xp.swapaxes(y, -1, -2)),
            (-1,) if g.ndim == 1 else g.shape[:-1] + (x.shape[0],),
        )
    return xp.matmul(g, xp.swapaxes(y, -1, -2))


def _matmul_vjp_y(xp: Any, g: Any, ans: Any, x: Any, y: Any) -> Any:
    if x.ndim == 1 and y.ndim == 1:
        return g * x
    if x.ndim == 1:
        return xp.expand_dims(x, -1) * xp.expand_dims(g, -2)  # (k, 1) * (..., 1, m)
    if y.ndim == 1:
        return xp.matmul(xp.swapaxes(x, -1, -2), xp.expand_dims(g, -1))[..., 0]  # (..., k)
    return xp.matmul(xp.swapaxes(x, -1, -2), g)


_matmul = defprim("matmul", np.matmul, (_matmul_vjp_x, _matmul_vjp_y), (0, 1))


@lower
def matmul(x: Any, y: Any) -> Tensor:
    """Matrix product with numpy's rules (1-D operands, batch dimensions broadcast).

    >>> import tapegrad as tg
    >>> (tg.arange(6.0).reshape(2, 3) @ tg.ones((3, 2))).tolist()
    [[3.0, 3.0], [12.0, 12.0]]
    """
    x, y = operands(as_tensor(x), as_tensor(y))
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(
            f"matmul: operands must have at least 1 dimension, got shapes {x.shape} and {y.shape}; "
            "use * for scalars"
        )
    k1 = x.shape[-1]
    k2 = y.shape[0] if y.ndim == 1 else y.shape[-2]
    if k1 != k2:
        raise ArgumentError(
            f"matmul: {x.shape} @ {y.shape}: inner dimensions {k1} and {k2} differ "
            f"(x's last axis must equal y's {'only' if y.ndim == 1 else 'second-to-last'} axis; "
            "transpose one operand?)"
        )
    if x.ndim > 2 or y.ndim > 2:
        try:
            np.broadcast_shapes(x.shape[:-2], y.shape[:-2] if y.ndim > 1 else ())
        except ValueError:
            raise ValueError(
                f"matmul: {x.shape} @ {y.shape}: batch dimensions {x.shape[:-2]} and "
                f"{y.shape[:-2]} do not broadcast"
            ) from None
    return apply(_matmul, x, y)


def outer(x: Any, y: Any) -> Tensor:
    """Outer product ``out[i, j] = x[i] * y[j]`` of two 1-D tensors (others are flattened).

    >>> import tapegrad as tg
    >>> tg.outer(tg.tensor([1, 2]), tg.tensor([1, 10, 100])).tolist()
    [[1, 10, 100], [2, 20, 200]]
    """
    x, y = as_tensor(x), as_tensor(y)
    return reshape(x, (-1, 1)) * reshape(y, (1, -1))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum_vjp(i: int) -> Any:
    def vjp(xp: Any, g: Any, ans: Any, *ops: Any, subscripts: str) -> Any:
        ins, out = subscripts.split("->")
        terms = ins.split(",")
        target = terms[i]
        others = [t for j, t in enumerate(terms) if j != i]
        other_ops = [o for j, o in enumerate(ops) if j != i]
        uniq = "".join(dict.fromkeys(target))  # target's letters, each once, in order
        # letters that only input i has (and the output lacks) were summed: broadcast them back
        rest = set(out + "".join(others))
        kept = "".join(c for c in uniq if c in rest)
        r = _einsum(xp, ",".join([out, *others]) + "->" + kept, g, *other_ops)
        if kept != uniq:
            size = dict(zip(target, ops[i].shape, strict=True))
            size.update(zip(kept, r.shape, strict=True))
            r = xp.reshape(r, tuple(size[c] if c in kept else 1 for c in uniq))
            r = xp.broadcast_to(r, tuple(size[c] for c in uniq))
        if uniq == target:
            return r
        # a repeated letter reads a diagonal: put the gradient back on it with identity factors
        free = iter(c for c in _LETTERS if c not in subscripts)
        seen: set[str] = set()
        spread = ""
        deltas: list[str] = []
        for c in target:
            if c in seen:
                d = next(free)
                deltas.append(c + d)
                spread += d
            else:
                seen.add(c)
                spread += c
        n = dict(zip(target, ops[i].shape, strict=True))
        ap = xp_of(xp.data(r))
        eyes = [xp.const(ap.eye(n[d[0]], dtype=r.dtype)) for d in deltas]
        return _einsum(xp, ",".join([uniq, *deltas]) + "->" + spread, r, *eyes)

    return vjp


def _einsum(xp: Any, subscripts: str, *ops: Any) -> Any:
    return xp.apply(_einsum_prim(len(ops)), *ops, subscripts=subscripts)


_EINSUM: dict[int, Any] = {}
_BLAS_FROM = 4096  # elements; below it einsum's own loops beat the path search + BLAS call


def _einsum_fwd(*ops: Any, subscripts: str) -> Any:
    big = len(ops) > 2 or builtins.any(o.size >= _BLAS_FROM for o in ops)
    return np.einsum(subscripts, *ops, optimize=big)


def _einsum_prim(n: int) -> Any:
    # one primitive per arity, so each operand has its own VJP slot
    p = _EINSUM.get(n)
    if p is None:
        p = defprim(
            f"einsum{n}" if n != 2 else "einsum",
            _einsum_fwd,
            tuple(_einsum_vjp(i) for i in range(n)),
            tuple(range(n)),
        )
        _EINSUM[n] = p
    return p


def _explicit(subscripts: str, ops: list[Tensor]) -> str:
    s = subscripts.replace(" ", "")
    if "..." in s:
        # name the ellipsis dimensions with unused capital letters
        free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in s]
        ins = s.split("->")[0].split(",")
        nell = max(op.ndim - (len(t) - 3) for t, op in zip(ins, ops, strict=True) if "..." in t)
        ell = "".join(free[:nell])
        new_ins = []
        for t, op in zip(ins, ops, strict=True):
            k = op.ndim - (len(t) - 3)
            new_ins.append(t.replace("...", ell[nell - k :]) if "..." in t else t)
        if "->" in s:
            out = s.split("->")[1].replace("...", ell)
        else:
            out = ell + "".join(
                sorted(
                    c
                    for c in set("".join(new_ins))
                    if "".join(new_ins).count(c) == 1 and c not in ell
                )
            )
        return ",".join(new_ins) + "->" + out
    if "->" not in s:
        letters = "".join(s.split(","))
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
        return s + "->" + out
    return s


def _interleaved(args: tuple[Any, ...]) -> tuple[str, list[Any]]:
    """numpy's ``einsum(op0, sublist0, op1, sublist1, ..., [sublistout])`` as subscripts."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def term(sub: Any) -> str:
        out = []
        for i in sub:
            if i is Ellipsis:
                out.append("...")
            elif isinstance(i, int) and 0 <= i < len(letters):
                out.append(letters[i])
            else:
                raise ValueError(
                    f"einsum: a sublist holds ints in [0, 52) or Ellipsis, got {i!r} in {sub!r}"
                )
        return "".join(out)

    ops = list(args[0:-1:2] if len(args) % 2 else args[0::2])  # odd: the last is the output's
    terms = [term(sub) for sub in args[1::2]]
    out = "->" + term(args[-1]) if len(args) % 2 else ""
    return ",".join(terms) + out, ops


@lower
def einsum(subscripts: Any, *operands_: Any) -> Tensor:
    """Einstein summation over any subscripts (implicit or explicit output, '...' allowed).

    numpy's interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` works too, and
    PyTorch's list of operands ``einsum("i,i->", [a, b])``.

    >>> import tapegrad as tg
    >>> tg.einsum("ij,jk->ik", tg.arange(6.0).reshape(2, 3), tg.ones((3, 2))).tolist()
    [[3.0, 3.0], [12.0, 12.0]]
    >>> tg.einsum(tg.ones((2, 3)), [0, 1], tg.ones(3), [1], [0]).tolist()
    [3.0, 3.0]
    """
    if isinstance(subscripts, str) and len(operands_) == 1 and isinstance(operands_[0], (list, tuple)):
        operands_ = tuple(operands_[0])  # PyTorch's einsum(eq, [a, b])
    if not isinstance(subscripts, str):
        subscripts, operands_ = _interleaved((subscripts, *operands_))  # type: ignore[assignment]
    ops = [as_tensor(o) for o in operands_]
    s = _explicit(subscripts, ops)
    if not re.fullmatch(r"[A-Za-z]*(,[A-Za-z]*)*->[A-Za-z]*", s):
        raise ValueError(f"einsum: cannot parse subscripts {subscripts!r}")
    terms = s.split("->")[0].split(",")
    if len(terms) != len(ops):
        raise ValueError(f"einsum: {subscripts!r} names {len(terms)} operands, got {len(ops)}")
    sizes: dict[str, int] = {}
    for t, op in zip(terms, ops, strict=True):
        if len(t) != op.ndim:
            raise ArgumentError(
                f"einsum: term '{t}' has {len(t)} letters, its operand has shape {op.shape}"
            )
        for c, n in zip(t, op.shape, strict=True):
            if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1:
                raise ArgumentError(
                    f"einsum: letter '{c}' has sizes {sizes[c]} and {n} in {subscripts!r}"
                )
    dt = result_dtype(*[o.dtype for o in ops])
    ops = [o.astype(dt) for o in ops]
    return apply(_einsum_prim(len(ops)), *ops, subscripts=s)


@lower
def tensordot(x: Any, y: Any, axes: Any = 2) -> Tensor:
    """numpy's tensordot: sum over the last ``axes`` axes of ``x`` and the first of ``y``, or
    over the pairs ``axes = (x_axes, y_axes)``; computed as an einsum.

    >>> import tapegrad as tg
    >>> tg.tensordot(tg.ones((2, 3, 4)), tg.ones((3, 4, 5))).shape
    (2, 5)
    """
    x, y = as_tensor(x), as_tensor(y)
    if isinstance(axes, (int, np.integer)):
        gx: list[Any] = list(range(x.ndim - int(axes), x.ndim))
        gy: list[Any] = list(range(int(axes)))
    else:
        gx, gy = ([a] if isinstance(a, (int, np.integer)) else list(a) for a in axes)
    ax = [check_axis(int(a), x.ndim, "tensordot") for a in gx]
    ay = [check_axis(int(a), y.ndim, "tensordot") for a in gy]
    if len(ax) != len(ay) or builtins.any(
        x.shape[a] != y.shape[b] for a, b in zip(ax, ay, strict=True)
    ):
        raise ValueError(
            f"tensordot: cannot contract axes {ax} of {x.shape} with axes {ay} of {y.shape}; "
            "the paired axes must have equal sizes"
        )
    letters = iter(_LETTERS)
    lx = [next(letters) for _ in range(x.ndim)]
    ly = [next(letters) for _ in range(y.ndim)]
    for a, b in zip(ax, ay, strict=True):
        ly[b] = lx[a]
    out = [c for i, c in enumerate(lx) if i not in ax] + [
        c for i, c in enumerate(ly) if i not in ay
    ]
    return einsum("".join(lx) + "," + "".join(ly) + "->" + "".join(out), x, y)
