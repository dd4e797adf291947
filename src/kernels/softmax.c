/* SOFTMAX: softmax, log_softmax and their backwards along one dim.
 *
 * A row is the run of elements along the dim with the other coordinates
 * fixed. Each row is computed by one share, in a fixed order: its max
 * (forward) or its dot product (backward) first, then its sum in f64, then
 * the outputs, each rounded once to out's dtype. So results do not depend
 * on the thread count. The reference evaluates exp and log in f64; the
 * fast path (contiguous f32 rows, forward and backward) uses vecmath.h's
 * exp and, forward, f32 scaling, within a few ulps of it, and sums in 16
 * f64 lanes (the same bits in its AVX2 and AVX-512 builds).
 *
 * f16 and bf16 rows (and mixed ones) take the fast path through f32
 * copies of the row, each output rounded once from f32 as PyTorch's CPU
 * kernels do. SAFE (PyTorch's _safe_softmax, what attention with a mask
 * uses) is the forward with 0 for a row that is all -inf.
 *
 * Work split: contiguous ranges of the row index. */
#include <math.h>
#include <string.h>

#include "ew.h"
#include "kernels_internal.h"
#include "row_lanes.h"
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
        if (op->fn == TPU_SOFTMAX_SAFE && mx == -INFINITY) {
            for (int64_t i = 0; i < n; i++)
                tpu_k_store_f64(o + i * so, odt, 0.0);
            return;
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
    if (r.len == 0)
        return TPU_OK;
    const int64_t *strides[3] = {r.outer_strides[0], r.outer_strides[1], r.outer_strides[2]};
    const tpu_tensor *y = is_backward(op) ? &op->in[1] : &op->in[0];
    /* Rows are independent: claimed in chunks (tpu_k_parts). */
    tpu_k_parts parts;
    tpu_k_parts_init(&parts, r.count, 1, ith, nth);
    int64_t start, end;
    while (tpu_k_parts_next(&parts, &start, &end)) {
        tpu_k_iter it;
        tpu_k_iter_init(&it, r.outer_ndim, r.outer_sizes, 3, strides, start);
        for (int64_t k = start; k < end; k++, tpu_k_iter_next(&it))
            fn(op, &r, tpu_k_ptr(&op->out, it.off[0]), tpu_k_ptr(&op->in[0], it.off[1]),
               tpu_k_ptr(y, it.off[2]));
    }
    return TPU_OK;
}

tpu_status tpu_k_softmax_ref(const tpu_op *op, int ith, int nth) {
    return for_rows(op, ith, nth, row_ref);
}

/* --------------------------------------------------------- fast path */

#if TPU_K_X86
/* The max of x[0..n), and whether some element is NaN. Four vectors of
 * running maxima, so that the loop waits on no single accumulator (one
 * compare-and-blend chain made this the slowest pass of a softmax row).
 * A max is exact whatever the order of its operands, except for NaN
 * (tracked apart, and the caller hands such rows to the reference) and
 * the choice between -0 and +0, which no result of the row depends on
 * (x - mx and exp see either zero alike). */
__attribute__((target("avx2,fma"))) static float row_max_f32(const float *x, int64_t n, bool *nan) {
    __m256 m[4], bad = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++)
        m[k] = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_loadu_ps(x + i + 8 * k);
            m[k] = _mm256_max_ps(v, m[k]); /* m[k] where v is NaN */
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        m[0] = _mm256_max_ps(v, m[0]);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    __m256 all = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
    float lanes[8];
    _mm256_storeu_ps(lanes, all);
    bool any = _mm256_movemask_ps(bad) != 0;
    float mx = -INFINITY;
    for (int k = 0; k < 8; k++)
        mx = lanes[k] > mx ? lanes[k] : mx;
    for (; i < n; i++) {
        mx = x[i] > mx ? x[i] : mx;
        any = any || x[i] != x[i];
    }
    *nan = any;
    return mx;
}

/* The fast row's element loops, written once with GCC's vector
 * extensions (row_lanes.h) and built for AVX2 and for AVX-512 (the body
 * inlined into two wrappers with different target attributes): each
 * operator is one IEEE operation per lane and -std=c11 contracts nothing
 * into an fma, so both builds give the same bits. */
typedef tpu_k_v8f v8f;
typedef tpu_k_v4d v4d;
#define ROW_INLINE TPU_K_ROW_INLINE

ROW_INLINE v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

ROW_INLINE v8f splat8(float v) {
    return (v8f){v, v, v, v, v, v, v, v};
}

/* A contiguous f32 forward row: max, then exp(x - max) into out (chunk
 * by chunk) with its f64 sum, then the scaling (or, for log_softmax,
 * x - max - log sum). */
/* A forward row of n f32 values at x into o; false, having written
 * nothing, for a row the reference must do (a NaN or +inf in it). */
ROW_INLINE bool row_fast_body(const tpu_op *op, int64_t n, float *o, const float *x) {
    bool nan;
    const float mx = row_max_f32(x, n, &nan);
    if (nan || mx == INFINITY) /* the reference's NaN rules, rarely needed */
        return false;
    if (op->fn == TPU_SOFTMAX_SAFE && mx == -INFINITY) {
        memset(o, 0, (size_t)n * sizeof *o);
        return true;
    }
    const v8f vmx = splat8(mx);
    tpu_k_row_lanes lanes;
    tpu_k_lanes_init(&lanes);
    float t[TPU_K_EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += TPU_K_EW_CHUNK) {
        const int64_t len = n - i0 < TPU_K_EW_CHUNK ? n - i0 : TPU_K_EW_CHUNK;
        float *dst = op->fn == TPU_SOFTMAX_LOG ? t : o + i0;
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) {
            const v8f d = load8(x + i0 + i) - vmx;
            memcpy(dst + i, &d, sizeof d);
        }
        for (; i < len; i++)
            dst[i] = x[i0 + i] - mx;
        tpu_vm_f32(TPU_VM_EXP, dst, dst, len);
        tpu_k_lanes_add(&lanes, dst, len);
    }
    const double sum = tpu_k_lanes_total(&lanes);
    int64_t i = 0;
    if (op->fn == TPU_SOFTMAX_LOG) {
        const float lse = (float)log(sum);
        const v8f vlse = splat8(lse);
        for (; i + 8 <= n; i += 8) {
            const v8f v = (load8(x + i) - vmx) - vlse;
            memcpy(o + i, &v, sizeof v);
        }
        for (; i < n; i++)
            o[i] = (x[i] - mx) - lse;
    } else {
        const float inv = (float)(1.0 / sum);
        const v8f vinv = splat8(inv);
        for (; i + 8 <= n; i += 8) {
            const v8f v = load8(o + i) * vinv;
            memcpy(o + i, &v, sizeof v);
        }
        for (; i < n; i++)
            o[i] = o[i] * inv;
    }
    return true;
}

/* A contiguous f32 backward row, g (px) and the forward's output y (py):
 * the f64 sum of the reference (sum g y, or for log_softmax sum g) in 16
 * lanes, then each output from it in f64 as the reference computes it,
 * rounded once; log_softmax's exp(y) is vecmath's f32 exp, within its 2
 * ulps of the reference's f64 one. */
ROW_INLINE void row_back_body(const tpu_op *op, int64_t n, float *o, const float *g, const float *y) {
    const bool log_form = op->fn == TPU_SOFTMAX_LOG_BACKWARD;
    tpu_k_row_lanes lanes;
    tpu_k_lanes_init(&lanes);
    int64_t i = 0;
    for (; i + TPU_K_ROW_LANES <= n; i += TPU_K_ROW_LANES)
        for (int q = 0; q < 4; q++)
            lanes.q[q] += log_form ? tpu_k_load4_f64(g + i + 4 * q)
                                   : tpu_k_load4_f64(g + i + 4 * q) * tpu_k_load4_f64(y + i + 4 * q);
    for (; i < n; i++)
        lanes.tail[lanes.n_tail++] = log_form ? (double)g[i] : (double)g[i] * (double)y[i];
    const double acc = tpu_k_lanes_total(&lanes);
    const v4d vacc = {acc, acc, acc, acc};
    float t[TPU_K_EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += TPU_K_EW_CHUNK) {
        const int64_t len = n - i0 < TPU_K_EW_CHUNK ? n - i0 : TPU_K_EW_CHUNK;
        const float *gc = g + i0, *yc = y + i0;
        float *oc = o + i0;
        if (log_form)
            tpu_vm_f32(TPU_VM_EXP, t, yc, len); /* before the stores: o may be g or y */
        int64_t j = 0;
        for (; j + 4 <= len; j += 4) {
            const v4d v = log_form ? tpu_k_load4_f64(gc + j) - tpu_k_load4_f64(t + j) * vacc
                                   : tpu_k_load4_f64(yc + j) * (tpu_k_load4_f64(gc + j) - vacc);
            for (int k = 0; k < 4; k++)
                oc[j + k] = (float)v[k];
        }
        for (; j < len; j++)
            oc[j] = (float)(log_form ? (double)gc[j] - (double)t[j] * acc
                                     : (double)yc[j] * ((double)gc[j] - acc));
    }
}

/* Rows of f16/bf16 (or mixed) operands up to this length go through f32
 * copies on the stack (3 x 32 KB); longer ones take the reference. */
enum { STAGE_MAX = 8192 };

/* One contiguous row: f32 operands in place, others through f32 copies
 * (the output rounded once from f32). */
ROW_INLINE void row_any_body(const tpu_op *op, const rows *r, char *po, const char *px, const char *py) {
    const int64_t n = r->len;
    const tpu_dtype odt = op->out.dtype, xdt = op->in[0].dtype;
    const tpu_dtype ydt = is_backward(op) ? op->in[1].dtype : TPU_DTYPE_F32;
    if (odt == TPU_DTYPE_F32 && xdt == TPU_DTYPE_F32 && ydt == TPU_DTYPE_F32) {
        if (is_backward(op))
            row_back_body(op, n, (float *)po, (const float *)px, (const float *)py);
        else if (!row_fast_body(op, n, (float *)po, (const float *)px))
            row_ref(op, r, po, px, py);
        return;
    }
    if (n > STAGE_MAX) {
        row_ref(op, r, po, px, py);
        return;
    }
    float xs[STAGE_MAX], ys[STAGE_MAX], os[STAGE_MAX];
    tpu_k_cvt_to_f32(xs, px, xdt, n);
    if (is_backward(op)) {
        tpu_k_cvt_to_f32(ys, py, ydt, n);
        row_back_body(op, n, os, xs, ys);
    } else if (!row_fast_body(op, n, os, xs)) {
        row_ref(op, r, po, px, py);
        return;
    }
    tpu_k_cvt_from_f32(po, odt, os, n);
}

__attribute__((target("avx2,fma"))) static void row_fast_avx2(const tpu_op *op, const rows *r, char *po,
                                                              const char *px, const char *py) {
    row_any_body(op, r, po, px, py);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static void
row_fast_512(const tpu_op *op, const rows *r, char *po, const char *px, const char *py) {
    row_any_body(op, r, po, px, py);
}
#endif /* TPU_K_X86 */

/* Fast path: f32, f16 and bf16 rows contiguous in out and every input
 * (every function), on CPUs with vector units. The rest goes to the
 * reference. */
tpu_status tpu_k_softmax_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    const int32_t d = op->p.softmax.dim;
    bool ok = tpu_k_cvt_supported(o->dtype) && o->strides[d] == 1 && tpu_k_is_aligned(o) &&
              tpu_k_cpu_has_avx2_fma();
    for (int k = 0; k < op->n_in; k++) {
        const tpu_tensor *x = &op->in[k];
        ok = ok && tpu_k_cvt_supported(x->dtype) && x->strides[d] == 1 && tpu_k_is_aligned(x);
    }
    if (!ok)
        return tpu_k_softmax_ref(op, ith, nth);
#if TPU_K_X86
    return for_rows(op, ith, nth, tpu_k_cpu_has_avx512() ? row_fast_512 : row_fast_avx2);
#else
    return tpu_k_softmax_ref(op, ith, nth);
#endif
}
