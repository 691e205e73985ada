/* The native GEMM engine behind MATMUL and the im2col CONV2D sibling: C = A * B in F32 or F64.
 *
 * GotoBLAS/BLIS structure: B is packed per (KC x NC) panel into NR-column strips, A per (MC x KC)
 * block into MR-row strips (both zero-padded to full strips), and a register-blocked MR x NR
 * micro-kernel written with GCC vector extensions runs over the strips.  The caller supplies the
 * packing functions, so any source layout or dtype (strided, transposed, F16/BF16 converted to
 * F32, an image read as im2col columns) is packed once without a separate copy.  C is row-major
 * with unit column stride and row stride ldc, and is overwritten (beta = 0).  Scratch comes from
 * the caller (fk_gemm_work_*), allocated before anything is written.  Single-threaded.
 */
#ifndef FUEL_KERNEL_CPU_GEMM_CORE_H
#define FUEL_KERNEL_CPU_GEMM_CORE_H

#include "compute_common.h"

/* Pack rows [i0, i0+mc) x cols [p0, p0+kc) of A into strips: dst[s*kc*MR + p*MR + i]. */
typedef void (*fk_pack_a_fn)(const void *ctx, int64_t i0, int64_t p0, int64_t mc, int64_t kc, void *dst);
/* Pack rows [p0, p0+kc) x cols [j0, j0+nc) of B into strips: dst[s*kc*NR + p*NR + j]. */
typedef void (*fk_pack_b_fn)(const void *ctx, int64_t p0, int64_t j0, int64_t kc, int64_t nc, void *dst);

#define FK_PRAGMA(x) _Pragma(#x)

#define FK_DEFINE_GEMM(SUF, T, VL, MR, NR, KC, MC, NC)                                            \
    enum { FK_GEMM_MR_##SUF = MR, FK_GEMM_NR_##SUF = NR, FK_GEMM_KC_##SUF = KC,                   \
           FK_GEMM_MC_##SUF = MC, FK_GEMM_NC_##SUF = NC };                                        \
    typedef T fk_gv_##SUF __attribute__((vector_size(VL * sizeof(T))));                           \
    typedef T fk_gvu_##SUF __attribute__((vector_size(VL * sizeof(T)), aligned(sizeof(T))));      \
    FK_ISA_COMPUTE static void fk_gemm_micro_##SUF(int64_t kc, const T *restrict a, const T *restrict b, \
                                              T *restrict c, int64_t ldc, int accumulate) {       \
        fk_gv_##SUF r[MR][NR / VL];                                                               \
        FK_PRAGMA(GCC unroll 32)                                                                  \
        for (int i = 0; i < MR; i++)                                                              \
            FK_PRAGMA(GCC unroll 8)                                                               \
            for (int v = 0; v < NR / VL; v++) r[i][v] = (fk_gv_##SUF){0};                         \
        for (int64_t p = 0; p < kc; p++) {                                                        \
            fk_gv_##SUF bv[NR / VL];                                                              \
            FK_PRAGMA(GCC unroll 8)                                                               \
            for (int v = 0; v < NR / VL; v++) bv[v] = *(const fk_gvu_##SUF *)(b + p * NR + v * VL); \
            FK_PRAGMA(GCC unroll 32)                                                              \
            for (int i = 0; i < MR; i++) {                                                        \
                T av = a[p * MR + i];                                                             \
                FK_PRAGMA(GCC unroll 8)                                                           \
                for (int v = 0; v < NR / VL; v++) r[i][v] += av * bv[v];                          \
            }                                                                                     \
        }                                                                                         \
        FK_PRAGMA(GCC unroll 32)                                                                  \
        for (int i = 0; i < MR; i++)                                                              \
            FK_PRAGMA(GCC unroll 8)                                                               \
            for (int v = 0; v < NR / VL; v++) {                                                   \
                fk_gvu_##SUF *dst = (fk_gvu_##SUF *)(c + i * ldc + v * VL);                       \
                if (accumulate) *dst += r[i][v]; else *dst = r[i][v];                             \
            }                                                                                     \
    }                                                                                             \
    /* elements of scratch fk_gemm_##SUF needs for these extents */                               \
    static inline size_t fk_gemm_work_##SUF(int64_t M, int64_t N, int64_t K) {                    \
        int64_t mc = M < MC ? M : MC, nc = N < NC ? N : NC, kc = K < KC ? K : KC;                 \
        mc = (mc + MR - 1) / MR * MR;                                                             \
        nc = (nc + NR - 1) / NR * NR;                                                             \
        return (size_t)((mc * kc + 15) / 16 * 16 + kc * nc + MR * NR + 64);                       \
    }                                                                                             \
    static void fk_gemm_##SUF(int64_t M, int64_t N, int64_t K, fk_pack_a_fn pack_a, const void *actx, \
                              fk_pack_b_fn pack_b, const void *bctx, T *C, int64_t ldc, T *work) { \
        int64_t mcap = ((M < MC ? M : MC) + MR - 1) / MR * MR, kcap = K < KC ? K : KC;            \
        T *Ap = work, *Bp = work + (mcap * kcap + 15) / 16 * 16, *tile;                           \
        int64_t ncap = ((N < NC ? N : NC) + NR - 1) / NR * NR;                                    \
        tile = Bp + kcap * ncap;                                                                  \
        tile = (T *)(((uintptr_t)tile + 63) & ~(uintptr_t)63);                                    \
        /* equal K blocks: a short remainder block would pay a full C-tile update for little work */ \
        int64_t kstep = (K + (K + KC - 1) / KC - 1) / ((K + KC - 1) / KC > 0 ? (K + KC - 1) / KC : 1); \
        if (M <= 0 || N <= 0) return;                                                             \
        if (K == 0) {                                                                             \
            for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(T));        \
            return;                                                                               \
        }                                                                                         \
        for (int64_t jc = 0; jc < N; jc += NC) {                                                  \
            int64_t nc = N - jc < NC ? N - jc : NC;                                               \
            for (int64_t pc = 0; pc < K; pc += kstep) {                                           \
                int64_t kc = K - pc < kstep ? K - pc : kstep;                                     \
                pack_b(bctx, pc, jc, kc, nc, Bp);                                                 \
                for (int64_t ic = 0; ic < M; ic += MC) {                                          \
                    int64_t mc = M - ic < MC ? M - ic : MC;                                       \
                    pack_a(actx, ic, pc, mc, kc, Ap);                                             \
                    for (int64_t jr = 0; jr < nc; jr += NR) {                                     \
                        int64_t nr = nc - jr < NR ? nc - jr : NR;                                 \
                        for (int64_t ir = 0; ir < mc; ir += MR) {                                 \
                            int64_t mr = mc - ir < MR ? mc - ir : MR;                             \
                            T *cdst = C + (ic + ir) * ldc + jc + jr;                              \
                            if (mr == MR && nr == NR) {                                           \
                                fk_gemm_micro_##SUF(kc, Ap + ir * kc, Bp + jr * kc, cdst, ldc, pc > 0); \
                            } else {                                                              \
                                fk_gemm_micro_##SUF(kc, Ap + ir * kc, Bp + jr * kc, tile, NR, 0); \
                                for (int64_t i = 0; i < mr; i++)                                  \
                                    for (int64_t j = 0; j < nr; j++)                              \
                                        cdst[i * ldc + j] = (pc > 0 ? cdst[i * ldc + j] : (T)0) + tile[i * NR + j]; \
                            }                                                                     \
                        }                                                                         \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }

FK_DEFINE_GEMM(f32, float, 16, 8, 32, 256, 128, 1024)
FK_DEFINE_GEMM(f64, double, 8, 8, 16, 256, 64, 512)

/* ---- packing from a strided matrix of any float dtype -------------------------------------- */
typedef struct { const char *base; int64_t rs, cs; } fk_strided_matrix;   /* strides in elements */

#define FK_DEFINE_PACK(SUF, T, NAME, CT)                                                          \
    FK_ISA_COMPUTE static void fk_pack_a_##SUF##_##NAME(const void *ctx, int64_t i0, int64_t p0, int64_t mc, int64_t kc, void *dstv) { \
        const fk_strided_matrix *m = (const fk_strided_matrix *)ctx;                              \
        const CT *src = (const CT *)m->base;                                                      \
        T *dst = (T *)dstv;                                                                       \
        const int MR = FK_GEMM_MR_##SUF;                                                          \
        for (int64_t s = 0; s < mc; s += MR, dst += kc * MR) {                                    \
            int64_t rows = mc - s < MR ? mc - s : MR;                                             \
            for (int64_t i = 0; i < rows; i++) {                                                  \
                const CT *row = src + (i0 + s + i) * m->rs + p0 * m->cs;                          \
                if (m->cs == 1) for (int64_t p = 0; p < kc; p++) dst[p * MR + i] = (T)FK_LD_##NAME(row[p]); \
                else for (int64_t p = 0; p < kc; p++) dst[p * MR + i] = (T)FK_LD_##NAME(row[p * m->cs]); \
            }                                                                                     \
            for (int64_t i = rows; i < MR; i++)                                                   \
                for (int64_t p = 0; p < kc; p++) dst[p * MR + i] = (T)0;                          \
        }                                                                                         \
    }                                                                                             \
    FK_ISA_COMPUTE static void fk_pack_b_##SUF##_##NAME(const void *ctx, int64_t p0, int64_t j0, int64_t kc, int64_t nc, void *dstv) { \
        const fk_strided_matrix *m = (const fk_strided_matrix *)ctx;                              \
        const CT *src = (const CT *)m->base;                                                      \
        T *dst = (T *)dstv;                                                                       \
        const int NR = FK_GEMM_NR_##SUF;                                                          \
        for (int64_t s = 0; s < nc; s += NR, dst += kc * NR) {                                    \
            int64_t cols = nc - s < NR ? nc - s : NR;                                             \
            for (int64_t p = 0; p < kc; p++) {                                                    \
                const CT *row = src + (p0 + p) * m->rs + (j0 + s) * m->cs;                        \
                T *d = dst + p * NR;                                                              \
                if (m->cs == 1) for (int64_t j = 0; j < cols; j++) d[j] = (T)FK_LD_##NAME(row[j]); \
                else for (int64_t j = 0; j < cols; j++) d[j] = (T)FK_LD_##NAME(row[j * m->cs]);   \
                for (int64_t j = cols; j < NR; j++) d[j] = (T)0;                                  \
            }                                                                                     \
        }                                                                                         \
    }

FK_DEFINE_PACK(f32, float, F32, float)
FK_DEFINE_PACK(f32, float, F16, uint16_t)
FK_DEFINE_PACK(f32, float, BF16, uint16_t)
FK_DEFINE_PACK(f64, double, F64, double)

#endif /* FUEL_KERNEL_CPU_GEMM_CORE_H */
