"""One thread pool for numpy's BLAS and the parallel kernels: numba's.

numpy's OpenBLAS keeps its own worker threads, and after each multi-threaded product they spin
on the other cores for about 0.1 s, waiting for the next one. A parallel numba kernel run in
that window fights them for the cores: on the 2-core machine (16 -> 32 channels at 8x8, batch
128, forward) a two-way kernel took 0.34 ms alone and 3.1 ms right after a GEMM, against 0.69
serial. OpenBLAS (from 0.3.28) can hand its parallel work to the caller instead
(``openblas_set_threads_callback_function``): ``active()`` gives it a compiled callback that
runs the jobs on numba's threads (one ``prange`` iteration per job), so that products and
kernels share one pool whose idle threads are the ones the next kernel wakes. With it, the same
kernel took 0.40 ms right after a GEMM; the products themselves ran at OpenBLAS's own speed
(within noise, 128 to 4096 wide).

``active()`` installs it on first use and says whether parallel kernels may run (``worth``
asks that for a call of a given size, and says no when the kernels have one thread): numba's
threading layer is ``omp`` or ``tbb`` (the ``workqueue`` layer cannot run parallel regions
from several threads at once), numpy's BLAS is an OpenBLAS with the callback, more than one
core, OpenBLAS's threads no more than numba's (a product's jobs wait on each other, so each
needs a thread of its own: the callback raises the calling thread's numba mask to the number
of jobs for the product's duration), and ``TAPEGRAD_SHARED_POOL`` is not ``0``. Otherwise
kernels stay serial and OpenBLAS keeps its threads. A forked child gets OpenBLAS's own threads
back and serial kernels (GNU OpenMP, behind numba's ``omp`` layer, does not survive a fork).

``count()`` is the kernels' thread count (``tg.get_num_threads()``); ``set_threads`` (behind
``tg.set_num_threads``) sets it and OpenBLAS's together, for every Python thread: numba's own
count is per thread, so each sets its mask on its next kernel after a change. Imported only
when numba is selected.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any

from numba import prange

from .. import _threads
from .._backend import np
from . import jit, numba
from .chunks import num_threads, set_num_threads
from .runtime import compiling

_state: dict[str, Any] = {"pid": None, "on": False, "why": "not installed"}
_lock = threading.Lock()
# the kernels' thread count (None: the default, decided on first use) and a generation that
# each Python thread compares with its own to know when to set numba's mask (numba's is per
# thread; the count is per process)
_conf: dict[str, Any] = {"n": None, "gen": 0}
_local = threading.local()


def _intrinsic() -> Any:
    """``call_job(fn, i, data, arg)``: a call of the C function at address ``fn`` as
    ``void fn(int, void *, int)``, OpenBLAS's per-job function."""
    from llvmlite import ir  # noqa: PLC0415 - numba's own dependency
    from numba.core import types  # noqa: PLC0415
    from numba.core.extending import intrinsic  # noqa: PLC0415

    @intrinsic
    def call_job(typingctx: Any, fn: Any, i: Any, data: Any, arg: Any) -> Any:
        sig = types.void(types.intp, types.int32, types.intp, types.int32)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            i8p = ir.IntType(8).as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), i8p, ir.IntType(32)])
            f = builder.inttoptr(args[0], fnty.as_pointer())
            builder.call(f, [args[1], builder.inttoptr(args[2], i8p), args[3]])
            return context.get_dummy_value()

        return sig, codegen

    return call_job


call_job = _intrinsic()


@jit(parallel=True, signatures=["void(intp, int32, intp, intp, int32)"])
def _run_jobs(fn, numjobs, elsize, jobdata, arg):  # type: ignore[no-untyped-def]
    # a product's jobs wait on each other: each needs a thread, whatever the calling thread's
    # mask (numjobs is at most OpenBLAS's threads, at most numba's)
    mask = num_threads()
    if mask < numjobs:
        set_num_threads(numjobs)
    for i in prange(numjobs):
        call_job(fn, np.int32(i), jobdata + i * elsize, arg)
    if mask < numjobs:
        set_num_threads(mask)


def _callback() -> Any:
    """The C callback OpenBLAS calls with its jobs (a numba ``cfunc``, compiled each process in
    about 0.05 s; ``_run_jobs``, which it calls, is cached)."""
    nb = numba()
    assert nb is not None
    from numba.core import types  # noqa: PLC0415

    sig = types.void(types.int32, types.intp, types.int32, types.uintp, types.intp, types.int32)

    def run(sync, fn, numjobs, elsize, jobdata, arg):  # type: ignore[no-untyped-def]
        _run_jobs(fn, numjobs, np.intp(elsize), jobdata, arg)

    return nb.cfunc(sig, cache=False)(run)


def _numpy_openblas() -> Any:
    """numpy's own OpenBLAS as a ctypes library, and its number of threads; or None."""
    lib = _threads.numpy_openblas()
    return None if lib is None else (lib, _threads.blas_threads())


def _setter(lib: Any) -> Any:
    """OpenBLAS's ``openblas_set_threads_callback_function``, under any of its symbol names."""
    for name in ("openblas_set_threads_callback_function",
                 "scipy_openblas_set_threads_callback_function64_",
                 "scipy_openblas_set_threads_callback_function"):
        f = getattr(lib, name, None)
        if f is not None:
            f.argtypes = [ctypes.c_void_p]
            f.restype = None
            return f
    return None


def _why_not() -> str | None:
    if os.environ.get("TAPEGRAD_SHARED_POOL", "").strip() == "0":
        return "TAPEGRAD_SHARED_POOL=0"
    if _threads.cores() < 2:
        return "one core"
    return None


def _install() -> None:
    nb = numba()
    assert nb is not None
    why = _why_not()
    if why is not None:
        _state["why"] = why
        return
    found = _numpy_openblas()
    if found is None:
        _state["why"] = "numpy's BLAS is not the OpenBLAS its wheel bundles"
        return
    lib, blas_threads = found
    setter = _setter(lib)
    if setter is None:
        _state["why"] = "numpy's OpenBLAS has no threads callback (before 0.3.28)"
        return
    if blas_threads > nb.config.NUMBA_NUM_THREADS:
        _state["why"] = (f"OpenBLAS has {blas_threads} threads, numba {nb.config.NUMBA_NUM_THREADS}")
        return
    _run_jobs(0, 0, 0, 0, 0)  # compiles, and starts numba's threads: the layer is then known
    layer = nb.threading_layer()
    if layer not in ("omp", "tbb"):
        _state["why"] = f"numba's threading layer is {layer!r}"
        return
    cb = _callback()
    setter(ctypes.c_void_p(cb.address))
    _state.update(setter=setter, cb=cb, on=True, why=f"shared ({layer})")
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    """In a forked child: OpenBLAS's own threads again, kernels serial."""
    if _state["on"]:
        _state["setter"](None)
        _state["on"] = False
        _state["why"] = "a forked child"


def active() -> bool:
    """Whether numpy's BLAS runs on numba's threads, so parallel kernels may run (installs the
    callback on first call). Not while the compiler process is working (``runtime``): it holds a
    core, and numba's threads spinning beside it made a Conv2d model's steps 20x slower (2-4 s
    against 0.12 with OpenBLAS's own threads, AMD Zen 4, 2 cores); the pool is installed on the
    first call after it is done."""
    if _state["pid"] is None:
        if compiling():
            return False
        with _lock:
            if _state["pid"] is None:
                try:
                    _install()
                except Exception as e:  # noqa: BLE001 - any failure leaves the kernels serial
                    _state["why"] = f"{type(e).__name__}: {e}"
                    print(f"tapegrad: kernels stay serial ({_state['why']})", file=sys.stderr)
                _state["pid"] = os.getpid()
    return bool(_state["on"]) and _state["pid"] == os.getpid()


def worth(work: int, minimum: int) -> bool:
    """Whether a kernel call of ``work`` units (at least ``minimum``) runs its parallel form
    (on ``count()`` threads; never when that is one)."""
    return work >= minimum and active() and count() > 1


def count() -> int:
    """The threads a parallel kernel called from this Python thread runs on: the number
    ``set_threads`` gave, else the default (``tapegrad._threads.default_threads``). Sets numba's
    mask of the calling thread to it the first time the thread asks after a change."""
    n = _conf["n"]
    if n is None:
        with _lock:
            if _conf["n"] is None:
                _conf["n"] = _threads.default_threads(_launched())
            n = _conf["n"]
    if getattr(_local, "gen", -1) != _conf["gen"]:
        nb = numba()
        assert nb is not None
        nb.set_num_threads(n)
        _local.gen = _conf["gen"]
    return int(n)


def _launched() -> int:
    nb = numba()
    assert nb is not None
    return int(nb.config.NUMBA_NUM_THREADS)


def set_threads(n: int) -> None:
    """Run the kernels and numpy's OpenBLAS on ``n`` threads, capped at numba's (for every
    Python thread: each sets its numba mask on its next kernel)."""
    k = min(int(n), _launched())
    with _lock:
        _conf["n"] = k
        _conf["gen"] += 1
        _threads.set_blas_threads(k)
        if _state["pid"] is not None and not _state["on"] and _state["why"].startswith("OpenBLAS"):
            _state["pid"] = None  # OpenBLAS had more threads than numba: try sharing again
    count()


def describe() -> str:
    """How numpy's BLAS and the kernels share the cores, in words."""
    active()
    return str(_state["why"])
