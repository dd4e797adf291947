/* What the element-wise families (UNARY in unary.c, BINARY in binary.c)
 * share: loading an input through the record's common dtype, rounding a
 * result to it, and the compute type each common dtype has.
 *
 * The rule (tpu_op.p.ew in op.h): an input is converted to the common
 * dtype as a cast does, then to the compute type (f32 for f32/f16/bf16,
 * f64, wrapping i64 for integers, bool); the result is rounded to the
 * common dtype, then converted to out's dtype. PyTorch's CPU backend does
 * exactly this (TensorIterator casts its inputs to the common dtype, the
 * kernel computes in the "opmath" type and stores the common dtype,
 * which a final copy converts to out's). */
#ifndef TPU_KERNELS_EW_H
#define TPU_KERNELS_EW_H

#include <stdbool.h>
#include <stdint.h>

#include "convert.h"
#include "strided.h"
#include "tpu/op.h"

/* Constants C11's math.h does not promise (POSIX's M_SQRT2 and friends). */
#define TPU_K_SQRT2 1.41421356237309504880
#define TPU_K_SQRT1_2 0.70710678118654752440
#define TPU_K_2_SQRTPI 1.12837916709551257390
#define TPU_K_PI 3.14159265358979323846

/* The compute types, by common dtype. */
typedef enum { EW_F32, EW_F64, EW_I64, EW_BOOL } tpu_k_ew_compute;

static inline tpu_k_ew_compute tpu_k_ew_compute_of(tpu_dtype common) {
    switch (common) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: return EW_F32;
    case TPU_DTYPE_F64: return EW_F64;
    case TPU_DTYPE_BOOL: return EW_BOOL;
    default: return EW_I64;
    }
}

/* v rounded to the precision of a 16-bit float dtype (others: unchanged). */
static inline float tpu_k_round_to(float v, tpu_dtype dt) {
    if (dt == TPU_DTYPE_F16)
        return tpu_f16_to_f32(tpu_f32_to_f16(v));
    return dt == TPU_DTYPE_BF16 ? tpu_k_round_bf16(v) : v;
}

/* An element of dtype dt, through common (an f32-computed dtype), as f32. */
static inline float tpu_k_ew_load_f32(const void *p, tpu_dtype dt, tpu_dtype common) {
    float v = tpu_k_load_f32(p, dt);
    return dt == common ? v : tpu_k_round_to(v, common);
}

/* v wrapped to the width of integer dtype dt (its low bits,
 * sign-extended); bool: v != 0. */
static inline int64_t tpu_k_ew_wrap(int64_t v, tpu_dtype dt) {
    uint64_t u = (uint64_t)v;
    switch (dt) {
    case TPU_DTYPE_BOOL: return v != 0;
    case TPU_DTYPE_I8: return (int8_t)(uint8_t)u;
    case TPU_DTYPE_U8: return (uint8_t)u;
    case TPU_DTYPE_I16: return (int16_t)(uint16_t)u;
    case TPU_DTYPE_I32: return (int32_t)(uint32_t)u;
    default: return v;
    }
}

/* An element of dtype dt, through common (an integer dtype), as int64:
 * integers wrap to common's width, floats convert as a cast does. */
static inline int64_t tpu_k_ew_load_i64(const void *p, tpu_dtype dt, tpu_dtype common) {
    int64_t v = tpu_k_load_int(p, dt, common);
    /* Narrowed to common (floats were converted through int32 or int64,
     * tpu_k_f64_to_int). */
    return dt == common ? v : tpu_k_ew_wrap(v, common);
}

/* A run of n elements of dtype dt at p (step 1, or 0: one value for the
 * whole run), as f32 through common: in place when dt is f32 and common
 * is f32 (returns p), else converted into buf (one value when step is 0).
 * dt may be any dtype (tpu_k_cvt_to_f32); p aligned to its element size. */
static inline const float *tpu_k_ew_stage_f32(const char *p, tpu_dtype dt, int64_t step,
                                              int64_t n, tpu_dtype common, float *buf) {
    if (dt == TPU_DTYPE_F32 && common == TPU_DTYPE_F32)
        return (const float *)p;
    int64_t len = step ? n : 1;
    tpu_k_cvt_to_f32(buf, p, dt, len);
    if (dt != common)
        for (int64_t i = 0; i < len; i++)
            buf[i] = tpu_k_round_to(buf[i], common);
    return buf;
}

/* A run of n elements of dtype dt at src (step 1, or 0: one value), as
 * the integer compute values through common (an integer dtype: as
 * tpu_k_ew_load_i64 loads them; bool: 0 or 1, as tpu_k_load_bool): in
 * place when both are int64 (returns src), else into dst (one value when
 * step is 0). src aligned to its element size (ew_stage.c). */
const int64_t *tpu_k_ew_stage_i64(const char *src, tpu_dtype dt, int64_t step, int64_t n,
                                  tpu_dtype common, int64_t *dst);

/* A run of n elements of dtype dt at src (step 1, or 0: one value) as
 * f64, as tpu_k_load_f64 loads them (the f64 compute): in place when dt
 * is f64 (returns src), else into dst. src aligned (ew_stage.c). */
const double *tpu_k_ew_stage_f64(const char *src, tpu_dtype dt, int64_t step, int64_t n,
                                 double *dst);

/* dst[0..n) (dtype dt, contiguous, aligned) = src[0..n) stored as
 * tpu_k_store_i64 stores them (integers wrap, floats round, bool != 0). */
void tpu_k_ew_store_i64(char *dst, tpu_dtype dt, const int64_t *src, int64_t n);

#endif
