/* Native CPU MATMUL kernels (source "native") and their manifest.
 *
 * Operand conventions are in matmul_common.h.  F32 and F64 run the packed, blocked GEMM engine
 * (gemm_core.h) directly; F16 and BF16 are converted to F32 while packing, accumulate in F32 and
 * round once when stored.  Integer dtypes (I8, I16, I32, I64, U8, U32) return the same dtype with
 * two's-complement wrap-around, exactly as NumPy's integer matmul (accumulating modulo 2^32 or
 * 2^64 gives the same low bits).  Every variant packs A and B from their strides, so transposed,
 * broadcast and negative-stride operands are handled without a separate copy.  Scratch sizes
 * (the GEMM work area plus a rows x n buffer; the integer packed B plus one accumulator row) are
 * overflow-checked: an impossible size is FK_ERR_SHAPE before anything is allocated or written.
 */
#ifndef FUEL_KERNEL_CPU_MATMUL_KERNELS_H
#define FUEL_KERNEL_CPU_MATMUL_KERNELS_H

#include "gemm_core.h"
#include "matmul_common.h"

#include <math.h>

/* ---- few rows (decode-style products): stream B once, no packing ----------------------------- */
/* With at most FK_MM_FEW_ROWS rows the micro-kernel would compute mostly padding; instead each row
 * of B (unit column stride) is read once and added into every row's accumulator. */
#define FK_MM_FEW_ROWS 4
#define FK_DEFINE_FEW_ROWS(SUF, T)                                                                \
    FK_ISA_COMPUTE static void fk_mm_axpy_##SUF(T *restrict acc, const T *restrict b, T a, int64_t n) { \
        for (int64_t j = 0; j < n; j++) acc[j] += a * b[j];                                       \
    }                                                                                             \
    static void fk_mm_few_rows_##SUF(const fk_mm_plan *p, const T *A, const T *B, T *acc) {       \
        memset(acc, 0, (size_t)(p->rows * p->n) * sizeof(T));                                     \
        for (int64_t q = 0; q < p->k; q++)                                                        \
            for (int64_t i = 0; i < p->rows; i++)                                                 \
                fk_mm_axpy_##SUF(acc + i * p->n, B + q * p->b_rs, A[i * p->a_rs + q * p->a_cs], p->n); \
    }
FK_DEFINE_FEW_ROWS(f32, float)
FK_DEFINE_FEW_ROWS(f64, double)

/* ---- floating point: the GEMM engine per batch ------------------------------------------------ */
#define FK_DEFINE_MATMUL_FLOAT(NAME, CT, SUF, T)                                                  \
    static int fk_matmul_run_##NAME(fk_mm_plan *p) {                                              \
        const int isz = (int)sizeof(CT);                                                          \
        int direct = FK_##NAME == FK_F32 || FK_##NAME == FK_F64;                                  \
        int64_t batch;                                                                            \
        char *a = p->a, *b = p->b, *c = p->c;                                                     \
        T *work, *cbuf = NULL;                                                                    \
        int64_t work_elems, c_elems = 0;                                                          \
        size_t bytes;                                                                             \
        int status;                                                                               \
        if (p->batch_count == 0 || p->m == 0 || p->n == 0) return FK_OK;                         \
        int few = direct && p->rows <= FK_MM_FEW_ROWS && p->b_cs == 1;                            \
        direct = direct && p->c_cs == 1;                                                          \
        work_elems = (int64_t)fk_gemm_work_##SUF(p->rows, p->n, p->k);  /* bounded by the blocking */ \
        if ((!direct || few) &&                                                                   \
            (status = fk_size_mul(p->rows, p->n, &c_elems, "matmul output buffer")))              \
            return status;                                                                        \
        if ((status = fk_size_add(work_elems, c_elems, &work_elems, "matmul scratch")) ||         \
            (status = fk_size_bytes(work_elems, (int64_t)sizeof(T), &bytes, "matmul scratch")))  \
            return status;                                                                        \
        work = (T *)fk_scratch_alloc(bytes);                                                      \
        if (work == NULL) return FK_ERR_NO_MEMORY;                                                \
        if (!direct || few) cbuf = work + fk_gemm_work_##SUF(p->rows, p->n, p->k);                \
        for (batch = 0; batch < p->batch_count; batch++) {                                        \
            fk_strided_matrix am = {a, p->a_rs, p->a_cs}, bm = {b, p->b_rs, p->b_cs};              \
            fk_mm_zero_rows(p, c, p->rows);                                                       \
            if (few) {                                                                            \
                fk_mm_few_rows_##SUF(p, (const T *)a, (const T *)b, cbuf);                        \
                for (int64_t i = 0; i < p->rows; i++)                                             \
                    for (int64_t j = 0; j < p->n; j++)                                            \
                        ((CT *)c)[i * p->c_rs + j * p->c_cs] = (CT)cbuf[i * p->n + j];            \
            } else if (direct) {                                                                  \
                fk_gemm_##SUF(p->rows, p->n, p->k, fk_pack_a_##SUF##_##NAME, &am,                 \
                              fk_pack_b_##SUF##_##NAME, &bm, (T *)c, p->c_rs, work);              \
            } else if (p->rows > 0) {                                                             \
                fk_gemm_##SUF(p->rows, p->n, p->k, fk_pack_a_##SUF##_##NAME, &am,                 \
                              fk_pack_b_##SUF##_##NAME, &bm, cbuf, p->n, work);                   \
                for (int64_t i = 0; i < p->rows; i++)                                             \
                    for (int64_t j = 0; j < p->n; j++)                                            \
                        ((CT *)c)[i * p->c_rs + j * p->c_cs] = (CT)FK_ST_##NAME(cbuf[i * p->n + j]); \
            }                                                                                     \
            fk_mm_next_batch(p, &a, &b, &c, isz);                                                 \
        }                                                                                         \
        free(work);                                                                               \
        return FK_OK;                                                                             \
    }

FK_DEFINE_MATMUL_FLOAT(F32, float, f32, float)
FK_DEFINE_MATMUL_FLOAT(F16, uint16_t, f32, float)
FK_DEFINE_MATMUL_FLOAT(BF16, uint16_t, f32, float)
FK_DEFINE_MATMUL_FLOAT(F64, double, f64, double)

/* ---- integers: row-times-panel with a wrap-around accumulator -------------------------------- */
#define FK_DEFINE_MATMUL_INT(NAME, CT, ACC)                                                       \
    FK_ISA_COMPUTE static void fk_matmul_int_row_##NAME(ACC *restrict acc, const ACC *restrict bp, ACC av, int64_t n) { \
        for (int64_t j = 0; j < n; j++) acc[j] += av * bp[j];                                     \
    }                                                                                             \
    static int fk_matmul_run_##NAME(fk_mm_plan *p) {                                              \
        const int isz = (int)sizeof(CT);                                                          \
        char *a = p->a, *b = p->b, *c = p->c;                                                     \
        ACC *bp, *acc;                                                                            \
        int64_t elems;                                                                            \
        size_t bytes;                                                                             \
        int status;                                                                               \
        if (p->batch_count == 0 || p->m == 0 || p->n == 0) return FK_OK;                         \
        /* packed B (k x n) and one accumulator row (n) */                                        \
        if ((status = fk_size_mul(p->k, p->n, &elems, "matmul packed B")) ||                      \
            (status = fk_size_add(elems, p->n, &elems, "matmul accumulator")) ||                  \
            (status = fk_size_bytes(elems, (int64_t)sizeof(ACC), &bytes, "matmul accumulator")))  \
            return status;                                                                        \
        bp = (ACC *)fk_scratch_alloc(bytes);                                                      \
        if (bp == NULL) return FK_ERR_NO_MEMORY;                                                  \
        acc = bp + p->k * p->n;                                                                   \
        for (int64_t batch = 0; batch < p->batch_count; batch++) {                                \
            const CT *A = (const CT *)a, *B = (const CT *)b;                                      \
            CT *C = (CT *)c;                                                                      \
            fk_mm_zero_rows(p, c, p->rows);                                                       \
            if (p->rows > 0) {                                                                    \
                for (int64_t q = 0; q < p->k; q++)                                                \
                    for (int64_t j = 0; j < p->n; j++)                                            \
                        bp[q * p->n + j] = (ACC)B[q * p->b_rs + j * p->b_cs];                     \
            }                                                                                     \
            for (int64_t i = 0; i < p->rows; i++) {                                               \
                memset(acc, 0, (size_t)p->n * sizeof(ACC));                                       \
                for (int64_t q = 0; q < p->k; q++)                                                \
                    fk_matmul_int_row_##NAME(acc, bp + q * p->n, (ACC)A[i * p->a_rs + q * p->a_cs], p->n); \
                for (int64_t j = 0; j < p->n; j++) C[i * p->c_rs + j * p->c_cs] = (CT)acc[j];    \
            }                                                                                     \
            fk_mm_next_batch(p, &a, &b, &c, isz);                                                 \
        }                                                                                         \
        free(bp);                                                                                 \
        return FK_OK;                                                                             \
    }

FK_DEFINE_MATMUL_INT(U8, uint8_t, uint32_t)
FK_DEFINE_MATMUL_INT(I8, int8_t, uint32_t)
FK_DEFINE_MATMUL_INT(I16, int16_t, uint32_t)
FK_DEFINE_MATMUL_INT(I32, int32_t, uint32_t)
FK_DEFINE_MATMUL_INT(U32, uint32_t, uint32_t)
FK_DEFINE_MATMUL_INT(I64, int64_t, uint64_t)

/* ---- kernels: [T, T, T], [T, T, I32, T], [T, T, I64, T] ------------------------------------- */
#define FK_MATMUL_KERNEL(NAME, SUFFIX, COUNT_DT)                                                  \
    static int fk_matmul_##NAME##SUFFIX(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                        const fk_layout *layouts, const fk_params *params) {    \
        fk_mm_plan plan;                                                                          \
        int status = fk_matmul_prepare(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, COUNT_DT, &plan); \
        if (status) return status;                                                                \
        return fk_matmul_run_##NAME(&plan);                                                       \
    }
#define FK_MATMUL_KERNELS(NAME) \
    FK_MATMUL_KERNEL(NAME, , -1) FK_MATMUL_KERNEL(NAME, _count_I32, FK_I32) FK_MATMUL_KERNEL(NAME, _count_I64, FK_I64)
#define FK_FOR_MATMUL_DTYPES(M) M(F32) M(F64) M(F16) M(BF16) M(U8) M(I8) M(I16) M(I32) M(U32) M(I64)
FK_FOR_MATMUL_DTYPES(FK_MATMUL_KERNELS)

/* ---- cost ---------------------------------------------------------------------------------------- */
/* The GEMM engine runs at the speed of an optimized BLAS per flop it computes (measured: within a
 * few percent of OpenBLAS from 128^3 up, single thread), but it computes whole MR x NR tiles, so
 * the flops are the padded ones, and it moves A and B once more while packing.  Few-row products
 * with unit-stride B skip both.  Measured at 256^3 against F32: BF16 1.1x and F16 1.6x per flop
 * (conversion while packing), integers 2.5x (a plain row kernel). */
static fk_cost fk_matmul_native_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                     const fk_params *params) {
    int dt = dtypes->v[0];
    int is_float = dt == FK_F32 || dt == FK_F64 || dt == FK_F16 || dt == FK_BF16;
    double mr = dt == FK_F64 ? FK_GEMM_MR_f64 : FK_GEMM_MR_f32, nr = dt == FK_F64 ? FK_GEMM_NR_f64 : FK_GEMM_NR_f32;
    double inefficiency = (dt == FK_F32 || dt == FK_F64) ? 1.0 : dt == FK_BF16 ? 1.1 : dt == FK_F16 ? 1.6 : 2.5;
    fk_cost cost = fk_matmul_cost_scaled(layouts, n_layouts, dtypes, params, inefficiency, 500.0, 150.0);
    const fk_layout *C = &layouts[n_layouts - 1], *B = &layouts[1];
    double m, n, rows, few;
    if (n_layouts < 3 || C->ndim < 2 || B->ndim < 2 || cost.flops == 0.0 || !is_float) return cost;
    m = (double)C->shape[C->ndim - 2];
    n = (double)C->shape[C->ndim - 1];
    rows = m;
    if (params && params->kind == FK_PARAMS_MATMUL && params->u.matmul.m_compute.kind == FK_MATMUL_M_ROWS)
        rows = (double)params->u.matmul.m_compute.value;
    few = (dt == FK_F32 || dt == FK_F64) && rows <= FK_MM_FEW_ROWS && B->strides[B->ndim - 1] == 1;
    if (!few && rows > 0 && n > 0) {
        cost.flops *= (ceil(rows / mr) * mr / rows) * (ceil(n / nr) * nr / n);
        cost.bytes_moved += 2.0 * ((double)fk_layout_numel(&layouts[0]) + (double)fk_layout_numel(B)) *
                            (dt == FK_F64 ? 8.0 : 4.0);
    }
    return cost;
}

/* ---- manifest ---------------------------------------------------------------------------------- */
/* Float precision: each output is a K-term dot product accumulated in the compute type (F32 for
 * F32/F16/BF16, F64 for F64) with FMA, so |err| <= K * u * sum_p |a_ip * b_pj| (+ one rounding
 * to F16/BF16).  The claim states max_rel relative to sum_p |a_ip b_pj| for K <= 4096:
 * F32 2^-24 * 4096 is loose; the observed error is far smaller (blocked summation). */
#define FK_P_MM(REL) {1, 1, {0, 0}, 0, REL, 0.0, "|err| <= max_rel * sum_k |a*b| for k <= 4096"}
#define FK_P_MM_F32 FK_P_MM(2.5e-4)
#define FK_P_MM_F64 FK_P_MM(5.0e-13)
#define FK_P_MM_F16 FK_P_MM(1.5e-3)
#define FK_P_MM_BF16 FK_P_MM(8.0e-3)
#define FK_P_MM_INT {1, 1, {0, 0}, 0, 0.0, 0.0, "exact modulo 2^bits (NumPy wrap-around)"}
#define FK_P_MM_U8 FK_P_MM_INT
#define FK_P_MM_I8 FK_P_MM_INT
#define FK_P_MM_I16 FK_P_MM_INT
#define FK_P_MM_I32 FK_P_MM_INT
#define FK_P_MM_U32 FK_P_MM_INT
#define FK_P_MM_I64 FK_P_MM_INT

#define FK_MATMUL_ROWS(NAME)                                                                      \
    {FK_OP_MATMUL, {3, {FK_##NAME, FK_##NAME, FK_##NAME}},                                        \
     {fk_matmul_##NAME, FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT, 0, FK_P_MM_##NAME,          \
      fk_matmul_native_cost, "native", 0x3a70000000000100ull | (uint64_t)FK_##NAME}},             \
    {FK_OP_MATMUL, {4, {FK_##NAME, FK_##NAME, FK_I32, FK_##NAME}},                                \
     {fk_matmul_##NAME##_count_I32, FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT, 0, FK_P_MM_##NAME, \
      fk_matmul_native_cost, "native", 0x3a70000000000200ull | (uint64_t)FK_##NAME}},             \
    {FK_OP_MATMUL, {4, {FK_##NAME, FK_##NAME, FK_I64, FK_##NAME}},                                \
     {fk_matmul_##NAME##_count_I64, FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT, 0, FK_P_MM_##NAME, \
      fk_matmul_native_cost, "native", 0x3a70000000000300ull | (uint64_t)FK_##NAME}},

static const fk_manifest_row fk_matmul_manifest[] = {
    FK_FOR_MATMUL_DTYPES(FK_MATMUL_ROWS)
};
static const int fk_matmul_manifest_len = (int)(sizeof(fk_matmul_manifest) / sizeof(fk_matmul_manifest[0]));

#endif /* FUEL_KERNEL_CPU_MATMUL_KERNELS_H */
