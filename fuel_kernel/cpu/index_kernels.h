/* CPU indexing kernels: INDEX_SELECT, GATHER, SCATTER_ADD, INDEX_ADD.
 *
 * Every kernel first checks every index against the extent it addresses; an out-of-range index
 * fails with FK_ERR_INDEX naming the value and its position, before anything is written.
 * Indices are i32 or i64 and must lie in [0, extent) (no negative wrap-around, as in PyTorch).
 *
 * Operands (inputs, then the output) and params:
 *   INDEX_SELECT [x, idx(1-d), out]      params.index_select(axis): out = take(x, idx, axis)
 *   GATHER       [x, idx, out]           params.gather(axis): idx has x's rank, out has idx's
 *                                        shape, idx.shape[d] <= x.shape[d] off the axis;
 *                                        out[i] = x[i with i[axis] = idx[i]]  (torch.gather)
 *   SCATTER_ADD  [x, idx, src, out]      params.scatter(axis): out = x, then
 *                                        out[i with i[axis] = idx[i]] += src[i] over idx's shape
 *                                        (src at least idx's shape; torch.scatter_add)
 *   INDEX_ADD    [x, idx(1-d), src, out] params.scatter(axis) (or index_select(axis)): out = x,
 *                                        then out[.., idx[j], ..] += src[.., j, ..]
 * The two adds accumulate in index order (deterministic, equal to numpy.add.at); F16/BF16 add in
 * F32 and round each sum, which equals NumPy's / ml_dtypes' own 16-bit addition.  They may run in
 * place (out is exactly x: the copy is skipped); out must not overlap idx or src.
 *
 * Data is moved by element size (one function per size serves every dtype); the adds are typed.
 * Every operand may be strided, broadcast or reversed; contiguous INDEX_SELECT has a row-copy
 * fast path and contiguous 1-d GATHER a typed loop.
 */
#ifndef FUEL_KERNEL_CPU_INDEX_KERNELS_H
#define FUEL_KERNEL_CPU_INDEX_KERNELS_H

#include <stdio.h>

#include "movement_common.h"

/* An index-operand view: `ndim` dims over the iteration shape, byte strides (0 where the index
 * does not vary, as for INDEX_SELECT / INDEX_ADD off the axis). */
typedef struct {
    const char *base;
    int is64;
    int64_t strides[FK_MAX_DIMS];   /* bytes */
} fk_ix_index;

static void fk_ix_position(char *buf, size_t cap, const int64_t *index, int ndim) {
    size_t w = 0;
    w += (size_t)snprintf(buf + w, cap - w, "(");
    for (int d = 0; d < ndim && w < cap; d++)
        w += (size_t)snprintf(buf + w, cap - w, d ? ", %lld" : "%lld", (long long)index[d]);
    if (w < cap) snprintf(buf + w, cap - w, ndim == 1 ? ",)" : ")");
}

/* Check every index of idx (iteration shape `shape`) lies in [0, extent). */
static int fk_ix_check(const fk_layout *idx_layout, const fk_storage *idx, int64_t extent, int axis, const char *op) {
    int ndim = idx_layout->ndim, size = fk_dtype_itemsize[idx->dtype], is64 = idx->dtype == FK_I64;
    int64_t index[FK_MAX_DIMS] = {0}, n;
    const char *base = (const char *)idx->data + idx_layout->offset * size;
    int status = fk_layout_numel_checked(idx_layout, &n, op);   /* a stride-0 view can claim 2**64 */
    if (status) return status;
    if (n == 0) return FK_OK;
    if (ndim == 1) {
        int64_t s = idx_layout->strides[0] * size, bad = -1, value = 0;
        if (is64) {
            for (int64_t i = 0; i < n; i++) {
                int64_t v = *(const int64_t *)(base + i * s);
                if ((uint64_t)v >= (uint64_t)extent) { bad = i; value = v; break; }
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                int64_t v = *(const int32_t *)(base + i * s);
                if ((uint64_t)v >= (uint64_t)extent) { bad = i; value = v; break; }
            }
        }
        if (bad >= 0) {
            fk_set_error(FK_ERR_INDEX, "%s: index %lld at position (%lld,) is out of range for axis %d of extent %lld",
                         op, (long long)value, (long long)bad, axis, (long long)extent);
            return FK_ERR_INDEX;
        }
        return FK_OK;
    }
    for (int64_t e = 0; e < n; e++) {
        const char *p = base;
        int64_t v;
        for (int d = 0; d < ndim; d++) p += index[d] * idx_layout->strides[d] * size;
        v = fk_mv_load_index(p, is64);
        if (v < 0 || v >= extent) {
            char pos[160];
            fk_ix_position(pos, sizeof(pos), index, ndim);
            fk_set_error(FK_ERR_INDEX, "%s: index %lld at position %s is out of range for axis %d of extent %lld",
                         op, (long long)v, pos, axis, (long long)extent);
            return FK_ERR_INDEX;
        }
        for (int d = ndim - 1; d >= 0; d--) {
            if (++index[d] < idx_layout->shape[d]) break;
            index[d] = 0;
        }
    }
    return FK_OK;
}

/* ---- the gather walk: out[i] = x[i with i[axis] = idx(i)] over out's shape --------------------- */
#define FK_IX_GATHER_INNER(T)                                                                    \
    do {                                                                                         \
        if (axis == last) {                                                                      \
            if (os == (int64_t)sizeof(T) && (is == 8 && ix->is64)) {                             \
                const int64_t *ip = (const int64_t *)ipt; T *op = (T *)opt;                      \
                for (int64_t k = 0; k < n; k++) op[k] = *(const T *)(xpt + ip[k] * xa);          \
            } else if (os == (int64_t)sizeof(T) && (is == 4 && !ix->is64)) {                     \
                const int32_t *ip = (const int32_t *)ipt; T *op = (T *)opt;                      \
                for (int64_t k = 0; k < n; k++) op[k] = *(const T *)(xpt + (int64_t)ip[k] * xa); \
            } else {                                                                             \
                for (int64_t k = 0; k < n; k++)                                                  \
                    *(T *)(opt + k * os) = *(const T *)(xpt + fk_mv_load_index(ipt + k * is, ix->is64) * xa); \
            }                                                                                    \
        } else if (is == 0) {                                                                    \
            const char *xr = xpt + fk_mv_load_index(ipt, ix->is64) * xa;                         \
            for (int64_t k = 0; k < n; k++) *(T *)(opt + k * os) = *(const T *)(xr + k * xs);    \
        } else {                                                                                 \
            for (int64_t k = 0; k < n; k++)                                                      \
                *(T *)(opt + k * os) = *(const T *)(xpt + k * xs + fk_mv_load_index(ipt + k * is, ix->is64) * xa); \
        }                                                                                        \
    } while (0)

__attribute__((target_clones("avx512f", "avx2", "default")))
static void fk_ix_gather_row(const char *xpt, int64_t xs, int64_t xa, const char *ipt, int64_t is, const fk_ix_index *ix,
                             char *opt, int64_t os, int64_t n, int axis, int last, int size) {
    switch (size) {
    case 1: FK_IX_GATHER_INNER(uint8_t); break;
    case 2: FK_IX_GATHER_INNER(uint16_t); break;
    case 4: FK_IX_GATHER_INNER(uint32_t); break;
    default: FK_IX_GATHER_INNER(uint64_t); break;
    }
}

/* x: strides in elements; out: the iteration layout; all indices already checked. */
static void fk_ix_gather_walk(const fk_storage *xs_, const fk_layout *x, const fk_ix_index *ix,
                              fk_storage *os_, const fk_layout *out, int axis) {
    int size = fk_dtype_itemsize[xs_->dtype], ndim = out->ndim, last = ndim - 1;
    int64_t index[FK_MAX_DIMS] = {0}, rows = 1, n = out->shape[last];
    const char *xb = (const char *)xs_->data + x->offset * size;
    char *ob = (char *)os_->data + out->offset * size;
    if (fk_layout_numel(out) == 0) return;
    for (int d = 0; d < last; d++) rows *= out->shape[d];
    for (int64_t r = 0; r < rows; r++) {
        const char *xpt = xb, *ipt = ix->base;
        char *opt = ob;
        for (int d = 0; d < last; d++) {
            if (d != axis) xpt += index[d] * x->strides[d] * size;
            ipt += index[d] * ix->strides[d];
            opt += index[d] * out->strides[d] * size;
        }
        fk_ix_gather_row(xpt, x->strides[last] * size, x->strides[axis] * size, ipt, ix->strides[last], ix,
                         opt, out->strides[last] * size, n, axis, last, size);
        for (int d = last - 1; d >= 0; d--) {
            if (++index[d] < out->shape[d]) break;
            index[d] = 0;
        }
    }
}

/* ---- INDEX_SELECT ---------------------------------------------------------------------------------- */
static int fk_ix_is_contiguous(const fk_layout *l) {
    int64_t expect = 1;
    for (int d = l->ndim - 1; d >= 0; d--) {
        if (l->shape[d] != 1 && l->strides[d] != expect) return 0;
        expect *= l->shape[d];
    }
    return 1;
}

#define FK_IX_ROWS(T)                                                                            \
    do {                                                                                         \
        const T *xr = (const T *)xo; T *orow = (T *)oo;                                          \
        if (is64) { const int64_t *ip = (const int64_t *)ib;                                     \
            for (int64_t j = 0; j < m; j++) orow[j] = xr[ip[j * istep]]; }                       \
        else { const int32_t *ip = (const int32_t *)ib;                                          \
            for (int64_t j = 0; j < m; j++) orow[j] = xr[ip[j * istep]]; }                       \
    } while (0)

typedef struct { uint64_t w[2]; } fk_ix_b16;
typedef struct { uint64_t w[4]; } fk_ix_b32;
typedef struct { uint64_t w[8]; } fk_ix_b64;

__attribute__((target_clones("avx512f", "avx2", "default")))
static void fk_ix_select_rows(const char *xb, char *ob, const char *ib, int64_t istep, int is64, int64_t outer,
                              int64_t n, int64_t m, int64_t row_bytes) {
    for (int64_t o = 0; o < outer; o++) {
        const char *xo = xb + o * n * row_bytes;
        char *oo = ob + o * m * row_bytes;
        switch (row_bytes) {
        case 1: FK_IX_ROWS(uint8_t); break;
        case 2: FK_IX_ROWS(uint16_t); break;
        case 4: FK_IX_ROWS(uint32_t); break;
        case 8: FK_IX_ROWS(uint64_t); break;
        case 16: FK_IX_ROWS(fk_ix_b16); break;
        case 32: FK_IX_ROWS(fk_ix_b32); break;
        case 64: FK_IX_ROWS(fk_ix_b64); break;
        default:
            for (int64_t j = 0; j < m; j++) {
                int64_t v = is64 ? ((const int64_t *)ib)[j * istep] : ((const int32_t *)ib)[j * istep];
                memcpy(oo + j * row_bytes, xo + v * row_bytes, (size_t)row_bytes);
            }
        }
    }
}

static int fk_index_select(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                           const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 2, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), axis, size;
    const fk_layout *x = &layouts[0], *idx = &layouts[1], *out = &layouts[2];
    int64_t shape[FK_MAX_DIMS], numel;
    fk_ix_index ix;
    if (status || (status = fk_mv_want_dtype(inputs, n_in, outputs, 2, inputs[0].dtype))) return status;
    if ((status = fk_mv_index_dtype(&inputs[1], 1))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_INDEX_SELECT, "index_select"))) return status;
    if ((status = fk_mv_axis(params->u.axis.axis, x->ndim, &axis, "index_select"))) return status;
    if (idx->ndim != 1) {
        fk_set_error(FK_ERR_SHAPE, "index_select indices must be 1-d, not %d-d", (int)idx->ndim);
        return FK_ERR_SHAPE;
    }
    for (int d = 0; d < x->ndim; d++) shape[d] = d == axis ? idx->shape[0] : x->shape[d];
    if ((status = fk_mv_out_shape(out, shape, x->ndim, "index_select"))) return status;
    if ((status = fk_ix_check(idx, &inputs[1], x->shape[axis], axis, "index_select"))) return status;
    if ((status = fk_layout_numel_checked(out, &numel, "index_select output"))) return status;
    if (numel == 0) return FK_OK;
    size = fk_dtype_itemsize[inputs[0].dtype];
    ix.is64 = inputs[1].dtype == FK_I64;
    ix.base = (const char *)inputs[1].data + idx->offset * fk_dtype_itemsize[inputs[1].dtype];
    if (fk_ix_is_contiguous(x) && fk_ix_is_contiguous(out)) {
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < axis; d++) outer *= x->shape[d];
        for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
        fk_ix_select_rows((const char *)inputs[0].data + x->offset * size, (char *)outputs[0].data + out->offset * size,
                          ix.base, idx->strides[0], ix.is64, outer, x->shape[axis], idx->shape[0], inner * size);
        return FK_OK;
    }
    for (int d = 0; d < x->ndim; d++) ix.strides[d] = 0;
    ix.strides[axis] = idx->strides[0] * fk_dtype_itemsize[inputs[1].dtype];
    fk_ix_gather_walk(&inputs[0], x, &ix, &outputs[0], out, axis);
    return FK_OK;
}

/* ---- GATHER ---------------------------------------------------------------------------------------- */
static int fk_gather(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                     const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 2, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), axis, isize;
    const fk_layout *x = &layouts[0], *idx = &layouts[1], *out = &layouts[2];
    fk_ix_index ix;
    if (status || (status = fk_mv_want_dtype(inputs, n_in, outputs, 2, inputs[0].dtype))) return status;
    if ((status = fk_mv_index_dtype(&inputs[1], 1))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_GATHER, "gather"))) return status;
    if ((status = fk_mv_axis(params->u.axis.axis, x->ndim, &axis, "gather"))) return status;
    if (idx->ndim != x->ndim) {
        fk_set_error(FK_ERR_SHAPE, "gather indices need the input's rank %d, not %d", (int)x->ndim, (int)idx->ndim);
        return FK_ERR_SHAPE;
    }
    for (int d = 0; d < x->ndim; d++)
        if (d != axis && idx->shape[d] > x->shape[d]) {
            fk_set_error(FK_ERR_SHAPE, "gather indices extent %lld on dim %d exceeds the input's %lld",
                         (long long)idx->shape[d], d, (long long)x->shape[d]);
            return FK_ERR_SHAPE;
        }
    if ((status = fk_mv_out_shape(out, idx->shape, idx->ndim, "gather"))) return status;
    if ((status = fk_ix_check(idx, &inputs[1], x->shape[axis], axis, "gather"))) return status;
    isize = fk_dtype_itemsize[inputs[1].dtype];
    ix.is64 = inputs[1].dtype == FK_I64;
    ix.base = (const char *)inputs[1].data + idx->offset * isize;
    for (int d = 0; d < x->ndim; d++) ix.strides[d] = idx->strides[d] * isize;
    fk_ix_gather_walk(&inputs[0], x, &ix, &outputs[0], out, axis);
    return FK_OK;
}

/* ---- the scatter walk: out[i with i[axis] = idx(i)] += src[i] over the iteration shape ----------- */
#define FK_IX_ADD_BOOL(o, s) (*(uint8_t *)(o) = (uint8_t)(*(uint8_t *)(o) | *(const uint8_t *)(s)))
#define FK_IX_ADD_INT(T, o, s) (*(T *)(o) = (T)((uint64_t)*(T *)(o) + (uint64_t)*(const T *)(s)))
#define FK_IX_ADD_U8(o, s) FK_IX_ADD_INT(uint8_t, o, s)
#define FK_IX_ADD_I8(o, s) FK_IX_ADD_INT(int8_t, o, s)
#define FK_IX_ADD_I16(o, s) FK_IX_ADD_INT(int16_t, o, s)
#define FK_IX_ADD_I32(o, s) FK_IX_ADD_INT(int32_t, o, s)
#define FK_IX_ADD_I64(o, s) FK_IX_ADD_INT(int64_t, o, s)
#define FK_IX_ADD_U32(o, s) FK_IX_ADD_INT(uint32_t, o, s)
#define FK_IX_ADD_F16(o, s) (*(uint16_t *)(o) = fk_f32_to_f16(fk_f16_to_f32(*(uint16_t *)(o)) + fk_f16_to_f32(*(const uint16_t *)(s))))
#define FK_IX_ADD_BF16(o, s) (*(uint16_t *)(o) = fk_f32_to_bf16(fk_bf16_to_f32(*(uint16_t *)(o)) + fk_bf16_to_f32(*(const uint16_t *)(s))))
#define FK_IX_ADD_F32(o, s) (*(float *)(o) += *(const float *)(s))
#define FK_IX_ADD_F64(o, s) (*(double *)(o) += *(const double *)(s))

#define FK_IX_SCATTER_WALK(D)                                                                    \
    static void fk_ix_scatter_walk_##D(fk_storage *os_, const fk_layout *out, const fk_ix_index *ix, \
                                       const fk_storage *ss_, const fk_layout *src,              \
                                       const int64_t *shape, int ndim, int axis) {              \
        int size = fk_dtype_itemsize[os_->dtype], last = ndim - 1;                               \
        int64_t index[FK_MAX_DIMS] = {0}, rows = 1, n = shape[last];                             \
        const char *sb = (const char *)ss_->data + src->offset * size;                           \
        char *ob = (char *)os_->data + out->offset * size;                                       \
        int64_t ss = src->strides[last] * size, os = out->strides[last] * size;                  \
        int64_t oa = out->strides[axis] * size, is = ix->strides[last];                          \
        for (int d = 0; d < ndim; d++) if (shape[d] == 0) return;                                \
        for (int d = 0; d < last; d++) rows *= shape[d];                                         \
        for (int64_t r = 0; r < rows; r++) {                                                     \
            const char *spt = sb, *ipt = ix->base;                                               \
            char *opt = ob;                                                                      \
            for (int d = 0; d < last; d++) {                                                     \
                spt += index[d] * src->strides[d] * size;                                        \
                ipt += index[d] * ix->strides[d];                                                \
                if (d != axis) opt += index[d] * out->strides[d] * size;                         \
            }                                                                                    \
            for (int64_t k = 0; k < n; k++) {                                                    \
                int64_t v = fk_mv_load_index(ipt + k * is, ix->is64);                            \
                char *o = opt + v * oa + (axis == last ? 0 : k * os);                            \
                FK_IX_ADD_##D(o, spt + k * ss);                                                  \
            }                                                                                    \
            for (int d = last - 1; d >= 0; d--) {                                                \
                if (++index[d] < shape[d]) break;                                                \
                index[d] = 0;                                                                    \
            }                                                                                    \
        }                                                                                        \
    }

typedef void (*fk_ix_scatter_fn)(fk_storage *os_, const fk_layout *out, const fk_ix_index *ix,
                                 const fk_storage *ss_, const fk_layout *src, const int64_t *shape, int ndim, int axis);

/* out = x (unless out is x), after checking out overlaps neither idx nor src. */
static int fk_ix_prepare_out(const fk_storage *inputs, fk_storage *outputs, const fk_layout *layouts, const char *op) {
    for (int k = 1; k <= 2; k++)
        if (fk_mv_overlaps(&outputs[0], &layouts[3], &inputs[k], &layouts[k])) {
            fk_set_error(FK_ERR_ALIAS, "%s output overlaps input %d (%s); only x may share its memory", op, k,
                         k == 1 ? "idx" : "src");
            return FK_ERR_ALIAS;
        }
    if (fk_mv_same_view(&inputs[0], &layouts[0], &outputs[0], &layouts[3])) return FK_OK;
    if (fk_mv_overlaps(&outputs[0], &layouts[3], &inputs[0], &layouts[0])) {
        fk_set_error(FK_ERR_ALIAS, "%s output overlaps x without being exactly x", op);
        return FK_ERR_ALIAS;
    }
    return fk_mv_copy(&inputs[0], &layouts[0], &outputs[0], &layouts[3]);
}

/* SCATTER_ADD / INDEX_ADD operands [x, idx, src, out]: three inputs, x, src and out of `dtype`,
 * idx an I32/I64 index operand. */
static int fk_ix_add_operands(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                              const fk_layout *layouts, int dtype) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 3, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP);
    if (status || (status = fk_mv_want_dtype(inputs, n_in, outputs, 0, dtype))) return status;
    if ((status = fk_mv_want_dtype(inputs, n_in, outputs, 2, dtype))) return status;
    if ((status = fk_mv_want_dtype(inputs, n_in, outputs, 3, dtype))) return status;
    return fk_mv_index_dtype(&inputs[1], 1);
}

static int fk_scatter_add_run(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                              const fk_layout *layouts, const fk_params *params, int dtype, fk_ix_scatter_fn walk) {
    int status = fk_ix_add_operands(inputs, n_in, outputs, n_out, layouts, dtype), axis, isize;
    const fk_layout *x = &layouts[0], *idx = &layouts[1], *src = &layouts[2];
    fk_ix_index ix;
    if (status) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_SCATTER, "scatter"))) return status;
    if ((status = fk_mv_axis(params->u.axis.axis, x->ndim, &axis, "scatter_add"))) return status;
    if ((status = fk_mv_same_shape(x, &layouts[3], "scatter_add input", "output"))) return status;
    if (idx->ndim != x->ndim || src->ndim != x->ndim) {
        fk_set_error(FK_ERR_SHAPE, "scatter_add idx and src need the input's rank %d", (int)x->ndim);
        return FK_ERR_SHAPE;
    }
    for (int d = 0; d < x->ndim; d++)
        if (idx->shape[d] > src->shape[d] || (d != axis && idx->shape[d] > x->shape[d])) {
            fk_set_error(FK_ERR_SHAPE, "scatter_add idx extent %lld on dim %d exceeds src (%lld) or x (%lld)",
                         (long long)idx->shape[d], d, (long long)src->shape[d], (long long)x->shape[d]);
            return FK_ERR_SHAPE;
        }
    if ((status = fk_ix_check(idx, &inputs[1], x->shape[axis], axis, "scatter_add"))) return status;
    if ((status = fk_ix_prepare_out(inputs, outputs, layouts, "scatter_add"))) return status;
    isize = fk_dtype_itemsize[inputs[1].dtype];
    ix.is64 = inputs[1].dtype == FK_I64;
    ix.base = (const char *)inputs[1].data + idx->offset * isize;
    for (int d = 0; d < x->ndim; d++) ix.strides[d] = idx->strides[d] * isize;
    walk(&outputs[0], &layouts[3], &ix, &inputs[2], src, idx->shape, x->ndim, axis);
    return FK_OK;
}

static int fk_index_add_run(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                            const fk_layout *layouts, const fk_params *params, int dtype, fk_ix_scatter_fn walk) {
    int status = fk_ix_add_operands(inputs, n_in, outputs, n_out, layouts, dtype), axis;
    const fk_layout *x = &layouts[0], *idx = &layouts[1], *src = &layouts[2];
    fk_ix_index ix;
    if (status) return status;
    if (params == NULL || (params->kind != FK_PARAMS_SCATTER && params->kind != FK_PARAMS_INDEX_SELECT)) {
        fk_set_error(FK_ERR_PARAMS, "index_add needs fuel_kernel.params.scatter(axis)");
        return FK_ERR_PARAMS;
    }
    if ((status = fk_mv_axis(params->u.axis.axis, x->ndim, &axis, "index_add"))) return status;
    if ((status = fk_mv_same_shape(x, &layouts[3], "index_add input", "output"))) return status;
    if (idx->ndim != 1 || src->ndim != x->ndim) {
        fk_set_error(FK_ERR_SHAPE, "index_add needs 1-d indices and src of the input's rank %d", (int)x->ndim);
        return FK_ERR_SHAPE;
    }
    for (int d = 0; d < x->ndim; d++)
        if (src->shape[d] != (d == axis ? idx->shape[0] : x->shape[d])) {
            fk_set_error(FK_ERR_SHAPE, "index_add src extent %lld on dim %d should be %lld",
                         (long long)src->shape[d], d, (long long)(d == axis ? idx->shape[0] : x->shape[d]));
            return FK_ERR_SHAPE;
        }
    if ((status = fk_ix_check(idx, &inputs[1], x->shape[axis], axis, "index_add"))) return status;
    {   /* the walk below runs over src's shape */
        int64_t numel;
        if ((status = fk_layout_numel_checked(src, &numel, "index_add src"))) return status;
    }
    if ((status = fk_ix_prepare_out(inputs, outputs, layouts, "index_add"))) return status;
    ix.is64 = inputs[1].dtype == FK_I64;
    ix.base = (const char *)inputs[1].data + idx->offset * fk_dtype_itemsize[inputs[1].dtype];
    for (int d = 0; d < x->ndim; d++) ix.strides[d] = 0;
    ix.strides[axis] = idx->strides[0] * fk_dtype_itemsize[inputs[1].dtype];
    walk(&outputs[0], &layouts[3], &ix, &inputs[2], src, src->shape, x->ndim, axis);
    return FK_OK;
}

#define FK_IX_ADD_ENTRIES(D, _)                                                                  \
    FK_IX_SCATTER_WALK(D)                                                                        \
    static int fk_scatter_add_##D(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                  const fk_layout *layouts, const fk_params *params) {          \
        return fk_scatter_add_run(inputs, n_in, outputs, n_out, layouts, params, FK_##D, fk_ix_scatter_walk_##D); \
    }                                                                                            \
    static int fk_index_add_##D(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                const fk_layout *layouts, const fk_params *params) {            \
        return fk_index_add_run(inputs, n_in, outputs, n_out, layouts, params, FK_##D, fk_ix_scatter_walk_##D); \
    }
FK_FOR_EACH_DTYPE(FK_IX_ADD_ENTRIES, _)

/* ---- manifest -------------------------------------------------------------------------------------- */
#define FK_IX_CAPS (FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT)
#define FK_IX_REV(OP, D, I) (0x6978000000000000ull | ((uint64_t)(OP) << 16) | ((uint64_t)(I) << 8) | (uint64_t)(D))
#define FK_IX_ADD_PRECISION {1, 1, {0, 0}, 0, 0.0, 0.0, "adds in index order, one rounding per add (= numpy.add.at); ints wrap; bool ORs"}

#define FK_IX_ROWS_FOR(D, I)                                                                     \
    {FK_OP_INDEX_SELECT, {3, {FK_##D, FK_##I, FK_##D}},                                          \
     {fk_index_select, FK_IX_CAPS, 0, FK_EXACT, fk_mv_copy_cost, "native", FK_IX_REV(FK_OP_INDEX_SELECT, FK_##D, FK_##I)}}, \
    {FK_OP_GATHER, {3, {FK_##D, FK_##I, FK_##D}},                                                \
     {fk_gather, FK_IX_CAPS, 0, FK_EXACT, fk_mv_copy_cost, "native", FK_IX_REV(FK_OP_GATHER, FK_##D, FK_##I)}}, \
    {FK_OP_SCATTER_ADD, {4, {FK_##D, FK_##I, FK_##D, FK_##D}},                                   \
     {fk_scatter_add_##D, FK_IX_CAPS | FK_CAP_INPLACE, 0, FK_IX_ADD_PRECISION, fk_mv_add_cost, "native", \
      FK_IX_REV(FK_OP_SCATTER_ADD, FK_##D, FK_##I)}},                                            \
    {FK_OP_INDEX_ADD, {4, {FK_##D, FK_##I, FK_##D, FK_##D}},                                     \
     {fk_index_add_##D, FK_IX_CAPS | FK_CAP_INPLACE, 0, FK_IX_ADD_PRECISION, fk_mv_add_cost, "native", \
      FK_IX_REV(FK_OP_INDEX_ADD, FK_##D, FK_##I)}},
#define FK_IX_ROWS_DTYPE(D, _) FK_IX_ROWS_FOR(D, I32) FK_IX_ROWS_FOR(D, I64)

static const fk_manifest_row fk_index_manifest[] = {
    FK_FOR_EACH_DTYPE(FK_IX_ROWS_DTYPE, _)
};
static const int fk_index_manifest_len = (int)(sizeof(fk_index_manifest) / sizeof(fk_index_manifest[0]));

#endif /* FUEL_KERNEL_CPU_INDEX_KERNELS_H */
