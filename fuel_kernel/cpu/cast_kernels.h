/* CPU CAST (every dtype pair) and CONTIGUIZE (every dtype) kernels and their manifest.
 *
 * Conversion rules (also in the README):
 *   int -> int        two's-complement wrap-around, as NumPy's astype.
 *   float -> int      truncate toward zero, then saturate to the target range; NaN -> 0.
 *                     (NumPy leaves out-of-range results undefined; C makes them UB.)
 *   x -> bool         x != 0 (NaN -> true).       bool -> x: 0 or 1.
 *   -> F16            round to nearest even, once (F64 -> F16 directly, as NumPy).
 *   -> BF16           round to nearest even via F32 (as ml_dtypes).
 *   T -> T, CONTIGUIZE  a bit-exact copy (NaN payloads kept).
 * The input broadcasts to the output's shape; strided, negative-stride and offset views of
 * either side are walked directly.
 */
#ifndef FUEL_KERNEL_CPU_CAST_KERNELS_H
#define FUEL_KERNEL_CPU_CAST_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "fuel_kernel/abi.h"
#include "fuel_kernel/half.h"
#include "fuel_kernel/strided.h"

/* ---- saturating float -> int ---------------------------------------------------------------- */
#define FK_DEFINE_SATURATE(NAME, CTYPE, LO, HI)                                                  \
    static inline CTYPE fk_saturate_##NAME(double v) {                                          \
        if (v != v) return 0;                                                                    \
        if (v <= (double)(LO)) return (CTYPE)(LO);                                               \
        if (v >= (double)(HI)) return (CTYPE)(HI);                                               \
        return (CTYPE)v;                                                                         \
    }
FK_DEFINE_SATURATE(u8, uint8_t, 0, UINT8_MAX)
FK_DEFINE_SATURATE(i8, int8_t, INT8_MIN, INT8_MAX)
FK_DEFINE_SATURATE(i16, int16_t, INT16_MIN, INT16_MAX)
FK_DEFINE_SATURATE(i32, int32_t, INT32_MIN, INT32_MAX)
FK_DEFINE_SATURATE(u32, uint32_t, 0, UINT32_MAX)
/* 2^63 is exactly representable while INT64_MAX is not: compare against +-2^63 */
static inline int64_t fk_saturate_i64(double v) {
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

/* ---- load: storage element -> compute value --------------------------------------------------- */
#define FK_LOAD_BOOL(x) ((uint8_t)((x) != 0))
#define FK_LOAD_U8(x) (x)
#define FK_LOAD_I8(x) (x)
#define FK_LOAD_I16(x) (x)
#define FK_LOAD_I32(x) (x)
#define FK_LOAD_I64(x) (x)
#define FK_LOAD_U32(x) (x)
#define FK_LOAD_F16(x) fk_f16_to_f32(x)
#define FK_LOAD_BF16(x) fk_bf16_to_f32(x)
#define FK_LOAD_F32(x) (x)
#define FK_LOAD_F64(x) (x)

/* ---- store: compute value (any C arithmetic type) -> storage element ------------------------- */
#define FK_STORE_INT(NAME, CTYPE, v) \
    _Generic((v), float: fk_saturate_##NAME((double)(v)), double: fk_saturate_##NAME((double)(v)), default: (CTYPE)(v))
#define FK_STORE_BOOL(v) ((uint8_t)((v) != 0))
#define FK_STORE_U8(v) FK_STORE_INT(u8, uint8_t, v)
#define FK_STORE_I8(v) FK_STORE_INT(i8, int8_t, v)
#define FK_STORE_I16(v) FK_STORE_INT(i16, int16_t, v)
#define FK_STORE_I32(v) FK_STORE_INT(i32, int32_t, v)
#define FK_STORE_I64(v) FK_STORE_INT(i64, int64_t, v)
#define FK_STORE_U32(v) FK_STORE_INT(u32, uint32_t, v)
#define FK_STORE_F16(v) \
    _Generic((v), float: fk_f32_to_f16((float)(v)), double: fk_f64_to_f16((double)(v)), default: fk_f64_to_f16((double)(v)))
#define FK_STORE_BF16(v) \
    _Generic((v), double: fk_f64_to_bf16((double)(v)), default: fk_f32_to_bf16((float)(v)))
#define FK_STORE_F32(v) ((float)(v))
#define FK_STORE_F64(v) ((double)(v))

/* ---- kernels ---------------------------------------------------------------------------------- */
#define FK_CAST_KERNEL(S, ST, D, DT)                                                             \
    static void fk_cast_row_##S##_##D(const char *src, int64_t ss, char *dst, int64_t ds, int64_t n) { \
        if (FK_##S == FK_##D) { /* identity: bit-exact copy */                                  \
            if (ss == (int64_t)sizeof(ST) && ds == (int64_t)sizeof(DT)) {                       \
                memmove(dst, src, (size_t)n * sizeof(DT));                                      \
            } else {                                                                             \
                for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, sizeof(DT)); \
            }                                                                                    \
        } else if (ss == (int64_t)sizeof(ST) && ds == (int64_t)sizeof(DT)) {                    \
            const ST *s = (const ST *)src;                                                       \
            DT *d = (DT *)dst;                                                                   \
            for (int64_t i = 0; i < n; i++) d[i] = (DT)FK_STORE_##D(FK_LOAD_##S(s[i]));         \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                      \
                *(DT *)(dst + i * ds) = (DT)FK_STORE_##D(FK_LOAD_##S(*(const ST *)(src + i * ss))); \
        }                                                                                        \
    }                                                                                            \
    static int fk_cast_##S##_##D(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                 const fk_layout *layouts, const fk_params *params) {          \
        (void)params;                                                                            \
        return fk_run_unary_rows(inputs, n_in, outputs, n_out, layouts, FK_##S, FK_##D,          \
                                 fk_cast_row_##S##_##D);                                         \
    }

#define FK_FOR_EACH_TARGET(M, S, ST)                                                            \
    M(S, ST, BOOL, uint8_t) M(S, ST, U8, uint8_t) M(S, ST, I8, int8_t) M(S, ST, I16, int16_t)   \
    M(S, ST, I32, int32_t) M(S, ST, I64, int64_t) M(S, ST, U32, uint32_t)                      \
    M(S, ST, F16, uint16_t) M(S, ST, BF16, uint16_t) M(S, ST, F32, float) M(S, ST, F64, double)

#define FK_FOR_EACH_SOURCE(M)                                                                    \
    FK_FOR_EACH_TARGET(M, BOOL, uint8_t) FK_FOR_EACH_TARGET(M, U8, uint8_t)                      \
    FK_FOR_EACH_TARGET(M, I8, int8_t) FK_FOR_EACH_TARGET(M, I16, int16_t)                        \
    FK_FOR_EACH_TARGET(M, I32, int32_t) FK_FOR_EACH_TARGET(M, I64, int64_t)                      \
    FK_FOR_EACH_TARGET(M, U32, uint32_t) FK_FOR_EACH_TARGET(M, F16, uint16_t)                    \
    FK_FOR_EACH_TARGET(M, BF16, uint16_t) FK_FOR_EACH_TARGET(M, F32, float)                      \
    FK_FOR_EACH_TARGET(M, F64, double)

FK_FOR_EACH_SOURCE(FK_CAST_KERNEL)

/* ---- cost ------------------------------------------------------------------------------------- */
static fk_cost fk_copy_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                            const fk_params *params) {
    fk_cost cost = {0.0, 0.0, 40.0};
    double n = n_layouts >= 2 ? (double)fk_layout_numel(&layouts[1]) : 0.0;
    (void)params;
    cost.flops = dtypes->v[0] == dtypes->v[1] ? 0.0 : n;
    cost.bytes_moved = n * (fk_dtype_itemsize[dtypes->v[0]] + fk_dtype_itemsize[dtypes->v[1]]);
    return cost;
}

/* ---- manifest --------------------------------------------------------------------------------- */
#define FK_COPY_CAPS (FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT | FK_CAP_INPLACE)
#define FK_EXACT_CAST {1, 1, {0, 0}, 0, 0.0, 0.0, "exact: conversion rules in the module docs"}
#define FK_CAST_ROW(S, ST, D, DT)                                                                \
    {FK_OP_CAST, {2, {FK_##S, FK_##D}},                                                          \
     {fk_cast_##S##_##D, FK_COPY_CAPS, 0, FK_EXACT_CAST, fk_copy_cost, "native",                 \
      0xca57000000000000ull | ((uint64_t)FK_##S << 8) | (uint64_t)FK_##D}},
#define FK_CONTIGUIZE_ROW(S, ST)                                                                 \
    {FK_OP_CONTIGUIZE, {2, {FK_##S, FK_##S}},                                                    \
     {fk_cast_##S##_##S, FK_COPY_CAPS, 0, {1, 1, {0, 0}, 0, 0.0, 0.0, "exact: bit copy"},        \
      fk_copy_cost, "native", 0xc0de000000000000ull | (uint64_t)FK_##S}},

static const fk_manifest_row fk_cast_manifest[] = {
    FK_FOR_EACH_SOURCE(FK_CAST_ROW)
    FK_CONTIGUIZE_ROW(BOOL, uint8_t) FK_CONTIGUIZE_ROW(U8, uint8_t) FK_CONTIGUIZE_ROW(I8, int8_t)
    FK_CONTIGUIZE_ROW(I16, int16_t) FK_CONTIGUIZE_ROW(I32, int32_t) FK_CONTIGUIZE_ROW(I64, int64_t)
    FK_CONTIGUIZE_ROW(U32, uint32_t) FK_CONTIGUIZE_ROW(F16, uint16_t) FK_CONTIGUIZE_ROW(BF16, uint16_t)
    FK_CONTIGUIZE_ROW(F32, float) FK_CONTIGUIZE_ROW(F64, double)
};
static const int fk_cast_manifest_len = (int)(sizeof(fk_cast_manifest) / sizeof(fk_cast_manifest[0]));

#endif /* FUEL_KERNEL_CPU_CAST_KERNELS_H */
