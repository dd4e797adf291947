/* Matmul groups (src/fuse/epilogue.c): which records join a product as
 * its epilogue, and that running the product with its epilogue on each
 * finished block leaves memory exactly as running the records one by one
 * does, for the product's every path (the packed GEMM with several row
 * panels and column blocks, the few-row path, the reference), dtype and
 * share order. Then the same through a stream in fused mode. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fuse.h"
#include "fuse_test.h"
#include "runtime_test.h"
#include "tpu/dtype.h"
#include "tpu/op.h"
#include "tpu/runtime.h"

static tpu_fuse_plan g_plan; /* large: not on the stack */
static tpu_fuse_mm_run g_run;

/* out = a @ b (+ bias, broadcast as its strides say). */
static tpu_op mm_op(tpu_tensor out, tpu_tensor a, tpu_tensor b, const tpu_tensor *bias) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_MATMUL;
    op.fn = bias ? TPU_MATMUL_ADDMM : TPU_MATMUL_MM;
    op.n_in = bias ? 3 : 2;
    op.out = out;
    op.in[0] = a;
    op.in[1] = b;
    if (bias)
        op.in[2] = *bias;
    op.p.mm.alpha = 1.0;
    op.p.mm.beta = 1.0;
    op.p.mm.precision = TPU_PRECISION_HIGHEST;
    return op;
}

static tpu_tensor mat(void *base, tpu_dtype dt, int64_t r, int64_t c) {
    return view2(base, r * c * (int64_t)tpu_dtype_size(dt), dt, 0, r, c, c, 1);
}

/* ------------------------------------------------------------ grouping */

static int plan(const tpu_fuse_entry *e, int n) {
    return tpu_fuse_plan_group(e, n, &g_plan);
}

static void test_what_joins_a_product(void) {
    enum { M = 6, K = 6, N = 6 };
    static float a[M * K], b[K * N], c[M * N], t1[M * N], y[M * N], x[M * N], z[M * N * 2];
    static float small[N];
    tpu_tensor A = mat(a, TPU_DTYPE_F32, M, K), B = mat(b, TPU_DTYPE_F32, K, N),
               C = mat(c, TPU_DTYPE_F32, M, N), T1 = mat(t1, TPU_DTYPE_F32, M, N),
               Y = mat(y, TPU_DTYPE_F32, M, N), X = mat(x, TPU_DTYPE_F32, M, N);
    tpu_op mm = mm_op(C, A, B, NULL), mm2 = mm_op(Y, A, B, NULL);
    tpu_op th = unary(TPU_UNARY_TANH, T1, C);
    tpu_op mul = binary(TPU_BINARY_MUL, Y, T1, C);

    /* The chain joins; the temporary freed inside the group is elided. */
    tpu_fuse_entry e1[] = {rec(&mm), rec(&th), rec(&mul), freed(t1, sizeof t1)};
    CHECK(plan(e1, 4) == 4);
    CHECK(g_plan.matmul && g_plan.n_steps == 3 && g_plan.mm_cols == N);
    CHECK(g_plan.n_elided == 1 && g_plan.steps[0].slot[0] < 0);

    /* A product only starts a group. */
    tpu_fuse_entry e2[] = {rec(&mm), rec(&mm2)};
    CHECK(plan(e2, 2) == 1 && g_plan.n_steps == 1);
    tpu_op th_x = unary(TPU_UNARY_TANH, T1, X);
    tpu_fuse_entry e3[] = {rec(&th_x), rec(&mm)};
    CHECK(plan(e3, 2) == 1 && g_plan.n_steps == 1 && !g_plan.matmul);

    /* Reading what the product reads is fine; writing it is not (other
     * blocks still read it). */
    tpu_op read_a = binary(TPU_BINARY_ADD, Y, A, C), write_a = binary_scalar(TPU_BINARY_ADD, A, C, 1);
    tpu_fuse_entry e4[] = {rec(&mm), rec(&read_a)};
    CHECK(plan(e4, 2) == 2 && g_plan.n_steps == 2);
    tpu_fuse_entry e5[] = {rec(&mm), rec(&write_a)};
    CHECK(plan(e5, 2) == 1);

    /* Out read through another view (its transpose) touches other blocks. */
    tpu_op read_ct = binary_scalar(TPU_BINARY_ADD, Y, view2(c, sizeof c, TPU_DTYPE_F32, 0, M, N, 1, M), 1);
    tpu_fuse_entry e6[] = {rec(&mm), rec(&read_ct)};
    CHECK(plan(e6, 2) == 1);

    /* A reduction, another element count, a column stride of 2: no. */
    tpu_op sum;
    memset(&sum, 0, sizeof sum);
    sum.code = TPU_OP_REDUCE;
    sum.fn = TPU_REDUCE_SUM;
    sum.n_in = 1;
    sum.out = view2(small, sizeof small, TPU_DTYPE_F32, 0, M, 1, 1, 1);
    sum.in[0] = C;
    sum.p.reduce.mask = 2;
    CHECK(tpu_fuse_fusable(&sum));
    tpu_fuse_entry e7[] = {rec(&mm), rec(&sum)};
    CHECK(plan(e7, 2) == 1);
    tpu_op other = unary(TPU_UNARY_TANH, vec(small, N, TPU_DTYPE_F32), vec(small, N, TPU_DTYPE_F32));
    tpu_fuse_entry e8[] = {rec(&mm), rec(&other)};
    CHECK(plan(e8, 2) == 1);
    tpu_op strided = binary(TPU_BINARY_ADD, Y, C, view2(z, sizeof z, TPU_DTYPE_F32, 0, M, N, 2 * N, 2));
    tpu_fuse_entry e9[] = {rec(&mm), rec(&strided)};
    CHECK(plan(e9, 2) == 1);

    /* Broadcast along rows (a bias) and along columns (a per-row scale) join. */
    tpu_op col = binary(TPU_BINARY_ADD, Y, C, view2(small, sizeof small, TPU_DTYPE_F32, 0, M, N, 0, 1));
    tpu_op row = binary(TPU_BINARY_MUL, Y, C, view2(small, sizeof small, TPU_DTYPE_F32, 0, M, N, 1, 0));
    tpu_fuse_entry e10[] = {rec(&mm), rec(&col), rec(&row)};
    CHECK(plan(e10, 3) == 3 && g_plan.n_steps == 3);

    /* A product whose out is transposed starts no group. */
    tpu_op mm_t = mm_op(view2(c, sizeof c, TPU_DTYPE_F32, 0, M, N, 1, M), A, B, NULL);
    tpu_fuse_entry e11[] = {rec(&mm_t), rec(&th)};
    CHECK(plan(e11, 2) == 1 && g_plan.n_steps == 0);

    /* At most TPU_FUSE_MM_MAX_STEPS epilogue steps. */
    enum { LONG = TPU_FUSE_MM_MAX_STEPS + 6 };
    static tpu_op steps[LONG];
    static tpu_fuse_entry e12[LONG + 1];
    e12[0] = rec(&mm);
    for (int i = 0; i < LONG; i++) {
        steps[i] = binary_scalar(TPU_BINARY_ADD, C, C, 1);
        e12[i + 1] = rec(&steps[i]);
    }
    CHECK(plan(e12, LONG + 1) == TPU_FUSE_MM_MAX_STEPS + 1);
}

/* ------------------------------------------------------------ results */

static uint64_t g_seed = 777;
static float rnd_unit(void) {
    g_seed = g_seed * 6364136223846793005u + 1442695040888963407u;
    return (float)((g_seed >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* Fills t (contiguous) with values in [-1, 1) through a converting copy. */
static void fill_random(tpu_tensor t) {
    int64_t n = t.sizes[0] * (t.ndim > 1 ? t.sizes[1] : 1);
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        h[i] = rnd_unit();
    tpu_tensor src = t;
    src.data = h;
    src.dtype = TPU_DTYPE_F32;
    src.storage = h;
    src.storage_nbytes = n * 4;
    tpu_op cp = copy_op(t, src);
    CHECK_OK(tpu_op_run(&cp, 0, 1));
    free(h);
}

/* One program: the product, then GELU's tanh formula in records with its
 * temporaries freed, an in-place update of the product's out, and (with
 * `broadcast`) a bias along rows and a scale along columns. */
typedef struct {
    int64_t m, k, n;
    tpu_dtype dt;
    bool addmm, broadcast;
    void *a, *b, *bias, *c, *t1, *t2, *t3, *y, *d, *r;
    tpu_op ops[16];
    tpu_fuse_entry e[24];
    int n_ops, n_e;
} prog;

static void *buf(int64_t n, tpu_dtype dt) {
    return calloc((size_t)n, tpu_dtype_size(dt));
}

static void prog_build(prog *g) {
    const int64_t m = g->m, k = g->k, n = g->n;
    const tpu_dtype dt = g->dt;
    const int64_t es = (int64_t)tpu_dtype_size(dt);
    g->a = buf(m * k, dt), g->b = buf(k * n, dt), g->bias = buf(n, dt), g->c = buf(m * n, dt);
    g->t1 = buf(m * n, dt), g->t2 = buf(m * n, dt), g->t3 = buf(m * n, dt), g->y = buf(m * n, dt);
    g->d = buf(n, dt), g->r = buf(m, dt);
    tpu_tensor A = mat(g->a, dt, m, k), B = mat(g->b, dt, k, n), C = mat(g->c, dt, m, n);
    tpu_tensor T1 = mat(g->t1, dt, m, n), T2 = mat(g->t2, dt, m, n), T3 = mat(g->t3, dt, m, n);
    tpu_tensor Y = mat(g->y, dt, m, n);
    tpu_tensor BIAS = view2(g->bias, n * es, dt, 0, m, n, 0, 1);
    tpu_tensor D = view2(g->d, n * es, dt, 0, m, n, 0, 1), R = view2(g->r, m * es, dt, 0, m, n, 1, 0);
    fill_random(A), fill_random(B), fill_random(vec(g->bias, n, dt));
    fill_random(vec(g->d, n, dt)), fill_random(vec(g->r, m, dt));
    int o = 0, e = 0;
#define OP(x) (g->ops[o] = (x), g->e[e++] = rec(&g->ops[o]), o++)
#define FREE(p) (g->e[e++] = freed((p), (uint64_t)(m * n * es)))
    OP(mm_op(C, A, B, g->addmm ? &BIAS : NULL));
    OP(binary(TPU_BINARY_MUL, T1, C, C));
    OP(binary(TPU_BINARY_MUL, T1, T1, C));
    tpu_op fma = binary(TPU_BINARY_ADD, T2, C, T1);
    fma.p.ew.alpha.f = 0.044715;
    OP(fma);
    FREE(g->t1);
    OP(binary_scalar(TPU_BINARY_MUL, T2, T2, 0.7978845608028654));
    OP(unary(TPU_UNARY_TANH, T3, T2));
    FREE(g->t2);
    OP(binary_scalar(TPU_BINARY_ADD, T3, T3, 1.0));
    OP(binary(TPU_BINARY_MUL, Y, C, T3));
    FREE(g->t3);
    OP(binary_scalar(TPU_BINARY_MUL, Y, Y, 0.5));
    if (g->broadcast) {
        OP(binary(TPU_BINARY_ADD, Y, Y, D));
        OP(binary(TPU_BINARY_MUL, Y, Y, R));
    }
    OP(binary_scalar(TPU_BINARY_ADD, C, C, 1.0));
#undef OP
#undef FREE
    g->n_ops = o, g->n_e = e;
    for (int i = 0; i < o; i++)
        CHECK_OK(tpu_op_check(&g->ops[i]));
}

static void prog_free(prog *g) {
    void *p[] = {g->a, g->b, g->bias, g->c, g->t1, g->t2, g->t3, g->y, g->d, g->r};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

/* The program's results (out and Y) run record by record, then as a
 * group in nth shares (last share first), compared byte for byte. */
static void check_group(prog *g, int nth, void *scratch) {
    const size_t bytes = (size_t)(g->m * g->n) * tpu_dtype_size(g->dt);
    void *want_c = malloc(bytes), *want_y = malloc(bytes);
    for (int i = 0; i < g->n_ops; i++)
        CHECK_OK(tpu_op_run(&g->ops[i], 0, 1));
    memcpy(want_c, g->c, bytes);
    memcpy(want_y, g->y, bytes);
    memset(g->c, 0x5a, bytes), memset(g->y, 0x5a, bytes);
    CHECK(plan(g->e, g->n_e) == g->n_e);
    CHECK(g_plan.matmul && g_plan.n_steps == g->n_ops);
    /* T1, T2 and T3, each written twice, and every value of Y but the
     * last (each overwritten by the next step). */
    CHECK(g_plan.n_elided == 6 + (g->broadcast ? 3 : 1));
    void *scratches[3] = {scratch, scratch, scratch};
    tpu_fuse_mm_begin(&g_run, &g_plan, scratches);
    /* Both ways of running the epilogue are exercised: flat runs (a
     * block of whole rows as one run) and records cut to row pieces (a
     * broadcast operand has no flat run; neither has reference mode). */
    if (g->m > 1 && g->n > 1) { /* else a broadcast view is flat too */
        /* (f64 element-wise records have no flat runs.) */
        CHECK(g_run.spans ==
              (!g->broadcast && !tpu_kernels_get_reference() && g->dt != TPU_DTYPE_F64));
        CHECK(g_run.rows_flat == !g->broadcast);
    }
    for (int ith = nth - 1; ith >= 0; ith--)
        CHECK_OK(tpu_fuse_mm_share(&g_run, ith, nth));
    int failed = -1;
    CHECK_OK(tpu_fuse_mm_end(&g_run, nth, &failed));
    CHECK(failed == -1);
    bool same = memcmp(want_c, g->c, bytes) == 0 && memcmp(want_y, g->y, bytes) == 0;
    if (!same)
        fprintf(stderr, "  differs: m=%lld k=%lld n=%lld dtype=%s addmm=%d broadcast=%d nth=%d\n",
                (long long)g->m, (long long)g->k, (long long)g->n, tpu_dtype_name(g->dt),
                g->addmm, g->broadcast, nth);
    CHECK(same);
    free(want_c), free(want_y);
}

static void test_results_match_unfused(void) {
    void *scratch = aligned_alloc(64, (size_t)TPU_FUSE_SCRATCH_BYTES);
    /* The few-row path (m <= 8), column blocks of the packed GEMM (n past
     * its 2048), several row panels (m past 4 x 144), one column. */
    const int64_t shapes[][3] = {{5, 33, 70}, {37, 70, 2100}, {600, 20, 40}, {1, 16, 1}, {9, 1, 300}};
    const tpu_dtype dts[] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_F64};
    for (int ref = 0; ref < 2; ref++) {
        tpu_kernels_set_reference(ref == 1);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                for (int variant = 0; variant < 4; variant++) {
                    if (ref && shapes[s][0] * shapes[s][1] * shapes[s][2] > 100000)
                        continue; /* the reference triple loop is slow */
                    prog g = {.m = shapes[s][0], .k = shapes[s][1], .n = shapes[s][2],
                              .dt = dts[d], .addmm = variant & 1, .broadcast = variant >> 1};
                    prog_build(&g);
                    check_group(&g, 1, scratch);
                    check_group(&g, 3, scratch);
                    prog_free(&g);
                }
    }
    tpu_kernels_set_reference(false);
    free(scratch);
}

/* An unrelated chain of the product's shape joins the epilogue as a
 * part of its own, its steps interleaved with the product's: t = c + 1;
 * u = p * 2; r1 = t * 3; r2 = u - 1, with t and u freed. The epilogue
 * runs every step of every part on one piece, so the two parts' dying
 * values must not share a scratch slot (each would overwrite the other). */
static void test_unrelated_chain_in_epilogue(void) {
    void *scratch = aligned_alloc(64, (size_t)TPU_FUSE_SCRATCH_BYTES);
    const int64_t m = 37, k = 24, n = 70, bytes = m * n * 4;
    const tpu_dtype dt = TPU_DTYPE_F32;
    void *a = malloc((size_t)(m * k * 4)), *b = malloc((size_t)(k * n * 4)), *pp = malloc((size_t)bytes);
    void *c = malloc((size_t)bytes), *t = malloc((size_t)bytes), *u = malloc((size_t)bytes);
    void *r1 = malloc((size_t)bytes), *r2 = malloc((size_t)bytes);
    void *want1 = malloc((size_t)bytes), *want2 = malloc((size_t)bytes);
    tpu_tensor A = mat(a, dt, m, k), B = mat(b, dt, k, n), P = mat(pp, dt, m, n);
    tpu_tensor C = mat(c, dt, m, n), T = mat(t, dt, m, n), U = mat(u, dt, m, n);
    tpu_tensor R1 = mat(r1, dt, m, n), R2 = mat(r2, dt, m, n);
    fill_random(A), fill_random(B), fill_random(P);
    for (int ref = 0; ref < 2; ref++) {
        tpu_kernels_set_reference(ref == 1);
        tpu_op ops[5] = {mm_op(C, A, B, NULL), binary_scalar(TPU_BINARY_ADD, T, C, 1.0),
                         binary_scalar(TPU_BINARY_MUL, U, P, 2.0),
                         binary_scalar(TPU_BINARY_MUL, R1, T, 3.0),
                         binary_scalar(TPU_BINARY_SUB, R2, U, 1.0)};
        tpu_fuse_entry e[7];
        for (int i = 0; i < 5; i++) {
            CHECK_OK(tpu_op_check(&ops[i]));
            e[i] = rec(&ops[i]);
        }
        e[5] = freed(t, (uint64_t)bytes);
        e[6] = freed(u, (uint64_t)bytes);
        for (int i = 0; i < 5; i++)
            CHECK_OK(tpu_op_run(&ops[i], 0, 1));
        memcpy(want1, r1, (size_t)bytes), memcpy(want2, r2, (size_t)bytes);
        memset(r1, 0x5a, (size_t)bytes), memset(r2, 0x5a, (size_t)bytes);
        CHECK(plan(e, 7) == 7);
        CHECK(g_plan.matmul && g_plan.n_steps == 5 && g_plan.n_elided == 2);
        for (int nth = 1; nth <= 3; nth += 2) {
            void *scratches[3] = {scratch, scratch, scratch};
            tpu_fuse_mm_begin(&g_run, &g_plan, scratches);
            for (int ith = nth - 1; ith >= 0; ith--)
                CHECK_OK(tpu_fuse_mm_share(&g_run, ith, nth));
            int failed = -1;
            CHECK_OK(tpu_fuse_mm_end(&g_run, nth, &failed));
            CHECK(failed == -1);
            CHECK(memcmp(want1, r1, (size_t)bytes) == 0 && memcmp(want2, r2, (size_t)bytes) == 0);
        }
    }
    tpu_kernels_set_reference(false);
    void *all[] = {a, b, pp, c, t, u, r1, r2, want1, want2, scratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ------------------------------------------------------------ stream */

static void test_stream_fused_mode(void) {
    enum { M = 64, K = 48, N = 96 };
    tpu_stream *s;
    CHECK_OK(tpu_stream_get(0, 0, &s));
    void *ba, *bb, *bc, *bt, *by;
    CHECK_OK(tpu_mem_alloc(0, M * K * 4, s, &ba));
    CHECK_OK(tpu_mem_alloc(0, K * N * 4, s, &bb));
    CHECK_OK(tpu_mem_alloc(0, M * N * 4, s, &bc));
    CHECK_OK(tpu_mem_alloc(0, M * N * 4, s, &by));
    float *ha = malloc(M * K * 4), *hb = malloc(K * N * 4);
    float *want = malloc(M * N * 4), *got = malloc(M * N * 4);
    for (int i = 0; i < M * K; i++)
        ha[i] = rnd_unit();
    for (int i = 0; i < K * N; i++)
        hb[i] = rnd_unit();
    tpu_op up_a = copy_op(vec(ba, M * K, TPU_DTYPE_F32), vec(ha, M * K, TPU_DTYPE_F32));
    tpu_op up_b = copy_op(vec(bb, K * N, TPU_DTYPE_F32), vec(hb, K * N, TPU_DTYPE_F32));
    up_a.code = up_b.code = TPU_OP_COPY_H2D;
    CHECK_OK(tpu_stream_submit(s, &up_a));
    CHECK_OK(tpu_stream_submit(s, &up_b));
    tpu_tensor A = mat(ba, TPU_DTYPE_F32, M, K), B = mat(bb, TPU_DTYPE_F32, K, N);
    tpu_tensor C = mat(bc, TPU_DTYPE_F32, M, N), Y = mat(by, TPU_DTYPE_F32, M, N);
    for (int mode = 0; mode < 2; mode++) {
        CHECK_OK(tpu_mode_set(mode == 0 ? TPU_MODE_STRICT : TPU_MODE_FUSED));
        tpu_fusion_stats before, after;
        tpu_fusion_get_stats(&before);
        CHECK_OK(tpu_mem_alloc(0, M * N * 4, s, &bt));
        tpu_tensor T = mat(bt, TPU_DTYPE_F32, M, N);
        tpu_op mm = mm_op(C, A, B, NULL), th = unary(TPU_UNARY_TANH, T, C);
        tpu_op mul = binary(TPU_BINARY_MUL, Y, T, C);
        CHECK(tpu_fuse_fusable(&mm) && tpu_fuse_starts_group(&mm));
        CHECK_OK(tpu_stream_submit(s, &mm));
        CHECK_OK(tpu_stream_submit(s, &th));
        CHECK_OK(tpu_stream_submit(s, &mul));
        CHECK_OK(tpu_mem_free(bt));
        tpu_op d2h = d2h_op(vec(mode == 0 ? want : got, M * N, TPU_DTYPE_F32), vec(by, M * N, TPU_DTYPE_F32));
        CHECK_OK(tpu_stream_submit(s, &d2h));
        CHECK_OK(tpu_stream_synchronize(s));
        tpu_fusion_get_stats(&after);
        if (mode == 1) {
            CHECK(after.groups == before.groups + 1);
            CHECK(after.fused_records == before.fused_records + 3);
            CHECK(after.values_not_written == before.values_not_written + 1);
        } else {
            CHECK(after.groups == before.groups);
        }
    }
    CHECK(memcmp(want, got, M * N * 4) == 0);

    /* An epilogue step that fails (an integer division by zero of the
     * product's element count): the error names it, at the sync. */
    void *ia, *ib, *ic;
    CHECK_OK(tpu_mem_alloc(0, M * N * 4, s, &ia));
    CHECK_OK(tpu_mem_alloc(0, M * N * 4, s, &ib));
    CHECK_OK(tpu_mem_alloc(0, M * N * 4, s, &ic));
    tpu_tensor IA = mat(ia, TPU_DTYPE_I32, M, N), IB = mat(ib, TPU_DTYPE_I32, M, N),
               IC = mat(ic, TPU_DTYPE_I32, M, N);
    tpu_op fa = fill_op(IA, 7), fb = fill_op(IB, 0);
    CHECK_OK(tpu_stream_submit(s, &fa));
    CHECK_OK(tpu_stream_submit(s, &fb));
    tpu_op mm = mm_op(C, A, B, NULL), dv = div_trunc_op(IC, IA, IB);
    mm.name = "aten::mm";
    dv.name = "aten::div.Tensor_mode";
    CHECK_OK(tpu_stream_submit(s, &mm));
    CHECK_OK(tpu_stream_submit(s, &dv));
    CHECK(tpu_stream_synchronize(s) == TPU_ERR_DIV_BY_ZERO);
    CHECK_CONTAINS(tpu_last_error_message(), "aten::div.Tensor_mode");
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
    tpu_mem_free(ia), tpu_mem_free(ib), tpu_mem_free(ic);
    tpu_mem_free(ba), tpu_mem_free(bb), tpu_mem_free(bc), tpu_mem_free(by);
    free(ha), free(hb), free(want), free(got);
}

int main(void) {
    test_what_joins_a_product();
    test_results_match_unfused();
    test_unrelated_chain_in_epilogue();
    test_stream_fused_mode();
    return check_report();
}
