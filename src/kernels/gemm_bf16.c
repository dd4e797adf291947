/* bf16 pair products for the packed GEMM (gemm.h): the AVX512-BF16
 * micro-kernel, the packing of operands into bf16 pairs, and the
 * one-time checks that the CPU's VDPBF16PS computes matmul.h's flushing
 * chain and is faster than the f32 kernel at it. gemm.c's driver runs
 * them for chains of bf16 values. */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "gemm.h"
#include "kernels_internal.h"
#include "matmul.h"
#include "strided.h"
#include "transpose_simd.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* ------------------------------------------------------- micro-kernel */

#if TPU_K_X86
/* 8x32 tile: 16 zmm accumulators (8 rows x 2 halves of 16 columns), two
 * B loads and eight A pair broadcasts per pair of k; each VDPBF16PS does
 * 32 multiply-adds, twice an f32 FMA's 16. */
#define TPU_K_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
__attribute__((target("avx512f,avx512bf16"))) static void
tpu_k_gemm_bf16_avx512_8x32(int64_t kpairs, const uint32_t *a, const uint32_t *b, float *c,
                            int64_t ldc, bool accumulate) {
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
    for (int64_t t = 0; t < kpairs; t++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + t * 32);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + t * 32 + 16);
        const uint32_t *at = a + t * 8;
#define STEP(i)                                                                                    \
    {                                                                                              \
        const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)at[i]);                               \
        c##i##0 = _mm512_dpbf16_ps(c##i##0, ai, b0);                                               \
        c##i##1 = _mm512_dpbf16_ps(c##i##1, ai, b1);                                               \
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

static const tpu_k_gemm_pair_config k_pair_avx512 = {"tpu_k_gemm_bf16_avx512_8x32", 8, 32, 144,
                                                     512, 2048, tpu_k_gemm_bf16_avx512_8x32};
#endif

/* ------------------------------------------------------------ packing */

/* The bf16 bits of v, a value that is exactly a bf16 (every part is). */
static inline uint32_t bf16_bits(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u >> 16;
}

/* The pad of an odd k tail: -0 in A and +0 in B make a product of -0,
 * and acc + (-0) == acc for every acc, signed zeros included. */
#define PAD_A 0x8000u
#define PAD_B 0x0000u

/* A 32-bit pair read from bf16 memory (p[0] low, p[1] high in a little-
 * endian load) turned into the panel's order (p[0] high). */
static inline uint32_t swap_halves(const uint16_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u << 16 | u >> 16;
}

/* General packing of A, element by element through the precision parts. */
static inline __attribute__((always_inline)) void
pack_a_pairs_as(const tpu_k_gemm_operands *cx, tpu_dtype dt, tpu_precision prec, int passes,
                int64_t i0, int64_t mb, int64_t p0, int64_t kb, int mr, uint32_t *dst) {
    int64_t kq = (kb + 1) / 2;
    for (int64_t ir = 0; ir < mb; ir += mr) {
        uint32_t *panel = dst + ir * kq;
        int64_t rows = mb - ir < mr ? mb - ir : mr;
        for (int64_t t = 0; t < kq; t++) {
            int64_t kk = p0 + 2 * t;
            bool has_lo = 2 * t + 1 < kb;
            uint32_t *col = panel + t * mr;
            for (int64_t r = 0; r < rows; r++) {
                int64_t row = i0 + ir + r;
                uint32_t hi = bf16_bits(tpu_k_gemm_packed_value(
                    cx->a, row, kk / passes, dt, prec, TPU_K_MM_LHS, (int)(kk % passes)));
                uint32_t lo = has_lo ? bf16_bits(tpu_k_gemm_packed_value(
                                           cx->a, row, (kk + 1) / passes, dt, prec,
                                           TPU_K_MM_LHS, (int)((kk + 1) % passes)))
                                     : PAD_A;
                col[r] = hi << 16 | lo;
            }
            for (int64_t r = rows; r < mr; r++)
                col[r] = 0;
        }
    }
}

void tpu_k_gemm_pack_a_pairs(const tpu_k_gemm_operands *cx, int64_t i0, int64_t mb, int64_t p0,
                             int64_t kb, int mr, uint32_t *dst) {
    const tpu_tensor *a = cx->a;
    if (cx->dt == TPU_DTYPE_BF16 && a->strides[1] == 1 && tpu_k_is_aligned(a)) {
        /* Rows contiguous in k: each pair is one 32-bit read. */
        int64_t kq = (kb + 1) / 2;
        for (int64_t ir = 0; ir < mb; ir += mr) {
            uint32_t *panel = dst + ir * kq;
            int64_t rows = mb - ir < mr ? mb - ir : mr;
            for (int64_t r = 0; r < rows; r++) {
                const uint16_t *src = (const uint16_t *)a->data + (i0 + ir + r) * a->strides[0] + p0;
                for (int64_t t = 0; t < kb / 2; t++)
                    panel[t * mr + r] = swap_halves(src + 2 * t);
                if (kb % 2)
                    panel[(kq - 1) * mr + r] = (uint32_t)src[kb - 1] << 16 | PAD_A;
            }
            for (int64_t r = rows; r < mr; r++)
                for (int64_t t = 0; t < kq; t++)
                    panel[t * mr + r] = 0;
        }
        return;
    }
    switch (cx->dt) {
    case TPU_DTYPE_BF16:
        pack_a_pairs_as(cx, TPU_DTYPE_BF16, TPU_PRECISION_HIGHEST, 1, i0, mb, p0, kb, mr, dst);
        break;
    default: /* f32 at HIGH or MEDIUM */
        if (cx->prec == TPU_PRECISION_HIGH)
            pack_a_pairs_as(cx, TPU_DTYPE_F32, TPU_PRECISION_HIGH, 3, i0, mb, p0, kb, mr, dst);
        else
            pack_a_pairs_as(cx, TPU_DTYPE_F32, TPU_PRECISION_MEDIUM, 1, i0, mb, p0, kb, mr, dst);
        break;
    }
}

/* General packing of B, element by element through the precision parts. */
static inline __attribute__((always_inline)) void
pack_b_pairs_as(const tpu_k_gemm_operands *cx, tpu_dtype dt, tpu_precision prec, int passes,
                int64_t p0, int64_t kb, int64_t j0, int64_t nb, int nr, uint32_t *dst) {
    int64_t kq = (kb + 1) / 2;
    for (int64_t jr = 0; jr < nb; jr += nr) {
        uint32_t *panel = dst + jr * kq;
        int64_t cols = nb - jr < nr ? nb - jr : nr;
        for (int64_t t = 0; t < kq; t++) {
            int64_t kk = p0 + 2 * t;
            bool has_lo = 2 * t + 1 < kb;
            uint32_t *row = panel + t * nr;
            for (int64_t c = 0; c < cols; c++) {
                int64_t col = j0 + jr + c;
                uint32_t hi = bf16_bits(tpu_k_gemm_packed_value(
                    cx->b, kk / passes, col, dt, prec, TPU_K_MM_RHS, (int)(kk % passes)));
                uint32_t lo = has_lo ? bf16_bits(tpu_k_gemm_packed_value(
                                           cx->b, (kk + 1) / passes, col, dt, prec,
                                           TPU_K_MM_RHS, (int)((kk + 1) % passes)))
                                     : PAD_B;
                row[c] = hi << 16 | lo;
            }
            for (int64_t c = cols; c < nr; c++)
                row[c] = 0;
        }
    }
}

#if TPU_K_X86
/* Pairs t < tw of columns c < cw (both multiples of 16) of the panel
 * whose first column is B's column j: 16 columns x 16 pairs at a time,
 * read as 16 runs of 32 bf16 down the columns, transposed as 32-bit
 * words and rotated into the panel's order (kk high, kk + 1 low). */
__attribute__((target("avx512f"))) static void transpose_pairs_512(const tpu_tensor *b, int64_t p0,
                                                                  int64_t j, int64_t cw,
                                                                  int64_t tw, int nr,
                                                                  uint32_t *panel) {
    const int64_t cstep = b->strides[1] * 2;
    for (int64_t c0 = 0; c0 < cw; c0 += 16) {
        const char *col = (const char *)b->data + (j + c0) * cstep + p0 * 2;
        for (int64_t t0 = 0; t0 < tw; t0 += 16) {
            __m512 r[16], t[16];
            for (int q = 0; q < 16; q++)
                r[q] = tpu_k_load16_f32(col + q * cstep + t0 * 4, TPU_DTYPE_F32);
            tpu_k_transpose16(r, t);
            for (int q = 0; q < 16; q++)
                _mm512_storeu_si512(panel + (t0 + q) * nr + c0,
                                    _mm512_ror_epi32(_mm512_castps_si512(t[q]), 16));
        }
    }
}
#endif

void tpu_k_gemm_pack_b_pairs(const tpu_k_gemm_operands *cx, int64_t p0, int64_t kb, int64_t j0,
                             int64_t nb, int nr, uint32_t *dst) {
    const tpu_tensor *b = cx->b;
    int64_t kq = (kb + 1) / 2;
    if (cx->dt == TPU_DTYPE_BF16 && b->strides[1] == 1 && tpu_k_is_aligned(b)) {
        /* Rows contiguous in n: interleave row kk (high) with row kk + 1. */
        for (int64_t jr = 0; jr < nb; jr += nr) {
            uint32_t *panel = dst + jr * kq;
            int64_t cols = nb - jr < nr ? nb - jr : nr;
            for (int64_t t = 0; t < kq; t++) {
                const uint16_t *hi = (const uint16_t *)b->data + (p0 + 2 * t) * b->strides[0] + j0 + jr;
                const uint16_t *lo = hi + b->strides[0];
                uint32_t *row = panel + t * nr;
                if (2 * t + 1 < kb)
                    for (int64_t c = 0; c < cols; c++)
                        row[c] = (uint32_t)hi[c] << 16 | lo[c];
                else
                    for (int64_t c = 0; c < cols; c++)
                        row[c] = (uint32_t)hi[c] << 16 | PAD_B;
                for (int64_t c = cols; c < nr; c++)
                    row[c] = 0;
            }
        }
        return;
    }
    if (cx->dt == TPU_DTYPE_BF16 && b->strides[0] == 1 && tpu_k_is_aligned(b)) {
        /* Columns contiguous in k (a Linear's weight, transposed): each
         * pair is one 32-bit read down the column; blocks of 16 columns
         * x 16 pairs are transposed in registers. */
        for (int64_t jr = 0; jr < nb; jr += nr) {
            uint32_t *panel = dst + jr * kq;
            int64_t cols = nb - jr < nr ? nb - jr : nr;
            int64_t cw = 0, tw = 0;
#if TPU_K_X86
            if (nr % 16 == 0) {
                cw = cols / 16 * 16;
                tw = kb / 32 * 16;
                transpose_pairs_512(b, p0, j0 + jr, cw, tw, nr, panel);
            }
#endif
            for (int64_t c = 0; c < cols; c++) {
                const uint16_t *src = (const uint16_t *)b->data + (j0 + jr + c) * b->strides[1] + p0;
                for (int64_t t = c < cw ? tw : 0; t < kb / 2; t++)
                    panel[t * nr + c] = swap_halves(src + 2 * t);
                if (kb % 2)
                    panel[(kq - 1) * nr + c] = (uint32_t)src[kb - 1] << 16 | PAD_B;
            }
            for (int64_t t = 0; t < kq; t++)
                for (int64_t c = cols; c < nr; c++)
                    panel[t * nr + c] = 0;
        }
        return;
    }
    switch (cx->dt) {
    case TPU_DTYPE_BF16:
        pack_b_pairs_as(cx, TPU_DTYPE_BF16, TPU_PRECISION_HIGHEST, 1, p0, kb, j0, nb, nr, dst);
        break;
    default: /* f32 at HIGH or MEDIUM */
        if (cx->prec == TPU_PRECISION_HIGH)
            pack_b_pairs_as(cx, TPU_DTYPE_F32, TPU_PRECISION_HIGH, 3, p0, kb, j0, nb, nr, dst);
        else
            pack_b_pairs_as(cx, TPU_DTYPE_F32, TPU_PRECISION_MEDIUM, 1, p0, kb, j0, nb, nr, dst);
        break;
    }
}

/* ------------------------------------------------------ one-time check */

#if TPU_K_X86
/* Runs the kernel once on a tile whose values reach every case the
 * flushing chain distinguishes (the order of a pair's two products, the
 * rounding after each, subnormal operands, products and partial sums,
 * and the tininess that x86 judges after rounding) and compares every
 * output bit for bit with tpu_k_mm_fma_flush applied in order. */
static bool pair_kernel_matches(const tpu_k_gemm_pair_config *cfg) {
    enum { MR = 8, NR = 32, K = 6, KQ = K / 2 };
    if (cfg->mr != MR || cfg->nr != NR)
        return false;
    float a[MR][K], b[K][NR];
    uint32_t state = 12345u;
    for (int i = 0; i < MR; i++)
        for (int k = 0; k < K; k++) {
            state = state * 1664525u + 1013904223u;
            /* Exponents around 2^-64, so products fall around FLT_MIN. */
            float m = 1.0f + (float)(state >> 25) / 128.0f;
            a[i][k] = ldexpf((state & 1u) ? -m : m, (int)((state >> 8) % 24) - 76);
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < NR; j++) {
            state = state * 1664525u + 1013904223u;
            float m = 1.0f + (float)(state >> 25) / 128.0f;
            b[k][j] = ldexpf((state & 1u) ? -m : m, (int)((state >> 8) % 24) - 64);
        }
    /* Row 0 against columns 0 to 2:
     *   col 0: FLT_MIN, then a product that leaves FLT_MIN - 0.75 ulp (tiny
     *          after rounding, so flushed), then a subnormal operand;
     *   col 1: -1, then the pair (1, 2^-30): 2^-30 survives only if the
     *          pair's first product is added first;
     *   col 2: 1, then the pair (2^-24, 2^-24): each sum is a tie that
     *          rounds back to 1 only if each step is rounded on its own. */
    static const float a0[K] = {1.0f, -1.5f * 0x1p-76f, 1.0f, 0x1p-15f, -1.0f, 0x1p-127f};
    static const float b0[3][K] = {{FLT_MIN, 0x1p-75f, 0.0f, 0.0f, 0.0f, 4.0f},
                                   {-1.0f, 0.0f, 1.0f, 0x1p-15f, 0.0f, 0.0f},
                                   {1.0f, 0.0f, 0x1p-24f, 0x1p-9f, 0.0f, 0.0f}};
    for (int k = 0; k < K; k++) {
        a[0][k] = a0[k];
        for (int j = 0; j < 3; j++)
            b[k][j] = b0[j][k];
    }
    uint32_t ap[KQ * MR], bp[KQ * NR];
    for (int t = 0; t < KQ; t++) {
        for (int i = 0; i < MR; i++)
            ap[t * MR + i] = bf16_bits(a[i][2 * t]) << 16 | bf16_bits(a[i][2 * t + 1]);
        for (int j = 0; j < NR; j++)
            bp[t * NR + j] = bf16_bits(b[2 * t][j]) << 16 | bf16_bits(b[2 * t + 1][j]);
    }
    float c[MR * NR];
    cfg->kernel(KQ, ap, bp, c, NR, false);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc = tpu_k_mm_fma_flush(a[i][k], b[k][j], acc);
            if (memcmp(&acc, &c[i * NR + j], sizeof acc) != 0)
                return false;
        }
    return true;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Whether the pair kernel computes a tile faster than the f32 kernel
 * (under FTZ/DAZ, the other way to the same bits) on this CPU: AMD's
 * VDPBF16PS does twice an FMA's products per cycle, but on an Intel
 * Xeon (Emerald Rapids) it issues at half the FMA rate and the pair
 * kernel ran bf16 GEMMs at half the f32 kernel's speed. Both compute the
 * same k = 512 on panels that stay in L1, the best of five alternating
 * rounds (about a millisecond in all, once per process). */
static bool pair_kernel_faster(const tpu_k_gemm_pair_config *pc) {
    const tpu_k_gemm_config *fc = tpu_k_gemm_config_get();
    enum { K = 512, CALLS = 64, ROUNDS = 5 };
    if (fc->mr != pc->mr || fc->nr != pc->nr || fc->mr * fc->nr > 256)
        return true; /* not comparable tile for tile: keep the pairs */
    static uint32_t ap[K / 2 * 8], bp[K / 2 * 32];
    static float af[K * 8], bf[K * 32];
    float c[256];
    for (int i = 0; i < K / 2 * 8; i++)
        ap[i] = 0x3f803f80u; /* the pair (1, 1) */
    for (int i = 0; i < K / 2 * 32; i++)
        bp[i] = 0x3f003f00u; /* (0.5, 0.5) */
    for (int i = 0; i < K * 8; i++)
        af[i] = 1.0f;
    for (int i = 0; i < K * 32; i++)
        bf[i] = 0.5f;
    uint64_t best_pair = UINT64_MAX, best_f32 = UINT64_MAX;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = now_ns();
        for (int n = 0; n < CALLS; n++)
            pc->kernel(K / 2, ap, bp, c, pc->nr, n > 0);
        uint64_t t1 = now_ns();
        for (int n = 0; n < CALLS; n++)
            fc->kernel(K, af, 1, fc->mr, bf, fc->nr, c, fc->nr, n > 0);
        uint64_t t2 = now_ns();
        if (t1 - t0 < best_pair)
            best_pair = t1 - t0;
        if (t2 - t1 < best_f32)
            best_f32 = t2 - t1;
    }
    return best_pair < best_f32;
}

static bool g_pair_exact, g_pair_faster;
static pthread_once_t g_pair_once = PTHREAD_ONCE_INIT;

static void pair_check_once(void) {
    g_pair_exact = __builtin_cpu_supports("avx512bf16") && pair_kernel_matches(&k_pair_avx512);
    g_pair_faster = g_pair_exact && pair_kernel_faster(&k_pair_avx512);
}
#endif

/* The pair kernel if it passed the checks named by `want_faster`. */
static const tpu_k_gemm_pair_config *pair_config(bool want_faster) {
#if TPU_K_X86
    if (!tpu_k_cpu_has_avx512())
        return NULL;
    pthread_once(&g_pair_once, pair_check_once);
    return (want_faster ? g_pair_faster : g_pair_exact) ? &k_pair_avx512 : NULL;
#else
    (void)want_faster;
    return NULL;
#endif
}

const tpu_k_gemm_pair_config *tpu_k_gemm_pair_config_get(void) {
    return pair_config(true);
}

const tpu_k_gemm_pair_config *tpu_k_gemm_pair_config_exact(void) {
    return pair_config(false);
}
