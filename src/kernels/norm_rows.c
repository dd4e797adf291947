/* NORM's fast rows: the f64 arithmetic of one contiguous f32 row of
 * layer_norm and its backward, written once with GCC's vector extensions
 * and compiled for the portable baseline, AVX2 and AVX-512 (the same body
 * inlined into three wrappers with different target attributes).
 *
 * Why the three give the same bits: every element goes through the same
 * f64 operations in the same order (the vector extensions lower each
 * operator to one IEEE operation per lane; -std=c11 turns FMA contraction
 * off), and every row sum is kept in row_lanes.h's 16 f64 lanes, which
 * add in one fixed order in every build. NaNs aside: where two NaNs meet
 * in an add, x86 returns the first operand's, and the compiler may order
 * a scalar add's operands either way, so a NaN's sign and payload may
 * differ between builds (seen: a dweight column summing +NaN and -NaN). */
#include <string.h>

#include "kernels_internal.h"
#include "norm_rows.h"
#include "row_lanes.h"

typedef tpu_k_v4d v4d;
typedef float v4f __attribute__((vector_size(16)));

#define ROWS_INLINE TPU_K_ROW_INLINE
#define NORM_LANES TPU_K_ROW_LANES
#define load4 tpu_k_load4_f64
#define splat tpu_k_splat4d

ROWS_INLINE v4d load4d(const double *p) {
    v4d v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Stores 4 lanes at p: as f32, rounded as a C cast rounds (to nearest,
 * the default mode), or as f64. Macros, so that no vector is passed by
 * value to a function. */
#define STORE4(p, v)                                                                               \
    do {                                                                                           \
        const v4f f_ = __builtin_convertvector((v), v4f);                                          \
        memcpy((p), &f_, sizeof f_);                                                               \
    } while (0)
#define STORE4D(p, v)                                                                              \
    do {                                                                                           \
        const v4d d_ = (v);                                                                        \
        memcpy((p), &d_, sizeof d_);                                                               \
    } while (0)

ROWS_INLINE void moments_body(const float *x, int64_t n, double eps, double *mean, double *rstd) {
    tpu_k_row_lanes s;
    tpu_k_lanes_init(&s);
    tpu_k_lanes_add(&s, x, n);
    /* An empty row has mean 0 and variance 0 (PyTorch's CPU kernel too). */
    const double m = n > 0 ? tpu_k_lanes_total(&s) / (double)n : 0.0;
    const v4d vm = splat(m);
    tpu_k_lanes_init(&s);
    int64_t j = 0;
    for (; j + NORM_LANES <= n; j += NORM_LANES)
        for (int q = 0; q < 4; q++) {
            const v4d d = load4(x + j + 4 * q) - vm;
            s.q[q] += d * d;
        }
    for (; j < n; j++) {
        const double d = (double)x[j] - m;
        s.tail[s.n_tail++] = d * d;
    }
    const double var = n > 0 ? tpu_k_lanes_total(&s) / (double)n : 0.0;
    *mean = m;
    *rstd = 1.0 / __builtin_sqrt(var + eps);
}

/* y_j = ((x_j - mean) rstd) w_j + b_j; an absent w multiplies by 1 and an
 * absent b adds +0.0, exactly as the reference does (x + 0.0 turns -0.0
 * into +0.0). */
ROWS_INLINE void forward_out_body(float *y, const float *x, const float *w, const float *b, int64_t n,
                                  double mean, double rstd) {
    const v4d vm = splat(mean), vr = splat(rstd), one = splat(1.0), zero = splat(0.0);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        STORE4(y + j, (load4(x + j) - vm) * vr * (w ? load4(w + j) : one) + (b ? load4(b + j) : zero));
    for (; j < n; j++)
        y[j] = (float)(((double)x[j] - mean) * rstd * (w ? (double)w[j] : 1.0) + (b ? (double)b[j] : 0.0));
}

ROWS_INLINE void forward_body(float *y, const float *x, const float *w, const float *b, int64_t n,
                              double eps, double *mean, double *rstd) {
    moments_body(x, n, eps, mean, rstd);
    forward_out_body(y, x, w, b, n, *mean, *rstd);
}

/* The backward's row sums s1 = sum g w and s2 = sum (g w) xhat, with
 * xhat = (x - mean) rstd; with `partial`, also partial[j] += g xhat and
 * partial[n + j] += g (the column terms of dweight and dbias). Then, if dx
 * is given, dx_j = rstd ((g_j w_j - s1 / n) - xhat_j s2 / n). */
ROWS_INLINE void backward_body(float *dx, const float *g, const float *x, const float *w, int64_t n,
                               double mean, double rstd, double *partial) {
    const v4d vm = splat(mean), vr = splat(rstd), one = splat(1.0);
    tpu_k_row_lanes a, b;
    tpu_k_lanes_init(&a);
    tpu_k_lanes_init(&b);
    int64_t j = 0;
    for (; j + NORM_LANES <= n; j += NORM_LANES)
        for (int q = 0; q < 4; q++) {
            const int64_t i = j + 4 * q;
            const v4d gi = load4(g + i), h = (load4(x + i) - vm) * vr;
            const v4d gw = gi * (w ? load4(w + i) : one);
            a.q[q] += gw;
            b.q[q] += gw * h;
            if (partial) {
                STORE4D(partial + i, load4d(partial + i) + gi * h);
                STORE4D(partial + n + i, load4d(partial + n + i) + gi);
            }
        }
    for (; j < n; j++) {
        const double gi = (double)g[j], xhat = ((double)x[j] - mean) * rstd;
        const double gw = gi * (w ? (double)w[j] : 1.0);
        a.tail[a.n_tail++] = gw;
        b.tail[b.n_tail++] = gw * xhat;
        if (partial) {
            partial[j] += gi * xhat;
            partial[n + j] += gi;
        }
    }
    if (!dx)
        return;
    const double s1 = tpu_k_lanes_total(&a), s2 = tpu_k_lanes_total(&b);
    const double inv_n = n > 0 ? 1.0 / (double)n : 0.0;
    const v4d c1 = splat(s1 * inv_n), vs2 = splat(s2), vinv = splat(inv_n);
    for (j = 0; j + 4 <= n; j += 4) {
        const v4d xhat = (load4(x + j) - vm) * vr;
        const v4d gw = load4(g + j) * (w ? load4(w + j) : one);
        STORE4(dx + j, vr * (gw - c1 - xhat * vs2 * vinv));
    }
    for (; j < n; j++) {
        const double xhat = ((double)x[j] - mean) * rstd;
        const double gw = (double)g[j] * (w ? (double)w[j] : 1.0);
        dx[j] = (float)(rstd * (gw - s1 * inv_n - xhat * s2 * inv_n));
    }
}

/* The three builds of each body (kernels_internal.h). */
TPU_K_ISA_VARIANTS(, forward, tpu_k_norm_forward_row_f32,
              (float *y, const float *x, const float *w, const float *b, int64_t n, double eps,
               double *mean, double *rstd),
              (y, x, w, b, n, eps, mean, rstd))
TPU_K_ISA_VARIANTS(, backward, tpu_k_norm_backward_row_f32,
              (float *dx, const float *g, const float *x, const float *w, int64_t n, double mean,
               double rstd, double *partial),
              (dx, g, x, w, n, mean, rstd, partial))
