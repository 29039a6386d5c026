"""The protocol table: every system under every sampling protocol, scored alike.

Reads lm-eval outputs laid out as ``<folder>/<system>/**/results_*.json`` with their samples
logs (``leaderboards/protocols-cpu/run.sh`` writes them), re-scores each (system, protocol)
from its samples as the leaderboard does (valid rate, the calibration score, ``pit_w1``,
KS@N) and adds from lm-eval's results the excess W1/IQR median, the well-formed rate and the
generated tokens per valid sample. ``calbench leaderboard protocols`` writes the table
(markdown and CSV), the protocol-gap plot, and splices the table into the README.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench import calibration_score as n_free
from calbench import results_tables
from calbench.leaderboard import plots, records, score
from calbench.leaderboard.render import csv_text, splice_readme
from calbench.policy import arrow
from calbench.protocols import PROTOCOLS
from calbench.results_tables import fmt
from calbench.stats import Z95, Estimate

ORDER = ("independent", *PROTOCOLS)
QUICK = "calbench_numeric_quick"
TABLE, CSV, PLOT = "protocols.md", "tables/protocols.csv", "plots/protocol_gap.png"
README_START, README_END = "<!-- protocols:start -->", "<!-- protocols:end -->"


def protocol_of_task(task: str) -> str | None:
    """The protocol of a quick numeric task (None for any other task)."""
    if task == QUICK:
        return "independent"
    name = task.removeprefix(QUICK + "_")
    return name if name in PROTOCOLS and task != name else None


@dataclass(frozen=True)
class Run:
    system: str
    protocol: str
    task_results: Mapping[str, Any]
    rows: Mapping[str, Sequence[score.Prompt]]

    @property
    def samples_per_prompt(self) -> int:
        return max(n for family in self.rows.values() for _, n, _ in family)


def load_runs(folder: Path, systems: Sequence[str] | None = None) -> list[Run]:
    """Every (system, protocol) under ``folder`` (systems in ``systems`` order, else by name)."""
    names = list(systems) if systems else sorted(p.name for p in folder.iterdir() if p.is_dir())
    runs = []
    for system in names:
        found: dict[str, Run] = {}
        for results_file in sorted((folder / system).rglob("results_*.json")):
            results = results_tables.load(results_file)
            for task, task_results in results["results"].items():
                protocol = protocol_of_task(task)
                if protocol is None:
                    continue
                if protocol in found:
                    raise records.RefusedRunError(f"{folder / system}: two runs of {task}; keep one")
                samples = records.file_prompt_values(records.samples_log(results_file, task), protocol)
                found[protocol] = Run(system, protocol, task_results, score.prompt_rows(samples))
        runs += [found[p] for p in ORDER if p in found]
    if not runs:
        raise records.RefusedRunError(f"{folder}: no runs of {QUICK} or its protocol variants")
    return runs


def cells(run: Run, ks_n: int) -> list[Estimate]:
    q = score.sample_quality(run.rows, ks_n)
    undefined = Estimate(math.nan, math.nan)  # the independent tasks report no protocol diagnostics

    def extra(metric: str) -> Estimate:
        return undefined if run.protocol == "independent" else results_tables.overall_metric(run.task_results, metric)

    return [
        q["valid_rate"],
        q["calibration_score"],
        q["pit_w1"],
        results_tables.overall_metric(run.task_results, "excess_w1_iqr_median"),
        q["ks_at_n"],
        extra("well_formed_rate"),
        extra("tokens_per_valid"),
    ]


def table(runs: Sequence[Run], ks_n: int = n_free.M_REF) -> tuple[list[str], list[list[str]]]:
    headers = [
        "system",
        "protocol",
        "samples/prompt",
        f"valid_rate {arrow('valid_rate')}",
        f"score {arrow('calibration_score')}",
        f"pit_w1 {arrow('pit_w1')}",
        f"excess_w1_iqr median {arrow('excess_w1_iqr')}",
        f"KS@{ks_n} {arrow('ks_at_n')}",
        f"well_formed_rate {arrow('well_formed_rate')}",
        f"tokens/valid {arrow('tokens_per_valid')}",
    ]
    rows = [[r.system, r.protocol, str(r.samples_per_prompt), *(fmt(c) for c in cells(r, ks_n))] for r in runs]
    return headers, rows


def markdown(runs: Sequence[Run], command: str) -> str:
    headers, rows = table(runs)
    note = (
        "Value ± 95% interval half-width. The 42 selected prompts of the 30 families (calbench_numeric_quick and its "
        "protocol variants), re-scored from each run's samples as the leaderboard is; tokens/valid counts the "
        "model's tokens (the references: bytes) generated per valid sample; well_formed_rate: batch, exactly 10 "
        "numbers; ssot, an Answer: line; verbalized, a parseable list. Reproduce with: `" + command + "`."
    )
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) + "\n\n" + note + "\n"


def draw_gap(runs: Sequence[Run], path: Path) -> None:
    """The calibration score by protocol, one line per system (bars: 95% intervals)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    systems = list(dict.fromkeys(r.system for r in runs))
    for system in systems:
        mine = [r for r in runs if r.system == system]
        xs = [ORDER.index(r.protocol) for r in mine]
        scores = [n_free.calibration_score(r.rows) for r in mine]
        ax.errorbar(
            xs, [s.value for s in scores], yerr=[Z95 * s.se for s in scores], marker="o", capsize=3, label=system
        )
    ax.set_xticks(range(len(ORDER)), ORDER)
    ax.set_ylim(-3, 103)
    ax.set_ylabel("calibration score (0-100)")
    ax.set_title("calbench: the same prompts under each sampling protocol", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    plots.save(fig, path)
    plt.close(fig)


def write(
    folder: Path, out: Path, readme: Path | None, command: str, systems: Sequence[str] | None = None
) -> list[Path]:
    runs = load_runs(folder, systems)
    text = markdown(runs, command)
    headers, rows = table(runs)
    written = []
    records.atomic_write(out / TABLE, "# calbench: sampling protocols\n\n" + text)
    records.atomic_write(out / CSV, csv_text(headers, rows))
    written += [out / TABLE, out / CSV]
    draw_gap(runs, out / PLOT)
    written.append(out / PLOT)
    if readme is not None:
        readme.write_text(splice_readme(readme.read_text(), text.rstrip("\n"), README_START, README_END))
        written.append(readme)
    return written
