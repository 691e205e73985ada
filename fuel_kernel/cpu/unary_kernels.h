/* CPU unary elementwise kernels and the params ops AFFINE, CLAMP, POWI, with their manifest.
 * Key: [T, T].
 *
 * Float dtypes (F16, BF16, F32, F64) get every unary op; signed integers get NEG, ABS, SQR, SIGN,
 * RELU (wrapping: NEG/ABS of MIN is MIN, SQR wraps, as NumPy).  F16/BF16 compute in F32 and round
 * once.  Definitions where NumPy has no ufunc or is ambiguous:
 *   RSQRT = 1/sqrt(x), RECIP = 1/x, SQR = x*x, RELU = max(x, 0) with NaN kept,
 *   SIGMOID = 1/(1+exp(-x)), SILU = x*sigmoid(x), GELU = 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
 *   (evaluated as x*sigmoid(2*sqrt(2/pi)(x+0.044715x^3)), which is the same function without the
 *   cancellation), GELU_ERF = 0.5x(1+erf(x/sqrt 2)) (evaluated as 0.5x*erfc(-x/sqrt 2));
 *   SILU(-inf) = GELU(-inf) = GELU_ERF(-inf) = -0 (the limits; the formulas give NaN there);
 *   STEP = np.heaviside(x, 0) (0 for x <= 0, 1 for x > 0, NaN kept); SIGN = np.sign (NaN kept,
 *   +-0 kept); ROUND = half to even (np.round); FLOOR, CEIL exact.
 * Accuracy: every F32 transcendental (EXP, LOG, SIN, COS, TANH, SIGMOID, SILU, GELU, GELU_ERF,
 * ERF, RSQRT, POWI) is vectorized F32 code from vecmath_f32.h (special values there), with its
 * measured ulp bound stated in its manifest row; F16/BF16 use the same F32
 * functions and round once; F64 uses the C library.  SIN/COS of |x| > 65536 (and inf) are the one
 * scalar path: the C library in F64, rounded once.
 *
 * Params ops:
 *   AFFINE(mul, add)  floats only: x*mul + add, each operation rounded in the compute type
 *                     (F32 with mul and add rounded to F32, F64 in F64; never fused).
 *   CLAMP(min, max)   every numeric dtype: min(max(x, lo), hi), NaN kept; min > max gives max
 *                     everywhere (as np.clip, torch.clamp, ONNX Clip); NaN bounds are a
 *                     ParamsError.  Floats use the bounds rounded to the compute type; integers
 *                     use ceil(min) and floor(max) saturated to the dtype's range.
 *   POWI(exp)         every numeric dtype: x**exp.  F32 (and F16/BF16 through it): x, x*x, 1/x
 *                     for exp 1, 2, -1, else exp2(exp log2|x|) in two-float precision with C
 *                     pow's special cases (vecmath_f32.h); F64: C pow.  Integers wrap around; a negative exp is a ParamsError
 *                     (as NumPy refuses integers to negative integer powers).
 */
#ifndef FUEL_KERNEL_CPU_UNARY_KERNELS_H
#define FUEL_KERNEL_CPU_UNARY_KERNELS_H

#include "elementwise_kernels.h"
#include "vecmath_f32.h"

/* Constant data a row function needs, derived once per call from fk_params. */
typedef struct {
    float mul_f, add_f, lo_f, hi_f;
    double mul_d, add_d, lo_d, hi_d;
    int64_t lo_i, hi_i;
    int32_t exp;
} fk_unary_ctx;

/* ---- scalar definitions: FK_U_<OP>_<KIND>(x, T, c) with KIND F32, F64, SINT ------------------ */
#define FK_SQRT_2_OVER_PI 0.79788456080286535588
#define FK_SQRT1_2 0.70710678118654752440

static inline double fk_sigmoid_f64(double x) {
    double t = exp(-fabs(x));
    return (x >= 0.0 ? 1.0 : t) / (1.0 + t);
}
static inline double fk_silu_f64(double x) { return x == -INFINITY ? -0.0 : x * fk_sigmoid_f64(x); }
static inline double fk_gelu_f64(double x) {
    double z = FK_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    return x == -INFINITY ? -0.0 : x * fk_sigmoid_f64(2.0 * z);
}
static inline double fk_gelu_erf_f64(double x) {
    return x == -INFINITY ? -0.0 : 0.5 * x * erfc(-x * FK_SQRT1_2);
}

#define FK_U_NEG_F(x, T, c) (-(x))
#define FK_U_ABS_F(x, T, c) FK_TG1(fabs, x)(x)
#define FK_U_SQR_F(x, T, c) ((x) * (x))
#define FK_U_SQRT_F(x, T, c) FK_TG1(sqrt, x)(x)
#define FK_U_RSQRT_F32(x, T, c) fk_rsqrtf(x)
#define FK_U_RSQRT_F64(x, T, c) (1.0 / sqrt(x))
#define FK_U_RECIP_F(x, T, c) ((T)1 / (x))
#define FK_U_EXP_F32(x, T, c) fk_fast_expf(x)
#define FK_U_EXP_F64(x, T, c) exp(x)
#define FK_U_LOG_F32(x, T, c) fk_fast_logf(x)
#define FK_U_LOG_F64(x, T, c) log(x)
#define FK_U_SIN_F32(x, T, c) fk_sinf_any(x)
#define FK_U_SIN_F64(x, T, c) sin(x)
#define FK_U_COS_F32(x, T, c) fk_cosf_any(x)
#define FK_U_COS_F64(x, T, c) cos(x)
#define FK_U_TANH_F32(x, T, c) fk_fast_tanhf(x)
#define FK_U_TANH_F64(x, T, c) tanh(x)
#define FK_U_SIGMOID_F32(x, T, c) fk_fast_sigmoidf(x)
#define FK_U_SIGMOID_F64(x, T, c) fk_sigmoid_f64(x)
#define FK_U_RELU_F(x, T, c) ((x) > 0 ? (x) : ((x) != (x) ? (x) : (T)0))
#define FK_U_SILU_F32(x, T, c) fk_fast_siluf(x)
#define FK_U_SILU_F64(x, T, c) fk_silu_f64(x)
#define FK_U_GELU_F32(x, T, c) fk_fast_geluf(x)
#define FK_U_GELU_F64(x, T, c) fk_gelu_f64(x)
#define FK_U_GELU_ERF_F32(x, T, c) fk_fast_gelu_erff(x)
#define FK_U_GELU_ERF_F64(x, T, c) fk_gelu_erf_f64(x)
#define FK_U_ERF_F32(x, T, c) fk_fast_erff(x)
#define FK_U_ERF_F64(x, T, c) erf(x)
#define FK_U_STEP_F(x, T, c) ((x) > 0 ? (T)1 : ((x) != (x) ? (x) : (T)0))
#define FK_U_FLOOR_F(x, T, c) FK_TG1(floor, x)(x)
#define FK_U_CEIL_F(x, T, c) FK_TG1(ceil, x)(x)
/* half to even by adding and removing 2^(mantissa bits) (vectorizes, unlike roundeven on GCC 12);
 * larger magnitudes are integers already, and copysign keeps -0.0 for (-0.5, -0] */
#define FK_U_ROUND_F(x, T, c) _Generic((x), float: fk_round_even_f32, default: fk_round_even_f64)(x)
#define FK_U_SIGN_F(x, T, c) ((x) > 0 ? (T)1 : ((x) < 0 ? (T)-1 : (x)))
#define FK_U_AFFINE_F32(x, T, c) ((x) * (c)->mul_f + (c)->add_f)
#define FK_U_AFFINE_F64(x, T, c) ((x) * (c)->mul_d + (c)->add_d)
#define FK_U_CLAMP_F32(x, T, c) ((x) != (x) ? (x) : ((x) < (c)->lo_f ? (c)->lo_f : ((x) > (c)->hi_f ? (c)->hi_f : (x))))
#define FK_U_CLAMP_F64(x, T, c) ((x) != (x) ? (x) : ((x) < (c)->lo_d ? (c)->lo_d : ((x) > (c)->hi_d ? (c)->hi_d : (x))))
#define FK_U_POWI_F32(x, T, c) fk_powif(x, (c)->exp)
#define FK_U_POWI_F64(x, T, c) pow(x, (double)(c)->exp)

#define FK_U_NEG_SINT(x, T, c) ((T)(0 - (uint64_t)(x)))
#define FK_U_ABS_SINT(x, T, c) ((x) < 0 ? (T)(0 - (uint64_t)(x)) : (x))
#define FK_U_SQR_SINT(x, T, c) ((T)((uint64_t)(x) * (uint64_t)(x)))
#define FK_U_SIGN_SINT(x, T, c) ((T)(((x) > 0) - ((x) < 0)))
#define FK_U_RELU_SINT(x, T, c) ((x) > 0 ? (x) : (T)0)
#define FK_U_CLAMP_INT(x, T, c) ((T)((int64_t)(x) < (c)->lo_i ? (c)->lo_i : ((int64_t)(x) > (c)->hi_i ? (c)->hi_i : (int64_t)(x))))
#define FK_U_POWI_INT(x, T, c) ((T)fk_ipow_u64((uint64_t)(x), (uint64_t)(c)->exp))

#define FK_TG1(F, x) _Generic((x), float: F##f, default: F)

FK_INLINE float fk_round_even_f32(float x) {
    float a = fabsf(x);
    float r = copysignf((a + 8388608.0f) - 8388608.0f, x);
    return a < 8388608.0f ? r : x;
}
FK_INLINE double fk_round_even_f64(double x) {
    double a = fabs(x);
    double r = copysign((a + 4503599627370496.0) - 4503599627370496.0, x);
    return a < 4503599627370496.0 ? r : x;
}

/* ---- generators ---------------------------------------------------------------------------------- */
/* MV is the FK_MV_* build mode: STREAM for cheap ops, COMPUTE for polynomials, NONE for loops
 * around C library calls. */
#define FK_UNARY_VEC(OP, D, T, EXPR, MV)                                                         \
    FK_INLINE void fk_ubody_##OP##_##D(const T *a, T *o, int64_t n, const fk_unary_ctx *c) {     \
        const fk_unary_ctx cc = *c;                                                              \
        (void)cc;                                                                                \
        for (int64_t i = 0; i < n; i++) { T x = a[i]; o[i] = EXPR(x, T, &cc); }                  \
    }                                                                                            \
    MV(fk_uvec_##OP##_##D, (const T *a, T *o, int64_t n, const fk_unary_ctx *c), (a, o, n, c),   \
       fk_ubody_##OP##_##D)

/* SIN/COS in F32: each chunk of FK_CHUNK elements takes the vectorized fast loop unless one of its
 * inputs needs the C library (|x| > FK_TRIG_FAST_MAX, inf); such a chunk runs element by element.
 * Every input is read before its output is written, so in-place calls are safe. */
#define FK_UNARY_VEC_TRIG(OP, FAST, ANY)                                                         \
    FK_INLINE void fk_ubody_##OP##_F32(const float *a, float *o, int64_t n, const fk_unary_ctx *c) { \
        (void)c;                                                                                 \
        for (int64_t i0 = 0; i0 < n; i0 += FK_CHUNK) {                                           \
            int64_t m = n - i0 < FK_CHUNK ? n - i0 : FK_CHUNK;                                   \
            const float *x = a + i0;                                                             \
            float *y = o + i0;                                                                   \
            int slow = 0;                                                                        \
            for (int64_t i = 0; i < m; i++) slow |= fk_trig_needs_slow_path(x[i]);               \
            if (!slow) {                                                                         \
                for (int64_t i = 0; i < m; i++) y[i] = FAST(x[i]);                               \
            } else {                                                                             \
                for (int64_t i = 0; i < m; i++) y[i] = ANY(x[i]);                                \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    FK_MV_COMPUTE(fk_uvec_##OP##_F32, (const float *a, float *o, int64_t n, const fk_unary_ctx *c), \
                  (a, o, n, c), fk_ubody_##OP##_F32)

/* POWI in F32: the exponent is fixed per call, so the loop is chosen once (a select on a
 * loop-invariant condition would keep GCC from vectorizing the pow core) */
FK_INLINE void fk_ubody_POWI_F32(const float *a, float *o, int64_t n, const fk_unary_ctx *c) {
    const int32_t e = c->exp;
    if (e == 1) {
        for (int64_t i = 0; i < n; i++) o[i] = a[i];
    } else if (e == 2) {
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i];
    } else if (e == -1) {
        for (int64_t i = 0; i < n; i++) o[i] = 1.0f / a[i];
    } else {
        for (int64_t i = 0; i < n; i++) o[i] = fk_fast_powif(a[i], e);
    }
}
FK_MV_COMPUTE(fk_uvec_POWI_F32, (const float *a, float *o, int64_t n, const fk_unary_ctx *c), (a, o, n, c),
              fk_ubody_POWI_F32)

#define FK_UNARY_ROW_NATIVE(OP, D, T, EXPR)                                                      \
    static void fk_urow_##OP##_##D(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        const fk_unary_ctx *c = (const fk_unary_ctx *)ctx;                                       \
        if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T)) {                          \
            fk_uvec_##OP##_##D((const T *)p[0], (T *)p[1], n, c);                                \
            return;                                                                              \
        }                                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T x = *(const T *)(p[0] + i * s[0]);                                                 \
            *(T *)(p[1] + i * s[1]) = EXPR(x, T, c);                                             \
        }                                                                                        \
    }

#define FK_UNARY_ROW_HALF(OP, D, LOAD, STORE)                                                    \
    static void fk_urow_##OP##_##D(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        float xa[FK_CHUNK], xo[FK_CHUNK];                                                        \
        for (int64_t i0 = 0; i0 < n; i0 += FK_CHUNK) {                                           \
            int64_t m = n - i0 < FK_CHUNK ? n - i0 : FK_CHUNK;                                   \
            LOAD(p[0] + i0 * s[0], s[0], xa, m);                                                 \
            fk_uvec_##OP##_F32(xa, xo, m, (const fk_unary_ctx *)ctx);                            \
            STORE(xo, p[1] + i0 * s[1], s[1], m);                                                \
        }                                                                                        \
    }

/* PARAMS names the fk_params kind; SETUP(status, params, &ctx, D) fills ctx or fails. */
#define FK_UNARY_KERNEL(OP, D, PARAMS, SETUP)                                                    \
    static int fk_##OP##_##D(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out, \
                             const fk_layout *layouts, const fk_params *params) {                \
        const int dtypes[2] = {FK_##D, FK_##D};                                                  \
        const int sizes[2] = {fk_dtype_itemsize[FK_##D], fk_dtype_itemsize[FK_##D]};             \
        fk_unary_ctx ctx;                                                                        \
        fk_loop loop;                                                                            \
        memset(&ctx, 0, sizeof(ctx));                                                            \
        int status = fk_elementwise_prepare(&loop, inputs, n_in, outputs, n_out, layouts, params, \
                                            1, dtypes, PARAMS, #OP);                             \
        if (status) return status;                                                               \
        status = SETUP(params, &ctx, FK_##D, #OP);                                               \
        if (status) return status;                                                               \
        fk_loop_run(&loop, fk_urow_##OP##_##D, &ctx, sizes);                                     \
        return FK_OK;                                                                            \
    }

/* ---- params -> ctx ------------------------------------------------------------------------------- */
static inline int fk_setup_none(const fk_params *params, fk_unary_ctx *c, int dtype, const char *op) {
    (void)params; (void)c; (void)dtype; (void)op;
    return FK_OK;
}
static inline int fk_setup_affine(const fk_params *params, fk_unary_ctx *c, int dtype, const char *op) {
    (void)dtype; (void)op;
    c->mul_d = params->u.affine.mul;
    c->add_d = params->u.affine.add;
    c->mul_f = (float)c->mul_d;
    c->add_f = (float)c->add_d;
    return FK_OK;
}
/* the integer range of each dtype, as doubles for saturating the bounds */
static inline int fk_setup_clamp(const fk_params *params, fk_unary_ctx *c, int dtype, const char *op) {
    static const double lo_of[FK_DTYPE_COUNT] = {0, 0, -128.0, -32768.0, -2147483648.0, -9223372036854775808.0, 0};
    static const double hi_of[FK_DTYPE_COUNT] = {1, 255.0, 127.0, 32767.0, 2147483647.0, 9223372036854775807.0, 4294967295.0};
    double lo = params->u.clamp.min, hi = params->u.clamp.max;
    if (lo != lo || hi != hi) {
        fk_set_error(FK_ERR_PARAMS, "%s: min %g and max %g must be numbers, not NaN", op, lo, hi);
        return FK_ERR_PARAMS;
    }
    /* min(max(x, lo), hi) is hi for every x when lo > hi: the row functions test lo first, so
     * lowering lo to hi gives exactly that (here and for the integer bounds below) */
    if (lo > hi) lo = hi;
    c->lo_d = lo;
    c->hi_d = hi;
    c->lo_f = (float)lo;
    c->hi_f = (float)hi;
    if (dtype <= FK_U32) {
        double l = ceil(lo), h = floor(hi);
        /* 2^63 is a double but not an int64: saturate through the dtype's range first */
        c->lo_i = l <= lo_of[dtype] ? (dtype == FK_I64 ? INT64_MIN : (int64_t)lo_of[dtype])
                : l >= hi_of[dtype] ? (dtype == FK_I64 ? INT64_MAX : (int64_t)hi_of[dtype]) : (int64_t)l;
        c->hi_i = h <= lo_of[dtype] ? (dtype == FK_I64 ? INT64_MIN : (int64_t)lo_of[dtype])
                : h >= hi_of[dtype] ? (dtype == FK_I64 ? INT64_MAX : (int64_t)hi_of[dtype]) : (int64_t)h;
        if (c->lo_i > c->hi_i) c->lo_i = c->hi_i;     /* e.g. clamp(0.5, 0.7): ceil 1 > floor 0 */
    }
    return FK_OK;
}
static inline int fk_setup_powi(const fk_params *params, fk_unary_ctx *c, int dtype, const char *op) {
    c->exp = params->u.powi.exp;
    if (dtype <= FK_U32 && c->exp < 0) {
        fk_set_error(FK_ERR_PARAMS, "%s: integers to negative integer powers are not allowed (exp=%d)",
                     op, (int)c->exp);
        return FK_ERR_PARAMS;
    }
    return FK_OK;
}

/* ---- instantiation --------------------------------------------------------------------------------- */
/* float ops: F32 and F64 bodies (K32/K64 pick the definition), F16/BF16 through the F32 body */
#define FK_GEN_UFLOAT(OP, K32, K64, ATTR32, ATTR64, PARAMS, SETUP)                               \
    FK_UNARY_VEC(OP, F32, float, FK_U_##OP##_##K32, ATTR32)                                      \
    FK_UNARY_ROW_NATIVE(OP, F32, float, FK_U_##OP##_##K32)                                       \
    FK_UNARY_KERNEL(OP, F32, PARAMS, SETUP)                                                      \
    FK_UNARY_VEC(OP, F64, double, FK_U_##OP##_##K64, ATTR64)                                     \
    FK_UNARY_ROW_NATIVE(OP, F64, double, FK_U_##OP##_##K64)                                      \
    FK_UNARY_KERNEL(OP, F64, PARAMS, SETUP)                                                      \
    FK_UNARY_ROW_HALF(OP, F16, fk_load_f16_row, fk_store_f16_row)                                \
    FK_UNARY_KERNEL(OP, F16, PARAMS, SETUP)                                                      \
    FK_UNARY_ROW_HALF(OP, BF16, fk_load_bf16_row, fk_store_bf16_row)                             \
    FK_UNARY_KERNEL(OP, BF16, PARAMS, SETUP)
/* F32 SIN/COS: the chunk-guarded vector loop above; F64 and the half types as FK_GEN_UFLOAT */
#define FK_GEN_UTRIG(OP, FAST, ANY)                                                              \
    FK_UNARY_VEC_TRIG(OP, FAST, ANY)                                                             \
    FK_UNARY_ROW_NATIVE(OP, F32, float, FK_U_##OP##_F32)                                         \
    FK_UNARY_KERNEL(OP, F32, FK_PARAMS_NONE, fk_setup_none)                                      \
    FK_UNARY_VEC(OP, F64, double, FK_U_##OP##_F64, FK_MV_NONE)                                   \
    FK_UNARY_ROW_NATIVE(OP, F64, double, FK_U_##OP##_F64)                                        \
    FK_UNARY_KERNEL(OP, F64, FK_PARAMS_NONE, fk_setup_none)                                      \
    FK_UNARY_ROW_HALF(OP, F16, fk_load_f16_row, fk_store_f16_row)                                \
    FK_UNARY_KERNEL(OP, F16, FK_PARAMS_NONE, fk_setup_none)                                      \
    FK_UNARY_ROW_HALF(OP, BF16, fk_load_bf16_row, fk_store_bf16_row)                             \
    FK_UNARY_KERNEL(OP, BF16, FK_PARAMS_NONE, fk_setup_none)
/* float ops with an F32 math function and a C library F64 definition */
#define FK_GEN_UMATH(OP) FK_GEN_UFLOAT(OP, F32, F64, FK_MV_COMPUTE, FK_MV_NONE, FK_PARAMS_NONE, fk_setup_none)
/* simple float ops (same definition for F32 and F64) */
#define FK_GEN_UF(OP, ATTR) FK_GEN_UFLOAT(OP, F, F, ATTR, ATTR, FK_PARAMS_NONE, fk_setup_none)
#define FK_GEN_UINT1(OP, D, T, K, PARAMS, SETUP)                                                 \
    FK_UNARY_VEC(OP, D, T, FK_U_##OP##_##K, FK_MV_STREAM)                                           \
    FK_UNARY_ROW_NATIVE(OP, D, T, FK_U_##OP##_##K)                                               \
    FK_UNARY_KERNEL(OP, D, PARAMS, SETUP)
#define FK_GEN_USINT(OP)                                                                         \
    FK_GEN_UINT1(OP, I8, int8_t, SINT, FK_PARAMS_NONE, fk_setup_none)                            \
    FK_GEN_UINT1(OP, I16, int16_t, SINT, FK_PARAMS_NONE, fk_setup_none)                          \
    FK_GEN_UINT1(OP, I32, int32_t, SINT, FK_PARAMS_NONE, fk_setup_none)                          \
    FK_GEN_UINT1(OP, I64, int64_t, SINT, FK_PARAMS_NONE, fk_setup_none)
#define FK_GEN_UALLINT(OP, PARAMS, SETUP)                                                        \
    FK_GEN_UINT1(OP, U8, uint8_t, INT, PARAMS, SETUP) FK_GEN_UINT1(OP, I8, int8_t, INT, PARAMS, SETUP) \
    FK_GEN_UINT1(OP, I16, int16_t, INT, PARAMS, SETUP) FK_GEN_UINT1(OP, I32, int32_t, INT, PARAMS, SETUP) \
    FK_GEN_UINT1(OP, I64, int64_t, INT, PARAMS, SETUP) FK_GEN_UINT1(OP, U32, uint32_t, INT, PARAMS, SETUP)

FK_GEN_UF(NEG, FK_MV_STREAM)
FK_GEN_UF(ABS, FK_MV_STREAM)
FK_GEN_UF(SQR, FK_MV_STREAM)
FK_GEN_UF(SQRT, FK_MV_STREAM)
FK_GEN_UFLOAT(RSQRT, F32, F64, FK_MV_COMPUTE, FK_MV_STREAM, FK_PARAMS_NONE, fk_setup_none)
FK_GEN_UF(RECIP, FK_MV_STREAM)
FK_GEN_UFLOAT(EXP, F32, F64, FK_MV_COMPUTE, FK_MV_NONE, FK_PARAMS_NONE, fk_setup_none)
FK_GEN_UMATH(LOG)
FK_GEN_UTRIG(SIN, fk_fast_sinf, fk_sinf_any)
FK_GEN_UTRIG(COS, fk_fast_cosf, fk_cosf_any)
FK_GEN_UFLOAT(TANH, F32, F64, FK_MV_COMPUTE, FK_MV_NONE, FK_PARAMS_NONE, fk_setup_none)
FK_GEN_UFLOAT(SIGMOID, F32, F64, FK_MV_COMPUTE, FK_MV_NONE, FK_PARAMS_NONE, fk_setup_none)
FK_GEN_UF(RELU, FK_MV_STREAM)
FK_GEN_UMATH(SILU)
FK_GEN_UMATH(GELU)
FK_GEN_UMATH(GELU_ERF)
FK_GEN_UMATH(ERF)
FK_GEN_UF(STEP, FK_MV_STREAM)
FK_GEN_UF(FLOOR, FK_MV_STREAM)
FK_GEN_UF(CEIL, FK_MV_STREAM)
FK_GEN_UF(ROUND, FK_MV_STREAM)
FK_GEN_UF(SIGN, FK_MV_STREAM)
FK_GEN_USINT(NEG)
FK_GEN_USINT(ABS)
FK_GEN_USINT(SQR)
FK_GEN_USINT(SIGN)
FK_GEN_USINT(RELU)
FK_GEN_UFLOAT(AFFINE, F32, F64, FK_MV_STREAM, FK_MV_STREAM, FK_PARAMS_AFFINE, fk_setup_affine)
FK_GEN_UFLOAT(CLAMP, F32, F64, FK_MV_STREAM, FK_MV_STREAM, FK_PARAMS_CLAMP, fk_setup_clamp)
FK_GEN_UALLINT(CLAMP, FK_PARAMS_CLAMP, fk_setup_clamp)
FK_UNARY_ROW_NATIVE(POWI, F32, float, FK_U_POWI_F32)
FK_UNARY_KERNEL(POWI, F32, FK_PARAMS_POWI, fk_setup_powi)
FK_UNARY_VEC(POWI, F64, double, FK_U_POWI_F64, FK_MV_NONE)
FK_UNARY_ROW_NATIVE(POWI, F64, double, FK_U_POWI_F64)
FK_UNARY_KERNEL(POWI, F64, FK_PARAMS_POWI, fk_setup_powi)
FK_UNARY_ROW_HALF(POWI, F16, fk_load_f16_row, fk_store_f16_row)
FK_UNARY_KERNEL(POWI, F16, FK_PARAMS_POWI, fk_setup_powi)
FK_UNARY_ROW_HALF(POWI, BF16, fk_load_bf16_row, fk_store_bf16_row)
FK_UNARY_KERNEL(POWI, BF16, FK_PARAMS_POWI, fk_setup_powi)
FK_GEN_UALLINT(POWI, FK_PARAMS_POWI, fk_setup_powi)

/* ---- manifest ------------------------------------------------------------------------------------ */
#define FK_UNARY_REV(OP, D) (0xe300000000000000ull | ((uint64_t)FK_OP_##OP << 24) | ((uint64_t)FK_##D << 16) | 1u)
/* C names a claim FK_CLAIM_<C>; COST is the cost function */
#define FK_UNARY_ENTRY(OP, D, C, COST)                                                           \
    {FK_OP_##OP, {2, {FK_##D, FK_##D}},                                                          \
     {fk_##OP##_##D, FK_ELEMENTWISE_CAPS, 0, FK_CLAIM_##C, COST, "native", FK_UNARY_REV(OP, D)}},
#define FK_UNARY_FLOAT_ENTRIES(OP, C32, C64, CHALF, COST)                                        \
    FK_UNARY_ENTRY(OP, F32, C32, COST) FK_UNARY_ENTRY(OP, F64, C64, COST)                        \
    FK_UNARY_ENTRY(OP, F16, CHALF, COST) FK_UNARY_ENTRY(OP, BF16, CHALF, COST)
#define FK_UNARY_SINT_ENTRIES(OP)                                                                \
    FK_UNARY_ENTRY(OP, I8, EXACT, fk_cost_simple) FK_UNARY_ENTRY(OP, I16, EXACT, fk_cost_simple) \
    FK_UNARY_ENTRY(OP, I32, EXACT, fk_cost_simple) FK_UNARY_ENTRY(OP, I64, EXACT, fk_cost_simple)
#define FK_UNARY_ALLINT_ENTRIES(OP)                                                              \
    FK_UNARY_ENTRY(OP, U8, EXACT, fk_cost_simple) FK_UNARY_SINT_ENTRIES(OP)                      \
    FK_UNARY_ENTRY(OP, U32, EXACT, fk_cost_simple)

#define FK_CLAIM_EXACT_F FK_CLAIM(0, "exact (correctly rounded); F16/BF16 via F32, rounded once")
#define FK_CLAIM_ONE_ULP FK_CLAIM(1, "<= 1 ulp: evaluated in F64 (or the C library), rounded once")
#define FK_CLAIM_HALF_ULP FK_CLAIM(1, "<= 1 ulp: computed in F32, rounded once")
#define FK_CLAIM_EXP32 FK_CLAIM(FK_ULP_EXP_F32, "<= 1 ulp: vectorized Cody-Waite + degree-6 polynomial")
#define FK_CLAIM_TANH32 FK_CLAIM(FK_ULP_TANH_F32, "vectorized: -expm1(-2|x|) / (2 + expm1(-2|x|)), one exp reduction")
#define FK_CLAIM_SIGMOID32 FK_CLAIM(FK_ULP_SIGMOID_F32, "vectorized: fast exp of -|x|, one division")
#define FK_CLAIM_RSQRT32 FK_CLAIM(FK_ULP_RSQRT_F32, "vectorized 1/sqrtf: two correctly rounded operations")
#define FK_CLAIM_LOG32 FK_CLAIM(FK_ULP_LOG_F32, "vectorized: 2^e m split, Cephes logf polynomial")
#define FK_CLAIM_TRIG32 FK_CLAIM(FK_ULP_TRIG_F32, "vectorized: 3-part Cody-Waite pi/2 and Cephes polynomials; |x| > 65536 via F64 C library")
#define FK_CLAIM_SILU32 FK_CLAIM(FK_ULP_SILU_F32, "vectorized: x exp(-|x|) / (1 + exp(-|x|)), scaled past the subnormals")
#define FK_CLAIM_GELU32 FK_CLAIM(FK_ULP_GELU_F32, "vectorized: x sigmoid(w), w as a two-float sum")
#define FK_CLAIM_GELU_ERF32 FK_CLAIM(FK_ULP_GELU_ERF_F32, "vectorized: 0.5x erfc(-x/sqrt 2), erfc tail exp(-a^2) erfcx(a) with a^2 in two floats")
#define FK_CLAIM_ERF32 FK_CLAIM(FK_ULP_ERF_F32, "vectorized: odd polynomial below 1, 1 - exp(-x^2) erfcx(x) above")
#define FK_CLAIM_POWI32 FK_CLAIM(FK_ULP_POWI_F32, "vectorized: exact for exp 1, 2, -1; else exp2(exp log2|x|) in two-float precision")
#define FK_CLAIM_LIBM64 FK_CLAIM(FK_ULP_LIBM_F64, "C library in F64 (glibc documents <= 2 ulp for tanh, erf)")
#define FK_CLAIM_COMPOSED64 FK_CLAIM(FK_ULP_COMPOSED_F64, "composed from C library calls in F64")
/* The negative tail of GELU is ill-conditioned in its inner argument (relative error grows like
 * x^2 * eps), so an ulp bound would be meaningless there: a relative bound, measured to 3.7e-13
 * over [-40, 40], with an absolute floor for results deep in the subnormals. */
#define FK_CLAIM_GELU64 {1, 1, {0, 0}, 0, 1e-12, 1e-300, "rel <= 1e-12 (abs 1e-300): F64 formula, tail conditioned by x^2"}
#define FK_CLAIM_AFFINE FK_CLAIM(0, "exact: x*mul then +add, each rounded in the compute type")

/* F32 maxima measured against the F64 C library over sampled inputs in every binade (see
 * vecmath_f32.h), checked by tests/cpu/elementwise/test_vecmath_f32.py */
#define FK_ULP_EXP_F32 1
#define FK_ULP_RSQRT_F32 1
#define FK_ULP_LOG_F32 1
#define FK_ULP_TRIG_F32 2
#define FK_ULP_SILU_F32 3
#define FK_ULP_GELU_F32 3
#define FK_ULP_GELU_ERF_F32 4
#define FK_ULP_ERF_F32 1
#define FK_ULP_POWI_F32 1
#define FK_ULP_TANH_F32 2
#define FK_ULP_SIGMOID_F32 2
#define FK_ULP_LIBM_F64 2
#define FK_ULP_COMPOSED_F64 4

static const fk_manifest_row fk_unary_manifest[] = {
    FK_UNARY_FLOAT_ENTRIES(NEG, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(ABS, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(SQR, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(SQRT, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(RSQRT, RSQRT32, ONE_ULP, HALF_ULP, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(RECIP, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(EXP, EXP32, LIBM64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(LOG, LOG32, LIBM64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(SIN, TRIG32, LIBM64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(COS, TRIG32, LIBM64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(TANH, TANH32, LIBM64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(SIGMOID, SIGMOID32, COMPOSED64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(RELU, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(SILU, SILU32, COMPOSED64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(GELU, GELU32, GELU64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(GELU_ERF, GELU_ERF32, GELU64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(ERF, ERF32, LIBM64, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_FLOAT_ENTRIES(STEP, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(FLOOR, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(CEIL, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(ROUND, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(SIGN, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_SINT_ENTRIES(NEG) FK_UNARY_SINT_ENTRIES(ABS) FK_UNARY_SINT_ENTRIES(SQR)
    FK_UNARY_SINT_ENTRIES(SIGN) FK_UNARY_SINT_ENTRIES(RELU)
    FK_UNARY_FLOAT_ENTRIES(AFFINE, AFFINE, AFFINE, AFFINE, fk_cost_simple)
    FK_UNARY_FLOAT_ENTRIES(CLAMP, EXACT, EXACT, EXACT_F, fk_cost_simple)
    FK_UNARY_ALLINT_ENTRIES(CLAMP)
    FK_UNARY_FLOAT_ENTRIES(POWI, POWI32, ONE_ULP, HALF_ULP, fk_cost_transcendental)
    FK_UNARY_ALLINT_ENTRIES(POWI)
};
static const int fk_unary_manifest_len = (int)(sizeof(fk_unary_manifest) / sizeof(fk_unary_manifest[0]));

#endif /* FUEL_KERNEL_CPU_UNARY_KERNELS_H */
