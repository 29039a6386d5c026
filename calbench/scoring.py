"""From responses to numbers: one record per prompt, then per family, then per split.

``score_prompt`` turns the N responses to one prompt into a ``PromptScore`` (JSON-ready,
so lm-eval can log it). ``summarize`` aggregates records: the mean over prompts within
a family, then equal weight over families; also the median over families. Every value
comes with a standard error; ``ci95`` turns one into a 95% interval.

Metrics (per prompt; ↓ lower is better, ↑ higher is better):

* ``w1`` ↓ Wasserstein-1 of the valid samples to the law (``calbench.metrics.w1``);
* ``w1_iqr`` ↓ ``w1`` divided by the law's IQR;
* ``excess_w1`` ↓ ``w1`` minus the oracle floor (what exact draws score at that n);
  0 for a perfect sampler; ``excess_w1_iqr`` ↓ the same divided by the IQR;
* ``valid_rate`` ↑ share of responses that parse to a possible outcome of the law;
* ``support_violation_rate`` ↓ share that parse but are impossible under the law;
* ``gof_pass_rate`` ↑ share of prompts whose samples pass KS (continuous laws) or the
  pooled chi-square test (integer laws) at the 5% level.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calbench import metrics
from calbench.families import FAMILIES, Target, make_target
from calbench.parse import classify

Z95 = 1.959963984540054
GOF_ALPHA = 0.05
# Metrics reported per family and overall (equal weight over families), in display order.
FAMILY_METRICS = ("w1", "w1_iqr", "excess_w1", "excess_w1_iqr", "valid_rate")
OVERALL_ONLY = ("support_violation_rate", "gof_pass_rate")
MEDIAN_METRICS = ("w1_iqr", "excess_w1_iqr")  # also reported as the median over families
HIGHER_IS_BETTER = {"valid_rate": True, "gof_pass_rate": True}


@dataclass(frozen=True)
class PromptScore:
    """Everything calbench keeps about one prompt's samples (no raw values)."""

    family: str
    params: dict[str, float]
    n: int  # responses
    n_parsed: int
    n_valid: int
    w1: float
    w1_se: float
    floor: float
    floor_se: float
    iqr: float
    gof_test: str
    gof_stat: float
    gof_pvalue: float

    @property
    def target(self) -> Target:
        return make_target(self.family, self.params)

    @property
    def gof_tested(self) -> bool:
        return math.isfinite(self.gof_pvalue)

    @property
    def gof_passed(self) -> bool:
        return self.gof_tested and self.gof_pvalue >= GOF_ALPHA

    def value(self, metric: str) -> tuple[float, float]:
        """(value, standard error) of one per-prompt metric (``gof_pass_rate``: see ``summarize``)."""
        if self.n == 0:
            return math.nan, math.nan
        excess_se = math.hypot(self.w1_se, self.floor_se)
        violations = self.n_parsed - self.n_valid
        table = {
            "w1": (self.w1, self.w1_se),
            "w1_iqr": (self.w1 / self.iqr, self.w1_se / self.iqr),
            "excess_w1": (self.w1 - self.floor, excess_se),
            "excess_w1_iqr": ((self.w1 - self.floor) / self.iqr, excess_se / self.iqr),
            "valid_rate": (self.n_valid / self.n, metrics.rate_se(self.n_valid, self.n)),
            "support_violation_rate": (violations / self.n, metrics.rate_se(violations, self.n)),
        }
        return table[metric]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: undefined values (no valid samples) become ``None``, not NaN."""
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PromptScore:
        fields: dict[str, Any] = {k: math.nan if v is None else v for k, v in d.items()}
        return cls(**fields)


def score_prompt(target: Target, responses: Sequence[str], seed: int | None = None) -> PromptScore:
    """Parse and score the responses to one prompt (bootstrap seeded from the target by default)."""
    answers = [classify(r, target) for r in responses]
    values = np.array([a.value for a in answers if a.valid], dtype=float)
    n_valid = int(values.size)
    floor = metrics.oracle_floor(target, n_valid)
    seed = metrics.seed_for("bootstrap", target.key, len(responses)) if seed is None else seed
    test, stat, pvalue = metrics.goodness_of_fit(values, target) if n_valid else ("none", math.nan, math.nan)
    return PromptScore(
        family=target.family.name,
        params=target.params,
        n=len(responses),
        n_parsed=sum(a.parsed for a in answers),
        n_valid=n_valid,
        w1=metrics.w1(values, target.law),
        w1_se=metrics.w1_se(values, target, seed=seed),
        floor=floor.median,
        floor_se=floor.se,
        iqr=metrics.iqr(target),
        gof_test=test,
        gof_stat=stat,
        gof_pvalue=pvalue,
    )


@dataclass(frozen=True)
class Estimate:
    value: float
    se: float

    def ci95(self) -> tuple[float, float]:
        return self.value - Z95 * self.se, self.value + Z95 * self.se


def _mean(estimates: Sequence[Estimate], skip_undefined: bool = False) -> Estimate:
    """Mean of independent estimates, standard errors in quadrature.

    An undefined value (W1 of a prompt without one valid sample) makes the mean undefined:
    averaging only the families a model happens to answer would reward answering less.
    ``skip_undefined`` leaves such values out instead (goodness-of-fit pass rates, where
    too few samples to test is not a failure).
    """
    kept = [e for e in estimates if math.isfinite(e.value)] if skip_undefined else list(estimates)
    if not kept or any(not math.isfinite(e.value) for e in kept):
        return Estimate(math.nan, math.nan)
    se = math.sqrt(sum(e.se**2 for e in kept)) / len(kept)
    return Estimate(float(np.mean([e.value for e in kept])), se)


def _median(estimates: Sequence[Estimate], seed: int) -> Estimate:
    """Median of family values; its standard error from a parametric bootstrap.

    An undefined family value counts as worse than every defined one (+inf), so the
    median stays defined while fewer than half of the families are missing.
    """
    if not estimates:
        return Estimate(math.nan, math.nan)
    values = np.array([e.value if math.isfinite(e.value) else np.inf for e in estimates])
    ses = np.nan_to_num(np.array([e.se for e in estimates]))
    rng = np.random.default_rng(seed)
    draws = np.median(values + rng.standard_normal((2000, values.size)) * ses, axis=1)
    value = float(np.median(values))
    if not math.isfinite(value):
        return Estimate(math.nan, math.nan)
    se = float(draws.std(ddof=1)) if np.all(np.isfinite(draws)) else math.nan
    return Estimate(value, se)


def _pass_rate(records: Sequence[PromptScore]) -> Estimate:
    """Share of a family's tested prompts that pass the goodness-of-fit test (binomial SE)."""
    tested = [r for r in records if r.gof_tested]
    passed = sum(r.gof_passed for r in tested)
    if not tested:
        return Estimate(math.nan, math.nan)
    return Estimate(passed / len(tested), metrics.rate_se(passed, len(tested)))


@dataclass(frozen=True)
class Summary:
    """Per-family and overall estimates of every metric for one set of prompts."""

    families: dict[str, dict[str, Estimate]]  # family -> metric -> estimate
    overall: dict[str, Estimate]  # metric (and "<metric>_median") -> estimate
    n_prompts: int


def summarize(records: Iterable[PromptScore]) -> Summary:
    """Aggregate prompt records: within a family the mean over prompts, then equal weight over families."""
    by_family: dict[str, list[PromptScore]] = defaultdict(list)
    for r in records:
        by_family[r.family].append(r)
    ordered = [f for f in FAMILIES if f in by_family]
    per_prompt = (*FAMILY_METRICS, "support_violation_rate")
    families = {f: {m: _mean([Estimate(*r.value(m)) for r in by_family[f]]) for m in per_prompt} for f in ordered}
    for f in ordered:
        families[f]["gof_pass_rate"] = _pass_rate(by_family[f])
    overall = {m: _mean([families[f][m] for f in ordered]) for m in per_prompt}
    overall["gof_pass_rate"] = _mean([families[f]["gof_pass_rate"] for f in ordered], skip_undefined=True)
    for m in MEDIAN_METRICS:
        overall[f"{m}_median"] = _median([families[f][m] for f in ordered], seed=metrics.seed_for("median", m))
    return Summary(families, overall, sum(len(v) for v in by_family.values()))
