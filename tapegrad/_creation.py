"""Creation functions and random numbers (a global seed plus Generator objects)."""

from __future__ import annotations

from typing import Any

from . import _backend as B
from ._autodiff import apply, nondiff
from ._backend import np
from ._dtypes import as_dtype, default_float
from ._tensor import Parameter, Tensor, _to_array, _wrap


def _shape(shape: Any) -> tuple[int, ...]:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all mean shape (2, 3)."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    out = tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        raise ValueError(f"negative dimension in shape {out}")
    return out


def _size(size: Any) -> tuple[int, ...]:
    return _shape((size,))


def _on(a: Any, device: Any) -> Tensor:
    if device is not None and B.normalize_device(device) != "cpu":
        a = B.to_device(a, device)
    return _wrap(a)


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor from Python data, an array or a tensor (always a copy).

    Python floats become float32 (the default float), ints int64, bools bool.
    ``requires_grad=True`` (PyTorch's spelling) gives a ``tg.Parameter``: every tape opened
    with ``with tg.Tape()`` watches it, so ``tape.gradient(loss)`` / ``loss.backward()``
    return its gradient (there is no ``.grad``; index the result: ``grads[x]``).

    >>> import tapegrad as tg
    >>> tg.tensor([1, 2]).dtype, tg.tensor([1.5]).dtype
    (dtype('int64'), dtype('float32'))
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> with tg.Tape() as tape:
    ...     y = (x * x).sum()
    >>> tape.gradient(y)[x].tolist()
    [2.0, 4.0]
    """
    arr = _to_array(data, dtype, device)
    if isinstance(data, Tensor) or B.is_array(data):
        arr = arr.copy() if arr is (data._data if isinstance(data, Tensor) else data) else arr
    return _trainable(_wrap(arr), requires_grad, "tensor")


def _trainable(t: Tensor, requires_grad: bool, op: str) -> Tensor:
    """PyTorch's ``requires_grad=True``: ``t`` as a Parameter, which every tape watches."""
    if not requires_grad:
        return t
    if t.dtype.kind != "f":
        raise TypeError(
            f"{op}(requires_grad=True): only float tensors can have a gradient, got {t.dtype} "
            "(as PyTorch); pass dtype=tg.float32"
        )
    return Parameter(t._data, dtype=t.dtype)


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


def zeros(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A tensor of zeros (the default float unless ``dtype``).

    >>> import tapegrad as tg
    >>> tg.zeros(2, 3).shape, tg.zeros((2,), dtype=tg.int64).tolist()
    ((2, 3), [0, 0])
    """
    t = _on(np.zeros(_shape(shape), dtype=as_dtype(dtype)), device)
    return _trainable(t, requires_grad, "zeros")


def ones(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A tensor of ones (the default float unless ``dtype``)."""
    t = _on(np.ones(_shape(shape), dtype=as_dtype(dtype)), device)
    return _trainable(t, requires_grad, "ones")


def empty(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor whose values are not initialised (fill it before reading)."""
    return _on(np.empty(_shape(shape), dtype=as_dtype(dtype)), device)


def _fill_dtype(fill_value: Any) -> Any:
    if isinstance(fill_value, (bool, np.bool_)):
        return np.bool_
    if isinstance(fill_value, (int, np.integer)):
        return np.int64
    return default_float()


def full(
    shape: Any, fill_value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A tensor filled with ``fill_value``; its dtype follows the value (bool, int64 or the
    default float) unless ``dtype``. ``requires_grad=True`` (as in ``zeros``, ``ones``,
    ``randn``, ``rand`` and ``tensor``) gives a ``tg.Parameter``.

    >>> import tapegrad as tg
    >>> tg.full((2,), 7).tolist(), tg.full(2, 0.5).dtype
    ([7, 7], dtype('float32'))
    """
    dtype = as_dtype(dtype) if dtype is not None else _fill_dtype(fill_value)
    t = _on(np.full(_size(shape), fill_value, dtype=dtype), device)
    return _trainable(t, requires_grad, "full")


def _like(x: Any, f: Any, dtype: Any, device: Any) -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor(x)
    d = as_dtype(dtype) if dtype is not None else x.dtype
    return _on(f(x.shape, d), device if device is not None else x.device)


def zeros_like(
    x: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Zeros of ``x``'s shape, dtype and device (unless given); on no tape."""
    return _trainable(_like(x, lambda s, d: np.zeros(s, dtype=d), dtype, device), requires_grad, "zeros_like")


def ones_like(
    x: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Ones of ``x``'s shape, dtype and device (unless given); on no tape."""
    return _trainable(_like(x, lambda s, d: np.ones(s, dtype=d), dtype, device), requires_grad, "ones_like")


def empty_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """An uninitialised tensor of ``x``'s shape, dtype and device (unless given)."""
    return _like(x, lambda s, d: np.empty(s, dtype=d), dtype, device)


def full_like(
    x: Any, fill_value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """``fill_value`` in ``x``'s shape, dtype and device (unless given)."""
    t = _like(x, lambda s, d: np.full(s, fill_value, dtype=d), dtype, device)
    return _trainable(t, requires_grad, "full_like")


def arange(
    start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: Any = None
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``: int64 for integer arguments, else the default
    float (computed in float64 and then cast, so the length and values match PyTorch).

    >>> import tapegrad as tg
    >>> tg.arange(3).tolist(), tg.arange(0, 1, 0.25).tolist()
    ([0, 1, 2], [0.0, 0.25, 0.5, 0.75])
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    ints = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
    d = as_dtype(dtype) if dtype is not None else (np.dtype(np.int64) if ints else default_float())
    a = np.arange(start, stop, step, dtype=np.int64 if ints else np.float64)
    return _on(a.astype(d, copy=False), device)


def linspace(
    start: float,
    stop: float,
    num: int = 50,
    endpoint: bool = True,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included unless ``endpoint``
    is False), in the default float unless ``dtype``. Tensor endpoints are differentiable.

    >>> import tapegrad as tg
    >>> tg.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if dtype is not None and as_dtype(dtype) == np.bool_:
        raise ValueError("linspace: a bool dtype is not supported (as in PyTorch); give a number dtype")
    if isinstance(start, Tensor) or isinstance(stop, Tensor):
        return _linspace_taped(start, stop, num, endpoint, dtype)
    a = np.linspace(start, stop, num, endpoint=endpoint)
    return _on(a.astype(as_dtype(dtype), copy=False), device)


def _linspace_taped(start: Any, stop: Any, num: int, endpoint: bool, dtype: Any) -> Tensor:
    """numpy's formula ``start + i * (stop - start) / div`` (the last value ``stop``) on tensors."""
    from . import ops  # noqa: PLC0415  # cycle: ops sit above creation

    s = start if isinstance(start, Tensor) else Tensor(start)
    e = stop if isinstance(stop, Tensor) else Tensor(stop)
    floats = [t.dtype for t in (s, e) if t.dtype.kind == "f"]
    dt = as_dtype(dtype) if dtype is not None else np.result_type(*floats, default_float())
    s, e = s.astype(dt), e.astype(dt)
    div = num - 1 if endpoint else num
    i = Tensor(np.arange(num, dtype=dt))
    y = i * ((e - s) / div) + s if num > 1 else s * 1 + i * 0
    if endpoint and num > 1:
        y = ops.where(Tensor(np.arange(num) == num - 1), e, y)
    return y


def eye(n: int, m: int | None = None, k: int = 0, dtype: Any = None, device: Any = None) -> Tensor:
    """An ``n x m`` matrix with ones on diagonal ``k`` (0: the main one)."""
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
        """Restart the stream from ``seed``; returns the generator."""
        self._rng = np.random.Generator(np.random.PCG64(seed))
        return self

    def get_state(self) -> dict:
        """The state as JSON-able data (goes into checkpoints)."""
        return dict(self._rng.bit_generator.state)

    def set_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state

    @property
    def rng(self) -> Any:
        """The underlying ``numpy.random.Generator``."""
        return self._rng


_default_generator = Generator(0)


def default_generator() -> Generator:
    """The global Generator that random functions use when no ``generator=`` is passed."""
    return _default_generator


def manual_seed(seed: int) -> Generator:
    """Seed the global random stream used when no ``generator=`` is passed.

    >>> import tapegrad as tg
    >>> a = tg.manual_seed(3) and tg.rand(2); b = tg.manual_seed(3) and tg.rand(2)
    >>> a.tolist() == b.tolist()
    True
    """
    return _default_generator.manual_seed(seed)


def _rng(generator: Generator | None) -> Any:
    return (generator or _default_generator)._rng


def _draw_fwd(*, gen: Generator, method: str, args: tuple[Any, ...], post: Any, dtype: Any,
              device: Any) -> Any:
    a = getattr(gen._rng, method)(*args)
    if post is not None:
        a = post(a)
    a = a.astype(dtype, copy=False)
    return a if device is None else B.to_device(a, device)


# Random draws go through apply, so tg.compile captures them: a compiled step calls the same
# generator the same way, and its stream (and every later draw) equals eager's.
_DRAW = nondiff("random", _draw_fwd)


def _draw(generator: Generator | None, method: str, args: tuple[Any, ...], dtype: Any,
          device: Any, post: Any = None) -> Tensor:
    dev = None if device is None or B.normalize_device(device) == "cpu" else device
    return apply(_DRAW, gen=generator or _default_generator, method=method, args=args,
                 post=post, dtype=np.dtype(dtype), device=dev)  # fmt: skip


def _fdtype(dtype: Any) -> np.dtype:
    d = as_dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"random floats need a float dtype, got {d}")
    return d


def randn(
    *shape: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None,
    requires_grad: bool = False,
) -> Tensor:  # fmt: skip
    """Standard normal samples of ``shape`` (the default float unless ``dtype``).

    >>> import tapegrad as tg
    >>> tg.randn(2, 3).shape
    (2, 3)
    """
    d = _fdtype(dtype)
    t = _draw(generator, "standard_normal", (_shape(shape),), d, device)
    return _trainable(t, requires_grad, "randn")


def rand(
    *shape: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None,
    requires_grad: bool = False,
) -> Tensor:  # fmt: skip
    """Uniform samples in [0, 1) of ``shape``."""
    d = _fdtype(dtype)
    return _trainable(_draw(generator, "random", (_shape(shape),), d, device), requires_grad, "rand")


def randn_like(
    x: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None
) -> Tensor:
    """Standard normal samples of ``x``'s shape, dtype (a float) and device; on no tape.

    >>> import tapegrad as tg
    >>> tg.randn_like(tg.zeros((2, 3), dtype=tg.float64)).dtype
    dtype('float64')
    """
    x = x if isinstance(x, Tensor) else Tensor(x)
    d = dtype if dtype is not None else x.dtype if x.dtype.kind == "f" else None
    return randn(*x.shape, dtype=d, device=device or x.device, generator=generator)


def rand_like(
    x: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None
) -> Tensor:
    """Uniform samples in [0, 1) of ``x``'s shape, dtype (a float) and device; on no tape."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    d = dtype if dtype is not None else x.dtype if x.dtype.kind == "f" else None
    return rand(*x.shape, dtype=d, device=device or x.device, generator=generator)


def _params(*values: Any) -> tuple[list[Any], tuple[int, ...]]:
    """Distribution parameters as floats or float64 arrays, and their broadcast shape."""
    out = [
        np.asarray(B.to_device(v._data, "cpu") if isinstance(v, Tensor) else v, np.float64)
        for v in values
    ]
    return out, np.broadcast_shapes(*(a.shape for a in out))


def normal(
    mean: Any = 0.0,
    std: Any = 1.0,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    generator: Generator | None = None,
) -> Tensor:
    """Normal samples; ``mean`` and ``std`` may be tensors (the shape is theirs, broadcast,
    unless ``size``).

    >>> import tapegrad as tg
    >>> tg.normal(2.0, 0.5, (3,)).shape, tg.normal(tg.zeros(2), tg.ones(2)).shape
    ((3,), (2,))
    """
    if dtype is None:  # PyTorch's: a float tensor mean or std gives its dtype
        fl = [t.dtype for t in (mean, std) if isinstance(t, Tensor) and t.dtype.kind == "f"]
        dtype = np.result_type(*fl) if fl else None
    d = _fdtype(dtype)
    (m, s), shape = _params(mean, std)
    if (s < 0).any():
        raise ValueError(f"normal: std must be >= 0, got {std}")
    size = shape if size is None else _size(size)
    return _draw(generator, "normal", (m, s, size), d, device)


def uniform(
    low: Any = 0.0,
    high: Any = 1.0,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    generator: Generator | None = None,
) -> Tensor:
    """Uniform samples in ``[low, high)``; the bounds may be tensors."""
    d = _fdtype(dtype)
    (lo, hi), shape = _params(low, high)
    size = shape if size is None else _size(size)
    return _draw(generator, "uniform", (lo, hi, size), d, device)


def randint(
    low: Any = None,
    high: Any = None,
    size: Any = (),
    *,
    dtype: Any = None,
    device: Any = None,
    generator: Generator | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Integers in ``[low, high)`` (int64 unless ``dtype``). ``randint(high, size)`` works as
    in PyTorch.

    >>> import tapegrad as tg
    >>> tg.randint(0, 10, (2, 3)).shape, tg.randint(5, (4,)).shape
    ((2, 3), (4,))
    """
    if isinstance(high, (tuple, list)):  # torch.randint(high, size)
        low, high, size = 0, low, high
    elif low is None:  # torch.randint(high=h, size=s)
        low = 0
    elif high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    d = as_dtype(dtype) if dtype is not None else np.dtype(np.int64)
    t = _draw(generator, "integers", (low, high, _size(size)), d, device)
    return _trainable(t, requires_grad, "randint")


class _Below:
    """``u < p`` for bernoulli (a class, not a closure, so two captures compare equal)."""

    __slots__ = ("p",)

    def __init__(self, p: Any) -> None:
        self.p = p

    def __call__(self, u: Any) -> Any:
        return u < self.p

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Below) and bool(np.array_equal(self.p, other.p))

    __hash__ = None  # type: ignore[assignment]


def bernoulli(
    p: Any,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    generator: Generator | None = None,
) -> Tensor:
    """1 with probability ``p`` (a float or a tensor of probabilities), else 0; the dtype of a
    float tensor ``p``, else the default float.

    >>> import tapegrad as tg
    >>> tg.bernoulli(tg.tensor([0.0, 1.0])).tolist()
    [0.0, 1.0]
    """
    (pa,), shape = _params(p)
    if ((pa < 0) | (pa > 1)).any():
        raise ValueError("bernoulli: probabilities must lie in [0, 1]")
    size = shape if size is None else _size(size)
    if dtype is not None:
        d = as_dtype(dtype)
    elif isinstance(p, Tensor) and p.dtype.kind == "f":
        d = p.dtype
    else:
        d = default_float()
    return _draw(generator, "random", (size,), d, device, _Below(pa))


def permutation(n: int, device: Any = None, generator: Generator | None = None) -> Tensor:
    """A random permutation of ``range(n)`` (int64).

    >>> import tapegrad as tg
    >>> sorted(tg.permutation(4).tolist())
    [0, 1, 2, 3]
    """
    return _draw(generator, "permutation", (n,), np.int64, device)


def randperm(
    n: int, *, generator: Generator | None = None, dtype: Any = None, device: Any = None
) -> Tensor:
    """PyTorch's ``randperm``: a random permutation of ``range(n)`` (int64 unless ``dtype``).

    >>> import tapegrad as tg
    >>> sorted(tg.randperm(4).tolist())
    [0, 1, 2, 3]
    """
    d = as_dtype(dtype) if dtype is not None else np.dtype(np.int64)
    return _draw(generator, "permutation", (int(n),), d, device)


def multinomial(
    input: Any, num_samples: int, replacement: bool = False, *, generator: Generator | None = None
) -> Tensor:
    """PyTorch's ``multinomial``: ``num_samples`` category indices per row of the non-negative
    weights ``input`` (1-d, or 2-d for one draw per row; need not sum to 1), int64, with or
    without replacement (then, as PyTorch, zero-weight categories come last, in order, once
    the others are drawn). No gradient.

    >>> import tapegrad as tg
    >>> tg.multinomial(tg.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
    [1, 1]
    """
    w = np.asarray(input._data if isinstance(input, Tensor) else input, dtype=np.float64)
    if w.ndim not in (1, 2) or w.shape[-1] == 0:
        raise ValueError(f"multinomial: weights must be 1-d or 2-d and non-empty, got {w.shape}")
    rows = w.reshape(-1, w.shape[-1])
    if not np.isfinite(rows).all() or (rows < 0).any() or (rows.sum(axis=1) <= 0).any():
        raise ValueError(
            "multinomial: weights must be finite and non-negative, with a positive sum per row"
        )
    k = int(num_samples)
    if not replacement and k > rows.shape[1]:
        raise ValueError(
            f"multinomial: cannot draw {k} samples without replacement from {rows.shape[1]} "
            "categories; pass replacement=True or fewer samples"
        )
    if replacement:
        u = _draw(generator, "random", ((rows.shape[0], k),), np.float64, None)._data
        cdf = np.cumsum(rows, axis=1)
        cdf /= cdf[:, -1:]
        out = np.stack([np.searchsorted(c, ui, side="right") for c, ui in zip(cdf, u, strict=True)])
        out = np.minimum(out, rows.shape[1] - 1)
    else:  # exponential races: the k smallest Exp(1) / w are a draw without replacement
        u = _draw(generator, "random", (rows.shape,), np.float64, None)._data
        with np.errstate(divide="ignore"):
            keys = -np.log1p(-u) / rows
        out = np.argsort(keys, axis=1, kind="stable")[:, :k]
    return _wrap(out.astype(np.int64).reshape(w.shape[:-1] + (k,)))
