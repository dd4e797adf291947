/* Pinned host memory: page-aligned allocations kept in a small sorted
 * table so that "is this address pinned?" (asked for every non_blocking
 * copy and by Tensor.is_pinned) is a binary search.
 *
 * Each block is reference-counted: its owner (the PyTorch storage) holds
 * one reference, and every queued asynchronous copy that reads or writes
 * it holds another, dropped by the stream's worker when the copy has run.
 * The block is freed when the last reference goes. The worker thus never
 * touches a PyTorch or Python object, and needs no lock of the caller's
 * (no GIL) to let a copy's buffer go. */
#include "tpu/host_mem.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define HOST_PAGE 4096

typedef struct {
    uintptr_t start;
    size_t nbytes;
    int64_t refs; /* the owner's, plus one per queued copy */
} host_block;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_block *host_blocks; /* sorted by start */
static size_t host_count, host_capacity;

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
    size_t rounded = (nbytes + HOST_PAGE - 1) / HOST_PAGE * HOST_PAGE;
    void *p = aligned_alloc(HOST_PAGE, rounded);
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

/* Drops one reference of block i; the last one frees it. Caller holds
 * host_lock; returns the memory to free after unlocking, or NULL. */
static void *host_unref_locked(size_t i) {
    if (--host_blocks[i].refs > 0)
        return NULL;
    void *p = (void *)host_blocks[i].start;
    for (; i + 1 < host_count; i++)
        host_blocks[i] = host_blocks[i + 1];
    host_count--;
    return p;
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
    void *dead = host_unref_locked(at - 1);
    pthread_mutex_unlock(&host_lock);
    free(dead);
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
    void *dead = i >= 0 ? host_unref_locked((size_t)i) : NULL;
    pthread_mutex_unlock(&host_lock);
    free(dead);
}

bool tpu_host_is_pinned(const void *ptr) {
    pthread_mutex_lock(&host_lock);
    bool pinned = host_find((uintptr_t)ptr) >= 0;
    pthread_mutex_unlock(&host_lock);
    return pinned;
}
