"""The sample-size-free calibration score: the same system scores the same at any n (simulation)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from calbench.backends.references import mode
from calbench.families import make_target
from calbench.metrics.calibration import M_REF, Prompt, calibration_score, chunk_quality, prompt_score

LAWS = [
    make_target("gaussian", {"mu": 3.5, "sigma": 3}),
    make_target("exponential", {"lambda": 7}),
    make_target("beta", {"alpha": 7, "beta": 7}),
    make_target("lognormal", {"mu": 2.5, "sigma": 2}),
    make_target("poisson", {"lambda": 4}),
    make_target("binomial", {"n": 25, "p": 0.5}),
]


def _answers(system: str, target, n: int, rng) -> tuple[list[float], int]:
    """(valid answers in order, responses) of a simulated sampler."""
    law = target.law
    x = law.rvs(size=n, random_state=rng).astype(float)
    median = float(law.median())
    q1, q3 = law.ppf([0.25, 0.75])
    if system == "narrow":  # half the spread around the median
        x = median + 0.5 * (x - median)
    elif system == "shifted":  # half an IQR to the right
        x = x + 0.5 * max(q3 - q1, 1.0)
    elif system == "collapsed":
        x = np.full(n, mode(target))
    if target.integer:
        x = np.rint(x)
    lo, hi = target.support()
    valid = x[(x >= lo) & (x <= hi)]
    if system == "sometimes invalid":  # 40% of the answers are prose
        valid = valid[rng.random(valid.size) >= 0.4]
    return valid.tolist(), n


def _score(system: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    prompts = {}
    for t in LAWS:
        values, responses = _answers(system, t, n, rng)
        prompts[t.family.name] = [Prompt(np.asarray(values), responses, t)]
    return calibration_score(prompts)


@pytest.mark.parametrize("system", ["exact", "collapsed", "narrow", "shifted", "sometimes invalid"])
def test_the_same_system_scores_the_same_at_any_n(system):
    scores = {n: _score(system, n, seed=n) for n in (100, 300, 1000)}
    for (a, sa), (b, sb) in itertools.combinations(scores.items(), 2):
        assert abs(sa.value - sb.value) <= 1.96 * math.hypot(sa.se, sb.se), (system, a, b, sa, sb)
    if system == "exact":
        assert all(s.value > 95 for s in scores.values())
    if system == "collapsed":
        assert all(s.value < 5 for s in scores.values())
    if system == "sometimes invalid":  # the exact sampler's score times its valid share
        assert all(abs(s.value - 60) < 5 for s in scores.values())
    if system in ("narrow", "shifted"):  # in between, and far from both ends
        assert all(10 < s.value < 90 for s in scores.values())


def test_prompts_without_valid_answers_score_zero():
    target = LAWS[0]
    assert prompt_score([], 200, target).value == 0.0
    assert calibration_score({"gaussian": [Prompt(np.array([]), 200, target)]}).value == 0.0


def test_chunk_quality_bounds():
    target = LAWS[0]
    assert chunk_quality(np.full(M_REF, 3.5), target) == 0.0  # collapsed on the median
    exact = target.law.ppf((np.arange(M_REF) + 0.5) / M_REF)  # perfectly spread
    assert chunk_quality(exact, target) == 1.0
