/* CPU SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM, RMS_NORM and LAYER_NORM kernels and their manifest.
 *
 * Operands (all one float dtype T in F16, BF16, F32, F64; every op works on the last dim D):
 *   SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM  [x, out], out.shape == x.shape; params
 *       params.softmax_last_dim() or none.  Stable: the row max is subtracted before exp.  A row
 *       holding NaN, or +inf, or only -inf gives NaN (as PyTorch and a float64 reference).
 *   RMS_NORM    [x, weight, out]        out = x / sqrt(mean(x^2) + eps) * weight
 *   LAYER_NORM  [x, weight, bias, out]  out = (x - mean) / sqrt(var + eps) * weight + bias
 *       (biased variance); weight and bias are 1-d of extent D; eps from
 *       params.norm_last_dim(eps) (params none = eps 1e-5).
 *
 * Two implementations per F16/BF16/F32 key, one for F64:
 *   "native"      computes in F32 vector loops (F16/BF16 rows widen to F32, round once on the
 *                 way out): the default, first registered and the cheaper by cost.
 *   "native-f64"  computes every row in F64 (libm exp/log) and rounds once: the tighter claim, for
 *                 a caller that asks the route picker for max_ulp <= 1.
 *   F64 keys have one "native" kernel computing in F64.
 * Inputs (x, weight, bias) are read through any strides; rows that are not unit-stride F32 are
 * gathered to scratch first.  The output is written through its strides but may not overlap
 * itself (FK_ERR_ALIAS); params = NULL is FK_ERR_PARAMS (no params is a params block of kind
 * none); a row scratch whose size overflows (a stride-0 last dim of 2**58 and more) is
 * FK_ERR_SHAPE, before anything is written.
 *
 * F32 compute.  Every row sum is a blocked sum: 32 F32 lanes, each adding at most 4 terms (a
 * block of 128 elements) before the lane is added into its own F64 accumulator, and the 32 F64
 * lanes summed pairwise at the end.  With u = 2^-24, a sum of D < 2^31 terms t_i has
 * |error| <= 3u sum|t_i| (three F32 roundings per lane) + (D/128 + 5) 2^-53 sum|t_i| (the F64
 * part, < u/32) <= 3.1u sum|t_i|, whatever D.  The sums run in one fixed order and the builds
 * never contract a*b+c (fp-contract is off), so every ISA build gives the same bits.
 *   softmax      m = row max; e_i = fk_fast_expf(x_i - m) (<= 1 ulp = 2u); s = blocked sum of e;
 *                y_i = e_i * (float)(1/s).  x_i - m rounds by u|x_i - m|, which moves e_i by
 *                u e^t|t| <= u/e absolutely and s by at most u ln(D) relatively (the e-weighted
 *                mean of |t| is the entropy of y minus ln s <= ln D).  |err| <= (9.1 + ln D) u |y|
 *                + u/e; the claim takes D <= 131072: 1.3e-6 |y| + 3e-8.  Relative to y alone, a
 *                result e^t/s with t = x - m > -104 (smaller ones round to 0 correctly) is within
 *                (21 + |t|) u |y| <= 128 ulp.
 *   log_softmax  y_i = (x_i - m) - (float)log(s) (log of one F64 value per row).  x_i - m <= 0
 *                and log s >= 0 do not cancel: |err| <= 2u |y| + (5.1 + ln D) u, claimed as
 *                1.3e-7 |y| + 1.1e-6 for D <= 131072 (17 ulp of |y| + 1).
 *   rms_norm     ss = blocked sum of x_i^2 (4.1u), r = (float)(1/sqrt(ss/D + eps)) in F64, y_i =
 *                (x_i * r) * w_i: |err| <= 5.05u |y| (claimed 3.3e-7 |y|, 6 ulp).
 *   layer_norm   shifted mean m = (float)(x_0 + sum(x_i - x_0)/D) (a constant row gives its value
 *                exactly); second pass over d_i = x_i - m: c = sum(d_i)/D corrects the mean and
 *                var = sum(d_i^2)/D - c^2 (the corrected two-pass variance, in F64 from the blocked
 *                sums); y_i = (((x_i - m) - (float)c) * (float)rstd) * w_i + b_i.  With e =
 *                |m - mean| <= 4.1u mean|x - x_0| + u|mean|, the corrected mean is off by
 *                <= 4.1u (std + e) and the variance by <= 6.1u var + 8.2u std e + 14.3u e^2;
 *                |err| <= 9.3u S + 28.6u^2 D S with S = |w|(|x| + |mean| + std) rstd + |b| (the D
 *                term is the e^2 of a row whose values differ by a few ulp; a constant row has
 *                e = 0): claimed 6.5e-7 S, 11 ulp of S, for D <= 131072.  The std term covers the
 *                corrected mean's error where x and the mean are both near 0.
 *   A norm row whose F32 sums leave the range where those bounds hold (a sum overflows, as for
 *   |x| > 1.8e19, or var + eps < 2^-100, where F32 squares underflow; also rows holding inf or
 *   NaN) is recomputed by the F64 row code, so such rows get the F64 result.
 * F64 compute (the "native-f64" siblings and the F64 keys): F64 row sums, libm exp/log, one
 * rounding to the output dtype.
 */
#ifndef FUEL_KERNEL_CPU_NORM_KERNELS_H
#define FUEL_KERNEL_CPU_NORM_KERNELS_H

#include <float.h>
#include <math.h>

#include "compute_common.h"
#include "elementwise_kernels.h"    /* FK_MV_COMPUTE, F16/BF16 row conversions */
#include "vecmath_f32.h"          /* fk_fast_expf */

/* ---- F32 compute --------------------------------------------------------------------------- */
#define FK_NORM_LANES 32
#define FK_NORM_BLOCK 128            /* elements per block: each F32 lane adds at most 4 terms */
typedef float fk_norm_lanes32 __attribute__((vector_size(FK_NORM_LANES * sizeof(float))));
typedef double fk_norm_lanes64 __attribute__((vector_size(FK_NORM_LANES * sizeof(double))));

/* x[i .. i+32) as lanes 0..31; past the end of the row the lanes hold `pad`. */
FK_INLINE fk_norm_lanes32 fk_norm_load(const float *x, int64_t i, int64_t n, float pad) {
    fk_norm_lanes32 v;
    if (i + FK_NORM_LANES <= n) {
        memcpy(&v, x + i, sizeof v);
    } else {
        float rest[FK_NORM_LANES];
        for (int64_t j = 0; j < FK_NORM_LANES; j++) rest[j] = i + j < n ? x[i + j] : pad;
        memcpy(&v, rest, sizeof v);
    }
    return v;
}

#define fk_norm_widen(v) __builtin_convertvector((v), fk_norm_lanes64)

/* Add the len <= FK_NORM_BLOCK terms t[0..len) into the F64 lanes: term k goes to lane k % 32. */
FK_INLINE void fk_norm_add_block(fk_norm_lanes64 *acc, const float *t, int64_t len) {
    fk_norm_lanes32 lanes = {0};
    for (int64_t k = 0; k < len; k += FK_NORM_LANES) lanes += fk_norm_load(t, k, len, 0.0f);
    *acc += fk_norm_widen(lanes);
}

/* The F64 lanes summed pairwise. */
FK_INLINE double fk_norm_total(const fk_norm_lanes64 *acc) {
    double v[FK_NORM_LANES];
    memcpy(v, acc, sizeof v);
    for (int w = FK_NORM_LANES / 2; w > 0; w >>= 1)
        for (int j = 0; j < w; j++) v[j] += v[j + w];
    return v[0];
}

/* The row max, as a max over integer keys that order like the floats (the sign-magnitude bits of
 * a negative float flipped), which vectorizes as an exact integer reduction.  A NaN in the row
 * may or may not become the max; either way exp(x - max) makes the row NaN. */
FK_INLINE int32_t fk_norm_order_key(int32_t bits) { return bits ^ ((bits >> 31) & 0x7fffffff); }
FK_INLINE float fk_norm_row_max(const float *x, int64_t n) {
    int32_t top = INT32_MIN;
    float m;
    for (int64_t i = 0; i < n; i++) {
        int32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        bits = fk_norm_order_key(bits);
        top = bits > top ? bits : top;
    }
    top = fk_norm_order_key(top);
    memcpy(&m, &top, sizeof m);
    return m;
}

/* One softmax row in F32: x and y are distinct, unit stride. */
FK_INLINE void fk_softmax_row_body(const float *restrict x, float *restrict y, int64_t n, int log_out) {
    float m = fk_norm_row_max(x, n);
    fk_norm_lanes64 acc = {0};
    /* exp(x - m) goes to y even for log_softmax: the first write to each output line then
     * overlaps the exp arithmetic instead of stalling the short last loop */
    for (int64_t i = 0; i < n; i += FK_NORM_BLOCK) {
        int64_t len = n - i < FK_NORM_BLOCK ? n - i : FK_NORM_BLOCK;
        for (int64_t k = 0; k < len; k++) y[i + k] = fk_fast_expf(x[i + k] - m);
        fk_norm_add_block(&acc, y + i, len);
    }
    if (log_out) {
        float ls = (float)log(fk_norm_total(&acc));
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
    } else {
        float inv = (float)(1.0 / fk_norm_total(&acc));
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
}
FK_MV_COMPUTE(fk_softmax_row_f32, (const float *restrict x, float *restrict y, int64_t n, int log_out),
              (x, y, n, log_out), fk_softmax_row_body)

/* Where the F32 norm bounds hold: var + eps (or mean square + eps) finite and >= 2^-100. */
FK_INLINE int fk_norm_f32_in_range(double v) { return v >= 0x1p-100 && v <= DBL_MAX; }

/* One RMS_NORM row in F32; *wide = 1 (and y untouched) when the row needs the F64 code. */
FK_INLINE void fk_rms_norm_row_body(const float *restrict x, const float *restrict w, float *restrict y,
                                    int64_t n, double eps, int *wide) {
    float r;
    fk_norm_lanes64 acc = {0};
    double ms;
    for (int64_t i = 0; i < n;) {
        fk_norm_lanes32 sq = {0};
        for (int k = 0; k < FK_NORM_BLOCK / FK_NORM_LANES && i < n; k++, i += FK_NORM_LANES) {
            fk_norm_lanes32 v = fk_norm_load(x, i, n, 0.0f);
            sq += v * v;
        }
        acc += fk_norm_widen(sq);
    }
    ms = fk_norm_total(&acc) / (double)n + eps;
    *wide = !fk_norm_f32_in_range(ms);
    if (*wide) return;
    r = (float)(1.0 / sqrt(ms));
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * r) * w[i];
}
FK_MV_COMPUTE(fk_rms_norm_row_f32, (const float *restrict x, const float *restrict w, float *restrict y,
                                    int64_t n, double eps, int *wide), (x, w, y, n, eps, wide),
              fk_rms_norm_row_body)

/* One LAYER_NORM row in F32; *wide = 1 (and y untouched) when the row needs the F64 code. */
FK_INLINE void fk_layer_norm_row_body(const float *restrict x, const float *restrict w, const float *restrict b,
                                      float *restrict y, int64_t n, double eps, int *wide) {
    float shift = x[0], m, cf, a;
    fk_norm_lanes64 acc = {0}, acc2 = {0};
    double c, var;
    for (int64_t i = 0; i < n;) {
        fk_norm_lanes32 sum = {0};
        for (int k = 0; k < FK_NORM_BLOCK / FK_NORM_LANES && i < n; k++, i += FK_NORM_LANES)
            sum += fk_norm_load(x, i, n, shift) - shift;
        acc += fk_norm_widen(sum);
    }
    m = (float)((double)shift + fk_norm_total(&acc) / (double)n);
    acc = acc2;
    for (int64_t i = 0; i < n;) {
        fk_norm_lanes32 sum = {0}, sum2 = {0};
        for (int k = 0; k < FK_NORM_BLOCK / FK_NORM_LANES && i < n; k++, i += FK_NORM_LANES) {
            fk_norm_lanes32 d = fk_norm_load(x, i, n, m) - m;
            sum += d;
            sum2 += d * d;
        }
        acc += fk_norm_widen(sum);
        acc2 += fk_norm_widen(sum2);
    }
    c = fk_norm_total(&acc) / (double)n;
    var = fk_norm_total(&acc2) / (double)n - c * c;
    var = (var < 0.0 ? 0.0 : var) + eps;
    *wide = !fk_norm_f32_in_range(var);
    if (*wide) return;
    cf = (float)c;
    a = (float)(1.0 / sqrt(var));
    for (int64_t i = 0; i < n; i++) y[i] = (((x[i] - m) - cf) * a) * w[i] + b[i];
}
FK_MV_COMPUTE(fk_layer_norm_row_f32, (const float *restrict x, const float *restrict w, const float *restrict b,
                                      float *restrict y, int64_t n, double eps, int *wide),
              (x, w, b, y, n, eps, wide), fk_layer_norm_row_body)

/* ---- F64 compute ------------------------------------------------------------------------------ */
static void fk_softmax_row_f64(const double *x, double *y, int64_t n, int log_out) {
    double m = -INFINITY, s, acc[16] = {0};
    int64_t i;
    for (i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    for (i = 0; i < n; i++) y[i] = exp(x[i] - m);
    for (i = 0; i + 16 <= n; i += 16)                /* 16 lanes: error (n/16 + 4) 2^-53 */
        for (int j = 0; j < 16; j++) acc[j] += y[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += y[i];
    for (int w = 8; w > 0; w >>= 1)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    s = acc[0];
    if (log_out) {
        double ls = log(s);
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
    } else {
        for (int64_t i = 0; i < n; i++) y[i] /= s;
    }
}

/* Norm rows in F64: x, y distinct; w, b already converted (b NULL for RMS). */
static void fk_rms_norm_row(const double *x, const double *w, double *y, int64_t n, double eps) {
    double ss = 0.0, r;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

static void fk_layer_norm_row(const double *x, const double *w, const double *b, double *y, int64_t n, double eps) {
    double mean = 0.0, var = 0.0, r;
    for (int64_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    r = 1.0 / sqrt(var / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * r * w[i] + b[i];
}

/* ---- the shared driver: validation, params, row walk ---------------------------------------- */
enum { FK_NORM_SOFTMAX = 0, FK_NORM_LOG_SOFTMAX = 1, FK_NORM_RMS = 2, FK_NORM_LAYER = 3 };

typedef void (*fk_row_load_fn)(const char *src, int64_t stride, int64_t n, void *dst);    /* -> compute type */
typedef void (*fk_row_store_fn)(const void *src, int64_t n, char *dst, int64_t stride);   /* compute type -> */

typedef struct {
    fk_loop loop;                                    /* over rows: x, out with the last dim dropped */
    int64_t d;                                       /* last-dim extent */
    int64_t xs, os;                                  /* last-dim byte strides of x and out */
    size_t scratch_bytes;                            /* the row scratch the run allocates */
    double eps;
} fk_norm_plan;

/* row_bytes: the row scratch per last-dim element the run allocates */
static int fk_norm_prepare(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                           const fk_layout *layouts, const fk_params *params, int dtype, int kind,
                           int64_t row_bytes, fk_norm_plan *plan) {
    static const char *const names[] = {"softmax_last_dim", "log_softmax_last_dim", "rms_norm", "layer_norm"};
    int want_in = kind == FK_NORM_LAYER ? 3 : kind == FK_NORM_RMS ? 2 : 1;
    int dtypes[4] = {dtype, dtype, dtype, dtype};
    const fk_layout *x, *out;
    fk_layout rows[2];
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, want_in, dtypes,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_DISJOINT);
    if (status) return status;
    status = fk_params_present(params, names[kind], kind <= FK_NORM_LOG_SOFTMAX
                               ? "params.softmax_last_dim() or a params block of kind none"
                               : "params.norm_last_dim(eps) or a params block of kind none");
    if (status) return status;
    x = &layouts[0];
    out = &layouts[want_in];
    if (x->ndim < 1 || out->ndim != x->ndim) {
        fk_set_error(FK_ERR_SHAPE, "%s needs an input of at least 1 dim and an output of the same shape", names[kind]);
        return FK_ERR_SHAPE;
    }
    for (int d = 0; d < x->ndim; d++) {
        if (out->shape[d] != x->shape[d]) {
            fk_set_error(FK_ERR_SHAPE, "%s output extent %lld on axis %d differs from the input's %lld",
                         names[kind], (long long)out->shape[d], d, (long long)x->shape[d]);
            return FK_ERR_SHAPE;
        }
    }
    plan->d = x->shape[x->ndim - 1];
    /* a stride-0 last dim of 2**58 overflows the row scratch */
    status = fk_size_bytes(plan->d, row_bytes, &plan->scratch_bytes,
                           kind <= FK_NORM_LOG_SOFTMAX ? "softmax row scratch" : "norm row scratch");
    if (status) return status;
    if ((status = fk_output_self_overlap_check(out, names[kind]))) return status;
    for (int k = 1; k < want_in; k++) {
        if (layouts[k].ndim != 1 || layouts[k].shape[0] != plan->d) {
            fk_set_error(FK_ERR_SHAPE, "%s %s must be 1-d of extent %lld (the last dim)", names[kind],
                         k == 1 ? "weight" : "bias", (long long)plan->d);
            return FK_ERR_SHAPE;
        }
    }
    plan->eps = 1e-5;
    if (kind <= FK_NORM_LOG_SOFTMAX) {
        if (params->kind == FK_PARAMS_SOFTMAX_LAST_DIM) {
            int axis = params->u.axis.axis;
            if (axis != -1 && axis != x->ndim - 1) {
                fk_set_error(FK_ERR_PARAMS, "%s works on the last dim, not axis %d", names[kind], axis);
                return FK_ERR_PARAMS;
            }
        } else if (params->kind != FK_PARAMS_NONE) {
            fk_set_error(FK_ERR_PARAMS, "%s takes params.softmax_last_dim() or none", names[kind]);
            return FK_ERR_PARAMS;
        }
    } else if (params->kind == FK_PARAMS_NORM_LAST_DIM) {
        plan->eps = params->u.norm.eps;
        if (!(plan->eps >= 0.0) || isinf(plan->eps)) {
            fk_set_error(FK_ERR_PARAMS, "%s eps must be finite and non-negative", names[kind]);
            return FK_ERR_PARAMS;
        }
    } else if (params->kind != FK_PARAMS_NONE) {
        fk_set_error(FK_ERR_PARAMS, "%s takes params.norm_last_dim(eps) or none", names[kind]);
        return FK_ERR_PARAMS;
    }
    plan->xs = x->strides[x->ndim - 1] * fk_dtype_itemsize[dtype];
    plan->os = out->strides[out->ndim - 1] * fk_dtype_itemsize[dtype];
    rows[0] = *x;
    rows[1] = *out;
    rows[0].ndim = rows[1].ndim = x->ndim - 1;
    if (plan->d == 0) {                              /* nothing to compute; keep the loop empty */
        memset(&plan->loop, 0, sizeof(plan->loop));
        return FK_OK;
    }
    return fk_loop_plan(&plan->loop, inputs, 1, outputs, rows, NULL);
}

#define FK_DEFINE_ROW_IO(NAME, CT, T, LD, ST)                                                     \
    static void fk_row_load_##NAME##_##T(const char *src, int64_t stride, int64_t n, void *dstv) { \
        T *dst = (T *)dstv;                                                                       \
        for (int64_t i = 0; i < n; i++) dst[i] = (T)LD(*(const CT *)(src + i * stride));          \
    }                                                                                             \
    static void fk_row_store_##NAME##_##T(const void *srcv, int64_t n, char *dst, int64_t stride) { \
        const T *src = (const T *)srcv;                                                           \
        for (int64_t i = 0; i < n; i++) *(CT *)(dst + i * stride) = (CT)ST(src[i]);               \
    }
FK_DEFINE_ROW_IO(F16, uint16_t, double, FK_LD_F16, FK_STD_F16)
FK_DEFINE_ROW_IO(BF16, uint16_t, double, FK_LD_BF16, FK_STD_BF16)
FK_DEFINE_ROW_IO(F32, float, double, FK_LD_F32, FK_STD_F32)
FK_DEFINE_ROW_IO(F64, double, double, FK_LD_F64, FK_STD_F64)

/* Rows to and from F32 (F16 and BF16 through the vectorized conversions). */
typedef void (*fk_row_load32_fn)(const char *src, int64_t stride, float *dst, int64_t n);
typedef void (*fk_row_store32_fn)(const float *src, char *dst, int64_t stride, int64_t n);
static void fk_load_f32_row(const char *src, int64_t stride, float *dst, int64_t n) {
    if (stride == (int64_t)sizeof(float)) { memcpy(dst, src, (size_t)n * sizeof(float)); return; }
    for (int64_t i = 0; i < n; i++) dst[i] = *(const float *)(src + i * stride);
}
static void fk_store_f32_row(const float *src, char *dst, int64_t stride, int64_t n) {
    if (stride == (int64_t)sizeof(float)) { memcpy(dst, src, (size_t)n * sizeof(float)); return; }
    for (int64_t i = 0; i < n; i++) *(float *)(dst + i * stride) = src[i];
}
#define fk_row_load32_F16 fk_load_f16_row
#define fk_row_load32_BF16 fk_load_bf16_row
#define fk_row_load32_F32 fk_load_f32_row
#define fk_row_store32_F16 fk_store_f16_row
#define fk_row_store32_BF16 fk_store_bf16_row
#define fk_row_store32_F32 fk_store_f32_row

/* Walk every row of the plan: BODY sees `xrow` and `orow` (byte pointers to element 0). */
#define FK_NORM_WALK(plan, BODY)                                                                  \
    do {                                                                                          \
        int64_t idx_[FK_MAX_DIMS] = {0};                                                          \
        char *ptrs_[2] = {(plan).loop.base[0], (plan).loop.base[1]};                              \
        int64_t s0_ = fk_loop_inner_stride(&(plan).loop, 0), s1_ = fk_loop_inner_stride(&(plan).loop, 1); \
        for (int64_t r_ = 0; r_ < (plan).loop.rows; r_++) {                                       \
            for (int64_t i_ = 0; i_ < (plan).loop.inner; i_++) {                                  \
                const char *xrow = ptrs_[0] + i_ * s0_;                                           \
                char *orow = ptrs_[1] + i_ * s1_;                                                 \
                BODY                                                                              \
            }                                                                                     \
            fk_loop_next(&(plan).loop, idx_, ptrs_);                                              \
        }                                                                                         \
    } while (0)

/* Softmax rows in F32 (F16, BF16, F32). */
static int fk_softmax_run_f32(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                              const fk_layout *layouts, const fk_params *params, int dtype, int log_out,
                              fk_row_load32_fn load, fk_row_store32_fn store) {
    fk_norm_plan plan;
    int status = fk_norm_prepare(inputs, n_in, outputs, n_out, layouts, params, dtype,
                                 log_out ? FK_NORM_LOG_SOFTMAX : FK_NORM_SOFTMAX, 2 * sizeof(float), &plan);
    float *scratch;
    if (status) return status;
    if (plan.d == 0 || plan.loop.numel == 0) return FK_OK;
    scratch = (float *)fk_scratch_alloc(plan.scratch_bytes);      /* x and y rows */
    if (scratch == NULL) return FK_ERR_NO_MEMORY;
    {
        float *xs = scratch, *ys = scratch + plan.d;
        int direct_in = dtype == FK_F32 && plan.xs == 4, direct_out = dtype == FK_F32 && plan.os == 4;
        FK_NORM_WALK(plan, {
            const float *xr = (const float *)xrow;
            float *yr = direct_out ? (float *)orow : ys;
            if (!direct_in) {
                load(xrow, plan.xs, xs, plan.d);
                xr = xs;
            }
            fk_softmax_row_f32(xr, yr, plan.d, log_out);
            if (!direct_out) store(ys, orow, plan.os, plan.d);
        });
    }
    free(scratch);
    return FK_OK;
}

/* Softmax rows in F64 (the F64 key and the "native-f64" siblings). */
static int fk_softmax_run_f64(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                              const fk_layout *layouts, const fk_params *params, int dtype, int log_out,
                              fk_row_load_fn load, fk_row_store_fn store) {
    fk_norm_plan plan;
    int status = fk_norm_prepare(inputs, n_in, outputs, n_out, layouts, params, dtype,
                                 log_out ? FK_NORM_LOG_SOFTMAX : FK_NORM_SOFTMAX, 2 * sizeof(double), &plan);
    double *scratch;
    if (status) return status;
    if (plan.d == 0 || plan.loop.numel == 0) return FK_OK;
    scratch = (double *)fk_scratch_alloc(plan.scratch_bytes);     /* x and y rows */
    if (scratch == NULL) return FK_ERR_NO_MEMORY;
    FK_NORM_WALK(plan, {
        load(xrow, plan.xs, plan.d, scratch);
        fk_softmax_row_f64(scratch, scratch + plan.d, plan.d, log_out);
        store(scratch + plan.d, plan.d, orow, plan.os);
    });
    free(scratch);
    return FK_OK;
}

/* One norm row in F64 from the row's storage; w and b are the F64 weight and bias. */
static void fk_norm_row_f64(const fk_norm_plan *plan, int kind, const char *xrow, char *orow, double *xs,
                            double *ys, const double *w, const double *b, fk_row_load_fn load, fk_row_store_fn store) {
    load(xrow, plan->xs, plan->d, xs);
    if (kind == FK_NORM_RMS) fk_rms_norm_row(xs, w, ys, plan->d, plan->eps);
    else fk_layer_norm_row(xs, w, b, ys, plan->d, plan->eps);
    store(ys, plan->d, orow, plan->os);
}

/* Norm rows in F64 (the F64 key and the "native-f64" siblings). */
static int fk_norm_run_f64(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                           const fk_layout *layouts, const fk_params *params, int dtype, int kind,
                           fk_row_load_fn load, fk_row_store_fn store) {
    fk_norm_plan plan;
    int status = fk_norm_prepare(inputs, n_in, outputs, n_out, layouts, params, dtype, kind,
                                 4 * sizeof(double), &plan);
    double *scratch, *xs, *ys, *w, *b;
    int isz = fk_dtype_itemsize[dtype];
    if (status) return status;
    if (plan.d == 0 || plan.loop.numel == 0) return FK_OK;
    scratch = (double *)fk_scratch_alloc(plan.scratch_bytes);     /* x, y, weight, bias rows */
    if (scratch == NULL) return FK_ERR_NO_MEMORY;
    xs = scratch;
    ys = xs + plan.d;
    w = ys + plan.d;
    b = w + plan.d;
    load(fk_elem_ptr(&inputs[1], layouts[1].offset), layouts[1].strides[0] * isz, plan.d, w);
    if (kind == FK_NORM_LAYER)
        load(fk_elem_ptr(&inputs[2], layouts[2].offset), layouts[2].strides[0] * isz, plan.d, b);
    FK_NORM_WALK(plan, { fk_norm_row_f64(&plan, kind, xrow, orow, xs, ys, w, b, load, store); });
    free(scratch);
    return FK_OK;
}

/* Norm rows in F32 (F16, BF16, F32); a row out of the F32 code's range goes to the F64 row code. */
static int fk_norm_run_f32(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                           const fk_layout *layouts, const fk_params *params, int dtype, int kind,
                           fk_row_load32_fn load, fk_row_store32_fn store, fk_row_load_fn load64,
                           fk_row_store_fn store64) {
    fk_norm_plan plan;
    /* F32 x, y, weight, bias rows, then the F64 ones for rows the F32 code leaves */
    int status = fk_norm_prepare(inputs, n_in, outputs, n_out, layouts, params, dtype, kind,
                                 4 * sizeof(float) + 4 * sizeof(double), &plan);
    float *scratch, *xs, *ys, *w, *b;
    double *x64, *y64, *w64, *b64;
    int isz = fk_dtype_itemsize[dtype], have64 = 0;
    const char *wrow, *brow = NULL;
    if (status) return status;
    if (plan.d == 0 || plan.loop.numel == 0) return FK_OK;
    scratch = (float *)fk_scratch_alloc(plan.scratch_bytes);
    if (scratch == NULL) return FK_ERR_NO_MEMORY;
    xs = scratch;
    ys = xs + plan.d;
    w = ys + plan.d;
    b = w + plan.d;
    x64 = (double *)(b + plan.d);
    y64 = x64 + plan.d;
    w64 = y64 + plan.d;
    b64 = w64 + plan.d;
    wrow = fk_elem_ptr(&inputs[1], layouts[1].offset);
    load(wrow, layouts[1].strides[0] * isz, w, plan.d);
    if (kind == FK_NORM_LAYER) {
        brow = fk_elem_ptr(&inputs[2], layouts[2].offset);
        load(brow, layouts[2].strides[0] * isz, b, plan.d);
    }
    {
        int direct_in = dtype == FK_F32 && plan.xs == 4, direct_out = dtype == FK_F32 && plan.os == 4;
        FK_NORM_WALK(plan, {
            const float *xr = (const float *)xrow;
            float *yr = direct_out ? (float *)orow : ys;
            int wide;
            if (!direct_in) {
                load(xrow, plan.xs, xs, plan.d);
                xr = xs;
            }
            if (kind == FK_NORM_RMS) fk_rms_norm_row_f32(xr, w, yr, plan.d, plan.eps, &wide);
            else fk_layer_norm_row_f32(xr, w, b, yr, plan.d, plan.eps, &wide);
            if (wide) {
                if (!have64) {
                    load64(wrow, layouts[1].strides[0] * isz, plan.d, w64);
                    if (kind == FK_NORM_LAYER) load64(brow, layouts[2].strides[0] * isz, plan.d, b64);
                    have64 = 1;
                }
                fk_norm_row_f64(&plan, kind, xrow, orow, x64, y64, w64, b64, load64, store64);
            } else if (!direct_out) {
                store(ys, orow, plan.os, plan.d);
            }
        });
    }
    free(scratch);
    return FK_OK;
}

/* ---- kernels ---------------------------------------------------------------------------------- */
/* F32 compute ("native") and F64 compute ("native-f64") for F16, BF16, F32 */
#define FK_NORM_KERNELS(NAME)                                                                     \
    static int fk_softmax_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                 const fk_layout *layouts, const fk_params *params) {           \
        return fk_softmax_run_f32(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, 0,    \
                                  fk_row_load32_##NAME, fk_row_store32_##NAME);                   \
    }                                                                                             \
    static int fk_log_softmax_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                     const fk_layout *layouts, const fk_params *params) {       \
        return fk_softmax_run_f32(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, 1,    \
                                  fk_row_load32_##NAME, fk_row_store32_##NAME);                   \
    }                                                                                             \
    static int fk_rms_norm_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                  const fk_layout *layouts, const fk_params *params) {          \
        return fk_norm_run_f32(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_NORM_RMS, \
                               fk_row_load32_##NAME, fk_row_store32_##NAME,                       \
                               fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);        \
    }                                                                                             \
    static int fk_layer_norm_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                    const fk_layout *layouts, const fk_params *params) {        \
        return fk_norm_run_f32(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_NORM_LAYER, \
                               fk_row_load32_##NAME, fk_row_store32_##NAME,                       \
                               fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);        \
    }                                                                                             \
    FK_NORM_KERNELS_F64(NAME, _in_f64)
/* F64 compute: the F64 key (SUFFIX empty) and the F16/BF16/F32 siblings (SUFFIX _in_f64) */
#define FK_NORM_KERNELS_F64(NAME, SUFFIX)                                                         \
    static int fk_softmax##SUFFIX##_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                           const fk_layout *layouts, const fk_params *params) { \
        return fk_softmax_run_f64(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, 0,    \
                                  fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);     \
    }                                                                                             \
    static int fk_log_softmax##SUFFIX##_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, \
                                               int n_out, const fk_layout *layouts, const fk_params *params) { \
        return fk_softmax_run_f64(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, 1,    \
                                  fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);     \
    }                                                                                             \
    static int fk_rms_norm##SUFFIX##_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                            const fk_layout *layouts, const fk_params *params) { \
        return fk_norm_run_f64(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_NORM_RMS, \
                               fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);        \
    }                                                                                             \
    static int fk_layer_norm##SUFFIX##_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, \
                                              int n_out, const fk_layout *layouts, const fk_params *params) { \
        return fk_norm_run_f64(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_NORM_LAYER, \
                               fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);        \
    }
FK_NORM_KERNELS(F16)
FK_NORM_KERNELS(BF16)
FK_NORM_KERNELS(F32)
FK_NORM_KERNELS_F64(F64, )

/* ---- cost ----------------------------------------------------------------------------------------
 * Every operand moved once; flops per element: the F32 code a handful (exp ~ 12).  The F64 row
 * code runs scalar (libm exp, sequential sums): 4-10 ns per element on one core of the 2-core dev
 * VM, 6-12x the F32 code at 128x768, which at F32 matmul peak is 400-1200 flops per element:
 * priced as 64 times the F32 count. */
#define FK_NORM_F64_COST_FACTOR 64.0
static fk_cost fk_norm_cost_scaled(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes, double factor) {
    fk_cost cost = {0.0, 0.0, 80.0};
    double n;
    if (n_layouts < 2) return cost;
    n = (double)fk_layout_numel(&layouts[0]);
    cost.flops = n * (n_layouts == 2 ? 16.0 : 6.0) * factor;
    for (int k = 0; k < n_layouts; k++)
        cost.bytes_moved += (double)fk_layout_numel(&layouts[k]) * fk_dtype_itemsize[dtypes->v[k]];
    return cost;
}
static fk_cost fk_norm_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                            const fk_params *params) {
    (void)params;
    return fk_norm_cost_scaled(layouts, n_layouts, dtypes, 1.0);
}
static fk_cost fk_norm_cost_f64(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                const fk_params *params) {
    (void)params;
    return fk_norm_cost_scaled(layouts, n_layouts, dtypes, FK_NORM_F64_COST_FACTOR);
}

/* ---- manifest ----------------------------------------------------------------------------------
 * Claims: |err| <= max_rel * scale + max_abs against a long double reference of the same formula
 * (tests/cpu/norm/test_norm.py checks them); the derivations are in the opening comment.  max_ulp
 * bounds the same error in ulps of the output dtype at the scale (|y| for softmax and RMS_NORM,
 * |y| + 1 for LOG_SOFTMAX_LAST_DIM, the layer-norm scale), so that pick(max_ulp=1) selects the
 * F64-compute siblings.  F16/BF16 results are one rounding of an F32 value whose error is far
 * below half an ulp of the output: 1 ulp either way.  The F64 keys keep max_ulp 0 (no ulp bound
 * stated), as the other relative-error claims of the CPU table. */
#define FK_P(ULP, REL, ABS, NOTE) {1, 1, {0, 0}, ULP, REL, ABS, NOTE}
#define FK_LN_SCALE "S = |w|(|x|+|mean|+std)rstd+|b|"
#define FK_LN_SCALE64 "S = |w|(|x|+|mean|)rstd+|b|"
/* F32 compute (F16, BF16, F32) */
#define FK_P_SOFTMAX_F32 FK_P(128, 1.3e-6, 3e-8, "|err| <= max_rel*|y| + max_abs for D <= 131072; F32 compute")
#define FK_P_SOFTMAX_F16 FK_P(1, 5e-4, 1e-7, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_SOFTMAX_BF16 FK_P(1, 4e-3, 1e-7, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_LOGSM_F32 FK_P(17, 1.3e-7, 1.1e-6, "|err| <= max_rel*|y| + max_abs for D <= 131072; F32 compute")
#define FK_P_LOGSM_F16 FK_P(1, 5e-4, 1.5e-6, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_LOGSM_BF16 FK_P(1, 4e-3, 1.5e-6, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_RMS_F32 FK_P(6, 3.3e-7, 3e-45, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_RMS_F16 FK_P(1, 5e-4, 6e-8, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_RMS_BF16 FK_P(1, 4e-3, 1e-38, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_LAYER_F32 FK_P(11, 6.5e-7, 3e-45, "|err| <= max_rel*S + max_abs for D <= 131072, " FK_LN_SCALE "; F32 compute")
#define FK_P_LAYER_F16 FK_P(1, 5e-4, 6e-8, "|err| <= max_rel*S + max_abs, " FK_LN_SCALE "; F32 compute")
#define FK_P_LAYER_BF16 FK_P(1, 4e-3, 1e-38, "|err| <= max_rel*S + max_abs, " FK_LN_SCALE "; F32 compute")
/* F64 compute: the siblings (one rounding of an F64 result) and the F64 key */
#define FK_P64_SOFTMAX_F32 FK_P(1, 6e-8, 1e-45, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_SOFTMAX_F16 FK_P(1, 5e-4, 6e-8, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_SOFTMAX_BF16 FK_P(1, 4e-3, 1e-38, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_SOFTMAX_F64 FK_P(0, 3e-14, 1e-16, "|err| <= max_rel*|y| + max_abs for D <= 4096")
#define FK_P64_LOGSM_F32 FK_P(1, 6e-8, 1e-12, "|err| <= max_rel*|y| + max_abs for D <= 131072; F64 compute")
#define FK_P64_LOGSM_F16 FK_P(1, 5e-4, 6e-8, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_LOGSM_BF16 FK_P(1, 4e-3, 1e-38, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_LOGSM_F64 FK_P(0, 1e-15, 4e-14, "|err| <= max_rel*|y| + max_abs for D <= 4096")
#define FK_P64_RMS_F32 FK_P(1, 1.2e-7, 0.0, "|err| <= max_rel*|y|; F64 compute")
#define FK_P64_RMS_F16 FK_P(1, 5e-4, 6e-8, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_RMS_BF16 FK_P(1, 4e-3, 1e-38, "|err| <= max_rel*|y| + max_abs; F64 compute")
#define FK_P64_RMS_F64 FK_P(0, 1e-14, 0.0, "|err| <= max_rel*|y|")
#define FK_P64_LAYER_F32 FK_P(1, 1.2e-7, 0.0, "|err| <= max_rel*S, " FK_LN_SCALE64 "; F64 compute")
#define FK_P64_LAYER_F16 FK_P(1, 5e-4, 6e-8, "|err| <= max_rel*S + max_abs, " FK_LN_SCALE64 "; F64 compute")
#define FK_P64_LAYER_BF16 FK_P(1, 4e-3, 1e-38, "|err| <= max_rel*S + max_abs, " FK_LN_SCALE64 "; F64 compute")
#define FK_P64_LAYER_F64 FK_P(0, 1e-14, 0.0, "|err| <= max_rel*S, " FK_LN_SCALE64)

/* revision: 0x5047 tag, op, dtype, implementation (1: F64 compute, 2: F32 compute) */
#define FK_NORM_ROW(OPC, FN, NAME, NOPS, DTS, PREC, COST, SOURCE, REV)                            \
    {FK_OP_##OPC, {NOPS, DTS}, {FN, FK_CAP_STRIDED_INPUT, 0, PREC, COST, SOURCE,                  \
                                0x5047000000000000ull | ((uint64_t)FK_OP_##OPC << 16) |            \
                                    ((uint64_t)FK_##NAME << 8) | (REV)}},
#define FK_D2(N) {FK_##N, FK_##N}
#define FK_D3(N) {FK_##N, FK_##N, FK_##N}
#define FK_D4(N) {FK_##N, FK_##N, FK_##N, FK_##N}
#define FK_NORM_ROWS_F32(NAME)                                                                    \
    FK_NORM_ROW(SOFTMAX_LAST_DIM, fk_softmax_##NAME, NAME, 2, FK_D2(NAME), FK_P_SOFTMAX_##NAME,   \
                fk_norm_cost, "native", 2)                                                        \
    FK_NORM_ROW(SOFTMAX_LAST_DIM, fk_softmax_in_f64_##NAME, NAME, 2, FK_D2(NAME),                 \
                FK_P64_SOFTMAX_##NAME, fk_norm_cost_f64, "native-f64", 1)                         \
    FK_NORM_ROW(LOG_SOFTMAX_LAST_DIM, fk_log_softmax_##NAME, NAME, 2, FK_D2(NAME), FK_P_LOGSM_##NAME, \
                fk_norm_cost, "native", 2)                                                        \
    FK_NORM_ROW(LOG_SOFTMAX_LAST_DIM, fk_log_softmax_in_f64_##NAME, NAME, 2, FK_D2(NAME),         \
                FK_P64_LOGSM_##NAME, fk_norm_cost_f64, "native-f64", 1)                           \
    FK_NORM_ROW(RMS_NORM, fk_rms_norm_##NAME, NAME, 3, FK_D3(NAME), FK_P_RMS_##NAME,              \
                fk_norm_cost, "native", 2)                                                        \
    FK_NORM_ROW(RMS_NORM, fk_rms_norm_in_f64_##NAME, NAME, 3, FK_D3(NAME), FK_P64_RMS_##NAME,     \
                fk_norm_cost_f64, "native-f64", 1)                                                \
    FK_NORM_ROW(LAYER_NORM, fk_layer_norm_##NAME, NAME, 4, FK_D4(NAME), FK_P_LAYER_##NAME,        \
                fk_norm_cost, "native", 2)                                                        \
    FK_NORM_ROW(LAYER_NORM, fk_layer_norm_in_f64_##NAME, NAME, 4, FK_D4(NAME), FK_P64_LAYER_##NAME, \
                fk_norm_cost_f64, "native-f64", 1)
#define FK_NORM_ROWS_F64(NAME)                                                                    \
    FK_NORM_ROW(SOFTMAX_LAST_DIM, fk_softmax_##NAME, NAME, 2, FK_D2(NAME), FK_P64_SOFTMAX_##NAME, \
                fk_norm_cost, "native", 1)                                                        \
    FK_NORM_ROW(LOG_SOFTMAX_LAST_DIM, fk_log_softmax_##NAME, NAME, 2, FK_D2(NAME),                \
                FK_P64_LOGSM_##NAME, fk_norm_cost, "native", 1)                                   \
    FK_NORM_ROW(RMS_NORM, fk_rms_norm_##NAME, NAME, 3, FK_D3(NAME), FK_P64_RMS_##NAME,            \
                fk_norm_cost, "native", 1)                                                        \
    FK_NORM_ROW(LAYER_NORM, fk_layer_norm_##NAME, NAME, 4, FK_D4(NAME), FK_P64_LAYER_##NAME,      \
                fk_norm_cost, "native", 1)

static const fk_manifest_row fk_norm_manifest[] = {
    FK_NORM_ROWS_F32(F16) FK_NORM_ROWS_F32(BF16) FK_NORM_ROWS_F32(F32) FK_NORM_ROWS_F64(F64)
};
static const int fk_norm_manifest_len = (int)(sizeof(fk_norm_manifest) / sizeof(fk_norm_manifest[0]));

#endif /* FUEL_KERNEL_CPU_NORM_KERNELS_H */
