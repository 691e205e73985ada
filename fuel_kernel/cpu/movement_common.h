/* Helpers shared by the CPU data-movement, indexing and attention kernel modules.
 *
 * Movement kernels are written per element SIZE, not per dtype: one C function per op copies
 * 1-, 2-, 4- or 8-byte elements and is registered for every dtype of that size.  The function
 * therefore checks that the data operands agree with each other (same dtype as input 0) instead
 * of against one fixed dtype; the dispatch layer has already matched them to the binding's key.
 * Every multi-step kernel validates all operands with the helpers below before its first write,
 * so a failing call leaves the output untouched.
 */
#ifndef FUEL_KERNEL_CPU_MOVEMENT_COMMON_H
#define FUEL_KERNEL_CPU_MOVEMENT_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuel_kernel/abi.h"
#include "fuel_kernel/half.h"
#include "fuel_kernel/strided.h"

/* Operand k (inputs then the output) must have dtype `want`. */
static int fk_mv_want_dtype(const fk_storage *inputs, int n_in, const fk_storage *outputs, int k, int want) {
    const fk_storage *st = k < n_in ? &inputs[k] : &outputs[k - n_in];
    if (st->dtype != want) {
        fk_set_error(FK_ERR_DTYPE, "%s %d has dtype %s but this kernel takes %s", k < n_in ? "input" : "output",
                     k < n_in ? k : k - n_in, fk_dtype_short_name[st->dtype], fk_dtype_short_name[want]);
        return FK_ERR_DTYPE;
    }
    return FK_OK;
}

static int fk_mv_index_dtype(const fk_storage *st, int k) {
    if (st->dtype != FK_I32 && st->dtype != FK_I64) {
        fk_set_error(FK_ERR_DTYPE, "input %d is an index operand and must be i32 or i64, not %s", k,
                     fk_dtype_short_name[st->dtype]);
        return FK_ERR_DTYPE;
    }
    return FK_OK;
}

static int fk_mv_params_kind(const fk_params *params, int want, const char *what) {
    if (params == NULL || params->kind != want) {
        fk_set_error(FK_ERR_PARAMS, "%s needs fuel_kernel.params.%s(...)", what, what);
        return FK_ERR_PARAMS;
    }
    return FK_OK;
}

/* Normalize a possibly negative axis against ndim. */
static int fk_mv_axis(int64_t axis, int ndim, int *out, const char *what) {
    if (axis < -ndim || axis >= ndim || ndim == 0) {
        fk_set_error(FK_ERR_PARAMS, "%s axis %lld is out of range for %d dims", what, (long long)axis, ndim);
        return FK_ERR_PARAMS;
    }
    *out = (int)(axis < 0 ? axis + ndim : axis);
    return FK_OK;
}

static int fk_mv_same_shape(const fk_layout *a, const fk_layout *b, const char *what_a, const char *what_b) {
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
        fk_set_error(FK_ERR_SHAPE, "%s and %s must have the same shape (%d vs %d dims)", what_a, what_b,
                     (int)a->ndim, (int)b->ndim);
        return FK_ERR_SHAPE;
    }
    return FK_OK;
}

/* The output must have exactly `shape`. */
static int fk_mv_out_shape(const fk_layout *out, const int64_t *shape, int ndim, const char *op) {
    int ok = out->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = out->shape[d] == shape[d];
    if (!ok) {
        char want[160], got[160];
        int w = 0, g = 0;
        for (int d = 0; d < ndim && w < 140; d++) w += snprintf(want + w, sizeof(want) - w, d ? ", %lld" : "%lld", (long long)shape[d]);
        for (int d = 0; d < out->ndim && g < 140; d++) g += snprintf(got + g, sizeof(got) - g, d ? ", %lld" : "%lld", (long long)out->shape[d]);
        want[w] = got[g] = 0;
        fk_set_error(FK_ERR_SHAPE, "%s output must have shape (%s), not (%s)", op, want, got);
        return FK_ERR_SHAPE;
    }
    return FK_OK;
}

/* The byte range [lo, hi) an operand addresses; empty views give lo == hi. */
static void fk_mv_extent(const fk_storage *st, const fk_layout *l, const char **lo, const char **hi) {
    int64_t a = l->offset, b = l->offset, size = fk_dtype_itemsize[st->dtype];
    for (int d = 0; d < l->ndim; d++) {
        if (l->shape[d] == 0) { *lo = *hi = (const char *)st->data; return; }
        if (l->strides[d] > 0) b += l->strides[d] * (l->shape[d] - 1);
        else a += l->strides[d] * (l->shape[d] - 1);
    }
    *lo = (const char *)st->data + a * size;
    *hi = (const char *)st->data + (b + 1) * size;
}

static int fk_mv_overlaps(const fk_storage *a, const fk_layout *la, const fk_storage *b, const fk_layout *lb) {
    const char *alo, *ahi, *blo, *bhi;
    fk_mv_extent(a, la, &alo, &ahi);
    fk_mv_extent(b, lb, &blo, &bhi);
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

static int fk_mv_same_view(const fk_storage *a, const fk_layout *la, const fk_storage *b, const fk_layout *lb) {
    if (a->data != b->data || la->offset != lb->offset || la->ndim != lb->ndim) return 0;
    if (fk_dtype_itemsize[a->dtype] != fk_dtype_itemsize[b->dtype]) return 0;
    for (int d = 0; d < la->ndim; d++)
        if (la->shape[d] != lb->shape[d] || la->strides[d] != lb->strides[d]) return 0;
    return 1;
}

/* The view of `l` restricted to [start, start + len) along `axis`. */
static inline fk_layout fk_mv_narrow(const fk_layout *l, int axis, int64_t start, int64_t len) {
    fk_layout v = *l;
    v.offset += start * l->strides[axis];
    v.shape[axis] = len;
    return v;
}

/* ---- a scalar (double) as the bytes of one element of `dtype` --------------------------------- */
static inline int64_t fk_mv_saturate(double v, double lo, double hi) {
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

/* Conversion follows CAST: floats round to nearest even, ints truncate then saturate, NaN -> 0. */
static void fk_mv_scalar_bits(int dtype, double v, void *out) {
    switch (dtype) {
    case FK_BOOL: { uint8_t x = v != 0; memcpy(out, &x, 1); break; }
    case FK_U8: { uint8_t x = (uint8_t)fk_mv_saturate(v, 0, UINT8_MAX); memcpy(out, &x, 1); break; }
    case FK_I8: { int8_t x = (int8_t)fk_mv_saturate(v, INT8_MIN, INT8_MAX); memcpy(out, &x, 1); break; }
    case FK_I16: { int16_t x = (int16_t)fk_mv_saturate(v, INT16_MIN, INT16_MAX); memcpy(out, &x, 2); break; }
    case FK_I32: { int32_t x = (int32_t)fk_mv_saturate(v, INT32_MIN, INT32_MAX); memcpy(out, &x, 4); break; }
    case FK_U32: { uint32_t x = (uint32_t)fk_mv_saturate(v, 0, UINT32_MAX); memcpy(out, &x, 4); break; }
    case FK_I64: {
        int64_t x = v != v ? 0 : v <= -9223372036854775808.0 ? INT64_MIN
                  : v >= 9223372036854775808.0 ? INT64_MAX : (int64_t)v;
        memcpy(out, &x, 8);
        break;
    }
    case FK_F16: { uint16_t x = fk_f64_to_f16(v); memcpy(out, &x, 2); break; }
    case FK_BF16: { uint16_t x = fk_f64_to_bf16(v); memcpy(out, &x, 2); break; }
    case FK_F32: { float x = (float)v; memcpy(out, &x, 4); break; }
    default: { memcpy(out, &v, 8); break; }
    }
}

/* ---- strided copy and fill of same-size elements ---------------------------------------------- */
#define FK_MV_COPY_LOOP(T)                                                                       \
    do {                                                                                         \
        if (ss == -(int64_t)sizeof(T) && ds == (int64_t)sizeof(T)) {                             \
            const T *s = (const T *)src; T *o = (T *)dst;                                        \
            for (int64_t i = 0; i < n; i++) o[i] = s[-i];                                        \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++) *(T *)(dst + i * ds) = *(const T *)(src + i * ss);   \
        }                                                                                        \
    } while (0)

__attribute__((target_clones("avx512f", "avx2", "default")))
static void fk_mv_copy_row(const char *src, int64_t ss, char *dst, int64_t ds, int64_t n, int size) {
    if (ss == size && ds == size) { memmove(dst, src, (size_t)(n * size)); return; }
    switch (size) {
    case 1: FK_MV_COPY_LOOP(uint8_t); break;
    case 2: FK_MV_COPY_LOOP(uint16_t); break;
    case 4: FK_MV_COPY_LOOP(uint32_t); break;
    default: FK_MV_COPY_LOOP(uint64_t); break;
    }
}

/* Copy the view (src, sl) into the same-shape view (dst, dl).  Both views must already have been
 * validated; the elements are `size` bytes in both. */
static int fk_mv_copy(const fk_storage *src, const fk_layout *sl, fk_storage *dst, const fk_layout *dl) {
    fk_layout pair[2];
    fk_loop loop;
    int64_t index[FK_MAX_DIMS] = {0};
    char *ptrs[2];
    int size = fk_dtype_itemsize[dst->dtype], status;
    pair[0] = *sl;
    pair[1] = *dl;
    if (fk_layout_numel(dl) == 0) return FK_OK;
    status = fk_loop_plan(&loop, src, 1, dst, pair, NULL);
    if (status) return status;
    ptrs[0] = loop.base[0];
    ptrs[1] = loop.base[1];
    for (int64_t r = 0; r < loop.rows; r++) {
        fk_mv_copy_row(ptrs[0], fk_loop_inner_stride(&loop, 0), ptrs[1], fk_loop_inner_stride(&loop, 1),
                       loop.inner, size);
        fk_loop_next(&loop, index, ptrs);
    }
    return FK_OK;
}

#define FK_MV_FILL_LOOP(T)                                                                       \
    do {                                                                                         \
        T v; memcpy(&v, value, sizeof(T));                                                       \
        for (int64_t i = 0; i < n; i++) *(T *)(dst + i * ds) = v;                                \
    } while (0)

__attribute__((target_clones("avx512f", "avx2", "default")))
static void fk_mv_fill_row(char *dst, int64_t ds, int64_t n, int size, const void *value) {
    switch (size) {
    case 1: FK_MV_FILL_LOOP(uint8_t); break;
    case 2: FK_MV_FILL_LOOP(uint16_t); break;
    case 4: FK_MV_FILL_LOOP(uint32_t); break;
    default: FK_MV_FILL_LOOP(uint64_t); break;
    }
}

/* Fill the (validated) view (dst, dl) with one element's bytes. */
static int fk_mv_fill(fk_storage *dst, const fk_layout *dl, const void *value) {
    fk_loop loop;
    int64_t index[FK_MAX_DIMS] = {0};
    char *ptrs[1];
    int size = fk_dtype_itemsize[dst->dtype], status;
    if (fk_layout_numel(dl) == 0) return FK_OK;
    status = fk_loop_plan(&loop, NULL, 0, dst, dl, NULL);
    if (status) return status;
    ptrs[0] = loop.base[0];
    for (int64_t r = 0; r < loop.rows; r++) {
        fk_mv_fill_row(ptrs[0], fk_loop_inner_stride(&loop, 0), loop.inner, size, value);
        fk_loop_next(&loop, index, ptrs);
    }
    return FK_OK;
}

/* An index element (i32 or i64) at byte address p. */
static inline int64_t fk_mv_load_index(const char *p, int is64) {
    return is64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

/* ---- cost functions ---------------------------------------------------------------------------- */
/* Pure data movement: every operand read or written once, no arithmetic. */
static fk_cost fk_mv_copy_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                               const fk_params *params) {
    fk_cost cost = {0.0, 0.0, 60.0};
    (void)params;
    for (int i = 0; i < n_layouts; i++)
        cost.bytes_moved += (double)fk_layout_numel(&layouts[i]) * fk_dtype_itemsize[dtypes->v[i]];
    return cost;
}

/* Movement plus one arithmetic operation per output element (cumsum, scatter/index add). */
static fk_cost fk_mv_add_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                              const fk_params *params) {
    fk_cost cost = fk_mv_copy_cost(layouts, n_layouts, dtypes, params);
    if (n_layouts > 0) cost.flops = (double)fk_layout_numel(&layouts[n_layouts - 1]);
    return cost;
}

#define FK_FOR_EACH_DTYPE(M, ...)                                                                \
    M(BOOL, __VA_ARGS__) M(U8, __VA_ARGS__) M(I8, __VA_ARGS__) M(I16, __VA_ARGS__)               \
    M(I32, __VA_ARGS__) M(I64, __VA_ARGS__) M(U32, __VA_ARGS__) M(F16, __VA_ARGS__)              \
    M(BF16, __VA_ARGS__) M(F32, __VA_ARGS__) M(F64, __VA_ARGS__)

#define FK_EXACT {1, 1, {0, 0}, 0, 0.0, 0.0, "exact: elements are copied bit for bit"}

#endif /* FUEL_KERNEL_CPU_MOVEMENT_COMMON_H */
