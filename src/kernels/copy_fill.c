/* COPY (any dtype pair, any strides on both sides) and FILL.
 *
 * COPY converts per strided.h: same dtype copies the bytes (NaN payloads
 * kept); to f32/f16/bf16 through f32; to f64 through f64; to integers
 * through int64 (wrapping, float rules in strided.h); to bool, value != 0.
 * FILL stores p.fill.value: .f for float outputs (rounded to out.dtype),
 * .i for integer outputs (wrapped), .i != 0 for bool.
 *
 * Work split: contiguous ranges of out's row-major element index (memory
 * offsets on the flat path); elements are independent, so any split
 * writes the same bytes. */
#include <string.h>

#include "kernels_internal.h"
#include "strided.h"

/* ------------------------------------------------------------- COPY */

/* Copies one element from `in` (dtype idt) to `out` (dtype odt). */
static inline __attribute__((always_inline)) void convert_one(char *out, tpu_dtype odt,
                                                              const char *in, tpu_dtype idt) {
    if (odt == idt) {
        memcpy(out, in, tpu_dtype_size(odt));
        return;
    }
    switch (odt) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: tpu_k_store_f32(out, odt, tpu_k_load_f32(in, idt)); return;
    case TPU_DTYPE_F64: tpu_k_store_f64(out, odt, tpu_k_load_f64(in, idt)); return;
    case TPU_DTYPE_BOOL: tpu_k_store_bool(out, odt, tpu_k_load_bool(in, idt)); return;
    default: tpu_k_store_i64(out, odt, tpu_k_load_i64(in, idt)); return;
    }
}

tpu_status tpu_k_copy_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it))
        convert_one(tpu_k_ptr(o, it.off[0]), o->dtype, tpu_k_ptr(in, it.off[1]), in->dtype);
    return TPU_OK;
}

/* Copies n elements of size es between strided runs (strides in
 * elements). Element-size loops let the compiler use plain moves. */
static void copy_run_same(char *out, int64_t so, const char *in, int64_t si, int64_t n,
                          size_t es) {
    if (so == 1 && si == 1) {
        memmove(out, in, (size_t)n * es); /* memmove: out may be in itself */
        return;
    }
    int64_t bo = so * (int64_t)es, bi = si * (int64_t)es;
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 1); break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 8); break;
    }
}

/* Converts n elements between strided runs with the dtypes fixed at the
 * call site, so that the inlined load/store switches fold away. */
static inline __attribute__((always_inline)) void convert_run(char *out, tpu_dtype odt,
                                                              int64_t so, const char *in,
                                                              tpu_dtype idt, int64_t si,
                                                              int64_t n) {
    int64_t bo = so * (int64_t)tpu_dtype_size(odt), bi = si * (int64_t)tpu_dtype_size(idt);
    for (int64_t j = 0; j < n; j++)
        convert_one(out + j * bo, odt, in + j * bi, idt);
}

/* The float conversions worth a specialised loop (autocast, .float(),
 * .double()); returns false for other pairs. */
static bool convert_run_float(char *out, tpu_dtype odt, int64_t so, const char *in,
                              tpu_dtype idt, int64_t si, int64_t n) {
#define PAIR(O, I)                                                                                 \
    if (odt == TPU_DTYPE_##O && idt == TPU_DTYPE_##I) {                                            \
        convert_run(out, TPU_DTYPE_##O, so, in, TPU_DTYPE_##I, si, n);                             \
        return true;                                                                               \
    }
    PAIR(F32, BF16) PAIR(BF16, F32) PAIR(F32, F16) PAIR(F16, F32) PAIR(F32, F64) PAIR(F64, F32)
#undef PAIR
    return false;
}

/* The pairs convert_run_float handles: f32 to or from bf16, f16, f64. */
static bool is_fast_float_pair(tpu_dtype odt, tpu_dtype idt) {
    tpu_dtype other = odt == TPU_DTYPE_F32 ? idt : idt == TPU_DTYPE_F32 ? odt : TPU_DTYPE_F32;
    return other == TPU_DTYPE_BF16 || other == TPU_DTYPE_F16 || other == TPU_DTYPE_F64;
}

/* Fast path: same-dtype copies (flat memmove when both sides are laid out
 * alike and dense, else strided row runs) and the common float
 * conversions by row runs. Other pairs go to the reference path. */
tpu_status tpu_k_copy_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    bool same = o->dtype == in->dtype;
    if (!same && !is_fast_float_pair(o->dtype, in->dtype))
        return tpu_k_copy_ref(op, ith, nth);
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    size_t es = tpu_dtype_size(o->dtype);
    if (same && tpu_k_is_dense(o) && tpu_k_same_layout(in, o)) {
        /* Both sides are the same flat array: copy this share's bytes. */
        copy_run_same((char *)o->data + start * (int64_t)es, 1,
                      (const char *)in->data + start * (int64_t)es, 1, end - start, es);
        return TPU_OK;
    }
    /* Walk out's row-major order one innermost-row run at a time. */
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    int64_t so = o->ndim ? o->strides[o->ndim - 1] : 0;
    int64_t si = o->ndim ? in->strides[o->ndim - 1] : 0;
    for (int64_t i = start; i < end;) {
        int64_t run = tpu_k_iter_row_left(&it);
        if (run > end - i)
            run = end - i;
        char *po = tpu_k_ptr(o, it.off[0]);
        const char *pi = tpu_k_ptr(in, it.off[1]);
        if (same)
            copy_run_same(po, so, pi, si, run, es);
        else
            convert_run_float(po, o->dtype, so, pi, in->dtype, si, run);
        tpu_k_iter_advance_in_row(&it, run);
        i += run;
    }
    return TPU_OK;
}

/* ------------------------------------------------------------- FILL */

/* Stores the fill value into one element of out's dtype. */
static void fill_one(char *p, const tpu_op *op) {
    tpu_dtype dt = op->out.dtype;
    const tpu_scalar v = op->p.fill.value;
    switch (dt) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16:
    case TPU_DTYPE_F64: tpu_k_store_f64(p, dt, v.f); return;
    case TPU_DTYPE_BOOL: tpu_k_store_bool(p, dt, v.i != 0); return;
    default: tpu_k_store_i64(p, dt, v.i); return;
    }
}

tpu_status tpu_k_fill_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it))
        fill_one(tpu_k_ptr(o, it.off[0]), op);
    return TPU_OK;
}

/* Writes the element pattern `elem` (es bytes) to n strided elements. */
static void fill_run(char *p, int64_t stride, const char *elem, size_t es, int64_t n) {
    int64_t step = stride * (int64_t)es;
    if (es == 1 && stride == 1) {
        memset(p, elem[0], (size_t)n);
        return;
    }
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 1); break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 8); break;
    }
}

/* Fast path: convert the value once, then replicate its bytes (a flat run
 * for dense out, strided row runs otherwise). Same bytes as the reference
 * because both go through fill_one. */
tpu_status tpu_k_fill_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    char elem[8];
    fill_one(elem, op);
    size_t es = tpu_dtype_size(o->dtype);
    if (tpu_k_is_dense(o)) {
        fill_run((char *)o->data + start * (int64_t)es, 1, elem, es, end - start);
        return TPU_OK;
    }
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    int64_t so = o->ndim ? o->strides[o->ndim - 1] : 0;
    for (int64_t i = start; i < end;) {
        int64_t run = tpu_k_iter_row_left(&it);
        if (run > end - i)
            run = end - i;
        fill_run(tpu_k_ptr(o, it.off[0]), so, elem, es, run);
        tpu_k_iter_advance_in_row(&it, run);
        i += run;
    }
    return TPU_OK;
}
