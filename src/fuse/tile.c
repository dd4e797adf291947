/* Running a planned group: for each tile, every step's record cut down to
 * the tile (its operands' data and dims), in order. */
#include <stdbool.h>
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

/* Prefetching the next tile. While a tile's steps compute on data the
 * first steps brought into cache, memory would sit idle; so each step
 * first asks for its share of the next tile's lines, of every view the
 * part keeps in memory (contiguous on the tile: others are left to the
 * hardware). The next tile's loads then overlap this tile's arithmetic. */
#define PREFETCH_VIEWS 16
typedef struct {
    int n;
    const char *lo[PREFETCH_VIEWS];
    int64_t bytes[PREFETCH_VIEWS];
} prefetch_set;

static void plan_prefetch(const tpu_fuse_plan *p, const tpu_fuse_cluster *cl, int32_t begin,
                          int32_t end, int64_t t, prefetch_set *ps) {
    ps->n = 0;
    tile_pos tp;
    locate(cl, t, &tp);
    int32_t seen[PREFETCH_VIEWS];
    for (int32_t j = begin; j < end && ps->n < PREFETCH_VIEWS; j++) {
        const tpu_fuse_step *s = &p->steps[p->order[j]];
        for (int k = 0; k < s->n_operands && ps->n < PREFETCH_VIEWS; k++) {
            int v = s->view[k];
            bool dup = s->slot[k] >= 0;
            for (int m = 0; m < ps->n && !dup; m++)
                dup = seen[m] == v;
            if (dup)
                continue;
            tpu_tensor tt;
            cut(p, cl, &tp, v, -1, NULL, &tt);
            int64_t expect = 1, n = 1;
            bool dense = true;
            for (int d = tt.ndim - 1; d >= 0; d--) {
                dense = dense && (tt.sizes[d] == 1 || tt.strides[d] == expect);
                expect *= tt.sizes[d];
                n *= tt.sizes[d];
            }
            if (!dense)
                continue;
            seen[ps->n] = v;
            ps->lo[ps->n] = tt.data;
            ps->bytes[ps->n] = n * p->views[v].elem_size;
            ps->n++;
        }
    }
}

/* Slice j of `slices` of every range of the set. */
static void prefetch_slice(const prefetch_set *ps, int j, int slices) {
    for (int m = 0; m < ps->n; m++) {
        int64_t lo = ps->bytes[m] * j / slices, hi = ps->bytes[m] * (j + 1) / slices;
        for (int64_t b = lo & ~(int64_t)63; b < hi; b += 64)
            __builtin_prefetch(ps->lo[m] + b, 1, 2);
    }
}

/* Parts of up to this many steps copy their records once per part a
 * call runs; larger ones copy each record once per tile instead. */
#define COPIES_MAX 256

tpu_status tpu_fuse_run_tiles(const tpu_fuse_plan *p, int c, void *scratch, int64_t w0,
                              int64_t w1, int *failed) {
    const tpu_fuse_cluster *cl = &p->clusters[c];
    tpu_status first = TPU_OK;
    int first_step = p->n_steps;
    char msg[512] = ""; /* the first failing step's message: later ones overwrite the thread's */
    /* The steps' records, cut to the tile. cut() rewrites every field a
     * tile changes, so each record is copied once per part here rather
     * than once per tile (a record is 2.4 KB: per tile, the copies cost
     * as much as the small tiles' arithmetic). */
    tpu_op one, *copies = malloc(COPIES_MAX * sizeof *copies);
    for (int64_t w = w0; w < w1;) {
        const int32_t part = (int32_t)(w / cl->n_tiles);
        const int32_t begin = p->part_start[cl->first_part + part];
        const int32_t end = part + 1 < cl->n_parts ? p->part_start[cl->first_part + part + 1]
                                                   : cl->first + cl->n_steps;
        const bool copied = copies && end - begin <= COPIES_MAX;
        if (copied)
            for (int32_t j = begin; j < end; j++)
                memcpy(&copies[j - begin], p->steps[p->order[j]].op, sizeof one);
        /* This part's tiles within [w0, w1). */
        const int64_t t_end = (part + 1) * cl->n_tiles < w1 ? cl->n_tiles : w1 - part * cl->n_tiles;
        for (int64_t t = w - part * cl->n_tiles; t < t_end; t++) {
            tile_pos tp;
            locate(cl, t, &tp);
            prefetch_set next = {0};
            if (t + 1 < t_end)
                plan_prefetch(p, cl, begin, end, t + 1, &next);
            for (int32_t j = begin; j < end; j++) {
                if (next.n)
                    prefetch_slice(&next, j - begin, end - begin);
                int i = p->order[j];
                const tpu_fuse_step *s = &p->steps[i];
                tpu_op *op = copied ? &copies[j - begin] : &one;
                if (!copied)
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
        w = part * cl->n_tiles + t_end;
    }
    free(copies);
    if (first == TPU_OK)
        return TPU_OK;
    *failed = first_step;
    return tpu_set_error(first, "%s", msg);
}
