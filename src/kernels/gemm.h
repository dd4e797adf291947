/* The f32 GEMM micro-kernels of gemm.c, for the packed MM/ADDMM driver
 * there and for other families that run blocks of matrix products
 * (attention_fast.c). Internal to src/kernels.
 *
 * A micro-kernel computes one register tile of mr x nr outputs:
 *
 *   c[i * ldc + j] = chain over k = 0 .. kc-1 of fma(A(i, k), b[k * ldb + j], .)
 *
 * for i < mr, j < nr, starting from c[i * ldc + j] when `accumulate`,
 * else from +0, with A(i, k) = a[i * rsa + k * csa]. Every output is that
 * one f32 fma chain, in order of k, whatever the instruction set: the
 * portable, AVX2 and AVX-512 kernels give the same bits (matmul.h's
 * numerics). A is read by broadcasting single elements, so it may be a
 * packed panel (rsa = 1, csa = mr), a row-major block (csa = 1) or a
 * column-major one (rsa = 1) at no extra cost; B rows are read as
 * vectors, nr floats each (unaligned is fine). The caller makes all mr
 * rows of A, nr columns of B and the mr x nr tile of C addressable
 * (zero-padding edges if it must). */
#ifndef TPU_KERNELS_GEMM_H
#define TPU_KERNELS_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "matmul.h"

typedef void (*tpu_k_gemm_ukernel)(int64_t kc, const float *a, int64_t rsa, int64_t csa,
                                   const float *b, int64_t ldb, float *c, int64_t ldc,
                                   bool accumulate);

/* A micro-kernel and its blocking sizes: one row of gemm.c's table. */
typedef struct {
    const char *name;
    int32_t mr, nr;     /* register tile */
    int32_t mc, kc, nc; /* cache blocks of the MM driver; mc % mr == 0, nc % nr == 0 */
    tpu_k_gemm_ukernel kernel;
    bool (*available)(void);
} tpu_k_gemm_config;

/* The fastest micro-kernel the ISA cap (tpu_kernels_get_isa) allows:
 * AVX-512 8x32, AVX2+FMA 6x16 or portable 4x8. Never NULL; thread-safe. */
const tpu_k_gemm_config *tpu_k_gemm_config_get(void);

/* ------------------------------------------------ bf16 pair products
 *
 * For chains of bf16 values (matmul.h: bf16 operands, f32 at HIGH and
 * MEDIUM), on CPUs with AVX512-BF16, a micro-kernel of dot products of
 * bf16 pairs (gemm_bf16.c). Panels hold one uint32 per pair of packed k
 * (kk, kk + 1): kk's bf16 bits in the high half, kk + 1's in the low
 * half, because VDPBF16PS adds the high product first: each output stays
 * the in-order flushing chain of matmul.h, bit for bit. A k tail of odd
 * length is padded with the product (-0) * (+0), which adds nothing.
 * The A panel of mr rows holds a[t * mr + i] for pair t, the B panel of
 * nr columns b[t * nr + j]; c and `accumulate` as for the f32 kernels. */
typedef void (*tpu_k_gemm_pair_ukernel)(int64_t kpairs, const uint32_t *a, const uint32_t *b,
                                        float *c, int64_t ldc, bool accumulate);

typedef struct {
    const char *name;
    int32_t mr, nr;
    int32_t mc, kc, nc; /* kc counts packed k and is even */
    tpu_k_gemm_pair_ukernel kernel;
} tpu_k_gemm_pair_config;

/* The pair kernel, or NULL when the CPU lacks AVX512-BF16, the ISA cap
 * is below avx512, the instruction failed the one-time check that it
 * computes the flushing chain of matmul.h bit for bit, or a one-time
 * timing found the f32 kernel faster on this CPU (the f32 kernel under
 * FTZ/DAZ gives the same bits). Thread-safe. */
const tpu_k_gemm_pair_config *tpu_k_gemm_pair_config_get(void);

/* The same without the timing: the pair kernel wherever it is exact (for
 * tests that must reach it on every CPU that has it). */
const tpu_k_gemm_pair_config *tpu_k_gemm_pair_config_exact(void);

/* What packing reads: the operands, their dtype, the precision and the
 * terms per k (matmul.h). */
typedef struct {
    const tpu_tensor *a, *b;
    tpu_dtype dt;
    tpu_precision prec;
    int passes;
} tpu_k_gemm_operands;

/* Packs rows [i0, i0 + mb) x packed k [p0, p0 + kb) of A (p0 even) into
 * pair panels of mr rows; rows past mb are zero. */
void tpu_k_gemm_pack_a_pairs(const tpu_k_gemm_operands *cx, int64_t i0, int64_t mb, int64_t p0,
                             int64_t kb, int mr, uint32_t *dst);

/* Packs packed k [p0, p0 + kb) (p0 even) x columns [j0, j0 + nb) of B
 * into pair panels of nr columns; columns past nb are zero. */
void tpu_k_gemm_pack_b_pairs(const tpu_k_gemm_operands *cx, int64_t p0, int64_t kb, int64_t j0,
                             int64_t nb, int nr, uint32_t *dst);

/* Writes the finished f32 chains cbuf[i * ldc + j] (i < mb, j < nb) to
 * out rows [ic, ic + mb) x columns [jc, jc + nb), through the alpha/beta
 * step and rounding of tpu_k_mm_store_f32 (whole rows at once where out
 * allows; the same bytes). */
void tpu_k_gemm_store_block(const tpu_op *op, int64_t ic, int64_t mb, int64_t jc, int64_t nb,
                            const float *cbuf, int64_t ldc);

/* MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6): under
 * them x86's f32 fma computes matmul.h's flushing step exactly. Set only
 * around a chain's fmas: the final alpha/beta step and rounding keep IEEE
 * subnormals, as the reference's do. */
#define TPU_K_MXCSR_FLUSH 0x8040u

/* ---------------------------------------------------- skinny products */

/* At most this many output rows take tpu_k_gemv. */
#define TPU_K_GEMV_MAX_M 8

/* Computes output rows [m0, m1) x columns [n0, n1) of an MM/ADDMM
 * without packing (gemv.c) and returns true, when the share qualifies:
 * m1 - m0 <= TPU_K_GEMV_MAX_M, f32 at HIGHEST or bf16 operands, B
 * aligned with a unit stride, a CPU with AVX2+FMA. Else returns false
 * and writes nothing. The bytes are the reference kernel's. */
bool tpu_k_gemv(const tpu_op *op, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

/* Operand value (row, col) of t converted to f32 and split into precision
 * part `part` (matmul.h). Inlined with dt, prec and side fixed at each
 * call site, so the dtype switch and the precision test fold away. */
static inline __attribute__((always_inline)) float
tpu_k_gemm_packed_value(const tpu_tensor *t, int64_t row, int64_t col, tpu_dtype dt,
                        tpu_precision prec, tpu_k_mm_side side, int part) {
    int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2; /* a constant once inlined */
    const char *p = (const char *)t->data + (row * t->strides[0] + col * t->strides[1]) * es;
    return tpu_k_mm_part(tpu_k_load_f32(p, dt), dt, prec, side, part);
}

#endif
