/* MATMUL operand validation and batch walking, shared by the native kernels (matmul_kernels.h) and
 * the BLAS sibling (matmul_blas_kernels.h) so both accept exactly the same calls.
 *
 * Operands [A, B, C], or [A, B, count, C] when params.matmul(..., m_compute=MatmulM.deferred(2)):
 *   A (*batch_a, m, k), B (*batch_b, k, n), C (*batch, m, n).  batch_a and batch_b broadcast
 *   (right-aligned, extent 1 or missing = broadcast) to `batch`: params.batch, or without params
 *   the broadcast of the two.  Without params, m, k, n come from the shapes and all rows are
 *   computed.  Both A and B need at least 2 dims (no 1-d vector promotion).
 *   MatmulM ALL computes m rows, ROWS(r) the first r, DEFERRED(2) reads r at run time from the
 *   scalar I32/I64 count operand (one element, any rank); rows r..m-1 of every batch are zeroed.
 *   A count outside [0, m] is FK_ERR_INDEX, with nothing written.
 * Any input strides are accepted (stride 0, negative, transposed); C is written through its
 * strides but may not overlap itself (FK_ERR_ALIAS).  params = NULL is FK_ERR_PARAMS (no params
 * is a params block of kind none).  Batch counts and every scratch size are overflow-checked
 * (FK_ERR_SHAPE) before anything is allocated or written.
 */
#ifndef FUEL_KERNEL_CPU_MATMUL_COMMON_H
#define FUEL_KERNEL_CPU_MATMUL_COMMON_H

#include "compute_common.h"

typedef struct {
    int64_t m, n, k, rows;                       /* rows: how many of the m rows to compute */
    int nb;                                      /* batch dims */
    int64_t batch_count;
    int64_t bshape[FK_MAX_DIMS];
    int64_t a_bs[FK_MAX_DIMS], b_bs[FK_MAX_DIMS], c_bs[FK_MAX_DIMS];   /* batch strides, elements */
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;  /* matrix strides, elements */
    char *a, *b, *c;                             /* first element of batch 0 */
    int dtype;                                   /* of A, B and C */
    int64_t index[FK_MAX_DIMS];                  /* batch walk state */
} fk_mm_plan;

static int fk_matmul_prepare(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                             const fk_layout *layouts, const fk_params *params, int dtype, int count_dtype,
                             fk_mm_plan *plan) {
    int dtypes[4] = {dtype, dtype, count_dtype, dtype};
    int want_in = count_dtype >= 0 ? 3 : 2, status, d;
    const fk_layout *A, *B, *C;
    int64_t batch[FK_MAX_DIMS];
    int nb;
    if (count_dtype < 0) dtypes[2] = dtype;
    status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, want_in, dtypes,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_DISJOINT);
    if (status) return status;
    status = fk_params_present(params, "matmul", count_dtype >= 0
                               ? "params.matmul(..., m_compute=MatmulM.deferred(2))"
                               : "params.matmul(...) or a params block of kind none");
    if (status) return status;
    A = &layouts[0];
    B = &layouts[1];
    C = &layouts[want_in];
    if (A->ndim < 2 || B->ndim < 2) {
        fk_set_error(FK_ERR_SHAPE, "matmul needs A and B with at least 2 dims, got %d and %d", (int)A->ndim, (int)B->ndim);
        return FK_ERR_SHAPE;
    }
    memset(plan, 0, sizeof(*plan));
    plan->dtype = dtype;
    if (params->kind == FK_PARAMS_MATMUL) {
        const fk_matmul_params *mp = &params->u.matmul;
        plan->m = mp->m;
        plan->n = mp->n;
        plan->k = mp->k;
        nb = mp->batch_ndim;
        if (nb < 0 || nb > FK_MAX_DIMS - 2 || plan->m < 0 || plan->n < 0 || plan->k < 0) {
            fk_set_error(FK_ERR_PARAMS, "matmul params are out of range");
            return FK_ERR_PARAMS;
        }
        for (d = 0; d < nb; d++) batch[d] = mp->batch[d];
        if (A->shape[A->ndim - 2] != plan->m || A->shape[A->ndim - 1] != plan->k) {
            fk_set_error(FK_ERR_SHAPE, "matmul A is (..., %lld, %lld) but params say m=%lld, k=%lld",
                         (long long)A->shape[A->ndim - 2], (long long)A->shape[A->ndim - 1],
                         (long long)plan->m, (long long)plan->k);
            return FK_ERR_SHAPE;
        }
        if (B->shape[B->ndim - 2] != plan->k || B->shape[B->ndim - 1] != plan->n) {
            fk_set_error(FK_ERR_SHAPE, "matmul B is (..., %lld, %lld) but params say k=%lld, n=%lld",
                         (long long)B->shape[B->ndim - 2], (long long)B->shape[B->ndim - 1],
                         (long long)plan->k, (long long)plan->n);
            return FK_ERR_SHAPE;
        }
        switch (mp->m_compute.kind) {
        case FK_MATMUL_M_ALL:
            plan->rows = plan->m;
            break;
        case FK_MATMUL_M_ROWS:
            if (mp->m_compute.value < 0 || mp->m_compute.value > plan->m) {
                fk_set_error(FK_ERR_PARAMS, "MatmulM.rows(%lld) is outside [0, m=%lld]",
                             (long long)mp->m_compute.value, (long long)plan->m);
                return FK_ERR_PARAMS;
            }
            plan->rows = mp->m_compute.value;
            break;
        case FK_MATMUL_M_DEFERRED:
            if (count_dtype < 0 || mp->m_compute.value != 2) {
                fk_set_error(FK_ERR_PARAMS, "MatmulM.deferred(%lld): the count must be input 2 of [A, B, count, C]",
                             (long long)mp->m_compute.value);
                return FK_ERR_PARAMS;
            }
            plan->rows = -1;                      /* read below, after the shape checks */
            break;
        default:
            fk_set_error(FK_ERR_PARAMS, "unknown MatmulM kind %d", (int)mp->m_compute.kind);
            return FK_ERR_PARAMS;
        }
        if (count_dtype >= 0 && mp->m_compute.kind != FK_MATMUL_M_DEFERRED) {
            fk_set_error(FK_ERR_PARAMS, "matmul got a count operand but m_compute is not MatmulM.deferred(2)");
            return FK_ERR_PARAMS;
        }
    } else if (params->kind == FK_PARAMS_NONE && count_dtype < 0) {
        plan->m = A->shape[A->ndim - 2];
        plan->k = A->shape[A->ndim - 1];
        plan->n = B->shape[B->ndim - 1];
        plan->rows = plan->m;
        if (B->shape[B->ndim - 2] != plan->k) {
            fk_set_error(FK_ERR_SHAPE, "matmul inner extents differ: A has k=%lld, B has %lld",
                         (long long)plan->k, (long long)B->shape[B->ndim - 2]);
            return FK_ERR_SHAPE;
        }
        nb = (A->ndim > B->ndim ? A->ndim : B->ndim) - 2;
        for (d = 0; d < nb; d++) {
            int da = d - (nb - (A->ndim - 2)), db = d - (nb - (B->ndim - 2));
            int64_t ea = da >= 0 ? A->shape[da] : 1, eb = db >= 0 ? B->shape[db] : 1;
            if (ea != eb && ea != 1 && eb != 1) {
                fk_set_error(FK_ERR_SHAPE, "matmul batch extents %lld and %lld do not broadcast", (long long)ea, (long long)eb);
                return FK_ERR_SHAPE;
            }
            batch[d] = ea == 1 ? eb : ea;
        }
    } else {
        fk_set_error(FK_ERR_PARAMS, "matmul takes params.matmul(m, n, k, batch, m_compute)%s",
                     count_dtype >= 0 ? " with MatmulM.deferred(2)" : " or no params");
        return FK_ERR_PARAMS;
    }
    plan->nb = nb;
    /* batch broadcasting of A and B onto `batch`, and C's shape */
    if (A->ndim - 2 > nb || B->ndim - 2 > nb) {
        fk_set_error(FK_ERR_SHAPE, "matmul A or B has more batch dims than the batch shape (%d)", nb);
        return FK_ERR_SHAPE;
    }
    if (C->ndim != nb + 2 || C->shape[nb] != plan->m || C->shape[nb + 1] != plan->n) {
        fk_set_error(FK_ERR_SHAPE, "matmul output must be (*batch, m=%lld, n=%lld) with %d batch dims",
                     (long long)plan->m, (long long)plan->n, nb);
        return FK_ERR_SHAPE;
    }
    plan->batch_count = 1;
    for (d = 0; d < nb; d++) {
        int da = d - (nb - (A->ndim - 2)), db = d - (nb - (B->ndim - 2));
        if (batch[d] < 0 || C->shape[d] != batch[d]) {
            fk_set_error(FK_ERR_SHAPE, "matmul output batch extent %lld on axis %d should be %lld",
                         (long long)C->shape[d], d, (long long)batch[d]);
            return FK_ERR_SHAPE;
        }
        if ((da >= 0 && A->shape[da] != batch[d] && A->shape[da] != 1) ||
            (db >= 0 && B->shape[db] != batch[d] && B->shape[db] != 1)) {
            fk_set_error(FK_ERR_SHAPE, "matmul A/B batch extents do not broadcast to %lld on batch axis %d",
                         (long long)batch[d], d);
            return FK_ERR_SHAPE;
        }
        plan->bshape[d] = batch[d];
        plan->a_bs[d] = da >= 0 && A->shape[da] != 1 ? A->strides[da] : 0;
        plan->b_bs[d] = db >= 0 && B->shape[db] != 1 ? B->strides[db] : 0;
        plan->c_bs[d] = C->strides[d];
        if ((status = fk_size_mul(plan->batch_count, batch[d], &plan->batch_count, "matmul batch count")))
            return status;
    }
    if ((status = fk_output_self_overlap_check(C, "matmul"))) return status;
    plan->a_rs = A->strides[A->ndim - 2];
    plan->a_cs = A->strides[A->ndim - 1];
    plan->b_rs = B->strides[B->ndim - 2];
    plan->b_cs = B->strides[B->ndim - 1];
    plan->c_rs = C->strides[nb];
    plan->c_cs = C->strides[nb + 1];
    plan->a = fk_elem_ptr(&inputs[0], A->offset);
    plan->b = fk_elem_ptr(&inputs[1], B->offset);
    plan->c = fk_elem_ptr(&outputs[0], C->offset);
    if (plan->rows < 0) {                        /* DEFERRED: the run-time count */
        const fk_layout *L = &layouts[2];
        int64_t count, numel;
        if ((status = fk_layout_numel_checked(L, &numel, "matmul row count operand"))) return status;
        if (numel != 1) {
            fk_set_error(FK_ERR_SHAPE, "the matmul row count operand must hold exactly one element, not %lld",
                         (long long)numel);
            return FK_ERR_SHAPE;
        }
        if (count_dtype == FK_I32) count = *(const int32_t *)fk_elem_ptr(&inputs[2], L->offset);
        else count = *(const int64_t *)fk_elem_ptr(&inputs[2], L->offset);
        if (count < 0 || count > plan->m) {
            fk_set_error(FK_ERR_INDEX, "the deferred matmul row count %lld is outside [0, m=%lld]",
                         (long long)count, (long long)plan->m);
            return FK_ERR_INDEX;
        }
        plan->rows = count;
    }
    return FK_OK;
}

/* Pointers to the current batch's A, B and C; call fk_mm_next_batch to advance. */
static inline void fk_mm_next_batch(fk_mm_plan *p, char **a, char **b, char **c, int isz) {
    for (int d = p->nb - 1; d >= 0; d--) {
        if (++p->index[d] < p->bshape[d]) {
            *a += p->a_bs[d] * isz; *b += p->b_bs[d] * isz; *c += p->c_bs[d] * isz;
            return;
        }
        p->index[d] = 0;
        *a -= p->a_bs[d] * isz * (p->bshape[d] - 1);
        *b -= p->b_bs[d] * isz * (p->bshape[d] - 1);
        *c -= p->c_bs[d] * isz * (p->bshape[d] - 1);
    }
}

/* Zero rows [from, m) of one batch's C (all-zero bits is 0 in every dtype). */
static inline void fk_mm_zero_rows(const fk_mm_plan *p, char *c, int64_t from) {
    int isz = fk_dtype_itemsize[p->dtype];
    for (int64_t i = from; i < p->m; i++) {
        char *row = c + i * p->c_rs * isz;
        if (p->c_cs == 1) memset(row, 0, (size_t)(p->n * isz));
        else for (int64_t j = 0; j < p->n; j++) memset(row + j * p->c_cs * isz, 0, (size_t)isz);
    }
}

/* Cost: 2*rows*n*k flops per batch scaled by `inefficiency` (how many times slower per flop the
 * kernel is than the best CPU GEMM, so a picker comparing flops compares time), the bytes each
 * operand occupies, and a per-call plus per-batch overhead. */
static inline fk_cost fk_matmul_cost_scaled(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                            const fk_params *params, double inefficiency,
                                            double call_ns, double batch_ns) {
    fk_cost cost = {0.0, 0.0, call_ns};
    const fk_layout *C;
    double m, n, k, rows, batches = 1.0, isz;
    if (n_layouts < 3) return cost;
    C = &layouts[n_layouts - 1];
    if (C->ndim < 2 || layouts[0].ndim < 2) return cost;
    m = (double)C->shape[C->ndim - 2];
    n = (double)C->shape[C->ndim - 1];
    k = (double)layouts[0].shape[layouts[0].ndim - 1];
    for (int d = 0; d < C->ndim - 2; d++) batches *= (double)C->shape[d];
    rows = m;
    if (params && params->kind == FK_PARAMS_MATMUL && params->u.matmul.m_compute.kind == FK_MATMUL_M_ROWS)
        rows = (double)params->u.matmul.m_compute.value;
    isz = fk_dtype_itemsize[dtypes->v[0]];
    cost.flops = 2.0 * rows * n * k * batches * inefficiency;
    cost.bytes_moved = ((double)fk_layout_numel(&layouts[0]) + (double)fk_layout_numel(&layouts[1]) +
                        (double)fk_layout_numel(C)) * isz;
    cost.overhead_ns = call_ns + batch_ns * batches;
    return cost;
}

#endif /* FUEL_KERNEL_CPU_MATMUL_COMMON_H */
