/* Status codes of the torch-tpu C library.
 *
 * Every public function that a caller can misuse returns a tpu_status. A
 * failing call also leaves a human-readable message for the calling thread
 * (tpu_last_error_message), naming the function and the offending values,
 * so that the C++ glue can raise a precise Python exception. Nothing in
 * this library calls abort() on input a caller can build. */
#ifndef TPU_STATUS_H
#define TPU_STATUS_H

#include "tpu/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TPU_OK = 0,
    TPU_ERR_INVALID_ARG,      /* an argument is malformed (null, negative, inconsistent) */
    TPU_ERR_INVALID_DEVICE,   /* a chip index is out of range */
    TPU_ERR_WRONG_DEVICE,     /* operands, streams or events belong to different chips */
    TPU_ERR_OUT_OF_MEMORY,    /* a chip's memory capacity would be exceeded */
    TPU_ERR_HOST_MEMORY,      /* the host could not allocate (queue node, thread, ...) */
    TPU_ERR_UNSUPPORTED_DTYPE,/* the op has no kernel for this dtype */
    TPU_ERR_SHAPE,            /* sizes or ranks of operands do not agree */
    TPU_ERR_DIV_BY_ZERO,      /* integer division by zero inside a kernel */
    TPU_ERR_FORKED,           /* the runtime was used before fork(); the child cannot use it */
    TPU_ERR_OUT_OF_BOUNDS,    /* a view reaches outside its storage, or past live device memory */
    TPU_ERR_INDEX,            /* an index value inside a tensor is out of range (kernel-side) */
    TPU_ERR_INTERNAL,         /* a broken invariant of this library: a bug */
    TPU_ERR_EXTERNAL,         /* work outside the runtime that a stream waited for failed or did not finish in time */
    TPU_STATUS_COUNT
} tpu_status;

/* Returns a static, never-null name for a status ("TPU_OK", ...).
 * Values outside the enum give "TPU_STATUS_UNKNOWN". */
TPU_API const char *tpu_status_str(tpu_status status);

/* Returns the message left by the last failing call on this thread, or ""
 * if none failed since the last tpu_clear_error. The pointer stays valid
 * until the next failing call on this thread. */
TPU_API const char *tpu_last_error_message(void);

/* Forgets this thread's last error message. */
TPU_API void tpu_clear_error(void);

/* Sets this thread's last error message (printf format) and returns
 * `status`, so that a failing path reads `return tpu_set_error(...)`.
 * Messages longer than 1023 bytes are truncated. */
TPU_API tpu_status tpu_set_error(tpu_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
