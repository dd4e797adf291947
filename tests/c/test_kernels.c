/* Kernel tests: one table of (op, sizes, dtypes, layout, tolerance) rows,
 * each checked and run with nth = 1 and nth = 3, in reference and fast
 * mode, against a plain loop written here (logical index -> offset by
 * division, own conversions), plus f16/bf16 conversion edge cases, Philox
 * known answers, random-number statistics, division by zero and
 * tpu_op_check rejecting malformed records. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/kernels/kernels_internal.h"
#include "check.h"
#include "tpu/dtype.h"
#include "tpu/op.h"

/* ------------------------------------------------ independent numerics */

static size_t t_size(tpu_dtype dt) {
    static const size_t sizes[] = {4, 8, 2, 2, 1, 2, 4, 8, 1, 1};
    return sizes[dt];
}

static bool t_is_float(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_F16 ||
           dt == TPU_DTYPE_BF16;
}

/* Rounds x to a binary format with `mant` fraction bits, minimum normal
 * exponent emin and largest finite value maxf, to nearest even (scaling
 * by a power of two is exact; nearbyint rounds to even). */
static double t_round_fmt(double x, int mant, int emin, double maxf) {
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

static double t_round_f16(double x) {
    return t_round_fmt(x, 10, -14, 65504.0);
}

static double t_round_bf16(double x) {
    return t_round_fmt(x, 7, -126, 0x1.fep127);
}

/* Decodes IEEE half bits by the textbook formula. */
static double t_decode_f16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp(m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexp(1024 + m, e - 25);
}

static double t_decode_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Float -> int64 as documented: truncate in range, INT64_MIN otherwise. */
static int64_t t_f2i(double v) {
    if (isnan(v) || v >= 9223372036854775808.0 || v < -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)trunc(v);
}

/* Keeps the low bits of v as integer dtype dt (bool: v != 0). */
static int64_t t_wrap(int64_t v, tpu_dtype dt) {
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
static double t_read_f(const unsigned char *p, tpu_dtype dt) {
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

static int64_t t_read_i(const unsigned char *p, tpu_dtype dt) {
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
static float t_read_f32(const unsigned char *p, tpu_dtype dt) {
    return t_is_float(dt) ? (float)t_read_f(p, dt) : (float)t_read_i(p, dt);
}

/* Value an f32 (or f64) result has once stored in float dtype dt. */
static double t_quant(double v, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F64: return v;
    case TPU_DTYPE_F32: return (float)v;
    case TPU_DTYPE_F16: return t_round_f16((float)v);
    default: return t_round_bf16((float)v);
    }
}

/* Relative rounding of one store to dt. */
static double t_eps(tpu_dtype dt) {
    return dt == TPU_DTYPE_F64 ? 0x1p-52 : dt == TPU_DTYPE_F32 ? 0x1p-23
                                         : dt == TPU_DTYPE_F16 ? 0x1p-10 : 0x1p-7;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15u;
static uint64_t t_rand(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717u;
}
static double t_unit(void) {
    return (double)(t_rand() >> 11) * 0x1p-53;
}

/* ------------------------------------------------------------ tensors */

/* L_BCAST: dim 0 has stride 0 (a row broadcast down the rows); L_COLB:
 * the last dim has stride 0 (a column broadcast along each row).
 * L_ODD: row-major, but data 1 byte past an aligned address (host
 * buffers such as torch.frombuffer with an odd offset). */
enum { L_CONTIG, L_TRANS, L_NEG, L_PAD, L_BCAST, L_ODD, L_COLB };
enum { S_NONE, S_SPECIALS, S_NAN_BIAS, S_INT_EDGE };

typedef struct {
    tpu_tensor t;
    unsigned char *alloc, *pristine;
    size_t bytes;
} tbuf;

static void t_store_random(unsigned char *p, tpu_dtype dt, int special) {
    static const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, -1e30,
                                      3e9, -2.5, 65519.0, 255.7, -129.0};
    double v = t_unit() * 8.0 - 4.0;
    if (special == S_SPECIALS && t_rand() % 8 == 0)
        v = specials[t_rand() % (sizeof specials / sizeof specials[0])];
    uint64_t r = t_rand();
    switch (dt) {
    case TPU_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case TPU_DTYPE_F64: memcpy(p, &v, 8); break;
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case TPU_DTYPE_BF16: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case TPU_DTYPE_BOOL: p[0] = r & 1; break;
    default: memcpy(p, &r, t_size(dt)); break;
    }
}

/* Builds a tensor of `layout` over sizes, in a buffer full of random
 * elements (the gaps too). */
static void tb_make(tbuf *b, tpu_dtype dt, int ndim, const int64_t *sizes, int layout,
                    int special) {
    memset(b, 0, sizeof *b);
    b->t.ndim = ndim;
    b->t.dtype = dt;
    int64_t stride = 1;
    for (int d = 0; d < ndim; d++)
        b->t.sizes[d] = sizes[d];
    if (layout == L_TRANS) {
        for (int d = 0; d < ndim; d++) {
            b->t.strides[d] = stride;
            stride *= sizes[d];
        }
    } else {
        for (int d = ndim - 1; d >= 0; d--) {
            b->t.strides[d] = stride;
            stride *= sizes[d] + (layout == L_PAD && d == ndim - 1 ? 3 : 0);
        }
    }
    if (layout == L_NEG && ndim > 0) {
        b->t.strides[0] = -b->t.strides[0];
        b->t.strides[ndim - 1] = -b->t.strides[ndim - 1];
    }
    if (layout == L_BCAST && ndim > 0)
        b->t.strides[0] = 0;
    if (layout == L_COLB && ndim > 0)
        b->t.strides[ndim - 1] = 0;
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < ndim; d++) {
        int64_t span = sizes[d] > 0 ? b->t.strides[d] * (sizes[d] - 1) : 0;
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    size_t es = t_size(dt), skew = layout == L_ODD ? 1 : 0;
    b->bytes = (size_t)(hi - lo + 1) * es + skew;
    b->alloc = malloc(b->bytes);
    b->pristine = malloc(b->bytes);
    b->alloc[0] = 0x5a;
    for (size_t i = skew; i + es <= b->bytes; i += es)
        t_store_random(b->alloc + i, dt, special);
    b->t.data = b->alloc + (size_t)(-lo) * es + skew;
    memcpy(b->pristine, b->alloc, b->bytes);
}

static void tb_free(tbuf *b) {
    free(b->alloc);
    free(b->pristine);
}

static int64_t t_numel(const tpu_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->sizes[d];
    return n;
}

/* Address of the element at row-major logical index idx (by division). */
static unsigned char *t_at(const tpu_tensor *t, int64_t idx) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (idx % t->sizes[d]) * t->strides[d];
        idx /= t->sizes[d];
    }
    return (unsigned char *)t->data + off * (int64_t)t_size(t->dtype);
}

/* Address of element (i, j) of a 2-d tensor. */
static unsigned char *t_at2(const tpu_tensor *t, int64_t i, int64_t j) {
    return (unsigned char *)t->data +
           (i * t->strides[0] + j * t->strides[1]) * (int64_t)t_size(t->dtype);
}

/* ---------------------------------------------------------- the table */

typedef struct {
    const char *label;
    tpu_op_code op;
    int ndim;
    int64_t sizes[4]; /* MM: {M, K, N} */
    tpu_dtype out, in[3];
    int n_in;
    int out_layout, in_layout; /* in_layout: in[0]; in[1] too, except BCAST (in[1]/bias only) */
    bool inplace;
    double p0, p1; /* alpha & other / fill value / mm alpha & beta */
    int param;     /* rounding / mask / precision */
    int special;
    double tol; /* 0: exact; else times sum |terms| */
} krow;

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

static const krow k_rows[] = {
    /* element-wise, f32 fast-path shapes (8-lane body and tail) */
    {"add f32", TPU_OP_ADD, 2, {37, 53}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add f32 alpha", TPU_OP_ADD, 2, {301, 129}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 2.7, 0, 0, 0, 0},
    {"sub f32 alpha", TPU_OP_SUB, 3, {5, 7, 9}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, -0.3, 0, 0, 0, 0},
    {"mul f32 trans", TPU_OP_MUL, 3, {5, 7, 9}, F32, {F32, F32}, 2, L_TRANS, L_TRANS, 0, 1, 0, 0, 0, 0},
    {"div f32", TPU_OP_DIV, 2, {19, 23}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_NONE, S_SPECIALS, 0},
    {"div f32 trunc", TPU_OP_DIV, 2, {19, 23}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_TRUNC, 0, 0},
    {"div f32 floor", TPU_OP_DIV, 2, {19, 23}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, S_SPECIALS, 0},
    {"add f32 scalar", TPU_OP_ADD, 2, {11, 13}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 1, 0.1, 0, 0, 0},
    {"sub f32 1-d bcast", TPU_OP_SUB, 1, {37}, F32, {F32, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add f32 bcast", TPU_OP_ADD, 3, {4, 6, 5}, F32, {F32, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add f32 neg", TPU_OP_ADD, 3, {4, 6, 5}, F32, {F32, F32}, 2, L_NEG, L_NEG, 0, 1, 0, 0, 0, 0},
    {"mul f32 pad", TPU_OP_MUL, 2, {9, 17}, F32, {F32, F32}, 2, L_PAD, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add f32 inplace", TPU_OP_ADD, 2, {33, 7}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 1, 0.5, 0, 0, 0, 0},
    {"div f32 inplace neg", TPU_OP_DIV, 2, {6, 7}, F32, {F32, F32}, 2, L_NEG, L_NEG, 1, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"add f32 scalar 0d", TPU_OP_ADD, 0, {0}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add f32 empty", TPU_OP_ADD, 2, {0, 5}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add bf16", TPU_OP_ADD, 2, {17, 19}, BF16, {BF16, F32}, 2, L_CONTIG, L_TRANS, 0, 1, 0, 0, 0, 0},
    {"mul f16", TPU_OP_MUL, 2, {17, 19}, F16, {F16, F16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"div f16 floor", TPU_OP_DIV, 2, {17, 19}, F16, {F16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"add f64 alpha", TPU_OP_ADD, 2, {17, 19}, F64, {F64, F64}, 2, L_TRANS, L_CONTIG, 0, 1.3, 0, 0, 0, 0},
    {"div f64 floor", TPU_OP_DIV, 2, {17, 19}, F64, {F64, F32}, 2, L_CONTIG, L_NEG, 0, 1, 0, TPU_ROUND_FLOOR, S_SPECIALS, 0},
    {"add f32 = i32 + f32", TPU_OP_ADD, 2, {9, 10}, F32, {I32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"mul f64 = f16 * i64", TPU_OP_MUL, 2, {9, 10}, F64, {F16, I64}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add i32 alpha", TPU_OP_ADD, 2, {13, 11}, I32, {I32, I32}, 2, L_CONTIG, L_CONTIG, 0, 3, 0, 0, 0, 0},
    {"sub i64", TPU_OP_SUB, 2, {13, 11}, I64, {I64, I64}, 2, L_TRANS, L_NEG, 0, -7, 0, 0, 0, 0},
    {"mul i8", TPU_OP_MUL, 2, {13, 11}, I8, {I8, I8}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"mul u8 scalar", TPU_OP_MUL, 1, {100}, U8, {U8}, 1, L_CONTIG, L_CONTIG, 0, 1, 3, 0, 0, 0},
    {"div i32 trunc", TPU_OP_DIV, 2, {13, 11}, I32, {I32, I16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_TRUNC, 0, 0},
    {"div i64 floor", TPU_OP_DIV, 2, {13, 11}, I64, {I64, I8}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"div i64 edges", TPU_OP_DIV, 1, {8}, I64, {I64, I64}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, S_INT_EDGE, 0},
    {"div i64 edges trunc", TPU_OP_DIV, 1, {8}, I64, {I64, I64}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_TRUNC, S_INT_EDGE, 0},
    {"div u8 floor", TPU_OP_DIV, 2, {13, 11}, U8, {U8, U8}, 2, L_PAD, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"add i16 = f32 + i16", TPU_OP_ADD, 2, {8, 9}, I16, {F32, I16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"add bool", TPU_OP_ADD, 2, {8, 9}, BOOL, {BOOL, BOOL}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"mul bool = bool * f32", TPU_OP_MUL, 2, {8, 9}, BOOL, {BOOL, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"add f32 misaligned", TPU_OP_ADD, 2, {33, 9}, F32, {F32, F32}, 2, L_ODD, L_ODD, 0, 1, 0, 0, 0, 0},
    /* element-wise row path (row / column broadcast) and f16/bf16 staging */
    {"mul f32 row bcast", TPU_OP_MUL, 2, {37, 53}, F32, {F32, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, S_SPECIALS, 0},
    {"sub f32 col bcast alpha", TPU_OP_SUB, 3, {3, 37, 29}, F32, {F32, F32}, 2, L_CONTIG, L_COLB, 0, 1.5, 0, 0, 0, 0},
    {"div f32 floor row bcast", TPU_OP_DIV, 2, {9, 21}, F32, {F32, F32}, 2, L_PAD, L_BCAST, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"mul f32 row bcast trans out", TPU_OP_MUL, 2, {9, 21}, F32, {F32, F32}, 2, L_TRANS, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add bf16 inplace", TPU_OP_ADD, 2, {33, 77}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 1, 1, 0, 0, S_SPECIALS, 0},
    {"add bf16 inplace alpha", TPU_OP_ADD, 1, {1029}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 1, 0.3, 0, 0, 0, 0},
    {"mul bf16 specials", TPU_OP_MUL, 2, {17, 300}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"div bf16 = f32 / f32", TPU_OP_DIV, 2, {17, 31}, BF16, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_NONE, S_SPECIALS, 0},
    {"add f32 = bf16 + f16", TPU_OP_ADD, 2, {17, 31}, F32, {BF16, F16}, 2, L_CONTIG, L_CONTIG, 0, 2, 0, 0, S_SPECIALS, 0},
    {"mul bf16 row bcast f32", TPU_OP_MUL, 2, {13, 267}, BF16, {BF16, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add f16 col bcast", TPU_OP_ADD, 2, {13, 267}, F16, {F16, F16}, 2, L_CONTIG, L_COLB, 0, 1, 0, 0, S_SPECIALS, 0},
    {"sub bf16 pad", TPU_OP_SUB, 2, {13, 45}, BF16, {BF16, BF16}, 2, L_PAD, L_PAD, 0, 1, 0, 0, 0, 0},
    {"mul bf16 scalar", TPU_OP_MUL, 2, {13, 45}, BF16, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 1, 0.3, 0, 0, 0},
    {"add bf16 trans", TPU_OP_ADD, 2, {13, 45}, BF16, {BF16, BF16}, 2, L_TRANS, L_TRANS, 0, 1, 0, 0, 0, 0},
    {"add bf16 misaligned", TPU_OP_ADD, 2, {13, 45}, BF16, {BF16, BF16}, 2, L_ODD, L_ODD, 0, 1, 0, 0, 0, 0},
    {"div f16 trunc neg", TPU_OP_DIV, 2, {13, 45}, F16, {F16, F16}, 2, L_NEG, L_NEG, 0, 1, 0, TPU_ROUND_TRUNC, 0, 0},
    /* copy and fill */
    {"copy f32", TPU_OP_COPY, 2, {300, 129}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy f32 misaligned", TPU_OP_COPY, 2, {30, 9}, F32, {F32}, 1, L_CONTIG, L_ODD, 0, 0, 0, 0, 0, 0},
    {"copy f64 <- f32 misaligned", TPU_OP_COPY, 2, {30, 9}, F64, {F32}, 1, L_ODD, L_ODD, 0, 0, 0, 0, 0, 0},
    {"copy f32 transpose", TPU_OP_COPY, 3, {7, 9, 11}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy f16 neg", TPU_OP_COPY, 2, {7, 9}, F16, {F16}, 1, L_NEG, L_PAD, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- f16", TPU_OP_COPY, 2, {7, 9}, F32, {F16}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy bf16 <- f32", TPU_OP_COPY, 2, {7, 9}, BF16, {F32}, 1, L_PAD, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f16 <- f64", TPU_OP_COPY, 2, {7, 9}, F16, {F64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f64 <- f32 neg", TPU_OP_COPY, 2, {7, 9}, F64, {F32}, 1, L_NEG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy i32 <- f32", TPU_OP_COPY, 2, {7, 9}, I32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i64 <- f32", TPU_OP_COPY, 2, {7, 9}, I64, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy u8 <- f64", TPU_OP_COPY, 2, {7, 9}, U8, {F64}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i8 <- i64", TPU_OP_COPY, 2, {7, 9}, I8, {I64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy bool <- bf16", TPU_OP_COPY, 2, {7, 9}, BOOL, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- bool", TPU_OP_COPY, 2, {7, 9}, F32, {BOOL}, 1, L_TRANS, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy f16 <- bf16", TPU_OP_COPY, 2, {7, 9}, F16, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i64 <- i16 bcast", TPU_OP_COPY, 2, {7, 9}, I64, {I16}, 1, L_CONTIG, L_BCAST, 0, 0, 0, 0, 0, 0},
    /* copy fast paths: blocked transposes (8x8 register blocks and ragged
     * edges), flat and row-run conversions */
    {"copy f32 transpose 2-d", TPU_OP_COPY, 2, {67, 45}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 transpose small", TPU_OP_COPY, 2, {3, 5}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy f32 transpose pad out", TPU_OP_COPY, 2, {40, 24}, F32, {F32}, 1, L_PAD, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy f64 transpose", TPU_OP_COPY, 2, {37, 19}, F64, {F64}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy bf16 transpose", TPU_OP_COPY, 2, {37, 19}, BF16, {BF16}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy u8 transpose 3-d", TPU_OP_COPY, 3, {5, 17, 19}, U8, {U8}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy bf16 <- f32 flat", TPU_OP_COPY, 2, {37, 53}, BF16, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- bf16 flat", TPU_OP_COPY, 2, {37, 53}, F32, {BF16}, 1, L_TRANS, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f16 <- f32 flat", TPU_OP_COPY, 2, {37, 53}, F16, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy bf16 <- f32 misaligned", TPU_OP_COPY, 2, {37, 53}, BF16, {F32}, 1, L_CONTIG, L_ODD, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- bf16 pad", TPU_OP_COPY, 2, {37, 53}, F32, {BF16}, 1, L_CONTIG, L_PAD, 0, 0, 0, 0, 0, 0},
    {"fill f32", TPU_OP_FILL, 2, {70, 9}, F32, {F32}, 0, L_CONTIG, L_CONTIG, 0, 0.1, 0, 0, 0, 0},
    {"fill bf16 neg", TPU_OP_FILL, 2, {7, 9}, BF16, {F32}, 0, L_NEG, L_CONTIG, 0, 0.1, 0, 0, 0, 0},
    {"fill f16 pad", TPU_OP_FILL, 2, {7, 9}, F16, {F32}, 0, L_PAD, L_CONTIG, 0, 1e6, 0, 0, 0, 0},
    {"fill i8 wraps", TPU_OP_FILL, 2, {7, 9}, I8, {F32}, 0, L_TRANS, L_CONTIG, 0, 300, 0, 0, 0, 0},
    {"fill u8", TPU_OP_FILL, 1, {5}, U8, {F32}, 0, L_CONTIG, L_CONTIG, 0, -1, 0, 0, 0, 0},
    {"fill bool", TPU_OP_FILL, 1, {5}, BOOL, {F32}, 0, L_CONTIG, L_CONTIG, 0, 2, 0, 0, 0, 0},
    {"fill f64", TPU_OP_FILL, 0, {0}, F64, {F32}, 0, L_CONTIG, L_CONTIG, 0, -2.5, 0, 0, 0, 0},
    /* reductions (param = mask) */
    {"sum f32 last", TPU_OP_SUM, 3, {3, 4, 37}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 4, 0, 1e-6},
    {"sum f32 last two", TPU_OP_SUM, 3, {3, 4, 37}, F32, {F32}, 1, L_NEG, L_CONTIG, 0, 0, 0, 6, 0, 1e-6},
    {"sum f32 first", TPU_OP_SUM, 3, {30, 4, 7}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"sum f32 first two", TPU_OP_SUM, 3, {30, 4, 7}, F64, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 1e-12},
    {"sum f32 middle", TPU_OP_SUM, 3, {3, 40, 7}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    {"sum f32 all", TPU_OP_SUM, 2, {70, 1000}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 1e-6},
    {"sum f32 misaligned", TPU_OP_SUM, 2, {30, 9}, F32, {F32}, 1, L_ODD, L_ODD, 0, 0, 0, 2, 0, 1e-6},
    {"sum f32 transposed", TPU_OP_SUM, 3, {3, 4, 37}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 5, 0, 1e-6},
    {"sum f16 -> f32", TPU_OP_SUM, 2, {9, 33}, F32, {F16}, 1, L_CONTIG, L_PAD, 0, 0, 0, 2, 0, 1e-6},
    {"sum bf16 -> bf16", TPU_OP_SUM, 2, {9, 33}, BF16, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"sum i32 -> i64", TPU_OP_SUM, 2, {9, 33}, I64, {I32}, 1, L_CONTIG, L_NEG, 0, 0, 0, 2, 0, 0},
    {"sum i64 wraps", TPU_OP_SUM, 2, {9, 33}, I64, {I64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 0},
    {"sum bool -> i64", TPU_OP_SUM, 2, {9, 33}, I64, {BOOL}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 0},
    {"sum f32 -> i32", TPU_OP_SUM, 2, {9, 33}, I32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 0},
    {"sum none", TPU_OP_SUM, 2, {9, 33}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 1e-6},
    {"sum empty dim", TPU_OP_SUM, 2, {4, 0}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    {"sum 0-d", TPU_OP_SUM, 0, {0}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 1e-6},
    {"mean f32 last", TPU_OP_MEAN, 2, {9, 70}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    {"sum f32 first wide", TPU_OP_SUM, 2, {13, 1100}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"mean f32 first three", TPU_OP_MEAN, 2, {3, 21}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"mean f32 first", TPU_OP_MEAN, 2, {70, 9}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"mean i32 -> f64", TPU_OP_MEAN, 3, {3, 4, 5}, F64, {I32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 5, 0, 1e-12},
    {"mean empty dim", TPU_OP_MEAN, 2, {4, 0}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    /* matrix products: sizes {M, K, N}, param = precision */
    {"mm f32", TPU_OP_MM, 2, {37, 29, 41}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 trans", TPU_OP_MM, 2, {37, 29, 41}, F32, {F32, F32}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 neg", TPU_OP_MM, 2, {13, 300, 9}, F32, {F32, F32}, 2, L_NEG, L_NEG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm f32 blocks", TPU_OP_MM, 2, {150, 270, 40}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm f32 wide", TPU_OP_MM, 2, {7, 20, 2100}, F32, {F32, F32}, 2, L_TRANS, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 misaligned", TPU_OP_MM, 2, {9, 17, 20}, F32, {F32, F32}, 2, L_ODD, L_ODD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 high", TPU_OP_MM, 2, {20, 100, 30}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGH, 0, 2e-4},
    {"mm f32 medium", TPU_OP_MM, 2, {20, 100, 30}, F32, {F32, F32}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_MEDIUM, 0, 2e-2},
    {"mm f16", TPU_OP_MM, 2, {20, 50, 30}, F16, {F16, F16}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_MEDIUM, 0, 1e-5},
    {"mm bf16", TPU_OP_MM, 2, {20, 50, 30}, BF16, {BF16, BF16}, 2, L_PAD, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 contig", TPU_OP_MM, 2, {37, 29, 41}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 blocks", TPU_OP_MM, 2, {150, 270, 40}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm f16 contig pad", TPU_OP_MM, 2, {19, 33, 21}, F16, {F16, F16}, 2, L_PAD, L_PAD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 misaligned", TPU_OP_MM, 2, {9, 17, 20}, BF16, {BF16, BF16}, 2, L_ODD, L_ODD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f64", TPU_OP_MM, 2, {20, 50, 30}, F64, {F64, F64}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-14},
    {"mm k=0", TPU_OP_MM, 2, {5, 0, 6}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-6},
    {"mm m=0", TPU_OP_MM, 2, {0, 4, 6}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-6},
    {"addmm f32", TPU_OP_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_CONTIG, 0, 0.5, 2, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f32 bcast bias", TPU_OP_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_BCAST, 0, 1, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm beta 0 nan bias", TPU_OP_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_CONTIG, 0, 1.5, 0, TPU_PRECISION_HIGH, S_NAN_BIAS, 2e-4},
    {"addmm bf16", TPU_OP_ADDMM, 2, {23, 31, 19}, BF16, {BF16, BF16, BF16}, 3, L_TRANS, L_BCAST, 0, 1, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f64 k=0", TPU_OP_ADDMM, 2, {4, 0, 3}, F64, {F64, F64, F64}, 3, L_CONTIG, L_CONTIG, 0, 1, 3, TPU_PRECISION_HIGHEST, 0, 1e-14},
};

/* ------------------------------------------------- expected results */

typedef struct {
    double f;   /* float outputs */
    int64_t i;  /* integer and bool outputs */
    double mag; /* sum of |terms|, scales the tolerance */
} expect;

static float t_floor_div_f32(float a, float b) {
    if (b == 0)
        return a / b;
    float m = fmodf(a, b), q = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0)))
        q -= 1;
    if (q == 0)
        return copysignf(0.0f, a / b);
    float f = floorf(q);
    return q - f > 0.5f ? f + 1 : f;
}

static double t_floor_div_f64(double a, double b) {
    if (b == 0)
        return a / b;
    double m = fmod(a, b), q = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0)))
        q -= 1;
    if (q == 0)
        return copysign(0.0, a / b);
    double f = floor(q);
    return q - f > 0.5 ? f + 1 : f;
}

static void expect_binary(const krow *r, const tpu_op *op, int64_t e, expect *x) {
    const unsigned char *pa = t_at(&op->in[0], e);
    const unsigned char *pb = r->n_in == 2 ? t_at(&op->in[1], e) : NULL;
    tpu_dtype da = op->in[0].dtype, db = r->n_in == 2 ? op->in[1].dtype : F64;
    tpu_op_code c = r->op;
    if (r->out == F64) {
        double a = t_read_f(pa, da), b = pb ? t_read_f(pb, db) : r->p1, al = r->p0, v;
        if (c == TPU_OP_ADD || c == TPU_OP_SUB)
            v = al == 1 ? (c == TPU_OP_ADD ? a + b : a - b) : fma(c == TPU_OP_ADD ? al : -al, b, a);
        else if (c == TPU_OP_MUL)
            v = a * b;
        else
            v = r->param == TPU_ROUND_NONE ? a / b : r->param == TPU_ROUND_TRUNC ? trunc(a / b)
                                                                                : t_floor_div_f64(a, b);
        x->f = v;
    } else if (t_is_float(r->out)) {
        float a = t_read_f32(pa, da), b = pb ? t_read_f32(pb, db) : (float)r->p1, v;
        float al = (float)r->p0;
        if (c == TPU_OP_ADD || c == TPU_OP_SUB)
            v = al == 1 ? (c == TPU_OP_ADD ? a + b : a - b) : fmaf(c == TPU_OP_ADD ? al : -al, b, a);
        else if (c == TPU_OP_MUL)
            v = a * b;
        else
            v = r->param == TPU_ROUND_NONE ? a / b : r->param == TPU_ROUND_TRUNC ? truncf(a / b)
                                                                                : t_floor_div_f32(a, b);
        x->f = t_quant(v, r->out);
    } else if (r->out == BOOL) {
        bool a = t_read_f(pa, da) != 0, b = pb ? t_read_f(pb, db) != 0 : r->p1 != 0;
        x->i = c == TPU_OP_ADD ? (a || b) : (a && b);
    } else {
        int64_t a = t_read_i(pa, da), b = pb ? t_read_i(pb, db) : (int64_t)r->p1;
        uint64_t al = (uint64_t)(int64_t)r->p0, v;
        if (c == TPU_OP_ADD)
            v = (uint64_t)a + al * (uint64_t)b;
        else if (c == TPU_OP_SUB)
            v = (uint64_t)a - al * (uint64_t)b;
        else if (c == TPU_OP_MUL)
            v = (uint64_t)a * (uint64_t)b;
        else if (b == -1)
            v = 0 - (uint64_t)a;
        else {
            int64_t q = a / b;
            if (r->param == TPU_ROUND_FLOOR && a % b != 0 && ((a % b < 0) != (b < 0)))
                q--;
            v = (uint64_t)q;
        }
        x->i = t_wrap((int64_t)v, r->out);
    }
}

static void expect_copy(const krow *r, const tpu_op *op, int64_t e, expect *x) {
    const unsigned char *p = t_at(&op->in[0], e);
    tpu_dtype di = op->in[0].dtype;
    if (r->out == F64)
        x->f = di == I64 ? (double)t_read_i(p, di) : t_read_f(p, di);
    else if (t_is_float(r->out))
        x->f = t_quant(t_read_f32(p, di), r->out);
    else if (r->out == BOOL)
        x->i = t_read_f(p, di) != 0;
    else
        x->i = t_wrap(t_read_i(p, di), r->out);
}

static void expect_fill(const krow *r, expect *x) {
    if (t_is_float(r->out))
        x->f = r->out == F64 ? r->p0 : t_quant((float)r->p0, r->out);
    else
        x->i = t_wrap((int64_t)r->p0, r->out);
}

/* Reduced sum by the definition: for out element e, every input element
 * whose kept coordinates match e's. */
static void expect_reduce(const krow *r, const tpu_op *op, int64_t e, expect *x) {
    const tpu_tensor *in = &op->in[0];
    int64_t n = t_numel(in), cnt = 0;
    double s = 0, mag = 0;
    uint64_t si = 0;
    for (int64_t k = 0; k < n; k++) {
        /* Map input index k to the out index with reduced coordinates 0. */
        int64_t rem = k, oe = 0, mul = 1;
        for (int d = in->ndim - 1; d >= 0; d--) {
            int64_t c = rem % in->sizes[d];
            rem /= in->sizes[d];
            if (!((r->param >> d) & 1)) {
                oe += c * mul;
                mul *= in->sizes[d];
            }
        }
        if (oe != e)
            continue;
        const unsigned char *p = t_at(in, k);
        cnt++;
        if (t_is_float(r->out)) {
            double v = in->dtype == I64 ? (double)t_read_i(p, in->dtype) : t_read_f(p, in->dtype);
            s += v;
            mag += fabs(v);
        } else {
            si += (uint64_t)t_read_i(p, in->dtype);
        }
    }
    if (t_is_float(r->out)) {
        if (r->op == TPU_OP_MEAN) {
            s = cnt ? s / (double)cnt : NAN;
            mag = cnt ? mag / (double)cnt : 0;
        }
        x->f = t_quant(s, r->out);
        x->mag = mag;
    } else {
        x->i = t_wrap((int64_t)si, r->out);
    }
}

static void expect_mm(const krow *r, const tpu_op *op, int64_t e, expect *x) {
    int64_t n = op->out.sizes[1], i = e / n, j = e % n, k_size = op->in[0].sizes[1];
    double s = 0, mag = 0;
    for (int64_t k = 0; k < k_size; k++) {
        double p = t_read_f(t_at2(&op->in[0], i, k), r->out) *
                   t_read_f(t_at2(&op->in[1], k, j), r->out);
        s += p;
        mag += fabs(p);
    }
    if (r->op == TPU_OP_ADDMM) {
        double bias = r->p1 != 0 ? r->p1 * t_read_f(t_at2(&op->in[2], i, j), r->out) : 0;
        s = r->p0 * s + bias;
        mag = fabs(r->p0) * mag + fabs(bias);
    }
    x->f = t_quant(s, r->out);
    x->mag = mag;
}

/* -------------------------------------------------------- row runner */

/* Runs all nth shares in turn; returns the first error. */
static tpu_status run_shares(const tpu_op *op, int nth) {
    tpu_status first = TPU_OK;
    for (int i = 0; i < nth; i++) {
        tpu_status st = tpu_op_run(op, i, nth);
        if (st != TPU_OK && first == TPU_OK)
            first = st;
    }
    return first;
}

static bool values_match(const krow *r, const expect *x, const unsigned char *p) {
    if (!t_is_float(r->out))
        return t_read_i(p, r->out) == x->i;
    double got = t_read_f(p, r->out);
    if (isnan(x->f) || isnan(got))
        return isnan(x->f) && isnan(got);
    if (r->tol == 0)
        return got == x->f && signbit(got) == signbit(x->f);
    if (isinf(x->f) || isinf(got))
        return got == x->f;
    double allow = r->tol * x->mag + t_eps(r->out) * fabs(x->f) + 1e-300;
    return fabs(got - x->f) <= allow;
}

/* Builds the row's op, computes the expected output, then runs it four
 * ways (reference/fast x nth 1/3) and checks each, their agreement, and
 * that bytes outside out's view are untouched. */
static void run_row(const krow *r) {
    tbuf out, in[3];
    int n_bufs = r->op == TPU_OP_FILL ? 0 : r->n_in;
    bool mm = r->op == TPU_OP_MM || r->op == TPU_OP_ADDMM;
    int64_t M = r->sizes[0], K = r->sizes[1], N = r->sizes[2];
    for (int i = 0; i < n_bufs; i++) {
        int layout = r->in_layout;
        if ((layout == L_BCAST || layout == L_COLB) && i == 0)
            layout = L_CONTIG; /* BCAST, COLB apply to in[1] (and a bias) */
        if (mm && i < 2 && layout == L_BCAST)
            layout = L_CONTIG;
        int64_t shape[4];
        memcpy(shape, r->sizes, sizeof shape);
        int ndim = r->ndim;
        if (mm) {
            shape[0] = i == 1 ? K : M;
            shape[1] = i == 0 ? K : N;
        }
        if (r->op == TPU_OP_SUM || r->op == TPU_OP_MEAN || r->op == TPU_OP_COPY)
            layout = r->in_layout;
        tb_make(&in[i], r->in[i], ndim, shape, layout,
                i == 2 && r->special == S_NAN_BIAS ? S_NONE : r->special);
        if (i == 2 && r->special == S_NAN_BIAS) {
            for (size_t b = 0; b < in[i].bytes; b += 4)
                memcpy(in[i].alloc + b, &(float){NAN}, 4);
            memcpy(in[i].pristine, in[i].alloc, in[i].bytes);
        }
    }
    /* Integer divisors: no zeros; edge rows: hand-picked pairs. */
    if (r->op == TPU_OP_DIV && !t_is_float(r->out) && r->n_in == 2) {
        int64_t n = t_numel(&in[1].t);
        for (int64_t e = 0; e < n; e++)
            if (t_read_i(t_at(&in[1].t, e), in[1].t.dtype) == 0)
                memset(t_at(&in[1].t, e), 1, 1);
        if (r->special == S_INT_EDGE) {
            static const int64_t pairs[8][2] = {{INT64_MIN, -1}, {-7, 2},  {7, -2},
                                                {-7, -2},        {7, 2},   {INT64_MIN, 3},
                                                {INT64_MAX, -1}, {-8, 2}};
            for (int e = 0; e < 8; e++) {
                memcpy(t_at(&in[0].t, e), &pairs[e][0], 8);
                memcpy(t_at(&in[1].t, e), &pairs[e][1], 8);
            }
        }
        for (int i = 0; i < 2; i++)
            memcpy(in[i].pristine, in[i].alloc, in[i].bytes);
    }
    int64_t osz[4];
    memcpy(osz, r->sizes, sizeof osz);
    if (mm) {
        osz[0] = M;
        osz[1] = N;
    }
    if (r->op == TPU_OP_SUM || r->op == TPU_OP_MEAN)
        for (int d = 0; d < r->ndim; d++)
            if ((r->param >> d) & 1)
                osz[d] = 1;
    if (r->inplace)
        out = in[0];
    else
        tb_make(&out, r->out, r->ndim, osz, r->out_layout, S_NONE);

    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = r->op;
    op.n_in = r->n_in;
    op.out = out.t;
    for (int i = 0; i < n_bufs; i++)
        op.in[i] = in[i].t;
    switch (r->op) {
    case TPU_OP_FILL: op.p.fill.value = (tpu_scalar){r->p0, (int64_t)r->p0}; break;
    case TPU_OP_SUM:
    case TPU_OP_MEAN: op.p.reduce.mask = (uint32_t)r->param; break;
    case TPU_OP_MM:
    case TPU_OP_ADDMM:
        op.p.mm.alpha = r->p0;
        op.p.mm.beta = r->p1;
        op.p.mm.precision = (tpu_precision)r->param;
        break;
    default:
        op.p.arith.alpha = (tpu_scalar){r->p0, (int64_t)r->p0};
        op.p.arith.other = (tpu_scalar){r->p1, (int64_t)r->p1};
        op.p.arith.rounding = (tpu_rounding)r->param;
        break;
    }
    tpu_status st = tpu_op_check(&op);
    CHECK_OK(st);
    if (st != TPU_OK) {
        fprintf(stderr, "    row: %s\n", r->label);
        goto done;
    }

    int64_t n = t_numel(&op.out);
    expect *want = calloc((size_t)(n ? n : 1), sizeof *want);
    for (int64_t e = 0; e < n; e++) {
        switch (r->op) {
        case TPU_OP_COPY: expect_copy(r, &op, e, &want[e]); break;
        case TPU_OP_FILL: expect_fill(r, &want[e]); break;
        case TPU_OP_SUM:
        case TPU_OP_MEAN: expect_reduce(r, &op, e, &want[e]); break;
        case TPU_OP_MM:
        case TPU_OP_ADDMM: expect_mm(r, &op, e, &want[e]); break;
        default: expect_binary(r, &op, e, &want[e]); break;
        }
    }

    size_t es = t_size(r->out);
    /* Reference, fast, and fast with the portable C variants forced. */
    enum { WAYS = 5 };
    unsigned char *runs[WAYS];
    static const struct {
        bool ref, portable;
        int nth;
    } ways[WAYS] = {{true, false, 1}, {true, false, 3}, {false, false, 1}, {false, false, 3},
                    {false, true, 3}};
    for (int w = 0; w < WAYS; w++) {
        for (int i = 0; i < n_bufs; i++)
            memcpy(in[i].alloc, in[i].pristine, in[i].bytes);
        memcpy(out.alloc, out.pristine, out.bytes);
        tpu_kernels_set_reference(ways[w].ref);
        tpu_k_set_portable_only(ways[w].portable);
        CHECK_OK(run_shares(&op, ways[w].nth));
        tpu_k_set_portable_only(false);
        runs[w] = malloc((size_t)(n ? n : 1) * es);
        int64_t bad = 0;
        for (int64_t e = 0; e < n; e++) {
            memcpy(runs[w] + e * (int64_t)es, t_at(&op.out, e), es);
            if (!values_match(r, &want[e], t_at(&op.out, e)) && bad++ < 3)
                fprintf(stderr, "    %s [%s nth=%d] element %lld: got %.9g / %lld, want %.9g / %lld\n",
                        r->label, ways[w].ref ? "ref" : ways[w].portable ? "portable" : "fast",
                        ways[w].nth, (long long)e,
                        t_read_f(t_at(&op.out, e), r->out), (long long)t_read_i(t_at(&op.out, e), r->out),
                        want[e].f, (long long)want[e].i);
        }
        CHECK(bad == 0);
        /* Bytes outside the view (gaps, other rows) are untouched. */
        if (!r->inplace) {
            unsigned char *a = malloc(out.bytes), *b = malloc(out.bytes);
            memcpy(a, out.alloc, out.bytes);
            memcpy(b, out.pristine, out.bytes);
            for (int64_t e = 0; e < n; e++) {
                size_t at = (size_t)(t_at(&op.out, e) - out.alloc);
                memset(a + at, 0, es);
                memset(b + at, 0, es);
            }
            CHECK(memcmp(a, b, out.bytes) == 0);
            free(a);
            free(b);
        }
    }
    /* Same bytes for any nth and for the portable variants; and fast ==
     * reference, except the fast trailing-dims sum (16 lanes). */
    size_t nbytes = (size_t)n * es;
    CHECK(memcmp(runs[0], runs[1], nbytes) == 0);
    CHECK(memcmp(runs[2], runs[3], nbytes) == 0);
    CHECK(memcmp(runs[3], runs[4], nbytes) == 0);
    if (r->op != TPU_OP_SUM && r->op != TPU_OP_MEAN) {
        bool same = true;
        for (int64_t e = 0; e < n; e++) {
            double a = t_read_f(runs[0] + e * (int64_t)es, r->out);
            double b = t_read_f(runs[2] + e * (int64_t)es, r->out);
            same = same && ((isnan(a) && isnan(b)) || memcmp(runs[0] + e * (int64_t)es,
                                                             runs[2] + e * (int64_t)es, es) == 0);
        }
        CHECK(same);
        if (!same)
            fprintf(stderr, "    row %s: fast and reference paths differ\n", r->label);
    }
    for (int w = 0; w < WAYS; w++)
        free(runs[w]);
    free(want);
done:
    for (int i = 0; i < n_bufs; i++)
        tb_free(&in[i]);
    if (!r->inplace)
        tb_free(&out);
}

/* ------------------------------------------------ dtype conversions */

static void test_dtype_basics(void) {
    CHECK(tpu_dtype_size(TPU_DTYPE_BF16) == 2 && tpu_dtype_size(TPU_DTYPE_I64) == 8);
    CHECK(tpu_dtype_size(TPU_DTYPE_COUNT) == 0 && tpu_dtype_size((tpu_dtype)-1) == 0);
    CHECK(strcmp(tpu_dtype_name(TPU_DTYPE_BF16), "bfloat16") == 0);
    CHECK(strcmp(tpu_dtype_name((tpu_dtype)77), "invalid") == 0);
    CHECK(tpu_dtype_is_float(TPU_DTYPE_F16) && !tpu_dtype_is_float(TPU_DTYPE_BOOL));
    CHECK(!tpu_dtype_is_float(TPU_DTYPE_COUNT));
    CHECK(strcmp(tpu_op_name(TPU_OP_ADDMM), "addmm") == 0);
    CHECK(strcmp(tpu_op_name(TPU_OP_COUNT), "invalid") == 0);
    CHECK(strcmp(tpu_op_name((tpu_op_code)-3), "invalid") == 0);
}

/* Every half pattern decodes exactly and encodes back to itself (NaNs
 * stay NaN with their sign, quieted). */
static void test_f16_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tpu_f16_to_f32((uint16_t)h);
        double want = t_decode_f16((uint16_t)h);
        uint16_t back = tpu_f32_to_f16(f);
        if (isnan(want)) {
            bad += !isnan(f) || (signbit(f) != 0) != ((h & 0x8000) != 0);
            bad += (back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0 || (back & 0x200) == 0 ||
                   (back & 0x8000) != (h & 0x8000);
        } else {
            bad += f != want || (signbit(f) != 0) != (signbit(want) != 0) || back != h;
        }
#ifdef __FLT16_MAX__
        _Float16 x;
        uint16_t hh = (uint16_t)h;
        memcpy(&x, &hh, 2);
        bad += !isnan(want) && (float)x != f;
#endif
    }
    CHECK(bad == 0);
}

/* Rounding to half: every tie between neighbours goes to the even one,
 * points just off a tie go to the nearer one; overflow, underflow; and a
 * million random floats against the independent rounding. */
static void test_f16_rounding(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = t_decode_f16((uint16_t)h), hi = t_decode_f16((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact: one more bit than half */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += tpu_f32_to_f16(mid) != even;
        bad += tpu_f32_to_f16(-mid) != (even | 0x8000);
        bad += tpu_f32_to_f16(nextafterf(mid, 0)) != h;
        bad += tpu_f32_to_f16(nextafterf(mid, INFINITY)) != h + 1;
    }
    CHECK(bad == 0);
    CHECK(tpu_f32_to_f16(65519.99f) == 0x7bff);
    CHECK(tpu_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(tpu_f32_to_f16(-1e9f) == 0xfc00);
    CHECK(tpu_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(tpu_f32_to_f16(0x1p-25f) == 0x0000);
    CHECK(tpu_f32_to_f16(-0x1p-25f) == 0x8000);
    CHECK(tpu_f32_to_f16(nextafterf(0x1p-25f, 1)) == 0x0001);
    CHECK(tpu_f32_to_f16(0x1p-30f) == 0x0000);
    CHECK(tpu_f32_to_f16(-0.0f) == 0x8000);
    CHECK(tpu_f32_to_f16(0x1.ffcp-15f) == 0x0400); /* rounds up into the smallest normal */
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)t_rand();
        if (i % 2)
            bits = (bits & 0x87ffffffu) | 0x30000000u; /* bias towards half's range */
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f))
            continue;
        double want = t_round_f16(f), got = t_decode_f16(tpu_f32_to_f16(f));
        bad += !(got == want && signbit(got) == signbit(want));
#ifdef __FLT16_MAX__
        _Float16 x = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &x, 2);
        bad += hb != tpu_f32_to_f16(f);
#endif
    }
    CHECK(bad == 0);
}

static uint16_t bf16_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return tpu_f32_to_bf16(f);
}

static void test_bf16_rounding(void) {
    CHECK(bf16_of_bits(0x3f808000u) == 0x3f80); /* tie, even below */
    CHECK(bf16_of_bits(0x3f818000u) == 0x3f82); /* tie, even above */
    CHECK(bf16_of_bits(0x3f808001u) == 0x3f81);
    CHECK(bf16_of_bits(0x3f807fffu) == 0x3f80);
    CHECK(bf16_of_bits(0x7f7fffffu) == 0x7f80); /* overflows to inf */
    CHECK(bf16_of_bits(0xff800000u) == 0xff80);
    uint16_t qn = bf16_of_bits(0x7f800001u); /* signalling NaN stays NaN */
    CHECK((qn & 0x7f80) == 0x7f80 && (qn & 0x7f) != 0);
    CHECK(bf16_of_bits(0xffc00000u) == 0xffc0);
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)t_rand();
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f))
            continue;
        double want = t_round_bf16(f), got = t_decode_bf16(tpu_f32_to_bf16(f));
        bad += !(got == want && signbit(got) == signbit(want));
        bad += t_decode_bf16((uint16_t)(bits >> 16)) != tpu_bf16_to_f32((uint16_t)(bits >> 16)) &&
               !isnan(t_decode_bf16((uint16_t)(bits >> 16)));
    }
    CHECK(bad == 0);
}

/* ---------------------------------------------------------- random */

static void test_philox_kat(void) {
    uint32_t out[4];
    const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    tpu_k_philox4x32_10(c0, k0, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
          out[3] == 0x9b00dbd8u);
    const uint32_t c1[4] = {~0u, ~0u, ~0u, ~0u}, k1[2] = {~0u, ~0u};
    tpu_k_philox4x32_10(c1, k1, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u &&
          out[3] == 0x6d5451fdu);
}

/* A 1-d (or transposed 2-d) random op over n elements of dt. */
static tpu_op random_op(tpu_op_code code, tpu_dtype dt, void *data, int64_t n, uint64_t seed,
                        uint64_t offset, double a, double b) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = code;
    op.out = (tpu_tensor){.data = data, .sizes = {n}, .strides = {1}, .ndim = 1, .dtype = dt};
    op.p.rand.seed = seed;
    op.p.rand.offset = offset;
    op.p.rand.a = a;
    op.p.rand.b = b;
    return op;
}

static void test_random_stats(void) {
    enum { N = 100000 };
    static const tpu_dtype dts[] = {F32, F64, F16, BF16};
    unsigned char *buf = malloc(N * 8), *again = malloc(N * 8);
    for (int u = 0; u < 2; u++) {
        for (int k = 0; k < 4; k++) {
            tpu_dtype dt = dts[k];
            double a = u ? 1.5 : -2.0, b = u ? 2.0 : 3.0;
            tpu_op op = random_op(u ? TPU_OP_NORMAL : TPU_OP_UNIFORM, dt, buf, N, 42 + (uint64_t)k,
                                  7, a, b);
            CHECK_OK(tpu_op_check(&op));
            tpu_kernels_set_reference(true);
            CHECK_OK(run_shares(&op, 3));
            double s = 0, s2 = 0;
            int out_of_range = 0;
            for (int64_t i = 0; i < N; i++) {
                double v = t_read_f(buf + i * (int64_t)t_size(dt), dt);
                s += v;
                s2 += v * v;
                out_of_range += !u && !(v >= a && v < b);
            }
            double mean = s / N, var = s2 / N - mean * mean;
            double want_mean = u ? a : (a + b) / 2, want_var = u ? b * b : (b - a) * (b - a) / 12;
            CHECK(out_of_range == 0);
            CHECK(fabs(mean - want_mean) < 5 * sqrt(want_var / N) + 1e-3);
            CHECK(fabs(var / want_var - 1) < 0.02);
            /* Same bytes for any nth and mode, and under another layout. */
            size_t bytes = (size_t)N * t_size(dt);
            for (int w = 0; w < 4; w++) {
                static const int nths[4] = {1, 7, 3, 5};
                tpu_kernels_set_reference(w == 1);
                tpu_k_set_portable_only(w == 3);
                memset(again, 0, bytes);
                op.out.data = again;
                CHECK_OK(run_shares(&op, nths[w]));
                tpu_k_set_portable_only(false);
                CHECK(memcmp(buf, again, bytes) == 0);
            }
            tpu_kernels_set_reference(false);
            tpu_op t = op;
            t.out.ndim = 2;
            t.out.sizes[0] = 500;
            t.out.sizes[1] = N / 500;
            t.out.strides[0] = 1;
            t.out.strides[1] = 500;
            CHECK_OK(run_shares(&t, 3));
            int bad = 0;
            for (int64_t i = 0; i < N; i++)
                bad += memcmp(buf + i * (int64_t)t_size(dt), t_at(&t.out, i), t_size(dt)) != 0;
            CHECK(bad == 0);
        }
    }
    /* The first four f32 uniforms of (seed 0, offset 0) are the top 24
     * bits of the Philox known answer. */
    float f[4];
    tpu_op op = random_op(TPU_OP_UNIFORM, F32, f, 4, 0, 0, 0.0, 1.0);
    CHECK_OK(run_shares(&op, 1));
    CHECK(f[0] == (float)((0x6627e8d5u >> 8) * 0x1p-24) &&
          f[3] == (float)((0x9b00dbd8u >> 8) * 0x1p-24));
    /* Ranges narrower than one ulp keep [a, b): only a is left. */
    struct {
        tpu_dtype dt;
        double a, b;
    } narrow[] = {{BF16, 1.0, 1.0078125}, {F16, 1.0, 1.0009765625},
                  {F32, 1.0, 1.00000011920928955}, {F64, 1.0, 1.0000000000000002},
                  {F16, 0.0, 1.0}, {BF16, 5.0, 5.0}};
    for (size_t k = 0; k < sizeof narrow / sizeof narrow[0]; k++) {
        tpu_dtype dt = narrow[k].dt;
        op = random_op(TPU_OP_UNIFORM, dt, buf, 20000, k, 3, narrow[k].a, narrow[k].b);
        CHECK_OK(run_shares(&op, 2));
        int bad = 0;
        for (int64_t i = 0; i < 20000; i++) {
            double v = t_read_f(buf + i * (int64_t)t_size(dt), dt);
            bad += !(v >= narrow[k].a && (v < narrow[k].b || narrow[k].a == narrow[k].b));
        }
        CHECK(bad == 0);
    }
    free(buf);
    free(again);
}

/* ------------------------------------------------------------ errors */

static tpu_op div_op(tpu_dtype dt, void *out, void *a, void *b, int64_t n) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_DIV;
    op.n_in = 2;
    op.out = (tpu_tensor){.data = out, .sizes = {n}, .strides = {1}, .ndim = 1, .dtype = dt};
    op.in[0] = op.out;
    op.in[0].data = a;
    op.in[1] = op.out;
    op.in[1].data = b;
    op.p.arith.rounding = TPU_ROUND_TRUNC;
    return op;
}

static void test_div_by_zero(void) {
    int32_t a[100], b[100], o[100];
    for (int i = 0; i < 100; i++) {
        a[i] = i - 50;
        b[i] = i == 90 ? 0 : 3;
    }
    tpu_op op = div_op(I32, o, a, b, 100);
    for (int w = 0; w < 4; w++) {
        tpu_kernels_set_reference(w < 2);
        tpu_clear_error();
        CHECK_OK(tpu_op_check(&op)); /* a zero divisor is a kernel-side error */
        CHECK_STATUS(run_shares(&op, w % 2 ? 3 : 1), TPU_ERR_DIV_BY_ZERO);
        CHECK(strcmp(tpu_last_error_message(), "integer division by zero") == 0);
    }
    /* In share 2 of 3 only the last share fails. */
    CHECK_OK(tpu_op_run(&op, 0, 3));
    CHECK_STATUS(tpu_op_run(&op, 2, 3), TPU_ERR_DIV_BY_ZERO);
    op.p.arith.rounding = TPU_ROUND_FLOOR;
    CHECK_STATUS(run_shares(&op, 1), TPU_ERR_DIV_BY_ZERO);
    /* A scalar zero divisor. */
    op.n_in = 1;
    op.p.arith.other = (tpu_scalar){0.0, 0};
    CHECK_STATUS(run_shares(&op, 1), TPU_ERR_DIV_BY_ZERO);
    /* Floats divide by zero the IEEE way. */
    float fa[3] = {1, -1, 0}, fb[3] = {0, 0, 0}, fo[3];
    tpu_op fop = div_op(F32, fo, fa, fb, 3);
    fop.p.arith.rounding = TPU_ROUND_NONE;
    CHECK_OK(run_shares(&fop, 1));
    CHECK(isinf(fo[0]) && fo[0] > 0 && isinf(fo[1]) && fo[1] < 0 && isnan(fo[2]));
}

/* A valid small ADD to mutate. */
static float g_a[6], g_b[6], g_o[6];
static tpu_op base_add(void) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_ADD;
    op.n_in = 2;
    tpu_tensor t = {.data = g_o, .sizes = {2, 3}, .strides = {3, 1}, .ndim = 2, .dtype = F32};
    op.out = t;
    t.data = g_a;
    op.in[0] = t;
    t.data = g_b;
    op.in[1] = t;
    op.p.arith.alpha = (tpu_scalar){1.0, 1};
    return op;
}

static tpu_op base_mm(tpu_op_code code, int64_t m, int64_t k, int64_t k2, int64_t n) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = code;
    op.n_in = code == TPU_OP_ADDMM ? 3 : 2;
    op.out = (tpu_tensor){g_o, {m, n}, {n, 1}, 2, F32};
    op.in[0] = (tpu_tensor){g_a, {m, k}, {k, 1}, 2, F32};
    op.in[1] = (tpu_tensor){g_b, {k2, n}, {n, 1}, 2, F32};
    op.in[2] = op.out;
    return op;
}

static void expect_reject(const tpu_op *op, tpu_status want, const char *part) {
    tpu_clear_error();
    CHECK_STATUS(tpu_op_check(op), want);
    CHECK_CONTAINS(tpu_last_error_message(), part);
}

static void test_check_rejects(void) {
    tpu_op op = base_add();
    CHECK_OK(tpu_op_check(&op));
    expect_reject(NULL, TPU_ERR_INVALID_ARG, "NULL");
    op.code = TPU_OP_COUNT;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "opcode");
    op = base_add();
    op.n_in = 3;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "add: n_in is 3");
    op = base_add();
    op.name = "aten::add.out";
    op.in[1].sizes[1] = 4;
    expect_reject(&op, TPU_ERR_SHAPE, "aten::add.out: in[1] has sizes [2, 4] but out has [2, 3]");
    op = base_add();
    op.out.ndim = 13;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "rank 13");
    op = base_add();
    op.in[0].sizes[0] = -2;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "negative size -2");
    op = base_add();
    op.in[0].data = NULL;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "data is NULL");
    op = base_add();
    op.in[1].dtype = (tpu_dtype)42;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "invalid dtype");
    op = base_add();
    op.out.strides[1] = 0;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "overlap itself");
    op = base_add();
    op.in[0].strides[0] = INT64_MAX / 2;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "strides too large");
    op = base_add();
    op.in[0].sizes[0] = INT64_MAX / 2;
    op.in[0].sizes[1] = 3;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "too many elements");
    op = base_add();
    op.code = TPU_OP_SUB;
    op.out.dtype = op.in[0].dtype = op.in[1].dtype = BOOL;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "bool");
    op = base_add();
    op.code = TPU_OP_DIV;
    op.out.dtype = I32;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "int32");
    op.p.arith.rounding = (tpu_rounding)9;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "rounding");
    /* Zero elements need no data. */
    op = base_add();
    op.out.sizes[0] = op.in[0].sizes[0] = op.in[1].sizes[0] = 0;
    op.out.data = op.in[0].data = op.in[1].data = NULL;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(run_shares(&op, 3));
    /* Reductions. */
    op = base_add();
    op.code = TPU_OP_SUM;
    op.n_in = 1;
    op.p.reduce.mask = 4;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "beyond rank 2");
    op.p.reduce.mask = 2;
    expect_reject(&op, TPU_ERR_SHAPE, "mask 0x2");
    op.out.sizes[1] = 1;
    CHECK_OK(tpu_op_check(&op));
    op.code = TPU_OP_MEAN;
    op.out.dtype = I64;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "mean");
    /* Matrix products. */
    op = base_mm(TPU_OP_MM, 3, 4, 5, 2);
    expect_reject(&op, TPU_ERR_SHAPE, "mm: in[0] is 3x4 but in[1] is 5x2 (inner sizes differ)");
    op = base_mm(TPU_OP_MM, 1, 2, 2, 3);
    CHECK_OK(tpu_op_check(&op));
    op.out.sizes[1] = 2;
    expect_reject(&op, TPU_ERR_SHAPE, "out is 1x2");
    op = base_mm(TPU_OP_MM, 1, 2, 2, 3);
    op.in[1].dtype = F16;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "share a dtype");
    op = base_mm(TPU_OP_MM, 1, 2, 2, 3);
    op.out.dtype = op.in[0].dtype = op.in[1].dtype = I32;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "int32");
    op = base_mm(TPU_OP_MM, 1, 2, 2, 3);
    op.in[0].ndim = 3;
    op.in[0].sizes[2] = 1;
    expect_reject(&op, TPU_ERR_SHAPE, "2-d");
    op = base_mm(TPU_OP_MM, 1, 2, 2, 3);
    op.p.mm.precision = (tpu_precision)7;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "precision");
    op = base_mm(TPU_OP_ADDMM, 1, 2, 2, 3);
    CHECK_OK(tpu_op_check(&op));
    op.in[2].sizes[0] = 2;
    expect_reject(&op, TPU_ERR_SHAPE, "in[2] is 2x3");
    /* Random. */
    float r[4];
    op = random_op(TPU_OP_UNIFORM, I32, r, 4, 0, 0, 0, 1);
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "uniform");
    op = random_op(TPU_OP_UNIFORM, F32, r, 4, 0, 0, 2, 1);
    expect_reject(&op, TPU_ERR_INVALID_ARG, "[2, 1)");
    op = random_op(TPU_OP_NORMAL, F32, r, 4, 0, 0, 0, -1);
    expect_reject(&op, TPU_ERR_INVALID_ARG, "std -1");
    op = random_op(TPU_OP_UNIFORM, F32, r, 4, 0, 0, 0, INFINITY);
    expect_reject(&op, TPU_ERR_INVALID_ARG, "finite");
    /* tpu_op_run's own guards. */
    op = base_add();
    CHECK_STATUS(tpu_op_run(&op, 3, 3), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_op_run(&op, 0, 0), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_op_run(NULL, 0, 1), TPU_ERR_INVALID_ARG);
    op.code = (tpu_op_code)-1;
    CHECK_STATUS(tpu_op_run(&op, 0, 1), TPU_ERR_INVALID_ARG);
}

static void test_max_threads(void) {
    tpu_op op = base_add();
    CHECK(tpu_op_max_threads(&op) == 1);
    CHECK(tpu_op_max_threads(NULL) == 1);
    op.out.sizes[0] = op.in[0].sizes[0] = op.in[1].sizes[0] = 1 << 20;
    CHECK(tpu_op_max_threads(&op) > 1);
    op.code = TPU_OP_SUM;
    op.n_in = 1;
    op.p.reduce.mask = 3;
    op.out.sizes[0] = op.out.sizes[1] = 1;
    CHECK(tpu_op_max_threads(&op) == 1); /* one output: one thread */
    op = base_mm(TPU_OP_MM, 16, 16, 16, 16);
    CHECK(tpu_op_max_threads(&op) == 1);
    op = base_mm(TPU_OP_MM, 1024, 1024, 1024, 1024);
    CHECK(tpu_op_max_threads(&op) > 1);
}

static void test_extra(void) {
    test_dtype_basics();
    test_f16_exhaustive();
    test_f16_rounding();
    test_bf16_rounding();
    test_philox_kat();
    test_random_stats();
    test_div_by_zero();
    test_check_rejects();
    test_max_threads();
}

int main(void) {
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++)
        run_row(&k_rows[i]);
    test_extra();
    tpu_kernels_set_reference(false);
    return check_report();
}
