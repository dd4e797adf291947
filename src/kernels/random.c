/* UNIFORM and NORMAL: counter-based Philox4x32-10 (Salmon et al., SC'11;
 * the Random123 constants), so that every value depends only on (seed,
 * offset, element index) and not on threads, strides or mode.
 *
 * Stream: key = (lo32(seed), hi32(seed)); block b uses counter
 * (lo32(b), hi32(b), lo32(offset), hi32(offset)) and yields four 32-bit
 * lanes x[0..3]. Element i is out's row-major logical index.
 *
 * UNIFORM (a = from, b = to):
 *   f32/f16/bf16: block i/4, lane i%4, u = (x >> 8) * 2^-24 in [0, 1);
 *     v = a + (b - a) * u in f64, rounded to f32 and then to the dtype.
 *   f64: block i/2, lanes 2(i%2) (low) and 2(i%2)+1 (high) form a 64-bit
 *     x; u = (x >> 11) * 2^-53; v = a + (b - a) * u.
 *   If rounding lands on or above b (and a < b), the largest value of the
 *   dtype below the rounded one is used instead, keeping v in [a, b).
 * NORMAL (a = mean, b = std), Box-Muller (cosine branch only):
 *   f32/f16/bf16: block i/2, lanes 2(i%2) and 2(i%2)+1:
 *     u1 = ((x0 >> 8) + 1) * 2^-24 in (0, 1], u2 = (x1 >> 8) * 2^-24 in [0, 1);
 *   f64: block i, u1 from lanes 0,1 and u2 from lanes 2,3 as 53-bit values
 *     (u1 = ((x >> 11) + 1) * 2^-53);
 *   z = sqrt(-2 ln u1) * cos(2 pi u2) in f64; v = a + b * z, rounded as
 *   for UNIFORM.
 * Work split: contiguous ranges of the element index.
 *
 * Fast path (NORMAL into row-major contiguous f32/f16/bf16): the Philox
 * blocks of a batch are generated first (AVX2, 8 blocks per register
 * set), then each element takes its two lanes through the same
 * normal_value and store_value as the reference, so the bytes agree. */
#include <math.h>
#include <string.h>

#include "kernels_internal.h"
#include "strided.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* 2 pi (M_PI is not part of C11). */
static const double k_two_pi = 6.28318530717958647692528676655900577;

/* Multipliers and Weyl key increments of Philox4x32. */
static const uint32_t PHILOX_M0 = 0xD2511F53u, PHILOX_M1 = 0xCD9E8D57u;
static const uint32_t PHILOX_W0 = 0x9E3779B9u, PHILOX_W1 = 0xBB67AE85u;

void tpu_k_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        /* The key is bumped by the Weyl constants between rounds. */
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        /* Two 32x32->64 multiplies mix lanes 0 and 2 into all four. */
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The four lanes of one block, remembered so that consecutive elements
 * sharing a block compute it once. */
typedef struct {
    uint32_t key[2];
    uint64_t offset;
    uint64_t block;
    bool valid;
    uint32_t x[4];
} philox_cache;

static const uint32_t *lanes(philox_cache *pc, uint64_t block) {
    if (!pc->valid || pc->block != block) {
        uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)pc->offset,
                           (uint32_t)(pc->offset >> 32)};
        tpu_k_philox4x32_10(ctr, pc->key, pc->x);
        pc->block = block;
        pc->valid = true;
    }
    return pc->x;
}

/* 24-bit uniform in [0, 1) and 53-bit uniform from two lanes (low, high). */
static double u24(uint32_t x) {
    return (double)(x >> 8) * 0x1p-24;
}

static double u53(uint32_t lo, uint32_t hi) {
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1p-53;
}

/* The next 16-bit float pattern below h (h finite or +inf, not NaN). */
static uint16_t prev16(uint16_t h) {
    if ((h & 0x7fffu) == 0)
        return 0x8001u; /* below +-0: the smallest negative subnormal */
    return (h & 0x8000u) ? (uint16_t)(h + 1u) : (uint16_t)(h - 1u);
}

/* Stores f64 value v into dt (f32/f16/bf16 via f32, f64 as is), keeping
 * the result below `below` when `clamp` (UNIFORM's half-open range). */
static void store_value(char *p, tpu_dtype dt, double v, bool clamp, double below) {
    switch (dt) {
    case TPU_DTYPE_F64:
        if (clamp && v >= below)
            v = nextafter(below, -INFINITY);
        tpu_k_store_f64(p, dt, v);
        return;
    case TPU_DTYPE_F32: {
        float f = (float)v;
        if (clamp && (double)f >= below)
            f = nextafterf(f, -INFINITY);
        tpu_k_store_f32(p, dt, f);
        return;
    }
    default: { /* f16, bf16: round f64 -> f32 -> 16 bits, then step down */
        float f = (float)v;
        bool half = dt == TPU_DTYPE_F16;
        uint16_t h = half ? tpu_f32_to_f16(f) : tpu_f32_to_bf16(f);
        double r = half ? tpu_f16_to_f32(h) : tpu_bf16_to_f32(h);
        if (clamp && r >= below)
            h = prev16(h);
        memcpy(p, &h, 2);
        return;
    }
    }
}

/* Box-Muller, cosine branch, in three steps that both paths call (built
 * without FMA contraction, so they round the same everywhere):
 * radius sqrt(-2 ln u1), angle factor cos(2 pi u2), and v = a + b * z. */
static inline double normal_radius(double u1) {
    return sqrt(-2.0 * log(u1));
}

static inline double normal_cos(double u2) {
    return cos(k_two_pi * u2);
}

static inline double normal_combine(double r, double c, double a, double b) {
    double z = r * c;
    return a + b * z;
}

static inline double normal_value(double u1, double u2, double a, double b) {
    return normal_combine(normal_radius(u1), normal_cos(u2), a, b);
}

tpu_status tpu_k_random_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    uint64_t seed = op->p.rand.seed;
    philox_cache pc = {{(uint32_t)seed, (uint32_t)(seed >> 32)}, op->p.rand.offset, 0, false, {0}};
    double a = op->p.rand.a, b = op->p.rand.b;
    bool wide = o->dtype == TPU_DTYPE_F64;
    bool bernoulli = op->fn == TPU_RANDOM_BERNOULLI;
    bool uniform = op->fn == TPU_RANDOM_UNIFORM || bernoulli;
    bool clamp = uniform && a < b; /* a == b: the only value is a itself */

    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        uint64_t idx = (uint64_t)i;
        double v;
        if (op->fn == TPU_RANDOM_INTEGERS) {
            /* One 32-bit lane per element when the span fits in 32 bits
             * (4 per block), else two (2 per block); span 0 is 2^64. */
            uint64_t span = op->p.rand.span, r;
            if (span != 0 && span <= UINT32_MAX) {
                r = lanes(&pc, idx / 4)[idx % 4] % span;
            } else {
                const uint32_t *x = lanes(&pc, idx / 2);
                r = (uint64_t)x[2 * (idx % 2)] | (uint64_t)x[2 * (idx % 2) + 1] << 32;
                if (span != 0)
                    r %= span;
            }
            /* Wrapping add in unsigned arithmetic: from + r lies in the range. */
            int64_t value = tpu_k_u64_to_i64((uint64_t)op->p.rand.from + r);
            char *dst = tpu_k_ptr(o, it.off[0]);
            if (tpu_dtype_is_float(o->dtype))
                tpu_k_store_f64(dst, o->dtype, (double)value);
            else
                tpu_k_store_i64(dst, o->dtype, value);
            continue;
        }
        if (uniform) {
            /* One uniform per element: 4 (f32 family) or 2 (f64) per block. */
            double u;
            if (wide) {
                const uint32_t *x = lanes(&pc, idx / 2);
                u = u53(x[2 * (idx % 2)], x[2 * (idx % 2) + 1]);
            } else {
                u = u24(lanes(&pc, idx / 4)[idx % 4]);
            }
            if (bernoulli) {
                tpu_k_store_bool(tpu_k_ptr(o, it.off[0]), o->dtype, u < a);
                continue;
            }
            v = a + (b - a) * u;
        } else {
            /* Two uniforms per element: u1 avoids 0 so that log is finite. */
            double u1, u2;
            if (wide) {
                const uint32_t *x = lanes(&pc, idx);
                u1 = u53(x[0], x[1]) + 0x1p-53;
                u2 = u53(x[2], x[3]);
            } else {
                const uint32_t *x = lanes(&pc, idx / 2);
                u1 = u24(x[2 * (idx % 2)]) + 0x1p-24;
                u2 = u24(x[2 * (idx % 2) + 1]);
            }
            v = normal_value(u1, u2, a, b);
        }
        store_value(tpu_k_ptr(o, it.off[0]), o->dtype, v, clamp, b);
    }
    return TPU_OK;
}

/* ------------------------------------------------------- fast path */

/* out[j] = the Philox block (b0 + j, offset) under key, j < n. */
static void philox_batch_plain(const uint32_t key[2], uint64_t offset, uint64_t b0, int n,
                               uint32_t (*out)[4]) {
    for (int j = 0; j < n; j++) {
        uint64_t blk = b0 + (uint64_t)j;
        uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)offset,
                           (uint32_t)(offset >> 32)};
        tpu_k_philox4x32_10(ctr, key, out[j]);
    }
}

#if TPU_K_X86
/* The same blocks, eight at a time: lane j of each register is block
 * b0 + j; the 32x32->64 products come from even and odd lanes in turn. */
__attribute__((target("avx2,fma"))) static void philox_batch_avx2(const uint32_t key[2],
                                                                  uint64_t offset, uint64_t b0,
                                                                  int n, uint32_t (*out)[4]) {
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    int j0 = 0;
    for (; j0 + 8 <= n; j0 += 8) {
        uint32_t lo[8], hi[8];
        for (int j = 0; j < 8; j++) {
            uint64_t blk = b0 + (uint64_t)(j0 + j);
            lo[j] = (uint32_t)blk;
            hi[j] = (uint32_t)(blk >> 32);
        }
        __m256i c0 = _mm256_loadu_si256((const __m256i *)lo);
        __m256i c1 = _mm256_loadu_si256((const __m256i *)hi);
        __m256i c2 = _mm256_set1_epi32((int)(uint32_t)offset);
        __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(offset >> 32));
        uint32_t k0 = key[0], k1 = key[1];
        for (int round = 0; round < 10; round++) {
            if (round > 0) {
                k0 += PHILOX_W0;
                k1 += PHILOX_W1;
            }
            /* Full 64-bit products of even lanes, then of odd lanes. */
            __m256i pe0 = _mm256_mul_epu32(c0, m0);
            __m256i po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
            __m256i pe1 = _mm256_mul_epu32(c2, m1);
            __m256i po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
            /* Reassemble per-lane low and high halves. */
            __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xaa);
            __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xaa);
            __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xaa);
            __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xaa);
            __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
            __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
            c0 = n0;
            c1 = lo1;
            c2 = n2;
            c3 = lo0;
        }
        uint32_t x[4][8];
        _mm256_storeu_si256((__m256i *)x[0], c0);
        _mm256_storeu_si256((__m256i *)x[1], c1);
        _mm256_storeu_si256((__m256i *)x[2], c2);
        _mm256_storeu_si256((__m256i *)x[3], c3);
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 4; l++)
                out[j0 + j][l] = x[l][j];
    }
    philox_batch_plain(key, offset, b0 + (uint64_t)j0, n - j0, out + j0);
}
#endif

/* NORMAL into a row-major contiguous f32/f16/bf16 out: share ith's
 * element range, batch by batch (blocks, then radii, cosines, values).
 * Every other op or layout goes to the reference kernel. */
tpu_status tpu_k_random_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    tpu_dtype dt = o->dtype;
    /* Row-major contiguous: element i lives at offset i. */
    const int64_t *strides[1] = {o->strides};
    tpu_k_shape sh;
    tpu_k_shape_coalesce(&sh, o->ndim, o->sizes, 1, strides);
    if (op->fn != TPU_RANDOM_NORMAL || dt == TPU_DTYPE_F64 || sh.ndim > 1 ||
        (sh.ndim == 1 && sh.strides[0][0] != 1))
        return tpu_k_random_ref(op, ith, nth);
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    uint64_t seed = op->p.rand.seed, offset = op->p.rand.offset;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    double a = op->p.rand.a, b = op->p.rand.b;
    /* Element i uses block i / 2, lanes 2(i % 2) and 2(i % 2) + 1. */
    uint64_t first = (uint64_t)start / 2, last = (uint64_t)(end - 1) / 2;
    uint32_t x[TPU_K_RANDOM_BATCH][4];
    double r[2 * TPU_K_RANDOM_BATCH], c[2 * TPU_K_RANDOM_BATCH];
    char *base = o->data;
    int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2;
    for (uint64_t b0 = first; b0 <= last; b0 += TPU_K_RANDOM_BATCH) {
        int nb = last - b0 + 1 < TPU_K_RANDOM_BATCH ? (int)(last - b0 + 1) : TPU_K_RANDOM_BATCH;
        /* The batch's blocks first, then its elements. */
#if TPU_K_X86
        if (tpu_k_cpu_has_avx2_fma())
            philox_batch_avx2(key, offset, b0, nb, x);
        else
#endif
            philox_batch_plain(key, offset, b0, nb, x);
        int64_t i0 = (int64_t)(2 * b0), i1 = i0 + 2 * nb;
        int64_t lo = i0 > start ? i0 : start, hi = i1 < end ? i1 : end;
        /* Radii, then cosines, then values: short loops of independent
         * libm calls overlap better than one long chain per element. */
        for (int64_t i = lo; i < hi; i++)
            r[i - i0] = normal_radius(u24(x[(i - i0) / 2][2 * (i % 2)]) + 0x1p-24);
        for (int64_t i = lo; i < hi; i++)
            c[i - i0] = normal_cos(u24(x[(i - i0) / 2][2 * (i % 2) + 1]));
        for (int64_t i = lo; i < hi; i++)
            store_value(base + i * es, dt, normal_combine(r[i - i0], c[i - i0], a, b), false, b);
    }
    return TPU_OK;
}
