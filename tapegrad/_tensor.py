"""The Tensor: an array plus the tapes it is on.

A Tensor is a thin handle over a numpy (or CuPy) array. Its operator methods are bound in
``_methods/`` once the ops exist. A tensor is on a tape when the tape watches it or when an
op recorded on that tape produced it; ``_tapes`` lists those tapes and ``_tid`` is the tensor's
identity on them (unique for the life of the process, unlike ``id()``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _backend as B
from ._backend import np
from ._dtypes import as_dtype, default_float

_next_tid = itertools.count(1).__next__

# the training step, shown by the errors that meet PyTorch's spellings of it (.grad, zero_grad,
# step() with no argument, backward() then .grad)
TAPE_LOOP = """    with tg.Tape() as tape:
        loss = loss_fn(model(x), y)
    grads = tape.gradient(loss, model)   # or: grads = loss.backward()
    opt.step(grads)                      # grads[p] is p's gradient"""
_Method = Callable[..., "Tensor"]  # a method bound in _methods/ (for type checkers)


class Tensor:
    """An n-dimensional array that tapes can record. ``Tensor(data, dtype=None)`` holds
    ``data``'s values; ``Tensor(3, 4)`` (two or more sizes) is PyTorch's shape constructor and
    gives zeros of the default float.

    >>> import tapegrad as tg
    >>> x = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x * 2 + 1).sum().item()
    24.0
    """

    __slots__ = ("_data", "_tapes", "_tid", "_version", "__weakref__")
    _is_param = False
    __array_priority__ = 1000  # numpy defers `array * tensor` to Tensor.__rmul__

    _data: Any
    _tapes: tuple
    _tid: int | None
    _version: int

    def __init__(self, data: Any, dtype: Any = None, device: Any = None, *more: int) -> None:
        if type(dtype) is int:  # Tensor(3, 4): PyTorch's shape constructor, zeros here
            shape = (data, dtype, *(() if device is None else (device,)), *more)
            if not all(type(n) is int and n >= 0 for n in shape):
                raise TypeError(
                    f"Tensor{shape}: PyTorch's Tensor(*sizes) takes sizes (ints >= 0); for "
                    "values write tg.tensor(data, dtype=...)"
                )
            self._data = np.zeros(shape, default_float())
        else:
            self._data = _to_array(data, dtype, device)
        self._tapes = ()
        self._tid = None
        self._version = 0

    # -- properties ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def device(self) -> str:
        return B.device_of(self._data)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    # -- conversion ----------------------------------------------------------------------------
    def _host(self) -> Any:
        """The array on the host (copied for 'cuda'); a 0-d tensor gives a 0-d array."""
        a = B.to_device(self._data, "cpu")
        return a if a.__class__ is np.ndarray else np.asarray(a)

    def item(self) -> Any:
        if self._data.size != 1:
            raise ValueError(
                f"item(): the tensor has {self._data.size} elements (shape {self.shape}); "
                "only one-element tensors convert to a Python number"
            )
        return self._data.item()

    def tolist(self) -> Any:
        return self._host().tolist()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._data.__dlpack_device__()

    def _scalar(self, kind: str) -> Any:
        if self._data.size != 1:
            raise TypeError(
                f"{kind}(): only one-element tensors convert to a Python scalar; "
                f"this one has shape {self.shape}"
            )
        return self._data.item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise ValueError(
                f"the truth value of a tensor with {self._data.size} elements is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self._data.item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self._scalar("index"))

    def __repr__(self) -> str:
        body = np.array2string(
            self._host(), separator=", ", prefix="tensor(", precision=4, threshold=200
        )
        extra = []
        if self._data.dtype != default_float() and self._data.dtype.kind != "i":
            extra.append(f"dtype={self.dtype}")
        elif self._data.dtype.kind == "i" and self._data.dtype != np.int64:
            extra.append(f"dtype={self.dtype}")
        if self.device != "cpu":
            extra.append(f"device='{self.device}'")
        live = [t for t in self._tapes if t._recording]
        if live:
            extra.append(f"on {len(live)} tape" + ("s" if len(live) > 1 else ""))
        return "tensor(" + body + "".join(", " + e for e in extra) + ")"

    def __iter__(self) -> Any:
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    __hash__ = object.__hash__  # identity, like PyTorch: tensors key dicts by object

    if TYPE_CHECKING:  # bound in _methods/ once the ops exist; declared for type checkers
        T: Tensor
        mT: Tensor
        size: Any  # an int, callable as PyTorch's size(dim)

        def numpy(self) -> Any: ...
        def __array__(self, dtype: Any = None, copy: Any = None) -> Any: ...

        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __xor__(self, other: Any) -> Tensor: ...
        def __rxor__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __eq__(self, other: Any) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: Any) -> Tensor: ...  # type: ignore[override]
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __getitem__(self, idx: Any) -> Tensor: ...
        def __setitem__(self, idx: Any, value: Any) -> None: ...

        exp: _Method
        expm1: _Method
        log: _Method
        log1p: _Method
        log2: _Method
        log10: _Method
        sqrt: _Method
        rsqrt: _Method
        square: _Method
        reciprocal: _Method
        sin: _Method
        cos: _Method
        tan: _Method
        tanh: _Method
        sigmoid: _Method
        relu: _Method
        erf: _Method
        sign: _Method
        floor: _Method
        ceil: _Method
        round: _Method
        trunc: _Method
        isnan: _Method
        isfinite: _Method
        isinf: _Method
        abs: _Method
        clip: _Method
        clamp: _Method
        pow: _Method
        maximum: _Method
        minimum: _Method
        nan_to_num: _Method
        sum: _Method
        prod: _Method
        mean: _Method
        var: _Method
        std: _Method
        amax: _Method
        amin: _Method
        max: _Method
        min: _Method
        argmax: _Method
        argmin: _Method
        logsumexp: _Method
        cumsum: _Method
        cumprod: _Method
        norm: _Method
        all: _Method
        any: _Method
        reshape: _Method
        view: _Method
        flatten: _Method
        squeeze: _Method
        expand_dims: _Method
        unsqueeze: _Method
        permute_dims: _Method
        permute: _Method
        transpose: _Method
        swapaxes: _Method
        moveaxis: _Method
        broadcast_to: _Method
        astype: _Method
        flip: _Method
        roll: _Method
        tril: _Method
        triu: _Method
        repeat: _Method
        tile: _Method
        take: _Method
        take_along_axis: _Method
        matmul: _Method
        softmax: _Method
        log_softmax: _Method
        detach: _Method
        trace: _Method
        float: _Method
        double: _Method
        long: _Method
        int: _Method
        bool: _Method
        to: _Method
        copy: _Method
        clone: _Method
        copy_: _Method
        fill_: _Method
        zero_: _Method
        split: Callable[..., list[Tensor]]
        chunk: Callable[..., list[Tensor]]
        backward: Callable[..., Any]


def _to_array(data: Any, dtype: Any = None, device: Any = None) -> Any:
    """Turn Python data / arrays / tensors into a backend array (float32 for Python floats)."""
    if isinstance(data, Tensor):
        data = data._data
    dev = B.normalize_device(device) if device is not None else None
    if B.is_array(data):
        arr = data
        if dtype is not None:
            arr = arr.astype(as_dtype(dtype), copy=False)
    elif dtype is not None:
        arr = np.asarray(data, dtype=as_dtype(dtype))
    else:
        arr = np.asarray(data)
        if arr.dtype.kind in "USOV":
            raise TypeError(
                f"tensor(): cannot make a tensor from {type(data).__name__} data of dtype "
                f"{arr.dtype}; pass numbers, nested lists of numbers, arrays or tensors"
            )
        if arr.dtype == np.float64 and not isinstance(data, np.generic):
            arr = arr.astype(default_float())  # Python floats -> the default float
    if arr.dtype.kind == "c":
        raise TypeError(complex_error("tensor()", arr.dtype))
    if dev is not None and B.device_of(arr) != dev:
        arr = B.to_device(arr, dev)
    return arr


def complex_error(op: str, dtype: Any) -> str:
    """The message for complex input, which tapegrad rejects (see docs/design.md)."""
    return (
        f"{op}: complex dtype {dtype} is not supported; tapegrad differentiates real "
        "functions only. Carry the real and imaginary parts as two float tensors "
        "(a.real, a.imag) and write the complex arithmetic on them"
    )


def _wrap(data: Any) -> Tensor:
    """Make a Tensor around an existing array without any checks (the hot path)."""
    t = Tensor.__new__(Tensor)
    t._data = data
    t._tapes = ()
    t._tid = None
    t._version = 0
    return t


class Parameter(Tensor):
    """A Tensor that trains: tapes opened with ``with tg.Tape()`` watch it automatically.

    ``requires_grad=False`` freezes it (no tape watches it). ``name`` is its dotted path in
    the module that owns it, set when the module registers it, so errors can name it.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.ones(3))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> tape.gradient(loss, w).tolist()
    [2.0, 2.0, 2.0]
    """

    __slots__ = ("requires_grad", "name")
    _is_param = True

    def __init__(self, data: Any, requires_grad: bool = True, dtype: Any = None) -> None:
        super().__init__(data, dtype=dtype)
        if self._data.dtype.kind != "f":
            raise TypeError(
                f"Parameter: dtype {self.dtype} cannot train; parameters must be float "
                "(pass dtype=tg.float32 or a float array)"
            )
        if isinstance(data, Tensor) and self._data is data._data:
            self._data = self._data.copy()
        self._tid = _next_tid()
        self.requires_grad = requires_grad
        self.name: str | None = None

    def requires_grad_(self, flag: bool = True) -> Parameter:
        self.requires_grad = flag
        return self

    def __repr__(self) -> str:
        return "Parameter(" + Tensor.__repr__(self)[len("tensor(") :]


def is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor)
