/* ATTENTION's tiled backward (f32, f16, bf16 computing in f32), on the
 * pieces attention_fast.c shares. With P_ij = exp(s_ij - lse_i), dP =
 * g V^T, D_i = rowsum(g_i * out_i) and dS = P (dP - D):
 *   dV = P^T g,  dK = scale dS^T Q,  dQ = scale dS K.
 * The forward's output and logsumexp come with the record, so nothing of
 * the forward is recomputed: per pair of a query block and a key block,
 * two products form S^T and dP^T (transposed, queries in lanes, as in the
 * forward) and three more accumulate dV, dK and dQ^T: five, as a flash
 * backward does.
 *
 * Phase 0, per query block (b, h, qb): each row's D, and how to form its
 * probabilities, into scratch (attention.h: P = exp(s - c) * f; a row
 * whose logsumexp is too large to hold log l, as under a huge finite
 * mask, has its m and l recomputed here, so that its P still sums to 1).
 *
 * Phase 1, per key chunk (b, hk, c): the chunk's dK and dV, summed over
 * the group's query heads and then every query block that sees the chunk,
 * in that order; on the way, each query block's dQ^T over the chunk's
 * keys. With one chunk per (b, hk) that is the whole of dQ, stored at
 * once; with several (tpu_k_attn_bwd_chunks: few batches and heads),
 * each chunk's part goes to scratch.
 *
 * Phase 2, per query block: dq = scale * (sum of the chunks' parts, in
 * chunk order). Nothing to do with one chunk.
 *
 * Every value is computed by one share in a fixed order, so the bytes do
 * not depend on the thread count (nor, as in the forward, on the
 * instruction set). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "kernels_internal.h"
#include "strided.h"
#include "vecmath.h"

enum { QB = TPU_K_ATTN_QBLOCK, KB = TPU_K_ATTN_KBLOCK, QMAX = (QB + 31) / 32 * 32 };

static int64_t round_up(int64_t n, int64_t to) {
    return (n + to - 1) / to * to;
}

int64_t tpu_k_attn_bwd_chunks(const tpu_k_attn *a) {
    const int64_t nkb = (a->s + KB - 1) / KB;
    if (nkb <= 1 || a->b <= 0 || a->hk <= 0 || a->b >= TPU_K_ATTN_KV_UNITS ||
        a->hk >= TPU_K_ATTN_KV_UNITS || a->b * a->hk >= TPU_K_ATTN_KV_UNITS)
        return 1;
    const int64_t units = a->b * a->hk;
    int64_t n = (TPU_K_ATTN_KV_UNITS + units - 1) / units;
    n = n < TPU_K_ATTN_MAX_CHUNKS ? n : TPU_K_ATTN_MAX_CHUNKS;
    return n < nkb ? n : nkb;
}

void tpu_k_attn_chunk_keys(const tpu_k_attn *a, int64_t c, int64_t n, int64_t *k0, int64_t *k1) {
    int64_t b0, b1;
    tpu_k_split((a->s + KB - 1) / KB, (int)c, (int)n, &b0, &b1);
    *k0 = b0 * KB;
    *k1 = b1 * KB < a->s ? b1 * KB : a->s;
}

int64_t tpu_k_attn_fast_scratch_bytes(const tpu_op *op) {
    tpu_k_attn a;
    tpu_k_attn_init(&a, op);
    if (a.b < 0 || a.h < 0 || a.l < 0 || a.e < 0 || a.s < 0 || a.hk < 0)
        return 0; /* tpu_op_check refuses the record */
    const int64_t chunks = tpu_k_attn_bwd_chunks(&a);
    int64_t rows, per_row, bytes;
    /* Per query row: c, f, D, and E values of each chunk's dq part. */
    per_row = TPU_K_ATTN_STATS + (chunks > 1 ? chunks * a.e : 0);
    if (__builtin_mul_overflow(a.b, a.h, &rows) || __builtin_mul_overflow(rows, a.l, &rows) ||
        __builtin_mul_overflow(rows, per_row, &bytes) ||
        __builtin_mul_overflow(bytes, (int64_t)sizeof(float), &bytes))
        return INT64_MAX; /* more than any chip has: tpu_op_check refuses it */
    return bytes;
}

/* ------------------------------------------------------------- phase 0 */

typedef struct {
    float *grow, *orow; /* a row of g and of out [Ev] */
    float *qt;          /* the block's queries transposed [E][qpad] */
    float *st;          /* scores [KB][qpad] */
    float *kbuf;        /* a key block [KB][E] */
} stats_bufs;

static void stats_unit(const tpu_k_attn_ctx *ctx, const tpu_op *op, const stats_bufs *w,
                       int64_t b, int64_t h, int64_t qb) {
    const tpu_k_attn *a = &ctx->a;
    const int64_t i0 = qb * QB, rows = a->l - i0 < QB ? a->l - i0 : QB;
    float *cs = tpu_k_attn_fast_stats(op, a, 0), *fs = tpu_k_attn_fast_stats(op, a, 1);
    float *ds = tpu_k_attn_fast_stats(op, a, 2);
    bool recompute[QMAX] = {false}, any = false;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t at = tpu_k_attn_stat_index(a, b, h, i0 + r);
        /* D = g . out, summed in order of the value columns (products
         * and sums rounded apart: this code is the same on every ISA). */
        tpu_k_attn_pack_rows(a->g, b, h, i0 + r, 1, a->ev, w->grow, a->ev);
        tpu_k_attn_pack_rows(a->out, b, h, i0 + r, 1, a->ev, w->orow, a->ev);
        float d = 0.0f;
        for (int64_t c = 0; c < a->ev; c++) {
            const float t = w->grow[c] * w->orow[c];
            d = d + t;
        }
        const float lse = tpu_k_load_f32(tpu_k_ptr(a->lse, tpu_k_attn_lse_at(a->lse, b, h, i0 + r)),
                                         a->lse->dtype);
        cs[at] = lse;
        fs[at] = 1.0f;
        ds[at] = d;
        if (lse == -INFINITY) {
            /* Every key masked: P 0, no gradient. */
            cs[at] = INFINITY;
            fs[at] = ds[at] = 0.0f;
        } else if (isfinite(lse) && fabsf(lse) >= TPU_K_ATTN_LSE_EXACT) {
            recompute[r] = any = true;
        }
    }
    if (!any)
        return;
    float m[QMAX], l[QMAX];
    tpu_k_attn_pack_cols(a->q, b, h, i0, rows, a->e, w->qt, tpu_k_attn_lanes_for(ctx, rows));
    tpu_k_attn_row_stats(ctx, b, h, i0, rows, w->qt, w->st, w->kbuf, m, l);
    for (int64_t r = 0; r < rows; r++) {
        if (!recompute[r])
            continue;
        const int64_t at = tpu_k_attn_stat_index(a, b, h, i0 + r);
        if (m[r] == -INFINITY) {
            cs[at] = INFINITY;
            fs[at] = ds[at] = 0.0f;
        } else {
            cs[at] = m[r];
            fs[at] = 1.0f / l[r];
        }
    }
}

/* ------------------------------------------------------------- phase 1 */

typedef struct {
    float *kbuf, *vbuf; /* the chunk's keys and values as f32 rows [nkc][E], [nkc][Ev] */
    float *dk, *dv;     /* the chunk's dK and dV [nkc][epad], [nkc][evpad] */
    float *qt, *gt;     /* a query block's q and g transposed [E][qpad], [Ev][qpad] */
    float *qr, *gr;     /* and as rows [QB][epad], [QB][evpad] */
    float *st, *dpt;    /* P^T and dP^T, then dS^T, of a key block [KB][qpad] */
    float *dqt;         /* the block's dQ^T over the chunk [E][qpad] */
    float *row;         /* one dq, dk or dv row [max(E, Ev)] */
} kv_bufs;

/* Rows i0 .. i0 + rows - 1 of (b, h) of t as the B operand of a block
 * product (`pad` columns, width rounded up to nr): t's own rows when
 * they are aligned f32 with unit stride and need no padding, else a
 * zero-padded copy in buf. */
static const float *b_rows(const tpu_tensor *t, int64_t b, int64_t h, int64_t i0, int64_t rows,
                           int64_t width, int64_t pad, float *buf, int64_t *ld) {
    if (width == pad && t->dtype == TPU_DTYPE_F32 && (t->strides[3] == 1 || width <= 1) &&
        tpu_k_is_aligned(t))
        return tpu_k_attn_rows(t, b, h, i0, rows, width, buf, ld);
    tpu_k_attn_pack_rows(t, b, h, i0, rows, width, buf, pad);
    *ld = pad;
    return buf;
}

/* One query block [i0, i0 + rows) of head h against the chunk's keys
 * [k0, k1): adds to the chunk's dK and dV and leaves the block's dQ^T
 * over these keys in w->dqt. */
static void kv_block(const tpu_k_attn_ctx *ctx, const tpu_op *op, const kv_bufs *w,
                     const float *kp, int64_t ldk, const float *vp, int64_t ldv, int64_t b,
                     int64_t h, int64_t i0, int64_t rows, int64_t k0, int64_t k1) {
    const tpu_k_attn *a = &ctx->a;
    const int64_t e = a->e, ev = a->ev, nq = tpu_k_attn_lanes_for(ctx, rows), nr = ctx->uk->nr;
    const int64_t epad = round_up(e, nr), evpad = round_up(ev, nr);
    tpu_k_attn_pack_cols(a->q, b, h, i0, rows, e, w->qt, nq);
    tpu_k_attn_pack_cols(a->g, b, h, i0, rows, ev, w->gt, nq);
    int64_t ldq, ldg;
    const float *qr = b_rows(a->q, b, h, i0, rows, e, epad, w->qr, &ldq);
    const float *gr = b_rows(a->g, b, h, i0, rows, ev, evpad, w->gr, &ldg);
    /* The rows' c, f and D; padding lanes get P = 0 (c = +inf) and D 0. */
    float cs[QMAX], fs[QMAX], ds[QMAX];
    bool scaled = false;
    for (int64_t q = 0; q < nq; q++) {
        cs[q] = INFINITY;
        fs[q] = ds[q] = 0.0f;
    }
    for (int64_t q = 0; q < rows; q++) {
        const int64_t at = tpu_k_attn_stat_index(a, b, h, i0 + q);
        cs[q] = tpu_k_attn_fast_stats(op, a, 0)[at];
        fs[q] = tpu_k_attn_fast_stats(op, a, 1)[at];
        ds[q] = tpu_k_attn_fast_stats(op, a, 2)[at];
        scaled = scaled || fs[q] != 1.0f;
    }
    memset(w->dqt, 0, (size_t)(e * nq) * sizeof(float));
    /* Under is_causal, keys past the block's last query see none of it. */
    const int64_t kend = a->causal && i0 + rows < k1 ? i0 + rows : k1;
    for (int64_t j0 = k0; j0 < kend; j0 += KB) {
        const int64_t nk = kend - j0 < KB ? kend - j0 : KB;
        const float *kj = kp + (j0 - k0) * ldk, *vj = vp + (j0 - k0) * ldv;
        /* P^T = exp(scale K Q^T + mask - c) * f. */
        tpu_k_attn_gemm(ctx, nk, nq, e, kj, ldk, 1, w->qt, nq, w->st, nq, false);
        tpu_k_attn_scores(ctx, w->st, nq, b, h, i0, rows, nq, j0, nk, NULL);
        tpu_vm_exp_rows_f32(w->st, nq, nk, nq, cs, NULL);
        if (scaled)
            ctx->ln->mul(w->st, nq, nk, nq, fs);
        /* dP^T = V g^T, then dS^T = P^T (dP^T - D) in its place. */
        tpu_k_attn_gemm(ctx, nk, nq, ev, vj, ldv, 1, w->gt, nq, w->dpt, nq, false);
        ctx->ln->ds(w->st, w->dpt, nq, nk, nq, ds);
        /* dV += P^T g and dK += dS^T Q over the block's real queries;
         * dQ^T += K^T dS^T. */
        tpu_k_attn_gemm(ctx, nk, evpad, rows, w->st, nq, 1, gr, ldg, w->dv + (j0 - k0) * evpad,
                        evpad, true);
        tpu_k_attn_gemm(ctx, nk, epad, rows, w->dpt, nq, 1, qr, ldq, w->dk + (j0 - k0) * epad,
                        epad, true);
        tpu_k_attn_gemm(ctx, e, nq, nk, kj, 1, ldk, w->dpt, nq, w->dqt, nq, true);
    }
}

static void kv_unit(const tpu_k_attn_ctx *ctx, const tpu_op *op, const kv_bufs *w, int64_t b,
                    int64_t hk, int64_t c, int64_t chunks) {
    const tpu_k_attn *a = &ctx->a;
    const int64_t e = a->e, ev = a->ev, nr = ctx->uk->nr;
    const int64_t epad = round_up(e, nr), evpad = round_up(ev, nr);
    int64_t k0, k1, ldk, ldv;
    tpu_k_attn_chunk_keys(a, c, chunks, &k0, &k1);
    const int64_t nkc = k1 - k0;
    const float *kp = tpu_k_attn_rows(a->k, b, hk, k0, nkc, e, w->kbuf, &ldk);
    const float *vp = tpu_k_attn_rows(a->v, b, hk, k0, nkc, ev, w->vbuf, &ldv);
    memset(w->dk, 0, (size_t)(nkc * epad) * sizeof(float));
    memset(w->dv, 0, (size_t)(nkc * evpad) * sizeof(float));
    const int64_t nqb = tpu_k_attn_qblocks(a->l);
    const float scale = (float)a->scale;
    for (int64_t h = hk * a->group; h < (hk + 1) * a->group; h++)
        for (int64_t qb = 0; qb < nqb; qb++) {
            const int64_t i0 = qb * QB, rows = a->l - i0 < QB ? a->l - i0 : QB;
            if (!tpu_k_attn_block_sees(a, i0, rows, k0))
                continue;
            kv_block(ctx, op, w, kp, ldk, vp, ldv, b, h, i0, rows, k0, k1);
            const int64_t nq = tpu_k_attn_lanes_for(ctx, rows); /* w->dqt's row length */
            for (int64_t q = 0; q < rows; q++) {
                if (chunks == 1) {
                    for (int64_t x = 0; x < e; x++)
                        w->row[x] = scale * w->dqt[x * nq + q];
                    tpu_k_attn_store_row(a->dq, b, h, i0 + q, e, w->row);
                } else {
                    float *part = tpu_k_attn_dq_partial(op, a, c, b, h, i0 + q);
                    for (int64_t x = 0; x < e; x++)
                        part[x] = w->dqt[x * nq + q];
                }
            }
        }
    for (int64_t j = 0; j < nkc; j++) {
        for (int64_t x = 0; x < e; x++)
            w->row[x] = scale * w->dk[j * epad + x];
        tpu_k_attn_store_row(a->dk, b, hk, k0 + j, e, w->row);
        tpu_k_attn_store_row(a->dv, b, hk, k0 + j, ev, w->dv + j * evpad);
    }
}

/* ------------------------------------------------------------- phase 2 */

static void dq_unit(const tpu_k_attn_ctx *ctx, const tpu_op *op, float *row, int64_t b, int64_t h,
                    int64_t qb, int64_t chunks) {
    const tpu_k_attn *a = &ctx->a;
    const int64_t i0 = qb * QB, rows = a->l - i0 < QB ? a->l - i0 : QB, e = a->e;
    const float scale = (float)a->scale;
    for (int64_t q = 0; q < rows; q++) {
        bool first = true;
        for (int64_t c = 0; c < chunks; c++) {
            int64_t k0, k1;
            tpu_k_attn_chunk_keys(a, c, chunks, &k0, &k1);
            if (!tpu_k_attn_block_sees(a, i0, rows, k0))
                continue; /* phase 1 wrote no part for it */
            const float *part = tpu_k_attn_dq_partial(op, a, c, b, h, i0 + q);
            for (int64_t x = 0; x < e; x++)
                row[x] = first ? part[x] : row[x] + part[x];
            first = false;
        }
        for (int64_t x = 0; x < e; x++)
            row[x] = scale * row[x];
        tpu_k_attn_store_row(a->dq, b, h, i0 + q, e, row);
    }
}

/* ------------------------------------------------------------- driver */

/* Carves n buffers of sizes[i] floats (each on its own cache lines) out
 * of one allocation into bufs; returns it (NULL on failure). */
static float *carve(const int64_t *sizes, int n, float **bufs, int64_t *total) {
    *total = 0;
    for (int i = 0; i < n; i++)
        *total += round_up(sizes[i], 16);
    float *mem = tpu_k_attn_alloc(*total);
    float *p = mem;
    for (int i = 0; i < n && mem != NULL; i++) {
        bufs[i] = p;
        p += round_up(sizes[i], 16);
    }
    return mem;
}

tpu_status tpu_k_attn_backward_fast(const tpu_op *op, int phase, int ith, int nth) {
    tpu_k_attn_ctx ctx;
    tpu_k_attn_ctx_init(&ctx, op);
    const tpu_k_attn *a = &ctx.a;
    const int64_t e = a->e, ev = a->ev, nq = ctx.qpad, nr = ctx.uk->nr;
    const int64_t epad = round_up(e, nr), evpad = round_up(ev, nr);
    const int64_t chunks = tpu_k_attn_bwd_chunks(a), nqb = tpu_k_attn_qblocks(a->l);
    int64_t start, end, total = 0;
    if (phase == 2 && chunks == 1)
        return TPU_OK; /* phase 1 stored dq */
    /* Units claimed in chunks when the run has a counter (tpu_k_parts):
     * each writes only its own rows, so the bytes do not depend on who
     * takes which. */
    const int64_t units = phase == 1 ? a->b * a->hk * chunks : a->b * a->h * nqb;
    tpu_k_parts parts;
    tpu_k_parts_init(&parts, units, 1, ith, nth);
    if (!tpu_k_parts_next(&parts, &start, &end))
        return TPU_OK;
    float *mem = NULL;
    if (phase == 0) {
        const int64_t kmax = e > KB ? e : KB;
        const int64_t sizes[] = {ev, ev, e * nq, KB * nq, KB * e,
                                 tpu_k_attn_gemm_tmp_floats(&ctx, kmax)};
        float *b[6];
        mem = carve(sizes, 6, b, &total);
        if (mem != NULL) {
            const stats_bufs w = {b[0], b[1], b[2], b[3], b[4]};
            ctx.gemm_tmp = b[5];
            do
                for (int64_t u = start; u < end; u++)
                    stats_unit(&ctx, op, &w, u / (a->h * nqb), u / nqb % a->h, u % nqb);
            while (tpu_k_parts_next(&parts, &start, &end));
        }
    } else if (phase == 1) {
        /* The longest chunk: whole key blocks, at most S keys. */
        const int64_t nkb = (a->s + KB - 1) / KB;
        int64_t nkc = (nkb + chunks - 1) / chunks * KB;
        nkc = nkc < a->s ? nkc : a->s;
        int64_t kmax = e > ev ? e : ev;
        kmax = kmax > KB ? kmax : KB;
        kmax = kmax > QB ? kmax : QB;
        const int64_t sizes[] = {nkc * e,  nkc * ev,  nkc * epad, nkc * evpad, e * nq,
                                 ev * nq,  QB * epad, QB * evpad, KB * nq,     KB * nq,
                                 e * nq,   e > ev ? e : ev, tpu_k_attn_gemm_tmp_floats(&ctx, kmax)};
        float *b[13];
        mem = carve(sizes, 13, b, &total);
        if (mem != NULL) {
            const kv_bufs w = {b[0], b[1], b[2], b[3], b[4], b[5], b[6],
                               b[7], b[8], b[9], b[10], b[11]};
            ctx.gemm_tmp = b[12];
            do
                for (int64_t u = start; u < end; u++)
                    kv_unit(&ctx, op, &w, u / (a->hk * chunks), u / chunks % a->hk, u % chunks,
                            chunks);
            while (tpu_k_parts_next(&parts, &start, &end));
        }
    } else {
        const int64_t sizes[] = {e};
        float *b[1];
        mem = carve(sizes, 1, b, &total);
        if (mem != NULL)
            do
                for (int64_t u = start; u < end; u++)
                    dq_unit(&ctx, op, b[0], u / (a->h * nqb), u / nqb % a->h, u % nqb, chunks);
            while (tpu_k_parts_next(&parts, &start, &end));
    }
    if (mem == NULL)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "%s: cannot allocate %lld bytes of attention "
                             "buffers", tpu_k_op_label(op), (long long)(total * 4));
    free(mem);
    return TPU_OK;
}
