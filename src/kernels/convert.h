/* Contiguous runs converted between f32 and the 16-bit float types, for
 * fast paths that stage f16/bf16 operands through f32 buffers. Every
 * variant gives exactly the bytes of the scalar conversions in
 * tpu/dtype.h (round to nearest even, NaN kept quiet with its sign), so a
 * fast path built on them matches the reference path bit for bit. */
#ifndef TPU_KERNELS_CONVERT_H
#define TPU_KERNELS_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/dtype.h"

/* True for the dtypes the run conversions accept both ways: f32, f16,
 * bf16. */
bool tpu_k_cvt_supported(tpu_dtype dt);

/* dst[0..n) = src[0..n) (dtype dt, contiguous, aligned to its element
 * size) as f32. dt == f32 copies; dt may be any dtype (f64 and integers
 * convert as tpu_k_load_f32 does, bool to 0 or 1). n may be 0; src and
 * dst must not overlap. */
void tpu_k_cvt_to_f32(float *dst, const void *src, tpu_dtype dt, int64_t n);

/* dst[0..n) (dtype dt, contiguous, aligned) = src[0..n) rounded once to
 * dt. dt == f32 copies. n may be 0; src and dst must not overlap. */
void tpu_k_cvt_from_f32(void *dst, tpu_dtype dt, const float *src, int64_t n);

/* dst[0..n) = src[0..n) converted as tpu_k_f64_to_i64 does (truncation
 * toward zero, INT64_MIN out of range and for NaN: x86's own result), if
 * the CPU has a vector form (AVX512-DQ's VCVTTPS2QQ, under the AVX-512
 * level); false, with nothing written, otherwise. */
bool tpu_k_cvt_f32_to_i64(int64_t *dst, const float *src, int64_t n);

#endif
