/* Pinned (page-locked) host memory.
 *
 * Copies between the device and pinned host buffers may run asynchronously
 * (non_blocking=True), because the runtime knows the buffer stays put. On
 * the virtual TPU pinned memory is page-aligned host memory that the
 * runtime tracks; a real target would register it with its driver. */
#ifndef TPU_HOST_MEM_H
#define TPU_HOST_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/export.h"
#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates `nbytes` of pinned host memory. nbytes == 0 gives *out = NULL
 * and TPU_OK. TPU_ERR_HOST_MEMORY if the host is out of memory. */
TPU_API tpu_status tpu_host_alloc(size_t nbytes, void **out);

/* Drops the owner's reference to a pointer from tpu_host_alloc: the memory
 * is freed now, or once the copies that retained it have run. NULL is a
 * no-op; any other pointer is TPU_ERR_INVALID_ARG. */
TPU_API tpu_status tpu_host_free(void *ptr);

/* Takes a reference to the pinned block containing `ptr` (any address in
 * it), so that it outlives its owner until tpu_host_release. For an
 * asynchronous copy: retain, queue the copy, then queue tpu_host_release
 * as a host function on the same stream. TPU_ERR_INVALID_ARG if `ptr` is
 * not in pinned memory. */
TPU_API tpu_status tpu_host_retain(const void *ptr);

/* Drops a reference taken by tpu_host_retain (the signature of a stream
 * host function). Touches nothing but the runtime's own table: safe on a
 * stream's worker. Unknown pointers are ignored. */
TPU_API void tpu_host_release(void *ptr);

/* True if `ptr` points anywhere inside a live pinned allocation. */
TPU_API bool tpu_host_is_pinned(const void *ptr);

/* Time spent in calls, as PyTorch's DurationStat: total and count since
 * the last accumulated reset, largest and smallest since the last peak
 * reset (0 before any call). Microseconds. */
typedef struct {
    int64_t total_us, max_us, min_us, count;
} tpu_duration_stat;

/* Statistics of the pinned allocator, under the names of CUDA's host
 * allocator. Blocks are not cached: a block is allocated from the host for
 * each request and returned once its owner and every queued copy are done
 * with it, so "allocations" (blocks held) and "active_requests" (blocks in
 * use) are the same blocks, and the byte counts are of page-rounded sizes. */
typedef struct {
    tpu_mem_stat allocations, allocated_bytes;
    tpu_mem_stat active_requests, active_bytes;
    uint64_t num_host_alloc, num_host_free; /* host allocations and frees */
    tpu_duration_stat host_alloc_time, host_free_time;
} tpu_host_stats;

/* Copies the statistics to *out (NULL: no-op). */
TPU_API void tpu_host_get_stats(tpu_host_stats *out);

/* Zeroes the allocated/freed totals, the call counts and the durations'
 * totals and counts; current values and peaks stay. */
TPU_API void tpu_host_reset_accumulated_stats(void);

/* Sets every peak to its current value and the durations' max and min
 * to 0. */
TPU_API void tpu_host_reset_peak_stats(void);

#ifdef __cplusplus
}
#endif

#endif
