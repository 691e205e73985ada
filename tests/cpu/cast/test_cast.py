"""CAST (every dtype pair) and CONTIGUIZE (every dtype) against NumPy / ml_dtypes on every layout."""
import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
from oracles import cast_values
from support import ALL_DTYPES, LAYOUTS, assert_same, make_operand, random_values

CPU = fk.Backend.CPU


def cast_oracle(values, src, dst):
    """The documented conversion rules, computed with NumPy (one definition, in tests/oracles.py)."""
    return cast_values(np.asarray(values, dtype=fk.DType(src).numpy), dst)


PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES]


def test_every_pair_is_registered():
    table = fk.bindings()
    for s, d in PAIRS:
        assert table.supports(fk.OpKind.CAST, [s, d], CPU), (s, d)
    for s in ALL_DTYPES:
        assert table.supports(fk.OpKind.CONTIGUIZE, [s, s], CPU), s


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{s.short_name}-{d.short_name}" for s, d in PAIRS])
def test_cast_matches_oracle_on_every_layout(src, dst, rng):
    kernel = fk.bindings().lookup(fk.OpKind.CAST, [src, dst], CPU)
    for layout in LAYOUTS:
        x = make_operand((5, 7), src, layout, rng)
        out = np.empty(x.shape, dtype=dst.numpy)
        kernel(x, out=out)
        assert_same(out, cast_oracle(x, src, dst), dst)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=[d.short_name for d in ALL_DTYPES])
def test_contiguize_is_a_bit_copy_of_any_view(dtype, rng):
    kernel = fk.bindings().lookup(fk.OpKind.CONTIGUIZE, [dtype, dtype], CPU)
    for layout in LAYOUTS:
        x = make_operand((4, 3, 5), dtype, layout, rng)
        out = np.empty(x.shape, dtype=dtype.numpy)
        kernel(x, out=out)
        assert out.flags.c_contiguous
        np.testing.assert_array_equal(out.view(np.uint8), np.ascontiguousarray(x).view(np.uint8))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cast_writes_through_output_views(layout, rng):
    kernel = fk.bindings().lookup(fk.OpKind.CAST, [fk.DType.I32, fk.DType.F64], CPU)
    x = make_operand((6, 4), fk.DType.I32, "contiguous", rng)
    if layout == "broadcast":
        return  # a broadcast output is rejected; see test_kernel_call
    out = make_operand((6, 4), fk.DType.F64, layout, rng)
    kernel(x, out=out)
    np.testing.assert_array_equal(out, x.astype(np.float64))


def test_float_to_int_rule_at_the_edges():
    values = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e30, -1e30, 2.0**63, -(2.0**63), 2.0**31,
                       -2.0**31 - 1, 255.9, -0.9, 0.9, -128.5, 127.5, 4294967295.5], dtype=np.float64)
    table = fk.bindings()
    for dst in (fk.DType.U8, fk.DType.I8, fk.DType.I16, fk.DType.I32, fk.DType.I64, fk.DType.U32):
        out = np.empty(values.shape, dtype=dst.numpy)
        table.lookup(fk.OpKind.CAST, [fk.DType.F64, dst], CPU)(values, out=out)
        np.testing.assert_array_equal(out, cast_oracle(values, fk.DType.F64, dst))
    out = np.empty(values.shape, dtype=np.int64)
    table.lookup(fk.OpKind.CAST, [fk.DType.F64, fk.DType.I64], CPU)(values, out=out)
    assert out[0] == 0 and out[2] == np.iinfo(np.int64).max and out[3] == np.iinfo(np.int64).min


def test_half_precision_rounding_is_exhaustive():
    """Every f16 and bf16 bit pattern round-trips, and f32/f64 -> f16/bf16 round to nearest even."""
    table = fk.bindings()
    bits = np.arange(1 << 16, dtype=np.uint16)
    for half, half_np in ((fk.DType.F16, np.float16), (fk.DType.BF16, ml_dtypes.bfloat16)):
        h = bits.view(half_np)
        wide = np.empty(h.shape, dtype=np.float32)
        table.lookup(fk.OpKind.CAST, [half, fk.DType.F32], CPU)(h, out=wide)
        assert_same(wide, h.astype(np.float32), fk.DType.F32)
        back = np.empty(h.shape, dtype=half_np)
        table.lookup(fk.OpKind.CAST, [fk.DType.F32, half], CPU)(wide, out=back)
        finite = ~np.isnan(wide)
        np.testing.assert_array_equal(back.view(np.uint16)[finite], bits[finite])
    # values between every pair of representable halves, including exact ties
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(200_000) * 10.0 ** rng.integers(-9, 6, 200_000)).astype(np.float32)
    ties = (np.arange(-2048, 2048, dtype=np.float32) + 0.5) * np.float32(2.0 ** -10)
    x = np.concatenate([x, ties, np.float32([65504, 65519.99, 65520, 1e-8, 6e-8, -3e-8])])
    for half, half_np in ((fk.DType.F16, np.float16), (fk.DType.BF16, ml_dtypes.bfloat16)):
        for wide_dtype, wide_np in ((fk.DType.F32, np.float32), (fk.DType.F64, np.float64)):
            src = x.astype(wide_np) if wide_np is np.float32 else x.astype(np.float64) * (1 + 2.0 ** -30)
            out = np.empty(src.shape, dtype=half_np)
            table.lookup(fk.OpKind.CAST, [wide_dtype, half], CPU)(src, out=out)
            assert_same(out, cast_oracle(src, wide_dtype, half), half)


def test_integer_wraparound_and_bool():
    table = fk.bindings()
    x = np.array([-1, 255, 256, -129, 2**31 - 1, -2**31, 70000], dtype=np.int64)
    for dst in (fk.DType.U8, fk.DType.I8, fk.DType.I16, fk.DType.I32, fk.DType.U32, fk.DType.BOOL):
        out = np.empty(x.shape, dtype=dst.numpy)
        table.lookup(fk.OpKind.CAST, [fk.DType.I64, dst], CPU)(x, out=out)
        np.testing.assert_array_equal(out, x.astype(dst.numpy))


def test_input_broadcasts_to_output_shape():
    kernel = fk.bindings().lookup(fk.OpKind.CAST, [fk.DType.F32, fk.DType.F64], CPU)
    x = np.arange(4, dtype=np.float32)
    out = np.empty((3, 4))
    kernel(x, out=out)
    np.testing.assert_array_equal(out, np.broadcast_to(x, (3, 4)))


def test_zero_size_and_scalar():
    kernel = fk.bindings().lookup(fk.OpKind.CAST, [fk.DType.F32, fk.DType.I32], CPU)
    out = np.empty((0, 5), dtype=np.int32)
    kernel(np.empty((0, 5), dtype=np.float32), out=out)
    scalar_out = np.empty((), dtype=np.int32)
    kernel(np.float32(3.7) * np.ones((), dtype=np.float32), out=scalar_out)
    assert scalar_out == 3


def test_precision_claims_are_exact():
    for k in fk.bindings():
        if k.op in (fk.OpKind.CAST, fk.OpKind.CONTIGUIZE) and k.backend == CPU and k.source == "native":
            assert k.precision is not None and k.precision.exact and k.precision.bit_stable, k
