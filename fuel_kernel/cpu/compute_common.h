/* Helpers shared by the compute kernel families (reductions, matmul, softmax/norms, conv2d).
 *
 * Element loads/stores to the compute types (F16/BF16 compute in F32), the ISA dispatch
 * attributes for hot loops (the one scheme, also used by the elementwise families), the
 * storage-overlap check every family runs before it writes, and the checks for a self-overlapping
 * output and for params = NULL.  Header-only and static: each kernel module includes it once in
 * its translation unit.
 */
#ifndef FUEL_KERNEL_CPU_COMPUTE_COMMON_H
#define FUEL_KERNEL_CPU_COMPUTE_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuel_kernel/abi.h"
#include "fuel_kernel/half.h"
#include "fuel_kernel/strided.h"

/* ---- ISA dispatch: the one scheme every kernel family uses ----------------------------------
 * A hot loop is compiled once per x86-64 level with GCC's target_clones, and the ifunc resolver
 * GCC emits picks the clone once, when the module is loaded (no CPU check per call):
 *   FK_ISA_COMPUTE  x86-64-v4 (AVX-512, 512-bit vectors), x86-64-v3 (AVX2 + FMA) and the baseline
 *                   (SSE2): compute-bound loops (GEMM and conv micro-kernels, reductions, softmax,
 *                   attention tiles, the polynomial exp / tanh / sigmoid).
 *   FK_ISA_STREAM   x86-64-v3 (also chosen on AVX-512 machines) and the baseline: memory-bound
 *                   loops.  Measured on an AMD Zen 4 host (ADD f32, 4M elements, NumPy buffers):
 *                   AVX2 ran 0.98-1.03x NumPy's time, AVX-512 with 256-bit vectors 1.04-1.07x and
 *                   512-bit vectors ~1.13x (64-byte stores to 16-byte-aligned buffers split lines).
 *   (neither)       loops around C library calls, which do not vectorize.
 * A loop written with explicit intrinsics for one ISA (the F16C conversions) has one function per
 * ISA; FK_ISA_PICK(NAME, PARAMS, ARGS, CHOICE) makes NAME run the variant that the expression
 * CHOICE (over __builtin_cpu_supports) names, resolved once at load through ifunc as well.
 * Without target_clones (a compiler other than GCC, or FK_NO_TARGET_CLONES defined) the loops are
 * built for the baseline only and FK_ISA_PICK evaluates CHOICE per call.
 * The v3 and v4 clones have FMA, so GCC may contract a*b+c in them; a family that promises the
 * same bits on every machine turns contraction off (elementwise_kernels.h). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FK_NO_TARGET_CLONES)
#define FK_ISA_COMPUTE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define FK_ISA_STREAM __attribute__((target_clones("arch=x86-64-v3", "default")))
#define FK_ISA_PICK(NAME, PARAMS, ARGS, CHOICE)                                                  \
    typedef void NAME##_variant PARAMS;                                                          \
    static NAME##_variant *NAME##_resolve(void) {                                                \
        __builtin_cpu_init();                                                                    \
        return CHOICE;                                                                           \
    }                                                                                            \
    static void NAME PARAMS __attribute__((ifunc(#NAME "_resolve")));
#else
#define FK_ISA_COMPUTE
#define FK_ISA_STREAM
#define FK_ISA_PICK(NAME, PARAMS, ARGS, CHOICE) static void NAME PARAMS { (CHOICE) ARGS; }
#endif

/* ---- element access: storage element <-> compute value -------------------------------------- */
#define FK_LD_BOOL(x) ((x) != 0)
#define FK_LD_U8(x) (x)
#define FK_LD_I8(x) (x)
#define FK_LD_I16(x) (x)
#define FK_LD_I32(x) (x)
#define FK_LD_I64(x) (x)
#define FK_LD_U32(x) (x)
#define FK_LD_F16(x) fk_f16_to_f32(x)
#define FK_LD_BF16(x) fk_bf16_to_f32(x)
#define FK_LD_F32(x) (x)
#define FK_LD_F64(x) (x)

/* float compute value -> float storage element (round to nearest even) */
#define FK_ST_F16(v) fk_f32_to_f16((float)(v))
#define FK_ST_BF16(v) fk_f32_to_bf16((float)(v))
#define FK_ST_F32(v) ((float)(v))
#define FK_ST_F64(v) ((double)(v))
/* double compute value -> float storage element, rounded once */
#define FK_STD_F16(v) fk_f64_to_f16((double)(v))
#define FK_STD_BF16(v) fk_f64_to_bf16((double)(v))
#define FK_STD_F32(v) ((float)(v))
#define FK_STD_F64(v) ((double)(v))

/* A C caller may pass params = NULL; a kernel that reads params refuses it before dereferencing. */
static inline int fk_params_present(const fk_params *params, const char *op, const char *takes) {
    if (params == NULL) {
        fk_set_error(FK_ERR_PARAMS, "%s got params = NULL; it takes %s", op, takes);
        return FK_ERR_PARAMS;
    }
    return FK_OK;
}

/* Address of the element at `offset` (in elements) of a storage. */
static inline char *fk_elem_ptr(const fk_storage *storage, int64_t offset) {
    return (char *)storage->data + offset * fk_dtype_itemsize[storage->dtype];
}

/* 64-byte aligned scratch; NULL (with FK_ERR_NO_MEMORY set) on failure. */
static inline void *fk_scratch_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, (bytes + 63) & ~(size_t)63) != 0) p = NULL;
    if (p == NULL) fk_set_error(FK_ERR_NO_MEMORY, "could not allocate %zu bytes of scratch memory", bytes);
    return p;
}

#endif /* FUEL_KERNEL_CPU_COMPUTE_COMMON_H */
