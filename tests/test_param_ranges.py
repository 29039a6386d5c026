"""The training ranges (calbench.param_ranges): fresh draws, the prompt sets they define, the
lookup reference and fresh-parameter training data.

The distance checks here are written out again from the module's documented definition
(log scale for scale-like parameters, linear for locations; a unit is the training span), not
with the module's own helpers, so that a change of the module is caught by its definition."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from calbench import param_ranges as pr
from calbench.backends.references import LookupLM, OracleLM
from calbench.families import FAMILIES, InvalidParametersError, make_target, round_params, split_points
from calbench.parse import classify
from calbench.space import EVAL_MAX_BINS, HARD_MAX_BINS, canonical_space
from calbench.training.data import family_balanced, fresh_targets

TRAINING = [f for f in FAMILIES.values() if "train" in f.grids]
HELD_OUT = [f for f in FAMILIES.values() if "train" not in f.grids]


def _units(family):
    """Per parameter: (log?, lowest training value in its scale, training span), from the grid."""
    out = {}
    points = family.points("train")
    for p in family.params:
        log = p.domain in ("positive", "count", "posint")
        values = [math.log(t.params[p.name]) if log else t.params[p.name] for t in points]
        out[p.name] = (log, min(values), max(values) - min(values))
    return out


def _coordinates(target, units):
    return np.array(
        [
            ((math.log(target.params[n]) if log else target.params[n]) - low) / span
            for n, (log, low, span) in units.items()
        ]
    )


def test_every_training_family_has_ranges_and_no_held_out_family_has():
    assert len(TRAINING) == 24 and len(HELD_OUT) == 6
    for family in TRAINING:
        assert pr.axes(family)
        assert all(pr.in_range(t) for t in family.points("train")), family.name
    for family in HELD_OUT:
        with pytest.raises(ValueError, match="held-out family"):
            pr.draw(family, np.random.default_rng(0))


def test_scales_follow_the_documented_rule():
    assert (
        pr.param_scale(FAMILIES["gaussian"], "mu") == "lin" and pr.param_scale(FAMILIES["gaussian"], "sigma") == "log"
    )
    assert pr.param_scale(FAMILIES["binomial"], "n") == "log" and pr.param_scale(FAMILIES["binomial"], "p") == "lin"
    assert pr.param_scale(FAMILIES["hypergeometric"], "K") == "log"


def test_widened_ranges_cover_the_unseen_split_and_clip_to_the_domain():
    unseen = split_points("unseen", "selected")
    assert not any(pr.in_range(t) for t in unseen)  # the unseen split lies beyond the paper's ranges
    assert all(pr.in_range(t, 2.0) for t in unseen)  # and inside the ranges widened 2x
    (p,) = pr.axes(FAMILIES["geometric"])
    assert p.bounds(1.0) == (0.2, 0.8) and p.bounds(10.0) == pr.PROB_BOUNDS
    sigma = pr.axes(FAMILIES["gaussian"])[1]
    assert sigma.bounds(2.0) == pytest.approx((0.25, 4.0))  # 0.5..2 about its geometric centre 1
    with pytest.raises(ValueError, match="widen"):
        pr.draw(FAMILIES["gaussian"], np.random.default_rng(0), widen=0.5)


@pytest.mark.parametrize("widen", [1.0, 2.0, 10.0])
def test_every_corner_of_a_widened_range_builds_its_law(widen):
    """``draw`` checks a draw's parameters, not its law (built where it is used): each law's
    arguments are monotone in each axis, so a law that builds at every valid corner of the widened
    box (the extremes, where exp or a division would overflow) builds inside it."""
    for family in TRAINING:
        bounds = []
        for axis in pr.axes(family):
            lo, hi = axis.bounds(widen)
            bounds.append((axis.name, (math.ceil(lo - 1e-9), math.floor(hi + 1e-9)) if axis.integer else (lo, hi)))
        derive = family.grids["train"].derive
        built = 0
        for corner in itertools.product(*(values for _, values in bounds)):
            combo = {name: float(v) for (name, _), v in zip(bounds, corner, strict=True)}
            try:
                target = family.target(round_params(family, derive(**combo) if derive else combo))
            except InvalidParametersError:  # a corner outside the family's own check (N > M)
                continue
            assert np.isfinite(target.law.ppf(0.5)), target.key
            built += 1
        assert built > 0, family.name


@pytest.mark.parametrize("family", TRAINING, ids=lambda f: f.name)
def test_interpolation_prompts_are_inside_the_ranges_and_off_the_grid(family):
    points = [t for t in pr.interp_points() if t.family is family]
    assert len(points) >= 3
    grid = family.points("train")
    for t in points:
        for name in family.param_names:
            values = [g.params[name] for g in grid]
            assert min(values) < t.params[name] < max(values), (t.key, name)
            assert t.params[name] not in values, (t.key, name)
        assert t.key not in {g.key for g in grid}
        # Its law differs from every grid law: no grid law is closer than the nearest grid prompt's
        # neighbours are to each other at a grid step (a positive W1 / IQR, stated per family).
        assert pr.min_grid_w1_iqr(t) > 0.002, t.key


def test_interpolation_prompts_are_far_from_the_grid_laws_where_the_grid_allows():
    """Two-parameter families with coarse grids get prompts whose nearest grid law is over 0.2 IQR away."""
    for name in ("uniform", "gaussian", "binomial", "triangular", "cauchy", "laplace", "hypergeometric"):
        worst = min(pr.min_grid_w1_iqr(t) for t in pr.interp_points() if t.family.name == name)
        assert worst > 0.2, name


@pytest.mark.slow
def test_the_frozen_prompt_sets_are_what_their_generators_make():
    for family in TRAINING:
        assert [t.key for t in pr.interp_candidates(family)] == [
            t.key for t in pr.interp_points() if t.family is family
        ], family.name
        assert [t.key for t in pr.wide_candidates(family)] == [t.key for t in pr.wide_points() if t.family is family], (
            family.name
        )


@pytest.mark.slow
def test_the_committed_prompt_sets_are_what_the_writer_writes():
    """``calbench/data/prompt_sets.json`` is what ``python tasks/scripts/generate_prompt_sets.py``
    writes (about a minute): run it after a change to a training family or grid."""
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[1] / "tasks" / "scripts" / "generate_prompt_sets.py"))
    assert script["generated"]() == pr.PROMPT_SETS.read_text(), "stale: python tasks/scripts/generate_prompt_sets.py"


def test_every_training_family_has_its_prompt_sets():
    """A new training family is not silently missing from the interpolation and widened sets."""
    for table in (pr.INTERP, pr.WIDE):
        assert list(table) == [f.name for f in TRAINING]
        assert all(len(points) == 3 for points in table.values())


def test_wide_prompts_are_inside_the_widened_ranges_and_beyond_the_papers():
    points = pr.wide_points()
    assert len(points) == 72 and len({t.key for t in points}) == 72
    for t in points:
        assert pr.in_range(t, pr.WIDE_FACTOR) and not pr.in_range(t, 1.0), t.key


def test_the_lookup_reference_answers_from_the_nearest_grid_prompt_by_hand():
    # binomial(n=8, p=0.6796): n in log units of log(20/5): 8 -> 0.339, nearest grid n 10 (0.5,
    # against 5 at 0); p in linear units of 0.6: 0.7993, nearest grid p 0.7 (0.8333, against
    # 0.65 at 0.75). The grid is a product, so the nearest prompt is binomial(n=10, p=0.7).
    target = make_target("binomial", {"n": 8, "p": 0.6796})
    assert pr.nearest_training_prompt(target).key == "binomial(n=10,p=0.7)"
    # gaussian(mu=3.5, sigma=3) lies beyond the grid's corner (mu 2, sigma 2).
    assert pr.nearest_training_prompt(make_target("gaussian", {"mu": 3.5, "sigma": 3})).key == "gaussian(mu=2,sigma=2)"
    nearest = make_target("binomial", {"n": 10, "p": 0.7})
    lookup, oracle = LookupLM(seed=5), OracleLM(seed=5)
    assert [lookup.value(target) for _ in range(50)] == [oracle.value(nearest) for _ in range(50)]


def test_the_lookup_reference_gives_a_held_out_family_no_valid_answer():
    target = make_target("poisson", {"lambda": 4})
    answer = LookupLM(seed=1).value(target)
    assert classify(answer, target).valid is False
    assert LookupLM().distribution(target).invalid_mass == 1.0


def test_nearest_prompt_matches_the_definition_on_every_unseen_prompt():
    for target in split_points("unseen"):
        family = target.family
        units = _units(family)
        grid = family.points("train")
        d = [np.linalg.norm(_coordinates(g, units) - _coordinates(target, units)) for g in grid]
        assert pr.nearest_training_prompt(target).key == grid[int(np.argmin(d))].key


def _near(target, evaluation, units, margin):
    c = _coordinates(target, units)
    return any(np.all(np.abs(_coordinates(e, units) - c) < margin) for e in evaluation)


@pytest.mark.integration
@pytest.mark.parametrize("widen", [1.0, 2.0])
def test_fresh_parameters_never_come_near_an_evaluation_prompt(widen):
    """50,000 training examples per widening (100,000 in all), as a run draws them: every one a
    training family's, inside its widened range, and no evaluation prompt (the unseen and held-out
    splits, the selected points, interp, wide) within the margin in every parameter."""
    grid = split_points("train")
    order = family_balanced(grid, 1, 26, seed=3)[:50_000]  # 26 epochs of the 1,988 prompts
    targets = fresh_targets(grid, order, 3, widen)
    assert len(targets) == 50_000
    evaluation = [*split_points("unseen"), *split_points("unseen", "selected"), *pr.interp_points(), *pr.wide_points()]
    by_family: dict[str, list] = {}
    for e in evaluation:
        by_family.setdefault(e.family.name, []).append(e)
    held_out = {f.name for f in HELD_OUT}
    keys = {e.key for e in evaluation} | {t.key for f in HELD_OUT for t in f.points("heldout")}
    units = {f.name: _units(f) for f in TRAINING}
    for t, (p, _, _) in zip(targets, order, strict=True):
        assert t.family is grid[p].family and t.family.name not in held_out
        assert t.key not in keys
        assert pr.in_range(t, widen), t.key
    # The margin, checked coordinate by coordinate against every evaluation prompt of the family.
    for name, evals in by_family.items():
        mine = np.array([_coordinates(t, units[name]) for t in targets if t.family.name == name])
        theirs = np.array([_coordinates(e, units[name]) for e in evals])
        closest = np.abs(mine[:, None, :] - theirs[None, :, :]).max(axis=2).min(axis=1)
        assert closest.min() >= pr.MARGIN, name
    # Fresh draws differ from one another: the run sees new prompts, not a new grid.
    assert len({t.key for t in targets}) > 0.9 * len(targets)


def test_fresh_training_data_is_reproducible_and_seeded():
    grid = split_points("train")
    order = family_balanced(grid, 1, 1, seed=11)[:200]
    a = [t.key for t in fresh_targets(grid, order, 11, 1.0)]
    assert a == [t.key for t in fresh_targets(grid, order, 11, 1.0)]  # a resumed run sees the same prompts
    assert a != [t.key for t in fresh_targets(grid, order, 12, 1.0)]
    assert [t.family.name for t in fresh_targets(grid, order, 11, 1.0)] == [grid[p].family.name for p, _, _ in order]


# ---- issue 49, case 1: every widening that trains builds every draw's canonical space ----------


@pytest.mark.parametrize("decimals", [5, 2])
def test_the_widening_limit_is_where_a_corner_first_loses_its_canonical_space(decimals):
    """``max_widen`` is derived, not stated: at it, every valid corner of every training family's
    widened box builds its whole canonical space for both methods' settings (the soft target's
    and the evaluation's 1001 strings, the hard target's 16384); a hundredth past it, one does
    not (a lognormal's 99.9% range passes 2^53 steps of the lattice at 5 decimals)."""
    limit = pr.max_widen(decimals)
    assert 2.0 < limit < 10.0  # the default widening of 2 trains; the old test's 10 never did
    for family in TRAINING:
        for widen in (limit, 2.0):
            corners = pr.corners(family, widen)
            assert corners, family.name
            for target in corners:
                for max_bins in (EVAL_MAX_BINS, HARD_MAX_BINS):
                    space = canonical_space(target, decimals, max_bins)
                    assert len(space) >= 1 and abs(space.masses.sum() - 1) < 1e-12, target.key
    failing = []
    for family in TRAINING:
        for target in pr.corners(family, limit + 0.01):
            try:
                canonical_space(target, decimals)
            except InvalidParametersError:
                failing.append(target.key)
    assert failing, "the limit is not the largest widening that builds"
    assert pr.widen_problem(limit, decimals) is None
    assert f"the largest widening that trains at {decimals} decimals is {limit:g}" in pr.widen_problem(
        limit + 0.01, decimals
    )


def test_a_training_draw_without_a_canonical_space_is_drawn_again_from_the_same_generator():
    """At 0 decimals a uniform narrower than 1 holds no whole number, whatever corner it lies
    between: draws inside the limit with no canonical space are drawn again, the same ones for
    the same seed (a resumed run sees the same prompts), and each one builds its space."""
    widen = pr.max_widen(0)
    uniform = FAMILIES["uniform"]
    first = [pr.draw(uniform, np.random.default_rng(i), widen, decimals=0) for i in range(300)]
    assert [t.key for t in first] == [
        pr.draw(uniform, np.random.default_rng(i), widen, decimals=0).key for i in range(300)
    ]
    for t in first:
        canonical_space(t, 0, 2)
    # without the check, the same generators give some draws no space at 0 decimals
    unchecked = [pr.draw(uniform, np.random.default_rng(i), widen) for i in range(300)]
    lost = []
    for t in unchecked:
        try:
            canonical_space(t, 0, 2)
        except InvalidParametersError:
            lost.append(t.key)
    assert lost and not {t.key for t in first} & set(lost)


@pytest.mark.parametrize("widen", [3.5, 4.0, 100.0, 1000.0, 1e308])
def test_a_widening_past_the_limit_is_refused_by_draw(widen):
    with pytest.raises(ValueError, match=r"the largest widening that trains at 5 decimals is 3\.1"):
        pr.draw(FAMILIES["student_t"], np.random.default_rng(0), widen, decimals=5)
