/* SCAN: running sums, products, extremes (with their positions) and
 * log-sum-exps along one dim.
 *
 * Work split: contiguous ranges of lines (the elements that differ only in
 * dim), each line scanned in order by one share, so results do not depend
 * on the thread count. The running value is f64 for float outs (PyTorch's
 * CPU scan accumulates float in double too) and wrapping int64 for integer
 * outs; it is stored, rounded to out's dtype, at every step. */
#include <math.h>

#include "kernels_internal.h"
#include "strided.h"

/* log(e^a + e^b) in f64 without overflow; -inf and -inf give -inf, and an
 * inf or NaN wins as it does in the sum. */
static double log_add_exp(double a, double b) {
    if (a != a || b != b)
        return NAN;
    double hi = a > b ? a : b, lo = a > b ? b : a;
    if (hi == -INFINITY || hi == INFINITY)
        return hi;
    return hi + log1p(exp(lo - hi));
}

/* Whether x takes the running extreme's place (cummax: x >= it, so the
 * latest of equal values wins; a NaN x always does, and once the extreme
 * is NaN only a NaN does), as PyTorch's CPU kernel decides. */
static bool extreme_takes(bool max, double x, double cur) {
    if (x != x)
        return true;
    if (cur != cur)
        return false;
    return max ? x >= cur : x <= cur;
}

static bool extreme_takes_i(bool max, int64_t x, int64_t cur) {
    return max ? x >= cur : x <= cur;
}

/* CUMMAX / CUMMIN of one line: values in out's dtype (in[0]'s), positions
 * in aux[0]. */
static void extreme_line(const tpu_op *op, const int64_t *off, int64_t len) {
    const tpu_tensor *o = &op->out, *in = &op->in[0], *ix = &op->aux[0];
    const int32_t dim = op->p.scan.dim;
    const bool max = op->fn == TPU_SCAN_CUMMAX, float_in = tpu_dtype_is_float(in->dtype);
    double cur_f = 0.0;
    int64_t cur_i = 0, at = 0;
    for (int64_t k = 0; k < len; k++) {
        const char *x = tpu_k_ptr(in, off[1] + k * in->strides[dim]);
        if (float_in) {
            double v = tpu_k_load_f64(x, in->dtype);
            if (k == 0 || extreme_takes(max, v, cur_f)) {
                cur_f = v;
                at = k;
            }
            tpu_k_store_f64(tpu_k_ptr(o, off[0] + k * o->strides[dim]), o->dtype, cur_f);
        } else {
            int64_t v = tpu_k_load_i64(x, in->dtype);
            if (k == 0 || extreme_takes_i(max, v, cur_i)) {
                cur_i = v;
                at = k;
            }
            tpu_k_store_i64(tpu_k_ptr(o, off[0] + k * o->strides[dim]), o->dtype, cur_i);
        }
        tpu_k_store_i64(tpu_k_ptr(ix, off[2] + k * ix->strides[dim]), TPU_DTYPE_I64, at);
    }
}

/* The lines of this share; `typed`: cumsum of aligned f32 into f32 and of
 * int64 into int64 in loops with the dtypes fixed (the fast path: the
 * same chain, the same rounding, no dtype switch per element). */
static tpu_status scan_lines(const tpu_op *op, int ith, int nth, bool typed) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    const int32_t dim = op->p.scan.dim;
    const int64_t len = o->sizes[dim];
    int64_t line_sizes[TPU_MAX_DIMS];
    for (int32_t d = 0; d < o->ndim; d++)
        line_sizes[d] = d == dim ? 1 : o->sizes[d];
    int64_t lines = len > 0 ? tpu_k_numel(o) / len : 0;
    int64_t start, end;
    tpu_k_split(lines, ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const bool extreme = op->fn == TPU_SCAN_CUMMAX || op->fn == TPU_SCAN_CUMMIN;
    const int64_t *strides[3] = {o->strides, in->strides, extreme ? op->aux[0].strides : o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, line_sizes, 3, strides, start);
    const bool float_out = tpu_dtype_is_float(o->dtype), sum = op->fn == TPU_SCAN_CUMSUM;
    const bool lse = op->fn == TPU_SCAN_LOGCUMSUMEXP;
    const int64_t so = o->strides[dim], si = in->strides[dim];
    for (int64_t l = start; l < end; l++, tpu_k_iter_next(&it)) {
        if (extreme) {
            extreme_line(op, it.off, len);
            continue;
        }
        if (lse) {
            double acc = -INFINITY;
            for (int64_t k = 0; k < len; k++) {
                acc = log_add_exp(acc, tpu_k_load_f64(tpu_k_ptr(in, it.off[1] + k * si), in->dtype));
                tpu_k_store_f64(tpu_k_ptr(o, it.off[0] + k * so), o->dtype, acc);
            }
            continue;
        }
        if (typed && sum && o->dtype == TPU_DTYPE_F32 && in->dtype == TPU_DTYPE_F32) {
            /* f32 widens exactly; (float) is the store's rounding. */
            const float *x = (const float *)in->data + it.off[1];
            float *y = (float *)o->data + it.off[0];
            double acc = 0.0;
            for (int64_t k = 0; k < len; k++) {
                acc += x[k * si];
                y[k * so] = (float)acc;
            }
            continue;
        }
        if (typed && sum && o->dtype == TPU_DTYPE_I64 && in->dtype == TPU_DTYPE_I64) {
            const int64_t *x = (const int64_t *)in->data + it.off[1];
            int64_t *y = (int64_t *)o->data + it.off[0];
            uint64_t acc = 0;
            for (int64_t k = 0; k < len; k++) {
                acc += (uint64_t)x[k * si];
                y[k * so] = tpu_k_u64_to_i64(acc);
            }
            continue;
        }
        double acc_f = sum ? 0.0 : 1.0;
        uint64_t acc_i = sum ? 0 : 1; /* unsigned: integer scans wrap */
        for (int64_t k = 0; k < len; k++) {
            const char *x = tpu_k_ptr(in, it.off[1] + k * si);
            char *y = tpu_k_ptr(o, it.off[0] + k * so);
            if (float_out) {
                double v = tpu_k_load_f64(x, in->dtype);
                acc_f = sum ? acc_f + v : acc_f * v;
                tpu_k_store_f64(y, o->dtype, acc_f);
            } else {
                uint64_t v = (uint64_t)tpu_k_load_int(x, in->dtype, o->dtype);
                acc_i = sum ? acc_i + v : acc_i * v;
                tpu_k_store_i64(y, o->dtype, tpu_k_u64_to_i64(acc_i));
            }
        }
    }
    return TPU_OK;
}

tpu_status tpu_k_scan_ref(const tpu_op *op, int ith, int nth) {
    return scan_lines(op, ith, nth, false);
}

tpu_status tpu_k_scan_fast(const tpu_op *op, int ith, int nth) {
    return scan_lines(op, ith, nth, tpu_k_is_aligned(&op->out) && tpu_k_is_aligned(&op->in[0]));
}
