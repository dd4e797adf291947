/* Running a matmul group: the product, with its epilogue steps run on
 * each block of out as the product finishes it (see fuse.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/status.h"

#include "fuse.h"

static void run_block(const tpu_op_block_hook *h, int ith, int64_t i0, int64_t mb, int64_t j0,
                      int64_t nb);

void tpu_fuse_mm_begin(tpu_fuse_mm_run *r, const tpu_fuse_plan *p, void *const *scratch) {
    r->plan = p;
    r->scratch = scratch;
    r->hook = (tpu_op_block_hook){run_block, r};
    r->claims = 0;
    r->rows_flat = true;
    r->spans = true;
    for (int i = 1; i < p->n_steps; i++) {
        const tpu_fuse_step *s = &p->steps[i];
        for (int k = 0; k < s->n_operands; k++) {
            const tpu_fuse_view *v = &p->views[s->view[k]];
            bool flat = v->col_stride == 1 && v->row_stride == p->mm_cols;
            bool one = v->col_stride == 0 && v->row_stride == 0;
            r->rows_flat &= s->slot[k] >= 0 || flat || one;
        }
        /* A flat run reads each input as its view lies on a piece: element
         * by element (a scratch tile, or unit column stride) or one value
         * (every stride 0). */
        tpu_op_span *sp = &r->span[i];
        if (!r->spans || !tpu_op_span_of(s->op, sp) || sp->n_in != s->n_operands - 1) {
            r->spans = false;
            continue;
        }
        for (int k = 1; k < s->n_operands; k++) {
            const tpu_fuse_view *v = &p->views[s->view[k]];
            bool ok = sp->step[k - 1] == 1 ? s->slot[k] >= 0 || v->col_stride == 1
                                           : s->slot[k] < 0 && v->row_stride == 0 &&
                                                 v->col_stride == 0;
            r->spans &= ok;
        }
    }
}

/* Where view v's piece starting at (i, j) lies: memory or a scratch tile. */
static char *piece_ptr(const tpu_fuse_plan *p, int v, int slot, char *scratch, int64_t i,
                       int64_t j) {
    if (slot >= 0)
        return scratch + (size_t)slot * TPU_FUSE_TILE_MAX * 8;
    const tpu_fuse_view *view = &p->views[v];
    return view->data + (i * view->row_stride + j * view->col_stride) * view->elem_size;
}

/* Runs every epilogue step on the piece of `len` elements at (i, j): as
 * flat runs, or as the records in `copies` cut to the piece. Keeps the
 * lowest failing step in *failed and its status in *st. */
static void run_piece(const tpu_fuse_mm_run *r, char *scratch, tpu_op *copies, int64_t i,
                      int64_t j, int64_t len, int *failed, tpu_status *st, char *msg) {
    const tpu_fuse_plan *p = r->plan;
    for (int s_i = 1; s_i < p->n_steps; s_i++) {
        const tpu_fuse_step *s = &p->steps[s_i];
        char *ptr[TPU_FUSE_MAX_OPERANDS];
        for (int k = 0; k < s->n_operands; k++)
            ptr[k] = piece_ptr(p, s->view[k], s->slot[k], scratch, i, j);
        if (r->spans) {
            const tpu_op_span *sp = &r->span[s_i];
            sp->run(sp, ptr[0], (const char *const *)&ptr[1], len);
            continue;
        }
        tpu_op *op = &copies[s_i - 1];
        for (int k = 0; k < s->n_operands; k++) {
            tpu_tensor *t = k == 0 ? &op->out : &op->in[k - 1];
            t->data = ptr[k];
            t->ndim = 1;
            t->sizes[0] = len;
            t->strides[0] = s->slot[k] >= 0 ? 1 : p->views[s->view[k]].col_stride;
        }
        tpu_status e = tpu_op_run(op, 0, 1);
        if (e != TPU_OK && s_i < *failed) {
            *failed = s_i;
            *st = e;
            if (msg)
                snprintf(msg, 512, "%s", tpu_last_error_message());
        }
    }
}

/* The block hook: the epilogue on rows [i0, i0 + mb) x columns [j0, j0 +
 * nb) of out, piece by piece of at most the cluster's chunk. */
static void run_block(const tpu_op_block_hook *h, int ith, int64_t i0, int64_t mb, int64_t j0,
                      int64_t nb) {
    tpu_fuse_mm_run *r = h->ctx;
    const tpu_fuse_plan *p = r->plan;
    const int64_t chunk = p->clusters[0].chunk, n = p->mm_cols;
    tpu_op *copies = NULL;
    if (!r->spans) {
        copies = malloc((size_t)(p->n_steps - 1) * sizeof *copies);
        if (copies == NULL) {
            if (r->failed[ith] > 1) {
                r->failed[ith] = 1;
                r->status[ith] = tpu_set_error(TPU_ERR_HOST_MEMORY,
                                               "%s: no host memory for a matmul epilogue",
                                               p->steps[1].op->name ? p->steps[1].op->name
                                                                    : "epilogue");
                if (ith < 4)
                    snprintf(r->msg[ith], sizeof r->msg[ith], "%s", tpu_last_error_message());
            }
            return;
        }
        for (int s_i = 1; s_i < p->n_steps; s_i++)
            memcpy(&copies[s_i - 1], p->steps[s_i].op, sizeof *copies);
    }
    char *scratch = r->scratch[ith];
    char *msg = ith < 4 ? r->msg[ith] : NULL;
    if (r->rows_flat && j0 == 0 && nb == n) { /* whole rows of flat views: one run */
        const int64_t first = i0 * n, end = (i0 + mb) * n;
        for (int64_t f = first; f < end; f += chunk)
            run_piece(r, scratch, copies, 0, f, end - f < chunk ? end - f : chunk,
                      &r->failed[ith], &r->status[ith], msg);
    } else {
        for (int64_t i = i0; i < i0 + mb; i++)
            for (int64_t j = j0; j < j0 + nb; j += chunk)
                run_piece(r, scratch, copies, i, j, j0 + nb - j < chunk ? j0 + nb - j : chunk,
                          &r->failed[ith], &r->status[ith], msg);
    }
    free(copies);
}

tpu_status tpu_fuse_mm_share(tpu_fuse_mm_run *r, int ith, int nth) {
    r->failed[ith] = r->plan->n_steps;
    r->status[ith] = TPU_OK;
    tpu_status st = tpu_op_run_blocks_claimed(r->plan->steps[0].op, ith, nth, &r->hook, &r->claims);
    if (st != TPU_OK) { /* the product itself: the lowest step */
        r->failed[ith] = 0;
        r->status[ith] = st;
        if (ith < 4)
            snprintf(r->msg[ith], sizeof r->msg[ith], "%s", tpu_last_error_message());
    }
    return TPU_OK;
}

tpu_status tpu_fuse_mm_end(const tpu_fuse_mm_run *r, int nth, int *failed) {
    int best = r->plan->n_steps, at = -1;
    for (int i = 0; i < nth; i++)
        if (r->status[i] != TPU_OK && r->failed[i] < best) {
            best = r->failed[i];
            at = i;
        }
    if (at < 0)
        return TPU_OK;
    *failed = best;
    return tpu_set_error(r->status[at], "%s",
                         at < 4 ? r->msg[at] : tpu_status_str(r->status[at]));
}
