/* UNARY: out = fn(x) for the functions of tpu_unary_fn.
 *
 * x goes through the record's common dtype to its compute type and the
 * result is rounded back to it (ew.h). Semantics follow PyTorch's CPU
 * kernels: the arithmetic functions (neg, abs, relu, hardswish, clamp,
 * ...) compute in the compute type in PyTorch's order of operations; the
 * transcendental ones compute in f64 from the f32 value and round once,
 * so the reference is within half an ulp of the exact result (PyTorch's
 * own vectorised forms are within about one). erfinv, which C's libm
 * lacks, is Giles' approximation refined by two Newton steps on erf.
 * The fast path computes exp, log, tanh, erf, sin/cos and the activations
 * built on them with vecmath.h, within its stated ulps of the reference.
 *
 * Work split: contiguous ranges of out's row-major element index; every
 * element is independent, so any split gives the same bytes. */
#include <math.h>
#include <string.h>

#include "ew.h"
#include "kernels_internal.h"
#include "vecmath.h"

/* ------------------------------------------------------ scalar bodies */

/* erf^-1(y) in f64: +-inf at +-1, NaN outside [-1, 1]. */
static double erfinv_f64(double y) {
    if (!(y >= -1.0 && y <= 1.0))
        return NAN;
    if (y == 1.0 || y == -1.0)
        return copysign(INFINITY, y);
    if (y == 0.0)
        return y; /* keeps the sign of zero */
    /* Giles, "Approximating the erfinv function" (2010): a first guess
     * good to about 1e-7 relative... */
    double w = -log((1.0 - y) * (1.0 + y)), x;
    if (w < 5.0) {
        w -= 2.5;
        double p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
        x = p * y;
    } else {
        w = sqrt(w) - 3.0;
        double p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
        x = p * y;
    }
    /* ...then Newton on erf(x) - y, which doubles the correct digits each
     * step: two give f64 accuracy. */
    for (int i = 0; i < 2; i++) {
        double err = erf(x) - y;
        x -= err / (TPU_K_2_SQRTPI * exp(-x * x));
    }
    return x;
}

/* The f64 compute, also the reference of f32 transcendental functions
 * (evaluated on the exact f32 value, then rounded once by the caller). */
static double un_f64(tpu_unary_fn fn, double x, const tpu_scalar *args) {
    switch (fn) {
    case TPU_UNARY_NEG: return -x;
    case TPU_UNARY_ABS: return fabs(x);
    case TPU_UNARY_SIGN: return (double)((0.0 < x) - (x < 0.0));
    case TPU_UNARY_RECIPROCAL: return 1.0 / x;
    case TPU_UNARY_SQRT: return sqrt(x);
    case TPU_UNARY_RSQRT: return 1.0 / sqrt(x);
    case TPU_UNARY_EXP: return exp(x);
    case TPU_UNARY_EXP2: return exp2(x);
    case TPU_UNARY_EXPM1: return expm1(x);
    case TPU_UNARY_LOG: return log(x);
    case TPU_UNARY_LOG2: return log2(x);
    case TPU_UNARY_LOG10: return log10(x);
    case TPU_UNARY_LOG1P: return log1p(x);
    case TPU_UNARY_SIN: return sin(x);
    case TPU_UNARY_COS: return cos(x);
    case TPU_UNARY_TAN: return tan(x);
    case TPU_UNARY_ASIN: return asin(x);
    case TPU_UNARY_ACOS: return acos(x);
    case TPU_UNARY_ATAN: return atan(x);
    case TPU_UNARY_SINH: return sinh(x);
    case TPU_UNARY_COSH: return cosh(x);
    case TPU_UNARY_TANH: return tanh(x);
    case TPU_UNARY_ASINH: return asinh(x);
    case TPU_UNARY_ACOSH: return acosh(x);
    case TPU_UNARY_ATANH: return atanh(x);
    case TPU_UNARY_ERF: return erf(x);
    case TPU_UNARY_ERFC: return erfc(x);
    case TPU_UNARY_ERFINV: return erfinv_f64(x);
    case TPU_UNARY_FLOOR: return floor(x);
    case TPU_UNARY_CEIL: return ceil(x);
    case TPU_UNARY_ROUND: return nearbyint(x);
    case TPU_UNARY_TRUNC: return trunc(x);
    case TPU_UNARY_FRAC: return x - trunc(x);
    case TPU_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case TPU_UNARY_RELU: return x != x ? x : x > 0.0 ? x : 0.0;
    case TPU_UNARY_GELU: return x * 0.5 * (1.0 + erf(x * TPU_K_SQRT1_2));
    case TPU_UNARY_GELU_TANH: {
        const double k_beta = TPU_K_SQRT2 * TPU_K_2_SQRTPI * 0.5, k_kappa = 0.044715;
        return 0.5 * x * (1.0 + tanh(k_beta * (x + k_kappa * x * x * x)));
    }
    case TPU_UNARY_SILU: return x / (1.0 + exp(-x));
    case TPU_UNARY_MISH: return x * tanh(log1p(exp(x)));
    case TPU_UNARY_SOFTPLUS: {
        double beta = args[0].f;
        return x * beta > args[1].f ? x : log1p(exp(x * beta)) / beta;
    }
    case TPU_UNARY_LEAKY_RELU: return x > 0.0 ? x : x * args[0].f;
    case TPU_UNARY_ELU:
        return x <= 0.0 ? expm1(x * args[2].f) * (args[0].f * args[1].f) : x * args[1].f;
    case TPU_UNARY_HARDSWISH: return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    case TPU_UNARY_HARDSIGMOID: return x != x ? x : fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    case TPU_UNARY_CLAMP: {
        int64_t which = args[2].i;
        if (x != x)
            return x;
        if ((which & 1) && !(x >= args[0].f)) {
            x = args[0].f;
            if (x != x)
                return x; /* a NaN bound gives NaN */
        }
        if ((which & 2) && !(x <= args[1].f))
            x = args[1].f;
        return x;
    }
    case TPU_UNARY_NAN_TO_NUM:
        return x != x ? args[0].f : x == INFINITY ? args[1].f : x == -INFINITY ? args[2].f : x;
    case TPU_UNARY_SINC: {
        if (x == 0.0)
            return 1.0;
        double px = TPU_K_PI * x;
        return sin(px) / px;
    }
    case TPU_UNARY_LOGIT: {
        double eps = args[0].f;
        if (eps >= 0.0)
            x = x < eps ? eps : x > 1.0 - eps ? 1.0 - eps : x; /* NaN stays NaN */
        return log(x / (1.0 - x));
    }
    case TPU_UNARY_HARDSHRINK: return x >= -args[0].f && x <= args[0].f ? 0.0 : x;
    case TPU_UNARY_SOFTSHRINK:
        return x > args[0].f ? x - args[0].f : x < -args[0].f ? x + args[0].f : x * 0.0;
    case TPU_UNARY_ENTR: return x != x ? x : x > 0.0 ? -x * log(x) : x == 0.0 ? 0.0 : -INFINITY;
    case TPU_UNARY_LGAMMA: return tpu_k_lgamma(x);
    case TPU_UNARY_DIGAMMA: return tpu_k_digamma(x);
    case TPU_UNARY_POLYGAMMA: return tpu_k_polygamma(args[0].i, x);
    case TPU_UNARY_I0: return tpu_k_bessel_i(0, x, false);
    case TPU_UNARY_I0E: return tpu_k_bessel_i(0, x, true);
    case TPU_UNARY_I1: return tpu_k_bessel_i(1, x, false);
    case TPU_UNARY_I1E: return tpu_k_bessel_i(1, x, true);
    default: return NAN; /* -> bool functions and BITWISE_NOT: see un_to_bool, un_i64 */
    }
}

/* The f32 compute: arithmetic functions in f32 in PyTorch's order,
 * transcendental ones through un_f64, rounded once. clamp and nan_to_num
 * go through un_f64 too: their result is x or a parameter, which the glue
 * gives already in the common dtype, so the bytes are the same. */
/* fminf(fmaxf(t, 0), 6) as compares the compiler vectorises (fminf and
 * fmaxf are library calls in the baseline build): the same value for
 * every t, NaN included (fmaxf(NaN, 0) is 0, and t > 0 is false), and t
 * = v + 3 is never -0. */
static inline float clip_0_6(float t) {
    t = t > 0.0f ? t : 0.0f;
    return t < 6.0f ? t : 6.0f;
}

static float un_f32(tpu_unary_fn fn, float x, const tpu_scalar *args) {
    switch (fn) {
    case TPU_UNARY_NEG: return -x;
    case TPU_UNARY_ABS: return fabsf(x);
    case TPU_UNARY_RECIPROCAL: return 1.0f / x;
    case TPU_UNARY_SQRT: return sqrtf(x);
    case TPU_UNARY_FLOOR: return floorf(x);
    case TPU_UNARY_CEIL: return ceilf(x);
    case TPU_UNARY_ROUND: return nearbyintf(x);
    case TPU_UNARY_TRUNC: return truncf(x);
    case TPU_UNARY_FRAC: return x - truncf(x);
    case TPU_UNARY_RELU: return x != x ? x : x > 0.0f ? x : 0.0f;
    case TPU_UNARY_LEAKY_RELU: return x > 0.0f ? x : x * (float)args[0].f;
    case TPU_UNARY_HARDSWISH: return x * clip_0_6(x + 3.0f) / 6.0f;
    case TPU_UNARY_HARDSIGMOID: return x != x ? x : clip_0_6(x + 3.0f) / 6.0f;
    case TPU_UNARY_HARDSHRINK: {
        const float l = (float)args[0].f;
        return x >= -l && x <= l ? 0.0f : x;
    }
    case TPU_UNARY_SOFTSHRINK: {
        const float l = (float)args[0].f;
        return x > l ? x - l : x < -l ? x + l : x * 0.0f;
    }
    default: return (float)un_f64(fn, x, args);
    }
}

/* The -> bool functions, on a value of any compute type (as double:
 * exact for every float, and integers only meet comparisons with 0). */
static bool un_to_bool(tpu_unary_fn fn, double x) {
    switch (fn) {
    case TPU_UNARY_ISNAN: return x != x;
    case TPU_UNARY_ISINF: return x == INFINITY || x == -INFINITY;
    case TPU_UNARY_ISPOSINF: return x == INFINITY;
    case TPU_UNARY_ISNEGINF: return x == -INFINITY;
    case TPU_UNARY_SIGNBIT: return signbit(x);
    default: return x == 0.0; /* LOGICAL_NOT */
    }
}

/* Integer compute, wrapping (uint64). */
static int64_t un_i64(tpu_unary_fn fn, int64_t x, const tpu_scalar *args) {
    uint64_t u = (uint64_t)x;
    switch (fn) {
    case TPU_UNARY_NEG: return tpu_k_u64_to_i64(0u - u);
    case TPU_UNARY_ABS: return x < 0 ? tpu_k_u64_to_i64(0u - u) : x;
    case TPU_UNARY_SIGN: return (0 < x) - (x < 0);
    case TPU_UNARY_RELU: return x > 0 ? x : 0;
    case TPU_UNARY_BITWISE_NOT: return ~x;
    case TPU_UNARY_CLAMP: {
        int64_t which = args[2].i;
        if ((which & 1) && x < args[0].i)
            x = args[0].i;
        if ((which & 2) && x > args[1].i)
            x = args[1].i;
        return x;
    }
    default: return x; /* FLOOR, CEIL, ROUND, TRUNC: integers are whole */
    }
}

static bool un_bool(tpu_unary_fn fn, bool x) {
    return fn == TPU_UNARY_BITWISE_NOT ? !x : x; /* SIGN */
}

/* ---------------------------------------------------- reference path */

tpu_status tpu_k_unary_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *a = &op->in[0];
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[2] = {o->strides, a->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    const tpu_unary_fn fn = (tpu_unary_fn)op->fn;
    const tpu_dtype cm = op->p.ew.common, odt = o->dtype;
    const tpu_scalar *args = op->p.ew.args;
    const bool to_bool = tpu_k_fn_row_of(op)->to_bool;
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        const char *px = tpu_k_ptr(a, it.off[1]);
        char *po = tpu_k_ptr(o, it.off[0]);
        switch (tpu_k_ew_compute_of(cm)) {
        case EW_F32: {
            float x = tpu_k_ew_load_f32(px, a->dtype, cm);
            if (to_bool)
                tpu_k_store_bool(po, odt, un_to_bool(fn, x));
            else
                tpu_k_store_f32(po, odt, tpu_k_round_to(un_f32(fn, x, args), cm));
            break;
        }
        case EW_F64: {
            double x = tpu_k_load_f64(px, a->dtype);
            if (to_bool)
                tpu_k_store_bool(po, odt, un_to_bool(fn, x));
            else
                tpu_k_store_f64(po, odt, un_f64(fn, x, args));
            break;
        }
        case EW_I64: {
            int64_t x = tpu_k_ew_load_i64(px, a->dtype, cm);
            if (to_bool)
                tpu_k_store_bool(po, odt, un_to_bool(fn, (double)x));
            else
                tpu_k_store_i64(po, odt, tpu_k_ew_wrap(un_i64(fn, x, args), cm));
            break;
        }
        case EW_BOOL: {
            bool x = tpu_k_load_bool(px, a->dtype);
            if (to_bool)
                tpu_k_store_bool(po, odt, un_to_bool(fn, x ? 1.0 : 0.0));
            else
                tpu_k_store_bool(po, odt, un_bool(fn, x));
            break;
        }
        }
    }
    return TPU_OK;
}

/* --------------------------------------------------------- fast path */

/* The vector-math function computing fn, or TPU_VM_COUNT for none. */
static tpu_vm_fn vm_of(tpu_unary_fn fn) {
    switch (fn) {
    case TPU_UNARY_EXP: return TPU_VM_EXP;
    case TPU_UNARY_EXPM1: return TPU_VM_EXPM1;
    case TPU_UNARY_LOG: return TPU_VM_LOG;
    case TPU_UNARY_LOG1P: return TPU_VM_LOG1P;
    case TPU_UNARY_LOG2: return TPU_VM_LOG2;
    case TPU_UNARY_TANH: return TPU_VM_TANH;
    case TPU_UNARY_SIGMOID: return TPU_VM_SIGMOID;
    case TPU_UNARY_ERF: return TPU_VM_ERF;
    case TPU_UNARY_SIN: return TPU_VM_SIN;
    case TPU_UNARY_COS: return TPU_VM_COS;
    default: return TPU_VM_COUNT;
    }
}

/* The arithmetic functions as loops the compiler vectorises: the
 * function chosen once per run, each body branch-free and written to give
 * exactly un_f32's bytes (NaN and signed zeros included). Returns false
 * for a function without such a loop. */
#define SIMPLE_LOOP(expr)                                                                          \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const float v = x[i];                                                                  \
            o[i] = (expr);                                                                         \
        }                                                                                          \
        return true;                                                                               \
    } while (0)

#define F32_SIMPLE_BODY                                                                            \
    const float a0 = (float)args[0].f, a1 = (float)args[1].f;                                      \
    switch (fn) {                                                                                  \
    case TPU_UNARY_NEG: SIMPLE_LOOP(-v);                                                           \
    case TPU_UNARY_ABS: SIMPLE_LOOP(fabsf(v));                                                     \
    case TPU_UNARY_RECIPROCAL: SIMPLE_LOOP(1.0f / v);                                              \
    case TPU_UNARY_SQRT: SIMPLE_LOOP(sqrtf(v));                                                    \
    case TPU_UNARY_FLOOR: SIMPLE_LOOP(floorf(v));                                                  \
    case TPU_UNARY_CEIL: SIMPLE_LOOP(ceilf(v));                                                    \
    case TPU_UNARY_ROUND: SIMPLE_LOOP(nearbyintf(v));                                              \
    case TPU_UNARY_TRUNC: SIMPLE_LOOP(truncf(v));                                                  \
    case TPU_UNARY_FRAC: SIMPLE_LOOP(v - truncf(v));                                               \
    case TPU_UNARY_RELU: SIMPLE_LOOP((v > 0.0f || v != v) ? v : 0.0f);                             \
    case TPU_UNARY_LEAKY_RELU: SIMPLE_LOOP(v > 0.0f ? v : v * a0);                                 \
    case TPU_UNARY_HARDSIGMOID: SIMPLE_LOOP(v != v ? v : clip_0_6(v + 3.0f) / 6.0f);              \
    case TPU_UNARY_HARDSWISH: SIMPLE_LOOP(v * clip_0_6(v + 3.0f) / 6.0f);                         \
    case TPU_UNARY_CLAMP: {                                                                        \
        /* NaN bounds take the scalar body (a NaN lower bound wins there). */                      \
        int64_t which = args[2].i;                                                                 \
        if (((which & 1) && a0 != a0) || ((which & 2) && a1 != a1))                                \
            return false;                                                                          \
        const float lo = (which & 1) ? a0 : -INFINITY, hi = (which & 2) ? a1 : INFINITY;           \
        SIMPLE_LOOP(v != v ? v : (v >= lo ? v : lo) <= hi ? (v >= lo ? v : lo) : hi);              \
    }                                                                                              \
    default: return false;                                                                         \
    }

/* Compiled once per ISA level, so that sqrt and division run as wide as
 * the cores allow (the baseline build runs them at 4 lanes); each body is
 * exact IEEE arithmetic, so every level gives the same bytes. */
#if TPU_K_X86
__attribute__((target("avx2,fma"))) static bool
f32_simple_avx2(tpu_unary_fn fn, const tpu_scalar *args, float *o, const float *x, int64_t n) {
    F32_SIMPLE_BODY
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static bool
f32_simple_512(tpu_unary_fn fn, const tpu_scalar *args, float *o, const float *x, int64_t n) {
    F32_SIMPLE_BODY
}
#endif

static bool f32_simple_run(tpu_isa isa, tpu_unary_fn fn, const tpu_scalar *args, float *o,
                           const float *x, int64_t n) {
#if TPU_K_X86
    if (isa >= TPU_ISA_AVX512)
        return f32_simple_512(fn, args, o, x, n);
    if (isa >= TPU_ISA_AVX2)
        return f32_simple_avx2(fn, args, o, x, n);
#endif
    (void)isa;
    F32_SIMPLE_BODY
}

/* The activations vecmath.h computes in one pass, or TPU_VM_ACT_COUNT. */
static tpu_vm_act act_of(tpu_unary_fn fn) {
    switch (fn) {
    case TPU_UNARY_GELU: return TPU_VM_ACT_GELU;
    case TPU_UNARY_GELU_TANH: return TPU_VM_ACT_GELU_TANH;
    case TPU_UNARY_SILU: return TPU_VM_ACT_SILU;
    default: return TPU_VM_ACT_COUNT;
    }
}

/* n <= TPU_K_EW_CHUNK contiguous f32 values through fn (o may equal x).
 * Where the CPU has vector units, the transcendental functions and the
 * activations built on them run on vecmath.h (within its stated ulps of
 * the reference, which computes in f64); the rest, and everything on a
 * portable-only CPU (where the vector forms' exact-fma emulation is
 * slower than libm), run the reference's scalar body. */
static void f32_run(tpu_unary_fn fn, const tpu_scalar *args, float *o, const float *x, int64_t n) {
    const tpu_isa isa = tpu_kernels_get_isa();
    if (isa >= TPU_ISA_AVX2) {
        tpu_vm_fn vm = vm_of(fn);
        if (vm != TPU_VM_COUNT) {
            tpu_vm_f32(vm, o, x, n);
            return;
        }
        tpu_vm_act act = act_of(fn);
        if (act != TPU_VM_ACT_COUNT) {
            tpu_vm_act_f32(act, o, x, n);
            return;
        }
        if (fn == TPU_UNARY_MISH) { /* x * tanh(log1p(exp(x))), in passes: see vecmath_body.h */
            float t[TPU_K_EW_CHUNK];
            tpu_vm_f32(TPU_VM_EXP, t, x, n);
            tpu_vm_f32(TPU_VM_LOG1P, t, t, n);
            tpu_vm_f32(TPU_VM_TANH, t, t, n);
            for (int64_t i = 0; i < n; i++)
                o[i] = x[i] * t[i];
            return;
        }
    }
    if (f32_simple_run(isa, fn, args, o, x, n))
        return;
    for (int64_t i = 0; i < n; i++)
        o[i] = un_f32(fn, x[i], args);
}

/* True if the fast path computes fn with vecmath.h (so its bytes may
 * differ from the reference's within the stated ulps). */
bool tpu_k_unary_uses_vecmath(tpu_unary_fn fn) {
    return vm_of(fn) != TPU_VM_COUNT || act_of(fn) != TPU_VM_ACT_COUNT || fn == TPU_UNARY_MISH;
}

bool tpu_op_layout_sensitive(const tpu_op *op) {
    if (op != NULL && op->code == TPU_OP_BINARY && op->fn >= 0 && op->fn < TPU_BINARY_COUNT)
        return tpu_k_binary_uses_vecmath((tpu_binary_fn)op->fn);
    return op != NULL && op->code == TPU_OP_UNARY && op->fn >= 0 && op->fn < TPU_UNARY_COUNT &&
           tpu_k_unary_uses_vecmath((tpu_unary_fn)op->fn);
}

/* The -> bool functions over a run of f32 values, the function chosen
 * once (un_to_bool's comparisons, which f32 values give exactly as their
 * doubles do). */
#define BOOL_LOOP(expr)                                                                            \
    for (int64_t i = 0; i < n; i++) {                                                              \
        const float v = x[i];                                                                      \
        o[i] = (uint8_t)(expr);                                                                    \
    }                                                                                              \
    break

static void bool_run(tpu_unary_fn fn, uint8_t *o, const float *x, int64_t n) {
    switch (fn) {
    case TPU_UNARY_ISNAN: BOOL_LOOP(v != v);
    case TPU_UNARY_ISINF: BOOL_LOOP(v == INFINITY || v == -INFINITY);
    case TPU_UNARY_ISPOSINF: BOOL_LOOP(v == INFINITY);
    case TPU_UNARY_ISNEGINF: BOOL_LOOP(v == -INFINITY);
    case TPU_UNARY_SIGNBIT: BOOL_LOOP(signbit(v) != 0);
    default: BOOL_LOOP(v == 0.0f); /* LOGICAL_NOT */
    }
}
#undef BOOL_LOOP

/* The flat run: the input (any dtype) staged through f32 chunks as the
 * reference loads it, and each result rounded once on store (or, for the
 * -> bool functions, compared), so the bytes are the reference's. */
typedef struct {
    tpu_unary_fn fn;
    tpu_dtype in_dt, common;
    bool to_bool;
} unary_span_state;
TPU_K_SPAN_STATE_FITS(unary_span_state);

/* The f64 compute: the input staged through f64 (ew_stage.c), un_f64 or
 * un_to_bool per element as the reference calls them, out f64 or bool. */
static void f64_span_run(const tpu_op_span *s, const unary_span_state *u, char *out, const char *in,
                         int64_t n) {
    double xbuf[TPU_K_EW_CHUNK];
    const tpu_scalar *args = s->op->p.ew.args;
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        const double *x = tpu_k_ew_stage_f64(in + off * s->in_size[0], u->in_dt, 1, len, xbuf);
        if (u->to_bool) {
            uint8_t *o = (uint8_t *)out + off;
            for (int64_t i = 0; i < len; i++)
                o[i] = un_to_bool(u->fn, x[i]);
            continue;
        }
        double *o = (double *)out + off;
        for (int64_t i = 0; i < len; i++)
            o[i] = un_f64(u->fn, x[i], args);
    }
}

/* Integer and bool computes: the input staged through int64 (ew_stage.c),
 * un_i64 / un_bool / un_to_bool per element as the reference calls them,
 * stored in out's dtype. */
static void int_span_run(const tpu_op_span *s, const unary_span_state *u, char *out, const char *in,
                         int64_t n) {
    int64_t xbuf[TPU_K_EW_CHUNK], obuf[TPU_K_EW_CHUNK];
    const tpu_dtype cm = u->common, odt = s->op->out.dtype;
    const tpu_scalar *args = s->op->p.ew.args;
    const bool is_bool = tpu_k_ew_compute_of(cm) == EW_BOOL;
    if (u->in_dt == TPU_DTYPE_BOOL && odt == TPU_DTYPE_BOOL &&
        (u->fn == TPU_UNARY_LOGICAL_NOT || (is_bool && u->fn == TPU_UNARY_BITWISE_NOT))) {
        /* A mask's not, byte for byte (un_bool's !x, un_to_bool's x == 0). */
        const uint8_t *x = (const uint8_t *)in;
        uint8_t *o = (uint8_t *)out;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] == 0;
        return;
    }
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        const int64_t *x = tpu_k_ew_stage_i64(in + off * s->in_size[0], u->in_dt, 1, len, cm, xbuf);
        if (u->to_bool) {
            uint8_t *o = (uint8_t *)out + off;
            if (u->fn == TPU_UNARY_LOGICAL_NOT)
                for (int64_t i = 0; i < len; i++)
                    o[i] = x[i] == 0;
            else
                for (int64_t i = 0; i < len; i++)
                    o[i] = un_to_bool(u->fn, (double)x[i]);
            continue;
        }
        if (is_bool)
            for (int64_t i = 0; i < len; i++)
                obuf[i] = un_bool(u->fn, x[i] != 0);
        else
            for (int64_t i = 0; i < len; i++)
                obuf[i] = tpu_k_ew_wrap(un_i64(u->fn, x[i], args), cm);
        tpu_k_ew_store_i64(out + off * s->out_size, odt, obuf, len);
    }
}

static void unary_span_run(const tpu_op_span *s, char *out, const char *const *in, int64_t n) {
    unary_span_state state;
    memcpy(&state, s->state, sizeof state); /* not through a cast: uint64_t storage */
    const unary_span_state *u = &state;
    switch (tpu_k_ew_compute_of(u->common)) { /* the compute type picks the run */
    case EW_I64:
    case EW_BOOL: int_span_run(s, u, out, in[0], n); return;
    case EW_F64: f64_span_run(s, u, out, in[0], n); return;
    case EW_F32: break;
    }
    float xbuf[TPU_K_EW_CHUNK], obuf[TPU_K_EW_CHUNK];
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        const float *x = tpu_k_ew_stage_f32(in[0] + off * s->in_size[0], u->in_dt, 1, len,
                                            u->common, xbuf);
        char *po = out + off * s->out_size;
        if (u->to_bool) {
            bool_run(u->fn, (uint8_t *)po, x, len);
            continue;
        }
        float *dst = u->common == TPU_DTYPE_F32 ? (float *)po : obuf;
        f32_run(u->fn, s->op->p.ew.args, dst, x, len);
        if (u->common != TPU_DTYPE_F32)
            tpu_k_cvt_from_f32(po, u->common, obuf, len);
    }
}

/* The fast path (op_table.c runs it; the rest goes to the reference): a
 * float common dtype (f32/f16/bf16 computed in f32, or f64) with out in
 * the common dtype, or an integer or bool compute with out of any dtype;
 * out bool for the -> bool functions; the input of any dtype; all
 * aligned, input and out dense with the same layout (a contiguous tensor,
 * or out allocated like its input). */
bool tpu_k_unary_span(const tpu_op *op, tpu_op_span *s) {
    const tpu_tensor *o = &op->out, *a = &op->in[0];
    const tpu_dtype cm = op->p.ew.common;
    if (op->fn < 0 || op->fn >= TPU_UNARY_COUNT)
        return false;
    const bool to_bool = tpu_k_fn_row_of(op)->to_bool;
    const tpu_k_ew_compute k = tpu_k_ew_compute_of(cm);
    const bool ints = k == EW_I64 || k == EW_BOOL;
    /* Integer computes store any out dtype; float ones only common's. */
    if ((to_bool ? o->dtype != TPU_DTYPE_BOOL : !ints && o->dtype != cm) ||
        !tpu_k_is_aligned(a) || !tpu_k_is_aligned(o) || !tpu_k_is_dense(o) ||
        !tpu_k_same_layout(a, o))
        return false;
    tpu_k_span_init(s, op, unary_span_run);
    unary_span_state u = {(tpu_unary_fn)op->fn, a->dtype, cm, to_bool};
    memcpy(s->state, &u, sizeof u);
    return true;
}

