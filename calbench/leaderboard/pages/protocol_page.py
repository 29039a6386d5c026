"""The protocol table: every system under every sampling protocol, scored alike.

Reads the run records of protocol runs (``leaderboards/results/protocols/``: one record per
system, built by ``calbench leaderboard add`` from ``leaderboards/protocols-cpu/run.sh``'s
outputs; ``leaderboards/protocols-cpu/store.sh``), re-scores each (system, protocol) from its
stored samples as the leaderboard does (valid rate, the calibration score, ``pit_w1``, KS@N)
and adds from the record's metrics the excess W1/IQR median, the well-formed rate and the
generated tokens per valid sample. ``calbench leaderboard render`` writes the table
(markdown and CSV) and the protocol-gap plot, and splices the table into the README.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from calbench import protocols
from calbench.leaderboard.pages import numbers, plots
from calbench.leaderboard.pages.board import csv_text, splice_readme
from calbench.leaderboard.records import checks
from calbench.leaderboard.records.record_types import Pair, RunRecord
from calbench.markdown import code_span
from calbench.metrics import calibration, prompt_scores
from calbench.metrics.catalog import arrow
from calbench.protocols import PROTOCOLS
from calbench.provenance import atomic_write
from calbench.stats import Z95, Estimate, fmt
from calbench.task_names import QUICK

ORDER = tuple(PROTOCOLS)
FOLDER = "protocols"  # under the results store
TABLE, CSV, PLOT = "protocols.md", "tables/protocols.csv", "plots/protocol_gap.png"
KS_N = calibration.M_REF  # the page's KS@N: the calibration score's reference sample size
README_START, README_END = "<!-- protocols:start -->", "<!-- protocols:end -->"


@dataclass(frozen=True, eq=False)
class Run:
    """One system under one protocol: the record's metrics and its stored answers, re-scored once."""

    system: str
    protocol: str
    overall: Mapping[str, Pair]  # the record's [value, se] pairs
    rows: Mapping[str, Sequence[calibration.Prompt]]
    _quality: dict[int, dict[str, Estimate]] = field(default_factory=dict, repr=False)

    @property
    def samples_per_prompt(self) -> int:
        return max(p.n for family in self.rows.values() for p in family)

    def quality(self, ks_n: int = KS_N) -> dict[str, Estimate]:
        """The leaderboard's numbers of the run's answers (``prompt_scores.sample_quality``), computed once."""
        if ks_n not in self._quality:
            self._quality[ks_n] = prompt_scores.sample_quality(self.rows, ks_n)
        return self._quality[ks_n]


def load_runs(stored: Sequence[RunRecord]) -> list[Run]:
    """Every (system, protocol) of the quick selection in ``stored`` run records: systems by
    entry type (references first), then name; protocols in ``ORDER``."""
    ranked = sorted(stored, key=lambda r: (checks.ENTRY_TYPES.index(r["type"]), r["name"]))
    runs = []
    for record in ranked:
        found = {}
        for task, entry in record["tasks"].items():
            protocol = protocols.sampling_protocol(task)
            if protocol is None or not task.startswith(QUICK):
                continue
            if "samples" not in entry:
                raise checks.RefusedRunError(f"{record['name']}: {task} has no stored samples")
            found[protocol] = Run(
                record["name"], protocol, entry["overall"], prompt_scores.prompt_rows(entry["samples"])
            )
        runs += [found[p] for p in ORDER if p in found]
    if not runs:
        raise checks.RefusedRunError(f"no run records of {QUICK} or its protocol variants")
    return runs


def cells(run: Run, ks_n: int) -> list[Estimate]:
    q = run.quality(ks_n)

    def extra(metric: str) -> Estimate:  # undefined where the run reports none (the independent tasks)
        return numbers.estimate(run.overall.get(metric))

    return [
        q["valid_rate"],
        q["calibration_score"],
        q["pit_w1"],
        numbers.estimate(run.overall.get("excess_w1_iqr_median")),
        q["ks_at_n"],
        extra("well_formed_rate"),
        extra("tokens_per_valid"),
    ]


def table(runs: Sequence[Run], ks_n: int = KS_N) -> tuple[list[str], list[list[str]]]:
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


def markdown(runs: Sequence[Run], commands: Sequence[str]) -> str:
    headers, rows = table(runs)
    command = " && ".join(dict.fromkeys(c.split("#", 1)[0].strip() for c in commands))  # the runs, not the notes
    note = (
        "Value ± 95% interval half-width. The 42 selected prompts of the 30 families (calbench_numeric_quick and its "
        "protocol variants), re-scored from each run's samples as the leaderboard is; tokens/valid counts the "
        "model's tokens (the references: bytes) generated per valid sample; well_formed_rate: batch, exactly 10 "
        "numbers; ssot, an Answer: line; verbalized, a parseable list. The runs: "
        + code_span(command)
        + "; the table, "
        "from their run records: `calbench leaderboard render`."
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
        by_protocol = {r.protocol: r.quality()["calibration_score"] for r in runs if r.system == system}
        scores = [by_protocol.get(p, Estimate(math.nan, math.nan)) for p in ORDER]  # a gap where one is missing
        ax.errorbar(
            range(len(ORDER)),
            [s.value for s in scores],
            yerr=[Z95 * s.se for s in scores],
            marker="o",
            capsize=3,
            label=system,
        )
    ax.set_xticks(range(len(ORDER)), ORDER)
    ax.set_ylim(-3, 103)
    ax.set_ylabel("calibration score (0-100)")
    ax.set_title("calbench: the same prompts under each sampling protocol", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    plots.save(fig, path)
    plt.close(fig)


def _page(runs: Sequence[Run], stored: Sequence[RunRecord]) -> tuple[dict[str, str], str]:
    """The table's files (relative path: content) and the README block, from loaded runs."""
    headers, rows = table(runs)
    text = markdown(runs, [r["command"] for r in stored])
    page = "# calbench: sampling protocols\n\n" + text + f"\n![calibration score by protocol]({PLOT})\n"
    return {TABLE: page, CSV: csv_text(headers, rows)}, text.rstrip("\n")


def render(stored: Sequence[RunRecord]) -> dict[str, str]:
    """The table's files (relative path: content) from protocol run records."""
    return _page(load_runs(stored), stored)[0]


def write(stored: Sequence[RunRecord], out: Path, readme: Path | None, draw: bool = True) -> list[Path]:
    """Write the table (and the protocol-gap plot) under ``out``; splice the table into ``readme``
    if it has the protocol markers."""
    runs = load_runs(stored)  # re-scoring every run's samples: once
    files, block = _page(runs, stored)
    written = []
    for name, content in files.items():
        atomic_write(out / name, content)
        written.append(out / name)
    if draw:
        draw_gap(runs, out / PLOT)
        written.append(out / PLOT)
    text = readme.read_text() if readme is not None and readme.is_file() else ""
    if readme is not None and README_START in text and README_END in text:  # a README that shows the table
        readme.write_text(splice_readme(text, block, README_START, README_END))
        written.append(readme)
    return written
