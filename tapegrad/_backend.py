"""The array backends: numpy on the CPU (embedded default) and CuPy on the GPU (lazy).

This is the only module that imports numpy or cupy. Everything else takes ``np`` from here;
numpy's dispatch protocols (``__array_ufunc__``/``__array_function__``) route calls on CuPy
arrays to CuPy, so one set of kernels serves both devices.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["np", "cupy", "xp_of", "device_of", "to_device", "is_array", "normalize_device"]

_cupy: ModuleType | None = None


def cupy() -> ModuleType:
    """Import CuPy on first use; a clear error when it is missing."""
    global _cupy
    if _cupy is None:
        try:
            import cupy as cp  # noqa: PLC0415
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise RuntimeError(
                "device 'cuda' needs CuPy: install it with `pip install tapegrad[cuda]` "
                "(or a cupy-cudaXXx wheel that matches your CUDA version)"
            ) from e
        _cupy = cp
    return _cupy


def normalize_device(device: Any) -> str:
    if device is None:
        return "cpu"
    d = str(device)
    if d == "cpu":
        return "cpu"
    if d in {"cuda", "gpu"} or d.startswith("cuda:"):
        return "cuda"
    raise ValueError(f"unknown device {device!r}: use 'cpu' or 'cuda'")


def is_array(a: Any) -> bool:
    if isinstance(a, np.ndarray):
        return True
    return _cupy is not None and isinstance(a, _cupy.ndarray)


def xp_of(a: Any) -> ModuleType:
    """The array module (numpy or cupy) that owns ``a``."""
    if _cupy is not None and isinstance(a, _cupy.ndarray):
        return _cupy
    return np


def device_of(a: Any) -> str:
    if _cupy is not None and isinstance(a, _cupy.ndarray):
        return "cuda"
    return "cpu"


def to_device(a: Any, device: str) -> Any:
    device = normalize_device(device)
    if device == "cpu":
        if _cupy is not None and isinstance(a, _cupy.ndarray):
            return _cupy.asnumpy(a)
        return a
    return cupy().asarray(a)
