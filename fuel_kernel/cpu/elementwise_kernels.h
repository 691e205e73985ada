/* Shared machinery of the CPU elementwise kernels (_binary, _compare, _unary): the hot-loop
 * builders on the ISA dispatch scheme of compute_common.h, vectorized F16/BF16 row conversions,
 * the validation prologue, pre-write scans, cost functions and precision-claim macros (the F32
 * math functions are in vecmath_f32.h).
 *
 * Execution model.  A kernel validates its operands (count, backend, dtype, params kind), plans the
 * loop with fk_loop_plan (bounds, broadcast, axis collapsing), runs any data-dependent check that
 * could fail (integer division by zero, negative integer exponents) and only then walks the rows
 * with fk_loop_run, so a failing call never writes to its output.  A row function takes the
 * vectorized `fk_vec_*` path when every operand is contiguous or a broadcast scalar, and a plain
 * strided loop otherwise.  F16 and BF16 rows are converted in chunks of FK_CHUNK elements into F32
 * stack buffers, computed with the F32 vector function and rounded once on the way back.
 *
 * Included once per kernel module (one translation unit each; see abi.h on the API pointer).
 */
#ifndef FUEL_KERNEL_CPU_ELEMENTWISE_KERNELS_H
#define FUEL_KERNEL_CPU_ELEMENTWISE_KERNELS_H

/* Contracting a*b+c into an FMA would make results depend on which clone runs (the default clone
 * has no FMA); elementwise kernels promise the same bits on every machine, so contraction is off. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#include "fuel_kernel/abi.h"
#include "fuel_kernel/half.h"
#include "fuel_kernel/strided.h"
#include "compute_common.h"

/* Hot contiguous loops: NAME runs BODY ARGS (BODY an always-inline function), built by the ISA
 * dispatch scheme of compute_common.h:
 *   FK_MV_COMPUTE  FK_ISA_COMPUTE clones (x86-64-v4, v3, baseline): compute-bound loops (the
 *                  polynomial math of vecmath_f32.h).
 *   FK_MV_STREAM   FK_ISA_STREAM clones (x86-64-v3, baseline): memory-bound loops.
 *   FK_MV_NONE     one build: loops around C library calls, which do not vectorize. */
#define FK_MV_COMPUTE(NAME, PARAMS, ARGS, BODY) FK_ISA_COMPUTE static void NAME PARAMS { BODY ARGS; }
#define FK_MV_STREAM(NAME, PARAMS, ARGS, BODY) FK_ISA_STREAM static void NAME PARAMS { BODY ARGS; }
#define FK_MV_NONE(NAME, PARAMS, ARGS, BODY) static void NAME PARAMS { BODY ARGS; }
#define FK_INLINE static inline __attribute__((always_inline))

/* Integer power modulo 2^64 (binary POW, unary POWI); the caller truncates to its width, which
 * keeps exactly the wrapped low bits. */
static inline uint64_t fk_ipow_u64(uint64_t base, uint64_t exp) {
    uint64_t result = 1;
    while (exp) {
        if (exp & 1u) result *= base;
        base *= base;
        exp >>= 1;
    }
    return result;
}

#define FK_CHUNK 256            /* elements per F16/BF16 conversion chunk (stack buffers) */

/* The elements of a contiguous row before its output reaches a 64-byte boundary.  Row functions run
 * that head as its own short call so that the vector loop's stores never straddle two cache lines
 * (NumPy's large buffers start 16 bytes past a line: every second 256-bit store and every 512-bit
 * store would split).  0 for short rows, aligned outputs and outputs not aligned to their element
 * size.  Elementwise results do not depend on where a row is split. */
#define FK_ALIGN_MIN_ROW 1024
FK_INLINE int64_t fk_align_head(const void *out, int64_t n, int64_t itemsize) {
    uint64_t misalign = (uint64_t)(uintptr_t)out & 63u;
    if (n < FK_ALIGN_MIN_ROW || misalign == 0 || misalign % (uint64_t)itemsize) return 0;
    return (int64_t)((64u - misalign) / (uint64_t)itemsize);
}

/* ---- streamed rows ----------------------------------------------------------------------------
 * A contiguous row of a large output is computed a chunk at a time (FK_STREAM_CHUNK bytes, or
 * fk_unary_stream_chunk's) into an L1 buffer
 * and copied to the output with non-temporal stores: the output's lines are then not read in before
 * being overwritten (a plain store reads each one first: a third of a unary op's memory traffic).
 * The row's elements before its first 64-byte line are written plainly; the row fences
 * (fk_stream_fence) before it returns, so another thread may read the output once the call is done.
 * Results do not depend on it.  Large is FK_STREAM_BYTES (4 MiB, compute_common.h: the rule GEMM
 * and the norms follow) on Intel cores, where a core's plain stores reach a large buffer at a copy's
 * speed whether or not it lies in L3 (the 16-core Xeon: CEIL f32 4M 4.6 -> 1.3 ms in the bench,
 * GELU_ERF 4.1 -> 2.7 ms); FK_STREAM_BYTES_OTHER elsewhere: a Zen 4 core's 32 MB L3 serves
 * a 4M-element op's bytes faster than memory takes streamed ones (EXP f32 4M 1.0 -> 1.3 ms, NEG
 * bf16 0.22 -> 0.35 ms), while past its L3 streaming wins there too (a 128 MB output 1.5x faster).
 * Of the two-input ops, the activation derivatives stream (FK_BINARY_KERNEL's STREAMS), on Intel
 * cores only: on the 16-core Xeon SILU_BACKWARD f32 4M 10.9 -> 3.5 ms, GELU_BACKWARD 13.9 -> 7.4,
 * GELU_ERF_BACKWARD 9.1 -> 3.8, while ADD and MUL f32 went 1.8-1.9 -> 1.9-2.4 ms in a script and
 * ADD bf16 1.1-1.2 -> 1.5-1.6, and on the Zen 4 no two-input op gained at 16 to 256 MiB (ADD f32 at
 * memory speed either way, SILU_BACKWARD 15% slower).  Those numbers were 4K aliasing more than
 * store traffic: an output 16 to 256 bytes past an input modulo 4 KiB (where glibc puts one heap
 * block after another) made each load wait on the plain store just before it, and on the Xeon that
 * store waits on memory.  The AVX-512 loops of vecmath_f32.h now load a block ahead of their stores;
 * an F32 derivative with such a loop (SILU_BACKWARD, GELU_ERF_BACKWARD) stores plainly on
 * x86-64-v4 CPUs (fk_v4_forms_run), and a unary one streams straight from its registers
 * (fk_stream_direct_head). */
#define FK_STREAM_CHUNK 4096            /* bytes computed into the L1 buffer at a time, at most */
#define FK_STREAM_MIN_ROW 16384         /* shorter rows store plainly (the fence costs more than it saves) */
#define FK_STREAM_BYTES_OTHER ((int64_t)64 << 20)
#define FK_STREAM_BYTES_BINARY_OTHER INT64_MAX     /* the derivatives stream only on Intel cores */
#if defined(__x86_64__)
#define FK_CAN_STREAM 1
#else
#define FK_CAN_STREAM 0
#endif
/* Two settings, read once when the module loads (the tests run every streamed row on any machine
 * with them).  FUEL_KERNEL_STREAM_BYTES: a positive byte count sets the output size from which rows
 * stream on any x86-64 CPU; 0 when unset or not a positive integer (the rule below).
 * FUEL_KERNEL_STREAM_AS: "intel" or "other" makes the streaming rules those of Intel cores or of
 * the others (the size and the chunk; the direct stores follow the ISA alone); unset, the CPU's own
 * vendor decides. */
static int64_t fk_stream_bytes_setting;
static int fk_stream_intel;
__attribute__((constructor)) static void fk_stream_settings_read(void) {
    const char *text = getenv("FUEL_KERNEL_STREAM_BYTES");
    char *end = NULL;
    long long bytes = text != NULL && *text != '\0' ? strtoll(text, &end, 10) : 0;
    fk_stream_bytes_setting = end != NULL && *end == '\0' && bytes > 0 ? (int64_t)bytes : 0;
    const char *as = getenv("FUEL_KERNEL_STREAM_AS");
#if FK_CAN_STREAM
    __builtin_cpu_init();   /* constructors may run before GCC's own CPU model is filled in */
    fk_stream_intel = as != NULL && strcmp(as, "intel") == 0   ? 1
                      : as != NULL && strcmp(as, "other") == 0 ? 0
                                                              : __builtin_cpu_is("intel");
#else
    (void)as;
#endif
}
/* whether a kernel's rows may stream into this output: FK_STREAM_BYTES on Intel cores, other_bytes
 * elsewhere (unary ops: FK_STREAM_BYTES_OTHER; two-input ops: FK_STREAM_BYTES_BINARY_OTHER), or
 * FUEL_KERNEL_STREAM_BYTES where it is set */
FK_INLINE int fk_output_streams(const fk_storage *out, int64_t other_bytes) {
#if FK_CAN_STREAM
    int64_t from = fk_stream_bytes_setting ? fk_stream_bytes_setting
                   : fk_stream_intel ? FK_STREAM_BYTES : other_bytes;
    return (int64_t)out->nbytes >= from;
#else
    (void)out;
    (void)other_bytes;
    return 0;
#endif
}
/* The chunk in bytes of a one-input op's streamed rows: 512 on Intel cores, FK_STREAM_CHUNK
 * elsewhere.  On the 16-core Xeon (3 rounds, ratio to PyTorch) 4096 -> 512: NEG f32 4M 0.92-0.98 ->
 * 0.78-0.85x, SQR 0.92-0.97 -> 0.79-0.85, LOG 1.30-1.32 -> 1.15-1.21, SIGMOID 0.43-0.44 -> 0.38-0.40
 * (GELU 0.27 -> 0.29; 1 KiB between the two); on the Zen 4 VM with streaming forced at 4M, 512
 * cost the cheap ops 7-11% (NEG f32 0.83 -> 0.91 ms, CEIL 0.83 -> 0.92, NEG bf16 0.35 -> 0.37).
 * The two-input rows keep FK_STREAM_CHUNK: SILU_BACKWARD, the Xeon, 1.20-1.31 -> 1.33-1.41x. */
FK_INLINE int64_t fk_unary_stream_chunk(void) { return fk_stream_intel ? 512 : FK_STREAM_CHUNK; }
/* The row ctx of a two-input kernel (FK_BINARY_KERNEL): whether its contiguous rows may stream.
 * Fused groups call the rows with no ctx (NULL): those rows store plainly. */
typedef struct {
    int stream;
} fk_binary_ctx;
/* The elements of a contiguous row before its output reaches a 64-byte line, or -1 where the row
 * does not stream (shorter than FK_STREAM_MIN_ROW bytes, or an output not aligned to its itemsize). */
FK_INLINE int64_t fk_stream_head(const void *out, int64_t n, int64_t itemsize) {
    uint64_t misalign = (uint64_t)(uintptr_t)out & 63u;
    if (n * itemsize < FK_STREAM_MIN_ROW || misalign % (uint64_t)itemsize) return -1;
    return misalign ? (int64_t)((64u - misalign) / (uint64_t)itemsize) : 0;
}
/* whether a two-input kernel's rows stream with this ctx */
FK_INLINE int fk_binary_streams(const void *ctx) { return ctx && ((const fk_binary_ctx *)ctx)->stream; }
/* bytes from src to dst, both 64-byte aligned, with non-temporal stores from byte `from` on, 16
 * bytes a store (a last part of under 16 bytes plainly) */
static void fk_stream_store_from(void *dst, const void *src, int64_t from, int64_t bytes) {
    int64_t i = from;
#if FK_CAN_STREAM
    for (; i + 16 <= bytes; i += 16)
        _mm_stream_si128((__m128i *)((char *)dst + i), _mm_load_si128((const __m128i *)((const char *)src + i)));
#endif
    memcpy((char *)dst + i, (const char *)src + i, (size_t)(bytes - i));
}
/* fk_stream_store(dst, src, bytes): bytes from src to dst, both 64-byte aligned, with the CPU's
 * widest non-temporal store (64 bytes on AVX-512, 32 on AVX2, else 16), picked once at load.
 * 16-byte stores took four store-buffer entries per line where one does.  On the Zen 4 VM, one
 * pinned core: at its own rule (96 MiB outputs) NEG f32 5.2-5.3 -> 4.4-4.8 ms, SQRT 7.2-7.4 ->
 * 6.1-6.5; with the Intel rules forced at 4M f32, NEG 0.91 -> 0.69 ms, EXP 1.31 -> 1.13, LOG 1.85
 * -> 1.61, SILU_BACKWARD 2.30 -> 2.17, NEG bf16 (4 KiB chunks) 0.44 -> 0.35. */
#if FK_HAVE_ISA_V4
FK_ISA_V4 static void fk_stream_store_v4(void *dst, const void *src, int64_t bytes) {
    int64_t i = 0;
    for (; i + 64 <= bytes; i += 64)
        _mm512_stream_si512((__m512i *)((char *)dst + i), _mm512_load_si512((const char *)src + i));
    fk_stream_store_from(dst, src, i, bytes);
}
FK_ISA_V3 static void fk_stream_store_v3(void *dst, const void *src, int64_t bytes) {
    int64_t i = 0;
    for (; i + 32 <= bytes; i += 32)
        _mm256_stream_si256((__m256i *)((char *)dst + i), _mm256_load_si256((const __m256i *)((const char *)src + i)));
    fk_stream_store_from(dst, src, i, bytes);
}
static void fk_stream_store_portable(void *dst, const void *src, int64_t bytes) {
    fk_stream_store_from(dst, src, 0, bytes);
}
FK_ISA_PICK(fk_stream_store, (void *dst, const void *src, int64_t bytes), (dst, src, bytes),
            fk_cpu_supports("x86-64-v4")   ? fk_stream_store_v4
            : fk_cpu_supports("x86-64-v3") ? fk_stream_store_v3
                                                  : fk_stream_store_portable)
#else
static void fk_stream_store(void *dst, const void *src, int64_t bytes) { fk_stream_store_from(dst, src, 0, bytes); }
#endif
/* A streamed contiguous row of N elements of type T into O, H of them before O's first line, in
 * chunks of CHUNK bytes (a multiple of 64 up to FK_STREAM_CHUNK): CALL(i, o, m) computes the row's m
 * elements from element i on into o (a plain call for the head, then one per chunk into the L1
 * buffer). */
#define FK_STREAM_ROW(T, O, N, H, CHUNK, CALL)                                                     \
    do {                                                                                          \
        _Alignas(64) T buf_[FK_STREAM_CHUNK / sizeof(T)];                                         \
        const int64_t chunk_ = (int64_t)(CHUNK) / (int64_t)sizeof(T);                             \
        if ((H) > 0) CALL(0, (O), (H));                                                           \
        for (int64_t i_ = (H); i_ < (N); i_ += chunk_) {                                          \
            int64_t m_ = (N) - i_ < chunk_ ? (N) - i_ : chunk_;                                   \
            CALL(i_, buf_, m_);                                                                   \
            fk_stream_store((O) + i_, buf_, m_ * (int64_t)sizeof(T));                             \
        }                                                                                         \
        fk_stream_fence();                                                                        \
    } while (0)
/* 1 where this build's AVX-512 loops run (an x86-64-v4 CPU), else 0 */
FK_INLINE int fk_v4_forms_run(void) {
#if FK_HAVE_ISA_V4
    return fk_cpu_supports("x86-64-v4");
#else
    return 0;
#endif
}
/* The elements of a contiguous row before its output's first line where the row streams straight
 * from an AVX-512 loop's registers (STREAM set, an x86-64-v4 CPU, fk_stream_head's conditions), else
 * -1.  Such a loop stores each vector as it computes it: a compute-bound op's stores then drain
 * during its arithmetic, where FK_STREAM_ROW's chunks left the memory idle while they computed (the
 * Zen 4, streaming forced: EXP f32 4M 1.27 -> 1.05 ms, SIGMOID 1.82 -> 1.40; the 16-core Xeon, in the
 * bench, 3 rounds: LOG 2.5-3.6 -> 1.8-2.4 ms, EXP 1.7-2.5 -> 1.3-1.6).  On the Xeon these stores had
 * run at half the chunks' speed until the loops loaded a block ahead of them (4K aliasing:
 * the streamed rows' note above). */
FK_INLINE int64_t fk_stream_direct_head(int stream, const void *out, int64_t n, int64_t itemsize) {
#if FK_HAVE_ISA_V4
    return stream && fk_v4_forms_run() ? fk_stream_head(out, n, itemsize) : -1;
#else
    (void)stream, (void)out, (void)n, (void)itemsize;
    return -1;
#endif
}
/* A contiguous row of N elements of type T into O, CALL(i, o, m) as above: streamed in chunks of
 * CHUNK bytes where STREAM allows (fk_stream_head), else split at O's first line (fk_align_head). */
#define FK_CONTIG_ROW(T, O, N, STREAM, CHUNK, CALL)                                                \
    do {                                                                                          \
        int64_t h_ = (STREAM) ? fk_stream_head((O), (N), sizeof(T)) : -1;                         \
        if (h_ >= 0) {                                                                            \
            FK_STREAM_ROW(T, (O), (N), h_, (CHUNK), CALL);                                        \
            break;                                                                                \
        }                                                                                         \
        h_ = fk_align_head((O), (N), sizeof(T));                                                  \
        if (h_) CALL(0, (O), h_);                                                                 \
        CALL(h_, (O) + h_, (N) - h_);                                                             \
    } while (0)

/* ---- validation prologue ---------------------------------------------------------------------- */
static inline int fk_check_params_kind(const fk_params *params, int kind, const char *op) {
    int got = params ? params->kind : FK_PARAMS_NONE;
    if (got != kind) {
        fk_set_error(FK_ERR_PARAMS, "%s takes params of kind %d, got kind %d", op, kind, got);
        return FK_ERR_PARAMS;
    }
    return FK_OK;
}

/* Check counts/backends/dtypes and params kind, then plan: everything but data-dependent checks.
 * An output that overlaps itself (stride 0 on an axis of extent > 1) is an AliasError; the plan
 * has dropped extent-1 axes, so the flat case costs one compare. */
FK_INLINE int fk_elementwise_prepare(fk_loop *loop, const fk_storage *inputs, int n_in,
                                         fk_storage *outputs, int n_out, const fk_layout *layouts,
                                         const fk_params *params, int want_in, const int *dtypes,
                                         int params_kind, const char *op) {
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, want_in, dtypes, 0);
    if (status) return status;
    status = fk_check_params_kind(params, params_kind, op);
    if (status) return status;
    status = fk_loop_plan(loop, inputs, want_in, outputs, layouts, dtypes);
    if (status) return status;
    for (int d = 0; d < loop->ndim; d++)
        if (loop->strides[want_in][d] == 0 && loop->shape[d] > 1)
            return fk_output_self_overlap_check(&layouts[want_in], "output 0");
    return FK_OK;
}

/* Pre-write scans over one input operand of a planned loop: is any element zero / negative? */
#define FK_DEFINE_SCAN(NAME, T, TEST)                                                            \
    static int fk_scan_##NAME(const fk_loop *loop, int k) {                                      \
        int64_t index[FK_MAX_DIMS] = {0};                                                        \
        char *ptrs[FK_MAX_OPERANDS];                                                             \
        int64_t s = fk_loop_inner_stride(loop, k);                                               \
        for (int j = 0; j < loop->nops; j++) ptrs[j] = loop->base[j];                            \
        for (int64_t r = 0; r < loop->rows; r++) {                                               \
            const char *q = ptrs[k];                                                             \
            int hit = 0;                                                                         \
            for (int64_t i = 0; i < loop->inner; i++) {                                          \
                T v = *(const T *)(q + i * s);                                                   \
                hit |= (TEST);                                                                   \
            }                                                                                    \
            if (hit) return 1;                                                                   \
            fk_loop_next(loop, index, ptrs);                                                     \
        }                                                                                        \
        return 0;                                                                                \
    }

/* ---- F16 / BF16 row conversions (strides in bytes) ------------------------------------------- */
/* NAME converts n elements: W at a time by STEP (the vector of W at src + i into dst + i) built for
 * the TARGET instructions, the rest one by one by SCALAR. */
#define FK_HALF_ROW_CONVERT(NAME, TARGET, SRC_T, DST_T, W, STEP, SCALAR)                             \
    __attribute__((target(TARGET)))                                                                \
    static void NAME(const SRC_T *src, DST_T *dst, int64_t n) {                                    \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) STEP;                                                           \
        for (; i < n; i++) dst[i] = SCALAR(src[i]);                                                \
    }
FK_HALF_ROW_CONVERT(fk_f16_to_f32_avx512, "avx512f,f16c", uint16_t, float, 16,
                    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)))),
                    fk_f16_to_f32)
FK_HALF_ROW_CONVERT(fk_f16_to_f32_f16c, "avx2,f16c", uint16_t, float, 8,
                    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)))),
                    fk_f16_to_f32)
FK_HALF_ROW_CONVERT(fk_f32_to_f16_avx512, "avx512f,f16c", float, uint16_t, 16,
                    _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                    fk_f32_to_f16)
FK_HALF_ROW_CONVERT(fk_f32_to_f16_f16c, "avx2,f16c", float, uint16_t, 8,
                    _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                    fk_f32_to_f16)

static void fk_f16_to_f32_plain(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = fk_f16_to_f32(src[i]);
}
static void fk_f32_to_f16_plain(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = fk_f32_to_f16(src[i]);
}
/* every AVX-512 CPU has F16C */
FK_ISA_PICK(fk_f16_to_f32_contig, (const uint16_t *src, float *dst, int64_t n), (src, dst, n),
            fk_cpu_supports("avx512f") ? fk_f16_to_f32_avx512
            : fk_cpu_supports("f16c") && fk_cpu_supports("avx2") ? fk_f16_to_f32_f16c
            : fk_f16_to_f32_plain)
FK_ISA_PICK(fk_f32_to_f16_contig, (const float *src, uint16_t *dst, int64_t n), (src, dst, n),
            fk_cpu_supports("avx512f") ? fk_f32_to_f16_avx512
            : fk_cpu_supports("f16c") && fk_cpu_supports("avx2") ? fk_f32_to_f16_f16c
            : fk_f32_to_f16_plain)

/* fk_load_<H>_row / fk_store_<H>_row: n elements of half-precision dtype H (f16, bf16) at a byte
 * stride to and from F32, through the vectorized contiguous converters when the stride is 2. */
#define FK_HALF_ROW_ACCESS(H)                                                                          \
    static inline void fk_load_##H##_row(const char *src, int64_t ss, float *dst, int64_t n) {        \
        if (ss == 2) { fk_##H##_to_f32_contig((const uint16_t *)src, dst, n); return; }              \
        for (int64_t i = 0; i < n; i++) dst[i] = fk_##H##_to_f32(*(const uint16_t *)(src + i * ss)); \
    }                                                                                                  \
    static inline void fk_store_##H##_row(const float *src, char *dst, int64_t ds, int64_t n) {       \
        if (ds == 2) { fk_f32_to_##H##_contig(src, (uint16_t *)dst, n); return; }                    \
        for (int64_t i = 0; i < n; i++) *(uint16_t *)(dst + i * ds) = fk_f32_to_##H(src[i]);          \
    }
FK_HALF_ROW_ACCESS(f16)

/* BF16 is the top half of an F32: both directions are bit operations the compiler vectorizes. */
FK_INLINE uint16_t fk_f32_to_bf16_branchless(float f) {
    uint32_t x = fk_f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet = (x >> 16) | 0x40u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

FK_INLINE void fk_bf16_to_f32_body(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = fk_bf16_to_f32(src[i]);
}
FK_INLINE void fk_f32_to_bf16_body(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = fk_f32_to_bf16_branchless(src[i]);
}
FK_MV_STREAM(fk_bf16_to_f32_contig, (const uint16_t *src, float *dst, int64_t n), (src, dst, n), fk_bf16_to_f32_body)
#if FK_HAVE_ISA_V4
/* fk_f32_to_bf16_body in AVX2 intrinsics, 16 values a step: GCC's own AVX2 loop narrows 32-bit lanes
 * to 16 bits poorly (a BF16 unary row widened, computed and rounded through it ran 2.2x slower in L2
 * on a Zen 2 core); the same bits.  x86-64-v4 CPUs take it too (FK_MV_STREAM has no AVX-512 clone). */
FK_ISA_V3 static void fk_f32_to_bf16_contig_v3(const float *src, uint16_t *dst, int64_t n) {
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet_bit = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(src + i + 8 * k));
            __m256i top = _mm256_srli_epi32(x, 16);
            __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(half, _mm256_and_si256(top, one))), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, magnitude), inf);
            r[k] = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet_bit), nan);
        }
        /* packus packs within 128-bit lanes: the qword permute puts the halves in order */
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8));
    }
    for (; i < n; i++) dst[i] = fk_f32_to_bf16_branchless(src[i]);
}
FK_MV_STREAM(fk_f32_to_bf16_contig_portable, (const float *src, uint16_t *dst, int64_t n), (src, dst, n), fk_f32_to_bf16_body)
FK_ISA_PICK(fk_f32_to_bf16_contig, (const float *src, uint16_t *dst, int64_t n), (src, dst, n),
            fk_cpu_supports("x86-64-v3") ? fk_f32_to_bf16_contig_v3 : fk_f32_to_bf16_contig_portable)
#else
FK_MV_STREAM(fk_f32_to_bf16_contig, (const float *src, uint16_t *dst, int64_t n), (src, dst, n), fk_f32_to_bf16_body)
#endif

FK_HALF_ROW_ACCESS(bf16)

/* BOOL results of half-precision compares are computed into a byte buffer, then copied out. */
static inline void fk_store_bool_row(const uint8_t *src, char *dst, int64_t ds, int64_t n) {
    if (ds == 1) { memcpy(dst, src, (size_t)n); return; }
    for (int64_t i = 0; i < n; i++) *(uint8_t *)(dst + i * ds) = src[i];
}

#define FK_PRE_NONE(OP, N)

/* ---- two-input generators (binary arithmetic and comparisons) ---------------------------------------------------------------------------------- */
/* The vectorized body: ia/ib say whether a/b advance (1) or are broadcast scalars (0).  MV is the
 * FK_MV_* build mode (FK_BINARY_VEC: STREAM; compute-bound ops such as F32 POW: COMPUTE). */
#define FK_BINARY_VEC(OP, D, T, OT, EXPR) FK_BINARY_VEC_MV(OP, D, T, OT, EXPR, FK_MV_STREAM)
#define FK_BINARY_VEC_MV(OP, D, T, OT, EXPR, MV)                                                 \
    FK_INLINE void fk_vecbody_##OP##_##D(const T *a, int64_t ia, const T *b, int64_t ib, OT *o,  \
                                         int64_t n) {                                            \
        if (ia && ib) {                                                                          \
            for (int64_t i = 0; i < n; i++) { T x = a[i], y = b[i]; o[i] = EXPR(x, y, T); }      \
        } else if (ia) {                                                                         \
            T y = b[0];                                                                          \
            for (int64_t i = 0; i < n; i++) { T x = a[i]; o[i] = EXPR(x, y, T); }                \
        } else if (ib) {                                                                         \
            T x = a[0];                                                                          \
            for (int64_t i = 0; i < n; i++) { T y = b[i]; o[i] = EXPR(x, y, T); }                \
        } else {                                                                                 \
            T x = a[0], y = b[0];                                                                \
            OT v = EXPR(x, y, T);                                                                \
            for (int64_t i = 0; i < n; i++) o[i] = v;                                            \
        }                                                                                        \
    }                                                                                            \
    MV(fk_vec_##OP##_##D, (const T *a, int64_t ia, const T *b, int64_t ib, OT *o, int64_t n),    \
       (a, ia, b, ib, o, n), fk_vecbody_##OP##_##D)

/* The contiguous (or scalar-broadcast) row of a two-input kernel: VEC(a, ia, b, ib, o, m) on the
 * row's elements (ia / ib: whether a / b advance), by FK_CONTIG_ROW (streamed where the ctx allows). */
#define FK_BINARY_CONTIG_ROW(VEC, T, OT, A, IA, B, IB, O, N, CTX)                                  \
    do {                                                                                          \
        void (*const vec_)(const T *, int64_t, const T *, int64_t, OT *, int64_t) = VEC;         \
        const T *const a_ = (A), *const b_ = (B);                                                 \
        const int64_t ia_ = (IA), ib_ = (IB);                                                     \
        FK_CONTIG_ROW(OT, (O), (N), fk_binary_streams(CTX), FK_STREAM_CHUNK, FK_BCALL_);          \
    } while (0)
/* FK_BINARY_CONTIG_ROW's call: elements i.. of the row into o */
#define FK_BCALL_(i, o, m) vec_(a_ + ia_ * (i), ia_, b_ + ib_ * (i), ib_, o, m)

#define FK_BINARY_ROW_NATIVE(OP, D, T, OT, EXPR)                                                 \
    static void fk_row_##OP##_##D(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        const int64_t es = (int64_t)sizeof(T);                                                   \
        if (s[2] == (int64_t)sizeof(OT) && (s[0] == es || s[0] == 0) && (s[1] == es || s[1] == 0)) { \
            FK_BINARY_CONTIG_ROW(fk_vec_##OP##_##D, T, OT, (const T *)p[0], s[0] != 0,            \
                                 (const T *)p[1], s[1] != 0, (OT *)p[2], n, ctx);                 \
            return;                                                                              \
        }                                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T x = *(const T *)(p[0] + i * s[0]), y = *(const T *)(p[1] + i * s[1]);              \
            *(OT *)(p[2] + i * s[2]) = EXPR(x, y, T);                                            \
        }                                                                                        \
    }

/* F16/BF16: chunks converted to F32, computed by the F32 vector body, rounded once on store. */
#define FK_BINARY_ROW_HALF(OP, D, LOAD, VEC, OBUF, STORE)                                        \
    static void fk_row_##OP##_##D(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        float xa[FK_CHUNK], xb[FK_CHUNK];                                                        \
        OBUF xo[FK_CHUNK];                                                                       \
        (void)ctx;                                                                               \
        for (int64_t i0 = 0; i0 < n; i0 += FK_CHUNK) {                                           \
            int64_t m = n - i0 < FK_CHUNK ? n - i0 : FK_CHUNK;                                   \
            LOAD(p[0] + i0 * s[0], s[0], xa, s[0] ? m : 1);                                      \
            LOAD(p[1] + i0 * s[1], s[1], xb, s[1] ? m : 1);                                      \
            VEC(xa, s[0] != 0, xb, s[1] != 0, xo, m);                                            \
            STORE(xo, p[2] + i0 * s[2], s[2], m);                                                \
        }                                                                                        \
    }

/* BF16 conversions are bit operations, so contiguous (or scalar-broadcast) BF16 rows run as one
 * fused loop -- widen, compute in F32, round -- that vectorizes in every build; other layouts
 * take the chunked path.  (F16 widening needs F16C instructions, which only the chunked
 * conversion helpers use.) */
FK_INLINE float fk_bf16_load(uint16_t h) { return fk_bits_f32((uint32_t)h << 16); }
#define FK_BF16_STORE_FLOAT(v) fk_f32_to_bf16_branchless(v)
#define FK_BF16_STORE_BOOL(v) (v)
#define FK_BINARY_ROW_BF16(OP, OBUF, STORE_ROW, OT, EXPR, STOREF)                                \
    FK_INLINE void fk_vecbody_##OP##_BF16(const uint16_t *a, int64_t ia, const uint16_t *b,      \
                                          int64_t ib, OT *o, int64_t n) {                        \
        if (ia && ib) {                                                                          \
            for (int64_t i = 0; i < n; i++) {                                                    \
                float x = fk_bf16_load(a[i]), y = fk_bf16_load(b[i]);                            \
                o[i] = STOREF(EXPR(x, y, float));                                                \
            }                                                                                    \
        } else if (ia) {                                                                         \
            float y = fk_bf16_load(b[0]);                                                        \
            for (int64_t i = 0; i < n; i++) { float x = fk_bf16_load(a[i]); o[i] = STOREF(EXPR(x, y, float)); } \
        } else if (ib) {                                                                         \
            float x = fk_bf16_load(a[0]);                                                        \
            for (int64_t i = 0; i < n; i++) { float y = fk_bf16_load(b[i]); o[i] = STOREF(EXPR(x, y, float)); } \
        } else {                                                                                 \
            float x = fk_bf16_load(a[0]), y = fk_bf16_load(b[0]);                                \
            OT v = STOREF(EXPR(x, y, float));                                                    \
            for (int64_t i = 0; i < n; i++) o[i] = v;                                            \
        }                                                                                        \
    }                                                                                            \
    FK_MV_STREAM(fk_vec_##OP##_BF16, (const uint16_t *a, int64_t ia, const uint16_t *b, int64_t ib, \
                 OT *o, int64_t n), (a, ia, b, ib, o, n), fk_vecbody_##OP##_BF16)               \
    FK_BINARY_ROW_HALF(OP, BF16_chunked, fk_load_bf16_row, fk_vec_##OP##_F32, OBUF, STORE_ROW)   \
    static void fk_row_##OP##_BF16(char *const *p, const int64_t *s, int64_t n, const void *ctx) { \
        if (s[2] == (int64_t)sizeof(OT) && (s[0] == 2 || s[0] == 0) && (s[1] == 2 || s[1] == 0)) { \
            FK_BINARY_CONTIG_ROW(fk_vec_##OP##_BF16, uint16_t, OT, (const uint16_t *)p[0], s[0] != 0, \
                                 (const uint16_t *)p[1], s[1] != 0, (OT *)p[2], n, ctx);          \
            return;                                                                              \
        }                                                                                        \
        fk_row_##OP##_BF16_chunked(p, s, n, ctx);                                                \
    }

/* the kernel NAME: checks, the pre-write check PRE(OP, N), then the rows of fk_row_<OP>_<D>, whose
 * contiguous rows stream into a large output where STREAMS is 1 (fk_binary_ctx) */
#define FK_BINARY_KERNEL(NAME, OP, D, OD, PRE, N, STREAMS)                                       \
    static int NAME(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,          \
                    const fk_layout *layouts, const fk_params *params) {                         \
        const int dtypes[3] = {FK_##D, FK_##D, FK_##OD};                                         \
        fk_loop loop;                                                                            \
        int status = fk_elementwise_prepare(&loop, inputs, n_in, outputs, n_out, layouts, params, \
                                            2, dtypes, FK_PARAMS_NONE, #OP);                     \
        if (status) return status;                                                               \
        PRE(OP, N)                                                                               \
        const int sizes[3] = {fk_dtype_itemsize[FK_##D], fk_dtype_itemsize[FK_##D], fk_dtype_itemsize[FK_##OD]}; \
        const fk_binary_ctx ctx = {(STREAMS) && fk_output_streams(&outputs[0], FK_STREAM_BYTES_BINARY_OTHER)}; \
        fk_loop_run(&loop, fk_row_##OP##_##D, &ctx, sizes);                                      \
        return FK_OK;                                                                            \
    }

/* ---- cost functions ----------------------------------------------------------------------------- */
static inline fk_cost fk_elementwise_cost_scaled(const fk_layout *layouts, int n_layouts,
                                                 const fk_dtypes *dtypes, double flops_per_element) {
    fk_cost cost = {0.0, 0.0, 40.0};
    double n = n_layouts >= 1 ? (double)fk_layout_numel(&layouts[n_layouts - 1]) : 0.0;
    for (int i = 0; i < n_layouts && i < dtypes->n; i++)
        cost.bytes_moved += (double)fk_layout_numel(&layouts[i]) * fk_dtype_itemsize[dtypes->v[i]];
    cost.flops = n * flops_per_element;
    return cost;
}
/* one flop per element: arithmetic, compares, selects */
static fk_cost fk_cost_simple(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                              const fk_params *params) {
    (void)params;
    return fk_elementwise_cost_scaled(layouts, n_layouts, dtypes, 1.0);
}
/* a polynomial-based transcendental: ~20 flops per element */
static fk_cost fk_cost_transcendental(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                      const fk_params *params) {
    (void)params;
    return fk_elementwise_cost_scaled(layouts, n_layouts, dtypes, 20.0);
}

/* ---- manifest helpers ------------------------------------------------------------------------ */
#define FK_ELEMENTWISE_CAPS (FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT | FK_CAP_INPLACE)
#define FK_CLAIM(ULP, NOTES) {1, 1, {0, 0}, (ULP), 0.0, 0.0, NOTES}
#define FK_CLAIM_EXACT FK_CLAIM(0, "exact: correctly rounded / bit-exact")

#endif /* FUEL_KERNEL_CPU_ELEMENTWISE_KERNELS_H */
