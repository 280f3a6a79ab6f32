"""DataLoader: batches from a dataset, shuffled reproducibly, resumable mid-epoch."""

from __future__ import annotations

import collections
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .. import _backend as B
from .._backend import np
from .._creation import Generator, default_generator
from .._dtypes import default_float
from .._tensor import Tensor, _wrap
from ._dataset import Subset, TensorDataset

__all__ = ["DataLoader", "default_collate"]


def default_collate(samples: list[Any]) -> Any:
    """Stack a list of samples into a batch.

    Tensors and arrays are stacked along a new first axis; Python floats become the default
    float dtype, ints int64, bools bool; tuples/lists and dicts are collated field by field;
    strings and anything else are returned as a list.

    >>> import tapegrad as tg
    >>> x, y = tg.data.default_collate([(tg.ones(2), 0), (tg.zeros(2), 1)])
    >>> x.shape, y.tolist()
    ((2, 2), [0, 1])
    """
    if not samples:
        raise ValueError("default_collate: no samples to collate")
    first = samples[0]
    if isinstance(first, Tensor) or B.is_array(first):
        arrays = [s._data if isinstance(s, Tensor) else s for s in samples]
        try:
            return _wrap(B.xp_of(arrays[0]).stack(arrays))
        except ValueError:
            shapes = sorted({tuple(a.shape) for a in arrays})
            raise ValueError(
                f"default_collate: samples have different shapes {shapes}; pad them to one shape "
                "or pass a collate_fn"
            ) from None
    if isinstance(first, bool):
        return _wrap(np.asarray(samples, dtype=np.bool_))
    if isinstance(first, np.generic):
        return _wrap(np.asarray(samples, dtype=first.dtype))
    if isinstance(first, numbers.Integral):
        return _wrap(np.asarray(samples, dtype=np.int64))
    if isinstance(first, numbers.Real):
        return _wrap(np.asarray(samples, dtype=default_float()))
    if isinstance(first, Mapping):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        n = len(first)
        if any(len(s) != n for s in samples):
            raise ValueError("default_collate: samples are tuples of different lengths")
        return type(first)(default_collate(list(col)) for col in zip(*samples, strict=True))
    return list(samples)


def _tensor_view(dataset: Any) -> tuple[TensorDataset, Any] | None:
    """(TensorDataset, index map or None) when batches can be gathered directly."""
    index = None
    while isinstance(dataset, Subset):
        index = dataset.indices if index is None else dataset.indices[index]
        dataset = dataset.dataset
    if isinstance(dataset, TensorDataset):
        return dataset, index
    return None


class DataLoader:
    """Iterate over ``dataset`` in batches.

    ``shuffle`` draws a new permutation at the start of each epoch from ``generator``, or from
    ``tg.Generator(seed)`` when ``seed`` is given, or else from the global stream (so
    ``tg.manual_seed`` and a checkpoint's RNG state fix it). ``drop_last`` drops a final
    short batch. For a ``TensorDataset`` (or a Subset of one) each batch is one gather per
    tensor; other datasets are read sample by sample and stacked by ``collate_fn``
    (``default_collate``). ``progress=True`` shows a tqdm bar. ``num_workers`` threads build
    up to ``num_workers * prefetch_factor`` batches ahead (a dataset whose reads wait on I/O or
    release the GIL); batches come out in the same order and with the same contents as with
    none. The shuffle is drawn before the workers start; a dataset that draws random numbers
    itself should use a ``tg.Generator`` of its own (the workers read it from several threads).

    ``state_dict()`` records the epoch, the position in it and the permutation's random
    state, so a loader restored with ``load_state_dict`` continues mid-epoch with the same
    batches an uninterrupted run would have seen.

    >>> import numpy as np, tapegrad as tg
    >>> ds = tg.data.TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
    >>> [y.tolist() for x, y in tg.data.DataLoader(ds, batch_size=2)]
    [[0, 1], [2, 3], [4]]
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        drop_last: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        generator: Generator | None = None,
        seed: int | None = None,
        progress: bool = False,
        num_workers: int = 0,
        prefetch_factor: int = 2,
    ) -> None:
        if (
            not isinstance(batch_size, (int, np.integer))
            or isinstance(batch_size, bool)
            or batch_size <= 0
        ):
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(num_workers, int) or num_workers < 0 or prefetch_factor < 1:
            raise ValueError(
                f"DataLoader: num_workers must be an int >= 0 and prefetch_factor >= 1, got "
                f"{num_workers!r} and {prefetch_factor!r}"
            )
        if generator is not None and seed is not None:
            raise ValueError("DataLoader: pass generator= or seed=, not both")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.generator = Generator(seed) if seed is not None else generator
        self.progress = progress
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.epoch = 0  # epochs started so far
        self._pos = 0  # batches handed out in the current epoch
        self._epoch_rng: Any = None  # generator state the current epoch's permutation came from
        self._resume: dict[str, Any] | None = None

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _gen(self) -> Generator:
        return self.generator if self.generator is not None else default_generator()

    def _order(self) -> tuple[Any, int]:
        """This epoch's sample order and the number of batches to skip (when resuming)."""
        n = len(self.dataset)
        resume, self._resume = self._resume, None
        if resume is not None and resume["epoch"] > 0 and resume["position"] < len(self):
            self.epoch, self._pos = resume["epoch"], resume["position"]
            self._epoch_rng = resume["rng"]
            if not self.shuffle or resume["rng"] is None:
                return None, self._pos
            # The permutation is redrawn from the saved state on a private generator: the
            # global stream is restored separately (checkpoint RNG) and must not move here.
            g = Generator()
            g.set_state(resume["rng"])
            perm = g.rng.permutation(n)
            if self.generator is not None:
                self.generator.set_state(g.get_state())
            return perm, self._pos
        self.epoch += 1
        self._pos = 0
        if not self.shuffle:
            self._epoch_rng = None
            return None, 0
        gen = self._gen()
        self._epoch_rng = gen.get_state()
        return gen.rng.permutation(n), 0

    def __iter__(self) -> Iterator[Any]:
        it = self._batches()
        if self.progress:
            try:
                from tqdm.auto import tqdm  # noqa: PLC0415
            except ImportError:
                raise ImportError(
                    "DataLoader(progress=True) needs tqdm: pip install tapegrad[examples]"
                ) from None
            return iter(tqdm(it, total=len(self)))
        return it

    def _batches(self) -> Iterator[Any]:
        order, skip = self._order()
        fast = _tensor_view(self.dataset) if self.collate_fn is None else None
        nb = len(self)
        if self.num_workers == 0:
            for b in range(skip, nb):
                batch = self._batch(b, order, fast)
                self._pos = b + 1
                yield batch
            return
        from concurrent.futures import ThreadPoolExecutor  # only with workers: import time

        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="DataLoader") as pool:
            ahead: collections.deque[Any] = collections.deque()
            nxt = skip
            for b in range(skip, nb):
                while nxt < nb and len(ahead) < self.num_workers * self.prefetch_factor:
                    ahead.append(pool.submit(self._batch, nxt, order, fast))
                    nxt += 1
                batch = ahead.popleft().result()
                self._pos = b + 1
                yield batch

    def _batch(self, b: int, order: Any, fast: Any) -> Any:
        """Batch ``b`` of the epoch whose sample order is ``order`` (None: in order)."""
        n = len(self.dataset)
        lo = b * self.batch_size
        hi = min(lo + self.batch_size, n)
        idx = order[lo:hi] if order is not None else np.arange(lo, hi)
        if fast is not None:
            ds, index = fast
            if order is None and index is None:
                rows: Any = slice(lo, hi)  # a view: no copy for unshuffled reads
            else:
                rows = idx if index is None else index[idx]
            return tuple(_wrap(a[rows]) for a in ds.arrays)  # one gather per tensor
        collate = self.collate_fn or default_collate
        return collate([self.dataset[int(i)] for i in idx])

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "position", "rng"}``: where the loader is, to resume mid-epoch."""
        if self._resume is not None:
            return dict(self._resume)
        return {"epoch": self.epoch, "position": self._pos, "rng": self._epoch_rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``: the next iteration resumes that epoch (if unfinished)."""
        missing = [k for k in ("epoch", "position", "rng") if k not in state]
        if missing:
            raise KeyError(f"DataLoader.load_state_dict: missing keys {missing}")
        self.epoch = int(state["epoch"])
        self._pos = int(state["position"])
        self._epoch_rng = state["rng"]
        self._resume = {"epoch": self.epoch, "position": self._pos, "rng": state["rng"]}

    def __repr__(self) -> str:
        return (
            f"DataLoader({len(self.dataset)} samples, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, {len(self)} batches)"
        )
