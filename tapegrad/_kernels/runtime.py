"""Where compiled kernels live and when they compile: the cache folder, ``jit``, and tiered
execution (the numpy references run until a kernel's machine code is ready).

A kernel meets the compiler the first time it is called with new argument types. numba would
compile it there and then (a second to twenty seconds each; a model's first step meets dozens).
Instead, by default (``TAPEGRAD_COMPILE=background``), the call raises ``NotReady`` before
running, the dispatcher runs the primitive's numpy reference, and a compiler process beside
this one (``python -m tapegrad._kernels.compiler``, started on the first miss and fed one
request per kernel and argument types) compiles it into the on-disk cache. Once it reports the
kernel done, the next call loads the machine code from the cache (milliseconds) and runs it.
Nothing compiles in a process that will not run the result: the compiler process only compiles
what this one asked for. ``TAPEGRAD_COMPILE=wait`` compiles in the calling thread, as numba
does, so every call runs the same code from the first step: for runs whose results must be
bit-identical from one run to the next whatever the cache holds, and for tests.

The cache folder: ``TAPEGRAD_CACHE_DIR`` or ``NUMBA_CACHE_DIR`` when set, else the platform's
cache folder (``$XDG_CACHE_HOME/tapegrad``, ``~/.cache/tapegrad``; ``~/Library/Caches/tapegrad``
on macOS, ``%LOCALAPPDATA%/tapegrad`` on Windows). Inside it, kernels go to a folder named after a
digest of the kernel modules' sources: a change to any kernel module compiles every kernel afresh
(numba keys a cached function on its own file only, and kernels inline helpers from other
modules), and earlier digests' folders are removed. A folder that cannot be written costs one
line on stderr and a temporary folder for this process; a cache entry that cannot be read is
compiled again.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .registry import NotReady

HERE = Path(__file__).resolve().parent

_DIGESTS: dict[Path, str] = {}


# Modules with no compiled code: which kernel runs where, and how requests travel. Editing them
# leaves every compiled kernel valid, so they stay out of the digest (a new digest compiles
# every kernel again and removes the caches of running processes).
NOT_COMPILED = frozenset({"registry.py", "table.py", "compiler.py", "conv_table.py"})


def sources_digest(folder: Path) -> str:
    """A short digest of the ``*.py`` files in ``folder`` (names and contents) that hold
    compiled code, once a process."""
    d = _DIGESTS.get(folder)
    if d is None:
        h = hashlib.blake2b(digest_size=8)
        for f in sorted(folder.glob("*.py")):
            if f.name in NOT_COMPILED:
                continue
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        d = _DIGESTS[folder] = h.hexdigest()
    return d


def user_cache_base() -> str:
    """The platform's cache folder for tapegrad (not yet checked for writing)."""
    for var in ("TAPEGRAD_CACHE_DIR", "NUMBA_CACHE_DIR"):
        if os.environ.get(var):
            return os.environ[var]
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "tapegrad")
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return os.path.join(os.environ["LOCALAPPDATA"], "tapegrad")
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "tapegrad")


_FOLDER: dict[str, str] = {}
_PRUNED: set[str] = set()


def _writable(folder: str) -> str | None:
    """None when ``folder`` can be made and written, else why not."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    return None


def cache_dir() -> str:
    """The folder compiled kernels are cached in (made and checked once a process)."""
    if os.environ.get("TAPEGRAD_KERNEL_FOLDER"):  # the compiler process: its asker's folder
        return os.environ["TAPEGRAD_KERNEL_FOLDER"]
    base = user_cache_base()
    where = _FOLDER.get(base)
    if where is None:
        where = os.path.join(base, "kernels-" + sources_digest(HERE))
        why = _writable(where)
        if why is not None:
            var = ("TAPEGRAD_CACHE_DIR" if os.environ.get("TAPEGRAD_CACHE_DIR") else
                   "NUMBA_CACHE_DIR" if os.environ.get("NUMBA_CACHE_DIR") else None)
            fix = f"set {var} to one that can" if var else "set TAPEGRAD_CACHE_DIR to one that can"
            tmp = tempfile.mkdtemp(prefix="tapegrad-kernels-")
            atexit.register(shutil.rmtree, tmp, True)
            print(f"tapegrad: the kernel cache folder {where} cannot be written ({why}); "
                  f"compiling into {tmp} for this process only ({fix}, or "
                  "TAPEGRAD_KERNELS=numpy for no compiled kernels)", file=sys.stderr)
            where = tmp
        else:
            _prune(base, where)
        _FOLDER[base] = where
    return where


# A kernel-source folder no process has opened for this long is removed (a week: two versions in
# use side by side, an upgrade under a running program, keep theirs).
STALE_AFTER_S = 7 * 24 * 3600


def _prune(base: str, keep: str) -> None:
    """Mark ``keep`` used now and remove the caches of kernel sources no process has used for
    ``STALE_AFTER_S`` (best effort, once a process). A folder in use by another version of the
    package (another environment, a program started before an upgrade) is never removed under
    it: that process would lose the source files its kernels are cached against."""
    if keep in _PRUNED:
        return
    _PRUNED.add(keep)
    try:
        Path(keep, ".used").touch()
    except OSError:
        pass
    now = time.time()
    for old in Path(base).glob("kernels-*"):
        if str(old) == keep:
            continue
        mark = old / ".used"
        try:
            used = max(old.stat().st_mtime, mark.stat().st_mtime if mark.exists() else 0.0)
        except OSError:
            continue
        if now - used > STALE_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)


def mode() -> str:
    """``"background"`` (the default: references until compiled) or ``"wait"``."""
    m = os.environ.get("TAPEGRAD_COMPILE", "").strip().lower() or "background"
    if m not in ("background", "wait"):
        raise ValueError(
            f"TAPEGRAD_COMPILE must be 'background' or 'wait', got {os.environ['TAPEGRAD_COMPILE']!r}"
        )
    return m


# --------------------------------------------------------------------------------------------
# jit: numba.njit with the cache folder, and the tiered first call
# --------------------------------------------------------------------------------------------


_NO_CACHE: list[str] = []  # kernels compiled without the disk cache (said once a process)


def _no_cache(fn: Any, error: Exception) -> None:
    """One stderr line, the first time a kernel cannot be cached (its source file vanished
    under it, e.g. a cache folder emptied by hand while the program ran): it compiles in this
    process, without the disk cache."""
    if not _NO_CACHE:
        print(f"tapegrad: kernel {fn.__qualname__} cannot use the disk cache ({error}); "
              "compiling it in this process (set TAPEGRAD_CACHE_DIR to move the cache)",
              file=sys.stderr)
    _NO_CACHE.append(fn.__qualname__)


def jit(
    parallel: bool = False, fastmath: Any = False, signatures: Any = None, inline: str = "never",
    ieee: bool = False,
) -> Any:
    """``numba.njit(cache=True, ...)`` with tapegrad's cache folder (for kernel modules);
    ``signatures`` compiles those up front (a recursive function needs them);
    ``inline="always"`` inlines a small helper into its callers; ``ieee``: division as numpy's (inf or NaN, no ZeroDivisionError
    check, which keeps LLVM from vectorising a loop that divides). The compiler process finds a
    kernel by its module and name: a kernel that is not a module-level name of an importable
    module (generated source) declares its ``signatures``, which compile here, on creation."""
    from . import numba  # noqa: PLC0415 - decided once, imported with the first kernel module

    nb = numba()
    assert nb is not None, "kernel modules are imported only when numba is selected"
    from numba.core import sigutils, typeinfer  # noqa: PLC0415

    def deco(fn: Any) -> Any:
        where = cache_dir()
        config = nb.core.config
        opts: dict[str, Any] = {"cache": True, "parallel": parallel, "fastmath": fastmath,
                                "nogil": True, "inline": inline}
        if ieee or signatures is not None:
            opts["error_model"] = "numpy"
        # a helper inlined into its callers compiles with them; declared signatures compile
        # up front here (small, recursive (typing needs them), or generated)
        lazy = inline != "always" and signatures is None
        # numba reads its cache folder from a global, twice while attaching a cache (a check,
        # then the path): one thread at a time sets and restores it, or a thread restoring an
        # empty folder between another's two reads made that one's cache a relative path (a
        # folder in the working directory). Making a dispatcher compiles nothing: quick.
        with _CONFIG_LOCK:
            old = config.CACHE_DIR
            config.CACHE_DIR = where  # read when the cache is attached, just below
            try:
                try:
                    disp = nb.njit(**opts)(fn)
                except RuntimeError as e:  # numba's cache cannot locate the source file
                    _no_cache(fn, e)
                    opts["cache"], lazy = False, False  # compiled in this process, on first call
                    disp = nb.njit(**opts)(fn)
            finally:
                config.CACHE_DIR = old
        if signatures is not None and not lazy:
            # as numba's njit(signatures): known to typing before its name is bound (a
            # recursive kernel calls itself), those types and no others
            with typeinfer.register_dispatcher(disp):
                for sig in signatures:
                    if _load(disp, tuple(sigutils.normalize_signature(sig)[0])) is None:
                        disp.compile(sig)
                disp.disable_compile()
            return disp
        if lazy:
            _tier(disp, f"{fn.__module__}:{fn.__qualname__}")
        return disp

    return deco


_CONFIG_LOCK = threading.Lock()  # numba's config.CACHE_DIR, set around a dispatcher's making
_PENDING, _DONE, _FAILED = "pending", "done", "failed"
_status: dict[tuple[Any, tuple[Any, ...]], str] = {}


def _tier(disp: Any, target: str) -> None:
    """Route ``disp``'s first call for new argument types through ``_first_call``;
    ``target`` (``module:name``) is how the compiler process finds it."""
    compile_for_args = disp._compile_for_args  # numba's C dispatcher looks it up on the object

    def first_call(*args: Any, **kws: Any) -> Any:
        return _first_call(disp, compile_for_args, target, args, kws)

    disp._compile_for_args = first_call


def _first_call(disp: Any, compile_for_args: Any, target: str, args: tuple[Any, ...],
                kws: dict[str, Any]) -> Any:
    """The entry point for ``args``' types: from memory or the cache when there, else
    ``NotReady`` while the compiler process works on it (compiled here in the ``wait`` mode,
    or when that process failed)."""
    if kws:
        return compile_for_args(*args, **kws)
    types = tuple(disp.typeof_pyval(a) for a in args)
    key = (disp, types)
    state = _status.get(key)
    if state == _PENDING:
        raise NotReady(disp.__name__)
    if state != _FAILED:
        background = mode() == "background"
        entry = _load(disp, types, wait=not background)
        if entry is _BUSY:  # this process is compiling another kernel: never wait for it
            raise NotReady(disp.__name__)
        if entry is not None:
            _status[key] = _DONE
            return entry
        if state is None and background and _compiler.submit(target, types, key):
            _status[key] = _PENDING
            raise NotReady(disp.__name__)
    with compile_lock(disp, types):  # another process may be compiling it: then load its work
        entry = _load(disp, types)
        if entry is None:
            entry = compile_for_args(*args)
            COMPILED.append(f"{disp.py_func.__qualname__}{types}")
        return entry


COMPILED: list[str] = []  # the kernels this process compiled itself (not loaded), in order


@contextlib.contextmanager
def compile_lock(disp: Any, types: tuple[Any, ...]) -> Iterator[None]:
    """Hold the cache folder's lock for one kernel and argument types (POSIX ``flock``), so
    that processes sharing the cache (test workers, MPI ranks, their compiler processes) compile
    each kernel once: the second to come waits, then loads the first's work."""
    try:
        import fcntl  # noqa: PLC0415 - POSIX; elsewhere each process compiles for itself
    except ImportError:
        yield
        return
    name = hashlib.blake2b(
        f"{disp.py_func.__module__}:{disp.py_func.__qualname__}:{types}".encode(), digest_size=10
    ).hexdigest()
    folder = os.path.join(cache_dir(), "locks")
    try:
        os.makedirs(folder, exist_ok=True)
        f = open(os.path.join(folder, name), "a+b")  # noqa: SIM115 - held across the yield
    except OSError:
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_WARNED: set[str] = set()


_BUSY = object()  # _load's answer when numba's compiler lock is held and it may not wait


def _load(disp: Any, types: tuple[Any, ...], wait: bool = True) -> Any:
    """The entry point for ``types`` from memory or the disk cache, or None (never compiles);
    ``_BUSY`` when not ``wait`` and another thread holds numba's compiler lock. An entry that
    cannot be read is removed (one line on stderr), so that it compiles again."""
    from numba.core.compiler_lock import global_compiler_lock  # noqa: PLC0415

    lock = global_compiler_lock._lock
    if not lock.acquire(blocking=wait):
        return _BUSY
    try:
        existing = disp.overloads.get(types)
        if existing is not None:
            return existing.entry_point
        try:
            cres = disp._cache.load_overload(types, disp.targetctx)
        except Exception as e:  # noqa: BLE001 - a corrupt or foreign file: compile again
            _forget(disp, e)
            return None
        if cres is None:
            return None
        if not cres.objectmode:
            disp.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        disp.add_overload(cres)
        return cres.entry_point
    finally:
        lock.release()


def _forget(disp: Any, why: Exception) -> None:
    """Remove ``disp``'s unreadable cache index (its entries then compile and save afresh)."""
    index = getattr(getattr(disp._cache, "_cache_file", None), "_index_path", None)
    if index:
        with contextlib.suppress(OSError):
            os.unlink(index)
    folder = cache_dir()
    if folder not in _WARNED:
        _WARNED.add(folder)
        print(f"tapegrad: a kernel cache entry in {folder} could not be read "
              f"({type(why).__name__}); compiling it again (TAPEGRAD_CACHE_DIR moves the cache)",
              file=sys.stderr)


class _Compiler:
    """The client of the compiler process: requests go down its stdin, one line each; a reader
    thread marks each kernel done (or failed: then it compiles here on its next call)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.waiting: dict[int, Any] = {}
        self.next_id = 0
        self.idle = threading.Condition(self.lock)

    def _start(self) -> bool:
        env = dict(os.environ, TAPEGRAD_COMPILE="wait", TAPEGRAD_KERNEL_FOLDER=cache_dir())
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tapegrad._kernels.compiler"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                cwd=os.path.dirname(os.path.dirname(str(HERE))),
            )
        except OSError:
            self.proc = None
            return False
        self.pid = os.getpid()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True,
                         name="tapegrad-compiler").start()
        return True

    def submit(self, target: str, types: tuple[Any, ...], key: Any) -> bool:
        """Ask for ``types`` of the kernel ``target`` (``module:name``); False when no process
        can."""
        with self.lock:
            if self.pid != os.getpid() or self.proc is None or self.proc.poll() is not None:
                if self.pid == os.getpid() and self.proc is not None:
                    return False  # it died: compile here from now on
                if not self._start():
                    return False
            assert self.proc is not None and self.proc.stdin is not None
            rid = self.next_id
            self.next_id += 1
            try:
                line = base64.b64encode(pickle.dumps((rid, target, types)))
                self.proc.stdin.write(line + b"\n")
                self.proc.stdin.flush()
            except Exception:  # noqa: BLE001 - an unpicklable type or a closed pipe
                return False
            self.waiting[rid] = key
            return True

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            rid_text, _, ok = line.decode().partition(" ")
            with self.lock:
                key = self.waiting.pop(int(rid_text), None)
                if key is not None:
                    _status[key] = _DONE if ok.strip() == "ok" else _FAILED
                if not self.waiting:
                    self.idle.notify_all()
        with self.lock:  # the process ended: what it still had compiles in the callers
            for key in self.waiting.values():
                _status[key] = _FAILED
            self.waiting.clear()
            self.idle.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every request so far is done; False on timeout."""
        with self.lock:
            return self.idle.wait_for(lambda: not self.waiting, timeout)

    def busy(self) -> int:
        """How many requests are waiting."""
        with self.lock:
            return len(self.waiting)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and self.pid == os.getpid():
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
            proc.terminate()  # numba writes cache entries atomically: a stop loses nothing


_compiler = _Compiler()
atexit.register(_compiler.close)


def wait_compiled(timeout: float | None = None) -> bool:
    """Block until the compiler process has finished every kernel asked of it so far (True),
    or ``timeout`` seconds passed (False); the next calls then run compiled code."""
    return _compiler.wait(timeout)


def compiling() -> int:
    """How many kernels the compiler process is still working on."""
    return _compiler.busy()


def text_digest(text: str) -> str:
    """A short digest of generated source (blake2b, as ``sources_digest``): the name of the
    file it is written to in the cache folder, for generators outside the kernel modules."""
    return hashlib.blake2b(text.encode(), digest_size=10).hexdigest()
