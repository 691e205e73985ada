/* Bit-exact conversions between the 16-bit float formats (F16, BF16) and F32/F64.
 *
 * Kernels store F16 and BF16 as uint16_t and compute in F32.  Rounding is round-to-nearest-even
 * everywhere.  F64 -> F16 rounds once, directly (as NumPy does); F64 -> BF16 goes through F32 (as
 * ml_dtypes does), so results match the two libraries users compare against bit for bit.
 */
#ifndef FUEL_KERNEL_HALF_H
#define FUEL_KERNEL_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fk_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float fk_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint64_t fk_f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static inline double fk_bits_f64(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

static inline float fk_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t bits;
    if (em >= 0x7c00u) {
        bits = 0x7f800000u | ((em & 0x3ffu) << 13);            /* inf / NaN, payload kept */
    } else if (em >= 0x0400u) {
        bits = (em << 13) + 0x38000000u;                        /* normal: rebias 15 -> 127 */
    } else {
        bits = fk_f32_bits((float)em * 5.9604644775390625e-08f); /* subnormal: em * 2^-24, exact */
    }
    return fk_bits_f32(bits | sign);
}

static inline uint16_t fk_f32_to_f16(float f) {
    uint32_t x = fk_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {                                    /* inf / NaN */
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);
    }
    if (ax >= 0x477ff000u) return sign | 0x7c00u;              /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                                     /* F16 subnormal or zero */
        /* adding 0.5f aligns the value to units of 2^-24 with round-to-nearest-even */
        float shifted = fk_bits_f32(ax) + 0.5f;
        return sign | (uint16_t)(fk_f32_bits(shifted) - 0x3f000000u);
    }
    ax += 0xc8000fffu + ((ax >> 13) & 1u);                      /* rebias 127 -> 15, round */
    return sign | (uint16_t)(ax >> 13);
}

static inline uint16_t fk_f64_to_f16(double d) {
    uint64_t x = fk_f64_bits(d);
    uint16_t sign = (uint16_t)((x >> 48) & 0x8000u);
    uint64_t ax = x & 0x7fffffffffffffffull;
    if (ax >= 0x7ff0000000000000ull) {
        if (ax == 0x7ff0000000000000ull) return sign | 0x7c00u;
        return sign | 0x7e00u | (uint16_t)((ax >> 42) & 0x3ffu);
    }
    if (ax >= 0x40effe0000000000ull) return sign | 0x7c00u;    /* >= 65520 */
    if (ax < 0x3f10000000000000ull) {                           /* < 2^-14 */
        double shifted = fk_bits_f64(ax) + 268435456.0;         /* 2^28: ulp is 2^-24 */
        return sign | (uint16_t)(fk_f64_bits(shifted) - 0x41b0000000000000ull);
    }
    ax += 0xc100000000000000ull + 0x1ffffffffffull + ((ax >> 42) & 1u);  /* rebias 1023 -> 15 */
    return sign | (uint16_t)(ax >> 42);
}

static inline float fk_bf16_to_f32(uint16_t h) { return fk_bits_f32((uint32_t)h << 16); }

static inline uint16_t fk_f32_to_bf16(float f) {
    uint32_t x = fk_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline double fk_f16_to_f64(uint16_t h) { return (double)fk_f16_to_f32(h); }
static inline double fk_bf16_to_f64(uint16_t h) { return (double)fk_bf16_to_f32(h); }
static inline uint16_t fk_f64_to_bf16(double d) { return fk_f32_to_bf16((float)d); }

#endif /* FUEL_KERNEL_HALF_H */
