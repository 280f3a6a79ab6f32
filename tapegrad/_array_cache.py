"""Keep large freed array blocks for the next array of the same size (numpy's allocation hook).

A training step allocates the same large arrays every step (activations, their gradients,
dropout masks, attention probabilities) and frees them before the next. glibc serves blocks
above 32 MiB with ``mmap`` and returns them to the system on ``free`` (``_malloc.py`` can raise
that threshold no further), so every step pays the kernel to map and zero those pages again: on
nanoGPT's Shakespeare configuration (AMD Zen 4, 2 threads) that was 6.5 s of system time in a
14.5 s step. PyTorch's CUDA caching allocator solves the same problem on the GPU; this is its CPU
counterpart for numpy arrays, installed with numpy's own hook for it
(``PyDataMem_SetHandler``, numpy >= 1.22).

Blocks of at least ``MIN`` bytes (8 MiB) are rounded up to whole 4 KiB pages; a freed one is kept in a
table by its size and handed to the next request of that size (``np.zeros`` clears it). How
much it keeps is bounded by the program's own high-water mark: when a request finds no block
of its size, kept blocks of other sizes are freed first so that the arrays alive plus the
blocks kept never exceed the most the program ever had alive at once. A steady training loop
(the same sizes every step) then allocates nothing after its first steps, and a program whose
sizes change (a new batch size, an evaluation pass) keeps no more memory than its peak.
``tapegrad.empty_cache()`` frees every kept block; ``TAPEGRAD_ARRAY_CACHE=0`` (or
``TAPEGRAD_TUNE_MALLOC=0``) before importing tapegrad keeps numpy's own allocator, and
``TAPEGRAD_ARRAY_CACHE=<MiB>`` caps what is kept. Blocks under 1 KiB are kept as numpy's own
allocator keeps them (up to 7 of each size in bytes), so small ops cost what they did.

The four functions numpy calls are a few dozen lines of LLVM IR compiled once at import with
llvmlite (numba's code generator; about 40 ms): numpy calls them with the GIL held, so the
table needs no lock, and they never call back into Python. numpy records in every array the
handler that allocated it, so arrays made before the switch, or in threads that did not switch
(numpy's handler is a context variable: a new thread starts with numpy's own), are freed by
their own allocator. Not installed on free-threaded Python builds (no GIL to guard the table).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import numpy as np

# blocks below 8 MiB stay with malloc, whose heap keeps them (``_malloc.py``) and can serve a
# request of any smaller size from them: kept here from 1 MiB, the per-step peak of the CNN
# workloads rose 10-40% (blocks kept by size that no later array of that size took), while
# nanoGPT's step took the same time (AMD Zen 4, 2 threads: 9.7 s, 8.9-10.8 s from 1 MiB)
MIN = 8 << 20
SLOTS, DEPTH = 256, 64  # sizes kept, blocks kept per size
SMALL, SMALL_DEPTH = 1024, 7  # blocks under 1 KiB: 7 kept per size in bytes (numpy's own rule)
# State words: 0 kept bytes, 1 cap, 2 MIN, 3 hits, 4 misses, 5 SLOTS, 6 DEPTH, 7 live bytes,
# 8 high-water mark of live bytes, 9 blocks freed to make room; slot s at 16 + s * (DEPTH + 2):
# its size, how many blocks it holds, the blocks; then, for each size under SMALL bytes, how many
# blocks of it are kept and the blocks (SMALL_DEPTH + 1 words).
_HEAD = 16
_SMALL_AT = _HEAD + SLOTS * (DEPTH + 2)

_IR = r"""
declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare {i64, i1} @llvm.umul.with.overflow.i64(i64, i64)

define internal i64 @get(ptr %s, i64 %i) alwaysinline {
  %p = getelementptr i64, ptr %s, i64 %i
  %v = load i64, ptr %p
  ret i64 %v
}
define internal void @put(ptr %s, i64 %i, i64 %v) alwaysinline {
  %p = getelementptr i64, ptr %s, i64 %i
  store i64 %v, ptr %p
  ret void
}
define internal void @bump(ptr %s, i64 %i, i64 %d) alwaysinline {
  %v = call i64 @get(ptr %s, i64 %i)
  %w = add i64 %v, %d
  call void @put(ptr %s, i64 %i, i64 %w)
  ret void
}
define internal i64 @pagesize(i64 %n) alwaysinline {
  %a = add i64 %n, 4095
  %k = and i64 %a, -4096
  ret i64 %k
}

; the slot of `key`, else the first empty slot on its probe path, else -1 (table full)
define internal i64 @find(ptr %s, i64 %key) {
entry:
  %ns = call i64 @get(ptr %s, i64 5)
  %d = call i64 @get(ptr %s, i64 6)
  %stride = add i64 %d, 2
  %h0 = lshr i64 %key, 12
  %h = urem i64 %h0, %ns
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %slot = phi i64 [%h, %entry], [%slot2, %next]
  %b0 = mul i64 %slot, %stride
  %b = add i64 %b0, HEAD
  %k = call i64 @get(ptr %s, i64 %b)
  %same = icmp eq i64 %k, %key
  %empty = icmp eq i64 %k, 0
  %stop = or i1 %same, %empty
  br i1 %stop, label %found, label %next
next:
  %i1 = add i64 %i, 1
  %slot1 = add i64 %slot, 1
  %wrap = icmp eq i64 %slot1, %ns
  %slot2 = select i1 %wrap, i64 0, i64 %slot1
  %all = icmp eq i64 %i1, %ns
  br i1 %all, label %full, label %loop
found:
  ret i64 %b
full:
  ret i64 -1
}

; a kept block of `key` bytes (counted live), or null
define internal ptr @take(ptr %s, i64 %key) {
entry:
  %b = call i64 @find(ptr %s, i64 %key)
  %none = icmp slt i64 %b, 0
  br i1 %none, label %miss, label %slot
slot:
  %k = call i64 @get(ptr %s, i64 %b)
  %same = icmp eq i64 %k, %key
  %ci = add i64 %b, 1
  %c = call i64 @get(ptr %s, i64 %ci)
  %some = icmp ne i64 %c, 0
  %hit = and i1 %same, %some
  br i1 %hit, label %pop, label %miss
pop:
  %c1 = sub i64 %c, 1
  call void @put(ptr %s, i64 %ci, i64 %c1)
  %pi0 = add i64 %b, 2
  %pi = add i64 %pi0, %c1
  %p = call i64 @get(ptr %s, i64 %pi)
  %neg = sub i64 0, %key
  call void @bump(ptr %s, i64 0, i64 %neg)
  call void @bump(ptr %s, i64 7, i64 %key)
  call void @bump(ptr %s, i64 3, i64 1)
  %r = inttoptr i64 %p to ptr
  ret ptr %r
miss:
  call void @bump(ptr %s, i64 4, i64 1)
  ret ptr null
}

; free kept blocks until at most `target` bytes are kept
define void @tg_evict(ptr %s, i64 %target) {
entry:
  %ns = call i64 @get(ptr %s, i64 5)
  %d = call i64 @get(ptr %s, i64 6)
  %stride = add i64 %d, 2
  br label %slots
slots:
  %slot = phi i64 [0, %entry], [%slot1, %nextslot]
  %more = icmp ult i64 %slot, %ns
  br i1 %more, label %slotbody, label %done
slotbody:
  %b0 = mul i64 %slot, %stride
  %b = add i64 %b0, HEAD
  %key = call i64 @get(ptr %s, i64 %b)
  %ci = add i64 %b, 1
  br label %blocks
blocks:
  %kept = call i64 @get(ptr %s, i64 0)
  %over = icmp sgt i64 %kept, %target
  br i1 %over, label %count, label %done
count:
  %c = call i64 @get(ptr %s, i64 %ci)
  %some = icmp ne i64 %c, 0
  br i1 %some, label %pop, label %nextslot
pop:
  %c1 = sub i64 %c, 1
  call void @put(ptr %s, i64 %ci, i64 %c1)
  %pi0 = add i64 %b, 2
  %pi = add i64 %pi0, %c1
  %pv = call i64 @get(ptr %s, i64 %pi)
  %p = inttoptr i64 %pv to ptr
  call void @free(ptr %p)
  %kept1 = sub i64 %kept, %key
  call void @put(ptr %s, i64 0, i64 %kept1)
  call void @bump(ptr %s, i64 9, i64 1)
  br label %blocks
nextslot:
  %slot1 = add i64 %slot, 1
  br label %slots
done:
  ret void
}

; make room for a new block of `key` bytes within the high-water mark, count it live
define internal void @room(ptr %s, i64 %key) {
entry:
  %live = call i64 @get(ptr %s, i64 7)
  %peak = call i64 @get(ptr %s, i64 8)
  %t0 = sub i64 %peak, %live
  %t1 = sub i64 %t0, %key
  %neg = icmp slt i64 %t1, 0
  %target = select i1 %neg, i64 0, i64 %t1
  %kept = call i64 @get(ptr %s, i64 0)
  %over = icmp sgt i64 %kept, %target
  br i1 %over, label %evict, label %count
evict:
  call void @tg_evict(ptr %s, i64 %target)
  br label %count
count:
  %live1 = add i64 %live, %key
  call void @put(ptr %s, i64 7, i64 %live1)
  %up = icmp sgt i64 %live1, %peak
  %peak1 = select i1 %up, i64 %live1, i64 %peak
  call void @put(ptr %s, i64 8, i64 %peak1)
  ret void
}

; blocks under SMALL bytes: numpy's default allocator keeps SMALL_DEPTH of each size, so
; does this one (a small array's malloc and free are a good part of a small op)
define internal ptr @small_take(ptr %s, i64 %size) alwaysinline {
entry:
  %o = mul i64 %size, STRIDE_SMALL
  %b = add i64 %o, SMALL_AT
  %c = call i64 @get(ptr %s, i64 %b)
  %none = icmp eq i64 %c, 0
  br i1 %none, label %miss, label %pop
pop:
  %c1 = sub i64 %c, 1
  call void @put(ptr %s, i64 %b, i64 %c1)
  %pi0 = add i64 %b, 1
  %pi = add i64 %pi0, %c1
  %p = call i64 @get(ptr %s, i64 %pi)
  %r = inttoptr i64 %p to ptr
  ret ptr %r
miss:
  ret ptr null
}
define internal i1 @small_keep(ptr %s, i64 %size, ptr %p) alwaysinline {
entry:
  %o = mul i64 %size, STRIDE_SMALL
  %b = add i64 %o, SMALL_AT
  %c = call i64 @get(ptr %s, i64 %b)
  %full = icmp uge i64 %c, SMALL_DEPTH
  br i1 %full, label %no, label %keep
keep:
  %pi0 = add i64 %b, 1
  %pi = add i64 %pi0, %c
  %pv = ptrtoint ptr %p to i64
  call void @put(ptr %s, i64 %pi, i64 %pv)
  %c1 = add i64 %c, 1
  call void @put(ptr %s, i64 %b, i64 %c1)
  ret i1 1
no:
  ret i1 0
}

define ptr @tg_malloc(ptr %s, i64 %size) {
entry:
  %tiny = icmp ult i64 %size, SMALL
  br i1 %tiny, label %cached, label %sized
cached:
  %q = call ptr @small_take(ptr %s, i64 %size)
  %qmiss = icmp eq ptr %q, null
  br i1 %qmiss, label %plain, label %qhit
qhit:
  ret ptr %q
sized:
  %min = call i64 @get(ptr %s, i64 2)
  %small = icmp ult i64 %size, %min
  br i1 %small, label %plain, label %big
plain:
  %r = call ptr @malloc(i64 %size)
  ret ptr %r
big:
  %key = call i64 @pagesize(i64 %size)
  %p = call ptr @take(ptr %s, i64 %key)
  %miss = icmp eq ptr %p, null
  br i1 %miss, label %new, label %hit
hit:
  ret ptr %p
new:
  call void @room(ptr %s, i64 %key)
  %n = call ptr @malloc(i64 %key)
  %failed = icmp eq ptr %n, null
  br i1 %failed, label %retry, label %ok
ok:
  ret ptr %n
retry:
  call void @tg_evict(ptr %s, i64 0)
  %n2 = call ptr @malloc(i64 %key)
  ret ptr %n2
}

define ptr @tg_calloc(ptr %s, i64 %nelem, i64 %elsize) {
entry:
  %m = call {i64, i1} @llvm.umul.with.overflow.i64(i64 %nelem, i64 %elsize)
  %size = extractvalue {i64, i1} %m, 0
  %ov = extractvalue {i64, i1} %m, 1
  br i1 %ov, label %plain, label %sized
sized:
  %tiny = icmp ult i64 %size, SMALL
  br i1 %tiny, label %cached, label %medium
cached:
  %q = call ptr @small_take(ptr %s, i64 %size)
  %qmiss = icmp eq ptr %q, null
  br i1 %qmiss, label %plain, label %qhit
qhit:
  call void @llvm.memset.p0.i64(ptr %q, i8 0, i64 %size, i1 0)
  ret ptr %q
medium:
  %min = call i64 @get(ptr %s, i64 2)
  %small = icmp ult i64 %size, %min
  br i1 %small, label %plain, label %big
plain:
  %r = call ptr @calloc(i64 %nelem, i64 %elsize)
  ret ptr %r
big:
  %key = call i64 @pagesize(i64 %size)
  %p = call ptr @take(ptr %s, i64 %key)
  %miss = icmp eq ptr %p, null
  br i1 %miss, label %new, label %hit
hit:
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %size, i1 0)
  ret ptr %p
new:
  call void @room(ptr %s, i64 %key)
  %n = call ptr @calloc(i64 1, i64 %key)
  %failed = icmp eq ptr %n, null
  br i1 %failed, label %retry, label %ok
ok:
  ret ptr %n
retry:
  call void @tg_evict(ptr %s, i64 0)
  %n2 = call ptr @calloc(i64 1, i64 %key)
  ret ptr %n2
}

; a grown or shrunk block stays a whole number of pages once it is large (so that the size it
; is later freed with never names more bytes than it has)
define ptr @tg_realloc(ptr %s, ptr %p, i64 %size) {
entry:
  %min = call i64 @get(ptr %s, i64 2)
  %small = icmp ult i64 %size, %min
  %key = call i64 @pagesize(i64 %size)
  %want = select i1 %small, i64 %size, i64 %key
  %r = call ptr @realloc(ptr %p, i64 %want)
  ret ptr %r
}

define void @tg_free(ptr %s, ptr %p, i64 %size) {
entry:
  %null = icmp eq ptr %p, null
  br i1 %null, label %done, label %some
some:
  %tiny = icmp ult i64 %size, SMALL
  br i1 %tiny, label %cached, label %sized
cached:
  %q = call i1 @small_keep(ptr %s, i64 %size, ptr %p)
  br i1 %q, label %done, label %plain
sized:
  %min = call i64 @get(ptr %s, i64 2)
  %small = icmp ult i64 %size, %min
  br i1 %small, label %plain, label %big
big:
  %key = call i64 @pagesize(i64 %size)
  %live = call i64 @get(ptr %s, i64 7)
  %l1 = sub i64 %live, %key
  %lneg = icmp slt i64 %l1, 0
  %l2 = select i1 %lneg, i64 0, i64 %l1
  call void @put(ptr %s, i64 7, i64 %l2)
  %kept = call i64 @get(ptr %s, i64 0)
  %cap = call i64 @get(ptr %s, i64 1)
  %total = add i64 %kept, %key
  %overcap = icmp ugt i64 %total, %cap
  ; kept + live stays within the high-water mark (a block grown by realloc was never counted)
  %sum = add i64 %total, %l2
  %peak = call i64 @get(ptr %s, i64 8)
  %overpeak = icmp ugt i64 %sum, %peak
  %over = or i1 %overcap, %overpeak
  br i1 %over, label %plain, label %look
look:
  %b = call i64 @find(ptr %s, i64 %key)
  %none = icmp slt i64 %b, 0
  br i1 %none, label %plain, label %slot
slot:
  %d = call i64 @get(ptr %s, i64 6)
  %ci = add i64 %b, 1
  %c = call i64 @get(ptr %s, i64 %ci)
  %full = icmp uge i64 %c, %d
  br i1 %full, label %plain, label %keep
keep:
  call void @put(ptr %s, i64 %b, i64 %key)
  %pi0 = add i64 %b, 2
  %pi = add i64 %pi0, %c
  %pv = ptrtoint ptr %p to i64
  call void @put(ptr %s, i64 %pi, i64 %pv)
  %c1 = add i64 %c, 1
  call void @put(ptr %s, i64 %ci, i64 %c1)
  call void @put(ptr %s, i64 0, i64 %total)
  br label %done
plain:
  call void @free(ptr %p)
  br label %done
done:
  ret void
}
""".replace("SMALL_AT", str(_SMALL_AT)).replace("STRIDE_SMALL", str(SMALL_DEPTH + 1)).replace(
    "SMALL_DEPTH", str(SMALL_DEPTH)).replace("SMALL", str(SMALL)).replace("HEAD", str(_HEAD))

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
    """The five functions' addresses (llvmlite's MCJIT, the process's malloc and free)."""
    import llvmlite.binding as llvm  # noqa: PLC0415  (numba's dependency; only when installing)

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libc = ctypes.CDLL(None)
    for name in ("malloc", "calloc", "realloc", "free"):
        llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
    module = llvm.parse_assembly(_IR)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _forever(engine, module, machine)
    return {name: engine.get_function_address(name) for name in _NAMES}


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
    state = np.zeros(_SMALL_AT + SMALL * (SMALL_DEPTH + 1), np.int64)
    state[1], state[2], state[5], state[6] = cap, MIN, SLOTS, DEPTH
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
    """Free every array block tapegrad keeps for reuse (see ``tapegrad/_array_cache.py``).

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
