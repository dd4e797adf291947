/* Vector math for float32 (vecmath.c): exp, expm1, log, log1p, log2,
 * tanh, sigmoid, erf, sin and cos over arrays, for the element-wise
 * kernels. Internal to src/kernels.
 *
 * Every function has a portable C variant, an AVX2+FMA variant (8 lanes)
 * and an AVX-512 variant (16 lanes), picked by tpu_kernels_get_isa(). All
 * variants run the same sequence of IEEE-754 operations (the portable one
 * calls fmaf() where the vector ones use a fused multiply-add), so results
 * are bit-identical across ISA levels, array lengths and alignments.
 *
 * Special values follow C's libm: NaN in gives NaN out, infinities and
 * signed zeros map as libm maps them (expm1, log1p, tanh, erf and sin
 * keep the sign of a zero), results overflow to infinity and underflow
 * through the subnormals to zero. */
#ifndef TPU_KERNELS_VECMATH_H
#define TPU_KERNELS_VECMATH_H

#include <stdint.h>

typedef enum {
    TPU_VM_EXP,     /* e^x */
    TPU_VM_EXPM1,   /* e^x - 1 */
    TPU_VM_LOG,     /* natural logarithm */
    TPU_VM_LOG1P,   /* log(1 + x) */
    TPU_VM_LOG2,    /* base-2 logarithm */
    TPU_VM_TANH,    /* hyperbolic tangent */
    TPU_VM_SIGMOID, /* 1 / (1 + e^-x) */
    TPU_VM_ERF,     /* error function */
    TPU_VM_SIN,     /* sine (radians) */
    TPU_VM_COS,     /* cosine (radians) */
    TPU_VM_COUNT
} tpu_vm_fn;

/* Computes out[i] = fn(in[i]) for 0 <= i < n.
 *   fn   the function; an invalid value leaves out untouched
 *   out  n floats; may equal in (in place), must not otherwise overlap it
 *   in   n floats; any alignment (so may out be)
 *   n    element count; n <= 0 does nothing (out and in may then be NULL)
 * Uses the best ISA level that tpu_kernels_get_isa() allows. Results do
 * not depend on the level, on n or on the alignment. */
void tpu_vm_f32(tpu_vm_fn fn, float *out, const float *in, int64_t n);

/* Exponentials of the rows of a block, shifted per column, as a softmax
 * takes them: x[r * ld + i] = exp(x[r * ld + i] - sub[i]) in place for
 * r < rows, i < n, and, when sum is not NULL, sum[i] = the sum of those
 * results over r, in order of r, from +0.
 *   x    rows rows of n floats, ld apart (ld >= n; any alignment)
 *   sub  n floats; sum n floats or NULL; neither may overlap x
 *   n <= 0 does nothing; rows <= 0 only sets sum (if given) to 0
 * Each exp gives the bits tpu_vm_f32(TPU_VM_EXP) gives for the
 * difference, and the sums are the same on every ISA level. */
void tpu_vm_exp_rows_f32(float *x, int64_t ld, int64_t rows, int64_t n, const float *sub,
                         float *sum);

/* The activations built on the functions above, computed in one pass. */
typedef enum {
    TPU_VM_ACT_GELU,      /* x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 */
    TPU_VM_ACT_GELU_TANH, /* 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))) */
    TPU_VM_ACT_SILU,      /* x * sigmoid(x) */
    TPU_VM_ACT_COUNT
} tpu_vm_act;

/* out[i] = act(in[i]) for 0 <= i < n, the same bits on every ISA level.
 * gelu_tanh and silu are their formula's f32 operations in the order
 * written above, with the functions as tpu_vm_f32 computes them (the
 * bits of the steps done one array at a time; vecmath_body.h gives beta
 * and kappa); gelu_tanh cancels for x << 0, as PyTorch's does. gelu is
 * computed from a table of erfc(|x|/sqrt 2) without cancellation: within
 * 1.25 ulp of the exact value for x >= 0, 3 for -3 < x < 0, 24 for
 * -6 < x <= -3, and -0 (true value above -6e-9) below -6; +inf for
 * +inf, NaN for -inf and NaN (vecmath_body.h, k_act_gelu).
 *   act      an invalid value leaves out untouched
 *   out, in  n floats each; out may equal in, must not otherwise overlap
 *   n <= 0 does nothing */
void tpu_vm_act_f32(tpu_vm_act act, float *out, const float *in, int64_t n);

/* out[i] = grad[i] * act'(x[i]) for 0 <= i < n, in f32, the same bits on
 * every ISA level (the forms are in vecmath_body.h, k_grad_*). Where the
 * derivative crosses zero its terms cancel; elsewhere the result is
 * within a few ulp (tests/c/test_kernels_vecmath.c states the bounds).
 * A NaN x gives a NaN; so do the infinities where the derivative's
 * formula in double does (x times a vanishing density, as PyTorch's).
 *   act            an invalid value leaves out untouched
 *   out, grad, x   n floats each; out may equal grad or x, must not
 *                  otherwise overlap them
 *   n <= 0 does nothing */
void tpu_vm_act_grad_f32(tpu_vm_act act, float *out, const float *grad, const float *x,
                         int64_t n);

/* fn(x) for one value, bit-identical to what tpu_vm_f32 gives for x.
 * Returns NaN for an invalid fn. */
float tpu_vm_scalar_f32(tpu_vm_fn fn, float x);

/* The function's name ("exp", "expm1", ...), or "invalid". */
const char *tpu_vm_name(tpu_vm_fn fn);

/* The stated largest error of fn over all finite float inputs, in units
 * in the last place of the float nearest the exact result: the bound
 * tests/c/test_kernels_vecmath.c checks on its sweep of float bit
 * patterns (all 2^32 with TPU_VM_EXHAUSTIVE=1). Returns -1 for an
 * invalid fn. */
double tpu_vm_max_ulp(tpu_vm_fn fn);

#endif
