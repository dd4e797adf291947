/* Skinny matrix products: MM/ADDMM shares of at most TPU_K_GEMV_MAX_M
 * output rows (decoding, where M is the batch). The packed GEMM would pad
 * them to its register tile and pack all of B for a few rows that read
 * it once; here B is read once, in place, and every output is still the
 * in-order chain of matmul.h, so the bytes equal the reference kernel's.
 *
 * Forms, by B's layout:
 *   row-major B (unit column stride), up to four rows: each k step is a
 *       vector of columns; a block of columns (16 KB of accumulators)
 *       keeps them in a buffer in L1, and each pass over it takes KG
 *       steps of k (the chains stay in order of k);
 *   row-major B, five to eight rows: the chains of a few vectors of
 *       columns stay in registers over all of K (regs_512, regs_avx2);
 *   row-major bf16 B on CPUs whose VDPBF16PS computes the chain: the same
 *       in registers, two steps of k per instruction (pairs_512);
 *   column-major B (unit row stride: a Linear's weight, transposed): a
 *       vector's width of columns is read as that many rows of the
 *       weight, a vector of k at a time, and transposed in registers.
 * Chains of f32 at HIGHEST and of bf16 qualify (no precision parts);
 * bf16 chains run under MXCSR's FTZ/DAZ, where the f32 fma computes
 * matmul.h's flushing step exactly (as gemm.c's f32 kernels do). A is
 * read as f32: in place when it is aligned f32 with unit k stride, else
 * converted once per share. AVX-512 and AVX2+FMA give the same bytes;
 * columns past the last whole vector take the reference loop. */
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "kernels_internal.h"
#include "matmul.h"
#include "strided.h"
#include "transpose_simd.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* Accumulator floats per block: 16 KB, which stay in L1 (1024 columns
 * of up to four rows, 512 of up to eight). */
#define TPU_K_GEMV_CBUF 4096

/* Column-major B is read as a vector's width of the weight's rows at a
 * time, each only K values long (3 KB at K = 768): too short for the
 * hardware's stream prefetchers to ramp up, so the walk ran at 9 GB/s.
 * Each step also prefetches, into L2 (locality 2), the same k of the
 * next block's rows, a whole block ahead. */
#define GEMV_PREFETCH 2

/* Columns per block for M rows. */
static int64_t block_columns(int M) {
    return M <= 4 ? TPU_K_GEMV_CBUF / 4 : TPU_K_GEMV_CBUF / TPU_K_GEMV_MAX_M;
}

#if TPU_K_X86

/* What the kernels read: the share's rows of A as f32 (arow[i][k]), B,
 * its dtype and its element strides, and K. */
typedef struct {
    const float *arow[TPU_K_GEMV_MAX_M];
    const char *b;
    int64_t rs, cs; /* B's strides, in elements */
    int64_t k;
    tpu_dtype dt; /* F32 or BF16 */
    const uint32_t *apair; /* bf16 with VDPBF16PS: A's pairs (pack_a_pairs), else NULL */
} gemv_args;

/* ---------------------------------------------------------- AVX-512 */

/* Row-major B, up to four rows: cbuf[i * jn + v] (i < M, v < jn, jn a
 * multiple of 16) gets the chains of columns [j0, j0 + jn), four k steps
 * per pass. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
rows_512(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn, float *cbuf) {
    enum { KG = 4 };
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k;
    for (int i = 0; i < M; i++)
        for (int64_t v = 0; v < jn; v += 16)
            _mm512_store_ps(cbuf + i * jn + v, _mm512_setzero_ps());
    int64_t k = 0;
    for (; k + KG <= K; k += KG) {
        __m512 av[TPU_K_GEMV_MAX_M][KG];
        const char *brow[KG];
        for (int q = 0; q < KG; q++) {
            for (int i = 0; i < M; i++)
                av[i][q] = _mm512_set1_ps(g->arow[i][k + q]);
            brow[q] = g->b + ((k + q) * g->rs + j0) * es;
        }
        for (int64_t v = 0; v < jn; v += 16) {
            __m512 bv[KG];
            for (int q = 0; q < KG; q++)
                bv[q] = tpu_k_load16_f32(brow[q] + v * es, dt);
            for (int i = 0; i < M; i++) {
                __m512 acc = _mm512_load_ps(cbuf + i * jn + v);
                for (int q = 0; q < KG; q++)
                    acc = _mm512_fmadd_ps(av[i][q], bv[q], acc);
                _mm512_store_ps(cbuf + i * jn + v, acc);
            }
        }
    }
    for (; k < K; k++) {
        const char *brow = g->b + (k * g->rs + j0) * es;
        for (int64_t v = 0; v < jn; v += 16) {
            __m512 bv = tpu_k_load16_f32(brow + v * es, dt);
            for (int i = 0; i < M; i++) {
                __m512 acc = _mm512_load_ps(cbuf + i * jn + v);
                acc = _mm512_fmadd_ps(_mm512_set1_ps(g->arow[i][k]), bv, acc);
                _mm512_store_ps(cbuf + i * jn + v, acc);
            }
        }
    }
}

/* Row-major B: columns [v, jn) of the block (a multiple of 16), one
 * vector at a time, its M chains in registers over all of K. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
single_512(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t v, int64_t jn,
           float *cbuf) {
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, bstep = g->rs * es;
    for (; v < jn; v += 16) {
        __m512 acc[TPU_K_GEMV_MAX_M];
        for (int i = 0; i < M; i++)
            acc[i] = _mm512_setzero_ps();
        const char *bp = g->b + (j0 + v) * es;
        for (int64_t k = 0; k < g->k; k++, bp += bstep) {
            __m512 bv = tpu_k_load16_f32(bp, dt);
            for (int i = 0; i < M; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(g->arow[i][k]), bv, acc[i]);
        }
        for (int i = 0; i < M; i++)
            _mm512_store_ps(cbuf + i * jn + v, acc[i]);
    }
}

/* Row-major B, the register form: each block of NV vectors of columns
 * keeps its M x NV chains in registers over all of K, reading NV vectors
 * of B's row k per step (a walk down B's columns, which huge pages keep
 * to few TLB entries); single_512 takes the columns left. No
 * accumulator goes through memory, so the FMA units rather than the
 * load/store ports set the pace. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
regs_512(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn, float *cbuf) {
    const int NV = M <= 4 ? 4 : 2; /* up to 16 accumulators */
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k, bstep = g->rs * es;
    int64_t v = 0;
    for (; v + 16 * NV <= jn; v += 16 * NV) {
        __m512 acc[TPU_K_GEMV_MAX_M][4];
        for (int i = 0; i < M; i++)
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm512_setzero_ps();
        const char *bp = g->b + (j0 + v) * es;
        for (int64_t k = 0; k < K; k++, bp += bstep) {
            __m512 bv[4];
            for (int u = 0; u < NV; u++)
                bv[u] = tpu_k_load16_f32(bp + 16 * u * es, dt);
            for (int i = 0; i < M; i++) {
                __m512 av = _mm512_set1_ps(g->arow[i][k]);
                for (int u = 0; u < NV; u++)
                    acc[i][u] = _mm512_fmadd_ps(av, bv[u], acc[i][u]);
            }
        }
        for (int i = 0; i < M; i++)
            for (int u = 0; u < NV; u++)
                _mm512_store_ps(cbuf + i * jn + v + 16 * u, acc[i][u]);
    }
    single_512(g, M, dt, j0, v, jn, cbuf);
}

/* Column-major B: the same for jn columns in blocks of 16, each block's
 * chains in registers over all of K. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
cols_512(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn,
         float *cbuf) {
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k;
    for (int64_t v = 0; v < jn; v += 16) {
        const char *col0 = g->b + (j0 + v) * g->cs * es; /* B column j0 + v: k contiguous */
        const int64_t cstep = g->cs * es;
        __m512 acc[TPU_K_GEMV_MAX_M];
        for (int i = 0; i < M; i++)
            acc[i] = _mm512_setzero_ps();
        /* The next block's rows, a line each per step (see GEMV_PREFETCH). */
        const char *next = v + 16 < jn ? col0 + 16 * cstep : NULL;
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m512 r[16], t[16];
            if (next)
                for (int q = 0; q < 16; q++)
                    __builtin_prefetch(next + q * cstep + k * es, 0, GEMV_PREFETCH);
            for (int q = 0; q < 16; q++)
                r[q] = tpu_k_load16_f32(col0 + q * cstep + k * es, dt);
            tpu_k_transpose16(r, t);
            for (int kk = 0; kk < 16; kk++)
                for (int i = 0; i < M; i++)
                    acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(g->arow[i][k + kk]), t[kk], acc[i]);
        }
        for (; k < K; k++) {
            float col[16];
            for (int q = 0; q < 16; q++)
                col[q] = tpu_k_load_f32(col0 + q * cstep + k * es, dt);
            __m512 bv = _mm512_loadu_ps(col);
            for (int i = 0; i < M; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(g->arow[i][k]), bv, acc[i]);
        }
        for (int i = 0; i < M; i++)
            _mm512_store_ps(cbuf + i * jn + v, acc[i]);
    }
}

#define GEMV_CASES(body, g, M, dt, j0, jn, cbuf)                                                   \
    switch (M) {                                                                                   \
    case 1: body(g, 1, dt, j0, jn, cbuf); break;                                                   \
    case 2: body(g, 2, dt, j0, jn, cbuf); break;                                                   \
    case 3: body(g, 3, dt, j0, jn, cbuf); break;                                                   \
    case 4: body(g, 4, dt, j0, jn, cbuf); break;                                                   \
    case 5: body(g, 5, dt, j0, jn, cbuf); break;                                                   \
    case 6: body(g, 6, dt, j0, jn, cbuf); break;                                                   \
    case 7: body(g, 7, dt, j0, jn, cbuf); break;                                                   \
    default: body(g, 8, dt, j0, jn, cbuf); break;                                                  \
    }

/* body with M and the dtype as constants, so that its loops unroll. */
#define GEMV_DISPATCH(body, g, M, dt, j0, jn, cbuf)                                                \
    do {                                                                                           \
        if ((dt) == TPU_DTYPE_F32) {                                                               \
            GEMV_CASES(body, g, M, TPU_DTYPE_F32, j0, jn, cbuf)                                    \
        } else {                                                                                   \
            GEMV_CASES(body, g, M, TPU_DTYPE_BF16, j0, jn, cbuf)                                   \
        }                                                                                          \
    } while (0)

__attribute__((target("avx512f"))) static void block_512(const gemv_args *g, int M, bool rows,
                                                        int64_t j0, int64_t jn, float *cbuf) {
    if (rows && M > 4)
        GEMV_DISPATCH(regs_512, g, M, g->dt, j0, jn, cbuf);
    else if (rows)
        GEMV_DISPATCH(rows_512, g, M, g->dt, j0, jn, cbuf);
    else
        GEMV_DISPATCH(cols_512, g, M, g->dt, j0, jn, cbuf);
}

/* ------------------------------------------------- AVX512-BF16 pairs */

/* Pair steps (two k each) per chunk of pairs_512. */
#define TPU_K_GEMV_KPAIRS 128

/* Row-major bf16 B with VDPBF16PS (gemm.h, "bf16 pair products"): each
 * step takes k and k + 1 at once, B's two rows interleaved into pairs
 * (row k in the high half) and A's pair broadcast from apair[t * M + i],
 * so each instruction does two steps of 16 chains, the in-order flushing
 * chain of matmul.h bit for bit (the one-time check of gemm_bf16.c). An
 * odd K ends with the pair (k, pad) and A's pad -0, whose product adds
 * nothing. The unpacks interleave within 128-bit lanes, so the low and
 * high accumulators hold columns {0-3, 8-11, 16-19, 24-27} and
 * {4-7, 12-15, 20-23, 28-31}; the stores put them back in order. Blocks
 * of 32 NV columns, NV as large as 16 accumulators allow (a wider walk
 * reads more of each row of B at once), then of 32; a last 16 take
 * single_512, whose chains are the same. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline
    __attribute__((always_inline)) int64_t
    pair_blocks(const gemv_args *g, int M, int NV, int64_t j0, int64_t v, int64_t jn, float *cbuf,
                int64_t t0, int64_t t1) {
    const uint32_t *apair = g->apair;
    const int64_t K = g->k, kfull = K / 2, rstep = g->rs * 2;
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29,
                                             30, 31);
    /* The inverse: columns in order (x: 0-15, y: 16-31) to the lanes. */
    const __m512i to_lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i to_hi = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30,
                                            31);
    for (; v + 32 * NV <= jn; v += 32 * NV) {
        __m512 lo[TPU_K_GEMV_MAX_M][8], hi[TPU_K_GEMV_MAX_M][8];
        for (int i = 0; i < M; i++)
            for (int u = 0; u < NV; u++) {
                if (t0 == 0) {
                    lo[i][u] = hi[i][u] = _mm512_setzero_ps();
                } else { /* the chains so far, in the lanes' order */
                    const float *c = cbuf + i * jn + v + 32 * u;
                    __m512 x = _mm512_load_ps(c), y = _mm512_load_ps(c + 16);
                    lo[i][u] = _mm512_permutex2var_ps(x, to_lo, y);
                    hi[i][u] = _mm512_permutex2var_ps(x, to_hi, y);
                }
            }
        const char *bp = g->b + (j0 + v) * 2;
        for (int64_t t = t0; t < t1; t++) {
            const char *r0 = bp + 2 * t * rstep;
            __m512bh av[TPU_K_GEMV_MAX_M];
            for (int i = 0; i < M; i++)
                av[i] = (__m512bh)_mm512_set1_epi32((int)apair[t * M + i]);
            for (int u = 0; u < NV; u++) {
                __m512i b0 = _mm512_loadu_si512(r0 + 64 * u);
                __m512i b1 = t < kfull ? _mm512_loadu_si512(r0 + rstep + 64 * u)
                                       : _mm512_setzero_si512();
                __m512bh plo = (__m512bh)_mm512_unpacklo_epi16(b1, b0);
                __m512bh phi = (__m512bh)_mm512_unpackhi_epi16(b1, b0);
                for (int i = 0; i < M; i++) {
                    lo[i][u] = _mm512_dpbf16_ps(lo[i][u], av[i], plo);
                    hi[i][u] = _mm512_dpbf16_ps(hi[i][u], av[i], phi);
                }
            }
        }
        for (int i = 0; i < M; i++)
            for (int u = 0; u < NV; u++) {
                float *c = cbuf + i * jn + v + 32 * u;
                _mm512_store_ps(c, _mm512_permutex2var_ps(lo[i][u], first, hi[i][u]));
                _mm512_store_ps(c + 16, _mm512_permutex2var_ps(lo[i][u], second, hi[i][u]));
            }
    }
    return v;
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline
    __attribute__((always_inline)) void
    pairs_512(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn, float *cbuf) {
    const int NV = M >= 5 ? 1 : M >= 3 ? 2 : 8 / M; /* 2 * M * NV <= 16 accumulators */
    const int64_t steps = (g->k + 1) / 2;
    /* Steps in chunks of TPU_K_GEMV_KPAIRS for every column of the block,
     * so that the chunk's rows of B (256 KB at most) stay in L2 while
     * each column block walks them. */
    int64_t v = 0;
    for (int64_t t0 = 0; t0 < steps; t0 += TPU_K_GEMV_KPAIRS) {
        int64_t t1 = steps - t0 < TPU_K_GEMV_KPAIRS ? steps : t0 + TPU_K_GEMV_KPAIRS;
        v = pair_blocks(g, M, NV, j0, 0, jn, cbuf, t0, t1);
        if (NV > 1)
            v = pair_blocks(g, M, 1, j0, v, jn, cbuf, t0, t1);
    }
    single_512(g, M, dt, j0, v, jn, cbuf);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void
block_pairs(const gemv_args *g, int M, int64_t j0, int64_t jn, float *cbuf) {
    GEMV_CASES(pairs_512, g, M, TPU_DTYPE_BF16, j0, jn, cbuf)
}

/* A's pairs for pairs_512: apair[t * M + i] holds row i's k = 2t in the
 * high half and 2t + 1 (or the pad -0) in the low half, as bf16 bits (the
 * values are bf16, so the top half of the f32 is exact). */
static void pack_a_pairs(const gemv_args *g, int M, uint32_t *apair) {
    const int64_t K = g->k;
    for (int64_t t = 0; 2 * t < K; t++)
        for (int i = 0; i < M; i++) {
            uint32_t hi, lo = 0x8000u;
            memcpy(&hi, &g->arow[i][2 * t], 4);
            if (2 * t + 1 < K) {
                memcpy(&lo, &g->arow[i][2 * t + 1], 4);
                lo >>= 16;
            }
            apair[t * M + i] = (hi & 0xffff0000u) | lo;
        }
}

/* ------------------------------------------------------------- AVX2 */

__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
rows_avx2(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn,
          float *cbuf) {
    enum { KG = 2 }; /* 16 ymm registers: 8 broadcasts, 2 rows of B (up to four rows) */
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k;
    for (int i = 0; i < M; i++)
        for (int64_t v = 0; v < jn; v += 8)
            _mm256_store_ps(cbuf + i * jn + v, _mm256_setzero_ps());
    int64_t k = 0;
    for (; k + KG <= K; k += KG) {
        __m256 av[TPU_K_GEMV_MAX_M][KG];
        const char *brow[KG];
        for (int q = 0; q < KG; q++) {
            for (int i = 0; i < M; i++)
                av[i][q] = _mm256_set1_ps(g->arow[i][k + q]);
            brow[q] = g->b + ((k + q) * g->rs + j0) * es;
        }
        for (int64_t v = 0; v < jn; v += 8) {
            __m256 bv[KG];
            for (int q = 0; q < KG; q++)
                bv[q] = tpu_k_load8_f32(brow[q] + v * es, dt);
            for (int i = 0; i < M; i++) {
                __m256 acc = _mm256_load_ps(cbuf + i * jn + v);
                for (int q = 0; q < KG; q++)
                    acc = _mm256_fmadd_ps(av[i][q], bv[q], acc);
                _mm256_store_ps(cbuf + i * jn + v, acc);
            }
        }
    }
    for (; k < K; k++) {
        const char *brow = g->b + (k * g->rs + j0) * es;
        for (int64_t v = 0; v < jn; v += 8) {
            __m256 bv = tpu_k_load8_f32(brow + v * es, dt);
            for (int i = 0; i < M; i++) {
                __m256 acc = _mm256_load_ps(cbuf + i * jn + v);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(g->arow[i][k]), bv, acc);
                _mm256_store_ps(cbuf + i * jn + v, acc);
            }
        }
    }
}

/* The register form of regs_512 with 8-column vectors: two per block for
 * up to four rows, one above (16 ymm registers). */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
regs_avx2(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn, float *cbuf) {
    const int NV = M <= 4 ? 2 : 1;
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k, bstep = g->rs * es;
    int64_t v = 0;
    for (; v + 8 * NV <= jn; v += 8 * NV) {
        __m256 acc[TPU_K_GEMV_MAX_M][2];
        for (int i = 0; i < M; i++)
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm256_setzero_ps();
        const char *bp = g->b + (j0 + v) * es;
        for (int64_t k = 0; k < K; k++, bp += bstep) {
            __m256 bv[2];
            for (int u = 0; u < NV; u++)
                bv[u] = tpu_k_load8_f32(bp + 8 * u * es, dt);
            for (int i = 0; i < M; i++) {
                __m256 av = _mm256_set1_ps(g->arow[i][k]);
                for (int u = 0; u < NV; u++)
                    acc[i][u] = _mm256_fmadd_ps(av, bv[u], acc[i][u]);
            }
        }
        for (int i = 0; i < M; i++)
            for (int u = 0; u < NV; u++)
                _mm256_store_ps(cbuf + i * jn + v + 8 * u, acc[i][u]);
    }
    for (; v < jn; v += 8) {
        __m256 acc[TPU_K_GEMV_MAX_M];
        for (int i = 0; i < M; i++)
            acc[i] = _mm256_setzero_ps();
        const char *bp = g->b + (j0 + v) * es;
        for (int64_t k = 0; k < K; k++, bp += bstep) {
            __m256 bv = tpu_k_load8_f32(bp, dt);
            for (int i = 0; i < M; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(g->arow[i][k]), bv, acc[i]);
        }
        for (int i = 0; i < M; i++)
            _mm256_store_ps(cbuf + i * jn + v, acc[i]);
    }
}

__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
cols_avx2(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn,
          float *cbuf) {
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k;
    for (int64_t v = 0; v < jn; v += 8) {
        const char *col0 = g->b + (j0 + v) * g->cs * es;
        const int64_t cstep = g->cs * es;
        __m256 acc[TPU_K_GEMV_MAX_M];
        for (int i = 0; i < M; i++)
            acc[i] = _mm256_setzero_ps();
        const char *next = v + 8 < jn ? col0 + 8 * cstep : NULL;
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 r[8], t[8];
            /* A line holds 16 f32 values (32 bf16): every second step. */
            if (next && k % 16 == 0)
                for (int q = 0; q < 8; q++)
                    __builtin_prefetch(next + q * cstep + k * es, 0, GEMV_PREFETCH);
            for (int q = 0; q < 8; q++)
                r[q] = tpu_k_load8_f32(col0 + q * cstep + k * es, dt);
            tpu_k_transpose8(r, t);
            for (int kk = 0; kk < 8; kk++)
                for (int i = 0; i < M; i++)
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(g->arow[i][k + kk]), t[kk], acc[i]);
        }
        for (; k < K; k++) {
            float col[8];
            for (int q = 0; q < 8; q++)
                col[q] = tpu_k_load_f32(col0 + q * cstep + k * es, dt);
            __m256 bv = _mm256_loadu_ps(col);
            for (int i = 0; i < M; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(g->arow[i][k]), bv, acc[i]);
        }
        for (int i = 0; i < M; i++)
            _mm256_store_ps(cbuf + i * jn + v, acc[i]);
    }
}

__attribute__((target("avx2,fma"))) static void block_avx2(const gemv_args *g, int M, bool rows,
                                                          int64_t j0, int64_t jn, float *cbuf) {
    if (rows && M > 4)
        GEMV_DISPATCH(regs_avx2, g, M, g->dt, j0, jn, cbuf);
    else if (rows)
        GEMV_DISPATCH(rows_avx2, g, M, g->dt, j0, jn, cbuf);
    else
        GEMV_DISPATCH(cols_avx2, g, M, g->dt, j0, jn, cbuf);
}
#undef GEMV_DISPATCH
#undef GEMV_CASES

#endif /* TPU_K_X86 */

/* ------------------------------------------------------------ driver */

bool tpu_k_gemv(const tpu_op *op, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
#if TPU_K_X86
    const tpu_tensor *a = &op->in[0], *b = &op->in[1];
    const int M = (int)(m1 - m0);
    const tpu_dtype dt = op->out.dtype;
    bool f32 = dt == TPU_DTYPE_F32 && op->p.mm.precision == TPU_PRECISION_HIGHEST;
    if (M < 1 || M > TPU_K_GEMV_MAX_M || !(f32 || dt == TPU_DTYPE_BF16) || a->dtype != dt ||
        b->dtype != dt || !tpu_k_is_aligned(b))
        return false;
    bool rows = b->strides[1] == 1;
    if (!rows && b->strides[0] != 1)
        return false;
    bool wide = tpu_k_cpu_has_avx512();
    if (!wide && !tpu_k_cpu_has_avx2_fma())
        return false;
    const int64_t K = a->sizes[1], width = wide ? 16 : 8;
    const int64_t nvec = (n1 - n0) / width * width;

    gemv_args g = {.b = b->data, .rs = b->strides[0], .cs = b->strides[1], .k = K, .dt = dt};
    float *converted = NULL;
    if (dt == TPU_DTYPE_F32 && a->strides[1] == 1 && tpu_k_is_aligned(a)) {
        for (int i = 0; i < M; i++)
            g.arow[i] = (const float *)a->data + (m0 + i) * a->strides[0];
    } else {
        converted = malloc((size_t)M * (size_t)K * sizeof(float) + 1);
        if (converted == NULL)
            return false; /* the packed GEMM reports the lack of memory */
        for (int i = 0; i < M; i++) {
            for (int64_t k = 0; k < K; k++)
                converted[i * K + k] = tpu_k_mm_load(a, m0 + i, k);
            g.arow[i] = converted + i * K;
        }
    }

    /* bf16 rows with VDPBF16PS where it computes the chain (gemm_bf16.c). */
    uint32_t *apair = NULL;
    if (rows && wide && dt == TPU_DTYPE_BF16 && tpu_k_gemm_pair_config_get() != NULL) {
        apair = malloc((size_t)M * (size_t)((K + 1) / 2) * sizeof *apair + 1);
        if (apair != NULL) {
            pack_a_pairs(&g, M, apair);
            g.apair = apair;
        }
    }

    _Alignas(64) float cbuf[TPU_K_GEMV_CBUF];
    const bool flush = tpu_k_mm_flushes(op);
    const int64_t js = block_columns(M);
    for (int64_t j0 = n0; j0 < n0 + nvec; j0 += js) {
        int64_t jn = n0 + nvec - j0 < js ? n0 + nvec - j0 : js;
        unsigned int saved = _mm_getcsr();
        if (flush)
            _mm_setcsr(saved | TPU_K_MXCSR_FLUSH);
        if (apair != NULL)
            block_pairs(&g, M, j0, jn, cbuf);
        else if (wide)
            block_512(&g, M, rows, j0, jn, cbuf);
        else
            block_avx2(&g, M, rows, j0, jn, cbuf);
        if (flush)
            _mm_setcsr(saved);
        tpu_k_gemm_store_block(op, m0, M, j0, jn, cbuf, jn);
    }
    free(converted);
    free(apair);
    if (n0 + nvec < n1)
        tpu_k_mm_ref_block(op, m0, m1, n0 + nvec, n1);
    return true;
#else
    (void)op, (void)m0, (void)m1, (void)n0, (void)n1;
    return false;
#endif
}
