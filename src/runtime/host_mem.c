/* Pinned host memory: page-aligned allocations kept in a small sorted
 * table so that "is this address pinned?" (asked for every non_blocking
 * copy and by Tensor.is_pinned) is a binary search.
 *
 * Each block is reference-counted: its owner (the PyTorch storage) holds
 * one reference, and every queued asynchronous copy that reads or writes
 * it holds another, dropped by the stream's worker when the copy has run.
 * The block is freed when the last reference goes. The worker thus never
 * touches a PyTorch or Python object, and needs no lock of the caller's
 * (no GIL) to let a copy's buffer go.
 *
 * Statistics are kept under the same lock; the time spent in the host's
 * allocation and free calls is measured around them, outside it. */
#define _POSIX_C_SOURCE 200809L

#include "tpu/host_mem.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define HOST_PAGE 4096

typedef struct {
    uintptr_t start;
    size_t nbytes;
    int64_t refs; /* the owner's, plus one per queued copy */
} host_block;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_block *host_blocks; /* sorted by start */
static size_t host_count, host_capacity;
static tpu_host_stats host_stats;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void stat_raise(tpu_mem_stat *s, int64_t n) {
    s->current += n;
    s->allocated += n;
    if (s->current > s->peak)
        s->peak = s->current;
}

static void stat_lower(tpu_mem_stat *s, int64_t n) {
    s->current -= n;
    s->freed += n;
}

static void duration_add(tpu_duration_stat *d, int64_t us) {
    d->total_us += us;
    d->count++;
    if (us > d->max_us)
        d->max_us = us;
    if (d->min_us == 0 || us < d->min_us)
        d->min_us = us;
}

/* Counts a block of `rounded` bytes taken (+1) or given back (-1), and the
 * host call's duration. Caller holds host_lock. */
static void count_block(int direction, size_t rounded, int64_t us) {
    tpu_host_stats *h = &host_stats;
    if (direction > 0) {
        stat_raise(&h->allocations, 1);
        stat_raise(&h->allocated_bytes, (int64_t)rounded);
        stat_raise(&h->active_requests, 1);
        stat_raise(&h->active_bytes, (int64_t)rounded);
        h->num_host_alloc++;
        duration_add(&h->host_alloc_time, us);
    } else {
        stat_lower(&h->allocations, 1);
        stat_lower(&h->allocated_bytes, (int64_t)rounded);
        stat_lower(&h->active_requests, 1);
        stat_lower(&h->active_bytes, (int64_t)rounded);
        h->num_host_free++;
        duration_add(&h->host_free_time, us);
    }
}

static size_t round_page(size_t n) {
    return (n + HOST_PAGE - 1) / HOST_PAGE * HOST_PAGE;
}

/* Index of the first block whose start is > addr. Caller holds host_lock. */
static size_t host_upper_bound(uintptr_t addr) {
    size_t lo = 0, hi = host_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (host_blocks[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

tpu_status tpu_host_alloc(size_t nbytes, void **out) {
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_host_alloc: out is NULL");
    *out = NULL;
    if (nbytes == 0)
        return TPU_OK;
    if (nbytes > SIZE_MAX - HOST_PAGE)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "pin_memory: cannot allocate %zu bytes", nbytes);
    size_t rounded = round_page(nbytes);
    int64_t t0 = now_us();
    void *p = aligned_alloc(HOST_PAGE, rounded);
    int64_t took = now_us() - t0;
    if (!p)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "pin_memory: host out of memory allocating %zu bytes",
                             nbytes);
    pthread_mutex_lock(&host_lock);
    if (host_count == host_capacity) {
        size_t cap = host_capacity ? host_capacity * 2 : 64;
        host_block *grown = realloc(host_blocks, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&host_lock);
            free(p);
            return tpu_set_error(TPU_ERR_HOST_MEMORY, "pin_memory: host out of memory");
        }
        host_blocks = grown;
        host_capacity = cap;
    }
    size_t at = host_upper_bound((uintptr_t)p);
    for (size_t i = host_count; i > at; i--)
        host_blocks[i] = host_blocks[i - 1];
    host_blocks[at] = (host_block){(uintptr_t)p, nbytes, 1};
    host_count++;
    count_block(+1, rounded, took);
    pthread_mutex_unlock(&host_lock);
    *out = p;
    return TPU_OK;
}

/* Index of the live block containing addr, or -1. Caller holds host_lock.
 * A zero-byte view at the end of a block still counts as inside it. */
static ptrdiff_t host_find(uintptr_t addr) {
    size_t at = host_upper_bound(addr);
    if (at > 0 && addr - host_blocks[at - 1].start <= host_blocks[at - 1].nbytes)
        return (ptrdiff_t)at - 1;
    return -1;
}

/* Drops one reference of block i; the last one unlinks it. Caller holds
 * host_lock; returns the memory to free after unlocking (with
 * free_unlinked), or NULL, and its page-rounded size in *rounded. */
static void *host_unref_locked(size_t i, size_t *rounded) {
    if (--host_blocks[i].refs > 0)
        return NULL;
    void *p = (void *)host_blocks[i].start;
    *rounded = round_page(host_blocks[i].nbytes);
    for (; i + 1 < host_count; i++)
        host_blocks[i] = host_blocks[i + 1];
    host_count--;
    return p;
}

/* Frees a block unlinked by host_unref_locked (NULL: no-op), timing the
 * host's free for the statistics. Called without host_lock. */
static void free_unlinked(void *p, size_t rounded) {
    if (!p)
        return;
    int64_t t0 = now_us();
    free(p);
    int64_t took = now_us() - t0;
    pthread_mutex_lock(&host_lock);
    count_block(-1, rounded, took);
    pthread_mutex_unlock(&host_lock);
}

tpu_status tpu_host_free(void *ptr) {
    if (!ptr)
        return TPU_OK;
    pthread_mutex_lock(&host_lock);
    size_t at = host_upper_bound((uintptr_t)ptr);
    if (at == 0 || host_blocks[at - 1].start != (uintptr_t)ptr) {
        pthread_mutex_unlock(&host_lock);
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_host_free: %p is not pinned host memory", ptr);
    }
    size_t rounded = 0;
    void *dead = host_unref_locked(at - 1, &rounded);
    pthread_mutex_unlock(&host_lock);
    free_unlinked(dead, rounded);
    return TPU_OK;
}

tpu_status tpu_host_retain(const void *ptr) {
    pthread_mutex_lock(&host_lock);
    ptrdiff_t i = host_find((uintptr_t)ptr);
    if (i >= 0)
        host_blocks[i].refs++;
    pthread_mutex_unlock(&host_lock);
    if (i < 0)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_host_retain: %p is not pinned host memory",
                             ptr);
    return TPU_OK;
}

void tpu_host_release(void *ptr) {
    pthread_mutex_lock(&host_lock);
    ptrdiff_t i = host_find((uintptr_t)ptr);
    size_t rounded = 0;
    void *dead = i >= 0 ? host_unref_locked((size_t)i, &rounded) : NULL;
    pthread_mutex_unlock(&host_lock);
    free_unlinked(dead, rounded);
}

bool tpu_host_is_pinned(const void *ptr) {
    pthread_mutex_lock(&host_lock);
    bool pinned = host_find((uintptr_t)ptr) >= 0;
    pthread_mutex_unlock(&host_lock);
    return pinned;
}

void tpu_host_get_stats(tpu_host_stats *out) {
    if (!out)
        return;
    pthread_mutex_lock(&host_lock);
    *out = host_stats;
    pthread_mutex_unlock(&host_lock);
}

void tpu_host_reset_accumulated_stats(void) {
    pthread_mutex_lock(&host_lock);
    tpu_host_stats *h = &host_stats;
    tpu_mem_stat *stats[] = {&h->allocations, &h->allocated_bytes, &h->active_requests,
                             &h->active_bytes};
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        stats[i]->allocated = stats[i]->freed = 0;
    h->num_host_alloc = h->num_host_free = 0;
    h->host_alloc_time.total_us = h->host_alloc_time.count = 0;
    h->host_free_time.total_us = h->host_free_time.count = 0;
    pthread_mutex_unlock(&host_lock);
}

void tpu_host_reset_peak_stats(void) {
    pthread_mutex_lock(&host_lock);
    tpu_host_stats *h = &host_stats;
    tpu_mem_stat *stats[] = {&h->allocations, &h->allocated_bytes, &h->active_requests,
                             &h->active_bytes};
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        stats[i]->peak = stats[i]->current;
    h->host_alloc_time.max_us = h->host_alloc_time.min_us = 0;
    h->host_free_time.max_us = h->host_free_time.min_us = 0;
    pthread_mutex_unlock(&host_lock);
}
