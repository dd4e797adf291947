/* What the ATTENTION kernels share (attention.c: the reference path and
 * the op-table hooks; attention_fast.c, attention_bwd.c and
 * attention_lanes.c: the tiled path): the record read as named sizes and
 * operands, element addressing, the mask, the layout of the backward's
 * scratch, and the tiled path's blocks. Internal to src/kernels.
 *
 * Shapes (op.h): q [B, H, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev], an
 * optional mask [B, H, L, S] (broadcast dims have stride 0), out and the
 * incoming gradient [B, H, L, Ev], the logsumexp [B, H, L]. Query head h
 * reads kv head h / (H / Hk). */
#ifndef TPU_KERNELS_ATTENTION_H
#define TPU_KERNELS_ATTENTION_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "gemm.h"
#include "kernels_internal.h"
#include "strided.h"
#include "tpu/op.h"

/* The record's operands under their names. Absent ones are NULL. */
typedef struct {
    int64_t b, h, hk, l, s, e, ev;
    int64_t group; /* query heads per kv head, H / Hk (1 when there are none) */
    double scale;
    bool causal;
    const tpu_tensor *q, *k, *v, *mask;
    const tpu_tensor *g;             /* BACKWARD: the incoming gradient */
    const tpu_tensor *out, *lse;     /* FORWARD: its results; BACKWARD: the forward's, read */
    const tpu_tensor *dq, *dk, *dv;  /* BACKWARD */
} tpu_k_attn;

/* Reads a checked ATTENTION record into `a`. */
void tpu_k_attn_init(tpu_k_attn *a, const tpu_op *op);

/* Element offset of row (b, h, i) of a 4-d operand (its dim 3 is walked
 * with strides[3]). */
static inline int64_t tpu_k_attn_row(const tpu_tensor *t, int64_t b, int64_t h, int64_t i) {
    return b * t->strides[0] + h * t->strides[1] + i * t->strides[2];
}

/* Element offset of (b, h, i) of the 3-d logsumexp. */
static inline int64_t tpu_k_attn_lse_at(const tpu_tensor *t, int64_t b, int64_t h, int64_t i) {
    return b * t->strides[0] + h * t->strides[1] + i * t->strides[2];
}

/* True if query row i may see key j under the causal rule (top-left
 * aligned, as PyTorch: j <= i). */
static inline bool tpu_k_attn_visible(const tpu_k_attn *a, int64_t i, int64_t j) {
    return !a->causal || j <= i;
}

/* What the mask adds to score (b, h, i, j): 0 without a mask, -inf where
 * a bool mask is false (0 where true), else the float mask's value. */
static inline double tpu_k_attn_mask_f64(const tpu_k_attn *a, int64_t b, int64_t h, int64_t i,
                                         int64_t j) {
    const tpu_tensor *m = a->mask;
    if (m == NULL)
        return 0.0;
    const char *p = tpu_k_ptr(m, tpu_k_attn_row(m, b, h, i) + j * m->strides[3]);
    if (m->dtype == TPU_DTYPE_BOOL)
        return *(const unsigned char *)p ? 0.0 : -INFINITY;
    return tpu_k_load_f64(p, m->dtype);
}

/* ------------------------------------------------- the backward's scratch
 *
 * Both paths run the backward in three phases (tpu_k_attention_phases)
 * and pass per-row values between them through scratch. Which layout it
 * holds depends on the path; scratch is sized for the larger. (Each
 * phase reads the kernel mode when it runs: a switch of
 * tpu_kernels_set_reference between the phases of one op would give
 * wrong values, though every access stays inside the scratch.)
 *
 * Reference path: three f64 arrays of B * H * L, indexed ((b * H) + h) *
 * L + i: every query row's score max m, its sum l = sum_j exp(s_j - m),
 * and its D = sum_j P_ij dP_ij. Phase 0 writes them; phases 1 and 2 read
 * them and recompute P_ij = exp(s_ij - m) / l. m and l stay apart
 * instead of being folded into the logsumexp m + log l: when every score
 * of a row is huge (a row hidden by a finite mask such as -FLT_MAX, -1e30
 * or -1e10), m + log l rounds back to m and exp(s - lse) would no longer
 * sum to 1. An all-masked row has m -inf, l 0 and D 0.
 *
 * Tiled path: three f32 arrays of B * H * L, the same indexing: each
 * row's subtrahend c and factor f, with P_ij = exp(s_ij - c) * f, and its
 * D = rowsum(g * out) from the forward's output. Normally c is the
 * forward's logsumexp and f is 1; a row whose logsumexp is so large that
 * it may have lost log l (|lse| >= TPU_K_ATTN_LSE_EXACT, the huge-mask
 * rows above) gets its m and l recomputed, c = m and f = 1 / l; a dead
 * row (lse -inf) gets c = +inf and f = 0, so P is 0. Then, when the keys
 * of each (b, kv head) are cut into several chunks
 * (tpu_k_attn_bwd_chunks), each chunk's share of dq: f32 [C][B][H][L][E].
 */
enum { TPU_K_ATTN_STATS = 3 }; /* values per query row in either layout */

/* |logsumexp| from which the tiled backward recomputes a row's m and l
 * rather than trust the logsumexp: below it, the rounding of lse to f32
 * (2^-18 here) is within the f32 rounding of the scores themselves. */
#define TPU_K_ATTN_LSE_EXACT 64.0f

static inline int64_t tpu_k_attn_stat_index(const tpu_k_attn *a, int64_t b, int64_t h,
                                            int64_t i) {
    return (b * a->h + h) * a->l + i;
}

static inline double *tpu_k_attn_max_scratch(const tpu_op *op) {
    return (double *)op->scratch;
}

static inline double *tpu_k_attn_sum_scratch(const tpu_op *op, const tpu_k_attn *a) {
    return (double *)op->scratch + a->b * a->h * a->l;
}

static inline double *tpu_k_attn_d_scratch(const tpu_op *op, const tpu_k_attn *a) {
    return (double *)op->scratch + 2 * a->b * a->h * a->l;
}

/* The tiled path's arrays: c, f and D of every row, then dq's partials. */
static inline float *tpu_k_attn_fast_stats(const tpu_op *op, const tpu_k_attn *a, int which) {
    return (float *)op->scratch + which * a->b * a->h * a->l;
}

static inline float *tpu_k_attn_dq_partial(const tpu_op *op, const tpu_k_attn *a, int64_t c,
                                           int64_t b, int64_t h, int64_t i) {
    return (float *)op->scratch + TPU_K_ATTN_STATS * a->b * a->h * a->l +
           (((c * a->b + b) * a->h + h) * a->l + i) * a->e;
}

/* ------------------------------------------------------ the tiled path */

/* Query blocks of a (b, h) (TPU_K_ATTN_QBLOCK rows each). */
static inline int64_t tpu_k_attn_qblocks(int64_t l) {
    return (l + TPU_K_ATTN_QBLOCK - 1) / TPU_K_ATTN_QBLOCK;
}

/* Chunks of keys a (b, kv head) is cut into for the backward's phase 1
 * (one share unit each): enough units for TPU_K_ATTN_KV_UNITS, at most
 * TPU_K_ATTN_MAX_CHUNKS and one per key block. 1 for an empty record.
 * Depends on the sizes only. */
int64_t tpu_k_attn_bwd_chunks(const tpu_k_attn *a);

/* Keys [*k0, *k1) of chunk c of n (whole key blocks of TPU_K_ATTN_KBLOCK). */
void tpu_k_attn_chunk_keys(const tpu_k_attn *a, int64_t c, int64_t n, int64_t *k0, int64_t *k1);

/* True if a query block [i0, i0 + rows) sees a key of [k0, k1) under the
 * causal rule (always without it); k1 > k0. */
static inline bool tpu_k_attn_block_sees(const tpu_k_attn *a, int64_t i0, int64_t rows,
                                         int64_t k0) {
    return !a->causal || i0 + rows - 1 >= k0;
}

/* Bytes of scratch the backward needs on the tiled path. */
int64_t tpu_k_attn_fast_scratch_bytes(const tpu_op *op);

/* True if the fast path takes the record: f32, f16 or bf16 operands and
 * head sizes up to TPU_K_ATTN_MAX_HEAD; f64 and larger heads run on the
 * reference. */
bool tpu_k_attn_fast_takes(const tpu_op *op);

/* The element-wise steps of the tiled path over transposed score blocks
 * s[j * ld + q] (key j, query lane q, j < nk, q < nq): attention_lanes.c,
 * one set per instruction-set level, all giving the same bits. */
typedef struct {
    /* s *= scale; under causal, -inf in lanes q < j + first of row j;
     * with m (else NULL), also as max below */
    void (*scale)(float *s, int64_t ld, int64_t nk, int64_t nq, float scale, bool causal,
                  int64_t first, float *m);
    /* m[q] = max(m[q], s[j][q] for every j), NaN passed over */
    void (*max)(const float *s, int64_t ld, int64_t nk, int64_t nq, float *m);
    /* s[j][q] *= f[q] */
    void (*mul)(float *s, int64_t ld, int64_t nk, int64_t nq, const float *f);
    /* dp[j][q] = p[j][q] * (dp[j][q] - d[q]) */
    void (*ds)(const float *p, float *dp, int64_t ld, int64_t nk, int64_t nq, const float *d);
} tpu_k_attn_lanes;

/* The steps for the level tpu_kernels_get_isa() allows. Never NULL. */
const tpu_k_attn_lanes *tpu_k_attn_lanes_get(void);

/* What the tiled path's forward and backward share (attention_fast.c). */
typedef struct {
    tpu_k_attn a;
    const tpu_k_gemm_config *uk; /* the block products' micro-kernel */
    const tpu_k_attn_lanes *ln;
    int64_t qpad;  /* lanes of a full query block (tpu_k_attn_lanes_for): buffers' size */
    float *gemm_tmp; /* edge tiles of tpu_k_attn_gemm: (max k) * mr + mr * nr floats */
} tpu_k_attn_ctx;

/* Lanes of a block of `rows` queries (1 <= rows <= TPU_K_ATTN_QBLOCK):
 * rows rounded up to the micro-kernel's nr, at most qpad. */
static inline int64_t tpu_k_attn_lanes_for(const tpu_k_attn_ctx *ctx, int64_t rows) {
    return (rows + ctx->uk->nr - 1) / ctx->uk->nr * ctx->uk->nr;
}

/* Sets up ctx for op; gemm_tmp is left NULL for the caller to give. */
void tpu_k_attn_ctx_init(tpu_k_attn_ctx *ctx, const tpu_op *op);

/* Floats tpu_k_attn_gemm's `tmp` needs for inner sizes up to kmax. */
int64_t tpu_k_attn_gemm_tmp_floats(const tpu_k_attn_ctx *ctx, int64_t kmax);

/* C (m x n) = (accumulate ? C : 0) + A (m x kc) B (kc x n) with the
 * micro-kernel's fma chains: A(i, k) = a[i * rsa + k * csa], B(k, j) =
 * b[k * ldb + j], C(i, j) = c[i * ldc + j]. n must be a multiple of nr
 * (B and C have those columns); rows of C past m are never touched (a
 * last partial row tile goes through `tmp`, tpu_k_attn_gemm_tmp_floats). */
void tpu_k_attn_gemm(const tpu_k_attn_ctx *ctx, int64_t m, int64_t n, int64_t kc, const float *a,
                     int64_t rsa, int64_t csa, const float *b, int64_t ldb, float *c, int64_t ldc,
                     bool accumulate);

/* 64-byte aligned f32 buffer of n floats (NULL on failure; free()). */
float *tpu_k_attn_alloc(int64_t n);

/* Rows r0 .. r0 + n - 1 of (b, head) of t, `width` values each, as f32
 * rows `*ld` floats apart: t's own memory when it is aligned f32 with
 * unit-stride rows, else converted into buf (ld = width). */
const float *tpu_k_attn_rows(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int64_t n,
                             int64_t width, float *buf, int64_t *ld);

/* Rows r0 .. r0 + n - 1 of (b, head) of t as f32 into dst[r * ld + c]
 * for c < width, zero for width <= c < ld. */
void tpu_k_attn_pack_rows(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int64_t n,
                          int64_t width, float *dst, int64_t ld);

/* The same rows transposed: dst[c * ld + r] for c < width and r < n, zero
 * for n <= r < ld. */
void tpu_k_attn_pack_cols(const tpu_tensor *t, int64_t b, int64_t head, int64_t r0, int64_t n,
                          int64_t width, float *dst, int64_t ld);

/* `width` f32 values into row r of (b, head) of t, rounded once to its
 * dtype. */
void tpu_k_attn_store_row(const tpu_tensor *t, int64_t b, int64_t head, int64_t r, int64_t width,
                          const float *src);

/* Turns a block of transposed dot products s[j * ld + q] of keys j0 + j
 * (j < nk) and queries i0 + q (q < nq; lanes q >= rows are padding) into
 * scores: times scale, -inf where is_causal hides the key, then the
 * mask's value added (-inf where it masks) for the rows q < rows. With m
 * (else NULL), also m[q] = max(m[q], every score of lane q), NaN passed
 * over. */
void tpu_k_attn_scores(const tpu_k_attn_ctx *ctx, float *s, int64_t ld, int64_t b, int64_t h,
                       int64_t i0, int64_t rows, int64_t nq, int64_t j0, int64_t nk, float *m);

/* The statistics of query block [i0, i0 + rows) of (b, h) over every key
 * it sees, in the forward's online order: each lane's score max m
 * (-inf when every key is masked) and sum l of exp(s - m). `st` holds
 * TPU_K_ATTN_KBLOCK x qpad floats, `kbuf` TPU_K_ATTN_KBLOCK x E, `qt`
 * the block's queries transposed (E x lanes, tpu_k_attn_pack_cols with
 * ld = tpu_k_attn_lanes_for(rows)). */
void tpu_k_attn_row_stats(const tpu_k_attn_ctx *ctx, int64_t b, int64_t h, int64_t i0,
                          int64_t rows, const float *qt, float *st, float *kbuf, float *m,
                          float *l);

/* The reference path (attention.c), f64 throughout: the forward, and the
 * backward's phases 0, 1 and 2. Shares split rows: (b, h, i) for the
 * forward and phases 0 and 2, (b, hk, j) for phase 1. */
tpu_status tpu_k_attn_forward_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_attn_backward_ref(const tpu_op *op, int phase, int ith, int nth);

/* The tiled path, f32: the forward (attention_fast.c) and the backward's
 * phases (attention_bwd.c). */
tpu_status tpu_k_attn_forward_fast(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_attn_backward_fast(const tpu_op *op, int phase, int ith, int nth);

#endif
