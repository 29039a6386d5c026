"""Sample-free calibration metrics, from a model's enumerated answer distribution.

``calbench.backends.enumeration`` gives, for one prompt, the probability of every number the
model samples (and the mass that is not a number, or still unresolved). These metrics are
pure functions of that distribution and the law; nothing is sampled, so nothing carries
Monte-Carlo noise. Per prompt (↓ lower is better, ↑ higher is better):

* ``valid_mass`` ↑ the probability that a sample is a possible outcome of the law (the
  sample-free counterpart of ``valid_rate``), resolved prefixes counted as valid: the exact
  value lies in [valid_mass - ``resolved_mass``, valid_mass + ``residual_mass``] (resolved
  prefixes may still run on into text, unresolved ones may end either way);
  ``support_violation_mass`` ↓ that it parses but is impossible (``impossible_mass`` of it
  cut early: every continuation without an exponent is impossible); ``invalid_mass`` that
  it is no number; ``residual_mass`` left unresolved;
* ``enum_w1`` ↓ W1 between the valid answers' distribution Q (renormalised) and the law P,
  both clipped to the law's window: its central 99.8% (the 0.1% quantiles, or the support
  where it ends first; for integer laws the canonical space's range). Clipping the law folds
  its tails onto the window's edges; clipping Q does the same to answers beyond them, so
  ``enum_w1`` = ∫_window |G(t) - F(t)| dt, exact for integer laws (both discrete) and by
  Gauss-Legendre on a fine partition for continuous ones. It keeps W1 finite for Cauchy and,
  above all, measurable: a model's raw W1 is dominated by rare answers such as a 30-digit
  string, which neither an enumeration nor any affordable number of samples pins down.
  (Mass outside the law's support is ``support_violation_mass``, not part of Q.)
  ``enum_w1_iqr`` ↓ the same divided by the law's IQR;
* ``enum_w1_bound`` (and ``enum_w1_iqr_bound``): how far the true ``enum_w1`` can lie from
  the reported one. Resolution: a resolved prefix is assumed to end as a plain number of the
  law's kind (its mass, ``resolved_mass``, is counted as valid), and then counting its
  answers at the midpoint of their clipped interval moves W1 by at most Σ m w / 2 / V (mass
  m, width w, valid mass V). Residual, with no assumption: if unresolved mass R ended valid at
  points y_i, Q would become (1 - λ) Q + λ S with λ ≤ R / (V + R), within
  λ W1(S, Q) ≤ Σ r_i / (V + R) max_{y in I_i} E_Q|X - y| of Q, where I_i is what prefix i can
  still reach, exponents included, clipped to the window (E_Q|X - y| is convex in y, so the
  maximum sits at an end of I_i);
* ``enum_pit_w1`` ↓ W1 between the PIT of Q and Uniform(0, 1) (``calbench.metrics.pit``, with
  masses for weights; integer laws with the non-randomized PIT).

Aggregation as for the likelihood metrics: the mean over a family's prompts, then equal
weight over families; ``<metric>_median`` the median over families; all exact (SE 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calbench.families import Target, ppf
from calbench.metrics import pit
from calbench.metrics.sampling import iqr
from calbench.parse import in_support
from calbench.space import TAIL, canonical_space
from calbench.stats import Estimate, Summary, bootstrap_median, by_family, exact, family_means

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


@dataclass
class Enumeration:
    """One prompt's answer distribution (masses are probabilities of whole samples).

    ``values``/``masses``: every complete answer that parses, merged by value (inside the
    law's support or not: the metrics decide); ``resolved``: (midpoint, width, mass) of the
    prefixes the resolution rule counted as valid answers (clipped to the window);
    ``impossible_mass``: the prefixes it found outside the support; ``frontier``: (low, high,
    mass) of the prefixes still unexpanded, with the interval their continuations reach,
    exponents included.
    """

    values: np.ndarray
    masses: np.ndarray
    resolved: np.ndarray  # (k, 3): midpoint, width, mass
    frontier: np.ndarray  # (m, 3): low, high, mass
    invalid_mass: float
    impossible_mass: float = 0.0
    decode_mismatch_mass: float = 0.0
    nodes: int = 0  # prefixes expanded (the prompt's own last position included)
    tokens_fed: int = 0  # tokens through the model, the prompt included
    texts: dict[float, str] = field(default_factory=dict)  # the most probable text of each value

    @property
    def residual_mass(self) -> float:
        return float(self.frontier[:, 2].sum())

    @property
    def resolved_mass(self) -> float:
        return float(self.resolved[:, 2].sum())

    def __str__(self) -> str:  # lm-eval logs a response with str(): keep samples logs small
        return (
            f"Enumeration({self.values.size} answers, mass {self.masses.sum():.4f} complete, "
            f"{self.resolved_mass:.4f} resolved, {self.impossible_mass:.4f} impossible, {self.invalid_mass:.4f} invalid, {self.residual_mass:.4f} residual)"
        )


def folded_range(target: Target) -> tuple[float, float]:
    """[max(F^{-1}(0.001), support low), min(F^{-1}(0.999), support high)]: where the folded law lives."""
    q_lo, q_hi = (float(v) for v in ppf(target.law, [TAIL, 1 - TAIL]))
    s_lo, s_hi = target.support()
    return max(q_lo, s_lo), min(q_hi, s_hi)


def window(target: Target) -> tuple[float, float]:
    """Where both laws are clipped for ``enum_w1``: the canonical space's range for integer laws
    (the folded integer law is that space itself, never thinned), else :func:`folded_range`."""
    if target.integer:
        values = canonical_space(target).values
        return float(values[0]), float(values[-1])
    return folded_range(target)


def law_w1(values: np.ndarray, masses: np.ndarray, target: Target) -> float:
    """W1 between the discrete law (values, masses normalised) and the law, both clipped to the
    law's :func:`window` (module docstring)."""
    lower, upper = window(target)
    x = np.clip(np.asarray(values, dtype=float), lower, upper)
    w = np.asarray(masses, dtype=float)
    if x.size == 0 or w.sum() <= 0:
        return math.nan
    order = np.argsort(x)
    x, w = x[order], w[order] / w.sum()
    if target.integer:
        space = canonical_space(target)
        return discrete_w1(x, w, space.values, space.masses)
    if upper <= lower:  # a range narrower than floating point: the law is a point
        return 0.0
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
    return inside


def discrete_w1(x: np.ndarray, w: np.ndarray, y: np.ndarray, v: np.ndarray) -> float:
    """W1 between two discrete laws: Σ |G - F| over the gaps of the merged, sorted points."""
    points = np.concatenate([x, y])
    order = np.argsort(points, kind="stable")
    signed = np.concatenate([w / w.sum(), -v / v.sum()])[order]
    gap = np.cumsum(signed)[:-1]
    return float(np.sum(np.abs(gap) * np.diff(points[order])))


def mean_distances(x: np.ndarray, w: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """E_Q |X - y| for each y of ``ys``, for the discrete law (x, w) (w sums to 1), by one sort:
    y W(y) - S(y) + (S_total - S(y)) - y (1 - W(y)) with W, S the weight and weighted sum below y."""
    order = np.argsort(x)
    xs, ws = x[order], w[order]
    weight = np.concatenate([[0.0], np.cumsum(ws)])
    moment = np.concatenate([[0.0], np.cumsum(ws * xs)])
    below = np.searchsorted(xs, ys, side="right")
    w_below, s_below = weight[below], moment[below]
    return ys * w_below - s_below + (moment[-1] - s_below) - ys * (weight[-1] - w_below)


def score_enumeration(target: Target, enum: Enumeration) -> dict[str, Any]:
    """One prompt's record (module docstring), JSON-ready."""
    valid_values, valid_masses, violation = [], [], float(enum.impossible_mass)
    for value, mass in zip(enum.values.tolist(), enum.masses.tolist(), strict=True):
        if in_support(value, target):
            valid_values.append(float(round(value)) if target.integer else value)
            valid_masses.append(mass)
        else:
            violation += mass
    shift = 0.0  # Σ m w / 2 over the resolved prefixes (all valid: the enumerator checked)
    for mid, width, mass in enum.resolved.tolist():
        valid_values.append(mid)
        valid_masses.append(mass)
        shift += mass * width / 2
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
        "impossible_mass": float(enum.impossible_mass),
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
    """Σ r_i / (V + R) max_{y in I_i} E_Q|X - y|, X and each I_i clipped to the window."""
    if frontier.size == 0:
        return 0.0
    lower, upper = window(target)
    x = np.clip(x, lower, upper)
    total = valid + float(frontier[:, 2].sum())
    lo = np.clip(frontier[:, 0], lower, upper)
    hi = np.clip(frontier[:, 1], lower, upper)
    worst = np.maximum(mean_distances(x, q, lo), mean_distances(x, q, hi))
    return float(np.dot(frontier[:, 2], worst) / total)


def summarize(records: Sequence[dict[str, Any]]) -> Summary:
    """Mean over a family's prompts, then equal weight over families; medians over families."""
    groups = by_family(records, lambda r: r["family"])
    families, overall = family_means(groups, METRICS, lambda r, m: exact(r.get(m)))
    for m in MEDIAN_METRICS:
        median = bootstrap_median([families[f][m].value for f in families], nan="worst", seed=0)
        overall[f"{m}_median"] = Estimate(median.value, 0.0)
    return Summary(families, overall, len(records))
