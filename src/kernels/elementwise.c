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

#include "convert.h"
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

/* v rounded to the precision of a 16-bit float dtype (f32: unchanged). */
static inline float round_to(float v, tpu_dtype dt) {
    if (dt == TPU_DTYPE_F16)
        return tpu_f16_to_f32(tpu_f32_to_f16(v));
    return dt == TPU_DTYPE_BF16 ? tpu_k_round_bf16(v) : v;
}

/* Rounded division of f16/bf16, as PyTorch's vectorised CPU kernels do it:
 * in the 16-bit type, every step rounded to it (the quotient before trunc;
 * each step of div_floor_floating for floor). Its scalar kernel, which
 * only one-element tensors reach, computes in f32 instead; the vectorised
 * results are the ones users see, so the device gives those. */
static float div_rounded_16(tpu_rounding rnd, float a, float b, tpu_dtype dt) {
    if (rnd == TPU_ROUND_TRUNC || b == 0.0f)
        return rnd == TPU_ROUND_TRUNC ? truncf(round_to(a / b, dt)) : round_to(a / b, dt);
    float mod = round_to(fmodf(a, b), dt);
    float div = round_to(round_to(a - mod, dt) / b, dt);
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f))
        div = round_to(div - 1.0f, dt);
    if (div == 0.0f)
        return copysignf(0.0f, round_to(a / b, dt));
    float floordiv = floorf(div);
    if (round_to(div - floordiv, dt) > 0.5f)
        floordiv = round_to(floordiv + 1.0f, dt);
    return floordiv;
}

/* The dtype whose precision the steps of a rounded division take: out's,
 * unless the divisor is one value for the whole op (a scalar operand, a
 * broadcast one-element tensor, or any op with one output element), which
 * PyTorch's CPU kernels divide by in f32 (their is_scalar path). */
static tpu_dtype div_step_dtype(const tpu_op *op) {
    bool scalar_b = op->n_in == 1 || tpu_k_is_scalar_broadcast(&op->in[1]);
    return scalar_b ? TPU_DTYPE_F32 : op->out.dtype;
}

/* The f32 compute of f32/f16/bf16 outputs; results are rounded to out's
 * dtype on store, once, except in rounded division with 16-bit steps
 * (odt f16/bf16, see div_rounded_16). */
static inline float arith_f32(tpu_op_code code, tpu_rounding rnd, float a, float b, float alpha,
                              tpu_dtype odt) {
    switch (code) {
    case TPU_OP_ADD: return alpha == 1.0f ? a + b : fmaf(alpha, b, a);
    case TPU_OP_SUB: return alpha == 1.0f ? a - b : fmaf(-alpha, b, a);
    case TPU_OP_MUL: return a * b;
    default:
        if (rnd != TPU_ROUND_NONE && odt != TPU_DTYPE_F32)
            return div_rounded_16(rnd, a, b, odt);
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

    const tpu_dtype step_dt = div_step_dtype(op);
    /* One loop per compute type: load, compute, store, per element. */
    switch (o->dtype) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16:
        for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
            float x = tpu_k_load_f32(tpu_k_ptr(a, it.off[1]), a->dtype);
            float y = b ? tpu_k_load_f32(tpu_k_ptr(b, it.off[2]), b->dtype) : (float)other.f;
            tpu_k_store_f32(tpu_k_ptr(o, it.off[0]), o->dtype,
                            arith_f32(code, rnd, x, y, (float)alpha.f, step_dt));
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
            int64_t x = tpu_k_load_int(tpu_k_ptr(a, it.off[1]), a->dtype, o->dtype);
            int64_t y = b ? tpu_k_load_int(tpu_k_ptr(b, it.off[2]), b->dtype, o->dtype) : other.i;
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

/* Portable flat loop: the same scalar arithmetic as the reference. */
static void f32_flat_plain(tpu_op_code code, tpu_rounding rnd, float alpha, float *o, flat_f32 a,
                           flat_f32 b, int64_t n, tpu_dtype odt) {
    for (int64_t i = 0; i < n; i++)
        o[i] = arith_f32(code, rnd, a.p[i * a.step], b.p[i * b.step], alpha, odt);
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
        o[i] = arith_f32(code, TPU_ROUND_NONE, a.p[i * a.step], b.p[i * b.step], alpha,
                         TPU_DTYPE_F32);
}
#endif

/* The f32 loop for one run of an odt output: AVX2 where it has the op,
 * else portable. */
static void f32_run(tpu_op_code code, tpu_rounding rnd, float alpha, float *o, flat_f32 a,
                    flat_f32 b, int64_t n, tpu_dtype odt) {
#if TPU_K_X86
    if ((code != TPU_OP_DIV || rnd == TPU_ROUND_NONE) && tpu_k_cpu_has_avx2_fma()) {
        f32_flat_avx2(code, alpha, o, a, b, n);
        return;
    }
#endif
    f32_flat_plain(code, rnd, alpha, o, a, b, n, odt);
}

/* An input of a run: element j is at p + j * step elements of dtype dt
 * (step 1, or 0 for a value broadcast along the run). */
typedef struct {
    const char *p;
    tpu_dtype dt;
    int64_t step;
} run_in;

/* Points f at chunk [off, off + len) of x as f32: in place for f32,
 * else converted into buf (one value when x is broadcast). */
static flat_f32 stage_f32(run_in x, int64_t off, int64_t len, float *buf) {
    if (x.dt == TPU_DTYPE_F32)
        return (flat_f32){(const float *)x.p + off * x.step, x.step};
    tpu_k_cvt_to_f32(buf, x.p + off * x.step * 2, x.dt, x.step ? len : 1);
    return (flat_f32){buf, x.step};
}

/* Computes n contiguous elements of out (dtype odt) at po: 16-bit
 * operands are staged through f32 chunks of EW_CHUNK, so the arithmetic
 * is the f32 loop's and each result is rounded once on store (rounded
 * division takes its steps in step_dt, div_step_dtype of the op). */
static void mixed_run(const tpu_op *op, char *po, tpu_dtype odt, tpu_dtype step_dt, run_in a, run_in b,
                      int64_t n) {
    tpu_op_code code = op->code;
    tpu_rounding rnd = op->p.arith.rounding;
    float alpha = (float)op->p.arith.alpha.f;
    float abuf[TPU_K_EW_CHUNK], bbuf[TPU_K_EW_CHUNK], obuf[TPU_K_EW_CHUNK];
    for (int64_t off = 0; off < n; off += TPU_K_EW_CHUNK) {
        int64_t len = n - off < TPU_K_EW_CHUNK ? n - off : TPU_K_EW_CHUNK;
        /* Load (convert) both inputs before the store: out may be in[0]. */
        flat_f32 fa = stage_f32(a, off, len, abuf), fb = stage_f32(b, off, len, bbuf);
        float *dst = odt == TPU_DTYPE_F32 ? (float *)po + off : obuf;
        f32_run(code, rnd, alpha, dst, fa, fb, len, step_dt);
        if (odt != TPU_DTYPE_F32)
            tpu_k_cvt_from_f32(po + off * 2, odt, obuf, len);
    }
}

/* True if t can be read by the run loops: f32/f16/bf16, aligned. */
static bool run_dtype_ok(const tpu_tensor *t) {
    return tpu_k_cvt_supported(t->dtype) && tpu_k_is_aligned(t);
}

/* Flat case: every input laid out like a dense out, or a broadcast
 * scalar; the op then runs over memory offsets [start, end). */
static bool flat_ok(const tpu_tensor *t, const tpu_tensor *o, int64_t *step) {
    if (tpu_k_same_layout(t, o)) {
        *step = 1;
        return true;
    }
    if (tpu_k_is_scalar_broadcast(t)) {
        *step = 0;
        return true;
    }
    return false;
}

/* Fast path: f32/f16/bf16 operands (aligned). If out is dense and the
 * inputs are laid out like it or broadcast scalars, the op runs over flat
 * memory; else, if the coalesced shape has out contiguous in its last dim
 * and each input contiguous or broadcast there (a row or column
 * broadcast), it runs row by row. Anything else goes to the reference. */
tpu_status tpu_k_binary_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *ta = &op->in[0];
    const tpu_tensor *tb = op->n_in == 2 ? &op->in[1] : NULL;
    float other = (float)op->p.arith.other.f;
    if (!run_dtype_ok(o) || !run_dtype_ok(ta) || (tb && !run_dtype_ok(tb)))
        return tpu_k_binary_ref(op, ith, nth);
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const tpu_dtype step_dt = div_step_dtype(op);
    run_in a = {ta->data, ta->dtype, 1};
    run_in b = tb ? (run_in){tb->data, tb->dtype, 1}
                  : (run_in){(const char *)&other, TPU_DTYPE_F32, 0};
    /* Flat: shift every operand to this share's first offset. */
    if (tpu_k_is_dense(o) && flat_ok(ta, o, &a.step) && (!tb || flat_ok(tb, o, &b.step))) {
        a.p += start * a.step * (int64_t)tpu_dtype_size(a.dt);
        b.p += start * b.step * (int64_t)tpu_dtype_size(b.dt);
        mixed_run(op, tpu_k_ptr(o, start), o->dtype, step_dt, a, b, end - start);
        return TPU_OK;
    }
    /* Rows: coalesce, then require unit (or zero) steps along the last dim. */
    const int64_t *strides[3] = {o->strides, ta->strides, tb ? tb->strides : o->strides};
    tpu_k_shape sh;
    tpu_k_shape_coalesce(&sh, o->ndim, o->sizes, 3, strides);
    int32_t last = sh.ndim - 1;
    if (last < 0 || sh.strides[0][last] != 1 || (uint64_t)sh.strides[1][last] > 1 ||
        (tb && (uint64_t)sh.strides[2][last] > 1))
        return tpu_k_binary_ref(op, ith, nth);
    a.step = sh.strides[1][last];
    if (tb)
        b.step = sh.strides[2][last];
    const int64_t *cs[3] = {sh.strides[0], sh.strides[1], sh.strides[2]};
    tpu_k_iter it;
    tpu_k_iter_init(&it, sh.ndim, sh.sizes, 3, cs, start);
    for (int64_t i = start; i < end;) {
        int64_t run = tpu_k_iter_row_left(&it);
        if (run > end - i)
            run = end - i;
        run_in ra = a, rb = b;
        ra.p = tpu_k_ptr(ta, it.off[1]);
        if (tb)
            rb.p = tpu_k_ptr(tb, it.off[2]);
        mixed_run(op, tpu_k_ptr(o, it.off[0]), o->dtype, step_dt, ra, rb, run);
        tpu_k_iter_advance_in_row(&it, run);
        i += run;
    }
    return TPU_OK;
}
