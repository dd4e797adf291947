/* Element types: sizes, names, and the exact IEEE half <-> f32 conversions.
 *
 * The conversions work on bit patterns only, so they give the same answer
 * on every host regardless of its floating-point environment. */
#include <stdint.h>
#include <string.h>

#include "tpu/dtype.h"

typedef struct {
    size_t size;
    const char *name;
    bool is_float;
} dtype_info;

static const dtype_info k_dtypes[] = {
    [TPU_DTYPE_F32] = {4, "float32", true},  [TPU_DTYPE_F64] = {8, "float64", true},
    [TPU_DTYPE_F16] = {2, "float16", true},  [TPU_DTYPE_BF16] = {2, "bfloat16", true},
    [TPU_DTYPE_I8] = {1, "int8", false},     [TPU_DTYPE_I16] = {2, "int16", false},
    [TPU_DTYPE_I32] = {4, "int32", false},   [TPU_DTYPE_I64] = {8, "int64", false},
    [TPU_DTYPE_U8] = {1, "uint8", false},    [TPU_DTYPE_BOOL] = {1, "bool", false},
};
_Static_assert(sizeof k_dtypes / sizeof k_dtypes[0] == TPU_DTYPE_COUNT,
               "every tpu_dtype needs an entry");

/* Compare as unsigned so that negative enum values are rejected too. */
static bool dtype_valid(tpu_dtype dtype) {
    return (unsigned)dtype < (unsigned)TPU_DTYPE_COUNT;
}

size_t tpu_dtype_size(tpu_dtype dtype) {
    return dtype_valid(dtype) ? k_dtypes[dtype].size : 0;
}

const char *tpu_dtype_name(tpu_dtype dtype) {
    return dtype_valid(dtype) ? k_dtypes[dtype].name : "invalid";
}

bool tpu_dtype_is_float(tpu_dtype dtype) {
    return dtype_valid(dtype) && k_dtypes[dtype].is_float;
}

float tpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24 is exact in f32 (mant < 2^10). */
        float mag = (float)mant * 0x1p-24f;
        memcpy(&bits, &mag, sizeof bits);
        bits |= sign;
    } else if (exp == 31) {
        /* Infinity or NaN: widen the payload, keep the sign. */
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        /* Normal: rebias the exponent (15 -> 127), widen the mantissa. */
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Rounds mant >> shift to nearest, ties to even (1 <= shift <= 31). */
static uint32_t shift_round_even(uint32_t mant, unsigned shift) {
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

uint16_t tpu_f32_to_f16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t abs = bits & 0x7fffffffu;

    if (abs > 0x7f800000u) /* NaN: quiet it, keep the sign and top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    /* 65520 = 65504 + half an ulp rounds (to even) up to infinity; so do
     * larger values and infinity itself. */
    if (abs >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (abs >= 0x38800000u) {
        /* Normal half (>= 2^-14): rebias, then round the 13 dropped bits.
         * A carry out of the mantissa correctly bumps the exponent. */
        uint32_t unrounded = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3ffu);
        uint32_t rem = abs & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (unrounded & 1u)))
            unrounded++;
        return (uint16_t)(sign | unrounded);
    }
    /* At most 2^-25 (half the smallest subnormal; the tie goes to even 0). */
    if (abs <= 0x33000000u)
        return sign;
    /* Subnormal half: the value in units of 2^-24 is mant * 2^(e - 126)
     * with e the biased f32 exponent (102 < e < 113), so shift by 126 - e.
     * Rounding up into 0x400 yields the smallest normal, as it should. */
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    unsigned shift = 126u - (abs >> 23);
    return (uint16_t)(sign | shift_round_even(mant, shift));
}
