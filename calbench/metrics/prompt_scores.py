"""From responses to numbers: one record per prompt, then per family, then per split.

``score_prompt`` turns the N responses to one prompt into a ``PromptScore`` (JSON-ready,
so lm-eval can log it). ``summarize`` aggregates records: the mean over prompts within
a family, then equal weight over families; also the median over families. Every value
comes with a standard error (``calbench.stats``).

Metrics (per prompt; ↓ lower is better, ↑ higher is better):

* ``w1`` ↓ Wasserstein-1 of the valid samples to the law (``calbench.metrics.sampling.w1``);
* ``w1_iqr`` ↓ ``w1`` divided by the law's IQR;
* ``excess_w1`` ↓ ``w1`` minus the oracle floor (what exact draws score at that n);
  0 for a perfect sampler; ``excess_w1_iqr`` ↓ the same divided by the IQR;
* ``valid_rate`` ↑ share of responses that parse to a possible outcome of the law;
* ``support_violation_rate`` ↓ share that parse but are impossible under the law;
* ``gof_pass_rate`` ↑ share of prompts whose samples pass KS (continuous laws) or the
  pooled chi-square test (integer laws) at the 5% level;
* ``pit_w1`` ↓ W1 between the samples' (non-randomized) PIT values and Uniform(0, 1), the same
  scale for every family, in [0, 1/2] (``calbench.metrics.pit``); ``excess_pit_w1`` ↓ the same minus
  what exact draws score at that n; ``pit_ks`` ↓ the KS statistic of the PIT values;
* ``ks_at_n`` ↑ share of prompts whose first 100 valid samples pass the KS test at p > 1e-4
  (integer laws: calibrated by simulation); fewer than 100 valid samples is a fail;
* ``mean_error`` ↓, ``variance_error`` ↓, ``ad_stat`` ↓ the paper's remaining sampling metrics:
  the mean's error in law standard deviations, the variance's relative error, the
  Anderson-Darling statistic (``calbench.metrics.moments``); a family without them (Cauchy) is
  left out of their overall means.

The valid answers themselves are kept too, per prompt and in order (``stored_answers``: what
a run record stores, 6 significant digits), and re-scored from there: ``prompt_rows`` turns
them into family -> ``Prompt`` rows, from which ``sample_quality`` computes the valid rate,
the calibration score (``calbench.metrics.calibration``), ``pit_w1`` and KS@N of a run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from calbench.families import ALL_FAMILIES, Target, make_target, target_from_key
from calbench.metrics import calibration, moments, pit, sampling
from calbench.metrics.calibration import Prompt
from calbench.parse import classify
from calbench.protocols import PROTOCOLS
from calbench.stats import (
    UNDEFINED,
    Estimate,
    Summary,
    bootstrap_median,
    by_family,
    family_means,
    quadrature_mean,
    rate,
    seed_for,
)

GOF_ALPHA = 0.05
# Metrics reported per family and overall (equal weight over families), in display order.
FAMILY_METRICS = ("w1", "w1_iqr", "excess_w1", "excess_w1_iqr", "valid_rate", "pit_w1", "excess_pit_w1", "pit_ks")
OVERALL_ONLY = ("support_violation_rate", "gof_pass_rate", "ks_at_n")
MOMENT_METRICS = ("mean_error", "variance_error", "ad_stat")  # undefined for laws without the moments: omitted
MEDIAN_METRICS = ("w1_iqr", "excess_w1_iqr", "pit_w1", "excess_pit_w1")  # also the median over families


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
    # PIT metrics (calbench.metrics.pit); defaults for records logged before they existed.
    pit_w1: float = math.nan
    pit_w1_se: float = math.nan
    pit_floor: float = math.nan
    pit_floor_se: float = math.nan
    pit_ks: float = math.nan
    ks_at_n: bool = False  # the first KS_N valid samples pass the KS test at p > KS_THRESHOLD
    # the paper's moment errors and Anderson-Darling (calbench.metrics.moments), with their SEs
    mean_error: float = math.nan
    mean_error_se: float = math.nan
    variance_error: float = math.nan
    variance_error_se: float = math.nan
    ad_stat: float = math.nan
    ad_stat_se: float = math.nan

    @property
    def target(self) -> Target:
        return make_target(self.family, self.params)

    @property
    def gof_tested(self) -> bool:
        return math.isfinite(self.gof_pvalue)

    @property
    def gof_passed(self) -> bool:
        return self.gof_tested and self.gof_pvalue >= GOF_ALPHA

    def value(self, metric: str) -> Estimate:
        """One per-prompt metric with its standard error (``gof_pass_rate``: see ``summarize``)."""
        if self.n == 0:
            return UNDEFINED
        excess_se = math.hypot(self.w1_se, self.floor_se)
        table = {
            "w1": Estimate(self.w1, self.w1_se),
            "w1_iqr": Estimate(self.w1 / self.iqr, self.w1_se / self.iqr),
            "excess_w1": Estimate(self.w1 - self.floor, excess_se),
            "excess_w1_iqr": Estimate((self.w1 - self.floor) / self.iqr, excess_se / self.iqr),
            "valid_rate": rate(self.n_valid, self.n),
            "support_violation_rate": rate(self.n_parsed - self.n_valid, self.n),
            "pit_w1": Estimate(self.pit_w1, self.pit_w1_se),
            "excess_pit_w1": Estimate(self.pit_w1 - self.pit_floor, math.hypot(self.pit_w1_se, self.pit_floor_se)),
            # The KS statistic's sampling noise is not estimated; KS@N carries the test's verdict.
            "pit_ks": Estimate(self.pit_ks, 0.0),
            **{m: Estimate(getattr(self, m), getattr(self, f"{m}_se")) for m in MOMENT_METRICS},
        }
        return table[metric]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: undefined values (no valid samples) become ``None``, not NaN."""
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PromptScore:
        fields: dict[str, Any] = {k: math.nan if v is None else v for k, v in d.items()}
        return cls(**fields)


UNDEFINED_FLOOR = SimpleNamespace(median=math.nan, se=math.nan)


def _guarded(metric: str, target: Target, fallback: Any, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """``fn(*args)``, or ``fallback`` (NaN) with a warning naming the metric, the prompt and why:
    one metric that cannot be computed on some answers never costs the evaluation the others."""
    try:
        return fn(*args, **kw)
    except (ArithmeticError, ValueError, FloatingPointError) as err:
        warnings.warn(f"calbench: {metric} of {target.key} is undefined on these answers ({err!r}): NaN", stacklevel=2)
        return fallback


def score_prompt(target: Target, responses: Sequence[str], seed: int | None = None) -> PromptScore:
    """Parse and score the responses to one prompt (bootstrap seeded from the target by default).
    A metric that fails on some answers is NaN (``_guarded``), the others are kept."""
    answers = [classify(r, target) for r in responses]
    values = np.array([a.value for a in answers if a.valid], dtype=float)
    return score_values(target, values, len(responses), sum(a.parsed for a in answers), seed)


def score_values(
    target: Target, values: np.ndarray, n: int, n_parsed: int | None = None, seed: int | None = None
) -> PromptScore:
    """Score one prompt's valid answers (``values``, in order) out of ``n`` responses, of which
    ``n_parsed`` parsed (default: the valid ones; a run record stores only these, so its
    ``support_violation_rate`` cannot be scored again): ``score_prompt`` after parsing."""
    values = np.asarray(values, dtype=float)
    n_valid = int(values.size)
    nan, nan2 = math.nan, (math.nan, math.nan)
    seed = seed_for("bootstrap", target.key, n) if seed is None else seed
    floor = _guarded("the exact-sampling W1 floor", target, UNDEFINED_FLOOR, sampling.oracle_floor, target, n_valid)
    test, stat, pvalue = (
        _guarded("goodness_of_fit", target, ("none", nan, nan), sampling.goodness_of_fit, values, target)
        if n_valid
        else ("none", nan, nan)
    )
    intervals = _guarded("the PIT", target, None, pit.pit_intervals, values, target)
    pit_w1_value, pit_ks_value = (
        nan2 if intervals is None else _guarded("pit_w1", target, nan2, pit.pit_w1_ks, *intervals)
    )
    pit_floor = _guarded("the exact-sampling pit_w1 floor", target, UNDEFINED_FLOOR, pit.pit_floor, target, n_valid)
    undefined = Estimate(nan, nan)
    mean_err = _guarded("mean_error", target, undefined, moments.mean_error, values, target)
    var_err = _guarded("variance_error", target, undefined, moments.variance_error, values, target)
    ad = _guarded("ad_stat", target, undefined, moments.anderson_darling, values, target)
    return PromptScore(
        family=target.family.name,
        params=target.params,
        n=n,
        n_parsed=n_valid if n_parsed is None else n_parsed,
        n_valid=n_valid,
        w1=_guarded("w1", target, nan, sampling.w1, values, target.law),
        w1_se=_guarded("w1", target, nan, sampling.w1_se, values, target, seed=seed),
        floor=floor.median,
        floor_se=floor.se,
        iqr=sampling.iqr(target),
        gof_test=test,
        gof_stat=stat,
        gof_pvalue=pvalue,
        pit_w1=pit_w1_value,
        pit_w1_se=_guarded("pit_w1", target, nan, pit.pit_w1_se, values, target, seed=seed),
        pit_floor=pit_floor.median,
        pit_floor_se=pit_floor.se,
        pit_ks=pit_ks_value,
        ks_at_n=_guarded("ks_at_n", target, nan, pit.ks_at_n, values, target),
        mean_error=mean_err.value,
        mean_error_se=mean_err.se,
        variance_error=var_err.value,
        variance_error_se=var_err.se,
        ad_stat=ad.value,
        ad_stat_se=ad.se,
    )


def _pass_rate(records: Sequence[PromptScore]) -> Estimate:
    """Share of a family's tested prompts that pass the goodness-of-fit test (binomial SE)."""
    tested = [r for r in records if r.gof_tested]
    return rate(sum(r.gof_passed for r in tested), len(tested))


def summarize(records: Iterable[PromptScore]) -> Summary:
    """Aggregate prompt records: within a family the mean over prompts, then equal weight over families."""
    grouped = by_family(records, lambda r: r.family)
    ordered = [f for f in ALL_FAMILIES if f in grouped]
    grouped = {f: grouped[f] for f in ordered}
    per_prompt = (*FAMILY_METRICS, "support_violation_rate")
    # A prompt without a valid answer has no W1, and its family none either ("propagate").
    families, overall = family_means(grouped, per_prompt, PromptScore.value)
    # A law without a mean or variance (Cauchy) has no moment error: left out, not a failure.
    moment_families, moment_overall = family_means(grouped, MOMENT_METRICS, PromptScore.value, nan="omit")
    for f in ordered:
        families[f].update(moment_families[f])
    overall.update(moment_overall)
    for f in ordered:
        families[f]["gof_pass_rate"] = _pass_rate(grouped[f])
        # KS@N: every prompt counts; one with fewer than N valid samples fails.
        families[f]["ks_at_n"] = rate(sum(r.ks_at_n for r in grouped[f]), len(grouped[f]))
    # A family too small to test is no failure: it is left out of the pass rate.
    overall["gof_pass_rate"] = quadrature_mean([families[f]["gof_pass_rate"] for f in ordered], nan="omit")
    overall["ks_at_n"] = quadrature_mean([families[f]["ks_at_n"] for f in ordered], nan="propagate")
    for m in MEDIAN_METRICS:  # a family without a W1 counts as the worst
        fam = [families[f][m] for f in ordered]
        overall[f"{m}_median"] = bootstrap_median(
            [e.value for e in fam], nan="worst", seed=seed_for("median", m), ses=[e.se for e in fam]
        )
    return Summary(families, overall, sum(len(v) for v in grouped.values()))


# ---------------------------------------------------------------- stored valid answers


def stored_answers(responses: Sequence[str], target: Target, protocol: str = "independent") -> tuple[int, list[float]]:
    """What a run record keeps of one prompt: its number of samples and their valid parsed
    values in order, to 6 significant digits: the samples its responses yield under ``protocol``
    (``Protocol.yields``, without the protocol's diagnostics; independent requests: the responses
    themselves)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    items = PROTOCOLS[protocol].yields(list(responses), target).items
    answers = [classify(text, target) for text in items]
    return len(answers), [float(f"{a.value:.6g}") for a in answers if a.valid and a.value is not None]


def prompt_rows(stored: Iterable[Mapping[str, Any]]) -> dict[str, list[Prompt]]:
    """family -> prompts of stored per-prompt samples (``{"family", "target", "n", "values"}`` dicts:
    ``calbench.lm_eval_io.prompt_values``)."""
    out: dict[str, list[Prompt]] = {}
    for p in stored:
        out.setdefault(p["family"], []).append(
            Prompt(np.asarray(p["values"], dtype=float), int(p["n"]), target_from_key(p["target"]))
        )
    return out


def share_below_reference(rows: Mapping[str, Sequence[Prompt]]) -> Estimate:
    counts = [p.values.size for family in rows.values() for p in family]
    return Estimate(sum(c < calibration.M_REF for c in counts) / len(counts), 0.0)


def pooled_valid_rate(rows: Mapping[str, Sequence[Prompt]]) -> Estimate:
    """Mean over families of each family's valid answers over its responses (Agresti-Coull SEs)."""
    families = [rate(sum(p.values.size for p in f), sum(p.n for p in f)) for f in rows.values()]
    return quadrature_mean(families, nan="propagate")


def family_mean_pit_w1(rows: Mapping[str, Sequence[Prompt]]) -> Estimate:
    """Mean over families of the mean per-prompt ``pit_w1`` (undefined if a family has no
    valid answer: the PIT of nothing is not a distance)."""
    families = []
    for family in rows.values():
        per_prompt = [
            Estimate(pit.pit_w1(*pit.pit_intervals(p.values, p.target)), pit.pit_w1_se(p.values, p.target))
            if p.values.size
            else UNDEFINED
            for p in family
        ]
        families.append(quadrature_mean(per_prompt, nan="propagate"))
    return quadrature_mean(families, nan="propagate")


def sample_quality(rows: Mapping[str, Sequence[Prompt]], ks_n: int = pit.KS_N) -> dict[str, Estimate]:
    """The numbers a table shows for one run's prompts: valid rate, score, pit_w1 and KS@N."""
    return {
        "valid_rate": pooled_valid_rate(rows),
        "calibration_score": calibration.calibration_score(rows),
        "pit_w1": family_mean_pit_w1(rows),
        "ks_at_n": ks_pass_share(rows, ks_n),
    }


def ks_pass_share(rows: Mapping[str, Sequence[Prompt]], n: int = pit.KS_N) -> Estimate:
    """The share of prompts whose first ``n`` valid answers pass the KS test (fewer fail)."""
    passed = [pit.ks_at_n(p.values, p.target, n) for family in rows.values() for p in family]
    return rate(sum(passed), len(passed))
