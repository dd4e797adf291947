/* TERNARY: out = fn(a, b, c) for the functions of tpu_ternary_fn.
 *
 * a, b and c go through the record's common dtype to its compute type and
 * the result is rounded back to it (ew.h), except WHERE's condition a,
 * which is only tested for nonzero. The formulas are PyTorch's CPU ones,
 * in its order of operations: addcmul fma(alpha b, c, a) (PyTorch writes
 * a + alpha*b*c and its build contracts that into one fma, in the float,
 * reduced-float and double kernels alike), addcdiv a + (alpha b) / c,
 * lerp's two-sided form (exact at both ends) with one fma, as its
 * vectorised kernel computes it.
 *
 * Work split: contiguous ranges of out's row-major element index; every
 * element is independent, so any split gives the same bytes. */
#include <math.h>
#include <string.h>

#include "ew.h"
#include "kernels_internal.h"

/* ------------------------------------------------------ scalar bodies */

/* A NaN result as one fixed NaN: x86 keeps the first operand's NaN when
 * both are NaN, and the compiler orders a + alpha*b*c's operands
 * differently in different loops, so without this the NaN's sign bit
 * would depend on the path. */
#define CANON_F32(r) ((r) != (r) ? NAN : (r))

static inline float tern_f32(tpu_ternary_fn fn, float alpha, float a, float b, float c) {
    float r;
    switch (fn) {
    case TPU_TERNARY_ADDCMUL: r = fmaf(alpha * b, c, a); break;
    case TPU_TERNARY_ADDCDIV: r = a + alpha * b / c; break;
    default: /* LERP, as PyTorch's vectorised lerp: one fma either side */
        r = fabsf(c) < 0.5f ? fmaf(c, b - a, a) : fmaf(c - 1.0f, b - a, b);
        break;
    }
    return CANON_F32(r);
}

static inline double tern_f64(tpu_ternary_fn fn, double alpha, double a, double b, double c) {
    double r;
    switch (fn) {
    case TPU_TERNARY_ADDCMUL: r = fma(alpha * b, c, a); break;
    case TPU_TERNARY_ADDCDIV: r = a + alpha * b / c; break;
    default: r = fabs(c) < 0.5 ? fma(c, b - a, a) : fma(c - 1.0, b - a, b); break;
    }
    return r != r ? (double)NAN : r;
}

/* ADDCMUL on integers, wrapping (uint64). */
static inline int64_t tern_i64(int64_t alpha, int64_t a, int64_t b, int64_t c) {
    return tpu_k_u64_to_i64((uint64_t)a + (uint64_t)alpha * (uint64_t)b * (uint64_t)c);
}

/* ---------------------------------------------------- reference path */

tpu_status tpu_k_ternary_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *ta = &op->in[0], *tb = &op->in[1];
    const tpu_tensor *tc = op->n_in == 3 ? &op->in[2] : NULL;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[4] = {o->strides, ta->strides, tb->strides, tc ? tc->strides : o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 4, strides, start);
    const tpu_ternary_fn fn = (tpu_ternary_fn)op->fn;
    const tpu_dtype cm = op->p.ew.common, odt = o->dtype;
    const tpu_scalar alpha = op->p.ew.alpha, other = op->p.ew.other;
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        const char *pa = tpu_k_ptr(ta, it.off[1]), *pb = tpu_k_ptr(tb, it.off[2]);
        const char *pc = tc ? tpu_k_ptr(tc, it.off[3]) : NULL;
        char *po = tpu_k_ptr(o, it.off[0]);
        if (fn == TPU_TERNARY_WHERE) {
            /* Copy the chosen value through common (a cast, no arithmetic). */
            bool cond = tpu_k_load_bool(pa, ta->dtype);
            const char *src = cond ? pb : pc;
            const tpu_dtype sdt = cond ? tb->dtype : tc ? tc->dtype : cm;
            switch (tpu_k_ew_compute_of(cm)) {
            case EW_F32: {
                float v = src ? tpu_k_ew_load_f32(src, sdt, cm) : tpu_k_round_to((float)other.f, cm);
                tpu_k_store_f32(po, odt, v);
                break;
            }
            case EW_F64: tpu_k_store_f64(po, odt, src ? tpu_k_load_f64(src, sdt) : other.f); break;
            case EW_BOOL: tpu_k_store_bool(po, odt, src ? tpu_k_load_bool(src, sdt) : other.i != 0); break;
            case EW_I64:
                tpu_k_store_i64(po, odt, src ? tpu_k_ew_load_i64(src, sdt, cm) : tpu_k_ew_wrap(other.i, cm));
                break;
            }
            continue;
        }
        switch (tpu_k_ew_compute_of(cm)) {
        case EW_F32: {
            float a = tpu_k_ew_load_f32(pa, ta->dtype, cm), b = tpu_k_ew_load_f32(pb, tb->dtype, cm);
            float c = pc                     ? tpu_k_ew_load_f32(pc, tc->dtype, cm)
                      : op->p.ew.b_opmath ? (float)other.f
                                          : tpu_k_round_to((float)other.f, cm);
            tpu_k_store_f32(po, odt, tpu_k_round_to(tern_f32(fn, (float)alpha.f, a, b, c), cm));
            break;
        }
        case EW_F64: {
            double a = tpu_k_load_f64(pa, ta->dtype), b = tpu_k_load_f64(pb, tb->dtype);
            double c = pc ? tpu_k_load_f64(pc, tc->dtype) : other.f;
            tpu_k_store_f64(po, odt, tern_f64(fn, alpha.f, a, b, c));
            break;
        }
        default: { /* ADDCMUL on integers (tpu_op_check refuses the rest) */
            int64_t a = tpu_k_ew_load_i64(pa, ta->dtype, cm), b = tpu_k_ew_load_i64(pb, tb->dtype, cm);
            int64_t c = pc ? tpu_k_ew_load_i64(pc, tc->dtype, cm) : tpu_k_ew_wrap(other.i, cm);
            tpu_k_store_i64(po, odt, tpu_k_ew_wrap(tern_i64(alpha.i, a, b, c), cm));
            break;
        }
        }
    }
    return TPU_OK;
}

/* --------------------------------------------------------- fast path */

/* lerp with one weight w (the optimizers' case). fmaf is one rounding
 * in both: without FMA instructions at compile time it is a libm call per
 * element, so CPUs with AVX2 and FMA take a variant compiled for them
 * (the same bytes, chosen at run time). */
#define LERP_SCALAR_W_BODY                                                                         \
    if (fabsf(w) < 0.5f) {                                                                         \
        for (int64_t i = 0; i < n; i++)                                                            \
            out[i] = CANON_F32(fmaf(w, b[i] - a[i], a[i]));                                        \
    } else {                                                                                       \
        for (int64_t i = 0; i < n; i++)                                                            \
            out[i] = CANON_F32(fmaf(w - 1.0f, b[i] - a[i], b[i]));                                 \
    }

static void lerp_scalar_w(float *out, const float *a, const float *b, float w, int64_t n) {
    LERP_SCALAR_W_BODY
}

__attribute__((target("avx2,fma"))) static void lerp_scalar_w_avx2(float *out, const float *a,
                                                                   const float *b, float w,
                                                                   int64_t n) {
    LERP_SCALAR_W_BODY
}

/* addcmul / addcdiv over dense operands (the optimizers' case), in the
 * reference's expressions (-std=c11 turns off fma contraction, so nothing
 * rounds differently from it). Compiled once per ISA, 8 and 16 lanes with
 * addcmul's fma one instruction (the baseline build calls libm's fmaf per
 * element), chosen at run time; the bytes are the reference's. */
#define ADDC_DENSE_BODY                                                                            \
    if (fn == TPU_TERNARY_ADDCMUL) {                                                               \
        for (int64_t i = 0; i < n; i++)                                                            \
            out[i] = CANON_F32(fmaf(alpha * b[i], c[i], a[i]));                                    \
    } else {                                                                                       \
        for (int64_t i = 0; i < n; i++)                                                            \
            out[i] = CANON_F32(a[i] + alpha * b[i] / c[i]);                                        \
    }

static void addc_dense(tpu_ternary_fn fn, float *out, const float *a, const float *b, const float *c,
                       float alpha, int64_t n) {
    ADDC_DENSE_BODY
}

__attribute__((target("avx2,fma"))) static void addc_dense_avx2(tpu_ternary_fn fn, float *out,
                                                            const float *a, const float *b,
                                                            const float *c, float alpha, int64_t n) {
    ADDC_DENSE_BODY
}

__attribute__((target("avx512f,fma"))) static void addc_dense_avx512(tpu_ternary_fn fn, float *out,
                                                                 const float *a, const float *b,
                                                                 const float *c, float alpha,
                                                                 int64_t n) {
    ADDC_DENSE_BODY
}

/* The runs, the function chosen once: WHERE with a bool condition and
 * f32 values (a select per element); ADDCMUL, ADDCDIV and LERP with f32
 * common and operands (the optimizers' case). Each input is read at step
 * 1 or 0 (one value); op_table.c runs them flat or by rows. The bytes are
 * the reference's. */
typedef struct {
    tpu_ternary_fn fn;
    float alpha, other; /* common is f32: the scalar c needs no rounding */
} ternary_span_state;
TPU_K_SPAN_STATE_FITS(ternary_span_state);

static void ternary_span_run(const tpu_op_span *s, char *out_bytes, const char *const *in,
                             int64_t n) {
    ternary_span_state state;
    memcpy(&state, s->state, sizeof state); /* not through a cast: uint64_t storage */
    const ternary_span_state *st = &state;
    const tpu_ternary_fn fn = st->fn;
    float *out = (float *)out_bytes;
    const float *c = s->n_in == 3 ? (const float *)in[2] : &st->other;
    const int64_t sb = s->step[1], sc = s->n_in == 3 ? s->step[2] : 0;
    const float *b = (const float *)in[1];
    if (fn == TPU_TERNARY_WHERE) {
        const uint8_t *m = (const uint8_t *)in[0];
        const int64_t sm = s->step[0];
        for (int64_t i = 0; i < n; i++)
            out[i] = m[i * sm] ? b[i * sb] : c[i * sc];
        return;
    }
    const float *a = (const float *)in[0];
    const int64_t sa = s->step[0];
    /* One loop per function and step pattern of the common cases, so the
     * compiler vectorises them; others take the generic loop. */
    if (sa == 1 && sb == 1 && sc == 1 && fn != TPU_TERNARY_LERP) {
        if (tpu_kernels_get_isa() >= TPU_ISA_AVX512)
            addc_dense_avx512(fn, out, a, b, c, st->alpha, n);
        else if (tpu_kernels_get_isa() >= TPU_ISA_AVX2)
            addc_dense_avx2(fn, out, a, b, c, st->alpha, n);
        else
            addc_dense(fn, out, a, b, c, st->alpha, n);
        return;
    }
    if (sa == 1 && sb == 1 && sc == 0 && fn == TPU_TERNARY_LERP) {
        if (tpu_kernels_get_isa() >= TPU_ISA_AVX2)
            lerp_scalar_w_avx2(out, a, b, c[0], n);
        else
            lerp_scalar_w(out, a, b, c[0], n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = tern_f32(fn, st->alpha, a[i * sa], b[i * sb], c[i * sc]);
}

bool tpu_k_ternary_row_span(const tpu_op *op, tpu_op_span *s) {
    const tpu_tensor *o = &op->out;
    const tpu_ternary_fn fn = (tpu_ternary_fn)op->fn;
    if (op->n_in < 2 || op->p.ew.common != TPU_DTYPE_F32 || o->dtype != TPU_DTYPE_F32 ||
        !tpu_k_is_aligned(o))
        return false;
    for (int k = 0; k < op->n_in; k++) {
        const tpu_dtype want = k == 0 && fn == TPU_TERNARY_WHERE ? TPU_DTYPE_BOOL : TPU_DTYPE_F32;
        if (op->in[k].dtype != want || !tpu_k_is_aligned(&op->in[k]))
            return false;
    }
    tpu_k_span_init(s, op, ternary_span_run);
    ternary_span_state st = {fn, (float)op->p.ew.alpha.f, (float)op->p.ew.other.f};
    memcpy(s->state, &st, sizeof st);
    return true;
}

bool tpu_k_ternary_span(const tpu_op *op, tpu_op_span *s) {
    return tpu_k_ternary_row_span(op, s) && tpu_k_span_flat_steps(op, s);
}
