"""Calibration gained against retention lost: one point per adapter of one base model.

For each adapter, against its base model's record:

* **calibration gained**: the calibration score (``score.calibration_score``, 0-100) of the
  adapter minus the base model's. The two runs sample independently, so its standard error
  is the two scores' in quadrature.
* **retention lost**: base minus adapter on the offline retention suite, item by item
  (``retention_delta.paired_deltas`` on the per-item scores the two records store), for each of
  ``RETENTION`` (one headline metric per task) and for their mean, the *retention
  composite*. Each task's paired delta has a bootstrap standard error; the composite's is
  theirs in quadrature over three (the tasks' items are disjoint and resampled apart).

The table also lists the score, ``pit_w1``, MCQ format following (``parse_rate_lenient``:
the share of MCQ answers that name an option at all) and drift of each system. ``write`` renders ``tradeoff.md`` and the plot
``plots/tradeoff.png`` (95% intervals: 1.96 standard errors).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages.numbers import Scored, drift_metric, scored, task_metric
from calbench.leaderboard.records.record_types import RunRecord
from calbench.provenance import atomic_write
from calbench.retention_delta import Run, paired_deltas, run_of_record
from calbench.retention_delta import table as deltas_table
from calbench.stats import Z95, Estimate, PairedDelta, fmt

RETENTION = (
    ("calbench_arithmetic", "exact_flexible"),
    ("calbench_mmlu_mini", "acc"),
    ("calbench_format_following", "loose_acc"),
)
MCQ = ("calbench_mcq_balance", "parse_rate_lenient")  # format following: any parsable answer
DELTA_TASKS = tuple(task for task, _ in RETENTION)  # and NoveltyBench's splits: the paired deltas listed
NB = "calbench_noveltybench"
TABLE, PLOT = "tradeoff.md", "plots/tradeoff.png"


@dataclass(frozen=True)
class Point:
    """One adapter against its base model (module docstring)."""

    name: str
    score: Estimate
    calibration_gained: Estimate
    lost: dict[tuple[str, str], PairedDelta]  # base - adapter, per RETENTION metric
    retention_lost: Estimate  # the composite: the mean of ``lost``

    @property
    def interval(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """95% intervals of (retention lost, calibration gained)."""
        x, y = self.retention_lost, self.calibration_gained
        return (x.value - Z95 * x.se, x.value + Z95 * x.se), (y.value - Z95 * y.se, y.value + Z95 * y.se)


def _score(record: Scored) -> Estimate:
    score = record.calibration_score
    if not isinstance(score, Estimate) or not math.isfinite(score.value):
        raise RefusedRunError(f"{record.name}: no calibration score ({score}): it cannot be a trade-off point")
    return score


def point(base: RunRecord | Scored, adapter: RunRecord | Scored) -> Point:
    """``adapter`` against ``base``, from their records: the scores, and the offline retention
    suite's per-item scores for the paired retention deltas."""
    base_scored, adapter_scored = scored([base, adapter])
    b, a = _score(base_scored), _score(adapter_scored)
    base_name, adapter_name = base_scored.name, adapter_scored.name
    try:
        deltas = paired_deltas(
            run_of_record(base_scored.record), run_of_record(adapter_scored.record), (base_name, adapter_name)
        )
    except ValueError as err:  # unpaired items, no shared task
        raise RefusedRunError(f"{adapter_name}: {err}") from err
    rows = {(r.task, r.metric): r for r in deltas}
    lost = {}
    for key in RETENTION:
        row = rows.get(key)
        if row is None or row.paired is None:
            raise RefusedRunError(f"{adapter_name}: {key[0]} {key[1]} not paired with {base_name}'s items")
        d = row.paired
        lost[key] = PairedDelta(Estimate(0.0 - d.delta.value, d.delta.se), 0.0 - d.high, 0.0 - d.low, d.n)  # no -0
    composite = Estimate(
        sum(d.delta.value for d in lost.values()) / len(lost),
        math.sqrt(sum(d.delta.se**2 for d in lost.values())) / len(lost),
    )
    return Point(adapter_name, a, Estimate(a.value - b.value, math.hypot(a.se, b.se)), lost, composite)


def table(base: Scored, points: Sequence[Point], records: Mapping[str, Scored]) -> str:
    """Markdown: the base model's row, then one row per adapter."""
    headers = [
        "system",
        "score ↑",
        "calibration gained ↑",
        "pit_w1 ↓",
        *(f"{t.removeprefix('calbench_')} {m} lost ↓" for t, m in RETENTION),
        "retention composite lost ↓",
        "MCQ parse_rate_lenient ↑",
        "drift ↓",
    ]

    def common(record: Scored) -> tuple[str, str]:
        return fmt(record.mean_pit_w1), fmt(task_metric(record.record, *MCQ))

    pit_w1, mcq = common(base)
    body = [[base.name, fmt(_score(base)), "0 (base)", pit_w1, *(["0 (base)"] * (len(RETENTION) + 1)), mcq, "0"]]
    for p in points:
        r = records[p.name]
        pit_w1, mcq = common(r)
        lost = [f"{fmt(d.delta)} [{d.low:.3g}, {d.high:.3g}]" for d in p.lost.values()]
        gained, composite, drift = fmt(p.calibration_gained), fmt(p.retention_lost), fmt(drift_metric(r.record))
        body.append([p.name, fmt(p.score), gained, pit_w1, *lost, composite, mcq, drift])
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def draw(points: Sequence[Point], title: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    from calbench.leaderboard.pages.plots import save

    words = [p.name.split("-") for p in points]
    k = 0  # the names' shared leading words, left off the labels
    while len(words) > 1 and all(len(w) > k + 1 and w[k] == words[0][k] for w in words):
        k += 1
    shared = "-".join(words[0][:k])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for p in points:
        x, y = p.retention_lost, p.calibration_gained
        ax.errorbar(x.value, y.value, xerr=Z95 * x.se, yerr=Z95 * y.se, fmt="o", capsize=3)
        label = p.name.removeprefix(f"{shared}-") if shared else p.name
        ax.annotate(label, (x.value, y.value), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("retention composite lost (base - adapter; offline suite, paired)")
    ax.set_ylabel("calibration score gained (adapter - base)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def deltas_section(base: RunRecord, adapters: Sequence[RunRecord]) -> str:
    """Every task both records stored per-item scores for, paired, one table per adapter."""

    def transfer(record: RunRecord) -> Run:
        return {t: items for t, items in run_of_record(record).items() if t in DELTA_TASKS or t.startswith(NB)}

    parts = []
    for record in adapters:
        rows = paired_deltas(transfer(base), transfer(record), (base["name"], record["name"]))
        parts.append(f"### {record['name']} against {base['name']}\n\n{deltas_table(rows)}\n")
    return "\n".join(parts)


def write(
    base: RunRecord | Scored,
    adapters: Sequence[RunRecord | Scored],
    output: Path,
    command: str,
    draw_plot: bool = True,
) -> list[Path]:
    """``<output>/tradeoff.md`` (with the command that wrote it, and every paired delta) and
    ``<output>/plots/tradeoff.png``, from the records alone (each scored once)."""
    base_scored, *adapters_scored = scored([base, *adapters])
    points = [point(base_scored, record) for record in adapters_scored]
    records = {r.name: r for r in adapters_scored}
    text = (
        f"# Calibration gained against retention lost: adapters of {base_scored.name}\n\n"
        f"`{command}`\n\n"
        "Each adapter against the base model (`calbench.leaderboard.pages.tradeoff`). Calibration gained: the\n"
        "difference of the calibration scores (independent runs: standard errors in quadrature). Retention\n"
        "lost: base - adapter on the offline retention suite, item by item (paired bootstrap: brackets, its 95%\n"
        "percentile interval); the composite is the mean of the three tasks' deltas. ±: half a 95% interval.\n"
        "MCQ parse_rate_lenient: the share of MCQ answers that name an option at all (format following).\n\n"
        f"{table(base_scored, points, records)}\n\n![trade-off]({PLOT})\n\n"
        "## Every paired delta\n\n"
        "tuned - base on the same items, for the retention suite and NoveltyBench-lite (distinct generations of\n"
        "10 per prompt), from the per-item scores both records store: `calbench retention-delta BASE TUNED`\n"
        "prints each table (with every other task both stored items for).\n\n"
        f"{deltas_section(base_scored.record, [r.record for r in adapters_scored])}"
    )
    written = [output / TABLE]
    atomic_write(output / TABLE, text)
    if draw_plot:
        draw(points, f"{base_scored.name}: calibration gained vs retention lost", output / PLOT)
        written.append(output / PLOT)
    return written
