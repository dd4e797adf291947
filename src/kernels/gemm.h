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

#endif
