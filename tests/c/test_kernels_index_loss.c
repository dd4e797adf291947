/* INDEX and LOSS kernel tests against loops written here.
 *
 * INDEX SELECT and GATHER move elements unchanged, so their results are
 * compared byte for byte with the element the definition names:
 *   select: out[.., i, ..] = src[.., index[i], ..]   (along dim)
 *   gather: out[p] = src[p with p[dim] = index[p]]
 * for every dtype (bool too), int64 and int32 indices with duplicates,
 * every dim of 1-d to 3-d sources, and transposed, gapped and reversed
 * views of every operand. EMBEDDING_BACKWARD is compared with a long
 * double sum of the gradient rows each weight row receives (skipping
 * padding_idx; divided by the row's count with scale_by_freq), within one
 * rounding of out's dtype per added row; rows nobody names must be
 * exactly 0. scale_by_freq counts rows in scratch (W int64): refused
 * without it.
 *
 * LOSS NLL_FORWARD and NLL_BACKWARD against the definitions in op.h, for
 * every reduction, with and without class weights, int64, int32 and
 * uint8 targets (uint8 read unsigned: 255 is a class, not -1),
 * ignore_index inside and outside [0, C), a 1-d input with a 0-d target,
 * and the all-ignored mean (0 / 0: NaN).
 *
 * Index values outside [0, size), negative ones too, must make tpu_op_run
 * return TPU_ERR_INDEX with a message naming the value. Every valid
 * record runs in every kernel mode (reference, fast at each instruction-set
 * level) with nth = 1, 2, 3, 7, each run giving the same bytes. Also: tpu_op_check's refusals. */
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

/* Fills every element of b with distinct-looking bytes of its dtype (a
 * bool gets 0 or 1, floats get finite values). */
static void fill_distinct(fbuf *b) {
    int64_t n = t_numel(&b->t);
    for (int64_t i = 0; i < n; i++) {
        if (b->t.dtype == BOOL)
            fb_set(b, i, (double)(t_rand() % 2));
        else if (t_is_float(b->t.dtype))
            fb_set(b, i, (double)(int64_t)(t_rand() % 2001) / 8 - 125);
        else
            put_int(t_at(&b->t, i), b->t.dtype, (int64_t)t_rand());
    }
}

/* Coordinates of row-major index i of sizes (ndim dims). */
static void coords_of(int64_t i, int ndim, const int64_t *sizes, int64_t *c) {
    for (int d = ndim - 1; d >= 0; d--) {
        c[d] = i % sizes[d];
        i /= sizes[d];
    }
}

/* Address of the element at coordinates c. */
static unsigned char *at_coords(const tpu_tensor *t, const int64_t *c) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off += c[d] * t->strides[d];
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

/* ------------------------------------------------- select and gather */

typedef struct {
    const char *what;
    bool select;
    int dim;
    fbuf *src, *idx, *out;
} gather_ctx;

static void verify_gather(void *p) {
    const gather_ctx *k = p;
    const tpu_tensor *o = &k->out->t;
    int64_t n = t_numel(o), c[TPU_MAX_DIMS];
    size_t es = t_size(o->dtype);
    for (int64_t i = 0; i < n; i++) {
        coords_of(i, o->ndim, o->sizes, c);
        unsigned char *dst = at_coords(o, c);
        /* The index entry: index[c[dim]] for select, index[c] for gather. */
        int64_t ic[TPU_MAX_DIMS] = {c[k->dim]};
        const unsigned char *ip = k->select ? at_coords(&k->idx->t, ic) : at_coords(&k->idx->t, c);
        c[k->dim] = t_read_i(ip, k->idx->t.dtype);
        if (memcmp(dst, at_coords(&k->src->t, c), es) != 0 && g_bad++ < 4)
            fprintf(stderr, "    %s: out element %lld differs from the element it names\n",
                    k->what, (long long)i);
    }
}

/* One select or gather: src of src_sizes, out of out_sizes (for select,
 * out_sizes[dim] is the index length), indices drawn in [0, size) with
 * duplicates, or given by `fixed`. */
static void run_gather(bool select, tpu_dtype dt, tpu_dtype idt, int ndim,
                       const int64_t *src_sizes, const int64_t *out_sizes, int dim, int ls, int lo,
                       int li) {
    char what[200];
    int k = snprintf(what, sizeof what, "%s %s idx %s dim %d src ",
                     select ? "index_select" : "gather", dt_str(dt), dt_str(idt), dim);
    fmt_dims(what, sizeof what, &k, ndim, src_sizes);
    k += snprintf(what + k, sizeof what - (size_t)k, " out ");
    fmt_dims(what, sizeof what, &k, ndim, out_sizes);
    snprintf(what + k, sizeof what - (size_t)k, " layouts %s/%s/%s", k_layout_names[ls],
             k_layout_names[lo], k_layout_names[li]);
    fbuf src, idx, out;
    fb_make(&src, dt, ndim, src_sizes, ls);
    fb_make(&out, dt, ndim, out_sizes, lo);
    if (select)
        fb_make1(&idx, idt, out_sizes[dim], li);
    else
        fb_make(&idx, idt, ndim, out_sizes, li);
    fill_distinct(&src);
    int64_t ni = t_numel(&idx.t), size = src_sizes[dim];
    for (int64_t i = 0; i < ni; i++) /* small ranges repeat: duplicates */
        fb_set(&idx, i, (double)(t_rand() % (uint64_t)size));
    if (ni > 2) { /* the two ends of the range, always */
        fb_set(&idx, 0, (double)(size - 1));
        fb_set(&idx, ni - 1, 0);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = select ? TPU_INDEX_SELECT : TPU_INDEX_GATHER;
    op.n_in = 2;
    op.out = out.t;
    op.in[0] = src.t;
    op.in[1] = idx.t;
    op.p.index.dim = dim;
    op.p.index.padding_idx = -1;
    gather_ctx ctx = {what, select, dim, &src, &idx, &out};
    op_bufs bufs = {{&out}, 1, {&src, &idx}, 2};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_gather, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&src);
    fb_free(&idx);
    fb_free(&out);
}

static void test_select(void) {
    static const struct {
        int ndim;
        int64_t sizes[3];
    } shapes[] = {{1, {5}}, {2, {4, 6}}, {3, {3, 4, 5}}, {2, {1, 9}}, {3, {2, 0, 3}}};
    static const int64_t lens[] = {0, 1, 7, 13};
    int rot = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int dim = 0; dim < shapes[s].ndim; dim++)
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
                for (int d = 0; d < N_DTYPES; d++, rot++) {
                    int64_t out_sizes[3];
                    memcpy(out_sizes, shapes[s].sizes, sizeof out_sizes);
                    out_sizes[dim] = lens[l];
                    /* Entries can only name an existing element. */
                    if (shapes[s].sizes[dim] == 0 && lens[l] > 0)
                        continue;
                    run_gather(true, k_all_dtypes[d], rot % 2 ? I32 : I64, shapes[s].ndim,
                               shapes[s].sizes, out_sizes, dim, rot % L_COUNT, (rot / 4) % L_COUNT,
                               (rot / 3) % 2 ? L_GAP : L_CONTIG);
                }
    /* Whole rows (the fast path's memcpy per row): row-major src and out
     * along every dim, an embedding's shape, and a gapped src (the
     * element path). */
    for (size_t s = 1; s < 3; s++)
        for (int dim = 0; dim < shapes[s].ndim; dim++)
            for (int ls = 0; ls < 2; ls++) {
                int64_t out_sizes[3];
                memcpy(out_sizes, shapes[s].sizes, sizeof out_sizes);
                out_sizes[dim] = 11;
                run_gather(true, F32, I64, shapes[s].ndim, shapes[s].sizes, out_sizes, dim,
                           ls ? L_GAP : L_CONTIG, L_CONTIG, L_CONTIG);
            }
    run_gather(true, BF16, I64, 2, (int64_t[]){300, 77}, (int64_t[]){40, 77}, 0, L_CONTIG,
               L_CONTIG, L_GAP);
}

static void test_gather(void) {
    /* out no larger than src in the other dims (src larger in some). */
    static const struct {
        int ndim;
        int64_t src[3], out[3];
    } shapes[] = {{1, {6}, {9}},
                  {2, {4, 5}, {4, 5}},
                  {2, {4, 5}, {3, 2}},
                  {3, {3, 4, 5}, {3, 4, 5}},
                  {3, {3, 4, 5}, {2, 7, 3}},
                  {3, {2, 3, 4}, {2, 0, 4}}};
    int rot = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int dim = 0; dim < shapes[s].ndim; dim++)
            for (int d = 0; d < N_DTYPES; d++, rot++) {
                int64_t out_sizes[3], src_sizes[3];
                memcpy(src_sizes, shapes[s].src, sizeof src_sizes);
                memcpy(out_sizes, shapes[s].out, sizeof out_sizes);
                /* Along dim, out may be larger or smaller than src; the
                 * other dims must fit, which the table keeps except where
                 * dim is the one out exceeds in. */
                bool fits = true;
                for (int e = 0; e < shapes[s].ndim; e++)
                    fits = fits && (e == dim || out_sizes[e] <= src_sizes[e]);
                if (!fits)
                    continue;
                run_gather(false, k_all_dtypes[d], rot % 2 ? I64 : I32, shapes[s].ndim, src_sizes,
                           out_sizes, dim, rot % L_COUNT, (rot / 2) % L_COUNT, (rot / 3) % L_COUNT);
            }
}

/* ---------------------------------------------- embedding backward */

typedef struct {
    const char *what;
    fbuf *grad, *idx, *out;
    int64_t pad;
    bool scale;
} emb_ctx;

static void verify_embedding(void *p) {
    const emb_ctx *k = p;
    int64_t w = k->out->t.sizes[0], d = k->out->t.sizes[1], n = k->idx->t.sizes[0];
    tpu_dtype dt = k->out->t.dtype;
    for (int64_t r = 0; r < w; r++) {
        int64_t count = 0;
        for (int64_t i = 0; i < n; i++)
            count += fb_get_i(k->idx, i) == r;
        for (int64_t j = 0; j < d; j++) {
            long double sum = 0, mag = 0;
            int64_t adds = 0;
            for (int64_t i = 0; i < n; i++) {
                if (fb_get_i(k->idx, i) != r || r == k->pad)
                    continue;
                long double g = fb_get2(k->grad, i, j);
                if (k->scale)
                    g /= count;
                sum += g;
                mag += fabsl(g);
                adds++;
            }
            double got = fb_get2(k->out, r, j);
            /* Each added row is rounded once to out's dtype. */
            double tol = (double)adds * tol_store(dt, (double)mag) + 1e-15 * (double)mag;
            bool ok = adds == 0 ? got == 0 && !signbit(got) : close_to(got, (double)sum, tol);
            if (!ok && g_bad++ < 4)
                fprintf(stderr, "    %s: out[%lld, %lld] = %.17g, want %.17Lg (%lld rows, "
                        "tol %.3g)\n", k->what, (long long)r, (long long)j, got, sum,
                        (long long)adds, tol);
        }
    }
}

static void run_embedding(tpu_dtype dt, tpu_dtype idt, int64_t w, int64_t d, int64_t n,
                          int64_t pad, bool scale, int lg, int lo, int li) {
    char what[200];
    snprintf(what, sizeof what, "embedding_backward %s idx %s W %lld D %lld n %lld pad %lld%s "
             "layouts %s/%s/%s", dt_str(dt), dt_str(idt), (long long)w, (long long)d, (long long)n,
             (long long)pad, scale ? " scale_by_freq" : "", k_layout_names[lg], k_layout_names[lo],
             k_layout_names[li]);
    fbuf grad, idx, out;
    fb_make2(&grad, dt, n, d, lg);
    fb_make1(&idx, idt, n, li);
    fb_make2(&out, dt, w, d, lo);
    for (int64_t i = 0; i < n; i++) {
        /* Entries from the lower half of the rows only (the upper half are
         * named by nobody); the padding row and row 0 named often. */
        int64_t v = (int64_t)(t_rand() % (uint64_t)(w / 2 + 1));
        if (i % 4 == 1 && pad >= 0)
            v = pad;
        fb_set(&idx, i, (double)v);
        for (int64_t j = 0; j < d; j++)
            fb_set2(&grad, i, j, 8 * t_unit() - 4);
    }
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_EMBEDDING_BACKWARD;
    op.n_in = 2;
    op.out = out.t;
    op.in[0] = grad.t;
    op.in[1] = idx.t;
    op.p.index.padding_idx = pad;
    op.p.index.scale_by_freq = scale;
    emb_ctx ctx = {what, &grad, &idx, &out, pad, scale};
    op_bufs bufs = {{&out}, 1, {&grad, &idx}, 2};
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_embedding, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&grad);
    fb_free(&idx);
    fb_free(&out);
}

static void test_embedding(void) {
    static const tpu_dtype dts[] = {F32, F64, F16, BF16};
    static const struct {
        int64_t w, d, n;
    } shapes[] = {{7, 5, 12}, {1, 3, 4}, {10, 1, 30}, {50, 16, 200}, {6, 0, 5}, {9, 4, 0}};
    int rot = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int pad = -1; pad <= 0; pad++)
                for (int scale = 0; scale < 2; scale++, rot++)
                    run_embedding(dts[d], rot % 2 ? I32 : I64, shapes[s].w, shapes[s].d,
                                  shapes[s].n, pad < 0 ? -1 : shapes[s].w / 3, scale,
                                  rot % L_COUNT, (rot / 2) % L_COUNT,
                                  (rot / 3) % 2 ? L_GAP : L_CONTIG);
}

/* Exact sums with known bytes: index (2, 0, 2, 2), grad rows of 1, 2, 3,
 * 4 (times the column + 1), W = 4: row 2 gets 1 + 3 + 4, row 0 gets 2,
 * rows 1 and 3 nothing; with scale_by_freq, row 2 gets 8 / 3. */
static void embedding_known(void) {
    float grad[8], out[8];
    int64_t idx[4] = {2, 0, 2, 2};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            grad[i * 2 + j] = (float)((i + 1) * (j + 1));
    for (int scale = 0; scale < 2; scale++) {
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = TPU_OP_INDEX;
        op.fn = TPU_INDEX_EMBEDDING_BACKWARD;
        op.n_in = 2;
        op.out = (tpu_tensor){.data = out, .sizes = {4, 2}, .strides = {2, 1}, .ndim = 2,
                              .dtype = F32, .storage = out, .storage_nbytes = sizeof out};
        op.in[0] = (tpu_tensor){.data = grad, .sizes = {4, 2}, .strides = {2, 1}, .ndim = 2,
                                .dtype = F32, .storage = grad, .storage_nbytes = sizeof grad};
        op.in[1] = (tpu_tensor){.data = idx, .sizes = {4}, .strides = {1}, .ndim = 1,
                                .dtype = I64, .storage = idx, .storage_nbytes = sizeof idx};
        op.p.index.padding_idx = -1;
        op.p.index.scale_by_freq = scale;
        memset(out, 0xff, sizeof out);
        /* scale_by_freq counts each row's entries in scratch: W int64,
         * poisoned here (the kernel must clear what it uses). */
        int64_t counts[5];
        memset(counts, 0xff, sizeof counts);
        CHECK(tpu_op_scratch_bytes(&op) == (scale ? 4 * (int64_t)sizeof(int64_t) : 0));
        if (scale) {
            CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "needs 32 bytes of scratch but has 0");
            op.scratch = counts;
            op.scratch_nbytes = 3 * sizeof(int64_t);
            CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "needs 32 bytes of scratch but has 24");
            op.scratch_nbytes = 4 * sizeof(int64_t);
        }
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        float r2 = scale ? 8.0f / 3.0f : 8.0f;
        CHECK(out[0] == 2 && out[1] == 4 && out[2] == 0 && out[3] == 0);
        CHECK(fabsf(out[4] - r2) <= 1e-6f && fabsf(out[5] - 2 * r2) <= 1e-6f);
        CHECK(out[6] == 0 && out[7] == 0);
        /* padding_idx 2: only row 0 gets anything. */
        op.p.index.padding_idx = 2;
        CHECK_OK(tpu_op_run(&op, 0, 1));
        CHECK(out[0] == 2 && out[1] == 4 && out[4] == 0 && out[5] == 0);
        /* Three shares (rows split 1/1/2), scratch poisoned again: the
         * same result, and the counts' block is the only scratch used. */
        op.p.index.padding_idx = -1;
        memset(out, 0xff, sizeof out);
        memset(counts, 0xff, sizeof counts);
        for (int ith = 0; ith < 3; ith++)
            CHECK_OK(tpu_op_run(&op, ith, 3));
        CHECK(out[0] == 2 && out[1] == 4 && out[2] == 0 && out[3] == 0);
        CHECK(fabsf(out[4] - r2) <= 1e-6f && fabsf(out[5] - 2 * r2) <= 1e-6f);
        CHECK(out[6] == 0 && out[7] == 0);
        int64_t poison;
        memset(&poison, 0xff, sizeof poison);
        CHECK(counts[4] == poison);
    }
}

/* ------------------------------------------------- index errors */

/* A select, gather and embedding backward whose index tensor holds `bad`
 * at position 2; each must fail in tpu_op_run with TPU_ERR_INDEX naming
 * the value (after tpu_op_check accepted the record: values are only seen
 * by the kernel). */
static void index_errors(void) {
    static const int64_t bads[] = {5, 6, -1, -5, INT64_MAX, INT64_MIN, INT32_MIN, 1000000};
    float src[20] = {0}, out[20];
    for (size_t b = 0; b < sizeof bads / sizeof bads[0]; b++)
        for (int i32 = 0; i32 < 2; i32++) {
            int64_t v = bads[b];
            if (i32 && (v < INT32_MIN || v > INT32_MAX))
                continue;
            int64_t i64s[4] = {0, 1, v, 3};
            int32_t i32s[4] = {0, 1, (int32_t)v, 3};
            tpu_tensor idx = {.data = i32 ? (void *)i32s : (void *)i64s, .sizes = {4},
                              .strides = {1}, .ndim = 1, .dtype = i32 ? I32 : I64,
                              .storage = i32 ? (void *)i32s : (void *)i64s,
                              .storage_nbytes = i32 ? 16 : 32};
            char value[32], msg_dim[48];
            snprintf(value, sizeof value, "index %" PRId64 " ", v);
            const char *parts[] = {value, NULL, NULL};
            /* select: src [4, 5] along dim 1 (size 5). */
            tpu_op op;
            memset(&op, 0, sizeof op);
            op.code = TPU_OP_INDEX;
            op.fn = TPU_INDEX_SELECT;
            op.n_in = 2;
            op.in[0] = (tpu_tensor){.data = src, .sizes = {4, 5}, .strides = {5, 1}, .ndim = 2,
                                    .dtype = F32, .storage = src, .storage_nbytes = sizeof src};
            op.in[1] = idx;
            op.out = (tpu_tensor){.data = out, .sizes = {4, 4}, .strides = {4, 1}, .ndim = 2,
                                  .dtype = F32, .storage = out, .storage_nbytes = sizeof out};
            op.p.index.dim = 1;
            snprintf(msg_dim, sizeof msg_dim, "dimension 1 with size 5");
            parts[1] = msg_dim;
            bool in_range = v >= 0 && v < 5;
            if (!in_range)
                expect_run_error(&op, TPU_ERR_INDEX, parts, "select");
            /* gather: out and index [4] of a 1-d src [5]. */
            op.fn = TPU_INDEX_GATHER;
            op.in[0].ndim = op.out.ndim = 1;
            op.in[0].sizes[0] = 5;
            op.in[0].strides[0] = 1;
            op.out.sizes[0] = 4;
            op.out.strides[0] = 1;
            op.p.index.dim = 0;
            snprintf(msg_dim, sizeof msg_dim, "dimension 0 with size 5");
            if (!in_range)
                expect_run_error(&op, TPU_ERR_INDEX, parts, "gather");
            /* embedding backward: W = 5 rows of 2, grad [4, 2]. */
            op.fn = TPU_INDEX_EMBEDDING_BACKWARD;
            op.in[0] = (tpu_tensor){.data = src, .sizes = {4, 2}, .strides = {2, 1}, .ndim = 2,
                                    .dtype = F32, .storage = src, .storage_nbytes = sizeof src};
            op.out = (tpu_tensor){.data = out, .sizes = {5, 2}, .strides = {2, 1}, .ndim = 2,
                                  .dtype = F32, .storage = out, .storage_nbytes = sizeof out};
            op.p.index.padding_idx = -1;
            snprintf(msg_dim, sizeof msg_dim, "for 5 embeddings");
            if (!in_range)
                expect_run_error(&op, TPU_ERR_INDEX, parts, "embedding_backward");
            /* Every share of a threaded run reports it too (nth 3). */
            if (!in_range) {
                tpu_status first = TPU_OK;
                for (int ith = 0; ith < 3; ith++) {
                    tpu_status st = tpu_op_run(&op, ith, 3);
                    if (first == TPU_OK)
                        first = st;
                }
                CHECK_STATUS(first, TPU_ERR_INDEX);
            }
        }
    /* In range at the edges: fine. */
    int64_t edge[2] = {0, 4};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_SELECT;
    op.n_in = 2;
    op.in[0] = (tpu_tensor){.data = src, .sizes = {5}, .strides = {1}, .ndim = 1, .dtype = F32,
                            .storage = src, .storage_nbytes = sizeof src};
    op.in[1] = (tpu_tensor){.data = edge, .sizes = {2}, .strides = {1}, .ndim = 1, .dtype = I64,
                            .storage = edge, .storage_nbytes = sizeof edge};
    op.out = (tpu_tensor){.data = out, .sizes = {2}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = out, .storage_nbytes = sizeof out};
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
}

/* ------------------------------------------------------- NLL loss */

typedef struct {
    int64_t n, c;          /* c classes; n samples (batched), or one (1-d) */
    bool batched;
    tpu_dtype dt, tdt;
    bool weight;
    tpu_loss_reduction red;
    int64_t ignore;        /* ignore_index */
    bool all_ignored;
    int lx;
} lcase;

static const char *const k_red_names[] = {"none", "mean", "sum"};

static void lcase_describe(const lcase *c, bool bwd, char *buf, size_t cap) {
    snprintf(buf, cap, "%s %s%s%lldx%lld target %s reduction %s ignore %lld%s%s layout %s",
             bwd ? "nll_loss_backward" : "nll_loss", dt_str(c->dt), c->batched ? " " : " 1-d ",
             (long long)c->n, (long long)c->c, dt_str(c->tdt), k_red_names[c->red],
             (long long)c->ignore, c->weight ? " weighted" : "",
             c->all_ignored ? " all ignored" : "", k_layout_names[c->lx]);
}

/* The scores x ([N, C] or [C]), targets t ([N] or 0-d) and weights. */
typedef struct {
    fbuf x, t, w;
} nll_inputs;

static void nll_make(const lcase *c, nll_inputs *in) {
    memset(in, 0, sizeof *in);
    if (c->batched) {
        fb_make2(&in->x, c->dt, c->n, c->c, c->lx);
        fb_make1(&in->t, c->tdt, c->n, c->lx == L_GAP ? L_GAP : L_CONTIG);
    } else {
        fb_make1(&in->x, c->dt, c->c, c->lx);
        fb_make0(&in->t, c->tdt);
    }
    int64_t nx = t_numel(&in->x.t);
    for (int64_t i = 0; i < nx; i++)
        fb_set(&in->x, i, -5 * t_unit()); /* log-probabilities */
    /* A uint8 target holds 0..255 only: an ignore_index outside that
     * (-100) is never met, so no sample is ignored then. */
    bool can_ignore = c->tdt != U8 || (c->ignore >= 0 && c->ignore <= 255);
    for (int64_t i = 0; i < c->n; i++) {
        int64_t k = (int64_t)(t_rand() % (uint64_t)c->c);
        if (can_ignore && (c->all_ignored || i % 5 == 2))
            k = c->ignore;
        fb_set(&in->t, i, (double)k);
    }
    if (c->weight) {
        fb_make1(&in->w, c->dt, c->c, c->lx == L_NEG ? L_NEG : L_CONTIG);
        for (int64_t k = 0; k < c->c; k++)
            fb_set(&in->w, k, 0.25 + 2 * t_unit());
    }
}

static void nll_free(nll_inputs *in) {
    fb_free(&in->x);
    fb_free(&in->t);
    fb_free(&in->w);
}

/* Sample i's target, weight (0 when ignored) and score. */
static bool nll_sample(const lcase *c, const nll_inputs *in, int64_t i, int64_t *k, long double *w,
                       long double *x) {
    *k = fb_get_i(&in->t, i);
    if (*k == c->ignore) {
        *w = 0;
        *x = 0;
        return false;
    }
    *w = c->weight ? fb_get(&in->w, *k) : 1;
    *x = c->batched ? fb_get2(&in->x, i, *k) : fb_get(&in->x, *k);
    return true;
}

typedef struct {
    const lcase *c;
    const char *what;
    nll_inputs *in;
    fbuf *out, *total, *g;
} nll_ctx;

static void verify_nll_forward(void *p) {
    const nll_ctx *k = p;
    const lcase *c = k->c;
    long double sum = 0, mag = 0, total = 0;
    for (int64_t i = 0; i < c->n; i++) {
        int64_t t;
        long double w, x;
        nll_sample(c, k->in, i, &t, &w, &x);
        long double v = -w * x;
        if (c->red == TPU_LOSS_REDUCE_NONE) {
            double got = c->batched ? fb_get(k->out, i) : fb_get(k->out, 0);
            if (!close_to(got, (double)v, tol_store(c->dt, (double)v)) && g_bad++ < 4)
                fprintf(stderr, "    %s: out[%lld] = %.17g, want %.17Lg\n", k->what, (long long)i,
                        got, v);
        }
        sum += v;
        mag += fabsl(v);
        total += w;
    }
    /* f64 sums in sample order: n roundings of f64, then one store. */
    double slack = 1e-15 * (double)(c->n + 1);
    if (c->red != TPU_LOSS_REDUCE_NONE) {
        long double want = c->red == TPU_LOSS_REDUCE_SUM ? sum : sum / total;
        long double want_mag = c->red == TPU_LOSS_REDUCE_SUM ? mag : mag / total;
        double got = fb_get(k->out, 0);
        double tol = tol_store(c->dt, (double)want) + slack * (double)want_mag;
        if (!close_to(got, (double)want, tol) && g_bad++ < 4)
            fprintf(stderr, "    %s: out = %.17g, want %.17Lg\n", k->what, got, want);
        if (c->all_ignored && c->red == TPU_LOSS_REDUCE_MEAN)
            CHECK(isnan(got));
    }
    double got_total = fb_get(k->total, 0);
    double tol = tol_store(c->dt, (double)total) + slack * (double)total;
    if (!close_to(got_total, (double)total, tol) && g_bad++ < 4)
        fprintf(stderr, "    %s: total_weight = %.17g, want %.17Lg\n", k->what, got_total, total);
}

static void run_nll_forward(const lcase *c) {
    char what[200];
    lcase_describe(c, false, what, sizeof what);
    nll_inputs in;
    nll_make(c, &in);
    fbuf out, total;
    if (c->red == TPU_LOSS_REDUCE_NONE && c->batched)
        fb_make1(&out, c->dt, c->n, c->lx == L_TRANS ? L_GAP : L_CONTIG);
    else
        fb_make0(&out, c->dt);
    fb_make0(&total, c->dt);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_LOSS;
    op.fn = TPU_LOSS_NLL_FORWARD;
    op.n_in = 3;
    op.n_aux = 1;
    op.out = out.t;
    op.in[0] = in.x.t;
    op.in[1] = in.t.t;
    op.in[2] = in.w.t; /* all zero when absent */
    op.aux[0] = total.t;
    op.p.loss.reduction = c->red;
    op.p.loss.ignore_index = c->ignore;
    nll_ctx ctx = {c, what, &in, &out, &total, NULL};
    op_bufs bufs = {{&out, &total}, 2, {&in.x, &in.t}, 2};
    if (c->weight)
        bufs.read[bufs.n_read++] = &in.w;
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_nll_forward, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&out);
    fb_free(&total);
    nll_free(&in);
}

static void verify_nll_backward(void *p) {
    const nll_ctx *k = p;
    const lcase *c = k->c;
    long double total = fb_get(k->total, 0);
    for (int64_t i = 0; i < c->n; i++) {
        int64_t t;
        long double w, x;
        bool counted = nll_sample(c, k->in, i, &t, &w, &x);
        bool per_sample = c->red == TPU_LOSS_REDUCE_NONE && c->batched;
        long double g = fb_get(k->g, per_sample ? i : 0);
        long double want_t = -w * g;
        if (c->red == TPU_LOSS_REDUCE_MEAN)
            want_t /= total;
        for (int64_t j = 0; j < c->c; j++) {
            long double want = counted && j == t ? want_t : 0;
            double got = c->batched ? fb_get2(k->out, i, j) : fb_get(k->out, j);
            double tol = 2 * tol_store(c->dt, (double)want); /* the product, the division */
            bool ok = want == 0 ? got == 0 : close_to(got, (double)want, tol);
            if (!ok && g_bad++ < 4)
                fprintf(stderr, "    %s: dx[%lld, %lld] = %.17g, want %.17Lg\n", k->what,
                        (long long)i, (long long)j, got, want);
        }
    }
}

static void run_nll_backward(const lcase *c) {
    char what[200];
    lcase_describe(c, true, what, sizeof what);
    nll_inputs in;
    nll_make(c, &in);
    fbuf dx, g, total;
    if (c->batched)
        fb_make2(&dx, c->dt, c->n, c->c, (c->lx + 1) % L_COUNT);
    else
        fb_make1(&dx, c->dt, c->c, (c->lx + 1) % L_COUNT);
    if (c->red == TPU_LOSS_REDUCE_NONE && c->batched)
        fb_make1(&g, c->dt, c->n, c->lx);
    else
        fb_make0(&g, c->dt);
    int64_t ng = t_numel(&g.t);
    for (int64_t i = 0; i < ng; i++)
        fb_set(&g, i, 4 * t_unit() - 2);
    /* The total weight a forward gave (any positive value will do). */
    fb_make0(&total, c->dt);
    fb_set(&total, 0, c->all_ignored ? 0 : 0.5 + (double)c->n * t_unit());
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_LOSS;
    op.fn = TPU_LOSS_NLL_BACKWARD;
    op.n_in = 4;
    op.out = dx.t;
    op.in[0] = g.t;
    op.in[1] = in.t.t;
    op.in[2] = in.w.t;
    op.in[3] = total.t;
    op.p.loss.reduction = c->red;
    op.p.loss.ignore_index = c->ignore;
    nll_ctx ctx = {c, what, &in, &dx, &total, &g};
    op_bufs bufs = {{&dx}, 1, {&g, &in.t, &total}, 3};
    if (c->weight)
        bufs.read[bufs.n_read++] = &in.w;
    g_bad = 0;
    run_everywhere(&op, &bufs, verify_nll_backward, &ctx, what);
    CHECK(g_bad == 0);
    g_cases++;
    fb_free(&dx);
    fb_free(&g);
    fb_free(&total);
    nll_free(&in);
}

static void test_nll(void) {
    static const tpu_dtype dts[] = {F32, F64, F16, BF16};
    static const struct {
        int64_t n, c;
        bool batched;
    } shapes[] = {{1, 1, true}, {7, 5, true}, {64, 10, true}, {0, 4, true}, {1, 6, false},
                  {1, 1, false}, {333, 3, true}};
    /* ignore_index: PyTorch's default (outside the classes) and a class. */
    static const int64_t ignores[] = {-100, 1};
    int rot = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int red = 0; red < 3; red++)
                for (int weight = 0; weight < 2; weight++)
                    for (int ig = 0; ig < 2; ig++, rot++) {
                        lcase c = {.n = shapes[s].n, .c = shapes[s].c,
                                   .batched = shapes[s].batched, .dt = dts[d],
                                   .tdt = rot % 3 == 2 ? I32 : rot % 3 == 1 ? U8 : I64,
                                   .weight = weight,
                                   .red = (tpu_loss_reduction)red, .ignore = ignores[ig],
                                   .lx = rot % L_COUNT};
                        run_nll_forward(&c);
                        run_nll_backward(&c);
                    }
    /* Every sample ignored: the mean is 0 / 0 (NaN), the total 0, dx 0. */
    for (int red = 0; red < 3; red++)
        for (int batched = 0; batched < 2; batched++) {
            lcase c = {.n = batched ? 6 : 1, .c = 4, .batched = batched, .dt = F32, .tdt = I64,
                       .weight = red == 1, .red = (tpu_loss_reduction)red, .ignore = -100,
                       .all_ignored = true, .lx = L_CONTIG};
            run_nll_forward(&c);
            run_nll_backward(&c);
        }
}

/* Known answers: x = log-probabilities of 3 samples, targets (2, 0, 1),
 * weights (1, 2, 3). */
static void nll_known(void) {
    double x[9] = {-1, -2, -3, -4, -5, -6, -7, -8, -9}, w[3] = {1, 2, 3}, out, total;
    int64_t t[3] = {2, 0, 1};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_LOSS;
    op.fn = TPU_LOSS_NLL_FORWARD;
    op.n_in = 3;
    op.n_aux = 1;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {3, 3}, .strides = {3, 1}, .ndim = 2, .dtype = F64,
                            .storage = x, .storage_nbytes = sizeof x};
    op.in[1] = (tpu_tensor){.data = t, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = I64,
                            .storage = t, .storage_nbytes = sizeof t};
    op.in[2] = (tpu_tensor){.data = w, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = F64,
                            .storage = w, .storage_nbytes = sizeof w};
    op.out = (tpu_tensor){.data = &out, .ndim = 0, .dtype = F64, .storage = &out,
                          .storage_nbytes = 8};
    op.aux[0] = (tpu_tensor){.data = &total, .ndim = 0, .dtype = F64, .storage = &total,
                             .storage_nbytes = 8};
    /* -(3 * -3 + 1 * -4 + 2 * -8) = 29 over weights 3 + 1 + 2 = 6. */
    op.p.loss.reduction = TPU_LOSS_REDUCE_SUM;
    op.p.loss.ignore_index = -100;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(out == 29 && total == 6);
    op.p.loss.reduction = TPU_LOSS_REDUCE_MEAN;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(fabs(out - 29.0 / 6) < 1e-15 && total == 6);
    /* ignore_index 0 drops the second sample: 25 over 5. */
    op.p.loss.ignore_index = 0;
    CHECK_OK(tpu_op_run(&op, 0, 1));
    CHECK(out == 5 && total == 5);
}

/* Targets outside [0, C) that are not ignore_index: TPU_ERR_INDEX naming
 * the target, forward and backward, batched and 1-d. */
static void nll_errors(void) {
    static const int64_t bads[] = {3, 4, -1, -99, -101, INT64_MIN, INT64_MAX};
    float x[6] = {0}, out[6], g = 1, total = 1;
    for (size_t b = 0; b < sizeof bads / sizeof bads[0]; b++)
        for (int fwd = 0; fwd < 2; fwd++)
            for (int batched = 0; batched < 2; batched++) {
                int64_t t[2] = {batched ? 0 : bads[b], bads[b]};
                char value[40];
                snprintf(value, sizeof value, "target %" PRId64 " ", bads[b]);
                const char *parts[] = {value, "3 classes", NULL};
                tpu_op op;
                memset(&op, 0, sizeof op);
                op.code = TPU_OP_LOSS;
                op.fn = fwd ? TPU_LOSS_NLL_FORWARD : TPU_LOSS_NLL_BACKWARD;
                op.n_in = fwd ? 3 : 4;
                op.n_aux = fwd ? 1 : 0;
                tpu_tensor scores = {.data = x, .sizes = {2, 3}, .strides = {3, 1}, .ndim = 2,
                                     .dtype = F32, .storage = x, .storage_nbytes = sizeof x};
                tpu_tensor tt = {.data = t, .sizes = {2}, .strides = {1}, .ndim = 1,
                                 .dtype = I64, .storage = t, .storage_nbytes = sizeof t};
                if (!batched) {
                    scores.ndim = 1;
                    scores.sizes[0] = 3;
                    scores.strides[0] = 1;
                    tt.ndim = 0;
                }
                tpu_tensor scalar_out = {.data = out, .ndim = 0, .dtype = F32, .storage = out,
                                         .storage_nbytes = sizeof out};
                op.p.loss.reduction = TPU_LOSS_REDUCE_MEAN;
                op.p.loss.ignore_index = -100;
                if (fwd) {
                    op.in[0] = scores;
                    op.in[1] = tt;
                    op.out = scalar_out;
                    op.aux[0] = (tpu_tensor){.data = &total, .ndim = 0, .dtype = F32,
                                             .storage = &total, .storage_nbytes = 4};
                } else {
                    op.out = scores;
                    op.out.data = op.out.storage = out;
                    op.in[0] = (tpu_tensor){.data = &g, .ndim = 0, .dtype = F32, .storage = &g,
                                            .storage_nbytes = 4};
                    op.in[1] = tt;
                    op.in[3] = (tpu_tensor){.data = &total, .ndim = 0, .dtype = F32,
                                            .storage = &total, .storage_nbytes = 4};
                }
                expect_run_error(&op, TPU_ERR_INDEX, parts, fwd ? "nll forward" : "nll backward");
            }
}

/* uint8 targets are read unsigned: 255 is the class 255 (out of range
 * for 3 classes, an error even with ignore_index -1), and is ignored
 * only by ignore_index 255. x [2, 3] f32, targets (2, t1). */
static void nll_uint8_targets(void) {
    float x[6] = {-1, -2, -3, -4, -5, -6}, out, total;
    static const struct {
        uint8_t t1;
        int64_t ignore;
        bool error;
        float want, total;
    } rows[] = {
        {0, -100, false, 7, 2},   /* -(-3) - (-4) */
        {1, -100, false, 8, 2},
        {1, 1, false, 3, 1},      /* sample 1 ignored */
        {255, -1, true, 0, 0},    /* 255, not -1: out of range */
        {255, 255, false, 3, 1},  /* ignored */
        {3, -100, true, 0, 0},
        {128, -128, true, 0, 0},  /* 128, not -128 */
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int fwd = 0; fwd < 2; fwd++) {
            uint8_t t[2] = {2, rows[r].t1};
            float dx[6], g = 1, tw = rows[r].total;
            tpu_op op;
            memset(&op, 0, sizeof op);
            op.code = TPU_OP_LOSS;
            op.fn = fwd ? TPU_LOSS_NLL_FORWARD : TPU_LOSS_NLL_BACKWARD;
            op.n_in = fwd ? 3 : 4;
            op.n_aux = fwd ? 1 : 0;
            tpu_tensor scores = {.data = x, .sizes = {2, 3}, .strides = {3, 1}, .ndim = 2,
                                 .dtype = F32, .storage = x, .storage_nbytes = sizeof x};
            tpu_tensor tt = {.data = t, .sizes = {2}, .strides = {1}, .ndim = 1, .dtype = U8,
                             .storage = t, .storage_nbytes = sizeof t};
            op.p.loss.reduction = TPU_LOSS_REDUCE_SUM;
            op.p.loss.ignore_index = rows[r].ignore;
            op.in[1] = tt;
            if (fwd) {
                op.in[0] = scores;
                op.out = (tpu_tensor){.data = &out, .ndim = 0, .dtype = F32, .storage = &out,
                                      .storage_nbytes = 4};
                op.aux[0] = (tpu_tensor){.data = &total, .ndim = 0, .dtype = F32,
                                         .storage = &total, .storage_nbytes = 4};
            } else {
                op.out = scores;
                op.out.data = op.out.storage = dx;
                op.in[0] = (tpu_tensor){.data = &g, .ndim = 0, .dtype = F32, .storage = &g,
                                        .storage_nbytes = 4};
                op.in[3] = (tpu_tensor){.data = &tw, .ndim = 0, .dtype = F32, .storage = &tw,
                                        .storage_nbytes = 4};
            }
            if (rows[r].error) {
                char value[40];
                snprintf(value, sizeof value, "target %d ", (int)rows[r].t1);
                const char *parts[] = {value, "3 classes", NULL};
                expect_run_error(&op, TPU_ERR_INDEX, parts, "nll uint8 target");
                continue;
            }
            CHECK_OK(tpu_op_check(&op));
            CHECK_OK(tpu_op_run(&op, 0, 1));
            if (fwd) {
                CHECK(out == rows[r].want && total == rows[r].total);
                continue;
            }
            /* dx: -1 at [0, 2] and, unless ignored, at [1, t1]. */
            bool ign1 = rows[r].t1 == rows[r].ignore;
            for (int i = 0; i < 6; i++) {
                float want = i == 2 || (!ign1 && i == 3 + rows[r].t1) ? -1.0f : 0.0f;
                CHECK(dx[i] == want);
            }
        }
}

/* ------------------------------------------------- tpu_op_check */

static void index_refusals(void) {
    float buf[64] = {0};
    int64_t ib[16] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_INDEX;
    op.fn = TPU_INDEX_SELECT;
    op.n_in = 2;
    tpu_tensor src = {.data = buf, .sizes = {4, 5}, .strides = {5, 1}, .ndim = 2, .dtype = F32,
                      .storage = buf, .storage_nbytes = sizeof buf};
    tpu_tensor out = src;
    out.data = buf + 32;
    out.sizes[1] = 3;
    out.strides[0] = 3;
    tpu_tensor idx = {.data = ib, .sizes = {3}, .strides = {1}, .ndim = 1, .dtype = I64,
                      .storage = ib, .storage_nbytes = sizeof ib};
    op.in[0] = src;
    op.in[1] = idx;
    op.out = out;
    op.p.index.dim = 1;
    tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    op.n_in = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 1 (expected 2)");
    op = ok;
    op.n_aux = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 1 (expected 0)");
    op = ok;
    op.in[1].dtype = I16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "index dtype int16 is not supported");
    op = ok;
    op.in[1].dtype = F32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "index dtype float32");
    op = ok;
    op.out.dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "out dtype float64 differs from in[0]'s float32");
    op = ok;
    op.p.index.dim = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "dim 2");
    op.p.index.dim = -1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "dim -1");
    op = ok;
    op.in[1].sizes[0] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "index has sizes [4] but out has 3 entries in dim 1");
    op = ok;
    op.out.sizes[0] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out has sizes [3, 3] but in[0] has [4, 5]");
    op = ok;
    op.out.data = buf + 2;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    /* GATHER: index of out's rank and sizes, src no smaller elsewhere. */
    op = ok;
    op.fn = TPU_INDEX_GATHER;
    op.in[1] = out;
    op.in[1].data = ib;
    op.in[1].dtype = I64;
    op.in[1].storage = ib;
    op.in[1].storage_nbytes = sizeof ib;
    CHECK_OK(tpu_op_check(&op));
    tpu_op gok = op;
    op.in[1].ndim = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "index has rank 1 but out has 2");
    op = gok;
    op.out.sizes[0] = op.in[1].sizes[0] = 5;
    op.in[1].strides[0] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "no larger than in[0] in every dim but 1");
    op = gok;
    op.in[1].sizes[1] = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "index has sizes [4, 2]");
    /* EMBEDDING_BACKWARD: 2-d float out, 1-d index, grad [n, D]. */
    op = ok;
    op.fn = TPU_INDEX_EMBEDDING_BACKWARD;
    op.in[0] = src;
    op.in[0].sizes[0] = 3; /* grad [3, 5] */
    op.in[1] = idx;        /* [3] */
    op.out = src;
    op.out.data = buf + 32;
    op.out.sizes[0] = 6; /* 6 x 5 at 32 needs 62 floats */
    CHECK_OK(tpu_op_check(&op));
    tpu_op eok = op;
    op.out.dtype = op.in[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "out must be a 2-d floating tensor (got 2-d int32)");
    op = eok;
    op.in[1].ndim = 2;
    op.in[1].sizes[1] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "indices must be 1-d, got 2-d");
    op = eok;
    op.in[0].sizes[1] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "grad has sizes [3, 4], expected [3, 5]");
    op = eok;
    op.in[0].dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "grad has dtype float64, expected float32");
    op = eok;
    op.fn = TPU_INDEX_COUNT;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "has no function");
}

static void loss_refusals(void) {
    float x[32] = {0}, out[16], total[2];
    int64_t t[8] = {0};
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_LOSS;
    op.fn = TPU_LOSS_NLL_FORWARD;
    op.n_in = 3;
    op.n_aux = 1;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {4, 5}, .strides = {5, 1}, .ndim = 2, .dtype = F32,
                            .storage = x, .storage_nbytes = sizeof x};
    op.in[1] = (tpu_tensor){.data = t, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = I64,
                            .storage = t, .storage_nbytes = sizeof t};
    op.in[2] = (tpu_tensor){.data = x + 20, .sizes = {5}, .strides = {1}, .ndim = 1, .dtype = F32,
                            .storage = x, .storage_nbytes = sizeof x};
    op.out = (tpu_tensor){.data = out, .sizes = {4}, .strides = {1}, .ndim = 1, .dtype = F32,
                          .storage = out, .storage_nbytes = sizeof out};
    op.aux[0] = (tpu_tensor){.data = total, .ndim = 0, .dtype = F32, .storage = total,
                             .storage_nbytes = sizeof total};
    op.p.loss.reduction = TPU_LOSS_REDUCE_NONE;
    op.p.loss.ignore_index = -100;
    tpu_op ok = op;
    CHECK_OK(tpu_op_check(&op));
    op.in[2] = (tpu_tensor){0};
    CHECK_OK(tpu_op_check(&op)); /* weights are optional */
    op = ok;
    op.n_in = 4;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in is 4 (expected 3)");
    op = ok;
    op.n_aux = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 0 (expected 1)");
    op = ok;
    op.p.loss.reduction = (tpu_loss_reduction)3;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "invalid reduction 3");
    op = ok;
    op.in[0].dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "dtype int32 is not supported");
    op = ok;
    op.in[0].ndim = 3;
    op.in[0].sizes[2] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "input must be 1-d or 2-d, got 3-d");
    op = ok;
    op.in[1].dtype = F32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "target dtype float32 is not supported");
    /* Targets: int64, int32, uint8; no other integer (nor bool). */
    static const tpu_dtype bad_t[] = {I8, I16, BOOL, F64};
    for (size_t i = 0; i < sizeof bad_t / sizeof bad_t[0]; i++) {
        op.in[1].dtype = bad_t[i];
        CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "(int64, int32 or uint8)");
    }
    op.in[1].dtype = U8;
    CHECK_OK(tpu_op_check(&op));
    op.in[1].dtype = I32;
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.in[1].sizes[0] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "target has sizes [3], expected [4]");
    op = ok;
    op.in[2].sizes[0] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "weight has sizes [4], expected [5]");
    op = ok;
    op.in[2].dtype = F64;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "weight has dtype float64, expected float32");
    /* out's shape follows the reduction. */
    op = ok;
    op.p.loss.reduction = TPU_LOSS_REDUCE_MEAN;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out has sizes [4], expected []");
    op.out.ndim = 0;
    CHECK_OK(tpu_op_check(&op));
    op = ok;
    op.aux[0].ndim = 1;
    op.aux[0].sizes[0] = 1;
    op.aux[0].strides[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "total_weight has sizes [1], expected []");
    op = ok;
    op.aux[0].data = out + 1;
    op.aux[0].storage = out;
    op.aux[0].storage_nbytes = sizeof out;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps out");
    op = ok;
    op.aux[0].data = x + 3;
    op.aux[0].storage = x;
    op.aux[0].storage_nbytes = sizeof x;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "aux[0] overlaps in[0]");
    /* 1-d input: a 0-d target. */
    op = ok;
    op.in[0].ndim = 1;
    op.in[0].sizes[0] = 5;
    op.in[0].strides[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "target has sizes [4], expected []");
    op.in[1].ndim = 0;
    op.out.ndim = 0;
    CHECK_OK(tpu_op_check(&op));
    /* Backward: grad 0-d unless NONE (then the target's shape). */
    op = ok;
    op.fn = TPU_LOSS_NLL_BACKWARD;
    op.n_in = 4;
    op.n_aux = 0;
    op.out = op.in[0];
    op.out.data = op.out.storage = out; /* [4, 5] needs 20 floats: out has 16 */
    op.out.storage_nbytes = sizeof out;
    op.aux[0] = (tpu_tensor){0};
    op.in[0] = (tpu_tensor){.data = total, .sizes = {4}, .strides = {0}, .ndim = 1, .dtype = F32,
                            .storage = total, .storage_nbytes = sizeof total};
    op.in[3] = (tpu_tensor){.data = total + 1, .ndim = 0, .dtype = F32, .storage = total,
                            .storage_nbytes = sizeof total};
    CHECK_REFUSED(&op, TPU_ERR_OUT_OF_BOUNDS, "out");
    op.out.sizes[0] = 3;
    op.in[1].sizes[0] = 3;
    op.in[0].sizes[0] = 3;
    CHECK_OK(tpu_op_check(&op));
    tpu_op bok = op;
    op.n_aux = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux is 1 (expected 0)");
    op = bok;
    op.in[0].sizes[0] = 2;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "grad has sizes [2], expected [3]");
    op = bok;
    op.p.loss.reduction = TPU_LOSS_REDUCE_SUM;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "grad has sizes [3], expected []");
    op = bok;
    op.in[3].ndim = 1;
    op.in[3].sizes[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "total_weight has sizes [1], expected []");
    op = bok;
    op.out.dtype = F64;
    op.out.sizes[0] = 1;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "target has sizes [3], expected [1]");
    op = bok;
    op.fn = TPU_LOSS_COUNT;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "has no function 2");
}

int main(void) {
    index_refusals();
    loss_refusals();
    index_errors();
    nll_errors();
    nll_uint8_targets();
    embedding_known();
    nll_known();
    test_select();
    test_gather();
    test_embedding();
    test_nll();
    printf("index and loss: %d cases x %d modes x %d thread counts\n", g_cases,
           (int)N_MODES, (int)N_NTHS);
    return check_report();
}
