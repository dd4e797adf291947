/* NORM kernel tests (layer normalization and its backward) against loops
 * written here, in long double, from the definitions in op.h:
 *
 *   forward, per row r of x [M, N]:
 *     mean = sum_j x_j / N,  var = sum_j (x_j - mean)^2 / N (biased),
 *     rstd = 1 / sqrt(var + eps),  y_j = (x_j - mean) rstd w_j + b_j
 *   backward, from the stored mean and rstd (as the kernel reads them):
 *     xhat_j = (x_j - mean) rstd,  gw_j = g_j w_j,
 *     dx_j = rstd (gw_j - sum gw / N - xhat_j sum (gw xhat) / N),
 *     dweight_j = sum_r g xhat,  dbias_j = sum_r g
 *
 * An absent weight reads as 1 and an absent bias as 0; an absent dx,
 * dweight or dbias is not computed. Dtypes: f32, f64, f16 and bf16 x with
 * parameters of x's dtype, and f16/bf16 x with f32 parameters (mixed
 * precision). Shapes: one element, one row, one column, no rows, empty
 * rows, 100 x 37, 300 rows (10 blocks of the two-phase backward) and 2100
 * rows (blocks of more than 32 rows), 3 x 1029 (the fast rows' 16 lanes
 * and their tails). Layouts of x, g and out: row-major,
 * transposed, with gaps, negative strides; of the 1-d tensors likewise.
 *
 * Tolerances: the kernel computes in f64 and rounds once on store, so
 * each result must lie within one rounding of its dtype (tol_store) of
 * the long double value, plus 1e-12 of the magnitudes that cancel (the
 * f64 error of x - mean, of the row sums, of the column sums over up to
 * 2100 rows).
 *
 * Every record runs in every kernel mode (reference, and fast at each
 * instruction-set level) with nth = 1, 2, 3, 7 (the
 * backward with parameter gradients through both of its phases) and must
 * give the same bytes in every run. Also: known answers, tpu_op_check's
 * refusals, and the phase and scratch contract. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "family_test.h"

/* ------------------------------------------------------------- cases */

typedef struct {
    int64_t m, n;
    tpu_dtype xd, pd;  /* x's dtype and the parameter dtype */
    bool w, b;         /* forward: weight, bias given; backward: weight given */
    bool dx, dw, db;   /* backward: which gradients are wanted */
    int lx, lo, l1;    /* layouts of x (and g), out, the 1-d tensors */
    double eps;
} ncase;

static void describe(const ncase *c, bool bwd, char *buf, size_t cap) {
    snprintf(buf, cap, "%s %lldx%lld x %s/%s out %s 1-d %s params %s%s%s%s%s%s eps %g",
             bwd ? "layer_norm_backward" : "layer_norm", (long long)c->m, (long long)c->n,
             dt_str(c->xd), k_layout_names[c->lx], k_layout_names[c->lo], k_layout_names[c->l1],
             dt_str(c->pd), c->w ? " weight" : "", !bwd && c->b ? " bias" : "",
             bwd && c->dx ? " dx" : "", bwd && c->dw ? " dweight" : "",
             bwd && c->db ? " dbias" : "", c->eps);
}

/* x's values for row r: random rows of three spreads, rows around 100
 * (x - mean must be formed from the stored mean, not by a one-pass
 * variance), constant rows (variance 0) and rows of tiny values. */
static double gen_x(int64_t r, int64_t j) {
    switch (r % 6) {
    case 0: return 4 * t_unit() - 2;
    case 1: return 60 * t_unit() - 30;
    case 2: return 0.5 * t_unit();
    case 3: return 100 + 2 * t_unit() - 1;
    case 4: return 1.5;
    default: return (j % 2 ? 1e-3 : -1e-3) * t_unit();
    }
}

/* Row r's statistics from the stored x, in long double. */
static void row_stats(const fbuf *x, int64_t r, double eps, long double *mean, long double *rstd) {
    int64_t n = x->t.sizes[1];
    long double s = 0, q = 0;
    for (int64_t j = 0; j < n; j++)
        s += fb_get2(x, r, j);
    long double mu = n > 0 ? s / n : 0;
    for (int64_t j = 0; j < n; j++) {
        long double d = fb_get2(x, r, j) - mu;
        q += d * d;
    }
    long double var = n > 0 ? q / n : 0;
    *mean = mu;
    *rstd = 1 / sqrtl(var + eps);
}

/* Element j of an optional 1-d parameter; dflt when absent. */
static long double param(const fbuf *p, int64_t j, long double dflt) {
    return p->alloc ? fb_get(p, j) : dflt;
}

static int64_t g_bad; /* mismatches of the current case */

static void expect_close(const char *what, const char *name, int64_t i, int64_t j, double got,
                         long double want, double tol) {
    if (close_to(got, (double)want, tol))
        return;
    if (g_bad++ < 4)
        fprintf(stderr, "    %s: %s[%lld, %lld] = %.17g, want %.17Lg (tol %.3g)\n", what, name,
                (long long)i, (long long)j, got, want, tol);
}

/* ----------------------------------------------------------- forward */

typedef struct {
    const ncase *c;
    const char *what;
    fbuf *x, *w, *b, *out, *mean, *rstd;
} fwd_ctx;

static void verify_forward(void *p) {
    const fwd_ctx *k = p;
    const ncase *c = k->c;
    for (int64_t r = 0; r < c->m; r++) {
        long double mean, rstd;
        row_stats(k->x, r, c->eps, &mean, &rstd);
        expect_close(k->what, "mean", r, 0, fb_get(k->mean, r), mean,
                     tol_store(c->pd, (double)mean) + 1e-13 * (1 + fabsl(mean)));
        expect_close(k->what, "rstd", r, 0, fb_get(k->rstd, r), rstd,
                     tol_store(c->pd, (double)rstd) + 1e-12 * rstd);
        for (int64_t j = 0; j < c->n; j++) {
            long double w = param(k->w, j, 1), b = param(k->b, j, 0);
            long double d = fb_get2(k->x, r, j) - mean;
            long double want = d * rstd * w + b;
            /* The f64 error of x - mean is about that of mean itself. */
            double scale =
                (double)((1 + fabsl(mean) * rstd + fabsl(d) * rstd) * fabsl(w) + fabsl(b));
            expect_close(k->what, "out", r, j, fb_get2(k->out, r, j), want,
                         tol_store(c->xd, (double)want) + 1e-12 * scale);
        }
    }
}

static void run_forward(const ncase *c) {
    char what[200];
    describe(c, false, what, sizeof what);
    fbuf x, w = {0}, b = {0}, out, mean, rstd;
    fb_make2(&x, c->xd, c->m, c->n, c->lx);
    fb_make2(&out, c->xd, c->m, c->n, c->lo);
    fb_make1(&mean, c->pd, c->m, c->l1);
    fb_make1(&rstd, c->pd, c->m, (c->l1 + 1) % L_COUNT);
    for (int64_t r = 0; r < c->m; r++)
        for (int64_t j = 0; j < c->n; j++)
            fb_set2(&x, r, j, gen_x(r, j));
    if (c->w) {
        fb_make1(&w, c->pd, c->n, c->l1);
        for (int64_t j = 0; j < c->n; j++)
            fb_set(&w, j, (j % 3 ? 1 : -1) * (0.5 + t_unit()));
    }
    if (c->b) {
        fb_make1(&b, c->pd, c->n, (c->l1 + 2) % L_COUNT);
        for (int64_t j = 0; j < c->n; j++)
            fb_set(&b, j, 2 * t_unit() - 1);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_FORWARD;
    op.n_in = 3;
    op.n_aux = 2;
    op.out = out.t;
    op.in[0] = x.t;
    op.in[1] = w.t; /* all zero when absent */
    op.in[2] = b.t;
    op.aux[0] = mean.t;
    op.aux[1] = rstd.t;
    op.p.norm.eps = c->eps;
    CHECK(tpu_op_phases(&op) == 1 && tpu_op_scratch_bytes(&op) == 0);
    fwd_ctx k = {c, what, &x, &w, &b, &out, &mean, &rstd};
    op_bufs bufs = {{&out, &mean, &rstd}, 3, {&x}, 1};
    if (c->w)
        bufs.read[bufs.n_read++] = &w;
    if (c->b)
        bufs.read[bufs.n_read++] = &b;
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_forward, &k, what);
    CHECK(g_bad == 0);
    fb_free(&x);
    fb_free(&w);
    fb_free(&b);
    fb_free(&out);
    fb_free(&mean);
    fb_free(&rstd);
}

/* ---------------------------------------------------------- backward */

typedef struct {
    const ncase *c;
    const char *what;
    fbuf *g, *x, *mean, *rstd, *w, *dx, *dw, *db;
} bwd_ctx;

static void verify_backward(void *p) {
    const bwd_ctx *k = p;
    const ncase *c = k->c;
    const int64_t m = c->m, n = c->n;
    /* Column sums and their magnitudes, over all rows. */
    size_t cols = (size_t)(n + 1);
    long double *sw = calloc(cols, sizeof *sw), *sb = calloc(cols, sizeof *sb);
    long double *aw = calloc(cols, sizeof *aw), *ab = calloc(cols, sizeof *ab);
    for (int64_t r = 0; r < m; r++) {
        long double mean = fb_get(k->mean, r), rstd = fb_get(k->rstd, r);
        long double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
        for (int64_t j = 0; j < n; j++) {
            long double xhat = (fb_get2(k->x, r, j) - mean) * rstd, g = fb_get2(k->g, r, j);
            long double gw = g * param(k->w, j, 1);
            s1 += gw;
            s2 += gw * xhat;
            a1 += fabsl(gw);
            a2 += fabsl(gw * xhat);
            sw[j] += g * xhat;
            aw[j] += fabsl(g * xhat);
            sb[j] += g;
            ab[j] += fabsl(g);
        }
        for (int64_t j = 0; j < n && k->dx->alloc; j++) {
            long double xhat = (fb_get2(k->x, r, j) - mean) * rstd;
            long double gw = fb_get2(k->g, r, j) * param(k->w, j, 1);
            long double want = rstd * (gw - s1 / n - xhat * s2 / n);
            double scale = (double)(rstd * (fabsl(gw) + a1 / n + fabsl(xhat) * a2 / n));
            expect_close(k->what, "dx", r, j, fb_get2(k->dx, r, j), want,
                         tol_store(c->xd, (double)want) + 1e-12 * scale);
        }
    }
    for (int64_t j = 0; j < n; j++) {
        if (k->dw->alloc)
            expect_close(k->what, "dweight", j, 0, fb_get(k->dw, j), sw[j],
                         tol_store(c->pd, (double)sw[j]) + 1e-12 * (double)aw[j]);
        if (k->db->alloc)
            expect_close(k->what, "dbias", j, 0, fb_get(k->db, j), sb[j],
                         tol_store(c->pd, (double)sb[j]) + 1e-12 * (double)ab[j]);
    }
    free(sw);
    free(sb);
    free(aw);
    free(ab);
}

static void run_backward(const ncase *c) {
    char what[200];
    describe(c, true, what, sizeof what);
    fbuf g, x, mean, rstd, w = {0}, dx = {0}, dw = {0}, db = {0};
    fb_make2(&g, c->xd, c->m, c->n, (c->lx + 1) % L_COUNT);
    fb_make2(&x, c->xd, c->m, c->n, c->lx);
    fb_make1(&mean, c->pd, c->m, c->l1);
    fb_make1(&rstd, c->pd, c->m, (c->l1 + 1) % L_COUNT);
    for (int64_t r = 0; r < c->m; r++) {
        for (int64_t j = 0; j < c->n; j++) {
            fb_set2(&x, r, j, gen_x(r, j));
            fb_set2(&g, r, j, 4 * t_unit() - 2);
        }
        /* The statistics a forward would have stored, rounded to pd. */
        long double mu, rs;
        row_stats(&x, r, 1e-5, &mu, &rs);
        fb_set(&mean, r, (double)mu);
        fb_set(&rstd, r, (double)rs);
    }
    if (c->w) {
        fb_make1(&w, c->pd, c->n, (c->l1 + 2) % L_COUNT);
        for (int64_t j = 0; j < c->n; j++)
            fb_set(&w, j, (j % 3 ? 1 : -1) * (0.5 + t_unit()));
    }
    if (c->dx)
        fb_make2(&dx, c->xd, c->m, c->n, c->lo);
    if (c->dw)
        fb_make1(&dw, c->pd, c->n, c->l1);
    if (c->db)
        fb_make1(&db, c->pd, c->n, (c->l1 + 3) % L_COUNT);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_BACKWARD;
    op.n_in = 5;
    op.n_aux = 2;
    op.out = dx.t; /* all zero when absent */
    op.in[0] = g.t;
    op.in[1] = x.t;
    op.in[2] = mean.t;
    op.in[3] = rstd.t;
    op.in[4] = w.t;
    op.aux[0] = dw.t;
    op.aux[1] = db.t;
    /* Column sums take the two-phase path, with scratch; dx alone does not. */
    bool two = c->dw || c->db;
    CHECK(tpu_op_phases(&op) == (two ? 2 : 1));
    CHECK(two ? tpu_op_scratch_bytes(&op) >= (c->m > 0 ? 2 * c->n * 8 : 0)
              : tpu_op_scratch_bytes(&op) == 0);
    bwd_ctx k = {c, what, &g, &x, &mean, &rstd, &w, &dx, &dw, &db};
    op_bufs bufs = {{0}, 0, {&g, &x, &mean, &rstd}, 4};
    if (c->w)
        bufs.read[bufs.n_read++] = &w;
    fbuf *outs[3] = {&dx, &dw, &db};
    for (int i = 0; i < 3; i++)
        if (outs[i]->alloc)
            bufs.written[bufs.n_written++] = outs[i];
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_backward, &k, what);
    CHECK(g_bad == 0);
    fb_free(&g);
    fb_free(&x);
    fb_free(&mean);
    fb_free(&rstd);
    fb_free(&w);
    fb_free(&dx);
    fb_free(&dw);
    fb_free(&db);
}

/* ------------------------------------------------------------- table */

static const struct {
    int64_t m, n;
} k_shapes[] = {{1, 1}, {1, 37}, {5, 1}, {0, 7}, {4, 0}, {100, 37}, {300, 17}, {2100, 3}, {3, 1029}};

static const struct {
    tpu_dtype x, p;
} k_dtypes[] = {{F32, F32}, {F64, F64}, {BF16, F32}, {F16, F32}, {F16, F16}, {BF16, BF16}};

/* Which gradients a backward wants: dx, dweight, dbias. */
static const bool k_wants[][3] = {
    {1, 0, 0}, {1, 1, 1}, {1, 1, 0}, {0, 0, 1}, {0, 1, 1},
};

static int g_cases;

static void run_table(void) {
    int rot = 0;
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
        for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++) {
            for (int wb = 0; wb < 4; wb++, rot++) {
                ncase c = {.m = k_shapes[s].m, .n = k_shapes[s].n, .xd = k_dtypes[d].x,
                           .pd = k_dtypes[d].p, .w = wb & 1, .b = wb >> 1, .lx = rot % L_COUNT,
                           .lo = (rot / 2) % 2 ? L_GAP : L_CONTIG, .l1 = (rot / 3) % L_COUNT,
                           /* eps 0 in some: a constant row then has rstd inf, out NaN */
                           .eps = rot % 7 == 0 ? 0.0 : 1e-5};
                run_forward(&c);
                g_cases++;
            }
            for (int w = 0; w < 2; w++)
                for (size_t k = 0; k < sizeof k_wants / sizeof k_wants[0]; k++, rot++) {
                    ncase c = {.m = k_shapes[s].m, .n = k_shapes[s].n, .xd = k_dtypes[d].x,
                               .pd = k_dtypes[d].p, .w = w, .dx = k_wants[k][0],
                               .dw = k_wants[k][1], .db = k_wants[k][2], .lx = rot % L_COUNT,
                               .lo = (rot / 2) % L_COUNT, .l1 = (rot / 3) % L_COUNT};
                    run_backward(&c);
                    g_cases++;
                }
        }
}

/* ------------------------------------------------------ known answers */

/* x = (1, 2, 3, 4), eps 0: mean 2.5, variance 1.25; backward with
 * g = (1, 0, 0, 0) (worked by hand: xhat_0^2 = 1.8, s1 = 1, s2 = xhat_0). */
static void known_answers(void) {
    double x[4] = {1, 2, 3, 4}, y[4], mean, rstd, g[4] = {1, 0, 0, 0}, dx[4], dw[4], db[4];
    const double r5 = 1 / sqrt(1.25);
    tpu_tensor row = {.sizes = {1, 4}, .strides = {4, 1}, .ndim = 2, .dtype = F64,
                      .storage_nbytes = 32};
    tpu_tensor one = {.sizes = {1}, .strides = {1}, .ndim = 1, .dtype = F64, .storage_nbytes = 8};
    tpu_tensor four = {.sizes = {4}, .strides = {1}, .ndim = 1, .dtype = F64, .storage_nbytes = 32};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_FORWARD;
    op.n_in = 3;
    op.n_aux = 2;
    op.out = row;
    op.out.data = op.out.storage = y;
    op.in[0] = row;
    op.in[0].data = op.in[0].storage = x;
    op.aux[0] = one;
    op.aux[0].data = op.aux[0].storage = &mean;
    op.aux[1] = one;
    op.aux[1].data = op.aux[1].storage = &rstd;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(mean == 2.5 && fabs(rstd - r5) < 1e-15);
    const double want_y[4] = {-1.5 * r5, -0.5 * r5, 0.5 * r5, 1.5 * r5};
    for (int j = 0; j < 4; j++)
        CHECK(fabs(y[j] - want_y[j]) < 1e-15);

    memset(&op, 0, sizeof op);
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_BACKWARD;
    op.n_in = 5;
    op.n_aux = 2;
    op.out = row;
    op.out.data = op.out.storage = dx;
    op.in[0] = row;
    op.in[0].data = op.in[0].storage = g;
    op.in[1] = row;
    op.in[1].data = op.in[1].storage = x;
    op.in[2] = one;
    op.in[2].data = op.in[2].storage = &mean;
    op.in[3] = one;
    op.in[3].data = op.in[3].storage = &rstd;
    op.aux[0] = four;
    op.aux[0].data = op.aux[0].storage = dw;
    op.aux[1] = four;
    op.aux[1].data = op.aux[1].storage = db;
    op_bufs none = {{0}, 0, {0}, 0};
    run_everywhere(&op, &none, NULL, NULL, "known backward");
    const double want_dx[4] = {0.3 * r5, -0.4 * r5, -0.1 * r5, 0.2 * r5};
    for (int j = 0; j < 4; j++) {
        CHECK(fabs(dx[j] - want_dx[j]) < 1e-15);
        CHECK(fabs(dw[j] - (j == 0 ? -1.5 * r5 : 0)) < 1e-15);
        CHECK(db[j] == (j == 0 ? 1 : 0));
    }
}

/* ----------------------------------------------------- tpu_op_check */

/* A valid forward record over one f32 buffer: x [3, 5] at 0, out at 16,
 * weight at 32, bias at 40, mean at 48, rstd at 52. */
static tpu_op fwd_base(float *buf) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_FORWARD;
    op.n_in = 3;
    op.n_aux = 2;
    tpu_tensor m = {.sizes = {3, 5}, .strides = {5, 1}, .ndim = 2, .dtype = F32, .storage = buf,
                    .storage_nbytes = 64 * 4};
    tpu_tensor v = {.sizes = {5}, .strides = {1}, .ndim = 1, .dtype = F32, .storage = buf,
                    .storage_nbytes = 64 * 4};
    op.in[0] = m;
    op.in[0].data = buf;
    op.out = m;
    op.out.data = buf + 16;
    op.in[1] = v;
    op.in[1].data = buf + 32;
    op.in[2] = v;
    op.in[2].data = buf + 40;
    op.aux[0] = v;
    op.aux[0].sizes[0] = 3;
    op.aux[0].data = buf + 48;
    op.aux[1] = op.aux[0];
    op.aux[1].data = buf + 52;
    op.p.norm.eps = 1e-5;
    return op;
}

/* The matching backward: g at 0, x at 16, mean at 48, rstd at 52, weight
 * at 32, dx at 56 (needs 15 floats: the buffer has 80), dweight 40,
 * dbias 72. */
static tpu_op bwd_base(float *buf) {
    tpu_op f = fwd_base(buf), op = f;
    op.fn = TPU_NORM_LAYER_BACKWARD;
    op.n_in = 5;
    op.in[0] = f.in[0];
    op.in[1] = f.out;
    op.in[2] = f.aux[0];
    op.in[3] = f.aux[1];
    op.in[4] = f.in[1];
    op.out = f.out;
    op.out.data = buf + 56;
    op.aux[0] = f.in[2];
    op.aux[1] = f.in[2];
    op.aux[1].data = buf + 72;
    for (int i = 0; i < 5; i++)
        op.in[i].storage_nbytes = 80 * 4;
    op.out.storage_nbytes = op.aux[0].storage_nbytes = op.aux[1].storage_nbytes = 80 * 4;
    return op;
}

static void check_refusals(void) {
    float *buf = calloc(80, sizeof *buf);
    void *scratch = NULL;
    tpu_op op = fwd_base(buf);
    CHECK_OK(tpu_op_check(&op));
    /* Weight and bias are optional, the statistics are not. */
    op.in[1] = op.in[2] = (tpu_tensor){0};
    CHECK_OK(tpu_op_check(&op));
    op = fwd_base(buf);
    op.aux[1] = (tpu_tensor){0};
    CHECK(tpu_op_check(&op) != TPU_OK);
    CHECK_CONTAINS(tpu_last_error_message(), "aux[1]");
    /* Forward, out is required (the backward's dx is optional: below). */
    op = fwd_base(buf);
    op.out = (tpu_tensor){0};
    CHECK(tpu_op_check(&op) != TPU_OK);
    CHECK_CONTAINS(tpu_last_error_message(), "out");

    /* Wrong counts. */
    op = fwd_base(buf);
    op.n_in = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 2 (expected 3)");
    op.n_in = 5;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 5 (expected 3)");
    op = fwd_base(buf);
    op.n_aux = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 1 (expected 2)");

    /* Wrong shapes: x not 2-d, out, weight, bias, mean of other sizes. */
    op = fwd_base(buf);
    op.in[0].ndim = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "x must be 2-d");
    op = fwd_base(buf);
    op.out.sizes[1] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out has sizes [3, 4], expected [3, 5]");
    op = fwd_base(buf);
    op.in[1].sizes[0] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "weight has sizes [4], expected [5]");
    op = fwd_base(buf);
    op.in[2].ndim = 2;
    op.in[2].sizes[1] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "bias has sizes [5, 1], expected [5]");
    op = fwd_base(buf);
    op.aux[0].sizes[0] = 5;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "mean has sizes [5], expected [3]");

    /* Wrong dtypes: integer x, parameters neither x's dtype nor f32 for a
     * half x, out of another dtype. */
    op = fwd_base(buf);
    op.in[0].dtype = op.out.dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "int32");
    op = fwd_base(buf);
    op.in[0].dtype = op.out.dtype = F16;
    CHECK_OK(tpu_op_check(&op)); /* mixed precision: f32 parameters */
    op.in[1].dtype = BF16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "weight has dtype bfloat16, expected float32");
    op = fwd_base(buf);
    op.aux[0].dtype = op.aux[1].dtype = F16;
    op.in[1].dtype = op.in[2].dtype = F16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE,
                  "parameters of dtype float16 with x of dtype float32");
    op = fwd_base(buf);
    op.out.dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out has dtype float64, expected float32");

    /* aux overlapping out, an input, or the other aux. */
    op = fwd_base(buf);
    op.aux[0].data = buf + 20;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps out");
    op = fwd_base(buf);
    op.aux[1].data = buf + 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[1] overlaps in[0]");
    op = fwd_base(buf);
    op.aux[1].data = buf + 49;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[1] overlaps aux[0]");
    op = fwd_base(buf);
    op.out.data = buf;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    /* aux overlapping itself. */
    op = fwd_base(buf);
    op.aux[0].strides[0] = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] has stride 0");

    /* Backward. */
    op = bwd_base(buf);
    CHECK(tpu_op_phases(&op) == 2);
    scratch = give_scratch(&op);
    CHECK_OK(tpu_op_check(&op));
    /* The two-phase record needs its scratch. */
    op.scratch = NULL;
    op.scratch_nbytes = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "bytes of scratch");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = tpu_op_scratch_bytes(&op) - 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "bytes of scratch");
    /* dx only: one phase, no scratch; nothing at all is wanted: fine too. */
    op = bwd_base(buf);
    op.aux[0] = op.aux[1] = (tpu_tensor){0};
    CHECK(tpu_op_phases(&op) == 1 && tpu_op_scratch_bytes(&op) == 0);
    CHECK_OK(tpu_op_check(&op));
    op.in[4] = (tpu_tensor){0};
    CHECK_OK(tpu_op_check(&op));
    op.out = (tpu_tensor){0};
    CHECK_OK(tpu_op_check(&op));
    /* Required inputs may not be absent. */
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.in[2] = (tpu_tensor){0};
    CHECK(tpu_op_check(&op) != TPU_OK);
    CHECK_CONTAINS(tpu_last_error_message(), "in[2]");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.n_in = 3;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 3 (expected 5)");
    op.n_in = 5;
    op.n_aux = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 0 (expected 2)");
    op.n_aux = 2;
    op.in[0].sizes[0] = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "grad has sizes [2, 5], expected [3, 5]");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.in[3].sizes[0] = 5;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "rstd has sizes [5], expected [3]");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.aux[0].sizes[0] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "dweight has sizes [3], expected [5]");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.aux[1].dtype = F16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "dbias has dtype float16, expected float32");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.in[0].dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "grad has dtype float64, expected float32");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.aux[1].data = buf + 42;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[1] overlaps aux[0]");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.aux[0].data = buf + 50;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps in[2]");
    op = bwd_base(buf);
    op.scratch = scratch;
    op.scratch_nbytes = 1 << 20;
    op.out.data = buf + 4;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    /* Functions outside the enum. */
    op = fwd_base(buf);
    op.fn = TPU_NORM_COUNT;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "has no function 2");
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_NORM, TPU_NORM_LAYER_BACKWARD),
                 "native_layer_norm_backward") == 0);
    free(scratch);
    free(buf);
}

/* An absent dx (op.h: "absent: not wanted") with the parameter
 * gradients wanted: dweight and dbias are computed, nothing else is
 * written. */
static void absent_dx(void) {
    ncase c = {.m = 70, .n = 9, .xd = F32, .pd = F32, .w = true, .dx = false, .dw = true,
               .db = true, .lx = L_CONTIG, .lo = L_CONTIG, .l1 = L_CONTIG};
    run_backward(&c);
}

int main(void) {
    check_refusals();
    known_answers();
    absent_dx();
    run_table();
    printf("norm: %d cases x %d modes x %d thread counts\n", g_cases,
           (int)N_MODES, (int)N_NTHS);
    return check_report();
}
