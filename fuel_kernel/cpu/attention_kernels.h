/* CPU attention kernels: ROPE, FLASH_ATTN, PAGED_ATTN (float dtypes; F16/BF16 compute in F32).
 *
 * FLASH_ATTN is a blocked online softmax (FlashAttention-2 order): for each (batch, kv head) the
 * keys are packed once into 64-key panels (K transposed, V padded to whole vectors); for each query
 * head of the group and each block of 64 query rows it computes the 64x64 score tile with a
 * register-blocked micro-kernel, masks it, folds it into the running max / sum / output rows, and
 * moves on.  Only one score tile exists at a time, never the [Sq, Sk] matrix.  Key tiles wholly
 * outside the causal / window band are skipped.  The micro-kernels use GCC vector extensions and
 * target_clones, so a portable build runs AVX-512 or AVX2 code where the CPU has it.
 *
 * Operands (inputs, then the output) and params:
 *   ROPE        [x, cos, sin, out]  params.rope(interleaved) or none (half-split); x is
 *                                   [..., S, D] with D even, cos and sin are [S, D/2]:
 *                                   half-split pairs (x[i], x[i + D/2]), interleaved pairs
 *                                   (x[2i], x[2i+1]); out = (a c - b s, a s + b c); may run in place
 *   FLASH_ATTN  [q, k, v, out]      params.flash_attn: q [B, Hq, Sq, D], k [B, Hkv, Sk, D],
 *                                   v [B, Hkv, Sk, Dv], out [B, Hq, Sq, Dv]; Hq a multiple of Hkv
 *                                   (query head h reads kv head h / (Hq / Hkv)).  Query i sits at
 *                                   key position p = i + Sk - Sq (bottom-right aligned, as
 *                                   FlashAttention); key j is visible iff j <= p when causal,
 *                                   j >= p - window_left when window_left >= 0 and
 *                                   j <= p + window_right when window_right >= 0.  Scores are
 *                                   scale * q.k, then softcap * tanh(s / softcap) when softcap > 0.
 *                                   A row that sees no key is written as zeros.
 *   PAGED_ATTN  [q, k_cache, v_cache, block_table(i32), context_lens(i32), alibi_slopes(f32), out]
 *                                   params.paged_attn: q [N, Hq, D] (one decode query per
 *                                   sequence), k_cache [blocks, block_size, Hkv, D], v_cache
 *                                   [blocks, block_size, Hkv, Dv], block_table [N, max_blocks],
 *                                   context_lens [N], alibi_slopes [Hq] or [0] (none), out
 *                                   [N, Hq, Dv].  Sequence n's token t lives in block
 *                                   block_table[n, t / block_size], row t % block_size; its query
 *                                   sits at position context_lens[n] - 1 and sees tokens
 *                                   >= that - window_left (window_left >= 0).  The ALiBi bias is
 *                                   slope[h] * (t - (context_len - 1)).  Block indices and
 *                                   context lengths are bounds-checked before any write.
 * Every operand may be strided (packing walks the strides); out is written through its strides
 * but may not overlap itself (stride 0 on an axis of extent > 1: FK_ERR_ALIAS).  FLASH_ATTN and
 * PAGED_ATTN need their params (NULL is FK_ERR_PARAMS).  A window that reaches past every key
 * (up to 2**63-1) is the unbounded window.  Scratch sizes are overflow-checked: an impossible size
 * is FK_ERR_SHAPE before anything is allocated or written.
 */
#ifndef FUEL_KERNEL_CPU_ATTENTION_KERNELS_H
#define FUEL_KERNEL_CPU_ATTENTION_KERNELS_H

#include "compute_common.h"
#include "movement_common.h"

#define FK_ATTN_BQ 64      /* query rows per block */
#define FK_ATTN_BK 64      /* keys per panel */

static inline double fk_attn_load(const char *p, int dtype) {
    switch (dtype) {
    case FK_F16: return fk_f16_to_f32(*(const uint16_t *)p);
    case FK_BF16: return fk_bf16_to_f32(*(const uint16_t *)p);
    case FK_F32: return *(const float *)p;
    default: return *(const double *)p;
    }
}

/* v is float for the 16/32-bit dtypes, so F16/BF16 round once from F32. */
static inline void fk_attn_store(char *p, int dtype, double v) {
    switch (dtype) {
    case FK_F16: *(uint16_t *)p = fk_f32_to_f16((float)v); break;
    case FK_BF16: *(uint16_t *)p = fk_f32_to_bf16((float)v); break;
    case FK_F32: *(float *)p = (float)v; break;
    default: *(double *)p = v; break;
    }
}

static int fk_attn_float_dtypes(const fk_storage *inputs, int n_in, const fk_storage *outputs, int n_data) {
    int dt = inputs[0].dtype;
    if (dt != FK_F16 && dt != FK_BF16 && dt != FK_F32 && dt != FK_F64) {
        fk_set_error(FK_ERR_DTYPE, "input 0 has dtype %s; this kernel takes f16, bf16, f32 or f64", fk_dtype_short_name[dt]);
        return FK_ERR_DTYPE;
    }
    for (int k = 1; k < n_data; k++) {
        int status = fk_mv_want_dtype(inputs, n_in, outputs, k, dt);
        if (status) return status;
    }
    return fk_mv_want_dtype(inputs, n_in, outputs, n_in, dt);
}

static inline const char *fk_attn_at(const fk_storage *st, const fk_layout *l, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t off = l->offset + i0 * l->strides[0] + i1 * l->strides[1] + i2 * l->strides[2];
    if (l->ndim > 3) off += i3 * l->strides[3];
    return (const char *)st->data + off * fk_dtype_itemsize[st->dtype];
}

/* ---- fast exp for the softmax: |rel err| < 2e-7 on [-87, 0], exactly 0 below ----------------------- */
static inline float fk_attn_exp_f32(float x) {
    const float magic = 12582912.0f;                 /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.0f ? -87.0f : x;
    float n = (xc * 1.44269504088896341f + magic) - magic;
    float r = xc - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x < -87.0f ? 0.0f : p * scale;
}
static inline double fk_attn_exp_f64(double x) { return exp(x); }

/* ---- the typed core, instantiated for float (16 lanes x 4 rows) and double (8 lanes x 2 rows) ------- */
#define FK_ATTN_CORE(SUF, T, VL, R, EXPF, TANHF)                                                 \
    typedef T fk_attn_v_##SUF __attribute__((vector_size(VL * sizeof(T))));                      \
    enum { FK_ATTN_NV_##SUF = FK_ATTN_BK / VL };                                                 \
                                                                                                 \
    /* s[bq x BK] = q[bq x D] . kt[D x BK] */                                                    \
    __attribute__((target_clones("avx512f", "avx2", "default")))                                 \
    static void fk_attn_scores_##SUF(const T *q, int64_t D, const T *kt, T *s, int bq) {         \
        typedef fk_attn_v_##SUF V;                                                               \
        enum { NV = FK_ATTN_NV_##SUF };                                                          \
        int r0 = 0;                                                                              \
        for (; r0 + R <= bq; r0 += R) {                                                          \
            V acc[R][NV];                                                                        \
            for (int r = 0; r < R; r++) for (int v = 0; v < NV; v++) acc[r][v] = (V){0};         \
            for (int64_t d = 0; d < D; d++) {                                                    \
                const V *kv = (const V *)(kt + d * FK_ATTN_BK);                                  \
                for (int r = 0; r < R; r++) {                                                    \
                    V qb = (V){0} + q[(r0 + r) * D + d];                                         \
                    for (int v = 0; v < NV; v++) acc[r][v] += qb * kv[v];                        \
                }                                                                                \
            }                                                                                    \
            for (int r = 0; r < R; r++)                                                          \
                for (int v = 0; v < NV; v++) ((V *)(s + (r0 + r) * FK_ATTN_BK))[v] = acc[r][v];  \
        }                                                                                        \
        for (; r0 < bq; r0++) {                                                                  \
            V acc[NV];                                                                           \
            for (int v = 0; v < NV; v++) acc[v] = (V){0};                                        \
            for (int64_t d = 0; d < D; d++) {                                                    \
                const V *kv = (const V *)(kt + d * FK_ATTN_BK);                                  \
                V qb = (V){0} + q[r0 * D + d];                                                   \
                for (int v = 0; v < NV; v++) acc[v] += qb * kv[v];                               \
            }                                                                                    \
            for (int v = 0; v < NV; v++) ((V *)(s + r0 * FK_ATTN_BK))[v] = acc[v];               \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    /* o[bq x Dvp] += p[bq x BK (first bk used)] . vp[bk x Dvp], Dvp a multiple of VL */         \
    __attribute__((target_clones("avx512f", "avx2", "default")))                                 \
    static void fk_attn_pv_##SUF(const T *p, const T *vp, int64_t Dvp, T *o, int bq, int bk) {   \
        typedef fk_attn_v_##SUF V;                                                               \
        enum { CV = 4 };                                                                         \
        int64_t nvec = Dvp / VL;                                                                 \
        for (int64_t c0 = 0; c0 < nvec; c0 += CV) {                                              \
            int cv = nvec - c0 < CV ? (int)(nvec - c0) : CV;                                     \
            int r0 = 0;                                                                          \
            if (cv == CV) {                                                                      \
                for (; r0 + R <= bq; r0 += R) {                                                  \
                    V acc[R][CV];                                                                \
                    for (int r = 0; r < R; r++)                                                  \
                        for (int v = 0; v < CV; v++) acc[r][v] = ((V *)(o + (r0 + r) * Dvp))[c0 + v]; \
                    for (int j = 0; j < bk; j++) {                                               \
                        const V *vv = (const V *)(vp + j * Dvp) + c0;                            \
                        for (int r = 0; r < R; r++) {                                            \
                            V pb = (V){0} + p[(r0 + r) * FK_ATTN_BK + j];                        \
                            for (int v = 0; v < CV; v++) acc[r][v] += pb * vv[v];                \
                        }                                                                        \
                    }                                                                            \
                    for (int r = 0; r < R; r++)                                                  \
                        for (int v = 0; v < CV; v++) ((V *)(o + (r0 + r) * Dvp))[c0 + v] = acc[r][v]; \
                }                                                                                \
            }                                                                                    \
            for (; r0 < bq; r0++) {                                                              \
                V *orow = (V *)(o + r0 * Dvp) + c0;                                              \
                for (int j = 0; j < bk; j++) {                                                   \
                    const V *vv = (const V *)(vp + j * Dvp) + c0;                                \
                    V pb = (V){0} + p[r0 * FK_ATTN_BK + j];                                      \
                    for (int v = 0; v < cv; v++) orow[v] += pb * vv[v];                          \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    /* Mask row r of the tile to [lo, hi) (tile-relative), fold it into the running max m, sum l \
     * and output row, and leave the probabilities in s.  Fixed-width loops with VL partial     \
     * results vectorize without reassociating (the order is fixed, so results are bit-stable). */ \
    __attribute__((target_clones("avx512f", "avx2", "default")))                                 \
    static void fk_attn_softmax_row_##SUF(T *s, int lo, int hi, T *m, T *l, T *orow, int64_t Dvp, \
                                          T softcap) {                                           \
        T part[VL], mx, sum = 0, alpha;                                                          \
        if (hi <= lo) {                                                                          \
            for (int c = 0; c < FK_ATTN_BK; c++) s[c] = 0;                                       \
            return;                                                                              \
        }                                                                                        \
        if (softcap > 0) {                                                                       \
            T inv = 1 / softcap;                                                                 \
            for (int c = lo; c < hi; c++) s[c] = softcap * TANHF(s[c] * inv);                    \
        }                                                                                        \
        for (int c = 0; c < lo; c++) s[c] = -INFINITY;                                           \
        for (int c = hi; c < FK_ATTN_BK; c++) s[c] = -INFINITY;                                  \
        for (int k = 0; k < VL; k++) part[k] = -INFINITY;                                        \
        /* the max keeps a NaN score (s != s), so the row's softmax is NaN as NumPy's is */        \
        for (int c = 0; c < FK_ATTN_BK; c += VL)                                                 \
            for (int k = 0; k < VL; k++)                                                         \
                part[k] = s[c + k] > part[k] || s[c + k] != s[c + k] ? s[c + k] : part[k];       \
        mx = *m;                                                                                 \
        for (int k = 0; k < VL; k++) mx = part[k] > mx || part[k] != part[k] ? part[k] : mx;     \
        if (mx == -INFINITY) {         /* only -inf scores so far: nothing weighs anything yet */ \
            for (int c = 0; c < FK_ATTN_BK; c++) s[c] = 0;                                       \
            return;                                                                              \
        }                                                                                        \
        alpha = EXPF(*m - mx);                                                                   \
        for (int c = 0; c < FK_ATTN_BK; c++) s[c] = EXPF(s[c] - mx);                             \
        for (int k = 0; k < VL; k++) part[k] = 0;                                                \
        for (int c = 0; c < FK_ATTN_BK; c += VL)                                                 \
            for (int k = 0; k < VL; k++) part[k] += s[c + k];                                    \
        for (int k = 0; k < VL; k++) sum += part[k];                                             \
        if (alpha != 1) for (int64_t c = 0; c < Dvp; c++) orow[c] *= alpha;                      \
        *l = *l * alpha + sum;                                                                   \
        *m = mx;                                                                                 \
    }                                                                                            \
                                                                                                 \
    static int fk_flash_attn_##SUF(const fk_storage *inputs, fk_storage *outputs, const fk_layout *layouts, \
                                   const fk_fa_shape *sh, const fk_flash_attn_params *fa) {     \
        const fk_layout *lq = &layouts[0], *lk = &layouts[1], *lv = &layouts[2], *lo_ = &layouts[3]; \
        int64_t D = sh->d, Dvp, group = sh->hq / sh->hkv, off = sh->sk - sh->sq;                 \
        int dt = inputs[0].dtype, osize = fk_dtype_itemsize[dt];                                 \
        size_t bytes_k, bytes_v, bytes_q, bytes_o, total;                                        \
        size_t bytes_s = (size_t)(FK_ATTN_BQ * FK_ATTN_BK) * sizeof(T);                          \
        char *scratch = NULL;                                                                    \
        T *kt, *vp, *qp, *sp, *op, *mrow, *lrow;                                                 \
        T scale = (T)fa->scale, softcap = (T)fa->softcap;                                        \
        if (fk_flash_attn_scratch(sh, (int64_t)sizeof(T), VL, &Dvp, &bytes_k, &bytes_v, &bytes_q, &bytes_o, &total)) \
            return FK_ERR_SHAPE;                                                                 \
        if (posix_memalign((void **)&scratch, 64, total) != 0) {                                 \
            fk_set_error(FK_ERR_NO_MEMORY, "flash_attn could not allocate %zu bytes of scratch", total); \
            return FK_ERR_NO_MEMORY;                                                             \
        }                                                                                        \
        kt = (T *)scratch;                                                                       \
        vp = (T *)(scratch + ((bytes_k + 63) & ~(size_t)63));                                    \
        qp = (T *)((char *)vp + ((bytes_v + 63) & ~(size_t)63));                                 \
        sp = (T *)((char *)qp + ((bytes_q + 63) & ~(size_t)63));                                 \
        op = (T *)((char *)sp + ((bytes_s + 63) & ~(size_t)63));                                 \
        mrow = (T *)((char *)op + ((bytes_o + 63) & ~(size_t)63));                               \
        lrow = mrow + FK_ATTN_BQ;                                                                \
        for (int64_t b = 0; b < sh->b; b++)                                                      \
            for (int64_t hk = 0; hk < sh->hkv; hk++) {                                           \
                /* pack K^T panels and V rows (zero padding past Sk and Dv) */                    \
                memset(kt, 0, bytes_k);                                                          \
                memset(vp, 0, bytes_v);                                                          \
                for (int64_t j = 0; j < sh->sk; j++) {                                           \
                    T *kcol = kt + (j / FK_ATTN_BK) * D * FK_ATTN_BK + (j % FK_ATTN_BK);         \
                    const char *kr = fk_attn_at(&inputs[1], lk, b, hk, j, 0);                    \
                    const char *vr = fk_attn_at(&inputs[2], lv, b, hk, j, 0);                    \
                    int64_t ks = lk->strides[3] * osize, vs = lv->strides[3] * osize;            \
                    if (dt == FK_F32 && ks == 4) {                                               \
                        for (int64_t d = 0; d < D; d++) kcol[d * FK_ATTN_BK] = (T)((const float *)kr)[d]; \
                    } else {                                                                     \
                        for (int64_t d = 0; d < D; d++) kcol[d * FK_ATTN_BK] = (T)fk_attn_load(kr + d * ks, dt); \
                    }                                                                            \
                    if (dt == FK_F32 && vs == 4) {                                               \
                        for (int64_t c = 0; c < sh->dv; c++) vp[j * Dvp + c] = (T)((const float *)vr)[c]; \
                    } else {                                                                     \
                        for (int64_t c = 0; c < sh->dv; c++) vp[j * Dvp + c] = (T)fk_attn_load(vr + c * vs, dt); \
                    }                                                                            \
                }                                                                                \
                for (int64_t h = hk * group; h < (hk + 1) * group; h++)                          \
                    for (int64_t i0 = 0; i0 < sh->sq; i0 += FK_ATTN_BQ) {                        \
                        int bq = (int)(sh->sq - i0 < FK_ATTN_BQ ? sh->sq - i0 : FK_ATTN_BQ);     \
                        int64_t jlo = 0, jhi = sh->sk - 1;   /* keys any row of the block sees */ \
                        int64_t qs = lq->strides[3] * osize;                                     \
                        if (fa->window_left >= 0) jlo = i0 + off - fa->window_left;              \
                        if (fa->causal) jhi = i0 + bq - 1 + off;                                 \
                        if (fa->window_right >= 0 && i0 + bq - 1 + off + fa->window_right < jhi) \
                            jhi = i0 + bq - 1 + off + fa->window_right;                          \
                        if (jlo < 0) jlo = 0;                                                    \
                        if (jhi > sh->sk - 1) jhi = sh->sk - 1;                                  \
                        for (int r = 0; r < bq; r++) {                                           \
                            const char *qr = fk_attn_at(&inputs[0], lq, b, h, i0 + r, 0);        \
                            for (int64_t d = 0; d < D; d++) qp[r * D + d] = (T)fk_attn_load(qr + d * qs, dt) * scale; \
                            mrow[r] = -INFINITY;                                                 \
                            lrow[r] = 0;                                                         \
                        }                                                                        \
                        memset(op, 0, bytes_o);                                                  \
                        for (int64_t kb = jlo >= 0 ? jlo / FK_ATTN_BK : 0; jlo <= jhi && kb <= jhi / FK_ATTN_BK; kb++) { \
                            int64_t j0 = kb * FK_ATTN_BK;                                        \
                            int bk = (int)(sh->sk - j0 < FK_ATTN_BK ? sh->sk - j0 : FK_ATTN_BK);  \
                            fk_attn_scores_##SUF(qp, D, kt + kb * D * FK_ATTN_BK, sp, bq);       \
                            for (int r = 0; r < bq; r++) {                                       \
                                int64_t pos = i0 + r + off, lo = 0, hi = bk;                     \
                                if (fa->window_left >= 0 && pos - fa->window_left - j0 > lo) lo = pos - fa->window_left - j0; \
                                if (fa->causal && pos + 1 - j0 < hi) hi = pos + 1 - j0;          \
                                if (fa->window_right >= 0 && pos + fa->window_right + 1 - j0 < hi) hi = pos + fa->window_right + 1 - j0; \
                                if (hi < lo) hi = lo;                                            \
                                if (lo > bk) lo = hi = bk;                                       \
                                if (hi < 0) lo = hi = 0;                                         \
                                fk_attn_softmax_row_##SUF(sp + r * FK_ATTN_BK, (int)lo, (int)hi, &mrow[r], &lrow[r], \
                                                          op + r * Dvp, Dvp, softcap);           \
                            }                                                                    \
                            fk_attn_pv_##SUF(sp, vp + j0 * Dvp, Dvp, op, bq, bk);                \
                        }                                                                        \
                        for (int r = 0; r < bq; r++) {                                           \
                            char *orow = (char *)fk_attn_at(outputs, lo_, b, h, i0 + r, 0);      \
                            int64_t os = lo_->strides[3] * osize;                                \
                            T inv = lrow[r] > 0 ? 1 / lrow[r] : 0;                               \
                            for (int64_t c = 0; c < sh->dv; c++) fk_attn_store(orow + c * os, dt, op[r * Dvp + c] * inv); \
                        }                                                                        \
                    }                                                                            \
            }                                                                                    \
        free(scratch);                                                                           \
        return FK_OK;                                                                            \
    }

typedef struct { int64_t b, hq, hkv, sq, sk, d, dv; } fk_fa_shape;

/* FLASH_ATTN scratch, overflow-checked: K^T panels (nkb x D x BK), V rows (nkb x BK x Dvp, Dv
 * padded to whole vectors of vl), the query block (BQ x D), one score tile, the output block
 * (BQ x Dvp) and the running max / sum, each rounded up to 64 bytes.  FK_ERR_SHAPE (set) when a
 * size overflows. */
static int fk_flash_attn_scratch(const fk_fa_shape *sh, int64_t tsize, int64_t vl, int64_t *Dvp, size_t *bytes_k,
                                 size_t *bytes_v, size_t *bytes_q, size_t *bytes_o, size_t *total) {
    const char *what = "flash_attn scratch";
    int64_t nkb, dvp, n, sum;
    int status;
    if ((status = fk_size_add(sh->sk, FK_ATTN_BK - 1, &nkb, what)) ||
        (status = fk_size_add(sh->dv, vl - 1, &dvp, what)))
        return status;
    nkb /= FK_ATTN_BK;
    dvp = dvp / vl * vl;
    sum = FK_ATTN_BQ * FK_ATTN_BK * tsize + 2 * FK_ATTN_BQ * tsize + 6 * 64;     /* tile, max, sum, pads */
    if ((status = fk_size_mul(nkb, sh->d, &n, what)) || (status = fk_size_mul(n, FK_ATTN_BK * tsize, &n, what)) ||
        (status = fk_size_add(sum, n, &sum, what)))
        return status;
    *bytes_k = (size_t)n;
    if ((status = fk_size_mul(nkb, dvp, &n, what)) || (status = fk_size_mul(n, FK_ATTN_BK * tsize, &n, what)) ||
        (status = fk_size_add(sum, n, &sum, what)))
        return status;
    *bytes_v = (size_t)n;
    if ((status = fk_size_mul(sh->d ? sh->d : 1, FK_ATTN_BQ * tsize, &n, what)) || (status = fk_size_add(sum, n, &sum, what)))
        return status;
    *bytes_q = (size_t)n;
    if ((status = fk_size_mul(dvp, FK_ATTN_BQ * tsize, &n, what)) || (status = fk_size_add(sum, n, &sum, what)))
        return status;
    *bytes_o = (size_t)n;
    *total = (size_t)sum;
    *Dvp = dvp;
    return FK_OK;
}

FK_ATTN_CORE(f32, float, 16, 4, fk_attn_exp_f32, tanhf)
FK_ATTN_CORE(f64, double, 8, 2, fk_attn_exp_f64, tanh)

static int fk_flash_attn(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                         const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 3, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP);
    const fk_layout *q = &layouts[0], *k = &layouts[1], *v = &layouts[2], *o = &layouts[3];
    fk_fa_shape sh;
    fk_flash_attn_params fa;
    if (status || (status = fk_attn_float_dtypes(inputs, n_in, outputs, 3))) return status;
    if ((status = fk_mv_params_kind(params, FK_PARAMS_FLASH_ATTN, "flash_attn"))) return status;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || o->ndim != 4) {
        fk_set_error(FK_ERR_SHAPE, "flash_attn takes 4-d q, k, v and out ([batch, heads, seq, head_dim])");
        return FK_ERR_SHAPE;
    }
    sh.b = q->shape[0]; sh.hq = q->shape[1]; sh.sq = q->shape[2]; sh.d = q->shape[3];
    sh.hkv = k->shape[1]; sh.sk = k->shape[2]; sh.dv = v->shape[3];
    if (k->shape[0] != sh.b || v->shape[0] != sh.b || k->shape[3] != sh.d || v->shape[1] != sh.hkv ||
        v->shape[2] != sh.sk) {
        fk_set_error(FK_ERR_SHAPE, "flash_attn k [%lld, %lld, %lld, %lld] and v [%lld, %lld, %lld, %lld] do not fit q [%lld, %lld, %lld, %lld]",
                     (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2], (long long)k->shape[3],
                     (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2], (long long)v->shape[3],
                     (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2], (long long)q->shape[3]);
        return FK_ERR_SHAPE;
    }
    if (sh.hkv == 0 || sh.hq % sh.hkv != 0) {
        fk_set_error(FK_ERR_SHAPE, "flash_attn query heads %lld are not a multiple of kv heads %lld",
                     (long long)sh.hq, (long long)sh.hkv);
        return FK_ERR_SHAPE;
    }
    {
        int64_t want[4] = {sh.b, sh.hq, sh.sq, sh.dv};
        if ((status = fk_mv_out_shape(o, want, 4, "flash_attn"))) return status;
    }
    if ((status = fk_output_self_overlap_check(o, "flash_attn"))) return status;
    if (fk_layout_empty(o)) return FK_OK;
    /* A window reaching past every key is unbounded, so the band arithmetic stays far from int64's
     * limits: query positions p lie in [Sk - Sq, Sk - 1] and keys in [0, Sk - 1], so p - left <= 0
     * for every row once left >= Sk, and p + right >= Sk - 1 for every row once right >= Sq. */
    fa = params->u.flash_attn;
    if (fa.window_left >= sh.sk) fa.window_left = -1;
    if (fa.window_right >= sh.sq) fa.window_right = -1;
    if (inputs[0].dtype == FK_F64) return fk_flash_attn_f64(inputs, outputs, layouts, &sh, &fa);
    return fk_flash_attn_f32(inputs, outputs, layouts, &sh, &fa);
}

/* ---- ROPE ------------------------------------------------------------------------------------------ */
#define FK_ROPE_KERNEL(NAME, T, C, LOAD, STORE)                                                  \
    static void fk_rope_rows_##NAME(const fk_storage *inputs, fk_storage *outputs, const fk_layout *layouts, \
                                    int interleaved) {                                           \
        const fk_layout *x = &layouts[0], *lc = &layouts[1], *ls = &layouts[2], *o = &layouts[3]; \
        int nd = x->ndim, nb = nd - 2;                                                           \
        int64_t S = x->shape[nb], half = x->shape[nb + 1] / 2, batch = 1, index[FK_MAX_DIMS] = {0}; \
        int64_t xa = interleaved ? 2 * x->strides[nb + 1] : x->strides[nb + 1];                  \
        int64_t xb = interleaved ? x->strides[nb + 1] : half * x->strides[nb + 1];               \
        int64_t oa = interleaved ? 2 * o->strides[nb + 1] : o->strides[nb + 1];                  \
        int64_t ob = interleaved ? o->strides[nb + 1] : half * o->strides[nb + 1];               \
        const T *xd = (const T *)inputs[0].data, *cd = (const T *)inputs[1].data, *sd = (const T *)inputs[2].data; \
        T *od = (T *)outputs[0].data;                                                            \
        for (int d = 0; d < nb; d++) batch *= x->shape[d];                                       \
        for (int64_t bi = 0; bi < batch; bi++) {                                                 \
            int64_t xo = x->offset, oo = o->offset;                                              \
            for (int d = 0; d < nb; d++) { xo += index[d] * x->strides[d]; oo += index[d] * o->strides[d]; } \
            for (int64_t s = 0; s < S; s++) {                                                    \
                const T *xr = xd + xo + s * x->strides[nb];                                      \
                T *orow = od + oo + s * o->strides[nb];                                          \
                const T *cr = cd + lc->offset + s * lc->strides[0];                              \
                const T *sr = sd + ls->offset + s * ls->strides[0];                              \
                for (int64_t i = 0; i < half; i++) {                                             \
                    C a = LOAD(xr[i * xa]), b = LOAD(xr[i * xa + xb]);                           \
                    C c = LOAD(cr[i * lc->strides[1]]), sn = LOAD(sr[i * ls->strides[1]]);       \
                    C ra = a * c - b * sn, rb = a * sn + b * c;                                  \
                    orow[i * oa] = STORE(ra);                                                    \
                    orow[i * oa + ob] = STORE(rb);                                               \
                }                                                                                \
            }                                                                                    \
            for (int d = nb - 1; d >= 0; d--) {                                                  \
                if (++index[d] < x->shape[d]) break;                                             \
                index[d] = 0;                                                                    \
            }                                                                                    \
        }                                                                                        \
    }
#define FK_ID(v) (v)
FK_ROPE_KERNEL(F16, uint16_t, float, fk_f16_to_f32, fk_f32_to_f16)
FK_ROPE_KERNEL(BF16, uint16_t, float, fk_bf16_to_f32, fk_f32_to_bf16)
FK_ROPE_KERNEL(F32, float, float, FK_ID, FK_ID)
FK_ROPE_KERNEL(F64, double, double, FK_ID, FK_ID)

static int fk_rope(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                   const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 3, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP), interleaved = 0, nb;
    const fk_layout *x = &layouts[0];
    if (status || (status = fk_attn_float_dtypes(inputs, n_in, outputs, 3))) return status;
    if (params != NULL && params->kind == FK_PARAMS_ROPE) interleaved = params->u.rope.interleaved != 0;
    else if (params != NULL && params->kind != FK_PARAMS_NONE) {
        fk_set_error(FK_ERR_PARAMS, "rope takes fuel_kernel.params.rope(interleaved) or no params");
        return FK_ERR_PARAMS;
    }
    if ((status = fk_mv_same_shape(x, &layouts[3], "rope input", "output"))) return status;
    if (x->ndim < 2 || x->shape[x->ndim - 1] % 2) {
        fk_set_error(FK_ERR_SHAPE, "rope needs x of at least 2 dims [..., seq, head_dim] with an even head_dim");
        return FK_ERR_SHAPE;
    }
    nb = x->ndim - 2;
    for (int k = 1; k <= 2; k++)
        if (layouts[k].ndim != 2 || layouts[k].shape[0] != x->shape[nb] || layouts[k].shape[1] != x->shape[nb + 1] / 2) {
            fk_set_error(FK_ERR_SHAPE, "rope %s must be [seq, head_dim / 2] = [%lld, %lld]", k == 1 ? "cos" : "sin",
                         (long long)x->shape[nb], (long long)(x->shape[nb + 1] / 2));
            return FK_ERR_SHAPE;
        }
    if ((status = fk_output_self_overlap_check(&layouts[3], "rope"))) return status;
    if (fk_layout_empty(x)) return FK_OK;
    switch (inputs[0].dtype) {
    case FK_F16: fk_rope_rows_F16(inputs, outputs, layouts, interleaved); break;
    case FK_BF16: fk_rope_rows_BF16(inputs, outputs, layouts, interleaved); break;
    case FK_F32: fk_rope_rows_F32(inputs, outputs, layouts, interleaved); break;
    default: fk_rope_rows_F64(inputs, outputs, layouts, interleaved); break;
    }
    return FK_OK;
}

/* ---- PAGED_ATTN ------------------------------------------------------------------------------------- */
#define FK_PAGED_CORE(SUF, T, EXPF, TANHF)                                                       \
    static void fk_paged_attn_##SUF(const fk_storage *inputs, fk_storage *outputs, const fk_layout *layouts, \
                                    const fk_paged_attn_params *pa, T *qrow, T *acc, T *scores) { \
        const fk_layout *lq = &layouts[0], *lk = &layouts[1], *lv = &layouts[2], *lbt = &layouts[3]; \
        const fk_layout *lcl = &layouts[4], *lal = &layouts[5], *lo = &layouts[6];               \
        int dt = inputs[0].dtype, size = fk_dtype_itemsize[dt];                                  \
        int64_t N = lq->shape[0], hq = lq->shape[1], D = lq->shape[2], bs = lk->shape[1];        \
        int64_t hkv = lk->shape[2], dv = lv->shape[3], group = hq / hkv;                          \
        int has_alibi = lal->shape[0] > 0;                                                       \
        T scale = (T)pa->scale, softcap = (T)pa->softcap;                                        \
        for (int64_t n = 0; n < N; n++) {                                                        \
            int64_t ctx = *(const int32_t *)((const char *)inputs[4].data + (lcl->offset + n * lcl->strides[0]) * 4); \
            /* window_left < ctx: no overflow for any window up to 2**63-1 */                    \
            int64_t first = pa->window_left >= 0 && pa->window_left < ctx - 1 ? ctx - 1 - pa->window_left : 0; \
            for (int64_t h = 0; h < hq; h++) {                                                   \
                int64_t hk = h / group;                                                          \
                T m = -INFINITY, l = 0;                                                          \
                T slope = has_alibi ? (T)*(const float *)((const char *)inputs[5].data + (lal->offset + h * lal->strides[0]) * 4) : 0; \
                const char *qr = (const char *)inputs[0].data + (lq->offset + n * lq->strides[0] + h * lq->strides[1]) * size; \
                for (int64_t d = 0; d < D; d++) qrow[d] = (T)fk_attn_load(qr + d * lq->strides[2] * size, dt) * scale; \
                for (int64_t c = 0; c < dv; c++) acc[c] = 0;                                     \
                for (int64_t t0 = first - first % bs; t0 < ctx; t0 += bs) {                      \
                    int64_t blk = *(const int32_t *)((const char *)inputs[3].data +              \
                                  (lbt->offset + n * lbt->strides[0] + (t0 / bs) * lbt->strides[1]) * 4); \
                    int64_t lo_t = t0 < first ? first : t0, hi_t = t0 + bs < ctx ? t0 + bs : ctx; \
                    T mx = m, alpha, sum = 0;                                                    \
                    for (int64_t t = lo_t; t < hi_t; t++) {                                      \
                        const char *kr = (const char *)inputs[1].data + (lk->offset + blk * lk->strides[0] + \
                                         (t - t0) * lk->strides[1] + hk * lk->strides[2]) * size; \
                        T s = 0;                                                                 \
                        for (int64_t d = 0; d < D; d++) s += qrow[d] * (T)fk_attn_load(kr + d * lk->strides[3] * size, dt); \
                        if (softcap > 0) s = softcap * TANHF(s / softcap);                       \
                        s += slope * (T)(t - (ctx - 1));                                         \
                        scores[t - t0] = s;                                                      \
                        mx = s > mx || s != s ? s : mx;    /* a NaN score makes the row NaN */   \
                    }                                                                            \
                    if (mx == -INFINITY) continue;     /* only -inf scores so far: weightless */ \
                    alpha = EXPF(m - mx);                                                        \
                    for (int64_t c = 0; c < dv; c++) acc[c] *= alpha;                            \
                    for (int64_t t = lo_t; t < hi_t; t++) {                                      \
                        const char *vr = (const char *)inputs[2].data + (lv->offset + blk * lv->strides[0] + \
                                         (t - t0) * lv->strides[1] + hk * lv->strides[2]) * size; \
                        T p = EXPF(scores[t - t0] - mx);                                         \
                        sum += p;                                                                \
                        for (int64_t c = 0; c < dv; c++) acc[c] += p * (T)fk_attn_load(vr + c * lv->strides[3] * size, dt); \
                    }                                                                            \
                    l = l * alpha + sum;                                                         \
                    m = mx;                                                                      \
                }                                                                                \
                {                                                                                \
                    char *orow = (char *)outputs[0].data + (lo->offset + n * lo->strides[0] + h * lo->strides[1]) * size; \
                    T inv = l > 0 ? 1 / l : 0;                                                   \
                    for (int64_t c = 0; c < dv; c++) fk_attn_store(orow + c * lo->strides[2] * size, dt, acc[c] * inv); \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }
FK_PAGED_CORE(f32, float, fk_attn_exp_f32, tanhf)
FK_PAGED_CORE(f64, double, fk_attn_exp_f64, tanh)

static int fk_paged_attn(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                         const fk_layout *layouts, const fk_params *params) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 6, NULL,
                               FK_CHECK_LAYOUTS | FK_CHECK_WRITABLE | FK_CHECK_SELF_OVERLAP);
    const fk_layout *q = &layouts[0], *k = &layouts[1], *v = &layouts[2], *bt = &layouts[3];
    const fk_layout *cl = &layouts[4], *al = &layouts[5];
    int64_t N, hq, D, nblocks, bs, hkv, dv, maxb, max_ctx, n_scratch = 0;
    size_t bytes;
    char *scratch;
    if (status) return status;
    {   /* dtypes: [T, T, T, i32, i32, f32, T] */
        int dt = inputs[0].dtype;
        if (dt != FK_F16 && dt != FK_BF16 && dt != FK_F32 && dt != FK_F64) {
            fk_set_error(FK_ERR_DTYPE, "input 0 has dtype %s; paged_attn takes f16, bf16, f32 or f64", fk_dtype_short_name[dt]);
            return FK_ERR_DTYPE;
        }
        if ((status = fk_mv_want_dtype(inputs, n_in, outputs, 1, dt)) || (status = fk_mv_want_dtype(inputs, n_in, outputs, 2, dt)) ||
            (status = fk_mv_want_dtype(inputs, n_in, outputs, 3, FK_I32)) || (status = fk_mv_want_dtype(inputs, n_in, outputs, 4, FK_I32)) ||
            (status = fk_mv_want_dtype(inputs, n_in, outputs, 5, FK_F32)) || (status = fk_mv_want_dtype(inputs, n_in, outputs, 6, dt)))
            return status;
    }
    if ((status = fk_mv_params_kind(params, FK_PARAMS_PAGED_ATTN, "paged_attn"))) return status;
    if (q->ndim != 3 || k->ndim != 4 || v->ndim != 4 || bt->ndim != 2 || cl->ndim != 1 || al->ndim != 1) {
        fk_set_error(FK_ERR_SHAPE, "paged_attn takes q [N, Hq, D], k/v caches [blocks, block_size, Hkv, D], "
                     "block_table [N, max_blocks], context_lens [N], alibi_slopes [Hq] or [0]");
        return FK_ERR_SHAPE;
    }
    N = q->shape[0]; hq = q->shape[1]; D = q->shape[2];
    nblocks = k->shape[0]; bs = k->shape[1]; hkv = k->shape[2]; dv = v->shape[3]; maxb = bt->shape[1];
    if (k->shape[3] != D || v->shape[0] != nblocks || v->shape[1] != bs || v->shape[2] != hkv ||
        bt->shape[0] != N || cl->shape[0] != N || (al->shape[0] != hq && al->shape[0] != 0) ||
        hkv == 0 || hq % hkv != 0) {
        fk_set_error(FK_ERR_SHAPE, "paged_attn operand shapes do not fit q [%lld, %lld, %lld] (k/v caches, block "
                     "table, context lengths, alibi slopes, or query heads not a multiple of kv heads)",
                     (long long)N, (long long)hq, (long long)D);
        return FK_ERR_SHAPE;
    }
    if (bs != params->u.paged_attn.block_size) {
        fk_set_error(FK_ERR_PARAMS, "paged_attn block_size %d does not match the caches' %lld",
                     (int)params->u.paged_attn.block_size, (long long)bs);
        return FK_ERR_PARAMS;
    }
    {
        int64_t want[3] = {N, hq, dv};
        if ((status = fk_mv_out_shape(&layouts[6], want, 3, "paged_attn"))) return status;
    }
    if ((status = fk_output_self_overlap_check(&layouts[6], "paged_attn"))) return status;
    /* the longest context the block table can hold; saturates (a context length is an i32) */
    if (__builtin_mul_overflow(maxb, bs, &max_ctx)) max_ctx = INT64_MAX;
    /* every context length and every block index it reaches, before any write */
    for (int64_t n = 0; n < N; n++) {
        int64_t ctx = *(const int32_t *)((const char *)inputs[4].data + (cl->offset + n * cl->strides[0]) * 4);
        if (ctx < 0 || ctx > max_ctx) {
            fk_set_error(FK_ERR_INDEX, "paged_attn: context length %lld at position (%lld,) is outside [0, %lld] "
                         "(max_blocks %lld x block_size %lld)", (long long)ctx, (long long)n, (long long)max_ctx,
                         (long long)maxb, (long long)bs);
            return FK_ERR_INDEX;
        }
        for (int64_t j = 0; j * bs < ctx; j++) {
            int64_t blk = *(const int32_t *)((const char *)inputs[3].data + (bt->offset + n * bt->strides[0] + j * bt->strides[1]) * 4);
            if (blk < 0 || blk >= nblocks) {
                fk_set_error(FK_ERR_INDEX, "paged_attn: block index %lld at position (%lld, %lld) of the block table is "
                             "out of range for %lld cache blocks", (long long)blk, (long long)n, (long long)j, (long long)nblocks);
                return FK_ERR_INDEX;
            }
        }
    }
    if (fk_layout_empty(&layouts[6])) return FK_OK;
    /* the scaled query row (D), the output accumulator (dv) and one block's scores (bs) */
    if ((status = fk_size_add(D, dv, &n_scratch, "paged_attn scratch")) ||
        (status = fk_size_add(n_scratch, bs, &n_scratch, "paged_attn scratch")) ||
        (status = fk_size_add(n_scratch, 3, &n_scratch, "paged_attn scratch")) ||
        (status = fk_size_bytes(n_scratch, (int64_t)sizeof(double), &bytes, "paged_attn scratch")))
        return status;
    scratch = (char *)malloc(bytes);
    if (scratch == NULL) {
        fk_set_error(FK_ERR_NO_MEMORY, "paged_attn could not allocate %zu bytes of scratch", bytes);
        return FK_ERR_NO_MEMORY;
    }
    if (inputs[0].dtype == FK_F64)
        fk_paged_attn_f64(inputs, outputs, layouts, &params->u.paged_attn, (double *)scratch, (double *)scratch + D,
                          (double *)scratch + D + dv);
    else
        fk_paged_attn_f32(inputs, outputs, layouts, &params->u.paged_attn, (float *)scratch, (float *)scratch + D,
                          (float *)scratch + D + dv);
    free(scratch);
    return FK_OK;
}

/* ---- cost -------------------------------------------------------------------------------------------- */
static fk_cost fk_flash_attn_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                  const fk_params *params) {
    fk_cost cost = fk_mv_copy_cost(layouts, n_layouts, dtypes, params);
    if (n_layouts >= 4 && layouts[0].ndim == 4 && layouts[1].ndim == 4 && layouts[2].ndim == 4) {
        double pairs = (double)layouts[0].shape[0] * layouts[0].shape[1] * layouts[0].shape[2] * layouts[1].shape[2];
        if (params != NULL && params->kind == FK_PARAMS_FLASH_ATTN && params->u.flash_attn.causal) pairs *= 0.5;
        cost.flops = pairs * (2.0 * layouts[0].shape[3] + 2.0 * layouts[2].shape[3] + 4.0);
    }
    cost.overhead_ns = 500.0;
    return cost;
}

static fk_cost fk_paged_attn_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                  const fk_params *params) {
    fk_cost cost = {0.0, 0.0, 500.0};
    (void)params;
    if (n_layouts >= 7 && layouts[0].ndim == 3 && layouts[3].ndim == 2 && layouts[1].ndim == 4) {
        /* upper bound: every sequence uses its whole block table */
        double tokens = (double)layouts[3].shape[0] * layouts[3].shape[1] * layouts[1].shape[1];
        double heads = (double)layouts[0].shape[1], d = (double)layouts[0].shape[2];
        cost.flops = tokens * heads * (4.0 * d + 4.0);
        cost.bytes_moved = tokens * layouts[1].shape[2] * 2.0 * d * fk_dtype_itemsize[dtypes->v[0]]
                         + (double)fk_layout_numel(&layouts[0]) * 2.0 * fk_dtype_itemsize[dtypes->v[0]];
    }
    return cost;
}

static fk_cost fk_rope_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes, const fk_params *params) {
    fk_cost cost = fk_mv_copy_cost(layouts, n_layouts, dtypes, params);
    if (n_layouts > 0) cost.flops = 3.0 * (double)fk_layout_numel(&layouts[0]);
    return cost;
}

/* ---- manifest -------------------------------------------------------------------------------------- */
#define FK_ATTN_CAPS (FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT)
#define FK_ATTN_REV(OP, D) (0x6174000000000000ull | ((uint64_t)(OP) << 8) | (uint64_t)(D))
/* tolerances are relative to max|v| over the attended rows (the output's scale) */
#define FK_FA_PREC_F32 {1, 1, {0, 0}, 0, 0.0, 2e-5, "abs err <= 2e-5 * max|v| (f32 math, fast exp); blocked order is fixed"}
#define FK_FA_PREC_F64 {1, 1, {0, 0}, 0, 0.0, 1e-12, "abs err <= 1e-12 * max|v| (f64 math, libm exp)"}
#define FK_FA_PREC_F16 {1, 1, {0, 0}, 0, 0.0, 2e-3, "f32 math, one f16 rounding: abs err <= 2e-3 * max|v|"}
#define FK_FA_PREC_BF16 {1, 1, {0, 0}, 0, 0.0, 1.6e-2, "f32 math, one bf16 rounding: abs err <= 1.6e-2 * max|v|"}
#define FK_ROPE_PREC {1, 1, {0, 0}, 1, 0.0, 0.0, "F32 math (F64 for f64), FMA may fuse: err <= 1 ulp of |a c|+|b s| plus one rounding"}

#define FK_ATTN_ROWS(D)                                                                          \
    {FK_OP_ROPE, {4, {FK_##D, FK_##D, FK_##D, FK_##D}},                                          \
     {fk_rope, FK_ATTN_CAPS | FK_CAP_INPLACE, 0, FK_ROPE_PREC, fk_rope_cost, "native", FK_ATTN_REV(FK_OP_ROPE, FK_##D)}}, \
    {FK_OP_FLASH_ATTN, {4, {FK_##D, FK_##D, FK_##D, FK_##D}},                                    \
     {fk_flash_attn, FK_ATTN_CAPS, 0, FK_FA_PREC_##D, fk_flash_attn_cost, "native", FK_ATTN_REV(FK_OP_FLASH_ATTN, FK_##D)}}, \
    {FK_OP_PAGED_ATTN, {7, {FK_##D, FK_##D, FK_##D, FK_I32, FK_I32, FK_F32, FK_##D}},            \
     {fk_paged_attn, FK_ATTN_CAPS, 0, FK_FA_PREC_##D, fk_paged_attn_cost, "native", FK_ATTN_REV(FK_OP_PAGED_ATTN, FK_##D)}},

static const fk_manifest_row fk_attention_manifest[] = {
    FK_ATTN_ROWS(F16) FK_ATTN_ROWS(BF16) FK_ATTN_ROWS(F32) FK_ATTN_ROWS(F64)
};
static const int fk_attention_manifest_len = (int)(sizeof(fk_attention_manifest) / sizeof(fk_attention_manifest[0]));

#endif /* FUEL_KERNEL_CPU_ATTENTION_KERNELS_H */
