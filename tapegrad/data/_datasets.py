"""Small bundled datasets for examples and tests."""

from __future__ import annotations

from typing import Any

from .._backend import np
from ._dataset import TensorDataset

__all__ = ["load_digits"]


def load_digits(return_arrays: bool = False) -> Any:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes; no download).

    Returns a ``TensorDataset`` of ``(images, labels)``: images float32 of shape
    ``(1797, 1, 8, 8)`` scaled to ``[0, 1]`` (the raw pixels are 0..16), labels int64 in
    ``0..9``. With ``return_arrays=True`` returns the two numpy arrays instead.

    Needs scikit-learn (the ``examples`` extra): ``pip install tapegrad[examples]``.

    >>> import tapegrad as tg
    >>> images, labels = tg.data.load_digits(return_arrays=True)
    >>> images.shape, images.dtype, labels.dtype, float(images.max())
    ((1797, 1, 8, 8), dtype('float32'), dtype('int64'), 1.0)
    """
    try:
        from sklearn.datasets import load_digits as _sk_load_digits  # noqa: PLC0415
    except ImportError:
        raise ImportError(
            "tg.data.load_digits needs scikit-learn, which ships the digits data: "
            "pip install tapegrad[examples]"
        ) from None
    d = _sk_load_digits()
    images = (np.asarray(d.images, dtype=np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    labels = np.asarray(d.target, dtype=np.int64)
    if return_arrays:
        return images, labels
    return TensorDataset(images, labels)
