/* Integer and bool runs staged through int64 chunks, for the element-wise
 * families' flat runs (ew.h): loads as tpu_k_ew_load_i64 / tpu_k_load_bool
 * do them and stores as tpu_k_store_i64 does, one loop per dtype (the
 * dtype fixed in each, so the inlined load and store switches fold away
 * and the compiler can vectorise), so the bytes are the reference's. */
#include "ew.h"

#include "kernels_internal.h"

/* One loop per input dtype: dst[i] = LOAD(src + i * size, DT). */
#define EACH_DTYPE_LOAD(LOAD)                                                                      \
    switch (dt) {                                                                                  \
    case TPU_DTYPE_F32: LOOP(TPU_DTYPE_F32, LOAD); return dst;                                         \
    case TPU_DTYPE_F64: LOOP(TPU_DTYPE_F64, LOAD); return dst;                                         \
    case TPU_DTYPE_F16: LOOP(TPU_DTYPE_F16, LOAD); return dst;                                         \
    case TPU_DTYPE_BF16: LOOP(TPU_DTYPE_BF16, LOAD); return dst;                                       \
    case TPU_DTYPE_I8: LOOP(TPU_DTYPE_I8, LOAD); return dst;                                           \
    case TPU_DTYPE_I16: LOOP(TPU_DTYPE_I16, LOAD); return dst;                                         \
    case TPU_DTYPE_I32: LOOP(TPU_DTYPE_I32, LOAD); return dst;                                         \
    case TPU_DTYPE_I64: LOOP(TPU_DTYPE_I64, LOAD); return dst;                                         \
    case TPU_DTYPE_U8: LOOP(TPU_DTYPE_U8, LOAD); return dst;                                           \
    default: LOOP(TPU_DTYPE_BOOL, LOAD); return dst;                                                   \
    }

#define LOOP(DT, LOAD)                                                                             \
    do {                                                                                           \
        const char *p = src;                                                                       \
        const int64_t es = (int64_t)tpu_dtype_size(DT);                                            \
        for (int64_t i = 0; i < len; i++)                                                          \
            dst[i] = LOAD(p + i * es, DT);                                                         \
    } while (0)

#define LOAD_INT(p, DT) tpu_k_ew_load_i64(p, DT, common)
#define LOAD_BOOL(p, DT) (int64_t)tpu_k_load_bool(p, DT)

const int64_t *tpu_k_ew_stage_i64(const char *src, tpu_dtype dt, int64_t step, int64_t n,
                                  tpu_dtype common, int64_t *dst) {
    const int64_t len = step ? n : 1;
    if (dt == TPU_DTYPE_I64 && common == TPU_DTYPE_I64)
        return (const int64_t *)src;
    if (common == TPU_DTYPE_BOOL) {
        EACH_DTYPE_LOAD(LOAD_BOOL)
    }
    EACH_DTYPE_LOAD(LOAD_INT)
}
#undef LOOP
#undef LOAD_INT
#undef LOAD_BOOL
#undef EACH_DTYPE_LOAD

#define STORE_LOOP(DT)                                                                             \
    do {                                                                                           \
        char *p = dst;                                                                             \
        const int64_t es = (int64_t)tpu_dtype_size(DT);                                            \
        for (int64_t i = 0; i < n; i++)                                                            \
            tpu_k_store_i64(p + i * es, DT, src[i]);                                               \
    } while (0);                                                                                   \
    return

void tpu_k_ew_store_i64(char *dst, tpu_dtype dt, const int64_t *src, int64_t n) {
    switch (dt) {
    case TPU_DTYPE_F32: STORE_LOOP(TPU_DTYPE_F32);
    case TPU_DTYPE_F64: STORE_LOOP(TPU_DTYPE_F64);
    case TPU_DTYPE_F16: STORE_LOOP(TPU_DTYPE_F16);
    case TPU_DTYPE_BF16: STORE_LOOP(TPU_DTYPE_BF16);
    case TPU_DTYPE_I8: STORE_LOOP(TPU_DTYPE_I8);
    case TPU_DTYPE_I16: STORE_LOOP(TPU_DTYPE_I16);
    case TPU_DTYPE_I32: STORE_LOOP(TPU_DTYPE_I32);
    case TPU_DTYPE_I64: STORE_LOOP(TPU_DTYPE_I64);
    case TPU_DTYPE_U8: STORE_LOOP(TPU_DTYPE_U8);
    default: STORE_LOOP(TPU_DTYPE_BOOL);
    }
}
#undef STORE_LOOP

#define LOOP(DT)                                                                                   \
    do {                                                                                           \
        const int64_t es = (int64_t)tpu_dtype_size(DT);                                            \
        for (int64_t i = 0; i < len; i++)                                                          \
            dst[i] = tpu_k_load_f64(src + i * es, DT);                                             \
    } while (0);                                                                                   \
    return dst

const double *tpu_k_ew_stage_f64(const char *src, tpu_dtype dt, int64_t step, int64_t n,
                                 double *dst) {
    const int64_t len = step ? n : 1;
    switch (dt) {
    case TPU_DTYPE_F64: return (const double *)src;
    case TPU_DTYPE_F32: LOOP(TPU_DTYPE_F32);
    case TPU_DTYPE_F16: LOOP(TPU_DTYPE_F16);
    case TPU_DTYPE_BF16: LOOP(TPU_DTYPE_BF16);
    case TPU_DTYPE_I8: LOOP(TPU_DTYPE_I8);
    case TPU_DTYPE_I16: LOOP(TPU_DTYPE_I16);
    case TPU_DTYPE_I32: LOOP(TPU_DTYPE_I32);
    case TPU_DTYPE_I64: LOOP(TPU_DTYPE_I64);
    case TPU_DTYPE_U8: LOOP(TPU_DTYPE_U8);
    default: LOOP(TPU_DTYPE_BOOL);
    }
}
#undef LOOP
