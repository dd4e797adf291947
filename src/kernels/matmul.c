/* MM and ADDMM: the reference kernel and the helpers shared with the
 * packed GEMM (gemm.c). Numerics are described in matmul.h. */
#include "matmul.h"

#include <math.h>

#include "kernels_internal.h"
#include "strided.h"

void tpu_k_mm_split(const tpu_op *op, int ith, int nth, int64_t *m0, int64_t *m1, int64_t *n0,
                    int64_t *n1) {
    int64_t m = op->out.sizes[0], n = op->out.sizes[1];
    /* Split the larger side so that skinny products still spread out. */
    if (m >= n) {
        tpu_k_split(m, ith, nth, m0, m1);
        *n0 = 0;
        *n1 = n;
    } else {
        tpu_k_split(n, ith, nth, n0, n1);
        *m0 = 0;
        *m1 = m;
    }
}

int tpu_k_mm_passes(const tpu_op *op) {
    return op->out.dtype == TPU_DTYPE_F32 && op->p.mm.precision == TPU_PRECISION_HIGH ? 3 : 1;
}

void tpu_k_mm_store_f32(const tpu_op *op, int64_t i, int64_t j, float acc) {
    const tpu_tensor *o = &op->out;
    float v = acc;
    if (op->fn == TPU_MATMUL_ADDMM) {
        float alpha = (float)op->p.mm.alpha;
        bool use_bias = op->p.mm.beta != 0.0;
        float bias = 0.0f;
        if (use_bias) /* read the bias only when it counts */
            bias = (float)op->p.mm.beta * tpu_k_mm_load(&op->in[2], i, j);
        if (op->p.mm.alpha == 0.0)
            v = bias;
        else
            v = use_bias ? fmaf(alpha, acc, bias) : alpha * acc;
    }
    tpu_k_store_f32(tpu_k_ptr(o, i * o->strides[0] + j * o->strides[1]), o->dtype, v);
}

void tpu_k_mm_store_f64(const tpu_op *op, int64_t i, int64_t j, double acc) {
    const tpu_tensor *o = &op->out;
    double v = acc;
    if (op->fn == TPU_MATMUL_ADDMM) {
        const tpu_tensor *c = &op->in[2];
        bool use_bias = op->p.mm.beta != 0.0;
        double bias = 0.0;
        if (use_bias)
            bias = op->p.mm.beta *
                   tpu_k_load_f64(tpu_k_ptr(c, i * c->strides[0] + j * c->strides[1]), c->dtype);
        if (op->p.mm.alpha == 0.0)
            v = bias;
        else
            v = use_bias ? fma(op->p.mm.alpha, acc, bias) : op->p.mm.alpha * acc;
    }
    tpu_k_store_f64(tpu_k_ptr(o, i * o->strides[0] + j * o->strides[1]), o->dtype, v);
}

/* The plain triple loop: one dot product per output, per matmul.h. */
void tpu_k_mm_ref_block(const tpu_op *op, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const tpu_tensor *a = &op->in[0], *b = &op->in[1];
    int64_t k_size = a->sizes[1];
    if (op->out.dtype == TPU_DTYPE_F64) {
        for (int64_t i = m0; i < m1; i++)
            for (int64_t j = n0; j < n1; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < k_size; k++) {
                    double x = tpu_k_load_f64(tpu_k_ptr(a, i * a->strides[0] + k * a->strides[1]),
                                              a->dtype);
                    double y = tpu_k_load_f64(tpu_k_ptr(b, k * b->strides[0] + j * b->strides[1]),
                                              b->dtype);
                    acc = fma(x, y, acc);
                }
                tpu_k_mm_store_f64(op, i, j, acc);
            }
        return;
    }
    tpu_dtype dt = op->out.dtype;
    tpu_precision prec = op->p.mm.precision;
    int passes = tpu_k_mm_passes(op);
    bool flush = tpu_k_mm_flushes(op);
    for (int64_t i = m0; i < m1; i++)
        for (int64_t j = n0; j < n1; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < k_size; k++) {
                float x = tpu_k_mm_load(a, i, k), y = tpu_k_mm_load(b, k, j);
                for (int p = 0; p < passes; p++) {
                    float xp = tpu_k_mm_part(x, dt, prec, TPU_K_MM_LHS, p);
                    float yp = tpu_k_mm_part(y, dt, prec, TPU_K_MM_RHS, p);
                    acc = flush ? tpu_k_mm_fma_flush(xp, yp, acc) : fmaf(xp, yp, acc);
                }
            }
            tpu_k_mm_store_f32(op, i, j, acc);
        }
}

tpu_status tpu_k_mm_ref_blocks(const tpu_op *op, int ith, int nth, const tpu_op_block_hook *hook) {
    int64_t m0, m1, n0, n1;
    tpu_k_mm_split(op, ith, nth, &m0, &m1, &n0, &n1);
    tpu_k_mm_ref_block(op, m0, m1, n0, n1);
    if (hook && m0 < m1 && n0 < n1)
        hook->run(hook, ith, m0, m1 - m0, n0, n1 - n0);
    return TPU_OK;
}

tpu_status tpu_k_mm_ref(const tpu_op *op, int ith, int nth) {
    return tpu_k_mm_ref_blocks(op, ith, nth, NULL);
}
