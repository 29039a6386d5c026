"""Tables of numeric results (sampling and likelihood), read back from lm-eval's results.

lm-eval stores every calbench metric as ``"<metric>[/<family>],<filter>"`` with its
standard error under ``"<metric>[/<family>]_stderr,<filter>"``. ``read_task`` turns that
back into estimates and ``numeric_table`` prints families as rows, one line per system,
with 95% intervals (value ± 1.96 standard errors) where there is sampling noise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench.families import FAMILIES
from calbench.policy import arrow
from calbench.stats import Z95, Estimate

SAMPLING_METRICS = ("w1", "w1_iqr", "excess_w1", "excess_w1_iqr", "valid_rate")
LIKELIHOOD_METRICS = ("seq_kl", "canonical_mass", "exact_w1_iqr", "logit_kl")
ENUMERATION_METRICS = ("valid_mass", "enum_w1_iqr", "enum_w1_iqr_bound", "enum_pit_w1", "residual_mass")


def fmt(e: Estimate) -> str:
    """``value ± half-width of the 95% interval``, 3 significant digits (exact values: no ±)."""
    if not math.isfinite(e.value):
        return "n/a"
    if not math.isfinite(e.se) or e.se == 0:
        return f"{e.value:.3g}"
    return f"{e.value:.3g} ± {Z95 * e.se:.2g}"


def _filter(task_results: Mapping[str, Any]) -> str:
    """lm-eval's filter name in the result keys ("samples" for sampling tasks, "none" otherwise)."""
    return "samples" if any(k.endswith(",samples") for k in task_results) else "none"


def _get(results: Mapping[str, Any], key: str, flt: str) -> Estimate:
    def num(v: Any) -> float:
        return float(v) if isinstance(v, int | float) else math.nan

    return Estimate(num(results.get(f"{key},{flt}")), num(results.get(f"{key}_stderr,{flt}")))


def metrics_of(task_results: Mapping[str, Any]) -> tuple[str, ...]:
    """The table columns for a calbench task's results (sampling, sample-free or likelihood)."""
    if "w1_iqr,samples" in task_results:
        return SAMPLING_METRICS
    return ENUMERATION_METRICS if any(k.startswith("enum_w1_iqr,") for k in task_results) else LIKELIHOOD_METRICS


def read_task(
    task_results: Mapping[str, Any], metrics: Sequence[str]
) -> tuple[dict[str, Estimate], dict[str, dict[str, Estimate]]]:
    """(overall, per-family) estimates of one calbench task's lm-eval results."""
    flt = _filter(task_results)
    overall = {m: _get(task_results, m, flt) for m in metrics}
    families = {
        f: {m: _get(task_results, f"{m}/{f}", flt) for m in metrics}
        for f in FAMILIES
        if f"{metrics[0]}/{f},{flt}" in task_results
    }
    return overall, families


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


def latest_results(output_path: Path, since: float = 0.0) -> Path | None:
    """The newest lm-eval ``results_*.json`` under ``output_path`` written after ``since``."""
    candidates = [p for p in Path(output_path).rglob("results_*.json") if p.stat().st_mtime >= since]
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


def calbench_tasks(results: Mapping[str, Any]) -> list[str]:
    """The calbench numeric tasks (sampling or likelihood) present in an lm-eval results dict.

    The transfer tasks (open-ended, MCQ balance, NoveltyBench) are ``transfer_tasks``."""
    keys = ("w1_iqr,samples", "seq_kl,none")
    return [t for t, r in results.get("results", {}).items() if any(k in r for k in keys)]


def transfer_tasks(results: Mapping[str, Any]) -> list[str]:
    """The calbench transfer tasks present in an lm-eval results dict."""
    prefixes = ("calbench_open_ended", "calbench_mcq_balance", "calbench_noveltybench")
    return [t for t in results.get("results", {}) if t.startswith(prefixes)]


def args_dict(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """lm-eval's ``k=v,k2=v2`` arguments (or an already parsed mapping) as a dict."""
    if not value:
        return {}
    if isinstance(value, str):
        from lm_eval.utils import simple_parse_args_string

        return dict(simple_parse_args_string(value))
    return dict(value)


def model_args(results: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--model_args`` of an lm-eval results dict, as a dict."""
    return args_dict(results.get("config", {}).get("model_args"))


def model_label(results: Mapping[str, Any]) -> str:
    """A readable name for the evaluated system: the adapter, the model folder, or the backend."""
    config = results.get("config", {})
    args = model_args(results)
    for key in ("peft", "lora_local_path", "pretrained"):
        if args.get(key):
            return Path(str(args[key]).rstrip("/")).name + (" + adapter" if key != "pretrained" else "")
    return str(config.get("model", "model"))


def overall_metrics(task_results: Mapping[str, Any]) -> dict[str, Estimate]:
    """Every overall (non per-family) metric of a task's lm-eval results, with its standard error."""
    out: dict[str, Estimate] = {}
    for key in task_results:
        metric, _, flt = key.partition(",")
        numeric = isinstance(task_results[key], int | float)
        if numeric and flt and "/" not in metric and not metric.endswith("_stderr"):
            out[metric] = _get(task_results, metric, flt)
    return out


def overall_table(systems: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Systems as rows and every overall metric as a column (the transfer tasks' tables)."""
    read = [(name, overall_metrics(r)) for name, r in systems]
    metrics = list(dict.fromkeys(m for _, o in read for m in o))
    rows = [[name, *(fmt(o[m]) if m in o else "n/a" for m in metrics)] for name, o in read]
    return tabulate(rows, headers=["system", *metrics], tablefmt="github") + "\nvalue ± 95% interval half-width"


def summaries(results_file: Path) -> str:
    """calbench's tables for every calbench task of one lm-eval results file (``calbench eval``)."""
    results = load(results_file)
    model = model_label(results)
    parts = []
    for task in calbench_tasks(results):
        parts.append(f"\ncalbench: {task} — {model}\n" + numeric_table([(model, results["results"][task])]))
    for task in transfer_tasks(results):
        parts.append(f"\ncalbench: {task} — {model}\n" + overall_table([(model, results["results"][task])]))
    parts.append(f"\nresults: {results_file}")
    return "\n".join(parts)


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text()))
