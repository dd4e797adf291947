/* Reductions over the dims in p.reduce.mask: SUM and MEAN (below, with
 * their fast paths), VAR and STD (two passes, var_of), and PROD,
 * AMAX/AMIN, ARGMAX/ARGMIN, ANY/ALL (in the reference loop, reduce_other;
 * ANY/ALL of trailing bool runs and the AMAX ... ARGMIN of trailing f32
 * runs also in reduce_trailing, the latter with vector loops,
 * pick_f32_run).
 *
 * Accumulation type follows out.dtype: f64 for float outputs (each input
 * loaded as f64), wrapping int64 for integer and bool outputs (each input
 * converted to out's dtype first, as PyTorch does: floats per
 * tpu_k_load_int, so sum(x, dtype=int32) of 3e9 adds INT32_MIN).
 * MEAN divides the f64 sum by the count; zero elements give SUM 0 and
 * MEAN NaN. The result is rounded once on store.
 *
 * Work split: contiguous ranges of out's row-major element index. Each
 * output value is accumulated by one share, in an order fixed by the path
 * alone, so results do not depend on nth. The reference path adds in the
 * reduced dims' row-major order; the fast paths either keep that order
 * (leading-dims reduction) or use 16 fixed lanes (trailing-dims
 * reduction), see below.
 *
 * A trailing-dims reduction of long contiguous float runs into few
 * outputs (a full sum) would leave all but a few threads idle, so it is
 * split (in both kernel modes): each output's run is cut into chunks of
 * SPLIT_CHUNK elements, fixed by the record alone; phase 0 sums each chunk
 * (f32: 16 lanes; other dtypes: in order) into an f64 partial in
 * op->scratch, on any thread; phase 1 adds each output's partials in
 * chunk order. The picks (AMAX ... ARGMIN) of f32 runs split the same
 * way, each partial the index of its chunk's pick. The result is the
 * same for any thread count. */
#include <math.h>
#include <stdlib.h>

#include "convert.h"
#include "kernels_internal.h"
#include "strided.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* Number of input elements folded into each output value. */
static int64_t reduced_count(const tpu_op *op) {
    int64_t r = 1;
    for (int32_t d = 0; d < op->in[0].ndim; d++)
        if ((op->p.reduce.mask >> d) & 1u)
            r *= op->in[0].sizes[d];
    return r;
}

/* What the lane sums add per element: SUM and MEAN the value, NORM of
 * order 1 its magnitude, of order 2 its square (exact in f64, as the
 * reference's a * a). */
typedef enum { SUM_VALUE, SUM_ABS, SUM_SQUARE, SUM_NONE } sum_kind;

static sum_kind sum_kind_of(const tpu_op *op) {
    if (op->fn == TPU_REDUCE_SUM || op->fn == TPU_REDUCE_MEAN)
        return SUM_VALUE;
    if (op->fn == TPU_REDUCE_NORM && op->p.reduce.ord == 1.0)
        return SUM_ABS;
    if (op->fn == TPU_REDUCE_NORM && op->p.reduce.ord == 2.0)
        return SUM_SQUARE;
    return SUM_NONE;
}

/* Turns a float sum over `count` elements (of |x| or x * x for the
 * summed norms) into the op's result. */
static double finish_f64(const tpu_op *op, double sum, int64_t count) {
    if (op->fn == TPU_REDUCE_MEAN)
        return count > 0 ? sum / (double)count : NAN;
    return sum_kind_of(op) == SUM_SQUARE ? sqrt(sum) : sum;
}

static inline double sum_term(sum_kind k, double v) {
    return k == SUM_VALUE ? v : k == SUM_ABS ? fabs(v) : v * v;
}

/* ---------------------------------------------------- reference path */

/* Whether a is "better" than the best so far for AMAX/ARGMAX (largest) or
 * AMIN/ARGMIN (smallest); a NaN beats everything and nothing beats the
 * first NaN, so the first NaN wins. */
static bool beats_f64(double a, double best, bool largest) {
    if (isnan(best))
        return false;
    if (isnan(a))
        return true;
    return largest ? a > best : a < best;
}

/* PROD, AMAX, AMIN, ARGMAX, ARGMIN, ANY, ALL of the `count` elements at
 * in-offsets walked by `inner` from `base`, stored to dst. */
static void reduce_other(const tpu_op *op, tpu_k_iter *inner, int64_t base, int64_t count,
                         char *dst) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    bool float_in = tpu_dtype_is_float(in->dtype);
    switch ((tpu_reduce_fn)op->fn) {
    case TPU_REDUCE_PROD:
        if (tpu_dtype_is_float(o->dtype)) {
            double acc = 1.0;
            for (int64_t r = 0; r < count; r++, tpu_k_iter_next(inner))
                acc *= tpu_k_load_f64(tpu_k_ptr(in, base + inner->off[0]), in->dtype);
            tpu_k_store_f64(dst, o->dtype, acc);
        } else {
            uint64_t acc = 1; /* unsigned: integer products wrap */
            for (int64_t r = 0; r < count; r++, tpu_k_iter_next(inner))
                acc *= (uint64_t)tpu_k_load_int(tpu_k_ptr(in, base + inner->off[0]), in->dtype,
                                                o->dtype);
            tpu_k_store_i64(dst, o->dtype, tpu_k_u64_to_i64(acc));
        }
        return;
    case TPU_REDUCE_AMAX:
    case TPU_REDUCE_AMIN:
    case TPU_REDUCE_ARGMAX:
    case TPU_REDUCE_ARGMIN: {
        bool largest = op->fn == TPU_REDUCE_AMAX || op->fn == TPU_REDUCE_ARGMAX;
        int64_t best_at = 0;
        double best_f = 0.0;
        int64_t best_i = 0;
        for (int64_t r = 0; r < count; r++, tpu_k_iter_next(inner)) {
            const char *x = tpu_k_ptr(in, base + inner->off[0]);
            if (float_in) {
                double v = tpu_k_load_f64(x, in->dtype);
                if (r == 0 || beats_f64(v, best_f, largest)) {
                    best_f = v;
                    best_at = r;
                }
            } else {
                int64_t v = tpu_k_load_i64(x, in->dtype);
                if (r == 0 || (largest ? v > best_i : v < best_i)) {
                    best_i = v;
                    best_at = r;
                }
            }
        }
        if (op->fn == TPU_REDUCE_ARGMAX || op->fn == TPU_REDUCE_ARGMIN)
            tpu_k_store_i64(dst, o->dtype, best_at);
        else if (float_in)
            tpu_k_store_f64(dst, o->dtype, best_f);
        else
            tpu_k_store_i64(dst, o->dtype, best_i);
        return;
    }
    case TPU_REDUCE_ANY:
    case TPU_REDUCE_ALL: {
        bool any = op->fn == TPU_REDUCE_ANY, acc = !any;
        for (int64_t r = 0; r < count && acc != any; r++, tpu_k_iter_next(inner))
            acc = tpu_k_load_bool(tpu_k_ptr(in, base + inner->off[0]), in->dtype);
        tpu_k_store_i64(dst, o->dtype, acc);
        return;
    }
    case TPU_REDUCE_NORM: {
        const double ord = op->p.reduce.ord;
        double acc = 0.0;
        for (int64_t r = 0; r < count; r++, tpu_k_iter_next(inner)) {
            double a = fabs(tpu_k_load_f64(tpu_k_ptr(in, base + inner->off[0]), in->dtype));
            if (isinf(ord)) { /* max or min |x|; the first NaN sticks */
                if (r == 0 || (!isnan(acc) && (isnan(a) || (ord > 0 ? a > acc : a < acc))))
                    acc = a;
            } else if (ord == 0.0)
                acc += a != 0.0;
            else if (ord == 1.0)
                acc += a;
            else if (ord == 2.0)
                acc += a * a;
            else
                acc += pow(a, ord);
        }
        double v = acc;
        if (ord == 2.0)
            v = sqrt(acc);
        else if (!isinf(ord) && ord != 0.0 && ord != 1.0)
            v = pow(acc, 1.0 / ord);
        tpu_k_store_f64(dst, o->dtype, v);
        return;
    }
    case TPU_REDUCE_SUM:
    case TPU_REDUCE_MEAN:
    case TPU_REDUCE_VAR: /* var_of */
    case TPU_REDUCE_STD:
    case TPU_REDUCE_COUNT: break;
    }
}

/* VAR and STD of one output (below, with the sums' lanes). */
static bool is_var(const tpu_op *op) {
    return op->fn == TPU_REDUCE_VAR || op->fn == TPU_REDUCE_STD;
}
static bool var_runs(const tpu_op *op);
static double var_of(const tpu_op *op, tpu_k_iter *inner, int64_t base, int64_t count, bool runs);

tpu_status tpu_k_reduce_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    /* Outer walk: out's shape with out's and in's strides (reduced dims
     * have size 1 in out, so they add nothing to in's offset). Inner walk:
     * the reduced dims only, the kept ones shrunk to size 1. */
    const int64_t *outer_strides[2] = {o->strides, in->strides};
    tpu_k_iter outer;
    tpu_k_iter_init(&outer, o->ndim, o->sizes, 2, outer_strides, start);
    int64_t inner_sizes[TPU_MAX_DIMS];
    for (int32_t d = 0; d < in->ndim; d++)
        inner_sizes[d] = (op->p.reduce.mask >> d) & 1u ? in->sizes[d] : 1;
    const int64_t *inner_strides[1] = {in->strides};
    int64_t count = reduced_count(op);
    bool float_out = tpu_dtype_is_float(o->dtype);
    const bool runs = is_var(op) && var_runs(op);

    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&outer)) {
        int64_t base = outer.off[1];
        tpu_k_iter inner;
        tpu_k_iter_init(&inner, in->ndim, inner_sizes, 1, inner_strides, 0);
        char *dst = tpu_k_ptr(o, outer.off[0]);
        if (is_var(op)) {
            tpu_k_store_f64(dst, o->dtype, var_of(op, &inner, base, count, runs));
        } else if (op->fn != TPU_REDUCE_SUM && op->fn != TPU_REDUCE_MEAN) {
            reduce_other(op, &inner, base, count, dst);
        } else if (float_out) {
            double acc = 0.0;
            for (int64_t r = 0; r < count; r++, tpu_k_iter_next(&inner))
                acc += tpu_k_load_f64(tpu_k_ptr(in, base + inner.off[0]), in->dtype);
            tpu_k_store_f64(dst, o->dtype, finish_f64(op, acc, count));
        } else {
            uint64_t acc = 0; /* unsigned: integer sums wrap */
            for (int64_t r = 0; r < count; r++, tpu_k_iter_next(&inner))
                acc += (uint64_t)tpu_k_load_int(tpu_k_ptr(in, base + inner.off[0]), in->dtype,
                                                o->dtype);
            tpu_k_store_i64(dst, o->dtype, tpu_k_u64_to_i64(acc));
        }
    }
    return TPU_OK;
}

/* ------------------------------------------- trailing-dims fast path */

/* Lanes of the trailing-dims sum: lane j adds elements j, j+16, ... The
 * lanes are then combined pairwise (j += j + 8, then 4, 2, 1) and the
 * tail added in order. Both variants below follow exactly this order,
 * so they agree bit for bit with each other on every CPU. */
enum { SUM_LANES = 16 };

static double lanes_fold(double lanes[SUM_LANES]) {
    for (int w = SUM_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            lanes[j] += lanes[j + w];
    return lanes[0];
}

static double lanes_combine(double lanes[SUM_LANES], sum_kind k, const float *x, int64_t done,
                            int64_t n) {
    double s = lanes_fold(lanes);
    for (int64_t i = done; i < n; i++)
        s += sum_term(k, x[i]);
    return s;
}

/* VAR's second pass over a run: the squares of (x - mean) in f64, in the
 * same 16 lanes and tail order as the sums (both variants). */
static double sq_dev_tail(double s, const float *x, int64_t done, int64_t n, double mean) {
    for (int64_t i = done; i < n; i++) {
        double d = (double)x[i] - mean;
        s += d * d;
    }
    return s;
}

static double sq_dev_f32_run_plain(const float *x, int64_t n, double mean) {
    double lanes[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int j = 0; j < SUM_LANES; j++) {
            double d = (double)x[i + j] - mean;
            lanes[j] += d * d;
        }
    return sq_dev_tail(lanes_fold(lanes), x, i, n, mean);
}

static double sum_f32_run_plain(sum_kind k, const float *x, int64_t n) {
    double lanes[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int j = 0; j < SUM_LANES; j++)
            lanes[j] += sum_term(k, x[i + j]);
    return lanes_combine(lanes, k, x, i, n);
}

#if TPU_K_X86
enum { SUM_PREFETCH_BYTES = 2048 };

/* Same lanes, four per register: accumulator q holds lanes 4q..4q+3.
 * Named registers, not an array, so that -O2 keeps them out of memory
 * (four independent add chains hide the add latency). */
__attribute__((target("avx2,fma"))) static inline __m256d term4(sum_kind k, const float *p) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(p));
    if (k == SUM_ABS)
        return _mm256_andnot_pd(_mm256_set1_pd(-0.0), v);
    return k == SUM_SQUARE ? _mm256_mul_pd(v, v) : v;
}

__attribute__((target("avx2,fma"))) static double sum_f32_run_avx2(sum_kind k, const float *x,
                                                                   int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES) {
        /* 2 KiB ahead: with 16-byte loads the hardware's prefetch alone
         * let a run beyond L2 stream at 10 GB/s a core; with this, 28. */
        _mm_prefetch((const char *)(x + i) + SUM_PREFETCH_BYTES, _MM_HINT_T0);
        a0 = _mm256_add_pd(a0, term4(k, x + i));
        a1 = _mm256_add_pd(a1, term4(k, x + i + 4));
        a2 = _mm256_add_pd(a2, term4(k, x + i + 8));
        a3 = _mm256_add_pd(a3, term4(k, x + i + 12));
    }
    double lanes[SUM_LANES];
    _mm256_storeu_pd(lanes, a0);
    _mm256_storeu_pd(lanes + 4, a1);
    _mm256_storeu_pd(lanes + 8, a2);
    _mm256_storeu_pd(lanes + 12, a3);
    return lanes_combine(lanes, k, x, i, n);
}
#endif

static double sum_f32_run(sum_kind k, const float *x, int64_t n) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx2_fma())
        return sum_f32_run_avx2(k, x, n);
#endif
    return sum_f32_run_plain(k, x, n);
}

#if TPU_K_X86
__attribute__((target("avx2,fma"))) static double sq_dev_f32_run_avx2(const float *x, int64_t n,
                                                                      double mean) {
    const __m256d m = _mm256_set1_pd(mean);
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
#define SQ_DEV(A, OFF)                                                                             \
    {                                                                                              \
        __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + (OFF))), m);                \
        A = _mm256_add_pd(A, _mm256_mul_pd(d, d));                                                 \
    }
    for (; i + SUM_LANES <= n; i += SUM_LANES) {
        _mm_prefetch((const char *)(x + i) + SUM_PREFETCH_BYTES, _MM_HINT_T0);
        SQ_DEV(a0, 0)
        SQ_DEV(a1, 4)
        SQ_DEV(a2, 8)
        SQ_DEV(a3, 12)
    }
#undef SQ_DEV
    double lanes[SUM_LANES];
    _mm256_storeu_pd(lanes, a0);
    _mm256_storeu_pd(lanes + 4, a1);
    _mm256_storeu_pd(lanes + 8, a2);
    _mm256_storeu_pd(lanes + 12, a3);
    return sq_dev_tail(lanes_fold(lanes), x, i, n, mean);
}
#endif

static double sq_dev_f32_run(const float *x, int64_t n, double mean) {
#if TPU_K_X86
    if (tpu_k_cpu_has_avx2_fma())
        return sq_dev_f32_run_avx2(x, n, mean);
#endif
    return sq_dev_f32_run_plain(x, n, mean);
}

/* If the mask is exactly dims [first, ndim) for some first < ndim and
 * those dims of in are row-major contiguous, returns first; else -1. */
static int32_t trailing_block(const tpu_op *op) {
    const tpu_tensor *in = &op->in[0];
    uint32_t mask = op->p.reduce.mask;
    if (in->ndim == 0 || mask == 0)
        return -1;
    int32_t first = in->ndim;
    while (first > 0 && ((mask >> (first - 1)) & 1u))
        first--;
    if ((mask & ((1u << first) - 1u)) != 0 || first == in->ndim)
        return -1;
    return tpu_k_is_row_major_from(in, first) ? first : -1;
}

/* Whether VAR's outputs are runs of aligned contiguous f32, summed in the
 * lanes above in both kernel modes (the reference mode runs the plain
 * loops, the same order). */
static bool var_runs(const tpu_op *op) {
    const tpu_tensor *in = &op->in[0];
    return reduced_count(op) > 0 && in->dtype == TPU_DTYPE_F32 && tpu_k_is_aligned(in) &&
           trailing_block(op) >= 0;
}

/* VAR or STD of the `count` elements inner walks from base: two passes in
 * f64, the mean and then the sum of squared deviations from it (no
 * cancellation, as a one-pass sum of squares would suffer). Runs take the
 * 16 lanes, any other layout or dtype the reduced dims' row-major order,
 * so the bytes depend on the layout, not on the mode, the instruction set
 * or the thread count. */
static double var_of(const tpu_op *op, tpu_k_iter *inner, int64_t base, int64_t count, bool runs) {
    const tpu_tensor *in = &op->in[0];
    double ss = 0.0;
    if (runs) {
        const bool plain = tpu_kernels_get_reference();
        const float *x = (const float *)tpu_k_ptr(in, base);
        double mean = (plain ? sum_f32_run_plain(SUM_VALUE, x, count) : sum_f32_run(SUM_VALUE, x, count)) /
                      (double)count;
        ss = plain ? sq_dev_f32_run_plain(x, count, mean) : sq_dev_f32_run(x, count, mean);
    } else {
        tpu_k_iter again = *inner; /* the second pass walks the same elements */
        double sum = 0.0;
        for (int64_t r = 0; r < count; r++, tpu_k_iter_next(inner))
            sum += tpu_k_load_f64(tpu_k_ptr(in, base + inner->off[0]), in->dtype);
        const double mean = sum / (double)count; /* NaN over zero elements */
        for (int64_t r = 0; r < count; r++, tpu_k_iter_next(&again)) {
            double d = tpu_k_load_f64(tpu_k_ptr(in, base + again.off[0]), in->dtype) - mean;
            ss += d * d;
        }
        if (count == 0)
            ss = NAN;
    }
    double v = ss / fmax((double)count - op->p.reduce.correction, 0.0);
    if (isnan(v)) /* one NaN whatever operand order the sums' code took */
        v = NAN;
    return op->fn == TPU_REDUCE_STD ? sqrt(v) : v;
}

/* ANY/ALL of one contiguous run of bool bytes, stopping at the first
 * deciding one as the reference does. */
static bool any_all_run(const uint8_t *x, int64_t count, bool any) {
    bool acc = !any;
    for (int64_t r = 0; r < count && acc != any; r++)
        acc = x[r] != 0;
    return acc;
}

/* Where AMAX/ARGMAX (largest) or AMIN/ARGMIN pick in one contiguous run
 * of count >= 1 floats: reduce_other's comparisons in row order (a value
 * must beat the best strictly; the first NaN wins and nothing beats it),
 * on floats instead of their exact doubles. The portable form, and the
 * reference mode's for split runs. */
static int64_t pick_f32_run_plain(const float *x, int64_t count, bool largest) {
    if (isnan(x[0]))
        return 0;
    float best = x[0];
    int64_t at = 0;
    for (int64_t r = 1; r < count; r++) {
        float v = x[r];
        if (largest ? v > best : v < best) {
            best = v;
            at = r;
        } else if (isnan(v)) {
            return r;
        }
    }
    return at;
}

#if TPU_K_X86
/* The vector picks find the same element in two steps, each a loop
 * without branches per element: the extreme of the run with NaNs left
 * out (and whether any NaN occurs), then the first NaN, or else the first
 * element equal to the extreme. The extreme is a value of the run, exact,
 * whatever order the lanes took it in, and the first element equal to it
 * is the one the row-order comparisons keep (a later equal value never
 * beats it; of +0 and -0, which compare equal, the first). A value pick
 * (AMAX, AMIN) that is not zero needs no second step. */

/* The vector loops' scalar ends: elements [i, n) folded into the extreme
 * m so far (and the NaN flag), or searched for the first match. */
static float extreme_tail(const float *x, int64_t i, int64_t n, bool largest, float m, bool any_nan,
                          bool *nan) {
    for (; i < n; i++) {
        if (isnan(x[i]))
            any_nan = true;
        else if (largest ? x[i] > m : x[i] < m)
            m = x[i];
    }
    *nan = any_nan;
    return m;
}

static int64_t first_match_tail(const float *x, int64_t i, int64_t n, bool want_nan, float m) {
    for (; i < n; i++)
        if (want_nan ? isnan(x[i]) : x[i] == m)
            return i;
    return n;
}

/* The largest (smallest) non-NaN float of x[0 .. n), or -inf (+inf) if
 * none; *nan tells whether x holds a NaN. MAXPS returns its second operand
 * when either is NaN, so a NaN in v leaves the accumulator as it was. */
__attribute__((target("avx512f"))) static float extreme_f32_avx512(const float *x, int64_t n,
                                                                  bool largest, bool *nan) {
    const __m512 init = _mm512_set1_ps(largest ? -INFINITY : INFINITY);
    __m512 a0 = init, a1 = init, a2 = init, a3 = init;
    __mmask16 bad = 0;
    int64_t i = 0;
#define PICK_STEP(A, OFF)                                                                          \
    {                                                                                              \
        __m512 v = _mm512_loadu_ps(x + i + (OFF));                                                 \
        bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);                                             \
        A = largest ? _mm512_max_ps(v, A) : _mm512_min_ps(v, A);                                   \
    }
    for (; i + 64 <= n; i += 64) {
        PICK_STEP(a0, 0)
        PICK_STEP(a1, 16)
        PICK_STEP(a2, 32)
        PICK_STEP(a3, 48)
    }
    for (; i + 16 <= n; i += 16)
        PICK_STEP(a0, 0)
#undef PICK_STEP
    if (largest) {
        a0 = _mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3));
    } else {
        a0 = _mm512_min_ps(_mm512_min_ps(a0, a1), _mm512_min_ps(a2, a3));
    }
    float m = largest ? _mm512_reduce_max_ps(a0) : _mm512_reduce_min_ps(a0);
    return extreme_tail(x, i, n, largest, m, bad != 0, nan);
}

/* The first i < n with x[i] NaN (want_nan) or x[i] == m, or n. */
__attribute__((target("avx512f"))) static int64_t first_match_f32_avx512(const float *x, int64_t n,
                                                                        bool want_nan, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __mmask16 hit = want_nan ? _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)
                                 : _mm512_cmp_ps_mask(v, mv, _CMP_EQ_OQ);
        if (hit)
            return i + __builtin_ctz((unsigned)hit);
    }
    return first_match_tail(x, i, n, want_nan, m);
}

__attribute__((target("avx2,fma"))) static float extreme_f32_avx2(const float *x, int64_t n,
                                                                 bool largest, bool *nan) {
    const __m256 init = _mm256_set1_ps(largest ? -INFINITY : INFINITY);
    __m256 a0 = init, a1 = init, bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
        a0 = largest ? _mm256_max_ps(v0, a0) : _mm256_min_ps(v0, a0);
        a1 = largest ? _mm256_max_ps(v1, a1) : _mm256_min_ps(v1, a1);
    }
    a0 = largest ? _mm256_max_ps(a0, a1) : _mm256_min_ps(a0, a1);
    float lanes[8];
    _mm256_storeu_ps(lanes, a0);
    float m = lanes[0];
    for (int j = 1; j < 8; j++)
        m = largest ? (lanes[j] > m ? lanes[j] : m) : (lanes[j] < m ? lanes[j] : m);
    return extreme_tail(x, i, n, largest, m, _mm256_movemask_ps(bad) != 0, nan);
}

__attribute__((target("avx2,fma"))) static int64_t first_match_f32_avx2(const float *x, int64_t n,
                                                                       bool want_nan, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        int hit = _mm256_movemask_ps(want_nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q)
                                              : _mm256_cmp_ps(v, mv, _CMP_EQ_OQ));
        if (hit)
            return i + __builtin_ctz((unsigned)hit);
    }
    return first_match_tail(x, i, n, want_nan, m);
}
#endif

/* The pick of a run of count >= 1 floats, as pick_f32_run_plain gives it.
 * Its index when want_index; else -1, with *value the picked float (the
 * value picks skip the search when the extreme is a nonzero number). */
static int64_t pick_f32_run(const float *x, int64_t count, bool largest, bool want_index,
                            float *value) {
#if TPU_K_X86
    const bool avx512 = tpu_k_cpu_has_avx512();
    if (avx512 || tpu_k_cpu_has_avx2_fma()) {
        bool nan;
        float m = avx512 ? extreme_f32_avx512(x, count, largest, &nan)
                         : extreme_f32_avx2(x, count, largest, &nan);
        if (!want_index && !nan && m != 0.0f) {
            *value = m;
            return -1;
        }
        int64_t at = avx512 ? first_match_f32_avx512(x, count, nan, m)
                            : first_match_f32_avx2(x, count, nan, m);
        *value = x[at];
        return at;
    }
#endif
    (void)want_index;
    int64_t at = pick_f32_run_plain(x, count, largest);
    *value = x[at];
    return at;
}

static bool is_pick(const tpu_op *op) {
    return op->fn == TPU_REDUCE_AMAX || op->fn == TPU_REDUCE_AMIN ||
           op->fn == TPU_REDUCE_ARGMAX || op->fn == TPU_REDUCE_ARGMIN;
}

static bool picks_largest(const tpu_op *op) {
    return op->fn == TPU_REDUCE_AMAX || op->fn == TPU_REDUCE_ARGMAX;
}

static bool picks_index(const tpu_op *op) {
    return op->fn == TPU_REDUCE_ARGMAX || op->fn == TPU_REDUCE_ARGMIN;
}

/* Each output folds one contiguous run of in: SUM/MEAN of f32 with the
 * 16-lane order, ANY/ALL of bool (isin's mask.any(-1)), or the pick of
 * AMAX/AMIN/ARGMAX/ARGMIN of f32 (greedy decoding's argmax over the
 * vocabulary), without re-walking the reduced dims for every output. */
/* SUM of bool or integer elements into int64: each element converted to
 * int64 (exact; a bool as 0 or 1) and added wrapping, as the reference
 * does. Wrapping addition is associative, so the eight running sums
 * below give the reference's value in any order. */
static bool int_sum(const tpu_op *op) {
    const tpu_dtype dt = op->in[0].dtype;
    return op->fn == TPU_REDUCE_SUM && op->out.dtype == TPU_DTYPE_I64 &&
           (dt == TPU_DTYPE_BOOL || dt == TPU_DTYPE_U8 || dt == TPU_DTYPE_I8 ||
            dt == TPU_DTYPE_I16 || dt == TPU_DTYPE_I32 || dt == TPU_DTYPE_I64) &&
           tpu_k_is_aligned(&op->in[0]);
}

#define INT_SUM_RUN(T, TERM)                                                                       \
    do {                                                                                           \
        const T *v = (const T *)x;                                                                 \
        uint64_t acc[8] = {0};                                                                     \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int l = 0; l < 8; l++)                                                            \
                acc[l] += (uint64_t)(TERM(v[i + l]));                                              \
        for (; i < n; i++)                                                                         \
            acc[0] += (uint64_t)(TERM(v[i]));                                                      \
        uint64_t s = 0;                                                                            \
        for (int l = 0; l < 8; l++)                                                                \
            s += acc[l];                                                                           \
        return tpu_k_u64_to_i64(s);                                                                \
    } while (0)
#define AS_IS(e) (e)
#define AS_BOOL(e) ((e) != 0)

static int64_t int_sum_run(const void *x, tpu_dtype dt, int64_t n) {
    switch (dt) {
    case TPU_DTYPE_BOOL: INT_SUM_RUN(uint8_t, AS_BOOL);
    case TPU_DTYPE_U8: INT_SUM_RUN(uint8_t, AS_IS);
    case TPU_DTYPE_I8: INT_SUM_RUN(int8_t, AS_IS);
    case TPU_DTYPE_I16: INT_SUM_RUN(int16_t, AS_IS);
    case TPU_DTYPE_I32: INT_SUM_RUN(int32_t, AS_IS);
    default: INT_SUM_RUN(int64_t, AS_IS);
    }
}
#undef AS_BOOL
#undef AS_IS
#undef INT_SUM_RUN

static tpu_status reduce_trailing(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    int64_t count = reduced_count(op);
    const bool bools = op->fn == TPU_REDUCE_ANY || op->fn == TPU_REDUCE_ALL;
    if (bools && count == 1 && o->dtype == TPU_DTYPE_BOOL && tpu_k_is_row_major_from(o, 0) &&
        tpu_k_is_row_major_from(in, 0)) {
        /* Runs of one (isin's [V, 1] mask.any(-1)): out is in as 0/1,
         * element for element, without a walk per output (300 us over a
         * 50257-entry vocabulary). */
        const uint8_t *x = (const uint8_t *)in->data;
        uint8_t *y = (uint8_t *)o->data;
        for (int64_t i = start; i < end; i++)
            y[i] = x[i] != 0;
        return TPU_OK;
    }
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        char *dst = tpu_k_ptr(o, it.off[0]);
        /* count == 0 means in may have no data at all: do not touch it. */
        if (bools) {
            bool any = op->fn == TPU_REDUCE_ANY;
            tpu_k_store_i64(dst, o->dtype,
                            count > 0 ? any_all_run((const uint8_t *)in->data + it.off[1], count, any)
                                      : !any);
            continue;
        }
        if (int_sum(op)) {
            const char *x = (const char *)in->data + it.off[1] * (int64_t)tpu_dtype_size(in->dtype);
            tpu_k_store_i64(dst, o->dtype, count > 0 ? int_sum_run(x, in->dtype, count) : 0);
            continue;
        }
        if (is_pick(op)) { /* count >= 1: tpu_k_reduce_fast checked */
            const float *x = (const float *)in->data + it.off[1];
            float v;
            int64_t at = pick_f32_run(x, count, picks_largest(op), picks_index(op), &v);
            if (picks_index(op))
                tpu_k_store_i64(dst, o->dtype, at);
            else
                tpu_k_store_f64(dst, o->dtype, v);
            continue;
        }
        double s = count > 0 ? sum_f32_run(sum_kind_of(op), (const float *)in->data + it.off[1], count)
                             : 0.0;
        tpu_k_store_f64(dst, o->dtype, finish_f64(op, s, count));
    }
    return TPU_OK;
}

int64_t tpu_op_row_length(const tpu_op *op) {
    if (op == NULL || op->code != TPU_OP_REDUCE || op->n_in != 1)
        return 0;
    switch (op->fn) {
    case TPU_REDUCE_SUM:  /* reduce_trailing's 16 lanes, or the reference's row order */
    case TPU_REDUCE_MEAN:
    case TPU_REDUCE_AMAX: /* reduce_other, in row order */
    case TPU_REDUCE_AMIN: break;
    default: return 0;
    }
    /* Aligned: which path runs must not depend on where a row lies. */
    if (!tpu_k_is_aligned(&op->in[0]) || trailing_block(op) < 0)
        return 0;
    return reduced_count(op);
}

/* ------------------------------------------------ split reductions */

enum {
    SPLIT_CHUNK = 1 << 16,   /* elements per chunk of a split run */
    SPLIT_MAX_OUTPUTS = 64,  /* more outputs than this keep every thread busy unsplit */
};

int64_t tpu_k_reduce_split_chunks(const tpu_op *op) {
    const tpu_tensor *in = &op->in[0];
    const bool sums = sum_kind_of(op) != SUM_NONE && tpu_dtype_is_float(in->dtype) &&
                      tpu_dtype_is_float(op->out.dtype);
    const bool picks = is_pick(op) && in->dtype == TPU_DTYPE_F32;
    if (!(sums || picks) || in->data == NULL || !tpu_k_is_aligned(in) ||
        tpu_k_numel(&op->out) > SPLIT_MAX_OUTPUTS || trailing_block(op) < 0)
        return 0;
    int64_t count = reduced_count(op);
    return count >= 2 * (int64_t)SPLIT_CHUNK ? (count + SPLIT_CHUNK - 1) / SPLIT_CHUNK : 0;
}

/* 16-lane sum of n f32: the plain loop in reference mode, the vector one
 * otherwise (the same order, so the same bits). */
static double lanes_sum(sum_kind k, const float *f, int64_t n) {
    return tpu_kernels_get_reference() ? sum_f32_run_plain(k, f, n) : sum_f32_run(k, f, n);
}

/* The sum of one chunk of n contiguous elements of dtype dt at x. f32: 16
 * lanes. f16/bf16: widened to f32 (exactly) in blocks of TPU_K_EW_CHUNK,
 * each block summed in 16 lanes, the block sums added in order. f64: in
 * index order. */
static double split_chunk_sum(sum_kind k, const char *x, tpu_dtype dt, int64_t n) {
    if (dt == TPU_DTYPE_F32)
        return lanes_sum(k, (const float *)x, n);
    if (dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16) {
        float buf[TPU_K_EW_CHUNK];
        double s = 0.0;
        for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
            int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
            tpu_k_cvt_to_f32(buf, x + off * 2, dt, len);
            s += lanes_sum(k, buf, len);
        }
        return s;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += sum_term(k, tpu_k_load_f64(x + (size_t)i * sizeof(double), dt));
    return s;
}

int tpu_k_reduce_phases(const tpu_op *op) {
    return tpu_k_reduce_split_chunks(op) > 0 ? 2 : 1;
}

int64_t tpu_k_reduce_scratch_bytes(const tpu_op *op) {
    /* One f64 partial per (output, chunk). */
    return tpu_k_numel(&op->out) * tpu_k_reduce_split_chunks(op) * (int64_t)sizeof(double);
}

tpu_status tpu_k_reduce_split(const tpu_op *op, int phase, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    const int64_t chunks = tpu_k_reduce_split_chunks(op), count = reduced_count(op);
    double *partial = op->scratch; /* [output][chunk] */
    const int64_t *strides[2] = {o->strides, in->strides};
    int64_t start, end;
    tpu_k_iter it;
    if (phase == 0) {
        /* Items are (output, chunk) pairs in row-major order. */
        tpu_k_split(tpu_k_numel(o) * chunks, ith, nth, &start, &end);
        for (int64_t item = start; item < end; item++) {
            int64_t out_index = item / chunks, c = item % chunks;
            tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, out_index);
            int64_t first = c * SPLIT_CHUNK;
            int64_t len = count - first < SPLIT_CHUNK ? count - first : SPLIT_CHUNK;
            const char *x = tpu_k_ptr(in, it.off[1] + first);
            if (is_pick(op)) { /* the chunk's pick, as an index into the run (exact in f64) */
                float v;
                int64_t at = tpu_kernels_get_reference()
                                 ? pick_f32_run_plain((const float *)x, len, picks_largest(op))
                                 : pick_f32_run((const float *)x, len, picks_largest(op), true, &v);
                partial[item] = (double)(first + at);
                continue;
            }
            partial[item] = split_chunk_sum(sum_kind_of(op), x, in->dtype, len);
        }
        return TPU_OK;
    }
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    if (is_pick(op)) {
        /* Each chunk's pick is its first best (or first NaN): comparing
         * them in chunk order with the row-order rule gives the run's. */
        const bool largest = picks_largest(op);
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            const float *x = (const float *)tpu_k_ptr(in, it.off[1]);
            int64_t at = (int64_t)partial[i * chunks];
            for (int64_t c = 1; c < chunks && !isnan(x[at]); c++) {
                int64_t j = (int64_t)partial[i * chunks + c];
                if (isnan(x[j]) || (largest ? x[j] > x[at] : x[j] < x[at]))
                    at = j;
            }
            char *dst = tpu_k_ptr(o, it.off[0]);
            if (picks_index(op))
                tpu_k_store_i64(dst, o->dtype, at);
            else
                tpu_k_store_f64(dst, o->dtype, x[at]);
        }
        return TPU_OK;
    }
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        double s = 0.0;
        for (int64_t c = 0; c < chunks; c++)
            s += partial[i * chunks + c];
        tpu_k_store_f64(tpu_k_ptr(o, it.off[0]), o->dtype, finish_f64(op, s, count));
    }
    return TPU_OK;
}

/* -------------------------------------------- leading-dims fast path */

/* acc[j] += x[r * cols + j] for j < w and r = 0, 1, ..., rows - 1 in
 * order (each accumulator's chain is the reference's). LEADING_ROWS rows
 * are added per load and store of an accumulator. */
static void leading_add_plain(double *acc, const float *x, int64_t cols, int64_t rows,
                              int64_t w) {
    int64_t r = 0;
    for (; r + TPU_K_LEADING_ROWS <= rows; r += TPU_K_LEADING_ROWS)
        for (int64_t j = 0; j < w; j++) {
            double a = acc[j];
            for (int k = 0; k < TPU_K_LEADING_ROWS; k++)
                a += x[(r + k) * cols + j];
            acc[j] = a;
        }
    for (; r < rows; r++)
        for (int64_t j = 0; j < w; j++)
            acc[j] += x[r * cols + j];
}

#if TPU_K_X86
/* The same chains, four columns per register and four rows per pass. */
__attribute__((target("avx2,fma"))) static void leading_add_avx2(double *acc, const float *x,
                                                                 int64_t cols, int64_t rows,
                                                                 int64_t w) {
    _Static_assert(TPU_K_LEADING_ROWS == 4, "the AVX2 pass adds four rows");
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *p = x + r * cols;
        int64_t j = 0;
        for (; j + 4 <= w; j += 4) {
            __m256d a = _mm256_loadu_pd(acc + j);
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(p + j)));
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(p + cols + j)));
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(p + 2 * cols + j)));
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(p + 3 * cols + j)));
            _mm256_storeu_pd(acc + j, a);
        }
        for (; j < w; j++)
            acc[j] = (((acc[j] + p[j]) + p[cols + j]) + p[2 * cols + j]) + p[3 * cols + j];
    }
    leading_add_plain(acc, x + r * cols, cols, rows - r, w);
}
#endif

/* True if the mask is exactly dims [0, last) for some 0 < last < ndim and
 * in is row-major contiguous. */
static bool is_leading_block(const tpu_op *op) {
    const tpu_tensor *in = &op->in[0];
    uint32_t mask = op->p.reduce.mask;
    if (in->ndim == 0 || mask == 0 || (mask & (mask + 1u)) != 0 ||
        (mask >> (in->ndim - 1)) != 0)
        return false;
    return tpu_k_is_row_major_from(in, 0);
}

/* in is [rows, cols] row-major with the rows reduced: each share takes a
 * range of columns and adds the rows one after another into f64
 * accumulators, which is exactly the reference order per output. */
static tpu_status reduce_leading(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    int64_t cols = tpu_k_numel(o), rows = reduced_count(op);
    int64_t start, end;
    tpu_k_split(cols, ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const float *x = in->data;
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    double acc[TPU_K_LEADING_CHUNK];
    const bool dense_f32 = o->dtype == TPU_DTYPE_F32 && tpu_k_is_aligned(o) && tpu_k_is_row_major_from(o, 0);
    for (int64_t c0 = start; c0 < end; c0 += TPU_K_LEADING_CHUNK) {
        int64_t w = end - c0 < TPU_K_LEADING_CHUNK ? end - c0 : TPU_K_LEADING_CHUNK;
        for (int64_t j = 0; j < w; j++)
            acc[j] = 0.0;
        /* Add every row of this column chunk, in row order. */
#if TPU_K_X86
        if (tpu_k_cpu_has_avx2_fma())
            leading_add_avx2(acc, x + c0, cols, rows, w);
        else
#endif
            leading_add_plain(acc, x + c0, cols, rows, w);
        if (dense_f32) { /* the same (float) rounding, without the walk */
            float *y = (float *)o->data + c0;
            for (int64_t j = 0; j < w; j++)
                y[j] = (float)finish_f64(op, acc[j], rows);
            continue;
        }
        for (int64_t j = 0; j < w; j++, tpu_k_iter_next(&it))
            tpu_k_store_f64(tpu_k_ptr(o, it.off[0]), o->dtype, finish_f64(op, acc[j], rows));
    }
    return TPU_OK;
}

/* Fast paths for aligned f32 input and float output: trailing-dims and
 * leading-dims reductions of contiguous data; ANY/ALL of trailing bool
 * runs; the picks (AMAX ... ARGMIN) of nonempty trailing f32 runs; SUM
 * of trailing bool and integer runs into int64 (int_sum). The rest is
 * reference. */
tpu_status tpu_k_reduce_fast(const tpu_op *op, int ith, int nth) {
    if (is_var(op)) /* one walk in both modes; var_of picks its loops */
        return tpu_k_reduce_ref(op, ith, nth);
    if (is_pick(op) && op->in[0].dtype == TPU_DTYPE_F32 && tpu_k_is_aligned(&op->in[0]) &&
        trailing_block(op) >= 0 && reduced_count(op) > 0)
        return reduce_trailing(op, ith, nth);
    if ((op->fn == TPU_REDUCE_ANY || op->fn == TPU_REDUCE_ALL) &&
        op->in[0].dtype == TPU_DTYPE_BOOL && trailing_block(op) >= 0)
        return reduce_trailing(op, ith, nth);
    if (int_sum(op) && trailing_block(op) >= 0)
        return reduce_trailing(op, ith, nth);
    const sum_kind k = sum_kind_of(op);
    if (k != SUM_NONE && op->in[0].dtype == TPU_DTYPE_F32 && tpu_k_is_aligned(&op->in[0]) &&
        tpu_dtype_is_float(op->out.dtype)) {
        if (trailing_block(op) >= 0)
            return reduce_trailing(op, ith, nth);
        if (k == SUM_VALUE && is_leading_block(op))
            return reduce_leading(op, ith, nth);
    }
    return tpu_k_reduce_ref(op, ith, nth);
}
