/* Running a planned group: for each tile, every step's record cut down to
 * the tile (its operands' data and dims), in order. */
#include <stdlib.h>
#include <string.h>

#include "tpu/status.h"

#include "fuse.h"

/* Where tile t of a cluster lies: the index of each dim before tile_dim,
 * the first index of tile_dim, and the tile's dims (tile_dim on). */
typedef struct {
    int32_t ndim;
    int64_t sizes[TPU_MAX_DIMS];
    int64_t outer[TPU_MAX_DIMS]; /* index of each dim before tile_dim */
    int64_t start;               /* first index of tile_dim */
} tile_pos;

static void locate(const tpu_fuse_cluster *p, int64_t t, tile_pos *tp) {
    int d = p->tile_dim;
    int64_t blocks = (p->sizes[d] + p->tile_block - 1) / p->tile_block;
    int64_t o = t / blocks;
    tp->start = (t % blocks) * p->tile_block;
    for (int k = d - 1; k >= 0; k--) {
        tp->outer[k] = o % p->sizes[k];
        o /= p->sizes[k];
    }
    tp->ndim = p->ndim - d;
    tp->sizes[0] = p->sizes[d] - tp->start < p->tile_block ? p->sizes[d] - tp->start : p->tile_block;
    for (int k = d + 1; k < p->ndim; k++)
        tp->sizes[k - d] = p->sizes[k];
}

/* Points t at the tile of view v: in memory, or in scratch slot `slot`. */
static void cut(const tpu_fuse_plan *p, const tpu_fuse_cluster *cl, const tile_pos *tp, int v,
                int slot, char *scratch, tpu_tensor *t) {
    const tpu_fuse_view *view = &p->views[v];
    int d = cl->tile_dim;
    t->ndim = tp->ndim;
    memcpy(t->sizes, tp->sizes, (size_t)tp->ndim * sizeof t->sizes[0]);
    if (slot >= 0) {
        t->data = scratch + (size_t)slot * TPU_FUSE_TILE_MAX * 8;
        int64_t stride = 1;
        for (int k = tp->ndim - 1; k >= 0; k--) {
            t->strides[k] = stride;
            stride *= tp->sizes[k];
        }
        return;
    }
    int64_t off = tp->start * view->gstrides[d];
    for (int k = 0; k < d; k++)
        off += tp->outer[k] * view->gstrides[k];
    t->data = view->data + off * view->elem_size;
    memcpy(t->strides, &view->gstrides[d], (size_t)tp->ndim * sizeof t->strides[0]);
}

/* Clusters of up to this many steps copy their records once per call;
 * larger ones copy each record once per tile instead. */
#define COPIES_MAX 256

tpu_status tpu_fuse_run_tiles(const tpu_fuse_plan *p, int c, void *scratch, int64_t t0,
                              int64_t t1, int *failed) {
    const tpu_fuse_cluster *cl = &p->clusters[c];
    tpu_status first = TPU_OK;
    int first_step = p->n_steps;
    char msg[512] = ""; /* the first failing step's message: later ones overwrite the thread's */
    /* The steps' records, cut to the tile. cut() rewrites every field a
     * tile changes, so each record is copied once here rather than once
     * per tile (a record is 2.4 KB: per tile, the copies cost as much as
     * the small tiles' arithmetic). */
    tpu_op one, *copies = NULL;
    if (cl->n_steps <= COPIES_MAX && (copies = malloc((size_t)cl->n_steps * sizeof *copies)))
        for (int j = 0; j < cl->n_steps; j++)
            memcpy(&copies[j], p->steps[p->order[cl->first + j]].op, sizeof one);
    for (int64_t t = t0; t < t1; t++) {
        tile_pos tp;
        locate(cl, t, &tp);
        for (int j = cl->first; j < cl->first + cl->n_steps; j++) {
            int i = p->order[j];
            const tpu_fuse_step *s = &p->steps[i];
            tpu_op *op = copies ? &copies[j - cl->first] : &one;
            if (!copies)
                memcpy(op, s->op, sizeof one);
            for (int k = 0; k < s->n_operands; k++)
                cut(p, cl, &tp, s->view[k], s->slot[k], scratch,
                    k == 0 ? &op->out : &op->in[k - 1]);
            tpu_status st = tpu_op_run(op, 0, 1);
            if (st != TPU_OK && i < first_step) {
                first = st;
                first_step = i;
                strncpy(msg, tpu_last_error_message(), sizeof msg - 1);
            }
        }
    }
    free(copies);
    if (first == TPU_OK)
        return TPU_OK;
    *failed = first_step;
    return tpu_set_error(first, "%s", msg);
}
