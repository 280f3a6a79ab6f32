"""The kernel registry: compiled alternatives to primitives' numpy references, and the one
dispatcher that picks among them.

A primitive keeps its numpy forward (and VJP) as the reference and asks the dispatcher for the
work: ``dispatch(op, reference, *args)``. Kernel alternatives for a named operation
(``"softmax"``, ``"softmax_grad"``, ...) are declared with ``register`` in one table
(``table.py``, imported on the first dispatch): a ``fits(*args)`` that is cheap and imports
nothing heavy, and a ``run`` given as ``"module:function"`` in this package, imported on first
use (so ``import tapegrad`` never imports numba). ``fits`` and ``run`` take the reference's
arguments. The first alternative that fits (and that its hand threshold ``prefer``, when
given, accepts) runs; when none does, or when the one chosen raises ``NotReady`` (its machine
code is still compiling in the background), the reference runs. ``TAPEGRAD_KERNELS=numpy`` (or
numba missing) leaves the table unused: every call takes its reference.

Selection by measurement (``tunable``): for an operation declared tunable, the first call
with a new key (the operation, each argument's shape, dtype and strides, the other arguments'
values, the kernels' thread count) where more than one alternative fits (the reference counts
when declared a real alternative) times those whose machine code is ready, a few runs each
within ``TUNE_BUDGET`` (longer for a close call), and keeps the fastest: for the process, and in a small table on disk
beside the compiled kernels (``tuning.py``: keyed by the CPU, its ISA and numpy's BLAS), so a
later run on the same machine takes the same kernel for the same inputs without timing. An
alternative still compiling is skipped and the key timed again once it is ready (at most every
``RETUNE_AFTER`` seconds while any is missing); nothing waits for a compiler. Operations that
write into arrays they are given are never declared tunable. ``TAPEGRAD_TUNE=0`` turns the
measuring off: the hand thresholds (``prefer``) decide.

The same dispatcher serves a primitive's forward, backward on arrays and ``tg.compile``'s
replay, so all three run the same code for the same inputs. A gradient operation whose
reference is written against ``xp`` takes ``xp`` first; on Tensors (an outer tape recording
backward) no kernel fits, so the reference runs and is recorded.

A ``run`` that updates arrays its caller passed in (an optimizer's step, running statistics)
must raise ``NotReady`` before its first write, so that the reference then starts from the
caller's untouched arrays.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["NotReady", "Impl", "SMALLEST", "register", "tunable", "dispatch", "implementations", "tuning"]


class NotReady(Exception):  # noqa: N818 - a signal, not an error
    """A compiled kernel's machine code for these argument types is not ready yet (it is being
    compiled in the background). Raised before the kernel runs, so nothing has been written."""


class Impl:
    """One alternative for an operation: ``fits(*args)`` says whether it covers the call;
    ``prefer(*args)`` (None: always) whether the hand thresholds choose it when nothing is
    measured; ``run(*args)`` calls the function ``target`` names (``"module:function"`` under
    ``tapegrad._kernels``), looked up in its module at each call (so that a test may wrap it)."""

    __slots__ = ("op", "name", "fits", "prefer", "target", "_module", "_fn")

    def __init__(self, op: str, name: str, fits: Callable[..., bool], target: str,
                 prefer: Callable[..., bool] | None = None) -> None:
        self.op, self.name, self.fits, self.target, self.prefer = op, name, fits, target, prefer
        self._module: Any = None
        self._fn = target.split(":")[1]

    def load(self) -> Callable[..., Any]:
        """The function ``target`` names (importing its kernel module on first use)."""
        if self._module is None:
            self._module = importlib.import_module(f"tapegrad._kernels.{self.target.split(':')[0]}")
        return getattr(self._module, self._fn)

    def run(self, *args: Any) -> Any:
        module = self._module
        if module is None:
            return self.load()(*args)
        return getattr(module, self._fn)(*args)

    def __repr__(self) -> str:
        return f"Impl({self.op!r}, {self.name!r}, {self.target!r})"


_TABLE: dict[str, list[Impl]] = {}
# operations chosen by measurement: op -> whether its reference is one of the alternatives
_TUNABLE: dict[str, bool] = {}
# the table dispatch reads: None until the first dispatch, then _TABLE (kernels selected) or
# an empty dict (TAPEGRAD_KERNELS=numpy, numba missing)
_ACTIVE: list[dict[str, list[Impl]] | None] = [None]
REFERENCE = "reference"  # the name a measured choice gives the reference


# op -> the fewest elements of the first argument that an implementation of it takes (0 where
# one declares no ``min_size``): a caller of a small hot op (an SGD step on a bias, a ReLU)
# runs the reference itself below it, without the dispatcher's frame and the ``fits`` calls
SMALLEST: dict[str, int] = {}


def register(op: str, name: str, fits: Callable[..., bool], run: str,
             prefer: Callable[..., bool] | None = None, min_size: int = 0) -> Impl:
    """Declare ``run`` (``"module:function"``) as an implementation of ``op`` where ``fits``;
    where nothing is measured, implementations registered earlier are preferred, each only
    where its ``prefer`` (a hand threshold, None: everywhere it fits) holds. ``min_size``:
    ``fits`` is false whenever the first argument has fewer elements (``SMALLEST``)."""
    if ":" not in run:
        raise ValueError(f"register({op!r}, {name!r}): run must be 'module:function', got {run!r}")
    if name == REFERENCE:
        raise ValueError(f"register({op!r}, {name!r}): {REFERENCE!r} names the reference")
    impl = Impl(op, name, fits, run, prefer)
    _TABLE.setdefault(op, []).append(impl)
    SMALLEST[op] = min(SMALLEST.get(op, min_size), min_size)  # a refused one opens no gate
    return impl


def tunable(op: str, reference: bool = False) -> None:
    """Choose ``op``'s implementation by measurement where several fit (``reference``: its
    numpy reference is one of them). Never for an operation that writes into its arguments;
    its implementations' ``fits`` may read only what ``key`` holds (shapes, dtypes, strides,
    numbers, tuples of them, the thread count), since a kept choice is not checked again."""
    _TUNABLE[op] = reference


def _activate() -> dict[str, list[Impl]]:
    from . import numba, table  # noqa: F401, PLC0415 - once: the table's registrations

    active = _TABLE if numba() is not None else {}
    _ACTIVE[0] = active
    return active


def implementations(op: str | None = None) -> list[Impl]:
    """The registered implementations (of one operation, or all), in dispatch order."""
    from . import table  # noqa: F401, PLC0415 - the registrations

    if op is not None:
        return list(_TABLE.get(op, ()))
    return [impl for impls in _TABLE.values() for impl in impls]


def dispatch(op: str, reference: Callable[..., Any], *args: Any) -> Any:
    """Run the implementation of ``op`` chosen for the arguments (measured, or the first that
    fits and is preferred), else (or while its machine code is compiling) ``reference(*args)``.

    >>> from tapegrad._kernels.registry import dispatch
    >>> dispatch("no such operation", max, 2, 3)
    3
    """
    active = _ACTIVE[0]
    impls = (active if active is not None else _activate()).get(op)
    if impls:
        if op in _TUNABLE and (tuning() if _TUNE[0] is None else _TUNE[0]):
            return _measured(op, impls, reference, args)
        for impl in impls:
            if impl.fits(*args) and (impl.prefer is None or impl.prefer(*args)):
                try:
                    return impl.run(*args)
                except NotReady:
                    break
    return reference(*args)


# --------------------------------------------------------------------------------------------
# selection by measurement
# --------------------------------------------------------------------------------------------

# seconds of repeated runs per key, shared by its alternatives: at 4 ms, kernels of about half a
# millisecond (CLIP's convolutions at two threads) got two timed runs each and kept a different
# winner from one run of the program to the next
TUNE_BUDGET = 0.02
TUNE_REPEATS = 7  # timed runs of one alternative at most (after the first, untimed)
TUNE_ROUNDS = 2  # timed runs of each alternative at least, past the budget where needed
# a close call (the runner-up within TUNE_CLOSE of the best) runs on up to TUNE_CLOSE_BUDGET
# seconds: with 20 ms, DCGAN's 25 ms convolution passes (ngf 64) got two timed runs each, and
# one noisy pair kept a strategy at 28.8 ms where another ran 24.6
TUNE_CLOSE = 1.2
TUNE_CLOSE_BUDGET = 0.25
TUNE_MARGIN = 0.9  # another implementation replaces the hand thresholds' choice when faster than this
RETUNE_AFTER = 0.5  # seconds between measurements of a key while an alternative compiles
_TUNE: list[bool | None] = [None]  # TAPEGRAD_TUNE, read once
# key -> (the chosen name, whether final, when measured); final choices are in the table too
_CHOSEN: dict[tuple[Any, ...], tuple[str, bool, float]] = {}


def tuning() -> bool:
    """Whether tunable operations are chosen by measurement (``TAPEGRAD_TUNE``, default on).

    >>> from tapegrad._kernels.registry import tuning
    >>> isinstance(tuning(), bool)
    True
    """
    on = _TUNE[0]
    if on is None:
        v = os.environ.get("TAPEGRAD_TUNE", "").strip()
        if v not in ("", "0", "1"):
            raise ValueError(f"TAPEGRAD_TUNE must be '0' or '1', got {os.environ['TAPEGRAD_TUNE']!r}")
        on = _TUNE[0] = v != "0"
    return on


def _sig(a: Any) -> Any:
    """What of one argument the choice depends on: an array's shape, dtype and strides (its
    layout), a number's or a geometry's value."""
    t = type(a)
    if t.__name__ == "ndarray":  # numpy's or CuPy's (told apart by the module)
        return (t.__module__, a.shape, a.dtype.str, a.strides)
    if a is None or t in (int, float, bool, str):
        return a
    if isinstance(a, tuple):
        try:
            hash(a)  # numbers and tuples of them (a geometry): the value itself
        except TypeError:  # arrays inside
            return tuple(_sig(v) for v in a)
        return a
    return t.__name__


_THREADS: list[Any] = []  # the threads module, imported on first use
_NDARRAY = np.ndarray


def threads_module() -> Any:
    """The kernels' ``threads`` module, imported on first use (it imports numba, which the
    registry and the table must not at their import); kept here, not `from . import` at each
    call: a Python-level import step per call, on hot paths."""
    if not _THREADS:
        from . import threads  # noqa: PLC0415

        _THREADS.append(threads)
    return _THREADS[0]


def _threads() -> tuple[int, bool]:
    threads = _THREADS[0] if _THREADS else threads_module()  # no frame once imported
    return threads.count(), threads.active()


def key(op: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The key a measured choice is kept under: the operation, the kernels' thread count (and
    whether numpy's BLAS shares their pool), each argument's ``_sig``."""
    sig: list[Any] = []
    for a in args:  # _sig written out for numpy arrays and None: no frame each
        if a.__class__ is _NDARRAY:
            sig.append(("numpy", a.shape, a.dtype.str, a.strides))
        else:
            sig.append(None if a is None else _sig(a))
    return (op, _threads(), tuple(sig))


def _measured(op: str, impls: list[Impl], reference: Callable[..., Any],
              args: tuple[Any, ...]) -> Any:
    k = key(op, args)
    chosen = _CHOSEN.get(k)
    if chosen is None:
        name = _disk().get(repr(k))
        if name is not None:
            chosen = _CHOSEN[k] = (name, True, 0.0)
    if chosen is not None and (chosen[1] or time.monotonic() - chosen[2] < RETUNE_AFTER):
        if chosen[0] == REFERENCE:
            return reference(*args)
        for impl in impls:
            if impl.name == chosen[0]:  # it fits: fits reads only what the key holds
                try:
                    return impl.run(*args)
                except NotReady:
                    return reference(*args)
        # a table naming an implementation this version lacks: measure again
    fit = [impl for impl in impls if impl.fits(*args)]
    with_ref = _TUNABLE[op]
    if len(fit) + with_ref < 2:  # one candidate (or none): nothing to measure
        name = fit[0].name if fit and (with_ref or fit[0].prefer is None
                                       or fit[0].prefer(*args)) else REFERENCE
        _CHOSEN[k] = (name, True, 0.0)  # for the process; the table holds measurements only
        return _measured(op, impls, reference, args)
    return _tune(k, fit, reference if with_ref else None, reference, args)


def _clock(k: tuple[Any, ...]) -> Callable[[], float]:
    """What a measurement of key ``k`` reads: on one thread the process's CPU time, which the
    time other programs hold the core does not add to (a machine shared with other work), else
    the wall clock (threads working side by side are what makes a parallel kernel faster)."""
    return time.process_time if k[1][0] == 1 else time.perf_counter


def _close(score: dict[str, float]) -> bool:
    """Whether the two fastest so far are within ``TUNE_CLOSE`` of each other."""
    if len(score) < 2:
        return False
    a, b = sorted(score.values())[:2]
    return b <= a * TUNE_CLOSE


def _tune(k: tuple[Any, ...], fit: list[Impl], ref_alt: Callable[..., Any] | None,
          reference: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Time the ready candidates for key ``k``, keep the fastest, and return its result. The
    hand thresholds' choice runs first and keeps the key unless another is faster by more than
    ``TUNE_MARGIN`` (timing noise on a busy machine does not move it).

    Each candidate's first run may compile or load its kernel (a per-shape kernel's first call
    on a new shape) and never scores. Then the candidates run in rounds, one run each in turn
    (the order rotating), each keeping its fastest run: at least TUNE_ROUNDS rounds, more
    while the budget lasts (TUNE_BUDGET, or TUNE_CLOSE_BUDGET while the two fastest are within
    TUNE_CLOSE of each other), at most TUNE_REPEATS; one slower than twice the best drops out.
    Taking turns, a burst of other load on the machine slows all of them, not one."""
    preferred = [i for i in fit if i.prefer is None or i.prefer(*args)]
    cands: list[tuple[str, Callable[..., Any]]] = [(i.name, i.run) for i in preferred]
    cands += [(i.name, i.run) for i in fit if i not in preferred]
    if ref_alt is not None:
        cands.insert(len(preferred) if preferred else 0, (REFERENCE, ref_alt))
    default = cands[0][0]
    missing = False
    ready: list[tuple[str, Callable[..., Any]]] = []
    for name, run in cands:
        try:
            run(*args)
        except NotReady:
            missing = True
            continue
        ready.append((name, run))
    if not ready:  # every kernel compiling, the reference not among them
        _CHOSEN[k] = (REFERENCE, False, time.monotonic())
        return reference(*args)
    score: dict[str, float] = {}
    best: tuple[float, str, Any] | None = None
    spent = 0.0
    clock = _clock(k)
    for r in range(TUNE_REPEATS):
        if r >= TUNE_ROUNDS and spent > (TUNE_CLOSE_BUDGET if _close(score) else TUNE_BUDGET):
            break
        turn = ready[r % len(ready):] + ready[:r % len(ready)]
        for name, run in turn:
            t0 = clock()
            out = run(*args)
            dt = clock() - t0
            spent += dt
            t = min(score.get(name, dt), dt * TUNE_MARGIN if name == default else dt)
            score[name] = t
            if best is None or t < best[0]:
                best = (t, name, out)
            del out
        low = min(score.values())
        ready = [(n, f) for n, f in ready if score[n] <= 2 * low]
        if len(ready) == 1:
            break
    assert best is not None
    _CHOSEN[k] = (best[1], not missing, time.monotonic())
    if not missing:
        _remember(repr(k), best[1])
    return best[2]


# --------------------------------------------------------------------------------------------
# the per-machine table on disk
# --------------------------------------------------------------------------------------------

_DISK: dict[str, Any] = {}  # "entries": the loaded table, "path": its file, "machine"
_WARNED: set[str] = set()  # tables found unreadable (said once)


def machine() -> dict[str, str]:
    """What a measured choice depends on besides its arguments: the CPU's model, the ISA numba
    compiles for, numpy and its BLAS build (found once a process)."""
    found = _DISK.get("machine")
    if found is not None:
        return dict(found)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    cpu, isa = platform.machine(), ""
    with contextlib.suppress(Exception):
        import llvmlite.binding as ll  # noqa: PLC0415 - numba's, present when kernels run

        cpu = ll.get_host_cpu_name()
        isa = ",".join(sorted(f[1:] for f in ll.get_host_cpu_features().flatten().split(",")
                              if f.startswith("+")))
    import numpy  # noqa: PLC0415

    blas = ""
    with contextlib.suppress(Exception):
        dep = numpy.__config__.CONFIG["Build Dependencies"]["blas"]
        blas = f"{dep.get('name')} {dep.get('version')}"
    found = _DISK["machine"] = {"cpu": f"{model} ({cpu})", "isa": isa,
                                "numpy": numpy.__version__, "blas": blas}
    return dict(found)


def table_path() -> str:
    """The file this machine's measured choices are kept in, in the kernel cache folder."""
    path = _DISK.get("path")
    if path is None:
        from .runtime import cache_dir  # noqa: PLC0415

        digest = hashlib.blake2b(json.dumps(machine(), sort_keys=True).encode(),
                                 digest_size=8).hexdigest()
        path = _DISK["path"] = os.path.join(cache_dir(), f"tuning-{digest}.json")
    return str(path)


def _read(path: str) -> dict[str, str]:
    """The entries of the table at ``path`` ({} when absent; unreadable: {} and one stderr
    line)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        entries = data["entries"]
        if not (isinstance(entries, dict)
                and all(isinstance(v, str) for v in entries.values())):
            raise ValueError("entries are not names")
        return dict(entries)
    except FileNotFoundError:
        return {}
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: measure afresh
        if path in _WARNED:
            return {}
        _WARNED.add(path)
        print(f"tapegrad: the kernel tuning table {path} could not be read "
              f"({type(e).__name__}); ignoring it (the choices are measured again)",
              file=sys.stderr)
        return {}


def _disk() -> dict[str, str]:
    """This machine's table, loaded once a process."""
    entries = _DISK.get("entries")
    if entries is None:
        entries = _DISK["entries"] = _read(table_path())
    return entries  # type: ignore[no-any-return]


def _remember(k: str, name: str) -> None:
    """Add a measured choice to the table on disk: the file as it is now (another process may
    have added to it) with this entry, written to a temporary file and renamed over it."""
    entries = _disk()
    entries[k] = name
    path = table_path()
    merged = {**entries, **_read(path), k: name}
    entries.update(merged)
    body = json.dumps({"machine": machine(), "entries": merged}, indent=0, sort_keys=True)
    with contextlib.suppress(OSError):  # a read-only cache: the choice holds for the process
        fd, tmp = tempfile.mkstemp(prefix=".tuning-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
