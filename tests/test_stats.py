"""The statistics vocabulary: rates, means, medians and their NaN policies, against hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calbench import stats
from calbench.stats import Estimate

NAN = math.nan


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_rate_se_is_positive_at_zero_and_one(n):
    assert stats.rate_se(0, n) > 0
    assert stats.rate_se(n, n) > 0
    assert stats.rate_se(0, n) == pytest.approx(stats.rate_se(n, n))  # symmetric in k <-> n - k


@pytest.mark.parametrize(("k", "n"), [(0, 0), (0, 5), (3, 7), (500, 1000), (999, 1000)])
def test_rate_se_is_agresti_coull(k, n):
    # Agresti-Coull with z = 2 (rounding 1.96): add z^2/2 successes and z^2/2 failures.
    z = 2.0
    n_tilde = n + z**2
    p_tilde = (k + z**2 / 2) / n_tilde
    assert stats.rate_se(k, n) == pytest.approx(math.sqrt(p_tilde * (1 - p_tilde) / n_tilde), rel=1e-12)


def test_rate_se_approaches_wald_for_large_n():
    assert stats.rate_se(5000, 10000) == pytest.approx(math.sqrt(0.25 / 10000), rel=1e-3)


def test_rate_is_undefined_without_trials():
    assert stats.rate(3, 4) == Estimate(0.75, stats.rate_se(3, 4))
    assert stats.rate(0, 0) == stats.UNDEFINED


def test_quadrature_mean_by_hand():
    got = stats.quadrature_mean([Estimate(1.0, 0.3), Estimate(2.0, 0.4), Estimate(6.0, 0.0)], nan="propagate")
    assert got.value == pytest.approx(3.0)
    assert got.se == pytest.approx(0.5 / 3)  # sqrt(0.09 + 0.16 + 0) / 3


def test_quadrature_mean_nan_policies():
    values = [Estimate(1.0, 0.3), Estimate(NAN, NAN), Estimate(3.0, 0.4)]
    assert math.isnan(stats.quadrature_mean(values, nan="propagate").value)
    omitted = stats.quadrature_mean(values, nan="omit")
    assert omitted.value == pytest.approx(2.0) and omitted.se == pytest.approx(0.25)
    assert stats.quadrature_mean([], nan="omit") == stats.UNDEFINED
    # An undefined standard error is an exact value (0), not an undefined mean.
    assert stats.quadrature_mean([Estimate(1.0, NAN), Estimate(3.0, 0.4)], nan="propagate") == Estimate(2.0, 0.2)


def test_sample_mean_by_hand():
    got = stats.sample_mean([1.0, 2.0, 6.0], nan="omit")
    assert got.value == pytest.approx(3.0)
    assert got.se == pytest.approx(math.sqrt(7.0 / 3))  # s^2 = (4 + 1 + 9) / 2 = 7, se = s / sqrt(3)
    assert stats.sample_mean([1.0, None, NAN, 6.0], nan="omit").value == pytest.approx(3.5)
    assert math.isnan(stats.sample_mean([1.0, None], nan="propagate").value)
    single = stats.sample_mean([4.0], nan="omit")
    assert single.value == 4.0 and math.isnan(single.se)
    assert stats.sample_mean([], nan="omit") == stats.UNDEFINED


def test_bootstrap_median_of_a_sample_equals_a_hand_bootstrap():
    values = [5.0, 1.0, 3.0, 9.0, 2.0]
    got = stats.bootstrap_median(values, nan="omit", seed=7)
    x = np.array(values)
    draws = np.median(x[np.random.default_rng(7).integers(0, 5, (stats.BOOTSTRAP_DRAWS, 5))], axis=1)
    assert got == Estimate(3.0, float(draws.std(ddof=1)))
    assert stats.bootstrap_median([NAN, None, 4.0, 8.0], nan="omit", seed=0).value == 6.0


def test_bootstrap_median_of_estimates_adds_their_noise():
    values, ses = [1.0, 2.0, 10.0], [0.1, 0.2, 0.0]
    got = stats.bootstrap_median(values, nan="omit", seed=3, ses=ses)
    noise = np.random.default_rng(3).standard_normal((stats.BOOTSTRAP_DRAWS, 3)) * np.array(ses)
    assert got == Estimate(2.0, float(np.median(np.array(values) + noise, axis=1).std(ddof=1)))
    exact = stats.bootstrap_median(values, nan="omit", seed=3, ses=[0.0, 0.0, 0.0])
    assert exact == Estimate(2.0, 0.0)


def test_bootstrap_median_counts_missing_values_as_the_worst():
    # One missing of three: the median moves up to the largest defined value.
    assert stats.bootstrap_median([1.0, NAN, 2.0], nan="worst", seed=0, ses=[0, 0, 0]).value == 2.0
    # Two missing of three: the median is a missing value, so undefined.
    assert stats.bootstrap_median([1.0, NAN, None], nan="worst", seed=0, ses=[0, 0, 0]) == stats.UNDEFINED
    assert stats.bootstrap_median([], nan="omit", seed=0) == stats.UNDEFINED


def test_seed_for_is_stable_and_distinguishes_parts():
    assert stats.seed_for("floor", "gaussian(mu=0)", 10) == stats.seed_for("floor", "gaussian(mu=0)", 10)
    assert stats.seed_for("a", 1) != stats.seed_for("a", 2)
    assert 0 <= stats.seed_for("x") < 2**63
