/* The host target: the virtual TPU.
 *
 * Device memory is 64-byte aligned host memory; a segment of 2 MiB or
 * more is its own mapping, 2 MiB aligned and advised to use huge pages,
 * so that kernels walking large tensors (columns of a matrix, a
 * transpose) do not miss the TLB at every 4 KB. An op runs on the host's
 * cores through the intra-op thread pool, each share calling tpu_op_run.
 * The chip's properties are those of the modeled generation, with the
 * configured memory limit as its capacity. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
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

#define HUGE_PAGE ((size_t)2 << 20)

/* Linux's MADV_POPULATE_WRITE (5.14), which older C libraries' headers
 * lack: its value is the kernel's ABI. */
#ifdef MADV_POPULATE_WRITE
#define TPU_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define TPU_MADV_POPULATE_WRITE 23
#endif

/* nbytes (at least HUGE_PAGE) of a fresh mapping aligned to HUGE_PAGE,
 * advised to use huge pages (a hint the kernel may ignore); NULL if the
 * host has no memory. The unaligned head and tail are unmapped. */
static void *map_huge(size_t nbytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (nbytes + page - 1) / page * page; /* what the mapping keeps */
    size_t span = len + HUGE_PAGE;
    if (len < nbytes || span < len)
        return NULL;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    size_t head = (size_t)(p - raw), tail = span - head - len;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(p + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);
#endif
    /* Device memory is memory the moment it is reserved, as cudaMalloc's
     * is: the pages are made now, not on a kernel's first write. So a
     * kernel never pays for a page fault (in a VM the first touch of a
     * page can cost far more than the write), a block the planner never
     * writes costs nothing later, and a host that cannot back the segment
     * fails here with an error. Only a segment that fits in the host's
     * free memory is made now: making more would wake the host's OOM
     * killer rather than fail. Kernels before 5.14 lack the advice
     * (EINVAL); pages of those, and of larger segments, come on first
     * touch. */
    const long free_pages = sysconf(_SC_AVPHYS_PAGES);
    if (free_pages > 0 && len / page < (size_t)free_pages &&
        madvise(p, len, TPU_MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
        munmap(p, len);
        return NULL;
    }
    return p;
}

static tpu_status host_mem_alloc(int chip, size_t nbytes, void **out) {
    /* 64 bytes: a cache line, and enough for any vector load. nbytes is a
     * multiple of 512, as aligned_alloc requires a multiple of the
     * alignment. */
    void *p = nbytes >= HUGE_PAGE ? map_huge(nbytes) : aligned_alloc(64, nbytes);
    if (!p)
        return tpu_set_error(TPU_ERR_OUT_OF_MEMORY,
                             "tpu:%d: the host could not provide %zu bytes of device memory", chip,
                             nbytes);
    *out = p;
    return TPU_OK;
}

static void host_mem_free(int chip, void *ptr, size_t nbytes) {
    (void)chip;
    if (nbytes >= HUGE_PAGE)
        munmap(ptr, nbytes);
    else
        free(ptr);
}

/* One phase of an op, as the pool's function type wants it, with the
 * counter its shares claim units of work from (tpu_op_run_phase_claimed). */
typedef struct {
    const tpu_op *op;
    int phase;
    int64_t claims;
} phase_ctx;

static tpu_status run_share(void *ctx, int ith, int nth) {
    phase_ctx *p = ctx;
    return tpu_op_run_phase_claimed(p->op, p->phase, ith, nth, &p->claims);
}

/* Runs the op's phases one after another; the pool's return is the
 * barrier between them. */
static tpu_status host_execute(int chip, const tpu_op *op) {
    (void)chip; /* all virtual chips share the host's cores */
    int nth = tpu_op_max_threads(op), phases = tpu_op_phases(op);
    for (int phase = 0; phase < phases; phase++) {
        phase_ctx ctx = {op, phase, 0};
        /* Small op: not worth waking the pool. */
        tpu_status st = nth <= 1 ? tpu_op_run_phase(op, phase, 0, 1) : tpu_pool_run(run_share, &ctx, nth);
        if (st != TPU_OK)
            return st;
    }
    return TPU_OK;
}

/* One cluster of a fusion group, as the pool's function type wants it:
 * the shares take chunks of the cluster's work items (part by part, tile
 * by tile) from a shared counter until none is left, each keeping its own
 * first failure. Taking chunks rather than a fixed range each keeps both
 * cores busy to the end when one runs slower (a VM's neighbour, a page
 * fault, the stream's host thread). */
typedef struct {
    const tpu_fuse_plan *plan;
    int cluster;
    int64_t chunk;        /* work items a share takes at a time */
    _Atomic int64_t next; /* the first item no share has taken */
    void *const *scratch;
    int failed[TPU_THREADS_MAX];
    tpu_status status[TPU_THREADS_MAX];
    char msg[4][TPU_MSG_MAX]; /* messages of the first shares; a later one reads generic */
} group_ctx;

static tpu_status run_group_share(void *ctx, int ith, int nth) {
    group_ctx *g = ctx;
    (void)nth;
    const int64_t n = g->plan->clusters[g->cluster].n_work;
    int failed = g->plan->n_steps;
    tpu_status st = TPU_OK;
    for (;;) {
        int64_t w0 = atomic_fetch_add_explicit(&g->next, g->chunk, memory_order_relaxed);
        if (w0 >= n)
            break;
        int f = g->plan->n_steps;
        tpu_status s = tpu_fuse_run_tiles(g->plan, g->cluster, g->scratch[ith], w0,
                                          w0 + g->chunk < n ? w0 + g->chunk : n, &f);
        if (s != TPU_OK && f < failed) {
            failed = f;
            st = s;
            if (ith < 4)
                snprintf(g->msg[ith], TPU_MSG_MAX, "%s", tpu_last_error_message());
        }
    }
    g->failed[ith] = failed;
    g->status[ith] = st;
    return TPU_OK; /* the caller picks the lowest failing step, not the lowest share */
}

_Static_assert(TPU_FUSE_MAX_SHARES >= TPU_THREADS_MAX, "a matmul group's shares");

static tpu_status run_mm_share(void *ctx, int ith, int nth) {
    return tpu_fuse_mm_share(ctx, ith, nth);
}

/* A matmul group runs on as many shares as its product would. */
static tpu_status execute_matmul_group(const tpu_fuse_plan *plan, void *const *scratch,
                                       int n_scratch, int *failed) {
    static _Thread_local tpu_fuse_mm_run r; /* 20 KiB: per stream worker, not on its stack */
    tpu_fuse_mm_begin(&r, plan, scratch);
    int nth = tpu_op_max_threads(plan->steps[0].op);
    if (nth > n_scratch)
        nth = n_scratch;
    if (nth <= 1) {
        nth = 1;
        tpu_fuse_mm_share(&r, 0, 1);
    } else {
        tpu_pool_run(run_mm_share, &r, nth);
    }
    return tpu_fuse_mm_end(&r, nth, failed);
}

/* Clusters run one after another; a cluster's work items are
 * independent, so shares split them. A cluster worth less than about 64K
 * element-steps runs on one thread. The error kept is the lowest failing step's, which
 * is the first in stream order. */
static tpu_status host_execute_group(int chip, const tpu_fuse_plan *plan, void *const *scratch,
                                     int n_scratch, int *failed) {
    (void)chip;
    if (plan->matmul)
        return execute_matmul_group(plan, scratch, n_scratch, failed);
    static _Thread_local group_ctx g; /* 40 KiB: per stream worker, not on its stack */
    g.plan = plan;
    g.scratch = scratch;
    int best_step = plan->n_steps;
    tpu_status best = TPU_OK;
    char msg[TPU_MSG_MAX];
    for (int c = 0; c < plan->n_clusters; c++) {
        const tpu_fuse_cluster *cl = &plan->clusters[c];
        g.cluster = c;
        int64_t work = cl->numel * cl->n_steps;
        int nth = work < 65536 ? 1 : n_scratch;
        if (nth > cl->n_work)
            nth = (int)cl->n_work;
        if (nth < 1)
            nth = 1;
        for (int i = 0; i < nth; i++)
            g.status[i] = TPU_OK;
        /* About 8 chunks a share: small enough to even out, large enough
         * that a chunk's tiles stream through memory in order. */
        g.chunk = (cl->n_work + 8 * nth - 1) / (8 * nth);
        atomic_store_explicit(&g.next, 0, memory_order_relaxed);
        if (nth == 1)
            run_group_share(&g, 0, 1);
        else
            tpu_pool_run(run_group_share, &g, nth);
        for (int i = 0; i < nth; i++)
            if (g.status[i] != TPU_OK && g.failed[i] < best_step) {
                best_step = g.failed[i];
                best = g.status[i];
                snprintf(msg, sizeof msg, "%s", i < 4 ? g.msg[i] : tpu_status_str(best));
            }
    }
    if (best == TPU_OK)
        return TPU_OK;
    *failed = best_step;
    return tpu_set_error(best, "%s", msg);
}

static const tpu_target k_host_target = {
    .name = "host",
    .open = host_open,
    .chip_props = host_chip_props,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .execute = host_execute,
    .execute_group = host_execute_group,
};

const tpu_target *tpu_target_get(void) {
    return &k_host_target;
}
