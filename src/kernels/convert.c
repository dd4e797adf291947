/* Run conversions f32 <-> f16/bf16 (see convert.h). bf16 has AVX2,
 * AVX-512 and AVX512-BF16 variants (the same bits as the scalar ones:
 * the last only after a probe); f16 uses the exact scalar conversions of
 * dtype.c. */
#include "convert.h"

#include <pthread.h>
#include <string.h>

#include "ew_simd.h"
#include "kernels_internal.h"

bool tpu_k_cvt_supported(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
}

#if TPU_K_X86
/* ------------------------------------------ the VCVTNEPS2BF16 probe */

/* The inputs the probe rounds both ways: zeros, the smallest and largest
 * normals, ties to even either way, values that round up across a binade
 * and to infinity, infinities, NaNs with payloads and both quiet bits, a
 * subnormal (the fix-up's lane), and pseudo-random bits of every kind. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"))) static bool
bf16_cvt_matches(void) {
    static const uint32_t fixed[] = {
        0x00000000u, 0x80000000u, 0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu,
        0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7f8000u, 0x7f800000u,
        0xff800000u, 0x7f800001u, 0xffc12345u, 0x7fbfffffu, 0x00000001u, 0x807fffffu};
    enum { N = 4096 };
    uint32_t bits[N];
    memcpy(bits, fixed, sizeof fixed);
    uint32_t state = 2463534242u;
    for (size_t i = sizeof fixed / sizeof fixed[0]; i < N; i++) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        bits[i] = state;
    }
    for (int i = 0; i < N; i += 16) {
        __m512 v = _mm512_loadu_ps((const float *)(bits + i));
        __m256i hw = tpu_k_bf16x16_round_hw(v);
        __m256i ref = _mm512_cvtepi32_epi16(tpu_k_bf16x16_round(v));
        if (_mm256_cmpneq_epi16_mask(hw, ref) != 0)
            return false;
    }
    return true;
}

static bool g_cvt_ok;
static pthread_once_t g_cvt_once = PTHREAD_ONCE_INIT;

static void cvt_probe_once(void) {
    g_cvt_ok = __builtin_cpu_supports("avx512bf16") && bf16_cvt_matches();
}

bool tpu_k_bf16_cvt_ok(void) {
    if (!tpu_k_cpu_has_avx512())
        return false;
    pthread_once(&g_cvt_once, cvt_probe_once);
    return g_cvt_ok;
}

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

/* The 16-lane f32 -> bf16 run; hw: rounded by VCVTNEPS2BF16 (the caller
 * checked tpu_k_bf16_cvt_ok), a constant in each of the two builds below,
 * which both carry the AVX512-BF16 target so that it inlines. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"), always_inline)) static inline void
f32_to_bf16_16(uint16_t *dst, const float *src, int64_t n, bool hw) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (hw)
            tpu_k_bf16x16_store_hw(dst + i, _mm512_loadu_ps(src + i));
        else
            tpu_k_bf16x16_store(dst + i, _mm512_loadu_ps(src + i));
    }
    if (i < n) {
        const int k = (int)(n - i);
        if (hw)
            tpu_k_bf16x16_store_n_hw(dst + i, tpu_k_f32x16_load_n(src + i, k), k);
        else
            tpu_k_bf16x16_store_n(dst + i, tpu_k_f32x16_load_n(src + i, k), k);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"))) static void
f32_to_bf16_512(uint16_t *dst, const float *src, int64_t n) {
    f32_to_bf16_16(dst, src, n, false);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"))) static void
f32_to_bf16_hw(uint16_t *dst, const float *src, int64_t n) {
    f32_to_bf16_16(dst, src, n, true);
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
    if (dt == TPU_DTYPE_F16) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = tpu_f16_to_f32(s[i]);
        return;
    }
    /* The rest as tpu_k_load_f32 converts them, one loop per dtype. */
#define TO_F32(T, EXPR)                                                                            \
    do {                                                                                           \
        const T *p = src;                                                                          \
        for (int64_t i = 0; i < n; i++)                                                            \
            dst[i] = (EXPR);                                                                       \
    } while (0)
    switch (dt) {
    case TPU_DTYPE_F64: TO_F32(double, (float)p[i]); return;
    case TPU_DTYPE_I8: TO_F32(int8_t, (float)p[i]); return;
    case TPU_DTYPE_I16: TO_F32(int16_t, (float)p[i]); return;
    case TPU_DTYPE_I32: TO_F32(int32_t, (float)p[i]); return;
    case TPU_DTYPE_I64: TO_F32(int64_t, (float)p[i]); return;
    case TPU_DTYPE_U8: TO_F32(uint8_t, (float)p[i]); return;
    default: TO_F32(uint8_t, p[i] != 0 ? 1.0f : 0.0f); return; /* BOOL */
    }
#undef TO_F32
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
            if (tpu_k_bf16_cvt_ok())
                f32_to_bf16_hw(d, src, n);
            else
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

#if TPU_K_X86
/* Eight lanes at a time; VCVTTPS2QQ's "integer indefinite" for NaN and
 * out-of-range lanes is INT64_MIN, the value tpu_k_f64_to_i64 gives. */
__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))) static void
f32_to_i64_dq(int64_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_si512(dst + i, _mm512_cvttps_epi64(_mm256_loadu_ps(src + i)));
    if (i < n) {
        const __mmask8 m = (__mmask8)((1u << (n - i)) - 1);
        _mm512_mask_storeu_epi64(dst + i, m, _mm512_cvttps_epi64(_mm256_maskz_loadu_ps(m, src + i)));
    }
}
#endif

bool tpu_k_cvt_f32_to_i64(int64_t *dst, const float *src, int64_t n) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx512() && __builtin_cpu_supports("avx512dq")) {
        f32_to_i64_dq(dst, src, n);
        return true;
    }
#else
    (void)dst, (void)src, (void)n;
#endif
    return false;
}
