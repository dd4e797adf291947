/* Device memory: a caching allocator per chip.
 *
 * Requests round up to 512 bytes. One of at most 1 MiB (small) takes a
 * segment of its own size from the target; a larger one takes a segment
 * rounded up to 2 MiB, and the rest of the segment becomes a cached block
 * of its own. A freed block goes to a cache list of the stream it was
 * allocated for and is handed out again at once to work on that stream,
 * which runs in order: the smallest cached block that fits and is no
 * more than twice its size, for a large request from a large segment and
 * split to its size, for a small one a whole block of a small segment.
 * So a large
 * block counts only its own bytes, and a rest too small for any large
 * request waits, cached, until its neighbours merge with it: a freed block
 * merges with the cached blocks beside it in its segment. Blocks are never
 * handed to another stream: unused cache is returned to the target, whole
 * segments only, when capacity (or the limit the memory fraction sets)
 * runs short, after the streams that may still use it have drained.
 *
 * Statistics count a block in the pool of its segment (small segments
 * hold one block each).
 *
 * record_stream adds a use by a stream to a live block; at free time it
 * stands for everything queued on that stream so far (CUDA's meaning), and
 * a block freed before those records have run waits on the pending list
 * and joins its cache list once they have (checked lazily, on the next
 * allocation or empty_cache).
 *
 * Each step updates the statistics (mem_stats.c) and, while recording,
 * records an event with the caller's context (mem_history.c).
 *
 * One mutex per chip protects its allocator. It is released while waiting
 * for streams, so that a host function on a stream may free memory. */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"
#include "target.h"

#define BLOCK_ROUND 512u         /* every block size is a multiple */
#define SEGMENT_ROUND (2u << 20) /* large segments round up to 2 MiB */
#define MIN_BUCKETS 256

typedef tpu_mem_block block;
typedef tpu_mem_block_use block_use;
typedef tpu_mem_allocator allocator;

tpu_mem_allocator tpu_mem_allocators[TPU_CHIPS_MAX];
static allocator *const g_alloc = tpu_mem_allocators;

void tpu_mem_setup(int chips) {
    for (int c = 0; c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_init(&a->lock, NULL);
        a->chip = c;
        a->capacity = tpu_chip_props_of(c)->total_memory;
        a->fraction = 1.0;
        a->limit = a->capacity;
    }
}

/* "512 bytes", "1.50 MiB", "2.00 GiB": sizes in messages. */
static void format_bytes(char *buf, size_t cap, uint64_t n) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) {
        snprintf(buf, cap, "%" PRIu64 " bytes", n);
        return;
    }
    double v = (double)n / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.2f %s", v, units[u]);
}

static size_t round_up(size_t n, size_t q) {
    return (n + q - 1) / q * q;
}

static size_t round_size(size_t n) {
    return round_up(n, BLOCK_ROUND);
}

/* ------------------------------------------------------------ live map */

static size_t bucket_of(const allocator *a, const void *p) {
    /* Segments are 64-byte aligned: drop the low bits, then mix. */
    uint64_t k = (uint64_t)(uintptr_t)p >> 6;
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & (a->n_buckets - 1);
}

/* Keeps the load factor at most 1. False only if there is no table at
 * all; a failed growth just leaves longer chains. */
static bool live_reserve(allocator *a) {
    if (a->n_live < a->n_buckets)
        return true;
    size_t n = a->n_buckets ? a->n_buckets * 2 : MIN_BUCKETS;
    block **fresh = calloc(n, sizeof *fresh);
    if (!fresh)
        return a->n_buckets > 0;
    block **old = a->buckets;
    size_t n_old = a->n_buckets;
    a->buckets = fresh;
    a->n_buckets = n;
    for (size_t i = 0; i < n_old; i++) {
        for (block *b = old[i], *next; b; b = next) {
            next = b->next;
            size_t h = bucket_of(a, b->ptr);
            b->next = fresh[h];
            fresh[h] = b;
        }
    }
    free(old);
    return true;
}

static void live_insert(allocator *a, block *b) {
    assert(a->n_buckets > 0);
    size_t h = bucket_of(a, b->ptr);
    b->next = a->buckets[h];
    a->buckets[h] = b;
    a->n_live++;
}

static block *live_remove(allocator *a, const void *p) {
    if (!a->n_buckets)
        return NULL;
    for (block **link = &a->buckets[bucket_of(a, p)]; *link; link = &(*link)->next) {
        block *b = *link;
        if (b->ptr == p) {
            *link = b->next;
            b->next = NULL;
            a->n_live--;
            return b;
        }
    }
    return NULL;
}

/* The live block of `a` starting exactly at p (hash lookup only). */
static block *live_get(const allocator *a, const void *p) {
    if (!a->n_buckets)
        return NULL;
    for (block *b = a->buckets[bucket_of(a, p)]; b; b = b->next)
        if (b->ptr == p)
            return b;
    return NULL;
}

/* The live block containing address p: a hash lookup for a block's own
 * address, a scan of every live block otherwise. */
static block *live_find(const allocator *a, const void *p) {
    block *hit = live_get(a, p);
    if (hit || !a->n_buckets)
        return hit;
    uintptr_t x = (uintptr_t)p;
    for (size_t i = 0; i < a->n_buckets; i++)
        for (block *b = a->buckets[i]; b; b = b->next)
            if (x >= (uintptr_t)b->ptr && x < (uintptr_t)b->ptr + b->size)
                return b;
    return NULL;
}

/* --------------------------------------------------------- cache, pending */

/* Raises (or lowers, with sign -1) the inactive-split statistics by b,
 * if b is part of a split segment. */
static void count_inactive_split(allocator *a, const block *b, int sign) {
    if (tpu_mem_block_whole(b))
        return;
    tpu_mem_pool pool = tpu_mem_pool_of(b->segment->size);
    if (sign > 0) {
        tpu_mem_stat_raise(a->stats.inactive_split, pool, 1);
        tpu_mem_stat_raise(a->stats.inactive_split_bytes, pool, (int64_t)b->size);
    } else {
        tpu_mem_stat_lower(a->stats.inactive_split, pool, 1);
        tpu_mem_stat_lower(a->stats.inactive_split_bytes, pool, (int64_t)b->size);
    }
}

/* Links b into its stream's cache list, which ascends by size. */
static void cache_insert(allocator *a, block *b) {
    block *prev = NULL, *at = a->cache[b->stream];
    while (at && at->size < b->size) {
        prev = at;
        at = at->next;
    }
    b->prev = prev;
    b->next = at;
    if (at)
        at->prev = b;
    *(prev ? &prev->next : &a->cache[b->stream]) = b;
    b->place = TPU_MEM_BLOCK_CACHED;
    count_inactive_split(a, b, +1);
}

/* Unlinks the cached block b from its list (cached_bytes is the caller's). */
static void cache_unlink(allocator *a, block *b) {
    *(b->prev ? &b->prev->next : &a->cache[b->stream]) = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->next = b->prev = NULL;
    count_inactive_split(a, b, -1);
}

/* Cuts b (not live) down to n bytes when it is in a large segment; the
 * rest becomes a cached block after it, with b's free_seq. Without host
 * memory for the rest's record, b stays whole. */
static void split_block(allocator *a, block *b, size_t n) {
    if (b->segment->size <= TPU_MEM_SMALL_SIZE || b->size == n)
        return;
    block *rest = calloc(1, sizeof *rest);
    if (!rest)
        return;
    rest->ptr = (char *)b->ptr + n;
    rest->size = b->size - n;
    rest->stream = b->stream;
    rest->free_seq = b->free_seq;
    rest->segment = b->segment;
    rest->before = b;
    rest->after = b->after;
    if (b->after)
        b->after->before = rest;
    b->after = rest;
    b->size = n;
    a->n_blocks++;
    a->cached_bytes += rest->size;
    cache_insert(a, rest);
}

/* Best fit on stream `s`: the smallest cached block of at least n bytes
 * in a segment of n's pool, and of at most 2n bytes: a larger one is left
 * to a larger request, and, for a large one, is not split for a small
 * part that would pin its whole segment (a segment goes back to the
 * target only whole, so a small live part of a large free block would
 * keep the rest from an OOM retry or empty_cache). A large request's
 * block is split to n bytes (split_block); a small one's is taken whole. */
static block *cache_take(allocator *a, int s, size_t n) {
    bool small = n <= TPU_MEM_SMALL_SIZE;
    for (block *b = a->cache[s]; b; b = b->next) {
        if (b->size < n || small != (b->segment->size <= TPU_MEM_SMALL_SIZE))
            continue;
        if (b->size > 2 * n)
            return NULL; /* the list ascends: nothing fits better */
        cache_unlink(a, b);
        a->cached_bytes -= b->size;
        split_block(a, b, n);
        return b;
    }
    return NULL;
}

/* Merges the cached blocks beside b in its segment into b (b is free and
 * in no list): b then spans them, with the latest free_seq of them all. */
static void merge_neighbours(allocator *a, block *b) {
    block *side[2] = {b->before, b->after};
    for (int i = 0; i < 2; i++) {
        block *o = side[i];
        if (!o || o->place != TPU_MEM_BLOCK_CACHED)
            continue;
        cache_unlink(a, o);
        if (i == 0) {
            b->ptr = o->ptr;
            b->before = o->before;
            if (o->before)
                o->before->after = b;
        } else {
            b->after = o->after;
            if (o->after)
                o->after->before = b;
        }
        b->size += o->size;
        if (o->free_seq > b->free_seq)
            b->free_seq = o->free_seq;
        free(o->uses);
        free(o);
        a->n_blocks--;
    }
}

static bool uses_done(const block *b) {
    for (int i = 0; i < b->n_uses; i++)
        if (tpu_stream_completed_seq(b->uses[i].stream) < b->uses[i].seq)
            return false;
    return true;
}

/* Returns b's segment to the target; b covers it whole and is in no list. */
static void segment_free(allocator *a, block *b) {
    tpu_mem_segment *g = b->segment;
    tpu_target_get()->mem_free(a->chip, g->ptr, g->size);
    tpu_mem_pool pool = tpu_mem_pool_of(g->size);
    tpu_mem_stat_lower(a->stats.reserved_bytes, pool, (int64_t)g->size);
    tpu_mem_stat_lower(a->stats.segment, pool, 1);
    a->stats.num_device_free++;
    tpu_mem_record_event(a, TPU_MEM_ACTION_SEGMENT_FREE, b->stream, (uint64_t)(uintptr_t)g->ptr,
                         g->size, 0, g->context);
    tpu_mem_context_release(g->context);
    free(g);
    free(b->uses);
    free(b);
    a->n_blocks--;
}

/* The end of a free: the block is no longer active and joins its stream's
 * cache. `context` is the free's (NULL: the allocation's is used). */
static void complete_free(allocator *a, block *b, void *context) {
    tpu_mem_stats *m = &a->stats;
    tpu_mem_pool pool = tpu_mem_pool_of(b->segment->size);
    tpu_mem_stat_lower(m->active, pool, 1);
    tpu_mem_stat_lower(m->active_bytes, pool, (int64_t)b->size);
    tpu_mem_stat_lower(m->requested_bytes, pool, (int64_t)b->requested);
    tpu_mem_record_event(a, TPU_MEM_ACTION_FREE_COMPLETED, b->stream, (uint64_t)(uintptr_t)b->ptr,
                         b->requested, 0, context ? context : b->context);
    tpu_mem_context_release(b->context);
    b->context = NULL;
    b->requested = 0;
    b->n_uses = 0;
    merge_neighbours(a, b);
    /* Caching off: a whole segment goes back to the target at once if no
     * queued work can touch it; else it waits in the cache, which is never
     * handed out and is released at the next allocation. */
    tpu_stream *own = tpu_stream_peek(a->chip, b->stream);
    if (a->no_caching && tpu_mem_block_whole(b) &&
        (!own || tpu_stream_completed_seq(own) >= b->free_seq)) {
        a->cached_bytes -= b->size;
        segment_free(a, b);
        return;
    }
    cache_insert(a, b);
}

/* Completes the frees of pending blocks whose recorded work has run. */
static void promote_pending(allocator *a) {
    for (block **link = &a->pending; *link;) {
        block *b = *link;
        if (uses_done(b)) {
            *link = b->next;
            complete_free(a, b, NULL);
        } else {
            link = &b->next;
        }
    }
}

/* Returns to the target every cached whole segment that no queued work
 * can still touch: its stream has run everything queued up to its free. */
static void release_cached(allocator *a) {
    for (int s = 0; s < TPU_STREAMS_MAX; s++) {
        tpu_stream *stream = tpu_stream_peek(a->chip, s);
        for (block *b = a->cache[s], *next; b; b = next) {
            next = b->next;
            if (tpu_mem_block_whole(b) &&
                (!stream || tpu_stream_completed_seq(stream) >= b->free_seq)) {
                cache_unlink(a, b);
                a->cached_bytes -= b->size;
                segment_free(a, b);
            }
        }
    }
}

/* ------------------------------------------------------------ allocation */

/* The bytes of a new segment for a block of n bytes, given what is
 * reserved: n when small, when caching is off or when only n fits under
 * the limit, else n rounded up to 2 MiB. */
static size_t segment_size(const allocator *a, size_t n, uint64_t reserved) {
    if (n <= TPU_MEM_SMALL_SIZE || a->no_caching)
        return n;
    size_t g = round_up(n, SEGMENT_ROUND);
    return reserved + g > a->limit ? n : g;
}

/* A block of n bytes for stream s from the cache, or a new segment if the
 * capacity and the fraction's limit allow; *out = NULL if neither.
 * *host_failed tells the target refused a segment within the limit. */
static tpu_status try_alloc(allocator *a, int s, size_t n, void *context, block **out,
                            bool *host_failed) {
    promote_pending(a);
    if (a->no_caching)
        release_cached(a); /* what queued work has finished with */
    block *b = a->no_caching ? NULL : cache_take(a, s, n);
    if (b) {
        a->stats.num_cache_hits++;
        *out = b;
        return TPU_OK;
    }
    *out = NULL;
    uint64_t reserved = (uint64_t)a->stats.reserved_bytes[TPU_MEM_POOL_ALL].current;
    if (reserved + n > a->limit)
        return TPU_OK;
    size_t size = segment_size(a, n, reserved);
    b = calloc(1, sizeof *b);
    tpu_mem_segment *g = calloc(1, sizeof *g);
    if (!b || !g) {
        free(b);
        free(g);
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_mem_alloc: no host memory for a block");
    }
    if (tpu_target_get()->mem_alloc(a->chip, size, &g->ptr) != TPU_OK) {
        free(b);
        free(g);
        *host_failed = true;
        return TPU_OK;
    }
    g->size = size;
    b->ptr = g->ptr;
    b->size = size;
    b->stream = s;
    b->segment = g;
    a->n_blocks++;
    tpu_mem_pool pool = tpu_mem_pool_of(size);
    tpu_mem_stat_raise(a->stats.reserved_bytes, pool, (int64_t)size);
    tpu_mem_stat_raise(a->stats.segment, pool, 1);
    a->stats.num_device_alloc++;
    if (tpu_mem_keeps_block_context(a)) {
        g->context = context;
        tpu_mem_context_retain(context);
    }
    tpu_mem_record_event(a, TPU_MEM_ACTION_SEGMENT_ALLOC, s, (uint64_t)(uintptr_t)g->ptr, size, 0,
                         context);
    split_block(a, b, n);
    *out = b;
    return TPU_OK;
}

/* The message gives exact byte counts beside the rounded ones, and the
 * rounded block size, so that it never reads "tried to allocate 16.00 MiB;
 * 16.00 MiB free" when a few bytes (or the rounding) decide. A limit set
 * by the memory fraction is named with the fraction. */
static tpu_status out_of_memory(allocator *a, int s, size_t nbytes, bool host_failed,
                                void *context) {
    char want[32], avail[32], cap[32], cached[32], limit[32];
    uint64_t reserved = (uint64_t)a->stats.reserved_bytes[TPU_MEM_POOL_ALL].current;
    uint64_t free_bytes = a->capacity - reserved;
    format_bytes(want, sizeof want, nbytes);
    format_bytes(avail, sizeof avail, free_bytes);
    format_bytes(cap, sizeof cap, a->capacity);
    format_bytes(cached, sizeof cached, a->cached_bytes);
    format_bytes(limit, sizeof limit, a->limit);
    a->stats.num_ooms++;
    tpu_mem_record_event(a, TPU_MEM_ACTION_OOM, s, 0, nbytes, free_bytes, context);
    char stuck[128] = "";
    uint64_t split_bytes = (uint64_t)a->stats.inactive_split_bytes[TPU_MEM_POOL_ALL].current;
    if (split_bytes > 0) {
        char sb[32];
        format_bytes(sb, sizeof sb, split_bytes);
        snprintf(stuck, sizeof stuck,
                 "; %s of the cache lies in segments with live blocks and cannot be released", sb);
    }
    char block_size[48] = "";
    if (nbytes <= a->capacity && round_size(nbytes) != nbytes)
        snprintf(block_size, sizeof block_size, ", a block of %zu bytes", round_size(nbytes));
    char fraction[160] = "";
    if (a->limit < a->capacity)
        snprintf(fraction, sizeof fraction,
                 "; the per-process memory fraction %g limits this process to %s (%" PRIu64
                 " bytes), %" PRIu64 " bytes reserved",
                 a->fraction, limit, a->limit, reserved);
    return tpu_set_error(TPU_ERR_OUT_OF_MEMORY,
                         "tpu:%d out of memory: tried to allocate %s (%zu bytes%s); %s (%" PRIu64
                         " bytes) free of %s capacity (%s cached)%s%s%s",
                         a->chip, want, nbytes, block_size, avail, free_bytes, cap, cached, stuck,
                         fraction, host_failed ? "; the host itself has no memory left" : "");
}

void tpu_mem_mark_ran(int chip, const tpu_block_mark *m, bool written) {
    allocator *a = &g_alloc[chip];
    tpu_mem_pool pool = (tpu_mem_pool)m->pool;
    pthread_mutex_lock(&a->lock);
    if (written && m->kind == TPU_MARK_ALLOC) {
        tpu_mem_stat_raise(a->stats.allocation, pool, 1);
        tpu_mem_stat_raise(a->stats.allocated_bytes, pool, (int64_t)m->nbytes);
    } else if (written) {
        tpu_mem_stat_lower(a->stats.allocation, pool, 1);
        tpu_mem_stat_lower(a->stats.allocated_bytes, pool, (int64_t)m->nbytes);
    }
    a->marks_queued--;
    pthread_mutex_unlock(&a->lock);
}

/* Queues m on `own`, counted in marks_queued first (the worker may run
 * it at once). False if nothing was queued. */
static bool queue_mark(allocator *a, tpu_stream *own, const tpu_block_mark *m) {
    pthread_mutex_lock(&a->lock);
    a->marks_queued++;
    pthread_mutex_unlock(&a->lock);
    if (tpu_stream_enqueue_mark(own, m))
        return true;
    pthread_mutex_lock(&a->lock);
    a->marks_queued--;
    pthread_mutex_unlock(&a->lock);
    return false;
}

/* Hands out b to the caller: the statistics and the ALLOC event. With
 * by_mark the block is counted as allocated when its ALLOC mark runs. */
static void hand_out(allocator *a, block *b, size_t nbytes, void *context, bool by_mark) {
    b->place = TPU_MEM_BLOCK_LIVE;
    b->requested = nbytes;
    b->counted_by_mark = by_mark;
    b->used_elsewhere = false;
    if (tpu_mem_keeps_block_context(a)) {
        b->context = context;
        tpu_mem_context_retain(context);
    }
    live_insert(a, b);
    tpu_mem_stats *m = &a->stats;
    tpu_mem_pool pool = tpu_mem_pool_of(b->segment->size);
    if (!by_mark) {
        tpu_mem_stat_raise(m->allocation, pool, 1);
        tpu_mem_stat_raise(m->allocated_bytes, pool, (int64_t)b->size);
    }
    tpu_mem_stat_raise(m->active, pool, 1);
    tpu_mem_stat_raise(m->active_bytes, pool, (int64_t)b->size);
    tpu_mem_stat_raise(m->requested_bytes, pool, (int64_t)nbytes);
    tpu_mem_record_event(a, TPU_MEM_ACTION_ALLOC, b->stream, (uint64_t)(uintptr_t)b->ptr, nbytes, 0,
                         context);
}

tpu_status tpu_mem_alloc(int chip, size_t nbytes, tpu_stream *stream, void **out) {
    return tpu_mem_alloc_ctx(chip, nbytes, stream, NULL, out);
}

tpu_status tpu_mem_alloc_ctx(int chip, size_t nbytes, tpu_stream *stream, void *context,
                             void **out) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_alloc", chip);
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_alloc: out is NULL");
    *out = NULL;
    if (stream && tpu_stream_chip(stream) != chip)
        return tpu_set_error(TPU_ERR_WRONG_DEVICE,
                             "tpu_mem_alloc: memory of tpu:%d cannot be allocated for stream %d "
                             "of tpu:%d",
                             chip, tpu_stream_index(stream), tpu_stream_chip(stream));
    if (nbytes == 0)
        return TPU_OK;

    allocator *a = &g_alloc[chip];
    int s = stream ? tpu_stream_index(stream) : 0;
    /* Fused mode counts the block in stream order (see tpu_mem_mark_ran). */
    tpu_stream *own = stream ? stream : tpu_stream_peek(chip, s);
    const bool by_mark = own && tpu_mode_get() == TPU_MODE_FUSED && !tpu_stream_on_worker();
    tpu_block_mark mark = {.kind = TPU_MARK_ALLOC};
    pthread_mutex_lock(&a->lock);
    if (nbytes > a->capacity) { /* hopeless: no need to flush anything */
        st = out_of_memory(a, s, nbytes, false, context);
        pthread_mutex_unlock(&a->lock);
        return st;
    }
    size_t n = round_size(nbytes);
    if (!live_reserve(a)) {
        pthread_mutex_unlock(&a->lock);
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_mem_alloc: no host memory for the block map");
    }

    block *b = NULL;
    bool host_failed = false;
    st = try_alloc(a, s, n, context, &b, &host_failed);
    if (st == TPU_OK && !b) {
        /* Flush: let every stream finish (this chip's cached blocks may
         * still be in use by queued work, on this chip's streams or, after
         * a chip-to-chip copy, on another chip's), return the cache to
         * the target and try once more. Unlocked while waiting, so that work
         * on the streams may free memory. */
        pthread_mutex_unlock(&a->lock);
        for (int c = 0; c < tpu_rt_chip_count(); c++)
            tpu_chip_drain(c);
        pthread_mutex_lock(&a->lock);
        a->stats.num_alloc_retries++;
        a->stats.num_sync_all_streams++;
        promote_pending(a);
        release_cached(a);
        host_failed = false;
        st = try_alloc(a, s, n, context, &b, &host_failed);
        if (st == TPU_OK && !b)
            st = out_of_memory(a, s, nbytes, host_failed, context);
    }
    if (st == TPU_OK) {
        b->stream = s;
        hand_out(a, b, nbytes, context, by_mark);
        *out = b->ptr;
        mark.ptr = b->ptr;
        mark.nbytes = b->size;
        mark.pool = (uint8_t)tpu_mem_pool_of(b->segment->size);
    }
    pthread_mutex_unlock(&a->lock);
    /* Unlocked: a full ring makes the caller wait for the worker. Queued
     * before the caller can queue anything that uses the block. */
    if (st == TPU_OK && by_mark) /* queued: by_mark is never set on a worker */
        (void)queue_mark(a, own, &mark);
    return st;
}

/* At the block's free: whether its use by another stream may still run.
 * The use then stands for everything queued on that stream so far
 * (CUDA's record_stream), so its number is brought up to date. */
static bool use_pending_at_free(block_use *u) {
    u->seq = tpu_stream_submitted_seq(u->stream);
    return tpu_stream_completed_seq(u->stream) < u->seq;
}

/* Frees a block that was just unlinked from the live map: completes the
 * free at once, or parks the block on the pending list while work recorded
 * on other streams may use it. `context` is the free's, or NULL. */
static void free_block(allocator *a, block *b, void *context, bool counted_out_by_mark) {
    tpu_mem_stats *m = &a->stats;
    tpu_mem_pool pool = tpu_mem_pool_of(b->segment->size);
    if (!counted_out_by_mark) {
        tpu_mem_stat_lower(m->allocation, pool, 1);
        tpu_mem_stat_lower(m->allocated_bytes, pool, (int64_t)b->size);
    }
    tpu_mem_record_event(a, TPU_MEM_ACTION_FREE_REQUESTED, b->stream, (uint64_t)(uintptr_t)b->ptr,
                         b->requested, 0, context ? context : b->context);

    tpu_stream *own = tpu_stream_peek(a->chip, b->stream);
    b->free_seq = own ? tpu_stream_submitted_seq(own) : 0;
    a->cached_bytes += b->size;

    /* Keep only uses that may still run. */
    int kept = 0;
    for (int i = 0; i < b->n_uses; i++)
        if (use_pending_at_free(&b->uses[i]))
            b->uses[kept++] = b->uses[i];
    b->n_uses = kept;
    if (kept > 0) {
        b->place = TPU_MEM_BLOCK_PENDING;
        b->next = a->pending;
        a->pending = b;
    } else {
        complete_free(a, b, context);
    }
}

/* Queues the mark of a free on the block's stream, in stream order, and
 * returns whether it did (the mark then counts the block out of the
 * allocated statistics as it runs). In fused mode it is a FREE: what the
 * block holds is dead from here on, so that a fused group need not write
 * values nobody can read; but a RELEASE (counting only) while another
 * stream's recorded work may still read the block. Outside fused mode
 * only a block counted in by a mark gets one (a RELEASE). Queued before
 * the block can be handed out again (the caller still owns it), and
 * unlocked: a full ring makes the caller wait for the worker, which may
 * itself free memory. */
static bool queue_free_mark(int chip, const void *ptr, bool fused) {
    allocator *a = &g_alloc[chip];
    pthread_mutex_lock(&a->lock);
    block *b = live_get(a, ptr);
    bool pending = false;
    tpu_block_mark m = {.ptr = ptr};
    int index = 0;
    bool by_mark = false;
    if (b) {
        for (int i = 0; i < b->n_uses; i++)
            pending = pending || use_pending_at_free(&b->uses[i]);
        index = b->stream;
        by_mark = b->counted_by_mark;
        m.nbytes = b->size;
        m.pool = (uint8_t)tpu_mem_pool_of(b->segment->size);
        m.kind = fused && !pending ? TPU_MARK_FREE : TPU_MARK_RELEASE;
        m.pairs = !b->used_elsewhere;
    }
    pthread_mutex_unlock(&a->lock);
    tpu_stream *own = b ? tpu_stream_peek(chip, index) : NULL;
    if (!own || !(fused || by_mark))
        return false;
    return queue_mark(a, own, &m);
}

tpu_status tpu_mem_free(void *ptr) {
    return tpu_mem_free_ctx(ptr, NULL);
}

tpu_status tpu_mem_free_ctx(void *ptr, void *context) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ptr)
        return TPU_OK;
    int chips = tpu_rt_chip_count();
    /* A block that takes no mark (outside fused mode and not counted in by
     * one, or a worker's free, which queues none) is freed under the lock
     * that finds it; else its mark is queued first (queue_free_mark). */
    const bool marks = !tpu_stream_on_worker(), fused = tpu_mode_get() == TPU_MODE_FUSED;
    for (int c = 0; c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_lock(&a->lock);
        block *b = live_get(a, ptr);
        const bool unmarked = b && !(marks && (fused || b->counted_by_mark));
        if (unmarked)
            free_block(a, live_remove(a, ptr), context, false);
        pthread_mutex_unlock(&a->lock);
        if (unmarked)
            return TPU_OK;
        if (!b)
            continue;
        bool by_mark = queue_free_mark(c, ptr, fused);
        pthread_mutex_lock(&a->lock);
        b = live_remove(a, ptr);
        if (b)
            free_block(a, b, context, by_mark);
        pthread_mutex_unlock(&a->lock);
        if (b)
            return TPU_OK;
        break; /* freed by another thread meanwhile */
    }
    return tpu_set_error(TPU_ERR_INVALID_ARG,
                         "tpu_mem_free: %p was not allocated by the torch-tpu allocator, or was "
                         "already freed",
                         ptr);
}

/* Adds or refreshes the use of b by `stream`. Uses by the block's own
 * stream are implied by stream order and not stored. */
static tpu_status add_use(allocator *a, block *b, tpu_stream *stream) {
    if (tpu_stream_chip(stream) == a->chip && tpu_stream_index(stream) == b->stream)
        return TPU_OK;
    b->used_elsewhere = true;
    uint64_t seq = tpu_stream_submitted_seq(stream);
    for (int i = 0; i < b->n_uses; i++) {
        if (b->uses[i].stream == stream) {
            b->uses[i].seq = seq;
            return TPU_OK;
        }
    }
    if (b->n_uses == b->cap_uses) {
        int cap = b->cap_uses ? 2 * b->cap_uses : 2;
        block_use *u = realloc(b->uses, (size_t)cap * sizeof *u);
        if (!u)
            return tpu_set_error(TPU_ERR_HOST_MEMORY,
                                 "tpu_mem_record_stream: no host memory to record a use");
        b->uses = u;
        b->cap_uses = cap;
    }
    b->uses[b->n_uses++] = (block_use){stream, seq};
    return TPU_OK;
}

tpu_status tpu_mem_record_stream(void *ptr, tpu_stream *stream) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ptr || !stream)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_record_stream: %s is NULL",
                             ptr ? "stream" : "ptr");
    int chips = tpu_rt_chip_count();
    for (int c = 0; c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_lock(&a->lock);
        block *b = live_find(a, ptr);
        if (b)
            st = add_use(a, b, stream);
        pthread_mutex_unlock(&a->lock);
        if (b)
            return st;
    }
    return tpu_set_error(TPU_ERR_INVALID_ARG,
                         "tpu_mem_record_stream: %p is not inside a live tpu allocation", ptr);
}

tpu_status tpu_mem_chip_of(const void *ptr, int *chip) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!chip)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_chip_of: chip is NULL");
    int chips = tpu_rt_chip_count();
    for (int c = 0; ptr && c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_lock(&a->lock);
        bool found = live_find(a, ptr) != NULL;
        pthread_mutex_unlock(&a->lock);
        if (found) {
            *chip = c;
            return TPU_OK;
        }
    }
    return tpu_set_error(TPU_ERR_INVALID_ARG,
                         "tpu_mem_chip_of: %p is not inside a live tpu allocation", ptr);
}

/* Whether [p, p + nbytes) lies in the bytes live block b was asked for. */
static bool within(const block *b, const void *p, uint64_t nbytes) {
    return b && nbytes <= b->requested && (uintptr_t)p - (uintptr_t)b->ptr <= b->requested - nbytes;
}

/* Whether [p, p + nbytes) lies in the bytes a live block of `a` was asked
 * for; exact block starts (every PyTorch storage) by hash, others by scan. */
static bool range_live(allocator *a, const void *p, uint64_t nbytes, bool scan) {
    pthread_mutex_lock(&a->lock);
    bool ok = within(scan ? live_find(a, p) : live_get(a, p), p, nbytes);
    pthread_mutex_unlock(&a->lock);
    return ok;
}

int tpu_mem_first_unlisted(int chip, const tpu_mem_range *ranges, int n) {
    allocator *a = &g_alloc[chip];
    int i = 0;
    pthread_mutex_lock(&a->lock);
    while (i < n && within(live_get(a, ranges[i].p), ranges[i].p, ranges[i].nbytes))
        i++;
    pthread_mutex_unlock(&a->lock);
    return i;
}

tpu_status tpu_mem_check_range(int chip, bool any_chip, const void *p, uint64_t nbytes) {
    /* The common case first: a storage of this chip, by its start. Then
     * other chips' (a chip-to-chip copy reads one), then interior
     * addresses, which only hand-made records use. */
    if (range_live(&g_alloc[chip], p, nbytes, false))
        return TPU_OK;
    int chips = tpu_rt_chip_count();
    for (int scan = 0; scan < 2; scan++)
        for (int c = 0; c < chips; c++)
            if ((c == chip || any_chip) && (scan || c != chip) &&
                range_live(&g_alloc[c], p, nbytes, scan))
                return TPU_OK;
    return tpu_set_error(TPU_ERR_OUT_OF_BOUNDS,
                         "%" PRIu64 " bytes at %p are not live memory of tpu:%d%s (freed, "
                         "resized, or never allocated there)",
                         nbytes, p, chip, any_chip ? " or another chip" : "");
}

tpu_status tpu_mem_empty_cache(int chip) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_empty_cache", chip);
    if (st != TPU_OK)
        return st;
    /* Drain first: a cached block may still be read by queued work. The
     * kept stream errors stay for the user's next synchronising call. */
    tpu_chip_drain(chip);
    allocator *a = &g_alloc[chip];
    pthread_mutex_lock(&a->lock);
    a->stats.num_sync_all_streams++;
    promote_pending(a);
    release_cached(a);
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

void tpu_mem_set_caching(bool enabled) {
    if (tpu_rt_enter() != TPU_OK) {
        tpu_clear_error(); /* nothing to configure in a runtime that cannot start */
        return;
    }
    for (int c = 0; c < tpu_rt_chip_count(); c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_lock(&a->lock);
        a->no_caching = !enabled;
        pthread_mutex_unlock(&a->lock);
    }
}

bool tpu_mem_caching_enabled(void) {
    if (tpu_rt_enter() != TPU_OK) {
        tpu_clear_error();
        return true;
    }
    allocator *a = &g_alloc[0];
    pthread_mutex_lock(&a->lock);
    bool on = !a->no_caching;
    pthread_mutex_unlock(&a->lock);
    return on;
}
