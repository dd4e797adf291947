/* Run conversions f32 <-> f16/bf16 (see convert.h). bf16 has AVX2 and
 * AVX-512 variants (the same bits as the scalar ones); f16 uses the exact
 * scalar conversions of dtype.c. */
#include "convert.h"

#include <string.h>

#include "kernels_internal.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

bool tpu_k_cvt_supported(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
}

#if TPU_K_X86
/* bf16 -> f32: widen each 16-bit pattern into the top half of a lane. */
__attribute__((target("avx2,fma"))) static void bf16_to_f32_avx2(float *dst, const uint16_t *src,
                                                                 int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++)
        dst[i] = tpu_bf16_to_f32(src[i]);
}

/* f32 -> bf16, lane by lane as tpu_f32_to_bf16: NaN keeps its top half
 * with the quiet bit set; others add 0x7fff plus the kept lsb (ties to
 * even) and keep the top half. */
__attribute__((target("avx2,fma"))) static void f32_to_bf16_avx2(uint16_t *dst, const float *src,
                                                                 int64_t n) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
        __m256i sum = _mm256_add_epi32(bits, _mm256_add_epi32(bias, lsb));
        __m256i rounded = _mm256_srli_epi32(sum, 16);
        __m256i nan16 = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
        __m256i h = _mm256_blendv_epi8(rounded, nan16, is_nan);
        /* Every lane is <= 0xffff, so the unsigned saturating pack is exact. */
        __m128i packed =
            _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        _mm_storeu_si128((__m128i *)(dst + i), packed);
    }
    for (; i < n; i++)
        dst[i] = tpu_f32_to_bf16(src[i]);
}

/* The AVX-512 forms of the two above: 16 lanes, a mask for the NaNs,
 * and a truncating narrow (every lane is <= 0xffff). */
__attribute__((target("avx512f"))) static void bf16_to_f32_512(float *dst, const uint16_t *src,
                                                              int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
    }
    for (; i < n; i++)
        dst[i] = tpu_bf16_to_f32(src[i]);
}

__attribute__((target("avx512f"))) static void f32_to_bf16_512(uint16_t *dst, const float *src,
                                                              int64_t n) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(src + i));
        __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, abs_mask), inf);
        __m512i top = _mm512_srli_epi32(bits, 16);
        __m512i sum = _mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(top, one)));
        __m512i h = _mm512_mask_blend_epi32(is_nan, _mm512_srli_epi32(sum, 16),
                                            _mm512_or_si512(top, quiet));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(h));
    }
    for (; i < n; i++)
        dst[i] = tpu_f32_to_bf16(src[i]);
}
#endif

void tpu_k_cvt_to_f32(float *dst, const void *src, tpu_dtype dt, int64_t n) {
    if (dt == TPU_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = src;
    if (dt == TPU_DTYPE_BF16) {
#if TPU_K_X86
        tpu_isa isa = tpu_kernels_get_isa();
        if (isa >= TPU_ISA_AVX512) {
            bf16_to_f32_512(dst, s, n);
            return;
        }
        if (isa >= TPU_ISA_AVX2) {
            bf16_to_f32_avx2(dst, s, n);
            return;
        }
#endif
        for (int64_t i = 0; i < n; i++)
            dst[i] = tpu_bf16_to_f32(s[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = tpu_f16_to_f32(s[i]);
}

void tpu_k_cvt_from_f32(void *dst, tpu_dtype dt, const float *src, int64_t n) {
    if (dt == TPU_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    if (dt == TPU_DTYPE_BF16) {
#if TPU_K_X86
        tpu_isa isa = tpu_kernels_get_isa();
        if (isa >= TPU_ISA_AVX512) {
            f32_to_bf16_512(d, src, n);
            return;
        }
        if (isa >= TPU_ISA_AVX2) {
            f32_to_bf16_avx2(d, src, n);
            return;
        }
#endif
        for (int64_t i = 0; i < n; i++)
            d[i] = tpu_f32_to_bf16(src[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        d[i] = tpu_f32_to_f16(src[i]);
}
