/* Strided-view helpers shared by the kernels (see strided.h). */
#include "strided.h"

#include <stdlib.h>

void tpu_k_iter_init(tpu_k_iter *it, int32_t ndim, const int64_t *sizes, int32_t n_ops,
                     const int64_t *const *strides, int64_t start) {
    assert(ndim >= 0 && ndim <= TPU_MAX_DIMS);
    assert(n_ops >= 1 && n_ops <= TPU_K_MAX_OPERANDS);
    it->ndim = ndim;
    it->n_ops = n_ops;
    for (int32_t k = 0; k < n_ops; k++)
        it->off[k] = 0;
    /* Peel the row-major index into digits, innermost dim first. */
    int64_t rem = start;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        it->sizes[d] = sizes[d];
        int64_t i = sizes[d] > 0 ? rem % sizes[d] : 0;
        rem = sizes[d] > 0 ? rem / sizes[d] : 0;
        it->idx[d] = i;
        for (int32_t k = 0; k < n_ops; k++) {
            it->strides[k][d] = strides[k][d];
            it->off[k] += i * strides[k][d];
        }
    }
}

void tpu_k_iter_next(tpu_k_iter *it) {
    /* Odometer: bump the innermost digit; on overflow reset it (moving
     * the offsets back by (size - 1) strides, which stays inside the view)
     * and carry into the next dim out. */
    for (int32_t d = it->ndim - 1; d >= 0; d--) {
        if (it->idx[d] + 1 < it->sizes[d]) {
            it->idx[d]++;
            for (int32_t k = 0; k < it->n_ops; k++)
                it->off[k] += it->strides[k][d];
            return;
        }
        for (int32_t k = 0; k < it->n_ops; k++)
            it->off[k] -= it->idx[d] * it->strides[k][d];
        it->idx[d] = 0;
    }
}

int64_t tpu_k_iter_row_left(const tpu_k_iter *it) {
    if (it->ndim == 0)
        return 1;
    int32_t d = it->ndim - 1;
    return it->sizes[d] - it->idx[d];
}

void tpu_k_iter_advance_in_row(tpu_k_iter *it, int64_t n) {
    assert(n >= 1 && n <= tpu_k_iter_row_left(it));
    if (it->ndim > 0) {
        /* Move to the run's last element, then step past it (carrying). */
        int32_t d = it->ndim - 1;
        it->idx[d] += n - 1;
        for (int32_t k = 0; k < it->n_ops; k++)
            it->off[k] += (n - 1) * it->strides[k][d];
    }
    tpu_k_iter_next(it);
}

void tpu_k_shape_coalesce(tpu_k_shape *s, int32_t ndim, const int64_t *sizes, int32_t n_ops,
                          const int64_t *const *strides) {
    assert(ndim >= 0 && ndim <= TPU_MAX_DIMS);
    assert(n_ops >= 1 && n_ops <= TPU_K_MAX_OPERANDS);
    s->n_ops = n_ops;
    s->ndim = 0;
    for (int32_t d = 0; d < ndim; d++) {
        /* Size-1 dims add nothing to any offset; a zero size empties all. */
        if (sizes[d] == 1)
            continue;
        if (sizes[d] == 0) {
            s->ndim = 1;
            s->sizes[0] = 0;
            for (int32_t k = 0; k < n_ops; k++)
                s->strides[k][0] = 1;
            return;
        }
        /* Merge into the previous kept dim when every operand steps over
         * the pair as over one dim. */
        bool merge = s->ndim > 0;
        for (int32_t k = 0; k < n_ops && merge; k++) {
            int64_t span; /* overflow (unchecked records) simply blocks the merge */
            merge = !__builtin_mul_overflow(strides[k][d], sizes[d], &span) &&
                    s->strides[k][s->ndim - 1] == span;
        }
        if (merge) {
            s->sizes[s->ndim - 1] *= sizes[d];
            for (int32_t k = 0; k < n_ops; k++)
                s->strides[k][s->ndim - 1] = strides[k][d];
            continue;
        }
        s->sizes[s->ndim] = sizes[d];
        for (int32_t k = 0; k < n_ops; k++)
            s->strides[k][s->ndim] = strides[k][d];
        s->ndim++;
    }
}

int64_t tpu_k_numel(const tpu_tensor *t) {
    /* Checked records never saturate; the guards keep unchecked ones
     * (e.g. in tpu_op_max_threads) free of overflow. */
    int32_t ndim = t->ndim < 0 ? 0 : t->ndim > TPU_MAX_DIMS ? TPU_MAX_DIMS : t->ndim;
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; d++) {
        if (t->sizes[d] <= 0)
            return 0;
        if (__builtin_mul_overflow(n, t->sizes[d], &n))
            return INT64_MAX;
    }
    return n;
}

/* Orders dims by stride, for the density test. */
typedef struct {
    int64_t size, stride;
} dim_pair;

static int cmp_stride(const void *a, const void *b) {
    const dim_pair *x = a, *y = b;
    return (x->stride > y->stride) - (x->stride < y->stride);
}

bool tpu_k_is_row_major_from(const tpu_tensor *t, int32_t first) {
    int64_t expect = 1;
    for (int32_t d = t->ndim - 1; d >= first; d--) {
        if (t->sizes[d] != 1 && t->strides[d] != expect)
            return false;
        expect *= t->sizes[d];
    }
    return true;
}

bool tpu_k_is_dense(const tpu_tensor *t) {
    dim_pair dims[TPU_MAX_DIMS];
    int n = 0;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0)
            return true; /* no elements: trivially a flat (empty) array */
        if (t->sizes[d] > 1)
            dims[n++] = (dim_pair){t->sizes[d], t->strides[d]};
    }
    /* Smallest stride first: each must equal the product of the sizes of
     * the dims below it, which makes the offsets exactly [0, numel). */
    qsort(dims, (size_t)n, sizeof dims[0], cmp_stride);
    int64_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i].stride != expect)
            return false;
        expect *= dims[i].size;
    }
    return true;
}

bool tpu_k_same_layout(const tpu_tensor *t, const tpu_tensor *like) {
    if (t->ndim != like->ndim)
        return false;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->sizes[d] != like->sizes[d])
            return false;
        if (t->sizes[d] > 1 && t->strides[d] != like->strides[d])
            return false;
    }
    return true;
}

bool tpu_k_is_scalar_broadcast(const tpu_tensor *t) {
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] > 1 && t->strides[d] != 0)
            return false;
    return true;
}

bool tpu_k_flat_step(const tpu_tensor *t, const tpu_tensor *o, int64_t *step) {
    if (tpu_k_same_layout(t, o)) {
        *step = 1;
        return true;
    }
    if (tpu_k_is_scalar_broadcast(t)) {
        *step = 0;
        return true;
    }
    return false;
}

void tpu_k_split(int64_t n, int ith, int nth, int64_t *start, int64_t *end) {
    assert(nth >= 1 && ith >= 0 && ith < nth && n >= 0);
    /* The first n % nth shares get one extra item. q * ith <= n, so no
     * product overflows. */
    int64_t q = n / nth, r = n % nth;
    *start = q * ith + (ith < r ? ith : r);
    *end = *start + q + (ith < r ? 1 : 0);
}
