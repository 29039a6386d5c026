"""Learning curves, drawn: a curve recipe's page and plot, from its points' records alone.

``calbench leaderboard render`` writes ``<recipe>.md`` and ``plots/<recipe>.png`` (e.g.
``curves.md``, ``plots/curves.png``): on the quick selection's 42 prompts the calibration score,
``pit_w1``, the valid rate and KS@100 (``prompt_scores.sample_quality``), and each retention
task's headline metric, all with 95% intervals; for a protocol of the prompt sets, each set's
score and medians' rho, beside the reference systems' records. Each point is scored once
(``Point``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from tabulate import tabulate

from calbench.families import FAMILIES
from calbench.leaderboard.pages.board import BOARD_START, board_page
from calbench.leaderboard.pages.numbers import Scored, scored, task_metric
from calbench.leaderboard.recipes.curves import CurveRun, Curves
from calbench.leaderboard.recipes.fields import Evaluation
from calbench.leaderboard.records import store
from calbench.leaderboard.records.record_types import CurvePart, RunRecord
from calbench.metrics.calibration import prompt_score
from calbench.metrics.prompt_scores import prompt_rows, sample_quality
from calbench.metrics.tails import outer_summary
from calbench.name_pairs import NO_IDENTITY, pairs
from calbench.provenance import atomic_write
from calbench.stats import UNDEFINED, Z95, Estimate, fmt
from calbench.task_names import DIAGNOSTIC_LABELS, DIAGNOSTIC_TASKS, NAMES, QUICK, SPLIT_LABELS, SPLIT_TASKS
from calbench.train_record import trained_option

HEADLINE_SCORE = "score (unseen + held-out)"  # the leaderboard's calibration score on the two sampling splits
RETENTION = {
    "calbench_arithmetic": "exact_flexible",
    "calbench_format_following": "loose_acc",
    "calbench_mmlu_mini": "acc",
}


def _every_text(every: int) -> str:
    return {1: "Every checkpoint", 2: "Every other checkpoint and the last"}.get(
        every, f"Every {every}th checkpoint and the last"
    )


def point_numbers(record: RunRecord, numbers: Scored | None = None) -> dict[str, Estimate]:
    """A curve point's numbers: the quick selection's quality, each prompt set's score and rho (from
    ``numbers``, the record scored, when given) and the retention metrics."""
    numbers = numbers if numbers is not None else Scored(record)
    out: dict[str, Estimate] = {}
    quick = record["tasks"].get(QUICK)
    if quick is not None and "samples" in quick:
        rows = prompt_rows(quick["samples"])
        out.update(sample_quality(rows))
        _, tails = outer_summary(rows)  # does training shrink the PIT's tails? (calbench.metrics.tails)
        out["outer"], out["far"] = tails["outer"], tails["far"]
    tasks = {**SPLIT_TASKS, **DIAGNOSTIC_TASKS}
    for split, label in {**SPLIT_LABELS, **DIAGNOSTIC_LABELS}.items():  # a protocol of the prompt sets
        if tasks[split] in record["tasks"] and QUICK not in record["tasks"]:
            for key, value in (
                (f"{label} score", numbers.split_score(split)),
                (f"{label} rho", numbers.split_following(split)),
            ):
                out[key] = value if isinstance(value, Estimate) else UNDEFINED
    for task, metric in RETENTION.items():
        if (value := task_metric(record, task, metric)) is not UNDEFINED:  # the task run, the metric stored
            out[_retention_key(task, metric)] = value
    return out


def _retention_key(task: str, metric: str) -> str:
    return f"{task.removeprefix('calbench_')} {metric}"


@dataclass(frozen=True, eq=False)
class Point:
    """A curve point's record and its numbers (``point_numbers``), computed once."""

    record: RunRecord

    @cached_property
    def scored(self) -> Scored:
        """The record scored once, for its numbers, the headline score and the per-family tables."""
        return Scored(self.record)

    @cached_property
    def numbers(self) -> dict[str, Estimate]:
        return point_numbers(self.record, self.scored)

    @property
    def curve(self) -> CurvePart:
        return self.record["curve"]


def as_points(points: Mapping[str, Sequence[RunRecord | Point]]) -> dict[str, list[Point]]:
    """run -> its points, each to be scored once (a ``Point`` as it is, a record wrapped)."""
    return {run: [p if isinstance(p, Point) else Point(p) for p in pts] for run, pts in points.items()}


def load_points(curves: Curves) -> dict[str, list[RunRecord]]:
    """run -> its points' records, by step (runs without records left out)."""
    out = {}
    for run in curves.runs:
        folder = curves.folder(run.name)
        if folder.is_dir():
            points = sorted(store.load_records(folder), key=lambda r: r["curve"].get("step", 0) if "curve" in r else 0)
            if points and all("curve" in p for p in points):
                out[run.name] = points
    return out


def table(curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]]) -> str:
    pts = as_points(points)
    parts = []
    for run in curves.runs:
        if run.name not in pts:
            continue
        rows, headers = [], ["step", "examples"]
        losses = any(p.curve.get("train_loss") is not None for p in pts[run.name])
        for point in pts[run.name]:
            numbers = point.numbers
            if len(headers) == 2:
                headers += list(numbers)
            loss = point.curve.get("train_loss")
            rows.append(
                [
                    str(point.curve["step"]),
                    str(point.curve["examples"]),
                    *(fmt(numbers[h]) for h in headers[2:]),
                    *([] if not losses else ["n/a" if loss is None else f"{loss:.4g}"]),
                ]
            )
        headers += ["train loss"] if losses else []
        last = pts[run.name][-1].curve
        cost = f"{last['seconds_per_step']:g} s and {last['tokens_per_step']:g} tokens per optimizer step"
        train = ", ".join(f"{k}={v}" for k, v in run.train.items())
        own = "" if run.score_every in (None, curves.score_every) else f"; {_every_text(run.score_every).lower()}"
        parts.append(
            f"### {run.label} (`{run.name}`: {train}; {cost}{own})\n\n"
            + tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
        )
    return "\n\n".join(parts)


def seed_sd(estimates: Sequence[Estimate]) -> float:
    """The standard deviation over training seeds beyond each run's own sampling noise.

    A run's number is its seed's true value plus sampling error of variance se²; so the
    variance over runs estimates var(seed) + mean(se²), and var(seed) is what remains
    (method of moments; 0 when the runs spread no more than their own errors explain).
    """
    values = np.array([e.value for e in estimates])
    noise = float(np.mean([e.se**2 for e in estimates]))
    return float(np.sqrt(max(0.0, float(np.var(values, ddof=1)) - noise)))


def spread(curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]]) -> str:
    """Each group's runs (the same recipe, other seeds) at their last point: every run, then the
    mean, the sample standard deviation over the group's runs and the part of it that sampling
    noise does not explain (``seed_sd``), where every run's last point is at one step."""
    pts = as_points(points)
    groups: dict[str, list[tuple[CurveRun, Point]]] = {}
    for run in curves.runs:
        if run.group is not None and run.name in pts:
            groups.setdefault(run.group, []).append((run, pts[run.name][-1]))
    lines = []
    for group, last in groups.items():
        members = [(run, point.numbers) for run, point in last]
        # a run still training (or its final point not scored yet) lacks some numbers: "n/a" there;
        # and the group's summaries are n/a while its runs' last points are at different steps
        keys = list(dict.fromkeys(k for _, numbers in members for k in numbers))
        for run, numbers in members:
            lines.append([group, run.name, *(fmt(numbers.get(k, UNDEFINED)) for k in keys)])
        if len(members) > 1:
            one_step = len({int(point.curve["step"]) for _, point in last}) == 1
            summaries: tuple[tuple[str, Callable[[list[Estimate]], float]], ...] = (
                ("mean", lambda e: float(np.mean([x.value for x in e]))),
                ("sd over runs", lambda e: float(np.std([x.value for x in e], ddof=1))),
                ("seed sd beyond sampling", seed_sd),
            )
            for name, fn in summaries:
                cells = []
                for k in keys:
                    got = [n.get(k, UNDEFINED) for _, n in members]
                    estimates = [e for e in got if math.isfinite(e.value) and math.isfinite(e.se)]
                    cells.append(f"{fn(estimates):.3g}" if one_step and len(estimates) == len(members) else "n/a")
                lines.append([group, f"**{name}** ({len(members)} runs)", *cells])
    if not lines:
        return ""
    headers = ["group", "run (last point)", *keys]
    return "## Spread over training seeds\n\n" + tabulate(
        lines, headers=headers, tablefmt="github", disable_numparse=True
    )


LEGEND_COLUMNS = 3  # the curve plot's legend, below its panels


def draw(curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]], path: Path) -> None:
    import matplotlib.pyplot as plt

    from calbench.leaderboard.pages.plots import save

    candidates = [
        ("calibration_score", "calibration score (quick, 42 prompts)"),
        ("arithmetic exact_flexible", "arithmetic exact_flexible"),
        *((f"{label} score", f"calibration score: {label}") for label in SPLIT_LABELS.values()),
        *((f"{label} score", f"calibration score: {label}") for label in DIAGNOSTIC_LABELS.values()),
    ]
    pts = as_points(points)
    present = {k for run in pts.values() for point in run for k in point.numbers}
    metrics = [(k, label) for k, label in candidates if k in present]
    legend = 0.22 * math.ceil(sum(run.name in pts for run in curves.runs) / LEGEND_COLUMNS)  # inches, below
    height = 4 + legend
    fig, axes = plt.subplots(1, len(metrics), figsize=(max(11, 3.6 * len(metrics)), height), squeeze=False)
    for ax, (key, label) in zip(axes[0], metrics, strict=True):
        for run in curves.runs:
            if run.name not in pts:
                continue
            xs, ys, es = [], [], []
            for point in pts[run.name]:
                value = point.numbers.get(key)
                if value is not None and math.isfinite(value.value):
                    xs.append(point.curve["examples"])
                    ys.append(value.value)
                    es.append(Z95 * value.se if math.isfinite(value.se) else 0.0)
            ax.errorbar(xs, ys, yerr=es, marker="o", ms=3, capsize=2, label=run.label)
        ax.set_xlabel("training examples seen")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=LEGEND_COLUMNS, fontsize=8, frameon=False)
    fig.suptitle("Learning curves: 95% intervals", fontsize=10)
    fig.tight_layout(rect=(0, (legend + 0.1) / height, 1, 1))  # the panels above the legend
    save(fig, path)
    plt.close(fig)


def ends(
    curves: Curves,
    points: Mapping[str, Sequence[RunRecord | Point]],
    references: Sequence[RunRecord | Scored] = (),
) -> str:
    """The prompt-set protocol's comparison: each run at its last point (first the leaderboard's score on
    its unseen and held-out prompts, then each prompt set's, then each retention metric the
    protocol scores), beside reference systems' records and the base model's (their sampling and
    retention evaluations: the same numbers); "" for another protocol."""
    evaluations = (*curves.protocol, *curves.final)
    if not any(SPLIT_TASKS[s] in e.tasks for e in evaluations for s in ("train", "interp", "wide")):
        return ""
    labels = {**SPLIT_LABELS, **_diagnostics(evaluations)}
    keys = [f"{label} {what}" for label in labels.values() for what in ("score", "rho")]
    retention = {t: m for t, m in RETENTION.items() if any(t in e.tasks for e in evaluations)}
    keys += [_retention_key(t, m) for t, m in retention.items()]
    lines = []
    pts = as_points(points)
    for run in curves.runs:
        if run.name in pts:
            last = pts[run.name][-1]
            step = f"{last.curve['step']} ({last.curve['examples']:,} examples)"
            headline = _cell(last.scored.calibration_score)
            lines.append([run.label, step, headline, *(fmt(last.numbers.get(k, UNDEFINED)) for k in keys)])
    for reference in scored(references):
        cells = [_cell(reference.calibration_score)]
        for split in labels:
            for value in (reference.split_score(split), reference.split_following(split)):
                cells.append(_cell(value))
        cells += [fmt(task_metric(reference.record, t, m)) for t, m in retention.items()]
        lines.append([_reference_label(reference), "n/a", *cells])
    headers = ["run", "last point", HEADLINE_SCORE, *keys]
    return "## At the end of training, beside the references\n\n" + tabulate(
        lines, headers=headers, tablefmt="github", disable_numparse=True
    )


def _reference_label(reference: Scored) -> str:
    return f"{reference.name} ({'reference' if reference.record['type'] == 'reference' else 'the base model'})"


def _cell(value: Estimate | str) -> str:
    return value if isinstance(value, str) else fmt(value)


def _diagnostics(evaluations: Sequence[Evaluation]) -> dict[str, str]:
    """The transfer diagnostics (``DIAGNOSTIC_LABELS``) a recipe's evaluations run."""
    return {
        s: label for s, label in DIAGNOSTIC_LABELS.items() if any(DIAGNOSTIC_TASKS[s] in e.tasks for e in evaluations)
    }


def chosen(curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]]) -> str:
    """Each run's checkpoint chosen on the validation families (the highest validation score of its
    points; ties to the earlier), beside its last point: the held-out families' score at both, which
    the choice never looks at. "" for a recipe that scores no validation families."""
    key = f"{DIAGNOSTIC_LABELS['validation']} score"
    held = f"{SPLIT_LABELS['heldout']} score"
    lines = []
    for run in curves.runs:
        scored_points = [p for p in as_points(points).get(run.name, []) if key in p.numbers]
        if not scored_points:
            continue
        best = max(scored_points, key=lambda p: (p.numbers[key].value, -p.curve["step"]))
        last = scored_points[-1]
        lines.append(
            [
                run.label,
                str(best.curve["step"]),
                fmt(best.numbers[key]),
                fmt(best.numbers.get(held, UNDEFINED)),
                str(last.curve["step"]),
                fmt(last.numbers[key]),
                fmt(last.numbers.get(held, UNDEFINED)),
            ]
        )
    if not lines:
        return ""
    headers = ["run", "chosen step", "its validation score", "its held-out score"]
    headers += ["last step", "its validation score", "its held-out score"]
    return (
        "## The checkpoint chosen on the validation families\n\n"
        "Each run's point with the highest score on the validation families (extra families no run trains"
        " on, `calbench_numeric_validation`), and its last point: the held-out families are never looked at"
        " to choose (`calbench leaderboard choose` copies the chosen checkpoint out of a run folder).\n\n"
        + tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)
    )


def heldout_families(
    curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]], references: Sequence[RunRecord | Scored] = ()
) -> str:
    """The held-out split family by family: each system's calibration score on the family's prompts
    and its share of valid answers, each run at its last point and each reference; "" where the
    recipe does not score the held-out split. A family scored near 0 with few valid answers fails
    before its spread is scored: its answers are not numbers, or numbers the law cannot produce."""
    if not any(SPLIT_TASKS["heldout"] in e.tasks for e in (*curves.protocol, *curves.final)):
        return ""
    systems = [(run.label, p[-1].scored) for run in curves.runs if (p := as_points(points).get(run.name))]
    systems += [(_reference_label(r), r) for r in scored(references)]
    tables = [(label, system.split_families("heldout")) for label, system in systems]
    tables = [(label, by_family) for label, by_family in tables if by_family]
    if not tables:
        return ""
    families = sorted({f for _, by_family in tables if not isinstance(by_family, str) for f in by_family})
    lines = []
    for label, by_family in tables:
        if isinstance(by_family, str):
            lines.append([label, *([by_family] * len(families))])
            continue
        cells = []
        for family in families:
            if family not in by_family:
                cells.append("n/a")
                continue
            score, valid = by_family[family]
            cells.append(f"{fmt(score)} (valid {100 * valid.value:.0f}%)")
        lines.append([label, *cells])
    return (
        "## The held-out families one by one\n\n"
        "Each held-out family's calibration score on its prompts of `calbench_numeric_heldout` (0-100, the"
        " score of that family alone) and, in brackets, its share of valid answers (an answer is valid when it"
        " parses and the law can produce it: a Bernoulli answer of 0.8 is not; rounded to a percent), each run"
        " at its last point."
        " A family near 0 with few valid answers fails before its spread is scored: its answers are not numbers,"
        " or are numbers the law cannot produce (a trained model's invalid answers are mostly the latter: the"
        " records' `support_violation_rate`).\n\n"
        + tabulate(lines, headers=["system", *families], tablefmt="github", disable_numparse=True)
    )


def names(
    curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]], references: Sequence[RunRecord | Scored] = ()
) -> str:
    """The name-versus-law pairs side by side (``calbench.name_pairs``): each pair's held-out-named
    and training-named prompt scores, for each run's last point and each reference. "" where no
    record has the pairs, or where the recipe does not score them."""
    if not any(NAMES in e.tasks for e in (*curves.protocol, *curves.final)):
        return ""
    systems = [(run.label, p[-1].record) for run in curves.runs if (p := as_points(points).get(run.name))]
    systems += [(_reference_label(r), r.record) for r in scored(references)]
    systems = [
        (label, record) for label, record in systems if NAMES in record["tasks"] and "samples" in record["tasks"][NAMES]
    ]
    if not systems:
        return ""
    headers = ["system"] + [f"{b.key} / {a.key}" for a, b in pairs()]
    lines = []
    for label, record in systems:
        by_key = {s["target"]: s for s in record["tasks"][NAMES]["samples"]}
        cells = []
        for a, b in pairs():
            both = [by_key.get(t.key) for t in (b, a)]
            cells.append(
                " / ".join(
                    "n/a"
                    if s is None
                    else f"{100 * prompt_score(np.asarray(s['values'], dtype=float), int(s['n']), t).value:.0f}"
                    for s, t in zip(both, (b, a), strict=True)
                )
            )
        lines.append([label, *cells])
    return (
        "## Name versus law\n\n"
        "One law asked for under a training family's name and under a held-out family's name"
        " (`calbench_numeric_names`, `calbench.name_pairs`): each cell is the two prompts' scores"
        " (training name / held-out name, 0-100, the calibration score's per-prompt s), each system at"
        " its last point. A system that samples the training-named prompt far better than the"
        " held-out-named one has the sampling, not the name. Held-out families without an exact"
        " identity to a training family: "
        + "; ".join(f"{f} ({why})" for f, why in NO_IDENTITY.items())
        + ".\n\n"
        + tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)
    )


def distributions(curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]]) -> str:
    """Each run's training distribution, as its points record it (``calbench_train.json``'s
    ``distribution``: examples per family over the run); "" where no point records one."""
    lines = []
    for run in curves.runs:
        pts = as_points(points).get(run.name, [])
        counts = next((p.curve.get("distribution") for p in reversed(pts) if p.curve.get("distribution")), None)
        if not counts:
            continue
        paper = {f: n for f, n in counts.items() if f in FAMILIES}
        extra = {f: n for f, n in counts.items() if f not in FAMILIES}
        listed = ", ".join(f"{f} {n}" for f, n in extra.items()) or "none"
        lines.append(
            f"- **{run.label}** (`{run.name}`): {len(counts)} families, {sum(counts.values()):,} examples;"
            f" the 24 training families {sum(paper.values()):,} ({min(paper.values())}-{max(paper.values())} each),"
            f" {len(extra)} extra families {sum(extra.values()):,}: {listed}."
        )
    if not lines:
        return ""
    return (
        "## Training distributions\n\nExamples per family over each run, as its `calbench_train.json` records them.\n\n"
        + "\n".join(lines)
    )


def write(
    curves: Curves, output: Path, draw_plot: bool = True, references: Sequence[RunRecord | Scored] = ()
) -> list[Path]:
    """The recipe's page and plot; a page holding the board markers keeps its hand-written text
    around them (``render.board_page``). Each point is scored once, for the tables and the plot."""
    points = as_points(load_points(curves))
    if not points:
        return []
    page, plot = curves.page
    which = _every_text(curves.score_every)

    def described(evaluations: Sequence[Evaluation]) -> str:
        return "; ".join(
            f"{e.name}: {', '.join(e.tasks)}"
            + (f" at {e.samples_per_prompt} samples per prompt" if e.samples_per_prompt else "")
            for e in evaluations
        )

    protocol = described(curves.protocol)
    if curves.final:
        protocol += f"; a finished run's last point instead by {described(curves.final)}"
    quick = any(QUICK in e.tasks for e in curves.protocol)
    numbers = (
        " The score, pit_w1, valid rate and KS@100 are the quick selection's"
        " (42 prompts, `calbench.metrics.prompt_scores.sample_quality`; KS@100 needs 100 valid answers of a prompt,"
        " so at 100 samples per prompt it fails any prompt with an invalid one)."
        if quick
        else " Each prompt set's calibration score and Spearman's rho of the laws' and the answers' medians"
        " (`calbench.leaderboard.pages.numbers.Scored.split_score`, `split_following`)."
    )
    summed = any(
        trained_option(run.train, "accumulation") == "legacy" and run.train.get("method") == "hard"
        for run in curves.runs
        if run.name in points
    )
    text = (
        f"# {curves.title}\n\n"
        f"Rendered by `calbench leaderboard render` from the records in `{curves.declared.as_posix()}/`"
        f" (`calbench leaderboard run {curves.path.as_posix()}`). {which}"
        + (", and the base model at step 0," if curves.score_base else "")
        + f" scored by one protocol: {protocol}.{numbers} Value ± 95% interval half-width."
        + (
            " The train loss is the one logged last at the point (the mean over the logging interval before it, 5 steps by default; the soft"
            " loss is a KL to the trie targets, 0 at a perfect fit)."
            + (
                " A hard-target run that does not state `accumulation=mean` summed each step's micro-batches"
                " (`calbench train --accumulation legacy`): its logged loss is the sum of their mean cross-entropies"
                " (effective batch / batch size of them: 4 at the default 32 / 8), and its last, partial step's the sum"
                " of fewer, hence the drop at a finished run's last point."
                if summed
                else ""
            )
            if any(p.curve.get("train_loss") is not None for run in points.values() for p in run)
            else ""
        )
        + f"\n\n![learning curves]({plot})\n\n"
        + "\n\n".join(
            part
            for part in (
                ends(curves, points, references),
                heldout_families(curves, points, references),
                chosen(curves, points),
                names(curves, points, references),
                distributions(curves, points),
                spread(curves, points),
                table(curves, points),
            )
            if part
        )
        + "\n"
    )
    existing = (output / page).read_text() if (output / page).is_file() else None
    if existing is not None and BOARD_START in existing:
        text = board_page(existing, text)
    atomic_write(output / page, text)
    written = [output / page]
    if draw_plot:
        draw(curves, points, output / plot)
        written.append(output / plot)
    return written
