"""The outer-tail diagnostic (calbench.metrics.tails) against hand counts, the laws' own
probabilities and scipy's Spearman correlation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calbench.families import make_target
from calbench.metrics import tails
from calbench.metrics.calibration import Prompt
from calbench.metrics.pit import pit_intervals


def test_hand_counted_answers_of_a_gaussian():
    target = make_target("gaussian", {"mu": 0, "sigma": 1})
    # -3.5: far below (PIT 0.0002); 0: the mean, echoes mu; 1.7: in the upper 5%; 40: far, 30 IQRs
    o = tails.outer_of(np.array([-3.5, 0.0, 1.7, 40.0]), target)
    assert (o.valid, o.low, o.high, o.far, o.scale) == (4, 0.25, 0.5, 0.5, 0.25)
    assert o.echo == 0.0  # 0 echoes mu but is not in a tail
    assert o.outer == 0.75 and {v for v, _ in o.top} == {-3.5, 1.7, 40.0}


def test_echoes_of_the_parameters_and_the_support_ends():
    o = tails.outer_of(np.array([3.5, 10.5, 7.0, 10.5]), make_target("uniform", {"a": 3.5, "b": 10.5}))
    assert (o.low, o.high, o.echo) == (0.25, 0.5, 0.75)
    assert o.top[0] == (10.5, pytest.approx(2 / 3))
    beta = make_target("beta", {"alpha": 7, "beta": 7})
    assert set(tails.echoes(beta)) == {7.0, 0.0, 1.0}


def test_an_integer_answer_counts_with_its_pit_interval():
    target = make_target("bernoulli", {"p": 0.1})
    o = tails.outer_of(np.array([1.0]), target)  # PIT interval [0.9, 1]: half of it above 0.95
    assert o.high == pytest.approx(0.5) and o.low == 0.0
    o = tails.outer_of(np.array([0.0]), target)  # [0, 0.9]: 0.05 / 0.9 of it below 0.05
    assert o.low == pytest.approx(0.05 / 0.9) and o.high == 0.0


@pytest.mark.parametrize(
    ("family", "params"),
    [("poisson", {"lambda": 4}), ("bernoulli", {"p": 0.1}), ("binomial", {"n": 25, "p": 0.5})],
)
def test_the_law_itself_puts_exactly_the_tail_in_each_tail(family, params):
    """Every support point weighted by its probability: TAIL below, TAIL above, for integer laws too."""
    target = make_target(family, params)
    k = np.arange(0, int(target.law.ppf(1 - 1e-12)) + 1, dtype=float)
    low, high = tails.tail_mass(*pit_intervals(k, target))
    pmf = target.law.pmf(k)
    assert pmf @ low == pytest.approx(tails.TAIL, abs=1e-9)
    assert pmf @ high == pytest.approx(tails.TAIL, abs=1e-9)


def test_exact_draws_land_in_the_tails_as_often_as_the_law_says():
    for family, params in [("gaussian", {"mu": 3.5, "sigma": 3}), ("poisson", {"lambda": 4})]:
        target = make_target(family, params)
        draws = target.law.rvs(size=20000, random_state=np.random.default_rng(3)).astype(float)
        o = tails.outer_of(draws, target)
        se = math.sqrt(0.05 * 0.95 / draws.size)
        assert abs(o.low - 0.05) < 4 * se and abs(o.high - 0.05) < 4 * se
        assert o.far < 0.004  # 0.2% expected
    # a continuous law's low share is the plain count below its 5% quantile
    target = make_target("gaussian", {"mu": 0, "sigma": 1})
    x = np.linspace(-3, 3, 101)
    assert tails.outer_of(x, target).low == np.mean(stats.norm.cdf(x) < 0.05)


def test_family_means_weigh_every_family_equally():
    g = make_target("gaussian", {"mu": 0, "sigma": 1})
    u = make_target("uniform", {"a": 0, "b": 1})
    rows = {
        "gaussian": [Prompt(np.array([5.0, 0.0]), 2, g), Prompt(np.array([0.0, 0.1]), 2, g)],  # high 0.5, then 0
        "uniform": [Prompt(np.array([0.99]), 1, u)],  # high 1
        "empty": [Prompt(np.array([]), 5, u)],  # no valid answer: left out
    }
    families, overall = tails.outer_summary(rows)
    assert set(families) == {"gaussian", "uniform"}
    assert families["gaussian"]["high"].value == 0.25
    assert overall["high"].value == pytest.approx((0.25 + 1.0) / 2)
    assert overall["high"].se > 0


def _prompts(law_means, answer_medians, n=tails.MIN_VALID):
    return [
        Prompt(np.full(n, float(m)), n, make_target("gaussian", {"mu": mu, "sigma": 1}))
        for mu, m in zip(law_means, answer_medians, strict=True)
    ]


def test_location_following_is_spearmans_rho_of_the_medians():
    means, answers = [1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 9]
    got = tails.location_following(_prompts(means, answers))
    assert got.value == pytest.approx(stats.spearmanr(means, answers).statistic)
    assert got.se == pytest.approx(1.06 / math.sqrt(6 - 3))
    # too few prompts, or too few valid answers per prompt: undefined
    assert math.isnan(tails.location_following(_prompts([1, 2], [1, 2])).value)
    assert math.isnan(tails.location_following(_prompts([1, 2, 3, 4], [1, 2, 3, 4], n=3)).value)


def test_constant_answers_do_not_follow_the_parameters():
    assert math.isnan(tails.location_following(_prompts([1, 2, 3, 4], [5, 5, 5, 5])).value)
    assert tails.location_following(_prompts([1, 2, 3, 4], [1, 2, 3, 4])).value == 1.0


def test_within_family_following_averages_the_families():
    rows = {"up": _prompts([1, 2, 3], [1, 2, 3]), "down": _prompts([1, 2, 3], [3, 2, 1]), "few": _prompts([1], [1])}
    got = tails.within_family_following(rows)
    assert got.value == 0.0 and got.se == pytest.approx(1.0)  # (1, -1): sd sqrt(2), over sqrt(2)


def _record(name, kind, answers):
    """A record whose unseen split holds one gaussian(mu=0, sigma=1) prompt with these valid answers."""
    stored = [{"family": "gaussian", "target": "gaussian(mu=0,sigma=1)", "n": 20, "values": answers}]
    return {"name": name, "type": kind, "tasks": {"calbench_numeric_unseen": {"samples": stored}}}


def test_the_tails_page_shows_every_row_and_the_trained_systems_prompt_by_prompt():
    from calbench.leaderboard.pages import tails_page

    exact = np.round(stats.norm.ppf((np.arange(20) + 0.5) / 20), 4).tolist()  # one answer in each tail
    far = [40.0] * 10 + [0.0] * 10  # half of them 40 law standard deviations out
    page = tails_page.render(
        [
            _record("exact", "reference", exact),
            _record("tuned", "fine-tuned adapter", far),
            _record("full", "fine-tuned", far),
        ]
    )
    lines = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ")}
    cells = [c.strip() for c in lines["exact"].split("|")[1:-1]]
    assert cells[1:4] == ["unseen", "1 of 1", "0.1 ± 0.15"]  # 2 of 20 in the outer 10% (Agresti-Coull)
    cells = [c.strip() for c in lines["tuned"].split("|")[1:-1]]
    assert cells[3].startswith("0.5 ±") and cells[6].startswith("0.5 ±") and cells[7].startswith("0.5 ±")
    assert "## The trained systems, prompt by prompt" in page
    assert "full: outer, median" in page.split("## The trained systems")[1]  # a full fine-tune too, not only adapters
    assert "| gaussian(mu=0,sigma=1) (unseen) | 0" in page and "0.50, 20" in page and "40 (100%)" in page
    assert tails_page.write([{"name": "x", "type": "base", "tasks": {}}], Path("/nonexistent")) == []  # nothing to show
