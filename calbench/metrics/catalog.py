"""Every metric calbench reports, once: its name, direction, range and one-line meaning.

lm-eval's ``higher_is_better`` (``calbench.harness``), the tables' arrows, the results
store's validation of every stored value (``calbench.leaderboard.records.checks``) and the metric
list in ``tasks/README.md`` (``markdown``, spliced in by ``calbench leaderboard render``) all
read ``METRICS``; a test checks that every metric a task reports is here.

A key names its metric with decorations: ``<metric>/<family>`` (per family),
``<metric>_median`` (the median over families), ``<metric>_stderr`` (lm-eval's standard
error column); each has its metric's direction and range (a standard error: at least 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Better = Literal["higher", "lower", "none"]
INF = math.inf
SLACK = 1e-9  # rounding: an exact KL of -1e-17, a mass of 1 + 1e-12


@dataclass(frozen=True)
class Metric:
    name: str
    better: Better  # "none": no direction (lm-eval needs a bool: it gets False)
    low: float
    high: float
    meaning: str
    slack: float = SLACK  # how far outside [low, high] rounding may put a stored value

    def allows(self, value: float) -> bool:
        return self.low - self.slack <= value <= self.high + self.slack

    @property
    def range(self) -> str:
        def end(x: float) -> str:
            return "∞" if x == INF else "-∞" if x == -INF else f"{x:g}"

        return f"[{end(self.low)}, {end(self.high)}]"


def _m(name: str, better: Better, low: float, high: float, meaning: str, slack: float = SLACK) -> Metric:
    return Metric(name, better, low, high, meaning, slack)


SHARE = (0.0, 1.0)
DISTANCE = (0.0, INF)
ANY = (-INF, INF)

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # numeric sampling (calbench.metrics.prompt_scores)
        _m("w1", "lower", *DISTANCE, "Wasserstein-1 distance of the valid answers to the law"),
        _m("w1_iqr", "lower", *DISTANCE, "w1 divided by the law's interquartile range"),
        _m("excess_w1", "lower", *ANY, "w1 minus what exact draws score at the same sample size (0: exact)"),
        _m("excess_w1_iqr", "lower", *ANY, "excess_w1 divided by the law's interquartile range"),
        _m("valid_rate", "higher", *SHARE, "share of answers that parse to a possible outcome of the law"),
        _m("support_violation_rate", "lower", *SHARE, "share of answers that parse but are impossible under the law"),
        _m("gof_pass_rate", "higher", *SHARE, "share of prompts whose answers pass KS or chi-square at 5%"),
        _m("pit_w1", "lower", 0.0, 0.5, "W1 of the answers' PIT values to Uniform(0, 1): one scale for every law"),
        _m("excess_pit_w1", "lower", *ANY, "pit_w1 minus what exact draws score at the same sample size"),
        _m("pit_ks", "lower", *SHARE, "Kolmogorov-Smirnov statistic of the answers' PIT values"),
        _m("ks_at_n", "higher", *SHARE, "KS@100: share of prompts whose first 100 valid answers pass KS at p > 1e-4"),
        _m(
            "mean_error",
            "lower",
            *DISTANCE,
            "absolute error of the sample mean, in law standard deviations (no moments: left out)",
        ),
        _m("variance_error", "lower", *DISTANCE, "relative error of the sample variance against the law's"),
        _m(
            "ad_stat",
            "lower",
            *DISTANCE,
            "Anderson-Darling statistic against the law's CDF (exact sampling: about 1; integer laws:"
            " answers past the lattice's 1e-12 tails count at its ends)",
        ),
        # the leaderboard (calbench.metrics.calibration, calbench.drift)
        _m("calibration_score", "higher", 0.0, 100.0, "calbench's sample-size-free calibration score"),
        _m("medians_rho", "higher", -1.0, 1.0, "Spearman's rho of the laws' and the answers' medians over prompts"),
        _m("drift_kl", "lower", *DISTANCE, "KL(base || tuned) per token on neutral text (nats)", slack=1e-6),
        # sample-free (calbench.metrics.enumeration)
        _m("valid_mass", "higher", *SHARE, "probability that a sampled answer is a possible outcome of the law"),
        _m("support_violation_mass", "lower", *SHARE, "probability of a number the law cannot produce"),
        _m("invalid_mass", "lower", *SHARE, "probability of an answer that is not one number"),
        _m("residual_mass", "lower", *SHARE, "probability the enumeration left unexplored (its error bound)"),
        _m("enum_w1", "lower", *DISTANCE, "exact W1 of the valid answer distribution to the law"),
        _m("enum_w1_iqr", "lower", *DISTANCE, "enum_w1 divided by the law's interquartile range"),
        _m("enum_w1_iqr_bound", "lower", *DISTANCE, "the most enum_w1_iqr can be off by the unexplored mass"),
        _m("enum_pit_w1", "lower", 0.0, 0.5, "exact pit_w1 of the valid answer distribution"),
        # sampling protocols (calbench.metrics.protocol_diagnostics)
        _m("well_formed_rate", "higher", *SHARE, "share of responses in the protocol's format"),
        _m("tokens_per_valid", "lower", *DISTANCE, "generated tokens per valid sample"),
        _m(
            "lag1_autocorr", "none", -1.0, 1.0, "lag-1 autocorrelation of PIT values within a batch (about -1/K i.i.d.)"
        ),
        _m("runs_z", "none", *ANY, "runs-test z within a batch (about 0 for i.i.d.)"),
        _m("duplicate_excess", "lower", -1.0, 1.0, "share of repeated items in a batch minus exact draws'"),
        _m("verbalized_w1_iqr", "lower", *DISTANCE, "W1 / IQR of a verbalized distribution to the law"),
        # likelihood (calbench.metrics.likelihood)
        _m("seq_kl", "lower", *DISTANCE, "KL(target || model) over the canonical answers, renormalised"),
        _m("canonical_mass", "higher", *SHARE, "the model's total probability of the canonical answers"),
        _m("exact_w1", "lower", *DISTANCE, "exact W1 of the model's canonical answer distribution to the target"),
        _m("exact_w1_iqr", "lower", *DISTANCE, "exact_w1 divided by the law's interquartile range"),
        _m("logit_kl", "lower", *DISTANCE, "token-level KL(target || model) over the canonical answers' trie"),
        # open-ended generation (calbench.metrics.openended)
        _m("unique_answers", "higher", *DISTANCE, "distinct normalised answers among a prompt's samples"),
        _m("answer_entropy", "higher", *DISTANCE, "entropy of a prompt's answers (nats)"),
        _m("top_answer_share", "lower", *SHARE, "share of a prompt's most frequent answer"),
        *(
            _m(f"support_{p}", "higher", *DISTANCE, f"first-token support: tokens holding {p}% of the mass")
            for p in (50, 90, 95, 99)  # openended.SUPPORT_LEVELS
        ),
        # MCQ answer balance (calbench.metrics.mcq)
        _m("tv_distance", "lower", *SHARE, "total variation of the chosen options to uniform"),
        _m("tv_distance_lenient", "lower", *SHARE, "tv_distance with lenient parsing of the answers"),
        _m("chi2", "lower", *DISTANCE, "chi-square statistic of the chosen options against uniform"),
        _m("parse_rate", "higher", *SHARE, "share of answers that name one option"),
        _m("parse_rate_lenient", "higher", *SHARE, "share of answers that name an option at all"),
        *(_m(f"freq_{x}", "none", *SHARE, f"share of answers choosing {x} (uniform: 1/4)") for x in "ABCD"),
        # NoveltyBench (calbench.metrics.noveltybench)
        _m("distinct_lite", "higher", *DISTANCE, "distinct generations of k per prompt (lite equivalence)"),
        _m("distinct", "higher", *DISTANCE, "distinct generations of k per prompt (NoveltyBench's classifier)"),
        _m("utility", "higher", *DISTANCE, "NoveltyBench's patience-discounted utility of the distinct generations"),
        # offline retention (calbench.metrics.retention)
        _m("exact_strict", "higher", *SHARE, "arithmetic: the whole answer is the right number"),
        _m("exact_flexible", "higher", *SHARE, "arithmetic: the answer's last number is the right one"),
        _m("strict_acc", "higher", *SHARE, "format following: the response follows the instruction"),
        _m("loose_acc", "higher", *SHARE, "format following, after stripping markup and first or last lines"),
        _m("acc", "higher", *SHARE, "mmlu_mini: share of questions answered correctly"),
    )
}


def base_name(key: str) -> str:
    """The metric a key names: ``w1_iqr/gaussian``, ``w1_iqr_median``, ``w1_iqr_stderr`` -> ``w1_iqr``."""
    metric = key.partition("/")[0].removesuffix("_stderr")
    return metric if metric in METRICS else metric.removesuffix("_median")


def find(key: str) -> Metric | None:
    """The metric of a key (None: not calbench's, e.g. an lm-eval task's own)."""
    return METRICS.get(base_name(key))


def higher_is_better(key: str) -> bool:
    """lm-eval's direction of a key (a metric without direction, or not calbench's: False)."""
    metric = find(key)
    return metric is not None and metric.better == "higher"


def arrow(key: str) -> str:
    """↑ or ↓ for a table header ("" for a metric without direction)."""
    metric = find(key)
    return "" if metric is None or metric.better == "none" else "↑" if metric.better == "higher" else "↓"


def markdown() -> str:
    """The table as the docs show it."""
    rows = ["| metric | better | range | meaning |", "|---|---|---|---|"]
    for m in METRICS.values():
        better = {"higher": "↑ higher", "lower": "↓ lower", "none": "no direction"}[m.better]
        rows.append(f"| `{m.name}` | {better} | {m.range} | {m.meaning} |")
    return "\n".join(rows)
