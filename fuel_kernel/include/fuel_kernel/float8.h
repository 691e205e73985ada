/* Bit-exact conversions between the 8-bit float formats (F8E4M3, F8E5M2) and F32/F64.
 *
 * Kernels store FP8 as uint8_t and compute in F32 (every FP8 value is exact in F32, F16 and BF16).
 * The results are those of ml_dtypes (float8_e4m3fn, float8_e5m2), bit for bit:
 *   F8E4M3 ("fn": bias 7, 3 mantissa bits, largest finite 448, no infinity, NaN = S.1111.111):
 *     to F8E4M3  round to nearest even; a result past 448 (|x| > 464, infinities included) and
 *                every NaN give the NaN of the input's sign.
 *   F8E5M2 (IEEE-style: bias 15, 2 mantissa bits, largest finite 57344, infinities, NaNs):
 *     to F8E5M2  round to nearest even; a result past 57344 (|x| >= 61440) gives the infinity of
 *                its sign; every NaN gives the quiet NaN S.11111.10 (payloads are dropped).
 *   F32 and F64 both round once, directly (ml_dtypes converts F64 directly too: 1 + 2^-4 + 2^-40
 *   gives F8E4M3 1.125, where a detour through F32 would give 1.0).
 *   from FP8   exact; a NaN (any payload) gives the quiet NaN of its sign with a zero payload.
 * Signed zeros and subnormals (down to 2^-9 for E4M3, 2^-16 for E5M2) are kept.
 */
#ifndef FUEL_KERNEL_FLOAT8_H
#define FUEL_KERNEL_FLOAT8_H

#include <stdint.h>

#include "fuel_kernel/half.h"

/* ---- FP8 -> F32 (exact) ------------------------------------------------------------------------ */
static inline float fk_f8e4m3_to_f32(uint8_t v) {
    uint32_t sign = (uint32_t)(v & 0x80u) << 24, em = v & 0x7fu;
    if (em == 0x7fu) return fk_bits_f32(sign | 0x7fc00000u);               /* the NaN */
    if (em >= 0x08u) return fk_bits_f32(sign | ((em << 20) + (120u << 23)));  /* normal: bias 7 -> 127 */
    return fk_bits_f32(sign | fk_f32_bits((float)em * 0.001953125f));       /* subnormal: em * 2^-9 */
}

static inline float fk_f8e5m2_to_f32(uint8_t v) {
    uint32_t sign = (uint32_t)(v & 0x80u) << 24, em = v & 0x7fu;
    if (em > 0x7cu) return fk_bits_f32(sign | 0x7fc00000u);                /* NaN: payload dropped */
    return fk_f16_to_f32((uint16_t)((uint16_t)v << 8));                     /* E5M2 is F16's top byte */
}

static inline double fk_f8e4m3_to_f64(uint8_t v) { return (double)fk_f8e4m3_to_f32(v); }
static inline double fk_f8e5m2_to_f64(uint8_t v) { return (double)fk_f8e5m2_to_f32(v); }

/* ---- F32 / F64 -> FP8: one rounding to nearest even ------------------------------------------- */
/* Below the smallest normal, adding C (a power of two whose ulp is the FP8 subnormal step) rounds
 * the value to a multiple of that step, and C's bits subtracted leave the step count: the code
 * (a count of 2^(mantissa bits) is the smallest normal, so rounding up into it is right too).
 * Above, the exponent is rebiased and the dropped mantissa bits rounded in the integer bits. */
static inline uint8_t fk_f32_to_f8e4m3(float f) {
    uint32_t x = fk_f32_bits(f), ax = x & 0x7fffffffu, code;
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    if (ax >= 0x7f800000u) return sign | 0x7fu;                 /* inf, NaN -> NaN */
    if (ax < 0x3c800000u)                                       /* < 2^-6: steps of 2^-9 */
        return sign | (uint8_t)(fk_f32_bits(fk_bits_f32(ax) + 16384.0f) - 0x46800000u);  /* + 2^14 */
    code = (ax - (120u << 23) + 0x7ffffu + ((ax >> 20) & 1u)) >> 20;
    return sign | (uint8_t)(code > 0x7eu ? 0x7fu : code);      /* past 448 -> NaN */
}

static inline uint8_t fk_f64_to_f8e4m3(double d) {
    uint64_t x = fk_f64_bits(d), ax = x & 0x7fffffffffffffffull, code;
    uint8_t sign = (uint8_t)((x >> 56) & 0x80u);
    if (ax >= 0x7ff0000000000000ull) return sign | 0x7fu;
    if (ax < 0x3f90000000000000ull)                             /* < 2^-6 */
        return sign | (uint8_t)(fk_f64_bits(fk_bits_f64(ax) + 8796093022208.0) - 0x42a0000000000000ull);  /* + 2^43 */
    code = (ax - (1016ull << 52) + 0xffffffffffffull + ((ax >> 49) & 1u)) >> 49;
    return sign | (uint8_t)(code > 0x7eu ? 0x7fu : code);
}

static inline uint8_t fk_f32_to_f8e5m2(float f) {
    uint32_t x = fk_f32_bits(f), ax = x & 0x7fffffffu, code;
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    if (ax > 0x7f800000u) return sign | 0x7eu;                  /* NaN */
    if (ax < 0x38800000u)                                       /* < 2^-14: steps of 2^-16 */
        return sign | (uint8_t)(fk_f32_bits(fk_bits_f32(ax) + 128.0f) - 0x43000000u);     /* + 2^7 */
    if (ax >= 0x47700000u) return sign | 0x7cu;                 /* >= 61440 (and inf) -> inf */
    code = (ax - (112u << 23) + 0xfffffu + ((ax >> 21) & 1u)) >> 21;
    return sign | (uint8_t)code;
}

static inline uint8_t fk_f64_to_f8e5m2(double d) {
    uint64_t x = fk_f64_bits(d), ax = x & 0x7fffffffffffffffull, code;
    uint8_t sign = (uint8_t)((x >> 56) & 0x80u);
    if (ax > 0x7ff0000000000000ull) return sign | 0x7eu;
    if (ax < 0x3f10000000000000ull)                             /* < 2^-14 */
        return sign | (uint8_t)(fk_f64_bits(fk_bits_f64(ax) + 68719476736.0) - 0x4230000000000000ull);  /* + 2^36 */
    if (ax >= 0x40ee000000000000ull) return sign | 0x7cu;       /* >= 61440 */
    code = (ax - (1008ull << 52) + 0x1ffffffffffffull + ((ax >> 50) & 1u)) >> 50;
    return sign | (uint8_t)code;
}

#endif /* FUEL_KERNEL_FLOAT8_H */
