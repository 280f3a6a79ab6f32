"""Datasets: the protocol, TensorDataset, Subset and random_split."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .. import _backend as B
from .._backend import np
from .._creation import Generator, default_generator
from .._tensor import Tensor, _wrap

__all__ = ["Dataset", "Subset", "TensorDataset", "random_split"]


@runtime_checkable
class Dataset(Protocol):
    """Anything with ``__len__`` and ``__getitem__(i)`` returning one sample.

    A sample is a tensor, an array, a number, or a tuple/dict of them; ``DataLoader`` stacks
    samples into batches. Subclass it or just define the two methods.

    >>> import tapegrad as tg
    >>> class Squares:
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, i):
    ...         return float(i), float(i * i)
    >>> isinstance(Squares(), tg.data.Dataset)
    True
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class TensorDataset:
    """Samples are rows of equally long tensors/arrays: ``ds[i] == (a[i], b[i], ...)``.

    Indexing with an integer array gives a whole batch at once, which is how ``DataLoader``
    reads it (one gather per tensor, no per-sample Python loop).

    >>> import numpy as np, tapegrad as tg
    >>> ds = tg.data.TensorDataset(np.arange(6.0).reshape(3, 2), np.array([0, 1, 0]))
    >>> len(ds), ds[1][0].tolist(), ds[1][1].item()
    (3, [2.0, 3.0], 1)
    """

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ValueError("TensorDataset: needs at least one tensor or array")
        arrays = []
        for i, t in enumerate(tensors):
            a = t._data if isinstance(t, Tensor) else t
            if not B.is_array(a):
                a = np.asarray(a)
            if a.ndim == 0:
                raise ValueError(
                    f"TensorDataset: tensor {i} is 0-d; each needs a first (sample) axis"
                )
            arrays.append(a)
        n = arrays[0].shape[0]
        if any(a.shape[0] != n for a in arrays):
            shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
            raise ValueError(
                f"TensorDataset: the tensors differ in their first dimension (shapes {shapes}); "
                "every tensor needs one row per sample"
            )
        self.arrays: tuple[Any, ...] = tuple(arrays)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """The full tensors (sharing memory with the dataset)."""
        return tuple(_wrap(a) for a in self.arrays)

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(_wrap(a[index]) for a in self.arrays)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in self.arrays)
        return f"TensorDataset({len(self)} samples: {shapes})"


class Subset:
    """The samples of ``dataset`` at ``indices``, in that order.

    >>> import numpy as np, tapegrad as tg
    >>> sub = tg.data.Subset(tg.data.TensorDataset(np.arange(5)), [4, 0])
    >>> [sub[i][0].item() for i in range(len(sub))]
    [4, 0]
    """

    def __init__(self, dataset: Any, indices: Sequence[int] | Any) -> None:
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise IndexError(f"Subset: indices must be in [0, {n}) for a dataset of {n} samples")

    def __len__(self) -> int:
        return int(self.indices.size)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            return self.dataset[int(self.indices[index])]
        return self.dataset[self.indices[index]]


def _lengths(n: int, lengths: Sequence[float]) -> list[int]:
    lengths = list(lengths)
    if (
        lengths
        and all(isinstance(x, float) for x in lengths)
        and math.isclose(sum(lengths), 1.0)
        and sum(lengths) <= 1.0 + 1e-9
    ):
        if any(x < 0 for x in lengths):
            raise ValueError(f"random_split: fractions must be >= 0, got {lengths}")
        out = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(out)):  # the remainder, one each, round robin (as PyTorch)
            out[i % len(out)] += 1
        return out
    if not all(isinstance(x, (int, np.integer)) and x >= 0 for x in lengths):
        raise ValueError(
            f"random_split: lengths must be non-negative ints summing to {n}, or fractions "
            f"summing to 1; got {lengths}"
        )
    if sum(lengths) != n:
        raise ValueError(
            f"random_split: the lengths sum to {sum(lengths)} but the dataset has {n} samples"
        )
    return [int(x) for x in lengths]


def random_split(
    dataset: Any, lengths: Sequence[float], generator: Generator | None = None
) -> list[Subset]:
    """Split ``dataset`` at random into subsets of the given lengths (or fractions of it).

    The permutation comes from ``generator`` (default: the global stream, ``tg.manual_seed``).

    >>> import numpy as np, tapegrad as tg
    >>> ds = tg.data.TensorDataset(np.arange(10))
    >>> train, val = tg.data.random_split(ds, [0.8, 0.2], generator=tg.Generator(0))
    >>> len(train), len(val), sorted(np.concatenate([train.indices, val.indices]).tolist()) == list(range(10))
    (8, 2, True)
    """
    n = len(dataset)
    sizes = _lengths(n, lengths)
    perm = (generator or default_generator()).rng.permutation(n)
    out, start = [], 0
    for k in sizes:
        out.append(Subset(dataset, perm[start : start + k]))
        start += k
    return out
