/* Element types of the virtual TPU and their conversions.
 *
 * bf16 and f16 are stored as 16-bit patterns and computed in f32 registers;
 * results are rounded once, on store, with round-to-nearest-even, as a TPU's
 * vector unit does. */
#ifndef TPU_DTYPE_H
#define TPU_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tpu/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TPU_DTYPE_F32 = 0,
    TPU_DTYPE_F64,
    TPU_DTYPE_F16,
    TPU_DTYPE_BF16,
    TPU_DTYPE_I8,
    TPU_DTYPE_I16,
    TPU_DTYPE_I32,
    TPU_DTYPE_I64,
    TPU_DTYPE_U8,
    TPU_DTYPE_BOOL,
    TPU_DTYPE_COUNT
} tpu_dtype;

/* Size of one element in bytes; 0 for a value outside the enum. */
TPU_API size_t tpu_dtype_size(tpu_dtype dtype);

/* Static name ("float32", "bfloat16", ...); "invalid" outside the enum. */
TPU_API const char *tpu_dtype_name(tpu_dtype dtype);

/* True for f32, f64, f16, bf16. */
TPU_API bool tpu_dtype_is_float(tpu_dtype dtype);

/* bf16 <-> f32. bf16 is the top half of an f32; NaN stays NaN. */
static inline float tpu_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t tpu_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, keep the sign */
        return (uint16_t)((bits >> 16) | 0x0040u);
    /* round to nearest, ties to even */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* IEEE half <-> f32, exact for every half value; f32 -> half rounds to
 * nearest even, overflows to infinity, keeps NaN. Defined in dtype.c. */
TPU_API float tpu_f16_to_f32(uint16_t h);
TPU_API uint16_t tpu_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif

#endif
