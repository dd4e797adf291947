/* Status names and the per-thread last error message. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime_internal.h"
#include "tpu/status.h"

static const char *const k_status_names[] = {
    [TPU_OK] = "TPU_OK",
    [TPU_ERR_INVALID_ARG] = "TPU_ERR_INVALID_ARG",
    [TPU_ERR_INVALID_DEVICE] = "TPU_ERR_INVALID_DEVICE",
    [TPU_ERR_WRONG_DEVICE] = "TPU_ERR_WRONG_DEVICE",
    [TPU_ERR_OUT_OF_MEMORY] = "TPU_ERR_OUT_OF_MEMORY",
    [TPU_ERR_HOST_MEMORY] = "TPU_ERR_HOST_MEMORY",
    [TPU_ERR_UNSUPPORTED_DTYPE] = "TPU_ERR_UNSUPPORTED_DTYPE",
    [TPU_ERR_SHAPE] = "TPU_ERR_SHAPE",
    [TPU_ERR_DIV_BY_ZERO] = "TPU_ERR_DIV_BY_ZERO",
    [TPU_ERR_FORKED] = "TPU_ERR_FORKED",
    [TPU_ERR_OUT_OF_BOUNDS] = "TPU_ERR_OUT_OF_BOUNDS",
    [TPU_ERR_INDEX] = "TPU_ERR_INDEX",
    [TPU_ERR_INTERNAL] = "TPU_ERR_INTERNAL",
    [TPU_ERR_EXTERNAL] = "TPU_ERR_EXTERNAL",
};
_Static_assert(sizeof k_status_names / sizeof k_status_names[0] == TPU_STATUS_COUNT,
               "every tpu_status needs a name");

/* One message per thread, so that concurrent failures do not mix. */
static _Thread_local char t_message[TPU_MSG_MAX];

const char *tpu_status_str(tpu_status status) {
    /* Compare as unsigned so that negative values are rejected too. */
    if ((unsigned)status >= (unsigned)TPU_STATUS_COUNT)
        return "TPU_STATUS_UNKNOWN";
    assert(k_status_names[status] != NULL);
    return k_status_names[status];
}

const char *tpu_last_error_message(void) {
    return t_message;
}

void tpu_clear_error(void) {
    t_message[0] = '\0';
}

tpu_status tpu_set_error(tpu_status status, const char *fmt, ...) {
    /* Format into a scratch buffer first: the arguments may point into
     * t_message itself (e.g. wrapping the previous message), and
     * vsnprintf must not read and write the same bytes. */
    char scratch[TPU_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(scratch, sizeof scratch, fmt, ap);
    va_end(ap);
    if (n < 0)
        scratch[0] = '\0';
    memcpy(t_message, scratch, strlen(scratch) + 1);
    return status;
}
