/* WINDOW: sliding 2-d windows over [N, C, H, W] images. IM2COL lays every
 * window out as a row of columns (a convolution then is one matrix
 * product); COL2IM is its adjoint (a convolution's input gradient),
 * written as a gather: each image element sums the column entries that
 * read it, in a fixed (i, j) order, so no two shares write one element and
 * the sums do not depend on the thread count; MAX_POOL takes each window's
 * largest value and its position.
 *
 * Work split: contiguous ranges of out's row-major elements. */
#include <math.h>
#include <string.h>

#include "kernels_internal.h"
#include "strided.h"

typedef struct {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} window_geom;

static window_geom geom(const tpu_op *op) {
    window_geom g = {op->p.window.kh, op->p.window.kw, op->p.window.sh, op->p.window.sw,
                     op->p.window.ph, op->p.window.pw, op->p.window.dh, op->p.window.dw};
    return g;
}

static inline int64_t off4(const tpu_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + d * t->strides[3];
}

static tpu_status im2col(const tpu_op *op, int64_t start, int64_t end) {
    const tpu_tensor *x = &op->in[0], *o = &op->out;
    const window_geom g = geom(op);
    const int64_t H = x->sizes[2], W = x->sizes[3];
    const size_t es = tpu_dtype_size(o->dtype);
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    for (int64_t e = start; e < end; e++, tpu_k_iter_next(&it)) {
        /* it.idx: n, oh, ow, c, i, j */
        const int64_t *ix = it.idx;
        int64_t h = ix[1] * g.sh - g.ph + ix[4] * g.dh, w = ix[2] * g.sw - g.pw + ix[5] * g.dw;
        char *dst = tpu_k_ptr(o, it.off[0]);
        if (h < 0 || h >= H || w < 0 || w >= W)
            memset(dst, 0, es); /* padding: 0 in every dtype */
        else
            memcpy(dst, tpu_k_ptr(x, off4(x, ix[0], ix[3], h, w)), es);
    }
    return TPU_OK;
}

static tpu_status col2im(const tpu_op *op, int64_t start, int64_t end) {
    const tpu_tensor *cols = &op->in[0], *o = &op->out;
    const window_geom g = geom(op);
    const int64_t OH = cols->sizes[1], OW = cols->sizes[2];
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    for (int64_t e = start; e < end; e++, tpu_k_iter_next(&it)) {
        const int64_t n = it.idx[0], c = it.idx[1], h = it.idx[2], w = it.idx[3];
        double sum = 0.0;
        for (int64_t i = 0; i < g.kh; i++) {
            /* The window row oh that reads row h at kernel row i. */
            int64_t t = h + g.ph - i * g.dh;
            if (t < 0 || t % g.sh != 0 || t / g.sh >= OH)
                continue;
            int64_t oh = t / g.sh;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t u = w + g.pw - j * g.dw;
                if (u < 0 || u % g.sw != 0 || u / g.sw >= OW)
                    continue;
                int64_t at = n * cols->strides[0] + oh * cols->strides[1] + (u / g.sw) * cols->strides[2] +
                             c * cols->strides[3] + i * cols->strides[4] + j * cols->strides[5];
                sum += tpu_k_load_f64(tpu_k_ptr(cols, at), cols->dtype);
            }
        }
        tpu_k_store_f64(tpu_k_ptr(o, it.off[0]), o->dtype, sum);
    }
    return TPU_OK;
}

static tpu_status max_pool(const tpu_op *op, int64_t start, int64_t end) {
    const tpu_tensor *x = &op->in[0], *o = &op->out, *ix = &op->aux[0];
    const window_geom g = geom(op);
    const int64_t H = x->sizes[2], W = x->sizes[3];
    const bool is_float = tpu_dtype_is_float(x->dtype);
    const int64_t *strides[2] = {o->strides, ix->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    for (int64_t e = start; e < end; e++, tpu_k_iter_next(&it)) {
        const int64_t n = it.idx[0], c = it.idx[1], oh = it.idx[2], ow = it.idx[3];
        int64_t best_at = -1, best_i = 0;
        double best_f = 0.0;
        for (int64_t i = 0; i < g.kh; i++) {
            int64_t h = oh * g.sh - g.ph + i * g.dh;
            if (h < 0 || h >= H)
                continue;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t w = ow * g.sw - g.pw + j * g.dw;
                if (w < 0 || w >= W)
                    continue;
                const char *p = tpu_k_ptr(x, off4(x, n, c, h, w));
                /* As PyTorch's kernels: the first largest wins, and every
                 * NaN replaces the best so far (so the last NaN wins). */
                if (is_float) {
                    double v = tpu_k_load_f64(p, x->dtype);
                    if (best_at < 0 || isnan(v) || v > best_f) {
                        best_f = v;
                        best_at = h * W + w;
                    }
                } else {
                    int64_t v = tpu_k_load_i64(p, x->dtype);
                    if (best_at < 0 || v > best_i) {
                        best_i = v;
                        best_at = h * W + w;
                    }
                }
            }
        }
        if (best_at < 0) /* no image element: PyTorch's sizes never allow it */
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: window (%lld, %lld) holds no element of "
                                 "the image", tpu_k_op_label(op), (long long)oh, (long long)ow);
        char *dst = tpu_k_ptr(o, it.off[0]);
        if (is_float)
            tpu_k_store_f64(dst, o->dtype, best_f);
        else
            tpu_k_store_i64(dst, o->dtype, best_i);
        tpu_k_store_i64(tpu_k_ptr(ix, it.off[1]), TPU_DTYPE_I64, best_at);
    }
    return TPU_OK;
}

tpu_status tpu_k_window_ref(const tpu_op *op, int ith, int nth) {
    int64_t start, end;
    tpu_k_split(tpu_k_numel(&op->out), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    switch ((tpu_window_fn)op->fn) {
    case TPU_WINDOW_IM2COL: return im2col(op, start, end);
    case TPU_WINDOW_COL2IM: return col2im(op, start, end);
    case TPU_WINDOW_MAX_POOL: return max_pool(op, start, end);
    case TPU_WINDOW_COUNT: break;
    }
    return TPU_OK;
}
