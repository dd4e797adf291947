/* ATTENTION's tiled path (flash-attention style) for f32, f16 and bf16,
 * computing in f32: the pieces its forward and backward share, and the
 * forward. The backward is in attention_bwd.c.
 *
 * Layout. A query block of TPU_K_ATTN_QBLOCK rows is one share unit of
 * the forward. Its scores against a block of up to TPU_K_ATTN_KBLOCK
 * keys are formed transposed, S^T = K Q^T, one row per key and one lane
 * per query (lanes padded to a multiple of the micro-kernel's nr), so
 * that the softmax statistics of the queries are lanes of vectors
 * (attention_lanes.c) and P^T is at once the B operand of the next
 * product, O^T += V^T P^T. Both products run on the GEMM micro-kernels
 * (gemm.h): A is read in place from the keys and values when they are
 * aligned f32 with unit-stride rows (rows of K; columns of V^T), else
 * from an f32 copy of the block; B is the queries transposed (packed once
 * per unit) or the probabilities. Only a query block x key block of
 * scores ever exists: the L x S matrix is never formed.
 *
 * Forward, per query block: for each key block (under is_causal only up
 * to the block's last query), the scores S^T = scale K Q^T + mask, then
 * the online softmax: each lane keeps its running max m, running sum l
 * and an unnormalised output column; a new block's max m' rescales both
 * by exp(m - m') before exp(S - m') and its product with V is added. At
 * the end the output is acc / l and the logsumexp m + log(l).
 *
 * Numerics: every product is the micro-kernel's single f32 fma chain per
 * output, in order of the inner index, continued across key blocks (so
 * products of f16/bf16 values are exact); exp is vecmath's; the steps in
 * between are single IEEE operations per element. The portable, AVX2 and
 * AVX-512 variants therefore give the same bytes, and fixed share units
 * make them independent of the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "convert.h"
#include "kernels_internal.h"
#include "strided.h"
#include "vecmath.h"

enum { QB = TPU_K_ATTN_QBLOCK, KB = TPU_K_ATTN_KBLOCK };

/* ------------------------------------------------------------- context */

void tpu_k_attn_ctx_init(tpu_k_attn_ctx *ctx, const tpu_op *op) {
    tpu_k_attn_init(&ctx->a, op);
    ctx->uk = tpu_k_gemm_config_get();
    ctx->ln = tpu_k_attn_lanes_get();
    const int64_t nr = ctx->uk->nr;
    ctx->qpad = (QB + nr - 1) / nr * nr;
    ctx->gemm_tmp = NULL;
}

int64_t tpu_k_attn_gemm_tmp_floats(const tpu_k_attn_ctx *ctx, int64_t kmax) {
    return kmax * ctx->uk->mr + (int64_t)ctx->uk->mr * ctx->uk->nr;
}

float *tpu_k_attn_alloc(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63u) & ~(size_t)63u;
    return aligned_alloc(64, bytes);
}

/* ------------------------------------------------------ block products */

void tpu_k_attn_gemm(const tpu_k_attn_ctx *ctx, int64_t m, int64_t n, int64_t kc, const float *a,
                     int64_t rsa, int64_t csa, const float *b, int64_t ldb, float *c, int64_t ldc,
                     bool accumulate) {
    const tpu_k_gemm_ukernel kernel = ctx->uk->kernel;
    const int64_t mr = ctx->uk->mr, nr = ctx->uk->nr;
    int64_t i0 = 0;
    /* Whole row tiles: A and C in place; each A tile meets every column
     * tile while it is in L1. */
    for (; i0 + mr <= m; i0 += mr)
        for (int64_t j0 = 0; j0 < n; j0 += nr)
            kernel(kc, a + i0 * rsa, rsa, csa, b + j0, ldb, c + i0 * ldc + j0, ldc, accumulate);
    if (i0 >= m)
        return;
    /* The last rows: A packed with zero rows to a whole tile, C through a
     * tile of its own, so that nothing past row m is read or written. */
    const int64_t rows = m - i0;
    float *ap = ctx->gemm_tmp, *ct = ctx->gemm_tmp + kc * mr;
    for (int64_t k = 0; k < kc; k++)
        for (int64_t i = 0; i < mr; i++)
            ap[k * mr + i] = i < rows ? a[(i0 + i) * rsa + k * csa] : 0.0f;
    for (int64_t j0 = 0; j0 < n; j0 += nr) {
        for (int64_t i = 0; i < mr; i++)
            for (int64_t j = 0; j < nr; j++)
                ct[i * nr + j] = accumulate && i < rows ? c[(i0 + i) * ldc + j0 + j] : 0.0f;
        kernel(kc, ap, 1, mr, b + j0, ldb, ct, nr, accumulate);
        for (int64_t i = 0; i < rows; i++)
            memcpy(c + (i0 + i) * ldc + j0, ct + i * nr, (size_t)nr * sizeof(float));
    }
}

/* ----------------------------------------------------- loads and stores */

/* Row r's `width` values of (b, head) of t as f32 into dst. */
static void load_row(const tpu_tensor *t, int64_t b, int64_t head, int64_t r, int64_t width,
                     float *dst) {
    const int64_t st = t->strides[3];
    const char *p = tpu_k_ptr(t, tpu_k_attn_row(t, b, head, r));
    if ((st == 1 || width <= 1) && tpu_k_is_aligned(t) && tpu_k_cvt_supported(t->dtype)) {
        tpu_k_cvt_to_f32(dst, p, t->dtype, width);
        return;
    }
    const int64_t bs = st * (int64_t)tpu_dtype_size(t->dtype);
    for (int64_t c = 0; c < width; c++)
        dst[c] = tpu_k_load_f32(p + c * bs, t->dtype);
}

void tpu_k_attn_store_row(const tpu_tensor *t, int64_t b, int64_t head, int64_t r, int64_t width,
                      const float *src) {
    const int64_t st = t->strides[3];
    char *p = tpu_k_ptr(t, tpu_k_attn_row(t, b, head, r));
    if ((st == 1 || width <= 1) && tpu_k_is_aligned(t) && tpu_k_cvt_supported(t->dtype)) {
        tpu_k_cvt_from_f32(p, t->dtype, src, width);
        return;
    }
    const int64_t bs = st * (int64_t)tpu_dtype_size(t->dtype);
    for (int64_t c = 0; c < width; c++)
        tpu_k_store_f32(p + c * bs, t->dtype, src[c]);
}

const float *tpu_k_attn_rows(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int64_t n,
                             int64_t width, float *buf, int64_t *ld) {
    if (t->dtype == TPU_DTYPE_F32 && (t->strides[3] == 1 || width <= 1) && tpu_k_is_aligned(t)) {
        *ld = t->strides[2];
        return (const float *)tpu_k_ptr(t, tpu_k_attn_row(t, b, head, r0));
    }
    for (int64_t r = 0; r < n; r++)
        load_row(t, b, head, r0 + r, width, buf + r * width);
    *ld = width;
    return buf;
}

void tpu_k_attn_pack_rows(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int64_t n,
                          int64_t width, float *dst, int64_t ld) {
    for (int64_t r = 0; r < n; r++) {
        load_row(t, b, head, r0 + r, width, dst + r * ld);
        if (ld > width)
            memset(dst + r * ld + width, 0, (size_t)(ld - width) * sizeof(float));
    }
}

void tpu_k_attn_pack_cols(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int64_t n,
                          int64_t width, float *dst, int64_t ld) {
    if (t->dtype == TPU_DTYPE_F32 && (t->strides[3] == 1 || width <= 1) && tpu_k_is_aligned(t)) {
        /* Read in place: a row at a time, scattered down the columns. */
        for (int64_t r = 0; r < n; r++) {
            const float *src = (const float *)tpu_k_ptr(t, tpu_k_attn_row(t, b, head, r0 + r));
            for (int64_t c = 0; c < width; c++)
                dst[c * ld + r] = src[c];
        }
    } else {
        float row[TPU_K_ATTN_MAX_HEAD];
        for (int64_t r = 0; r < n; r++) {
            load_row(t, b, head, r0 + r, width, row);
            for (int64_t c = 0; c < width; c++)
                dst[c * ld + r] = row[c];
        }
    }
    if (ld > n)
        for (int64_t c = 0; c < width; c++)
            memset(dst + c * ld + n, 0, (size_t)(ld - n) * sizeof(float));
}

/* --------------------------------------------------------------- scores */

/* The mask's values for key j0 + j (j < nk) of row i of (b, h) into
 * add[j] (f32; -inf where a bool mask is false). */
static void mask_row(const tpu_tensor *m, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t nk,
                     float *add) {
    const int64_t st = m->strides[3];
    const char *p = tpu_k_ptr(m, tpu_k_attn_row(m, b, h, i) + j0 * st);
    if (m->dtype == TPU_DTYPE_BOOL) {
        for (int64_t j = 0; j < nk; j++)
            add[j] = ((const unsigned char *)p)[j * st] ? 0.0f : -INFINITY;
        return;
    }
    const int64_t bs = st * (int64_t)tpu_dtype_size(m->dtype);
    for (int64_t j = 0; j < nk; j++)
        add[j] = tpu_k_load_f32(p + j * bs, m->dtype);
}

void tpu_k_attn_scores(const tpu_k_attn_ctx *ctx, float *s, int64_t ld, int64_t b, int64_t h,
                       int64_t i0, int64_t rows, int64_t nq, int64_t j0, int64_t nk, float *mx) {
    const tpu_k_attn *a = &ctx->a;
    const tpu_tensor *m = a->mask;
    /* Without a mask the max comes in the same pass as the scale. */
    ctx->ln->scale(s, ld, nk, nq, (float)a->scale, a->causal, j0 - i0, m == NULL ? mx : NULL);
    if (m == NULL)
        return;
    /* The mask counts only where is_causal left the key visible (a key
     * it hides is -inf whatever the mask says, as the reference does);
     * a -inf mask value hides the key whatever the score is. */
    float add[KB];
    if (m->strides[2] == 0) {
        /* One mask row for every query of the block (padding masks):
         * read once, added down the lanes. */
        mask_row(m, b, h, i0, j0, nk, add);
        for (int64_t j = 0; j < nk; j++) {
            float *row = s + j * ld;
            int64_t hidden = a->causal ? j + j0 - i0 : 0;
            hidden = hidden < 0 ? 0 : hidden > nq ? nq : hidden;
            const float v = add[j];
            if (v == -INFINITY)
                for (int64_t q = hidden; q < nq; q++)
                    row[q] = -INFINITY;
            else
                for (int64_t q = hidden; q < nq; q++)
                    row[q] = row[q] + v;
        }
    } else {
        for (int64_t q = 0; q < rows; q++) {
            int64_t lim = nk; /* keys [0, lim) of the block are visible to query q */
            if (a->causal && i0 + q - j0 + 1 < lim)
                lim = i0 + q - j0 + 1 > 0 ? i0 + q - j0 + 1 : 0;
            if (lim == 0)
                continue;
            mask_row(m, b, h, i0 + q, j0, lim, add);
            for (int64_t j = 0; j < lim; j++)
                s[j * ld + q] = add[j] == -INFINITY ? -INFINITY : s[j * ld + q] + add[j];
        }
    }
    if (mx != NULL)
        ctx->ln->max(s, ld, nk, nq, mx);
}

/* ------------------------------------------------------ online softmax */

/* Lanes of a query block's per-query values: qpad <= QMAX (nr <= 32). */
enum { QMAX = (QB + 31) / 32 * 32 };

/* One online-softmax step over a block of scores s (nk keys x nq lanes,
 * rows nq apart) whose lanes' new running maxima are mnew (the old
 * ones, m, and the block's: tpu_k_attn_scores gives them): the factors
 * alpha = exp(m - mnew) that rescale what the lanes have summed so far,
 * probabilities exp(s - mnew) in place of s, and the running sums l;
 * then m = mnew. A lane that has seen no visible key yet (mnew -inf)
 * subtracts 0 instead, so that its -inf scores give 0 rather than NaN,
 * and keeps alpha 1. */
static void online_step(float *s, int64_t nk, int64_t nq, float *m, const float *mnew, float *l,
                        float *alpha) {
    float diff[QMAX] = {0}, sub[QMAX] = {0}, sum[QMAX];
    for (int64_t q = 0; q < nq; q++) {
        const bool none = mnew[q] == -INFINITY;
        diff[q] = none ? 0.0f : m[q] - mnew[q];
        sub[q] = none ? 0.0f : mnew[q];
    }
    tpu_vm_f32(TPU_VM_EXP, alpha, diff, nq);
    tpu_vm_exp_rows_f32(s, nq, nk, nq, sub, sum);
    for (int64_t q = 0; q < nq; q++) {
        const float kept = l[q] * alpha[q];
        l[q] = kept + sum[q];
        m[q] = mnew[q];
    }
}

/* Keys a query block [i0, i0 + rows) may see: all S, or under is_causal
 * those up to its last query. */
static int64_t keys_seen(const tpu_k_attn *a, int64_t i0, int64_t rows) {
    return a->causal && i0 + rows < a->s ? i0 + rows : a->s;
}

void tpu_k_attn_row_stats(const tpu_k_attn_ctx *ctx, int64_t b, int64_t h, int64_t i0,
                          int64_t rows, const float *qt, float *st, float *kbuf, float *m,
                          float *l) {
    const tpu_k_attn *a = &ctx->a;
    const int64_t nq = tpu_k_attn_lanes_for(ctx, rows), kend = keys_seen(a, i0, rows);
    float alpha[QMAX], mnew[QMAX];
    for (int64_t q = 0; q < nq; q++) {
        m[q] = -INFINITY;
        l[q] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < kend; j0 += KB) {
        const int64_t nk = kend - j0 < KB ? kend - j0 : KB;
        int64_t ldk;
        const float *kp = tpu_k_attn_rows(a->k, b, h / a->group, j0, nk, a->e, kbuf, &ldk);
        tpu_k_attn_gemm(ctx, nk, nq, a->e, kp, ldk, 1, qt, nq, st, nq, false);
        memcpy(mnew, m, (size_t)nq * sizeof(float));
        tpu_k_attn_scores(ctx, st, nq, b, h, i0, rows, nq, j0, nk, mnew);
        online_step(st, nk, nq, m, mnew, l, alpha);
    }
}

/* ------------------------------------------------------------- forward */

typedef struct {
    float *qt;   /* the block's queries transposed [E][qpad] */
    float *st;   /* scores, then probabilities [KB][qpad] */
    float *ot;   /* unnormalised output, transposed [Ev][qpad] */
    float *kbuf; /* keys as f32 rows [cap][E], when not read in place */
    float *vbuf; /* values [cap][Ev], likewise */
    float *orow; /* one output row [Ev] */
    /* With cap >= S, kbuf and vbuf hold rows [0, ready) of (cb, chk): a
     * share's units run through the query blocks of a head in order, so
     * each head is converted once, not once per block. Longer sequences
     * (cap == KB) convert each key block as it comes. */
    int64_t cap, cb, chk, ready;
} fwd_bufs;

/* Most floats of the f32 copy of a head's keys and values a forward
 * share keeps (4 MiB: S = 4096 at E = Ev = 128); longer heads are
 * converted block by block. */
enum { HEAD_CACHE_FLOATS = 1 << 20 };

static bool f32_in_place(const tpu_tensor *t, int64_t width) {
    return t->dtype == TPU_DTYPE_F32 && (t->strides[3] == 1 || width <= 1) && tpu_k_is_aligned(t);
}

/* Keys and values [j0, j0 + nk) of (b, hk) as f32 rows: in place for
 * aligned f32, else the share's converted copy (w->cap >= S: of the
 * head, extended as far as needed; else of this block). */
static void kv_rows(const tpu_k_attn *a, fwd_bufs *w, int64_t b, int64_t hk, int64_t j0,
                    int64_t nk, const float **kp, int64_t *ldk, const float **vp, int64_t *ldv) {
    if (w->cap < a->s) {
        *kp = tpu_k_attn_rows(a->k, b, hk, j0, nk, a->e, w->kbuf, ldk);
        *vp = tpu_k_attn_rows(a->v, b, hk, j0, nk, a->ev, w->vbuf, ldv);
        return;
    }
    const int64_t kend = j0 + nk;
    if (w->cb != b || w->chk != hk) {
        w->cb = b;
        w->chk = hk;
        w->ready = 0;
    }
    if (kend > w->ready) {
        if (!f32_in_place(a->k, a->e))
            tpu_k_attn_pack_rows(a->k, b, hk, w->ready, kend - w->ready, a->e,
                                 w->kbuf + w->ready * a->e, a->e);
        if (!f32_in_place(a->v, a->ev))
            tpu_k_attn_pack_rows(a->v, b, hk, w->ready, kend - w->ready, a->ev,
                                 w->vbuf + w->ready * a->ev, a->ev);
        w->ready = kend;
    }
    /* n = 0: where the rows are (t itself, or the copy), converting nothing. */
    *kp = tpu_k_attn_rows(a->k, b, hk, j0, 0, a->e, w->kbuf + j0 * a->e, ldk);
    *vp = tpu_k_attn_rows(a->v, b, hk, j0, 0, a->ev, w->vbuf + j0 * a->ev, ldv);
}

static void forward_unit(const tpu_k_attn_ctx *ctx, fwd_bufs *w, int64_t b, int64_t h,
                         int64_t qb) {
    const tpu_k_attn *a = &ctx->a;
    const int64_t i0 = qb * QB, rows = a->l - i0 < QB ? a->l - i0 : QB;
    const int64_t hk = h / a->group, e = a->e, ev = a->ev, nq = tpu_k_attn_lanes_for(ctx, rows);
    float m[QMAX], l[QMAX], alpha[QMAX], mnew[QMAX];
    tpu_k_attn_pack_cols(a->q, b, h, i0, rows, e, w->qt, nq);
    for (int64_t q = 0; q < nq; q++) {
        m[q] = -INFINITY;
        l[q] = 0.0f;
    }
    memset(w->ot, 0, (size_t)(ev * nq) * sizeof(float));
    const int64_t kend = keys_seen(a, i0, rows);
    for (int64_t j0 = 0; j0 < kend; j0 += KB) {
        const int64_t nk = kend - j0 < KB ? kend - j0 : KB;
        const float *kp, *vp;
        int64_t ldk, ldv;
        kv_rows(a, w, b, hk, j0, nk, &kp, &ldk, &vp, &ldv);
        /* S^T = K Q^T, then scores and the softmax step. */
        tpu_k_attn_gemm(ctx, nk, nq, e, kp, ldk, 1, w->qt, nq, w->st, nq, false);
        memcpy(mnew, m, (size_t)nq * sizeof(float));
        tpu_k_attn_scores(ctx, w->st, nq, b, h, i0, rows, nq, j0, nk, mnew);
        online_step(w->st, nk, nq, m, mnew, l, alpha);
        /* Rescale what the output has summed (nothing yet on the first
         * block), then O^T += V^T P^T. */
        if (j0 > 0)
            ctx->ln->mul(w->ot, nq, ev, nq, alpha);
        tpu_k_attn_gemm(ctx, ev, nq, nk, vp, 1, ldv, w->st, nq, w->ot, nq, true);
    }
    for (int64_t q = 0; q < rows; q++) {
        const bool none = m[q] == -INFINITY; /* every key masked: 0, lse -inf */
        for (int64_t c = 0; c < ev; c++)
            w->orow[c] = none ? 0.0f : w->ot[c * nq + q] / l[q];
        tpu_k_attn_store_row(a->out, b, h, i0 + q, ev, w->orow);
        const double lse = none ? -INFINITY : (double)m[q] + log((double)l[q]);
        tpu_k_store_f64(tpu_k_ptr(a->lse, tpu_k_attn_lse_at(a->lse, b, h, i0 + q)), a->lse->dtype,
                        (float)lse);
    }
}

tpu_status tpu_k_attn_forward_fast(const tpu_op *op, int ith, int nth) {
    tpu_k_attn_ctx ctx;
    tpu_k_attn_ctx_init(&ctx, op);
    const tpu_k_attn *a = &ctx.a;
    const int64_t nqb = tpu_k_attn_qblocks(a->l);
    /* Units (b, h, query block) claimed in chunks when the run has a
     * counter (tpu_k_parts): a causal head's later blocks cost more, and
     * a share on a slower core takes fewer. */
    const int64_t units = a->b * a->h * nqb;
    tpu_k_parts parts;
    tpu_k_parts_init(&parts, units, 1, ith, nth);
    int64_t start, end;
    if (!tpu_k_parts_next(&parts, &start, &end))
        return TPU_OK;
    const int64_t nq = ctx.qpad, e = a->e, ev = a->ev;
    const int64_t kmax = e > KB ? e : KB;
    const int64_t cap = a->s * (e + ev) <= HEAD_CACHE_FLOATS ? a->s : KB;
    const int64_t sizes[] = {e * nq, KB * nq, ev * nq, f32_in_place(a->k, e) ? 0 : cap * e,
                             f32_in_place(a->v, ev) ? 0 : cap * ev, ev,
                             tpu_k_attn_gemm_tmp_floats(&ctx, kmax)};
    int64_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += (sizes[i] + 15) / 16 * 16; /* each buffer on a cache line */
    float *mem = tpu_k_attn_alloc(total);
    if (mem == NULL)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "%s: cannot allocate %lld bytes of attention "
                             "buffers", tpu_k_op_label(op), (long long)(total * 4));
    float *bufs[sizeof sizes / sizeof sizes[0]];
    float *p = mem;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bufs[i] = p;
        p += (sizes[i] + 15) / 16 * 16;
    }
    fwd_bufs w = {bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5], cap, -1, -1, 0};
    ctx.gemm_tmp = bufs[6];
    do
        for (int64_t u = start; u < end; u++)
            forward_unit(&ctx, &w, u / (a->h * nqb), u / nqb % a->h, u % nqb);
    while (tpu_k_parts_next(&parts, &start, &end));
    free(mem);
    return TPU_OK;
}
