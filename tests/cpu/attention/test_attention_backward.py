"""FLASH_ATTN's lse output and FLASH_ATTN_BACKWARD (fuel_kernel/cpu/_attention) against float64
references written from the math (tests/oracles.py), themselves checked against central differences
of the forward reference: causal, windows, softcap, grouped-query heads, Sq != Sk, several 64-row
tiles, every float dtype at its precision claim, strided / negative / offset layouts, and refusals
that leave every output untouched."""
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import params as P
from oracles import attention_backward_reference, attention_reference, attention_visible, f64
from support import FLOAT_DTYPES, LAYOUTS, make_operand, np_dtype

D = fk.DType
OP = fk.OpKind
CPU = fk.Backend.CPU


def kernel(op, dtypes):
    return fk.bindings().lookup(op, list(dtypes), CPU)


def backward_key(dtype):
    """[q, k, v, lse (F32), do, dq, dk, dv]"""
    return [dtype] * 3 + [D.F32] + [dtype] * 4


# abs error bound as a fraction of each gradient element's sum |terms|: the registered claim
BACKWARD_TOL = {d: kernel(OP.FLASH_ATTN_BACKWARD, backward_key(d)).precision.max_abs for d in FLOAT_DTYPES}

CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, Dv, causal, window_left, window_right, softcap)
    (1, 2, 2, 7, 7, 8, 8, False, -1, -1, 0.0),
    (2, 4, 2, 70, 130, 24, 40, True, -1, -1, 0.0),        # GQA x2, Sq < Sk, several key tiles
    (1, 3, 1, 129, 129, 64, 64, True, 30, -1, 5.0),       # GQA x3, window, softcap, 3 query blocks
    (1, 2, 2, 100, 64, 17, 33, False, 10, 3, 0.0),        # two-sided window, Sq > Sk
    (1, 6, 3, 65, 200, 16, 16, False, -1, 5, 2.0),
    (1, 1, 1, 9, 3, 4, 4, True, -1, -1, 0.0),             # rows before the first key see nothing
]


def case_operands(case, dtype, rng, layout="contiguous"):
    b, hq, hkv, sq, sk, d, dv, causal, wl, wr, softcap = case
    q = make_operand((b, hq, sq, d), dtype, layout, rng, special=False)
    k = make_operand((b, hkv, sk, d), dtype, layout, rng, special=False)
    v = make_operand((b, hkv, sk, dv), dtype, layout, rng, special=False)
    do = make_operand((b, hq, sq, dv), dtype, layout, rng, special=False)
    scale = d ** -0.5 / 4                     # inputs are N(0, 16): keep the scores moderate
    return q, k, v, do, P.flash_attn(scale, causal=causal, softcap=softcap, window_left=wl, window_right=wr), \
        (scale, causal, wl, wr, softcap)


def saved_forward(q, k, v, do, args, layout="contiguous", rng=None):
    """The lse (F32) the forward saves, from the float64 reference, and the reference gradients."""
    _, lse, grads, mags = attention_backward_reference(q, k, v, do, *args)
    lse_saved = lse.astype(np.float32)
    if layout != "contiguous":
        lse_saved = make_operand(lse.shape, D.F32, layout, rng, values=lse_saved)
    return lse_saved, grads, mags


def assert_gradients(got, grads, mags, dtype):
    for name, g, e, m in zip(("dq", "dk", "dv"), got, grads, mags):
        assert g.shape == e.shape, (name, g.shape, e.shape)
        err = np.abs(f64(g) - e)
        bound = BACKWARD_TOL[dtype] * m + 1e-300
        assert (err <= bound).all(), (name, dtype, float((err / np.maximum(m, 1e-300)).max()))


# ---- the reference against central differences ---------------------------------------------------------
@pytest.mark.parametrize("case", [
    (1, 4, 2, 7, 9, 5, 6, True, -1, -1, 0.0),
    (1, 3, 1, 6, 6, 4, 4, False, 2, 1, 2.0),
    (2, 2, 2, 5, 3, 3, 2, True, -1, -1, 0.0),
])
def test_backward_reference_matches_central_differences(case, rng):
    b, hq, hkv, sq, sk, d, dv, causal, wl, wr, softcap = case
    q, k, v = rng.standard_normal((b, hq, sq, d)), rng.standard_normal((b, hkv, sk, d)), rng.standard_normal((b, hkv, sk, dv))
    do = rng.standard_normal((b, hq, sq, dv))
    args = (0.7, causal, wl, wr, softcap)
    _, _, grads, _ = attention_backward_reference(q, k, v, do, *args)

    def loss(**changed):
        operands = {"q": q, "k": k, "v": v, **changed}
        return (attention_reference(operands["q"], operands["k"], operands["v"], *args)[0] * do).sum()

    h = 1e-6
    for name, x, g in zip("qkv", (q, k, v), grads):
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[idx] += h
            down[idx] -= h
            numeric[idx] = (loss(**{name: up}) - loss(**{name: down})) / (2 * h)
        assert np.abs(numeric - g).max() <= 1e-7 * (1 + np.abs(g).max()), name


# ---- FLASH_ATTN's lse ------------------------------------------------------------------------------------
def lse_long_double(q, k, scale, causal, wl, wr, softcap):
    """The log of each row's softmax denominator in long double, -inf for a row that sees no key."""
    hq = q.shape[1]
    qf = np.asarray(f64(q), np.longdouble)
    kf = np.repeat(np.asarray(f64(k), np.longdouble), hq // k.shape[1], axis=1)
    s = np.einsum("...id,...jd->...ij", qf, kf) * np.longdouble(scale)
    if softcap > 0:
        s = np.longdouble(softcap) * np.tanh(s / np.longdouble(softcap))
    visible = attention_visible(q.shape[2], k.shape[2], causal, wl, wr)
    m = np.where(visible, s, -np.inf).max(-1, keepdims=True, initial=-np.inf)
    with np.errstate(all="ignore"):
        total = np.where(visible, np.exp(s - np.where(m == -np.inf, 0, m)), 0).sum(-1, keepdims=True)
        lse = np.where(m == -np.inf, -np.inf, m + np.log(total))[..., 0]
    s_abs = np.einsum("...id,...jd->...ij", np.abs(f64(q)), np.abs(f64(np.asarray(kf, np.float64)))) * scale
    return lse.astype(np.float64), np.where(visible, s_abs, 0).max(-1, initial=0.0)


# lse error bound: F32 math (F16 / BF16 compute in F32): a few f32 ulps of the scores' magnitude;
# F64 math: the final rounding to F32
LSE_TOL = {D.F16: 4e-6, D.BF16: 4e-6, D.F32: 4e-6, D.F64: 2.0 ** -24}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_flash_attn_lse(dtype, case, rng):
    q, k, v, _, p, args = case_operands(case, dtype, rng)
    out = np.zeros(q.shape[:3] + v.shape[3:], np_dtype(dtype))
    lse = np.full(q.shape[:3], 7.0, np.float32)
    result = kernel(OP.FLASH_ATTN, [dtype] * 4 + [D.F32])(q, k, v, out=(out, lse), params=p)
    assert isinstance(result, tuple) and len(result) == 2
    expected, s_abs = lse_long_double(q, k, *args)
    assert (np.isneginf(lse) == np.isneginf(expected)).all()
    finite = np.isfinite(expected)
    assert np.isfinite(lse[finite]).all()
    err = np.abs(lse[finite].astype(np.float64) - expected[finite])
    assert (err <= LSE_TOL[dtype] * (1 + s_abs[finite] + np.abs(expected[finite]))).all(), err.max()
    # the attention output is the forward's, with or without the lse
    plain = kernel(OP.FLASH_ATTN, [dtype] * 4)(q, k, v, params=p)
    np.testing.assert_array_equal(f64(out), f64(plain))


def test_flash_attn_lse_layouts_and_threads(rng):
    """A large causal call runs on the intra-op threads, each block writing its rows of the lse;
    a strided lse view is written through its strides."""
    q, k, v = (rng.standard_normal((2, 4, 300, 32)).astype(np.float32) for _ in range(3))
    storage = np.full((2, 4, 300, 3), 7.0, np.float32)
    lse = storage[..., 1]
    out = np.zeros((2, 4, 300, 32), np.float32)
    kernel(OP.FLASH_ATTN, [D.F32] * 5)(q, k, v, out=(out, lse), params=P.flash_attn(0.2, causal=True))
    expected, s_abs = lse_long_double(q, k, 0.2, True, -1, -1, 0.0)
    assert (np.abs(lse - expected) <= LSE_TOL[D.F32] * (1 + s_abs + np.abs(expected))).all()
    assert (storage[..., 0] == 7.0).all() and (storage[..., 2] == 7.0).all()


def test_flash_attn_lse_refusals(rng):
    k5 = kernel(OP.FLASH_ATTN, [D.F32] * 5)
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    p = P.flash_attn(0.5)
    out = np.full((1, 2, 4, 8), 7.0, np.float32)
    lse = np.full((1, 2, 4), 7.0, np.float32)
    with pytest.raises(fk.DTypeError):
        kernel(OP.FLASH_ATTN, [D.F64] * 4 + [D.F32])(q, q, q, out=(out, lse), params=p)
    with pytest.raises(fk.ShapeError):
        k5(q, q, q, out=(out, np.full((1, 2, 5), 7.0, np.float32)), params=p)
    with pytest.raises(fk.FuelKernelError):
        k5(q, q, q, out=(out, np.full((1, 2, 4), 7.0, np.float64)), params=p)
    read_only = np.full((1, 2, 4), 7.0, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(fk.ReadOnlyError):
        k5(q, q, q, out=(out, read_only), params=p)
    shared = np.full(64, 7.0, np.float32)             # lse over the output's first elements
    with pytest.raises(fk.AliasError):
        k5(q, q, q, out=(shared.reshape(1, 2, 4, 8), shared[:8].reshape(1, 2, 4)), params=p)
    assert (shared == 7.0).all() and (out == 7.0).all() and (lse == 7.0).all()


# ---- FLASH_ATTN_BACKWARD ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_flash_attn_backward(dtype, case, rng):
    q, k, v, do, p, args = case_operands(case, dtype, rng)
    lse, grads, mags = saved_forward(q, k, v, do, args)
    got = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(dtype))(q, k, v, lse, do, params=p)
    assert isinstance(got, tuple) and len(got) == 3
    assert_gradients(got, grads, mags, dtype)


@pytest.mark.parametrize("dtype", [D.F32, D.F64])
@pytest.mark.parametrize("case", [c for c in CASES if c[3] != c[4]])
def test_flash_attn_backward_top_left(dtype, case, rng):
    """Top-left alignment (query i at key position i, params.top_left) where it differs from
    bottom-right (Sq != Sk): forward and gradients against the references."""
    q, k, v, do, _, args = case_operands(case, dtype, rng)
    scale, causal, wl, wr, softcap = args
    p = P.flash_attn(scale, causal=causal, softcap=softcap, window_left=wl, window_right=wr, top_left=True)
    _, lse, grads, mags = attention_backward_reference(q, k, v, do, *args, top_left=True)
    out = kernel(OP.FLASH_ATTN, [dtype] * 4)(q, k, v, params=p)
    expected, _ = attention_reference(q, k, v, *args, top_left=True)
    assert np.abs(f64(out) - expected).max() <= 2e-5 * np.abs(f64(v)).max()
    got = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(dtype))(q, k, v, lse.astype(np.float32), do, params=p)
    assert_gradients(got, grads, mags, dtype)


@pytest.mark.parametrize("dtype", [D.F32, D.F64, D.BF16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flash_attn_backward_layouts(dtype, layout, rng):
    case = (2, 4, 2, 33, 70, 12, 20, True, 40, -1, 0.0)
    q, k, v, do, p, args = case_operands(case, dtype, rng, layout)
    lse, grads, mags = saved_forward(q, k, v, do, args, layout, rng)
    out_layout = "transposed" if layout == "transposed" else "negative" if layout == "negative" else "strided"
    outs = tuple(make_operand(x.shape, dtype, out_layout, rng) for x in (q, k, v))
    got = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(dtype))(q, k, v, lse, do, out=outs, params=p)
    assert all(g is x for g, x in zip(got, outs))
    assert_gradients(outs, grads, mags, dtype)


def test_flash_attn_backward_of_the_kernels_own_forward(rng):
    """Chained through the kernels: the forward's lse feeds the backward."""
    q, k, v, do, p, args = case_operands((1, 4, 2, 150, 150, 32, 32, True, -1, -1, 0.0), D.F32, rng)
    o = np.zeros(q.shape, np.float32)
    lse = np.zeros(q.shape[:3], np.float32)
    kernel(OP.FLASH_ATTN, [D.F32] * 5)(q, k, v, out=(o, lse), params=p)
    got = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(D.F32))(q, k, v, lse, do, params=p)
    _, _, grads, mags = attention_backward_reference(q, k, v, do, *args)
    assert_gradients(got, grads, mags, D.F32)


def test_flash_attn_backward_rows_without_keys_contribute_nothing(rng):
    """Causal with Sq > Sk: the first rows see no key (lse -inf, output zeros): their dq is zero and
    they add nothing to dk, dv (even with a nonzero do on those rows)."""
    q, k, v, do, p, args = case_operands((1, 1, 1, 9, 3, 4, 4, True, -1, -1, 0.0), D.F32, rng)
    lse, grads, mags = saved_forward(q, k, v, do, args)
    assert np.isneginf(lse[0, 0, :6]).all()
    dq, dk, dv = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(D.F32))(q, k, v, lse, do, params=p)
    assert (dq[0, 0, :6] == 0).all()
    assert_gradients((dq, dk, dv), grads, mags, D.F32)
    # the last 3 query rows alone (bottom-right aligned, they keep their keys) give the same dk, dv
    rest = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(D.F32))(q[:, :, 6:], k, v, lse[:, :, 6:], do[:, :, 6:],
                                                                params=p)
    np.testing.assert_allclose(dk, rest[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dv, rest[2], rtol=1e-6, atol=1e-6)


def test_flash_attn_backward_empty_queries_give_zero_key_gradients(rng):
    q = np.zeros((1, 2, 0, 4), np.float32)
    k, v = (rng.standard_normal((1, 1, 5, 4)).astype(np.float32) for _ in range(2))
    dk, dv = np.full((1, 1, 5, 4), 7.0, np.float32), np.full((1, 1, 5, 4), 7.0, np.float32)
    kernel(OP.FLASH_ATTN_BACKWARD, backward_key(D.F32))(
        q, k, v, np.zeros((1, 2, 0), np.float32), q, out=(np.zeros_like(q), dk, dv), params=P.flash_attn(1.0))
    assert (dk == 0).all() and (dv == 0).all()


def test_a_nan_output_gradient_makes_its_gradients_nan(rng):
    q, k, v, do, p, args = case_operands((1, 1, 1, 3, 70, 2, 3, False, -1, -1, 0.0), D.F32, rng)
    lse, _, _ = saved_forward(q, k, v, do, args)
    do[0, 0, 1, 0] = np.nan
    dq, dk, dv = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(D.F32))(q, k, v, lse, do, params=p)
    assert np.isnan(dq[0, 0, 1]).all() and np.isfinite(dq[0, 0, [0, 2]]).all()
    assert np.isnan(dk).all()                        # the NaN row's ds reaches every key it sees
    assert np.isnan(dv[..., 0]).all() and np.isfinite(dv[..., 1:]).all()


def refusal_operands(rng, dtype=D.F32):
    nd = np_dtype(dtype)
    q = rng.standard_normal((1, 2, 4, 8)).astype(nd)
    k = rng.standard_normal((1, 2, 4, 8)).astype(nd)
    v = rng.standard_normal((1, 2, 4, 8)).astype(nd)
    lse = rng.standard_normal((1, 2, 4)).astype(np.float32)
    do = rng.standard_normal((1, 2, 4, 8)).astype(nd)
    outs = tuple(np.full((1, 2, 4, 8), 7.0, nd) for _ in range(3))
    return [q, k, v, lse, do], outs


def test_flash_attn_backward_refusals_write_nothing(rng):
    kb = kernel(OP.FLASH_ATTN_BACKWARD, backward_key(D.F32))
    p = P.flash_attn(0.5, causal=True)
    ins, outs = refusal_operands(rng)

    def refused(error, inputs=None, outputs=None, params=p):
        with pytest.raises(error):
            kb(*(ins if inputs is None else inputs), out=outs if outputs is None else outputs, params=params)
        assert all((x == 7.0).all() for x in outs)

    def replaced(i, x):
        return ins[:i] + [x] + ins[i + 1:]

    refused(fk.DTypeError, replaced(0, ins[0].astype(np.float64)))
    refused(fk.DTypeError, replaced(3, ins[3].astype(np.float64)))            # lse is F32
    refused(fk.DTypeError, replaced(4, ins[4].astype(np.float64)))
    refused(fk.DTypeError, outputs=outs[:2] + (np.full((1, 2, 4, 8), 7.0),))
    refused(fk.OperandCountError, ins[:4])
    refused(fk.OperandCountError, outputs=outs[:2])
    refused(fk.ShapeError, replaced(1, ins[1][:, :, :3]))                   # v has 4 keys
    refused(fk.ShapeError, replaced(3, ins[3][:, :, :3]))                   # lse
    refused(fk.ShapeError, replaced(4, ins[4][..., :7]))                    # do
    refused(fk.ShapeError, replaced(1, np.concatenate([ins[1]] * 3, 1)[:, :3]))   # 2 query heads, 3 kv heads
    refused(fk.ShapeError, outputs=(np.full((1, 2, 4, 7), 7.0, np.float32),) + outs[1:])
    refused(fk.ParamsError, params=None)
    read_only = np.full((1, 2, 4, 8), 7.0, np.float32)
    read_only.flags.writeable = False
    refused(fk.ReadOnlyError, outputs=outs[:2] + (read_only,))
    refused(fk.AliasError, outputs=(ins[0],) + outs[1:])                     # dq over q
    refused(fk.AliasError, outputs=outs[:1] + (ins[4],) + outs[2:])          # dk over do
    shared = np.full((2, 1, 2, 4, 8), 7.0, np.float32)
    refused(fk.AliasError, outputs=(outs[0], shared[0], shared[0]))         # dk and dv the same array
    refused(fk.AliasError, outputs=(shared.reshape(-1)[4:68].reshape(1, 2, 4, 8), shared[0], outs[2]))  # overlap
    self_overlap = np.lib.stride_tricks.as_strided(np.full(8, 7.0, np.float32), (1, 2, 4, 8), (0, 0, 0, 4))
    with pytest.raises(fk.AliasError):
        kb(*ins, out=(outs[0], outs[1], self_overlap), params=p)
    assert (shared == 7.0).all() and all((x == 7.0).all() for x in outs)



def test_graph_grad_of_flash_attn_runs_the_backward(rng):
    """Graph.grad through FLASH_ATTN: the forward node gains its lse output and FLASH_ATTN_BACKWARD
    gives the gradients of sum(seed * out)."""
    from fuel_kernel import graph as fg
    case = (1, 4, 2, 70, 90, 16, 8, True, -1, -1, 0.0)
    q, k, v, do, p, args = case_operands(case, D.F32, rng)
    g = fg.Graph()
    qi, ki, vi, seed = g.input(q.shape, D.F32), g.input(k.shape, D.F32), g.input(v.shape, D.F32), g.input(do.shape, D.F32)
    out = g.flash_attn(qi, ki, vi, params=p)
    grads = g.grad(out, [qi, ki, vi], seed=seed)
    got = g.compile(grads).run([q, k, v, do])
    _, _, expected, mags = attention_backward_reference(q, k, v, do, *args)
    assert_gradients(got, expected, mags, D.F32)


@pytest.mark.parametrize("dtype", [D.F32, D.BF16])
def test_several_output_calls_same_bits_for_every_thread_count(dtype, rng):
    """FLASH_ATTN with its lse (cut by batch x kv-head group x query blocks) and FLASH_ATTN_BACKWARD
    (cut by batch x kv head) run on the intra-op threads and give the same bits for every count."""
    from fuel_kernel import _dispatch
    q, k, v, do, p, _ = case_operands((2, 4, 2, 256, 256, 32, 32, True, 100, -1, 0.0), dtype, rng)
    nd = np_dtype(dtype)
    results = []
    for threads in (1, 2, 3, 7):
        o, lse = np.zeros(q.shape, nd), np.zeros(q.shape[:3], np.float32)
        grads = tuple(np.zeros(x.shape, nd) for x in (q, k, v))
        calls = _dispatch._parallel_calls()
        with fk.threads(threads):
            kernel(OP.FLASH_ATTN, [dtype] * 4 + [D.F32])(q, k, v, out=(o, lse), params=p)
            kernel(OP.FLASH_ATTN_BACKWARD, backward_key(dtype))(q, k, v, lse, do, out=grads, params=p)
        assert _dispatch._parallel_calls() >= calls + 2, "the calls ran whole: too small to cut"
        results.append([f64(x) for x in (o, lse) + grads])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b, equal_nan=True)
