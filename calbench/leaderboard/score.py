"""The leaderboard's numbers, read from run records: the calibration score and its parts (pure).

The **calibration score** (CS, 0-100, higher is better) ranks systems on the numeric
sampling tasks. Per family f (the 24 unseen-parameter families and the 6 held-out ones,
each counted once)::

    s_f = valid_rate_f * min(1, (floor_f + 1.96 se(w1_f)) / w1_f)   (0 without a valid sample)
    CS  = 100 * mean_f s_f

where ``floor_f`` is what exact draws score at the same sample size (``w1 - excess_w1``)
and ``se(w1_f)`` the standard error of the family's W1. A family whose W1 is within its
95% interval of the floor (indistinguishable from exact sampling) scores its valid rate,
so an exact sampler scores about 100 at any sample size; a model that answers every prompt
but collapses onto its favourite answer scores the fraction of the attainable W1 it
reaches; a model that never answers in format scores 0. The score's standard error
propagates the families' standard errors of ``valid_rate`` and ``w1`` (delta method,
families independent: ``stats.quadrature_mean``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from calbench.families import FAMILIES
from calbench.stats import UNDEFINED, Z95, Estimate, quadrature_mean

NUMERIC_SPLITS = ("unseen", "heldout")
SAMPLING_TASKS = {s: f"calbench_numeric_{s}" for s in NUMERIC_SPLITS}
LIKELIHOOD_TASKS = {s: f"calbench_numeric_{s}_likelihood" for s in NUMERIC_SPLITS}
TIERS = {1: "I", 2: "II", 3: "III"}


def estimate(pair: Sequence[float | None] | None) -> Estimate:
    """A record's stored ``[value, se]`` pair (``None`` for undefined) as an ``Estimate``."""
    if not pair:
        return UNDEFINED
    value, se = pair
    return Estimate(math.nan if value is None else value, math.nan if se is None else se)


def family_metric(record: Mapping[str, Any], family: str, metric: str) -> Estimate:
    """A sampling metric of one family, from whichever numeric split asks about it."""
    split = "heldout" if FAMILIES[family].heldout else "unseen"
    task = record["tasks"].get(SAMPLING_TASKS[split])
    if task is None:
        return UNDEFINED
    return estimate(task["families"].get(family, {}).get(metric))


def family_score(valid: Estimate, w1: Estimate, excess: Estimate) -> Estimate:
    """s_f and its standard error (module docstring)."""
    v = valid.value if math.isfinite(valid.value) else 0.0
    vse = valid.se if math.isfinite(valid.se) else 0.0
    if not (math.isfinite(w1.value) and math.isfinite(excess.value)) or v == 0:
        return Estimate(0.0, 0.0)
    wse = w1.se if math.isfinite(w1.se) else 0.0
    attainable = max(w1.value - excess.value, 0.0) + Z95 * wse
    if w1.value <= attainable:
        return Estimate(v, vse)  # indistinguishable from exact draws: the ratio is capped at 1
    ratio = attainable / w1.value
    se = math.hypot(ratio * vse, v * attainable / w1.value**2 * wse)
    return Estimate(v * ratio, se)


def calibration_score(record: Mapping[str, Any]) -> Estimate:
    """CS = 100 x mean over the 30 families of s_f; undefined without both numeric sampling tasks."""
    if not all(SAMPLING_TASKS[s] in record["tasks"] for s in NUMERIC_SPLITS):
        return UNDEFINED
    parts = [family_score(*(family_metric(record, f, m) for m in ("valid_rate", "w1", "excess_w1"))) for f in FAMILIES]
    mean = quadrature_mean(parts, nan="propagate")
    return Estimate(100 * mean.value, 100 * mean.se)


def tier_metric(record: Mapping[str, Any], tier: int, metric: str) -> Estimate:
    """Equal-weight mean of a sampling metric over one complexity tier's families."""
    values = [family_metric(record, f, metric) for f, fam in FAMILIES.items() if fam.tier == tier]
    return quadrature_mean(values, nan="propagate")


def task_metric(record: Mapping[str, Any], task: str, metric: str) -> Estimate:
    entry = record["tasks"].get(task)
    return estimate(entry["overall"].get(metric)) if entry else UNDEFINED


def drift_metric(record: Mapping[str, Any]) -> Estimate:
    """The adapter's drift; 0 for a base or instruct model (no adapter), undefined otherwise."""
    d = record.get("drift")
    if not d:
        return Estimate(0.0, 0.0) if record["type"] in ("base", "instruct") else UNDEFINED
    return Estimate(d["drift_kl"], d["drift_kl_se"])


def ranked(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Highest calibration score first; systems without one last, by name."""

    def key(r: Mapping[str, Any]) -> tuple[bool, float, str]:
        cs = calibration_score(r).value
        return (not math.isfinite(cs), -cs if math.isfinite(cs) else 0.0, r["name"])

    return sorted(records, key=key)
