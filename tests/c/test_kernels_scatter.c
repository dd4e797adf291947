/* INDEX scatters, advanced indexing, nonzero and histc against loops
 * written here from op.h's definitions:
 *
 *   SCATTER*      for every index element j (row-major), out[j with
 *                 dim = index[j]] is set to src[j] (SCATTER), to value
 *                 (SCATTER_FILL), or has src[j] added (SCATTER_ADD: one
 *                 rounding to out's dtype per add, wrapping integers,
 *                 bool: or), multiplied in (SCATTER_PROD: one rounding
 *                 per product, wrapping integers, bool: and), or compared
 *                 with it, keeping the larger (SCATTER_AMAX, bool: or) or
 *                 the smaller (SCATTER_AMIN, bool: and), a NaN on either
 *                 side winning; duplicates within a line resolve in order
 *   ADVANCED      out[c] = x[c with the indexed dims at the indices' values
 *                 at c, a negative one counted from the end], byte for byte
 *   ADVANCED_PUT  the inverse over out's row-major order: the last
 *                 duplicate wins, accumulate adds in order
 *   NONZERO       the coordinates of the nonzero elements (NaN nonzero, -0
 *                 zero) in row-major order
 *   HISTC         counts per bin, the bin (x - lo) * bins / (hi - lo)
 *                 truncated, in f32 for f32/f16/bf16 inputs and f64
 *                 otherwise, the top edge in the last bin, NaN and values
 *                 outside [lo, hi] not counted
 *
 * Expected values are computed before the run from the stored inputs (the
 * scatters and puts write into out's old values). Operands in every layout
 * (transposed, gapped, reversed), every dtype. Every record runs in every
 * kernel mode with nth = 1, 2, 3, 7 and must give the same bytes each
 * time. Index errors are kernel-side TPU_ERR_INDEX naming the value; count
 * mismatches of NONZERO are errors too. Also tpu_op_check's refusals. */
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

static const tpu_dtype k_all_dtypes[] = {F32, F64, F16, BF16, I8, I16, I32, I64, U8, BOOL};
enum { N_DTYPES = sizeof k_all_dtypes / sizeof k_all_dtypes[0] };

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

/* A value of dtype dt: multiples of 1/8 in [-8, 8] for floats (sums of a
 * few stay exact in every float dtype), any bits for integers. */
static void put_value(fbuf *b, int64_t i) {
    tpu_dtype dt = b->t.dtype;
    if (dt == BOOL)
        fb_set(b, i, (double)(t_rand() % 3 == 0));
    else if (t_is_float(dt))
        fb_set(b, i, (double)((int64_t)(t_rand() % 129) - 64) / 8);
    else
        put_int(t_at(&b->t, i), dt, (int64_t)t_rand());
}

/* Applies one scatter/put step to the element at dst (a copy of out's
 * bytes): set from `from`, or add (bool: or) with one rounding. */
static void apply(unsigned char *dst, const unsigned char *from, tpu_dtype dt, bool add) {
    size_t es = t_size(dt);
    if (!add) {
        memcpy(dst, from, es);
    } else if (dt == BOOL) {
        dst[0] = dst[0] != 0 || from[0] != 0;
    } else if (t_is_float(dt)) {
        put_float(dst, dt, t_quant(t_read_f(dst, dt) + t_read_f(from, dt), dt));
    } else {
        uint64_t s = (uint64_t)t_read_i(dst, dt) + (uint64_t)t_read_i(from, dt);
        put_int(dst, dt, (int64_t)s);
    }
}

/* One step of scatter function fn at dst (a copy of out's bytes): SCATTER,
 * SCATTER_FILL and SCATTER_ADD as apply does; SCATTER_PROD multiplies
 * (floats: the exact product rounded once to the dtype; integers wrap;
 * bool: and); SCATTER_AMAX / AMIN keep the larger / smaller (NaN if
 * either side is NaN; bool: or / and; u8 unsigned, i64 in full). */
static void scatter_step(int fn, unsigned char *dst, const unsigned char *from, tpu_dtype dt) {
    if (fn == TPU_INDEX_SCATTER || fn == TPU_INDEX_SCATTER_FILL || fn == TPU_INDEX_SCATTER_ADD) {
        apply(dst, from, dt, fn == TPU_INDEX_SCATTER_ADD);
    } else if (dt == BOOL) {
        bool a = dst[0] != 0, b = from[0] != 0;
        dst[0] = fn == TPU_INDEX_SCATTER_AMAX ? a || b : a && b;
    } else if (t_is_float(dt)) {
        double a = t_read_f(dst, dt), b = t_read_f(from, dt), r;
        if (fn == TPU_INDEX_SCATTER_PROD)
            r = t_quant(a * b, dt);
        else if (isnan(a) || isnan(b))
            r = NAN;
        else if (fn == TPU_INDEX_SCATTER_AMAX)
            r = b > a ? b : a;
        else
            r = b < a ? b : a;
        put_float(dst, dt, r);
    } else {
        int64_t a = t_read_i(dst, dt), b = t_read_i(from, dt), r;
        if (fn == TPU_INDEX_SCATTER_PROD)
            r = (int64_t)((uint64_t)a * (uint64_t)b); /* put_int keeps the low bits */
        else if (fn == TPU_INDEX_SCATTER_AMAX)
            r = b > a ? b : a;
        else
            r = b < a ? b : a;
        put_int(dst, dt, r);
    }
}

/* A value for the multiplying and comparing scatters: floats mostly
 * multiples of 1/4 in [-2, 2] (a product of two is exact in f32, so the
 * store is the only rounding, and chains of them neither vanish nor
 * overflow fast), now and then NaN or an infinity (a NaN must win amax
 * and amin; inf * 0 makes one in prod), but never -0 (op.h does not say
 * which zero amax keeps); integers half small, half any bits (products
 * wrap); bools mostly true, so that "and" chains keep some. */
static void put_reduce_value(fbuf *b, int64_t i) {
    tpu_dtype dt = b->t.dtype;
    uint64_t r = t_rand();
    if (dt == BOOL)
        fb_set(b, i, (double)(r % 4 != 0));
    else if (t_is_float(dt))
        fb_set(b, i, r % 19 == 0   ? NAN
                     : r % 19 == 1 ? INFINITY
                     : r % 19 == 2 ? -INFINITY
                                   : (double)((int64_t)(r % 17) - 8) / 4);
    else
        put_int(t_at(&b->t, i), dt, r % 2 ? (int64_t)t_rand() : (int64_t)(r / 2 % 7) - 3);
}

/* Compares every element of the written buffer with the expected bytes
 * (`want`: one slot of es bytes per row-major element). */
typedef struct {
    const char *what;
    fbuf *out;
    unsigned char *want;
} bytes_ctx;

static void verify_bytes(void *p) {
    const bytes_ctx *k = p;
    const tpu_tensor *o = &k->out->t;
    int64_t n = t_numel(o);
    size_t es = t_size(o->dtype);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *got = t_at(o, i), *want = k->want + (size_t)i * es;
        bool same = memcmp(got, want, es) == 0 ||
                    (t_is_float(o->dtype) && isnan(t_read_f(got, o->dtype)) &&
                     isnan(t_read_f(want, o->dtype)));
        if (!same && g_bad++ < 4)
            fprintf(stderr, "    %s: element %lld = %.17g, want %.17g\n", k->what, (long long)i,
                    t_read_f(got, o->dtype), t_read_f(want, o->dtype));
    }
}

/* Row-major copy of b's element bytes. */
static unsigned char *snapshot(const fbuf *b) {
    int64_t n = t_numel(&b->t);
    size_t es = t_size(b->t.dtype);
    unsigned char *s = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; i++)
        memcpy(s + (size_t)i * es, t_at(&b->t, i), es);
    return s;
}

static int64_t rm_index(int ndim, const int64_t *sizes, const int64_t *c) {
    int64_t i = 0;
    for (int d = 0; d < ndim; d++)
        i = i * sizes[d] + c[d];
    return i;
}

/* ------------------------------------------------------------ scatter */

static const char *scatter_name(int fn) {
    switch (fn) {
    case TPU_INDEX_SCATTER: return "scatter";
    case TPU_INDEX_SCATTER_ADD: return "scatter_add";
    case TPU_INDEX_SCATTER_FILL: return "scatter_fill";
    case TPU_INDEX_SCATTER_PROD: return "scatter_prod";
    case TPU_INDEX_SCATTER_AMAX: return "scatter_amax";
    case TPU_INDEX_SCATTER_AMIN: return "scatter_amin";
    default: return "?";
    }
}

static void run_scatter(int fn, tpu_dtype dt, tpu_dtype idt, int ndim, const int64_t *os,
                        const int64_t *is, const int64_t *ss, int dim, int lo, int li, int ls) {
    const bool fill = fn == TPU_INDEX_SCATTER_FILL;
    const bool reduce = fn == TPU_INDEX_SCATTER_PROD || fn == TPU_INDEX_SCATTER_AMAX ||
                        fn == TPU_INDEX_SCATTER_AMIN;
    char what[260];
    int k = snprintf(what, sizeof what, "%s %s idx %s dim %d out ", scatter_name(fn), dt_str(dt),
                     dt_str(idt), dim);
    fmt_dims(what, sizeof what, &k, ndim, os);
    k += snprintf(what + k, sizeof what - (size_t)k, " index ");
    fmt_dims(what, sizeof what, &k, ndim, is);
    snprintf(what + k, sizeof what - (size_t)k, " layouts %s/%s/%s", k_layout_names[lo],
             k_layout_names[li], k_layout_names[ls]);
    fbuf out, idx, src;
    fb_make(&out, dt, ndim, os, lo);
    fb_make(&idx, idt, ndim, is, li);
    memset(&src, 0, sizeof src);
    if (!fill)
        fb_make(&src, dt, ndim, ss, ls);
    int64_t no = t_numel(&out.t), ni = t_numel(&idx.t), ns = fill ? 0 : t_numel(&src.t);
    for (int64_t i = 0; i < no; i++)
        reduce ? put_reduce_value(&out, i) : put_value(&out, i);
    for (int64_t i = 0; i < ns; i++)
        reduce ? put_reduce_value(&src, i) : put_value(&src, i);
    for (int64_t i = 0; i < ni; i++) /* few rows along dim: duplicates */
        fb_set(&idx, i, (double)(t_rand() % (uint64_t)os[dim]));
    /* The fill value, as out's dtype holds it. */
    tpu_scalar value = {.f = -2.375, .i = -3};
    if (dt == BOOL)
        value.i = 2; /* nonzero: true */
    unsigned char vbytes[8];
    if (t_is_float(dt))
        put_float(vbytes, dt, value.f);
    else
        put_int(vbytes, dt, value.i);
    /* Expected: out's bytes, then every index element in row-major order. */
    unsigned char *want = snapshot(&out);
    size_t es = t_size(dt);
    int64_t c[TPU_MAX_DIMS];
    for (int64_t i = 0; i < ni; i++) {
        coords_of(i, ndim, is, c);
        const unsigned char *from = fill ? vbytes : at_coords(&src.t, c);
        c[dim] = t_read_i(t_at(&idx.t, i), idt);
        scatter_step(fn, want + (size_t)rm_index(ndim, os, c) * es, from, dt);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = fn;
    op.n_in = 2;
    op.out = out.t;
    if (!fill)
        op.in[0] = src.t;
    op.in[1] = idx.t;
    op.p.index.dim = dim;
    op.p.index.value = value;
    bytes_ctx ctx = {what, &out, want};
    op_bufs bufs = {{&out}, 1, {&idx, &src}, fill ? 1 : 2};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_bytes, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    free(want);
    fb_free(&out);
    fb_free(&idx);
    if (!fill)
        fb_free(&src);
}

/* The loops below walk the scatters as one range of function codes. */
_Static_assert(TPU_INDEX_SCATTER_ADD == TPU_INDEX_SCATTER + 1 &&
                   TPU_INDEX_SCATTER_FILL == TPU_INDEX_SCATTER + 2 &&
                   TPU_INDEX_SCATTER_PROD == TPU_INDEX_SCATTER + 3 &&
                   TPU_INDEX_SCATTER_AMAX == TPU_INDEX_SCATTER + 4 &&
                   TPU_INDEX_SCATTER_AMIN == TPU_INDEX_SCATTER + 5,
               "the scatter functions are consecutive");

static void test_scatter(void) {
    /* out, index, source sizes: the index no larger than the source, and
     * than out but along dim (where it may be longer: duplicates). */
    static const struct {
        int ndim;
        int64_t out[3], idx[3], src[3];
    } shapes[] = {{1, {5}, {9}, {9}},
                  {1, {4}, {0}, {3}},
                  {2, {4, 5}, {3, 5}, {3, 6}},
                  {2, {3, 4}, {6, 2}, {7, 3}},
                  {3, {3, 4, 5}, {2, 4, 3}, {2, 5, 3}},
                  {3, {2, 3, 4}, {2, 0, 4}, {2, 1, 4}},
                  {2, {1, 1}, {1, 1}, {1, 1}}};
    int rot = 0;
    for (int fn = TPU_INDEX_SCATTER; fn <= TPU_INDEX_SCATTER_AMIN; fn++) /* every scatter */
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int dim = 0; dim < shapes[s].ndim; dim++)
                for (int d = 0; d < N_DTYPES; d++, rot++) {
                    int nd = shapes[s].ndim;
                    int64_t os[3], is[3], ss[3];
                    memcpy(os, shapes[s].out, sizeof os);
                    memcpy(is, shapes[s].idx, sizeof is);
                    memcpy(ss, shapes[s].src, sizeof ss);
                    /* Along dim the index may be longer than out; in the
                     * other dims it must fit in out: widen out there. */
                    for (int e = 0; e < nd; e++)
                        if (e != dim && os[e] < is[e])
                            os[e] = is[e];
                    run_scatter(fn, k_all_dtypes[d], rot % 2 ? I32 : I64, nd, os, is, ss, dim,
                                rot % L_COUNT, (rot / 2) % L_COUNT, (rot / 3) % L_COUNT);
                }
}

/* Known answers: duplicates in a line. out = (0, 0, 0), index (2, 0, 2, 2)
 * with source (1, 2, 3, 4): scatter gives (2, 0, 4), scatter_add (2, 0, 8);
 * bool scatter_add ors: (f, t, f, f) at those indices gives (f, 0->t, f). */
static void scatter_known(void) {
    int64_t idx[4] = {2, 0, 2, 2};
    for (int add = 0; add < 2; add++) {
        float out[3] = {0, 0, 0}, src[4] = {1, 2, 3, 4};
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_INDEX;
        op.fn = add ? TPU_INDEX_SCATTER_ADD : TPU_INDEX_SCATTER;
        op.n_in = 2;
        op.out = (tpu_tensor){.data = out, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F32,
                              .storage = out, .storage_nbytes = sizeof out};
        op.in[0] = (tpu_tensor){.data = src, .sizes = {4}, .strides = {1}, .ndim = 1,
                                .dtype = F32, .storage = src, .storage_nbytes = sizeof src};
        op.in[1] = (tpu_tensor){.data = idx, .sizes = {4}, .strides = {1}, .ndim = 1,
                                .dtype = I64, .storage = idx, .storage_nbytes = sizeof idx};
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(out[0] == 2 && out[1] == 0 && out[2] == (add ? 8 : 4));
        /* bool: or */
        bool bo[3] = {false, false, true}, bs[4] = {false, true, false, false};
        op.out.data = op.out.storage = bo;
        op.out.dtype = BOOL;
        op.out.storage_nbytes = sizeof bo;
        op.in[0].data = op.in[0].storage = bs;
        op.in[0].dtype = BOOL;
        op.in[0].storage_nbytes = sizeof bs;
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        /* set: bo[2] = bs[3] = false (the last), bo[0] = true;
         * or: bo[2] = true | f | f | f, bo[0] = true */
        CHECK(bo[0] == true && bo[1] == false && bo[2] == (add ? true : false));
    }
}

/* Known answers for the reducing scatters, one line each. */
static tpu_op scatter_1d(int fn, tpu_dtype dt, void *out, int64_t no, void *src, int64_t *idx,
                         int64_t n) {
    size_t es = t_size(dt);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = fn;
    op.n_in = 2;
    op.out = (tpu_tensor){.data = out, .sizes = {no}, .strides = {1}, .ndim = 1, .dtype = dt,
                          .storage = out, .storage_nbytes = no * (int64_t)es};
    op.in[0] = (tpu_tensor){.data = src, .sizes = {n}, .strides = {1}, .ndim = 1, .dtype = dt,
                            .storage = src, .storage_nbytes = n * (int64_t)es};
    op.in[1] = (tpu_tensor){.data = idx, .sizes = {n}, .strides = {1}, .ndim = 1, .dtype = I64,
                            .storage = idx, .storage_nbytes = n * 8};
    return op;
}

static void scatter_reduce_known(void) {
    int64_t idx[4] = {2, 0, 2, 2};
    /* prod: out (1, 2, 3), source (1, 2, 3, 4) at (2, 0, 2, 2):
     * (1 * 2, 2, 3 * 1 * 3 * 4) = (2, 2, 36). */
    float po[3] = {1, 2, 3}, ps[4] = {1, 2, 3, 4};
    tpu_op op = scatter_1d(TPU_INDEX_SCATTER_PROD, F32, po, 3, ps, idx, 4);
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(po[0] == 2 && po[1] == 2 && po[2] == 36);
    /* amax / amin: out (0, 5, 0), source (1, -2, NaN, 4): row 0 meets -2,
     * row 2 meets 1, then NaN, which stays NaN through the 4. */
    for (int fn = TPU_INDEX_SCATTER_AMAX; fn <= TPU_INDEX_SCATTER_AMIN; fn++) {
        double mo[3] = {0, 5, 0}, ms[4] = {1, -2, NAN, 4};
        op = scatter_1d(fn, F64, mo, 3, ms, idx, 4);
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(mo[0] == (fn == TPU_INDEX_SCATTER_AMAX ? 0 : -2) && mo[1] == 5 && isnan(mo[2]));
        /* A NaN already in out wins too, and infinities compare as numbers. */
        double no[3] = {NAN, -INFINITY, INFINITY}, ns[4] = {7, INFINITY, -INFINITY, 3};
        int64_t nidx[4] = {1, 0, 2, 1};
        op = scatter_1d(fn, F64, no, 3, ns, nidx, 4);
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(isnan(no[0]));
        CHECK(fn == TPU_INDEX_SCATTER_AMAX ? no[1] == 7 && no[2] == INFINITY
                                           : no[1] == -INFINITY && no[2] == -INFINITY);
    }
    /* int8 prod wraps: 16 * 16 = 256 -> 0, then * 3 = 0; 1 * 100 = 100;
     * 100 * -1 = -100, * 3 = -300 -> -44. */
    int8_t bo[3] = {16, 1, 100}, bs[5] = {16, 3, 100, -1, 3};
    int64_t bidx[5] = {0, 0, 1, 2, 2};
    op = scatter_1d(TPU_INDEX_SCATTER_PROD, I8, bo, 3, bs, bidx, 5);
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(bo[0] == 0 && bo[1] == 100 && bo[2] == -44);
    /* u8 compares unsigned: 200 beats 100 for amax, 100 beats 255 for amin. */
    uint8_t uo[2] = {100, 255}, us[2] = {200, 100};
    int64_t uidx[2] = {0, 1};
    op = scatter_1d(TPU_INDEX_SCATTER_AMAX, U8, uo, 2, us, uidx, 2);
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(uo[0] == 200 && uo[1] == 255);
    op.fn = TPU_INDEX_SCATTER_AMIN;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(uo[0] == 200 && uo[1] == 100);
    /* int64 compares in full: INT64_MAX - 1 and INT64_MAX are one double. */
    int64_t lo[1] = {INT64_MAX - 1}, ls[2] = {INT64_MAX, INT64_MAX - 1};
    int64_t lidx[2] = {0, 0};
    op = scatter_1d(TPU_INDEX_SCATTER_AMAX, I64, lo, 1, ls, lidx, 2);
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(lo[0] == INT64_MAX);
    op.fn = TPU_INDEX_SCATTER_AMIN;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(lo[0] == INT64_MAX - 1);
    /* bool: out (t, f, t), source (f, t, t, t) at (0, 1, 2, 2): prod and
     * amin are "and" -> (f, f, t); amax is "or" -> (t, t, t). */
    for (int fn = TPU_INDEX_SCATTER_PROD; fn <= TPU_INDEX_SCATTER_AMIN; fn++) {
        bool qo[3] = {true, false, true}, qs[4] = {false, true, true, true};
        int64_t qidx[4] = {0, 1, 2, 2};
        op = scatter_1d(fn, BOOL, qo, 3, qs, qidx, 4);
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        bool any = fn == TPU_INDEX_SCATTER_AMAX;
        CHECK(qo[0] == any && qo[1] == any && qo[2] == true);
    }
}

/* ----------------------------------------------------------- advanced */

/* x [xs] indexed at dims [s, s + n) by n index tensors of shape is (rank
 * q): out = xs[0..s) ++ is ++ xs[s+n..). */
typedef struct {
    int xnd, s, n, q;
    int64_t xs[5], is[2];
} adv_geom;

static const adv_geom k_adv[] = {
    {3, 0, 1, 1, {5, 4, 3}, {6}},
    {3, 1, 2, 2, {5, 4, 3}, {2, 3}},
    {4, 0, 3, 1, {3, 4, 5, 2}, {7}},
    {5, 0, 4, 2, {2, 3, 4, 5, 3}, {4, 2}},
    {2, 1, 1, 1, {4, 6}, {0}},
    {2, 0, 2, 0, {4, 6}, {0}},   /* x[i, j] with 0-d indices: a 0-d out */
    {3, 2, 1, 2, {2, 3, 5}, {3, 3}},
    {1, 0, 1, 1, {1}, {5}},
};
enum { N_ADV = sizeof k_adv / sizeof k_adv[0] };

typedef struct {
    int ond;
    int64_t os[TPU_MAX_DIMS];
    fbuf x, idx[4];
    tpu_tensor src_view, idx_view[4];
} adv_parts;

/* Builds x (layout lx), the index tensors (their own shape is, layout li)
 * and the views: the source / destination with stride 0 in the index
 * dims, and each index broadcast to out's sizes. */
static void adv_build(const adv_geom *g, tpu_dtype dt, tpu_dtype idt, int lx, int li,
                      adv_parts *a, bool negative) {
    memset(a, 0, sizeof *a);
    fb_make(&a->x, dt, g->xnd, g->xs, lx);
    int64_t nx = t_numel(&a->x.t);
    for (int64_t i = 0; i < nx; i++)
        put_value(&a->x, i);
    a->ond = g->s + g->q + (g->xnd - g->s - g->n);
    int o = 0;
    for (int d = 0; d < g->s; d++)
        a->os[o++] = g->xs[d];
    for (int d = 0; d < g->q; d++)
        a->os[o++] = g->is[d];
    for (int d = g->s + g->n; d < g->xnd; d++)
        a->os[o++] = g->xs[d];
    tpu_tensor *v = &a->src_view;
    *v = a->x.t;
    v->ndim = a->ond;
    memcpy(v->sizes, a->os, sizeof a->os);
    memset(v->strides, 0, sizeof v->strides);
    for (int d = 0; d < g->s; d++)
        v->strides[d] = a->x.t.strides[d];
    for (int d = g->s + g->n; d < g->xnd; d++)
        v->strides[d - g->n + g->q] = a->x.t.strides[d];
    for (int k = 0; k < g->n; k++) {
        fb_make(&a->idx[k], idt, g->q, g->is, (li + k) % L_COUNT);
        int64_t ni = t_numel(&a->idx[k].t), size = g->xs[g->s + k];
        for (int64_t i = 0; i < ni; i++) {
            int64_t val = (int64_t)(t_rand() % (uint64_t)size);
            if (negative && t_rand() % 2)
                val -= size; /* counted from the end */
            fb_set(&a->idx[k], i, (double)val);
        }
        tpu_tensor *w = &a->idx_view[k];
        *w = a->idx[k].t;
        w->ndim = a->ond;
        memcpy(w->sizes, a->os, sizeof a->os);
        memset(w->strides, 0, sizeof w->strides);
        for (int d = 0; d < g->q; d++)
            w->strides[g->s + d] = a->idx[k].t.strides[d];
    }
}

static void adv_free(const adv_geom *g, adv_parts *a) {
    fb_free(&a->x);
    for (int k = 0; k < g->n; k++)
        fb_free(&a->idx[k]);
}

/* x's element that out coordinates c name (indices wrapped). */
static unsigned char *adv_target(const adv_geom *g, const adv_parts *a, const int64_t *c) {
    int64_t xc[TPU_MAX_DIMS];
    for (int d = 0; d < g->s; d++)
        xc[d] = c[d];
    for (int k = 0; k < g->n; k++) {
        int64_t v = t_read_i(at_coords(&a->idx_view[k], c), a->idx_view[k].dtype);
        xc[g->s + k] = v < 0 ? v + g->xs[g->s + k] : v;
    }
    for (int d = g->s + g->n; d < g->xnd; d++)
        xc[d] = c[d - g->n + g->q];
    return at_coords(&a->x.t, xc);
}

static void adv_set_op(tpu_op *op, const adv_geom *g, const adv_parts *a) {
    op->code = TPU_OP_INDEX;
    op->n_in = g->n + 1;
    op->p.index.n_idx = g->n;
    for (int k = 0; k < g->n; k++) {
        op->in[k + 1] = a->idx_view[k];
        op->p.index.idx_sizes[k] = g->xs[g->s + k];
        op->p.index.idx_strides[k] = a->x.t.strides[g->s + k];
    }
}

static void describe_adv(char *what, size_t cap, const char *fn, int gi, tpu_dtype dt,
                         tpu_dtype idt, int lx, int li) {
    const adv_geom *g = &k_adv[gi];
    int k = snprintf(what, cap, "%s %s idx %s x ", fn, dt_str(dt), dt_str(idt));
    fmt_dims(what, cap, &k, g->xnd, g->xs);
    snprintf(what + k, cap - (size_t)k, " dims %d..%d index shape rank %d layouts %s/%s", g->s,
             g->s + g->n - 1, g->q, k_layout_names[lx], k_layout_names[li]);
}

static void run_advanced(int gi, tpu_dtype dt, tpu_dtype idt, int lx, int li, int lo) {
    const adv_geom *g = &k_adv[gi];
    char what[260];
    describe_adv(what, sizeof what, "advanced", gi, dt, idt, lx, li);
    adv_parts a;
    adv_build(g, dt, idt, lx, li, &a, true);
    fbuf out;
    fb_make(&out, dt, a.ond, a.os, lo);
    int64_t no = t_numel(&out.t);
    size_t es = t_size(dt);
    unsigned char *want = malloc((size_t)no * es + 1);
    int64_t c[TPU_MAX_DIMS];
    for (int64_t i = 0; i < no; i++) {
        coords_of(i, a.ond, a.os, c);
        memcpy(want + (size_t)i * es, adv_target(g, &a, c), es);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    adv_set_op(&op, g, &a);
    op.fn = TPU_INDEX_ADVANCED;
    op.out = out.t;
    op.in[0] = a.src_view;
    bytes_ctx ctx = {what, &out, want};
    op_bufs bufs = {{&out}, 1, {&a.x}, 1};
    for (int k = 0; k < g->n; k++)
        bufs.read[bufs.n_read++] = &a.idx[k];
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_bytes, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    free(want);
    fb_free(&out);
    adv_free(g, &a);
}

static void run_put(int gi, tpu_dtype dt, tpu_dtype idt, bool acc, int lx, int li, int lv) {
    const adv_geom *g = &k_adv[gi];
    char what[260];
    describe_adv(what, sizeof what, acc ? "index_put accumulate" : "index_put", gi, dt, idt, lx,
                 li);
    adv_parts a;
    adv_build(g, dt, idt, lx, li, &a, true);
    fbuf vals;
    fb_make(&vals, dt, a.ond, a.os, lv);
    int64_t nv = t_numel(&vals.t);
    for (int64_t i = 0; i < nv; i++)
        put_value(&vals, i);
    /* Expected x: its bytes, then every value in out's row-major order. */
    unsigned char *want = snapshot(&a.x);
    size_t es = t_size(dt);
    int64_t c[TPU_MAX_DIMS];
    for (int64_t i = 0; i < nv; i++) {
        coords_of(i, a.ond, a.os, c);
        /* x's coordinates that c names, as a row-major index of x. */
        int64_t xc[TPU_MAX_DIMS];
        for (int d = 0; d < g->s; d++)
            xc[d] = c[d];
        for (int k = 0; k < g->n; k++) {
            int64_t v = t_read_i(at_coords(&a.idx_view[k], c), idt);
            xc[g->s + k] = v < 0 ? v + g->xs[g->s + k] : v;
        }
        for (int d = g->s + g->n; d < g->xnd; d++)
            xc[d] = c[d - g->n + g->q];
        int64_t xi = rm_index(g->xnd, g->xs, xc);
        apply(want + (size_t)xi * es, t_at(&vals.t, i), dt, acc);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    adv_set_op(&op, g, &a);
    op.fn = TPU_INDEX_ADVANCED_PUT;
    op.out = a.src_view; /* x, stride 0 in the indexed dims */
    op.in[0] = vals.t;
    op.p.index.accumulate = acc;
    bytes_ctx ctx = {what, &a.x, want};
    op_bufs bufs = {{&a.x}, 1, {&vals}, 1};
    for (int k = 0; k < g->n; k++)
        bufs.read[bufs.n_read++] = &a.idx[k];
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_bytes, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    free(want);
    fb_free(&vals);
    adv_free(g, &a);
}

static void test_advanced(void) {
    int rot = 0;
    for (int gi = 0; gi < N_ADV; gi++)
        for (int d = 0; d < N_DTYPES; d++, rot++) {
            tpu_dtype dt = k_all_dtypes[d], idt = rot % 2 ? I32 : I64;
            run_advanced(gi, dt, idt, rot % L_COUNT, (rot / 2) % L_COUNT, (rot / 3) % L_COUNT);
            run_put(gi, dt, idt, false, (rot + 1) % L_COUNT, rot % L_COUNT, (rot / 2) % L_COUNT);
            if (dt != BOOL)
                run_put(gi, dt, idt, true, (rot + 2) % L_COUNT, (rot / 3) % L_COUNT,
                        rot % L_COUNT);
        }
}

/* Index values out of range: size and -size - 1 (and far beyond), in each
 * index tensor position, for both functions. */
static void advanced_errors(void) {
    static const int64_t bads[] = {4, -5, 100, INT64_MIN, INT64_MAX};
    float x[12] = {0}, out[3], v[3] = {1, 2, 3};
    for (size_t b = 0; b < sizeof bads / sizeof bads[0]; b++)
        for (int put = 0; put < 2; put++)
            for (int which = 0; which < 2; which++) {
                /* x [4, 3] as x[i, j], i and j [3]; one entry of i or j bad
                 * (j's size is 3: use bads shifted for it). */
                int64_t i[3] = {0, 3, -4}, j[3] = {2, -3, 1};
                int64_t bad = bads[b], size = which ? 3 : 4;
                if (which && bad == 4)
                    bad = 3;
                if (which && bad == -5)
                    bad = -4;
                (which ? j : i)[1] = bad;
                tpu_op op;
                memset(&op, 0, sizeof op);
                op.code = TPU_OP_INDEX;
                op.fn = put ? TPU_INDEX_ADVANCED_PUT : TPU_INDEX_ADVANCED;
                op.n_in = 3;
                tpu_tensor xv = {.data = x, .sizes = {3}, .strides = {0}, .ndim = 1, .dtype = F32,
                                 .storage = x, .storage_nbytes = sizeof x};
                tpu_tensor o = {.data = put ? (void *)v : (void *)out, .sizes = {3},
                                .strides = {1}, .ndim = 1, .dtype = F32,
                                .storage = put ? (void *)v : (void *)out, .storage_nbytes = 12};
                op.out = put ? xv : o;
                op.in[0] = put ? o : xv;
                op.in[1] = (tpu_tensor){.data = i, .sizes = {3}, .strides = {1}, .ndim = 1,
                                        .dtype = I64, .storage = i, .storage_nbytes = sizeof i};
                op.in[2] = (tpu_tensor){.data = j, .sizes = {3}, .strides = {1}, .ndim = 1,
                                        .dtype = I64, .storage = j, .storage_nbytes = sizeof j};
                op.p.index.n_idx = 2;
                op.p.index.idx_sizes[0] = 4;
                op.p.index.idx_sizes[1] = 3;
                op.p.index.idx_strides[0] = 3;
                op.p.index.idx_strides[1] = 1;
                char value[48], sz[48], tensor[32];
                snprintf(value, sizeof value, "index %" PRId64 " is out of bounds", bad);
                snprintf(sz, sizeof sz, "for size %" PRId64, size);
                snprintf(tensor, sizeof tensor, "(index tensor %d)", which);
                const char *parts[] = {value, sz, tensor, NULL};
                expect_run_error(&op, TPU_ERR_INDEX, parts, put ? "index_put" : "advanced");
            }
}

/* ------------------------------------------------------------ nonzero */

typedef struct {
    const char *what;
    fbuf *in, *out;
} nz_ctx;

static bool is_nonzero(const unsigned char *p, tpu_dtype dt) {
    if (t_is_float(dt)) {
        double v = t_read_f(p, dt);
        return v != 0 || isnan(v);
    }
    return t_read_i(p, dt) != 0;
}

static void verify_nonzero(void *p) {
    const nz_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *o = &k->out->t;
    int64_t n = t_numel(in), row = 0, c[TPU_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        if (!is_nonzero(t_at(in, i), in->dtype))
            continue;
        coords_of(i, in->ndim, in->sizes, c);
        for (int d = 0; d < in->ndim; d++) {
            int64_t got = t_read_i(t_at2(o, row, d), I64);
            if (got != c[d] && g_bad++ < 4)
                fprintf(stderr, "    %s: row %lld dim %d = %lld, want %lld\n", k->what,
                        (long long)row, d, (long long)got, (long long)c[d]);
        }
        row++;
    }
    CHECK(row == o->sizes[0]);
}

static void run_nonzero(tpu_dtype dt, int ndim, const int64_t *sizes, int li, int lo) {
    char what[200];
    int k = snprintf(what, sizeof what, "nonzero %s ", dt_str(dt));
    fmt_dims(what, sizeof what, &k, ndim, sizes);
    snprintf(what + k, sizeof what - (size_t)k, " layouts %s/%s", k_layout_names[li],
             k_layout_names[lo]);
    fbuf in, out;
    fb_make(&in, dt, ndim, sizes, li);
    int64_t n = t_numel(&in.t), count = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = t_rand();
        /* Rows of 40 or more are sparse (runs of zero words for the fast
         * kernel to skip), the rest half zeros. */
        const bool zero = ndim > 0 && sizes[ndim - 1] >= 40 ? r % 13 != 0 : r % 2 != 0;
        double v = zero ? 0 : r % 5 == 0 ? -0.0 : r % 7 == 0 && t_is_float(dt) ? NAN : 1 + r % 3;
        fb_set(&in, i, v);
        count += is_nonzero(t_at(&in.t, i), dt);
    }
    fb_make2(&out, I64, count, ndim, lo);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_NONZERO;
    op.n_in = 1;
    op.in[0] = in.t;
    op.out = out.t;
    nz_ctx ctx = {what, &in, &out};
    op_bufs bufs = {{&out}, 1, {&in}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_nonzero, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    /* One row too few or too many: an error, on share 0. */
    for (int delta = -1; delta <= 1; delta += 2) {
        if (count + delta < 0)
            continue;
        fbuf wrong;
        fb_make2(&wrong, I64, count + delta, ndim, L_CONTIG);
        op.out = wrong.t;
        const char *parts[] = {delta < 0 ? "more nonzero elements than the" : "counted", NULL};
        expect_run_error(&op, TPU_ERR_INTERNAL, parts, what);
        fb_free(&wrong);
    }
    fb_free(&in);
    fb_free(&out);
}

static void test_nonzero(void) {
    static const struct {
        int ndim;
        int64_t sizes[3];
    } shapes[] = {{0, {0}}, {1, {13}}, {2, {4, 6}}, {3, {3, 4, 5}}, {3, {2, 0, 3}}, {1, {0}},
                  {2, {50, 7}}, {2, {5, 41}}, {3, {2, 3, 64}}};
    int rot = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < N_DTYPES; d++, rot++)
            run_nonzero(k_all_dtypes[d], shapes[s].ndim, shapes[s].sizes, rot % L_COUNT,
                        (rot / 2) % L_COUNT);
}

/* -------------------------------------------------------------- histc */

typedef struct {
    const char *what;
    fbuf *in, *out;
    double lo, hi;
} hist_ctx;

static void verify_histc(void *p) {
    const hist_ctx *k = p;
    const tpu_tensor *in = &k->in->t, *o = &k->out->t;
    const int64_t bins = o->sizes[0], n = t_numel(in);
    const bool narrow = in->dtype == F32 || in->dtype == F16 || in->dtype == BF16;
    int64_t *counts = calloc((size_t)bins + 1, sizeof *counts);
    for (int64_t i = 0; i < n; i++) {
        double x = t_is_float(in->dtype) ? t_read_f(t_at(in, i), in->dtype)
                                         : (double)t_read_i(t_at(in, i), in->dtype);
        if (isnan(x) || x < k->lo || x > k->hi || bins == 0)
            continue;
        int64_t b;
        if (narrow) { /* each step rounded to f32 */
            float d = (float)x - (float)k->lo;
            float m = d * (float)bins;
            float w = (float)k->hi - (float)k->lo;
            b = (int64_t)(m / w);
        } else {
            b = (int64_t)((x - k->lo) * (double)bins / (k->hi - k->lo));
        }
        if (b == bins) /* the top edge */
            b = bins - 1;
        if (b >= 0 && b < bins)
            counts[b]++;
        else if (g_bad++ < 4)
            fprintf(stderr, "    %s: %.17g falls in no bin (%lld)\n", k->what, x, (long long)b);
    }
    for (int64_t b = 0; b < bins; b++) {
        double got = t_read_f(t_at(o, b), o->dtype);
        if (got != (double)counts[b] && g_bad++ < 4)
            fprintf(stderr, "    %s: bin %lld = %.17g, want %lld\n", k->what, (long long)b, got,
                    (long long)counts[b]);
    }
    free(counts);
}

static void run_histc(tpu_dtype idt, tpu_dtype odt, int64_t n, int64_t bins, double lo,
                      double hi, int li, int lo_layout) {
    char what[200];
    snprintf(what, sizeof what, "histc %s -> %s n %lld bins %lld [%g, %g] layouts %s/%s",
             dt_str(idt), dt_str(odt), (long long)n, (long long)bins, lo, hi,
             k_layout_names[li], k_layout_names[lo_layout]);
    fbuf in, out;
    if (n % 5 == 0 && n > 0)
        fb_make2(&in, idt, n / 5, 5, li);
    else
        fb_make1(&in, idt, n, li);
    fb_make1(&out, odt, bins, lo_layout);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = t_rand();
        double w = hi - lo, v;
        switch (r % 8) {
        case 0: v = lo; break;
        case 1: v = hi; break;
        case 2: /* the bin edges */
            v = bins ? lo + w * (double)(r % (uint64_t)(bins + 1)) / (double)bins : lo;
            break;
        case 3: v = r % 2 ? lo - 1 - t_unit() * w : hi + 1 + t_unit() * w; break;
        case 4: v = t_is_float(idt) && r % 3 == 0 ? NAN : nextafter(hi, lo); break;
        default: v = lo + w * t_unit(); break;
        }
        if (!t_is_float(idt))
            v = floor(v);
        if (idt == U8 && v < 0)
            v = 0;
        fb_set(&in, i, v);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_HISTC;
    op.n_in = 1;
    op.in[0] = in.t;
    op.out = out.t;
    op.p.hist.lo = lo;
    op.p.hist.hi = hi;
    hist_ctx ctx = {what, &in, &out, lo, hi};
    op_bufs bufs = {{&out}, 1, {&in}, 1};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_histc, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&in);
    fb_free(&out);
}

static void test_histc(void) {
    static const tpu_dtype pairs[][2] = {{F32, F32}, {F64, F64}, {F16, F32}, {BF16, I64},
                                         {I32, F32}, {U8, I64},  {I64, F64}, {F32, I32},
                                         {I8, F16},  {I16, I16}};
    static const struct {
        double lo, hi;
    } ranges[] = {{0, 1}, {-2.5, 3.7}, {0.1, 0.7}, {-100, 100}, {3, 4}, {0, 255}};
    static const int64_t bins[] = {1, 3, 7, 10, 100, 0};
    static const int64_t ns[] = {0, 1, 100, 1003};
    int rot = 0;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
            for (size_t b = 0; b < sizeof bins / sizeof bins[0]; b++, rot++)
                run_histc(pairs[p][0], pairs[p][1], ns[rot % 4], bins[b], ranges[r].lo,
                          ranges[r].hi, rot % L_COUNT, (rot / 4) % 3 == 1 ? L_GAP : L_CONTIG);
}

/* Known answers: 0.1..0.7 in 3 bins of f32 values and f64 values. */
static void histc_known(void) {
    float x[7] = {0.1f, 0.3f, 0.5f, 0.7f, 0.69999f, NAN, 0.75f};
    float out[3];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_HISTC;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {7}, .strides = {1}, .ndim = 1, .dtype = F32,
                            .storage = x, .storage_nbytes = sizeof x};
    op.out = (tpu_tensor){.data = out, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = out, .storage_nbytes = sizeof out};
    op.p.hist.lo = 0.1;
    op.p.hist.hi = 0.7;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    /* 0.1f > 0.1 and 0.7f < 0.7 (as f64): both inside; 0.1f in bin 0,
     * 0.7f (the top edge in f32) and 0.69999f in the last; 0.3f and 0.5f
     * by f32 math; NaN and 0.75 not counted. */
    CHECK(out[0] + out[1] + out[2] == 5);
    CHECK(out[0] >= 1 && out[2] >= 2);
    /* As f64 values: 0.1 and 0.7 exactly the edges, 0.7 in the last bin. */
    double xd[4] = {0.1, 0.7, 0.7000000001, 0.0999999999};
    double outd[3];
    op.in[0] = (tpu_tensor){.data = xd, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = F64,
                            .storage = xd, .storage_nbytes = sizeof xd};
    op.out = (tpu_tensor){.data = outd, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F64,
                          .storage = outd, .storage_nbytes = sizeof outd};
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(outd[0] == 1 && outd[1] == 0 && outd[2] == 1);
}

/* ---------------------------------------------------------- refusals */

static void scatter_refusals(void) {
    float buf[64] = {0}, src[32] = {0};
    int64_t ib[32] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_SCATTER;
    op.n_in = 2;
    op.out = (tpu_tensor){.data = buf, .sizes = {4, 5}, .strides = {5, 1}, .ndim = 2, .dtype = F32,
                          .storage = buf, .storage_nbytes = sizeof buf};
    op.in[0] = (tpu_tensor){.data = src, .sizes = {3, 6}, .strides = {6, 1}, .ndim = 2,
                            .dtype = F32, .storage = src, .storage_nbytes = sizeof src};
    op.in[1] = (tpu_tensor){.data = ib, .sizes = {3, 5}, .strides = {5, 1}, .ndim = 2,
                            .dtype = I64, .storage = ib, .storage_nbytes = sizeof ib};
    tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    op.fn = TPU_INDEX_SCATTER_ADD;
    CHECK_OK(tpu_op_check(&op));
    op.out.dtype = op.in[0].dtype = BOOL; /* scatter_add of bool: or */
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.in[1].dtype = I16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "index dtype int16 is not supported");
    op = ok;
    op.in[1].dtype = U8;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "(int64 or int32)");
    op = ok;
    op.fn = TPU_INDEX_SCATTER_FILL;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "in[0] must be absent");
    op.in[0] = (tpu_tensor){0};
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.in[0] = (tpu_tensor){0}; /* only scatter_fill may leave the source absent */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "in[0]");
    op = ok;
    op.p.index.dim = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "dim 2 (ranks must match");
    op = ok;
    op.in[1].ndim = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "index rank 1");
    op = ok;
    op.in[1].sizes[0] = 4; /* larger than the source's 3 */
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "no larger than the source");
    op = ok;
    op.in[1].sizes[1] = 6; /* larger than out's 5 in a dim but dim */
    op.in[0].sizes[1] = 6;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "index has sizes [3, 6], out [4, 5]");
    op = ok;
    op.in[1].sizes[0] = 3;
    op.out.sizes[0] = 2; /* along dim the index may be longer than out */
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.in[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "source dtype int32 differs from out's float32");
    op = ok;
    op.in[0].data = buf + 2;
    op.in[0].storage = buf;
    op.in[0].storage_nbytes = sizeof buf;
    op.in[0].sizes[0] = 1;
    op.in[1].sizes[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op = ok;
    op.n_in = 3;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 3 (expected 2)");
    /* The reducing scatters share scatter_add's rules: any dtype, bool
     * too; a source of out's dtype that must be present; int index. */
    for (int fn = TPU_INDEX_SCATTER_PROD; fn <= TPU_INDEX_SCATTER_AMIN; fn++) {
        op = ok;
        op.fn = fn;
        CHECK_OK(tpu_op_check(&op));
        op.out.dtype = op.in[0].dtype = BOOL;
        CHECK_OK(tpu_op_check(&op));
        op.out.dtype = op.in[0].dtype = I8;
        CHECK_OK(tpu_op_check(&op));
        op = ok;
        op.fn = fn;
        op.in[0] = (tpu_tensor){0}; /* only scatter_fill may leave it absent */
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "in[0]");
        op = ok;
        op.fn = fn;
        op.in[0].dtype = I32;
        CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE,
                      "source dtype int32 differs from out's float32");
        op = ok;
        op.fn = fn;
        op.in[1].dtype = I16;
        CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "index dtype int16 is not supported");
        op = ok;
        op.fn = fn;
        op.in[1].sizes[0] = 4;
        CHECK_REFUSED(&op, TPU_ERR_SHAPE, "no larger than the source");
        op = ok;
        op.fn = fn;
        op.p.index.dim = -1;
        CHECK_REFUSED(&op, TPU_ERR_SHAPE, "dim -1 (ranks must match");
        op = ok;
        op.fn = fn;
        op.n_in = 1;
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 1 (expected 2)");
    }
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_INDEX, TPU_INDEX_SCATTER_PROD), "scatter_prod") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_INDEX, TPU_INDEX_SCATTER_AMAX), "scatter_amax") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_INDEX, TPU_INDEX_SCATTER_AMIN), "scatter_amin") == 0);

    /* Scatter index errors: kernel-side, naming the value. */
    static const int64_t bads[] = {4, -1, INT64_MIN};
    for (size_t b = 0; b < sizeof bads / sizeof bads[0]; b++)
        for (int fn = TPU_INDEX_SCATTER; fn <= TPU_INDEX_SCATTER_AMIN; fn++) {
            op = ok;
            op.fn = fn;
            if (fn == TPU_INDEX_SCATTER_FILL)
                op.in[0] = (tpu_tensor){0};
            memset(ib, 0, sizeof ib);
            ib[7] = bads[b];
            char value[48];
            snprintf(value, sizeof value, "index %" PRId64 " is out of bounds", bads[b]);
            const char *parts[] = {value, "dimension 0 with size 4", NULL};
            expect_run_error(&op, TPU_ERR_INDEX, parts, "scatter index error");
        }
    memset(ib, 0, sizeof ib);

    /* ADVANCED: 1..4 indices, n_in one more, index dtypes, sizes. */
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_ADVANCED;
    op.n_in = 2;
    op.out = (tpu_tensor){.data = buf, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = buf, .storage_nbytes = sizeof buf};
    op.in[0] = (tpu_tensor){.data = src, .sizes = {3}, .strides = {0}, .ndim = 1, .dtype = F32,
                            .storage = src, .storage_nbytes = sizeof src};
    op.in[1] = (tpu_tensor){.data = ib, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = I64,
                            .storage = ib, .storage_nbytes = sizeof ib};
    op.p.index.n_idx = 1;
    op.p.index.idx_sizes[0] = 32;
    op.p.index.idx_strides[0] = 1;
    tpu_op aok = op;
    CHECK_OK(tpu_op_check(&op));
    op.p.index.n_idx = 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "2 index tensors with n_in 2");
    op.p.index.n_idx = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "0 index tensors");
    op = aok;
    op.n_in = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 1 (expected 2 to 5)");
    op = aok;
    op.in[1].dtype = I16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "index 0 has dtype int16 (int64 or int32)");
    op = aok;
    op.in[1].sizes[0] = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "in[1] has sizes [2] but out has [3]");
    op = aok;
    op.in[0].dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out dtype float32 differs from in[0]'s float64");
    op = aok;
    op.p.index.idx_sizes[0] = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "indexed dim 0 has size 0");
    op = aok;
    op.p.index.idx_sizes[0] = 33; /* src has 32 floats */
    CHECK_REFUSED(&op, TPU_ERR_OUT_OF_BOUNDS, "in[0]");
    op = aok;
    op.p.index.idx_strides[0] = -1; /* would read before src */
    CHECK_REFUSED(&op, TPU_ERR_OUT_OF_BOUNDS, "in[0]");
    op = aok;
    op.out.strides[0] = 0; /* ADVANCED's out may not overlap itself */
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "stride 0 in dim 0");
    /* ADVANCED_PUT: out has stride 0 by design; no accumulate into bool. */
    op = aok;
    op.fn = TPU_INDEX_ADVANCED_PUT;
    op.out = aok.in[0];
    op.in[0] = aok.out;
    CHECK_OK(tpu_op_check(&op));
    op.p.index.accumulate = true;
    CHECK_OK(tpu_op_check(&op));
    op.out.dtype = op.in[0].dtype = BOOL;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "accumulating into bool is not supported");
    op.p.index.accumulate = false;
    CHECK_OK(tpu_op_check(&op));

    /* NONZERO: int64 out [count, rank]; n_in 1. */
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_NONZERO;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = src, .sizes = {3, 4}, .strides = {4, 1}, .ndim = 2,
                            .dtype = F32, .storage = src, .storage_nbytes = sizeof src};
    op.out = (tpu_tensor){.data = ib, .sizes = {5, 2}, .strides = {2, 1}, .ndim = 2, .dtype = I64,
                          .storage = ib, .storage_nbytes = sizeof ib};
    tpu_op nok = op;
    CHECK_OK(tpu_op_check(&op));
    op.out.sizes[1] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out must be int64 [count, 2], got int64 [5, 3]");
    op = nok;
    op.out.dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out must be int64 [count, 2]");
    op = nok;
    op.n_in = 2;
    op.in[1] = op.in[0];
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 2 (expected 1)");

    /* HISTC: 1-d out, no bool, lo < hi finite. */
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_HISTC;
    op.n_in = 1;
    op.in[0] = nok.in[0];
    op.out = (tpu_tensor){.data = buf, .sizes = {10}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = buf, .storage_nbytes = sizeof buf};
    op.p.hist.lo = 0;
    op.p.hist.hi = 1;
    tpu_op hok = op;
    CHECK_OK(tpu_op_check(&op));
    op.out.dtype = BOOL;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "neither side bool");
    op = hok;
    op.in[0].dtype = BOOL;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "neither side bool");
    op = hok;
    op.out.ndim = 2;
    op.out.sizes[1] = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out must be 1-d");
    static const double bad_ranges[][2] = {{1, 1}, {2, 1}, {NAN, 1}, {0, INFINITY}, {-INFINITY, 0}};
    for (size_t r = 0; r < sizeof bad_ranges / sizeof bad_ranges[0]; r++) {
        op = hok;
        op.p.hist.lo = bad_ranges[r][0];
        op.p.hist.hi = bad_ranges[r][1];
        CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "must be finite with lo < hi");
    }
    op = hok;
    op.out.dtype = I64;
    op.in[0].dtype = U8;
    CHECK_OK(tpu_op_check(&op));
}

int main(void) {
    scatter_refusals();
    scatter_known();
    scatter_reduce_known();
    histc_known();
    advanced_errors();
    test_scatter();
    test_advanced();
    test_nonzero();
    test_histc();
    printf("scatter, advanced, nonzero, histc: %d cases x %d modes x %d thread counts\n",
           g_cases, (int)N_MODES, (int)N_NTHS);
    return check_report();
}
