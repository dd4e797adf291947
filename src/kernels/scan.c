/* SCAN: running sums and products along one dim.
 *
 * Work split: contiguous ranges of lines (the elements that differ only in
 * dim), each line scanned in order by one share, so results do not depend
 * on the thread count. The running value is f64 for float outs (PyTorch's
 * CPU scan accumulates float in double too) and wrapping int64 for integer
 * outs; it is stored, rounded to out's dtype, at every step. */
#include "kernels_internal.h"
#include "strided.h"

tpu_status tpu_k_scan_ref(const tpu_op *op, int ith, int nth) {
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
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, line_sizes, 2, strides, start);
    const bool float_out = tpu_dtype_is_float(o->dtype), sum = op->fn == TPU_SCAN_CUMSUM;
    const int64_t so = o->strides[dim], si = in->strides[dim];
    for (int64_t l = start; l < end; l++, tpu_k_iter_next(&it)) {
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
