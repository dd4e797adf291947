/* LOSS: negative log likelihood and its backward.
 *
 * One share does the whole op (the family's thread policy is one thread):
 * an NLL touches one element per sample, so even large batches are cheap,
 * and one share keeps the sums in sample order with nothing to combine.
 * Sums are f64; each result is rounded once. */
#include <math.h>
#include <string.h>

#include "kernels_internal.h"
#include "strided.h"

/* Sample i's class scores are row i of x ([N, C]) or x itself ([C]). */
static inline const char *score_ptr(const tpu_tensor *x, int64_t i, int64_t c) {
    if (x->ndim == 1)
        return tpu_k_ptr(x, c * x->strides[0]);
    return tpu_k_ptr(x, i * x->strides[0] + c * x->strides[1]);
}

/* Element i of the per-sample tensor t ([N], or 0-d for one sample). */
static inline char *sample_ptr(const tpu_tensor *t, int64_t i) {
    return tpu_k_ptr(t, t->ndim == 0 ? 0 : i * t->strides[0]);
}

/* Sample i's target and its class weight; false for an ignored sample,
 * TPU_ERR_INDEX in *st for a target outside [0, C). */
static bool sample_target(const tpu_op *op, const tpu_tensor *t, int64_t i, int64_t c,
                          int64_t *target, double *weight, tpu_status *st) {
    int64_t k = tpu_k_load_index(sample_ptr(t, i), t->dtype);
    *st = TPU_OK;
    if (k == op->p.loss.ignore_index)
        return false;
    if (k < 0 || k >= c) {
        *st = tpu_set_error(TPU_ERR_INDEX, "%s: target %lld is out of bounds for %lld classes",
                            tpu_k_op_label(op), (long long)k, (long long)c);
        return false;
    }
    const tpu_tensor *w = &op->in[2];
    *target = k;
    *weight = tpu_tensor_is_absent(w) ? 1.0
                                      : tpu_k_load_f64(tpu_k_ptr(w, k * w->strides[0]), w->dtype);
    return true;
}

static tpu_status nll_forward(const tpu_op *op) {
    const tpu_tensor *x = &op->in[0], *t = &op->in[1], *o = &op->out;
    const bool batched = x->ndim == 2;
    const int64_t n = batched ? x->sizes[0] : 1, c = x->sizes[batched ? 1 : 0];
    const tpu_loss_reduction red = op->p.loss.reduction;
    double sum = 0.0, total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = 0;
        double w = 0.0, v = 0.0;
        tpu_status st;
        if (sample_target(op, t, i, c, &k, &w, &st))
            v = -w * tpu_k_load_f64(score_ptr(x, i, k), x->dtype);
        else if (st != TPU_OK)
            return st;
        else
            w = 0.0;
        if (red == TPU_LOSS_REDUCE_NONE)
            tpu_k_store_f64(sample_ptr(o, i), o->dtype, v);
        sum += v;
        total += w;
    }
    if (red == TPU_LOSS_REDUCE_SUM)
        tpu_k_store_f64(o->data, o->dtype, sum);
    else if (red == TPU_LOSS_REDUCE_MEAN)
        tpu_k_store_f64(o->data, o->dtype, sum / total); /* 0 / 0 is NaN, as on the CPU */
    tpu_k_store_f64(op->aux[0].data, op->aux[0].dtype, total);
    return TPU_OK;
}

static tpu_status nll_backward(const tpu_op *op) {
    const tpu_tensor *g = &op->in[0], *t = &op->in[1], *dx = &op->out;
    const bool batched = dx->ndim == 2;
    const int64_t n = batched ? dx->sizes[0] : 1, c = dx->sizes[batched ? 1 : 0];
    const tpu_loss_reduction red = op->p.loss.reduction;
    /* Every float dtype's +0.0 is all zero bytes: rows with unit class
     * stride are cleared by memset (a [N, C] gradient over a vocabulary is
     * hundreds of MB), the rest element by element. */
    const int32_t cdim = batched ? 1 : 0;
    const size_t esize = tpu_dtype_size(dx->dtype);
    for (int64_t i = 0; i < n; i++) {
        if (c <= 1 || dx->strides[cdim] == 1) {
            memset((char *)score_ptr(dx, i, 0), 0, (size_t)c * esize);
            continue;
        }
        for (int64_t k = 0; k < c; k++)
            tpu_k_store_f64((char *)score_ptr(dx, i, k), dx->dtype, 0.0);
    }
    double total = tpu_k_load_f64(op->in[3].data, op->in[3].dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = 0;
        double w = 0.0;
        tpu_status st;
        if (!sample_target(op, t, i, c, &k, &w, &st)) {
            if (st != TPU_OK)
                return st;
            continue;
        }
        double gi = tpu_k_load_f64(red == TPU_LOSS_REDUCE_NONE ? sample_ptr(g, i) : g->data,
                                   g->dtype);
        double v = -w * gi;
        if (red == TPU_LOSS_REDUCE_MEAN)
            v /= total;
        tpu_k_store_f64((char *)score_ptr(dx, i, k), dx->dtype, v);
    }
    return TPU_OK;
}

tpu_status tpu_k_loss_ref(const tpu_op *op, int ith, int nth) {
    (void)nth;
    if (ith != 0)
        return TPU_OK;
    return op->fn == TPU_LOSS_NLL_FORWARD ? nll_forward(op) : nll_backward(op);
}
