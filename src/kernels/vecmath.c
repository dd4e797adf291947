/* Vector math for float32 (contract in vecmath.h).
 *
 * The algorithms are in vecmath_body.h, written once over a "lane" type
 * and included here three times: portable C (one lane, fmaf() for the
 * fused multiply-adds), AVX2+FMA (8 lanes) and AVX-512 (16 lanes). Each
 * lane operation is a single IEEE-754 operation with the same operands
 * in the same order at every level, so the levels agree bit for bit.
 * That relies on the compiler not contracting a separate multiply and
 * add into an FMA: GCC does not in ISO C mode (-std=c11, as the Makefile
 * and setup.py build), and test_kernels_vecmath.c checks the agreement.
 *
 * Arrays run whole vectors; the last n % lanes elements are copied into
 * a padded vector and run through the same vector code (the same bits as
 * the scalar form, without a slower scalar loop).
 *
 * sin and cos reduce by Cody-Waite only for |x| <= VM_TRIG_MAX; lanes
 * above it (and infinities and NaNs) take the scalar fallback
 * vm_trig_fallback at every level: double-precision libm sin or cos,
 * rounded to float, which is within 0.5 ulp plus a double rounding. */
#include "vecmath.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels_internal.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* Largest |x| that sin and cos reduce in float: q = round(x 2/pi) stays
 * under 2^17, where the reduction's error analysis holds. */
#define VM_TRIG_MAX 105414.0f

/* sin or cos of x in double precision, rounded to float; NaN and the
 * infinities give NaN (x - x keeps a NaN's payload). */
static float vm_trig_fallback(float x, bool cosine) {
    if (!(fabsf(x) <= FLT_MAX))
        return x - x;
    return cosine ? (float)cos((double)x) : (float)sin((double)x);
}

/* The GELU's erfc(|x|/sqrt 2) on 8 intervals of |x| (vecmath_body.h,
 * k_act_gelu): the intervals' centers and, per power of u = |x| - center
 * (lowest first), the intervals' coefficients. */
static const float k_gelu_center[8] = {
    0.0f, 0x1.2p+0f, 0x1.ep+0f, 0x1.5p+1f,
    0x1.bp+1f, 0x1.08p+2f, 0x1.38p+2f, 0x1.68p+2f,
};
static const float k_gelu_coef[10][8] = {
    {0x1p+0f, 0x1.0ad7dap-2f, 0x1.f20396p-5f, 0x1.1bee6cp-7f,
     0x1.8301bep-11f, 0x1.36feaep-15f, 0x1.24149ap-20f, 0x1.3eb342p-26f},
    {-0x1.988454p-1f, -0x1.b1ec62p-2f, -0x1.19bfa4p-3f, -0x1.a0f22cp-6f,
     -0x1.5f90f6p-9f, -0x1.51cfa6p-13f, -0x1.71e576p-18f, -0x1.cd8e84p-24f},
    {-0x1.d02502p-24f, 0x1.e829eep-3f, 0x1.0823aap-3f, 0x1.119eecp-5f,
     0x1.28a25p-8f, 0x1.5c5e24p-12f, 0x1.c2cfaap-17f, 0x1.448856p-22f},
    {0x1.10591ep-3f, -0x1.335ccp-6f, -0x1.d8840ep-5f, -0x1.99587p-6f,
     -0x1.306a82p-8f, -0x1.c2dabap-12f, -0x1.5edf6ap-16f, -0x1.26a3dep-21f},
    {-0x1.cf004p-17f, -0x1.1a384ep-5f, 0x1.6b3072p-8f, 0x1.62da4ep-7f,
     0x1.9ed2e6p-9f, 0x1.96e1a2p-12f, 0x1.860f3p-16f, 0x1.834b5cp-21f},
    {-0x1.45c526p-6f, 0x1.5a33d2p-7f, 0x1.aed19cp-8f, -0x1.fbed6ap-10f,
     -0x1.795e2cp-10f, -0x1.0c0ea6p-12f, -0x1.47a5c2p-16f, -0x1.874e54p-21f},
    {-0x1.756d56p-13f, 0x1.567ef6p-9f, -0x1.6e05dap-9f, -0x1.38d41p-11f,
     0x1.96a6eap-12f, 0x1.0420f6p-13f, 0x1.ac5188p-17f, 0x1.3aef42p-21f},
    {0x1.5f05b2p-9f, -0x1.b768d4p-10f, -0x1.1e2aa2p-15f, 0x1.db84p-12f,
     -0x1.021fa2p-16f, -0x1.653964p-15f, -0x1.b9d938p-18f, -0x1.a16a3ep-22f},
    {-0x1.39d574p-12f, -0x1.9c3372p-15f, 0x1.3c505p-12f, -0x1.53267ap-14f,
     -0x1.2a2d96p-15f, 0x1.1ac7acp-17f, 0x1.677822p-19f, 0x1.d389c4p-23f},
    {-0x1.7d6adp-14f, 0x1.52ccccp-13f, -0x1.f68aa6p-15f, -0x1.22535ap-16f,
     0x1.d19fd6p-17f, 0x1.10566cp-25f, -0x1.8a983ep-21f, -0x1.646932p-24f},
};

/* ------------------------------------------------ portable level */

static inline float vm_s_bits2f(int32_t i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
static inline int32_t vm_s_f2bits(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

#define VM_SFX(name) name##_s
#define VM_ATTR static inline
#define VM_LANES 1
#define VF float
#define VI int32_t
#define VM bool
#define vc(f) (f)
#define vic(i) ((int32_t)(i))
#define vadd(a, b) ((a) + (b))
#define vsub(a, b) ((a) - (b))
#define vmul(a, b) ((a) * (b))
#define vdiv(a, b) ((a) / (b))
#define vfma(a, b, c) fmaf((a), (b), (c))
#define vmin(a, b) ((a) < (b) ? (a) : (b))
#define vmax(a, b) ((a) > (b) ? (a) : (b))
#define vand(a, b) vm_s_bits2f(vm_s_f2bits(a) & vm_s_f2bits(b))
#define vor(a, b) vm_s_bits2f(vm_s_f2bits(a) | vm_s_f2bits(b))
#define vxor(a, b) vm_s_bits2f(vm_s_f2bits(a) ^ vm_s_f2bits(b))
#define vbits(a) vm_s_f2bits(a)
#define vfloat(i) vm_s_bits2f(i)
#define vcvt(i) ((float)(i))
/* Wrapping int32 arithmetic through uint32 (no signed overflow). */
#define viadd(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define visub(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)))
#define viand(a, b) ((a) & (b))
#define vsll(a, n) ((int32_t)((uint32_t)(a) << (n)))
/* Arithmetic shift, spelled out (>> of a negative is implementation-defined). */
#define vsra(a, n) ((a) < 0 ? ~(int32_t)(~(uint32_t)(a) >> (n)) : (int32_t)((uint32_t)(a) >> (n)))
#define vlt(a, b) ((a) < (b))
#define vle(a, b) ((a) <= (b))
#define veq(a, b) ((a) == (b))
#define vnan(a) ((a) != (a))
#define vieq(a, b) ((a) == (b))
#define vmor(a, b) ((a) || (b))
#define vsel(m, a, b) ((m) ? (a) : (b))
#define vany(m) (m)
#define vcvtt(a) ((int32_t)(a))
#define vilt(a, b) ((a) < (b))
#define vlut8(i, table) ((table)[(i) & 7])
#include "vecmath_body.h"
#undef VM_SFX
#undef VM_ATTR
#undef VM_LANES
#undef VF
#undef VI
#undef VM

/* ------------------------------------------------ AVX2 + FMA level */
#if TPU_K_X86

#define VM_SFX(name) name##_avx2
#define VM_ATTR __attribute__((target("avx2,fma"))) static inline
#define VM_LANES 8
#define VF __m256
#define VI __m256i
#define VM __m256
#define vc(f) _mm256_set1_ps(f)
#define vic(i) _mm256_set1_epi32(i)
#define vadd(a, b) _mm256_add_ps((a), (b))
#define vsub(a, b) _mm256_sub_ps((a), (b))
#define vmul(a, b) _mm256_mul_ps((a), (b))
#define vdiv(a, b) _mm256_div_ps((a), (b))
#define vfma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
/* minps returns its second operand unless the first is smaller, as the
 * portable a < b ? a : b does (NaN included). */
#define vmin(a, b) _mm256_min_ps((a), (b))
#define vmax(a, b) _mm256_max_ps((a), (b))
#define vand(a, b) _mm256_and_ps((a), (b))
#define vor(a, b) _mm256_or_ps((a), (b))
#define vxor(a, b) _mm256_xor_ps((a), (b))
#define vbits(a) _mm256_castps_si256(a)
#define vfloat(i) _mm256_castsi256_ps(i)
#define vcvt(i) _mm256_cvtepi32_ps(i)
#define viadd(a, b) _mm256_add_epi32((a), (b))
#define visub(a, b) _mm256_sub_epi32((a), (b))
#define viand(a, b) _mm256_and_si256((a), (b))
#define vsll(a, n) _mm256_slli_epi32((a), (n))
#define vsra(a, n) _mm256_srai_epi32((a), (n))
#define vlt(a, b) _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define vle(a, b) _mm256_cmp_ps((a), (b), _CMP_LE_OQ)
#define veq(a, b) _mm256_cmp_ps((a), (b), _CMP_EQ_OQ)
#define vnan(a) _mm256_cmp_ps((a), (a), _CMP_UNORD_Q)
#define vieq(a, b) _mm256_castsi256_ps(_mm256_cmpeq_epi32((a), (b)))
#define vmor(a, b) _mm256_or_ps((a), (b))
#define vsel(m, a, b) _mm256_blendv_ps((b), (a), (m))
#define vany(m) (_mm256_movemask_ps(m) != 0)
#define vcvtt(a) _mm256_cvttps_epi32(a)
#define vilt(a, b) _mm256_castsi256_ps(_mm256_cmpgt_epi32((b), (a)))
#define vlut8(i, table) _mm256_permutevar8x32_ps(_mm256_loadu_ps(table), (i))
#include "vecmath_body.h"
#undef VM_SFX
#undef VM_ATTR
#undef VM_LANES
#undef VF
#undef VI
#undef VM

/* ------------------------------------------------ AVX-512 level */

#define VM_SFX(name) name##_avx512
#define VM_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static inline
#define VM_LANES 16
#define VF __m512
#define VI __m512i
#define VM __mmask16
#define vc(f) _mm512_set1_ps(f)
#define vic(i) _mm512_set1_epi32(i)
#define vadd(a, b) _mm512_add_ps((a), (b))
#define vsub(a, b) _mm512_sub_ps((a), (b))
#define vmul(a, b) _mm512_mul_ps((a), (b))
#define vdiv(a, b) _mm512_div_ps((a), (b))
#define vfma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define vmin(a, b) _mm512_min_ps((a), (b))
#define vmax(a, b) _mm512_max_ps((a), (b))
#define vand(a, b) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define vor(a, b) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define vxor(a, b) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define vbits(a) _mm512_castps_si512(a)
#define vfloat(i) _mm512_castsi512_ps(i)
#define vcvt(i) _mm512_cvtepi32_ps(i)
#define viadd(a, b) _mm512_add_epi32((a), (b))
#define visub(a, b) _mm512_sub_epi32((a), (b))
#define viand(a, b) _mm512_and_si512((a), (b))
#define vsll(a, n) _mm512_slli_epi32((a), (n))
#define vsra(a, n) _mm512_srai_epi32((a), (n))
#define vlt(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ)
#define vle(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_LE_OQ)
#define veq(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_EQ_OQ)
#define vnan(a) _mm512_cmp_ps_mask((a), (a), _CMP_UNORD_Q)
#define vieq(a, b) _mm512_cmpeq_epi32_mask((a), (b))
#define vmor(a, b) ((__mmask16)((a) | (b)))
#define vsel(m, a, b) _mm512_mask_blend_ps((m), (b), (a))
#define vany(m) ((m) != 0)
#define vcvtt(a) _mm512_cvttps_epi32(a)
#define vilt(a, b) _mm512_cmplt_epi32_mask((a), (b))
#define vlut8(i, table) _mm512_permutexvar_ps((i), _mm512_castps256_ps512(_mm256_loadu_ps(table)))
#include "vecmath_body.h"
#undef VM_SFX
#undef VM_ATTR
#undef VM_LANES
#undef VF
#undef VI
#undef VM

#endif /* TPU_K_X86 */

/* ------------------------------------------------ array loops */

/* One function per (fn, level) over whole arrays. The vector loops take
 * full vectors, then the tail in a zero-padded buffer. sin and cos send
 * the lanes outside the reduction's range to vm_trig_fallback. */
typedef void (*vm_array_fn)(float *out, const float *in, int64_t n);

/* Array loops of the portable level: the scalar form per element. */
#define VM_PORTABLE_LOOP(NAME, EXPR)                                                           \
    static void vm_##NAME##_array_s(float *out, const float *in, int64_t n) {                 \
        for (int64_t i = 0; i < n; i++) {                                                      \
            float x = in[i];                                                                   \
            out[i] = (EXPR);                                                                   \
        }                                                                                      \
    }

static float vm_sin_s(float x) {
    return fabsf(x) <= VM_TRIG_MAX ? k_sin_s(x) : vm_trig_fallback(x, false);
}
static float vm_cos_s(float x) {
    return fabsf(x) <= VM_TRIG_MAX ? k_cos_s(x) : vm_trig_fallback(x, true);
}

VM_PORTABLE_LOOP(exp, k_exp_s(x))
VM_PORTABLE_LOOP(expm1, k_expm1_s(x))
VM_PORTABLE_LOOP(log, k_log_s(x))
VM_PORTABLE_LOOP(log1p, k_log1p_s(x))
VM_PORTABLE_LOOP(log2, k_log2_s(x))
VM_PORTABLE_LOOP(tanh, k_tanh_s(x))
VM_PORTABLE_LOOP(sigmoid, k_sigmoid_s(x))
VM_PORTABLE_LOOP(erf, k_erf_s(x))
VM_PORTABLE_LOOP(sin, vm_sin_s(x))
VM_PORTABLE_LOOP(cos, vm_cos_s(x))
VM_PORTABLE_LOOP(act_gelu, k_act_gelu_s(x))
VM_PORTABLE_LOOP(act_gelu_tanh, k_act_gelu_tanh_s(x))
VM_PORTABLE_LOOP(act_silu, k_act_silu_s(x))

/* The activations' gradient loops (tpu_vm_act_grad_f32): out[i] =
 * BODY(g[i], x[i]); the vector ones run the tail in zero-padded
 * buffers, as the loops above do. */
typedef void (*vm_grad_fn)(float *out, const float *g, const float *x, int64_t n);

#define VM_PORTABLE_GRAD_LOOP(NAME, BODY)                                                      \
    static void vm_##NAME##_grad_s(float *out, const float *g, const float *x, int64_t n) {   \
        for (int64_t i = 0; i < n; i++)                                                        \
            out[i] = BODY(g[i], x[i]);                                                         \
    }
VM_PORTABLE_GRAD_LOOP(gelu, k_grad_gelu_s)
VM_PORTABLE_GRAD_LOOP(gelu_tanh, k_grad_gelu_tanh_s)
VM_PORTABLE_GRAD_LOOP(silu, k_grad_silu_s)

/* The portable tpu_vm_exp_rows_f32 (the vector levels' tail too). */
static void vm_exp_rows_s(float *x, int64_t ld, int64_t rows, int64_t n, const float *sub,
                          float *sum) {
    if (sum != NULL)
        for (int64_t i = 0; i < n; i++)
            sum[i] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const float v = k_exp_s(x[r * ld + i] - sub[i]);
            x[r * ld + i] = v;
            if (sum != NULL)
                sum[i] = sum[i] + v;
        }
}

static const vm_array_fn k_portable_fns[] = {
    [TPU_VM_EXP] = vm_exp_array_s,         [TPU_VM_EXPM1] = vm_expm1_array_s,
    [TPU_VM_LOG] = vm_log_array_s,         [TPU_VM_LOG1P] = vm_log1p_array_s,
    [TPU_VM_LOG2] = vm_log2_array_s,       [TPU_VM_TANH] = vm_tanh_array_s,
    [TPU_VM_SIGMOID] = vm_sigmoid_array_s, [TPU_VM_ERF] = vm_erf_array_s,
    [TPU_VM_SIN] = vm_sin_array_s,         [TPU_VM_COS] = vm_cos_array_s,
};
_Static_assert(sizeof k_portable_fns / sizeof k_portable_fns[0] == TPU_VM_COUNT,
               "every tpu_vm_fn needs a portable loop");

#if TPU_K_X86

/* A vector loop: BODY maps VF x to VF y; LOAD/STORE/LANES/ATTR per level;
 * TRIG is -1 for no fallback, else 0 (sin) or 1 (cos). */
#define VM_VECTOR_LOOP(NAME, SFX, ATTR, VTYPE, LANES, LOAD, STORE, ABS_LE_MAX, BODY, TRIG)       \
    ATTR static void vm_##NAME##_array_##SFX(float *out, const float *in, int64_t n) {         \
        float buf[LANES];                                                                      \
        for (int64_t i = 0; i < n; i += LANES) {                                               \
            int64_t len = n - i < LANES ? n - i : LANES;                                       \
            const float *src = in + i;                                                         \
            if (len < LANES) {                                                                 \
                memset(buf, 0, sizeof buf);                                                    \
                memcpy(buf, src, (size_t)len * sizeof(float));                                 \
                src = buf;                                                                     \
            }                                                                                  \
            VTYPE x = LOAD(src);                                                               \
            VTYPE y = BODY(x);                                                                 \
            bool slow = (TRIG) >= 0 && !ABS_LE_MAX(x);                                         \
            float *dst = len < LANES ? buf : out + i;                                          \
            STORE(dst, y);                                                                     \
            if (slow) {                                                                        \
                float xs[LANES];                                                               \
                STORE(xs, x);                                                                  \
                for (int j = 0; j < LANES; j++)                                                \
                    if (!(fabsf(xs[j]) <= VM_TRIG_MAX))                                        \
                        dst[j] = vm_trig_fallback(xs[j], (TRIG) == 1);                         \
            }                                                                                  \
            if (len < LANES)                                                                   \
                memcpy(out + i, buf, (size_t)len * sizeof(float));                             \
        }                                                                                      \
    }

#define VM_AVX2_ATTR __attribute__((target("avx2,fma")))
#define VM_AVX512_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* All lanes have |x| <= VM_TRIG_MAX (false for NaN lanes). */
VM_AVX2_ATTR static inline bool vm_all_in_range_avx2(__m256 x) {
    __m256 ax = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    return _mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(VM_TRIG_MAX), _CMP_LE_OQ)) == 0xff;
}
VM_AVX512_ATTR static inline bool vm_all_in_range_avx512(__m512 x) {
    return _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(VM_TRIG_MAX), _CMP_LE_OQ) ==
           (__mmask16)0xffff;
}

#define VM_AVX2_LOOP(NAME, BODY, TRIG)                                                          \
    VM_VECTOR_LOOP(NAME, avx2, VM_AVX2_ATTR, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps,      \
                   vm_all_in_range_avx2, BODY, TRIG)
#define VM_AVX512_LOOP(NAME, BODY, TRIG)                                                        \
    VM_VECTOR_LOOP(NAME, avx512, VM_AVX512_ATTR, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, \
                   vm_all_in_range_avx512, BODY, TRIG)

VM_AVX2_LOOP(exp, k_exp_avx2, -1)
VM_AVX2_LOOP(expm1, k_expm1_avx2, -1)
VM_AVX2_LOOP(log, k_log_avx2, -1)
VM_AVX2_LOOP(log1p, k_log1p_avx2, -1)
VM_AVX2_LOOP(log2, k_log2_avx2, -1)
VM_AVX2_LOOP(tanh, k_tanh_avx2, -1)
VM_AVX2_LOOP(sigmoid, k_sigmoid_avx2, -1)
VM_AVX2_LOOP(erf, k_erf_avx2, -1)
VM_AVX2_LOOP(sin, k_sin_avx2, 0)
VM_AVX2_LOOP(cos, k_cos_avx2, 1)
VM_AVX2_LOOP(act_gelu, k_act_gelu_avx2, -1)
VM_AVX2_LOOP(act_gelu_tanh, k_act_gelu_tanh_avx2, -1)
VM_AVX2_LOOP(act_silu, k_act_silu_avx2, -1)

VM_AVX512_LOOP(exp, k_exp_avx512, -1)
VM_AVX512_LOOP(expm1, k_expm1_avx512, -1)
VM_AVX512_LOOP(log, k_log_avx512, -1)
VM_AVX512_LOOP(log1p, k_log1p_avx512, -1)
VM_AVX512_LOOP(log2, k_log2_avx512, -1)
VM_AVX512_LOOP(tanh, k_tanh_avx512, -1)
VM_AVX512_LOOP(sigmoid, k_sigmoid_avx512, -1)
VM_AVX512_LOOP(erf, k_erf_avx512, -1)
VM_AVX512_LOOP(sin, k_sin_avx512, 0)
VM_AVX512_LOOP(cos, k_cos_avx512, 1)
VM_AVX512_LOOP(act_gelu, k_act_gelu_avx512, -1)
VM_AVX512_LOOP(act_gelu_tanh, k_act_gelu_tanh_avx512, -1)
VM_AVX512_LOOP(act_silu, k_act_silu_avx512, -1)

#define VM_VECTOR_GRAD_LOOP(NAME, SFX, ATTR, VTYPE, LANES, LOAD, STORE, BODY)                  \
    ATTR static void vm_##NAME##_grad_##SFX(float *out, const float *g, const float *x,        \
                                            int64_t n) {                                       \
        float gb[LANES], xb[LANES];                                                            \
        for (int64_t i = 0; i < n; i += LANES) {                                               \
            int64_t len = n - i < LANES ? n - i : LANES;                                       \
            const float *gs = g + i, *xs = x + i;                                              \
            if (len < LANES) {                                                                 \
                memset(gb, 0, sizeof gb);                                                      \
                memset(xb, 0, sizeof xb);                                                      \
                memcpy(gb, gs, (size_t)len * sizeof(float));                                  \
                memcpy(xb, xs, (size_t)len * sizeof(float));                                   \
                gs = gb, xs = xb;                                                              \
            }                                                                                  \
            VTYPE y = BODY(LOAD(gs), LOAD(xs));                                                \
            if (len < LANES) {                                                                 \
                STORE(gb, y);                                                                  \
                memcpy(out + i, gb, (size_t)len * sizeof(float));                              \
            } else {                                                                           \
                STORE(out + i, y);                                                             \
            }                                                                                  \
        }                                                                                      \
    }
#define VM_GRAD_LOOPS(SFX, ATTR, VTYPE, LANES, LOAD, STORE)                                    \
    VM_VECTOR_GRAD_LOOP(gelu, SFX, ATTR, VTYPE, LANES, LOAD, STORE, k_grad_gelu_##SFX)          \
    VM_VECTOR_GRAD_LOOP(gelu_tanh, SFX, ATTR, VTYPE, LANES, LOAD, STORE, k_grad_gelu_tanh_##SFX) \
    VM_VECTOR_GRAD_LOOP(silu, SFX, ATTR, VTYPE, LANES, LOAD, STORE, k_grad_silu_##SFX)
VM_GRAD_LOOPS(avx2, VM_AVX2_ATTR, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps)
VM_GRAD_LOOPS(avx512, VM_AVX512_ATTR, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps)
#undef VM_GRAD_LOOPS
#undef VM_VECTOR_GRAD_LOOP

static const vm_array_fn k_avx2_fns[] = {
    [TPU_VM_EXP] = vm_exp_array_avx2,         [TPU_VM_EXPM1] = vm_expm1_array_avx2,
    [TPU_VM_LOG] = vm_log_array_avx2,         [TPU_VM_LOG1P] = vm_log1p_array_avx2,
    [TPU_VM_LOG2] = vm_log2_array_avx2,       [TPU_VM_TANH] = vm_tanh_array_avx2,
    [TPU_VM_SIGMOID] = vm_sigmoid_array_avx2, [TPU_VM_ERF] = vm_erf_array_avx2,
    [TPU_VM_SIN] = vm_sin_array_avx2,         [TPU_VM_COS] = vm_cos_array_avx2,
};
_Static_assert(sizeof k_avx2_fns / sizeof k_avx2_fns[0] == TPU_VM_COUNT,
               "every tpu_vm_fn needs an AVX2 loop");

static const vm_array_fn k_avx512_fns[] = {
    [TPU_VM_EXP] = vm_exp_array_avx512,         [TPU_VM_EXPM1] = vm_expm1_array_avx512,
    [TPU_VM_LOG] = vm_log_array_avx512,         [TPU_VM_LOG1P] = vm_log1p_array_avx512,
    [TPU_VM_LOG2] = vm_log2_array_avx512,       [TPU_VM_TANH] = vm_tanh_array_avx512,
    [TPU_VM_SIGMOID] = vm_sigmoid_array_avx512, [TPU_VM_ERF] = vm_erf_array_avx512,
    [TPU_VM_SIN] = vm_sin_array_avx512,         [TPU_VM_COS] = vm_cos_array_avx512,
};
_Static_assert(sizeof k_avx512_fns / sizeof k_avx512_fns[0] == TPU_VM_COUNT,
               "every tpu_vm_fn needs an AVX-512 loop");

/* exp of rows minus a vector (tpu_vm_exp_rows_f32): LANES columns at a
 * time, down the rows, with the column sums in a register; the columns
 * past the last whole vector take the portable level's scalar exp, which
 * gives the same bits. */
#define VM_EXP_ROWS(SFX, ATTR, VTYPE, LANES, LOAD, STORE, SUB, ADD, ZERO, KEXP)                 \
    ATTR static void vm_exp_rows_##SFX(float *x, int64_t ld, int64_t rows, int64_t n,          \
                                       const float *sub, float *sum) {                         \
        int64_t i = 0;                                                                         \
        for (; i + LANES <= n; i += LANES) {                                                   \
            const VTYPE s = LOAD(sub + i);                                                     \
            VTYPE acc = ZERO();                                                                \
            for (int64_t r = 0; r < rows; r++) {                                               \
                float *p = x + r * ld + i;                                                     \
                const VTYPE v = KEXP(SUB(LOAD(p), s));                                         \
                STORE(p, v);                                                                   \
                acc = ADD(acc, v);                                                             \
            }                                                                                  \
            if (sum != NULL)                                                                   \
                STORE(sum + i, acc);                                                           \
        }                                                                                      \
        if (i < n)                                                                             \
            vm_exp_rows_s(x + i, ld, rows, n - i, sub + i, sum != NULL ? sum + i : NULL);      \
    }

VM_EXP_ROWS(avx2, VM_AVX2_ATTR, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_sub_ps,
            _mm256_add_ps, _mm256_setzero_ps, k_exp_avx2)
VM_EXP_ROWS(avx512, VM_AVX512_ATTR, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_sub_ps,
            _mm512_add_ps, _mm512_setzero_ps, k_exp_avx512)

#endif /* TPU_K_X86 */

/* ------------------------------------------------ public functions */

void tpu_vm_exp_rows_f32(float *x, int64_t ld, int64_t rows, int64_t n, const float *sub,
                         float *sum) {
    if (n <= 0)
        return;
#if TPU_K_X86
    tpu_isa isa = tpu_kernels_get_isa();
    if (isa >= TPU_ISA_AVX512) {
        vm_exp_rows_avx512(x, ld, rows, n, sub, sum);
        return;
    }
    if (isa >= TPU_ISA_AVX2) {
        vm_exp_rows_avx2(x, ld, rows, n, sub, sum);
        return;
    }
#endif
    vm_exp_rows_s(x, ld, rows, n, sub, sum);
}

/* A table of the vector levels' loops, NULL where the build has none. */
#if TPU_K_X86
#define VM_X86(table) (table)
#else
#define VM_X86(table) NULL
#endif

/* Of a function's three array loops, the one for the ISA level that
 * tpu_kernels_get_isa() allows. */
static const vm_array_fn *level_fns(const vm_array_fn *portable, const vm_array_fn *avx2,
                                    const vm_array_fn *avx512) {
#if TPU_K_X86
    tpu_isa isa = tpu_kernels_get_isa();
    if (isa >= TPU_ISA_AVX512)
        return avx512;
    if (isa >= TPU_ISA_AVX2)
        return avx2;
#else
    (void)avx2;
    (void)avx512;
#endif
    return portable;
}

void tpu_vm_f32(tpu_vm_fn fn, float *out, const float *in, int64_t n) {
    if ((unsigned)fn >= (unsigned)TPU_VM_COUNT || n <= 0)
        return;
    level_fns(k_portable_fns, VM_X86(k_avx2_fns), VM_X86(k_avx512_fns))[fn](out, in, n);
}

/* The activations' loops per level, by tpu_vm_act. */
#define VM_ACT_TABLE(SFX)                                                                      \
    {[TPU_VM_ACT_GELU] = vm_act_gelu_array_##SFX,                                             \
     [TPU_VM_ACT_GELU_TANH] = vm_act_gelu_tanh_array_##SFX,                                   \
     [TPU_VM_ACT_SILU] = vm_act_silu_array_##SFX}
static const vm_array_fn k_act_portable[TPU_VM_ACT_COUNT] = VM_ACT_TABLE(s);
#if TPU_K_X86
static const vm_array_fn k_act_avx2[TPU_VM_ACT_COUNT] = VM_ACT_TABLE(avx2);
static const vm_array_fn k_act_avx512[TPU_VM_ACT_COUNT] = VM_ACT_TABLE(avx512);
#endif
#undef VM_ACT_TABLE

void tpu_vm_act_f32(tpu_vm_act act, float *out, const float *in, int64_t n) {
    if ((unsigned)act >= (unsigned)TPU_VM_ACT_COUNT || n <= 0)
        return;
    level_fns(k_act_portable, VM_X86(k_act_avx2), VM_X86(k_act_avx512))[act](out, in, n);
}

/* The gradient loops per level, by tpu_vm_act. */
#define VM_GRAD_TABLE(SFX)                                                                     \
    {[TPU_VM_ACT_GELU] = vm_gelu_grad_##SFX, [TPU_VM_ACT_GELU_TANH] = vm_gelu_tanh_grad_##SFX,  \
     [TPU_VM_ACT_SILU] = vm_silu_grad_##SFX}
static const vm_grad_fn k_grad_fns[3][TPU_VM_ACT_COUNT] = {
    VM_GRAD_TABLE(s),
#if TPU_K_X86
    VM_GRAD_TABLE(avx2),
    VM_GRAD_TABLE(avx512),
#endif
};
#undef VM_GRAD_TABLE

void tpu_vm_act_grad_f32(tpu_vm_act act, float *out, const float *grad, const float *x,
                         int64_t n) {
    if ((unsigned)act >= (unsigned)TPU_VM_ACT_COUNT || n <= 0)
        return;
    int level = 0;
#if TPU_K_X86
    tpu_isa isa = tpu_kernels_get_isa();
    level = isa >= TPU_ISA_AVX512 ? 2 : isa >= TPU_ISA_AVX2 ? 1 : 0;
#endif
    k_grad_fns[level][act](out, grad, x, n);
}

float tpu_vm_scalar_f32(tpu_vm_fn fn, float x) {
    float y = NAN;
    if ((unsigned)fn < (unsigned)TPU_VM_COUNT)
        k_portable_fns[fn](&y, &x, 1);
    return y;
}

static const char *const k_vm_names[] = {
    [TPU_VM_EXP] = "exp",   [TPU_VM_EXPM1] = "expm1",     [TPU_VM_LOG] = "log",
    [TPU_VM_LOG1P] = "log1p", [TPU_VM_LOG2] = "log2",     [TPU_VM_TANH] = "tanh",
    [TPU_VM_SIGMOID] = "sigmoid", [TPU_VM_ERF] = "erf",   [TPU_VM_SIN] = "sin",
    [TPU_VM_COS] = "cos",
};
_Static_assert(sizeof k_vm_names / sizeof k_vm_names[0] == TPU_VM_COUNT,
               "every tpu_vm_fn needs a name");

const char *tpu_vm_name(tpu_vm_fn fn) {
    return (unsigned)fn < (unsigned)TPU_VM_COUNT ? k_vm_names[fn] : "invalid";
}

/* The error bound the test enforces, in ulp. Measured maxima over every
 * 401st float bit pattern (the error analysis in vecmath_body.h predicts
 * these within ~0.1): exp 1.02, expm1 1.52, log 0.76, log1p 0.87,
 * log2 0.94, tanh 1.50, sigmoid 1.46, erf 1.18, sin 1.46, cos 1.50. The
 * bounds leave room for the inputs a full 2^32 sweep
 * (TPU_VM_EXHAUSTIVE=1) adds, and none exceeds 2. */
static const double k_vm_max_ulp[] = {
    [TPU_VM_EXP] = 1.5,  [TPU_VM_EXPM1] = 2.0, [TPU_VM_LOG] = 1.5,     [TPU_VM_LOG1P] = 1.5,
    [TPU_VM_LOG2] = 1.5, [TPU_VM_TANH] = 2.0,  [TPU_VM_SIGMOID] = 2.0, [TPU_VM_ERF] = 1.5,
    [TPU_VM_SIN] = 2.0,  [TPU_VM_COS] = 2.0,
};
_Static_assert(sizeof k_vm_max_ulp / sizeof k_vm_max_ulp[0] == TPU_VM_COUNT,
               "every tpu_vm_fn needs an error bound");

double tpu_vm_max_ulp(tpu_vm_fn fn) {
    return (unsigned)fn < (unsigned)TPU_VM_COUNT ? k_vm_max_ulp[fn] : -1.0;
}
