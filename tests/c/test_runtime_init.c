/* Initialisation: configuration from the environment (valid values in
 * fresh forked children, malformed values in this process before it
 * initialises), chip properties, generations, fork detection. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/runtime.h"

#define GIB (1024ull * 1024ull * 1024ull)

static const char *const k_vars[] = {
    "TORCH_TPU_CHIPS",     "TORCH_TPU_GENERATION", "TORCH_TPU_MEMORY_LIMIT",
    "TORCH_TPU_NUM_THREADS", "TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE",
    "TORCH_TPU_REFERENCE", "TORCH_TPU_BIND_THREADS",
};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof k_vars / sizeof k_vars[0]; i++)
        unsetenv(k_vars[i]);
}

/* Runs fn in a forked child and returns its exit status (0: its checks
 * passed). Failing checks print from the child. */
static int in_child(void (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_store(&check_failed_, 0); /* the parent's failures are not the child's */
        fn();
        _exit(atomic_load(&check_failed_) ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* ------------------------------------------- valid configs, in children */

static void child_defaults(void) {
    clear_env();
    CHECK_OK(tpu_runtime_init());
    CHECK(!tpu_runtime_is_forked()); /* the parent never initialised */
    CHECK(tpu_chip_count() == 1);
    tpu_chip_props p;
    CHECK_OK(tpu_chip_get_props(0, &p));
    CHECK(strcmp(p.name, "TPU v5e (virtual)") == 0);
    CHECK(p.generation == TPU_GEN_V5E);
    CHECK(p.total_memory == 16 * GIB && p.hbm_bytes == 16 * GIB);
    CHECK(p.hbm_bandwidth == 819e9 && p.peak_bf16_flops == 197e12 && p.mxu_size == 128);
    CHECK(p.chip_count == 1);
    /* One thread per core of the process's CPU mask. */
    cpu_set_t mask;
    long cores = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask)
                                                               : sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(tpu_pool_num_threads() == (cores < 1 ? 1 : cores > 1024 ? 1024 : cores));
    CHECK(tpu_mode_get() == TPU_MODE_STRICT);
}

static void check_generation(const char *name, tpu_generation gen, uint64_t hbm, double bw,
                             double flops, int mxu) {
    clear_env();
    setenv("TORCH_TPU_GENERATION", name, 1);
    setenv("TORCH_TPU_CHIPS", "3", 1);
    tpu_chip_props p;
    CHECK_OK(tpu_chip_get_props(2, &p));
    CHECK(p.generation == gen && p.hbm_bytes == hbm && p.total_memory == hbm);
    CHECK(p.hbm_bandwidth == bw && p.peak_bf16_flops == flops && p.mxu_size == mxu);
    CHECK(p.chip_count == 3);
    CHECK(strstr(p.name, "(virtual)") != NULL);
}

static void child_v5p(void) {
    check_generation("v5p", TPU_GEN_V5P, 95 * GIB, 2765e9, 459e12, 128);
}
static void child_v6e(void) {
    check_generation("V6E", TPU_GEN_V6E, 32 * GIB, 1640e9, 918e12, 256);
}
static void child_v7x(void) {
    check_generation("v7x", TPU_GEN_V7X, 192 * GIB, 7370e9, 2307e12, 256);
}

static uint64_t capacity_with(const char *limit) {
    clear_env();
    setenv("TORCH_TPU_MEMORY_LIMIT", limit, 1);
    tpu_chip_props p;
    memset(&p, 0, sizeof p);
    CHECK_OK(tpu_chip_get_props(0, &p));
    uint64_t free_b = 0, total = 0;
    CHECK_OK(tpu_mem_get_info(0, &free_b, &total));
    CHECK(total == p.total_memory && free_b == total);
    return p.total_memory;
}

static void child_limit_k(void) {
    CHECK(capacity_with("7k") == 7 * 1024);
}
static void child_limit_m(void) {
    CHECK(capacity_with("512M") == 512ull << 20);
}
static void child_limit_g(void) {
    CHECK(capacity_with("16G") == 16 * GIB); /* exactly the HBM: allowed */
}
static void child_limit_bytes(void) {
    CHECK(capacity_with("1048576") == 1048576);
}

static void child_modes_debug(void) {
    clear_env();
    setenv("TPU_LAUNCH_BLOCKING", "1", 1);
    setenv("TORCH_TPU_DEFER_AND_FUSE", "1", 1); /* debug wins */
    CHECK(tpu_mode_get() == TPU_MODE_DEBUG);
}

static void child_modes_fused(void) {
    clear_env();
    setenv("TPU_LAUNCH_BLOCKING", "0", 1);
    setenv("TORCH_TPU_DEFER_AND_FUSE", "true", 1);
    setenv("TORCH_TPU_REFERENCE", "1", 1);
    setenv("TORCH_TPU_NUM_THREADS", "5", 1);
    CHECK(tpu_mode_get() == TPU_MODE_FUSED);
    CHECK(tpu_kernels_get_reference());
    CHECK(tpu_pool_num_threads() == 5);
}

static void child_empty_values(void) {
    clear_env();
    setenv("TORCH_TPU_CHIPS", "", 1); /* `VAR= cmd` means the default */
    setenv("TORCH_TPU_GENERATION", "", 1);
    CHECK_OK(tpu_runtime_init());
    CHECK(tpu_chip_count() == 1);
}

/* ------------------------------------------ binding of compute threads */

/* What the binding children find: the process's mask, and the masks of a
 * pool worker and of a stream worker. */
typedef struct {
    pthread_t caller;
    atomic_int worker_seen;
    cpu_set_t worker_mask;
} bind_probe;

/* A share: on a thread other than the caller (a pool worker), notes its
 * mask; on the caller, lingers so that a worker gets to claim a share. */
static tpu_status probe_share(void *ctx, int ith, int nth) {
    (void)ith;
    (void)nth;
    bind_probe *p = ctx;
    if (!pthread_equal(pthread_self(), p->caller)) {
        if (!atomic_exchange(&p->worker_seen, 1))
            sched_getaffinity(0, sizeof p->worker_mask, &p->worker_mask);
    } else {
        sleep_ms(1);
    }
    return TPU_OK;
}

static void note_mask(void *ctx) {
    sched_getaffinity(0, sizeof(cpu_set_t), ctx);
}

/* The k-th core of `mask`, or -1. */
static int kth_core(const cpu_set_t *mask, int k) {
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, mask) && k-- == 0)
            return c;
    return -1;
}

/* On a stream worker, as kernels run: notes the worker's mask, then runs
 * 2-thread regions (the first starts the pool's workers, from this
 * worker) until a pool worker ran a share. */
typedef struct {
    bind_probe probe;
    cpu_set_t stream_mask;
} worker_probe;

static void probe_on_worker(void *ctx) {
    worker_probe *w = ctx;
    sched_getaffinity(0, sizeof w->stream_mask, &w->stream_mask);
    w->probe.caller = pthread_self();
    for (int rep = 0; rep < 1000 && !atomic_load(&w->probe.worker_seen); rep++)
        if (tpu_pool_run(probe_share, &w->probe, 2) != TPU_OK)
            break;
}

/* *pool and *stream get the masks of a pool worker and of the default
 * stream's worker. */
static void probe_bindings(cpu_set_t *pool, cpu_set_t *stream) {
    worker_probe w;
    memset(&w, 0, sizeof w);
    tpu_stream *s;
    CHECK_OK(tpu_stream_get(0, 0, &s));
    CHECK_OK(tpu_stream_submit_host_fn(s, probe_on_worker, &w));
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(atomic_load(&w.probe.worker_seen));
    *pool = w.probe.worker_mask;
    *stream = w.stream_mask;
}

/* The mask of stream `index` of chip 0's worker (created by this call if
 * new). */
static void stream_mask(int index, cpu_set_t *mask) {
    tpu_stream *s;
    CHECK_OK(tpu_stream_get(0, index, &s));
    CHECK_OK(tpu_stream_submit_host_fn(s, note_mask, mask));
    CHECK_OK(tpu_stream_synchronize(s));
}

/* Bound (the default, with a pool as large as the mask): the first stream
 * worker on the mask's first core, each pool worker on another; later
 * stream workers and the host thread keep the process's mask, and a
 * stream created after that mask changed keeps the new one. */
static void child_bound(void) {
    clear_env();
    cpu_set_t before, after, pool, stream, want;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    char n[16];
    snprintf(n, sizeof n, "%d", CPU_COUNT(&before));
    setenv("TORCH_TPU_NUM_THREADS", n, 1);
    CHECK_OK(tpu_runtime_init());
    probe_bindings(&pool, &stream);
    CPU_ZERO(&want);
    CPU_SET(kth_core(&before, 0), &want);
    CHECK(CPU_EQUAL(&stream, &want));
    stream_mask(1, &stream); /* left to the OS */
    CHECK(CPU_EQUAL(&stream, &before));
    /* The pool worker that ran share 1 (any of them, with more than two
     * cores) has one core of the mask to itself, not the first. */
    cpu_set_t in_mask;
    CPU_AND(&in_mask, &pool, &before);
    CHECK(CPU_COUNT(&pool) == 1 && CPU_COUNT(&in_mask) == 1 &&
          !CPU_ISSET(kth_core(&before, 0), &pool));
    CHECK(sched_getaffinity(0, sizeof after, &after) == 0 && CPU_EQUAL(&after, &before));
    CPU_ZERO(&want);
    CPU_SET(kth_core(&before, 1), &want);
    /* Narrowed to the second core: the next stream's worker inherits it. */
    CHECK(sched_setaffinity(0, sizeof want, &want) == 0);
    stream_mask(2, &stream);
    CHECK(CPU_EQUAL(&stream, &want));
}

/* A pool smaller than the mask (as several processes sharing the cores
 * would ask for) is not bound. Needs 3 cores. */
static void child_fewer_threads(void) {
    clear_env();
    cpu_set_t before, pool, stream;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    setenv("TORCH_TPU_NUM_THREADS", "2", 1);
    CHECK_OK(tpu_runtime_init());
    probe_bindings(&pool, &stream);
    CHECK(CPU_EQUAL(&pool, &before) && CPU_EQUAL(&stream, &before));
}

/* TORCH_TPU_BIND_THREADS=0: every thread keeps the process's mask. */
static void child_unbound(void) {
    clear_env();
    setenv("TORCH_TPU_NUM_THREADS", "2", 1);
    setenv("TORCH_TPU_BIND_THREADS", "0", 1);
    cpu_set_t before, pool, stream;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    CHECK_OK(tpu_runtime_init());
    probe_bindings(&pool, &stream);
    CHECK(CPU_EQUAL(&pool, &before) && CPU_EQUAL(&stream, &before));
}

/* A pool with more threads than the mask has cores is not bound: two
 * threads on one core would be worse than letting the OS move them. */
static void child_too_many_threads(void) {
    clear_env();
    cpu_set_t before, pool, stream;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    char n[16];
    snprintf(n, sizeof n, "%d", CPU_COUNT(&before) + 1);
    setenv("TORCH_TPU_NUM_THREADS", n, 1);
    CHECK_OK(tpu_runtime_init());
    probe_bindings(&pool, &stream);
    CHECK(CPU_EQUAL(&pool, &before) && CPU_EQUAL(&stream, &before));
}

static void test_binding(void) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0 || CPU_COUNT(&mask) < 2) {
        printf("skip test_binding: fewer than 2 cores in the CPU mask\n");
        return;
    }
    void (*children[])(void) = {child_bound, child_unbound, child_too_many_threads,
                                child_fewer_threads};
    size_t count = sizeof children / sizeof children[0];
    if (CPU_COUNT(&mask) < 3) {
        printf("skip child_fewer_threads: fewer than 3 cores in the CPU mask\n");
        count--;
    }
    for (size_t i = 0; i < count; i++) {
        int rc = in_child(children[i]);
        CHECK(rc == 0);
        if (rc != 0)
            fprintf(stderr, "    binding child %zu exited with %d\n", i, rc);
    }
}

static void test_valid_configs(void) {
    void (*children[])(void) = {
        child_defaults,     child_v5p,          child_v6e,         child_v7x,
        child_limit_k,      child_limit_m,      child_limit_g,     child_limit_bytes,
        child_modes_debug,  child_modes_fused,  child_empty_values,
    };
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++) {
        int rc = in_child(children[i]);
        CHECK(rc == 0);
        if (rc != 0)
            fprintf(stderr, "    child %zu exited with %d\n", i, rc);
    }
}

/* --------------------------------------- malformed values, in this process */

static void check_rejected(const char *var, const char *value) {
    clear_env();
    setenv(var, value, 1);
    tpu_clear_error();
    CHECK_STATUS(tpu_runtime_init(), TPU_ERR_INVALID_ARG);
    const char *msg = tpu_last_error_message();
    int names_both = strstr(msg, var) != NULL && strstr(msg, value) != NULL;
    CHECK(names_both);
    if (!names_both)
        fprintf(stderr, "    %s='%s' gave: %s\n", var, value, msg);
    /* The runtime stays uninitialised; every call reports the problem. */
    CHECK(tpu_chip_count() == 0);
    tpu_stream *s;
    CHECK_STATUS(tpu_stream_get(0, 0, &s), TPU_ERR_INVALID_ARG);
    CHECK(tpu_pool_num_threads() == 1);
}

static void test_malformed(void) {
    check_rejected("TORCH_TPU_CHIPS", "0");
    check_rejected("TORCH_TPU_CHIPS", "65");
    check_rejected("TORCH_TPU_CHIPS", "two");
    check_rejected("TORCH_TPU_CHIPS", "2x");
    check_rejected("TORCH_TPU_CHIPS", "-1");
    check_rejected("TORCH_TPU_CHIPS", " 2");
    check_rejected("TORCH_TPU_CHIPS", "99999999999999999999");
    check_rejected("TORCH_TPU_GENERATION", "v4");
    check_rejected("TORCH_TPU_MEMORY_LIMIT", "0");
    check_rejected("TORCH_TPU_MEMORY_LIMIT", "12Q");
    check_rejected("TORCH_TPU_MEMORY_LIMIT", "-5");
    check_rejected("TORCH_TPU_MEMORY_LIMIT", "1.5G");
    check_rejected("TORCH_TPU_MEMORY_LIMIT", "17G"); /* above the 16 GiB of a v5e */
    check_rejected("TORCH_TPU_MEMORY_LIMIT", "99999999999G");
    check_rejected("TORCH_TPU_NUM_THREADS", "0");
    check_rejected("TORCH_TPU_NUM_THREADS", "1025");
    check_rejected("TPU_LAUNCH_BLOCKING", "maybe");
    check_rejected("TORCH_TPU_DEFER_AND_FUSE", "2");
    check_rejected("TORCH_TPU_REFERENCE", "yes please");
    check_rejected("TORCH_TPU_BIND_THREADS", "2");
}

/* --------------------------------------------- generations, init, fork */

static void test_generation_names(void) {
    tpu_generation g = TPU_GEN_COUNT;
    CHECK_OK(tpu_generation_from_name("v5e", &g));
    CHECK(g == TPU_GEN_V5E);
    CHECK_OK(tpu_generation_from_name("V5P", &g));
    CHECK(g == TPU_GEN_V5P);
    CHECK_OK(tpu_generation_from_name("v7X", &g));
    CHECK(g == TPU_GEN_V7X);
    CHECK_STATUS(tpu_generation_from_name("v5", &g), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "'v5'");
    CHECK_STATUS(tpu_generation_from_name("v5ee", &g), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_generation_from_name(NULL, &g), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_generation_from_name("v5e", NULL), TPU_ERR_INVALID_ARG);
}

static void test_init(void) {
    clear_env();
    setenv("TORCH_TPU_CHIPS", "2", 1);
    setenv("TORCH_TPU_GENERATION", "v6e", 1);
    setenv("TORCH_TPU_MEMORY_LIMIT", "512m", 1);
    setenv("TORCH_TPU_NUM_THREADS", "3", 1);
    CHECK_OK(tpu_runtime_init());
    CHECK_OK(tpu_runtime_init()); /* idempotent */
    CHECK(tpu_chip_count() == 2);
    tpu_chip_props p;
    CHECK_OK(tpu_chip_get_props(1, &p));
    CHECK(strcmp(p.name, "TPU v6e (virtual)") == 0);
    CHECK(p.total_memory == 512ull << 20 && p.hbm_bytes == 32 * GIB && p.chip_count == 2);
    CHECK(tpu_pool_num_threads() == 3);
    CHECK_STATUS(tpu_chip_get_props(2, &p), TPU_ERR_INVALID_DEVICE);
    CHECK_CONTAINS(tpu_last_error_message(), "tpu:2");
    CHECK_STATUS(tpu_chip_get_props(-1, &p), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_chip_get_props(0, NULL), TPU_ERR_INVALID_ARG);

    /* The configuration is read once. */
    setenv("TORCH_TPU_CHIPS", "5", 1);
    setenv("TORCH_TPU_NUM_THREADS", "junk", 1);
    CHECK_OK(tpu_runtime_init());
    CHECK(tpu_chip_count() == 2);
    clear_env();
}

static void child_after_init(void) {
    CHECK(tpu_runtime_is_forked());
    void *p = NULL;
    tpu_clear_error();
    CHECK_STATUS(tpu_mem_alloc(0, 64, NULL, &p), TPU_ERR_FORKED);
    CHECK(strcmp(tpu_last_error_message(),
                 "torch-tpu was initialised before fork(); a forked child cannot use the device "
                 "(use the 'spawn' start method)") == 0);
    CHECK_STATUS(tpu_runtime_init(), TPU_ERR_FORKED);
    CHECK(tpu_chip_count() == 0);
    tpu_stream *s;
    CHECK_STATUS(tpu_stream_get(0, 0, &s), TPU_ERR_FORKED);
    tpu_event *e;
    CHECK_STATUS(tpu_event_create(&e), TPU_ERR_FORKED);
    CHECK_STATUS(tpu_chip_synchronize(0), TPU_ERR_FORKED);
    CHECK_STATUS(tpu_mem_free(p), TPU_ERR_FORKED);
    CHECK_STATUS(tpu_mode_set(TPU_MODE_DEBUG), TPU_ERR_FORKED);
}

static void nap(void *ctx) {
    (void)ctx;
    sleep_ms(5);
}

static void test_fork(void) {
    /* Give the parent live worker threads and memory first. */
    tpu_stream *s;
    void *p;
    CHECK_OK(tpu_stream_get(0, 1, &s));
    CHECK_OK(tpu_mem_alloc(0, 4096, s, &p));
    CHECK_OK(tpu_stream_submit_host_fn(s, nap, NULL));
    CHECK(in_child(child_after_init) == 0);
    CHECK(!tpu_runtime_is_forked());
    CHECK_OK(tpu_stream_synchronize(s)); /* the parent goes on */
    CHECK_OK(tpu_mem_free(p));
}

int main(void) {
    test_valid_configs(); /* before this process initialises */
    test_binding();
    test_malformed();
    test_generation_names();
    test_init();
    test_fork();
    return check_report();
}
