/* CPU data-movement kernels: SLICE, CONCAT, FLIP, ROLL, TRIU, TRIL, PAD, MASKED_FILL, CUMSUM.
 *
 * Most of these are re-viewings followed by a strided copy: SLICE and FLIP rewrite the input's
 * layout (offset, strides) and copy once; CONCAT copies each input into its slab of the output;
 * ROLL copies the 2^k pieces a k-dim roll cuts the input into; PAD copies the interior and then
 * fills (constant) or copies (reflect, replicate) the border slabs of the output from the output
 * itself.  Elements are moved by size, so one function serves every dtype of that size, and
 * every result is exact.  CUMSUM is the one that computes; it is typed per dtype.
 *
 * Operands (inputs, then the output) and params:
 *   SLICE        [x, out]             params.slice: per dim start/stop/step, Python slice rules
 *   CONCAT       [x0 .. x{k-1}, out]  params.concat(axis); k = 2..7 (one key per count)
 *   FLIP         [x, out]             params.flip(dims)
 *   ROLL         [x, out]             params.roll(shifts, dims): out[(i + shift) mod n] = x[i]
 *   TRIU / TRIL  [x, out]             params.triangular(diagonal) or none (diagonal 0); last two
 *                                     dims are the matrix; triu keeps j - i >= diagonal, tril <=
 *   PAD          [x, out]             params.pad: before/after for the LAST pad.ndim dims;
 *                                     constant (value cast like CAST), reflect (no edge repeat,
 *                                     width < extent), replicate (extent >= 1)
 *   MASKED_FILL  [x, mask(bool), out] params.masked_fill(value): out = mask ? value : x; x and
 *                                     mask broadcast to out's shape; may run in place on x
 *   CUMSUM       [x, out]             params.cumsum(axis, exclusive, reverse); integers wrap,
 *                                     F32/F64 add sequentially in the dtype (bit-equal to
 *                                     numpy.cumsum), F16/BF16 accumulate in F32 and round once
 *                                     per output element
 */
#ifndef FUEL_KERNEL_CPU_MOVEMENT_KERNELS_H
#define FUEL_KERNEL_CPU_MOVEMENT_KERNELS_H

#include "movement_common.h"

/* x and out (operands 0 and n_in) share a dtype. */
static int fk_mv_data_dtypes(const fk_storage *inputs, int n_in, const fk_storage *outputs, int first, int n_data) {
    for (int k = first; k < n_data; k++) {
        int status = fk_mv_want_dtype(inputs, n_in, outputs, k, inputs[0].dtype);
        if (status) return status;
    }
    return fk_mv_want_dtype(inputs, n_in, outputs, n_in, inputs[0].dtype);
}

/* ---- SLICE ------------------------------------------------------------------------------------- */
/* Python's slice.indices(n) followed by len(range(...)). */
static int64_t fk_slice_adjust(int64_t n, int64_t *start, int64_t *stop, int64_t step) {
    if (step == INT64_MIN) step = -INT64_MAX;   /* -step must not wrap; the length is the same */
    if (*start < 0) { *start += n; if (*start < 0) *start = step < 0 ? -1 : 0; }
    else if (*start >= n) *start = step < 0 ? n - 1 : n;
    if (*stop < 0) { *stop += n; if (*stop < 0) *stop = step < 0 ? -1 : 0; }
    else if (*stop >= n) *stop = step < 0 ? n - 1 : n;
    if (step < 0) return *stop < *start ? (*start - *stop - 1) / (-step) + 1 : 0;
    return *start < *stop ? (*stop - *start - 1) / step + 1 : 0;
}

static int fk_slice(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                    const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP);
    fk_layout view;
    int64_t shape[FK_MAX_DIMS];
    if (status || (status = fk_mv_data_dtypes(inputs, n_in, outputs, 1, 1))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_SLICE, "slice"))) return status;
    view = layouts[0];
    if (params->u.slice.ndim != view.ndim) {
        fk_set_error(FK_ERR_PARAMS, "slice lists %d dims but the input has %d", (int)params->u.slice.ndim, (int)view.ndim);
        return FK_ERR_PARAMS;
    }
    for (int d = 0; d < view.ndim; d++) {
        int64_t start = params->u.slice.start[d], stop = params->u.slice.stop[d], step = params->u.slice.step[d];
        if (step == 0) {
            fk_set_error(FK_ERR_PARAMS, "slice step on dim %d is zero", d);
            return FK_ERR_PARAMS;
        }
        shape[d] = fk_slice_adjust(view.shape[d], &start, &stop, step);
        if (shape[d] > 0) view.offset += start * view.strides[d];
        /* with two or more elements |step| * (count - 1) < extent, so the product stays inside the
         * validated span; a huge step leaves one element, whose stride is never used */
        view.strides[d] = shape[d] > 1 ? view.strides[d] * step : 0;
        view.shape[d] = shape[d];
    }
    if ((status = fk_mv_out_shape(&layouts[1], shape, view.ndim, "slice"))) return status;
    return fk_mv_copy(&inputs[0], &view, &outputs[0], &layouts[1]);
}

/* ---- CONCAT ------------------------------------------------------------------------------------ */
static int fk_concat(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                     const fk_layout *layouts, const fk_params *params) {
    int axis, status, ndim;
    int64_t shape[FK_MAX_DIMS], start = 0;
    if (n_in < 1 || n_in > FK_MAX_OPERANDS - 1 || n_out != 1) {
        fk_set_error(FK_ERR_OPERANDS, "concat takes 1 to %d inputs and 1 output, got %d and %d",
                     FK_MAX_OPERANDS - 1, n_in, n_out);
        return FK_ERR_OPERANDS;
    }
    if ((status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, n_in, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP))) return status;
    if ((status = fk_mv_data_dtypes(inputs, n_in, outputs, 1, n_in))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_CONCAT, "concat"))) return status;
    ndim = layouts[0].ndim;
    if ((status = fk_mv_axis(params->u.axis.axis, ndim, &axis, "concat"))) return status;
    for (int d = 0; d < ndim; d++) shape[d] = layouts[0].shape[d];
    shape[axis] = 0;
    for (int k = 0; k < n_in; k++) {
        const fk_layout *l = &layouts[k];
        int ok = l->ndim == ndim;
        for (int d = 0; ok && d < ndim; d++) ok = d == axis || l->shape[d] == shape[d];
        if (!ok) {
            fk_set_error(FK_ERR_SHAPE, "concat input %d does not match input 0 on the dims other than axis %d", k, axis);
            return FK_ERR_SHAPE;
        }
        if ((status = fk_size_add(shape[axis], l->shape[axis], &shape[axis], "concat axis extent"))) return status;
    }
    if ((status = fk_mv_out_shape(&layouts[n_in], shape, ndim, "concat"))) return status;
    for (int k = 0; k < n_in; k++) {
        fk_layout slab = fk_mv_narrow(&layouts[n_in], axis, start, layouts[k].shape[axis]);
        if ((status = fk_mv_copy(&inputs[k], &layouts[k], &outputs[0], &slab))) return status;
        start += layouts[k].shape[axis];
    }
    return FK_OK;
}

/* ---- FLIP -------------------------------------------------------------------------------------- */
static int fk_flip(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                   const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP);
    fk_layout view;
    if (status || (status = fk_mv_data_dtypes(inputs, n_in, outputs, 1, 1))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_FLIP, "flip"))) return status;
    if ((status = fk_mv_same_shape(&layouts[0], &layouts[1], "flip input", "output"))) return status;
    if (params->u.flip.ndims > FK_MAX_DIMS) {
        fk_set_error(FK_ERR_PARAMS, "flip lists %d dims; at most %d fit its params", (int)params->u.flip.ndims, FK_MAX_DIMS);
        return FK_ERR_PARAMS;
    }
    view = layouts[0];
    for (int i = 0; i < params->u.flip.ndims; i++) {
        int d;
        if ((status = fk_mv_axis(params->u.flip.dims[i], view.ndim, &d, "flip"))) return status;
        for (int j = 0; j < i; j++) {
            int e = -1;
            fk_mv_axis(params->u.flip.dims[j], view.ndim, &e, "flip");
            if (e == d) {
                fk_set_error(FK_ERR_PARAMS, "flip lists dim %d twice", d);
                return FK_ERR_PARAMS;
            }
        }
        if (view.shape[d] > 0) view.offset += (view.shape[d] - 1) * view.strides[d];
        view.strides[d] = -view.strides[d];
    }
    return fk_mv_copy(&inputs[0], &view, &outputs[0], &layouts[1]);
}

/* ---- ROLL -------------------------------------------------------------------------------------- */
static int fk_roll(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                   const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP);
    int dims[FK_MAX_DIMS], n_dims;
    int64_t shift[FK_MAX_DIMS];
    if (status || (status = fk_mv_data_dtypes(inputs, n_in, outputs, 1, 1))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_ROLL, "roll"))) return status;
    if ((status = fk_mv_same_shape(&layouts[0], &layouts[1], "roll input", "output"))) return status;
    n_dims = params->u.roll.ndims;
    if (n_dims < 1 || n_dims > FK_MAX_DIMS) {
        fk_set_error(FK_ERR_PARAMS, "roll lists %d dims; it needs 1 to %d", n_dims, FK_MAX_DIMS);
        return FK_ERR_PARAMS;
    }
    for (int i = 0; i < n_dims; i++) {
        int64_t n;
        if ((status = fk_mv_axis(params->u.roll.dims[i], layouts[0].ndim, &dims[i], "roll"))) return status;
        for (int j = 0; j < i; j++)
            if (dims[j] == dims[i]) {
                fk_set_error(FK_ERR_PARAMS, "roll lists dim %d twice", dims[i]);
                return FK_ERR_PARAMS;
            }
        n = layouts[0].shape[dims[i]];
        shift[i] = n ? params->u.roll.shifts[i] % n : 0;     /* in (-n, n): adding n cannot wrap */
        if (shift[i] < 0) shift[i] += n;
    }
    /* piece p takes, on each rolled dim i, the tail [n - s, n) -> [0, s) if bit i is set, else
     * the head [0, n - s) -> [s, n) */
    for (int p = 0; p < (1 << n_dims); p++) {
        fk_layout src = layouts[0], dst = layouts[1];
        for (int i = 0; i < n_dims; i++) {
            int64_t n = layouts[0].shape[dims[i]], s = shift[i];
            if (p & (1 << i)) {
                src = fk_mv_narrow(&src, dims[i], n - s, s);
                dst = fk_mv_narrow(&dst, dims[i], 0, s);
            } else {
                src = fk_mv_narrow(&src, dims[i], 0, n - s);
                dst = fk_mv_narrow(&dst, dims[i], s, n - s);
            }
        }
        if ((status = fk_mv_copy(&inputs[0], &src, &outputs[0], &dst))) return status;
    }
    return FK_OK;
}

/* ---- TRIU / TRIL ------------------------------------------------------------------------------- */
static int fk_triangular(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                         const fk_layout *layouts, const fk_params *params, int upper) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), nb;
    const fk_layout *x = &layouts[0], *o = &layouts[1];
    int64_t diagonal = 0, rows, cols, batch = 1, index[FK_MAX_DIMS] = {0};
    int size;
    const char *xb;
    char *ob;
    static const uint64_t zero = 0;
    if (status || (status = fk_mv_data_dtypes(inputs, n_in, outputs, 1, 1))) return status;
    if (params != NULL && params->kind == FK_PARAMS_TRIANGULAR) diagonal = params->u.triangular.diagonal;
    else if (params != NULL && params->kind != FK_PARAMS_NONE) {
        fk_set_error(FK_ERR_PARAMS, "%s takes fuel_kernel.params.triangular(diagonal) or no params", upper ? "triu" : "tril");
        return FK_ERR_PARAMS;
    }
    if ((status = fk_mv_same_shape(x, o, upper ? "triu input" : "tril input", "output"))) return status;
    if (x->ndim < 2) {
        fk_set_error(FK_ERR_SHAPE, "%s needs at least 2 dims, got %d", upper ? "triu" : "tril", (int)x->ndim);
        return FK_ERR_SHAPE;
    }
    nb = x->ndim - 2;
    rows = x->shape[nb];
    cols = x->shape[nb + 1];
    for (int d = 0; d < nb; d++)
        if ((status = fk_size_mul(batch, x->shape[d], &batch, "triangular batch"))) return status;
    if (batch == 0 || rows == 0 || cols == 0) return FK_OK;
    size = fk_dtype_itemsize[inputs[0].dtype];
    xb = (const char *)inputs[0].data + x->offset * size;
    ob = (char *)outputs[0].data + o->offset * size;
    for (int64_t b = 0; b < batch; b++) {
        const char *xm = xb;
        char *om = ob;
        for (int d = 0; d < nb; d++) {
            xm += index[d] * x->strides[d] * size;
            om += index[d] * o->strides[d] * size;
        }
        for (int64_t i = 0; i < rows; i++) {
            /* columns [0, edge) are zero for triu and kept for tril; edge = i + diagonal (+ 1 for
             * tril) saturates instead of wrapping (i >= 0, so only a positive sum overflows) */
            int64_t edge;
            const char *xr = xm + i * x->strides[nb] * size;
            char *orow = om + i * o->strides[nb] * size;
            int64_t cs = x->strides[nb + 1] * size, os = o->strides[nb + 1] * size;
            if (__builtin_add_overflow(i, diagonal, &edge) || (!upper && __builtin_add_overflow(edge, 1, &edge)))
                edge = cols;
            edge = edge < 0 ? 0 : edge > cols ? cols : edge;
            if (upper) {
                fk_mv_fill_row(orow, os, edge, size, &zero);
                fk_mv_copy_row(xr + edge * cs, cs, orow + edge * os, os, cols - edge, size);
            } else {
                fk_mv_copy_row(xr, cs, orow, os, edge, size);
                fk_mv_fill_row(orow + edge * os, os, cols - edge, size, &zero);
            }
        }
        for (int d = nb - 1; d >= 0; d--) {
            if (++index[d] < x->shape[d]) break;
            index[d] = 0;
        }
    }
    return FK_OK;
}

static int fk_triu(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                   const fk_layout *layouts, const fk_params *params) {
    return fk_triangular(inputs, n_in, outputs, n_out, layouts, params, 1);
}

static int fk_tril(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                   const fk_layout *layouts, const fk_params *params) {
    return fk_triangular(inputs, n_in, outputs, n_out, layouts, params, 0);
}

/* ---- PAD --------------------------------------------------------------------------------------- */
static int fk_pad(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                  const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), ndim, first, mode;
    const fk_layout *x = &layouts[0];
    int64_t shape[FK_MAX_DIMS], before[FK_MAX_DIMS] = {0}, after[FK_MAX_DIMS] = {0};
    fk_layout interior;
    if (status || (status = fk_mv_data_dtypes(inputs, n_in, outputs, 1, 1))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_PAD, "pad"))) return status;
    ndim = x->ndim;
    mode = params->u.pad.mode;
    if (params->u.pad.ndim < 0 || params->u.pad.ndim > ndim || mode < FK_PAD_CONSTANT || mode > FK_PAD_REPLICATE) {
        fk_set_error(FK_ERR_PARAMS, "pad lists %d dims (mode %d) for an input of %d dims",
                     (int)params->u.pad.ndim, mode, ndim);
        return FK_ERR_PARAMS;
    }
    first = ndim - params->u.pad.ndim;
    for (int d = 0; d < ndim; d++) {
        if (d >= first) {
            before[d] = params->u.pad.before[d - first];
            after[d] = params->u.pad.after[d - first];
        }
        if (before[d] < 0 || after[d] < 0) {
            fk_set_error(FK_ERR_PARAMS, "pad widths on dim %d are negative", d);
            return FK_ERR_PARAMS;
        }
        if (mode == FK_PAD_REFLECT && (before[d] >= x->shape[d] || after[d] >= x->shape[d]) && (before[d] || after[d])) {
            fk_set_error(FK_ERR_PARAMS, "reflect padding (%lld, %lld) on dim %d needs widths below the extent %lld",
                         (long long)before[d], (long long)after[d], d, (long long)x->shape[d]);
            return FK_ERR_PARAMS;
        }
        if (mode == FK_PAD_REPLICATE && x->shape[d] == 0 && (before[d] || after[d])) {
            fk_set_error(FK_ERR_PARAMS, "replicate padding cannot pad the empty dim %d", d);
            return FK_ERR_PARAMS;
        }
        if ((status = fk_size_add(x->shape[d], before[d], &shape[d], "pad extent")) ||
            (status = fk_size_add(shape[d], after[d], &shape[d], "pad extent")))
            return status;
    }
    if ((status = fk_mv_out_shape(&layouts[1], shape, ndim, "pad"))) return status;
    interior = layouts[1];
    for (int d = 0; d < ndim; d++) interior = fk_mv_narrow(&interior, d, before[d], x->shape[d]);
    if (mode == FK_PAD_CONSTANT) {
        uint64_t value = 0;
        fk_mv_scalar_bits(outputs[0].dtype, params->u.pad.value, &value);
        /* border slabs: on dim d, the full extent of dims < d and the interior of dims > d */
        for (int d = 0; d < ndim; d++) {
            fk_layout slab = layouts[1];
            for (int e = d + 1; e < ndim; e++) slab = fk_mv_narrow(&slab, e, before[e], x->shape[e]);
            fk_layout lo = fk_mv_narrow(&slab, d, 0, before[d]);
            fk_layout hi = fk_mv_narrow(&slab, d, before[d] + x->shape[d], after[d]);
            if ((status = fk_mv_fill(&outputs[0], &lo, &value))) return status;
            if ((status = fk_mv_fill(&outputs[0], &hi, &value))) return status;
        }
        return fk_mv_copy(&inputs[0], x, &outputs[0], &interior);
    }
    if ((status = fk_mv_copy(&inputs[0], x, &outputs[0], &interior))) return status;
    /* grow dim by dim: after dim d, dims <= d are complete over the interior of dims > d */
    for (int d = 0; d < ndim; d++) {
        fk_layout slab = layouts[1];
        int64_t n = x->shape[d];
        for (int e = d + 1; e < ndim; e++) slab = fk_mv_narrow(&slab, e, before[e], x->shape[e]);
        for (int64_t p = 0; p < before[d] + after[d]; p++) {
            int64_t dst = p < before[d] ? p : before[d] + n + (p - before[d]);
            int64_t rel = dst - before[d], src;      /* position relative to the interior */
            if (mode == FK_PAD_REFLECT) src = rel < 0 ? -rel : (n - 1) - (rel - (n - 1));   /* no 2n */
            else src = rel < 0 ? 0 : n - 1;
            fk_layout to = fk_mv_narrow(&slab, d, dst, 1), from = fk_mv_narrow(&slab, d, before[d] + src, 1);
            if ((status = fk_mv_copy(&outputs[0], &from, &outputs[0], &to))) return status;
        }
    }
    return FK_OK;
}

/* ---- MASKED_FILL ------------------------------------------------------------------------------- */
#define FK_MASKED_LOOP(T)                                                                        \
    do {                                                                                         \
        T v; memcpy(&v, value, sizeof(T));                                                       \
        if (xs == (int64_t)sizeof(T) && ms == 1 && os == (int64_t)sizeof(T)) {                   \
            const T *xp = (const T *)x; T *op = (T *)out;                                        \
            for (int64_t i = 0; i < n; i++) op[i] = m[i] ? v : xp[i];                            \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                      \
                *(T *)(out + i * os) = m[i * ms] ? v : *(const T *)(x + i * xs);                 \
        }                                                                                        \
    } while (0)

__attribute__((target_clones("avx512f", "avx2", "default")))
static void fk_masked_fill_row(const char *x, int64_t xs, const uint8_t *m, int64_t ms, char *out, int64_t os,
                               int64_t n, int size, const void *value) {
    switch (size) {
    case 1: FK_MASKED_LOOP(uint8_t); break;
    case 2: FK_MASKED_LOOP(uint16_t); break;
    case 4: FK_MASKED_LOOP(uint32_t); break;
    default: FK_MASKED_LOOP(uint64_t); break;
    }
}

static int fk_masked_fill(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                          const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 2, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), size;
    uint64_t value = 0;
    fk_loop loop;
    int64_t index[FK_MAX_DIMS] = {0};
    char *ptrs[3];
    if (status || (status = fk_mv_want_dtype(inputs, n_in, outputs, 2, inputs[0].dtype))) return status;
    if ((status = fk_mv_want_dtype(inputs, n_in, outputs, 1, FK_BOOL))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_MASKED_FILL, "masked_fill"))) return status;
    if ((status = fk_loop_plan(&loop, inputs, 2, outputs, layouts, NULL))) return status;
    size = fk_dtype_itemsize[inputs[0].dtype];
    fk_mv_scalar_bits(inputs[0].dtype, params->u.masked_fill.value, &value);
    for (int k = 0; k < 3; k++) ptrs[k] = loop.base[k];
    for (int64_t r = 0; r < loop.rows; r++) {
        fk_masked_fill_row(ptrs[0], fk_loop_inner_stride(&loop, 0), (const uint8_t *)ptrs[1],
                           fk_loop_inner_stride(&loop, 1), ptrs[2], fk_loop_inner_stride(&loop, 2),
                           loop.inner, size, &value);
        fk_loop_next(&loop, index, ptrs);
    }
    return FK_OK;
}

/* ---- CUMSUM ------------------------------------------------------------------------------------ */
#define FK_CUMSUM_U8 uint8_t, uint8_t, *(const uint8_t *)(p), *(uint8_t *)(q) = (acc)
#define FK_CUMSUM_I8 int8_t, uint8_t, (uint8_t)*(const int8_t *)(p), *(int8_t *)(q) = (int8_t)(acc)
#define FK_CUMSUM_I16 int16_t, uint16_t, (uint16_t)*(const int16_t *)(p), *(int16_t *)(q) = (int16_t)(acc)
#define FK_CUMSUM_I32 int32_t, uint32_t, (uint32_t)*(const int32_t *)(p), *(int32_t *)(q) = (int32_t)(acc)
#define FK_CUMSUM_I64 int64_t, uint64_t, (uint64_t)*(const int64_t *)(p), *(int64_t *)(q) = (int64_t)(acc)
#define FK_CUMSUM_U32 uint32_t, uint32_t, *(const uint32_t *)(p), *(uint32_t *)(q) = (acc)
#define FK_CUMSUM_F16 uint16_t, float, fk_f16_to_f32(*(const uint16_t *)(p)), *(uint16_t *)(q) = fk_f32_to_f16(acc)
#define FK_CUMSUM_BF16 uint16_t, float, fk_bf16_to_f32(*(const uint16_t *)(p)), *(uint16_t *)(q) = fk_f32_to_bf16(acc)
#define FK_CUMSUM_F32 float, float, *(const float *)(p), *(float *)(q) = (acc)
#define FK_CUMSUM_F64 double, double, *(const double *)(p), *(double *)(q) = (acc)

#define FK_CUMSUM_KERNEL_(NAME, T, ACC, LOAD, STORE)                                              \
    static void fk_cumsum_line_##NAME(const char *x, int64_t xs, char *out, int64_t os, int64_t n, \
                                      int exclusive) {                                           \
        ACC acc = 0;                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                        \
            const char *p = x + i * xs;                                                          \
            char *q = out + i * os;                                                              \
            ACC v = LOAD;                                                                        \
            if (exclusive) { STORE; acc += v; }                                                  \
            else { acc += v; STORE; }                                                            \
        }                                                                                        \
    }
#define FK_CUMSUM_KERNEL(NAME, ...) FK_CUMSUM_KERNEL_(NAME, __VA_ARGS__)

typedef void (*fk_cumsum_line_fn)(const char *x, int64_t xs, char *out, int64_t os, int64_t n, int exclusive);

static int fk_cumsum_run(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                         const fk_layout *layouts, const fk_params *params, int dtype, fk_cumsum_line_fn line) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), axis, size;
    const fk_layout *x = &layouts[0], *o = &layouts[1];
    int64_t lines = 1, numel, index[FK_MAX_DIMS] = {0}, n, xs, os;
    const char *xb;
    char *ob;
    if (status || (status = fk_mv_want_dtype(inputs, n_in, outputs, 0, dtype))) return status;
    if ((status = fk_mv_want_dtype(inputs, n_in, outputs, 1, dtype))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_CUMSUM, "cumsum"))) return status;
    if ((status = fk_mv_same_shape(x, o, "cumsum input", "output"))) return status;
    if ((status = fk_mv_axis(params->u.cumsum.axis, x->ndim, &axis, "cumsum"))) return status;
    if ((status = fk_layout_numel_checked(x, &numel, "cumsum input"))) return status;
    if (numel == 0) return FK_OK;
    size = fk_dtype_itemsize[dtype];
    n = x->shape[axis];
    xs = x->strides[axis] * size;
    os = o->strides[axis] * size;
    xb = (const char *)inputs[0].data + x->offset * size;
    ob = (char *)outputs[0].data + o->offset * size;
    if (params->u.cumsum.reverse) {
        xb += (n - 1) * xs;
        ob += (n - 1) * os;
        xs = -xs;
        os = -os;
    }
    for (int d = 0; d < x->ndim; d++) if (d != axis) lines *= x->shape[d];
    for (int64_t l = 0; l < lines; l++) {
        const char *xp = xb;
        char *op = ob;
        for (int d = 0; d < x->ndim; d++) {
            xp += index[d] * x->strides[d] * size;
            op += index[d] * o->strides[d] * size;
        }
        line(xp, xs, op, os, n, params->u.cumsum.exclusive);
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (d == axis) continue;
            if (++index[d] < x->shape[d]) break;
            index[d] = 0;
        }
    }
    return FK_OK;
}

#define FK_CUMSUM_ENTRY(NAME)                                                                    \
    FK_CUMSUM_KERNEL(NAME, FK_CUMSUM_##NAME)                                                     \
    static int fk_cumsum_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                const fk_layout *layouts, const fk_params *params) {            \
        return fk_cumsum_run(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME,           \
                             fk_cumsum_line_##NAME);                                             \
    }
FK_CUMSUM_ENTRY(U8)
FK_CUMSUM_ENTRY(I8)
FK_CUMSUM_ENTRY(I16)
FK_CUMSUM_ENTRY(I32)
FK_CUMSUM_ENTRY(I64)
FK_CUMSUM_ENTRY(U32)
FK_CUMSUM_ENTRY(F16)
FK_CUMSUM_ENTRY(BF16)
FK_CUMSUM_ENTRY(F32)
FK_CUMSUM_ENTRY(F64)

/* ---- manifest ---------------------------------------------------------------------------------- */
#define FK_MV_CAPS (FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT)
#define FK_MV_REV(OP, D, EXTRA) (0x6d76000000000000ull | ((uint64_t)(OP) << 16) | ((uint64_t)(EXTRA) << 8) | (uint64_t)(D))

#define FK_MV_ROW(OP, FN, CAPS, D)                                                               \
    {OP, {2, {FK_##D, FK_##D}}, {FN, CAPS, 0, FK_EXACT, fk_mv_copy_cost, "native", FK_MV_REV(OP, FK_##D, 0)}},
#define FK_MV_UNARY_ROWS(D, _)                                                                   \
    FK_MV_ROW(FK_OP_SLICE, fk_slice, FK_MV_CAPS, D)                                               \
    FK_MV_ROW(FK_OP_FLIP, fk_flip, FK_MV_CAPS, D)                                                 \
    FK_MV_ROW(FK_OP_ROLL, fk_roll, FK_MV_CAPS, D)                                                 \
    FK_MV_ROW(FK_OP_TRIU, fk_triu, FK_MV_CAPS | FK_CAP_INPLACE, D)                                \
    FK_MV_ROW(FK_OP_TRIL, fk_tril, FK_MV_CAPS | FK_CAP_INPLACE, D)                                \
    FK_MV_ROW(FK_OP_PAD, fk_pad, FK_MV_CAPS, D)                                                   \
    {FK_OP_MASKED_FILL, {3, {FK_##D, FK_BOOL, FK_##D}},                                          \
     {fk_masked_fill, FK_MV_CAPS | FK_CAP_INPLACE, 0, FK_EXACT, fk_mv_copy_cost, "native",        \
      FK_MV_REV(FK_OP_MASKED_FILL, FK_##D, 0)}},                                                 \
    FK_CONCAT_ROW(D, 2) FK_CONCAT_ROW(D, 3) FK_CONCAT_ROW(D, 4) FK_CONCAT_ROW(D, 5)              \
    FK_CONCAT_ROW(D, 6) FK_CONCAT_ROW(D, 7)

#define FK_CONCAT_DTYPES_2(D) FK_##D, FK_##D
#define FK_CONCAT_DTYPES_3(D) FK_##D, FK_CONCAT_DTYPES_2(D)
#define FK_CONCAT_DTYPES_4(D) FK_##D, FK_CONCAT_DTYPES_3(D)
#define FK_CONCAT_DTYPES_5(D) FK_##D, FK_CONCAT_DTYPES_4(D)
#define FK_CONCAT_DTYPES_6(D) FK_##D, FK_CONCAT_DTYPES_5(D)
#define FK_CONCAT_DTYPES_7(D) FK_##D, FK_CONCAT_DTYPES_6(D)
#define FK_CONCAT_DTYPES_8(D) FK_##D, FK_CONCAT_DTYPES_7(D)
#define FK_CONCAT_ROW_(D, K, K1)                                                                 \
    {FK_OP_CONCAT, {K1, {FK_CONCAT_DTYPES_##K1(D)}},                                             \
     {fk_concat, FK_MV_CAPS, 0, FK_EXACT, fk_mv_copy_cost, "native", FK_MV_REV(FK_OP_CONCAT, FK_##D, K)}},
#define FK_CONCAT_ROW(D, K) FK_CONCAT_ROW_K##K(D)
#define FK_CONCAT_ROW_K2(D) FK_CONCAT_ROW_(D, 2, 3)
#define FK_CONCAT_ROW_K3(D) FK_CONCAT_ROW_(D, 3, 4)
#define FK_CONCAT_ROW_K4(D) FK_CONCAT_ROW_(D, 4, 5)
#define FK_CONCAT_ROW_K5(D) FK_CONCAT_ROW_(D, 5, 6)
#define FK_CONCAT_ROW_K6(D) FK_CONCAT_ROW_(D, 6, 7)
#define FK_CONCAT_ROW_K7(D) FK_CONCAT_ROW_(D, 7, 8)

#define FK_CUMSUM_ROW(D, NOTE)                                                                   \
    {FK_OP_CUMSUM, {2, {FK_##D, FK_##D}},                                                        \
     {fk_cumsum_##D, FK_MV_CAPS | FK_CAP_INPLACE, 0, NOTE, fk_mv_add_cost, "native",              \
      FK_MV_REV(FK_OP_CUMSUM, FK_##D, 0)}},
#define FK_CUMSUM_EXACT {1, 1, {0, 0}, 0, 0.0, 0.0, "sequential sum in the dtype (ints wrap): equals numpy.cumsum(x, dtype=x.dtype)"}
#define FK_CUMSUM_HALF {1, 1, {0, 0}, 1, 0.0, 0.0, "F32 accumulator rounded once per output: <=1 ulp of the f32 prefix sum"}

static const fk_manifest_row fk_movement_manifest[] = {
    FK_FOR_EACH_DTYPE(FK_MV_UNARY_ROWS, _)
    FK_CUMSUM_ROW(U8, FK_CUMSUM_EXACT) FK_CUMSUM_ROW(I8, FK_CUMSUM_EXACT) FK_CUMSUM_ROW(I16, FK_CUMSUM_EXACT)
    FK_CUMSUM_ROW(I32, FK_CUMSUM_EXACT) FK_CUMSUM_ROW(I64, FK_CUMSUM_EXACT) FK_CUMSUM_ROW(U32, FK_CUMSUM_EXACT)
    FK_CUMSUM_ROW(F16, FK_CUMSUM_HALF) FK_CUMSUM_ROW(BF16, FK_CUMSUM_HALF)
    FK_CUMSUM_ROW(F32, FK_CUMSUM_EXACT) FK_CUMSUM_ROW(F64, FK_CUMSUM_EXACT)
};
static const int fk_movement_manifest_len = (int)(sizeof(fk_movement_manifest) / sizeof(fk_movement_manifest[0]));

#endif /* FUEL_KERNEL_CPU_MOVEMENT_KERNELS_H */
