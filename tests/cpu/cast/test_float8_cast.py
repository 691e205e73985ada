"""CAST to and from the FP8 dtypes (F8E4M3, F8E5M2), bit for bit against ml_dtypes.

Every one of the 256 codes of each FP8 dtype is cast to every dtype; every value of each dtype of
at most 16 bits (and the edges plus samples of the wider integers, and F64 values next to every
FP8 rounding tie) is cast to each FP8 dtype; F32 runs a million bit patterns sampled uniformly plus
the specials, and with FUEL_KERNEL_FUZZ_LONG=1 (the project's long-test switch) every one of the
2**32 F32 bit patterns.  Where NumPy leaves a conversion undefined (NaN or a value out of range
into an integer) CAST follows its own rule (truncate, saturate, NaN -> 0), checked here too.
"""
import os

import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
from oracles import cast_values
from support import ALL_DTYPES, FLOAT8_DTYPES

D = fk.DType
CPU = fk.Backend.CPU
LONG = os.environ.get("FUEL_KERNEL_FUZZ_LONG", "") not in ("", "0")
CODES = np.arange(256, dtype=np.uint8)


def cast(x, src, dst):
    out = np.empty(x.shape, dtype=dst.numpy)
    fk.bindings().lookup(fk.OpKind.CAST, [src, dst], CPU)(x, out=out)
    return out


def bits(a):
    a = np.ascontiguousarray(a)
    return a if a.dtype == np.bool_ else a.view(f"u{a.dtype.itemsize}")


def assert_bits(actual, expected, context):
    got, want = bits(actual), bits(expected)
    bad = got != want
    assert not bad.any(), (f"{context}: {int(bad.sum())} differ, first at {np.flatnonzero(bad)[:5].tolist()}: "
                           f"got {got[bad][:5]} expected {want[bad][:5]}")


def ml_dtypes_cast(x, dst):
    with np.errstate(all="ignore"):
        return x.astype(dst.numpy)


def test_the_formats_are_ml_dtypes():
    assert D.F8E4M3.numpy == np.dtype(ml_dtypes.float8_e4m3fn)
    assert D.F8E5M2.numpy == np.dtype(ml_dtypes.float8_e5m2)
    assert D.parse(ml_dtypes.float8_e4m3fn) == D.F8E4M3 and D.parse("f8e5m2") == D.F8E5M2
    assert all(d.is_float8 and not d.is_float and d.itemsize == 1 for d in FLOAT8_DTYPES)


@pytest.mark.parametrize("dst", ALL_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("src", FLOAT8_DTYPES, ids=lambda d: d.short_name)
def test_every_code_to_every_dtype(src, dst):
    x = CODES.view(src.numpy)
    out = cast(x, src, dst)
    assert_bits(out, cast_values(x, dst), f"{src.name} -> {dst.name}")
    # where NumPy defines the result, it is ml_dtypes' astype itself, bit for bit
    defined = np.ones(x.shape, dtype=bool)
    if not (dst.is_float or dst.is_float8 or dst == D.BOOL):
        v, info = x.astype(np.float64), np.iinfo(dst.numpy)
        with np.errstate(invalid="ignore"):
            defined = np.isfinite(v) & (np.trunc(v) >= info.min) & (np.trunc(v) <= info.max)
    assert_bits(out[defined], ml_dtypes_cast(x, dst)[defined], f"{src.name} -> {dst.name} (astype)")


def test_undefined_integer_results_follow_the_cast_rule():
    """NaN -> 0; out of range saturates; truncation toward zero (as F16/BF16 -> int)."""
    x = np.array([np.nan, -np.nan, 448.0, -448.0, 57344.0, -57344.0, np.inf, -np.inf, -0.75, 1.875],
                 dtype=np.float64)
    for src in FLOAT8_DTYPES:
        f8 = x.astype(src.numpy)
        v = f8.astype(np.float64)
        for dst in (D.U8, D.I8, D.I16, D.I32, D.I64, D.U32):
            info = np.iinfo(dst.numpy)
            out = cast(f8, src, dst)
            expected = [0 if t != t else info.max if t >= info.max else info.min if t <= info.min else int(t)
                        for t in np.trunc(v)]
            np.testing.assert_array_equal(out, np.array(expected, dtype=dst.numpy), err_msg=f"{src.name} -> {dst.name}")


def every_value(dtype):
    """Every value of a dtype of at most 16 bits, as an array of that dtype."""
    if dtype == D.BOOL:
        return np.array([False, True])
    width = 8 * dtype.itemsize
    return np.arange(1 << width, dtype=np.uint64).astype(f"u{dtype.itemsize}").view(dtype.numpy)


def integer_samples(dtype, rng):
    """The extremes, the integers near every FP8 overflow threshold, and random ones."""
    info = np.iinfo(dtype.numpy)
    edges = [info.min, info.max, 0, 1, -1, 240, 447, 448, 449, 463, 464, 465, 480, 57343, 57344, 57345,
             61439, 61440, 61441, 65536, 2 ** 24 + 1, 2 ** 31 - 1, -2 ** 31, 2 ** 62 + 1]
    edges = [e for e in edges if info.min <= e <= info.max]
    small = rng.integers(max(info.min, -70000), min(info.max, 70000), 100_000, endpoint=True)
    wide = rng.integers(info.min, info.max, 10_000, endpoint=True, dtype=dtype.numpy)
    return np.concatenate([np.array(edges, dtype=dtype.numpy), small.astype(dtype.numpy), wide])


def tie_neighbours(dtype):
    """F64 values at, just below and just above every rounding tie between neighbouring finite
    FP8 values (and past the largest), both signs, plus the zeros and the non-finite values."""
    v = np.sort(np.unique(np.abs(CODES.view(dtype.numpy).astype(np.float64))))
    v = v[np.isfinite(v)]
    spacing = v[-1] - v[-2]
    v = np.append(v, v[-1] + spacing)             # the value one step past the largest finite
    ties = (v[:-1] + v[1:]) / 2
    points = np.concatenate([v, ties, ties * (1 + 2.0 ** -40), ties * (1 - 2.0 ** -40),
                             ties * (1 + 2.0 ** -20), ties * (1 - 2.0 ** -20), [2.0 ** -30, 1e300]])
    points = np.concatenate([points, -points, [np.inf, -np.inf, np.nan, -np.nan]])
    return points


def sources(src, rng):
    if src.itemsize <= 2 and not src.is_float8:
        return every_value(src)
    if src.is_float8:
        return CODES.view(src.numpy)
    if src.is_float:                               # F32 and F64: the ties, then random magnitudes
        mags = rng.standard_normal(100_000) * 10.0 ** rng.integers(-12, 7, 100_000)
        return np.concatenate([tie_neighbours(D.F8E4M3), tie_neighbours(D.F8E5M2), mags]).astype(src.numpy)
    return integer_samples(src, rng)


@pytest.mark.parametrize("dst", FLOAT8_DTYPES, ids=lambda d: d.short_name)
@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.short_name)
def test_every_dtype_to_float8(src, dst, rng):
    x = sources(src, rng)
    assert_bits(cast(x, src, dst), ml_dtypes_cast(x, dst), f"{src.name} -> {dst.name}")


def test_f64_rounds_directly_not_through_f32():
    """ml_dtypes rounds F64 once: 1 + half an ulp + a little goes up, where F32 would tie to 1."""
    for dtype, half_ulp in ((D.F8E4M3, 2.0 ** -4), (D.F8E5M2, 2.0 ** -3)):
        x = np.array([1 + half_ulp + 2.0 ** -40, -(1 + half_ulp + 2.0 ** -40)])
        out = cast(x, D.F64, dtype).astype(np.float64)
        np.testing.assert_array_equal(out, [1 + 2 * half_ulp, -(1 + 2 * half_ulp)])
        via_f32 = cast(x.astype(np.float32), D.F32, dtype).astype(np.float64)
        np.testing.assert_array_equal(via_f32, [1.0, -1.0])


def test_overflow_nan_and_zeros():
    """E4M3 has no infinity: past 448 (and inf) is NaN; E5M2 overflows to inf; NaNs lose their
    payload; signed zeros and the smallest subnormals survive."""
    x = np.array([464.0, 464.0001, 1e6, np.inf, -np.inf, -0.0, 2.0 ** -9, 2.0 ** -10, 2.0 ** -10 * 1.0001],
                 dtype=np.float32)
    e4 = cast(x, D.F32, D.F8E4M3).view(np.uint8)
    np.testing.assert_array_equal(e4, [0x7E, 0x7F, 0x7F, 0x7F, 0xFF, 0x80, 0x01, 0x00, 0x01])
    y = np.array([61439.0, 61440.0, np.inf, -1e9, -0.0, 2.0 ** -16, 2.0 ** -17], dtype=np.float32)
    e5 = cast(y, D.F32, D.F8E5M2).view(np.uint8)
    np.testing.assert_array_equal(e5, [0x7B, 0x7C, 0x7C, 0xFC, 0x80, 0x01, 0x00])
    payloads = np.array([0x7FC00001, 0x7F800001, 0xFFC12345], dtype=np.uint32).view(np.float32)
    np.testing.assert_array_equal(cast(payloads, D.F32, D.F8E5M2).view(np.uint8), [0x7E, 0x7E, 0xFE])
    np.testing.assert_array_equal(cast(payloads, D.F32, D.F8E4M3).view(np.uint8), [0x7F, 0x7F, 0xFF])
    nans = np.array([0x7D, 0x7E, 0x7F, 0xFD], dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(cast(nans, D.F8E5M2, D.F32).view(np.uint32),
                                  [0x7FC00000, 0x7FC00000, 0x7FC00000, 0xFFC00000])


def f32_specials():
    return np.concatenate([tie_neighbours(D.F8E4M3), tie_neighbours(D.F8E5M2)]).astype(np.float32).view(np.uint32)


@pytest.mark.parametrize("dst", FLOAT8_DTYPES, ids=lambda d: d.short_name)
def test_f32_sampled_bit_patterns(dst, rng):
    patterns = np.concatenate([rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint64).astype(np.uint32),
                               f32_specials(), np.array([0x7F800001, 0xFFFFFFFF, 0x00000001, 0x807FFFFF],
                                                        dtype=np.uint32)])
    x = patterns.view(np.float32)
    assert_bits(cast(x, D.F32, dst), ml_dtypes_cast(x, dst), f"F32 -> {dst.name}")


@pytest.mark.skipif(not LONG, reason="every F32 bit pattern: set FUEL_KERNEL_FUZZ_LONG=1")
@pytest.mark.parametrize("dst", FLOAT8_DTYPES, ids=lambda d: d.short_name)
def test_f32_every_bit_pattern(dst):
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        assert_bits(cast(x, D.F32, dst), ml_dtypes_cast(x, dst), f"F32 -> {dst.name} from {start:#x}")
