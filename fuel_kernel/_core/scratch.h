/* Internal interface of the kernels' scratch memory (scratch.c); kernel modules and extensions reach
 * it as fk_scratch_alloc / fk_scratch_free through the API table in fuel_kernel/abi.h. */
#ifndef FUEL_KERNEL_CORE_SCRATCH_H
#define FUEL_KERNEL_CORE_SCRATCH_H
#include <stddef.h>

#define FK_SCRATCH_KEEP_MAX ((size_t)64 << 20)   /* the largest block a thread keeps: 64 MiB */

void *fk_scratch_alloc(size_t bytes);            /* NULL with FK_ERR_NO_MEMORY set on failure */
void fk_scratch_free(void *p);
#endif
