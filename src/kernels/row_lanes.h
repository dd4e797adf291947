/* Row sums in 16 f64 lanes, for the row kernels' fast paths (softmax.c,
 * norm_rows.c): lane k adds the row's elements j == k (mod 16) in order
 * (four vectors of 4, then a scalar tail at the row's end), and the lanes
 * are added as one fixed tree. Several lanes so that the adds do not wait
 * on one another (one accumulator waits an add latency per element); a
 * fixed structure so that every build (baseline, AVX2, AVX-512: the
 * callers inline these into one wrapper per target) gives the same bits.
 * A lane starts at +0.0 and so never holds -0.0. (A NaN's sign and
 * payload are the exception: see norm_rows.c.)
 *
 * Vectors are GCC vector extensions of 32 bytes: one register in the AVX2
 * and AVX-512 builds (GCC lowers wider generic vectors for AVX2 through
 * the stack), two in the baseline. The helpers pass them by value but are
 * always inlined, so the calling convention GCC warns about (-Wpsabi) is
 * never used; the warning is off for the files that include this.
 * Internal to src/kernels. */
#ifndef TPU_KERNELS_ROW_LANES_H
#define TPU_KERNELS_ROW_LANES_H

#include <stdint.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wpsabi"

typedef double tpu_k_v4d __attribute__((vector_size(32)));
typedef float tpu_k_v8f __attribute__((vector_size(32)));

#define TPU_K_ROW_INLINE __attribute__((always_inline)) static inline
#define TPU_K_ROW_LANES 16

/* 4 floats at p as f64. Lane by lane: GCC turns this into one vcvtps2pd,
 * where it lowers __builtin_convertvector of 4 floats as two halves. */
TPU_K_ROW_INLINE tpu_k_v4d tpu_k_load4_f64(const float *p) {
    return (tpu_k_v4d){p[0], p[1], p[2], p[3]};
}

TPU_K_ROW_INLINE tpu_k_v4d tpu_k_splat4d(double v) {
    return (tpu_k_v4d){v, v, v, v};
}

typedef struct {
    tpu_k_v4d q[4];                 /* lanes 4 q .. 4 q + 3 */
    double tail[TPU_K_ROW_LANES];   /* the row's last elements, fewer than 16 */
    int64_t n_tail;
} tpu_k_row_lanes;

TPU_K_ROW_INLINE void tpu_k_lanes_init(tpu_k_row_lanes *l) {
    for (int q = 0; q < 4; q++)
        l->q[q] = tpu_k_splat4d(0.0);
    l->n_tail = 0;
}

/* Adds t[0..n) as the row's next elements (n a multiple of 16 except at
 * the row's end). */
TPU_K_ROW_INLINE void tpu_k_lanes_add(tpu_k_row_lanes *l, const float *t, int64_t n) {
    int64_t i = 0;
    for (; i + TPU_K_ROW_LANES <= n; i += TPU_K_ROW_LANES)
        for (int q = 0; q < 4; q++)
            l->q[q] += tpu_k_load4_f64(t + i + 4 * q);
    for (; i < n; i++)
        l->tail[l->n_tail++] = (double)t[i];
}

/* The sum: each tail value into its lane, then halves added lane by lane. */
TPU_K_ROW_INLINE double tpu_k_lanes_total(const tpu_k_row_lanes *l) {
    double acc[TPU_K_ROW_LANES];
    memcpy(acc, l->q, sizeof acc);
    for (int64_t k = 0; k < l->n_tail; k++)
        acc[k] += l->tail[k];
    for (int w = TPU_K_ROW_LANES / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++)
            acc[k] += acc[k + w];
    return acc[0];
}

#endif
