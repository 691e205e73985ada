"""The F32 math functions (fuel_kernel/cpu/vecmath_f32.h) against an F64 NumPy oracle.

Every float unary op's F32 kernel runs on a million F32 values sampled uniformly over all bit
patterns (so every binade, the subnormals and NaNs are hit) plus the special values of the
header's opening comment, and must stay within the ulp bound its manifest row claims, with NaN,
infinities and signed zeros matching exactly.  F16 and BF16 kernels run every value of their type
and must be within their claim of the F64 result rounded once.  POW and POWI check C99 pow's
special cases.  With FUEL_KERNEL_FUZZ_LONG=1 (the project's long-test switch, as in
tests/properties/test_fuzz.py) every one of the 2**32 F32 inputs is checked instead.
"""
import ctypes
import ctypes.util
import math
import os

import ml_dtypes
import numpy as np
import pytest

import fuel_kernel as fk
from oracles import TRANSCENDENTAL_UNARY
from support import assert_same, cpu_flags

D = fk.DType
Op = fk.OpKind
LONG = os.environ.get("FUEL_KERNEL_FUZZ_LONG", "") not in ("", "0")

FLOAT_UNARY = (Op.NEG, Op.ABS, Op.SQR, Op.SQRT, Op.RSQRT, Op.RECIP, Op.EXP, Op.LOG, Op.SIN, Op.COS,
               Op.TANH, Op.SIGMOID, Op.RELU, Op.SILU, Op.GELU, Op.GELU_ERF, Op.ERF, Op.STEP,
               Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN)
EXACT_REFERENCE = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.SQR: np.square, Op.SQRT: np.sqrt,
    Op.RECIP: lambda x: 1.0 / x, Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.ROUND: np.rint,
    Op.SIGN: lambda x: np.where(x == 0, x, np.sign(x)), Op.RELU: lambda x: np.where(x > 0, x, np.where(np.isnan(x), x, 0.0)),
    Op.STEP: lambda x: np.heaviside(x, 0.0),
}

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
     1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38, 1.1754944e-38, -1.1754944e-38,  # subnormal edge
     3.4028235e38, -3.4028235e38,
     88.72283, 88.72284, 89.0, -87.33654, -103.97, -104.0, -110.0, -120.0, -126.0, -130.0,  # exp
     9.01, -9.01, 9.1, -9.1,                                                        # tanh
     -10.5, -11.0, -12.0, -13.0, -14.5, -15.0, 3.92, -3.92, 4.0, 10.5, -10.5,       # gelu/erf tails
     math.pi, -math.pi, math.pi / 2, math.pi / 4, 65536.0, -65536.0, 65536.01, 1e5, 1e10,  # trig
     1e30, -1e30, 2.0 ** 127, -(2.0 ** 127), 2.0 ** 24, 2.0 ** 24 + 2, 1.0e-30],
    dtype=np.float32)


def sample_f32(n=1_000_000, seed=11):
    bits = np.random.default_rng(seed).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), SPECIALS])


def reference(op, x):
    """The op in F64 (NumPy and math.erf/erfc), unrounded."""
    with np.errstate(all="ignore"):
        xd = x.astype(np.float64)
        if op in EXACT_REFERENCE:
            return EXACT_REFERENCE[op](xd)
        if op in (Op.ERF, Op.GELU_ERF) and LONG:
            special = pytest.importorskip("scipy.special")
            if op == Op.ERF:
                return special.erf(xd)
            y = 0.5 * xd * special.erfc(-xd / math.sqrt(2.0))
            return np.where(np.isneginf(xd), -0.0, np.where(np.isposinf(xd), xd, y))
        return np.asarray(TRANSCENDENTAL_UNARY[op](xd), dtype=np.float64)


def check_op(op, x):
    k = fk.bindings().lookup(op, [D.F32, D.F32])
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        k(x, out=out)
    ref = reference(op, x).astype(np.float32)
    assert_same(out, ref, D.F32, ulp=k.precision.max_ulp)
    # signed zeros and infinities exactly (assert_same compares values)
    same = out == ref
    zero_sign = same & (ref == 0) & (np.signbit(out) != np.signbit(ref))
    assert not zero_sign.any(), f"{op.name}: zero sign at {x[zero_sign][:5]}"
    inf = np.isinf(ref) | np.isinf(out)
    assert (out[inf] == ref[inf]).all(), f"{op.name}: infinity at {x[inf & (out != ref)][:5]}"


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.name)
def test_f32_sampled_and_special_values(op):
    check_op(op, sample_f32())


@pytest.mark.skipif(not LONG, reason="every F32 input: set FUEL_KERNEL_FUZZ_LONG=1")
@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.name)
def test_f32_every_input(op):
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        check_op(op, x)


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.name)
def test_contiguous_vector_forms_give_the_strided_bits(op):
    """A contiguous F32 row runs the CPU's intrinsic form (AVX-512 or AVX2, where the op has one),
    whose vectors may branch on their lanes (GELU_ERF takes a shorter path when every |x| <= 12.5,
    SILU when none is below -87, EXP when all are in its normal range); a strided row runs
    the portable function.  Both must give the same bits, on vectors wholly inside each branch
    (a dense sweep over -130..130, and over -16..8 where GELU_ERF and ERF change form) and on
    vectors that mix them (the same values shuffled, with the special values)."""
    rng = np.random.default_rng(5)
    dense = np.concatenate([np.linspace(-130, 130, 1 << 18, dtype=np.float32),
                            np.linspace(-16, 8, 1 << 18, dtype=np.float32), SPECIALS])
    mixed = rng.permutation(dense)
    k = fk.bindings().lookup(op, [D.F32, D.F32])
    for x in (dense, mixed):
        contiguous = np.empty_like(x)
        strided = np.empty(2 * x.size, np.float32)
        wide = np.zeros(2 * x.size, np.float32)
        wide[1::2] = x
        with np.errstate(all="ignore"):
            k(x, out=contiguous)
            k(wide[1::2], out=strided[::2])
        differ = contiguous.view(np.uint32) != strided[::2].view(np.uint32)
        assert not differ.any(), f"{op.name}: {x[differ][:5]} give {contiguous[differ][:5]} and {strided[::2][differ][:5]}"


def _check_rsqrt_bits(x):
    k = fk.bindings().lookup(Op.RSQRT, [D.F32, D.F32])
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        k(x, out=out)
        ref = np.float32(1) / np.sqrt(x)
    nan = np.isnan(ref)
    assert (np.isnan(out) == nan).all(), f"RSQRT: NaN where NumPy has none at {x[np.isnan(out) != nan][:5]}"
    differ = (out.view(np.uint32) != ref.view(np.uint32)) & ~nan
    assert not differ.any(), f"RSQRT: {x[differ][:5]} give {out[differ][:5]}, NumPy {ref[differ][:5]}"


def test_rsqrt_is_the_reciprocal_of_the_rounded_root_rounded():
    """RSQRT in F32 is 1 / sqrt(x) with each step rounded to F32; its vector forms take the reciprocal
    by Newton steps and a correction (vecmath_f32.h), whose one exception (a root with an all-ones
    significand) they mend.  The bits of NumPy's float32 1 / sqrt(x) on every x in [1, 4) (their
    roots take every significand), on those scaled by 2^-124 and 2^100, on every subnormal, on
    negative values and on the special values; on every F32 input in the long mode."""
    if LONG:
        step = 1 << 24
        for start in range(0, 1 << 32, step):
            _check_rsqrt_bits(np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32))
        return
    one_to_four = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    subnormals = np.arange(0, 0x00800000, dtype=np.uint32).view(np.float32)
    for x in (one_to_four, one_to_four * np.float32(2.0 ** -124), one_to_four * np.float32(2.0 ** 100),
              subnormals, -one_to_four[::4096], SPECIALS, sample_f32(200_000, seed=3)):
        _check_rsqrt_bits(np.ascontiguousarray(x))


def test_exp_keeps_a_nan_s_sign_and_payload():
    """EXP of a NaN is that NaN, quiet or signalling, of either sign and any payload, in the contiguous
    vector form and the strided portable one; only the quiet bit may be set (the AVX-512 form
    quiets a signalling NaN, as NumPy does, where it puts the NaN back after its clamp)."""
    bits = np.tile(np.array([0x7FC12345, 0xFFC00001, 0x7FA00001, 0xFF800001, 0x7F800001], np.uint32), 13)
    x = bits.view(np.float32)
    k = fk.bindings().lookup(Op.EXP, [D.F32, D.F32])
    contiguous = np.empty_like(x)
    strided = np.empty(2 * x.size, np.float32)
    k(x, out=contiguous)
    k(x, out=strided[::2])
    for out in (contiguous, strided[::2]):
        assert (out.view(np.uint32) | 0x00400000 == bits | 0x00400000).all(), out.view(np.uint32)[:5]


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.name)
def test_half_types_every_value(op):
    """F16 and BF16 compute through the F32 function and round once."""
    for dtype, x in ((D.F16, np.arange(0, 1 << 16, dtype=np.uint16).view(np.float16)),
                     (D.BF16, np.arange(0, 1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16))):
        k = fk.bindings().lookup(op, [dtype, dtype])
        out = np.empty_like(x)
        with np.errstate(all="ignore"):
            k(x, out=out)
        ref = reference(op, x.astype(np.float32))
        assert_same(out, ref.astype(x.dtype), dtype, ulp=k.precision.max_ulp)


def _round_f32_to_bf16_bits(y):
    """F32 values to BF16 bits, to nearest even; a NaN keeps its sign and top payload, made quiet."""
    b = y.view(np.uint32).astype(np.uint64)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    quiet = ((b >> 16) | 0x40).astype(np.uint16)
    return np.where(np.isnan(y), quiet, rounded)


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.name)
def test_bf16_is_the_f32_kernel_rounded_once_bit_for_bit(op):
    """Every BF16 value, contiguous (whatever loop the CPU takes: one fused loop, F32 chunks, or an
    AVX2 form with the widening in registers) and at an offset and a stride (the F32 chunks): the
    BF16 kernel's bits are the F32 kernel's on the widened values, rounded once."""
    x16 = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    x16 = np.concatenate([x16, x16[::-1], x16[:13]])
    k16 = fk.bindings().lookup(op, [D.BF16, D.BF16])
    k32 = fk.bindings().lookup(op, [D.F32, D.F32])
    for view in (x16, x16[5:], x16[::3]):
        want32 = np.empty(view.size, np.float32)
        got = np.empty(view.size, ml_dtypes.bfloat16)
        with np.errstate(all="ignore"):
            k32(view.astype(np.float32), out=want32)
            k16(view, out=got)
        assert np.array_equal(got.view(np.uint16), _round_f32_to_bf16_bits(want32)), op.name


def test_trig_huge_arguments_take_the_exact_reduction():
    """|x| past the Cody-Waite range (and mixed into a vector chunk, strided, in place) is exact."""
    x = np.array([1e30, -1e30, 2.0 ** 127, 65536.0, 65537.0, 1e6, 0.5, 3.0e38, 12345.678],
                 dtype=np.float32)
    x = np.tile(x, 100)
    for op, fn in ((Op.SIN, np.sin), (Op.COS, np.cos)):
        k = fk.bindings().lookup(op, [D.F32, D.F32])
        ref = fn(x.astype(np.float64)).astype(np.float32)
        out = np.empty_like(x)
        k(x, out=out)
        assert_same(out, ref, D.F32, ulp=k.precision.max_ulp)
        strided = np.empty(2 * x.size, np.float32)[::2]
        k(x, out=strided)
        assert_same(strided, ref, D.F32, ulp=k.precision.max_ulp)
        inplace = x.copy()
        k(inplace, out=inplace)
        assert_same(inplace, ref, D.F32, ulp=k.precision.max_ulp)


POW_VALUES = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, 1e-45, -1e-45,
                       1e-20, 1e20, -1e20, 3.4e38, np.inf, -np.inf, np.nan, 1.0000001, 0.99999994,
                       16777216.0, 16777217.0 - 1, 8388609.0, -8388609.0, 4194304.5, -4194304.5,
                       127.0, -127.0, 149.0, -149.0, 1e9, -1e9, 4194305.0, -4194305.0, 6284543.0, -1.0000001],
                      dtype=np.float32)


@pytest.mark.parametrize("dtype", [D.F32, D.F16, D.BF16])
def test_pow_special_cases_match_numpy(dtype):
    """Every pair of special bases and exponents: C99 pow as NumPy's np.power in F64, rounded."""
    x, y = np.meshgrid(POW_VALUES, POW_VALUES)
    x, y = x.astype(dtype.numpy).ravel(), y.astype(dtype.numpy).ravel()
    k = fk.bindings().lookup(Op.POW, [dtype] * 3)
    out = np.empty_like(x)
    k(x, y, out=out)
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    assert_same(out, ref.astype(dtype.numpy), dtype, ulp=k.precision.max_ulp)
    zeros = (out == 0) & (ref == 0)
    assert (np.signbit(out[zeros].astype(np.float32)) == np.signbit(ref[zeros])).all()


def test_pow_sampled():
    rng = np.random.default_rng(5)
    n = 1_000_000
    x = np.concatenate([rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        (rng.standard_normal(n) * 10).astype(np.float32),
                        np.exp(rng.uniform(-80, 80, n)).astype(np.float32)])
    y = np.concatenate([(rng.standard_normal(n) * 4).astype(np.float32),
                        np.round(rng.standard_normal(n) * 8).astype(np.float32),
                        rng.uniform(-1.8, 1.8, n).astype(np.float32)])
    k = fk.bindings().lookup(Op.POW, [D.F32] * 3)
    out = np.empty_like(x)
    k(x, y, out=out)
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    assert_same(out, ref, D.F32, ulp=k.precision.max_ulp)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6, 8, 9, -1, -2, -3, 7, -7, 31, 100, -149, 2**31 - 1, -2**31])
def test_powi_exponents(n):
    x = np.concatenate([sample_f32(200_000, seed=n & 0xffff), POW_VALUES])
    k = fk.bindings().lookup(Op.POWI, [D.F32, D.F32])
    out = np.empty_like(x)
    k(x, out=out, params=fk.params.powi(n))
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), float(n)).astype(np.float32)
    assert_same(out, ref, D.F32, ulp=k.precision.max_ulp)
    zeros = (out == 0) & (ref == 0)
    assert (np.signbit(out[zeros]) == np.signbit(ref[zeros])).all()


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8])
def test_powi_small_exponents_where_x_needs_no_scaling(n):
    """POWI for 3 <= n <= 8 runs a chunk (a vector on AVX-512 and AVX2, 256 elements in the portable
    code) straight on x when every element is 0 or has 2^-9 <= |x| <= 2^9 (no product or error term
    leaves the normal range), else through the scaled mantissa: random bit patterns above almost
    never fill a chunk in that range, so sample it here, with zeros of both signs (their sign is
    set apart from the two-float steps, which lose it for -0 ** 7), the range's ends, and chunks
    that one out-of-range element sends to the other path."""
    rng = np.random.default_rng(100 + n)
    lo, hi = np.float32(2.0 ** -9), np.float32(2.0 ** 9)
    mags = np.exp2(rng.uniform(-9, 9, 1_000_000)).astype(np.float32)
    x = np.where(rng.random(mags.size) < 0.5, -mags, mags).astype(np.float32)
    x[::997] = 0.0
    x[1::997] = -0.0
    x[2::1009] = lo
    x[3::1009] = -hi
    x[4::1013] = np.nextafter(hi, np.float32(np.inf))        # out of range: its chunk takes the other path
    x[5::1013] = np.nextafter(lo, np.float32(0))
    k = fk.bindings().lookup(Op.POWI, [D.F32, D.F32])
    out = np.empty_like(x)
    k(x, out=out, params=fk.params.powi(n))
    ref = np.power(x.astype(np.float64), float(n)).astype(np.float32)
    assert_same(out, ref, D.F32, ulp=k.precision.max_ulp)
    zeros = out == 0
    assert (ref[zeros] == 0).all() and (np.signbit(out[zeros]) == np.signbit(ref[zeros])).all()
    # in place gives the same bits
    y = x.copy()
    k(y, out=y, params=fk.params.powi(n))
    assert np.array_equal(y.view(np.uint32), out.view(np.uint32))


LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
LIBM.expf.restype, LIBM.expf.argtypes = ctypes.c_float, [ctypes.c_float]
ANY_FLAG = 0xFFFF            # feclearexcept / fetestexcept keep the bits of FE_ALL_EXCEPT from it


def _flags_after_expf(x):
    LIBM.feclearexcept(ANY_FLAG)
    LIBM.expf(x)
    return LIBM.fetestexcept(ANY_FLAG)


# <fenv.h>'s FE_UNDERFLOW as the C library reports it: the flag expf(-100) (a subnormal, inexact
# result) raises and expf(1) (inexact only) does not; 0 where it reports none
FE_UNDERFLOW = _flags_after_expf(-100.0) & ~_flags_after_expf(1.0)
needs_fe_underflow = pytest.mark.skipif(FE_UNDERFLOW == 0, reason="the C library reports no FE_UNDERFLOW flag")


def _raises_underflow(kernel, *inputs):
    """Whether running `kernel` on `inputs` (in the calling thread) sets the C library's FE_UNDERFLOW
    flag: a tiny inexact result somewhere in its steps."""
    out = np.empty_like(inputs[0])
    with fk.threads(1):
        LIBM.feclearexcept(ANY_FLAG)
        kernel(*inputs, out=out)
        return bool(LIBM.fetestexcept(FE_UNDERFLOW))


@needs_fe_underflow
@pytest.mark.parametrize("dtype", [D.F32, D.BF16], ids=lambda d: d.short_name)
@pytest.mark.parametrize("op", [Op.GELU, Op.GELU_ERF, Op.SILU, Op.SIGMOID, Op.TANH, Op.ERF, Op.EXP], ids=lambda o: o.name)
def test_no_subnormal_steps_where_the_result_is_normal(op, dtype):
    """An Intel core takes a microcode assist (over a hundred cycles) for every vector operation
    with a subnormal or underflowing result: on the 16-core Xeon GELU of sigma = 4 inputs ran 2.8x
    slower for it.  Over [-9, 80], where every one of these results is normal (or exactly x, 1 or
    0), no step of any ISA form may underflow; on AVX-512 neither may GELU's and GELU_ERF's tails
    below, whose subnormal results are formed from bits there (fk_v4_scalef_tiny)."""
    table = fk.bindings()
    kernel = table.lookup(op, [dtype] * 2, fk.Backend.CPU)
    lo = -80.0 if op == Op.EXP else -9.0
    x = np.linspace(lo, 80.0, 1 << 16, dtype=np.float32)
    assert not _raises_underflow(kernel, x.astype(dtype.numpy))
    if op in (Op.GELU, Op.GELU_ERF) and {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= cpu_flags():
        tail = np.linspace(-30.0, -9.0, 1 << 16, dtype=np.float32)
        assert not _raises_underflow(kernel, tail.astype(dtype.numpy))


# the activation backward ops' derivative is normal (or exactly 1) from these x up to 80 (TANH's and
# SIGMOID's, even functions, up to -lo)
BACKWARD_NORMAL_FROM = {Op.GELU_BACKWARD: -10.0, Op.GELU_ERF_BACKWARD: -13.0, Op.SILU_BACKWARD: -91.0,
                        Op.TANH_BACKWARD: -44.3, Op.SIGMOID_BACKWARD: -87.0}


@needs_fe_underflow
@pytest.mark.parametrize("dtype", [D.F32, D.BF16], ids=lambda d: d.short_name)
@pytest.mark.parametrize("op", sorted(BACKWARD_NORMAL_FROM, key=lambda o: o.name), ids=lambda o: o.name)
def test_backward_no_subnormal_steps_where_the_result_is_normal(op, dtype):
    """The activation derivatives (dx = dy f'(x), dy = 1) take no subnormal step where f'(x) is
    normal, the large positive x included (each such vector costs an Intel core microcode assists):
    there their exp factors are clamped where the result is 1 anyway, or carried times 2^64 and
    scaled back once."""
    kernel = fk.bindings().lookup(op, [dtype] * 3, fk.Backend.CPU)
    lo = BACKWARD_NORMAL_FROM[op]
    hi = -lo if op in (Op.TANH_BACKWARD, Op.SIGMOID_BACKWARD) else 80.0
    x = np.linspace(lo, hi, 1 << 16, dtype=np.float32).astype(dtype.numpy)
    assert not _raises_underflow(kernel, x, np.ones_like(x))


@pytest.mark.parametrize("op", sorted(BACKWARD_NORMAL_FROM, key=lambda o: o.name), ids=lambda o: o.name)
def test_backward_contiguous_vector_forms_give_the_strided_bits(op):
    """Contiguous F32 rows of SILU_BACKWARD and GELU_ERF_BACKWARD run their AVX-512 form on
    x86-64-v4 CPUs (the other derivatives GCC's loop of the portable function); strided rows run
    the portable function one element at a time.  Both must give the same bits over a dense sweep,
    the same values shuffled, the special values, and dy of mixed magnitudes (NaN and inf too)."""
    rng = np.random.default_rng(6)
    dense = np.concatenate([np.linspace(-130, 130, 1 << 18, dtype=np.float32),
                            np.linspace(-16, 16, 1 << 18, dtype=np.float32), SPECIALS])
    k = fk.bindings().lookup(op, [D.F32] * 3)
    for x in (dense, rng.permutation(dense)):
        dy = (rng.choice([1.0, -2.5, 1e30, -1e-30, 3e-39], x.size) * rng.uniform(0.5, 1, x.size)).astype(np.float32)
        dy[rng.choice(x.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, -0.0]
        contiguous = np.empty_like(x)
        strided = np.empty(2 * x.size, np.float32)
        wide = np.zeros((2, 2 * x.size), np.float32)
        wide[0, 1::2], wide[1, 1::2] = x, dy
        with np.errstate(all="ignore"):
            k(x, dy, out=contiguous)
            k(wide[0, 1::2], wide[1, 1::2], out=strided[::2])
        differ = contiguous.view(np.uint32) != strided[::2].view(np.uint32)
        assert not differ.any(), f"{op.name}: {x[differ][:5]} give {contiguous[differ][:5]} and {strided[::2][differ][:5]}"


@pytest.mark.parametrize("op", list(FLOAT_UNARY) + sorted(BACKWARD_NORMAL_FROM, key=lambda o: o.name) + [Op.POW],
                         ids=lambda op: op.name)
def test_vector_loops_every_short_length(op):
    """The AVX-512 loops load a 256-byte block ahead of their stores from 128 elements on, then
    finish by single vectors and a masked one: every length from 0 to 300 (and a few longer ones),
    contiguous, in place and, for two-input ops, with an operand broadcast from one element, gives
    the strided rows' bits."""
    rng = np.random.default_rng(9)
    n_in = 2 if op in BACKWARD_NORMAL_FROM or op == Op.POW else 1
    k = fk.bindings().lookup(op, [D.F32] * (n_in + 1))
    for n in list(range(301)) + [1000, 4097]:
        wide = (rng.standard_normal((n_in, 2 * n)) * 4).astype(np.float32)
        if op in (Op.LOG, Op.SQRT, Op.RSQRT, Op.POW):
            wide[0] = np.abs(wide[0])
        strided_in = [w[::2] for w in wide]
        contiguous_in = [np.ascontiguousarray(x) for x in strided_in]
        layouts = [contiguous_in]
        if n_in == 2 and n:
            layouts.append([contiguous_in[0], np.broadcast_to(contiguous_in[1][:1], (n,))])
        for inputs in layouts:
            expected = np.empty(2 * n, np.float32)[::2]
            out = np.empty(n, np.float32)
            with np.errstate(all="ignore"):
                k(*[x if x.strides[0] == 0 else x.repeat(2)[::2] for x in inputs], out=expected)
                k(*inputs, out=out)
                assert out.tobytes() == expected.tobytes(), f"{op.name}, {n} elements"
                inplace = inputs[0].copy()
                k(inplace, *inputs[1:], out=inplace)
            assert inplace.tobytes() == expected.tobytes(), f"{op.name}, {n} elements in place"
