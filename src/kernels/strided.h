/* Strided views for the kernels: n-d iteration over several operands at
 * once, and per-element load/store with conversion between dtypes.
 *
 * Conversion rules (shared by every kernel, so that all ops agree):
 *   - to f32/f16/bf16: through f32 (f64 -> f32 -> f16 rounds twice, as
 *     PyTorch's c10::Half(double) does); integers convert with C rounding.
 *   - to f64: exact from every other type except i64 (C rounding).
 *   - float to integer: what PyTorch's CPU backend gives on x86, where a
 *     conversion truncates toward zero in range and returns the "integer
 *     indefinite" value (the most negative one) out of range or for NaN
 *     (cvttss2si / cvttsd2si). int64 and uint8 convert through int64 (out
 *     of range: INT64_MIN); int32, int16 and int8 through int32 (out of
 *     range: INT32_MIN); the narrower types then keep the low bits. So 3e9
 *     gives INT32_MIN as int32 and 0 as int8, 300.7 gives 44 as int8 and
 *     uint8, -1 gives 255 as uint8. The CPU backend's vectorised and scalar
 *     paths agree on this (measured on torch 2.13 for every float/integer
 *     pair, sizes 1 to 40000, contiguous and strided). The device gives
 *     these bytes on every host (PyTorch on an ARM host saturates
 *     instead). Every case is computed explicitly, never by an
 *     out-of-range C cast (undefined behaviour).
 *   - integer to narrower integer: keep the low bits (wrapping).
 *   - to bool: value != 0 (NaN is true); bool loads read any nonzero byte
 *     as true and bool stores write exactly 0 or 1.
 * Accesses go through memcpy so that they have no alignment or aliasing
 * requirements beyond the bytes being there. */
#ifndef TPU_KERNELS_STRIDED_H
#define TPU_KERNELS_STRIDED_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tpu/dtype.h"
#include "tpu/op.h"

/* Most operands one iterator walks together (out and three inputs). */
#define TPU_K_MAX_OPERANDS 4

/* Walks a shape in row-major order, keeping the element offset of each
 * operand (in elements, from its data pointer). */
typedef struct {
    int32_t ndim;
    int32_t n_ops;
    int64_t sizes[TPU_MAX_DIMS];
    int64_t idx[TPU_MAX_DIMS];
    int64_t strides[TPU_K_MAX_OPERANDS][TPU_MAX_DIMS];
    int64_t off[TPU_K_MAX_OPERANDS];
} tpu_k_iter;

/* Positions `it` at row-major index `start` of the shape (ndim, sizes),
 * for n_ops operands whose strides are strides[0..n_ops-1]. start must be
 * < the shape's element count unless that count is 0 (then `it` must not
 * be advanced). ndim 0 is a single element at offset 0. */
void tpu_k_iter_init(tpu_k_iter *it, int32_t ndim, const int64_t *sizes, int32_t n_ops,
                     const int64_t *const *strides, int64_t start);

/* Advances to the next row-major element; after the last one it wraps to
 * the first (callers count elements, they do not test for the end). */
void tpu_k_iter_next(tpu_k_iter *it);

/* Elements left in the current innermost row, counting the current one
 * (1 for ndim 0). Lets fast paths process a row run with plain strides:
 * element j of the run is at off[k] + j * strides[k][ndim - 1]. */
int64_t tpu_k_iter_row_left(const tpu_k_iter *it);

/* Advances by n elements, 1 <= n <= tpu_k_iter_row_left(it): within the
 * row, then (if the row is finished) on to the next one. */
void tpu_k_iter_advance_in_row(tpu_k_iter *it, int64_t n);

/* A shape walked by several operands, reduced to its fewest dims: dims of
 * size 1 are dropped and neighbours d, d+1 merge wherever every operand
 * has strides[d] == strides[d+1] * sizes[d+1]. Row-major element i of the
 * result is row-major element i of the original for every operand, so
 * splits by element index stay valid. ndim 0 stays 0; a shape with a zero
 * size keeps that zero. */
typedef struct {
    int32_t ndim;
    int32_t n_ops;
    int64_t sizes[TPU_MAX_DIMS];
    int64_t strides[TPU_K_MAX_OPERANDS][TPU_MAX_DIMS];
} tpu_k_shape;

/* Fills s from the shape (ndim, sizes) and the n_ops operands' strides,
 * coalesced as described above. */
void tpu_k_shape_coalesce(tpu_k_shape *s, int32_t ndim, const int64_t *sizes, int32_t n_ops,
                          const int64_t *const *strides);

/* Number of elements of a tensor; 0 if a size is <= 0, INT64_MAX if the
 * product overflows (tpu_op_check rejects both). */
int64_t tpu_k_numel(const tpu_tensor *t);

/* True if t's elements fill exactly offsets [0, numel) of its data with
 * non-negative strides (row-major, or any permutation of it). Dims of size
 * 1 do not matter. Such a tensor can be walked as a flat array. */
bool tpu_k_is_dense(const tpu_tensor *t);

/* True if dims [first, ndim) of t are row-major contiguous: in every one
 * of size > 1 the stride is the product of the sizes after it (dims of
 * size 1 do not matter). first = 0: the whole tensor is a row-major
 * array. */
bool tpu_k_is_row_major_from(const tpu_tensor *t, int32_t first);

/* True if t has the same strides as `like` in every dim of size > 1 (the
 * two have the same sizes): element i of both lives at the same offset. */
bool tpu_k_same_layout(const tpu_tensor *t, const tpu_tensor *like);

/* True if every dim of size > 1 has stride 0: all elements are one value. */
bool tpu_k_is_scalar_broadcast(const tpu_tensor *t);

/* True if t can be walked as a flat array next to a dense `o` of the same
 * sizes: laid out like o (*step = 1), or one value broadcast to every
 * element (*step = 0). The element-wise fast paths' common case. */
bool tpu_k_flat_step(const tpu_tensor *t, const tpu_tensor *o, int64_t *step);

/* True if t's data is aligned to its element size. Fast paths that use
 * typed pointers need it; host memory (COPY's input) may lack it, and the
 * reference paths, which go through memcpy, do not care. */
static inline bool tpu_k_is_aligned(const tpu_tensor *t) {
    return (uintptr_t)t->data % tpu_dtype_size(t->dtype) == 0;
}

/* Splits n items into nth contiguous, balanced ranges and returns share
 * ith in [*start, *end). Depends only on (n, ith, nth). */
void tpu_k_split(int64_t n, int ith, int nth, int64_t *start, int64_t *end);

/* Address of element offset `off` (in elements) of t. */
static inline char *tpu_k_ptr(const tpu_tensor *t, int64_t off) {
    return (char *)t->data + off * (int64_t)tpu_dtype_size(t->dtype);
}

/* --------------------------------------------------- scalar conversions */

/* Float -> int64 as x86's cvttsd2si: truncation toward zero where the
 * result fits ([-2^63, 2^63)), INT64_MIN out of range and for NaN. */
static inline int64_t tpu_k_f64_to_i64(double v) {
    if (v >= -0x1p63 && v < 0x1p63)
        return (int64_t)v;
    return INT64_MIN;
}

/* Float -> int32 as x86's cvttsd2si with a 32-bit destination: truncation
 * toward zero where the result fits (v in (-2^31 - 1, 2^31)), INT32_MIN
 * out of range and for NaN (both comparisons are false for NaN). */
static inline int32_t tpu_k_f64_to_i32(double v) {
    if (v > -0x1p31 - 1.0 && v < 0x1p31)
        return (int32_t)v;
    return INT32_MIN;
}

/* Float -> integer dtype dt per the rules above, as an int64 whose low
 * bits tpu_k_store_i64 keeps for dt: through int32 for i32/i16/i8,
 * through int64 for i64/u8; bool is v != 0 (NaN is true). Integer
 * compute types and stores of float values into integers all go through
 * here, so every op converts as PyTorch's CPU backend does. */
static inline int64_t tpu_k_f64_to_int(double v, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_I32:
    case TPU_DTYPE_I16:
    case TPU_DTYPE_I8: return tpu_k_f64_to_i32(v);
    case TPU_DTYPE_BOOL: return v != 0.0;
    default: return tpu_k_f64_to_i64(v);
    }
}

/* uint64 -> int64 keeping the bits (two's complement), without relying on
 * implementation-defined conversion. */
static inline int64_t tpu_k_u64_to_i64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* Rounds an f32 to bf16 precision and back: the TPU matrix unit's view. */
static inline float tpu_k_round_bf16(float x) {
    return tpu_bf16_to_f32(tpu_f32_to_bf16(x));
}

/* ------------------------------------------------------------- loads */

/* Loads one element of dtype dt as int64 (floats through int64, see
 * tpu_k_f64_to_i64). */
static inline int64_t tpu_k_load_i64(const void *p, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F32: { float v; memcpy(&v, p, 4); return tpu_k_f64_to_i64(v); }
    case TPU_DTYPE_F64: { double v; memcpy(&v, p, 8); return tpu_k_f64_to_i64(v); }
    case TPU_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); return tpu_k_f64_to_i64(tpu_f16_to_f32(v)); }
    case TPU_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return tpu_k_f64_to_i64(tpu_bf16_to_f32(v)); }
    case TPU_DTYPE_I8: { int8_t v; memcpy(&v, p, 1); return v; }
    case TPU_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TPU_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TPU_DTYPE_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case TPU_DTYPE_U8: { uint8_t v; memcpy(&v, p, 1); return v; }
    case TPU_DTYPE_BOOL: { uint8_t v; memcpy(&v, p, 1); return v != 0; }
    default: assert(!"dtype validated by tpu_op_check"); return 0;
    }
}

/* Loads one element as f32 (the compute type of f32/f16/bf16 outputs). */
static inline float tpu_k_load_f32(const void *p, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F32: { float v; memcpy(&v, p, 4); return v; }
    case TPU_DTYPE_F64: { double v; memcpy(&v, p, 8); return (float)v; }
    case TPU_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); return tpu_f16_to_f32(v); }
    case TPU_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return tpu_bf16_to_f32(v); }
    default: return (float)tpu_k_load_i64(p, dt);
    }
}

/* Loads one element as f64 (the compute type of f64 outputs). */
static inline double tpu_k_load_f64(const void *p, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F64: { double v; memcpy(&v, p, 8); return v; }
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: return tpu_k_load_f32(p, dt);
    default: return (double)tpu_k_load_i64(p, dt);
    }
}

/* Loads one element as bool (value != 0; NaN is true). */
static inline bool tpu_k_load_bool(const void *p, tpu_dtype dt) {
    switch (dt) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: return tpu_k_load_f32(p, dt) != 0.0f;
    case TPU_DTYPE_F64: return tpu_k_load_f64(p, dt) != 0.0;
    default: return tpu_k_load_i64(p, dt) != 0;
    }
}

/* Loads one element of dtype dt as the integer compute value (int64) of
 * an integer or bool output of dtype odt: integers as they are, floats
 * converted to odt as PyTorch's CPU backend converts them (its integer
 * kernels cast every input to the output dtype first). */
static inline int64_t tpu_k_load_int(const void *p, tpu_dtype dt, tpu_dtype odt) {
    switch (dt) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F64:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: return tpu_k_f64_to_int(tpu_k_load_f64(p, dt), odt);
    default: return tpu_k_load_i64(p, dt);
    }
}

/* ------------------------------------------------------------ stores */

/* Stores an int64 into dtype dt: narrower integers wrap, floats round. */
static inline void tpu_k_store_i64(void *p, tpu_dtype dt, int64_t v) {
    uint64_t u = (uint64_t)v; /* the low bits, for wrapping narrowing */
    switch (dt) {
    case TPU_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case TPU_DTYPE_F64: { double f = (double)v; memcpy(p, &f, 8); return; }
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); return; }
    case TPU_DTYPE_BF16: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    case TPU_DTYPE_I8:
    case TPU_DTYPE_U8: { uint8_t b = (uint8_t)u; memcpy(p, &b, 1); return; }
    case TPU_DTYPE_I16: { uint16_t b = (uint16_t)u; memcpy(p, &b, 2); return; }
    case TPU_DTYPE_I32: { uint32_t b = (uint32_t)u; memcpy(p, &b, 4); return; }
    case TPU_DTYPE_I64: memcpy(p, &v, 8); return;
    case TPU_DTYPE_BOOL: { uint8_t b = v != 0; memcpy(p, &b, 1); return; }
    default: assert(!"dtype validated by tpu_op_check"); return;
    }
}

/* Stores an f32 into dtype dt, rounding once for f16/bf16. */
static inline void tpu_k_store_f32(void *p, tpu_dtype dt, float v) {
    switch (dt) {
    case TPU_DTYPE_F32: memcpy(p, &v, 4); return;
    case TPU_DTYPE_F64: { double d = v; memcpy(p, &d, 8); return; }
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16(v); memcpy(p, &h, 2); return; }
    case TPU_DTYPE_BF16: { uint16_t h = tpu_f32_to_bf16(v); memcpy(p, &h, 2); return; }
    case TPU_DTYPE_BOOL: { uint8_t b = v != 0.0f; memcpy(p, &b, 1); return; }
    default: tpu_k_store_i64(p, dt, tpu_k_f64_to_int(v, dt)); return;
    }
}

/* Stores an f64 into dtype dt (f64 -> f32 -> f16/bf16, see above). */
static inline void tpu_k_store_f64(void *p, tpu_dtype dt, double v) {
    switch (dt) {
    case TPU_DTYPE_F64: memcpy(p, &v, 8); return;
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: tpu_k_store_f32(p, dt, (float)v); return;
    case TPU_DTYPE_BOOL: { uint8_t b = v != 0.0; memcpy(p, &b, 1); return; }
    default: tpu_k_store_i64(p, dt, tpu_k_f64_to_int(v, dt)); return;
    }
}

/* Stores a bool as 0 or 1 of dtype dt. */
static inline void tpu_k_store_bool(void *p, tpu_dtype dt, bool v) {
    tpu_k_store_i64(p, dt, v ? 1 : 0);
}

#endif
