/* Forming groups: which held records run together, where each operand's
 * tile lives, and how the group's elements are cut into tiles. See
 * fuse.h for why a group gives strict mode's bits. */
#include <stdint.h>
#include <string.h>

#include "fuse.h"

/* Row-major contiguous once size-1 dims are dropped: every tile of it is
 * contiguous too. */
static bool contiguous(const tpu_tensor *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1)
            continue;
        if (t->strides[d] != expect)
            return false;
        expect *= t->sizes[d];
    }
    return true;
}

int64_t tpu_fuse_row_length(const tpu_op *op) {
    int64_t row = tpu_op_row_length(op);
    return row <= TPU_FUSE_TILE_MAX ? row : 0;
}

bool tpu_fuse_fusable(const tpu_op *op) {
    switch (op->code) {
    case TPU_OP_UNARY:
    case TPU_OP_BINARY:
    case TPU_OP_TERNARY:
        break;
    case TPU_OP_COPY: /* TRIL and TRIU read the element's position */
        if (op->fn != TPU_COPY_PLAIN)
            return false;
        break;
    case TPU_OP_FILL: /* ARANGE reads the element's position */
        if (op->fn != TPU_FILL_CONSTANT)
            return false;
        break;
    case TPU_OP_REDUCE:
        if (tpu_fuse_row_length(op) == 0)
            return false;
        break;
    case TPU_OP_MATMUL:
        break;
    default:
        return false;
    }
    if (op->n_aux != 0 || op->n_in > TPU_FUSE_MAX_OPERANDS - 1 || op->scratch_nbytes != 0 ||
        tpu_op_phases(op) != 1 || op->out.data == NULL)
        return false;
    for (int d = 0; d < op->out.ndim; d++)
        if (op->out.sizes[d] == 0)
            return false;
    /* A kernel whose bytes depend on the layout (its fast path and its
     * reference may round differently) must see the same kind of layout
     * on every tile as on the whole: contiguous operands stay contiguous
     * on tiles; a strided view could turn contiguous on a tile. */
    if (tpu_op_layout_sensitive(op))
        for (int k = 0; k <= op->n_in; k++)
            if (!contiguous(k == 0 ? &op->out : &op->in[k - 1]))
                return false;
    return true;
}

bool tpu_fuse_starts_group(const tpu_op *op) {
    return op->code == TPU_OP_MATMUL;
}

/* ------------------------------------------------------------ views */

/* The canonical form of a view: size-1 dims dropped and every pair of
 * adjacent dims merged where the outer stride is the inner's stride times
 * its size. Two views with the same data and dtype address the same bytes
 * for every row-major element index exactly when their canonical forms are
 * equal. */
static void canonicalize(const tpu_tensor *t, tpu_fuse_view *v) {
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t size = t->sizes[d], stride = t->strides[d];
        if (size == 1)
            continue;
        if (n > 0 && v->cstrides[n - 1] == stride * size) {
            v->csizes[n - 1] *= size;
            v->cstrides[n - 1] = stride;
        } else {
            v->csizes[n] = size;
            v->cstrides[n] = stride;
            n++;
        }
    }
    v->cdims = n;
}

static void describe(const tpu_tensor *t, tpu_fuse_view *v) {
    memset(v, 0, sizeof *v);
    v->data = t->data;
    v->dtype = t->dtype;
    v->elem_size = (int32_t)tpu_dtype_size(t->dtype);
    canonicalize(t, v);
    intptr_t lo = 0, hi = 0;
    for (int d = 0; d < v->cdims; d++) {
        intptr_t span = (intptr_t)((v->csizes[d] - 1) * v->cstrides[d] * v->elem_size);
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    v->lo = (uintptr_t)v->data + (uintptr_t)lo;
    v->hi = (uintptr_t)v->data + (uintptr_t)hi + (uintptr_t)v->elem_size;
}

static bool same_view(const tpu_fuse_view *a, const tpu_fuse_view *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->cdims != b->cdims)
        return false;
    for (int d = 0; d < a->cdims; d++)
        if (a->csizes[d] != b->csizes[d] || a->cstrides[d] != b->cstrides[d])
            return false;
    return true;
}

static bool overlap(const tpu_fuse_view *a, const tpu_fuse_view *b) {
    return a->lo < b->hi && b->lo < a->hi;
}

/* Sets v's row and column strides over a product's out of n columns
 * (its elements in row-major order are v's): false if v is no [M, n]
 * tensor with a column stride of 0 or 1 (or n == 1). Its canonical form
 * has maximal dims, so one dim covering all elements, or two split
 * exactly at n, are the only forms with one stride per side. */
static bool as_rows(tpu_fuse_view *v, int64_t n) {
    int64_t rs, cs;
    if (v->cdims == 0) {
        rs = cs = 0;
    } else if (v->cdims == 1) {
        rs = n * v->cstrides[0];
        cs = v->cstrides[0];
    } else if (v->cdims == 2 && v->csizes[1] == n) {
        rs = v->cstrides[0];
        cs = v->cstrides[1];
    } else {
        return false;
    }
    if (n == 1) /* one column: pieces are one element long */
        cs = 1;
    if (cs != 0 && cs != 1)
        return false;
    v->row_stride = rs;
    v->col_stride = cs;
    return true;
}

/* ------------------------------------------------------------ shape */

/* A shape as its boundaries: the products of its trailing sizes, from the
 * innermost dim out (the last is numel). Two shapes of the same numel have
 * a common refinement when their boundaries, merged, each divide the
 * next; its sizes are the ratios. */
typedef struct {
    int n;
    int64_t b[TPU_MAX_DIMS + 1];
} boundaries;

static void boundaries_of(const int64_t *sizes, int ndim, boundaries *out) {
    int64_t p = 1;
    out->n = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        p *= sizes[d];
        out->b[out->n++] = p;
    }
}

/* Merges y into x (both ascending); false if the result is no refinement
 * or has more than TPU_MAX_DIMS dims. */
static bool refine(boundaries *x, const boundaries *y) {
    int64_t m[2 * (TPU_MAX_DIMS + 1)];
    int n = 0, i = 0, j = 0;
    while (i < x->n || j < y->n) {
        int64_t v;
        if (j >= y->n || (i < x->n && x->b[i] < y->b[j]))
            v = x->b[i++];
        else if (i >= x->n || y->b[j] < x->b[i])
            v = y->b[j++];
        else
            v = x->b[i++], j++;
        int64_t prev = n ? m[n - 1] : 1;
        if (v % prev != 0)
            return false;
        if (v != prev)
            m[n++] = v;
    }
    if (n > TPU_MAX_DIMS)
        return false;
    memcpy(x->b, m, (size_t)n * sizeof m[0]);
    x->n = n;
    return true;
}

/* The strides of view v over its cluster's dims (sizes, ndim): each of its
 * canonical dims covers consecutive cluster dims whose sizes multiply to
 * its size. */
static void cluster_strides(tpu_fuse_view *v, const int64_t *sizes, int ndim) {
    int c = v->cdims - 1;
    int64_t p = 1; /* product of the cluster dims taken so far of canonical dim c */
    for (int d = ndim - 1; d >= 0; d--) {
        if (c < 0) { /* the view has only size-1 dims left: any stride does */
            v->gstrides[d] = 0;
            continue;
        }
        v->gstrides[d] = v->cstrides[c] * p;
        p *= sizes[d];
        if (p == v->csizes[c]) {
            c--;
            p = 1;
        }
    }
}

/* Sets v->flat, v->one_value and v->broadcast from its strides over the
 * cluster's dims. */
static void classify_layout(tpu_fuse_view *v, const int64_t *sizes, int ndim) {
    int64_t row_major = 1;
    v->flat = v->one_value = true;
    v->broadcast = false;
    for (int d = ndim - 1; d >= 0; d--) {
        if (sizes[d] == 1)
            continue;
        v->flat &= v->gstrides[d] == row_major;
        v->one_value &= v->gstrides[d] == 0;
        v->broadcast |= v->gstrides[d] == 0;
        row_major *= sizes[d];
    }
}

/* ------------------------------------------------------------ planning */

/* Operand k of a record as a view of its cluster (k = 0: out). A
 * reduction's out is taken broadcast over its input's shape (stride 0
 * along the reduced dims): a view of the input's cluster that holds each
 * row's value at every element of the row, as an element-wise reader of
 * it (x - mean) sees it. A row step's operands (row > 0: an element-wise
 * record on one value per row, var + eps) are taken the same way: each
 * gets a trailing dim of `row` elements, stride 0. */
static tpu_tensor operand(const tpu_op *op, int k, int64_t row) {
    tpu_tensor t = k > 0 ? op->in[k - 1] : op->out;
    if (row > 0) {
        t.sizes[t.ndim] = row;
        t.strides[t.ndim++] = 0;
    } else if (k == 0 && op->code == TPU_OP_REDUCE) {
        for (int d = 0; d < op->in[0].ndim; d++) {
            t.sizes[d] = op->in[0].sizes[d];
            if ((op->p.reduce.mask >> d) & 1u)
                t.strides[d] = 0;
        }
    }
    return t;
}

static int64_t numel_of(const tpu_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->sizes[d];
    return n;
}

/* The index of the storage starting at ptr, or -1. */
static int find_storage(const tpu_fuse_plan *p, uintptr_t ptr) {
    for (uint32_t h = (uint32_t)((ptr >> 6) * 2654435761u) & (TPU_FUSE_HASH - 1);;
         h = (h + 1) & (TPU_FUSE_HASH - 1)) {
        int32_t i = p->hash[h] - 1;
        if (i < 0)
            return -1;
        if (p->storages[i].lo == ptr)
            return i;
    }
}

/* The storage of tensor t: found, or added (then *added is set); -1 when
 * the table is full or t's storage overlaps another one of the group. */
static int storage_of(tpu_fuse_plan *p, const tpu_tensor *t, bool *added) {
    uintptr_t lo = (uintptr_t)t->storage, hi = lo + (uintptr_t)t->storage_nbytes;
    int i = find_storage(p, lo);
    if (i >= 0)
        return p->storages[i].hi == hi ? i : -1;
    if (p->n_storages == TPU_FUSE_MAX_STORAGES)
        return -1;
    for (int k = 0; k < p->n_storages; k++)
        if (p->storages[k].lo < hi && lo < p->storages[k].hi)
            return -1;
    i = p->n_storages++;
    p->storages[i] = (tpu_fuse_storage){lo, hi, -1};
    uint32_t h = (uint32_t)((lo >> 6) * 2654435761u) & (TPU_FUSE_HASH - 1);
    while (p->hash[h])
        h = (h + 1) & (TPU_FUSE_HASH - 1);
    p->hash[h] = i + 1;
    *added = true;
    return i;
}

/* Forgets the storages added for a record that was not taken (the last
 * `n` added). */
static void drop_storages(tpu_fuse_plan *p, int n) {
    for (; n > 0; n--) {
        int i = --p->n_storages;
        uint32_t h = (uint32_t)((p->storages[i].lo >> 6) * 2654435761u) & (TPU_FUSE_HASH - 1);
        while (p->hash[h] != i + 1)
            h = (h + 1) & (TPU_FUSE_HASH - 1);
        /* Linear probing: re-insert the entries after the hole. */
        p->hash[h] = 0;
        for (h = (h + 1) & (TPU_FUSE_HASH - 1); p->hash[h]; h = (h + 1) & (TPU_FUSE_HASH - 1)) {
            int32_t j = p->hash[h];
            p->hash[h] = 0;
            uint32_t g = (uint32_t)((p->storages[j - 1].lo >> 6) * 2654435761u) & (TPU_FUSE_HASH - 1);
            while (p->hash[g])
                g = (g + 1) & (TPU_FUSE_HASH - 1);
            p->hash[g] = j;
        }
    }
}

/* Whether view v (of cluster c) is already a view of the group. */
static bool has_view(const tpu_fuse_plan *p, const tpu_fuse_view *v, const tpu_tensor *t, int c) {
    int i = find_storage(p, (uintptr_t)t->storage);
    for (int w = i < 0 ? -1 : p->storages[i].first_view; w >= 0; w = p->views[w].next_of_storage)
        if (p->views[w].cluster == c && same_view(v, &p->views[w]))
            return true;
    return false;
}

/* For an element-wise record of `numel` elements: the row length of a
 * cluster it may join as a row step (one value per row of that cluster's
 * reductions), else 0. It must read a view that cluster already holds
 * with its operands taken as rows (a reduction's out, or an earlier row
 * step's), so that the row values a normalisation computes between its
 * reductions and the records that read them back (var + eps, its square
 * root) run in the same tiles instead of ending the group. Its rows must
 * be no longer than the cluster's tiles hold whole. */
static int64_t row_step_length(const tpu_fuse_plan *p, const tpu_op *op, int64_t numel, int *cluster) {
    if (op->code == TPU_OP_REDUCE || op->out.ndim >= TPU_MAX_DIMS)
        return 0;
    for (int k = 1; k <= op->n_in; k++)
        if (op->in[k - 1].ndim >= TPU_MAX_DIMS)
            return 0;
    for (int c = 0; c < p->n_clusters; c++) {
        const tpu_fuse_cluster *cl = &p->clusters[c];
        if (cl->row_length == 0 || cl->numel <= numel || cl->numel % numel != 0 ||
            cl->numel / numel > cl->row_length)
            continue;
        const int64_t row = cl->numel / numel;
        for (int k = 1; k <= op->n_in; k++) {
            const tpu_tensor t = operand(op, k, row);
            tpu_fuse_view v;
            describe(&t, &v);
            if (has_view(p, &v, &t, c)) {
                *cluster = c;
                return row;
            }
        }
    }
    return 0;
}

/* Tries to add record `op` as the next step: true (and the step filled,
 * views added) when it keeps the group safe and within its limits, else
 * false and the plan unchanged. */
static bool add_step(tpu_fuse_plan *p, const tpu_op *op, int entry) {
    if (p->n_steps == TPU_FUSE_MAX_OPS || op->code == TPU_OP_MATMUL)
        return false;
    /* A matmul group's epilogue: element-wise records on out's elements. */
    if (p->matmul && (op->code == TPU_OP_REDUCE || p->n_steps > TPU_FUSE_MM_MAX_STEPS))
        return false;
    const tpu_tensor own = operand(op, 0, 0); /* a reduction's: its input's shape */
    int64_t numel = numel_of(&own);
    int c = 0;
    const int64_t row = row_step_length(p, op, numel, &c);
    if (row > 0)
        numel *= row;
    else
        while (c < p->n_clusters && p->clusters[c].numel != numel)
            c++;
    if (c == TPU_FUSE_MAX_CLUSTERS || (p->matmul && c != 0))
        return false;
    boundaries merged = {0, {0}};
    if (c < p->n_clusters) {
        merged.n = p->clusters[c].n_bounds;
        memcpy(merged.b, p->clusters[c].bounds, sizeof merged.b);
    }
    int n_operands = 1 + op->n_in, n_added = 0;
    int reads_later[TPU_FUSE_MAX_OPERANDS * 4], n_reads_later = 0;
    tpu_fuse_view nv[TPU_FUSE_MAX_OPERANDS];
    int idx[TPU_FUSE_MAX_OPERANDS], n_new = 0;
    for (int k = 0; k < n_operands; k++) {
        const tpu_tensor t = operand(op, k, row);
        describe(&t, &nv[k]);
        nv[k].cluster = c;
        bool added = false;
        nv[k].storage = storage_of(p, &t, &added);
        n_added += added;
        boundaries b;
        boundaries_of(nv[k].csizes, nv[k].cdims, &b);
        if (nv[k].storage < 0 || !refine(&merged, &b) || (p->matmul && !as_rows(&nv[k], p->mm_cols))) {
            drop_storages(p, n_added);
            return false;
        }
        /* Find it among the views of its storage (no other view can share
         * a byte with it). Any other view sharing a byte with it is a
         * conflict if either side is written (out is): in its cluster
         * because tiles would reorder the accesses, in another because
         * clusters run one after another. */
        idx[k] = -1;
        for (int v = p->storages[nv[k].storage].first_view; v >= 0; v = p->views[v].next_of_storage) {
            const tpu_fuse_view *w = &p->views[v];
            if (!overlap(&nv[k], w))
                continue;
            bool conflict;
            if (w->cluster == c && same_view(&nv[k], w)) {
                idx[k] = v;
                conflict = k == 0 && w->read_later; /* a later cluster reads the old value */
            } else if (k > 0 && w->cluster < c) {
                /* A read of what an earlier cluster wrote: it has run by then. */
                if (w->written && n_reads_later < TPU_FUSE_MAX_OPERANDS * 4)
                    reads_later[n_reads_later++] = v;
                conflict = w->written && n_reads_later == TPU_FUSE_MAX_OPERANDS * 4;
            } else {
                conflict = k == 0 || w->written;
            }
            if (conflict) {
                drop_storages(p, n_added);
                return false;
            }
        }
        /* An operand equal to an earlier operand of this record that is
         * new to the group (a + a) shares its view. */
        for (int j = 0; j < k && idx[k] < 0; j++)
            if (idx[j] <= -2 && same_view(&nv[k], &nv[j]))
                idx[k] = idx[j];
        if (idx[k] == -1) {
            if (p->n_views + n_new == TPU_FUSE_MAX_VIEWS) {
                drop_storages(p, n_added);
                return false;
            }
            idx[k] = -2 - n_new++; /* new: placed below once the record is taken */
        }
    }
    /* Taken: add the cluster, the new views and the step. */
    if (c == p->n_clusters) {
        memset(&p->clusters[c], 0, sizeof p->clusters[c]);
        p->clusters[c].numel = numel;
        p->n_clusters++;
    }
    tpu_fuse_cluster *cl = &p->clusters[c];
    cl->n_bounds = merged.n;
    memcpy(cl->bounds, merged.b, sizeof cl->bounds);
    cl->n_steps++;
    int base = p->n_views;
    for (int k = 0; k < n_operands; k++)
        if (idx[k] <= -2 && base + (-2 - idx[k]) == p->n_views) {
            tpu_fuse_storage *st = &p->storages[nv[k].storage];
            nv[k].next_of_storage = st->first_view;
            st->first_view = p->n_views;
            p->views[p->n_views++] = nv[k];
        }
    tpu_fuse_step *s = &p->steps[p->n_steps++];
    s->op = op;
    s->entry = entry;
    s->cluster = c;
    s->n_operands = n_operands;
    s->row_step = row > 0;
    s->row_length = row > 0 ? row : tpu_fuse_row_length(op);
    if (s->row_length > cl->row_length)
        cl->row_length = s->row_length;
    for (int k = 0; k < n_operands; k++) {
        s->view[k] = idx[k] <= -2 ? base + (-2 - idx[k]) : idx[k];
        s->slot[k] = -1;
    }
    p->views[s->view[0]].written = true;
    for (int r = 0; r < n_reads_later; r++)
        p->views[reads_later[r]].read_later = true;
    return true;
}

/* Starts a matmul group with MATMUL record `op`: its out as the view of
 * cluster 0, its inputs as views of no cluster (read, never written, by
 * the group). False (and the plan unchanged) when out is no [M, N]
 * tensor with unit column stride or shares a byte with an input. */
static bool add_mm_step(tpu_fuse_plan *p, const tpu_op *op, int entry) {
    const int64_t n = op->out.sizes[1];
    tpu_fuse_view nv[1 + TPU_OP_MAX_IN];
    int n_views = 0, n_added = 0;
    for (int k = 0; k <= op->n_in && k <= 3; k++) {
        const tpu_tensor *t = k == 0 ? &op->out : &op->in[k - 1];
        if (tpu_tensor_is_absent(t))
            continue;
        tpu_fuse_view *v = &nv[n_views];
        describe(t, v);
        bool added = false;
        v->storage = storage_of(p, t, &added);
        n_added += added;
        bool ok = v->storage >= 0 && (k > 0 || (as_rows(v, n) && v->col_stride == 1));
        if (k > 0 && ok)
            ok = !overlap(v, &nv[0]);
        if (!ok) {
            drop_storages(p, n_added);
            return false;
        }
        v->cluster = k == 0 ? 0 : -1;
        v->written = k == 0;
        n_views++;
    }
    for (int k = 0; k < n_views; k++) {
        tpu_fuse_storage *st = &p->storages[nv[k].storage];
        nv[k].next_of_storage = st->first_view;
        st->first_view = p->n_views;
        p->views[p->n_views++] = nv[k];
    }
    tpu_fuse_cluster *cl = &p->clusters[0];
    memset(cl, 0, sizeof *cl);
    cl->numel = numel_of(&op->out);
    boundaries b;
    boundaries_of(nv[0].csizes, nv[0].cdims, &b);
    cl->n_bounds = b.n;
    memcpy(cl->bounds, b.b, sizeof cl->bounds);
    cl->n_steps = 1;
    p->n_clusters = 1;
    tpu_fuse_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof *s);
    s->op = op;
    s->entry = entry;
    s->n_operands = 1; /* its inputs are no views of the cluster */
    s->view[0] = 0;
    s->slot[0] = -1;
    p->matmul = true;
    p->mm_cols = n;
    return true;
}

/* The views a free mark kills: those of the storage the freed block
 * starts with that lie inside the block (-1 ends the list). A view of
 * another storage inside the block is not seen: it is then written, which
 * is only a missed saving. */
static int first_killed(const tpu_fuse_plan *p, const tpu_fuse_entry *e) {
    int i = find_storage(p, (uintptr_t)e->block);
    return i < 0 ? -1 : p->storages[i].first_view;
}

static bool mark_kills(const tpu_fuse_entry *e, const tpu_fuse_view *v) {
    uintptr_t lo = (uintptr_t)e->block, hi = lo + (uintptr_t)e->nbytes;
    return v->lo >= lo && v->hi <= hi;
}

/* Gives each value that dies inside the group (a later step writes the
 * same view, or a mark frees its block, before the group ends: nobody
 * outside the group can read it) a scratch slot of its part while one is
 * free. A backward pass finds which values die; a forward pass hands out
 * the slots: inputs read the slot their view's value is in, and a value's
 * slot is free again once the value is dead. Parts of an element-wise
 * group run one at a time (each tile of a part runs its steps alone), so
 * each has all the slots: a foreach step's temporaries, all alive at once
 * in stream order, each get one. A matmul group's epilogue runs all its
 * steps, of every part, in stream order on one piece (epilogue.c): its
 * parts share one pool of slots. */
static void assign_slots(tpu_fuse_plan *p, const tpu_fuse_entry *entries, int n_entries) {
    static _Thread_local int32_t cur[TPU_FUSE_MAX_VIEWS], slot_pool[TPU_FUSE_MAX_VIEWS];
    static _Thread_local bool killed[TPU_FUSE_MAX_VIEWS], dies[TPU_FUSE_MAX_OPS];
    memset(killed, 0, (size_t)p->n_views * sizeof killed[0]);
    for (int e = n_entries - 1, i = p->n_steps - 1; e >= 0; e--) {
        if (entries[e].kind != TPU_FUSE_RECORD) {
            if (entries[e].kind != TPU_FUSE_FREED)
                continue;
            for (int v = first_killed(p, &entries[e]); v >= 0; v = p->views[v].next_of_storage)
                if (mark_kills(&entries[e], &p->views[v]))
                    killed[v] = true;
            continue;
        }
        int v = p->steps[i].view[0];
        dies[i] = killed[v];
        killed[v] = true; /* this write ends the value before it */
        i--;
    }
    static _Thread_local bool busy[TPU_FUSE_MAX_OPS][TPU_FUSE_MAX_SLOTS];
    memset(busy, 0, (size_t)p->n_parts * sizeof busy[0]);
    for (int v = 0; v < p->n_views; v++)
        cur[v] = -1;
    p->n_elided = 0;
    p->bytes_elided = 0;
    int i = 0;
    for (int e = 0; e < n_entries; e++) {
        if (entries[e].kind != TPU_FUSE_RECORD) {
            if (entries[e].kind != TPU_FUSE_FREED)
                continue;
            for (int v = first_killed(p, &entries[e]); v >= 0; v = p->views[v].next_of_storage)
                if (cur[v] >= 0 && mark_kills(&entries[e], &p->views[v])) {
                    busy[slot_pool[v]][cur[v]] = false;
                    cur[v] = -1;
                }
            continue;
        }
        tpu_fuse_step *s = &p->steps[i];
        tpu_fuse_cluster *cl = &p->clusters[s->cluster];
        const int pool = p->matmul ? 0 : s->part;
        bool *taken = busy[pool];
        for (int k = 1; k < s->n_operands; k++)
            s->slot[k] = cur[s->view[k]];
        int v = s->view[0], old = cur[v], slot = -1;
        if (dies[i] && !p->views[v].read_later && !p->views[v].broadcast &&
            s->op->code != TPU_OP_MATMUL) /* a product writes its out in memory */
            for (int c = 0; c < TPU_FUSE_MAX_SLOTS && slot < 0; c++)
                if (!taken[c])
                    slot = c;
        if (slot >= 0) {
            taken[slot] = true;
            if (slot + 1 > cl->n_slots)
                cl->n_slots = slot + 1;
            p->n_elided++;
            p->bytes_elided += cl->numel * p->views[v].elem_size;
        }
        s->slot[0] = slot;
        cur[v] = slot;
        slot_pool[v] = pool;
        if (old >= 0)
            taken[old] = false;
        i++;
    }
}

/* Lists each cluster's steps together, in stream order (a counting sort). */
static void order_steps(tpu_fuse_plan *p) {
    int32_t next[TPU_FUSE_MAX_CLUSTERS];
    for (int c = 0, at = 0; c < p->n_clusters; c++) {
        p->clusters[c].first = at;
        next[c] = at;
        at += p->clusters[c].n_steps;
    }
    for (int i = 0; i < p->n_steps; i++)
        p->order[next[p->steps[i].cluster]++] = i;
}

/* The root of step i in the union-find forest `up`, halving paths. */
static int32_t root_of(int32_t *up, int32_t i) {
    while (up[i] != i)
        i = up[i] = up[up[i]];
    return i;
}

/* Splits cluster c's steps into parts (fuse.h): two steps are in one part
 * when they touch a storage that a step of the cluster writes, or read
 * one element by element (a gradient read by two records of an optimizer
 * step: in one part its tile is read from memory once), directly or
 * through other steps. A storage only read broadcast (a scalar read by
 * every record, a bias read by every row) joins nothing. Parts are
 * listed by their first step; order[] is rewritten part by part, stream
 * order within each. Scratch slots stay valid: a slot's values live
 * within one tile of one part's steps, and restricting stream order to a
 * part keeps every value's lifetime inside its own. */
static void split_parts(tpu_fuse_plan *p, int c) {
    static _Thread_local int32_t up[TPU_FUSE_MAX_OPS], owner[TPU_FUSE_MAX_STORAGES],
        part_of[TPU_FUSE_MAX_OPS], count[TPU_FUSE_MAX_OPS + 1], sorted[TPU_FUSE_MAX_OPS];
    static _Thread_local bool written[TPU_FUSE_MAX_STORAGES];
    tpu_fuse_cluster *cl = &p->clusters[c];
    const int32_t *steps = &p->order[cl->first];
    const int n = cl->n_steps;
    for (int s = 0; s < p->n_storages; s++) {
        owner[s] = -1;
        written[s] = false;
    }
    for (int v = 0; v < p->n_views; v++)
        if (p->views[v].cluster == c && p->views[v].written)
            written[p->views[v].storage] = true;
    for (int j = 0; j < n; j++) {
        up[j] = j;
        const tpu_fuse_step *st = &p->steps[steps[j]];
        for (int k = 0; k < st->n_operands; k++) {
            const tpu_fuse_view *v = &p->views[st->view[k]];
            int32_t s = v->storage;
            if (!written[s] && (v->broadcast || v->one_value))
                continue;
            if (owner[s] < 0) {
                owner[s] = j;
                continue;
            }
            /* The smaller index is the root: a part is numbered at its root. */
            int32_t x = root_of(up, j), y = root_of(up, owner[s]);
            if (x < y)
                up[y] = x;
            else
                up[x] = y;
        }
    }
    /* Number the parts by first step, then a counting sort by part. */
    int parts = 0;
    for (int j = 0; j < n; j++) {
        int32_t r = root_of(up, j);
        part_of[j] = r == j ? parts++ : part_of[r];
    }
    memset(count, 0, (size_t)(parts + 1) * sizeof count[0]);
    for (int j = 0; j < n; j++)
        count[part_of[j] + 1]++;
    for (int k = 0; k < parts; k++)
        count[k + 1] += count[k];
    cl->first_part = p->n_parts;
    cl->n_parts = parts;
    for (int k = 0; k <= parts; k++) /* count[parts] == n: the end (the next cluster's start) */
        p->part_start[cl->first_part + k] = cl->first + count[k];
    p->n_parts += parts;
    for (int j = 0; j < n; j++) {
        p->steps[steps[j]].part = cl->first_part + part_of[j];
        sorted[count[part_of[j]]++] = steps[j];
    }
    memcpy(&p->order[cl->first], sorted, (size_t)n * sizeof sorted[0]);
}

/* A cluster's dims, outermost first, from its boundaries. */
static void cluster_shape(tpu_fuse_cluster *cl) {
    if (cl->n_bounds == 0) { /* one element */
        cl->ndim = 1;
        cl->sizes[0] = 1;
        return;
    }
    cl->ndim = cl->n_bounds;
    int64_t prev = 1;
    for (int k = 0; k < cl->n_bounds; k++) {
        cl->sizes[cl->n_bounds - 1 - k] = cl->bounds[k] / prev;
        prev = cl->bounds[k];
    }
}

/* Cuts a cluster's elements into tiles of about the cache's size: the
 * bytes per element of its largest part (its distinct views and the
 * scratch slots) fill about 256 KiB. A tile holds whole rows of its
 * reductions (row_length <= TPU_FUSE_TILE_MAX elements). */
static void plan_tiles(tpu_fuse_plan *p, int c) {
    static _Thread_local int32_t seen[TPU_FUSE_MAX_VIEWS];
    tpu_fuse_cluster *cl = &p->clusters[c];
    int64_t bytes_per_elem = 0;
    for (int v = 0; v < p->n_views; v++)
        seen[v] = -1;
    for (int k = cl->first_part; k < cl->first_part + cl->n_parts; k++) {
        int64_t bytes = 8 * cl->n_slots;
        for (int32_t j = p->part_start[k]; j < p->part_start[k + 1]; j++) {
            const tpu_fuse_step *st = &p->steps[p->order[j]];
            for (int o = 0; o < st->n_operands; o++)
                if (seen[st->view[o]] != k) {
                    seen[st->view[o]] = k;
                    bytes += p->views[st->view[o]].elem_size;
                }
        }
        if (bytes > bytes_per_elem)
            bytes_per_elem = bytes;
    }
    if (bytes_per_elem < 1)
        bytes_per_elem = 1;
    /* A chunk's operands stay near the core between steps. Chunks of a
     * few thousand elements cost less per element than the 512 first
     * tried: every step's call, dispatch and loop set-up is paid per
     * chunk, and memory streams are read in longer bursts (on Zen 4 a
     * foreach AdamW step ran about a tenth faster, a bf16 chain of 150
     * records a quarter faster). */
    int64_t chunk = (64 * 1024) / bytes_per_elem / 64 * 64;
    cl->chunk = chunk < TPU_FUSE_CHUNK_MIN ? TPU_FUSE_CHUNK_MIN
                : chunk > TPU_FUSE_CHUNK_MAX ? TPU_FUSE_CHUNK_MAX : chunk;
    int64_t target = (256 * 1024) / bytes_per_elem;
    if (target < 256)
        target = 256;
    if (target > TPU_FUSE_TILE_MAX)
        target = TPU_FUSE_TILE_MAX;
    /* The outermost dim whose trailing dims fit in a tile. */
    int d = 0;
    int64_t inner = cl->numel;
    while (d < cl->ndim - 1 && inner / cl->sizes[d] > target &&
           inner / cl->sizes[d] / cl->sizes[d + 1] >= cl->row_length) {
        inner /= cl->sizes[d];
        d++;
    }
    inner /= cl->sizes[d]; /* elements of the dims after d */
    int64_t block = inner >= target ? 1 : target / inner;
    if (block > cl->sizes[d] || inner < cl->row_length) /* one row is the cluster: one tile */
        block = cl->sizes[d];
    int64_t outer = 1;
    for (int k = 0; k < d; k++)
        outer *= cl->sizes[k];
    cl->tile_dim = d;
    cl->tile_block = block;
    cl->tile_elems = block * inner;
    cl->n_tiles = outer * ((cl->sizes[d] + block - 1) / block);
    cl->n_work = cl->n_parts * cl->n_tiles;
}

int tpu_fuse_plan_group(const tpu_fuse_entry *entries, int n, tpu_fuse_plan *p) {
    p->n_steps = 0;
    p->n_views = 0;
    p->n_clusters = 0;
    p->n_storages = 0;
    p->matmul = false;
    memset(p->hash, 0, sizeof p->hash);
    int taken = 0;
    if (entries[0].kind == TPU_FUSE_RECORD && entries[0].op->code == TPU_OP_MATMUL) {
        if (!add_mm_step(p, entries[0].op, 0))
            return 1;
        taken = 1;
    }
    while (taken < n) {
        const tpu_fuse_entry *e = &entries[taken];
        if (e->kind == TPU_FUSE_RECORD && !add_step(p, e->op, taken))
            break;
        taken++;
    }
    if (taken == 0) /* a lone record that fits no group (too many dims): the caller runs it */
        return 1;
    if (p->n_steps < 2)
        return taken;
    for (int c = 0; c < p->n_clusters; c++)
        cluster_shape(&p->clusters[c]);
    for (int v = 0; v < p->n_views; v++) {
        if (p->views[v].cluster < 0) /* a product's input */
            continue;
        const tpu_fuse_cluster *cl = &p->clusters[p->views[v].cluster];
        cluster_strides(&p->views[v], cl->sizes, cl->ndim);
        classify_layout(&p->views[v], cl->sizes, cl->ndim);
    }
    order_steps(p);
    p->n_parts = 0;
    for (int c = 0; c < p->n_clusters; c++)
        split_parts(p, c);
    assign_slots(p, entries, taken);
    for (int c = 0; c < p->n_clusters; c++)
        plan_tiles(p, c);
    return taken;
}

void tpu_fuse_unwritten_blocks(const tpu_fuse_plan *p, const tpu_fuse_entry *entries, int n,
                               bool *unwritten) {
    /* Per storage: the entry of its open ALLOCATED mark (-1: none), and
     * whether a step wrote its memory since. A block no step touches has
     * no storage in the plan and is counted as usual. */
    static _Thread_local int32_t open_at[TPU_FUSE_MAX_STORAGES];
    static _Thread_local bool written[TPU_FUSE_MAX_STORAGES];
    for (int k = 0; k < p->n_storages; k++)
        open_at[k] = -1;
    memset(unwritten, 0, (size_t)n * sizeof *unwritten);
    for (int e = 0, i = 0; e < n; e++) {
        const tpu_fuse_entry *en = &entries[e];
        if (en->kind == TPU_FUSE_RECORD) { /* steps are in entry order */
            const tpu_fuse_step *s = &p->steps[i++];
            if (s->slot[0] < 0)
                written[p->views[s->view[0]].storage] = true;
            continue;
        }
        int k = find_storage(p, (uintptr_t)en->block);
        if (k < 0 || p->storages[k].hi > (uintptr_t)en->block + en->nbytes)
            continue;
        if (en->kind == TPU_FUSE_ALLOCATED) {
            open_at[k] = e;
            written[k] = false;
        } else if (en->kind == TPU_FUSE_FREED && open_at[k] >= 0) {
            const tpu_fuse_entry *a = &entries[open_at[k]];
            if (en->pairs && !written[k] && a->nbytes == en->nbytes)
                unwritten[open_at[k]] = unwritten[e] = true;
            open_at[k] = -1;
        }
    }
}
