/* ADD, SUB, MUL, DIV.
 *
 * Compute type follows out.dtype: f32 for f32/f16/bf16, f64 for f64, i64
 * for integers, bool for bool. Each input is loaded with its own dtype and
 * converted (strided.h); the result is rounded once on store.
 *
 * Float semantics, identical in every path:
 *   add  a + alpha*b, one rounding: a + b when alpha == 1, else fma(alpha, b, a)
 *        (what PyTorch's vectorized CPU kernel computes);
 *   sub  a - alpha*b, likewise with -alpha;
 *   div  a / b; TRUNC: trunc(a / b); FLOOR: PyTorch's div_floor_floating.
 * Integer semantics: wrapping two's complement (done in uint64), TRUNC
 * and FLOOR division, INT64_MIN / -1 == INT64_MIN, a zero divisor is
 * TPU_ERR_DIV_BY_ZERO. Bool: add is a || (alpha && b), mul is a && b.
 *
 * Work split: contiguous ranges of out's row-major element index (or of
 * memory offsets on the flat fast path); every element is independent, so
 * any split gives the same bytes. */
#include <math.h>

#include "kernels_internal.h"
#include "strided.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* ------------------------------------------------- scalar arithmetic */

/* PyTorch's div_floor_floating, in f32: floor of the exact quotient,
 * computed from fmod so that it is correct where floor(a / b) is not. */
static float div_floor_f32(float a, float b) {
    if (b == 0.0f)
        return a / b; /* IEEE result: +-inf or NaN */
    float mod = fmodf(a, b);
    float div = (a - mod) / b;
    /* fmod takes a's sign; floor division wants b's. */
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f))
        div -= 1.0f;
    float floordiv;
    if (div != 0.0f) {
        /* div is already near an integer: snap it to the nearest one. */
        floordiv = floorf(div);
        if (div - floordiv > 0.5f)
            floordiv += 1.0f;
    } else {
        floordiv = copysignf(0.0f, a / b);
    }
    return floordiv;
}

static double div_floor_f64(double a, double b) {
    if (b == 0.0)
        return a / b;
    double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && (b < 0.0) != (mod < 0.0))
        div -= 1.0;
    double floordiv;
    if (div != 0.0) {
        floordiv = floor(div);
        if (div - floordiv > 0.5)
            floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, a / b);
    }
    return floordiv;
}

static inline float arith_f32(tpu_op_code code, tpu_rounding rnd, float a, float b, float alpha) {
    switch (code) {
    case TPU_OP_ADD: return alpha == 1.0f ? a + b : fmaf(alpha, b, a);
    case TPU_OP_SUB: return alpha == 1.0f ? a - b : fmaf(-alpha, b, a);
    case TPU_OP_MUL: return a * b;
    default:
        return rnd == TPU_ROUND_NONE ? a / b : rnd == TPU_ROUND_TRUNC ? truncf(a / b)
                                                                      : div_floor_f32(a, b);
    }
}

static inline double arith_f64(tpu_op_code code, tpu_rounding rnd, double a, double b,
                               double alpha) {
    switch (code) {
    case TPU_OP_ADD: return alpha == 1.0 ? a + b : fma(alpha, b, a);
    case TPU_OP_SUB: return alpha == 1.0 ? a - b : fma(-alpha, b, a);
    case TPU_OP_MUL: return a * b;
    default:
        return rnd == TPU_ROUND_NONE ? a / b : rnd == TPU_ROUND_TRUNC ? trunc(a / b)
                                                                      : div_floor_f64(a, b);
    }
}

/* Integer arithmetic in uint64 so that overflow wraps instead of being
 * undefined. Returns false for a zero divisor. */
static inline bool arith_i64(tpu_op_code code, tpu_rounding rnd, int64_t a, int64_t b,
                             int64_t alpha, int64_t *out) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b, ual = (uint64_t)alpha;
    switch (code) {
    case TPU_OP_ADD: *out = tpu_k_u64_to_i64(ua + ual * ub); return true;
    case TPU_OP_SUB: *out = tpu_k_u64_to_i64(ua - ual * ub); return true;
    case TPU_OP_MUL: *out = tpu_k_u64_to_i64(ua * ub); return true;
    default: break;
    }
    if (b == 0)
        return false;
    if (b == -1) { /* a / -1 is -a, which wraps for INT64_MIN (C's / would trap) */
        *out = tpu_k_u64_to_i64(0u - ua);
        return true;
    }
    int64_t q = a / b, r = a % b;
    /* C truncates; floor steps down when the remainder's sign differs
     * from the divisor's. */
    if (rnd == TPU_ROUND_FLOOR && r != 0 && ((r < 0) != (b < 0)))
        q -= 1;
    *out = q;
    return true;
}

static inline bool arith_bool(tpu_op_code code, bool a, bool b, bool alpha) {
    return code == TPU_OP_ADD ? (a || (alpha && b)) : (a && b);
}

static tpu_status div_by_zero(void) {
    return tpu_set_error(TPU_ERR_DIV_BY_ZERO, "integer division by zero");
}

/* ---------------------------------------------------- reference path */

tpu_status tpu_k_binary_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *a = &op->in[0];
    const tpu_tensor *b = op->n_in == 2 ? &op->in[1] : NULL;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[3] = {o->strides, a->strides, b ? b->strides : o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 3, strides, start);
    tpu_op_code code = op->code;
    tpu_rounding rnd = op->p.arith.rounding;
    const tpu_scalar alpha = op->p.arith.alpha, other = op->p.arith.other;

    /* One loop per compute type: load, compute, store, per element. */
    switch (o->dtype) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            float x = tpu_k_load_f32(tpu_k_ptr(a, it.off[1]), a->dtype);
            float y = b ? tpu_k_load_f32(tpu_k_ptr(b, it.off[2]), b->dtype) : (float)other.f;
            tpu_k_store_f32(tpu_k_ptr(o, it.off[0]), o->dtype,
                            arith_f32(code, rnd, x, y, (float)alpha.f));
        }
        return TPU_OK;
    case TPU_DTYPE_F64:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            double x = tpu_k_load_f64(tpu_k_ptr(a, it.off[1]), a->dtype);
            double y = b ? tpu_k_load_f64(tpu_k_ptr(b, it.off[2]), b->dtype) : other.f;
            tpu_k_store_f64(tpu_k_ptr(o, it.off[0]), o->dtype, arith_f64(code, rnd, x, y, alpha.f));
        }
        return TPU_OK;
    case TPU_DTYPE_BOOL:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            bool x = tpu_k_load_bool(tpu_k_ptr(a, it.off[1]), a->dtype);
            bool y = b ? tpu_k_load_bool(tpu_k_ptr(b, it.off[2]), b->dtype) : other.i != 0;
            tpu_k_store_bool(tpu_k_ptr(o, it.off[0]), o->dtype,
                             arith_bool(code, x, y, alpha.i != 0));
        }
        return TPU_OK;
    default:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            int64_t x = tpu_k_load_i64(tpu_k_ptr(a, it.off[1]), a->dtype);
            int64_t y = b ? tpu_k_load_i64(tpu_k_ptr(b, it.off[2]), b->dtype) : other.i;
            int64_t r;
            if (!arith_i64(code, rnd, x, y, alpha.i, &r))
                return div_by_zero();
            tpu_k_store_i64(tpu_k_ptr(o, it.off[0]), o->dtype, r);
        }
        return TPU_OK;
    }
}

/* --------------------------------------------------------- fast path */

/* An f32 operand of the flat path: element i is p[i * step] (step 1 for a
 * tensor laid out like out, 0 for a broadcast scalar). */
typedef struct {
    const float *p;
    int64_t step;
} flat_f32;

/* Describes input t for the flat path, or returns false if it does not
 * fit (wrong dtype or layout). */
static bool flat_input(const tpu_tensor *t, const tpu_tensor *out, flat_f32 *f) {
    if (t->dtype != TPU_DTYPE_F32 || !tpu_k_is_aligned(t))
        return false;
    if (tpu_k_same_layout(t, out)) {
        *f = (flat_f32){t->data, 1};
        return true;
    }
    if (tpu_k_is_scalar_broadcast(t)) {
        *f = (flat_f32){t->data, 0};
        return true;
    }
    return false;
}

/* Portable flat loop: the same scalar arithmetic as the reference. */
static void f32_flat_plain(tpu_op_code code, tpu_rounding rnd, float alpha, float *o, flat_f32 a,
                           flat_f32 b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        o[i] = arith_f32(code, rnd, a.p[i * a.step], b.p[i * b.step], alpha);
}

#if TPU_K_X86
/* AVX2 flat loop for ADD, SUB, MUL and true DIV: 8 lanes of the same IEEE
 * operations (fmadd is one rounding, like fmaf), then a scalar tail. */
__attribute__((target("avx2,fma"))) static void f32_flat_avx2(tpu_op_code code, float alpha,
                                                              float *o, flat_f32 a, flat_f32 b,
                                                              int64_t n) {
    const __m256 va0 = _mm256_set1_ps(a.p[0]), vb0 = _mm256_set1_ps(b.p[0]);
    const bool use_fma = alpha != 1.0f;
    const __m256 valpha = _mm256_set1_ps(code == TPU_OP_SUB ? -alpha : alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = a.step ? _mm256_loadu_ps(a.p + i) : va0;
        __m256 y = b.step ? _mm256_loadu_ps(b.p + i) : vb0;
        __m256 r;
        switch (code) {
        case TPU_OP_ADD: r = use_fma ? _mm256_fmadd_ps(valpha, y, x) : _mm256_add_ps(x, y); break;
        case TPU_OP_SUB: r = use_fma ? _mm256_fmadd_ps(valpha, y, x) : _mm256_sub_ps(x, y); break;
        case TPU_OP_MUL: r = _mm256_mul_ps(x, y); break;
        default: r = _mm256_div_ps(x, y); break;
        }
        _mm256_storeu_ps(o + i, r);
    }
    for (; i < n; i++)
        o[i] = arith_f32(code, TPU_ROUND_NONE, a.p[i * a.step], b.p[i * b.step], alpha);
}
#endif

/* Fast path: aligned all-f32 operands where out is dense and each input
 * is laid out like out or is a broadcast scalar; the op then runs over flat
 * memory offsets. Anything else goes to the reference path. */
tpu_status tpu_k_binary_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    float other = (float)op->p.arith.other.f;
    flat_f32 a, b = {&other, 0};
    if (o->dtype != TPU_DTYPE_F32 || !tpu_k_is_aligned(o) || !tpu_k_is_dense(o) ||
        !flat_input(&op->in[0], o, &a) ||
        (op->n_in == 2 && !flat_input(&op->in[1], o, &b)))
        return tpu_k_binary_ref(op, ith, nth);
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    /* Shift every operand to this share's first offset. */
    float *out = (float *)o->data + start;
    a.p += start * a.step;
    b.p += start * b.step;
    float alpha = (float)op->p.arith.alpha.f;
    tpu_rounding rnd = op->p.arith.rounding;
#if TPU_K_X86
    if ((op->code != TPU_OP_DIV || rnd == TPU_ROUND_NONE) && tpu_k_cpu_has_avx2_fma()) {
        f32_flat_avx2(op->code, alpha, out, a, b, end - start);
        return TPU_OK;
    }
#endif
    f32_flat_plain(op->code, rnd, alpha, out, a, b, end - start);
    return TPU_OK;
}
