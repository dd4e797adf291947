/* Kernel tests: one table of (op, sizes, dtypes, layout, tolerance) rows,
 * each checked and run with nth = 1 and nth = 3, in reference and fast
 * mode, against a plain loop written here (logical index -> offset by
 * division, own conversions; the shared numerics are in kernel_test.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gemm.h"
#include "kernel_test.h"
#include "matmul.h"

/* ------------------------------------------------------------ tensors */

/* L_BCAST: dim 0 has stride 0 (a row broadcast down the rows); L_COLB:
 * the last dim has stride 0 (a column broadcast along each row).
 * L_ODD: row-major, but data 1 byte past an aligned address (host
 * buffers such as torch.frombuffer with an odd offset). L_WEIGHT, for
 * matrix products: A row-major, B column-major (a Linear's weight). */
enum { L_CONTIG, L_TRANS, L_NEG, L_PAD, L_BCAST, L_ODD, L_COLB, L_WEIGHT };
/* S_TINY: bf16 values whose products fall around FLT_MIN (exponents -70
 * to -60, 8-bit significands, 1 in 32 subnormal), for the flushing
 * chains of matmul.h; their partial sums stay exact in double. */
enum { S_NONE, S_SPECIALS, S_NAN_BIAS, S_INT_EDGE, S_TINY };

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
    if (special == S_TINY) {
        static const double subnormals[] = {0x1p-128, -0x1p-127, 0x3p-130, -0x1p-133};
        double m = 1.0 + (double)(t_rand() % 128) / 128.0;
        v = ldexp(t_rand() % 2 ? -m : m, (int)(t_rand() % 11) - 70);
        if (t_rand() % 32 == 0)
            v = subnormals[t_rand() % 4];
    }
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
        if (ndim > 1) /* a 1-d tensor's one stride is negated once */
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
    b->t.storage = b->alloc;
    b->t.storage_nbytes = (int64_t)b->bytes;
    memcpy(b->pristine, b->alloc, b->bytes);
}

static void tb_free(tbuf *b) {
    free(b->alloc);
    free(b->pristine);
}

/* ---------------------------------------------------------- the table */

typedef struct {
    const char *label;
    t_kind op;
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

static const krow k_rows[] = {
    /* element-wise, f32 fast-path shapes (8-lane body and tail) */
    {"add f32", T_ADD, 2, {37, 53}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add f32 alpha", T_ADD, 2, {301, 129}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 2.7, 0, 0, 0, 0},
    {"sub f32 alpha", T_SUB, 3, {5, 7, 9}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, -0.3, 0, 0, 0, 0},
    {"mul f32 trans", T_MUL, 3, {5, 7, 9}, F32, {F32, F32}, 2, L_TRANS, L_TRANS, 0, 1, 0, 0, 0, 0},
    {"div f32", T_DIV, 2, {19, 23}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_NONE, S_SPECIALS, 0},
    {"div f32 trunc", T_DIV, 2, {19, 23}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_TRUNC, 0, 0},
    {"div f32 floor", T_DIV, 2, {19, 23}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, S_SPECIALS, 0},
    {"add f32 scalar", T_ADD, 2, {11, 13}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 1, 0.1, 0, 0, 0},
    {"sub f32 1-d bcast", T_SUB, 1, {37}, F32, {F32, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add f32 bcast", T_ADD, 3, {4, 6, 5}, F32, {F32, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add f32 neg", T_ADD, 3, {4, 6, 5}, F32, {F32, F32}, 2, L_NEG, L_NEG, 0, 1, 0, 0, 0, 0},
    {"mul f32 pad", T_MUL, 2, {9, 17}, F32, {F32, F32}, 2, L_PAD, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add f32 inplace", T_ADD, 2, {33, 7}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 1, 0.5, 0, 0, 0, 0},
    {"div f32 inplace neg", T_DIV, 2, {6, 7}, F32, {F32, F32}, 2, L_NEG, L_NEG, 1, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"add f32 scalar 0d", T_ADD, 0, {0}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add f32 empty", T_ADD, 2, {0, 5}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add bf16", T_ADD, 2, {17, 19}, BF16, {BF16, F32}, 2, L_CONTIG, L_TRANS, 0, 1, 0, 0, 0, 0},
    {"mul f16", T_MUL, 2, {17, 19}, F16, {F16, F16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"div f16 floor", T_DIV, 2, {17, 19}, F16, {F16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"add f64 alpha", T_ADD, 2, {17, 19}, F64, {F64, F64}, 2, L_TRANS, L_CONTIG, 0, 1.3, 0, 0, 0, 0},
    {"div f64 floor", T_DIV, 2, {17, 19}, F64, {F64, F32}, 2, L_CONTIG, L_NEG, 0, 1, 0, TPU_ROUND_FLOOR, S_SPECIALS, 0},
    {"add f32 = i32 + f32", T_ADD, 2, {9, 10}, F32, {I32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"mul f64 = f16 * i64", T_MUL, 2, {9, 10}, F64, {F16, I64}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"add i32 alpha", T_ADD, 2, {13, 11}, I32, {I32, I32}, 2, L_CONTIG, L_CONTIG, 0, 3, 0, 0, 0, 0},
    {"sub i64", T_SUB, 2, {13, 11}, I64, {I64, I64}, 2, L_TRANS, L_NEG, 0, -7, 0, 0, 0, 0},
    {"mul i8", T_MUL, 2, {13, 11}, I8, {I8, I8}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"mul u8 scalar", T_MUL, 1, {100}, U8, {U8}, 1, L_CONTIG, L_CONTIG, 0, 1, 3, 0, 0, 0},
    {"div i32 trunc", T_DIV, 2, {13, 11}, I32, {I32, I16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_TRUNC, 0, 0},
    {"div i64 floor", T_DIV, 2, {13, 11}, I64, {I64, I8}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"div i64 edges", T_DIV, 1, {8}, I64, {I64, I64}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, S_INT_EDGE, 0},
    {"div i64 edges trunc", T_DIV, 1, {8}, I64, {I64, I64}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_TRUNC, S_INT_EDGE, 0},
    {"div u8 floor", T_DIV, 2, {13, 11}, U8, {U8, U8}, 2, L_PAD, L_CONTIG, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"add i16 = f32 + i16", T_ADD, 2, {8, 9}, I16, {F32, I16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"add bool", T_ADD, 2, {8, 9}, BOOL, {BOOL, BOOL}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, 0, 0},
    {"mul bool = bool * f32", T_MUL, 2, {8, 9}, BOOL, {BOOL, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"add f32 misaligned", T_ADD, 2, {33, 9}, F32, {F32, F32}, 2, L_ODD, L_ODD, 0, 1, 0, 0, 0, 0},
    /* element-wise row path (row / column broadcast) and f16/bf16 staging */
    {"mul f32 row bcast", T_MUL, 2, {37, 53}, F32, {F32, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, S_SPECIALS, 0},
    {"sub f32 col bcast alpha", T_SUB, 3, {3, 37, 29}, F32, {F32, F32}, 2, L_CONTIG, L_COLB, 0, 1.5, 0, 0, 0, 0},
    {"div f32 floor row bcast", T_DIV, 2, {9, 21}, F32, {F32, F32}, 2, L_PAD, L_BCAST, 0, 1, 0, TPU_ROUND_FLOOR, 0, 0},
    {"mul f32 row bcast trans out", T_MUL, 2, {9, 21}, F32, {F32, F32}, 2, L_TRANS, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add bf16 inplace", T_ADD, 2, {33, 77}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 1, 1, 0, 0, S_SPECIALS, 0},
    {"add bf16 inplace alpha", T_ADD, 1, {1029}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 1, 0.3, 0, 0, 0, 0},
    {"mul bf16 specials", T_MUL, 2, {17, 300}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, 0, S_SPECIALS, 0},
    {"div bf16 = f32 / f32", T_DIV, 2, {17, 31}, BF16, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_ROUND_NONE, S_SPECIALS, 0},
    {"add f32 = bf16 + f16", T_ADD, 2, {17, 31}, F32, {BF16, F16}, 2, L_CONTIG, L_CONTIG, 0, 2, 0, 0, S_SPECIALS, 0},
    {"mul bf16 row bcast f32", T_MUL, 2, {13, 267}, BF16, {BF16, F32}, 2, L_CONTIG, L_BCAST, 0, 1, 0, 0, 0, 0},
    {"add f16 col bcast", T_ADD, 2, {13, 267}, F16, {F16, F16}, 2, L_CONTIG, L_COLB, 0, 1, 0, 0, S_SPECIALS, 0},
    {"sub bf16 pad", T_SUB, 2, {13, 45}, BF16, {BF16, BF16}, 2, L_PAD, L_PAD, 0, 1, 0, 0, 0, 0},
    {"mul bf16 scalar", T_MUL, 2, {13, 45}, BF16, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 1, 0.3, 0, 0, 0},
    {"add bf16 trans", T_ADD, 2, {13, 45}, BF16, {BF16, BF16}, 2, L_TRANS, L_TRANS, 0, 1, 0, 0, 0, 0},
    {"add bf16 misaligned", T_ADD, 2, {13, 45}, BF16, {BF16, BF16}, 2, L_ODD, L_ODD, 0, 1, 0, 0, 0, 0},
    {"div f16 trunc neg", T_DIV, 2, {13, 45}, F16, {F16, F16}, 2, L_NEG, L_NEG, 0, 1, 0, TPU_ROUND_TRUNC, 0, 0},
    /* copy and fill */
    {"copy f32", T_COPY, 2, {300, 129}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy f32 misaligned", T_COPY, 2, {30, 9}, F32, {F32}, 1, L_CONTIG, L_ODD, 0, 0, 0, 0, 0, 0},
    {"copy f64 <- f32 misaligned", T_COPY, 2, {30, 9}, F64, {F32}, 1, L_ODD, L_ODD, 0, 0, 0, 0, 0, 0},
    {"copy f32 transpose", T_COPY, 3, {7, 9, 11}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    /* host <-> device transfers run the same kernels as on-chip copies */
    {"copy_h2d bf16 <- f32 transpose", T_COPY_H2D, 2, {33, 17}, BF16, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0,
     S_SPECIALS, 0},
    {"copy_d2h i64 <- i32 padded", T_COPY_D2H, 2, {9, 21}, I64, {I32}, 1, L_PAD, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy f16 neg", T_COPY, 2, {7, 9}, F16, {F16}, 1, L_NEG, L_PAD, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- f16", T_COPY, 2, {7, 9}, F32, {F16}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy bf16 <- f32", T_COPY, 2, {7, 9}, BF16, {F32}, 1, L_PAD, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f16 <- f64", T_COPY, 2, {7, 9}, F16, {F64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f64 <- f32 neg", T_COPY, 2, {7, 9}, F64, {F32}, 1, L_NEG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy i32 <- f32", T_COPY, 2, {7, 9}, I32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i64 <- f32", T_COPY, 2, {7, 9}, I64, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy u8 <- f64", T_COPY, 2, {7, 9}, U8, {F64}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i8 <- i64", T_COPY, 2, {7, 9}, I8, {I64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy bool <- bf16", T_COPY, 2, {7, 9}, BOOL, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- bool", T_COPY, 2, {7, 9}, F32, {BOOL}, 1, L_TRANS, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy f16 <- bf16", T_COPY, 2, {7, 9}, F16, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i64 <- i16 bcast", T_COPY, 2, {7, 9}, I64, {I16}, 1, L_CONTIG, L_BCAST, 0, 0, 0, 0, 0, 0},
    /* float -> integer out of range: through int32 for i32/i16/i8, int64 for i64/u8 */
    {"copy i8 <- f32", T_COPY, 2, {37, 53}, I8, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i16 <- bf16", T_COPY, 2, {7, 9}, I16, {BF16}, 1, L_PAD, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy u8 <- f32", T_COPY, 2, {37, 53}, U8, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i32 <- f64 neg", T_COPY, 2, {7, 9}, I32, {F64}, 1, L_NEG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i64 <- f16", T_COPY, 2, {7, 9}, I64, {F16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy i8 <- f64", T_COPY, 2, {7, 9}, I8, {F64}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    /* every pair has its own loop (convert_run_typed): a few more of them flat */
    {"copy f32 <- i64 flat", T_COPY, 2, {37, 53}, F32, {I64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy bool <- i64 flat", T_COPY, 2, {37, 53}, BOOL, {I64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy i32 <- bool flat", T_COPY, 2, {37, 53}, I32, {BOOL}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy bf16 <- u8 flat", T_COPY, 2, {37, 53}, BF16, {U8}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy f64 <- i8 flat", T_COPY, 2, {37, 53}, F64, {I8}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 0},
    {"copy i64 <- f32 flat", T_COPY, 2, {37, 53}, I64, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy bool <- f32 flat", T_COPY, 2, {37, 53}, BOOL, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    /* copy fast paths: blocked transposes (8x8 register blocks and ragged
     * edges), flat and row-run conversions */
    {"copy f32 transpose 2-d", T_COPY, 2, {67, 45}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 transpose small", T_COPY, 2, {3, 5}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy f32 transpose pad out", T_COPY, 2, {40, 24}, F32, {F32}, 1, L_PAD, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy f64 transpose", T_COPY, 2, {37, 19}, F64, {F64}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy bf16 transpose", T_COPY, 2, {37, 19}, BF16, {BF16}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy u8 transpose 3-d", T_COPY, 3, {5, 17, 19}, U8, {U8}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 0},
    {"copy bf16 <- f32 flat", T_COPY, 2, {37, 53}, BF16, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- bf16 flat", T_COPY, 2, {37, 53}, F32, {BF16}, 1, L_TRANS, L_TRANS, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f16 <- f32 flat", T_COPY, 2, {37, 53}, F16, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy bf16 <- f32 misaligned", T_COPY, 2, {37, 53}, BF16, {F32}, 1, L_CONTIG, L_ODD, 0, 0, 0, 0, S_SPECIALS, 0},
    {"copy f32 <- bf16 pad", T_COPY, 2, {37, 53}, F32, {BF16}, 1, L_CONTIG, L_PAD, 0, 0, 0, 0, 0, 0},
    {"fill f32", T_FILL, 2, {70, 9}, F32, {F32}, 0, L_CONTIG, L_CONTIG, 0, 0.1, 0, 0, 0, 0},
    {"fill bf16 neg", T_FILL, 2, {7, 9}, BF16, {F32}, 0, L_NEG, L_CONTIG, 0, 0.1, 0, 0, 0, 0},
    {"fill f16 pad", T_FILL, 2, {7, 9}, F16, {F32}, 0, L_PAD, L_CONTIG, 0, 1e6, 0, 0, 0, 0},
    {"fill i8 wraps", T_FILL, 2, {7, 9}, I8, {F32}, 0, L_TRANS, L_CONTIG, 0, 300, 0, 0, 0, 0},
    {"fill u8", T_FILL, 1, {5}, U8, {F32}, 0, L_CONTIG, L_CONTIG, 0, -1, 0, 0, 0, 0},
    {"fill bool", T_FILL, 1, {5}, BOOL, {F32}, 0, L_CONTIG, L_CONTIG, 0, 2, 0, 0, 0, 0},
    {"fill f64", T_FILL, 0, {0}, F64, {F32}, 0, L_CONTIG, L_CONTIG, 0, -2.5, 0, 0, 0, 0},
    /* reductions (param = mask) */
    {"sum f32 last", T_SUM, 3, {3, 4, 37}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 4, 0, 1e-6},
    {"sum f32 last two", T_SUM, 3, {3, 4, 37}, F32, {F32}, 1, L_NEG, L_CONTIG, 0, 0, 0, 6, 0, 1e-6},
    {"sum f32 first", T_SUM, 3, {30, 4, 7}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"sum f32 first two", T_SUM, 3, {30, 4, 7}, F64, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 1e-12},
    {"sum f32 middle", T_SUM, 3, {3, 40, 7}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    {"sum f32 all", T_SUM, 2, {70, 1000}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 1e-6},
    {"sum f32 misaligned", T_SUM, 2, {30, 9}, F32, {F32}, 1, L_ODD, L_ODD, 0, 0, 0, 2, 0, 1e-6},
    {"sum f32 transposed", T_SUM, 3, {3, 4, 37}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 5, 0, 1e-6},
    {"sum f16 -> f32", T_SUM, 2, {9, 33}, F32, {F16}, 1, L_CONTIG, L_PAD, 0, 0, 0, 2, 0, 1e-6},
    {"sum bf16 -> bf16", T_SUM, 2, {9, 33}, BF16, {BF16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"sum i32 -> i64", T_SUM, 2, {9, 33}, I64, {I32}, 1, L_CONTIG, L_NEG, 0, 0, 0, 2, 0, 0},
    {"sum i64 wraps", T_SUM, 2, {9, 33}, I64, {I64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 0},
    {"sum bool -> i64", T_SUM, 2, {9, 33}, I64, {BOOL}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 0},
    {"sum u8 -> i64 last", T_SUM, 2, {9, 33}, I64, {U8}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 0},
    {"sum i8 -> i64 all", T_SUM, 2, {9, 33}, I64, {I8}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 0},
    {"sum i16 -> i64 last", T_SUM, 2, {9, 37}, I64, {I16}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 0},
    {"sum i32 -> i64 all", T_SUM, 2, {9, 33}, I64, {I32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 3, 0, 0},
    {"sum f32 -> i32", T_SUM, 2, {9, 33}, I32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 0},
    {"sum f64 -> i32 specials", T_SUM, 2, {9, 33}, I32, {F64}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, S_SPECIALS, 0},
    {"sum none", T_SUM, 2, {9, 33}, F32, {F32}, 1, L_CONTIG, L_TRANS, 0, 0, 0, 0, 0, 1e-6},
    {"sum empty dim", T_SUM, 2, {4, 0}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    {"sum 0-d", T_SUM, 0, {0}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 0, 0, 1e-6},
    {"mean f32 last", T_MEAN, 2, {9, 70}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    {"sum f32 first wide", T_SUM, 2, {13, 1100}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"mean f32 first three", T_MEAN, 2, {3, 21}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"mean f32 first", T_MEAN, 2, {70, 9}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 1, 0, 1e-6},
    {"mean i32 -> f64", T_MEAN, 3, {3, 4, 5}, F64, {I32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 5, 0, 1e-12},
    {"mean empty dim", T_MEAN, 2, {4, 0}, F32, {F32}, 1, L_CONTIG, L_CONTIG, 0, 0, 0, 2, 0, 1e-6},
    /* matrix products: sizes {M, K, N}, param = precision */
    {"mm f32", T_MM, 2, {37, 29, 41}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 trans", T_MM, 2, {37, 29, 41}, F32, {F32, F32}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 neg", T_MM, 2, {13, 300, 9}, F32, {F32, F32}, 2, L_NEG, L_NEG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm f32 blocks", T_MM, 2, {150, 270, 40}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm f32 wide", T_MM, 2, {7, 20, 2100}, F32, {F32, F32}, 2, L_TRANS, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 misaligned", T_MM, 2, {9, 17, 20}, F32, {F32, F32}, 2, L_ODD, L_ODD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f32 high", T_MM, 2, {20, 100, 30}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGH, 0, 2e-4},
    {"mm f32 medium", T_MM, 2, {20, 100, 30}, F32, {F32, F32}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_MEDIUM, 0, 2e-2},
    {"mm f16", T_MM, 2, {20, 50, 30}, F16, {F16, F16}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_MEDIUM, 0, 1e-5},
    {"mm bf16", T_MM, 2, {20, 50, 30}, BF16, {BF16, BF16}, 2, L_PAD, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 contig", T_MM, 2, {37, 29, 41}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 blocks", T_MM, 2, {150, 270, 40}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm f16 contig pad", T_MM, 2, {19, 33, 21}, F16, {F16, F16}, 2, L_PAD, L_PAD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 misaligned", T_MM, 2, {9, 17, 20}, BF16, {BF16, BF16}, 2, L_ODD, L_ODD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm f64", T_MM, 2, {20, 50, 30}, F64, {F64, F64}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-14},
    {"mm k=0", T_MM, 2, {5, 0, 6}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-6},
    {"mm m=0", T_MM, 2, {0, 4, 6}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-6},
    /* flushing chains (matmul.h) around FLT_MIN, exact */
    {"mm bf16 tiny", T_MM, 2, {37, 61, 45}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"mm bf16 tiny weight", T_MM, 2, {9, 33, 70}, BF16, {BF16, BF16}, 2, L_CONTIG, L_TRANS, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"mm f32 medium tiny", T_MM, 2, {20, 40, 33}, F32, {F32, F32}, 2, L_TRANS, L_CONTIG, 0, 1, 0, TPU_PRECISION_MEDIUM, S_TINY, 0},
    /* skinny products (gemv.c): M <= 8, both layouts of B, k and column
     * tails, the vector blocks of 16 and 8 and the column blocks of 1024
     * (M <= 4) and 512 (M > 4) */
    {"mm f32 weight", T_MM, 2, {40, 300, 100}, F32, {F32, F32}, 2, L_CONTIG, L_WEIGHT, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 4e-5},
    {"mm bf16 weight", T_MM, 2, {40, 301, 100}, BF16, {BF16, BF16}, 2, L_CONTIG, L_WEIGHT, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"mm bf16 weight blocks", T_MM, 2, {9, 1100, 70}, BF16, {BF16, BF16}, 2, L_CONTIG, L_WEIGHT, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv f32 1 row", T_MM, 2, {1, 37, 45}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 1 weight", T_MM, 2, {1, 37, 45}, F32, {F32, F32}, 2, L_CONTIG, L_WEIGHT, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 2 weight", T_MM, 2, {2, 64, 40}, F32, {F32, F32}, 2, L_CONTIG, L_WEIGHT, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 3 trans", T_MM, 2, {3, 19, 33}, F32, {F32, F32}, 2, L_CONTIG, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 4 wide", T_MM, 2, {4, 7, 2100}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 4 weight wide", T_MM, 2, {4, 33, 2100}, F32, {F32, F32}, 2, L_PAD, L_WEIGHT, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 5 rows", T_MM, 2, {5, 17, 40}, F32, {F32, F32}, 2, L_CONTIG, L_WEIGHT, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 6 wide", T_MM, 2, {6, 9, 1300}, F32, {F32, F32}, 2, L_CONTIG, L_CONTIG, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 7 weight", T_MM, 2, {7, 45, 70}, F32, {F32, F32}, 2, L_PAD, L_WEIGHT, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 8 trans", T_MM, 2, {8, 33, 600}, F32, {F32, F32}, 2, L_TRANS, L_TRANS, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv f32 misaligned", T_MM, 2, {2, 17, 40}, F32, {F32, F32}, 2, L_CONTIG, L_ODD, 0, 0, 0, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv bf16 1 row", T_MM, 2, {1, 61, 45}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 1 weight", T_MM, 2, {1, 61, 45}, BF16, {BF16, BF16}, 2, L_CONTIG, L_WEIGHT, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 3 weight", T_MM, 2, {3, 300, 70}, BF16, {BF16, BF16}, 2, L_TRANS, L_WEIGHT, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 1 row wide", T_MM, 2, {1, 61, 1330}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 2 rows wide", T_MM, 2, {2, 40, 700}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 3 rows", T_MM, 2, {3, 1, 200}, BF16, {BF16, BF16}, 2, L_PAD, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 6 rows long k", T_MM, 2, {6, 601, 100}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 1 row long k", T_MM, 2, {1, 600, 530}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 5 rows", T_MM, 2, {5, 23, 1100}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 8 rows", T_MM, 2, {8, 35, 530}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 8 weight", T_MM, 2, {8, 300, 70}, BF16, {BF16, BF16}, 2, L_TRANS, L_WEIGHT, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv bf16 4 rows", T_MM, 2, {4, 35, 1100}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"gemv f32 medium", T_MM, 2, {1, 40, 33}, F32, {F32, F32}, 2, L_CONTIG, L_WEIGHT, 0, 1, 0, TPU_PRECISION_MEDIUM, S_TINY, 0},
    {"gemv addmm f32", T_ADDMM, 2, {2, 31, 50}, F32, {F32, F32, F32}, 3, L_CONTIG, L_WEIGHT, 0, 0.5, 2, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv addmm f32 8", T_ADDMM, 2, {8, 31, 50}, F32, {F32, F32, F32}, 3, L_CONTIG, L_WEIGHT, 0, 0.5, 2, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"gemv addmm bf16 bcast", T_ADDMM, 2, {1, 31, 50}, BF16, {BF16, BF16, BF16}, 3, L_CONTIG, L_BCAST, 0, 1, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"mm bf16 tiny blocks", T_MM, 2, {150, 600, 40}, BF16, {BF16, BF16}, 2, L_CONTIG, L_CONTIG, 0, 1, 0, TPU_PRECISION_HIGHEST, S_TINY, 0},
    {"addmm f32", T_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_CONTIG, 0, 0.5, 2, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f32 bcast bias", T_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_BCAST, 0, 1, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm beta 0 nan bias", T_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_CONTIG, 0, 1.5, 0, TPU_PRECISION_HIGH, S_NAN_BIAS, 2e-4},
    {"addmm bf16", T_ADDMM, 2, {23, 31, 19}, BF16, {BF16, BF16, BF16}, 3, L_TRANS, L_BCAST, 0, 1, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    /* ADDMM's row finish (addmm_store_rows): runs longer than its 512,
     * a column-broadcast bias, f16/bf16 out and bias, and the forms it
     * leaves to the element loop (alpha 0, misaligned out) */
    {"addmm f32 wide", T_ADDMM, 2, {20, 33, 1100}, F32, {F32, F32, F32}, 3, L_CONTIG, L_CONTIG, 0, 0.5, 2, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f32 col bias", T_ADDMM, 2, {20, 17, 40}, F32, {F32, F32, F32}, 3, L_CONTIG, L_COLB, 0, -1.5, 0.25, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f16", T_ADDMM, 2, {23, 31, 600}, F16, {F16, F16, F16}, 3, L_CONTIG, L_CONTIG, 0, 1, 0.5, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm bf16 wide bias", T_ADDMM, 2, {23, 31, 600}, BF16, {BF16, BF16, BF16}, 3, L_CONTIG, L_CONTIG, 0, 2, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm bf16 col bias", T_ADDMM, 2, {23, 31, 40}, BF16, {BF16, BF16, BF16}, 3, L_CONTIG, L_COLB, 0, 1, 3, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm alpha 0", T_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_CONTIG, L_CONTIG, 0, 0, 1.5, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f32 misaligned out", T_ADDMM, 2, {23, 31, 19}, F32, {F32, F32, F32}, 3, L_ODD, L_CONTIG, 0, 1, 1, TPU_PRECISION_HIGHEST, 0, 1e-5},
    {"addmm f64 k=0", T_ADDMM, 2, {4, 0, 3}, F64, {F64, F64, F64}, 3, L_CONTIG, L_CONTIG, 0, 1, 3, TPU_PRECISION_HIGHEST, 0, 1e-14},
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

/* Reads element p of dtype dt as the integer compute value of an integer
 * output of dtype out: floats as PyTorch's CPU backend converts them on
 * x86 (through int32 for i32/i16/i8, INT32_MIN out of range; through
 * int64 otherwise, t_f2i), by range tests of its own. */
static int64_t t_read_i_as(const unsigned char *p, tpu_dtype dt, tpu_dtype out) {
    if (!t_is_float(dt))
        return t_read_i(p, dt);
    double v = t_read_f(p, dt);
    if (out == I32 || out == I16 || out == I8)
        return isnan(v) || v >= 2147483648.0 || v <= -2147483649.0 ? INT32_MIN
                                                                    : (int64_t)trunc(v);
    return t_f2i(v);
}

static void expect_binary(const krow *r, const tpu_op *op, int64_t e, expect *x) {
    const unsigned char *pa = t_at(&op->in[0], e);
    const unsigned char *pb = r->n_in == 2 ? t_at(&op->in[1], e) : NULL;
    tpu_dtype da = op->in[0].dtype, db = r->n_in == 2 ? op->in[1].dtype : F64;
    t_kind c = r->op;
    if (r->out == F64) {
        double a = t_read_f(pa, da), b = pb ? t_read_f(pb, db) : r->p1, al = r->p0, v;
        if (c == T_ADD || c == T_SUB)
            v = al == 1 ? (c == T_ADD ? a + b : a - b) : fma(c == T_ADD ? al : -al, b, a);
        else if (c == T_MUL)
            v = a * b;
        else
            v = r->param == TPU_ROUND_NONE ? a / b : r->param == TPU_ROUND_TRUNC ? trunc(a / b)
                                                                                : t_floor_div_f64(a, b);
        x->f = v;
    } else if (t_is_float(r->out)) {
        /* Inputs through the common dtype (out's, here), then f32. */
        float a = (float)t_quant(t_read_f32(pa, da), r->out);
        float b = (float)t_quant(pb ? t_read_f32(pb, db) : (float)r->p1, r->out), v;
        float al = (float)r->p0;
        if (c == T_ADD || c == T_SUB)
            v = al == 1 ? (c == T_ADD ? a + b : a - b) : fmaf(c == T_ADD ? al : -al, b, a);
        else if (c == T_MUL)
            v = a * b;
        else
            v = r->param == TPU_ROUND_NONE ? a / b : r->param == TPU_ROUND_TRUNC ? truncf(a / b)
                                                                                : t_floor_div_f32(a, b);
        x->f = t_quant(v, r->out);
    } else if (r->out == BOOL) {
        bool a = t_read_f(pa, da) != 0, b = pb ? t_read_f(pb, db) != 0 : r->p1 != 0;
        x->i = c == T_ADD ? (a || b) : (a && b);
    } else {
        int64_t a = t_read_i_as(pa, da, r->out);
        int64_t b = pb ? t_read_i_as(pb, db, r->out) : (int64_t)r->p1;
        uint64_t al = (uint64_t)(int64_t)r->p0, v;
        if (c == T_ADD)
            v = (uint64_t)a + al * (uint64_t)b;
        else if (c == T_SUB)
            v = (uint64_t)a - al * (uint64_t)b;
        else if (c == T_MUL)
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
        x->i = t_wrap(t_read_i_as(p, di, r->out), r->out);
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
            si += (uint64_t)t_read_i_as(p, in->dtype, r->out);
        }
    }
    if (t_is_float(r->out)) {
        if (r->op == T_MEAN) {
            s = cnt ? s / (double)cnt : NAN;
            mag = cnt ? mag / (double)cnt : 0;
        }
        x->f = t_quant(s, r->out);
        x->mag = mag;
    } else {
        x->i = t_wrap((int64_t)si, r->out);
    }
}

/* f32 x flushed as matmul.h's chains flush: zero of its sign when
 * subnormal. */
static double t_daz(double x) {
    return fabs(x) < 0x1p-126 ? copysign(0.0, x) : x;
}

/* matmul.h's flushing chain for bf16-valued operands, written from its
 * definition: the exact sum (exact in double for S_TINY data) rounded to
 * 24 bits with an unbounded exponent decides tininess; a tiny result is
 * zero of its sign, any other is the f32 rounding. */
static double t_chain_flush(const tpu_op *op, int64_t i, int64_t j) {
    double acc = 0.0;
    for (int64_t k = 0; k < op->in[0].sizes[1]; k++) {
        double a = t_daz(t_read_f(t_at2(&op->in[0], i, k), op->in[0].dtype));
        double b = t_daz(t_read_f(t_at2(&op->in[1], k, j), op->in[1].dtype));
        double exact = a * b + acc;
        double unbounded = t_round_fmt(exact, 23, -100000, 0x1.fffffep127);
        acc = fabs(unbounded) < 0x1p-126 ? copysign(0.0, exact)
                                          : t_round_fmt(exact, 23, -126, 0x1.fffffep127);
    }
    return acc;
}

static void expect_mm(const krow *r, const tpu_op *op, int64_t e, expect *x) {
    if (r->special == S_TINY) { /* MM only: the chain, then out's rounding */
        int64_t n = op->out.sizes[1];
        x->f = t_quant(t_chain_flush(op, e / n, e % n), r->out);
        x->mag = 0;
        return;
    }
    int64_t n = op->out.sizes[1], i = e / n, j = e % n, k_size = op->in[0].sizes[1];
    double s = 0, mag = 0;
    for (int64_t k = 0; k < k_size; k++) {
        double p = t_read_f(t_at2(&op->in[0], i, k), r->out) *
                   t_read_f(t_at2(&op->in[1], k, j), r->out);
        s += p;
        mag += fabs(p);
    }
    if (r->op == T_ADDMM) {
        double bias = r->p1 != 0 ? r->p1 * t_read_f(t_at2(&op->in[2], i, j), r->out) : 0;
        s = r->p0 * s + bias;
        mag = fabs(r->p0) * mag + fabs(bias);
    }
    x->f = t_quant(s, r->out);
    x->mag = mag;
}

/* -------------------------------------------------------- row runner */

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
    int n_bufs = r->op == T_FILL ? 0 : r->n_in;
    bool mm = r->op == T_MM || r->op == T_ADDMM;
    int64_t M = r->sizes[0], K = r->sizes[1], N = r->sizes[2];
    for (int i = 0; i < n_bufs; i++) {
        int layout = r->in_layout;
        if ((layout == L_BCAST || layout == L_COLB) && i == 0)
            layout = L_CONTIG; /* BCAST, COLB apply to in[1] (and a bias) */
        if (mm && i < 2 && layout == L_BCAST)
            layout = L_CONTIG;
        if (layout == L_WEIGHT)
            layout = i == 1 ? L_TRANS : L_CONTIG;
        int64_t shape[4];
        memcpy(shape, r->sizes, sizeof shape);
        int ndim = r->ndim;
        if (mm) {
            shape[0] = i == 1 ? K : M;
            shape[1] = i == 0 ? K : N;
        }
        if (r->op == T_SUM || r->op == T_MEAN || r->op == T_COPY)
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
    if (r->op == T_DIV && !t_is_float(r->out) && r->n_in == 2) {
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
    if (r->op == T_SUM || r->op == T_MEAN)
        for (int d = 0; d < r->ndim; d++)
            if ((r->param >> d) & 1)
                osz[d] = 1;
    if (r->inplace)
        out = in[0];
    else
        tb_make(&out, r->out, r->ndim, osz, r->out_layout, S_NONE);

    tpu_op op;
    memset(&op, 0, sizeof op);
    t_set_kind(&op, r->op);
    op.n_in = r->n_in;
    op.out = out.t;
    for (int i = 0; i < n_bufs; i++)
        op.in[i] = in[i].t;
    switch (r->op) {
    case T_FILL: op.p.fill.value = (tpu_scalar){r->p0, (int64_t)r->p0}; break;
    case T_SUM:
    case T_MEAN: op.p.reduce.mask = (uint32_t)r->param; break;
    case T_MM:
    case T_ADDMM:
        op.p.mm.alpha = r->p0;
        op.p.mm.beta = r->p1;
        op.p.mm.precision = (tpu_precision)r->param;
        break;
    default:
        op.p.ew.alpha = (tpu_scalar){r->p0, (int64_t)r->p0};
        op.p.ew.other = (tpu_scalar){r->p1, (int64_t)r->p1};
        op.p.ew.rounding = (tpu_rounding)r->param;
        op.p.ew.common = r->out; /* the rows compute in their out dtype */
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
        case T_COPY:
        case T_COPY_H2D:
        case T_COPY_D2H: expect_copy(r, &op, e, &want[e]); break;
        case T_FILL: expect_fill(r, &want[e]); break;
        case T_SUM:
        case T_MEAN: expect_reduce(r, &op, e, &want[e]); break;
        case T_MM:
        case T_ADDMM: expect_mm(r, &op, e, &want[e]); break;
        default: expect_binary(r, &op, e, &want[e]); break;
        }
    }

    size_t es = t_size(r->out);
    /* Reference, fast, and fast with the ISA capped at portable C and at
     * AVX2 (the f32 kernels under MXCSR for flushing chains). */
    enum { WAYS = 6 };
    unsigned char *runs[WAYS];
    static const struct {
        bool ref;
        tpu_isa isa;
        int nth;
    } ways[WAYS] = {{true, TPU_ISA_COUNT - 1, 1},  {true, TPU_ISA_COUNT - 1, 3},
                    {false, TPU_ISA_COUNT - 1, 1}, {false, TPU_ISA_COUNT - 1, 3},
                    {false, TPU_ISA_PORTABLE, 3},  {false, TPU_ISA_AVX2, 3}};
    for (int w = 0; w < WAYS; w++) {
        for (int i = 0; i < n_bufs; i++)
            memcpy(in[i].alloc, in[i].pristine, in[i].bytes);
        memcpy(out.alloc, out.pristine, out.bytes);
        tpu_kernels_set_reference(ways[w].ref);
        tpu_kernels_set_isa(ways[w].isa);
        CHECK_OK(run_shares(&op, ways[w].nth));
        tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
        runs[w] = malloc((size_t)(n ? n : 1) * es);
        int64_t bad = 0;
        for (int64_t e = 0; e < n; e++) {
            memcpy(runs[w] + e * (int64_t)es, t_at(&op.out, e), es);
            if (!values_match(r, &want[e], t_at(&op.out, e)) && bad++ < 3)
                fprintf(stderr, "    %s [%s nth=%d] element %lld: got %.9g / %lld, want %.9g / %lld\n",
                        r->label, ways[w].ref ? "ref" : tpu_isa_name(ways[w].isa),
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
    CHECK(memcmp(runs[3], runs[5], nbytes) == 0);
    if (r->op != T_SUM && r->op != T_MEAN) {
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

/* The matmul paths a hand-built record runs on: the reference, then the
 * fast kernels at the best ISA, at AVX2 and portable. */
enum { MM_PATHS = 4 };
static void set_mm_path(int w) {
    static const tpu_isa isas[MM_PATHS] = {TPU_ISA_COUNT - 1, TPU_ISA_COUNT - 1, TPU_ISA_AVX2,
                                           TPU_ISA_PORTABLE};
    tpu_kernels_set_reference(w == 0);
    tpu_kernels_set_isa(isas[w]);
}

/* The edge of matmul.h's tininess rule, on every path and dtype that
 * flushes: FLT_MIN, plus a product of -0.75 ulp, is tiny after rounding
 * to 24 bits with an unbounded exponent (zero); plus -0.25 ulp it rounds
 * back to FLT_MIN; then a pair whose two steps must round one by one. */
static void test_mm_flush_edges(void) {
    static const float a[2][6] = {{1.0f, -1.5f * 0x1p-76f, 0, 0, 0, 0},
                                  {1.0f, -0x1p-77f, -1.0f, 1.0f, 0x1p-24f, 0x1p-24f}};
    static const float b[6] = {0x1p-126f, 0x1p-75f, 0.0f, 1.0f, 1.0f, 1.0f};
    static const float want[2] = {0.0f, 1.0f};
    for (int dt = 0; dt < 2; dt++) {
        tpu_dtype d = dt ? TPU_DTYPE_F32 : TPU_DTYPE_BF16;
        size_t es = t_size(d);
        unsigned char ab[2 * 6 * 4], bb[6 * 4], ob[2 * 4];
        for (int i = 0; i < 12; i++) {
            float v = a[i / 6][i % 6];
            if (d == TPU_DTYPE_BF16) {
                uint16_t h = tpu_f32_to_bf16(v);
                memcpy(ab + i * es, &h, 2);
            } else
                memcpy(ab + i * es, &v, 4);
        }
        for (int i = 0; i < 6; i++) {
            if (d == TPU_DTYPE_BF16) {
                uint16_t h = tpu_f32_to_bf16(b[i]);
                memcpy(bb + i * es, &h, 2);
            } else
                memcpy(bb + i * es, &b[i], 4);
        }
        tpu_op op;
        memset(&op, 0, sizeof op);
        t_set_kind(&op, T_MM);
        op.n_in = 2;
        op.p.mm.alpha = 1;
        op.p.mm.precision = d == TPU_DTYPE_F32 ? TPU_PRECISION_MEDIUM : TPU_PRECISION_HIGHEST;
        op.in[0] = (tpu_tensor){.data = ab, .sizes = {2, 6}, .strides = {6, 1}, .ndim = 2, .dtype = d,
                                .storage = ab, .storage_nbytes = (int64_t)sizeof ab};
        op.in[1] = (tpu_tensor){.data = bb, .sizes = {6, 1}, .strides = {1, 1}, .ndim = 2, .dtype = d,
                                .storage = bb, .storage_nbytes = (int64_t)sizeof bb};
        op.out = (tpu_tensor){.data = ob, .sizes = {2, 1}, .strides = {1, 1}, .ndim = 2, .dtype = d,
                              .storage = ob, .storage_nbytes = (int64_t)sizeof ob};
        CHECK_OK(tpu_op_check(&op));
        for (int w = 0; w < MM_PATHS; w++) {
            set_mm_path(w);
            CHECK_OK(run_shares(&op, 1));
            for (int i = 0; i < 2; i++) {
                double got = t_read_f(ob + i * es, d), oracle = t_chain_flush(&op, i, 0);
                CHECK(got == want[i] && !signbit(got) && oracle == want[i]);
            }
        }
        tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    }
    tpu_kernels_set_reference(false);
}

/* f32 at HIGH (three bf16 passes) with infinities, NaN and finite
 * values beyond bf16's range, on every path: the products must be what
 * exact arithmetic gives (inf, not the inf * 0 = NaN of a cross pass;
 * 3.4e38 * 0.5 finite, not bf16(3.4e38) = inf), against f64 sums. */
static void test_mm_high_extremes(void) {
    static const float a[5][2] = {{INFINITY, 1.0f}, {3.4e38f, 0.0f}, {-INFINITY, 2.0f},
                                  {NAN, 1.0f}, {-3.39e38f, 0.0f}};
    static const float b[2][2] = {{2.0f, 0.5f}, {3.0f, -1.0f}};
    float want[5][2];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 2; j++)
            want[i][j] = (float)((double)a[i][0] * b[0][j] + (double)a[i][1] * b[1][j]);
    float ob[5][2];
    tpu_op op;
    memset(&op, 0, sizeof op);
    t_set_kind(&op, T_MM);
    op.n_in = 2;
    op.p.mm.alpha = 1;
    op.p.mm.precision = TPU_PRECISION_HIGH;
    op.in[0] = (tpu_tensor){.data = (void *)a, .sizes = {5, 2}, .strides = {2, 1}, .ndim = 2,
                            .dtype = TPU_DTYPE_F32, .storage = (void *)a, .storage_nbytes = (int64_t)sizeof a};
    op.in[1] = (tpu_tensor){.data = (void *)b, .sizes = {2, 2}, .strides = {2, 1}, .ndim = 2,
                            .dtype = TPU_DTYPE_F32, .storage = (void *)b, .storage_nbytes = (int64_t)sizeof b};
    op.out = (tpu_tensor){.data = ob, .sizes = {5, 2}, .strides = {2, 1}, .ndim = 2,
                          .dtype = TPU_DTYPE_F32, .storage = ob, .storage_nbytes = (int64_t)sizeof ob};
    CHECK_OK(tpu_op_check(&op));
    for (int w = 0; w < MM_PATHS; w++) {
        set_mm_path(w);
        CHECK_OK(run_shares(&op, 1));
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 2; j++) {
                /* Three bf16 parts carry about 16 of x's 24 bits: finite
                 * results within 2^-14, non-finite ones exactly. */
                bool same = isnan(want[i][j])   ? isnan(ob[i][j])
                            : isinf(want[i][j]) ? ob[i][j] == want[i][j]
                                                : isfinite(ob[i][j]) &&
                                                      fabs((double)ob[i][j] - want[i][j]) <=
                                                          0x1p-14 * fabs((double)want[i][j]);
                CHECK(same);
                if (!same)
                    fprintf(stderr, "    mm HIGH [%d][%d] path %d: got %g, want %g\n", i, j, w,
                            (double)ob[i][j], (double)want[i][j]);
            }
    }
    tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    tpu_kernels_set_reference(false);
}

/* The bf16 pair kernel itself, on every CPU where it is exact, even
 * where the driver prefers the f32 kernel for speed (so the rows above
 * never reach it): random 8 x 32 tiles of bf16 values around FLT_MIN
 * and of ordinary size, over odd and long k, started fresh and
 * continued, against tpu_k_mm_fma_flush applied in order, bit for bit.
 * A pair puts k's bits in the high half (gemm.h). */
static void test_pair_kernel_direct(void) {
    const tpu_k_gemm_pair_config *pc = tpu_k_gemm_pair_config_exact();
    if (pc == NULL) {
        printf("  pair kernel: not on this CPU (no AVX512-BF16, or not exact)\n");
        return;
    }
    enum { KMAX = 70 };
    const int mr = pc->mr, nr = pc->nr;
    static const int ks[] = {1, 2, 7, 64, KMAX};
    for (int tiny = 0; tiny < 2; tiny++)
        for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
            int k = ks[q], kq = (k + 1) / 2;
            float a[8][KMAX + 1], b[KMAX + 1][32], c[8 * 32], want[8 * 32];
            uint32_t ap[(KMAX / 2 + 1) * 8], bp[(KMAX / 2 + 1) * 32];
            CHECK(mr == 8 && nr == 32);
            for (int i = 0; i < mr; i++)
                for (int t = 0; t <= k; t++)
                    a[i][t] = t == k ? -0.0f : tpu_bf16_to_f32(tpu_f32_to_bf16(
                        (float)ldexp(t_unit() * 2 - 1, tiny ? (int)(t_rand() % 12) - 69 : 0)));
            for (int t = 0; t <= k; t++)
                for (int j = 0; j < nr; j++)
                    b[t][j] = t == k ? 0.0f : tpu_bf16_to_f32(tpu_f32_to_bf16(
                        (float)ldexp(t_unit() * 2 - 1, tiny ? (int)(t_rand() % 12) - 59 : 0)));
            for (int t = 0; t < kq; t++) { /* an odd k's pad is (-0) * (+0) */
                for (int i = 0; i < mr; i++)
                    ap[t * mr + i] = (uint32_t)tpu_f32_to_bf16(a[i][2 * t]) << 16 |
                                     tpu_f32_to_bf16(a[i][2 * t + 1 < k ? 2 * t + 1 : k]);
                for (int j = 0; j < nr; j++)
                    bp[t * nr + j] = (uint32_t)tpu_f32_to_bf16(b[2 * t][j]) << 16 |
                                     tpu_f32_to_bf16(b[2 * t + 1 < k ? 2 * t + 1 : k][j]);
            }
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++) {
                    float acc = 0.0f;
                    for (int rep = 0; rep < 2; rep++) /* fresh, then continued */
                        for (int t = 0; t < k; t++)
                            acc = tpu_k_mm_fma_flush(a[i][t], b[t][j], acc);
                    want[i * nr + j] = acc;
                }
            pc->kernel(kq, ap, bp, c, nr, false);
            pc->kernel(kq, ap, bp, c, nr, true);
            int bad = 0;
            for (int e = 0; e < mr * nr; e++)
                bad += memcmp(&c[e], &want[e], sizeof c[e]) != 0;
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "    pair kernel: k=%d tiny=%d: %d outputs differ\n", k, tiny, bad);
        }
}

/* Claimed products (tpu_op_run_phase_claimed, tpu_op_run_blocks_claimed):
 * nth threads at once, each taking units from one counter, must leave the
 * reference kernel's bytes; through the blocks variant every element of
 * out is reported exactly once per run. Shapes cut along rows (with the B panel
 * kept packed where it fits), along columns (with the A panel), both ways
 * past a panel, and skinny ones whose units take the few-row kernel. */
typedef struct {
    const tpu_op *op;
    int ith, nth;
    int64_t *claims;
    const tpu_op_block_hook *hook;
    tpu_status st;
} claim_job;

static void put_f32_or_bf16(unsigned char *p, tpu_dtype d, double v) {
    float f = (float)v;
    if (d == BF16) {
        uint16_t h = tpu_f32_to_bf16(f);
        memcpy(p, &h, 2);
    } else {
        memcpy(p, &f, 4);
    }
}

static void *claim_run(void *p) {
    claim_job *j = p;
    j->st = j->hook ? tpu_op_run_blocks_claimed(j->op, j->ith, j->nth, j->hook, j->claims)
                    : tpu_op_run_phase_claimed(j->op, 0, j->ith, j->nth, j->claims);
    return NULL;
}

/* Runs op on nth threads at once (nth <= 4), each share claiming from
 * one counter, through the blocks variant when hook is given; checks
 * every share's status and returns the counter's final value. */
static int64_t run_claimed(const tpu_op *op, int nth, const tpu_op_block_hook *hook) {
    int64_t claims = 0;
    claim_job jobs[4];
    pthread_t tids[4];
    for (int i = 0; i < nth; i++) {
        jobs[i] = (claim_job){op, i, nth, &claims, hook, TPU_OK};
        CHECK(pthread_create(&tids[i], NULL, claim_run, &jobs[i]) == 0);
    }
    for (int i = 0; i < nth; i++) {
        pthread_join(tids[i], NULL);
        CHECK_OK(jobs[i].st);
    }
    return claims;
}

static void count_block(const tpu_op_block_hook *h, int ith, int64_t i0, int64_t mb, int64_t j0,
                        int64_t nb) {
    (void)ith;
    int *seen = h->ctx;
    const int64_t n = (int64_t)seen[-1]; /* the row length, stored before the counts */
    for (int64_t i = i0; i < i0 + mb; i++)
        for (int64_t j = j0; j < j0 + nb; j++)
            seen[i * n + j]++;
}

static void test_mm_claimed(void) {
    /* The A panel holds several row blocks and k blocks at 300x520x700,
     * the B panel several k blocks at 600x600x200. */
    static const int64_t shapes[][3] = {{512, 32, 512},  {600, 600, 200}, {128, 260, 1500},
                                        {300, 520, 700}, {1300, 20, 1100}, {12, 40, 2000},
                                        {9, 33, 9},      {2000, 20, 30},  {40, 600, 100}};
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++)
        for (int dt = 0; dt < 2; dt++) {
                const int64_t m = shapes[q][0], k = shapes[q][1], n = shapes[q][2];
                const tpu_dtype d = dt ? BF16 : F32;
                const size_t es = tpu_dtype_size(d);
                unsigned char *a = malloc((size_t)(m * k) * es), *b = malloc((size_t)(k * n) * es);
                unsigned char *bias = malloc((size_t)n * es);
                unsigned char *want = malloc((size_t)(m * n) * es), *got = malloc((size_t)(m * n) * es);
                int *seen = calloc((size_t)(m * n + 1), sizeof *seen);
                seen[0] = (int)n;
                for (int64_t i = 0; i < m * k; i++)
                    put_f32_or_bf16(a + (size_t)i * es, d, t_unit() * 2 - 1);
                for (int64_t i = 0; i < k * n; i++)
                    put_f32_or_bf16(b + (size_t)i * es, d, t_unit() * 2 - 1);
                for (int64_t i = 0; i < n; i++)
                    put_f32_or_bf16(bias + (size_t)i * es, d, t_unit());
                tpu_op op;
                memset(&op, 0, sizeof op);
                op.code = TPU_OP_MATMUL;
                op.fn = q % 2 ? TPU_MATMUL_ADDMM : TPU_MATMUL_MM;
                op.n_in = q % 2 ? 3 : 2;
                op.out = (tpu_tensor){.data = got, .sizes = {m, n}, .strides = {n, 1}, .ndim = 2,
                                      .dtype = d, .storage = got, .storage_nbytes = m * n * (int64_t)es};
                op.in[0] = (tpu_tensor){.data = a, .sizes = {m, k}, .strides = {k, 1}, .ndim = 2,
                                        .dtype = d, .storage = a, .storage_nbytes = m * k * (int64_t)es};
                /* Every other shape with B column-major (a Linear's weight). */
                op.in[1] = (tpu_tensor){.data = b, .sizes = {k, n},
                                        .strides = {q % 4 < 2 ? n : 1, q % 4 < 2 ? 1 : k}, .ndim = 2,
                                        .dtype = d, .storage = b, .storage_nbytes = k * n * (int64_t)es};
                op.in[2] = (tpu_tensor){.data = bias, .sizes = {m, n}, .strides = {0, 1}, .ndim = 2,
                                        .dtype = d, .storage = bias, .storage_nbytes = n * (int64_t)es};
                op.p.mm.alpha = 1.0;
                op.p.mm.beta = 1.0;
                op.p.mm.precision = TPU_PRECISION_HIGHEST;
                CHECK_OK(tpu_op_check(&op));
                tpu_kernels_set_reference(true);
                CHECK_OK(tpu_op_run(&op, 0, 1));
                memcpy(want, got, (size_t)(m * n) * es);
                tpu_kernels_set_reference(false);
                tpu_op_block_hook hook = {count_block, seen + 1};
                for (int nth = 2; nth <= 4; nth++)
                for (int blocks = 0; blocks < 2; blocks++) {
                    memset(got, 0xab, (size_t)(m * n) * es);
                    run_claimed(&op, nth, blocks ? &hook : NULL);
                    bool same = memcmp(want, got, (size_t)(m * n) * es) == 0;
                    CHECK(same);
                    if (!same)
                        fprintf(stderr, "    claimed mm %lldx%lldx%lld %s nth=%d%s differs\n",
                                (long long)m, (long long)k, (long long)n, dt ? "bf16" : "f32", nth,
                                blocks ? " (blocks)" : "");
                }
                int64_t wrong = 0; /* three blocks runs: nth = 2, 3, 4 */
                for (int64_t i = 0; i < m * n; i++)
                    wrong += seen[i + 1] != 3;
                CHECK(wrong == 0);
                free(a), free(b), free(bias), free(want), free(got), free(seen);
            }
}

/* Row kernels claim chunks of rows (tpu_k_parts): a softmax over 1000
 * rows on 2-4 threads at once must leave the bytes of one share alone. */
static void test_rows_claimed(void) {
    enum { R = 1000, C = 77 };
    static float x[R * C], want[R * C], got[R * C];
    for (int i = 0; i < R * C; i++)
        x[i] = (float)(t_unit() * 20 - 10);
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_SOFTMAX;
    op.fn = TPU_SOFTMAX_FORWARD;
    op.n_in = 1;
    op.in[0] = (tpu_tensor){.data = x, .sizes = {R, C}, .strides = {C, 1}, .ndim = 2, .dtype = F32,
                            .storage = x, .storage_nbytes = sizeof x};
    op.out = (tpu_tensor){.data = want, .sizes = {R, C}, .strides = {C, 1}, .ndim = 2, .dtype = F32,
                          .storage = want, .storage_nbytes = sizeof want};
    op.p.softmax.dim = 1;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(tpu_op_run(&op, 0, 1));
    op.out.data = op.out.storage = got;
    for (int nth = 2; nth <= 4; nth++) {
        memset(got, 0xab, sizeof got);
        const int64_t claims = run_claimed(&op, nth, NULL);
        CHECK(memcmp(want, got, sizeof got) == 0);
        CHECK(claims >= R); /* every row was claimed */
    }
}

/* Flat element-wise runs claim chunks too (tpu_k_span_share): an add
 * with one operand broadcast, and a GELU whose fast path uses vecmath,
 * over a length no chunk divides, on 2-4 threads at once, must leave the
 * bytes of one share alone in every element. */
static void test_spans_claimed(void) {
    enum { N = 100003 };
    static float x[N], y[1], want[N], got[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(t_unit() * 8 - 4);
    y[0] = 0.25f;
    for (int fam = 0; fam < 2; fam++) {
        tpu_op op;
        memset(&op, 0, sizeof op);
        op.code = fam ? TPU_OP_UNARY : TPU_OP_BINARY;
        op.fn = fam ? TPU_UNARY_GELU : TPU_BINARY_ADD;
        op.n_in = fam ? 1 : 2;
        op.p.ew.common = F32;
        op.p.ew.alpha.f = 1.0;
        op.p.ew.alpha.i = 1;
        op.in[0] = (tpu_tensor){.data = x, .sizes = {N}, .strides = {1}, .ndim = 1, .dtype = F32,
                                .storage = x, .storage_nbytes = sizeof x};
        op.in[1] = (tpu_tensor){.data = y, .sizes = {N}, .strides = {0}, .ndim = 1, .dtype = F32,
                                .storage = y, .storage_nbytes = sizeof y};
        op.out = (tpu_tensor){.data = want, .sizes = {N}, .strides = {1}, .ndim = 1, .dtype = F32,
                              .storage = want, .storage_nbytes = sizeof want};
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(tpu_op_run(&op, 0, 1));
        op.out.data = op.out.storage = got;
        for (int nth = 2; nth <= 4; nth++) {
            memset(got, 0xab, sizeof got);
            const int64_t claims = run_claimed(&op, nth, NULL);
            CHECK(memcmp(want, got, sizeof got) == 0);
            CHECK(claims >= N); /* every chunk was claimed */
        }
    }
}

int main(void) {
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++)
        run_row(&k_rows[i]);
    test_mm_flush_edges();
    test_mm_high_extremes();
    test_pair_kernel_direct();
    test_mm_claimed();
    test_rows_claimed();
    test_spans_claimed();
    tpu_kernels_set_reference(false);
    return check_report();
}
