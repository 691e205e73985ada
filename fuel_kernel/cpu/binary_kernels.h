/* CPU binary arithmetic kernels: ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, REM on every numeric
 * dtype (BOOL for ADD, MUL, MAXIMUM, MINIMUM), and their manifest.  Key: [T, T, T].
 *
 * Semantics (NumPy's, so users can compare against np.<ufunc>):
 *   integers   ADD, SUB, MUL, POW wrap around (two's complement, modulo 2^bits).
 *              DIV is floor division (np.floor_divide); REM is the floor remainder with the sign
 *              of the divisor (np.remainder); MIN // -1 wraps to MIN and MIN % -1 is 0.
 *              A zero divisor anywhere in the operand fails the whole call with
 *              FK_ERR_ZERO_DIVISION (KernelZeroDivisionError) before anything is written.
 *              POW with a negative exponent anywhere fails with FK_ERR_PARAMS (ParamsError, a
 *              ValueError, as NumPy raises) before anything is written.
 *   BOOL       ADD and MAXIMUM are logical or, MUL and MINIMUM logical and (as NumPy on bool).
 *   floats     IEEE arithmetic; MAXIMUM/MINIMUM propagate NaN (np.maximum/np.minimum) and return
 *              the second operand on ties (so max(-0.0, 0.0) is 0.0, as NumPy's f32/f64 loops);
 *              REM is np.remainder (fmod, then moved to the divisor's sign; zero gets the
 *              divisor's sign); POW is C pow in F64 and, in F32 (F16/BF16 through it), the
 *              vectorized fk_fast_powf of vecmath_f32.h (C pow's special cases, <= 2 ulp).
 *   F16, BF16  computed in F32 and rounded once (as NumPy for F16 and ml_dtypes for BF16).
 * Every operand may be strided, broadcast (stride 0), negative-stride, offset or transposed.
 */
#ifndef FUEL_KERNEL_CPU_BINARY_KERNELS_H
#define FUEL_KERNEL_CPU_BINARY_KERNELS_H

#include "elementwise_kernels.h"
#include "vecmath_f32.h"

/* ---- scalar semantics: FK_E_<OP>_<KIND>(x, y, T) with KIND in SINT, UINT, FLT, BOOL ------------ */
#define FK_TG(F, x) _Generic((x), float: F##f, default: F)

#define FK_WRAP(T, x, OPR, y) ((T)((uint64_t)(x) OPR (uint64_t)(y)))
#define FK_E_ADD_SINT(x, y, T) FK_WRAP(T, x, +, y)
#define FK_E_ADD_UINT(x, y, T) FK_WRAP(T, x, +, y)
#define FK_E_ADD_FLT(x, y, T) ((x) + (y))
#define FK_E_ADD_BOOL(x, y, T) ((uint8_t)(((x) != 0) | ((y) != 0)))
#define FK_E_SUB_SINT(x, y, T) FK_WRAP(T, x, -, y)
#define FK_E_SUB_UINT(x, y, T) FK_WRAP(T, x, -, y)
#define FK_E_SUB_FLT(x, y, T) ((x) - (y))
#define FK_E_MUL_SINT(x, y, T) FK_WRAP(T, x, *, y)
#define FK_E_MUL_UINT(x, y, T) FK_WRAP(T, x, *, y)
#define FK_E_MUL_FLT(x, y, T) ((x) * (y))
#define FK_E_MUL_BOOL(x, y, T) ((uint8_t)(((x) != 0) & ((y) != 0)))
#define FK_E_DIV_SINT(x, y, T) ((T)fk_floordiv_i64((int64_t)(x), (int64_t)(y)))
#define FK_E_DIV_UINT(x, y, T) ((T)((x) / (y)))
#define FK_E_DIV_FLT(x, y, T) ((x) / (y))
#define FK_E_MAXIMUM_SINT(x, y, T) ((x) > (y) ? (x) : (y))
#define FK_E_MAXIMUM_UINT(x, y, T) ((x) > (y) ? (x) : (y))
#define FK_E_MAXIMUM_FLT(x, y, T) ((x) != (x) ? (x) : ((y) != (y) ? (y) : ((x) > (y) ? (x) : (y))))
#define FK_E_MAXIMUM_BOOL(x, y, T) FK_E_ADD_BOOL(x, y, T)
#define FK_E_MINIMUM_SINT(x, y, T) ((x) < (y) ? (x) : (y))
#define FK_E_MINIMUM_UINT(x, y, T) ((x) < (y) ? (x) : (y))
#define FK_E_MINIMUM_FLT(x, y, T) ((x) != (x) ? (x) : ((y) != (y) ? (y) : ((x) < (y) ? (x) : (y))))
#define FK_E_MINIMUM_BOOL(x, y, T) FK_E_MUL_BOOL(x, y, T)
#define FK_E_POW_SINT(x, y, T) ((T)fk_ipow_u64((uint64_t)(x), (uint64_t)(y)))
#define FK_E_POW_UINT(x, y, T) ((T)fk_ipow_u64((uint64_t)(x), (uint64_t)(y)))
#define FK_E_POW_FLT(x, y, T) _Generic((x), float: fk_fast_powf, default: pow)((x), (y))
#define FK_E_REM_SINT(x, y, T) ((T)fk_floormod_i64((int64_t)(x), (int64_t)(y)))
#define FK_E_REM_UINT(x, y, T) ((T)((x) % (y)))
#define FK_E_REM_FLT(x, y, T) _Generic((x), float: fk_remainder_f32, default: fk_remainder_f64)((x), (y))

/* y != 0 is checked by the caller; y == -1 is split off because MIN / -1 overflows in C */
static inline int64_t fk_floordiv_i64(int64_t x, int64_t y) {
    if (y == -1) return (int64_t)(0 - (uint64_t)x);
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
    return q;
}
static inline int64_t fk_floormod_i64(int64_t x, int64_t y) {
    if (y == -1) return 0;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
/* NumPy's npy_divmod remainder */
#define FK_DEFINE_REMAINDER(NAME, T, FMOD, COPYSIGN)                                             \
    static inline T fk_remainder_##NAME(T a, T b) {                                              \
        T mod = FMOD(a, b);                                                                      \
        if (!b) return mod;                                                                      \
        if (mod) {                                                                               \
            if ((b < 0) != (mod < 0)) mod += b;                                                  \
        } else {                                                                                 \
            mod = COPYSIGN((T)0, b);                                                             \
        }                                                                                        \
        return mod;                                                                              \
    }
FK_DEFINE_REMAINDER(f32, float, fmodf, copysignf)
FK_DEFINE_REMAINDER(f64, double, fmod, copysign)

/* build mode of each vector loop (FK_MV_* of elementwise_kernels.h): memory-bound streams, except
 * the F32 pow polynomials */
#define FK_MV_POW_F32 FK_MV_COMPUTE
#define FK_MV_ADD_F32 FK_MV_STREAM
#define FK_MV_SUB_F32 FK_MV_STREAM
#define FK_MV_MUL_F32 FK_MV_STREAM
#define FK_MV_DIV_F32 FK_MV_STREAM
#define FK_MV_MAXIMUM_F32 FK_MV_STREAM
#define FK_MV_MINIMUM_F32 FK_MV_STREAM
#define FK_MV_REM_F32 FK_MV_STREAM

/* ---- pre-write checks ---------------------------------------------------------------------------- */
FK_DEFINE_SCAN(zero_u8, uint8_t, v == 0)
FK_DEFINE_SCAN(zero_i8, int8_t, v == 0)
FK_DEFINE_SCAN(zero_i16, int16_t, v == 0)
FK_DEFINE_SCAN(zero_i32, int32_t, v == 0)
FK_DEFINE_SCAN(zero_i64, int64_t, v == 0)
FK_DEFINE_SCAN(zero_u32, uint32_t, v == 0)
FK_DEFINE_SCAN(negative_i8, int8_t, v < 0)
FK_DEFINE_SCAN(negative_i16, int16_t, v < 0)
FK_DEFINE_SCAN(negative_i32, int32_t, v < 0)
FK_DEFINE_SCAN(negative_i64, int64_t, v < 0)

#define FK_PRE_NONZERO(OP, N)                                                                    \
    if (fk_scan_zero_##N(&loop, 1)) {                                                            \
        fk_set_error(FK_ERR_ZERO_DIVISION, #OP ": integer division by zero (input 1 holds a 0)"); \
        return FK_ERR_ZERO_DIVISION;                                                             \
    }
#define FK_PRE_NONNEG(OP, N)                                                                     \
    if (fk_scan_negative_##N(&loop, 1)) {                                                        \
        fk_set_error(FK_ERR_PARAMS, #OP ": integers to negative integer powers are not allowed "  \
                     "(input 1 holds a negative exponent)");                                     \
        return FK_ERR_PARAMS;                                                                    \
    }

#define FK_GEN_NATIVE(OP, D, T, KIND, PRE, N) FK_GEN_NATIVE_MV(OP, D, T, KIND, PRE, N, FK_MV_STREAM)
#define FK_GEN_NATIVE_MV(OP, D, T, KIND, PRE, N, MV)                                             \
    FK_BINARY_VEC_MV(OP, D, T, T, FK_E_##OP##_##KIND, MV)                                        \
    FK_BINARY_ROW_NATIVE(OP, D, T, T, FK_E_##OP##_##KIND)                                        \
    FK_BINARY_KERNEL(OP, D, D, PRE, N)
#define FK_GEN_HALF(OP, D, LOAD, STORE)                                                          \
    FK_BINARY_ROW_HALF(OP, D, LOAD, fk_vec_##OP##_F32, float, STORE)                             \
    FK_BINARY_KERNEL(OP, D, D, FK_PRE_NONE, f32)

/* F16 ADD/SUB/MUL/DIV on contiguous rows: one fused F16C pass (widen 8 lanes, compute in F32,
 * round to nearest even) instead of the chunked widen / compute / narrow passes.  Same bits: both
 * round the F32 result once.  Other layouts and CPUs without x86-64-v3 take the chunked path. */
#define FK_F16_FUSED(OP, VOP, SOP)                                                               \
    __attribute__((target("arch=x86-64-v3"))) static void fk_f16_fused_##OP(                     \
            const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n) {                      \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= n; i += 8) {                                                             \
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));               \
            __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));               \
            _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(VOP(x, y), _MM_FROUND_TO_NEAREST_INT)); \
        }                                                                                        \
        for (; i < n; i++) o[i] = fk_f32_to_f16(SOP(fk_f16_to_f32(a[i]), fk_f16_to_f32(b[i])));  \
    }
#define FK_SADD(x, y) ((x) + (y))
#define FK_SSUB(x, y) ((x) - (y))
#define FK_SMUL(x, y) ((x) * (y))
#define FK_SDIV(x, y) ((x) / (y))
#define FK_GEN_F16_FUSED(OP, VOP, SOP)                                                           \
    FK_BINARY_ROW_HALF(OP, F16_chunked, fk_load_f16_row, fk_vec_##OP##_F32, float, fk_store_f16_row) \
    FK_F16_FUSED(OP, VOP, SOP)                                                                   \
    static void fk_row_##OP##_F16(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        if (s[0] == 2 && s[1] == 2 && s[2] == 2 && fk_cpu_level() >= 3) {                        \
            fk_f16_fused_##OP((const uint16_t *)p[0], (const uint16_t *)p[1], (uint16_t *)p[2], n); \
            return;                                                                              \
        }                                                                                        \
        fk_row_##OP##_F16_chunked(p, s, n, ctx);                                                 \
    }                                                                                            \
    FK_BINARY_KERNEL(OP, F16, F16, FK_PRE_NONE, f32)
#define FK_GEN_F16_ADD FK_GEN_F16_FUSED(ADD, _mm256_add_ps, FK_SADD)
#define FK_GEN_F16_SUB FK_GEN_F16_FUSED(SUB, _mm256_sub_ps, FK_SSUB)
#define FK_GEN_F16_MUL FK_GEN_F16_FUSED(MUL, _mm256_mul_ps, FK_SMUL)
#define FK_GEN_F16_DIV FK_GEN_F16_FUSED(DIV, _mm256_div_ps, FK_SDIV)
#define FK_GEN_BF16_PLAIN(OP)                                                                    \
    FK_BINARY_ROW_BF16(OP, float, fk_store_bf16_row, uint16_t, FK_E_##OP##_FLT, FK_BF16_STORE_FLOAT) \
    FK_BINARY_KERNEL(OP, BF16, BF16, FK_PRE_NONE, f32)
#define FK_GEN_BF16_FAST(OP, VOP, SOP)                                                           \
    FK_BINARY_ROW_BF16(OP##_plain, float, fk_store_bf16_row, uint16_t, FK_E_##OP##_FLT, FK_BF16_STORE_FLOAT) \
    FK_BF16_FUSED(OP, VOP, SOP)                                                                  \
    static void fk_row_##OP##_BF16(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        if (s[0] == 2 && s[1] == 2 && s[2] == 2 && fk_cpu_level() >= 3) {                        \
            fk_bf16_fused_##OP((const uint16_t *)p[0], (const uint16_t *)p[1], (uint16_t *)p[2], n); \
            return;                                                                              \
        }                                                                                        \
        fk_row_##OP##_plain_BF16(p, s, n, ctx);                                                  \
    }                                                                                            \
    FK_BINARY_KERNEL(OP, BF16, BF16, FK_PRE_NONE, f32)
/* the renamed plain rows reuse the F32 vector loops of their op */
#define fk_vec_ADD_plain_F32 fk_vec_ADD_F32
#define fk_vec_SUB_plain_F32 fk_vec_SUB_F32
#define fk_vec_MUL_plain_F32 fk_vec_MUL_F32
#define fk_vec_DIV_plain_F32 fk_vec_DIV_F32
#define FK_GEN_BF16_ADD FK_GEN_BF16_FAST(ADD, _mm256_add_ps, FK_SADD)
#define FK_GEN_BF16_SUB FK_GEN_BF16_FAST(SUB, _mm256_sub_ps, FK_SSUB)
#define FK_GEN_BF16_MUL FK_GEN_BF16_FAST(MUL, _mm256_mul_ps, FK_SMUL)
#define FK_GEN_BF16_DIV FK_GEN_BF16_FAST(DIV, _mm256_div_ps, FK_SDIV)
#define FK_GEN_BF16_MAXIMUM FK_GEN_BF16_PLAIN(MAXIMUM)
#define FK_GEN_BF16_MINIMUM FK_GEN_BF16_PLAIN(MINIMUM)
#define FK_GEN_BF16_POW FK_GEN_BF16_PLAIN(POW)
#define FK_GEN_BF16_REM FK_GEN_BF16_PLAIN(REM)
#define FK_GEN_F16_MAXIMUM FK_GEN_HALF(MAXIMUM, F16, fk_load_f16_row, fk_store_f16_row)
#define FK_GEN_F16_MINIMUM FK_GEN_HALF(MINIMUM, F16, fk_load_f16_row, fk_store_f16_row)
#define FK_GEN_F16_POW FK_GEN_HALF(POW, F16, fk_load_f16_row, fk_store_f16_row)
#define FK_GEN_F16_REM FK_GEN_HALF(REM, F16, fk_load_f16_row, fk_store_f16_row)

/* BF16 ADD/SUB/MUL/DIV on contiguous rows, the same way: widening is a 16-bit shift, narrowing is
 * fk_f32_to_bf16's round-to-nearest-even (quiet NaN kept) done on 8 lanes at once. */
__attribute__((target("arch=x86-64-v3"))) static inline __m256 fk_bf16x8_load(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
__attribute__((target("arch=x86-64-v3"))) static inline void fk_bf16x8_store(uint16_t *p, __m256 r) {
    __m256i u = _mm256_castps_si256(r);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    __m256i bits = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1)));
}
#define FK_BF16_FUSED(OP, VOP, SOP)                                                              \
    __attribute__((target("arch=x86-64-v3"))) static void fk_bf16_fused_##OP(                    \
            const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n) {                      \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= n; i += 8) fk_bf16x8_store(o + i, VOP(fk_bf16x8_load(a + i), fk_bf16x8_load(b + i))); \
        for (; i < n; i++) o[i] = fk_f32_to_bf16(SOP(fk_bf16_to_f32(a[i]), fk_bf16_to_f32(b[i]))); \
    }

/* every numeric dtype; PRE_S / PRE_U are the pre-write checks for signed / unsigned integers */
#define FK_GEN_NUMERIC(OP, PRE_S, PRE_U)                                                         \
    FK_GEN_NATIVE_MV(OP, F32, float, FLT, FK_PRE_NONE, f32, FK_MV_##OP##_F32)                    \
    FK_GEN_NATIVE(OP, F64, double, FLT, FK_PRE_NONE, f64)                                        \
    FK_GEN_F16_##OP                                                                              \
    FK_GEN_BF16_##OP                                                                             \
    FK_GEN_NATIVE(OP, U8, uint8_t, UINT, PRE_U, u8)                                              \
    FK_GEN_NATIVE(OP, I8, int8_t, SINT, PRE_S, i8)                                               \
    FK_GEN_NATIVE(OP, I16, int16_t, SINT, PRE_S, i16)                                            \
    FK_GEN_NATIVE(OP, I32, int32_t, SINT, PRE_S, i32)                                            \
    FK_GEN_NATIVE(OP, I64, int64_t, SINT, PRE_S, i64)                                            \
    FK_GEN_NATIVE(OP, U32, uint32_t, UINT, PRE_U, u32)
#define FK_GEN_BOOL(OP) FK_GEN_NATIVE(OP, BOOL, uint8_t, BOOL, FK_PRE_NONE, u8)

FK_GEN_NUMERIC(ADD, FK_PRE_NONE, FK_PRE_NONE)
FK_GEN_NUMERIC(SUB, FK_PRE_NONE, FK_PRE_NONE)
FK_GEN_NUMERIC(MUL, FK_PRE_NONE, FK_PRE_NONE)
FK_GEN_NUMERIC(DIV, FK_PRE_NONZERO, FK_PRE_NONZERO)
FK_GEN_NUMERIC(MAXIMUM, FK_PRE_NONE, FK_PRE_NONE)
FK_GEN_NUMERIC(MINIMUM, FK_PRE_NONE, FK_PRE_NONE)
FK_GEN_NUMERIC(POW, FK_PRE_NONNEG, FK_PRE_NONE)
FK_GEN_NUMERIC(REM, FK_PRE_NONZERO, FK_PRE_NONZERO)
FK_GEN_BOOL(ADD)
FK_GEN_BOOL(MUL)
FK_GEN_BOOL(MAXIMUM)
FK_GEN_BOOL(MINIMUM)

/* ---- manifest ------------------------------------------------------------------------------------ */
/* revision: 'e1' family tag, op, dtype, implementation version */
#define FK_BINARY_REV(OP, D) (0xe100000000000000ull | ((uint64_t)FK_OP_##OP << 24) | ((uint64_t)FK_##D << 16) | 1u)
/* C names a claim macro FK_CLAIM_<C> (pasted, so its commas never split a macro argument) */
#define FK_BINARY_ENTRY(OP, D, C)                                                                \
    {FK_OP_##OP, {3, {FK_##D, FK_##D, FK_##D}},                                                  \
     {fk_##OP##_##D, FK_ELEMENTWISE_CAPS, 0, FK_CLAIM_##C, fk_cost_simple, "native", FK_BINARY_REV(OP, D)}},

#define FK_CLAIM_POW FK_CLAIM(1, "C pow; <= 1 ulp of the correctly rounded result")
#define FK_CLAIM_POW32 FK_CLAIM(2, "vectorized exp2(y log2|x|) in two-float precision, C pow special cases")
#define FK_CLAIM_POW_HALF FK_CLAIM(1, "the F32 pow, rounded once")
#define FK_CLAIM_HALF_EXACT FK_CLAIM(0, "computed in F32, rounded once: correctly rounded")
#define FK_CLAIM_REM FK_CLAIM(0, "bit-exact with np.remainder (fmod then sign fix-up)")
#define FK_BINARY_ENTRIES(OP, FLT_CLAIM, HALF_CLAIM)                                             \
    FK_BINARY_ENTRY(OP, F32, FLT_CLAIM) FK_BINARY_ENTRY(OP, F64, FLT_CLAIM)                      \
    FK_BINARY_ENTRY(OP, F16, HALF_CLAIM) FK_BINARY_ENTRY(OP, BF16, HALF_CLAIM)                   \
    FK_BINARY_ENTRY(OP, U8, EXACT) FK_BINARY_ENTRY(OP, I8, EXACT)              \
    FK_BINARY_ENTRY(OP, I16, EXACT) FK_BINARY_ENTRY(OP, I32, EXACT)            \
    FK_BINARY_ENTRY(OP, I64, EXACT) FK_BINARY_ENTRY(OP, U32, EXACT)

static const fk_manifest_row fk_binary_manifest[] = {
    FK_BINARY_ENTRIES(ADD, EXACT, HALF_EXACT)
    FK_BINARY_ENTRIES(SUB, EXACT, HALF_EXACT)
    FK_BINARY_ENTRIES(MUL, EXACT, HALF_EXACT)
    FK_BINARY_ENTRIES(DIV, EXACT, HALF_EXACT)
    FK_BINARY_ENTRIES(MAXIMUM, EXACT, EXACT)
    FK_BINARY_ENTRIES(MINIMUM, EXACT, EXACT)
    FK_BINARY_ENTRY(POW, F32, POW32) FK_BINARY_ENTRY(POW, F64, POW)
    FK_BINARY_ENTRY(POW, F16, POW_HALF) FK_BINARY_ENTRY(POW, BF16, POW_HALF)
    FK_BINARY_ENTRY(POW, U8, EXACT) FK_BINARY_ENTRY(POW, I8, EXACT) FK_BINARY_ENTRY(POW, I16, EXACT)
    FK_BINARY_ENTRY(POW, I32, EXACT) FK_BINARY_ENTRY(POW, I64, EXACT) FK_BINARY_ENTRY(POW, U32, EXACT)
    FK_BINARY_ENTRIES(REM, REM, REM)
    FK_BINARY_ENTRY(ADD, BOOL, EXACT)
    FK_BINARY_ENTRY(MUL, BOOL, EXACT)
    FK_BINARY_ENTRY(MAXIMUM, BOOL, EXACT)
    FK_BINARY_ENTRY(MINIMUM, BOOL, EXACT)
};
static const int fk_binary_manifest_len = (int)(sizeof(fk_binary_manifest) / sizeof(fk_binary_manifest[0]));

#endif /* FUEL_KERNEL_CPU_BINARY_KERNELS_H */
