/* NORM: layer normalization over the rows of x [M, N], and its backward.
 *
 * Every statistic, sum and result is computed in f64 from the stored
 * values (x, weight, and backward the given mean and rstd, so that a
 * backward from rounded statistics matches PyTorch's, which uses the same
 * rounded ones) and rounded once on store. The mean and the biased
 * variance are two passes over the row (no Welford update, whose rounding
 * would depend on the order of a parallel split).
 *
 * Work split. Forward, and a backward that wants only dx: contiguous
 * ranges of rows, one share per row. A backward that wants dweight or
 * dbias also needs column sums over all rows; it runs in two phases:
 * phase 0 takes fixed blocks of rows (block_rows(M) depends on M alone),
 * computes their dx rows and each block's partial column sums into
 * op->scratch; phase 1 splits the columns and adds every column's block
 * partials in block order. So the sums, like everything else, do not
 * depend on the thread count.
 *
 * Fast path (f32 rows stored contiguously, 1-d weight and bias contiguous
 * or absent): the same formulas on vectors of f32 loads (norm_rows.c, the
 * same bits at every instruction-set level), each row sum split over 16
 * f64 lanes added in a fixed order, which the reference adds in one:
 * results differ from it only in the last bits of an f64 sum. */
#include <math.h>

#include "kernels_internal.h"
#include "norm_rows.h"
#include "strided.h"

/* Element (i, j) of a 2-d tensor, and element i of a 1-d one, as f64;
 * an absent 1-d tensor reads as `dflt`. */
static inline double at2(const tpu_tensor *t, int64_t i, int64_t j) {
    return tpu_k_load_f64(tpu_k_ptr(t, i * t->strides[0] + j * t->strides[1]), t->dtype);
}

static inline double at1(const tpu_tensor *t, int64_t i, double dflt) {
    if (tpu_tensor_is_absent(t))
        return dflt;
    return tpu_k_load_f64(tpu_k_ptr(t, i * t->strides[0]), t->dtype);
}

static inline void put2(const tpu_tensor *t, int64_t i, int64_t j, double v) {
    tpu_k_store_f64(tpu_k_ptr(t, i * t->strides[0] + j * t->strides[1]), t->dtype, v);
}

static inline void put1(const tpu_tensor *t, int64_t i, double v) {
    tpu_k_store_f64(tpu_k_ptr(t, i * t->strides[0]), t->dtype, v);
}

static void forward_row(const tpu_op *op, int64_t r) {
    const tpu_tensor *x = &op->in[0], *w = &op->in[1], *b = &op->in[2], *y = &op->out;
    const int64_t n = x->sizes[1];
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++)
        sum += at2(x, r, j);
    /* An empty row has mean 0 and variance 0 (PyTorch's CPU kernel too). */
    double mean = n > 0 ? sum / (double)n : 0.0;
    double sq = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double d = at2(x, r, j) - mean;
        sq += d * d;
    }
    double var = n > 0 ? sq / (double)n : 0.0;
    double rstd = 1.0 / sqrt(var + op->p.norm.eps);
    for (int64_t j = 0; j < n; j++)
        put2(y, r, j, (at2(x, r, j) - mean) * rstd * at1(w, j, 1.0) + at1(b, j, 0.0));
    put1(&op->aux[0], r, mean);
    put1(&op->aux[1], r, rstd);
}

/* dx of row r; with `partial` (2 x N f64, dweight then dbias, each column
 * summed over the block so far) also adds the row's column terms. */
static void backward_row(const tpu_op *op, int64_t r, double *partial) {
    const tpu_tensor *g = &op->in[0], *x = &op->in[1], *w = &op->in[4], *dx = &op->out;
    const int64_t n = x->sizes[1];
    const double mean = at1(&op->in[2], r, 0.0), rstd = at1(&op->in[3], r, 0.0);
    double s1 = 0.0, s2 = 0.0; /* sums of g w and of g w xhat */
    for (int64_t j = 0; j < n; j++) {
        double gj = at2(g, r, j), xhat = (at2(x, r, j) - mean) * rstd;
        double gw = gj * at1(w, j, 1.0);
        s1 += gw;
        s2 += gw * xhat;
        if (partial) {
            partial[j] += gj * xhat;
            partial[n + j] += gj;
        }
    }
    if (tpu_tensor_is_absent(dx))
        return; /* dx not wanted: only the column terms */
    const double inv_n = n > 0 ? 1.0 / (double)n : 0.0;
    for (int64_t j = 0; j < n; j++) {
        double xhat = (at2(x, r, j) - mean) * rstd;
        double gw = at2(g, r, j) * at1(w, j, 1.0);
        put2(dx, r, j, rstd * (gw - s1 * inv_n - xhat * s2 * inv_n));
    }
}

/* ---------------------------------------------------------- fast path */

static bool f32_rows(const tpu_tensor *t) {
    return t->dtype == TPU_DTYPE_F32 && t->ndim == 2 && (t->sizes[1] <= 1 || t->strides[1] == 1);
}

static bool f32_vec_or_absent(const tpu_tensor *t) {
    return tpu_tensor_is_absent(t) ||
           (t->dtype == TPU_DTYPE_F32 && t->ndim == 1 && (t->sizes[0] <= 1 || t->strides[0] == 1));
}

/* Whether the record's tensors suit the fast rows: x, out and the other
 * row tensors f32 with contiguous rows, weight (and bias) f32 contiguous
 * or absent. The statistics (mean, rstd) go through the generic access. */
static bool fast_ok(const tpu_op *op) {
    if (op->fn == TPU_NORM_LAYER_FORWARD)
        return f32_rows(&op->in[0]) && f32_rows(&op->out) && f32_vec_or_absent(&op->in[1]) &&
               f32_vec_or_absent(&op->in[2]);
    return f32_rows(&op->in[0]) && f32_rows(&op->in[1]) && f32_vec_or_absent(&op->in[4]) &&
           (tpu_tensor_is_absent(&op->out) || f32_rows(&op->out));
}

static const float *row_f32(const tpu_tensor *t, int64_t r) {
    return (const float *)t->data + r * t->strides[0];
}

static const float *vec_f32(const tpu_tensor *t) {
    return tpu_tensor_is_absent(t) ? NULL : (const float *)t->data;
}

static void forward_row_fast(const tpu_op *op, int64_t r) {
    double mean, rstd;
    tpu_k_norm_forward_row_f32((float *)row_f32(&op->out, r), row_f32(&op->in[0], r), vec_f32(&op->in[1]),
                               vec_f32(&op->in[2]), op->in[0].sizes[1], op->p.norm.eps, &mean, &rstd);
    put1(&op->aux[0], r, mean);
    put1(&op->aux[1], r, rstd);
}

static void backward_row_fast(const tpu_op *op, int64_t r, double *partial) {
    float *dx = tpu_tensor_is_absent(&op->out) ? NULL : (float *)row_f32(&op->out, r);
    tpu_k_norm_backward_row_f32(dx, row_f32(&op->in[0], r), row_f32(&op->in[1], r), vec_f32(&op->in[4]),
                                op->in[1].sizes[1], at1(&op->in[2], r, 0.0), at1(&op->in[3], r, 0.0),
                                partial);
}

/* The row functions the record runs with: the fast ones where they apply
 * and reference mode is off. */
typedef void (*forward_fn)(const tpu_op *, int64_t);
typedef void (*backward_fn)(const tpu_op *, int64_t, double *);

static bool use_fast(const tpu_op *op) {
    return !tpu_kernels_get_reference() && fast_ok(op);
}

static bool wants_param_grads(const tpu_op *op) {
    return op->fn == TPU_NORM_LAYER_BACKWARD &&
           (!tpu_tensor_is_absent(&op->aux[0]) || !tpu_tensor_is_absent(&op->aux[1]));
}

/* Rows per block of a two-phase backward: at least 32, and at most 64
 * blocks, so that phase 1 adds few partials. Depends on M alone. */
static int64_t block_rows(int64_t m) {
    int64_t by_count = (m + 63) / 64;
    return by_count > 32 ? by_count : 32;
}

static int64_t block_count(const tpu_op *op) {
    int64_t m = op->in[1].sizes[0];
    return (m + block_rows(m) - 1) / block_rows(m);
}

static tpu_status run_rows(const tpu_op *op, int ith, int nth, forward_fn fwd, backward_fn bwd) {
    const tpu_tensor *x = &op->in[op->fn == TPU_NORM_LAYER_FORWARD ? 0 : 1];
    /* Rows are independent: claimed in chunks (tpu_k_parts). */
    tpu_k_parts parts;
    tpu_k_parts_init(&parts, x->sizes[0], 1, ith, nth);
    int64_t start, end;
    while (tpu_k_parts_next(&parts, &start, &end))
        for (int64_t r = start; r < end; r++) {
            if (op->fn == TPU_NORM_LAYER_FORWARD)
                fwd(op, r);
            else
                bwd(op, r, NULL);
        }
    return TPU_OK;
}

tpu_status tpu_k_norm_ref(const tpu_op *op, int ith, int nth) {
    return run_rows(op, ith, nth, forward_row, backward_row);
}

tpu_status tpu_k_norm_fast(const tpu_op *op, int ith, int nth) {
    if (!fast_ok(op))
        return tpu_k_norm_ref(op, ith, nth);
    return run_rows(op, ith, nth, forward_row_fast, backward_row_fast);
}

int tpu_k_norm_phases(const tpu_op *op) {
    return wants_param_grads(op) ? 2 : 1;
}

int64_t tpu_k_norm_scratch_bytes(const tpu_op *op) {
    if (!wants_param_grads(op) || op->in[1].ndim != 2)
        return 0;
    return block_count(op) * 2 * op->in[1].sizes[1] * (int64_t)sizeof(double);
}

tpu_status tpu_k_norm_run_phase(const tpu_op *op, int phase, int ith, int nth) {
    const int64_t m = op->in[1].sizes[0], n = op->in[1].sizes[1];
    const int64_t blocks = block_count(op), rows = block_rows(m);
    double *partials = op->scratch; /* [block][2][N] */
    backward_fn bwd = use_fast(op) ? backward_row_fast : backward_row;
    int64_t start, end;
    if (phase == 0) {
        tpu_k_split(blocks, ith, nth, &start, &end);
        for (int64_t blk = start; blk < end; blk++) {
            double *part = partials + blk * 2 * n;
            for (int64_t j = 0; j < 2 * n; j++)
                part[j] = 0.0;
            int64_t r1 = (blk + 1) * rows < m ? (blk + 1) * rows : m;
            for (int64_t r = blk * rows; r < r1; r++)
                bwd(op, r, part);
        }
        return TPU_OK;
    }
    tpu_k_split(n, ith, nth, &start, &end);
    for (int64_t j = start; j < end; j++) {
        double dw = 0.0, db = 0.0;
        for (int64_t blk = 0; blk < blocks; blk++) {
            dw += partials[blk * 2 * n + j];
            db += partials[blk * 2 * n + n + j];
        }
        if (!tpu_tensor_is_absent(&op->aux[0]))
            put1(&op->aux[0], j, dw);
        if (!tpu_tensor_is_absent(&op->aux[1]))
            put1(&op->aux[1], j, db);
    }
    return TPU_OK;
}
