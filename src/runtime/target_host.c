/* The host target: the virtual TPU.
 *
 * Device memory is 64-byte aligned host memory; an op runs on the host's
 * cores through the intra-op thread pool, each share calling tpu_op_run.
 * The chip's properties are those of the modeled generation, with the
 * configured memory limit as its capacity. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "target.h"
#include "tpu/op.h"

static tpu_status host_open(const tpu_config *cfg, int *chip_count) {
    /* Virtual chips cost nothing until used: make as many as asked. */
    *chip_count = cfg->chips;
    return TPU_OK;
}

static tpu_status host_chip_props(const tpu_config *cfg, int chip, tpu_chip_props *out) {
    (void)chip; /* every virtual chip of a process is the same model */
    const tpu_generation_model *m = tpu_generation_model_of(cfg->generation);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "TPU %s (virtual)", m->short_name);
    out->generation = cfg->generation;
    out->hbm_bytes = m->hbm_bytes;
    out->total_memory = cfg->memory_limit ? cfg->memory_limit : m->hbm_bytes;
    out->hbm_bandwidth = m->hbm_bandwidth;
    out->peak_bf16_flops = m->peak_bf16_flops;
    out->mxu_size = m->mxu_size;
    out->chip_count = cfg->chips;
    return TPU_OK;
}

static tpu_status host_mem_alloc(int chip, size_t nbytes, void **out) {
    /* 64 bytes: a cache line, and enough for any vector load. nbytes is a
     * multiple of 512, as aligned_alloc requires a multiple of the
     * alignment. */
    void *p = aligned_alloc(64, nbytes);
    if (!p)
        return tpu_set_error(TPU_ERR_OUT_OF_MEMORY,
                             "tpu:%d: the host could not provide %zu bytes of device memory", chip,
                             nbytes);
    *out = p;
    return TPU_OK;
}

static void host_mem_free(int chip, void *ptr, size_t nbytes) {
    (void)chip;
    (void)nbytes;
    free(ptr);
}

/* One phase of an op, as the pool's function type wants it. */
typedef struct {
    const tpu_op *op;
    int phase;
} phase_ctx;

static tpu_status run_share(void *ctx, int ith, int nth) {
    const phase_ctx *p = ctx;
    return tpu_op_run_phase(p->op, p->phase, ith, nth);
}

/* Runs the op's phases one after another; the pool's return is the
 * barrier between them. */
static tpu_status host_execute(int chip, const tpu_op *op) {
    (void)chip; /* all virtual chips share the host's cores */
    int nth = tpu_op_max_threads(op), phases = tpu_op_phases(op);
    for (int phase = 0; phase < phases; phase++) {
        phase_ctx ctx = {op, phase};
        /* Small op: not worth waking the pool. */
        tpu_status st = nth <= 1 ? tpu_op_run_phase(op, phase, 0, 1) : tpu_pool_run(run_share, &ctx, nth);
        if (st != TPU_OK)
            return st;
    }
    return TPU_OK;
}

static const tpu_target k_host_target = {
    .name = "host",
    .open = host_open,
    .chip_props = host_chip_props,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .execute = host_execute,
};

const tpu_target *tpu_target_get(void) {
    return &k_host_target;
}
