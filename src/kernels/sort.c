/* SORT: a stable sort of every line along one dim, with positions.
 *
 * Each line is copied into scratch as (key, position) pairs and sorted by a
 * bottom-up merge sort (stable, n log n, no recursion), then written out:
 * the whole line for SORT, its first k entries for TOPK. Keys are f64 for
 * float dtypes (exact for every one) and int64 for integers and bool, so
 * comparisons are exact. NaN sorts above every number.
 *
 * The fast kernel takes TOPK with k <= TOPK_SELECT_MAX by selection
 * instead: one pass over each line keeps its k first entries in sort
 * order (the same pairs, as the same comparisons decide them), in
 * O(len) for most inputs where the sort is O(len log len); the rest is
 * the sort.
 *
 * Work split: contiguous ranges of lines, each sorted by one share in its
 * own part of the scratch (two pair buffers per line, laid out by line
 * index), so results do not depend on the thread count. */
#include <math.h>

#include "kernels_internal.h"
#include "strided.h"

typedef struct {
    union {
        double f;
        int64_t i;
    } key;
    int64_t pos;
} sort_pair;

/* Whether a sorts strictly before b (ascending, NaN last). Equal keys are
 * never "before", which keeps the merge stable. */
static inline bool before(const sort_pair *a, const sort_pair *b, bool is_float, bool descending) {
    if (is_float) {
        double x = a->key.f, y = b->key.f;
        if (isnan(x) || isnan(y))
            return descending ? isnan(x) && !isnan(y) : !isnan(x) && isnan(y);
        return descending ? x > y : x < y;
    }
    return descending ? a->key.i > b->key.i : a->key.i < b->key.i;
}

/* Sorts n pairs of `a` using `tmp` (n pairs); returns the buffer that
 * holds the result (a or tmp). */
static sort_pair *merge_sort(sort_pair *a, sort_pair *tmp, int64_t n, bool is_float,
                             bool descending) {
    sort_pair *src = a, *dst = tmp;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = before(&src[j], &src[i], is_float, descending) ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        sort_pair *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* The line length being sorted (in[0]'s size along dim). */
static int64_t line_len(const tpu_op *op) {
    return op->in[0].sizes[op->p.sort.dim];
}

int64_t tpu_k_sort_scratch_bytes(const tpu_op *op) {
    if (op->fn == TPU_SORT_SEARCHSORTED)
        return 0;
    /* Two pair buffers per line: every input element, twice. */
    return 2 * tpu_k_numel(&op->in[0]) * (int64_t)sizeof(sort_pair);
}

/* SEARCHSORTED: a binary search of each value in its row of boundaries.
 * Split over out's elements (each independent). The comparisons are
 * PyTorch's, written so that NaN sorts last: a boundary is below a value
 * when !(b >= v) (left) or !(b > v) (right). */
static tpu_status searchsorted_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *bd = &op->in[0], *v = &op->in[1], *o = &op->out;
    const int32_t last = o->ndim - 1;
    const int64_t m = bd->sizes[last], bstep = bd->strides[last];
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    /* The row of boundaries does not move along the values' last dim. */
    int64_t bd_strides[TPU_MAX_DIMS];
    for (int32_t d = 0; d < o->ndim; d++)
        bd_strides[d] = d == last ? 0 : bd->strides[d];
    const int64_t *strides[3] = {o->strides, v->strides, bd_strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 3, strides, start);
    const bool right = op->p.sort.right, fl = tpu_dtype_is_float(v->dtype);
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        const char *row = tpu_k_ptr(bd, it.off[2]);
        const size_t es = tpu_dtype_size(bd->dtype);
        int64_t lo = 0, hi = m;
        if (fl) {
            const double x = tpu_k_load_f64(tpu_k_ptr(v, it.off[1]), v->dtype);
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                const double b = tpu_k_load_f64(row + mid * bstep * (int64_t)es, bd->dtype);
                if (right ? !(b > x) : !(b >= x))
                    lo = mid + 1;
                else
                    hi = mid;
            }
        } else {
            const int64_t x = tpu_k_load_i64(tpu_k_ptr(v, it.off[1]), v->dtype);
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                const int64_t b = tpu_k_load_i64(row + mid * bstep * (int64_t)es, bd->dtype);
                if (right ? b <= x : b < x)
                    lo = mid + 1;
                else
                    hi = mid;
            }
        }
        tpu_k_store_i64(tpu_k_ptr(o, it.off[0]), o->dtype, lo);
    }
    return TPU_OK;
}

/* This share's lines of a SORT or TOPK record: [*start, *end) of the
 * lines along p.sort.dim, with *it at the first (offsets of in, out and
 * aux[0]). False when the share has none. */
static bool share_lines(const tpu_op *op, int ith, int nth, tpu_k_iter *it, int64_t *start,
                        int64_t *end) {
    const tpu_tensor *in = &op->in[0];
    const int32_t dim = op->p.sort.dim;
    const int64_t len = line_len(op);
    int64_t line_sizes[TPU_MAX_DIMS];
    for (int32_t d = 0; d < in->ndim; d++)
        line_sizes[d] = d == dim ? 1 : in->sizes[d];
    tpu_k_split(len > 0 ? tpu_k_numel(in) / len : 0, ith, nth, start, end);
    if (*start >= *end)
        return false;
    const int64_t *strides[3] = {in->strides, op->out.strides, op->aux[0].strides};
    tpu_k_iter_init(it, in->ndim, line_sizes, 3, strides, *start);
    return true;
}

/* Element j of the line at in offset off, as a (key, position) pair. */
static inline sort_pair line_pair(const tpu_tensor *in, int32_t dim, int64_t off, int64_t j,
                                  bool is_float) {
    const char *x = tpu_k_ptr(in, off + j * in->strides[dim]);
    sort_pair p;
    if (is_float)
        p.key.f = tpu_k_load_f64(x, in->dtype);
    else
        p.key.i = tpu_k_load_i64(x, in->dtype);
    p.pos = j;
    return p;
}

/* Writes the first n pairs to the line's out values and aux[0] positions. */
static void store_pairs(const tpu_op *op, const tpu_k_iter *it, const sort_pair *pairs, int64_t n,
                        bool is_float) {
    const tpu_tensor *o = &op->out, *ix = &op->aux[0];
    const int32_t dim = op->p.sort.dim;
    for (int64_t j = 0; j < n; j++) {
        char *y = tpu_k_ptr(o, it->off[1] + j * o->strides[dim]);
        if (is_float)
            tpu_k_store_f64(y, o->dtype, pairs[j].key.f);
        else
            tpu_k_store_i64(y, o->dtype, pairs[j].key.i);
        tpu_k_store_i64(tpu_k_ptr(ix, it->off[2] + j * ix->strides[dim]), TPU_DTYPE_I64, pairs[j].pos);
    }
}

tpu_status tpu_k_sort_ref(const tpu_op *op, int ith, int nth) {
    if (op->fn == TPU_SORT_SEARCHSORTED)
        return searchsorted_ref(op, ith, nth);
    const tpu_tensor *in = &op->in[0];
    const int32_t dim = op->p.sort.dim;
    const int64_t len = line_len(op), k_out = op->out.sizes[dim];
    tpu_k_iter it;
    int64_t start, end;
    if (!share_lines(op, ith, nth, &it, &start, &end))
        return TPU_OK;
    const bool is_float = tpu_dtype_is_float(in->dtype), desc = op->p.sort.descending;
    sort_pair *scratch = op->scratch;
    for (int64_t l = start; l < end; l++, tpu_k_iter_next(&it)) {
        sort_pair *a = scratch + 2 * l * len, *tmp = a + len;
        for (int64_t j = 0; j < len; j++)
            a[j] = line_pair(in, dim, it.off[0], j, is_float);
        store_pairs(op, &it, merge_sort(a, tmp, len, is_float, desc), k_out, is_float);
    }
    return TPU_OK;
}

/* TOPK by selection: for each line, buf holds the k first pairs of the
 * sorted line seen so far, in sort order. A pair enters only if it sorts
 * strictly before the last one held (which it then displaces), and goes
 * after every held pair it does not sort strictly before: equal keys keep
 * their scan order, as the stable sort keeps them. So buf ends as the
 * sort's first k. Few pairs enter for most inputs (about k ln(len/k) for
 * random ones); at worst (a line in reverse order) every pair moves up to
 * k held ones. */
enum { TOPK_SELECT_MAX = 64 };

static tpu_status topk_select(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *in = &op->in[0];
    const int32_t dim = op->p.sort.dim;
    const int64_t len = line_len(op), k = op->out.sizes[dim];
    tpu_k_iter it;
    int64_t start, end;
    if (k == 0 || !share_lines(op, ith, nth, &it, &start, &end))
        return TPU_OK;
    const bool is_float = tpu_dtype_is_float(in->dtype), desc = op->p.sort.descending;
    sort_pair buf[TOPK_SELECT_MAX];
    for (int64_t l = start; l < end; l++, tpu_k_iter_next(&it)) {
        int64_t have = 0;
        for (int64_t j = 0; j < len; j++) {
            const sort_pair p = line_pair(in, dim, it.off[0], j, is_float);
            if (have == k) {
                if (!before(&p, &buf[k - 1], is_float, desc))
                    continue;
                have--;
            }
            int64_t at = have;
            for (; at > 0 && before(&p, &buf[at - 1], is_float, desc); at--)
                buf[at] = buf[at - 1];
            buf[at] = p;
            have++;
        }
        store_pairs(op, &it, buf, k, is_float);
    }
    return TPU_OK;
}

tpu_status tpu_k_sort_fast(const tpu_op *op, int ith, int nth) {
    if (op->fn == TPU_SORT_TOPK && op->out.sizes[op->p.sort.dim] <= TOPK_SELECT_MAX)
        return topk_select(op, ith, nth);
    return tpu_k_sort_ref(op, ith, nth);
}
