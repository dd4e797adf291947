/* Device memory: a caching allocator per chip.
 *
 * Every allocation is one segment from the target, rounded up (no
 * splitting). A freed block goes to a cache list of the stream it was
 * allocated for and is handed out again at once to work on that stream,
 * which runs in order. Blocks are never handed to another stream: unused
 * cache is returned to the target when capacity runs short, after the
 * streams that may still use it have drained.
 *
 * record_stream adds a use by a stream to a live block; at free time it
 * stands for everything queued on that stream so far (CUDA's meaning), and
 * a block freed before those records have run waits on the pending list
 * and joins its cache list once they have (checked lazily, on the next
 * allocation or empty_cache).
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

#include "runtime_internal.h"
#include "target.h"

#define SMALL_SIZE (1u << 20)  /* requests up to 1 MiB round up to 512 bytes */
#define SMALL_ROUND 512u
#define LARGE_ROUND (2u << 20) /* larger ones to 2 MiB */
#define MIN_BUCKETS 256

typedef struct {
    tpu_stream *stream;
    uint64_t seq; /* the stream's submitted_seq when recorded */
} block_use;

typedef struct block {
    struct block *next; /* hash chain while live; cache or pending list when free */
    void *ptr;
    size_t size;        /* bytes of the segment (rounded) */
    size_t requested;   /* bytes asked for by the live allocation */
    int stream;         /* index of the stream it is allocated for, on its chip */
    uint64_t free_seq;  /* that stream's submitted_seq when freed */
    block_use *uses;    /* record_stream uses by other streams */
    int n_uses, cap_uses;
} block;

typedef struct {
    pthread_mutex_t lock;
    int chip;
    uint64_t capacity;
    block **buckets; /* live blocks by address; n_buckets is a power of two */
    size_t n_buckets, n_live;
    block *cache[TPU_STREAMS_MAX]; /* free blocks per stream index, ascending size */
    block *pending;                /* free blocks waiting for recorded uses */
    uint64_t cached_bytes;         /* bytes in cache lists and pending */
    tpu_mem_stats stats;
} allocator;

static allocator g_alloc[TPU_CHIPS_MAX];

void tpu_mem_setup(int chips) {
    for (int c = 0; c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_init(&a->lock, NULL);
        a->chip = c;
        a->capacity = tpu_chip_props_of(c)->total_memory;
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

static size_t round_size(size_t n) {
    size_t q = n <= SMALL_SIZE ? SMALL_ROUND : LARGE_ROUND;
    return (n + q - 1) / q * q;
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

static void cache_insert(allocator *a, block *b) {
    block **link = &a->cache[b->stream];
    while (*link && (*link)->size < b->size)
        link = &(*link)->next;
    b->next = *link;
    *link = b;
}

/* Best fit on stream `s`: the smallest cached block of at least n bytes,
 * if it wastes no more than n (a larger one is better left to a larger
 * request). */
static block *cache_take(allocator *a, int s, size_t n) {
    for (block **link = &a->cache[s]; *link; link = &(*link)->next) {
        block *b = *link;
        if (b->size < n)
            continue;
        if (b->size > 2 * n)
            return NULL; /* the list ascends: nothing fits better */
        *link = b->next;
        b->next = NULL;
        a->cached_bytes -= b->size;
        return b;
    }
    return NULL;
}

static bool uses_done(const block *b) {
    for (int i = 0; i < b->n_uses; i++)
        if (tpu_stream_completed_seq(b->uses[i].stream) < b->uses[i].seq)
            return false;
    return true;
}

/* Moves pending blocks whose recorded work has run to their cache list. */
static void promote_pending(allocator *a) {
    for (block **link = &a->pending; *link;) {
        block *b = *link;
        if (uses_done(b)) {
            *link = b->next;
            b->n_uses = 0;
            cache_insert(a, b);
        } else {
            link = &b->next;
        }
    }
}

static void segment_free(allocator *a, block *b) {
    tpu_target_get()->mem_free(a->chip, b->ptr, b->size);
    a->stats.reserved_bytes -= b->size;
    a->stats.segment_count--;
    a->stats.num_segment_frees++;
    a->stats.released_bytes_total += b->size;
    free(b->uses);
    free(b);
}

/* Returns to the target every cached block that no queued work can still
 * touch: its stream has run everything queued up to its free. */
static void release_cached(allocator *a) {
    for (int s = 0; s < TPU_STREAMS_MAX; s++) {
        tpu_stream *stream = tpu_stream_peek(a->chip, s);
        for (block **link = &a->cache[s]; *link;) {
            block *b = *link;
            if (!stream || tpu_stream_completed_seq(stream) >= b->free_seq) {
                *link = b->next;
                a->cached_bytes -= b->size;
                segment_free(a, b);
            } else {
                link = &b->next;
            }
        }
    }
}

/* ------------------------------------------------------------ allocation */

/* A block of n bytes for stream s from the cache, or a new segment if the
 * capacity allows; *out = NULL if neither. *host_failed tells the target
 * refused a segment within capacity. */
static tpu_status try_alloc(allocator *a, int s, size_t n, block **out, bool *host_failed) {
    promote_pending(a);
    block *b = cache_take(a, s, n);
    if (b) {
        a->stats.num_cache_hits++;
        *out = b;
        return TPU_OK;
    }
    *out = NULL;
    if (a->stats.reserved_bytes + n > a->capacity)
        return TPU_OK;
    b = calloc(1, sizeof *b);
    if (!b)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_mem_alloc: no host memory for a block");
    if (tpu_target_get()->mem_alloc(a->chip, n, &b->ptr) != TPU_OK) {
        free(b);
        *host_failed = true;
        return TPU_OK;
    }
    b->size = n;
    a->stats.reserved_bytes += n;
    if (a->stats.reserved_bytes > a->stats.reserved_bytes_peak)
        a->stats.reserved_bytes_peak = a->stats.reserved_bytes;
    a->stats.segment_count++;
    if (a->stats.segment_count > a->stats.segment_count_peak)
        a->stats.segment_count_peak = a->stats.segment_count;
    a->stats.num_segment_allocs++;
    a->stats.segment_bytes_total += n;
    *out = b;
    return TPU_OK;
}

/* The message gives exact byte counts beside the rounded ones, and the
 * rounded block size, so that it never reads "tried to allocate 16.00 MiB;
 * 16.00 MiB free" when a few bytes (or the rounding) decide. */
static tpu_status out_of_memory(allocator *a, size_t nbytes, bool host_failed) {
    char want[32], avail[32], cap[32], cached[32];
    uint64_t free_bytes = a->capacity - a->stats.reserved_bytes;
    format_bytes(want, sizeof want, nbytes);
    format_bytes(avail, sizeof avail, free_bytes);
    format_bytes(cap, sizeof cap, a->capacity);
    format_bytes(cached, sizeof cached, a->cached_bytes);
    a->stats.num_ooms++;
    char block[48] = "";
    if (nbytes <= a->capacity && round_size(nbytes) != nbytes)
        snprintf(block, sizeof block, ", a block of %zu bytes", round_size(nbytes));
    return tpu_set_error(TPU_ERR_OUT_OF_MEMORY,
                         "tpu:%d out of memory: tried to allocate %s (%zu bytes%s); %s (%" PRIu64
                         " bytes) free of %s capacity (%s cached)%s",
                         a->chip, want, nbytes, block, avail, free_bytes, cap, cached,
                         host_failed ? "; the host itself has no memory left" : "");
}

tpu_status tpu_mem_alloc(int chip, size_t nbytes, tpu_stream *stream, void **out) {
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
    pthread_mutex_lock(&a->lock);
    if (nbytes > a->capacity) { /* hopeless: no need to flush anything */
        st = out_of_memory(a, nbytes, false);
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
    st = try_alloc(a, s, n, &b, &host_failed);
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
        promote_pending(a);
        release_cached(a);
        host_failed = false;
        st = try_alloc(a, s, n, &b, &host_failed);
        if (st == TPU_OK && !b)
            st = out_of_memory(a, nbytes, host_failed);
    }
    if (st == TPU_OK) {
        b->requested = nbytes;
        b->stream = s;
        live_insert(a, b);
        tpu_mem_stats *m = &a->stats;
        m->allocated_bytes += b->size;
        if (m->allocated_bytes > m->allocated_bytes_peak)
            m->allocated_bytes_peak = m->allocated_bytes;
        m->requested_bytes += nbytes;
        if (m->requested_bytes > m->requested_bytes_peak)
            m->requested_bytes_peak = m->requested_bytes;
        m->allocation_count++;
        if (m->allocation_count > m->allocation_count_peak)
            m->allocation_count_peak = m->allocation_count;
        m->num_allocs++;
        m->allocated_bytes_total += b->size;
        *out = b->ptr;
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}

/* At the block's free: whether its use by another stream may still run.
 * The use then stands for everything queued on that stream so far
 * (CUDA's record_stream), so its number is brought up to date. */
static bool use_pending_at_free(block_use *u) {
    u->seq = tpu_stream_submitted_seq(u->stream);
    return tpu_stream_completed_seq(u->stream) < u->seq;
}

/* Puts a block that was just unlinked from the live map into the cache, or
 * on the pending list while work recorded on other streams may use it. */
static void free_block(allocator *a, block *b) {
    tpu_mem_stats *m = &a->stats;
    m->allocated_bytes -= b->size;
    m->requested_bytes -= b->requested;
    m->allocation_count--;
    m->num_frees++;
    m->freed_bytes_total += b->size;

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
        b->next = a->pending;
        a->pending = b;
    } else {
        cache_insert(a, b);
    }
}

/* Fused mode: tells the block's stream, in stream order, that what the
 * block holds is dead from here on, so that a fused group need not write
 * values nobody can read. Queued before the block can be handed out
 * again (the caller still owns it), and only for a block no other stream
 * may still read (no record_stream use pending). Unlocked while queueing:
 * a full ring makes the caller wait for the worker, which may itself free
 * memory. */
static void queue_free_marker(const void *ptr, int chips) {
    for (int c = 0; c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_lock(&a->lock);
        block *b = live_get(a, ptr);
        bool pending = false;
        int index = b ? b->stream : 0;
        size_t size = b ? b->size : 0;
        for (int i = 0; b && i < b->n_uses; i++)
            pending = pending || use_pending_at_free(&b->uses[i]);
        pthread_mutex_unlock(&a->lock);
        if (!b)
            continue;
        tpu_stream *own = tpu_stream_peek(c, index);
        if (own && !pending)
            tpu_stream_enqueue_free(own, ptr, size);
        return;
    }
}

tpu_status tpu_mem_free(void *ptr) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ptr)
        return TPU_OK;
    int chips = tpu_rt_chip_count();
    if (tpu_mode_get() == TPU_MODE_FUSED)
        queue_free_marker(ptr, chips);
    for (int c = 0; c < chips; c++) {
        allocator *a = &g_alloc[c];
        pthread_mutex_lock(&a->lock);
        block *b = live_remove(a, ptr);
        if (b)
            free_block(a, b);
        pthread_mutex_unlock(&a->lock);
        if (b)
            return TPU_OK;
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

/* Whether [p, p + nbytes) lies in the bytes a live block of `a` was asked
 * for; exact block starts (every PyTorch storage) by hash, others by scan. */
static bool range_live(allocator *a, const void *p, uint64_t nbytes, bool scan) {
    pthread_mutex_lock(&a->lock);
    const block *b = scan ? live_find(a, p) : live_get(a, p);
    bool ok = b && nbytes <= b->requested &&
              (uintptr_t)p - (uintptr_t)b->ptr <= b->requested - nbytes;
    pthread_mutex_unlock(&a->lock);
    return ok;
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
    promote_pending(a);
    release_cached(a);
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

/* ----------------------------------------------------------------- stats */

tpu_status tpu_mem_get_stats(int chip, tpu_mem_stats *out) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_get_stats", chip);
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_get_stats: out is NULL");
    allocator *a = &g_alloc[chip];
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_reset_peak_stats(int chip) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_reset_peak_stats", chip);
    if (st != TPU_OK)
        return st;
    allocator *a = &g_alloc[chip];
    pthread_mutex_lock(&a->lock);
    a->stats.allocated_bytes_peak = a->stats.allocated_bytes;
    a->stats.reserved_bytes_peak = a->stats.reserved_bytes;
    a->stats.requested_bytes_peak = a->stats.requested_bytes;
    a->stats.allocation_count_peak = a->stats.allocation_count;
    a->stats.segment_count_peak = a->stats.segment_count;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_reset_accumulated_stats(int chip) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_reset_accumulated_stats", chip);
    if (st != TPU_OK)
        return st;
    allocator *a = &g_alloc[chip];
    pthread_mutex_lock(&a->lock);
    tpu_mem_stats *m = &a->stats;
    m->num_allocs = m->num_frees = 0;
    m->allocated_bytes_total = m->freed_bytes_total = 0;
    m->num_segment_allocs = m->num_segment_frees = 0;
    m->segment_bytes_total = m->released_bytes_total = 0;
    m->num_cache_hits = m->num_alloc_retries = m->num_ooms = 0;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_get_info(int chip, uint64_t *free_bytes, uint64_t *total_bytes) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_get_info", chip);
    if (st != TPU_OK)
        return st;
    if (!free_bytes || !total_bytes)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_get_info: %s is NULL",
                             free_bytes ? "total_bytes" : "free_bytes");
    allocator *a = &g_alloc[chip];
    pthread_mutex_lock(&a->lock);
    *free_bytes = a->capacity - a->stats.reserved_bytes;
    *total_bytes = a->capacity;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}
