"""QMATMUL: A @ dequant(W).T for every GGML quant type of spec.QUANT_TYPES, checked against gguf's
NumPy dequantization followed by an F64 matmul, within the bindings' precision claim: blocks made
by gguf's quantize where it has one and random well-formed blocks (random bytes, finite f16
scales) for every type; m = 1 (the streaming path) and m > 1 (the GEMM path); A in every layout and
BF16; strided W and C; bits independent of the thread count; every refusal before any write."""
import ctypes

import gguf
import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
import oracles
from capi import Layout, Storage, kernel_function, layout, storage_of
from fuel_kernel import ops as fk_ops, spec
from fuel_kernel.errors import STATUS_ERRORS
from support import make_operand

OP = fk.OpKind
D = fk.DType
KEYS = {D.F32: (D.F32, D.U8, D.F32), D.BF16: (D.BF16, D.U8, D.F32)}
COVERED = {(OP.QMATMUL, key) for key in KEYS.values()}
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
    blocks = 3 if QUANTS[name].block_size == 256 else 11        # 11 blocks: GEMM K blocks cut quant blocks
    k, n = QUANTS[name].block_size * blocks, 37
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
COVERED |= {(OP.NF4_MATMUL, key) for key in NF4_KEYS.values()}


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
    n, k = 45, 64 * 5                               # 5 blocks per row: GEMM K blocks cut NF4 blocks
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
