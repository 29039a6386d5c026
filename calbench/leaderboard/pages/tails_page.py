"""``leaderboards/tails.md``: where each row's PIT tails come from (``calbench.metrics.tails``),
from the records' stored samples alone.

One table of every row with stored numeric samples, split by split (the outer share, low and
high, what of it is far, off by ten times or an echo of the prompt, and whether the answers'
medians follow the laws'), then the adapters prompt by prompt: the share of each prompt's valid
answers in the law's outer 10%, the median answer beside the law's, and the answers that carry
the most outer mass (of the best-scoring adapter). The base model's curve point and each learning
curve's last point join the first table (``curve_points``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from tabulate import tabulate

from calbench.leaderboard.pages.numbers import Scored, ranked, scored
from calbench.leaderboard.records.record_types import RunRecord
from calbench.metrics import tails
from calbench.metrics.calibration import Prompt
from calbench.metrics.prompt_scores import prompt_rows
from calbench.provenance import atomic_write
from calbench.stats import fmt
from calbench.task_names import NUMERIC_SPLITS, QUICK, SAMPLING_TASKS

TABLE = "tails.md"
TRAINED = ("fine-tuned adapter", "fine-tuned")  # the rows shown prompt by prompt: a LoRA adapter, a full fine-tune
SPLITS = {**{SAMPLING_TASKS[s]: s for s in NUMERIC_SPLITS}, QUICK: "quick"}
HEADERS = [
    "row",
    "split",
    "prompts answered",
    "outer ↓",
    "low",
    "high",
    "far ↓",
    "x10 scale ↓",
    "echo ↓",
    "medians follow ↑",
    "within families ↑",
]


def _rows_of(record: RunRecord, task: str) -> dict[str, list[Prompt]] | None:
    entry = record["tasks"].get(task)
    if entry is None or "samples" not in entry:
        return None
    return prompt_rows(entry["samples"])


def summary_row(name: str, task: str, rows: Mapping[str, Sequence[Prompt]]) -> list[str]:
    _, overall = tails.outer_summary(rows)
    prompts = [p for family in rows.values() for p in family]
    following = [tails.location_following(prompts), tails.within_family_following(rows)]
    shares = [fmt(overall[s]) for s in ("outer", "low", "high", "far", "scale", "echo")]
    answered = sum(p.values.size > 0 for p in prompts)
    return [name, SPLITS[task], f"{answered} of {len(prompts)}", *shares, *map(fmt, following)]


def _adapter_prompts(adapters: Sequence[RunRecord]) -> str:
    """Each prompt of both splits: the law's median, then per adapter its outer share and median
    answer; the first adapter's top outer answers."""
    names = [a["name"] for a in adapters]
    headers = ["prompt", "law median", *(f"{n.removeprefix('smollm2-135m-instruct-')}: outer, median" for n in names)]
    headers.append(f"{names[0].removeprefix('smollm2-135m-instruct-')}: top outer answers (share of outer mass)")
    lines = []
    for split in NUMERIC_SPLITS:
        per_adapter = [_rows_of(a, SAMPLING_TASKS[split]) or {} for a in adapters]
        for family, prompts in per_adapter[0].items():
            for i, prompt in enumerate(prompts):
                target = prompt.target
                answers = [rows[family][i].values if family in rows else np.array([]) for rows in per_adapter]
                outers = [tails.outer_of(values, target) for values in answers]
                cells = [
                    f"{o.outer:.2f}, {float(np.median(values)):.4g}" if o.valid else "no valid answer"
                    for o, values in zip(outers, answers, strict=True)
                ]
                top = ", ".join(f"{v:g} ({s:.0%})" for v, s in outers[0].top)
                lines.append([f"{target.key} ({split})", f"{float(target.law.median()):.4g}", *cells, top])
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)


def render(records: Sequence[RunRecord | Scored], curve_points: Sequence[tuple[str, RunRecord]] = ()) -> str:
    """The page: every record with stored numeric samples, then its adapters prompt by prompt
    ("" when no record has any)."""
    ready = scored(records)  # the adapters are ranked by their calibration score
    table = []
    for record in (s.record for s in ready):
        for task in SPLITS:
            rows = _rows_of(record, task)
            if rows is not None:
                table.append(summary_row(record["name"], task, rows))
    for label, record in curve_points:
        rows = _rows_of(record, QUICK)
        if rows is not None:
            table.append(summary_row(label, QUICK, rows))
    adapters = [
        s.record
        for s in ranked(ready)
        if s.record.get("type") in TRAINED and _rows_of(s.record, SAMPLING_TASKS["unseen"])
    ]
    if not table:
        return ""
    text = (
        "# Where the PIT's tails come from\n\n"
        "Rendered by `calbench leaderboard render` from the records' stored samples"
        " (definitions: `calbench/metrics/tails.py`). Of each prompt's valid answers: the share whose PIT lies"
        f" in the law's outer {2 * tails.TAIL:.0%} (**outer**, below {tails.TAIL:g} = **low**, above"
        f" {1 - tails.TAIL:g} = **high**; exact draws: {tails.TAIL:g} each), the share beyond the law's"
        f" {tails.FAR:g} and {1 - tails.FAR:g} quantiles (**far**; exact draws: {2 * tails.FAR:g}), the far answers"
        f" at least {tails.SCALE:g} times too large or too small for the law (**x10 scale**), and the outer mass on a"
        " value of the prompt's parameters or an end of the support (**echo**); each the mean over a family's"
        " prompts, then over families (± the 95% interval's half-width). **Medians follow**: Spearman's rank correlation over"
        " the split's prompts between the law's median and the median valid answer (1: the answers move with"
        " the law; exact draws: about 1); **within families**: the same within each family that has at least"
        f" {tails.MIN_PROMPTS} prompts, averaged over those families. Answers outside the law's support are"
        " not valid and are not counted here (the records' `support_violation_rate`).\n\n"
        + tabulate(table, headers=HEADERS, tablefmt="github", disable_numparse=True)
        + "\n"
    )
    if adapters:
        text += (
            "\n## The trained systems, prompt by prompt\n\n"
            "Each prompt's share of valid answers in the law's outer 10% and its median valid answer, beside the"
            " law's median.\n\n" + _adapter_prompts(adapters) + "\n"
        )
    return text


def write(
    records: Sequence[RunRecord | Scored], out: Path, curve_points: Sequence[tuple[str, RunRecord]] = ()
) -> list[Path]:
    text = render(records, curve_points)
    if not text:
        return []
    path = out / TABLE
    atomic_write(path, text)
    return [path]
