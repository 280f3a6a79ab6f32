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
    if d in {"cuda", "gpu", "cuda:0"}:
        return "cuda"
    if d.startswith("cuda:"):  # would silently run on GPU 0: say so instead
        raise ValueError(
            f"device {device!r}: tapegrad uses one GPU, CuPy's current device ('cuda' or "
            "'cuda:0'); choose the GPU with CUDA_VISIBLE_DEVICES or cupy.cuda.Device(n).use()"
        )
    raise ValueError(f"unknown device {device!r}: use 'cpu' or 'cuda'")


def _is_cupy(a: Any) -> bool:
    if _cupy is None:
        # a CuPy array made before tapegrad first asked for CuPy (cupy.asarray, from_dlpack)
        if type(a).__module__.split(".")[0] != "cupy":
            return False
        cupy()
    return isinstance(a, _cupy.ndarray)  # type: ignore[union-attr]


def is_array(a: Any) -> bool:
    if isinstance(a, np.ndarray):
        return True
    return _is_cupy(a)


def xp_of(a: Any) -> ModuleType:
    """The array module (numpy or cupy) that owns ``a``."""
    if isinstance(a, np.ndarray) or not _is_cupy(a):
        return np
    return _cupy  # type: ignore[return-value]


def device_of(a: Any) -> str:
    if isinstance(a, np.ndarray) or not _is_cupy(a):
        return "cpu"
    return "cuda"


def to_device(a: Any, device: str) -> Any:
    device = normalize_device(device)
    if device == "cpu":
        return _cupy.asnumpy(a) if _is_cupy(a) else a  # type: ignore[union-attr]
    return cupy().asarray(a)
