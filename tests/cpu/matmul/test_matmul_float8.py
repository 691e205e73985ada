"""MATMUL with FP8 inputs (F8E4M3, F8E5M2, mixed too) into F32 or BF16 with per-tensor scales,
against an F64 NumPy reference on ml_dtypes' decoded values: every binding on every layout, the
MatmulM modes, the precision claim, and every refusal leaving the output untouched."""
import ctypes
import struct

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import graph as fg
from capi import kernel_function, layout, storage_of
from oracles import matmul_reference
from support import FLOAT8_DTYPES, LAYOUTS, make_operand, random_values

D = fk.DType
CPU = fk.Backend.CPU
OUTPUTS = (D.F32, D.BF16)
PAIRS = [(a, b) for a in FLOAT8_DTYPES for b in FLOAT8_DTYPES]
CASES = [(a, b, c, n) for a, b in PAIRS for c in OUTPUTS for n in (None, D.I32, D.I64)]
SHAPES = [(1, 1, 1), (1, 9, 17), (7, 13, 5), (0, 5, 3), (4, 0, 3), (3, 5, 0), (3, 1100, 4), (41, 37, 67)]


def key(a, b, c, count=None):
    return [a, b, c] if count is None else [a, b, count, c]


def fp8_values(shape, dtype, rng):
    return random_values(shape, dtype, rng, special=False)


def check(got, a, b, claim, scale=1.0, rows=None):
    """|got - s (a @ b)| <= max_rel |s| (|a| @ |b|), on F64 values decoded by ml_dtypes."""
    exp = scale * matmul_reference(a, b)
    bound = claim.max_rel * abs(scale) * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    if rows is not None:
        exp, bound = exp.copy(), bound.copy()
        exp[..., rows:, :] = 0
        bound[..., rows:, :] = 0
    err = np.abs(got.astype(np.float64) - exp)
    assert (err <= bound + 1e-300).all(), (err.max(), (err - bound).max())


def run(kernel, count_dt, a, b, out, m, n, k, batch=(), mm=None, count=None, scale_a=1.0, scale_b=1.0):
    if count_dt is not None:
        mm = fk.MatmulM.deferred(2)
        kernel(a, b, np.array(m if count is None else count, dtype=count_dt.numpy), out=out,
               params=fk.params.matmul(m, n, k, batch=batch, m_compute=mm, scale_a=scale_a, scale_b=scale_b))
    else:
        kernel(a, b, out=out, params=fk.params.matmul(m, n, k, batch=batch, m_compute=mm, scale_a=scale_a,
                                                       scale_b=scale_b))
    return out


def test_every_pair_and_output_is_registered_and_nothing_else():
    table = fk.bindings()
    for a, b, c, count in CASES:
        kernels = table.alternatives(fk.OpKind.MATMUL, key(a, b, c, count), CPU)
        assert len(kernels) == 1 and kernels[0].precision.max_rel > 0, (a, b, c, count)
    fp8_keys = [k for k in table.coverage() if k.op == fk.OpKind.MATMUL and any(d.is_float8 for d in k.dtypes)]
    assert len(fp8_keys) == len(CASES)
    for other in (D.F16, D.F64, D.F8E4M3, D.I32):
        assert not table.supports(fk.OpKind.MATMUL, [D.F8E4M3, D.F8E4M3, other], CPU)
    for other in (D.F32, D.BF16):
        assert not table.supports(fk.OpKind.MATMUL, [D.F8E4M3, other, D.F32], CPU)


@pytest.mark.parametrize("a_dt,b_dt,c_dt,count_dt", CASES,
                         ids=[f"{a.short_name}-{b.short_name}-{c.short_name}-{n.short_name if n else 'nocount'}"
                              for a, b, c, n in CASES])
def test_fp8_binding(a_dt, b_dt, c_dt, count_dt, rng):
    kernel = fk.bindings().lookup(fk.OpKind.MATMUL, key(a_dt, b_dt, c_dt, count_dt), CPU)
    assert kernel.caps & fk.KernelCaps.STRIDED_INPUT
    claim = kernel.precision
    scales = [(1.0, 1.0), (0.37, -2.5), (2.0 ** -7, 1e3), (3.0, 0.0)]
    for i, (m, k, n) in enumerate(SHAPES):
        la, lb, (sa, sb) = LAYOUTS[i % len(LAYOUTS)], LAYOUTS[(i + 2) % len(LAYOUTS)], scales[i % len(scales)]
        a = make_operand((m, k), a_dt, la, rng, values=fp8_values((m, k), a_dt, rng))
        b = make_operand((k, n), b_dt, lb, rng, values=fp8_values((k, n), b_dt, rng))
        out = np.full((m, n), 7, dtype=c_dt.numpy)
        run(kernel, count_dt, a, b, out, m, n, k, scale_a=sa, scale_b=sb)
        check(out, a, b, claim, sa * sb)
    # every MatmulM mode on a batched, broadcast product
    a = fp8_values((2, 1, 10, 6), a_dt, rng)
    b = fp8_values((3, 6, 5), b_dt, rng)
    for rows in (0, 4, 10):
        mm = fk.MatmulM.rows(rows) if count_dt is None else None
        out = np.full((2, 3, 10, 5), 7, dtype=c_dt.numpy)
        run(kernel, count_dt, a, b, out, 10, 5, 6, batch=(2, 3), mm=mm, count=rows, scale_a=0.5, scale_b=3.0)
        check(out, a, b, claim, 1.5, rows=rows)
    if count_dt is None:
        out = np.full((2, 3, 10, 5), 7, dtype=c_dt.numpy)
        kernel(a, b, out=out)                                  # no params: shapes decide, scales 1
        check(out, a, b, claim)
        out_t = np.full((2, 3, 5, 10), 7, dtype=c_dt.numpy).transpose(0, 1, 3, 2)
        kernel(a, b, out=out_t)                                # strided output
        check(out_t, a, b, claim)


def test_products_are_exact_and_sums_round_in_f32(rng):
    """FP8 products are exact in F32: with small integers every partial sum is exact, so the F32
    output equals s (a @ b) bit for bit for a power-of-two scale; with values whose F32 sums round,
    the error is within the claim and nonzero somewhere (the sums do run in F32)."""
    for a_dt, b_dt in PAIRS:
        kernel = fk.bindings().lookup(fk.OpKind.MATMUL, [a_dt, b_dt, D.F32], CPU)
        a = rng.integers(-8, 9, (33, 300)).astype(np.float64).astype(a_dt.numpy)
        b = rng.integers(-8, 9, (300, 19)).astype(np.float64).astype(b_dt.numpy)
        out = run(kernel, None, a, b, np.empty((33, 19), np.float32), 33, 19, 300, scale_a=0.25, scale_b=8.0)
        np.testing.assert_array_equal(out, (2.0 * matmul_reference(a, b)).astype(np.float32))
    kernel = fk.bindings().lookup(fk.OpKind.MATMUL, [D.F8E4M3, D.F8E4M3, D.F32], CPU)
    a = (rng.standard_normal((16, 4096)) * 100).astype(D.F8E4M3.numpy)
    b = (rng.standard_normal((4096, 16)) * 100).astype(D.F8E4M3.numpy)
    out = run(kernel, None, a, b, np.empty((16, 16), np.float32), 16, 16, 4096)
    check(out, a, b, kernel.precision)
    assert (out.astype(np.float64) != matmul_reference(a, b)).any()


def test_nan_and_inf_propagate(rng):
    a = fp8_values((5, 4), D.F8E5M2, rng)
    a[2, 1] = np.nan
    a[3, 0] = np.inf
    b = (np.abs(rng.standard_normal((4, 6))) + 1).astype(D.F8E5M2.numpy)
    kernel = fk.bindings().lookup(fk.OpKind.MATMUL, [D.F8E5M2, D.F8E5M2, D.F32], CPU)
    out = kernel(a, b, out=np.empty((5, 6), np.float32))
    assert np.isnan(out[2]).all() and np.isinf(out[3]).all()
    assert np.isfinite(np.delete(out, [2, 3], 0)).all()


def test_dispatch_and_graph(rng):
    a = fp8_values((2, 3, 8), D.F8E4M3, rng)
    b = fp8_values((8, 5), D.F8E5M2, rng)
    claim = fk.bindings().lookup(fk.OpKind.MATMUL, [D.F8E4M3, D.F8E5M2, D.F32], CPU).precision
    out = fk.dispatch(fk.OpKind.MATMUL, [a, b])
    assert out.dtype == np.float32 and out.shape == (2, 3, 5)
    check(out, a, b, claim)
    out = fk.dispatch(fk.OpKind.MATMUL, [a, b], params=fk.params.matmul(3, 5, 8, batch=(2,), scale_a=4.0, scale_b=0.5))
    check(out, a, b, claim, 2.0)
    g = fg.Graph()
    ga, gb = g.input((2, 3, 8), D.F8E4M3), g.input((8, 5), D.F8E5M2)
    y32 = g.matmul(ga, gb, scale_a=0.5, scale_b=0.25)
    y16 = g.matmul(ga, gb, scale_a=0.5, scale_b=0.25, out_dtype=D.BF16)
    assert y32.dtype == D.F32 and y16.dtype == D.BF16
    r32, r16 = g.compile([y32, y16]).run([a, b])
    check(r32, a, b, claim, 0.125)
    check(r16, a, b, fk.bindings().lookup(fk.OpKind.MATMUL, [D.F8E4M3, D.F8E5M2, D.BF16], CPU).precision, 0.125)


def fp8_error_case(problem, rng):
    a = fp8_values((4, 3), D.F8E4M3, rng)
    b = fp8_values((3, 5), D.F8E5M2, rng)
    out = np.full((4, 5), 7.0, dtype=np.float32)
    dts = [D.F8E4M3, D.F8E5M2, D.F32]
    inputs, params, error = [a, b], fk.params.matmul(4, 5, 3, scale_a=2.0), fk.ShapeError
    if problem == "a_dtype":
        inputs[0] = a.view(D.F8E5M2.numpy)
        error = fk.DTypeError
    elif problem == "b_dtype":
        inputs[1] = b.astype(np.float32)
        error = fk.DTypeError
    elif problem == "out_dtype":
        out = np.full((4, 5), 7.0, dtype=np.float16)
        error = fk.DTypeError
    elif problem == "inner":
        inputs[1] = fp8_values((2, 5), D.F8E5M2, rng)
        params = None
    elif problem == "out_shape":
        out = np.full((4, 6), 7.0, dtype=np.float32)
    elif problem == "readonly":
        out.setflags(write=False)
        error = fk.ReadOnlyError
    elif problem == "self_overlap":
        out = np.lib.stride_tricks.as_strided(np.full(5, 7.0, np.float32), (4, 5), (0, 4))   # rows share memory
        error = fk.AliasError
    return dts, inputs, out, params, error


@pytest.mark.parametrize("problem", ["a_dtype", "b_dtype", "out_dtype", "inner", "out_shape", "readonly",
                                     "self_overlap"])
def test_fp8_errors_leave_the_output_untouched(problem, rng):
    dts, inputs, out, params, error = fp8_error_case(problem, rng)
    kernel = fk.bindings().lookup(fk.OpKind.MATMUL, dts, CPU)
    before = out.copy()
    with pytest.raises(error):
        kernel(*inputs, out=out, params=params)
    np.testing.assert_array_equal(out, before)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_scales_must_be_finite(scale):
    with pytest.raises(fk.ParamsError, match="finite"):
        fk.params.matmul(2, 2, 2, scale_a=scale)
    with pytest.raises(fk.ParamsError, match="finite"):
        fk.params.matmul(2, 2, 2, scale_b=scale)


def test_other_dtypes_refuse_scales(rng):
    """Scales apply to FP8 inputs only: every other MATMUL kernel (native and BLAS) refuses any
    scale but 1.0 and writes nothing; 1.0 is what every existing caller gets."""
    assert fk.params.matmul(2, 3, 4).fields()["scale_a"] == 1.0 == fk.params.matmul(2, 3, 4).fields()["scale_b"]
    a = rng.standard_normal((2, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    for dt in (D.F32, D.F64, D.BF16, D.I32):
        for kernel in fk.bindings().alternatives(fk.OpKind.MATMUL, [dt, dt, dt], CPU):
            for sa, sb in ((2.0, 1.0), (1.0, 0.5), (0.0, 1.0)):
                out = np.full((2, 3), 7, dtype=dt.numpy)
                with pytest.raises(fk.ParamsError, match="FP8"):
                    kernel(a.astype(dt.numpy), b.astype(dt.numpy), out=out,
                           params=fk.params.matmul(2, 3, 4, scale_a=sa, scale_b=sb))
                assert (out == 7).all(), kernel
            out = kernel(a.astype(dt.numpy), b.astype(dt.numpy), out=np.empty((2, 3), dt.numpy),
                         params=fk.params.matmul(2, 3, 4, scale_a=1.0, scale_b=1.0))


PARAMS_MATMUL = 2                                  # FK_PARAMS_MATMUL
MATMUL_M_OFFSET = 8 + 72                            # fk_params.u (8) + offsetof(fk_matmul_params, m)
SCALE_A_OFFSET = 8 + 112                            # fk_params.u (8) + offsetof(fk_matmul_params, scale_a)


@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_kernel_refuses_non_finite_scales_from_c(scale, rng):
    """A C caller can put any double in the struct: the kernel refuses it before writing."""
    a = fp8_values((2, 3), D.F8E4M3, rng)
    b = fp8_values((3, 4), D.F8E4M3, rng)
    out = np.full((2, 4), 7.0, np.float32)
    raw = bytearray(1024)
    struct.pack_into("<ii", raw, 0, PARAMS_MATMUL, 0)
    struct.pack_into("<qqq", raw, MATMUL_M_OFFSET, 2, 4, 3)       # m, n, k (batch_ndim 0, m_compute ALL)
    struct.pack_into("<dd", raw, SCALE_A_OFFSET, 1.0, scale)
    params = ctypes.create_string_buffer(bytes(raw), len(raw))
    fn = kernel_function(fk.OpKind.MATMUL, [D.F8E4M3, D.F8E4M3, D.F32])
    ins = (type(storage_of(a, D.F8E4M3)) * 2)(storage_of(a, D.F8E4M3), storage_of(b, D.F8E4M3))
    outs = (type(ins[0]) * 1)(storage_of(out, D.F32))
    lays = (type(layout((2, 3), (3, 1))) * 3)(layout((2, 3), (3, 1)), layout((3, 4), (4, 1)), layout((2, 4), (4, 1)))
    status = fn(ins, 2, outs, 1, lays, ctypes.addressof(params))
    assert status == 4                                            # FK_ERR_PARAMS
    assert (out == 7.0).all()
    struct.pack_into("<dd", raw, SCALE_A_OFFSET, 1.0, 2.0)        # the same call with a finite scale
    params = ctypes.create_string_buffer(bytes(raw), len(raw))
    assert fn(ins, 2, outs, 1, lays, ctypes.addressof(params)) == 0
    check(out, a, b, fk.bindings().lookup(fk.OpKind.MATMUL, [D.F8E4M3, D.F8E4M3, D.F32], CPU).precision, 2.0)
