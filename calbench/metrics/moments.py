"""The paper's remaining sampling metrics: the sample mean's and variance's errors against the
law's, and the Anderson-Darling statistic against the law's CDF (pure).

With x_1..x_n the valid answers, x̄ their mean, s² their variance (ddof 1) and μ, var the law's
(``scipy``'s ``stats("mv")``):

* ``mean_error`` = |x̄ - μ| / sd, the mean's error in the law's standard deviations (scale-free
  where |x̄ - μ| / |μ| is not: a Skellam law with μ1 = μ2 has mean 0); standard error
  s / (sd √n);
* ``variance_error`` = |s² / var - 1|, the variance's relative error; standard error
  sqrt(m4 - m2²) / (var √n), m2 and m4 the answers' second and fourth central moments (the
  delta method);
* ``ad_stat``: the Anderson-Darling statistic of the answers against the law,
  A² = -n - (1/n) Σ_i (2i - 1) [ln F(x_(i)) + ln(1 - F(x_(n+1-i)))] for a continuous law
  (F clipped to [1e-300, 1 - 1e-16]: an answer beyond the law's float range counts as at it);
  for an integer law its discrete form (Choulakian, Lockhart and Stephens 1994),
  A² = n Σ_j (S_j / n - H_j)² p_j / (H_j (1 - H_j)) over the support points j, S_j the answers at
  most j, H_j = F(j), p_j = P(X = j), the lattice cut where H_j (1 - H_j) < 1e-12 (answers past
  it count at its ends). Exact sampling gives E[A²] ≈ 1 (continuous); its standard error is the
  bootstrap's (200 resamples of the answers, seeded).

A law without a finite mean (Cauchy) has neither moment error, and one with an infinite
variance (Student's t with nu ≤ 2, Pareto and Lomax with alpha ≤ 2) no variance error and no mean
error (sd is infinite): both are undefined (NaN), and families average what is defined.
"""

from __future__ import annotations

import math

import numpy as np

from calbench.families import Target, ppf
from calbench.stats import Estimate, seed_for

BOOTSTRAP = 200
EDGE = 1e-12  # the integer lattice ends where H(1 - H) falls below this


def law_moments(target: Target) -> tuple[float, float]:
    """The law's mean and variance (NaN where it has none or an infinite one)."""
    mean, var = (float(v) for v in target.law.stats(moments="mv"))
    return (mean if math.isfinite(mean) else math.nan, var if math.isfinite(var) and var > 0 else math.nan)


def mean_error(values: np.ndarray, target: Target) -> Estimate:
    """|x̄ - μ| / sd and its standard error (module docstring)."""
    x = np.asarray(values, dtype=float)
    mu, var = law_moments(target)
    if x.size == 0 or not (math.isfinite(mu) and math.isfinite(var)):
        return Estimate(math.nan, math.nan)
    sigma = math.sqrt(var)
    se = float(x.std(ddof=1)) / (sigma * math.sqrt(x.size)) if x.size > 1 else math.nan
    return Estimate(abs(float(x.mean()) - mu) / sigma, se)


def variance_error(values: np.ndarray, target: Target) -> Estimate:
    """|s² / var - 1| and its standard error (module docstring)."""
    x = np.asarray(values, dtype=float)
    _, var = law_moments(target)
    if x.size < 2 or not math.isfinite(var):
        return Estimate(math.nan, math.nan)
    s2, m2 = float(x.var(ddof=1)), float(x.var())
    m4 = float(np.mean((x - x.mean()) ** 4))  # m4 >= m2², so the root is real
    se = math.sqrt(max(m4 - m2**2, 0.0)) / (var * math.sqrt(x.size))
    return Estimate(abs(s2 / var - 1.0), se)


def _ad_continuous(x: np.ndarray, target: Target) -> float:
    u = np.clip(target.law.cdf(np.sort(x)), 1e-300, 1 - 1e-16)
    n = u.size
    i = np.arange(1, n + 1)
    return float(-n - np.sum((2 * i - 1) * (np.log(u) + np.log1p(-u[::-1]))) / n)


def _lattice(target: Target) -> np.ndarray:
    lo, hi = ppf(target.law, np.array([EDGE, 1 - EDGE]))
    return np.arange(math.floor(lo), math.ceil(hi) + 1, dtype=float)


def _ad_discrete(x: np.ndarray, target: Target, j: np.ndarray) -> float:
    h = target.law.cdf(j)
    p = target.law.pmf(j)
    keep = h * (1 - h) >= EDGE
    counts = np.searchsorted(np.sort(np.clip(x, j[0], j[-1])), j, side="right")  # S_j
    z = counts / x.size - h
    return float(x.size * np.sum(z[keep] ** 2 * p[keep] / (h[keep] * (1 - h[keep]))))


def anderson_darling(values: np.ndarray, target: Target, seed: int | None = None) -> Estimate:
    """The Anderson-Darling statistic of the answers against the law, and its bootstrap SE."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Estimate(math.nan, math.nan)
    lattice = _lattice(target) if target.integer else None

    def stat(sample: np.ndarray) -> float:
        return _ad_discrete(sample, target, lattice) if lattice is not None else _ad_continuous(sample, target)

    value = stat(x)
    if x.size < 2:
        return Estimate(value, math.nan)
    rng = np.random.default_rng(seed_for("anderson-darling", target.key, x.size) if seed is None else seed)
    draws = [stat(rng.choice(x, size=x.size)) for _ in range(BOOTSTRAP)]
    return Estimate(value, float(np.std(draws, ddof=1)))
