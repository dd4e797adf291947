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

/* Frees a pointer from tpu_host_alloc. NULL is a no-op; any other pointer
 * is TPU_ERR_INVALID_ARG. */
TPU_API tpu_status tpu_host_free(void *ptr);

/* True if `ptr` points anywhere inside a live pinned allocation. */
TPU_API bool tpu_host_is_pinned(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif
