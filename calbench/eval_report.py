"""calbench's tables of one run's results: ``calbench eval`` prints them after lm-eval's.

``fmt`` writes an estimate as its value ± the half-width of its 95% interval (1.96
standard errors); ``numeric_table`` prints a numeric task's families as rows, one line per
system; ``overall_table`` the transfer tasks' overall metrics. The results are read with
``calbench.lm_eval_io``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench.families import FAMILIES
from calbench.lm_eval_io import (
    SAMPLING_METRICS,
    LmEvalOutputError,
    load_results,
    metrics_of,
    model_label,
    overall_metrics,
    prompt_values,
    read_samples,
    read_task,
    samples_log,
)
from calbench.metrics import calibration, prompt_scores, tails
from calbench.metrics.catalog import arrow
from calbench.protocols import task_protocol
from calbench.stats import Estimate, fmt


def overall_metric(task_results: Mapping[str, Any], metric: str) -> Estimate:
    """One overall metric of a calbench task's lm-eval results."""
    return read_task(task_results, [metric])[0][metric]


def numeric_table(systems: Sequence[tuple[str, Mapping[str, Any]]], metrics: Sequence[str] | None = None) -> str:
    """One table for several systems' results on the same task: overall first, then each family.

    Args:
        systems: ``(name, task_results)`` pairs, ``task_results`` being
            ``results["results"][task]`` of an lm-eval run.
        metrics: columns; by default the sampling or the likelihood metrics, whichever
            the results hold.
    """
    metrics = metrics or metrics_of(systems[0][1])
    read = [(name, *read_task(r, metrics)) for name, r in systems]
    headers = ["family", "system", *(f"{m} {arrow(m)}" for m in metrics)]
    rows: list[list[str]] = []
    for name, overall, _ in read:
        rows.append(["OVERALL" if not rows else "", name, *(fmt(overall[m]) for m in metrics)])
    families = [f for f in FAMILIES if any(f in fams for _, _, fams in read)]
    for f in families:
        for i, (name, _, fams) in enumerate(read):
            cells = [fmt(fams[f][m]) if f in fams else "n/a" for m in metrics]
            rows.append([f"{f} ({FAMILIES[f].tier * 'I'})" if i == 0 else "", name, *cells])
    if metrics == SAMPLING_METRICS:
        note = (
            "value ± 95% interval half-width; OVERALL = equal weight over families; "
            "excess_w1 = W1 minus what exact draws score at the same sample size (0 is perfect)"
        )
    else:
        note = "exact values (no sampling noise); OVERALL = equal weight over families; logit_kl needs calbench-hf"
    return tabulate(rows, headers=headers, tablefmt="github") + "\n" + note


def calbench_tasks(results: Mapping[str, Any]) -> list[str]:
    """The calbench numeric tasks (sampling or likelihood) present in an lm-eval results dict.

    The transfer tasks (open-ended, MCQ balance, NoveltyBench) are ``transfer_tasks``."""
    keys = ("w1_iqr,samples", "seq_kl,none")
    return [t for t, r in results.get("results", {}).items() if any(k in r for k in keys)]


def transfer_tasks(results: Mapping[str, Any]) -> list[str]:
    """The calbench transfer tasks present in an lm-eval results dict."""
    prefixes = ("calbench_open_ended", "calbench_mcq_balance", "calbench_noveltybench")
    return [t for t in results.get("results", {}) if t.startswith(prefixes)]


def overall_table(systems: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Systems as rows and every overall metric as a column (the transfer tasks' tables)."""
    read = [(name, overall_metrics(r)) for name, r in systems]
    metrics = list(dict.fromkeys(m for _, o in read for m in o))
    rows = [[name, *(fmt(o[m]) if m in o else "n/a" for m in metrics)] for name, o in read]
    return tabulate(rows, headers=["system", *metrics], tablefmt="github") + "\nvalue ± 95% interval half-width"


def quality_table(results_file: Path, tasks: Sequence[str]) -> str:
    """Per sampling task of one run, from its samples log: the calibration score, the valid rate,
    pit_w1, the PIT's outer and far shares (``calbench.metrics.tails``) and Spearman's rho between
    the laws' and the answers' medians over its prompts: the leaderboard's numbers for any task,
    ``calbench_numeric_train`` among them. Tasks without a samples log are left out ("" if all are)."""
    rows = []
    for task in tasks:
        try:
            log = samples_log(results_file, task)
        except LmEvalOutputError:
            continue
        protocol = task_protocol(task)
        prompts = prompt_scores.prompt_rows(prompt_values(read_samples(log), str(log), protocol))
        quality = prompt_scores.sample_quality(prompts)
        _, shares = tails.outer_summary(prompts)
        follows = tails.location_following([p for family in prompts.values() for p in family])
        cells = [quality["calibration_score"], quality["valid_rate"], quality["pit_w1"], shares["outer"], shares["far"]]
        shown = [*map(fmt, cells), fmt(follows)]
        fewest = min((p.n for family in prompts.values() for p in family), default=0)
        if fewest < calibration.M_REF:  # the score is defined from M_REF samples per prompt on
            shown[0] = f"n/a ({fewest} < {calibration.M_REF} samples per prompt)"
        rows.append([task, *shown])
    if not rows:
        return ""
    headers = ["task", "score ↑", "valid_rate ↑", "pit_w1 ↓", "outer ↓", "far ↓", "medians follow ↑"]
    note = (
        "from the samples log: the calibration score (0-100; 50 samples per prompt or more), the PIT's outer 10%"
        " and far (beyond the 0.1% quantiles) shares of valid answers (exact draws: 0.1 and 0.002), Spearman's rho"
        " of the laws' and the answers' medians over the prompts (leaderboards/tails.md)"
    )
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) + "\n" + note


def summaries(results_file: Path) -> str:
    """calbench's tables for every calbench task of one lm-eval results file (``calbench eval``)."""
    results = load_results(results_file)
    model = model_label(results)
    parts = []
    for task in calbench_tasks(results):
        parts.append(f"\ncalbench: {task} — {model}\n" + numeric_table([(model, results["results"][task])]))
    sampling = [t for t in calbench_tasks(results) if "w1_iqr,samples" in results["results"][t]]
    quality = quality_table(results_file, sampling)
    if quality:
        parts.append(f"\ncalbench: the answers against their laws — {model}\n" + quality)
    for task in transfer_tasks(results):
        parts.append(f"\ncalbench: {task} — {model}\n" + overall_table([(model, results["results"][task])]))
    parts.append(f"\nresults: {results_file}")
    return "\n".join(parts)
