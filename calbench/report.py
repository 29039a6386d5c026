"""Tables of numeric-sampling results, read back from lm-eval's results.

lm-eval stores every calbench metric as ``"<metric>[/<family>],<filter>"`` with its
standard error under ``"<metric>[/<family>]_stderr,<filter>"``. ``read_task`` turns that
back into a ``scoring.Summary``-like structure and ``numeric_table`` prints families
as rows, one line per system, with 95% intervals (value ± 1.96 standard errors).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench.families import FAMILIES
from calbench.scoring import HIGHER_IS_BETTER, Z95, Estimate

FILTER = "samples"
TABLE_METRICS = ("w1", "w1_iqr", "excess_w1", "valid_rate")


def arrow(metric: str) -> str:
    return "↑" if HIGHER_IS_BETTER.get(metric, False) else "↓"


def fmt(e: Estimate) -> str:
    """``value ± half-width of the 95% interval``, 3 significant digits."""
    if not math.isfinite(e.value):
        return "n/a"
    if not math.isfinite(e.se):
        return f"{e.value:.3g}"
    return f"{e.value:.3g} ± {Z95 * e.se:.2g}"


def _get(results: Mapping[str, Any], key: str) -> Estimate:
    def num(v: Any) -> float:
        return float(v) if isinstance(v, int | float) else math.nan

    return Estimate(num(results.get(f"{key},{FILTER}")), num(results.get(f"{key}_stderr,{FILTER}")))


def read_task(task_results: Mapping[str, Any]) -> tuple[dict[str, Estimate], dict[str, dict[str, Estimate]]]:
    """(overall, per-family) estimates of one calbench numeric task's lm-eval results."""
    overall = {m: _get(task_results, m) for m in TABLE_METRICS}
    families = {
        f: {m: _get(task_results, f"{m}/{f}") for m in TABLE_METRICS}
        for f in FAMILIES
        if f"{TABLE_METRICS[0]}/{f},{FILTER}" in task_results
    }
    return overall, families


def numeric_table(systems: Sequence[tuple[str, Mapping[str, Any]]], metrics: Sequence[str] = TABLE_METRICS) -> str:
    """One table for several systems' results on the same task: overall first, then each family.

    Args:
        systems: ``(name, task_results)`` pairs, ``task_results`` being
            ``results["results"][task]`` of an lm-eval run.
    """
    read = [(name, *read_task(r)) for name, r in systems]
    headers = ["family", "system", *(f"{m} {arrow(m)}" for m in metrics)]
    rows: list[list[str]] = []
    for name, overall, _ in read:
        rows.append(["OVERALL" if not rows else "", name, *(fmt(overall[m]) for m in metrics)])
    families = [f for f in FAMILIES if any(f in fams for _, _, fams in read)]
    for f in families:
        for i, (name, _, fams) in enumerate(read):
            cells = [fmt(fams[f][m]) if f in fams else "n/a" for m in metrics]
            rows.append([f"{f} ({FAMILIES[f].tier * 'I'})" if i == 0 else "", name, *cells])
    note = (
        "value ± 95% interval half-width; OVERALL = equal weight over families; "
        "excess_w1 = W1 minus what exact draws score at the same sample size (0 is perfect)"
    )
    return tabulate(rows, headers=headers, tablefmt="github") + "\n" + note


def latest_results(output_path: Path, since: float = 0.0) -> Path | None:
    """The newest lm-eval ``results_*.json`` under ``output_path`` written after ``since``."""
    candidates = [p for p in Path(output_path).rglob("results_*.json") if p.stat().st_mtime >= since]
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


def calbench_tasks(results: Mapping[str, Any]) -> list[str]:
    """The calbench numeric sampling tasks present in an lm-eval results dict."""
    return [t for t, r in results.get("results", {}).items() if f"w1_iqr,{FILTER}" in r]


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text()))
