/* Shared pieces of the MM/ADDMM kernels: the work split, the operand
 * transforms that model the matrix unit's precision, and the final
 * alpha/beta/bias step. The reference loop (matmul.c) and the packed GEMM
 * (gemm.c) both use them, so they compute the same thing.
 *
 * Numerics (f32, f16, bf16 operands): out[i,j] is one f32 accumulator
 * acc = fma(a'[i,kk], b'[kk,j], acc) over kk = 0 .. K*passes-1 in order,
 * starting from +0, where (k = kk / passes, part = kk % passes):
 *   f16/bf16, and f32 HIGHEST: passes 1, a' = a, b' = b (f16/bf16 values are
 *       exact in f32, and so are their products);
 *   f32 MEDIUM: passes 1, a' = bf16(a), b' = bf16(b) (exact products);
 *   f32 HIGH:   passes 3, parts (hi*hi, hi*lo, lo*hi) with hi = bf16(x) and
 *       lo = bf16(x - hi) (lo = 0 when hi is not finite, so infinities
 *       stay infinities); exact products.
 * f64 operands: one f64 accumulator with fma, precision ignored. Because
 * both paths use this exact order, they agree bit for bit. */
#ifndef TPU_KERNELS_MATMUL_H
#define TPU_KERNELS_MATMUL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "strided.h"
#include "tpu/op.h"

/* Which operand a value belongs to, for the HIGH-precision parts. */
typedef enum { TPU_K_MM_LHS = 0, TPU_K_MM_RHS = 1 } tpu_k_mm_side;

/* Output rows [*m0, *m1) and columns [*n0, *n1) of share ith of nth: the
 * larger of M and N is split into contiguous ranges. */
void tpu_k_mm_split(const tpu_op *op, int ith, int nth, int64_t *m0, int64_t *m1, int64_t *n0,
                    int64_t *n1);

/* Terms per k in the accumulation chain: 3 for f32 HIGH, else 1. */
int tpu_k_mm_passes(const tpu_op *op);

/* Part `part` (0 <= part < passes) of operand value x, per the table
 * above. dt is the operands' dtype. */
static inline float tpu_k_mm_part(float x, tpu_dtype dt, tpu_precision prec, tpu_k_mm_side side,
                                  int part) {
    if (dt != TPU_DTYPE_F32 || prec == TPU_PRECISION_HIGHEST)
        return x;
    float hi = tpu_k_round_bf16(x);
    if (prec == TPU_PRECISION_MEDIUM)
        return hi;
    /* HIGH: lhs parts are (hi, hi, lo), rhs parts (hi, lo, hi). */
    bool want_lo = side == TPU_K_MM_LHS ? part == 2 : part == 1;
    if (!want_lo)
        return hi;
    return isfinite(hi) ? tpu_k_round_bf16(x - hi) : 0.0f;
}

/* Loads element (i, k) of a 2-d f32/f16/bf16 operand as f32. */
static inline float tpu_k_mm_load(const tpu_tensor *t, int64_t i, int64_t k) {
    return tpu_k_load_f32(tpu_k_ptr(t, i * t->strides[0] + k * t->strides[1]), t->dtype);
}

/* Stores out[i, j] from its f32 accumulator: MM stores acc; ADDMM stores
 * alpha*acc + beta*bias with one rounding (fmaf), not reading the bias
 * when beta == 0 and not using acc when alpha == 0 (BLAS convention, so
 * NaN there does not propagate). Then rounds to out.dtype. */
void tpu_k_mm_store_f32(const tpu_op *op, int64_t i, int64_t j, float acc);

/* The same for f64 operands. */
void tpu_k_mm_store_f64(const tpu_op *op, int64_t i, int64_t j, double acc);

#endif
