/* Helpers shared by the compute kernel families (reductions, matmul, softmax/norms, conv2d).
 *
 * Element loads/stores to the compute types (F16/BF16 compute in F32), the run-time ISA
 * dispatch attribute for hot loops, the storage-overlap check every family runs before it
 * writes, and the checks for a self-overlapping output and for params = NULL.  Header-only and static: each kernel module includes it once in its translation unit.
 */
#ifndef FUEL_KERNEL_CPU_COMPUTE_COMMON_H
#define FUEL_KERNEL_CPU_COMPUTE_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuel_kernel/abi.h"
#include "fuel_kernel/half.h"
#include "fuel_kernel/strided.h"

/* Hot loops are compiled for AVX-512F, AVX2 and the baseline; the loader picks one at run time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FK_NO_TARGET_CLONES)
#define FK_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FK_CLONES
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
