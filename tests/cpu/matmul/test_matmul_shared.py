"""The float GEMM engine on several threads (gemm_core.h.in, fk_gemm_shared_*): B (and A, unless its
rows are read in place: F32/F64 with unit column stride, all but a last partial tile) packed once
into shared panels, blocks of C computed from them.  Every thread count gives the one-thread
(serial engine) bits for every float dtype, operand layout, output layout (in place or through the
compute-type buffer), row count, bias (FUSED_LINEAR) and FP8 input; and the products are right
against the F64 oracle within each binding's claim."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import _dispatch, spec
from oracles import matmul_reference
from support import gemm_k_blocks, random_values

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU
FLOATS = tuple(D[name] for name in spec.FLOAT)
THREADS = (2, 3, 7, 16)
# (m, k, n): rows and columns not multiples of MR (8) and NR (32, 16); k of one, two and more K
# blocks (F32 KC = 768: 1700 is three blocks of 567; F64 KC = 256: 300 is two of 150, 1700 seven of
# 243); each at least the shared engine's flops
SHAPES = [(200, 300, 150), (37, 1700, 130), (130, 64, 1000), (8, 700, 900)]
LAYOUTS = ("contiguous", "a_transposed", "b_transposed", "negative", "offset", "c_strided")


def test_the_shapes_span_one_and_several_k_blocks():
    for dtype in FLOATS:
        blocks = [gemm_k_blocks(dtype, k) for _, k, _ in SHAPES]
        assert min(blocks) == 1 and max(blocks) >= 3, (dtype, blocks)


def native(op, dtypes):
    kernel, = [k for k in fk.bindings().alternatives(op, dtypes, CPU) if k.source == "native"]
    return kernel


def operands(m, k, n, dtype, layout, rng):
    """A [m, k], B [k, n] and C [m, n] views laid out as `layout` (C's root returned too)."""
    a = random_values((m, k), dtype, rng, False)
    b = random_values((k, n), dtype, rng, False)
    if layout == "a_transposed":
        a = np.ascontiguousarray(a.T).T
    elif layout == "b_transposed":
        b = np.ascontiguousarray(b.T).T
    elif layout == "negative":
        a = np.ascontiguousarray(a[::-1])[::-1]
        b = np.ascontiguousarray(b[:, ::-1])[:, ::-1]
    elif layout == "offset":
        a = np.concatenate([a, a[:3]])[:m]
        grown = np.zeros((k + 1, n + 5), b.dtype)
        grown[1:, 5:] = b
        b = grown[1:, 5:]
    root = np.full((m, 2 * n if layout == "c_strided" else n), np.nan, dtype.numpy)
    c = root[:, ::2] if layout == "c_strided" else root
    return a, b, c, root


def same_bits_on_every_count(call):
    """call() -> array, run on 1 thread and on THREADS; every result the same bytes.  Returns it."""
    with fk.threads(1):
        want = np.array(call())
    for threads in THREADS:
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            got = np.array(call())
        assert _dispatch._parallel_calls() > calls, "the product ran on one thread"
        assert got.tobytes() == want.tobytes(), f"{threads} threads differ from 1"
    return want


def test_more_threads_than_block_ranges_same_bits(rng):
    """Past FK_GEMM_MAX_CLAIMS (64) threads, several tasks start on one range of C's blocks and
    every block is still computed once: 70 threads (on however many cores) give the one-thread
    bits."""
    a, b, c, _ = operands(520, 300, 2000, D.F32, "contiguous", rng)
    mm = native(OP.MATMUL, [D.F32] * 3)
    with fk.threads(1):
        want = np.array(mm(a, b, out=c))
    calls = _dispatch._parallel_calls()
    with fk.threads(70):
        got = np.array(mm(a, b, out=np.full_like(c, np.nan)))
    assert _dispatch._parallel_calls() > calls, "the product ran on one thread"
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_same_bits_for_every_thread_count(dtype, layout, rng):
    kernel = native(OP.MATMUL, [dtype] * 3)
    for m, k, n in SHAPES:
        a, b, c, root = operands(m, k, n, dtype, layout, rng)

        def call():
            root[...] = np.nan
            kernel(a, b, out=c)
            return root
        got = same_bits_on_every_count(call)
        if layout == "c_strided":
            assert np.isnan(got[:, 1::2].astype(np.float64)).all(), "wrote between the output's columns"
        exp = matmul_reference(a, b)
        mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        err = np.abs(np.asarray(c).astype(np.float64) - exp)
        assert (err <= kernel.precision.max_rel * mag + 1e-300).all(), (m, k, n, layout)


@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_batched_and_row_count_products_same_bits(dtype, rng):
    """A batch of products (one shared-panel run each) and a row count in the params (130 of 384
    rows computed, the rest zero)."""
    kernel = native(OP.MATMUL, [dtype] * 3)
    a = random_values((3, 120, 200), dtype, rng, False)
    b = random_values((200, 260), dtype, rng, False)
    got = same_bits_on_every_count(lambda: kernel(a, b))
    exp = matmul_reference(a, b)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert (np.abs(got.astype(np.float64) - exp) <= kernel.precision.max_rel * mag + 1e-300).all()
    a = random_values((384, 300), dtype, rng, False)
    params = fk.params.matmul(384, 260, 300, m_compute=fk.MatmulM.rows(130))
    b_rows = random_values((300, 260), dtype, rng, False)
    got = same_bits_on_every_count(lambda: kernel(a, b_rows, params=params))
    assert not got[130:].astype(np.float64).any()
    exp = matmul_reference(a[:130], b_rows)
    mag = np.abs(a[:130].astype(np.float64)) @ np.abs(b_rows.astype(np.float64))
    assert (np.abs(got[:130].astype(np.float64) - exp) <= kernel.precision.max_rel * mag + 1e-300).all()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short_name)
def test_fused_linear_same_bits_for_every_thread_count(dtype, rng):
    """The bias enters the first K block's tiles on every thread count, as on one."""
    kernel = native(OP.FUSED_LINEAR, [dtype] * 4)
    x = random_values((150, 300), dtype, rng, False)
    w = random_values((300, 170), dtype, rng, False)
    bias = random_values((170,), dtype, rng, False)
    got = same_bits_on_every_count(lambda: kernel(x, w, bias))
    exp = matmul_reference(x, w) + bias.astype(np.float64)
    mag = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)) + np.abs(bias.astype(np.float64))
    assert (np.abs(got.astype(np.float64) - exp) <= kernel.precision.max_rel * mag + 1e-300).all()


@pytest.mark.parametrize("output", [D.F32, D.BF16], ids=lambda d: d.short_name)
def test_float8_products_same_bits_for_every_thread_count(output, rng):
    """FP8 inputs decoded while packing, each block scaled and rounded on its own thread."""
    kernel, = fk.bindings().alternatives(OP.MATMUL, [D.F8E4M3, D.F8E5M2, output], CPU)
    a = random_values((120, 300), D.F8E4M3, rng, False)
    b = random_values((300, 130), D.F8E5M2, rng, False)
    params = fk.params.matmul(120, 130, 300, scale_a=0.5, scale_b=3.0)
    got = same_bits_on_every_count(lambda: kernel(a, b, params=params))
    exp = 1.5 * matmul_reference(a, b)
    mag = 1.5 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert (np.abs(got.astype(np.float64) - exp) <= kernel.precision.max_rel * mag + 1e-300).all()


@pytest.mark.parametrize("dtype", [D.F32, D.F64, D.BF16], ids=lambda d: d.short_name)
def test_large_single_block_products_streamed_give_the_same_bits(dtype, rng):
    """A C of 4 MB or more written in one K block goes to memory by non-temporal stores when its rows
    start on 64-byte lines (gemm_core.h.in, FK_GEMM_STREAM): the same values as an offset C (plain
    stores) on 1 and 3 threads, and right against the oracle.  BF16 rounds through a buffer and
    never streams; it runs the same shape for the comparison."""
    kernel = native(OP.MATMUL, [dtype] * 3)
    m, k, n = (1100, 256, 1024) if dtype != D.F64 else (800, 128, 800)   # rows of 4096 and 6400 bytes
    a = random_values((m, k), dtype, rng, False)
    b = random_values((k, n), dtype, rng, False)
    raw = np.zeros(m * n * dtype.numpy.itemsize + 64, np.uint8)
    start = -raw.ctypes.data % 64
    aligned = raw[start:start + m * n * dtype.numpy.itemsize].view(dtype.numpy).reshape(m, n)
    assert aligned.ctypes.data % 64 == 0 and (aligned.nbytes >= 4 << 20 or dtype == D.BF16)
    shifted_root = np.zeros(m * n + 1, dtype.numpy)
    shifted = shifted_root[1:].reshape(m, n)                     # rows off the 64-byte lines: plain stores
    results = []
    for threads in (1, 3):
        with fk.threads(threads):
            kernel(a, b, out=aligned)
            kernel(a, b, out=shifted)
        results += [aligned.copy(), shifted.copy()]
    assert all(r.tobytes() == results[0].tobytes() for r in results[1:])
    exp = matmul_reference(a, b)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert (np.abs(results[0].astype(np.float64) - exp) <= kernel.precision.max_rel * mag + 1e-300).all()
