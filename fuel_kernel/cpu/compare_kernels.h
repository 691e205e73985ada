/* CPU comparison kernels EQ, NE, LT, LE, GT, GE on every dtype (key [T, T, BOOL]) and
 * WHERE(cond, a, b) on every dtype (key [BOOL, T, T, T]), with their manifest.
 *
 * Comparisons follow IEEE (NaN compares unequal to everything, NE is true for it; -0.0 == 0.0),
 * as NumPy; F16/BF16 compare exactly after widening to F32.  BOOL operands compare as 0 < 1.
 * WHERE picks a where cond is nonzero, else b, copying bits (NaN payloads kept).  All operands
 * broadcast together and may be strided, negative-stride, offset or transposed.
 */
#ifndef FUEL_KERNEL_CPU_COMPARE_KERNELS_H
#define FUEL_KERNEL_CPU_COMPARE_KERNELS_H

#include "elementwise_kernels.h"

#define FK_E_EQ(x, y, T) ((uint8_t)((x) == (y)))
#define FK_E_NE(x, y, T) ((uint8_t)((x) != (y)))
#define FK_E_LT(x, y, T) ((uint8_t)((x) < (y)))
#define FK_E_LE(x, y, T) ((uint8_t)((x) <= (y)))
#define FK_E_GT(x, y, T) ((uint8_t)((x) > (y)))
#define FK_E_GE(x, y, T) ((uint8_t)((x) >= (y)))

#define FK_GEN_CMP_NATIVE(OP, D, T)                                                              \
    FK_BINARY_VEC(OP, D, T, uint8_t, FK_E_##OP)                                                  \
    FK_BINARY_ROW_NATIVE(OP, D, T, uint8_t, FK_E_##OP)                                           \
    FK_BINARY_KERNEL(OP, D, BOOL, FK_PRE_NONE, none)
#define FK_GEN_CMP_HALF(OP, D, LOAD)                                                             \
    FK_BINARY_ROW_HALF(OP, D, LOAD, fk_vec_##OP##_F32, uint8_t, fk_store_bool_row)              \
    FK_BINARY_KERNEL(OP, D, BOOL, FK_PRE_NONE, none)
#define FK_GEN_CMP(OP)                                                                           \
    FK_GEN_CMP_NATIVE(OP, F32, float) FK_GEN_CMP_NATIVE(OP, F64, double)                         \
    FK_GEN_CMP_HALF(OP, F16, fk_load_f16_row)                                                    \
    FK_BINARY_ROW_BF16(OP, uint8_t, fk_store_bool_row, uint8_t, FK_E_##OP, FK_BF16_STORE_BOOL)   \
    FK_BINARY_KERNEL(OP, BF16, BOOL, FK_PRE_NONE, none)                                          \
    FK_GEN_CMP_NATIVE(OP, BOOL, uint8_t) FK_GEN_CMP_NATIVE(OP, U8, uint8_t)                      \
    FK_GEN_CMP_NATIVE(OP, I8, int8_t) FK_GEN_CMP_NATIVE(OP, I16, int16_t)                        \
    FK_GEN_CMP_NATIVE(OP, I32, int32_t) FK_GEN_CMP_NATIVE(OP, I64, int64_t)                      \
    FK_GEN_CMP_NATIVE(OP, U32, uint32_t)

FK_GEN_CMP(EQ)
FK_GEN_CMP(NE)
FK_GEN_CMP(LT)
FK_GEN_CMP(LE)
FK_GEN_CMP(GT)
FK_GEN_CMP(GE)

/* ---- WHERE: a bit copy by element size, so one body serves every dtype of that size ----------- */
#define FK_GEN_WHERE_SIZE(BITS)                                                                  \
    FK_INLINE void fk_where_body_##BITS(const uint8_t *c, const uint##BITS##_t *a,                \
                                        const uint##BITS##_t *b, uint##BITS##_t *o, int64_t n) { \
        for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : b[i];                               \
    }                                                                                            \
    FK_MV_STREAM(fk_vec_where_##BITS, (const uint8_t *c, const uint##BITS##_t *a,                \
                 const uint##BITS##_t *b, uint##BITS##_t *o, int64_t n), (c, a, b, o, n),        \
                 fk_where_body_##BITS)                                                           \
    static void fk_row_where_##BITS(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        const int64_t es = BITS / 8;                                                             \
        (void)ctx;                                                                               \
        if (s[0] == 1 && s[1] == es && s[2] == es && s[3] == es) {                               \
            fk_vec_where_##BITS((const uint8_t *)p[0], (const uint##BITS##_t *)p[1],             \
                                (const uint##BITS##_t *)p[2], (uint##BITS##_t *)p[3], n);        \
            return;                                                                              \
        }                                                                                        \
        for (int64_t i = 0; i < n; i++)                                                          \
            *(uint##BITS##_t *)(p[3] + i * s[3]) = *(const uint8_t *)(p[0] + i * s[0])           \
                ? *(const uint##BITS##_t *)(p[1] + i * s[1]) : *(const uint##BITS##_t *)(p[2] + i * s[2]); \
    }
FK_GEN_WHERE_SIZE(8)
FK_GEN_WHERE_SIZE(16)
FK_GEN_WHERE_SIZE(32)
FK_GEN_WHERE_SIZE(64)

#define FK_GEN_WHERE(D, BITS)                                                                    \
    static int fk_WHERE_##D(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,  \
                            const fk_layout *layouts, const fk_params *params) {                 \
        const int dtypes[4] = {FK_BOOL, FK_##D, FK_##D, FK_##D};                                 \
        const int sizes[4] = {1, BITS / 8, BITS / 8, BITS / 8};                                  \
        fk_loop loop;                                                                            \
        int status = fk_elementwise_prepare(&loop, inputs, n_in, outputs, n_out, layouts, params, \
                                            3, dtypes, FK_PARAMS_NONE, "WHERE");                 \
        if (status) return status;                                                               \
        fk_loop_run(&loop, fk_row_where_##BITS, NULL, sizes);                                    \
        return FK_OK;                                                                            \
    }
FK_GEN_WHERE(BOOL, 8) FK_GEN_WHERE(U8, 8) FK_GEN_WHERE(I8, 8) FK_GEN_WHERE(I16, 16)
FK_GEN_WHERE(I32, 32) FK_GEN_WHERE(I64, 64) FK_GEN_WHERE(U32, 32) FK_GEN_WHERE(F16, 16)
FK_GEN_WHERE(BF16, 16) FK_GEN_WHERE(F32, 32) FK_GEN_WHERE(F64, 64)

/* ---- manifest ------------------------------------------------------------------------------------ */
#define FK_CMP_REV(OP, D) (0xe200000000000000ull | ((uint64_t)FK_OP_##OP << 24) | ((uint64_t)FK_##D << 16) | 1u)
#define FK_CMP_ENTRY(OP, D)                                                                      \
    {FK_OP_##OP, {3, {FK_##D, FK_##D, FK_BOOL}},                                                 \
     {fk_##OP##_##D, FK_ELEMENTWISE_CAPS, 0, FK_CLAIM(0, "exact: IEEE comparison"), fk_cost_simple, \
      "native", FK_CMP_REV(OP, D)}},
#define FK_CMP_ENTRIES(OP)                                                                       \
    FK_CMP_ENTRY(OP, BOOL) FK_CMP_ENTRY(OP, U8) FK_CMP_ENTRY(OP, I8) FK_CMP_ENTRY(OP, I16)       \
    FK_CMP_ENTRY(OP, I32) FK_CMP_ENTRY(OP, I64) FK_CMP_ENTRY(OP, U32) FK_CMP_ENTRY(OP, F16)      \
    FK_CMP_ENTRY(OP, BF16) FK_CMP_ENTRY(OP, F32) FK_CMP_ENTRY(OP, F64)
/* WHERE may run in place over a or b (same view); cond is only read */
#define FK_WHERE_ENTRY(D)                                                                        \
    {FK_OP_WHERE, {4, {FK_BOOL, FK_##D, FK_##D, FK_##D}},                                        \
     {fk_WHERE_##D, FK_ELEMENTWISE_CAPS, 0, FK_CLAIM(0, "exact: bit copy of the chosen operand"), \
      fk_cost_simple, "native", FK_CMP_REV(WHERE, D)}},

static const fk_manifest_row fk_compare_manifest[] = {
    FK_CMP_ENTRIES(EQ) FK_CMP_ENTRIES(NE) FK_CMP_ENTRIES(LT)
    FK_CMP_ENTRIES(LE) FK_CMP_ENTRIES(GT) FK_CMP_ENTRIES(GE)
    FK_WHERE_ENTRY(BOOL) FK_WHERE_ENTRY(U8) FK_WHERE_ENTRY(I8) FK_WHERE_ENTRY(I16)
    FK_WHERE_ENTRY(I32) FK_WHERE_ENTRY(I64) FK_WHERE_ENTRY(U32) FK_WHERE_ENTRY(F16)
    FK_WHERE_ENTRY(BF16) FK_WHERE_ENTRY(F32) FK_WHERE_ENTRY(F64)
};
static const int fk_compare_manifest_len = (int)(sizeof(fk_compare_manifest) / sizeof(fk_compare_manifest[0]));

#endif /* FUEL_KERNEL_CPU_COMPARE_KERNELS_H */
