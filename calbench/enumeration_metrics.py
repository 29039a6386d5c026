"""Sample-free calibration metrics, from a model's enumerated answer distribution.

``calbench.answer_enumeration`` gives, for one prompt, the probability of every number the
model samples (and the mass that is not a number, or still unresolved). These metrics are
pure functions of that distribution and the law; nothing is sampled, so nothing carries
Monte-Carlo noise. Per prompt (↓ lower is better, ↑ higher is better):

* ``valid_mass`` ↑ the probability that a sample is a possible outcome of the law (the exact
  counterpart of ``valid_rate``); ``support_violation_mass`` ↓ that it parses but is
  impossible; ``invalid_mass`` that it is no number; ``residual_mass`` left unresolved;
* ``enum_w1`` ↓ W1 between the valid answers' distribution Q (renormalised) and the law P
  with both 0.1% tails folded onto their quantiles (the canonical space's range; P itself
  where the support ends first): ∫ |G(t) - F(t)| dt, exact for integer laws (both
  discrete), Gauss-Legendre on a fine partition for continuous ones. Folding keeps it
  finite for Cauchy, whose own W1 to any bounded Q is infinite. ``enum_w1_iqr`` ↓ the same
  divided by the law's IQR;
* ``enum_w1_bound`` (and ``enum_w1_iqr_bound``): how far the true ``enum_w1`` can lie from
  the reported one, under two stated assumptions. Resolution: a resolved prefix's answers lie
  within its interval (it ends as a plain number), so counting them at its midpoint moves W1
  by at most Σ m w / 2 / V (mass m, width w, valid mass V). Residual: if unresolved mass R
  ended valid at points y_i, Q would become (1 - λ) Q + λ S with λ = R / (V + R), within
  λ W1(S, Q) ≤ Σ r_i / (V + R) max_y E_Q|X - y| of Q (E_Q|X - y| is convex in y, so the
  maximum sits at an end of the range). y_i ranges over what its prefix can still reach,
  exponents included, but *assumed* to stay within the law's folded range or the model's own
  enumerated answers, whichever is wider: a bound without that assumption is infinite for
  every unbounded law as soon as any mass is unresolved;
* ``enum_pit_w1`` ↓ W1 between the PIT of Q and Uniform(0, 1) (``calbench.pit``, with
  masses for weights; integer laws with the non-randomized PIT).

Aggregation as for the likelihood metrics: the mean over a family's prompts, then equal
weight over families; ``<metric>_median`` the median over families; all exact (SE 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from calbench import pit
from calbench.answer_enumeration import Enumeration
from calbench.families import Target, ppf
from calbench.parse import in_support
from calbench.sampling_metrics import iqr
from calbench.space import TAIL, canonical_space
from calbench.stats import Estimate, Summary, bootstrap_median, quadrature_mean

METRICS = (
    "valid_mass",
    "support_violation_mass",
    "invalid_mass",
    "residual_mass",
    "enum_w1",
    "enum_w1_iqr",
    "enum_w1_iqr_bound",
    "enum_pit_w1",
)
MEDIAN_METRICS = ("enum_w1_iqr", "enum_pit_w1")
GAUSS_NODES = 16  # Gauss-Legendre nodes per piece of the partition
GRID = 512  # equal pieces the folded range is cut into (before atoms and crossings are added)


def folded_range(target: Target) -> tuple[float, float]:
    """[max(F^{-1}(0.001), support low), min(F^{-1}(0.999), support high)]: where the folded law lives."""
    q_lo, q_hi = (float(v) for v in ppf(target.law, [TAIL, 1 - TAIL]))
    s_lo, s_hi = target.support()
    return max(q_lo, s_lo), min(q_hi, s_hi)


def law_w1(values: np.ndarray, masses: np.ndarray, target: Target) -> float:
    """W1 between the discrete law (values, masses normalised) and the folded law (module docstring)."""
    x = np.asarray(values, dtype=float)
    w = np.asarray(masses, dtype=float)
    if x.size == 0 or w.sum() <= 0:
        return math.nan
    order = np.argsort(x)
    x, w = x[order], w[order] / w.sum()
    if target.integer:  # the folded integer law is the canonical space itself (never thinned)
        space = canonical_space(target)
        return discrete_w1(x, w, space.values, space.masses)
    lower, upper = folded_range(target)
    with np.errstate(over="ignore"):
        # Below the folded range F is 0, above it 1: G's own mass out there, exactly.
        outside = float(np.sum(w[x < lower] * (lower - x[x < lower])) + np.sum(w[x > upper] * (x[x > upper] - upper)))
    if upper <= lower:  # a range narrower than floating point: the law is a point
        return float(np.sum(w * np.abs(x - lower)))
    cum = np.cumsum(w)
    crossings = ppf(target.law, cum[(cum > 0) & (cum < 1)])  # where F meets a level of G
    knots = np.unique(np.concatenate([np.linspace(lower, upper, GRID + 1), x[(x > lower) & (x < upper)], crossings]))
    knots = knots[(knots >= lower) & (knots <= upper)]
    a, b = knots[:-1], knots[1:]
    g = np.concatenate([[0.0], cum])[np.searchsorted(x, (a + b) / 2, side="right")]  # G on each piece
    nodes, weights = np.polynomial.legendre.leggauss(GAUSS_NODES)
    t = (a + b)[:, None] / 2 + (b - a)[:, None] / 2 * nodes[None, :]
    f = np.clip(target.law.cdf(t), 0.0, 1.0)
    inside = float(np.sum((b - a) / 2 * (np.abs(g[:, None] - f) @ weights)))
    return outside + inside


def discrete_w1(x: np.ndarray, w: np.ndarray, y: np.ndarray, v: np.ndarray) -> float:
    """W1 between two discrete laws: Σ |G - F| over the gaps of the merged, sorted points."""
    points = np.concatenate([x, y])
    order = np.argsort(points, kind="stable")
    signed = np.concatenate([w / w.sum(), -v / v.sum()])[order]
    gap = np.cumsum(signed)[:-1]
    return float(np.sum(np.abs(gap) * np.diff(points[order])))


def mean_distance(x: np.ndarray, w: np.ndarray, y: float) -> float:
    """E_Q |X - y| for the discrete law (x, w) (w sums to 1)."""
    with np.errstate(over="ignore"):
        return float(np.sum(w * np.abs(x - y)))


def score_enumeration(target: Target, enum: Enumeration) -> dict[str, Any]:
    """One prompt's record (module docstring), JSON-ready."""
    valid_values, valid_masses, violation = [], [], 0.0
    for value, mass in zip(enum.values.tolist(), enum.masses.tolist(), strict=True):
        if in_support(value, target):
            valid_values.append(float(round(value)) if target.integer else value)
            valid_masses.append(mass)
        else:
            violation += mass
    shift = 0.0  # Σ m w / 2 over resolved valid prefixes
    for mid, width, mass in enum.resolved.tolist():
        if in_support(mid, target):
            valid_values.append(mid)
            valid_masses.append(mass)
            shift += mass * width / 2
        else:
            violation += mass
    x, w = _merge(np.array(valid_values, dtype=float), np.array(valid_masses, dtype=float))
    valid = float(w.sum())
    scale = iqr(target)
    record: dict[str, Any] = {
        "family": target.family.name,
        "params": target.params,
        "valid_mass": valid,
        "support_violation_mass": violation,
        "invalid_mass": float(enum.invalid_mass),
        "residual_mass": enum.residual_mass,
        "resolved_mass": enum.resolved_mass,
        "decode_mismatch_mass": float(enum.decode_mismatch_mass),
        "distinct_values": int(x.size),
        "nodes": int(enum.nodes),
        "tokens_fed": int(enum.tokens_fed),
        "top_answers": [[enum.texts.get(v, repr(v)), m] for v, m in _top(enum, 5)],
    }
    if valid <= 0:
        return record | dict.fromkeys(("enum_w1", "enum_w1_iqr", "enum_w1_bound", "enum_w1_iqr_bound", "enum_pit_w1"))
    w1 = law_w1(x, w, target)
    bound = shift / valid + _residual_bound(x, w / valid, valid, enum.frontier, target)
    a, b = pit.pit_intervals(x, target)
    return record | {
        "enum_w1": w1,
        "enum_w1_iqr": w1 / scale,
        "enum_w1_bound": bound,
        "enum_w1_iqr_bound": bound / scale,
        "enum_pit_w1": pit.pit_w1_weighted(a, b, w / valid),
    }


def _merge(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal values merged, sorted."""
    values, inverse = np.unique(x, return_inverse=True)
    return values, np.bincount(inverse, weights=w, minlength=values.size)


def _top(enum: Enumeration, k: int) -> list[tuple[float, float]]:
    order = np.argsort(-enum.masses)[:k]
    return [(float(enum.values[i]), float(enum.masses[i])) for i in order]


def _residual_bound(x: np.ndarray, q: np.ndarray, valid: float, frontier: np.ndarray, target: Target) -> float:
    """Σ r_i / (V + R) max_{y in I_i} E_Q|X - y|, each I_i (exponents included) clipped to the
    folded range or Q's answers, whichever is wider (the stated assumption)."""
    if frontier.size == 0:
        return 0.0
    lower, upper = folded_range(target)
    lo_clip, hi_clip = min(lower, float(x[0])), max(upper, float(x[-1]))
    total = valid + float(frontier[:, 2].sum())
    lo = np.clip(frontier[:, 0], lo_clip, hi_clip)
    hi = np.clip(frontier[:, 1], lo_clip, hi_clip)
    worst = [max(mean_distance(x, q, a), mean_distance(x, q, b)) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    return float(np.dot(frontier[:, 2], worst) / total)


def summarize(records: Sequence[dict[str, Any]]) -> Summary:
    """Mean over a family's prompts, then equal weight over families; medians over families."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_family.setdefault(r["family"], []).append(r)

    def exact(value: float | None) -> Estimate:
        return Estimate(math.nan if value is None else float(value), 0.0)

    families = {
        f: {m: quadrature_mean([exact(r.get(m)) for r in rs], nan="propagate") for m in METRICS}
        for f, rs in by_family.items()
    }
    overall = {m: quadrature_mean([families[f][m] for f in families], nan="propagate") for m in METRICS}
    for m in MEDIAN_METRICS:
        median = bootstrap_median([families[f][m].value for f in families], nan="worst", seed=0)
        overall[f"{m}_median"] = Estimate(median.value, 0.0)
    return Summary(families, overall, len(records))
