"""The process group and the data-parallel collectives: init, broadcast_parameters, all_reduce.

A run has one communicator, set by ``init()``: MPI when the process was started by ``mpirun``
(or another MPI launcher), a local one (world size 1, no MPI needed) otherwise.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

from .._backend import np
from .._tensor import Tensor
from ..data._sampler import launch_rank_size
from ._comm import Communicator, LocalCommunicator, MPICommunicator, Request

__all__ = [
    "Reducer",
    "all_reduce",
    "barrier",
    "broadcast_parameters",
    "get_communicator",
    "init",
    "is_main",
    "rank",
    "world_size",
]

_COMM: list[Communicator | None] = [None]
_BUCKET_MB = 25.0
_TIMEOUT = 1800.0  # seconds a collective may wait for the other ranks (PyTorch's gloo default)


def _launched_size() -> int:
    """The world size an MPI launcher announced in the environment (1 when none did)."""
    return launch_rank_size()[1]


def init(
    comm: Communicator | None = None,
    *,
    abort_on_error: bool = True,
    timeout: float | None = _TIMEOUT,
) -> Communicator:
    """Join the process group and return its communicator (idempotent).

    Under ``mpirun -n N`` every process joins ``MPI.COMM_WORLD``; a process started without a
    launcher is a world of size 1 and needs no MPI. ``comm`` installs a communicator of your
    own (another backend). With ``abort_on_error`` an exception that escapes on one rank
    prints its traceback and aborts the whole job, so the other ranks do not wait forever
    in a collective. ``timeout`` (seconds; None: wait forever) bounds how long one collective
    waits for the other ranks: past it the job is aborted with a message naming the rank and
    the collective (a rank that hangs would otherwise hang the whole job).

    >>> import tapegrad.distributed as dist
    >>> dist.init().size, dist.rank(), dist.world_size()
    (1, 0, 1)
    """
    if timeout is not None and not timeout > 0:
        raise ValueError(f"distributed.init: timeout must be > 0 seconds or None, got {timeout}")
    if comm is not None:
        _COMM[0] = comm
        return comm
    if _COMM[0] is not None:
        return _COMM[0]
    size = _launched_size()
    c: Communicator
    if size == 1:  # no launcher: MPI is not even imported
        c = LocalCommunicator()
    else:
        try:
            c = MPICommunicator(timeout=timeout)
        except ImportError:
            raise ImportError(
                f"distributed.init: the launcher started {size} processes but mpi4py is not "
                "installed; pip install 'tapegrad[mpi]'"
            ) from None
    if c.size > 1 and abort_on_error:
        _install_abort_hook(c)
    _COMM[0] = c
    return c


def _install_abort_hook(comm: Communicator) -> None:
    prev = sys.excepthook

    def hook(kind: Any, value: Any, tb: Any) -> None:
        sys.stderr.write(f"[rank {comm.rank}/{comm.size}] failed; aborting the job:\n")
        traceback.print_exception(kind, value, tb)
        sys.stderr.flush()
        if kind is KeyboardInterrupt:
            prev(kind, value, tb)
        comm.abort(1)

    sys.excepthook = hook


def get_communicator() -> Communicator:
    """The communicator ``init()`` set up (``init()`` runs on first use)."""
    return _COMM[0] if _COMM[0] is not None else init()


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1."""
    return get_communicator().rank


def world_size() -> int:
    """The number of processes in the job."""
    return get_communicator().size


def is_main() -> bool:
    """True on rank 0, the rank that prints, logs and writes checkpoints."""
    return get_communicator().rank == 0


def barrier() -> None:
    """Wait until every rank gets here."""
    get_communicator().barrier()


# -- broadcast ----------------------------------------------------------------------------------


def _state_tensors(model: Any) -> list[tuple[str, Tensor]]:
    out = list(model.named_parameters())
    if hasattr(model, "named_buffers"):
        out += [(n, b) for n, b in model.named_buffers() if isinstance(b, Tensor)]
    return out


def broadcast_parameters(model: Any, root: int = 0) -> None:
    """Copy root's parameters and buffers into every rank's ``model``, in place.

    Every rank first checks that the models agree on names, shapes and dtypes; a difference
    raises ``ValueError`` on every rank naming the first parameter and the ranks that differ
    (a mismatch would otherwise corrupt the training silently or deadlock).

    >>> import tapegrad as tg, tapegrad.distributed as dist
    >>> model = tg.nn.Linear(3, 2)
    >>> dist.broadcast_parameters(model)  # world size 1: nothing moves
    """
    comm = get_communicator()
    tensors = _state_tensors(model)
    sig = [(n, tuple(t.shape), str(t.dtype)) for n, t in tensors]
    sigs = comm.allgather_object(sig)
    if not 0 <= root < comm.size:
        raise ValueError(
            f"broadcast_parameters: root {root} is not a rank (world size {comm.size})"
        )
    for r, other in enumerate(sigs):
        if other != sigs[root]:
            raise ValueError(
                f"broadcast_parameters: rank {r}'s model differs from rank {root}'s: "
                f"{_first_difference(sigs[root], other)}; build the same model on every rank"
            )
    for _, t in tensors:
        a = t._data
        if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable):
            a = np.ascontiguousarray(a).copy()
            t._data = a
        comm.broadcast_(a, root)


def _first_difference(a: list[Any], b: list[Any]) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"{x[0]} {x[1]} {x[2]} against {y[0]} {y[1]} {y[2]}"
    return f"{len(a)} tensors against {len(b)}"


# -- buckets and the reducer --------------------------------------------------------------------


class _Bucket:
    __slots__ = ("buf", "dtype", "own", "pending", "request", "slots")

    def __init__(
        self, dtype: Any, slots: list[tuple[Tensor, int, int, tuple[int, ...]]], own: bool
    ) -> None:
        self.dtype = dtype
        self.slots = slots  # (param, offset, size, shape)
        total = sum(s[2] for s in slots)
        self.own = own  # one large gradient: the blocking path reduces its own array
        self.buf = np.zeros(total, dtype=dtype)  # zeros: a skipped bucket still joins its collective
        self.pending = len(slots)
        self.request: Request | None = None


class Reducer:
    """Averages (or sums) gradients across ranks in buckets of about ``bucket_mb`` megabytes.

    ``params`` fixes the layout: buckets fill in reverse parameter order (the order backward
    produces gradients), one dtype per bucket, so every rank builds the same buckets. A
    gradient of half a bucket or more has a bucket of its own: the blocking path reduces it
    in place, in its own array, without copying it.

    Two paths. Blocking: ``reduce(grads)`` runs one ``Allreduce`` per bucket after backward
    and leaves the results in ``grads``, in place. Overlapped: ``ready(param, array)`` as each
    gradient becomes final copies it into its bucket and starts the bucket's non-blocking
    ``Iallreduce`` as soon as all of its gradients have arrived, then ``wait(grads)`` finishes
    them all and writes back. The tape drives ``ready`` during backward, so communication
    starts while backward goes on::

        grads = tape.gradient(loss, model, on_ready=reducer.ready)
        opt.step(reducer.wait(grads))

    In a world of one process both paths leave the gradients as they are and copy nothing.

    >>> import tapegrad as tg, tapegrad.distributed as dist
    >>> model = tg.nn.Linear(3, 2)
    >>> with tg.Tape() as tape:
    ...     loss = model(tg.ones(4, 3)).sum()
    >>> grads = tape.gradient(loss, model)
    >>> reducer = dist.Reducer(list(model.parameters()))
    >>> reducer.reduce(grads) is grads, reducer.nbuckets
    (True, 1)
    """

    def __init__(
        self,
        params: list[Tensor],
        op: str = "mean",
        *,
        bucket_mb: float = _BUCKET_MB,
        comm: Communicator | None = None,
    ) -> None:
        if op not in ("mean", "sum", "max", "min"):
            raise ValueError(f"Reducer: op must be 'mean', 'sum', 'max' or 'min', got {op!r}")
        if bucket_mb <= 0:
            raise ValueError(f"Reducer: bucket_mb must be > 0, got {bucket_mb}")
        self.comm = comm if comm is not None else get_communicator()
        self.op = op
        self.params = list(params)
        limit = int(bucket_mb * 1e6)
        self.buckets: list[_Bucket] = []
        self._started: list[_Bucket] = []
        self._where: dict[int, tuple[_Bucket, int]] = {}
        open_: dict[Any, list[Any]] = {}  # dtype -> slots of the bucket being filled
        sizes: dict[Any, int] = {}
        for p in reversed(self.params):
            dt = np.dtype(p.dtype)
            off = sizes.get(dt, 0)
            nbytes = int(p.size) * dt.itemsize
            # Half a bucket or more: a bucket of its own, after the smaller ones before it.
            # Not smaller: each collective is one more wait for the slowest rank, which on a
            # shared machine costs more than copying (docs/distributed.md).
            if 2 * nbytes >= limit:
                if off:
                    self._close(dt, open_.pop(dt))
                    sizes[dt] = 0
                self._close(dt, [(p, 0, int(p.size), tuple(p.shape))], own=True)
                continue
            if off and off * dt.itemsize + nbytes > limit:  # full: close it first
                self._close(dt, open_.pop(dt))
                off = 0
            open_.setdefault(dt, []).append((p, off, int(p.size), tuple(p.shape)))
            sizes[dt] = off + int(p.size)
        for dt, slots in open_.items():
            if slots:
                self._close(dt, slots)

    def _close(self, dt: Any, slots: list[Any], own: bool = False) -> None:
        b = _Bucket(dt, slots, own)
        for i, s in enumerate(slots):
            self._where[id(s[0])] = (b, i)
        self.buckets.append(b)

    @property
    def nbuckets(self) -> int:
        """The number of buckets (one collective each)."""
        return len(self.buckets)

    def _reduce_op(self) -> str:
        return "sum" if self.op == "mean" else self.op

    def ready(self, param: Tensor, array: Any) -> None:
        """``param``'s gradient is final: store it, and start its bucket's reduction when full.

        Made to be passed as ``tape.gradient(loss, model, on_ready=reducer.ready)``, which calls
        it during backward; tensors outside the reducer's parameters (inputs the tape also
        watched) are ignored. The array is copied (backward may still use it: an ``add``
        hands the same array to both of its inputs). Each call also lets MPI progress the
        reductions in flight.
        """
        where = self._where.get(id(param))
        if where is None:
            return
        b, i = where
        _, off, size, shape = b.slots[i]
        if tuple(array.shape) != shape:
            raise ValueError(
                f"Reducer: gradient of shape {tuple(array.shape)} for a parameter {shape}"
            )
        if self.comm.size > 1:
            b.buf[off : off + size] = array.reshape(-1)
        b.pending -= 1
        if b.pending == 0:
            b.request = self.comm.iallreduce_(b.buf, self._reduce_op())
            self._started.append(b)
        for s in self._started:  # MPI moves non-blocking collectives only inside its calls
            if s.request is not None:
                s.request.test()

    def wait(self, grads: Any) -> Any:
        """Finish every started reduction and write the results into ``grads`` (returned)."""
        for b in self.buckets:
            if b.request is None:
                missing = [getattr(s[0], "name", None) for s in b.slots]
                raise RuntimeError(
                    f"Reducer.wait: a bucket of {missing} is missing {b.pending} gradient(s); "
                    "call ready() for every parameter on every rank"
                )
            b.request.wait()
            b.request = None
            b.pending = len(b.slots)
            if self.comm.size > 1:
                self._write_back(b, grads)
        self._started.clear()
        return grads

    def reduce(self, grads: Any) -> Any:
        """The blocking path: one ``Allreduce`` per bucket, results written into ``grads``."""
        n = self.comm.size
        if n == 1:  # the mean, sum, max or min of one
            return grads
        op = self._reduce_op()
        done: set[int] = set()
        for b in self.buckets:
            if b.own:  # reduce the gradient's own array when it can be written in place
                a = _array(grads[b.slots[0][0]])
                if id(a) in done:  # an earlier parameter's gradient array (p + q hands
                    self.comm.allreduce_(b.buf, op)  # both the same): reduced already; the
                    continue  # collective still runs, as it does on every rank
                if _writable_like(a, b.buf.dtype, b.slots[0][3]):
                    done.add(id(a))
                    self.comm.allreduce_(a, op)
                    if self.op == "mean":
                        np.divide(a, n, out=a)
                    continue
            for p, off, size, _ in b.slots:
                b.buf[off : off + size] = _array(grads[p]).reshape(-1)
            self.comm.allreduce_(b.buf, op)
            self._write_back(b, grads)
        return grads

    def _write_back(self, b: _Bucket, grads: Any) -> None:
        """Bucket ``b``'s result into the arrays of ``grads`` (divided by the world size for
        the mean, in the same pass)."""
        n = self.comm.size
        mean = self.op == "mean"
        for p, off, size, shape in b.slots:
            g = grads[p]
            view = b.buf[off : off + size].reshape(shape)
            a = g._data if isinstance(g, Tensor) else g
            if isinstance(a, np.ndarray) and a.flags.writeable and a.shape == shape:
                if mean:
                    np.divide(view, n, out=a)
                else:
                    np.copyto(a, view)
            else:
                g._data = view / n if mean else view.copy()


def _writable_like(a: Any, dtype: Any, shape: tuple[int, ...]) -> bool:
    return (
        isinstance(a, np.ndarray)
        and a.dtype == dtype
        and a.shape == shape
        and a.flags.c_contiguous
        and a.flags.writeable
        and a.base is None  # owns its memory: no other array sees the reduction
    )


def _array(g: Any) -> Any:
    return g._data if isinstance(g, Tensor) else np.asarray(g)


_REDUCERS: dict[Any, Reducer] = {}


def all_reduce(
    grads: Any, op: str = "mean", *, model: Any = None, bucket_mb: float = _BUCKET_MB
) -> Any:
    """Reduce a ``Gradients`` across ranks in place (``op="mean"``: the average) and return it.

    The gradients are flattened into buckets of about ``bucket_mb`` MB (one ``Allreduce``
    each), in ``model``'s parameter order when ``model`` is given, else in ``grads``' own
    order (the same on every rank running the same program). The reducer for a layout is kept,
    so its buffers are reused from step to step.

    >>> import tapegrad as tg, tapegrad.distributed as dist
    >>> model = tg.nn.Linear(2, 1)
    >>> opt = tg.optim.SGD(model.parameters(), lr=0.1)
    >>> with tg.Tape() as tape:
    ...     loss = model(tg.ones(3, 2)).mean()
    >>> grads = dist.all_reduce(tape.gradient(loss, model)); opt.step(grads)
    """
    if model is not None:
        params = [p for p in model.parameters() if p in grads]
    else:
        params = list(grads.keys())
    key = (op, bucket_mb, tuple((id(p), tuple(p.shape), str(p.dtype)) for p in params))
    r = _REDUCERS.get(key)
    if r is None or r.comm is not get_communicator():
        if len(_REDUCERS) >= 8:
            _REDUCERS.pop(next(iter(_REDUCERS)))
        r = _REDUCERS[key] = Reducer(params, op, bucket_mb=bucket_mb)
    return r.reduce(grads)
