/* Blocking waits of host threads, and the hooks around them.
 *
 * A thread that blocks in the runtime (waiting for a stream, for room in a
 * stream's queue, for an event) may be holding a lock of its caller that
 * other threads need, Python's GIL above all. The embedding layer installs
 * a pair of hooks that give such a lock up for the length of the wait and
 * take it back afterwards (the Python bindings release the GIL, as CUDA's
 * bindings do around every blocking call). Worker threads never hold such
 * a lock, so for them the hooks do nothing.
 *
 * The hooks are called with no runtime lock held: taking the GIL back
 * while holding a stream's mutex could deadlock with a thread that holds
 * the GIL and wants that mutex. */
#define _GNU_SOURCE /* syscall */

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_internal.h"

uint64_t tpu_rt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

bool tpu_rt_poll_until(const _Atomic uint64_t *counter, uint64_t target, uint64_t ns) {
    uint64_t start = tpu_rt_now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(counter, memory_order_acquire) >= target)
            return true;
        cpu_relax();
        if (i % 64 == 0) { /* about a microsecond of pauses */
            if (tpu_rt_now_ns() - start > ns)
                return false;
            /* Lets a runnable thread on this core (the one polled for,
             * often) run now instead of at the end of our time slice:
             * without it a 2-thread op issued from Python took 90 us on
             * 2 cores instead of 12. */
            sched_yield();
        }
    }
}

void tpu_rt_spin_lock(_Atomic bool *lock) {
    for (unsigned i = 1;; i++) {
        if (!atomic_load_explicit(lock, memory_order_relaxed) &&
            !atomic_exchange_explicit(lock, true, memory_order_acquire))
            return;
        cpu_relax();
        if (i % 64 == 0)
            sched_yield(); /* the holder may be off the core */
    }
}

void tpu_rt_spin_unlock(_Atomic bool *lock) {
    atomic_store_explicit(lock, false, memory_order_release);
}

/* 1: membarrier's expedited command is registered, the light side needs
 * no fence; 0: not available (an old kernel, a seccomp filter), both
 * sides fence. Registered once, before the first stream's worker starts;
 * a light barrier that still reads 0 fences, which is safe either way. */
static atomic_int g_membarrier_ok;
static pthread_once_t g_membarrier_once = PTHREAD_ONCE_INIT;

static void membarrier_register(void) {
    /* TORCH_TPU_NO_MEMBARRIER=1: the fenced pair, as on a kernel without
     * membarrier (the tests run both). */
    const char *off = getenv("TORCH_TPU_NO_MEMBARRIER");
    if (off && off[0] && strcmp(off, "0") != 0)
        return;
#ifdef SYS_membarrier
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
        atomic_store(&g_membarrier_ok, 1);
#endif
}

void tpu_rt_barriers_setup(void) {
    pthread_once(&g_membarrier_once, membarrier_register);
}

void tpu_rt_light_barrier(void) {
    if (atomic_load_explicit(&g_membarrier_ok, memory_order_relaxed))
        atomic_signal_fence(memory_order_seq_cst);
    else
        atomic_thread_fence(memory_order_seq_cst);
}

void tpu_rt_heavy_barrier(void) {
#ifdef SYS_membarrier
    if (atomic_load_explicit(&g_membarrier_ok, memory_order_relaxed)) {
        (void)syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
        return;
    }
#endif
    atomic_thread_fence(memory_order_seq_cst);
}

typedef struct {
    void *(*begin)(void);
    void (*end)(void *token);
} wait_hooks;

/* Installed once at start-up, read on every wait: an atomic pointer to an
 * immutable pair, so a reader never sees half of an update. */
static const wait_hooks k_no_hooks = {NULL, NULL};
static wait_hooks g_hooks_storage;
static _Atomic(const wait_hooks *) g_hooks = &k_no_hooks;

void tpu_runtime_set_wait_hooks(void *(*begin)(void), void (*end)(void *token)) {
    /* One writer at start-up: the Python module's import, itself under the
     * import lock. Storing the pair before publishing it (release) lets
     * readers (acquire) see both halves. */
    if (!begin || !end) {
        atomic_store_explicit(&g_hooks, &k_no_hooks, memory_order_release);
        return;
    }
    g_hooks_storage.begin = begin;
    g_hooks_storage.end = end;
    atomic_store_explicit(&g_hooks, &g_hooks_storage, memory_order_release);
}

tpu_wait_token tpu_rt_wait_begin(void) {
    const wait_hooks *h = atomic_load_explicit(&g_hooks, memory_order_acquire);
    tpu_wait_token t = {h, h->begin ? h->begin() : NULL};
    return t;
}

void tpu_rt_wait_end(tpu_wait_token token) {
    const wait_hooks *h = token.hooks;
    if (h && h->end)
        h->end(token.state);
}
