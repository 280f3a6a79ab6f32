"""Creation functions and random numbers (a global seed plus Generator objects)."""

from __future__ import annotations

from typing import Any

from . import _backend as B
from ._backend import np
from ._dtypes import as_dtype, default_float
from ._tensor import Tensor, _to_array, _wrap


def _shape(shape: Any) -> tuple[int, ...]:
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def _on(a: Any, device: Any) -> Tensor:
    if device is not None and B.normalize_device(device) != "cpu":
        a = B.to_device(a, device)
    return _wrap(a)


def tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor from Python data, an array or a tensor (always a copy).

    Python floats become float32 (the default float), ints int64, bools bool.

    >>> import tapegrad as tg
    >>> tg.tensor([1, 2]).dtype, tg.tensor([1.5]).dtype
    (dtype('int64'), dtype('float32'))
    """
    arr = _to_array(data, dtype, device)
    if isinstance(data, Tensor) or B.is_array(data):
        arr = arr.copy() if arr is (data._data if isinstance(data, Tensor) else data) else arr
    return _wrap(arr)


def from_numpy(a: Any) -> Tensor:
    """A tensor sharing memory with the numpy array ``a`` (its dtype kept)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy array, got {type(a).__name__}")
    return _wrap(a)


def from_dlpack(x: Any) -> Tensor:
    """A tensor sharing memory with any DLPack producer (numpy, CuPy, PyTorch, JAX)."""
    if hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] != 1:
        return _wrap(B.cupy().from_dlpack(x))
    return _wrap(np.from_dlpack(x))


def zeros(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _on(np.zeros(_shape(shape), dtype=as_dtype(dtype)), device)


def ones(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _on(np.ones(_shape(shape), dtype=as_dtype(dtype)), device)


def empty(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _on(np.empty(_shape(shape), dtype=as_dtype(dtype)), device)


def full(shape: Any, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if dtype is None:
        dtype = (
            np.bool_ if isinstance(fill_value, bool)
            else np.int64 if isinstance(fill_value, int) else default_float()
        )  # fmt: skip
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _on(np.full(shape, fill_value, dtype=as_dtype(dtype)), device)


def _like(x: Any, f: Any, dtype: Any, device: Any) -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor(x)
    d = as_dtype(dtype) if dtype is not None else x.dtype
    return _on(f(x.shape, d), device if device is not None else x.device)


def zeros_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(x, lambda s, d: np.zeros(s, dtype=d), dtype, device)


def ones_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(x, lambda s, d: np.ones(s, dtype=d), dtype, device)


def empty_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(x, lambda s, d: np.empty(s, dtype=d), dtype, device)


def full_like(x: Any, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(x, lambda s, d: np.full(s, fill_value, dtype=d), dtype, device)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: Any = None) -> Tensor:
    """Evenly spaced values in ``[start, stop)``; int64 for ints, float32 for floats."""
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = np.int64 if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) else default_float()
    return _on(np.arange(start, stop, step, dtype=as_dtype(dtype)), device)


def linspace(start: float, stop: float, num: int = 50, endpoint: bool = True, dtype: Any = None, device: Any = None) -> Tensor:
    return _on(np.linspace(start, stop, num, endpoint=endpoint, dtype=as_dtype(dtype)), device)


def eye(n: int, m: int | None = None, k: int = 0, dtype: Any = None, device: Any = None) -> Tensor:
    return _on(np.eye(n, m, k, dtype=as_dtype(dtype)), device)


# --- random ----------------------------------------------------------------------------------
class Generator:
    """A reproducible random stream (wraps numpy's PCG64).

    >>> import tapegrad as tg
    >>> a = tg.randn(3, generator=tg.Generator(0)); b = tg.randn(3, generator=tg.Generator(0))
    >>> bool((a == b).all())
    True
    """

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def manual_seed(self, seed: int) -> Generator:
        self._rng = np.random.Generator(np.random.PCG64(seed))
        return self

    def get_state(self) -> dict:
        """The state as JSON-able data (goes into checkpoints)."""
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state

    @property
    def rng(self) -> Any:
        return self._rng


_default_generator = Generator(0)


def default_generator() -> Generator:
    return _default_generator


def manual_seed(seed: int) -> Generator:
    """Seed the global random stream used when no ``generator=`` is passed."""
    return _default_generator.manual_seed(seed)


def _rng(generator: Generator | None) -> Any:
    return (generator or _default_generator)._rng


def _fdtype(dtype: Any) -> np.dtype:
    d = as_dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"random floats need a float dtype, got {d}")
    return d


def randn(*shape: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    """Standard normal samples."""
    d = _fdtype(dtype)
    return _on(_rng(generator).standard_normal(_shape(shape), dtype=d if d != np.float16 else np.float32).astype(d, copy=False), device)


def rand(*shape: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    """Uniform samples in [0, 1)."""
    d = _fdtype(dtype)
    return _on(_rng(generator).random(_shape(shape), dtype=np.float64).astype(d), device)


def normal(mean: float = 0.0, std: float = 1.0, size: Any = (), dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    d = _fdtype(dtype)
    size = (size,) if isinstance(size, int) else tuple(size)
    return _on(_rng(generator).normal(mean, std, size).astype(d), device)


def uniform(low: float = 0.0, high: float = 1.0, size: Any = (), dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    d = _fdtype(dtype)
    size = (size,) if isinstance(size, int) else tuple(size)
    return _on(_rng(generator).uniform(low, high, size).astype(d), device)


def randint(low: int, high: int | None = None, size: Any = (), dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    """Integers in ``[low, high)`` (int64 unless ``dtype``)."""
    if high is None:
        low, high = 0, low
    size = (size,) if isinstance(size, int) else tuple(size)
    return _on(_rng(generator).integers(low, high, size, dtype=as_dtype(dtype or np.int64)), device)


def bernoulli(p: Any, size: Any = None, dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    """1 with probability ``p`` (a float or a tensor of probabilities), else 0."""
    pa = p._data if isinstance(p, Tensor) else np.asarray(p, dtype=np.float64)
    if size is None:
        size = np.shape(pa)
    size = (size,) if isinstance(size, int) else tuple(size)
    d = as_dtype(dtype) if dtype is not None else (pa.dtype if getattr(pa, "dtype", None) is not None and pa.dtype.kind == "f" and isinstance(p, Tensor) else default_float())
    return _on((_rng(generator).random(size) < B.to_device(pa, "cpu")).astype(d), device)


def permutation(n: int, device: Any = None, generator: Generator | None = None) -> Tensor:
    """A random permutation of ``range(n)`` (int64)."""
    return _on(_rng(generator).permutation(n).astype(np.int64), device)
