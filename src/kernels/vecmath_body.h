/* The algorithms of vecmath.c, written once over a lane type and
 * included once per ISA level. Not a header to include elsewhere.
 *
 * The includer defines:
 *   VM_SFX(name)  the name with the level's suffix (name##_avx2, ...)
 *   VM_ATTR       storage and target attribute of every function here
 *   VM_LANES      lanes per vector
 *   VF, VI, VM    float vector, int32 vector, lane mask
 *   the lane operations used below, each one IEEE operation per lane
 *   (vfma is a fused multiply-add, rounded once), so every level computes
 *   the same bits:
 *     vc(f) vic(i)                  broadcast
 *     vadd vsub vmul vdiv vfma      arithmetic
 *     vmin(a,b) = a<b?a:b, vmax(a,b) = a>b?a:b
 *     vand vor vxor                 bitwise on floats
 *     vbits vfloat                  reinterpret float <-> int32
 *     vcvt                          int32 -> float (exact here)
 *     viadd visub viand vsll vsra   int32 (shift counts are constants)
 *     vlt vle veq vnan vieq vmor    lane masks (vnan: unordered)
 *     vsel(m,a,b) = m?a:b, vany(m)  select, any lane set
 *     vcvtt                         float -> int32, truncating (in range here)
 *     vilt                          int32 a < b, as a lane mask
 *     vlut8(i, table)               table[i] for i in [0, 8) (low 3 bits)
 *     vload vstore                  unaligned load and store
 *
 * Error budgets below are in ulp of the result; the measured maxima are
 * in vecmath.c's table. */

/* -------------------------------------------------- shared pieces */

/* Sign bit and magnitude. */
VM_ATTR VF VM_SFX(vabs)(VF x) { return vand(x, vfloat(vic(0x7fffffff))); }
VM_ATTR VF VM_SFX(vsign)(VF x) { return vand(x, vfloat(vic((int32_t)0x80000000u))); }

/* 2^n for n in [-126, 127], built from the exponent field. */
VM_ATTR VF VM_SFX(vpow2i)(VI n) { return vfloat(vsll(viadd(n, vic(127)), 23)); }

/* NaN in -> the same NaN out (quieted): x + x, the same bits on every
 * level, whatever the algorithm made of the NaN. */
VM_ATTR VF VM_SFX(vnanfix)(VF x, VF y) { return vsel(vnan(x), vadd(x, x), y); }

/* Cody-Waite reduction by ln 2: x = n ln2 + r, |r| <= ln2/2 (a hair
 * more where x log2(e) rounds up). n = round(x log2 e) comes from adding
 * 1.5 * 2^23, which leaves n in the low mantissa bits (|n| < 2^22).
 * LN2_HI = float(ln 2): with the FMA, n * LN2_HI is exact inside the
 * operation and x - n LN2_HI is exact (Sterbenz-like: it has at most 23
 * significant bits for |n| <= 150), so r's only rounding is in the
 * second step, n * LN2_LO, 2^-29 relative. */
VM_ATTR VF VM_SFX(vreduce_ln2)(VF x, VI *n) {
    VF k = vfma(x, vc(0x1.715476p+0f), vc(0x1.8p23f));
    *n = visub(vbits(k), vbits(vc(0x1.8p23f)));
    VF nf = vsub(k, vc(0x1.8p23f));
    VF r = vfma(nf, vc(-0x1.62e43p-1f), x);
    return vfma(nf, vc(0x1.05c61p-29f), r);
}

/* e^r - 1 for |r| <= 0.354: r + r^2 Q(r), Q a degree-4 minimax fit
 * (Lawson iteration, coefficients rounded to float one at a time and the
 * rest refit) of (e^r - 1 - r) / r^2, relative error 2^-26 of e^r - 1.
 * The leading r is exact, so the result is within ~0.6 ulp. */
VM_ATTR VF VM_SFX(vexpm1_kernel)(VF r) {
    VF q = vc(0x1.6baf5ap-10f);
    q = vfma(q, r, vc(0x1.1230c8p-7f));
    q = vfma(q, r, vc(0x1.5556ecp-5f));
    q = vfma(q, r, vc(0x1.5554a6p-3f));
    q = vfma(q, r, vc(0x1.fffffep-2f));
    return vfma(vmul(r, r), q, r);
}

/* e^x for x already clamped to [-104, 89]: 2^n (1 + em) with the scale
 * split as 2^n1 2^n2, so both factors are normal floats; the first
 * product is exact, the second rounds once (into the subnormals, or to
 * infinity, exactly as the true result would). */
VM_ATTR VF VM_SFX(vexp_clamped)(VF x) {
    VI n;
    VF em = VM_SFX(vexpm1_kernel)(VM_SFX(vreduce_ln2)(x, &n));
    VI n1 = vsra(n, 1);
    VF s1 = VM_SFX(vpow2i)(n1);
    VF s2 = VM_SFX(vpow2i)(visub(n, n1));
    return vmul(vfma(em, s1, s1), s2);
}

/* -------------------------------------------------- exp, expm1 */

/* Below -104 the result rounds to 0, above 89 to infinity; clamping
 * there keeps n in range and handles the infinities. */
VM_ATTR VF VM_SFX(k_exp)(VF x) {
    VF xc = vmin(vmax(x, vc(-104.0f)), vc(89.0f));
    return VM_SFX(vnanfix)(x, VM_SFX(vexp_clamped)(xc));
}

/* e^x - 1 = 2^n (1 + em) - 1 = 2 (t em + (t - 1/2)) with t = 2^(n-1):
 * one rounding in the FMA, then an exact doubling (which also reaches
 * infinity for n = 128 without forming 2^128). t - 1/2 is exact for
 * -23 <= n <= 24; outside, it is a half-ulp-sized rounding of a term
 * that only moves the result by far less. Below -17.5 the result rounds
 * to -1; above 88.8 to infinity. For |x| < 2^-25 the result is x
 * (x^2/2 is under half an ulp), which also keeps the sign of zero. */
VM_ATTR VF VM_SFX(k_expm1)(VF x) {
    VF xc = vmin(vmax(x, vc(-17.5f)), vc(88.8f));
    VI n;
    VF em = VM_SFX(vexpm1_kernel)(VM_SFX(vreduce_ln2)(xc, &n));
    VF t = VM_SFX(vpow2i)(visub(n, vic(1)));
    VF y = vmul(vfma(t, em, vsub(t, vc(0.5f))), vc(2.0f));
    y = vsel(vlt(VM_SFX(vabs)(x), vc(0x1p-25f)), x, y);
    return VM_SFX(vnanfix)(x, y);
}

/* -------------------------------------------------- log family */

/* Splits finite x > 0 (subnormals included: scaled by 2^23 first) into
 * 2^e m with m in [sqrt(1/2), sqrt(2)): subtracting the bits of
 * sqrt(1/2) makes the exponent field e exactly there. Returns f = m - 1,
 * exact (Sterbenz), in [-0.293, 0.415), and e as a float. */
VM_ATTR VF VM_SFX(vlog_split)(VF x, VF *ef) {
    VM den = vlt(x, vc(0x1p-126f));
    VF xs = vsel(den, vmul(x, vc(0x1p23f)), x);
    VI bits = vbits(xs);
    VI e = vsra(visub(bits, vic(0x3f3504f3)), 23);
    VF m = vfloat(visub(bits, vsll(e, 23)));
    *ef = vsub(vcvt(e), vsel(den, vc(23.0f), vc(0.0f)));
    return vsub(m, vc(1.0f));
}

/* log(1 + f) - f for f from vlog_split, as fdlibm arranges it: with
 * s = f / (2 + f), log(1 + f) = 2 atanh(s) = 2s + s R(s^2), and
 * 2s = f - s f gives log(1 + f) = f - hfsq + s (hfsq + R), hfsq = f^2/2.
 * R(z) = z (L1 + z (L2 + z L3)) is a minimax fit of
 * (2 atanh(s) - 2s) / s on s^2 <= 0.0295 (relative error 2^-30). The
 * correction is at most 0.09 while log(1 + f) is at least 0.35 where
 * it is that large, so its rounding errors cost under 0.2 ulp; near
 * f = 0 it is ~f^2/2 and the result keeps f's full relative accuracy. */
VM_ATTR VF VM_SFX(vlog1p_corr)(VF f) {
    VF s = vdiv(f, vadd(f, vc(2.0f)));
    VF z = vmul(s, s);
    VF rz = vfma(vc(0x1.3222b8p-2f), z, vc(0x1.995c9cp-2f));
    rz = vmul(z, vfma(rz, z, vc(0x1.55557cp-1f)));
    VF hfsq = vmul(vmul(f, vc(0.5f)), f);
    return vfma(s, vadd(hfsq, rz), vsub(vc(0.0f), hfsq));
}

/* e ln2 + f + corr (+ extra, a tiny term): e LN2_HI (13 significant
 * bits, so the product with |e| <= 150 is exact) plus f is summed with
 * its exact error (Fast2Sum: |e LN2_HI| >= 0.69 > |f| unless e = 0), so
 * the only large rounding is the final addition. */
VM_ATTR VF VM_SFX(vlog_finish)(VF ef, VF f, VF corr, VF extra) {
    VF a = vmul(ef, vc(0x1.62ep-1f));
    VF hi = vadd(a, f);
    VF err = vsub(f, vsub(hi, a));
    VF lo = vadd(vfma(ef, vc(0x1.0bfbe8p-15f), err), extra);
    return vadd(hi, vadd(corr, lo));
}

/* log: x < 0 -> NaN, log(+-0) = -inf, log(inf) = inf. */
VM_ATTR VF VM_SFX(k_log)(VF x) {
    VF ef;
    VF f = VM_SFX(vlog_split)(x, &ef);
    VF y = VM_SFX(vlog_finish)(ef, f, VM_SFX(vlog1p_corr)(f), vc(0.0f));
    y = vsel(vlt(x, vc(0.0f)), vc(NAN), y);
    y = vsel(veq(x, vc(0.0f)), vc(-INFINITY), y);
    y = vsel(veq(x, vc(INFINITY)), x, y);
    return VM_SFX(vnanfix)(x, y);
}

/* log2 = e + (f + corr) / ln 2. f / ln 2 is formed as ph + pl exactly
 * (1/ln2 = IH + IL, pl from an FMA) and added to e with Fast2Sum
 * (|e| >= 1 > |ph| unless e = 0), so powers of two give exact integers
 * and the result rounds about once. */
VM_ATTR VF VM_SFX(k_log2)(VF x) {
    VF ef;
    VF f = VM_SFX(vlog_split)(x, &ef);
    VF corr = VM_SFX(vlog1p_corr)(f);
    VF ph = vmul(f, vc(0x1.715476p+0f));
    VF pl = vfma(f, vc(0x1.715476p+0f), vsub(vc(0.0f), ph));
    VF lo = vfma(corr, vc(0x1.715476p+0f), vfma(f, vc(0x1.4ae0cp-26f), pl));
    VF hi = vadd(ef, ph);
    VF err = vsub(ph, vsub(hi, ef));
    VF y = vadd(hi, vadd(err, lo));
    y = vsel(vlt(x, vc(0.0f)), vc(NAN), y);
    y = vsel(veq(x, vc(0.0f)), vc(-INFINITY), y);
    y = vsel(veq(x, vc(INFINITY)), x, y);
    return VM_SFX(vnanfix)(x, y);
}

/* log1p: u = 1 + x rounded, with its exact error c (Fast2Sum with the
 * larger magnitude first); log(1 + x) = log(u) + c/u to far below an
 * ulp, and u's logarithm is taken as in log (u is never subnormal:
 * u = 0 or u >= 2^-24). x < -1 -> NaN, -1 -> -inf, inf -> inf, and
 * +-0 -> +-0. */
VM_ATTR VF VM_SFX(k_log1p)(VF x) {
    VM big = vlt(vc(1.0f), x);
    VF a = vsel(big, x, vc(1.0f));
    VF b = vsel(big, vc(1.0f), x);
    VF u = vadd(a, b);
    VF c = vsub(b, vsub(u, a));
    VF ef;
    VF f = VM_SFX(vlog_split)(u, &ef);
    VF y = VM_SFX(vlog_finish)(ef, f, VM_SFX(vlog1p_corr)(f), vdiv(c, u));
    y = vsel(vlt(x, vc(-1.0f)), vc(NAN), y);
    y = vsel(veq(x, vc(-1.0f)), vc(-INFINITY), y);
    y = vsel(veq(x, vc(INFINITY)), x, y);
    y = vsel(veq(x, vc(0.0f)), x, y);
    return VM_SFX(vnanfix)(x, y);
}

/* -------------------------------------------------- tanh, sigmoid */

/* |x| < 0.625: x + x^3 P(x^2), P a degree-5 minimax fit (relative error
 * 2^-32). Above: with em = expm1(2|x|), tanh = em / (em + 2), where em's
 * error is damped by 2 / (em + 2) <= 0.62; |x| is clamped at 10, where
 * tanh already rounds to 1. The sign is put back last (tanh(-0) = -0). */
VM_ATTR VF VM_SFX(k_tanh)(VF x) {
    VF ax = VM_SFX(vabs)(x);
    VF z = vmul(ax, ax);
    VF p = vc(0x1.1a27fep-9f);
    p = vfma(p, z, vc(-0x1.0c5ecep-7f));
    p = vfma(p, z, vc(0x1.63a55p-6f));
    p = vfma(p, z, vc(-0x1.b9f188p-5f));
    p = vfma(p, z, vc(0x1.11107ap-3f));
    p = vfma(p, z, vc(-0x1.555554p-2f));
    VF small = vfma(vmul(ax, z), p, ax);
    VI n;
    VF xc = vmul(vmin(ax, vc(10.0f)), vc(2.0f));
    VF em = VM_SFX(vexpm1_kernel)(VM_SFX(vreduce_ln2)(xc, &n));
    VF t = VM_SFX(vpow2i)(visub(n, vic(1)));
    em = vmul(vfma(t, em, vsub(t, vc(0.5f))), vc(2.0f));
    VF large = vdiv(em, vadd(em, vc(2.0f)));
    VF y = vor(vsel(vlt(ax, vc(0.625f)), small, large), VM_SFX(vsign)(x));
    return VM_SFX(vnanfix)(x, y);
}

/* With E = e^-|x|: 1 / (1 + E) for x >= 0 and E / (1 + E) for x < 0,
 * so large negative x gives e^x itself (down into the subnormals) and
 * never 0/0; the infinities give 0 and 1. 1 + E is kept as Dh + Dl
 * exactly (Fast2Sum, E <= 1) and the quotient y0 = num / Dh corrected
 * by (num - y0 Dh - y0 Dl) / Dh (the first product's remainder exact
 * from an FMA), so only E's own error and the last rounding remain. */
VM_ATTR VF VM_SFX(k_sigmoid)(VF x) {
    VF ax = vmin(VM_SFX(vabs)(x), vc(104.0f));
    VF e = VM_SFX(vexp_clamped)(vsub(vc(0.0f), ax));
    VF num = vsel(vlt(x, vc(0.0f)), e, vc(1.0f));
    VF dh = vadd(e, vc(1.0f));
    VF dl = vsub(e, vsub(dh, vc(1.0f)));
    VF y0 = vdiv(num, dh);
    VF rem = vfma(vsub(vc(0.0f), y0), dh, num);
    VF y = vadd(y0, vdiv(vfma(vsub(vc(0.0f), y0), dl, rem), dh));
    return VM_SFX(vnanfix)(x, y);
}

/* -------------------------------------------------- erf */

/* |x| < 1: x (C0 + z P(z)), z = x^2, P a degree-5 minimax fit of
 * (erf(x)/x - C0) / z (relative error 2^-29); C0 = 2/sqrt(pi) is kept as
 * a float pair (hi + lo) because rounding it alone would cost half an
 * ulp. 1 <= |x| < 4: 1 - e^-x^2 g(|x|), g(x) = erfc(x) e^(x^2) fit by a
 * degree-8 polynomial in x - 2.5 (error 2^-28 relative to erf); x^2 is
 * taken as zh + zl exactly and e^-(zh+zl) = e^-zh (1 - zl). The term
 * is at most 0.16 against a result of at least 0.84, so its errors are
 * damped. |x| >= 4 rounds to 1 (clamped). The sign goes back last. */
VM_ATTR VF VM_SFX(k_erf)(VF x) {
    VF ax = VM_SFX(vabs)(x);
    VF z = vmul(ax, ax);
    VF p = vc(0x1.48f0bap-14f);
    p = vfma(p, z, vc(-0x1.a3ec54p-11f));
    p = vfma(p, z, vc(0x1.540a3cp-8f));
    p = vfma(p, z, vc(-0x1.b7fab0p-6f));
    p = vfma(p, z, vc(0x1.ce2d28p-4f));
    p = vfma(p, z, vc(-0x1.81274p-2f));
    VF q = vfma(z, p, vc(-0x1.f7ac92p-25f));
    VF small = vfma(ax, vc(0x1.20dd76p+0f), vmul(ax, q));
    VF ac = vmin(ax, vc(4.0f));
    VF zh = vmul(ac, ac);
    VF zl = vfma(ac, ac, vsub(vc(0.0f), zh));
    VF e = VM_SFX(vexp_clamped)(vsub(vc(0.0f), zh));
    e = vfma(e, vsub(vc(0.0f), zl), e);
    VF u = vsub(ac, vc(2.5f));
    VF g = vc(0x1.c5c9aap-14f);
    g = vfma(g, u, vc(0x1.e70d18p-13f));
    g = vfma(g, u, vc(0x1.243288p-11f));
    g = vfma(g, u, vc(-0x1.55085cp-11f));
    g = vfma(g, u, vc(0x1.2db5aap-9f));
    g = vfma(g, u, vc(-0x1.0aa68ep-7f));
    g = vfma(g, u, vc(0x1.98299cp-6f));
    g = vfma(g, u, vc(-0x1.30819ap-4f));
    g = vfma(g, u, vc(0x1.afbbecp-3f));
    VF large = vfma(e, vsub(vc(0.0f), g), vc(1.0f));
    VF y = vor(vsel(vlt(ax, vc(1.0f)), small, large), VM_SFX(vsign)(x));
    return VM_SFX(vnanfix)(x, y);
}

/* -------------------------------------------------- activations */

/* The activations of tpu_vm_act_f32.
 *
 * gelu       x Phi(x) = x (1 - E/2) for x >= 0 and x E/2 for x < 0, with
 *            E = erfc(|x|/sqrt 2) = 2 Phi(-|x|) from a table: |x| in
 *            [0, 6) is cut into 8 intervals of 3/4, i = trunc(|x| 4/3)
 *            (rounded: |x| may land in the neighbour, which the fits
 *            cover), and E is a degree-9 polynomial in u = |x| - center_i
 *            (k_gelu_center, k_gelu_coef in vecmath.c; u is exact by
 *            Sterbenz, and center_0 = 0). The fits are minimax relative
 *            to E (Lawson iteration, coefficients rounded to float one at
 *            a time, the rest refit); what is left is float rounding in
 *            the Horner steps, which the tail's steep intervals amplify.
 *            Against erfc in double, every float of [-6, 10]: at most 1.23
 *            ulp for x >= 0, 2.9 for -3 <= x < 0, 22.7 for -6 < x < -3. The
 *            formula x * 0.5 * (1 + erf(x / sqrt 2)) that PyTorch
 *            evaluates (and this function did: 1.7 ulp for x >= 0)
 *            cancels for x < 0: 107 ulp at -3, no correct digit from -5.4
 *            on. For |x| >= 6, E (< 2e-9) is taken as 0: x itself, or -0
 *            below -6 (true value above -6e-9); -inf gives NaN, as
 *            PyTorch's does. Eight entries are one permute at every x86
 *            level (16 would take two and a blend on AVX2): about 35 lane
 *            operations against the erf form's 50.
 * gelu_tanh  0.5 * x * (1 + tanh(beta * (x + kappa * x * x * x)))
 * silu       x * sigmoid(x)
 * These two are the f32 operations the unary kernel used to run in
 * separate passes over a chunk (the argument, the vector function, the
 * result), in the same order and now in one pass. (mish, x * tanh(log1p(
 * exp(x))), ran 30 % slower in one pass than in three, its three
 * functions' constants and temporaries being more than the registers
 * hold: the unary kernel keeps its passes.) */
/* gelu's E = erfc(|x|/sqrt 2) for |x| < 6, 0 from 6 on (and for NaN). */
VM_ATTR VF VM_SFX(vgelu_erfc)(VF x) {
    VF t = VM_SFX(vabs)(x);
    VF tc = vmin(t, vc(0x1.7ffffep+2f)); /* < 6, and not NaN: vmin(NaN, c) = c */
    VI i = vcvtt(vmul(tc, vc(0x1.555556p+0f)));
    VF u = vsub(tc, vlut8(i, k_gelu_center));
    VF e = vlut8(i, k_gelu_coef[9]);
    for (int k = 8; k >= 0; k--)
        e = vfma(e, u, vlut8(i, k_gelu_coef[k]));
    return vsel(vlt(t, vc(6.0f)), e, vc(0.0f));
}

VM_ATTR VF VM_SFX(k_act_gelu)(VF x) {
    VF e = VM_SFX(vgelu_erfc)(x);
    VF h = vmul(x, vc(0.5f));
    VF pos = vsel(vlt(VM_SFX(vabs)(x), vc(6.0f)), vfma(vsub(vc(0.0f), h), e, x), x);
    VF y = vsel(vilt(vbits(x), vic(0)), vmul(h, e), pos);
    return VM_SFX(vnanfix)(x, y);
}

VM_ATTR VF VM_SFX(k_act_gelu_tanh)(VF x) {
    /* beta = float(sqrt(2 / pi)), kappa = 0.044715f */
    VF cube = vmul(vmul(vmul(vc(0x1.6e4e26p-5f), x), x), x);
    VF t = VM_SFX(k_tanh)(vmul(vc(0x1.988454p-1f), vadd(x, cube)));
    return vmul(vmul(vc(0.5f), x), vadd(vc(1.0f), t));
}

VM_ATTR VF VM_SFX(k_act_silu)(VF x) {
    return vmul(x, VM_SFX(k_sigmoid)(x));
}

/* g times the activations' derivatives (tpu_vm_act_grad_f32), in f32:
 *   gelu       g (Phi(x) + x phi(x)): Phi = 1 - E/2 or E/2 from the
 *              gelu's table, phi = e^(-x^2/2) / sqrt(2 pi), summed by one
 *              fma
 *   gelu_tanh  g (0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2)),
 *              t = tanh(z), z = beta (x + kappa x^3), in the form
 *              s (1 + 2 x beta (1 + 3 kappa x^2) (1 - s)), s = sigmoid(2 z)
 *   silu       g s (1 + x (1 - s)), s = sigmoid(x)
 * The sums cancel where the derivative crosses zero (gelu near -0.75,
 * silu near -1.28): there the error is a few ulp of the terms, not of
 * the result (tests/c/test_kernels_vecmath.c holds them to that). Below
 * -6 gelu's Phi (under 1e-9, 1/x^2 of the result: 3 % at -6) is left
 * out, as the table ends; PyTorch's 0.5 (1 + erf) is 0 from -5.4 on.
 * gelu_tanh's tail keeps its tiny slope where the f64 formula's t rounds
 * to -1 (so an infinite g gives an infinity there, not the formula's
 * NaN). A NaN x gives x + x, as everywhere here. */
VM_ATTR VF VM_SFX(k_grad_gelu)(VF g, VF x) {
    VF half = vmul(VM_SFX(vgelu_erfc)(x), vc(0.5f));
    VF cdf = vsel(vilt(vbits(x), vic(0)), half, vsub(vc(1.0f), half));
    VF arg = vmax(vmul(vmul(x, x), vc(-0.5f)), vc(-104.0f));
    VF pdf = vmul(VM_SFX(vexp_clamped)(arg), vc(0x1.988454p-2f)); /* 1/sqrt(2 pi) */
    return VM_SFX(vnanfix)(x, vmul(g, vfma(x, pdf, cdf)));
}

VM_ATTR VF VM_SFX(k_grad_gelu_tanh)(VF g, VF x) {
    /* beta = float(sqrt(2 / pi)), kappa = 0.044715f, 3 kappa rounded.
     * 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s) with s = sigmoid(2 z),
     * which keeps both accurate where t rounds to -1 (the tail's true
     * derivative is tiny, not 0: an infinite g still gives an infinity). */
    VF cube = vmul(vmul(vmul(vc(0x1.6e4e26p-5f), x), x), x);
    VF s = VM_SFX(k_sigmoid)(vmul(vc(0x1.988454p+0f), vadd(x, cube)));
    /* x clamped for the slope term, which would overflow (and make 0 *
     * inf) where s is 0 or 1 anyway; the infinities give NaN, as the
     * formula's inf * 0 does. */
    VF xc = vmax(vmin(x, vc(1e4f)), vc(-1e4f));
    VF slope = vmul(vc(0x1.988454p-1f), vfma(vc(0x1.12ba9ep-3f), vmul(xc, xc), vc(1.0f)));
    VF w = vmul(vmul(vc(2.0f), xc), slope);
    VF d = vmul(s, vfma(w, vsub(vc(1.0f), s), vc(1.0f)));
    d = vsel(vlt(VM_SFX(vabs)(x), vc(INFINITY)), d, vsub(x, x));
    return VM_SFX(vnanfix)(x, vmul(g, d));
}

VM_ATTR VF VM_SFX(k_grad_silu)(VF g, VF x) {
    VF s = VM_SFX(k_sigmoid)(x);
    return VM_SFX(vnanfix)(x, vmul(g, vmul(s, vfma(x, vsub(vc(1.0f), s), vc(1.0f)))));
}

/* -------------------------------------------------- sin, cos */

/* sin or cos (quadrant offset 0 or 1) for |x| <= VM_TRIG_MAX; other
 * lanes (large, infinite, NaN) are left to the caller. q = round(x 2/pi)
 * as in vreduce_ln2; r = x - q pi/2 by Cody-Waite with pi/2 = P1 + P2 +
 * P3 (each float(rest)): the first FMA step is exact (|q| < 2^17), and
 * where r is small (x near a multiple of pi/2) the second is exact too,
 * so r is within half an ulp even when it is 2^-31 of x; the pi/2 left
 * out is 1.1e-23, q times that stays under 2^-28 of the smallest r.
 * sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2), degree 3 fits
 * on |r| <= 0.793 (relative errors 2^-27.8 and 2^-32.7). */
VM_ATTR VF VM_SFX(vsincos_reduced)(VF x, int quadrant) {
    VF k = vfma(x, vc(0x1.45f306p-1f), vc(0x1.8p23f));
    VI q = viadd(visub(vbits(k), vbits(vc(0x1.8p23f))), vic(quadrant));
    VF qf = vsub(k, vc(0x1.8p23f));
    VF r = vfma(qf, vc(-0x1.921fb6p+0f), x);
    r = vfma(qf, vc(0x1.777a5cp-25f), r);
    r = vfma(qf, vc(0x1.ee59dap-50f), r);
    VF z = vmul(r, r);
    VF s = vc(-0x1.991bf4p-13f);
    s = vfma(s, z, vc(0x1.1106c6p-7f));
    s = vfma(s, z, vc(-0x1.555544p-3f));
    s = vfma(vmul(r, z), s, r);
    VF c = vc(0x1.99de6ep-16f);
    c = vfma(c, z, vc(-0x1.6c0c14p-10f));
    c = vfma(c, z, vc(0x1.55554ap-5f));
    c = vfma(z, vfma(c, z, vc(-0.5f)), vc(1.0f));
    VF y = vsel(vieq(viand(q, vic(1)), vic(1)), c, s);
    VF neg = vfloat(vsll(viand(q, vic(2)), 30));
    return vxor(y, neg);
}

VM_ATTR VF VM_SFX(k_sin)(VF x) {
    VF y = VM_SFX(vsincos_reduced)(x, 0);
    return vsel(veq(x, vc(0.0f)), x, y);
}

VM_ATTR VF VM_SFX(k_cos)(VF x) { return VM_SFX(vsincos_reduced)(x, 1); }

/* The lane operations are the includer's, one set per level. */
#undef vc
#undef vic
#undef vadd
#undef vsub
#undef vmul
#undef vdiv
#undef vfma
#undef vmin
#undef vmax
#undef vand
#undef vor
#undef vxor
#undef vbits
#undef vfloat
#undef vcvt
#undef viadd
#undef visub
#undef viand
#undef vsll
#undef vsra
#undef vlt
#undef vle
#undef veq
#undef vnan
#undef vieq
#undef vmor
#undef vsel
#undef vany
#undef vcvtt
#undef vilt
#undef vlut8
