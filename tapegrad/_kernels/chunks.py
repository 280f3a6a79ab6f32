"""Contiguous chunks of a range, one per thread: the one parallel form of the kernels.

A parallel kernel is its serial kernel over a range (of elements, rows, channels, samples) run
as ``prange`` over ``num_threads()`` chunks of that range, each chunk the serial kernel's
(``for i in prange(p): lo, hi = bounds(n, p, i, align)``): one thread runs it whole, sixteen
run sixteen chunks. Cuts fall on multiples of ``align`` (vector-aligned runs, or the blocks a
reduction sums in), so each element sees the serial kernel's arithmetic. Imported only when
numba is selected.
"""

from __future__ import annotations

from typing import Any

from . import jit, numba


@jit(inline="always")
def bounds(n, parts, i, align):  # type: ignore[no-untyped-def]
    """Chunk ``i`` of ``parts`` of ``range(n)``: cut at multiples of ``align``, balanced to
    within one ``align``; the last chunk ends at ``n`` (a chunk may be empty)."""
    units = n // align
    lo = units * i // parts * align
    hi = n if i == parts - 1 else units * (i + 1) // parts * align
    return lo, hi


def _intrinsics() -> tuple[Any, Any]:
    """``num_threads()`` and ``set_num_threads(n)`` for compiled code: numba's own (the calling
    thread's mask) called by symbol, where ``numba.get_num_threads`` inside a kernel would be a
    ctypes pointer, which numba cannot cache."""
    from llvmlite import ir  # noqa: PLC0415 - numba's own dependency
    from numba.core import cgutils, types  # noqa: PLC0415
    from numba.core.extending import intrinsic  # noqa: PLC0415

    nb = numba()
    assert nb is not None
    i32, intp = ir.IntType(32), cgutils.intp_t
    # declared as numba's parfors declare them (intp), the C functions take and return an int

    @intrinsic
    def num_threads(typingctx: Any) -> Any:
        nb.get_num_threads()  # starts numba's threads: the symbol is then defined

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(intp, []),
                                                "get_num_threads")
            return builder.sext(builder.trunc(builder.call(fn, []), i32), intp)

        return types.intp(), codegen

    @intrinsic
    def set_num_threads(typingctx: Any, n: Any) -> Any:
        nb.get_num_threads()

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [intp]), "set_num_threads")
            builder.call(fn, [context.cast(builder, args[0], signature.args[0], types.intp)])
            return context.get_dummy_value()

        return types.void(n), codegen

    return num_threads, set_num_threads


num_threads, set_num_threads = _intrinsics()
