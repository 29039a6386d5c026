"""The training families' parameter ranges: fresh draws, distances, the nearest training prompt,
and the two prompt sets defined by the ranges (interpolation and widened).

The paper trains on fixed grids (``Family.grids["train"]``). Here a training family's *range*
is its training grid's box: each axis of the grid (a parameter, or a derived axis such as
Uniform's width) from its smallest to its largest grid value. Every parameter has a *scale*:

* ``lin`` for locations and probabilities (domains ``real``, ``prob``, ``open_prob``);
* ``log`` for scale-like parameters, shapes and counts (``positive``, ``count``, ``posint``);

and the grids' derived axes have theirs in ``AXIS_SCALES``. In its scale, a parameter's
*unit* is its training span (largest minus smallest training value): distances between
prompts of a family are measured in these units, so a unit is the whole training range.

* ``draw`` gives fresh parameters: each axis uniform in its scale over the range (log-uniform
  for scale-like axes, uniform for locations; integer axes rounded), widened by a factor
  (the box's half-width times ``widen`` about its centre, in the axis's scale, clipped to the
  axis's domain), rounded like every prompt (4 significant digits), and never within
  ``MARGIN`` of an evaluation prompt: a draw whose every parameter lies within ``MARGIN`` units
  of the same parameter of one of ``evaluation_prompts()`` is drawn again.
* ``nearest_training_prompt`` is the training-grid prompt of the same family at the smallest
  Euclidean distance in units (the lookup reference, ``calbench-lookup``, answers from its law).
* ``INTERP``: three prompts per training family, every parameter strictly inside its training
  values' range and off every training grid value, chosen among fresh draws for the largest
  W1 / IQR between their law and the nearest *law* of the grid (``interp_candidates`` makes
  them; ``tests/test_param_ranges.py`` checks both).
* ``WIDE``: three prompts per training family drawn from the ranges widened by ``WIDE_FACTOR``,
  each with at least one parameter outside the paper's training values: where an adapter
  trained on the widened ranges stands inside them (its in-range score), and what the
  paper's ranges do not cover.

Both sets are data, ``calbench/data/prompt_sets.json``, written by
``python tasks/scripts/generate_prompt_sets.py`` from ``interp_candidates`` and
``wide_candidates``: run it after adding a training family or changing a training grid.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from calbench.extra_families import EXTRA_FAMILIES, VALIDATION, VALIDATION_POINTS
from calbench.families import FAMILIES, Family, InvalidParametersError, Target, get_family, ppf, round_params
from calbench.name_pairs import name_points
from calbench.space import DEFAULT_DECIMALS, HARD_MAX_BINS, canonical_space, check_space
from calbench.stats import seed_for

Scale = Literal["lin", "log"]

MARGIN = 0.02  # a fresh draw keeps this many units away from every evaluation prompt (module docstring)
WIDE_FACTOR = 2.0  # the widening of the WIDE prompt set
# Derived grid axes (not parameters): their scale, their domain in natural units, and their
# value for given parameters (to tell whether a prompt lies inside a range).
AXIS_SCALES: dict[str, tuple[Scale, float, float, Callable[[dict[str, float]], float]]] = {
    "width": ("log", 0.0, math.inf, lambda p: p["b"] - p["a"]),  # Uniform's and Triangular's b - a
    "mode": ("lin", 0.0, 1.0, lambda p: (p["c"] - p["a"]) / (p["b"] - p["a"])),  # Triangular's mode
    "f": ("lin", 0.05, 0.95, lambda p: p["K"] / p["M"]),  # Hypergeometric's K / M (never degenerate)
    "s": ("log", 0.0, math.inf, lambda p: list(p.values())[1]),  # Laplace's, Logistic's, Gumbel's scale
    # the extra families' (calbench.extra_families): a bounded law's upper - lower, and the quantiles
    # of a truncation's base at its bounds (a function of the base law, not of the prompt's values)
    "span": ("log", 0.0, math.inf, lambda p: p["upper"] - p["lower"]),
    "q_lower": ("lin", 0.001, 0.499, lambda p: math.nan),
    "q_upper": ("lin", 0.501, 0.999, lambda p: math.nan),
}
PROB_BOUNDS = (0.02, 0.98)  # a widened probability stays clear of degenerate laws
W1_POINTS = 1000  # quantile midpoints of the law-to-law W1 (heavy tails: a truncated W1)
HELDOUT_POINTS = 200  # the held-out margin's: 200 midpoints, a draw's W1 at a fifth of the cost


def param_scale(family: Family, name: str) -> Scale:
    """``lin`` for locations and probabilities, ``log`` for scale-like parameters and counts."""
    (param,) = [p for p in family.params if p.name == name]
    return "lin" if param.domain in ("real", "prob", "open_prob") else "log"


def _to(scale: Scale, x: np.ndarray | Sequence[float] | float) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return np.log(np.where(x > 0, x, 0.5)) if scale == "log" else x  # a count of 0 sits half a step below 1


def _from(scale: Scale, u: np.ndarray | float) -> np.ndarray:
    u = np.asarray(u, dtype=float)
    return np.exp(u) if scale == "log" else u


@dataclass(frozen=True)
class Axis:
    """One axis of a family's training grid: its scale, its training box, its domain."""

    name: str
    scale: Scale
    lo: float  # the smallest and largest grid value, natural units
    hi: float
    integer: bool
    domain: tuple[float, float]  # where a widened range is clipped, natural units

    def bounds(self, widen: float) -> tuple[float, float]:
        """The range widened by ``widen`` about its centre in the axis's scale, clipped to the domain."""
        if widen == 1:  # the training box itself, exactly
            return self.lo, self.hi
        a, b = float(_to(self.scale, self.lo)), float(_to(self.scale, self.hi))
        centre, half = (a + b) / 2, (b - a) / 2 * widen
        lo, hi = float(_from(self.scale, centre - half)), float(_from(self.scale, centre + half))
        return max(lo, self.domain[0]), min(hi, self.domain[1])


def is_training_family(family: Family) -> bool:
    """One of the paper's 24 training families (not a held-out one, not a training-only extra one)."""
    return family.name in FAMILIES and "train" in family.grids


def _family(family: Family | str) -> Family:
    """A family with a range to draw from: a training family or an extra one (a held-out family
    raises ``ValueError``)."""
    f = get_family(family) if isinstance(family, str) else family
    if "train" not in f.grids:
        raise ValueError(f"{f.name} is a held-out family: it has no training range")
    return f


@cache
def axes(family: Family) -> tuple[Axis, ...]:
    """The axes of ``family``'s training grid, in grid order."""
    out = []
    for name, values in _family(family).grids["train"].axes:
        params = {p.name: p for p in family.params}
        if name in params:
            p = params[name]
            scale = param_scale(family, name)
            domain = PROB_BOUNDS if p.domain in ("prob", "open_prob") else (1.0 if p.integer else 0.0, math.inf)
            if scale == "lin" and p.domain == "real":
                domain = (-math.inf, math.inf)
            out.append(Axis(name, scale, min(values), max(values), p.integer, domain))
        else:
            scale, lo, hi, _ = AXIS_SCALES[name]
            out.append(Axis(name, scale, min(values), max(values), False, (lo, hi)))
    return tuple(out)


@cache
def units(family: Family) -> dict[str, tuple[Scale, float, float]]:
    """Per parameter: (scale, smallest training value in that scale, its training span)."""
    points = family.points("train")
    out = {}
    for name in family.param_names:
        scale = param_scale(family, name)
        values = _to(scale, [t.params[name] for t in points])
        out[name] = (scale, float(values.min()), float(values.max() - values.min()))
    return out


def coordinates(targets: list[Target]) -> np.ndarray:
    """Each target's parameters in units (rows: targets; columns: the family's parameters)."""
    if not targets:
        return np.zeros((0, 0))
    family = targets[0].family
    u = units(family)
    cols = []
    for name in family.param_names:
        scale, low, span = u[name]
        cols.append((_to(scale, [t.params[name] for t in targets]) - low) / span)
    return np.stack(cols, axis=1)


def nearest_training_prompt(target: Target) -> Target:
    """The training-grid prompt of ``target``'s family nearest to it (Euclidean distance in units;
    ties: the first in grid order). A held-out family raises ``ValueError``."""
    family = _family(target.family)
    points = family.points("train")
    d = np.linalg.norm(coordinates(points) - coordinates([target]), axis=1)
    return points[int(np.argmin(d))]


def _draw_axes(family: Family, rng: np.random.Generator, widen: float) -> dict[str, float]:
    values = {}
    for axis in axes(family):
        lo, hi = axis.bounds(widen)
        if axis.integer:  # each integer of [lo, hi] takes its half-step cell of the scale
            lo, hi = math.ceil(lo - 1e-9), math.floor(hi + 1e-9)
            a, b = float(_to(axis.scale, lo - 0.5)), float(_to(axis.scale, hi + 0.5))
            values[axis.name] = float(min(max(round(float(_from(axis.scale, rng.uniform(a, b)))), lo), hi))
        else:
            a, b = float(_to(axis.scale, lo)), float(_to(axis.scale, hi))
            values[axis.name] = float(_from(axis.scale, rng.uniform(a, b)))
    return values


# Tries before a draw gives up. A box that lies mostly near held-out laws keeps few of its draws
# (the power function on [0, b]: about 1 in 200, those with alpha above 12; the logarithmic law 1
# in 140): 1,000 tries failed such a family's draw about once in 150. A draw kept within fewer
# tries is the same draw whatever this limit, so raising it changes no run's prompts.
MAX_TRIES = 20_000


def draw(
    family: Family | str, rng: np.random.Generator, widen: float = 1.0, avoid: bool = True, decimals: int | None = None
) -> Target:
    """Fresh parameters of a training family (module docstring); ``avoid`` keeps them ``MARGIN``
    units away from every evaluation prompt. With ``decimals`` (a training run's), a draw whose
    law has no canonical space at those decimals (``calbench.space.check_space``) is drawn again,
    as invalid parameters are: from the same generator, so a run and its resumption see the same
    prompts. Raises ``ValueError`` for a held-out family, ``widen`` < 1, or (with ``decimals``) a
    ``widen`` past ``widen_problem``'s limit."""
    family = _family(family)
    if not (math.isfinite(widen) and widen >= 1):
        raise ValueError(f"widen must be a finite number >= 1, got {widen!r}")
    if decimals is not None and (problem := widen_problem(widen, decimals)) is not None:
        raise ValueError(f"widen {widen:g}: {problem}")
    derive = family.grids["train"].derive
    extra = family.name not in FAMILIES
    for _ in range(MAX_TRIES):
        # A Target checks its parameters (their domains and the family's own check); its law is built
        # where it is used, not here (freezing a scipy law costs about 1 ms, three quarters of a draw).
        try:
            combo = _draw_axes(family, rng, widen)
            target = family.target(round_params(family, derive(**combo) if derive else combo))
            if decimals is not None:
                check_space(target, decimals)  # builds a law it does not keep
        except (InvalidParametersError, ValueError, ArithmeticError):  # e.g. a hypergeometric sample larger
            continue  # than its population; an extra family's bound at a quantile of a bad law
        if extra and (near_heldout(target) or not has_space(target)):  # never a held-out law, always trainable
            continue
        if not (avoid and near_evaluation(target)):
            return target
    raise RuntimeError(f"{family.name}: no valid draw in {MAX_TRIES} tries at widen={widen}")  # pragma: no cover


def training_families() -> list[Family]:
    """The families with a training range, in table order."""
    return [f for f in FAMILIES.values() if is_training_family(f)]


def corners(family: Family, widen: float) -> list[Target]:
    """The corners of ``family``'s training box widened by ``widen`` (integer axes at their widened
    range's whole ends) that are valid parameters of the family (a corner with N > M, drawn again
    by ``draw``, is left out). A non-finite corner raises ``InvalidParametersError``."""
    bounds = []
    for axis in axes(family):
        lo, hi = axis.bounds(widen)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise InvalidParametersError(f"{family.name}: {axis.name} widened {widen:g}x reaches [{lo:g}, {hi:g}]")
        bounds.append((axis.name, (math.ceil(lo - 1e-9), math.floor(hi + 1e-9)) if axis.integer else (lo, hi)))
    derive = family.grids["train"].derive
    out = []
    for corner in itertools.product(*(values for _, values in bounds)):
        combo = {name: float(v) for (name, _), v in zip(bounds, corner, strict=True)}
        try:
            out.append(family.target(round_params(family, derive(**combo) if derive else combo)))
        except InvalidParametersError:
            continue
    return out


def _without_space(widen: float, decimals: int) -> str | None:
    """The first valid corner of a training family's box widened by ``widen`` that builds no
    canonical space at ``decimals``, and why (None: every one builds)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # scipy's overflows past the limit: the error says it
        warnings.simplefilter("ignore", RuntimeWarning)
        for family in training_families():
            try:
                for target in corners(family, widen):
                    check_space(target, decimals)
            except (InvalidParametersError, OverflowError) as err:
                return str(err)
    return None


@lru_cache(maxsize=256)
def widen_problem(widen: float, decimals: int) -> str | None:
    """Why training draws at ``widen`` may find no canonical space at ``decimals`` (None: none).

    A law's 99.9% range grows monotonically towards the corners of a widened box (its scales,
    shapes and locations at their extremes), so a box whose every valid corner builds its
    canonical space (``calbench.space.check_space``) builds one inside (``draw`` redraws the rare
    draw that does not). Past the limit a corner, and a growing share of the draws near it, has
    none: lognormal's 99.9% quantile passes 2^53 lattice steps at 5 decimals past a widening of
    3.1 (``max_widen``)."""
    why = _without_space(widen, decimals)
    if why is None:
        return None
    return (
        f"the ranges widened {widen:g}x hold laws with no canonical space at {decimals} decimals ({why}); "
        f"the largest widening that trains at {decimals} decimals is {max_widen(decimals):g}"
    )


WIDEN_STEPS = 100  # max_widen's resolution: hundredths
WIDEN_SEARCH = 1024  # max_widen's upper end, far past any law floating point can build


@cache
def max_widen(decimals: int) -> float:
    """The largest widening, in hundredths, at which every valid corner of every training family's
    widened box builds its canonical space at ``decimals`` (``widen_problem``): found by bisection,
    the corners' test being monotone in the widening; 1.0 if even the training ranges do not build
    (more decimals than a float carries)."""
    lo, hi = WIDEN_STEPS, WIDEN_SEARCH * WIDEN_STEPS  # builds at lo / WIDEN_STEPS, not at hi / WIDEN_STEPS
    if _without_space(1.0, decimals) is not None:
        return 1.0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _without_space(mid / WIDEN_STEPS, decimals) is None else (lo, mid)
    return lo / WIDEN_STEPS


@cache
def _evaluation_coordinates(family: Family) -> np.ndarray:
    return coordinates([t for t in evaluation_prompts() if t.family is family])


HELDOUT_MARGIN = 0.5  # W1 / IQR between an extra family's draw and every held-out prompt, at least
# Why 0.5: a law 0.5 IQR from a held-out law by a pure shift has pit_w1 0.18 against it (Gaussian),
# where exact sampling's 95% range at the score's 50-answer chunks ends at 0.082 and a collapse
# scores 0.25: a model that sampled the extra law exactly would earn at most 0.4 of a held-out
# prompt's credit for it (calbench.metrics.calibration). Training on it cannot be scored as transfer.


@cache
def _heldout_laws() -> tuple[tuple[Target, ...], np.ndarray, np.ndarray]:
    """The held-out split's prompts (its 92 grid prompts and 18 selected ones, each once), their
    quantiles at the ``HELDOUT_POINTS`` midpoints and their IQRs (1 at least for integer laws)."""
    from calbench.families import split_points

    prompts = {t.key: t for t in split_points("heldout") + split_points("heldout", "selected")}
    targets = tuple(prompts.values())
    quantiles = np.stack([ppf(t.law, _midpoints(HELDOUT_POINTS)) for t in targets])
    return targets, quantiles, np.array([_iqr(t) for t in targets])


def heldout_distance(target: Target) -> tuple[float, Target]:
    """The smallest W1 / IQR between ``target``'s law and a held-out prompt's law (W1 at the
    ``HELDOUT_POINTS`` quantile midpoints, over the held-out law's IQR), and that prompt."""
    targets, quantiles, iqrs = _heldout_laws()
    mine = ppf(target.law, _midpoints(HELDOUT_POINTS))
    distances = np.abs(quantiles - mine).mean(axis=1) / iqrs
    i = int(np.argmin(distances))
    return float(distances[i]), targets[i]


def has_space(target: Target) -> bool:
    """Whether ``target``'s canonical answer space builds (at the training's hard-target size): an
    extra family's draw without one (a tail too heavy for a finite quantile) is drawn again."""
    try:
        canonical_space(target, DEFAULT_DECIMALS, HARD_MAX_BINS)
    except (InvalidParametersError, ValueError, ArithmeticError, RuntimeError):
        return False
    return True


def near_heldout(target: Target, margin: float = HELDOUT_MARGIN) -> bool:
    """Whether ``target``'s law lies within ``margin`` (W1 / IQR) of a held-out prompt's law, or
    has no finite quantiles to tell (a law too extreme to draw for training)."""
    try:
        distance, _ = heldout_distance(target)
    except (InvalidParametersError, ValueError, ArithmeticError):
        return True
    return not (math.isfinite(distance) and distance >= margin)


def near_evaluation(target: Target, margin: float = MARGIN) -> bool:
    """Whether every parameter of ``target`` lies within ``margin`` units of the same parameter of
    one evaluation prompt of its family."""
    evaluation = _evaluation_coordinates(target.family)
    if evaluation.size == 0:
        return False
    return bool((np.abs(evaluation - coordinates([target])).max(axis=1) < margin).any())


def evaluation_prompts() -> list[Target]:
    """Every prompt a training draw keeps away from: the unseen split's whole grid and selected
    points, the held-out families' (never drawn anyway), and the INTERP and WIDE sets."""
    from calbench.families import split_points

    out = split_points("unseen") + split_points("unseen", "selected")
    out += split_points("heldout") + split_points("heldout", "selected")
    return out + interp_points() + wide_points()


def axis_values(target: Target) -> dict[str, float]:
    """``target``'s value on each axis of its family's training grid."""
    params = target.params
    return {a.name: params[a.name] if a.name in params else AXIS_SCALES[a.name][3](params) for a in axes(target.family)}


def in_range(target: Target, widen: float = 1.0) -> bool:
    """Whether ``target`` lies inside its family's training range widened by ``widen`` (every axis
    within ``Axis.bounds``, up to the prompts' rounding to 4 significant digits and, for
    Hypergeometric's K / M, to K's rounding to a whole count)."""
    if not is_training_family(target.family):
        return False
    values = axis_values(target)
    for axis in axes(target.family):
        lo, hi = axis.bounds(widen)
        x, slack = values[axis.name], 2e-3 * max(abs(lo), abs(hi), 1.0)
        if axis.name == "f":  # K = round(M f): K / M is f to within half a count
            slack += 0.5 / target.params["M"]
        if not lo - slack <= x <= hi + slack:
            return False
    return True


def _midpoints(points: int = W1_POINTS) -> np.ndarray:
    return (np.arange(points) + 0.5) / points


def _iqr(target: Target) -> float:
    q1, q3 = ppf(target.law, [0.25, 0.75])
    return max(float(q3 - q1), 1.0) if target.integer else float(q3 - q1)


@cache
def _grid_quantiles(family: Family) -> np.ndarray:
    return np.stack([ppf(t.law, _midpoints()) for t in family.points("train")])


def min_grid_w1_iqr(target: Target) -> float:
    """The smallest W1 between any training grid law of ``target``'s family and its law, over
    ``target``'s IQR: the mean |Q_grid(u) - Q(u)| at ``W1_POINTS`` quantile midpoints (heavy tails
    are truncated there), over Q(3/4) - Q(1/4) (1 at least for integer laws, as
    ``calbench.metrics.sampling.iqr``)."""
    grid = _grid_quantiles(_family(target.family))
    return float(np.abs(grid - ppf(target.law, _midpoints())).mean(axis=1).min() / _iqr(target))


@cache
def _training_values(family: Family) -> dict[str, frozenset[float]]:
    points = family.points("train")
    return {name: frozenset(t.params[name] for t in points) for name in family.param_names}


def off_grid(target: Target) -> bool:
    """Every parameter strictly inside its training values' range and equal to none of them."""
    for name, values in _training_values(target.family).items():
        x = target.params[name]
        if x in values or not min(values) < x < max(values):
            return False
    return True


def interp_candidates(family: Family | str, n: int = 200, keep: int = 3, seed: int = 0) -> list[Target]:
    """How ``INTERP`` was made: ``n`` fresh draws in the paper's ranges, kept if off-grid, ranked by
    ``min_grid_w1_iqr`` (largest first), taken greedily at least 0.25 units apart."""
    family = _family(family)
    rng = np.random.default_rng(seed_for("interp", family.name, seed))
    pool = {t.key: t for t in (draw(family, rng, 1.0, avoid=False) for _ in range(n)) if off_grid(t)}
    ranked = sorted(pool.values(), key=min_grid_w1_iqr, reverse=True)
    chosen: list[Target] = []
    for t in ranked:
        if all(np.linalg.norm(coordinates([t]) - coordinates([c])) >= 0.25 for c in chosen):
            chosen.append(t)
        if len(chosen) == keep:
            break
    return chosen


def wide_candidates(family: Family | str, keep: int = 3, seed: int = 0) -> list[Target]:
    """How ``WIDE`` was made: draws from the ranges widened by ``WIDE_FACTOR``, kept if at least one
    parameter lies outside the paper's training range and at least 0.25 units from those kept
    (halved after every 1,000 draws that find none: a one-parameter family's widened margins are
    short)."""
    family = _family(family)
    rng = np.random.default_rng(seed_for("wide", family.name, seed))
    chosen: list[Target] = []
    spacing, tries = 0.25, 0
    while len(chosen) < keep:
        t = draw(family, rng, WIDE_FACTOR, avoid=False)
        tries += 1
        if tries % 1000 == 0:
            spacing /= 2
        if in_range(t):
            continue
        if all(np.linalg.norm(coordinates([t]) - coordinates([c])) >= spacing for c in chosen):
            chosen.append(t)
    return chosen


def _targets(table: Mapping[str, tuple[Mapping[str, float], ...]]) -> list[Target]:
    return [FAMILIES[name].target(p) for name in FAMILIES if name in table for p in table[name]]


def prompt_set(split: str, selection: str = "full") -> list[Target]:
    """The prompts of a split (``families.split_points``), ``interp`` (INTERP), ``wide`` (WIDE),
    ``validation`` (the held-back extra families', ``validation_points``) or ``names``
    (``calbench.name_pairs``)."""
    from calbench.families import split_points

    if split == "validation":
        return validation_points()
    if split == "names":
        return name_points()
    if split == "interp":
        return interp_points()
    if split == "wide":
        return wide_points()
    return split_points(split, selection)  # type: ignore[arg-type]


def validation_points() -> list[Target]:
    """The validation prompts: ``extra_families.VALIDATION_POINTS``, family by family."""
    return [EXTRA_FAMILIES[name].target(p) for name in VALIDATION for p in VALIDATION_POINTS[name]]


def validation_candidates(family: Family | str, keep: int = 3, seed: int = 0) -> list[Target]:
    """How ``VALIDATION_POINTS`` were made: draws from the family's box (not widened), taken
    greedily at least 0.25 of the box's span apart in every-axis units (as ``interp_candidates``)."""
    family = _family(family)
    rng = np.random.default_rng(seed_for("validation", family.name, seed))
    chosen: list[Target] = []
    while len(chosen) < keep:
        t = draw(family, rng, 1.0, avoid=False)
        if all(np.linalg.norm(coordinates([t]) - coordinates([c])) >= 0.25 for c in chosen):
            chosen.append(t)
    return chosen


def interp_points() -> list[Target]:
    """The INTERP prompts, family by family in table order."""
    return _targets(INTERP)


def wide_points() -> list[Target]:
    """The WIDE prompts, family by family in table order."""
    return _targets(WIDE)


# Made by interp_candidates / wide_candidates (seed 0) and kept as data: written by
# ``python tasks/scripts/generate_prompt_sets.py`` (tests/test_param_ranges.py checks that the file is
# what the script writes, and that the definitions hold); the prompts are pinned by
# tests/test_prompts_golden.py.
PROMPT_SETS = Path(__file__).with_name("data") / "prompt_sets.json"
PromptTable = dict[str, tuple[Mapping[str, float], ...]]  # family -> its prompts' parameters


def _load_prompt_sets() -> tuple[PromptTable, PromptTable]:
    sets = json.loads(PROMPT_SETS.read_text())
    interp, wide = ({family: tuple(points) for family, points in sets[name].items()} for name in ("interp", "wide"))
    return interp, wide


INTERP, WIDE = _load_prompt_sets()
