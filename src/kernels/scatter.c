/* INDEX scatters and PyTorch's advanced indexing: scatter, scatter_add and
 * scatter with a value along one dim; x[i, j] as a gather (ADVANCED) and
 * x[i, j] = v as a put (ADVANCED_PUT); nonzero's coordinates.
 *
 * Every index is checked where it is read; one out of range stops the share
 * with TPU_ERR_INDEX naming the value and the size (reported at the next
 * sync), and nothing is read or written through it.
 *
 * Work split. Scatters: contiguous ranges of the index's lines (elements
 * that differ only along dim), each line walked in order by one share, so
 * duplicates within a line resolve the same way for any thread count; two
 * lines never write the same element. ADVANCED: contiguous ranges of out's
 * elements. ADVANCED_PUT and NONZERO: share 0 alone, in row-major order
 * (a put's indices may collide anywhere). */
#include <string.h>

#include "convert.h"
#include "kernels_internal.h"
#include "strided.h"

/* Whether a scatter's index v lies in [0, size); if not, sets the error. */
static bool index_in_range(const tpu_op *op, int64_t v, int64_t size) {
    if (v >= 0 && v < size)
        return true;
    tpu_set_error(TPU_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with size %lld",
                  tpu_k_op_label(op), (long long)v, (int)op->p.index.dim, (long long)size);
    return false;
}

/* *dst = *dst (op) *from for the reducing scatters, in out's dtype: floats
 * through f64 (each step rounded on store, as PyTorch's CPU kernel rounds
 * each step in the dtype), integers wrapping, bool as logic. A NaN wins an
 * amax or amin. */
static void combine(int32_t fn, tpu_dtype dt, char *dst, const char *from) {
    if (dt == TPU_DTYPE_BOOL) {
        bool a = tpu_k_load_bool(dst, dt), b = tpu_k_load_bool(from, dt);
        bool any = fn == TPU_INDEX_SCATTER_ADD || fn == TPU_INDEX_SCATTER_AMAX;
        tpu_k_store_bool(dst, dt, any ? a || b : a && b);
    } else if (tpu_dtype_is_float(dt)) {
        double a = tpu_k_load_f64(dst, dt), b = tpu_k_load_f64(from, dt), r;
        switch (fn) {
        case TPU_INDEX_SCATTER_ADD: r = a + b; break;
        case TPU_INDEX_SCATTER_PROD: r = a * b; break;
        case TPU_INDEX_SCATTER_AMAX: r = b != b || a != a ? (b != b ? b : a) : (a < b ? b : a); break;
        default: r = b != b || a != a ? (b != b ? b : a) : (a > b ? b : a); break;
        }
        tpu_k_store_f64(dst, dt, r);
    } else {
        int64_t a = tpu_k_load_i64(dst, dt), b = tpu_k_load_i64(from, dt), r;
        switch (fn) {
        case TPU_INDEX_SCATTER_ADD: r = tpu_k_u64_to_i64((uint64_t)a + (uint64_t)b); break;
        case TPU_INDEX_SCATTER_PROD: r = tpu_k_u64_to_i64((uint64_t)a * (uint64_t)b); break;
        case TPU_INDEX_SCATTER_AMAX: r = a < b ? b : a; break;
        default: r = a > b ? b : a; break;
        }
        tpu_k_store_i64(dst, dt, r);
    }
}

static tpu_status scatter_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *src = &op->in[0], *idx = &op->in[1];
    const int32_t dim = op->p.index.dim;
    const bool fill = op->fn == TPU_INDEX_SCATTER_FILL;
    const int64_t len = idx->sizes[dim], size = o->sizes[dim];
    int64_t line_sizes[TPU_MAX_DIMS];
    for (int32_t d = 0; d < idx->ndim; d++)
        line_sizes[d] = d == dim ? 1 : idx->sizes[d];
    const int64_t lines = len > 0 ? tpu_k_numel(idx) / len : 0;
    int64_t start, end;
    tpu_k_split(lines, ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    /* The walk's three offsets: out (dim taken from the index), the
     * source (absent for a fill: zero strides) and the index. */
    int64_t src_strides[TPU_MAX_DIMS] = {0};
    for (int32_t d = 0; !fill && d < src->ndim; d++)
        src_strides[d] = src->strides[d];
    const int64_t *strides[3] = {o->strides, src_strides, idx->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, idx->ndim, line_sizes, 3, strides, start);
    const size_t es = tpu_dtype_size(o->dtype);
    const bool float_out = tpu_dtype_is_float(o->dtype);
    char value[8] = {0};
    if (fill) { /* the value, converted to out's dtype once */
        if (float_out)
            tpu_k_store_f64(value, o->dtype, op->p.index.value.f);
        else
            tpu_k_store_i64(value, o->dtype, op->p.index.value.i);
    }
    for (int64_t l = start; l < end; l++, tpu_k_iter_next(&it)) {
        for (int64_t j = 0; j < len; j++) {
            int64_t k = tpu_k_load_index(tpu_k_ptr(idx, it.off[2] + j * idx->strides[dim]), idx->dtype);
            if (!index_in_range(op, k, size))
                return TPU_ERR_INDEX;
            char *dst = tpu_k_ptr(o, it.off[0] + k * o->strides[dim]);
            const char *from = fill ? value : tpu_k_ptr(src, it.off[1] + j * src->strides[dim]);
            if (op->fn == TPU_INDEX_SCATTER || fill)
                memcpy(dst, from, es);
            else
                combine(op->fn, o->dtype, dst, from);
        }
    }
    return TPU_OK;
}

/* SCATTER_ADD of f32 along dim 0 whose index is one value per row of the
 * source (index_add's index, expanded with stride 0 over the other dims),
 * out and source rows contiguous: row j of the source is added to row
 * index[j] of out, a share taking a range of the columns (the scatter's
 * lines) and the rows in order, so each element sums in the line walk's
 * order: the same bytes (an f32 add rounds as scatter_ref's f64 add
 * rounded to f32). The indices are all checked first; one out of range
 * writes nothing. False, having written nothing, for other records. */
bool tpu_k_scatter_add_rows(const tpu_op *op, int ith, int nth, tpu_status *st) {
    const tpu_tensor *o = &op->out, *src = &op->in[0], *idx = &op->in[1];
    if (op->fn != TPU_INDEX_SCATTER_ADD || op->p.index.dim != 0 || o->dtype != TPU_DTYPE_F32 ||
        src->dtype != TPU_DTYPE_F32 || idx->ndim < 1 || !tpu_k_is_aligned(o) ||
        !tpu_k_is_aligned(src))
        return false;
    int64_t cols = 1;
    for (int32_t d = idx->ndim - 1; d >= 1; d--) {
        if (idx->sizes[d] != 1 && idx->strides[d] != 0)
            return false;
        if ((o->sizes[d] != 1 && o->strides[d] != cols) ||
            (src->sizes[d] != 1 && src->strides[d] != cols) || idx->sizes[d] != o->sizes[d] ||
            idx->sizes[d] != src->sizes[d])
            return false;
        cols *= idx->sizes[d];
    }
    const int64_t len = idx->sizes[0], size = o->sizes[0];
    *st = TPU_OK;
    for (int64_t j = 0; j < len; j++)
        if (!index_in_range(op, tpu_k_load_index(tpu_k_ptr(idx, j * idx->strides[0]), idx->dtype),
                            size)) {
            *st = TPU_ERR_INDEX;
            return true;
        }
    int64_t c0, c1;
    tpu_k_split(cols, ith, nth, &c0, &c1);
    for (int64_t j = 0; j < len && c0 < c1; j++) {
        const int64_t k = tpu_k_load_index(tpu_k_ptr(idx, j * idx->strides[0]), idx->dtype);
        float *to = (float *)o->data + k * o->strides[0];
        const float *from = (const float *)src->data + j * src->strides[0];
        for (int64_t c = c0; c < c1; c++)
            to[c] += from[c];
    }
    return true;
}

/* The offset (in elements) that the indices at iterator offsets off[1..]
 * add to the indexed view; false (error set) for an index out of range. */
static bool advanced_offset(const tpu_op *op, const int64_t *off, int64_t *add) {
    *add = 0;
    for (int k = 0; k < op->p.index.n_idx; k++) {
        const tpu_tensor *t = &op->in[k + 1];
        int64_t v = tpu_k_load_index(tpu_k_ptr(t, off[k]), t->dtype);
        int64_t size = op->p.index.idx_sizes[k];
        /* Advanced indexing counts a negative index from the end. */
        if (v < -size || v >= size) {
            tpu_set_error(TPU_ERR_INDEX, "%s: index %lld is out of bounds for size %lld (index "
                          "tensor %d)", tpu_k_op_label(op), (long long)v, (long long)size, k);
            return false;
        }
        *add += (v < 0 ? v + size : v) * op->p.index.idx_strides[k];
    }
    return true;
}

static tpu_status advanced_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *src = &op->in[0];
    const bool put = op->fn == TPU_INDEX_ADVANCED_PUT;
    int64_t start = 0, end = tpu_k_numel(o);
    if (put) {
        if (ith != 0)
            return TPU_OK;
    } else {
        tpu_k_split(end, ith, nth, &start, &end);
    }
    if (start >= end)
        return TPU_OK;
    const int n = op->p.index.n_idx;
    const int64_t *strides[TPU_K_MAX_OPERANDS + 2];
    strides[0] = o->strides;
    strides[1] = src->strides;
    for (int k = 0; k < n; k++)
        strides[2 + k] = op->in[k + 1].strides;
    /* tpu_k_iter walks at most TPU_K_MAX_OPERANDS operands: out, src and
     * two indices; more indices are walked by a second iterator. */
    tpu_k_iter a, b;
    int na = n + 2 <= TPU_K_MAX_OPERANDS ? n + 2 : TPU_K_MAX_OPERANDS, nb = n + 2 - na;
    tpu_k_iter_init(&a, o->ndim, o->sizes, na, strides, start);
    memset(&b, 0, sizeof b); /* walked only when it has operands (n > 2) */
    if (nb > 0)
        tpu_k_iter_init(&b, o->ndim, o->sizes, nb, strides + na, start);
    const size_t es = tpu_dtype_size(o->dtype);
    const bool float_out = tpu_dtype_is_float(o->dtype), acc = put && op->p.index.accumulate;
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&a), nb > 0 ? tpu_k_iter_next(&b) : (void)0) {
        int64_t off[TPU_OP_MAX_INDICES];
        for (int k = 0; k < n; k++)
            off[k] = 2 + k < na ? a.off[2 + k] : b.off[2 + k - na];
        int64_t add;
        if (!advanced_offset(op, off, &add))
            return TPU_ERR_INDEX;
        if (!put) {
            memcpy(tpu_k_ptr(o, a.off[0]), tpu_k_ptr(src, a.off[1] + add), es);
            continue;
        }
        char *dst = tpu_k_ptr(o, a.off[0] + add);
        const char *v = tpu_k_ptr(src, a.off[1]);
        if (!acc)
            memcpy(dst, v, es);
        else if (float_out)
            tpu_k_store_f64(dst, o->dtype, tpu_k_load_f64(dst, o->dtype) + tpu_k_load_f64(v, o->dtype));
        else
            tpu_k_store_i64(dst, o->dtype,
                            tpu_k_u64_to_i64((uint64_t)tpu_k_load_i64(dst, o->dtype) +
                                             (uint64_t)tpu_k_load_i64(v, o->dtype)));
    }
    return TPU_OK;
}

static tpu_status nonzero_ref(const tpu_op *op, int ith) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    if (ith != 0)
        return TPU_OK;
    const int64_t n = tpu_k_numel(in), count = o->sizes[0];
    const int64_t *strides[1] = {in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, in->ndim, in->sizes, 1, strides, 0);
    int64_t row = 0;
    for (int64_t i = 0; i < n; i++, tpu_k_iter_next(&it)) {
        if (!tpu_k_load_bool(tpu_k_ptr(in, it.off[0]), in->dtype))
            continue;
        if (row == count)
            return tpu_set_error(TPU_ERR_INTERNAL, "%s: more nonzero elements than the %lld counted",
                                 tpu_k_op_label(op), (long long)count);
        for (int32_t d = 0; d < in->ndim; d++)
            tpu_k_store_i64(tpu_k_ptr(o, row * o->strides[0] + d * o->strides[1]), TPU_DTYPE_I64,
                            it.idx[d]);
        row++;
    }
    if (row != count)
        return tpu_set_error(TPU_ERR_INTERNAL, "%s: %lld nonzero elements, %lld counted",
                             tpu_k_op_label(op), (long long)row, (long long)count);
    return TPU_OK;
}

/* nonzero_ref for a row-major contiguous input of one-byte elements (bool,
 * uint8, int8: masks), run by share 0 alone like it, the coordinates of
 * the outer dims kept as a counter, not recomputed per element, and no
 * branch per element while the counted rows leave room; once all are
 * written the rest is checked to be zeros eight bytes at a time. The same
 * rows in the same order, the same errors. False, having written
 * nothing, for other inputs. */
bool tpu_k_nonzero_bytes(const tpu_op *op, int ith, tpu_status *st) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    if (tpu_dtype_size(in->dtype) != 1 || in->ndim < 1 || !tpu_k_is_row_major_from(in, 0) || !tpu_k_is_aligned(o))
        return false;
    *st = TPU_OK;
    if (ith != 0)
        return true;
    const int32_t nd = in->ndim;
    const int64_t inner = in->sizes[nd - 1], count = o->sizes[0];
    const int64_t outer = inner > 0 ? tpu_k_numel(in) / inner : 0;
    const int64_t rs = o->strides[0], cs = o->strides[1];
    const unsigned char *p = (const unsigned char *)in->data;
    int64_t *dst = (int64_t *)o->data, coord[TPU_MAX_DIMS] = {0}, row = 0;
    for (int64_t r = 0; r < outer; r++, p += inner) {
        int64_t j = 0;
        /* While there is room for as many rows as elements are next, every
         * element's coordinates go to the next row, which only a nonzero
         * one keeps (no branch to mispredict on mixed bytes). */
        for (int64_t len; (len = inner - j < count - row ? inner - j : count - row) > 0;)
            for (const int64_t stop = j + len; j < stop; j++) {
                int64_t *at = dst + row * rs;
                for (int32_t d = 0; d + 1 < nd; d++)
                    at[d * cs] = coord[d];
                at[(nd - 1) * cs] = j;
                row += p[j] != 0;
            }
        /* Every counted row is written: the rest must be zeros. */
        for (; j < inner; j++) {
            if (j % 8 == 0 && j + 8 <= inner) {
                uint64_t word;
                memcpy(&word, p + j, sizeof word);
                if (word == 0) {
                    j += 7;
                    continue;
                }
            }
            if (p[j] != 0) {
                *st = tpu_set_error(TPU_ERR_INTERNAL, "%s: more nonzero elements than the %lld counted",
                                    tpu_k_op_label(op), (long long)count);
                return true;
            }
        }
        for (int32_t d = nd - 2; d >= 0; d--) { /* the next outer coordinate */
            if (++coord[d] < in->sizes[d])
                break;
            coord[d] = 0;
        }
    }
    if (row != count)
        *st = tpu_set_error(TPU_ERR_INTERNAL, "%s: %lld nonzero elements, %lld counted",
                            tpu_k_op_label(op), (long long)row, (long long)count);
    return true;
}

tpu_status tpu_k_scatter_ref(const tpu_op *op, int ith, int nth) {
    switch (op->fn) {
    case TPU_INDEX_ADVANCED:
    case TPU_INDEX_ADVANCED_PUT: return advanced_ref(op, ith, nth);
    case TPU_INDEX_NONZERO: return nonzero_ref(op, ith);
    default: return scatter_ref(op, ith, nth);
    }
}
