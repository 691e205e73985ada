/* Kernel scratch memory: 64-byte aligned blocks, with one freed block kept per thread for the next
 * call on that thread.
 *
 * Why: a large kernel split over the pool allocates its scratch per block (GEMM panels, im2col
 * columns, attention tiles), megabytes each, and glibc serves blocks that size with mmap/munmap.
 * With many threads the page faults and TLB shootdowns of that churn cost more than the blocks'
 * work.  Keeping each thread's last block (up to FK_SCRATCH_KEEP_MAX bytes, the larger one when
 * two are freed) turns a steady run of calls into no allocations at all.  The limit is 64 MiB: the
 * shared GEMM panels of a 2048 x 2048 x 2048 F32 product are 32 MiB and a line, and under a 32 MiB
 * limit every call faulted them in afresh: the packing job took 4.1-4.9 ms of a 16-18 ms call on
 * 16 threads, and 7.3-8.7 ms on 2 threads (2.4-2.7 ms once the block is kept).
 *
 * The rules: a block from fk_scratch_alloc may be given back with fk_scratch_free or with plain
 * free() (it is an ordinary posix_memalign block; free() just skips the keeping).  A kept block is
 * held by one thread only, so no locks; it is freed when its thread exits (the key's destructor).
 * After fork() the child's calling thread keeps its copy of the parent's block, which is valid
 * memory there.  Builds with AddressSanitizer keep nothing, so every use after free still reports,
 * and so do C libraries without malloc_usable_size (the size of a kept block is asked of malloc).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "scratch.h"
#include "table.h"

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#include <malloc.h>
#define FK_SCRATCH_KEEPS 1
#else
#define FK_SCRATCH_KEEPS 0
#endif

#if FK_SCRATCH_KEEPS
static pthread_key_t g_kept;                 /* this thread's kept block, or NULL */
static pthread_once_t g_kept_once = PTHREAD_ONCE_INIT;
static int g_kept_ready;

static void make_key(void) { g_kept_ready = pthread_key_create(&g_kept, free) == 0; }
static int kept_ready(void) {
    pthread_once(&g_kept_once, make_key);
    return g_kept_ready;
}
#endif

void *fk_scratch_alloc(size_t bytes) {
    void *p = NULL;
    size_t want;
    if (bytes > SIZE_MAX - 63) {
        fk_set_error(FK_ERR_NO_MEMORY, "could not allocate %zu bytes of scratch memory", bytes);
        return NULL;
    }
    want = bytes == 0 ? 64 : (bytes + 63) & ~(size_t)63;
#if FK_SCRATCH_KEEPS
    if (kept_ready()) {
        void *kept = pthread_getspecific(g_kept);
        if (kept != NULL && malloc_usable_size(kept) >= want && pthread_setspecific(g_kept, NULL) == 0)
            return kept;
    }
#endif
    if (posix_memalign(&p, 64, want) != 0) p = NULL;
    if (p == NULL) fk_set_error(FK_ERR_NO_MEMORY, "could not allocate %zu bytes of scratch memory", bytes);
    return p;
}

void fk_scratch_free(void *p) {
    if (p == NULL) return;
#if FK_SCRATCH_KEEPS
    if (kept_ready()) {
        size_t size = malloc_usable_size(p);
        void *kept = pthread_getspecific(g_kept);
        if (size <= FK_SCRATCH_KEEP_MAX && (kept == NULL || malloc_usable_size(kept) < size) &&
            pthread_setspecific(g_kept, p) == 0) {
            free(kept);
            return;
        }
    }
#endif
    free(p);
}
