"""DistributedSampler: each rank's shard of a dataset, reshuffled per epoch from one seed."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

from .._backend import np

__all__ = ["DistributedSampler", "launch_rank_size"]

# what MPI launchers (Open MPI, MPICH/Hydra, PMIx, Slurm) put in each process's environment
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS")


def launch_rank_size() -> tuple[int, int]:
    """(rank, world size) as the launcher announced them in the environment; (0, 1) without one."""
    rank = next((int(v) for k in _RANK_VARS if (v := os.environ.get(k, "")).isdigit()), 0)
    size = next((int(v) for k in _SIZE_VARS if (v := os.environ.get(k, "")).isdigit()), 1)
    return rank, size


class DistributedSampler:
    """The indices of rank ``rank``'s shard of ``dataset`` among ``num_replicas`` ranks.

    Every epoch all ranks draw the same permutation (from ``seed`` and the epoch, so no random
    stream moves and a resumed run redraws it) and rank ``r`` takes every ``num_replicas``-th
    index from position ``r``. Shards have equal lengths, so every rank runs the same number of
    steps: the order is padded by repeating its first indices, or truncated with ``drop_last``.
    ``num_replicas`` and ``rank`` default to the world size and rank the MPI launcher set.
    Pass it to ``DataLoader(sampler=...)``, which calls ``set_epoch`` at each epoch's start.

    >>> import tapegrad as tg
    >>> s = tg.data.DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False)
    >>> list(s), len(s)
    ([1, 3, 0], 3)
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        env_rank, env_size = launch_rank_size()
        num_replicas = env_size if num_replicas is None else num_replicas
        rank = env_rank if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"DistributedSampler: rank must be in [0, num_replicas); got rank={rank}, "
                f"num_replicas={num_replicas}"
            )
        self.n = len(dataset)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.epoch = 0
        if drop_last:
            self.num_samples = self.n // self.num_replicas
        else:
            self.num_samples = math.ceil(self.n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose permutation ``__iter__`` gives (the same on every rank)."""
        self.epoch = int(epoch)

    def indices(self) -> Any:
        """This rank's indices for the current epoch, as an int64 array."""
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        if self.total_size > self.n:  # pad by wrapping around
            reps = math.ceil(self.total_size / max(self.n, 1))
            order = np.tile(order, reps)
        order = order[: self.total_size]
        return order[self.rank : self.total_size : self.num_replicas].astype(np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (
            f"DistributedSampler(rank {self.rank} of {self.num_replicas}, {self.num_samples} "
            f"samples, shuffle={self.shuffle}, seed={self.seed})"
        )
