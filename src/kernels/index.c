/* INDEX: gathers (index_select, gather) and the embedding's dense
 * backward, a scatter-add. The scatters live in scatter.c and the
 * interpolation passes in interp.c; tpu_k_index_ref and _fast route to
 * them.
 *
 * An index is checked where it is read: one outside [0, size) stops the share with TPU_ERR_INDEX, naming
 * the value and the size, and is reported at the next sync. Nothing is
 * ever read or written through it.
 *
 * Work split. Gathers: contiguous ranges of out's row-major elements
 * (the fast path of whole-row selects: of its rows).
 * Embedding backward: contiguous ranges of out's rows; each share scans
 * every index in order and adds the gradient rows that land in its own
 * rows, so every output row is summed in index order by one share,
 * whatever the thread count (no atomics, no scratch). Its fast path (f32
 * rows) adds the same floats in the same order. */
#include <string.h>

#include "kernels_internal.h"
#include "strided.h"

/* Whether index value v lies in [0, size) (PyTorch's gathers take no
 * negative indices); if not, sets the error. */
static bool index_ok(const tpu_op *op, int64_t v, int64_t size) {
    if (v < 0 || v >= size) {
        tpu_set_error(TPU_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with size %lld",
                      tpu_k_op_label(op), (long long)v, (int)op->p.index.dim, (long long)size);
        return false;
    }
    return true;
}

/* SELECT and GATHER: out element by element. */
static tpu_status gather_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *src = &op->in[0], *idx = &op->in[1];
    const int32_t dim = op->p.index.dim;
    const bool select = op->fn == TPU_INDEX_SELECT;
    int64_t start, end;
    if (select && tpu_k_numel(o) == 0) {
        /* Nothing to copy (another dim is empty), but PyTorch still
         * refuses an index out of range: share 0 checks them all. */
        for (int64_t i = 0; ith == 0 && i < idx->sizes[0]; i++)
            if (!index_ok(op, tpu_k_load_index(tpu_k_ptr(idx, i * idx->strides[0]), idx->dtype),
                          src->sizes[dim]))
                return TPU_ERR_INDEX;
        return TPU_OK;
    }
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    /* Walk out's shape with out's strides, src's strides with dim zeroed
     * (its position comes from the index), and the index's strides: its
     * own for GATHER, only along dim for SELECT. */
    int64_t src_strides[TPU_MAX_DIMS], idx_strides[TPU_MAX_DIMS];
    for (int32_t d = 0; d < o->ndim; d++) {
        src_strides[d] = d == dim ? 0 : src->strides[d];
        idx_strides[d] = select ? (d == dim ? idx->strides[0] : 0) : idx->strides[d];
    }
    const int64_t *strides[3] = {o->strides, src_strides, idx_strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 3, strides, start);
    const size_t es = tpu_dtype_size(o->dtype);
    const int64_t size = src->sizes[dim];
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        int64_t k = tpu_k_load_index(tpu_k_ptr(idx, it.off[2]), idx->dtype);
        if (!index_ok(op, k, size))
            return TPU_ERR_INDEX;
        memcpy(tpu_k_ptr(o, it.off[0]), tpu_k_ptr(src, it.off[1] + k * src->strides[dim]), es);
    }
    return TPU_OK;
}

/* SELECT whose dims after `dim` are one row-major block in both out and
 * src (an embedding lookup's rows, index_select of whole rows): out is
 * [outer, index, inner] and each (outer, index) row is one memcpy of
 * inner elements, split into contiguous ranges of rows. The same bytes as
 * gather_ref, and the same check of every index read. Returns false,
 * having written nothing, when the layout does not qualify. */
static bool select_rows(const tpu_op *op, int ith, int nth, tpu_status *st) {
    const tpu_tensor *o = &op->out, *src = &op->in[0], *idx = &op->in[1];
    const int32_t dim = op->p.index.dim;
    if (op->fn != TPU_INDEX_SELECT || tpu_k_numel(o) == 0)
        return false;
    int64_t inner = 1;
    for (int32_t d = o->ndim - 1; d > dim; d--) {
        if (o->sizes[d] != 1 && (o->strides[d] != inner || src->strides[d] != inner))
            return false;
        inner *= o->sizes[d];
    }
    const int64_t n = o->sizes[dim], rows = tpu_k_numel(o) / inner, size = src->sizes[dim];
    const size_t es = tpu_dtype_size(o->dtype);
    int64_t r0, r1;
    tpu_k_split(rows, ith, nth, &r0, &r1);
    *st = TPU_OK;
    for (int64_t r = r0; r < r1; r++) {
        /* Row r is (outer position r / n, index r % n); the outer
         * position's offsets come from its digits over dims < dim. */
        int64_t i = r % n, rest = r / n, o_off = i * o->strides[dim], s_off = 0;
        for (int32_t d = dim - 1; d >= 0; d--) {
            int64_t q = rest % o->sizes[d];
            rest /= o->sizes[d];
            o_off += q * o->strides[d];
            s_off += q * src->strides[d];
        }
        int64_t k = tpu_k_load_index(tpu_k_ptr(idx, i * idx->strides[0]), idx->dtype);
        if (!index_ok(op, k, size)) {
            *st = TPU_ERR_INDEX;
            return true;
        }
        memcpy(tpu_k_ptr(o, o_off), tpu_k_ptr(src, s_off + k * src->strides[dim]),
               (size_t)inner * es);
    }
    return true;
}

/* EMBEDDING_BACKWARD: rows [r0, r1) of out. With f32_rows (the fast
 * path: f32 gradient and out with contiguous rows, no scale_by_freq) the
 * rows are cleared by memset and summed in f32; the reference clears and
 * sums element by element through f64. Both give the same bytes: an f64
 * add of two floats rounded once to f32 is the f32 add (53 >= 2 * 24 + 2
 * bits, so the double rounding is exact). */
static tpu_status embedding_backward(const tpu_op *op, int ith, int nth, bool f32_rows) {
    const tpu_tensor *o = &op->out, *grad = &op->in[0], *idx = &op->in[1];
    const int64_t w = o->sizes[0], d = o->sizes[1], n = idx->sizes[0];
    const int64_t pad = op->p.index.padding_idx;
    int64_t r0, r1;
    tpu_k_split(w, ith, nth, &r0, &r1);
    if (r0 >= r1)
        return TPU_OK;
    for (int64_t r = r0; r < r1; r++) {
        if (f32_rows) {
            memset((float *)o->data + r * o->strides[0], 0, (size_t)d * sizeof(float));
            continue;
        }
        for (int64_t j = 0; j < d; j++)
            tpu_k_store_f64(tpu_k_ptr(o, r * o->strides[0] + j * o->strides[1]), o->dtype, 0.0);
    }
    /* Sums in f64 would need a row buffer per output row; the sum is kept
     * in out's dtype as PyTorch's CPU kernel keeps it (index_add in the
     * gradient's dtype), one rounding per added row. */
    /* With scale_by_freq, this share first counts how often each of its
     * rows is named (in its own part of the scratch). */
    int64_t *counts = op->p.index.scale_by_freq ? (int64_t *)op->scratch : NULL;
    for (int64_t r = r0; counts && r < r1; r++)
        counts[r] = 0;
    for (int64_t i = 0; counts && i < n; i++) {
        int64_t k = tpu_k_load_index(tpu_k_ptr(idx, i * idx->strides[0]), idx->dtype);
        if (k >= r0 && k < r1)
            counts[k]++;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t k = tpu_k_load_index(tpu_k_ptr(idx, i * idx->strides[0]), idx->dtype);
        if (k < 0 || k >= w)
            return tpu_set_error(TPU_ERR_INDEX, "%s: index %lld is out of range for %lld embeddings",
                                 tpu_k_op_label(op), (long long)k, (long long)w);
        if (k < r0 || k >= r1 || k == pad)
            continue;
        if (f32_rows) {
            float *dst = (float *)o->data + k * o->strides[0];
            const float *src = (const float *)grad->data + i * grad->strides[0];
            for (int64_t j = 0; j < d; j++)
                dst[j] += src[j];
            continue;
        }
        double scale = counts ? 1.0 / (double)counts[k] : 1.0;
        for (int64_t j = 0; j < d; j++) {
            char *dst = tpu_k_ptr(o, k * o->strides[0] + j * o->strides[1]);
            double g = tpu_k_load_f64(tpu_k_ptr(grad, i * grad->strides[0] + j * grad->strides[1]),
                                      grad->dtype);
            tpu_k_store_f64(dst, o->dtype, tpu_k_load_f64(dst, o->dtype) + g * scale);
        }
    }
    return TPU_OK;
}

/* Whether the fast path's f32 rows apply (see embedding_backward). */
static bool embedding_backward_f32_rows(const tpu_op *op) {
    const tpu_tensor *o = &op->out, *g = &op->in[0];
    return !op->p.index.scale_by_freq && o->dtype == TPU_DTYPE_F32 && g->dtype == TPU_DTYPE_F32 &&
           o->ndim == 2 && g->ndim == 2 && (o->sizes[1] <= 1 || o->strides[1] == 1) &&
           (g->sizes[1] <= 1 || g->strides[1] == 1) && tpu_k_is_aligned(o) && tpu_k_is_aligned(g);
}

int64_t tpu_k_index_scratch_bytes(const tpu_op *op) {
    if (op->fn != TPU_INDEX_EMBEDDING_BACKWARD || !op->p.index.scale_by_freq || op->out.ndim != 2)
        return 0;
    return op->out.sizes[0] * (int64_t)sizeof(int64_t);
}

/* HISTC, by share 0 alone: counts are exact integers, so the order does
 * not matter, but one pass keeps it simple and the bins few. The bin of x
 * is computed as PyTorch's CPU histc computes it, in the input's float
 * type (f32 for the 32- and 16-bit floats). */
static tpu_status histc_ref(const tpu_op *op, int ith) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    if (ith != 0)
        return TPU_OK;
    const int64_t bins = o->sizes[0], n = tpu_k_numel(in);
    const double lo = op->p.hist.lo, hi = op->p.hist.hi;
    const bool wide = !tpu_dtype_is_float(in->dtype) || in->dtype == TPU_DTYPE_F64;
    for (int64_t b = 0; b < bins; b++)
        tpu_k_store_f64(tpu_k_ptr(o, b * o->strides[0]), o->dtype, 0.0);
    if (n == 0 || bins == 0)
        return TPU_OK;
    const int64_t *strides[1] = {in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, in->ndim, in->sizes, 1, strides, 0);
    for (int64_t i = 0; i < n; i++, tpu_k_iter_next(&it)) {
        double x = tpu_k_load_f64(tpu_k_ptr(in, it.off[0]), in->dtype);
        if (!(x >= lo && x <= hi))
            continue; /* outside, or NaN */
        int64_t b;
        if (wide)
            b = (int64_t)((x - lo) * (double)bins / (hi - lo));
        else
            b = (int64_t)(((float)x - (float)lo) * (float)bins / ((float)hi - (float)lo));
        if (b >= bins)
            b = bins - 1; /* the top edge, or f32 rounding just above it */
        if (b < 0)
            b = 0;
        char *dst = tpu_k_ptr(o, b * o->strides[0]);
        tpu_k_store_f64(dst, o->dtype, tpu_k_load_f64(dst, o->dtype) + 1.0);
    }
    return TPU_OK;
}

/* GATHER of int64 indices by rows of out's last dim: each row's elements
 * read src at their own index along `dim` (and at their column along the
 * last dim, unless dim is it), with the element size and index dtype
 * fixed per loop instead of per element. The same bytes as gather_ref and
 * the same check of every index read, by rows instead of elements (a
 * share stops at its first bad index, as there). */
#define GATHER_ROW(T)                                                                              \
    for (int64_t j = 0; j < len; j++) {                                                            \
        int64_t k;                                                                                 \
        memcpy(&k, pi + j * ii, sizeof k);                                                         \
        if (!index_ok(op, k, size))                                                                \
            return TPU_ERR_INDEX;                                                                  \
        memcpy(po + j * oo, ps + j * ss + k * sd, sizeof(T));                                      \
    }                                                                                              \
    break

static tpu_status gather_rows(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *src = &op->in[0], *idx = &op->in[1];
    const int32_t dim = op->p.index.dim, last = o->ndim - 1;
    const int64_t len = o->sizes[last];
    const int64_t n_rows = len > 0 ? tpu_k_numel(o) / len : 0;
    int64_t start, end;
    tpu_k_split(n_rows, ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    int64_t src_strides[TPU_MAX_DIMS];
    for (int32_t d = 0; d < o->ndim; d++)
        src_strides[d] = d == dim ? 0 : src->strides[d];
    const int64_t *strides[3] = {o->strides, src_strides, idx->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, last, o->sizes, 3, strides, start);
    const size_t es = tpu_dtype_size(o->dtype);
    const int64_t size = src->sizes[dim];
    /* Steps in bytes along the row; sd: one step of the index along dim. */
    const int64_t oo = o->strides[last] * (int64_t)es, ii = idx->strides[last] * 8;
    const int64_t ss = src_strides[last] * (int64_t)es, sd = src->strides[dim] * (int64_t)es;
    for (int64_t r = start; r < end; r++, tpu_k_iter_next(&it)) {
        char *po = tpu_k_ptr(o, it.off[0]);
        const char *ps = tpu_k_ptr(src, it.off[1]), *pi = tpu_k_ptr(idx, it.off[2]);
        switch (es) {
        case 1: GATHER_ROW(uint8_t);
        case 2: GATHER_ROW(uint16_t);
        case 4: GATHER_ROW(uint32_t);
        default: GATHER_ROW(uint64_t);
        }
    }
    return TPU_OK;
}
#undef GATHER_ROW

tpu_status tpu_k_index_ref(const tpu_op *op, int ith, int nth) {
    if (op->fn == TPU_INDEX_INTERP || op->fn == TPU_INDEX_INTERP_BACKWARD)
        return tpu_k_interp_ref(op, ith, nth);
    if (op->fn >= TPU_INDEX_SCATTER)
        return tpu_k_scatter_ref(op, ith, nth);
    if (op->fn == TPU_INDEX_HISTC)
        return histc_ref(op, ith);
    if (op->fn == TPU_INDEX_EMBEDDING_BACKWARD)
        return embedding_backward(op, ith, nth, false);
    return gather_ref(op, ith, nth);
}

tpu_status tpu_k_index_fast(const tpu_op *op, int ith, int nth) {
    if (op->fn == TPU_INDEX_INTERP || op->fn == TPU_INDEX_INTERP_BACKWARD)
        return tpu_k_interp_fast(op, ith, nth);
    if (op->fn == TPU_INDEX_EMBEDDING_BACKWARD && embedding_backward_f32_rows(op))
        return embedding_backward(op, ith, nth, true);
    tpu_status st;
    if (op->fn == TPU_INDEX_NONZERO && tpu_k_nonzero_bytes(op, ith, &st))
        return st;
    if (tpu_k_scatter_add_rows(op, ith, nth, &st))
        return st;
    if (select_rows(op, ith, nth, &st))
        return st;
    if (op->fn == TPU_INDEX_GATHER && op->in[1].dtype == TPU_DTYPE_I64 && op->out.ndim > 0)
        return gather_rows(op, ith, nth);
    return tpu_k_index_ref(op, ith, nth);
}
