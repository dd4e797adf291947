/* A target: the narrow interface between the runtime and the hardware.
 *
 * The runtime (allocator, streams, events, modes) is written against this
 * table of functions only. Today there is one target, the host target
 * (target_host.c): the virtual TPU, whose memory is host memory and whose
 * kernels run on the host's cores. A real accelerator (e.g. through the
 * PJRT C API) would implement the same functions.
 *
 * Contract shared by every function: `chip` is a valid chip index of this
 * process; the runtime serialises nothing on the target's behalf except
 * what is stated below. */
#ifndef TPU_TARGET_H
#define TPU_TARGET_H

#include <stddef.h>

#include "../fuse/fuse.h"
#include "runtime_internal.h"
#include "tpu/op.h"
#include "tpu/runtime.h"

typedef struct {
    const char *name; /* "host" */

    /* Opens the target for this configuration and returns the number of
     * chips it drives in *chip_count (1 .. TPU_CHIPS_MAX). Called once, at
     * init. */
    tpu_status (*open)(const tpu_config *cfg, int *chip_count);

    /* Fills *out for chip `chip` (all fields). Called once per chip, at
     * init. */
    tpu_status (*chip_props)(const tpu_config *cfg, int chip, tpu_chip_props *out);

    /* Raw device memory: allocates nbytes (a multiple of 512, > 0) on
     * `chip`, aligned to at least 64 bytes. TPU_ERR_OUT_OF_MEMORY when the
     * device has none left. Thread-safe. No caching: that is the
     * allocator's job. */
    tpu_status (*mem_alloc)(int chip, size_t nbytes, void **out);

    /* Releases memory from mem_alloc. The runtime guarantees that no
     * queued or running op still uses it. */
    void (*mem_free)(int chip, void *ptr, size_t nbytes);

    /* Executes one op record that passed tpu_op_check, to completion, on
     * the calling thread's behalf. Returns the kernel's status; on error
     * the calling thread's message (tpu_last_error_message) explains it.
     * Called by one thread per stream at a time; different streams call
     * it concurrently. TPU_OP_COPY_H2D / _D2H have one operand in host
     * memory; the host target reads it directly, a real target moves those
     * bytes with its DMA engine. */
    tpu_status (*execute)(int chip, const tpu_op *op);

    /* Executes a planned fusion group (fuse.h) to completion: every step
     * over every tile, each tile's steps in order. scratch[i] is the
     * scratch of share i (n_scratch of them, TPU_FUSE_SCRATCH_BYTES each,
     * owned by the calling stream). On a kernel error *failed is the
     * lowest failing step and the thread's message explains it. Called as
     * execute is. A real target would compile the group into one kernel. */
    tpu_status (*execute_group)(int chip, const tpu_fuse_plan *plan, void *const *scratch,
                                int n_scratch, int *failed);
} tpu_target;

/* The target this process runs on. */
const tpu_target *tpu_target_get(void);

#endif
