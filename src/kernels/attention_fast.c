/* ATTENTION's tiled path (flash-attention style) for f32, f16 and bf16,
 * computing in f32.
 *
 * Work is cut into blocks of TPU_K_ATTN_BLOCK query rows and key rows.
 * A share takes whole units: (b, h, query block) for the forward and the
 * backward's phases 0 and 2, (b, hk, key block) for phase 1. Per unit,
 * the operands' blocks become f32 tiles on the stack (f32 rows with unit
 * stride are read in place instead; keys, and in the backward values,
 * are also transposed, so that products vectorise over keys), and only a
 * block x block tile of scores ever exists: the L x S matrix is never
 * formed.
 *
 * Forward, per query block: for each key block (under is_causal only
 * those with a visible key), the scores S = scale Q K^T + mask, then the
 * online softmax: each row keeps its running max m, running sum l and an
 * unnormalised output; a new block's max m' rescales both by exp(m - m')
 * before exp(S - m') and its products with V are added. At the end the
 * output is acc / l and the logsumexp m + log(l).
 *
 * Backward: phase 0 recomputes each row's max m, sum l and D = sum_j P dP
 * (dP = g V^T) in the same single online pass (D rescales with l), and
 * the later phases recompute P = exp(S - m) / l as the forward
 * normalises (not exp(S - lse): m + log l rounds to m when the scores
 * are huge, as in a row hidden by a finite mask of -FLT_MAX); phase 1
 * accumulates a key block's dK and dV over the group's query
 * heads and all query blocks in order; phase 2 a query block's dQ over
 * the key blocks. The statistics pass through scratch (attention.h).
 *
 * Numerics: every product of two tiles is the MATMUL family's (matmul.h):
 * one f32 fma chain per output from +0 (or from the running value) in
 * index order, which makes products of f16/bf16 values exact. exp is
 * vecmath's. The portable and AVX2 variants run the same chains, so the
 * bytes do not depend on the instruction set, nor (fixed units) on the
 * thread count. */
#include <math.h>
#include <string.h>

#include "attention.h"
#include "kernels_internal.h"
#include "strided.h"
#include "vecmath.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

enum { BLK = TPU_K_ATTN_BLOCK, MAXH = TPU_K_ATTN_MAX_HEAD };
_Static_assert(BLK == 32, "the tile kernels hold a row of scores in four 8-lane vectors");

/* ----------------------------------------------------- loads and stores */

/* n elements of t from element offset off, `step` apart, as f32. */
static void load_f32(float *dst, const tpu_tensor *t, int64_t off, int64_t step, int64_t n) {
    const char *p = tpu_k_ptr(t, off);
    const int64_t bs = step * (int64_t)tpu_dtype_size(t->dtype);
    switch (t->dtype) {
    case TPU_DTYPE_F32:
        if (step == 1) {
            memcpy(dst, p, (size_t)n * sizeof(float));
            return;
        }
        for (int64_t c = 0; c < n; c++)
            memcpy(dst + c, p + c * bs, sizeof(float));
        return;
    case TPU_DTYPE_BF16:
        for (int64_t c = 0; c < n; c++) {
            uint16_t h;
            memcpy(&h, p + c * bs, sizeof h);
            dst[c] = tpu_bf16_to_f32(h);
        }
        return;
    default:
        for (int64_t c = 0; c < n; c++)
            dst[c] = tpu_k_load_f32(p + c * bs, t->dtype);
        return;
    }
}

/* n f32 values into t at element offset off, `step` apart, rounded once
 * to t's dtype. */
static void store_f32(const tpu_tensor *t, int64_t off, int64_t step, const float *src, int64_t n) {
    char *p = tpu_k_ptr(t, off);
    const int64_t bs = step * (int64_t)tpu_dtype_size(t->dtype);
    if (t->dtype == TPU_DTYPE_F32 && step == 1) {
        memcpy(p, src, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t c = 0; c < n; c++)
        tpu_k_store_f32(p + c * bs, t->dtype, src[c]);
}

/* Rows r0 .. r0 + n - 1 of head `head` of batch b of t (width values
 * each) as f32: into rows[r * width + c] when rows is given, and
 * transposed into cols[c * BLK + r] when cols is given (its columns
 * r >= n zero). `tmp` holds one row in transit. */
static void load_block(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int n,
                       int64_t width, float *rows, float *cols, float *tmp) {
    for (int r = 0; r < n; r++) {
        float *dst = rows ? rows + r * width : tmp;
        load_f32(dst, t, tpu_k_attn_row(t, b, head, r0 + r), t->strides[3], width);
        if (cols)
            for (int64_t c = 0; c < width; c++)
                cols[c * BLK + r] = dst[c];
    }
    if (cols && n < BLK)
        for (int64_t c = 0; c < width; c++)
            memset(cols + c * BLK + n, 0, (size_t)(BLK - n) * sizeof(float));
}

/* Rows r0 .. r0 + n - 1 of (b, head) of t as f32 rows `*ld` floats
 * apart: in place when t is aligned f32 with unit-stride rows (no copy),
 * else converted into buf (ld = width). */
static const float *rows_of(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int n,
                            int64_t width, float *buf, float *tmp, int64_t *ld) {
    if (t->dtype == TPU_DTYPE_F32 && (t->strides[3] == 1 || width <= 1) && tpu_k_is_aligned(t)) {
        *ld = t->strides[2];
        return (const float *)tpu_k_ptr(t, tpu_k_attn_row(t, b, head, r0));
    }
    load_block(t, b, head, r0, n, width, buf, NULL, tmp);
    *ld = width;
    return buf;
}

/* -------------------------------------------------------- tile products */

/* out[i * BLK + j] = sum_{k < n} a[i * lda + k] * bt[k * BLK + j] for
 * i < rows, j < BLK: one fma chain from +0 per output, k in order. */
static void tile_dot_portable(float *out, const float *a, int64_t lda, const float *bt, int64_t n,
                              int rows) {
    for (int i = 0; i < rows; i++) {
        float acc[BLK] = {0};
        for (int64_t k = 0; k < n; k++) {
            const float x = a[i * lda + k];
            for (int j = 0; j < BLK; j++)
                acc[j] = fmaf(x, bt[k * BLK + j], acc[j]);
        }
        memcpy(out + i * BLK, acc, sizeof acc);
    }
}

/* acc[r * ldc + c] = fma chains continuing acc with w[r * BLK + j] *
 * x[j * ldx + c] for j < nj in order, for r < rows and c < n. */
static void tile_axpy_portable(float *acc, int64_t ldc, const float *w, const float *x,
                               int64_t ldx, int rows, int nj, int64_t n) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < nj; j++) {
            const float wv = w[r * BLK + j];
            for (int64_t c = 0; c < n; c++)
                acc[r * ldc + c] = fmaf(wv, x[j * ldx + c], acc[r * ldc + c]);
        }
}

#if TPU_K_X86
/* The same chains, eight outputs to a register: two rows of 32 scores in
 * eight accumulators. */
__attribute__((target("avx2,fma"))) static void tile_dot_avx2(float *out, const float *a,
                                                               int64_t lda, const float *bt,
                                                               int64_t n, int rows) {
    int i = 0;
    for (; i + 2 <= rows; i += 2) {
        const float *a0 = a + i * lda, *a1 = a0 + lda;
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
        __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
        for (int64_t k = 0; k < n; k++) {
            const float *b = bt + k * BLK;
            const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            const __m256 b2 = _mm256_loadu_ps(b + 16), b3 = _mm256_loadu_ps(b + 24);
            const __m256 x0 = _mm256_broadcast_ss(a0 + k), x1 = _mm256_broadcast_ss(a1 + k);
            c00 = _mm256_fmadd_ps(x0, b0, c00);
            c01 = _mm256_fmadd_ps(x0, b1, c01);
            c02 = _mm256_fmadd_ps(x0, b2, c02);
            c03 = _mm256_fmadd_ps(x0, b3, c03);
            c10 = _mm256_fmadd_ps(x1, b0, c10);
            c11 = _mm256_fmadd_ps(x1, b1, c11);
            c12 = _mm256_fmadd_ps(x1, b2, c12);
            c13 = _mm256_fmadd_ps(x1, b3, c13);
        }
        float *o = out + i * BLK;
        _mm256_storeu_ps(o, c00);
        _mm256_storeu_ps(o + 8, c01);
        _mm256_storeu_ps(o + 16, c02);
        _mm256_storeu_ps(o + 24, c03);
        _mm256_storeu_ps(o + BLK, c10);
        _mm256_storeu_ps(o + BLK + 8, c11);
        _mm256_storeu_ps(o + BLK + 16, c12);
        _mm256_storeu_ps(o + BLK + 24, c13);
    }
    for (; i < rows; i++) {
        const float *a0 = a + i * lda;
        __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
        for (int64_t k = 0; k < n; k++) {
            const float *b = bt + k * BLK;
            const __m256 x0 = _mm256_broadcast_ss(a0 + k);
            c0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b), c0);
            c1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b + 8), c1);
            c2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b + 16), c2);
            c3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b + 24), c3);
        }
        float *o = out + i * BLK;
        _mm256_storeu_ps(o, c0);
        _mm256_storeu_ps(o + 8, c1);
        _mm256_storeu_ps(o + 16, c2);
        _mm256_storeu_ps(o + 24, c3);
    }
}

/* The same chains, 32 (then 8) columns of two rows held in registers
 * across the j loop (eight independent chains hide the fma latency); the
 * last n % 8 columns one by one. */
__attribute__((target("avx2,fma"))) static void axpy_rows_avx2(float *o0, float *o1,
                                                                const float *w0, const float *w1,
                                                                const float *x, int64_t ldx,
                                                                int nj, int64_t n) {
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) {
        __m256 a0 = _mm256_loadu_ps(o0 + c), a1 = _mm256_loadu_ps(o0 + c + 8);
        __m256 a2 = _mm256_loadu_ps(o0 + c + 16), a3 = _mm256_loadu_ps(o0 + c + 24);
        __m256 b0 = _mm256_loadu_ps(o1 + c), b1 = _mm256_loadu_ps(o1 + c + 8);
        __m256 b2 = _mm256_loadu_ps(o1 + c + 16), b3 = _mm256_loadu_ps(o1 + c + 24);
        for (int j = 0; j < nj; j++) {
            const float *xr = x + j * ldx + c;
            const __m256 x0 = _mm256_loadu_ps(xr), x1 = _mm256_loadu_ps(xr + 8);
            const __m256 x2 = _mm256_loadu_ps(xr + 16), x3 = _mm256_loadu_ps(xr + 24);
            const __m256 u = _mm256_broadcast_ss(w0 + j), v = _mm256_broadcast_ss(w1 + j);
            a0 = _mm256_fmadd_ps(u, x0, a0);
            a1 = _mm256_fmadd_ps(u, x1, a1);
            a2 = _mm256_fmadd_ps(u, x2, a2);
            a3 = _mm256_fmadd_ps(u, x3, a3);
            b0 = _mm256_fmadd_ps(v, x0, b0);
            b1 = _mm256_fmadd_ps(v, x1, b1);
            b2 = _mm256_fmadd_ps(v, x2, b2);
            b3 = _mm256_fmadd_ps(v, x3, b3);
        }
        _mm256_storeu_ps(o0 + c, a0);
        _mm256_storeu_ps(o0 + c + 8, a1);
        _mm256_storeu_ps(o0 + c + 16, a2);
        _mm256_storeu_ps(o0 + c + 24, a3);
        _mm256_storeu_ps(o1 + c, b0);
        _mm256_storeu_ps(o1 + c + 8, b1);
        _mm256_storeu_ps(o1 + c + 16, b2);
        _mm256_storeu_ps(o1 + c + 24, b3);
    }
    for (; c + 8 <= n; c += 8) {
        __m256 a0 = _mm256_loadu_ps(o0 + c), b0 = _mm256_loadu_ps(o1 + c);
        for (int j = 0; j < nj; j++) {
            const __m256 x0 = _mm256_loadu_ps(x + j * ldx + c);
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(w0 + j), x0, a0);
            b0 = _mm256_fmadd_ps(_mm256_broadcast_ss(w1 + j), x0, b0);
        }
        _mm256_storeu_ps(o0 + c, a0);
        _mm256_storeu_ps(o1 + c, b0);
    }
    for (; c < n; c++)
        for (int j = 0; j < nj; j++) {
            o0[c] = fmaf(w0[j], x[j * ldx + c], o0[c]);
            o1[c] = fmaf(w1[j], x[j * ldx + c], o1[c]);
        }
}

__attribute__((target("avx2,fma"))) static void tile_axpy_avx2(float *acc, int64_t ldc,
                                                                const float *w, const float *x,
                                                                int64_t ldx, int rows, int nj,
                                                                int64_t n) {
    int r = 0;
    for (; r + 2 <= rows; r += 2)
        axpy_rows_avx2(acc + r * ldc, acc + (r + 1) * ldc, w + r * BLK, w + (r + 1) * BLK, x, ldx,
                       nj, n);
    if (r < rows) {
        /* An odd last row: paired with itself into a scratch copy. */
        float spare[MAXH];
        memcpy(spare, acc + r * ldc, (size_t)n * sizeof(float));
        axpy_rows_avx2(acc + r * ldc, spare, w + r * BLK, w + r * BLK, x, ldx, nj, n);
    }
}
#endif

static void tile_dot(float *out, const float *a, int64_t lda, const float *bt, int64_t n, int rows) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx2_fma()) {
        tile_dot_avx2(out, a, lda, bt, n, rows);
        return;
    }
#endif
    tile_dot_portable(out, a, lda, bt, n, rows);
}

static void tile_axpy(float *acc, int64_t ldc, const float *w, const float *x, int64_t ldx,
                      int rows, int nj, int64_t n) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx2_fma()) {
        tile_axpy_avx2(acc, ldc, w, x, ldx, rows, nj, n);
        return;
    }
#endif
    tile_axpy_portable(acc, ldc, w, x, ldx, rows, nj, n);
}

/* ------------------------------------------------------- score tiles */

/* Turns the dot products s[r * BLK + j] of query rows i0 + r (r < rows)
 * and keys j0 + j into scores: times scale, plus the mask; -inf for keys
 * that are masked, hidden by is_causal, or past the last (j >= nk). */
static void finish_scores(const tpu_k_attn *a, float *s, int64_t b, int64_t h, int64_t i0,
                          int rows, int64_t j0, int nk) {
    const float scale = (float)a->scale;
    const tpu_tensor *m = a->mask;
    for (int r = 0; r < rows; r++) {
        float *sr = s + r * BLK;
        /* Keys [0, lim) of the block are visible to this row. */
        int64_t lim = nk;
        if (a->causal && i0 + r - j0 + 1 < lim)
            lim = i0 + r - j0 + 1 > 0 ? i0 + r - j0 + 1 : 0;
        for (int j = 0; j < BLK; j++)
            sr[j] = j < lim ? sr[j] * scale : -INFINITY;
        if (m == NULL || lim == 0)
            continue;
        const int64_t off = tpu_k_attn_row(m, b, h, i0 + r) + j0 * m->strides[3];
        if (m->dtype == TPU_DTYPE_BOOL) {
            const unsigned char *keep = (const unsigned char *)tpu_k_ptr(m, off);
            for (int64_t j = 0; j < lim; j++)
                if (!keep[j * m->strides[3]])
                    sr[j] = -INFINITY;
            continue;
        }
        float add[BLK];
        load_f32(add, m, off, m->strides[3], lim);
        for (int64_t j = 0; j < lim; j++)
            sr[j] = add[j] == -INFINITY ? -INFINITY : sr[j] + add[j];
    }
}

/* Lanes of the row reductions below: eight independent partial results
 * combined in lane order, so that the loops need not wait on one
 * accumulator (and vectorise), while the result stays the same on every
 * instruction set. */
enum { LANES = 8 };

/* max(init, the largest of x[0..BLK)); NaN is passed over. */
static float row_max(const float *x, float init) {
    float m[LANES];
    for (int k = 0; k < LANES; k++)
        m[k] = x[k];
    for (int j = LANES; j < BLK; j += LANES)
        for (int k = 0; k < LANES; k++)
            m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    float mx = init;
    for (int k = 0; k < LANES; k++)
        mx = m[k] > mx ? m[k] : mx;
    return mx;
}

/* sum of x[j] (times y[j] when y is given) over j < BLK. */
static float row_sum(const float *x, const float *y) {
    float acc[LANES];
    for (int k = 0; k < LANES; k++)
        acc[k] = y ? x[k] * y[k] : x[k];
    for (int j = LANES; j < BLK; j += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += y ? x[j + k] * y[j + k] : x[j + k];
    float sum = acc[0];
    for (int k = 1; k < LANES; k++)
        sum += acc[k];
    return sum;
}

/* exp(s - sub[r]) over rows of the tile, in place; sub[r] == -inf (a row
 * with nothing visible yet) subtracts 0 instead, so its -inf scores give
 * 0 rather than NaN. */
static void exp_rows(float *s, const float *sub, int rows) {
    for (int r = 0; r < rows; r++) {
        const float m = sub[r] == -INFINITY ? 0.0f : sub[r];
        for (int j = 0; j < BLK; j++)
            s[r * BLK + j] -= m;
    }
    tpu_vm_f32(TPU_VM_EXP, s, s, (int64_t)rows * BLK);
}

/* The online softmax step of a tile of scores s (rows x BLK): new running
 * maxima, the factors exp(m_old - m_new) that rescale what the rows have
 * summed so far (into alpha), probabilities relative to the new maxima
 * (in place in s), and the running sums l. A NaN score is passed over by
 * the max and makes its row NaN through exp. */
static void online_step(float *s, float *m, float *l, float *alpha, int rows) {
    float mnew[BLK] = {0}, diff[BLK] = {0};
    for (int r = 0; r < rows; r++) {
        mnew[r] = row_max(s + r * BLK, m[r]);
        diff[r] = mnew[r] == -INFINITY ? 0.0f : m[r] - mnew[r];
    }
    exp_rows(s, mnew, rows);
    tpu_vm_f32(TPU_VM_EXP, alpha, diff, rows);
    for (int r = 0; r < rows; r++) {
        l[r] = l[r] * alpha[r] + row_sum(s + r * BLK, NULL);
        m[r] = mnew[r];
    }
}

/* Key blocks a query block starting at i0 with `rows` rows needs: all of
 * them, or under is_causal those up to its last row's diagonal. */
static int64_t key_blocks_for(const tpu_k_attn *a, int64_t i0, int rows) {
    int64_t n = tpu_k_attn_blocks(a->s);
    if (a->causal) {
        int64_t last = (i0 + rows - 1) / BLK + 1;
        n = last < n ? last : n;
    }
    return n;
}

static int block_len(int64_t n, int64_t start) {
    return n - start < BLK ? (int)(n - start) : BLK;
}

/* ------------------------------------------------------------- forward */

typedef struct {
    float q[BLK * MAXH];   /* query rows [rows][E] */
    float kt[MAXH * BLK];  /* key block transposed [E][BLK] */
    float v[BLK * MAXH];   /* value rows [nk][Ev] */
    float acc[BLK * MAXH]; /* unnormalised output rows [rows][Ev] */
    float s[BLK * BLK];    /* scores, then probabilities */
    float m[BLK], l[BLK], alpha[BLK];
    float tmp[MAXH];
} fwd_tiles;

static void forward_unit(const tpu_k_attn *a, fwd_tiles *t, int64_t b, int64_t h, int64_t qb) {
    const int64_t i0 = qb * BLK, hk = h / a->group, e = a->e, ev = a->ev;
    const int rows = block_len(a->l, i0);
    int64_t ldq, ldv;
    const float *qp = rows_of(a->q, b, h, i0, rows, e, t->q, t->tmp, &ldq);
    for (int r = 0; r < rows; r++) {
        t->m[r] = -INFINITY;
        t->l[r] = 0.0f;
    }
    memset(t->acc, 0, (size_t)(rows * ev) * sizeof(float));
    const int64_t nkb = key_blocks_for(a, i0, rows);
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * BLK;
        const int nk = block_len(a->s, j0);
        load_block(a->k, b, hk, j0, nk, e, NULL, t->kt, t->tmp);
        const float *vp = rows_of(a->v, b, hk, j0, nk, ev, t->v, t->tmp, &ldv);
        tile_dot(t->s, qp, ldq, t->kt, e, rows);
        finish_scores(a, t->s, b, h, i0, rows, j0, nk);
        online_step(t->s, t->m, t->l, t->alpha, rows);
        for (int r = 0; r < rows; r++)
            if (t->alpha[r] != 1.0f)
                for (int64_t c = 0; c < ev; c++)
                    t->acc[r * ev + c] *= t->alpha[r];
        tile_axpy(t->acc, ev, t->s, vp, ldv, rows, nk, ev);
    }
    for (int r = 0; r < rows; r++) {
        const bool none = t->m[r] == -INFINITY; /* every key masked: 0, lse -inf */
        float *o = t->acc + r * ev;
        for (int64_t c = 0; c < ev; c++)
            o[c] = none ? 0.0f : o[c] / t->l[r];
        store_f32(a->out, tpu_k_attn_row(a->out, b, h, i0 + r), a->out->strides[3], o, ev);
        const double lse = none ? -INFINITY : (double)t->m[r] + log((double)t->l[r]);
        tpu_k_store_f64(tpu_k_ptr(a->lse, tpu_k_attn_lse_at(a->lse, b, h, i0 + r)), a->lse->dtype,
                        (float)lse);
    }
}

tpu_status tpu_k_attn_forward_fast(const tpu_op *op, int ith, int nth) {
    tpu_k_attn a;
    tpu_k_attn_init(&a, op);
    const int64_t nqb = tpu_k_attn_blocks(a.l);
    int64_t start, end;
    tpu_k_split(a.b * a.h * nqb, ith, nth, &start, &end);
    fwd_tiles t;
    for (int64_t u = start; u < end; u++)
        forward_unit(&a, &t, u / (a.h * nqb), u / nqb % a.h, u % nqb);
    return TPU_OK;
}

/* ------------------------------------------------------------ backward */

typedef struct {
    float q[BLK * MAXH];  /* query rows [rows][E] */
    float g[BLK * MAXH];  /* gradient rows [rows][Ev] */
    float kt[MAXH * BLK]; /* key block transposed [E][BLK] */
    float vt[MAXH * BLK]; /* value block transposed [Ev][BLK] */
    float kr[BLK * MAXH]; /* key rows [nk][E] (phase 2), dK rows (phase 1) */
    float acc[BLK * MAXH]; /* dQ rows (phase 2), dV rows (phase 1) */
    float s[BLK * BLK];   /* scores, probabilities, then dS */
    float dp[BLK * BLK];  /* dP = g V^T */
    float pt[BLK * BLK];  /* P and dS transposed (phase 1) */
    float m[BLK], l[BLK], d[BLK], alpha[BLK];
    float tmp[MAXH];
} bwd_tiles;

/* Phase 0: the max, sum and D of a query block's rows, into scratch. */
static void stats_unit(const tpu_op *op, const tpu_k_attn *a, bwd_tiles *t, int64_t b, int64_t h,
                       int64_t qb) {
    const int64_t i0 = qb * BLK, hk = h / a->group, e = a->e, ev = a->ev;
    const int rows = block_len(a->l, i0);
    int64_t ldq, ldg;
    const float *qp = rows_of(a->q, b, h, i0, rows, e, t->q, t->tmp, &ldq);
    const float *gp = rows_of(a->g, b, h, i0, rows, ev, t->g, t->tmp, &ldg);
    for (int r = 0; r < rows; r++) {
        t->m[r] = -INFINITY;
        t->l[r] = t->d[r] = 0.0f;
    }
    const int64_t nkb = key_blocks_for(a, i0, rows);
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * BLK;
        const int nk = block_len(a->s, j0);
        load_block(a->k, b, hk, j0, nk, e, NULL, t->kt, t->tmp);
        load_block(a->v, b, hk, j0, nk, ev, NULL, t->vt, t->tmp);
        tile_dot(t->s, qp, ldq, t->kt, e, rows);
        tile_dot(t->dp, gp, ldg, t->vt, ev, rows);
        finish_scores(a, t->s, b, h, i0, rows, j0, nk);
        online_step(t->s, t->m, t->l, t->alpha, rows);
        /* D rescales with l: both are sums weighted by exp(s - m). */
        for (int r = 0; r < rows; r++)
            t->d[r] = t->d[r] * t->alpha[r] + row_sum(t->s + r * BLK, t->dp + r * BLK);
    }
    double *mx = tpu_k_attn_max_scratch(op), *sm = tpu_k_attn_sum_scratch(op, a);
    double *dd = tpu_k_attn_d_scratch(op, a);
    for (int r = 0; r < rows; r++) {
        const int64_t at = tpu_k_attn_stat_index(a, b, h, i0 + r);
        const bool none = t->m[r] == -INFINITY;
        mx[at] = t->m[r];
        sm[at] = none ? 0.0 : t->l[r];
        dd[at] = none ? 0.0 : t->d[r] / t->l[r];
    }
}

/* Reads the statistics of rows i0 .. i0 + rows - 1 of (b, h): f32 values
 * stored as f64, so exactly. */
static void load_stats(const tpu_op *op, const tpu_k_attn *a, bwd_tiles *t, int64_t b, int64_t h,
                       int64_t i0, int rows) {
    const double *mx = tpu_k_attn_max_scratch(op), *sm = tpu_k_attn_sum_scratch(op, a);
    const double *dd = tpu_k_attn_d_scratch(op, a);
    for (int r = 0; r < rows; r++) {
        const int64_t at = tpu_k_attn_stat_index(a, b, h, i0 + r);
        t->m[r] = (float)mx[at];
        t->l[r] = (float)sm[at];
        t->d[r] = (float)dd[at];
    }
}

/* For query rows qp and gradient rows gp (rows of each, from i0; ldq and
 * ldg floats apart) against the key block in t->kt, t->vt: P = exp(S -
 * m) / l into t->s and dS = P (dP - D) into t->dp. An all-masked row (m
 * -inf, l 0) has exp 0 throughout and is left so. */
static void probs_and_ds(const tpu_k_attn *a, bwd_tiles *t, const float *qp, int64_t ldq,
                         const float *gp, int64_t ldg, int64_t b, int64_t h, int64_t i0, int rows,
                         int64_t j0, int nk) {
    tile_dot(t->s, qp, ldq, t->kt, a->e, rows);
    finish_scores(a, t->s, b, h, i0, rows, j0, nk);
    exp_rows(t->s, t->m, rows);
    for (int r = 0; r < rows; r++)
        if (t->m[r] != -INFINITY)
            for (int j = 0; j < BLK; j++)
                t->s[r * BLK + j] /= t->l[r];
    tile_dot(t->dp, gp, ldg, t->vt, a->ev, rows);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < BLK; j++)
            t->dp[r * BLK + j] = t->s[r * BLK + j] * (t->dp[r * BLK + j] - t->d[r]);
}

/* Phase 1: dK and dV of a key block, over the group's query heads and all
 * query blocks that can see it, in order. */
static void kv_unit(const tpu_k_attn *a, const tpu_op *op, bwd_tiles *t, int64_t b, int64_t hk,
                    int64_t kb) {
    const int64_t j0 = kb * BLK, e = a->e, ev = a->ev;
    const int nk = block_len(a->s, j0);
    float *dk = t->kr, *dv = t->acc;
    load_block(a->k, b, hk, j0, nk, e, NULL, t->kt, t->tmp);
    load_block(a->v, b, hk, j0, nk, ev, NULL, t->vt, t->tmp);
    memset(dk, 0, (size_t)(nk * e) * sizeof(float));
    memset(dv, 0, (size_t)(nk * ev) * sizeof(float));
    const int64_t nqb = tpu_k_attn_blocks(a->l);
    /* Under is_causal, query blocks before this key block see none of it. */
    const int64_t first = a->causal ? kb : 0;
    for (int64_t h = hk * a->group; h < (hk + 1) * a->group; h++)
        for (int64_t qb = first; qb < nqb; qb++) {
            const int64_t i0 = qb * BLK;
            const int rows = block_len(a->l, i0);
            int64_t ldq, ldg;
            const float *qp = rows_of(a->q, b, h, i0, rows, e, t->q, t->tmp, &ldq);
            const float *gp = rows_of(a->g, b, h, i0, rows, ev, t->g, t->tmp, &ldg);
            load_stats(op, a, t, b, h, i0, rows);
            probs_and_ds(a, t, qp, ldq, gp, ldg, b, h, i0, rows, j0, nk);
            /* dV += P^T g, dK += dS^T q (scale applied at the end). */
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < rows; r++)
                    t->pt[j * BLK + r] = t->s[r * BLK + j];
            tile_axpy(dv, ev, t->pt, gp, ldg, nk, rows, ev);
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < rows; r++)
                    t->pt[j * BLK + r] = t->dp[r * BLK + j];
            tile_axpy(dk, e, t->pt, qp, ldq, nk, rows, e);
        }
    const float scale = (float)a->scale;
    for (int j = 0; j < nk; j++) {
        for (int64_t c = 0; c < e; c++)
            dk[j * e + c] *= scale;
        store_f32(a->dk, tpu_k_attn_row(a->dk, b, hk, j0 + j), a->dk->strides[3], dk + j * e, e);
        store_f32(a->dv, tpu_k_attn_row(a->dv, b, hk, j0 + j), a->dv->strides[3], dv + j * ev, ev);
    }
}

/* Phase 2: dQ of a query block over the key blocks it can see. */
static void q_unit(const tpu_k_attn *a, const tpu_op *op, bwd_tiles *t, int64_t b, int64_t h,
                   int64_t qb) {
    const int64_t i0 = qb * BLK, hk = h / a->group, e = a->e, ev = a->ev;
    const int rows = block_len(a->l, i0);
    float *dq = t->acc;
    int64_t ldq, ldg, ldk;
    const float *qp = rows_of(a->q, b, h, i0, rows, e, t->q, t->tmp, &ldq);
    const float *gp = rows_of(a->g, b, h, i0, rows, ev, t->g, t->tmp, &ldg);
    load_stats(op, a, t, b, h, i0, rows);
    memset(dq, 0, (size_t)(rows * e) * sizeof(float));
    const int64_t nkb = key_blocks_for(a, i0, rows);
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * BLK;
        const int nk = block_len(a->s, j0);
        load_block(a->k, b, hk, j0, nk, e, NULL, t->kt, t->tmp);
        const float *kp = rows_of(a->k, b, hk, j0, nk, e, t->kr, t->tmp, &ldk);
        load_block(a->v, b, hk, j0, nk, ev, NULL, t->vt, t->tmp);
        probs_and_ds(a, t, qp, ldq, gp, ldg, b, h, i0, rows, j0, nk);
        tile_axpy(dq, e, t->dp, kp, ldk, rows, nk, e); /* dQ += dS K */
    }
    const float scale = (float)a->scale;
    for (int r = 0; r < rows; r++) {
        for (int64_t c = 0; c < e; c++)
            dq[r * e + c] *= scale;
        store_f32(a->dq, tpu_k_attn_row(a->dq, b, h, i0 + r), a->dq->strides[3], dq + r * e, e);
    }
}

tpu_status tpu_k_attn_backward_fast(const tpu_op *op, int phase, int ith, int nth) {
    tpu_k_attn a;
    tpu_k_attn_init(&a, op);
    bwd_tiles t;
    int64_t start, end;
    if (phase == 1) {
        const int64_t nkb = tpu_k_attn_blocks(a.s);
        tpu_k_split(a.b * a.hk * nkb, ith, nth, &start, &end);
        for (int64_t u = start; u < end; u++)
            kv_unit(&a, op, &t, u / (a.hk * nkb), u / nkb % a.hk, u % nkb);
        return TPU_OK;
    }
    const int64_t nqb = tpu_k_attn_blocks(a.l);
    tpu_k_split(a.b * a.h * nqb, ith, nth, &start, &end);
    for (int64_t u = start; u < end; u++) {
        const int64_t b = u / (a.h * nqb), h = u / nqb % a.h, qb = u % nqb;
        if (phase == 0)
            stats_unit(op, &a, &t, b, h, qb);
        else
            q_unit(&a, op, &t, b, h, qb);
    }
    return TPU_OK;
}
