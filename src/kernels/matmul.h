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
 *       lo = bf16(x - hi); a finite x beyond bf16's range takes hi = the
 *       largest bf16 of its sign (bf16(x) would be infinite), and an
 *       infinite or NaN x is itself in the first pass and 0 in the two
 *       cross passes, so infinities stay infinities (never inf * 0 =
 *       NaN there); exact products.
 * f64 operands: one f64 accumulator with fma, precision ignored. Because
 * both paths use this exact order, they agree bit for bit.
 *
 * Chains of bf16 values (bf16 operands, f32 at HIGH and MEDIUM) follow
 * the matrix unit's rule for subnormals, a TPU's and x86's VDPBF16PS
 * alike: each step is acc = ftz(fma(daz(a'), daz(b'), daz(acc))), where
 * daz reads a subnormal operand as zero of its sign and ftz writes zero
 * of the result's sign when the result is tiny: below FLT_MIN after
 * rounding to 24 bits with an unbounded exponent (x86's rule, so FLT_MIN
 * minus less than half an ulp still counts as FLT_MIN). f16 and f32
 * HIGHEST chains keep subnormals. tpu_k_mm_fma_flush is the step. */
#ifndef TPU_KERNELS_MATMUL_H
#define TPU_KERNELS_MATMUL_H

#include <float.h>
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
    if (!isfinite(x))
        return part == 0 ? x : 0.0f;
    if (!isfinite(hi))
        hi = copysignf(0x1.fep127f, x); /* bf16's largest */
    bool want_lo = side == TPU_K_MM_LHS ? part == 2 : part == 1;
    return want_lo ? tpu_k_round_bf16(x - hi) : hi;
}

/* True when op's chain is one of bf16 values and so flushes subnormals
 * (the numerics above). */
static inline bool tpu_k_mm_flushes(const tpu_op *op) {
    return op->out.dtype == TPU_DTYPE_BF16 ||
           (op->out.dtype == TPU_DTYPE_F32 && op->p.mm.precision != TPU_PRECISION_HIGHEST);
}

/* x, or zero of its sign when x is subnormal. */
static inline float tpu_k_flush_subnormal(float x) {
    return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
}

/* One step of a flushing chain (the numerics above) for bf16 values a
 * and b: ftz(fma(daz(a), daz(b), daz(acc))). */
static inline float tpu_k_mm_fma_flush(float a, float b, float acc) {
    a = tpu_k_flush_subnormal(a);
    b = tpu_k_flush_subnormal(b);
    acc = tpu_k_flush_subnormal(acc);
    float r = fmaf(a, b, acc);
    if (fabsf(r) < FLT_MIN)
        return copysignf(0.0f, r);
    if (fabsf(r) == FLT_MIN) {
        /* Rounded to 24 bits with an unbounded exponent, the exact sum is
         * tiny when below FLT_MIN - 2^-151 (the tie goes to FLT_MIN, the
         * even neighbour). The double fma is exact here: a sum this close
         * to FLT_MIN has no bits below 2^-166 unless the product is far
         * smaller than the threshold's distance from acc (a multiple of
         * 2^-149), and then its rounding cannot cross the threshold. */
        double d = fma((double)a, (double)b, (double)acc);
        if (fabs(d) < (double)FLT_MIN - 0x1p-151)
            return copysignf(0.0f, r);
    }
    return r;
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

/* The reference kernel's work on output rows [m0, m1) x columns
 * [n0, n1): each output's chain, in order of k, then its store. */
void tpu_k_mm_ref_block(const tpu_op *op, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

#endif
