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

#include "tpu/export.h"
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

#ifdef __cplusplus
}
#endif

#endif
