/* F32 math functions of the CPU elementwise kernels: exp, log, sin, cos, tanh, sigmoid, SiLU, GELU
 * (tanh form), GELU (erf form), erf, rsqrt, pow and integer pow.  F16 and BF16 kernels call the
 * same functions on the widened value and round the F32 result once; F64 kernels use the C library.
 *
 * Every function is branch-free inline code (selects and table lookups, no calls; fmaf and fma are
 * one instruction in the x86-64-v3/v4 builds and the exactly rounded C functions in the baseline
 * build, so every build returns the same bits; integer pow's general path alone computes in F64, whose
 * exactness for an int32 exponent its 1-ulp claim needs), which GCC vectorizes inside the FK_MV_COMPUTE loops of
 * elementwise_kernels.h (the table lookups of erf and GELU_ERF as gathers, so their baseline-build
 * loops stay scalar).
 * The one exception is sin/cos of |x| > FK_TRIG_FAST_MAX (rare): the kernels send those elements
 * to the C library in F64, in a separate scalar pass (see fk_trig_needs_slow_path).
 *
 * Accuracy: the maximum errors, in units in the last place of the correctly rounded F32 result,
 * were measured against the F64 C library over 16.7M inputs per function spread over every binade
 * (POWI/POW: 1M per exponent tried) and are stated in the unary and binary manifests (FK_ULP_*_F32);
 * tests/cpu/elementwise/test_vecmath_f32.py checks them on a million sampled inputs plus the
 * special values, and on every F32 input with FUEL_KERNEL_FUZZ_LONG=1.  Subnormal inputs and
 * results are computed, never flushed.
 *
 * Special values follow NumPy (which follows C99 Annex F) everywhere:
 *   exp     exp(-inf) = +0, exp(+inf) = +inf, overflow to +inf past 88.72, underflow to +0.
 *   log     log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(1) = +0.
 *   sin/cos sin(+-0) = +-0, cos(+-0) = 1, sin/cos(+-inf) = NaN.
 *   tanh    tanh(+-0) = +-0, tanh(+-inf) = +-1.
 *   sigmoid sigmoid(-inf) = +0, sigmoid(+inf) = 1, sigmoid(+-0) = 0.5.
 *   silu, gelu, gelu_erf   f(-inf) = -0 (the limit; x * 0 would be NaN), f(+inf) = +inf,
 *                          f(+-0) = +-0; tiny negative results underflow to -0.
 *   erf     erf(+-0) = +-0, erf(+-inf) = +-1.
 *   rsqrt   1/sqrt(x): rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(x < 0) = NaN, rsqrt(+inf) = +0.
 *   pow     C99 pow (NumPy's np.power on floats): pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN;
 *           pow(-1, +-inf) = 1; a negative finite base with a finite non-integer exponent is NaN;
 *           a negative base with an odd integer exponent keeps the sign (-0 and -inf included);
 *           pow(+-0, y < 0) = +-inf, pow(+-0, y > 0) = +-0 (sign only for odd integer y);
 *           pow(x, +-inf) is +0 or +inf by |x| < 1 or |x| > 1; any other NaN operand gives NaN.
 * NaN inputs come back as NaN (the payload of the input NaN where the function passes it through).
 */
#ifndef FUEL_KERNEL_CPU_VECMATH_F32_H
#define FUEL_KERNEL_CPU_VECMATH_F32_H

/* a*b+c must not be contracted into an FMA: the baseline build has no FMA and every build has to
 * return the same bits (the explicit fmaf calls below are the only fused operations) */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdint.h>

#include "fuel_kernel/half.h"
#include "compute_common.h"       /* FK_HAVE_ISA_V4 */

#define FK_VM_INLINE static inline __attribute__((always_inline))

/* c[0] x^(n-1) + c[1] x^(n-2) + ... + c[n-1] by Horner's rule, one fmaf a step.  Called with a
 * static const table and a constant n, it unrolls into the same fmaf chain written out by hand. */
FK_VM_INLINE float fk_horner_f32(float x, const float *c, int n) {
    float p = c[0];
#pragma GCC unroll 16
    for (int k = 1; k < n; k++) p = fmaf(p, x, c[k]);
    return p;
}

/* x where x is NaN (its payload kept), else y.  A blend of the bits, not ?:, because GCC 13 turns
 * the last of a chain of float selects into a branch (LOG and GELU_ERF lost their vector loops,
 * running 8-25x slower); a bit blend stays branch-free under every GCC tried (12, 13). */
FK_VM_INLINE float fk_keep_nan(float x, float y) {
    uint32_t nan_mask = 0u - (uint32_t)(x != x);
    return fk_bits_f32((fk_f32_bits(x) & nan_mask) | (fk_f32_bits(y) & ~nan_mask));
}

/* x clamped to [lo, hi] (a NaN x stays NaN; callers keep it with fk_keep_nan).  Both selects test
 * x itself: chained through the clamped value (x > lo ? x : lo, then that < hi ? ...), GCC threads
 * the clamp constants through the caller's polynomial as masked copies of every step, 7-20% slower
 * on AVX-512 and AVX2 for the same bits. */
FK_VM_INLINE float fk_clamp_f32(float x, float lo, float hi) {
    float c = x < lo ? lo : x;
    return x > hi ? hi : c;
}

/* 1.5 * 2^23: adding and removing it rounds |v| < 2^22 to the nearest integer (ties to even), and
 * unlike roundevenf it vectorizes on every ISA */
#define FK_ROUND_MAGIC 12582912.0f

/* ---- exp ------------------------------------------------------------------------------------------
 * x = n*ln2 + r with a two-part ln2 (Cody-Waite), exp(r) by the Cephes expf polynomial on
 * |r| <= ln2/2, times 2^n applied as two exact power-of-two factors so subnormal results round
 * once and large ones overflow to inf exactly where expf does. */
FK_VM_INLINE float fk_pow2i_f32(int32_t k) { return fk_bits_f32((uint32_t)(k + 127) << 23); }

/* expm1(r) for |r| <= ln2/2 (the Cephes expf polynomial, written as r + r^2 p(r)); the AVX-512
 * form (fk_v4_expm1_reduced) reads the same coefficients */
static const float fk_expf_p[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
FK_VM_INLINE float fk_expm1_reduced(float r) {
    return fmaf(fk_horner_f32(r, fk_expf_p, 6), r * r, r);
}

/* exp(x) * 2^scale, scale in [0, 64]: a scale keeps results that would be subnormal normal (down
 * to x = -131 for scale 64), for a caller that multiplies further and scales back in one final
 * rounding.  Below -126 the argument is clamped (exp(-126) 2^64 is far below any use). */
FK_VM_INLINE float fk_expf_scaled(float x, int32_t scale) {
    float xc = fk_clamp_f32(x, -126.0f, 89.0f);
    float k = fmaf(xc, 1.44269504088896341f, FK_ROUND_MAGIC);
    float n = k - FK_ROUND_MAGIC;
    float r = fmaf(n, -0.693359375f, xc);
    r = fmaf(n, 2.12194440e-4f, r);
    float y = fk_expm1_reduced(r) + 1.0f;
    /* n as an integer from the rounding sum's bits (k is in [2^23, 2^24), where its mantissa's low
     * bits are n): no float-to-int conversion, which a NaN would make undefined */
    int32_t ni = (int32_t)(fk_f32_bits(k) - 0x4B400000u) + scale, n1 = ni >> 1, n2 = ni - n1;   /* both factors stay normal */
    y = y * fk_pow2i_f32(n1) * fk_pow2i_f32(n2);
    return fk_keep_nan(x, y);
}
FK_VM_INLINE float fk_fast_expf(float x) { return fk_expf_scaled(x, 0); }

/* exp(h + l) * 2^scale for |h| < 256 and |l| <= 4 ulp(h): exp(h) (1 + l), the second factor one fma
 * (the l^2 / 2 left out is below 2^-29 relative) */
FK_VM_INLINE float fk_expf_dd_scaled(float h, float l, int32_t scale) {
    float e = fk_expf_scaled(h, scale);
    return fmaf(e, l, e);
}
#define FK_TWO_POW_M64 5.421010862427522e-20f

/* ---- sigmoid, tanh, SiLU -------------------------------------------------------------------------
 * sigmoid via t = exp(-|x|) <= 1: 1/(1+t) for x >= 0 and t/(1+t) below, so neither side overflows
 * and tiny results keep their relative accuracy down to the subnormals. */
FK_VM_INLINE float fk_fast_sigmoidf(float x) {
    float t = fk_fast_expf(-fabsf(x));
    float d = 1.0f + t;
    return (x >= 0.0f ? 1.0f : t) / d;
}

/* tanh(|x|) = -expm1(v) / (2 + expm1(v)) with v = -2|x| (no cancellation at any |x|).
 * v = n ln2 + r as in exp; with s = 2^n, expm1(v) = s expm1(r) + (s - 1), so numerator and
 * denominator are each one fma, 1 - s - s e and 1 + s + s e, exact up to their final rounding
 * (measured over every float: at most 1.91 ulp).  Past |x| = 9.1 tanh rounds to 1, so v is clamped there: n >= -27, s is one normal power of two,
 * built from the bits of the rounding sum (1.5 * 2^23 + n), and a one-part ln2 is exact enough
 * (|n| ln2 error < 6e-8 relative in s). */
FK_VM_INLINE float fk_fast_tanhf(float x) {
    float a = fabsf(x);
    float v = -2.0f * (a < 9.1f ? a : 9.1f);
    float k = fmaf(v, 1.44269504088896341f, FK_ROUND_MAGIC);
    float n = k - FK_ROUND_MAGIC;
    float e = fk_expm1_reduced(fmaf(n, -0.693147182464599609375f, v));
    float s = fk_bits_f32((fk_f32_bits(k) + (127u - 0x4B400000u)) << 23);
    float y = copysignf(fmaf(-s, e, 1.0f - s) / fmaf(s, e, 1.0f + s), x);
    return fk_keep_nan(x, y);
}

/* SiLU = x * sigmoid(x) = x / (1 + t) (x >= 0) or x t / (1 + t) (x < 0), t = exp(-|x|).  t is
 * computed times 2^64 so that x t is formed before any subnormal rounding, and scaled back last;
 * below x = -120 the result rounds to -0. */
FK_VM_INLINE float fk_fast_siluf(float x) {
    float u = fk_expf_scaled(-fabsf(x), 64);
    float d = fmaf(u, FK_TWO_POW_M64, 1.0f);     /* one fma: t = u 2^-64 is subnormal past 87 */
    int pos = x >= 0.0f;
    float q = (pos ? x : x * u) / d;                            /* one division for both sides */
    float y = pos ? q : q * FK_TWO_POW_M64;
    y = x < -120.0f ? -0.0f : y;
    return fk_keep_nan(x, y);
}

/* ---- log -------------------------------------------------------------------------------------------
 * x = 2^e m with m in [sqrt(1/2), sqrt 2) (subnormals scaled by 2^23 first), f = m - 1 (exact),
 * log(1 + f) = f - f^2/2 + f^3 P(f) with the Cephes logf polynomial, plus e ln2 in two parts. */
/* the Cephes logf polynomial P, highest power first (fk_fast_logf and fk_v4_logf) */
static const float fk_logf_p[9] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                                   -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                                   2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f};
FK_VM_INLINE float fk_fast_logf(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t t = fk_f32_bits(xs) - 0x3f3504f3u;
    float e = (float)((int32_t)t >> 23) - (sub ? 23.0f : 0.0f);
    float f = fk_bits_f32((t & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    float z = f * f;
    float p = fk_horner_f32(f, fk_logf_p, 9);
    float y = p * f * z;
    y = fmaf(e, -2.12194440e-4f, y);
    y = fmaf(-0.5f, z, y);
    float r = fmaf(e, 0.693359375f, f + y);
    r = x == INFINITY ? x : r;
    r = x == 0.0f ? -INFINITY : r;
    r = x < 0.0f ? NAN : r;
    return fk_keep_nan(x, r);
}

/* ---- softplus --------------------------------------------------------------------------------------
 * log(1 + exp(x)) for x <= 20 (callers pass larger x through, as torch's softplus does): e = exp(x),
 * u = 1 + e, log1p(e) = log(u) * e / (u - 1) (the quotient corrects u's rounding; exactly e when u
 * rounds to 1, where log1p(e) = e to within e/2 of an ulp).  Measured against F64 over every F32
 * x <= 20: at most 3 ulp.  NaN passes through; -inf gives +0. */
FK_VM_INLINE float fk_fast_softplusf(float x) {
    float e = fk_fast_expf(x);
    float u = 1.0f + e;
    float d = u - 1.0f;
    float r = fk_fast_logf(u) * (e / (d == 0.0f ? 1.0f : d));
    return fk_keep_nan(x, d == 0.0f ? e : r);
}

/* ---- sin, cos -----------------------------------------------------------------------------------
 * x = j pi/2 + r, j = round(x 2/pi), |r| <= pi/4 (a hair more when x 2/pi rounds the other way),
 * r by a three-part pi/2 (Cody-Waite) with one fma per part: the first part has 24 bits, so
 * x - j A is exact, and the parts carry pi/2 to 72 bits; the second step rounds r once (half an
 * ulp of r), which with the polynomials gives at most 2 ulp while |x| <= FK_TRIG_FAST_MAX.  sin(r) and cos(r) by
 * the Cephes sinf/cosf polynomials, chosen and signed by j mod 4.  Larger |x| (and inf) need a
 * longer pi: the kernels evaluate those elements with the C library in F64. */
#define FK_TRIG_FAST_MAX 65536.0f

FK_VM_INLINE float fk_sin_reduced(float r, float z) {
    float p = fmaf(-1.9515295891e-4f, z, 8.3321608736e-3f);
    p = fmaf(p, z, -1.6666654611e-1f);
    return fmaf(r * z, p, r);
}
FK_VM_INLINE float fk_cos_reduced(float z) {
    float p = fmaf(2.443315711809948e-5f, z, -1.388731625493765e-3f);
    p = fmaf(p, z, 4.166664568298827e-2f);
    return fmaf(z * z, p, fmaf(-0.5f, z, 1.0f));
}
/* (r, j) for |x| <= FK_TRIG_FAST_MAX */
FK_VM_INLINE float fk_trig_reduce(float x, int32_t *quadrant) {
    float j = (x * 6.366197724e-01f + FK_ROUND_MAGIC) - FK_ROUND_MAGIC;
    float r = fmaf(j, -1.570796371e+00f, x);
    r = fmaf(j, 4.371138829e-08f, r);
    r = fmaf(j, 1.715124510e-15f, r);
    r = j == 0.0f ? x : r;                                      /* exact, and keeps sin(-0) = -0 */
    *quadrant = (int32_t)j;
    return r;
}
/* sin (cos = 0) or cos (cos = 1) for |x| <= FK_TRIG_FAST_MAX */
FK_VM_INLINE float fk_fast_sincosf(float x, int cos) {
    int32_t q;
    float r = fk_trig_reduce(x, &q);
    float z = r * r;
    float s = fk_sin_reduced(r, z), c = fk_cos_reduced(z);
    q += cos;
    float y = (q & 1) ? c : s;
    y = (q & 2) ? -y : y;
    return !cos && x == 0.0f ? x : y;                           /* sin(-0) = -0 */
}
FK_VM_INLINE float fk_fast_sinf(float x) { return fk_fast_sincosf(x, 0); }
FK_VM_INLINE float fk_fast_cosf(float x) { return fk_fast_sincosf(x, 1); }
/* the elements fk_fast_sinf / fk_fast_cosf do not cover (inf too; NaN is covered) */
FK_VM_INLINE int fk_trig_needs_slow_path(float x) { return fabsf(x) > FK_TRIG_FAST_MAX; }
/* one element, either path (strided rows and the slow pass) */
static inline float fk_sinf_any(float x) {
    return fk_trig_needs_slow_path(x) ? (float)sin((double)x) : fk_fast_sinf(x);
}
static inline float fk_cosf_any(float x) {
    return fk_trig_needs_slow_path(x) ? (float)cos((double)x) : fk_fast_cosf(x);
}

/* ---- erf, GELU (erf form) -------------------------------------------------------------------------
 * Both are piecewise polynomials: 16 equal intervals, the one of each element picked by an index, so
 * that on AVX-512 one vpermps looks a coefficient up for 16 lanes (the portable loops gather from the
 * table; the x86-64-v3 clones vectorize with vgatherdps).  One polynomial per element, no division.
 * The coefficients were fitted in F64 to the relative error (the absolute one for erf(a)/a - 1) at
 * Chebyshev nodes, rounded to F32 from the constant term up, each step refitting the rest.
 *
 * erf: a = |x| clamped to 3.99 (past 3.92 erf rounds to +-1), interval k = floor(4a), u = a - k/4 in
 * [0, 1/4], a degree-5 polynomial p(u).  Below 1 (k < 4) p = erf(a)/a - 1 (fit within 4e-9) and
 * erf(x) = x + x p, one rounding, relative down to the subnormals; from 1 on p = erfc(a) (relative fit
 * error 2.1e-8 at 1, growing to 2.6e-5 at 4) and erf(x) = +-(1 - p), where erfc/erf <= 0.19 shrinks
 * p's error five-fold and more (erfc/erf = 1.5e-8 at 4).  Measured over every F32 input: at most 1 ulp.
 *
 * GELU_ERF(x) = x Phi(x), Phi the normal CDF.  z = |x| clamped to 14.5 (inf and NaN too; the result
 * is x or -0 from 14.35 on), where Phi(-z) = exp(-z^2/2) R(z), R(z) = erfcx(z/sqrt 2)/2 smooth from
 * 1/2 at 0 down to 0.03.  R's intervals are those of t = z + 1 in [1, 16) by its exponent and two
 * leading mantissa bits (fk_gelu_erf_interval: widths 1/4 on [0, 1), 1/2 on [1, 3), 1 on [3, 7), 2
 * on [7, 15), narrow where R bends most), u = z less the interval's left end (exact), R by a degree-5
 * polynomial (relative fit error 9.6e-8, R(0) = 1/2 exactly; tools/fit_gelu_erf.py fits both
 * tables).  z^2 must not be rounded on its own (-z^2/2 reaches -105, where rounding it once would
 * cost up to 105 ulp): exp(-z^2/2) = 2^n (1 + e), n = round(-w/2 / ln2) from w = z^2 rounded, and
 * s = z^2 + 2 n ln2 = -2 r for exp's reduced argument r (|r| <= 0.35) as fma(z, z, 2 n ln2_hi) (the
 * exact z^2 plus an exact product, rounded once) + 2 n ln2_lo: two roundings of at most 2^-25
 * each, a quarter ulp of exp; e = expm1(-s/2) = s (-1/2 + s Q(s)), Q of degree 4 (3.9e-9 of
 * exp).  Working with z^2 and s instead of -z^2/2 and r saves the product by -1/2, and e = s t one
 * operation of the last step's two.
 * Phi(-z) 2^64 = fma(R, e, R) 2^(n+64): exp and the product round once together, and the 2^64 keeps
 * Phi(-z) normal.  x <= 0: x Phi(-z), then the 2^-64, so a subnormal result rounds once more (below
 * about -14.35 it is -0, -inf included); x > 0: x - x Phi(-z) as one fma (x itself from 5.5 on, +inf
 * included).  Error: R's fit and evaluation plus the roundings of e, the fma, the product and the
 * scaling; measured over all 2^32 inputs: at most 3.5 ulp (the largest error 3.50 ulp of the exact
 * value at x = -7.5126, in R's widest interval of greatest fit error; the degree-7 polynomial on unit
 * intervals before it reached 2.90 ulp but took two more FMAs and two more lookups a vector: 11% of
 * the AVX-512 form's time on a Zen 4 core). */

/* min(a, c) of a >= 0 (or a NaN, which gives c) and c > 0, compared as bits (ordered like the values
 * there): the float select a < c ? a : c feeding a table index keeps GCC from vectorizing the loop */
FK_VM_INLINE float fk_min_nonneg_f32(float a, float c) {
    uint32_t ab = fk_f32_bits(a), cb = fk_f32_bits(c);
    return fk_bits_f32(ab < cb ? ab : cb);
}
/* max(a, c) of a >= 0 and c > 0, compared as bits: a float select there lets GCC scale both arms
 * of it (a subnormal step, which the select was there to avoid) */
FK_VM_INLINE float fk_max_nonneg_f32(float a, float c) {
    uint32_t ab = fk_f32_bits(a), cb = fk_f32_bits(c);
    return fk_bits_f32(ab > cb ? ab : cb);
}
/* The interval of 0 <= v < 16: floor(v) as a float (v - 1/2 rounded to an integer, so an integer v
 * may take the interval below, at its upper end), and *k the same as an index from the bits of the
 * rounding sum (a float-to-int conversion there keeps GCC from vectorizing; a NaN v gives some k in
 * 0..15).  *k is signed: GCC does not gather with an unsigned index. */
FK_VM_INLINE float fk_interval_f32(float v, int32_t *k) {
    float m = (v - 0.5f) + FK_ROUND_MAGIC;
    *k = (int32_t)(fk_f32_bits(m) & 15u);
    return m - FK_ROUND_MAGIC;
}
#define FK_ERF_DEGREE 5
#define FK_GELU_ERF_DEGREE 5
#define FK_GELU_ERF_CLAMP 14.5f
/* For |x| up to 12.5 Phi(-z) is normal (Phi(-12.9) = 2.2e-38), and so is x Phi(-z): the vector forms
 * skip the portable steps' 2^64 scale on vectors with no |x| past it (see fk_v4_gelu_erff) */
#define FK_GELU_ERF_MODERATE 12.5f
/* fk_erf_tab[j][k]: the coefficient of u^(5-j) on interval k (k < 4: of erf(a)/a - 1, then of erfc) */
static const float fk_erf_tab[6][16] = {
    {-1.907413639e-02f, -4.605611786e-02f, -4.652833939e-02f, -2.549511008e-02f, 6.101588160e-02f, 3.015303053e-02f, 1.940525486e-03f, -1.146455295e-02f, -1.238842029e-02f, -8.238130249e-03f, -4.138342105e-03f, -1.674209721e-03f, -5.612701061e-04f, -1.586098952e-04f, -3.815833043e-05f, -7.871621165e-06f},
    {1.179525629e-01f, 9.147200733e-02f, 3.106409684e-02f, -2.847005613e-02f, -6.649094075e-02f, 1.113766432e-02f, 4.816935211e-02f, 4.933072254e-02f, 3.414558619e-02f, 1.835251600e-02f, 8.051278070e-03f, 2.953700023e-03f, 9.184406954e-04f, 2.442614641e-04f, 5.588675413e-05f, 1.104920921e-05f},
    {-6.244762917e-04f, 1.044430509e-01f, 1.670839190e-01f, 1.698195636e-01f, -1.387361288e-01f, -1.682082862e-01f, -1.392224729e-01f, -9.031353146e-02f, -4.817606136e-02f, -2.162192948e-02f, -8.271187544e-03f, -2.718705451e-03f, -7.719240384e-04f, -1.900609059e-04f, -4.069179704e-05f, -7.591990652e-06f},
    {-3.760933578e-01f, -3.353372514e-01f, -2.299248725e-01f, -1.002462134e-01f, 4.151284099e-01f, 2.956927121e-01f, 1.784240156e-01f, 9.236569703e-02f, 4.133084044e-02f, 1.606357098e-02f, 5.440611392e-03f, 1.609572791e-03f, 4.166472645e-04f, 9.449128993e-05f, 1.879354750e-05f, 3.280689725e-06f},
    {-5.401044518e-07f, -1.811659336e-01f, -3.244341314e-01f, -4.070346057e-01f, -4.151078463e-01f, -2.365220487e-01f, -1.189309284e-01f, -5.277521536e-02f, -2.066691220e-02f, -7.142156363e-03f, -2.178158145e-03f, -5.862105754e-04f, -1.392252016e-04f, -2.917961319e-05f, -5.396766483e-06f, -8.807979839e-07f},
    {1.283791661e-01f, 1.053055599e-01f, 4.099975526e-02f, -5.179249123e-02f, 1.572992057e-01f, 7.709987462e-02f, 3.389485553e-02f, 1.332832966e-02f, 4.677734803e-03f, 1.462715911e-03f, 4.069514689e-04f, 1.006216335e-04f, 2.209037302e-05f, 4.302737125e-06f, 7.430861615e-07f, 1.137242975e-07f}};
/* fk_gelu_erf_tab[j][k]: the coefficient of u^(5-j) of R on interval k; fk_gelu_erf_expm1_q: Q's,
 * highest power first (tools/fit_gelu_erf.py printed both) */
static const float fk_gelu_erf_tab[6][16] = {
    {-2.004215494e-02f, -1.130618528e-02f, -5.636589136e-03f, -4.760429729e-03f, -2.005404560e-03f, -8.440390229e-04f, -3.625230165e-04f, -1.780058083e-04f, -6.852861407e-05f, -2.161626617e-05f, -8.028840057e-06f, -3.232750259e-06f, -1.148492515e-06f, -3.359530467e-07f, -1.191193633e-07f, -4.746430449e-08f},
    {6.079141051e-02f, 3.622286022e-02f, 2.155403607e-02f, 1.454859786e-02f, 8.668429218e-03f, 3.902328899e-03f, 1.867168234e-03f, 9.731687023e-04f, 4.967262503e-04f, 1.760915911e-04f, 7.274043310e-05f, 3.337454837e-05f, 1.576620343e-05f, 5.192772733e-06f, 2.061590976e-06f, 9.307374285e-07f},
    {-1.327724755e-01f, -8.416529745e-02f, -5.465998128e-02f, -3.676990792e-02f, -2.494371869e-02f, -1.244952716e-02f, -6.672624964e-03f, -3.818858648e-03f, -2.281261375e-03f, -9.500191081e-04f, -4.535104090e-04f, -2.396227501e-04f, -1.358675800e-04f, -5.368595521e-05f, -2.504617987e-05f, -1.313055418e-05f},
    {2.499887794e-01f, 1.700778902e-01f, 1.187515408e-01f, 8.496472985e-02f, 6.209177896e-02f, 3.518238291e-02f, 2.130816318e-02f, 1.364657842e-02f, 9.149622172e-03f, 4.603702575e-03f, 2.594478661e-03f, 1.589976484e-03f, 1.038047718e-03f, 5.098915426e-04f, 2.856748470e-04f, 1.753793913e-04f},
    {-3.989420831e-01f, -2.954340279e-01f, -2.241318375e-01f, -1.737685055e-01f, -1.373634338e-01f, -9.027118981e-02f, -6.273799390e-02f, -4.561385885e-02f, -3.439986333e-02f, -2.129949071e-02f, -1.434566826e-02f, -1.026632451e-02f, -7.687724661e-03f, -4.753156565e-03f, -3.218489699e-03f, -2.319885651e-03f},
    {5.000000000e-01f, 4.140321016e-01f, 3.496188223e-01f, 3.002324700e-01f, 2.615782917e-01f, 2.057806700e-01f, 1.681019962e-01f, 1.413313299e-01f, 1.215139404e-01f, 9.441063553e-02f, 7.691930234e-02f, 6.477931142e-02f, 5.589347705e-02f, 4.379878938e-02f, 3.597488999e-02f, 3.050941415e-02f}};
static const float fk_gelu_erf_expm1_q[5] = {2.148683416e-05f, -2.615516714e-04f, 2.604349982e-03f, -2.083314024e-02f, 1.249999702e-01f};

/* GELU_ERF's interval of 0 <= z <= FK_GELU_ERF_CLAMP: *k from the bits of t = z + 1 (its exponent and
 * two leading mantissa bits; a NaN z is clamped before), and the interval's left end, exact (t's
 * bits past those cleared, less 1).  Where t rounds up across an interval's end, u = z - left is a
 * hair below 0 (still exact), on the polynomial of the interval above. */
FK_VM_INLINE float fk_gelu_erf_interval(float z, int32_t *k) {
    uint32_t b = fk_f32_bits(z + 1.0f);
    *k = (int32_t)((b - 0x3F800000u) >> 21);
    return fk_bits_f32(b & 0xFFE00000u) - 1.0f;
}

FK_VM_INLINE float fk_fast_erff(float x) {
    float a = fabsf(x);
    float ac = fk_min_nonneg_f32(a, 3.99f);                    /* NaN too (kept below) */
    int32_t k;
    float n = fk_interval_f32(4.0f * ac, &k);
    float u = fmaf(n, -0.25f, ac);                              /* exact */
    float p = fk_erf_tab[0][k];
#pragma GCC unroll 8
    for (int j = 1; j <= FK_ERF_DEGREE; j++) p = fmaf(p, u, fk_erf_tab[j][k]);
    float y = n < 4.0f ? fmaf(x, p, x) : copysignf(1.0f - p, x);
    return fk_keep_nan(x, y);
}

/* The parts of Phi(-z) = R(z) exp(-z^2/2) for 0 <= z <= FK_GELU_ERF_CLAMP: R(z) returned, exp(-z^2/2) =
 * 2^n (1 + e) with *e = expm1(-s/2), s = z^2 + 2 n ln2 = -2 r for exp's reduced argument r, z^2
 * exact inside the first fma (n 2 ln2_hi is exact: 8 bits times 9).  R (1 + e) is then one fma, so
 * neither exp nor the product rounds on its own (GELU_ERF and its derivative share them). */
FK_VM_INLINE float fk_gelu_erf_parts(float zc, float *e, int32_t *n) {
    int32_t k;
    float u = zc - fk_gelu_erf_interval(zc, &k);               /* exact */
    float r = fk_gelu_erf_tab[0][k];
#pragma GCC unroll 8
    for (int j = 1; j <= FK_GELU_ERF_DEGREE; j++) r = fmaf(r, u, fk_gelu_erf_tab[j][k]);
    float w = zc * zc;
    float m = fmaf(w, -0.5f * 1.44269504088896341f, FK_ROUND_MAGIC);   /* n = m - 1.5 * 2^23 */
    float nf = m - FK_ROUND_MAGIC;
    float s = fmaf(nf, -2.0f * 2.12194440e-4f, fmaf(zc, zc, nf * (2.0f * 0.693359375f)));
    float t = fk_gelu_erf_expm1_q[0];
#pragma GCC unroll 8
    for (int j = 1; j < 5; j++) t = fmaf(t, s, fk_gelu_erf_expm1_q[j]);
    *e = s * fmaf(s, t, -0.5f);
    *n = (int32_t)(fk_f32_bits(m) - 0x4B400000u);
    return r;
}
FK_VM_INLINE float fk_fast_gelu_erff(float x) {
    float z = fabsf(x);
    float zc = fk_min_nonneg_f32(z, FK_GELU_ERF_CLAMP);        /* NaN too (kept below) */
    float xc = copysignf(zc, x);
    float e;
    int32_t ni;
    float r = fk_gelu_erf_parts(zc, &e, &ni);
    float q = fmaf(r, e, r) * fk_pow2i_f32(ni + 64);   /* Phi(-z) 2^64 */
    /* x > 0: x - x Phi(-z), Phi(-z) held at 2^-126 or above so that it is never subnormal (an Intel
     * core's microcode assist; from z = 6 on the result rounds to x either way) */
    float y = x > 0.0f ? fmaf(-xc, fk_max_nonneg_f32(q, 0x1p-62f) * FK_TWO_POW_M64, x) : (xc * q) * FK_TWO_POW_M64;
    return fk_keep_nan(x, y);
}

/* GELU's inner argument w = 2 sqrt(2/pi) (x + 0.044715 x^3) = x (C1 + C3 x^2) of a clamped x as two
 * floats, wh + *wl (the forward and its derivative share it: rounding w once would cost up to |w|
 * ulp in the tails).  p = C1 + C3 x^2 in Horner form: x^2 = x2h + x2l exactly, ph = fma(C3h, x2h,
 * C1h), and ph's rounding error e exactly up to e's own rounding, because C1h (C1 rounded to a
 * multiple of 2^-20) less any ph in [C1h, 16) is a float: e = fma(C3h, x2h, C1h - ph).  The low
 * terms C1l + C3l x2h + C3h x2l are summed beside ph (off the critical path), w = x ph + x (e + low)
 * with x ph's error from one fma.  |*wl| is at most 3.2 ulp(wh) (measured over every |x| <= 12),
 * within what fk_expf_dd_scaled takes.
 * Against w in long double over every |x| <= 12: at most 2^-38.7 absolute (the five-product form
 * before it: 2^-38.2), in 11 operations where that took 25: GELU's AVX-512 loop in L2 on a Zen 4
 * core 51 -> 42 us per 64K (keeping wh + wl normalized cost 3 more operations on the critical path
 * and gave back all but 5%). */
#define FK_GELU_C1H 0x1.98845p+0f                 /* C1 = 2 sqrt(2/pi) rounded to a multiple of 2^-20 */
#define FK_GELU_C1L 1.930778950e-07f              /* C1 - C1H */
#define FK_GELU_C3H 7.135481387e-02f              /* C3 = 0.044715 C1 */
#define FK_GELU_C3L 2.398832466e-09f              /* C3 - C3H */
FK_VM_INLINE float fk_gelu_inner_f32(float xc, float *wl) {
    float x2h = xc * xc, x2l = fmaf(xc, xc, -x2h);
    float ph = fmaf(FK_GELU_C3H, x2h, FK_GELU_C1H);
    float low = fmaf(FK_GELU_C3H, x2l, fmaf(FK_GELU_C3L, x2h, FK_GELU_C1L));
    float e = fmaf(FK_GELU_C3H, x2h, FK_GELU_C1H - ph);
    float wh = xc * ph;
    *wl = fmaf(xc, e + low, fmaf(xc, ph, -wh));
    return wh;
}

/* ---- GELU (tanh form) -----------------------------------------------------------------------------
 * GELU = 0.5 x (1 + tanh(c (x + k x^3))) = x sigmoid(w), w = C1 x + C3 x^3 (C1 = 2 sqrt(2/pi),
 * C3 = C1 k, k = 0.044715).  For x < 0 the result is about x exp(w) with |w| up to 104, so w is
 * carried as a two-float sum (error-free products and sum, constants in two parts): the result
 * keeps its relative accuracy, where rounding w once would cost up to |w| ulp. */
FK_VM_INLINE float fk_fast_geluf(float x) {
    float xc = fk_clamp_f32(x, -12.0f, 12.0f);        /* |w| > 104 past 12: sigmoid is 0 or 1 */
    float wl, wh = fk_gelu_inner_f32(xc, &wl);
    /* sigmoid(w) from t = exp(-|w|), with the low part: exp(-|wh| -+ wl) */
    float u = fk_expf_dd_scaled(-fabsf(wh), x < 0.0f ? wl : -wl, 64);   /* t * 2^64 */
    float d = fmaf(u, FK_TWO_POW_M64, 1.0f);     /* one fma: t = u 2^-64 is subnormal past |w| = 87 */
    /* one division for both sides, the numerator chosen first by a bit blend (GCC split a ?: back
     * into two divisions per vector): 11% faster in L2 on AVX-512 at sigma = 4 inputs, the same bits */
    uint32_t pos = 0u - (uint32_t)(x >= 0.0f);
    /* x < 0 takes xc: below -12 (-inf included) the product then underflows to -0 as it should */
    float q = fk_bits_f32((fk_f32_bits(x) & pos) | (fk_f32_bits(xc * u) & ~pos)) / d;
    float y = x >= 0.0f ? q : q * FK_TWO_POW_M64;
    return fk_keep_nan(x, y);
}

/* ---- rsqrt ----------------------------------------------------------------------------------------
 * 1/sqrt(x) as two correctly rounded operations: relative error below 2^-23 (so under 1.5 ulp of
 * the correctly rounded result; at most 1 ulp measured). */
FK_VM_INLINE float fk_rsqrtf(float x) { return 1.0f / sqrtf(x); }

/* ---- integer pow's general path (POWI) -----------------------------------------------------------
 * x ** n for an int32 n outside the small exponents below: |x|^n = 2^(n log2|x|) computed in F64
 * (n is exact there, not in F32) and rounded to F32 once: log2|x| to a relative 2^-38, the product
 * in F64, exp2 to a relative 2^-37, so the F32 result is within 0.51 ulp (|n log2|x|| <= 150 where
 * the result is neither 0 nor inf).  Both halves are table-driven with 16 entries.
 * log2: a = 2^k z with z in [0.699, 1.398) (a's F64 bits less those of 0.69921875: the top 4
 * mantissa bits pick the interval j, the exponent bits k); r = z invc_j - 1 (one fma, |r| < 0.0297;
 * invc_j = 1/c_j of the interval's centre, exactly 1 on the interval holding 1, so that r is exact
 * and log2 relative there); log2 a = (k + logc_j) + r P(r), logc_j = -log2(invc_j) rounded to F64
 * and P a degree-5 fit of log2(1 + r)/r (relative 2^-38.2).
 * exp2: t = n/16 + r, n = round(16 t) by the 1.5 2^52 shift, |r| <= 1/32; 2^t = 2^(n >> 4)
 * T_(n & 15) (1 + r Q(r)), T_j = 2^(j/16) rounded to F64 and Q a degree-3 fit of (2^r - 1)/r
 * (relative 2^-37.5), the power of two added into the exponent bits (t is clamped to [-160, 130],
 * where every such product is a normal F64).  The constants were fitted in F64 to the relative
 * error at Chebyshev nodes by reweighted least squares and checked against long double. */
#define FK_POW_OFF 0x3FE6600000000000ull                        /* 0.69921875 as F64 bits */
#define FK_POW_SHIFT 6755399441055744.0                         /* 1.5 2^52 */
static const double fk_pow_invc[16] = {
    1.3989071038251366, 1.3403141361256545, 1.2864321608040201, 1.2367149758454106, 1.1906976744186046,
    1.147982062780269, 1.1082251082251082, 1.0711297071129706, 1.0364372469635628, 1.0, 0.9481481481481482,
    0.8951048951048951, 0.847682119205298, 0.8050314465408805, 0.7664670658682635, 0.7314285714285714};
static const double fk_pow_logc[16] = {
    -0.4843001617159575, -0.4225711719642514, -0.3633753794563512, -0.3065130425006747, -0.2518071504105397,
    -0.19910010007969525, -0.14825095858394247, -0.09913319201925132, -0.05163276841532236, 0.0,
    0.07681559705083084, 0.1598713367783894, 0.2384047393250789, 0.3128829552843553, 0.38370429247405213,
    0.4512111118323288};
static const double fk_pow_exp2_tab[16] = {
    1.0, 1.0442737824274138, 1.0905077326652577, 1.1387886347566916, 1.189207115002721, 1.241857812073484,
    1.2968395546510096, 1.3542555469368927, 1.4142135623730951, 1.4768261459394993, 1.5422108254079407,
    1.6104903319492543, 1.681792830507429, 1.7562521603732995, 1.8340080864093424, 1.9152065613971474};
/* P(r) and Q(r), highest power first */
static const double fk_pow_log_p[6] = {-0.24074554950705984, 0.28881117537628387, -0.36067361749415083,
                                       0.480898257140213, -0.7213475204623939, 1.4426950408933428};
static const double fk_pow_exp_q[4] = {0.009618152233823896, 0.055505411028645306, 0.2402265070340895,
                                       0.6931471804009405};

/* log2 a of a positive finite a that is a widened F32 (so normal in F64) */
FK_VM_INLINE double fk_pow_log2(double a) {
    uint64_t ix = fk_f64_bits(a), tmp = ix - FK_POW_OFF;
    int64_t j = (int64_t)((tmp >> 48) & 15u);
    double k = (double)(int32_t)((int64_t)tmp >> 52);
    double z = fk_bits_f64(ix - (tmp & 0xFFF0000000000000ull));
    double r = fma(z, fk_pow_invc[j], -1.0);
    double p = fk_pow_log_p[0];
#pragma GCC unroll 8
    for (int i = 1; i < 6; i++) p = fma(p, r, fk_pow_log_p[i]);
    return fma(r, p, k + fk_pow_logc[j]);
}
/* 2^t for -160 <= t <= 130 */
FK_VM_INLINE double fk_pow_exp2(double t) {
    double kd = fma(t, 16.0, FK_POW_SHIFT);                     /* round(16 t) in the low bits */
    double n = kd - FK_POW_SHIFT;
    double r = fma(n, -0.0625, t);
    double q = fk_pow_exp_q[0];
#pragma GCC unroll 4
    for (int i = 1; i < 4; i++) q = fma(q, r, fk_pow_exp_q[i]);
    double tj = fk_pow_exp2_tab[(int64_t)(fk_f64_bits(kd) & 15u)];
    double s = fma(tj, q * r, tj);
    int64_t e = (int64_t)(int32_t)n >> 4;                       /* floor(n / 16) */
    return fk_bits_f64(fk_f64_bits(s) + ((uint64_t)e << 52));
}

/* pow(x, n) for an exponent n given exactly as an F64 and odd_bit 0x80000000 for an odd n, else 0;
 * C99's special cases (opening comment).  Flags are compares and selects so the loops vectorize. */
FK_VM_INLINE float fk_pow_core(float x, double y, uint32_t odd_bit) {
    float ax = fabsf(x);
    double l = fk_pow_log2((double)ax);
    l = ax == 0.0f ? -INFINITY : l;
    l = ax == INFINITY ? INFINITY : l;
    double t = y * l;                                           /* NaN for 0 * inf and NaN operands */
    double tc = t > -160.0 ? t : -160.0;
    tc = tc < 130.0 ? tc : 130.0;
    float r = (float)fk_pow_exp2(tc);                           /* the one rounding to F32 */
    r = t != t ? NAN : r;
    r = fk_bits_f32(fk_f32_bits(r) ^ (fk_f32_bits(x) & odd_bit));  /* -0 and -inf included */
    r = x != x || y != y ? NAN : r;
    r = y == 0.0 || x == 1.0f || (x == -1.0f && fabs(y) == INFINITY) ? 1.0f : r;
    return r;
}

/* x ** n for an int32 n (POWI): n is exact in F64 */
FK_VM_INLINE float fk_fast_powif(float x, int32_t n) { return fk_pow_core(x, (double)n, (uint32_t)n << 31); }

/* ---- pow ------------------------------------------------------------------------------------------
 * |x|^y = 2^(y log2|x|) in F32 arithmetic, log2|x| and the product kept as two floats (hi + lo),
 * rounded to F32 once at the end.  Both halves look up 32-entry tables, which AVX-512 holds in
 * registers (vpermt2ps, fk_v4_powf); the portable form here runs the same F32 operations in the
 * same order, so every build returns the same bits.
 * log2: a = 2^k z with z in [0.742, 1.484) (a's bits less those of 0.7421875; subnormal a scaled
 * by 2^23 first): the exponent bits give k, the top 5 mantissa bits the cell j, and the cells sit so
 * that 1 is inside cell 16 (z in [1 - 2^-7, 1 + 2^-6)).  r = z invc_j - 1 is one fma and exact:
 * invc_j is a multiple of 2^-m (m <= 7) chosen per cell so that z invc_j - 1 fits 24 bits for every
 * z of the cell (checked on all of them when the table was made), and |r| <= 0.0198; invc_16 = 1.
 * Then log2 a = k + logc_j + log2(1 + r), logc_j = -log2(invc_j) split as logc_hi (a multiple of
 * 2^-16, so k + logc_hi is exact for |k| < 256) + logc_lo, and
 *     log2(1 + r) = IL (r - r^2/2) + r G(r),   IL = 1/ln2 rounded to F32,
 * where w = r - r^2/2 is carried as two floats (wh = fma(-r/2, r, r), wl its error by a second
 * fma) and IL wh as an exact product (ph + pl): the r^2 term is then exact to 2^-48 relative, which
 * a plain F32 polynomial could not give near 1 (there the whole log2 is that term's size over r).
 * G is a degree-4 fit of (log2(1 + r) - IL (r - r^2/2)) / r (error 2^-34.2, so r G is off by 2^-34.2
 * |r|: relative 2^-34.7 to log2 a in cell 16, at most 2^-40 absolute beside it, where |log2 a| >= 0.0113).
 * These steps run on u = -r/2 = fma(z, -invc_j/2, 1/2) (exact, as r is) instead of r: wh and wl
 * are fma(u, u, u) and its error (-1/2 of the r form's), IL is -2 IL, and G's coefficients are
 * scaled by -32, 16, -8, 4, -2 so each Horner step in u is the r form's step times a power of two:
 * every rounding is the same (the same bits as in r) without the multiply by -1/2.
 * hi = (k + logc_hi) + ph (rounded; |k + logc_hi| >= |ph| unless it is 0, so the error e of that
 * sum is exact as (k + logc_hi - hi) + ph) and lo = pl + IL wl + r G + e + logc_lo, summed small
 * terms first: |lo| <= 2^-15.5, its roundings below 2^-41.5, and hi + lo is log2 a to a relative
 * 2^-34.5 everywhere (the nearest cells to cell 16 are the tightest).
 * product: t = y log2 a as th = y hi (rounded) and tl = fma(y, lo, fma(y, hi, -th)) (the inner fma
 * is th's exact error; |lo| <= 2^-12 |hi|, the worst beside cell 16, where logc_lo is large against
 * hi, so y lo rounds by at most 2^-36 |t|).  Where the result is finite and nonzero |t| < 150, so t
 * is off by under 2^-26.5 in all, nearly all of it log2's relative error times |t|.
 * exp2: n = round(32 (th + tl)) by the 1.5 2^18 shift, whose ulp is 1/32: adding and removing it
 * rounds th + tl to n/32 (n in the low bits: the tables' index), a float the scaling takes as is
 * (tl reaches 0.04 there, so th alone would leave r past the polynomial's range),
 * r = (th - n/32) + tl (th - n/32 exact, |r| <= 1/64 + 2^-17);
 * 2^t = 2^(n >> 5) T_(n & 31) (1 + p(r)), p(r) = r (c1 + r (c2 + r c3)) a fit of 2^r - 1 (error
 * 2^-32.4), T_j = 2^(j/32) as two floats: v = Thi + fma(Thi, p, Tlo) (the dropped Tlo p is below
 * 2^-31 relative; fma's rounding 2^-29.5), rounded once, then scaled by 2^(n >> 5), exactly where
 * the result is normal (two power-of-two factors here, one vscalefps on AVX-512, the same single
 * rounding).  th and tl are clamped to [-160, 130] and [-1, 1] first (inf, 0 and NaN there give the
 * same inf or 0; the specials below set the rest).
 * Error: the relative error before the last rounding is under 2^-26.5 (t's error times ln2, plus
 * 2^-29 from exp2 and its table), so a normal result is within 0.5 + 0.18 = 0.68 ulp.  A
 * subnormal result rounds twice (v to 24 bits, then to the subnormal's precision): within 0.75 ulp
 * plus the same error, a smaller fraction of its larger ulp: 0.84 ulp.  Measured against F64 pow
 * over 64M inputs (random bit patterns, bases near 1 and in every cell with exponents up to the
 * overflow and underflow bounds, results near FLT_MAX and 2^-149, subnormal bases, integer exponents,
 * negative bases): at most 0.549 ulp for normal results and 0.765 ulp for subnormal ones, and the
 * same bits from this form (baseline and x86-64-v3 builds) and fk_v4_powf.  The constants were
 * fitted with mpmath (Chebyshev fits, checked after rounding to F32). */
#define FK_POWF_OFF 0x3F3E0000u                                 /* 0.7421875 as F32 bits */
#define FK_POWF_IL2 -2.8853900432586669921875f                  /* -2 IL, IL = 1/ln2 rounded to F32 */
#define FK_POWF_SHIFT 393216.0f                                 /* 1.5 2^18: rounds to multiples of 1/32 */
#define FK_POWF_SHIFT_BITS 0x48C00000u
static const float fk_powf_hinvc[32] = {                      /* -invc_j / 2 */
    -0.6640625f, -0.65625f, -0.640625f, -0.625f, -0.6171875f, -0.6015625f, -0.59375f, -0.578125f,
    -0.5703125f, -0.5625f, -0.5546875f, -0.5390625f, -0.53125f, -0.5234375f, -0.515625f,
    -0.5078125f, -0.5f, -0.484375f, -0.46875f, -0.45703125f, -0.4453125f, -0.4296875f, -0.421875f,
    -0.41015625f, -0.3984375f, -0.390625f, -0.3828125f, -0.37109375f, -0.36328125f, -0.35546875f,
    -0.34765625f, -0.33984375f};
static const float fk_powf_logc_hi[32] = {
    -0.409393310546875f, -0.3923187255859375f, -0.3575592041015625f, -0.321929931640625f,
    -0.3037872314453125f, -0.26678466796875f, -0.2479248046875f, -0.2094573974609375f,
    -0.1898193359375f, -0.169921875f, -0.149749755859375f, -0.1085205078125f, -0.08746337890625f,
    -0.0660858154296875f, -0.0443878173828125f, -0.022369384765625f, 0.0f, 0.045806884765625f,
    0.093109130859375f, 0.129638671875f, 0.1671142578125f, 0.2186431884765625f, 0.2451171875f,
    0.2857513427734375f, 0.32757568359375f, 0.35614013671875f, 0.385284423828125f,
    0.430145263671875f, 0.460845947265625f, 0.4922027587890625f, 0.524261474609375f,
    0.5570526123046875f};
static const float fk_powf_logc_lo[32] = {
    2.374409177718917e-06f, 1.3028071634835214e-06f, 7.199483661679551e-06f,
    1.8367533130003721e-06f, 6.483268407464493e-06f, -1.8727261021922459e-06f,
    -2.7087560283689527e-06f, 4.0318318497156724e-06f, -5.22294249094557e-06f,
    -3.1264423796528718e-06f, 2.636354793139617e-06f, -3.9489655137003865e-06f,
    5.376559215619636e-07f, -3.3750279726518784e-06f, -6.301975645328639e-06f,
    1.571737129779649e-06f, 0.0f, -3.195152430635062e-06f, 2.7353209475222684e-07f,
    -3.391458449186757e-06f, -4.271977104508551e-06f, -2.902001142501831e-06f,
    -4.68966345579247e-06f, 3.1395604764838936e-06f, -1.0255652114210534e-06f,
    3.6735066260007443e-06f, 5.732056706619915e-06f, -8.720028290554183e-07f,
    -4.75837350677466e-06f, 2.601012283776072e-06f, 5.094424068374792e-06f, 3.891846517944941e-06f};
static const float fk_powf_exp2_hi[32] = {
    1.0f, 1.0218971967697144f, 1.0442737340927124f, 1.0671404600143433f, 1.0905077457427979f,
    1.114386796951294f, 1.1387885808944702f, 1.1637248992919922f, 1.1892070770263672f,
    1.215247392654419f, 1.2418577671051025f, 1.2690509557724f, 1.2968395948410034f,
    1.3252366781234741f, 1.3542555570602417f, 1.3839099407196045f, 1.4142135381698608f,
    1.4451807737350464f, 1.4768261909484863f, 1.5091644525527954f, 1.5422108173370361f,
    1.5759809017181396f, 1.610490322113037f, 1.6457555294036865f, 1.6817928552627563f,
    1.7186193466186523f, 1.7562521696090698f, 1.7947090864181519f, 1.8340080976486206f,
    1.8741676807403564f, 1.9152065515518188f, 1.9571441411972046f};
static const float fk_powf_exp2_lo[32] = {
    0.0f, -4.811559861650494e-08f, 4.8334701574503924e-08f, -5.9337519786595294e-08f,
    -1.3077539939843064e-08f, -5.435540018083884e-08f, 5.386222312608879e-08f,
    -4.051441493402308e-08f, 3.797635272917432e-08f, -3.267394887984665e-08f,
    4.496838101886169e-08f, 1.419333317542737e-09f, -4.018999533172973e-08f,
    -3.496373324196611e-08f, -1.0123349269974824e-08f, -5.875577357983275e-08f,
    2.4203234971764687e-08f, 3.324199937537742e-08f, -4.500898853621038e-08f,
    -2.4959373234878512e-08f, 8.070904833346049e-09f, -5.661025426206834e-08f,
    9.836217174097328e-09f, -5.124972091152813e-08f, -2.4755326677450284e-08f,
    -4.8496175963919086e-08f, -9.235770370707996e-09f, -1.141504490931311e-08f,
    -1.1239277952768134e-08f, -4.663005626071026e-08f, 9.845328108326612e-09f,
    -1.7021804410433106e-08f};
/* G in u = -r/2: the fitted G's coefficients (0.2886400520801544, -0.3607916235923767,
 * 0.48089835047721863, 1.9231567449651266e-09, 1.925963033500011e-08, highest power first) times
 * -32, 16, -8, 4, -2, so each Horner step in u is the step in r times a power of two (the same
 * rounding) and the last is -2 G(r); then p(r) / r, highest power first */
static const float fk_powf_g[5] = {-9.236481666564941f, -5.772665977478027f, -3.847186803817749f,
                                   7.692626979860506e-09f, -3.851926067000022e-08f};
static const float fk_powf_q[3] = {0.05550435185432434f, 0.24022826552391052f, 0.6931471824645996f};

/* log2 a of a positive finite a as hi (returned) + *lo; any other a gives a finite garbage pair */
FK_VM_INLINE float fk_powf_log2(float a, float *lo) {
    int sub = a < 1.17549435e-38f;
    float as = sub ? a * 8388608.0f : a;
    uint32_t ix = fk_f32_bits(as), tmp = ix - FK_POWF_OFF;
    uint32_t j = (tmp >> 18) & 31u;
    float k = (float)((int32_t)tmp >> 23) - (sub ? 23.0f : 0.0f);
    float z = fk_bits_f32(ix - (tmp & 0xFF800000u));
    float u = fmaf(z, fk_powf_hinvc[j], 0.5f);                  /* -r/2, exact */
    float wh = fmaf(u, u, u);                                   /* -(r - r^2/2)/2 */
    float wl = fmaf(u, u, u - wh);                              /* and its error (u - wh is exact) */
    float ph = wh * FK_POWF_IL2;                                /* IL (r - r^2/2), high part */
    float pl = fmaf(wh, FK_POWF_IL2, -ph);
    float a0 = k + fk_powf_logc_hi[j];                          /* exact */
    float hi = a0 + ph;
    float e = (a0 - hi) + ph;
    float t = fmaf(wl, FK_POWF_IL2, pl);
    t = fmaf(u, fk_horner_f32(u, fk_powf_g, 5), t);             /* + r G(r) */
    t = t + e;
    *lo = t + fk_powf_logc_lo[j];
    return hi;
}
/* 2^(th + tl) for the pair above (|tl| < 1; inf from th = 130 on, 0 from -160 down) */
FK_VM_INLINE float fk_powf_exp2(float th, float tl) {
    /* both clamps take a NaN to the low bound, as vmaxps / vminps do */
    float tc = th > -160.0f ? th : -160.0f;
    tc = tc < 130.0f ? tc : 130.0f;
    float lc = tl > -1.0f ? tl : -1.0f;
    lc = lc < 1.0f ? lc : 1.0f;
    float kd = (tc + lc) + FK_POWF_SHIFT;                       /* n = round(32 t) in the low bits */
    float n32 = kd - FK_POWF_SHIFT;                             /* n/32 */
    float r = (tc - n32) + lc;
    float p = r * fk_horner_f32(r, fk_powf_q, 3);
    uint32_t kb = fk_f32_bits(kd), j = kb & 31u;
    float th0 = fk_powf_exp2_hi[j];
    float v = th0 + fmaf(th0, p, fk_powf_exp2_lo[j]);
    int32_t ni = (int32_t)(kb - FK_POWF_SHIFT_BITS) >> 5, n1 = ni >> 1, n2 = ni - n1;   /* floor(n / 32) */
    return v * fk_pow2i_f32(n1) * fk_pow2i_f32(n2);
}

/* np.power on F32 (and the F16/BF16 kernels through it): C99's special cases (opening comment) as
 * compares and selects, so the loops vectorize */
FK_VM_INLINE float fk_fast_powf(float x, float y) {
    float ax = fabsf(x), ay = fabsf(y);
    float lo, hi = fk_powf_log2(ax, &lo);
    float th = y * hi;
    float r = fk_powf_exp2(th, fmaf(y, lo, fmaf(y, hi, -th)));
    /* a zero or infinite base or an infinite exponent: +inf or +0 by the sign of y log2|x| (|x| = 1
     * gives 1 below) */
    float big = (y > 0.0f) == (ax > 1.0f) ? INFINITY : 0.0f;
    r = ax == 0.0f || ax == INFINITY || ay == INFINITY ? big : r;
    /* floats from 2^23 on are integers; below, ay is one if rounding leaves it unchanged: adding
     * 2^23 rounds every ay < 2^23 to an integer (FK_ROUND_MAGIC, 1.5 2^23, would round ay >= 2^22
     * to an even one, making the odd integers there look fractional) */
    float ry = (ay + 8388608.0f) - 8388608.0f;
    int32_t yi = (int32_t)(ay < 16777216.0f ? ay : 0.0f);       /* parity matters below 2^24 */
    uint32_t odd_bit = ay >= 8388608.0f || ry == ay ? (uint32_t)yi << 31 : 0u;
    r = fk_bits_f32(fk_f32_bits(r) ^ (fk_f32_bits(x) & odd_bit));  /* -0 and -inf included */
    r = x != x || y != y ? NAN : r;
    r = y == 0.0f || x == 1.0f || (x == -1.0f && ay == INFINITY) ? 1.0f : r;
    /* a negative finite base with a finite non-integer exponent (inf counts as an integer) */
    return x < 0.0f && x > -INFINITY && ay < 8388608.0f && ry != ay && y == y ? NAN : r;
}

/* x ** n for 3 <= n <= FK_POWI_SMALL_MAX by binary powering with the running power in two floats,
 * straight on x (fk_powi_small runs it on x's mantissa).  For x = 0 or 2^-9 <= |x| <= 2^9 every product and error
 * term stays normal (|x^n| <= 2^72, error terms >= 2^-122), so the error-free steps are exact.  The
 * last step (a product, or a squaring when n is a power of two) is one fma of the high parts plus
 * the low terms, so the result rounds once: <= 0.5 ulp plus the low terms' own rounding.  Terms of
 * a low part still exactly zero are left out (bl before the first squaring, rl before the first
 * product): a signed zero added to a nonzero or +0 sum changes no bit.  A zero x gives the zero
 * of its power's sign (fk_powi_zero: the steps' signed zeros would lose it for some n, as -0 ** 7). */
#define FK_POWI_DIRECT_MIN 0x3B000000u                          /* 2^-9 as bits */
#define FK_POWI_DIRECT_MAX 0x44000000u                          /* 2^9 */
/* The steps of fk_powi_direct_nonzero for a vector type T too (the AVX-512 and AVX2 forms), its
 * operations given as macros: one text for every form, which must give the same bits */
#define FK_POWI_DIRECT_STEPS(T, x, n, ZERO, TWO, MUL, ADD, FMA, FMS)                                \
    do {                                                                                           \
        T bh = (x), bl = (ZERO), rh = (x), rl = (ZERO);                                            \
        int started = 0, bl_zero = 1, rl_zero = 1;                                                 \
        _Pragma("GCC unroll 4")                                                                    \
        for (int bit = 0; bit < 4; bit++) {                                                        \
            int rest = (n) >> (bit + 1);                   /* the bits above this one */           \
            if (((n) >> bit) & 1) {                                                                \
                if (!started) {                                                                    \
                    rh = bh;                                                                       \
                    rl = bl;                                                                       \
                    rl_zero = bl_zero;                                                             \
                    started = 1;                                                                   \
                } else {                                                                           \
                    T low = MUL(rh, bl);                                                           \
                    if (!rl_zero) low = ADD(low, MUL(rl, bh));                                     \
                    if (rest == 0) return FMA(rh, bh, low);         /* the last product */         \
                    T ph = MUL(rh, bh);                                                            \
                    rl = ADD(FMS(rh, bh, ph), low);                                                \
                    rl_zero = 0;                                                                   \
                    rh = ph;                                                                       \
                }                                                                                  \
            }                                                                                      \
            if (rest) {                                                                            \
                T bb = MUL(MUL(TWO, bh), bl);                                                      \
                if (rest == 1 && !started) /* n = 2^(bit + 1): the last squaring */                \
                    return bl_zero ? MUL(bh, bh) : FMA(bh, bh, bb);                                \
                T sh = MUL(bh, bh);                                                                \
                bl = bl_zero ? FMS(bh, bh, sh) : ADD(FMS(bh, bh, sh), bb);                         \
                bl_zero = 0;                                                                       \
                bh = sh;                                                                           \
            }                                                                                      \
        }                                                                                          \
        return ADD(rh, rl);                        /* not reached for n in [3, 15] */              \
    } while (0)
#define FK_S_MUL(a, b) ((a) * (b))
#define FK_S_ADD(a, b) ((a) + (b))
#define FK_S_FMS(a, b, c) fmaf(a, b, -(c))
FK_VM_INLINE float fk_powi_direct_nonzero(float x, int n) {
    FK_POWI_DIRECT_STEPS(float, x, n, 0.0f, 2.0f, FK_S_MUL, FK_S_ADD, fmaf, FK_S_FMS);
}
/* +-0 ** n: x itself for an odd n, else +0 */
FK_VM_INLINE float fk_powi_zero(float x, int n) { return (n & 1) ? x : 0.0f; }
FK_VM_INLINE float fk_powi_direct(float x, int n) {
    return x == 0.0f ? fk_powi_zero(x, n) : fk_powi_direct_nonzero(x, n);
}
/* x ** n for a small positive n (a constant once inlined: the kernel picks one loop per n) where the
 * pow core would take a log and an exp.  x = m 2^e with 1 <= |m| < 2; m^n by binary powering with
 * the running power in two floats (each product error-free by fma: no low part can underflow, as
 * |m^n| < 256), rounded once, then scaled by 2^(e n) as two exact power-of-two factors (a subnormal
 * result rounds once more: <= 0.75 ulp).  Zero and inf come out right from the same steps (m = +-1,
 * 2^(e n) clamped to 0 or inf, signed by m^n); NaN passes through. */
#define FK_POWI_SMALL_MAX 8
FK_VM_INLINE float fk_powi_small(float x, int n) {
    int sub = fabsf(x) < 1.17549435e-38f;
    uint32_t bits = fk_f32_bits(sub ? x * 8388608.0f : x);
    int32_t e = (int32_t)((bits >> 23) & 0xffu) - (sub ? 150 : 127);
    float m = fk_bits_f32((bits & 0x807fffffu) | 0x3f800000u);
    int32_t en = e * n;
    en = en > -252 ? en : -252;                                  /* past either end: 0 or inf */
    en = en < 254 ? en : 254;
    int32_t n1 = en >> 1, n2 = en - n1;
    float y = fk_powi_direct(m, n) * fk_pow2i_f32(n1) * fk_pow2i_f32(n2);   /* m^n, rounded once */
    return fk_keep_nan(x, y);
}

/* 1 when fk_powi_direct serves x (0, or 2^-9 <= |x| <= 2^9; NaN and inf do not) */
FK_VM_INLINE int fk_powi_direct_ok(float x) {
    uint32_t a = fk_f32_bits(x) & 0x7fffffffu;
    return (a - FK_POWI_DIRECT_MIN <= FK_POWI_DIRECT_MAX - FK_POWI_DIRECT_MIN) | (a == 0u);
}
/* y[i] = x[i] ** n for 3 <= n <= FK_POWI_SMALL_MAX (a constant once inlined), by chunks of 256: a
 * chunk whose every element fk_powi_direct serves takes it, any other fk_powi_small (2-3x the
 * work).  Each chunk is read whole before it is written, so x == y is safe. */
FK_VM_INLINE void fk_powi_small_row(const float *x, float *y, int64_t n, int k) {
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        int ok = 1;
        for (int64_t i = 0; i < m; i++) ok &= fk_powi_direct_ok(x[i0 + i]);
        if (ok) {
            for (int64_t i = 0; i < m; i++) y[i0 + i] = fk_powi_direct(x[i0 + i], k);
        } else {
            for (int64_t i = 0; i < m; i++) y[i0 + i] = fk_powi_small(x[i0 + i], k);
        }
    }
}

/* POWI's F32 body: n = 1, 2, -1 are the correctly rounded x, x*x, 1/x; 3 <= n <= FK_POWI_SMALL_MAX
 * the two-float product; other n the pow core (which gives 1 for n = 0) */
FK_VM_INLINE float fk_powif(float x, int32_t n) {
    float y = n >= 3 && n <= FK_POWI_SMALL_MAX ? fk_powi_small(x, n) : fk_fast_powif(x, n);
    y = n == 1 ? x : y;
    y = n == 2 ? x * x : y;
    return n == -1 ? 1.0f / x : y;
}

/* ---- derivatives (the activation backward ops: dx = dy f'(x)) -------------------------------------
 * Each returns f'(x) as a sum of terms whose magnitudes the claims are relative to (M(x), the sum of
 * |term|: no cancellation beyond the terms' own rounding).  t = exp(-|x|) (or of the inner argument)
 * keeps every factor below overflow; a subnormal t loses relative accuracy, but the term it feeds
 * is then below 1e-42 in absolute value (the claims' absolute part).  NaN x gives NaN. */

/* sigmoid'(x) = sigmoid(x) (1 - sigmoid(x)) = t / (1 + t)^2, t = exp(-|x|): even in x, one term */
FK_VM_INLINE float fk_sigmoid_grad_f32(float x) {
    float t = fk_fast_expf(-fabsf(x));
    float d = 1.0f + t;
    return t / (d * d);
}

/* tanh'(x) = 1 - tanh(x)^2 = 4t / (1 + t)^2, t = exp(-2|x|) (no cancellation where tanh -> +-1).
 * t is carried as t 2^64 (1 + t as one fma) and the quotient scaled back once: where 4t is normal
 * and t is not (43.6 < |x| < 44.4) no step is subnormal (an Intel core's microcode assist), and a
 * subnormal result rounds once. */
FK_VM_INLINE float fk_tanh_grad_f32(float x) {
    float t = fk_expf_scaled(-2.0f * fabsf(x), 64);
    float d = fmaf(t, FK_TWO_POW_M64, 1.0f);
    return ((4.0f * t) / (d * d)) * FK_TWO_POW_M64;
}

/* SiLU'(x) = sigmoid(x) + x sigmoid'(x) = (n d + x t) / d^2 with t = exp(-|x|), d = 1 + t and
 * n = 1 (x >= 0) or t: one division.  Below x = -120, t is 0 in F32, so x is clamped there (the
 * limits 1 at +inf and 0 at -inf come out of the same formula).  Above, x is clamped at 80: the
 * derivative is 1 from x = 20 on, and t = exp(-80) is normal where exp(-87.4) would not be (a
 * subnormal step costs an Intel core a microcode assist).  t and n are carried times 2^64 (1 + t
 * as one fma) and the result scaled back once: no step is subnormal where the result is normal
 * (down to x = -91.5), and a subnormal result rounds once.  Over all 2^32 inputs the error is at
 * most 4.37 2^-24 of M(x) = s + |x| s (1 - s) (two divisions, s and s' apart: 4.43). */
FK_VM_INLINE float fk_silu_grad_f32(float x) {
    float xc = fk_clamp_f32(x, -120.0f, 80.0f);
    float t = fk_expf_scaled(-fabsf(xc), 64);                             /* exp(-|x|) 2^64 */
    float d = fmaf(t, FK_TWO_POW_M64, 1.0f);                              /* 1 + exp(-|x|) */
    float nd = (xc >= 0.0f ? 0x1p64f : t) * d;                            /* n d 2^64 */
    return fk_keep_nan(x, (fmaf(xc, t, nd) / (d * d)) * FK_TWO_POW_M64);
}

/* GELU'(x) (tanh form) = sigmoid(w) + x sigmoid'(w) w' = (n d + x w' t) / d^2 (t = exp(-|w|),
 * d = 1 + t, n = 1 or t: one division, as SiLU's), w = C1 x + C3 x^3 carried in two floats as in
 * fk_fast_geluf (so sigmoid(w), sigmoid'(w) keep their relative accuracy in the tail), w' = C1
 * + 3 C3 x^2.  From x = 5 on the derivative rounds to 1, and x is clamped at 9.5, where t =
 * exp(-|w|) is still normal (past 10.4 it would be subnormal: an Intel core's microcode assist);
 * below x = -12 it is below 1e-42 and is 0. */
FK_VM_INLINE float fk_gelu_grad_f32(float x) {
    float xc = fk_clamp_f32(x, -12.0f, 9.5f);
    float wl, wh = fk_gelu_inner_f32(xc, &wl);
    float x2h = xc * xc;                                                  /* as in the inner argument */
    float t = fk_expf_dd_scaled(-fabsf(wh), xc < 0.0f ? wl : -wl, 0);     /* exp(-|w|) */
    float d = 1.0f + t;
    float nd = (xc >= 0.0f ? 1.0f : t) * d;                               /* n d */
    float wp = fmaf(2.140644488e-01f, x2h, 1.595769167e+00f);             /* C1 + 3 C3 x^2 */
    float y = fmaf(xc * wp, t, nd) / (d * d);
    y = x < -12.0f ? 0.0f : y;
    return fk_keep_nan(x, y);
}

/* GELU_ERF'(x) = Phi(x) + x phi(x) from GELU_ERF's own parts (fk_gelu_erf_parts, z = |x| held at
 * FK_GELU_ERF_CLAMP): Phi(-z) = R (1 + e) 2^n and phi(z) = (1 + e) 2^n / sqrt(2 pi), each one fma
 * and an exact power of two, so the derivative costs GELU_ERF's steps and three more (it took the
 * forward, a division by x and a second exp before, 1.09x PyTorch's time on a Zen 4 core).  Both
 * are carried times 2^64 (normal for every z up to the clamp) and the result scaled back once: no
 * step is subnormal where the result is normal, and a subnormal result rounds once.  x > 0 gives
 * (1 - Phi(-z)) + x phi(z), x <= 0 Phi(-z) + x phi(z).  Below x = -FK_GELU_ERF_CLAMP the result is
 * -0 (its exact value is negative and under 1.3e-45 there, which rounds to 0 or the first
 * subnormal); from x = 5.9 on it rounds to 1. */
#define FK_INV_SQRT_2PI 3.989422804e-01f
FK_VM_INLINE float fk_gelu_erf_grad_f32(float x) {
    float zc = fk_min_nonneg_f32(fabsf(x), FK_GELU_ERF_CLAMP);           /* NaN too (kept below) */
    float e;
    int32_t n;
    float r = fk_gelu_erf_parts(zc, &e, &n);
    float scale = fk_pow2i_f32(n + 64);
    float cdf = fmaf(r, e, r) * scale;                                  /* Phi(-z) 2^64 */
    float pdf = fmaf(FK_INV_SQRT_2PI, e, FK_INV_SQRT_2PI) * scale;      /* phi(z) 2^64 */
    float y = fmaf(copysignf(zc, x), pdf, x > 0.0f ? 0x1p64f - cdf : cdf) * FK_TWO_POW_M64;
    y = x < -FK_GELU_ERF_CLAMP ? -0.0f : y;
    return fk_keep_nan(x, y);
}

/* ---- exp, log, sigmoid, SiLU, erf and GELU (both forms) on 16 AVX-512 lanes --------------------
 * GCC does not vectorize ldexpf, so the portable exp builds 2^n from integer bit operations and
 * applies it as two exact power-of-two factors (9 of its ~27 vector operations).  AVX-512's vscalefps
 * does it in one: y 2^n rounded once, overflowing to inf and underflowing gradually, which is the one
 * rounding the two factors give.  log splits its argument with vgetexpps / vgetmantps where the
 * portable code uses bit arithmetic; erf and GELU_ERF look their coefficients up with vpermps where
 * the portable loops gather.  These are the 16-lane forms of fk_expf_scaled, fk_fast_logf,
 * fk_fast_sigmoidf, fk_fast_siluf, fk_fast_erff, fk_fast_geluf and fk_fast_gelu_erff, step for step
 * (GELU and GELU_ERF scale their small exp factor differently, see there), and return the same bits
 * for every F32 input (compared on all 2^32); the contiguous EXP, LOG, SIGMOID, SILU, ERF, GELU and
 * GELU_ERF loops and the softmax rows run them on x86-64-v4 CPUs (FK_ISA_PICK) and the portable
 * functions elsewhere.  fk_v4_map_f32 / fk_v4_map_bf16 apply one to
 * a row, the tail through masked loads and stores (the lanes past the end compute on zeros and are
 * not stored). */
#if FK_HAVE_ISA_V4
#include <immintrin.h>
#define FK_V4_INLINE static inline __attribute__((always_inline, target("arch=x86-64-v4")))

/* -|x| as x with its sign bit set (the same bits as negating |x|, NaN included) */
FK_V4_INLINE __m512 fk_v4_neg_abs(__m512 x) { return _mm512_or_ps(x, _mm512_set1_ps(-0.0f)); }
/* every lane of m set, as one kortestw (a kmovw to a general register and a compare took two
 * operations, the kmovw on port 0 beside the vector work) */
FK_V4_INLINE int fk_v4_all(__mmask16 m) { return _kortestc_mask16_u8(m, m); }
FK_V4_INLINE __m512 fk_v4_keep_nan(__m512 x, __m512 y) {
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* fk_expm1_reduced */
FK_V4_INLINE __m512 fk_v4_expm1_reduced(__m512 r) {
    __m512 p = _mm512_set1_ps(fk_expf_p[0]);
    for (int j = 1; j < 6; j++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(fk_expf_p[j]));
    return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
}

/* q 2^n as vscalefps rounds it, where the lanes of `tiny` may give a subnormal or zero.  An Intel
 * core takes a microcode assist (over a hundred cycles) for every vector operation with a subnormal
 * or underflowing result, and a GELU of sigma = 4 inputs has such a lane in one vector in ten (the
 * 16-core Xeon: 190 us per 64K in L2, 68 with the tails clipped).  So those lanes are formed from
 * bits: q 2^(n + 149) is exact and normal (or the result is 0 either way), and rounded to an integer,
 * nearest even, it is the count of 2^-149 steps, i.e. the subnormal's bits (2^23 reads as 2^-126,
 * which is right).  Lanes past 2^-126 keep vscalefps.  A vector with no tiny lane pays one kortestw. */
FK_V4_INLINE __m512 fk_v4_scalef_tiny(__m512 q, __m512 n, __mmask16 tiny) {
    if (_kortestz_mask16_u8(tiny, tiny)) return _mm512_scalef_ps(q, n);
    __m512 sc = _mm512_maskz_scalef_ps(tiny, _mm512_abs_ps(q), _mm512_add_ps(n, _mm512_set1_ps(149.0f)));
    __mmask16 sub = _mm512_mask_cmp_ps_mask(tiny, sc, _mm512_set1_ps(0x1p23f), _CMP_LT_OQ);
    __m512i m = _mm512_cvt_roundps_epi32(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i bits = _mm512_ternarylogic_epi32(m, _mm512_castps_si512(q), _mm512_set1_epi32((int)0x80000000u), 0xF8);
    __m512 y = _mm512_scalef_ps(q, _mm512_maskz_mov_ps((__mmask16)~sub, n));      /* sub lanes: q */
    return _mm512_mask_mov_ps(y, sub, _mm512_castsi512_ps(bits));               /* m | (q & sign) */
}

/* fk_clamp_f32: vmaxps / vminps return their second operand when either is NaN, so a NaN x passes
 * through both as the portable selects pass it (2 instructions where compares and blends took 4:
 * EXP 7-12% faster in L2) */
FK_V4_INLINE __m512 fk_v4_clamp(__m512 x, float lo, float hi) {
    return _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), x));
}

/* exp(x) = y 2^n without the clamp: y returned, n in *n (x must keep n in range: see the callers) */
FK_V4_INLINE __m512 fk_v4_expf_parts_unclamped(__m512 x, __m512 *n) {
    __m512 k = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(FK_ROUND_MAGIC));
    *n = _mm512_sub_ps(k, _mm512_set1_ps(FK_ROUND_MAGIC));
    __m512 r = _mm512_fmadd_ps(*n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(*n, _mm512_set1_ps(2.12194440e-4f), r);
    return _mm512_add_ps(fk_v4_expm1_reduced(r), _mm512_set1_ps(1.0f));
}
/* exp(x) = 2^n y of x clamped to [-126, 89]: y (1 <= y < 2 but for rounding) and *n, unscaled */
FK_V4_INLINE __m512 fk_v4_expf_parts(__m512 x, __m512 *n) {
    return fk_v4_expf_parts_unclamped(fk_v4_clamp(x, -126.0f, 89.0f), n);
}
/* fk_expf_scaled: the same clamp, reduction and polynomial; 2^(n + scale) by vscalefps */
FK_V4_INLINE __m512 fk_v4_expf_scaled(__m512 x, float scale) {
    __m512 n, y = fk_v4_expf_parts(x, &n);
    y = _mm512_scalef_ps(y, scale == 0.0f ? n : _mm512_add_ps(n, _mm512_set1_ps(scale)));
    return fk_v4_keep_nan(x, y);
}
/* fk_fast_expf in 2 operations fewer than fk_v4_expf_scaled: one vrangeps caps |x| at 200 with x's
 * sign where the clamp to [-126, 89] took a vmaxps and a vminps, and one vfixupimmps returns a NaN x
 * (quieted) where the NaN fix-up took a compare and a blend (vrangeps passes the number over a quiet
 * NaN, so the NaN is put back at the end).  Past the clamp's ends exp is 0 or inf either way, and
 * |n| <= 289 keeps the reduction exact, so every number gives the portable bits; a signalling NaN
 * comes back quieted (the portable function returns it as it came). */
FK_V4_INLINE __m512 fk_v4_expf(__m512 x) {
    __m512 n, y = fk_v4_expf_parts_unclamped(_mm512_range_ps(x, _mm512_set1_ps(200.0f), 0x02), &n);
    /* fix-up table: x's tokens QNaN (0) and SNaN (1) give QNaN(x) (response 2), the rest y */
    return _mm512_fixupimm_ps(_mm512_scalef_ps(y, n), x, _mm512_set1_epi32(0x22), 0);
}
/* fk_fast_expf of x in [-87, 88] (no NaN): fk_v4_expf's steps without its clamp and NaN fix-up */
FK_V4_INLINE __m512 fk_v4_expf_normal(__m512 x) {
    __m512 n, y = fk_v4_expf_parts_unclamped(x, &n);
    return _mm512_scalef_ps(y, n);
}

/* fk_fast_sigmoidf: (x >= 0 ? 1 : t) / (1 + t), t = exp(-|x|); where every |x| <= 87 (no NaN, no
 * infinity) exp(-|x|) takes no clamp and no NaN fix-up (fk_v4_siluf) */
FK_V4_INLINE __m512 fk_v4_sigmoidf(__m512 x) {
    __m512 nx = fk_v4_neg_abs(x);
    __m512 t = fk_v4_all(_mm512_cmp_ps_mask(nx, _mm512_set1_ps(-87.0f), _CMP_GE_OQ)) ? fk_v4_expf_normal(nx)
                                                                                     : fk_v4_expf(nx);
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), t);
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_div_ps(_mm512_mask_mov_ps(t, pos, _mm512_set1_ps(1.0f)), d);
}

/* fk_fast_siluf: x / d (x >= 0) or (x u / d) 2^-64 (x < 0), u = exp(-|x|) 2^64, d = 1 + u 2^-64,
 * -0 below -120; one division serves both sides (the numerator is chosen first).
 * A vector with no lane below FK_SILU_UNSCALED_MIN takes the same steps without the 2^64 scale,
 * which then changes no rounding: exp(-|x|) of a negative x is normal, so are x u and the quotient
 * but for tiny |x|, where u is exactly 1 and both forms round x / 2 once; for a large positive x the
 * unscaled u is subnormal or zero but d rounds to 1 either way.  The scale costs 5 instructions
 * beside the division, which bounds this function. */
#define FK_SILU_UNSCALED_MIN -87.0f
FK_V4_INLINE __m512 fk_v4_siluf(__m512 x) {
    __m512 nx = fk_v4_neg_abs(x);
    if (fk_v4_all(_mm512_cmp_ps_mask(nx, _mm512_set1_ps(FK_SILU_UNSCALED_MIN), _CMP_GE_OQ))) {
        /* every |x| <= 87 (no NaN, no infinity; the test was x >= -87, which let NaN and huge
         * positive lanes in): exp(-|x|) needs no clamp and the result no NaN fix-up, 5 operations
         * fewer (L2 on a Zen 4 core: 24.9 -> 20.2 us per 64K) */
        __m512 t = fk_v4_expf_normal(nx);
        __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), t);
        __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
        return _mm512_div_ps(_mm512_mask_mov_ps(_mm512_mul_ps(x, t), pos, x), d);
    }
    __m512 u = fk_v4_expf_scaled(nx, 64.0f);
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(u, _mm512_set1_ps(FK_TWO_POW_M64)));
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    __m512 q = _mm512_div_ps(_mm512_mask_mov_ps(_mm512_mul_ps(x, u), pos, x), d);
    __m512 y = _mm512_mask_mov_ps(_mm512_mul_ps(q, _mm512_set1_ps(FK_TWO_POW_M64)), pos, q);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-120.0f), _CMP_LT_OQ), _mm512_set1_ps(-0.0f));
    return fk_v4_keep_nan(x, y);
}

/* fk_fast_logf with x = 2^e m from vgetexpps / vgetmantps (which handle subnormals themselves):
 * m1 in [1, 2) and e1 exactly, then m = m1 / 2, e = e1 + 1 where m1 >= 2 c (c = 0x3f3504f3, about
 * sqrt(1/2)): the same m in [c, 2c) and e as the portable bit arithmetic, so the same result */
FK_V4_INLINE __m512 fk_v4_logf(__m512 x) {
    __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
    __m512 e = _mm512_getexp_ps(x);
    __mmask16 high = _mm512_cmp_ps_mask(m, _mm512_castsi512_ps(_mm512_set1_epi32(0x3fb504f3)), _CMP_GE_OQ);
    m = _mm512_mask_mul_ps(m, high, m, _mm512_set1_ps(0.5f));
    e = _mm512_mask_add_ps(e, high, e, _mm512_set1_ps(1.0f));
    __m512 f = _mm512_sub_ps(m, _mm512_set1_ps(1.0f));
    __m512 z = _mm512_mul_ps(f, f);
    __m512 p = _mm512_set1_ps(fk_logf_p[0]);
    for (int j = 1; j < 9; j++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(fk_logf_p[j]));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, f), z);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
    y = _mm512_fmadd_ps(_mm512_set1_ps(-0.5f), z, y);
    __m512 r = _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(f, y));
    /* NaN, +-0, +-inf and negative inputs, in one test (a branch per vector, almost never taken:
     * the fix-ups cost a quarter of the function when every vector pays for them) */
    if (_mm512_fpclass_ps_mask(x, 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80)) {
        r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ), x);
        r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), _mm512_set1_ps(-INFINITY));
        r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_set1_ps(NAN));
        r = fk_v4_keep_nan(x, r);
    }
    return r;
}

/* 16 coefficients, one per interval, picked by each lane's interval index (its low 4 bits) */
FK_V4_INLINE __m512 fk_v4_lookup(const float *row, __m512i k) {
    return _mm512_permutexvar_ps(k, _mm512_loadu_ps(row));
}
/* GELU_ERF's 16 coefficients, looked up by kt = bits(z + 1) >> 21 (fk_v4_gelu_erf_interval), which
 * is the interval k plus 0x3F800000 >> 21 = 508: vpermps reads kt's low 4 bits, (k + 12) mod 16, so
 * the row is rotated by 12 lanes first (the rotation does not depend on the data: it stays out of
 * the loop) */
FK_V4_INLINE __m512 fk_v4_gelu_erf_lookup(const float *row, __m512i kt) {
    const __m512i rotate = _mm512_setr_epi32(4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3);
    return _mm512_permutexvar_ps(kt, _mm512_permutexvar_ps(rotate, _mm512_loadu_ps(row)));
}
/* the left ends of fk_gelu_erf_interval's intervals: the values its bit operations give */
static const float fk_gelu_erf_left[16] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.5f, 2.0f, 2.5f,
                                           3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 9.0f, 11.0f, 13.0f};
/* fk_gelu_erf_interval: *kt for fk_v4_gelu_erf_lookup and the left end from a table, 3 operations
 * where the bit arithmetic took 5 (the index's subtraction, the mask and the 1 taken off the end) */
FK_V4_INLINE __m512 fk_v4_gelu_erf_interval(__m512 z, __m512i *kt) {
    *kt = _mm512_srli_epi32(_mm512_castps_si512(_mm512_add_ps(z, _mm512_set1_ps(1.0f))), 21);
    return fk_v4_gelu_erf_lookup(fk_gelu_erf_left, *kt);
}
/* fk_interval_f32; the index is the rounding sum's bits, of which vpermps reads the low 4 */
FK_V4_INLINE __m512 fk_v4_interval(__m512 v, __m512i *k) {
    __m512 m = _mm512_add_ps(_mm512_sub_ps(v, _mm512_set1_ps(0.5f)), _mm512_set1_ps(FK_ROUND_MAGIC));
    *k = _mm512_castps_si512(m);
    return _mm512_sub_ps(m, _mm512_set1_ps(FK_ROUND_MAGIC));
}
FK_V4_INLINE __m512 fk_v4_copysign(__m512 mag, __m512 sgn) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(sgn),
                                                         _mm512_set1_epi32(0x7fffffff), 0xe4));
}

/* fk_fast_tanhf, step for step: the same bits, one AVX-512 operation per portable step */
FK_V4_INLINE __m512 fk_v4_tanhf(__m512 x) {
    __m512 a = _mm512_min_ps(_mm512_andnot_ps(_mm512_set1_ps(-0.0f), x), _mm512_set1_ps(9.1f));   /* NaN: 9.1 */
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(-2.0f), a);
    __m512 k = _mm512_fmadd_ps(v, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(FK_ROUND_MAGIC));
    __m512 n = _mm512_sub_ps(k, _mm512_set1_ps(FK_ROUND_MAGIC));
    __m512 e = fk_v4_expm1_reduced(_mm512_fmadd_ps(n, _mm512_set1_ps(-0.693147182464599609375f), v));
    __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_add_epi32(_mm512_castps_si512(k), _mm512_set1_epi32((int)(127u - 0x4B400000u))), 23));
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 y = _mm512_div_ps(_mm512_fnmadd_ps(s, e, _mm512_sub_ps(one, s)), _mm512_fmadd_ps(s, e, _mm512_add_ps(one, s)));
    return fk_v4_keep_nan(x, fk_v4_copysign(y, x));
}

/* fk_fast_erff: the same clamp, interval, polynomial and select */
FK_V4_INLINE __m512 fk_v4_erff(__m512 x) {
    __m512 a = _mm512_abs_ps(x);
    __m512 ac = _mm512_mask_mov_ps(_mm512_set1_ps(3.99f), _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.99f), _CMP_LT_OQ), a);
    __m512i k;
    __m512 n = fk_v4_interval(_mm512_mul_ps(_mm512_set1_ps(4.0f), ac), &k);
    __m512 u = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.25f), ac);
    __m512 p = fk_v4_lookup(fk_erf_tab[0], k);
    for (int j = 1; j <= FK_ERF_DEGREE; j++) p = _mm512_fmadd_ps(p, u, fk_v4_lookup(fk_erf_tab[j], k));
    __m512 big = fk_v4_copysign(_mm512_sub_ps(_mm512_set1_ps(1.0f), p), x);
    __mmask16 small = _mm512_cmp_ps_mask(n, _mm512_set1_ps(4.0f), _CMP_LT_OQ);
    __m512 y = _mm512_mask_mov_ps(big, small, _mm512_fmadd_ps(x, p, x));
    return fk_v4_keep_nan(x, y);
}

/* fk_fast_gelu_erff: the same clamp, interval, polynomial and exp steps, and the same bits (compared
 * on all 2^32 inputs) in fewer instructions.  Where the portable code scales Phi(-z) by 2^(n + 64)
 * exactly and takes the 2^-64 back after the product with x, here the product is formed unscaled
 * (Phi(-z) 2^-n is normal) and one vscalefps by 2^n rounds where the portable 2^-64 does: powers
 * of two commute with rounding but in the subnormals, where each rounds once.  The clamp is one
 * vminps (a NaN |x| gives 14.5), x <= 0 clamps x itself at -14.5, the two sides are a masked mul
 * and a masked fnmadd, and one vfixupimmps gives NaN (x itself), -inf (-0) and +inf (+inf).  In L2
 * on a Zen 4 core 43.5 -> 33.6 us per 64K (about 40 instructions a vector where there were 50).
 * A vector whose every |x| <= FK_GELU_ERF_MODERATE (nearly all of them) takes a shorter path: no
 * clamp and no fix-up (it holds no NaN or infinity), and as Phi(-z) = q 2^n and x Phi(-z) are normal
 * there, scaling q first changes no rounding, so both sides are y = max(0, x) - |x| Phi(-z), one
 * vscalefps and one fnmadd where the masked forms take three operations on the FMA pipes (max(0, x)
 * keeps -0 and +0 as they are).  With wl added to exp's argument (fk_fast_gelu_erff): 35.8 -> 31.2
 * us per 64K (Zen 4, L2); on Intel cores, where every 512-bit operation takes port 0 or 5, each one
 * saved counts.  Stop 55's degree-5 R on t's intervals and the exp in z^2 and s: 30.8 -> 27.4 us
 * (about 37 operations a vector; the index's four integer and float operations replace vcvttps2dq
 * and vreduceps, and cost 1.9 us of what dropping two lookups and two FMAs saved).  Stop 59: the
 * index used as it comes and the left end looked up (fk_v4_gelu_erf_interval), z^2's low part
 * formed inside exp's reduction, one kortestw (fk_v4_all): 33 operations on ports 0 and 5 a vector by llvm-mca's
 * Ice Lake model (37 before), 28.0-28.6 -> 27.0-27.2 us per 64K on the Zen 4 (FMA-bound there). */
/* fk_gelu_erf_parts: R returned, *e and *n (as a float) */
FK_V4_INLINE __m512 fk_v4_gelu_erf_parts(__m512 zc, __m512 *e, __m512 *n) {
    __m512i k;
    __m512 u = _mm512_sub_ps(zc, fk_v4_gelu_erf_interval(zc, &k));                   /* exact */
    __m512 r = fk_v4_gelu_erf_lookup(fk_gelu_erf_tab[0], k);
    for (int j = 1; j <= FK_GELU_ERF_DEGREE; j++) r = _mm512_fmadd_ps(r, u, fk_v4_gelu_erf_lookup(fk_gelu_erf_tab[j], k));
    __m512 w = _mm512_mul_ps(zc, zc);
    __m512 m = _mm512_fmadd_ps(w, _mm512_set1_ps(-0.5f * 1.44269504088896341f), _mm512_set1_ps(FK_ROUND_MAGIC));
    *n = _mm512_sub_ps(m, _mm512_set1_ps(FK_ROUND_MAGIC));
    __m512 s = _mm512_fmadd_ps(zc, zc, _mm512_mul_ps(*n, _mm512_set1_ps(2.0f * 0.693359375f)));
    s = _mm512_fmadd_ps(*n, _mm512_set1_ps(-2.0f * 2.12194440e-4f), s);
    __m512 t = _mm512_set1_ps(fk_gelu_erf_expm1_q[0]);
    for (int j = 1; j < 5; j++) t = _mm512_fmadd_ps(t, s, _mm512_set1_ps(fk_gelu_erf_expm1_q[j]));
    *e = _mm512_mul_ps(s, _mm512_fmadd_ps(s, t, _mm512_set1_ps(-0.5f)));
    return r;
}
/* Phi(-z) 2^-n of 0 <= z <= FK_GELU_ERF_CLAMP (fk_fast_gelu_erff's R, exp and product), and n */
FK_V4_INLINE __m512 fk_v4_gelu_erf_phi(__m512 zc, __m512 *n) {
    __m512 e, r = fk_v4_gelu_erf_parts(zc, &e, n);
    return _mm512_fmadd_ps(r, e, r);
}
FK_V4_INLINE __m512 fk_v4_gelu_erff(__m512 x) {
    __m512 z = _mm512_abs_ps(x), n;
    if (fk_v4_all(_mm512_cmp_ps_mask(z, _mm512_set1_ps(FK_GELU_ERF_MODERATE), _CMP_LE_OQ))) {
        /* every |x| <= FK_GELU_ERF_MODERATE (no NaN, no infinity: nothing to clamp or fix up) */
        __m512 q = fk_v4_gelu_erf_phi(z, &n);
        return _mm512_fnmadd_ps(z, _mm512_scalef_ps(q, n), _mm512_max_ps(_mm512_setzero_ps(), x));
    }
    __m512 q = fk_v4_gelu_erf_phi(_mm512_min_ps(z, _mm512_set1_ps(FK_GELU_ERF_CLAMP)), &n);
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(-FK_GELU_ERF_CLAMP));
    /* x <= 0: x Phi(-z), subnormal or zero below about -13.2 (fk_v4_scalef_tiny); x > 0: Phi(-z),
     * its scale held at 2^-120 or above so that it is never subnormal (x - x Phi(-z) rounds to x
     * from z = 6 on) */
    __m512 t = fk_v4_scalef_tiny(_mm512_mask_mul_ps(q, (__mmask16)~pos, xc, q),
                                 _mm512_mask_max_ps(n, pos, n, _mm512_set1_ps(-120.0f)),
                                 _mm512_cmp_ps_mask(x, _mm512_set1_ps(-FK_GELU_ERF_MODERATE), _CMP_LT_OQ));
    __m512 y = _mm512_mask_fnmadd_ps(t, pos, x, x);                                  /* x > 0: x - x Phi(-z) */
    /* vfixupimmps by x's class: QNaN and SNaN take x (token 1), -inf -0 (7), +inf +inf (5) */
    return _mm512_fixupimm_ps(y, x, _mm512_set1_epi32(0x1 | 0x1 << 4 | 0x7 << 16 | 0x5 << 20), 0);
}

/* fk_gelu_inner_f32 on 16 lanes: the same operations */
FK_V4_INLINE __m512 fk_v4_gelu_inner(__m512 xc, __m512 *wl) {
    const __m512 c3h = _mm512_set1_ps(FK_GELU_C3H), c1h = _mm512_set1_ps(FK_GELU_C1H);
    __m512 x2h = _mm512_mul_ps(xc, xc), x2l = _mm512_fmsub_ps(xc, xc, x2h);
    __m512 ph = _mm512_fmadd_ps(c3h, x2h, c1h);
    __m512 low = _mm512_fmadd_ps(c3h, x2l, _mm512_fmadd_ps(_mm512_set1_ps(FK_GELU_C3L), x2h, _mm512_set1_ps(FK_GELU_C1L)));
    __m512 e = _mm512_fmadd_ps(c3h, x2h, _mm512_sub_ps(c1h, ph));
    __m512 wh = _mm512_mul_ps(xc, ph);
    *wl = _mm512_fmadd_ps(xc, _mm512_add_ps(e, low), _mm512_fmsub_ps(xc, ph, wh));
    return wh;
}
/* fk_fast_geluf: the same clamp, two-float argument, exp steps and division, and the same bits
 * (compared on all 2^32 inputs).  Where the portable code carries t = exp(-|w|) as t 2^64 and takes
 * 2^-64 back twice, here t 2^-n (n the exp reduction's power) is carried and vscalefps applies 2^n
 * where the portable 2^-64 products round (in the subnormals only).  GCC's own v4 loop of the
 * portable function took 85.5 us per 64K in L2 on a Zen 4 core, this 50.7 (42 with the Horner
 * inner argument).  The exp's argument is -|wh| held at -110 (the portable clamp is -126, past
 * |x| = 11.4; either way the result is x or -0 there, and the subnormal or zero results of x < 0 get
 * the portable 2^-64's rounding from fk_v4_scalef_tiny); the low part's sign is a bit operation; a
 * NaN x comes back by vfixupimmps: 42 -> 37 us.  Stop 60 took out every subnormal step where the
 * result is normal (Intel's microcode assists), for 2-4% on the Zen 4. */
FK_V4_INLINE __m512 fk_v4_geluf(__m512 x) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 xc = fk_v4_clamp(x, -12.0f, 12.0f);
    __m512 wl, wh = fk_v4_gelu_inner(xc, &wl);
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    /* exp(-|wh| + l), l = -wl where x's sign bit is clear (wh has x's sign), else wl: wl ^ (~x & sign) */
    /* -min(|wh|, 110) in one vrangeps (absolute minimum, sign bit set; a NaN passes): past 110 the
     * result is x or -0 either way (|x| > 11.3, x exp(-110) < 2^-150), and n >= -159 keeps t 2^64
     * normal */
    __m512 a = _mm512_range_ps(wh, _mm512_set1_ps(110.0f), 0xE);
    __m512 l = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(wl), _mm512_castps_si512(x), sign, 0xD2));
    __m512 n, y = fk_v4_expf_parts_unclamped(a, &n);
    __m512 u = _mm512_fmadd_ps(y, l, y);                                         /* t 2^-n */
    /* 1 + t as 1 + (t 2^64) 2^-64 in one fma, as the portable code forms it: t itself may be
     * subnormal, and a subnormal result costs Intel cores a microcode assist */
    __m512 d = _mm512_fmadd_ps(_mm512_scalef_ps(u, _mm512_add_ps(n, _mm512_set1_ps(64.0f))),
                               _mm512_set1_ps(FK_TWO_POW_M64), _mm512_set1_ps(1.0f));
    __m512 q = _mm512_div_ps(_mm512_mask_mov_ps(_mm512_mul_ps(xc, u), pos, x), d);
    /* x >= 0: q (scaled by 2^0); x < 0: q 2^n, subnormal or zero below about -10.1 */
    __m512 res = fk_v4_scalef_tiny(q, _mm512_maskz_mov_ps((__mmask16)~pos, n),
                                   _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LT_OQ));
    /* vfixupimmps by x's class: QNaN and SNaN take x (token 1) */
    return _mm512_fixupimm_ps(res, x, _mm512_set1_epi32(0x1 | 0x1 << 4), 0);
}

/* fk_powi_direct for a constant n in [3, FK_POWI_SMALL_MAX] on lanes it serves, none zero: the same
 * steps (the low parts' zero terms left out, the last step one fma) */
FK_V4_INLINE __m512 fk_v4_powi_direct(__m512 x, int n) {
    FK_POWI_DIRECT_STEPS(__m512, x, n, _mm512_setzero_ps(), _mm512_set1_ps(2.0f), _mm512_mul_ps, _mm512_add_ps,
                         _mm512_fmadd_ps, _mm512_fmsub_ps);
}
/* fk_powi_small_row per vector instead of per chunk: a vector whose every lane is 0 or in
 * [2^-9, 2^9] takes fk_v4_powi_direct on x (zeros as fk_powi_zero), any other fk_powi_small's
 * steps: the mantissa m (vgetmantps, to [1, 2) with x's sign; a zero or inf lane +-1, as the portable bit arithmetic gives), the exponent
 * e (vgetexpps, subnormals included; -inf for a zero and +inf for inf, clamped like any e n), and
 * m^n 2^(e n) by vscalefps, which rounds once where the portable two power-of-two factors do (the
 * first is exact: 1 <= |m^n| < 256 and 2^(e n / 2) keeps the product normal or makes it overflow
 * where the whole does).  Each lane gets the portable row's bits (fk_powi_direct and fk_powi_small
 * agree where the first serves: the second runs the same steps on the mantissa, scaled exactly), one
 * pass and no lane-by-lane code (POWI(3) in L2: 2.5x PyTorch's x*x*x before; a vector with a lane
 * out of range, as a zero from a ReLU, went lane by lane, 10x the cost). */
FK_V4_INLINE __mmask16 fk_v4_powi_direct_ok(__m512 v) {
    __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
    return _mm512_cmple_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32((int)FK_POWI_DIRECT_MIN)),
                                   _mm512_set1_epi32((int)(FK_POWI_DIRECT_MAX - FK_POWI_DIRECT_MIN)));
}
FK_V4_INLINE __m512 fk_v4_powi_small(__m512 v, int k) {
    __mmask16 ok = fk_v4_powi_direct_ok(v);
    if (ok == 0xFFFF) return fk_v4_powi_direct(v, k);
    __mmask16 zero = _mm512_fpclass_ps_mask(v, 0x02 | 0x04);
    if ((__mmask16)(ok | zero) == 0xFFFF)
        return _mm512_mask_mov_ps(fk_v4_powi_direct(v, k), zero, (k & 1) ? v : _mm512_setzero_ps());
    __mmask16 zero_or_inf = zero | _mm512_fpclass_ps_mask(v, 0x08 | 0x10);
    __m512 m = _mm512_getmant_ps(v, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
    m = _mm512_mask_mov_ps(m, zero_or_inf, fk_v4_copysign(_mm512_set1_ps(1.0f), v));
    __m512 en = _mm512_mul_ps(_mm512_getexp_ps(v), _mm512_set1_ps((float)k));
    en = _mm512_min_ps(_mm512_set1_ps(254.0f), _mm512_max_ps(_mm512_set1_ps(-252.0f), en));
    return fk_v4_keep_nan(v, _mm512_scalef_ps(fk_v4_powi_direct(m, k), en));
}
FK_V4_INLINE void fk_v4_powi_small_row(const float *x, float *y, int64_t n, int k) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, fk_v4_powi_small(_mm512_loadu_ps(x + i), k));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, fk_v4_powi_small(_mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, x + i), k));
    }
}

/* fk_powf_log2, the product and fk_powf_exp2 on 16 lanes: the same operations in the same order,
 * the tables held in registers and looked up with vpermt2ps (the index's low 5 bits), 2^(n >> 5)
 * applied by vscalefps of n/32 (it takes the floor; one rounding, as the portable two
 * power-of-two factors).  Returns |x|^y before the special-value selects.  plain: every ax is
 * positive, normal and finite and every |y| < 512, so the subnormal scaling and the clamps change
 * nothing and are left out (a constant once inlined): |th| < 512 * 128 keeps th + tl within
 * the 1.5 2^18 shift's range (2^17) and |tl| below 1 (vscalefps itself saturates to inf or 0), so an
 * unclamped th or tl past the clamps gives the same inf or 0. */
FK_V4_INLINE __m512 fk_v4_powf_core(__m512 ax, __m512 y, const int plain) {
    const __m512 ic0 = _mm512_loadu_ps(fk_powf_hinvc), ic1 = _mm512_loadu_ps(fk_powf_hinvc + 16);
    const __m512 lh0 = _mm512_loadu_ps(fk_powf_logc_hi), lh1 = _mm512_loadu_ps(fk_powf_logc_hi + 16);
    const __m512 ll0 = _mm512_loadu_ps(fk_powf_logc_lo), ll1 = _mm512_loadu_ps(fk_powf_logc_lo + 16);
    const __m512 eh0 = _mm512_loadu_ps(fk_powf_exp2_hi), eh1 = _mm512_loadu_ps(fk_powf_exp2_hi + 16);
    const __m512 el0 = _mm512_loadu_ps(fk_powf_exp2_lo), el1 = _mm512_loadu_ps(fk_powf_exp2_lo + 16);
    const __m512 il = _mm512_set1_ps(FK_POWF_IL2);
    __mmask16 sub = 0;
    if (!plain) {
        sub = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(1.17549435e-38f), _CMP_LT_OQ);
        ax = _mm512_mask_mul_ps(ax, sub, ax, _mm512_set1_ps(8388608.0f));
    }
    __m512i ix = _mm512_castps_si512(ax);
    __m512i tmp = _mm512_sub_epi32(ix, _mm512_set1_epi32((int)FK_POWF_OFF));
    __m512i j = _mm512_srli_epi32(tmp, 18);
    __m512 k = _mm512_cvtepi32_ps(_mm512_srai_epi32(tmp, 23));
    if (!plain) k = _mm512_mask_sub_ps(k, sub, k, _mm512_set1_ps(23.0f));
    __m512 z = _mm512_castsi512_ps(_mm512_sub_epi32(ix, _mm512_and_si512(tmp, _mm512_set1_epi32((int)0xFF800000u))));
    __m512 u = _mm512_fmadd_ps(z, _mm512_permutex2var_ps(ic0, j, ic1), _mm512_set1_ps(0.5f));
    __m512 wh = _mm512_fmadd_ps(u, u, u);
    __m512 wl = _mm512_fmadd_ps(u, u, _mm512_sub_ps(u, wh));
    __m512 ph = _mm512_mul_ps(wh, il);
    __m512 pl = _mm512_fmsub_ps(wh, il, ph);
    __m512 a0 = _mm512_add_ps(k, _mm512_permutex2var_ps(lh0, j, lh1));
    __m512 hi = _mm512_add_ps(a0, ph);
    __m512 e = _mm512_add_ps(_mm512_sub_ps(a0, hi), ph);
    __m512 g = _mm512_set1_ps(fk_powf_g[0]);
    for (int i = 1; i < 5; i++) g = _mm512_fmadd_ps(g, u, _mm512_set1_ps(fk_powf_g[i]));
    __m512 t = _mm512_fmadd_ps(wl, il, pl);
    t = _mm512_fmadd_ps(u, g, t);
    t = _mm512_add_ps(t, e);
    __m512 lo = _mm512_add_ps(t, _mm512_permutex2var_ps(ll0, j, ll1));
    __m512 th = _mm512_mul_ps(y, hi);
    __m512 tl = _mm512_fmadd_ps(y, lo, _mm512_fmsub_ps(y, hi, th));
    if (!plain) {
        /* vmaxps returns its second operand for a NaN: the low bound, as the portable selects */
        th = _mm512_min_ps(_mm512_max_ps(th, _mm512_set1_ps(-160.0f)), _mm512_set1_ps(130.0f));
        tl = _mm512_min_ps(_mm512_max_ps(tl, _mm512_set1_ps(-1.0f)), _mm512_set1_ps(1.0f));
    }
    __m512 kd = _mm512_add_ps(_mm512_add_ps(th, tl), _mm512_set1_ps(FK_POWF_SHIFT));
    __m512 n32 = _mm512_sub_ps(kd, _mm512_set1_ps(FK_POWF_SHIFT));
    __m512 rr = _mm512_add_ps(_mm512_sub_ps(th, n32), tl);
    __m512 q = _mm512_set1_ps(fk_powf_q[0]);
    for (int i = 1; i < 3; i++) q = _mm512_fmadd_ps(q, rr, _mm512_set1_ps(fk_powf_q[i]));
    __m512 p = _mm512_mul_ps(rr, q);
    __m512i kb = _mm512_castps_si512(kd);
    __m512 t0 = _mm512_permutex2var_ps(eh0, kb, eh1);
    __m512 v = _mm512_add_ps(t0, _mm512_fmadd_ps(t0, p, _mm512_permutex2var_ps(el0, kb, el1)));
    return _mm512_scalef_ps(v, n32);
}
/* fk_fast_powf on 16 lanes: fk_v4_powf_core, then fk_fast_powf's selects.  A vector whose every x
 * is positive, normal and finite and every |y| < 512 needs none of them (x = 1 and y = 0 give
 * exactly 1 from the steps: log2 1 = 0 in the cell with invc = 1, and 2^0 = T_0 = 1): one test, then
 * the plain steps. */
FK_V4_INLINE __m512 fk_v4_powf(__m512 x, __m512 y) {
    __m512 ax = _mm512_abs_ps(x), ay = _mm512_abs_ps(y);
    /* x: NaN, +-0, +-inf, subnormal or negative; |y| >= 512 or NaN */
    if (!(_mm512_fpclass_ps_mask(x, 0xFF) | _mm512_cmp_ps_mask(ay, _mm512_set1_ps(512.0f), _CMP_NLT_UQ)))
        return fk_v4_powf_core(x, y, 1);
    __m512 r = fk_v4_powf_core(ax, y, 0);
    /* a zero or infinite base or an infinite exponent: +inf where y > 0 matches |x| > 1, else +0 */
    __mmask16 big = ~(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ) ^ _mm512_cmp_ps_mask(ax, _mm512_set1_ps(1.0f), _CMP_GT_OQ));
    __mmask16 degenerate = _mm512_cmp_ps_mask(ax, _mm512_setzero_ps(), _CMP_EQ_OQ) | _mm512_cmp_ps_mask(ax, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ)
                           | _mm512_cmp_ps_mask(ay, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
    r = _mm512_mask_mov_ps(r, degenerate, _mm512_maskz_mov_ps(big, _mm512_set1_ps(INFINITY)));
    /* the odd_bit of fk_fast_powf: y an odd integer (every float from 2^23 on is an integer, and
     * from 2^24 on even) */
    __m512 ry = _mm512_sub_ps(_mm512_add_ps(ay, _mm512_set1_ps(8388608.0f)), _mm512_set1_ps(8388608.0f));
    __mmask16 below24 = _mm512_cmp_ps_mask(ay, _mm512_set1_ps(16777216.0f), _CMP_LT_OQ);
    __m512i yi = _mm512_cvttps_epi32(_mm512_maskz_mov_ps(below24, ay));
    __mmask16 integral = _mm512_cmp_ps_mask(ay, _mm512_set1_ps(8388608.0f), _CMP_GE_OQ) | _mm512_cmp_ps_mask(ry, ay, _CMP_EQ_OQ);
    __m512i odd = _mm512_maskz_slli_epi32(integral, yi, 31);
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), odd);
    r = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(r), sign));
    __mmask16 nan_in = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
    r = _mm512_mask_mov_ps(r, nan_in, _mm512_set1_ps(NAN));
    __mmask16 one = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_EQ_OQ) | _mm512_cmp_ps_mask(x, _mm512_set1_ps(1.0f), _CMP_EQ_OQ)
                    | (_mm512_cmp_ps_mask(x, _mm512_set1_ps(-1.0f), _CMP_EQ_OQ) & _mm512_cmp_ps_mask(ay, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ));
    r = _mm512_mask_mov_ps(r, one, _mm512_set1_ps(1.0f));
    /* a negative finite base with a finite non-integer exponent (inf counts as an integer) */
    __mmask16 neg_base = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ) & _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ);
    __mmask16 non_int = _mm512_cmp_ps_mask(ay, _mm512_set1_ps(8388608.0f), _CMP_LT_OQ) & _mm512_cmp_ps_mask(ry, ay, _CMP_NEQ_UQ)
                        & _mm512_cmp_ps_mask(y, y, _CMP_ORD_Q);
    return _mm512_mask_mov_ps(r, neg_base & non_int, _mm512_set1_ps(NAN));
}
/* fk_silu_grad_f32 and fk_gelu_erf_grad_f32 on 16 lanes: the same clamps, exp, quotients and
 * scaling, operation for operation (the same bits, compared on all 2^32 inputs; the powers of two
 * by vscalefps, exact where every value is normal, as here); GCC's own loops of the portable forms
 * took 2-3x PyTorch's time at 4M (about 85 instructions a vector for SiLU's, the exp's clamp, NaN
 * fix-up and two-factor scale among them).  GELU_ERF's derivative from GELU_ERF's parts (stop 62):
 * 38 us per 64K in L2 on a Zen 4 core, 4M 4.43 -> 2.55 ms. */
FK_V4_INLINE __m512 fk_v4_silu_grad(__m512 x) {
    __m512 xc = fk_v4_clamp(x, -120.0f, 80.0f), n;
    /* exp(-|x|) 2^64: -|x| is already inside the exp's clamp, and a NaN lane is fixed up below */
    __m512 y = fk_v4_expf_parts_unclamped(fk_v4_neg_abs(xc), &n);
    __m512 t = _mm512_scalef_ps(y, _mm512_add_ps(n, _mm512_set1_ps(64.0f)));
    __m512 d = _mm512_fmadd_ps(t, _mm512_set1_ps(FK_TWO_POW_M64), _mm512_set1_ps(1.0f));
    __mmask16 pos = _mm512_cmp_ps_mask(xc, _mm512_setzero_ps(), _CMP_GE_OQ);
    __m512 nd = _mm512_mul_ps(_mm512_mask_mov_ps(t, pos, _mm512_set1_ps(0x1p64f)), d);
    __m512 q = _mm512_div_ps(_mm512_fmadd_ps(xc, t, nd), _mm512_mul_ps(d, d));
    return fk_v4_keep_nan(x, _mm512_mul_ps(q, _mm512_set1_ps(FK_TWO_POW_M64)));
}
FK_V4_INLINE __m512 fk_v4_gelu_erf_grad(__m512 x) {
    __m512 z = _mm512_abs_ps(x), e, n;
    __m512 zc = _mm512_min_ps(z, _mm512_set1_ps(FK_GELU_ERF_CLAMP));     /* NaN: the clamp (kept below) */
    __m512 r = fk_v4_gelu_erf_parts(zc, &e, &n);
    __m512 n64 = _mm512_add_ps(n, _mm512_set1_ps(64.0f));
    __m512 cdf = _mm512_scalef_ps(_mm512_fmadd_ps(r, e, r), n64);                                  /* Phi(-z) 2^64 */
    __m512 pdf = _mm512_scalef_ps(_mm512_fmadd_ps(_mm512_set1_ps(FK_INV_SQRT_2PI), e, _mm512_set1_ps(FK_INV_SQRT_2PI)), n64);
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    __m512 base = _mm512_mask_sub_ps(cdf, pos, _mm512_set1_ps(0x1p64f), cdf);
    __m512 xc = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(zc), _mm512_castps_si512(x),
                                                               _mm512_set1_epi32((int)0x80000000u), 0xF8));
    __m512 y = _mm512_mul_ps(_mm512_fmadd_ps(xc, pdf, base), _mm512_set1_ps(FK_TWO_POW_M64));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-FK_GELU_ERF_CLAMP), _CMP_LT_OQ), _mm512_set1_ps(-0.0f));
    return fk_v4_keep_nan(x, y);
}
/* dy f'(x) (FK_ACT_APPLY: dy itself where dy is NaN) */
FK_V4_INLINE __m512 fk_v4_silu_backward(__m512 x, __m512 dy) {
    return fk_v4_keep_nan(dy, _mm512_mul_ps(dy, fk_v4_silu_grad(x)));
}
FK_V4_INLINE __m512 fk_v4_gelu_erf_backward(__m512 x, __m512 dy) {
    return fk_v4_keep_nan(dy, _mm512_mul_ps(dy, fk_v4_gelu_erf_grad(x)));
}
/* The loops below load each vector a block of 256 bytes before its result is stored (the loads of
 * the next block are issued before the stores of this one).  A load that follows a store to an
 * address 0 to 256 bytes lower modulo 4 KiB (an output just past its input in the 4 KiB window, as
 * glibc places one heap block 16 bytes past the last) otherwise waits on that store: 4K aliasing,
 * and where the store misses the cache it waits on memory.
 * NAME: o[i] = F(a[i * ia], b[i * ib]) for ia, ib in {0, 1} (a broadcast operand has stride 0),
 * the last vector masked (its idle lanes computed on 1) */
#define FK_V4_BINARY_VEC(NAME, F)                                                                  \
    FK_V4_INLINE void NAME(const float *a, int64_t ia, const float *b, int64_t ib, float *o, int64_t n) { \
        int64_t i = 0;                                                                            \
        __m512 xa = _mm512_set1_ps(a[0]), yb = _mm512_set1_ps(b[0]);                              \
        if (n >= 128) {                                                                           \
            __m512 x[4], y[4];                                                                    \
            for (int k = 0; k < 4; k++) {                                                         \
                x[k] = ia ? _mm512_loadu_ps(a + 16 * k) : xa;                                     \
                y[k] = ib ? _mm512_loadu_ps(b + 16 * k) : yb;                                     \
            }                                                                                     \
            for (; i + 128 <= n; i += 64) {                                                       \
                _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                             \
                    __m512 r = F(x[k], y[k]);                                                     \
                    x[k] = ia ? _mm512_loadu_ps(a + i + 64 + 16 * k) : xa;                        \
                    y[k] = ib ? _mm512_loadu_ps(b + i + 64 + 16 * k) : yb;                        \
                    _mm512_storeu_ps(o + i + 16 * k, r);                                          \
                }                                                                                 \
            }                                                                                     \
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) _mm512_storeu_ps(o + i + 16 * k, F(x[k], y[k])); \
            i += 64;                                                                              \
        }                                                                                         \
        for (; i + 16 <= n; i += 16) {                                                            \
            __m512 x = ia ? _mm512_loadu_ps(a + i) : xa, y = ib ? _mm512_loadu_ps(b + i) : yb;    \
            _mm512_storeu_ps(o + i, F(x, y));                                                     \
        }                                                                                         \
        if (i < n) {                                                                              \
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                      \
            __m512 x = ia ? _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, a + i) : xa;            \
            __m512 y = ib ? _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, b + i) : yb;            \
            _mm512_mask_storeu_ps(o + i, m, F(x, y));                                             \
        }                                                                                         \
    }
FK_V4_BINARY_VEC(fk_v4_pow_vec, fk_v4_powf)
FK_V4_BINARY_VEC(fk_v4_silu_backward_vec, fk_v4_silu_backward)
FK_V4_BINARY_VEC(fk_v4_gelu_erf_backward_vec, fk_v4_gelu_erf_backward)

/* 16 BF16 values widened to F32, and 16 F32 values rounded to BF16 as fk_f32_to_bf16_branchless
 * (to nearest even; a NaN keeps its sign and top payload bits, made quiet) */
FK_V4_INLINE __m512 fk_v4_bf16_widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
FK_V4_INLINE __m256i fk_v4_bf16_round(__m512 f) {
    __m512i x = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

/* AVX-512 forms of the cheap unary ops for F32 rows (fk_v4_map_f32) and BF16 rows (fk_v4_map_bf16 keeps
 * the widening and the rounding in registers): each the F32 expression's own IEEE operation, as the
 * AVX2 forms below */
FK_V4_INLINE __m512 fk_v4_neg(__m512 x) { return _mm512_xor_ps(x, _mm512_set1_ps(-0.0f)); }
FK_V4_INLINE __m512 fk_v4_abs(__m512 x) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x); }
FK_V4_INLINE __m512 fk_v4_sqr(__m512 x) { return _mm512_mul_ps(x, x); }
FK_V4_INLINE __m512 fk_v4_sqrt(__m512 x) { return _mm512_sqrt_ps(x); }
/* RSQRT: 1 / sqrt(x) with both steps rounded (fk_rsqrtf's bits), the reciprocal by FMAs so that the
 * divider does only the square root.  With s = sqrt(x) and y = rcp14(s) (within 2^-14), one Newton
 * step y + y (1 - s y) makes y faithful (2^-28 off before its rounding); then the residual 1 - s y
 * is exact and y + y (1 - s y) rounds to RN(1/s) (Markstein's correction), except where s's
 * significand is all ones: 1/s = 2^k (1 + 2^-24 + ...) lies just past the midpoint of y = 2^k and
 * its successor, which is the answer, so that lane's result is y | 1 (either faithful y gives it).
 * s = 0, inf or NaN makes the first residual NaN; rcp14 is exact there (inf, 0, the quiet NaN).
 * The same bits as 1.0f / sqrtf(x) for every F32 input (all 2^32 compared on a Zen 4 core). */
FK_V4_INLINE __m512 fk_v4_rsqrt(__m512 x) {
    __m512 s = _mm512_sqrt_ps(x), one = _mm512_set1_ps(1.0f);
    __m512 y0 = _mm512_rcp14_ps(s);
    __m512 e0 = _mm512_fnmadd_ps(s, y0, one);
    __m512 y = _mm512_fmadd_ps(y0, e0, y0);
    y = _mm512_fmadd_ps(y, _mm512_fnmadd_ps(s, y, one), y);
    __m512i mant = _mm512_set1_epi32(0x7fffff);
    __mmask16 ones = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(s), mant), mant);
    y = _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(y), ones, _mm512_castps_si512(y),
                                                 _mm512_set1_epi32(1)));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(e0, e0, _CMP_UNORD_Q), y0);
}
FK_V4_INLINE __m512 fk_v4_recip(__m512 x) { return _mm512_div_ps(_mm512_set1_ps(1.0f), x); }
FK_V4_INLINE __m512 fk_v4_relu(__m512 x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NLE_UQ), x);
}
FK_V4_INLINE __m512 fk_v4_floor(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
FK_V4_INLINE __m512 fk_v4_ceil(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
/* a NaN comes out quiet, which the BF16 rounding does either way (see fk_v3_round) */
FK_V4_INLINE __m512 fk_v4_round(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* FK_U_SIGN_F in one vfixupimmps by x's class: NaN and +-0 give x itself (token 1), -inf and negative
 * values -1 (9), +1, +inf and positive values +1 (10).  The AVX2 loop GCC made of the two selects took
 * 9 operations per 8 lanes and ran 4M elements 15% slower than a copy (Zen 4); this one is F32's
 * contiguous loop and BF16's (the same bits as the selects for every input, NaN included) */
FK_V4_INLINE __m512 fk_v4_sign(__m512 x) {
    return _mm512_fixupimm_ps(x, x, _mm512_set1_epi32(0x1 | 0x1 << 4 | 0x1 << 8 | 0x1 << 12 | 0x9 << 16 |
                                                      0xA << 20 | 0x9 << 24 | (int)(0xAu << 28)), 0);
}

/* fk_v4_bf16_round by AVX512_BF16's vcvtneps2bf16 where the CPU has it (have_bf16, read once per row
 * with __builtin_cpu_supports): the instruction rounds to nearest even and quiets a NaN keeping its
 * top bits, the same bits as fk_v4_bf16_round for every F32 input but the subnormals, which it
 * takes as zero (compared on all 2^32); a vector holding one takes fk_v4_bf16_round.  One
 * instruction and a class test instead of nine: BF16 SQR in L2 2.5x faster on a Zen 4 core.  Written
 * as inline assembly so the rows stay x86-64-v4 code (a function with the avx512bf16 target cannot be
 * inlined into them). */
FK_V4_INLINE __m256i fk_v4_bf16_round_fast(__m512 f, int have_bf16) {
    if (have_bf16 && !_mm512_fpclass_ps_mask(f, 0x20)) {
        __m256i h;
        __asm__("vcvtneps2bf16 %1, %0" : "=v"(h) : "v"(f));
        return h;
    }
    return fk_v4_bf16_round(f);
}

/* o[i] = F(a[i]) for i < n (a == o allowed).  Two vectors a step: the independent chains of the
 * table-driven functions interleave better (GELU_ERF 20%, LOG 5% faster in L2 on Sapphire Rapids) */
#define fk_v4_map_f32(F, a, o, n) fk_v4_map_f32_store(F, a, o, n, _mm512_storeu_ps)
/* fk_v4_map_f32 into a 64-byte aligned o with non-temporal stores, one line per vector as it is
 * computed (the tail plainly): a compute-bound op's stores then drain while it computes, where
 * computing a chunk into L1 and streaming it out after left the memory idle during the arithmetic */
#define fk_v4_map_f32_nt(F, a, o, n) fk_v4_map_f32_store(F, a, o, n, _mm512_stream_ps)
/* either, the full vectors stored by STORE */
#define fk_v4_map_f32_store(F, a, o, n, STORE)                                                     \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        if ((n) >= 128) {               /* loads a 256-byte block ahead (FK_V4_BINARY_VEC says why) */ \
            __m512 x_[4];                                                                          \
            for (int k_ = 0; k_ < 4; k_++) x_[k_] = _mm512_loadu_ps((a) + 16 * k_);                \
            for (; i_ + 128 <= (n); i_ += 64) {                                                    \
                _Pragma("GCC unroll 2") for (int k_ = 0; k_ < 4; k_ += 2) {                        \
                    __m512 v0_ = F(x_[k_]), v1_ = F(x_[k_ + 1]);                                   \
                    x_[k_] = _mm512_loadu_ps((a) + i_ + 64 + 16 * k_);                             \
                    x_[k_ + 1] = _mm512_loadu_ps((a) + i_ + 80 + 16 * k_);                         \
                    STORE((o) + i_ + 16 * k_, v0_);                                                \
                    STORE((o) + i_ + 16 * k_ + 16, v1_);                                           \
                }                                                                                  \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int k_ = 0; k_ < 4; k_++) STORE((o) + i_ + 16 * k_, F(x_[k_])); \
            i_ += 64;                                                                              \
        }                                                                                          \
        for (; i_ + 16 <= (n); i_ += 16) STORE((o) + i_, F(_mm512_loadu_ps((a) + i_)));            \
        if (i_ < (n)) {                                                                            \
            __mmask16 m_ = (__mmask16)((1u << ((n) - i_)) - 1u);                                   \
            _mm512_mask_storeu_ps((o) + i_, m_, F(_mm512_maskz_loadu_ps(m_, (a) + i_)));          \
        }                                                                                          \
    } while (0)
/* the same over BF16 storage, two vectors a step as well: widen, F, round once */
#define fk_v4_map_bf16(F, a, o, n)                                                                 \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        int bf16_ = fk_cpu_supports("avx512bf16");                                                 \
        for (; i_ + 32 <= (n); i_ += 32) {                                                         \
            __m512 v0_ = F(fk_v4_bf16_widen(_mm256_loadu_si256((const __m256i *)((a) + i_))));      \
            __m512 v1_ = F(fk_v4_bf16_widen(_mm256_loadu_si256((const __m256i *)((a) + i_ + 16)))); \
            _mm256_storeu_si256((__m256i *)((o) + i_), fk_v4_bf16_round_fast(v0_, bf16_));         \
            _mm256_storeu_si256((__m256i *)((o) + i_ + 16), fk_v4_bf16_round_fast(v1_, bf16_));    \
        }                                                                                          \
        for (; i_ + 16 <= (n); i_ += 16)                                                           \
            _mm256_storeu_si256((__m256i *)((o) + i_),                                             \
                                fk_v4_bf16_round_fast(F(fk_v4_bf16_widen(_mm256_loadu_si256((const __m256i *)((a) + i_)))), bf16_)); \
        if (i_ < (n)) {                                                                            \
            __mmask16 m_ = (__mmask16)((1u << ((n) - i_)) - 1u);                                   \
            _mm256_mask_storeu_epi16((o) + i_, m_,                                                 \
                                     fk_v4_bf16_round_fast(F(fk_v4_bf16_widen(_mm256_maskz_loadu_epi16(m_, (a) + i_))), bf16_)); \
        }                                                                                          \
    } while (0)

/* ---- AVX2 forms of the table-driven functions ---------------------------------------------------
 * ERF and GELU_ERF look up one coefficient per lane from 16-entry rows.  GCC vectorizes the portable
 * functions on AVX2 with a gather per coefficient, which runs them 3x slower than the arithmetic
 * (9 gathers a vector); here each lookup is two 8-entry permutes and a blend on the index's bit 3.
 * Every step is the portable function's, so the bits are the same. */
#define FK_V3_INLINE static inline __attribute__((always_inline, target("arch=x86-64-v3")))

FK_V3_INLINE __m256 fk_v3_set(float v) { return _mm256_set1_ps(v); }
FK_V3_INLINE __m256 fk_v3_keep_nan(__m256 x, __m256 y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
FK_V3_INLINE __m256 fk_v3_abs(__m256 x) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
FK_V3_INLINE __m256 fk_v3_copysign(__m256 mag, __m256 sgn) {
    __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    return _mm256_or_ps(_mm256_andnot_ps(sign, mag), _mm256_and_ps(sign, sgn));
}
/* fk_min_nonneg_f32: vminps returns its second operand when the first is NaN */
FK_V3_INLINE __m256 fk_v3_min_nonneg(__m256 a, float c) { return _mm256_min_ps(a, fk_v3_set(c)); }
FK_V3_INLINE __m256 fk_v3_lookup(const float *row, __m256i k) {
    __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row), k);
    __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + 8), k);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(k, 28)));
}
/* fk_gelu_erf_interval; the permutes read the index's low 3 bits and the blend its bit 3 */
FK_V3_INLINE __m256 fk_v3_gelu_erf_interval(__m256 z, __m256i *k) {
    __m256i b = _mm256_castps_si256(_mm256_add_ps(z, fk_v3_set(1.0f)));
    *k = _mm256_srli_epi32(_mm256_sub_epi32(b, _mm256_set1_epi32(0x3F800000)), 21);
    return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_and_si256(b, _mm256_set1_epi32((int)0xFFE00000u))), fk_v3_set(1.0f));
}
/* fk_interval_f32; the permutes read the index's low 3 bits and the blend its bit 3 */
FK_V3_INLINE __m256 fk_v3_interval(__m256 v, __m256i *k) {
    __m256 m = _mm256_add_ps(_mm256_sub_ps(v, fk_v3_set(0.5f)), fk_v3_set(FK_ROUND_MAGIC));
    *k = _mm256_castps_si256(m);
    return _mm256_sub_ps(m, fk_v3_set(FK_ROUND_MAGIC));
}
FK_V3_INLINE __m256 fk_v3_expm1_reduced(__m256 r) {
    __m256 p = fk_v3_set(fk_expf_p[0]);
    for (int j = 1; j < 6; j++) p = _mm256_fmadd_ps(p, r, fk_v3_set(fk_expf_p[j]));
    return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
}

/* fk_expf_scaled, step for step, with a scale per lane (the two-factor 2^n of integer shifts;
 * GCC's vectorization of the portable function turned its clamp into blends of every later step,
 * 38 instructions a vector) */
FK_V3_INLINE __m256 fk_v3_expf_scaled(__m256 x, __m256i scale) {
    __m256 xc = _mm256_min_ps(fk_v3_set(89.0f), _mm256_max_ps(fk_v3_set(-126.0f), x));   /* NaN passes */
    __m256 k = _mm256_fmadd_ps(xc, fk_v3_set(1.44269504088896341f), fk_v3_set(FK_ROUND_MAGIC));
    __m256 n = _mm256_sub_ps(k, fk_v3_set(FK_ROUND_MAGIC));
    __m256 r = _mm256_fmadd_ps(n, fk_v3_set(-0.693359375f), xc);
    r = _mm256_fmadd_ps(n, fk_v3_set(2.12194440e-4f), r);
    __m256 y = _mm256_add_ps(fk_v3_expm1_reduced(r), fk_v3_set(1.0f));
    __m256i ni = _mm256_add_epi32(_mm256_sub_epi32(_mm256_castps_si256(k), _mm256_set1_epi32(0x4B400000)), scale);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256i bias = _mm256_set1_epi32(127);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
    return fk_v3_keep_nan(x, y);
}
/* Lanes where fk_v3_expf_normal is not fk_fast_expf: x outside [-87, 88], or NaN (a movemask) */
FK_V3_INLINE int fk_v3_expf_off_normal(__m256 x) {
    return _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(x, fk_v3_set(-87.0f), _CMP_NGE_UQ),
                                           _mm256_cmp_ps(x, fk_v3_set(88.0f), _CMP_NLE_UQ)));
}
/* fk_fast_expf(x) for x in [-87, 88] (no NaN): there the clamp does nothing and n = round(x log2e)
 * is in [-126, 127], so 2^n is one normal float and y 2^n rounds the exact product once, as
 * y 2^n1 (exact) 2^n2 does: the same bits in 19 instructions instead of 25 */
FK_V3_INLINE __m256 fk_v3_expf_normal(__m256 x) {
    __m256 k = _mm256_fmadd_ps(x, fk_v3_set(1.44269504088896341f), fk_v3_set(FK_ROUND_MAGIC));
    __m256 n = _mm256_sub_ps(k, fk_v3_set(FK_ROUND_MAGIC));
    __m256 r = _mm256_fmadd_ps(n, fk_v3_set(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, fk_v3_set(2.12194440e-4f), r);
    __m256 y = _mm256_add_ps(fk_v3_expm1_reduced(r), fk_v3_set(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(k), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
/* fk_fast_expf: the short form where every lane allows it */
FK_V3_INLINE __m256 fk_v3_expf(__m256 x) {
    return fk_v3_expf_off_normal(x) ? fk_v3_expf_scaled(x, _mm256_setzero_si256()) : fk_v3_expf_normal(x);
}

/* fk_fast_erff */
FK_V3_INLINE __m256 fk_v3_erff(__m256 x) {
    __m256 ac = fk_v3_min_nonneg(fk_v3_abs(x), 3.99f);
    __m256i k;
    __m256 n = fk_v3_interval(_mm256_mul_ps(fk_v3_set(4.0f), ac), &k);
    __m256 u = _mm256_fmadd_ps(n, fk_v3_set(-0.25f), ac);
    __m256 p = fk_v3_lookup(fk_erf_tab[0], k);
    for (int j = 1; j <= FK_ERF_DEGREE; j++) p = _mm256_fmadd_ps(p, u, fk_v3_lookup(fk_erf_tab[j], k));
    __m256 big = fk_v3_copysign(_mm256_sub_ps(fk_v3_set(1.0f), p), x);
    __m256 y = _mm256_blendv_ps(big, _mm256_fmadd_ps(x, p, x), _mm256_cmp_ps(n, fk_v3_set(4.0f), _CMP_LT_OQ));
    return fk_v3_keep_nan(x, y);
}

/* The most vectors an fk_v3_<name>_n runs side by side: its per-vector arrays have this fixed size,
 * not [N], since GCC keeps a variable-length array on the stack even where N is a constant once
 * inlined (every step's vectors then went through memory: EXP f32 in L2 took 28 us per 64K instead
 * of 17-18 on a Zen 4 core) */
#define FK_V3_MAX_N 4
/* fk_v3_<name>(x) on one vector and fk_v3_<name>4(x, y) on 4 side by side, from fk_v3_<name>_n */
#define FK_V3_ONE_AND_FOUR(name)                                                                   \
    FK_V3_INLINE __m256 fk_v3_##name(__m256 x) {                                                   \
        __m256 y;                                                                                  \
        fk_v3_##name##_n(&x, &y, 1);                                                               \
        return y;                                                                                  \
    }                                                                                              \
    FK_V3_INLINE void fk_v3_##name##4(const __m256 *x, __m256 *y) { fk_v3_##name##_n(x, y, 4); }

/* p[v] = the polynomial c[0..n) (highest power first) at x[v] for v < N, the Horner steps taken
 * across the N vectors (fk_horner_f32's bits) */
FK_V3_INLINE void fk_v3_horner_n(__m256 *p, const __m256 *x, const float *c, int n, const int N) {
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) p[v] = fk_v3_set(c[0]);
    for (int j = 1; j < n; j++)
#pragma GCC unroll 4
        for (int v = 0; v < N; v++) p[v] = _mm256_fmadd_ps(p[v], x[v], fk_v3_set(c[j]));
}
/* fk_v3_expf_normal on N vectors x[0..N) into y[0..N) (N a constant where inlined), each step for
 * every vector before the next step, so their dependent chains overlap; the same steps, the same bits.
 * (fk_v3_gelu_erff_n runs its own expm1 steps across its vectors the same way.) */
FK_V3_INLINE void fk_v3_expf_normal_n(const __m256 *x, __m256 *y, const int N) {
    __m256 k[FK_V3_MAX_N], r[FK_V3_MAX_N], p[FK_V3_MAX_N];
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        k[v] = _mm256_fmadd_ps(x[v], fk_v3_set(1.44269504088896341f), fk_v3_set(FK_ROUND_MAGIC));
        __m256 n = _mm256_sub_ps(k[v], fk_v3_set(FK_ROUND_MAGIC));
        r[v] = _mm256_fmadd_ps(n, fk_v3_set(2.12194440e-4f), _mm256_fmadd_ps(n, fk_v3_set(-0.693359375f), x[v]));
    }
    fk_v3_horner_n(p, r, fk_expf_p, 6, N);
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p[v], _mm256_mul_ps(r[v], r[v]), r[v]), fk_v3_set(1.0f));
        __m256i s = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(k[v]), _mm256_set1_epi32(0x4B400000 - 127)), 23);
        y[v] = _mm256_mul_ps(e, _mm256_castsi256_ps(s));
    }
}

/* fk_fast_expf on N vectors: fk_v3_expf_normal_n where every lane is in [-87, 88] (no NaN), else
 * fk_v3_expf_scaled one vector at a time; the same bits */
FK_V3_INLINE void fk_v3_expf_n(const __m256 *x, __m256 *y, const int N) {
    int off = 0;
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) off |= fk_v3_expf_off_normal(x[v]);
    if (!off) {
        fk_v3_expf_normal_n(x, y, N);
        return;
    }
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) y[v] = fk_v3_expf_scaled(x[v], _mm256_setzero_si256());
}
FK_V3_INLINE void fk_v3_expf4(const __m256 *x, __m256 *y) { fk_v3_expf_n(x, y, 4); }

/* fk_fast_tanhf on N vectors side by side, step for step (GCC's form of the portable loop ran one
 * vector's exp and division at a time, latency-bound: 0.47 ns an element in L2 on a Zen 4 core) */
FK_V3_INLINE void fk_v3_tanhf_n(const __m256 *x, __m256 *y, const int N) {
    __m256 v[FK_V3_MAX_N], k[FK_V3_MAX_N], e[FK_V3_MAX_N];
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
        v[i] = _mm256_mul_ps(fk_v3_set(-2.0f), fk_v3_min_nonneg(fk_v3_abs(x[i]), 9.1f));     /* NaN: 9.1 */
        k[i] = _mm256_fmadd_ps(v[i], fk_v3_set(1.44269504088896341f), fk_v3_set(FK_ROUND_MAGIC));
        __m256 n = _mm256_sub_ps(k[i], fk_v3_set(FK_ROUND_MAGIC));
        e[i] = _mm256_fmadd_ps(n, fk_v3_set(-0.693147182464599609375f), v[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) e[i] = fk_v3_expm1_reduced(e[i]);
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
        __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_add_epi32(_mm256_castps_si256(k[i]), _mm256_set1_epi32((int)(127u - 0x4B400000u))), 23));
        __m256 one = fk_v3_set(1.0f);
        __m256 q = _mm256_div_ps(_mm256_fnmadd_ps(s, e[i], _mm256_sub_ps(one, s)),
                                 _mm256_fmadd_ps(s, e[i], _mm256_add_ps(one, s)));
        y[i] = fk_v3_keep_nan(x[i], fk_v3_copysign(q, x[i]));
    }
}
FK_V3_ONE_AND_FOUR(tanhf)

/* fk_fast_logf on N vectors, step for step.  Where no lane of the N is below FLT_MIN, +inf or NaN
 * (positive normal finite lanes), the subnormal scaling and the fix-ups change nothing and are
 * left out: e - 0 is e.  The Horner chains of the N vectors run side by side: GCC's form of the
 * portable loop ran one at a time, latency-bound (0.69 ns an element in L2 on a Zen 4 core, 3.2x
 * PyTorch's AVX2 log at 4M on the 16-core Xeon). */
FK_V3_INLINE void fk_v3_logf_n(const __m256 *x, __m256 *y, const int N) {
    const __m256i c = _mm256_set1_epi32(0x3f3504f3);
    __m256 special = _mm256_setzero_ps(), xs[FK_V3_MAX_N], es[FK_V3_MAX_N];
#pragma GCC unroll 4
    for (int v = 0; v < N; v++)
        special = _mm256_or_ps(special, _mm256_or_ps(_mm256_cmp_ps(x[v], fk_v3_set(1.17549435e-38f), _CMP_NGE_UQ),
                                                     _mm256_cmp_ps(x[v], fk_v3_set(INFINITY), _CMP_EQ_OQ)));
    int any_special = _mm256_movemask_ps(special);
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        if (any_special) {
            __m256 sub = _mm256_cmp_ps(x[v], fk_v3_set(1.17549435e-38f), _CMP_LT_OQ);
            xs[v] = _mm256_blendv_ps(x[v], _mm256_mul_ps(x[v], fk_v3_set(8388608.0f)), sub);
            es[v] = _mm256_and_ps(sub, fk_v3_set(23.0f));
        } else {
            xs[v] = x[v];
        }
    }
    __m256 e[FK_V3_MAX_N], f[FK_V3_MAX_N], z[FK_V3_MAX_N], p[FK_V3_MAX_N];
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        __m256i t = _mm256_sub_epi32(_mm256_castps_si256(xs[v]), c);
        e[v] = _mm256_cvtepi32_ps(_mm256_srai_epi32(t, 23));
        if (any_special) e[v] = _mm256_sub_ps(e[v], es[v]);
        f[v] = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_and_si256(t, _mm256_set1_epi32(0x7fffff)), c)),
                             fk_v3_set(1.0f));
        z[v] = _mm256_mul_ps(f[v], f[v]);
    }
    fk_v3_horner_n(p, f, fk_logf_p, 9, N);
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(p[v], f[v]), z[v]);
        t = _mm256_fmadd_ps(e[v], fk_v3_set(-2.12194440e-4f), t);
        t = _mm256_fmadd_ps(fk_v3_set(-0.5f), z[v], t);
        __m256 r = _mm256_fmadd_ps(e[v], fk_v3_set(0.693359375f), _mm256_add_ps(f[v], t));
        if (any_special) {
            r = _mm256_blendv_ps(r, x[v], _mm256_cmp_ps(x[v], fk_v3_set(INFINITY), _CMP_EQ_OQ));
            r = _mm256_blendv_ps(r, fk_v3_set(-INFINITY), _mm256_cmp_ps(x[v], _mm256_setzero_ps(), _CMP_EQ_OQ));
            r = _mm256_blendv_ps(r, fk_v3_set(NAN), _mm256_cmp_ps(x[v], _mm256_setzero_ps(), _CMP_LT_OQ));
            r = fk_v3_keep_nan(x[v], r);
        }
        y[v] = r;
    }
}
FK_V3_ONE_AND_FOUR(logf)

/* fk_fast_sigmoidf on N vectors: (x >= 0 ? 1 : t) / (1 + t), t = fk_v3_expf_n(-|x|) (-|x| by setting
 * the sign bit, as C's -fabsf: a NaN keeps its payload with the sign set, the portable function's bits) */
FK_V3_INLINE void fk_v3_sigmoidf_n(const __m256 *x, __m256 *y, const int N) {
    __m256 nx[FK_V3_MAX_N], t[FK_V3_MAX_N];
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) nx[v] = _mm256_or_ps(x[v], fk_v3_set(-0.0f));
    fk_v3_expf_n(nx, t, N);
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        __m256 pos = _mm256_cmp_ps(x[v], _mm256_setzero_ps(), _CMP_GE_OQ);
        y[v] = _mm256_div_ps(_mm256_blendv_ps(t[v], fk_v3_set(1.0f), pos), _mm256_add_ps(fk_v3_set(1.0f), t[v]));
    }
}
FK_V3_ONE_AND_FOUR(sigmoidf)

/* fk_fast_siluf on N vectors, as fk_v4_siluf: where every lane has |x| <= 87 (no NaN), t = exp(-|x|)
 * is fk_v3_expf_normal's and the steps drop the 2^64 scale, which then changes no rounding (see
 * fk_v4_siluf); other vectors take the portable steps with the scale, one vector at a time.  The
 * exps of the N vectors run side by side (one vector at a time GCC's form of the portable loop ran
 * 3x slower than PyTorch's SiLU in L2 on a Zen 2 core). */
FK_V3_INLINE void fk_v3_siluf_n(const __m256 *x, __m256 *y, const int N) {
    __m256 nx[FK_V3_MAX_N], t[FK_V3_MAX_N], inside = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        nx[v] = _mm256_or_ps(x[v], fk_v3_set(-0.0f));
        inside = _mm256_and_ps(inside, _mm256_cmp_ps(nx[v], fk_v3_set(-87.0f), _CMP_GE_OQ));
    }
    if (_mm256_movemask_ps(inside) == 0xff) {
        fk_v3_expf_normal_n(nx, t, N);
#pragma GCC unroll 4
        for (int v = 0; v < N; v++) {
            __m256 d = _mm256_add_ps(fk_v3_set(1.0f), t[v]);
            __m256 pos = _mm256_cmp_ps(x[v], _mm256_setzero_ps(), _CMP_GE_OQ);
            y[v] = _mm256_div_ps(_mm256_blendv_ps(_mm256_mul_ps(x[v], t[v]), x[v], pos), d);
        }
        return;
    }
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        __m256 u = fk_v3_expf_scaled(nx[v], _mm256_set1_epi32(64));
        __m256 d = _mm256_add_ps(fk_v3_set(1.0f), _mm256_mul_ps(u, fk_v3_set(FK_TWO_POW_M64)));
        __m256 pos = _mm256_cmp_ps(x[v], _mm256_setzero_ps(), _CMP_GE_OQ);
        __m256 q = _mm256_div_ps(_mm256_blendv_ps(_mm256_mul_ps(x[v], u), x[v], pos), d);
        __m256 r = _mm256_blendv_ps(_mm256_mul_ps(q, fk_v3_set(FK_TWO_POW_M64)), q, pos);
        r = _mm256_blendv_ps(r, fk_v3_set(-0.0f), _mm256_cmp_ps(x[v], fk_v3_set(-120.0f), _CMP_LT_OQ));
        y[v] = fk_v3_keep_nan(x[v], r);
    }
}
FK_V3_ONE_AND_FOUR(siluf)

/* fk_fast_gelu_erff on N vectors x[0..N) into y[0..N) (N a constant where inlined), each step
 * for every vector before the next step: one vector at a time, the two chains of dependent FMAs (R
 * and exp, ~60 cycles) filled Zen 2's FP scheduler and the loop ran latency-bound at ~44 cycles a
 * vector.  One test on all N vectors' intervals picks the lookup.  Where every |x| <= 12.5 (no NaN,
 * no infinity) Phi(-z) = fma(R, e, R) 2^n is normal and exact, and so is x Phi(-z) (but where it is
 * x / 2 of a tiny x, rounded once either way), so both sides are max(0, x) - |x| Phi(-z): one fnmadd
 * where the portable steps' two sides and their blend take six operations, the same bits. */
FK_V3_INLINE void fk_v3_gelu_erff_n(const __m256 *x, __m256 *y, const int N) {
    __m256 zc[FK_V3_MAX_N], xc[FK_V3_MAX_N], u[FK_V3_MAX_N], r[FK_V3_MAX_N];
    __m256i k[FK_V3_MAX_N], any = _mm256_setzero_si256();
    __m256 moderate = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        zc[v] = fk_v3_min_nonneg(fk_v3_abs(x[v]), FK_GELU_ERF_CLAMP);
        moderate = _mm256_and_ps(moderate, _mm256_cmp_ps(zc[v], fk_v3_set(FK_GELU_ERF_MODERATE), _CMP_LE_OQ));
        xc[v] = fk_v3_copysign(zc[v], x[v]);
        u[v] = _mm256_sub_ps(zc[v], fk_v3_gelu_erf_interval(zc[v], &k[v]));
        any = _mm256_or_si256(any, k[v]);
    }
    if (_mm256_testz_si256(any, _mm256_set1_epi32(8))) {
        /* every lane's interval below 8 (|x| < 3: the body of a unit-scale activation): the low
         * half of each row alone, one permute per coefficient instead of two and a blend; the same
         * coefficients */
#pragma GCC unroll 4
        for (int v = 0; v < N; v++) r[v] = _mm256_permutevar8x32_ps(_mm256_loadu_ps(fk_gelu_erf_tab[0]), k[v]);
        for (int j = 1; j <= FK_GELU_ERF_DEGREE; j++)
#pragma GCC unroll 4
            for (int v = 0; v < N; v++)
                r[v] = _mm256_fmadd_ps(r[v], u[v], _mm256_permutevar8x32_ps(_mm256_loadu_ps(fk_gelu_erf_tab[j]), k[v]));
    } else {
#pragma GCC unroll 4
        for (int v = 0; v < N; v++) r[v] = fk_v3_lookup(fk_gelu_erf_tab[0], k[v]);
        for (int j = 1; j <= FK_GELU_ERF_DEGREE; j++)
#pragma GCC unroll 4
            for (int v = 0; v < N; v++) r[v] = _mm256_fmadd_ps(r[v], u[v], fk_v3_lookup(fk_gelu_erf_tab[j], k[v]));
    }
    __m256 m[FK_V3_MAX_N], s[FK_V3_MAX_N], t[FK_V3_MAX_N], e[FK_V3_MAX_N];
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        __m256 w = _mm256_mul_ps(zc[v], zc[v]);
        m[v] = _mm256_fmadd_ps(w, fk_v3_set(-0.5f * 1.44269504088896341f), fk_v3_set(FK_ROUND_MAGIC));
        __m256 n = _mm256_sub_ps(m[v], fk_v3_set(FK_ROUND_MAGIC));
        s[v] = _mm256_fmadd_ps(n, fk_v3_set(-2.0f * 2.12194440e-4f),
                               _mm256_fmadd_ps(zc[v], zc[v], _mm256_mul_ps(n, fk_v3_set(2.0f * 0.693359375f))));
        t[v] = fk_v3_set(fk_gelu_erf_expm1_q[0]);
    }
    /* Q's steps, across the vectors; e = expm1(-s/2) in each branch's loop (computed before the
     * branch, the four e stayed live across it: the loop ran 5-10% slower on a Zen 4 core) */
    for (int j = 1; j < 5; j++)
#pragma GCC unroll 4
        for (int v = 0; v < N; v++) t[v] = _mm256_fmadd_ps(t[v], s[v], fk_v3_set(fk_gelu_erf_expm1_q[j]));
    if (_mm256_movemask_ps(moderate) == 0xff) {
        /* every |x| <= FK_GELU_ERF_MODERATE (no NaN or infinity): Phi(-z) = fma(R, e, R) 2^n exactly */
#pragma GCC unroll 4
        for (int v = 0; v < N; v++) {
            e[v] = _mm256_mul_ps(s[v], _mm256_fmadd_ps(s[v], t[v], fk_v3_set(-0.5f)));
            __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(m[v]), _mm256_set1_epi32(0x4B400000 - 127));
            __m256 phi = _mm256_mul_ps(_mm256_fmadd_ps(r[v], e[v], r[v]), _mm256_castsi256_ps(_mm256_slli_epi32(ni, 23)));
            y[v] = _mm256_fnmadd_ps(zc[v], phi, _mm256_max_ps(_mm256_setzero_ps(), x[v]));   /* zc = |x| here */
        }
        return;
    }
#pragma GCC unroll 4
    for (int v = 0; v < N; v++) {
        e[v] = _mm256_mul_ps(s[v], _mm256_fmadd_ps(s[v], t[v], fk_v3_set(-0.5f)));
        /* 2^(n + 64) from the rounding sum's bits, as fk_pow2i_f32(ni + 64) */
        __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(m[v]), _mm256_set1_epi32(0x4B400000 - 64 - 127));
        __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(ni, 23));
        __m256 q = _mm256_mul_ps(_mm256_fmadd_ps(r[v], e[v], r[v]), scale);
        __m256 m64 = fk_v3_set(FK_TWO_POW_M64);
        __m256 pos = _mm256_fnmadd_ps(xc[v], _mm256_mul_ps(_mm256_max_ps(q, fk_v3_set(0x1p-62f)), m64), x[v]);
        /* both sides are formed on every lane: a positive lane's x Phi(-z) would be subnormal past
         * 12.9 (a microcode assist on Intel cores), so the negative side reads min(0, xc) (-0 kept) */
        __m256 neg = _mm256_mul_ps(_mm256_mul_ps(_mm256_min_ps(_mm256_setzero_ps(), xc[v]), q), m64);
        y[v] = fk_v3_keep_nan(x[v], _mm256_blendv_ps(neg, pos, _mm256_cmp_ps(x[v], _mm256_setzero_ps(), _CMP_GT_OQ)));
    }
}
FK_V3_ONE_AND_FOUR(gelu_erff)

/* fk_powi_direct's steps on 8 lanes (as fk_v4_powi_direct) */
FK_V3_INLINE __m256 fk_v3_powi_direct(__m256 x, int n) {
    FK_POWI_DIRECT_STEPS(__m256, x, n, _mm256_setzero_ps(), fk_v3_set(2.0f), _mm256_mul_ps, _mm256_add_ps,
                         _mm256_fmadd_ps, _mm256_fmsub_ps);
}
/* fk_v4_powi_small_row on 8 lanes: a vector whose every lane is 0 or in [2^-9, 2^9] takes
 * fk_v3_powi_direct (zeros as fk_powi_zero), any other fk_powi_small lane by lane; the portable
 * row's bits.  (The portable
 * row checks chunks of 256 in a pass of their own: POWI(3) in L2 ran 2.7x PyTorch's x*x*x that way
 * on a Zen 2 core.)  The range test is fk_powi_direct_ok's unsigned one, as a signed compare of
 * the biased difference, or'd with a zero test. */
FK_V3_INLINE int fk_v3_powi_direct_all(__m256 v) {
    __m256i a = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
    __m256i d = _mm256_xor_si256(_mm256_sub_epi32(a, _mm256_set1_epi32((int)FK_POWI_DIRECT_MIN)),
                                 _mm256_set1_epi32((int)0x80000000u));
    __m256i limit = _mm256_set1_epi32((int)((FK_POWI_DIRECT_MAX - FK_POWI_DIRECT_MIN) ^ 0x80000000u));
    __m256i out = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, _mm256_setzero_si256()), _mm256_cmpgt_epi32(d, limit));
    return _mm256_testz_si256(out, out);
}
FK_V3_INLINE __m256 fk_v3_powi_small(__m256 v, int k) {
    if (fk_v3_powi_direct_all(v)) {
        __m256 zero = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_EQ_OQ);
        return _mm256_blendv_ps(fk_v3_powi_direct(v, k), (k & 1) ? v : _mm256_setzero_ps(), zero);
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    for (int l = 0; l < 8; l++) t[l] = fk_powi_small(t[l], k);
    return _mm256_loadu_ps(t);
}
/* fk_v3_powi_small on 4 vectors with one range test: the direct steps serve all four where their
 * largest magnitude (as bits) is at most 2^9 and their smallest nonzero one at least 2^-9 (a - 1
 * wraps a zero past every other value); else each vector as fk_v3_powi_small.  The per-vector test
 * and branch were a third of the loop's operations: POWI(3) f32 4M ran 1.26-1.28x PyTorch's AVX2
 * x*x*x on a Zen 4 core. */
FK_V3_INLINE void fk_v3_powi_small4(const float *x, float *y, int k) {
    __m256 v[4];
    __m256i hi = _mm256_setzero_si256(), lo = _mm256_set1_epi32(-1);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        __m256i a = _mm256_and_si256(_mm256_castps_si256(v[j]), _mm256_set1_epi32(0x7fffffff));
        hi = _mm256_max_epu32(hi, a);
        lo = _mm256_min_epu32(lo, _mm256_sub_epi32(a, _mm256_set1_epi32(1)));
    }
    const __m256i top = _mm256_set1_epi32((int)FK_POWI_DIRECT_MAX), bottom = _mm256_set1_epi32((int)FK_POWI_DIRECT_MIN - 1);
    __m256i ok = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_max_epu32(hi, top), top),
                                  _mm256_cmpeq_epi32(_mm256_min_epu32(lo, bottom), bottom));
    if (_mm256_movemask_epi8(ok) == -1) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256 p = fk_v3_powi_direct(v[j], k);
            /* the steps give a zero's power its sign for every n from 3 to 8 but 7 (-0 ** 7 comes
             * out +0), so only n = 7 sets the zeros apart; the same bits as fk_powi_zero */
            if (k == 7) p = _mm256_blendv_ps(p, v[j], _mm256_cmp_ps(v[j], _mm256_setzero_ps(), _CMP_EQ_OQ));
            _mm256_storeu_ps(y + 8 * j, p);
        }
        return;
    }
    /* read again from x, so that v stays in registers (block j is read before it is written) */
    for (int j = 0; j < 4; j++) _mm256_storeu_ps(y + 8 * j, fk_v3_powi_small(_mm256_loadu_ps(x + 8 * j), k));
}
FK_V3_INLINE void fk_v3_powi_small_row(const float *x, float *y, int64_t n, int k) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) fk_v3_powi_small4(x + i, y + i, k);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fk_v3_powi_small(_mm256_loadu_ps(x + i), k));
    for (; i < n; i++) y[i] = fk_powi_small(x[i], k);
}

/* 8 BF16 values widened to F32, and 8 F32 values rounded to BF16 as fk_v4_bf16_round */
FK_V3_INLINE __m256 fk_v3_bf16_widen(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* f rounded to BF16 as fk_v4_bf16_round, left in each 32-bit lane's low half (a NaN quieted, its
 * sign and top payload bits kept) */
FK_V3_INLINE __m256i fk_v3_bf16_round_lanes(__m256 f) {
    __m256i x = _mm256_castps_si256(f);
    __m256i top = _mm256_srli_epi32(x, 16);
    __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
}
FK_V3_INLINE __m128i fk_v3_bf16_round(__m256 f) {
    __m256i h = fk_v3_bf16_round_lanes(f);                      /* every lane < 2^16 */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08));
}
/* 16 BF16 values widened to F32 as two vectors, each value moved to its lane's top half in one
 * operation: *lo holds values 0-3 and 8-11, *hi 4-7 and 12-15 (the unpacks work within 128-bit
 * halves), and fk_v3_bf16_pack2's pack, which works the same way, puts them back in order.  Half the
 * widening and narrowing operations of two fk_v3_bf16_widen / fk_v3_bf16_round pairs (SQR bf16 4M
 * on a Zen 4 core in its AVX2 form: 1.22x PyTorch's AVX2 loop before) */
FK_V3_INLINE void fk_v3_bf16_widen2(__m256i h, __m256 *lo, __m256 *hi) {
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), h));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), h));
}
FK_V3_INLINE __m256i fk_v3_bf16_pack2(__m256 lo, __m256 hi) {
    return _mm256_packus_epi32(fk_v3_bf16_round_lanes(lo), fk_v3_bf16_round_lanes(hi));
}

/* AVX2 forms of the cheap unary ops, for F32 rows (fk_v3_map_f32 loads ahead of its stores) and BF16
 * rows (fk_v3_map_bf16 keeps the widening and rounding in registers) on CPUs without AVX-512: each is
 * the F32 expression's own IEEE operation (RELU: x where x > 0 or x is NaN, else +0), so the same
 * bits */
FK_V3_INLINE __m256 fk_v3_neg(__m256 x) { return _mm256_xor_ps(x, fk_v3_set(-0.0f)); }
FK_V3_INLINE __m256 fk_v3_sqr(__m256 x) { return _mm256_mul_ps(x, x); }
FK_V3_INLINE __m256 fk_v3_sqrt(__m256 x) { return _mm256_sqrt_ps(x); }
/* fk_v4_rsqrt's steps from rcpps, within 1.5 2^-12: a third-order step y0 (1 + e + e^2) makes y
 * faithful (2^-33 off before its rounding).  The bound is the architecture's, so the result does
 * not depend on the CPU's own table. */
FK_V3_INLINE __m256 fk_v3_rsqrt(__m256 x) {
    __m256 s = _mm256_sqrt_ps(x), one = fk_v3_set(1.0f);
    __m256 y0 = _mm256_rcp_ps(s);
    __m256 e0 = _mm256_fnmadd_ps(s, y0, one);
    __m256 y = _mm256_fmadd_ps(y0, _mm256_fmadd_ps(e0, e0, e0), y0);
    y = _mm256_fmadd_ps(y, _mm256_fnmadd_ps(s, y, one), y);
    __m256i mant = _mm256_set1_epi32(0x7fffff);
    __m256i ones = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(s), mant), mant);
    y = _mm256_or_ps(y, _mm256_castsi256_ps(_mm256_srli_epi32(ones, 31)));
    return _mm256_blendv_ps(y, y0, _mm256_cmp_ps(e0, e0, _CMP_UNORD_Q));
}
/* the same bits by the divider, for BF16 rows: with the widening and rounding around it, the FMA
 * form's extra operations cost more than the division there (RSQRT bf16 in L2 on a Zen 4 core
 * 0.31 ns an element by division, 0.43 by FMAs) */
FK_V3_INLINE __m256 fk_v3_rsqrt_div(__m256 x) { return _mm256_div_ps(fk_v3_set(1.0f), _mm256_sqrt_ps(x)); }
FK_V3_INLINE __m256 fk_v3_recip(__m256 x) { return _mm256_div_ps(fk_v3_set(1.0f), x); }
FK_V3_INLINE __m256 fk_v3_relu(__m256 x) { return _mm256_and_ps(x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NLE_UQ)); }
FK_V3_INLINE __m256 fk_v3_floor(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
FK_V3_INLINE __m256 fk_v3_ceil(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
/* ROUND (half to even): a NaN comes out quiet here where the F32 function passes a signaling one
 * through, and the BF16 rounding quiets it either way: the same BF16 bits */
FK_V3_INLINE __m256 fk_v3_round(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* FK_U_SIGN_F: x where x is +-0 or NaN (the ordered not-equal is false there), else 1 with x's sign;
 * 4 operations per 8 lanes where GCC's loop of the two selects took 9 (F32 and BF16 rows) */
FK_V3_INLINE __m256 fk_v3_sign(__m256 x) {
    __m256 one = _mm256_or_ps(_mm256_and_ps(x, fk_v3_set(-0.0f)), fk_v3_set(1.0f));
    return _mm256_blendv_ps(x, one, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_OQ));
}

/* o[i] = F(a[i]) for i < n (a == o allowed), loading 4 vectors ahead of the stores; the tail through an
 * 8-lane buffer */
#define fk_v3_map_f32(F, a, o, n)                                                                  \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        if ((n) >= 64) {                 /* loads a 128-byte block ahead, as fk_v4_map_f32_store */ \
            __m256 x_[4];                                                                          \
            for (int k_ = 0; k_ < 4; k_++) x_[k_] = _mm256_loadu_ps((a) + 8 * k_);                 \
            for (; i_ + 64 <= (n); i_ += 32) {                                                     \
                _Pragma("GCC unroll 4") for (int k_ = 0; k_ < 4; k_++) {                           \
                    __m256 v_ = F(x_[k_]);                                                         \
                    x_[k_] = _mm256_loadu_ps((a) + i_ + 32 + 8 * k_);                              \
                    _mm256_storeu_ps((o) + i_ + 8 * k_, v_);                                       \
                }                                                                                  \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int k_ = 0; k_ < 4; k_++) _mm256_storeu_ps((o) + i_ + 8 * k_, F(x_[k_])); \
            i_ += 32;                                                                              \
        }                                                                                          \
        for (; i_ + 8 <= (n); i_ += 8) _mm256_storeu_ps((o) + i_, F(_mm256_loadu_ps((a) + i_)));   \
        if (i_ < (n)) {                                                                            \
            float t_[8] = {0};                                                                     \
            for (int64_t j_ = 0; j_ < (n) - i_; j_++) t_[j_] = (a)[i_ + j_];                       \
            _mm256_storeu_ps(t_, F(_mm256_loadu_ps(t_)));                                          \
            for (int64_t j_ = 0; j_ < (n) - i_; j_++) (o)[i_ + j_] = t_[j_];                       \
        }                                                                                          \
    } while (0)
/* fk_v3_map_f32 for a function F4 of 4 vectors side by side (F on single vectors for the rest) */
#define fk_v3_map4_f32(F4, F, a, o, n)                                                             \
    do {                                                                                           \
        int64_t i4_ = 0;                                                                           \
        for (; i4_ + 32 <= (n); i4_ += 32) {                                                       \
            __m256 x4_[4], y4_[4];                                                                 \
            for (int v_ = 0; v_ < 4; v_++) x4_[v_] = _mm256_loadu_ps((a) + i4_ + 8 * v_);          \
            F4(x4_, y4_);                                                                          \
            for (int v_ = 0; v_ < 4; v_++) _mm256_storeu_ps((o) + i4_ + 8 * v_, y4_[v_]);          \
        }                                                                                          \
        fk_v3_map_f32(F, (a) + i4_, (o) + i4_, (n) - i4_);                                         \
    } while (0)
#define fk_v3_map_bf16(F, a, o, n)                                                                 \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 16 <= (n); i_ += 16) {                                                         \
            __m256 lo_, hi_;                                                                       \
            fk_v3_bf16_widen2(_mm256_loadu_si256((const __m256i *)((a) + i_)), &lo_, &hi_);        \
            _mm256_storeu_si256((__m256i *)((o) + i_), fk_v3_bf16_pack2(F(lo_), F(hi_)));          \
        }                                                                                          \
        for (; i_ + 8 <= (n); i_ += 8)                                                             \
            _mm_storeu_si128((__m128i *)((o) + i_),                                                \
                             fk_v3_bf16_round(F(fk_v3_bf16_widen(_mm_loadu_si128((const __m128i *)((a) + i_)))))); \
        if (i_ < (n)) {                                                                            \
            uint16_t t_[8] = {0};                                                                  \
            for (int64_t j_ = 0; j_ < (n) - i_; j_++) t_[j_] = (a)[i_ + j_];                       \
            _mm_storeu_si128((__m128i *)t_, fk_v3_bf16_round(F(fk_v3_bf16_widen(_mm_loadu_si128((const __m128i *)t_))))); \
            for (int64_t j_ = 0; j_ < (n) - i_; j_++) (o)[i_ + j_] = t_[j_];                       \
        }                                                                                          \
    } while (0)
/* fk_v3_map_bf16 for a function F4 of 4 vectors side by side (F on single vectors for the rest) */
#define fk_v3_map4_bf16(F4, F, a, o, n)                                                            \
    do {                                                                                           \
        int64_t i4_ = 0;                                                                           \
        for (; i4_ + 32 <= (n); i4_ += 32) {                                                       \
            __m256 x4_[4], y4_[4];                                                                 \
            for (int v_ = 0; v_ < 2; v_++)                                                         \
                fk_v3_bf16_widen2(_mm256_loadu_si256((const __m256i *)((a) + i4_ + 16 * v_)),      \
                                  &x4_[2 * v_], &x4_[2 * v_ + 1]);                                 \
            F4(x4_, y4_);                                                                          \
            for (int v_ = 0; v_ < 2; v_++)                                                         \
                _mm256_storeu_si256((__m256i *)((o) + i4_ + 16 * v_), fk_v3_bf16_pack2(y4_[2 * v_], y4_[2 * v_ + 1])); \
        }                                                                                          \
        fk_v3_map_bf16(F, (a) + i4_, (o) + i4_, (n) - i4_);                                        \
    } while (0)
#endif /* FK_HAVE_ISA_V4 */

#endif /* FUEL_KERNEL_CPU_VECMATH_F32_H */
