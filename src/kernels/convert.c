/* Run conversions f32 <-> f16/bf16 (see convert.h). bf16 has AVX2 and
 * AVX-512 variants (the same bits as the scalar ones); f16 uses the exact
 * scalar conversions of dtype.c. */
#include "convert.h"

#include <string.h>

#include "ew_simd.h"
#include "kernels_internal.h"

bool tpu_k_cvt_supported(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
}

#if TPU_K_X86
/* The run conversions: ew_simd.h's vectors in a loop, then a scalar tail. */
__attribute__((target("avx2,fma"))) static void bf16_to_f32_avx2(float *dst, const uint16_t *src,
                                                                 int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, tpu_k_bf16x8_load(src + i));
    for (; i < n; i++)
        dst[i] = tpu_bf16_to_f32(src[i]);
}

__attribute__((target("avx2,fma"))) static void f32_to_bf16_avx2(uint16_t *dst, const float *src,
                                                                 int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        tpu_k_bf16x8_store(dst + i, _mm256_loadu_ps(src + i));
    for (; i < n; i++)
        dst[i] = tpu_f32_to_bf16(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static void
bf16_to_f32_512(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, tpu_k_bf16x16_load(src + i));
    if (i < n)
        tpu_k_f32x16_store_n(dst + i, tpu_k_bf16x16_load_n(src + i, (int)(n - i)), (int)(n - i));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static void
f32_to_bf16_512(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        tpu_k_bf16x16_store(dst + i, _mm512_loadu_ps(src + i));
    if (i < n)
        tpu_k_bf16x16_store_n(dst + i, tpu_k_f32x16_load_n(src + i, (int)(n - i)), (int)(n - i));
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
