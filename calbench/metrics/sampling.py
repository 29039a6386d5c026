"""Sampling metrics as pure functions over arrays of valid samples and a frozen law.

Each function states its formula. References: the Wasserstein-1 distance between the
empirical law of n samples and P, computed by matching the order statistics with the
quantiles at the midpoints of [0, 1] (``scipy.stats.wasserstein_distance`` of the
samples and those quantiles gives the same number); KS and chi-square tests as in
``scipy.stats.kstest`` and ``scipy.stats.chisquare``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from calbench.cache import floats, simulated
from calbench.families import Target, ppf
from calbench.stats import seed_for

FLOOR_REPS = 4000  # Monte-Carlo replicates behind the oracle floor (its SE enters excess_w1's)
BOOT_REPS = 200  # bootstrap replicates behind a W1 standard error
MIN_EXPECTED = 5.0  # chi-square cells are pooled until each expects at least this many


def midpoint_quantiles(law: Any, n: int) -> np.ndarray:
    """F^{-1}((i - 1/2) / n) for i = 1..n."""
    return ppf(law, (np.arange(n) + 0.5) / n)


def _mean_distance(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """mean_i |x_i - q_i| along the last axis. Where that overflows (valid answers near the
    largest float, 1e308), each term is divided by n first, so the mean stays finite."""
    with np.errstate(over="ignore"):
        mean = np.mean(np.abs(x - q), axis=-1)
    if np.all(np.isfinite(mean)) or not (np.all(np.isfinite(x)) and np.all(np.isfinite(q))):
        return mean
    n = x.shape[-1]
    return np.sum(np.abs(x / n - q / n), axis=-1)


def w1(values: np.ndarray, law: Any) -> float:
    """Wasserstein-1 distance of the samples to the law: mean_i |x_(i) - F^{-1}((i - 1/2)/n)|.

    Returns NaN when there are no samples.
    """
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        return float("nan")
    return float(_mean_distance(x, midpoint_quantiles(law, x.size)))


def iqr(target: Target) -> float:
    """Interquartile range F^{-1}(3/4) - F^{-1}(1/4), the scale W1 is divided by.

    Defined for every family, Cauchy included. For integer laws it is floored at 1, the
    lattice step: Bernoulli(0.1) has both quartiles at 0, and W1 on integers is
    measured in units of 1 anyway.
    """
    q1, q3 = ppf(target.law, [0.25, 0.75])
    spread = float(q3 - q1)
    return max(spread, 1.0) if target.integer else spread


@dataclass(frozen=True)
class Floor:
    """What n exact i.i.d. draws from the law score: the oracle floor of W1.

    ``median`` is the floor itself; ``spread`` is a robust standard deviation of W1 under
    the law, (q84 - q16) / 2; ``se`` is the Monte-Carlo standard error of the median.
    """

    median: float
    spread: float
    se: float


@lru_cache(maxsize=4096)
def oracle_floor(target: Target, n: int, reps: int = FLOOR_REPS) -> Floor:
    """The W1 that n exact i.i.d. draws from the law typically score.

    Estimated from ``reps`` independent sets of n draws, with a seed derived from the
    target and n: the same call always returns the same numbers (and is cached).

    The floor is the *median* of those W1 values, not their mean: for Cauchy the largest
    of n draws has no mean, so the expected W1 is infinite at every n. The median is
    finite for every family and is what a perfect sampler scores half of the time.
    """
    if n <= 0:
        return Floor(float("nan"), float("nan"), float("nan"))

    def simulate() -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed_for("floor", target.key, n, reps))
        draws = np.sort(target.law.rvs(size=(reps, n), random_state=rng), axis=1)
        per_rep = np.mean(np.abs(draws - midpoint_quantiles(target.law, n)), axis=1)
        return {"q": np.quantile(per_rep, [0.16, 0.5, 0.84])}

    q16, q50, q84 = simulated(f"w1 floor|{target.key}|{n}|{reps}", simulate, floats("q", 3))  # calbench.cache
    spread = float(q84 - q16) / 2
    return Floor(float(q50), spread, float(np.sqrt(np.pi / 2) * spread / np.sqrt(reps)))


def bootstrap_w1_sd(values: np.ndarray, law: Any, reps: int = BOOT_REPS, seed: int = 0) -> float:
    """Bootstrap standard deviation of ``w1``: resample the valid samples with replacement.

    The count of valid samples is held fixed (W1 is defined on them); the uncertainty of
    the valid rate is reported by the valid rate itself.
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return 0.0
    rng = np.random.default_rng(seed)
    resampled = np.sort(x[rng.integers(0, x.size, size=(reps, x.size))], axis=1)
    per_rep = _mean_distance(resampled, midpoint_quantiles(law, x.size))
    with np.errstate(over="ignore", invalid="ignore"):
        sd = float(per_rep.std(ddof=1))
    if math.isfinite(sd) or not np.all(np.isfinite(per_rep)):
        return sd
    scale = float(np.max(np.abs(per_rep)))  # squares near 1e308 overflow: scale them first
    return scale * float((per_rep / scale).std(ddof=1))


def w1_se(values: np.ndarray, target: Target, seed: int = 0) -> float:
    """Standard error of ``w1``: the larger of the bootstrap's and the law's own spread at n.

    The bootstrap alone is unreliable near a perfect sampler: W1 is not smooth there, and
    for heavy tails (Cauchy) and lattice laws (Bernoulli) it under-covers badly. The
    spread of an exact sampler's W1 at the same n is therefore used as a floor, a
    deliberately conservative choice (a deterministic sampler's W1 has no spread at all,
    and heavy-tailed families lose power); away from the law the bootstrap takes over.
    Simulated with exact samplers (tests/test_sampling.py), the 95% interval covers at
    least 95%.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan")
    return max(bootstrap_w1_sd(x, target.law, seed=seed), oracle_floor(target, x.size).spread)


def ks_test(values: np.ndarray, law: Any) -> tuple[float, float]:
    """Kolmogorov-Smirnov statistic and p-value of the samples against a continuous law."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    result = stats.kstest(x, law.cdf)
    return float(result.statistic), float(result.pvalue)


def pooled_cells(values: np.ndarray, law: Any) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts of an integer law's outcomes, pooled to expected >= 5.

    Cells are the integers of [F^{-1}(0.001), F^{-1}(0.999)], with everything below in
    the first cell and everything above in the last, so the expected counts sum to n.
    Neighbouring cells are merged from the left until each expects at least 5; a short
    remainder joins the last full cell.
    """
    n = np.asarray(values).size
    lo, hi = (int(v) for v in ppf(law, [0.001, 0.999]))
    # Clip before casting: a valid "1e30" would overflow int64 and wrap into the first cell.
    x = np.rint(np.clip(np.asarray(values, dtype=float), lo, hi)).astype(np.int64)
    ks = np.arange(lo, hi + 1)
    expected = n * law.pmf(ks)
    expected[0] += n * law.cdf(lo - 1)
    expected[-1] += n * law.sf(hi)
    observed = np.bincount(x - lo, minlength=ks.size).astype(float)
    obs_cells: list[float] = []
    exp_cells: list[float] = []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= MIN_EXPECTED - 1e-9:  # expected counts may sum to 4.9999999
            obs_cells.append(acc_o)
            exp_cells.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        if exp_cells:
            obs_cells[-1] += acc_o
            exp_cells[-1] += acc_e
        else:
            obs_cells, exp_cells = [acc_o], [acc_e]
    return np.array(obs_cells), np.array(exp_cells)


def chi_square_test(values: np.ndarray, law: Any) -> tuple[float, float]:
    """Pearson chi-square of the samples against an integer law, cells pooled (``pooled_cells``).

    NaN when fewer than two cells remain (too few samples to test).
    """
    observed, expected = pooled_cells(values, law)
    if observed.size < 2:
        return float("nan"), float("nan")
    expected = expected * observed.sum() / expected.sum()  # exact equality of totals for scipy
    result = stats.chisquare(observed, expected)
    return float(result.statistic), float(result.pvalue)


def goodness_of_fit(values: np.ndarray, target: Target) -> tuple[str, float, float]:
    """KS for continuous laws, pooled chi-square for integer laws: (test, statistic, p-value)."""
    if target.integer:
        return ("chi2", *chi_square_test(values, target.law))
    return ("ks", *ks_test(values, target.law))
