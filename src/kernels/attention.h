/* What the ATTENTION kernels share (attention.c: the reference path and
 * the op-table hooks; attention_fast.c: the tiled path): the record read
 * as named sizes and operands, element addressing, the mask, and the
 * layout of the backward's scratch. Internal to src/kernels.
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
    const tpu_tensor *out, *lse;     /* FORWARD */
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

/* The backward's scratch: three f64 arrays of B * H * L, indexed
 * ((b * H) + h) * L + i: every query row's score max m, its sum
 * l = sum_j exp(s_j - m), and its D = sum_j P_ij dP_ij (=
 * rowsum(g * out)). Phase 0 writes them; phases 1 and 2 read them and
 * recompute P_ij = exp(s_ij - m) / l. m and l stay apart instead of
 * being folded into the logsumexp m + log l: when every score of a row
 * is huge (a row hidden by a finite mask such as -FLT_MAX, -1e30 or
 * -1e10), m + log l rounds back to m and exp(s - lse) would no longer
 * sum to 1. An all-masked row has m -inf, l 0 and D 0. */
enum { TPU_K_ATTN_STATS = 3 }; /* f64 scratch values per query row */

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

/* Query blocks of a (b, h) and key blocks of a (b, hk) on the fast path
 * (TPU_K_ATTN_BLOCK). */
static inline int64_t tpu_k_attn_blocks(int64_t n) {
    return (n + TPU_K_ATTN_BLOCK - 1) / TPU_K_ATTN_BLOCK;
}

/* True if the fast path takes the record: f32, f16 or bf16 operands and
 * head sizes that fit its tiles (TPU_K_ATTN_MAX_HEAD); f64 and larger
 * heads run on the reference. */
bool tpu_k_attn_fast_takes(const tpu_op *op);

/* The reference path (attention.c), f64 throughout: the forward, and the
 * backward's phases 0, 1 and 2. Shares split rows: (b, h, i) for the
 * forward and phases 0 and 2, (b, hk, j) for phase 1. */
tpu_status tpu_k_attn_forward_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_attn_backward_ref(const tpu_op *op, int phase, int ith, int nth);

/* The tiled path (attention_fast.c), f32: the same, over blocks. */
tpu_status tpu_k_attn_forward_fast(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_attn_backward_fast(const tpu_op *op, int phase, int ith, int nth);

#endif
