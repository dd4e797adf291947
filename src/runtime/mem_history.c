/* What the device allocator tells about itself (tpu/mem_history.h): the
 * embedder's contexts, the ring of events per chip, the recording
 * settings, and snapshots of every block.
 *
 * Recording settings live in each chip's allocator (read under its lock,
 * where events happen); the context level is also kept in one atomic, so
 * that an embedder can decide with one load whether to build a context
 * at all. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mem_internal.h"

/* ---------------------------------------------------------------- contexts */

/* Installed once at start-up, read on every retain and release: an atomic
 * pointer to an immutable pair, as the wait hooks are (wait.c). */
static tpu_mem_context_ops g_ops_storage;
static _Atomic(const tpu_mem_context_ops *) g_ops = NULL;
static atomic_int g_context_level = TPU_MEM_CONTEXT_NEVER;

void tpu_mem_set_context_ops(const tpu_mem_context_ops *ops) {
    if (!ops || !ops->retain || !ops->release) {
        atomic_store_explicit(&g_ops, NULL, memory_order_release);
        return;
    }
    /* One writer at start-up; storing before publishing (release) lets
     * readers (acquire) see both functions. */
    g_ops_storage = *ops;
    atomic_store_explicit(&g_ops, &g_ops_storage, memory_order_release);
}

void tpu_mem_context_retain(void *context) {
    const tpu_mem_context_ops *ops = atomic_load_explicit(&g_ops, memory_order_acquire);
    if (context && ops)
        ops->retain(context);
}

void tpu_mem_context_release(void *context) {
    const tpu_mem_context_ops *ops = atomic_load_explicit(&g_ops, memory_order_acquire);
    if (context && ops)
        ops->release(context);
}

tpu_mem_context_level tpu_mem_history_context_level(void) {
    /* Relaxed: a stale answer only means one context more or less, and the
     * allocator re-checks its own copy under its lock. */
    return (tpu_mem_context_level)atomic_load_explicit(&g_context_level, memory_order_relaxed);
}

/* ------------------------------------------------------------------ events */

const char *tpu_mem_action_name(tpu_mem_action action) {
    static const char *const names[] = {"alloc",        "free_requested", "free_completed",
                                        "segment_alloc", "segment_free",  "oom",
                                        "snapshot"};
    _Static_assert(sizeof names / sizeof names[0] == TPU_MEM_ACTION_COUNT, "one name per action");
    if ((unsigned)action >= TPU_MEM_ACTION_COUNT)
        return "unknown";
    return names[action];
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Forgets every event of the ring, dropping their contexts. */
static void ring_clear(tpu_mem_ring *r) {
    for (size_t i = 0; i < r->count; i++)
        tpu_mem_context_release(r->entries[(r->head + i) % r->cap].context);
    free(r->entries);
    memset(r, 0, sizeof *r);
}

/* Appends ev (its context already retained). Below `max` entries the ring
 * grows by doubling; at `max`, or when growing fails, the oldest entry
 * makes room. */
static void ring_push(tpu_mem_ring *r, uint64_t max, const tpu_mem_event *ev) {
    if (r->count == r->cap && r->cap < max) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        if (cap > max)
            cap = (size_t)max;
        tpu_mem_event *grown = malloc(cap * sizeof *grown);
        if (grown) {
            /* Unroll into order, oldest first. */
            for (size_t i = 0; i < r->count; i++)
                grown[i] = r->entries[(r->head + i) % r->cap];
            free(r->entries);
            r->entries = grown;
            r->cap = cap;
            r->head = 0;
        }
    }
    if (r->cap == 0) { /* no memory for even a first array: the event is lost */
        tpu_mem_context_release(ev->context);
        return;
    }
    if (r->count == r->cap || r->count >= max) {
        tpu_mem_context_release(r->entries[r->head].context);
        r->head = (r->head + 1) % r->cap;
        r->count--;
    }
    r->entries[(r->head + r->count) % r->cap] = *ev;
    r->count++;
}

void tpu_mem_record_event_traced(tpu_mem_allocator *a, tpu_mem_action action, int stream,
                                 uint64_t addr, uint64_t size, uint64_t device_free, void *context) {
    const tpu_mem_history_config *h = &a->history;
    if (h->skip_actions & (1u << action))
        return;
    tpu_mem_event ev = {action, stream, addr, size, device_free, now_us(), NULL};
    if (h->context >= TPU_MEM_CONTEXT_ALLOC && context) {
        tpu_mem_context_retain(context);
        ev.context = context;
    }
    ring_push(&a->ring, h->max_entries, &ev);
}

tpu_status tpu_mem_history_configure(const tpu_mem_history_config *cfg) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    tpu_mem_history_config off = {0};
    if (!cfg)
        cfg = &off;
    if ((unsigned)cfg->context >= TPU_MEM_CONTEXT_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_mem_history_configure: context level %d is not a "
                             "tpu_mem_context_level",
                             (int)cfg->context);
    if (cfg->trace && cfg->max_entries == 0)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_mem_history_configure: max_entries must be at least 1");
    if (cfg->skip_actions >> TPU_MEM_ACTION_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_mem_history_configure: skip_actions 0x%x has bits beyond the %d "
                             "actions",
                             (unsigned)cfg->skip_actions, (int)TPU_MEM_ACTION_COUNT);
    bool off_now = !cfg->trace && cfg->context == TPU_MEM_CONTEXT_NEVER;
    atomic_store_explicit(&g_context_level, (int)cfg->context, memory_order_relaxed);
    for (int c = 0; c < tpu_rt_chip_count(); c++) {
        tpu_mem_allocator *a = &tpu_mem_allocators[c];
        pthread_mutex_lock(&a->lock);
        if (off_now || cfg->clear || !cfg->trace)
            ring_clear(&a->ring);
        a->history = *cfg;
        a->history.clear = false;
        /* A ring larger than the new maximum keeps its newest entries. */
        while (a->ring.count > a->history.max_entries) {
            tpu_mem_context_release(a->ring.entries[a->ring.head].context);
            a->ring.head = (a->ring.head + 1) % a->ring.cap;
            a->ring.count--;
        }
        pthread_mutex_unlock(&a->lock);
    }
    return TPU_OK;
}

tpu_status tpu_mem_history_events(int chip, tpu_mem_event **out, size_t *count) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_history_events", chip);
    if (st != TPU_OK)
        return st;
    if (!out || !count)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_history_events: %s is NULL",
                             out ? "count" : "out");
    *out = NULL;
    *count = 0;
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    const tpu_mem_ring *r = &a->ring;
    tpu_mem_event *events = r->count ? malloc(r->count * sizeof *events) : NULL;
    if (r->count && !events) {
        pthread_mutex_unlock(&a->lock);
        return tpu_set_error(TPU_ERR_HOST_MEMORY,
                             "tpu_mem_history_events: no host memory for %zu events", r->count);
    }
    for (size_t i = 0; i < r->count; i++) {
        events[i] = r->entries[(r->head + i) % r->cap];
        tpu_mem_context_retain(events[i].context);
    }
    *out = events;
    *count = r->count;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

void tpu_mem_events_free(tpu_mem_event *events, size_t count) {
    if (!events)
        return;
    for (size_t i = 0; i < count; i++)
        tpu_mem_context_release(events[i].context);
    free(events);
}

/* ---------------------------------------------------------------- snapshot */

/* Describes b in `state` into *info, retaining its contexts for the caller. */
static void describe_block(const tpu_mem_allocator *a, const tpu_mem_block *b,
                           tpu_mem_block_state state, tpu_mem_block_info *info) {
    bool active = state != TPU_MEM_BLOCK_INACTIVE;
    *info = (tpu_mem_block_info){
        .segment_address = (uint64_t)(uintptr_t)b->segment->ptr,
        .segment_size = b->segment->size,
        .segment_context = b->segment->context,
        .address = (uint64_t)(uintptr_t)b->ptr,
        .size = b->size,
        .requested_size = active ? b->requested : 0,
        .chip = a->chip,
        .stream = b->stream,
        .state = state,
        .context = active ? b->context : NULL,
    };
    tpu_mem_context_retain(info->segment_context);
    tpu_mem_context_retain(info->context);
}

static int by_address(const void *x, const void *y) {
    uint64_t p = ((const tpu_mem_block_info *)x)->address;
    uint64_t q = ((const tpu_mem_block_info *)y)->address;
    return (p > q) - (p < q);
}

tpu_status tpu_mem_snapshot(int chip, tpu_mem_block_info **out, size_t *count) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_snapshot", chip);
    if (st != TPU_OK)
        return st;
    if (!out || !count)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_snapshot: %s is NULL",
                             out ? "count" : "out");
    *out = NULL;
    *count = 0;
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    /* Every block is live, pending or cached. */
    size_t total = a->n_blocks;
    tpu_mem_block_info *blocks = total ? malloc(total * sizeof *blocks) : NULL;
    if (total && !blocks) {
        pthread_mutex_unlock(&a->lock);
        return tpu_set_error(TPU_ERR_HOST_MEMORY,
                             "tpu_mem_snapshot: no host memory for %zu blocks", total);
    }
    /* n counts every block listed, so that a disagreement either way shows. */
    size_t n = 0;
    for (size_t i = 0; i < a->n_buckets; i++)
        for (const tpu_mem_block *b = a->buckets[i]; b; b = b->next, n++)
            if (n < total)
                describe_block(a, b, TPU_MEM_BLOCK_ACTIVE_ALLOCATED, &blocks[n]);
    for (const tpu_mem_block *b = a->pending; b; b = b->next, n++)
        if (n < total)
            describe_block(a, b, TPU_MEM_BLOCK_ACTIVE_PENDING_FREE, &blocks[n]);
    for (int s = 0; s < TPU_STREAMS_MAX; s++)
        for (const tpu_mem_block *b = a->cache[s]; b; b = b->next, n++)
            if (n < total)
                describe_block(a, b, TPU_MEM_BLOCK_INACTIVE, &blocks[n]);
    tpu_mem_record_event(a, TPU_MEM_ACTION_SNAPSHOT, 0, 0,
                         (uint64_t)a->stats.active_bytes[TPU_MEM_POOL_ALL].current, 0, NULL);
    pthread_mutex_unlock(&a->lock);
    if (n != total) { /* the lists and the block count disagree: a bug */
        tpu_mem_blocks_free(blocks, n < total ? n : total);
        return tpu_set_error(TPU_ERR_INTERNAL,
                             "tpu_mem_snapshot: tpu:%d holds %zu blocks but lists %zu",
                             chip, total, n);
    }
    if (n > 1)
        qsort(blocks, n, sizeof *blocks, by_address);
    *out = blocks;
    *count = n;
    return TPU_OK;
}

void tpu_mem_blocks_free(tpu_mem_block_info *blocks, size_t count) {
    if (!blocks)
        return;
    for (size_t i = 0; i < count; i++) {
        tpu_mem_context_release(blocks[i].segment_context);
        tpu_mem_context_release(blocks[i].context);
    }
    free(blocks);
}
