/* Kernel tests: dtype basics, float -> integer conversion of out-of-range
 * values against PyTorch's CPU backend, f16/bf16 conversion edge cases
 * (every half pattern, ties, overflow, underflow, random floats against
 * the independent rounding in kernel_test.h), Philox known answers and
 * random-number statistics. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "convert.h"
#include "kernel_test.h"
#include "strided.h"

/* ------------------------------------------------ dtype conversions */

/* Float -> integer: what PyTorch's CPU backend (torch 2.13, x86) gives,
 * measured with torch and written down here, for values exactly
 * representable in f32, bf16 and f64 (f16 turns those above 65504 into
 * infinities). Columns: int8, int16, int32, int64, uint8, bool. */
enum { N_INT_DTYPES = 6 };
static const tpu_dtype k_int_dtypes[N_INT_DTYPES] = {I8, I16, I32, I64, U8, BOOL};
typedef struct {
    double v;
    int64_t want[N_INT_DTYPES];
} f2i_row;
static const f2i_row k_f2i_rows[] = {
    {0x1.6p31, {0, 0, INT32_MIN, 2952790016, 0, 1}},
    {-0x1.6p31, {0, 0, INT32_MIN, -2952790016, 0, 1}},
    {0x1.3p32, {0, 0, INT32_MIN, 5100273664, 0, 1}},
    {0x1p63, {0, 0, INT32_MIN, INT64_MIN, 0, 1}},
    {-0x1p63, {0, 0, INT32_MIN, INT64_MIN, 0, 1}},
    {0x1p100, {0, 0, INT32_MIN, INT64_MIN, 0, 1}},
    {INFINITY, {0, 0, INT32_MIN, INT64_MIN, 0, 1}},
    {-INFINITY, {0, 0, INT32_MIN, INT64_MIN, 0, 1}},
    {NAN, {0, 0, INT32_MIN, INT64_MIN, 0, 1}},
    {73216.0, {0, 7680, 73216, 73216, 0, 1}},
    {300.0, {44, 300, 300, 300, 44, 1}},
    {-300.0, {-44, -300, -300, -300, 212, 1}},
    {255.0, {-1, 255, 255, 255, 255, 1}},
    {-129.0, {127, -129, -129, -129, 127, 1}},
    {-2.5, {-2, -2, -2, -2, 254, 1}},
    {2.75, {2, 2, 2, 2, 2, 1}},
    {0.5, {0, 0, 0, 0, 0, 1}},
    {-0.0, {0, 0, 0, 0, 0, 0}},
};
enum { N_F2I_ROWS = sizeof k_f2i_rows / sizeof k_f2i_rows[0], F2I_ROW_INF = 6 };

/* f64 only: uint8 goes through int64 (4294967301 -> 5), int8 through
 * int32 (-> 0); the int32 range ends at -2^31 - 1 exclusive. */
static const f2i_row k_f2i_rows_f64[] = {
    {4294967301.0, {0, 0, INT32_MIN, 4294967301, 5, 1}},
    {-2147483648.75, {0, 0, INT32_MIN, INT32_MIN, 0, 1}},
    {2147483647.5, {-1, -1, 2147483647, 2147483647, 255, 1}},
    {-2147483649.0, {0, 0, INT32_MIN, -2147483649, 255, 1}},
};

/* Stores v as float dtype dt (exactly, for the table's values). */
static void f2i_store(unsigned char *p, tpu_dtype dt, double v) {
    switch (dt) {
    case F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case F64: memcpy(p, &v, 8); return;
    case F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); return; }
    default: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    }
}

/* Reads an integer element of dtype dt. */
static int64_t f2i_read(const unsigned char *p, tpu_dtype dt) {
    switch (dt) {
    case I8: return (int8_t)p[0];
    case U8:
    case BOOL: return p[0];
    case I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case I32: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

/* The scalar conversions at the edges of the int32 and int64 ranges. */
static void test_f2i_scalar_edges(void) {
    CHECK(tpu_k_f64_to_i32(nextafter(0x1p31, 0)) == INT32_MAX);
    CHECK(tpu_k_f64_to_i32(0x1p31) == INT32_MIN);
    CHECK(tpu_k_f64_to_i32(-0x1p31) == INT32_MIN);
    CHECK(tpu_k_f64_to_i32(nextafter(-0x1p31 - 1.0, 0)) == INT32_MIN);
    CHECK(tpu_k_f64_to_i32(-0x1p31 - 1.0) == INT32_MIN);
    CHECK(tpu_k_f64_to_i32(-0.99) == 0 && tpu_k_f64_to_i32(NAN) == INT32_MIN);
    CHECK(tpu_k_f64_to_i64(nextafter(0x1p63, 0)) == INT64_MAX - 1023);
    CHECK(tpu_k_f64_to_i64(0x1p63) == INT64_MIN && tpu_k_f64_to_i64(-0x1p63) == INT64_MIN);
    CHECK(tpu_k_f64_to_i64(nextafter(-0x1p63, 0)) == INT64_MIN + 1024);
    CHECK(tpu_k_f64_to_i64(-INFINITY) == INT64_MIN && tpu_k_f64_to_i64(NAN) == INT64_MIN);
    CHECK(tpu_k_f64_to_int(3e9, I8) == INT32_MIN && tpu_k_f64_to_int(3e9, U8) == 3000000000);
    CHECK(tpu_k_f64_to_int(NAN, BOOL) == 1 && tpu_k_f64_to_int(-0.0, BOOL) == 0);
}

/* COPY from every float dtype to every integer dtype and bool matches the
 * CPU backend's table, for sizes 1, 7 and 1000, contiguous and strided on
 * either side, on the reference and fast paths, split 1 and 3 ways.
 * Element i holds row (i + shift) % rows, so vector lanes mix values. */
static void test_f2i_copy_matches_cpu(void) {
    static const tpu_dtype srcs[] = {F32, F64, F16, BF16};
    static const int64_t ns[] = {1, 7, 1000};
    enum { MAXN = 1000, MAXSTEP = 3 };
    unsigned char *in = calloc(MAXN * MAXSTEP, 8), *out = calloc(MAXN * MAXSTEP, 8);
    int bad = 0;
    for (size_t si = 0; si < sizeof srcs / sizeof srcs[0]; si++) {
        tpu_dtype sdt = srcs[si];
        const f2i_row *rows = sdt == F64 ? k_f2i_rows_f64 : k_f2i_rows;
        int nrows = sdt == F64 ? (int)(sizeof k_f2i_rows_f64 / sizeof k_f2i_rows_f64[0])
                               : N_F2I_ROWS;
        for (int pass = 0; pass < (sdt == F64 ? 2 : 1); pass++) {
            if (pass == 1) { /* f64 runs the common table too */
                rows = k_f2i_rows;
                nrows = N_F2I_ROWS;
            }
            for (int di = 0; di < N_INT_DTYPES; di++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (int lay = 0; lay < 3; lay++)
                        for (int w = 0; w < 4; w++) {
                            tpu_dtype odt = k_int_dtypes[di];
                            int64_t n = ns[ni], is = lay == 1 ? 3 : 1, os = lay == 2 ? 2 : 1;
                            size_t ies = tpu_dtype_size(sdt), oes = tpu_dtype_size(odt);
                            for (int64_t i = 0; i < n; i++)
                                f2i_store(in + i * is * (int64_t)ies, sdt,
                                          rows[(i + lay) % nrows].v);
                            memset(out, 0x5a, MAXN * MAXSTEP * 8);
                            tpu_op op;
                            memset(&op, 0, sizeof op);
                            t_set_kind(&op, T_COPY);
                            op.n_in = 1;
                            op.in[0] = (tpu_tensor){.data = in, .sizes = {n}, .strides = {is},
                                                    .ndim = 1, .dtype = sdt, .storage = in,
                                                    .storage_nbytes = MAXN * MAXSTEP * 8};
                            op.out = (tpu_tensor){.data = out, .sizes = {n}, .strides = {os},
                                                  .ndim = 1, .dtype = odt, .storage = out,
                                                  .storage_nbytes = MAXN * MAXSTEP * 8};
                            tpu_kernels_set_reference(w & 1);
                            CHECK_OK(tpu_op_check(&op));
                            CHECK_OK(run_shares(&op, w < 2 ? 1 : 3));
                            for (int64_t i = 0; i < n; i++) {
                                const f2i_row *r = &rows[(i + lay) % nrows];
                                bool inf16 = sdt == F16 && fabs(r->v) > 65504.0;
                                int64_t want = inf16 ? k_f2i_rows[F2I_ROW_INF].want[di]
                                                     : r->want[di];
                                int64_t got = f2i_read(out + i * os * (int64_t)oes, odt);
                                if (got != want && bad++ < 5)
                                    fprintf(stderr,
                                            "copy %s -> %s n=%lld layout %d: %g gave %lld, "
                                            "want %lld\n",
                                            tpu_dtype_name(sdt), tpu_dtype_name(odt),
                                            (long long)n, lay, r->v, (long long)got,
                                            (long long)want);
                            }
                        }
        }
    }
    tpu_kernels_set_reference(false);
    CHECK(bad == 0);
    free(in);
    free(out);
}

static void test_dtype_basics(void) {
    CHECK(tpu_dtype_size(TPU_DTYPE_BF16) == 2 && tpu_dtype_size(TPU_DTYPE_I64) == 8);
    CHECK(tpu_dtype_size(TPU_DTYPE_COUNT) == 0 && tpu_dtype_size((tpu_dtype)-1) == 0);
    CHECK(strcmp(tpu_dtype_name(TPU_DTYPE_BF16), "bfloat16") == 0);
    CHECK(strcmp(tpu_dtype_name((tpu_dtype)77), "invalid") == 0);
    CHECK(tpu_dtype_is_float(TPU_DTYPE_F16) && !tpu_dtype_is_float(TPU_DTYPE_BOOL));
    CHECK(!tpu_dtype_is_float(TPU_DTYPE_COUNT));
    CHECK(strcmp(tpu_op_name(TPU_OP_MATMUL), "matmul") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_MATMUL, TPU_MATMUL_ADDMM), "addmm") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_UNARY, TPU_UNARY_GELU_TANH), "gelu_tanh") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_COPY, 0), "copy") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_COPY, TPU_COPY_COUNT), "invalid") == 0 && strcmp(tpu_op_fn_name(TPU_OP_COPY_H2D, 1), "invalid") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_BINARY, TPU_BINARY_COUNT), "invalid") == 0);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_COUNT, 0), "invalid") == 0);
    CHECK(tpu_op_fn_count(TPU_OP_UNARY) == TPU_UNARY_COUNT && tpu_op_fn_count(TPU_OP_COPY) == TPU_COPY_COUNT && tpu_op_fn_count(TPU_OP_COPY_H2D) == 1);
    CHECK(strcmp(tpu_op_fn_name(TPU_OP_FILL, TPU_FILL_ARANGE), "arange") == 0);
    CHECK(strcmp(tpu_op_name(TPU_OP_COPY_H2D), "copy_h2d") == 0);
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

/* The run conversions (convert.c) at every instruction-set level give
 * the scalar conversions' bits, NaN payloads and signalling NaNs
 * included, in the vector loops and their tails. */
static void test_bf16_runs_every_isa(void) {
    enum { N = 1000 + 7 };
    static const uint32_t edges[] = {0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fc00000u,
                                     0xffc00001u, 0x7f800000u, 0xff800000u, 0x3f808000u,
                                     0x3f818000u, 0x7f7fffffu, 0x00000001u, 0x80007fffu,
                                     0x00008000u, 0x007fffffu, 0x80000000u, 0x7f80ffffu};
    uint32_t bits[N];
    float in[N], back[N];
    uint16_t out[N];
    for (int i = 0; i < N; i++)
        bits[i] = i < (int)(sizeof edges / sizeof edges[0]) ? edges[i]
                  : i % 7 == 0 ? (0x7f800000u | ((uint32_t)t_rand() & 0x807fffffu)) /* NaN, inf */
                               : (uint32_t)t_rand();
    memcpy(in, bits, sizeof in);
    tpu_isa saved = tpu_kernels_get_isa();
    for (int isa = 0; isa <= (int)saved; isa++) {
        tpu_kernels_set_isa((tpu_isa)isa);
        tpu_k_cvt_from_f32(out, TPU_DTYPE_BF16, in, N);
        tpu_k_cvt_to_f32(back, out, TPU_DTYPE_BF16, N);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float want_back = tpu_bf16_to_f32(out[i]);
            bad += out[i] != tpu_f32_to_bf16(in[i]);
            bad += memcmp(&back[i], &want_back, 4) != 0;
        }
        if (bad)
            printf("    bf16 runs at isa %d: %d mismatches\n", isa, bad);
        CHECK(bad == 0);
    }
    tpu_kernels_set_isa(saved);
}

/* Every top half (sign, exponent, 7 mantissa bits) with low halves that
 * decide the rounding (zero, just below, at and above the tie, all ones,
 * and random ones): each ISA's run conversion (at AVX-512, VCVTNEPS2BF16
 * with its subnormal fix-up where the probe admits it) gives
 * tpu_f32_to_bf16's bits. */
static void test_bf16_rounding_every_top_half(void) {
    enum { LOWS = 16, N = 65536 * LOWS };
    static const uint16_t fixed_low[] = {0x0000, 0x0001, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
    float *in = malloc(N * sizeof *in);
    uint16_t *out = malloc(N * sizeof *out);
    CHECK(in != NULL && out != NULL);
    if (!in || !out) {
        free(in);
        free(out);
        return;
    }
    for (uint32_t top = 0; top < 65536; top++)
        for (int j = 0; j < LOWS; j++) {
            uint32_t low = j < 8 ? fixed_low[j] : (uint32_t)t_rand() & 0xffffu;
            uint32_t bits = top << 16 | low;
            memcpy(&in[top * LOWS + (uint32_t)j], &bits, 4);
        }
    tpu_isa saved = tpu_kernels_get_isa();
    for (int isa = 0; isa <= (int)saved; isa++) {
        tpu_kernels_set_isa((tpu_isa)isa);
        tpu_k_cvt_from_f32(out, TPU_DTYPE_BF16, in, N);
        int64_t bad = 0;
        for (int64_t i = 0; i < N; i++)
            bad += out[i] != tpu_f32_to_bf16(in[i]);
        if (bad)
            printf("    bf16 rounding at isa %d: %lld mismatches\n", isa, (long long)bad);
        CHECK(bad == 0);
    }
    tpu_kernels_set_isa(saved);
    free(in);
    free(out);
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

static void test_random_stats(void) {
    enum { N = 100000 };
    static const tpu_dtype dts[] = {F32, F64, F16, BF16};
    unsigned char *buf = malloc(N * 8), *again = malloc(N * 8);
    for (int u = 0; u < 2; u++) {
        for (int k = 0; k < 4; k++) {
            tpu_dtype dt = dts[k];
            double a = u ? 1.5 : -2.0, b = u ? 2.0 : 3.0;
            tpu_op op = random_op(u ? T_NORMAL : T_UNIFORM, dt, buf, N, 42 + (uint64_t)k,
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
                tpu_kernels_set_isa(w == 3 ? TPU_ISA_PORTABLE : TPU_ISA_COUNT - 1);
                memset(again, 0, bytes);
                op.out.data = op.out.storage = again;
                CHECK_OK(run_shares(&op, nths[w]));
                tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
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
    tpu_op op = random_op(T_UNIFORM, F32, f, 4, 0, 0, 0.0, 1.0);
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
        op = random_op(T_UNIFORM, dt, buf, 20000, k, 3, narrow[k].a, narrow[k].b);
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

/* A full sum split into fixed chunks (two phases, scratch): bit-identical
 * for every thread count and in both kernel modes, and close to an f64
 * sum in index order. Also a sum over trailing dims into a few outputs. */
static void test_split_sum_is_deterministic(void) {
    enum { N = 7 * 65536 + 12345, ROWS = 3 };
    float *x = malloc(N * sizeof *x);
    uint64_t state = 12345;
    double exact = 0.0;
    for (int i = 0; i < N; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1000.0f;
        exact += x[i];
    }
    static const tpu_dtype dts[] = {F32, BF16, F64};
    unsigned char *buf = malloc((size_t)N * 8);
    for (int k = 0; k < 3; k++)
    for (int rows = 1; rows <= ROWS; rows += ROWS - 1) {
        tpu_dtype dt = dts[k];
        size_t es = t_size(dt);
        double want = 0.0;
        for (int i = 0; i < N; i++) {
            unsigned char *p = buf + (size_t)i * es;
            if (dt == F32) {
                memcpy(p, &x[i], 4);
            } else if (dt == F64) {
                double d = x[i];
                memcpy(p, &d, 8);
            } else {
                uint16_t h = tpu_f32_to_bf16(x[i]);
                memcpy(p, &h, 2);
            }
            want += t_read_f(buf + (size_t)i * es, dt);
        }
        int64_t cols = N / rows;
        double out[ROWS], first[ROWS];
        tpu_op op;
        memset(&op, 0, sizeof op);
        t_set_kind(&op, T_SUM);
        op.n_in = 1;
        op.in[0] = (tpu_tensor){.data = buf, .sizes = {rows, cols}, .strides = {cols, 1}, .ndim = 2,
                                .dtype = dt, .storage = buf, .storage_nbytes = (int64_t)N * (int64_t)es};
        op.out = (tpu_tensor){.data = out, .sizes = {rows, 1}, .strides = {1, 1}, .ndim = 2,
                              .dtype = F64, .storage = out, .storage_nbytes = sizeof out};
        op.p.reduce.mask = 2;
        CHECK(tpu_op_phases(&op) == 2);
        int same = 1;
        for (int ref = 0; ref < 2; ref++) {
            tpu_kernels_set_reference(ref);
            for (int nth = 1; nth <= 7; nth++) {
                CHECK_OK(run_shares(&op, nth));
                if (ref == 0 && nth == 1)
                    memcpy(first, out, sizeof out);
                same &= memcmp(first, out, (size_t)rows * sizeof(double)) == 0;
            }
        }
        tpu_kernels_set_reference(false);
        CHECK(same);
        if (rows == 1)
            CHECK(fabs(first[0] - want) <= 1e-9 * fabs(want) + 1e-6);
    }
    (void)exact;
    free(buf);
    free(x);
}

/* BERNOULLI: p = 0 and 1 exactly, the mean of p = 0.3 within 5 standard
 * errors, 0/1 values in every dtype, the same bytes for any nth and both
 * kernel modes, and p outside [0, 1] refused. */
static void test_bernoulli(void) {
    enum { N = 100000 };
    static float f[N], g[N];
    static uint8_t bo[N];
    for (int w = 0; w < 2; w++) {
        tpu_kernels_set_reference(w == 0);
        tpu_op op = random_op(T_BERNOULLI, F32, f, N, 7, 3, 0.3, 0);
        CHECK_OK(tpu_op_check(&op));
        CHECK_OK(run_shares(&op, 1));
        tpu_op op3 = random_op(T_BERNOULLI, F32, g, N, 7, 3, 0.3, 0);
        CHECK_OK(run_shares(&op3, 3));
        CHECK(memcmp(f, g, sizeof f) == 0);
        double sum = 0;
        bool binary = true;
        for (int i = 0; i < N; i++) {
            sum += f[i];
            binary = binary && (f[i] == 0.0f || f[i] == 1.0f);
        }
        CHECK(binary);
        CHECK(fabs(sum / N - 0.3) < 5 * sqrt(0.3 * 0.7 / N));
        for (int k = 0; k < 2; k++) {
            op = random_op(T_BERNOULLI, BOOL, bo, N, 9, 0, (double)k, 0);
            CHECK_OK(run_shares(&op, 2));
            bool all = true;
            for (int i = 0; i < N; i++)
                all = all && bo[i] == (uint8_t)k;
            CHECK(all);
        }
    }
    tpu_kernels_set_reference(false);
    tpu_op bad = random_op(T_BERNOULLI, F32, f, 4, 0, 0, 1.5, 0);
    CHECK_STATUS(tpu_op_check(&bad), TPU_ERR_INVALID_ARG);
    bad.p.rand.a = NAN;
    CHECK_STATUS(tpu_op_check(&bad), TPU_ERR_INVALID_ARG);
}

/* ARANGE: value + step * k in f64 (floats) or wrapping int64, any nth. */
static void test_arange(void) {
    double d[1000], e[1000];
    int32_t w[1000];
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_FILL;
    op.fn = TPU_FILL_ARANGE;
    op.out = (tpu_tensor){.data = d, .sizes = {1000}, .strides = {1}, .ndim = 1, .dtype = F64,
                          .storage = d, .storage_nbytes = sizeof d};
    op.p.fill.value = (tpu_scalar){-3.5, 0};
    op.p.fill.step = (tpu_scalar){0.1, 0};
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(run_shares(&op, 3));
    bool ok = true;
    for (int k = 0; k < 1000; k++)
        ok = ok && d[k] == -3.5 + 0.1 * (double)k;
    CHECK(ok);
    op.out.data = op.out.storage = e;
    CHECK_OK(run_shares(&op, 1));
    CHECK(memcmp(d, e, sizeof d) == 0);
    op.out = (tpu_tensor){.data = w, .sizes = {1000}, .strides = {1}, .ndim = 1, .dtype = I32,
                          .storage = w, .storage_nbytes = sizeof w};
    op.p.fill.value = (tpu_scalar){0, INT32_MAX - 2};
    op.p.fill.step = (tpu_scalar){0, 1};
    CHECK_OK(run_shares(&op, 2));
    CHECK(w[0] == INT32_MAX - 2 && w[2] == INT32_MAX && w[3] == INT32_MIN); /* wraps */
    /* int64 (the fast path's contiguous ramp): wraps past INT64_MAX, in
     * both kernel modes and any nth. */
    int64_t q[1000];
    op.out = (tpu_tensor){.data = q, .sizes = {1000}, .strides = {1}, .ndim = 1, .dtype = I64,
                          .storage = q, .storage_nbytes = sizeof q};
    op.p.fill.value = (tpu_scalar){0, INT64_MAX - 700};
    op.p.fill.step = (tpu_scalar){0, 3};
    for (int ref = 0; ref < 2; ref++)
        for (int nth = 1; nth <= 3; nth += 2) {
            tpu_kernels_set_reference(ref);
            memset(q, 0, sizeof q);
            CHECK_OK(run_shares(&op, nth));
            bool ramp = true;
            for (int k = 0; k < 1000; k++)
                ramp = ramp && (uint64_t)q[k] == (uint64_t)(INT64_MAX - 700) + 3u * (uint64_t)k;
            CHECK(ramp && q[233] == INT64_MAX - 1 && q[234] < 0);
        }
    tpu_kernels_set_reference(false);
    op.out.dtype = BOOL;
    CHECK_STATUS(tpu_op_check(&op), TPU_ERR_UNSUPPORTED_DTYPE);
}

int main(void) {
    test_dtype_basics();
    test_f16_exhaustive();
    test_f2i_scalar_edges();
    test_f2i_copy_matches_cpu();
    test_f16_rounding();
    test_bf16_rounding();
    test_bf16_runs_every_isa();
    test_bf16_rounding_every_top_half();
    test_philox_kat();
    test_random_stats();
    test_bernoulli();
    test_arange();
    tpu_kernels_set_reference(false);
    test_split_sum_is_deterministic();
    return check_report();
}
