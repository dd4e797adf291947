/* Softmax kernel tests (TPU_OP_SOFTMAX: softmax, log_softmax and their
 * backwards) against expectations computed here, in long double, by the
 * definitions:
 *   softmax_i          = exp(x_i - max) / sum_j exp(x_j - max)
 *   log_softmax_i      = x_i - max - log(sum_j exp(x_j - max))
 *   softmax_backward_i = y_i (g_i - sum_j g_j y_j)
 *   log_softmax_bwd_i  = g_i - exp(y_i) sum_j g_j
 * with PyTorch's rules for special values: the row max is NaN if any
 * element is NaN (so the whole row is NaN), +inf in a row makes the max
 * inf and exp(inf - inf) a NaN (the whole row is NaN), an all -inf row is
 * NaN (-inf - -inf), and large magnitudes (1e30, 0.9 * the dtype's max)
 * do not overflow because the max is subtracted first.
 *
 * Coverage: every function; out/in dtypes f32, f64, f16, bf16 and
 * half_to_float (f16 in, f32 out; for the backwards, f32 grad and output
 * giving an f16 grad_input, as PyTorch's _softmax_backward_data); dims 0,
 * middle and last of 1-d to 4-d tensors with row lengths 1, 7, 255, 256,
 * 257, 3000 (and a 0-d tensor described as 1-d of size 1); zero-size rows
 * and zero rows; layouts contiguous, transposed (reversed strides: the dim
 * is not innermost, or dim 0 is), negative strides, padded (gaps between
 * rows and between higher dims) and misaligned (1 byte off: the fast path
 * must decline). Gaps of the inputs hold NaN, so a kernel reading one
 * makes its row NaN; out starts as a sentinel and bytes outside its view
 * must stay untouched.
 *
 * Each op runs in reference mode and in fast mode at every ISA level, with
 * nth = 1, 2, 3 and 7: bit-identical for every nth within a mode, each
 * within tolerance of the expectation, avx2 and avx512 bit-identical (NaN
 * payloads aside), reference and fast within tolerance of each other.
 *
 * Tolerances, relative to the row's scale s (forward: the row's largest
 * output; log_softmax: the largest |output| + 1, since log(sum) carries an
 * absolute error equal to the sum's relative error; backward: the largest
 * |y_i| (|g_i| + sum |g_j y_j|), log backward: |g_i| + exp(y_i) sum |g_j|,
 * the magnitudes of the terms that cancel):
 *   - f32 compute (f32, f16, bf16 operands): F32_ULPS = 6 units of 2^-23 s.
 *     The fast path (contiguous f32 forward rows) has: x - max rounded in
 *     f32 (relative 2^-24 |d| on exp(d), at most 0.2 units of y_max since
 *     y_i |d_i| <= y_max / e), vecmath exp within 2 ulp (tpu_vm_max_ulp,
 *     checked), the f64 sum of those (relative 2 ulp), 1 / sum rounded
 *     to f32 (0.5) and the product rounded to f32 (0.5): about 5.2 units.
 *     log_softmax: 0.5 ulp of |x - max| <= |out|, log(sum) off by the
 *     sum's relative error (2 units) and rounded to f32 (0.5 ulp of
 *     log(sum) <= |out|), the difference rounded (0.5): about 3.5 units of
 *     s. The reference computes in f64 and rounds once: 0.5 units. (The
 *     largest errors seen are printed; about 0.9 and 0.5 units.)
 *   - f64: F64_ULPS units of 2^-52 s: exp/log within 1 ulp, x - max
 *     rounded once, a recursive f64 sum over up to 3000 terms (its error
 *     grows like sqrt(n) ulps in practice, n in the worst case; the largest
 *     seen is printed).
 *   - f16/bf16 out: 1 ulp of the out dtype at the expected value plus the
 *     f32 tolerance (one rounding of a nearly exact value, through f32).
 * Infinite expectations (after rounding to out's dtype) must match
 * exactly, NaN must be NaN.
 *
 * Also: tpu_op_check's refusals (dim out of range, integer dtypes, wrong
 * n_in, mismatched sizes, out overlapping an input) and
 * tpu_op_max_threads <= the number of rows. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel_test.h"
#include "vecmath.h"

#define F32_ULPS 6.0
#define F64_ULPS 32.0

enum { L_CONTIG, L_TRANS, L_NEG, L_PAD, L_ODD, L_COUNT };
static const char *const k_layout_names[L_COUNT] = {"contig", "trans", "neg", "pad", "odd"};

static const char *const k_fn_names[TPU_SOFTMAX_COUNT] = {"softmax", "log_softmax",
                                                          "softmax_backward",
                                                          "log_softmax_backward",
                                                          "safe_softmax"};

static bool is_bwd(int fn) {
    return fn == TPU_SOFTMAX_BACKWARD || fn == TPU_SOFTMAX_LOG_BACKWARD;
}

static const char *dt_name(tpu_dtype dt) {
    return dt == F32 ? "f32" : dt == F64 ? "f64" : dt == F16 ? "f16" : dt == BF16 ? "bf16" : "?";
}

/* ------------------------------------------------------------ buffers */

typedef struct {
    tpu_tensor t;
    unsigned char *alloc, *pristine;
    size_t bytes;
} sbuf;

enum { FILL_NAN, FILL_SENTINEL };

/* One element slot filled with the dtype's quiet NaN, or the sentinel
 * 0x7b bytes (a large finite number in every float dtype, never a valid
 * output here). */
static void fill_slot(unsigned char *p, tpu_dtype dt, int fill) {
    if (fill == FILL_SENTINEL) {
        memset(p, 0x7b, t_size(dt));
        return;
    }
    switch (dt) {
    case TPU_DTYPE_F32: { uint32_t v = 0x7fc00000u; memcpy(p, &v, 4); break; }
    case TPU_DTYPE_F64: { uint64_t v = 0x7ff8000000000000u; memcpy(p, &v, 8); break; }
    case TPU_DTYPE_F16: { uint16_t v = 0x7e00u; memcpy(p, &v, 2); break; }
    default: { uint16_t v = 0x7fc0u; memcpy(p, &v, 2); break; }
    }
}

/* A tensor of `layout` over sizes; every slot of the buffer (gaps too)
 * starts as `fill`. */
static void sb_make(sbuf *b, tpu_dtype dt, int ndim, const int64_t *sizes, int layout, int fill) {
    memset(b, 0, sizeof *b);
    b->t.ndim = ndim;
    b->t.dtype = dt;
    for (int d = 0; d < ndim; d++)
        b->t.sizes[d] = sizes[d];
    int64_t stride = 1, numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= sizes[d];
    if (layout == L_TRANS) {
        for (int d = 0; d < ndim; d++) {
            b->t.strides[d] = stride;
            stride *= sizes[d] > 0 ? sizes[d] : 1;
        }
    } else {
        for (int d = ndim - 1; d >= 0; d--) {
            b->t.strides[d] = stride;
            stride *= (sizes[d] > 0 ? sizes[d] : 1) + (layout == L_PAD ? (d == ndim - 1 ? 3 : 1) : 0);
        }
    }
    if (layout == L_NEG && ndim > 0) {
        b->t.strides[0] = -b->t.strides[0];
        if (ndim > 1)
            b->t.strides[ndim - 1] = -b->t.strides[ndim - 1];
    }
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < ndim && numel > 0; d++) {
        int64_t span = b->t.strides[d] * (sizes[d] - 1);
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    size_t es = t_size(dt), skew = layout == L_ODD ? 1 : 0;
    b->bytes = (size_t)(hi - lo + 1) * es + skew;
    b->alloc = malloc(b->bytes);
    b->pristine = malloc(b->bytes);
    b->alloc[0] = 0x5a;
    for (size_t i = skew; i + es <= b->bytes; i += es)
        fill_slot(b->alloc + i, dt, fill);
    b->t.data = b->alloc + (size_t)(-lo) * es + skew;
    b->t.storage = b->alloc;
    b->t.storage_nbytes = (int64_t)b->bytes;
}

static void sb_free(sbuf *b) {
    free(b->alloc);
    free(b->pristine);
}

/* Address of element i of row r: r counts the coordinates other than
 * `dim` in row-major order (by division). */
static unsigned char *row_elem(const tpu_tensor *t, int dim, int64_t r, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t c;
        if (d == dim) {
            c = i;
        } else {
            c = r % t->sizes[d];
            r /= t->sizes[d];
        }
        off += c * t->strides[d];
    }
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

static void store_val(unsigned char *p, tpu_dtype dt, double v) {
    switch (dt) {
    case TPU_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case TPU_DTYPE_F64: memcpy(p, &v, 8); break;
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    default: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    }
}

static double dt_max(tpu_dtype dt) {
    return dt == F64 ? DBL_MAX : dt == F32 ? FLT_MAX : dt == F16 ? 65504.0 : 0x1.fep127;
}

/* ------------------------------------------------------- expectations */

/* One row by the definitions; *scale gets the row's tolerance scale. */
static void expect_row(int fn, int64_t n, const long double *x, const long double *y,
                       long double *e, long double *scale) {
    long double s = 0;
    if (!is_bwd(fn)) {
        long double mx = -INFINITY;
        bool nan = false;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(x[i]))
                nan = true;
            else if (x[i] > mx)
                mx = x[i];
        }
        if (nan)
            mx = NAN;
        if (fn == TPU_SOFTMAX_SAFE && mx == -INFINITY) {
            /* _safe_softmax: a row with every element -inf gives 0. */
            for (int64_t i = 0; i < n; i++)
                e[i] = 0;
            *scale = 0;
            return;
        }
        long double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            e[i] = expl(x[i] - mx);
            sum += e[i];
        }
        long double lse = logl(sum);
        for (int64_t i = 0; i < n; i++) {
            e[i] = fn == TPU_SOFTMAX_LOG ? (x[i] - mx) - lse : e[i] / sum;
            if (isfinite(e[i]) && fabsl(e[i]) > s)
                s = fabsl(e[i]);
        }
        if (fn == TPU_SOFTMAX_LOG)
            s += 1;
    } else if (fn == TPU_SOFTMAX_BACKWARD) {
        long double acc = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            acc += x[i] * y[i];
            mag += fabsl(x[i] * y[i]);
        }
        for (int64_t i = 0; i < n; i++) {
            e[i] = y[i] * (x[i] - acc);
            long double m = fabsl(y[i]) * (fabsl(x[i]) + mag);
            if (isfinite(m) && m > s)
                s = m;
        }
    } else {
        long double sum = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            sum += x[i];
            mag += fabsl(x[i]);
        }
        for (int64_t i = 0; i < n; i++) {
            long double p = expl(y[i]);
            e[i] = x[i] - p * sum;
            long double m = fabsl(x[i]) + p * mag;
            if (isfinite(m) && m > s)
                s = m;
        }
    }
    *scale = s;
}

/* The expectation rounded to dt (only used to tell overflow to +-inf). */
static double quant(long double v, tpu_dtype dt) {
    double d = (double)v;
    switch (dt) {
    case TPU_DTYPE_F64: return d;
    case TPU_DTYPE_F32: return isfinite(d) && fabs(d) > 0x1.ffffffp127 ? copysign(INFINITY, d) : (float)d;
    case TPU_DTYPE_F16: return t_round_f16(d);
    default: return t_round_bf16(d);
    }
}

/* One ulp of dt at |v| (subnormal spacing below the normals). */
static double ulp_of(tpu_dtype dt, double v) {
    int mant = dt == F16 ? 10 : dt == BF16 ? 7 : dt == F32 ? 23 : 52;
    int emin = dt == F16 ? -14 : dt == F64 ? -1022 : -126;
    v = fabs(v);
    int e = v == 0 || !isfinite(v) || ilogb(v) < emin ? emin : ilogb(v);
    return ldexp(1.0, e - mant);
}

/* ---------------------------------------------------------- the cases */

typedef struct {
    const char *label;
    int ndim;
    int64_t sizes[4];
    int dim;
    int fn;
    tpu_dtype out, x, y; /* y: in[1] of the backwards */
    int lo, lx, ly;      /* layouts of out, in[0], in[1] */
    bool special;
    const double *fixed_x, *fixed_y; /* every row's values instead of random ones */
} scase;

static bool f64_compute(const scase *c) {
    return c->out == F64 && c->x == F64 && (!is_bwd(c->fn) || c->y == F64);
}

static double tol_of(const scase *c, double want, double scale) {
    if (f64_compute(c))
        return F64_ULPS * 0x1p-52 * scale;
    double t = F32_ULPS * 0x1p-23 * scale;
    if (c->out == F16 || c->out == BF16)
        t += ulp_of(c->out, want);
    return t;
}

/* Largest error seen, in units of the tolerance's scale, per class. */
enum { C_F32_REF, C_F32_FAST, C_F64, C_F16, C_BF16, C_COUNT };
static double g_worst[C_COUNT];
static const char *const k_class_names[C_COUNT] = {"f32 ref (2^-23 s)", "f32 fast (2^-23 s)",
                                                   "f64 (2^-52 s)", "f16 out (ulps + f32)",
                                                   "bf16 out (ulps + f32)"};

static void note_error(const scase *c, bool fast_used, double err, double want, double scale) {
    int k;
    double units;
    if (f64_compute(c)) {
        k = C_F64;
        units = scale > 0 ? err / (0x1p-52 * scale) : 0;
    } else if (c->out == F16 || c->out == BF16) {
        k = c->out == F16 ? C_F16 : C_BF16;
        units = err / (ulp_of(c->out, want) + 0x1p-23 * scale);
    } else {
        k = fast_used ? C_F32_FAST : C_F32_REF;
        units = scale > 0 ? err / (0x1p-23 * scale) : 0;
    }
    if (units > g_worst[k])
        g_worst[k] = units;
}

/* Does got match want (NaN <-> NaN, infinities exactly, else within tol)? */
static bool matches(double got, long double want, tpu_dtype dt, double tol, double *err) {
    *err = 0;
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    double q = quant(want, dt);
    if (isinf(q) || isinf(got))
        return got == q;
    *err = (double)fabsl((long double)got - want);
    return *err <= tol;
}

/* Fills row r's values of x (and y for the backwards) as doubles. */
static void gen_row(const scase *c, int64_t r, int64_t n, double *xv, double *yv) {
    bool bwd = is_bwd(c->fn);
    if (c->fixed_x) {
        for (int64_t i = 0; i < n; i++) {
            xv[i] = c->fixed_x[i];
            if (bwd)
                yv[i] = c->fixed_y[i];
        }
        return;
    }
    static const double spreads[3] = {4, 30, 120};
    double spread = spreads[r % 3];
    if (!bwd) {
        for (int64_t i = 0; i < n; i++)
            xv[i] = (2 * t_unit() - 1) * spread;
    } else {
        /* y: a true softmax / log_softmax of a random row; g in [-2, 2]. */
        long double mx = -INFINITY, sum = 0;
        long double *z = malloc((size_t)n * sizeof *z);
        for (int64_t i = 0; i < n; i++) {
            z[i] = (2 * t_unit() - 1) * (r % 2 ? 4 : 30);
            mx = z[i] > mx ? z[i] : mx;
        }
        for (int64_t i = 0; i < n; i++)
            sum += expl(z[i] - mx);
        for (int64_t i = 0; i < n; i++) {
            yv[i] = c->fn == TPU_SOFTMAX_BACKWARD ? (double)(expl(z[i] - mx) / sum)
                                                  : (double)(z[i] - mx - logl(sum));
            xv[i] = (2 * t_unit() - 1) * 2;
        }
        free(z);
    }
    if (!c->special || n == 0)
        return;
    int64_t p = (r * 7 + 3) % n, p2 = (r * 13) % n;
    /* huge: 0.9 of the dtype's max, except f64 grads, whose f64 sums
     * would overflow (the kernel computes in f64, the expectation in long
     * double): 1e300 there, so that sums of 3000 terms stay finite. */
    double big = c->x == F16 ? 2e4 : 1e30;
    double huge = bwd && c->x == F64 ? 1e300 : 0.9 * dt_max(c->x);
    double offset = c->x == F64 ? 1e12 : c->x == F32 ? 1e5 : 1000;
    switch (r % 8) {
    case 1: xv[p] = INFINITY; break;
    case 2:
        if (bwd)
            yv[p] = NAN;
        else
            xv[p] = NAN;
        break;
    case 3:
        if (bwd)
            xv[p] = NAN;
        else
            for (int64_t i = 0; i < n; i++)
                xv[i] = -INFINITY;
        break;
    case 4:
        if (bwd) {
            yv[p] = c->fn == TPU_SOFTMAX_BACKWARD ? 0.0 : -INFINITY;
            xv[p2] = -INFINITY;
        } else {
            xv[p] = -INFINITY;
            xv[p2] = -INFINITY;
        }
        break;
    case 5: /* large magnitudes: no overflow, the max is subtracted first */
        for (int64_t i = 0; i < n; i++)
            xv[i] = (t_rand() % 2 ? 1 : -1) * big * (1 - (double)(t_rand() % 4) * 0x1p-8);
        break;
    case 6:
        for (int64_t i = 0; i < n; i++)
            xv[i] = (t_rand() % 2 ? 1 : -1) * huge * (1 - (double)(t_rand() % 4) * 0x1p-3);
        break;
    case 7:
        if (!bwd)
            for (int64_t i = 0; i < n; i++)
                xv[i] = offset + (2 * t_unit() - 1) * 4;
        break;
    default: break;
    }
}

static const struct {
    bool ref;
    tpu_isa isa;
    const char *name;
} k_modes[] = {
    {true, TPU_ISA_AVX512, "ref"},
    {false, TPU_ISA_PORTABLE, "fast/portable"},
    {false, TPU_ISA_AVX2, "fast/avx2"},
    {false, TPU_ISA_AVX512, "fast/avx512"},
};
enum { N_MODES = sizeof k_modes / sizeof k_modes[0] };
static const int k_nths[] = {1, 2, 3, 7};
enum { N_NTHS = sizeof k_nths / sizeof k_nths[0] };

static int g_cases;
static long long g_elements;

static void describe(const scase *c, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "%s %s dim %d [", c->label, k_fn_names[c->fn], c->dim);
    for (int d = 0; d < c->ndim; d++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%lld", d ? "x" : "", (long long)c->sizes[d]);
    if (is_bwd(c->fn))
        snprintf(buf + k, cap - (size_t)k, "] out %s/%s g %s/%s y %s/%s", dt_name(c->out),
                 k_layout_names[c->lo], dt_name(c->x), k_layout_names[c->lx], dt_name(c->y),
                 k_layout_names[c->ly]);
    else
        snprintf(buf + k, cap - (size_t)k, "] out %s/%s x %s/%s", dt_name(c->out),
                 k_layout_names[c->lo], dt_name(c->x), k_layout_names[c->lx]);
}

/* Builds the case's op, runs it in every mode and nth, checks everything.
 * If want_out is given, the expectation (row-major by (row, i)) is copied
 * there. */
static void run_case(const scase *c, long double *want_out) {
    char what[256];
    describe(c, what, sizeof what);
    bool bwd = is_bwd(c->fn);
    int64_t len = c->sizes[c->dim], rows = 1, numel = 1;
    for (int d = 0; d < c->ndim; d++) {
        numel *= c->sizes[d];
        if (d != c->dim)
            rows *= c->sizes[d];
    }
    g_cases++;
    g_elements += numel;
    sbuf out, x, y;
    sb_make(&out, c->out, c->ndim, c->sizes, c->lo, FILL_SENTINEL);
    sb_make(&x, c->x, c->ndim, c->sizes, c->lx, FILL_NAN);
    if (bwd)
        sb_make(&y, c->y, c->ndim, c->sizes, c->ly, FILL_NAN);
    size_t cnt = (size_t)(numel > 0 ? numel : 1);
    long double *X = malloc(cnt * sizeof *X), *Y = malloc(cnt * sizeof *Y);
    long double *E = malloc(cnt * sizeof *E);
    long double *S = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *S);
    double *xv = malloc((size_t)(len > 0 ? len : 1) * sizeof *xv);
    double *yv = malloc((size_t)(len > 0 ? len : 1) * sizeof *yv);
    for (int64_t r = 0; r < rows && len > 0; r++) {
        gen_row(c, r, len, xv, yv);
        for (int64_t i = 0; i < len; i++) {
            unsigned char *px = row_elem(&x.t, c->dim, r, i);
            store_val(px, c->x, xv[i]);
            X[r * len + i] = t_read_f(px, c->x);
            if (bwd) {
                unsigned char *py = row_elem(&y.t, c->dim, r, i);
                store_val(py, c->y, yv[i]);
                Y[r * len + i] = t_read_f(py, c->y);
            }
        }
        expect_row(c->fn, len, X + r * len, Y + r * len, E + r * len, &S[r]);
    }
    if (want_out)
        memcpy(want_out, E, cnt * sizeof *E);
    memcpy(out.pristine, out.alloc, out.bytes);
    memcpy(x.pristine, x.alloc, x.bytes);
    if (bwd)
        memcpy(y.pristine, y.alloc, y.bytes);

    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SOFTMAX;
    op.fn = c->fn;
    op.n_in = bwd ? 2 : 1;
    op.out = out.t;
    op.in[0] = x.t;
    if (bwd)
        op.in[1] = y.t;
    op.p.softmax.dim = c->dim;
    tpu_status st = tpu_op_check(&op);
    CHECK_OK(st);
    if (st != TPU_OK) {
        fprintf(stderr, "    case: %s\n", what);
        goto done;
    }
    int mt = tpu_op_max_threads(&op);
    CHECK(mt >= 1 && mt <= (rows > 1 ? rows : 1));

    /* Bytes of out's view, for the untouched-gaps check. */
    size_t es = t_size(c->out);
    unsigned char *inview = calloc(out.bytes, 1);
    size_t *ooff = malloc(cnt * sizeof *ooff); /* byte offset of out element (r, i) */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < len; i++) {
            ooff[r * len + i] = (size_t)(row_elem(&out.t, c->dim, r, i) - out.alloc);
            memset(inview + ooff[r * len + i], 1, es);
        }
    /* A fast path can apply only to f32 -> f32 forward rows. */
    bool fast_possible = !bwd && c->out == F32 && c->x == F32;

    unsigned char *res[N_MODES], *cur = malloc(cnt * es);
    for (int m = 0; m < N_MODES; m++) {
        res[m] = malloc(cnt * es);
        if (!fast_possible && m != 0 && m != N_MODES - 1) {
            /* No fast variant can apply (the fast kernel hands the op to
             * the reference at every level): fast mode at the top level
             * only, the result stands in for the others. */
            continue;
        }
        int64_t bad = 0, differ = 0, touched = 0, failed_runs = 0;
        for (int k = 0; k < N_NTHS; k++) {
            memcpy(out.alloc, out.pristine, out.bytes);
            tpu_kernels_set_reference(k_modes[m].ref);
            CHECK_OK(tpu_kernels_set_isa(k_modes[m].isa));
            st = run_shares(&op, k_nths[k]);
            if (st != TPU_OK) {
                failed_runs++;
                fprintf(stderr, "    %s [%s nth=%d]: %s: %s\n", what, k_modes[m].name, k_nths[k],
                        tpu_status_str(st), tpu_last_error_message());
            }
            for (int64_t e = 0; e < numel; e++)
                memcpy(cur + e * (int64_t)es, out.alloc + ooff[e], es);
            for (size_t b = 0; b < out.bytes; b++)
                if (!inview[b] && out.alloc[b] != out.pristine[b])
                    touched++;
            if (k > 0) {
                if (numel > 0 && memcmp(cur, res[m], (size_t)numel * es) != 0) {
                    differ++;
                    fprintf(stderr, "    %s [%s]: nth=%d differs from nth=1\n", what,
                            k_modes[m].name, k_nths[k]);
                }
                continue;
            }
            memcpy(res[m], cur, cnt * es);
            bool fast_used = fast_possible && !k_modes[m].ref &&
                             tpu_kernels_get_isa() >= TPU_ISA_AVX2;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t i = 0; i < len; i++) {
                    int64_t e = r * len + i;
                    double got = t_read_f(cur + e * (int64_t)es, c->out), err;
                    double tol = tol_of(c, (double)E[e], (double)S[r]);
                    if (!matches(got, E[e], c->out, tol, &err)) {
                        if (bad++ < 3)
                            fprintf(stderr, "    %s [%s]: row %lld elem %lld: got %.10g, want "
                                    "%.10Lg (tol %.3g, scale %.3Lg)\n", what, k_modes[m].name,
                                    (long long)r, (long long)i, got, E[e], tol, S[r]);
                    } else {
                        note_error(c, fast_used, err, (double)E[e], (double)S[r]);
                    }
                }
        }
        CHECK(failed_runs == 0);
        CHECK(bad == 0);
        CHECK(differ == 0);
        CHECK(touched == 0);
        if (touched)
            fprintf(stderr, "    %s [%s]: %lld bytes outside out's view written\n", what,
                    k_modes[m].name, (long long)touched);
    }
    tpu_kernels_set_reference(false);
    tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    if (!fast_possible)
        for (int m = 1; m < N_MODES - 1; m++)
            memcpy(res[m], res[N_MODES - 1], cnt * es);
    /* The inputs are read only. */
    CHECK(memcmp(x.alloc, x.pristine, x.bytes) == 0);
    if (bwd)
        CHECK(memcmp(y.alloc, y.pristine, y.bytes) == 0);
    /* avx2 and avx512 give the same bits (NaN payloads aside); reference
     * and every fast level agree within twice the tolerance. */
    int64_t isa_diff = 0, ref_fast = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < len; i++) {
            int64_t e = r * len + i;
            const unsigned char *a = res[2] + e * (int64_t)es, *b = res[3] + e * (int64_t)es;
            double va = t_read_f(a, c->out), vb = t_read_f(b, c->out), err;
            if (!(isnan(va) && isnan(vb)) && memcmp(a, b, es) != 0)
                isa_diff++;
            double ref = t_read_f(res[0] + e * (int64_t)es, c->out);
            double tol = 2 * tol_of(c, ref, (double)S[r]);
            for (int m = 1; m < N_MODES; m++) {
                double v = t_read_f(res[m] + e * (int64_t)es, c->out);
                if (!matches(v, ref, c->out, tol, &err) && ref_fast++ < 3)
                    fprintf(stderr, "    %s: row %lld elem %lld: %s %.10g vs ref %.10g\n", what,
                            (long long)r, (long long)i, k_modes[m].name, v, ref);
            }
        }
    CHECK(isa_diff == 0);
    CHECK(ref_fast == 0);
    if (isa_diff)
        fprintf(stderr, "    %s: avx2 and avx512 differ in %lld elements\n", what,
                (long long)isa_diff);
    for (int m = 0; m < N_MODES; m++)
        free(res[m]);
    free(cur);
    free(inview);
    free(ooff);
done:
    free(X);
    free(Y);
    free(E);
    free(S);
    free(xv);
    free(yv);
    sb_free(&out);
    sb_free(&x);
    if (bwd)
        sb_free(&y);
}

/* ------------------------------------------------------ the case table */

typedef struct {
    int ndim;
    int64_t sizes[4];
    int dim;
    bool special;
} shape;

static const shape k_shapes[] = {
    /* 1-d (the first: a 0-d tensor as PyTorch hands it over, 1-d of size 1) */
    {1, {1}, 0, 0}, {1, {7}, 0, 0}, {1, {255}, 0, 0}, {1, {256}, 0, 0}, {1, {257}, 0, 0},
    {1, {3000}, 0, 0},
    /* 2-d: last and first dim */
    {2, {5, 257}, 1, 0}, {2, {257, 5}, 0, 0}, {2, {3, 3000}, 1, 0}, {2, {3000, 2}, 0, 0},
    {2, {7, 7}, 0, 0}, {2, {7, 7}, 1, 0}, {2, {9, 256}, 1, 0}, {2, {255, 3}, 0, 0},
    {2, {5, 1}, 1, 0}, {2, {1, 5}, 0, 0},
    /* 3-d: first, middle, last */
    {3, {3, 255, 5}, 1, 0}, {3, {3, 5, 7}, 0, 0}, {3, {3, 5, 7}, 1, 0}, {3, {3, 5, 7}, 2, 0},
    {3, {2, 3, 257}, 2, 0}, {3, {257, 2, 3}, 0, 0}, {3, {5, 1, 7}, 1, 0},
    /* 4-d */
    {4, {2, 3, 5, 7}, 0, 0}, {4, {2, 3, 5, 7}, 1, 0}, {4, {2, 3, 5, 7}, 2, 0},
    {4, {2, 3, 5, 7}, 3, 0}, {4, {2, 256, 3, 2}, 1, 0}, {4, {2, 3, 2, 255}, 3, 0},
    {4, {1, 7, 1, 3}, 2, 0},
    /* zero-size rows, zero rows */
    {3, {3, 0, 5}, 1, 0}, {2, {0, 7}, 1, 0}, {2, {4, 0}, 0, 0}, {1, {0}, 0, 0},
    {2, {0, 7}, 0, 0}, {4, {2, 0, 3, 2}, 3, 0},
    /* special values (inf, NaN, -inf rows, large magnitudes), row kinds r % 8 */
    {2, {8, 300}, 1, 1}, {2, {7, 16}, 0, 1}, {3, {2, 8, 257}, 2, 1}, {3, {4, 7, 4}, 1, 1},
    {2, {8, 1}, 1, 1}, {4, {2, 2, 4, 9}, 3, 1},
};

static const struct {
    const char *name;
    tpu_dtype out, x;         /* forward */
    tpu_dtype bout, bg, by;   /* backward */
} k_dtypes[] = {
    {"f32", F32, F32, F32, F32, F32},
    {"f64", F64, F64, F64, F64, F64},
    {"f16", F16, F16, F16, F16, F16},
    {"bf16", BF16, BF16, BF16, BF16, BF16},
    {"half_to_float", F32, F16, F16, F32, F32},
};

/* Layouts (out, in[0]); in[1] takes the next layout after in[0]'s. */
static const int k_pairs[][2] = {
    {L_CONTIG, L_CONTIG}, {L_TRANS, L_TRANS}, {L_NEG, L_NEG},     {L_PAD, L_PAD},
    {L_ODD, L_ODD},       {L_CONTIG, L_TRANS}, {L_TRANS, L_CONTIG}, {L_PAD, L_NEG},
};
enum { N_PAIRS = sizeof k_pairs / sizeof k_pairs[0] };

static void run_table(void) {
    int rot = 0;
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
        const shape *sh = &k_shapes[s];
        for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++) {
            /* f32 (the fast path's dtype): every layout pair; the others:
             * contiguous and one pair in rotation (all for special rows). */
            int pairs[N_PAIRS], np = 0;
            if (d == 0 || sh->special) {
                for (int p = 0; p < N_PAIRS; p++)
                    pairs[np++] = p;
            } else {
                pairs[np++] = 0;
                pairs[np++] = 1 + rot++ % (N_PAIRS - 1);
            }
            for (int p = 0; p < np; p++)
                for (int fn = 0; fn < TPU_SOFTMAX_COUNT; fn++) {
                    bool bwd = is_bwd(fn);
                    scase c = {
                        .label = k_dtypes[d].name, .ndim = sh->ndim, .dim = sh->dim, .fn = fn,
                        .out = bwd ? k_dtypes[d].bout : k_dtypes[d].out,
                        .x = bwd ? k_dtypes[d].bg : k_dtypes[d].x, .y = k_dtypes[d].by,
                        .lo = k_pairs[pairs[p]][0], .lx = k_pairs[pairs[p]][1],
                        .ly = (k_pairs[pairs[p]][1] + 1) % L_COUNT, .special = sh->special,
                    };
                    memcpy(c.sizes, sh->sizes, sizeof c.sizes);
                    run_case(&c, NULL);
                }
        }
    }
}

/* --------------------------------------------------- known answers */

/* Hand-made rows with known results: the expectation code is checked
 * against them, and the kernels against it (in every mode, f32 contiguous
 * so the fast path runs, and f64). */
static bool same_ld(long double got, double want, double rel) {
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabsl(got - want) <= rel * (1 + fabs(want));
}

static void known_answers(void) {
    static const double ln2 = 0.69314718055994530942;
    static const struct {
        int n;
        double x[4], soft[4], logsoft[4];
    } rows[] = {
        {3, {0, NAN, 1}, {NAN, NAN, NAN}, {NAN, NAN, NAN}},
        {3, {1, INFINITY, 2}, {NAN, NAN, NAN}, {NAN, NAN, NAN}},
        {3, {-INFINITY, -INFINITY, -INFINITY}, {NAN, NAN, NAN}, {NAN, NAN, NAN}},
        {1, {INFINITY}, {NAN}, {NAN}},
        {3, {1e30, 1e30, -1e30}, {0.5, 0.5, 0}, {-ln2, -ln2, -2e30 - ln2}},
        {3, {-INFINITY, 0, -INFINITY}, {0, 1, 0}, {-INFINITY, 0, -INFINITY}},
        {1, {5}, {1}, {0}},
        {4, {3, 3, 3, 3}, {0.25, 0.25, 0.25, 0.25}, {-2 * ln2, -2 * ln2, -2 * ln2, -2 * ln2}},
        {2, {0, ln2}, {1.0 / 3, 2.0 / 3}, {-log(3.0), ln2 - log(3.0)}},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        for (int fn = 0; fn < 2; fn++)
            for (int dt = 0; dt < 2; dt++) {
                tpu_dtype t = dt ? F64 : F32;
                scase c = {.label = "known", .ndim = 2, .sizes = {2, rows[k].n}, .dim = 1,
                           .fn = fn, .out = t, .x = t, .y = t, .fixed_x = rows[k].x};
                long double want[8];
                run_case(&c, want);
                const double *ans = fn == TPU_SOFTMAX_FORWARD ? rows[k].soft : rows[k].logsoft;
                /* f32 rows hold x rounded to f32 (1e30, ln 2): compare loosely */
                bool ok = true;
                for (int i = 0; i < rows[k].n; i++)
                    ok = ok && same_ld(want[i], ans[i], t == F32 ? 1e-7 : 1e-15);
                CHECK(ok);
                if (!ok)
                    fprintf(stderr, "    known row %zu %s: expectation differs\n", k,
                            k_fn_names[fn]);
            }
    /* safe_softmax: softmax's answers, but 0 for the all -inf row. */
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        scase c = {.label = "known", .ndim = 2, .sizes = {2, rows[k].n}, .dim = 1,
                   .fn = TPU_SOFTMAX_SAFE, .out = F64, .x = F64, .y = F64, .fixed_x = rows[k].x};
        long double want[8];
        run_case(&c, want);
        const bool all_ninf = k == 2;
        bool ok = true;
        for (int i = 0; i < rows[k].n; i++)
            ok = ok && same_ld(want[i], all_ninf ? 0.0 : rows[k].soft[i], 1e-15);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "    known row %zu safe_softmax: expectation differs\n", k);
    }
    /* The backwards: g = (1, 2, 3), y = softmax (0.2, 0.3, 0.5). */
    static const double g[3] = {1, 2, 3}, y[3] = {0.2, 0.3, 0.5};
    static const double sb[3] = {-0.26, -0.09, 0.35}, lb[3] = {-0.2, 0.2, 0};
    double ly[3];
    for (int i = 0; i < 3; i++)
        ly[i] = log(y[i]);
    for (int dt = 0; dt < 2; dt++)
        for (int fn = TPU_SOFTMAX_BACKWARD; fn <= TPU_SOFTMAX_LOG_BACKWARD; fn++) {
            tpu_dtype t = dt ? F64 : F32;
            scase c = {.label = "known", .ndim = 1, .sizes = {3}, .dim = 0, .fn = fn, .out = t,
                       .x = t, .y = t, .fixed_x = g,
                       .fixed_y = fn == TPU_SOFTMAX_BACKWARD ? y : ly};
            long double want[3];
            run_case(&c, want);
            const double *ans = fn == TPU_SOFTMAX_BACKWARD ? sb : lb;
            /* y is rounded to f32 for f32 ops: compare loosely there. */
            bool ok = true;
            for (int i = 0; i < 3; i++)
                ok = ok && fabsl(want[i] - ans[i]) <= (t == F32 ? 1e-6L : 1e-15L);
            CHECK(ok);
        }
}

/* ---------------------------------------------------- tpu_op_check */

static tpu_op base_op(int fn, float *buf, int64_t nbuf) {
    /* out: buf[0..35) as 5x7; in[0]: buf[40..75); in[1]: buf[80..115). */
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SOFTMAX;
    op.fn = fn;
    op.n_in = is_bwd(fn) ? 2 : 1;
    for (int k = 0; k < 3; k++) {
        tpu_tensor t = {.data = buf + 40 * k, .sizes = {5, 7}, .strides = {7, 1}, .ndim = 2,
                        .dtype = F32, .storage = buf, .storage_nbytes = nbuf * 4};
        if (k == 0)
            op.out = t;
        else
            op.in[k - 1] = t;
    }
    op.p.softmax.dim = 1;
    return op;
}

static void check_refusals(void) {
    enum { NB = 256 };
    float *buf = calloc(NB, sizeof *buf);
    for (int fn = 0; fn < TPU_SOFTMAX_COUNT; fn++) {
        bool bwd = is_bwd(fn);
        tpu_op op = base_op(fn, buf, NB);
        CHECK_OK(tpu_op_check(&op));
        op.p.softmax.dim = 0;
        CHECK_OK(tpu_op_check(&op));

        /* dim out of range */
        op.p.softmax.dim = -1;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        CHECK_CONTAINS(tpu_last_error_message(), "dim -1");
        op.p.softmax.dim = 2;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        CHECK_CONTAINS(tpu_last_error_message(), "dim 2");
        op.p.softmax.dim = INT32_MAX;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        op.p.softmax.dim = INT32_MIN;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        /* a 0-d tensor has no dim 0 (it is described as 1-d of size 1) */
        op = base_op(fn, buf, NB);
        op.out.ndim = op.in[0].ndim = op.in[1].ndim = 0;
        op.p.softmax.dim = 0;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        op.out.ndim = op.in[0].ndim = op.in[1].ndim = 1;
        op.out.sizes[0] = op.in[0].sizes[0] = op.in[1].sizes[0] = 1;
        CHECK_OK(tpu_op_check(&op));

        /* integer and bool dtypes, in any operand */
        static const tpu_dtype ints[] = {I8, U8, I16, I32, I64, BOOL};
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            for (int which = 0; which < (bwd ? 3 : 2); which++) {
                op = base_op(fn, buf, NB);
                tpu_tensor *t = which == 0 ? &op.out : &op.in[which - 1];
                t->dtype = ints[k];
                /* keep the bytes inside the storage whatever the size */
                CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
            }
        }
        /* every float pairing is taken (half_to_float and its backward) */
        op = base_op(fn, buf, NB);
        op.in[0].dtype = F16;
        op.out.dtype = bwd ? F16 : F32;
        CHECK_OK(tpu_op_check(&op));

        /* wrong n_in */
        op = base_op(fn, buf, NB);
        op.n_in = bwd ? 1 : 2;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        CHECK_CONTAINS(tpu_last_error_message(), bwd ? "expected 2" : "expected 1");
        op.n_in = 0;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        op.n_in = 3;
        CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);

        /* mismatched sizes and ranks */
        for (int which = 0; which < (bwd ? 2 : 1); which++) {
            op = base_op(fn, buf, NB);
            op.in[which].sizes[1] = 6;
            CHECK_STATUS(tpu_op_check(&op), TPU_ERR_SHAPE);
            op = base_op(fn, buf, NB);
            op.in[which].sizes[0] = 4;
            CHECK_STATUS(tpu_op_check(&op), TPU_ERR_SHAPE);
            op = base_op(fn, buf, NB);
            op.in[which].ndim = 3;
            op.in[which].sizes[2] = 1;
            op.in[which].strides[2] = 1;
            CHECK_STATUS(tpu_op_check(&op), TPU_ERR_SHAPE);
        }

        /* out overlapping an input: the same view, and a shifted one */
        for (int which = 0; which < (bwd ? 2 : 1); which++) {
            op = base_op(fn, buf, NB);
            op.out = op.in[which];
            CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
            CHECK_CONTAINS(tpu_last_error_message(), "overlaps");
            op = base_op(fn, buf, NB);
            op.out.data = (float *)op.in[which].data + 1;
            CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
        }
        if (bwd) { /* grad and output may be the same tensor (both read) */
            op = base_op(fn, buf, NB);
            op.in[1] = op.in[0];
            CHECK_OK(tpu_op_check(&op));
        }
        /* out overlapping itself */
        op = base_op(fn, buf, NB);
        op.out.strides[1] = 0;
        CHECK(tpu_op_check(&op) != TPU_OK);
    }
    /* functions outside the enum */
    tpu_op op = base_op(0, buf, NB);
    op.fn = TPU_SOFTMAX_COUNT;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    op.fn = -1;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SOFTMAX, TPU_SOFTMAX_LOG), "log_softmax") == 0);
    CHECK(tpu_op_fn_count(TPU_OP_SOFTMAX) == TPU_SOFTMAX_COUNT);
    free(buf);
}

/* ------------------------------------------------- max_threads */

static void check_max_threads(void) {
    static const struct {
        int ndim;
        int64_t sizes[4];
        int dim;
    } shapes[] = {
        {2, {4, 40000}, 1},    {2, {2, 100000}, 1}, {2, {100000, 3}, 1}, {2, {3, 100000}, 0},
        {1, {1000000}, 0},     {2, {1, 1000000}, 1}, {4, {2, 50000, 1, 3}, 1},
        {3, {7, 0, 100000}, 2}, {3, {7, 0, 100000}, 1}, {2, {300000, 1}, 1}, {2, {1, 300000}, 0},
        {2, {1000, 1000}, 0},
    };
    float dummy[1] = {0};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int fn = 0; fn < TPU_SOFTMAX_COUNT; fn++) {
            tpu_op op;
            memset(&op, 0, sizeof op);
            op.code = TPU_OP_SOFTMAX;
            op.fn = fn;
            op.n_in = is_bwd(fn) ? 2 : 1;
            int64_t rows = 1;
            tpu_tensor t = {.data = dummy, .ndim = shapes[k].ndim, .dtype = F32,
                            .storage = dummy, .storage_nbytes = 4};
            int64_t stride = 1;
            for (int d = shapes[k].ndim - 1; d >= 0; d--) {
                t.sizes[d] = shapes[k].sizes[d];
                t.strides[d] = stride;
                stride *= t.sizes[d] ? t.sizes[d] : 1;
                if (d != shapes[k].dim)
                    rows *= t.sizes[d];
            }
            op.out = op.in[0] = op.in[1] = t;
            op.p.softmax.dim = shapes[k].dim;
            int mt = tpu_op_max_threads(&op);
            CHECK(mt >= 1 && mt <= (rows > 1 ? rows : 1));
            if (!(mt >= 1 && mt <= (rows > 1 ? rows : 1)))
                fprintf(stderr, "    max_threads shape %zu: %d threads for %lld rows\n", k, mt,
                        (long long)rows);
        }
}

int main(void) {
    /* the fast path's exp error the f32 tolerance assumes */
    CHECK(tpu_vm_max_ulp(TPU_VM_EXP) >= 0 && tpu_vm_max_ulp(TPU_VM_EXP) <= 2);
    check_refusals();
    check_max_threads();
    known_answers();
    run_table();
    tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    tpu_kernels_set_reference(false);
    printf("softmax: %d ops (%lld elements) x %d modes x %d thread counts; best isa %s\n",
           g_cases, g_elements, (int)N_MODES, (int)N_NTHS, tpu_isa_name(tpu_kernels_best_isa()));
    for (int k = 0; k < C_COUNT; k++)
        printf("  largest error %-22s %.3g\n", k_class_names[k], g_worst[k]);
    return check_report();
}
