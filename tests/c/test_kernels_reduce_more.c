/* Tests of the reductions other than SUM and MEAN (PROD, AMAX, AMIN,
 * ARGMAX, ARGMIN, ANY, ALL), of COPY's TRIL and TRIU, and of RANDOM
 * INTEGERS, each against a loop written here from op.h's definitions:
 *
 *   PROD       product of the reduced elements (1 over none): a long
 *              double product for float outs (within the f64 rounding of
 *              `count` products plus one store), a wrapping 64-bit
 *              product of the elements converted to out's integer dtype
 *   AMAX/AMIN  the largest/smallest element, NaN if any is NaN
 *   ARGMAX/MIN the index of the first largest/smallest along the one
 *              reduced dim; the first NaN if there is one
 *   ANY/ALL    whether any/every element is nonzero (NaN is nonzero,
 *              -0 is zero), stored as exactly 0 or 1; 0 / 1 over none
 *   TRIL/TRIU  in[0] where j - i <= / >= diagonal, else 0
 *   NORM       the vector norm of order ord, from a long double loop: max
 *              / min |x| for +-inf (NaN if any is NaN), the count of
 *              nonzeros for 0 (NaN counts), sum |x| for 1, sqrt(sum x^2)
 *              for 2, (sum |x|^ord)^(1/ord) otherwise (3.5, -1); 0 over
 *              zero elements for ord >= 0 (within the f64 rounding of
 *              `count` steps plus one store)
 *   INTEGERS   from + (r mod span), r a 32-bit Philox lane when span <
 *              2^32, else 64 bits from two lanes (span 0: 2^64)
 *
 * Inputs come in every layout (transposed, gapped, reversed), values are
 * drawn from a few small numbers so that ties are common, with NaNs and
 * dtype extremes in some. Every record runs in every kernel mode (reference,
 * fast at each instruction-set level) with nth = 1, 2, 3, 7 and must give
 * the same bytes every time. Also:
 * tpu_op_check's refusals for these functions. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "family_test.h"

static int g_cases;
static int64_t g_bad;

static const char *const k_red_names[TPU_REDUCE_COUNT] = {
    "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "any", "all", "norm", "var", "std"};

/* ----------------------------------------------------- reduced rows */

/* The elements reduced into out element o (row-major over out's sizes:
 * in's with the masked dims 1), in the reduced dims' row-major order.
 * Returns their count; ptrs gets their addresses, pos their index along
 * the (one) reduced dim for ARGMAX (the element's position otherwise). */
static int64_t reduced_elems(const tpu_tensor *in, uint32_t mask, int64_t o,
                             const unsigned char **ptrs, int64_t *pos) {
    int64_t c[TPU_MAX_DIMS], count = 1;
    for (int d = in->ndim - 1; d >= 0; d--) {
        int64_t size = (mask >> d) & 1u ? 1 : in->sizes[d];
        c[d] = o % size;
        o /= size;
        if ((mask >> d) & 1u)
            count *= in->sizes[d];
    }
    for (int64_t r = 0; r < count; r++) {
        int64_t rest = r, last = r;
        for (int d = in->ndim - 1; d >= 0; d--)
            if ((mask >> d) & 1u) {
                c[d] = rest % in->sizes[d];
                last = c[d];
                rest /= in->sizes[d];
            }
        int64_t off = 0;
        for (int d = 0; d < in->ndim; d++)
            off += c[d] * in->strides[d];
        ptrs[r] = (const unsigned char *)in->data + off * (int64_t)t_size(in->dtype);
        pos[r] = mask ? last : 0;
    }
    return count;
}

/* A value for element i of a reduction input: a few small numbers (ties),
 * sometimes NaN or the dtype's extremes, per the function. */
static double gen_reduce(int fn, tpu_dtype dt, bool nans) {
    uint64_t r = t_rand();
    if (dt == BOOL)
        return (double)(r % 2);
    if (fn == TPU_REDUCE_ANY || fn == TPU_REDUCE_ALL) {
        /* zeros (also -0) half the time; the rest small, tiny or NaN */
        static const double v[] = {0, -0.0, 0, 0, 1, -3, 1e-30, NAN};
        double x = v[r % (nans ? 8 : 7)];
        return t_is_float(dt) ? x : (isnan(x) || x == 1e-30 ? 2 : x);
    }
    if (fn == TPU_REDUCE_PROD) {
        if (!t_is_float(dt))
            return (double)((int64_t)(r % 8) - (dt == U8 ? 0 : 2));
        return r % 16 == 0 ? 0 : (r % 4 == 1 ? -1 : 1) * (0.5 + t_unit());
    }
    /* AMAX ... ARGMIN: small values, extremes, NaN */
    if (nans && t_is_float(dt) && r % 9 == 0)
        return NAN;
    if (r % 11 == 0) {
        switch (dt) {
        case TPU_DTYPE_I8: return r % 2 ? 127 : -128;
        case TPU_DTYPE_U8: return r % 2 ? 255 : 0;
        case TPU_DTYPE_I16: return r % 2 ? 32767 : -32768;
        case TPU_DTYPE_I32: return r % 2 ? 2147483647.0 : -2147483648.0;
        case TPU_DTYPE_I64: return r % 2 ? 0x1p62 : -0x1p63;
        case TPU_DTYPE_F16: return r % 2 ? 65504 : -INFINITY;
        default: return r % 2 ? INFINITY : -1e30;
        }
    }
    double v = (double)((int64_t)(r % 5) - 2);
    return dt == U8 ? fabs(v) : v;
}

typedef struct {
    int fn;
    const char *what;
    fbuf *in, *out;
    uint32_t mask;
} red_ctx;

static void report(const char *what, int64_t o, const char *fmt, double got, double want) {
    if (g_bad++ < 4) {
        fprintf(stderr, "    %s: out element %lld: got ", what, (long long)o);
        fprintf(stderr, fmt, got);
        fprintf(stderr, ", want ");
        fprintf(stderr, fmt, want);
        fprintf(stderr, "\n");
    }
}

static void verify_reduce(void *p) {
    const red_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *out = &k->out->t;
    tpu_dtype idt = in->dtype, odt = out->dtype;
    bool fin = t_is_float(idt);
    int64_t n_out = t_numel(out), n_in = t_numel(in);
    const unsigned char **ptrs = malloc((size_t)(n_in + 1) * sizeof *ptrs);
    int64_t *pos = malloc((size_t)(n_in + 1) * sizeof *pos);
    for (int64_t o = 0; o < n_out; o++) {
        int64_t count = reduced_elems(in, k->mask, o, ptrs, pos);
        const unsigned char *got_p = t_at(out, o);
        switch (k->fn) {
        case TPU_REDUCE_PROD:
            if (t_is_float(odt)) {
                long double prod = 1;
                for (int64_t r = 0; r < count; r++)
                    prod *= fin ? t_read_f(ptrs[r], idt) : (double)t_read_i(ptrs[r], idt);
                double want = (double)prod, got = t_read_f(got_p, odt);
                double q = t_quant(want, odt); /* overflow to inf in narrow outs */
                double tol = tol_store(odt, want) + (double)count * 0x1p-52 * fabs(want);
                if (!(isinf(q) ? got == q : close_to(got, want, tol)))
                    report(k->what, o, "%.17g", got, want);
            } else {
                uint64_t prod = 1;
                for (int64_t r = 0; r < count; r++)
                    prod *= (uint64_t)(fin ? t_f2i(t_read_f(ptrs[r], idt))
                                           : t_read_i(ptrs[r], idt));
                int64_t want = t_wrap((int64_t)prod, odt), got = t_read_i(got_p, odt);
                if (got != want)
                    report(k->what, o, "%.0f", (double)got, (double)want);
            }
            break;
        case TPU_REDUCE_AMAX:
        case TPU_REDUCE_AMIN:
        case TPU_REDUCE_ARGMAX:
        case TPU_REDUCE_ARGMIN: {
            bool largest = k->fn == TPU_REDUCE_AMAX || k->fn == TPU_REDUCE_ARGMAX;
            bool arg = k->fn == TPU_REDUCE_ARGMAX || k->fn == TPU_REDUCE_ARGMIN;
            int64_t best = 0;
            for (int64_t r = 1; r < count; r++) {
                if (fin) {
                    double v = t_read_f(ptrs[r], idt), b = t_read_f(ptrs[best], idt);
                    if (!isnan(b) && (isnan(v) || (largest ? v > b : v < b)))
                        best = r;
                } else {
                    int64_t v = t_read_i(ptrs[r], idt), b = t_read_i(ptrs[best], idt);
                    if (largest ? v > b : v < b)
                        best = r;
                }
            }
            if (arg) {
                int64_t got = t_read_i(got_p, I64);
                if (got != pos[best])
                    report(k->what, o, "%.0f", (double)got, (double)pos[best]);
            } else if (memcmp(got_p, ptrs[best], t_size(odt)) != 0 &&
                       !(fin && isnan(t_read_f(got_p, odt)) && isnan(t_read_f(ptrs[best], idt)))) {
                /* The very element, bytes and all (a NaN may come back with
                 * another payload). */
                report(k->what, o, "%.17g", t_read_f(got_p, odt), t_read_f(ptrs[best], idt));
            }
            break;
        }
        default: { /* ANY, ALL */
            bool any = k->fn == TPU_REDUCE_ANY, acc = !any;
            for (int64_t r = 0; r < count; r++) {
                bool nz = fin ? t_read_f(ptrs[r], idt) != 0 || isnan(t_read_f(ptrs[r], idt))
                              : t_read_i(ptrs[r], idt) != 0;
                acc = any ? acc || nz : acc && nz;
            }
            if (got_p[0] != (unsigned char)acc)
                report(k->what, o, "%.0f", got_p[0], acc);
            break;
        }
        }
    }
    free(ptrs);
    free(pos);
}

static void run_reduce(int fn, tpu_dtype idt, tpu_dtype odt, int ndim, const int64_t *sizes,
                       uint32_t mask, int li, int lo, bool nans) {
    char what[200];
    int k = snprintf(what, sizeof what, "%s %s -> %s mask 0x%x ", k_red_names[fn], dt_str(idt),
                     dt_str(odt), (unsigned)mask);
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " in %s out %s%s", k_layout_names[li],
             k_layout_names[lo], nans ? " nans" : "");
    int64_t osizes[TPU_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        osizes[d] = (mask >> d) & 1u ? 1 : sizes[d];
    fbuf in, out;
    fb_make(&in, idt, ndim, sizes, li);
    fb_make(&out, odt, ndim, osizes, lo);
    int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++)
        fb_set(&in, i, gen_reduce(fn, idt, nans));
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_REDUCE;
    op.fn = fn;
    op.n_in = 1;
    op.out = out.t;
    op.in[0] = in.t;
    op.p.reduce.mask = mask;
    red_ctx ctx = {fn, what, &in, &out, mask};
    op_bufs bufs = {{&out}, 1, {&in}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_reduce, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&in);
    fb_free(&out);
}

static const struct {
    int ndim;
    int64_t sizes[4];
} k_rshapes[] = {
    {3, {3, 4, 5}}, {3, {2, 1, 7}}, {1, {13}},        {0, {0}}, {2, {0, 3}},
    {2, {4, 0}},    {4, {2, 3, 2, 3}}, {2, {1, 1}}, {2, {64, 9}},
};

/* The (in, out) dtype pairs each function is run with. */
static void dtype_pairs(int fn, tpu_dtype pairs[][2], int *n) {
    static const tpu_dtype all[] = {F32, F64, F16, BF16, I8, I16, I32, I64, U8, BOOL};
    *n = 0;
    if (fn == TPU_REDUCE_PROD) {
        static const tpu_dtype p[][2] = {{F32, F32}, {F64, F64}, {F16, F32}, {BF16, BF16},
                                         {F16, F16}, {I32, I64}, {I8, I8},   {U8, I64},
                                         {BOOL, I64}, {I64, I64}, {F32, I64}, {I32, F64}};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
            pairs[*n][0] = p[i][0];
            pairs[(*n)++][1] = p[i][1];
        }
        return;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        pairs[*n][0] = all[i];
        if (fn == TPU_REDUCE_ANY || fn == TPU_REDUCE_ALL) {
            pairs[(*n)++][1] = i % 2 ? U8 : BOOL;
        } else {
            bool arg = fn == TPU_REDUCE_ARGMAX || fn == TPU_REDUCE_ARGMIN;
            pairs[(*n)++][1] = arg ? I64 : all[i];
        }
    }
}

static void test_reductions(void) {
    int rot = 0;
    /* NORM has its own sweep (test_norm): it also varies the order. */
    for (int fn = TPU_REDUCE_PROD; fn < TPU_REDUCE_NORM; fn++) {
        bool arg = fn == TPU_REDUCE_ARGMAX || fn == TPU_REDUCE_ARGMIN;
        bool needs = arg || fn == TPU_REDUCE_AMAX || fn == TPU_REDUCE_AMIN;
        tpu_dtype pairs[16][2];
        int np;
        dtype_pairs(fn, pairs, &np);
        for (size_t s = 0; s < sizeof k_rshapes / sizeof k_rshapes[0]; s++) {
            int nd = k_rshapes[s].ndim;
            for (uint32_t mask = 0; mask < (1u << nd); mask++) {
                /* ARGMAX: one dim at most. AMAX and the args: an empty
                 * reduction only if out is empty too (checked below). */
                if (arg && (mask & (mask - 1u)) != 0)
                    continue;
                int64_t count = 1, n_out = 1;
                for (int d = 0; d < nd; d++) {
                    if ((mask >> d) & 1u)
                        count *= k_rshapes[s].sizes[d];
                    else
                        n_out *= k_rshapes[s].sizes[d];
                }
                if (needs && count == 0 && n_out > 0)
                    continue;
                /* Larger shapes: every other mask, to keep the run short. */
                if (nd == 4 && mask % 3 != 0)
                    continue;
                for (int p = 0; p < np; p++, rot++)
                    run_reduce(fn, pairs[p][0], pairs[p][1], nd, k_rshapes[s].sizes, mask,
                               rot % L_COUNT, (rot / 4) % 2 ? L_GAP : L_CONTIG, rot % 3 == 0);
            }
        }
    }
}

/* The picks of long f32 rows, where the fast path's vector loops run
 * (an extreme, then the first element equal to it or the first NaN) and,
 * past 2^17 elements into few outputs, the split into chunks: the
 * extreme twice (the first must win), +0 and -0 tied in either order,
 * NaNs of two payloads after the extreme, all NaN, infinities; at lengths
 * around the vector widths and across the split's chunks. */
static float pick_pattern(int pattern, int64_t r, int64_t i, int64_t len) {
    int64_t a = (len / 3 + r * 5) % len, b = len - 1 - r % 2;
    if (b < 0)
        b = 0;
    float base = -(float)((i * 7919 + r * 31) % 1000) - 1.0f; /* in [-1000, -1] */
    float nan1, nan2;
    uint32_t q1 = 0x7fc00001u, q2 = 0xffc00002u;
    memcpy(&nan1, &q1, 4);
    memcpy(&nan2, &q2, 4);
    switch (pattern) {
    case 0: return base;
    case 1: return i == a || i == b ? 5.0f : i == len / 2 ? -5000.0f : base; /* tied max */
    case 2: return i == a ? 0.0f : i == b ? -0.0f : base;                      /* +0 first */
    case 3: return i == a ? -0.0f : i == b ? 0.0f : i == 0 ? -2000.0f : base; /* -0 first */
    case 4: return i == b ? nan1 : i == a ? 7.0f : base;                      /* NaN last */
    case 5: return i == a ? nan2 : i == b ? nan1 : base;                       /* two NaNs */
    case 6: return nan1;
    case 7: return -INFINITY;
    default: return i == a ? INFINITY : i == b ? -INFINITY : base;
    }
}

static void test_picks_long_runs(void) {
    static const int64_t lens[] = {1, 15, 16, 17, 63, 64, 65, 1000, 140000};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (int pattern = 0; pattern <= 8; pattern++)
            for (int64_t rows = 1; rows <= 3; rows += 2)
                for (int fn = TPU_REDUCE_AMAX; fn <= TPU_REDUCE_ARGMIN; fn++) {
                    int64_t len = lens[l], sizes[2] = {rows, len}, osizes[2] = {rows, 1};
                    bool arg = fn == TPU_REDUCE_ARGMAX || fn == TPU_REDUCE_ARGMIN;
                    char what[160];
                    snprintf(what, sizeof what, "%s f32 rows %lld x %lld pattern %d",
                             k_red_names[fn], (long long)rows, (long long)len, pattern);
                    fbuf in, out;
                    fb_make(&in, F32, 2, sizes, L_CONTIG);
                    fb_make(&out, arg ? I64 : F32, 2, osizes, L_CONTIG);
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t i = 0; i < len; i++) {
                            float v = pick_pattern(pattern, r, i, len);
                            memcpy((float *)in.t.data + r * len + i, &v, 4);
                        }
                    tpu_op op;
                    memset(&op, 0, sizeof op);
                    op.code = TPU_OP_REDUCE;
                    op.fn = fn;
                    op.n_in = 1;
                    op.out = out.t;
                    op.in[0] = in.t;
                    op.p.reduce.mask = 2;
                    /* The long rows must take the split (two phases). */
                    CHECK((tpu_op_phases(&op) == 2) == (len >= 2 * 65536));
                    red_ctx ctx = {fn, what, &in, &out, 2};
                    op_bufs bufs = {{&out}, 1, {&in}, 1};
                    g_bad = 0;
                    run_everywhere(&op, &bufs, verify_reduce, &ctx, what);
                    CHECK(g_bad == 0);
                    g_cases++;
                    fb_free(&in);
                    fb_free(&out);
                }
}

/* VAR and STD against a two-pass long double loop in the reduced dims'
 * order: the mean, then the sum of squared deviations, divided by
 * max(count - correction, 0) (NaN over zero elements). The kernel adds
 * in f64, in 16 lanes on contiguous f32 runs: within 1e-12 relative of
 * the exact value (far above f64's few ulps for these counts, far below
 * a one-pass formula's cancellation on values near their mean), plus
 * the rounding of the store. Also every mode and thread count must give
 * the same bytes (run_everywhere). */
typedef struct {
    int fn;
    const char *what;
    fbuf *in, *out;
    uint32_t mask;
    double correction;
} var_ctx;

static void verify_var(void *p) {
    const var_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *out = &k->out->t;
    int64_t n_out = t_numel(out), n_in = t_numel(in);
    const unsigned char **ptrs = malloc((size_t)(n_in + 1) * sizeof *ptrs);
    int64_t *pos = malloc((size_t)(n_in + 1) * sizeof *pos);
    for (int64_t o = 0; o < n_out; o++) {
        int64_t count = reduced_elems(in, k->mask, o, ptrs, pos);
        long double sum = 0, ss = 0;
        for (int64_t r = 0; r < count; r++)
            sum += t_read_f(ptrs[r], in->dtype);
        long double mean = sum / (long double)count;
        for (int64_t r = 0; r < count; r++) {
            long double d = t_read_f(ptrs[r], in->dtype) - mean;
            ss += d * d;
        }
        double div = fmax((double)count - k->correction, 0.0);
        double want = count == 0 ? NAN : (double)(ss / div);
        if (k->fn == TPU_REDUCE_STD)
            want = sqrt(want);
        double got = t_read_f(t_at(out, o), out->dtype);
        double q = t_quant(want, out->dtype);
        double tol = tol_store(out->dtype, want) + 1e-12 * fabs(want);
        if (!(isinf(q) || isnan(q) ? (isnan(q) ? isnan(got) : got == q) : close_to(got, want, tol)))
            report(k->what, o, "%.17g", got, want);
    }
    free(ptrs);
    free(pos);
}

static void run_var(int fn, tpu_dtype idt, tpu_dtype odt, int ndim, const int64_t *sizes,
                    uint32_t mask, int li, double correction, int values) {
    char what[200];
    int k = snprintf(what, sizeof what, "%s %s -> %s mask 0x%x correction %g values %d ",
                     k_red_names[fn], dt_str(idt), dt_str(odt), (unsigned)mask, correction, values);
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " in %s", k_layout_names[li]);
    int64_t osizes[TPU_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        osizes[d] = (mask >> d) & 1u ? 1 : sizes[d];
    fbuf in, out;
    fb_make(&in, idt, ndim, sizes, li);
    fb_make(&out, odt, ndim, osizes, L_CONTIG);
    int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(t_rand() % 2001) / 1000.0 - 1.0; /* [-1, 1] */
        double v = values == 0 ? u : values == 1 ? 1000.0 + u / 64 : u;
        if (values == 2 && i % 17 == 5) /* NaN and infinities in some rows */
            v = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        fb_set(&in, i, v);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_REDUCE;
    op.fn = fn;
    op.n_in = 1;
    op.out = out.t;
    op.in[0] = in.t;
    op.p.reduce.mask = mask;
    op.p.reduce.correction = correction;
    var_ctx ctx = {fn, what, &in, &out, mask, correction};
    op_bufs bufs = {{&out}, 1, {&in}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_var, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&in);
    fb_free(&out);
}

static void test_var(void) {
    static const tpu_dtype pairs[][2] = {{F32, F32}, {F64, F64}, {BF16, BF16}, {F16, F16},
                                         {F32, F64}, {BF16, F32}};
    static const double corrections[] = {1.0, 0.0, 2.5, -1.0, 40.0, NAN};
    int rot = 0;
    for (int fn = TPU_REDUCE_VAR; fn <= TPU_REDUCE_STD; fn++)
        for (size_t s = 0; s < sizeof k_rshapes / sizeof k_rshapes[0]; s++) {
            int nd = k_rshapes[s].ndim;
            for (uint32_t mask = 0; mask < (1u << nd); mask++, rot++) {
                if (nd == 4 && mask % 3 != 0)
                    continue;
                size_t p = (size_t)rot % (sizeof pairs / sizeof pairs[0]);
                run_var(fn, pairs[p][0], pairs[p][1], nd, k_rshapes[s].sizes, mask, rot % L_COUNT,
                        corrections[rot % 6], rot % 3);
            }
        }
    /* Long contiguous f32 rows (the 16 lanes and their tail), values
     * near 1000 (a one-pass sum of squares would lose them), and rows
     * whose elements lie a stride apart (the row-major walk). */
    static const int64_t longs[][2] = {{3, 1000}, {2, 4099}, {1, 33}, {5, 16}};
    for (size_t s = 0; s < sizeof longs / sizeof longs[0]; s++)
        for (int fn = TPU_REDUCE_VAR; fn <= TPU_REDUCE_STD; fn++)
            for (int values = 0; values < 3; values++) {
                run_var(fn, F32, F32, 2, longs[s], 0x2, L_CONTIG, 1.0, values);
                run_var(fn, F32, F32, 2, longs[s], 0x1, L_CONTIG, 0.0, values);
                run_var(fn, F32, F64, 2, longs[s], 0x3, L_TRANS, 1.0, values);
            }
}

static void var_refusals(void) {
    static int32_t xi[4];
    static float xf[4], yf[1];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_REDUCE;
    op.fn = TPU_REDUCE_VAR;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = xf, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = F32,
                            .storage = xf, .storage_nbytes = sizeof xf};
    op.out = (tpu_tensor){.data = yf, .sizes = {1}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = yf, .storage_nbytes = sizeof yf};
    op.p.reduce.mask = 1;
    op.p.reduce.correction = 1.0;
    CHECK_OK(tpu_op_check(&op));
    op.in[0] = (tpu_tensor){.data = xi, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = I32,
                            .storage = xi, .storage_nbytes = sizeof xi};
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
    CHECK(strstr(tpu_last_error_message(), "a variance is of floats") != NULL);
}

/* Hand-made rows: ties, NaN positions, infinities. */
static void reduce_known(void) {
    static const struct {
        int fn;
        double x[6];
        double want; /* value, or index for the args */
    } rows[] = {
        {TPU_REDUCE_ARGMAX, {1, 3, 2, 3, 0, 3}, 1},
        {TPU_REDUCE_ARGMIN, {1, 0, 2, 0, 0, 3}, 1},
        {TPU_REDUCE_ARGMAX, {1, 3, NAN, 3, NAN, 9}, 2},
        {TPU_REDUCE_ARGMIN, {NAN, -3, NAN, 3, 0, -9}, 0},
        {TPU_REDUCE_ARGMAX, {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, 0},
        {TPU_REDUCE_AMAX, {1, 3, NAN, 3, 0, INFINITY}, NAN},
        {TPU_REDUCE_AMIN, {1, 3, -INFINITY, 3, 0, 2}, -INFINITY},
        {TPU_REDUCE_PROD, {1, 2, 3, 4, 5, 0.5}, 60},
        {TPU_REDUCE_PROD, {1, 2, INFINITY, 4, 0, 0.5}, NAN},
        {TPU_REDUCE_ANY, {0, -0.0, 0, 0, 0, NAN}, 1},
        {TPU_REDUCE_ANY, {0, -0.0, 0, 0, 0, 0}, 0},
        {TPU_REDUCE_ALL, {1, NAN, -1, 1e-300, 2, 3}, 1},
        {TPU_REDUCE_ALL, {1, NAN, -1, -0.0, 2, 3}, 0},
    };
    /* The picks (AMAX ... ARGMIN) run again on f32 rows, which take the
     * fast path's contiguous run (reduce.c's pick_f32_run). */
    for (size_t kw = 0; kw < 2 * (sizeof rows / sizeof rows[0]); kw++) {
        size_t k = kw / 2;
        bool f32 = kw % 2 == 1;
        double x[6], out[1];
        float xf[6];
        int64_t iout[1];
        uint8_t bout[1];
        memcpy(x, rows[k].x, sizeof x);
        for (int q = 0; q < 6; q++)
            xf[q] = (float)x[q];
        int fn = rows[k].fn;
        bool arg = fn == TPU_REDUCE_ARGMAX || fn == TPU_REDUCE_ARGMIN;
        bool logical = fn == TPU_REDUCE_ANY || fn == TPU_REDUCE_ALL;
        if (f32 && (logical || fn == TPU_REDUCE_PROD))
            continue;
        float fout[1];
        void *o = arg ? (void *)iout : logical ? (void *)bout : f32 ? (void *)fout : (void *)out;
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_REDUCE;
        op.fn = fn;
        op.n_in = 1;
        op.in[0] = f32 ? (tpu_tensor){.data = xf, .sizes = {6}, .strides = {1}, .ndim = 1,
                                      .dtype = TPU_DTYPE_F32, .storage = xf,
                                      .storage_nbytes = sizeof xf}
                       : (tpu_tensor){.data = x, .sizes = {6}, .strides = {1}, .ndim = 1,
                                      .dtype = F64, .storage = x, .storage_nbytes = sizeof x};
        op.out = (tpu_tensor){.data = o, .sizes = {1}, .strides = {1}, .ndim = 1,
                              .dtype = arg       ? I64
                                       : logical ? BOOL
                                       : f32     ? TPU_DTYPE_F32
                                                 : F64,
                              .storage = o,
                              .storage_nbytes = 8};
        op.p.reduce.mask = 1;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        double got = arg ? (double)iout[0] : logical ? bout[0] : f32 ? fout[0] : out[0];
        bool ok = isnan(rows[k].want) ? isnan(got) : got == rows[k].want;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "    known %s row %zu (%s): got %g, want %g\n", k_red_names[fn], k,
                    f32 ? "f32" : "f64", got, rows[k].want);
    }
}

/* ANY/ALL over a dim of size 1 ([n, 1] -> [n, 1]): each output is its
 * one element, in both kernel modes and split over threads. */
static void reduce_extent_one(void) {
    enum { N = 1000 };
    static uint8_t x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = (uint8_t)((i * 7919) % 3 == 0);
    for (int fn = TPU_REDUCE_ANY; fn <= TPU_REDUCE_ALL; fn++)
        for (int ref = 0; ref < 2; ref++) {
            tpu_kernels_set_reference(ref);
            memset(y, 7, sizeof y);
            tpu_op op;
            memset(&op, 0, sizeof op);
            op.code = TPU_OP_REDUCE;
            op.fn = fn;
            op.n_in = 1;
            op.in[0] = (tpu_tensor){.data = x, .sizes = {N, 1}, .strides = {1, 1}, .ndim = 2,
                                    .dtype = BOOL, .storage = x, .storage_nbytes = N};
            op.out = (tpu_tensor){.data = y, .sizes = {N, 1}, .strides = {1, 1},
                                  .ndim = 2, .dtype = BOOL, .storage = y,
                                  .storage_nbytes = N};
            op.p.reduce.mask = 2;
            CHECK_OK(tpu_op_check(&op));
            for (int t = 0; t < 2; t++)
                CHECK_OK(tpu_op_run(&op, t, 2));
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += y[i] != (x[i] != 0);
            CHECK(bad == 0);
        }
    tpu_kernels_set_reference(false);
}

/* ------------------------------------------------------------- NORM */

static const double k_ords[] = {2, 1, 0, INFINITY, -INFINITY, 3.5, -1};
enum { N_ORDS = sizeof k_ords / sizeof k_ords[0] };

/* The vector norm of order ord of the count elements at ptrs, from its
 * definition, in long double. */
static long double norm_ref(const unsigned char **ptrs, int64_t count, tpu_dtype dt, double ord) {
    if (isinf(ord)) { /* NaN if any is NaN, else the largest / smallest |x| */
        bool nan = false;
        long double best = 0;
        for (int64_t r = 0; r < count; r++) {
            long double a = fabsl((long double)t_read_f(ptrs[r], dt));
            if (isnan(a))
                nan = true;
            else if (r == 0 || (ord > 0 ? a > best : a < best))
                best = a;
        }
        return nan ? (long double)NAN : best;
    }
    long double sum = 0;
    for (int64_t r = 0; r < count; r++) {
        long double a = fabsl((long double)t_read_f(ptrs[r], dt));
        if (ord == 0)
            sum += a != 0 || isnan(a); /* NaN is nonzero */
        else if (ord == 1)
            sum += a;
        else if (ord == 2)
            sum += a * a;
        else
            sum += powl(a, (long double)ord); /* 0 ** -1 is inf, inf ** -1 is 0 */
    }
    if (ord == 0 || ord == 1)
        return sum;
    return ord == 2 ? sqrtl(sum) : powl(sum, 1.0L / (long double)ord);
}

typedef struct {
    const char *what;
    fbuf *in, *out;
    uint32_t mask;
    double ord;
} norm_ctx;

static void verify_norm(void *p) {
    const norm_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *out = &k->out->t;
    int64_t n_out = t_numel(out), n_in = t_numel(in);
    const unsigned char **ptrs = malloc((size_t)(n_in + 1) * sizeof *ptrs);
    int64_t *pos = malloc((size_t)(n_in + 1) * sizeof *pos);
    bool exact = isinf(k->ord) || k->ord == 0; /* a stored |x| or a count */
    for (int64_t o = 0; o < n_out; o++) {
        int64_t count = reduced_elems(in, k->mask, o, ptrs, pos);
        double want = (double)norm_ref(ptrs, count, in->dtype, k->ord);
        double got = t_read_f(t_at(out, o), out->dtype);
        /* Each step of the f64 loop rounds once (relative 2^-52 per term,
         * plus pow's own error and the root's): a relative slack that
         * grows with the count, and one store to out's dtype. */
        double slack = exact ? 0 : (double)(count + 8) * 0x1p-50 * (1 + fabs(log(fabs(want) + 1e-300)));
        double tol = tol_store(out->dtype, want) + slack * fabs(want);
        double q = t_quant(want, out->dtype); /* overflow to inf in a narrow out */
        if (!(isinf(q) && !isinf(want) ? got == q : close_to(got, want, tol)))
            report(k->what, o, "%.17g", got, want);
        if (count == 0 && !(got == 0 && !signbit(got)))
            report(k->what, o, "%.17g (zero elements)", got, 0);
    }
    free(ptrs);
    free(pos);
}

/* A value for a norm's input: small numbers, zeros of both signs, and
 * (with nans) NaN and infinities of both signs now and then. */
static double gen_norm(tpu_dtype dt, bool nans) {
    uint64_t r = t_rand();
    if (!t_is_float(dt))
        return (double)((int64_t)(r % 9) - 4);
    if (nans && r % 13 == 0)
        return NAN;
    if (nans && r % 17 == 0)
        return r % 2 ? INFINITY : -INFINITY;
    switch (r % 5) {
    case 0: return r % 2 ? 0.0 : -0.0;
    case 1: return (double)((int64_t)(r % 7) - 3);
    default: return 4 * t_unit() - 2;
    }
}

static void run_norm(double ord, tpu_dtype idt, tpu_dtype odt, int ndim, const int64_t *sizes,
                     uint32_t mask, int li, int lo, bool nans) {
    char what[200];
    int k = snprintf(what, sizeof what, "norm ord %g %s -> %s mask 0x%x ", ord, dt_str(idt),
                     dt_str(odt), (unsigned)mask);
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " in %s out %s%s", k_layout_names[li],
             k_layout_names[lo], nans ? " nans" : "");
    int64_t osizes[TPU_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        osizes[d] = (mask >> d) & 1u ? 1 : sizes[d];
    fbuf in, out;
    fb_make(&in, idt, ndim, sizes, li);
    fb_make(&out, odt, ndim, osizes, lo);
    int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++)
        fb_set(&in, i, gen_norm(idt, nans));
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_REDUCE;
    op.fn = TPU_REDUCE_NORM;
    op.n_in = 1;
    op.out = out.t;
    op.in[0] = in.t;
    op.p.reduce.mask = mask;
    op.p.reduce.ord = ord;
    norm_ctx ctx = {what, &in, &out, mask, ord};
    op_bufs bufs = {{&out}, 1, {&in}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_norm, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&in);
    fb_free(&out);
}

static void test_norm(void) {
    /* Float inputs into their own dtype, wider and narrower outs, and an
     * integer input (the check asks only for a float out). */
    static const tpu_dtype pairs[][2] = {{F32, F32}, {F64, F64}, {F16, F16}, {BF16, BF16},
                                         {F16, F32}, {BF16, F32}, {F32, F64}, {F64, F32},
                                         {I16, F32}};
    enum { NP = sizeof pairs / sizeof pairs[0] };
    int rot = 0;
    for (int oi = 0; oi < N_ORDS; oi++) {
        double ord = k_ords[oi];
        for (size_t s = 0; s < sizeof k_rshapes / sizeof k_rshapes[0]; s++) {
            int nd = k_rshapes[s].ndim;
            for (uint32_t mask = 0; mask < (1u << nd); mask++) {
                int64_t count = 1, n_out = 1;
                for (int d = 0; d < nd; d++) {
                    if ((mask >> d) & 1u)
                        count *= k_rshapes[s].sizes[d];
                    else
                        n_out *= k_rshapes[s].sizes[d];
                }
                /* inf and negative orders have no identity (refusals()). */
                if ((isinf(ord) || ord < 0) && count == 0 && n_out > 0)
                    continue;
                if (nd == 4 && mask % 3 != 0)
                    continue;
                /* Every pair on the small shapes, a rotating third elsewhere. */
                for (int p = 0; p < NP; p++, rot++) {
                    if (n_out * count > 64 && (p + (int)mask) % 3 != 0)
                        continue;
                    run_norm(ord, pairs[p][0], pairs[p][1], nd, k_rshapes[s].sizes, mask,
                             rot % L_COUNT, (rot / 4) % 2 ? L_GAP : L_CONTIG, rot % 3 != 0);
                }
            }
        }
    }
    /* Orders 1 and 2 of long contiguous runs: the 16-lane sums of the
     * trailing-dims path, and runs long enough to be split into chunks
     * (clip_grad_norm_ over a parameter: one output, millions of values). */
    static const int64_t rows_long[2] = {300, 700}, split_long[2] = {2, 140000};
    for (int oi = 0; oi < 2; oi++) {
        double ord = oi == 0 ? 2.0 : 1.0;
        for (int nans = 0; nans < 2; nans++) {
            run_norm(ord, F32, F32, 2, rows_long, 0x2, L_CONTIG, L_CONTIG, nans);
            run_norm(ord, F32, F32, 2, split_long, 0x2, L_CONTIG, L_CONTIG, nans);
            run_norm(ord, F32, F32, 2, split_long, 0x3, L_CONTIG, L_CONTIG, nans);
            run_norm(ord, BF16, F32, 2, split_long, 0x3, L_CONTIG, L_CONTIG, nans);
        }
    }
}

/* Hand-made rows, f64 in and out, with their known norms. */
static void norm_known(void) {
    static const struct {
        double ord;
        double x[4];
        double want;
    } rows[] = {
        {2, {3, -4, 0, -0.0}, 5},
        {1, {3, -4, 0.5, -0.0}, 7.5},
        {INFINITY, {3, -4, 0.5, 2}, 4},
        {-INFINITY, {3, -4, -0.5, 2}, 0.5},
        {0, {0, -0.0, 3, NAN}, 2},
        {0, {0, -0.0, 0, 0}, 0},
        {-1, {2, -2, 4, 4}, 1 / 1.5},    /* 1 / (1/2 + 1/2 + 1/4 + 1/4) */
        {-1, {2, 0, 4, 4}, 0},           /* a zero: 1 / inf */
        {-1, {2, INFINITY, 2, INFINITY}, 1},
        {2, {1, INFINITY, NAN, 1}, NAN}, /* NaN beats inf */
        {2, {1, -INFINITY, 2, 1}, INFINITY},
        {INFINITY, {1, NAN, 9, INFINITY}, NAN},
        {-INFINITY, {1, NAN, 9, 0}, NAN},
        {-INFINITY, {1, -INFINITY, 9, 7}, 1},
        {3.5, {2, -2, 0, 0}, 0}, /* (2 * 2^3.5)^(1/3.5) = 2 * 2^(1/3.5), set below */
        {0.5, {1, 4, 0, 9}, 36}, /* (1 + 2 + 0 + 3)^2 */
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        double x[4], out[1] = {-7};
        memcpy(x, rows[k].x, sizeof x);
        double want = rows[k].want;
        if (rows[k].ord == 3.5)
            want = pow(2.0, 1 / 3.5) * 2;
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_REDUCE;
        op.fn = TPU_REDUCE_NORM;
        op.n_in = 1;
        op.in[0] = (tpu_tensor){.data = x, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = F64,
                                .storage = x, .storage_nbytes = sizeof x};
        op.out = (tpu_tensor){.data = out, .sizes = {1}, .strides = {1}, .ndim = 1, .dtype = F64,
                              .storage = out, .storage_nbytes = sizeof out};
        op.p.reduce.mask = 1;
        op.p.reduce.ord = rows[k].ord;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        bool ok = close_to(out[0], want, 8 * 0x1p-52 * fabs(want));
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "    known norm row %zu (ord %g): got %.17g, want %.17g\n", k,
                    rows[k].ord, out[0], want);
    }
}

/* ------------------------------------------------------ TRIL / TRIU */

typedef struct {
    const char *what;
    bool lower, in_place;
    int64_t diag;
    fbuf *in, *out;
} tri_ctx;

static void verify_tri(void *p) {
    const tri_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *out = &k->out->t;
    int nd = out->ndim;
    int64_t n = t_numel(out), rows = out->sizes[nd - 2], cols = out->sizes[nd - 1];
    size_t es = t_size(out->dtype);
    static const unsigned char zeros[8];
    for (int64_t e = 0; e < n; e++) {
        int64_t j = e % cols, i = (e / cols) % rows;
        bool keep = k->lower ? j - i <= k->diag : j - i >= k->diag;
        const unsigned char *got = t_at(out, e);
        /* In place, the input is what the buffer held before the run. */
        const unsigned char *src = t_at(in, e);
        if (k->in_place)
            src = k->in->pristine + (src - k->in->alloc);
        bool ok;
        if (!keep)
            ok = memcmp(got, zeros, es) == 0;
        else if (in->dtype == out->dtype)
            ok = memcmp(got, src, es) == 0;
        else /* a converting copy: rounded to a float out, truncated to an integer one */
            ok = t_read_f(got, out->dtype) ==
                 (t_is_float(out->dtype) ? t_quant(t_read_f(src, in->dtype), out->dtype)
                                         : trunc(t_read_f(src, in->dtype)));
        if (!ok && g_bad++ < 4)
            fprintf(stderr, "    %s: element %lld (row %lld, col %lld) %s\n", k->what,
                    (long long)e, (long long)i, (long long)j, keep ? "not copied" : "not zeroed");
    }
}

static void run_tri(bool lower, int64_t diag, tpu_dtype idt, tpu_dtype odt, int ndim,
                    const int64_t *sizes, bool in_place, int li, int lo) {
    char what[200];
    snprintf(what, sizeof what, "%s diagonal %lld %s -> %s rank %d %s in %s out %s",
             lower ? "tril" : "triu", (long long)diag, dt_str(idt), dt_str(odt), ndim,
             in_place ? "in place" : "out of place", k_layout_names[li], k_layout_names[lo]);
    fbuf in, out;
    fb_make(&in, idt, ndim, sizes, li);
    int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++) {
        double v = idt == BOOL ? 1 : t_is_float(idt) ? 1 + 100 * t_unit() : (double)(1 + i % 100);
        fb_set(&in, i, v);
    }
    if (!in_place)
        fb_make(&out, odt, ndim, sizes, lo);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_COPY;
    op.fn = lower ? TPU_COPY_TRIL : TPU_COPY_TRIU;
    op.n_in = 1;
    op.in[0] = in.t;
    op.out = in_place ? in.t : out.t;
    op.p.tri.diagonal = diag;
    tri_ctx ctx = {what, lower, in_place, diag, &in, in_place ? &in : &out};
    op_bufs bufs = {{in_place ? &in : &out}, 1, {&in}, in_place ? 0 : 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_tri, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&in);
    if (!in_place)
        fb_free(&out);
}

static void test_tri(void) {
    static const int64_t s4[4] = {2, 3, 4, 5};
    static const tpu_dtype dts[] = {F32, F64, BF16, I8, I64, U8, BOOL};
    int rot = 0;
    for (int lower = 0; lower < 2; lower++)
        for (int64_t diag = -3; diag <= 3; diag++)
            for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                for (int in_place = 0; in_place < 2; in_place++, rot++)
                    run_tri(lower, diag, dts[d], dts[d], 4, s4, in_place, rot % L_COUNT,
                            (rot / 3) % L_COUNT);
    /* Converting copies, diagonals far outside the matrix, other ranks. */
    static const int64_t s2[2] = {5, 3}, s3[3] = {2, 1, 6}, s0[3] = {3, 0, 4}, s1[2] = {1, 7};
    for (int lower = 0; lower < 2; lower++) {
        run_tri(lower, 1, I32, F64, 4, s4, false, L_TRANS, L_CONTIG);
        run_tri(lower, -1, F32, BF16, 4, s4, false, L_GAP, L_NEG);
        run_tri(lower, 0, F64, I16, 2, s2, false, L_CONTIG, L_GAP);
        for (int64_t diag = -9; diag <= 9; diag += 3) {
            run_tri(lower, diag, F32, F32, 2, s2, rot % 2, rot % L_COUNT, L_CONTIG);
            run_tri(lower, diag, I16, I16, 3, s3, !(rot % 2), L_NEG, L_TRANS);
            run_tri(lower, diag, F16, F16, 2, s1, rot % 2, L_GAP, L_GAP);
            rot++;
        }
        run_tri(lower, INT64_MAX, F32, F32, 2, s2, false, L_CONTIG, L_CONTIG);
        run_tri(lower, INT64_MIN, F32, F32, 2, s2, true, L_TRANS, L_TRANS);
        run_tri(lower, 0, F32, F32, 3, s0, false, L_CONTIG, L_CONTIG);
    }
}

/* ------------------------------------------------------ RANDOM INTEGERS */

/* Philox4x32-10 as Salmon et al. define it (Random123's constants),
 * written here independently, with Random123's known answers. */
static void philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1, n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    memcpy(out, c, sizeof c);
}

static void philox_known(void) {
    uint32_t out[4];
    const uint32_t z[4] = {0, 0, 0, 0}, zk[2] = {0, 0};
    philox(z, zk, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
          out[3] == 0x9b00dbd8u);
    const uint32_t f[4] = {~0u, ~0u, ~0u, ~0u}, fk[2] = {~0u, ~0u};
    philox(f, fk, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u &&
          out[3] == 0x6d5451fdu);
}

/* The draw r of element i (row-major) of the stream (seed, offset):
 * one 32-bit lane (4 per block) for a span below 2^32, else the 64 bits
 * of two lanes, low then high (2 per block). */
static uint64_t draw(uint64_t seed, uint64_t offset, uint64_t i, uint64_t span) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    bool narrow = span != 0 && span < 0x100000000u;
    uint64_t block = narrow ? i / 4 : i / 2;
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)offset,
                             (uint32_t)(offset >> 32)};
    uint32_t x[4];
    philox(ctr, key, x);
    if (narrow)
        return x[i % 4] % span;
    uint64_t r = (uint64_t)x[2 * (i % 2)] | (uint64_t)x[2 * (i % 2) + 1] << 32;
    return span ? r % span : r;
}

typedef struct {
    const char *what;
    fbuf *out;
    int64_t from;
    uint64_t span, seed, offset;
    bool uniformity;
} int_ctx;

/* Values: exactly from + draw, in [from, from + span), and (for large
 * draws) distributed as a uniform draw should be. */
static void verify_integers(void *p) {
    const int_ctx *k = p;
    const tpu_tensor *o = &k->out->t;
    int64_t n = t_numel(o), outside = 0, wrong = 0;
    double sum = 0;
    int64_t buckets[16] = {0}, high_bits[64] = {0};
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = draw(k->seed, k->offset, (uint64_t)i, k->span);
        int64_t want = (int64_t)((uint64_t)k->from + r);
        int64_t got = t_is_float(o->dtype) ? (int64_t)t_read_f(t_at(o, i), o->dtype)
                                           : t_read_i(t_at(o, i), o->dtype);
        /* Position in the range, from the stored value alone. */
        uint64_t rel = (uint64_t)got - (uint64_t)k->from;
        outside += k->span != 0 && rel >= k->span;
        wrong += got != t_wrap(want, o->dtype);
        double u = k->span ? (double)rel / (double)k->span : (double)rel * 0x1p-64;
        sum += u;
        buckets[(int)(u * 16) & 15]++;
        for (int b = 0; b < 64; b++)
            high_bits[b] += (int)((rel >> b) & 1u);
    }
    CHECK(outside == 0);
    CHECK(wrong == 0);
    if (outside || wrong)
        fprintf(stderr, "    %s: %lld outside the range, %lld not the stream's value\n", k->what,
                (long long)outside, (long long)wrong);
    if (!k->uniformity)
        return;
    /* The mean of u = (value - from) / span is (span - 1) / (2 span), with
     * a standard deviation of about 0.289 / sqrt(n); 5 sigma. */
    double want_mean = k->span ? (double)(k->span - 1) / (2.0 * (double)k->span) : 0.5;
    double sigma = 0.2887 / sqrt((double)n);
    CHECK(fabs(sum / (double)n - want_mean) < 5 * sigma);
    /* Sixteen equal buckets of u each hold n / 16 +- 5 sigma (for spans
     * that are multiples of 16). */
    if (k->span == 0 || k->span % 16 == 0) {
        double exp_b = (double)n / 16, sd = sqrt((double)n / 16 * 15 / 16);
        for (int b = 0; b < 16; b++)
            CHECK(fabs((double)buckets[b] - exp_b) < 5 * sd);
    }
    /* Every bit below the span's top is set half the time (span a power
     * of two, or 0: all 64 bits): the wide path really draws 64 bits. */
    if (k->span == 0 || (k->span & (k->span - 1)) == 0) {
        int bits = k->span == 0 ? 64 : __builtin_ctzll(k->span);
        double sd = sqrt((double)n / 4);
        for (int b = 0; b < bits; b++)
            if (fabs((double)high_bits[b] - (double)n / 2) >= 5 * sd) {
                CHECK(0);
                fprintf(stderr, "    %s: bit %d set %lld times of %lld\n", k->what, b,
                        (long long)high_bits[b], (long long)n);
            }
    }
}

static void run_integers(tpu_dtype dt, int64_t from, uint64_t span, int64_t n, int layout,
                         uint64_t seed, uint64_t offset, bool uniformity) {
    char what[200];
    snprintf(what, sizeof what, "integers %s from %" PRId64 " span %" PRIu64 " n %lld %s seed %"
             PRIu64 " offset %" PRIu64, dt_str(dt), from, span, (long long)n,
             k_layout_names[layout], seed, offset);
    /* 2-d [n / 7, 7] when n allows, so that transposed layouts reorder
     * memory: values follow the row-major logical index, not memory. */
    fbuf out;
    if (n % 7 == 0)
        fb_make2(&out, dt, n / 7, 7, layout);
    else
        fb_make1(&out, dt, n, layout);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_RANDOM;
    op.fn = TPU_RANDOM_INTEGERS;
    op.out = out.t;
    op.p.rand.seed = seed;
    op.p.rand.offset = offset;
    op.p.rand.from = from;
    op.p.rand.span = span;
    int_ctx ctx = {what, &out, from, span, seed, offset, uniformity};
    op_bufs bufs = {{&out}, 1, {0}, 0};
    run_everywhere(&op, &bufs, verify_integers, &ctx, what);
    g_cases++;
    fb_free(&out);
}

static void test_integers(void) {
    philox_known();
    /* Large uniformity runs, 32-bit and 64-bit paths. */
    run_integers(I64, 0, 16, 210000, L_CONTIG, 42, 0, true);
    run_integers(I64, -5, 10, 70000, L_TRANS, 7, 3, true);
    run_integers(I64, 0, 0, 140000, L_GAP, 1234, 99, true);                  /* span 2^64 */
    run_integers(I64, INT64_MIN, 0, 70007, L_NEG, 5, 0x100000000u, true);
    run_integers(I64, -5, 3 * 0x100000000ull + 16, 70000, L_CONTIG, 9, 1, true); /* > 2^32 */
    run_integers(I64, 100, 0x100000000ull, 70000, L_TRANS, 11, 2, true);         /* = 2^32 */
    run_integers(I64, 0, 0x80000000ull, 70000, L_CONTIG, 13, 0, true);           /* 2^31 */
    run_integers(I64, 0, UINT32_MAX, 35000, L_GAP, 17, 0, true);           /* 32-bit, largest */
    run_integers(I64, 1, 1ull << 62, 70000, L_CONTIG, 19, 5, true);
    /* Every out dtype, with values exact in it. */
    run_integers(I32, -1000, 2000, 7007, L_TRANS, 3, 1, false);
    run_integers(I32, INT32_MIN, 0x100000000ull, 700, L_CONTIG, 3, 2, false);
    run_integers(I16, -32768, 65536, 7000, L_GAP, 4, 0, true);
    run_integers(I8, -128, 256, 7000, L_NEG, 5, 0, true);
    run_integers(U8, 0, 256, 7000, L_CONTIG, 6, 0, true);
    run_integers(F32, -1000, 2000, 7007, L_GAP, 8, 0, false);
    run_integers(F64, 0, 1ull << 40, 7000, L_TRANS, 9, 0, false);
    run_integers(F16, -2048, 4096, 7000, L_CONTIG, 10, 0, true);
    run_integers(BF16, -256, 512, 7000, L_NEG, 12, 0, true);
    /* Edge sizes and spans. */
    run_integers(I64, 77, 1, 50, L_CONTIG, 1, 0, false); /* one value */
    run_integers(I64, 0, 10, 1, L_CONTIG, 1, 0, false);
    run_integers(I64, 0, 10, 0, L_CONTIG, 1, 0, false);
    run_integers(I64, 0, 10, 5, L_GAP, UINT64_MAX, UINT64_MAX, false);

    /* Other seeds and offsets give other values. */
    int64_t a[64], b[64];
    for (int which = 0; which < 3; which++) {
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_RANDOM;
        op.fn = TPU_RANDOM_INTEGERS;
        op.out = (tpu_tensor){.data = which ? b : a, .sizes = {64}, .strides = {1}, .ndim = 1,
                              .dtype = I64, .storage = which ? b : a, .storage_nbytes = sizeof a};
        op.p.rand.seed = which == 1 ? 2 : 1;
        op.p.rand.offset = which == 2 ? 1 : 0;
        op.p.rand.span = 0;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        if (which)
            CHECK(memcmp(a, b, sizeof a) != 0);
    }
}

/* ---------------------------------------------------- tpu_op_check */

static void refusals(void) {
    float buf[64] = {0};
    int64_t ib[16];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_REDUCE;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = buf, .sizes = {3, 4}, .strides = {4, 1}, .ndim = 2,
                            .dtype = F32, .storage = buf, .storage_nbytes = sizeof buf};
    op.out = (tpu_tensor){.data = buf + 32, .sizes = {3, 1}, .strides = {1, 1}, .ndim = 2,
                          .dtype = F32, .storage = buf, .storage_nbytes = sizeof buf};
    op.p.reduce.mask = 2;
    tpu_op base = op;
    for (int fn = TPU_REDUCE_PROD; fn <= TPU_REDUCE_AMIN; fn++) {
        op = base;
        op.fn = fn;
        CHECK_OK(tpu_op_check(&op));
    }
    /* AMAX: out of in's dtype; over zero elements only with no outputs. */
    op = base;
    op.fn = TPU_REDUCE_AMAX;
    op.out.dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE,
                  "out dtype float64 is not supported (it must be in[0]'s dtype)");
    op = base;
    op.fn = TPU_REDUCE_AMIN;
    op.in[0].sizes[1] = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "cannot reduce over zero elements");
    op.in[0].sizes[0] = op.out.sizes[0] = 0;
    CHECK_OK(tpu_op_check(&op));
    /* ARGMAX: one dim, int64 out; over zero elements refused too. */
    op = base;
    op.fn = TPU_REDUCE_ARGMAX;
    op.out.dtype = I64;
    op.out.data = ib;
    op.out.storage = ib;
    op.out.storage_nbytes = sizeof ib;
    tpu_op argok = op;
    CHECK_OK(tpu_op_check(&op));
    op.p.reduce.mask = 3;
    op.out.sizes[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "mask 0x3 names more than one dim");
    op = argok;
    op.out.dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "indices are int64");
    op = argok;
    op.fn = TPU_REDUCE_ARGMIN;
    op.in[0].sizes[1] = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "cannot reduce over zero elements");
    /* ANY / ALL: bool or uint8 outs only. */
    op = base;
    op.fn = TPU_REDUCE_ANY;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE,
                  "out dtype float32 is not supported (bool or uint8)");
    op.out.dtype = I8;
    op.fn = TPU_REDUCE_ALL;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE,
                  "out dtype int8 is not supported (bool or uint8)");
    op.out.dtype = U8;
    CHECK_OK(tpu_op_check(&op));
    /* NORM: a float out, a number for the order; inf and negative orders
     * need elements (PyTorch: "does not have an identity") unless out is
     * empty too; the other orders give 0 over none. */
    op = base;
    op.fn = TPU_REDUCE_NORM;
    for (int oi = 0; oi < N_ORDS; oi++) {
        op.p.reduce.ord = k_ords[oi];
        CHECK_OK(tpu_op_check(&op));
    }
    op.p.reduce.ord = NAN;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "order is NaN");
    op.p.reduce.ord = 2;
    static const tpu_dtype not_float[] = {I8, I16, I32, I64, U8, BOOL};
    for (size_t i = 0; i < sizeof not_float / sizeof not_float[0]; i++) {
        op.out.dtype = not_float[i];
        CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "is not supported (a norm is floating)");
    }
    op.out.dtype = F64;
    CHECK_OK(tpu_op_check(&op));
    op.in[0].dtype = I32; /* an integer input into a float out is fine */
    CHECK_OK(tpu_op_check(&op));
    op = base;
    op.fn = TPU_REDUCE_NORM;
    op.in[0].sizes[1] = 0; /* [3, 0] reduced over dim 1: three empty rows */
    static const double empty_ok[] = {2, 1, 0, 3.5, 0.5};
    for (size_t i = 0; i < sizeof empty_ok / sizeof empty_ok[0]; i++) {
        op.p.reduce.ord = empty_ok[i];
        CHECK_OK(tpu_op_check(&op));
    }
    op.p.reduce.ord = INFINITY;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "a norm of order inf over zero elements");
    op.p.reduce.ord = -INFINITY;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "a norm of order -inf over zero elements");
    op.p.reduce.ord = -1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "a norm of order -1 over zero elements");
    op.p.reduce.ord = -0.5;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "no identity");
    op.in[0].sizes[0] = op.out.sizes[0] = 0; /* nothing to write: fine */
    op.p.reduce.ord = INFINITY;
    CHECK_OK(tpu_op_check(&op));
    op.p.reduce.ord = -1;
    CHECK_OK(tpu_op_check(&op));
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_REDUCE, TPU_REDUCE_NORM), "invalid") != 0);
    /* Shapes: out of another rank, a kept dim of another size, a mask
     * beyond the rank. */
    op = base;
    op.fn = TPU_REDUCE_PROD;
    op.out.ndim = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out has rank 1 but in[0] has rank 2");
    op = base;
    op.fn = TPU_REDUCE_PROD;
    op.out.sizes[0] = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "needs 3 in dim 0");
    op = base;
    op.fn = TPU_REDUCE_AMAX;
    op.p.reduce.mask = 4;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "mask 0x4 names dims beyond rank 2");
    /* out overlapping the input, and itself. */
    op = base;
    op.fn = TPU_REDUCE_AMAX;
    op.out.data = buf + 4;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op = base;
    op.fn = TPU_REDUCE_ANY;
    op.out.dtype = BOOL;
    op.out.strides[0] = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "stride 0");
    op = base;
    op.n_in = 2;
    op.fn = TPU_REDUCE_PROD;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 2 (expected 1)");

    /* TRIL / TRIU: rank 2 at least; in place only as the same view. */
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_COPY;
    op.fn = TPU_COPY_TRIL;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = buf, .sizes = {4, 4}, .strides = {4, 1}, .ndim = 2,
                            .dtype = F32, .storage = buf, .storage_nbytes = sizeof buf};
    op.out = op.in[0];
    CHECK_OK(tpu_op_check(&op));
    op.fn = TPU_COPY_TRIU;
    op.out.data = buf + 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op.out = op.in[0];
    op.out.strides[0] = 1;
    op.out.strides[1] = 4; /* the transpose of in, in place: refused */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op.out = op.in[0];
    op.in[0].ndim = op.out.ndim = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "needs at least 2 dims, got 1");
    op.in[0].ndim = op.out.ndim = 0;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "needs at least 2 dims, got 0");
    op.in[0].ndim = op.out.ndim = 2;
    op.out.sizes[1] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "in[0] has sizes [4, 4] but out has [4, 3]");
    op.out.sizes[1] = 4;
    op.fn = TPU_COPY_COUNT;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "has no function 3");
    /* COPY_H2D has PLAIN only. */
    op.code = TPU_OP_COPY_H2D;
    op.fn = TPU_COPY_TRIL;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_INVALID_ARG);

    /* RANDOM INTEGERS: any out but bool, no inputs. */
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_RANDOM;
    op.fn = TPU_RANDOM_INTEGERS;
    op.out = (tpu_tensor){.data = buf, .sizes = {8}, .strides = {1}, .ndim = 1, .dtype = BOOL,
                          .storage = buf, .storage_nbytes = sizeof buf};
    op.p.rand.span = 2;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out dtype bool is not supported");
    static const tpu_dtype fine[] = {F32, F64, F16, BF16, I8, I16, I32, I64, U8};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        op.out.dtype = fine[i];
        CHECK_OK(tpu_op_check(&op));
    }
    op.n_in = 1;
    op.in[0] = op.out;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 1 (expected 0)");
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_RANDOM, TPU_RANDOM_INTEGERS), "random") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_REDUCE, TPU_REDUCE_ARGMIN), "argmin") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_COPY, TPU_COPY_TRIU), "invalid") != 0);
}

int main(void) {
    refusals();
    reduce_known();
    reduce_extent_one();
    norm_known();
    test_reductions();
    test_picks_long_runs();
    test_var();
    var_refusals();
    test_norm();
    test_tri();
    test_integers();
    printf("reduce, tril/triu, integers: %d cases x %d modes x %d thread counts\n", g_cases,
           (int)N_MODES, (int)N_NTHS);
    return check_report();
}
