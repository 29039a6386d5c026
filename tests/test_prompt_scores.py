"""Scoring: responses -> per-prompt records -> family and overall estimates with standard errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calbench import stats
from calbench.backends.references import format_answer, mode
from calbench.families import make_target
from calbench.metrics import sampling
from calbench.metrics.prompt_scores import PromptScore, score_prompt, summarize
from calbench.stats import Estimate

BINOMIAL = make_target("binomial", {"n": 25, "p": 0.5})
# "30" parses but is impossible under Binomial(25, .5); "abc" does not parse; "12.0"
# counts as the integer 12; the reasoning block is stripped before parsing.
RESPONSES = ["12", "13", "12.0", "abc", "30", "<think>x</think> 11"]


def test_score_prompt_counts_and_values():
    s = score_prompt(BINOMIAL, RESPONSES)
    assert (s.family, s.params) == ("binomial", {"n": 25, "p": 0.5})
    assert (s.n, s.n_parsed, s.n_valid) == (6, 5, 4)
    assert s.w1 == sampling.w1(np.array([12, 13, 12, 11]), BINOMIAL.law)
    assert s.w1 != sampling.w1(np.array([12, 13, 12, 11, 30]), BINOMIAL.law)  # the violation is not scored
    assert s.floor == sampling.oracle_floor(BINOMIAL, 4).median  # the floor at n_valid, not n
    assert s.iqr == 3.0
    assert s.value("valid_rate") == Estimate(4 / 6, stats.rate_se(4, 6))
    assert s.value("support_violation_rate") == Estimate(1 / 6, stats.rate_se(1, 6))
    assert s.value("excess_w1") == Estimate(s.w1 - s.floor, math.hypot(s.w1_se, s.floor_se))
    assert s.value("w1_iqr") == Estimate(s.w1 / 3, s.w1_se / 3)
    # Four samples fill a single chi-square cell: no test, so no pass/fail either.
    assert s.gof_test == "chi2" and math.isnan(s.gof_pvalue) and not s.gof_tested


def test_score_prompt_is_reproducible():
    # The bootstrap seed comes from the target: two scorings of the same answers agree exactly.
    first, second = score_prompt(BINOMIAL, RESPONSES), score_prompt(BINOMIAL, RESPONSES)
    assert first.w1_se == second.w1_se > 0
    assert json.dumps(first.to_dict()) == json.dumps(second.to_dict())


def test_score_prompt_without_valid_samples():
    s = score_prompt(BINOMIAL, ["abc", "-1", "2.5"])
    assert (s.n, s.n_parsed, s.n_valid, s.gof_test) == (3, 2, 0, "none")
    assert all(math.isnan(v) for v in (s.w1, s.w1_se, s.floor, s.gof_pvalue))
    assert s.value("valid_rate").value == 0.0
    assert s.value("support_violation_rate").value == pytest.approx(2 / 3)


def test_prompt_score_round_trips_through_json():
    target = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    x = target.law.rvs(size=100, random_state=np.random.default_rng(0))
    finite = score_prompt(target, [repr(float(v)) for v in x])
    back = PromptScore.from_dict(json.loads(json.dumps(finite.to_dict())))
    assert back == finite
    assert back.target == target
    assert back.value("excess_w1") == finite.value("excess_w1")


def test_prompt_score_with_nan_round_trips_through_json():
    # An untested prompt has NaN fields and NaN != NaN: compare through the JSON text.
    s = score_prompt(BINOMIAL, RESPONSES)
    text = json.dumps(s.to_dict())
    assert json.dumps(PromptScore.from_dict(json.loads(text)).to_dict()) == text


# ---- summarize -------------------------------------------------------------------------


def record(family, params, w1, w1_se, pvalue, n_valid=10, floor=0.5, floor_se=0.1, iqr=1.0):
    """A hand-made record: summarize reads only the fields, never the samples."""
    return PromptScore(family, params, 10, 10, n_valid, w1, w1_se, floor, floor_se, iqr, "ks", 0.1, pvalue)


NAN = math.nan
GAUSS, POISSON, BETA = {"mu": 0.0, "sigma": 1.0}, {"lambda": 4.0}, {"alpha": 2.0, "beta": 2.0}
RECORDS = [
    # Three Gaussian prompts must weigh as one family, not three.
    record("gaussian", GAUSS, 1.0, 0.1, 0.5),
    record("gaussian", GAUSS, 2.0, 0.2, 0.01),
    record("gaussian", GAUSS, 3.0, 0.3, 0.2),
    record("poisson", POISSON, 10.0, 0.4, 0.001),
    record("beta", BETA, 4.0, 0.5, 0.9),
    # No valid samples at all: undefined W1, which makes the W1 means undefined, but a valid rate of 0.
    record("bernoulli", {"p": 0.1}, NAN, NAN, NAN, n_valid=0, floor=NAN, floor_se=NAN),
]


def test_summarize_weights_families_equally():
    s = summarize(RECORDS[:-1])
    assert s.n_prompts == 5
    assert s.families["gaussian"]["w1"].value == pytest.approx(2.0)
    assert s.families["gaussian"]["w1"].se == pytest.approx(math.sqrt(0.1**2 + 0.2**2 + 0.3**2) / 3)
    # Equal weight over the three families: (2 + 10 + 4) / 3, not the prompt mean 4.
    assert s.overall["w1"].value == pytest.approx(16 / 3)
    family_ses = [s.families[f]["w1"].se for f in ("gaussian", "poisson", "beta")]
    assert s.overall["w1"].se == pytest.approx(math.sqrt(sum(se**2 for se in family_ses)) / 3)
    assert s.overall["excess_w1"].value == pytest.approx(16 / 3 - 0.5)


def test_a_family_without_valid_samples_makes_the_w1_mean_undefined():
    # Averaging only the families a model answers would reward answering less.
    s = summarize(RECORDS)
    assert math.isnan(s.families["bernoulli"]["w1"].value)
    assert math.isnan(s.overall["w1"].value) and math.isnan(s.overall["excess_w1_iqr"].value)


def test_summarize_keeps_families_without_valid_samples_in_the_valid_rate():
    s = summarize(RECORDS)
    assert s.families["bernoulli"]["valid_rate"].value == 0.0
    assert s.overall["valid_rate"].value == pytest.approx(3 / 4)  # three families at 1, one at 0


def test_summarize_reports_the_median_over_families():
    s = summarize(RECORDS)
    # iqr = 1, so w1_iqr is w1: the median of 2, 10, 4 and the undefined family counted
    # as worst (+inf) is (4 + 10) / 2.
    assert s.overall["w1_iqr_median"].value == pytest.approx(7.0)
    assert s.overall["excess_w1_iqr_median"].value == pytest.approx(6.5)
    assert 0 < s.overall["w1_iqr_median"].se < 5
    defined = summarize(RECORDS[:-1])
    assert defined.overall["w1_iqr_median"].value == pytest.approx(4.0)
    # With half of the families undefined the median is undefined too.
    assert math.isnan(summarize([RECORDS[3], RECORDS[-1]]).overall["w1_iqr_median"].value)


def test_summarize_gof_pass_rate():
    s = summarize(RECORDS)
    assert s.families["gaussian"]["gof_pass_rate"].value == pytest.approx(2 / 3)  # p = .5 and .2 pass
    assert s.families["gaussian"]["gof_pass_rate"].se == pytest.approx(stats.rate_se(2, 3))
    assert s.families["poisson"]["gof_pass_rate"].value == 0.0
    assert math.isnan(s.families["bernoulli"]["gof_pass_rate"].value)  # nothing was tested
    assert s.overall["gof_pass_rate"].value == pytest.approx((2 / 3 + 0 + 1) / 3)
    # Equal weight over the families with a test; their binomial SEs combine in quadrature.
    family_ses = [s.families[f]["gof_pass_rate"].se for f in ("gaussian", "poisson", "beta")]
    assert s.overall["gof_pass_rate"].se == pytest.approx(math.sqrt(sum(se**2 for se in family_ses)) / 3)


def test_summarize_ignores_record_order():
    a, b = summarize(RECORDS), summarize(RECORDS[::-1])
    assert a.overall["w1"] == b.overall["w1"]
    assert list(a.families) == list(b.families)  # families in table order, whatever the input order


# ---- end to end with reference samplers ------------------------------------------------

# Continuous and integer, light and heavy tails, bounded and lattice supports. Cauchy is
# left out on purpose: a collapsed Cauchy sampler is not detectable by excess W1 at n=200
# (its exact sampler's W1 spread is as wide as the gap), though the KS test rejects it.
E2E = [
    make_target("gaussian", {"mu": 3.5, "sigma": 3}),
    make_target("exponential", {"lambda": 7}),
    make_target("beta", {"alpha": 7, "beta": 7}),
    make_target("binomial", {"n": 25, "p": 0.5}),
    make_target("poisson", {"lambda": 4}),
    make_target("bernoulli", {"p": 0.1}),
]
N = 200


def exact_responses(target, rng):
    # As the oracle model prints them: integers bare, floats at full precision.
    x = target.law.rvs(size=N, random_state=rng)
    return [str(int(v)) if target.integer else repr(float(v)) for v in x]


def test_exact_samplers_score_zero_excess_w1_and_excess_pit_w1():
    rng = np.random.default_rng(11)
    s = summarize([score_prompt(t, exact_responses(t, rng)) for t in E2E])
    for metric in ("excess_w1", "excess_pit_w1"):
        excess = s.overall[metric]
        assert abs(excess.value) <= 3 * excess.se, metric
    assert s.overall["valid_rate"].value == 1.0
    assert s.overall["support_violation_rate"].value == 0.0
    assert s.overall["ks_at_n"].value == 1.0  # 200 exact draws per prompt pass KS@100
    assert 0 < s.overall["pit_w1"].value < 0.05


def test_collapsed_samplers_have_positive_excess_w1_in_every_family():
    records = [score_prompt(t, [format_answer(mode(t), t)] * N) for t in E2E]
    s = summarize(records)
    for family, estimates in s.families.items():
        excess = estimates["excess_w1"]
        assert excess.value > 3 * excess.se, family
        assert estimates["valid_rate"].value == 1.0, family
    assert all(r.gof_pvalue < 0.05 for r in records)  # every goodness-of-fit test rejects the mode
    assert s.overall["gof_pass_rate"].value == 0.0


def test_prompt_scores_carry_the_pit_metrics():
    from calbench.metrics import pit

    target = make_target("poisson", {"lambda": 4})
    responses = exact_responses(target, np.random.default_rng(4))
    s = score_prompt(target, responses)
    values = np.array([float(r) for r in responses])
    assert (s.pit_w1, s.pit_ks) == pit.pit_w1_ks(*pit.pit_intervals(values, target))
    floor = pit.pit_floor(target, N)
    assert (s.pit_floor, s.pit_floor_se) == (floor.median, floor.se)
    assert s.pit_w1_se >= floor.spread > 0
    assert s.value("excess_pit_w1") == Estimate(s.pit_w1 - floor.median, math.hypot(s.pit_w1_se, floor.se))
    assert s.ks_at_n == pit.ks_at_n(values, target) and s.ks_at_n  # 200 exact draws pass
    back = PromptScore.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s


def test_collapsed_samplers_are_far_in_pit_w1_and_fail_ks_at_n():
    s = summarize([score_prompt(t, [format_answer(mode(t), t)] * N) for t in E2E])
    for family, estimates in s.families.items():
        excess = estimates["excess_pit_w1"]
        assert excess.value > 3 * excess.se, family
    # Bernoulli(0.1) answered "0" 100 times is only ~3 standard errors off (0.9 of the mass is at
    # 0): p ≈ 1e-3, not below KS@N's 1e-4. Every other collapsed family fails.
    passing = {f for f, e in s.families.items() if e["ks_at_n"].value > 0}
    assert passing == {"bernoulli"}
    assert s.overall["pit_w1"].value > 0.1


def test_too_few_valid_samples_fail_ks_at_n():
    target = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    s = score_prompt(target, exact_responses(target, np.random.default_rng(0))[:99])
    assert not s.ks_at_n and math.isfinite(s.pit_w1)
