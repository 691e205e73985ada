/* CPU reductions SUM, MAX, MIN, MEAN, PROD, ARGMAX, ARGMIN over any set of dims, and their manifest.
 *
 * Operands [x, out], params.reduce(dims, keepdim) (or no params).  Conventions:
 *   dims       may be negative (counted from the end); an empty list, or params NONE, reduces
 *              every dim (like NumPy's axis=None).  keepdim keeps reduced dims as extent 1.
 *   dtypes     SUM, PROD: bool and ints -> I64 (two's-complement wrap-around, as NumPy's
 *              int64 accumulation), floats -> same dtype.  MAX, MIN: same dtype (bool: any/all).
 *              MEAN: bool and ints -> F64, floats -> same dtype.  ARGMAX, ARGMIN -> I64.
 *   floats     SUM/MEAN accumulate in F64, pairwise over the whole reduced index space, and round
 *              once; PROD accumulates in F64 sequentially.  MAX/MIN propagate NaN (np.max);
 *              ARGMAX/ARGMIN return the first NaN if any, else the first extremum (np.argmax).
 *   arg index  over several dims: the flat C-order index within the reduced dims.
 *   empty      SUM -> 0, PROD -> 1, MEAN -> NaN; MAX/MIN/ARG* over zero elements -> FK_ERR_SHAPE.
 * The input is walked through its strides (stride 0, negative, transposed); the output is
 * written through its strides.  Everything is validated before the first write.
 *
 * Algorithm: the driver (fk_reduce_run) splits the input axes into kept and reduced ones, orders
 * and merges the reduced axes so the innermost is the densest, then either (a) reduces the whole
 * reduced space once per output element ("one" functions: F64 pairwise sums over contiguous
 * leaves, vector-lane extrema), or (b) when a kept axis is denser than every reduced axis (a
 * column-style reduction), walks the reduced space once for up to 2048 outputs along that axis
 * ("outer" functions), so every load is unit-stride.
 */
#ifndef FUEL_KERNEL_CPU_REDUCE_KERNELS_H
#define FUEL_KERNEL_CPU_REDUCE_KERNELS_H

#include <math.h>

#include "compute_common.h"

/* The reduced index space of one output element: axes ordered outer to inner, strides in bytes. */
typedef struct {
    int n;                            /* >= 1 */
    int64_t count;                    /* elements reduced per output element */
    int64_t shape[FK_MAX_DIMS];
    int64_t stride[FK_MAX_DIMS];
} fk_red_axes;

typedef void (*fk_reduce_one_fn)(const char *base, const fk_red_axes *ax, char *out);
/* L outputs at once, along a kept axis (input byte stride si, output byte stride so) whose stride
 * is smaller than every reduced stride: the reduced slices are walked once, each updating all L
 * accumulators with unit-stride loads, instead of one strided walk per output element. */
typedef void (*fk_reduce_outer_fn)(const char *base, const fk_red_axes *ax, int64_t L, int64_t si,
                                   char *out, int64_t so, double *scratch);
#define FK_RED_TILE 2048                  /* columns per pass: whole rows of typical widths */

/* Move `p` to the next row (all axes but the innermost) of the reduced space. */
static inline void fk_red_next_row(const fk_red_axes *ax, int64_t *index, const char **p) {
    for (int d = ax->n - 2; d >= 0; d--) {
        if (++index[d] < ax->shape[d]) { *p += ax->stride[d]; return; }
        index[d] = 0;
        *p -= ax->stride[d] * (ax->shape[d] - 1);
    }
}

/* Validate operands and params, then call `one` once per output element.  `c_order` keeps the
 * reduced axes in their logical order (ARG*: the flat index must be C-order); otherwise they are
 * reordered by stride and flipped to positive strides so the inner loop walks memory forwards. */
static int fk_reduce_run(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                         const fk_layout *layouts, const fk_params *params, int in_dt, int out_dt,
                         int needs_elements, int c_order, fk_reduce_one_fn one, fk_reduce_outer_fn outer,
                         const char *opname) {
    int dtypes[2] = {in_dt, out_dt};
    const fk_layout *x, *out;
    uint8_t reduced[FK_MAX_DIMS] = {0};
    int keepdim = 0, nd, status, d, nk = 0;
    int64_t kshape[FK_MAX_DIMS], kin[FK_MAX_DIMS], kout[FK_MAX_DIMS], index[FK_MAX_DIMS] = {0};
    fk_red_axes ax;
    const char *in_base;
    char *out_base;
    int64_t isz = fk_dtype_itemsize[in_dt], osz = fk_dtype_itemsize[out_dt], n_out_elems = 1;

    status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, dtypes,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_DISJOINT);
    if (status || (status = fk_output_self_overlap_check(&layouts[1], "output 0"))) return status;
    x = &layouts[0];
    out = &layouts[1];
    nd = x->ndim;
    if (params == NULL || params->kind == FK_PARAMS_NONE ||
        (params->kind == FK_PARAMS_REDUCE && params->u.reduce.ndims == 0)) {
        for (d = 0; d < nd; d++) reduced[d] = 1;
        keepdim = params != NULL && params->kind == FK_PARAMS_REDUCE && params->u.reduce.keepdim;
    } else if (params->kind == FK_PARAMS_REDUCE) {
        keepdim = params->u.reduce.keepdim != 0;
        if (params->u.reduce.ndims > FK_MAX_DIMS) {
            fk_set_error(FK_ERR_PARAMS, "%s: %d reduce dims exceed %d", opname, (int)params->u.reduce.ndims, FK_MAX_DIMS);
            return FK_ERR_PARAMS;
        }
        for (int i = 0; i < params->u.reduce.ndims; i++) {
            int dim = params->u.reduce.dims[i], norm = dim < 0 ? dim + nd : dim;
            if (norm < 0 || norm >= nd) {
                fk_set_error(FK_ERR_PARAMS, "%s: dim %d is out of range for a %d-d input", opname, dim, nd);
                return FK_ERR_PARAMS;
            }
            if (reduced[norm]) {
                fk_set_error(FK_ERR_PARAMS, "%s: dim %d is listed twice", opname, dim);
                return FK_ERR_PARAMS;
            }
            reduced[norm] = 1;
        }
    } else {
        fk_set_error(FK_ERR_PARAMS, "%s takes params.reduce(dims, keepdim), not params kind %d", opname, (int)params->kind);
        return FK_ERR_PARAMS;
    }
    /* the output shape the params imply */
    {
        int o = 0, want_nd = 0;
        for (d = 0; d < nd; d++) want_nd += keepdim || !reduced[d];
        if (out->ndim != want_nd) {
            fk_set_error(FK_ERR_SHAPE, "%s: output has %d dims but reducing this %d-d input gives %d",
                         opname, (int)out->ndim, nd, want_nd);
            return FK_ERR_SHAPE;
        }
        for (d = 0; d < nd; d++) {
            if (reduced[d] && !keepdim) continue;
            int64_t want = reduced[d] ? 1 : x->shape[d];
            if (out->shape[o] != want) {
                fk_set_error(FK_ERR_SHAPE, "%s: output extent %lld on axis %d should be %lld",
                             opname, (long long)out->shape[o], o, (long long)want);
                return FK_ERR_SHAPE;
            }
            if (!reduced[d]) {
                kshape[nk] = x->shape[d];
                kin[nk] = x->strides[d] * isz;
                kout[nk] = out->strides[o] * osz;
                if ((status = fk_size_mul(n_out_elems, x->shape[d], &n_out_elems, opname))) return status;
                nk++;
            }
            o++;
        }
    }
    in_base = fk_elem_ptr(&inputs[0], x->offset);
    out_base = fk_elem_ptr(&outputs[0], out->offset);
    /* the reduced space */
    ax.n = 0;
    ax.count = 1;
    for (d = 0; d < nd; d++) {
        if (!reduced[d]) continue;
        if ((status = fk_size_mul(ax.count, x->shape[d], &ax.count, opname))) return status;
        if (x->shape[d] == 1) continue;
        ax.shape[ax.n] = x->shape[d];
        ax.stride[ax.n] = x->strides[d] * isz;
        ax.n++;
    }
    if (ax.count == 0) { ax.n = 1; ax.shape[0] = 0; ax.stride[0] = 0; }
    if (n_out_elems == 0) return FK_OK;
    if (ax.count == 0 && needs_elements) {
        fk_set_error(FK_ERR_SHAPE, "%s of zero elements has no identity", opname);
        return FK_ERR_SHAPE;
    }
    if (ax.n == 0) { ax.n = 1; ax.shape[0] = 1; ax.stride[0] = 0; }
    if (!c_order && ax.count > 0) {
        int64_t flip_offset = 0;
        for (d = 0; d < ax.n; d++) {
            if (ax.stride[d] < 0) {
                flip_offset += ax.stride[d] * (ax.shape[d] - 1);
                ax.stride[d] = -ax.stride[d];
            }
        }
        in_base += flip_offset;
        for (int i = 1; i < ax.n; i++) {      /* |stride| descending, stable */
            int64_t s = ax.stride[i], e = ax.shape[i];
            int j = i - 1;
            while (j >= 0 && ax.stride[j] < s) { ax.stride[j + 1] = ax.stride[j]; ax.shape[j + 1] = ax.shape[j]; j--; }
            ax.stride[j + 1] = s;
            ax.shape[j + 1] = e;
        }
    }
    {   /* merge axes that chain in memory (the flat C-order index is unchanged by this) */
        int m = 0;
        for (d = 1; d < ax.n; d++) {
            if (ax.stride[m] == ax.stride[d] * ax.shape[d]) {
                ax.shape[m] *= ax.shape[d];
                ax.stride[m] = ax.stride[d];
            } else {
                m++;
                ax.shape[m] = ax.shape[d];
                ax.stride[m] = ax.stride[d];
            }
        }
        ax.n = m + 1;
    }
    if (outer != NULL && nk > 0 && ax.count > 0) {
        int ki = -1;
        int64_t best = INT64_MAX, rmin = INT64_MAX;
        for (d = 0; d < nk; d++) {
            int64_t a = kin[d] < 0 ? -kin[d] : kin[d];
            if (kshape[d] > 1 && a < best) { best = a; ki = d; }
        }
        for (d = 0; d < ax.n; d++) {
            int64_t a = ax.stride[d] < 0 ? -ax.stride[d] : ax.stride[d];
            if (ax.shape[d] > 1 && a < rmin) rmin = a;
        }
        if (ki >= 0 && kshape[ki] >= 8 && best < rmin) {
            /* result, leaf and one partial sum per level of the pairwise merge (see fk_dsum_outer) */
            int levels = 2;
            while (levels < 62 && ((int64_t)16 << (levels - 2)) < ax.count) levels++;
            double *scratch = (double *)fk_scratch_alloc((size_t)(2 + levels) * FK_RED_TILE * sizeof(double));
            int64_t L = kshape[ki], si = kin[ki], so = kout[ki];
            if (scratch == NULL) return FK_ERR_NO_MEMORY;
            kshape[ki] = 1;                          /* the other kept axes form the outer loop */
            for (int64_t e = 0; e < n_out_elems / L; e++) {
                outer(in_base, &ax, L, si, out_base, so, scratch);
                for (d = nk - 1; d >= 0; d--) {
                    if (++index[d] < kshape[d]) { in_base += kin[d]; out_base += kout[d]; break; }
                    index[d] = 0;
                    in_base -= kin[d] * (kshape[d] - 1);
                    out_base -= kout[d] * (kshape[d] - 1);
                }
            }
            free(scratch);
            return FK_OK;
        }
    }
    for (int64_t e = 0; e < n_out_elems; e++) {
        one(in_base, &ax, out_base);
        for (d = nk - 1; d >= 0; d--) {
            if (++index[d] < kshape[d]) { in_base += kin[d]; out_base += kout[d]; break; }
            index[d] = 0;
            in_base -= kin[d] * (kshape[d] - 1);
            out_base -= kout[d] * (kshape[d] - 1);
        }
    }
    return FK_OK;
}

/* ---- accurate double sums: pairwise over rows and over the outer reduced axes -------------- */
#define FK_SUM_LEAF 256
#define FK_SUM_LANES 16

typedef float fk_v16f __attribute__((vector_size(64)));
typedef float fk_v16f_u __attribute__((vector_size(64), aligned(4)));
typedef double fk_v16d __attribute__((vector_size(128)));

/* F32_LANES: contiguous F32 leaves (16*FK_SUM_LEAF elements) add blocks of 512 in 64 F32 lanes
 * (eight elements per lane: one vector add per 16 elements instead of two conversions and two
 * F64 adds), then the blocks in F64; that adds at most 7 F32 roundings per element. */
#define FK_DEFINE_DSUM(NAME, CT, F32_LANES)                                                       \
    static inline __attribute__((always_inline)) double fk_dsum_leaf_##NAME(const char *p, int64_t n, int64_t s) { \
        double acc[FK_SUM_LANES] = {0};                                                           \
        int64_t i = 0;                                                                            \
        if (s == (int64_t)sizeof(CT)) {                                                           \
            const CT *x = (const CT *)p;                                                          \
            if (F32_LANES && n >= 64) {                                                           \
                fk_v16d d = {0};                                                                  \
                while (i + 64 <= n) {     /* blocks of up to 512: eight elements per F32 lane */  \
                    fk_v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                               \
                    int64_t stop = i + 512 <= n ? i + 512 : n - (n - i) % 64;                     \
                    for (; i < stop; i += 64) {                                                   \
                        a0 += *(const fk_v16f_u *)((const float *)x + i);                         \
                        a1 += *(const fk_v16f_u *)((const float *)x + i + 16);                    \
                        a2 += *(const fk_v16f_u *)((const float *)x + i + 32);                    \
                        a3 += *(const fk_v16f_u *)((const float *)x + i + 48);                    \
                    }                                                                             \
                    d += __builtin_convertvector(a0, fk_v16d) + __builtin_convertvector(a1, fk_v16d) + \
                         (__builtin_convertvector(a2, fk_v16d) + __builtin_convertvector(a3, fk_v16d)); \
                }                                                                                 \
                for (int j = 0; j < 16; j++) acc[j] = d[j];                                       \
            }                                                                                     \
            for (; i + FK_SUM_LANES <= n; i += FK_SUM_LANES)                                      \
                for (int j = 0; j < FK_SUM_LANES; j++) acc[j] += (double)FK_LD_##NAME(x[i + j]);  \
            for (int j = 0; i < n; i++, j++) acc[j] += (double)FK_LD_##NAME(x[i]);               \
        } else {                                                                                  \
            for (; i + FK_SUM_LANES <= n; i += FK_SUM_LANES)                                      \
                for (int j = 0; j < FK_SUM_LANES; j++)                                            \
                    acc[j] += (double)FK_LD_##NAME(*(const CT *)(p + (i + j) * s));               \
            for (int j = 0; i < n; i++, j++) acc[j] += (double)FK_LD_##NAME(*(const CT *)(p + i * s)); \
        }                                                                                         \
        for (int w = FK_SUM_LANES / 2; w > 0; w >>= 1)                                            \
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];                                     \
        return acc[0];                                                                            \
    }                                                                                             \
    /* pairwise over leaves without recursion: a binary counter merges equal-sized partial sums */ \
    FK_ISA_COMPUTE static double fk_dsum_row_##NAME(const char *p, int64_t n, int64_t s) {             \
        const int64_t leaf = F32_LANES ? 16 * FK_SUM_LEAF : FK_SUM_LEAF;                           \
        double stack[64], total = 0.0;                                                            \
        int top = 0;                                                                              \
        int64_t k = 0;                                                                            \
        if (n <= leaf) return fk_dsum_leaf_##NAME(p, n, s);                                       \
        for (int64_t i = 0; i < n; i += leaf, k++) {                                              \
            double v = fk_dsum_leaf_##NAME(p + i * s, n - i < leaf ? n - i : leaf, s);            \
            for (int64_t t = k + 1; !(t & 1); t >>= 1) v = stack[--top] + v;                      \
            stack[top++] = v;                                                                     \
        }                                                                                         \
        while (top > 0) total = stack[--top] + total;                                             \
        return total;                                                                             \
    }                                                                                             \
    /* pairwise over the index range [lo, hi) of axis a, then recursively inward */              \
    static double fk_dsum_axes_##NAME(const char *p, const fk_red_axes *ax, int a, int64_t lo, int64_t hi) { \
        if (a == ax->n - 1) return fk_dsum_row_##NAME(p + lo * ax->stride[a], hi - lo, ax->stride[a]); \
        if (hi - lo == 1) return fk_dsum_axes_##NAME(p + lo * ax->stride[a], ax, a + 1, 0, ax->shape[a + 1]); \
        {                                                                                         \
            int64_t mid = lo + (hi - lo) / 2;                                                     \
            return fk_dsum_axes_##NAME(p, ax, a, lo, mid) + fk_dsum_axes_##NAME(p, ax, a, mid, hi); \
        }                                                                                         \
    }                                                                                             \
    static double fk_dsum_##NAME(const char *p, const fk_red_axes *ax) {                          \
        if (ax->count == 0) return 0.0;                                                           \
        return fk_dsum_axes_##NAME(p, ax, 0, 0, ax->shape[0]);                                    \
    }

FK_DEFINE_DSUM(BOOL, uint8_t, 0)
FK_DEFINE_DSUM(U8, uint8_t, 0)
FK_DEFINE_DSUM(I8, int8_t, 0)
FK_DEFINE_DSUM(I16, int16_t, 0)
FK_DEFINE_DSUM(I32, int32_t, 0)
FK_DEFINE_DSUM(I64, int64_t, 0)
FK_DEFINE_DSUM(U32, uint32_t, 0)
FK_DEFINE_DSUM(F16, uint16_t, 0)
FK_DEFINE_DSUM(BF16, uint16_t, 0)
FK_DEFINE_DSUM(F32, float, 1)
FK_DEFINE_DSUM(F64, double, 0)

/* ---- per-dtype reduce_one functions ---------------------------------------------------------- */
/* Walk every element of the reduced space in order: BODY sees `v` (the loaded value) and `flat`. */
#define FK_RED_WALK(CT, NAME, BODY)                                                               \
    do {                                                                                          \
        int64_t idx_[FK_MAX_DIMS] = {0}, inner_ = ax->shape[ax->n - 1], s_ = ax->stride[ax->n - 1]; \
        int64_t rows_ = inner_ ? ax->count / inner_ : 0, flat = 0;                               \
        const char *row_ = base;                                                                  \
        for (int64_t r_ = 0; r_ < rows_; r_++) {                                                  \
            for (int64_t i_ = 0; i_ < inner_; i_++, flat++) {                                     \
                const CT raw_ = *(const CT *)(row_ + i_ * s_);                                    \
                (void)raw_;                                                                       \
                BODY                                                                              \
            }                                                                                     \
            fk_red_next_row(ax, idx_, &row_);                                                     \
        }                                                                                         \
    } while (0)

/* SUM/MEAN of floats (F64 accumulation, one rounding); MEAN of ints and bool (-> F64). */
#define FK_DEFINE_FSUM(NAME, CT)                                                                  \
    static void fk_sum_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {           \
        *(CT *)out = FK_STD_##NAME(fk_dsum_##NAME(base, ax));                                     \
    }
#define FK_DEFINE_MEAN(NAME, CT, OUT_NAME, OUT_CT)                                                \
    static void fk_mean_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {          \
        double total = fk_dsum_##NAME(base, ax);                                                  \
        *(OUT_CT *)out = FK_STD_##OUT_NAME(ax->count ? total / (double)ax->count : NAN);          \
    }

/* SUM/PROD of ints and bool -> I64 wrap-around (unsigned arithmetic: no UB on overflow). */
#define FK_DEFINE_ISUM(NAME, CT)                                                                  \
    static void fk_sum_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {           \
        uint64_t acc = 0;                                                                         \
        if (ax->n == 1 && ax->stride[0] == (int64_t)sizeof(CT)) {                                 \
            const CT *x = (const CT *)base;                                                       \
            for (int64_t i = 0; i < ax->count; i++) acc += (uint64_t)(int64_t)x[i];               \
        } else {                                                                                  \
            FK_RED_WALK(CT, NAME, acc += (uint64_t)(int64_t)raw_;);                               \
        }                                                                                         \
        *(int64_t *)out = (int64_t)acc;                                                           \
    }                                                                                             \
    static void fk_prod_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {          \
        uint64_t acc = 1;                                                                         \
        FK_RED_WALK(CT, NAME, acc *= (uint64_t)(int64_t)raw_;);                                   \
        *(int64_t *)out = (int64_t)acc;                                                           \
    }

#define FK_DEFINE_FPROD(NAME, CT)                                                                 \
    static void fk_prod_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {          \
        double acc = 1.0;                                                                         \
        FK_RED_WALK(CT, NAME, acc *= (double)FK_LD_##NAME(raw_););                                \
        *(CT *)out = FK_STD_##NAME(acc);                                                          \
    }

/* Contiguous rows of natively comparable dtypes: the extremum over 64 lanes (vectorized, several
 * independent vector chains) and
 * whether a NaN (or an infinity, conservatively) was seen; such rows fall back to the ordered
 * walk, which implements the NaN rules exactly. */
#define FK_DEFINE_LANES(NAME, CT, WHICH, CMP)                                                     \
    FK_ISA_COMPUTE static CT fk_lanes_##WHICH##_##NAME(const CT *restrict x, int64_t n, int *has_nan) { \
        CT m[64], z[64];   /* z sums v - v per lane: NaN (or inf - inf) marks a non-finite value */ \
        int nan = 0;                                                                              \
        int64_t i = 0;                                                                            \
        for (int j = 0; j < 64; j++) { m[j] = x[0]; z[j] = 0; }                                   \
        for (; i + 64 <= n; i += 64)                                                              \
            for (int j = 0; j < 64; j++) {                                                        \
                CT v = x[i + j];                                                                  \
                m[j] = v CMP m[j] ? v : m[j];                                                     \
                z[j] += v - v;                                                                    \
            }                                                                                     \
        for (; i < n; i++) { m[0] = x[i] CMP m[0] ? x[i] : m[0]; z[0] += x[i] - x[i]; }           \
        for (int j = 1; j < 64; j++) m[0] = m[j] CMP m[0] ? m[j] : m[0];                          \
        for (int j = 0; j < 64; j++) nan |= z[j] != z[j];                                         \
        *has_nan = nan;                                                                           \
        return m[0];                                                                              \
    }
#define FK_DEFINE_FAST_MINMAX(NAME, CT) FK_DEFINE_LANES(NAME, CT, max, >) FK_DEFINE_LANES(NAME, CT, min, <)
FK_DEFINE_FAST_MINMAX(U8, uint8_t)
FK_DEFINE_FAST_MINMAX(I8, int8_t)
FK_DEFINE_FAST_MINMAX(I16, int16_t)
FK_DEFINE_FAST_MINMAX(I32, int32_t)
FK_DEFINE_FAST_MINMAX(I64, int64_t)
FK_DEFINE_FAST_MINMAX(U32, uint32_t)
FK_DEFINE_FAST_MINMAX(F32, float)
FK_DEFINE_FAST_MINMAX(F64, double)
/* One reduced row into L column extrema (unit stride), with the same non-finite marker. */
#define FK_DEFINE_COLUMN_LANES(NAME, CT, WHICH, CMP)                                              \
    FK_ISA_COMPUTE static void fk_columns_##WHICH##_##NAME(CT *restrict m, CT *restrict z, const CT *restrict x, int64_t n) { \
        for (int64_t j = 0; j < n; j++) {                                                         \
            CT v = x[j];                                                                          \
            m[j] = v CMP m[j] ? v : m[j];                                                         \
            z[j] += v - v;                                                                        \
        }                                                                                         \
    }
#define FK_DEFINE_FAST_COLUMNS(NAME, CT) FK_DEFINE_COLUMN_LANES(NAME, CT, max, >) FK_DEFINE_COLUMN_LANES(NAME, CT, min, <)
FK_DEFINE_FAST_COLUMNS(U8, uint8_t)
FK_DEFINE_FAST_COLUMNS(I8, int8_t)
FK_DEFINE_FAST_COLUMNS(I16, int16_t)
FK_DEFINE_FAST_COLUMNS(I32, int32_t)
FK_DEFINE_FAST_COLUMNS(I64, int64_t)
FK_DEFINE_FAST_COLUMNS(U32, uint32_t)
FK_DEFINE_FAST_COLUMNS(F32, float)
FK_DEFINE_FAST_COLUMNS(F64, double)
#define fk_columns_max_BOOL NULL
#define fk_columns_min_BOOL NULL
#define fk_columns_max_F16 NULL
#define fk_columns_min_F16 NULL
#define fk_columns_max_BF16 NULL
#define fk_columns_min_BF16 NULL

/* BOOL, F16 and BF16 compare through a conversion: they take the ordered walk only */
#define fk_lanes_max_BOOL NULL
#define fk_lanes_min_BOOL NULL
#define fk_lanes_max_F16 NULL
#define fk_lanes_min_F16 NULL
#define fk_lanes_max_BF16 NULL
#define fk_lanes_min_BF16 NULL

/* The fast path for one output: returns 1 when it produced the result. */
#define FK_FAST_EXTREMUM(NAME, CT, WHICH, ARG)                                                    \
    do {                                                                                          \
        CT (*lanes_)(const CT *, int64_t, int *) = fk_lanes_##WHICH##_##NAME;                     \
        if (lanes_ != NULL && ax->n == 1 && ax->stride[0] == (int64_t)sizeof(CT) && ax->count > 0) { \
            int nan_;                                                                             \
            const CT *x_ = (const CT *)base;                                                      \
            CT best_ = lanes_(x_, ax->count, &nan_);                                              \
            if (!nan_) {                                                                          \
                if (ARG) {                                                                        \
                    int64_t at_ = 0;                                                              \
                    while (x_[at_] != best_) at_++;                                               \
                    *(int64_t *)out = at_;                                                        \
                } else {                                                                          \
                    *(CT *)out = best_;                                                           \
                }                                                                                 \
                return;                                                                           \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* MAX/MIN: the result is one of the inputs, stored back bit for bit; floats propagate NaN. */
#define FK_DEFINE_MINMAX(NAME, CT, IS_FLOAT)                                                      \
    static void fk_max_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {           \
        FK_FAST_EXTREMUM(NAME, CT, max, 0);                                                  \
        CT best = *(const CT *)base;                                                              \
        int nan = 0;                                                                              \
        FK_RED_WALK(CT, NAME, {                                                                   \
            if (IS_FLOAT) {                                                                       \
                if (FK_LD_##NAME(raw_) != FK_LD_##NAME(raw_)) { if (!nan) best = raw_; nan = 1; } \
                else if (!nan && FK_LD_##NAME(raw_) > FK_LD_##NAME(best)) best = raw_;            \
            } else if (FK_LD_##NAME(raw_) > FK_LD_##NAME(best)) best = raw_;                      \
        });                                                                                       \
        *(CT *)out = best;                                                                        \
    }                                                                                             \
    static void fk_min_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {           \
        FK_FAST_EXTREMUM(NAME, CT, min, 0);                                                  \
        CT best = *(const CT *)base;                                                              \
        int nan = 0;                                                                              \
        FK_RED_WALK(CT, NAME, {                                                                   \
            if (IS_FLOAT) {                                                                       \
                if (FK_LD_##NAME(raw_) != FK_LD_##NAME(raw_)) { if (!nan) best = raw_; nan = 1; } \
                else if (!nan && FK_LD_##NAME(raw_) < FK_LD_##NAME(best)) best = raw_;            \
            } else if (FK_LD_##NAME(raw_) < FK_LD_##NAME(best)) best = raw_;                      \
        });                                                                                       \
        *(CT *)out = best;                                                                        \
    }                                                                                             \
    static void fk_argmax_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {        \
        FK_FAST_EXTREMUM(NAME, CT, max, 1);                                                  \
        CT best = *(const CT *)base;                                                              \
        int64_t at = 0;                                                                           \
        int nan = 0;                                                                              \
        FK_RED_WALK(CT, NAME, {                                                                   \
            if (IS_FLOAT && !nan && FK_LD_##NAME(raw_) != FK_LD_##NAME(raw_)) { nan = 1; at = flat; } \
            else if (!nan && FK_LD_##NAME(raw_) > FK_LD_##NAME(best)) { best = raw_; at = flat; } \
        });                                                                                       \
        *(int64_t *)out = at;                                                                     \
    }                                                                                             \
    static void fk_argmin_one_##NAME(const char *base, const fk_red_axes *ax, char *out) {        \
        FK_FAST_EXTREMUM(NAME, CT, min, 1);                                                  \
        CT best = *(const CT *)base;                                                              \
        int64_t at = 0;                                                                           \
        int nan = 0;                                                                              \
        FK_RED_WALK(CT, NAME, {                                                                   \
            if (IS_FLOAT && !nan && FK_LD_##NAME(raw_) != FK_LD_##NAME(raw_)) { nan = 1; at = flat; } \
            else if (!nan && FK_LD_##NAME(raw_) < FK_LD_##NAME(best)) { best = raw_; at = flat; } \
        });                                                                                       \
        *(int64_t *)out = at;                                                                     \
    }

#define FK_FOR_INT_DTYPES(M) \
    M(BOOL, uint8_t) M(U8, uint8_t) M(I8, int8_t) M(I16, int16_t) M(I32, int32_t) M(I64, int64_t) M(U32, uint32_t)
#define FK_FOR_FLOAT_DTYPES(M) M(F16, uint16_t) M(BF16, uint16_t) M(F32, float) M(F64, double)

#define FK_INT_MEAN(NAME, CT) FK_DEFINE_MEAN(NAME, CT, F64, double)
#define FK_FLOAT_MEAN(NAME, CT) FK_DEFINE_MEAN(NAME, CT, NAME, CT)
#define FK_INT_MINMAX(NAME, CT) FK_DEFINE_MINMAX(NAME, CT, 0)
#define FK_FLOAT_MINMAX(NAME, CT) FK_DEFINE_MINMAX(NAME, CT, 1)
FK_FOR_INT_DTYPES(FK_INT_MEAN)
FK_FOR_INT_DTYPES(FK_DEFINE_ISUM)
FK_FOR_INT_DTYPES(FK_INT_MINMAX)
FK_FOR_FLOAT_DTYPES(FK_DEFINE_FSUM)
FK_FOR_FLOAT_DTYPES(FK_FLOAT_MEAN)
FK_FOR_FLOAT_DTYPES(FK_DEFINE_FPROD)
FK_FOR_FLOAT_DTYPES(FK_FLOAT_MINMAX)

/* ---- outer (column-style) reductions: one walk of the reduced space updates L accumulators ---- */
/* Visit every element of the reduced space; BODY sees `q` (its address) and `flat` (walk index). */
#define FK_RED_WALK_ALL(BASE, BODY)                                                               \
    do {                                                                                          \
        int64_t idx_[FK_MAX_DIMS] = {0}, inner_ = ax->shape[ax->n - 1], s_ = ax->stride[ax->n - 1]; \
        int64_t rows_ = inner_ ? ax->count / inner_ : 0, flat = 0;                               \
        const char *row_ = (BASE);                                                                \
        for (int64_t r_ = 0; r_ < rows_; r_++) {                                                  \
            for (int64_t i_ = 0; i_ < inner_; i_++, flat++) {                                     \
                const char *q = row_ + i_ * s_;                                                   \
                (void)flat;                                                                       \
                BODY                                                                              \
            }                                                                                     \
            fk_red_next_row(ax, idx_, &row_);                                                     \
        }                                                                                         \
    } while (0)

/* F64 sums of L columns, pairwise over the reduced elements: leaves of 16 elements, merged with a
 * binary counter (the same bound as fk_dsum_*).  res receives L doubles; scratch holds the leaf
 * and one partial-sum row per merge level (the driver sizes it from the reduced count). */
#define FK_DEFINE_DSUM_OUTER(NAME, CT)                                                            \
    FK_ISA_COMPUTE static void fk_dsum_axpy_##NAME(double *restrict acc, const char *q, int64_t n, int64_t si) { \
        if (si == (int64_t)sizeof(CT)) {                                                          \
            const CT *x = (const CT *)q;                                                          \
            for (int64_t j = 0; j < n; j++) acc[j] += (double)FK_LD_##NAME(x[j]);                 \
        } else {                                                                                  \
            for (int64_t j = 0; j < n; j++) acc[j] += (double)FK_LD_##NAME(*(const CT *)(q + j * si)); \
        }                                                                                         \
    }                                                                                             \
    static void fk_dsum_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                     double *res, double *scratch) {                              \
        double *leaf = scratch, *stack = scratch + FK_RED_TILE;                                   \
        for (int64_t t0 = 0; t0 < L; t0 += FK_RED_TILE) {                                         \
            int64_t tl = L - t0 < FK_RED_TILE ? L - t0 : FK_RED_TILE, k = 0;                      \
            int top = 0, cnt = 0;                                                                 \
            memset(leaf, 0, (size_t)tl * sizeof(double));                                         \
            FK_RED_WALK_ALL(base + t0 * si, {                                                     \
                fk_dsum_axpy_##NAME(leaf, q, tl, si);                                             \
                if (++cnt == 16 || flat == ax->count - 1) {                                       \
                    for (int64_t t = k + 1; !(t & 1); t >>= 1) {                                  \
                        top--;                                                                    \
                        for (int64_t j = 0; j < tl; j++) leaf[j] = stack[top * FK_RED_TILE + j] + leaf[j]; \
                    }                                                                             \
                    memcpy(stack + top * FK_RED_TILE, leaf, (size_t)tl * sizeof(double));         \
                    top++;                                                                        \
                    k++;                                                                          \
                    cnt = 0;                                                                      \
                    memset(leaf, 0, (size_t)tl * sizeof(double));                                 \
                }                                                                                 \
            });                                                                                   \
            for (int64_t j = 0; j < tl; j++) {                                                    \
                double total = 0.0;                                                               \
                for (int l = top - 1; l >= 0; l--) total = stack[l * FK_RED_TILE + j] + total;    \
                res[t0 + j] = total;                                                              \
            }                                                                                     \
        }                                                                                         \
    }
FK_DEFINE_DSUM_OUTER(BOOL, uint8_t)
FK_DEFINE_DSUM_OUTER(U8, uint8_t)
FK_DEFINE_DSUM_OUTER(I8, int8_t)
FK_DEFINE_DSUM_OUTER(I16, int16_t)
FK_DEFINE_DSUM_OUTER(I32, int32_t)
FK_DEFINE_DSUM_OUTER(I64, int64_t)
FK_DEFINE_DSUM_OUTER(U32, uint32_t)
FK_DEFINE_DSUM_OUTER(F16, uint16_t)
FK_DEFINE_DSUM_OUTER(BF16, uint16_t)
FK_DEFINE_DSUM_OUTER(F32, float)
FK_DEFINE_DSUM_OUTER(F64, double)

/* Run a column-tiled reduction: ACC_T acc[tile] initialised by INIT(j), updated by UPDATE(j, raw)
 * for every reduced element, stored by STORE(j, dst). */
#define FK_RED_OUTER_TILED(CT, ACC_T, INIT, UPDATE, STORE)                                        \
    do {                                                                                          \
        ACC_T acc[FK_RED_TILE];                                                                   \
        int64_t at[FK_RED_TILE];                                                                  \
        uint8_t nan[FK_RED_TILE];                                                                 \
        (void)at; (void)nan;                                                                      \
        for (int64_t t0 = 0; t0 < L; t0 += FK_RED_TILE) {                                         \
            int64_t tl = L - t0 < FK_RED_TILE ? L - t0 : FK_RED_TILE;                             \
            const char *b0 = base + t0 * si;                                                      \
            for (int64_t j = 0; j < tl; j++) { INIT }                                             \
            FK_RED_WALK_ALL(b0, {                                                                 \
                for (int64_t j = 0; j < tl; j++) {                                                \
                    const CT raw = *(const CT *)(q + j * si);                                     \
                    UPDATE                                                                        \
                }                                                                                 \
            });                                                                                   \
            for (int64_t j = 0; j < tl; j++) {                                                    \
                char *dst = out + (t0 + j) * so;                                                  \
                STORE                                                                             \
            }                                                                                     \
        }                                                                                         \
    } while (0)

#define FK_DEFINE_FLOAT_OUTER(NAME, CT)                                                           \
    static void fk_sum_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                    char *out, int64_t so, double *scratch) {                    \
        double *res = scratch;                                                                    \
        for (int64_t t0 = 0; t0 < L; t0 += FK_RED_TILE) {                                         \
            int64_t tl = L - t0 < FK_RED_TILE ? L - t0 : FK_RED_TILE;                             \
            fk_dsum_outer_##NAME(base + t0 * si, ax, tl, si, res, scratch + FK_RED_TILE);         \
            for (int64_t j = 0; j < tl; j++) *(CT *)(out + (t0 + j) * so) = FK_STD_##NAME(res[j]); \
        }                                                                                         \
    }                                                                                             \
    static void fk_prod_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                     char *out, int64_t so, double *scratch) {                   \
        (void)scratch;                                                                            \
        FK_RED_OUTER_TILED(CT, double, acc[j] = 1.0;, acc[j] *= (double)FK_LD_##NAME(raw);,       \
                           *(CT *)dst = FK_STD_##NAME(acc[j]););                                  \
    }

#define FK_DEFINE_MEAN_OUTER(NAME, CT, OUT_NAME, OUT_CT)                                          \
    static void fk_mean_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                     char *out, int64_t so, double *scratch) {                   \
        double *res = scratch;                                                                    \
        for (int64_t t0 = 0; t0 < L; t0 += FK_RED_TILE) {                                         \
            int64_t tl = L - t0 < FK_RED_TILE ? L - t0 : FK_RED_TILE;                             \
            fk_dsum_outer_##NAME(base + t0 * si, ax, tl, si, res, scratch + FK_RED_TILE);         \
            for (int64_t j = 0; j < tl; j++)                                                      \
                *(OUT_CT *)(out + (t0 + j) * so) = FK_STD_##OUT_NAME(res[j] / (double)ax->count); \
        }                                                                                         \
    }

#define FK_DEFINE_INT_OUTER(NAME, CT)                                                             \
    static void fk_sum_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                    char *out, int64_t so, double *scratch) {                    \
        (void)scratch;                                                                            \
        FK_RED_OUTER_TILED(CT, uint64_t, acc[j] = 0;, acc[j] += (uint64_t)(int64_t)raw;,          \
                           *(int64_t *)dst = (int64_t)acc[j];);                                   \
    }                                                                                             \
    static void fk_prod_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                     char *out, int64_t so, double *scratch) {                   \
        (void)scratch;                                                                            \
        FK_RED_OUTER_TILED(CT, uint64_t, acc[j] = 1;, acc[j] *= (uint64_t)(int64_t)raw;,          \
                           *(int64_t *)dst = (int64_t)acc[j];);                                   \
    }

/* MAX/MIN/ARG* down the outer axes: the same NaN rules as the per-element functions above.
 * FK_DEFINE_EXTREMUM_OUTER writes MAX (KIND max, CMP >) or MIN (KIND min, CMP <). */
#define FK_DEFINE_EXTREMUM_OUTER(KIND, NAME, CT, IS_FLOAT, CMP)                                   \
    static void fk_##KIND##_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                    char *out, int64_t so, double *scratch) {                    \
        void (*columns_)(CT *, CT *, const CT *, int64_t) = fk_columns_##KIND##_##NAME;            \
        if (columns_ != NULL && si == (int64_t)sizeof(CT) && L <= FK_RED_TILE) {                  \
            CT *m_ = (CT *)scratch, *z_ = m_ + FK_RED_TILE;                                       \
            int nonfinite_ = 0;                                                                   \
            memcpy(m_, base, (size_t)L * sizeof(CT));                                             \
            memset(z_, 0, (size_t)L * sizeof(CT));                                                \
            FK_RED_WALK_ALL(base, columns_(m_, z_, (const CT *)q, L););                           \
            for (int64_t j = 0; j < L; j++) nonfinite_ |= z_[j] != z_[j];                         \
            if (!nonfinite_) {                                                                    \
                for (int64_t j = 0; j < L; j++) *(CT *)(out + j * so) = m_[j];                    \
                return;                                                                           \
            }                                                                                     \
        }                                                                                         \
        FK_RED_OUTER_TILED(CT, CT, acc[j] = *(const CT *)(b0 + j * si); nan[j] = 0;,              \
            if (IS_FLOAT && FK_LD_##NAME(raw) != FK_LD_##NAME(raw)) { if (!nan[j]) acc[j] = raw; nan[j] = 1; } \
            else if (!nan[j] && FK_LD_##NAME(raw) CMP FK_LD_##NAME(acc[j])) acc[j] = raw;,          \
            *(CT *)dst = acc[j];);                                                                \
    }

#define FK_DEFINE_MINMAX_OUTER(NAME, CT, IS_FLOAT)                                                \
    FK_DEFINE_EXTREMUM_OUTER(max, NAME, CT, IS_FLOAT, >)                                          \
    FK_DEFINE_EXTREMUM_OUTER(min, NAME, CT, IS_FLOAT, <)                                          \
    static void fk_argmax_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                       char *out, int64_t so, double *scratch) {                 \
        (void)scratch;                                                                            \
        FK_RED_OUTER_TILED(CT, CT, acc[j] = *(const CT *)(b0 + j * si); nan[j] = 0; at[j] = 0;,   \
            if (IS_FLOAT && !nan[j] && FK_LD_##NAME(raw) != FK_LD_##NAME(raw)) { nan[j] = 1; at[j] = flat; } \
            else if (!nan[j] && FK_LD_##NAME(raw) > FK_LD_##NAME(acc[j])) { acc[j] = raw; at[j] = flat; }, \
            *(int64_t *)dst = at[j];);                                                            \
    }                                                                                             \
    static void fk_argmin_outer_##NAME(const char *base, const fk_red_axes *ax, int64_t L, int64_t si, \
                                       char *out, int64_t so, double *scratch) {                 \
        (void)scratch;                                                                            \
        FK_RED_OUTER_TILED(CT, CT, acc[j] = *(const CT *)(b0 + j * si); nan[j] = 0; at[j] = 0;,   \
            if (IS_FLOAT && !nan[j] && FK_LD_##NAME(raw) != FK_LD_##NAME(raw)) { nan[j] = 1; at[j] = flat; } \
            else if (!nan[j] && FK_LD_##NAME(raw) < FK_LD_##NAME(acc[j])) { acc[j] = raw; at[j] = flat; }, \
            *(int64_t *)dst = at[j];);                                                            \
    }

#define FK_INT_MEAN_OUTER(NAME, CT) FK_DEFINE_MEAN_OUTER(NAME, CT, F64, double)
#define FK_FLOAT_MEAN_OUTER(NAME, CT) FK_DEFINE_MEAN_OUTER(NAME, CT, NAME, CT)
#define FK_INT_MINMAX_OUTER(NAME, CT) FK_DEFINE_MINMAX_OUTER(NAME, CT, 0)
#define FK_FLOAT_MINMAX_OUTER(NAME, CT) FK_DEFINE_MINMAX_OUTER(NAME, CT, 1)
FK_FOR_INT_DTYPES(FK_INT_MEAN_OUTER)
FK_FOR_INT_DTYPES(FK_DEFINE_INT_OUTER)
FK_FOR_INT_DTYPES(FK_INT_MINMAX_OUTER)
FK_FOR_FLOAT_DTYPES(FK_DEFINE_FLOAT_OUTER)
FK_FOR_FLOAT_DTYPES(FK_FLOAT_MEAN_OUTER)
FK_FOR_FLOAT_DTYPES(FK_FLOAT_MINMAX_OUTER)

/* ---- kernels: one fk_kernel_fn per (op, dtype) ------------------------------------------------ */
#define FK_REDUCE_KERNEL(OP, OPNAME, NAME, OUT, NEEDS, C_ORDER)                                   \
    static int fk_##OP##_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                const fk_layout *layouts, const fk_params *params) {            \
        return fk_reduce_run(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_##OUT,  \
                             NEEDS, C_ORDER, fk_##OP##_one_##NAME, fk_##OP##_outer_##NAME, OPNAME); \
    }

#define FK_INT_KERNELS(NAME, CT)                                                                  \
    FK_REDUCE_KERNEL(sum, "sum", NAME, I64, 0, 0) FK_REDUCE_KERNEL(prod, "prod", NAME, I64, 0, 0)   \
    FK_REDUCE_KERNEL(mean, "mean", NAME, F64, 0, 0) FK_REDUCE_KERNEL(max, "max", NAME, NAME, 1, 0)  \
    FK_REDUCE_KERNEL(min, "min", NAME, NAME, 1, 0) FK_REDUCE_KERNEL(argmax, "argmax", NAME, I64, 1, 1) \
    FK_REDUCE_KERNEL(argmin, "argmin", NAME, I64, 1, 1)
#define FK_FLOAT_KERNELS(NAME, CT)                                                                \
    FK_REDUCE_KERNEL(sum, "sum", NAME, NAME, 0, 0) FK_REDUCE_KERNEL(prod, "prod", NAME, NAME, 0, 0) \
    FK_REDUCE_KERNEL(mean, "mean", NAME, NAME, 0, 0) FK_REDUCE_KERNEL(max, "max", NAME, NAME, 1, 0) \
    FK_REDUCE_KERNEL(min, "min", NAME, NAME, 1, 0) FK_REDUCE_KERNEL(argmax, "argmax", NAME, I64, 1, 1) \
    FK_REDUCE_KERNEL(argmin, "argmin", NAME, I64, 1, 1)
FK_FOR_INT_DTYPES(FK_INT_KERNELS)
FK_FOR_FLOAT_DTYPES(FK_FLOAT_KERNELS)

/* ---- cost: one read of the input, one write of the output, one flop per input element -------- */
static fk_cost fk_reduce_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                              const fk_params *params) {
    fk_cost cost = {0.0, 0.0, 60.0};
    (void)params;
    if (n_layouts < 2) return cost;
    cost.flops = (double)fk_layout_numel(&layouts[0]);
    cost.bytes_moved = cost.flops * fk_dtype_itemsize[dtypes->v[0]] +
                       (double)fk_layout_numel(&layouts[1]) * fk_dtype_itemsize[dtypes->v[1]];
    return cost;
}

/* ---- manifest ----------------------------------------------------------------------------------- */
/* Precision claims (tests/test_reduce.py checks each against an exact oracle):
 *   EXACT   the result is bit-exact (ints mod 2^64, MAX/MIN/ARG*).
 *   SUM/MEAN of floats: |err| <= max_rel * sum(|x|) + max_abs, where max_rel is one rounding of
 *           the output dtype plus the F64 pairwise bound (log2(n) + 32) * 2^-53 for n < 2^40;
 *           F32 adds 7 * 2^-24 for its F32 lanes on contiguous leaves.
 *   MEAN of ints/bool -> F64: same F64 pairwise bound, relative to mean(|x|).
 *   PROD of floats: |err| <= max_rel * |result| + max_abs (one subnormal) for n <= 2^20. */
#define FK_P_EXACT {1, 1, {0, 0}, 0, 0.0, 0.0, "exact"}
#define FK_P_SUM(REL, ABS) {1, 1, {0, 0}, 0, REL, ABS, "|err| <= max_rel*sum|x| + max_abs; F64 pairwise accumulation"}
#define FK_P_PROD(REL, ABS) {1, 1, {0, 0}, 0, REL, ABS, "|err| <= max_rel*|prod| + max_abs, n <= 2^20; F64 accumulation"}
#define FK_P_SUM_F16 FK_P_SUM(4.9e-4, 3.0e-8)
#define FK_P_SUM_BF16 FK_P_SUM(3.9e-3, 1e-40)
#define FK_P_SUM_F32 FK_P_SUM(5.0e-7, 1e-45)
#define FK_P_SUM_F64 FK_P_SUM(1.0e-14, 0.0)
#define FK_P_PROD_F16 FK_P_PROD(4.9e-4, 6.0e-8)
#define FK_P_PROD_BF16 FK_P_PROD(3.9e-3, 1e-40)
#define FK_P_PROD_F32 FK_P_PROD(6.0e-8, 1.5e-45)
#define FK_P_PROD_F64 FK_P_PROD(2.4e-10, 5e-324)

#define FK_RED_ROW(OPC, OP, NAME, OUT, PREC, REV)                                                 \
    {FK_OP_##OPC, {2, {FK_##NAME, FK_##OUT}},                                                     \
     {fk_##OP##_##NAME, FK_CAP_STRIDED_INPUT, 0, PREC, fk_reduce_cost, "native",                  \
      0x4ed0000000000000ull | ((uint64_t)FK_OP_##OPC << 16) | ((uint64_t)FK_##NAME << 8) | (REV)}},
#define FK_INT_ROWS(NAME, CT)                                                                     \
    FK_RED_ROW(SUM, sum, NAME, I64, FK_P_EXACT, 1) FK_RED_ROW(PROD, prod, NAME, I64, FK_P_EXACT, 1) \
    FK_RED_ROW(MEAN, mean, NAME, F64, FK_P_SUM_F64, 1) FK_RED_ROW(MAX, max, NAME, NAME, FK_P_EXACT, 1) \
    FK_RED_ROW(MIN, min, NAME, NAME, FK_P_EXACT, 1) FK_RED_ROW(ARGMAX, argmax, NAME, I64, FK_P_EXACT, 1) \
    FK_RED_ROW(ARGMIN, argmin, NAME, I64, FK_P_EXACT, 1)
#define FK_FLOAT_ROWS(NAME, CT)                                                                   \
    FK_RED_ROW(SUM, sum, NAME, NAME, FK_P_SUM_##NAME, 1) FK_RED_ROW(PROD, prod, NAME, NAME, FK_P_PROD_##NAME, 1) \
    FK_RED_ROW(MEAN, mean, NAME, NAME, FK_P_SUM_##NAME, 1) FK_RED_ROW(MAX, max, NAME, NAME, FK_P_EXACT, 1) \
    FK_RED_ROW(MIN, min, NAME, NAME, FK_P_EXACT, 1) FK_RED_ROW(ARGMAX, argmax, NAME, I64, FK_P_EXACT, 1) \
    FK_RED_ROW(ARGMIN, argmin, NAME, I64, FK_P_EXACT, 1)

static const fk_manifest_row fk_reduce_manifest[] = {
    FK_FOR_INT_DTYPES(FK_INT_ROWS)
    FK_FOR_FLOAT_DTYPES(FK_FLOAT_ROWS)
};
static const int fk_reduce_manifest_len = (int)(sizeof(fk_reduce_manifest) / sizeof(fk_reduce_manifest[0]));

#endif /* FUEL_KERNEL_CPU_REDUCE_KERNELS_H */
