/* WINDOW kernel tests (im2col, col2im, max pooling) against loops written
 * here from op.h's definition: window (oh, ow) covers rows
 * oh * sh - ph + i * dh and columns ow * sw - pw + j * dw (i < kh, j < kw)
 * of an image x [N, C, H, W]; positions outside it are padding.
 *
 *   IM2COL    out[n, oh, ow, c, i, j] = x[n, c, h, w] byte for byte, all
 *             zero bytes in the padding
 *   COL2IM    out[n, c, h, w] = the long double sum of every column entry
 *             [n, oh, ow, c, i, j] whose position is (h, w), within the
 *             f64 rounding of the adds plus one store; 0 where none reads
 *   MAX_POOL  the value of the first largest element of the window
 *             (padding never counts), or of its last NaN if it holds any,
 *             and that element's position h * W + w
 *
 * Geometries with every stride, padding and dilation from 1 to 3, odd and
 * even kernels, one-window and ceil-mode (one more window) outputs;
 * images and columns in every layout (transposed, gapped, reversed); f32,
 * f64, f16, bf16 and integer dtypes (bool for im2col). Every record runs
 * in every kernel mode with nth = 1, 2, 3, 7 and must give the same bytes
 * each time. Also: the adjoint identity <col2im(y), x> = <y, im2col(x)>
 * on f64, and tpu_op_check's refusals.
 *
 *   ADAPTIVE_MAX_POOL  over [N, C, D, H, W]: bin o of O over a dim of I is
 *             [floor(o I / O), ceil((o + 1) I / O)); the value of its first
 *             largest element or of its last NaN, at (d H + h) W + w;
 *             odd bin counts (7 -> 3, 5 -> 8), empty batches and outputs,
 *             f32, f64, f16, bf16 in every layout. */
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

typedef struct {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} geom;

/* Image geometries: N, C, H, W and the window parameters. */
static const struct {
    int64_t n, c, h, w;
    geom g;
} k_geoms[] = {
    {2, 3, 5, 6, {3, 3, 1, 1, 1, 1, 1, 1}},
    {1, 2, 7, 8, {2, 3, 2, 1, 0, 1, 1, 2}},
    {1, 1, 3, 3, {1, 1, 1, 1, 0, 0, 1, 1}},
    {2, 2, 9, 6, {5, 2, 3, 2, 2, 1, 1, 1}},
    {1, 3, 8, 9, {3, 3, 2, 2, 1, 1, 2, 2}},
    {1, 2, 6, 7, {4, 1, 1, 3, 2, 0, 1, 1}},
    {2, 1, 10, 5, {3, 2, 3, 1, 1, 1, 3, 1}},
    {1, 1, 4, 4, {4, 4, 1, 1, 0, 0, 1, 1}}, /* one window */
    {3, 2, 1, 9, {1, 3, 1, 2, 0, 1, 1, 1}},
    {1, 1, 5, 5, {2, 2, 2, 2, 1, 1, 1, 1}},
    {0, 2, 4, 4, {2, 2, 1, 1, 0, 0, 1, 1}}, /* no images */
    {1, 0, 4, 4, {2, 2, 1, 1, 0, 0, 1, 1}}, /* no channels */
};
enum { N_GEOMS = sizeof k_geoms / sizeof k_geoms[0] };

/* PyTorch's window count: floor mode, and ceil mode's extra window when
 * it starts inside the image (or the left padding). */
static int64_t out_count(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    int64_t span = size + 2 * p - d * (k - 1) - 1;
    if (span < 0)
        return 0;
    int64_t n = span / s + 1;
    if (ceil && span % s != 0 && n * s < size + p)
        n++;
    return n;
}

/* ------------------------------------------------------------ im2col */

typedef struct {
    const char *what;
    fbuf *x, *cols;
    geom g;
} win_ctx;

static unsigned char *at4(const tpu_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return (unsigned char *)t->data + (a * t->strides[0] + b * t->strides[1] + c * t->strides[2] +
                                       d * t->strides[3]) * (int64_t)t_size(t->dtype);
}

static unsigned char *at6(const tpu_tensor *t, const int64_t *i) {
    int64_t off = 0;
    for (int d = 0; d < 6; d++)
        off += i[d] * t->strides[d];
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

static void verify_im2col(void *p) {
    const win_ctx *k = p;
    const tpu_tensor *x = &k->x->t, *o = &k->cols->t;
    const geom g = k->g;
    const size_t es = t_size(o->dtype);
    const unsigned char zero[8] = {0};
    int64_t i[6];
    for (i[0] = 0; i[0] < o->sizes[0]; i[0]++)
        for (i[1] = 0; i[1] < o->sizes[1]; i[1]++)
            for (i[2] = 0; i[2] < o->sizes[2]; i[2]++)
                for (i[3] = 0; i[3] < o->sizes[3]; i[3]++)
                    for (i[4] = 0; i[4] < g.kh; i[4]++)
                        for (i[5] = 0; i[5] < g.kw; i[5]++) {
                            int64_t h = i[1] * g.sh - g.ph + i[4] * g.dh;
                            int64_t w = i[2] * g.sw - g.pw + i[5] * g.dw;
                            bool inside = h >= 0 && h < x->sizes[2] && w >= 0 && w < x->sizes[3];
                            const unsigned char *want = inside ? at4(x, i[0], i[3], h, w) : zero;
                            if (memcmp(at6(o, i), want, es) != 0 && g_bad++ < 4)
                                fprintf(stderr, "    %s: column [%lld, %lld, %lld, %lld, %lld, %lld] "
                                        "(image %lld, %lld) differs\n", k->what, (long long)i[0],
                                        (long long)i[1], (long long)i[2], (long long)i[3],
                                        (long long)i[4], (long long)i[5], (long long)h, (long long)w);
                        }
}

/* Values: small numbers and (floats) NaN, infinities and -0 in some. */
static double gen_win(tpu_dtype dt, bool nans) {
    uint64_t r = t_rand();
    if (dt == BOOL)
        return (double)(r % 2);
    if (t_is_float(dt)) {
        if (nans && r % 11 == 0)
            return NAN;
        if (nans && r % 13 == 0)
            return r % 2 ? INFINITY : -INFINITY;
        if (r % 17 == 0)
            return -0.0;
        return (double)((int64_t)(r % 9) - 4) / 4; /* ties are common */
    }
    if (r % 10 == 0) {
        switch (dt) {
        case TPU_DTYPE_I8: return r % 2 ? 127 : -128;
        case TPU_DTYPE_U8: return r % 2 ? 255 : 0;
        case TPU_DTYPE_I16: return r % 2 ? 32767 : -32768;
        case TPU_DTYPE_I32: return r % 2 ? 2147483647.0 : -2147483648.0;
        default: return r % 2 ? 0x1p62 : -0x1p63;
        }
    }
    double v = (double)((int64_t)(r % 7) - 3);
    return dt == U8 ? fabs(v) : v;
}

static void describe(char *what, size_t cap, const char *fn, tpu_dtype dt, int gi, int64_t oh,
                     int64_t ow, int lx, int lc) {
    const geom g = k_geoms[gi].g;
    snprintf(what, cap, "%s %s x [%lld,%lld,%lld,%lld] k %lldx%lld s %lldx%lld p %lldx%lld "
             "d %lldx%lld -> %lldx%lld layouts %s/%s", fn, dt_str(dt), (long long)k_geoms[gi].n,
             (long long)k_geoms[gi].c, (long long)k_geoms[gi].h, (long long)k_geoms[gi].w,
             (long long)g.kh, (long long)g.kw, (long long)g.sh, (long long)g.sw, (long long)g.ph,
             (long long)g.pw, (long long)g.dh, (long long)g.dw, (long long)oh, (long long)ow,
             k_layout_names[lx], k_layout_names[lc]);
}

static void set_geom(tpu_op *op, geom g) {
    op->p.window.kh = g.kh;
    op->p.window.kw = g.kw;
    op->p.window.sh = g.sh;
    op->p.window.sw = g.sw;
    op->p.window.ph = g.ph;
    op->p.window.pw = g.pw;
    op->p.window.dh = g.dh;
    op->p.window.dw = g.dw;
}

static void verify_col2im(void *p);

/* IM2COL (col2im false) or COL2IM of geometry gi with oh x ow windows. */
static void run_cols(bool col2im, tpu_dtype dt, int gi, int64_t oh, int64_t ow, int lx, int lc) {
    char what[300];
    describe(what, sizeof what, col2im ? "col2im" : "im2col", dt, gi, oh, ow, lx, lc);
    const geom g = k_geoms[gi].g;
    const int64_t xs[4] = {k_geoms[gi].n, k_geoms[gi].c, k_geoms[gi].h, k_geoms[gi].w};
    const int64_t cs[6] = {xs[0], oh, ow, xs[1], g.kh, g.kw};
    fbuf x, cols;
    fb_make(&x, dt, 4, xs, lx);
    fb_make(&cols, dt, 6, cs, lc);
    fbuf *src = col2im ? &cols : &x;
    int64_t n = t_numel(&src->t);
    for (int64_t i = 0; i < n; i++)
        fb_set(src, i, col2im ? (double)((int64_t)(t_rand() % 41) - 20) / 8 + t_unit() / 64
                              : gen_win(dt, true));
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = col2im ? TPU_WINDOW_COL2IM : TPU_WINDOW_IM2COL;
    op.n_in = 1;
    op.in[0] = col2im ? cols.t : x.t;
    op.out = col2im ? x.t : cols.t;
    set_geom(&op, g);
    win_ctx ctx = {what, &x, &cols, g};
    op_bufs bufs = {{col2im ? &x : &cols}, 1, {col2im ? &cols : &x}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, col2im ? verify_col2im : verify_im2col, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&x);
    fb_free(&cols);
}

/* ------------------------------------------------------------ col2im */

static void verify_col2im(void *p) {
    const win_ctx *k = p;
    const tpu_tensor *x = &k->x->t, *c = &k->cols->t;
    const geom g = k->g;
    int64_t i[6];
    for (int64_t n = 0; n < x->sizes[0]; n++)
        for (int64_t ch = 0; ch < x->sizes[1]; ch++)
            for (int64_t h = 0; h < x->sizes[2]; h++)
                for (int64_t w = 0; w < x->sizes[3]; w++) {
                    /* Every column entry, by brute force, that reads (h, w). */
                    long double sum = 0, mag = 0;
                    int64_t adds = 0;
                    i[0] = n;
                    i[3] = ch;
                    for (i[1] = 0; i[1] < c->sizes[1]; i[1]++)
                        for (i[2] = 0; i[2] < c->sizes[2]; i[2]++)
                            for (i[4] = 0; i[4] < g.kh; i[4]++)
                                for (i[5] = 0; i[5] < g.kw; i[5]++) {
                                    if (i[1] * g.sh - g.ph + i[4] * g.dh != h ||
                                        i[2] * g.sw - g.pw + i[5] * g.dw != w)
                                        continue;
                                    long double v = t_read_f(at6(c, i), c->dtype);
                                    sum += v;
                                    mag += fabsl(v);
                                    adds++;
                                }
                    double got = t_read_f(at4(x, n, ch, h, w), x->dtype);
                    double tol = tol_store(x->dtype, (double)sum) + (double)adds * 0x1p-52 * (double)mag;
                    bool ok = adds == 0 ? got == 0 && !signbit(got)
                                        : close_to(got, (double)sum, tol);
                    if (!ok && g_bad++ < 4)
                        fprintf(stderr, "    %s: image [%lld, %lld, %lld, %lld] = %.17g, want "
                                "%.17Lg (%lld entries)\n", k->what, (long long)n, (long long)ch,
                                (long long)h, (long long)w, got, sum, (long long)adds);
                }
}

/* <col2im(y), x> == <y, im2col(x)> for random f64 x and y: both sides
 * sum the same products, so they agree to rounding. */
static void adjoint(int gi) {
    const geom g = k_geoms[gi].g;
    const int64_t xs[4] = {k_geoms[gi].n, k_geoms[gi].c, k_geoms[gi].h, k_geoms[gi].w};
    const int64_t oh = out_count(xs[2], g.kh, g.sh, g.ph, g.dh, false);
    const int64_t ow = out_count(xs[3], g.kw, g.sw, g.pw, g.dw, false);
    const int64_t cs[6] = {xs[0], oh, ow, xs[1], g.kh, g.kw};
    fbuf x, y, cx, ty; /* x, y; cx = im2col(x), ty = col2im(y) */
    fb_make(&x, F64, 4, xs, L_GAP);
    fb_make(&ty, F64, 4, xs, L_TRANS);
    fb_make(&y, F64, 6, cs, L_NEG);
    fb_make(&cx, F64, 6, cs, L_CONTIG);
    int64_t nx = t_numel(&x.t), ny = t_numel(&y.t);
    for (int64_t i = 0; i < nx; i++)
        fb_set(&x, i, 2 * t_unit() - 1);
    for (int64_t i = 0; i < ny; i++)
        fb_set(&y, i, 2 * t_unit() - 1);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.n_in = 1;
    set_geom(&op, g);
    op.fn = TPU_WINDOW_IM2COL;
    op.in[0] = x.t;
    op.out = cx.t;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(run_shares(&op, 3));
    op.fn = TPU_WINDOW_COL2IM;
    op.in[0] = y.t;
    op.out = ty.t;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(run_shares(&op, 2));
    long double lhs = 0, rhs = 0, mag = 0;
    for (int64_t i = 0; i < nx; i++)
        lhs += (long double)fb_get(&ty, i) * fb_get(&x, i);
    for (int64_t i = 0; i < ny; i++) {
        rhs += (long double)fb_get(&y, i) * fb_get(&cx, i);
        mag += fabsl((long double)fb_get(&y, i) * fb_get(&cx, i));
    }
    bool ok = fabsl(lhs - rhs) <= 1e-13L * (mag + 1);
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "    adjoint geometry %d: %.17Lg vs %.17Lg\n", gi, lhs, rhs);
    g_cases++;
    fb_free(&x);
    fb_free(&y);
    fb_free(&cx);
    fb_free(&ty);
}

/* ---------------------------------------------------------- max pool */

typedef struct {
    const char *what;
    fbuf *x, *out, *ix;
    geom g;
} pool_ctx;

static void verify_pool(void *p) {
    const pool_ctx *k = p;
    const tpu_tensor *x = &k->x->t, *o = &k->out->t, *ix = &k->ix->t;
    const geom g = k->g;
    const tpu_dtype dt = x->dtype;
    const int64_t H = x->sizes[2], W = x->sizes[3];
    for (int64_t n = 0; n < o->sizes[0]; n++)
        for (int64_t c = 0; c < o->sizes[1]; c++)
            for (int64_t oh = 0; oh < o->sizes[2]; oh++)
                for (int64_t ow = 0; ow < o->sizes[3]; ow++) {
                    /* The last NaN if any, else the first largest. */
                    int64_t last_nan = -1, first_max = -1;
                    const unsigned char *nan_p = NULL, *max_p = NULL;
                    for (int64_t i = 0; i < g.kh; i++)
                        for (int64_t j = 0; j < g.kw; j++) {
                            int64_t h = oh * g.sh - g.ph + i * g.dh, w = ow * g.sw - g.pw + j * g.dw;
                            if (h < 0 || h >= H || w < 0 || w >= W)
                                continue;
                            const unsigned char *v = at4(x, n, c, h, w);
                            if (t_is_float(dt) && isnan(t_read_f(v, dt))) {
                                last_nan = h * W + w;
                                nan_p = v;
                            } else if (max_p == NULL ||
                                       (t_is_float(dt) ? t_read_f(v, dt) > t_read_f(max_p, dt)
                                                       : t_read_i(v, dt) > t_read_i(max_p, dt))) {
                                first_max = h * W + w;
                                max_p = v;
                            }
                        }
                    int64_t want_i = last_nan >= 0 ? last_nan : first_max;
                    const unsigned char *want = last_nan >= 0 ? nan_p : max_p;
                    CHECK(want != NULL); /* the geometries keep an element in every window */
                    if (want == NULL)
                        continue;
                    const unsigned char *got = at4(o, n, c, oh, ow);
                    int64_t got_i = t_read_i(at4(ix, n, c, oh, ow), I64);
                    bool same = last_nan >= 0 ? isnan(t_read_f(got, dt))
                                              : memcmp(got, want, t_size(dt)) == 0;
                    if ((!same || got_i != want_i) && g_bad++ < 4)
                        fprintf(stderr, "    %s: out [%lld, %lld, %lld, %lld] = %.17g at %lld, want "
                                "%.17g at %lld\n", k->what, (long long)n, (long long)c,
                                (long long)oh, (long long)ow, t_read_f(got, dt), (long long)got_i,
                                t_read_f(want, dt), (long long)want_i);
                }
}

static void run_pool(tpu_dtype dt, int gi, int64_t oh, int64_t ow, int lx, int lo, int li) {
    char what[300];
    describe(what, sizeof what, "max_pool", dt, gi, oh, ow, lx, lo);
    const geom g = k_geoms[gi].g;
    const int64_t xs[4] = {k_geoms[gi].n, k_geoms[gi].c, k_geoms[gi].h, k_geoms[gi].w};
    const int64_t os[4] = {xs[0], xs[1], oh, ow};
    fbuf x, out, ix;
    fb_make(&x, dt, 4, xs, lx);
    fb_make(&out, dt, 4, os, lo);
    fb_make(&ix, I64, 4, os, li);
    int64_t n = t_numel(&x.t);
    for (int64_t i = 0; i < n; i++) {
        double v = gen_win(dt, true);
        fb_set(&x, i, v);
        if (dt == I64 && fabs(v) >= 0x1p62)
            put_int(t_at(&x.t, i), I64, v > 0 ? INT64_MAX : INT64_MIN);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = TPU_WINDOW_MAX_POOL;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = x.t;
    op.out = out.t;
    op.aux[0] = ix.t;
    set_geom(&op, g);
    pool_ctx ctx = {what, &x, &out, &ix, g};
    op_bufs bufs = {{&out, &ix}, 2, {&x}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_pool, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&x);
    fb_free(&out);
    fb_free(&ix);
}

static void test_windows(void) {
    static const tpu_dtype col_dts[] = {F32, F64, BF16, F16, I32, I8, U8, I64, BOOL};
    static const tpu_dtype c2i_dts[] = {F32, F64, BF16, F16};
    static const tpu_dtype pool_dts[] = {F32, F64, BF16, F16, I32, I16, U8, I64, I8};
    int rot = 0;
    for (int gi = 0; gi < N_GEOMS; gi++) {
        const geom g = k_geoms[gi].g;
        for (int ceil = 0; ceil < 2; ceil++) {
            int64_t h = k_geoms[gi].h, w = k_geoms[gi].w;
            int64_t oh = out_count(h, g.kh, g.sh, g.ph, g.dh, ceil);
            int64_t ow = out_count(w, g.kw, g.sw, g.pw, g.dw, ceil);
            if (ceil && oh == out_count(h, g.kh, g.sh, g.ph, g.dh, false) &&
                ow == out_count(w, g.kw, g.sw, g.pw, g.dw, false))
                continue; /* no extra window */
            for (size_t d = 0; d < sizeof col_dts / sizeof col_dts[0]; d++, rot++)
                run_cols(false, col_dts[d], gi, oh, ow, rot % L_COUNT, (rot / 4) % L_COUNT);
            for (size_t d = 0; d < sizeof c2i_dts / sizeof c2i_dts[0]; d++, rot++)
                run_cols(true, c2i_dts[d], gi, oh, ow, (rot / 4) % L_COUNT, rot % L_COUNT);
            /* Pooling: PyTorch's padding is at most half the kernel, so
             * every window holds an image element. */
            if (2 * g.ph <= g.kh && 2 * g.pw <= g.kw)
                for (size_t d = 0; d < sizeof pool_dts / sizeof pool_dts[0]; d++, rot++)
                    run_pool(pool_dts[d], gi, oh, ow, rot % L_COUNT, (rot / 4) % L_COUNT,
                             (rot / 2) % L_COUNT);
        }
        adjoint(gi);
    }
}

/* Known answers: a 1x1x3x3 image pooled by 2x2 windows, stride 1. */
static void pool_known(void) {
    float x[9] = {1, 5, 5, 5, NAN, 2, 7, NAN, 7}, out[4];
    int64_t ix[4];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = TPU_WINDOW_MAX_POOL;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {1, 1, 3, 3}, .strides = {9, 9, 3, 1}, .ndim = 4,
                            .dtype = F32, .storage = x, .storage_nbytes = sizeof x};
    op.out = (tpu_tensor){.data = out, .sizes = {1, 1, 2, 2}, .strides = {4, 4, 2, 1}, .ndim = 4,
                          .dtype = F32, .storage = out, .storage_nbytes = sizeof out};
    op.aux[0] = (tpu_tensor){.data = ix, .sizes = {1, 1, 2, 2}, .strides = {4, 4, 2, 1},
                             .ndim = 4, .dtype = I64, .storage = ix, .storage_nbytes = sizeof ix};
    set_geom(&op, (geom){2, 2, 1, 1, 0, 0, 1, 1});
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    /* windows: {1,5,5,NaN} -> NaN at 4; {5,5,NaN,2} -> NaN at 4;
     * {5,NaN,7,NaN} -> the last NaN, 7; {NaN,2,NaN,7} -> 7 */
    CHECK(isnan(out[0]) && ix[0] == 4);
    CHECK(isnan(out[1]) && ix[1] == 4);
    CHECK(isnan(out[2]) && ix[2] == 7);
    CHECK(isnan(out[3]) && ix[3] == 7);
    /* No NaN: the first largest (5 at 1, not 2 or 3). */
    x[4] = 0;
    x[7] = 0;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(out[0] == 5 && ix[0] == 1);
    CHECK(out[1] == 5 && ix[1] == 1);
    CHECK(out[2] == 7 && ix[2] == 6);
    CHECK(out[3] == 7 && ix[3] == 8);
    /* A window of padding only (kernel 1, padding 1: PyTorch forbids it)
     * is a kernel-side error. */
    set_geom(&op, (geom){1, 1, 2, 2, 1, 1, 1, 1}); /* windows at -1 and 1 */
    const char *parts[] = {"holds no element of the image", NULL};
    expect_run_error(&op, TPU_ERR_INVALID_ARG, parts, "pool over padding only");
}

static void window_refusals(void) {
    float img[64] = {0}, cols[256] = {0};
    int64_t ib[64] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = TPU_WINDOW_IM2COL;
    op.n_in = 1;
    /* x [1, 2, 4, 4] with 2x2 windows, stride 2: 2x2 windows. */
    op.in[0] = (tpu_tensor){.data = img, .sizes = {1, 2, 4, 4}, .strides = {32, 16, 4, 1},
                            .ndim = 4, .dtype = F32, .storage = img, .storage_nbytes = sizeof img};
    op.out = (tpu_tensor){.data = cols, .sizes = {1, 2, 2, 2, 2, 2},
                          .strides = {32, 16, 8, 4, 2, 1}, .ndim = 6, .dtype = F32,
                          .storage = cols, .storage_nbytes = sizeof cols};
    set_geom(&op, (geom){2, 2, 2, 2, 0, 0, 1, 1});
    tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    /* Parameters: kernel, stride, dilation >= 1, padding >= 0. */
    int64_t *fields[8] = {&op.p.window.kh, &op.p.window.kw, &op.p.window.sh, &op.p.window.sw,
                          &op.p.window.ph, &op.p.window.pw, &op.p.window.dh, &op.p.window.dw};
    for (int f = 0; f < 8; f++) {
        op = ok;
        *fields[f] = f / 2 == 2 ? -1 : 0;
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "(padding >= 0, the others >= 1)");
    }
    /* Shapes: a 3-d image, 5-d columns, another N or C, another kernel. */
    op = ok;
    op.in[0].ndim = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "4-d image; 6-d columns");
    op = ok;
    op.out.ndim = 5;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "6-d columns [N, OH, OW, C, kh, kw]");
    op = ok;
    op.out.sizes[3] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit image [1, 2, 4, 4]");
    op = ok;
    op.out.sizes[5] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit image");
    op = ok;
    op.out.sizes[1] = 3; /* window 2 starts at row 4 == H: beyond the image */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit image");
    op.p.window.ph = 1; /* with padding 1 it starts at row 3: fine */
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.out.dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "dtypes float32 and float64 (they must match)");
    op = ok;
    op.in[0].dtype = op.out.dtype = BOOL; /* im2col moves any dtype */
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.out.data = img; /* columns over the image */
    op.out.storage = img;
    op.out.storage_nbytes = sizeof img;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op.out.sizes[0] = op.in[0].sizes[0] = 0;
    CHECK_OK(tpu_op_check(&op)); /* empty: nothing overlaps */
    op = ok;
    op.n_aux = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 1 (expected 0)");
    /* COL2IM: floats only. */
    op = ok;
    op.fn = TPU_WINDOW_COL2IM;
    op.in[0] = ok.out;
    op.out = ok.in[0];
    CHECK_OK(tpu_op_check(&op));
    tpu_op cok = op;
    op.in[0].dtype = op.out.dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "dtypes int32 and int32 (they must match and "
                  "be floating)");
    op = cok;
    op.in[0].sizes[0] = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit image");
    /* MAX_POOL: 4-d pooled out, int64 indices of its sizes, not bool. */
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = TPU_WINDOW_MAX_POOL;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = ok.in[0];
    op.out = (tpu_tensor){.data = cols, .sizes = {1, 2, 2, 2}, .strides = {8, 4, 2, 1},
                          .ndim = 4, .dtype = F32, .storage = cols, .storage_nbytes = sizeof cols};
    op.aux[0] = (tpu_tensor){.data = ib, .sizes = {1, 2, 2, 2}, .strides = {8, 4, 2, 1},
                             .ndim = 4, .dtype = I64, .storage = ib, .storage_nbytes = sizeof ib};
    set_geom(&op, (geom){2, 2, 2, 2, 0, 0, 1, 1});
    tpu_op pok = op;
    CHECK_OK(tpu_op_check(&op));
    op.n_aux = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 0 (expected 1)");
    op = pok;
    op.aux[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "indices has dtype int32, expected int64");
    op = pok;
    op.aux[0].sizes[3] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "indices do not have the pooled sizes");
    op = pok;
    op.aux[0].sizes[1] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "indices has sizes");
    op = pok;
    op.in[0].dtype = op.out.dtype = BOOL;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "dtype bool is not supported");
    op = pok;
    op.out.ndim = 6;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "4-d pooled");
    op = pok;
    op.out.sizes[2] = op.aux[0].sizes[2] = 3; /* window 2 starts at row 4: outside the image */
    op.p.window.ph = 1;                        /* even with padding (pooling windows start inside) */
    op.p.window.sh = 2;
    op.out.strides[0] = op.aux[0].strides[0] = 12;
    op.out.strides[1] = op.aux[0].strides[1] = 6;
    CHECK_OK(tpu_op_check(&op)); /* row -1 + 2 * 2 = 3 < 4: inside */
    op.p.window.ph = 0;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "do not fit image");
    op = pok;
    op.aux[0].data = cols + 4; /* indices over the values */
    op.aux[0].storage = cols;
    op.aux[0].storage_nbytes = sizeof cols;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps out");
    op = pok;
    op.fn = TPU_WINDOW_COUNT;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "has no function 4");
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_WINDOW, TPU_WINDOW_IM2COL), "im2col") == 0);
}

/* ------------------------------------------------- adaptive max pool */

static unsigned char *at5(const tpu_tensor *t, const int64_t *i) {
    int64_t off = 0;
    for (int d = 0; d < 5; d++)
        off += i[d] * t->strides[d];
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

typedef struct {
    const char *what;
    fbuf *x, *out, *ix;
} apool_ctx;

/* Bin o of `out` over a dim of `in`: [floor(o in / out), ceil((o + 1) in / out)). */
static void bin_of(int64_t o, int64_t out, int64_t in, int64_t *lo, int64_t *hi) {
    *lo = o * in / out;
    *hi = ((o + 1) * in + out - 1) / out;
}

static void verify_apool(void *p) {
    const apool_ctx *k = p;
    const tpu_tensor *x = &k->x->t, *o = &k->out->t, *ix = &k->ix->t;
    const tpu_dtype dt = x->dtype;
    int64_t i[5], j[5];
    for (i[0] = 0; i[0] < o->sizes[0]; i[0]++)
        for (i[1] = 0; i[1] < o->sizes[1]; i[1]++)
            for (i[2] = 0; i[2] < o->sizes[2]; i[2]++)
                for (i[3] = 0; i[3] < o->sizes[3]; i[3]++)
                    for (i[4] = 0; i[4] < o->sizes[4]; i[4]++) {
                        int64_t lo[5], hi[5];
                        for (int d = 2; d < 5; d++)
                            bin_of(i[d], o->sizes[d], x->sizes[d], &lo[d], &hi[d]);
                        /* The last NaN if any, else the first largest. */
                        const unsigned char *nan_p = NULL, *max_p = NULL;
                        int64_t nan_at = -1, max_at = -1;
                        j[0] = i[0];
                        j[1] = i[1];
                        for (j[2] = lo[2]; j[2] < hi[2]; j[2]++)
                            for (j[3] = lo[3]; j[3] < hi[3]; j[3]++)
                                for (j[4] = lo[4]; j[4] < hi[4]; j[4]++) {
                                    const unsigned char *v = at5(x, j);
                                    int64_t at = (j[2] * x->sizes[3] + j[3]) * x->sizes[4] + j[4];
                                    if (isnan(t_read_f(v, dt))) {
                                        nan_p = v;
                                        nan_at = at;
                                    } else if (max_p == NULL || t_read_f(v, dt) > t_read_f(max_p, dt)) {
                                        max_p = v;
                                        max_at = at;
                                    }
                                }
                        const unsigned char *want = nan_p ? nan_p : max_p;
                        int64_t want_at = nan_p ? nan_at : max_at;
                        CHECK(want != NULL);
                        if (want == NULL)
                            continue;
                        const unsigned char *got = at5(o, i);
                        int64_t got_at = t_read_i(at5(ix, i), I64);
                        bool same = nan_p ? isnan(t_read_f(got, dt)) : memcmp(got, want, t_size(dt)) == 0;
                        if ((!same || got_at != want_at) && g_bad++ < 4)
                            fprintf(stderr, "    %s: out [%lld, %lld, %lld, %lld, %lld] = %.9g at %lld, "
                                    "want %.9g at %lld\n", k->what, (long long)i[0], (long long)i[1],
                                    (long long)i[2], (long long)i[3], (long long)i[4],
                                    t_read_f(got, dt), (long long)got_at, t_read_f(want, dt),
                                    (long long)want_at);
                    }
}

static const struct {
    int64_t x[5], o[3];
} k_apools[] = {
    {{2, 3, 1, 7, 5}, {1, 3, 8}},  /* 7 -> 3 and 5 -> 8: overlapping and repeated bins */
    {{1, 2, 4, 5, 6}, {3, 2, 4}},
    {{1, 1, 1, 1, 9}, {1, 1, 4}},
    {{2, 2, 3, 3, 3}, {3, 3, 3}},  /* one element a bin */
    {{1, 3, 5, 1, 2}, {2, 1, 1}},
    {{1, 1, 2, 3, 4}, {1, 1, 1}},  /* one bin: the whole volume */
    {{0, 2, 3, 4, 5}, {1, 2, 2}},  /* no images */
    {{2, 2, 3, 4, 5}, {1, 0, 2}},  /* no bins */
};

static void run_apool(tpu_dtype dt, int ci, int lx, int lo, int li) {
    char what[200];
    int k = snprintf(what, sizeof what, "adaptive_max_pool %s ", dt_str(dt));
    fmt_dims(what, sizeof what, &k, 5, k_apools[ci].x);
    k += snprintf(what + k, sizeof what - (size_t)k, " ->");
    fmt_dims(what, sizeof what, &k, 3, k_apools[ci].o);
    snprintf(what + k, sizeof what - (size_t)k, " layouts %s/%s/%s", k_layout_names[lx],
             k_layout_names[lo], k_layout_names[li]);
    const int64_t *xs = k_apools[ci].x;
    const int64_t os[5] = {xs[0], xs[1], k_apools[ci].o[0], k_apools[ci].o[1], k_apools[ci].o[2]};
    fbuf x, out, ix;
    fb_make(&x, dt, 5, xs, lx);
    fb_make(&out, dt, 5, os, lo);
    fb_make(&ix, I64, 5, os, li);
    for (int64_t i = 0; i < t_numel(&x.t); i++)
        fb_set(&x, i, gen_win(dt, true));
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = TPU_WINDOW_ADAPTIVE_MAX_POOL;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = x.t;
    op.out = out.t;
    op.aux[0] = ix.t;
    apool_ctx ctx = {what, &x, &out, &ix};
    op_bufs bufs = {{&out, &ix}, 2, {&x}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_apool, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&x);
    fb_free(&out);
    fb_free(&ix);
}

static void test_adaptive_pools(void) {
    static const tpu_dtype dts[] = {F32, F64, BF16, F16};
    int rot = 0;
    for (size_t ci = 0; ci < sizeof k_apools / sizeof k_apools[0]; ci++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int l = 0; l < 2; l++, rot++)
                run_apool(dts[d], (int)ci, rot % L_COUNT, (rot / 4) % L_COUNT, (rot / 2) % L_COUNT);
    /* Known answers: [1, 1, 1, 1, 5] = {1, 3, 3, NaN, 2} -> 2 bins [0, 3)
     * and [2, 5): 3 at 1 (the first of the tie), NaN at 3. */
    float x[5] = {1, 3, 3, NAN, 2}, out[2];
    int64_t ix[2];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_WINDOW;
    op.fn = TPU_WINDOW_ADAPTIVE_MAX_POOL;
    op.n_in = 1;
    op.n_aux = 1;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {1, 1, 1, 1, 5}, .strides = {5, 5, 5, 5, 1},
                            .ndim = 5, .dtype = F32, .storage = x, .storage_nbytes = sizeof x};
    op.out = (tpu_tensor){.data = out, .sizes = {1, 1, 1, 1, 2}, .strides = {2, 2, 2, 2, 1},
                          .ndim = 5, .dtype = F32, .storage = out, .storage_nbytes = sizeof out};
    op.aux[0] = (tpu_tensor){.data = ix, .sizes = {1, 1, 1, 1, 2}, .strides = {2, 2, 2, 2, 1},
                             .ndim = 5, .dtype = I64, .storage = ix, .storage_nbytes = sizeof ix};
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(out[0] == 3 && ix[0] == 1 && isnan(out[1]) && ix[1] == 3);
    /* All -inf: -inf at the bin's first position. */
    for (int i = 0; i < 5; i++)
        x[i] = -INFINITY;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(out[0] == -INFINITY && ix[0] == 0 && out[1] == -INFINITY && ix[1] == 2);
    /* Refusals. */
    const tpu_op ok = op;
    op.in[0].dtype = op.out.dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "(they must match and be floating)");
    op = ok;
    op.out.dtype = BF16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "dtypes float32 and bfloat16");
    op = ok;
    op.in[0].ndim = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "both 5-d [N, C, D, H, W]");
    op = ok;
    op.in[0].sizes[3] = 0;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "has an empty dim 3");
    op.out.sizes[4] = op.aux[0].sizes[4] = 0; /* no bins: nothing to hold */
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.aux[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "indices has dtype int32, expected int64");
    op = ok;
    op.aux[0].sizes[4] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "indices has sizes");
    op = ok;
    op.n_aux = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 0 (expected 1)");
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_WINDOW, TPU_WINDOW_ADAPTIVE_MAX_POOL), "adaptive_max_pool") == 0);
}

int main(void) {
    window_refusals();
    test_adaptive_pools();
    pool_known();
    test_windows();
    printf("window: %d cases x %d modes x %d thread counts\n", g_cases, (int)N_MODES,
           (int)N_NTHS);
    return check_report();
}
