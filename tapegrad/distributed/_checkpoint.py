"""Checkpoints in a distributed run: rank 0 writes, every rank's own state travels with it."""

from __future__ import annotations

import os
from typing import Any

from .._io import _state_of, rng_state, set_rng_state
from .._io import load_checkpoint as _load
from .._io import save_checkpoint as _save
from ._api import get_communicator

__all__ = ["load_checkpoint", "save_checkpoint"]


def save_checkpoint(
    path: str | os.PathLike[str],
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    *,
    step: int = 0,
    config: Any = None,
    **per_rank: Any,
) -> None:
    """Save a checkpoint of a data-parallel run; call it on every rank.

    The model, optimizer and scheduler are the same on every rank and are taken from rank 0;
    each rank's random state and the objects in ``per_rank`` (a ``DataLoader`` with a
    ``DistributedSampler``, say) are gathered to rank 0 and stored under ``"ranks"``. Rank 0
    writes the file atomically (``tg.save_checkpoint``); the other ranks wait at a barrier
    until it is complete, so a checkpoint that any rank sees is whole.

    >>> import os, tempfile, tapegrad as tg, tapegrad.distributed as dist
    >>> model = tg.nn.Linear(2, 1)
    >>> path = os.path.join(tempfile.mkdtemp(), "run.safetensors")
    >>> dist.save_checkpoint(path, model, step=3)
    >>> dist.load_checkpoint(path, model)["step"]
    3
    """
    comm = get_communicator()
    mine = {"rng": rng_state(), **{k: _state_of(v) for k, v in per_rank.items()}}
    ranks = comm.allgather_object(mine)
    if comm.rank == 0:
        _save(path, model, optimizer, scheduler, step=step, config=config, ranks=ranks)
    comm.barrier()


def load_checkpoint(
    path: str | os.PathLike[str],
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    **per_rank: Any,
) -> dict[str, Any]:
    """Restore a checkpoint written by ``save_checkpoint`` on every rank, and return it.

    Each rank reads the file (a path every machine sees), restores the model, optimizer and
    scheduler, its own random state, and each object in ``per_rank`` from its own entry. The
    world size must be the one the checkpoint was written with.
    """
    comm = get_communicator()
    ck = _load(path, model, optimizer, scheduler, restore_rng=False)
    ranks = ck.get("ranks")
    if not isinstance(ranks, list):
        raise ValueError(
            f"distributed.load_checkpoint: '{os.fspath(path)}' holds no per-rank state; it was "
            "not written by tapegrad.distributed.save_checkpoint (use tg.load_checkpoint)"
        )
    if len(ranks) != comm.size:
        raise ValueError(
            f"distributed.load_checkpoint: '{os.fspath(path)}' was written by {len(ranks)} "
            f"processes and this run has {comm.size}; resume with mpirun -n {len(ranks)}"
        )
    own = ranks[comm.rank]
    set_rng_state(own["rng"])
    for key, obj in per_rank.items():
        if key not in own:
            raise KeyError(
                f"distributed.load_checkpoint: '{os.fspath(path)}' holds no '{key}' state"
            )
        obj.load_state_dict(own[key])
    return ck
