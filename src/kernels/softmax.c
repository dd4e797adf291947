/* SOFTMAX: softmax, log_softmax and their backwards along one dim.
 *
 * A row is the run of elements along the dim with the other coordinates
 * fixed. Each row is computed by one share, in a fixed order: its max
 * (forward) or its dot product (backward) first, then its sum in f64, then
 * the outputs, each rounded once to out's dtype. So results do not depend
 * on the thread count. The reference evaluates exp and log in f64; the
 * fast path (contiguous f32 rows) uses vecmath.h's exp and f32 scaling,
 * within a few ulps of it, and sums in 8 f64 lanes.
 *
 * Work split: contiguous ranges of the row index. */
#include <math.h>

#include "ew.h"
#include "kernels_internal.h"
#include "vecmath.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* The rows of an op: `count` rows of `len` elements; row r starts at
 * element offset off[k] of operand k and steps by stride[k]. */
typedef struct {
    int64_t count, len;
    int32_t outer_ndim;
    int64_t outer_sizes[TPU_MAX_DIMS];
    int64_t outer_strides[3][TPU_MAX_DIMS];
    int64_t stride[3];
} rows;

/* Splits the op's shape into the softmax dim and the others. */
static void rows_of(const tpu_op *op, rows *r) {
    const tpu_tensor *t[3] = {&op->out, &op->in[0], op->n_in == 2 ? &op->in[1] : &op->in[0]};
    int32_t d = op->p.softmax.dim;
    r->len = op->out.sizes[d];
    r->outer_ndim = 0;
    r->count = 1;
    for (int32_t k = 0; k < op->out.ndim; k++) {
        if (k == d)
            continue;
        r->outer_sizes[r->outer_ndim] = op->out.sizes[k];
        for (int i = 0; i < 3; i++)
            r->outer_strides[i][r->outer_ndim] = t[i]->strides[k];
        r->outer_ndim++;
        r->count *= op->out.sizes[k];
    }
    for (int i = 0; i < 3; i++)
        r->stride[i] = t[i]->strides[d];
}

static bool is_backward(const tpu_op *op) {
    return op->fn == TPU_SOFTMAX_BACKWARD || op->fn == TPU_SOFTMAX_LOG_BACKWARD;
}

/* One row by the definition, in f64. x, y: the inputs' rows (y only for
 * backward); o: out's row. */
static void row_ref(const tpu_op *op, const rows *r, char *o, const char *x, const char *y) {
    const tpu_dtype odt = op->out.dtype, xdt = op->in[0].dtype;
    const tpu_dtype ydt = is_backward(op) ? op->in[1].dtype : xdt;
    const int64_t so = r->stride[0] * (int64_t)tpu_dtype_size(odt);
    const int64_t sx = r->stride[1] * (int64_t)tpu_dtype_size(xdt);
    const int64_t sy = r->stride[2] * (int64_t)tpu_dtype_size(ydt);
    const int64_t n = r->len;
    if (!is_backward(op)) {
        double mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            double v = tpu_k_load_f64(x + i * sx, xdt);
            if (v > mx || v != v)
                mx = v != v || mx != mx ? NAN : v;
        }
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++)
            sum += exp(tpu_k_load_f64(x + i * sx, xdt) - mx);
        const double lse = log(sum);
        for (int64_t i = 0; i < n; i++) {
            double v = tpu_k_load_f64(x + i * sx, xdt) - mx;
            tpu_k_store_f64(o + i * so, odt, op->fn == TPU_SOFTMAX_LOG ? v - lse : exp(v) / sum);
        }
        return;
    }
    /* Backward: x is the incoming gradient g, y the forward's output. */
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = tpu_k_load_f64(x + i * sx, xdt);
        acc += op->fn == TPU_SOFTMAX_BACKWARD ? g * tpu_k_load_f64(y + i * sy, ydt) : g;
    }
    for (int64_t i = 0; i < n; i++) {
        double g = tpu_k_load_f64(x + i * sx, xdt), yv = tpu_k_load_f64(y + i * sy, ydt);
        tpu_k_store_f64(o + i * so, odt,
                        op->fn == TPU_SOFTMAX_BACKWARD ? yv * (g - acc) : g - exp(yv) * acc);
    }
}

/* Walks this share's rows, calling fn on each. */
typedef void (*row_fn)(const tpu_op *op, const rows *r, char *o, const char *x, const char *y);

static tpu_status for_rows(const tpu_op *op, int ith, int nth, row_fn fn) {
    rows r;
    rows_of(op, &r);
    int64_t start, end;
    tpu_k_split(r.count, ith, nth, &start, &end);
    if (start >= end || r.len == 0)
        return TPU_OK;
    const int64_t *strides[3] = {r.outer_strides[0], r.outer_strides[1], r.outer_strides[2]};
    tpu_k_iter it;
    tpu_k_iter_init(&it, r.outer_ndim, r.outer_sizes, 3, strides, start);
    const tpu_tensor *y = is_backward(op) ? &op->in[1] : &op->in[0];
    for (int64_t k = start; k < end; k++, tpu_k_iter_next(&it))
        fn(op, &r, tpu_k_ptr(&op->out, it.off[0]), tpu_k_ptr(&op->in[0], it.off[1]),
           tpu_k_ptr(y, it.off[2]));
    return TPU_OK;
}

tpu_status tpu_k_softmax_ref(const tpu_op *op, int ith, int nth) {
    return for_rows(op, ith, nth, row_ref);
}

/* --------------------------------------------------------- fast path */

/* Lanes of the fast row loops: independent max and sum accumulators,
 * combined in lane order at the end, so a row's result is fixed by the
 * row alone (one share computes it) and the loops do not wait on one
 * accumulator. */
enum { LANES = 8 };

/* The max of x[0..n), and whether some element is NaN. */
static float row_max_plain(const float *x, int64_t n, bool *nan) {
    float m[LANES];
    bool bad = false;
    for (int k = 0; k < LANES; k++)
        m[k] = -INFINITY;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            float v = x[i + k];
            m[k] = v > m[k] ? v : m[k];
            bad = bad || v != v;
        }
    for (; i < n; i++) {
        m[0] = x[i] > m[0] ? x[i] : m[0];
        bad = bad || x[i] != x[i];
    }
    float mx = m[0];
    for (int k = 1; k < LANES; k++)
        mx = m[k] > mx ? m[k] : mx;
    *nan = bad;
    return mx;
}

/* The sum of t[0..n) in f64 lanes: lane k adds the elements i == k mod
 * LANES (the tail into lane 0), then the lanes are added in order. */
static double row_sum_plain(const float *t, int64_t n) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += t[i + k];
    for (; i < n; i++)
        acc[0] += t[i];
    double sum = 0.0;
    for (int k = 0; k < LANES; k++)
        sum += acc[k];
    return sum;
}

#if TPU_K_X86
/* The same two loops in AVX2, lane for lane (so the same bits). */
__attribute__((target("avx2,fma"))) static float row_max_avx2(const float *x, int64_t n, bool *nan) {
    __m256 m = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_blendv_ps(m, v, _mm256_cmp_ps(v, m, _CMP_GT_OQ));
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    float lanes[LANES];
    _mm256_storeu_ps(lanes, m);
    bool any = _mm256_movemask_ps(bad) != 0;
    for (; i < n; i++) {
        lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
        any = any || x[i] != x[i];
    }
    float mx = lanes[0];
    for (int k = 1; k < LANES; k++)
        mx = lanes[k] > mx ? lanes[k] : mx;
    *nan = any;
    return mx;
}

__attribute__((target("avx2,fma"))) static double row_sum_avx2(const float *t, int64_t n) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(t + i)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(t + i + 4)));
    }
    double acc[LANES];
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
    for (; i < n; i++)
        acc[0] += t[i];
    double sum = 0.0;
    for (int k = 0; k < LANES; k++)
        sum += acc[k];
    return sum;
}
#endif

static float row_max_f32(const float *x, int64_t n, bool *nan) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx2_fma())
        return row_max_avx2(x, n, nan);
#endif
    return row_max_plain(x, n, nan);
}

static double row_sum(const float *t, int64_t n) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx2_fma())
        return row_sum_avx2(t, n);
#endif
    return row_sum_plain(t, n);
}

/* A contiguous f32 forward row: max, then exp(x - max) into out with its
 * f64 sum, then the scaling (or, for log_softmax, x - max - log sum). */
static void row_fast_f32(const tpu_op *op, const rows *r, char *po, const char *px, const char *py) {
    float *o = (float *)po;
    const float *x = (const float *)px;
    const int64_t n = r->len;
    bool nan;
    const float mx = row_max_f32(x, n, &nan);
    if (nan || mx == INFINITY) { /* the reference's NaN rules, rarely needed */
        row_ref(op, r, po, px, py);
        return;
    }
    double sum = 0.0;
    float t[TPU_K_EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += TPU_K_EW_CHUNK) {
        int64_t len = n - i0 < TPU_K_EW_CHUNK ? n - i0 : TPU_K_EW_CHUNK;
        float *dst = op->fn == TPU_SOFTMAX_LOG ? t : o + i0;
        for (int64_t i = 0; i < len; i++)
            dst[i] = x[i0 + i] - mx;
        tpu_vm_f32(TPU_VM_EXP, dst, dst, len);
        sum += row_sum(dst, len);
    }
    if (op->fn == TPU_SOFTMAX_LOG) {
        const float lse = (float)log(sum);
        for (int64_t i = 0; i < n; i++)
            o[i] = (x[i] - mx) - lse;
    } else {
        const float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < n; i++)
            o[i] = o[i] * inv;
    }
}

/* Fast path: forward softmax/log_softmax of f32 with contiguous rows in
 * and out, on CPUs with vector units. The rest goes to the reference. */
tpu_status tpu_k_softmax_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *x = &op->in[0];
    int32_t d = op->p.softmax.dim;
    if (is_backward(op) || o->dtype != TPU_DTYPE_F32 || x->dtype != TPU_DTYPE_F32 ||
        o->strides[d] != 1 || x->strides[d] != 1 || !tpu_k_is_aligned(o) || !tpu_k_is_aligned(x) ||
        tpu_kernels_get_isa() < TPU_ISA_AVX2)
        return tpu_k_softmax_ref(op, ith, nth);
    return for_rows(op, ith, nth, row_fast_f32);
}
