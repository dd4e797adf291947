/* BINARY: out = fn(a, b) for the functions of tpu_binary_fn.
 *
 * Inputs go through the record's common dtype to its compute type and the
 * result is rounded back to it (ew.h). Float semantics, identical in every
 * path, follow PyTorch's CPU kernels:
 *   add  a + alpha*b, one rounding: a + b when alpha == 1, else fma(alpha, b, a)
 *        (what PyTorch's vectorized CPU kernel computes); sub likewise with -alpha;
 *   div  a / b; TRUNC: trunc(a / b); FLOOR: PyTorch's div_floor_floating;
 *   the transcendental ones (pow, atan2) in f64 from the f32 values, then
 *   rounded once (within an ulp of PyTorch's vectorised f32 forms);
 *   the activation backwards in the compute type, in PyTorch's order of
 *   operations.
 * Integer semantics: wrapping two's complement (done in uint64); TRUNC and
 * FLOOR division, remainder and fmod with INT64_MIN / -1 == INT64_MIN and
 * a zero divisor TPU_ERR_DIV_BY_ZERO; shifts as PyTorch's (out-of-range
 * counts give 0 or the sign fill). Bool: add is a || (alpha && b), mul is
 * a && b, maximum is ||, minimum is &&.
 *
 * Work split: contiguous ranges of out's row-major element index (or of
 * memory offsets on the flat fast path); every element is independent, so
 * any split gives the same bytes. */
#include <math.h>
#include <string.h>

#include "ew.h"
#include "ew_simd.h"
#include "kernels_internal.h"
#include "vecmath.h"

/* ------------------------------------------------- scalar arithmetic */

/* PyTorch's div_floor_floating, in f32: floor of the exact quotient,
 * computed from fmod so that it is correct where floor(a / b) is not. */
static float div_floor_f32(float a, float b) {
    if (b == 0.0f)
        return a / b; /* IEEE result: +-inf or NaN */
    float mod = fmodf(a, b);
    float div = (a - mod) / b;
    /* fmod takes a's sign; floor division wants b's. */
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f))
        div -= 1.0f;
    float floordiv;
    if (div != 0.0f) {
        /* div is already near an integer: snap it to the nearest one. */
        floordiv = floorf(div);
        if (div - floordiv > 0.5f)
            floordiv += 1.0f;
    } else {
        floordiv = copysignf(0.0f, a / b);
    }
    return floordiv;
}

static double div_floor_f64(double a, double b) {
    if (b == 0.0)
        return a / b;
    double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && (b < 0.0) != (mod < 0.0))
        div -= 1.0;
    double floordiv;
    if (div != 0.0) {
        floordiv = floor(div);
        if (div - floordiv > 0.5)
            floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, a / b);
    }
    return floordiv;
}

/* Rounded division of f16/bf16, as PyTorch's vectorised CPU kernels do it:
 * in the 16-bit type, every step rounded to it (the quotient before trunc;
 * each step of div_floor_floating for floor). Its scalar kernel, which
 * only one-element tensors reach, computes in f32 instead; the vectorised
 * results are the ones users see, so the device gives those. */
static float div_rounded_16(tpu_rounding rnd, float a, float b, tpu_dtype dt) {
    if (rnd == TPU_ROUND_TRUNC || b == 0.0f)
        return rnd == TPU_ROUND_TRUNC ? truncf(tpu_k_round_to(a / b, dt)) : tpu_k_round_to(a / b, dt);
    float mod = tpu_k_round_to(fmodf(a, b), dt);
    float div = tpu_k_round_to(tpu_k_round_to(a - mod, dt) / b, dt);
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f))
        div = tpu_k_round_to(div - 1.0f, dt);
    if (div == 0.0f)
        return copysignf(0.0f, tpu_k_round_to(a / b, dt));
    float floordiv = floorf(div);
    if (tpu_k_round_to(div - floordiv, dt) > 0.5f)
        floordiv = tpu_k_round_to(floordiv + 1.0f, dt);
    return floordiv;
}


/* Everything a scalar body reads from the record, unpacked once. */
typedef struct {
    tpu_binary_fn fn;
    tpu_rounding rnd;
    tpu_dtype common;
    tpu_dtype step_dt; /* rounded division of f16/bf16: the dtype of its steps */
    tpu_scalar alpha, a0, a1;
    bool scalar_b; /* b is the record's scalar operand (n_in == 1) */
} bin_ctx;

/* The dtype whose precision the steps of a rounded division take: the
 * common one, unless the divisor is one value for the whole op (a scalar
 * operand, a broadcast one-element tensor, or any op with one output
 * element), which PyTorch's CPU kernels divide by in f32 (their is_scalar
 * path). */
static tpu_dtype div_step_dtype(const tpu_op *op) {
    bool scalar_b = op->n_in == 1 || tpu_k_is_scalar_broadcast(&op->in[1]);
    return scalar_b ? TPU_DTYPE_F32 : op->p.ew.common;
}

static bin_ctx bin_ctx_of(const tpu_op *op) {
    bin_ctx c = {(tpu_binary_fn)op->fn, op->p.ew.rounding, op->p.ew.common, div_step_dtype(op),
                 op->p.ew.alpha, op->p.ew.args[0], op->p.ew.args[1], op->n_in == 1};
    return c;
}

/* NaN if either is NaN, else the larger (smaller). */
#define NAN_MAX(a, b) ((a) != (a) || (b) != (b) ? (a) + (b) : (a) > (b) ? (a) : (b))
#define NAN_MIN(a, b) ((a) != (a) || (b) != (b) ? (a) + (b) : (a) < (b) ? (a) : (b))

/* pow with a scalar exponent that PyTorch's pow(tensor, scalar) computes
 * by plain arithmetic instead of pow() (which differs at -inf ** 0.5).
 * Returns false for other exponents. */
#define POW_SPECIAL(T, SQRT, a, b, out)                                                            \
    ((b) == (T)2    ? (*(out) = (a) * (a), true)                                                   \
     : (b) == (T)3  ? (*(out) = (a) * (a) * (a), true)                                             \
     : (b) == (T)0.5 ? (*(out) = SQRT(a), true)                                                    \
     : (b) == (T)-0.5 ? (*(out) = (T)1 / SQRT(a), true)                                            \
     : (b) == (T)-1 ? (*(out) = (T)1 / (a), true)                                                  \
     : (b) == (T)-2 ? (*(out) = (T)1 / ((a) * (a)), true)                                          \
                    : false)

/* Float functions shared by f32 and f64 computes, in double (exact for
 * f32 inputs; the caller rounds once). */
static double bin_transcendental(tpu_binary_fn fn, double a, double b) {
    switch (fn) {
    case TPU_BINARY_POW: return pow(a, b);
    case TPU_BINARY_ATAN2: return atan2(a, b);
    case TPU_BINARY_HYPOT: return hypot(a, b);
    case TPU_BINARY_XLOG1PY: {
        /* One NaN whatever the operand order the compiler picks (NaN a
         * times a NaN log1p gives either operand's sign bit). */
        double r = b != b ? b : a == 0.0 ? 0.0 : a * log1p(b);
        return r != r ? NAN : r;
    }
    default: return NAN;
    }
}

/* The smooth activations' derivatives, g * f'(x), in f64 (exact inputs
 * for f32; the caller rounds once); NaN for other functions. */
static double bin_smooth_backward(tpu_binary_fn fn, double g, double x) {
    switch (fn) {
    case TPU_BINARY_GELU_BACKWARD: {
        double cdf = 0.5 * (1.0 + erf(x * TPU_K_SQRT1_2));
        double pdf = TPU_K_2_SQRTPI * TPU_K_SQRT1_2 * 0.5 * exp(-0.5 * x * x);
        return g * (cdf + x * pdf);
    }
    case TPU_BINARY_GELU_TANH_BACKWARD: {
        const double beta = TPU_K_SQRT2 * TPU_K_2_SQRTPI * 0.5, kappa = 0.044715;
        double t = tanh(beta * (x + kappa * x * x * x));
        double dright = 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * x * x);
        return g * (0.5 * (1.0 + t) + dright);
    }
    case TPU_BINARY_SILU_BACKWARD: {
        double s = 1.0 / (1.0 + exp(-x));
        return g * s * (1.0 + x * (1.0 - s));
    }
    case TPU_BINARY_MISH_BACKWARD: {
        double s = 1.0 / (1.0 + exp(-x)), t = tanh(log1p(exp(x)));
        return g * (t + x * s * (1.0 - t * t));
    }
    default: return NAN; /* not a float-result function (tpu_op_check) */
    }
}

/* logit's derivative g / (x (1 - x)) in f64: NaN outside [0, 1] without
 * eps (eps < 0), 0 outside [eps, 1 - eps] with it. */
static double logit_backward(double g, double x, double eps) {
    if (eps < 0.0)
        return x < 0.0 || x > 1.0 ? NAN : g / (x * (1.0 - x));
    return x < eps || x > 1.0 - eps ? 0.0 : g / (x * (1.0 - x));
}

/* The f32 compute of f32/f16/bf16 commons, for functions with a float
 * result. */
static inline float bin_f32(const bin_ctx *c, float a, float b) {
    const float alpha = (float)c->alpha.f;
    switch (c->fn) {
    case TPU_BINARY_ADD: return alpha == 1.0f ? a + b : fmaf(alpha, b, a);
    case TPU_BINARY_SUB: return alpha == 1.0f ? a - b : fmaf(-alpha, b, a);
    case TPU_BINARY_MUL: return a * b;
    case TPU_BINARY_DIV:
        if (c->rnd != TPU_ROUND_NONE && c->step_dt != TPU_DTYPE_F32)
            return div_rounded_16(c->rnd, a, b, c->step_dt);
        return c->rnd == TPU_ROUND_NONE ? a / b : c->rnd == TPU_ROUND_TRUNC ? truncf(a / b)
                                                                           : div_floor_f32(a, b);
    case TPU_BINARY_MAXIMUM: return NAN_MAX(a, b);
    case TPU_BINARY_MINIMUM: return NAN_MIN(a, b);
    case TPU_BINARY_FMAX: return fmaxf(a, b);
    case TPU_BINARY_FMIN: return fminf(a, b);
    case TPU_BINARY_POW: {
        float r;
        if (c->scalar_b && POW_SPECIAL(float, sqrtf, a, b, &r))
            return r;
        return (float)bin_transcendental(c->fn, a, b);
    }
    case TPU_BINARY_ATAN2:
    case TPU_BINARY_HYPOT:
    case TPU_BINARY_XLOG1PY: return (float)bin_transcendental(c->fn, a, b);
    case TPU_BINARY_HEAVISIDE: return a == 0.0f ? b : (float)(a > 0.0f);
    case TPU_BINARY_SHRINK_BACKWARD: {
        const float l = (float)c->a0.f;
        return b >= -l && b <= l ? 0.0f : a;
    }
    case TPU_BINARY_LOGIT_BACKWARD: return (float)logit_backward(a, b, c->a0.f);
    case TPU_BINARY_REMAINDER: {
        float m = fmodf(a, b);
        return m != 0.0f && ((b < 0.0f) != (m < 0.0f)) ? m + b : m;
    }
    case TPU_BINARY_FMOD: return fmodf(a, b);
    case TPU_BINARY_COPYSIGN: return copysignf(a, b);
    case TPU_BINARY_XLOGY: return b != b ? b : a == 0.0f ? 0.0f : a * (float)log(b);
    case TPU_BINARY_THRESHOLD: return a <= (float)c->a0.f ? (float)c->a1.f : b;
    case TPU_BINARY_SIGMOID_BACKWARD: return a * (1.0f - b) * b;
    /* The next three as PyTorch's CPU kernels' vector forms compute them
     * (what a contiguous CPU tensor gets): 1 - b^2 fused; hardswish's
     * ends -3 and 3 closed, a NaN b giving NaN; hardtanh's pass-through
     * only strictly inside (min, max), a NaN b or bound giving 0. */
    case TPU_BINARY_TANH_BACKWARD: return a * fmaf(-b, b, 1.0f);
    case TPU_BINARY_LEAKY_RELU_BACKWARD: return a > 0.0f ? b : b * (float)c->a0.f;
    case TPU_BINARY_HARDSWISH_BACKWARD:
        return b <= -3.0f ? 0.0f : b >= 3.0f ? a : a * (b / 3.0f + 0.5f);
    case TPU_BINARY_HARDSIGMOID_BACKWARD:
        return b > -3.0f && b < 3.0f ? a * (1.0f / 6.0f) : 0.0f;
    case TPU_BINARY_HARDTANH_BACKWARD:
        return b > (float)c->a0.f && b < (float)c->a1.f ? a : 0.0f;
    case TPU_BINARY_SOFTPLUS_BACKWARD: {
        float beta = (float)c->a0.f, z = (float)exp((double)(b * beta));
        return b * beta > (float)c->a1.f ? a : a * z / (z + 1.0f);
    }
    default: return (float)bin_smooth_backward(c->fn, a, b); /* rounded once */
    }
}

static inline double bin_f64(const bin_ctx *c, double a, double b) {
    const double alpha = c->alpha.f;
    switch (c->fn) {
    case TPU_BINARY_ADD: return alpha == 1.0 ? a + b : fma(alpha, b, a);
    case TPU_BINARY_SUB: return alpha == 1.0 ? a - b : fma(-alpha, b, a);
    case TPU_BINARY_MUL: return a * b;
    case TPU_BINARY_DIV:
        return c->rnd == TPU_ROUND_NONE ? a / b : c->rnd == TPU_ROUND_TRUNC ? trunc(a / b)
                                                                           : div_floor_f64(a, b);
    case TPU_BINARY_MAXIMUM: return NAN_MAX(a, b);
    case TPU_BINARY_MINIMUM: return NAN_MIN(a, b);
    case TPU_BINARY_FMAX: return fmax(a, b);
    case TPU_BINARY_FMIN: return fmin(a, b);
    case TPU_BINARY_POW: {
        double r;
        if (c->scalar_b && POW_SPECIAL(double, sqrt, a, b, &r))
            return r;
        return bin_transcendental(c->fn, a, b);
    }
    case TPU_BINARY_ATAN2:
    case TPU_BINARY_HYPOT:
    case TPU_BINARY_XLOG1PY: return bin_transcendental(c->fn, a, b);
    case TPU_BINARY_HEAVISIDE: return a == 0.0 ? b : (double)(a > 0.0);
    case TPU_BINARY_SHRINK_BACKWARD: return b >= -c->a0.f && b <= c->a0.f ? 0.0 : a;
    case TPU_BINARY_LOGIT_BACKWARD: return logit_backward(a, b, c->a0.f);
    case TPU_BINARY_REMAINDER: {
        double m = fmod(a, b);
        return m != 0.0 && ((b < 0.0) != (m < 0.0)) ? m + b : m;
    }
    case TPU_BINARY_FMOD: return fmod(a, b);
    case TPU_BINARY_COPYSIGN: return copysign(a, b);
    /* A NaN a is returned as it is: a * log(b) with both NaN would give
     * whichever NaN the compiler's operand order picks. */
    case TPU_BINARY_XLOGY: return b != b ? b : a != a ? a : a == 0.0 ? 0.0 : a * log(b);
    case TPU_BINARY_THRESHOLD: return a <= c->a0.f ? c->a1.f : b;
    case TPU_BINARY_SIGMOID_BACKWARD: return a * (1.0 - b) * b;
    case TPU_BINARY_TANH_BACKWARD: return a * fma(-b, b, 1.0);
    case TPU_BINARY_LEAKY_RELU_BACKWARD: return a > 0.0 ? b : b * c->a0.f;
    case TPU_BINARY_HARDSWISH_BACKWARD: return b <= -3.0 ? 0.0 : b >= 3.0 ? a : a * (b / 3.0 + 0.5);
    case TPU_BINARY_HARDSIGMOID_BACKWARD: return b > -3.0 && b < 3.0 ? a * (1.0 / 6.0) : 0.0;
    case TPU_BINARY_HARDTANH_BACKWARD: return b > c->a0.f && b < c->a1.f ? a : 0.0;
    case TPU_BINARY_SOFTPLUS_BACKWARD: {
        double z = exp(b * c->a0.f);
        return b * c->a0.f > c->a1.f ? a : a * z / (z + 1.0);
    }
    default: return bin_smooth_backward(c->fn, a, b);
    }
}


/* Bits of an integer common dtype, for the shifts. */
static int int_bits(tpu_dtype dt) {
    return (int)tpu_dtype_size(dt) * 8;
}

/* Integer power by squaring, wrapping; negative exponents as PyTorch's
 * powi: 1 for a base of 1, +-1 for -1, else 0. */
static int64_t pow_i64(int64_t a, int64_t b) {
    if (b < 0)
        return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t base = (uint64_t)a, r = 1;
    for (uint64_t e = (uint64_t)b; e; e >>= 1) {
        if (e & 1u)
            r *= base;
        base *= base;
    }
    return tpu_k_u64_to_i64(r);
}

/* Integer compute (in uint64 so that overflow wraps). Returns false for
 * a zero divisor. */
static inline bool bin_i64(const bin_ctx *c, int64_t a, int64_t b, int64_t *out) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b, ual = (uint64_t)c->alpha.i;
    switch (c->fn) {
    case TPU_BINARY_ADD: *out = tpu_k_u64_to_i64(ua + ual * ub); return true;
    case TPU_BINARY_SUB: *out = tpu_k_u64_to_i64(ua - ual * ub); return true;
    case TPU_BINARY_MUL: *out = tpu_k_u64_to_i64(ua * ub); return true;
    case TPU_BINARY_MAXIMUM:
    case TPU_BINARY_FMAX: *out = a > b ? a : b; return true;
    case TPU_BINARY_MINIMUM:
    case TPU_BINARY_FMIN: *out = a < b ? a : b; return true;
    case TPU_BINARY_POW: *out = pow_i64(a, b); return true;
    case TPU_BINARY_BITWISE_AND: *out = a & b; return true;
    case TPU_BINARY_BITWISE_OR: *out = a | b; return true;
    case TPU_BINARY_BITWISE_XOR: *out = a ^ b; return true;
    case TPU_BINARY_LSHIFT: {
        int bits = int_bits(c->common);
        *out = b < 0 || b >= bits ? 0 : tpu_k_u64_to_i64(ua << b);
        return true;
    }
    case TPU_BINARY_RSHIFT: {
        int bits = int_bits(c->common);
        if ((b < 0 || b >= bits) && c->common == TPU_DTYPE_U8) {
            *out = 0; /* the sign fill of an unsigned type */
            return true;
        }
        int64_t n = b < 0 || b >= bits ? bits - 1 : b;
        /* Arithmetic shift written out (>> of a negative value is
         * implementation-defined); u8 values are non-negative. */
        *out = a < 0 ? -1 - (int64_t)((~ua) >> n) : (int64_t)(ua >> n);
        return true;
    }
    case TPU_BINARY_THRESHOLD: *out = a <= c->a0.i ? c->a1.i : b; return true;
    case TPU_BINARY_HEAVISIDE: *out = a == 0 ? b : a > 0; return true;
    default: break;
    }
    /* DIV, REMAINDER, FMOD. */
    if (b == 0)
        return false;
    if (b == -1) { /* -a (wraps for INT64_MIN, where C's / and % would trap); remainder 0 */
        *out = c->fn == TPU_BINARY_DIV ? tpu_k_u64_to_i64(0u - ua) : 0;
        return true;
    }
    int64_t q = a / b, r = a % b;
    bool signs_differ = r != 0 && ((r < 0) != (b < 0));
    switch (c->fn) {
    case TPU_BINARY_REMAINDER: *out = signs_differ ? r + b : r; return true;
    case TPU_BINARY_FMOD: *out = r; return true;
    default:
        /* C truncates; floor steps down when the remainder's sign differs
         * from the divisor's. */
        *out = c->rnd == TPU_ROUND_FLOOR && signs_differ ? q - 1 : q;
        return true;
    }
}

static inline bool bin_bool(const bin_ctx *c, bool a, bool b) {
    switch (c->fn) {
    case TPU_BINARY_ADD: return a || (c->alpha.i != 0 && b);
    case TPU_BINARY_MAXIMUM:
    case TPU_BINARY_FMAX:
    case TPU_BINARY_BITWISE_OR: return a || b;
    case TPU_BINARY_BITWISE_XOR: return a != b;
    case TPU_BINARY_HEAVISIDE: return a || b; /* a == 0 ? b : a > 0 */
    default: return a && b; /* MUL, MINIMUM, FMIN, BITWISE_AND */
    }
}

/* The -> bool functions on two values of a common compute type. */
#define BIN_TO_BOOL(fn, a, b)                                                                      \
    ((fn) == TPU_BINARY_EQ   ? (a) == (b)                                                          \
     : (fn) == TPU_BINARY_NE ? (a) != (b)                                                          \
     : (fn) == TPU_BINARY_LT ? (a) < (b)                                                           \
     : (fn) == TPU_BINARY_LE ? (a) <= (b)                                                          \
     : (fn) == TPU_BINARY_GT ? (a) > (b)                                                           \
     : (fn) == TPU_BINARY_GE ? (a) >= (b)                                                          \
     : (fn) == TPU_BINARY_LOGICAL_AND ? ((a) != 0) && ((b) != 0)                                   \
     : (fn) == TPU_BINARY_LOGICAL_OR  ? ((a) != 0) || ((b) != 0)                                   \
                                      : ((a) != 0) != ((b) != 0))

/* The stream names the op in front of the message. */
static tpu_status div_by_zero(void) {
    return tpu_set_error(TPU_ERR_DIV_BY_ZERO, "integer division by zero");
}

/* ---------------------------------------------------- reference path */

tpu_status tpu_k_binary_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *a = &op->in[0];
    const tpu_tensor *b = op->n_in == 2 ? &op->in[1] : NULL;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[3] = {o->strides, a->strides, b ? b->strides : o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 3, strides, start);
    const bin_ctx c = bin_ctx_of(op);
    const tpu_dtype cm = c.common, odt = o->dtype;
    const bool to_bool = tpu_k_fn_row_of(op)->to_bool;
    const tpu_scalar other = op->p.ew.other;
    /* b as a tensor, or the scalar operand in the compute type (also
     * rounded through common, unless b_opmath). */
    const bool b_raw = op->p.ew.b_opmath;
    /* One loop per compute type: load, compute, store, per element. */
    switch (tpu_k_ew_compute_of(cm)) {
    case EW_F32: {
        const float bs = b_raw ? (float)other.f : tpu_k_round_to((float)other.f, cm);
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            float x = tpu_k_ew_load_f32(tpu_k_ptr(a, it.off[1]), a->dtype, cm);
            float y = !b ? bs
                      : b_raw ? tpu_k_load_f32(tpu_k_ptr(b, it.off[2]), b->dtype)
                              : tpu_k_ew_load_f32(tpu_k_ptr(b, it.off[2]), b->dtype, cm);
            char *po = tpu_k_ptr(o, it.off[0]);
            if (to_bool)
                tpu_k_store_bool(po, odt, BIN_TO_BOOL(c.fn, x, y));
            else
                tpu_k_store_f32(po, odt, tpu_k_round_to(bin_f32(&c, x, y), cm));
        }
        return TPU_OK;
    }
    case EW_F64:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            double x = tpu_k_load_f64(tpu_k_ptr(a, it.off[1]), a->dtype);
            double y = b ? tpu_k_load_f64(tpu_k_ptr(b, it.off[2]), b->dtype) : other.f;
            char *po = tpu_k_ptr(o, it.off[0]);
            if (to_bool)
                tpu_k_store_bool(po, odt, BIN_TO_BOOL(c.fn, x, y));
            else
                tpu_k_store_f64(po, odt, bin_f64(&c, x, y));
        }
        return TPU_OK;
    case EW_BOOL:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            bool x = tpu_k_load_bool(tpu_k_ptr(a, it.off[1]), a->dtype);
            bool y = b ? tpu_k_load_bool(tpu_k_ptr(b, it.off[2]), b->dtype) : other.i != 0;
            tpu_k_store_bool(tpu_k_ptr(o, it.off[0]), odt,
                             to_bool ? BIN_TO_BOOL(c.fn, x, y) : bin_bool(&c, x, y));
        }
        return TPU_OK;
    case EW_I64:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            int64_t x = tpu_k_ew_load_i64(tpu_k_ptr(a, it.off[1]), a->dtype, cm);
            int64_t y = b ? tpu_k_ew_load_i64(tpu_k_ptr(b, it.off[2]), b->dtype, cm)
                          : tpu_k_ew_wrap(other.i, cm);
            char *po = tpu_k_ptr(o, it.off[0]);
            if (to_bool) {
                tpu_k_store_bool(po, odt, BIN_TO_BOOL(c.fn, x, y));
                continue;
            }
            int64_t r;
            if (!bin_i64(&c, x, y, &r))
                return div_by_zero();
            /* Wrapped to common first, then converted to out's dtype. */
            tpu_k_store_i64(po, odt, tpu_k_ew_wrap(r, cm));
        }
        return TPU_OK;
    }
    return TPU_OK;
}

/* --------------------------------------------------------- fast path */

/* An input of a run: element j is at p + j * step elements of dtype dt
 * (step 1, or 0 for a value broadcast along the run). */
typedef struct {
    const char *p;
    tpu_dtype dt;
    int64_t step;
} run_in;

#if TPU_K_X86
/* Direct loops: ADD, SUB, MUL, true DIV, MAXIMUM and MINIMUM, POW by the
 * exponents below, THRESHOLD and the piecewise and sigmoid/tanh
 * backwards over f32 and bf16 runs, each vector loaded (bf16 widened
 * exactly), computed in f32 and stored (bf16 rounded as tpu_f32_to_bf16)
 * in one pass, with no staging buffer. The lanes do the scalar form's
 * IEEE operations (bin_f32): fmadd is one rounding, like fmaf; the NaN
 * blend gives the scalar form's a + b; ordered compares are false for a
 * NaN, as C's are, so the blends pick what the scalar branches pick. One
 * loop per function, so no branch on it per vector; the operands'
 * layouts are loop-invariant tests the compiler unswitches. (Per element,
 * the branches of the scalar form mispredict on mixed signs: 4 ns an
 * element for threshold_backward.) */
static bool has_vector_form(const bin_ctx *c, run_in b) {
    switch (c->fn) {
    case TPU_BINARY_ADD:
    case TPU_BINARY_SUB:
    case TPU_BINARY_MUL:
    case TPU_BINARY_MAXIMUM:
    case TPU_BINARY_MINIMUM:
    case TPU_BINARY_THRESHOLD:
    case TPU_BINARY_SIGMOID_BACKWARD:
    case TPU_BINARY_TANH_BACKWARD:
    case TPU_BINARY_LEAKY_RELU_BACKWARD:
    case TPU_BINARY_HARDSWISH_BACKWARD:
    case TPU_BINARY_HARDSIGMOID_BACKWARD:
    case TPU_BINARY_HARDTANH_BACKWARD: return true;
    case TPU_BINARY_DIV: return c->rnd == TPU_ROUND_NONE;
    case TPU_BINARY_POW: {
        /* The exponents POW_SPECIAL computes by arithmetic, b being the
         * record's scalar: the loops below do the same IEEE operations. */
        float e;
        if (!c->scalar_b || b.step != 0)
            return false;
        e = tpu_k_load_f32(b.p, b.dt);
        return e == 2.0f || e == 3.0f || e == 0.5f || e == -0.5f || e == -1.0f || e == -2.0f;
    }
    default: return false;
    }
}

/* The vector loops read f32 and bf16 and write them. */
static bool vector_dtype(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16;
}

#define LD8(r, i)                                                                                  \
    (!(r).step ? v##r##0                                                                           \
     : (r).dt == TPU_DTYPE_BF16 ? tpu_k_bf16x8_load((const uint16_t *)(r).p + (i))               \
                                 : _mm256_loadu_ps((const float *)(r).p + (i)))
#define ST8(i, v)                                                                                  \
    (o_bf16 ? tpu_k_bf16x8_store((uint16_t *)po + (i), v) : _mm256_storeu_ps((float *)po + (i), v))
#define LOOP8(EXPR)                                                                                \
    for (; i + 8 <= n; i += 8) {                                                                   \
        const __m256 x = LD8(a, i), y = LD8(b, i);                                                 \
        ST8(i, EXPR);                                                                              \
    }                                                                                              \
    break

__attribute__((target("avx2,fma"))) static void direct_avx2(const bin_ctx *c, char *po,
                                                            tpu_dtype odt, run_in a, run_in b,
                                                            int64_t n) {
    const float alpha = (float)c->alpha.f, a0 = tpu_k_load_f32(a.p, a.dt),
                b0 = tpu_k_load_f32(b.p, b.dt);
    const __m256 va0 = _mm256_set1_ps(a0), vb0 = _mm256_set1_ps(b0);
    const __m256 valpha = _mm256_set1_ps(c->fn == TPU_BINARY_SUB ? -alpha : alpha);
    const bool o_bf16 = odt == TPU_DTYPE_BF16, fma = alpha != 1.0f;
    int64_t i = 0;
    switch (c->fn) {
    case TPU_BINARY_ADD:
        if (fma) {
            LOOP8(_mm256_fmadd_ps(valpha, y, x));
        }
        LOOP8(_mm256_add_ps(x, y));
    case TPU_BINARY_SUB:
        if (fma) {
            LOOP8(_mm256_fmadd_ps(valpha, y, x));
        }
        LOOP8(_mm256_sub_ps(x, y));
    case TPU_BINARY_MUL: LOOP8(_mm256_mul_ps(x, y));
    case TPU_BINARY_MAXIMUM:
        LOOP8(_mm256_blendv_ps(_mm256_blendv_ps(y, x, _mm256_cmp_ps(x, y, _CMP_GT_OQ)),
                               _mm256_add_ps(x, y), _mm256_cmp_ps(x, y, _CMP_UNORD_Q)));
    case TPU_BINARY_MINIMUM:
        LOOP8(_mm256_blendv_ps(_mm256_blendv_ps(y, x, _mm256_cmp_ps(x, y, _CMP_LT_OQ)),
                               _mm256_add_ps(x, y), _mm256_cmp_ps(x, y, _CMP_UNORD_Q)));
    case TPU_BINARY_THRESHOLD: {
        const __m256 thr = _mm256_set1_ps((float)c->a0.f), val = _mm256_set1_ps((float)c->a1.f);
        LOOP8(_mm256_blendv_ps(y, val, _mm256_cmp_ps(x, thr, _CMP_LE_OQ)));
    }
    case TPU_BINARY_SIGMOID_BACKWARD:
        LOOP8(_mm256_mul_ps(_mm256_mul_ps(x, _mm256_sub_ps(_mm256_set1_ps(1.0f), y)), y));
    case TPU_BINARY_TANH_BACKWARD:
        LOOP8(_mm256_mul_ps(x, _mm256_fnmadd_ps(y, y, _mm256_set1_ps(1.0f))));
    case TPU_BINARY_LEAKY_RELU_BACKWARD: {
        const __m256 slope = _mm256_set1_ps((float)c->a0.f);
        LOOP8(_mm256_blendv_ps(_mm256_mul_ps(y, slope), y,
                               _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ)));
    }
    case TPU_BINARY_HARDSWISH_BACKWARD: {
        const __m256 three = _mm256_set1_ps(3.0f), mthree = _mm256_set1_ps(-3.0f);
        LOOP8(_mm256_blendv_ps(
            _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_add_ps(_mm256_div_ps(y, three),
                                                            _mm256_set1_ps(0.5f))),
                             x, _mm256_cmp_ps(y, three, _CMP_GE_OQ)),
            _mm256_setzero_ps(), _mm256_cmp_ps(y, mthree, _CMP_LE_OQ)));
    }
    case TPU_BINARY_HARDSIGMOID_BACKWARD:
        LOOP8(_mm256_and_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.0f / 6.0f)),
                            _mm256_and_ps(_mm256_cmp_ps(y, _mm256_set1_ps(-3.0f), _CMP_GT_OQ),
                                          _mm256_cmp_ps(y, _mm256_set1_ps(3.0f), _CMP_LT_OQ))));
    case TPU_BINARY_HARDTANH_BACKWARD: {
        const __m256 lo = _mm256_set1_ps((float)c->a0.f), hi = _mm256_set1_ps((float)c->a1.f);
        LOOP8(_mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(y, lo, _CMP_GT_OQ),
                                          _mm256_cmp_ps(y, hi, _CMP_LT_OQ)),
                            x));
    }
    case TPU_BINARY_POW: {
        /* b0 is one of has_vector_form's exponents; y is b0 throughout. */
        const __m256 one = _mm256_set1_ps(1.0f);
        if (b0 == 2.0f) {
            LOOP8(((void)y, _mm256_mul_ps(x, x)));
        }
        if (b0 == 3.0f) {
            LOOP8(((void)y, _mm256_mul_ps(_mm256_mul_ps(x, x), x)));
        }
        if (b0 == 0.5f) {
            LOOP8(((void)y, _mm256_sqrt_ps(x)));
        }
        if (b0 == -0.5f) {
            LOOP8(((void)y, _mm256_div_ps(one, _mm256_sqrt_ps(x))));
        }
        if (b0 == -1.0f) {
            LOOP8(((void)y, _mm256_div_ps(one, x)));
        }
        LOOP8(((void)y, _mm256_div_ps(one, _mm256_mul_ps(x, x))));
    }
    default: LOOP8(_mm256_div_ps(x, y));
    }
    for (; i < n; i++) {
        float r = bin_f32(c, a.step ? tpu_k_load_f32(a.p + i * (int64_t)tpu_dtype_size(a.dt), a.dt) : a0,
                          b.step ? tpu_k_load_f32(b.p + i * (int64_t)tpu_dtype_size(b.dt), b.dt) : b0);
        tpu_k_store_f32(po + i * (int64_t)tpu_dtype_size(odt), odt, r);
    }
}

/* 16 lanes, the tail through masked loads and stores. */
#define LD16(r, i)                                                                                 \
    (!(r).step ? v##r##0                                                                           \
     : (r).dt == TPU_DTYPE_BF16 ? tpu_k_bf16x16_load((const uint16_t *)(r).p + (i))              \
                                 : _mm512_loadu_ps((const float *)(r).p + (i)))
#define LD16_N(r, i, k)                                                                            \
    (!(r).step ? v##r##0                                                                           \
     : (r).dt == TPU_DTYPE_BF16 ? tpu_k_bf16x16_load_n((const uint16_t *)(r).p + (i), k)         \
                                 : tpu_k_f32x16_load_n((const float *)(r).p + (i), k))
#define LOOP16(EXPR)                                                                               \
    for (; i + 16 <= n; i += 16) {                                                                 \
        const __m512 x = LD16(a, i), y = LD16(b, i);                                               \
        const __m512 r = EXPR;                                                                     \
        if (o_bf16 && hw)                                                                          \
            tpu_k_bf16x16_store_hw((uint16_t *)po + i, r);                                         \
        else if (o_bf16)                                                                           \
            tpu_k_bf16x16_store((uint16_t *)po + i, r);                                            \
        else                                                                                       \
            _mm512_storeu_ps((float *)po + i, r);                                                  \
    }                                                                                              \
    if (i < n) {                                                                                   \
        const int k = (int)(n - i);                                                                \
        const __m512 x = LD16_N(a, i, k), y = LD16_N(b, i, k);                                     \
        const __m512 r = EXPR;                                                                     \
        if (o_bf16 && hw)                                                                          \
            tpu_k_bf16x16_store_n_hw((uint16_t *)po + i, r, k);                                    \
        else if (o_bf16)                                                                           \
            tpu_k_bf16x16_store_n((uint16_t *)po + i, r, k);                                       \
        else                                                                                       \
            tpu_k_f32x16_store_n((float *)po + i, r, k);                                           \
    }                                                                                              \
    return

#define MAX16(x, y)                                                                                \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q),                                   \
                         _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_GT_OQ), y, x),         \
                         _mm512_add_ps(x, y))
#define MIN16(x, y)                                                                                \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q),                                   \
                         _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), y, x),         \
                         _mm512_add_ps(x, y))

/* The 16-lane loops; hw: bf16 outs round by VCVTNEPS2BF16 (the caller
 * checked tpu_k_bf16_cvt_ok), a constant in each of the two builds below. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"), always_inline)) static inline void
direct_16(const bin_ctx *c, char *po, tpu_dtype odt, run_in a, run_in b, int64_t n, bool hw) {
    const float alpha = (float)c->alpha.f;
    const __m512 va0 = _mm512_set1_ps(tpu_k_load_f32(a.p, a.dt));
    const __m512 vb0 = _mm512_set1_ps(tpu_k_load_f32(b.p, b.dt));
    const __m512 valpha = _mm512_set1_ps(c->fn == TPU_BINARY_SUB ? -alpha : alpha);
    const bool o_bf16 = odt == TPU_DTYPE_BF16, fma = alpha != 1.0f;
    int64_t i = 0;
    switch (c->fn) {
    case TPU_BINARY_ADD:
        if (fma) {
            LOOP16(_mm512_fmadd_ps(valpha, y, x));
        }
        LOOP16(_mm512_add_ps(x, y));
    case TPU_BINARY_SUB:
        if (fma) {
            LOOP16(_mm512_fmadd_ps(valpha, y, x));
        }
        LOOP16(_mm512_sub_ps(x, y));
    case TPU_BINARY_MUL: LOOP16(_mm512_mul_ps(x, y));
    case TPU_BINARY_MAXIMUM: LOOP16(MAX16(x, y));
    case TPU_BINARY_MINIMUM: LOOP16(MIN16(x, y));
    case TPU_BINARY_THRESHOLD: {
        const __m512 thr = _mm512_set1_ps((float)c->a0.f), val = _mm512_set1_ps((float)c->a1.f);
        LOOP16(_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, thr, _CMP_LE_OQ), y, val));
    }
    case TPU_BINARY_SIGMOID_BACKWARD:
        LOOP16(_mm512_mul_ps(_mm512_mul_ps(x, _mm512_sub_ps(_mm512_set1_ps(1.0f), y)), y));
    case TPU_BINARY_TANH_BACKWARD:
        LOOP16(_mm512_mul_ps(x, _mm512_fnmadd_ps(y, y, _mm512_set1_ps(1.0f))));
    case TPU_BINARY_LEAKY_RELU_BACKWARD: {
        const __m512 slope = _mm512_set1_ps((float)c->a0.f);
        LOOP16(_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ),
                                    _mm512_mul_ps(y, slope), y));
    }
    case TPU_BINARY_HARDSWISH_BACKWARD: {
        const __m512 three = _mm512_set1_ps(3.0f), mthree = _mm512_set1_ps(-3.0f);
        LOOP16(_mm512_maskz_mov_ps(
            (__mmask16)~_mm512_cmp_ps_mask(y, mthree, _CMP_LE_OQ),
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, three, _CMP_GE_OQ),
                                 _mm512_mul_ps(x, _mm512_add_ps(_mm512_div_ps(y, three),
                                                                _mm512_set1_ps(0.5f))),
                                 x)));
    }
    case TPU_BINARY_HARDSIGMOID_BACKWARD:
        LOOP16(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_set1_ps(-3.0f), _CMP_GT_OQ) &
                                       _mm512_cmp_ps_mask(y, _mm512_set1_ps(3.0f), _CMP_LT_OQ),
                                   _mm512_mul_ps(x, _mm512_set1_ps(1.0f / 6.0f))));
    case TPU_BINARY_HARDTANH_BACKWARD: {
        const __m512 lo = _mm512_set1_ps((float)c->a0.f), hi = _mm512_set1_ps((float)c->a1.f);
        LOOP16(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, lo, _CMP_GT_OQ) &
                                       _mm512_cmp_ps_mask(y, hi, _CMP_LT_OQ),
                                   x));
    }
    case TPU_BINARY_POW: {
        /* As in direct_avx2. */
        const float e = tpu_k_load_f32(b.p, b.dt);
        const __m512 one = _mm512_set1_ps(1.0f);
        if (e == 2.0f) {
            LOOP16(((void)y, _mm512_mul_ps(x, x)));
        }
        if (e == 3.0f) {
            LOOP16(((void)y, _mm512_mul_ps(_mm512_mul_ps(x, x), x)));
        }
        if (e == 0.5f) {
            LOOP16(((void)y, _mm512_sqrt_ps(x)));
        }
        if (e == -0.5f) {
            LOOP16(((void)y, _mm512_div_ps(one, _mm512_sqrt_ps(x))));
        }
        if (e == -1.0f) {
            LOOP16(((void)y, _mm512_div_ps(one, x)));
        }
        LOOP16(((void)y, _mm512_div_ps(one, _mm512_mul_ps(x, x))));
    }
    default: LOOP16(_mm512_div_ps(x, y));
    }
}

/* Both builds carry the AVX512-BF16 target so that direct_16 inlines, but
 * direct_512 never executes a BF16 instruction: hw is false in it. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"))) static void
direct_512(const bin_ctx *c, char *po, tpu_dtype odt, run_in a, run_in b, int64_t n) {
    direct_16(c, po, odt, a, b, n, false);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"))) static void
direct_512_hw(const bin_ctx *c, char *po, tpu_dtype odt, run_in a, run_in b, int64_t n) {
    direct_16(c, po, odt, a, b, n, true);
}
#endif

/* The ISA level of the direct loops for c's function on the running CPU:
 * AVX2 or AVX-512, or PORTABLE where they have no form for it. */
static tpu_isa direct_isa(const bin_ctx *c, run_in b) {
#if TPU_K_X86
    if (!has_vector_form(c, b))
        return TPU_ISA_PORTABLE;
    tpu_isa isa = tpu_kernels_get_isa();
    return isa >= TPU_ISA_AVX512 ? TPU_ISA_AVX512 : isa;
#else
    (void)c, (void)b;
    return TPU_ISA_PORTABLE;
#endif
}

/* Whether the direct loops read these operands as they are: out and
 * inputs f32 or bf16, and each input read without rounding (its dtype is
 * the one it goes through, or that is f32 and it widens exactly). */
static bool direct_dtypes(const bin_ctx *c, tpu_dtype odt, run_in a, run_in b, bool b_raw) {
#if TPU_K_X86
    const tpu_dtype bthrough = b_raw ? b.dt : c->common;
    return vector_dtype(odt) && vector_dtype(a.dt) && vector_dtype(b.dt) &&
           (a.dt == c->common || c->common == TPU_DTYPE_F32) &&
           (b.dt == bthrough || bthrough == TPU_DTYPE_F32);
#else
    (void)c, (void)odt, (void)a, (void)b, (void)b_raw;
    return false;
#endif
}

static void direct_run(tpu_isa isa, const bin_ctx *c, char *po, tpu_dtype odt, run_in a, run_in b,
                       int64_t n) {
#if TPU_K_X86
    if (isa >= TPU_ISA_AVX512 && odt == TPU_DTYPE_BF16 && tpu_k_bf16_cvt_ok())
        direct_512_hw(c, po, odt, a, b, n);
    else if (isa >= TPU_ISA_AVX512)
        direct_512(c, po, odt, a, b, n);
    else
        direct_avx2(c, po, odt, a, b, n);
#else
    (void)isa, (void)c, (void)po, (void)odt, (void)a, (void)b, (void)n;
#endif
}

/* The activation whose gradient fn is (g * act'(x)), computed on f32
 * chunks by tpu_vm_act_grad_f32 in place of the reference's f64 formula
 * (a few ulp from it, vecmath.h; 10-16x faster), or TPU_VM_ACT_COUNT. */
static tpu_vm_act grad_act_of(tpu_binary_fn fn) {
    switch (fn) {
    case TPU_BINARY_GELU_BACKWARD: return TPU_VM_ACT_GELU;
    case TPU_BINARY_GELU_TANH_BACKWARD: return TPU_VM_ACT_GELU_TANH;
    case TPU_BINARY_SILU_BACKWARD: return TPU_VM_ACT_SILU;
    default: return TPU_VM_ACT_COUNT;
    }
}

bool tpu_k_binary_uses_vecmath(tpu_binary_fn fn) {
    return grad_act_of(fn) != TPU_VM_ACT_COUNT;
}

/* A staged f32 run as len contiguous floats: itself, or its broadcast
 * value written out to buf. */
static const float *dense_run(run_in r, int64_t len, float *buf) {
    if (r.step != 0)
        return (const float *)r.p;
    const float v = *(const float *)r.p;
    for (int64_t i = 0; i < len; i++)
        buf[i] = v;
    return buf;
}

/* Computes n contiguous elements of out (dtype == common) at po: in one
 * pass where the direct loops take the run; else the operands are staged
 * through f32 chunks of EW_CHUNK (ew.h), computed by the direct loops on
 * f32 (or the portable loop) and each result rounded once on store. */
static void mixed_run(const bin_ctx *c, char *po, run_in a, run_in b, bool b_raw, int64_t n) {
    const tpu_dtype cm = c->common;
    const tpu_isa isa = direct_isa(c, b);
    if (isa != TPU_ISA_PORTABLE && direct_dtypes(c, cm, a, b, b_raw)) {
        direct_run(isa, c, po, cm, a, b, n);
        return;
    }
    /* Staged: the f32 chunks are always the direct loops' dtypes. */
    const tpu_vm_act act = tpu_kernels_get_isa() >= TPU_ISA_AVX2 ? grad_act_of(c->fn) : TPU_VM_ACT_COUNT;
    float abuf[TPU_K_EW_CHUNK], bbuf[TPU_K_EW_CHUNK], obuf[TPU_K_EW_CHUNK];
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        /* Load (convert) both inputs before the store: out may be in[0]. */
        run_in fa = {(const char *)tpu_k_ew_stage_f32(a.p + off * a.step * (int64_t)tpu_dtype_size(a.dt),
                                                      a.dt, a.step, len, cm, abuf),
                     TPU_DTYPE_F32, a.step};
        run_in fb = {(const char *)tpu_k_ew_stage_f32(b.p + off * b.step * (int64_t)tpu_dtype_size(b.dt),
                                                      b.dt, b.step, len, b_raw ? b.dt : cm, bbuf),
                     TPU_DTYPE_F32, b.step};
        float *dst = cm == TPU_DTYPE_F32 ? (float *)po + off : obuf;
        if (isa != TPU_ISA_PORTABLE)
            direct_run(isa, c, (char *)dst, TPU_DTYPE_F32, fa, fb, len);
        else if (act != TPU_VM_ACT_COUNT)
            /* A broadcast operand's buffer is free: its value is copied. */
            tpu_vm_act_grad_f32(act, dst, dense_run(fa, len, abuf), dense_run(fb, len, bbuf), len);
        else
            for (int64_t i = 0; i < len; i++)
                dst[i] = bin_f32(c, ((const float *)fa.p)[i * fa.step], ((const float *)fb.p)[i * fb.step]);
        if (cm != TPU_DTYPE_F32)
            tpu_k_cvt_from_f32(po + off * 2, cm, obuf, len);
    }
}

/* The -> bool functions over a flat run of f32 values (steps 1 or 0),
 * the function chosen once per chunk. */
#define CMP_LOOP(expr)                                                                             \
    for (int64_t i = 0; i < len; i++) {                                                            \
        const float x = fa[i * as], y = fb[i * bs];                                                \
        dst[i] = (uint8_t)(expr);                                                                  \
    }                                                                                              \
    break

static void cmp_chunk(tpu_binary_fn fn, uint8_t *dst, const float *fa, int64_t as, const float *fb,
                      int64_t bs, int64_t len) {
    switch (fn) {
    case TPU_BINARY_EQ: CMP_LOOP(x == y);
    case TPU_BINARY_NE: CMP_LOOP(x != y);
    case TPU_BINARY_LT: CMP_LOOP(x < y);
    case TPU_BINARY_LE: CMP_LOOP(x <= y);
    case TPU_BINARY_GT: CMP_LOOP(x > y);
    case TPU_BINARY_GE: CMP_LOOP(x >= y);
    case TPU_BINARY_LOGICAL_AND: CMP_LOOP(x != 0.0f && y != 0.0f);
    case TPU_BINARY_LOGICAL_OR: CMP_LOOP(x != 0.0f || y != 0.0f);
    default: CMP_LOOP((x != 0.0f) != (y != 0.0f)); /* LOGICAL_XOR */
    }
}

/* Comparisons and logical functions of f32/f16/bf16 operands into a dense
 * bool out, inputs laid out like it or broadcast scalars: staged through
 * f32 chunks as the arithmetic path is. */
static void cmp_flat(const bin_ctx *c, uint8_t *o, run_in a, run_in b, bool b_raw, int64_t n) {
    float abuf[TPU_K_EW_CHUNK], bbuf[TPU_K_EW_CHUNK];
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        const float *fa = tpu_k_ew_stage_f32(a.p + off * a.step * (int64_t)tpu_dtype_size(a.dt), a.dt,
                                             a.step, len, c->common, abuf);
        const float *fb = tpu_k_ew_stage_f32(b.p + off * b.step * (int64_t)tpu_dtype_size(b.dt), b.dt,
                                             b.step, len, b_raw ? b.dt : c->common, bbuf);
        cmp_chunk(c->fn, o + off, fa, a.step, fb, b.step, len);
    }
}

/* Integer and bool compute over runs staged through int64 chunks
 * (ew_stage.c), the function chosen once per chunk: the reference's
 * operations and wrapping, so the same bytes. DIV, REMAINDER and FMOD,
 * which can fail, are not taken (int_span_ok). */
#define INT_LOOP(expr)                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                              \
        const int64_t x = xs[i * as], y = ys[i * bs];                                              \
        const uint64_t ux = (uint64_t)x, uy = (uint64_t)y;                                         \
        (void)ux, (void)uy;                                                                        \
        o[i] = (expr);                                                                             \
    }                                                                                              \
    break

static void int_chunk(const bin_ctx *c, int64_t *o, const int64_t *xs, int64_t as, const int64_t *ys,
                      int64_t bs, int64_t n) {
    const tpu_dtype cm = c->common;
    if (tpu_k_ew_compute_of(cm) == EW_BOOL) {
        /* bin_bool on 0/1 values, as bit operations. */
        switch (c->fn) {
        case TPU_BINARY_ADD: {
            const int64_t keep = c->alpha.i != 0; /* a || (alpha && b) */
            INT_LOOP(x | (y & keep));
        }
        case TPU_BINARY_MAXIMUM:
        case TPU_BINARY_FMAX:
        case TPU_BINARY_BITWISE_OR:
        case TPU_BINARY_HEAVISIDE: INT_LOOP(x | y);
        case TPU_BINARY_BITWISE_XOR: INT_LOOP(x ^ y);
        default: INT_LOOP(x & y); /* MUL, MINIMUM, FMIN, BITWISE_AND */
        }
        return;
    }
    const uint64_t ual = (uint64_t)c->alpha.i;
    switch (c->fn) {
    case TPU_BINARY_ADD: INT_LOOP(tpu_k_u64_to_i64(ux + ual * uy));
    case TPU_BINARY_SUB: INT_LOOP(tpu_k_u64_to_i64(ux - ual * uy));
    case TPU_BINARY_MUL: INT_LOOP(tpu_k_u64_to_i64(ux * uy));
    case TPU_BINARY_BITWISE_AND: INT_LOOP(x & y);
    case TPU_BINARY_BITWISE_OR: INT_LOOP(x | y);
    case TPU_BINARY_BITWISE_XOR: INT_LOOP(x ^ y);
    default:
        for (int64_t i = 0; i < n; i++) {
            int64_t r = 0;
            (void)bin_i64(c, xs[i * as], ys[i * bs], &r); /* never fails: see int_span_ok */
            o[i] = r;
        }
        break;
    }
    /* Wrapped to common, as the reference stores them (a separate pass:
     * the loops above stay free of the width switch). */
    if (cm != TPU_DTYPE_I64)
        for (int64_t i = 0; i < n; i++)
            o[i] = tpu_k_ew_wrap(o[i], cm);
}
#undef INT_LOOP

/* The -> bool functions on int64 compute values into a bool run. */
static void int_cmp_chunk(tpu_binary_fn fn, uint8_t *o, const int64_t *xs, int64_t as,
                          const int64_t *ys, int64_t bs, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t x = xs[i * as], y = ys[i * bs];
        o[i] = (uint8_t)BIN_TO_BOOL(fn, x, y);
    }
}

/* Bool operands into a bool out (masks): bytes read as != 0 and written
 * 0 or 1, with no staging; the functions as int_chunk's bool loops and
 * BIN_TO_BOOL compute them. False for other dtypes. */
static bool bool_bytes_run(const bin_ctx *c, bool to_bool, uint8_t *o, tpu_dtype odt, run_in a,
                           run_in b, int64_t scalar, int64_t n) {
    /* The common dtype too: a bool tensor compared with the scalar 2
     * computes in int64, where 2 is not true. */
    if (odt != TPU_DTYPE_BOOL || a.dt != TPU_DTYPE_BOOL || (b.p != NULL && b.dt != TPU_DTYPE_BOOL) ||
        c->common != TPU_DTYPE_BOOL)
        return false;
    const uint8_t *x = (const uint8_t *)a.p;
    const uint8_t *y = b.p != NULL ? (const uint8_t *)b.p : NULL;
    const uint8_t ys0 = (uint8_t)(scalar != 0);
    const int64_t xs = a.step, ys = y != NULL ? b.step : 0;
    if (y == NULL)
        y = &ys0;
    tpu_binary_fn fn = c->fn;
    if (!to_bool) /* bin_bool's functions as their compare twins on 0/1 */
        fn = fn == TPU_BINARY_ADD ? (c->alpha.i != 0 ? TPU_BINARY_LOGICAL_OR : TPU_BINARY_COUNT)
             : fn == TPU_BINARY_MAXIMUM || fn == TPU_BINARY_FMAX || fn == TPU_BINARY_BITWISE_OR ||
                     fn == TPU_BINARY_HEAVISIDE
                 ? TPU_BINARY_LOGICAL_OR
             : fn == TPU_BINARY_BITWISE_XOR ? TPU_BINARY_LOGICAL_XOR
                                            : TPU_BINARY_LOGICAL_AND;
/* Unit steps and a broadcast second operand get loops of their own, so
 * that the compiler vectorises them (a step it cannot see defeats it). */
#define BYTE_LOOP_STEPS(expr, XS, YS)                                                              \
    for (int64_t i = 0; i < n; i++) {                                                              \
        const uint8_t p = x[i * (XS)] != 0, q = y[i * (YS)] != 0;                                  \
        (void)q;                                                                                   \
        o[i] = (uint8_t)(expr);                                                                    \
    }
#define BYTE_LOOP(expr)                                                                            \
    if (xs == 1 && ys == 1) {                                                                      \
        BYTE_LOOP_STEPS(expr, 1, 1)                                                                \
    } else if (xs == 1 && ys == 0) {                                                               \
        BYTE_LOOP_STEPS(expr, 1, 0)                                                                \
    } else {                                                                                       \
        BYTE_LOOP_STEPS(expr, xs, ys)                                                              \
    }                                                                                              \
    return true
    switch (fn) {
    case TPU_BINARY_COUNT: BYTE_LOOP(p); /* add with alpha 0: a */
    case TPU_BINARY_EQ: BYTE_LOOP(p == q);
    case TPU_BINARY_NE:
    case TPU_BINARY_LOGICAL_XOR: BYTE_LOOP(p != q);
    case TPU_BINARY_LT: BYTE_LOOP(p < q);
    case TPU_BINARY_LE: BYTE_LOOP(p <= q);
    case TPU_BINARY_GT: BYTE_LOOP(p > q);
    case TPU_BINARY_GE: BYTE_LOOP(p >= q);
    case TPU_BINARY_LOGICAL_OR: BYTE_LOOP(p | q);
    default: BYTE_LOOP(p & q); /* LOGICAL_AND */
    }
#undef BYTE_LOOP
#undef BYTE_LOOP_STEPS
}

/* Integer operands, common and out all of one integer dtype T (an index
 * tensor's arithmetic, a uint8 image's compare): the functions that wrap
 * in T's own width (add, sub, mul, the bitwise ones: their low bits do
 * not depend on the width they are computed in, so T's unsigned type
 * gives the reference's wrapped results) and the compares, without
 * staging. False for other records. */
#define SAME_INT_STEPS(expr, AS, BS)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                              \
        const same_ut x = (same_ut)xs[i * (AS)], y = (same_ut)ys[i * (BS)];                        \
        (void)x, (void)y;                                                                          \
        os[i] = (expr);                                                                            \
    }
#define SAME_INT_LOOP(expr)                                                                        \
    if (as == 1 && bs == 1) {                                                                      \
        SAME_INT_STEPS(expr, 1, 1)                                                                 \
    } else if (as == 1 && bs == 0) {                                                               \
        SAME_INT_STEPS(expr, 1, 0)                                                                 \
    } else {                                                                                       \
        SAME_INT_STEPS(expr, as, bs)                                                               \
    }                                                                                              \
    return true
#define SAME_INT_CMP_STEPS(OP, AS, BS)                                                             \
    for (int64_t i = 0; i < n; i++)                                                                \
        ob[i] = (uint8_t)(xs[i * (AS)] OP ys[i * (BS)]);
#define SAME_INT_CMP(OP)                                                                           \
    if (as == 1 && bs == 1) {                                                                      \
        SAME_INT_CMP_STEPS(OP, 1, 1)                                                               \
    } else if (as == 1 && bs == 0) {                                                               \
        SAME_INT_CMP_STEPS(OP, 1, 0)                                                               \
    } else {                                                                                       \
        SAME_INT_CMP_STEPS(OP, as, bs)                                                             \
    }                                                                                              \
    return true
#define SAME_INT_BODY(T, UT)                                                                       \
    {                                                                                              \
        typedef UT same_ut;                                                                        \
        const T sv = (T)scalar;                                                                    \
        const T *xs = (const T *)a.p, *ys = b.p != NULL ? (const T *)b.p : &sv;                    \
        const int64_t as = a.step, bs = b.p != NULL ? b.step : 0;                                  \
        T *os = (T *)po;                                                                           \
        uint8_t *ob = (uint8_t *)po;                                                               \
        const UT al = (UT)(uint64_t)c->alpha.i;                                                    \
        (void)os, (void)ob, (void)al;                                                              \
        switch (c->fn) {                                                                           \
        case TPU_BINARY_EQ: SAME_INT_CMP(==);                                                      \
        case TPU_BINARY_NE: SAME_INT_CMP(!=);                                                      \
        case TPU_BINARY_LT: SAME_INT_CMP(<);                                                       \
        case TPU_BINARY_LE: SAME_INT_CMP(<=);                                                      \
        case TPU_BINARY_GT: SAME_INT_CMP(>);                                                       \
        case TPU_BINARY_GE: SAME_INT_CMP(>=);                                                      \
        case TPU_BINARY_ADD: SAME_INT_LOOP((T)(UT)(x + (UT)(al * y)));                             \
        case TPU_BINARY_SUB: SAME_INT_LOOP((T)(UT)(x - (UT)(al * y)));                             \
        case TPU_BINARY_MUL: SAME_INT_LOOP((T)(UT)(x * y));                                        \
        case TPU_BINARY_BITWISE_AND: SAME_INT_LOOP((T)(UT)(x & y));                                \
        case TPU_BINARY_BITWISE_OR: SAME_INT_LOOP((T)(UT)(x | y));                                 \
        case TPU_BINARY_BITWISE_XOR: SAME_INT_LOOP((T)(UT)(x ^ y));                                \
        default: return false;                                                                     \
        }                                                                                          \
    }

static bool same_int_run(const bin_ctx *c, bool to_bool, char *po, tpu_dtype odt, run_in a, run_in b,
                         int64_t scalar, int64_t n) {
    const tpu_dtype cm = c->common;
    if (a.dt != cm || (b.p != NULL && b.dt != cm) || odt != (to_bool ? TPU_DTYPE_BOOL : cm))
        return false;
    if (to_bool && (c->fn < TPU_BINARY_EQ || c->fn > TPU_BINARY_GE))
        return false; /* the logical functions: int_run's compares */
    switch (cm) {
    case TPU_DTYPE_I8: SAME_INT_BODY(int8_t, uint8_t)
    case TPU_DTYPE_U8: SAME_INT_BODY(uint8_t, uint8_t)
    case TPU_DTYPE_I16: SAME_INT_BODY(int16_t, uint16_t)
    case TPU_DTYPE_I32: SAME_INT_BODY(int32_t, uint32_t)
    case TPU_DTYPE_I64: SAME_INT_BODY(int64_t, uint64_t)
    default: return false;
    }
}
#undef SAME_INT_BODY
#undef SAME_INT_CMP
#undef SAME_INT_CMP_STEPS
#undef SAME_INT_LOOP
#undef SAME_INT_STEPS

/* n elements of an integer- or bool-computed record: bool masks and
 * same-width integers in their own loops, else inputs staged through
 * int64, results wrapped to common and stored in out's dtype (or compared
 * into a bool out). `scalar` is the record's scalar operand in the
 * compute type, used for b when b.p is NULL. */
static void int_run(const bin_ctx *c, bool to_bool, char *po, tpu_dtype odt, run_in a, run_in b,
                    int64_t scalar, int64_t n) {
    if (bool_bytes_run(c, to_bool, (uint8_t *)po, odt, a, b, scalar, n) ||
        same_int_run(c, to_bool, po, odt, a, b, scalar, n))
        return;
    int64_t abuf[TPU_K_EW_CHUNK], bbuf[TPU_K_EW_CHUNK], obuf[TPU_K_EW_CHUNK];
    const int64_t es = (int64_t)tpu_dtype_size(odt);
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        const int64_t *x = tpu_k_ew_stage_i64(a.p + off * a.step * (int64_t)tpu_dtype_size(a.dt),
                                              a.dt, a.step, len, c->common, abuf);
        const int64_t *y =
            b.p == NULL ? &scalar
                        : tpu_k_ew_stage_i64(b.p + off * b.step * (int64_t)tpu_dtype_size(b.dt),
                                             b.dt, b.step, len, c->common, bbuf);
        const int64_t ys = b.p == NULL ? 0 : b.step;
        if (to_bool) {
            int_cmp_chunk(c->fn, (uint8_t *)po + off, x, a.step, y, ys, len);
            continue;
        }
        int_chunk(c, obuf, x, a.step, y, ys, len);
        tpu_k_ew_store_i64(po + off * es, odt, obuf, len);
    }
}

/* The f64 compute: inputs staged through f64 chunks as the reference
 * loads them, bin_f64 (or the compare) per element, out f64 (or bool). */
static void f64_run(const bin_ctx *c, bool to_bool, char *po, run_in a, run_in b, double scalar,
                    int64_t n) {
    double abuf[TPU_K_EW_CHUNK], bbuf[TPU_K_EW_CHUNK];
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        const double *x = tpu_k_ew_stage_f64(a.p + off * a.step * (int64_t)tpu_dtype_size(a.dt),
                                             a.dt, a.step, len, abuf);
        const double *y =
            b.p == NULL ? &scalar
                        : tpu_k_ew_stage_f64(b.p + off * b.step * (int64_t)tpu_dtype_size(b.dt),
                                             b.dt, b.step, len, bbuf);
        const int64_t xs = a.step, ys = b.p == NULL ? 0 : b.step;
        if (to_bool) {
            uint8_t *o = (uint8_t *)po + off;
            for (int64_t i = 0; i < len; i++)
                o[i] = (uint8_t)BIN_TO_BOOL(c->fn, x[i * xs], y[i * ys]);
            continue;
        }
        double *o = (double *)po + off;
        switch (c->fn) { /* the common ones without the per-element switch */
        case TPU_BINARY_MUL:
            for (int64_t i = 0; i < len; i++)
                o[i] = x[i * xs] * y[i * ys];
            break;
        case TPU_BINARY_ADD:
            if (c->alpha.f == 1.0) {
                for (int64_t i = 0; i < len; i++)
                    o[i] = x[i * xs] + y[i * ys];
                break;
            }
            /* fall through */
        default:
            for (int64_t i = 0; i < len; i++)
                o[i] = bin_f64(c, x[i * xs], y[i * ys]);
            break;
        }
    }
}

/* The flat run: out dense and each input laid out like it or one value.
 * Comparisons and logical functions into a bool out go through cmp_flat,
 * float-result functions with out in the common dtype through mixed_run;
 * integer and bool computes through int_run, the f64 compute through
 * f64_run (the compute type of the common dtype picks the run). */
typedef struct {
    bin_ctx c;
    float other; /* the record's scalar operand, as the reference reads it */
    bool cmp;    /* a -> bool function */
    bool b_raw;  /* b is read in its own dtype (b_opmath, or the scalar) */
    tpu_dtype a_dt, b_dt;
} binary_span_state;
TPU_K_SPAN_STATE_FITS(binary_span_state);

static void binary_span_run(const tpu_op_span *s, char *out, const char *const *in, int64_t n) {
    binary_span_state state;
    memcpy(&state, s->state, sizeof state); /* not through a cast: uint64_t storage */
    const binary_span_state *st = &state;
    const run_in a = {in[0], st->a_dt, s->step[0]};
    const tpu_dtype cm = st->c.common;
    const tpu_k_ew_compute k = tpu_k_ew_compute_of(cm);
    if (k != EW_F32) {
        /* b the tensor, or NULL for the record's scalar (in the compute type). */
        const run_in b = {s->n_in == 2 ? in[1] : NULL, st->b_dt, s->step[1]};
        const tpu_scalar other = s->op->p.ew.other;
        if (k == EW_F64)
            f64_run(&st->c, st->cmp, out, a, b, other.f, n);
        else
            int_run(&st->c, st->cmp, out, s->op->out.dtype, a, b,
                    k == EW_BOOL ? other.i != 0 : tpu_k_ew_wrap(other.i, cm), n);
        return;
    }
    const run_in b = s->n_in == 2 ? (run_in){in[1], st->b_dt, s->step[1]}
                                  : (run_in){(const char *)&st->other, TPU_DTYPE_F32, 0};
    if (st->cmp)
        cmp_flat(&st->c, (uint8_t *)out, a, b, st->b_raw, n);
    else
        mixed_run(&st->c, out, a, b, st->b_raw, n);
}

/* Whether out and every input are aligned to their element size (the
 * runs read and write them as typed arrays). */
static bool operands_aligned(const tpu_op *op) {
    return tpu_k_is_aligned(&op->out) && tpu_k_is_aligned(&op->in[0]) &&
           (op->n_in < 2 || tpu_k_is_aligned(&op->in[1]));
}

/* Whether the operands are ones the run loops read: an f32-computed
 * common dtype, inputs of any dtype (aligned; staged through f32 like the
 * reference loads them: a dropout's bool mask, an integer count), and a
 * float-result function with out in the common dtype, or a -> bool
 * function into a bool out. */
static bool run_operands_ok(const tpu_op *op, const bin_ctx *c, bool to_bool) {
    const tpu_tensor *o = &op->out;
    if (tpu_k_ew_compute_of(c->common) != EW_F32 || !operands_aligned(op))
        return false;
    return to_bool ? o->dtype == TPU_DTYPE_BOOL
                   : o->dtype == c->common && tpu_k_cvt_supported(o->dtype);
}

/* Whether int_run takes the record: an integer or bool compute, aligned
 * operands, a function that cannot fail, and a bool out for the -> bool
 * functions. */
static bool int_span_ok(const tpu_op *op, const bin_ctx *c, bool to_bool) {
    const tpu_k_ew_compute k = tpu_k_ew_compute_of(c->common);
    if ((k != EW_I64 && k != EW_BOOL) || !operands_aligned(op))
        return false;
    if (to_bool)
        return op->out.dtype == TPU_DTYPE_BOOL;
    return c->fn != TPU_BINARY_DIV && c->fn != TPU_BINARY_REMAINDER && c->fn != TPU_BINARY_FMOD;
}

/* Whether f64_run takes the record: the f64 compute, aligned operands,
 * out f64 (bool for the -> bool functions). */
static bool f64_span_ok(const tpu_op *op, const bin_ctx *c, bool to_bool) {
    return tpu_k_ew_compute_of(c->common) == EW_F64 &&
           op->out.dtype == (to_bool ? TPU_DTYPE_BOOL : TPU_DTYPE_F64) && operands_aligned(op);
}

bool tpu_k_binary_row_span(const tpu_op *op, tpu_op_span *s) {
    const tpu_k_fn_row *row = tpu_k_fn_row_of(op);
    if (row == NULL)
        return false;
    const bin_ctx c = bin_ctx_of(op);
    if (!int_span_ok(op, &c, row->to_bool) && !f64_span_ok(op, &c, row->to_bool) &&
        !run_operands_ok(op, &c, row->to_bool))
        return false;
    tpu_k_span_init(s, op, binary_span_run);
    const bool b_raw = op->p.ew.b_opmath;
    binary_span_state st = {
        c, b_raw ? (float)op->p.ew.other.f : tpu_k_round_to((float)op->p.ew.other.f, c.common),
        row->to_bool, b_raw || op->n_in == 1, op->in[0].dtype,
        op->n_in == 2 ? op->in[1].dtype : TPU_DTYPE_F32};
    memcpy(s->state, &st, sizeof st);
    return true;
}

bool tpu_k_binary_span(const tpu_op *op, tpu_op_span *s) {
    return tpu_k_binary_row_span(op, s) && tpu_k_span_flat_steps(op, s);
}
