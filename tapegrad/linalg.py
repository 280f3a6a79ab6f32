"""``tg.linalg``: numpy.linalg's functions with gradients, and the matrix products.

>>> import tapegrad as tg
>>> tg.linalg.det(tg.tensor([[2.0, 1.0], [1.0, 3.0]])).item()
5.0
"""

from .ops._linalg import matmul, outer, tensordot
from .ops._linalg_decomp import (
    cholesky,
    det,
    eig,
    eigh,
    inv,
    matrix_power,
    norm,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
)
from .ops._numpy_extra import cross, diagonal, matrix_trace

trace = matrix_trace

__all__ = [
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "inv",
    "matmul",
    "matrix_power",
    "matrix_trace",
    "norm",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "tensordot",
    "trace",
]
