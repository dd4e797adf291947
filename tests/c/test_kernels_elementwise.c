/* Element-wise kernel tests: every UNARY and BINARY function, for each
 * dtype its row takes, against expectations computed here (own formulas
 * in double with libm, own conversions and rounding from kernel_test.h),
 * on odd 2-d shapes in several layouts, with special values. Every op
 * runs in reference mode and in fast mode at every ISA level the machine
 * has, with nth 1 and 3, and all runs must give the same bytes.
 *
 * Tolerances are in ulps of the result dtype (the common dtype; ulps of
 * f16/bf16 for those), stated per function in the tables below:
 *   0   exact: the arithmetic, rounding, comparison, selection functions
 *       (one IEEE operation of the compute type, rounded once to common;
 *       the expectation is the exact result, rounded here);
 *   1   the transcendental functions, which the kernel evaluates in f64
 *       from the f32 value and rounds once (f16/bf16: 1 ulp of the 16-bit
 *       dtype, which absorbs the f32 step);
 *   2-3 formulas of a few f32 (or f64) operations in PyTorch's order;
 * plus, where the function's own formula is ill-conditioned, an absolute
 * term abs_k * eps(dtype) * mag with mag the magnitude of the terms that
 * cancel (e.g. 1 + erf(x) for x << 0 in gelu, 1 - y*y in tanh_backward).
 * NaN must match NaN, infinities exactly, and the sign of zero where the
 * function defines it (flag Z). Integer and bool results are exact. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel_test.h"

/* ------------------------------------------------------------ helpers */

enum { ROWS = 13, COLS = 37 };
#define K_PI 3.14159265358979323846

/* What a function takes as its common dtype (own copy of op.h's notes). */
enum { TK_FLOAT, TK_NOT_BOOL, TK_ANY, TK_INT_BOOL, TK_INT };

static bool takes(int tk, tpu_dtype dt) {
    bool f = t_is_float(dt), b = dt == BOOL;
    switch (tk) {
    case TK_FLOAT: return f;
    case TK_NOT_BOOL: return !b;
    case TK_ANY: return true;
    case TK_INT_BOOL: return !f;
    default: return !f && !b;
    }
}

static const char *dt_name(tpu_dtype dt) {
    static const char *n[] = {"f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "bool"};
    return n[dt];
}

/* Format of a float dtype: fraction bits, minimum normal exponent, max. */
static void fmt_of(tpu_dtype dt, int *mant, int *emin, double *maxf) {
    switch (dt) {
    case TPU_DTYPE_F64: *mant = 52; *emin = -1022; *maxf = DBL_MAX; return;
    case TPU_DTYPE_F16: *mant = 10; *emin = -14; *maxf = 65504.0; return;
    case TPU_DTYPE_BF16: *mant = 7; *emin = -126; *maxf = 0x1.fep127; return;
    default: *mant = 23; *emin = -126; *maxf = FLT_MAX; return;
    }
}

static double fmt_max(tpu_dtype dt) {
    int m, e;
    double x;
    fmt_of(dt, &m, &e, &x);
    return x;
}

/* x rounded to f32 (own rounding, to nearest even). */
static double rnd32(double x) {
    return t_round_fmt(x, 23, -126, FLT_MAX);
}

/* The exact value hi + lo (|lo| tiny against hi, as from TwoSum) rounded
 * correctly to f32: hi alone is right unless hi is exactly halfway
 * between two f32 values, where lo's sign decides. */
static double rnd32_2(double hi, double lo) {
    double q = rnd32(hi);
    if (lo == 0 || q == hi || !isfinite(hi) || isinf(q))
        return q;
    double q2 = 2 * hi - q; /* the other neighbour, if hi is a midpoint */
    if (q2 != q && rnd32(q2) == q2 && (lo > 0) == (q2 > hi))
        return q2;
    return q;
}

/* An exact result (hi + lo) computed in compute type of common cm and
 * rounded to cm: f64 as is; others f32 first, then f16/bf16. */
static double quant2(double hi, double lo, tpu_dtype cm) {
    if (cm == F64)
        return hi;
    double f = rnd32_2(hi, lo);
    if (cm == F16)
        return t_round_f16(f);
    if (cm == BF16)
        return t_round_bf16(f);
    return f;
}

/* a + b as hi + lo exactly (Knuth's TwoSum). */
static void two_sum(double a, double b, double *hi, double *lo) {
    double s = a + b, bb = s - a;
    *hi = s;
    *lo = isfinite(s) ? (a - (s - bb)) + (b - bb) : 0;
}

/* Float -> integer compute value of common cm, as PyTorch's CPU backend
 * converts (through int32 for i32/i16/i8, INT32_MIN out of range; through
 * int64 otherwise), then wrapped to cm. Own range tests. */
static int64_t f_to_int(double v, tpu_dtype cm) {
    int64_t r;
    if (cm == I32 || cm == I16 || cm == I8)
        r = isnan(v) || v >= 2147483648.0 || v <= -2147483649.0 ? INT32_MIN : (int64_t)trunc(v);
    else
        r = t_f2i(v);
    return t_wrap(r, cm);
}

/* Input element p (dtype dt) as the compute value of common cm. */
static double cv_f(const unsigned char *p, tpu_dtype dt, tpu_dtype cm) {
    if (cm == F64)
        return t_is_float(dt) ? t_read_f(p, dt) : (double)t_read_i(p, dt);
    double f = t_is_float(dt) ? (double)(float)t_read_f(p, dt) : (double)(float)t_read_i(p, dt);
    if (dt != cm)
        f = t_quant(f, cm);
    return f;
}

static int64_t cv_i(const unsigned char *p, tpu_dtype dt, tpu_dtype cm) {
    if (t_is_float(dt))
        return f_to_int(t_read_f(p, dt), cm);
    return t_wrap(t_read_i(p, dt), cm);
}

static bool cv_b(const unsigned char *p, tpu_dtype dt) {
    return t_is_float(dt) ? t_read_f(p, dt) != 0 : t_read_i(p, dt) != 0;
}

static void put_f(unsigned char *p, tpu_dtype dt, double v) {
    switch (dt) {
    case TPU_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case TPU_DTYPE_F64: memcpy(p, &v, 8); return;
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); return; }
    default: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    }
}

static void put_i(unsigned char *p, tpu_dtype dt, int64_t v) {
    uint64_t u = (uint64_t)v;
    switch (dt) {
    case TPU_DTYPE_I8:
    case TPU_DTYPE_U8: { uint8_t b = (uint8_t)u; memcpy(p, &b, 1); return; }
    case TPU_DTYPE_BOOL: { uint8_t b = v != 0; memcpy(p, &b, 1); return; }
    case TPU_DTYPE_I16: { uint16_t b = (uint16_t)u; memcpy(p, &b, 2); return; }
    case TPU_DTYPE_I32: { uint32_t b = (uint32_t)u; memcpy(p, &b, 4); return; }
    default: memcpy(p, &v, 8); return;
    }
}

static int int_bits(tpu_dtype dt) {
    return (int)t_size(dt) * 8;
}

/* ------------------------------------------------------------ buffers */

enum { LY_CONTIG, LY_TRANS, LY_NEG, LY_ODD, LY_ROW0, LY_COL0, LY_ALL0 };
static const char *ly_name[] = {"contig", "trans", "neg", "odd", "row-bcast", "col-bcast", "one"};

typedef struct {
    tpu_tensor t;
    unsigned char *alloc, *pristine;
    size_t bytes;
} buf;

/* A rows x cols tensor (ndim 2; ndim 0 when rows < 0) of dt in layout ly,
 * in a buffer of random bytes. */
static void buf_make(buf *b, tpu_dtype dt, int64_t rows, int64_t cols, int ly) {
    memset(b, 0, sizeof *b);
    size_t es = t_size(dt);
    b->t.dtype = dt;
    int64_t s0 = cols, s1 = 1, off = 0, span;
    if (rows < 0) {
        b->t.ndim = 0;
        span = 1;
    } else {
        b->t.ndim = 2;
        b->t.sizes[0] = rows;
        b->t.sizes[1] = cols;
        switch (ly) {
        case LY_TRANS: s0 = 1; s1 = rows; break;
        case LY_NEG: s0 = -cols; s1 = -1; break;
        case LY_ROW0: s0 = 0; break;
        case LY_COL0: s0 = 1; s1 = 0; break;
        case LY_ALL0: s0 = 0; s1 = 0; break;
        default: break;
        }
        b->t.strides[0] = s0;
        b->t.strides[1] = s1;
        int64_t lo = 0, hi = 0;
        int64_t sp0 = rows > 0 ? s0 * (rows - 1) : 0, sp1 = cols > 0 ? s1 * (cols - 1) : 0;
        lo += sp0 < 0 ? sp0 : 0;
        hi += sp0 > 0 ? sp0 : 0;
        lo += sp1 < 0 ? sp1 : 0;
        hi += sp1 > 0 ? sp1 : 0;
        off = -lo;
        span = hi - lo + 1;
    }
    size_t skew = ly == LY_ODD ? 1 : 0;
    b->bytes = (size_t)span * es + skew + 3; /* 3 tail bytes that nothing may write */
    b->alloc = malloc(b->bytes);
    b->pristine = malloc(b->bytes);
    for (size_t i = 0; i < b->bytes; i++)
        b->alloc[i] = (unsigned char)t_rand();
    b->t.data = b->alloc + skew + (size_t)off * es;
    b->t.storage = b->alloc;
    b->t.storage_nbytes = (int64_t)b->bytes;
}

static void buf_free(buf *b) {
    free(b->alloc);
    free(b->pristine);
}

static void buf_snap(buf *b) {
    memcpy(b->pristine, b->alloc, b->bytes);
}

/* ------------------------------------------------------ input values */

enum {
    DM_ANY,     /* [-8, 8] */
    DM_POS,     /* [0, 16] */
    DM_LOG1P,   /* [-1, 8] */
    DM_UNIT,    /* [-1, 1] */
    DM_GE1,     /* [1, 16] */
    DM_POWB,    /* [-3, 3] */
    DM_POWE,    /* half small integers [-4, 4], half [-3, 3] */
    DM_DIVISOR, /* +-[0.25, 8] (integers: non-zero) */
    DM_SIG,     /* [0, 1] */
    DM_SHIFT,   /* integers: shift counts [-2, bits + 2] */
    DM_IEXP,    /* integers: exponents [-3, 70] */
};

static double gen_f(int dom) {
    double u = t_unit();
    switch (dom) {
    case DM_POS: return u * 16;
    case DM_LOG1P: return -1 + u * 9;
    case DM_UNIT: return u * 2 - 1;
    case DM_GE1: return 1 + u * 15;
    case DM_POWB: return u * 6 - 3;
    case DM_POWE: return t_rand() % 2 ? (double)(int)(t_rand() % 9) - 4 : u * 6 - 3;
    case DM_DIVISOR: return (t_rand() % 2 ? -1 : 1) * (0.25 + u * 7.75);
    case DM_SIG: return u;
    default: return u * 16 - 8;
    }
}

static int64_t gen_i(int dom, tpu_dtype dt) {
    int64_t v = (int64_t)t_rand();
    switch (dom) {
    case DM_SHIFT: return (int64_t)(t_rand() % (uint64_t)(int_bits(dt) + 5)) - 2;
    case DM_IEXP: return (int64_t)(t_rand() % 74) - 3;
    case DM_DIVISOR: v = t_wrap(v, dt); return v == 0 ? 1 : v;
    default: return v;
    }
}

/* Special float values (stored in dt, so huge is dt's largest). */
static double special_f(tpu_dtype dt, int dom, int k, bool nohuge) {
    double mx = fmt_max(dt);
    int m, emin;
    double x;
    fmt_of(dt, &m, &emin, &x);
    double sub = ldexp(1.0, emin - m);
    const double list[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, nohuge ? 5.5 : mx,
                           nohuge ? -6.5 : -mx, nohuge ? 1e-3 : sub, 1.0, -1.0, 0.5, -2.5, 3.0, -3.0};
    const double unit[] = {1.0, -1.0, 1.5, -1.5, 0.0, -0.0, NAN, 0.96875, -0.99609375};
    if (dom == DM_UNIT && k % 3 == 0)
        return unit[(k / 3) % (sizeof unit / sizeof unit[0])];
    return list[k % (int)(sizeof list / sizeof list[0])];
}
enum { N_SPECIALS = 14 };

static int64_t special_i(tpu_dtype dt, int k) {
    int bits = int_bits(dt);
    int64_t mn = dt == U8 ? 0 : bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
    int64_t mx = dt == U8 ? 255 : bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    const int64_t list[] = {mn, mx, -1, 0, 1, 2, mn + 1, -2};
    return list[k % 8];
}

/* Fills every element of t (in logical order) from domain dom; element
 * e < n_fixed gets the special fixed[e] (an index), others a special with
 * probability 1/10. */
static void fill(tpu_tensor *t, int dom, const int *fixed, int64_t n_fixed, bool nohuge) {
    int64_t n = t_numel(t);
    tpu_dtype dt = t->dtype;
    if (!t_is_float(dt) && dom == DM_POWE)
        dom = DM_IEXP;
    for (int64_t e = 0; e < n; e++) {
        unsigned char *p = t_at(t, e);
        int k = e < n_fixed ? fixed[e] : t_rand() % 10 == 0 ? (int)(t_rand() % 64) : -1;
        if (t_is_float(dt))
            put_f(p, dt, k >= 0 ? special_f(dt, dom, k, nohuge) : gen_f(dom));
        else if (dt == BOOL)
            put_i(p, dt, (int64_t)(t_rand() & 1));
        else if (k >= 0 && dom != DM_SHIFT && dom != DM_IEXP && dom != DM_POWE)
            put_i(p, dt, dom == DM_DIVISOR && special_i(dt, k) == 0 ? 3 : special_i(dt, k));
        else
            put_i(p, dt, gen_i(dom, dt));
    }
}

/* --------------------------------------------------- function tables */

typedef struct {
    int fn;
    int tk;
    bool to_bool;
    int dom_a, dom_b;
    double tol, tol64; /* ulps: f32/f16/bf16 (f32 compute), f64 */
    double abs_k;      /* times eps(dtype) * mag */
    bool zsign;        /* the sign of a zero result is defined */
    bool nohuge;       /* multi-step formulas: no dtype-max nor subnormal inputs (an
                        * intermediate overflows or loses bits to underflow) */
} fspec;

#define U(fn, tk, dom, tol, tol64, absk, z) \
    {TPU_UNARY_##fn, tk, false, dom, 0, tol, tol64, absk, z, false}
#define UB(fn) {TPU_UNARY_##fn, TK_ANY, true, DM_ANY, 0, 0, 0, 0, false, false}

static const fspec k_un[] = {
    U(NEG, TK_NOT_BOOL, DM_ANY, 0, 0, 0, true),
    U(ABS, TK_NOT_BOOL, DM_ANY, 0, 0, 0, true),
    U(SIGN, TK_ANY, DM_ANY, 0, 0, 0, false),
    U(RECIPROCAL, TK_FLOAT, DM_ANY, 0, 0, 0, true),
    U(SQRT, TK_FLOAT, DM_POS, 0, 0, 0, true),
    U(RSQRT, TK_FLOAT, DM_POS, 1, 1, 0, false),
    U(EXP, TK_FLOAT, DM_ANY, 1, 1, 0, false),
    U(EXP2, TK_FLOAT, DM_ANY, 1, 1, 0, false),
    U(EXPM1, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(LOG, TK_FLOAT, DM_POS, 1, 1, 0, false),
    U(LOG2, TK_FLOAT, DM_POS, 1, 1, 0, false),
    U(LOG10, TK_FLOAT, DM_POS, 1, 1, 0, false),
    U(LOG1P, TK_FLOAT, DM_LOG1P, 1, 1, 0, true),
    U(SIN, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(COS, TK_FLOAT, DM_ANY, 1, 1, 0, false),
    /* tan: evaluated in f64 from the exact input and rounded once, so
     * even next to pi/2 one rounding is all there is. */
    U(TAN, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(ASIN, TK_FLOAT, DM_UNIT, 1, 1, 0, true),
    U(ACOS, TK_FLOAT, DM_UNIT, 1, 1, 0, false),
    U(ATAN, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(SINH, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(COSH, TK_FLOAT, DM_ANY, 1, 1, 0, false),
    U(TANH, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(ASINH, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(ACOSH, TK_FLOAT, DM_GE1, 1, 1, 0, false),
    U(ATANH, TK_FLOAT, DM_UNIT, 1, 1, 0, true),
    U(ERF, TK_FLOAT, DM_ANY, 1, 1, 0, true),
    U(ERFC, TK_FLOAT, DM_ANY, 1, 1, 0, false),
    /* erfinv near +-1 is ill-conditioned (erfinv' = sqrt(pi)/2 e^(x^2)):
     * an f64 evaluation through erf is good to eps * erfinv'(y) absolute. */
    U(ERFINV, TK_FLOAT, DM_UNIT, 1, 2, 2, true),
    U(FLOOR, TK_NOT_BOOL, DM_ANY, 0, 0, 0, true),
    U(CEIL, TK_NOT_BOOL, DM_ANY, 0, 0, 0, true),
    U(ROUND, TK_NOT_BOOL, DM_ANY, 0, 0, 0, true),
    U(TRUNC, TK_NOT_BOOL, DM_ANY, 0, 0, 0, true),
    U(FRAC, TK_FLOAT, DM_ANY, 0, 0, 0, true),
    U(SIGMOID, TK_FLOAT, DM_ANY, 1, 2, 0, false),
    U(RELU, TK_NOT_BOOL, DM_ANY, 0, 0, 0, false),
    /* gelu's 1 + erf(x / sqrt2) and gelu_tanh's 1 + tanh(u) cancel for
     * x << 0: PyTorch's formula is good to eps * |x| absolute there. */
    U(GELU, TK_FLOAT, DM_ANY, 1, 2, 1, false),
    U(GELU_TANH, TK_FLOAT, DM_ANY, 1, 2, 1, false),
    U(SILU, TK_FLOAT, DM_ANY, 1, 2, 0, false),
    U(MISH, TK_FLOAT, DM_ANY, 1, 3, 0, false),
    U(SOFTPLUS, TK_FLOAT, DM_ANY, 1, 2, 0, false),
    U(LEAKY_RELU, TK_FLOAT, DM_ANY, 0, 0, 0, true),
    U(ELU, TK_FLOAT, DM_ANY, 1, 3, 0, false),
    /* hardswish: three f32 roundings (x + 3, the product, / 6). */
    {TPU_UNARY_HARDSWISH, TK_FLOAT, false, DM_ANY, 0, 2, 2, 0, false, true},
    U(HARDSIGMOID, TK_FLOAT, DM_ANY, 1, 1, 0, false),
    U(CLAMP, TK_NOT_BOOL, DM_ANY, 0, 0, 0, false),
    U(NAN_TO_NUM, TK_FLOAT, DM_ANY, 0, 0, 0, true),
    UB(ISNAN),
    UB(ISINF),
    UB(ISPOSINF),
    UB(ISNEGINF),
    UB(LOGICAL_NOT),
    U(BITWISE_NOT, TK_INT_BOOL, DM_ANY, 0, 0, 0, false),
    {TPU_UNARY_SIGNBIT, TK_ANY, true, DM_ANY, 0, 0, 0, 0, false, false},
    /* sinc near its zeros and logit near 1/2 are good to eps absolute
     * (the rounding of pi x, of x / (1 - x)). */
    U(SINC, TK_FLOAT, DM_ANY, 1, 2, 2, false),
    U(LOGIT, TK_FLOAT, DM_SIG, 1, 2, 2, false),
    U(HARDSHRINK, TK_FLOAT, DM_ANY, 0, 0, 0, true),
    U(SOFTSHRINK, TK_FLOAT, DM_ANY, 0, 0, 0, false),
    U(ENTR, TK_FLOAT, DM_ANY, 1, 2, 0, false),
    /* The special functions: f64 methods good to a few ulps of the terms
     * that cancel (mag), references by other methods. Bessel functions of
     * huge arguments: only inf and NaN (the reference's quadrature needs
     * moderate ones). */
    U(LGAMMA, TK_FLOAT, DM_ANY, 1, 4, 2, false),
    U(DIGAMMA, TK_FLOAT, DM_ANY, 1, 16, 8, false),
    U(POLYGAMMA, TK_FLOAT, DM_ANY, 1, 64, 8, false),
    {TPU_UNARY_I0, TK_FLOAT, false, DM_ANY, 0, 1, 16, 0, false, true},
    {TPU_UNARY_I0E, TK_FLOAT, false, DM_ANY, 0, 1, 16, 0, false, true},
    {TPU_UNARY_I1, TK_FLOAT, false, DM_ANY, 0, 1, 16, 0, false, true},
    {TPU_UNARY_I1E, TK_FLOAT, false, DM_ANY, 0, 1, 16, 0, false, true},
};
_Static_assert(sizeof k_un / sizeof k_un[0] == TPU_UNARY_COUNT, "a row per unary function");

#define B(fn, tk, da, db, tol, tol64, absk, z, nh) \
    {TPU_BINARY_##fn, tk, false, da, db, tol, tol64, absk, z, nh}
#define BB(fn) {TPU_BINARY_##fn, TK_ANY, true, DM_ANY, DM_ANY, 0, 0, 0, false, false}

static const fspec k_bin[] = {
    B(ADD, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, true, false),
    B(SUB, TK_NOT_BOOL, DM_ANY, DM_ANY, 0, 0, 0, true, false),
    B(MUL, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, true, false),
    /* div: exact; abs_k only serves floor quotients past the dtype's
     * integers (mag = |q| there, else 0): PyTorch's steps, within an ulp. */
    B(DIV, TK_NOT_BOOL, DM_ANY, DM_DIVISOR, 0, 0, 1, true, false),
    B(MAXIMUM, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(MINIMUM, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(FMAX, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(FMIN, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(POW, TK_NOT_BOOL, DM_POWB, DM_POWE, 1, 1, 0, false, false),
    B(REMAINDER, TK_NOT_BOOL, DM_ANY, DM_DIVISOR, 0, 0, 0, false, false),
    B(FMOD, TK_NOT_BOOL, DM_ANY, DM_DIVISOR, 0, 0, 0, true, false),
    B(ATAN2, TK_FLOAT, DM_ANY, DM_ANY, 1, 1, 0, true, false),
    B(COPYSIGN, TK_FLOAT, DM_ANY, DM_ANY, 0, 0, 0, true, false),
    /* xlogy: log rounded to f32 (a relative 2^-24, up to an ulp of the
     * product), then the product rounded: 1.5 ulp. */
    B(XLOGY, TK_FLOAT, DM_ANY, DM_POS, 2, 2, 0, false, false),
    BB(EQ), BB(NE), BB(LT), BB(LE), BB(GT), BB(GE),
    BB(LOGICAL_AND), BB(LOGICAL_OR), BB(LOGICAL_XOR),
    B(BITWISE_AND, TK_INT_BOOL, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(BITWISE_OR, TK_INT_BOOL, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(BITWISE_XOR, TK_INT_BOOL, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(LSHIFT, TK_INT, DM_ANY, DM_SHIFT, 0, 0, 0, false, false),
    B(RSHIFT, TK_INT, DM_ANY, DM_SHIFT, 0, 0, 0, false, false),
    B(HYPOT, TK_FLOAT, DM_ANY, DM_ANY, 1, 2, 0, false, false), /* the reference scales: a few roundings */
    B(XLOG1PY, TK_FLOAT, DM_ANY, DM_LOG1P, 1, 2, 0, false, false),
    B(HEAVISIDE, TK_ANY, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(THRESHOLD, TK_NOT_BOOL, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    /* The backward formulas: a few f32 operations in PyTorch's order
     * (a * (1 - y) * y, a * (1 - y * y), ...), where 1 - y and 1 - y*y
     * cancel; mag is the size of the cancelling terms. */
    B(SIGMOID_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 2, 2, 1, false, true),
    B(TANH_BACKWARD, TK_FLOAT, DM_ANY, DM_UNIT, 2, 2, 1, false, true),
    B(GELU_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 1, 2, 1, false, false),
    B(GELU_TANH_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 1, 2, 1, false, false),
    B(SILU_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 1, 3, 1, false, false),
    B(MISH_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 1, 3, 1, false, false),
    B(LEAKY_RELU_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 0, 0, 0, true, false),
    B(HARDSWISH_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 2, 2, 1, false, true),
    B(HARDSIGMOID_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 1, 1, 0, false, false),
    /* softplus_backward: exp of the f32-rounded b * beta, then three f32
     * operations: relative error up to |b * beta| * eps. */
    B(SOFTPLUS_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 2, 2, 1, false, true),
    B(HARDTANH_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(SHRINK_BACKWARD, TK_FLOAT, DM_ANY, DM_ANY, 0, 0, 0, false, false),
    B(LOGIT_BACKWARD, TK_FLOAT, DM_ANY, DM_SIG, 1, 4, 0, false, false),
};
_Static_assert(sizeof k_bin / sizeof k_bin[0] == TPU_BINARY_COUNT, "a row per binary function");

/* ------------------------------------------------------- parameters */

/* Number of parameter sets of a function, and set k into op. */
static int n_params(bool binary, int fn, tpu_dtype cm) {
    bool f = t_is_float(cm);
    if (!binary) {
        switch (fn) {
        case TPU_UNARY_SOFTPLUS: return 3;
        case TPU_UNARY_LEAKY_RELU:
        case TPU_UNARY_ELU:
        case TPU_UNARY_NAN_TO_NUM: return 2;
        case TPU_UNARY_CLAMP: return f ? 8 : 4;
        case TPU_UNARY_LOGIT:
        case TPU_UNARY_SOFTSHRINK:
        case TPU_UNARY_HARDSHRINK: return 2;
        case TPU_UNARY_POLYGAMMA: return 3;
        default: return 1;
        }
    }
    switch (fn) {
    case TPU_BINARY_ADD:
    case TPU_BINARY_SUB: return 3;
    case TPU_BINARY_DIV: return f ? 3 : 2;
    case TPU_BINARY_THRESHOLD:
    case TPU_BINARY_LEAKY_RELU_BACKWARD:
    case TPU_BINARY_SOFTPLUS_BACKWARD:
    case TPU_BINARY_HARDTANH_BACKWARD:
    case TPU_BINARY_SHRINK_BACKWARD:
    case TPU_BINARY_LOGIT_BACKWARD: return 2;
    default: return 1;
    }
}

static tpu_scalar sc(double f, int64_t i) {
    return (tpu_scalar){f, i};
}

static void set_params(tpu_op *op, bool binary, int fn, tpu_dtype cm, int k) {
    tpu_scalar *a = op->p.ew.args;
    bool f = t_is_float(cm);
    op->p.ew.alpha = sc(1, 1);
    if (!binary) {
        switch (fn) {
        case TPU_UNARY_SOFTPLUS: {
            static const double bt[3][2] = {{1, 20}, {2, 5}, {0.5, 1}};
            a[0] = sc(bt[k][0], 0);
            a[1] = sc(bt[k][1], 0);
            break;
        }
        case TPU_UNARY_LEAKY_RELU: a[0] = sc(k ? 0.2 : 0.01, 0); break;
        case TPU_UNARY_ELU:
            a[0] = sc(k ? 0.7 : 1, 0);
            a[1] = sc(k ? 1.0507 : 1, 0);
            a[2] = sc(k ? 2 : 1, 0);
            break;
        case TPU_UNARY_LOGIT: a[0] = sc(k ? 0.125 : -1, 0); break;
        case TPU_UNARY_SOFTSHRINK:
        case TPU_UNARY_HARDSHRINK: a[0] = sc(k ? 1.5 : 0.5, 0); break;
        case TPU_UNARY_POLYGAMMA: a[0] = sc(0, k + 1); break;
        case TPU_UNARY_NAN_TO_NUM:
            if (k == 0) {
                double mx = fmt_max(cm);
                a[0] = sc(0, 0);
                a[1] = sc(mx, 0);
                a[2] = sc(-mx, 0);
            } else {
                a[0] = sc(0.5, 0);
                a[1] = sc(100, 0);
                a[2] = sc(-200, 0);
            }
            break;
        case TPU_UNARY_CLAMP:
            if (f) {
                /* which: below, above, both, both with a NaN lower bound,
                 * above with a NaN upper bound, both with lo > hi, below
                 * with a NaN lower bound, both with a NaN upper bound. */
                static const double lh[8][3] = {{-1.5, 0, 1},   {0, 2.25, 2}, {-1.5, 2.25, 3},
                                                {NAN, 2.25, 3}, {0, NAN, 2},  {1, -1, 3},
                                                {NAN, 0, 1},    {-1.5, NAN, 3}};
                a[0] = sc(lh[k][0], 0);
                a[1] = sc(lh[k][1], 0);
                a[2] = sc(0, (int64_t)lh[k][2]);
            } else {
                static const int64_t lh[4][3] = {{3, 0, 1}, {0, 100, 2}, {3, 100, 3}, {50, 10, 3}};
                a[0] = sc(0, lh[k][0]);
                a[1] = sc(0, lh[k][1]);
                a[2] = sc(0, lh[k][2]);
            }
            break;
        default: break;
        }
        return;
    }
    switch (fn) {
    case TPU_BINARY_ADD:
    case TPU_BINARY_SUB: {
        static const double al[3] = {1, 2.5, 0.1};
        static const int64_t ali[3] = {1, 3, -2};
        op->p.ew.alpha = cm == BOOL ? sc(k == 2 ? 0 : 1, k == 2 ? 0 : 1) : sc(al[k], ali[k]);
        break;
    }
    case TPU_BINARY_DIV:
        op->p.ew.rounding = f ? (tpu_rounding)k : (tpu_rounding)(k + 1);
        break;
    case TPU_BINARY_THRESHOLD:
        a[0] = k ? sc(0, 0) : sc(0.5, 3);
        a[1] = k ? sc(0, 0) : sc(-1.25, 42);
        break;
    case TPU_BINARY_LEAKY_RELU_BACKWARD: a[0] = sc(k ? 0.2 : 0.01, 0); break;
    case TPU_BINARY_SOFTPLUS_BACKWARD:
        a[0] = sc(k ? 2 : 1, 0);
        a[1] = sc(k ? 5 : 20, 0);
        break;
    case TPU_BINARY_HARDTANH_BACKWARD:
        a[0] = sc(k ? -0.5 : -1, 0);
        a[1] = sc(k ? 2 : 1, 0);
        break;
    case TPU_BINARY_SHRINK_BACKWARD: a[0] = sc(k ? 1.5 : 0.5, 0); break;
    case TPU_BINARY_LOGIT_BACKWARD: a[0] = sc(k ? 0.125 : -1, 0); break;
    default: break;
    }
}

/* ------------------------------------------------- expected results */

typedef struct {
    bool is_f;
    double hi, lo; /* float: exact result hi + lo (before rounding to common) */
    double mag;    /* size of cancelling terms, for abs_k */
    int64_t i;     /* integer / bool result */
    bool fixed;    /* hi is already the rounded value of common (no f32 step) */
    bool any;      /* no defined result (an infinite g times a factor that cancels to 0) */
} ex;

/* erf^-1 by bisection on erf (or erfc for y > 0.5, where 1 - y is exact). */
static double my_erfinv(double y) {
    if (isnan(y) || y > 1 || y < -1)
        return NAN;
    if (y == 1 || y == -1)
        return copysign(INFINITY, y);
    if (y == 0)
        return y;
    double ay = fabs(y), lo = 0, hi = 10;
    for (int i = 0; i < 200 && lo < hi; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid == lo || mid == hi)
            break;
        bool below = ay > 0.5 ? erfc(mid) > 1 - ay : erf(mid) < ay;
        if (below)
            lo = mid;
        else
            hi = mid;
    }
    return copysign(0.5 * (lo + hi), y);
}

static double my_softplus(double z) { /* log(1 + e^z), stable */
    return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
}

static double my_sigmoid(double x) {
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

/* digamma by recurrence up to x >= 30 and eight terms of the asymptotic
 * series; reflection through cos / sin. *mag: the size of the terms. */
static double ref_digamma(double x, double *mag) {
    *mag = 1;
    if (x == 0)
        return x == 0 && signbit(x) ? INFINITY : -INFINITY;
    if (isnan(x) || (x < 0 && x == floor(x)))
        return NAN;
    if (isinf(x))
        return INFINITY;
    double r = 0;
    if (x < 0) {
        double f = x - nearbyint(x); /* exact, and pi f accurate next to the poles */
        r = -K_PI * cos(K_PI * f) / sin(K_PI * f);
        *mag += fabs(r);
        x = 1 - x;
    }
    while (x < 30) {
        r -= 1 / x;
        *mag += 1 / x;
        x += 1;
    }
    double z = 1 / (x * x);
    double ser = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132)))));
    *mag += log(x);
    return r + log(x) - 0.5 / x - ser;
}

/* psi^(n)(x) = (-1)^(n+1) n! sum_k (x + k)^-(n+1): 400 terms directly,
 * then the Euler-Maclaurin tail (three corrections). *mag: n! times the
 * sum of the terms' sizes (below 0 they partly cancel the rest). */
static double ref_polygamma(int n, double x, double *mag) {
    *mag = 0;
    if (isnan(x))
        return x;
    if (x <= 0 && x == floor(x))
        return n % 2 ? INFINITY : -INFINITY; /* PyTorch: the sign times zeta's inf */
    if (isinf(x))
        return 0;
    double s = n + 1, sum = 0, size = 0, fact = 1;
    for (int i = 2; i <= n; i++)
        fact *= i;
    int k = 0;
    for (; k < 400; k++) {
        double t = pow(x + k, -s);
        sum += t;
        size += fabs(t);
    }
    double a = x + k;
    sum += pow(a, 1 - s) / (s - 1) + 0.5 * pow(a, -s) + s * pow(a, -s - 1) / 12 -
           s * (s + 1) * (s + 2) * pow(a, -s - 3) / 720;
    *mag = fact * size;
    return (n % 2 ? 1 : -1) * fact * sum;
}

/* I_nu(x) (times e^-|x| when scaled) by the trapezoid rule on
 * (1/pi) int_0^pi e^(x cos t) cos(nu t) dt, exact to f64 for a periodic
 * analytic integrand with enough points (|x| up to a few tens). */
static double ref_bessel_i(int nu, double x, bool scaled) {
    if (isnan(x))
        return x;
    if (isinf(x))
        return scaled ? (nu && x < 0 ? -0.0 : 0.0) : NAN; /* PyTorch's value at +-inf */
    /* The integrand as cosh (nu 0) or sinh(x cos t) cos t (nu 1): terms of
     * one sign, so the sum has no cancellation. */
    const int n = 256;
    double sum = 0, shift = scaled ? fabs(x) : 0;
    for (int i = 0; i <= n; i++) {
        double t = K_PI * i / n, w = (i == 0 || i == n) ? 0.5 : 1, c = cos(t);
        double ep = exp(x * c - shift), em = exp(-x * c - shift);
        sum += w * (nu ? 0.5 * (ep - em) * c : 0.5 * (ep + em));
    }
    return sum / n;
}

/* Unary float function of compute value x. */
static void ex_unary_f(int fn, double x, const tpu_scalar *a, tpu_dtype cm, ex *r) {
    double v = NAN;
    r->mag = 0;
    bool f32c = cm != F64;
    switch (fn) {
    case TPU_UNARY_NEG: v = -x; break;
    case TPU_UNARY_ABS: v = fabs(x); break;
    case TPU_UNARY_SIGN: v = isnan(x) ? 0 : x > 0 ? 1 : x < 0 ? -1 : 0; break;
    case TPU_UNARY_RECIPROCAL: v = 1 / x; break;
    case TPU_UNARY_SQRT: v = sqrt(x); break;
    case TPU_UNARY_RSQRT: v = x > 0 && isfinite(x) ? pow(x, -0.5) : 1 / sqrt(x); break;
    case TPU_UNARY_EXP: v = exp(x); break;
    case TPU_UNARY_EXP2: v = pow(2, x); break;
    case TPU_UNARY_EXPM1: v = expm1(x); break;
    case TPU_UNARY_LOG: v = log(x); break;
    case TPU_UNARY_LOG2: v = log2(x); break;
    case TPU_UNARY_LOG10: v = log10(x); break;
    case TPU_UNARY_LOG1P: v = log1p(x); break;
    case TPU_UNARY_SIN: v = sin(x); break;
    case TPU_UNARY_COS: v = cos(x); break;
    case TPU_UNARY_TAN: v = tan(x); break;
    case TPU_UNARY_ASIN: v = asin(x); break;
    case TPU_UNARY_ACOS: v = acos(x); break;
    case TPU_UNARY_ATAN: v = atan(x); break;
    case TPU_UNARY_SINH: v = sinh(x); break;
    case TPU_UNARY_COSH: v = cosh(x); break;
    case TPU_UNARY_TANH: v = tanh(x); break;
    case TPU_UNARY_ASINH: v = asinh(x); break;
    case TPU_UNARY_ACOSH: v = acosh(x); break;
    case TPU_UNARY_ATANH: v = atanh(x); break;
    case TPU_UNARY_ERF: v = erf(x); break;
    case TPU_UNARY_ERFC: v = erfc(x); break;
    case TPU_UNARY_ERFINV:
        v = my_erfinv(x);
        r->mag = isfinite(v) ? 0.886226925452758 * exp(v * v) : 0;
        break;
    case TPU_UNARY_FLOOR: v = floor(x); break;
    case TPU_UNARY_CEIL: v = ceil(x); break;
    case TPU_UNARY_ROUND: {
        if (!isfinite(x)) {
            v = x;
            break;
        }
        double f = floor(x), d = x - f; /* exact */
        v = d > 0.5 ? f + 1 : d < 0.5 ? f : fmod(f, 2) == 0 ? f : f + 1;
        if (v == 0)
            v = copysign(0, x);
        break;
    }
    case TPU_UNARY_TRUNC: v = trunc(x); break;
    case TPU_UNARY_FRAC: v = x - trunc(x); break;
    case TPU_UNARY_SIGMOID: v = my_sigmoid(x); break;
    case TPU_UNARY_RELU: v = isnan(x) ? x : x > 0 ? x : 0; break;
    case TPU_UNARY_GELU:
        v = x * 0.5 * erfc(-x / sqrt(2));
        r->mag = fabs(x);
        break;
    case TPU_UNARY_GELU_TANH: {
        double u = sqrt(2 / K_PI) * (x + 0.044715 * x * x * x);
        v = x / (1 + exp(-2 * u)); /* 0.5 x (1 + tanh u); NaN at -inf, as 0.5 x (1 + tanh u) */
        r->mag = fabs(x);
        break;
    }
    case TPU_UNARY_SILU: v = x * my_sigmoid(x); break;
    case TPU_UNARY_MISH: v = x * tanh(my_softplus(x)); break;
    case TPU_UNARY_SOFTPLUS: {
        double beta = a[0].f;
        v = x * beta > a[1].f ? x : my_softplus(beta * x) / beta;
        break;
    }
    case TPU_UNARY_LEAKY_RELU: {
        double s = f32c ? (double)(float)a[0].f : a[0].f;
        v = x > 0 ? x : x * s;
        break;
    }
    case TPU_UNARY_ELU:
        v = x > 0 ? a[1].f * x : a[1].f * a[0].f * expm1(a[2].f * x);
        if (isnan(x))
            v = x;
        break;
    case TPU_UNARY_HARDSWISH: v = x * fmin(fmax(x + 3, 0), 6) / 6; break;
    case TPU_UNARY_HARDSIGMOID: v = isnan(x) ? x : fmin(fmax(x + 3, 0), 6) / 6; break;
    case TPU_UNARY_CLAMP: {
        double lo = f32c ? (double)(float)a[0].f : a[0].f, hi = f32c ? (double)(float)a[1].f : a[1].f;
        v = x;
        if (!isnan(x)) {
            if (a[2].i & 1)
                v = isnan(lo) ? lo : v < lo ? lo : v;
            if (a[2].i & 2)
                v = isnan(hi) ? hi : v > hi ? hi : v;
        }
        break;
    }
    case TPU_UNARY_NAN_TO_NUM: {
        double c0 = a[0].f, c1 = a[1].f, c2 = a[2].f;
        if (f32c) {
            c0 = (float)c0;
            c1 = (float)c1;
            c2 = (float)c2;
        }
        v = isnan(x) ? c0 : x == INFINITY ? c1 : x == -INFINITY ? c2 : x;
        break;
    }
    case TPU_UNARY_SINC:
        v = x == 0 ? 1 : sin(K_PI * x) / (K_PI * x);
        r->mag = 1;
        break;
    case TPU_UNARY_LOGIT: {
        double z = x;
        if (a[0].f >= 0 && !isnan(x))
            z = fmin(fmax(x, a[0].f), 1 - a[0].f);
        v = log(z) - log1p(-z);
        r->mag = 1;
        break;
    }
    case TPU_UNARY_HARDSHRINK: {
        double l = f32c ? (double)(float)a[0].f : a[0].f;
        v = fabs(x) <= l ? 0 : x;
        break;
    }
    case TPU_UNARY_SOFTSHRINK: {
        double l = f32c ? (double)(float)a[0].f : a[0].f;
        v = isnan(x) ? x : x > l ? x - l : x < -l ? x + l : 0;
        break;
    }
    case TPU_UNARY_ENTR: v = isnan(x) ? x : x > 0 ? -x * log(x) : x == 0 ? 0 : -INFINITY; break;
    case TPU_UNARY_LGAMMA:
        v = lgamma(x);
        r->mag = 1;
        break;
    case TPU_UNARY_DIGAMMA: v = ref_digamma(x, &r->mag); break;
    case TPU_UNARY_POLYGAMMA:
        v = a[0].i == 0 ? ref_digamma(x, &r->mag) : ref_polygamma((int)a[0].i, x, &r->mag);
        break;
    case TPU_UNARY_I0: v = ref_bessel_i(0, x, false); break;
    case TPU_UNARY_I0E: v = ref_bessel_i(0, x, true); break;
    case TPU_UNARY_I1: v = ref_bessel_i(1, x, false); break;
    case TPU_UNARY_I1E: v = ref_bessel_i(1, x, true); break;
    default: break;
    }
    r->hi = v;
    r->lo = 0;
}

/* Floor of the exact quotient a / b (moderate quotients), PyTorch's
 * special cases: NaN for an infinite a, 0 or -1 for an infinite b. */
static double my_floor_div(double a, double b, double *mag, int mant) {
    *mag = 0;
    if (isnan(a) || isnan(b))
        return NAN;
    if (b == 0)
        return a / b;
    if (isinf(a))
        return NAN;
    if (isinf(b))
        return a == 0 || (a < 0) == (b < 0) ? copysign(0, a / b) : -1;
    double q = a / b, f = floor(q);
    if (fabs(q) < 0x1p52) {
        /* Exact correction with one-rounding residuals a - f * b. */
        double r0 = fma(-f, b, a);
        if (r0 != 0 && (r0 < 0) != (b < 0))
            f -= 1;
        else {
            double r1 = fma(-(f + 1), b, a);
            if (r1 == 0 || (r1 < 0) == (b < 0))
                f += 1;
        }
    }
    /* Past the dtype's integer range the result is the quotient rounded
     * by PyTorch's steps: within an ulp. */
    if (fabs(q) >= ldexp(1.0, mant))
        *mag = fabs(q);
    if (f == 0)
        f = copysign(0, q);
    return f;
}

/* Binary float function of compute values x, y. step_dt: the dtype of the
 * steps of rounded f16/bf16 division (common, or f32 for a scalar b). */
static void ex_binary_f(int fn, double x, double y, const tpu_op *op, tpu_dtype cm,
                        tpu_dtype step_dt, ex *r) {
    const tpu_scalar *a = op->p.ew.args;
    bool f32c = cm != F64;
    double v = NAN, lo = 0;
    r->mag = 0;
    int mant, emin;
    double mx;
    fmt_of(step_dt, &mant, &emin, &mx);
    switch (fn) {
    case TPU_BINARY_ADD:
    case TPU_BINARY_SUB: {
        double al = op->p.ew.alpha.f;
        if (fn == TPU_BINARY_SUB)
            al = -al;
        if (f32c) {
            double p = (double)(float)al * y; /* exact: 24 x 24 bits */
            two_sum(x, p, &v, &lo);
        } else {
            v = al == 1 ? x + y : al == -1 ? x - y : fma(al, y, x);
        }
        break;
    }
    case TPU_BINARY_MUL: v = x * y; break;
    case TPU_BINARY_DIV: {
        tpu_rounding rd = op->p.ew.rounding;
        if (rd == TPU_ROUND_NONE)
            v = x / y;
        else if (rd == TPU_ROUND_TRUNC)
            v = trunc(step_dt == F64 ? x / y : t_quant(x / y, step_dt)); /* trunc of the rounded quotient */
        else
            v = my_floor_div(x, y, &r->mag, mant);
        if (rd != TPU_ROUND_NONE)
            r->fixed = step_dt != F32 && step_dt != F64;
        if (r->fixed && !isnan(v))
            v = t_quant(v, cm);
        break;
    }
    case TPU_BINARY_MAXIMUM: v = isnan(x) || isnan(y) ? NAN : x > y ? x : y; break;
    case TPU_BINARY_MINIMUM: v = isnan(x) || isnan(y) ? NAN : x < y ? x : y; break;
    case TPU_BINARY_FMAX: v = isnan(x) ? y : isnan(y) ? x : x > y ? x : y; break;
    case TPU_BINARY_FMIN: v = isnan(x) ? y : isnan(y) ? x : x < y ? x : y; break;
    case TPU_BINARY_POW:
        /* A scalar exponent of 3, -2 (two roundings in the compute type)
         * or -0.5 (sqrt, then a division) is PyTorch's arithmetic form;
         * 2, 0.5 and -1 are one rounding, as pow() is. */
        if (op->n_in == 1 && (y == 3 || y == -2 || y == -0.5)) {
            if (cm == F64) {
                v = y == 3 ? (x * x) * x : y == -2 ? 1 / (x * x) : 1 / sqrt(x);
            } else {
                float xf = (float)x;
                v = y == 3 ? (float)(xf * xf) * xf : y == -2 ? 1.0f / (xf * xf) : 1.0f / sqrtf(xf);
            }
            r->fixed = true;
        } else {
            v = pow(x, y);
        }
        break;
    case TPU_BINARY_REMAINDER: {
        double m = fmod(x, y);
        if (m != 0 && (m < 0) != (y < 0))
            two_sum(m, y, &v, &lo);
        else
            v = m;
        if (!f32c)
            lo = 0;
        break;
    }
    case TPU_BINARY_FMOD: v = fmod(x, y); break;
    case TPU_BINARY_ATAN2: v = atan2(x, y); break;
    case TPU_BINARY_COPYSIGN: v = copysign(x, y); break;
    case TPU_BINARY_XLOGY: v = isnan(y) ? y : x == 0 ? 0 : x * log(y); break;
    case TPU_BINARY_THRESHOLD: {
        double th = f32c ? (double)(float)a[0].f : a[0].f, val = f32c ? (double)(float)a[1].f : a[1].f;
        v = x <= th ? val : y;
        break;
    }
    case TPU_BINARY_SIGMOID_BACKWARD:
        v = x * (1 - y) * y;
        r->mag = fabs(x) * (1 + fabs(y)) * fabs(y);
        break;
    case TPU_BINARY_TANH_BACKWARD:
        v = x * (1 - y) * (1 + y);
        r->mag = fabs(x) * (1 + y * y);
        break;
    case TPU_BINARY_GELU_BACKWARD: {
        double cdf = 0.5 * erfc(-y / sqrt(2)), pdf = exp(-0.5 * y * y) / sqrt(2 * K_PI);
        v = x * (cdf + y * pdf);
        r->mag = fabs(x) * (1 + fabs(y));
        break;
    }
    case TPU_BINARY_GELU_TANH_BACKWARD: {
        double k = sqrt(2 / K_PI), u = k * (y + 0.044715 * y * y * y), t = tanh(u);
        double half1pt = 1 / (1 + exp(-2 * u)); /* 0.5 (1 + t) */
        double sech2 = 1 - t * t;
        if (fabs(u) < 20)
            sech2 = 1 / (cosh(u) * cosh(u));
        double dscale = 0.5 * y * k * (1 + 3 * 0.044715 * y * y), dright = dscale * sech2;
        v = x * (half1pt + dright);
        /* 1 + t and 1 - t*t cancel for y << 0: their terms times the
         * factors they meet. */
        r->mag = fabs(x) * (1 + fabs(dscale));
        /* There the formula's factor may come out exactly 0: inf * 0. */
        r->any = isinf(x) && fabs(half1pt + dright) <= 0x1p-50 * (1 + fabs(dscale));
        break;
    }
    case TPU_BINARY_SILU_BACKWARD: {
        double s = my_sigmoid(y);
        v = x * s * (1 + y * (1 - s));
        r->mag = fabs(x) * s * (1 + fabs(y));
        break;
    }
    case TPU_BINARY_MISH_BACKWARD: {
        double sp = my_softplus(y), t = tanh(sp), s = my_sigmoid(y);
        v = x * (t + y * s * (1 - t * t));
        r->mag = fabs(x) * (1 + fabs(y));
        break;
    }
    case TPU_BINARY_LEAKY_RELU_BACKWARD: { /* a = x, b = g (PyTorch's operand order) */
        double s = f32c ? (double)(float)a[0].f : a[0].f;
        v = x > 0 ? y : y * s;
        break;
    }
    case TPU_BINARY_HARDSWISH_BACKWARD:
        /* As PyTorch's vector form: both ends closed, a NaN y gives NaN. */
        v = y <= -3 ? 0 : y >= 3 ? x : x * (y / 3 + 0.5);
        r->mag = fabs(x) * (fabs(y) / 3 + 0.5);
        break;
    case TPU_BINARY_HARDSIGMOID_BACKWARD: v = y > -3 && y < 3 ? x / 6 : 0; break;
    case TPU_BINARY_SOFTPLUS_BACKWARD: {
        double beta = f32c ? (double)(float)a[0].f : a[0].f, bb = y * beta;
        if (f32c)
            bb = rnd32(bb);
        v = bb > (f32c ? (double)(float)a[1].f : a[1].f) ? x : x * my_sigmoid(y * beta);
        r->mag = fabs(x) * fabs(y * beta);
        break;
    }
    case TPU_BINARY_HARDTANH_BACKWARD: /* as PyTorch's vector form: NaN y or bound gives 0 */
        v = y > a[0].f && y < a[1].f ? x : 0;
        break;
    case TPU_BINARY_HYPOT: {
        double m = fmax(fabs(x), fabs(y)); /* scaled: no overflow of the squares */
        v = isinf(x) || isinf(y) ? INFINITY : isnan(x) || isnan(y) ? NAN : m == 0 ? 0 : m * sqrt((x / m) * (x / m) + (y / m) * (y / m));
        break;
    }
    case TPU_BINARY_XLOG1PY: v = isnan(y) ? y : x == 0 ? 0 : x * log1p(y); break;
    case TPU_BINARY_HEAVISIDE: v = x == 0 ? y : x > 0 ? 1 : 0; break;
    case TPU_BINARY_SHRINK_BACKWARD: {
        double l = f32c ? (double)(float)a[0].f : a[0].f;
        v = fabs(y) <= l ? 0 : x;
        break;
    }
    case TPU_BINARY_LOGIT_BACKWARD:
        if (a[0].f < 0)
            v = y < 0 || y > 1 ? NAN : x / (y * (1 - y));
        else
            v = y < a[0].f || y > 1 - a[0].f ? 0 : x / (y * (1 - y));
        break;
    default: break;
    }
    r->hi = v;
    r->lo = lo;
}

static int64_t ex_unary_i(int fn, int64_t x, const tpu_scalar *a, tpu_dtype cm) {
    uint64_t u = (uint64_t)x;
    int64_t v = x;
    switch (fn) {
    case TPU_UNARY_NEG: v = (int64_t)(0 - u); break;
    case TPU_UNARY_ABS: v = x < 0 ? (int64_t)(0 - u) : x; break;
    case TPU_UNARY_SIGN: v = x > 0 ? 1 : x < 0 ? -1 : 0; break;
    case TPU_UNARY_RELU: v = x < 0 ? 0 : x; break;
    case TPU_UNARY_CLAMP:
        if (a[2].i & 1)
            v = v < a[0].i ? a[0].i : v;
        if (a[2].i & 2)
            v = v > a[1].i ? a[1].i : v;
        break;
    case TPU_UNARY_BITWISE_NOT: v = (int64_t)(u ^ UINT64_MAX); break;
    default: break; /* floor, ceil, round, trunc: integers are whole */
    }
    return t_wrap(v, cm);
}

static bool ex_to_bool_un(int fn, double x) {
    switch (fn) {
    case TPU_UNARY_ISNAN: return isnan(x);
    case TPU_UNARY_ISINF: return isinf(x);
    case TPU_UNARY_ISPOSINF: return isinf(x) && x > 0;
    case TPU_UNARY_ISNEGINF: return isinf(x) && x < 0;
    case TPU_UNARY_SIGNBIT: return signbit(x);
    default: return x == 0;
    }
}

static bool ex_to_bool_bin(int fn, double x, double y) {
    switch (fn) {
    case TPU_BINARY_EQ: return x == y;
    case TPU_BINARY_NE: return !(x == y);
    case TPU_BINARY_LT: return x < y;
    case TPU_BINARY_LE: return x <= y;
    case TPU_BINARY_GT: return x > y;
    case TPU_BINARY_GE: return x >= y;
    case TPU_BINARY_LOGICAL_AND: return x != 0 && y != 0;
    case TPU_BINARY_LOGICAL_OR: return x != 0 || y != 0;
    default: return (x != 0) != (y != 0);
    }
}

static bool ex_to_bool_bin_i(int fn, int64_t x, int64_t y) {
    switch (fn) {
    case TPU_BINARY_EQ: return x == y;
    case TPU_BINARY_NE: return x != y;
    case TPU_BINARY_LT: return x < y;
    case TPU_BINARY_LE: return x <= y;
    case TPU_BINARY_GT: return x > y;
    case TPU_BINARY_GE: return x >= y;
    case TPU_BINARY_LOGICAL_AND: return x != 0 && y != 0;
    case TPU_BINARY_LOGICAL_OR: return x != 0 || y != 0;
    default: return (x != 0) != (y != 0);
    }
}

/* Integer binary; false for a zero divisor. */
static bool ex_binary_i(int fn, int64_t x, int64_t y, const tpu_op *op, tpu_dtype cm, int64_t *out) {
    uint64_t ux = (uint64_t)x, uy = (uint64_t)y, al = (uint64_t)op->p.ew.alpha.i;
    const tpu_scalar *a = op->p.ew.args;
    int bits = int_bits(cm);
    int64_t v = 0;
    switch (fn) {
    case TPU_BINARY_ADD: v = (int64_t)(ux + al * uy); break;
    case TPU_BINARY_SUB: v = (int64_t)(ux - al * uy); break;
    case TPU_BINARY_MUL: v = (int64_t)(ux * uy); break;
    case TPU_BINARY_MAXIMUM:
    case TPU_BINARY_FMAX: v = x > y ? x : y; break;
    case TPU_BINARY_MINIMUM:
    case TPU_BINARY_FMIN: v = x < y ? x : y; break;
    case TPU_BINARY_POW:
        if (y < 0)
            v = x == 1 ? 1 : x == -1 ? (y % 2 ? -1 : 1) : 0;
        else {
            uint64_t p = 1;
            for (int64_t k = 0; k < y; k++)
                p *= ux;
            v = (int64_t)p;
        }
        break;
    case TPU_BINARY_BITWISE_AND: v = x & y; break;
    case TPU_BINARY_BITWISE_OR: v = x | y; break;
    case TPU_BINARY_BITWISE_XOR: v = x ^ y; break;
    case TPU_BINARY_LSHIFT: v = y < 0 || y >= bits ? 0 : (int64_t)(ux * ((uint64_t)1 << y)); break;
    case TPU_BINARY_RSHIFT:
        if (y < 0 || y >= bits || y == 63)
            v = x < 0 ? -1 : 0;
        else {
            int64_t d = (int64_t)1 << y, q = x / d;
            v = x % d != 0 && x < 0 ? q - 1 : q;
        }
        break;
    case TPU_BINARY_THRESHOLD: v = x <= a[0].i ? a[1].i : y; break;
    case TPU_BINARY_HEAVISIDE: v = x == 0 ? y : x > 0; break;
    default:
        if (y == 0)
            return false;
        if (y == -1)
            v = fn == TPU_BINARY_DIV ? (int64_t)(0 - ux) : 0;
        else {
            int64_t q = x / y, m = x % y;
            bool diff = m != 0 && (m < 0) != (y < 0);
            if (fn == TPU_BINARY_DIV)
                v = op->p.ew.rounding == TPU_ROUND_FLOOR && diff ? q - 1 : q;
            else if (fn == TPU_BINARY_REMAINDER)
                v = diff ? m + y : m;
            else
                v = m;
        }
        break;
    }
    *out = t_wrap(v, cm);
    return true;
}

static bool ex_binary_b(int fn, bool x, bool y, const tpu_op *op) {
    switch (fn) {
    case TPU_BINARY_ADD: return x || (op->p.ew.alpha.i != 0 && y);
    case TPU_BINARY_MUL:
    case TPU_BINARY_MINIMUM:
    case TPU_BINARY_FMIN:
    case TPU_BINARY_BITWISE_AND: return x && y;
    case TPU_BINARY_MAXIMUM:
    case TPU_BINARY_FMAX:
    case TPU_BINARY_BITWISE_OR: return x || y;
    case TPU_BINARY_BITWISE_XOR: return x != y;
    case TPU_BINARY_HEAVISIDE: return x ? true : y;
    default: return ex_to_bool_bin(fn, x, y);
    }
}

/* ------------------------------------------------------ comparison */

typedef struct {
    double tol, abs_k;
    bool zsign;
} tolspec;

static double ulp_of(double v, tpu_dtype dt) {
    int mant, emin;
    double mx;
    fmt_of(dt, &mant, &emin, &mx);
    int e = v == 0 || !isfinite(v) ? emin : ilogb(v);
    if (e < emin)
        e = emin;
    return ldexp(1.0, e - mant);
}

/* Whether got (a value of float dtype dt, the common) matches the
 * expectation. */
static bool match_f(double got, const ex *x, tpu_dtype dt, const tolspec *ts) {
    double q = x->fixed ? x->hi : quant2(x->hi, x->lo, dt);
    if (x->any)
        return true;
    if (isnan(q) || isnan(got))
        return isnan(q) && isnan(got);
    if (ts->zsign && q == 0 && got == 0 && signbit(q) != signbit(got))
        return false;
    if (got == q)
        return true;
    if (ts->tol == 0 && (ts->abs_k == 0 || x->mag == 0))
        return false;
    double e = x->hi + x->lo;
    double mx = fmt_max(dt);
    if (isinf(q) || isinf(got)) {
        /* Only next to overflow may one side be infinite. */
        double fin = isinf(got) ? q : got;
        return !isinf(fin) && isinf(e) == 0 && fabs(e) >= mx * (1 - (ts->tol + 1) * t_eps(dt)) &&
               signbit(got) == signbit(q);
    }
    double allow = ts->tol * ulp_of(e, dt) + ts->abs_k * t_eps(dt) * x->mag;
    return fabs(got - e) <= allow;
}

/* ------------------------------------------------------------ runner */

/* A way to run an op: reference or fast at an ISA level, in nth shares,
 * or (span) as its flat run (tpu_op_span_of) called on uneven chunks, as
 * fused mode calls it; an op without a flat run runs whole then. */
typedef struct {
    bool ref, ok;
    int isa, nth;
    bool span;
} way;

static int n_ways(way *w) {
    int n = 0;
    w[n++] = (way){true, true, TPU_ISA_COUNT - 1, 1, false};
    w[n++] = (way){true, true, TPU_ISA_COUNT - 1, 3, false};
    for (int isa = 0; isa <= (int)tpu_kernels_best_isa(); isa++) {
        w[n++] = (way){false, true, isa, 1, false};
        w[n++] = (way){false, true, isa, 3, false};
        w[n++] = (way){false, true, isa, 1, true};
    }
    return n;
}

static const char *way_name(const way *w) {
    static char s[64];
    snprintf(s, sizeof s, "%s%s nth=%d%s", w->ref ? "ref" : "fast/", w->ref ? "" : tpu_isa_name(w->isa),
             w->nth, w->span ? " span" : "");
    return s;
}

static int g_spans; /* ops run as flat runs */

/* Runs op's flat run over its elements in chunks of 1, 2, 3, ... 40
 * elements in turn (what fused mode's tiles and chunks do), or, without
 * one, the op whole. */
static tpu_status run_span_chunks(const tpu_op *op) {
    tpu_op_span s;
    if (!tpu_op_span_of(op, &s))
        return run_shares(op, 1);
    g_spans++;
    const int64_t n = t_numel(&op->out);
    for (int64_t i = 0, len = 1; i < n; i += len, len = len % 40 + 1) {
        if (len > n - i)
            len = n - i;
        const char *in[3] = {NULL, NULL, NULL};
        for (int k = 0; k < s.n_in; k++)
            in[k] = (const char *)op->in[k].data + i * s.step[k] * s.in_size[k];
        s.run(&s, (char *)op->out.data + i * s.out_size, in, len);
    }
    return TPU_OK;
}

static int g_cases;

/* Runs op every way; checks each run's elements against want (float:
 * tolerance ts in out's dtype), that bytes outside out's view are
 * untouched, and that every run gives the same bytes. inputs[] are the
 * buffers to restore before each run (out may be one of them). */
static void run_all(const char *label, const tpu_op *op, buf *outb, buf **ins, int n_ins,
                    const ex *want, const tolspec *ts, const tpu_op *print_in) {
    way w[2 + 3 * TPU_ISA_COUNT];
    int nw = n_ways(w);
    int64_t n = t_numel(&op->out);
    size_t es = t_size(op->out.dtype);
    bool inplace = false;
    for (int i = 0; i < n_ins; i++)
        inplace = inplace || ins[i] == outb;
    unsigned char *first = malloc(outb->bytes);
    /* Bytes of the view, to find the gaps. */
    unsigned char *inview = calloc(outb->bytes, 1);
    for (int64_t e = 0; e < n; e++)
        memset(inview + (t_at(&op->out, e) - outb->alloc), 1, es);
    g_cases++;
    /* Functions the fast path computes with vecmath.h (AVX2 and up): those
     * ways agree with each other bit for bit, and with the expectation to
     * vecmath's stated bound (2 ulp of f32, plus the rounding to a 16-bit
     * dtype), not with the reference's bytes. */
    const bool vm = (op->code == TPU_OP_UNARY && tpu_k_unary_uses_vecmath((tpu_unary_fn)op->fn)) ||
                    (op->code == TPU_OP_BINARY && tpu_k_binary_uses_vecmath((tpu_binary_fn)op->fn));
    tolspec vm_ts = *ts;
    if (vm) {
        vm_ts.tol = vm_ts.tol < 3 ? 3 : vm_ts.tol;     /* 2 ulp of f32 + the rounding of the check */
        vm_ts.abs_k = vm_ts.abs_k < 8 ? 8 : vm_ts.abs_k; /* composite forms (gelu, mish) cancel too */
    }
    unsigned char *first_vm = malloc(outb->bytes);
    int first_vm_k = -1;
    for (int k = 0; k < nw; k++) {
        for (int i = 0; i < n_ins; i++)
            memcpy(ins[i]->alloc, ins[i]->pristine, ins[i]->bytes);
        if (!inplace)
            memcpy(outb->alloc, outb->pristine, outb->bytes);
        tpu_kernels_set_reference(w[k].ref);
        tpu_kernels_set_isa((tpu_isa)w[k].isa);
        tpu_status st = w[k].span ? run_span_chunks(op) : run_shares(op, w[k].nth);
        tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
        tpu_kernels_set_reference(false);
        CHECK_OK(st);
        if (st != TPU_OK) {
            fprintf(stderr, "    %s [%s]\n", label, way_name(&w[k]));
            continue;
        }
        const bool in_vm_group = vm && !w[k].ref && w[k].isa >= TPU_ISA_AVX2 &&
                                 op->out.dtype != TPU_DTYPE_F64;
        int64_t bad = 0;
        for (int64_t e = 0; e < n; e++) {
            const unsigned char *p = t_at(&op->out, e);
            bool ok;
            double got = 0;
            if (want[e].is_f) {
                got = t_read_f(p, op->out.dtype);
                ok = match_f(got, &want[e], op->out.dtype, in_vm_group ? &vm_ts : ts);
            } else {
                ok = t_read_i(p, op->out.dtype) == want[e].i;
            }
            if (!ok && bad++ < 3) {
                fprintf(stderr, "    %s [%s] element %lld:", label, way_name(&w[k]), (long long)e);
                if (print_in)
                    for (int i = 0; i < print_in->n_in; i++)
                        fprintf(stderr, " in%d=%.9g", i,
                                t_read_f(t_at(&print_in->in[i], e), print_in->in[i].dtype));
                if (want[e].is_f)
                    fprintf(stderr, " got %.9g (%a), want %.9g (exact %.17g)\n", got, got,
                            want[e].fixed ? want[e].hi
                                          : quant2(want[e].hi, want[e].lo, op->out.dtype),
                            want[e].hi + want[e].lo);
                else
                    fprintf(stderr, " got %lld, want %lld\n", (long long)t_read_i(p, op->out.dtype),
                            (long long)want[e].i);
            }
        }
        CHECK(bad == 0);
        if (bad > 3)
            fprintf(stderr, "    %s [%s]: %lld elements wrong\n", label, way_name(&w[k]), (long long)bad);
        /* Gaps untouched. */
        bool gaps = true;
        for (size_t i = 0; i < outb->bytes; i++)
            if (!inview[i] && outb->alloc[i] != outb->pristine[i])
                gaps = false;
        CHECK(gaps);
        if (!gaps)
            fprintf(stderr, "    %s [%s]: wrote outside out's view\n", label, way_name(&w[k]));
        if (in_vm_group && first_vm_k < 0) {
            memcpy(first_vm, outb->alloc, outb->bytes);
            first_vm_k = k;
        } else if (in_vm_group) {
            CHECK(memcmp(first_vm, outb->alloc, outb->bytes) == 0);
        } else if (k == 0) {
            memcpy(first, outb->alloc, outb->bytes);
        } else {
            bool same = memcmp(first, outb->alloc, outb->bytes) == 0;
            CHECK(same);
            if (!same) {
                for (int64_t e = 0, shown = 0; e < n && shown < 3; e++) {
                    size_t at = (size_t)(t_at(&op->out, e) - outb->alloc);
                    if (memcmp(first + at, outb->alloc + at, es) != 0) {
                        shown++;
                        char wk[64];
                        snprintf(wk, sizeof wk, "%s", way_name(&w[k]));
                        fprintf(stderr, "    %s: [%s] differs from [%s] at element %lld: %.9g vs %.9g\n",
                                label, wk, way_name(&w[0]), (long long)e,
                                t_read_f(outb->alloc + at, op->out.dtype),
                                t_read_f(first + at, op->out.dtype));
                        if (print_in) {
                            fprintf(stderr, "     ");
                            for (int i = 0; i < print_in->n_in; i++) {
                                double v = t_read_f(t_at(&print_in->in[i], e), print_in->in[i].dtype);
                                fprintf(stderr, " in%d=%.9g%s", i, v, signbit(v) ? "(-)" : "");
                            }
                            fprintf(stderr, "\n");
                        }
                    }
                }
            }
        }
    }
    free(first);
    free(first_vm);
    free(inview);
}

/* Binary operand b's layout variants. */
enum { BL_SAME, BL_ROW0, BL_COL0, BL_ONE, BL_SCALAR };
static const char *bl_name[] = {"", " b:row-bcast", " b:col-bcast", " b:one", " b:scalar"};

/* One case: function spec s of the family, common = out = input dtype cm,
 * layout ly for inputs and out (LY_TRANS with out_contig: inputs only),
 * b layout bl, parameter set k. */
static void run_case(const fspec *s, bool binary, tpu_dtype cm, int ly, bool out_contig, int bl,
                     int k) {
    char label[160];
    const char *fname = tpu_op_fn_name(binary ? TPU_OP_BINARY : TPU_OP_UNARY, s->fn);
    snprintf(label, sizeof label, "%s %s %s%s%s p%d", fname, dt_name(cm), ly_name[ly],
             out_contig ? "->contig" : "", binary ? bl_name[bl] : "", k);
    buf a, b, o;
    buf_make(&a, cm, ROWS, COLS, ly);
    bool has_b = binary && bl != BL_SCALAR;
    int bly = bl == BL_ROW0 ? LY_ROW0 : bl == BL_COL0 ? LY_COL0 : bl == BL_ONE ? LY_ALL0 : ly;
    if (has_b)
        buf_make(&b, cm, ROWS, COLS, bly);
    /* Specials: unary: every special once up front; binary: the cross
     * product of the specials up front (a row-major walk). */
    int fa[N_SPECIALS * N_SPECIALS], fb[N_SPECIALS * N_SPECIALS];
    int64_t nfix = 0;
    if (!binary) {
        for (int i = 0; i < N_SPECIALS + 9; i++)
            fa[nfix++] = i;
    } else {
        for (int i = 0; i < N_SPECIALS; i++)
            for (int j = 0; j < N_SPECIALS; j++) {
                fa[nfix] = i;
                fb[nfix++] = j;
            }
    }
    fill(&a.t, s->dom_a, fa, nfix, s->nohuge);
    if (has_b) {
        fill(&b.t, s->dom_b, fb, bly == ly ? nfix : 0, s->nohuge);
        /* Ties: some elements of b equal to a's (b laid out like a). */
        if (bly == ly)
            for (int64_t e = nfix; e < t_numel(&a.t); e++)
                if (t_rand() % 8 == 0 && s->dom_b != DM_SHIFT && s->dom_b != DM_POWE &&
                    !(s->dom_b == DM_DIVISOR && !t_is_float(cm)))
                    memcpy(t_at(&b.t, e), t_at(&a.t, e), t_size(cm));
    }
    /* Integer division: no zero divisors (a separate check covers them). */
    buf_snap(&a);
    if (has_b)
        buf_snap(&b);
    bool out_bool = s->to_bool;
    tpu_dtype odt = out_bool ? BOOL : cm;
    int oly = out_contig ? LY_CONTIG : ly;
    buf_make(&o, odt, ROWS, COLS, oly);
    buf_snap(&o);

    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = binary ? TPU_OP_BINARY : TPU_OP_UNARY;
    op.fn = s->fn;
    op.n_in = has_b ? 2 : 1;
    op.out = o.t;
    op.in[0] = a.t;
    if (has_b)
        op.in[1] = b.t;
    op.p.ew.common = cm;
    set_params(&op, binary, s->fn, cm, k);
    if (bl == BL_SCALAR) {
        double f = s->dom_b == DM_DIVISOR ? 2.75 : s->dom_b == DM_POWE ? 3 : s->dom_b == DM_POS ? 1.3 : 0.3;
        int64_t i = s->dom_b == DM_SHIFT ? 3 : s->dom_b == DM_IEXP ? 5 : 7;
        if (cm == BOOL)
            i = 1;
        op.p.ew.other = sc(f, i);
    }
    tpu_status st = tpu_op_check(&op);
    CHECK_OK(st);
    if (st != TPU_OK) {
        fprintf(stderr, "    %s\n", label);
        goto done;
    }
    int64_t n = t_numel(&op.out);
    ex *want = calloc((size_t)n, sizeof *want);
    /* The dtype of a rounded f16/bf16 division's steps. */
    tpu_dtype step = cm;
    if (binary && (bl == BL_SCALAR || bl == BL_ONE))
        step = cm == F64 ? F64 : F32;
    if (cm == F32)
        step = F32;
    bool int_div_zero = false;
    for (int64_t e = 0; e < n; e++) {
        const unsigned char *pa = t_at(&op.in[0], e);
        const unsigned char *pb = has_b ? t_at(&op.in[1], e) : NULL;
        ex *x = &want[e];
        if (t_is_float(cm)) {
            double xa = cv_f(pa, cm, cm);
            double xb = pb ? cv_f(pb, cm, cm) : cm == F64 ? op.p.ew.other.f : t_quant((float)op.p.ew.other.f, cm);
            if (out_bool) {
                x->i = binary ? ex_to_bool_bin(s->fn, xa, xb) : ex_to_bool_un(s->fn, xa);
            } else {
                x->is_f = true;
                if (binary)
                    ex_binary_f(s->fn, xa, xb, &op, cm, step, x);
                else
                    ex_unary_f(s->fn, xa, op.p.ew.args, cm, x);
            }
        } else if (cm == BOOL) {
            bool xa = cv_b(pa, cm), xb = pb ? cv_b(pb, cm) : op.p.ew.other.i != 0;
            if (binary)
                x->i = ex_binary_b(s->fn, xa, xb, &op);
            else if (out_bool)
                x->i = ex_to_bool_un(s->fn, xa ? 1 : 0);
            else
                x->i = s->fn == TPU_UNARY_BITWISE_NOT ? !xa : xa;
        } else {
            int64_t xa = cv_i(pa, cm, cm);
            int64_t xb = pb ? cv_i(pb, cm, cm) : t_wrap(op.p.ew.other.i, cm);
            if (out_bool)
                x->i = binary ? ex_to_bool_bin_i(s->fn, xa, xb) : ex_to_bool_un(s->fn, (double)xa);
            else if (binary)
                int_div_zero |= !ex_binary_i(s->fn, xa, xb, &op, cm, &x->i);
            else
                x->i = ex_unary_i(s->fn, xa, op.p.ew.args, cm);
        }
    }
    CHECK(!int_div_zero);
    tolspec ts = {cm == F64 ? s->tol64 : s->tol, s->abs_k, s->zsign};
    if ((cm == F16 || cm == BF16) && ts.tol > 1)
        ts.tol = 1; /* the f32 steps' errors vanish in one 16-bit rounding */
    buf *ins[2] = {&a, &b};
    run_all(label, &op, &o, ins, has_b ? 2 : 1, want, &ts, &op);
    free(want);
done:
    buf_free(&a);
    if (has_b)
        buf_free(&b);
    buf_free(&o);
}

static const tpu_dtype k_dtypes[] = {F32, F64, F16, BF16, I8, I32, I64, U8, BOOL};

/* Item 1, 2, 4: every function, dtype, parameter set, layout. */
static void test_functions(void) {
    for (int fam = 0; fam < 2; fam++) {
        bool binary = fam == 1;
        const fspec *tab = binary ? k_bin : k_un;
        int count = binary ? TPU_BINARY_COUNT : TPU_UNARY_COUNT;
        for (int f = 0; f < count; f++) {
            const fspec *s = &tab[f];
            CHECK(s->fn == f);
            for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++) {
                tpu_dtype cm = k_dtypes[d];
                if (!takes(s->tk, cm))
                    continue;
                int np = n_params(binary, s->fn, cm);
                for (int k = 0; k < np; k++) {
                    run_case(s, binary, cm, LY_CONTIG, false, BL_SAME, k);
                    if (cm == F32 || cm == BF16) {
                        run_case(s, binary, cm, LY_TRANS, false, BL_SAME, k);
                        run_case(s, binary, cm, LY_TRANS, true, BL_SAME, k);
                        run_case(s, binary, cm, LY_NEG, false, BL_SAME, k);
                        run_case(s, binary, cm, LY_ODD, false, BL_SAME, k);
                        if (binary)
                            for (int bl = BL_ROW0; bl <= BL_SCALAR; bl++)
                                run_case(s, binary, cm, LY_CONTIG, false, bl, k);
                    }
                    if (binary && (cm == I32 || cm == F64 || cm == F16 || cm == BOOL))
                        run_case(s, binary, cm, LY_CONTIG, false, BL_SCALAR, k);
                    if (binary && (cm == F16 || cm == I8))
                        run_case(s, binary, cm, LY_CONTIG, false, BL_ROW0, k);
                }
            }
        }
    }
}

/* ----------------------------------------------------- mixed dtypes */

/* A small hand-built binary or unary op over n = ROWS*COLS elements with
 * the given dtypes; want computed by the caller's callback. */
typedef void (*mixed_fn)(const tpu_op *op, int64_t e, ex *x);

static void run_mixed(const char *label, bool binary, int fn, tpu_dtype cm, tpu_dtype odt,
                      tpu_dtype da, tpu_dtype db, int n_in, bool b_opmath, int bly, double other,
                      int64_t other_i, mixed_fn want_fn, const int64_t *ivals, const double *fvals,
                      int nvals) {
    buf a, b, o;
    buf_make(&a, da, ROWS, COLS, LY_CONTIG);
    fill(&a.t, DM_ANY, NULL, 0, false);
    if (n_in == 2) {
        buf_make(&b, db, ROWS, COLS, bly);
        fill(&b.t, DM_ANY, NULL, 0, false);
    }
    /* Chosen values at the front (a, then b for binary). */
    for (int k = 0; k < nvals; k++) {
        tpu_tensor *t = k % 2 == 0 || n_in < 2 ? &a.t : &b.t;
        int64_t e = n_in < 2 ? k : k / 2;
        if (n_in == 2 && t == &b.t && bly != LY_CONTIG)
            continue;
        if (t_is_float(t->dtype))
            put_f(t_at(t, e), t->dtype, fvals[k]);
        else
            put_i(t_at(t, e), t->dtype, ivals[k]);
    }
    buf_snap(&a);
    if (n_in == 2)
        buf_snap(&b);
    buf_make(&o, odt, ROWS, COLS, LY_CONTIG);
    buf_snap(&o);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = binary ? TPU_OP_BINARY : TPU_OP_UNARY;
    op.fn = fn;
    op.n_in = n_in;
    op.out = o.t;
    op.in[0] = a.t;
    if (n_in == 2)
        op.in[1] = b.t;
    op.p.ew.common = cm;
    op.p.ew.b_opmath = b_opmath;
    op.p.ew.alpha = sc(1, 1);
    op.p.ew.other = sc(other, other_i);
    tpu_status st = tpu_op_check(&op);
    CHECK_OK(st);
    if (st == TPU_OK) {
        int64_t n = t_numel(&op.out);
        ex *want = calloc((size_t)n, sizeof *want);
        for (int64_t e = 0; e < n; e++)
            want_fn(&op, e, &want[e]);
        tolspec ts = {0, 0, true};
        buf *ins[2] = {&a, &b};
        run_all(label, &op, &o, ins, n_in, want, &ts, &op);
        free(want);
    } else {
        fprintf(stderr, "    %s\n", label);
    }
    buf_free(&a);
    if (n_in == 2)
        buf_free(&b);
    buf_free(&o);
}

/* add, in[0] f32, in[1] f16, common f16, out f32: both inputs rounded to
 * f16, the sum rounded to f16 (through f32), then widened exactly. */
static void w_add_f16_common(const tpu_op *op, int64_t e, ex *x) {
    double a = t_round_f16(t_read_f(t_at(&op->in[0], e), F32));
    double b = t_read_f(t_at(&op->in[1], e), F16);
    x->is_f = true;
    x->fixed = true;
    x->hi = t_round_f16(rnd32(a + b));
}

/* eq with common f32: an i32 input converts to f32 (rounding). */
static void w_eq_i32_f32(const tpu_op *op, int64_t e, ex *x) {
    int64_t a = t_read_i(t_at(&op->in[0], e), I32);
    double b = t_read_f(t_at(&op->in[1], e), F32);
    x->i = rnd32((double)a) == b;
}

/* add with in i64 and i16, common i8, out i64: inputs wrap to i8, the
 * sum wraps to i8, then sign-extends. */
static void w_add_i8_common(const tpu_op *op, int64_t e, ex *x) {
    int64_t a = t_wrap(t_read_i(t_at(&op->in[0], e), I64), I8);
    int64_t b = t_wrap(t_read_i(t_at(&op->in[1], e), I16), I8);
    x->i = t_wrap(a + b, I8);
}

/* mul with common bf16 and b_opmath: b (f32, one value) unrounded. */
static void w_mul_bopmath(const tpu_op *op, int64_t e, ex *x) {
    double a = t_read_f(t_at(&op->in[0], e), BF16);
    double b = op->n_in == 2 ? t_read_f(t_at(&op->in[1], e), F32) : (double)(float)op->p.ew.other.f;
    x->is_f = true;
    x->fixed = true;
    x->hi = t_round_bf16(rnd32(a * b));
}

/* mul with common bf16, no b_opmath: b rounded to bf16 first. */
static void w_mul_bf16_rounded(const tpu_op *op, int64_t e, ex *x) {
    double a = t_read_f(t_at(&op->in[0], e), BF16);
    double b = t_round_bf16(op->n_in == 2 ? t_read_f(t_at(&op->in[1], e), F32)
                                          : (double)(float)op->p.ew.other.f);
    x->is_f = true;
    x->fixed = true;
    x->hi = t_round_bf16(rnd32(a * b));
}

/* neg, in f32, common i32 (floats through int32: INT32_MIN outside), out i64. */
static void w_neg_f32_i32(const tpu_op *op, int64_t e, ex *x) {
    int64_t v = f_to_int(t_read_f(t_at(&op->in[0], e), F32), I32);
    x->i = t_wrap((int64_t)(0 - (uint64_t)v), I32);
}

/* isinf, in f32, common f16: values past f16's range become inf. */
static void w_isinf_f16(const tpu_op *op, int64_t e, ex *x) {
    x->i = isinf(t_round_f16(t_read_f(t_at(&op->in[0], e), F32))) != 0;
}

/* maximum with a scalar operand on common i8: the scalar converted to i8
 * (op.h: both operands are converted to the common dtype). */
static void w_max_i8_scalar(const tpu_op *op, int64_t e, ex *x) {
    int64_t a = t_read_i(t_at(&op->in[0], e), I8), b = t_wrap(op->p.ew.other.i, I8);
    x->i = a > b ? a : b;
}

/* exp, in bf16, common f32, out f64: exp of the bf16 value rounded to f32. */
static void w_exp_bf16_f32(const tpu_op *op, int64_t e, ex *x) {
    double a = t_read_f(t_at(&op->in[0], e), BF16);
    x->is_f = true;
    x->fixed = true;
    x->hi = rnd32(exp(a));
}

/* mul, in[0] f32 (or bf16, common bf16), in[1] bool: the mask is 0 or 1
 * (dropout's x * mask), the product rounded once to common. */
static void w_mul_mask(const tpu_op *op, int64_t e, ex *x) {
    const tpu_dtype cm = op->p.ew.common;
    double a = t_read_f(t_at(&op->in[0], e), op->in[0].dtype);
    double m = t_read_i(t_at(&op->in[1], e), BOOL) != 0 ? 1.0 : 0.0;
    x->is_f = true;
    x->fixed = true;
    x->hi = cm == BF16 ? t_round_bf16(rnd32(a * m)) : rnd32(a * m);
}

/* add, in[0] f32, in[1] i64, common f32: the integer rounds to f32 first. */
static void w_add_f32_i64(const tpu_op *op, int64_t e, ex *x) {
    double a = t_read_f(t_at(&op->in[0], e), F32);
    double b = rnd32((double)t_read_i(t_at(&op->in[1], e), I64));
    x->is_f = true;
    x->fixed = true;
    x->hi = rnd32(a + b);
}

/* isneginf / logical_not of an integer through common f32: compares of
 * the value converted to f32 (no integer is -inf; 0 is the only zero). */
static void w_isneginf_i32(const tpu_op *op, int64_t e, ex *x) {
    (void)op, (void)e;
    x->i = 0;
}

static void w_not_u8_f32(const tpu_op *op, int64_t e, ex *x) {
    x->i = t_read_i(t_at(&op->in[0], e), U8) == 0;
}

/* eq / lt of a bool tensor against the scalar 2 with common int64 (as
 * PyTorch promotes them): true is 1, never 2. */
static void w_eq_bool_i64(const tpu_op *op, int64_t e, ex *x) {
    int64_t a = t_read_i(t_at(&op->in[0], e), BOOL) != 0, b = op->p.ew.other.i;
    x->i = op->fn == TPU_BINARY_EQ ? a == b : a < b;
}

static void test_mixed(void) {
    static const double fv[] = {1e6, 3.0, 0.1, 0.2, 65519.0, 1.0, 2049.0, 1.0, -1e-8, 1e-8};
    run_mixed("add f32 + f16 -> common f16 -> out f32", true, TPU_BINARY_ADD, F16, F32, F32, F16,
              2, false, LY_CONTIG, 0, 0, w_add_f16_common, NULL, fv, 10);
    static const int64_t eqi[] = {16777217, 0, 16777216, 0, -3, 0};
    static const double eqf[] = {0, 16777216.0, 0, 16777216.0, 0, -3.0};
    double eqv[6];
    for (int k = 0; k < 6; k++)
        eqv[k] = eqf[k];
    /* ivals for in[0] (i32) at even k, fvals for in[1] (f32) at odd k. */
    run_mixed("eq i32 == f32, common f32", true, TPU_BINARY_EQ, F32, BOOL, I32, F32, 2, false,
              LY_CONTIG, 0, 0, w_eq_i32_f32, eqi, eqv, 6);
    static const int64_t i8v[] = {300, 100, -129, 1000, 127, 1, (int64_t)1 << 40, 5};
    run_mixed("add i64 + i16, common i8, out i64", true, TPU_BINARY_ADD, I8, I64, I64, I16, 2,
              false, LY_CONTIG, 0, 0, w_add_i8_common, i8v, NULL, 8);
    run_mixed("mul bf16 * f32 one-value, b_opmath", true, TPU_BINARY_MUL, BF16, BF16, BF16, F32, 2,
              true, LY_ALL0, 0, 0, w_mul_bopmath, NULL, NULL, 0);
    run_mixed("mul bf16 * scalar 0.1, b_opmath", true, TPU_BINARY_MUL, BF16, BF16, BF16, F32, 1,
              true, LY_CONTIG, 0.1, 0, w_mul_bopmath, NULL, NULL, 0);
    run_mixed("mul bf16 * scalar 0.1, rounded", true, TPU_BINARY_MUL, BF16, BF16, BF16, F32, 1,
              false, LY_CONTIG, 0.1, 0, w_mul_bf16_rounded, NULL, NULL, 0);
    run_mixed("mul bf16 * f32 tensor, rounded", true, TPU_BINARY_MUL, BF16, BF16, BF16, F32, 2,
              false, LY_CONTIG, 0, 0, w_mul_bf16_rounded, NULL, NULL, 0);
    static const double nf[] = {3.7, -3.7, 3e9, -3e9, NAN, INFINITY, -0.5, 2147483647.0};
    run_mixed("neg f32 through common i32, out i64", false, TPU_UNARY_NEG, I32, I64, F32, F32, 1,
              false, LY_CONTIG, 0, 0, w_neg_f32_i32, NULL, nf, 8);
    static const double inf_v[] = {1e6, -1e6, 65504.0, 65519.0, 65520.0, INFINITY, NAN, 1.0};
    run_mixed("isinf f32 through common f16", false, TPU_UNARY_ISINF, F16, BOOL, F32, F32, 1,
              false, LY_CONTIG, 0, 0, w_isinf_f16, NULL, inf_v, 8);
    run_mixed("exp bf16 through common f32, out f64", false, TPU_UNARY_EXP, F32, F64, BF16, BF16, 1,
              false, LY_CONTIG, 0, 0, w_exp_bf16_f32, NULL, NULL, 0);
    /* Inputs of other dtypes staged through f32 (the flat runs read any
     * input dtype when the compute is f32). */
    run_mixed("mul f32 * bool mask, common f32", true, TPU_BINARY_MUL, F32, F32, F32, BOOL, 2, false,
              LY_CONTIG, 0, 0, w_mul_mask, NULL, NULL, 0);
    run_mixed("mul bf16 * bool mask, common bf16", true, TPU_BINARY_MUL, BF16, BF16, BF16, BOOL, 2,
              false, LY_CONTIG, 0, 0, w_mul_mask, NULL, NULL, 0);
    static const int64_t big_i[] = {0, 16777217, 0, -16777219, 0, (int64_t)1 << 62, 0, -5};
    static const double big_f[] = {1.0, 0, -2.0, 0, 0.5, 0, 3.0, 0};
    /* ivals for in[1] (i64) at odd k, fvals for in[0] (f32) at even k. */
    run_mixed("add f32 + i64, common f32", true, TPU_BINARY_ADD, F32, F32, F32, I64, 2, false,
              LY_CONTIG, 0, 0, w_add_f32_i64, big_i, big_f, 8);
    run_mixed("isneginf i32 through common f32", false, TPU_UNARY_ISNEGINF, F32, BOOL, I32, I32, 1,
              false, LY_CONTIG, 0, 0, w_isneginf_i32, NULL, NULL, 0);
    run_mixed("logical_not u8 through common f32", false, TPU_UNARY_LOGICAL_NOT, F32, BOOL, U8, U8, 1,
              false, LY_CONTIG, 0, 0, w_not_u8_f32, NULL, NULL, 0);
    run_mixed("eq bool == scalar 2, common i64", true, TPU_BINARY_EQ, I64, BOOL, BOOL, BOOL, 1, false,
              LY_CONTIG, 2, 2, w_eq_bool_i64, NULL, NULL, 0);
    run_mixed("lt bool < scalar 2, common i64", true, TPU_BINARY_LT, I64, BOOL, BOOL, BOOL, 1, false,
              LY_CONTIG, 2, 2, w_eq_bool_i64, NULL, NULL, 0);
    /* The scalar operand of an integer op is converted to the common
     * dtype like a tensor operand: 200 is -56 as i8. */
    run_mixed("maximum i8 with scalar 200 (wraps to -56)", true, TPU_BINARY_MAXIMUM, I8, I8, I8, I8, 1,
              false, LY_CONTIG, 200, 200, w_max_i8_scalar, NULL, NULL, 0);
}

/* --------------------------------------------------------- in place */

/* pow with a scalar exponent: 2, 3, +-0.5, -1 and -2 are PyTorch's
 * arithmetic forms (the vector loops take them), 2.5 is pow(); every way
 * (reference, each ISA, flat runs) gives the expected bits, specials
 * (zeros, infinities, NaN, negatives) included. */
static void test_pow_scalar_exponents(void) {
    static const double exps[] = {2, 3, 0.5, -0.5, -1, -2, 2.5};
    static const tpu_dtype dts[] = {F32, BF16, F16};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
            const tpu_dtype dt = dts[d];
            const double e = exps[k];
            buf a, o;
            buf_make(&a, dt, ROWS, COLS, LY_CONTIG);
            int fa[N_SPECIALS];
            for (int i = 0; i < N_SPECIALS; i++)
                fa[i] = i;
            fill(&a.t, DM_ANY, fa, N_SPECIALS, false);
            buf_snap(&a);
            buf_make(&o, dt, ROWS, COLS, LY_CONTIG);
            buf_snap(&o);
            tpu_op op;
            memset(&op, 0, sizeof op);
            op.code = TPU_OP_BINARY;
            op.fn = TPU_BINARY_POW;
            op.n_in = 1;
            op.out = o.t;
            op.in[0] = a.t;
            op.p.ew.common = dt;
            op.p.ew.alpha = sc(1, 1);
            op.p.ew.other = sc(e, 0);
            CHECK_OK(tpu_op_check(&op));
            int64_t n = t_numel(&op.out);
            ex *want = calloc((size_t)n, sizeof *want);
            for (int64_t i = 0; i < n; i++) {
                const float x = (float)t_read_f(t_at(&a.t, i), dt);
                const float v = e == 2 ? x * x : e == 3 ? (x * x) * x : e == 0.5 ? sqrtf(x)
                              : e == -0.5 ? 1.0f / sqrtf(x) : e == -1 ? 1.0f / x
                              : e == -2 ? 1.0f / (x * x) : (float)pow((double)x, e);
                want[i].is_f = true;
                want[i].fixed = true;
                want[i].hi = t_quant(v, dt);
            }
            tolspec ts = {0, 0, true};
            char label[64];
            snprintf(label, sizeof label, "pow %s ** %g", dt_name(dt), e);
            buf *ins[1] = {&a};
            run_all(label, &op, &o, ins, 1, want, &ts, &op);
            free(want);
            buf_free(&a);
            buf_free(&o);
        }
}

static void test_inplace(void) {
    static const tpu_dtype dts[] = {F32, BF16};
    for (int d = 0; d < 2; d++) {
        tpu_dtype dt = dts[d];
        for (int binary = 0; binary < 2; binary++) {
            buf a, b;
            buf_make(&a, dt, ROWS, COLS, LY_CONTIG);
            fill(&a.t, DM_ANY, NULL, 0, false);
            buf_snap(&a);
            if (binary) {
                buf_make(&b, dt, ROWS, COLS, LY_CONTIG);
                fill(&b.t, DM_ANY, NULL, 0, false);
                buf_snap(&b);
            }
            tpu_op op;
            memset(&op, 0, sizeof op);
            op.code = binary ? TPU_OP_BINARY : TPU_OP_UNARY;
            op.fn = binary ? TPU_BINARY_ADD : TPU_UNARY_EXP;
            op.n_in = binary ? 2 : 1;
            op.out = a.t;
            op.in[0] = a.t;
            if (binary)
                op.in[1] = b.t;
            op.p.ew.common = dt;
            op.p.ew.alpha = sc(2.5, 2);
            CHECK_OK(tpu_op_check(&op));
            int64_t n = t_numel(&op.out);
            ex *want = calloc((size_t)n, sizeof *want);
            for (int64_t e = 0; e < n; e++) {
                double x = t_read_f(a.pristine + (t_at(&a.t, e) - a.alloc), dt);
                want[e].is_f = true;
                if (binary) {
                    double y = t_read_f(t_at(&b.t, e), dt);
                    two_sum(x, 2.5 * y, &want[e].hi, &want[e].lo);
                } else {
                    want[e].hi = exp(x);
                }
            }
            tolspec ts = {binary ? 0 : 1, 0, true};
            char label[64];
            snprintf(label, sizeof label, "in-place %s %s", binary ? "add alpha" : "exp", dt_name(dt));
            buf *ins[2] = {&a, &b};
            run_all(label, &op, &a, ins, binary ? 2 : 1, want, &ts, NULL);
            free(want);
            buf_free(&a);
            if (binary)
                buf_free(&b);
        }
    }
}

/* ----------------------------------------------- empty and 0-d tensors */

static void test_empty_and_scalar(void) {
    for (int binary = 0; binary < 2; binary++) {
        /* Zero elements: runs, writes nothing. */
        buf a, b, o;
        buf_make(&a, F32, 0, 5, LY_CONTIG);
        buf_make(&b, F32, 0, 5, LY_CONTIG);
        buf_make(&o, F32, 0, 5, LY_CONTIG);
        buf_snap(&o);
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = binary ? TPU_OP_BINARY : TPU_OP_UNARY;
        op.fn = binary ? TPU_BINARY_MUL : TPU_UNARY_SIN;
        op.n_in = binary ? 2 : 1;
        op.out = o.t;
        op.in[0] = a.t;
        op.in[1] = b.t;
        op.p.ew.common = F32;
        op.p.ew.alpha = sc(1, 1);
        CHECK_OK(tpu_op_check(&op));
        for (int ref = 0; ref < 2; ref++) {
            tpu_kernels_set_reference(ref);
            CHECK_OK(run_shares(&op, 1));
            CHECK_OK(run_shares(&op, 3));
            CHECK(memcmp(o.alloc, o.pristine, o.bytes) == 0);
        }
        tpu_kernels_set_reference(false);
        buf_free(&a);
        buf_free(&b);
        buf_free(&o);

        /* 0-d: one element, nothing else written. */
        tpu_dtype dt = binary ? BF16 : F64;
        buf_make(&a, dt, -1, 0, LY_CONTIG);
        buf_make(&b, dt, -1, 0, LY_CONTIG);
        buf_make(&o, dt, -1, 0, LY_CONTIG);
        put_f(a.t.data, dt, 1.5);
        put_f(b.t.data, dt, -2.25);
        buf_snap(&a);
        buf_snap(&b);
        buf_snap(&o);
        op.out = o.t;
        op.in[0] = a.t;
        op.in[1] = b.t;
        op.p.ew.common = dt;
        CHECK_OK(tpu_op_check(&op));
        ex want = {.is_f = true, .hi = binary ? 1.5 * -2.25 : sin(1.5)};
        tolspec ts = {binary ? 0 : 1, 0, true};
        buf *ins[2] = {&a, &b};
        run_all(binary ? "mul bf16 0-d" : "sin f64 0-d", &op, &o, ins, binary ? 2 : 1, &want, &ts,
                NULL);
        buf_free(&a);
        buf_free(&b);
        buf_free(&o);
    }
}

/* ------------------------------------------------------- refusals */

static void test_refusals(void) {
    unsigned char mem[64];
    memset(mem, 0, sizeof mem);
    tpu_op op;
    memset(&op, 0, sizeof op);
    tpu_tensor t = {.data = mem, .sizes = {2}, .strides = {1}, .ndim = 1, .dtype = F32,
                    .storage = mem, .storage_nbytes = sizeof mem};
    op.code = TPU_OP_UNARY;
    op.n_in = 1;
    op.out = t;
    op.in[0] = t;
    op.in[1] = t;
    op.p.ew.common = F32;
    op.p.ew.alpha = sc(1, 1);
    /* fn out of range */
    op.fn = TPU_UNARY_COUNT;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.fn = -1;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.code = TPU_OP_BINARY;
    op.n_in = 2;
    op.fn = TPU_BINARY_COUNT;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_BINARY, TPU_BINARY_COUNT), "invalid") == 0);
    /* Every function against every dtype as its common: accepted exactly
     * where the function takes it (tensors of that dtype, out bool for
     * -> bool functions). */
    for (int fam = 0; fam < 2; fam++) {
        bool binary = fam == 1;
        const fspec *tab = binary ? k_bin : k_un;
        int count = binary ? TPU_BINARY_COUNT : TPU_UNARY_COUNT;
        for (int f = 0; f < count; f++)
            for (int d = 0; d < TPU_DTYPE_COUNT; d++) {
                tpu_dtype dt = (tpu_dtype)d;
                op.code = binary ? TPU_OP_BINARY : TPU_OP_UNARY;
                op.fn = f;
                op.n_in = binary ? 2 : 1;
                op.in[0].dtype = op.in[1].dtype = dt;
                op.out.dtype = tab[f].to_bool ? BOOL : dt;
                op.out.data = op.out.storage = mem + 16;
                op.out.storage_nbytes = sizeof mem - 16;
                op.p.ew.common = dt;
                op.p.ew.rounding = TPU_ROUND_NONE;
                bool want = takes(tab[f].tk, dt) &&
                            !(binary && f == TPU_BINARY_DIV && !t_is_float(dt));
                tpu_status st = tpu_op_check(&op);
                CHECK(want ? st == TPU_OK : st == TPU_ERR_UNSUPPORTED_DTYPE);
                if ((st == TPU_OK) != want)
                    fprintf(stderr, "    check of %s with common %s: %s (%s)\n",
                            tpu_op_fn_name(op.code, f), dt_name(dt), tpu_status_str(st),
                            tpu_last_error_message());
            }
    }
    op.out = t;
    op.out.data = op.out.storage = mem + 16;
    op.out.storage_nbytes = sizeof mem - 16;
    op.in[0] = op.in[1] = t;
    op.p.ew.common = F32;
    /* The named refusals, with the function in the message. */
    op.code = TPU_OP_BINARY;
    op.n_in = 2;
    op.fn = TPU_BINARY_BITWISE_AND;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
    CHECK_CONTAINS(tpu_last_error_message(), "bitwise_and");
    op.code = TPU_OP_UNARY;
    op.n_in = 1;
    op.fn = TPU_UNARY_EXP;
    op.in[0].dtype = op.out.dtype = op.p.ew.common = I32;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
    CHECK_CONTAINS(tpu_last_error_message(), "exp");
    op.code = TPU_OP_BINARY;
    op.n_in = 2;
    op.fn = TPU_BINARY_SUB;
    op.in[0].dtype = op.in[1].dtype = op.out.dtype = op.p.ew.common = BOOL;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
    CHECK_CONTAINS(tpu_last_error_message(), "sub");
    op.fn = TPU_BINARY_DIV;
    op.in[0].dtype = op.in[1].dtype = op.out.dtype = op.p.ew.common = I32;
    op.p.ew.rounding = TPU_ROUND_NONE;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
    CHECK_CONTAINS(tpu_last_error_message(), "div");
    op.p.ew.rounding = TPU_ROUND_TRUNC;
    CHECK_OK(tpu_op_check(&op));
    op.p.ew.rounding = (tpu_rounding)7;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.p.ew.rounding = TPU_ROUND_FLOOR;
    op.p.ew.common = (tpu_dtype)99;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    /* Integer division by zero is the kernel's error, in every mode. */
    op.p.ew.common = I32;
    int32_t num[2] = {7, 8}, den[2] = {2, 0}, res[2];
    op.in[0].data = op.in[0].storage = num;
    op.in[1].data = op.in[1].storage = den;
    op.out.data = op.out.storage = res;
    op.in[0].storage_nbytes = op.in[1].storage_nbytes = op.out.storage_nbytes = sizeof num;
    CHECK_OK(tpu_op_check(&op));
    for (int ref = 0; ref < 2; ref++) {
        tpu_kernels_set_reference(ref);
        CHECK_STATUS(run_shares(&op, 1), TPU_ERR_DIV_BY_ZERO);
    }
    tpu_kernels_set_reference(false);
    op.n_in = 1;
    op.p.ew.other = sc(0, 0);
    CHECK_STATUS(run_shares(&op, 1), TPU_ERR_DIV_BY_ZERO);
}

/* ----------------------------------------------------------- TERNARY */

/* Own copy of op.h's k_ternary takes (WHERE any, ADDCMUL not bool,
 * ADDCDIV and LERP float). */
static const int k_tern_tk[] = {
    [TPU_TERNARY_WHERE] = TK_ANY,
    [TPU_TERNARY_ADDCMUL] = TK_NOT_BOOL,
    [TPU_TERNARY_ADDCDIV] = TK_FLOAT,
    [TPU_TERNARY_LERP] = TK_FLOAT,
};
_Static_assert(sizeof k_tern_tk / sizeof k_tern_tk[0] == TPU_TERNARY_COUNT,
               "a row per ternary function");

/* A float ternary result computed in the compute type of common cm and
 * rounded to cm (the value out holds). f32 compute: every operation's
 * exact result in double (products of f32 values are exact; a sum or a
 * quotient rounded to double and then to f32 is correctly rounded, 53 >=
 * 2 * 24 + 2), rounded to f32 with the own rounding; addcmul's and
 * lerp's fma by libm's fma/fmaf (PyTorch's CPU kernels' addcmul is one
 * fma after alpha * b). Separate statements: no other contraction. */
static double tern_expect_f(int fn, double al, double a, double b, double c, tpu_dtype cm) {
    if (cm == F64) {
        switch (fn) {
        case TPU_TERNARY_ADDCMUL: {
            double p1 = al * b;
            return fma(p1, c, a);
        }
        case TPU_TERNARY_ADDCDIV: {
            double p1 = al * b;
            double q = p1 / c;
            return a + q;
        }
        default: {
            double d = b - a;
            return fabs(c) < 0.5 ? fma(c, d, a) : fma(c - 1.0, d, b);
        }
        }
    }
    double v, al32 = rnd32(al);
    switch (fn) {
    case TPU_TERNARY_ADDCMUL: {
        double p1 = rnd32(al32 * b);
        v = fmaf((float)p1, (float)c, (float)a);
        break;
    }
    case TPU_TERNARY_ADDCDIV: {
        double p1 = rnd32(al32 * b);
        double q = rnd32(p1 / c);
        v = rnd32(a + q);
        break;
    }
    default: {
        double d = rnd32(b - a);
        v = fabs(c) < 0.5 ? fmaf((float)c, (float)d, (float)a)
                          : fmaf((float)rnd32(c - 1.0), (float)d, (float)b);
        break;
    }
    }
    return cm == F16 ? t_round_f16(v) : cm == BF16 ? t_round_bf16(v) : v;
}

/* The expectation for element e of a ternary op (read before any run). */
static void ex_ternary(const tpu_op *op, int64_t e, ex *x) {
    const tpu_dtype cm = op->p.ew.common;
    const unsigned char *p[3] = {NULL, NULL, NULL};
    for (int i = 0; i < op->n_in; i++)
        p[i] = t_at(&op->in[i], e);
    const tpu_scalar other = op->p.ew.other;
    const double other_f = cm == F64 ? other.f : t_quant((float)other.f, cm);
    if (op->fn == TPU_TERNARY_WHERE) {
        /* The condition read as nonzero in its own dtype (NaN true, -0 false). */
        bool cond = cv_b(p[0], op->in[0].dtype);
        const unsigned char *src = cond ? p[1] : p[2];
        tpu_dtype sdt = cond ? op->in[1].dtype : op->in[2].dtype;
        if (t_is_float(cm)) {
            x->is_f = true;
            x->fixed = true;
            x->hi = src ? cv_f(src, sdt, cm) : other_f;
        } else if (cm == BOOL) {
            x->i = src ? cv_b(src, sdt) : other.i != 0;
        } else {
            x->i = src ? cv_i(src, sdt, cm) : t_wrap(other.i, cm);
        }
        return;
    }
    if (t_is_float(cm)) {
        double a = cv_f(p[0], op->in[0].dtype, cm), b = cv_f(p[1], op->in[1].dtype, cm);
        double c = p[2] ? cv_f(p[2], op->in[2].dtype, cm) : other_f;
        x->is_f = true;
        x->fixed = true;
        x->hi = tern_expect_f(op->fn, op->p.ew.alpha.f, a, b, c, cm);
        return;
    }
    /* ADDCMUL on integers: wrapping. */
    uint64_t a = (uint64_t)cv_i(p[0], op->in[0].dtype, cm), b = (uint64_t)cv_i(p[1], op->in[1].dtype, cm);
    uint64_t c = (uint64_t)(p[2] ? cv_i(p[2], op->in[2].dtype, cm) : t_wrap(other.i, cm));
    x->i = t_wrap((int64_t)(a + (uint64_t)op->p.ew.alpha.i * b * c), cm);
}

/* WHERE's condition: half zeros (+0 and -0 for floats), specials (NaN,
 * inf, the smallest subnormal; integers whose low byte is 0), the rest
 * random nonzero. */
static void fill_cond(tpu_tensor *t) {
    int64_t n = t_numel(t);
    tpu_dtype dt = t->dtype;
    for (int64_t e = 0; e < n; e++) {
        unsigned char *p = t_at(t, e);
        int r = (int)(t_rand() % 8);
        if (dt == BOOL) {
            put_i(p, dt, r < 4 ? 0 : 1);
        } else if (t_is_float(dt)) {
            static const double sp[] = {NAN, INFINITY, -INFINITY, 0x1p-149, -0x1p-133, 1e30};
            double v = r < 2 ? 0.0 : r < 4 ? -0.0 : r == 4 ? sp[t_rand() % 6] : gen_f(DM_ANY);
            if (r > 4 && v == 0)
                v = 1;
            put_f(p, dt, v);
        } else {
            static const int64_t sp[] = {256, (int64_t)1 << 32, -1, INT64_MIN, (int64_t)1 << 62, -256};
            int64_t v = r < 4 ? 0 : r == 4 ? sp[t_rand() % 6] : (int64_t)(t_rand() | 1);
            if (t_wrap(v, dt) == 0)
                v = 1; /* keep the 0/nonzero split of what is stored */
            put_i(p, dt, v);
        }
    }
}

typedef struct {
    int fn;
    tpu_dtype cm, odt;
    tpu_dtype dt[3]; /* in[0] (WHERE: the condition), in[1], in[2] */
    int ly[3], oly;  /* LY_*; broadcast layouts only for inputs */
    int n_in;
    int rows;        /* ROWS; 0: no elements; -1: 0-d */
    tpu_scalar alpha, other;
    bool inplace;    /* out is in[0]'s view (dt[0] == odt, ly[0] == oly) */
} tcase;

/* Defaults: every tensor of common cm, contiguous, three inputs, alpha 1. */
static tcase tc_make(int fn, tpu_dtype cm) {
    tcase c;
    memset(&c, 0, sizeof c);
    c.fn = fn;
    c.cm = c.odt = cm;
    c.dt[0] = fn == TPU_TERNARY_WHERE ? BOOL : cm;
    c.dt[1] = c.dt[2] = cm;
    c.n_in = 3;
    c.rows = ROWS;
    c.alpha = sc(1, 1);
    c.other = sc(2.75, 7);
    return c;
}

static bool ly_bcast(int ly) {
    return ly == LY_ROW0 || ly == LY_COL0 || ly == LY_ALL0;
}

static void run_tcase(const tcase *c, const char *note) {
    char label[200];
    snprintf(label, sizeof label,
             "%s common %s out %s in %s/%s/%s ly %s/%s/%s->%s n_in %d alpha %g/%lld other %g/%lld%s "
             "%s",
             tpu_op_fn_name(TPU_OP_TERNARY, c->fn), dt_name(c->cm), dt_name(c->odt), dt_name(c->dt[0]),
             dt_name(c->dt[1]), c->n_in == 3 ? dt_name(c->dt[2]) : "-", ly_name[c->ly[0]],
             ly_name[c->ly[1]], c->n_in == 3 ? ly_name[c->ly[2]] : "-",
             c->inplace ? "in-place" : ly_name[c->oly], c->n_in, c->alpha.f, (long long)c->alpha.i,
             c->other.f, (long long)c->other.i, c->rows == 0 ? " empty" : c->rows < 0 ? " 0-d" : "",
             note);
    /* Specials up front: a x b (c from both), then b x c (a from both). */
    enum { NF = 2 * N_SPECIALS * N_SPECIALS };
    int fx[3][NF];
    for (int e = 0; e < NF; e++) {
        int h = e / (N_SPECIALS * N_SPECIALS), i = (e / N_SPECIALS) % N_SPECIALS, j = e % N_SPECIALS;
        fx[0][e] = h == 0 ? i : (3 * i + j) % N_SPECIALS;
        fx[1][e] = h == 0 ? j : i;
        fx[2][e] = h == 0 ? (i + j) % N_SPECIALS : j;
    }
    int dom[3] = {DM_ANY, DM_ANY, c->fn == TPU_TERNARY_ADDCDIV ? DM_DIVISOR
                                  : c->fn == TPU_TERNARY_LERP  ? DM_UNIT
                                                               : DM_ANY};
    buf in[3], o;
    int64_t rows = c->rows < 0 ? -1 : c->rows;
    for (int i = 0; i < c->n_in; i++) {
        buf_make(&in[i], c->dt[i], rows, COLS, c->ly[i]);
        if (i == 0 && c->fn == TPU_TERNARY_WHERE)
            fill_cond(&in[i].t);
        else
            fill(&in[i].t, dom[i], fx[i], ly_bcast(c->ly[i]) ? 0 : NF, false);
        buf_snap(&in[i]);
    }
    if (!c->inplace) {
        buf_make(&o, c->odt, rows, COLS, c->oly);
        buf_snap(&o);
    }
    buf *ob = c->inplace ? &in[0] : &o;
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_TERNARY;
    op.fn = c->fn;
    op.n_in = c->n_in;
    op.out = ob->t;
    for (int i = 0; i < c->n_in; i++)
        op.in[i] = in[i].t;
    op.p.ew.common = c->cm;
    op.p.ew.alpha = c->alpha;
    op.p.ew.other = c->other;
    tpu_status st = tpu_op_check(&op);
    CHECK_OK(st);
    if (st == TPU_OK) {
        int64_t n = t_numel(&op.out);
        ex *want = calloc((size_t)(n > 0 ? n : 1), sizeof *want);
        for (int64_t e = 0; e < n; e++)
            ex_ternary(&op, e, &want[e]);
        tolspec ts = {0, 0, true};
        buf *ins[3] = {&in[0], &in[1], &in[2]};
        run_all(label, &op, ob, ins, c->n_in, want, &ts, &op);
        free(want);
    } else {
        fprintf(stderr, "    %s: %s\n", label, tpu_last_error_message());
    }
    for (int i = 0; i < c->n_in; i++)
        buf_free(&in[i]);
    if (!c->inplace)
        buf_free(&o);
}

/* Parameter sets: alpha for ADDCMUL/ADDCDIV (1, 0.3, -2; integers 1, -2,
 * 77), none else. */
static int tern_n_params(int fn) {
    return fn == TPU_TERNARY_ADDCMUL || fn == TPU_TERNARY_ADDCDIV ? 3 : 1;
}

static tpu_scalar tern_alpha(int fn, tpu_dtype cm, int k) {
    static const double af[3] = {1, 0.3, -2};
    static const int64_t ai[3] = {1, -2, 77};
    if (fn != TPU_TERNARY_ADDCMUL && fn != TPU_TERNARY_ADDCDIV)
        return sc(1, 1);
    return t_is_float(cm) ? sc(af[k], (int64_t)af[k]) : sc(af[k], ai[k]);
}

/* The scalar c of n_in == 2 cases, k-th choice. */
static tpu_scalar tern_other(int fn, tpu_dtype cm, int k) {
    switch (fn) {
    case TPU_TERNARY_WHERE: {
        static const double f[4] = {-1.5, NAN, -0.0, 1e6};
        static const int64_t i[4] = {-7, 300, 0, (int64_t)1 << 40};
        return cm == BOOL ? sc(0, k % 2) : sc(f[k % 4], i[k % 4]);
    }
    case TPU_TERNARY_ADDCMUL: {
        static const double f[3] = {2.75, -0.1, INFINITY};
        static const int64_t i[3] = {7, -3, 1000};
        return sc(f[k % 3], i[k % 3]);
    }
    case TPU_TERNARY_ADDCDIV: {
        static const double f[3] = {2.75, -0.1, 0.0};
        return sc(f[k % 3], 0);
    }
    default: {
        /* Weights on both sides of 0.5, and at it. */
        static const double f[8] = {0.3, 0.75, -0.25, 0.5, 1.5, -0.7, 0.49999997, 0.0};
        return sc(f[k % 8], 0);
    }
    }
}
enum { N_LERP_W = 8 };

/* Every function, every dtype it takes, every parameter set; n_in 3 and
 * 2; layouts on f32 and bf16 (f16 and i8: a broadcast too). */
static void test_ternary_functions(void) {
    for (int fn = 0; fn < TPU_TERNARY_COUNT; fn++)
        for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++) {
            tpu_dtype cm = k_dtypes[d];
            if (!takes(k_tern_tk[fn], cm))
                continue;
            int np = tern_n_params(fn);
            for (int k = 0; k < np; k++) {
                tcase c = tc_make(fn, cm);
                c.alpha = tern_alpha(fn, cm, k);
                run_tcase(&c, "");
                tcase c2 = c;
                c2.n_in = 2;
                int nother = fn == TPU_TERNARY_LERP ? N_LERP_W : fn == TPU_TERNARY_WHERE ? 4 : 1;
                for (int j = 0; j < nother; j++) {
                    c2.other = tern_other(fn, cm, fn == TPU_TERNARY_LERP || fn == TPU_TERNARY_WHERE ? j : k);
                    run_tcase(&c2, "");
                }
                if (cm == F32 || cm == BF16) {
                    static const int lys[][4] = {
                        {LY_TRANS, LY_TRANS, LY_TRANS, LY_TRANS},
                        {LY_TRANS, LY_TRANS, LY_TRANS, LY_CONTIG},
                        {LY_CONTIG, LY_TRANS, LY_NEG, LY_CONTIG},
                        {LY_NEG, LY_NEG, LY_NEG, LY_NEG},
                        {LY_ODD, LY_ODD, LY_ODD, LY_ODD},
                        {LY_CONTIG, LY_ODD, LY_CONTIG, LY_CONTIG},
                        {LY_CONTIG, LY_CONTIG, LY_CONTIG, LY_ODD},
                        {LY_CONTIG, LY_ROW0, LY_COL0, LY_CONTIG},
                        {LY_ALL0, LY_CONTIG, LY_CONTIG, LY_CONTIG},
                        {LY_CONTIG, LY_CONTIG, LY_ALL0, LY_CONTIG},
                        {LY_CONTIG, LY_ALL0, LY_CONTIG, LY_CONTIG},
                        {LY_ROW0, LY_COL0, LY_ALL0, LY_NEG},
                        {LY_TRANS, LY_ALL0, LY_ALL0, LY_TRANS},
                    };
                    for (size_t l = 0; l < sizeof lys / sizeof lys[0]; l++) {
                        tcase cl = c;
                        for (int i = 0; i < 3; i++)
                            cl.ly[i] = lys[l][i];
                        cl.oly = lys[l][3];
                        run_tcase(&cl, "");
                        if (l == 0 || l == 3 || l == 4 || l == 8) {
                            cl.n_in = 2;
                            cl.other = tern_other(fn, cm, 1);
                            run_tcase(&cl, "");
                        }
                    }
                }
                if (cm == F16 || cm == I8) {
                    tcase cb = c;
                    cb.ly[1] = LY_ROW0;
                    cb.ly[2] = LY_COL0;
                    run_tcase(&cb, "");
                }
            }
        }
    /* WHERE's condition in several dtypes, read as nonzero, not through
     * common (an i64 256 is true even with common u8 or bool). */
    static const tpu_dtype conds[] = {BOOL, U8, F32, I64, BF16, F64};
    static const tpu_dtype cms[] = {F32, F64, F16, BF16, I8, I32, I64, U8, BOOL};
    for (size_t i = 0; i < sizeof conds / sizeof conds[0]; i++)
        for (size_t d = 0; d < sizeof cms / sizeof cms[0]; d++) {
            tcase c = tc_make(TPU_TERNARY_WHERE, cms[d]);
            c.dt[0] = conds[i];
            run_tcase(&c, "");
            if (cms[d] == F32 || cms[d] == I64) {
                c.n_in = 2;
                c.other = tern_other(TPU_TERNARY_WHERE, cms[d], (int)i);
                run_tcase(&c, "");
                c.n_in = 3;
                c.ly[0] = LY_TRANS;
                c.ly[1] = LY_NEG;
                c.ly[2] = LY_ROW0;
                run_tcase(&c, "");
            }
        }
}

/* Mixed dtypes through the common dtype: inputs rounded (or wrapped) to
 * common first; out wider than common (an exact widening). */
static void test_ternary_mixed(void) {
    tcase c = tc_make(TPU_TERNARY_ADDCMUL, F16);
    c.odt = F32;
    c.dt[0] = F32; /* rounded to f16 first */
    c.dt[2] = F32;
    for (int k = 0; k < 3; k++) {
        c.alpha = tern_alpha(c.fn, F16, k);
        run_tcase(&c, "mixed");
    }
    c = tc_make(TPU_TERNARY_ADDCDIV, F32);
    c.odt = F64;
    c.dt[1] = BF16;
    c.dt[2] = I32; /* i32 divisors: large ones round to f32 */
    c.alpha = sc(0.3, 0);
    run_tcase(&c, "mixed");
    c = tc_make(TPU_TERNARY_ADDCMUL, I8);
    c.odt = I64;
    c.dt[0] = I64;
    c.dt[1] = I32;
    c.dt[2] = U8;
    c.alpha = sc(0, 77);
    run_tcase(&c, "mixed wrap");
    c.dt[2] = F32; /* floats through int32 to i8 */
    run_tcase(&c, "mixed wrap");
    c = tc_make(TPU_TERNARY_LERP, BF16);
    c.dt[0] = F32;
    c.dt[2] = F32;
    run_tcase(&c, "mixed");
    c = tc_make(TPU_TERNARY_LERP, F64);
    c.dt[1] = F32;
    c.dt[2] = F16;
    run_tcase(&c, "mixed");
    c = tc_make(TPU_TERNARY_WHERE, F16);
    c.odt = F32;
    c.dt[0] = U8;
    c.dt[1] = F32;
    c.dt[2] = F64;
    run_tcase(&c, "mixed");
    c = tc_make(TPU_TERNARY_WHERE, I32);
    c.odt = I64;
    c.dt[0] = F32;
    c.dt[1] = F32;
    c.dt[2] = I64;
    run_tcase(&c, "mixed");
    c = tc_make(TPU_TERNARY_WHERE, F64);
    c.dt[0] = I64;
    c.dt[1] = I64;
    c.dt[2] = F32;
    run_tcase(&c, "mixed");
    c = tc_make(TPU_TERNARY_WHERE, BOOL);
    c.dt[1] = F32;
    c.dt[2] = I8;
    run_tcase(&c, "mixed");
}

/* In place (out is in[0]'s view), zero-size and 0-d. */
static void test_ternary_inplace_empty(void) {
    static const tpu_dtype dts[] = {F32, BF16, I32};
    for (int fn = 0; fn < TPU_TERNARY_COUNT; fn++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            if (!takes(k_tern_tk[fn], dts[d]))
                continue;
            tcase c = tc_make(fn, dts[d]);
            c.dt[0] = dts[d]; /* WHERE: the condition is out */
            c.alpha = tern_alpha(fn, dts[d], 1);
            c.inplace = true;
            run_tcase(&c, "");
            c.n_in = 2;
            c.other = tern_other(fn, dts[d], 0);
            run_tcase(&c, "");
            if (dts[d] == F32) {
                c.ly[0] = c.oly = LY_TRANS;
                c.ly[1] = LY_ALL0;
                run_tcase(&c, "");
            }
        }
    static const tpu_dtype dts2[] = {F32, F64, BF16, I32, BOOL};
    for (int fn = 0; fn < TPU_TERNARY_COUNT; fn++)
        for (size_t d = 0; d < sizeof dts2 / sizeof dts2[0]; d++) {
            if (!takes(k_tern_tk[fn], dts2[d]))
                continue;
            for (int rows = -1; rows <= 0; rows++)
                for (int n_in = 2; n_in <= 3; n_in++) {
                    tcase c = tc_make(fn, dts2[d]);
                    c.rows = rows;
                    c.n_in = n_in;
                    c.alpha = tern_alpha(fn, dts2[d], 2);
                    c.other = tern_other(fn, dts2[d], 1);
                    run_tcase(&c, "");
                }
        }
}

/* tpu_op_check: every function against every common dtype; n_in 1 and 4;
 * the named refusals. */
static void test_ternary_refusals(void) {
    unsigned char mem[96];
    memset(mem, 0, sizeof mem);
    tpu_tensor t = {.data = mem, .sizes = {2}, .strides = {1}, .ndim = 1, .dtype = F32,
                    .storage = mem, .storage_nbytes = 32};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_TERNARY;
    op.n_in = 3;
    op.in[0] = op.in[1] = op.in[2] = t;
    op.out = t;
    op.out.data = op.out.storage = mem + 48;
    op.out.storage_nbytes = 48;
    op.p.ew.alpha = sc(1, 1);
    CHECK(tpu_op_fn_count(TPU_OP_TERNARY) == TPU_TERNARY_COUNT);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_TERNARY, TPU_TERNARY_COUNT), "invalid") == 0);
    static const char *names[] = {"where", "addcmul", "addcdiv", "lerp"};
    for (int f = 0; f < TPU_TERNARY_COUNT; f++) {
        CHECK(strcmp(tpu_op_fn_name(TPU_OP_TERNARY, f), names[f]) == 0);
        for (int d = 0; d < TPU_DTYPE_COUNT; d++)
            for (int n_in = 2; n_in <= 3; n_in++) {
                tpu_dtype dt = (tpu_dtype)d;
                op.fn = f;
                op.n_in = n_in;
                op.in[0].dtype = f == TPU_TERNARY_WHERE ? BOOL : dt;
                op.in[1].dtype = op.in[2].dtype = op.out.dtype = dt;
                op.p.ew.common = dt;
                bool want = takes(k_tern_tk[f], dt);
                tpu_status st = tpu_op_check(&op);
                CHECK(want ? st == TPU_OK : st == TPU_ERR_UNSUPPORTED_DTYPE);
                CHECK(tpu_op_fn_takes(TPU_OP_TERNARY, f, dt) == want);
                if ((st == TPU_OK) != want)
                    fprintf(stderr, "    check of %s with common %s n_in %d: %s (%s)\n", names[f],
                            dt_name(dt), n_in, tpu_status_str(st), tpu_last_error_message());
                else if (!want)
                    CHECK_CONTAINS(tpu_last_error_message(), names[f]);
            }
    }
    op.in[0].dtype = op.in[1].dtype = op.in[2].dtype = op.out.dtype = op.p.ew.common = F32;
    /* The named refusals. */
    static const struct {
        int fn;
        tpu_dtype dt;
    } bad[] = {{TPU_TERNARY_ADDCDIV, I32}, {TPU_TERNARY_ADDCDIV, I64}, {TPU_TERNARY_ADDCDIV, U8},
               {TPU_TERNARY_ADDCDIV, BOOL}, {TPU_TERNARY_LERP, I8}, {TPU_TERNARY_LERP, I32},
               {TPU_TERNARY_LERP, BOOL},  {TPU_TERNARY_ADDCMUL, BOOL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        op.fn = bad[i].fn;
        op.n_in = 3;
        op.in[0].dtype = op.in[1].dtype = op.in[2].dtype = op.out.dtype = op.p.ew.common = bad[i].dt;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
        CHECK_CONTAINS(tpu_last_error_message(), names[bad[i].fn]);
        /* Float tensors do not make an integer common acceptable. */
        op.in[0].dtype = op.in[1].dtype = op.in[2].dtype = op.out.dtype = F32;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
    }
    /* Arity: 2 or 3 inputs. */
    op.in[0].dtype = op.in[1].dtype = op.in[2].dtype = op.out.dtype = op.p.ew.common = F32;
    for (int f = 0; f < TPU_TERNARY_COUNT; f++) {
        op.fn = f;
        op.in[0].dtype = f == TPU_TERNARY_WHERE ? BOOL : F32;
        for (int n_in = 0; n_in <= 4; n_in++) {
            op.n_in = n_in;
            tpu_status st = tpu_op_check(&op);
            if (n_in == 2 || n_in == 3) {
                CHECK_OK(st);
            } else {
                CHECK_STATUS(st, TPU_ERR_INVALID_ARG);
                CHECK_CONTAINS(tpu_last_error_message(), "n_in");
            }
        }
    }
    op.in[0].dtype = F32;
    op.n_in = 3;
    op.fn = TPU_TERNARY_COUNT;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.fn = -1;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.fn = TPU_TERNARY_ADDCMUL;
    op.p.ew.common = (tpu_dtype)99;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.p.ew.common = F32;
    /* in[2] of other sizes than out: refused. */
    op.in[2].sizes[0] = 3;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_SHAPE);
    op.in[2].sizes[0] = 2;
    /* out overlapping in[1] without being the same view: refused. */
    op.out = t;
    op.out.data = mem + 4;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    /* out as the same view as in[0]: allowed (in place). */
    op.out = t;
    op.in[1].data = mem + 16;
    op.in[2].data = mem + 16;
    op.in[2].sizes[0] = 2;
    op.in[1].storage = op.in[2].storage = mem;
    CHECK_OK(tpu_op_check(&op));
}

int main(void) {
    test_refusals();
    test_ternary_refusals();
    test_functions();
    test_mixed();
    test_inplace();
    test_pow_scalar_exponents();
    test_empty_and_scalar();
    test_ternary_functions();
    test_ternary_mixed();
    test_ternary_inplace_empty();
    tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    tpu_kernels_set_reference(false);
    printf("%d element-wise cases, %d run as flat runs\n", g_cases, g_spans);
    CHECK(g_spans > 0);
    return check_report();
}
