/* Special functions in f64 for the element-wise families: log-gamma,
 * digamma and polygamma, the Hurwitz zeta function, and the modified
 * Bessel functions I0 and I1 (plain and exponentially scaled).
 *
 * Each is evaluated in f64 and the element-wise kernels round the result
 * once to the output's dtype, so an f32 result is within an ulp of the
 * exact value away from the functions' zeros (where the error is absolute,
 * a few f64 ulps of the terms that cancel). The methods are the textbook
 * ones, chosen for a short and checkable code path rather than the last
 * bit of f64 accuracy: recurrence up to a large argument then the
 * asymptotic series (digamma), Euler-Maclaurin summation (zeta), the power
 * series for small arguments and the asymptotic expansion for large ones
 * (Bessel). Special values follow PyTorch's CPU kernels. */
#define _DEFAULT_SOURCE /* lgamma_r: lgamma's global signgam is a data race across threads */
#include <math.h>

#include "ew.h"
#include "kernels_internal.h"

#define PI TPU_K_PI

double tpu_k_lgamma(double x) {
    int sign;
    return lgamma_r(x, &sign);
}

double tpu_k_digamma(double x) {
    if (x == 0.0)
        return copysign(INFINITY, -x); /* PyTorch: the sign of the pole's side */
    if (x != x)
        return x;
    double r = 0.0;
    if (x < 0.0) {
        double nearest = nearbyint(x);
        if (x == nearest)
            return NAN; /* a pole (and -inf) */
        /* Reflection, psi(x) = psi(1 - x) - pi / tan(pi x), with tan taken
         * of the exact distance to the nearest integer (tan has period pi),
         * so that pi times it is accurate next to the poles. */
        r = -PI / tan(PI * (x - nearest));
        x = 1.0 - x;
    }
    /* psi(x) = psi(x + 1) - 1 / x, up to x >= 10, where the asymptotic
     * series below is good to f64 with seven terms. */
    while (x < 10.0) {
        r -= 1.0 / x;
        x += 1.0;
    }
    if (x == INFINITY)
        return INFINITY;
    /* log x - 1 / 2x - sum B_2k / (2k x^2k) */
    static const double c[] = {1.0 / 12,   -1.0 / 120,       1.0 / 252, -1.0 / 240,
                               1.0 / 132,  -691.0 / 32760.0, 1.0 / 12};
    double z = 1.0 / (x * x), s = 0.0;
    for (int k = 6; k >= 0; k--)
        s = (s + c[k]) * z;
    return r + log(x) - 0.5 / x - s;
}

/* B_2j / (2j)!, j = 1.., for the Euler-Maclaurin tail. */
static const double k_bern_over_fact[] = {
    1.0 / 12.0,
    -1.0 / 720.0,
    1.0 / 30240.0,
    -1.0 / 1209600.0,
    1.0 / 47900160.0,
    -691.0 / 1307674368000.0,
    1.0 / 74724249600.0,
    -3617.0 / 10670622842880000.0,
    43867.0 / 5109094217170944000.0,
    -174611.0 / 802857662698291200000.0,
};

/* zeta(s, q) for s > 1 and q > 0: sum_{k < N} (q + k)^-s directly until
 * a = q + N >= 12, then the Euler-Maclaurin tail at a: a^(1-s) / (s - 1)
 * + a^-s / 2 + sum_j B_2j / (2j)! s (s+1) ... (s+2j-2) a^(-s-2j+1). With
 * a >= 12 the tail's terms fall by about (s + 2j)^2 / (2 pi a)^2 each. */
static double zeta_pos(double s, double q) {
    if (q == INFINITY)
        return 0.0;
    double sum = 0.0, a = q;
    while (a < 12.0) {
        sum += pow(a, -s);
        a += 1.0;
    }
    const double as = pow(a, -s);
    sum += pow(a, 1.0 - s) / (s - 1.0) + 0.5 * as; /* a^(1-s) apart: a^-s may underflow */
    double t = s * as / a; /* s a^(-s-1) */
    for (int j = 0; j < (int)(sizeof k_bern_over_fact / sizeof k_bern_over_fact[0]); j++) {
        double term = k_bern_over_fact[j] * t;
        sum += term;
        if (fabs(term) <= 1e-17 * fabs(sum))
            break;
        t *= (s + 2.0 * j + 1.0) * (s + 2.0 * j + 2.0) / (a * a);
    }
    return sum;
}

double tpu_k_zeta(double s, double q) {
    if (s != s || q != q)
        return NAN;
    if (s == 1.0)
        return INFINITY;
    if (s < 1.0)
        return NAN;
    if (q > 0.0)
        return zeta_pos(s, q);
    if (q == floor(q))
        return INFINITY; /* a pole (and -inf) */
    if (s != floor(s))
        return NAN; /* (q + k)^-s of a negative base */
    /* q = m + f, m = floor(q) < 0, 0 < f < 1. The J = -m terms below 0 are
     * -(j + 1 - f), j < J, and the terms above are zeta(s, f) = sum_j
     * (j + f)^-s. Paired, zeta(s, q) = sum_{j < J} [(j + f)^-s + (-1)^s
     * (j + 1 - f)^-s] + zeta(s, J + f): for odd s each pair is a
     * difference of close numbers, taken without cancellation as
     * (1 - 2f) sum_i (j+f)^(i-s) (j+1-f)^(-1-i) (f = 1/2: exactly 0), so a
     * small result is accurate however large its terms. Many negative
     * terms or a large s: zeta(s, f) + (-1)^s (zeta(s, 1 - f) - zeta(s, 1 - f
     * - m)), with no loop over |q|. */
    const double m = floor(q), f = q - m, jn = -m;
    const bool odd = fmod(s, 2.0) != 0.0;
    if (jn > 1024.0 || s > 256.0) {
        const double sign = odd ? -1.0 : 1.0;
        return zeta_pos(s, f) + sign * (zeta_pos(s, 1.0 - f) - zeta_pos(s, 1.0 - f - m));
    }
    double sum = zeta_pos(s, jn + f);
    for (double j = jn - 1.0; j >= 0.0; j -= 1.0) { /* smallest pairs first */
        const double a = j + f, b = j + 1.0 - f;
        if (!odd) {
            sum += pow(a, -s) + pow(b, -s);
            continue;
        }
        double term = pow(a, -s) / b, ratio = a / b, inner = 0.0;
        for (double i = 0.0; i < s; i += 1.0) {
            inner += term;
            term *= ratio;
        }
        sum += (1.0 - 2.0 * f) * inner;
    }
    return sum;
}

double tpu_k_polygamma(int64_t n, double x) {
    if (n == 0)
        return tpu_k_digamma(x);
    /* psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x), as PyTorch computes it. */
    double sign = (n % 2) ? 1.0 : -1.0;
    return sign * exp(tpu_k_lgamma((double)n + 1.0)) * tpu_k_zeta((double)n + 1.0, x);
}

double tpu_k_bessel_i(int nu, double x, bool scaled) {
    if (x != x)
        return x;
    const double ax = fabs(x);
    const bool negate = nu && x < 0.0; /* I1 is odd */
    if (ax == INFINITY) /* PyTorch's CPU kernels give NaN unscaled (e^x times e^-x), 0 scaled */
        return scaled ? (negate ? -0.0 : 0.0) : NAN;
    double r;
    if (ax <= 20.0) {
        /* I_nu(x) = (x/2)^nu sum_k (x^2/4)^k / (k! (k + nu)!): every term
         * has one sign, so the sum has no cancellation. */
        const double q = 0.25 * x * x;
        double term = nu ? 0.5 * x : 1.0, sum = term;
        for (int k = 1; k < 200; k++) {
            term *= q / ((double)k * (double)(k + nu));
            sum += term;
            if (fabs(term) <= 1e-17 * fabs(sum))
                break;
        }
        return scaled ? sum * exp(-ax) : sum;
    }
    /* I_nu(x) ~ e^x / sqrt(2 pi x) sum_k (-1)^k a_k / x^k with
     * a_k = prod_{j<=k} (4 nu^2 - (2j-1)^2) / (k! 8^k); for x > 20 the
     * terms fall below e^(-2x) before they grow again. */
    const double mu = 4.0 * nu * nu;
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 80; k++) {
        double odd = 2.0 * k - 1.0;
        double next = -term * (mu - odd * odd) / (8.0 * k * ax);
        if (fabs(next) >= fabs(term))
            break;
        term = next;
        sum += term;
        if (fabs(term) <= 1e-17 * fabs(sum))
            break;
    }
    r = sum / sqrt(2.0 * PI * ax);
    if (!scaled) {
        double half = exp(0.5 * ax); /* e^ax in two halves: finite r up to the f64 limit */
        r = r * half * half;
    }
    return negate ? -r : r;
}
