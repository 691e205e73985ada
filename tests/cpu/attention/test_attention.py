"""CPU attention kernels (fuel_kernel/cpu/_attention) against plain NumPy implementations with the
same masking rules: ROPE (both layouts), FLASH_ATTN (causal, windows, softcap, grouped-query heads),
PAGED_ATTN (block table, context lengths, ALiBi; one decode query or a chunk of queries per sequence).  Tolerances are the kernels' precision claims."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
from oracles import attention_reference, f64, paged_reference, rope_reference
from support import FLOAT_DTYPES, LAYOUTS, make_operand, np_dtype

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU

# abs error bound as a fraction of max|v|: the precision claim registered with each binding
ATTN_TOL = {d: fk.bindings().lookup(OP.FLASH_ATTN, [d] * 4, CPU).precision.max_abs for d in FLOAT_DTYPES}
# rope: error bound as a fraction of |a c| + |b s|
ROPE_TOL = {D.F16: 2.0 ** -10, D.BF16: 2.0 ** -7, D.F32: 2.0 ** -22, D.F64: 2.0 ** -51}


def kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), CPU)


def test_paged_claims_match_flash_claims():
    for d in FLOAT_DTYPES:
        paged = kernel(OP.PAGED_ATTN, [d, d, d, D.I32, D.I32, D.F32, d]).precision
        assert paged.max_abs == ATTN_TOL[d] > 0


# ---- ROPE ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope(dtype, layout, interleaved, rng):
    x = make_operand((2, 3, 5, 6), dtype, layout, rng, special=False)
    angles = rng.uniform(-3, 3, (5, 3))
    cos = make_operand((5, 3), dtype, layout, rng, values=np.cos(angles))
    sin = make_operand((5, 3), dtype, layout, rng, values=np.sin(angles))
    params = P.rope(interleaved) if interleaved else None
    out = kernel(OP.ROPE, [dtype] * 4)(x, cos, sin, params=params)
    expected, scale = rope_reference(x, cos, sin, interleaved)
    assert (np.abs(f64(out) - expected) <= ROPE_TOL[dtype] * scale + 1e-300).all()


def test_rope_in_place_and_errors(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    cos, sin = np.cos(x[:, :4]), np.sin(x[:, :4])
    expected, _ = rope_reference(x, cos, sin, False)
    k = kernel(OP.ROPE, [D.F32] * 4)
    k(x, cos, sin, out=x)
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(fk.ShapeError):
        k(np.zeros((4, 7), np.float32), cos, sin)
    with pytest.raises(fk.ShapeError):
        k(np.zeros((4, 8), np.float32), cos[:3], sin[:3], out=np.zeros((4, 8), np.float32))
    with pytest.raises(fk.DTypeError):
        k(np.zeros((4, 8)), cos, sin)


# ---- FLASH_ATTN -----------------------------------------------------------------------------------------
FLASH_CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, Dv, causal, window_left, window_right, softcap)
    (1, 2, 2, 7, 7, 8, 8, False, -1, -1, 0.0),
    (2, 4, 2, 70, 130, 24, 40, True, -1, -1, 0.0),
    (1, 3, 1, 129, 129, 64, 64, True, 30, -1, 5.0),
    (1, 2, 2, 100, 64, 17, 33, False, 10, 3, 0.0),
    (1, 6, 3, 65, 200, 16, 16, False, -1, 5, 2.0),
    (1, 1, 1, 9, 3, 4, 4, True, -1, -1, 0.0),      # rows before the first key see nothing -> 0
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", FLASH_CASES)
def test_flash_attn(dtype, case, rng):
    b, hq, hkv, sq, sk, d, dv, causal, wl, wr, softcap = case
    q = make_operand((b, hq, sq, d), dtype, "contiguous", rng, special=False)
    k = make_operand((b, hkv, sk, d), dtype, "contiguous", rng, special=False)
    v = make_operand((b, hkv, sk, dv), dtype, "contiguous", rng, special=False)
    scale = d ** -0.5 / 4                     # inputs are N(0, 16): keep the scores moderate
    p = P.flash_attn(scale, causal=causal, softcap=softcap, window_left=wl, window_right=wr)
    out = kernel(OP.FLASH_ATTN, [dtype] * 4)(q, k, v, params=p)
    expected, _ = attention_reference(q, k, v, scale, causal, wl, wr, softcap)
    assert out.shape == (b, hq, sq, dv)
    err = np.abs(f64(out) - expected).max()
    assert err <= ATTN_TOL[dtype] * np.abs(f64(v)).max(), err


@pytest.mark.parametrize("dtype", [D.F32, D.F64, D.BF16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flash_attn_layouts(dtype, layout, rng):
    # head dim 20: the F32 K^T packing's 16 x 16 transposes and its column tail; 70 keys: its key tail
    q = make_operand((2, 4, 33, 20), dtype, layout, rng, special=False)
    k = make_operand((2, 2, 70, 20), dtype, layout, rng, special=False)
    v = make_operand((2, 2, 70, 20), dtype, layout, rng, special=False)
    out = make_operand((2, 4, 33, 20), dtype, "transposed" if layout == "transposed" else "strided", rng)
    p = P.flash_attn(0.1, causal=True, window_left=40)
    kernel(OP.FLASH_ATTN, [dtype] * 4)(q, k, v, out=out, params=p)
    expected, _ = attention_reference(q, k, v, 0.1, True, 40)
    assert np.abs(f64(out) - expected).max() <= ATTN_TOL[dtype] * np.abs(f64(v)).max()


def test_flash_attn_fully_masked_rows_are_zero(rng):
    q = rng.standard_normal((1, 1, 6, 4)).astype(np.float32)
    k = rng.standard_normal((1, 1, 2, 4)).astype(np.float32)
    v = rng.standard_normal((1, 1, 2, 4)).astype(np.float32)
    out = fk.dispatch(OP.FLASH_ATTN, [q, k, v], params=P.flash_attn(0.5, causal=True))
    assert (out[0, 0, :4] == 0).all() and np.isfinite(out).all()


def test_flash_attn_errors(rng):
    k4 = kernel(OP.FLASH_ATTN, [D.F32] * 4)
    q = np.zeros((1, 3, 4, 8), np.float32)
    kv = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(fk.ShapeError):               # 3 query heads, 2 kv heads
        k4(q, kv, kv, out=np.zeros((1, 3, 4, 8), np.float32), params=P.flash_attn(1.0))
    with pytest.raises(fk.ShapeError):
        k4(q[:, :2], kv, kv[..., :3, :], out=np.zeros((1, 2, 4, 8), np.float32), params=P.flash_attn(1.0))
    with pytest.raises(fk.ParamsError):
        k4(q[:, :2], kv, kv, out=np.zeros((1, 2, 4, 8), np.float32))
    with pytest.raises(fk.DTypeError):
        k4(q.astype(np.float64), kv, kv, params=P.flash_attn(1.0))
    out = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(fk.AliasError):
        k4(out, kv, kv, out=out, params=P.flash_attn(1.0))
    with pytest.raises(fk.ShapeError):
        k4(q[:, :2], kv, kv, out=np.zeros((1, 2, 4, 7), np.float32), params=P.flash_attn(1.0))
    read_only = np.full((1, 2, 4, 8), 3.0, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(fk.ReadOnlyError):
        k4(q[:, :2], kv, kv, out=read_only, params=P.flash_attn(1.0))
    with pytest.raises(fk.OperandCountError):
        k4(q[:, :2], kv, out=np.zeros((1, 2, 4, 8), np.float32), params=P.flash_attn(1.0))


# ---- PAGED_ATTN ----------------------------------------------------------------------------------------
def paged_operands(dtype, rng, layout="contiguous", n_seqs=3, hq=4, hkv=2, d=16, dv=8, block_size=5, n_blocks=11,
                   max_blocks=4, context_lens=(7, 0, 17)):
    q = make_operand((n_seqs, hq, d), dtype, layout, rng, special=False)
    k_cache = make_operand((n_blocks, block_size, hkv, d), dtype, layout, rng, special=False)
    v_cache = make_operand((n_blocks, block_size, hkv, dv), dtype, layout, rng, special=False)
    table = np.stack([rng.permutation(n_blocks)[:max_blocks] for _ in range(n_seqs)]).astype(np.int32)
    block_table = make_operand(table.shape, D.I32, layout, rng, values=table)
    lens = make_operand((n_seqs,), D.I32, "contiguous", rng, values=np.array(context_lens, np.int32))
    return q, k_cache, v_cache, block_table, lens


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("softcap,window_left", [(0.0, -1), (3.0, 6)])
def test_paged_attn(dtype, alibi, softcap, window_left, rng):
    q, k_cache, v_cache, block_table, lens = paged_operands(dtype, rng)
    slopes = (2.0 ** -np.arange(1, 5)).astype(np.float32) if alibi else np.zeros(0, np.float32)
    p = P.paged_attn(0.05, block_size=5, softcap=softcap, window_left=window_left)
    out = kernel(OP.PAGED_ATTN, [dtype, dtype, dtype, D.I32, D.I32, D.F32, dtype])(
        q, k_cache, v_cache, block_table, lens, slopes, params=p)
    expected, _ = paged_reference(q, k_cache, v_cache, block_table, lens, slopes, 0.05, 5, softcap, window_left)
    assert out.shape == expected.shape
    assert np.abs(f64(out) - expected).max() <= ATTN_TOL[dtype] * np.abs(f64(v_cache)).max()
    assert (f64(out[1]) == 0).all()                  # context length 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_paged_attn_layouts(layout, rng):
    q, k_cache, v_cache, block_table, lens = paged_operands(D.F32, rng, layout)
    slopes = make_operand((4,), D.F32, layout, rng, values=np.array([0.5, 0.25, 0.1, 0.0]))
    out = make_operand((3, 4, 8), D.F32, "strided", rng)
    p = P.paged_attn(0.05, block_size=5)
    fk.dispatch(OP.PAGED_ATTN, [q, k_cache, v_cache, block_table, lens, slopes], [out], params=p)
    expected, _ = paged_reference(q, k_cache, v_cache, block_table, lens, slopes, 0.05, 5, 0.0, -1)
    assert np.abs(f64(out) - expected).max() <= ATTN_TOL[D.F32] * np.abs(f64(v_cache)).max()


def test_paged_attn_bad_block_index_raises_and_writes_nothing(rng):
    q, k_cache, v_cache, block_table, lens = paged_operands(D.F32, rng)
    block_table = np.array(block_table)
    block_table[2, 3] = 11                             # token 15 of sequence 2 (context 17) needs block 3
    out = np.full((3, 4, 8), 7.0, np.float32)
    k = kernel(OP.PAGED_ATTN, [D.F32, D.F32, D.F32, D.I32, D.I32, D.F32, D.F32])
    with pytest.raises(IndexError, match=r"block index 11 at position \(2, 3\)"):
        k(q, k_cache, v_cache, block_table, lens, np.zeros(0, np.float32), out=out, params=P.paged_attn(1.0, 5))
    assert (out == 7.0).all()
    block_table[2, 3] = 0
    block_table[1, :] = -5                             # sequence 1 has context 0: its row is never read
    k(q, k_cache, v_cache, block_table, lens, np.zeros(0, np.float32), out=out, params=P.paged_attn(1.0, 5))
    with pytest.raises(IndexError, match=r"context length 21 at position \(0,\)"):
        k(q, k_cache, v_cache, block_table, np.array([21, 0, 1], np.int32), np.zeros(0, np.float32),
          out=out, params=P.paged_attn(1.0, 5))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("hq,hkv", [(4, 4), (6, 2)])
@pytest.mark.parametrize("alibi,softcap,window_left", [(False, 0.0, -1), (True, 3.0, 700)])
def test_paged_decode_over_several_key_splits(dtype, hq, hkv, alibi, softcap, window_left, rng):
    """Decode splits each sequence's keys into 512-key parts merged by the log-sum-exp rule: contexts on
    both sides of the part boundaries (and of a window that starts inside a part) match the oracle, a
    NaN key makes its sequence's row NaN, and every thread count gives the same bits."""
    lens = (0, 1, 511, 512, 513, 1300)
    q, k_cache, v_cache, block_table, context = paged_operands(
        dtype, rng, n_seqs=len(lens), hq=hq, hkv=hkv, d=16, dv=8, block_size=16, n_blocks=90, max_blocks=82,
        context_lens=lens)
    slopes = (2.0 ** -np.arange(1, hq + 1) / 8).astype(np.float32) if alibi else np.zeros(0, np.float32)
    p = P.paged_attn(0.05, block_size=16, softcap=softcap, window_left=window_left)
    k = kernel(OP.PAGED_ATTN, PAGED_KEY(dtype))
    outs = []
    for threads in (1, 2, 3):
        with fk.threads(threads):
            outs.append(k(q, k_cache, v_cache, block_table, context, slopes, params=p))
    for other in outs[1:]:
        np.testing.assert_array_equal(other.view(np.uint8), outs[0].view(np.uint8))
    expected, _ = paged_reference(q, k_cache, v_cache, block_table, context, slopes, 0.05, 16, softcap, window_left)
    assert np.abs(f64(outs[0]) - expected).max() <= ATTN_TOL[dtype] * np.abs(f64(v_cache)).max()
    assert (f64(outs[0][0]) == 0).all()               # context length 0
    # a NaN in kv head 0's key at one cache row (token 1100 of the last sequence, in its third part)
    # makes the rows of exactly the sequences that see that cache row, for kv head 0's query heads, NaN
    bad = np.array(k_cache, copy=True)
    table = np.asarray(block_table)
    where = (table[5, 1100 // 16], 1100 % 16)
    bad[where[0], where[1], 0, 0] = np.nan
    nan_out = f64(k(q, bad, v_cache, block_table, context, slopes, params=p))
    for n, length in enumerate(lens):
        first = max(length - 1 - window_left, 0) if window_left >= 0 else 0
        sees = any((table[n, t // 16], t % 16) == where for t in range(first, length))
        assert np.isnan(nan_out[n, :hq // hkv]).all() == sees and not np.isnan(nan_out[n, hq // hkv:]).any()
        assert sees or not np.isnan(nan_out[n]).any()
    assert np.isnan(nan_out[5, 0]).all()


def test_paged_attn_shape_and_params_errors(rng):
    q, k_cache, v_cache, block_table, lens = paged_operands(D.F32, rng)
    k = kernel(OP.PAGED_ATTN, [D.F32, D.F32, D.F32, D.I32, D.I32, D.F32, D.F32])
    out = np.zeros((3, 4, 8), np.float32)
    with pytest.raises(fk.ParamsError):                # block size disagrees with the caches
        k(q, k_cache, v_cache, block_table, lens, np.zeros(0, np.float32), out=out, params=P.paged_attn(1.0, 4))
    with pytest.raises(fk.ShapeError):                 # alibi slopes of the wrong length
        k(q, k_cache, v_cache, block_table, lens, np.zeros(3, np.float32), out=out, params=P.paged_attn(1.0, 5))
    with pytest.raises(fk.DTypeError):
        k(q, k_cache, v_cache, block_table.astype(np.int64), lens, np.zeros(0, np.float32), out=out,
          params=P.paged_attn(1.0, 5))
    with pytest.raises(fk.OperandCountError):
        k(q, k_cache, v_cache, block_table, lens, out=out, params=P.paged_attn(1.0, 5))


# ---- PAGED_ATTN with a chunk of queries per sequence (chunked prefill) --------------------------------
PAGED_KEY = lambda d: [d, d, d, D.I32, D.I32, D.F32, d]


def chunk_operands(dtype, rng, layout="contiguous", sq=3, hq=4, hkv=2, lens=(7, 3, 17), d=16, dv=8, block_size=5,
                   n_blocks=12, max_blocks=4):
    """q [N, Sq, Hq, D] against paged caches; the context lengths count the chunk's own tokens."""
    n = len(lens)
    q = make_operand((n, sq, hq, d), dtype, layout, rng, special=False)
    k_cache = make_operand((n_blocks, block_size, hkv, d), dtype, layout, rng, special=False)
    v_cache = make_operand((n_blocks, block_size, hkv, dv), dtype, layout, rng, special=False)
    table = np.stack([rng.permutation(n_blocks)[:max_blocks] for _ in range(n)]).astype(np.int32)
    block_table = make_operand(table.shape, D.I32, layout, rng, values=table)
    context_lens = make_operand((n,), D.I32, layout, rng, values=np.array(lens, np.int32))
    return q, k_cache, v_cache, block_table, context_lens


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (8, 2)])           # GQA ratios 1, 2, 4
@pytest.mark.parametrize("sq,lens", [(1, (7, 1, 17)), (3, (7, 3, 17)), (9, (9, 20, 13))])
@pytest.mark.parametrize("alibi,softcap,window_left", [(False, 0.0, -1), (True, 3.0, 6), (True, 0.0, 2)])
def test_paged_attn_chunk(dtype, hq, hkv, sq, lens, alibi, softcap, window_left, rng):
    """Query i of sequence n sees tokens up to L_n - Sq + i (blocks of 5: chunks of 3 and 9 cross
    page boundaries), within the window, with ALiBi and softcap, against the NumPy reference."""
    q, k_cache, v_cache, block_table, context_lens = chunk_operands(dtype, rng, sq=sq, hq=hq, hkv=hkv, lens=lens)
    slopes = (2.0 ** -np.arange(1, hq + 1)).astype(np.float32) if alibi else np.zeros(0, np.float32)
    p = P.paged_attn(0.05, block_size=5, softcap=softcap, window_left=window_left)
    out = kernel(OP.PAGED_ATTN, PAGED_KEY(dtype))(q, k_cache, v_cache, block_table, context_lens, slopes, params=p)
    expected, _ = paged_reference(q, k_cache, v_cache, block_table, context_lens, slopes, 0.05, 5, softcap,
                                  window_left)
    assert out.shape == (3, sq, hq, 8) == expected.shape
    assert np.abs(f64(out) - expected).max() <= ATTN_TOL[dtype] * np.abs(f64(v_cache)).max()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_paged_attn_chunk_layouts(layout, rng):
    q, k_cache, v_cache, block_table, context_lens = chunk_operands(D.F32, rng, layout, sq=4, lens=(7, 4, 17))
    slopes = make_operand((4,), D.F32, layout, rng, values=np.array([0.5, 0.25, 0.1, 0.0]))
    out = make_operand((3, 4, 4, 8), D.F32, "transposed" if layout == "transposed" else "strided", rng)
    p = P.paged_attn(0.05, block_size=5, window_left=5)
    fk.dispatch(OP.PAGED_ATTN, [q, k_cache, v_cache, block_table, context_lens, slopes], [out], params=p)
    expected, _ = paged_reference(q, k_cache, v_cache, block_table, context_lens, slopes, 0.05, 5, 0.0, 5)
    assert np.abs(f64(out) - expected).max() <= ATTN_TOL[D.F32] * np.abs(f64(v_cache)).max()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_paged_attn_chunk_of_one_is_the_decode_call(dtype, rng):
    """A rank-4 q of one query per sequence gives the decode call's bytes (the same per-row steps)."""
    q, k_cache, v_cache, block_table, context_lens = chunk_operands(dtype, rng, sq=1, lens=(7, 1, 17))
    slopes = (2.0 ** -np.arange(1, 5)).astype(np.float32)
    p = P.paged_attn(0.05, block_size=5, softcap=2.0, window_left=9)
    k = kernel(OP.PAGED_ATTN, PAGED_KEY(dtype))
    chunk = k(q, k_cache, v_cache, block_table, context_lens, slopes, params=p)
    decode = k(np.ascontiguousarray(q[:, 0]), k_cache, v_cache, block_table, context_lens, slopes, params=p)
    assert chunk[:, 0].tobytes() == decode.tobytes()


def test_paged_attn_chunks_match_causal_flash_attn(rng):
    """Prefill in chunks of 4 (each chunk's tokens already in the cache, the context counting them)
    agrees with one causal FLASH_ATTN over the whole sequence."""
    hq, hkv, d, length, bs = 4, 2, 8, 11, 3
    q = rng.standard_normal((1, hq, length, d)).astype(np.float32)
    kk = rng.standard_normal((1, hkv, length, d)).astype(np.float32)
    vv = rng.standard_normal((1, hkv, length, d)).astype(np.float32)
    whole = fk.dispatch(OP.FLASH_ATTN, [q, kk, vv], params=P.flash_attn(0.3, causal=True))
    table = np.array([[3, 0, 4, 1]], np.int32)            # tokens 3t..3t+2 in block table[t]
    k_cache = np.zeros((5, bs, hkv, d), np.float32)
    v_cache = np.zeros((5, bs, hkv, d), np.float32)
    for t in range(length):
        k_cache[table[0, t // bs], t % bs] = kk[0, :, t]
        v_cache[table[0, t // bs], t % bs] = vv[0, :, t]
    for start in range(0, length, 4):
        stop = min(start + 4, length)
        chunk = np.ascontiguousarray(q[:, :, start:stop].transpose(0, 2, 1, 3))      # [1, Sq, Hq, D]
        out = fk.dispatch(OP.PAGED_ATTN, [chunk, k_cache, v_cache, table, np.array([stop], np.int32),
                                          np.zeros(0, np.float32)], params=P.paged_attn(0.3, bs))
        np.testing.assert_allclose(out[0], whole[0, :, start:stop].transpose(1, 0, 2), rtol=2e-5, atol=2e-6)


def test_paged_attn_chunk_refusals_write_nothing(rng):
    q, k_cache, v_cache, block_table, context_lens = chunk_operands(D.F32, rng, sq=3, lens=(7, 3, 17))
    k = kernel(OP.PAGED_ATTN, PAGED_KEY(D.F32))
    none = np.zeros(0, np.float32)
    p = P.paged_attn(1.0, 5)
    out = np.full((3, 3, 4, 8), 7.0, np.float32)

    def refused(error, *args, match=None, out=out, params=p):
        with pytest.raises(error, match=match):
            k(*args, out=out, params=params)
        assert (out == 7.0).all()

    refused(IndexError, q, k_cache, v_cache, block_table, np.array([7, 2, 17], np.int32), none,
            match=r"context length 2 at position \(1,\) is shorter than the chunk's 3 queries")
    refused(IndexError, q, k_cache, v_cache, block_table, np.array([7, 0, 17], np.int32), none)
    refused(IndexError, q, k_cache, v_cache, block_table, np.array([7, 3, 21], np.int32), none,
            match=r"context length 21 at position \(2,\)")
    bad_table = np.array(block_table)
    bad_table[2, 3] = 12                               # token 15 of sequence 2 (context 17) needs block 3
    refused(IndexError, q, k_cache, v_cache, bad_table, context_lens, none, match=r"block index 12 at position \(2, 3\)")
    bad_table[2, 3] = -1
    refused(IndexError, q, k_cache, v_cache, bad_table, context_lens, none)
    refused(fk.ShapeError, q, k_cache, v_cache, block_table, context_lens, none,
            out=np.full((3, 4, 8), 7.0, np.float32))    # the output has q's rank
    refused(fk.ShapeError, q, k_cache, v_cache, block_table, context_lens, np.zeros(3, np.float32))
    refused(fk.ShapeError, q[:, :, :3], k_cache, v_cache, block_table, context_lens, none)   # 3 heads, 2 kv heads
    refused(fk.ShapeError, q[None], k_cache, v_cache, block_table, context_lens, none)
    refused(fk.DTypeError, q, k_cache, v_cache, block_table.astype(np.int64), context_lens, none)
    refused(fk.DTypeError, q.astype(np.float64), k_cache, v_cache, block_table, context_lens, none)
    refused(fk.ParamsError, q, k_cache, v_cache, block_table, context_lens, none, params=P.paged_attn(1.0, 4))
    overlapping = np.lib.stride_tricks.as_strided(out, out.shape, (0,) + out.strides[1:])   # writable, stride 0
    refused(fk.AliasError, q, k_cache, v_cache, block_table, context_lens, none, out=overlapping)
    read_only = np.full((3, 3, 4, 8), 7.0, np.float32)
    read_only.flags.writeable = False
    refused(fk.ReadOnlyError, q, k_cache, v_cache, block_table, context_lens, none, out=read_only)


def test_graph_paged_attn_takes_a_chunk(rng):
    """Graph.paged_attn with a rank-4 q: the output [N, Sq, Hq, Dv] is inferred, planned and run."""
    from fuel_kernel import graph as fg
    q, k_cache, v_cache, block_table, context_lens = chunk_operands(D.F32, rng, sq=3, lens=(7, 3, 17))
    none = np.zeros(0, np.float32)
    g = fg.Graph()
    qv = g.input(q.shape, D.F32)
    kc, vc = g.input(k_cache.shape, D.F32), g.input(v_cache.shape, D.F32)
    out = g.paged_attn(qv, kc, vc, g.constant(block_table), g.input((3,), D.I32), g.constant(none),
                       scale=0.05, block_size=5)
    assert out.shape == (3, 3, 4, 8)
    got = g.compile([out]).run([q, k_cache, v_cache, context_lens])[0]
    expected, _ = paged_reference(q, k_cache, v_cache, block_table, context_lens, none, 0.05, 5, 0.0, -1)
    assert np.abs(got - expected).max() <= ATTN_TOL[D.F32] * np.abs(v_cache).max()


@pytest.mark.parametrize("dtype", [D.F32, D.BF16, D.F64])
def test_paged_attn_same_bits_for_any_thread_count(dtype, rng):
    """A call large enough to run on the pool returns the same bytes on 1, 2, 3 and 7 threads."""
    q, k_cache, v_cache, block_table, context_lens = chunk_operands(
        dtype, rng, sq=40, hq=8, hkv=2, lens=(150, 40, 277, 96), d=64, dv=64, block_size=16, n_blocks=64,
        max_blocks=18)
    slopes = (2.0 ** -np.arange(1, 9)).astype(np.float32)
    p = P.paged_attn(0.05, block_size=16, softcap=4.0, window_left=100)
    k = kernel(OP.PAGED_ATTN, PAGED_KEY(dtype))
    args = (q, k_cache, v_cache, block_table, context_lens, slopes)
    with fk.threads(1):
        first = k(*args, params=p)
    expected, _ = paged_reference(*args, 0.05, 16, 4.0, 100)
    assert np.abs(f64(first) - expected).max() <= ATTN_TOL[dtype] * np.abs(f64(v_cache)).max()
    for threads in (2, 3, 7):
        with fk.threads(threads):
            assert k(*args, params=p).tobytes() == first.tobytes()


# the (op, dtypes) keys the tests above exercise; tests/test_spec.py checks the table
COVERED = (
    {(op, (d,) * 4) for op in (OP.ROPE, OP.FLASH_ATTN) for d in FLOAT_DTYPES}
    | {(OP.PAGED_ATTN, (d, d, d, D.I32, D.I32, D.F32, d)) for d in FLOAT_DTYPES}
    # FLASH_ATTN with its lse and FLASH_ATTN_BACKWARD: test_attention_backward.py
    | {(OP.FLASH_ATTN, (d,) * 4 + (D.F32,)) for d in FLOAT_DTYPES}
    | {(OP.FLASH_ATTN_BACKWARD, (d,) * 3 + (D.F32,) + (d,) * 4) for d in FLOAT_DTYPES}
    # FLASH_ATTN_MASKED, an additive (q's dtype) or BOOL mask, with I32 and I64 key lengths, with and without
    # its lse: test_attention_masked.py
    | {(OP.FLASH_ATTN_MASKED, (d,) * 3 + (mask, D.F32, lens, d) + lse) for d in FLOAT_DTYPES for mask in (d, D.BOOL)
       for lens in (D.I32, D.I64) for lse in ((), (D.F32,))}
)


def test_flash_attn_never_materializes_the_score_matrix(rng):
    """A banded 16k x 16k attention: the [Sq, Sk] f32 score matrix alone would be 1 GiB; the
    blocked kernel's peak memory stays in the tens of MiB (ru_maxrss is the process's peak)."""
    import resource
    n, d, window = 16384, 8, 32
    q, k, v = (rng.standard_normal((1, 1, n, d)).astype(np.float32) for _ in range(3))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = fk.dispatch(OP.FLASH_ATTN, [q, k, v], params=P.flash_attn(0.3, causal=True, window_left=window))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 128 * 1024, grown_kib
    for i in (0, 5, 100, 9999, n - 1):
        lo = max(0, i - window)
        expected, _ = attention_reference(q[:, :, i:i + 1], k[:, :, lo:i + 1], v[:, :, lo:i + 1], 0.3, causal=True)
        assert np.abs(f64(out[:, :, i:i + 1]) - expected).max() <= ATTN_TOL[D.F32] * np.abs(v).max()


def test_leading_tile_of_minus_inf_scores_weighs_nothing():
    """F32 scores that overflow to -inf fill the first key tile (block); the online softmax must
    treat them as weightless, not rescale by exp(-inf - -inf) = NaN, whatever the key order."""
    q = np.array([[[[-1e20]]]], np.float32)
    k = np.full((1, 1, 65, 1), 1e20, np.float32)
    k[0, 0, 64, 0] = 0.0
    v = np.zeros((1, 1, 65, 1), np.float32)
    v[0, 0, 64, 0] = 5.0
    params = fk.params.flash_attn(1.0)
    assert fk.dispatch(fk.OpKind.FLASH_ATTN, [q, k, v], params=params)[0].item() == 5.0
    assert fk.dispatch(fk.OpKind.FLASH_ATTN, [q, k[:, :, ::-1], v[:, :, ::-1]], params=params)[0].item() == 5.0

    qp = np.array([[[-1e20]]], np.float32)
    kc = np.array([1e20, 0.0], np.float32).reshape(2, 1, 1, 1)
    vc = np.array([1.0, 5.0], np.float32).reshape(2, 1, 1, 1)
    for table in ([[0, 1]], [[1, 0]]):
        args = [qp, kc, vc, np.array(table, np.int32), np.array([2], np.int32), np.zeros(0, np.float32)]
        out = fk.dispatch(fk.OpKind.PAGED_ATTN, args, params=fk.params.paged_attn(1.0, 1))[0]
        assert out.item() == 5.0                       # the finite-score token, in either block


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_a_nan_score_makes_its_row_nan(dtype):
    """A NaN in a query row makes every score of that row NaN: its output is NaN (as the NumPy
    softmax gives), not the zero a weightless row would get; the other rows stay finite."""
    nd = np_dtype(dtype)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 3, 2)).astype(nd)
    q[0, 0, 1, 1] = np.nan
    k = rng.standard_normal((1, 1, 70, 2)).astype(nd)       # more keys than one tile
    v = rng.standard_normal((1, 1, 70, 3)).astype(nd)
    out = fk.dispatch(OP.FLASH_ATTN, [q, k, v], params=P.flash_attn(1.0))      # [1, 1, 3, 3]
    assert np.isnan(f64(out[0, 0, 1])).all()
    assert np.isfinite(f64(out[0, 0, [0, 2]])).all()

    qp = q[0].transpose(1, 0, 2)                            # [tokens=3, heads=1, d]
    kc = k[0, 0].reshape(35, 2, 1, 2)                       # 35 blocks of 2 tokens
    vc = v[0, 0].reshape(35, 2, 1, 3)
    table = np.tile(np.arange(35, dtype=np.int32), (3, 1))
    args = [qp, kc, vc, table, np.full(3, 70, np.int32), np.zeros(0, np.float32)]
    out = fk.dispatch(OP.PAGED_ATTN, args, params=P.paged_attn(1.0, 2))          # [3, 1, 3]
    assert np.isnan(f64(out[1])).all()
    assert np.isfinite(f64(out[[0, 2]])).all()
