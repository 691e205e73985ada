"""MATMUL_PACK_B and MATMUL_PREPACKED: a constant B packed once into the GEMM engine's panels, then
multiplied without packing.  The packed bytes against a NumPy rebuild of the documented layout;
the products against the native MATMUL kernel bit for bit (the same panels, the same sums), called
as a C caller does (a packed operand's storage is the whole packed buffer); every refusal typed,
before anything is written."""
import ctypes

import numpy as np
import pytest

import fuel_kernel as fk
from capi import Layout, Storage, kernel_function, layout, storage_of
from fuel_kernel import _dispatch, ops, spec
from oracles import matmul_reference, packed_b_reference
from support import LAYOUTS, gemm_k_blocks, make_operand, random_values

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU
FLOATS = tuple(D[name] for name in spec.FLOAT)
HEADER = spec.MATMUL_PACKED_HEADER_BYTES
COVERED = ({(OP.MATMUL_PACK_B, (d, D.U8)) for d in FLOATS} |
           {(OP.MATMUL_PREPACKED, (d, D.U8, d)) for d in FLOATS})
# (k, n): none a multiple of KC (768 F32, 256 F64), NC (1024 F32, 512 F64) or NR (32, 16) but the
# small ones; 800 rows are two K blocks of 400 in F32 (four of 200 in F64), 1100 columns a full
# column block and a short one
SHAPES = [(1, 1), (7, 5), (800, 1100), (513, 47), (0, 9), (9, 0)]
ROWS = (1, 2, 3, 4, 5, 32, 128)      # 1-4: the few-rows path over the panels


def test_the_shapes_span_several_k_blocks():
    assert all(gemm_k_blocks(dtype, 800) >= 2 for dtype in FLOATS)


def nr_of(dtype):
    return spec.gemm_blocking(dtype.name)[3]


def pack(b, dtype):
    out = np.zeros(ops.matmul_packed_nbytes(dtype, *b.shape), dtype=np.uint8)
    kernel = fk.bindings().lookup(OP.MATMUL_PACK_B, [dtype, D.U8], CPU)
    assert kernel(b, out=out) is out
    return out


# a params block of kind none (FK_PARAMS_NONE = 0), as a plan passes for a step without params (the
# thread split runs a call with params = NULL whole); larger than fk_params
NO_PARAMS = ctypes.create_string_buffer(4096)


def prepacked_call(a, packed, n, c, dtype, j0=0, view=None, nbytes=None):
    """MATMUL_PREPACKED as a C caller (a plan) calls it: storages of A, the whole packed buffer and
    C, the packed operand's (k, n) view at byte 64 + j0 with strides (0, 1), params of kind none.
    Returns the status."""
    fn = kernel_function(OP.MATMUL_PREPACKED, [dtype, D.U8, dtype])
    k = a.shape[-1]
    item = a.itemsize
    a_base, c_base = (x.base if x.base is not None else x for x in (a, c))
    a_offset = (a.ctypes.data - a_base.ctypes.data) // item
    c_offset = (c.ctypes.data - c_base.ctypes.data) // item
    ins = (Storage * 2)(storage_of(a_base, dtype), storage_of(packed, D.U8, nbytes))
    outs = (Storage * 1)(storage_of(c_base, dtype))
    shape, strides, offset = view if view is not None else ((k, n), (0, 1), HEADER + j0)
    lays = (Layout * 3)(layout(a.shape, [s // item for s in a.strides], a_offset),
                        layout(shape, strides, offset),
                        layout(c.shape, [s // item for s in c.strides], c_offset))
    return fn(ins, 2, outs, 1, lays, ctypes.cast(NO_PARAMS, ctypes.c_void_p))


def native_matmul(a, b, dtype):
    """The native MATMUL kernel (not BLAS): the bits the pre-packed one must give."""
    (kernel,) = [k for k in fk.bindings().alternatives(OP.MATMUL, [dtype] * 3, CPU) if k.source == "native"]
    c = np.zeros(a.shape[:-1] + (b.shape[1],), dtype=dtype.numpy)
    return kernel(a, b, out=c)


def same_bytes(x, y):
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_pack_b_writes_the_documented_panels_from_any_layout(dtype, shape, rng):
    for b_layout in LAYOUTS:
        b = make_operand(shape, dtype, b_layout, rng)
        got = pack(b, dtype)
        assert same_bytes(got, packed_b_reference(np.array(b), dtype)), b_layout


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
def test_prepacked_gives_the_native_matmul_bits(dtype, rng):
    """M in 1-5, 32, 128 on every layout of A, C with unit and other column strides: the bits of
    the native MATMUL kernel on B (and within MATMUL's claim of the F64 product)."""
    for k, n in SHAPES[:4]:
        b = make_operand((k, n), dtype, "contiguous", rng, special=False)
        packed = pack(b, dtype)
        for m in ROWS:
            for a_layout in LAYOUTS:
                a = make_operand((m, k), dtype, a_layout, rng, special=False)
                expected = native_matmul(np.array(a), b, dtype)
                for c_strided in (False, True):
                    room = np.full((m, 2 * n + 1), 7, dtype=dtype.numpy)
                    c = room[:, 1::2] if c_strided else room[:, :n]
                    assert prepacked_call(a, packed, n, c, dtype) == 0
                    assert same_bytes(np.ascontiguousarray(c), expected), (k, n, m, a_layout, c_strided)
                    if c_strided:
                        assert (room[:, 0::2] == 7).all(), "wrote between the output's columns"
        if k and n:
            ref = matmul_reference(np.array(a), b)
            bound = fk.bindings().lookup(OP.MATMUL_PREPACKED, [dtype, D.U8, dtype], CPU).precision.max_rel
            mag = np.abs(np.array(a).astype(np.float64)) @ np.abs(b.astype(np.float64))
            assert (np.abs(expected.astype(np.float64) - ref) <= bound * mag + 1e-300).all()


@pytest.mark.parametrize("scale", (1.0, 1e-36, 1e36), ids=("unit", "tiny", "huge"))
def test_bf16_panels_give_the_native_bits_on_every_engine_path(scale, rng):
    """BF16 panels hold BF16 values: passes of 4 rows below 16 rows (on two threads cut into column
    blocks: 12 x 512 x 2048), the serial engine pairing them straight from the panels, the shared
    one (33 x 300 x 1100 on two threads) too, each widening the blocks where the pairs' guard
    refuses them (tiny or huge values); each the native kernel's bits."""
    for m, k, n in ((9, 300, 1100), (12, 512, 2048), (16, 257, 70), (33, 300, 1100), (128, 64, 96)):
        b = make_operand((k, n), D.BF16, "contiguous", rng, special=False) * scale
        a = make_operand((m, k), D.BF16, "contiguous", rng, special=False)
        packed = pack(b, D.BF16)
        assert packed.nbytes == HEADER + k * (-(-n // 32) * 32) * 2
        expected = native_matmul(a, b, D.BF16)
        for threads in (1, 2):
            c = np.zeros((m, n), dtype=D.BF16.numpy)
            with fk.threads(threads):
                assert prepacked_call(a, packed, n, c, D.BF16) == 0
            assert same_bytes(c, expected), (m, k, n, threads)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
def test_column_views_and_batches(dtype, rng):
    """A view of columns [j0, j0 + n) at any multiple of NR (as column tiles and thread blocks cut
    it) and a batched A (B shared, as a 2-d weight is) give the native bits of that slice of B."""
    k, n_all, nr = 300, 1100, nr_of(dtype)
    b = make_operand((k, n_all), dtype, "contiguous", rng, special=False)
    packed = pack(b, dtype)
    for rows in (9, 3):                 # the engine's tiles, the few-rows path
        a = make_operand((2, 3, rows, k), dtype, "contiguous", rng, special=False)
        for j0, n in ((0, n_all), (nr, 5 * nr + 3), (1024 // nr * nr, n_all - 1024 // nr * nr), (n_all // nr * nr, 1)):
            c = np.zeros((2, 3, rows, n), dtype=dtype.numpy)
            assert prepacked_call(a, packed, n, c, dtype, j0=j0) == 0
            expected = native_matmul(a, np.ascontiguousarray(b[:, j0:j0 + n]), dtype)
            assert same_bytes(c, expected), (rows, j0, n)
    a2 = make_operand((256, k), dtype, "contiguous", rng, special=False)
    expected = native_matmul(a2, b, dtype)
    for threads in (1, 2, 3):              # the thread split cuts C's columns and the view alike
        c = np.zeros((256, n_all), dtype=dtype.numpy)
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            assert prepacked_call(a2, packed, n_all, c, dtype) == 0
        assert (_dispatch._parallel_calls() > calls) == (threads > 1), threads
        assert same_bytes(c, expected), threads


def test_a_python_call_is_refused_typed(rng):
    """A NumPy view's storage is what it addresses, never the header before it: a ShapeError, the
    output untouched."""
    b = random_values((8, 40), D.F32, rng)
    packed = pack(b, D.F32)
    view = np.lib.stride_tricks.as_strided(packed[HEADER:], shape=(8, 40), strides=(0, 1))
    c = np.full((3, 40), 5, np.float32)
    kernel = fk.bindings().lookup(OP.MATMUL_PREPACKED, [D.F32, D.U8, D.F32], CPU)
    with pytest.raises(fk.ShapeError, match="header"):
        kernel(random_values((3, 8), D.F32, rng), view, out=c)
    assert (c == 5).all()


def _tampered(packed, field_offset, value, fmt="<q"):
    import struct
    bad = packed.copy()
    bad[field_offset:field_offset + struct.calcsize(fmt)] = np.frombuffer(struct.pack(fmt, value), np.uint8)
    return bad


@pytest.mark.parametrize("case", ["magic", "version", "dtype", "blocking", "k", "n_huge", "panel_bytes",
                                  "short_storage", "tiny_storage", "j0_unaligned", "j0_past_end", "strides",
                                  "extents", "params"])
def test_prepacked_refusals_write_nothing(case, rng):
    k, n = 40, 70
    b = random_values((k, n), D.F32, rng)
    packed = pack(b, D.F32)
    a = random_values((5, k), D.F32, rng)
    c = np.full((5, n), 3, np.float32)
    kwargs, error = {}, fk.ShapeError
    if case == "magic":
        packed = _tampered(packed, 0, ord("x"), "<B")
    elif case == "version":                # packed by an older build (version 1: BF16 panels held F32)
        packed = _tampered(packed, 8, 1, "<i")
    elif case == "dtype":                  # an F16 B's panels are F32 too: only the header tells
        packed = pack(random_values((k, n), D.F16, rng), D.F16)
        error = fk.DTypeError
    elif case == "blocking":
        packed = _tampered(packed, 24, 512, "<i")        # NC
    elif case == "k":
        packed = pack(random_values((k + 1, n), D.F32, rng), D.F32)
    elif case == "n_huge":                 # its panel count would overflow int64
        packed = _tampered(packed, 40, 2 ** 62)
    elif case == "panel_bytes":
        packed = _tampered(packed, 48, 4)
    elif case == "short_storage":
        kwargs["nbytes"] = packed.nbytes - 4
    elif case == "tiny_storage":
        kwargs["nbytes"] = HEADER - 1
    elif case == "j0_unaligned":
        kwargs["j0"] = 3
    elif case == "j0_past_end":
        kwargs["j0"] = 64
    elif case == "strides":
        kwargs["view"] = ((k, n), (n, 1), HEADER)
    elif case == "extents":
        kwargs["view"] = ((k - 1, n), (0, 1), HEADER)
    if case == "params":                   # refused before the packed operand is looked at
        view = np.lib.stride_tricks.as_strided(packed[HEADER:], shape=(k, n), strides=(0, 1))
        kernel = fk.bindings().lookup(OP.MATMUL_PREPACKED, [D.F32, D.U8, D.F32], CPU)
        with pytest.raises(fk.ParamsError):
            kernel(a, view, out=c, params=fk.params.matmul(5, n, k))
        assert (c == 3).all()
        return
    status = prepacked_call(a, packed, n, c, D.F32, **kwargs)
    assert status != 0
    assert fk.errors.STATUS_ERRORS[status] is error, (case, status)
    assert (c == 3).all(), f"{case}: the output was written"


@pytest.mark.parametrize("case", ["size", "read_only", "rank", "dtype"])
def test_pack_b_refusals_write_nothing(case, rng):
    b = random_values((30, 50), D.F32, rng)
    nbytes = ops.matmul_packed_nbytes(D.F32, 30, 50)
    out = np.full(nbytes + 8, 9, np.uint8)
    kernel = fk.bindings().lookup(OP.MATMUL_PACK_B, [D.F32, D.U8], CPU)
    target, error = out[:nbytes], fk.ShapeError
    if case == "size":
        target = out[:nbytes - 1]
    elif case == "read_only":
        target.flags.writeable = False
        error = fk.ReadOnlyError
    elif case == "rank":
        b = random_values((2, 30, 50), D.F32, rng)
    elif case == "dtype":
        b = random_values((30, 50), D.F64, rng)
        error = fk.DTypeError
    with pytest.raises(error):
        kernel(b, out=target)
    assert (out == 9).all()


def test_pack_b_refuses_an_output_that_does_not_start_its_storage(rng):
    """The header must be where a consumer reads it, at its storage's start (a C caller's offset)."""
    b = random_values((30, 50), D.F32, rng)
    nbytes = ops.matmul_packed_nbytes(D.F32, 30, 50)
    out = np.full(nbytes + 8, 9, np.uint8)
    fn = kernel_function(OP.MATMUL_PACK_B, [D.F32, D.U8])
    status = fn((Storage * 1)(storage_of(b, D.F32)), 1, (Storage * 1)(storage_of(out, D.U8)), 1,
                (Layout * 2)(layout(b.shape, (50, 1)), layout((nbytes,), (1,), 8)), None)
    assert fk.errors.STATUS_ERRORS[status] is fk.ShapeError
    assert (out == 9).all()


def test_packed_sizes_are_overflow_checked():
    assert ops.matmul_packed_nbytes(D.F32, 3, 33) == HEADER + 3 * 64 * 4
    assert ops.matmul_packed_nbytes(D.F64, 3, 17) == HEADER + 3 * 32 * 8
    assert ops.matmul_packed_nbytes(D.BF16, 0, 5) == HEADER
    assert ops.matmul_packed_nbytes(D.BF16, 3, 33) == HEADER + 3 * 64 * 2        # its own BF16 values
    assert ops.matmul_packed_nbytes(D.F16, 3, 33) == HEADER + 3 * 64 * 4
    with pytest.raises(fk.ShapeError):
        ops.matmul_packed_nbytes(D.F32, 2 ** 40, 2 ** 40)
    with pytest.raises(fk.DTypeError):
        ops.matmul_packed_nbytes(D.I32, 3, 3)
    with pytest.raises(fk.ShapeError, match="matmul_packed_nbytes"):
        fk.dispatch(OP.MATMUL_PACK_B, [np.zeros((3, 3), np.float32)])
