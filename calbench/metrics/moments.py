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
  A² = -n - (1/n) Σ_i (2i - 1) [ln F(x_(i)) + ln(1 - F(x_(n+1-i)))] for a continuous law, both
  logarithms from the law's own ``logcdf`` and ``logsf`` and floored at ln 1e-300 alike (an
  answer whose tail probability is below 1e-300 counts as at it, in either tail: A² is symmetric);
  for an integer law its discrete form (Choulakian, Lockhart and Stephens 1994),
  A² = n Σ_j (S_j / n - H_j)² p_j / (H_j (1 - H_j)) over the support points j, S_j the answers at
  most j, H_j = F(j), p_j = P(X = j), the lattice cut where H_j (1 - H_j) < 1e-12: answers past
  the cut count as if at its ends (Poisson(4): 30, 100 and 1e6 give one A²; the PIT metrics and
  the outer and far shares tell how far they are). Exact sampling gives E[A²] ≈ 1 (continuous); its standard error is the
  bootstrap's (200 resamples of the answers, seeded).

A law without a finite mean (Cauchy) has neither moment error, and one with an infinite
variance (Student's t with nu ≤ 2, Pareto and Lomax with alpha ≤ 2) no variance error and no mean
error (sd is infinite): both are undefined (NaN), and families average what is defined. The
moments are computed on the answers scaled to [-1, 1], so answers as large as the largest float
overflow nothing; an error too large for a float (variance_error of answers near 1e308) is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from calbench.families import Target, ppf
from calbench.stats import Estimate, seed_for

BOOTSTRAP = 200
EDGE = 1e-12  # the integer lattice ends where H(1 - H) falls below this


def law_moments(target: Target) -> tuple[float, float]:
    """The law's mean and variance (NaN where it has none or an infinite one)."""
    mean, var = (float(v) for v in target.law.stats(moments="mv"))
    return (mean if math.isfinite(mean) else math.nan, var if math.isfinite(var) and var > 0 else math.nan)


def _scaled(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(x - x̄) / c, x̄ and c = max |x - x̄| (1 if all equal), computed without overflow: the mean
    as c0 times the mean of x / c0 with c0 = max |x|, so answers near the largest float stay finite."""
    c0 = float(np.max(np.abs(x)))
    c0 = c0 if c0 > 0 else 1.0
    mean = c0 * float(np.mean(x / c0))
    spread = x / c0 - mean / c0
    c1 = float(np.max(np.abs(spread)))
    c1 = c1 if c1 > 0 else 1.0
    return spread / c1, mean, c0 * c1


def _finite_or_nan(value: float) -> float:
    """A moment too large for a float (answers near 1e308) is undefined, not infinite."""
    return value if math.isfinite(value) else math.nan


def mean_error(values: np.ndarray, target: Target) -> Estimate:
    """|x̄ - μ| / sd and its standard error (module docstring)."""
    x = np.asarray(values, dtype=float)
    mu, var = law_moments(target)
    if x.size == 0 or not (math.isfinite(mu) and math.isfinite(var)):
        return Estimate(math.nan, math.nan)
    z, mean, c = _scaled(x)
    sigma = math.sqrt(var)
    with np.errstate(over="ignore"):
        se = float(np.std(z, ddof=1)) * (c / sigma) / math.sqrt(x.size) if x.size > 1 else math.nan
        error = abs(mean / sigma - mu / sigma)
    return Estimate(_finite_or_nan(error), _finite_or_nan(se))


def variance_error(values: np.ndarray, target: Target) -> Estimate:
    """|s² / var - 1| and its standard error (module docstring), computed on the answers scaled to
    [-1, 1] (``_scaled``), so that no power of an answer overflows; NaN if s² / var itself is
    beyond the float range."""
    x = np.asarray(values, dtype=float)
    _, var = law_moments(target)
    if x.size < 2 or not math.isfinite(var):
        return Estimate(math.nan, math.nan)
    z, _, c = _scaled(x)
    m2, m4 = float(np.mean(z**2)), float(np.mean(z**4))  # m4 >= m2², so the root is real
    with np.errstate(over="ignore"):
        ratio = float(np.square(np.float64(c / math.sqrt(var))))  # c² / var: may leave the float range (inf)
        s2_over_var = m2 * x.size / (x.size - 1) * ratio
        se = math.sqrt(max(m4 - m2 * m2, 0.0)) * ratio / math.sqrt(x.size)
    return Estimate(_finite_or_nan(abs(s2_over_var - 1.0)), _finite_or_nan(se))


LOG_FLOOR = math.log(1e-300)  # a tail probability below 1e-300 counts as 1e-300, on either side


def _log_tails(x: np.ndarray, target: Target) -> tuple[np.ndarray, np.ndarray]:
    """(log F, log S) of the law at the sorted values ``x``, each floored at ``LOG_FLOOR``."""
    with np.errstate(divide="ignore"):
        log_f = np.maximum(np.asarray(target.law.logcdf(x), dtype=float), LOG_FLOOR)
        log_s = np.maximum(np.asarray(target.law.logsf(x), dtype=float), LOG_FLOOR)
    return log_f, log_s


def _ad_continuous(log_f: np.ndarray, log_s: np.ndarray) -> float:
    """The statistic from the log tails of the sorted answers."""
    n = log_f.size
    i = np.arange(1, n + 1)
    return float(-n - np.sum((2 * i - 1) * (log_f + log_s[::-1])) / n)


def _lattice(target: Target) -> np.ndarray:
    lo, hi = ppf(target.law, np.array([EDGE, 1 - EDGE]))
    return np.arange(math.floor(lo), math.ceil(hi) + 1, dtype=float)


def _ad_discrete(x: np.ndarray, j: np.ndarray, h: np.ndarray, p: np.ndarray) -> float:
    """The statistic on the lattice ``j``, where the law's CDF is ``h`` and its pmf ``p``."""
    keep = h * (1 - h) >= EDGE
    counts = np.searchsorted(np.sort(np.clip(x, j[0], j[-1])), j, side="right")  # S_j
    z = counts / x.size - h
    return float(x.size * np.sum(z[keep] ** 2 * p[keep] / (h[keep] * (1 - h[keep]))))


def anderson_darling(values: np.ndarray, target: Target, seed: int | None = None) -> Estimate:
    """The Anderson-Darling statistic of the answers against the law, and its bootstrap SE."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Estimate(math.nan, math.nan)
    # A bootstrap resample's answers are among the answers: the law is evaluated once, at them (or
    # on its lattice), and each resample reads it by index (as rng.choice(x) draws its indices).
    stat: Callable[[np.ndarray], float]
    if target.integer:
        j = _lattice(target)
        h, p = target.law.cdf(j), target.law.pmf(j)

        def stat(idx: np.ndarray) -> float:
            return _ad_discrete(x[idx], j, h, p)

    else:
        order = np.argsort(x, kind="stable")
        log_f, log_s = _log_tails(x[order], target)
        rank = np.empty(x.size, dtype=np.int64)
        rank[order] = np.arange(x.size)  # equal answers have equal tails: any of their ranks serves

        def stat(idx: np.ndarray) -> float:
            r = np.sort(rank[idx])
            return _ad_continuous(log_f[r], log_s[r])

    value = stat(np.arange(x.size))
    if x.size < 2:
        return Estimate(value, math.nan)
    rng = np.random.default_rng(seed_for("anderson-darling", target.key, x.size) if seed is None else seed)
    draws = [stat(rng.integers(0, x.size, size=x.size)) for _ in range(BOOTSTRAP)]
    return Estimate(value, float(np.std(draws, ddof=1)))
