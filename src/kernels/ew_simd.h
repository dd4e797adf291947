/* Vector loads and stores of f32 and bf16 runs, in the registers the
 * element-wise loops compute in: 8 f32 lanes (AVX2) or 16 (AVX-512).
 *
 * A bf16 load is exact (the 16 bits become the top half of an f32); a
 * bf16 store rounds each lane as tpu_f32_to_bf16 does (ties to even; a NaN
 * keeps its top half with the quiet bit set), so a loop that loads,
 * computes in f32 and stores gives the bytes of the scalar reference.
 * convert.c's run conversions are these, in a loop; binary.c's direct
 * loops call them per vector so that no staging buffer is needed.
 *
 * Each function carries its target attribute: call them only from code
 * compiled for that target, after checking the CPU has it. */
#ifndef TPU_KERNELS_EW_SIMD_H
#define TPU_KERNELS_EW_SIMD_H

#include <stdint.h>

#include "kernels_internal.h"

#if TPU_K_X86
#include <immintrin.h>

#define TPU_K_AVX2 __attribute__((target("avx2,fma"), always_inline)) static inline
#define TPU_K_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"), always_inline)) static inline

/* True if the _hw stores below may run: the AVX-512 variants may, the
 * CPU has AVX512-BF16, and a one-time probe found its VCVTNEPS2BF16 gives
 * tpu_k_bf16x16_round's bits on every kind of normal input (convert.c).
 * Thread-safe. */
bool tpu_k_bf16_cvt_ok(void);

/* ----------------------------------------------------------- 8 lanes */

TPU_K_AVX2 __m256 tpu_k_bf16x8_load(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* The 8 lanes of v rounded to bf16, each in the low half of a 32-bit lane. */
TPU_K_AVX2 __m256i tpu_k_bf16x8_round(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i is_nan = _mm256_cmpgt_epi32(
        _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i top = _mm256_srli_epi32(bits, 16);
    const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
    const __m256i sum = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    return _mm256_blendv_epi8(_mm256_srli_epi32(sum, 16),
                              _mm256_or_si256(top, _mm256_set1_epi32(0x40)), is_nan);
}

TPU_K_AVX2 void tpu_k_bf16x8_store(uint16_t *p, __m256 v) {
    const __m256i h = tpu_k_bf16x8_round(v);
    /* Every lane is <= 0xffff, so the unsigned saturating pack is exact. */
    _mm_storeu_si128((__m128i *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

/* ---------------------------------------------------------- 16 lanes */

TPU_K_AVX512 __m512 tpu_k_bf16x16_load(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* The first n (< 16) lanes; the others read as zero. */
TPU_K_AVX512 __m512 tpu_k_bf16x16_load_n(const uint16_t *p, int n) {
    const __mmask16 m = (__mmask16)((1u << n) - 1);
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

TPU_K_AVX512 __m512i tpu_k_bf16x16_round(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i top = _mm512_srli_epi32(bits, 16);
    const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
    const __m512i sum = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    return _mm512_mask_blend_epi32(is_nan, _mm512_srli_epi32(sum, 16),
                                   _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
}

TPU_K_AVX512 void tpu_k_bf16x16_store(uint16_t *p, __m512 v) {
    /* A truncating narrow: every lane is <= 0xffff. */
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(tpu_k_bf16x16_round(v)));
}

TPU_K_AVX512 void tpu_k_bf16x16_store_n(uint16_t *p, __m512 v, int n) {
    _mm512_mask_cvtepi32_storeu_epi16(p, (__mmask16)((1u << n) - 1), tpu_k_bf16x16_round(v));
}

/* ------------------------------------------- 16 lanes, AVX512-BF16 */

#define TPU_K_AVX512BF16                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"), always_inline))       \
    static inline

/* tpu_k_bf16x16_round's bits, narrowed, by VCVTNEPS2BF16: it rounds ties
 * to even and quiets NaNs as tpu_f32_to_bf16 does, but reads subnormal
 * inputs as zero, so a vector holding one takes the portable rounding.
 * Call only where tpu_k_bf16_cvt_ok() holds. */
TPU_K_AVX512BF16 __m256i tpu_k_bf16x16_round_hw(__m512 v) {
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
    const __mmask16 sub = _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(mag, mag), mag,
                                                       _mm512_set1_epi32(0x00800000));
    if (__builtin_expect(sub != 0, 0))
        return _mm512_cvtepi32_epi16(tpu_k_bf16x16_round(v));
    return (__m256i)_mm512_cvtneps_pbh(v);
}

TPU_K_AVX512BF16 void tpu_k_bf16x16_store_hw(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, tpu_k_bf16x16_round_hw(v));
}

TPU_K_AVX512BF16 void tpu_k_bf16x16_store_n_hw(uint16_t *p, __m512 v, int n) {
    _mm256_mask_storeu_epi16(p, (__mmask16)((1u << n) - 1), tpu_k_bf16x16_round_hw(v));
}

TPU_K_AVX512 __m512 tpu_k_f32x16_load_n(const float *p, int n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}

TPU_K_AVX512 void tpu_k_f32x16_store_n(float *p, __m512 v, int n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v);
}

#endif /* TPU_K_X86 */
#endif
