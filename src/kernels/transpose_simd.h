/* Register transposes and widening loads shared by the kernels that read
 * a matrix across its rows (gemv.c's column-major B, gemm.c's and
 * gemm_bf16.c's packing of a Linear's weight). x86 only; each function
 * carries its target attribute, so callers need the matching CPU check.
 * Internal to src/kernels. */
#ifndef TPU_KERNELS_TRANSPOSE_SIMD_H
#define TPU_KERNELS_TRANSPOSE_SIMD_H

#include "kernels_internal.h"

#if TPU_K_X86
#include <immintrin.h>

#include "tpu/op.h"

/* 16 values at p (f32 or bf16, unaligned) as f32; bf16 widens exactly. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) __m512
tpu_k_load16_f32(const char *p, tpu_dtype dt) {
    if (dt == TPU_DTYPE_F32)
        return _mm512_loadu_ps(p);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* Transposes the 16 x 16 block r (r[q] lane l = element (q, l)) into
 * out (out[l] lane q = element (q, l)). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
tpu_k_transpose16(const __m512 r[16], __m512 out[16]) {
    __m512 t[16], s[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* s[4g + c], 128-bit lane L: rows 4g .. 4g+3 of column 4L + c. */
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        s[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        s[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        s[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        s[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* For each c, a 4 x 4 transpose of 128-bit lanes across the groups. */
    for (int c = 0; c < 4; c++) {
        __m512 x0 = _mm512_shuffle_f32x4(s[c], s[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
        __m512 x1 = _mm512_shuffle_f32x4(s[c], s[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
        __m512 x2 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
        __m512 x3 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
        out[c] = _mm512_shuffle_f32x4(x0, x2, _MM_SHUFFLE(2, 0, 2, 0));
        out[4 + c] = _mm512_shuffle_f32x4(x1, x3, _MM_SHUFFLE(2, 0, 2, 0));
        out[8 + c] = _mm512_shuffle_f32x4(x0, x2, _MM_SHUFFLE(3, 1, 3, 1));
        out[12 + c] = _mm512_shuffle_f32x4(x1, x3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) __m256
tpu_k_load8_f32(const char *p, tpu_dtype dt) {
    if (dt == TPU_DTYPE_F32)
        return _mm256_loadu_ps((const float *)p);
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* The 8 x 8 form of tpu_k_transpose16. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
tpu_k_transpose8(const __m256 r[8], __m256 out[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* s[4h + c], 128-bit lane L: rows 4h .. 4h+3 of column 4L + c. */
    for (int h = 0; h < 2; h++) {
        s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        out[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
        out[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
    }
}

#endif /* TPU_K_X86 */

#endif
