/* Throughput of src/kernels/vecmath.c per function and ISA level, for
 * n = 4096 floats (in L1), against a loop over glibc's scalar float
 * functions, and optionally against SLEEF 3's u10 vector functions (never
 * a project dependency: built in only with -DVM_BENCH_SLEEF and a SLEEF
 * found by the compiler). Also prints each one's largest error in ulp
 * over every 1021st float bit pattern, as tests/c measures it.
 *
 * Build (from the repository root, against a built library):
 *   cc -std=c11 -O2 -pthread -Isrc/include -Isrc/kernels \
 *      benchmarks/vecmath_bench.c build/c/libtpu.a -lm -o /tmp/vecmath_bench
 * with SLEEF (e.g. the Debian packages unpacked into $S):
 *   add -DVM_BENCH_SLEEF -I$S/usr/include/x86_64-linux-gnu \
 *       -L$S/usr/lib/x86_64-linux-gnu -Wl,-rpath,$S/usr/lib/x86_64-linux-gnu -lsleef */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tpu/op.h"
#include "vecmath.h"

#ifdef VM_BENCH_SLEEF
/* SLEEF's vector prototypes need AVX types: declared under a target
 * pragma, called only from functions with that target. */
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#pragma GCC diagnostic ignored "-Wignored-qualifiers"
#include <sleef.h>
#pragma GCC pop_options
#endif

enum { N = 4096 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef void (*array_fn)(float *out, const float *in, int n);

/* Best of 5 runs of ~40 ms each, in Gelem/s. */
static double bench(array_fn f, float *out, const float *in) {
    double best = 0;
    for (int run = 0; run < 5; run++) {
        long reps = 0;
        double t0 = now_s(), t;
        do {
            for (int k = 0; k < 64; k++)
                f(out, in, N);
            reps += 64;
            t = now_s() - t0;
        } while (t < 0.04);
        double g = (double)reps * N / t * 1e-9;
        if (g > best)
            best = g;
    }
    return best;
}

static tpu_vm_fn g_fn;
static void run_vm(float *out, const float *in, int n) { tpu_vm_f32(g_fn, out, in, n); }

static float sigmoidf_glibc(float x) { return 1.0f / (1.0f + expf(-x)); }
static float (*const k_glibc[TPU_VM_COUNT])(float) = {
    expf, expm1f, logf, log1pf, log2f, tanhf, sigmoidf_glibc, erff, sinf, cosf};
static void run_glibc(float *out, const float *in, int n) {
    float (*f)(float) = k_glibc[g_fn];
    for (int i = 0; i < n; i++)
        out[i] = f(in[i]);
}

#ifdef VM_BENCH_SLEEF
typedef __m256 (*sleef8)(__m256);
typedef __m512 (*sleef16)(__m512);
/* exp, log, tanh, erf, sin, cos only (NULL: not compared). */
static const sleef8 k_sleef8[TPU_VM_COUNT] = {
    [TPU_VM_EXP] = Sleef_expf8_u10avx2,   [TPU_VM_LOG] = Sleef_logf8_u10avx2,
    [TPU_VM_TANH] = Sleef_tanhf8_u10avx2, [TPU_VM_ERF] = Sleef_erff8_u10avx2,
    [TPU_VM_SIN] = Sleef_sinf8_u10avx2,   [TPU_VM_COS] = Sleef_cosf8_u10avx2};
static const sleef16 k_sleef16[TPU_VM_COUNT] = {
    [TPU_VM_EXP] = Sleef_expf16_u10avx512f,   [TPU_VM_LOG] = Sleef_logf16_u10avx512f,
    [TPU_VM_TANH] = Sleef_tanhf16_u10avx512f, [TPU_VM_ERF] = Sleef_erff16_u10avx512f,
    [TPU_VM_SIN] = Sleef_sinf16_u10avx512f,   [TPU_VM_COS] = Sleef_cosf16_u10avx512f};
__attribute__((target("avx2,fma"))) static void run_sleef8(float *out, const float *in, int n) {
    sleef8 f = k_sleef8[g_fn];
    for (int i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
}
__attribute__((target("avx512f,avx2,fma"))) static void run_sleef16(float *out, const float *in,
                                                                   int n) {
    sleef16 f = k_sleef16[g_fn];
    for (int i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(in + i)));
}
#endif

/* The double-precision reference and the ulp error, as in the test. */
static double ref(tpu_vm_fn fn, double x) {
    switch (fn) {
    case TPU_VM_EXP: return exp(x);
    case TPU_VM_EXPM1: return expm1(x);
    case TPU_VM_LOG: return log(x);
    case TPU_VM_LOG1P: return log1p(x);
    case TPU_VM_LOG2: return log2(x);
    case TPU_VM_TANH: return tanh(x);
    case TPU_VM_SIGMOID: return x < 0 ? exp(x) / (1.0 + exp(x)) : 1.0 / (1.0 + exp(-x));
    case TPU_VM_ERF: return erf(x);
    case TPU_VM_SIN: return sin(x);
    default: return cos(x);
    }
}
static double ulp_error(float y, double r) {
    if (isnan(r))
        return isnan(y) ? 0.0 : INFINITY;
    float rf = (float)r;
    if (isinf(rf) || isinf(y) || isnan(y))
        return y == rf ? 0.0 : INFINITY;
    int e;
    frexpf(rf, &e);
    return fabs((double)y - r) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

/* Largest error of f over every 1021st bit pattern (|x| <= 1e5 for sin
 * and cos, where SLEEF's u10 bound is stated for all inputs too). */
static double max_err(array_fn f) {
    static float in[N], out[N];
    double worst = 0;
    uint64_t k = 0;
    while (k < (1ull << 32)) {
        int n = 0;
        for (; n < N && k < (1ull << 32); k += 1021) {
            uint32_t u = (uint32_t)k;
            memcpy(&in[n++], &u, 4);
        }
        f(out, in, n - n % 16);
        for (int i = 0; i < n - n % 16; i++) {
            double e = ulp_error(out[i], ref(g_fn, in[i]));
            if (e > worst)
                worst = e;
        }
    }
    return worst;
}

/* Inputs of a typical range for each function. */
static void fill(tpu_vm_fn fn, float *in) {
    static const float lo[TPU_VM_COUNT] = {-80, -20, 1e-3f, -0.9f, 1e-3f, -10, -20, -4, -100, -100};
    static const float hi[TPU_VM_COUNT] = {80, 20, 1e3f, 100, 1e3f, 10, 20, 4, 100, 100};
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        in[i] = lo[fn] + (hi[fn] - lo[fn]) * (float)(s >> 8) * 0x1p-24f;
    }
}

int main(void) {
    static float in[N], out[N];
    FILE *cpu = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (cpu && fgets(line, sizeof line, cpu))
        if (strncmp(line, "model name", 10) == 0) {
            printf("CPU: %s", strchr(line, ':') + 2);
            break;
        }
    if (cpu)
        fclose(cpu);
    tpu_isa best = tpu_kernels_best_isa();
    printf("n = %d, Gelem/s (best of 5); max ulp over every 1021st float\n", N);
    printf("%-8s %9s %9s %9s %9s", "fn", "portable", "avx2", "avx512", "glibc");
#ifdef VM_BENCH_SLEEF
    printf(" %10s %11s", "sleef-avx2", "sleef-avx512");
#endif
    printf(" | %8s %8s", "ulp(vm)", "ulp(glibc)");
#ifdef VM_BENCH_SLEEF
    printf(" %10s", "ulp(sleef)");
#endif
    printf("\n");
    for (int fn = 0; fn < TPU_VM_COUNT; fn++) {
        g_fn = (tpu_vm_fn)fn;
        fill(g_fn, in);
        printf("%-8s", tpu_vm_name(g_fn));
        for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
            if (isa > (int)best) {
                printf(" %9s", "-");
                continue;
            }
            tpu_kernels_set_isa((tpu_isa)isa);
            printf(" %9.3f", bench(run_vm, out, in));
        }
        tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
        printf(" %9.3f", bench(run_glibc, out, in));
#ifdef VM_BENCH_SLEEF
        if (k_sleef8[fn] && best >= TPU_ISA_AVX2)
            printf(" %10.3f", bench(run_sleef8, out, in));
        else
            printf(" %10s", "-");
        if (k_sleef16[fn] && best >= TPU_ISA_AVX512)
            printf(" %11.3f", bench(run_sleef16, out, in));
        else
            printf(" %11s", "-");
#endif
        printf(" | %8.3f %8.3f", max_err(run_vm), max_err(run_glibc));
#ifdef VM_BENCH_SLEEF
        if (k_sleef8[fn] && best >= TPU_ISA_AVX2)
            printf(" %10.3f", max_err(run_sleef8));
#endif
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
