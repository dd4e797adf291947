/* The interpolation tables of interp_table.c, written once over PyTorch's
 * opmath type and included once per type. Not a header to include
 * elsewhere.
 *
 * The includer defines:
 *   REAL       float or double: the type PyTorch's CPU backend computes the
 *              table in (opmath_type; scalar_t for the antialiased modes,
 *              which exist for f32 and f64 only)
 *   SFX(name)  the name with the type's suffix
 *   FMA        fmaf or fma
 * and the fusing tables k_fusing_*.
 *
 * Every expression mirrors the C++ it comes from type for type: where
 * PyTorch mixes a float with a double literal (center = scale * (i +
 * 0.5)), the double operation is written out and rounded back to REAL
 * where the C++ assigns it to a scalar_t. */

/* area_pixel_compute_scale: the step between source positions. */
static REAL SFX(area_scale)(const tpu_interp_spec *s) {
    if (s->align_corners)
        return s->out_size > 1 ? (REAL)(s->in_size - 1) / (REAL)(s->out_size - 1) : (REAL)0;
    /* compute_scales_value: the caller's factor when it is > 0. */
    return s->scale > 0.0 ? (REAL)(1.0 / s->scale) : (REAL)s->in_size / (REAL)s->out_size;
}

/* a * b + c, rounded once when `fused` (PyTorch's compiler made it a
 * fused multiply-add), else twice. */
static REAL SFX(mad)(REAL a, REAL b, REAL c, bool fused) {
    if (fused)
        return FMA(a, b, c);
    REAL p = a * b;
    return p + c;
}

/* area_pixel_compute_source_index: where output position o reads; the
 * linear modes clamp a negative position to 0. */
static REAL SFX(source_index)(REAL scale, int64_t o, bool align_corners, bool cubic, bool fused) {
    if (align_corners)
        return scale * (REAL)o;
    REAL src = SFX(mad)(scale, (REAL)o + (REAL)0.5, (REAL)-0.5, fused);
    return !cubic && src < (REAL)0 ? (REAL)0 : src;
}

/* guard_index_and_lambda: floor of the position (through floorf, as
 * PyTorch's does for both types), at most in_size - 1, and the fraction
 * past it clamped into [0, 1] (NaN stays NaN). */
static int64_t SFX(guard)(REAL real, int64_t in_size, REAL *lambda) {
    int64_t i = tpu_k_f64_to_i64((double)floorf((float)real));
    if (i > in_size - 1)
        i = in_size - 1;
    REAL l = real - (REAL)i;
    l = l < (REAL)0 ? (REAL)0 : l;
    *lambda = (REAL)1 < l ? (REAL)1 : l;
    return i;
}

/* Keys' cubic convolution for |x| <= 1, ((a + 2) x - (a + 3)) x x + 1,
 * and for 1 < |x| < 2, ((a x - 5 a) x + 8 a) x - 4 a, with the fusing
 * of f's stages. */
static REAL SFX(cubic1)(REAL x, REAL a, const fusing *f) {
    REAL p = SFX(mad)(a + 2, x, -(a + 3), f->c1[0]);
    return SFX(mad)(p * x, x, (REAL)1, f->c1[1]);
}

static REAL SFX(cubic2)(REAL x, REAL a, const fusing *f) {
    REAL p = SFX(mad)(a, x, -(5 * a), f->c2[0]);
    REAL q = SFX(mad)(p, x, 8 * a, f->c2[1]);
    return SFX(mad)(q, x, -(4 * a), f->c2[2]);
}

/* The weight as stored: in the f16/bf16 dtype when asked. */
static REAL SFX(stored)(const tpu_interp_spec *s, REAL w) {
    if (!s->round_weights || s->dtype == TPU_DTYPE_F32 || s->dtype == TPU_DTYPE_F64)
        return w;
    float f = (float)w;
    return (REAL)(s->dtype == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(tpu_f32_to_bf16(f))
                                             : tpu_f16_to_f32(tpu_f32_to_f16(f)));
}

/* The antialiasing filters (PIL's): triangle, and Keys' cubic with
 * A = -0.5. */
static REAL SFX(aa_filter)(tpu_interp_mode mode, REAL x) {
    x = x < 0 ? -x : x;
    if (mode == TPU_INTERP_LINEAR_AA)
        return x < 1.0 ? (REAL)(1.0 - (double)x) : (REAL)0;
    if (x < 1.0)
        return SFX(cubic1)(x, (REAL)-0.5, &k_fusing_aa);
    if (x < 2.0)
        return SFX(cubic2)(x, (REAL)-0.5, &k_fusing_aa);
    return (REAL)0;
}

/* The support of an antialiased filter: half its width, widened by the
 * scale when downsampling. */
static REAL SFX(aa_support)(tpu_interp_mode mode, REAL scale) {
    double half = mode == TPU_INTERP_LINEAR_AA ? 1.0 : 2.0; /* interp_size * 0.5 */
    return (REAL)(scale >= 1.0 ? half * (double)scale : half);
}

/* Taps of an antialiased table: ceil(support) * 2 + 1, at most in_size
 * (a row's taps lie inside the input, so no row needs more). */
static int64_t SFX(aa_taps)(const tpu_interp_spec *s) {
    double width = ceil((double)SFX(aa_support)(s->mode, SFX(area_scale)(s))) * 2 + 1;
    return !(width < (double)s->in_size) ? s->in_size : (int64_t)width;
}

/* One row of an antialiased table (_compute_indices_min_size_weights_aa):
 * the taps xmin .. xmin + xsize - 1 weighted by the filter at their
 * distance from the center, normalised to sum 1; the rest absent. */
static void SFX(aa_row)(const tpu_interp_spec *s, REAL scale, REAL support, int64_t max_taps,
                        int64_t taps, int64_t o, int64_t *idx, REAL *w) {
    REAL center = (REAL)((double)scale * ((double)o + 0.5));
    REAL invscale = scale >= 1.0 ? (REAL)(1.0 / (double)scale) : (REAL)1.0;
    int64_t xmin = tpu_k_f64_to_i64((double)(center - support) + 0.5);
    xmin = xmin > 0 ? xmin : 0;
    int64_t xend = tpu_k_f64_to_i64((double)(center + support) + 0.5);
    int64_t xsize = (xend < s->in_size ? xend : s->in_size) - xmin;
    xsize = xsize < 0 ? 0 : xsize > max_taps ? max_taps : xsize;
    REAL total = 0;
    for (int64_t j = 0; j < xsize; j++) {
        double arg = ((double)((REAL)(j + xmin) - center) + 0.5) * (double)invscale;
        w[j] = SFX(aa_filter)(s->mode, (REAL)arg);
        total += w[j];
        idx[j] = xmin + j;
    }
    for (int64_t j = 0; total != 0 && j < xsize; j++)
        w[j] /= total;
    for (int64_t j = xsize; j < taps; j++) {
        idx[j] = -1;
        w[j] = 0;
    }
}

/* idx into [0, in_size - 1], without overflow for any i. */
static int64_t SFX(clamp_index)(int64_t i, int64_t in_size) {
    return i < 0 ? 0 : i > in_size - 1 ? in_size - 1 : i;
}

static void SFX(table)(const tpu_interp_spec *s, int64_t taps, int64_t *idx, REAL *w) {
    const REAL scale = SFX(area_scale)(s);
    const int64_t in = s->in_size;
    const fusing *f = s->backward && s->mode == TPU_INTERP_CUBIC ? &k_fusing_cubic_backward
                                                                 : &k_fusing_forward;
    if (s->mode == TPU_INTERP_LINEAR_AA || s->mode == TPU_INTERP_CUBIC_AA) {
        const REAL support = SFX(aa_support)(s->mode, scale);
        double width = ceil((double)support) * 2 + 1; /* PyTorch's clamp of a row's taps */
        const int64_t max_taps = width < (double)taps ? (int64_t)width : taps;
        for (int64_t o = 0; o < s->out_size; o++)
            SFX(aa_row)(s, scale, support, max_taps, taps, o, idx + o * taps, w + o * taps);
        return;
    }
    for (int64_t o = 0; o < s->out_size; o++) {
        int64_t *ix = idx + o * taps;
        REAL *wt = w + o * taps;
        if (s->mode == TPU_INTERP_LINEAR) {
            if (s->out_size == in) { /* PyTorch's shortcut: the same position */
                ix[0] = ix[1] = o;
                wt[0] = 1;
                wt[1] = 0;
                continue;
            }
            REAL l1;
            int64_t i0 = SFX(guard)(SFX(source_index)(scale, o, s->align_corners, false, f->src), in,
                                    &l1);
            l1 = SFX(stored)(s, l1);
            int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
            ix[0] = SFX(clamp_index)(i0, in);
            ix[1] = SFX(clamp_index)(i1, in);
            wt[0] = SFX(stored)(s, (REAL)1 - l1);
            wt[1] = l1;
            continue;
        }
        /* CUBIC (get_cubic_upsample_coefficients, A = -0.75). */
        REAL t;
        int64_t i = SFX(guard)(SFX(source_index)(scale, o, s->align_corners, true, f->src), in, &t);
        const REAL a = (REAL)-0.75;
        const REAL x2 = (REAL)(1.0 - (double)t);
        const REAL c[4] = {SFX(cubic2)((REAL)((double)t + 1.0), a, f), SFX(cubic1)(t, a, f),
                           SFX(cubic1)(x2, a, f), SFX(cubic2)((REAL)((double)x2 + 1.0), a, f)};
        i = i < -4 ? -4 : i; /* keeps i - 1 + j from overflowing */
        for (int j = 0; j < 4; j++) {
            ix[j] = SFX(clamp_index)(i - 1 + j, in);
            wt[j] = SFX(stored)(s, c[j]);
        }
    }
}
