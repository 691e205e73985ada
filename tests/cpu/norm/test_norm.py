"""SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM, RMS_NORM, LAYER_NORM and the softmax backward ops against a
long-double reference: every binding, every layout, awkward shapes, huge inputs (stability), NaN/inf
rows, the precision claims, a finite-difference check of the backward formulas, and error paths
that leave the output untouched."""
import numpy as np
import pytest

import fuel_kernel as fk
import oracles
from support import FLOAT_DTYPES, LAYOUTS, make_operand

OPS = (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM, fk.OpKind.RMS_NORM,
       fk.OpKind.LAYER_NORM)
N_INPUTS = {fk.OpKind.SOFTMAX_LAST_DIM: 1, fk.OpKind.LOG_SOFTMAX_LAST_DIM: 1,
            fk.OpKind.RMS_NORM: 2, fk.OpKind.LAYER_NORM: 3}
BACKWARD_OPS = (fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD, fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD)
N_INPUTS.update({op: 2 for op in BACKWARD_OPS})
FORWARD_CASES = [(op, dt) for op in OPS for dt in FLOAT_DTYPES]
BACKWARD_CASES = [(op, dt) for op in BACKWARD_OPS for dt in FLOAT_DTYPES]
CASES = FORWARD_CASES + BACKWARD_CASES
SHAPES = [(5, 7), (1, 1), (3, 1), (1, 257), (2, 3, 17), (0, 4), (4, 0), (13,), (2, 1100)]
EPS = 1e-5


def reference(op, x, w=None, b=None, eps=EPS, claim=None):
    """(expected, scale) in long double: |err| must be <= max_rel * scale + max_abs (the scale each
    claim's notes name: the F32-compute LAYER_NORM scale has a std term, the F64 one none). The
    references are oracles.py's, run in long double."""
    x = np.asarray(x).astype(np.longdouble)
    if op in (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM):
        y = oracles.softmax_last_dim(x, log=op == fk.OpKind.LOG_SOFTMAX_LAST_DIM)
        return y, np.abs(y)
    w = np.asarray(w).astype(np.longdouble)
    if op == fk.OpKind.RMS_NORM:
        y = oracles.rms_norm(x, eps, w)
        return y, np.abs(y)
    b = np.asarray(b).astype(np.longdouble)
    with_std = claim is None or "+std)" in claim.notes
    return oracles.layer_norm(x, eps, w, b), oracles.layer_norm_error_scale(x, eps, w, b, with_std)


def check(got, expected, scale, claim, where):
    g = got.astype(np.longdouble)
    assert (np.isnan(g) == np.isnan(expected)).all(), where
    fin = np.isfinite(expected)
    assert (g[~fin & ~np.isnan(expected)] == expected[~fin & ~np.isnan(expected)]).all(), where
    err = np.abs(g[fin] - expected[fin])
    bound = claim.max_rel * scale[fin] + claim.max_abs
    assert (err <= bound).all(), (where, float(np.max(err - bound)))


def call(kernel, op, inputs, out, eps=EPS):
    if N_INPUTS[op] == 1 or op in BACKWARD_OPS:
        params = fk.params.softmax_last_dim()
    else:
        params = fk.params.norm_last_dim(eps)
    return kernel(*inputs, out=out, params=params)


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:divide by zero")
@pytest.mark.parametrize("op,dtype", FORWARD_CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in FORWARD_CASES])
def test_norm_binding(op, dtype, rng):
    kernels = fk.bindings().alternatives(op, [dtype] * (N_INPUTS[op] + 1), fk.Backend.CPU)
    assert kernels
    for kernel in kernels:
        assert kernel.caps & fk.KernelCaps.STRIDED_INPUT
        for shape in SHAPES:
            d = shape[-1]
            for layout in LAYOUTS:
                x = make_operand(shape, dtype, layout, rng, special=False)
                inputs = [x]
                if N_INPUTS[op] >= 2:
                    inputs.append(make_operand((d,), dtype, layout if layout != "broadcast" else "strided",
                                               rng, special=False))
                if N_INPUTS[op] == 3:
                    inputs.append(make_operand((d,), dtype, "negative", rng, special=False))
                out = np.full(shape, 7, dtype=dtype.numpy)
                call(kernel, op, inputs, out)
                expected, scale = reference(op, *inputs, claim=kernel.precision)
                check(out, expected, scale, kernel.precision, (kernel.source, shape, layout))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_is_stable_for_huge_inputs_and_follows_nan_rules(dtype):
    big = 60000.0 if dtype == fk.DType.F16 else 1e30
    x = np.array([[big, big - 1, -big, 0.0],
                  [1.0, np.nan, 2.0, 3.0],
                  [np.inf, 1.0, 2.0, 3.0],
                  [-np.inf, -np.inf, -np.inf, -np.inf],
                  [-np.inf, 0.0, -np.inf, 1.0]]).astype(dtype.numpy)
    for op in (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM):
        kernel = fk.bindings().lookup(op, [dtype, dtype], fk.Backend.CPU)
        out = call(kernel, op, [x], np.empty_like(x)).astype(np.float64)
        assert np.isfinite(out[0, :2]).all()
        assert np.isnan(out[1:4]).all()
        if op == fk.OpKind.SOFTMAX_LAST_DIM:
            assert out[4, 0] == 0.0 and out[4, 2] == 0.0          # masked entries are exactly 0
            np.testing.assert_allclose(out[0].sum(), 1.0, rtol=1e-2)
        else:
            assert out[4, 0] == -np.inf


def test_rms_and_layer_norm_accept_no_params_as_default_eps(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    t = fk.bindings()
    out = t.lookup(fk.OpKind.RMS_NORM, [fk.DType.F32] * 3, 0)(x, w, out=np.empty_like(x))
    expected, scale = reference(fk.OpKind.RMS_NORM, x, w, eps=1e-5)
    check(out, expected, scale, t.lookup(fk.OpKind.RMS_NORM, [fk.DType.F32] * 3, 0).precision, "rms")
    out = fk.dispatch(fk.OpKind.LAYER_NORM, [x, w, b], params=fk.params.norm_last_dim(0.5))
    claim = t.lookup(fk.OpKind.LAYER_NORM, [fk.DType.F32] * 4, 0).precision
    expected, scale = reference(fk.OpKind.LAYER_NORM, x, w, b, eps=0.5, claim=claim)
    check(out, expected, scale, claim, "ln")


def test_big_f32_softmax_rows_meet_the_claim(rng):
    x = (rng.standard_normal((64, 1024)) * 8).astype(np.float32)
    for op in (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM):
        kernel = fk.bindings().lookup(op, [fk.DType.F32] * 2, 0)
        out = call(kernel, op, [x], np.empty_like(x))
        expected, scale = reference(op, x)
        check(out, expected, scale, kernel.precision, op)


def adversarial_rows(op, rng):
    """(name, x, eps) rows that stress the F32 code's claims: large offsets with small noise (the
    variance), rows long enough to matter for sums (1e5), all-equal rows (eps 0 makes them NaN),
    rows near zero, huge and tiny magnitudes (where F32 squares overflow or underflow and the F32
    kernels hand the row to F64), -inf entries, and for softmax rows whose x - max rounds in F32
    and whose mass sits far from the max."""
    n = 1000
    rows = [("all-equal", np.full((2, n), 3.25), EPS), ("all-equal eps 0", np.full((2, n), 1e4 + 0.5), 0.0),
            ("single", rng.standard_normal((3, 1)), EPS), ("long", rng.standard_normal((2, 100000)) * 3 + 1, EPS)]
    if op in (fk.OpKind.SOFTMAX_LAST_DIM, fk.OpKind.LOG_SOFTMAX_LAST_DIM):
        spread = rng.uniform(-100, 0, (2, n)) + 100.3
        mass = np.full((2, 100000), 100.3 - np.log(100000.0))
        mass[:, 7] = 100.3
        masked = rng.standard_normal((2, n))
        masked[:, ::3] = -np.inf
        rows += [("huge and tiny", rng.choice([1e30, -1e30, 1e-30, 0.0, 1.5e38, -1.5e38], (2, n)), EPS),
                 ("wide spread", spread, EPS), ("mass far from the max", mass, EPS),
                 ("-inf entries", masked, EPS), ("large offset", 1e4 + rng.standard_normal((2, n)), EPS)]
        return rows
    one_off = np.full((2, 4096), 1e4, np.float32)
    one_off[:, 5] = np.nextafter(np.float32(1e4), np.float32(2e4))
    near_zero = rng.standard_normal((2, n))
    near_zero -= near_zero.mean(axis=-1, keepdims=True)
    near_zero[:, :10] = 1e-9
    sorted_rows = np.sort(rng.standard_normal((2, n)) * 3 + 1, axis=-1)     # the probe far below the mean
    probe_off = rng.standard_normal((2, 4096))
    probe_off[:, :256] += 1e3                        # the probed elements 30 std above the mean
    return rows + [
        ("sorted", sorted_rows, EPS),
        ("offset 1e4, sorted", 1e4 + sorted_rows, 0.0),
        ("probed block far off", probe_off, EPS),
        ("offset 1e4, noise 1", 1e4 + rng.standard_normal((2, n)), EPS),
        ("offset 1e4, noise 1e-2", 1e4 + 1e-2 * rng.standard_normal((2, n)), 0.0),
        ("offset 1e4, long", 1e4 + rng.standard_normal((2, 100000)), EPS),
        ("offset -3e6, noise 1", -3e6 + rng.standard_normal((2, n)), EPS),
        ("one element 1 ulp off", one_off, 0.0),
        ("near zero", near_zero, EPS),
        ("huge", 1e20 * rng.standard_normal((2, n)), EPS),
        ("tiny eps 0", 1e-30 * rng.standard_normal((2, n)), 0.0),
        ("tiny", 1e-30 * rng.standard_normal((2, n)), EPS)]


@pytest.mark.filterwarnings("ignore:overflow", "ignore:invalid value")
@pytest.mark.parametrize("op", OPS, ids=[o.short_name for o in OPS])
@pytest.mark.parametrize("dtype", [fk.DType.F32, fk.DType.BF16], ids=["f32", "bf16"])
def test_adversarial_rows_meet_every_claim(op, dtype, rng):
    for name, x, eps in adversarial_rows(op, rng):
        with np.errstate(over="ignore"):
            x = x.astype(dtype.numpy)
        d = x.shape[-1]
        inputs = [x, (1 + 0.25 * rng.standard_normal(d)).astype(dtype.numpy),
                  rng.standard_normal(d).astype(dtype.numpy)][:N_INPUTS[op]]
        for kernel in fk.bindings().alternatives(op, [dtype] * (N_INPUTS[op] + 1), fk.Backend.CPU):
            out = call(kernel, op, inputs, np.empty_like(x), eps=eps)
            expected, scale = reference(op, *inputs, eps=eps, claim=kernel.precision)
            check(out, expected, scale, kernel.precision, (kernel.source, name))


def test_layer_norm_rows_recentred_or_not_meet_the_claim(rng):
    """LAYER_NORM's row pass is centred on the mean of the first 256 elements and repeated about the
    corrected mean when that centre lies over std/8 away: rows on either side of that line, for row
    lengths around the probe and the pass's 256-element blocks, meet the F32 claim."""
    kernel = fk.bindings().lookup(fk.OpKind.LAYER_NORM, [fk.DType.F32] * 4, 0)
    for d in (255, 256, 257, 700, 1024):
        base = rng.standard_normal((5, d))
        probe = min(d, 256)
        x = base.copy()
        for row, shift in enumerate((0.0, 0.1, 0.2, 3.0, 300.0)):     # the probe's offset, in std
            x[row, :probe] += shift
        x = (x * 2 + 5).astype(np.float32)
        w = (1 + 0.25 * rng.standard_normal(d)).astype(np.float32)
        b = rng.standard_normal(d).astype(np.float32)
        out = call(kernel, fk.OpKind.LAYER_NORM, [x, w, b], np.empty_like(x))
        expected, scale = reference(fk.OpKind.LAYER_NORM, x, w, b, claim=kernel.precision)
        check(out, expected, scale, kernel.precision, d)


def test_contiguous_layer_norm_rows_written_a_row_late_are_the_row_by_row_bits(rng):
    """Contiguous F32 LAYER_NORM rows are written during the next row's pass (the last after the walk);
    a row the F64 code takes (huge values, NaN) comes between: the bits equal those of the same rows
    read through a strided view, which are computed and written one row at a time."""
    kernel = fk.bindings().lookup(fk.OpKind.LAYER_NORM, [fk.DType.F32] * 4, 0)
    for d in (1, 7, 256, 300, 1024):
        x = (rng.standard_normal((9, d)) * 3 + 0.5).astype(np.float32)
        x[2] *= np.float32(1e25)                     # squares overflow F32: the F64 row code
        x[5, 0] = np.nan
        x[6] = np.sort(x[6])                        # the second pass
        w = (1 + 0.25 * rng.standard_normal(d)).astype(np.float32)
        b = rng.standard_normal(d).astype(np.float32)
        out = call(kernel, fk.OpKind.LAYER_NORM, [x, w, b], np.empty_like(x))
        strided = np.empty((9, 2 * d), np.float32)
        strided[:, ::2] = x
        one_by_one = call(kernel, fk.OpKind.LAYER_NORM, [strided[:, ::2], w, b], np.empty_like(x))
        np.testing.assert_array_equal(out.view(np.uint32), one_by_one.view(np.uint32), err_msg=str(d))


STREAM_CASES = [(op, dt) for op in OPS for dt in (fk.DType.F32, fk.DType.BF16)]


@pytest.mark.parametrize("op,dtype", STREAM_CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in STREAM_CASES])
@pytest.mark.parametrize("shift", [0, 1, 3])
def test_streamed_outputs_are_the_plain_stores_bits(op, dtype, shift, rng):
    """An output buffer of 4 MiB and more is written with non-temporal stores (its rows' whole 64-byte
    lines; the elements before the first line boundary plainly): the same bits as the same rows
    written into small outputs, whatever the output's offset from a line boundary."""
    rows, d = 1100, 1027 if shift else 1024                # 4.3-4.5 MB as F32, 2.2 MB as BF16
    if dtype == fk.DType.BF16:
        rows *= 2
    n_in = N_INPUTS[op]
    kernel = fk.bindings().lookup(op, [dtype] * (n_in + 1), 0)
    x = (rng.standard_normal((rows, d)) * 3 + 0.5).astype(dtype.numpy)
    inputs = [x, (1 + 0.25 * rng.standard_normal(d)).astype(dtype.numpy),
              rng.standard_normal(d).astype(dtype.numpy)][:n_in]
    buffer = np.empty(rows * d + 64, dtype.numpy)
    big = buffer[shift:shift + rows * d].reshape(rows, d)
    call(kernel, op, inputs, big)
    for r0 in range(0, rows, 100):
        small = call(kernel, op, [inputs[0][r0:r0 + 100]] + inputs[1:], np.empty((min(100, rows - r0), d), dtype.numpy))
        np.testing.assert_array_equal(big[r0:r0 + 100].view(np.uint8), small.view(np.uint8), err_msg=str(r0))


@pytest.mark.parametrize("shift", [0, 1, 3])
def test_streamed_softmax_backward_is_the_plain_stores_bits(shift, rng):
    """SOFTMAX_LAST_DIM_BACKWARD streams an F32 dx of 4 MiB and more as the forward rows do (the
    elements before each row's first line boundary plainly, then whole lines): the same bits as the
    same rows written into small outputs, whatever the output's offset from a line boundary."""
    rows, d = 1100, 1027 if shift else 1024
    op = fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD
    kernel = fk.bindings().lookup(op, [fk.DType.F32] * 3, 0)
    y = rng.random((rows, d), dtype=np.float32) / d
    dy = rng.standard_normal((rows, d)).astype(np.float32)
    buffer = np.empty(rows * d + 64, np.float32)
    big = buffer[shift:shift + rows * d].reshape(rows, d)
    call(kernel, op, [y, dy], big)
    for r0 in range(0, rows, 100):
        small = call(kernel, op, [y[r0:r0 + 100], dy[r0:r0 + 100]], np.empty((min(100, rows - r0), d), np.float32))
        np.testing.assert_array_equal(big[r0:r0 + 100].view(np.uint8), small.view(np.uint8), err_msg=str(r0))


@pytest.mark.parametrize("op", BACKWARD_OPS, ids=[o.short_name for o in BACKWARD_OPS])
def test_softmax_backward_every_row_length(op, rng):
    """The F32 softmax backwards' output pass loads y and dy a block of 64 elements ahead of dx's
    stores from 128 elements on, then finishes by vectors and elements: every row length from 1 to
    300, with dx on a line boundary and one element past it, meets the claim against long double."""
    kernel = fk.bindings().lookup(op, [fk.DType.F32] * 3, 0)
    for d in range(1, 301):
        y = forward_output(op, 3 * rng.standard_normal((2, d))).astype(np.float32)
        dy = rng.standard_normal((2, d)).astype(np.float32)
        expected, scale = backward_reference(op, y, dy)
        for shift in (0, 1):
            buffer = np.full(2 * d + 16, 7, np.float32)
            out = buffer[shift:shift + 2 * d].reshape(2, d)
            call(kernel, op, [y, dy], out)
            check(out, expected, scale, kernel.precision, (d, shift))


def test_constant_rows_normalize_to_the_bias_exactly():
    """The F32 LAYER_NORM mean of a constant row is its value, so x - mean is exactly 0."""
    x = np.full((3, 777), 1e4 + 0.5, np.float32)
    w = np.full(777, 2.0, np.float32)
    b = np.linspace(-1, 1, 777).astype(np.float32)
    kernel = fk.bindings().lookup(fk.OpKind.LAYER_NORM, [fk.DType.F32] * 4, 0)
    out = call(kernel, fk.OpKind.LAYER_NORM, [x, w, b], np.empty_like(x))
    np.testing.assert_array_equal(out, np.broadcast_to(b, x.shape))


@pytest.mark.parametrize("op", OPS, ids=[o.short_name for o in OPS])
def test_f32_compute_is_the_default_and_max_ulp_picks_the_f64_sibling(op):
    t = fk.bindings()
    dtypes = [fk.DType.F32] * (N_INPUTS[op] + 1)
    shapes = [(64, 256)] + [(256,)] * (N_INPUTS[op] - 1) + [(64, 256)]
    assert t.lookup(op, dtypes, 0).source == "native"
    assert t.pick(op, dtypes, fk.Backend.CPU, shapes).source == "native"
    tight = t.pick(op, dtypes, fk.Backend.CPU, shapes, max_ulp=1)
    assert tight.source == "native-f64" and tight.precision.max_ulp <= 1
    native = {k.source: k for k in t.alternatives(op, dtypes, fk.Backend.CPU)}["native"]
    assert native.precision.max_ulp > 1 and native.precision.max_rel > tight.precision.max_rel


@pytest.mark.parametrize("problem", ["dtype", "shape", "weight", "params", "axis", "eps",
                                     "readonly", "alias"])
def test_errors_leave_the_output_untouched(problem, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = np.ones(4, np.float32)
    op = fk.OpKind.RMS_NORM
    inputs = [x, w]
    out = np.full((3, 4), 7.0, np.float32)
    params = fk.params.norm_last_dim(1e-5)
    error = {"dtype": fk.DTypeError, "shape": fk.ShapeError, "weight": fk.ShapeError,
             "params": fk.ParamsError, "axis": fk.ParamsError, "eps": fk.ParamsError,
             "readonly": fk.ReadOnlyError, "alias": fk.AliasError}[problem]
    if problem == "dtype":
        out = np.full((3, 4), 7.0, np.float64)
    elif problem == "shape":
        out = np.full((3, 5), 7.0, np.float32)
    elif problem == "weight":
        inputs[1] = np.ones(5, np.float32)
    elif problem == "params":
        params = fk.params.reduce((0,))
    elif problem == "axis":
        op = fk.OpKind.SOFTMAX_LAST_DIM
        inputs = [x]
        params = fk.params.concat(0)            # an axis family, but not softmax's
    elif problem == "eps":
        with pytest.raises(fk.ParamsError):
            fk.params.norm_last_dim(-1.0)
        params = fk.params.norm_last_dim(float("inf"))
    elif problem == "readonly":
        out.setflags(write=False)
    elif problem == "alias":
        out = x
    kernel = fk.bindings().lookup(op, [fk.DType.F32] * (len(inputs) + 1), 0)
    before = out.copy()
    with pytest.raises(error):
        kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)


# ---- softmax backward ----------------------------------------------------------------------------------
def forward_of(op):
    return fk.OpKind.LOG_SOFTMAX_LAST_DIM if op == fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD else fk.OpKind.SOFTMAX_LAST_DIM


def forward_output(op, x):
    """y of the forward op (F64 reference), as the backward op receives it."""
    with np.errstate(all="ignore"):
        return oracles.softmax_last_dim(np.asarray(x, np.float64), log=forward_of(op) == fk.OpKind.LOG_SOFTMAX_LAST_DIM)


def backward_reference(op, y, dy):
    """(dx, S) in long double, S the scale of the claims."""
    return oracles.softmax_backward_last_dim(np.asarray(y).astype(np.longdouble), np.asarray(dy).astype(np.longdouble),
                                             log=op == fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD)


@pytest.mark.parametrize("op,dtype", BACKWARD_CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in BACKWARD_CASES])
def test_softmax_backward_binding(op, dtype, rng):
    kernels = fk.bindings().alternatives(op, [dtype] * 3, fk.Backend.CPU)
    assert {k.source for k in kernels} == ({"native"} if dtype == fk.DType.F64 else {"native", "native-f64"})
    for kernel in kernels:
        assert kernel.caps & fk.KernelCaps.STRIDED_INPUT
        for shape in SHAPES:
            for layout in LAYOUTS:
                y_values = forward_output(op, 3 * rng.standard_normal(shape)).astype(dtype.numpy)
                y = make_operand(shape, dtype, layout, rng, values=y_values)
                dy = make_operand(shape, dtype, "negative" if layout == "contiguous" else layout, rng, special=False)
                out = np.full(shape, 7, dtype=dtype.numpy)
                call(kernel, op, [y, dy], out)
                expected, scale = backward_reference(op, y, dy)
                check(out, expected, scale, kernel.precision, (kernel.source, shape, layout))


def backward_rows(op, rng):
    """(name, y, dy) rows that stress the claims: long rows, a constant dy (softmax backward cancels
    to ~0), huge and tiny dy, masked entries (y = 0 / -inf), a peaked row and subnormal products."""
    n = 1000
    x = 4 * rng.standard_normal((2, n))
    masked = x.copy()
    masked[:, ::3] = -np.inf
    peaked = np.full((2, n), -30.0)
    peaked[:, 5] = 10.0
    rows = [("random", x, rng.standard_normal((2, n))),
            ("long", 3 * rng.standard_normal((2, 100000)), rng.standard_normal((2, 100000))),
            ("constant dy", x, np.full((2, n), 1.7)),
            ("huge dy", x, 1e30 * rng.standard_normal((2, n))),
            ("tiny dy", x, 1e-30 * rng.standard_normal((2, n))),
            ("masked", masked, rng.standard_normal((2, n))),
            ("peaked", peaked, rng.standard_normal((2, n))),
            ("deep tail", 60 * rng.standard_normal((2, n)), rng.standard_normal((2, n)))]
    return [(name, forward_output(op, xs), dy) for name, xs, dy in rows]


@pytest.mark.parametrize("op", BACKWARD_OPS, ids=[o.short_name for o in BACKWARD_OPS])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=[d.short_name for d in FLOAT_DTYPES])
def test_softmax_backward_claims_on_adversarial_rows(op, dtype, rng):
    for name, y, dy in backward_rows(op, rng):
        if dtype == fk.DType.F16:
            dy = np.clip(dy, -1e3, 1e3)            # dx stays within F16's range
        with np.errstate(over="ignore", under="ignore"):
            y, dy = y.astype(dtype.numpy), dy.astype(dtype.numpy)
        for kernel in fk.bindings().alternatives(op, [dtype] * 3, fk.Backend.CPU):
            out = call(kernel, op, [y, dy], np.empty_like(y))
            expected, scale = backward_reference(op, y, dy)
            check(out, expected, scale, kernel.precision, (kernel.source, name))


@pytest.mark.parametrize("op", BACKWARD_OPS, ids=[o.short_name for o in BACKWARD_OPS])
def test_softmax_backward_matches_finite_differences_of_the_forward(op, rng):
    """dx = d/dx sum(dy * forward(x)), by central differences of the F64 forward reference."""
    x = rng.standard_normal((3, 9))
    dy = rng.standard_normal((3, 9))
    loss = lambda v: np.sum(dy * forward_output(op, v))
    h = 1e-6
    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = h
        numeric[index] = (loss(x + step) - loss(x - step)) / (2 * h)
    kernel = fk.bindings().lookup(op, [fk.DType.F64] * 3, fk.Backend.CPU)
    dx = call(kernel, op, [forward_output(op, x), dy], np.empty_like(x))
    np.testing.assert_allclose(dx, numeric, rtol=1e-6, atol=1e-8)


def test_softmax_backward_special_values():
    f = np.float32
    y = np.array([[0.5, 0.5, 0.0], [np.nan, 0.5, 0.5], [0.25, 0.75, 0.0]], f)
    dy = np.array([[1.0, 3.0, np.inf], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], f)
    out = fk.dispatch(fk.OpKind.SOFTMAX_LAST_DIM_BACKWARD, [y, dy])
    assert np.isnan(out[0]).all()                  # 0 * inf in the row sum
    assert np.isnan(out[1]).all()
    np.testing.assert_array_equal(out[2], [0.0, 0.0, 0.0])    # a constant dy has no gradient
    ly = np.array([[-np.inf, np.log(0.5), np.log(0.5)]], f)
    ldy = np.array([[3.0, 1.0, -1.0]], f)
    out = fk.dispatch(fk.OpKind.LOG_SOFTMAX_LAST_DIM_BACKWARD, [ly, ldy])
    np.testing.assert_allclose(out, [[3.0, -0.5, -2.5]], rtol=1e-6)   # a masked entry passes dy


@pytest.mark.parametrize("op", BACKWARD_OPS, ids=[o.short_name for o in BACKWARD_OPS])
@pytest.mark.parametrize("problem", ["dtype", "dy shape", "out shape", "count", "params", "axis",
                                     "readonly", "alias", "too many dims"])
def test_softmax_backward_errors_leave_the_output_untouched(op, problem, rng):
    y = rng.standard_normal((3, 4)).astype(np.float32)
    dy = rng.standard_normal((3, 4)).astype(np.float32)
    inputs = [y, dy]
    out = np.full((3, 4), 7.0, np.float32)
    params = fk.params.softmax_last_dim()
    error = {"dtype": fk.DTypeError, "dy shape": fk.ShapeError, "out shape": fk.ShapeError,
             "count": fk.OperandCountError, "params": fk.ParamsError, "axis": fk.ParamsError,
             "readonly": fk.ReadOnlyError, "alias": fk.AliasError, "too many dims": fk.ShapeError}[problem]
    if problem == "dtype":
        inputs[1] = dy.astype(np.float64)
    elif problem == "dy shape":
        inputs[1] = dy[:, :3]
    elif problem == "out shape":
        out = np.full((3, 5), 7.0, np.float32)
    elif problem == "count":
        inputs = [y]
    elif problem == "params":
        params = fk.params.reduce((0,))
    elif problem == "axis":
        params = fk.params.concat(0)
    elif problem == "readonly":
        out.setflags(write=False)
    elif problem == "alias":
        out = dy
    elif problem == "too many dims":
        shape = (1,) * 9 + (4,)
        inputs = [np.ones(shape, np.float32), np.ones(shape, np.float32)]
        out = np.full(shape, 7.0, np.float32)
    kernel = fk.bindings().lookup(op, [fk.DType.F32] * 3, 0)
    before = out.copy()
    with pytest.raises(error):
        kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)


# ---- 16-bit rows: the F32 kernel's bits -----------------------------------------------------------------
HALF_DTYPES = (fk.DType.BF16, fk.DType.F16)
HALF_CASES = [(op, dt) for op in OPS for dt in HALF_DTYPES]


@pytest.mark.parametrize("op,dtype", HALF_CASES, ids=[f"{o.short_name}-{d.short_name}" for o, d in HALF_CASES])
def test_half_rows_are_the_f32_kernel_rounded_once(op, dtype, rng):
    """A BF16/F16 "native" row computes exactly what widening it to F32, running the F32 kernel and
    rounding each result to nearest even gives: the same bits (NaN where it gives NaN), for contiguous
    rows (converted inside the row passes) and the strided, reversed and offset ones (converted whole),
    over row lengths around the 32-lane and 128-element blocks, with and without an eps."""
    t = fk.bindings()
    n_in = N_INPUTS[op]
    half = {k.source: k for k in t.alternatives(op, [dtype] * (n_in + 1), fk.Backend.CPU)}["native"]
    full = {k.source: k for k in t.alternatives(op, [fk.DType.F32] * (n_in + 1), fk.Backend.CPU)}["native"]
    for d in (1, 2, 7, 31, 33, 127, 128, 129, 255, 256, 257, 300, 513, 1025):
        for layout in ("contiguous", "strided", "negative", "offset"):
            for eps in (EPS, 0.0):
                values = rng.standard_normal((4, d)) * 3 + 0.5
                values[1] = 1e3 + rng.standard_normal(d)             # a large mean
                values[2, ::5] = -np.inf if n_in == 1 else 0.0      # masked softmax entries
                values[3] = 2.5                                      # a constant row
                x = make_operand((4, d), dtype, layout, rng, values=values.astype(dtype.numpy))
                inputs = [x, (1 + 0.25 * rng.standard_normal(d)).astype(dtype.numpy),
                          rng.standard_normal(d).astype(dtype.numpy)][:n_in]
                out = call(half, op, inputs, np.full((4, d), 7, dtype.numpy), eps=eps)
                wide = call(full, op, [np.asarray(v, np.float32) for v in inputs], np.empty((4, d), np.float32), eps=eps)
                with np.errstate(over="ignore", invalid="ignore"):
                    expected = wide.astype(dtype.numpy)
                np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), np.isnan(wide), err_msg=str((d, layout, eps)))
                same = ~np.isnan(wide)
                assert (out.view(np.uint16)[same] == expected.view(np.uint16)[same]).all(), (d, layout, eps)
