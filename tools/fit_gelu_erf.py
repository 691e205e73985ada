"""Fit the F32 coefficient tables of GELU_ERF's F32 form (cpu/vecmath_f32.h) and print them as C.

R(z) = erfcx(z / sqrt 2) / 2 on 16 intervals of t = z + 1 in [1, 16) (t's exponent and two leading
mantissa bits: widths 1/4 on [0, 1), 1/2 on [1, 3), 1 on [3, 7), 2 on [7, 15)), degree 5 in u = z
minus the interval's left end, R(0) = 1/2 exactly; and expm1 on exp's reduced range as r + r^2 P(r),
P of degree 4, printed as Q(s) = P(-s/2) / 4 (s = -2r: the form takes s = z^2 + 2 n ln2 straight from
z^2).  Each fit minimizes the relative error (of R, and of 1 + expm1) by least squares at Chebyshev
nodes, then rounds the coefficients to F32 from the constant term up, refitting the rest each step.
Run: python tools/fit_gelu_erf.py (NumPy and SciPy)."""
import numpy as np
from scipy.special import erfcx

NODES = 600


def f32(v):
    return float(np.float32(v))


def fit_f32(us, ys, weights, degree, fixed):
    """Coefficients c[p] of u^p, rounded to F32 from p = 0 up, the rest refitted after each."""
    fixed = dict(fixed)
    for p in range(degree + 1):
        if p in fixed:
            continue
        free = [q for q in range(degree + 1) if q not in fixed]
        a = np.stack([us ** q for q in free], axis=1)
        b = ys - sum(v * us ** q for q, v in fixed.items())
        c, *_ = np.linalg.lstsq(a * weights[:, None], b * weights, rcond=None)
        fixed[p] = f32(c[free.index(p)])
    return [fixed[p] for p in range(degree, -1, -1)]      # highest power first


def nodes(lo, hi):
    return lo + (np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES) + 1) / 2 * (hi - lo)


def r_table():
    rows, worst = [], 0.0
    for e in range(4):
        for m in range(4):
            lo, hi = 2 ** e * (1 + m / 4) - 1, 2 ** e * (1 + (m + 1) / 4) - 1
            us = nodes(0.0, hi - lo)
            ys = erfcx((lo + us) / np.sqrt(2)) / 2
            c = fit_f32(us, ys, 1 / ys, 5, {0: 0.5} if lo == 0 else {})
            uu = np.linspace(0, hi - lo, 4001)
            err = np.max(np.abs(np.polyval(c, uu) / (erfcx((lo + uu) / np.sqrt(2)) / 2) - 1))
            worst = max(worst, err)
            rows.append(c)
    return rows, worst


def q_coefficients():
    r = nodes(-0.35, 0.35)
    g = (np.expm1(r) - r) / r ** 2
    p = fit_f32(r, g, r ** 2 / np.exp(r), 4, {})          # P, highest power first
    q = [p[i] * (-0.5) ** (4 - i) / 4 for i in range(5)]  # exact: powers of two
    rr = np.linspace(-0.35, 0.35, 20001)
    err = np.max(np.abs((rr + rr ** 2 * np.polyval(p, rr) - np.expm1(rr)) / np.exp(rr)))
    return q, err


def main():
    rows, r_err = r_table()
    q, q_err = q_coefficients()
    print(f"/* R's relative fit error at most {r_err:.2g}; expm1's {q_err:.2g} of exp */")
    print("static const float fk_gelu_erf_tab[6][16] = {")
    print(",\n".join("    {" + ", ".join(f"{rows[k][j]:.9e}f" for k in range(16)) + "}" for j in range(6)) + "};")
    print("static const float fk_gelu_erf_expm1_q[5] = {" + ", ".join(f"{v:.9e}f" for v in q) + "};")


if __name__ == "__main__":
    main()
