/* Helpers shared by the kernel tests (test_kernels_*.c): the independent
 * numerics they check against (own f16/bf16 rounding and decoding, own
 * conversions, reads by dtype), a seeded xorshift generator, element
 * addressing by logical index (division, not the library's walkers),
 * short dtype names, and helpers that build and run ops. */
#ifndef TPU_TESTS_KERNEL_TEST_H
#define TPU_TESTS_KERNEL_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <stdlib.h>

#include "../../src/kernels/kernels_internal.h"
#include "tpu/dtype.h"
#include "tpu/op.h"

/* ------------------------------------------------------- test op kinds */

/* The ops the table-driven tests name, each a family and its function. */
typedef enum {
    T_COPY, T_COPY_H2D, T_COPY_D2H, T_FILL, T_ADD, T_SUB, T_MUL, T_DIV,
    T_SUM, T_MEAN, T_MM, T_ADDMM, T_UNIFORM, T_NORMAL, T_BERNOULLI, T_KIND_COUNT
} t_kind;

static const struct {
    tpu_op_code code;
    int32_t fn;
} t_kinds[T_KIND_COUNT] = {
    [T_COPY] = {TPU_OP_COPY, 0},
    [T_COPY_H2D] = {TPU_OP_COPY_H2D, 0},
    [T_COPY_D2H] = {TPU_OP_COPY_D2H, 0},
    [T_FILL] = {TPU_OP_FILL, 0},
    [T_ADD] = {TPU_OP_BINARY, TPU_BINARY_ADD},
    [T_SUB] = {TPU_OP_BINARY, TPU_BINARY_SUB},
    [T_MUL] = {TPU_OP_BINARY, TPU_BINARY_MUL},
    [T_DIV] = {TPU_OP_BINARY, TPU_BINARY_DIV},
    [T_SUM] = {TPU_OP_REDUCE, TPU_REDUCE_SUM},
    [T_MEAN] = {TPU_OP_REDUCE, TPU_REDUCE_MEAN},
    [T_MM] = {TPU_OP_MATMUL, TPU_MATMUL_MM},
    [T_ADDMM] = {TPU_OP_MATMUL, TPU_MATMUL_ADDMM},
    [T_UNIFORM] = {TPU_OP_RANDOM, TPU_RANDOM_UNIFORM},
    [T_NORMAL] = {TPU_OP_RANDOM, TPU_RANDOM_NORMAL},
    [T_BERNOULLI] = {TPU_OP_RANDOM, TPU_RANDOM_BERNOULLI},
};

/* Sets op's family and function to those of kind k. */
static inline void t_set_kind(tpu_op *op, t_kind k) {
    op->code = t_kinds[k].code;
    op->fn = t_kinds[k].fn;
}

/* ------------------------------------------------ independent numerics */

static inline size_t t_size(tpu_dtype dt) {
    static const size_t sizes[] = {4, 8, 2, 2, 1, 2, 4, 8, 1, 1};
    return sizes[dt];
}

static inline bool t_is_float(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_F16 ||
           dt == TPU_DTYPE_BF16;
}

/* Rounds x to a binary format with `mant` fraction bits, minimum normal
 * exponent emin and largest finite value maxf, to nearest even (scaling
 * by a power of two is exact; nearbyint rounds to even). */
static inline double t_round_fmt(double x, int mant, int emin, double maxf) {
    if (isnan(x) || isinf(x) || x == 0)
        return x;
    int e = ilogb(x);
    if (e < emin)
        e = emin;
    double scale = ldexp(1.0, e - mant);
    double q = nearbyint(x / scale) * scale;
    if (fabs(q) > maxf)
        return copysign(INFINITY, x);
    return q;
}

static inline double t_round_f16(double x) {
    return t_round_fmt(x, 10, -14, 65504.0);
}

static inline double t_round_bf16(double x) {
    return t_round_fmt(x, 7, -126, 0x1.fep127);
}

/* Decodes IEEE half bits by the textbook formula. */
static inline double t_decode_f16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp(m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexp(1024 + m, e - 25);
}

static inline double t_decode_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Float -> int64 as documented: truncate in range, INT64_MIN otherwise. */
static inline int64_t t_f2i(double v) {
    if (isnan(v) || v >= 9223372036854775808.0 || v < -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)trunc(v);
}

/* Keeps the low bits of v as integer dtype dt (bool: v != 0). */
static inline int64_t t_wrap(int64_t v, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_I8: return (int8_t)(uint8_t)((uint64_t)v & 0xff);
    case TPU_DTYPE_U8: return (uint8_t)((uint64_t)v & 0xff);
    case TPU_DTYPE_I16: return (int16_t)(uint16_t)((uint64_t)v & 0xffff);
    case TPU_DTYPE_I32: return (int32_t)(uint32_t)((uint64_t)v & 0xffffffff);
    case TPU_DTYPE_BOOL: return v != 0;
    default: return v;
    }
}

/* Reads element p of dtype dt as a double (exact except big i64). */
static inline double t_read_f(const unsigned char *p, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F32: { float v; memcpy(&v, p, 4); return v; }
    case TPU_DTYPE_F64: { double v; memcpy(&v, p, 8); return v; }
    case TPU_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); return t_decode_f16(v); }
    case TPU_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return t_decode_bf16(v); }
    case TPU_DTYPE_I8: return (int8_t)p[0];
    case TPU_DTYPE_U8: return p[0];
    case TPU_DTYPE_BOOL: return p[0] != 0;
    case TPU_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TPU_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    }
}

static inline int64_t t_read_i(const unsigned char *p, tpu_dtype dt) {
    if (t_is_float(dt))
        return t_f2i(t_read_f(p, dt));
    if (dt == TPU_DTYPE_I64) {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    return (int64_t)t_read_f(p, dt);
}

/* Reads as f32 compute value: integers convert straight to float. */
static inline float t_read_f32(const unsigned char *p, tpu_dtype dt) {
    return t_is_float(dt) ? (float)t_read_f(p, dt) : (float)t_read_i(p, dt);
}

/* Value an f32 (or f64) result has once stored in float dtype dt. */
static inline double t_quant(double v, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F64: return v;
    case TPU_DTYPE_F32: return (float)v;
    case TPU_DTYPE_F16: return t_round_f16((float)v);
    default: return t_round_bf16((float)v);
    }
}

/* Relative rounding of one store to dt. */
static inline double t_eps(tpu_dtype dt) {
    return dt == TPU_DTYPE_F64 ? 0x1p-52 : dt == TPU_DTYPE_F32 ? 0x1p-23
                                         : dt == TPU_DTYPE_F16 ? 0x1p-10 : 0x1p-7;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15u;
static inline uint64_t t_rand(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717u;
}
static inline double t_unit(void) {
    return (double)(t_rand() >> 11) * 0x1p-53;
}

/* ------------------------------------------------- tensor addressing */

static inline int64_t t_numel(const tpu_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->sizes[d];
    return n;
}

/* Address of the element at row-major logical index idx (by division). */
static inline unsigned char *t_at(const tpu_tensor *t, int64_t idx) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (idx % t->sizes[d]) * t->strides[d];
        idx /= t->sizes[d];
    }
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

/* Address of element (i, j) of a 2-d tensor. */
static inline unsigned char *t_at2(const tpu_tensor *t, int64_t i, int64_t j) {
    return (unsigned char *)t->data +
           (i * t->strides[0] + j * t->strides[1]) * (int64_t)t_size(t->dtype);
}

/* ------------------------------------------------- short dtype names */

#define F32 TPU_DTYPE_F32
#define F64 TPU_DTYPE_F64
#define F16 TPU_DTYPE_F16
#define BF16 TPU_DTYPE_BF16
#define I8 TPU_DTYPE_I8
#define I16 TPU_DTYPE_I16
#define I32 TPU_DTYPE_I32
#define I64 TPU_DTYPE_I64
#define U8 TPU_DTYPE_U8
#define BOOL TPU_DTYPE_BOOL

/* ------------------------------------------------------ running ops */

/* Runs all nth shares in turn; returns the first error. */
static inline tpu_status run_shares(const tpu_op *op_in, int nth) {
    /* Every phase's shares, one phase after another, with scratch from
     * malloc when the op needs some and has none. */
    tpu_op op = *op_in;
    void *scratch = NULL;
    int64_t need = tpu_op_scratch_bytes(&op);
    if (need > 0 && op.scratch == NULL) {
        scratch = malloc((size_t)need);
        op.scratch = scratch;
        op.scratch_nbytes = need;
    }
    tpu_status first = TPU_OK;
    for (int phase = 0; phase < tpu_op_phases(&op); phase++)
        for (int i = 0; i < nth; i++) {
            tpu_status st = tpu_op_run_phase(&op, phase, i, nth);
            if (st != TPU_OK && first == TPU_OK)
                first = st;
        }
    free(scratch);
    return first;
}

/* A 1-d (or transposed 2-d) random op over n elements of dt. */
static inline tpu_op random_op(t_kind code, tpu_dtype dt, void *data, int64_t n,
                               uint64_t seed, uint64_t offset, double a, double b) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    t_set_kind(&op, code);
    op.out = (tpu_tensor){.data = data, .sizes = {n}, .strides = {1}, .ndim = 1, .dtype = dt,
                          .storage = data, .storage_nbytes = n * (int64_t)tpu_dtype_size(dt)};
    op.p.rand.seed = seed;
    op.p.rand.offset = offset;
    op.p.rand.a = a;
    op.p.rand.b = b;
    return op;
}

#endif
