/* Pinned host memory: page-aligned allocations kept in a small sorted
 * table so that "is this address pinned?" (asked for every non_blocking
 * copy and by Tensor.is_pinned) is a binary search. */
#include "tpu/host_mem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define HOST_PAGE 4096

typedef struct {
    uintptr_t start;
    size_t nbytes;
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
    host_blocks[at] = (host_block){(uintptr_t)p, nbytes};
    host_count++;
    pthread_mutex_unlock(&host_lock);
    *out = p;
    return TPU_OK;
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
    for (size_t i = at - 1; i + 1 < host_count; i++)
        host_blocks[i] = host_blocks[i + 1];
    host_count--;
    pthread_mutex_unlock(&host_lock);
    free(ptr);
    return TPU_OK;
}

bool tpu_host_is_pinned(const void *ptr) {
    uintptr_t addr = (uintptr_t)ptr;
    pthread_mutex_lock(&host_lock);
    size_t at = host_upper_bound(addr);
    /* a zero-byte view at the end of a block still counts as inside it */
    bool pinned = at > 0 && addr - host_blocks[at - 1].start <= host_blocks[at - 1].nbytes;
    pthread_mutex_unlock(&host_lock);
    return pinned;
}
