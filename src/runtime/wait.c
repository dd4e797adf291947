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
#define _POSIX_C_SOURCE 200809L

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
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
