/* SCAN (cumsum, cumprod, cummax, cummin, logcumsumexp) and SORT (sort,
 * topk) kernel tests against loops written here from op.h's definitions:
 *
 *   CUMSUM/PROD  out[.., i, ..] = x[.., 0, ..] op ... op x[.., i, ..] along
 *                dim, the running value an f64 for float outs (every
 *                element converted to it exactly) and a wrapping 64-bit
 *                integer for integer outs; each prefix rounded once to
 *                out's dtype (f32/f64 compared exactly, f16/bf16 within
 *                one store). Expected values are computed before the run,
 *                so that in-place records (out the very view of in[0])
 *                are checked too.
 *   CUMMAX/MIN   the position of the running extreme, moving to every
 *                later equal value (ties: the latest wins, -0 and 0 equal)
 *                and to every NaN, and once on a NaN only to a later NaN;
 *                values compared byte for byte with the input
 *                element that position names (NaN: any NaN), positions
 *                exactly; every dtype, bool too.
 *   LOGCUMSUMEXP log of the running sum of exp, recomputed here by another
 *                route (a running maximum m and the sum of exp(x - m), so
 *                that nothing overflows): -inf elements add nothing, +inf
 *                makes the rest +inf, NaN the rest NaN; compared within a
 *                few f64 ulps per step, plus one store for narrower outs.
 *   SORT/TOPK    a stable insertion sort of every line (ascending: NaN
 *                last; descending: NaN first; equal values, -0 and 0 too,
 *                in their original order); values compared byte for byte
 *                with the input element they name (NaN: any NaN), indices
 *                exactly; TOPK is the sorted line's first k entries.
 *
 * Every dim of 1-d to 3-d tensors, empty dims, every dtype the family
 * takes, inputs and outputs in every layout (transposed, gapped,
 * reversed). Every record runs in every kernel mode with nth = 1, 2, 3, 7
 * (sort with exactly tpu_op_scratch_bytes of poisoned scratch) and must
 * give the same bytes each time. Also tpu_op_check's refusals. */
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

static const struct {
    int ndim;
    int64_t sizes[3];
} k_shapes[] = {{1, {13}}, {1, {1}}, {1, {0}}, {2, {4, 6}}, {3, {3, 4, 5}}, {3, {2, 0, 3}},
                {2, {1, 1}}, {2, {70, 3}}, {1, {257}}};
enum { N_SHAPES = sizeof k_shapes / sizeof k_shapes[0] };

/* Coordinates of row-major index i of sizes (ndim dims). */
static void coords_of(int64_t i, int ndim, const int64_t *sizes, int64_t *c) {
    for (int d = ndim - 1; d >= 0; d--) {
        c[d] = i % sizes[d];
        i /= sizes[d];
    }
}

static unsigned char *at_coords(const tpu_tensor *t, const int64_t *c) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off += c[d] * t->strides[d];
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

/* ---------------------------------------------------------------- SCAN */

typedef struct {
    const char *what;
    fbuf *out;
    double *want_f;  /* float outs */
    int64_t *want_i; /* integer outs */
} scan_ctx;

static void verify_scan(void *p) {
    const scan_ctx *k = p;
    const tpu_tensor *o = &k->out->t;
    int64_t n = t_numel(o);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *g = t_at(o, i);
        if (t_is_float(o->dtype)) {
            double got = t_read_f(g, o->dtype), want = k->want_f[i];
            bool ok = o->dtype == F32 || o->dtype == F64
                          ? (isnan(want) ? isnan(got) : got == t_quant(want, o->dtype))
                          : close_to(got, want, tol_store(o->dtype, want)) ||
                                got == t_quant(want, o->dtype);
            if (!ok && g_bad++ < 4)
                fprintf(stderr, "    %s: element %lld = %.17g, want %.17g\n", k->what,
                        (long long)i, got, want);
        } else {
            int64_t got = t_read_i(g, o->dtype), want = k->want_i[i];
            if (got != want && g_bad++ < 4)
                fprintf(stderr, "    %s: element %lld = %lld, want %lld\n", k->what, (long long)i,
                        (long long)got, (long long)want);
        }
    }
}

/* A scan input value: small numbers (products near 1 for cumprod, so long
 * lines stay finite), zeros now and then, NaN/inf with nans, and integer
 * extremes (wrapping sums and products). */
static double gen_scan(tpu_dtype dt, bool prod, bool nans) {
    uint64_t r = t_rand();
    if (dt == BOOL)
        return (double)(r % 4 != 0);
    if (!t_is_float(dt)) {
        if (r % 13 == 0)
            return dt == U8 ? 255 : dt == I8 ? -128 : dt == I16 ? 32767 : dt == I32 ? 2147483647.0
                                                                         : 0x1p62;
        return (double)((int64_t)(r % 7) - (dt == U8 ? 0 : 3));
    }
    if (nans && r % 29 == 0)
        return r % 2 ? NAN : INFINITY;
    if (r % 17 == 0)
        return r % 2 ? 0.0 : -0.0;
    if (prod)
        return (r % 3 == 0 ? -1 : 1) * (0.75 + 0.5 * t_unit());
    return (double)(int64_t)(r % 64) / 8 - 4 + (dt == F64 ? t_unit() * 1e-3 : 0);
}

static void run_scan(int fn, tpu_dtype idt, tpu_dtype odt, int ndim, const int64_t *sizes,
                     int dim, bool in_place, int li, int lo, bool nans) {
    char what[200];
    int k = snprintf(what, sizeof what, "%s %s -> %s dim %d ", fn == TPU_SCAN_CUMSUM ? "cumsum"
                     : "cumprod", dt_str(idt), dt_str(odt), dim);
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " %s%s out %s%s", in_place ? "in place " : "in ",
             k_layout_names[li], k_layout_names[lo], nans ? " nans" : "");
    fbuf in, out;
    fb_make(&in, idt, ndim, sizes, li);
    if (!in_place)
        fb_make(&out, odt, ndim, sizes, lo);
    int64_t n = t_numel(&in.t);
    bool prod = fn == TPU_SCAN_CUMPROD;
    for (int64_t i = 0; i < n; i++) {
        /* Integer values for a float -> integer-valued scan stay exact. */
        double v = gen_scan(idt, prod, nans);
        fb_set(&in, i, v);
        if (idt == I64 && v == 0x1p62) /* more bits than a double holds */
            put_int(t_at(&in.t, i), I64, INT64_MAX - (int64_t)(t_rand() % 1000));
    }
    /* Expected prefixes, from the input as stored, before any run. */
    double *want_f = calloc((size_t)n + 1, sizeof *want_f);
    int64_t *want_i = calloc((size_t)n + 1, sizeof *want_i);
    int64_t c[TPU_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        coords_of(i, ndim, sizes, c);
        if (c[dim] != 0)
            continue;
        double acc_f = prod ? 1 : 0;
        uint64_t acc_i = prod ? 1 : 0;
        int64_t stride_rm = 1; /* row-major step along dim */
        for (int d = dim + 1; d < ndim; d++)
            stride_rm *= sizes[d];
        for (int64_t j = 0; j < sizes[dim]; j++) {
            c[dim] = j;
            const unsigned char *x = at_coords(&in.t, c);
            int64_t at = i + j * stride_rm;
            if (t_is_float(odt)) {
                double v = t_is_float(idt) ? t_read_f(x, idt) : (double)t_read_i(x, idt);
                acc_f = prod ? acc_f * v : acc_f + v;
                want_f[at] = acc_f;
            } else {
                uint64_t v = (uint64_t)t_read_i(x, idt);
                acc_i = prod ? acc_i * v : acc_i + v;
                want_i[at] = t_wrap((int64_t)acc_i, odt);
            }
        }
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SCAN;
    op.fn = fn;
    op.n_in = 1;
    op.in[0] = in.t;
    op.out = in_place ? in.t : out.t;
    op.p.scan.dim = dim;
    scan_ctx ctx = {what, in_place ? &in : &out, want_f, want_i};
    op_bufs bufs = {{in_place ? &in : &out}, 1, {&in}, in_place ? 0 : 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_scan, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    free(want_f);
    free(want_i);
    fb_free(&in);
    if (!in_place)
        fb_free(&out);
}

static void test_scan(void) {
    static const tpu_dtype pairs[][2] = {
        {F32, F32}, {F64, F64}, {F16, F16}, {BF16, BF16}, {F16, F32}, {BF16, F64}, {F32, F64},
        {I32, I64}, {I8, I8},   {U8, I64},  {U8, U8},     {BOOL, I64}, {I64, I64}, {I16, I32},
        {I32, F64}, {BOOL, F32}, {I64, F32}};
    enum { NP = sizeof pairs / sizeof pairs[0] };
    int rot = 0;
    /* The running sum and product; the others have their own runners. */
    for (int fn = TPU_SCAN_CUMSUM; fn <= TPU_SCAN_CUMPROD; fn++)
        for (int s = 0; s < N_SHAPES; s++)
            for (int dim = 0; dim < k_shapes[s].ndim; dim++)
                for (int p = 0; p < NP; p++, rot++) {
                    tpu_dtype idt = pairs[p][0], odt = pairs[p][1];
                    run_scan(fn, idt, odt, k_shapes[s].ndim, k_shapes[s].sizes, dim, false,
                             rot % L_COUNT, (rot / 3) % L_COUNT, rot % 4 == 0);
                    /* In place: out the very view of in[0] (same dtype). */
                    if (idt == odt && rot % 2 == 0)
                        run_scan(fn, idt, odt, k_shapes[s].ndim, k_shapes[s].sizes, dim, true,
                                 (rot / 2) % L_COUNT, 0, rot % 3 == 0);
                }
}

/* Known answers: cumsum and cumprod of a short row, and the wrap of int8. */
static void scan_known(void) {
    double x[5] = {1, 2, 3, 4, 5}, y[5];
    int8_t b[4] = {100, 27, 1, -128}, bo[4];
    for (int fn = 0; fn < 2; fn++) {
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_SCAN;
        op.fn = fn;
        op.n_in = 1;
        op.in[0] = (tpu_tensor){.data = x, .sizes = {5}, .strides = {1}, .ndim = 1, .dtype = F64,
                                .storage = x, .storage_nbytes = sizeof x};
        op.out = op.in[0];
        op.out.data = op.out.storage = y;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(fn == 0 ? y[0] == 1 && y[1] == 3 && y[2] == 6 && y[3] == 10 && y[4] == 15
                      : y[0] == 1 && y[1] == 2 && y[2] == 6 && y[3] == 24 && y[4] == 120);
        op.in[0] = (tpu_tensor){.data = b, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = I8,
                                .storage = b, .storage_nbytes = sizeof b};
        op.out = op.in[0];
        op.out.data = op.out.storage = bo;
        CHECK_OK(tpu_op_run(&op, 0, 1));
        /* 100, 127, 128 -> -128, 0; products 100, 2700 -> -116, -116, 14848 -> 0 */
        CHECK(fn == 0 ? bo[0] == 100 && bo[1] == 127 && bo[2] == -128 && bo[3] == 0
                      : bo[0] == 100 && bo[1] == (int8_t)(2700 & 0xff) &&
                            bo[2] == (int8_t)(2700 & 0xff) && bo[3] == 0);
    }
}

static void scan_refusals(void) {
    float buf[64] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SCAN;
    op.fn = TPU_SCAN_CUMSUM;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = buf, .sizes = {3, 4}, .strides = {4, 1}, .ndim = 2,
                            .dtype = F32, .storage = buf, .storage_nbytes = sizeof buf};
    op.out = op.in[0];
    op.out.data = buf + 16;
    tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    op.p.scan.dim = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "dim 2 is out of range for 2 dims");
    op.p.scan.dim = -1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "dim -1 is out of range");
    op = ok;
    op.out.dtype = BOOL;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out dtype bool is not supported");
    op.fn = TPU_SCAN_CUMPROD;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out dtype bool is not supported");
    op = ok;
    op.in[0].dtype = BOOL; /* a bool input is fine */
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.out.sizes[1] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "in[0] has sizes [3, 4] but out has [3, 3]");
    op = ok;
    op.out.data = buf + 1; /* overlapping, not the same view */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op = ok;
    op.out = op.in[0]; /* the same view: in place */
    CHECK_OK(tpu_op_check(&op));
    op.out.strides[0] = 1;
    op.out.strides[1] = 4; /* the same bytes, transposed: refused */
    op.out.sizes[0] = 4;
    op.out.sizes[1] = 3;
    op.in[0].sizes[0] = 4;
    op.in[0].sizes[1] = 3;
    op.in[0].strides[0] = 3;
    op.in[0].strides[1] = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op = ok;
    op.in[0].ndim = op.out.ndim = 0; /* 0-d: described as 1-d of size 1 */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "dim 0 is out of range for 0 dims");
    op = ok;
    op.n_in = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 2 (expected 1)");
    op = ok;
    op.fn = TPU_SCAN_COUNT;
    char none[32];
    snprintf(none, sizeof none, "has no function %d", (int)TPU_SCAN_COUNT);
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, none);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SCAN, TPU_SCAN_CUMPROD), "cumprod") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SCAN, TPU_SCAN_CUMMAX), "cummax") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SCAN, TPU_SCAN_CUMMIN), "cummin") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SCAN, TPU_SCAN_LOGCUMSUMEXP), "logcumsumexp") == 0);

    /* CUMMAX / CUMMIN: one further output, int64 positions of out's sizes,
     * and values in in[0]'s own dtype (bool too). */
    int64_t ib[32] = {0};
    op = ok;
    op.fn = TPU_SCAN_CUMMAX;
    op.n_aux = 1;
    op.aux[0] = (tpu_tensor){.data = ib, .sizes = {3, 4}, .strides = {4, 1}, .ndim = 2,
                             .dtype = I64, .storage = ib, .storage_nbytes = sizeof ib};
    op.p.scan.dim = 1;
    tpu_op ext = op;
    CHECK_OK(tpu_op_check(&op));
    op.fn = TPU_SCAN_CUMMIN;
    CHECK_OK(tpu_op_check(&op));
    for (int fn = TPU_SCAN_CUMMAX; fn <= TPU_SCAN_CUMMIN; fn++) {
        op = ext;
        op.fn = fn;
        op.in[0].dtype = op.out.dtype = BOOL; /* unlike the sums, bool is fine */
        CHECK_OK(tpu_op_check(&op));
        op = ext;
        op.fn = fn;
        op.n_aux = 0; /* the positions are not optional */
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 0 (expected 1)");
        op.n_aux = 1;
        op.aux[0] = (tpu_tensor){0}; /* counted but absent */
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0]");
        op = ext;
        op.fn = fn;
        op.aux[0].dtype = I32;
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "indices be int64 of out's sizes");
        op.aux[0].dtype = F64; /* 8 bytes like int64, still not positions */
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "indices be int64 of out's sizes");
        op = ext;
        op.fn = fn;
        op.aux[0].sizes[1] = 3;
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "indices be int64 of out's sizes");
        op = ext;
        op.fn = fn;
        op.aux[0].ndim = 1; /* [3]: a prefix of out's sizes is not enough */
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "indices be int64 of out's sizes");
        op = ext;
        op.fn = fn;
        op.out.dtype = F64; /* the values keep in[0]'s dtype: no conversion */
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "values must have in[0]'s dtype");
        op = ext;
        op.fn = fn;
        op.out = op.in[0]; /* in place, as the other scans */
        CHECK_OK(tpu_op_check(&op));
        op = ext;
        op.fn = fn;
        op.aux[0].data = op.aux[0].storage = buf + 16; /* the positions over the values */
        op.aux[0].storage_nbytes = 48 * sizeof(float);
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps out");
        op.aux[0].data = op.aux[0].storage = buf; /* over the input */
        op.aux[0].storage_nbytes = sizeof buf;
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps in[0]");
    }
    op = ext;
    op.fn = TPU_SCAN_CUMSUM; /* the sums write no positions */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 1 (expected 0)");
    op.fn = TPU_SCAN_LOGCUMSUMEXP;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 1 (expected 0)");

    /* LOGCUMSUMEXP: float outs only; any input (converted to f64). */
    op = ok;
    op.fn = TPU_SCAN_LOGCUMSUMEXP;
    tpu_op lse = op;
    CHECK_OK(tpu_op_check(&op));
    op.in[0].dtype = I32;
    CHECK_OK(tpu_op_check(&op));
    op.in[0].dtype = BOOL;
    CHECK_OK(tpu_op_check(&op));
    static const tpu_dtype not_float[] = {I8, I16, I32, I64, U8};
    for (size_t d = 0; d < sizeof not_float / sizeof not_float[0]; d++) {
        op = lse;
        op.in[0].dtype = op.out.dtype = not_float[d];
        char msg[64];
        snprintf(msg, sizeof msg, "out dtype %s is not a float", tpu_dtype_name(not_float[d]));
        CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, msg);
    }
    op = lse;
    op.out.dtype = BOOL;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out dtype bool is not supported");
    op = lse;
    op.out.dtype = F16; /* any float out, whatever the input */
    CHECK_OK(tpu_op_check(&op));
    op = lse;
    op.out = op.in[0];
    CHECK_OK(tpu_op_check(&op));
    op = lse;
    op.p.scan.dim = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "dim 2 is out of range for 2 dims");
}

/* ---------------------------------------------------------------- SORT */

typedef struct {
    const char *what;
    fbuf *in, *out, *ix;
    int dim;
    bool desc;
} sort_ctx;

/* Whether value a goes strictly before b: NaN above every number. */
static bool goes_before(const unsigned char *a, const unsigned char *b, tpu_dtype dt, bool desc) {
    if (t_is_float(dt)) {
        double x = t_read_f(a, dt), y = t_read_f(b, dt);
        bool nx = isnan(x), ny = isnan(y);
        if (nx || ny)
            return desc ? nx && !ny : !nx && ny;
        return desc ? x > y : x < y;
    }
    int64_t x = t_read_i(a, dt), y = t_read_i(b, dt);
    return desc ? x > y : x < y;
}

static void verify_sort(void *p) {
    const sort_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *o = &k->out->t, *ix = &k->ix->t;
    const int dim = k->dim, nd = in->ndim;
    const int64_t len = in->sizes[dim], kk = o->sizes[dim], n = t_numel(in);
    const size_t es = t_size(in->dtype);
    int64_t *order = malloc((size_t)(len + 1) * sizeof *order);
    int64_t c[TPU_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        coords_of(i, nd, in->sizes, c);
        if (c[dim] != 0)
            continue;
        /* Stable insertion sort of the line's positions. */
        for (int64_t j = 0; j < len; j++) {
            c[dim] = j;
            const unsigned char *v = at_coords(in, c);
            int64_t at = j;
            while (at > 0) {
                c[dim] = order[at - 1];
                if (!goes_before(v, at_coords(in, c), in->dtype, k->desc))
                    break;
                order[at] = order[at - 1];
                at--;
            }
            order[at] = j;
        }
        for (int64_t j = 0; j < kk; j++) {
            c[dim] = order[j];
            const unsigned char *src = at_coords(in, c);
            c[dim] = j;
            const unsigned char *got = at_coords(o, c);
            int64_t got_i = t_read_i(at_coords(ix, c), I64);
            bool same = memcmp(got, src, es) == 0 ||
                        (t_is_float(in->dtype) && isnan(t_read_f(got, in->dtype)) &&
                         isnan(t_read_f(src, in->dtype)));
            if ((!same || got_i != order[j]) && g_bad++ < 4)
                fprintf(stderr, "    %s: line at element %lld, entry %lld: value %.17g index %lld, "
                        "want %.17g index %lld\n", k->what, (long long)i, (long long)j,
                        t_read_f(got, in->dtype), (long long)got_i, t_read_f(src, in->dtype),
                        (long long)order[j]);
        }
    }
    free(order);
}

/* A sort input value: few distinct values (ties), both zeros, NaN and
 * infinities, and the dtype's extremes. */
static double gen_sort(tpu_dtype dt, bool nans) {
    uint64_t r = t_rand();
    if (dt == BOOL)
        return (double)(r % 2);
    if (t_is_float(dt)) {
        if (nans && r % 7 == 0)
            return NAN;
        switch (r % 9) {
        case 0: return 0.0;
        case 1: return -0.0;
        case 2: return r % 4 == 2 ? INFINITY : -INFINITY;
        case 3: return dt == F16 ? (r % 2 ? 65504 : -65504) : (r % 2 ? 1e30 : -1e30);
        default: return (double)((int64_t)(r % 9) - 4) / 2;
        }
    }
    if (r % 8 == 0) {
        switch (dt) {
        case TPU_DTYPE_I8: return r % 2 ? 127 : -128;
        case TPU_DTYPE_U8: return r % 2 ? 255 : 0;
        case TPU_DTYPE_I16: return r % 2 ? 32767 : -32768;
        case TPU_DTYPE_I32: return r % 2 ? 2147483647.0 : -2147483648.0;
        default: return r % 2 ? 0x1p62 : -0x1p63;
        }
    }
    double v = (double)((int64_t)(r % 5) - 2);
    return dt == U8 ? fabs(v) : v;
}

static void run_sort(bool topk, int64_t kk, tpu_dtype dt, int ndim, const int64_t *sizes, int dim,
                     bool desc, int li, int lo, int lx, bool nans) {
    char what[200];
    int k = snprintf(what, sizeof what, "%s %s dim %d%s ", topk ? "topk" : "sort", dt_str(dt),
                     dim, desc ? " descending" : "");
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " k %lld layouts %s/%s/%s%s", (long long)kk,
             k_layout_names[li], k_layout_names[lo], k_layout_names[lx], nans ? " nans" : "");
    int64_t osizes[TPU_MAX_DIMS];
    memcpy(osizes, sizes, (size_t)ndim * sizeof *osizes);
    if (topk)
        osizes[dim] = kk;
    fbuf in, out, ix;
    fb_make(&in, dt, ndim, sizes, li);
    fb_make(&out, dt, ndim, osizes, lo);
    fb_make(&ix, I64, ndim, osizes, lx);
    int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++) {
        double v = gen_sort(dt, nans);
        fb_set(&in, i, v);
        if (dt == I64 && fabs(v) >= 0x1p62) /* the true extremes */
            put_int(t_at(&in.t, i), I64, v > 0 ? INT64_MAX : INT64_MIN);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SORT;
    op.fn = topk ? TPU_SORT_TOPK : TPU_SORT_SORT;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = in.t;
    op.out = out.t;
    op.aux[0] = ix.t;
    op.p.sort.dim = dim;
    op.p.sort.descending = desc;
    sort_ctx ctx = {what, &in, &out, &ix, dim, desc};
    op_bufs bufs = {{&out, &ix}, 2, {&in}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_sort, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&in);
    fb_free(&out);
    fb_free(&ix);
}

static void test_sort(void) {
    static const tpu_dtype dts[] = {F32, F64, F16, BF16, I8, I16, I32, I64, U8, BOOL};
    int rot = 0;
    for (int s = 0; s < N_SHAPES; s++)
        for (int dim = 0; dim < k_shapes[s].ndim; dim++)
            for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                for (int desc = 0; desc < 2; desc++, rot++) {
                    int nd = k_shapes[s].ndim;
                    const int64_t *sz = k_shapes[s].sizes;
                    int64_t len = sz[dim];
                    run_sort(false, len, dts[d], nd, sz, dim, desc, rot % L_COUNT,
                             (rot / 2) % L_COUNT, (rot / 3) % L_COUNT, rot % 3 != 1);
                    /* TOPK: every k for short lines, the ends, a middle and
                     * the fast kernel's largest selection (64) for long ones. */
                    for (int64_t kk = 0; kk <= len; kk++) {
                        if (len > 6 && kk != 0 && kk != 1 && kk != len / 2 && kk != len - 1 &&
                            kk != len && kk != 64)
                            continue;
                        if (nd == 3 && kk % 2 == 1 && kk != len) /* keep it short */
                            continue;
                        run_sort(true, kk, dts[d], nd, sz, dim, desc, (rot + (int)kk) % L_COUNT,
                                 (rot / 2 + (int)kk) % L_COUNT, rot % L_COUNT, rot % 2 == 0);
                    }
                }
}

/* Known answers: stability of ties and of -0 / 0, NaN placement. */
static void sort_known(void) {
    const double x[7] = {1, NAN, -0.0, 0.0, -1, NAN, 1};
    double out[7];
    int64_t ix[7];
    for (int desc = 0; desc < 2; desc++) {
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_SORT;
        op.fn = TPU_SORT_SORT;
        op.n_in = 1;
        op.n_aux = 1;
        op.in[0] = (tpu_tensor){.data = (void *)x, .sizes = {7}, .strides = {1}, .ndim = 1,
                                .dtype = F64, .storage = (void *)x, .storage_nbytes = sizeof x};
        op.out = op.in[0];
        op.out.data = op.out.storage = out;
        op.aux[0] = (tpu_tensor){.data = ix, .sizes = {7}, .strides = {1}, .ndim = 1, .dtype = I64,
                                 .storage = ix, .storage_nbytes = sizeof ix};
        op.p.sort.descending = desc;
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "bytes of scratch but has 0");
        void *scratch = give_scratch(&op);
        CHECK(op.scratch_nbytes >= 7);
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        free(scratch);
        /* ascending: -1, -0 (2), 0 (3), 1 (0), 1 (6), NaN (1), NaN (5);
         * descending: NaN (1), NaN (5), 1 (0), 1 (6), -0 (2), 0 (3), -1. */
        static const int64_t asc[7] = {4, 2, 3, 0, 6, 1, 5}, dsc[7] = {1, 5, 0, 6, 2, 3, 4};
        const int64_t *want = desc ? dsc : asc;
        for (int i = 0; i < 7; i++) {
            CHECK(ix[i] == want[i]);
            double w = x[want[i]];
            CHECK(isnan(w) ? isnan(out[i]) : out[i] == w && signbit(out[i]) == signbit(w));
        }
    }
}

static void sort_refusals(void) {
    float buf[64] = {0};
    int64_t ib[32] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SORT;
    op.fn = TPU_SORT_SORT;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = (tpu_tensor){.data = buf, .sizes = {3, 4}, .strides = {4, 1}, .ndim = 2,
                            .dtype = F32, .storage = buf, .storage_nbytes = sizeof buf};
    op.out = op.in[0];
    op.out.data = buf + 16;
    op.aux[0] = (tpu_tensor){.data = ib, .sizes = {3, 4}, .strides = {4, 1}, .ndim = 2,
                             .dtype = I64, .storage = ib, .storage_nbytes = sizeof ib};
    op.p.sort.dim = 1;
    CHECK(tpu_op_scratch_bytes(&op) > 0);
    void *scratch = give_scratch(&op);
    tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    op.scratch = NULL;
    op.scratch_nbytes = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "bytes of scratch but has 0");
    op = ok;
    op.scratch_nbytes = tpu_op_scratch_bytes(&op) - 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "bytes of scratch");
    op = ok;
    op.p.sort.dim = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "dim 2 is out of range for 2 dims");
    op = ok;
    op.out.dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "values must be float32 and indices int64");
    op = ok;
    op.aux[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "got float32 and int32");
    op = ok;
    op.out.sizes[1] = op.aux[0].sizes[1] = 3; /* SORT: the whole line */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit in[0] [3, 4] along dim 1");
    op.fn = TPU_SORT_TOPK; /* TOPK: k = 3 <= 4 fine */
    CHECK_OK(tpu_op_check(&op));
    op.out.sizes[1] = op.aux[0].sizes[1] = 0;
    CHECK_OK(tpu_op_check(&op));
    op.out.sizes[1] = op.aux[0].sizes[1] = 5; /* k > the line */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit in[0]");
    op.out.sizes[1] = 3;
    op.aux[0].sizes[1] = 2; /* values and indices differ */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit in[0]");
    op = ok;
    op.out.sizes[0] = op.aux[0].sizes[0] = 2; /* another dim differs */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit in[0]");
    op = ok;
    op.n_aux = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 0 (expected 1)");
    op = ok;
    op.aux[0].data = buf + 16; /* the indices over the values */
    op.aux[0].storage = buf;
    op.aux[0].storage_nbytes = sizeof buf;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps out");
    op = ok;
    op.out = op.in[0]; /* sorting in place is not allowed */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op = ok;
    op.fn = TPU_SORT_COUNT;
    char no_fn[32];
    snprintf(no_fn, sizeof no_fn, "has no function %d", (int)TPU_SORT_COUNT);
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, no_fn);
    free(scratch);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SORT, TPU_SORT_TOPK), "topk") == 0);
}

/* ------------------------------------------------- CUMMAX and CUMMIN */

/* (These come after SORT to share gen_sort: few distinct values, so ties
 * are common, both zeros, infinities, NaN and the dtypes' extremes.) */

typedef struct {
    const char *what;
    fbuf *out, *ix;
    unsigned char *want_v; /* row-major: the bytes of the input element named */
    int64_t *want_i;       /* row-major: its position along dim */
} extreme_ctx;

static void verify_extreme(void *p) {
    const extreme_ctx *k = p;
    const tpu_tensor *o = &k->out->t, *ix = &k->ix->t;
    const size_t es = t_size(o->dtype);
    const int64_t n = t_numel(o);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *got = t_at(o, i), *want = k->want_v + (size_t)i * es;
        int64_t got_i = t_read_i(t_at(ix, i), I64);
        bool same = memcmp(got, want, es) == 0 ||
                    (t_is_float(o->dtype) && isnan(t_read_f(got, o->dtype)) &&
                     isnan(t_read_f(want, o->dtype)));
        if ((!same || got_i != k->want_i[i]) && g_bad++ < 4)
            fprintf(stderr, "    %s: element %lld = %.17g at %lld, want %.17g at %lld\n", k->what,
                    (long long)i, t_read_f(got, o->dtype), (long long)got_i,
                    t_read_f(want, o->dtype), (long long)k->want_i[i]);
    }
}

/* Whether the element x takes the place of the running extreme cur:
 * cummax when x is not below it (>=: a later equal value wins), cummin
 * when not above it; a NaN x always does, and a NaN cur gives way to
 * nothing else. Integers compare as their dtype reads them (u8 unsigned,
 * i64 in full). */
static bool extreme_moves(bool max, const unsigned char *x, const unsigned char *cur,
                          tpu_dtype dt) {
    if (t_is_float(dt)) {
        double a = t_read_f(x, dt), c = t_read_f(cur, dt);
        if (isnan(a) || isnan(c))
            return isnan(a);
        return max ? !(a < c) : !(a > c);
    }
    int64_t a = t_read_i(x, dt), c = t_read_i(cur, dt);
    return max ? !(a < c) : !(a > c);
}

static void run_extreme(int fn, tpu_dtype dt, int ndim, const int64_t *sizes, int dim,
                        bool in_place, int li, int lo, int lx, bool nans) {
    const bool max = fn == TPU_SCAN_CUMMAX;
    char what[200];
    int k = snprintf(what, sizeof what, "%s %s dim %d ", max ? "cummax" : "cummin", dt_str(dt),
                     dim);
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " %s%s out %s idx %s%s",
             in_place ? "in place " : "in ", k_layout_names[li], k_layout_names[lo],
             k_layout_names[lx], nans ? " nans" : "");
    fbuf in, out, ix;
    fb_make(&in, dt, ndim, sizes, li);
    if (!in_place)
        fb_make(&out, dt, ndim, sizes, lo);
    fb_make(&ix, I64, ndim, sizes, lx);
    const int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++) {
        double v = gen_sort(dt, nans);
        fb_set(&in, i, v);
        if (dt == I64 && fabs(v) >= 0x1p62) /* the true extremes */
            put_int(t_at(&in.t, i), I64, v > 0 ? INT64_MAX : INT64_MIN);
    }
    /* Expected, from the input as stored, before any run (in place, the
     * run overwrites it). */
    const size_t es = t_size(dt);
    unsigned char *want_v = malloc((size_t)n * es + 1);
    int64_t *want_i = calloc((size_t)n + 1, sizeof *want_i);
    int64_t c[TPU_MAX_DIMS], stride_rm = 1; /* row-major step along dim */
    for (int d = dim + 1; d < ndim; d++)
        stride_rm *= sizes[d];
    for (int64_t i = 0; i < n; i++) {
        coords_of(i, ndim, sizes, c);
        if (c[dim] != 0)
            continue;
        int64_t pos = 0;
        for (int64_t j = 0; j < sizes[dim]; j++) {
            c[dim] = j;
            const unsigned char *x = at_coords(&in.t, c);
            c[dim] = pos;
            if (j == 0 || extreme_moves(max, x, at_coords(&in.t, c), dt))
                pos = j;
            c[dim] = pos;
            int64_t at = i + j * stride_rm;
            want_i[at] = pos;
            memcpy(want_v + (size_t)at * es, at_coords(&in.t, c), es);
        }
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SCAN;
    op.fn = fn;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = in.t;
    op.out = in_place ? in.t : out.t;
    op.aux[0] = ix.t;
    op.p.scan.dim = dim;
    extreme_ctx ctx = {what, in_place ? &in : &out, &ix, want_v, want_i};
    op_bufs bufs = {{in_place ? &in : &out, &ix}, 2, {&in}, in_place ? 0 : 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_extreme, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    free(want_v);
    free(want_i);
    fb_free(&in);
    if (!in_place)
        fb_free(&out);
    fb_free(&ix);
}

static void test_extreme(void) {
    static const tpu_dtype dts[] = {F32, F64, F16, BF16, I8, I16, I32, I64, U8, BOOL};
    int rot = 0;
    for (int fn = TPU_SCAN_CUMMAX; fn <= TPU_SCAN_CUMMIN; fn++)
        for (int s = 0; s < N_SHAPES; s++)
            for (int dim = 0; dim < k_shapes[s].ndim; dim++)
                for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++, rot++) {
                    int nd = k_shapes[s].ndim;
                    const int64_t *sz = k_shapes[s].sizes;
                    run_extreme(fn, dts[d], nd, sz, dim, false, rot % L_COUNT,
                                (rot / 2) % L_COUNT, (rot / 3) % L_COUNT, rot % 3 != 2);
                    if (rot % 3 == 0) /* in place: out the very view of in[0] */
                        run_extreme(fn, dts[d], nd, sz, dim, true, (rot / 3) % L_COUNT, 0,
                                    (rot / 4) % L_COUNT, rot % 2 == 0);
                }
}

/* ------------------------------------------------------- LOGCUMSUMEXP */

typedef struct {
    const char *what;
    fbuf *out;
    double *want; /* row-major */
    double *tol;  /* the f64 disagreement allowed at each element */
} lse_ctx;

static void verify_lse(void *p) {
    const lse_ctx *k = p;
    const tpu_tensor *o = &k->out->t;
    const int64_t n = t_numel(o);
    for (int64_t i = 0; i < n; i++) {
        double got = t_read_f(t_at(o, i), o->dtype), want = k->want[i];
        /* Narrower outs: the kernel's f64 value, within tol of want, is
         * rounded once more on the store. */
        double tol = k->tol[i] + (o->dtype == F64 ? 0 : tol_store(o->dtype, want));
        bool ok = close_to(got, want, tol) || got == t_quant(want, o->dtype);
        if (!ok && g_bad++ < 4)
            fprintf(stderr, "    %s: element %lld = %.17g, want %.17g\n", k->what, (long long)i,
                    got, want);
    }
}

/* A logcumsumexp input value: mostly in [-10, 10]; now and then -inf (adds
 * nothing), a magnitude near 1000 (exp overflows or underflows even f64,
 * so only a stable sum gets these), +inf and NaN with nans; integers
 * small, with the dtype's largest now and then. */
static double gen_lse(tpu_dtype dt, bool nans) {
    uint64_t r = t_rand();
    if (dt == BOOL)
        return (double)(r % 2);
    if (!t_is_float(dt)) {
        if (r % 11 == 0)
            return dt == U8 ? 255 : dt == I8 ? 127 : dt == I16 ? 32767 : dt == I32 ? 2147483647.0
                                                                       : 0x1p62;
        return (double)((int64_t)(r % 21) - (dt == U8 ? 0 : 10));
    }
    if (r % 11 == 0)
        return -INFINITY;
    if (nans && r % 23 == 0)
        return r % 2 ? NAN : INFINITY;
    if (r % 13 == 0)
        return (r % 2 ? 1 : -1) * (700 + 300 * t_unit());
    return 20 * t_unit() - 10;
}

static void run_lse(tpu_dtype idt, tpu_dtype odt, int ndim, const int64_t *sizes, int dim,
                    bool in_place, int li, int lo, bool nans) {
    char what[200];
    int k = snprintf(what, sizeof what, "logcumsumexp %s -> %s dim %d ", dt_str(idt), dt_str(odt),
                     dim);
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " %s%s out %s%s", in_place ? "in place " : "in ",
             k_layout_names[li], k_layout_names[lo], nans ? " nans" : "");
    fbuf in, out;
    fb_make(&in, idt, ndim, sizes, li);
    if (!in_place)
        fb_make(&out, odt, ndim, sizes, lo);
    const int64_t n = t_numel(&in.t);
    for (int64_t i = 0; i < n; i++) {
        double v = gen_lse(idt, nans);
        fb_set(&in, i, v);
        if (idt == I64 && v == 0x1p62)
            put_int(t_at(&in.t, i), I64, INT64_MAX);
    }
    double *want = calloc((size_t)n + 1, sizeof *want);
    double *tol = calloc((size_t)n + 1, sizeof *tol);
    int64_t c[TPU_MAX_DIMS], stride_rm = 1;
    for (int d = dim + 1; d < ndim; d++)
        stride_rm *= sizes[d];
    for (int64_t i = 0; i < n; i++) {
        coords_of(i, ndim, sizes, c);
        if (c[dim] != 0)
            continue;
        /* The sum as exp(m) * s, m the largest finite element so far: a
         * new largest rescales s instead of taking exp of anything big. */
        double m = -INFINITY, s = 0;
        bool has_nan = false, has_inf = false;
        for (int64_t j = 0; j < sizes[dim]; j++) {
            c[dim] = j;
            const unsigned char *p = at_coords(&in.t, c);
            double x = t_is_float(idt) ? t_read_f(p, idt) : (double)t_read_i(p, idt);
            if (isnan(x))
                has_nan = true;
            else if (x == INFINITY)
                has_inf = true;
            else if (x != -INFINITY) {
                if (x > m) {
                    s = s * exp(m - x) + 1;
                    m = x;
                } else {
                    s += exp(x - m);
                }
            }
            int64_t at = i + j * stride_rm;
            want[at] = has_nan ? NAN : has_inf ? INFINITY : m == -INFINITY ? -INFINITY
                                                                       : m + log(s);
            /* Both sides lose a few ulps of the running value per step. */
            tol[at] = isfinite(want[at]) ? 4 * (double)(j + 2) * 0x1p-52 * (1 + fabs(want[at]))
                                         : 0;
        }
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SCAN;
    op.fn = TPU_SCAN_LOGCUMSUMEXP;
    op.n_in = 1;
    op.in[0] = in.t;
    op.out = in_place ? in.t : out.t;
    op.p.scan.dim = dim;
    lse_ctx ctx = {what, in_place ? &in : &out, want, tol};
    op_bufs bufs = {{in_place ? &in : &out}, 1, {&in}, in_place ? 0 : 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_lse, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    free(want);
    free(tol);
    fb_free(&in);
    if (!in_place)
        fb_free(&out);
}

static void test_lse(void) {
    /* Float outs only; integer and bool inputs convert to f64 first. */
    static const tpu_dtype pairs[][2] = {
        {F32, F32}, {F64, F64}, {F16, F16}, {BF16, BF16}, {F16, F32}, {F32, F64},
        {BF16, F32}, {I32, F32}, {I64, F64}, {U8, F16},   {BOOL, F64}, {I8, BF16}};
    enum { NP = sizeof pairs / sizeof pairs[0] };
    int rot = 0;
    for (int s = 0; s < N_SHAPES; s++)
        for (int dim = 0; dim < k_shapes[s].ndim; dim++)
            for (int p = 0; p < NP; p++, rot++) {
                tpu_dtype idt = pairs[p][0], odt = pairs[p][1];
                run_lse(idt, odt, k_shapes[s].ndim, k_shapes[s].sizes, dim, false, rot % L_COUNT,
                        (rot / 3) % L_COUNT, rot % 3 != 0);
                if (idt == odt && rot % 2 == 0)
                    run_lse(idt, odt, k_shapes[s].ndim, k_shapes[s].sizes, dim, true,
                            (rot / 2) % L_COUNT, 0, rot % 4 == 0);
            }
}

/* Known answers, worked out by hand. */
#define LN2 0.693147180559945309417 /* log 2 (M_LN2 is not C11) */

static void extreme_lse_known(void) {
    /* cummax / cummin of f64: ties move the position to the latest; NaN,
     * once met, stays, and a later NaN takes the position. */
    const double x[8] = {1, 3, 3, 2, NAN, 5, NAN, 7};
    static const int64_t max_at[8] = {0, 1, 2, 2, 4, 4, 6, 6}, min_at[8] = {0, 0, 0, 0, 4, 4, 6, 6};
    double v[8];
    int64_t at[8];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SCAN;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = (tpu_tensor){.data = (void *)x, .sizes = {8}, .strides = {1}, .ndim = 1,
                            .dtype = F64, .storage = (void *)x, .storage_nbytes = sizeof x};
    op.out = op.in[0];
    op.out.data = op.out.storage = v;
    op.aux[0] = (tpu_tensor){.data = at, .sizes = {8}, .strides = {1}, .ndim = 1, .dtype = I64,
                             .storage = at, .storage_nbytes = sizeof at};
    const tpu_op f64_op = op;
    for (int fn = TPU_SCAN_CUMMAX; fn <= TPU_SCAN_CUMMIN; fn++) {
        op.fn = fn;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        const int64_t *want = fn == TPU_SCAN_CUMMAX ? max_at : min_at;
        for (int i = 0; i < 8; i++) {
            CHECK(at[i] == want[i]);
            CHECK(isnan(x[want[i]]) ? isnan(v[i]) : v[i] == x[want[i]]);
        }
    }
    /* -0 and 0 are equal: the later one is taken, sign and all. */
    const double z[3] = {0.0, -0.0, 0.0};
    op.in[0].data = op.in[0].storage = (void *)z;
    op.in[0].sizes[0] = op.out.sizes[0] = op.aux[0].sizes[0] = 3;
    for (int fn = TPU_SCAN_CUMMAX; fn <= TPU_SCAN_CUMMIN; fn++) {
        op.fn = fn;
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(at[0] == 0 && at[1] == 1 && at[2] == 2);
        CHECK(v[1] == 0 && signbit(v[1]) && !signbit(v[2]));
    }
    /* -inf everywhere: every position its own (all equal). */
    const double ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    op.in[0].data = op.in[0].storage = (void *)ninf;
    op.fn = TPU_SCAN_CUMMAX;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(at[0] == 0 && at[1] == 1 && at[2] == 2 && v[2] == -INFINITY);
    /* Integers in their own dtype: u8 compares unsigned, i64 in full. */
    const uint8_t u[4] = {200, 100, 255, 255};
    uint8_t uv[4];
    op = f64_op;
    op.in[0].data = op.in[0].storage = (void *)u;
    op.in[0].dtype = op.out.dtype = U8;
    op.in[0].sizes[0] = op.out.sizes[0] = op.aux[0].sizes[0] = 4;
    op.in[0].storage_nbytes = op.out.storage_nbytes = sizeof u;
    op.out.data = op.out.storage = uv;
    op.fn = TPU_SCAN_CUMMAX;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(uv[0] == 200 && uv[1] == 200 && uv[2] == 255 && uv[3] == 255);
    CHECK(at[0] == 0 && at[1] == 0 && at[2] == 2 && at[3] == 3);
    op.fn = TPU_SCAN_CUMMIN;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(uv[0] == 200 && uv[1] == 100 && uv[2] == 100 && uv[3] == 100);
    CHECK(at[0] == 0 && at[1] == 1 && at[2] == 1 && at[3] == 1);
    const int64_t big[4] = {INT64_MIN, INT64_MAX, INT64_MAX - 1, INT64_MAX};
    int64_t bv[4];
    op.in[0].data = op.in[0].storage = (void *)big;
    op.in[0].dtype = op.out.dtype = I64;
    op.in[0].storage_nbytes = op.out.storage_nbytes = sizeof big;
    op.out.data = op.out.storage = bv;
    op.fn = TPU_SCAN_CUMMAX; /* INT64_MAX - 1 and INT64_MAX are one double */
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(bv[0] == INT64_MIN && bv[1] == INT64_MAX && bv[2] == INT64_MAX && bv[3] == INT64_MAX);
    CHECK(at[0] == 0 && at[1] == 1 && at[2] == 1 && at[3] == 3);
    op.fn = TPU_SCAN_CUMMIN;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(bv[3] == INT64_MIN && at[0] == 0 && at[1] == 0 && at[2] == 0 && at[3] == 0);
    /* bool: max is "any so far", min "all so far"; ties move too. */
    const bool b[4] = {false, true, false, true};
    bool bo[4];
    op.in[0].data = op.in[0].storage = (void *)b;
    op.in[0].dtype = op.out.dtype = BOOL;
    op.in[0].storage_nbytes = op.out.storage_nbytes = sizeof b;
    op.out.data = op.out.storage = bo;
    op.fn = TPU_SCAN_CUMMAX;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(!bo[0] && bo[1] && bo[2] && bo[3]);
    CHECK(at[0] == 0 && at[1] == 1 && at[2] == 1 && at[3] == 3);
    op.fn = TPU_SCAN_CUMMIN;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(!bo[0] && !bo[1] && !bo[2] && !bo[3]);
    CHECK(at[0] == 0 && at[1] == 0 && at[2] == 2 && at[3] == 2);

    /* logcumsumexp in f64: log 2 from two zeros; -inf adds nothing;
     * e^1000 overflows f64, yet log(2 + e^1000) = 1000 and
     * log(2 + 2 e^1000) = 1000 + log 2; +inf, then NaN, stay. */
    const double l[9] = {0, 0, -INFINITY, 1000, 1000, INFINITY, 1, NAN, 2};
    const double lw[9] = {0, LN2, LN2, 1000, 1000 + LN2, INFINITY, INFINITY, NAN, NAN};
    double lo[9];
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SCAN;
    op.fn = TPU_SCAN_LOGCUMSUMEXP;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = (void *)l, .sizes = {9}, .strides = {1}, .ndim = 1,
                            .dtype = F64, .storage = (void *)l, .storage_nbytes = sizeof l};
    op.out = op.in[0];
    op.out.data = op.out.storage = lo;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    for (int i = 0; i < 9; i++)
        CHECK(close_to(lo[i], lw[i], 1e-12 * (1 + fabs(lw[i]))));
    /* Only -inf: -inf; then e^-1000 underflows, yet the log is -1000 and
     * -1000 + log 2. */
    const double m[4] = {-INFINITY, -INFINITY, -1000, -1000};
    op.in[0].data = op.in[0].storage = (void *)m;
    op.in[0].sizes[0] = op.out.sizes[0] = 4;
    op.in[0].storage_nbytes = sizeof m;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(lo[0] == -INFINITY && lo[1] == -INFINITY);
    CHECK(close_to(lo[2], -1000, 1e-12) && close_to(lo[3], -1000 + LN2, 1e-12));
    /* An f32 line whose exps overflow f32 (e^100 > 3.4e38): computed in
     * f64, stored as f32(100 + log 2). */
    const float f[2] = {100, 100};
    float fo[2];
    op.in[0] = (tpu_tensor){.data = (void *)f, .sizes = {2}, .strides = {1}, .ndim = 1,
                            .dtype = F32, .storage = (void *)f, .storage_nbytes = sizeof f};
    op.out = op.in[0];
    op.out.data = op.out.storage = fo;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(fo[0] == 100 && fo[1] == (float)(100 + LN2));
    /* Integers convert first: log(e^1 + e^2 + e^3) into f64. */
    const int32_t n3[3] = {1, 2, 3};
    double no[3];
    op.in[0] = (tpu_tensor){.data = (void *)n3, .sizes = {3}, .strides = {1}, .ndim = 1,
                            .dtype = I32, .storage = (void *)n3, .storage_nbytes = sizeof n3};
    op.out = (tpu_tensor){.data = no, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F64,
                          .storage = no, .storage_nbytes = sizeof no};
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(close_to(no[0], 1, 1e-15) && close_to(no[1], log(exp(1) + exp(2)), 1e-14) &&
          close_to(no[2], log(exp(1) + exp(2) + exp(3)), 1e-14));
}

int main(void) {
    scan_refusals();
    sort_refusals();
    scan_known();
    sort_known();
    extreme_lse_known();
    test_scan();
    test_extreme();
    test_lse();
    test_sort();
    printf("scan and sort: %d cases x %d modes x %d thread counts\n", g_cases, (int)N_MODES,
           (int)N_NTHS);
    return check_report();
}
