"""A parallel twin's call of its serial kernel's machine code, by address (numba).

A parallel kernel (``chunks``) runs its serial kernel over chunks of a range. Called by name,
the serial kernel's IR is linked into the twin (and its parfor body) and optimised and emitted
again: the twin's compile costs the serial kernel's LLVM time once more (1.4-4.1 CPU s for the
generated convolutions). ``call_at`` calls the serial kernel's compiled entry point at an
address the twin takes as an argument, found once per argument kinds by ``entry`` (never
written into the twin's code: its cached machine code holds no address). Imported only when
numba is selected.
"""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .._backend import np

# the plain arguments ``call_at`` passes besides arrays (one data model, any layout); None: an
# absent array
_PLAIN = (types.int64, types.uint64, types.float32, types.float64, types.none)


@intrinsic
def call_at(typingctx: Any, fp: Any, args: Any) -> Any:
    """``f(*args)`` of the compiled kernel whose native entry point is at address ``fp``
    (numba's calling convention, no result): a twin runs its serial kernel's machine code,
    where a call by name would link the serial kernel's IR into it and optimise it again."""
    if not (isinstance(fp, types.Integer) and isinstance(args, (types.Tuple, types.UniTuple))
            and all(isinstance(a, types.Array) or a in _PLAIN for a in args.types)):
        return None
    sig = types.none(fp, args)

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        argtys = list(sig.args[1].types)
        vals = cgutils.unpack_tuple(builder, llargs[1], len(argtys))
        cc = context.call_conv
        f = builder.inttoptr(llargs[0], cc.get_function_type(types.none, argtys).as_pointer())
        status, _ = cc.call_function(builder, f, types.none, argtys, vals)
        with cgutils.if_unlikely(builder, status.is_error):
            cc.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return sig, codegen


_ENTRIES: dict[tuple[Any, ...], int] = {}
nd = np.ndarray


def entry(serial: Any, *args: Any) -> int:
    """The address of ``serial``'s compiled code for ``args``' kinds (C-contiguous arrays of a
    dtype and rank, Python ints, numpy floats, None; about 1 us a call), for ``call_at``: made (or loaded) once
    for those by the call ``serial(*args)``, which must do no work (an empty range). In the
    background compile mode that call raises ``NotReady`` until the code is there, and the
    operation's reference runs."""
    key = (serial, *[(a.dtype.char, a.ndim) if a.__class__ is nd else a.__class__ for a in args])
    fp = _ENTRIES.get(key)
    if fp is None:
        serial(*args)
        cres = serial.overloads[tuple(serial.typeof_pyval(a) for a in args)]
        fp = _ENTRIES[key] = int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))
    return fp


_BY_KEY: dict[Any, int] = {}


def entry_by(key: Any, serial: Any, *args: Any) -> int:
    """``entry(serial, *args)`` kept under the caller's ``key`` (e.g. the kernel and its dtypes,
    where the other argument kinds are fixed): a dict lookup where ``entry``'s key of every
    argument's kind, about 1 us, was a few percent of a small pass."""
    fp = _BY_KEY.get(key)
    if fp is None:
        fp = _BY_KEY[key] = entry(serial, *args)
    return fp
