"""Keep large freed array blocks for the next array of the same size (numpy's allocation hook).

A training step allocates the same large arrays every step (activations, their gradients,
dropout masks, attention probabilities) and frees them before the next. glibc serves blocks
above 32 MiB with ``mmap`` and returns them to the system on ``free`` (``_malloc.py`` can raise
that threshold no further), so every step pays the kernel to map and zero those pages again: on
nanoGPT's Shakespeare configuration (AMD Zen 4, 2 threads) that was 6.5 s of system time in a
14.5 s step. PyTorch's CUDA caching allocator solves the same problem on the GPU; this is its CPU
counterpart for numpy arrays, installed with numpy's own hook for it
(``PyDataMem_SetHandler``, numpy >= 1.22).

A block that comes to ``MIN`` bytes (8 MiB) or more in whole 4 KiB pages is allocated as those
pages; freed, it is kept in a table by its size and handed to the next request of that size
(``np.zeros`` clears it). How much it keeps is bounded by the program's own high-water mark:
when a request finds no block of its size, kept blocks of other sizes are freed first so that
the arrays alive plus the blocks kept never exceed the most the program ever had alive at
once. A steady training loop (the same sizes every step) then allocates nothing after its
first steps, and a program whose sizes change (a new batch size, an evaluation pass) keeps no
more memory than its peak.
``tapegrad.empty_cache()`` frees every kept block; ``TAPEGRAD_ARRAY_CACHE=0`` (or
``TAPEGRAD_TUNE_MALLOC=0``) before importing tapegrad keeps numpy's own allocator, and
``TAPEGRAD_ARRAY_CACHE=<MiB>`` caps what is kept. Blocks under 1 KiB are kept as numpy's own
allocator keeps them (up to 7 of each size in bytes), so small ops cost what they did.

The four functions numpy calls are a few dozen lines of LLVM IR compiled with llvmlite (numba's
code generator; about 50 ms) by the first import, whose machine code the kernel cache folder
keeps for later imports (``_compile``): numpy calls them with the GIL held, so the table needs
no lock, and they never call back into Python. A block grown or shrunk by ``realloc`` is
counted by its new size (numpy does not pass the old one: the C library's usable size of the
block tells it). numpy records in every array the handler that allocated it, so arrays made
before the switch, or in threads that did not switch (numpy's handler is a context variable: a
new thread starts with numpy's own), are freed by their own allocator. Not installed on
free-threaded Python builds (no GIL to guard the table).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
import tempfile
from typing import Any

import numpy as np

from .ir import DEPTH, IR, MIN, SLOTS, SMALL, SMALL_AT, SMALL_DEPTH

_NAMES = ("tg_malloc", "tg_calloc", "tg_realloc", "tg_free", "tg_evict")


class _Allocator(ctypes.Structure):  # numpy's PyDataMemAllocator
    _fields_ = [(name, ctypes.c_void_p) for name in ("ctx", "malloc", "calloc", "realloc", "free")]


class _Handler(ctypes.Structure):  # numpy's PyDataMem_Handler (version 1)
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8),
                ("allocator", _Allocator)]


_state: np.ndarray | None = None  # the table the IR reads and writes (None: not installed)
_evict: Any = None


def _cap() -> int | None:
    """The cap on kept bytes from TAPEGRAD_ARRAY_CACHE (MiB): None to stay off."""
    if os.environ.get("TAPEGRAD_TUNE_MALLOC", "1") == "0":
        return None
    value = os.environ.get("TAPEGRAD_ARRAY_CACHE", "").strip()
    if not value:
        return 1 << 62
    try:
        mib = float(value)
    except ValueError:
        raise ValueError(
            f"TAPEGRAD_ARRAY_CACHE={value!r}: expected a number of MiB to keep at most, "
            "or 0 to keep numpy's own allocator") from None
    return int(mib * (1 << 20)) if mib > 0 else None


def _compile() -> dict[str, int]:
    """The five functions' addresses (llvmlite's MCJIT, the process's malloc and free), their
    machine code read from the cache folder when an earlier process left it there."""
    import llvmlite  # noqa: PLC0415  (numba's dependency; only when installing)
    import llvmlite.binding as llvm  # noqa: PLC0415

    global _code
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libc = ctypes.CDLL(None)
    for name, fn in [(n, getattr(libc, n)) for n in ("malloc", "calloc", "realloc", "free")] + [
            ("malloc_usable_size", _usable(libc))]:
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
    module = llvm.parse_assembly(IR)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    _code = "compiled"
    try:
        path, tag = _object_file(llvm, llvmlite.__version__, machine.triple)
    except Exception:  # no cache folder to name: compile, keep nothing
        pass
    else:
        def load(_module: Any) -> bytes | None:
            global _code
            code = _read_object(path, tag)
            if code is not None:
                _code = "loaded"
            return code

        engine.set_object_cache(lambda _module, code: _write_object(path, tag, code), load)
    engine.finalize_object()
    _forever(engine, module, machine)
    return {name: engine.get_function_address(name) for name in _NAMES}


# The machine code of the IR, kept in the kernel cache folder: compiling took about 50 ms of
# every import, loading takes about 3 ms after llvmlite's own 22 ms (AMD Zen 4). A file holds
# _MAGIC, the key it was made for (the IR, llvmlite and LLVM, the target and the CPU), a digest
# of the code, then the code; any other file is compiled afresh.
_MAGIC = b"tapegrad array cache object\n"
_code = ""  # where this process's machine code came from: "compiled" or "loaded" (from the file)


def _object_file(llvm: Any, version: str, triple: str) -> tuple[str, bytes]:
    """The cache file for this IR on this machine, and the key its header must hold."""
    from .._kernels.runtime import user_cache_base  # noqa: PLC0415  # cycle: kernels are above

    h = hashlib.blake2b(digest_size=16)
    for part in (IR, version, ".".join(map(str, llvm.llvm_version_info)), triple,
                 llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()):
        h.update(part.encode() + b"\0")
    key = h.hexdigest()
    return os.path.join(user_cache_base(), f"array-cache-{key[:16]}.o"), key.encode() + b"\n"


def _read_object(path: str, tag: bytes) -> bytes | None:
    """The code in ``path`` when its header and digest are whole and its key is ``tag``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    head = _MAGIC + tag
    digest, code = data[len(head):len(head) + 32], data[len(head) + 32:]
    if not data.startswith(head) or not code or _digest(code) != digest:
        return None
    return code


def _digest(code: bytes) -> bytes:
    return hashlib.blake2b(code, digest_size=32).digest()


def _write_object(path: str, tag: bytes, code: bytes) -> None:
    """Write the code to ``path`` whole or not at all (best effort: a folder that cannot be
    written leaves the next import compiling, as this one did)."""
    try:
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".array-cache-", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            os.chmod(tmp, 0o644)  # as readable as the kernels beside it
            f.write(_MAGIC + tag + _digest(code) + code)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _usable(libc: ctypes.CDLL) -> Any:
    """The C library's usable size of a block (``malloc_size`` on macOS)."""
    usable = getattr(libc, "malloc_usable_size", None) or libc.malloc_size
    usable.restype, usable.argtypes = ctypes.c_size_t, (ctypes.c_void_p,)
    return usable


def _tight() -> bool:
    """Whether the usable size of a block is always under a page above its request (glibc,
    musl; not allocators with size classes such as jemalloc's, 2 MiB apart at 8 MiB): only then
    does it tell realloc the size a block was counted live as."""
    libc = ctypes.CDLL(None)
    usable, malloc, free = _usable(libc), libc.malloc, libc.free
    malloc.restype, malloc.argtypes, free.argtypes = ctypes.c_void_p, (ctypes.c_size_t,), (
        ctypes.c_void_p,)
    for n in (MIN - 4096, MIN - 1, MIN, MIN + 4096, 5 * MIN // 4 + 4096, 3 * MIN + 8):
        p = malloc(n)
        if not p:
            return False
        u = usable(p)
        free(p)
        if not n <= u < n + 4096:
            return False
    return True


def _forever(*objects: Any) -> None:
    """Never free these: arrays this allocator made may be freed as late as the interpreter's
    last moments, after module globals are gone."""
    incref = ctypes.pythonapi.Py_IncRef
    incref.argtypes = (ctypes.py_object,)
    for obj in objects:
        incref(obj)


def _set_handler(capsule: object) -> object:
    """numpy's PyDataMem_SetHandler (C API slot 304 since numpy 1.22): the previous handler."""
    core = getattr(np, "_core", None) or np.core
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, (ctypes.py_object, ctypes.c_char_p)
    table = ctypes.cast(get(core._multiarray_umath._ARRAY_API, None),
                        ctypes.POINTER(ctypes.c_void_p))
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[304])(capsule)


def install() -> bool:
    """Route this thread's numpy allocations through the cache (once); whether it is on."""
    global _state, _evict
    if _state is not None:
        return True
    cap = _cap()
    if cap is None or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return False
    try:
        addresses = _compile()
    except Exception:  # no llvmlite, or no native target: numpy's allocator stays
        return False
    state = np.zeros(SMALL_AT + SMALL * (SMALL_DEPTH + 1), np.int64)
    state[1], state[2], state[5], state[6], state[10] = cap, MIN, SLOTS, DEPTH, _tight()
    handler = _Handler(b"tapegrad", 1, _Allocator(
        state.ctypes.data, *(addresses[n] for n in ("tg_malloc", "tg_calloc", "tg_realloc",
                                                    "tg_free"))))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    name = b"mem_handler"  # the capsule keeps this pointer: it lives as long as the module
    capsule = new(ctypes.addressof(handler), name, None)
    _forever(state, handler, capsule, name)
    _set_handler(capsule)
    # PYFUNCTYPE keeps the GIL for the call: numpy calls the other functions with it held
    _evict = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(addresses["tg_evict"])
    _state = state
    return True


def empty_cache() -> None:
    """Free every array block tapegrad keeps for reuse (see ``tapegrad/_array_cache/``).

    A training loop's arrays come back at the same sizes every step, so tapegrad keeps large
    freed blocks (8 MiB and up) for the next array of the same size, never more than the
    program's own peak of live arrays. Call this after a phase whose sizes will not come back
    (an evaluation at another batch size, a model deleted) to hand that memory to the system,
    as ``torch.cuda.empty_cache()`` does for PyTorch's GPU cache. Arrays in use are untouched.
    The bound on what is kept restarts from the arrays alive now: a past phase's peak no longer
    lets blocks be kept beyond what the program holds from here on.

    >>> import tapegrad as tg
    >>> tg.empty_cache()
    >>> tg.memory_stats()["kept_bytes"]
    0
    """
    if _state is not None:
        _evict(_state.ctypes.data, 0)
        _state[8] = _state[7]  # the high-water mark restarts from the arrays alive now


def memory_stats() -> dict[str, int]:
    """What tapegrad's array cache holds and has done since import (all zero when it is off).

    ``kept_bytes``: freed blocks kept for reuse; ``live_bytes``: large blocks in use;
    ``peak_bytes``: the most large-block bytes in use at once (what is kept never exceeds it
    with what is in use); ``hits``: large arrays served from kept blocks; ``misses``: served by
    ``malloc``; ``evictions``: kept blocks freed to make room for other sizes.
    """
    if _state is None:
        return dict.fromkeys(("kept_bytes", "live_bytes", "peak_bytes", "hits", "misses",
                              "evictions"), 0)
    s = _state
    return {"kept_bytes": int(s[0]), "live_bytes": int(s[7]), "peak_bytes": int(s[8]),
            "hits": int(s[3]), "misses": int(s[4]), "evictions": int(s[9])}
