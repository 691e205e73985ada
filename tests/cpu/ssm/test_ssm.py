"""State-space model ops (CAUSAL_CONV1D, SELECTIVE_SCAN, SSD_CHUNK_SCAN): every binding over every
layout against the plain float64 NumPy recurrences of tests/oracles.py, the precision claims,
edge sizes (L = 1, W > L, empty extents), special values, the Graph builders, and every refusal,
each leaving every output untouched."""
import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops as fk_ops
import oracles
from fuel_kernel import spec
from fuel_kernel.graph import Graph
from support import FLOAT_DTYPES, LAYOUTS, make_operand

OP = fk.OpKind
CONV, SCAN, SSD = OP.CAUSAL_CONV1D, OP.SELECTIVE_SCAN, OP.SSD_CHUNK_SCAN
N_OPERANDS = {CONV: 4, SCAN: 8, SSD: 6}
COVERED = {(op, (dt,) * N_OPERANDS[op]) for op in (CONV, SCAN, SSD) for dt in FLOAT_DTYPES}
UNIT = {fk.DType.F16: 2.0 ** -24, fk.DType.BF16: 2.0 ** -24, fk.DType.F32: 2.0 ** -24, fk.DType.F64: 2.0 ** -53}
HALF_ULP = {fk.DType.F16: 2.0 ** -11, fk.DType.BF16: 2.0 ** -8, fk.DType.F32: 2.0 ** -24, fk.DType.F64: 2.0 ** -53}


def kernel(op, dtype):
    return fk.bindings().lookup(op, [dtype] * N_OPERANDS[op], fk.Backend.CPU)


def f64(v):
    return oracles.up(v).astype(np.float64)


def check(got, want, scale, dtype, chain, where):
    """|err| <= (half ulp of the output + chain * u) * S + max_abs: the kernel header's bound, which
    implies the claim (the claim's max_rel is this with the chain at its 2^12 limit)."""
    claim = spec.CLAIMS[f"SSM_{dtype.name}"]
    assert chain <= 4096
    max_rel = HALF_ULP[dtype] + chain * UNIT[dtype]
    assert max_rel <= claim.max_rel
    g = np.asarray(got).astype(np.float64)
    assert g.shape == want.shape, where
    assert (np.isnan(g) == np.isnan(want)).all(), where
    fin = np.isfinite(want)
    assert (g[~fin & ~np.isnan(want)] == want[~fin & ~np.isnan(want)]).all(), where
    err = np.abs(g[fin] - want[fin])
    bound = max_rel * scale[fin] + claim.max_abs + float(ml_dtypes.finfo(dtype.numpy).smallest_subnormal)
    assert (err <= bound).all(), (where, float(np.max(err - bound)))


def operand(shape, dtype, layout, rng, values):
    """values laid out as `layout` (broadcast: repeated along the first axis, stride 0)."""
    return make_operand(shape, dtype, layout, rng, values=np.asarray(values), special=False)


# ---- CAUSAL_CONV1D -------------------------------------------------------------------------------
CONV_SHAPES = [(2, 3, 9, 4), (1, 1, 1, 1), (1, 2, 1, 4), (2, 2, 3, 5), (3, 4, 40, 3), (0, 2, 5, 2),
               (2, 0, 5, 2), (2, 3, 0, 2), (1, 5, 300, 33)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=[d.short_name for d in FLOAT_DTYPES])
def test_causal_conv1d_binding(dtype, rng):
    k = kernel(CONV, dtype)
    assert k.n_outputs == 1 and k.has_cost and k.precision.notes
    for b, d, length, w in CONV_SHAPES:
        for layout in LAYOUTS:
            for activation in ("none", "silu"):
                x = operand((b, d, length), dtype, layout, rng, rng.standard_normal((b, d, length)) * 2)
                wt = operand((d, w), dtype, layout, rng, rng.standard_normal((d, w)))
                bias = operand((d,), dtype, layout, rng, rng.standard_normal(d))
                out = np.full((b, d, length), 7, dtype.numpy)
                params = fk.params.causal_conv1d(activation)
                assert k(x, wt, bias, out=out, params=params) is out
                want, mag = oracles.causal_conv1d(f64(x), f64(wt), f64(bias), activation)
                check(out, want, 1.25 * mag, dtype, w + 8, ((b, d, length, w), layout, activation))


def test_causal_conv1d_matches_a_direct_loop():
    """The reference is itself the definition: y[t] = bias + sum_k w[k] x[t - (W-1) + k], zeros before 0."""
    rng = np.random.default_rng(5)
    x, w, bias = rng.standard_normal((2, 3, 6)), rng.standard_normal((3, 4)), rng.standard_normal(3)
    want = np.zeros_like(x)
    for b, d, t in np.ndindex(x.shape):
        want[b, d, t] = bias[d] + sum(w[d, k] * x[b, d, t - 3 + k] for k in range(4) if t - 3 + k >= 0)
    np.testing.assert_allclose(oracles.causal_conv1d(x, w, bias)[0], want, rtol=1e-14, atol=1e-14)
    got = fk.dispatch(CONV, [x, w, bias])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    silu = fk.dispatch(CONV, [x, w, bias], params=fk.params.causal_conv1d("silu"))
    np.testing.assert_allclose(silu, want / (1 + np.exp(-want)), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("dtype", (fk.DType.F32, fk.DType.F64))
def test_causal_conv1d_special_values(dtype):
    x = np.zeros((1, 3, 5), dtype.numpy)
    x[0, 0, 1] = np.nan
    x[0, 1, 2] = np.inf
    x[0, 2, 0] = -np.inf
    w = np.ones((3, 2), dtype.numpy)
    bias = np.zeros(3, dtype.numpy)
    y = fk.dispatch(CONV, [x, w, bias])
    # a tap reads x[t] and x[t-1]: a special value reaches two steps
    assert np.isnan(y[0, 0]).tolist() == [False, True, True, False, False]
    assert y[0, 1].tolist() == [0, 0, np.inf, np.inf, 0]
    assert y[0, 2].tolist() == [-np.inf, -np.inf, 0, 0, 0]
    silu = fk.dispatch(CONV, [x, w, bias], params=fk.params.causal_conv1d("silu"))
    assert silu[0, 1].tolist() == [0, 0, np.inf, np.inf, 0]
    assert silu[0, 2, :2].tolist() == [0, 0] and np.signbit(silu[0, 2, :2]).all()   # -0, the limit, as SILU
    big = np.full((1, 1, 2), -200, dtype.numpy)
    assert (fk.dispatch(CONV, [big, np.ones((1, 1), dtype.numpy), np.zeros(1, dtype.numpy)],
                        params=fk.params.causal_conv1d("silu")) <= 0).all()


# ---- SELECTIVE_SCAN ------------------------------------------------------------------------------
SCAN_SHAPES = [(2, 3, 7, 4), (1, 1, 1, 1), (1, 2, 1, 16), (2, 4, 33, 8), (0, 2, 5, 3), (2, 0, 5, 3),
               (2, 3, 0, 3), (1, 2, 4, 0), (1, 3, 200, 16), (2, 37, 9, 5)]   # 37: two groups of 16 lanes and 5


def scan_inputs(shape, dtype, layouts, rng, softplus):
    b, d, length, n = shape
    u = rng.standard_normal((b, d, length))
    delta = rng.standard_normal((b, d, length)) if softplus else rng.uniform(0.001, 0.5, (b, d, length))
    a = -np.exp(rng.standard_normal((d, n)))             # Mamba's A = -exp(A_log): a decaying state
    bm, cm = rng.standard_normal((b, n, length)), rng.standard_normal((b, n, length))
    skip = rng.standard_normal(d)
    values = (u, delta, a, bm, cm, skip)
    return [operand(v.shape, dtype, layout, rng, v) for v, layout in zip(values, layouts)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=[d.short_name for d in FLOAT_DTYPES])
def test_selective_scan_binding(dtype, rng):
    k = kernel(SCAN, dtype)
    assert k.n_outputs == 2 and k.has_cost
    for shape in SCAN_SHAPES:
        b, d, length, n = shape
        for i, layout in enumerate(LAYOUTS):
            layouts = [layout] * 6 if i % 2 == 0 else [LAYOUTS[(i + j) % len(LAYOUTS)] for j in range(6)]
            for softplus in (False, True):
                inputs = scan_inputs(shape, dtype, layouts, rng, softplus)
                y = np.full((b, d, length), 7, dtype.numpy)
                state = make_operand((b, d, n), dtype, "negative", rng, values=np.full((b, d, n), 7.0))
                assert k(*inputs, out=(y, state), params=fk.params.selective_scan(softplus)) == (y, state)
                want_y, want_h, mag_y, mag_h = oracles.selective_scan(*(f64(v) for v in inputs), softplus)
                chain = (12 if softplus else 6) * length + n + 8
                check(y, want_y, mag_y, dtype, chain, (shape, layouts, softplus, "y"))
                check(state, want_h, mag_h, dtype, chain, (shape, layouts, softplus, "state"))


@pytest.mark.parametrize("dtype", (fk.DType.F32, fk.DType.BF16))
def test_selective_scan_channels_do_not_depend_on_their_lane_group(dtype):
    """The F32 recurrence runs 16 channels side by side: each channel alone, and channels taken from
    the middle of a call (another lane position), give the bits of the whole call."""
    rng = np.random.default_rng(5)
    inputs = scan_inputs((2, 37, 23, 6), dtype, ["contiguous"] * 6, rng, True)
    params = fk.params.selective_scan(True)
    y, h = fk.dispatch(SCAN, inputs, params=params)
    for lo, hi in ((0, 1), (5, 6), (36, 37), (3, 30), (17, 37)):
        part = [inputs[0][:, lo:hi], inputs[1][:, lo:hi], inputs[2][lo:hi], inputs[3], inputs[4], inputs[5][lo:hi]]
        y_part, h_part = fk.dispatch(SCAN, part, params=params)
        np.testing.assert_array_equal(y_part.view(np.uint16 if dtype == fk.DType.BF16 else np.uint32),
                                      y[:, lo:hi].view(np.uint16 if dtype == fk.DType.BF16 else np.uint32))
        np.testing.assert_array_equal(h_part, h[:, lo:hi])


def test_selective_scan_softplus_within_3_ulp():
    """fk_fast_softplusf's bound, seen through the scan: with one step, u = 1, B = 1, A = 0, C = 0 and
    D = 0, the state is dt = softplus(delta) itself (h = 1 * 0 + dt * 1 * 1)."""
    x = np.concatenate([np.linspace(-104, 20, 200001), [-np.inf, -88.7, -20, -1e-30, 0, 1e-30, 0.5, 19.99, 20]])
    x = x.astype(np.float32)
    d = x.size
    one, zero = np.ones((1, d, 1), np.float32), np.zeros((1, 1, 1), np.float32)
    _, h = fk.dispatch(SCAN, [one, x.reshape(1, d, 1), np.zeros((d, 1), np.float32), np.ones((1, 1, 1), np.float32),
                              zero, np.zeros(d, np.float32)], params=fk.params.selective_scan(True))
    want = np.log1p(np.exp(x.astype(np.float64)))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    got = h.reshape(d).astype(np.float64)
    assert (np.abs(got - want) <= 3 * ulp).all(), float(np.max(np.abs(got - want) / ulp))


def test_selective_scan_reference_is_the_recurrence():
    """The vectorised reference against scalar loops of the Mamba definition."""
    rng = np.random.default_rng(8)
    b, d, length, n = 2, 3, 5, 4
    u, delta = rng.standard_normal((b, d, length)), rng.standard_normal((b, d, length))
    a, skip = -np.exp(rng.standard_normal((d, n))), rng.standard_normal(d)
    bm, cm = rng.standard_normal((b, n, length)), rng.standard_normal((b, n, length))
    y, h, _, _ = oracles.selective_scan(u, delta, a, bm, cm, skip, True)
    for bi, di in np.ndindex(b, d):
        state = np.zeros(n)
        for t in range(length):
            dt = np.log(1 + np.exp(delta[bi, di, t]))
            state = np.exp(dt * a[di]) * state + dt * bm[bi, :, t] * u[bi, di, t]
            assert abs(y[bi, di, t] - (cm[bi, :, t] @ state + skip[di] * u[bi, di, t])) < 1e-12
        np.testing.assert_allclose(h[bi, di], state, rtol=1e-12, atol=1e-14)
    got_y, got_h = fk.dispatch(SCAN, [u, delta, a, bm, cm, skip], params=fk.params.selective_scan(True))
    np.testing.assert_allclose(got_y, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_h, h, rtol=1e-12, atol=1e-12)


def test_selective_scan_softplus_threshold_and_defaults():
    """softplus(v) = v above 20; params of kind none: no softplus."""
    u, a = np.ones((1, 1, 2)), np.full((1, 1), -0.01)
    bm, cm, skip = np.ones((1, 1, 2)), np.ones((1, 1, 2)), np.zeros(1)
    delta = np.full((1, 1, 2), 30.0)
    y_sp, _ = fk.dispatch(SCAN, [u, delta, a, bm, cm, skip], params=fk.params.selective_scan(True))
    y_plain, _ = fk.dispatch(SCAN, [u, delta, a, bm, cm, skip])
    np.testing.assert_array_equal(y_sp, y_plain)
    delta = np.full((1, 1, 2), 0.5)
    y_sp, _ = fk.dispatch(SCAN, [u, delta, a, bm, cm, skip], params=fk.params.selective_scan(True))
    y_plain, _ = fk.dispatch(SCAN, [u, delta, a, bm, cm, skip], params=fk.params.none())
    assert y_sp[0, 0, 0] == pytest.approx(np.log1p(np.exp(0.5)))
    assert y_plain[0, 0, 0] == pytest.approx(0.5)


@pytest.mark.parametrize("dtype", (fk.DType.F32, fk.DType.F64))
def test_selective_scan_special_values(dtype):
    """A NaN input at step t reaches y from t on in its (b, d) row, and its state; others stay finite."""
    rng = np.random.default_rng(11)
    inputs = scan_inputs((1, 3, 6, 2), dtype, ["contiguous"] * 6, rng, False)
    inputs[0][0, 1, 2] = np.nan
    y, h = fk.dispatch(SCAN, inputs)
    assert np.isnan(y[0, 1]).tolist() == [False, False, True, True, True, True]
    assert np.isnan(h[0, 1]).all()
    assert np.isfinite(y[0, [0, 2]]).all() and np.isfinite(h[0, [0, 2]]).all()
    inputs[0][0, 1, 2] = 0
    inputs[1][0, 2, 0] = np.inf                          # dt = inf with A < 0: the state is wiped
    y, h = fk.dispatch(SCAN, inputs)
    assert np.isnan(y[0, 2, 0]) or np.isinf(y[0, 2, 0])
    assert np.isfinite(y[0, :2]).all()


# ---- SSD_CHUNK_SCAN ------------------------------------------------------------------------------
SSD_SHAPES = [(2, 9, 2, 3, 4), (1, 1, 1, 1, 1), (1, 1, 2, 4, 8), (1, 33, 2, 4, 3), (0, 4, 2, 2, 2),
              (1, 0, 2, 2, 2), (1, 4, 0, 2, 2), (1, 4, 2, 0, 2), (1, 4, 2, 2, 0), (1, 130, 1, 8, 8)]
CHUNKS = (1, 4, 64, 1000)


def ssd_inputs(shape, dtype, layouts, rng):
    b, length, h, p, n = shape
    values = (rng.standard_normal((b, length, h, p)), -rng.uniform(0.0, 1.5, (b, length, h)),
              rng.standard_normal((b, length, h, n)), rng.standard_normal((b, length, h, n)))
    return [operand(v.shape, dtype, layout, rng, v) for v, layout in zip(values, layouts)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=[d.short_name for d in FLOAT_DTYPES])
def test_ssd_chunk_scan_binding(dtype, rng):
    k = kernel(SSD, dtype)
    assert k.n_outputs == 2 and k.has_cost
    for shape in SSD_SHAPES:
        b, length, h, p, n = shape
        for i, layout in enumerate(LAYOUTS):
            layouts = [layout] * 4 if i % 2 == 0 else [LAYOUTS[(i + j) % len(LAYOUTS)] for j in range(4)]
            for chunk in CHUNKS:
                inputs = ssd_inputs(shape, dtype, layouts, rng)
                y = np.full((b, length, h, p), 7, dtype.numpy)
                state = make_operand((b, h, p, n), dtype, "offset", rng, values=np.full((b, h, p, n), 7.0))
                assert k(*inputs, out=(y, state), params=fk.params.ssd_chunk_scan(chunk)) == (y, state)
                want_y, want_h, mag_y, mag_h = oracles.ssd_scan(*(f64(v) for v in inputs))
                chain = 4 * length + 2 * n + 2 * min(chunk, max(length, 1)) + 8
                check(y, want_y, mag_y, dtype, chain, (shape, layouts, chunk, "Y"))
                check(state, want_h, mag_h, dtype, chain, (shape, layouts, chunk, "state"))


def test_ssd_reference_is_the_recurrence_and_chunks_agree():
    """The reference against scalar loops; every chunk size within a few ulp of the sequential order
    (chunk 1 is the recurrence itself, evaluated one step per chunk)."""
    rng = np.random.default_rng(13)
    x, a, bm, cm = ssd_inputs((1, 10, 2, 3, 4), fk.DType.F64, ["contiguous"] * 4, rng)
    y, h, _, _ = oracles.ssd_scan(x, a, bm, cm)
    for hh in range(2):
        state = np.zeros((3, 4))
        for t in range(10):
            state = np.exp(a[0, t, hh]) * state + np.outer(x[0, t, hh], bm[0, t, hh])
            np.testing.assert_allclose(y[0, t, hh], state @ cm[0, t, hh], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(h[0, hh], state, rtol=1e-13, atol=1e-14)
    for chunk in (1, 2, 3, 7, 10, 64):
        got_y, got_h = fk.dispatch(SSD, [x, a, bm, cm], params=fk.params.ssd_chunk_scan(chunk))
        np.testing.assert_allclose(got_y, y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_h, h, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", (fk.DType.F32, fk.DType.F64))
def test_ssd_special_values(dtype):
    """A NaN in X at step t reaches Y from t on in that head's P column, and that state row."""
    rng = np.random.default_rng(17)
    x, a, bm, cm = ssd_inputs((1, 8, 2, 3, 2), dtype, ["contiguous"] * 4, rng)
    x[0, 3, 1, 2] = np.nan
    for chunk in (1, 3, 64):
        y, h = fk.dispatch(SSD, [x, a, bm, cm], params=fk.params.ssd_chunk_scan(chunk))
        assert np.isnan(y[0, :, 1, 2]).tolist() == [False] * 3 + [True] * 5
        assert np.isfinite(y[0, :, 0]).all() and np.isfinite(y[0, :, 1, :2]).all()
        assert np.isnan(h[0, 1, 2]).all() and np.isfinite(h[0, 0]).all() and np.isfinite(h[0, 1, :2]).all()


# ---- call forms, Graph builders ------------------------------------------------------------------
def test_dispatch_allocates_and_graph_builders_return_tuples(rng):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w, bias = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    scan = scan_inputs((2, 3, 5, 4), fk.DType.F32, ["contiguous"] * 6, rng, True)
    ssd = ssd_inputs((2, 5, 2, 3, 4), fk.DType.F32, ["contiguous"] * 4, rng)
    sp, chunk = fk.params.selective_scan(True), fk.params.ssd_chunk_scan(2)
    y_conv = fk.dispatch(CONV, [x, w, bias], params=fk.params.causal_conv1d("silu"))
    y_scan, h_scan = fk.dispatch(SCAN, scan, params=sp)
    y_ssd, h_ssd = fk.dispatch(SSD, ssd, params=chunk)
    assert y_scan.shape == (2, 3, 5) and h_scan.shape == (2, 3, 4)
    assert y_ssd.shape == (2, 5, 2, 3) and h_ssd.shape == (2, 2, 3, 4)
    assert fk_ops.infer_output_shapes(SSD, [v.shape for v in ssd]) == ((2, 5, 2, 3), (2, 2, 3, 4))

    g = Graph()
    gc = g.causal_conv1d(g.input(x.shape, "f32", "x"), g.constant(w), g.constant(bias),
                         params=fk.params.causal_conv1d("silu"))
    scan_vals = [g.input(v.shape, "f32", f"s{i}") for i, v in enumerate(scan)]
    gs = g.selective_scan(*scan_vals, params=sp)
    ssd_vals = [g.input(v.shape, "f32", f"d{i}") for i, v in enumerate(ssd)]
    gd = g.ssd_chunk_scan(*ssd_vals, params=chunk)
    assert isinstance(gs, tuple) and len(gs) == 2 and isinstance(gd, tuple) and len(gd) == 2
    got = g.compile([gc, *gs, *gd]).run([x, *scan, *ssd])
    for a, b in zip(got, (y_conv, y_scan, h_scan, y_ssd, h_ssd)):
        np.testing.assert_array_equal(a, b)


# ---- refusals ------------------------------------------------------------------------------------
def refused(op, inputs, outs, error, params=None, match=None):
    k = kernel(op, fk.DType.F32)
    before = [np.array(o, copy=True) for o in outs]
    with pytest.raises(error, match=match):
        k(*inputs, out=tuple(outs) if len(outs) > 1 else outs[0], params=params)
    for o, b in zip(outs, before):
        np.testing.assert_array_equal(o, b)


def f32(*shape):
    return np.full(shape, 9, np.float32)


def test_causal_conv1d_refusals_leave_the_output_untouched(rng):
    x, w, bias, y = f32(2, 3, 5), f32(3, 4), f32(3), f32(2, 3, 5)
    refused(CONV, [x, w], [y], fk.OperandCountError)
    refused(CONV, [x.astype(np.float64), w, bias], [y], fk.DTypeError)
    refused(CONV, [x, w, bias], [y.astype(np.float64)], fk.DTypeError)
    refused(CONV, [x, f32(2, 4), bias], [y], fk.ShapeError)
    refused(CONV, [x, f32(3, 0), bias], [y], fk.ShapeError)
    refused(CONV, [x, w, f32(2)], [y], fk.ShapeError)
    refused(CONV, [x, w, bias], [f32(2, 3, 4)], fk.ShapeError)
    refused(CONV, [f32(3, 5), w, bias], [f32(3, 5)], fk.ShapeError)
    locked = y.copy()
    locked.flags.writeable = False
    refused(CONV, [x, w, bias], [locked], fk.ReadOnlyError)
    refused(CONV, [x, w, bias], [x], fk.AliasError)
    refused(CONV, [x, w, bias], [np.broadcast_to(np.float32(0), (2, 3, 5))], fk.ReadOnlyError)
    refused(CONV, [x, w, bias], [y], fk.ParamsError, params=fk.params.selective_scan(True))
    with pytest.raises(fk.ParamsError):
        fk.params.causal_conv1d("relu")
    with pytest.raises(fk.ShapeError):
        fk_ops.infer_output_shape(CONV, [(2, 3, 5), (3, 0), (3,)])


def test_scan_refusals_leave_every_output_untouched(rng):
    b, d, length, n = 2, 3, 5, 4
    inputs = [f32(b, d, length), f32(b, d, length), f32(d, n), f32(b, n, length), f32(b, n, length), f32(d)]
    y, h = f32(b, d, length), f32(b, d, n)
    refused(SCAN, inputs[:-1], [y, h], fk.OperandCountError)
    refused(SCAN, inputs, [y], fk.OperandCountError)
    refused(SCAN, inputs, [y, h.astype(np.float64)], fk.DTypeError)
    refused(SCAN, [inputs[0].astype(np.float64)] + inputs[1:], [y, h], fk.DTypeError)
    for i, bad in enumerate((f32(b, d, 4), f32(b, d, length + 1), f32(d, n + 1), f32(b, n, 4), f32(1, n, length),
                             f32(d + 1))):
        refused(SCAN, inputs[:i] + [bad] + inputs[i + 1:], [y, h], fk.ShapeError)
    refused(SCAN, inputs, [y, f32(b, d, n + 1)], fk.ShapeError)
    refused(SCAN, inputs, [f32(b, d, 4), h], fk.ShapeError)
    for i in range(2):
        locked = [y.copy(), h.copy()]
        locked[i].flags.writeable = False
        refused(SCAN, inputs, locked, fk.ReadOnlyError, match=f"output {i}")
    refused(SCAN, inputs, [inputs[0], h], fk.AliasError)
    refused(SCAN, inputs, [y, inputs[4].reshape(-1)[:b * d * n].reshape(b, d, n)], fk.AliasError)   # state over C
    shared = np.zeros(b * d * length + 8, np.float32)
    refused(SCAN, inputs, [shared[:b * d * length].reshape(b, d, length), shared[:b * d * n].reshape(b, d, n)],
            fk.AliasError, match="overlaps output 0")
    refused(SCAN, inputs, [y, np.broadcast_to(np.float32(0), (b, d, n))], fk.ReadOnlyError)
    refused(SCAN, inputs, [y, h], fk.ParamsError, params=fk.params.ssd_chunk_scan(4))


def test_ssd_refusals_leave_every_output_untouched(rng):
    b, length, nh, p, n = 2, 5, 2, 3, 4
    inputs = [f32(b, length, nh, p), f32(b, length, nh), f32(b, length, nh, n), f32(b, length, nh, n)]
    y, h = f32(b, length, nh, p), f32(b, nh, p, n)
    refused(SSD, inputs[:-1], [y, h], fk.OperandCountError)
    refused(SSD, inputs, [y, h.astype(np.float16)], fk.DTypeError)
    for i, bad in enumerate((f32(b, length, nh), f32(b, length, nh + 1), f32(b, length, nh, n + 1),
                             f32(b, 4, nh, n))):
        refused(SSD, inputs[:i] + [bad] + inputs[i + 1:], [y, h], fk.ShapeError)
    refused(SSD, inputs, [y, f32(b, nh, n, p)], fk.ShapeError)
    for i in range(2):
        locked = [y.copy(), h.copy()]
        locked[i].flags.writeable = False
        refused(SSD, inputs, locked, fk.ReadOnlyError, match=f"output {i}")
    refused(SSD, inputs, [inputs[0], h], fk.AliasError)
    refused(SSD, inputs, [y, h], fk.ParamsError, params=fk.params.causal_conv1d())
    with pytest.raises(fk.ParamsError):
        fk.params.ssd_chunk_scan(0)


def broadcast(shape):
    """A float32 operand of `shape` with every stride 0."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, (0,) * len(shape))


def test_huge_stride_zero_extents_are_refused_before_any_write():
    """A stride-0 output of 2**59 elements overlaps itself (AliasError, the other output untouched);
    with the outputs empty (B = 0), scratch sizes over broadcast extents overflow the size
    arithmetic: a ShapeError."""
    huge = 2 ** 59
    u, skip = np.ones((1, 1, 2), np.float32), np.zeros(1, np.float32)
    out_y = np.full((1, 1, 2), 9, np.float32)
    with pytest.raises(fk.AliasError, match="overlaps itself"):
        fk.dispatch(SCAN, [u, u, broadcast((1, huge)), broadcast((1, huge, 2)), broadcast((1, huge, 2)), skip],
                    (out_y, broadcast((1, 1, huge))))
    assert (out_y == 9).all()
    big, steps = 2 ** 60, 2 ** 58      # NumPy caps an array's elements times its item size at 2**63
    with pytest.raises(fk.ShapeError, match="scratch"):
        fk.dispatch(CONV, [broadcast((0, 1, big)), broadcast((1, big)), skip], broadcast((0, 1, big)))
    with pytest.raises(fk.ShapeError, match="scratch"):
        fk.dispatch(SCAN, [broadcast((0, 1, steps)), broadcast((0, 1, steps)), broadcast((1, 4)),
                           broadcast((0, 4, steps)), broadcast((0, 4, steps)), skip],
                    (broadcast((0, 1, steps)), broadcast((0, 1, 4))))
    with pytest.raises(fk.ShapeError, match="scratch"):
        fk.dispatch(SSD, [broadcast((0, steps, 1, 1)), broadcast((0, steps, 1)), broadcast((0, steps, 1, 4)),
                          broadcast((0, steps, 1, 4))], (broadcast((0, steps, 1, 1)), broadcast((0, 1, 1, 4))),
                    params=fk.params.ssd_chunk_scan(steps))


def test_ssm_ops_in_the_spec():
    assert fk_ops.n_outputs(CONV) == 1 and fk_ops.n_outputs(SCAN) == 2 and fk_ops.n_outputs(SSD) == 2
    numbers = [spec.OPS[i].name for i in range(len(spec.OPS))]
    assert numbers.index("SELECTIVE_SCAN") == numbers.index("CAUSAL_CONV1D") + 1
    assert numbers.index("SSD_CHUNK_SCAN") == numbers.index("SELECTIVE_SCAN") + 1
    shapes = {CONV: [(2, 3, 8), (3, 4), (3,), (2, 3, 8)],
              SCAN: [(2, 3, 8), (2, 3, 8), (3, 4), (2, 4, 8), (2, 4, 8), (3,), (2, 3, 8), (2, 3, 4)],
              SSD: [(2, 8, 3, 5), (2, 8, 3), (2, 8, 3, 4), (2, 8, 3, 4), (2, 8, 3, 5), (2, 3, 5, 4)]}
    for op in (CONV, SCAN, SSD):
        for dtype in FLOAT_DTYPES:
            k = kernel(op, dtype)
            assert k.precision.max_rel == spec.CLAIMS[f"SSM_{dtype.name}"].max_rel
            c = k.cost(*shapes[op])
            assert c.flops > 0 and c.bytes_moved > 0


# ---- threads -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.BF16, fk.DType.F64], ids=lambda d: d.short_name)
def test_calls_large_enough_for_the_pool_give_the_same_bits_on_any_thread_count(dtype, rng):
    """Calls past the 2^20 element-step threshold cut into tasks (conv: channels; scan: blocks of 16
    channels of one batch; ssd: (batch, head)): every thread count gives the same bits, and they are
    the oracle's at the claim, with a strided operand in each."""
    layouts = ["contiguous", "strided", "contiguous", "negative", "offset", "contiguous"]
    conv = [operand(s, dtype, layout, rng, rng.standard_normal(s))
            for s, layout in (((2, 64, 2048), "strided"), ((64, 4), "contiguous"), ((64,), "contiguous"))]
    scan = scan_inputs((2, 64, 512, 16), dtype, layouts, rng, True)
    ssd = ssd_inputs((2, 256, 4, 16, 16), dtype, layouts[:4], rng)
    runs = {name: [] for name in ("conv", "scan", "ssd")}
    for threads in (1, 2, 3):
        with fk.threads(threads):
            runs["conv"].append((fk.dispatch(CONV, conv, params=fk.params.causal_conv1d("silu")),))
            runs["scan"].append(fk.dispatch(SCAN, scan, params=fk.params.selective_scan(True)))
            runs["ssd"].append(fk.dispatch(SSD, ssd, params=fk.params.ssd_chunk_scan(64)))
    for name, outs in runs.items():
        for other in outs[1:]:
            for got, first in zip(other, outs[0]):
                np.testing.assert_array_equal(np.asarray(got).view(np.uint8), np.asarray(first).view(np.uint8),
                                              err_msg=name)
    want, mag = oracles.causal_conv1d(*(f64(v) for v in conv), "silu")
    check(runs["conv"][0][0], want, mag, dtype, 4 + 8, "conv")
    want_y, want_h, mag_y, mag_h = oracles.selective_scan(*(f64(v) for v in scan), True)
    check(runs["scan"][0][0], want_y, mag_y, dtype, 4 * 512 + 16 + 8, "scan y")
    check(runs["scan"][0][1], want_h, mag_h, dtype, 4 * 512 + 16 + 8, "scan state")
    want_y, want_h, mag_y, mag_h = oracles.ssd_scan(*(f64(v) for v in ssd))
    check(runs["ssd"][0][0], want_y, mag_y, dtype, 4 * 256 + 2 * 16 + 2 * 64 + 8, "ssd y")
    check(runs["ssd"][0][1], want_h, mag_h, dtype, 4 * 256 + 2 * 16 + 2 * 64 + 8, "ssd state")
