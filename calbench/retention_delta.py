"""``calbench retention-delta``: tuned - base on the same items, paired, with a bootstrap interval.

Two runs of the same tasks (a base model and the model with an adapter): for each task both
ran and each overall metric whose per-item value is a number (accuracies, exact matches:
calbench's offline retention suite and lm-eval's own retention tasks alike; NoveltyBench's
distinct count per prompt), the items are paired by document id, content hash and filter,
and the mean per-item difference gets a paired bootstrap interval (``stats.paired_bootstrap``):
the noise of the items both runs share cancels, which the difference of two independent
standard errors overstates. Metrics whose per-item values are not numbers (a perplexity's
per-document log-likelihood and length) are listed with their unpaired difference, marked so.

A run is either a run record (its stored per-item scores: ``calbench.leaderboard.records.store``)
or an lm-eval results file with its samples logs; both become the same ``Run``.

The mean of per-item scores is what lm-eval reports for ``mean``-aggregated metrics;
tinyBenchmarks' IRT estimates are not a mean, so their paired delta is that of the raw
per-item scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench import lm_eval_io
from calbench.lm_eval_io import HASH_CHARS
from calbench.stats import Estimate, PairedDelta, fmt, paired_bootstrap, seed_for


@dataclass(frozen=True)
class TaskItems:
    """One task of one run: its overall metrics and its items' numeric scores."""

    overall: Mapping[str, Estimate]
    items: Sequence[Mapping[str, Any]]  # {"doc_id", "doc_hash", "filter", "scores": {metric: value}}


Run = Mapping[str, TaskItems]  # task -> its items


@dataclass(frozen=True)
class Row:
    task: str
    metric: str
    base: Estimate
    tuned: Estimate
    paired: PairedDelta | None  # None: per-item values are not numbers (unpaired difference only)


def run_of_results(results_file: Path) -> Run:
    """The tasks (not groups) of an lm-eval run with their items, read from its samples logs."""
    results = lm_eval_io.load_results(results_file)
    out = {}
    for task in set(results.get("configs", {})) & set(results.get("results", {})):
        overall = lm_eval_io.overall_metrics(results["results"][task])
        samples = lm_eval_io.task_samples(results_file, task, results)
        out[task] = TaskItems(overall, lm_eval_io.item_scores(samples, list(overall)))
    return out


def run_of_record(record: Mapping[str, Any]) -> Run:
    """The tasks of a run record that stored per-item scores."""
    out = {}
    for task, entry in record["tasks"].items():
        if "items" in entry:
            overall = {
                m: Estimate(*(math.nan if x is None else x for x in pair)) for m, pair in entry["overall"].items()
            }
            out[task] = TaskItems(overall, entry["items"])
    return out


def _key(item: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(item.get("doc_id")), str(item.get("doc_hash"))[:HASH_CHARS], str(item.get("filter", "none")))


def paired_deltas(base: Run, tuned: Run, names: tuple[str, str] = ("base", "tuned")) -> list[Row]:
    """tuned - base for every task both runs have and every overall metric of the tuned run's.

    Refuses (``ValueError``) two runs that scored a task over different items.
    """
    shared = sorted(set(base) & set(tuned))
    if not shared:
        raise ValueError(f"{names[0]} and {names[1]} share no task with per-item scores")
    rows = []
    for task in shared:
        b_items = {_key(i): i for i in base[task].items}
        t_items = {_key(i): i for i in tuned[task].items}
        if set(b_items) != set(t_items):
            raise ValueError(
                f"{task}: the two runs scored different items ({len(b_items)} and {len(t_items)}, "
                f"{len(set(b_items) ^ set(t_items))} not in both; --limit or a changed task?): rerun them alike"
            )
        b_overall, t_overall = base[task].overall, tuned[task].overall
        for metric in t_overall:
            if metric not in b_overall:
                continue
            for flt in sorted({k[2] for k in t_items}):
                keys = sorted((k for k in b_items if k[2] == flt), key=str)
                b_scores = [b_items[k]["scores"].get(metric) for k in keys]
                t_scores = [t_items[k]["scores"].get(metric) for k in keys]
                b_values = [v for v in b_scores if v is not None]
                t_values = [v for v in t_scores if v is not None]
                numbers = bool(keys) and len(b_values) == len(t_values) == len(keys)
                paired = paired_bootstrap(b_values, t_values, seed_for(task, metric)) if numbers else None
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
