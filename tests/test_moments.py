"""The moment errors and the Anderson-Darling statistic, against scipy and hand formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from calbench.families import make_target
from calbench.metrics.moments import anderson_darling, law_moments, mean_error, variance_error


def test_moment_errors_by_hand():
    target = make_target("gaussian", {"mu": 1.0, "sigma": 2.0})
    x = np.array([1.0, 3.0, 5.0, -1.0, 2.5, 0.0])
    m = mean_error(x, target)
    assert m.value == pytest.approx(abs(np.mean(x) - 1.0) / 2.0)
    assert m.se == pytest.approx(np.std(x, ddof=1) / (2.0 * math.sqrt(6)))
    v = variance_error(x, target)
    assert v.value == pytest.approx(abs(np.var(x, ddof=1) / 4.0 - 1.0))
    m4 = np.mean((x - x.mean()) ** 4)
    assert v.se == pytest.approx(math.sqrt(m4 - np.var(x) ** 2) / (4.0 * math.sqrt(6)))


def test_laws_without_moments_have_no_moment_errors():
    cauchy = make_target("cauchy", {"x0": 3.5, "gamma": 3.0})
    assert all(math.isnan(v) for v in law_moments(cauchy))
    assert math.isnan(mean_error(np.array([1.0, 2.0]), cauchy).value)
    heavy = make_target("student_t", {"nu": 2.5})  # finite variance: 2.5 / 0.5 = 5
    assert law_moments(heavy)[1] == pytest.approx(5.0)
    assert math.isnan(variance_error(np.array([1.0]), heavy).value)  # one answer: no variance


def test_exact_draws_have_small_moment_errors_and_a_shift_a_large_one():
    target = make_target("gamma", {"alpha": 7.0, "beta": 7.0})
    draws = target.law.rvs(size=5000, random_state=np.random.default_rng(0))
    assert mean_error(draws, target).value < 4 * mean_error(draws, target).se
    assert variance_error(draws, target).value < 4 * variance_error(draws, target).se
    assert mean_error(draws + 10, target).value > 0.5


@pytest.mark.parametrize(
    ("family", "params", "dist", "known"),
    [
        ("gaussian", {"mu": 3.5, "sigma": 3.0}, stats.norm, {"loc": 3.5, "scale": 3.0}),
        ("exponential", {"lambda": 7.0}, stats.expon, {"loc": 0.0, "scale": 1 / 7.0}),
        ("beta", {"alpha": 7.0, "beta": 7.0}, stats.beta, {"a": 7.0, "b": 7.0, "loc": 0.0, "scale": 1.0}),
    ],
)
def test_continuous_anderson_darling_equals_scipys(family, params, dist, known):
    target = make_target(family, params)
    rng = np.random.default_rng(1)
    exact = target.law.rvs(size=200, random_state=rng)
    for x in (exact, exact[:50] ** 1.5 if family == "beta" else exact[:50] * 1.3):  # off the law, in its support
        ours = anderson_darling(x, target).value
        ref = stats.goodness_of_fit(dist, x, known_params=known, statistic="ad", n_mc_samples=9, random_state=0)
        assert ours == pytest.approx(ref.statistic, rel=1e-9), family


def _discrete_ad_by_hand(x, law, lo, hi):
    n, total = len(x), 0.0
    for j in range(lo, hi + 1):
        h, p = law.cdf(j), law.pmf(j)
        if h * (1 - h) < 1e-12:
            continue
        s = sum(1 for v in x if v <= j)
        total += (s / n - h) ** 2 * p / (h * (1 - h))
    return n * total


def test_discrete_anderson_darling_equals_the_formula_and_tells_a_shift():
    target = make_target("poisson", {"lambda": 4.0})
    rng = np.random.default_rng(2)
    x = target.law.rvs(size=300, random_state=rng).astype(float)
    ours = anderson_darling(x, target)
    lo, hi = int(target.law.ppf(1e-12)), int(target.law.ppf(1 - 1e-12)) + 1
    assert ours.value == pytest.approx(_discrete_ad_by_hand(x, target.law, lo, hi), rel=1e-9)
    assert 0 < ours.se < 2 and ours.value < 4  # exact draws
    assert anderson_darling(x + 2, target).value > 10 * ours.value  # a shifted sampler


def test_exact_continuous_draws_average_about_one():
    target = make_target("logistic", {"mu": 3.5, "s": 3.0})
    rng = np.random.default_rng(3)
    values = [anderson_darling(target.law.rvs(size=100, random_state=rng), target, seed=0).value for _ in range(200)]
    assert np.mean(values) == pytest.approx(1.0, abs=0.15)  # E[A²] = 1 under the null


# ---- absurd answers (issue 36, case 2; case 18) ------------------------------------------------


@pytest.mark.parametrize("far", [1e80, 1e200, 1e308, -1.7e308])
def test_absurd_answers_overflow_nothing(far):
    """An answer such as 1e80 is valid for every law with unbounded support: the moment errors are
    finite, or NaN where the true value is beyond the float range, never an exception."""
    target = make_target("gaussian", {"mu": 0, "sigma": 1})
    x = np.array([1.0, 2.0, far] * 20)
    for metric in (mean_error, variance_error, anderson_darling):
        e = metric(x, target)
        assert all(math.isfinite(v) or math.isnan(v) for v in (e.value, e.se)), (metric.__name__, far, e)
    assert mean_error(x, target).value == pytest.approx(abs(far) / 3, rel=1e-9)  # |x̄ - 0| / 1
    if abs(far) < 1e150:  # s² / var is finite: it is exact
        assert variance_error(x, target).value == pytest.approx(float(np.var(x, ddof=1)) - 1, rel=1e-9)


def test_the_scaled_moments_equal_the_plain_ones_on_ordinary_answers():
    target = make_target("gamma", {"alpha": 2, "beta": 3})
    x = target.law.rvs(size=400, random_state=np.random.default_rng(3))
    var = 18.0
    m2, m4 = np.var(x), np.mean((x - x.mean()) ** 4)
    assert variance_error(x, target).value == pytest.approx(abs(np.var(x, ddof=1) / var - 1), rel=1e-12)
    assert variance_error(x, target).se == pytest.approx(math.sqrt(m4 - m2**2) / (var * math.sqrt(400)), rel=1e-9)
    assert mean_error(x, target).value == pytest.approx(abs(x.mean() - 6) / math.sqrt(var), rel=1e-12)


def test_anderson_darling_treats_both_tails_alike():
    """N(0, 1): the 99 midpoint quantiles plus one answer at +10 or at -10 give the same A²,
    0.527 (the exact tails; the upper tail's log term was capped at ln 1e-16 before)."""
    target = make_target("gaussian", {"mu": 0, "sigma": 1})
    base = stats.norm.ppf((np.arange(99) + 0.5) / 99)
    up, down = (anderson_darling(np.r_[base, s * 10.0], target).value for s in (1, -1))
    assert up == pytest.approx(down, rel=1e-12) and up == pytest.approx(0.5269, abs=1e-3)
    far_up, far_down = (anderson_darling(np.r_[base, s * 1e300], target).value for s in (1, -1))
    assert far_up == pytest.approx(far_down, rel=1e-12) and math.isfinite(far_up)
