/* Vector math (src/kernels/vecmath.c): for every function, the error in
 * ulp against libm in double precision over a strided sweep of all 2^32
 * float bit patterns (every pattern with TPU_VM_EXHAUSTIVE=1; another
 * stride with TPU_VM_SWEEP_STRIDE=N), bit identity of every ISA level the
 * CPU has with the portable scalar form on that sweep, libm's special
 * values, and in-place, misaligned and short (tail) arrays. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tpu/op.h"
#include "vecmath.h"

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The function in double precision (libm), the reference. */
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
    case TPU_VM_COS: return cos(x);
    default: return NAN;
    }
}

/* Error of y in ulp of the reference r rounded to float (the spacing of
 * floats in that binade; 2^-149 among the subnormals). Non-finite
 * references must match exactly (0 or a huge error). */
static double ulp_error(float y, double r) {
    if (isnan(r))
        return isnan(y) ? 0.0 : 1e30;
    float rf = (float)r;
    if (isinf(rf) || isinf(y))
        return y == rf ? 0.0 : 1e30;
    if (isnan(y))
        return 1e30;
    int e;
    frexpf(rf, &e);
    double ulp = ldexp(1.0, (e - 24 < -149) ? -149 : e - 24);
    return fabs((double)y - r) / ulp;
}

/* ------------------------------------------------ strided sweep */

enum { CHUNK = 4096 };

typedef struct {
    tpu_vm_fn fn;
    uint64_t first, stride, count; /* patterns first + k * stride, k < count */
    int check_ulp;                 /* measure errors (else only bit identity) */
    double max_err;
    uint32_t worst;
    int64_t mismatches;             /* array form != scalar form */
    uint32_t first_mismatch;
} sweep_job;

static void *sweep_run(void *arg) {
    sweep_job *j = arg;
    float *in = malloc(CHUNK * sizeof(float)), *out = malloc(CHUNK * sizeof(float));
    if (!in || !out) {
        free(in);
        free(out);
        j->mismatches = -1;
        return NULL;
    }
    for (uint64_t k0 = 0; k0 < j->count; k0 += CHUNK) {
        int n = j->count - k0 < CHUNK ? (int)(j->count - k0) : CHUNK;
        for (int i = 0; i < n; i++)
            in[i] = bits_f((uint32_t)(j->first + (k0 + (uint64_t)i) * j->stride));
        tpu_vm_f32(j->fn, out, in, n);
        for (int i = 0; i < n; i++) {
            if (j->stride > 1 || (i & 15) == 0) {
                float s = tpu_vm_scalar_f32(j->fn, in[i]);
                if (f_bits(s) != f_bits(out[i]) && j->mismatches++ == 0)
                    j->first_mismatch = f_bits(in[i]);
            }
            if (j->check_ulp) {
                double e = ulp_error(out[i], ref(j->fn, in[i]));
                if (e > j->max_err) {
                    j->max_err = e;
                    j->worst = f_bits(in[i]);
                }
            }
        }
    }
    free(in);
    free(out);
    return NULL;
}

/* Sweeps fn over patterns k * stride (k * stride < 2^32) on nth threads. */
static void sweep(tpu_vm_fn fn, uint64_t stride, int nth, int check_ulp, const char *level) {
    enum { MAX_THREADS = 64 };
    sweep_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    uint64_t total = ((1ull << 32) + stride - 1) / stride;
    uint64_t per = (total + (uint64_t)nth - 1) / (uint64_t)nth;
    for (int t = 0; t < nth; t++) {
        uint64_t k0 = per * (uint64_t)t;
        uint64_t cnt = k0 >= total ? 0 : (total - k0 < per ? total - k0 : per);
        jobs[t] = (sweep_job){fn, k0 * stride, stride, cnt, check_ulp, 0.0, 0, 0, 0};
        if (pthread_create(&tids[t], NULL, sweep_run, &jobs[t]) != 0)
            sweep_run(&jobs[t]), tids[t] = 0;
    }
    double max_err = 0;
    uint32_t worst = 0;
    int64_t mism = 0;
    uint32_t first_mism = 0;
    for (int t = 0; t < nth; t++) {
        if (tids[t])
            pthread_join(tids[t], NULL);
        if (jobs[t].max_err > max_err)
            max_err = jobs[t].max_err, worst = jobs[t].worst;
        if (jobs[t].mismatches && !mism)
            first_mism = jobs[t].first_mismatch;
        mism += jobs[t].mismatches;
    }
    CHECK(mism == 0);
    if (mism)
        fprintf(stderr, "    %s/%s: %lld array/scalar mismatches, first at x = %a\n",
                tpu_vm_name(fn), level, (long long)mism, (double)bits_f(first_mism));
    if (check_ulp) {
        printf("  %-8s %-9s max %.3f ulp at x = %a (stride %llu)\n", tpu_vm_name(fn), level,
               max_err, (double)bits_f(worst), (unsigned long long)stride);
        CHECK(max_err <= tpu_vm_max_ulp(fn));
        if (max_err > tpu_vm_max_ulp(fn))
            fprintf(stderr, "    %s: %.3f ulp at x = %a, y = %a, want %a\n", tpu_vm_name(fn),
                    max_err, (double)bits_f(worst),
                    (double)tpu_vm_scalar_f32(fn, bits_f(worst)), ref(fn, bits_f(worst)));
    }
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

/* Every level the CPU has, best first (the errors are measured there), then
 * the others for bit identity with the scalar form. */
static void test_sweep(void) {
    int exhaustive = env_u64("TPU_VM_EXHAUSTIVE", 0) != 0;
    uint64_t stride = exhaustive ? 1 : env_u64("TPU_VM_SWEEP_STRIDE", 1021);
    if (stride == 0)
        stride = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nth = (int)env_u64("TPU_VM_THREADS", ncpu < 1 ? 1 : ncpu > 64 ? 64 : (uint64_t)ncpu);
    if (nth < 1 || nth > 64)
        nth = 1;
    tpu_isa best = tpu_kernels_best_isa();
    for (int isa = best; isa >= 0; isa--) {
        CHECK_OK(tpu_kernels_set_isa((tpu_isa)isa));
        for (int fn = 0; fn < TPU_VM_COUNT; fn++)
            sweep((tpu_vm_fn)fn, isa == (int)best ? stride : exhaustive ? 97 : stride * 4 + 2, nth,
                  isa == (int)best, tpu_isa_name((tpu_isa)isa));
    }
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_COUNT - 1));
}

/* ------------------------------------------------ special values */

typedef struct {
    tpu_vm_fn fn;
    float x, want; /* want compared bit for bit, except NaN (any NaN) */
} special_row;

static const special_row k_specials[] = {
    {TPU_VM_EXP, 0.0f, 1.0f},          {TPU_VM_EXP, -0.0f, 1.0f},
    {TPU_VM_EXP, INFINITY, INFINITY},  {TPU_VM_EXP, -INFINITY, 0.0f},
    {TPU_VM_EXP, 89.0f, INFINITY},     {TPU_VM_EXP, 88.8f, INFINITY},
    {TPU_VM_EXP, -104.0f, 0.0f},       {TPU_VM_EXP, -1000.0f, 0.0f},
    {TPU_VM_EXP, NAN, NAN},            {TPU_VM_EXP, -103.28f, 0x1p-149f},
    {TPU_VM_EXPM1, 0.0f, 0.0f},        {TPU_VM_EXPM1, -0.0f, -0.0f},
    {TPU_VM_EXPM1, INFINITY, INFINITY}, {TPU_VM_EXPM1, -INFINITY, -1.0f},
    {TPU_VM_EXPM1, 89.0f, INFINITY},   {TPU_VM_EXPM1, -20.0f, -1.0f},
    {TPU_VM_EXPM1, 0x1p-130f, 0x1p-130f}, {TPU_VM_EXPM1, NAN, NAN},
    {TPU_VM_LOG, 0.0f, -INFINITY},     {TPU_VM_LOG, -0.0f, -INFINITY},
    {TPU_VM_LOG, -1.0f, NAN},          {TPU_VM_LOG, -INFINITY, NAN},
    {TPU_VM_LOG, INFINITY, INFINITY},  {TPU_VM_LOG, 1.0f, 0.0f},
    {TPU_VM_LOG, NAN, NAN},            {TPU_VM_LOG, -0x1p-149f, NAN},
    {TPU_VM_LOG1P, 0.0f, 0.0f},        {TPU_VM_LOG1P, -0.0f, -0.0f},
    {TPU_VM_LOG1P, -1.0f, -INFINITY},  {TPU_VM_LOG1P, -2.0f, NAN},
    {TPU_VM_LOG1P, INFINITY, INFINITY}, {TPU_VM_LOG1P, -INFINITY, NAN},
    {TPU_VM_LOG1P, 0x1p-140f, 0x1p-140f}, {TPU_VM_LOG1P, NAN, NAN},
    {TPU_VM_LOG2, 0.0f, -INFINITY},    {TPU_VM_LOG2, 1.0f, 0.0f},
    {TPU_VM_LOG2, 8.0f, 3.0f},         {TPU_VM_LOG2, 0x1p-149f, -149.0f},
    {TPU_VM_LOG2, 0x1p127f, 127.0f},   {TPU_VM_LOG2, -1.0f, NAN},
    {TPU_VM_LOG2, INFINITY, INFINITY}, {TPU_VM_LOG2, NAN, NAN},
    {TPU_VM_TANH, 0.0f, 0.0f},         {TPU_VM_TANH, -0.0f, -0.0f},
    {TPU_VM_TANH, INFINITY, 1.0f},     {TPU_VM_TANH, -INFINITY, -1.0f},
    {TPU_VM_TANH, 20.0f, 1.0f},        {TPU_VM_TANH, -1e30f, -1.0f},
    {TPU_VM_TANH, 0x1p-140f, 0x1p-140f}, {TPU_VM_TANH, NAN, NAN},
    {TPU_VM_SIGMOID, 0.0f, 0.5f},      {TPU_VM_SIGMOID, -0.0f, 0.5f},
    {TPU_VM_SIGMOID, INFINITY, 1.0f},  {TPU_VM_SIGMOID, -INFINITY, 0.0f},
    {TPU_VM_SIGMOID, 100.0f, 1.0f},    {TPU_VM_SIGMOID, -200.0f, 0.0f},
    {TPU_VM_SIGMOID, NAN, NAN},
    {TPU_VM_ERF, 0.0f, 0.0f},          {TPU_VM_ERF, -0.0f, -0.0f},
    {TPU_VM_ERF, INFINITY, 1.0f},      {TPU_VM_ERF, -INFINITY, -1.0f},
    {TPU_VM_ERF, 5.0f, 1.0f},          {TPU_VM_ERF, NAN, NAN},
    {TPU_VM_SIN, 0.0f, 0.0f},          {TPU_VM_SIN, -0.0f, -0.0f},
    {TPU_VM_SIN, INFINITY, NAN},       {TPU_VM_SIN, -INFINITY, NAN},
    {TPU_VM_SIN, 0x1p-140f, 0x1p-140f}, {TPU_VM_SIN, NAN, NAN},
    {TPU_VM_COS, 0.0f, 1.0f},          {TPU_VM_COS, -0.0f, 1.0f},
    {TPU_VM_COS, INFINITY, NAN},       {TPU_VM_COS, NAN, NAN},
};

static int same_value(float got, float want) {
    return isnan(want) ? isnan(got) : f_bits(got) == f_bits(want);
}

static void test_specials(void) {
    for (size_t i = 0; i < sizeof k_specials / sizeof k_specials[0]; i++) {
        const special_row *r = &k_specials[i];
        float got = tpu_vm_scalar_f32(r->fn, r->x), arr[9];
        float in[9] = {r->x, r->x, r->x, r->x, r->x, r->x, r->x, r->x, r->x};
        tpu_vm_f32(r->fn, arr, in, 9);
        int ok = same_value(got, r->want) && same_value(arr[0], r->want) &&
                 same_value(arr[8], r->want);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "    %s(%a) = %a (array %a, tail %a), want %a\n", tpu_vm_name(r->fn),
                    (double)r->x, (double)got, (double)arr[0], (double)arr[8], (double)r->want);
    }
    /* exp(-100) is a subnormal within the stated bound; sigmoid(-100) is
     * exp(-100) too; erf is odd; sin of a large argument is still right. */
    CHECK(ulp_error(tpu_vm_scalar_f32(TPU_VM_EXP, -100.0f), exp(-100.0)) <=
          tpu_vm_max_ulp(TPU_VM_EXP));
    CHECK(ulp_error(tpu_vm_scalar_f32(TPU_VM_SIGMOID, -100.0f), exp(-100.0)) <=
          tpu_vm_max_ulp(TPU_VM_SIGMOID));
    CHECK(tpu_vm_scalar_f32(TPU_VM_ERF, -0.5f) == -tpu_vm_scalar_f32(TPU_VM_ERF, 0.5f));
    CHECK(ulp_error(tpu_vm_scalar_f32(TPU_VM_SIN, 1e30f), sin((double)1e30f)) <= 1.0);
    CHECK(ulp_error(tpu_vm_scalar_f32(TPU_VM_COS, 3e6f), cos(3e6)) <= 1.0);
    CHECK(isnan(tpu_vm_scalar_f32(TPU_VM_COUNT, 1.0f)));
    CHECK(strcmp(tpu_vm_name(TPU_VM_SIGMOID), "sigmoid") == 0);
    CHECK(strcmp(tpu_vm_name(TPU_VM_COUNT), "invalid") == 0);
    CHECK(tpu_vm_max_ulp(TPU_VM_COUNT) < 0);
}

/* ------------------------------------------------ layouts and tails */

/* n = 0..17 at offsets 0..3 (misaligned), in place and out of place, at
 * every level, against the scalar form; inputs mix the reduction's
 * ranges, the sin/cos fallback and the specials. */
static void test_layouts(void) {
    enum { N = 40 };
    static const float pool[] = {0.3f,   -2.5f, 1e-3f,    7.0f,   -0.7f,    1e5f,  3e6f,
                                 -1e-8f, 50.0f, -60.0f,   0.0f,   -0.0f,    NAN,   INFINITY,
                                 2.0f,   -1e9f, 0.9999f,  1.5f,   -0.99f,   12.0f, 0x1p-130f};
    enum { NPOOL = sizeof pool / sizeof pool[0] };
    float src[N + 4], want[N], buf[N + 4], out[N + 4];
    tpu_isa best = tpu_kernels_best_isa();
    for (int isa = 0; isa <= (int)best; isa++) {
        CHECK_OK(tpu_kernels_set_isa((tpu_isa)isa));
        for (int fn = 0; fn < TPU_VM_COUNT; fn++) {
            int bad = 0;
            for (int n = 0; n <= 17; n++) {
                for (int off = 0; off < 4; off++) {
                    for (int i = 0; i < N + 4; i++)
                        src[i] = pool[(i * 7 + n + off) % NPOOL];
                    for (int i = 0; i < n; i++)
                        want[i] = tpu_vm_scalar_f32((tpu_vm_fn)fn, src[off + i]);
                    memcpy(buf, src, sizeof src);
                    for (int i = 0; i < N + 4; i++)
                        out[i] = -7.0f;
                    tpu_vm_f32((tpu_vm_fn)fn, out + off, src + off, n);
                    tpu_vm_f32((tpu_vm_fn)fn, buf + off, buf + off, n);
                    for (int i = 0; i < n; i++)
                        bad += f_bits(out[off + i]) != f_bits(want[i]) ||
                               f_bits(buf[off + i]) != f_bits(want[i]);
                    /* Nothing outside [off, off + n) written. */
                    for (int i = 0; i < N + 4; i++)
                        if (i < off || i >= off + n)
                            bad += out[i] != -7.0f || f_bits(buf[i]) != f_bits(src[i]);
                }
            }
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "    %s at %s: %d bad elements\n", tpu_vm_name((tpu_vm_fn)fn),
                        tpu_isa_name((tpu_isa)isa), bad);
        }
    }
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_COUNT - 1));
    /* n <= 0 and an invalid fn touch nothing. */
    out[0] = -7.0f;
    tpu_vm_f32(TPU_VM_EXP, out, src, 0);
    tpu_vm_f32(TPU_VM_EXP, out, src, -3);
    tpu_vm_f32(TPU_VM_COUNT, out, src, 1);
    tpu_vm_f32(TPU_VM_EXP, NULL, NULL, 0);
    CHECK(out[0] == -7.0f);
}

/* tpu_vm_exp_rows_f32 at every level against its definition on the
 * scalar form: n = 0..37 columns (whole vectors of 8 and 16 and tails),
 * 0..4 rows with gaps between them (ld > n), inputs from the specials
 * pool (NaN, infinities, subnormal results) minus per-column values that
 * include -inf, +inf and 0. Nothing outside the rows' n columns is
 * written; the sums are exact bit matches of the in-order sums. */
static void test_exp_rows(void) {
    enum { LD = 41, ROWS = 4 };
    static const float pool[] = {0.3f, -2.5f, 7.0f, -0.7f, 50.0f, -60.0f, 0.0f, -0.0f,
                                 NAN,  INFINITY, -INFINITY, 2.0f, -1e9f, 12.0f, -103.0f};
    static const float subs[] = {0.0f, 1.5f, -3.0f, INFINITY, -INFINITY, 60.0f, -0.0f};
    enum { NPOOL = sizeof pool / sizeof pool[0], NSUB = sizeof subs / sizeof subs[0] };
    float x[ROWS * LD], want[ROWS * LD], sub[LD], sum[LD + 1], wsum[LD];
    tpu_isa best = tpu_kernels_best_isa();
    for (int isa = 0; isa <= (int)best; isa++) {
        CHECK_OK(tpu_kernels_set_isa((tpu_isa)isa));
        int bad = 0;
        for (int n = 0; n <= 37; n++)
            for (int rows = 0; rows <= ROWS; rows++) {
                for (int i = 0; i < ROWS * LD; i++)
                    x[i] = want[i] = pool[(i * 5 + n + rows) % NPOOL];
                for (int i = 0; i < LD; i++) {
                    sub[i] = subs[(i + n) % NSUB];
                    wsum[i] = 0.0f;
                }
                for (int r = 0; r < rows; r++)
                    for (int i = 0; i < n; i++) {
                        want[r * LD + i] = tpu_vm_scalar_f32(TPU_VM_EXP, x[r * LD + i] - sub[i]);
                        wsum[i] = wsum[i] + want[r * LD + i];
                    }
                sum[n] = -7.0f;
                tpu_vm_exp_rows_f32(x, LD, rows, n, sub, sum);
                for (int i = 0; i < ROWS * LD; i++)
                    bad += !same_value(x[i], want[i]);
                for (int i = 0; i < n; i++)
                    bad += !same_value(sum[i], wsum[i]);
                bad += sum[n] != -7.0f;
                /* Without sums: the same exponentials. */
                for (int i = 0; i < ROWS * LD; i++)
                    x[i] = pool[(i * 5 + n + rows) % NPOOL];
                tpu_vm_exp_rows_f32(x, LD, rows, n, sub, NULL);
                for (int i = 0; i < ROWS * LD; i++)
                    bad += !same_value(x[i], want[i]);
            }
        CHECK(bad == 0);
        if (bad)
            fprintf(stderr, "    exp_rows at %s: %d bad values\n", tpu_isa_name((tpu_isa)isa), bad);
    }
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_COUNT - 1));
}

/* gelu in double: x (1 - erfc(x/sqrt 2)/2) for x >= 0, x erfc(-x/sqrt 2)/2
 * below (no cancellation on either side). */
static double gelu_ref(double x) {
    return x < 0 ? 0.5 * x * erfc(-x / sqrt(2.0)) : x * (1.0 - 0.5 * erfc(x / sqrt(2.0)));
}

/* The gelu's bound in ulp of the exact result by range of x (vecmath_body.h
 * states the measured maxima: 1.23, 2.9 and 22.7), and below -6, where
 * the table ends and the result is -0 against a true value above -6e-9,
 * an absolute one. */
static bool gelu_close(float x, float y) {
    double r = gelu_ref(x);
    if (x >= 0)
        return ulp_error(y, r) <= 1.25;
    if (x > -3)
        return ulp_error(y, r) <= 3.0;
    if (x > -6)
        return ulp_error(y, r) <= 24.0;
    return fabs((double)y - r) <= 6.1e-9 && y <= 0;
}

/* gelu_tanh and silu as the unary kernel computed them before their one
 * pass: the formula's f32 steps, with vecmath's scalar functions. */
static float act_by_steps(tpu_vm_act act, float x) {
    switch (act) {
    case TPU_VM_ACT_GELU_TANH: {
        const float beta = (float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
        const float kappa = 0.044715f;
        const float t = tpu_vm_scalar_f32(TPU_VM_TANH, beta * (x + kappa * x * x * x));
        return 0.5f * x * (1.0f + t);
    }
    case TPU_VM_ACT_SILU: return x * tpu_vm_scalar_f32(TPU_VM_SIGMOID, x);
    default: return NAN;
    }
}

/* The activations' one pass (tpu_vm_act_f32), on every 1021st float bit
 * pattern, in arrays of lengths that leave every tail, in place and not:
 * gelu_tanh and silu give, at every level, the bits of their steps; gelu
 * gives the portable level's bits at every level, and those are within
 * gelu_close of the exact value (specials: +inf, NaN and -inf as
 * PyTorch's formula gives them, the sign of zero kept). An invalid act
 * leaves out alone. */
static void test_acts(void) {
    enum { CHUNK_A = 1000 };
    static float in[CHUNK_A], out[CHUNK_A], want[CHUNK_A];
    tpu_isa best = tpu_kernels_best_isa();
    for (int isa = 0; isa <= (int)best; isa++) {
        for (int act = 0; act < TPU_VM_ACT_COUNT; act++) {
            int64_t bad = 0, far = 0;
            uint32_t first_bad = 0, first_far = 0;
            uint64_t pat = 0;
            for (int64_t round = 0; pat < (1ull << 32); round++) {
                int n = (int)(CHUNK_A - round % 17);
                for (int i = 0; i < n; i++, pat += 1021) {
                    in[i] = bits_f((uint32_t)pat);
                    want[i] = act_by_steps((tpu_vm_act)act, in[i]);
                }
                if (act == TPU_VM_ACT_GELU) {
                    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_PORTABLE));
                    tpu_vm_act_f32(TPU_VM_ACT_GELU, want, in, n);
                }
                CHECK_OK(tpu_kernels_set_isa((tpu_isa)isa));
                if (round % 2)
                    tpu_vm_act_f32((tpu_vm_act)act, out, in, n);
                else {
                    memcpy(out, in, sizeof(float) * (size_t)n);
                    tpu_vm_act_f32((tpu_vm_act)act, out, out, n); /* in place */
                }
                for (int i = 0; i < n; i++) {
                    if (!same_value(out[i], want[i]) && bad++ == 0)
                        first_bad = f_bits(in[i]);
                    if (act == TPU_VM_ACT_GELU && isa == 0 && isfinite(in[i]) &&
                        !gelu_close(in[i], out[i]) && far++ == 0)
                        first_far = f_bits(in[i]);
                }
            }
            CHECK(bad == 0 && far == 0);
            if (bad)
                fprintf(stderr, "    act %d at %s: %lld values differ, first at x = %a\n", act,
                        tpu_isa_name((tpu_isa)isa), (long long)bad, (double)bits_f(first_bad));
            if (far)
                fprintf(stderr, "    gelu: %lld values out of bounds, first at x = %a\n",
                        (long long)far, (double)bits_f(first_far));
        }
        const float specials[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, -1e-45f, 6.0f, -6.0f, -100.0f};
        enum { NS = sizeof specials / sizeof specials[0] };
        float y[NS];
        tpu_vm_act_f32(TPU_VM_ACT_GELU, y, specials, NS);
        CHECK(y[0] == INFINITY && isnan(y[1]) && isnan(y[2]));
        CHECK(f_bits(y[3]) == f_bits(0.0f) && f_bits(y[4]) == f_bits(-0.0f));
        CHECK(f_bits(y[5]) == f_bits(-0.0f)); /* -2^-149 * Phi(-0) rounds to -0 */
        CHECK(y[6] == 6.0f && f_bits(y[7]) == f_bits(-0.0f) && f_bits(y[8]) == f_bits(-0.0f));
    }
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_COUNT - 1));
    out[0] = 5.0f;
    tpu_vm_act_f32(TPU_VM_ACT_COUNT, out, in, 1);
    CHECK(out[0] == 5.0f);
}

#define PI_D 3.14159265358979323846

/* An activation's derivative in double at x (the unary backward's
 * reference formulas), and *scale, the size of what its f32 form rounds:
 * the terms of the sum and the terms' sensitivity to a function value
 * that f32 rounds (the density's exponent for gelu, t for gelu_tanh, s
 * for silu). */
static double grad_ref(tpu_vm_act act, double x, double *scale) {
    switch (act) {
    case TPU_VM_ACT_GELU: {
        double cdf = 0.5 * erfc(-x / sqrt(2.0)), xpdf = x * exp(-0.5 * x * x) / sqrt(2.0 * PI_D);
        *scale = fabs(cdf) + fabs(xpdf) * (2.0 + 0.5 * x * x);
        return cdf + xpdf;
    }
    case TPU_VM_ACT_GELU_TANH: {
        const double beta = sqrt(2.0 / PI_D), kappa = 0.044715;
        double t = tanh(beta * (x + kappa * x * x * x)), slope = beta * (1.0 + 3.0 * kappa * x * x);
        double left = 0.5 * (1.0 + t), right = 0.5 * x * (1.0 - t * t) * slope;
        *scale = fabs(left) + fabs(right) + fabs(x * t * slope) * (1.0 + fabs(x * slope));
        return left + right;
    }
    case TPU_VM_ACT_SILU: {
        double sg = x < 0 ? exp(x) / (1.0 + exp(x)) : 1.0 / (1.0 + exp(-x));
        *scale = fabs(sg) * (1.0 + fabs(x * (1.0 - sg))) + fabs(sg * (1.0 + x - 2.0 * x * sg));
        return sg * (1.0 + x * (1.0 - sg));
    }
    default: *scale = 0.0; return NAN;
    }
}

/* tpu_vm_act_grad_f32 on every 1021st float x, with grad 1 and with
 * grad -0.375 (exact products), in place on either operand and not: the
 * same bits at every level, and within 4 ulp of the double reference
 * plus 4 * 2^-24 of its scale (where the derivative crosses zero, only
 * the latter counts), plus a subnormal intermediate's rounding and, for
 * gelu below -6, the Phi it leaves out; NaN where the reference is NaN
 * (the infinities), a NaN x too. An invalid act leaves out alone. */
static void test_grads(void) {
    enum { CHUNK_G = 1000 };
    static float x[CHUNK_G], g[CHUNK_G], out[CHUNK_G], want[CHUNK_G];
    tpu_isa best = tpu_kernels_best_isa();
    for (int act = 0; act < TPU_VM_ACT_COUNT; act++) {
        int64_t bad = 0, far = 0;
        uint32_t first_bad = 0, first_far = 0;
        double worst = 0.0;
        uint64_t pat = 0;
        for (int64_t round = 0; pat < (1ull << 32); round++) {
            int n = (int)(CHUNK_G - round % 17);
            const float gv = round % 3 ? 1.0f : -0.375f;
            for (int i = 0; i < n; i++, pat += 1021) {
                x[i] = bits_f((uint32_t)pat);
                g[i] = gv;
            }
            CHECK_OK(tpu_kernels_set_isa(TPU_ISA_PORTABLE));
            tpu_vm_act_grad_f32((tpu_vm_act)act, want, g, x, n);
            for (int i = 0; i < n; i++) {
                double scale, r = gv * grad_ref((tpu_vm_act)act, x[i], &scale);
                double err = fabs((double)want[i] - r), ulp = ldexp(1.0, -149);
                if (r != 0.0 && isfinite(r)) {
                    int e;
                    frexp(r, &e);
                    ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
                }
                /* A subnormal intermediate (the density, s) rounds to 2^-150
                 * absolute, which x may scale; below -6 gelu leaves out Phi. */
                double slack = 4.0 * (1.0 + fabs(x[i])) * ldexp(fabs(gv), -149);
                if (act == TPU_VM_ACT_GELU && x[i] <= -6.0f)
                    slack += fabs(gv) * 0.5 * erfc(-x[i] / sqrt(2.0));
                double bound = 4.0 * ulp + 4.0 * ldexp(fabs(gv) * scale, -24) + slack;
                bool ok = isnan(r) ? isnan(want[i]) : err <= bound;
                if (!isnan(r) && err / bound > worst && !(act == TPU_VM_ACT_GELU && x[i] <= -6.0f))
                    worst = err / bound;
                if (!ok && far++ == 0)
                    first_far = f_bits(x[i]);
            }
            for (int isa = 1; isa <= (int)best; isa++) {
                CHECK_OK(tpu_kernels_set_isa((tpu_isa)isa));
                int mode = (int)((round + isa) % 3);
                if (mode == 0)
                    tpu_vm_act_grad_f32((tpu_vm_act)act, out, g, x, n);
                else {
                    static float g2[CHUNK_G], x2[CHUNK_G];
                    memcpy(g2, g, sizeof(float) * (size_t)n);
                    memcpy(x2, x, sizeof(float) * (size_t)n);
                    float *o = mode == 1 ? g2 : x2; /* in place on grad, or on x */
                    tpu_vm_act_grad_f32((tpu_vm_act)act, o, g2, x2, n);
                    memcpy(out, o, sizeof(float) * (size_t)n);
                }
                for (int i = 0; i < n; i++)
                    if (!same_value(out[i], want[i]) && bad++ == 0)
                        first_bad = f_bits(x[i]);
            }
        }
        printf("  grad %d: largest error %.2f of the bound (gelu: x > -6)\n", act, worst);
        CHECK(bad == 0 && far == 0);
        if (bad)
            fprintf(stderr, "    grad %d: %lld values differ between levels, first at x = %a\n",
                    act, (long long)bad, (double)bits_f(first_bad));
        if (far)
            fprintf(stderr, "    grad %d: %lld values out of bounds, first at x = %a\n", act,
                    (long long)far, (double)bits_f(first_far));
    }
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_COUNT - 1));
    out[0] = 5.0f;
    tpu_vm_act_grad_f32(TPU_VM_ACT_COUNT, out, g, x, 1);
    CHECK(out[0] == 5.0f);
}

int main(void) {
    printf("vecmath on %s (best level)\n", tpu_isa_name(tpu_kernels_best_isa()));
    test_acts();
    test_grads();
    test_specials();
    test_layouts();
    test_exp_rows();
    test_sweep();
    return check_report();
}
