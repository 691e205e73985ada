/* CPU SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM, RMS_NORM and LAYER_NORM kernels and their manifest.
 *
 * Operands (all one float dtype T in F16, BF16, F32, F64; every op works on the last dim D):
 *   SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM  [x, out], out.shape == x.shape; params
 *       params.softmax_last_dim() or none.  Stable: the row max is subtracted before exp.  A row
 *       holding NaN, or +inf, or only -inf gives NaN (as PyTorch and a float64 reference).
 *   RMS_NORM    [x, weight, out]        out = x / sqrt(mean(x^2) + eps) * weight
 *   LAYER_NORM  [x, weight, bias, out]  out = (x - mean) / sqrt(var + eps) * weight + bias
 *       (biased variance, two-pass); weight and bias are 1-d of extent D; eps from
 *       params.norm_last_dim(eps) (params none = eps 1e-5).
 * Compute types: softmax computes F16/BF16/F32 in F32 (a vectorized exp, F64 row sums) and F64
 * in F64; the norms compute every dtype in F64 and round once.  Inputs (x, weight, bias) are
 * read through any strides; rows that are not unit-stride F32 are gathered to scratch first.
 * The output is written through its strides but may not overlap itself (FK_ERR_ALIAS); params =
 * NULL is FK_ERR_PARAMS (no params is a params block of kind none); a row scratch whose size
 * overflows (a stride-0 last dim of 2**59 and more) is FK_ERR_SHAPE, before anything is written.
 */
#ifndef FUEL_KERNEL_CPU_NORM_KERNELS_H
#define FUEL_KERNEL_CPU_NORM_KERNELS_H

#include <math.h>

#include "compute_common.h"

/* exp(x) for x <= 0 (or NaN), the softmax hot loop: Cephes' minimax polynomial on
 * [-ln2/2, ln2/2] with a two-part ln2 reduction (about 1 ulp), branch-free so the loop
 * vectorizes.  2^n is built from the bits of the rounding sum directly: with the magic constant
 * 1.5*2^23 + 127, the low 9 bits of t hold n + 127, and shifting them into the exponent field
 * gives 2^n.  Results below FLT_MIN flush to 0 (absolute error < 1.2e-38); NaN stays NaN. */
static inline float fk_expf_nonpos(float x) {
    const float magic = 12582912.0f + 127.0f;
    float xc = x < -87.33654f ? -87.33654f : x;
    float t = xc * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
    uint32_t tb;
    float scale;
    p = p * z + r + 1.0f;
    memcpy(&tb, &t, 4);
    tb <<= 23;
    memcpy(&scale, &tb, 4);
    p = p * scale;
    return x < -87.33654f ? 0.0f : p;
}

/* One softmax row in F32: x and y are distinct, unit stride. */
FK_ISA_COMPUTE static void fk_softmax_row_f32(const float *restrict x, float *restrict y, int64_t n, int log_out) {
    float mx[16];
    double acc[16] = {0};
    float m;
    double s;
    int64_t i;
    for (int j = 0; j < 16; j++) mx[j] = -INFINITY;
    for (i = 0; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) mx[j] = x[i + j] > mx[j] ? x[i + j] : mx[j];
    for (int j = 0; i < n; i++, j++) mx[j] = x[i] > mx[j] ? x[i] : mx[j];
    m = mx[0];
    for (int j = 1; j < 16; j++) m = mx[j] > m ? mx[j] : m;
    for (i = 0; i < n; i++) y[i] = fk_expf_nonpos(x[i] - m);
    for (i = 0; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += (double)y[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += (double)y[i];
    for (int w = 8; w > 0; w >>= 1)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    s = acc[0];
    if (log_out) {
        float ls = (float)log(s);
        for (i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
    } else {
        float inv = (float)(1.0 / s);
        for (i = 0; i < n; i++) y[i] *= inv;
    }
}

static void fk_softmax_row_f64(const double *x, double *y, int64_t n, int log_out) {
    double m = -INFINITY, s, acc[16] = {0};
    int64_t i;
    for (i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    for (i = 0; i < n; i++) y[i] = exp(x[i] - m);
    for (i = 0; i + 16 <= n; i += 16)                /* 16 lanes: error (n/16 + 4) u */
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

static int fk_norm_prepare(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                           const fk_layout *layouts, const fk_params *params, int dtype, int kind,
                           fk_norm_plan *plan) {
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
    /* row scratch: softmax keeps x and y in its compute type (F64 for F64, else F32), the norms x,
     * y, weight and bias in F64; a stride-0 last dim of 2**60 overflows it */
    status = kind <= FK_NORM_LOG_SOFTMAX
        ? fk_size_bytes(plan->d, 2 * (dtype == FK_F64 ? 8 : 4), &plan->scratch_bytes, "softmax row scratch")
        : fk_size_bytes(plan->d, 4 * 8, &plan->scratch_bytes, "norm row scratch");
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
FK_DEFINE_ROW_IO(F16, uint16_t, float, FK_LD_F16, FK_ST_F16)
FK_DEFINE_ROW_IO(BF16, uint16_t, float, FK_LD_BF16, FK_ST_BF16)
FK_DEFINE_ROW_IO(F32, float, float, FK_LD_F32, FK_ST_F32)
FK_DEFINE_ROW_IO(F16, uint16_t, double, FK_LD_F16, FK_STD_F16)
FK_DEFINE_ROW_IO(BF16, uint16_t, double, FK_LD_BF16, FK_STD_BF16)
FK_DEFINE_ROW_IO(F32, float, double, FK_LD_F32, FK_STD_F32)
FK_DEFINE_ROW_IO(F64, double, double, FK_LD_F64, FK_STD_F64)

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

static int fk_softmax_run(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                          const fk_layout *layouts, const fk_params *params, int dtype, int log_out,
                          fk_row_load_fn load, fk_row_store_fn store) {
    fk_norm_plan plan;
    int status = fk_norm_prepare(inputs, n_in, outputs, n_out, layouts, params, dtype,
                                 log_out ? FK_NORM_LOG_SOFTMAX : FK_NORM_SOFTMAX, &plan);
    size_t csz = dtype == FK_F64 ? sizeof(double) : sizeof(float);
    char *scratch;
    if (status) return status;
    if (plan.d == 0 || plan.loop.numel == 0) return FK_OK;
    scratch = (char *)fk_scratch_alloc(plan.scratch_bytes);       /* x and y rows */
    if (scratch == NULL) return FK_ERR_NO_MEMORY;
    {
        void *xs = scratch, *ys = scratch + plan.d * csz;
        int direct = dtype == FK_F32 && plan.xs == 4 && plan.os == 4;
        FK_NORM_WALK(plan, {
            if (direct) {
                fk_softmax_row_f32((const float *)xrow, (float *)orow, plan.d, log_out);
            } else {
                load(xrow, plan.xs, plan.d, xs);
                if (dtype == FK_F64) fk_softmax_row_f64((const double *)xs, (double *)ys, plan.d, log_out);
                else fk_softmax_row_f32((const float *)xs, (float *)ys, plan.d, log_out);
                store(ys, plan.d, orow, plan.os);
            }
        });
    }
    free(scratch);
    return FK_OK;
}

static int fk_norm_run(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                       const fk_layout *layouts, const fk_params *params, int dtype, int kind,
                       fk_row_load_fn load, fk_row_store_fn store) {
    fk_norm_plan plan;
    int status = fk_norm_prepare(inputs, n_in, outputs, n_out, layouts, params, dtype, kind, &plan);
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
    FK_NORM_WALK(plan, {
        load(xrow, plan.xs, plan.d, xs);
        if (kind == FK_NORM_RMS) fk_rms_norm_row(xs, w, ys, plan.d, plan.eps);
        else fk_layer_norm_row(xs, w, b, ys, plan.d, plan.eps);
        store(ys, plan.d, orow, plan.os);
    });
    free(scratch);
    return FK_OK;
}

/* ---- kernels ---------------------------------------------------------------------------------- */
#define FK_NORM_KERNELS(NAME, T)                                                                  \
    static int fk_softmax_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                 const fk_layout *layouts, const fk_params *params) {           \
        return fk_softmax_run(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, 0,        \
                              fk_row_load_##NAME##_##T, fk_row_store_##NAME##_##T);               \
    }                                                                                             \
    static int fk_log_softmax_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                     const fk_layout *layouts, const fk_params *params) {       \
        return fk_softmax_run(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, 1,        \
                              fk_row_load_##NAME##_##T, fk_row_store_##NAME##_##T);               \
    }                                                                                             \
    static int fk_rms_norm_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                  const fk_layout *layouts, const fk_params *params) {          \
        return fk_norm_run(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_NORM_RMS, \
                           fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);            \
    }                                                                                             \
    static int fk_layer_norm_##NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                                    const fk_layout *layouts, const fk_params *params) {        \
        return fk_norm_run(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, FK_NORM_LAYER, \
                           fk_row_load_##NAME##_double, fk_row_store_##NAME##_double);            \
    }
FK_NORM_KERNELS(F16, float)
FK_NORM_KERNELS(BF16, float)
FK_NORM_KERNELS(F32, float)
FK_NORM_KERNELS(F64, double)

/* ---- cost: a handful of flops per element (exp ~ 12), every operand moved once ---------------- */
static fk_cost fk_norm_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                            const fk_params *params) {
    fk_cost cost = {0.0, 0.0, 80.0};
    double n;
    (void)params;
    if (n_layouts < 2) return cost;
    n = (double)fk_layout_numel(&layouts[0]);
    cost.flops = n * (n_layouts == 2 ? 16.0 : 6.0);
    for (int k = 0; k < n_layouts; k++)
        cost.bytes_moved += (double)fk_layout_numel(&layouts[k]) * fk_dtype_itemsize[dtypes->v[k]];
    return cost;
}

/* ---- manifest ---------------------------------------------------------------------------------- */
/* Claims (|err| <= max_rel * |y| + max_abs against a float64 / longdouble reference of the same
 * formula; tests/test_norm.py checks them):
 *   softmax      F32 2 ulp exp + rounding of x - max (which contributes at most u/e absolutely);
 *                F16/BF16 add one output rounding; F64 adds the 16-lane row sum, (D/16 + 4) u.
 *   log_softmax  rounding of (x - max) and log(sum): absolute u * (log2(D) + 2), D <= 65536.
 *   norms        F64 compute, one rounding to the output dtype.  The scale is |y| for RMS_NORM and
 *                |w| * (|x| + |mean|) * rstd + |b| for LAYER_NORM: x - mean carries an absolute
 *                error of u * |mean|, which rstd amplifies on a (near-)constant row. */
#define FK_P(REL, ABS, NOTE) {1, 1, {0, 0}, 0, REL, ABS, NOTE}
#define FK_P_SOFTMAX_F32 FK_P(1e-6, 1e-7, "|err| <= max_rel*|y| + max_abs")
#define FK_P_SOFTMAX_F64 FK_P(3e-14, 1e-16, "|err| <= max_rel*|y| + max_abs for D <= 4096")
#define FK_P_SOFTMAX_F16 FK_P(5e-4, 1e-7, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_SOFTMAX_BF16 FK_P(4e-3, 1e-7, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_LOGSM_F32 FK_P(5e-7, 1.5e-6, "|err| <= max_rel*|y| + max_abs for D <= 65536")
#define FK_P_LOGSM_F64 FK_P(1e-15, 4e-14, "|err| <= max_rel*|y| + max_abs for D <= 4096")
#define FK_P_LOGSM_F16 FK_P(5e-4, 1.5e-6, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_LOGSM_BF16 FK_P(4e-3, 1.5e-6, "|err| <= max_rel*|y| + max_abs; F32 compute")
#define FK_P_NORM_F32 FK_P(1.2e-7, 0.0, "|err| <= max_rel*scale; scale: |y| (rms), |w|(|x|+|mean|)rstd+|b| (layer)")
#define FK_P_NORM_F64 FK_P(1e-14, 0.0, "|err| <= max_rel*scale; scale: |y| (rms), |w|(|x|+|mean|)rstd+|b| (layer)")
#define FK_P_NORM_F16 FK_P(5e-4, 6e-8, "|err| <= max_rel*scale + max_abs; scale as for f32; F64 compute")
#define FK_P_NORM_BF16 FK_P(4e-3, 1e-38, "|err| <= max_rel*scale + max_abs; scale as for f32; F64 compute")

#define FK_NORM_ROW(OPC, FN, NAME, NOPS, DTS, PREC, REV)                                          \
    {FK_OP_##OPC, {NOPS, DTS}, {fk_##FN##_##NAME, FK_CAP_STRIDED_INPUT, 0, PREC, fk_norm_cost,     \
                                "native", 0x5047000000000000ull | ((uint64_t)FK_OP_##OPC << 16) | \
                                              ((uint64_t)FK_##NAME << 8) | (REV)}},
#define FK_D2(N) {FK_##N, FK_##N}
#define FK_D3(N) {FK_##N, FK_##N, FK_##N}
#define FK_D4(N) {FK_##N, FK_##N, FK_##N, FK_##N}
#define FK_NORM_ROWS(NAME)                                                                        \
    FK_NORM_ROW(SOFTMAX_LAST_DIM, softmax, NAME, 2, FK_D2(NAME), FK_P_SOFTMAX_##NAME, 1)           \
    FK_NORM_ROW(LOG_SOFTMAX_LAST_DIM, log_softmax, NAME, 2, FK_D2(NAME), FK_P_LOGSM_##NAME, 1)     \
    FK_NORM_ROW(RMS_NORM, rms_norm, NAME, 3, FK_D3(NAME), FK_P_NORM_##NAME, 1)                     \
    FK_NORM_ROW(LAYER_NORM, layer_norm, NAME, 4, FK_D4(NAME), FK_P_NORM_##NAME, 1)

static const fk_manifest_row fk_norm_manifest[] = {
    FK_NORM_ROWS(F16) FK_NORM_ROWS(BF16) FK_NORM_ROWS(F32) FK_NORM_ROWS(F64)
};
static const int fk_norm_manifest_len = (int)(sizeof(fk_norm_manifest) / sizeof(fk_norm_manifest[0]));

#endif /* FUEL_KERNEL_CPU_NORM_KERNELS_H */
