/* The intra-op thread pool: one process-wide set of POSIX worker threads that run a kernel's tasks.
 *
 * Why a small pool of our own rather than OpenMP: GNU libgomp's threads do not survive fork() (a
 * child that uses OpenMP after its parent did can hang), PyTorch ships its own copy of libgomp and
 * SciPy's OpenBLAS its own threads, so a second OpenMP runtime in the process would oversubscribe
 * the cores with no way to coordinate; and this pool costs nothing until the first large call.
 *
 * Contract (fk_parallel_for): run fn(context, t) for every t in [0, n_tasks) and return when all
 * have finished.  Which thread runs which task is unspecified, so a caller that wants results
 * independent of the thread count partitions its work into tasks by a rule that does not depend
 * on the thread count (fuel_kernel/cpu/parallel.h does).  The caller runs tasks too.
 *
 * Jobs.  A job is published by filling the job fields and then bumping `generation` (which the
 * sleeping workers wait on).  Tasks are claimed from one 64-bit word holding (job number, tasks
 * not yet claimed) by compare-and-swap, counting down: a worker that wakes late, after its job is
 * over, finds that count at 0 (or the next job's number) and claims nothing.  It reads no job
 * field before its swap succeeds: the fields of an exhausted job may already be the next job's
 * (an earlier form compared the claimed index with the next job's task count, so a late worker
 * could run a task of the next job under the old job's number; that task ran twice and `remaining`
 * went below 0, and the caller waited for ever).  A successful swap means the job still had an
 * unclaimed task, so it is not over and its fields are still its own.  The caller waits only for
 * the job's tasks to finish (`remaining`), never for every worker to show up, so one worker that
 * the OS has not scheduled yet costs nothing.  Workers spin briefly between jobs (a plan calls
 * kernels back to back) and then sleep on a condition variable; workers past the latest job's
 * count (started under a higher setting) sleep at once.
 *
 * Sharing.  One job runs at a time.  A second Python thread that calls a kernel while the pool is
 * busy, and a task that itself calls a kernel, run their tasks serially on their own thread:
 * never a deadlock, never more threads than the setting.
 *
 * fork().  A child process has none of its parent's workers: an atfork handler resets the pool to
 * "no workers started" with fresh locks and no job open (one forked in the middle of another
 * thread's job is closed), and the child starts its own workers on its first large call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                       /* sched_getaffinity, CPU_COUNT */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "pool.h"

#define FK_POOL_SPIN 20000                /* pause iterations before a worker or waiter sleeps */
#define FK_POOL_MAX_TASKS ((int64_t)1 << 31)   /* a job's task count fits the claim word's low half */

/* The three words every thread touches live on cache lines of their own: the spinning workers
 * read `generation` without end, and each task claims through `claim` and finishes through
 * `remaining`; sharing a line would make every claim evict it from every spinning core. */
typedef struct {
    _Alignas(64) atomic_uint_fast64_t generation;   /* bumped once per job: sleepers wait for it */
    _Alignas(64) atomic_uint_fast64_t claim;        /* job number << 32 | tasks not yet claimed */
    _Alignas(64) atomic_int_fast64_t remaining;     /* tasks of the current job not yet finished */
    _Alignas(64) pthread_mutex_t lock;              /* guards sleeping, waking, starting workers */
    pthread_mutex_t busy;                 /* held by the thread whose job the pool is running */
    pthread_cond_t wake;                  /* a new job for sleeping workers */
    pthread_cond_t done;                  /* the last task of a job finished */
    int n_started;                        /* workers started (they never exit) */
    atomic_int n_working;                 /* workers that may claim tasks of the current job */
    atomic_int sleeping_waiter;           /* the caller sleeps on `done` */
    /* the job: written before `claim` names it, constant until all its tasks are finished */
    fk_task_fn fn;
    void *context;
    int64_t n_tasks;
} fk_pool;

static fk_pool g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .busy = PTHREAD_MUTEX_INITIALIZER,
                         .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
static atomic_int_fast64_t g_calls = 0;  /* fk_parallel_for calls with more than one task */
static atomic_int g_num_threads = 0;      /* the setting; 0 = not yet read from the affinity mask */
static _Thread_local int tls_in_job = 0;  /* this thread is running a job's tasks */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claim and run tasks of job `job` until none is left.  The job's fields are read only once a
 * claim has succeeded (see "Jobs" above). */
static void run_tasks(uint_fast64_t job) {
    uint_fast64_t word = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
    for (;;) {
        int64_t left = (int64_t)(word & 0xffffffffu);
        if ((word >> 32) != (job & 0xffffffffu) || left == 0) return;
        if (!atomic_compare_exchange_weak_explicit(&g_pool.claim, &word, word - 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;                     /* `word` now holds the current value: look again */
        g_pool.fn(g_pool.context, g_pool.n_tasks - left);
        /* seq_cst with the waiter's flag store and `remaining` load: one of the two sees the other */
        if (atomic_fetch_sub(&g_pool.remaining, 1) == 1 && atomic_load(&g_pool.sleeping_waiter)) {
            pthread_mutex_lock(&g_pool.lock);
            pthread_cond_signal(&g_pool.done);
            pthread_mutex_unlock(&g_pool.lock);
        }
        word = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    int index = (int)(intptr_t)arg;
    uint_fast64_t seen = 0;
    tls_in_job = 1;                       /* a kernel called from a task never nests a job */
    for (;;) {
        uint_fast64_t now = seen;
        /* a worker the latest job left out (the setting was lowered after it started) sleeps at
         * once: spinning, each such worker would take a core from the job's own threads after
         * every job (2 threads on 2 cores after 70 had run: 1024^3 at 27 ms instead of 11) */
        int spins = index < atomic_load_explicit(&g_pool.n_working, memory_order_acquire) ? FK_POOL_SPIN : 0;
        for (int spin = 0; spin < spins; spin++) {
            now = atomic_load_explicit(&g_pool.generation, memory_order_acquire);
            if (now != seen) break;
            cpu_relax();
        }
        if (now == seen) {
            pthread_mutex_lock(&g_pool.lock);
            while ((now = atomic_load_explicit(&g_pool.generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&g_pool.wake, &g_pool.lock);
            pthread_mutex_unlock(&g_pool.lock);
        }
        seen = now;
        if (index < atomic_load_explicit(&g_pool.n_working, memory_order_acquire)) run_tasks(now);
    }
    return NULL;
}

static void reset_after_fork(void) {
    pthread_mutex_t fresh_mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    g_pool.lock = fresh_mutex;
    g_pool.busy = fresh_mutex;
    g_pool.wake = fresh_cond;
    g_pool.done = fresh_cond;
    g_pool.n_started = 0;
    atomic_store(&g_pool.n_working, 0);
    atomic_store(&g_pool.sleeping_waiter, 0);
    /* a job another thread of the parent was running has no thread here to finish it: close it, so
     * that the child's first workers (which look at the latest job as they start) claim nothing */
    atomic_store(&g_pool.claim, (atomic_load(&g_pool.generation) & 0xffffffffu) << 32);
    tls_in_job = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_after_fork); }

/* Start workers until `wanted` run (fewer if the system refuses threads); called holding busy.
 * A new worker starts having seen no job: it looks at once at the latest one, which the caller is
 * about to replace (a finished job has no task left to claim), then waits for the next. */
static int ensure_workers(int wanted) {
    pthread_once(&g_atfork_once, register_atfork);
    if (wanted > FK_POOL_MAX_THREADS - 1) wanted = FK_POOL_MAX_THREADS - 1;
    pthread_mutex_lock(&g_pool.lock);
    while (g_pool.n_started < wanted) {
        pthread_t thread;
        pthread_attr_t attr;
        int failed;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        failed = pthread_create(&thread, &attr, worker_main, (void *)(intptr_t)g_pool.n_started);
        pthread_attr_destroy(&attr);
        if (failed) break;
        g_pool.n_started++;
    }
    pthread_mutex_unlock(&g_pool.lock);
    return g_pool.n_started;
}

int fk_affinity_cpus(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    return 1;
}

int fk_get_num_threads(void) {
    int n = atomic_load_explicit(&g_num_threads, memory_order_relaxed);
    if (n == 0) {
        n = fk_affinity_cpus();
        if (n > FK_POOL_MAX_THREADS) n = FK_POOL_MAX_THREADS;
        atomic_store(&g_num_threads, n);
    }
    return n;
}

int fk_set_num_threads(int n) {
    if (n < 1 || n > FK_POOL_MAX_THREADS) return -1;
    atomic_store(&g_num_threads, n);
    return 0;
}

int fk_parallel_for(int64_t n_tasks, fk_task_fn fn, void *context) {
    int threads = fk_get_num_threads(), workers, spin;
    int64_t task;
    uint_fast64_t job;
    if (n_tasks <= 0) return 1;
    if (n_tasks > 1) atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
    if (threads > n_tasks) threads = (int)n_tasks;
    if (threads <= 1 || n_tasks >= FK_POOL_MAX_TASKS || tls_in_job ||
        pthread_mutex_trylock(&g_pool.busy) != 0) {
        for (task = 0; task < n_tasks; task++) fn(context, task);
        return 1;
    }
    workers = ensure_workers(threads - 1);
    if (workers == 0) {
        pthread_mutex_unlock(&g_pool.busy);
        for (task = 0; task < n_tasks; task++) fn(context, task);
        return 1;
    }
    /* every task of the previous job is finished: its fields are free to change */
    job = atomic_load_explicit(&g_pool.generation, memory_order_relaxed) + 1;
    g_pool.fn = fn;
    g_pool.context = context;
    g_pool.n_tasks = n_tasks;
    atomic_store_explicit(&g_pool.remaining, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&g_pool.n_working, threads - 1, memory_order_relaxed);
    atomic_store_explicit(&g_pool.claim, (job & 0xffffffffu) << 32 | (uint_fast64_t)n_tasks, memory_order_release);
    pthread_mutex_lock(&g_pool.lock);     /* a worker between its check and its wait sees this */
    atomic_store_explicit(&g_pool.generation, job, memory_order_release);
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.lock);

    tls_in_job = 1;
    run_tasks(job);
    tls_in_job = 0;

    for (spin = 0; spin < FK_POOL_SPIN && atomic_load_explicit(&g_pool.remaining, memory_order_acquire); spin++)
        cpu_relax();
    if (atomic_load_explicit(&g_pool.remaining, memory_order_acquire)) {
        pthread_mutex_lock(&g_pool.lock);
        atomic_store(&g_pool.sleeping_waiter, 1);
        while (atomic_load(&g_pool.remaining))
            pthread_cond_wait(&g_pool.done, &g_pool.lock);
        atomic_store_explicit(&g_pool.sleeping_waiter, 0, memory_order_relaxed);
        pthread_mutex_unlock(&g_pool.lock);
    }
    pthread_mutex_unlock(&g_pool.busy);
    return threads;
}

int fk_pool_workers_started(void) { return g_pool.n_started; }

int64_t fk_pool_calls(void) { return atomic_load_explicit(&g_calls, memory_order_relaxed); }
