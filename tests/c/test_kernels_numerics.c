/* Kernel tests: dtype basics, f16/bf16 conversion edge cases (every half
 * pattern, ties, overflow, underflow, random floats against the
 * independent rounding in kernel_test.h), Philox known answers and
 * random-number statistics. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel_test.h"

/* ------------------------------------------------ dtype conversions */

static void test_dtype_basics(void) {
    CHECK(tpu_dtype_size(TPU_DTYPE_BF16) == 2 && tpu_dtype_size(TPU_DTYPE_I64) == 8);
    CHECK(tpu_dtype_size(TPU_DTYPE_COUNT) == 0 && tpu_dtype_size((tpu_dtype)-1) == 0);
    CHECK(strcmp(tpu_dtype_name(TPU_DTYPE_BF16), "bfloat16") == 0);
    CHECK(strcmp(tpu_dtype_name((tpu_dtype)77), "invalid") == 0);
    CHECK(tpu_dtype_is_float(TPU_DTYPE_F16) && !tpu_dtype_is_float(TPU_DTYPE_BOOL));
    CHECK(!tpu_dtype_is_float(TPU_DTYPE_COUNT));
    CHECK(strcmp(tpu_op_name(TPU_OP_ADDMM), "addmm") == 0);
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

int main(void) {
    test_dtype_basics();
    test_f16_exhaustive();
    test_f16_rounding();
    test_bf16_rounding();
    test_philox_kat();
    test_random_stats();
    tpu_kernels_set_reference(false);
    return check_report();
}
