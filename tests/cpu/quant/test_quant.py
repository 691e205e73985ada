"""QMATMUL: A @ dequant(W).T for every GGML quant type of spec.QUANT_TYPES, checked against gguf's
NumPy dequantization followed by an F64 matmul, within the bindings' precision claim: blocks made
by gguf's quantize where it has one and random well-formed blocks (random bytes, finite f16
scales) for every type; m = 1 (the streaming path) and m > 1 (the GEMM path); A in every layout and
BF16; strided W and C; bits independent of the thread count; every refusal before any write.
m = 1 bit for bit against the documented fma order (oracles.qgemv_register_bits and, for NF4,
oracles.nf4_gemv_register_bits), in this process's ISA form and, in child processes
(FUEL_KERNEL_QGEMV_FORM), the AVX2 and portable ones.
The row count from A (params m = 0) and at run time ([A, W, count, C]), in kernels and in a Graph
plan (QMATMUL and NF4_MATMUL); NF4_MATMUL; QEMBEDDING (rows of a quantized table at token ids) against
gguf's rows."""
import ctypes
import subprocess
import sys

import gguf
import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
import oracles
from capi import Layout, Storage, kernel_function, layout, storage_of
from extension_build import child_env
from fuel_kernel import ops as fk_ops, spec
from fuel_kernel.graph import Graph
from fuel_kernel.errors import STATUS_ERRORS
from support import gemm_k_blocks, make_operand

OP = fk.OpKind
D = fk.DType
KEYS = {D.F32: (D.F32, D.U8, D.F32), D.BF16: (D.BF16, D.U8, D.F32)}
COUNT_KEYS = {(a, count): (a, D.U8, count, D.F32) for a in KEYS for count in (D.I32, D.I64)}
COVERED = {(OP.QMATMUL, key) for key in KEYS.values()} | {(OP.QMATMUL, key) for key in COUNT_KEYS.values()}
QUANTS = {q.name: q for q in spec.QUANT_TYPES}
SHAPE_STATUS = {cls: code for code, cls in STATUS_ERRORS.items()}[fk.ShapeError]
# byte offsets of each type's f16 scale fields inside a block (gguf.quants' block layouts)
F16_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2),
              "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
WITH_QUANTIZE = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")     # gguf quantizes these; the rest: random blocks
A_LAYOUTS = ("contiguous", "strided", "transposed", "offset", "negative", "broadcast")


def random_blocks(name, n, k, rng):
    """n rows of k values of random well-formed blocks: random bytes, finite f16 scales in
    [-2, 2] (subnormal and zero scales included)."""
    q = QUANTS[name]
    blocks = rng.integers(0, 256, (n * (k // q.block_size), q.block_bytes), dtype=np.uint8)
    scales = rng.standard_normal((blocks.shape[0], len(F16_FIELDS[name]))).astype(np.float16)
    if scales.size:
        scales.flat[0] = 0.0
        scales.flat[-1] = np.float16(3e-6)
    for i, at in enumerate(F16_FIELDS[name]):
        blocks[:, at:at + 2] = scales[:, i:i + 1].view(np.uint8)
    return blocks.reshape(-1)


def quantized(name, n, k, rng):
    """n rows of k values quantized by gguf (random blocks for the types gguf cannot quantize)."""
    if name not in WITH_QUANTIZE:
        return random_blocks(name, n, k, rng)
    values = rng.standard_normal((n, k)).astype(np.float32)
    return gguf.quants.quantize(values, gguf.GGMLQuantizationType(QUANTS[name].code)).reshape(-1)


def run(a, w, name, n, out=None):
    m, k = a.shape
    kernel = fk.bindings().lookup(OP.QMATMUL, KEYS[D.parse(a.dtype)], fk.Backend.CPU)
    if out is None:
        out = np.full((m, n), np.nan, np.float32)
    return kernel(a, w, out=out, params=fk.params.qmatmul(QUANTS[name].code, m, n, k)), kernel


def check(got, a, w, name, n, claim):
    """|err| <= max_rel * sum_k |a * w| (the claim), against gguf's dequantization in F64."""
    k = a.shape[1]
    values, magnitude = oracles.qmatmul_reference(a, w, QUANTS[name].code, n, k)
    err = np.abs(np.asarray(got, np.float64) - values)
    bound = claim.max_rel * magnitude + 1e-38
    assert (err <= bound).all(), f"{name}: worst error {err.max()} vs bound {bound[err.argmax() // max(n, 1)]}"


@pytest.mark.parametrize("name", QUANTS)
@pytest.mark.parametrize("m", [1, 3, 40])
def test_every_quant_type_matches_gguf(name, m):
    rng = np.random.default_rng(QUANTS[name].code * 100 + m)
    blocks = 5 if QUANTS[name].block_size == 256 else 27        # GEMM K blocks (two) cut quant blocks
    k, n = QUANTS[name].block_size * blocks, 37
    assert gemm_k_blocks(D.F32, k) == 2 and (k // 2) % QUANTS[name].block_size != 0
    for w in (quantized(name, n, k, rng), random_blocks(name, n, k, rng)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        got, kernel = run(a, w, name, n)
        check(got, a, w, name, n, kernel.precision)


@pytest.mark.parametrize("layout", A_LAYOUTS)
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
@pytest.mark.parametrize("m", [1, 6])
def test_a_layouts_and_bf16(layout, dtype, m):
    rng = np.random.default_rng(len(layout) * 7 + m)
    name, n, k = "Q4_0", 19, 96
    w = quantized(name, n, k, rng)
    a = make_operand((m, k), dtype, layout, rng, special=False)
    got, kernel = run(a, w, name, n)
    check(got, a, w, name, n, kernel.precision)


@pytest.mark.parametrize("m", [1, 5])
def test_strided_w_and_strided_output(m):
    rng = np.random.default_rng(3)
    name, n, k = "Q6_K", 9, 512
    w = quantized(name, n, k, rng)
    w_strided = np.zeros(2 * w.size, np.uint8)[::-2]
    w_strided[...] = w
    a = rng.standard_normal((m, k)).astype(np.float32)
    out = np.full((m, 3 * n), 7.0, np.float32)
    got, kernel = run(a, w_strided, name, n, out=out[:, ::3])
    check(got, a, w, name, n, kernel.precision)
    assert (out[:, 1::3] == 7.0).all() and (out[:, 2::3] == 7.0).all()


def test_empty_extents():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 0)).astype(np.float32)
    got, _ = run(a, np.zeros(0, np.uint8), "Q8_0", 3)
    np.testing.assert_array_equal(got, np.zeros((2, 3), np.float32))
    got, _ = run(np.zeros((0, 32), np.float32), np.zeros(3 * 34, np.uint8), "Q8_0", 3)
    assert got.shape == (0, 3)


def test_dispatch_allocates_the_f32_output():
    rng = np.random.default_rng(6)
    name, n, k = "Q5_1", 4, 64
    w = quantized(name, n, k, rng)
    a = rng.standard_normal((1, k)).astype(ml_dtypes.bfloat16)
    got = fk.dispatch(OP.QMATMUL, [a, w], params=fk.params.qmatmul(QUANTS[name].code, 1, n, k))
    assert got.dtype == np.float32 and got.shape == (1, n)
    check(got, a, w, name, n, fk.bindings().lookup(OP.QMATMUL, KEYS[D.BF16], fk.Backend.CPU).precision)


@pytest.mark.parametrize("m", [1, 9])
@pytest.mark.parametrize("n", [512, 600])
def test_bits_do_not_depend_on_the_thread_count(m, n):
    """Both paths run fixed chunks of W's rows on the threads (m = 1: 32 rows, m > 1: 256; 600
    leaves a short last chunk); C with a column stride goes through the output buffer."""
    rng = np.random.default_rng(8)
    name, k = "Q8_0", 1024
    w = quantized(name, n, k, rng)
    a = rng.standard_normal((m, k)).astype(np.float32)
    before = fk.get_num_threads()
    try:
        fk.set_num_threads(1)
        one, kernel = run(a, w, name, n)
        fk.set_num_threads(4)
        four, _ = run(a, w, name, n)
        strided, _ = run(a, w, name, n, out=np.zeros((m, 2 * n), np.float32)[:, ::2])
    finally:
        fk.set_num_threads(before)
    np.testing.assert_array_equal(one.view(np.uint32), four.view(np.uint32))
    np.testing.assert_array_equal(one.view(np.uint32), np.ascontiguousarray(strided).view(np.uint32))
    check(one, a, w, name, n, kernel.precision)


# ---- refusals: a typed exception, nothing written ------------------------------------------------
def refused(exc, a, w, params, out_shape=(2, 3), dtype=D.F32):
    out = np.full(out_shape, 5.0, np.float32)
    kernel = fk.bindings().lookup(OP.QMATMUL, KEYS[dtype], fk.Backend.CPU)
    with pytest.raises(exc):
        kernel(a, w, out=out, params=params)
    assert (out == 5.0).all()


def test_k_not_a_multiple_of_the_block_size():
    a = np.ones((2, 48), np.float32)
    refused(fk.ShapeError, a, np.zeros(3 * 34, np.uint8), fk.params.qmatmul(8, 2, 3, 48))
    with pytest.raises(fk.ShapeError):
        fk_ops.infer_output_shape(OP.QMATMUL, [(2, 48), (102,)], fk.params.qmatmul(8, 2, 3, 48))


@pytest.mark.parametrize("delta", [-1, 1, -34])
def test_w_of_the_wrong_byte_size(delta):
    a = np.ones((2, 64), np.float32)
    refused(fk.ShapeError, a, np.zeros(3 * 2 * 34 + delta, np.uint8), fk.params.qmatmul(8, 2, 3, 64))


def test_w_size_overflow_is_a_shape_error():
    with pytest.raises(fk.ShapeError):
        fk_ops.infer_output_shape(OP.QMATMUL, [(1, 256), (144,)], fk.params.qmatmul(12, 1, 2 ** 62, 256))


@pytest.mark.parametrize("quant_type", [0, 1, 9, 15, 99])
def test_unknown_quant_type(quant_type):
    a = np.ones((2, 32), np.float32)
    refused(fk.ParamsError, a, np.zeros(3 * 34, np.uint8), fk.params.qmatmul(quant_type, 2, 3, 32))
    with pytest.raises(fk.ParamsError):
        fk_ops.infer_output_shape(OP.QMATMUL, [(2, 32), (102,)], fk.params.qmatmul(quant_type, 2, 3, 32))


@pytest.mark.parametrize("case", ["a rows", "a cols", "output cols", "output rows", "a rank", "w rank"])
def test_shape_mismatch(case):
    a, w, out_shape = np.ones((2, 32), np.float32), np.zeros(3 * 34, np.uint8), (2, 3)
    if case == "a rows":
        a = np.ones((3, 32), np.float32)
    elif case == "a cols":
        a = np.ones((2, 64), np.float32)
    elif case == "output cols":
        out_shape = (2, 4)
    elif case == "output rows":
        out_shape = (1, 3)
    elif case == "a rank":
        a = np.ones((2, 32, 1), np.float32)
    else:
        w = np.zeros((3, 34), np.uint8)
    refused(fk.ShapeError, a, w, fk.params.qmatmul(8, 2, 3, 32), out_shape)


def test_wrong_dtypes_and_missing_params():
    w = np.zeros(3 * 34, np.uint8)
    refused(fk.DTypeError, np.ones((2, 32), np.float64), w, fk.params.qmatmul(8, 2, 3, 32))
    refused(fk.DTypeError, np.ones((2, 32), np.float32), w.view(np.int8), fk.params.qmatmul(8, 2, 3, 32))
    refused(fk.ParamsError, np.ones((2, 32), np.float32), w, None)
    refused(fk.ParamsError, np.ones((2, 32), np.float32), w, fk.params.none())
    with pytest.raises(fk.DTypeError):
        fk_ops.infer_output_dtype(OP.QMATMUL, [D.F16, D.U8], fk.params.qmatmul(8, 2, 3, 32))


# ---- NF4_MATMUL ------------------------------------------------------------------------------------
NF4_KEYS = {D.F32: (D.F32, D.U8, D.F32, D.F32), D.BF16: (D.BF16, D.U8, D.F32, D.F32)}
NF4_COUNT_KEYS = {(a, count): (a, D.U8, D.F32, count, D.F32) for a in NF4_KEYS for count in (D.I32, D.I64)}
COVERED |= {(OP.NF4_MATMUL, key) for key in (*NF4_KEYS.values(), *NF4_COUNT_KEYS.values())}


def nf4_quantized(n, k, rng):
    """W (n, k) quantized to NF4 in NumPy: per block of 64, absmax = max |w|, each value's nearest
    code of w / absmax, two codes per byte with the first in the high nibble."""
    w = rng.standard_normal((n * k // spec.NF4_BLOCK, spec.NF4_BLOCK)).astype(np.float32)
    absmax = np.abs(w).max(axis=1)
    normalized = w / np.where(absmax == 0, 1, absmax)[:, None]
    q = np.abs(normalized.reshape(-1, 1) - oracles.NF4_CODE[None, :]).argmin(axis=1).astype(np.uint8)
    return (q[0::2] << 4) | q[1::2], absmax.astype(np.float32)


def nf4_run(a, codes, absmax, n, out=None):
    m, k = a.shape
    kernel = fk.bindings().lookup(OP.NF4_MATMUL, NF4_KEYS[D.parse(a.dtype)], fk.Backend.CPU)
    if out is None:
        out = np.full((m, n), np.nan, np.float32)
    return kernel(a, codes, absmax, out=out, params=fk.params.nf4_matmul(m, n, k)), kernel


def nf4_check(got, a, codes, absmax, n, claim):
    values, magnitude = oracles.nf4_matmul_reference(a, codes, absmax, n, a.shape[1])
    err = np.abs(np.asarray(got, np.float64) - values)
    assert (err <= claim.max_rel * magnitude + 1e-38).all(), f"worst error {err.max()}"


def test_nf4_code_book_is_the_qlora_one():
    code = np.array(spec.NF4_CODE)
    assert code.size == 16 and code[0] == -1.0 and code[7] == 0.0 and code[15] == 1.0
    assert (np.diff(code) > 0).all()


@pytest.mark.parametrize("layout", A_LAYOUTS)
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
@pytest.mark.parametrize("m", [1, 7])
def test_nf4_matches_the_code_book_reference(layout, dtype, m):
    rng = np.random.default_rng(len(layout) * 11 + m)
    n, k = 45, 64 * 13                              # 13 blocks per row: GEMM K blocks (two) cut NF4 blocks
    codes, absmax = nf4_quantized(n, k, rng)
    a = make_operand((m, k), dtype, layout, rng, special=False)
    got, kernel = nf4_run(a, codes, absmax, n)
    nf4_check(got, a, codes, absmax, n, kernel.precision)
    random_codes = rng.integers(0, 256, n * k // 2, dtype=np.uint8)
    got, _ = nf4_run(a, random_codes, absmax, n)
    nf4_check(got, a, random_codes, absmax, n, kernel.precision)


@pytest.mark.parametrize("m", [1, 4])
def test_nf4_strided_codes_absmax_and_output(m):
    rng = np.random.default_rng(12)
    n, k = 6, 128
    codes, absmax = nf4_quantized(n, k, rng)
    codes_strided = np.zeros(3 * codes.size, np.uint8)[::3]
    codes_strided[...] = codes
    absmax_reversed = absmax[::-1].copy()[::-1]
    a = rng.standard_normal((m, k)).astype(np.float32)
    out = np.full((m, 2 * n), 7.0, np.float32)
    got, kernel = nf4_run(a, codes_strided, absmax_reversed, n, out=out[:, ::2])
    nf4_check(got, a, codes, absmax, n, kernel.precision)
    assert (out[:, 1::2] == 7.0).all()


@pytest.mark.parametrize("case", ["k not a multiple of 64", "codes size", "absmax size", "absmax dtype",
                                  "qmatmul params"])
def test_nf4_refusals_write_nothing(case):
    m, n, k = 2, 3, 64
    a = np.ones((m, k), np.float32)
    codes, absmax = np.zeros(n * k // 2, np.uint8), np.ones(n * k // 64, np.float32)
    params, exc = fk.params.nf4_matmul(m, n, k), fk.ShapeError
    if case == "k not a multiple of 64":
        a, codes, params = np.ones((m, 96), np.float32), np.zeros(n * 48, np.uint8), fk.params.nf4_matmul(m, n, 96)
    elif case == "codes size":
        codes = np.zeros(n * k // 2 + 1, np.uint8)
    elif case == "absmax size":
        absmax = np.ones(n * k // 64 - 1, np.float32)
    elif case == "absmax dtype":
        absmax, exc = absmax.astype(np.float64), fk.DTypeError
    else:
        params, exc = fk.params.qmatmul(8, m, n, k), fk.ParamsError
    out = np.full((m, n), 5.0, np.float32)
    kernel = fk.bindings().lookup(OP.NF4_MATMUL, NF4_KEYS[D.F32], fk.Backend.CPU)
    with pytest.raises(exc):
        kernel(a, codes, absmax, out=out, params=params)
    assert (out == 5.0).all()


# ---- a C caller's impossible sizes ---------------------------------------------------------------
class QmatmulParams(ctypes.Structure):
    """fk_params holding fk_qmatmul_params (abi.h), padded past the union's size."""
    _fields_ = [("kind", ctypes.c_int32), ("reserved", ctypes.c_int32), ("quant_type", ctypes.c_int32),
                ("reserved2", ctypes.c_int32), ("m", ctypes.c_int64), ("n", ctypes.c_int64),
                ("k", ctypes.c_int64), ("padding", ctypes.c_uint8 * 1024)]


def test_w_byte_count_overflow_from_a_c_caller_is_a_shape_error():
    """A (1, k) of one element seen through stride 0, k the largest multiple of 32 below 2**63:
    Q8_0's k / 32 * 34 bytes overflow int64 (the one type with more bytes than values per block),
    refused before anything is written."""
    q = QUANTS["Q8_0"]
    assert (2 ** 63 - 1) // q.block_size * q.block_bytes > 2 ** 63 - 1
    k = (2 ** 63 - 1) // q.block_size * q.block_size
    a, w, c = np.zeros(1, np.float32), np.zeros(q.block_bytes, np.uint8), np.full(1, 5.0, np.float32)
    storages = (Storage * 3)(storage_of(a, D.F32), storage_of(w, D.U8), storage_of(c, D.F32))
    layouts = (Layout * 3)(layout([1, k], [0, 0]), layout([q.block_bytes], [1]), layout([1, 1], [1, 1]))
    kind = next(p.kind for p in spec.PARAMS if p.name == "qmatmul")
    params = QmatmulParams(kind=kind, quant_type=q.code, m=1, n=1, k=k)
    function = kernel_function(OP.QMATMUL, list(KEYS[D.F32]))
    inputs = ctypes.cast(storages, ctypes.POINTER(Storage))
    outputs = ctypes.cast(ctypes.byref(storages, 2 * ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
    status = function(inputs, 2, outputs, 1, layouts, ctypes.addressof(params))
    assert status == SHAPE_STATUS
    assert c[0] == 5.0


# ---- the row count from A (m = 0) and at run time ([A, W, count, C]) ------------------------------
@pytest.mark.parametrize("name", QUANTS)
def test_one_params_object_serves_every_row_count(name):
    """params.qmatmul(type, 0, n, k): the rows come from A, so one params block (as a plan keeps)
    runs m = 1 (streaming), a few rows and many rows (GEMM), each against gguf."""
    rng = np.random.default_rng(QUANTS[name].code + 500)
    k, n = QUANTS[name].block_size * 2, 21
    w = quantized(name, n, k, rng)
    params = fk.params.qmatmul(QUANTS[name].code, 0, n, k)
    kernel = fk.bindings().lookup(OP.QMATMUL, KEYS[D.F32], fk.Backend.CPU)
    for m in (1, 2, 7, 33, 0):
        a = rng.standard_normal((m, k)).astype(np.float32)
        out = np.full((m, n), np.nan, np.float32)
        kernel(a, w, out=out, params=params)
        check(out, a, w, name, n, kernel.precision)
        assert fk_ops.infer_output_shape(OP.QMATMUL, [a.shape, w.shape], params) == (m, n)


@pytest.mark.parametrize("layout", A_LAYOUTS)
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_rows_from_a_in_every_layout(layout, dtype):
    rng = np.random.default_rng(len(layout) + 70)
    name, n, k = "Q5_0", 11, 64
    w = quantized(name, n, k, rng)
    params = fk.params.qmatmul(QUANTS[name].code, 0, n, k)
    for m in (1, 5):
        a = make_operand((m, k), dtype, layout, rng, special=False)
        got = fk.dispatch(OP.QMATMUL, [a, w], params=params)
        assert got.shape == (m, n)
        check(got, a, w, name, n, fk.bindings().lookup(OP.QMATMUL, KEYS[dtype], fk.Backend.CPU).precision)


def test_rows_from_a_still_checks_c():
    """m = 0 takes A's rows; C must have them (and an explicit m must still equal A's)."""
    w = np.zeros(3 * 34, np.uint8)
    refused(fk.ShapeError, np.ones((2, 32), np.float32), w, fk.params.qmatmul(8, 0, 3, 32), out_shape=(3, 3))
    refused(fk.ShapeError, np.ones((2, 32), np.float32), w, fk.params.qmatmul(8, 0, 3, 32), out_shape=(2, 4))
    refused(fk.ShapeError, np.ones((2, 32), np.float32), w, fk.params.qmatmul(8, 3, 3, 32), out_shape=(3, 3))


def count_run(a, w, name, n, count, count_dtype=D.I64, out=None, m=None):
    k = a.shape[1]
    kernel = fk.bindings().lookup(OP.QMATMUL, COUNT_KEYS[(D.parse(a.dtype), count_dtype)], fk.Backend.CPU)
    if out is None:
        out = np.full((a.shape[0], n), np.nan, np.float32)
    params = fk.params.qmatmul(QUANTS[name].code, a.shape[0] if m is None else m, n, k)
    return kernel(a, w, np.asarray(count, count_dtype.numpy), out=out, params=params), kernel


@pytest.mark.parametrize("count_dtype", [D.I32, D.I64])
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_run_time_row_count(name, dtype, count_dtype):
    """Rows [0, count) are A[:count] @ dequant(W).T with the bits of the plain kernel on A[:count]
    (count 1 takes the streaming path), rows [count, m) are zero; m given or 0."""
    rng = np.random.default_rng(QUANTS[name].code + 900)
    m, n, k = 9, 40, QUANTS[name].block_size * 2
    w = quantized(name, n, k, rng)
    a = make_operand((m, k), dtype, "strided", rng, special=False)
    for count in (0, 1, 2, 5, m):
        for m_param in (m, 0):
            got, kernel = count_run(a, w, name, n, count, count_dtype, m=m_param)
            assert (got[count:] == 0).all()
            if count:
                alone, _ = run(np.ascontiguousarray(a[:count]), w, name, n)
                np.testing.assert_array_equal(got[:count].view(np.uint32), alone.view(np.uint32))
                check(got[:count], a[:count], w, name, n, kernel.precision)


def test_run_time_row_count_strided_output():
    rng = np.random.default_rng(31)
    name, m, n, k = "Q4_1", 6, 7, 64
    w, a = quantized(name, n, k, rng), rng.standard_normal((m, k)).astype(np.float32)
    out = np.full((m, 2 * n), 7.0, np.float32)
    got, kernel = count_run(a, w, name, n, np.array([[3]]), out=out[:, ::-2])
    check(got[:3], a[:3], w, name, n, kernel.precision)
    assert (got[3:] == 0).all() and (out[:, ::2] == 7.0).all()


@pytest.mark.parametrize("case", ["negative", "past m", "two elements", "no element", "count dtype"])
def test_run_time_row_count_refusals_write_nothing(case):
    a, w, count, exc = np.ones((4, 32), np.float32), np.zeros(3 * 34, np.uint8), np.array(2, np.int64), None
    if case == "negative":
        count, exc = np.array(-1, np.int64), fk.KernelIndexError
    elif case == "past m":
        count, exc = np.array(5, np.int64), fk.KernelIndexError
    elif case == "two elements":
        count, exc = np.array([1, 2], np.int64), fk.ShapeError
    elif case == "no element":
        count, exc = np.zeros(0, np.int64), fk.ShapeError
    else:
        count, exc = np.array(2, np.int32), fk.DTypeError
    out = np.full((4, 3), 5.0, np.float32)
    kernel = fk.bindings().lookup(OP.QMATMUL, COUNT_KEYS[(D.F32, D.I64)], fk.Backend.CPU)
    with pytest.raises(exc):
        kernel(a, w, count, out=out, params=fk.params.qmatmul(8, 0, 3, 32))
    assert (out == 5.0).all()
    with pytest.raises(fk.ShapeError):
        fk_ops.infer_output_shape(OP.QMATMUL, [(4, 32), (102,), (2,)], fk.params.qmatmul(8, 0, 3, 32))
    with pytest.raises(fk.DTypeError):
        fk_ops.infer_output_dtype(OP.QMATMUL, [D.F32, D.U8, D.F32], fk.params.qmatmul(8, 0, 3, 32))


@pytest.mark.parametrize("name", ["Q4_0", "Q6_K"])
def test_graph_plan_runs_any_row_count(name):
    """One Graph plan, compiled once for a row capacity of 12: a QMATMUL whose row count is a plan
    input, followed by elementwise work, runs for 1, 3, 7 and 12 rows (and 0)."""
    rng = np.random.default_rng(QUANTS[name].code + 40)
    cap, n, k = 12, 33, QUANTS[name].block_size * 2
    w = quantized(name, n, k, rng)
    g = Graph()
    a, count = g.input((cap, k), D.F32), g.input((), D.I64)
    y = g.qmatmul(a, g.constant(w), count, quant_type=QUANTS[name].code, n=n, k=k)
    plan = g.compile([g.mul(y, g.constant(np.float32(2.0)))])
    kernel = fk.bindings().lookup(OP.QMATMUL, COUNT_KEYS[(D.F32, D.I64)], fk.Backend.CPU)
    a_values = rng.standard_normal((cap, k)).astype(np.float32)
    for rows in (1, 3, 7, cap, 0):
        (got,) = plan.run([a_values, np.array(rows, np.int64)])
        assert got.shape == (cap, n) and (got[rows:] == 0).all()
        check(got[:rows] / 2, a_values[:rows], w, name, n, kernel.precision)
    with pytest.raises(fk.KernelIndexError):
        plan.run([a_values, np.array(cap + 1, np.int64)])


def test_graph_builder_defaults_m_to_the_rows_of_a():
    rng = np.random.default_rng(41)
    name, n, k = "Q8_0", 5, 64
    w = quantized(name, n, k, rng)
    g = Graph()
    a = g.input((3, k), D.BF16)
    y = g.qmatmul(a, g.constant(w), quant_type=QUANTS[name].code, n=n, k=k)
    assert y.shape == (3, n) and y.dtype == D.F32
    a_values = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    (got,) = g.compile([y]).run([a_values])
    check(got, a_values, w, name, n, fk.bindings().lookup(OP.QMATMUL, KEYS[D.BF16], fk.Backend.CPU).precision)


def test_nf4_rows_from_a():
    rng = np.random.default_rng(43)
    n, k = 10, 128
    codes, absmax = nf4_quantized(n, k, rng)
    params = fk.params.nf4_matmul(0, n, k)
    kernel = fk.bindings().lookup(OP.NF4_MATMUL, NF4_KEYS[D.F32], fk.Backend.CPU)
    for m in (1, 6):
        a = rng.standard_normal((m, k)).astype(np.float32)
        got = kernel(a, codes, absmax, out=np.full((m, n), np.nan, np.float32), params=params)
        nf4_check(got, a, codes, absmax, n, kernel.precision)
        assert fk_ops.infer_output_shape(OP.NF4_MATMUL, [a.shape, codes.shape, absmax.shape], params) == (m, n)
    out = np.full((3, n), 5.0, np.float32)
    with pytest.raises(fk.ShapeError):
        kernel(np.ones((2, k), np.float32), codes, absmax, out=out, params=params)
    assert (out == 5.0).all()


# ---- QEMBEDDING -----------------------------------------------------------------------------------
EMB_KEYS = {(ids, out): (D.U8, ids, out) for ids in (D.I32, D.I64) for out in (D.F32, D.BF16)}
COVERED |= {(OP.QEMBEDDING, key) for key in EMB_KEYS.values()}
ID_LAYOUTS = ("contiguous", "strided", "transposed", "offset", "negative", "broadcast")


def embedding_expected(w, ids, name, n, k, out_dtype):
    """gguf's dequantized rows at ids, as F32 bits or rounded once to BF16 (ml_dtypes: to nearest even)."""
    rows = oracles.qembedding_reference(w, ids, QUANTS[name].code, n, k)
    return rows if out_dtype == D.F32 else rows.astype(ml_dtypes.bfloat16)


def assert_same_values(got, expected):
    """Bit for bit, NaN matching NaN (random blocks may hold an f16 NaN or infinity as a scale)."""
    g, e = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert g.shape == e.shape
    assert (np.isnan(g) == np.isnan(e)).all()
    np.testing.assert_array_equal(g[~np.isnan(g)], e[~np.isnan(e)])


def embed(w, ids, name, n, k, out_dtype=D.F32, out=None):
    kernel = fk.bindings().lookup(OP.QEMBEDDING, EMB_KEYS[(D.parse(ids.dtype), out_dtype)], fk.Backend.CPU)
    if out is None:
        out = np.full(ids.shape + (k,), np.nan, out_dtype.numpy)
    return kernel(w, ids, out=out, params=fk.params.qembedding(QUANTS[name].code, n, k)), kernel


@pytest.mark.parametrize("out_dtype", [D.F32, D.BF16])
@pytest.mark.parametrize("ids_dtype", [D.I32, D.I64])
@pytest.mark.parametrize("name", QUANTS)
def test_embedding_matches_gguf_rows(name, ids_dtype, out_dtype):
    """Every quant type, gguf-quantized and random blocks (special f16 scales included), ids
    repeating and in any order: the rows gguf dequantizes, bit for bit (BF16: rounded once)."""
    rng = np.random.default_rng(QUANTS[name].code * 10 + int(ids_dtype) + int(out_dtype))
    n, k = 13, QUANTS[name].block_size * 3
    ids = rng.integers(0, n, (4, 5)).astype(ids_dtype.numpy)
    ids[0, :3] = (0, n - 1, 0)
    for w in (quantized(name, n, k, rng), random_blocks(name, n, k, rng)):
        got, kernel = embed(w, ids, name, n, k, out_dtype)
        assert_same_values(got, embedding_expected(w, ids, name, n, k, out_dtype))
        assert kernel.precision.max_ulp == 0


@pytest.mark.parametrize("layout", ID_LAYOUTS)
@pytest.mark.parametrize("out_layout", ["contiguous", "strided", "negative", "transposed", "offset"])
def test_embedding_id_and_output_layouts(layout, out_layout):
    rng = np.random.default_rng(len(layout) * 13 + len(out_layout))
    name, n, k = "Q4_K", 6, 256
    w = quantized(name, n, k, rng)
    ids = make_operand((3, 4), D.I64, layout, rng, values=rng.integers(0, n, (3, 4)))
    out = make_operand((3, 4, k), D.F32, out_layout, rng, values=np.full((3, 4, k), np.nan, np.float32))
    got, _ = embed(w, ids, name, n, k, out=out)
    assert_same_values(got, embedding_expected(w, np.asarray(ids), name, n, k, D.F32))
    bf = make_operand((3, 4, k), D.BF16, out_layout, rng, values=np.zeros((3, 4, k), ml_dtypes.bfloat16))
    got, _ = embed(w, ids, name, n, k, D.BF16, out=bf)
    assert_same_values(got, embedding_expected(w, np.asarray(ids), name, n, k, D.BF16))


@pytest.mark.parametrize("ids_shape", [(), (1,), (7,), (2, 0), (2, 1, 3)])
def test_embedding_id_shapes_and_strided_table(ids_shape):
    rng = np.random.default_rng(len(ids_shape) + 60)
    name, n, k = "Q5_K", 4, 512
    w = quantized(name, n, k, rng)
    w_strided = np.zeros(3 * w.size, np.uint8)[::-3]
    w_strided[...] = w
    ids = np.asarray(rng.integers(0, n, ids_shape), np.int32)
    got, _ = embed(w_strided, ids, name, n, k)
    assert got.shape == ids_shape + (k,)
    assert_same_values(got, embedding_expected(w, ids, name, n, k, D.F32))


def test_embedding_dispatch_and_shape_rule():
    rng = np.random.default_rng(62)
    name, n, k = "Q6_K", 3, 256
    w, ids = quantized(name, n, k, rng), np.array([2, 0, 2], np.int64)
    params = fk.params.qembedding(QUANTS[name].code, n, k)
    got = fk.dispatch(OP.QEMBEDDING, [w, ids], params=params)
    assert got.dtype == np.float32
    assert_same_values(got, embedding_expected(w, ids, name, n, k, D.F32))
    assert fk_ops.infer_output_shape(OP.QEMBEDDING, [w.shape, (2, 5)], params) == (2, 5, k)
    assert fk_ops.infer_output_dtype(OP.QEMBEDDING, [D.U8, D.I32], params) == D.F32
    with pytest.raises(fk.DTypeError):
        fk_ops.infer_output_dtype(OP.QEMBEDDING, [D.U8, D.F32], params)
    with pytest.raises(fk.ShapeError):
        fk_ops.infer_output_shape(OP.QEMBEDDING, [(w.size + 1,), (2,)], params)
    with pytest.raises(fk.ParamsError):
        fk_ops.infer_output_shape(OP.QEMBEDDING, [w.shape, (2,)], fk.params.qembedding(5, n, k))


def test_embedding_in_a_graph():
    rng = np.random.default_rng(63)
    name, n, k = "Q4_0", 50, 64
    w = quantized(name, n, k, rng)
    g = Graph()
    tokens = g.input((5,), D.I64)
    x = g.qembedding(g.constant(w), tokens, quant_type=QUANTS[name].code, n=n, k=k)
    as_bf16 = g.op(OP.QEMBEDDING, g.constant(w), tokens, params=fk.params.qembedding(QUANTS[name].code, n, k),
                   out_dtype=D.BF16)
    plan = g.compile([x, as_bf16])
    ids = np.array([3, 49, 0, 3, 17], np.int64)
    got, got_bf16 = plan.run([ids])
    assert_same_values(got, embedding_expected(w, ids, name, n, k, D.F32))
    assert_same_values(got_bf16, embedding_expected(w, ids, name, n, k, D.BF16))
    with pytest.raises(fk.KernelIndexError):
        plan.run([np.array([3, 50, 0, 3, 17], np.int64)])


def embedding_refused(exc, w, ids, params, out, ids_dtype=D.I64, out_dtype=D.F32, extra=()):
    before = np.array(out, copy=True)
    kernel = fk.bindings().lookup(OP.QEMBEDDING, EMB_KEYS[(ids_dtype, out_dtype)], fk.Backend.CPU)
    with pytest.raises(exc):
        kernel(w, ids, *extra, out=out, params=params)
    np.testing.assert_array_equal(np.asarray(out), before)


@pytest.mark.parametrize("bad", [-1, 4, 2 ** 31 - 1, -2 ** 31, 2 ** 40])
def test_embedding_out_of_range_id_writes_nothing(bad):
    w, params = np.zeros(4 * 34, np.uint8), fk.params.qembedding(8, 4, 32)
    dtype = D.I32 if -2 ** 31 <= bad < 2 ** 31 else D.I64
    ids = np.array([[0, 1, 2], [3, bad, 0]], dtype.numpy)
    embedding_refused(fk.KernelIndexError, w, ids, params, np.full((2, 3, 32), 5.0, np.float32), ids_dtype=dtype)
    embedding_refused(fk.KernelIndexError, w, ids[:, ::-1], params,
                      np.full((2, 3, 32), 5.0, ml_dtypes.bfloat16), ids_dtype=dtype, out_dtype=D.BF16)


@pytest.mark.parametrize("case", ["out rows", "out k", "out rank", "w bytes", "w rank", "k not whole blocks",
                                  "unknown quant type", "qmatmul params", "no params", "ids dtype", "out dtype",
                                  "read-only out", "out aliases w", "operand count", "too many dims"])
def test_embedding_refusals_write_nothing(case):
    w, ids = np.zeros(4 * 34, np.uint8), np.array([0, 3], np.int64)
    params, out, exc = fk.params.qembedding(8, 4, 32), np.full((2, 32), 5.0, np.float32), fk.ShapeError
    ids_dtype, extra = D.I64, ()
    if case == "out rows":
        out = np.full((3, 32), 5.0, np.float32)
    elif case == "out k":
        out = np.full((2, 64), 5.0, np.float32)
    elif case == "out rank":
        out = np.full((2, 1, 32), 5.0, np.float32)
    elif case == "w bytes":
        w = np.zeros(4 * 34 + 1, np.uint8)
    elif case == "w rank":
        w = np.zeros((4, 34), np.uint8)
    elif case == "k not whole blocks":
        w, params, out = np.zeros(4 * 34, np.uint8), fk.params.qembedding(8, 4, 48), np.full((2, 48), 5.0, np.float32)
    elif case == "unknown quant type":
        params, exc = fk.params.qembedding(9, 4, 32), fk.ParamsError
    elif case == "qmatmul params":
        params, exc = fk.params.qmatmul(8, 2, 4, 32), fk.ParamsError
    elif case == "no params":
        params, exc = None, fk.ParamsError
    elif case == "ids dtype":
        ids_dtype, exc = D.I32, fk.DTypeError
    elif case == "out dtype":
        out, exc = np.full((2, 32), 5.0, np.float64), fk.DTypeError
    elif case == "read-only out":
        out.flags.writeable, exc = False, fk.ReadOnlyError
    elif case == "out aliases w":
        memory = np.zeros(8 + 2 * 32 * 4, np.uint8)           # out's bytes overlap w's last 128
        out, w, exc = memory[8:].view(np.float32).reshape(2, 32), memory[:4 * 34], fk.AliasError
        out[...] = 5.0
    elif case == "operand count":
        extra, exc = (ids,), fk.OperandCountError
    else:
        ids, out = np.zeros((1,) * 7 + (2,), np.int64), np.full((1,) * 7 + (2, 32), 5.0, np.float32)
    embedding_refused(exc, w, ids, params, out, ids_dtype=ids_dtype, extra=extra)


class QembeddingParams(ctypes.Structure):
    """fk_params holding QEMBEDDING's fields (QMATMUL's member of abi.h), padded past the union's size."""
    _fields_ = QmatmulParams._fields_


def test_embedding_table_size_overflow_from_a_c_caller_is_a_shape_error():
    """n rows of k values whose bytes overflow int64 (W one block seen by a C caller): refused
    before anything is written."""
    q = QUANTS["Q8_0"]
    w, ids, out = np.zeros(q.block_bytes, np.uint8), np.zeros(1, np.int64), np.full(32, 5.0, np.float32)
    storages = (Storage * 3)(storage_of(w, D.U8), storage_of(ids, D.I64), storage_of(out, D.F32))
    layouts = (Layout * 3)(layout([q.block_bytes], [1]), layout([1], [1]), layout([1, 32], [32, 1]))
    kind = next(p.kind for p in spec.PARAMS if p.name == "qembedding")
    params = QembeddingParams(kind=kind, quant_type=q.code, m=0, n=2 ** 62, k=32)
    function = kernel_function(OP.QEMBEDDING, [D.U8, D.I64, D.F32])
    inputs = ctypes.cast(storages, ctypes.POINTER(Storage))
    outputs = ctypes.cast(ctypes.byref(storages, 2 * ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
    assert function(inputs, 2, outputs, 1, layouts, ctypes.addressof(params)) == SHAPE_STATUS
    assert (out == 5.0).all()


@pytest.mark.parametrize("count_dtype", [D.I32, D.I64])
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_nf4_run_time_row_count(dtype, count_dtype):
    """[A, codes, absmax, count, C]: rows [0, count) with the plain kernel's bits on A[:count], the
    rest zero; a count outside [0, m] or of more than one element refused before any write."""
    rng = np.random.default_rng(44 + int(dtype) + int(count_dtype))
    m, n, k = 6, 20, 192
    codes, absmax = nf4_quantized(n, k, rng)
    a = make_operand((m, k), dtype, "negative", rng, special=False)
    kernel = fk.bindings().lookup(OP.NF4_MATMUL, NF4_COUNT_KEYS[(dtype, count_dtype)], fk.Backend.CPU)
    for count in (0, 1, 4, m):
        for m_param in (m, 0):
            out = np.full((m, n), np.nan, np.float32)
            kernel(a, codes, absmax, np.asarray(count, count_dtype.numpy), out=out,
                   params=fk.params.nf4_matmul(m_param, n, k))
            assert (out[count:] == 0).all()
            if count:
                alone, _ = nf4_run(np.ascontiguousarray(a[:count]), codes, absmax, n)
                np.testing.assert_array_equal(out[:count].view(np.uint32), alone.view(np.uint32))
                nf4_check(out[:count], a[:count], codes, absmax, n, kernel.precision)
    for count, exc in ((-1, fk.KernelIndexError), (m + 1, fk.KernelIndexError), ([1, 1], fk.ShapeError)):
        out = np.full((m, n), 5.0, np.float32)
        with pytest.raises(exc):
            kernel(a, codes, absmax, np.asarray(count, count_dtype.numpy), out=out, params=fk.params.nf4_matmul(0, n, k))
        assert (out == 5.0).all()
    with pytest.raises(fk.DTypeError):
        fk_ops.infer_output_dtype(OP.NF4_MATMUL, [D.F32, D.U8, D.F32, D.F32], fk.params.nf4_matmul(0, n, k))


def test_nf4_graph_plan_runs_any_row_count():
    rng = np.random.default_rng(45)
    cap, n, k = 10, 24, 128
    codes, absmax = nf4_quantized(n, k, rng)
    g = Graph()
    a, count = g.input((cap, k), D.F32), g.input((1,), D.I32)
    y = g.nf4_matmul(a, g.constant(codes), g.constant(absmax), count, n=n, k=k)
    plan = g.compile([y])
    kernel = fk.bindings().lookup(OP.NF4_MATMUL, NF4_COUNT_KEYS[(D.F32, D.I32)], fk.Backend.CPU)
    a_values = rng.standard_normal((cap, k)).astype(np.float32)
    for rows in (1, 2, 9, cap):
        (got,) = plan.run([a_values, np.array([rows], np.int32)])
        assert (got[rows:] == 0).all()
        nf4_check(got[:rows], a_values[:rows], codes, absmax, n, kernel.precision)


# ---- m = 1 in registers (every GGML type): one F32 order in every ISA form ------------------------
# The AVX-512, AVX2 and portable forms (quant_kernels.h.in) compute the same fused operations in the
# same order, so each result must equal oracles.qgemv_register_bits bit for bit.  This process runs
# the form its CPU picks; FUEL_KERNEL_QGEMV_FORM ("portable", "avx2"), read when the module loads,
# makes a child process run a lower one on the same inputs.
REGISTER_FORMS = oracles.QGEMV_IN_REGISTERS


def register_bits(a, w, name, n):
    return oracles.qgemv_register_bits(np.asarray(a, np.float32)[0], w, QUANTS[name].code, n, a.shape[1])


def assert_register_bits(got, a, w, name, n):
    want = register_bits(a, w, name, n)
    np.testing.assert_array_equal(np.asarray(got, np.float32).reshape(-1).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("name", REGISTER_FORMS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 37, 64])
def test_register_forms_give_the_documented_bits(name, n):
    """Every row count left over by the groups of 4 rows, one block and 11 blocks, gguf's blocks
    and random ones (zero and subnormal scales included)."""
    rng = np.random.default_rng(QUANTS[name].code * 10 + n)
    for k in (QUANTS[name].block_size, 11 * QUANTS[name].block_size):
        for w in (quantized(name, n, k, rng), random_blocks(name, n, k, rng)):
            a = rng.standard_normal((1, k)).astype(np.float32)
            got, _ = run(a, w, name, n)
            assert_register_bits(got, a, w, name, n)


@pytest.mark.parametrize("name", REGISTER_FORMS)
@pytest.mark.parametrize("layout", A_LAYOUTS)
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_register_forms_take_a_in_any_layout(name, layout, dtype):
    """A widened to k contiguous F32 values first, so any layout and BF16 give the bits of that row;
    W strided (gathered) and C strided."""
    rng = np.random.default_rng(len(layout) + QUANTS[name].code)
    n, k = 11, 3 * QUANTS[name].block_size
    w = quantized(name, n, k, rng)
    a = make_operand((1, k), dtype, layout, rng, special=False)
    got, kernel = run(a, w, name, n)
    assert_register_bits(got, a, w, name, n)
    check(got, a, w, name, n, kernel.precision)
    w_strided = np.zeros(2 * w.size, np.uint8)[::2]
    w_strided[...] = w
    out = np.full((1, 2 * n), 7.0, np.float32)
    run(a, w_strided, name, n, out=out[:, ::-2])
    assert_register_bits(out[:, ::-2], a, w, name, n)
    assert (out[:, ::2] == 7.0).all()


@pytest.mark.parametrize("name", REGISTER_FORMS)
def test_register_forms_at_every_thread_count_and_run_time_count(name):
    """600 rows: 18 full chunks of 32 and one of 24, over 1, 2 and 3 threads; then a run-time row
    count of 1 (the streaming path) out of 3 rows of A."""
    rng = np.random.default_rng(QUANTS[name].code + 77)
    n, k = 600, 1024
    w = random_blocks(name, n, k, rng)
    a = rng.standard_normal((1, k)).astype(np.float32)
    before = fk.get_num_threads()
    try:
        for threads in (1, 2, 3):
            fk.set_num_threads(threads)
            got, _ = run(a, w, name, n)
            assert_register_bits(got, a, w, name, n)
    finally:
        fk.set_num_threads(before)
    a3 = rng.standard_normal((3, k)).astype(np.float32)
    got, _ = count_run(a3, w, name, n, 1, m=0)
    assert_register_bits(got[:1], a3[:1], w, name, n)
    assert (got[1:] == 0).all()


CHILD = """
import sys
import numpy as np
import fuel_kernel as fk
F32, U8 = fk.DType.F32, fk.DType.U8
cases = np.load(sys.argv[1])
out = {}
for key in cases.files:
    if key.startswith("a_"):
        tag = key[2:]
        a, w, n = cases[key], cases["w_" + tag], int(cases["n_" + tag])
        fk.set_num_threads(int(cases["threads_" + tag]))
        c = np.full((1, n), np.nan, np.float32)
        if "absmax_" + tag in cases.files:          # NF4_MATMUL: w holds the codes
            kernel = fk.bindings().lookup(fk.OpKind.NF4_MATMUL, [F32, U8, F32, F32], fk.Backend.CPU)
            out[tag] = kernel(a, w, cases["absmax_" + tag], out=c, params=fk.params.nf4_matmul(1, n, a.shape[1]))
        else:
            kernel = fk.bindings().lookup(fk.OpKind.QMATMUL, [F32, U8, F32], fk.Backend.CPU)
            out[tag] = kernel(a, w, out=c, params=fk.params.qmatmul(int(cases["code_" + tag]), 1, n, a.shape[1]))
np.savez(sys.argv[2], **out)
"""


@pytest.mark.parametrize("form", ["portable", "avx2"])
def test_every_form_runs_on_this_machine(form, tmp_path):
    """A child process with FUEL_KERNEL_QGEMV_FORM=form (the portable form; AVX2, which an AVX-512
    CPU would not pick, and which a CPU without it replaces by the portable one) gives the
    documented bits, and the same as this process's form; NF4_MATMUL's too."""
    rng = np.random.default_rng(404)
    cases = {}
    for name in (*REGISTER_FORMS, "NF4"):
        bs = spec.NF4_BLOCK if name == "NF4" else QUANTS[name].block_size
        for n, k, threads in ((1, bs, 1), (7, 11 * bs, 1), (37, 4096, 2), (600, 1024, 3)):
            tag = f"{name}_{n}_{k}"
            cases.update({"a_" + tag: rng.standard_normal((1, k)).astype(np.float32), "n_" + tag: n,
                          "threads_" + tag: threads})
            if name == "NF4":
                cases["w_" + tag], cases["absmax_" + tag] = nf4_random(n, k, rng)
            else:
                cases.update({"w_" + tag: random_blocks(name, n, k, rng), "code_" + tag: QUANTS[name].code})
    np.savez(tmp_path / "cases.npz", **cases)
    env = child_env()
    env["FUEL_KERNEL_QGEMV_FORM"] = form
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "cases.npz"), str(tmp_path / "out.npz")],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    child = np.load(tmp_path / "out.npz")
    assert len(child.files) == (len(REGISTER_FORMS) + 1) * 4
    for tag in child.files:
        name = tag.split("_")[0] if tag.startswith("NF4") else tag[:4]
        a, w, n = cases["a_" + tag], cases["w_" + tag], int(cases["n_" + tag])
        if name == "NF4":
            absmax = cases["absmax_" + tag]
            assert_nf4_register_bits(child[tag], a, w, absmax, n)
            here, _ = nf4_run(a, w, absmax, n)
        else:
            assert_register_bits(child[tag], a, w, name, n)
            here, _ = run(a, w, name, n)
        np.testing.assert_array_equal(child[tag].view(np.uint32), here.view(np.uint32))


# ---- NF4_MATMUL m = 1 in registers: the same three forms, NF4's lane order ---------------------
def nf4_random(n, k, rng):
    """Random codes (every nibble value) and absmax of n rows of k values: |N(0, 1)| with a zero
    and a subnormal absmax among them."""
    codes = rng.integers(0, 256, n * k // 2, dtype=np.uint8)
    absmax = np.abs(rng.standard_normal(n * k // spec.NF4_BLOCK)).astype(np.float32)
    absmax[0] = 0.0
    absmax[-1] = np.float32(3e-39)
    return codes, absmax


def assert_nf4_register_bits(got, a, codes, absmax, n):
    want = oracles.nf4_gemv_register_bits(np.asarray(a, np.float32)[0], codes, absmax, n, a.shape[1])
    np.testing.assert_array_equal(np.asarray(got, np.float32).reshape(-1).view(np.uint32), want.view(np.uint32))


def test_nf4_lane_order_pairs_a_code_bytes_nibbles():
    """Lane l of each 32 values holds value 2l (the high nibble of byte l) and lane 16 + l value
    2l + 1 (its low nibble)."""
    order = oracles.nf4_lane_order(np.arange(64))
    np.testing.assert_array_equal(order[:32], np.r_[np.arange(0, 32, 2), np.arange(1, 32, 2)])
    np.testing.assert_array_equal(order[32:], order[:32] + 32)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 37, 64])
def test_nf4_register_forms_give_the_documented_bits(n):
    """Every row count left over by the groups of 4 rows; 1, 3 and 11 blocks (k an odd number of
    blocks: not a multiple of 128 or 256) and k = 4096, the claim's largest; NumPy-quantized weights
    and random codes, zero and subnormal absmax; within the claim against the code-book reference too."""
    rng = np.random.default_rng(900 + n)
    for k in (64, 3 * 64, 11 * 64, 4096):
        for codes, absmax in (nf4_quantized(n, k, rng), nf4_random(n, k, rng)):
            a = rng.standard_normal((1, k)).astype(np.float32)
            got, kernel = nf4_run(a, codes, absmax, n)
            assert_nf4_register_bits(got, a, codes, absmax, n)
            nf4_check(got, a, codes, absmax, n, kernel.precision)


@pytest.mark.parametrize("layout", A_LAYOUTS)
@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_nf4_register_forms_take_a_in_any_layout(layout, dtype):
    """A widened (and put in the lane order) first, so any layout and BF16 give the bits of that
    row; codes and absmax strided (gathered) and C strided."""
    rng = np.random.default_rng(910 + len(layout) + int(dtype))
    n, k = 11, 5 * 64
    codes, absmax = nf4_quantized(n, k, rng)
    a = make_operand((1, k), dtype, layout, rng, special=False)
    got, kernel = nf4_run(a, codes, absmax, n)
    assert_nf4_register_bits(got, a, codes, absmax, n)
    nf4_check(got, a, codes, absmax, n, kernel.precision)
    codes_strided = np.zeros(2 * codes.size, np.uint8)[::-2]
    codes_strided[...] = codes
    absmax_strided = np.zeros(3 * absmax.size, np.float32)[1::3]
    absmax_strided[...] = absmax
    out = np.full((1, 2 * n), 7.0, np.float32)
    nf4_run(a, codes_strided, absmax_strided, n, out=out[:, ::-2])
    assert_nf4_register_bits(out[:, ::-2], a, codes, absmax, n)
    assert (out[:, ::2] == 7.0).all()


def test_nf4_register_forms_at_every_thread_count_and_run_time_count():
    """600 rows: 18 full chunks of 32 and one of 24, over 1, 2 and 3 threads; then a run-time row
    count of 1 (the streaming path) out of 3 rows of A, with each count operand dtype."""
    rng = np.random.default_rng(920)
    n, k = 600, 1024
    codes, absmax = nf4_random(n, k, rng)
    a = rng.standard_normal((1, k)).astype(np.float32)
    before = fk.get_num_threads()
    try:
        for threads in (1, 2, 3):
            fk.set_num_threads(threads)
            got, kernel = nf4_run(a, codes, absmax, n)
            assert_nf4_register_bits(got, a, codes, absmax, n)
    finally:
        fk.set_num_threads(before)
    nf4_check(got, a, codes, absmax, n, kernel.precision)
    a3 = rng.standard_normal((3, k)).astype(np.float32)
    for count_dtype in (D.I32, D.I64):
        kernel = fk.bindings().lookup(OP.NF4_MATMUL, NF4_COUNT_KEYS[(D.F32, count_dtype)], fk.Backend.CPU)
        out = np.full((3, n), np.nan, np.float32)
        kernel(a3, codes, absmax, np.asarray(1, count_dtype.numpy), out=out, params=fk.params.nf4_matmul(0, n, k))
        assert_nf4_register_bits(out[:1], a3[:1], codes, absmax, n)
        assert (out[1:] == 0).all()
