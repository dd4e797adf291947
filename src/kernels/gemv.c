/* Skinny matrix products: MM/ADDMM shares of at most TPU_K_GEMV_MAX_M
 * output rows (decoding, where M is the batch). The packed GEMM would pad
 * them to its register tile and pack all of B for a few rows that read
 * it once; here B is read once, in place, and every output is still the
 * in-order chain of matmul.h, so the bytes equal the reference kernel's.
 *
 * Two forms, by B's layout:
 *   row-major B (unit column stride): each k step is a vector of columns;
 *       a block of columns (16 KB of accumulators) keeps them in a
 *       buffer in L1, and each pass over it takes KG steps of k (the
 *       chains stay in order of k);
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
} gemv_args;

/* ---------------------------------------------------------- AVX-512 */

/* Row-major B: cbuf[i * jn + v] (i < M, v < jn, jn a multiple of 16)
 * gets the chains of columns [j0, j0 + jn), KG k steps per pass (four for
 * up to four rows, two above: the broadcasts stay in registers). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
rows_512(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn, float *cbuf) {
    const int KG = M <= 4 ? 4 : 2;
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k;
    for (int i = 0; i < M; i++)
        for (int64_t v = 0; v < jn; v += 16)
            _mm512_store_ps(cbuf + i * jn + v, _mm512_setzero_ps());
    int64_t k = 0;
    for (; k + KG <= K; k += KG) {
        __m512 av[TPU_K_GEMV_MAX_M][4];
        const char *brow[4];
        for (int q = 0; q < KG; q++) {
            for (int i = 0; i < M; i++)
                av[i][q] = _mm512_set1_ps(g->arow[i][k + q]);
            brow[q] = g->b + ((k + q) * g->rs + j0) * es;
        }
        for (int64_t v = 0; v < jn; v += 16) {
            __m512 bv[4];
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
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m512 r[16], t[16];
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
    if (rows)
        GEMV_DISPATCH(rows_512, g, M, g->dt, j0, jn, cbuf);
    else
        GEMV_DISPATCH(cols_512, g, M, g->dt, j0, jn, cbuf);
}

/* ------------------------------------------------------------- AVX2 */

__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
rows_avx2(const gemv_args *g, int M, tpu_dtype dt, int64_t j0, int64_t jn,
          float *cbuf) {
    const int KG = M <= 4 ? 2 : 1; /* 16 ymm registers: up to 8 broadcasts, KG rows of B */
    const int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2, K = g->k;
    for (int i = 0; i < M; i++)
        for (int64_t v = 0; v < jn; v += 8)
            _mm256_store_ps(cbuf + i * jn + v, _mm256_setzero_ps());
    int64_t k = 0;
    for (; k + KG <= K; k += KG) {
        __m256 av[TPU_K_GEMV_MAX_M][2];
        const char *brow[2];
        for (int q = 0; q < KG; q++) {
            for (int i = 0; i < M; i++)
                av[i][q] = _mm256_set1_ps(g->arow[i][k + q]);
            brow[q] = g->b + ((k + q) * g->rs + j0) * es;
        }
        for (int64_t v = 0; v < jn; v += 8) {
            __m256 bv[2];
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
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 r[8], t[8];
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
    if (rows)
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

    _Alignas(64) float cbuf[TPU_K_GEMV_CBUF];
    const bool flush = tpu_k_mm_flushes(op);
    const int64_t js = block_columns(M);
    for (int64_t j0 = n0; j0 < n0 + nvec; j0 += js) {
        int64_t jn = n0 + nvec - j0 < js ? n0 + nvec - j0 : js;
        unsigned int saved = _mm_getcsr();
        if (flush)
            _mm_setcsr(saved | TPU_K_MXCSR_FLUSH);
        if (wide)
            block_512(&g, M, rows, j0, jn, cbuf);
        else
            block_avx2(&g, M, rows, j0, jn, cbuf);
        if (flush)
            _mm_setcsr(saved);
        tpu_k_gemm_store_block(op, m0, M, j0, jn, cbuf, jn);
    }
    free(converted);
    if (n0 + nvec < n1)
        tpu_k_mm_ref_block(op, m0, m1, n0 + nvec, n1);
    return true;
#else
    (void)op, (void)m0, (void)m1, (void)n0, (void)n1;
    return false;
#endif
}
