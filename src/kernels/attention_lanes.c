/* ATTENTION's tiled path, the element-wise steps between its block
 * products. The tiled path keeps scores transposed, one row per key and
 * one lane per query ([key][query], `ld` floats a row), so that each
 * query's softmax statistics are lanes of a vector: a row maximum or sum
 * over keys is a lane-wise max or sum down the rows, with no horizontal
 * reduction, and each lane's order (keys ascending) is the same on
 * every instruction set.
 *
 * (The exponentials, and the sums of a softmax, are vecmath's
 * tpu_vm_exp_rows_f32.)
 *
 * The steps are written once, as plain loops of single IEEE operations
 * per element (no expression an FMA could contract: each product is a
 * statement of its own), and compiled three times: portable, AVX2 and
 * AVX-512, where the compiler vectorises them over the query lanes. So
 * the three give the same bits. */
#include "attention.h"

#include <math.h>

#include "kernels_internal.h"

/* Scores from dot products, in place: s *= scale; under is_causal, -inf
 * in lanes q < j + first of row j (key j0 + j is after query i0 + q when
 * q < j + j0 - i0, first = j0 - i0). With m, also m[q] = max(m[q], the
 * scores of lane q) as lanes_max_body takes it, in the same pass. */
static inline __attribute__((always_inline)) void lanes_scale_body(float *s, int64_t ld,
                                                                  int64_t nk, int64_t nq,
                                                                  float scale, bool causal,
                                                                  int64_t first, float *m) {
    for (int64_t j = 0; j < nk; j++) {
        float *row = s + j * ld;
        int64_t hidden = 0;
        if (causal) {
            hidden = j + first;
            hidden = hidden < 0 ? 0 : hidden > nq ? nq : hidden;
        }
        for (int64_t q = 0; q < hidden; q++)
            row[q] = -INFINITY;
        if (m == NULL) {
            for (int64_t q = hidden; q < nq; q++)
                row[q] = row[q] * scale;
            continue;
        }
        /* A hidden lane's -inf leaves its max as it is. */
        for (int64_t q = hidden; q < nq; q++) {
            const float x = row[q] * scale;
            row[q] = x;
            m[q] = x > m[q] ? x : m[q];
        }
    }
}

/* m[q] = the larger of m[q] and every s[j][q]; a NaN score is passed
 * over (it makes its lane NaN later, through exp). */
static inline __attribute__((always_inline)) void lanes_max_body(const float *s, int64_t ld,
                                                                int64_t nk, int64_t nq, float *m) {
    for (int64_t j = 0; j < nk; j++) {
        const float *row = s + j * ld;
        for (int64_t q = 0; q < nq; q++)
            m[q] = row[q] > m[q] ? row[q] : m[q];
    }
}

/* s[j][q] *= f[q]. */
static inline __attribute__((always_inline)) void lanes_mul_body(float *s, int64_t ld, int64_t nk,
                                                                int64_t nq, const float *f) {
    for (int64_t j = 0; j < nk; j++) {
        float *row = s + j * ld;
        for (int64_t q = 0; q < nq; q++)
            row[q] = row[q] * f[q];
    }
}

/* dS from P and dP, in place of dP: dp[j][q] = p[j][q] * (dp[j][q] - d[q]). */
static inline __attribute__((always_inline)) void lanes_ds_body(const float *p, float *dp,
                                                               int64_t ld, int64_t nk, int64_t nq,
                                                               const float *d) {
    for (int64_t j = 0; j < nk; j++) {
        const float *prow = p + j * ld;
        float *drow = dp + j * ld;
        for (int64_t q = 0; q < nq; q++) {
            const float diff = drow[q] - d[q];
            drow[q] = prow[q] * diff;
        }
    }
}

/* One set of the steps per level: the bodies inlined under the level's
 * target attribute. */
#define ATTN_LANES(SFX, ATTR)                                                                      \
    ATTR static void lanes_scale_##SFX(float *s, int64_t ld, int64_t nk, int64_t nq, float scale,  \
                                       bool causal, int64_t first, float *m) {                     \
        lanes_scale_body(s, ld, nk, nq, scale, causal, first, m);                                  \
    }                                                                                              \
    ATTR static void lanes_max_##SFX(const float *s, int64_t ld, int64_t nk, int64_t nq,          \
                                     float *m) {                                                   \
        lanes_max_body(s, ld, nk, nq, m);                                                          \
    }                                                                                              \
    ATTR static void lanes_mul_##SFX(float *s, int64_t ld, int64_t nk, int64_t nq,                \
                                     const float *f) {                                             \
        lanes_mul_body(s, ld, nk, nq, f);                                                          \
    }                                                                                              \
    ATTR static void lanes_ds_##SFX(const float *p, float *dp, int64_t ld, int64_t nk, int64_t nq, \
                                    const float *d) {                                              \
        lanes_ds_body(p, dp, ld, nk, nq, d);                                                       \
    }                                                                                              \
    static const tpu_k_attn_lanes k_lanes_##SFX = {lanes_scale_##SFX, lanes_max_##SFX,             \
                                                   lanes_mul_##SFX, lanes_ds_##SFX};

ATTN_LANES(portable, )
#if TPU_K_X86
ATTN_LANES(avx2, __attribute__((target("avx2,fma"))))
ATTN_LANES(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))
#endif

const tpu_k_attn_lanes *tpu_k_attn_lanes_get(void) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx512())
        return &k_lanes_avx512;
    if (tpu_k_cpu_has_avx2_fma())
        return &k_lanes_avx2;
#endif
    return &k_lanes_portable;
}
