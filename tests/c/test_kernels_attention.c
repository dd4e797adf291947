/* ATTENTION kernel tests (scaled dot-product attention and its backward)
 * against loops written here in long double that form the whole score
 * matrix, from the definitions in op.h:
 *
 *   s_ij = scale q_i . k_j + mask_ij (-inf where a bool mask is false,
 *          where is_causal hides j > i, and where an additive mask is -inf)
 *   P_ij = exp(s_ij - m_i) / l_i,  lse_i = m_i + log l_i,  out_i = sum_j P_ij v_j
 *   a row whose keys are all masked: out 0, lse -inf, no gradient
 *   dP_ij = g_i . v_j,  D_i = sum_j P_ij dP_ij,  dS_ij = P_ij (dP_ij - D_i)
 *   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum dS_ij q_i,  dv_j = sum P_ij g_i
 * (dk and dv summed over the query heads h with h / (H / Hk) == j's head).
 *
 * Tolerances. The kernels compute in f32 (fast path, f32/f16/bf16) or f64
 * (reference path, and f64 operands), so an output may differ from the
 * exact value by one rounding to its dtype (tol_store) plus the compute
 * type's epsilon times the magnitudes that enter it: for out,
 * sum_j P_ij |v_j| times a factor that grows with the head size, the
 * score magnitude and the number of keys summed; for the gradients the
 * same with |dP| and |D| in place of the scores. These bounds are loose
 * (worst-case error growth), but a wrong index, a missed rescale or a
 * dropped block gives errors of the order of the magnitudes themselves.
 *
 * The backward reads the forward's out and logsumexp as the forward
 * stored them (the reference path ignores them and recomputes); the
 * tiled path's D = rowsum(g * out) then carries the rounding of out to
 * f16/bf16, which the tolerance adds (vctx.out_eps).
 *
 * Cases: odd shapes (L, S not multiples of the 64-query and 256-key
 * blocks, several of each, L != S, E != Ev, E not a multiple of 16,
 * L = 1, S = 1), keys cut into chunks for the backward, zero sizes (B,
 * L, S, E, Ev), head sizes above the tiled path's limit (reference
 * fallback), GQA, is_causal, bool and
 * additive masks with broadcast (stride 0) dims and with fully masked
 * rows, every float dtype, layouts (row-major, transposed, with gaps,
 * negative strides). Also rows hidden by a huge finite additive mask
 * (-FLT_MAX, -1e30, as padding masks built from finfo.min give): their
 * scores all round to the mask value in every precision, so the row's
 * softmax is uniform over those keys and its gradients must be those of
 * that softmax (a logsumexp m + log l that rounds back to m does not
 * normalise P). Each record runs in every kernel mode (reference,
 * and fast at each instruction-set level) with nth = 1, 2, 3, 7: within a
 * mode every run writes the same bytes, and the fast modes agree with
 * each other byte for byte. Also: a known answer, tpu_op_check's
 * refusals, and the phase and scratch contract. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "family_test.h"

/* ------------------------------------------------------------- cases */

typedef enum { M_NONE, M_BOOL_LS, M_BOOL_B11S, M_ADD_FULL, M_ADD_1H1S, M_COUNT } mask_kind;
static const char *const k_mask_names[M_COUNT] = {"none", "bool[L,S]", "bool[B,1,1,S]",
                                                  "add[B,H,L,S]", "add[1,H,1,S]"};

typedef struct {
    int64_t b, h, hk, l, s, e, ev;
    tpu_dtype dt;
    bool causal;
    mask_kind mask;
    bool dead_rows; /* the mask hides every key of some rows */
    double huge;    /* nonzero: a finite huge negative mask value (see make_mask) */
    double scale;
    int layout;     /* of q, k, v, g; outputs rotate from it */
} acase;

static void describe(const acase *c, char *buf, size_t cap) {
    snprintf(buf, cap, "attention B%lld H%lld Hk%lld L%lld S%lld E%lld Ev%lld %s %s%s mask %s%s "
             "huge %g scale %g",
             (long long)c->b, (long long)c->h, (long long)c->hk, (long long)c->l,
             (long long)c->s, (long long)c->e, (long long)c->ev, dt_str(c->dt),
             k_layout_names[c->layout], c->causal ? " causal" : "", k_mask_names[c->mask],
             c->dead_rows ? " (dead rows)" : "", c->huge, c->scale);
}

/* ---------------------------------------------------------- operands */

typedef struct {
    const acase *c;
    fbuf q, k, v, g, mask; /* mask.alloc NULL when there is none */
    int64_t msz[4];        /* the mask buffer's own sizes (1 where broadcast) */
    tpu_tensor mask_full;  /* the mask as the record sees it: [B, H, L, S] */
    fbuf out, lse, dq, dk, dv;
} operands;

static void make4(fbuf *b, tpu_dtype dt, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                  int layout) {
    const int64_t s[4] = {s0, s1, s2, s3};
    fb_make(b, dt, 4, s, layout);
}

/* Element (i0, i1, i2, i3) of a 4-d buffer. */
static unsigned char *at4(const fbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const tpu_tensor *t = &b->t;
    return (unsigned char *)t->data + (i0 * t->strides[0] + i1 * t->strides[1] +
                                       i2 * t->strides[2] + i3 * t->strides[3]) *
                                          (int64_t)t_size(t->dtype);
}

static double get4(const fbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return t_read_f(at4(b, i0, i1, i2, i3), b->t.dtype);
}

static void fill_random(fbuf *b, double lo, double hi) {
    const int64_t n = t_numel(&b->t);
    for (int64_t i = 0; i < n; i++)
        fb_set(b, i, lo + (hi - lo) * t_unit());
}

/* The mask's value at (b, h, i, j) as the definition adds it. */
static long double mask_add(const operands *o, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (o->c->mask == M_NONE)
        return 0;
    const int64_t *m = o->msz;
    const unsigned char *p = at4(&o->mask, m[0] > 1 ? b : 0, m[1] > 1 ? h : 0, m[2] > 1 ? i : 0,
                                 j);
    if (o->mask.t.dtype == BOOL)
        return p[0] ? 0 : -INFINITY;
    return t_read_f(p, o->mask.t.dtype);
}

static void make_mask(operands *o) {
    const acase *c = o->c;
    int64_t *m = o->msz;
    m[0] = m[1] = m[2] = 1;
    m[3] = c->s;
    tpu_dtype dt = BOOL;
    switch (c->mask) {
    case M_NONE: return;
    case M_BOOL_LS: m[2] = c->l; break;
    case M_BOOL_B11S: m[0] = c->b; break;
    case M_ADD_FULL: m[0] = c->b, m[1] = c->h, m[2] = c->l, dt = c->dt; break;
    case M_ADD_1H1S: m[1] = c->h; dt = F32; break; /* an f32 mask with any q, as PyTorch allows */
    default: return;
    }
    make4(&o->mask, dt, m[0], m[1], m[2], m[3], L_CONTIG);
    const int64_t n = t_numel(&o->mask.t);
    for (int64_t x = 0; x < n; x++) {
        const int64_t i0 = x / (m[1] * m[2] * m[3]), i1 = x / (m[2] * m[3]) % m[1];
        const int64_t i2 = x / m[3] % m[2];
        double v = dt == BOOL ? (t_unit() < 0.75) : 4 * t_unit() - 2;
        if (dt != BOOL && t_unit() < 0.15)
            v = -INFINITY;
        /* With c->huge, some keys of every row take the huge value too. */
        if (c->huge != 0 && dt != BOOL && t_unit() < 0.15)
            v = c->huge;
        /* Dead rows: every key hidden for query rows 1 and 3 (mod 4) of a
         * mask with a query dim, else for batch 1 or head 1; with c->huge,
         * hidden mostly by the huge value (the rest -inf). */
        bool dead = m[2] > 1 ? i2 % 4 == 1 || i2 % 4 == 3 : i0 == 1 || i1 == 1;
        if (c->dead_rows && dead)
            v = dt == BOOL ? 0 : c->huge != 0 && t_unit() < 0.85 ? c->huge : -INFINITY;
        fb_set(&o->mask, x, v);
    }
    /* The record's view: [B, H, L, S], stride 0 in the broadcast dims. */
    o->mask_full = o->mask.t;
    const int64_t full[4] = {c->b, c->h, c->l, c->s};
    for (int d = 0; d < 4; d++) {
        o->mask_full.sizes[d] = full[d];
        if (m[d] == 1 && full[d] != 1)
            o->mask_full.strides[d] = 0;
    }
}

static void make_operands(operands *o, const acase *c) {
    memset(o, 0, sizeof *o);
    o->c = c;
    const int lay = c->layout, lay2 = (c->layout + 1) % L_COUNT, lay3 = (c->layout + 2) % L_COUNT;
    make4(&o->q, c->dt, c->b, c->h, c->l, c->e, lay);
    make4(&o->k, c->dt, c->b, c->hk, c->s, c->e, lay2);
    make4(&o->v, c->dt, c->b, c->hk, c->s, c->ev, lay3);
    make4(&o->g, c->dt, c->b, c->h, c->l, c->ev, lay2);
    fill_random(&o->q, -1.5, 1.5);
    fill_random(&o->k, -1.5, 1.5);
    fill_random(&o->v, -2, 2);
    fill_random(&o->g, -1, 1);
    make_mask(o);
    make4(&o->out, c->dt, c->b, c->h, c->l, c->ev, lay3);
    const int64_t ls[3] = {c->b, c->h, c->l};
    fb_make(&o->lse, c->dt == F64 ? F64 : F32, 3, ls, lay2);
    make4(&o->dq, c->dt, c->b, c->h, c->l, c->e, lay3);
    make4(&o->dk, c->dt, c->b, c->hk, c->s, c->e, lay);
    make4(&o->dv, c->dt, c->b, c->hk, c->s, c->ev, lay2);
}

static void free_operands(operands *o) {
    fbuf *all[] = {&o->q, &o->k, &o->v, &o->g, &o->mask, &o->out, &o->lse, &o->dq, &o->dk, &o->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fb_free(all[i]);
}

static tpu_op forward_op(const operands *o) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_ATTENTION;
    op.fn = TPU_ATTENTION_FORWARD;
    op.n_in = 4;
    op.n_aux = 1;
    op.in[0] = o->q.t;
    op.in[1] = o->k.t;
    op.in[2] = o->v.t;
    if (o->c->mask != M_NONE)
        op.in[3] = o->mask_full;
    op.out = o->out.t;
    op.aux[0] = o->lse.t;
    op.p.attn.scale = o->c->scale;
    op.p.attn.is_causal = o->c->causal;
    return op;
}

static tpu_op backward_op(const operands *o) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_ATTENTION;
    op.fn = TPU_ATTENTION_BACKWARD;
    op.n_aux = 2;
    op.in[0] = o->g.t;
    op.in[1] = o->q.t;
    op.in[2] = o->k.t;
    op.in[3] = o->v.t;
    if (o->c->mask != M_NONE)
        op.in[4] = o->mask_full;
    op.n_in = 7;
    op.in[5] = o->out.t; /* the forward's results, as the forward left them */
    op.in[6] = o->lse.t;
    op.out = o->dq.t;
    op.aux[0] = o->dk.t;
    op.aux[1] = o->dv.t;
    op.p.attn.scale = o->c->scale;
    op.p.attn.is_causal = o->c->causal;
    return op;
}

/* --------------------------------------------------------- reference */

/* A finite mask value so large (at least 2^90) that scale q . k rounds
 * away next to it in every precision here, long double included: such a
 * score equals the mask value exactly, so the value adds no rounding
 * error for the tolerances to cover. */
static bool huge_add(long double add) {
    return isfinite(add) && fabsl(add) >= 0x1p90L;
}

/* The definition in long double, with the magnitudes the tolerances use.
 * Arrays are row-major over the logical shapes. */
typedef struct {
    long double *out, *lse, *dq, *dk, *dv;           /* values */
    long double *mout, *mdq, *mdk, *mdv, *mlse;      /* magnitudes */
    long double *amax;                               /* per row: largest |score| term */
} expected;

static void compute_expected(const operands *o, expected *x) {
    const acase *c = o->c;
    const int64_t B = c->b, H = c->h, L = c->l, S = c->s, E = c->e, Ev = c->ev;
    const int64_t G = c->hk > 0 ? H / c->hk : 1;
    const size_t rows = (size_t)(B * H * L) + 1, srows = (size_t)(B * c->hk * S) + 1;
    x->out = calloc(rows * (size_t)(Ev + 1), sizeof(long double));
    x->mout = calloc(rows * (size_t)(Ev + 1), sizeof(long double));
    x->lse = calloc(rows, sizeof(long double));
    x->mlse = calloc(rows, sizeof(long double));
    x->amax = calloc(rows, sizeof(long double));
    x->dq = calloc(rows * (size_t)(E + 1), sizeof(long double));
    x->mdq = calloc(rows * (size_t)(E + 1), sizeof(long double));
    x->dk = calloc(srows * (size_t)(E + 1), sizeof(long double));
    x->mdk = calloc(srows * (size_t)(E + 1), sizeof(long double));
    x->dv = calloc(srows * (size_t)(Ev + 1), sizeof(long double));
    x->mdv = calloc(srows * (size_t)(Ev + 1), sizeof(long double));
    long double *s = calloc((size_t)S + 1, sizeof(long double));
    long double *p = calloc((size_t)S + 1, sizeof(long double));
    long double *dp = calloc((size_t)S + 1, sizeof(long double));
    long double *adp = calloc((size_t)S + 1, sizeof(long double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const int64_t hk = h / G, row = (b * H + h) * L + i;
                long double m = -INFINITY, amax = 0;
                for (int64_t j = 0; j < S; j++) {
                    long double dot = 0, adot = 0;
                    for (int64_t e = 0; e < E; e++) {
                        long double t = (long double)get4(&o->q, b, h, i, e) * get4(&o->k, b, hk, j, e);
                        dot += t;
                        adot += fabsl(t);
                    }
                    const long double add = mask_add(o, b, h, i, j);
                    const bool hidden = (c->causal && j > i) || add == -INFINITY;
                    s[j] = hidden ? -INFINITY : c->scale * dot + add;
                    if (!hidden) {
                        const long double a =
                            fabsl(c->scale) * adot + (huge_add(add) ? 0 : fabsl(add));
                        amax = a > amax ? a : amax;
                    }
                    m = s[j] > m ? s[j] : m;
                }
                x->amax[row] = amax;
                if (m == -INFINITY) {
                    /* All keys masked: out 0, lse -inf, P 0 (gradients 0). */
                    x->lse[row] = -INFINITY;
                    continue;
                }
                long double l = 0;
                for (int64_t j = 0; j < S; j++)
                    l += expl(s[j] - m);
                long double dd = 0, add_ = 0;
                for (int64_t j = 0; j < S; j++) {
                    p[j] = expl(s[j] - m) / l;
                    dp[j] = adp[j] = 0;
                    for (int64_t e = 0; e < Ev; e++) {
                        long double t = (long double)get4(&o->g, b, h, i, e) * get4(&o->v, b, hk, j, e);
                        dp[j] += t;
                        adp[j] += fabsl(t);
                    }
                    dd += p[j] * dp[j];
                    add_ += p[j] * adp[j];
                }
                x->lse[row] = m + logl(l);
                x->mlse[row] = fabsl(m) + amax + 1;
                for (int64_t e = 0; e < Ev; e++)
                    for (int64_t j = 0; j < S; j++) {
                        const long double vv = get4(&o->v, b, hk, j, e);
                        x->out[row * Ev + e] += p[j] * vv;
                        x->mout[row * Ev + e] += p[j] * fabsl(vv);
                    }
                for (int64_t j = 0; j < S; j++) {
                    const long double ds = p[j] * (dp[j] - dd);
                    const long double mds = p[j] * (adp[j] + add_);
                    const int64_t krow = (b * c->hk + hk) * S + j;
                    for (int64_t e = 0; e < E; e++) {
                        const long double kv = get4(&o->k, b, hk, j, e), qv = get4(&o->q, b, h, i, e);
                        x->dq[row * E + e] += c->scale * ds * kv;
                        x->mdq[row * E + e] += fabsl(c->scale) * mds * fabsl(kv);
                        x->dk[krow * E + e] += c->scale * ds * qv;
                        x->mdk[krow * E + e] += fabsl(c->scale) * mds * fabsl(qv);
                    }
                    for (int64_t e = 0; e < Ev; e++) {
                        const long double gv = get4(&o->g, b, h, i, e);
                        x->dv[krow * Ev + e] += p[j] * gv;
                        x->mdv[krow * Ev + e] += p[j] * fabsl(gv);
                    }
                }
            }
    free(s);
    free(p);
    free(dp);
    free(adp);
}

static void free_expected(expected *x) {
    long double *all[] = {x->out, x->lse, x->dq, x->dk, x->dv, x->mout,
                          x->mdq, x->mdk, x->mdv, x->mlse, x->amax};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ------------------------------------------------------------- verify */

static int64_t g_bad;

typedef struct {
    const operands *o;
    const expected *x;
    const char *what;
    const char *mode;
    double eps;     /* the compute type's */
    double out_eps; /* backward: the rounding of the forward's stored output, which
                     * the tiled path reads for D (0 where eps covers it) */
} vctx;

static void expect(const vctx *v, const char *name, int64_t r, int64_t c, double got,
                   long double want, long double mag, long double growth, tpu_dtype dt) {
    const double tol = tol_store(dt, (double)want) + (double)(4 * v->eps * growth * mag) +
                       (double)(2 * v->out_eps * mag);
    if (close_to(got, (double)want, tol))
        return;
    if (g_bad++ < 6)
        fprintf(stderr, "    %s [%s]: %s[%lld, %lld] = %.9g, want %.9Lg (tol %.3g)\n", v->what,
                v->mode, name, (long long)r, (long long)c, got, want, tol);
}

static void verify_forward(const vctx *v) {
    const operands *o = v->o;
    const expected *x = v->x;
    const acase *c = o->c;
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < c->l; i++) {
                const int64_t row = (b * c->h + h) * c->l + i;
                const long double growth = (c->e + 2) * (x->amax[row] + 1) + c->s + 8;
                for (int64_t e = 0; e < c->ev; e++)
                    expect(v, "out", row, e, get4(&o->out, b, h, i, e), x->out[row * c->ev + e],
                           x->mout[row * c->ev + e], growth, c->dt);
                const tpu_tensor *t = &o->lse.t;
                const double got = t_read_f((unsigned char *)t->data +
                                                (b * t->strides[0] + h * t->strides[1] +
                                                 i * t->strides[2]) * (int64_t)t_size(t->dtype),
                                            t->dtype);
                expect(v, "lse", row, 0, got, x->lse[row], x->mlse[row], growth, t->dtype);
            }
}

static void verify_backward(const vctx *v) {
    const operands *o = v->o;
    const expected *x = v->x;
    const acase *c = o->c;
    const int64_t G = c->hk > 0 ? c->h / c->hk : 1;
    long double amax = 0;
    for (int64_t r = 0; r < c->b * c->h * c->l; r++)
        amax = x->amax[r] > amax ? x->amax[r] : amax;
    const long double growth = (c->e + c->ev + 2) * (amax + 1) + c->s + G * c->l + 8;
    for (int64_t b = 0; b < c->b; b++) {
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < c->l; i++) {
                const int64_t row = (b * c->h + h) * c->l + i;
                for (int64_t e = 0; e < c->e; e++)
                    expect(v, "dq", row, e, get4(&o->dq, b, h, i, e), x->dq[row * c->e + e],
                           x->mdq[row * c->e + e], growth, c->dt);
            }
        for (int64_t hk = 0; hk < c->hk; hk++)
            for (int64_t j = 0; j < c->s; j++) {
                const int64_t row = (b * c->hk + hk) * c->s + j;
                for (int64_t e = 0; e < c->e; e++)
                    expect(v, "dk", row, e, get4(&o->dk, b, hk, j, e), x->dk[row * c->e + e],
                           x->mdk[row * c->e + e], growth, c->dt);
                for (int64_t e = 0; e < c->ev; e++)
                    expect(v, "dv", row, e, get4(&o->dv, b, hk, j, e), x->dv[row * c->ev + e],
                           x->mdv[row * c->ev + e], growth, c->dt);
            }
    }
}

/* ------------------------------------------------------------- runner */

/* Runs op in every kernel mode with nth 1, 2, 3 and 7. Within a mode all
 * runs must write the same bytes, and the fast modes the same as each
 * other; the first run of each mode is verified (fast modes against f32
 * compute, the reference against f64). No run may fail, write outside
 * the written views or change an input. */
static void run_modes(const tpu_op *op_in, fbuf **written, int n_written, fbuf **read, int n_read,
                      const vctx *base, void (*verify)(const vctx *)) {
    tpu_op op = *op_in;
    void *dummy = give_scratch(&op);
    tpu_status st = tpu_op_check(&op);
    free(dummy);
    op.scratch = NULL;
    op.scratch_nbytes = 0;
    CHECK_OK(st);
    if (st != TPU_OK) {
        fprintf(stderr, "    refused: %s\n", base->what);
        return;
    }
    CHECK(tpu_op_max_threads(&op) >= 1);
    for (int w = 0; w < n_written; w++)
        fb_snap(written[w]);
    for (int r = 0; r < n_read; r++)
        fb_snap(read[r]);
    unsigned char *first_fast[4] = {0}, *first_mode[4] = {0};
    int64_t failed = 0, differ = 0, gap = 0, changed = 0;
    const bool is_f64 = op.in[op.fn == TPU_ATTENTION_FORWARD ? 0 : 1].dtype == F64;
    for (int mode = 0; mode < N_MODES; mode++) {
        tpu_kernels_set_reference(k_modes[mode].ref);
        tpu_kernels_set_isa(k_modes[mode].isa);
        for (int k = 0; k < N_NTHS; k++) {
            for (int w = 0; w < n_written; w++)
                fb_restore(written[w]);
            st = run_phases(&op, k_nths[k]);
            if (st != TPU_OK) {
                if (failed++ == 0)
                    fprintf(stderr, "    %s [%s nth=%d]: %s: %s\n", base->what,
                            k_modes[mode].name, k_nths[k], tpu_status_str(st),
                            tpu_last_error_message());
                continue;
            }
            for (int w = 0; w < n_written; w++)
                gap += fb_gap_writes(written[w]);
            for (int r = 0; r < n_read; r++)
                changed += memcmp(read[r]->alloc, read[r]->pristine, read[r]->bytes) != 0;
            unsigned char **ref_bytes = k_modes[mode].ref ? first_mode : first_fast;
            if (k == 0) {
                vctx v = *base;
                v.mode = k_modes[mode].name;
                v.eps = k_modes[mode].ref || is_f64 ? 0x1p-52 : 0x1p-23;
                /* The tiled backward's D = rowsum(g * out) reads the
                 * forward's output as stored: rounded to f16/bf16, it is
                 * off by that rounding, relative, which moves dS and so
                 * every gradient by as much relative to their
                 * magnitudes (PyTorch's flash backward does the same). */
                const tpu_dtype odt = op.in[op.fn == TPU_ATTENTION_FORWARD ? 0 : 1].dtype;
                v.out_eps = op.fn == TPU_ATTENTION_BACKWARD && !k_modes[mode].ref &&
                                    (odt == F16 || odt == BF16)
                                ? t_eps(odt)
                                : 0;
                verify(&v);
            }
            if (ref_bytes[0] == NULL) {
                for (int w = 0; w < n_written; w++) {
                    ref_bytes[w] = malloc(written[w]->bytes);
                    memcpy(ref_bytes[w], written[w]->alloc, written[w]->bytes);
                }
                continue;
            }
            for (int w = 0; w < n_written; w++)
                if (memcmp(ref_bytes[w], written[w]->alloc, written[w]->bytes) != 0 &&
                    differ++ == 0)
                    fprintf(stderr, "    %s [%s nth=%d]: written buffer %d differs from the "
                            "mode's first run\n", base->what, k_modes[mode].name, k_nths[k], w);
        }
    }
    tpu_kernels_set_reference(false);
    tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    CHECK(failed == 0);
    CHECK(differ == 0);
    CHECK(gap == 0);
    CHECK(changed == 0);
    if (gap)
        fprintf(stderr, "    %s: %lld bytes written outside a view\n", base->what, (long long)gap);
    if (changed)
        fprintf(stderr, "    %s: an input changed\n", base->what);
    for (int w = 0; w < 4; w++) {
        free(first_fast[w]);
        free(first_mode[w]);
    }
}

static int g_cases;

static void run_case(const acase *c) {
    char what[256];
    describe(c, what, sizeof what);
    operands o;
    make_operands(&o, c);
    expected x;
    compute_expected(&o, &x);
    g_bad = 0;
    const vctx base = {&o, &x, what, "", 0, 0};

    tpu_op fwd = forward_op(&o);
    CHECK(tpu_op_phases(&fwd) == 1 && tpu_op_scratch_bytes(&fwd) == 0);
    fbuf *fw[] = {&o.out, &o.lse};
    fbuf *fr[] = {&o.q, &o.k, &o.v, &o.mask};
    run_modes(&fwd, fw, 2, fr, c->mask != M_NONE ? 4 : 3, &base, verify_forward);

    /* The backward reads the forward's out and logsumexp: those the last
     * (fast) run left, the same bytes in every fast mode. */
    tpu_op bwd = backward_op(&o);
    CHECK(tpu_op_phases(&bwd) == 3);
    CHECK(tpu_op_scratch_bytes(&bwd) >= 24 * c->b * c->h * c->l);
    fbuf *bw[] = {&o.dq, &o.dk, &o.dv};
    fbuf *br[] = {&o.g, &o.q, &o.k, &o.v, &o.out, &o.lse, &o.mask};
    run_modes(&bwd, bw, 3, br, c->mask != M_NONE ? 7 : 6, &base, verify_backward);

    CHECK(g_bad == 0);
    g_cases++;
    free_expected(&x);
    free_operands(&o);
}

/* ------------------------------------------------------------- table */

static const struct {
    int64_t b, h, hk, l, s, e, ev;
} k_shapes[] = {
    {1, 1, 1, 1, 1, 1, 1},    {1, 1, 1, 1, 5, 4, 4},    {1, 1, 1, 5, 1, 4, 3},
    {2, 3, 3, 37, 45, 16, 12}, {1, 4, 2, 33, 33, 8, 8}, {1, 6, 2, 70, 65, 24, 40},
    {1, 2, 1, 64, 96, 64, 64}, {1, 1, 1, 40, 50, 80, 80}, {2, 2, 2, 0, 5, 4, 4},
    {1, 2, 2, 5, 0, 4, 4},    {1, 1, 1, 3, 4, 0, 5},    {1, 1, 1, 3, 4, 5, 0},
    {0, 2, 2, 3, 3, 4, 4},    {1, 1, 1, 9, 10, 300, 7}, {1, 2, 2, 3, 3, 7, 260},
    /* Several query blocks (64 rows) and key blocks (256 keys), cut
     * ends: the backward's keys in 2 and 3 chunks (few batches and kv
     * heads), queries beyond keys and the reverse under is_causal. */
    {1, 2, 1, 70, 270, 12, 20}, {1, 1, 1, 150, 100, 17, 8}, {2, 1, 1, 40, 520, 8, 8},
};

static const tpu_dtype k_dtypes[] = {F32, F64, F16, BF16};

static void run_table(void) {
    int rot = 0;
    for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++)
        for (size_t di = 0; di < sizeof k_dtypes / sizeof k_dtypes[0]; di++)
            for (int variant = 0; variant < 3; variant++, rot++) {
                const int64_t e = k_shapes[si].e;
                acase c = {.b = k_shapes[si].b, .h = k_shapes[si].h, .hk = k_shapes[si].hk,
                           .l = k_shapes[si].l, .s = k_shapes[si].s, .e = e,
                           .ev = k_shapes[si].ev, .dt = k_dtypes[di]};
                c.causal = rot % 3 == 1;
                c.mask = (mask_kind)(rot % M_COUNT);
                c.dead_rows = c.mask != M_NONE && rot % 4 == 2;
                c.scale = rot % 5 == 3 ? -0.5 : rot % 5 == 4 ? 0.3 : (e > 0 ? 1 / sqrt((double)e) : 1);
                c.layout = rot % L_COUNT;
                run_case(&c);
            }
}

/* Rows hidden by a huge finite mask instead of -inf (PyTorch padding
 * masks built from torch.finfo(dtype).min): every key of a dead row, and
 * some keys of the others, get `huge`. The mask is the operands' dtype
 * (add[B,H,L,S]) or f32 (add[1,H,1,S]); f16 (which cannot hold these
 * values) always takes the f32 one, and bf16's own mask its lowest
 * finite value (bf16 rounds -FLT_MAX to -inf). Head sizes include 8,
 * whose scale 1/sqrt(8) is inexact, and one past the tiled limit. */
static void run_huge_masks(void) {
    static const struct {
        int64_t b, h, hk, l, s, e, ev;
    } shapes[] = {
        {1, 1, 1, 2, 3, 8, 4},     {1, 2, 1, 37, 45, 8, 8},  {2, 2, 2, 33, 70, 4, 12},
        {1, 2, 2, 5, 40, 24, 16},  {1, 2, 2, 64, 64, 64, 64}, {1, 2, 2, 9, 10, 300, 7},
        {1, 1, 1, 70, 300, 16, 16},
    };
    static const double fills[] = {-0x1.fffffep127, -1e30};
    int rot = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t di = 0; di < sizeof k_dtypes / sizeof k_dtypes[0]; di++)
            for (size_t fi = 0; fi < sizeof fills / sizeof fills[0]; fi++, rot++) {
                const tpu_dtype dt = k_dtypes[di];
                const int64_t e = shapes[si].e;
                acase c = {.b = shapes[si].b, .h = shapes[si].h, .hk = shapes[si].hk,
                           .l = shapes[si].l, .s = shapes[si].s, .e = e, .ev = shapes[si].ev,
                           .dt = dt, .dead_rows = true, .huge = fills[fi]};
                c.mask = dt == F16 || (si + di + fi) % 2 ? M_ADD_1H1S : M_ADD_FULL;
                if (dt == BF16 && c.mask == M_ADD_FULL && fi == 0)
                    c.huge = -0x1.fep127;
                c.causal = (si + di) % 3 == 2;
                c.scale = (si + fi) % 4 == 3 ? 0.3 : 1 / sqrt((double)e);
                c.layout = rot % L_COUNT;
                run_case(&c);
            }
}

/* Keys and values too long for the tiled forward to keep an f32 copy of
 * a whole head (S (E + Ev) above 2^20 floats): f16 and bf16 ones are
 * then converted block by block. One query row keeps the reference
 * cheap. */
static void run_long_keys(void) {
    static const tpu_dtype dts[] = {BF16, F16};
    for (int i = 0; i < 2; i++) {
        acase c = {.b = 1, .h = 1, .hk = 1, .l = 1, .s = 2100, .e = 256, .ev = 256, .dt = dts[i],
                   .scale = 0.0625, .layout = i};
        c.mask = i == 0 ? M_BOOL_B11S : M_NONE;
        run_case(&c);
    }
}

/* ------------------------------------------------------ known answers */

/* One query q = 1 against keys 0 and ln 3 (scale 1): P = (1/4, 3/4), so
 * with values 4 and 8 the output is 7 and the logsumexp log 4. */
static void known_answer(tpu_dtype dt) {
    acase c = {.b = 1, .h = 1, .hk = 1, .l = 1, .s = 2, .e = 1, .ev = 1, .dt = dt, .scale = 1};
    operands o;
    make_operands(&o, &c);
    fb_set(&o.q, 0, 1);
    fb_set(&o.k, 0, 0);
    fb_set(&o.k, 1, dt == F64 ? log(3.0) : (double)logf(3.0f));
    fb_set(&o.v, 0, 4);
    fb_set(&o.v, 1, 8);
    tpu_op op = forward_op(&o);
    for (int ref = 0; ref < 2; ref++) {
        tpu_kernels_set_reference(ref);
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        const double tol = dt == F64 ? 1e-14 : 1e-5;
        CHECK(fabs(fb_get(&o.out, 0) - 7) < 7 * tol);
        CHECK(fabs(fb_get(&o.lse, 0) - log(4.0)) < tol);
    }
    tpu_kernels_set_reference(false);
    free_operands(&o);
}

/* -------------------------------------------------------- refusals */

static void refusals(void) {
    /* layout 2: q, k, v with gaps, out row-major (dense, for the overlap case) */
    acase c = {.b = 2, .h = 4, .hk = 2, .l = 3, .s = 5, .e = 4, .ev = 6, .dt = F32, .scale = 0.5,
               .mask = M_BOOL_LS, .layout = 2};
    operands o;
    make_operands(&o, &c);
    tpu_op ok = forward_op(&o);
    CHECK_OK(tpu_op_check(&ok));
    CHECK(strcmp(tpu_op_name(TPU_OP_ATTENTION), "attention") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_ATTENTION, TPU_ATTENTION_BACKWARD),
                 "scaled_dot_product_attention_backward") == 0);

    tpu_op op = ok;
    op.in[0].ndim = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "4-d");
    op = ok;
    op.in[1].sizes[3] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "key");
    op = ok;
    op.in[2].sizes[2] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "value");
    op = ok; /* 3 query heads over 2 kv heads */
    op.in[0].sizes[1] = 3;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "multiple");
    op = ok;
    op.in[3].sizes[3] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "mask");
    op = ok;
    op.in[3].dtype = U8;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "mask");
    op = ok;
    op.in[1].dtype = F16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "float16");
    op = ok;
    op.in[0].dtype = op.in[1].dtype = op.in[2].dtype = op.out.dtype = I32;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "int32");
    op = ok;
    op.aux[0].dtype = F16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "logsumexp");
    op = ok;
    op.out.sizes[3] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "out");
    op = ok;
    op.n_in = 3;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in");
    op = ok; /* the logsumexp laid over out's first elements */
    op.aux[0].data = o.out.t.data;
    op.aux[0].storage = o.out.t.storage;
    op.aux[0].storage_nbytes = o.out.t.storage_nbytes;
    op.aux[0].strides[0] = 12, op.aux[0].strides[1] = 3, op.aux[0].strides[2] = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "overlaps");

    tpu_op bwd = backward_op(&o);
    void *scratch = give_scratch(&bwd);
    CHECK_OK(tpu_op_check(&bwd));
    op = bwd;
    op.scratch = NULL;
    op.scratch_nbytes = 0;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "scratch");
    op = bwd;
    op.aux[0].sizes[2] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "dk");
    op = bwd;
    op.in[0].sizes[3] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "grad");
    op = bwd;
    op.n_aux = 1;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_aux");
    op = bwd;
    op.n_in = 5;
    CHECK_REFUSED(&op, TPU_ERR_INVALID_ARG, "n_in");
    op = bwd; /* the forward's out of another shape */
    op.in[5].sizes[3] = 4;
    CHECK_REFUSED(&op, TPU_ERR_SHAPE, "forward out");
    op = bwd;
    op.in[6].dtype = F16;
    CHECK_REFUSED(&op, TPU_ERR_UNSUPPORTED_DTYPE, "forward logsumexp");
    CHECK_STATUS(tpu_op_run_phase(&bwd, 3, 0, 1), TPU_ERR_INVALID_ARG);
    free(scratch);
    free_operands(&o);
}

int main(void) {
    known_answer(F32);
    known_answer(F64);
    refusals();
    run_table();
    run_huge_masks();
    run_long_keys();
    printf("%d attention cases\n", g_cases);
    return check_report();
}
