"""Communicators: the collectives data parallelism needs, behind one small interface.

``Communicator`` is what the rest of ``tapegrad.distributed`` calls; ``MPICommunicator`` (mpi4py)
is one implementation and ``LocalCommunicator`` (world size 1, no MPI) another. A GPU backend
(NCCL through CuPy) implements the same methods on device arrays.
"""

from __future__ import annotations

import os
import sys
import threading
import time
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


class _Watchdog:
    """Ends the job when one collective has waited more than ``timeout`` seconds.

    MPI has no timeout on a collective: a rank that hangs (a deadlock, an endless loop, a
    rank in another collective) leaves the others waiting forever. The collectives mark when
    they start waiting (two attribute writes, nothing on the hot path); a daemon thread looks
    once a period and, past the limit, prints which rank waited in which collective and for
    how long, then aborts the job (``MPI_Abort``; ``mpirun`` ends every process).
    """

    def __init__(self, comm: MPICommunicator, timeout: float) -> None:
        self.comm = comm
        self.timeout = timeout
        self.what: str | None = None
        self.since = 0.0
        period = min(1.0, timeout / 4)
        t = threading.Thread(target=self._watch, args=(period,), name="tapegrad-watchdog")
        t.daemon = True
        t.start()

    def enter(self, what: str) -> None:
        self.since = time.monotonic()
        self.what = what

    def leave(self) -> None:
        self.what = None

    def _watch(self, period: float) -> None:
        while True:
            time.sleep(period)
            what, since = self.what, self.since
            if what is None or time.monotonic() - since <= self.timeout:
                continue
            c = self.comm
            sys.stderr.write(
                f"[rank {c.rank}/{c.size}] distributed: {what} has waited "
                f"{time.monotonic() - since:.1f} s for the other ranks (timeout "
                f"{self.timeout:g} s): a rank is hung, dead, or in another collective; "
                "aborting the job (dist.init(timeout=...) sets the limit)\n"
            )
            sys.stderr.flush()
            if c.thread_level_multiple:  # MPI may be called from this thread
                c.abort(1)
            os._exit(1)  # mpirun sees a rank exit with an error and ends the others


class _Guard:
    """A no-op stand-in for ``_Watchdog`` when there is no timeout."""

    def enter(self, what: str) -> None:
        pass

    def leave(self) -> None:
        pass


class _MPIRequest(Request):
    def __init__(self, req: Any, guard: Any) -> None:
        self._req = req
        self._guard = guard

    def wait(self) -> None:
        self._guard.enter("a non-blocking all_reduce (Reducer.wait)")
        try:
            self._req.Wait()
        finally:
            self._guard.leave()

    def test(self) -> bool:
        return bool(self._req.Test())


_OPS = ("sum", "max", "min")


def _check_op(op: str) -> None:
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {_OPS} (or 'mean'), got {op!r}")


class MPICommunicator(Communicator):
    """MPI through mpi4py, over ``MPI.COMM_WORLD`` (or the ``comm`` given).

    ``timeout`` (seconds, None for none): a collective that waits longer for the other ranks
    aborts the whole job with a message naming the rank and the collective, instead of
    hanging forever (MPI itself has no such timeout).
    """

    name = "mpi"

    def __init__(self, comm: Any = None, *, timeout: float | None = None) -> None:
        from mpi4py import MPI  # noqa: PLC0415

        if timeout is not None and not timeout > 0:
            raise ValueError(f"MPICommunicator: timeout must be > 0 seconds or None, got {timeout}")
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.timeout = timeout
        self.thread_level_multiple = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
        self._guard: Any = _Guard()
        if timeout is not None and self.size > 1:
            self._guard = _Watchdog(self, timeout)

    def _op(self, op: str) -> Any:
        _check_op(op)
        return {"sum": self._MPI.SUM, "max": self._MPI.MAX, "min": self._MPI.MIN}[op]

    def allreduce_(self, buf: Any, op: str = "sum") -> None:
        mop = self._op(op)
        self._guard.enter("all_reduce")
        try:
            self.comm.Allreduce(self._MPI.IN_PLACE, _contiguous(buf), op=mop)
        finally:
            self._guard.leave()

    def iallreduce_(self, buf: Any, op: str = "sum") -> Request:
        req = self.comm.Iallreduce(self._MPI.IN_PLACE, _contiguous(buf), op=self._op(op))
        return _MPIRequest(req, self._guard)

    def broadcast_(self, buf: Any, root: int = 0) -> None:
        self._guard.enter("broadcast")
        try:
            self.comm.Bcast(_contiguous(buf), root=root)
        finally:
            self._guard.leave()

    def allgather_object(self, obj: Any) -> list[Any]:
        self._guard.enter("allgather")
        try:
            return list(self.comm.allgather(obj))
        finally:
            self._guard.leave()

    def barrier(self) -> None:
        self._guard.enter("barrier")
        try:
            self.comm.Barrier()
        finally:
            self._guard.leave()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


def _contiguous(buf: Any) -> Any:
    if not (isinstance(buf, np.ndarray) and buf.flags.c_contiguous and buf.flags.writeable):
        raise ValueError(
            "communicator: buffers must be writeable C-contiguous numpy arrays; got "
            f"{type(buf).__name__} (copy with np.ascontiguousarray)"
        )
    return buf
