/* The intra-op thread pool: every share runs once, nth is clamped, errors
 * come back by ith, concurrent and nested use run inline, and a share no
 * worker has claimed runs on the caller. */
#define _GNU_SOURCE /* sched_setaffinity */

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/runtime.h"

#define POOL 4

typedef struct {
    atomic_int runs[64];
    atomic_int seen_nth;
    atomic_int wrong_nth;
} tally;

static tpu_status count_share(void *ctx, int ith, int nth) {
    tally *t = ctx;
    atomic_fetch_add(&t->runs[ith], 1);
    if (atomic_load(&t->seen_nth) != nth)
        atomic_store(&t->wrong_nth, 1);
    return TPU_OK;
}

/* Runs the pool with `nth` asked and checks that shares 0 .. want-1 each
 * ran exactly once with nth == want. */
static void check_run(int nth, int want) {
    tally t;
    memset(&t, 0, sizeof t);
    atomic_store(&t.seen_nth, want);
    CHECK_OK(tpu_pool_run(count_share, &t, nth));
    int ok = !atomic_load(&t.wrong_nth);
    for (int i = 0; i < 64; i++)
        ok = ok && atomic_load(&t.runs[i]) == (i < want ? 1 : 0);
    CHECK(ok);
}

static tpu_status fail_some(void *ctx, int ith, int nth) {
    (void)nth;
    const int *failing = ctx; /* a bit per ith that fails */
    if (*failing & (1 << ith))
        return tpu_set_error(ith == 0 ? TPU_ERR_SHAPE : TPU_ERR_DIV_BY_ZERO, "share %d failed", ith);
    return TPU_OK;
}

static void test_errors(void) {
    int failing = 1 << 2 | 1 << 3;
    tpu_clear_error();
    CHECK_STATUS(tpu_pool_run(fail_some, &failing, POOL), TPU_ERR_DIV_BY_ZERO);
    CHECK(strcmp(tpu_last_error_message(), "share 2 failed") == 0);

    failing = 1 << 0 | 1 << 1;
    CHECK_STATUS(tpu_pool_run(fail_some, &failing, POOL), TPU_ERR_SHAPE);
    CHECK(strcmp(tpu_last_error_message(), "share 0 failed") == 0);

    failing = 0;
    CHECK_OK(tpu_pool_run(fail_some, &failing, POOL));
    CHECK_STATUS(tpu_pool_run(NULL, NULL, POOL), TPU_ERR_INVALID_ARG);
}

/* A share that runs the pool again: the inner region must run inline. */
static tpu_status nested_share(void *ctx, int ith, int nth) {
    (void)nth;
    tally *inner = (tally *)ctx + ith;
    atomic_store(&inner->seen_nth, 1);
    return tpu_pool_run(count_share, inner, POOL);
}

static void test_nested(void) {
    tally *inner = calloc(POOL, sizeof *inner);
    CHECK_OK(tpu_pool_run(nested_share, inner, POOL));
    for (int i = 0; i < POOL; i++) {
        CHECK(atomic_load(&inner[i].runs[0]) == 1);
        CHECK(atomic_load(&inner[i].runs[1]) == 0);
        CHECK(!atomic_load(&inner[i].wrong_nth));
    }
    free(inner);
}

/* Sums 0 .. n-1 split over the shares; any nth must give the same sum. */
typedef struct {
    int64_t n;
    int64_t partial[POOL];
} sum_job;

static tpu_status sum_share(void *ctx, int ith, int nth) {
    sum_job *j = ctx;
    int64_t lo = j->n * ith / nth, hi = j->n * (ith + 1) / nth, s = 0;
    for (int64_t i = lo; i < hi; i++)
        s += i;
    j->partial[ith] = s;
    return TPU_OK;
}

static void *hammer(void *arg) {
    atomic_int *bad = arg;
    for (int rep = 0; rep < 2000; rep++) {
        sum_job j;
        memset(&j, 0, sizeof j);
        j.n = 1000 + rep;
        if (tpu_pool_run(sum_share, &j, POOL) != TPU_OK)
            atomic_fetch_add(bad, 1);
        int64_t s = 0;
        for (int i = 0; i < POOL; i++)
            s += j.partial[i];
        if (s != j.n * (j.n - 1) / 2)
            atomic_fetch_add(bad, 1);
    }
    return NULL;
}

static void test_concurrent(void) {
    atomic_int bad = 0;
    pthread_t a, b;
    pthread_create(&a, NULL, hammer, &bad);
    pthread_create(&b, NULL, hammer, &bad);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK(atomic_load(&bad) == 0);
}

/* Records which thread ran each share, and fails shares 0 and 1. */
typedef struct {
    pthread_t caller;
    atomic_int runs[POOL];
    atomic_int on_caller; /* shares >= 1 the calling thread ran */
} claim_job;

static tpu_status claim_share(void *ctx, int ith, int nth) {
    (void)nth;
    claim_job *j = ctx;
    atomic_fetch_add(&j->runs[ith], 1);
    if (ith > 0 && pthread_equal(pthread_self(), j->caller))
        atomic_fetch_add(&j->on_caller, 1);
    return ith < 2 ? tpu_set_error(ith == 0 ? TPU_ERR_SHAPE : TPU_ERR_DIV_BY_ZERO,
                                   "share %d failed", ith)
                   : TPU_OK;
}

/* A caller done with share 0 before a worker has woken finds the other
 * shares unclaimed and runs them itself instead of waiting (a scheduler
 * slice, when the worker waits for a core). The caller is pinned to one
 * core so that this happens often; the old pool never did it. Each share
 * must still run once, and the error must be share 0's even when the
 * caller ran share 1 (which fails too) after it. */
static void test_caller_claims(void) {
    cpu_set_t old, one;
    if (sched_getaffinity(0, sizeof old, &old) != 0) {
        printf("skip test_caller_claims: no affinity\n");
        return;
    }
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            CPU_SET(c, &one);
            break;
        }
    bool pinned = true;
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        pinned = false;
    int on_caller = 0, bad = 0;
    for (int rep = 0; rep < 2000; rep++) {
        claim_job j;
        memset(&j, 0, sizeof j);
        j.caller = pthread_self();
        tpu_clear_error();
        if (tpu_pool_run(claim_share, &j, POOL) != TPU_ERR_SHAPE ||
            strcmp(tpu_last_error_message(), "share 0 failed") != 0)
            bad++;
        for (int i = 0; i < POOL; i++)
            bad += atomic_load(&j.runs[i]) != 1;
        on_caller += atomic_load(&j.on_caller);
    }
    if (pinned)
        sched_setaffinity(0, sizeof old, &old);
    CHECK(bad == 0);
    if (pinned)
        CHECK(on_caller > 0);
    printf("test_caller_claims: the caller ran %d shares >= 1 in 2000 regions%s\n", on_caller,
           pinned ? " on one core" : "");
}

int main(void) {
    setenv("TORCH_TPU_NUM_THREADS", "4", 1);
    CHECK(tpu_pool_num_threads() == POOL);

    check_run(POOL, POOL);
    check_run(2, 2);
    check_run(1, 1);
    check_run(100, POOL); /* clamped to the pool size */
    check_run(0, 1);
    check_run(-3, 1);
    for (int rep = 0; rep < 200; rep++) /* wake-ups are not lost */
        check_run(1 + rep % POOL, 1 + rep % POOL);

    test_errors();
    test_nested();
    test_concurrent();
    test_caller_claims();
    return check_report();
}
