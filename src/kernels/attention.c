/* ATTENTION: scaled dot-product attention and its backward. This file
 * holds the op-table hooks (phases, scratch, dispatch to the reference
 * or tiled path) and the reference path; attention_fast.c (forward) and
 * attention_bwd.c (backward) hold the tiled path.
 *
 * The reference is the definition, row by row, in f64: a query row's
 * scores s_j = scale * (q . k_j) + mask_j (-inf where masked) are
 * recomputed on every pass over the keys instead of being stored, so it
 * needs no buffer that grows with S. Forward: pass 1 finds the row max m,
 * pass 2 the sum l of exp(s_j - m), then the output sum_j exp(s_j - m)
 * v_j / l accumulates in chunks of REF_CHUNK value columns (one more pass
 * per chunk), and the logsumexp is m + log(l). A row with every key
 * masked gives 0 and logsumexp -inf (PyTorch's _safe_softmax gives 0
 * there too).
 *
 * Backward, with P_ij = exp(s_ij - m_i) / l_i, dP_ij = g_i . v_j and
 * dS_ij = P_ij (dP_ij - D_i), D_i = sum_j P_ij dP_ij:
 *   dq_i = scale sum_j dS_ij k_j,
 *   dk_j = scale sum_{i, h in j's group} dS_ij q_i,
 *   dv_j = sum_{i, h in j's group} P_ij g_i.
 * The record also carries the forward's out and logsumexp; the
 * reference does not read them (the tiled path does), so that it checks
 * their use rather than repeats it.
 * Phase 0 computes every row's m, l and D into scratch (attention.h: not
 * the logsumexp m + log l, which loses log l when the scores are huge,
 * as under a finite mask of -FLT_MAX); phase 1 gives each
 * key row (b, hk, j) its dk and dv, summing over the group's query heads
 * and then the queries in order; phase 2 gives each query row its dq. So
 * every value is computed by one share in a fixed order, whatever the
 * thread count. */
#include "attention.h"

#include <math.h>

#include "kernels_internal.h"
#include "strided.h"

/* Value (or key) columns accumulated together by the reference. */
enum { REF_CHUNK = 64 };

void tpu_k_attn_init(tpu_k_attn *a, const tpu_op *op) {
    const bool fwd = op->fn == TPU_ATTENTION_FORWARD;
    const int base = fwd ? 0 : 1;
    a->q = &op->in[base];
    a->k = &op->in[base + 1];
    a->v = &op->in[base + 2];
    a->mask = tpu_tensor_is_absent(&op->in[base + 3]) ? NULL : &op->in[base + 3];
    a->g = fwd ? NULL : &op->in[0];
    a->out = fwd ? &op->out : &op->in[5];
    a->lse = fwd ? &op->aux[0] : &op->in[6];
    a->dq = fwd ? NULL : &op->out;
    a->dk = fwd ? NULL : &op->aux[0];
    a->dv = fwd ? NULL : &op->aux[1];
    a->b = a->q->sizes[0];
    a->h = a->q->sizes[1];
    a->l = a->q->sizes[2];
    a->e = a->q->sizes[3];
    a->hk = a->k->sizes[1];
    a->s = a->k->sizes[2];
    a->ev = a->v->sizes[3];
    a->group = a->hk > 0 ? a->h / a->hk : 1;
    a->scale = op->p.attn.scale;
    a->causal = op->p.attn.is_causal;
}

bool tpu_k_attn_fast_takes(const tpu_op *op) {
    tpu_k_attn a;
    tpu_k_attn_init(&a, op);
    const tpu_dtype dt = a.q->dtype;
    return (dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16) &&
           a.e <= TPU_K_ATTN_MAX_HEAD && a.ev <= TPU_K_ATTN_MAX_HEAD;
}

/* ------------------------------------------------------ reference path */

static inline double at4(const tpu_tensor *t, int64_t row, int64_t c) {
    return tpu_k_load_f64(tpu_k_ptr(t, row + c * t->strides[3]), t->dtype);
}

static inline void put4(const tpu_tensor *t, int64_t row, int64_t c, double v) {
    tpu_k_store_f64(tpu_k_ptr(t, row + c * t->strides[3]), t->dtype, v);
}

/* Score (b, h, i, j) in f64; -inf where the key is masked (whatever q . k
 * is, as a fused kernel that skips masked keys gives). */
static double ref_score(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!tpu_k_attn_visible(a, i, j))
        return -INFINITY;
    const double add = tpu_k_attn_mask_f64(a, b, h, i, j);
    if (add == -INFINITY)
        return -INFINITY;
    const int64_t qr = tpu_k_attn_row(a->q, b, h, i), kr = tpu_k_attn_row(a->k, b, h / a->group, j);
    double dot = 0.0;
    for (int64_t e = 0; e < a->e; e++)
        dot += at4(a->q, qr, e) * at4(a->k, kr, e);
    return a->scale * dot + add;
}

/* dP_ij = g_i . v_j in f64. */
static double ref_dp(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t gr = tpu_k_attn_row(a->g, b, h, i), vr = tpu_k_attn_row(a->v, b, h / a->group, j);
    double dot = 0.0;
    for (int64_t e = 0; e < a->ev; e++)
        dot += at4(a->g, gr, e) * at4(a->v, vr, e);
    return dot;
}

/* The largest score of row (b, h, i): -inf when every key is masked (or
 * there are none), NaN when a score is NaN. */
static double ref_row_max(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < a->s; j++) {
        const double x = ref_score(a, b, h, i, j);
        if (isnan(x))
            return x;
        if (x > m)
            m = x;
    }
    return m;
}

/* sum_j exp(s_j - m) of row (b, h, i). */
static double ref_row_sum(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i, double m) {
    double l = 0.0;
    for (int64_t j = 0; j < a->s; j++)
        l += exp(ref_score(a, b, h, i, j) - m);
    return l;
}

static void ref_forward_row(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i) {
    const int64_t orow = tpu_k_attn_row(a->out, b, h, i);
    const int64_t vhead = h / a->group;
    void *lse = tpu_k_ptr(a->lse, tpu_k_attn_lse_at(a->lse, b, h, i));
    const double m = ref_row_max(a, b, h, i);
    if (m == -INFINITY) {
        /* Every key masked: 0, as PyTorch's _safe_softmax gives. */
        for (int64_t c = 0; c < a->ev; c++)
            put4(a->out, orow, c, 0.0);
        tpu_k_store_f64(lse, a->lse->dtype, -INFINITY);
        return;
    }
    const double l = ref_row_sum(a, b, h, i, m);
    for (int64_t c0 = 0; c0 < a->ev; c0 += REF_CHUNK) {
        const int64_t n = a->ev - c0 < REF_CHUNK ? a->ev - c0 : REF_CHUNK;
        double acc[REF_CHUNK] = {0};
        for (int64_t j = 0; j < a->s; j++) {
            const double p = exp(ref_score(a, b, h, i, j) - m);
            const int64_t vr = tpu_k_attn_row(a->v, b, vhead, j);
            for (int64_t c = 0; c < n; c++)
                acc[c] += p * at4(a->v, vr, c0 + c);
        }
        for (int64_t c = 0; c < n; c++)
            put4(a->out, orow, c0 + c, acc[c] / l);
    }
    tpu_k_store_f64(lse, a->lse->dtype, m + log(l));
}

tpu_status tpu_k_attn_forward_ref(const tpu_op *op, int ith, int nth) {
    tpu_k_attn a;
    tpu_k_attn_init(&a, op);
    int64_t start, end;
    tpu_k_split(a.b * a.h * a.l, ith, nth, &start, &end);
    for (int64_t r = start; r < end; r++)
        ref_forward_row(&a, r / (a.h * a.l), r / a.l % a.h, r % a.l);
    return TPU_OK;
}

/* P_ij = exp(s_ij - m) / l from the row's max m and sum l, as the
 * forward normalises; 0 for an all-masked row (m -inf). */
static double ref_prob(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i, int64_t j, double m,
                       double l) {
    return m == -INFINITY ? 0.0 : exp(ref_score(a, b, h, i, j) - m) / l;
}

/* Phase 0: row (b, h, i)'s max, sum and D into scratch. */
static void ref_stats_row(const tpu_op *op, const tpu_k_attn *a, int64_t b, int64_t h, int64_t i) {
    const int64_t at = tpu_k_attn_stat_index(a, b, h, i);
    double *mx = tpu_k_attn_max_scratch(op) + at, *sm = tpu_k_attn_sum_scratch(op, a) + at;
    double *d = tpu_k_attn_d_scratch(op, a) + at;
    const double m = ref_row_max(a, b, h, i);
    if (m == -INFINITY) {
        *mx = -INFINITY;
        *sm = *d = 0.0;
        return;
    }
    const double l = ref_row_sum(a, b, h, i, m);
    double sum = 0.0;
    for (int64_t j = 0; j < a->s; j++)
        sum += exp(ref_score(a, b, h, i, j) - m) * ref_dp(a, b, h, i, j);
    *mx = m;
    *sm = l;
    *d = sum / l;
}

/* Phase 1: key row (b, hk, j)'s dk and dv, REF_CHUNK columns of each per
 * pass over the group's queries. */
static void ref_kv_row(const tpu_op *op, const tpu_k_attn *a, int64_t b, int64_t hk, int64_t j) {
    const double *mx = tpu_k_attn_max_scratch(op), *sm = tpu_k_attn_sum_scratch(op, a);
    const double *dd = tpu_k_attn_d_scratch(op, a);
    const int64_t kr = tpu_k_attn_row(a->dk, b, hk, j), vr = tpu_k_attn_row(a->dv, b, hk, j);
    const int64_t width = a->e > a->ev ? a->e : a->ev;
    for (int64_t c0 = 0; c0 < width; c0 += REF_CHUNK) {
        const int64_t nk = a->e - c0 < REF_CHUNK ? a->e - c0 : REF_CHUNK;
        const int64_t nv = a->ev - c0 < REF_CHUNK ? a->ev - c0 : REF_CHUNK;
        double acck[REF_CHUNK] = {0}, accv[REF_CHUNK] = {0};
        for (int64_t h = hk * a->group; h < (hk + 1) * a->group; h++)
            for (int64_t i = 0; i < a->l; i++) {
                const int64_t at = tpu_k_attn_stat_index(a, b, h, i);
                const double p = ref_prob(a, b, h, i, j, mx[at], sm[at]);
                if (p == 0.0)
                    continue; /* a masked pair adds nothing */
                const double ds = p * (ref_dp(a, b, h, i, j) - dd[at]);
                const int64_t qr = tpu_k_attn_row(a->q, b, h, i), gr = tpu_k_attn_row(a->g, b, h, i);
                for (int64_t c = 0; c < nk; c++)
                    acck[c] += ds * at4(a->q, qr, c0 + c);
                for (int64_t c = 0; c < nv; c++)
                    accv[c] += p * at4(a->g, gr, c0 + c);
            }
        for (int64_t c = 0; c < nk; c++)
            put4(a->dk, kr, c0 + c, a->scale * acck[c]);
        for (int64_t c = 0; c < nv; c++)
            put4(a->dv, vr, c0 + c, accv[c]);
    }
}

/* Phase 2: query row (b, h, i)'s dq. */
static void ref_q_row(const tpu_op *op, const tpu_k_attn *a, int64_t b, int64_t h, int64_t i) {
    const int64_t at = tpu_k_attn_stat_index(a, b, h, i);
    const double m = tpu_k_attn_max_scratch(op)[at], l = tpu_k_attn_sum_scratch(op, a)[at];
    const double d = tpu_k_attn_d_scratch(op, a)[at];
    const int64_t qr = tpu_k_attn_row(a->dq, b, h, i), hk = h / a->group;
    for (int64_t c0 = 0; c0 < a->e; c0 += REF_CHUNK) {
        const int64_t n = a->e - c0 < REF_CHUNK ? a->e - c0 : REF_CHUNK;
        double acc[REF_CHUNK] = {0};
        for (int64_t j = 0; j < a->s; j++) {
            const double p = ref_prob(a, b, h, i, j, m, l);
            if (p == 0.0)
                continue;
            const double ds = p * (ref_dp(a, b, h, i, j) - d);
            const int64_t kr = tpu_k_attn_row(a->k, b, hk, j);
            for (int64_t c = 0; c < n; c++)
                acc[c] += ds * at4(a->k, kr, c0 + c);
        }
        for (int64_t c = 0; c < n; c++)
            put4(a->dq, qr, c0 + c, a->scale * acc[c]);
    }
}

tpu_status tpu_k_attn_backward_ref(const tpu_op *op, int phase, int ith, int nth) {
    tpu_k_attn a;
    tpu_k_attn_init(&a, op);
    int64_t start, end;
    if (phase == 1) {
        tpu_k_split(a.b * a.hk * a.s, ith, nth, &start, &end);
        for (int64_t r = start; r < end; r++)
            ref_kv_row(op, &a, r / (a.hk * a.s), r / a.s % a.hk, r % a.s);
        return TPU_OK;
    }
    tpu_k_split(a.b * a.h * a.l, ith, nth, &start, &end);
    for (int64_t r = start; r < end; r++) {
        const int64_t b = r / (a.h * a.l), h = r / a.l % a.h, i = r % a.l;
        if (phase == 0)
            ref_stats_row(op, &a, b, h, i);
        else
            ref_q_row(op, &a, b, h, i);
    }
    return TPU_OK;
}

/* ------------------------------------------------------ op-table hooks */

static bool fast_chosen(const tpu_op *op) {
    return !tpu_kernels_get_reference() && tpu_k_attn_fast_takes(op);
}

tpu_status tpu_k_attention_ref(const tpu_op *op, int ith, int nth) {
    if (op->fn != TPU_ATTENTION_FORWARD)
        return tpu_set_error(TPU_ERR_INTERNAL, "%s: the backward runs in phases",
                             tpu_k_op_label(op));
    return tpu_k_attn_forward_ref(op, ith, nth);
}

tpu_status tpu_k_attention_fast(const tpu_op *op, int ith, int nth) {
    if (op->fn != TPU_ATTENTION_FORWARD)
        return tpu_set_error(TPU_ERR_INTERNAL, "%s: the backward runs in phases",
                             tpu_k_op_label(op));
    return tpu_k_attn_fast_takes(op) ? tpu_k_attn_forward_fast(op, ith, nth)
                                     : tpu_k_attn_forward_ref(op, ith, nth);
}

int tpu_k_attention_phases(const tpu_op *op) {
    return op->fn == TPU_ATTENTION_BACKWARD ? 3 : 1;
}

int64_t tpu_k_attention_scratch_bytes(const tpu_op *op) {
    /* Called before the family's own checks: read the sizes only if q, k
     * and v (in[1..3] backward) have the rank they need. */
    const tpu_tensor *q = &op->in[1];
    if (op->fn != TPU_ATTENTION_BACKWARD || q->ndim != 4 || op->in[2].ndim != 4 ||
        op->in[3].ndim != 4)
        return 0;
    int64_t rows, bytes;
    if (__builtin_mul_overflow(q->sizes[0], q->sizes[1], &rows) ||
        __builtin_mul_overflow(rows, q->sizes[2], &rows) ||
        __builtin_mul_overflow(rows, (int64_t)(TPU_K_ATTN_STATS * sizeof(double)), &bytes))
        return INT64_MAX; /* more than any chip has: tpu_op_check refuses it */
    if (rows < 0)
        return 0; /* refused by the checks */
    /* Either path may run the phases (the mode is read when they run):
     * room for the larger layout. */
    if (tpu_k_attn_fast_takes(op)) {
        const int64_t fast = tpu_k_attn_fast_scratch_bytes(op);
        bytes = fast > bytes ? fast : bytes;
    }
    return bytes;
}

tpu_status tpu_k_attention_run_phase(const tpu_op *op, int phase, int ith, int nth) {
    return fast_chosen(op) ? tpu_k_attn_backward_fast(op, phase, ith, nth)
                           : tpu_k_attn_backward_ref(op, phase, ith, nth);
}
