/* INDEX INTERP and INTERP_BACKWARD kernel tests, against loops written
 * here from op.h's definitions, and the interpolation tables
 * (tpu_interp_taps, tpu_interp_table).
 *
 *   INTERP           out[.. o ..] = w[o, t0] x[.. idx[o, t0] ..] + ... over the
 *                    present taps (index != -1) in t order, in f32 (f64 for f64
 *                    x), rounded once to out's dtype: compared bit for bit
 *   INTERP_BACKWARD  out[.. i ..] = 0 + w g[.. o ..] + ... over the (o, t) with
 *                    idx[o, t] == i in row-major order, in out's dtype (f32 or
 *                    f64): bit for bit
 *
 * Random tables (duplicate taps, absent taps anywhere in a row, rows with
 * none), ranks 1 to 5 with the interpolated dim at every position, odd
 * and zero sizes, blocks of lines longer than the kernels' block, every
 * layout of x, out and the tables (a strided table takes the reference
 * path), NaN among the values (infinities by value on their own), every dtype pair the
 * kernels take. Every record runs in every kernel mode with nth = 1, 2, 3
 * and 7 and must give the same bytes each time. Also: the adjoint
 * identity <interp(x), g> = <x, interp_backward(g)> in f64, tap indices
 * out of range (a kernel-side error that writes nothing), tpu_op_check's
 * refusals, and the tables' known answers and invariants. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "family_test.h"

static int g_cases;
static int64_t g_bad;

/* ------------------------------------------------------------ records */

typedef struct {
    int ndim;
    int64_t sizes[5]; /* in[0]'s sizes (x forward, out backward) */
    int dim;
    int64_t rows;     /* O: out's size along dim forward, the gradient's backward */
} shape_case;

static const shape_case k_shapes[] = {
    {1, {5}, 0, 8},
    {1, {9}, 0, 4},
    {2, {3, 7}, 1, 3},
    {2, {7, 3}, 0, 11},
    {3, {2, 5, 4}, 1, 9},
    {4, {2, 3, 5, 6}, 2, 4},
    {4, {2, 3, 5, 6}, 3, 13},
    {4, {1, 2, 130, 3}, 3, 5},   /* 130 lines along the inner dim: several blocks */
    {4, {1, 3, 4, 70}, 2, 7},    /* likewise, the interpolated dim outer */
    {5, {1, 2, 3, 4, 5}, 2, 6},
    {3, {0, 4, 5}, 2, 3},        /* no lines */
    {2, {4, 5}, 1, 0},           /* no rows */
    {2, {1, 1}, 0, 3},
};
enum { N_SHAPES = sizeof k_shapes / sizeof k_shapes[0] };

typedef struct {
    const char *what;
    bool fwd;
    fbuf *x, *out, *idx, *w;
    int dim;
} interp_ctx;

static tpu_dtype compute_of(tpu_dtype dt) {
    return dt == F64 ? F64 : F32;
}

static unsigned char *at_n(const tpu_tensor *t, const int64_t *i) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off += i[d] * t->strides[d];
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

/* Row-major logical index e of sizes -> coordinates. */
static void coords(int ndim, const int64_t *sizes, int64_t e, int64_t *i) {
    for (int d = ndim - 1; d >= 0; d--) {
        i[d] = e % sizes[d];
        e /= sizes[d];
    }
}

static bool same_value(double got, double want) {
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    return got == want && signbit(got) == signbit(want);
}

static void verify_interp(void *p) {
    const interp_ctx *k = p;
    const tpu_tensor *x = &k->x->t, *o = &k->out->t, *ix = &k->idx->t, *w = &k->w->t;
    const int64_t taps = ix->sizes[1], n = t_numel(o);
    const bool wide = x->dtype == F64;
    int64_t i[5], j[5];
    for (int64_t e = 0; e < n; e++) {
        coords(o->ndim, o->sizes, e, i);
        memcpy(j, i, sizeof j);
        const int64_t r = i[k->dim];
        bool first = true;
        float a32 = 0;
        double a64 = 0;
        for (int64_t t = 0; t < taps; t++) {
            int64_t at = t_read_i(t_at2(ix, r, t), I64);
            if (at < 0)
                continue;
            j[k->dim] = at;
            double wv = t_read_f(t_at2(w, r, t), w->dtype), xv = t_read_f(at_n(x, j), x->dtype);
            if (wide) {
                double v = wv * xv;
                a64 = first ? v : a64 + v;
            } else {
                float v = (float)wv * (float)xv;
                a32 = first ? v : a32 + v;
            }
            first = false;
        }
        double want = t_quant(wide ? a64 : (double)a32, o->dtype);
        double got = t_read_f(at_n(o, i), o->dtype);
        if (!same_value(got, want) && g_bad++ < 4)
            fprintf(stderr, "    %s: out element %lld = %.9g, want %.9g\n", k->what, (long long)e,
                    got, want);
    }
}

static void verify_backward(void *p) {
    const interp_ctx *k = p;
    const tpu_tensor *g = &k->x->t, *o = &k->out->t, *ix = &k->idx->t, *w = &k->w->t;
    const int64_t rows = ix->sizes[0], taps = ix->sizes[1], n = t_numel(o);
    const bool wide = o->dtype == F64;
    int64_t i[5], j[5];
    for (int64_t e = 0; e < n; e++) {
        coords(o->ndim, o->sizes, e, i);
        memcpy(j, i, sizeof j);
        float a32 = 0;
        double a64 = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t t = 0; t < taps; t++) {
                if (t_read_i(t_at2(ix, r, t), I64) != i[k->dim])
                    continue;
                j[k->dim] = r;
                double wv = t_read_f(t_at2(w, r, t), w->dtype), gv = t_read_f(at_n(g, j), g->dtype);
                if (wide)
                    a64 = a64 + wv * gv;
                else
                    a32 = a32 + (float)wv * (float)gv;
            }
        double want = wide ? a64 : (double)a32;
        double got = t_read_f(at_n(o, i), o->dtype);
        if (!same_value(got, want) && g_bad++ < 4)
            fprintf(stderr, "    %s: out element %lld = %.9g, want %.9g\n", k->what, (long long)e,
                    got, want);
    }
}

/* Values: mostly small numbers, some NaN when asked. Not infinities:
 * inf - inf makes the negative default NaN, and which of two NaNs an add
 * passes on depends on how the compiler orders its operands, so paths
 * would agree on NaN but not on its bytes (infinities are checked by
 * value in infinities()). */
static double gen_value(bool specials) {
    uint64_t r = t_rand();
    if (specials && r % 29 == 0)
        return NAN;
    return 4 * t_unit() - 2;
}

/* A random table of `rows` x `taps` over a dim of `size`: duplicate taps,
 * with `absent`, some absent (-1) anywhere (the kernels' fast paths take
 * tables without any), weights in [-0.5, 1.5). */
static void fill_table(fbuf *idx, fbuf *w, int64_t size, bool absent) {
    const int64_t rows = idx->t.sizes[0], taps = idx->t.sizes[1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < taps; t++) {
            uint64_t v = t_rand();
            int64_t at = size == 0 || (absent && v % 7 == 0) ? -1 : (int64_t)(v % (uint64_t)size);
            put_int(t_at2(&idx->t, r, t), I64, at);
            fb_set2(w, r, t, 2 * t_unit() - 0.5);
        }
}

static tpu_op interp_op(bool fwd, int dim, const fbuf *x, const fbuf *out, const fbuf *idx,
                        const fbuf *w) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = fwd ? TPU_INDEX_INTERP : TPU_INDEX_INTERP_BACKWARD;
    op.n_in = 3;
    op.in[0] = x->t;
    op.in[1] = idx->t;
    op.in[2] = w->t;
    op.out = out->t;
    op.p.index.dim = dim;
    return op;
}

/* One record: shape si with `taps` taps; in[0] of dtype xdt in layout lx,
 * out of odt in layout lo; the table contiguous or transposed (lt). */
static void run_interp(bool fwd, int si, int64_t taps, tpu_dtype xdt, tpu_dtype odt, int lx,
                       int lo, int lt, bool specials, bool absent) {
    const shape_case *s = &k_shapes[si];
    char what[256];
    int k = snprintf(what, sizeof what, "%s %s->%s ", fwd ? "interp" : "interp_backward",
                     dt_str(xdt), dt_str(odt));
    fmt_dims(what, sizeof what, &k, s->ndim, s->sizes);
    snprintf(what + k, sizeof what - (size_t)k, " dim %d rows %lld taps %lld%s layouts %s/%s/%s",
             s->dim, (long long)s->rows, (long long)taps, absent ? " (some absent)" : "",
             k_layout_names[lx], k_layout_names[lo], k_layout_names[lt]);
    int64_t in_sizes[5], out_sizes[5];
    memcpy(in_sizes, s->sizes, sizeof in_sizes);
    memcpy(out_sizes, s->sizes, sizeof out_sizes);
    /* Forward: x has the dim's size, out the rows. Backward: the gradient
     * (in[0]) has the rows, out the dim's size. */
    if (fwd)
        out_sizes[s->dim] = s->rows;
    else
        in_sizes[s->dim] = s->rows;
    const int64_t range = s->sizes[s->dim];
    fbuf x, out, idx, w;
    fb_make(&x, xdt, s->ndim, in_sizes, lx);
    fb_make(&out, odt, s->ndim, out_sizes, lo);
    fb_make2(&idx, I64, s->rows, taps, lt);
    fb_make2(&w, compute_of(xdt), s->rows, taps, lt);
    fill_table(&idx, &w, range, absent);
    int64_t n = t_numel(&x.t);
    for (int64_t i = 0; i < n; i++)
        fb_set(&x, i, gen_value(specials));
    tpu_op op = interp_op(fwd, s->dim, &x, &out, &idx, &w);
    interp_ctx ctx = {what, fwd, &x, &out, &idx, &w, s->dim};
    op_bufs bufs = {{&out}, 1, {&x, &idx, &w}, 3};
    g_bad = 0;
    run_everywhere(&op, &bufs, fwd ? verify_interp : verify_backward, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&x);
    fb_free(&out);
    fb_free(&idx);
    fb_free(&w);
}

static void test_records(void) {
    static const tpu_dtype fwd_pairs[][2] = {{F32, F32},  {F64, F64},  {BF16, F32}, {F16, F32},
                                             {F32, BF16}, {F32, F16},  {BF16, BF16}, {F16, F16},
                                             {BF16, F16}};
    static const tpu_dtype bwd_pairs[][2] = {{F32, F32}, {F64, F64}, {BF16, F32}, {F16, F32}};
    static const int64_t k_taps[] = {1, 2, 4, 5};
    int rot = 0;
    for (int si = 0; si < N_SHAPES; si++)
        for (size_t ti = 0; ti < sizeof k_taps / sizeof k_taps[0]; ti++) {
            for (size_t p = 0; p < sizeof fwd_pairs / sizeof fwd_pairs[0]; p++, rot++)
                for (int absent = 0; absent < 2; absent++)
                    run_interp(true, si, k_taps[ti], fwd_pairs[p][0], fwd_pairs[p][1],
                               rot % L_COUNT, (rot / 4) % L_COUNT,
                               (rot / 3) % 2 ? L_TRANS : L_CONTIG, rot % 3 == 0, absent);
            for (size_t p = 0; p < sizeof bwd_pairs / sizeof bwd_pairs[0]; p++, rot++)
                for (int absent = 0; absent < 2; absent++)
                    run_interp(false, si, k_taps[ti], bwd_pairs[p][0], bwd_pairs[p][1],
                               rot % L_COUNT, (rot / 4) % L_COUNT,
                               (rot / 3) % 2 ? L_TRANS : L_CONTIG, rot % 3 == 0, absent);
        }
}

/* <interp(x), g> == <x, interp_backward(g)> in f64: the same products. */
static void adjoint(int si) {
    const shape_case *s = &k_shapes[si];
    int64_t xs[5], gs[5];
    memcpy(xs, s->sizes, sizeof xs);
    memcpy(gs, s->sizes, sizeof gs);
    gs[s->dim] = s->rows;
    fbuf x, g, y, dx, idx, w;
    fb_make(&x, F64, s->ndim, xs, L_GAP);
    fb_make(&dx, F64, s->ndim, xs, L_TRANS);
    fb_make(&g, F64, s->ndim, gs, L_NEG);
    fb_make(&y, F64, s->ndim, gs, L_CONTIG);
    fb_make2(&idx, I64, s->rows, 3, L_CONTIG);
    fb_make2(&w, F64, s->rows, 3, L_CONTIG);
    fill_table(&idx, &w, s->sizes[s->dim], true);
    for (int64_t i = 0; i < t_numel(&x.t); i++)
        fb_set(&x, i, gen_value(false));
    for (int64_t i = 0; i < t_numel(&g.t); i++)
        fb_set(&g, i, gen_value(false));
    tpu_op fwd = interp_op(true, s->dim, &x, &y, &idx, &w);
    tpu_op bwd = interp_op(false, s->dim, &g, &dx, &idx, &w);
    CHECK_OK(tpu_op_check(&fwd));
    CHECK_OK(tpu_op_check(&bwd));
    CHECK_OK(run_shares(&fwd, 3));
    CHECK_OK(run_shares(&bwd, 2));
    long double lhs = 0, rhs = 0, mag = 0;
    for (int64_t i = 0; i < t_numel(&y.t); i++) {
        lhs += (long double)fb_get(&y, i) * fb_get(&g, i);
        mag += fabsl((long double)fb_get(&y, i) * fb_get(&g, i));
    }
    for (int64_t i = 0; i < t_numel(&x.t); i++)
        rhs += (long double)fb_get(&x, i) * fb_get(&dx, i);
    bool ok = fabsl(lhs - rhs) <= 1e-12L * (mag + 1);
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "    adjoint shape %d: %.17Lg vs %.17Lg\n", si, lhs, rhs);
    g_cases++;
    fb_free(&x);
    fb_free(&g);
    fb_free(&y);
    fb_free(&dx);
    fb_free(&idx);
    fb_free(&w);
}

/* Infinities, by value, in each kernel mode: x * 0 is NaN, so PyTorch's
 * taps (o, o) with weights (1, 0) turn an infinity into NaN, and inf -
 * inf is NaN too; a finite neighbour with a finite weight keeps it. */
static void infinities(void) {
    float x[3] = {INFINITY, 1, -INFINITY}, out[3], g[3] = {INFINITY, 2, 1}, dx[3];
    int64_t idx[6] = {0, 0, 1, 0, 1, 2};
    float w[6] = {1, 0, 1, 0.5f, 0.5f, 0.5f};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_INTERP;
    op.n_in = 3;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F32,
                            .storage = x, .storage_nbytes = sizeof x};
    op.out = (tpu_tensor){.data = out, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = out, .storage_nbytes = sizeof out};
    op.in[1] = (tpu_tensor){.data = idx, .sizes = {3, 2}, .strides = {2, 1}, .ndim = 2,
                            .dtype = I64, .storage = idx, .storage_nbytes = sizeof idx};
    op.in[2] = (tpu_tensor){.data = w, .sizes = {3, 2}, .strides = {2, 1}, .ndim = 2, .dtype = F32,
                            .storage = w, .storage_nbytes = sizeof w};
    for (int ref = 0; ref < 2; ref++) {
        tpu_kernels_set_reference(ref);
        op.fn = TPU_INDEX_INTERP;
        op.in[0].data = op.in[0].storage = x;
        op.out.data = op.out.storage = out;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        /* Row 0: inf * 1 + inf * 0; row 1: 1 * 1 + inf * 0.5; row 2:
         * 1 * 0.5 + -inf * 0.5. */
        CHECK(isnan(out[0]) && out[1] == INFINITY && out[2] == -INFINITY);
        /* Backward: dx[0] = 1 g0 + 0 g0 + 0.5 g1 (NaN: inf * 0), dx[1] =
         * 1 g1 + 0.5 g2, dx[2] = 0.5 g2. */
        op.fn = TPU_INDEX_INTERP_BACKWARD;
        op.in[0].data = op.in[0].storage = g;
        op.out.data = op.out.storage = dx;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(isnan(dx[0]) && dx[1] == 2.5f && dx[2] == 0.5f);
    }
    tpu_kernels_set_reference(false);
}

/* ------------------------------------------------------------- errors */

/* A tap index out of range stops every share before it writes. */
static void bad_taps(void) {
    static const int64_t bad[] = {4, 5, -2, INT64_MIN, INT64_MAX};
    for (int fwd = 0; fwd < 2; fwd++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
            for (int ref = 0; ref < 2; ref++) {
                const int64_t xs[2] = {3, fwd ? 4 : 6}, os[2] = {3, fwd ? 6 : 4};
                fbuf x, out, idx, w;
                fb_make(&x, F32, 2, xs, L_CONTIG);
                fb_make(&out, F32, 2, os, L_CONTIG);
                fb_make2(&idx, I64, 6, 2, L_CONTIG);
                fb_make2(&w, F32, 6, 2, L_CONTIG);
                fill_table(&idx, &w, 4, b % 2 == 0);
                put_int(t_at2(&idx.t, 5, 1), I64, bad[b]);
                for (int64_t i = 0; i < t_numel(&x.t); i++)
                    fb_set(&x, i, 1.0);
                fb_snap(&out);
                tpu_op op = interp_op(fwd, 1, &x, &out, &idx, &w);
                tpu_kernels_set_reference(ref);
                const char *parts[] = {"out of bounds for dimension 1 with size 4", "row 5, tap 1",
                                       NULL};
                expect_run_error(&op, TPU_ERR_INDEX, parts, "bad tap");
                CHECK_STATUS(run_shares(&op, 3), TPU_ERR_INDEX);
                CHECK(memcmp(out.alloc, out.pristine, out.bytes) == 0);
                tpu_kernels_set_reference(false);
                fb_free(&x);
                fb_free(&out);
                fb_free(&idx);
                fb_free(&w);
            }
    /* An empty out reads nothing, so nothing is wrong. */
    const int64_t xs[2] = {0, 4}, os[2] = {0, 6};
    fbuf x, out, idx, w;
    fb_make(&x, F32, 2, xs, L_CONTIG);
    fb_make(&out, F32, 2, os, L_CONTIG);
    fb_make2(&idx, I64, 6, 2, L_CONTIG);
    fb_make2(&w, F32, 6, 2, L_CONTIG);
    fill_table(&idx, &w, 4, true);
    put_int(t_at2(&idx.t, 0, 0), I64, 99);
    tpu_op op = interp_op(true, 1, &x, &out, &idx, &w);
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(run_shares(&op, 2));
    fb_free(&x);
    fb_free(&out);
    fb_free(&idx);
    fb_free(&w);
}

static void refusals(void) {
    float xd[24] = {0}, od[24] = {0}, wd[12] = {0};
    int64_t id[12] = {0};
    double wd64[12] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_INTERP;
    op.n_in = 3;
    op.p.index.dim = 1;
    /* x [2, 4] -> out [2, 6] with 2 taps. */
    op.in[0] = (tpu_tensor){.data = xd, .sizes = {2, 4}, .strides = {4, 1}, .ndim = 2,
                            .dtype = F32, .storage = xd, .storage_nbytes = sizeof xd};
    op.out = (tpu_tensor){.data = od, .sizes = {2, 6}, .strides = {6, 1}, .ndim = 2, .dtype = F32,
                          .storage = od, .storage_nbytes = sizeof od};
    op.in[1] = (tpu_tensor){.data = id, .sizes = {6, 2}, .strides = {2, 1}, .ndim = 2,
                            .dtype = I64, .storage = id, .storage_nbytes = sizeof id};
    op.in[2] = (tpu_tensor){.data = wd, .sizes = {6, 2}, .strides = {2, 1}, .ndim = 2,
                            .dtype = F32, .storage = wd, .storage_nbytes = sizeof wd};
    const tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    op.n_in = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 2 (expected 3)");
    op = ok;
    op.p.index.dim = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "ranks must match and dim lie in them");
    op = ok;
    op.out.sizes[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "they may differ only along dim 1");
    op = ok;
    op.in[1].sizes[0] = op.in[2].sizes[0] = 5;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "expected [6, taps >= 1]");
    op = ok;
    op.in[1].sizes[1] = op.in[2].sizes[1] = 0;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "expected [6, taps >= 1]");
    op = ok;
    op.in[1].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "tap index dtype int32 is not supported");
    op = ok;
    op.in[2].sizes[1] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "tap weights has sizes [6, 1], expected [6, 2]");
    op = ok;
    op.in[2].data = op.in[2].storage = wd64;
    op.in[2].storage_nbytes = sizeof wd64;
    op.in[2].dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "tap weights has dtype float64, expected float32");
    op = ok;
    op.in[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "(floating only)");
    op = ok;
    op.out.dtype = BF16; /* f32 -> bf16 rounds once: fine */
    CHECK_OK(tpu_op_check(&op));
    op.out.dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "float64 goes with float64 only");
    op = ok;
    op.out.data = xd + 2; /* out over x */
    op.out.storage = xd;
    op.out.storage_nbytes = sizeof xd;
    op.out.sizes[0] = 1;
    op.in[0].sizes[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    /* Backward: the gradient [2, 6] into out [2, 4], out f32 (the sums). */
    op = ok;
    op.fn = TPU_INDEX_INTERP_BACKWARD;
    op.in[0] = ok.out;
    op.out = ok.in[0];
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    const tpu_op bok = op;
    op.out.dtype = BF16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out holds the sums");
    op = bok;
    op.in[0].dtype = BF16; /* a bf16 gradient into f32 sums: fine */
    CHECK_OK(tpu_op_check(&op));
    op = bok;
    op.in[1].sizes[0] = op.in[2].sizes[0] = 4; /* rows follow the gradient (6) */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "expected [6, taps >= 1]");
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_INDEX, TPU_INDEX_INTERP), "interp") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_INDEX, TPU_INDEX_INTERP_BACKWARD), "interp_backward") == 0);
}

/* ------------------------------------------------------------- tables */

typedef struct {
    int64_t idx[64];
    double w[64];
    int64_t taps;
} table;

/* The table of spec, weights widened to double. */
static tpu_status get_table(const tpu_interp_spec *s, table *t) {
    t->taps = tpu_interp_taps(s);
    if (t->taps < 1 || t->taps * s->out_size > 64)
        return TPU_ERR_INVALID_ARG;
    float wf[64];
    tpu_status st = tpu_interp_table(s, t->taps, t->idx, s->dtype == F64 ? (void *)t->w : wf);
    if (st == TPU_OK && s->dtype != F64)
        for (int64_t i = 0; i < t->taps * s->out_size; i++)
            t->w[i] = wf[i];
    return st;
}

/* Row `row` of a table too big for get_table. */
static tpu_status get_table_big(const tpu_interp_spec *s, table *t, int64_t row) {
    t->taps = tpu_interp_taps(s);
    if (t->taps < 1 || t->taps > 64)
        return TPU_ERR_INVALID_ARG;
    int64_t *idx = malloc((size_t)(t->taps * s->out_size) * sizeof *idx);
    double *w = malloc((size_t)(t->taps * s->out_size) * sizeof *w);
    tpu_status st = tpu_interp_table(s, t->taps, idx, w);
    for (int64_t k = 0; st == TPU_OK && k < t->taps; k++) {
        t->idx[k] = idx[row * t->taps + k];
        t->w[k] = s->dtype == F64 ? w[row * t->taps + k] : ((float *)w)[row * t->taps + k];
    }
    free(idx);
    free(w);
    return st;
}

static void table_known(void) {
    /* Linear, align_corners, 3 -> 5: sources 0, 0.5, 1, 1.5, 2. */
    tpu_interp_spec s = {TPU_INTERP_LINEAR, 3, 5, true, 0.0, F32, false, false};
    table t;
    CHECK_OK(get_table(&s, &t));
    CHECK(t.taps == 2);
    const int64_t i1[] = {0, 1, 0, 1, 1, 2, 1, 2, 2, 2};
    const double w1[] = {1, 0, 0.5, 0.5, 1, 0, 0.5, 0.5, 1, 0};
    for (int k = 0; k < 10; k++)
        CHECK(t.idx[k] == i1[k] && t.w[k] == w1[k]);
    /* Without align_corners, 2 -> 4: sources -0.25 (clamped to 0), 0.25,
     * 0.75, 1.25 (the last input: both taps on it). */
    s = (tpu_interp_spec){TPU_INTERP_LINEAR, 2, 4, false, 0.0, F64, false, false};
    CHECK_OK(get_table(&s, &t));
    const int64_t i2[] = {0, 1, 0, 1, 0, 1, 1, 1};
    const double w2[] = {1, 0, 0.75, 0.25, 0.25, 0.75, 0.75, 0.25};
    for (int k = 0; k < 8; k++)
        CHECK(t.idx[k] == i2[k] && t.w[k] == w2[k]);
    /* The caller's scale factor wins over the sizes: 2 -> 4 at factor 4
     * reads sources 0.25 * (o + 0.5) - 0.5 (o = 3: 0.375). */
    s.scale = 4.0;
    CHECK_OK(get_table(&s, &t));
    CHECK(t.idx[6] == 0 && t.idx[7] == 1 && t.w[6] == 0.625 && t.w[7] == 0.375);
    /* PyTorch's x86-64 build fuses scale * (o + 0.5) - 0.5 (one rounding):
     * 96 -> 80, o = 53 reads 1.2 * 53.5 - 0.5 = 63.70000076 (unfused:
     * 63.70000458), so the first weight is 0.29999924 (measured on
     * PyTorch 2.13's CPU backend). */
    s = (tpu_interp_spec){TPU_INTERP_LINEAR, 96, 80, false, 0.0, F32, false, false};
    CHECK_OK(get_table_big(&s, &t, 53));
    CHECK(t.idx[0] == 63 && t.idx[1] == 64 && (float)t.w[0] == 0.2999992370605469f);
    /* An unchanged size: the same position, weights 1 and 0, even with a
     * scale factor. */
    s = (tpu_interp_spec){TPU_INTERP_LINEAR, 4, 4, false, 3.0, F32, false, false};
    CHECK_OK(get_table(&s, &t));
    for (int k = 0; k < 4; k++)
        CHECK(t.idx[2 * k] == k && t.idx[2 * k + 1] == k && t.w[2 * k] == 1 && t.w[2 * k + 1] == 0);
    /* Cubic on whole positions (align_corners, 5 -> 5): weights 0 1 0 0,
     * taps clamped at the edges. */
    s = (tpu_interp_spec){TPU_INTERP_CUBIC, 5, 5, true, 0.0, F32, false, false};
    CHECK_OK(get_table(&s, &t));
    CHECK(t.taps == 4);
    for (int o = 0; o < 5; o++) {
        CHECK(t.w[4 * o] == 0 && t.w[4 * o + 1] == 1 && t.w[4 * o + 2] == 0 && t.w[4 * o + 3] == 0);
        for (int j = 0; j < 4; j++) {
            int64_t want = o - 1 + j < 0 ? 0 : o - 1 + j > 4 ? 4 : o - 1 + j;
            CHECK(t.idx[4 * o + j] == want);
        }
    }
    /* Cubic halfway (align_corners, 2 -> 3 reads 0, 0.5, 1): Keys' weights
     * at t = 0.5 with A = -0.75: -0.09375, 0.59375, 0.59375, -0.09375. */
    s = (tpu_interp_spec){TPU_INTERP_CUBIC, 2, 3, true, 0.0, F64, false, false};
    CHECK_OK(get_table(&s, &t));
    CHECK(t.w[4] == -0.09375 && t.w[5] == 0.59375 && t.w[6] == 0.59375 && t.w[7] == -0.09375);
    CHECK(t.idx[4] == 0 && t.idx[5] == 0 && t.idx[6] == 1 && t.idx[7] == 1);
    /* Antialiased linear, 9 -> 3 (scale 3): support 3, 7 taps; the middle
     * output is centered on 4.5: taps 2..7 (PyTorch's bounds, the last at
     * distance 1 with weight 0) with triangle weights 1/3, 2/3, 1, 2/3,
     * 1/3, 0, normalised to 1/9, 2/9, 3/9, 2/9, 1/9, 0; the 7th absent. */
    s = (tpu_interp_spec){TPU_INTERP_LINEAR_AA, 9, 3, false, 0.0, F64, false, false};
    CHECK_OK(get_table(&s, &t));
    CHECK(t.taps == 7);
    const int64_t i3[] = {2, 3, 4, 5, 6, 7, -1};
    const double w3[] = {1.0 / 9, 2.0 / 9, 3.0 / 9, 2.0 / 9, 1.0 / 9, 0, 0};
    for (int k = 0; k < 7; k++)
        CHECK(t.idx[7 + k] == i3[k] && fabs(t.w[7 + k] - w3[k]) < 1e-15);
    /* Refusals. */
    s.in_size = 0;
    CHECK(tpu_interp_taps(&s) == 0);
    CHECK_STATUS(tpu_interp_table(&s, 7, t.idx, t.w), TPU_ERR_INVALID_ARG);
    s = (tpu_interp_spec){TPU_INTERP_COUNT, 3, 3, false, 0.0, F32, false, false};
    CHECK(tpu_interp_taps(&s) == 0);
    s.mode = TPU_INTERP_LINEAR;
    s.dtype = I32;
    CHECK(tpu_interp_taps(&s) == 0);
    s.dtype = F32;
    CHECK_STATUS(tpu_interp_table(&s, 3, t.idx, t.w), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_interp_table(&s, 2, NULL, t.w), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_interp_table(NULL, 2, t.idx, t.w), TPU_ERR_INVALID_ARG);
}

/* Invariants over many sizes: indices in range (-1 only after a row's
 * present taps, ascending in the antialiased modes), weights summing to
 * 1, weights representable in the dtype when rounded; a huge or tiny
 * scale factor still gives indices in range. */
static void table_invariants(void) {
    static const tpu_dtype dts[] = {F32, F64, BF16, F16};
    static const double scales[] = {0.0, 0.3, 1.7, 1e-30, 1e30, NAN, -2.0};
    int64_t idx[4096];
    double w64[4096];
    float w32[4096];
    int64_t bad = 0;
    for (int mode = 0; mode < TPU_INTERP_COUNT; mode++)
        for (int64_t in = 1; in <= 13; in += 3)
            for (int64_t out = 1; out <= 17; out += 4)
                for (int ac = 0; ac < 2; ac++)
                    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                        for (size_t sc = 0; sc < sizeof scales / sizeof scales[0]; sc++)
                            for (int backward = 0; backward < 2; backward++) {
                                tpu_interp_spec s = {(tpu_interp_mode)mode, in, out, ac, scales[sc],
                                                     dts[d], !backward, backward};
                                int64_t taps = tpu_interp_taps(&s);
                                bool aa = mode >= TPU_INTERP_LINEAR_AA;
                                CHECK(taps >= 1 && taps <= (aa ? in : 4));
                                if (taps < 1 || taps * out > 4096)
                                    continue;
                                bool wide = dts[d] == F64;
                                CHECK_OK(tpu_interp_table(&s, taps, idx, wide ? (void *)w64 : w32));
                                for (int64_t o = 0; o < out; o++) {
                                    double sum = 0;
                                    bool absent = false;
                                    for (int64_t t = 0; t < taps; t++) {
                                        int64_t i = idx[o * taps + t];
                                        double wv = wide ? w64[o * taps + t] : w32[o * taps + t];
                                        bad += i < -1 || i >= in || (i == -1 && !aa);
                                        bad += absent && i != -1; /* -1 only trailing */
                                        bad += aa && t > 0 && i >= 0 && i != idx[o * taps + t - 1] + 1;
                                        absent = absent || i == -1;
                                        if (i >= 0)
                                            sum += wv;
                                        if (!backward && !aa && (dts[d] == BF16 || dts[d] == F16))
                                            bad += t_quant(wv, dts[d]) != wv;
                                    }
                                    /* Sums of 1 where the sizes give the scale (a
                                     * factor at odds with them may put an
                                     * antialiased row outside the input). */
                                    bool sane = !(scales[sc] > 0);
                                    double tol = !backward ? 2e-2 : wide ? 1e-12 : 1e-5;
                                    if (sane && !(fabs(sum - 1) <= tol) && bad++ < 4)
                                        fprintf(stderr, "    table mode %d %lld->%lld ac %d %s "
                                                "scale %g: row %lld sums to %.17g\n", mode,
                                                (long long)in, (long long)out, ac, dt_str(dts[d]),
                                                scales[sc], (long long)o, sum);
                                }
                            }
    CHECK(bad == 0);
}

int main(void) {
    refusals();
    infinities();
    bad_taps();
    table_known();
    table_invariants();
    test_records();
    for (int si = 0; si < N_SHAPES; si++)
        adjoint(si);
    printf("interp: %d cases x %d modes x %d thread counts\n", g_cases, (int)N_MODES, (int)N_NTHS);
    return check_report();
}
