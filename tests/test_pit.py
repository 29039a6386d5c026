"""PIT metrics: against scipy on continuous laws, by hand on a 3-point law, uniform for exact
integer samples, and calibrated KS tests (exact samplers rejected at the nominal rate)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calbench.families import make_target
from calbench.metrics.pit import ks_at_n, ks_pvalue, pit_floor, pit_intervals, pit_w1_ks

CONTINUOUS = [
    make_target("gaussian", {"mu": 3.5, "sigma": 3}),
    make_target("cauchy", {"x0": 3.5, "gamma": 3}),
    make_target("exponential", {"lambda": 7}),
    make_target("beta", {"alpha": 7, "beta": 7}),
]
ROOT = Path(__file__).resolve().parents[1]
GRID = (np.arange(400_000) + 0.5) / 400_000  # Uniform(0, 1) for scipy's empirical W1


@pytest.mark.parametrize("n", [1, 7, 200])
@pytest.mark.parametrize("target", CONTINUOUS, ids=lambda t: t.key)
def test_continuous_pit_metrics_equal_scipy(target, n):
    x = target.law.rvs(size=n, random_state=np.random.default_rng(n))
    a, b = pit_intervals(x, target)
    w1, ks = pit_w1_ks(a, b)
    assert w1 == pytest.approx(stats.wasserstein_distance(a, GRID), abs=2e-6)
    assert ks == pytest.approx(stats.kstest(x, target.law.cdf).statistic, abs=1e-12)
    assert 0 <= w1 <= 0.5 and 0 <= ks <= 1


def test_three_point_law_by_hand():
    # Binomial(2, 1/2): F(-1) = 0, F(0) = 1/4, F(1) = 3/4, F(2) = 1.
    law = make_target("binomial", {"n": 2, "p": 0.5})
    # Samples in the law's own proportions: G(u) = u exactly.
    assert pit_w1_ks(*pit_intervals(np.array([0, 1, 1, 2]), law)) == pytest.approx((0.0, 0.0), abs=1e-15)
    # 0, 0, 0, 2: G = 3u on [0, 1/4], 3/4 on [1/4, 3/4], u on [3/4, 1]:
    # ∫|G - u| = ∫_0^{1/4} 2u du + ∫_{1/4}^{3/4} |3/4 - u| du = 1/16 + 1/8; the largest gap is 1/2 at u = 1/4.
    w1, ks = pit_w1_ks(*pit_intervals(np.array([0, 0, 0, 2]), law))
    assert w1 == pytest.approx(3 / 16, abs=1e-15) and ks == pytest.approx(0.5, abs=1e-15)
    # A collapsed sampler always answering 1: G = 0 up to 1/4, then ramps to 1 at 3/4:
    # ∫_0^{1/4} u du + ∫_{1/4}^{3/4} |u - 1/2| du + ∫_{3/4}^1 (1 - u) du = 1/32 + 1/16 + 1/32.
    w1, ks = pit_w1_ks(*pit_intervals(np.array([1, 1, 1]), law))
    assert w1 == pytest.approx(1 / 8, abs=1e-15)
    assert ks == pytest.approx(0.25, abs=1e-15)


def test_integer_pit_intervals():
    law = make_target("poisson", {"lambda": 4})
    a, b = pit_intervals(np.array([0.0, 3.0]), law)
    assert a.tolist() == [0.0, pytest.approx(law.law.cdf(2))] and b.tolist() == pytest.approx(law.law.cdf([0, 3]))


@pytest.mark.parametrize(
    "target",
    [make_target("poisson", {"lambda": 4}), make_target("bernoulli", {"p": 0.1}), make_target("skellam",
     {"mu1": 10.5, "mu2": 10.5})],
    ids=lambda t: t.key,
)  # fmt: skip
def test_non_randomized_pit_of_exact_integer_samples_is_uniform(target):
    rng = np.random.default_rng(3)
    exact = target.law.rvs(size=200_000, random_state=rng)
    w1, ks = pit_w1_ks(*pit_intervals(exact, target))
    assert w1 < 0.002 and ks < 0.006  # sampling noise of 200,000 draws
    # Off by one: far from uniform.
    assert pit_w1_ks(*pit_intervals(exact + 1, target))[0] > 0.02


@pytest.mark.parametrize(
    "target",
    [make_target("gaussian", {"mu": 3.5, "sigma": 3}), make_target("poisson", {"lambda": 4}),
     make_target("binomial", {"n": 25, "p": 0.5}), make_target("bernoulli", {"p": 0.5})],
    ids=lambda t: t.key,
)  # fmt: skip
def test_exact_samplers_are_rejected_at_the_nominal_rate(target):
    rng = np.random.default_rng(11)
    prompts = 600
    rejected = sum(ks_pvalue(target.law.rvs(size=100, random_state=rng), target) <= 0.05 for _ in range(prompts))
    half = 1.96 * np.sqrt(0.05 * 0.95 / prompts)  # the binomial 95% interval around 0.05
    assert 0.05 - half <= rejected / prompts <= 0.05 + half, rejected / prompts


def test_ks_at_n():
    gaussian = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    exact = gaussian.law.rvs(size=150, random_state=np.random.default_rng(0))
    assert ks_at_n(exact, gaussian)  # the first 100 of 150 exact draws pass
    assert not ks_at_n(exact[:99], gaussian)  # fewer than N valid samples: a fail
    assert not ks_at_n(np.full(150, 3.5), gaussian)  # collapsed
    assert ks_at_n(exact[:20], gaussian, n=20)


def test_pit_floor():
    gaussian, cauchy = make_target("gaussian", {"mu": 0, "sigma": 1}), make_target("cauchy", {"x0": 0, "gamma": 1})
    assert pit_floor(gaussian, 100) == pit_floor(cauchy, 100)  # law-free for continuous laws
    floors = [pit_floor(gaussian, n).median for n in (10, 100, 1000)]
    assert floors[0] > floors[1] > floors[2] > 0
    assert pit_floor(gaussian, 100).se < 0.02 * pit_floor(gaussian, 100).median  # small Monte-Carlo noise
    rng = np.random.default_rng(5)  # an independent Monte-Carlo of the continuous floor
    independent = np.median([pit_w1_ks(np.sort(u), np.sort(u))[0] for u in rng.random((2000, 100))])
    assert independent == pytest.approx(pit_floor(gaussian, 100).median, abs=4 * pit_floor(gaussian, 100).se + 5e-4)


@pytest.mark.parametrize(
    "target",
    [make_target("poisson", {"lambda": 4}), make_target("bernoulli", {"p": 0.1}),
     make_target("skellam", {"mu1": 10.5, "mu2": 10.5})],
    ids=lambda t: t.key,
)  # fmt: skip
def test_batched_integer_pit_equals_one_row_at_a_time(target):
    from calbench.metrics.pit import integer_pit_w1_ks

    draws = np.rint(target.law.rvs(size=(40, 37), random_state=np.random.default_rng(2)))
    w1, ks = integer_pit_w1_ks(draws, target)
    one_by_one = np.array([pit_w1_ks(*pit_intervals(row, target)) for row in draws])
    np.testing.assert_allclose(w1, one_by_one[:, 0], atol=1e-15)
    np.testing.assert_allclose(ks, one_by_one[:, 1], atol=1e-15)


@pytest.mark.parametrize(
    "target",
    [make_target("poisson", {"lambda": 4}), make_target("bernoulli", {"p": 0.1}),
     make_target("skellam", {"mu1": 10.5, "mu2": 10.5}), make_target("geometric", {"p": 0.01})],
    ids=lambda t: t.key,
)  # fmt: skip
def test_integer_pit_counts_by_bincount_as_by_sorting(target, monkeypatch):
    """A narrow lattice's rows are tallied by bincount, a wide one's by sorting: the same numbers."""
    from calbench.metrics import pit

    draws = np.rint(target.law.rvs(size=(300, 50), random_state=np.random.default_rng(5)))
    tallied = pit.integer_pit_w1_ks(draws, target)
    monkeypatch.setattr(pit, "COUNTING_CELLS", 0)
    sorted_ = pit.integer_pit_w1_ks(draws, target)
    for a, b in zip(tallied, sorted_, strict=True):
        np.testing.assert_array_equal(a, b)


# ---- the calibration score's threshold, to a stated precision (issue 36, case 19) ------------


def test_the_order_statistic_interval_of_q95():
    """q95_reps' error: the 95% order-statistic interval of the percentile, relative (by hand on a
    uniform sample: the percentile 0.95, the interval's half-width about 1.96 sqrt(.95 .05 / r))."""
    from calbench.metrics.pit import q95_reps

    r = 1_000_000
    x = (np.arange(r) + 0.5) / r
    q, error = q95_reps(x)
    assert q == pytest.approx(0.95, abs=1e-6)
    assert error == pytest.approx(1.96 * np.sqrt(0.95 * 0.05 / r) / 0.95, rel=1e-3)


def test_the_thresholds_are_read_from_the_table_for_every_evaluated_integer_law():
    from calbench.metrics import q95_table
    from calbench.metrics.pit import Q95_PRECISION_ELSE, exact_q95, simulated_q95
    from calbench.param_ranges import prompt_set

    assert sorted(q95_table.CONTINUOUS) == list(range(1, 51))
    # every continuous entry to a Monte-Carlo standard error under 0.1% (its 95% half-width under
    # 0.2%); each integer one states the error it reached
    assert all(q95_table.ERRORS[f"continuous {n}"] < 2e-3 for n in q95_table.CONTINUOUS)
    assert all(f"{key} {n}" in q95_table.ERRORS for key, n in q95_table.INTEGER)
    targets = [*prompt_set("unseen", "selected"), *prompt_set("heldout", "selected"), *prompt_set("interp")]
    targets += [*prompt_set("train", "selected"), *prompt_set("wide")]
    for t in (t for t in targets if t.integer):
        assert (t.key, 50) in q95_table.INTEGER, t.key
        assert exact_q95(t, 50) == q95_table.INTEGER[(t.key, 50)]
    # the board's unseen and held-out integer laws at every smaller chunk too, each exactly what
    # exact_q95 would simulate without the entry (the table saves time, never changes a number)
    for t in (t for t in [*prompt_set("unseen", "selected"), *prompt_set("heldout", "selected")] if t.integer):
        assert all((t.key, n) in q95_table.INTEGER for n in range(1, 50)), t.key
    poisson = make_target("poisson", {"lambda": 4})
    assert simulated_q95(poisson, 31, Q95_PRECISION_ELSE)[0] == q95_table.INTEGER[(poisson.key, 31)]
    # 4,000 replicates gave 0.08335 for any continuous law at 50; 400,000 give 0.08229 ± 0.0001
    assert exact_q95(make_target("gaussian", {"mu": 0, "sigma": 1}), 50) == pytest.approx(0.08229, abs=2e-4)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "params", "n"),
    [("gaussian", {"mu": 0, "sigma": 1}, 50), ("gaussian", {"mu": 0, "sigma": 1}, 7), ("poisson", {"lambda": 4}, 50)],
)
def test_a_fresh_simulation_agrees_with_the_table_to_its_precision(family, params, n):
    """Another seed's simulation lands within the stated precision (twice it: both have an error)."""
    from calbench.metrics import pit, q95_table

    target = make_target(family, params)
    stored = q95_table.CONTINUOUS[n] if not target.integer else q95_table.INTEGER[(target.key, n)]
    parts = [pit._exact_pit_w1(target, n, pit.Q95_BATCH, 10_000 + i) for i in range(40)]
    q, error = pit.q95_reps(np.concatenate(parts))
    stated = q95_table.ERRORS[f"continuous {n}" if not target.integer else f"{target.key} {n}"]
    assert error < 3 * pit.Q95_PRECISION
    assert abs(q - stored) / stored < stated + error  # the two 95% intervals overlap


def _q95_script() -> dict:
    import runpy

    return runpy.run_path(str(ROOT / "tasks" / "scripts" / "generate_q95_table.py"))


def test_the_table_writer_writes_what_the_table_reads(tmp_path):
    """``python tasks/scripts/generate_q95_table.py`` writes the three tables' entries; the file read
    back holds exactly the entries it was given, and the committed file is what the script writes
    from its own entries (its layout, one entry a line)."""
    from calbench.metrics import q95_table

    script = _q95_script()
    table = tmp_path / "q95_table.json"
    given = ({1: 0.5, 2: 0.25}, {("poisson(lambda=4)", 50): 0.01}, {"continuous 1": 1e-3, "continuous 2": 2e-3})
    script["write"](given, table)
    assert given == q95_table.read(table)
    committed = (q95_table.CONTINUOUS, q95_table.INTEGER, q95_table.ERRORS)
    assert script["text"](committed) == q95_table.TABLE.read_text()


@pytest.mark.parametrize(("key", "n"), [("continuous", 1), ("bernoulli(p=0.1)", 3), ("binomial(n=25,p=0.5)", 7)])
def test_a_sample_of_the_committed_thresholds_is_what_the_writer_computes(key, n):
    """The script's ``simulate`` (the seeds ``exact_q95`` uses) recomputes committed entries exactly,
    and their stated errors: the cheap ones here, entries at 50 answers in the slow test below."""
    from calbench.metrics import q95_table

    q, error = _q95_script()["simulate"](key, n)
    assert q == (q95_table.CONTINUOUS[n] if key == "continuous" else q95_table.INTEGER[(key, n)])
    assert float(f"{error:.3g}") == q95_table.ERRORS[f"{key} {n}"]


@pytest.mark.slow
def test_a_sample_of_the_thresholds_at_fifty_answers_is_what_the_writer_computes():
    """An integer law's entry at the score's 50 answers, drawn from the table by a fixed seed, and
    the continuous one: each recomputed by the script exactly (about 25 s of one idle core)."""
    from calbench.metrics import q95_table

    simulate = _q95_script()["simulate"]
    at_fifty = sorted(key for key, n in q95_table.INTEGER if n == 50)
    sample = [at_fifty[i] for i in np.random.default_rng(50).choice(len(at_fifty), 1, replace=False)]
    assert simulate("continuous", 50)[0] == q95_table.CONTINUOUS[50]
    for key in sample:
        assert simulate(key, 50)[0] == q95_table.INTEGER[(key, 50)], key
