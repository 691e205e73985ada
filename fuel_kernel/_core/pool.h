/* Internal interface of the intra-op thread pool (pool.c); extensions and kernel modules reach
 * fk_parallel_for and fk_get_num_threads through the API table in fuel_kernel/abi.h. */
#ifndef FUEL_KERNEL_CORE_POOL_H
#define FUEL_KERNEL_CORE_POOL_H
#include "fuel_kernel/abi.h"

#define FK_POOL_MAX_THREADS 1024

int fk_parallel_for(int64_t n_tasks, fk_task_fn fn, void *context);
int fk_get_num_threads(void);
int fk_set_num_threads(int n);           /* 0, or -1 for n outside [1, FK_POOL_MAX_THREADS] */
int fk_affinity_cpus(void);              /* CPUs in this process's affinity mask */
int fk_pool_workers_started(void);
int64_t fk_pool_calls(void);             /* parallel_for calls with more than one task, so far */
#endif
