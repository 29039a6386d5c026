"""``calbench retention-delta``: tuned - base on the same items, paired, with a bootstrap interval.

Two lm-eval runs (a base model and the model with an adapter) over the same tasks: for each
task both ran and each overall metric whose per-item value is a number in the samples logs
(accuracies, exact matches: calbench's offline retention suite and lm-eval's own retention
tasks alike), the items are paired by document id and content hash, and the mean per-item
difference gets a paired bootstrap interval (``stats.paired_bootstrap``): the noise of the
items both runs share cancels, which the difference of two independent standard errors
overstates. Metrics whose per-item values are not numbers (a perplexity's per-document
log-likelihood and length) are listed with their unpaired difference, marked so.

The mean of per-item scores is what lm-eval reports for ``mean``-aggregated metrics;
tinyBenchmarks' IRT estimates are not a mean, so their paired delta is that of the raw
per-item scores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench import results_tables
from calbench.leaderboard.records import samples_log
from calbench.results_tables import fmt
from calbench.stats import Estimate, PairedDelta, paired_bootstrap, seed_for


@dataclass(frozen=True)
class Row:
    task: str
    metric: str
    base: Estimate
    tuned: Estimate
    paired: PairedDelta | None  # None: per-item values are not numbers (unpaired difference only)


def _metrics(task_results: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(metric, filter) of a task's overall numeric metrics (per-group ``m/g`` and stderr keys left out)."""
    out = []
    for key, value in task_results.items():
        metric, _, flt = key.partition(",")
        if flt and "/" not in metric and not metric.endswith("_stderr") and isinstance(value, int | float):
            out.append((metric, flt))
    return out


def _item_value(sample: Mapping[str, Any], metric: str) -> float | None:
    value = sample.get(metric)
    if isinstance(value, Mapping):  # calbench's tasks log each document's record under every metric key
        value = value.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def item_scores(results_file: Path, task: str) -> dict[tuple[Any, str, str], Mapping[str, Any]]:
    """A task's logged samples by (document id, content hash, filter)."""
    log = samples_log(results_file, task)
    out: dict[tuple[Any, str, str], Mapping[str, Any]] = {}
    with log.open() as f:
        for n, line in enumerate(f, 1):
            try:
                sample = json.loads(line)
                key = (sample["doc_id"], str(sample.get("doc_hash")), str(sample.get("filter", "none")))
            except (ValueError, KeyError) as err:
                raise ValueError(f"{log}:{n}: not an lm-eval sample record ({err})") from err
            out[key] = sample
    return out


def paired_deltas(base_file: Path, tuned_file: Path) -> list[Row]:
    """tuned - base for every task both runs ran (``configs``: tasks, not groups) and every overall metric.

    Refuses (``ValueError``) two runs that scored a task over different items.
    """
    base, tuned = results_tables.load(base_file), results_tables.load(tuned_file)
    shared = sorted(set(base.get("configs", {})) & set(tuned.get("configs", {})) & set(tuned.get("results", {})))
    if not shared:
        raise ValueError(f"{base_file} and {tuned_file} share no task")
    rows = []
    for task in shared:
        b_items, t_items = item_scores(base_file, task), item_scores(tuned_file, task)
        if set(b_items) != set(t_items):
            raise ValueError(
                f"{task}: the two runs scored different items ({len(b_items)} and {len(t_items)}, "
                f"{len(set(b_items) ^ set(t_items))} not in both; --limit or a changed task?): rerun them alike"
            )
        b_overall = results_tables.overall_metrics(base["results"][task])
        t_overall = results_tables.overall_metrics(tuned["results"][task])
        for metric, flt in _metrics(tuned["results"][task]):
            if metric not in b_overall:
                continue
            keys = sorted((k for k in b_items if k[2] == flt), key=str)
            b_values = [_item_value(b_items[k], metric) for k in keys]
            t_values = [_item_value(t_items[k], metric) for k in keys]
            b_scores = [v for v in b_values if v is not None]
            t_scores = [v for v in t_values if v is not None]
            numbers = bool(keys) and len(b_scores) == len(t_scores) == len(keys)
            paired = paired_bootstrap(b_scores, t_scores, seed_for(task, metric)) if numbers else None
            rows.append(Row(task, metric, b_overall[metric], t_overall[metric], paired))
    return rows


def table(rows: list[Row]) -> str:
    body = []
    for r in rows:
        if r.paired is not None:
            delta = f"{fmt(r.paired.delta)} [{r.paired.low:.3g}, {r.paired.high:.3g}]"
            items = str(r.paired.n)
        else:
            se = math.hypot(r.base.se, r.tuned.se)
            delta = f"{fmt(Estimate(r.tuned.value - r.base.value, se))} (unpaired)"
            items = "n/a"
        body.append([r.task, r.metric, items, fmt(r.base), fmt(r.tuned), delta])
    headers = ["task", "metric", "items", "base", "tuned", "tuned - base, paired (95% interval)"]
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
