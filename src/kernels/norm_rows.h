/* NORM's fast rows (norm_rows.c): one contiguous f32 row of layer_norm
 * and of its backward, in f64, at the best instruction set the ISA cap
 * allows; every level gives the same bits. */
#ifndef TPU_KERNELS_NORM_ROWS_H
#define TPU_KERNELS_NORM_ROWS_H

#include <stdint.h>

/* One forward row of n elements: *mean and the variance of x (biased),
 * *rstd = 1 / sqrt(var + eps), y_j = ((x_j - mean) rstd) w_j + b_j in
 * f64, rounded once to f32. w, b: NULL reads as 1 and +0.0. n may be 0
 * (mean and variance 0). y may be x. */
void tpu_k_norm_forward_row_f32(float *y, const float *x, const float *w, const float *b, int64_t n,
                                double eps, double *mean, double *rstd);

/* One backward row of n elements from the stored statistics: with
 * xhat = (x - mean) rstd and gw = g w (w NULL: g), adds g xhat to
 * partial[j] and g to partial[n + j] when partial is not NULL, and, when
 * dx is not NULL, writes dx_j = rstd ((gw_j - sum gw / n) - xhat_j sum
 * (gw xhat) / n). dx may be g. */
void tpu_k_norm_backward_row_f32(float *dx, const float *g, const float *x, const float *w, int64_t n,
                                 double mean, double rstd, double *partial);

#endif
