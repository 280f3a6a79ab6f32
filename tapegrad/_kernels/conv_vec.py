"""Vector blocks for the register-blocked convolution kernels (``conv_blocked``): numba types
and intrinsics that hold a block's sums in LLVM vectors.

numba has no register arrays: an array of sums lives in memory, and a loop over it does a load
and a store per multiply-add. Here a block's sums are one value, a tuple of rows of ``OB``
output channels' sums, each an LLVM vector (``Row``), that the intrinsics load, update,
transpose and store a block a call; SROA keeps them in registers. ``conv_blocked``'s generated
kernels import them from here. Imported only when numba is selected.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir as llir
from numba import types
from numba.extending import intrinsic, models, register_model

OB = 16  # output channels per block (one AVX-512 register of float32, two of AVX2)


# A block's sums are one value: a tuple of k rows (pixels or input channels), each the OB
# output channels' sums as one LLVM vector (``Row``), which the intrinsics below load, update
# and store a block a call. numba then types and lowers a handful of calls a block, where a
# statement a sum (as the kernels were first written, scalars for LLVM's SLP vectorizer to pack)
# made them 4,400-16,800 bytecode instructions and 6-20 s of CPU to compile each; LLVM, given the
# vectors, no longer searches for them. Each sum takes the same operations in the same order
# (``a + x * w``, fused to one multiply-add under the kernels' ``contract`` flag, which their
# float operations take): the results are those of the scalar code bit for bit. Indices are
# element offsets into 1-d C-contiguous arrays, unchecked, as the kernels' own indexing is.
class Row(types.Type):
    """OB values of ``dtype`` in one LLVM vector."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype
        super().__init__(name=f"Row({dtype} x {OB})")


@register_model(Row)
class _RowModel(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        be = llir.VectorType(dmm.lookup(fe_type.dtype).get_value_type(), OB)
        super().__init__(dmm, fe_type, be)


def _is_block(t: Any) -> bool:
    return isinstance(t, types.UniTuple) and isinstance(t.dtype, Row)


def _flat(arr: Any) -> bool:
    return isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"


def _ints(*ts: Any) -> bool:
    return all(isinstance(t, types.Integer) for t in ts)


def _addr(context: Any, builder: Any, sig: Any, args: Any, n: int) -> Any:
    """The data pointer of array argument 0 and integer arguments 1 .. n - 1 as intp."""
    data = context.make_array(sig.args[0])(context, builder, args[0]).data
    return data, [context.cast(builder, args[i], sig.args[i], types.intp) for i in range(1, n)]


def _elem(context: Any, builder: Any, data: Any, *terms: Any) -> Any:
    """The address of element ``sum(terms)`` (each a value or a (value, constant) product)."""
    at = None
    for t in terms:
        if isinstance(t, tuple) and t[1] == 0:
            continue
        v = builder.mul(t[0], context.get_constant(types.intp, t[1])) if isinstance(t, tuple) else t
        at = v if at is None else builder.add(at, v)
    return builder.gep(data, [at if at is not None else context.get_constant(types.intp, 0)],
                       inbounds=True)


def _splat(builder: Any, vt: Any, x: Any) -> Any:
    v = builder.insert_element(llir.Constant(vt, llir.Undefined), x, llir.Constant(llir.IntType(32), 0))
    return builder.shuffle_vector(v, llir.Constant(vt, llir.Undefined),
                                  llir.Constant(llir.VectorType(llir.IntType(32), OB), [0] * OB))


def _vload(context: Any, builder: Any, vt: Any, ptr: Any, dtype: Any) -> Any:
    align = context.get_abi_sizeof(context.get_data_type(dtype))
    return builder.load(builder.bitcast(ptr, vt.as_pointer()), align=align, typ=vt)


def _vstore(context: Any, builder: Any, v: Any, ptr: Any, dtype: Any) -> None:
    align = context.get_abi_sizeof(context.get_data_type(dtype))
    builder.store(v, builder.bitcast(ptr, v.type.as_pointer()), align=align)


@intrinsic
def row_zero(typingctx: Any, z: Any) -> Any:
    """A row of OB copies of ``z``."""
    sig = Row(z)(z)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return _splat(builder, context.get_value_type(sig.return_type), args[0])

    return sig, codegen


@intrinsic
def row_load(typingctx: Any, arr: Any, at: Any) -> Any:
    """``arr[at : at + OB]`` as a row."""
    if not (_flat(arr) and _ints(at)):
        return None
    sig = Row(arr.dtype)(arr, at)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at,) = _addr(context, builder, sig, args, 2)
        vt = context.get_value_type(sig.return_type)
        return _vload(context, builder, vt, _elem(context, builder, data, at), sig.args[0].dtype)

    return sig, codegen


def _fma(context: Any, builder: Any, sig: Any, acc: Any, w: Any, x: Any) -> Any:
    """Row i of ``acc`` plus ``x(i)``'s value times the row ``w`` (``a += x * w`` for each)."""
    vt = w.type
    rows = [builder.fadd(builder.extract_value(acc, i),
                         builder.fmul(_splat(builder, vt, builder.load(x(i))), w))
            for i in range(sig.return_type.count)]
    return context.make_tuple(builder, sig.return_type, rows)


@intrinsic
def block_fma(typingctx: Any, arr: Any, at: Any, step: Any, acc: Any, w: Any) -> Any:
    """``acc[i] + arr[at + i * step] * w`` for each row i of ``acc``."""
    if not (_flat(arr) and _ints(at, step) and _is_block(acc) and acc.dtype == w
            and w.dtype == arr.dtype):
        return None
    sig = acc(arr, at, step, acc, w)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, step) = _addr(context, builder, sig, args, 3)
        return _fma(context, builder, sig, args[3], args[4],
                    lambda i: _elem(context, builder, data, at, (step, i)))

    return sig, codegen


@intrinsic
def block_fma2(typingctx: Any, arr: Any, at: Any, step: Any, rowstep: Any, acc: Any,
               w: Any) -> Any:
    """``block_fma`` for a block of two rows of pixels: pixel i (of k) at ``at + (i // (k //
    2)) * rowstep + (i % (k // 2)) * step``."""
    if not (_flat(arr) and _ints(at, step, rowstep) and _is_block(acc) and acc.dtype == w
            and w.dtype == arr.dtype and acc.count % 2 == 0):
        return None
    sig = acc(arr, at, step, rowstep, acc, w)
    h = acc.count // 2

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, step, rowstep) = _addr(context, builder, sig, args, 4)
        return _fma(context, builder, sig, args[4], args[5], lambda i: _elem(
            context, builder, data, at, (rowstep, i // h), (step, i % h)))

    return sig, codegen


@intrinsic
def block_shift(typingctx: Any, acc: Any, row: Any) -> Any:
    """``acc[i] + row`` for each row i of ``acc``."""
    if not (_is_block(acc) and acc.dtype == row):
        return None
    sig = acc(acc, row)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        rows = [builder.fadd(builder.extract_value(args[0], i), args[1])
                for i in range(sig.return_type.count)]
        return context.make_tuple(builder, sig.return_type, rows)

    return sig, codegen


@intrinsic
def block_put(typingctx: Any, arr: Any, at: Any, step: Any, stride: Any, acc: Any) -> Any:
    """``arr[at + i * step + j * stride] = acc[i][j]`` for each row i and channel j."""
    if not (_flat(arr) and _ints(at, step, stride) and _is_block(acc)
            and acc.dtype.dtype == arr.dtype):
        return None
    sig = types.none(arr, at, step, stride, acc)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, step, stride) = _addr(context, builder, sig, args, 4)
        for i in range(sig.args[4].count):
            row = builder.extract_value(args[4], i)
            for j in range(OB):
                builder.store(builder.extract_element(row, llir.Constant(llir.IntType(32), j)),
                              _elem(context, builder, data, at, (step, i), (stride, j)))
        return context.get_dummy_value()

    return sig, codegen


def _riffle(builder: Any, regs: list[Any], flip: Any) -> list[Any]:
    """One round of interleaving: each vector of ``regs`` (a vector, its lanes' labels) whose
    lane 0 is the lower of a pair (``flip(label)`` is its partner's lane-0 label, or None when
    it is the upper) with that partner, lane by lane: the low halves' lanes into one vector,
    the high halves' into another (a two-source permute each)."""
    i32 = llir.IntType(32)
    out = []
    for a, la in regs:
        want = flip(la[0])
        if want is None:
            continue
        b, lb = next((v, lv) for v, lv in regs if lv[0] == want)
        for half in (0, OB // 2):
            mask = [m for q in range(half, half + OB // 2) for m in (q, OB + q)]
            v = builder.shuffle_vector(a, b, llir.Constant(llir.VectorType(i32, OB), mask))
            out.append((v, [(la + lb)[m] for m in mask]))
    return out


def _transpose(builder: Any, rows: list[Any]) -> list[tuple[Any, list[tuple[int, int]]]]:
    """``k`` rows (a power of two up to OB) of OB values, value (i, j) at row i, lane j, as
    vectors whose runs of ``k`` lanes each hold one j's values for i = 0 .. k - 1, in order:
    log2(k) rounds of ``_riffle``, the pairs taken over row bits from the highest down.
    Returns each vector with the (i, j) of its lanes (checked here: a run per j, i
    ascending)."""
    regs = [(r, [(i, j) for j in range(OB)]) for i, r in enumerate(rows)]
    bit = len(rows) // 2
    while bit:
        regs = _riffle(builder, regs,
                       lambda lab, b=bit: None if lab[0] & b else (lab[0] | b, lab[1]))
        bit //= 2
    k = len(rows)
    for _, lab in regs:
        for g in range(0, OB, k):
            assert lab[g:g + k] == [(i, lab[g][1]) for i in range(k)], lab
    return regs


TILE = 8  # pixels of a tile of ``tile_t``


@intrinsic
def tile_t(typingctx: Any, src: Any, at: Any, plane: Any, dst: Any, dat: Any,
           rowstep: Any) -> Any:
    """``dst[dat + i * rowstep + j] = src[at + j * plane + i]`` for TILE pixels i and OB
    channels j: a tile of channel-first planes to channels-last rows, transposed in registers
    (TILE-value loads paired into vectors of OB, four rounds of ``_riffle``), not a scalar a
    value. The sample-at-a-time passes' copies (``_nhwc1``)."""
    if not (_flat(src) and _flat(dst) and src.dtype == dst.dtype and _ints(at, plane, dat, rowstep)
            and OB == 2 * TILE):
        return None
    sig = types.none(src, at, plane, dst, dat, rowstep)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, plane) = _addr(context, builder, sig, args, 3)
        dt = sig.args[0].dtype
        out = context.make_array(sig.args[3])(context, builder, args[3]).data
        dat, rowstep = (context.cast(builder, args[i], sig.args[i], types.intp) for i in (4, 5))
        et = context.get_value_type(dt)
        i32 = llir.IntType(32)
        half = [_vload(context, builder, llir.VectorType(et, TILE),
                       _elem(context, builder, data, at, builder.mul(
                           plane, context.get_constant(types.intp, j))), dt)
                for j in range(OB)]
        regs = [(builder.shuffle_vector(half[2 * m], half[2 * m + 1],
                                        llir.Constant(llir.VectorType(i32, OB), list(range(OB)))),
                 [(q % TILE, 2 * m + q // TILE) for q in range(OB)]) for m in range(OB // 2)]
        bit = OB // 2
        while bit:
            regs = _riffle(builder, regs,
                           lambda lab, b=bit: None if lab[1] & b else (lab[0], lab[1] | b))
            bit //= 2
        for v, lab in regs:
            assert lab == [(lab[0][0], j) for j in range(OB)], lab
            _vstore(context, builder, v, _elem(context, builder, out, dat, builder.mul(
                rowstep, context.get_constant(types.intp, lab[0][0]))), dt)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def block_put_t(typingctx: Any, arr: Any, at: Any, stride: Any, acc: Any) -> Any:
    """``arr[at + i + j * stride] = acc[i][j]`` for each row i and channel j: a block of k
    neighbouring pixels (rows) of OB channels stored to channel-first planes ``stride`` apart,
    transposed in registers (``_transpose``), a vector of k pixels a channel (k a power of two
    up to OB). Through scratch and a scalar store a value, as the kernels first did, the store
    cost 30-40% of a small layer's forward (16 -> 32 at 8x8)."""
    if not (_flat(arr) and _ints(at, stride) and _is_block(acc)
            and acc.dtype.dtype == arr.dtype and acc.count <= OB
            and acc.count & (acc.count - 1) == 0):
        return None
    sig = types.none(arr, at, stride, acc)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, stride) = _addr(context, builder, sig, args, 3)
        k = sig.args[3].count
        dt = sig.args[0].dtype
        rows = [builder.extract_value(args[3], i) for i in range(k)]
        i32 = llir.IntType(32)
        for v, lab in _transpose(builder, rows):
            for g in range(0, OB, k):
                q = _elem(context, builder, data, at, builder.mul(
                    stride, context.get_constant(types.intp, lab[g][1])))
                if k == 1:
                    builder.store(builder.extract_element(v, llir.Constant(i32, g)), q)
                    continue
                part = builder.shuffle_vector(v, llir.Constant(v.type, llir.Undefined),
                                              llir.Constant(llir.VectorType(i32, k),
                                                            list(range(g, g + k))))
                _vstore(context, builder, part, q, dt)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def block_store(typingctx: Any, arr: Any, at: Any, step: Any, acc: Any) -> Any:
    """``arr[at + i * step + j] = acc[i][j]`` for each row i and channel j."""
    if not (_flat(arr) and _ints(at, step) and _is_block(acc) and acc.dtype.dtype == arr.dtype):
        return None
    sig = types.none(arr, at, step, acc)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, step) = _addr(context, builder, sig, args, 3)
        for i in range(sig.args[3].count):
            _vstore(context, builder, builder.extract_value(args[3], i),
                    _elem(context, builder, data, at, (step, i)), sig.args[0].dtype)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def block_add(typingctx: Any, arr: Any, at: Any, step: Any, acc: Any) -> Any:
    """``arr[at + i * step + j] += acc[i][j]`` for each row i and channel j."""
    if not (_flat(arr) and _ints(at, step) and _is_block(acc) and acc.dtype.dtype == arr.dtype):
        return None
    sig = types.none(arr, at, step, acc)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data, (at, step) = _addr(context, builder, sig, args, 3)
        dt = sig.args[0].dtype
        for i in range(sig.args[3].count):
            q = _elem(context, builder, data, at, (step, i))
            row = builder.extract_value(args[3], i)
            _vstore(context, builder, builder.fadd(_vload(context, builder, row.type, q, dt), row),
                    q, dt)
        return context.get_dummy_value()

    return sig, codegen
