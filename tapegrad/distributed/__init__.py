"""Data-parallel training on several processes: one model per process, gradients averaged.

Start the processes with an MPI launcher (``mpirun -n 2 python train.py``; install with
``pip install 'tapegrad[mpi]'``). Each process trains the same model on its own shard of the
data; three lines make it data parallel::

    dist.init(); dist.broadcast_parameters(model)
    grads = dist.all_reduce(tape.gradient(loss, model)); opt.step(grads)

Without a launcher the world has one process and every collective is the identity.
"""

from ._api import (
    Reducer,
    all_reduce,
    barrier,
    broadcast_parameters,
    get_communicator,
    init,
    is_main,
    rank,
    world_size,
)
from ._checkpoint import load_checkpoint, save_checkpoint
from ._comm import Communicator, LocalCommunicator, MPICommunicator, Request

__all__ = [
    "Communicator",
    "LocalCommunicator",
    "MPICommunicator",
    "Reducer",
    "Request",
    "all_reduce",
    "barrier",
    "broadcast_parameters",
    "get_communicator",
    "init",
    "is_main",
    "load_checkpoint",
    "rank",
    "save_checkpoint",
    "world_size",
]
