/* Runtime initialisation: the configuration from the environment, read once,
 * and fork detection.
 *
 * Initialisation runs under a mutex and is published by a release store of
 * g_ready; a failed attempt (a malformed variable) publishes nothing, so the
 * next call tries again, e.g. after the user fixed the variable. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "runtime_internal.h"
#include "target.h"

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* Set once, under g_init_lock, after every table is built. Readers load it
 * with acquire so that they see those tables. */
static atomic_bool g_ready;

/* Set by the fork child handler, which runs in the child before any other
 * code of the child; relaxed loads suffice because the child's threads
 * all start after it (and the forking thread is sequenced after it). */
static atomic_bool g_forked;

/* Chips of this process; written before g_ready is published. */
static int g_chip_count;

static const char k_forked_message[] =
    "torch-tpu was initialised before fork(); a forked child cannot use the device "
    "(use the 'spawn' start method)";

/* ------------------------------------------------------------------ fork */

/* Around fork(), hold the init lock so that the child never inherits it
 * locked by a thread that does not exist there. */
static void atfork_prepare(void) {
    pthread_mutex_lock(&g_init_lock);
}

static void atfork_parent(void) {
    pthread_mutex_unlock(&g_init_lock);
}

/* Worker threads do not survive fork(): a child of an initialised parent
 * must refuse every call. A child of a parent that never initialised is a
 * fresh process as far as we are concerned. */
static void atfork_child(void) {
    if (atomic_load_explicit(&g_ready, memory_order_relaxed))
        atomic_store_explicit(&g_forked, true, memory_order_relaxed);
    pthread_mutex_unlock(&g_init_lock);
}

static void register_atfork(void) {
    /* pthread_atfork fails only for lack of memory; fork detection is then
     * lost, which only matters if the program forks. */
    (void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

bool tpu_runtime_is_forked(void) {
    return atomic_load_explicit(&g_forked, memory_order_relaxed);
}

/* ----------------------------------------------------------- env parsing */

/* Parses a whole decimal integer in [lo, hi]; false for anything else. */
static bool parse_int(const char *s, long lo, long hi, long *out) {
    if (!isdigit((unsigned char)s[0]))
        return false; /* no sign, no blanks */
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Parses "<digits>[K|M|G]" (binary units, case-insensitive) into bytes. */
static bool parse_bytes(const char *s, uint64_t *out) {
    if (!isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    default: return false;
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

/* Parses a switch: 1/0, true/false, yes/no, on/off (case-insensitive). */
static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

/* The variable's value, or NULL when unset or empty (an empty value, as
 * left by `VAR= cmd`, means "use the default"). */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

static tpu_status bad_var(const char *name, const char *value, const char *expected) {
    return tpu_set_error(TPU_ERR_INVALID_ARG, "torch-tpu: %s='%s' is not valid: expected %s", name,
                         value, expected);
}

/* The cores this process may run on (its main thread's CPU mask, as
 * libgomp counts them for PyTorch's threads), else the online ones. */
static int usable_cores(void) {
    cpu_set_t mask;
    long n = sched_getaffinity(getpid(), sizeof mask, &mask) == 0 ? CPU_COUNT(&mask)
                                                                  : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > TPU_THREADS_MAX ? TPU_THREADS_MAX : (int)n;
}

/* Reads every variable into *cfg; the first malformed one is the error. */
static tpu_status read_config(tpu_config *cfg) {
    const char *v;
    long n;
    bool b;

    cfg->chips = 1;
    if ((v = env("TORCH_TPU_CHIPS"))) {
        if (!parse_int(v, 1, TPU_CHIPS_MAX, &n))
            return bad_var("TORCH_TPU_CHIPS", v, "an integer in 1..64");
        cfg->chips = (int)n;
    }

    cfg->generation = TPU_GEN_V5E;
    if ((v = env("TORCH_TPU_GENERATION"))) {
        if (tpu_generation_from_name(v, &cfg->generation) != TPU_OK)
            return bad_var("TORCH_TPU_GENERATION", v, "one of v5e, v5p, v6e, v7x");
    }

    /* The limit lowers the capacity; it cannot exceed the modeled HBM. */
    cfg->memory_limit = 0;
    if ((v = env("TORCH_TPU_MEMORY_LIMIT"))) {
        const tpu_generation_model *m = tpu_generation_model_of(cfg->generation);
        uint64_t bytes;
        if (!parse_bytes(v, &bytes) || bytes == 0)
            return bad_var("TORCH_TPU_MEMORY_LIMIT", v,
                           "a positive byte count, optionally with a K, M or G suffix");
        if (bytes > m->hbm_bytes)
            return tpu_set_error(TPU_ERR_INVALID_ARG,
                                 "torch-tpu: TORCH_TPU_MEMORY_LIMIT='%s' is not valid: %" PRIu64
                                 " bytes exceed the %" PRIu64 " bytes of HBM of a TPU %s",
                                 v, bytes, m->hbm_bytes, m->short_name);
        cfg->memory_limit = bytes;
    }

    cfg->num_threads = usable_cores();
    if ((v = env("TORCH_TPU_NUM_THREADS"))) {
        if (!parse_int(v, 1, TPU_THREADS_MAX, &n))
            return bad_var("TORCH_TPU_NUM_THREADS", v, "an integer in 1..1024");
        cfg->num_threads = (int)n;
    }

    cfg->bind_threads = true;
    if ((v = env("TORCH_TPU_BIND_THREADS"))) {
        if (!parse_bool(v, &b))
            return bad_var("TORCH_TPU_BIND_THREADS", v, "0 or 1");
        cfg->bind_threads = b;
    }

    /* Debug wins over fused when both are asked: it is the mode for
     * finding a failing op, and it gives the same results. */
    bool blocking = false, fuse = false;
    if ((v = env("TPU_LAUNCH_BLOCKING")) && !parse_bool(v, &blocking))
        return bad_var("TPU_LAUNCH_BLOCKING", v, "0 or 1");
    if ((v = env("TORCH_TPU_DEFER_AND_FUSE")) && !parse_bool(v, &fuse))
        return bad_var("TORCH_TPU_DEFER_AND_FUSE", v, "0 or 1");
    cfg->mode = blocking ? TPU_MODE_DEBUG : fuse ? TPU_MODE_FUSED : TPU_MODE_STRICT;

    cfg->reference = -1;
    if ((v = env("TORCH_TPU_REFERENCE"))) {
        if (!parse_bool(v, &b))
            return bad_var("TORCH_TPU_REFERENCE", v, "0 or 1");
        cfg->reference = b;
    }

    /* An instruction-set cap for the fast kernels (a level above the CPU's
     * best runs as the best). */
    cfg->isa = -1;
    if ((v = env("TORCH_TPU_ISA"))) {
        tpu_isa isa;
        if (tpu_isa_from_name(v, &isa) != TPU_OK) {
            tpu_clear_error();
            return bad_var("TORCH_TPU_ISA", v, "portable, avx2 or avx512");
        }
        cfg->isa = (int)isa;
    }
    return TPU_OK;
}

/* ------------------------------------------------------------------ init */

/* Builds every table from *cfg. Runs under g_init_lock. */
static tpu_status setup(const tpu_config *cfg) {
    const tpu_target *target = tpu_target_get();
    int chips = 0;
    tpu_status st = target->open(cfg, &chips);
    if (st != TPU_OK)
        return st;
    if (chips < 1 || chips > TPU_CHIPS_MAX)
        return tpu_set_error(TPU_ERR_INTERNAL, "torch-tpu: target '%s' reported %d chips",
                             target->name, chips);
    st = tpu_chip_setup(cfg, chips);
    if (st != TPU_OK)
        return st;
    g_chip_count = chips;
    tpu_mem_setup(chips);
    tpu_pool_setup(cfg->num_threads, cfg->bind_threads);
    tpu_mode_setup(cfg->mode);
    if (cfg->reference >= 0)
        tpu_kernels_set_reference(cfg->reference == 1);
    if (cfg->isa >= 0)
        tpu_kernels_set_isa((tpu_isa)cfg->isa);
    return TPU_OK;
}

tpu_status tpu_runtime_init(void) {
    pthread_once(&g_atfork_once, register_atfork);
    if (atomic_load_explicit(&g_forked, memory_order_relaxed))
        return tpu_set_error(TPU_ERR_FORKED, "%s", k_forked_message);
    if (atomic_load_explicit(&g_ready, memory_order_acquire))
        return TPU_OK;

    pthread_mutex_lock(&g_init_lock);
    tpu_status st = TPU_OK;
    if (!atomic_load_explicit(&g_ready, memory_order_relaxed)) { /* the lock orders it */
        tpu_config cfg;
        st = read_config(&cfg);
        if (st == TPU_OK)
            st = setup(&cfg);
        if (st == TPU_OK)
            atomic_store_explicit(&g_ready, true, memory_order_release);
    }
    pthread_mutex_unlock(&g_init_lock);
    return st;
}

tpu_status tpu_rt_enter(void) {
    /* The fast path: two loads. The forked check comes first because a
     * child inherits g_ready == true. */
    if (!atomic_load_explicit(&g_forked, memory_order_relaxed) &&
        atomic_load_explicit(&g_ready, memory_order_acquire))
        return TPU_OK;
    return tpu_runtime_init();
}

tpu_status tpu_rt_enter_chip(const char *fn, int chip) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (chip < 0 || chip >= g_chip_count)
        return tpu_set_error(TPU_ERR_INVALID_DEVICE,
                             "%s: tpu:%d is not a valid device (this process has %d chip%s; "
                             "set TORCH_TPU_CHIPS for more)",
                             fn, chip, g_chip_count, g_chip_count == 1 ? "" : "s");
    return TPU_OK;
}

int tpu_rt_chip_count(void) {
    return g_chip_count;
}
