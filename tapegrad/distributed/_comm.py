"""Communicators: the collectives data parallelism needs, behind one small interface.

``Communicator`` is what the rest of ``tapegrad.distributed`` calls; ``MPICommunicator`` (mpi4py)
is one implementation and ``LocalCommunicator`` (world size 1, no MPI) another. A GPU backend
(NCCL through CuPy) implements the same methods on device arrays.
"""

from __future__ import annotations

from typing import Any

from .._backend import np

__all__ = ["Communicator", "LocalCommunicator", "MPICommunicator", "Request"]


class Request:
    """A non-blocking collective in flight: ``wait()`` returns when its buffer holds the result."""

    def wait(self) -> None:
        """Block until the operation has completed."""

    def test(self) -> bool:
        """True when the operation has completed (never blocks)."""
        return True


class Communicator:
    """The collectives over a group of processes, on contiguous arrays, in place.

    Subclasses implement ``allreduce_``, ``iallreduce_``, ``broadcast_``, ``allgather_object``,
    ``barrier`` and ``abort``; ``rank`` and ``size`` are attributes.

    >>> comm = LocalCommunicator()
    >>> buf = np.ones(3)
    >>> comm.allreduce_(buf, "sum"); buf.tolist()
    [1.0, 1.0, 1.0]
    """

    rank: int = 0
    size: int = 1
    name: str = "base"

    def allreduce_(self, buf: Any, op: str = "sum") -> None:
        """Reduce ``buf`` over all ranks, in place (``op``: ``"sum"``, ``"max"`` or ``"min"``)."""
        raise NotImplementedError

    def iallreduce_(self, buf: Any, op: str = "sum") -> Request:
        """Start ``allreduce_`` without waiting; the caller keeps ``buf`` alive until ``wait``."""
        raise NotImplementedError

    def broadcast_(self, buf: Any, root: int = 0) -> None:
        """Overwrite ``buf`` on every rank with root's ``buf``."""
        raise NotImplementedError

    def allgather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (small Python values), in rank order."""
        raise NotImplementedError

    def barrier(self) -> None:
        """Return when every rank has reached its barrier."""
        raise NotImplementedError

    def abort(self, code: int = 1) -> None:
        """End every process of the job (used when one rank fails)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"


class LocalCommunicator(Communicator):
    """One process: every collective is the identity. Needs no MPI."""

    name = "local"

    def allreduce_(self, buf: Any, op: str = "sum") -> None:
        _check_op(op)

    def iallreduce_(self, buf: Any, op: str = "sum") -> Request:
        _check_op(op)
        return Request()

    def broadcast_(self, buf: Any, root: int = 0) -> None:
        if root != 0:
            raise ValueError(f"broadcast: root {root} does not exist in a world of size 1")

    def allgather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)


class _MPIRequest(Request):
    def __init__(self, req: Any) -> None:
        self._req = req

    def wait(self) -> None:
        self._req.Wait()

    def test(self) -> bool:
        return bool(self._req.Test())


_OPS = ("sum", "max", "min")


def _check_op(op: str) -> None:
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {_OPS} (or 'mean'), got {op!r}")


class MPICommunicator(Communicator):
    """MPI through mpi4py, over ``MPI.COMM_WORLD`` (or the ``comm`` given)."""

    name = "mpi"

    def __init__(self, comm: Any = None) -> None:
        from mpi4py import MPI  # noqa: PLC0415

        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def _op(self, op: str) -> Any:
        _check_op(op)
        return {"sum": self._MPI.SUM, "max": self._MPI.MAX, "min": self._MPI.MIN}[op]

    def allreduce_(self, buf: Any, op: str = "sum") -> None:
        self.comm.Allreduce(self._MPI.IN_PLACE, _contiguous(buf), op=self._op(op))

    def iallreduce_(self, buf: Any, op: str = "sum") -> Request:
        req = self.comm.Iallreduce(self._MPI.IN_PLACE, _contiguous(buf), op=self._op(op))
        return _MPIRequest(req)

    def broadcast_(self, buf: Any, root: int = 0) -> None:
        self.comm.Bcast(_contiguous(buf), root=root)

    def allgather_object(self, obj: Any) -> list[Any]:
        return list(self.comm.allgather(obj))

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


def _contiguous(buf: Any) -> Any:
    if not (isinstance(buf, np.ndarray) and buf.flags.c_contiguous and buf.flags.writeable):
        raise ValueError(
            "communicator: buffers must be writeable C-contiguous numpy arrays; got "
            f"{type(buf).__name__} (copy with np.ascontiguousarray)"
        )
    return buf
