/* CPU CONV2D kernels, two siblings at each key: "im2col" (image columns packed straight into the
 * GEMM engine's B panels) and "direct" (plane-at-a-time loops, no packing), and their manifest.
 *
 * Operands (NCHW, one float dtype T in F16, BF16, F32, F64):
 *   [x, w, out]        x (N, C, H, W), w (O, C/groups, KH, KW), out (N, O, OH, OW)
 *   [x, w, b, out]     plus a bias b of shape (O,)
 *   params.conv2d(stride, padding, dilation, groups) (params none or NULL = 1, 0, 1, 1).
 *   OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1 (floor), likewise OW; a negative
 *   numerator (kernel larger than the padded input) is FK_ERR_SHAPE, and so is any of these sizes
 *   or the scratch overflowing int64.  C and O divide by groups.  out must not overlap itself.
 *   Padding is zeros that take part in the sum: a tap on padding adds w*0, so a NaN or inf weight
 *   that meets padding gives NaN in both siblings (as PyTorch and the ONNX reference do).
 * F16/BF16 compute in F32 and round once; F32 accumulates in F32, F64 in F64.  x, w and b are read
 * through any strides; out is written through its strides.  Cost functions let a route picker
 * choose: direct has no packing or per-GEMM overhead (small problems), im2col runs at GEMM speed.
 */
#ifndef FUEL_KERNEL_CPU_CONV_KERNELS_H
#define FUEL_KERNEL_CPU_CONV_KERNELS_H

#include "gemm_core.h"

typedef struct {
    int64_t N, C, H, W, O, KH, KW, OH, OW, G, Cg, Og, K;   /* K = Cg*KH*KW: the GEMM depth */
    int64_t sh, sw, ph, pw, dh, dw;
    int64_t xs[4], ws[4], os[4], bs;                     /* strides in elements */
    const char *x, *w, *b;
    char *out;
    int has_bias;
} fk_conv_plan;

static int fk_conv_prepare(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                           const fk_layout *layouts, const fk_params *params, int dtype, int has_bias,
                           fk_conv_plan *p) {
    int dtypes[4] = {dtype, dtype, dtype, dtype};
    int want_in = has_bias ? 3 : 2, status;
    const fk_layout *x, *w, *out;
    int64_t num_h, num_w, span_h, span_w, P = 0, wsize = 0, osize = 0;
    status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, want_in, dtypes,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_DISJOINT);
    if (status) return status;
    x = &layouts[0];
    w = &layouts[1];
    out = &layouts[want_in];
    memset(p, 0, sizeof(*p));
    if (x->ndim != 4 || w->ndim != 4 || out->ndim != 4) {
        fk_set_error(FK_ERR_SHAPE, "conv2d takes NCHW x, (O, C/groups, KH, KW) w and NCHW out (4-d each)");
        return FK_ERR_SHAPE;
    }
    p->sh = p->sw = p->dh = p->dw = 1;
    p->G = 1;
    if (params != NULL && params->kind == FK_PARAMS_CONV2D) {
        const fk_conv2d_params *cp = &params->u.conv2d;
        p->sh = cp->stride[0]; p->sw = cp->stride[1];
        p->ph = cp->padding[0]; p->pw = cp->padding[1];
        p->dh = cp->dilation[0]; p->dw = cp->dilation[1];
        p->G = cp->groups;
        if (p->sh < 1 || p->sw < 1 || p->dh < 1 || p->dw < 1 || p->ph < 0 || p->pw < 0 || p->G < 1) {
            fk_set_error(FK_ERR_PARAMS, "conv2d stride and dilation must be >= 1, padding >= 0, groups >= 1");
            return FK_ERR_PARAMS;
        }
    } else if (params != NULL && params->kind != FK_PARAMS_NONE) {
        fk_set_error(FK_ERR_PARAMS, "conv2d takes params.conv2d(stride, padding, dilation, groups) or none");
        return FK_ERR_PARAMS;
    }
    p->N = x->shape[0]; p->C = x->shape[1]; p->H = x->shape[2]; p->W = x->shape[3];
    p->O = w->shape[0]; p->Cg = w->shape[1]; p->KH = w->shape[2]; p->KW = w->shape[3];
    if (p->C % p->G || p->O % p->G || p->C / p->G != p->Cg) {
        fk_set_error(FK_ERR_SHAPE, "conv2d: input channels %lld and output channels %lld must be groups (%lld) times "
                     "the weight's in-channels %lld and a multiple of groups", (long long)p->C, (long long)p->O,
                     (long long)p->G, (long long)p->Cg);
        return FK_ERR_SHAPE;
    }
    p->Og = p->O / p->G;
    if (p->KH == 0 || p->KW == 0) {
        num_h = num_w = -1;
    } else {    /* padded extent and dilated kernel span, overflow-checked (extents reach 2**63 - 1) */
        if ((status = fk_size_add(p->H, 2 * p->ph, &num_h, "conv2d padded height")) ||
            (status = fk_size_add(p->W, 2 * p->pw, &num_w, "conv2d padded width")) ||
            (status = fk_size_mul(p->dh, p->KH - 1, &span_h, "conv2d dilated kernel height")) ||
            (status = fk_size_mul(p->dw, p->KW - 1, &span_w, "conv2d dilated kernel width")))
            return status;
        num_h = num_h - span_h - 1;    /* both >= 0: the difference cannot wrap */
        num_w = num_w - span_w - 1;
    }
    if (num_h < 0 || num_w < 0) {
        fk_set_error(FK_ERR_SHAPE, "conv2d: the %lldx%lld kernel (dilated) does not fit the padded %lldx%lld input",
                     (long long)p->KH, (long long)p->KW, (long long)p->H, (long long)p->W);
        return FK_ERR_SHAPE;
    }
    p->OH = num_h / p->sh + 1;
    p->OW = num_w / p->sw + 1;
    if (out->shape[0] != p->N || out->shape[1] != p->O || out->shape[2] != p->OH || out->shape[3] != p->OW) {
        fk_set_error(FK_ERR_SHAPE, "conv2d output must be (%lld, %lld, %lld, %lld)", (long long)p->N,
                     (long long)p->O, (long long)p->OH, (long long)p->OW);
        return FK_ERR_SHAPE;
    }
    if (has_bias && (layouts[2].ndim != 1 || layouts[2].shape[0] != p->O)) {
        fk_set_error(FK_ERR_SHAPE, "conv2d bias must be 1-d of extent %lld", (long long)p->O);
        return FK_ERR_SHAPE;
    }
    if ((status = fk_size_mul(p->Cg, p->KH, &p->K, "conv2d depth C/groups*KH*KW")) ||
        (status = fk_size_mul(p->K, p->KW, &p->K, "conv2d depth C/groups*KH*KW")) ||
        (status = fk_size_mul(p->OH, p->OW, &P, "conv2d output plane OH*OW")) ||
        (status = fk_size_mul(p->O, p->K, &wsize, "conv2d weight O*K")) ||
        (status = fk_size_mul(p->O, P, &osize, "conv2d output N*O*OH*OW")) ||
        (status = fk_size_mul(p->N, osize, &osize, "conv2d output N*O*OH*OW")))
        return status;              /* the runs compute OH*OW and O*K again, knowing they fit */
    for (int d = 0; d < 4; d++) {
        p->xs[d] = x->strides[d];
        p->ws[d] = w->strides[d];
        p->os[d] = out->strides[d];
        if (out->strides[d] == 0 && out->shape[d] > 1 && fk_layout_numel(out) > 0) {
            fk_set_error(FK_ERR_ALIAS, "conv2d output overlaps itself (stride 0 on axis %d)", d);
            return FK_ERR_ALIAS;
        }
    }
    p->x = fk_elem_ptr(&inputs[0], x->offset);
    p->w = fk_elem_ptr(&inputs[1], w->offset);
    p->has_bias = has_bias;
    if (has_bias) {
        p->b = fk_elem_ptr(&inputs[2], layouts[2].offset);
        p->bs = layouts[2].strides[0];
    }
    p->out = fk_elem_ptr(&outputs[0], out->offset);
    return FK_OK;
}

/* The output columns [ow0, ow0 + run) of one kernel tap whose input column lies inside [0, W):
 * iw = ow*sw + off.  Returns the valid sub-range [*lo, *hi) relative to ow0. */
static inline void fk_conv_valid(const fk_conv_plan *p, int64_t off, int64_t ow0, int64_t run,
                                 int64_t *lo, int64_t *hi) {
    int64_t first, last;                                                 /* valid ow range */
    if (p->sw == 1) {                    /* the common case, without the divisions */
        first = off >= 0 ? 0 : -off;
        last = p->W - 1 - off;
    } else {
        first = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;
        last = p->W - 1 - off >= 0 ? (p->W - 1 - off) / p->sw : -1;
    }
    int64_t a = first - ow0, b = last - ow0 + 1;
    a = a < 0 ? 0 : (a > run ? run : a);
    b = b < a ? a : (b > run ? run : b);
    *lo = a;
    *hi = b;
}

/* ---- im2col: pack image columns as GEMM B panels; the weight is the A matrix ---------------- */
typedef struct { const fk_conv_plan *p; const char *x_img; } fk_conv_cols;   /* x at (n, g*Cg) */

#define FK_DEFINE_CONV(NAME, CT, SUF, T)                                                          \
    FK_ISA_COMPUTE static void fk_conv_pack_b_##NAME(const void *ctx, int64_t p0, int64_t j0, int64_t kc, int64_t nc, void *dstv) { \
        const fk_conv_cols *cc = (const fk_conv_cols *)ctx;                                       \
        const fk_conv_plan *p = cc->p;                                                            \
        const int NR = FK_GEMM_NR_##SUF;                                                          \
        T *dst = (T *)dstv;                                                                       \
        /* decompose each depth index q = (c, kh, kw) once, not once per strip */                 \
        int64_t chan[FK_GEMM_KC_##SUF], row_off[FK_GEMM_KC_##SUF], col_off[FK_GEMM_KC_##SUF];     \
        for (int64_t pp = 0; pp < kc; pp++) {                                                     \
            int64_t q = p0 + pp, r = q % (p->KH * p->KW);                                         \
            chan[pp] = (q / (p->KH * p->KW)) * p->xs[1];                                          \
            row_off[pp] = (r / p->KW) * p->dh - p->ph;                                            \
            col_off[pp] = (r % p->KW) * p->dw - p->pw;                                            \
        }                                                                                         \
        for (int64_t s = 0; s < nc; s += NR, dst += kc * NR) {                                    \
            int64_t cols = nc - s < NR ? nc - s : NR, start = j0 + s;                             \
            int64_t oh0 = start / p->OW, ow0 = start % p->OW;                                     \
            for (int64_t pp = 0; pp < kc; pp++) {                                                 \
                int64_t off = col_off[pp];                                                        \
                const CT *xc = (const CT *)cc->x_img + chan[pp];                                  \
                T *d = dst + pp * NR;                                                             \
                int64_t oh = oh0, ow = ow0, j = 0;                                                \
                while (j < cols) {                                                                \
                    int64_t run = cols - j < p->OW - ow ? cols - j : p->OW - ow;                  \
                    int64_t ih = oh * p->sh + row_off[pp], lo = 0, hi = 0;                        \
                    if (ih >= 0 && ih < p->H) fk_conv_valid(p, off, ow, run, &lo, &hi);           \
                    for (int64_t t = 0; t < lo; t++) d[j + t] = (T)0;                             \
                    if (hi > lo) {                                                                \
                        const CT *xr = xc + ih * p->xs[2] + ((ow + lo) * p->sw + off) * p->xs[3]; \
                        int64_t step = p->sw * p->xs[3];                                          \
                        if (step == 1) for (int64_t t = lo; t < hi; t++) d[j + t] = (T)FK_LD_##NAME(xr[t - lo]); \
                        else for (int64_t t = lo; t < hi; t++) d[j + t] = (T)FK_LD_##NAME(xr[(t - lo) * step]); \
                    }                                                                             \
                    for (int64_t t = hi; t < run; t++) d[j + t] = (T)0;                           \
                    j += run;                                                                     \
                    ow += run;                                                                    \
                    if (ow == p->OW) { ow = 0; oh++; }                                            \
                }                                                                                 \
                for (int64_t t = cols; t < NR; t++) d[t] = (T)0;                                  \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    /* store rows [o0, o0+rows) of a (rows x OH*OW) compute buffer into out[n], adding bias */   \
    static void fk_conv_store_##NAME(const fk_conv_plan *p, int64_t n, int64_t o0, int64_t rows, \
                                     const T *buf, int64_t ldb) {                                 \
        for (int64_t o = 0; o < rows; o++) {                                                      \
            T bias = p->has_bias ? (T)FK_LD_##NAME(((const CT *)p->b)[(o0 + o) * p->bs]) : (T)0;  \
            CT *plane = (CT *)p->out + n * p->os[0] + (o0 + o) * p->os[1];                        \
            const T *src = buf + o * ldb;                                                         \
            for (int64_t oh = 0; oh < p->OH; oh++)                                                \
                for (int64_t ow = 0; ow < p->OW; ow++)                                            \
                    plane[oh * p->os[2] + ow * p->os[3]] = (CT)FK_ST_##NAME(src[oh * p->OW + ow] + bias); \
        }                                                                                         \
    }                                                                                             \
    static int fk_conv_im2col_run_##NAME(const fk_conv_plan *p) {                                 \
        int64_t P = p->OH * p->OW;                                                                \
        int direct = FK_##NAME == (sizeof(T) == 4 ? FK_F32 : FK_F64) && p->os[3] == 1 && p->os[2] == p->OW; \
        int64_t wm_elems, c_elems = 0, work_elems = (int64_t)fk_gemm_work_##SUF(p->Og, P, p->K), total; \
        size_t bytes;                                                                             \
        T *wm, *work, *cbuf;                                                                      \
        if (p->N == 0 || p->O == 0 || P == 0) return FK_OK;                                      \
        /* scratch: packed weight O*K, GEMM work, and an Og*P result block unless out is dense */ \
        if (fk_size_mul(p->O, p->K, &wm_elems, "conv2d packed weight") ||                         \
            (!direct && fk_size_mul(p->Og, P, &c_elems, "conv2d result block")) ||                \
            fk_size_add(wm_elems, work_elems, &total, "conv2d scratch") ||                        \
            fk_size_add(total, c_elems, &total, "conv2d scratch") ||                              \
            fk_size_add(total, 16, &total, "conv2d scratch") ||                                   \
            fk_size_bytes(total, (int64_t)sizeof(T), &bytes, "conv2d scratch"))                   \
            return FK_ERR_SHAPE;                                                                  \
        wm = (T *)fk_scratch_alloc(bytes);                                                        \
        if (wm == NULL) return FK_ERR_NO_MEMORY;                                                  \
        work = wm + (wm_elems + 15) / 16 * 16;                                                    \
        cbuf = work + work_elems;                                                                 \
        for (int64_t o = 0; o < p->O; o++)                                                        \
            for (int64_t c = 0; c < p->Cg; c++)                                                   \
                for (int64_t kh = 0; kh < p->KH; kh++)                                            \
                    for (int64_t kw = 0; kw < p->KW; kw++)                                        \
                        wm[o * p->K + (c * p->KH + kh) * p->KW + kw] = (T)FK_LD_##NAME(          \
                            ((const CT *)p->w)[o * p->ws[0] + c * p->ws[1] + kh * p->ws[2] + kw * p->ws[3]]); \
        for (int64_t n = 0; n < p->N; n++) {                                                      \
            for (int64_t g = 0; g < p->G; g++) {                                                  \
                fk_strided_matrix am = {(const char *)(wm + g * p->Og * p->K), p->K, 1};          \
                fk_conv_cols bm = {p, (const char *)((const CT *)p->x + n * p->xs[0] + g * p->Cg * p->xs[1])}; \
                if (direct) {                                                                     \
                    T *c0 = (T *)p->out + n * p->os[0] + g * p->Og * p->os[1];                    \
                    fk_gemm_##SUF(p->Og, P, p->K, fk_pack_a_##SUF##_##SUF##_SRC, &am,            \
                                  fk_conv_pack_b_##NAME, &bm, c0, p->os[1], work);                \
                    if (p->has_bias)                                                              \
                        for (int64_t o = 0; o < p->Og; o++) {                                     \
                            T bias = (T)FK_LD_##NAME(((const CT *)p->b)[(g * p->Og + o) * p->bs]); \
                            for (int64_t q = 0; q < P; q++) c0[o * p->os[1] + q] += bias;         \
                        }                                                                         \
                } else {                                                                          \
                    fk_gemm_##SUF(p->Og, P, p->K, fk_pack_a_##SUF##_##SUF##_SRC, &am,            \
                                  fk_conv_pack_b_##NAME, &bm, cbuf, P, work);                     \
                    fk_conv_store_##NAME(p, n, g * p->Og, p->Og, cbuf, P);                        \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
        free(wm);                                                                                 \
        return FK_OK;                                                                             \
    }                                                                                             \
    /* direct: one output plane at a time, a tap at a time, vectorized along ow */               \
    static int fk_conv_direct_run_##NAME(const fk_conv_plan *p) {                                 \
        int64_t P = p->OH * p->OW;                                                                \
        size_t bytes;                                                                             \
        T *acc;                                                                                   \
        if (p->N == 0 || p->O == 0 || P == 0) return FK_OK;                                      \
        if (fk_size_bytes(P, (int64_t)sizeof(T), &bytes, "conv2d accumulator")) return FK_ERR_SHAPE; \
        acc = (T *)fk_scratch_alloc(bytes);                                                       \
        if (acc == NULL) return FK_ERR_NO_MEMORY;                                                 \
        for (int64_t n = 0; n < p->N; n++) {                                                      \
            for (int64_t o = 0; o < p->O; o++) {                                                  \
                int64_t g = o / p->Og;                                                            \
                memset(acc, 0, (size_t)P * sizeof(T));                                            \
                for (int64_t c = 0; c < p->Cg; c++) {                                             \
                    const CT *xc = (const CT *)p->x + n * p->xs[0] + (g * p->Cg + c) * p->xs[1];  \
                    for (int64_t kh = 0; kh < p->KH; kh++) {                                      \
                        for (int64_t kw = 0; kw < p->KW; kw++) {                                  \
                            T wv = (T)FK_LD_##NAME(((const CT *)p->w)[o * p->ws[0] + c * p->ws[1] + \
                                                                      kh * p->ws[2] + kw * p->ws[3]]); \
                            int64_t off = kw * p->dw - p->pw, lo, hi, step = p->sw * p->xs[3];   \
                            /* a NaN or inf weight times a padded zero is NaN, as in im2col: only \
                             * then do the taps that meet padding change the sum */               \
                            T pad_term = wv * (T)0;                                               \
                            int pad_matters = pad_term != pad_term;                               \
                            fk_conv_valid(p, off, 0, p->OW, &lo, &hi);                            \
                            for (int64_t oh = 0; oh < p->OH; oh++) {                              \
                                int64_t ih = oh * p->sh - p->ph + kh * p->dh;                     \
                                const CT *xr;                                                     \
                                T *ar = acc + oh * p->OW;                                         \
                                if (ih < 0 || ih >= p->H || hi <= lo) {                           \
                                    if (pad_matters)                                              \
                                        for (int64_t t = 0; t < p->OW; t++) ar[t] += pad_term;    \
                                    continue;                                                     \
                                }                                                                 \
                                if (pad_matters) {                                                \
                                    for (int64_t t = 0; t < lo; t++) ar[t] += pad_term;           \
                                    for (int64_t t = hi; t < p->OW; t++) ar[t] += pad_term;       \
                                }                                                                 \
                                xr = xc + ih * p->xs[2] + (lo * p->sw + off) * p->xs[3];          \
                                if (step == 1) for (int64_t t = lo; t < hi; t++) ar[t] += wv * (T)FK_LD_##NAME(xr[t - lo]); \
                                else for (int64_t t = lo; t < hi; t++) ar[t] += wv * (T)FK_LD_##NAME(xr[(t - lo) * step]); \
                            }                                                                     \
                        }                                                                         \
                    }                                                                             \
                }                                                                                 \
                fk_conv_store_##NAME(p, n, o, 1, acc, P);                                         \
            }                                                                                     \
        }                                                                                         \
        free(acc);                                                                                \
        return FK_OK;                                                                             \
    }

/* the packed weight is already in the compute type: pack it with the same-type packer */
#define fk_pack_a_f32_f32_SRC fk_pack_a_f32_F32
#define fk_pack_a_f64_f64_SRC fk_pack_a_f64_F64
FK_DEFINE_CONV(F32, float, f32, float)
FK_DEFINE_CONV(F16, uint16_t, f32, float)
FK_DEFINE_CONV(BF16, uint16_t, f32, float)
FK_DEFINE_CONV(F64, double, f64, double)

/* ---- kernels: {im2col, direct} x {no bias, bias} x dtype -------------------------------------- */
#define FK_CONV_KERNEL(ALG, NAME, SUFFIX, HAS_BIAS)                                               \
    static int fk_conv2d_##ALG##_##NAME##SUFFIX(const fk_storage *inputs, int n_in, fk_storage *outputs, \
                                                int n_out, const fk_layout *layouts, const fk_params *params) { \
        fk_conv_plan plan;                                                                        \
        int status = fk_conv_prepare(inputs, n_in, outputs, n_out, layouts, params, FK_##NAME, HAS_BIAS, &plan); \
        if (status) return status;                                                                \
        return fk_conv_##ALG##_run_##NAME(&plan);                                                 \
    }
#define FK_CONV_KERNELS(NAME)                                                                     \
    FK_CONV_KERNEL(im2col, NAME, , 0) FK_CONV_KERNEL(im2col, NAME, _bias, 1)                      \
    FK_CONV_KERNEL(direct, NAME, , 0) FK_CONV_KERNEL(direct, NAME, _bias, 1)
FK_CONV_KERNELS(F32) FK_CONV_KERNELS(F16) FK_CONV_KERNELS(BF16) FK_CONV_KERNELS(F64)

/* ---- cost ------------------------------------------------------------------------------------ */
/* flops = 2 * N * O * OH * OW * K scaled by the kernel's measured time per flop relative to an
 * optimized GEMM (im2col 1.3x, direct 8x); im2col also moves the packed columns (written, then
 * read by the micro-kernel) and pays a per-(image, group) GEMM setup, direct pays neither, so a
 * single-channel 4x4 image goes direct (0.5 us vs 0.8 us measured) and 2x3x9x9 goes im2col. */
static fk_cost fk_conv_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                            const fk_params *params, int im2col) {
    fk_cost cost = {0.0, 0.0, 100.0};
    const fk_layout *x, *w, *out;
    double groups = 1.0, P, K, calls, isz;
    if (n_layouts < 3) return cost;
    x = &layouts[0];
    w = &layouts[1];
    out = &layouts[n_layouts - 1];
    if (x->ndim != 4 || w->ndim != 4 || out->ndim != 4) return cost;
    if (params && params->kind == FK_PARAMS_CONV2D && params->u.conv2d.groups > 0) groups = params->u.conv2d.groups;
    isz = fk_dtype_itemsize[dtypes->v[0]];
    P = (double)out->shape[2] * (double)out->shape[3];
    K = (double)w->shape[1] * (double)w->shape[2] * (double)w->shape[3];
    calls = (double)out->shape[0] * groups;
    cost.flops = 2.0 * (double)out->shape[0] * (double)out->shape[1] * P * K;
    for (int k = 0; k < n_layouts; k++) cost.bytes_moved += (double)fk_layout_numel(&layouts[k]) * fk_dtype_itemsize[dtypes->v[k]];
    if (im2col) {
        cost.flops *= 1.3;
        cost.bytes_moved += 2.0 * calls * K * P * (isz < 4 ? 4 : isz);
        cost.overhead_ns = 200.0 + 300.0 * calls;
    } else {
        cost.flops *= 8.0;
        cost.overhead_ns = 50.0;
    }
    return cost;
}
static fk_cost fk_conv_im2col_cost(const fk_layout *l, int n, const fk_dtypes *d, const fk_params *p) {
    return fk_conv_cost(l, n, d, p, 1);
}
static fk_cost fk_conv_direct_cost(const fk_layout *l, int n, const fk_dtypes *d, const fk_params *p) {
    return fk_conv_cost(l, n, d, p, 0);
}

/* ---- manifest ---------------------------------------------------------------------------------- */
/* Each output is a K = C/groups*KH*KW term dot product (plus bias) accumulated in the compute type:
 * |err| <= max_rel * (sum |x*w| + |b|) for K <= 4096, plus one rounding for F16/BF16. */
#define FK_P_CONV(REL) {1, 1, {0, 0}, 0, REL, 0.0, "|err| <= max_rel * (sum |x*w| + |b|) for K <= 4096"}
#define FK_P_CONV_F32 FK_P_CONV(2.5e-4)
#define FK_P_CONV_F64 FK_P_CONV(5.0e-13)
#define FK_P_CONV_F16 FK_P_CONV(1.5e-3)
#define FK_P_CONV_BF16 FK_P_CONV(8.0e-3)
#define FK_CONV_CAPS (FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT)
#define FK_CONV_ROW(ALG, NAME, SUFFIX, NOPS, DTS, REV)                                            \
    {FK_OP_CONV2D, {NOPS, DTS}, {fk_conv2d_##ALG##_##NAME##SUFFIX, FK_CONV_CAPS, 0, FK_P_CONV_##NAME, \
                                 fk_conv_##ALG##_cost, #ALG,                                      \
                                 0xc0220000000000ull | ((uint64_t)NOPS << 16) | ((uint64_t)FK_##NAME << 8) | (REV)}},
#define FK_C3(N) {FK_##N, FK_##N, FK_##N}
#define FK_C4(N) {FK_##N, FK_##N, FK_##N, FK_##N}
#define FK_CONV_ROWS(NAME)                                                                        \
    FK_CONV_ROW(im2col, NAME, , 3, FK_C3(NAME), 0x11) FK_CONV_ROW(direct, NAME, , 3, FK_C3(NAME), 0x21) \
    FK_CONV_ROW(im2col, NAME, _bias, 4, FK_C4(NAME), 0x11) FK_CONV_ROW(direct, NAME, _bias, 4, FK_C4(NAME), 0x21)

static const fk_manifest_row fk_conv_manifest[] = {
    FK_CONV_ROWS(F32) FK_CONV_ROWS(F64) FK_CONV_ROWS(F16) FK_CONV_ROWS(BF16)
};
static const int fk_conv_manifest_len = (int)(sizeof(fk_conv_manifest) / sizeof(fk_conv_manifest[0]));

#endif /* FUEL_KERNEL_CPU_CONV_KERNELS_H */
