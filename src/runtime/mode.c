/* The process-wide execution mode. */
#include <stdatomic.h>

#include "runtime_internal.h"

/* Relaxed is enough: the mode is a lone value that orders nothing else. A
 * submitter reads it once per op and acts on what it read. */
static atomic_int g_mode = TPU_MODE_STRICT;

static const char *const k_mode_names[] = {
    [TPU_MODE_STRICT] = "strict",
    [TPU_MODE_DEBUG] = "debug",
    [TPU_MODE_FUSED] = "fused",
};
_Static_assert(sizeof k_mode_names / sizeof k_mode_names[0] == TPU_MODE_COUNT,
               "every tpu_mode needs a name");

void tpu_mode_setup(tpu_mode mode) {
    atomic_store_explicit(&g_mode, (int)mode, memory_order_relaxed);
}

tpu_status tpu_mode_set(tpu_mode mode) {
    /* Initialise first, so that the environment's initial mode cannot
     * overwrite this choice later. */
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if ((unsigned)mode >= (unsigned)TPU_MODE_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_mode_set: %d is not a mode (0 strict, 1 debug, 2 fused)",
                             (int)mode);
    atomic_store_explicit(&g_mode, (int)mode, memory_order_relaxed);
    return TPU_OK;
}

tpu_mode tpu_mode_get(void) {
    /* Initialise so that the environment's mode is seen; on failure the
     * default (strict) is what there is. */
    (void)tpu_rt_enter();
    return (tpu_mode)atomic_load_explicit(&g_mode, memory_order_relaxed);
}

const char *tpu_mode_name(tpu_mode mode) {
    if ((unsigned)mode >= (unsigned)TPU_MODE_COUNT)
        return "invalid";
    return k_mode_names[mode];
}
