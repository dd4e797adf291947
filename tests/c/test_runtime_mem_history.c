/* The allocator's history (tpu/mem_history.h): events in order with their
 * sizes, streams and contexts at each context level, the ring's bound,
 * skipped actions, snapshots of every block state, and that every context
 * reference taken is given back. Runs with a 64 MiB capacity per chip. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/mem_history.h"
#include "tpu/runtime.h"

#define MIB (1024u * 1024u)

/* A context is a counter of the references the allocator holds on it. */
typedef struct {
    atomic_int refs;
} ctx;

static atomic_int g_refs;          /* references held on every ctx together */
static atomic_int g_over_released; /* releases of a ctx with no reference held */

static void ctx_retain(void *c) {
    atomic_fetch_add(&((ctx *)c)->refs, 1);
    atomic_fetch_add(&g_refs, 1);
}

static void ctx_release(void *c) {
    if (atomic_fetch_sub(&((ctx *)c)->refs, 1) <= 0)
        atomic_fetch_add(&g_over_released, 1);
    atomic_fetch_sub(&g_refs, 1);
}

static tpu_stream *stream(int chip, int index) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(chip, index, &s));
    return s;
}

static void record(bool trace, tpu_mem_context_level level, uint64_t max_entries, uint32_t skip) {
    tpu_mem_history_config cfg = {trace, max_entries, level, skip, true};
    CHECK_OK(tpu_mem_history_configure(&cfg));
}

/* The events of `chip`; the caller frees them. */
typedef struct {
    tpu_mem_event *ev;
    size_t n;
} events;

static events take(int chip) {
    events e = {NULL, 0};
    CHECK_OK(tpu_mem_history_events(chip, &e.ev, &e.n));
    return e;
}

static void drop(events e) {
    tpu_mem_events_free(e.ev, e.n);
}

static void check_event(const tpu_mem_event *e, tpu_mem_action action, const void *addr,
                        uint64_t size, void *context) {
    CHECK(e->action == action);
    CHECK(e->addr == (uint64_t)(uintptr_t)addr);
    CHECK(e->size == size);
    CHECK(e->context == context);
    CHECK(e->time_us > 0);
}

static void test_args(void) {
    tpu_mem_history_config bad = {true, 0, TPU_MEM_CONTEXT_ALL, 0, false};
    CHECK_STATUS(tpu_mem_history_configure(&bad), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "max_entries");
    bad = (tpu_mem_history_config){true, 10, (tpu_mem_context_level)7, 0, false};
    CHECK_STATUS(tpu_mem_history_configure(&bad), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "context level 7");
    bad = (tpu_mem_history_config){true, 10, TPU_MEM_CONTEXT_ALL, 1u << TPU_MEM_ACTION_COUNT, false};
    CHECK_STATUS(tpu_mem_history_configure(&bad), TPU_ERR_INVALID_ARG);
    CHECK(tpu_mem_history_context_level() == TPU_MEM_CONTEXT_NEVER); /* nothing applied */

    tpu_mem_event *ev;
    size_t n;
    CHECK_STATUS(tpu_mem_history_events(2, &ev, &n), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_mem_history_events(0, NULL, &n), TPU_ERR_INVALID_ARG);
    tpu_mem_block_info *blocks;
    CHECK_STATUS(tpu_mem_snapshot(-1, &blocks, &n), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_mem_snapshot(0, &blocks, NULL), TPU_ERR_INVALID_ARG);
    tpu_mem_events_free(NULL, 3);
    tpu_mem_blocks_free(NULL, 3);
    tpu_clear_error();

    CHECK(strcmp(tpu_mem_action_name(TPU_MEM_ACTION_ALLOC), "alloc") == 0);
    CHECK(strcmp(tpu_mem_action_name(TPU_MEM_ACTION_FREE_COMPLETED), "free_completed") == 0);
    CHECK(strcmp(tpu_mem_action_name(TPU_MEM_ACTION_SNAPSHOT), "snapshot") == 0);
    CHECK(strcmp(tpu_mem_action_name(TPU_MEM_ACTION_COUNT), "unknown") == 0);

    /* Off: nothing recorded. */
    void *p;
    CHECK_OK(tpu_mem_alloc(0, 100, NULL, &p));
    CHECK_OK(tpu_mem_free(p));
    events e = take(0);
    CHECK(e.n == 0 && e.ev == NULL);
    drop(e);
}

/* Every action in order, at the ALL level: the free's own context on the
 * free's events, the allocation's on the segment's. */
static void test_sequence(void) {
    CHECK_OK(tpu_mem_empty_cache(0));
    ctx a = {0}, f = {0};
    record(true, TPU_MEM_CONTEXT_ALL, 1000, 0);
    CHECK(tpu_mem_history_context_level() == TPU_MEM_CONTEXT_ALL);
    void *p, *q, *huge = NULL;
    CHECK_OK(tpu_mem_alloc_ctx(0, 1000, stream(0, 1), &a, &p));
    CHECK_OK(tpu_mem_free_ctx(p, &f));
    CHECK_OK(tpu_mem_alloc_ctx(0, 900, stream(0, 1), NULL, &q)); /* the cached block */
    CHECK(q == p);
    CHECK_OK(tpu_mem_free(q));
    CHECK_OK(tpu_mem_empty_cache(0));

    events e = take(0);
    CHECK(e.n == 8);
    if (e.n == 8) {
        check_event(&e.ev[0], TPU_MEM_ACTION_SEGMENT_ALLOC, p, 1024, &a);
        check_event(&e.ev[1], TPU_MEM_ACTION_ALLOC, p, 1000, &a);
        check_event(&e.ev[2], TPU_MEM_ACTION_FREE_REQUESTED, p, 1000, &f);
        check_event(&e.ev[3], TPU_MEM_ACTION_FREE_COMPLETED, p, 1000, &f);
        check_event(&e.ev[4], TPU_MEM_ACTION_ALLOC, p, 900, NULL);
        check_event(&e.ev[5], TPU_MEM_ACTION_FREE_REQUESTED, p, 900, NULL);
        check_event(&e.ev[6], TPU_MEM_ACTION_FREE_COMPLETED, p, 900, NULL);
        check_event(&e.ev[7], TPU_MEM_ACTION_SEGMENT_FREE, p, 1024, &a);
        for (size_t i = 0; i < 7; i++) {
            CHECK(e.ev[i].stream == 1);
            CHECK(e.ev[i].time_us <= e.ev[i + 1].time_us);
        }
    }
    drop(e);
    /* Taking the events does not consume them: an OOM is the ninth. */
    CHECK_STATUS(tpu_mem_alloc_ctx(0, (size_t)1 << 40, NULL, &a, &huge), TPU_ERR_OUT_OF_MEMORY);
    tpu_clear_error();
    e = take(0);
    CHECK(e.n == 9);
    if (e.n == 9) {
        check_event(&e.ev[8], TPU_MEM_ACTION_OOM, NULL, (uint64_t)1 << 40, &a);
        CHECK(e.ev[8].device_free == 64 * MIB);
        CHECK(e.ev[8].stream == 0);
    }
    /* The copies hold references of their own. */
    int held = atomic_load(&a.refs);
    drop(e);
    CHECK(atomic_load(&a.refs) < held);
    record(false, TPU_MEM_CONTEXT_NEVER, 0, 0); /* off: the ring is forgotten */
    e = take(0);
    CHECK(e.n == 0);
    drop(e);
    CHECK(atomic_load(&a.refs) == 0 && atomic_load(&f.refs) == 0);
}

/* STATE keeps contexts on blocks only; ALLOC also on allocation events,
 * and a free without a context of its own shows the allocation's. */
static void test_levels(void) {
    CHECK_OK(tpu_mem_empty_cache(0));
    ctx a = {0};
    void *p;
    record(false, TPU_MEM_CONTEXT_STATE, 0, 0);
    CHECK_OK(tpu_mem_alloc_ctx(0, 5000, NULL, &a, &p));
    events e = take(0);
    CHECK(e.n == 0);
    drop(e);
    tpu_mem_block_info *blocks;
    size_t n;
    CHECK_OK(tpu_mem_snapshot(0, &blocks, &n));
    CHECK(n == 1 && blocks[0].context == &a && blocks[0].segment_context == &a);
    tpu_mem_blocks_free(blocks, n);
    CHECK_OK(tpu_mem_free(p));
    CHECK(atomic_load(&a.refs) == 1); /* the segment's; the block's went with its free */
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK(atomic_load(&a.refs) == 0);

    record(true, TPU_MEM_CONTEXT_ALLOC, 100, 0);
    CHECK_OK(tpu_mem_alloc_ctx(0, 5000, NULL, &a, &p));
    CHECK_OK(tpu_mem_free(p));
    e = take(0);
    CHECK(e.n == 4);
    for (size_t i = 0; i < e.n; i++)
        CHECK(e.ev[i].context == &a);
    drop(e);

    /* Blocks allocated while recording keep their contexts after it stops. */
    CHECK_OK(tpu_mem_alloc_ctx(0, 7000, stream(0, 2), &a, &p));
    record(false, TPU_MEM_CONTEXT_NEVER, 0, 0);
    CHECK_OK(tpu_mem_snapshot(0, &blocks, &n));
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (blocks[i].address == (uint64_t)(uintptr_t)p)
            found = blocks[i].context == &a && blocks[i].stream == 2;
    CHECK(found);
    tpu_mem_blocks_free(blocks, n);
    CHECK_OK(tpu_mem_free(p));
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK(atomic_load(&a.refs) == 0);
}

/* The snapshot lists every block, by address, in its state; a block freed
 * while another stream's recorded work may still use it is pending until
 * that work has run. Taking one records a SNAPSHOT event. */
static void test_snapshot(void) {
    CHECK_OK(tpu_mem_empty_cache(0));
    record(true, TPU_MEM_CONTEXT_ALL, 100, 0);
    ctx a = {0};
    tpu_stream *s1 = stream(0, 1), *s2 = stream(0, 2);
    gate g = {0};
    void *live, *pending, *cached;
    CHECK_OK(tpu_mem_alloc_ctx(0, 3 * MIB, s1, &a, &live));
    CHECK_OK(tpu_mem_alloc_ctx(0, 2000, s1, &a, &pending));
    CHECK_OK(tpu_mem_alloc_ctx(0, 700, s2, &a, &cached));
    CHECK_OK(tpu_stream_submit_host_fn(s2, gate_wait, &g));
    CHECK_OK(tpu_mem_record_stream(pending, s2));
    CHECK(gate_reached(&g));
    CHECK_OK(tpu_mem_free(pending));
    CHECK_OK(tpu_mem_free(cached));

    tpu_mem_block_info *b;
    size_t n;
    CHECK_OK(tpu_mem_snapshot(0, &b, &n));
    CHECK(n == 4); /* live's 4 MiB segment holds live and its cached 1 MiB rest */
    for (size_t i = 0; i + 1 < n; i++)
        CHECK(b[i].address < b[i + 1].address);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(b[i].segment_address <= b[i].address &&
              b[i].address + b[i].size <= b[i].segment_address + b[i].segment_size);
        CHECK(b[i].chip == 0 && b[i].segment_context == &a);
        if (b[i].address == (uint64_t)(uintptr_t)live) {
            CHECK(b[i].state == TPU_MEM_BLOCK_ACTIVE_ALLOCATED && b[i].size == 3 * MIB);
            CHECK(b[i].requested_size == 3 * MIB && b[i].stream == 1 && b[i].context == &a);
            CHECK(b[i].segment_address == b[i].address && b[i].segment_size == 4 * MIB);
            seen |= 1;
        } else if (b[i].address == (uint64_t)(uintptr_t)live + 3 * MIB) {
            CHECK(b[i].state == TPU_MEM_BLOCK_INACTIVE && b[i].size == 1 * MIB);
            CHECK(b[i].segment_address == (uint64_t)(uintptr_t)live && b[i].stream == 1 &&
                  b[i].context == NULL);
            seen |= 8;
        } else if (b[i].address == (uint64_t)(uintptr_t)pending) {
            CHECK(b[i].state == TPU_MEM_BLOCK_ACTIVE_PENDING_FREE && b[i].size == 2048);
            CHECK(b[i].requested_size == 2000 && b[i].context == &a);
            seen |= 2;
        } else if (b[i].address == (uint64_t)(uintptr_t)cached) {
            CHECK(b[i].state == TPU_MEM_BLOCK_INACTIVE && b[i].size == 1024);
            CHECK(b[i].requested_size == 0 && b[i].context == NULL && b[i].stream == 2);
            seen |= 4;
        }
    }
    CHECK(seen == 15);
    tpu_mem_blocks_free(b, n);

    events e = take(0);
    CHECK(e.n > 0 && e.ev[e.n - 1].action == TPU_MEM_ACTION_SNAPSHOT);
    if (e.n > 0)
        CHECK(e.ev[e.n - 1].size == 3 * MIB + 2048); /* active: live and pending */
    /* The pending free was requested but has not completed. */
    int requested = 0, completed = 0;
    for (size_t i = 0; i < e.n; i++)
        if (e.ev[i].addr == (uint64_t)(uintptr_t)pending) {
            requested += e.ev[i].action == TPU_MEM_ACTION_FREE_REQUESTED;
            completed += e.ev[i].action == TPU_MEM_ACTION_FREE_COMPLETED;
        }
    CHECK(requested == 1 && completed == 0);
    drop(e);

    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(s2));
    CHECK_OK(tpu_mem_free(live));
    CHECK_OK(tpu_mem_empty_cache(0));
    e = take(0);
    completed = 0;
    int segment_frees = 0;
    for (size_t i = 0; i < e.n; i++) {
        completed += e.ev[i].action == TPU_MEM_ACTION_FREE_COMPLETED &&
                     e.ev[i].addr == (uint64_t)(uintptr_t)pending;
        segment_frees += e.ev[i].action == TPU_MEM_ACTION_SEGMENT_FREE;
    }
    CHECK(completed == 1 && segment_frees == 3);
    drop(e);
    CHECK_OK(tpu_mem_snapshot(0, &b, &n));
    CHECK(n == 0 && b == NULL);
    record(false, TPU_MEM_CONTEXT_NEVER, 0, 0);
    CHECK(atomic_load(&a.refs) == 0);
}

/* The ring keeps the newest max_entries events; skipped actions are not
 * recorded; each chip has its own ring. */
static void test_ring_and_skips(void) {
    CHECK_OK(tpu_mem_empty_cache(0));
    ctx a = {0};
    record(true, TPU_MEM_CONTEXT_ALL, 5, 0);
    void *p, *last = NULL;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tpu_mem_alloc_ctx(0, 100 + (size_t)i, NULL, &a, &p));
        CHECK_OK(tpu_mem_free(p));
        last = p;
    }
    events e = take(0);
    CHECK(e.n == 5);
    if (e.n == 5) {
        /* ..., alloc 102, [requested 102, completed 102, alloc 103, requested
         * 103, completed 103] */
        check_event(&e.ev[0], TPU_MEM_ACTION_FREE_REQUESTED, last, 102, &a);
        check_event(&e.ev[1], TPU_MEM_ACTION_FREE_COMPLETED, last, 102, &a);
        check_event(&e.ev[2], TPU_MEM_ACTION_ALLOC, last, 103, &a);
        check_event(&e.ev[4], TPU_MEM_ACTION_FREE_COMPLETED, last, 103, &a);
    }
    drop(e);
    CHECK(atomic_load(&a.refs) == 5 + 1); /* five events and the segment */

    uint32_t skip = (1u << TPU_MEM_ACTION_FREE_REQUESTED) | (1u << TPU_MEM_ACTION_SEGMENT_ALLOC);
    record(true, TPU_MEM_CONTEXT_ALL, 100, skip);
    CHECK_OK(tpu_mem_alloc_ctx(1, 3000, NULL, &a, &p));
    CHECK_OK(tpu_mem_free(p));
    e = take(1);
    CHECK(e.n == 2);
    if (e.n == 2) {
        check_event(&e.ev[0], TPU_MEM_ACTION_ALLOC, p, 3000, &a);
        check_event(&e.ev[1], TPU_MEM_ACTION_FREE_COMPLETED, p, 3000, &a);
    }
    drop(e);
    e = take(0);
    CHECK(e.n == 0); /* chip 0 did nothing since the ring was cleared */
    drop(e);
    record(false, TPU_MEM_CONTEXT_NEVER, 0, 0);
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK_OK(tpu_mem_empty_cache(1));
    CHECK(atomic_load(&a.refs) == 0);
}

/* Threads allocating and freeing while events are recorded into a small
 * ring: every reference taken is given back. */
static ctx g_thread_ctx;

static void *churn(void *arg) {
    int chip = (int)(intptr_t)arg % 2;
    tpu_stream *s = stream(chip, 1 + (int)(intptr_t)arg);
    for (int rep = 0; rep < 300; rep++) {
        void *p = NULL;
        if (tpu_mem_alloc_ctx(chip, (size_t)(1 + rep * 37 % 9000), s, &g_thread_ctx, &p) == TPU_OK)
            tpu_mem_free_ctx(p, &g_thread_ctx);
    }
    return NULL;
}

static void test_threads(void) {
    record(true, TPU_MEM_CONTEXT_ALL, 64, 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    events e = take(0);
    CHECK(e.n == 64);
    drop(e);
    record(false, TPU_MEM_CONTEXT_NEVER, 0, 0);
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK_OK(tpu_mem_empty_cache(1));
    CHECK(atomic_load(&g_thread_ctx.refs) == 0);
    CHECK(atomic_load(&g_refs) == 0);
    CHECK(atomic_load(&g_over_released) == 0);
}

int main(void) {
    setenv("TORCH_TPU_MEMORY_LIMIT", "64M", 1);
    setenv("TORCH_TPU_CHIPS", "2", 1);
    tpu_mem_context_ops ops = {ctx_retain, ctx_release};
    tpu_mem_set_context_ops(&ops);
    test_args();
    test_sequence();
    test_levels();
    test_snapshot();
    test_ring_and_skips();
    test_threads();
    return check_report();
}
