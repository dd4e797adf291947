/* The machine's limits for the benchmark suite (tpu/probe.h): FMA and
 * bf16 dot-product throughput from register-only chains, and STREAM triad
 * bandwidth. Not a kernel: nothing here touches a record. */
#define _POSIX_C_SOURCE 200809L

#include "tpu/probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels_internal.h"
#include "tpu/op.h"
#include "tpu/runtime.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What the shares of a probe read: the chain's length and level, or the
 * triad's arrays. */
typedef struct {
    int64_t iters;
    float *a, *b, *c; /* triad arrays */
    int64_t n;        /* triad elements */
    float sink[64];   /* keeps the chains' results alive */
    int level;        /* 0 scalar, 1 avx2, 2 avx512, 3 avx512-bf16 */
} probe_ctx;

/* Chains of FMAs on registers: 12 (AVX2) or 16 (AVX-512) independent
 * accumulators cover the FMA latency of both ports on the cores we run on. */
static float fma_scalar(int64_t iters) {
    float acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float m = 0.999999f, k = 1e-7f;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++)
            acc[j] = acc[j] * m + k;
    float s = 0;
    for (int j = 0; j < 8; j++)
        s += acc[j];
    return s;
}

#if TPU_K_X86
__attribute__((target("avx2,fma"))) static float fma_avx2(int64_t iters) {
    __m256 acc[12];
    for (int j = 0; j < 12; j++)
        acc[j] = _mm256_set1_ps((float)j);
    const __m256 m = _mm256_set1_ps(0.999999f), k = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++)
            acc[j] = _mm256_fmadd_ps(acc[j], m, k);
    __m256 s = acc[0];
    for (int j = 1; j < 12; j++)
        s = _mm256_add_ps(s, acc[j]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float fma_avx512(int64_t iters) {
    __m512 acc[16];
    for (int j = 0; j < 16; j++)
        acc[j] = _mm512_set1_ps((float)j);
    const __m512 m = _mm512_set1_ps(0.999999f), k = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++)
            acc[j] = _mm512_fmadd_ps(acc[j], m, k);
    __m512 s = acc[0];
    for (int j = 1; j < 16; j++)
        s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) static float dot_bf16(int64_t iters) {
    __m512 acc[16];
    for (int j = 0; j < 16; j++)
        acc[j] = _mm512_set1_ps((float)j);
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++)
            acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
    __m512 s = acc[0];
    for (int j = 1; j < 16; j++)
        s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}
#endif

/* Flops one iteration of the chosen chain does. */
static double flops_per_iter(int level) {
    switch (level) {
    case 1:
        return 12.0 * 8 * 2;
    case 2:
        return 16.0 * 16 * 2;
    case 3:
        return 16.0 * 16 * 4;
    default:
        return 8.0 * 2;
    }
}

static tpu_status chain_share(void *arg, int ith, int nth) {
    (void)nth;
    probe_ctx *c = arg;
    float r;
    switch (c->level) {
#if TPU_K_X86
    case 1:
        r = fma_avx2(c->iters);
        break;
    case 2:
        r = fma_avx512(c->iters);
        break;
    case 3:
        r = dot_bf16(c->iters);
        break;
#endif
    default:
        r = fma_scalar(c->iters);
        break;
    }
    c->sink[ith % 64] = r;
    return TPU_OK;
}

static int clamp_threads(int threads) {
    int pool = tpu_pool_num_threads();
    return threads < 1 ? 1 : threads > pool ? pool : threads;
}

/* Runs the chain at `level` for about `seconds`, returns the best GFLOP/s
 * of several timed passes. */
static tpu_status run_chain(int level, int threads, double seconds, double *gflops) {
    if (!gflops || !(seconds > 0))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_probe: gflops is NULL or seconds <= 0");
    int nth = clamp_threads(threads);
    probe_ctx c;
    memset(&c, 0, sizeof c);
    c.level = level;
    /* Calibrate: grow the pass until it takes ~1/10 of the budget. */
    c.iters = 1024;
    double t;
    for (;;) {
        double t0 = now_s();
        tpu_status st = tpu_pool_run(chain_share, &c, nth);
        if (st != TPU_OK)
            return st;
        t = now_s() - t0;
        if (t > seconds / 10 || c.iters > ((int64_t)1 << 40))
            break;
        c.iters *= 2;
    }
    double best = 0, end = now_s() + seconds;
    do {
        double t0 = now_s();
        tpu_status st = tpu_pool_run(chain_share, &c, nth);
        if (st != TPU_OK)
            return st;
        t = now_s() - t0;
        double rate = flops_per_iter(level) * (double)c.iters * nth / t * 1e-9;
        if (rate > best)
            best = rate;
    } while (now_s() < end);
    *gflops = best;
    return TPU_OK;
}

tpu_status tpu_probe_fma_f32(int threads, double seconds, double *gflops) {
    tpu_isa isa = tpu_kernels_get_reference() ? TPU_ISA_PORTABLE : tpu_kernels_get_isa();
    return run_chain(isa == TPU_ISA_AVX512 ? 2 : isa == TPU_ISA_AVX2 ? 1 : 0, threads, seconds,
                     gflops);
}

tpu_status tpu_probe_dot_bf16(int threads, double seconds, double *gflops) {
    if (!gflops)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_probe_dot_bf16: gflops is NULL");
    *gflops = 0;
#if TPU_K_X86
    __builtin_cpu_init();
    if (tpu_kernels_get_isa() == TPU_ISA_AVX512 && __builtin_cpu_supports("avx512bf16"))
        return run_chain(3, threads, seconds, gflops);
#endif
    (void)threads;
    (void)seconds;
    return TPU_OK;
}

/* Share ith of the triad: a contiguous chunk of every array. */
static tpu_status triad_share(void *arg, int ith, int nth) {
    probe_ctx *c = arg;
    int64_t lo = c->n * ith / nth, hi = c->n * (ith + 1) / nth;
    float *restrict a = c->a;
    const float *restrict b = c->b, *restrict d = c->c;
    for (int64_t i = lo; i < hi; i++)
        a[i] = b[i] + 3.0f * d[i];
    return TPU_OK;
}

/* First touch by the same shares as the triad, so pages land near the
 * threads that use them. */
static tpu_status triad_init(void *arg, int ith, int nth) {
    probe_ctx *c = arg;
    int64_t lo = c->n * ith / nth, hi = c->n * (ith + 1) / nth;
    for (int64_t i = lo; i < hi; i++) {
        c->a[i] = 0;
        c->b[i] = 1;
        c->c[i] = 2;
    }
    return TPU_OK;
}

tpu_status tpu_probe_stream_triad(int threads, size_t nbytes, double seconds, double *gbps) {
    if (!gbps || !(seconds > 0) || nbytes < 3 * 64)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_probe_stream_triad: gbps is NULL, seconds <= 0 or nbytes < 192");
    int nth = clamp_threads(threads);
    probe_ctx c;
    memset(&c, 0, sizeof c);
    c.n = (int64_t)(nbytes / 3 / sizeof(float)) / 16 * 16;
    size_t each = (size_t)c.n * sizeof(float);
    c.a = aligned_alloc(64, each);
    c.b = aligned_alloc(64, each);
    c.c = aligned_alloc(64, each);
    tpu_status st = TPU_OK;
    if (!c.a || !c.b || !c.c) {
        st = tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_probe_stream_triad: cannot allocate 3 x %zu bytes",
                           each);
        goto done;
    }
    if ((st = tpu_pool_run(triad_init, &c, nth)) != TPU_OK)
        goto done;
    double best = 0, end = now_s() + seconds;
    do {
        double t0 = now_s();
        if ((st = tpu_pool_run(triad_share, &c, nth)) != TPU_OK)
            goto done;
        double rate = 3.0 * (double)each / (now_s() - t0) * 1e-9;
        if (rate > best)
            best = rate;
    } while (now_s() < end);
    *gbps = best;
done:
    free(c.a);
    free(c.b);
    free(c.c);
    return st;
}
