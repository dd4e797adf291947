/* WINDOW: sliding 2-d windows over [N, C, H, W] images. IM2COL lays every
 * window out as a row of columns (a convolution then is one matrix
 * product); COL2IM is its adjoint (a convolution's input gradient),
 * written as a gather: each image element sums the column entries that
 * read it, in a fixed (i, j) order, so no two shares write one element and
 * the sums do not depend on the thread count; MAX_POOL takes each window's
 * largest value and its position, ADAPTIVE_MAX_POOL each adaptive bin's
 * (over the last three dims).
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

/* PyTorch's adaptive bins: output o of O along a dim of size I covers
 * [floor(o I / O), ceil((o + 1) I / O)), written to avoid overflow as
 * PyTorch's start_index and end_index. */
static inline int64_t bin_start(int64_t o, int64_t out, int64_t in) {
    return (o / out) * in + ((o % out) * in) / out;
}

static inline int64_t bin_end(int64_t o, int64_t out, int64_t in) {
    return 1 + ((o + 1) * in - 1) / out;
}

/* One row of an adaptive bin, elements w0 .. w1 - 1 at stride sw: a
 * larger value or a NaN takes over (position at + w). f32 values compare
 * in f64 as they do in f32. The row must be aligned to its element
 * size (the caller checks). */
static void scan_row_f32(const float *row, int64_t sw, int64_t w0, int64_t w1, int64_t at,
                         double *best, int64_t *best_at) {
    float b = (float)*best;
    int64_t b_at = *best_at;
    for (int64_t w = w0; w < w1; w++) {
        float v = row[w * sw];
        if (v > b || isnan(v)) {
            b = v;
            b_at = at + w;
        }
    }
    *best = b;
    *best_at = b_at;
}

static void scan_row_f64(const double *row, int64_t sw, int64_t w0, int64_t w1, int64_t at,
                         double *best, int64_t *best_at) {
    double b = *best;
    int64_t b_at = *best_at;
    for (int64_t w = w0; w < w1; w++) {
        double v = row[w * sw];
        if (v > b || isnan(v)) {
            b = v;
            b_at = at + w;
        }
    }
    *best = b;
    *best_at = b_at;
}

/* ADAPTIVE_MAX_POOL over out elements [start, end). The bins of the two
 * outer pooled dims are recomputed only when those positions change. */
static tpu_status adaptive_max_pool(const tpu_op *op, int64_t start, int64_t end) {
    const tpu_tensor *x = &op->in[0], *o = &op->out, *ix = &op->aux[0];
    const int64_t D = x->sizes[2], H = x->sizes[3], W = x->sizes[4];
    const int64_t OD = o->sizes[2], OH = o->sizes[3], OW = o->sizes[4];
    const int64_t *strides[2] = {o->strides, ix->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    int64_t last_od = -1, last_oh = -1, d0 = 0, d1 = 0, h0 = 0, h1 = 0;
    const bool aligned = tpu_k_is_aligned(x);
    for (int64_t e = start; e < end; e++, tpu_k_iter_next(&it)) {
        const int64_t n = it.idx[0], c = it.idx[1], od = it.idx[2], oh = it.idx[3], ow = it.idx[4];
        if (od != last_od) {
            d0 = bin_start(od, OD, D);
            d1 = bin_end(od, OD, D);
            last_od = od;
        }
        if (oh != last_oh) {
            h0 = bin_start(oh, OH, H);
            h1 = bin_end(oh, OH, H);
            last_oh = oh;
        }
        const int64_t w0 = bin_start(ow, OW, W), w1 = bin_end(ow, OW, W);
        /* As PyTorch's kernel: start from -inf at the bin's first
         * position; a larger value or any NaN takes over (the first
         * largest, or the last NaN). Each row of the bin is scanned with
         * typed loads. */
        const int64_t base = n * x->strides[0] + c * x->strides[1], sw = x->strides[4];
        double best = -INFINITY;
        int64_t best_at = (d0 * H + h0) * W + w0;
        for (int64_t d = d0; d < d1; d++)
            for (int64_t h = h0; h < h1; h++) {
                const char *row = tpu_k_ptr(x, base + d * x->strides[2] + h * x->strides[3]);
                const int64_t at = (d * H + h) * W;
                switch (aligned ? x->dtype : TPU_DTYPE_COUNT) {
                case TPU_DTYPE_F32: scan_row_f32((const float *)row, sw, w0, w1, at, &best, &best_at); break;
                case TPU_DTYPE_F64: scan_row_f64((const double *)row, sw, w0, w1, at, &best, &best_at); break;
                default:
                    for (int64_t w = w0; w < w1; w++) {
                        double v = tpu_k_load_f64(row + w * sw * (int64_t)tpu_dtype_size(x->dtype),
                                                  x->dtype);
                        if (v > best || isnan(v)) {
                            best = v;
                            best_at = at + w;
                        }
                    }
                }
            }
        tpu_k_store_f64(tpu_k_ptr(o, it.off[0]), o->dtype, best);
        tpu_k_store_i64(tpu_k_ptr(ix, it.off[1]), TPU_DTYPE_I64, best_at);
    }
    return TPU_OK;
}

/* IM2COL into a row-major out of 1, 2, 4 or 8-byte elements, a share
 * taking whole rows (window positions): each (c, i) run of kw entries
 * reads one image row, or is zeros when the row is padding; a run with
 * no padding in a row of adjacent elements is one memcpy, else each entry
 * is copied as its integer type. The same bytes as im2col, which
 * walks out element by element through the iterator (the walk was three
 * quarters of a 3x3 convolution's time). False, having written nothing,
 * for other layouts. */
static bool im2col_rows(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *x = &op->in[0], *o = &op->out;
    const int64_t es = (int64_t)tpu_dtype_size(o->dtype);
    if (!tpu_k_is_row_major_from(o, 0) || (es != 1 && es != 2 && es != 4 && es != 8))
        return false;
    const window_geom g = geom(op);
    const int64_t H = x->sizes[2], W = x->sizes[3], OH = o->sizes[1], OW = o->sizes[2];
    const int64_t C = o->sizes[3], KH = o->sizes[4], KW = o->sizes[5], RK = C * KH * KW;
    const int64_t sw = x->strides[3] * es;
    const bool inner_run = g.dw == 1 && x->strides[3] == 1; /* a window row is KW adjacent elements */
    int64_t r0, r1;
    tpu_k_split(o->sizes[0] * OH * OW, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r / (OH * OW), oh = r / OW % OH, ow = r % OW;
        const int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
        char *dst = (char *)o->data + r * RK * es;
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < KH; i++, dst += KW * es) {
                const int64_t h = h0 + i * g.dh;
                if (h < 0 || h >= H) {
                    memset(dst, 0, (size_t)(KW * es));
                    continue;
                }
                const char *row = tpu_k_ptr(x, off4(x, n, c, h, 0));
                if (inner_run && w0 >= 0 && w0 + KW <= W) { /* no padding in the run */
                    memcpy(dst, row + w0 * es, (size_t)(KW * es));
                    continue;
                }
#define IM2COL_RUN(T)                                                                              \
    for (int64_t j = 0; j < KW; j++) {                                                             \
        const int64_t w = w0 + j * g.dw;                                                           \
        T v = 0;                                                                                   \
        if (w >= 0 && w < W)                                                                       \
            memcpy(&v, row + w * sw, sizeof v);                                                    \
        memcpy(dst + j * es, &v, sizeof v);                                                        \
    }                                                                                              \
    break
                switch (es) {
                case 1: IM2COL_RUN(uint8_t);
                case 2: IM2COL_RUN(uint16_t);
                case 4: IM2COL_RUN(uint32_t);
                default: IM2COL_RUN(uint64_t);
                }
#undef IM2COL_RUN
            }
    }
    return true;
}

tpu_status tpu_k_window_fast(const tpu_op *op, int ith, int nth) {
    if (op->fn == TPU_WINDOW_IM2COL && im2col_rows(op, ith, nth))
        return TPU_OK;
    return tpu_k_window_ref(op, ith, nth);
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
    case TPU_WINDOW_ADAPTIVE_MAX_POOL: return adaptive_max_pool(op, start, end);
    case TPU_WINDOW_COUNT: break;
    }
    return TPU_OK;
}
