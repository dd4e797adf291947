/* Interpolation tables (tpu_interp_taps, tpu_interp_table): the taps and
 * weights of one dim of PyTorch's linear, cubic and antialiased
 * interpolation, for the INDEX INTERP records. They are small (out_size
 * rows of a few taps) and computed on the host, in the same type and by
 * the same formulas as PyTorch's CPU backend, so that the device reads the
 * same positions with the same weights. */
#include <math.h>
#include <stddef.h>

#include "kernels_internal.h"
#include "strided.h"

/* Which multiply-adds of a table PyTorch's CPU build rounds once: the
 * source position scale * (o + 0.5) - 0.5, and the stages of the two
 * pieces of the cubic kernel (see cubic1 and cubic2). Its kernels under
 * native/cpu are compiled with FMA and the compiler fused some of these
 * (differently where a function is inlined into different callers); the
 * bicubic backward lives elsewhere and fuses none. Measured against
 * PyTorch 2.13 on x86-64 with one-hot inputs, for float and double. */
typedef struct {
    bool src;
    bool c1[2], c2[3];
} fusing;

static const fusing k_fusing_forward = {true, {true, false}, {true, true, false}};
static const fusing k_fusing_cubic_backward = {false, {false, false}, {false, false, false}};
static const fusing k_fusing_aa = {false, {true, true}, {true, true, true}};

#define REAL float
#define SFX(name) name##_f32
#define FMA fmaf
#include "interp_table_body.h"
#undef REAL
#undef SFX
#undef FMA

#define REAL double
#define SFX(name) name##_f64
#define FMA fma
#include "interp_table_body.h"
#undef REAL
#undef SFX
#undef FMA

static bool spec_ok(const tpu_interp_spec *s) {
    return s != NULL && (unsigned)s->mode < (unsigned)TPU_INTERP_COUNT && s->in_size >= 1 &&
           s->out_size >= 1 && (unsigned)s->dtype < (unsigned)TPU_DTYPE_COUNT &&
           tpu_dtype_is_float(s->dtype);
}

int64_t tpu_interp_taps(const tpu_interp_spec *spec) {
    if (!spec_ok(spec))
        return 0;
    switch (spec->mode) {
    case TPU_INTERP_LINEAR: return 2;
    case TPU_INTERP_CUBIC: return 4;
    default: return spec->dtype == TPU_DTYPE_F64 ? aa_taps_f64(spec) : aa_taps_f32(spec);
    }
}

tpu_status tpu_interp_table(const tpu_interp_spec *spec, int64_t taps, int64_t *idx, void *w) {
    if (!spec_ok(spec))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_interp_table: invalid spec (mode %d, sizes "
                             "%lld -> %lld, dtype %d)", spec ? (int)spec->mode : -1,
                             spec ? (long long)spec->in_size : 0LL,
                             spec ? (long long)spec->out_size : 0LL, spec ? (int)spec->dtype : -1);
    int64_t want = tpu_interp_taps(spec);
    if (taps != want || idx == NULL || w == NULL)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_interp_table: %lld taps (expected %lld), "
                             "idx %p, w %p", (long long)taps, (long long)want, (void *)idx, w);
    if (spec->dtype == TPU_DTYPE_F64)
        table_f64(spec, taps, idx, (double *)w);
    else
        table_f32(spec, taps, idx, (float *)w);
    return TPU_OK;
}
