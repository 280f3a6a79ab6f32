"""numpy.linalg with gradients: inv, solve, det, slogdet, cholesky, eigh, qr, svd, and the
compositions built on them (pinv, norm with every ord, matrix_power).

Decompositions with several results (eigh, qr, svd) are one primitive each whose output packs
the results along the last axis; the public function slices them out, so each result's
gradient reaches the one VJP (the slices' gradients are zero where a result is unused). The
VJPs are the standard formulas (as in autograd and JAX) for real inputs. eigh and cholesky
read only the symmetric part ``(a + a.T) / 2`` of their input (JAX's convention), so their
gradients are symmetric.
"""

from __future__ import annotations

import builtins
from typing import Any

from .._autodiff import OUT, apply, defprim
from .._backend import np
from .._dtypes import default_float
from .._tensor import Tensor, _wrap
from . import _shape as S
from ._binary import where
from ._common import as_tensor, operands


def _T(xp: Any, a: Any) -> Any:
    return xp.swapaxes(a, -1, -2)


def _eye(xp: Any, like: Any, n: int) -> Any:
    return xp.const(np.eye(n, dtype=xp.data(like).dtype))


def _square(a: Tensor, name: str) -> Tensor:
    a = as_tensor(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(
            f"linalg.{name}: needs square matrices in the last two axes, got shape {a.shape}"
        )
    return _float(a, name)


def _float(a: Tensor, name: str) -> Tensor:
    if a.dtype.kind not in "f":
        a = a.astype(default_float())
    if a.ndim < 2:
        raise ValueError(f"linalg.{name}: needs at least 2 dimensions, got shape {a.shape}")
    return a


# --- inv, solve, det, slogdet --------------------------------------------------------------------
_inv = defprim(
    "linalg.inv",
    np.linalg.inv,
    lambda xp, g, ans, a: -xp.matmul(xp.matmul(_T(xp, ans), g), _T(xp, ans)),
    (OUT,),
)


def _solve_vjp_b(xp: Any, g: Any, ans: Any, a: Any, b: Any) -> Any:
    return xp.apply(_solve, _T(xp, a), g)


def _solve_vjp_a(xp: Any, g: Any, ans: Any, a: Any, b: Any) -> Any:
    gb = xp.apply(_solve, _T(xp, a), g)
    if ans.ndim == a.ndim - 1:  # b was a vector
        return -xp.expand_dims(gb, -1) * xp.expand_dims(ans, -2)
    return -xp.matmul(gb, _T(xp, ans))


_solve = defprim("linalg.solve", np.linalg.solve, (_solve_vjp_a, _solve_vjp_b), (0, OUT))


def _det_vjp(xp: Any, g: Any, ans: Any, a: Any) -> Any:
    inv_t = _T(xp, xp.apply(_inv, a))
    return xp.expand_dims(xp.expand_dims(g * ans, -1), -1) * inv_t


_det = defprim("linalg.det", np.linalg.det, _det_vjp, (0, OUT))
_logabsdet = defprim(
    "linalg.logabsdet",
    lambda a: np.asarray(np.linalg.slogdet(a)[1]),
    lambda xp, g, ans, a: xp.expand_dims(xp.expand_dims(g, -1), -1) * _T(xp, xp.apply(_inv, a)),
    (0,),
)


def inv(a: Any) -> Tensor:
    """The inverse of each square matrix in the last two axes.

    >>> import tapegrad as tg
    >>> tg.linalg.inv(tg.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return apply(_inv, _square(a, "inv"))


def solve(a: Any, b: Any) -> Tensor:
    """``x`` with ``a @ x = b`` (numpy's rules: ``b`` is a vector only when it is 1-D)."""
    a = _square(a, "solve")
    a, b = operands(a, as_tensor(b))
    return apply(_solve, a, b)


def det(a: Any) -> Tensor:
    """The determinant of each square matrix."""
    return apply(_det, _square(a, "det"))


def slogdet(a: Any) -> tuple[Tensor, Tensor]:
    """``(sign, log|det|)``; the sign is a constant, ``log|det|`` has the gradient ``inv(a).T``."""
    a = _square(a, "slogdet")
    sign = np.linalg.slogdet(a._data)[0]
    return as_tensor(np.asarray(sign)), apply(_logabsdet, a)


def matrix_power(a: Any, n: int) -> Tensor:
    """``a @ a @ ... @ a`` (``n`` times; the inverse's powers for negative ``n``), by squaring."""
    a = _square(a, "matrix_power")
    if n < 0:
        a, n = inv(a), -n
    out: Tensor | None = None
    base = a
    while n:
        if n & 1:
            out = base if out is None else out @ base
        n >>= 1
        if n:
            base = base @ base
    if out is None:
        return S.broadcast_to(as_tensor(np.eye(a.shape[-1], dtype=a.dtype)), a.shape) * 1
    return out


# --- cholesky, eigh, qr, svd -----------------------------------------------------------------------
def _sym(xp: Any, a: Any) -> Any:
    return (a + _T(xp, a)) * 0.5


def _cholesky_vjp(xp: Any, g: Any, ans: Any, a: Any) -> Any:
    # L^-T phi(L^T g) L^-1, symmetrised; phi keeps the lower triangle with half the diagonal
    n = ans.shape[-1]
    linv = xp.apply(_inv, ans)
    p = xp.matmul(_T(xp, ans), g)
    phi = xp.tril(p) - p * _eye(xp, p, n) * 0.5
    return _sym(xp, xp.matmul(xp.matmul(_T(xp, linv), phi), linv))


_cholesky = defprim("linalg.cholesky", np.linalg.cholesky, _cholesky_vjp, (OUT,))


def cholesky(a: Any) -> Tensor:
    """The lower-triangular ``L`` with ``L @ L.T = a`` (reads ``(a + a.T) / 2``)."""
    a = _square(a, "cholesky")
    return apply(_cholesky, (a + S.swapaxes(a, -1, -2)) * 0.5)


def _eigh_fwd(a: Any) -> Any:
    w, v = np.linalg.eigh(a)
    return np.concatenate([w[..., None, :], v], axis=-2)  # (..., 1 + n, n)


def _eigh_vjp(xp: Any, g: Any, ans: Any, a: Any) -> Any:
    n = ans.shape[-1]
    w, v = ans[..., 0, :], ans[..., 1:, :]
    gw, gv = g[..., 0, :], g[..., 1:, :]
    eye = _eye(xp, v, n)
    inner = eye * xp.expand_dims(gw, -2)
    if _nonzero(xp, gv):  # eigenvalues alone: defined for repeated ones too (no 1 / (w_j - w_i))
        dw = xp.expand_dims(w, -2) - xp.expand_dims(w, -1)  # w_j - w_i
        f = (1.0 - eye) / (dw + eye)
        inner = inner + f * xp.matmul(_T(xp, v), gv)
    return _sym(xp, xp.matmul(xp.matmul(v, inner), _T(xp, v)))


def _nonzero(xp: Any, g: Any) -> bool:
    """Whether a result's gradient has any non-zero entry (a constant decision)."""
    return builtins.bool((xp.data(g) != 0).any())


_eigh = defprim("linalg.eigh", _eigh_fwd, _eigh_vjp, (OUT,))


def eigh(a: Any, UPLO: str = "L") -> tuple[Tensor, Tensor]:  # noqa: N803 - numpy's name
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices. As numpy, only the lower
    (``UPLO="L"``) or upper (``"U"``) triangle is read. The gradient needs distinct eigenvalues.

    >>> import tapegrad as tg
    >>> w, v = tg.linalg.eigh(tg.tensor([[2.0, 0.0], [0.0, 1.0]]))
    >>> w.tolist()
    [1.0, 2.0]
    >>> tg.linalg.eigh(tg.tensor([[1.0, 5.0], [0.0, 1.0]]))[0].tolist()  # reads the lower 0.0
    [1.0, 1.0]
    """
    a = _square(a, "eigh")
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    tri = S.tril(a, -1) if UPLO == "L" else S.triu(a, 1)
    diag = a * _wrap(np.eye(a.shape[-1], dtype=a.dtype))
    packed = apply(_eigh, diag + tri + S.swapaxes(tri, -1, -2))  # the symmetric matrix it reads
    return packed[..., 0, :], packed[..., 1:, :]


def _eig_fwd(a: Any) -> Any:
    w, v = np.linalg.eig(a)
    if np.iscomplexobj(w):  # numpy returns real arrays when every eigenvalue is real
        raise ValueError(
            f"this matrix of shape {a.shape} has complex eigenvalues; tapegrad's "
            "tensors are real-valued. For a symmetric matrix use tg.linalg.eigh"
        )
    return np.concatenate([w[..., None, :], v], axis=-2)  # (..., 1 + n, n)


def _eig_vjp(xp: Any, g: Any, ans: Any, a: Any) -> Any:
    # the real case of autograd's grad_eig: A = V diag(w) V^-1 with unit-norm columns of V
    n = ans.shape[-1]
    w, v = ans[..., 0, :], ans[..., 1:, :]
    gw, gv = g[..., 0, :], g[..., 1:, :]
    eye = _eye(xp, v, n)
    dw = xp.expand_dims(w, -2) - xp.expand_dims(w, -1)  # w_j - w_i
    f = (1.0 - eye) / (dw + eye)
    vt = _T(xp, v)
    vtgv = xp.matmul(vt, gv)
    inner = eye * xp.expand_dims(gw, -2) + f * vtgv
    inner = inner - f * xp.matmul(xp.matmul(vt, v), eye * vtgv)  # keeps the columns unit-norm
    return xp.matmul(xp.matmul(_T(xp, xp.apply(_inv, v)), inner), vt)


_eig = defprim("linalg.eig", _eig_fwd, _eig_vjp, (OUT,))


def eig(a: Any) -> tuple[Tensor, Tensor]:
    """Eigenvalues and unit-norm eigenvectors (columns) of a general square matrix whose
    eigenvalues are all real (complex ones raise). The gradient needs distinct eigenvalues.

    >>> import tapegrad as tg
    >>> w, v = tg.linalg.eig(tg.tensor([[2.0, 1.0], [0.0, 3.0]]))
    >>> w.tolist()
    [2.0, 3.0]
    """
    a = _float(_square(a, "eig"), "eig")
    packed = apply(_eig, a)
    return packed[..., 0, :], packed[..., 1:, :]


def _qr_fwd(a: Any) -> Any:
    q, r = np.linalg.qr(a)
    return np.concatenate([q, r], axis=-2)  # (..., m + n, n)


def _qr_vjp(xp: Any, g: Any, ans: Any, a: Any) -> Any:
    m = a.shape[-2]
    q, r = ans[..., :m, :], ans[..., m:, :]
    gq, gr = g[..., :m, :], g[..., m:, :]
    mm = xp.matmul(r, _T(xp, gr)) - xp.matmul(_T(xp, gq), q)
    low = xp.tril(mm, -1)
    copyltu = low + _T(xp, low) + mm * _eye(xp, mm, mm.shape[-1])
    b = gq + xp.matmul(q, copyltu)
    return xp.matmul(b, _T(xp, xp.apply(_inv, r)))


_qr = defprim("linalg.qr", _qr_fwd, _qr_vjp, (0, OUT))


def qr(a: Any) -> tuple[Tensor, Tensor]:
    """The reduced QR decomposition ``(q, r)``; gradients for ``m >= n`` with full rank."""
    a = _float(as_tensor(a), "qr")
    m, n = a.shape[-2:]
    if m < n:
        raise ValueError(
            f"linalg.qr: gradients need at least as many rows as columns, got shape {a.shape}; "
            "decompose the transpose instead"
        )
    packed = apply(_qr, a)
    return packed[..., :m, :], packed[..., m:, :]


def _svd_fwd(a: Any) -> Any:
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.concatenate([u, s[..., None, :], np.swapaxes(vh, -1, -2)], axis=-2)


def _svd_vjp(xp: Any, g: Any, ans: Any, a: Any) -> Any:
    m, n = a.shape[-2:]
    k = builtins.min(m, n)
    u, s, v = ans[..., :m, :], ans[..., m, :], ans[..., m + 1 :, :]
    gu, gs, gv = g[..., :m, :], g[..., m, :], g[..., m + 1 :, :]
    eye = _eye(xp, u, k)
    t = eye * xp.expand_dims(gs, -2)
    if not (_nonzero(xp, gu) or _nonzero(xp, gv)):
        # singular values alone: u diag(gs) v^T, defined for repeated and zero ones too
        return xp.matmul(xp.matmul(u, t), _T(xp, v))
    s_row, s_col = xp.expand_dims(s, -2), xp.expand_dims(s, -1)
    f = (1.0 - eye) / (s_row * s_row - s_col * s_col + eye)
    utgu = xp.matmul(_T(xp, u), gu)
    vtgv = xp.matmul(_T(xp, v), gv)
    t = t + f * (utgu - _T(xp, utgu)) * s_row
    t = t + s_col * (f * (vtgv - _T(xp, vtgv)))
    out = xp.matmul(xp.matmul(u, t), _T(xp, v))
    if m < n:
        proj = _eye(xp, v, n) - xp.matmul(v, _T(xp, v))
        out = out + xp.matmul(xp.matmul(u / s_row, _T(xp, gv)), proj)
    elif m > n:
        proj = _eye(xp, u, m) - xp.matmul(u, _T(xp, u))
        out = out + _T(xp, xp.matmul(xp.matmul(v / s_row, _T(xp, gu)), proj))
    return out


_svd = defprim("linalg.svd", _svd_fwd, _svd_vjp, (0, OUT))


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """``(u, s, vh)`` with ``a = u @ diag(s) @ vh`` (or ``s`` alone with
    ``compute_uv=False``). Gradients need the reduced form (``full_matrices=False``) and
    distinct, non-zero singular values; ``s`` alone is differentiable everywhere it is distinct.

    >>> import tapegrad as tg
    >>> tg.linalg.svd(tg.tensor([[3.0, 0.0], [0.0, 4.0]]), compute_uv=False).tolist()
    [4.0, 3.0]
    """
    a = _float(as_tensor(a), "svd")
    m, n = a.shape[-2:]
    k = builtins.min(m, n)
    if compute_uv and full_matrices and m != n:
        raise ValueError(
            f"linalg.svd: full_matrices=True for a non-square {a.shape} has no unique gradient; "
            "pass full_matrices=False (numpy's default is True)"
        )
    packed = apply(_svd, a)
    s = packed[..., m, :k]
    if not compute_uv:
        return s
    return packed[..., :m, :k], s, S.swapaxes(packed[..., m + 1 :, :k], -1, -2)


def pinv(a: Any, rcond: float = 1e-15) -> Tensor:
    """The Moore-Penrose pseudo-inverse from the SVD (singular values below
    ``rcond * max(s)`` dropped), so its gradient is the SVD's: it needs distinct singular
    values (``pinv`` of a matrix with a repeated singular value has a NaN gradient)."""
    from ._reduce import amax  # noqa: PLC0415

    a = _float(as_tensor(a), "pinv")
    u, s, vh = svd(a, full_matrices=False)
    keep = s > amax(s, axis=-1, keepdims=True) * rcond
    s_inv = where(keep, 1.0 / where(keep, s, 1.0), 0.0)
    return S.swapaxes(vh, -1, -2) @ (S.expand_dims(s_inv, -1) * S.swapaxes(u, -1, -2))


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """numpy.linalg.norm: vector norms (``ord`` any p, inf, -inf, 0) over one axis, matrix
    norms ('fro', 'nuc', 1, -1, 2, -2, inf, -inf) over two; ``axis=None`` is the 2-norm of
    the flattened input (Frobenius for a matrix) unless ``ord`` names a matrix norm.

    >>> import tapegrad as tg
    >>> tg.linalg.norm(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), ord=1).item()
    6.0
    """
    from . import _elementwise as E  # noqa: PLC0415
    from . import _reduce as R  # noqa: PLC0415

    x = as_tensor(x)
    if x.dtype.kind != "f":
        x = x.astype(default_float())
    if axis is None:
        if ord is None or x.ndim == 1 or (ord == "fro" and x.ndim == 2):
            out = R.norm(S.reshape(x, (-1,)), 2 if ord in (None, "fro") else ord)
            return S.reshape(out, (1,) * x.ndim) if keepdims else out
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) % builtins.max(x.ndim, 1) for a in axes)
    if len(axes) == 1:
        (ax,) = axes
        a = E.abs(x)
        if ord is None or ord == 2:
            return R.norm(x, 2, axis=ax, keepdims=keepdims)
        if ord == np.inf:
            return R.amax(a, axis=ax, keepdims=keepdims)
        if ord == -np.inf:
            return R.amin(a, axis=ax, keepdims=keepdims)
        if ord == 0:
            return R.sum((x != 0).astype(x.dtype), axis=ax, keepdims=keepdims)
        if isinstance(ord, str):
            raise ValueError(f"linalg.norm: ord {ord!r} is a matrix norm; give two axes")
        return R.sum(a**ord, axis=ax, keepdims=keepdims) ** (1.0 / ord)
    if len(axes) != 2:
        raise ValueError(f"linalg.norm: axis must name one or two axes, got {axis!r}")
    r, c = axes
    if ord is None or ord == "fro":
        return R.sum(x * x, axis=axes, keepdims=keepdims) ** 0.5
    if ord in ("nuc", 2, -2):
        xm = _last_two(x, r, c)
        s = svd(xm, compute_uv=False)
        out = R.sum(s, -1) if ord == "nuc" else R.amax(s, -1) if ord == 2 else R.amin(s, -1)
        if keepdims:
            for a in sorted(axes):
                out = S.expand_dims(out, a)
        return out
    if ord in (1, -1, np.inf, -np.inf):
        sum_axis, pick_axis = (r, c) if ord in (1, -1) else (c, r)
        sums = R.sum(E.abs(x), axis=sum_axis, keepdims=True)
        f = R.amax if ord in (1, np.inf) else R.amin
        out = f(sums, axis=pick_axis, keepdims=True)
        return out if keepdims else S.squeeze(out, axis=axes)
    raise ValueError(f"linalg.norm: invalid ord {ord!r} for a matrix norm")


def _last_two(x: Tensor, r: int, c: int) -> Tensor:
    rest = [i for i in range(x.ndim) if i not in (r, c)]
    return S.permute_dims(x, (*rest, r, c))
