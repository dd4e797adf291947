/* The fused-eager planner (src/fuse): which groups it forms for given
 * record sequences, which values it keeps out of memory, its limits, and
 * that running its groups tile by tile leaves memory exactly as running
 * the records one by one does. Then the same through a stream in fused
 * mode: held records run at sync points, errors name the user's op. */
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

/* Runs every cluster of a plan, all its tiles, on this thread. */
static tpu_status run_all(const tpu_fuse_plan *p, void *scratch, int *failed) {
    tpu_status first = TPU_OK;
    for (int c = 0; c < p->n_clusters; c++) {
        tpu_status st = tpu_fuse_run_tiles(p, c, scratch, 0, p->clusters[c].n_work, failed);
        if (first == TPU_OK)
            first = st;
    }
    return first;
}

/* Runs every cluster's work items in three shares, the last share first:
 * items are independent (parts share no written storage, tiles no
 * element), so any order leaves the same bytes. */
static tpu_status run_all_out_of_order(const tpu_fuse_plan *p, void *scratch, int *failed) {
    tpu_status first = TPU_OK;
    for (int c = 0; c < p->n_clusters; c++) {
        int64_t n = p->clusters[c].n_work;
        for (int share = 2; share >= 0; share--) {
            tpu_status st = tpu_fuse_run_tiles(p, c, scratch, n * share / 3, n * (share + 1) / 3, failed);
            if (first == TPU_OK)
                first = st;
        }
    }
    return first;
}

/* y = (x + 1) * 2 - 1 with the temporaries freed as PyTorch frees them. */
static void test_chain_groups_and_elides(void) {
    enum { N = 5000 };
    float *x = malloc(N * 4), *t1 = malloc(N * 4), *t2 = malloc(N * 4), *y = malloc(N * 4);
    int64_t nb = N * 4;
    tpu_tensor X = vec(x, N, TPU_DTYPE_F32), T1 = vec(t1, N, TPU_DTYPE_F32),
               T2 = vec(t2, N, TPU_DTYPE_F32), Y = vec(y, N, TPU_DTYPE_F32);
    tpu_op a = binary_scalar(TPU_BINARY_ADD, T1, X, 1), b = binary_scalar(TPU_BINARY_MUL, T2, T1, 2),
           c = binary_scalar(TPU_BINARY_SUB, Y, T2, 1);
    tpu_fuse_entry e[] = {rec(&a), rec(&b), freed(t1, nb), rec(&c), freed(t2, nb)};
    CHECK(tpu_fuse_fusable(&a) && tpu_fuse_fusable(&b) && tpu_fuse_fusable(&c));
    CHECK(tpu_fuse_plan_group(e, 5, &g_plan) == 5);
    CHECK(g_plan.n_steps == 3 && g_plan.n_views == 4);
    /* t1 and t2 die inside the group: kept in scratch. x is only read, y lives on. */
    CHECK(g_plan.steps[0].slot[0] >= 0 && g_plan.steps[1].slot[0] >= 0);
    CHECK(g_plan.steps[1].slot[1] == g_plan.steps[0].slot[0]);
    CHECK(g_plan.steps[2].slot[1] == g_plan.steps[1].slot[0]);
    CHECK(g_plan.steps[2].slot[0] == -1 && g_plan.steps[0].slot[1] == -1);
    CHECK(g_plan.n_elided == 2 && g_plan.bytes_elided == 2 * nb);
    CHECK(g_plan.n_clusters == 1 && g_plan.clusters[0].numel == N);
    CHECK(g_plan.clusters[0].ndim == 1 && g_plan.clusters[0].n_tiles >= 1);
    CHECK(g_plan.clusters[0].tile_elems <= TPU_FUSE_TILE_MAX);

    /* Without the marks nothing dies: every value is written. */
    tpu_fuse_entry kept[] = {rec(&a), rec(&b), rec(&c)};
    CHECK(tpu_fuse_plan_group(kept, 3, &g_plan) == 3 && g_plan.n_elided == 0);
    for (int i = 0; i < 3; i++)
        CHECK(g_plan.steps[i].slot[0] == -1);

    /* A value overwritten in the group dies too: x += 1 three times in place. */
    tpu_op inc = binary_scalar(TPU_BINARY_ADD, X, X, 1);
    tpu_fuse_entry inplace[] = {rec(&inc), rec(&inc), rec(&inc)};
    CHECK(tpu_fuse_plan_group(inplace, 3, &g_plan) == 3 && g_plan.n_steps == 3);
    CHECK(g_plan.n_views == 1 && g_plan.n_elided == 2 && g_plan.steps[2].slot[0] == -1);
    CHECK(g_plan.steps[0].slot[1] == -1 && g_plan.steps[1].slot[1] == g_plan.steps[0].slot[0]);
    free(x), free(t1), free(t2), free(y);
}

/* Which blocks a group never writes: allocated and freed inside it with
 * every value in scratch. Those pairs never count as allocated. */
static void test_unwritten_blocks(void) {
    enum { N = 5000 };
    float *x = malloc(N * 4), *t1 = malloc(N * 4), *t2 = malloc(N * 4), *y = malloc(N * 4);
    int64_t nb = N * 4;
    tpu_tensor X = vec(x, N, TPU_DTYPE_F32), T1 = vec(t1, N, TPU_DTYPE_F32),
               T2 = vec(t2, N, TPU_DTYPE_F32), Y = vec(y, N, TPU_DTYPE_F32);
    tpu_op a = binary_scalar(TPU_BINARY_ADD, T1, X, 1), b = binary_scalar(TPU_BINARY_MUL, T2, T1, 2),
           c = binary_scalar(TPU_BINARY_SUB, Y, T2, 1);
    bool unwritten[16];
    tpu_fuse_entry e[] = {allocated(t1, nb), rec(&a), allocated(t2, nb), rec(&b),
                          freed(t1, nb),     rec(&c), freed(t2, nb),     allocated(y, nb)};
    CHECK(tpu_fuse_plan_group(e, 8, &g_plan) == 8 && g_plan.n_elided == 2);
    tpu_fuse_unwritten_blocks(&g_plan, e, 8, unwritten);
    const bool want[] = {true, false, true, false, true, false, true, false};
    for (int i = 0; i < 8; i++)
        CHECK(unwritten[i] == want[i]);

    /* A free that may not pair (the block was used on another stream), a
     * release (another stream's work may read it), a value that reaches
     * memory, or a free whose allocation came before the group: counted. */
    tpu_fuse_entry kinds[] = {allocated(t1, nb), rec(&a), allocated(t2, nb), rec(&b),
                              freed(t1, nb),     rec(&c), freed(t2, nb)};
    kinds[4].pairs = false;
    kinds[6].kind = TPU_FUSE_RELEASED;
    CHECK(tpu_fuse_plan_group(kinds, 7, &g_plan) == 7);
    tpu_fuse_unwritten_blocks(&g_plan, kinds, 7, unwritten);
    for (int i = 0; i < 7; i++)
        CHECK(!unwritten[i]);
    /* t1 read by a step of another element count (another cluster):
     * the value stays in memory though t1 is freed in the group. */
    tpu_op half = binary_scalar(TPU_BINARY_ADD, view2(y, nb, TPU_DTYPE_F32, 0, 50, 50, 50, 1),
                                view2(t1, nb, TPU_DTYPE_F32, 0, 50, 50, 50, 1), 1);
    tpu_fuse_entry written[] = {allocated(t1, nb), rec(&a), rec(&half), freed(t1, nb)};
    CHECK(tpu_fuse_plan_group(written, 4, &g_plan) == 4 && g_plan.n_clusters == 2);
    CHECK(g_plan.steps[0].slot[0] == -1);
    tpu_fuse_unwritten_blocks(&g_plan, written, 4, unwritten);
    CHECK(!unwritten[0] && !unwritten[3]);
    tpu_fuse_entry before[] = {rec(&a), rec(&b), freed(t1, nb), rec(&c), freed(t2, nb)};
    CHECK(tpu_fuse_plan_group(before, 5, &g_plan) == 5 && g_plan.n_elided == 2);
    tpu_fuse_unwritten_blocks(&g_plan, before, 5, unwritten);
    for (int i = 0; i < 5; i++)
        CHECK(!unwritten[i]);
    free(x), free(t1), free(t2), free(y);
}

/* Where groups stop: another element count, a view that overlaps a
 * written one without being it, a family the planner does not take. */
static void test_group_boundaries(void) {
    enum { N = 4096 };
    float *buf = calloc(2 * N, 4), *o = calloc(2 * N, 4);
    int64_t nb = 2 * N * 4;
    tpu_tensor A = view2(buf, nb, TPU_DTYPE_F32, 0, 64, 64, 64, 1);
    tpu_tensor O = view2(o, nb, TPU_DTYPE_F32, 0, 64, 64, 64, 1);
    tpu_op w = binary_scalar(TPU_BINARY_ADD, O, A, 1);
    /* Another numel on memory of its own: a second cluster. */
    tpu_op small = binary_scalar(TPU_BINARY_ADD, view2(o, nb, TPU_DTYPE_F32, N, 32, 64, 64, 1),
                                 view2(buf, nb, TPU_DTYPE_F32, N, 32, 64, 64, 1), 1);
    tpu_fuse_entry e1[] = {rec(&w), rec(&w), rec(&small), rec(&w)};
    CHECK(tpu_fuse_plan_group(e1, 4, &g_plan) == 4 && g_plan.n_steps == 4);
    CHECK(g_plan.n_clusters == 2 && g_plan.steps[2].cluster == 1 && g_plan.steps[3].cluster == 0);
    CHECK(g_plan.clusters[0].n_steps == 3 && g_plan.clusters[1].n_steps == 1);
    /* Another numel reading what the first cluster wrote: clusters run in
     * order, so the read follows the write; the value stays in memory. */
    tpu_op reads_o = binary_scalar(TPU_BINARY_ADD, view2(buf, nb, TPU_DTYPE_F32, N, 32, 64, 64, 1),
                                   view2(o, nb, TPU_DTYPE_F32, 0, 32, 64, 64, 1), 1);
    tpu_fuse_entry e1b[] = {rec(&w), rec(&reads_o), rec(&w), freed(o, nb)};
    CHECK(tpu_fuse_plan_group(e1b, 2, &g_plan) == 2 && g_plan.n_clusters == 2);
    CHECK(g_plan.steps[0].slot[0] == -1);
    /* ... but writing it again in the first cluster would run before the
     * read: the group ends there. */
    CHECK(tpu_fuse_plan_group(e1b, 4, &g_plan) == 2);
    /* A later cluster writing what an earlier one reads ends it too. */
    tpu_op writes_a = binary_scalar(TPU_BINARY_ADD, view2(buf, nb, TPU_DTYPE_F32, 0, 32, 64, 64, 1),
                                    view2(o, nb, TPU_DTYPE_F32, N, 32, 64, 64, 1), 1);
    tpu_fuse_entry e1c[] = {rec(&w), rec(&writes_a)};
    CHECK(tpu_fuse_plan_group(e1c, 2, &g_plan) == 1);
    /* Reading O shifted by one element after writing O: not the same view. */
    tpu_op shifted = binary_scalar(TPU_BINARY_MUL, view2(o, nb, TPU_DTYPE_F32, N, 64, 64, 64, 1),
                                   view2(o, nb, TPU_DTYPE_F32, 1, 64, 64, 64, 1), 2);
    tpu_fuse_entry e2[] = {rec(&w), rec(&shifted)};
    CHECK(tpu_fuse_plan_group(e2, 2, &g_plan) == 1);
    /* Reading O transposed after writing it: conflict too. */
    tpu_op transposed = binary_scalar(TPU_BINARY_MUL, view2(o, nb, TPU_DTYPE_F32, N, 64, 64, 64, 1),
                                      view2(o, nb, TPU_DTYPE_F32, 0, 64, 64, 1, 64), 2);
    tpu_fuse_entry e3[] = {rec(&w), rec(&transposed)};
    CHECK(tpu_fuse_plan_group(e3, 2, &g_plan) == 1);
    /* ... but reading A transposed is fine: nobody writes A. */
    tpu_op readA = binary_scalar(TPU_BINARY_MUL, view2(o, nb, TPU_DTYPE_F32, N, 64, 64, 64, 1),
                                 view2(buf, nb, TPU_DTYPE_F32, 0, 64, 64, 1, 64), 2);
    tpu_fuse_entry e4[] = {rec(&w), rec(&readA)};
    CHECK(tpu_fuse_plan_group(e4, 2, &g_plan) == 2 && g_plan.n_steps == 2);
    /* The same memory as a 1-d view is the same view: merged dims are canonical. */
    tpu_op flat = binary_scalar(TPU_BINARY_MUL, vec(o + N, N, TPU_DTYPE_F32), vec(o, N, TPU_DTYPE_F32), 3);
    flat.out.storage = flat.in[0].storage = o;
    flat.out.storage_nbytes = flat.in[0].storage_nbytes = nb;
    tpu_fuse_entry e5[] = {rec(&w), rec(&flat)};
    CHECK(tpu_fuse_plan_group(e5, 2, &g_plan) == 2 && g_plan.n_views == 3);
    /* A storage made over part of another's memory (both in the group):
     * the planner does not reason across storages, it ends the group. */
    tpu_tensor inner = view2(o, nb, TPU_DTYPE_F32, N, 64, 64, 64, 1);
    inner.storage = o + N;
    inner.storage_nbytes = N * 4;
    tpu_op sub_storage = binary_scalar(TPU_BINARY_ADD, inner, A, 1);
    tpu_fuse_entry e6[] = {rec(&w), rec(&sub_storage)};
    CHECK(tpu_fuse_plan_group(e6, 2, &g_plan) == 1);
    /* Families outside the planner's. */
    tpu_op arange = fill_op(O, 0);
    arange.fn = TPU_FILL_ARANGE;
    tpu_op sum;
    memset(&sum, 0, sizeof sum);
    sum.code = TPU_OP_REDUCE;
    CHECK(tpu_fuse_fusable(&w) && !tpu_fuse_fusable(&arange) && !tpu_fuse_fusable(&sum));
    tpu_op fill = fill_op(O, 2);
    CHECK(tpu_fuse_fusable(&fill));
    free(buf), free(o);
}

/* A foreach step's shape: K tensors, each updated by its own records,
 * all reading one gradient G and the records of one function issued for
 * every tensor before the next function's. Each tensor's records form a
 * part (G is only read, so it joins nothing); a record writing what
 * another tensor's records read joins their parts. Run part by part, out
 * of order, the group leaves strict mode's bytes. */
static void test_parts(void) {
    enum { K = 5, N = 3000 };
    const int64_t nb = N * 4;
    float *P[K], *T[K], *Pr[K], *g[K];
    tpu_tensor tp[K], tt[K], tg[K];
    for (int k = 0; k < K; k++) {
        P[k] = malloc(nb), T[k] = malloc(nb), Pr[k] = malloc(nb), g[k] = malloc(nb);
        for (int64_t j = 0; j < N; j++) {
            P[k][j] = Pr[k][j] = (float)((j * (k + 3)) % 101) / 13.0f;
            g[k][j] = (float)((j + k) % 17) / 7.0f;
        }
        tp[k] = vec(P[k], N, TPU_DTYPE_F32);
        tt[k] = vec(T[k], N, TPU_DTYPE_F32);
        tg[k] = vec(g[k], N, TPU_DTYPE_F32);
    }
    tpu_op ops[3 * K];
    tpu_fuse_entry e[4 * K];
    int n = 0;
    for (int k = 0; k < K; k++)
        ops[k] = binary_scalar(TPU_BINARY_MUL, tp[k], tp[k], 0.9);
    for (int k = 0; k < K; k++)
        ops[K + k] = binary(TPU_BINARY_ADD, tt[k], tp[k], tg[k]);
    for (int k = 0; k < K; k++)
        ops[2 * K + k] = binary(TPU_BINARY_MUL, tp[k], tt[k], tt[k]);
    for (int i = 0; i < 3 * K; i++)
        e[n++] = rec(&ops[i]);
    for (int k = 0; k < K; k++)
        e[n++] = freed(T[k], nb);
    /* The reference: record by record, on copies. */
    for (int i = 0; i < 3 * K; i++) {
        tpu_op r = ops[i];
        tpu_tensor *ts[3] = {&r.out, &r.in[0], &r.in[1]};
        for (int t = 0; t < 3; t++)
            for (int k = 0; k < K; k++)
                if (ts[t]->data == (void *)P[k])
                    ts[t]->data = ts[t]->storage = Pr[k];
        CHECK_OK(tpu_op_run(&r, 0, 1));
    }
    CHECK(tpu_fuse_plan_group(e, n, &g_plan) == n && g_plan.n_clusters == 1);
    const tpu_fuse_cluster *cl = &g_plan.clusters[0];
    CHECK(cl->n_parts == K && cl->n_work == K * cl->n_tiles);
    /* Part k holds tensor k's three records, in stream order. */
    for (int k = 0; k < K; k++)
        for (int j = 0; j < 3; j++)
            CHECK(g_plan.order[g_plan.part_start[cl->first_part + k] + j] == j * K + k);
    void *scratch = aligned_alloc(64, (size_t)TPU_FUSE_SCRATCH_BYTES);
    int failed = -1;
    CHECK_OK(run_all_out_of_order(&g_plan, scratch, &failed));
    for (int k = 0; k < K; k++)
        CHECK(memcmp(P[k], Pr[k], nb) == 0);
    /* One more record that writes T[0] from P[1]... joins parts 0 and 1. */
    tpu_op join = binary(TPU_BINARY_ADD, tt[0], tp[1], tg[2]);
    tpu_fuse_entry e2[] = {rec(&ops[0]), rec(&ops[1]), rec(&ops[2]), rec(&join), rec(&ops[K])};
    CHECK(tpu_fuse_plan_group(e2, 5, &g_plan) == 5 && g_plan.clusters[0].n_parts == 2);
    /* A tensor only read, element by element, by records of two tensors
     * (one gradient for both) joins their parts: its tiles are read once.
     * One value read by both (a scalar broadcast) does not. */
    tpu_tensor one = tg[0];
    one.strides[0] = 0;
    tpu_op shared[] = {binary(TPU_BINARY_ADD, tp[0], tp[0], tg[4]), binary(TPU_BINARY_ADD, tp[1], tp[1], tg[4]),
                       binary(TPU_BINARY_ADD, tp[2], tp[2], one), binary(TPU_BINARY_ADD, tp[3], tp[3], one)};
    tpu_fuse_entry e3[] = {rec(&shared[0]), rec(&shared[1])}, e4[] = {rec(&shared[2]), rec(&shared[3])};
    CHECK(tpu_fuse_plan_group(e3, 2, &g_plan) == 2 && g_plan.clusters[0].n_parts == 1);
    CHECK(tpu_fuse_plan_group(e4, 2, &g_plan) == 2 && g_plan.clusters[0].n_parts == 2);
    free(scratch);
    for (int k = 0; k < K; k++)
        free(P[k]), free(T[k]), free(Pr[k]), free(g[k]);
}

static tpu_op reduce(int fn, tpu_tensor out, tpu_tensor in, uint32_t mask) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_REDUCE;
    op.fn = fn;
    op.n_in = 1;
    op.out = out;
    op.in[0] = in;
    op.p.reduce.mask = mask;
    return op;
}

/* LayerNorm's statistics written out in ops, over rows of x [R, D]:
 * mu = mean(x), d = x - mu, var = mean(d * d), s = sqrt(var + eps),
 * y = d / s. Buffers: x, mu, d, dd, var, ve, s, y (mu..s as [R, 1]). */
enum { LN_R = 301, LN_D = 97 };
typedef struct {
    float *x, *mu, *d, *dd, *var, *ve, *s, *y;
    tpu_op ops[7];
} ln_prog;

static void ln_build(ln_prog *g) {
    const int64_t nb = LN_R * LN_D * 4, rb = LN_R * 4;
    float **bufs[] = {&g->x, &g->mu, &g->d, &g->dd, &g->var, &g->ve, &g->s, &g->y};
    for (int i = 0; i < 8; i++)
        *bufs[i] = calloc(LN_R * LN_D, 4);
    for (int64_t j = 0; j < LN_R * LN_D; j++)
        g->x[j] = (float)((j * 7919) % 1013) / 97.0f - 5.0f;
    tpu_tensor X = view2(g->x, nb, TPU_DTYPE_F32, 0, LN_R, LN_D, LN_D, 1);
    tpu_tensor D = view2(g->d, nb, TPU_DTYPE_F32, 0, LN_R, LN_D, LN_D, 1);
    tpu_tensor DD = view2(g->dd, nb, TPU_DTYPE_F32, 0, LN_R, LN_D, LN_D, 1);
    tpu_tensor Y = view2(g->y, nb, TPU_DTYPE_F32, 0, LN_R, LN_D, LN_D, 1);
    /* [R, 1] values, and the same read broadcast along the rows. */
    tpu_tensor MU = view2(g->mu, rb, TPU_DTYPE_F32, 0, LN_R, 1, 1, 1);
    tpu_tensor MUb = view2(g->mu, rb, TPU_DTYPE_F32, 0, LN_R, LN_D, 1, 0);
    tpu_tensor VAR = view2(g->var, rb, TPU_DTYPE_F32, 0, LN_R, 1, 1, 1);
    tpu_tensor VE = view2(g->ve, rb, TPU_DTYPE_F32, 0, LN_R, 1, 1, 1);
    tpu_tensor S = view2(g->s, rb, TPU_DTYPE_F32, 0, LN_R, 1, 1, 1);
    tpu_tensor Sb = view2(g->s, rb, TPU_DTYPE_F32, 0, LN_R, LN_D, 1, 0);
    g->ops[0] = reduce(TPU_REDUCE_MEAN, MU, X, 2u);
    g->ops[1] = binary(TPU_BINARY_SUB, D, X, MUb);
    g->ops[2] = binary(TPU_BINARY_MUL, DD, D, D);
    g->ops[3] = reduce(TPU_REDUCE_MEAN, VAR, DD, 2u);
    g->ops[4] = binary_scalar(TPU_BINARY_ADD, VE, VAR, 1e-5);
    g->ops[5] = unary(TPU_UNARY_SQRT, S, VE);
    g->ops[6] = binary(TPU_BINARY_DIV, Y, D, Sb);
}

static void ln_free(ln_prog *g) {
    free(g->x), free(g->mu), free(g->d), free(g->dd), free(g->var), free(g->ve), free(g->s), free(g->y);
}

/* Reductions over rows join the group of their input's element count:
 * they and the element-wise records around them run on tiles of whole
 * rows, and give the record-by-record bytes. */
static void test_row_reductions(void) {
    ln_prog f, r;
    ln_build(&f);
    ln_build(&r);
    for (int i = 0; i < 7; i++)
        CHECK_OK(tpu_op_run(&r.ops[i], 0, 1));
    for (int i = 0; i < 7; i++)
        CHECK(tpu_fuse_fusable(&f.ops[i]));
    CHECK(tpu_fuse_row_length(&f.ops[0]) == LN_D && tpu_fuse_row_length(&f.ops[1]) == 0);
    /* dd dies after the second mean. var + eps and its square root are
     * row steps (one value per row, reading the mean's out), so y = d / s
     * reads s in the same cluster: one group, one cluster. */
    tpu_fuse_entry e[] = {rec(&f.ops[0]), rec(&f.ops[1]), rec(&f.ops[2]), rec(&f.ops[3]),
                          freed(f.dd, LN_R * LN_D * 4), rec(&f.ops[4]), rec(&f.ops[5]),
                          rec(&f.ops[6])};
    CHECK(tpu_fuse_plan_group(e, 8, &g_plan) == 8);
    CHECK(g_plan.n_steps == 7 && g_plan.n_clusters == 1);
    const tpu_fuse_cluster *rows = &g_plan.clusters[0];
    CHECK(rows->numel == LN_R * LN_D && rows->n_steps == 7 && rows->row_length == LN_D);
    CHECK(!g_plan.steps[3].row_step && g_plan.steps[4].row_step && g_plan.steps[5].row_step);
    CHECK(g_plan.steps[4].row_length == LN_D && !g_plan.steps[6].row_step);
    /* Each reads what the one before wrote, as the same view. */
    CHECK(g_plan.steps[4].view[1] == g_plan.steps[3].view[0]);
    CHECK(g_plan.steps[5].view[1] == g_plan.steps[4].view[0]);
    CHECK(g_plan.steps[6].view[2] == g_plan.steps[5].view[0]);
    /* Tiles of whole rows, more than one. */
    CHECK(rows->tile_elems % LN_D == 0 && rows->n_tiles > 1);
    /* d * d lives in scratch; the means' outs (read broadcast) never do. */
    CHECK(g_plan.steps[2].slot[0] >= 0 && g_plan.steps[3].slot[1] == g_plan.steps[2].slot[0]);
    CHECK(g_plan.steps[0].slot[0] == -1 && g_plan.steps[3].slot[0] == -1);
    /* x - mu reads mu as the view the mean wrote. */
    CHECK(g_plan.steps[1].view[2] == g_plan.steps[0].view[0]);
    void *scratch = aligned_alloc(64, (size_t)TPU_FUSE_SCRATCH_BYTES);
    int failed = -1;
    CHECK_OK(run_all_out_of_order(&g_plan, scratch, &failed));
    const int64_t nb = LN_R * LN_D * 4, rb = LN_R * 4;
    CHECK(memcmp(f.mu, r.mu, rb) == 0 && memcmp(f.var, r.var, rb) == 0);
    CHECK(memcmp(f.ve, r.ve, rb) == 0);
    CHECK(memcmp(f.s, r.s, rb) == 0 && memcmp(f.d, r.d, nb) == 0 && memcmp(f.y, r.y, nb) == 0);

    /* One row that is the whole cluster: one tile. */
    tpu_tensor X1 = vec(f.x, 5000, TPU_DTYPE_F32), T1 = vec(f.d, 5000, TPU_DTYPE_F32);
    tpu_op sq = binary(TPU_BINARY_MUL, T1, X1, X1), total = reduce(TPU_REDUCE_SUM, vec(f.mu, 1, TPU_DTYPE_F32), T1, 1u);
    tpu_fuse_entry one[] = {rec(&sq), rec(&total)};
    CHECK(tpu_fuse_plan_group(one, 2, &g_plan) == 2 && g_plan.n_clusters == 1);
    CHECK(g_plan.clusters[0].n_tiles == 1 && g_plan.clusters[0].tile_elems == 5000);

    /* What stays out: leading dims, rows longer than a tile, products,
     * rows not contiguous. */
    tpu_tensor X = view2(f.x, nb, TPU_DTYPE_F32, 0, LN_R, LN_D, LN_D, 1);
    tpu_tensor Xt = view2(f.x, nb, TPU_DTYPE_F32, 0, LN_R, LN_D, 1, LN_R);
    tpu_tensor cols = view2(f.mu, rb, TPU_DTYPE_F32, 0, 1, LN_D, LN_D, 1);
    tpu_tensor MU = view2(f.mu, rb, TPU_DTYPE_F32, 0, LN_R, 1, 1, 1);
    tpu_op lead = reduce(TPU_REDUCE_SUM, cols, X, 1u), prod = reduce(TPU_REDUCE_PROD, MU, X, 2u),
           strided = reduce(TPU_REDUCE_SUM, MU, Xt, 2u), amax = reduce(TPU_REDUCE_AMAX, MU, X, 2u);
    CHECK(!tpu_fuse_fusable(&lead) && !tpu_fuse_fusable(&prod) && !tpu_fuse_fusable(&strided));
    CHECK(tpu_fuse_fusable(&amax));
    float *big = calloc(TPU_FUSE_TILE_MAX + 1, 4);
    tpu_op long_row = reduce(TPU_REDUCE_SUM, vec(f.mu, 1, TPU_DTYPE_F32),
                             vec(big, TPU_FUSE_TILE_MAX + 1, TPU_DTYPE_F32), 1u);
    CHECK(!tpu_fuse_fusable(&long_row));
    free(big), free(scratch);
    ln_free(&f);
    ln_free(&r);
}

/* The limits: at most TPU_FUSE_MAX_OPS records, TPU_FUSE_MAX_SLOTS values
 * in scratch at once (the rest are written). */
static void test_limits(void) {
    enum { N = 1000, M = TPU_FUSE_MAX_OPS + 10 };
    float *x = calloc(N, 4);
    tpu_tensor X = vec(x, N, TPU_DTYPE_F32);
    tpu_op inc = binary_scalar(TPU_BINARY_ADD, X, X, 1);
    static tpu_fuse_entry e[M];
    for (int i = 0; i < M; i++)
        e[i] = rec(&inc);
    CHECK(tpu_fuse_plan_group(e, M, &g_plan) == TPU_FUSE_MAX_OPS);
    CHECK(g_plan.n_steps == TPU_FUSE_MAX_OPS);
    /* Twelve values alive at once, all freed at the end. */
    enum { K = 12 };
    float *t[K];
    tpu_op ops[K];
    tpu_fuse_entry f[2 * K];
    for (int i = 0; i < K; i++) {
        t[i] = calloc(N, 4);
        ops[i] = binary_scalar(TPU_BINARY_ADD, vec(t[i], N, TPU_DTYPE_F32), i ? vec(t[i - 1], N, TPU_DTYPE_F32) : X, 1);
        f[i] = rec(&ops[i]);
    }
    for (int i = 0; i < K; i++)
        f[K + i] = freed(t[i], N * 4);
    CHECK(tpu_fuse_plan_group(f, 2 * K, &g_plan) == 2 * K && g_plan.n_steps == K);
    CHECK(g_plan.n_elided == TPU_FUSE_MAX_SLOTS && g_plan.clusters[0].n_slots == TPU_FUSE_MAX_SLOTS);
    for (int i = 0; i < K; i++)
        free(t[i]);
    free(x);
}

/* ---------------------------------------------------- random programs */

static uint64_t g_rng = 12345;
static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}

/* The programs' matrices: R x C, in buffers with room for offset views. */
static int64_t R = 48, C = 70;
#define NB 6
#define BUF_ELEMS (R * C + 2 * C)

/* A random element-wise record over buffers b[0..NB) (f32 or bf16 each):
 * broadcasts of a row, transposed reads, offset views, in-place writes. */
static tpu_op random_record(void **b, const tpu_dtype *dt, int64_t *nbytes) {
    int o = (int)(rnd() % NB), i0 = (int)(rnd() % NB), i1 = (int)(rnd() % NB);
    int kind = (int)(rnd() % 7);
    int64_t rows = kind >= 5 ? R / 2 : R; /* another element count: another cluster */
    tpu_tensor out = view2(b[o], nbytes[o], dt[o], kind >= 5 ? C : 0, rows, C, C, 1);
    if (kind == 4) /* a strided out: every other column of a wider matrix */
        out = view2(b[o], nbytes[o], dt[o], 0, R / 2, C / 2, 2 * C, 2);
    tpu_tensor a = view2(b[i0], nbytes[i0], dt[i0], 0, rows, C, C, 1);
    if (kind == 4)
        a = view2(b[i0], nbytes[i0], dt[i0], 1, R / 2, C / 2, 2 * C, 2);
    if (kind == 5) /* every other row: rows contiguous, the whole strided */
        a = view2(b[i0], nbytes[i0], dt[i0], 0, R / 2, C, 2 * C, 1);
    if (kind == 1) /* a row broadcast down the columns */
        a = view2(b[i0], nbytes[i0], dt[i0], (int64_t)(rnd() % C), R, C, 0, 1);
    if (kind == 2) /* an offset view (reads past the first row) */
        a = view2(b[i0], nbytes[i0], dt[i0], C + (int64_t)(rnd() % C), R, C, C, 1);
    if (kind == 3) /* a transposed read of a [C, R] layout */
        a = view2(b[i0], nbytes[i0], dt[i0], 0, R, C, 1, R);
    if (i0 == o && kind != 0) /* the kernels' rule: out overlaps an input only as itself */
        a = out;
    tpu_tensor bb = kind == 4 ? view2(b[i1], nbytes[i1], dt[i1], C, R / 2, C / 2, 2 * C, 2)
                              : view2(b[i1], nbytes[i1], dt[i1], 0, rows, C, C, 1);
    if (i1 == o)
        bb = out;
    int f = (int)(rnd() % 4);
    if (f == 0)
        return binary(TPU_BINARY_ADD, out, a, bb);
    if (f == 1)
        return binary_scalar(TPU_BINARY_MUL, out, a, 1.0 + (rnd() % 7) / 8.0);
    if (f == 2)
        return unary(TPU_UNARY_TANH, out, a);
    tpu_op cp = copy_op(out, a);
    return cp;
}

/* Random programs run record by record and through the planner (in
 * groups, tile by tile, the records the stream would not hold run alone)
 * leave every buffer with the same bytes. Rows of 20,000 elements make
 * tiles cut rows: strided views then turn contiguous on a tile. */
static void random_programs(int64_t rows, int64_t cols, int programs) {
    R = rows;
    C = cols;
    void *scratch = aligned_alloc(64, (size_t)TPU_FUSE_SCRATCH_BYTES);
    void *ref[NB], *fus[NB];
    tpu_dtype dt[NB];
    int64_t nbytes[NB];
    int groups = 0, multi = 0, clustered = 0, parted = 0;
    for (int prog = 0; prog < programs; prog++) {
        for (int k = 0; k < NB; k++) {
            dt[k] = rnd() % 3 == 0 ? TPU_DTYPE_BF16 : TPU_DTYPE_F32;
            nbytes[k] = BUF_ELEMS * (int64_t)tpu_dtype_size(dt[k]);
            ref[k] = malloc((size_t)nbytes[k]);
            fus[k] = malloc((size_t)nbytes[k]);
            for (int64_t j = 0; j < BUF_ELEMS; j++) {
                float v = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
                if (dt[k] == TPU_DTYPE_BF16)
                    ((uint16_t *)ref[k])[j] = tpu_f32_to_bf16(v);
                else
                    ((float *)ref[k])[j] = v;
            }
            memcpy(fus[k], ref[k], (size_t)nbytes[k]);
        }
        enum { L = 24 };
        tpu_op rops[L], fops[L];
        int n = 1 + (int)(rnd() % L);
        for (int i = 0; i < n; i++) {
            rops[i] = random_record(ref, dt, nbytes);
            CHECK_OK(tpu_op_check(&rops[i]));
            CHECK_OK(tpu_op_run(&rops[i], 0, 1));
        }
        /* The same program over the other buffers. */
        tpu_fuse_entry e[L];
        for (int i = 0; i < n; i++) {
            fops[i] = rops[i];
            tpu_tensor *ts[4] = {&fops[i].out, &fops[i].in[0], &fops[i].in[1], NULL};
            for (int k = 0; ts[k]; k++) {
                if (!ts[k]->data)
                    continue;
                for (int m = 0; m < NB; m++)
                    if (ts[k]->storage == ref[m]) {
                        ts[k]->data = (char *)fus[m] + ((char *)ts[k]->data - (char *)ref[m]);
                        ts[k]->storage = fus[m];
                    }
            }
            e[i] = rec(&fops[i]);
        }
        for (int i = 0; i < n;) {
            /* As the stream does: a record it would not hold runs alone
             * and ends the held run. */
            if (!tpu_fuse_fusable(e[i].op)) {
                CHECK_OK(tpu_op_run(e[i].op, 0, 1));
                i++;
                continue;
            }
            int run = 1;
            while (i + run < n && tpu_fuse_fusable(e[i + run].op))
                run++;
            int taken = tpu_fuse_plan_group(&e[i], run, &g_plan);
            CHECK(taken >= 1 && taken <= run);
            groups++;
            if (g_plan.n_steps >= 2) {
                multi++;
                clustered += g_plan.n_clusters > 1;
                parted += g_plan.clusters[0].n_parts > 1;
                int failed = -1;
                CHECK_OK(prog % 2 ? run_all_out_of_order(&g_plan, scratch, &failed)
                                  : run_all(&g_plan, scratch, &failed));
            } else {
                for (int k = i; k < i + taken; k++)
                    CHECK_OK(tpu_op_run(e[k].op, 0, 1));
            }
            i += taken;
        }
        for (int k = 0; k < NB; k++) {
            CHECK(memcmp(ref[k], fus[k], (size_t)nbytes[k]) == 0);
            free(ref[k]);
            free(fus[k]);
        }
    }
    CHECK(multi > programs / 4 && groups > multi && clustered > programs / 20 &&
          parted > programs / 20);
    free(scratch);
}

static void test_random_programs_match_unfused(void) {
    random_programs(48, 70, 200);
    random_programs(4, 20000, 40);
}

/* ------------------------------------------------------------ streams */

/* Through a stream in fused mode: the chain runs at the sync, as one
 * group, with strict mode's bytes; a kernel error names its op. */
static void test_stream_fused_mode(void) {
    enum { N = 100000 };
    tpu_stream *s;
    CHECK_OK(tpu_stream_get(0, 0, &s));
    void *bx, *bt1, *bt2, *by;
    CHECK_OK(tpu_mem_alloc(0, N * 4, s, &bx));
    CHECK_OK(tpu_mem_alloc(0, N * 4, s, &by));
    float *host = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
    for (int i = 0; i < N; i++)
        host[i] = (float)i / 7.0f - 3.0f;
    tpu_tensor X = vec(bx, N, TPU_DTYPE_F32), Y = vec(by, N, TPU_DTYPE_F32);
    tpu_tensor H = vec(host, N, TPU_DTYPE_F32);
    tpu_op h2d = copy_op(X, H);
    h2d.code = TPU_OP_COPY_H2D;
    CHECK_OK(tpu_stream_submit(s, &h2d));
    /* The allocated bytes' peak while t1 and t2 live: both in strict
     * mode, none in fused mode, where the group never writes them. */
    int64_t rise[2], block_bytes = 0;
    tpu_mem_stats ms;
    for (int m = 0; m < 2; m++) {
        CHECK_OK(tpu_mode_set(m == 0 ? TPU_MODE_STRICT : TPU_MODE_FUSED));
        tpu_fusion_stats before, after;
        tpu_fusion_get_stats(&before);
        CHECK_OK(tpu_mem_reset_peak_stats(0));
        CHECK_OK(tpu_mem_get_stats(0, &ms));
        const int64_t base = ms.allocated_bytes[TPU_MEM_POOL_ALL].current;
        CHECK_OK(tpu_mem_alloc(0, N * 4, s, &bt1));
        CHECK_OK(tpu_mem_alloc(0, N * 4, s, &bt2));
        tpu_tensor T1 = vec(bt1, N, TPU_DTYPE_F32), T2 = vec(bt2, N, TPU_DTYPE_F32);
        tpu_op a = unary(TPU_UNARY_TANH, T1, X), b = binary(TPU_BINARY_MUL, T2, T1, X);
        tpu_op c = binary_scalar(TPU_BINARY_SUB, Y, T2, 0.25);
        CHECK_OK(tpu_stream_submit(s, &a));
        CHECK_OK(tpu_stream_submit(s, &b));
        CHECK_OK(tpu_mem_free(bt1));
        CHECK_OK(tpu_stream_submit(s, &c));
        CHECK_OK(tpu_mem_free(bt2));
        /* Polling query alone must see the held records finish. */
        bool done = false;
        for (int i = 0; i < 5000 && !done; i++) {
            CHECK_OK(tpu_stream_query(s, &done));
            if (!done)
                sleep_ms(1);
        }
        CHECK(done);
        tpu_op d2h = d2h_op(vec(m == 0 ? want : got, N, TPU_DTYPE_F32), Y);
        CHECK_OK(tpu_stream_submit(s, &d2h));
        CHECK_OK(tpu_stream_synchronize(s));
        tpu_fusion_get_stats(&after);
        CHECK_OK(tpu_mem_get_stats(0, &ms));
        CHECK(ms.allocated_bytes[TPU_MEM_POOL_ALL].current == base);
        rise[m] = ms.allocated_bytes[TPU_MEM_POOL_ALL].peak - base;
        if (m == 1) {
            CHECK(after.groups == before.groups + 1);
            CHECK(after.fused_records == before.fused_records + 3);
            CHECK(after.values_not_written == before.values_not_written + 2);
            CHECK(after.bytes_not_written == before.bytes_not_written + 2 * N * 4);
        } else {
            CHECK(after.groups == before.groups);
        }
    }
    CHECK(memcmp(want, got, N * 4) == 0);
    block_bytes = rise[0] / 2;
    CHECK(block_bytes >= N * 4 && rise[1] == 0);

    /* A fused-mode intermediate that reaches memory (a group of one, run
     * before the free) counts as in strict mode. */
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    CHECK_OK(tpu_mem_get_stats(0, &ms));
    const int64_t base = ms.allocated_bytes[TPU_MEM_POOL_ALL].current;
    CHECK_OK(tpu_mem_alloc(0, N * 4, s, &bt1));
    CHECK_OK(tpu_mem_get_stats(0, &ms)); /* counts the block the host holds */
    CHECK(ms.allocated_bytes[TPU_MEM_POOL_ALL].current == base + block_bytes);
    tpu_op a = unary(TPU_UNARY_TANH, vec(bt1, N, TPU_DTYPE_F32), X);
    CHECK_OK(tpu_stream_submit(s, &a));
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK_OK(tpu_mem_free(bt1));
    CHECK_OK(tpu_mem_get_stats(0, &ms));
    CHECK(ms.allocated_bytes[TPU_MEM_POOL_ALL].current == base);
    CHECK(ms.allocated_bytes[TPU_MEM_POOL_ALL].peak == base + block_bytes);

    /* An integer division by zero inside a group: the error names the div
     * and surfaces once, at the sync. */
    void *ia, *ib, *ic;
    CHECK_OK(tpu_mem_alloc(0, 4096 * 4, s, &ia));
    CHECK_OK(tpu_mem_alloc(0, 4096 * 4, s, &ib));
    CHECK_OK(tpu_mem_alloc(0, 4096 * 4, s, &ic));
    tpu_tensor IA = vec(ia, 4096, TPU_DTYPE_I32), IB = vec(ib, 4096, TPU_DTYPE_I32),
               IC = vec(ic, 4096, TPU_DTYPE_I32);
    tpu_op fa = fill_op(IA, 7), fb = fill_op(IB, 0), dv = div_trunc_op(IC, IA, IB);
    dv.name = "aten::div.Tensor_mode";
    CHECK(tpu_fuse_fusable(&dv));
    CHECK_OK(tpu_stream_submit(s, &fa));
    CHECK_OK(tpu_stream_submit(s, &fb));
    CHECK_OK(tpu_stream_submit(s, &dv));
    tpu_status st = tpu_stream_synchronize(s);
    CHECK(st == TPU_ERR_DIV_BY_ZERO);
    CHECK_CONTAINS(tpu_last_error_message(), "aten::div.Tensor_mode");
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
    tpu_mem_free(ia), tpu_mem_free(ib), tpu_mem_free(ic);
    tpu_mem_free(bx), tpu_mem_free(by);
    free(host), free(want), free(got);
}

int main(void) {
    test_chain_groups_and_elides();
    test_unwritten_blocks();
    test_group_boundaries();
    test_parts();
    test_row_reductions();
    test_limits();
    test_random_programs_match_unfused();
    test_stream_fused_mode();
    return check_report();
}
