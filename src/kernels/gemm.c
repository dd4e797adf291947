/* The fast MM/ADDMM kernel: a packed, cache-blocked f32 GEMM in the BLIS
 * style, for f32 (all precisions), f16 and bf16 operands. f64 and K == 0
 * go to the reference kernel.
 *
 * Loops, outermost first, over this share's rows [m0, m1) and columns
 * [n0, n1) (see tpu_k_mm_split):
 *   ip  rows in panels of 4 mc     C block (4 mc x nc, f32) in memory
 *   jc  columns in blocks of nc    B panel (kc x nc) stays in L3
 *   pc  packed k in blocks of kc   (packed k = k * passes, matmul.h);
 *                                  B is packed here, once per panel
 *   ic  rows in blocks of mc       A block (mc x kc) stays in L2
 *   jr, ir  micro-tiles mr x nr    one B micro-panel stays in L1
 * The micro-kernel keeps an mr x nr tile of accumulators in registers and
 * continues the tile's chain from the f32 buffer C after the first pc
 * block, so every output is the single in-order fma chain of matmul.h:
 * the result equals the reference kernel's bit for bit. Operands are
 * converted (f16/bf16 -> f32, precision parts) while packing, and the
 * alpha/beta/bias step and rounding to out.dtype happen when a C block is
 * written out.
 *
 * Chains of bf16 values (matmul.h, tpu_k_mm_flushes) flush subnormals.
 * They run gemm_bf16.c's pair kernel where the CPU has VDPBF16PS (two k
 * steps per 32-bit pair, twice the products per instruction), else an
 * f32 kernel under MXCSR's FTZ/DAZ, else the portable flushing kernel;
 * all three give the reference kernel's bytes. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "convert.h"
#include "gemm.h"
#include "kernels_internal.h"
#include "matmul.h"
#include "strided.h"
#include "transpose_simd.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* ------------------------------------------------------ micro-kernels */

/* Each kernel body is written once over the strides of A and inlined
 * three times: with csa == 1 (row-major A: attention's key and value
 * rows), with rsa == 1 (packed panels and column-major A) and general,
 * so that the common forms address A with constant steps. */

/* Portable 4x8 kernel (fmaf keeps the chain identical on every CPU). */
static inline __attribute__((always_inline)) void gemm_c_4x8_body(int64_t kc, const float *a,
                                                                 int64_t rsa, int64_t csa,
                                                                 const float *b, int64_t ldb,
                                                                 float *c, int64_t ldc,
                                                                 bool accumulate) {
    float acc[4][8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < 4; i++) {
            const float x = a[i * rsa + k * csa];
            for (int j = 0; j < 8; j++)
                acc[i][j] = fmaf(x, b[k * ldb + j], acc[i][j]);
        }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            c[i * ldc + j] = acc[i][j];
}

static void tpu_k_gemm_f32_c_4x8(int64_t kc, const float *a, int64_t rsa, int64_t csa,
                                 const float *b, int64_t ldb, float *c, int64_t ldc,
                                 bool accumulate) {
    if (csa == 1)
        gemm_c_4x8_body(kc, a, rsa, 1, b, ldb, c, ldc, accumulate);
    else if (rsa == 1)
        gemm_c_4x8_body(kc, a, 1, csa, b, ldb, c, ldc, accumulate);
    else
        gemm_c_4x8_body(kc, a, rsa, csa, b, ldb, c, ldc, accumulate);
}

/* The portable kernel for chains of bf16 values: the same tile with
 * matmul.h's flushing step (the SIMD kernels get it from MXCSR). Packed
 * panels only (rsa = 1). */
static void tpu_k_gemm_f32_c_4x8_flush(int64_t kc, const float *a, int64_t rsa, int64_t csa,
                                       const float *b, int64_t ldb, float *c, int64_t ldc,
                                       bool accumulate) {
    (void)rsa;
    float acc[4][8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++)
                acc[i][j] = tpu_k_mm_fma_flush(a[i + k * csa], b[k * ldb + j], acc[i][j]);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            c[i * ldc + j] = acc[i][j];
}

static bool always_available(void) {
    return true;
}

#if TPU_K_X86
/* AVX2+FMA 6x16 kernel: 12 ymm accumulators (6 rows x 2 halves of 8),
 * two B loads and six A broadcasts per k. Written out row by row so that
 * the accumulators live in registers (an array would be kept in memory
 * at -O2). */
#define TPU_K_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
gemm_avx2_6x16_body(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *b,
                    int64_t ldb, float *c, int64_t ldc, bool accumulate) {
#define DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
    TPU_K_ROWS6(DECL)
#undef DECL
    if (accumulate) {
#define LOAD(i)                                                                                    \
    c##i##0 = _mm256_loadu_ps(c + i * ldc);                                                        \
    c##i##1 = _mm256_loadu_ps(c + i * ldc + 8);
        TPU_K_ROWS6(LOAD)
#undef LOAD
    }
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * ldb), b1 = _mm256_loadu_ps(b + k * ldb + 8);
        const float *ak = a + k * csa;
#define STEP(i)                                                                                    \
    {                                                                                              \
        __m256 ai = _mm256_broadcast_ss(ak + i * rsa);                                             \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                                \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                                \
    }
        TPU_K_ROWS6(STEP)
#undef STEP
    }
#define STORE(i)                                                                                   \
    _mm256_storeu_ps(c + i * ldc, c##i##0);                                                        \
    _mm256_storeu_ps(c + i * ldc + 8, c##i##1);
    TPU_K_ROWS6(STORE)
#undef STORE
}
#undef TPU_K_ROWS6

__attribute__((target("avx2,fma"))) static void
tpu_k_gemm_f32_avx2_6x16(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *b,
                         int64_t ldb, float *c, int64_t ldc, bool accumulate) {
    if (csa == 1)
        gemm_avx2_6x16_body(kc, a, rsa, 1, b, ldb, c, ldc, accumulate);
    else if (rsa == 1)
        gemm_avx2_6x16_body(kc, a, 1, csa, b, ldb, c, ldc, accumulate);
    else
        gemm_avx2_6x16_body(kc, a, rsa, csa, b, ldb, c, ldc, accumulate);
}

/* AVX-512 8x32 kernel: 16 zmm accumulators (8 rows x 2 halves of 16),
 * two B loads and eight A broadcasts per k; 32 registers leave room for
 * the loads, and the 16 independent chains cover the fma latency. */
#define TPU_K_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
gemm_avx512_8x32_body(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *b,
                      int64_t ldb, float *c, int64_t ldc, bool accumulate) {
#define DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
    TPU_K_ROWS8(DECL)
#undef DECL
    if (accumulate) {
#define LOAD(i)                                                                                    \
    c##i##0 = _mm512_loadu_ps(c + i * ldc);                                                        \
    c##i##1 = _mm512_loadu_ps(c + i * ldc + 16);
        TPU_K_ROWS8(LOAD)
#undef LOAD
    }
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
        const float *ak = a + k * csa;
#define STEP(i)                                                                                    \
    {                                                                                              \
        __m512 ai = _mm512_set1_ps(ak[i * rsa]);                                                   \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0);                                                \
        c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1);                                                \
    }
        TPU_K_ROWS8(STEP)
#undef STEP
    }
#define STORE(i)                                                                                   \
    _mm512_storeu_ps(c + i * ldc, c##i##0);                                                        \
    _mm512_storeu_ps(c + i * ldc + 16, c##i##1);
    TPU_K_ROWS8(STORE)
#undef STORE
}
#undef TPU_K_ROWS8

__attribute__((target("avx512f"))) static void
tpu_k_gemm_f32_avx512_8x32(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *b,
                           int64_t ldb, float *c, int64_t ldc, bool accumulate) {
    if (csa == 1)
        gemm_avx512_8x32_body(kc, a, rsa, 1, b, ldb, c, ldc, accumulate);
    else if (rsa == 1)
        gemm_avx512_8x32_body(kc, a, 1, csa, b, ldb, c, ldc, accumulate);
    else
        gemm_avx512_8x32_body(kc, a, rsa, csa, b, ldb, c, ldc, accumulate);
}
#endif

/* First available entry wins: fastest first, portable last. The
 * AVX-512 row's B panel (kc x nc = 1 MiB) fits a 2 MiB L2 beside the A
 * block: on a Xeon (Emerald Rapids) 1024 ran 3-5 % faster than 2048 at
 * 128x768x3072 and 1024^3, interleaved in one process. */
static const tpu_k_gemm_config k_gemm_configs[] = {
#if TPU_K_X86
    {"tpu_k_gemm_f32_avx512_8x32", 8, 32, 144, 256, 1024, tpu_k_gemm_f32_avx512_8x32,
     tpu_k_cpu_has_avx512},
    {"tpu_k_gemm_f32_avx2_6x16", 6, 16, 144, 256, 2048, tpu_k_gemm_f32_avx2_6x16,
     tpu_k_cpu_has_avx2_fma},
#endif
    {"tpu_k_gemm_f32_c_4x8", 4, 8, 128, 256, 2048, tpu_k_gemm_f32_c_4x8, always_available},
};

const tpu_k_gemm_config *tpu_k_gemm_config_get(void) {
    size_t n = sizeof k_gemm_configs / sizeof k_gemm_configs[0];
    for (size_t i = 0; i + 1 < n; i++)
        if (k_gemm_configs[i].available())
            return &k_gemm_configs[i];
    return &k_gemm_configs[n - 1];
}

/* ------------------------------------------------------------ packing */

typedef tpu_k_gemm_operands pack_ctx;

/* Packs rows [i0, i0 + mb) x packed k [p0, p0 + kb) of A into panels of
 * mr rows: panel q holds, for each packed k t, the values of its mr rows
 * (dst[q * kb * mr + t * mr + r]); rows past mb are zero. */
static inline __attribute__((always_inline)) void pack_a_as(const pack_ctx *cx, tpu_dtype dt,
                                                            tpu_precision prec, int passes,
                                                            int64_t i0, int64_t mb, int64_t p0,
                                                            int64_t kb, int mr, float *dst) {
    for (int64_t ir = 0; ir < mb; ir += mr) {
        float *panel = dst + ir * kb;
        int64_t rows = mb - ir < mr ? mb - ir : mr;
        for (int64_t t = 0; t < kb; t++) {
            int64_t kk = p0 + t, k = kk / passes;
            int part = (int)(kk % passes);
            float *col = panel + t * mr;
            for (int64_t r = 0; r < rows; r++)
                col[r] = tpu_k_gemm_packed_value(cx->a, i0 + ir + r, k, dt, prec, TPU_K_MM_LHS, part);
            for (int64_t r = rows; r < mr; r++)
                col[r] = 0.0f;
        }
    }
}

/* Packs packed k [p0, p0 + kb) x columns [j0, j0 + nb) of B into panels
 * of nr columns (dst[q * kb * nr + t * nr + c]); columns past nb are zero. */
static inline __attribute__((always_inline)) void pack_b_as(const pack_ctx *cx, tpu_dtype dt,
                                                            tpu_precision prec, int passes,
                                                            int64_t p0, int64_t kb, int64_t j0,
                                                            int64_t nb, int nr, float *dst) {
    for (int64_t jr = 0; jr < nb; jr += nr) {
        float *panel = dst + jr * kb;
        int64_t cols = nb - jr < nr ? nb - jr : nr;
        for (int64_t t = 0; t < kb; t++) {
            int64_t kk = p0 + t, k = kk / passes;
            int part = (int)(kk % passes);
            float *row = panel + t * nr;
            for (int64_t c = 0; c < cols; c++)
                row[c] = tpu_k_gemm_packed_value(cx->b, k, j0 + jr + c, dt, prec, TPU_K_MM_RHS, part);
            for (int64_t c = cols; c < nr; c++)
                row[c] = 0.0f;
        }
    }
}

/* The operand kinds packing specialises for. */
typedef enum { PACK_F32, PACK_F32_MEDIUM, PACK_F32_HIGH, PACK_F16, PACK_BF16 } pack_kind;

static pack_kind pack_kind_of(const pack_ctx *cx) {
    if (cx->dt == TPU_DTYPE_F16)
        return PACK_F16;
    if (cx->dt == TPU_DTYPE_BF16)
        return PACK_BF16;
    return cx->prec == TPU_PRECISION_HIGH     ? PACK_F32_HIGH
           : cx->prec == TPU_PRECISION_MEDIUM ? PACK_F32_MEDIUM
                                              : PACK_F32;
}

#if TPU_K_X86
/* A with unit column stride (row-major, as activations are), aligned, f32
 * at HIGHEST or bf16, panels of 8 rows: each 8 x 8 block of rows and k is
 * read as 8 runs along A's rows and transposed in registers into 8 packed
 * columns. The values are pack_a_as's; rows and k past the whole blocks
 * go through it. The scalar pack read A down its columns, one element at
 * a time: at M = 128 it took a quarter of the driver's time. */
__attribute__((target("avx2,fma"))) static void pack_a_rows8(const pack_ctx *cx, int64_t i0,
                                                             int64_t mb, int64_t p0, int64_t kb,
                                                             float *dst) {
    const tpu_tensor *a = cx->a;
    const int64_t es = (int64_t)tpu_dtype_size(cx->dt), rstep = a->strides[0] * es;
    const int64_t mw = mb / 8 * 8, tw = kb / 8 * 8;
    for (int64_t ir = 0; ir < mw; ir += 8) {
        float *panel = dst + ir * kb;
        const char *rows = (const char *)a->data + (i0 + ir) * rstep + p0 * es;
        for (int64_t t0 = 0; t0 < tw; t0 += 8) {
            __m256 r[8], t[8];
            for (int q = 0; q < 8; q++)
                r[q] = tpu_k_load8_f32(rows + q * rstep + t0 * es, cx->dt);
            tpu_k_transpose8(r, t);
            for (int q = 0; q < 8; q++)
                _mm256_storeu_ps(panel + (t0 + q) * 8, t[q]);
        }
        for (int64_t t = tw; t < kb; t++)
            for (int q = 0; q < 8; q++)
                panel[t * 8 + q] = tpu_k_load_f32(rows + q * rstep + t * es, cx->dt);
    }
}
#endif

static void pack_a(const pack_ctx *cx, int64_t i0, int64_t mb, int64_t p0, int64_t kb, int mr,
                   float *dst) {
#if TPU_K_X86
    pack_kind kind = pack_kind_of(cx);
    if (mr == 8 && cx->a->strides[1] == 1 && tpu_k_is_aligned(cx->a) &&
        (kind == PACK_F32 || kind == PACK_BF16) && tpu_k_cpu_has_avx2_fma()) {
        int64_t mw = mb / 8 * 8;
        pack_a_rows8(cx, i0, mb, p0, kb, dst);
        if (mw == mb)
            return;
        /* The last, partial panel. */
        i0 += mw, dst += mw * kb, mb -= mw;
    }
#endif
    switch (pack_kind_of(cx)) {
    case PACK_F32: pack_a_as(cx, TPU_DTYPE_F32, TPU_PRECISION_HIGHEST, 1, i0, mb, p0, kb, mr, dst); break;
    case PACK_F32_MEDIUM: pack_a_as(cx, TPU_DTYPE_F32, TPU_PRECISION_MEDIUM, 1, i0, mb, p0, kb, mr, dst); break;
    case PACK_F32_HIGH: pack_a_as(cx, TPU_DTYPE_F32, TPU_PRECISION_HIGH, 3, i0, mb, p0, kb, mr, dst); break;
    case PACK_F16: pack_a_as(cx, TPU_DTYPE_F16, TPU_PRECISION_HIGHEST, 1, i0, mb, p0, kb, mr, dst); break;
    case PACK_BF16: pack_a_as(cx, TPU_DTYPE_BF16, TPU_PRECISION_HIGHEST, 1, i0, mb, p0, kb, mr, dst); break;
    }
}

#if TPU_K_X86
/* pack_b_rows for f32 into 32-column panels on AVX-512: each panel row
 * is two 64-byte moves (the baseline build's memcpy moved 16 bytes at a
 * time); a partial last panel goes through the caller. */
__attribute__((target("avx512f"))) static void pack_b_rows32_512(const char *src, int64_t ld,
                                                                int64_t kb, int64_t nw,
                                                                float *dst) {
    for (int64_t t = 0; t < kb; t++, src += ld)
        for (int64_t jr = 0; jr < nw; jr += 32) {
            float *row = dst + jr * kb + t * 32;
            _mm512_storeu_ps(row, _mm512_loadu_ps(src + jr * 4));
            _mm512_storeu_ps(row + 16, _mm512_loadu_ps(src + jr * 4 + 64));
        }
}
#endif

/* B with unit column stride, aligned, one pass, no precision parts (f32
 * HIGHEST, f16, bf16): each panel row is a contiguous run of B's row k,
 * converted with the run conversions; same values as pack_b_as. */
static bool pack_b_rows(const pack_ctx *cx, int64_t p0, int64_t kb, int64_t j0, int64_t nb,
                        int nr, float *dst) {
    const tpu_tensor *b = cx->b;
    pack_kind kind = pack_kind_of(cx);
    if (b->strides[1] != 1 || !tpu_k_is_aligned(b) ||
        (kind != PACK_F32 && kind != PACK_F16 && kind != PACK_BF16))
        return false;
    int64_t es = (int64_t)tpu_dtype_size(cx->dt);
#if TPU_K_X86
    if (kind == PACK_F32 && nr == 32 && tpu_k_cpu_has_avx512()) {
        int64_t nw = nb / 32 * 32;
        pack_b_rows32_512((const char *)b->data + (p0 * b->strides[0] + j0) * es,
                          b->strides[0] * es, kb, nw, dst);
        if (nw == nb)
            return true;
        j0 += nw, dst += nw * kb, nb -= nw; /* the last, partial panel */
    }
#endif
    /* Row by row of B, so that the reads run along its rows (one stream
     * the prefetchers follow) and the writes go to each panel's row t. */
    for (int64_t t = 0; t < kb; t++) {
        const char *src = (const char *)b->data + ((p0 + t) * b->strides[0] + j0) * es;
        for (int64_t jr = 0; jr < nb; jr += nr) {
            float *row = dst + jr * kb + t * nr;
            int64_t cols = nb - jr < nr ? nb - jr : nr;
            tpu_k_cvt_to_f32(row, src + jr * es, cx->dt, cols);
            for (int64_t c = cols; c < nr; c++)
                row[c] = 0.0f;
        }
    }
    return true;
}

#if TPU_K_X86
/* pack_b_cols for one ISA: W x W blocks (W = 16 or 8) of columns c0 ..
 * c0+W and k t0 .. t0+W, each read as W runs down B's columns and
 * transposed in registers; edges element by element. */
#define PACK_B_COLS(NAME, TARGET, W, VEC, LOAD, TRANSPOSE, STORE)                                  \
    __attribute__((target(TARGET))) static void NAME(const pack_ctx *cx, int64_t p0, int64_t kb,   \
                                                     int64_t j0, int64_t nb, int nr, float *dst) { \
        const tpu_tensor *b = cx->b;                                                               \
        const int64_t es = (int64_t)tpu_dtype_size(cx->dt), cstep = b->strides[1] * es;           \
        for (int64_t jr = 0; jr < nb; jr += nr) {                                                  \
            float *panel = dst + jr * kb;                                                          \
            int64_t cols = nb - jr < nr ? nb - jr : nr, cw = cols / W * W, tw = kb / W * W;         \
            for (int64_t c0 = 0; c0 < cw; c0 += W) {                                               \
                const char *col = (const char *)b->data + (j0 + jr + c0) * cstep + p0 * es;        \
                for (int64_t t0 = 0; t0 < tw; t0 += W) {                                           \
                    VEC r[W], t[W];                                                                \
                    for (int q = 0; q < W; q++)                                                    \
                        r[q] = LOAD(col + q * cstep + t0 * es, cx->dt);                            \
                    TRANSPOSE(r, t);                                                               \
                    for (int q = 0; q < W; q++)                                                    \
                        STORE(panel + (t0 + q) * nr + c0, t[q]);                                   \
                }                                                                                  \
            }                                                                                      \
            for (int64_t t = 0; t < kb; t++) {                                                     \
                float *row = panel + t * nr;                                                       \
                int64_t c = t < tw ? cw : 0;                                                       \
                for (; c < cols; c++)                                                              \
                    row[c] = tpu_k_load_f32((const char *)b->data + (j0 + jr + c) * cstep +        \
                                                (p0 + t) * es,                                     \
                                            cx->dt);                                               \
                for (; c < nr; c++)                                                                \
                    row[c] = 0.0f;                                                                 \
            }                                                                                      \
        }                                                                                          \
    }
PACK_B_COLS(pack_b_cols_512, "avx512f", 16, __m512, tpu_k_load16_f32, tpu_k_transpose16,
            _mm512_storeu_ps)
PACK_B_COLS(pack_b_cols_avx2, "avx2,fma", 8, __m256, tpu_k_load8_f32, tpu_k_transpose8,
            _mm256_storeu_ps)
#undef PACK_B_COLS
#endif

/* B with unit row stride (a Linear's weight, transposed), aligned f32 at
 * HIGHEST or bf16: the same values as pack_b_as, transposed in registers
 * where the micro-kernel's width allows. */
static bool pack_b_cols(const pack_ctx *cx, int64_t p0, int64_t kb, int64_t j0, int64_t nb,
                        int nr, float *dst) {
#if TPU_K_X86
    pack_kind kind = pack_kind_of(cx);
    if (cx->b->strides[0] != 1 || !tpu_k_is_aligned(cx->b) ||
        (kind != PACK_F32 && kind != PACK_BF16))
        return false;
    if (nr % 16 == 0 && tpu_k_cpu_has_avx512()) {
        pack_b_cols_512(cx, p0, kb, j0, nb, nr, dst);
        return true;
    }
    if (nr % 8 == 0 && tpu_k_cpu_has_avx2_fma()) {
        pack_b_cols_avx2(cx, p0, kb, j0, nb, nr, dst);
        return true;
    }
#else
    (void)cx, (void)p0, (void)kb, (void)j0, (void)nb, (void)nr, (void)dst;
#endif
    return false;
}

static void pack_b(const pack_ctx *cx, int64_t p0, int64_t kb, int64_t j0, int64_t nb, int nr,
                   float *dst) {
    if (pack_b_rows(cx, p0, kb, j0, nb, nr, dst) || pack_b_cols(cx, p0, kb, j0, nb, nr, dst))
        return;
    switch (pack_kind_of(cx)) {
    case PACK_F32: pack_b_as(cx, TPU_DTYPE_F32, TPU_PRECISION_HIGHEST, 1, p0, kb, j0, nb, nr, dst); break;
    case PACK_F32_MEDIUM: pack_b_as(cx, TPU_DTYPE_F32, TPU_PRECISION_MEDIUM, 1, p0, kb, j0, nb, nr, dst); break;
    case PACK_F32_HIGH: pack_b_as(cx, TPU_DTYPE_F32, TPU_PRECISION_HIGH, 3, p0, kb, j0, nb, nr, dst); break;
    case PACK_F16: pack_b_as(cx, TPU_DTYPE_F16, TPU_PRECISION_HIGHEST, 1, p0, kb, j0, nb, nr, dst); break;
    case PACK_BF16: pack_b_as(cx, TPU_DTYPE_BF16, TPU_PRECISION_HIGHEST, 1, p0, kb, j0, nb, nr, dst); break;
    }
}

/* ADDMM's finish of one run of n outputs: dst[j] = fmaf(alpha, acc[j],
 * beta * bias[j * bstep]), or alpha * acc[j] when bias is NULL (beta ==
 * 0, the bias unread): tpu_k_mm_store_f32's arithmetic for alpha != 0,
 * element for element (ISO C mode does not contract beta * bias into the
 * fma). Built per ISA so that fmaf is one instruction per vector. */
static inline __attribute__((always_inline)) void addmm_run_body(float *dst, const float *acc,
                                                                 const float *bias, int64_t bstep,
                                                                 int64_t n, float alpha,
                                                                 float beta) {
    if (bias == NULL)
        for (int64_t j = 0; j < n; j++)
            dst[j] = alpha * acc[j];
    else if (bstep == 0)
        for (int64_t j = 0; j < n; j++)
            dst[j] = fmaf(alpha, acc[j], beta * bias[0]);
    else
        for (int64_t j = 0; j < n; j++)
            dst[j] = fmaf(alpha, acc[j], beta * bias[j]);
}

TPU_K_ISA_VARIANTS(static, addmm_run, addmm_run,
                   (float *dst, const float *acc, const float *bias, int64_t bstep, int64_t n,
                    float alpha, float beta),
                   (dst, acc, bias, bstep, n, alpha, beta))

/* Outputs per run of addmm_store_rows (two runs of this many floats live
 * on the stack). */
enum { ADDMM_RUN = 512 };

/* ADDMM into an out of f32, f16 or bf16 whose rows are contiguous and
 * aligned, alpha != 0, and a bias (when beta != 0) of a floating dtype
 * whose rows are contiguous or one broadcast value: finishes the block a
 * run of a row at a time (addmm_run; f16/bf16 bias runs converted first,
 * f16/bf16 out rounded by the run conversion). The same bytes as
 * tpu_k_mm_store_f32. Returns false, writing nothing, for other forms. */
static bool addmm_store_rows(const tpu_op *op, int64_t ic, int64_t mb, int64_t jc, int64_t nb,
                             const float *cbuf, int64_t ldc) {
    const tpu_tensor *o = &op->out, *c = &op->in[2];
    bool use_bias = op->p.mm.beta != 0.0;
    bool float_out = o->dtype == TPU_DTYPE_F32 || o->dtype == TPU_DTYPE_F16 ||
                     o->dtype == TPU_DTYPE_BF16;
    bool float_bias = c->dtype == TPU_DTYPE_F32 || c->dtype == TPU_DTYPE_F16 ||
                      c->dtype == TPU_DTYPE_BF16;
    if (op->fn != TPU_MATMUL_ADDMM || op->p.mm.alpha == 0.0 || !float_out ||
        o->strides[1] != 1 || !tpu_k_is_aligned(o) ||
        (use_bias && (!float_bias || !tpu_k_is_aligned(c) || (c->strides[1] != 0 && c->strides[1] != 1))))
        return false;
    const float alpha = (float)op->p.mm.alpha, beta = (float)op->p.mm.beta;
    float bias_run[ADDMM_RUN], out_run[ADDMM_RUN];
    for (int64_t i = 0; i < mb; i++)
        for (int64_t j0 = 0; j0 < nb; j0 += ADDMM_RUN) {
            int64_t n = nb - j0 < ADDMM_RUN ? nb - j0 : ADDMM_RUN;
            const float *bias = NULL;
            int64_t bstep = use_bias ? c->strides[1] : 0;
            if (use_bias) {
                const void *bp = tpu_k_ptr(c, (ic + i) * c->strides[0] + (jc + j0) * c->strides[1]);
                if (c->dtype == TPU_DTYPE_F32)
                    bias = bp;
                else if (bstep == 0)
                    bias_run[0] = tpu_k_load_f32(bp, c->dtype), bias = bias_run;
                else
                    tpu_k_cvt_to_f32(bias_run, bp, c->dtype, n), bias = bias_run;
            }
            void *dst = tpu_k_ptr(o, (ic + i) * o->strides[0] + jc + j0);
            if (o->dtype == TPU_DTYPE_F32) {
                addmm_run(dst, cbuf + i * ldc + j0, bias, bstep, n, alpha, beta);
            } else {
                addmm_run(out_run, cbuf + i * ldc + j0, bias, bstep, n, alpha, beta);
                tpu_k_cvt_from_f32(dst, o->dtype, out_run, n);
            }
        }
    return true;
}

/* Writes a finished C block (mb x nb at rows ic, columns jc) to out. MM
 * with an aligned f32 out stores the accumulators directly, ADDMM's
 * common forms go through addmm_store_rows, everything else through
 * tpu_k_mm_store_f32, which gives the same bytes. */
void tpu_k_gemm_store_block(const tpu_op *op, int64_t ic, int64_t mb, int64_t jc, int64_t nb,
                            const float *cbuf, int64_t ldc) {
    const tpu_tensor *o = &op->out;
    if (op->fn == TPU_MATMUL_MM && o->dtype == TPU_DTYPE_F32 && tpu_k_is_aligned(o)) {
        float *base = (float *)o->data;
        for (int64_t i = 0; i < mb; i++) {
            float *row = base + (ic + i) * o->strides[0] + jc * o->strides[1];
            if (o->strides[1] == 1) {
                memcpy(row, cbuf + i * ldc, (size_t)nb * sizeof(float));
                continue;
            }
            for (int64_t j = 0; j < nb; j++)
                row[j * o->strides[1]] = cbuf[i * ldc + j];
        }
        return;
    }
    /* MM into a row-contiguous, aligned f16/bf16 out: round whole rows
     * with the run conversion (the same rounding as tpu_k_mm_store_f32). */
    if (op->fn == TPU_MATMUL_MM && o->strides[1] == 1 && tpu_k_is_aligned(o) &&
        (o->dtype == TPU_DTYPE_F16 || o->dtype == TPU_DTYPE_BF16)) {
        for (int64_t i = 0; i < mb; i++)
            tpu_k_cvt_from_f32(tpu_k_ptr(o, (ic + i) * o->strides[0] + jc), o->dtype,
                               cbuf + i * ldc, nb);
        return;
    }
    if (addmm_store_rows(op, ic, mb, jc, nb, cbuf, ldc))
        return;
    for (int64_t i = 0; i < mb; i++)
        for (int64_t j = 0; j < nb; j++)
            tpu_k_mm_store_f32(op, ic + i, jc + j, cbuf[i * ldc + j]);
}

/* Per-thread packing buffers, kept between calls. A B panel and a C
 * block reach megabytes, and a fresh allocation that large is a fresh
 * mapping whose pages fault on every call; these grow to the largest
 * size a thread has needed and are freed when the thread exits. */
enum { WS_A, WS_B, WS_C, WS_AP, WS_BP, WS_SLOTS };

/* The largest A or B panel a claimed product keeps packed
 * (gemm_run.apanel, bpanel): 576 rows of K = 3640, or K x 1024 columns
 * of K = 2048. */
#define PANEL_MAX_BYTES ((int64_t)8 << 20)
typedef struct {
    float *p[WS_SLOTS];
    size_t bytes[WS_SLOTS];
} gemm_workspace;

static pthread_key_t g_ws_key;
static bool g_ws_key_ok;
static pthread_once_t g_ws_once = PTHREAD_ONCE_INIT;

static void ws_free(void *v) {
    gemm_workspace *w = v;
    for (int i = 0; i < WS_SLOTS; i++)
        free(w->p[i]);
    free(w);
}

static void ws_key_init(void) {
    g_ws_key_ok = pthread_key_create(&g_ws_key, ws_free) == 0;
}

/* A buffer of *bytes (a multiple of 64), or NULL. One of a megabyte or
 * more (the B panel, the C block) is rounded up to whole 2 MiB pages and
 * asked to be backed by huge pages: the micro-kernels walk the panels
 * and the C block's rows across hundreds of 4 KiB pages per block, and
 * with huge pages 1024^3 and 2048^3 ran 3-4 % faster on a 2-core Xeon
 * (2026-12-07). *bytes is updated to the size allocated. */
static float *ws_alloc(size_t *bytes) {
    const size_t huge = (size_t)2 << 20;
    if (*bytes < huge / 2)
        return aligned_alloc(64, *bytes);
    *bytes = (*bytes + huge - 1) & ~(huge - 1);
    float *p = aligned_alloc(huge, *bytes);
#ifdef MADV_HUGEPAGE
    if (p != NULL)
        (void)madvise(p, *bytes, MADV_HUGEPAGE); /* advice: failure costs nothing */
#endif
    return p;
}

/* This thread's 64-byte aligned buffer `slot` of at least n floats, or
 * NULL when memory runs out. Its contents are not kept. */
static float *workspace(int slot, int64_t n) {
    pthread_once(&g_ws_once, ws_key_init);
    if (!g_ws_key_ok)
        return NULL;
    gemm_workspace *w = pthread_getspecific(g_ws_key);
    if (w == NULL) {
        w = calloc(1, sizeof *w);
        if (w == NULL || pthread_setspecific(g_ws_key, w) != 0) {
            free(w);
            return NULL;
        }
    }
    size_t bytes = ((size_t)n * sizeof(float) + 63u) & ~(size_t)63u;
    if (w->bytes[slot] < bytes) {
        free(w->p[slot]);
        w->p[slot] = ws_alloc(&bytes);
        w->bytes[slot] = w->p[slot] != NULL ? bytes : 0;
    }
    return w->p[slot];
}

/* ------------------------------------------------------------- driver */

/* The kernel and blocking one MM runs with: the bf16 pair kernel, or an
 * f32 kernel, the latter under MXCSR's flush-to-zero and denormals-are-
 * zero when the chain flushes (x86's FMA then computes matmul.h's
 * flushing step exactly, tininess after rounding included). */
typedef struct {
    int64_t mr, nr, mc, kc, nc;
    tpu_k_gemm_pair_ukernel pair; /* NULL: f32 */
    tpu_k_gemm_ukernel f32;
    bool mxcsr_flush;
} gemm_plan;

static gemm_plan plan_of(const tpu_op *op) {
    bool flush = tpu_k_mm_flushes(op);
    const tpu_k_gemm_pair_config *pc = flush ? tpu_k_gemm_pair_config_get() : NULL;
    if (pc != NULL)
        return (gemm_plan){pc->mr, pc->nr, pc->mc, pc->kc, pc->nc, pc->kernel, NULL, false};
    const tpu_k_gemm_config *cfg = tpu_k_gemm_config_get();
    gemm_plan p = {cfg->mr, cfg->nr, cfg->mc, cfg->kc, cfg->nc, NULL, cfg->kernel, false};
    if (flush) {
        if (cfg->kernel == tpu_k_gemm_f32_c_4x8)
            p.f32 = tpu_k_gemm_f32_c_4x8_flush;
        else
            p.mxcsr_flush = true;
    }
    return p;
}

/* Asks for the C tile of `rows` x `cols` floats at c (rows ldc apart)
 * in L1 ahead of its kernel call: the tile comes and goes from the C
 * block, which with the B panel and the A block exceeds L2, and the
 * kernel's first act is to load it (the chains continue from it) or to
 * store it. Fetched one call ahead (about a microsecond of the
 * kernel), the tile no longer stalls it for L3: 2048^3 ran 3-5 % faster
 * on a 2-core Xeon, 1024^3 within the noise (2026-12-07). */
static inline void prefetch_tile(const float *c, int64_t ldc, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j += 16)
            __builtin_prefetch(c + r * ldc + j, 1);
}

/* prefetch_tile of the tile after (jr, ir) in run_tiles' order, if any. */
static inline void prefetch_next_tile(const gemm_plan *p, int64_t mb, int64_t nb, const float *cbuf,
                                      int64_t ldc, int64_t jr, int64_t ir) {
    if (ir + p->mr < mb)
        ir += p->mr;
    else if (jr + p->nr < nb)
        jr += p->nr, ir = 0;
    else
        return;
    int64_t rows = mb - ir < p->mr ? mb - ir : p->mr, cols = nb - jr < p->nr ? nb - jr : p->nr;
    prefetch_tile(cbuf + ir * ldc + jr, ldc, rows, cols);
}

/* Runs every micro-tile of an mb x nb C block over packed k block kb,
 * column panel by column panel; each call prefetches the next call's
 * tile (the next row tile, else the next panel's first). */
static void run_tiles(const gemm_plan *p, int64_t kb, int64_t mb, int64_t nb, const float *apack,
                      const float *bpack, float *cbuf, int64_t ldc, bool accumulate) {
    if (p->pair != NULL) {
        int64_t kq = (kb + 1) / 2;
        const uint32_t *a = (const uint32_t *)apack, *b = (const uint32_t *)bpack;
        for (int64_t jr = 0; jr < nb; jr += p->nr)
            for (int64_t ir = 0; ir < mb; ir += p->mr) {
                prefetch_next_tile(p, mb, nb, cbuf, ldc, jr, ir);
                p->pair(kq, a + ir * kq, b + jr * kq, cbuf + ir * ldc + jr, ldc, accumulate);
            }
        return;
    }
#if TPU_K_X86
    /* For the tiles only: packing and the final store keep IEEE
     * subnormals. */
    unsigned int saved = 0;
    if (p->mxcsr_flush) {
        saved = _mm_getcsr();
        _mm_setcsr(saved | TPU_K_MXCSR_FLUSH);
    }
#endif
    for (int64_t jr = 0; jr < nb; jr += p->nr)
        for (int64_t ir = 0; ir < mb; ir += p->mr) {
            prefetch_next_tile(p, mb, nb, cbuf, ldc, jr, ir);
            p->f32(kb, apack + ir * kb, 1, p->mr, bpack + jr * kb, p->nr, cbuf + ir * ldc + jr,
                   ldc, accumulate);
        }
#if TPU_K_X86
    if (p->mxcsr_flush)
        _mm_setcsr(saved);
#endif
}

/* One range of out, rows [m0, m1) x columns [n0, n1), through the loop
 * nest above, with this thread's buffers. */
typedef struct {
    const tpu_op *op;
    gemm_plan plan;
    pack_ctx cx;
    int64_t kp, mp, ldc;
    float *apack, *bpack, *cbuf;
    /* A claimed product whose units all span every row (one row panel)
     * packs A once per share into apanel, block (k block q, row block r)
     * at (q * a_rblocks + r) * a_block, and every unit after the first
     * reads it there. NULL: each block packed into apack when used. */
    float *apanel;
    int64_t a_rblocks, a_block;
    bool apanel_ready;
    /* Likewise B, when all units span every column (one column block):
     * k block q at q * b_block. */
    float *bpanel;
    int64_t b_block;
    bool bpanel_ready;
} gemm_run;

static void gemm_range(gemm_run *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int ith,
                       const tpu_op_block_hook *hook) {
    const gemm_plan *plan = &g->plan;
    const int64_t mr = plan->mr, nr = plan->nr, kp = g->kp, mp = g->mp, ldc = g->ldc;
    for (int64_t ip = m0; ip < m1; ip += mp) {
        int64_t pm = m1 - ip < mp ? m1 - ip : mp;
        for (int64_t jc = n0; jc < n1; jc += plan->nc) {
            int64_t nb = n1 - jc < plan->nc ? n1 - jc : plan->nc;
            for (int64_t pc = 0; pc < kp; pc += plan->kc) {
                int64_t kb = kp - pc < plan->kc ? kp - pc : plan->kc;
                float *b = g->bpack;
                bool b_packed = false;
                if (g->bpanel != NULL) {
                    b = g->bpanel + pc / plan->kc * g->b_block;
                    b_packed = g->bpanel_ready || ip != m0;
                }
                if (!b_packed && plan->pair != NULL)
                    tpu_k_gemm_pack_b_pairs(&g->cx, pc, kb, jc, nb, (int)nr, (uint32_t *)b);
                else if (!b_packed)
                    pack_b(&g->cx, pc, kb, jc, nb, (int)nr, b);
                for (int64_t ic = ip; ic < ip + pm; ic += plan->mc) {
                    int64_t mb = ip + pm - ic < plan->mc ? ip + pm - ic : plan->mc;
                    float *a = g->apack;
                    bool packed = false;
                    if (g->apanel != NULL) {
                        a = g->apanel + (pc / plan->kc * g->a_rblocks + (ic - ip) / plan->mc) * g->a_block;
                        packed = g->apanel_ready || jc != n0;
                    }
                    if (!packed && plan->pair != NULL)
                        tpu_k_gemm_pack_a_pairs(&g->cx, ic, mb, pc, kb, (int)mr, (uint32_t *)a);
                    else if (!packed)
                        pack_a(&g->cx, ic, mb, pc, kb, (int)mr, a);
                    /* The first k block starts the chains. */
                    run_tiles(plan, kb, mb, nb, a, b, g->cbuf + (ic - ip) * ldc, ldc, pc > 0);
                }
            }
            /* The chains are complete: finish and store this C block. */
            tpu_k_gemm_store_block(g->op, ip, pm, jc, nb, g->cbuf, ldc);
            if (hook)
                hook->run(hook, ith, ip, pm, jc, nb);
        }
    }
}

/* Units of a claimed product: out cut along its longer side into about
 * UNITS_PER_SHARE units per share, each at most a row panel (4 mc rows)
 * by a column block (nc), in whole tiles. A unit is claimed by one share
 * and computed whole, every chain complete, so the bytes do not depend on
 * who takes which. Cutting one side only keeps the other operand's
 * packing once per share where it fits a panel (gemm_run's apanel and
 * bpanel): rows of A packed once per column cut, B once per row cut,
 * as many times as the fixed split packs them. */
enum { UNITS_PER_SHARE = 4 };

static void unit_grid(const gemm_plan *plan, int64_t m, int64_t n, int nth, int64_t *um,
                      int64_t *un) {
    const int64_t want = (int64_t)UNITS_PER_SHARE * nth, mp = 4 * plan->mc;
    if (m >= n) {
        int64_t bn = n < plan->nc ? n : plan->nc, cuts = (want + (n + bn - 1) / bn - 1) / ((n + bn - 1) / bn);
        int64_t bm = ((m + cuts - 1) / cuts + plan->mr - 1) / plan->mr * plan->mr;
        *um = bm < mp ? bm : mp;
        *un = bn;
    } else {
        int64_t bm = m < mp ? m : mp, cuts = (want + (m + bm - 1) / bm - 1) / ((m + bm - 1) / bm);
        int64_t bn = ((n + cuts - 1) / cuts + plan->nr - 1) / plan->nr * plan->nr;
        *um = bm;
        *un = bn < plan->nc ? bn : plan->nc;
    }
}

tpu_status tpu_k_mm_fast_blocks(const tpu_op *op, int ith, int nth, const tpu_op_block_hook *hook) {
    if (op->out.dtype == TPU_DTYPE_F64 || op->in[0].sizes[1] == 0)
        return tpu_k_mm_ref_blocks(op, ith, nth, hook);
    const int64_t m = op->out.sizes[0], n = op->out.sizes[1];
    int64_t *claims = tpu_k_share_claims();
    const bool claimed = claims != NULL && nth > 1 && m > TPU_K_GEMV_MAX_M;
    int64_t m0 = 0, m1 = m, n0 = 0, n1 = n;
    if (!claimed) {
        tpu_k_mm_split(op, ith, nth, &m0, &m1, &n0, &n1);
        if (m0 >= m1 || n0 >= n1)
            return TPU_OK;
        if (tpu_k_gemv(op, m0, m1, n0, n1)) {
            if (hook) /* a few rows: the whole share is one block */
                hook->run(hook, ith, m0, m1 - m0, n0, n1 - n0);
            return TPU_OK;
        }
    }
    gemm_run g = {op, plan_of(op), {&op->in[0], &op->in[1], op->out.dtype, op->p.mm.precision,
                                     tpu_k_mm_passes(op)}, 0, 0, 0, NULL, NULL, NULL, NULL, 0, 0, false, NULL, 0, false};
    const gemm_plan *plan = &g.plan;
    int64_t um = m1 - m0, un = n1 - n0;
    if (claimed)
        unit_grid(plan, m, n, nth, &um, &un);
    /* K * passes fits: K f32 elements exist, so 4 * K < 2^63. */
    g.kp = op->in[0].sizes[1] * g.cx.passes;
    const int64_t mr = plan->mr, nr = plan->nr;
    /* Blocks no larger than a share's range or a unit needs, padded to
     * whole tiles (a pair panel needs half the room of an f32 one). Rows
     * run in panels of up to four A blocks: each (panel, column block, k
     * block) packs B once for all the panel's A blocks, and the panel's C
     * block (f32 chains, finished once all k blocks ran) stays a few
     * megabytes. */
    int64_t mcb = um < plan->mc ? um : plan->mc;
    int64_t ncb = un < plan->nc ? un : plan->nc;
    int64_t kcb = g.kp < plan->kc ? g.kp : plan->kc;
    mcb = (mcb + mr - 1) / mr * mr;
    ncb = (ncb + nr - 1) / nr * nr;
    g.mp = 4 * plan->mc;
    int64_t mpb = um < g.mp ? um : g.mp;
    mpb = (mpb + mr - 1) / mr * mr;
    g.apack = workspace(WS_A, mcb * kcb);
    g.bpack = workspace(WS_B, kcb * ncb);
    /* C's rows one cache line apart beyond the block's width: at a width
     * of a power of two floats, a tile's rows would all map to the same
     * L1 sets, beside the B sliver streaming through them. */
    g.ldc = ncb + 16;
    g.cbuf = workspace(WS_C, mpb * g.ldc);
    if (g.apack == NULL || g.bpack == NULL || g.cbuf == NULL)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "%s: cannot allocate GEMM packing buffers",
                             tpu_k_op_label(op));
    if (claimed && um == m && m <= g.mp) {
        /* Units that differ only in their columns: pack A once (up to
         * PANEL_MAX_BYTES, else block by block as it is used). */
        g.a_rblocks = (m + plan->mc - 1) / plan->mc;
        g.a_block = mcb * kcb;
        int64_t floats = (g.kp + plan->kc - 1) / plan->kc * g.a_rblocks * g.a_block;
        if (floats <= PANEL_MAX_BYTES / (int64_t)sizeof(float))
            g.apanel = workspace(WS_AP, floats);
    }
    if (claimed && un == n && n <= plan->nc) {
        g.b_block = kcb * ncb;
        int64_t floats = (g.kp + plan->kc - 1) / plan->kc * g.b_block;
        if (floats <= PANEL_MAX_BYTES / (int64_t)sizeof(float))
            g.bpanel = workspace(WS_BP, floats);
    }
    if (!claimed) {
        gemm_range(&g, m0, m1, n0, n1, ith, hook);
        return TPU_OK;
    }
    const int64_t gm = (m + um - 1) / um, units = gm * ((n + un - 1) / un);
    tpu_k_parts parts;
    tpu_k_parts_init(&parts, units, 1, ith, nth);
    for (int64_t u0, u_end; tpu_k_parts_next(&parts, &u0, &u_end);)
        for (int64_t u = u0; u < u_end; u++) {
            int64_t i0 = u % gm * um, j0 = u / gm * un;
            int64_t i1 = i0 + um < m ? i0 + um : m, j1 = j0 + un < n ? j0 + un : n;
            if (tpu_k_gemv(op, i0, i1, j0, j1)) {
                if (hook)
                    hook->run(hook, ith, i0, i1 - i0, j0, j1 - j0);
                continue;
            }
            gemm_range(&g, i0, i1, j0, j1, ith, hook);
            g.apanel_ready = g.apanel != NULL;
            g.bpanel_ready = g.bpanel != NULL;
        }
    return TPU_OK;
}

tpu_status tpu_k_mm_fast(const tpu_op *op, int ith, int nth) {
    return tpu_k_mm_fast_blocks(op, ith, nth, NULL);
}
