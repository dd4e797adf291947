/* Private interface of the device allocator, shared by its three files:
 *
 *   mem.c          the allocation paths: alloc, free, record_stream,
 *                  empty_cache, range checks, caching on or off
 *   mem_stats.c    statistics, mem_get_info, the memory fraction
 *   mem_history.c  contexts, the event ring, recording settings, snapshots
 *
 * Every field of an allocator is protected by its lock. */
#ifndef TPU_MEM_INTERNAL_H
#define TPU_MEM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime_internal.h"
#include "tpu/mem_history.h"

#define TPU_MEM_SMALL_SIZE (1u << 20) /* blocks up to 1 MiB are the small pool */

typedef struct {
    tpu_stream *stream;
    uint64_t seq; /* the stream's submitted_seq when recorded */
} tpu_mem_block_use;

/* A range taken from the target in one piece. Its blocks tile it, in
 * address order, linked through their before/after fields. */
typedef struct {
    void *ptr;
    size_t size;
    void *context; /* the context of the allocation that took the segment */
} tpu_mem_segment;

/* Where a block is: handed out, freed but maybe still used by another
 * stream's recorded work, or in its stream's cache. */
typedef enum { TPU_MEM_BLOCK_LIVE, TPU_MEM_BLOCK_PENDING, TPU_MEM_BLOCK_CACHED } tpu_mem_block_place;

typedef struct tpu_mem_block {
    struct tpu_mem_block *next; /* hash chain while live; cache or pending list when free */
    struct tpu_mem_block *prev; /* the cache list's previous block, while cached */
    struct tpu_mem_block *before, *after; /* neighbours in the segment; NULL at its ends */
    tpu_mem_segment *segment;
    tpu_mem_block_place place;
    void *ptr;
    size_t size;        /* bytes of the block (rounded) */
    size_t requested;   /* bytes asked for by the allocation, until its free completes */
    int stream;         /* index of the stream it is allocated for, on its chip */
    uint64_t free_seq;  /* that stream's submitted_seq when freed */
    tpu_mem_block_use *uses; /* record_stream uses by other streams */
    int n_uses, cap_uses;
    void *context;      /* the allocation's context, until its free completes */
    /* Counted as allocated by an ALLOC mark as its stream ran it (fused
     * mode), not at once; then a mark counts it out too. */
    bool counted_by_mark;
    bool used_elsewhere; /* another stream used it (record_stream) since it was handed out */
} tpu_mem_block;

/* Whether b covers its whole segment (it was never split, or its parts
 * have merged back). */
static inline bool tpu_mem_block_whole(const tpu_mem_block *b) {
    return !b->before && !b->after;
}

/* The last events of one chip: entries[(head + i) % cap] for i < count is
 * the i-th oldest. Grows by doubling up to the configured maximum, then
 * overwrites the oldest. */
typedef struct {
    tpu_mem_event *entries;
    size_t cap, head, count;
} tpu_mem_ring;

typedef struct {
    pthread_mutex_t lock;
    int chip;
    uint64_t capacity;
    double fraction;       /* tpu_mem_set_fraction; 1 by default */
    uint64_t limit;        /* floor(fraction * capacity): most bytes reserved */
    int64_t marks_queued;  /* marks queued that have not run (tpu_mem_mark_ran) */
    tpu_mem_block **buckets; /* live blocks by address; n_buckets is a power of two */
    size_t n_buckets, n_live;
    tpu_mem_block *cache[TPU_STREAMS_MAX]; /* free blocks per stream index, ascending size */
    tpu_mem_block *pending;                /* free blocks waiting for recorded uses */
    size_t n_blocks;                       /* blocks in every state */
    uint64_t cached_bytes;                 /* bytes in cache lists and pending */
    tpu_mem_stats stats;
    bool no_caching;                       /* tpu_mem_set_caching(false) */
    tpu_mem_history_config history;        /* this chip's copy of the recording settings */
    tpu_mem_ring ring;
} tpu_mem_allocator;

/* One allocator per possible chip; the first tpu_rt_chip_count() are set up. */
extern tpu_mem_allocator tpu_mem_allocators[TPU_CHIPS_MAX];

/* The pool a block of `size` bytes belongs to. */
static inline tpu_mem_pool tpu_mem_pool_of(size_t size) {
    return size <= TPU_MEM_SMALL_SIZE ? TPU_MEM_POOL_SMALL : TPU_MEM_POOL_LARGE;
}

/* Raises (adds n to) or lowers (subtracts n from) a statistic, `stat`
 * being its array of TPU_MEM_POOL_COUNT pools, in `pool` and in the "all"
 * pool, keeping peaks and totals. */
void tpu_mem_stat_raise(tpu_mem_stat *stat, tpu_mem_pool pool, int64_t n);
void tpu_mem_stat_lower(tpu_mem_stat *stat, tpu_mem_pool pool, int64_t n);

/* ---------------------------------------------------------- mem_history.c */

/* Take or drop one reference to a context through the installed ops; no-op
 * for NULL or without ops. */
void tpu_mem_context_retain(void *context);
void tpu_mem_context_release(void *context);

/* Appends an event to a's ring unless its settings skip this action,
 * keeping a reference to `context` when the context level keeps contexts
 * in events (ALLOC or ALL). Caller holds a->lock; call it through
 * tpu_mem_record_event. */
void tpu_mem_record_event_traced(tpu_mem_allocator *a, tpu_mem_action action, int stream,
                                 uint64_t addr, uint64_t size, uint64_t device_free, void *context);

/* Records an event of `a` while its events are traced: off, one test of a
 * flag. Caller holds a->lock. */
static inline void tpu_mem_record_event(tpu_mem_allocator *a, tpu_mem_action action, int stream,
                                        uint64_t addr, uint64_t size, uint64_t device_free,
                                        void *context) {
    if (a->history.trace)
        tpu_mem_record_event_traced(a, action, stream, addr, size, device_free, context);
}

/* Whether a block allocated now keeps its context (context level STATE or
 * more). Caller holds a->lock. */
static inline bool tpu_mem_keeps_block_context(const tpu_mem_allocator *a) {
    return a->history.context >= TPU_MEM_CONTEXT_STATE;
}

#endif
