"""FLASH_ATTN_MASKED (fuel_kernel/cpu/_attention): FLASH_ATTN with an additive or BOOL mask (broadcast
on any of its first three axes), ALiBi slopes and per-batch key lengths, each optional ([0] when
absent), with bottom-right or top-left causal alignment, against the float64 reference in
tests/oracles.py (masked_attention_reference) and, for BOOL masks, torch's scaled_dot_product_attention;
every float dtype at the FLASH_ATTN claims, every layout, GQA 1/2/4, windows and softcap with the
options, its lse, fully masked rows, refusals that write nothing, the same bits for every thread count,
and the Graph (g.flash_attn's mask keywords, built, planned, no gradient)."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
from oracles import attention_reference, f64, masked_attention_reference
from support import FLOAT_DTYPES, LAYOUTS, make_operand, np_dtype

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU

ATTN_TOL = {d: fk.bindings().lookup(OP.FLASH_ATTN, [d] * 4, CPU).precision.max_abs for d in FLOAT_DTYPES}


def key(dtype, lens=D.I32, lse=False, mask=None):
    return [dtype] * 3 + [dtype if mask is None else mask, D.F32, lens, dtype] + ([D.F32] if lse else [])


def kernel(dtype, lens=D.I32, lse=False, mask=None):
    return fk.bindings().lookup(OP.FLASH_ATTN_MASKED, key(dtype, lens, lse, mask), CPU)


def none(dtype):
    return np.zeros(0, np_dtype(dtype))


def operands(dtype, rng, b=2, hq=4, hkv=2, sq=9, sk=70, d=16, dv=8, mask_shape="full", alibi=True, lens=(70, 33),
             lens_dtype=D.I32, layout="contiguous", bool_mask=False):
    """q, k, v, mask, slopes, key_lens; the mask additive (a fifth of it -inf) or, with bool_mask,
    BOOL (a fifth of it False)."""
    q = make_operand((b, hq, sq, d), dtype, layout, rng, special=False)
    k = make_operand((b, hkv, sk, d), dtype, layout, rng, special=False)
    v = make_operand((b, hkv, sk, dv), dtype, layout, rng, special=False)
    shapes = {"full": (b, hq, sq, sk), "batch": (1, hq, sq, sk), "heads": (b, 1, sq, sk), "rows": (b, 1, 1, sk),
              "one": (1, 1, 1, sk)}
    if mask_shape is None:
        mask = none(dtype)
    else:
        values = rng.standard_normal(shapes[mask_shape])
        values[rng.random(values.shape) < 0.2] = -np.inf           # masked-out keys
        if bool_mask:
            values = values != -np.inf
        mask = make_operand(values.shape, D.BOOL if bool_mask else dtype, layout, rng, values=values)
    slopes = (make_operand((hq,), D.F32, layout, rng, values=2.0 ** -np.arange(1, hq + 1) / 8) if alibi
              else np.zeros(0, np.float32))
    key_lens = (make_operand((b,), lens_dtype, layout, rng, values=np.array(lens)) if lens is not None
                else np.zeros(0, np_dtype(lens_dtype)))
    return q, k, v, mask, slopes, key_lens


def check(out, q, k, v, mask, slopes, key_lens, dtype, scale, **options):
    expected, _, _ = masked_attention_reference(q, k, v, mask, slopes, key_lens, scale, **options)
    assert out.shape == expected.shape
    err = np.abs(f64(out) - expected).max()
    assert err <= ATTN_TOL[dtype] * np.abs(f64(v)).max(), err


def check_lse(lse, q, k, v, mask, slopes, key_lens, **options):
    """The lse output against the reference's: -inf where a row sees no key, else within 1e-5."""
    _, expected_lse, _ = masked_attention_reference(q, k, v, mask, slopes, key_lens, 0.1, **options)
    assert (np.isneginf(lse) == np.isneginf(expected_lse)).all()
    finite = np.isfinite(expected_lse)
    assert (np.abs(lse[finite] - expected_lse[finite]) <= 1e-5 * (1 + np.abs(expected_lse[finite]))).all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("mask_shape", ["full", "batch", "heads", "rows", "one", None])
@pytest.mark.parametrize("top_left", [False, True])
@pytest.mark.parametrize("causal,window_left,window_right,softcap", [(True, -1, -1, 0.0), (False, -1, -1, 0.0),
                                                                     (True, 20, -1, 3.0), (False, 5, 7, 2.0)])
def test_flash_attn_masked(dtype, mask_shape, top_left, causal, window_left, window_right, softcap, rng):
    lens_dtype = D.I64 if causal else D.I32                # both key-length dtypes, with and without the lse
    q, k, v, mask, slopes, key_lens = operands(dtype, rng, mask_shape=mask_shape, lens_dtype=lens_dtype)
    options = dict(causal=causal, window_left=window_left, window_right=window_right, softcap=softcap,
                   top_left=top_left)
    out = kernel(dtype, lens_dtype, lse=top_left)(q, k, v, mask, slopes, key_lens, params=P.flash_attn(0.1, **options))
    if top_left:
        out, lse = out
        check_lse(lse, q, k, v, mask, slopes, key_lens, **options)
    check(out, q, k, v, mask, slopes, key_lens, dtype, 0.1, **options)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (8, 2)])                # GQA ratios 1, 2, 4
@pytest.mark.parametrize("sq,sk,lens", [(1, 200, (200, 65)), (70, 130, (130, 0)), (100, 64, (64, 1))])
@pytest.mark.parametrize("lens_dtype", [D.I32, D.I64])
def test_flash_attn_masked_shapes(hq, hkv, sq, sk, lens, lens_dtype, rng):
    """Decode (one query), several 64-row query blocks and 64-key tiles, Sq > Sk, key lengths 0, 1
    and past a tile edge, both key-length dtypes, with the lse."""
    q, k, v, mask, slopes, key_lens = operands(D.F32, rng, hq=hq, hkv=hkv, sq=sq, sk=sk, lens=lens,
                                               lens_dtype=lens_dtype)
    p = P.flash_attn(0.1, causal=True)
    out, lse = kernel(D.F32, lens_dtype, lse=True)(q, k, v, mask, slopes, key_lens, params=p)
    expected, expected_lse, _ = masked_attention_reference(q, k, v, mask, slopes, key_lens, 0.1, causal=True)
    assert np.abs(out - expected).max() <= ATTN_TOL[D.F32] * np.abs(v).max()
    assert (np.isneginf(lse) == np.isneginf(expected_lse)).all()
    finite = np.isfinite(expected_lse)
    assert (np.abs(lse[finite] - expected_lse[finite]) <= 1e-5 * (1 + np.abs(expected_lse[finite]))).all()
    if 0 in lens:                                     # a batch without keys: zeros, lse -inf
        b = lens.index(0)
        assert (out[b] == 0).all() and np.isneginf(lse[b]).all()


@pytest.mark.parametrize("bool_mask", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [D.F32, D.BF16, D.F64])
def test_flash_attn_masked_layouts(layout, dtype, bool_mask, rng):
    q, k, v, mask, slopes, key_lens = operands(dtype, rng, layout=layout, lens=(70, 70) if layout == "broadcast"
                                               else (70, 33), bool_mask=bool_mask)
    out = make_operand((2, 4, 9, 8), dtype, "transposed" if layout == "transposed" else "strided", rng)
    p = P.flash_attn(0.1, causal=True, window_left=40)
    fk.dispatch(OP.FLASH_ATTN_MASKED, [q, k, v, mask, slopes, key_lens], [out], params=p)
    check(out, q, k, v, mask, slopes, key_lens, dtype, 0.1, causal=True, window_left=40)


# ---- BOOL masks: True keeps the key, False excludes it (ONNX Attention's and torch SDPA's boolean mask)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("mask_shape", ["full", "batch", "heads", "rows", "one"])
@pytest.mark.parametrize("causal,window_left,window_right,softcap,top_left", [
    (True, -1, -1, 0.0, False), (False, -1, -1, 0.0, True), (True, 20, -1, 3.0, True), (False, 5, 7, 2.0, False)])
def test_flash_attn_bool_mask(dtype, mask_shape, causal, window_left, window_right, softcap, top_left, rng):
    """Every float dtype, every broadcast of the mask, both key-length dtypes each with and without the lse."""
    lens_dtype, with_lse = D.I64 if causal else D.I32, causal != top_left
    q, k, v, mask, slopes, key_lens = operands(dtype, rng, mask_shape=mask_shape, lens_dtype=lens_dtype,
                                               bool_mask=True)
    assert mask.dtype == np.bool_
    options = dict(causal=causal, window_left=window_left, window_right=window_right, softcap=softcap,
                   top_left=top_left)
    k_ = kernel(dtype, lens_dtype, lse=with_lse, mask=D.BOOL)
    out = k_(q, k, v, mask, slopes, key_lens, params=P.flash_attn(0.1, **options))
    if with_lse:
        out, lse = out
        check_lse(lse, q, k, v, mask, slopes, key_lens, **options)
    check(out, q, k, v, mask, slopes, key_lens, dtype, 0.1, **options)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_bool_mask_is_the_additive_mask_of_zeros_and_minus_inf(dtype, rng):
    """False as -inf added, True as 0 added: the same bits, with softcap, ALiBi and key lengths."""
    q, k, v, mask, slopes, key_lens = operands(dtype, rng, bool_mask=True)
    additive = np.where(mask, 0.0, -np.inf).astype(np_dtype(dtype))
    p = P.flash_attn(0.1, causal=True, softcap=2.0, window_left=50)
    out, lse = kernel(dtype, lse=True, mask=D.BOOL)(q, k, v, mask, slopes, key_lens, params=p)
    want, want_lse = kernel(dtype, lse=True)(q, k, v, additive, slopes, key_lens, params=p)
    assert out.tobytes() == want.tobytes() and lse.tobytes() == want_lse.tobytes()


@pytest.mark.parametrize("dtype", [D.F32, D.F64, D.BF16])
@pytest.mark.parametrize("hq,hkv,sq,sk,mask_shape", [(4, 2, 9, 70, "full"), (4, 4, 1, 200, "heads"),
                                                     (8, 2, 100, 64, "rows"), (2, 1, 33, 130, "batch")])
def test_bool_mask_against_torch_sdpa(dtype, hq, hkv, sq, sk, mask_shape, rng):
    """torch.nn.functional.scaled_dot_product_attention with the same boolean attn_mask (kv heads
    repeated for the query heads), on the rows that see some key; fully masked rows are zeros here
    (FlashAttention's convention), where SDPA's answer depends on its version (NaN in older ones)."""
    torch = pytest.importorskip("torch")
    q, k, v, mask, _, _ = operands(dtype, rng, hq=hq, hkv=hkv, sq=sq, sk=sk, mask_shape=mask_shape, bool_mask=True)
    mask = mask.copy()
    if mask.shape[2] > 1:                                     # fully masked rows in every case: query 0's
        mask[..., 0, :] = False
    else:                                                     # or batch 0's
        mask[0] = False
    out = kernel(dtype, mask=D.BOOL)(q, k, v, mask, np.zeros(0, np.float32), np.zeros(0, np.int32),
                                     params=P.flash_attn(0.125))
    t = lambda a: torch.from_numpy(np.ascontiguousarray(f64(a)))
    expected = torch.nn.functional.scaled_dot_product_attention(
        t(q), t(k).repeat_interleave(hq // hkv, 1), t(v).repeat_interleave(hq // hkv, 1),
        attn_mask=torch.from_numpy(np.ascontiguousarray(mask)), scale=0.125).numpy()
    seen = np.broadcast_to(mask.any(-1), out.shape[:3])
    assert (~seen).any() and seen.any()
    assert (out[~seen] == 0).all()                            # ours: zeros
    err = np.abs(f64(out)[seen] - expected[seen]).max()
    assert err <= ATTN_TOL[dtype] * np.abs(f64(v)).max(), err


def test_bool_mask_fully_masked_rows_and_excluded_nan_scores(rng):
    """A row whose keys are all False is zeros with lse -inf (SDPA: NaN); an excluded key's NaN score
    (a NaN in k) does not reach its row, as torch's masked_fill of -inf (an additive -inf gives NaN)."""
    q, k, v, _, _, _ = operands(D.F32, rng, sq=4)
    mask = np.ones((1, 1, 4, 70), bool)
    mask[0, 0, 1] = False
    mask[0, 0, :, 5] = False
    k = k.copy()
    k[:, :, 5, 3] = np.nan
    none_f32, none_i32 = np.zeros(0, np.float32), np.zeros(0, np.int32)
    out, lse = kernel(D.F32, lse=True, mask=D.BOOL)(q, k, v, mask, none_f32, none_i32, params=P.flash_attn(0.1))
    assert (out[:, :, 1] == 0).all() and np.isneginf(lse[:, :, 1]).all()
    assert np.isfinite(out[:, :, [0, 2, 3]]).all() and np.isfinite(lse[:, :, [0, 2, 3]]).all()
    check(out, q, k, v, mask, none_f32, none_i32, D.F32, 0.1)
    additive = kernel(D.F32)(q, k, v, np.where(mask, 0, -np.inf).astype(np.float32), none_f32, none_i32,
                             params=P.flash_attn(0.1))
    assert np.isnan(additive[:, :, [0, 2, 3]]).all()


def test_bool_mask_refusals_write_nothing(rng):
    q, k, v, mask, slopes, key_lens = operands(D.F32, rng, bool_mask=True)
    kb = kernel(D.F32, mask=D.BOOL)
    p = P.flash_attn(0.1, causal=True)
    out = np.full((2, 4, 9, 8), 7.0, np.float32)

    def refused(error, q=q, mask=mask, key_lens=key_lens, out=out, call=kb, match=None):
        with pytest.raises(error, match=match):
            call(q, k, v, mask, slopes, key_lens, out=out, params=p)
        assert (out == 7.0).all()

    refused(fk.ShapeError, mask=mask[:, :, :, :69])                             # Sk must match
    refused(fk.ShapeError, mask=np.ones((2, 2, 9, 70), bool))                  # heads neither Hq nor 1
    refused(fk.ShapeError, mask=np.ones((9, 70), bool))                        # rank
    refused(IndexError, key_lens=np.array([70, 71], np.int32))              # data checked before any write
    refused(fk.DTypeError, mask=mask.astype(np.float64))                       # neither q's dtype nor BOOL
    refused(fk.DTypeError, q=q.astype(np.float64))
    refused(fk.DTypeError, mask=mask.astype(np.float32))                       # the key is BOOL
    refused(fk.DTypeError, mask=mask, call=kernel(D.F32))                      # the additive key
    with pytest.raises(fk.NoKernelError):                                      # U8 is no mask dtype
        fk.dispatch(OP.FLASH_ATTN_MASKED, [q, k, v, mask.astype(np.uint8), slopes, key_lens], [out], params=p)
    read_only = out.copy()
    read_only.flags.writeable = False
    refused(fk.ReadOnlyError, out=read_only)
    refused(fk.AliasError, out=np.lib.stride_tricks.as_strided(out, out.shape, (0,) + out.strides[1:]))
    assert kb(q, k, v, mask, slopes, key_lens, out=out, params=p) is out        # the same call is fine


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_without_options_it_is_flash_attn(dtype, rng):
    """No mask, slopes or key lengths: FLASH_ATTN's bytes, softcap and windows included."""
    q, k, v, _, _, _ = operands(dtype, rng)
    p = P.flash_attn(0.1, causal=True, softcap=2.0, window_left=30)
    masked = kernel(dtype)(q, k, v, none(dtype), np.zeros(0, np.float32), np.zeros(0, np.int32), params=p)
    plain = fk.dispatch(OP.FLASH_ATTN, [q, k, v], params=p)
    assert masked.tobytes() == plain.tobytes()


def test_key_lengths_equal_cutting_the_keys(rng):
    """Batch b with key length L attends as FLASH_ATTN over its first L keys (bottom-right on L)."""
    q, k, v, _, _, key_lens = operands(D.F64, rng, lens=(50, 17))
    p = P.flash_attn(0.1, causal=True)
    out = kernel(D.F64)(q, k, v, none(D.F64), np.zeros(0, np.float32), key_lens, params=p)
    for b, length in enumerate((50, 17)):
        expected, _ = attention_reference(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length], 0.1, True)
        np.testing.assert_allclose(out[b:b + 1], expected, rtol=1e-12, atol=1e-12)


def test_fully_masked_rows_are_zero_and_lse_minus_inf(rng):
    """A row whose mask is -inf on every key weighs nothing: zeros and lse -inf (PyTorch's SDPA
    gives NaN there); a NaN in the mask makes its row NaN; other rows are untouched by either."""
    q, k, v, _, _, _ = operands(D.F32, rng, sq=4)
    mask = np.zeros((1, 1, 4, 70), np.float32)
    mask[0, 0, 1] = -np.inf
    mask[0, 0, 2, 5] = np.nan
    p = P.flash_attn(0.1)
    out, lse = kernel(D.F32, lse=True)(q, k, v, mask, np.zeros(0, np.float32), np.zeros(0, np.int32), params=p)
    assert (out[:, :, 1] == 0).all() and np.isneginf(lse[:, :, 1]).all()
    assert np.isnan(out[:, :, 2]).all()
    assert np.isfinite(out[:, :, [0, 3]]).all()


def test_refusals_write_nothing(rng):
    q, k, v, mask, slopes, key_lens = operands(D.F32, rng)
    k32 = kernel(D.F32)
    p = P.flash_attn(0.1, causal=True)
    out = np.full((2, 4, 9, 8), 7.0, np.float32)

    def refused(error, q=q, k=k, v=v, mask=mask, slopes=slopes, key_lens=key_lens, out=out, params=p, match=None):
        with pytest.raises(error, match=match):
            k32(q, k, v, mask, slopes, key_lens, out=out, params=params)
        assert (out == 7.0).all()

    refused(IndexError, key_lens=np.array([70, 71], np.int32), match=r"key length 71 at position \(1,\)")
    refused(IndexError, key_lens=np.array([-1, 3], np.int32))
    refused(fk.ShapeError, mask=mask[:, :, :, :69])                        # Sk must match
    refused(fk.ShapeError, mask=np.zeros((2, 2, 9, 70), np.float32))      # heads neither Hq nor 1
    refused(fk.ShapeError, mask=np.zeros((3, 4, 9, 70), np.float32))      # batch neither B nor 1
    refused(fk.ShapeError, mask=np.zeros((9, 70), np.float32))            # rank
    refused(fk.ShapeError, slopes=np.zeros(3, np.float32))
    refused(fk.ShapeError, key_lens=np.zeros(3, np.int32))
    refused(fk.ShapeError, q=q[:, :3])                                    # 3 query heads, 2 kv heads
    refused(fk.DTypeError, mask=mask.astype(np.float64))
    refused(fk.DTypeError, slopes=slopes.astype(np.float64))
    refused(fk.DTypeError, key_lens=key_lens.astype(np.float32))
    refused(fk.ParamsError, params=P.paged_attn(0.1, 4))
    refused(fk.AliasError, out=np.lib.stride_tricks.as_strided(out, out.shape, (0,) + out.strides[1:]))
    with pytest.raises(fk.NoKernelError):                                 # key lengths I16: no key
        fk.dispatch(OP.FLASH_ATTN_MASKED, [q, k, v, mask, slopes, key_lens.astype(np.int16)], [out], params=p)
    with pytest.raises(fk.OperandCountError):
        k32(q, k, v, mask, slopes, out=out, params=p)
    read_only = out.copy()
    read_only.flags.writeable = False
    refused(fk.ReadOnlyError, out=read_only)
    k32(q, k, v, mask, slopes, key_lens, out=out, params=p)               # the same call is fine


@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_same_bits_for_any_thread_count(dtype, rng):
    q, k, v, mask, slopes, key_lens = operands(dtype, rng, b=3, hq=8, hkv=4, sq=150, sk=300, d=64, dv=64,
                                               lens=(300, 111, 0))
    p = P.flash_attn(0.1, causal=True, softcap=3.0, window_left=200)
    k_ = kernel(dtype, lse=True)
    with fk.threads(1):
        out, lse = k_(q, k, v, mask, slopes, key_lens, params=p)
    check(out, q, k, v, mask, slopes, key_lens, dtype, 0.1, causal=True, softcap=3.0, window_left=200)
    for threads in (2, 3, 7):
        with fk.threads(threads):
            out_n, lse_n = k_(q, k, v, mask, slopes, key_lens, params=p)
        assert out_n.tobytes() == out.tobytes() and lse_n.tobytes() == lse.tobytes()


@pytest.mark.parametrize("threads", [1, 3])
def test_top_left_flash_attn_is_split_correctly(threads, rng):
    """FLASH_ATTN top-left causal calls large enough to be cut into query blocks (Sq <= Sk) or not
    (Sq > Sk) by the thread split, against the reference."""
    for sq, sk in ((300, 500), (300, 200)):
        q = rng.standard_normal((1, 4, sq, 32)).astype(np.float32)
        k = rng.standard_normal((1, 2, sk, 32)).astype(np.float32)
        v = rng.standard_normal((1, 2, sk, 32)).astype(np.float32)
        with fk.threads(threads):
            out = fk.dispatch(OP.FLASH_ATTN, [q, k, v], params=P.flash_attn(0.1, causal=True, top_left=True,
                                                                             window_left=100))
        expected, _ = attention_reference(q, k, v, 0.1, True, 100, top_left=True)
        assert np.abs(out - expected).max() <= ATTN_TOL[D.F32] * np.abs(v).max()


def test_graph_builds_plans_and_refuses_a_gradient(rng):
    from fuel_kernel import graph as fg
    q, k, v, mask, slopes, key_lens = operands(D.F32, rng)
    g = fg.Graph()
    qv, kv, vv = g.input(q.shape, D.F32), g.input(k.shape, D.F32), g.input(v.shape, D.F32)
    mv, sv, lv = g.input(mask.shape, D.F32), g.constant(slopes), g.constant(key_lens)
    out = g.flash_attn_masked(qv, kv, vv, mv, sv, lv, scale=0.1, causal=True, top_left=True)
    got = g.compile([out]).run([q, k, v, mask])[0]
    check(got, q, k, v, mask, slopes, key_lens, D.F32, 0.1, causal=True, top_left=True)
    with pytest.raises(fk.NoKernelError, match="flash_attn_masked"):
        g.grad(g.sum(out), [qv])


@pytest.mark.parametrize("given", [("mask",), ("bool_mask",), ("alibi_slopes",), ("key_lens",),
                                   ("bool_mask", "alibi_slopes", "key_lens"), ("mask", "key_lens")])
def test_graph_flash_attn_keywords_route_to_the_masked_op(given, rng):
    """g.flash_attn(q, k, v, mask=, alibi_slopes=, key_lens=): FLASH_ATTN_MASKED when any is given (the
    others its empty [0] operands), FLASH_ATTN otherwise; compiled and run against the reference, and
    g.grad through the masked node is a NoKernelError naming it."""
    from fuel_kernel import graph as fg
    q, k, v, mask, slopes, key_lens = operands(D.F32, rng, bool_mask="bool_mask" in given)
    g = fg.Graph()
    qv, kv, vv = g.input(q.shape, D.F32), g.input(k.shape, D.F32), g.input(v.shape, D.F32)
    keywords = {}
    if "mask" in given or "bool_mask" in given:
        keywords["mask"] = g.input(mask.shape, D.BOOL if mask.dtype == bool else D.F32)
    if "alibi_slopes" in given:
        keywords["alibi_slopes"] = g.input(slopes.shape, D.F32)
    if "key_lens" in given:
        keywords["key_lens"] = g.constant(key_lens)
    out = g.flash_attn(qv, kv, vv, **keywords, scale=0.1, causal=True, top_left=True)
    assert out.producer.key == OP.FLASH_ATTN_MASKED
    plain = g.flash_attn(qv, kv, vv, scale=0.1, causal=True, top_left=True)
    assert plain.producer.key == OP.FLASH_ATTN
    inputs = [q, k, v] + [array for name, array in (("mask", mask), ("alibi_slopes", slopes))
                          if name in keywords]
    got, got_plain = g.compile([out, plain]).run(inputs)
    absent = {"mask": none(D.F32), "alibi_slopes": np.zeros(0, np.float32), "key_lens": np.zeros(0, np.int32)}
    used = [dict(mask=mask, alibi_slopes=slopes, key_lens=key_lens)[name] if name in keywords else absent[name]
            for name in ("mask", "alibi_slopes", "key_lens")]
    check(got, q, k, v, *used, D.F32, 0.1, causal=True, top_left=True)
    expected_plain, _ = attention_reference(q, k, v, 0.1, True, top_left=True)
    assert np.abs(got_plain - expected_plain).max() <= ATTN_TOL[D.F32] * np.abs(v).max()
    with pytest.raises(fk.NoKernelError, match="FLASH_ATTN_MASKED"):
        g.grad(g.sum(out), [qv])


def test_graph_flash_attn_keyword_refusals(rng):
    from fuel_kernel import graph as fg
    q, k, v, mask, _, _ = operands(D.F32, rng)

    def graph():
        g = fg.Graph()
        return g, g.input(q.shape, D.F32), g.input(k.shape, D.F32), g.input(v.shape, D.F32)
    g, qv, kv, vv = graph()
    with pytest.raises(fk.OperandTypeError, match="mask"):                 # an array, not a Value
        g.flash_attn(qv, kv, vv, mask=mask)
    with pytest.raises(fk.ParamsError):                                    # params= and its keywords
        g.flash_attn(qv, kv, vv, mask=g.input(mask.shape, D.F32), params=P.flash_attn(0.1), causal=True)
    g, qv, kv, vv = graph()
    with pytest.raises(fk.ShapeError):                                     # a mask of the wrong key count
        g.compile([g.flash_attn(qv, kv, vv, mask=g.input((1, 1, 1, 69), D.F32), scale=0.1)]).run(
            [q, k, v, np.zeros((1, 1, 1, 69), np.float32)])
    g, qv, kv, vv = graph()
    with pytest.raises((fk.DTypeError, fk.NoKernelError)):                 # U8 is no mask dtype
        g.compile([g.flash_attn(qv, kv, vv, mask=g.input((1, 1, 1, 70), D.U8), scale=0.1)])
