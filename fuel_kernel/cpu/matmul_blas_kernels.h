/* The BLAS sibling of the native MATMUL (source "blas"): F32 and F64 through SciPy's bundled BLAS.
 *
 * Registered at the same keys as the native kernels, only when scipy.linalg.cython_blas is
 * importable; the route picker chooses between them by cost.  Operand conventions (including
 * MatmulM and the deferred count) are exactly the native ones: both call fk_matmul_prepare.
 * A row-major C = A*B is the column-major C^T = B^T * A^T, so each operand whose last or
 * second-to-last stride is 1 (with a valid leading dimension) goes to ?gemm without a copy, as
 * 'N' or 'T'; any other layout (broadcast, negative, doubly strided) is first copied to a
 * contiguous scratch block, and so is a C that BLAS cannot write in place.  Extents past the
 * BLAS integer range and a scratch size that overflows are FK_ERR_SHAPE before any write.
 *
 * Why a module-level function pointer: the ?gemm address lives in another shared library and is
 * only known at run time.  fk_blas_sgemm/fk_blas_dgemm are written once, at module import with
 * the GIL held and before manifest() hands out any row that uses them; they are never written
 * again, so every kernel call reads a process-constant value.  The snapshot publish that makes
 * the rows visible orders those writes before any call.  _matmul_blas.pyx also keeps the
 * cython_blas module referenced, so the library cannot be unloaded under a kernel.
 */
#ifndef FUEL_KERNEL_CPU_MATMUL_BLAS_KERNELS_H
#define FUEL_KERNEL_CPU_MATMUL_BLAS_KERNELS_H

#include <limits.h>
#include <math.h>

#include "matmul_common.h"

typedef void (*fk_sgemm_fn)(char *, char *, int *, int *, int *, float *, float *, int *, float *,
                            int *, float *, float *, int *);
typedef void (*fk_dgemm_fn)(char *, char *, int *, int *, int *, double *, double *, int *, double *,
                            int *, double *, double *, int *);

static fk_sgemm_fn fk_blas_sgemm = NULL;
static fk_dgemm_fn fk_blas_dgemm = NULL;

static void fk_matmul_blas_bind(void *sgemm, void *dgemm) {
    fk_blas_sgemm = (fk_sgemm_fn)sgemm;
    fk_blas_dgemm = (fk_dgemm_fn)dgemm;
}

/* How to hand X^T (X is rows x cols with element strides rs, cs) to ?gemm: 'N' or 'T' with a
 * leading dimension, or 0 when X must be copied to a contiguous block first. */
static inline char fk_blas_trans(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *ld) {
    int64_t need_n = cols > 1 ? cols : 1, need_t = rows > 1 ? rows : 1;
    if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= need_n)) { *ld = rows <= 1 ? need_n : rs; return 'N'; }
    if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= need_t)) { *ld = cols <= 1 ? need_t : cs; return 'T'; }
    return 0;
}

#define FK_DEFINE_MATMUL_BLAS(NAME, T, GEMM)                                                      \
    static void fk_blas_copy_##NAME(const T *src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, T *dst) { \
        for (int64_t i = 0; i < rows; i++)                                                        \
            for (int64_t j = 0; j < cols; j++) dst[i * cols + j] = src[i * rs + j * cs];          \
    }                                                                                             \
    static int fk_matmul_blas_run_##NAME(fk_mm_plan *p) {                                         \
        int64_t lda, ldb, ldc, rows = p->rows, n = p->n, k = p->k;                               \
        char ta = fk_blas_trans(rows, k, p->a_rs, p->a_cs, &lda);                                 \
        char tb = fk_blas_trans(k, n, p->b_rs, p->b_cs, &ldb);                                    \
        int c_direct = (p->c_cs == 1 || n <= 1) && (rows <= 1 || p->c_rs >= (n > 1 ? n : 1));     \
        int64_t scratch = 0, part;                                                                \
        size_t bytes;                                                                             \
        int status;                                                                               \
        T *buf = NULL, *abuf = NULL, *bbuf = NULL, *cbuf = NULL;                                  \
        char *a = p->a, *b = p->b, *c = p->c;                                                     \
        if (GEMM == NULL) {                                                                       \
            fk_set_error(FK_ERR_INTERNAL, "the BLAS matmul was called but no BLAS is bound");     \
            return FK_ERR_INTERNAL;                                                               \
        }                                                                                         \
        if (p->batch_count == 0 || p->m == 0 || n == 0) return FK_OK;                             \
        int a_copy = !ta, b_copy = !tb;                                                           \
        if (a_copy) { ta = 'N'; lda = k > 1 ? k : 1; }                                            \
        if (b_copy) { tb = 'N'; ldb = n > 1 ? n : 1; }                                            \
        ldc = c_direct ? (rows <= 1 ? (n > 1 ? n : 1) : p->c_rs) : (n > 1 ? n : 1);               \
        if (rows > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) { \
            fk_set_error(FK_ERR_SHAPE, "matmul extents exceed the BLAS integer range");           \
            return FK_ERR_SHAPE;                                                                  \
        }                                                                                         \
        /* copies of A (rows x k), B (k x n) and C (rows x n) where BLAS cannot take them */      \
        if ((a_copy && ((status = fk_size_mul(rows, k, &part, "matmul A copy")) ||                \
                        (status = fk_size_add(scratch, part, &scratch, "matmul scratch")))) ||    \
            (b_copy && ((status = fk_size_mul(k, n, &part, "matmul B copy")) ||                   \
                        (status = fk_size_add(scratch, part, &scratch, "matmul scratch")))) ||    \
            (!c_direct && ((status = fk_size_mul(rows, n, &part, "matmul C copy")) ||             \
                           (status = fk_size_add(scratch, part, &scratch, "matmul scratch")))) || \
            (status = fk_size_bytes(scratch, (int64_t)sizeof(T), &bytes, "matmul scratch")))      \
            return status;                                                                        \
        if (scratch) {                                                                            \
            T *next;                                                                              \
            buf = (T *)fk_scratch_alloc(bytes);                                                   \
            if (buf == NULL) return FK_ERR_NO_MEMORY;                                             \
            next = buf;                                                                           \
            if (a_copy) { abuf = next; next += rows * k; }                                        \
            if (b_copy) { bbuf = next; next += k * n; }                                           \
            if (!c_direct) cbuf = next;                                                           \
        }                                                                                         \
        for (int64_t batch = 0; batch < p->batch_count; batch++) {                                \
            fk_mm_zero_rows(p, c, rows);                                                          \
            if (rows > 0) {                                                                       \
                T one = 1, zero = 0;                                                              \
                int M = (int)n, N = (int)rows, K = (int)k, LDA = (int)lda, LDB = (int)ldb, LDC = (int)ldc; \
                const T *A = (const T *)a, *B = (const T *)b;                                     \
                T *C = c_direct ? (T *)c : cbuf;                                                  \
                if (abuf) { fk_blas_copy_##NAME(A, rows, k, p->a_rs, p->a_cs, abuf); A = abuf; }  \
                if (bbuf) { fk_blas_copy_##NAME(B, k, n, p->b_rs, p->b_cs, bbuf); B = bbuf; }     \
                if (k == 0) {                                                                     \
                    for (int64_t i = 0; i < rows; i++) memset(C + i * ldc, 0, (size_t)n * sizeof(T)); \
                } else {                                                                          \
                    GEMM(&tb, &ta, &M, &N, &K, &one, (T *)B, &LDB, (T *)A, &LDA, &zero, C, &LDC); \
                }                                                                                 \
                if (!c_direct)                                                                    \
                    for (int64_t i = 0; i < rows; i++)                                            \
                        for (int64_t j = 0; j < n; j++) ((T *)c)[i * p->c_rs + j * p->c_cs] = cbuf[i * n + j]; \
            }                                                                                     \
            fk_mm_next_batch(p, &a, &b, &c, (int)sizeof(T));                                      \
        }                                                                                         \
        free(buf);                                                                                \
        return FK_OK;                                                                             \
    }

FK_DEFINE_MATMUL_BLAS(F32, float, fk_blas_sgemm)
FK_DEFINE_MATMUL_BLAS(F64, double, fk_blas_dgemm)

#define FK_MATMUL_BLAS_KERNEL(NAME, SUFFIX, COUNT_DT)                                             \
    static int fk_matmul_blas_##NAME##SUFFIX(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                             const fk_layout *layouts, const fk_params *params) { \
        fk_mm_plan plan;                                                                          \
        int status = fk_matmul_prepare(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, COUNT_DT, &plan); \
        if (status) return status;                                                                \
        return fk_matmul_blas_run_##NAME(&plan);                                                  \
    }
FK_MATMUL_BLAS_KERNEL(F32, , -1) FK_MATMUL_BLAS_KERNEL(F32, _count_I32, FK_I32) FK_MATMUL_BLAS_KERNEL(F32, _count_I64, FK_I64)
FK_MATMUL_BLAS_KERNEL(F64, , -1) FK_MATMUL_BLAS_KERNEL(F64, _count_I32, FK_I32) FK_MATMUL_BLAS_KERNEL(F64, _count_I64, FK_I64)

/* Cost: the reference per flop (inefficiency 1.0) with a small fixed cost per call and per batch
 * (measured ~0.3 us per ?gemm call).  ?gemm computes whole register tiles too: in the transposed
 * call our rows are its N dimension (tiles of 4) and our n its M (tiles of 16 for s, 8 for d,
 * OpenBLAS's Haswell kernels), so a one-row product costs about 4 rows.  It packs both operands
 * (written and read once more, as the native engine does), and operands it cannot take in place
 * are copied first. */
static fk_cost fk_matmul_blas_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                   const fk_params *params) {
    fk_cost cost = fk_matmul_cost_scaled(layouts, n_layouts, dtypes, params, 1.0, 300.0, 300.0);
    const fk_layout *C = &layouts[n_layouts - 1];
    int64_t ld;
    if (n_layouts >= 3 && C->ndim >= 2 && cost.flops > 0.0) {
        double rows = (double)C->shape[C->ndim - 2], n = (double)C->shape[C->ndim - 1];
        double tile = dtypes->v[0] == FK_F64 ? 8.0 : 16.0;
        if (params && params->kind == FK_PARAMS_MATMUL && params->u.matmul.m_compute.kind == FK_MATMUL_M_ROWS)
            rows = (double)params->u.matmul.m_compute.value;
        if (rows > 0 && n > 0) cost.flops *= (ceil(rows / 4.0) * 4.0 / rows) * (ceil(n / tile) * tile / n);
        cost.bytes_moved += 2.0 * ((double)fk_layout_numel(&layouts[0]) + (double)fk_layout_numel(&layouts[1])) *
                            fk_dtype_itemsize[dtypes->v[0]];
    }
    for (int k = 0; k < 2 && n_layouts >= 3; k++) {
        const fk_layout *L = &layouts[k];
        if (L->ndim < 2) continue;
        if (!fk_blas_trans(L->shape[L->ndim - 2], L->shape[L->ndim - 1], L->strides[L->ndim - 2],
                           L->strides[L->ndim - 1], &ld))
            cost.bytes_moved += 2.0 * (double)fk_layout_numel(L) * fk_dtype_itemsize[dtypes->v[0]];
    }
    return cost;
}

#define FK_P_BLAS(REL) {1, 1, {0, 0}, 0, REL, 0.0, "|err| <= max_rel * sum_k |a*b| for k <= 4096 (BLAS ?gemm)"}
#define FK_MATMUL_BLAS_ROWS(NAME, REL)                                                            \
    {FK_OP_MATMUL, {3, {FK_##NAME, FK_##NAME, FK_##NAME}},                                        \
     {fk_matmul_blas_##NAME, FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT, 0, FK_P_BLAS(REL),     \
      fk_matmul_blas_cost, "blas", 0xb1a5000000000100ull | (uint64_t)FK_##NAME}},                 \
    {FK_OP_MATMUL, {4, {FK_##NAME, FK_##NAME, FK_I32, FK_##NAME}},                                \
     {fk_matmul_blas_##NAME##_count_I32, FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT, 0, FK_P_BLAS(REL), \
      fk_matmul_blas_cost, "blas", 0xb1a5000000000200ull | (uint64_t)FK_##NAME}},                 \
    {FK_OP_MATMUL, {4, {FK_##NAME, FK_##NAME, FK_I64, FK_##NAME}},                                \
     {fk_matmul_blas_##NAME##_count_I64, FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT, 0, FK_P_BLAS(REL), \
      fk_matmul_blas_cost, "blas", 0xb1a5000000000300ull | (uint64_t)FK_##NAME}},

static const fk_manifest_row fk_matmul_blas_manifest[] = {
    FK_MATMUL_BLAS_ROWS(F32, 2.5e-4)
    FK_MATMUL_BLAS_ROWS(F64, 5.0e-13)
};
static const int fk_matmul_blas_manifest_len =
    (int)(sizeof(fk_matmul_blas_manifest) / sizeof(fk_matmul_blas_manifest[0]));

#endif /* FUEL_KERNEL_CPU_MATMUL_BLAS_KERNELS_H */
