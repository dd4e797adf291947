/* Running a planned group: for each tile, every step's record cut down to
 * the tile (its operands' data and dims), in order. */
#include <stdlib.h>
#include <string.h>

#include "tpu/status.h"

#include "fuse.h"

/* Where tile t of a cluster lies: the index of each dim before tile_dim,
 * the first index of tile_dim, the tile's dims (tile_dim on), and its
 * elements as a range of the cluster's row-major order. */
typedef struct {
    int32_t ndim;
    int64_t sizes[TPU_MAX_DIMS];
    int64_t outer[TPU_MAX_DIMS]; /* index of each dim before tile_dim */
    int64_t start;               /* first index of tile_dim */
    int64_t first, numel;        /* flat index of its first element, and its elements */
} tile_pos;

static void locate(const tpu_fuse_cluster *p, int64_t t, tile_pos *tp) {
    int d = p->tile_dim;
    int64_t blocks = (p->sizes[d] + p->tile_block - 1) / p->tile_block;
    int64_t o = t / blocks; /* the row-major index over the dims before d */
    tp->start = (t % blocks) * p->tile_block;
    for (int k = d - 1; k >= 0; k--) {
        tp->outer[k] = o % p->sizes[k];
        o /= p->sizes[k];
    }
    tp->ndim = p->ndim - d;
    tp->sizes[0] = p->sizes[d] - tp->start < p->tile_block ? p->sizes[d] - tp->start : p->tile_block;
    int64_t inner = 1; /* elements of the dims after d */
    for (int k = d + 1; k < p->ndim; k++) {
        tp->sizes[k - d] = p->sizes[k];
        inner *= p->sizes[k];
    }
    tp->first = ((t / blocks) * p->sizes[d] + tp->start) * inner;
    tp->numel = tp->sizes[0] * inner;
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

/* A tensor cut to a tile of whole rows as a broadcast view (every dim of
 * the tile, stride 0 along the row) turned into one element per row: the
 * trailing dims that make up a row get size 1. Returns those dims as a
 * mask. */
static uint32_t one_per_row(tpu_tensor *t, int64_t row_length) {
    uint32_t mask = 0;
    int64_t row = 1;
    for (int d = t->ndim - 1; d >= 0 && row < row_length; d--) {
        row *= t->sizes[d];
        t->sizes[d] = 1;
        mask |= 1u << d;
    }
    return mask;
}

/* A step cut to a tile of whole rows: a reduction's out (cut as the
 * broadcast view) keeps one element per row and its reduced dims are the
 * row's; every operand of a row step keeps one element per row. */
static void cut_rows(tpu_op *op, const tpu_fuse_step *s) {
    if (!s->row_step) {
        op->p.reduce.mask = one_per_row(&op->out, s->row_length);
        return;
    }
    one_per_row(&op->out, s->row_length);
    for (int k = 0; k < op->n_in; k++)
        one_per_row(&op->in[k], s->row_length);
}

/* Whether the steps order[begin .. end) run as flat runs: each record has
 * one (spans[j - begin]), reading its inputs as its views lie (a flat view
 * or a scratch tile element by element, a one-value view as one value). */
static bool part_spans(const tpu_fuse_plan *p, int32_t begin, int32_t end, tpu_op_span *spans) {
    for (int32_t j = begin; j < end; j++) {
        const tpu_fuse_step *s = &p->steps[p->order[j]];
        tpu_op_span *sp = &spans[j - begin];
        if (!tpu_op_span_of(s->op, sp) || sp->n_in != s->n_operands - 1)
            return false;
        if (s->slot[0] < 0 && !p->views[s->view[0]].flat)
            return false;
        for (int k = 1; k < s->n_operands; k++) {
            const tpu_fuse_view *v = &p->views[s->view[k]];
            bool ok = sp->step[k - 1] == 1 ? s->slot[k] >= 0 || v->flat
                                           : s->slot[k] < 0 && v->one_value;
            if (!ok)
                return false;
        }
    }
    return true;
}

/* Runs tile t of a part as flat runs, the cluster's chunk of elements at a time. */
static void run_spans(const tpu_fuse_plan *p, const tpu_fuse_cluster *cl, int32_t begin,
                      int32_t end, const tpu_op_span *spans, int64_t t, char *scratch) {
    tile_pos tp;
    locate(cl, t, &tp);
    const int64_t first = tp.first, len = tp.numel;
    for (int64_t c0 = 0; c0 < len; c0 += cl->chunk) {
        const int64_t n = len - c0 < cl->chunk ? len - c0 : cl->chunk;
        const int64_t at = first + c0; /* the chunk's flat index */
        for (int32_t j = begin; j < end; j++) {
            const tpu_fuse_step *s = &p->steps[p->order[j]];
            const tpu_op_span *sp = &spans[j - begin];
            char *ptr[TPU_FUSE_MAX_OPERANDS];
            for (int k = 0; k < s->n_operands; k++) {
                const tpu_fuse_view *v = &p->views[s->view[k]];
                int64_t step = k == 0 ? 1 : sp->step[k - 1];
                ptr[k] = s->slot[k] >= 0 ? scratch + (size_t)s->slot[k] * TPU_FUSE_TILE_MAX * 8
                                         : v->data + at * step * v->elem_size;
            }
            sp->run(sp, ptr[0], (const char *const *)&ptr[1], n);
        }
    }
}

/* Parts of up to this many steps copy their records (or their flat runs)
 * once per part a call runs; larger ones copy each record once per tile
 * instead. */
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
    tpu_op one, *copies = NULL;
    tpu_op_span *spans = NULL;
    /* Room for the longest part in range that is copied at all. */
    int32_t longest = 0;
    for (int64_t part = w0 / cl->n_tiles; w0 < w1 && part <= (w1 - 1) / cl->n_tiles; part++) {
        const int32_t *start = &p->part_start[cl->first_part + part];
        if (start[1] - start[0] <= COPIES_MAX && start[1] - start[0] > longest)
            longest = start[1] - start[0];
    }
    if (longest > 0) {
        copies = malloc((size_t)longest * sizeof *copies);
        spans = malloc((size_t)longest * sizeof *spans);
    }
    for (int64_t w = w0; w < w1;) {
        const int32_t part = (int32_t)(w / cl->n_tiles);
        const int32_t begin = p->part_start[cl->first_part + part];
        const int32_t end = p->part_start[cl->first_part + part + 1];
        const bool small = copies && spans && end - begin <= COPIES_MAX;
        /* This part's tiles within [w0, w1). */
        const int64_t t0 = w - part * cl->n_tiles;
        const int64_t t_end = (part + 1) * cl->n_tiles < w1 ? cl->n_tiles : w1 - part * cl->n_tiles;
        w = part * cl->n_tiles + t_end;
        if (small && part_spans(p, begin, end, spans)) {
            for (int64_t t = t0; t < t_end; t++)
                run_spans(p, cl, begin, end, spans, t, scratch);
            continue;
        }
        if (small)
            for (int32_t j = begin; j < end; j++)
                memcpy(&copies[j - begin], p->steps[p->order[j]].op, sizeof one);
        for (int64_t t = t0; t < t_end; t++) {
            tile_pos tp;
            locate(cl, t, &tp);
            for (int32_t j = begin; j < end; j++) {
                int i = p->order[j];
                const tpu_fuse_step *s = &p->steps[i];
                tpu_op *op = small ? &copies[j - begin] : &one;
                if (!small)
                    memcpy(op, s->op, sizeof one);
                for (int k = 0; k < s->n_operands; k++)
                    cut(p, cl, &tp, s->view[k], s->slot[k], scratch,
                        k == 0 ? &op->out : &op->in[k - 1]);
                if (s->row_length > 0)
                    cut_rows(op, s);
                tpu_status st = tpu_op_run(op, 0, 1);
                if (st != TPU_OK && i < first_step) {
                    first = st;
                    first_step = i;
                    strncpy(msg, tpu_last_error_message(), sizeof msg - 1);
                }
            }
        }
    }
    free(copies);
    free(spans);
    if (first == TPU_OK)
        return TPU_OK;
    *failed = first_step;
    return tpu_set_error(first, "%s", msg);
}
