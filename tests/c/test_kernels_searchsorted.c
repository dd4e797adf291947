/* SORT SEARCHSORTED against a linear count: for each value, how many
 * boundaries of its row lie below it (!(b >= v)), or at or below it with
 * right (!(b > v)). Boundaries are sorted and NaN-free (PyTorch leaves
 * NaN boundaries to its search's order); values include NaN and +-inf,
 * which sort above (NaN) or at the ends of every row. Every dtype but bool,
 * 1-d boundaries broadcast over rows (stride 0) and per-row boundaries,
 * every layout, int64 and int32 outs, all modes and thread counts. */
#include "family_test.h"

typedef struct {
    fbuf *bd, *v, *o;
    bool right;
} ctx;

/* The independent answer: a linear count over the row. */
static void verify(void *p) {
    ctx *c = p;
    const int64_t rows = c->v->t.ndim == 2 ? c->v->t.sizes[0] : 1;
    const int64_t n = c->v->t.sizes[c->v->t.ndim - 1], m = c->bd->t.sizes[c->bd->t.ndim - 1];
    const bool shared = c->bd->t.ndim == 2 && c->bd->t.strides[0] == 0;
    const bool fl = c->v->t.dtype <= TPU_DTYPE_BF16;
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double x = fb_get(c->v, r * n + j);
            int64_t xi = fl ? 0 : fb_get_i(c->v, r * n + j), count = 0;
            for (int64_t k = 0; k < m; k++) {
                int64_t bk = (shared ? 0 : r) * m + k;
                if (fl) {
                    double b = fb_get(c->bd, bk);
                    count += c->right ? !(b > x) : !(b >= x);
                } else {
                    int64_t b = fb_get_i(c->bd, bk);
                    count += c->right ? b <= xi : b < xi;
                }
            }
            bad += fb_get_i(c->o, r * n + j) != count;
        }
    CHECK(bad == 0);
}

static void one_case(tpu_dtype dt, tpu_dtype odt, int64_t rows, int64_t m, int64_t n, bool shared, bool right,
                     int layout) {
    fbuf bd, v, o;
    int64_t bsz[2] = {rows, m}, vsz[2] = {rows, n};
    fb_make(&bd, dt, 2, bsz, shared ? L_CONTIG : layout);
    fb_make(&v, dt, 2, vsz, layout);
    fb_make(&o, odt, 2, vsz, L_CONTIG);
    if (shared) { /* one row of boundaries read for every row of values */
        bd.t.strides[0] = 0;
    }
    const bool fl = dt <= TPU_DTYPE_BF16;
    const int64_t lo = dt == TPU_DTYPE_U8 ? 0 : -20, span = 40;
    for (int64_t r = 0; r < (shared && rows > 0 ? 1 : rows); r++) {
        double cur = (double)lo;
        for (int64_t k = 0; k < m; k++) { /* ascending, with repeats */
            cur += (double)(t_rand() % 3);
            if (fl && t_rand() % 4 == 0)
                cur += 0.5;
            fb_set(&bd, r * m + k, cur);
        }
    }
    for (int64_t i = 0; i < rows * n; i++) {
        double x = (double)(lo + (int64_t)(t_rand() % (uint64_t)span));
        if (fl) {
            switch (t_rand() % 12) {
            case 0: x = NAN; break;
            case 1: x = INFINITY; break;
            case 2: x = -INFINITY; break;
            case 3: x += 0.5; break;
            default: break;
            }
        }
        fb_set(&v, i, x);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SORT;
    op.fn = TPU_SORT_SEARCHSORTED;
    op.n_in = 2;
    op.in[0] = bd.t;
    op.in[1] = v.t;
    op.out = o.t;
    op.p.sort.dim = 1;
    op.p.sort.right = right;
    ctx c = {&bd, &v, &o, right};
    op_bufs bufs = {{&o}, 1, {&bd, &v}, 2};
    char what[160];
    snprintf(what, sizeof what, "searchsorted %s->%s rows=%lld m=%lld n=%lld %s%s %s", dt_str(dt), dt_str(odt),
             (long long)rows, (long long)m, (long long)n, shared ? "shared " : "", right ? "right" : "left",
             k_layout_names[layout]);
    run_everywhere(&op, &bufs, verify, &c, what);
    fb_free(&bd);
    fb_free(&v);
    fb_free(&o);
}

static void test_random(void) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {4, 1, 9}, {2, 33, 17}, {5, 0, 3}, {0, 4, 4}};
    for (int dt = 0; dt < TPU_DTYPE_COUNT; dt++) {
        if (dt == TPU_DTYPE_BOOL)
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int shared = 0; shared < 2; shared++)
                for (int right = 0; right < 2; right++)
                    one_case((tpu_dtype)dt, right ? TPU_DTYPE_I32 : TPU_DTYPE_I64, shapes[s][0], shapes[s][1],
                             shapes[s][2], shared, right, (int)((s + (size_t)shared) % L_COUNT));
    }
}

/* Refusals: mixed dtypes, a bool, a float out, ranks or leading sizes that
 * differ, a dim other than the last, and an aux. */
static void test_refusals(void) {
    fbuf bd, v, o, f;
    fb_make2(&bd, TPU_DTYPE_F32, 2, 4, L_CONTIG);
    fb_make2(&v, TPU_DTYPE_F32, 2, 3, L_CONTIG);
    fb_make2(&o, TPU_DTYPE_I64, 2, 3, L_CONTIG);
    fb_make2(&f, TPU_DTYPE_F64, 2, 3, L_CONTIG);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SORT;
    op.fn = TPU_SORT_SEARCHSORTED;
    op.n_in = 2;
    op.in[0] = bd.t;
    op.in[1] = v.t;
    op.out = o.t;
    op.p.sort.dim = 1;
    CHECK_OK(tpu_op_check(&op));
    tpu_op bad = op;
    bad.in[1] = f.t;
    CHECK_REFUSED(&bad, TPU_ERR_UNSUPPORTED_DTYPE, "share a dtype");
    bad = op;
    bad.out = f.t;
    CHECK_REFUSED(&bad, TPU_ERR_UNSUPPORTED_DTYPE, "int64 or int32");
    bad = op;
    bad.p.sort.dim = 0;
    CHECK_REFUSED(&bad, TPU_ERR_SHAPE, "dim the last");
    bad = op;
    bad.in[0].sizes[0] = 1;
    CHECK_REFUSED(&bad, TPU_ERR_SHAPE, "leading sizes equal");
    bad = op;
    bad.n_in = 1;
    CHECK_STATUS(tpu_op_check(&bad), TPU_ERR_INVALID_ARG);
    bad = op;
    bad.n_aux = 1;
    bad.aux[0] = o.t;
    CHECK_STATUS(tpu_op_check(&bad), TPU_ERR_INVALID_ARG);
    fb_free(&bd);
    fb_free(&v);
    fb_free(&o);
    fb_free(&f);
}

int main(void) {
    test_random();
    test_refusals();
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_SORT, TPU_SORT_SEARCHSORTED), "searchsorted") == 0);
    return check_report();
}
