/* The intra-op thread pool.
 *
 * size - 1 persistent worker threads plus the calling thread, which runs
 * share ith = 0. One parallel region uses the workers at a time (the
 * `region` mutex); a caller that finds it taken runs its work alone, which
 * also makes nested use from inside a kernel safe.
 *
 * Shares 1 .. nth-1 are claimed, not assigned: a worker that wakes takes
 * the next unclaimed share, and so does the caller once share 0 is done.
 * The cores are shared with the Python thread issuing ops and the stream
 * workers, so a woken worker may wait a scheduler slice (milliseconds) for
 * a core; with claiming, a share no worker has started by then runs on the
 * caller instead of the region waiting for it. A share runs exactly once,
 * on whichever thread claimed it, so kernels must not tie a share to a
 * thread (per-share scratch is indexed by ith, never thread-local across
 * shares), as the nth = 1 fallback already requires.
 *
 * Every field below `lock` is read and written only under `lock`, so the
 * mutex orders all of them: the region's description is published to the
 * workers by the unlock that follows its writing and the lock each worker
 * takes before reading it and claiming; results come back the same way.
 * The shares run outside the lock, and what they write to memory is
 * ordered before the caller's return by the same lock/unlock pairs around
 * `remaining`.
 *
 * Waking a sleeping thread costs tens of microseconds on a VM, as much
 * as a mid-sized op takes, so both sides poll a while before sleeping: a
 * worker for the next generation, the caller for the claimed shares
 * (`generation` and `shares_done` are atomic for these unlocked peeks;
 * their writes still happen under `lock`).
 *
 * Binding. When the process's CPU mask has exactly as many cores as the
 * pool has threads (the default size) and TORCH_TPU_BIND_THREADS is not
 * 0, pool worker ith is bound to the mask's ith core and the first
 * stream worker to start (chip 0's default stream, in any program that
 * begins with an op) to its first core, so that the halves of its
 * regions never share a core. Left to the OS, a worker woken after a
 * pause was often placed on the core of the thread that woke it, and
 * both halves of a region then shared one core until the load balancer
 * moved one, milliseconds later: on a 2-core guest a 1M element add
 * issued after a pause took 0.45-0.50 ms and 20 back to back 0.27-0.29
 * ms each, against 0.26-0.34 and 0.15-0.17 bound (2026-12-07). Later
 * stream workers (other chips, other streams) are left to the OS: bound
 * to the first core, two busy streams took 1.5x as long as unbound, and
 * bound to a pool worker's core, a side stream's ops took twice as long;
 * unbound, both ran as fast as unbound workers do. A smaller pool than
 * the mask is not bound (several processes each asking for fewer threads
 * would otherwise all crowd onto the mask's first cores), and a thread
 * of another program busy on a bound core slows every op where the OS
 * would have moved an unbound worker: TORCH_TPU_BIND_THREADS=0 is for
 * such machines. Host threads (Python's) are never bound. */
#define _GNU_SOURCE /* cpu_set_t, pthread_setaffinity_np */

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime_internal.h"

typedef tpu_status (*pool_fn)(void *ctx, int ith, int nth);

static struct {
    pthread_mutex_t region; /* held by the caller of a multi-thread region */
    int size;               /* threads, caller included; set by init */
    int started;            /* worker threads running (first region starts them) */
    bool start_tried;
    int cpus[TPU_THREADS_MAX]; /* the mask's cores: pool worker ith binds to cpus[ith] */
    bool bound;             /* whether threads are bound (see "Binding") */

    pthread_mutex_t lock;
    pthread_cond_t wake_cv; /* workers wait for a new generation */
    pthread_cond_t done_cv; /* the caller waits for remaining == 0 */
    _Atomic uint64_t generation;  /* bumped once per region */
    _Atomic uint64_t shares_done; /* worker shares returned, all regions */
    pool_fn fn;
    void *ctx;
    int nth;
    int next_share;         /* the lowest share of this region nobody has claimed */
    int remaining;          /* shares 1 .. nth-1 of this region not yet returned */
    int err_ith;            /* lowest failing share >= 1, INT_MAX if none */
    tpu_status err;
    char err_msg[TPU_MSG_MAX];
} g_pool = {
    .region = PTHREAD_MUTEX_INITIALIZER,
    .size = 1,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};

/* Fills cpus with the cores of the process's CPU mask (the main thread's,
 * whatever thread initialises the runtime); whether it has exactly
 * `size` of them. */
static bool mask_has_exactly(int *cpus, int size) {
    cpu_set_t mask;
    if (sched_getaffinity(getpid(), sizeof mask, &mask) != 0 || CPU_COUNT(&mask) != size)
        return false;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < size; c++)
        if (CPU_ISSET(c, &mask))
            cpus[n++] = c;
    return n == size;
}

void tpu_pool_setup(int num_threads, bool bind) {
    g_pool.size = num_threads;
    /* One thread has nothing to be kept apart from. */
    g_pool.bound = bind && num_threads >= 2 && mask_has_exactly(g_pool.cpus, num_threads);
}

/* Binds t to cpu, unless the process may no longer run there (the main
 * thread's mask was narrowed after init): then t keeps the mask it
 * inherited. (Not the creating thread's mask: pool workers are created
 * by a stream worker, itself bound.) */
static void bind_to(pthread_t t, int cpu) {
    cpu_set_t now;
    if (sched_getaffinity(getpid(), sizeof now, &now) != 0 || !CPU_ISSET(cpu, &now))
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    (void)pthread_setaffinity_np(t, sizeof one, &one);
}

void tpu_pool_bind_stream_worker(pthread_t t) {
    static atomic_bool taken; /* the first stream worker has the core */
    if (g_pool.bound && !atomic_exchange(&taken, true))
        bind_to(t, g_pool.cpus[0]);
}

int tpu_pool_num_threads(void) {
    if (tpu_rt_enter() != TPU_OK)
        return 1;
    return g_pool.size;
}

/* How long a thread of the pool polls before it sleeps: as the stream's
 * worker (stream.c, WORKER_SPIN_NS), since it serves that worker's next
 * op; the caller waits for claimed shares as long. */
#define POOL_SPIN_NS 1000000

/* Claims the next unclaimed share of the current region: its ith, or 0
 * when none is left. Under `lock`. */
static int claim_locked(void) {
    return g_pool.next_share < g_pool.nth ? g_pool.next_share++ : 0;
}

/* Records share ith's result and counts it returned. Under `lock`. */
static void share_done_locked(int ith, tpu_status st) {
    if (st != TPU_OK && ith < g_pool.err_ith) {
        /* The message is in this thread's slot: carry it over to the
         * caller, who reports the first failing share by ith. */
        g_pool.err_ith = ith;
        g_pool.err = st;
        snprintf(g_pool.err_msg, sizeof g_pool.err_msg, "%s", tpu_last_error_message());
    }
    atomic_fetch_add_explicit(&g_pool.shares_done, 1, memory_order_release);
    if (--g_pool.remaining == 0)
        pthread_cond_signal(&g_pool.done_cv);
}

/* A worker's loop: claim and run shares of each new region while any is
 * left. */
static void *pool_worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_pool.lock);
    /* Workers are started by the first region before it bumps the
     * generation, while it holds `region`: generation 0 is "seen". */
    uint64_t seen = 0;
    for (;;) {
        if (atomic_load_explicit(&g_pool.generation, memory_order_relaxed) == seen) {
            pthread_mutex_unlock(&g_pool.lock);
            tpu_rt_poll_until(&g_pool.generation, seen + 1, POOL_SPIN_NS);
            pthread_mutex_lock(&g_pool.lock);
        }
        while (atomic_load_explicit(&g_pool.generation, memory_order_relaxed) == seen)
            pthread_cond_wait(&g_pool.wake_cv, &g_pool.lock);
        seen = atomic_load_explicit(&g_pool.generation, memory_order_relaxed);
        for (int ith; (ith = claim_locked()) != 0;) {
            pool_fn fn = g_pool.fn;
            void *ctx = g_pool.ctx;
            int nth = g_pool.nth;
            pthread_mutex_unlock(&g_pool.lock);
            tpu_status st = fn(ctx, ith, nth);
            pthread_mutex_lock(&g_pool.lock);
            share_done_locked(ith, st);
        }
    }
    return NULL;
}

/* Starts the workers once; runs holding `region`. A thread that cannot be
 * created shrinks the pool instead of failing the op. */
static void start_workers(void) {
    if (g_pool.start_tried)
        return;
    g_pool.start_tried = true;
    /* Workers must not take the process's signals (Python expects them on
     * the main thread): block all while creating, they inherit the mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int ith = 1; ith < g_pool.size; ith++) {
        pthread_t t;
        if (pthread_create(&t, NULL, pool_worker, NULL) != 0)
            break;
        if (g_pool.bound)
            bind_to(t, g_pool.cpus[ith]);
        pthread_detach(t);
        g_pool.started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

tpu_status tpu_pool_run(pool_fn fn, void *ctx, int nth) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!fn)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_pool_run: fn is NULL");
    if (nth > g_pool.size)
        nth = g_pool.size;
    if (nth <= 1)
        return fn(ctx, 0, 1);
    if (pthread_mutex_trylock(&g_pool.region) != 0)
        return fn(ctx, 0, 1); /* the pool is busy (or we are inside it) */

    start_workers();
    if (nth > g_pool.started + 1)
        nth = g_pool.started + 1;
    if (nth <= 1) {
        pthread_mutex_unlock(&g_pool.region);
        return fn(ctx, 0, 1);
    }

    pthread_mutex_lock(&g_pool.lock);
    g_pool.fn = fn;
    g_pool.ctx = ctx;
    g_pool.nth = nth;
    g_pool.next_share = 1;
    g_pool.remaining = nth - 1;
    g_pool.err_ith = INT_MAX;
    g_pool.err = TPU_OK;
    uint64_t done_target =
        atomic_load_explicit(&g_pool.shares_done, memory_order_relaxed) + (uint64_t)(nth - 1);
    atomic_fetch_add_explicit(&g_pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&g_pool.wake_cv);
    pthread_mutex_unlock(&g_pool.lock);

    st = fn(ctx, 0, nth);
    /* Share 0's message is this thread's; a share run below may overwrite it. */
    char msg0[TPU_MSG_MAX];
    if (st != TPU_OK)
        snprintf(msg0, sizeof msg0, "%s", tpu_last_error_message());

    /* Run what no worker has claimed yet rather than wait for one to get
     * a core. */
    pthread_mutex_lock(&g_pool.lock);
    for (int ith; (ith = claim_locked()) != 0;) {
        pthread_mutex_unlock(&g_pool.lock);
        tpu_status sk = fn(ctx, ith, nth);
        pthread_mutex_lock(&g_pool.lock);
        share_done_locked(ith, sk);
    }
    pthread_mutex_unlock(&g_pool.lock);

    tpu_rt_poll_until(&g_pool.shares_done, done_target, POOL_SPIN_NS);
    pthread_mutex_lock(&g_pool.lock);
    while (g_pool.remaining > 0)
        pthread_cond_wait(&g_pool.done_cv, &g_pool.lock);
    tpu_status worker_err = g_pool.err;
    char msg[TPU_MSG_MAX];
    if (worker_err != TPU_OK)
        memcpy(msg, g_pool.err_msg, sizeof msg);
    pthread_mutex_unlock(&g_pool.lock);
    pthread_mutex_unlock(&g_pool.region);

    /* Share 0 comes first by ith. */
    if (st != TPU_OK)
        return tpu_set_error(st, "%s", msg0);
    if (worker_err != TPU_OK)
        return tpu_set_error(worker_err, "%s", msg);
    return TPU_OK;
}
