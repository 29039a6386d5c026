"""Learning curves: every checkpoint of a training run scored by one fixed, cheap protocol.

A curve recipe (``kind: curve``, e.g. ``leaderboards/rows/curves.yaml``) names training runs
(each with its ``calbench train`` options, over ``defaults.yaml``'s ``train:``) and one
protocol (evaluations, as a row's). ``calbench leaderboard run`` trains each run in
``<workdir>/<run>/train`` (``--keep-checkpoints 0``: every checkpoint kept; an interrupted
run resumes), then scores the base model (step 0; not with ``score_base: false``) and every
checkpoint with the protocol (or, with ``score_every: N``, every N-th checkpoint and the last one):
each point is a row of its own (``calbench.leaderboard.rows``, finished points skipped),
stored in ``<results>/curves/<run>/step-<N>.json`` with its step, examples seen, wall time
and tokens (without per-item scores or per-family metrics: ``light``). ``calbench leaderboard render`` draws the curves from those records alone
(``curves.md``, ``plots/curves.png``): on the quick selection's 42 prompts the calibration
score, ``pit_w1``, the valid rate and KS@100 (``prompt_scores.sample_quality``), and each
retention task's headline metric, all with 95% intervals.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from calbench.leaderboard import store
from calbench.leaderboard.checks import RefusedRunError
from calbench.leaderboard.numbers import EXACT_TASKS, LIKELIHOOD_TASKS, SAMPLING_TASKS, SPLIT_TASKS, Scored
from calbench.leaderboard.numbers import scored as scored_records
from calbench.leaderboard.recipes import (
    RESULTS,
    Evaluation,
    Recipe,
    RecipeError,
    check_model_args,
    check_train_options,
    defaults_of,
    evaluations_of,
    folder_name,
    merge,
    need,
    read_yaml,
    train_arguments,
)
from calbench.leaderboard.record_types import CurvePart, RunRecord
from calbench.leaderboard.render import BOARD_START, SPLIT_LABELS, board_page
from calbench.leaderboard.rows import WORKDIR, _calbench, _say, run_row, training_failed
from calbench.metrics.prompt_scores import prompt_rows, sample_quality
from calbench.metrics.tails import outer_summary
from calbench.provenance import atomic_write
from calbench.stats import UNDEFINED, Z95, Estimate, fmt
from calbench.train_record import logged_loss

QUICK = "calbench_numeric_quick"
RETENTION = {
    "calbench_arithmetic": "exact_flexible",
    "calbench_format_following": "loose_acc",
    "calbench_mmlu_mini": "acc",
}


@dataclass(frozen=True)
class CurveRun:
    name: str
    label: str
    model: str
    train: Mapping[str, Any]
    group: str | None = None  # runs of one recipe that differ only by seed: their spread is shown
    score_every: int | None = None  # this run's own checkpoint spacing (default: the recipe's)


@dataclass(frozen=True)
class Curves:
    path: Path
    runs: tuple[CurveRun, ...]
    protocol: tuple[Evaluation, ...]
    backend: str
    model_args: Mapping[str, Any]
    chat_template: bool
    results_dir: Path
    declared: Path = RESULTS / "curves"  # the recipe's own store, as the page names it
    score_every: int = 1  # score every this many checkpoints (and the last one)
    title: str = "Learning curves"
    score_base: bool = True  # score the base model too (step 0)
    final: tuple[Evaluation, ...] = ()  # a larger protocol for a finished run's last point (all of protocol's tasks)

    def folder(self, run: str) -> Path:
        return self.results_dir / run

    @property
    def page(self) -> tuple[str, str]:
        """The rendered table and plot, named after the recipe (curves.yaml: curves.md, plots/curves.png)."""
        return f"{self.path.stem}.md", f"plots/{self.path.stem}.png"


def load(path: Path) -> Curves:
    """A curve recipe over its folder's defaults, checked field by field."""
    path = Path(path)
    own = read_yaml(path)
    need(own.get("kind") == "curve", path, "kind", "must be curve")
    base = defaults_of(path.parent)
    train_defaults = base.pop("train", {}) or {}
    data = merge({k: v for k, v in base.items() if k != "evaluations"}, {k: v for k, v in own.items() if k != "kind"})
    chat = data.get("chat_template", False)
    runs = data.get("runs") or {}
    need(isinstance(runs, Mapping) and bool(runs), path, "runs", "name at least one training run")
    out = []
    seen: set[str] = set()
    for name, spec in runs.items():
        folder_name(path, f"runs.{name}", name, seen)
        need(isinstance(spec, Mapping) and isinstance(spec.get("train"), Mapping), path, f"runs.{name}", "needs train:")
        model = spec.get("model", data.get("model"))
        need(isinstance(model, str), path, f"runs.{name}.model", "name the base model (here or at the top)")
        train = merge(train_defaults, spec["train"])
        check_train_options(path, f"runs.{name}.train", train, allowed=("save_steps", "logging_steps"))
        need("effective_batch" in train, path, f"runs.{name}.train", "state effective_batch (examples per step)")
        group = spec.get("group")
        need(group is None or isinstance(group, str), path, f"runs.{name}.group", "must be a name")
        own_every = spec.get("score_every")
        if own_every is not None:
            _need_every(own_every, path, f"runs.{name}.score_every")
        out.append(CurveRun(str(name), str(spec.get("label", name)), model, train, group, own_every))
    model_args = data.get("model_args") or {}
    need(isinstance(model_args, Mapping), path, "model_args", "must be a mapping")
    check_model_args(path, model_args)
    protocol = evaluations_of(path, data.get("protocol"), chat, False)
    final = evaluations_of(path, data["final"], chat, False) if data.get("final") is not None else ()
    missing = sorted({t for e in protocol for t in e.tasks} - {t for e in final for t in e.tasks}) if final else []
    need(not missing, path, "final", f"scores the last point instead of protocol: add {missing} (the curve goes on)")
    every = data.get("score_every", 1)
    _need_every(every, path, "score_every")
    score_base = data.get("score_base", True)
    need(isinstance(score_base, bool), path, "score_base", "true or false (score the base model at step 0)")
    raw_results = data.get("results_dir") or RESULTS / "curves"
    need(isinstance(raw_results, str | Path), path, "results_dir", f"must be a folder's path, got {raw_results!r}")
    return Curves(
        path,
        tuple(out),
        protocol,
        str(data.get("backend", "calbench-hf")),
        dict(model_args),
        bool(chat),
        Path(raw_results),
        Path(raw_results),
        every,
        str(data.get("title") or "Learning curves"),
        score_base,
        final,
    )


def _need_every(every: Any, path: Path, field: str) -> None:
    need(isinstance(every, int) and not isinstance(every, bool) and every >= 1, path, field, "a whole number >= 1")


def _every_text(every: int) -> str:
    return {1: "Every checkpoint", 2: "Every other checkpoint and the last"}.get(
        every, f"Every {every}th checkpoint and the last"
    )


def checkpoints(train_folder: Path) -> list[tuple[int, Path]]:
    """A run folder's complete checkpoints (calbench marks them), by step."""
    found = []
    for p in Path(train_folder).glob("checkpoint-*"):
        weights = ("adapter_model.safetensors", "model.safetensors")  # LoRA, or a full fine-tune
        if (p / "calbench_checkpoint.json").is_file() and any((p / w).is_file() for w in weights):
            found.append((int(p.name.removeprefix("checkpoint-")), p))
    return sorted(found)


def _trainer_log(checkpoint: Path | None) -> list[dict[str, Any]]:
    """A checkpoint's training log (transformers' ``trainer_state.json``), or nothing."""
    state = None if checkpoint is None else checkpoint / "trainer_state.json"
    if state is None or not state.is_file():
        return []
    return list(json.loads(state.read_text()).get("log_history", []))


def scored(found: Sequence[tuple[int, Path]], every: int, done: bool) -> list[tuple[int, Path]]:
    """The checkpoints a curve scores: every ``every``-th (the 1st, 2nd, ... in step order
    counted from 1), and the last one once the run is done."""
    last = found[-1][0] if done and found else None
    return [(step, p) for i, (step, p) in enumerate(found, 1) if i % every == 0 or step == last]


def to_score(
    found: Sequence[tuple[int, Path]], every: int, done: bool, base: bool = True
) -> list[tuple[int, Path | None]]:
    """A run's points: the base model (step 0, no adapter) unless ``base`` is false, then the
    checkpoints ``scored`` picks."""
    return [*([(0, None)] if base else []), *scored(found, every, done)]


def _point(curves: Curves, run: CurveRun, step: int, adapter: Path | None, last: bool = False) -> Recipe:
    """A point as a row: the protocol's evaluations, or ``final``'s at a finished run's last step. A
    full fine-tune's checkpoint is the point's model itself, a LoRA run's an adapter on the base."""
    name = f"step-{step:04d}"
    full = adapter is not None and run.train.get("finetune") == "full"
    return Recipe(
        curves.path,
        name,
        ("fine-tuned" if full else "fine-tuned adapter") if adapter else "base",
        curves.backend,
        adapter.as_posix() if full and adapter is not None else run.model,
        curves.model_args,
        curves.chat_template,
        None if adapter is None or full else adapter.as_posix(),
        None,
        curves.final if last and curves.final else curves.protocol,
        curves.folder(run.name),
        command=f"calbench leaderboard run {curves.path.as_posix()}   # {run.name}, step {step}",
    )


def run_curves(
    curves: Curves, workdir: Path = WORKDIR, only_runs: Sequence[str] | None = None, train: bool = True
) -> list[Path]:
    """Train each run to its end (resuming), then score every checkpoint not yet scored.

    ``train=False`` trains nothing: it scores the complete checkpoints already in each run
    folder (a run still training in another process, or one to be finished later); a point's
    costs then come from its checkpoint, and the run's own averages replace them once it is done."""
    written = []
    for run in curves.runs:
        if only_runs and run.name not in only_runs:
            continue
        train_folder = workdir / run.name / "train"
        done = (train_folder / "adapter" / "calbench_train.json").is_file()
        if not train and not done and not checkpoints(train_folder):
            _say(f"{run.name}: no complete checkpoint in {train_folder} yet: nothing scored")
            continue
        if train and not done:
            args = [*train_arguments(run.model, run.train), "--output", str(train_folder), "--keep-checkpoints", "0"]
            if (train_folder / "calbench_run.json").is_file():
                args.append("--resume")
            _say(f"{run.name}: training: calbench train {' '.join(args)}")
            if _calbench(["train", *args]).returncode != 0:
                raise RefusedRunError(training_failed(run.name, train_folder))
        summary_file = train_folder / "adapter" / "calbench_train.json"
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
        if summary is not None:
            check_trained_as(run, train_folder / "adapter")
        every = run.score_every or curves.score_every
        points = to_score(checkpoints(train_folder), every, summary is not None, curves.score_base)
        if summary is not None:
            drop_stale_points(curves, run, {step for step, _ in points})
        for step, adapter in points:
            recipe = _point(curves, run, step, adapter, last=summary is not None and step == int(summary["steps"]))
            if step == 0:
                _share_base(curves, run)
            path = run_row(recipe, workdir / run.name / "points")
            record = portable(light(store.load_record(path)), workdir)
            marker = json.loads((adapter / "calbench_checkpoint.json").read_text()) if adapter else {}
            cost = summary or {"steps": step, **marker}  # the run's averages, or so far
            examples = step * int(run.train["effective_batch"])
            history = summary["loss_history"] if summary else _trainer_log(adapter)
            record["curve"] = {
                **({} if step == 0 else {"train_loss": logged_loss(history, step)}),
                "run": run.name,
                "label": run.label,
                "step": step,
                "examples": examples if summary is None else min(examples, int(summary["examples"])),
                "train": dict(run.train),
                "wall_seconds": marker.get("wall_seconds", 0.0),
                "tokens_rank0": marker.get("tokens_seen_rank0", 0),
                "seconds_per_step": round(cost.get("wall_seconds", 0.0) / max(cost["steps"], 1), 2),
                "tokens_per_step": round(cost.get("tokens_seen_rank0", 0) / max(cost["steps"], 1), 1),
            }
            written.append(store.save_record(record, curves.folder(run.name)))
    return written


def check_trained_as(run: CurveRun, adapter: Path) -> None:
    """A finished run was trained with the recipe's options (``calbench train --same-as``), or
    ``RefusedRunError``: a recipe changed after its run finished is neither scored as if it had
    been retrained nor retrained over the run folder (remove the folder to retrain)."""
    done = subprocess.run(
        [sys.executable, "-m", "calbench", "train", *train_arguments(run.model, run.train), "--same-as", str(adapter)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        why = "; ".join(line.removeprefix("calbench train: ") for line in done.stderr.strip().splitlines())
        raise RefusedRunError(
            f"{run.name}: its finished run {adapter.parent} was trained with other options than the recipe's "
            f"({why}): fix the recipe, or remove the run folder to train it again"
        )


def drop_stale_points(curves: Curves, run: CurveRun, steps: set[int]) -> None:
    """Remove a finished run's stored points at steps it no longer scores (a run retrained shorter
    left its old later points, and the page drew two trainings as one curve)."""
    folder = curves.folder(run.name)
    for path in sorted(folder.glob("step-*.json")) if folder.is_dir() else []:
        step = int(path.stem.removeprefix("step-")) if path.stem.removeprefix("step-").isdigit() else None
        if step is not None and step not in steps:
            _say(f"{run.name}: removing the point at step {step}: not a checkpoint this run scores")
            store.remove_record(folder, path.stem)


def light(record: RunRecord) -> RunRecord:
    """A curve point as stored: its numbers and its numeric answers (all the curve page and the
    tails page read), without per-item scores (for pairing rows: ``calbench retention-delta``)
    or per-family metrics (the page recomputes them from the answers): a point weighs about
    30 KB, not 90. The splits' numeric tasks keep theirs: a record of them states every family."""
    keep = {*SAMPLING_TASKS.values(), *LIKELIHOOD_TASKS.values(), *EXACT_TASKS.values()}
    for task, entry in record["tasks"].items():
        entry.pop("items", None)
        if task not in keep:
            entry.pop("families", None)
    return record


def portable(record: RunRecord, workdir: Path) -> RunRecord:
    """A point's checkpoint lies in the machine's ``workdir`` (``--workdir``, often outside the
    tree): the record names it ``<workdir>/...``, in its adapter, its recipe and its commands."""

    given = str(Path(workdir).expanduser())
    # The folder's path where it stands as a path: at the start of a word (or after '='), followed
    # by '/' or the word's end; "c" in "calbench" is not the work folder "c".
    where = re.compile(r"(?:(?<=^)|(?<=[\s=,'\"]))" + re.escape(given) + r"(?=/|$|[\s,'\"])")

    def short(text: str) -> str:
        return where.sub("<workdir>", text)

    adapter = record["model"].get("adapter")
    if adapter:
        record["model"]["adapter"] = short(adapter)
    if isinstance((record.get("recipe") or {}).get("model"), str):  # a full fine-tune's checkpoint is the model
        record["recipe"]["model"] = short(record["recipe"]["model"])
        record["recipe_sha256"] = store.recipe_hash(record["recipe"])
    if (record.get("recipe") or {}).get("adapter"):
        record["recipe"]["adapter"]["path"] = short(record["recipe"]["adapter"]["path"])
        record["recipe_sha256"] = store.recipe_hash(record["recipe"])
    for evaluation in record["evaluations"].values():
        if isinstance(evaluation.get("command"), str):
            evaluation["command"] = short(evaluation["command"])
    return record


def _share_base(curves: Curves, run: CurveRun) -> None:
    """Step 0 is the base model under the protocol: scored once, its record copied to the other
    runs of the same model in the store, any recipe's (``run_row`` then finds it finished, or
    reruns the evaluations whose settings differ)."""
    mine = curves.folder(run.name) / "step-0000.json"
    if mine.is_file():
        return
    for theirs in sorted(curves.results_dir.glob("*/step-0000.json")):
        record = store.load_record(theirs)
        if record["model"].get("pretrained") == run.model:
            record.pop("curve", None)
            store.save_record(record, curves.folder(run.name))
            return


# ---------------------------------------------------------------- rendering, from records alone


def point_numbers(record: RunRecord) -> dict[str, Estimate]:
    """A curve point's numbers: the quick selection's quality and the retention metrics."""
    numbers = Scored(record)
    out: dict[str, Estimate] = {}
    quick = record["tasks"].get(QUICK)
    if quick is not None and "samples" in quick:
        rows = prompt_rows(quick["samples"])
        out.update(sample_quality(rows))
        _, tails = outer_summary(rows)  # does training shrink the PIT's tails? (calbench.metrics.tails)
        out["outer"], out["far"] = tails["outer"], tails["far"]
    for split, label in SPLIT_LABELS.items():  # a protocol of the prompt sets (generalization.yaml)
        if SPLIT_TASKS[split] in record["tasks"] and QUICK not in record["tasks"]:
            for key, value in (
                (f"{label} score", numbers.split_score(split)),
                (f"{label} rho", numbers.split_following(split)),
            ):
                out[key] = value if isinstance(value, Estimate) else UNDEFINED
    for task, metric in RETENTION.items():
        pair = record["tasks"][task]["overall"].get(metric) if task in record["tasks"] else None
        if pair:
            out[f"{task.removeprefix('calbench_')} {metric}"] = Estimate(
                math.nan if pair[0] is None else pair[0], math.nan if pair[1] is None else pair[1]
            )
    return out


@dataclass(frozen=True, eq=False)
class Point:
    """A curve point's record and its numbers (``point_numbers``), computed once."""

    record: RunRecord

    @cached_property
    def numbers(self) -> dict[str, Estimate]:
        return point_numbers(self.record)

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
    noise does not explain (``seed_sd``)."""
    pts = as_points(points)
    groups: dict[str, list[tuple[CurveRun, dict[str, Estimate]]]] = {}
    for run in curves.runs:
        if run.group is not None and run.name in pts:
            groups.setdefault(run.group, []).append((run, pts[run.name][-1].numbers))
    lines = []
    for group, members in groups.items():
        keys = list(members[0][1])
        for run, numbers in members:
            lines.append([group, run.name, *(fmt(numbers[k]) for k in keys)])
        if len(members) > 1:
            summaries: tuple[tuple[str, Callable[[list[Estimate]], float]], ...] = (
                ("mean", lambda e: float(np.mean([x.value for x in e]))),
                ("sd over runs", lambda e: float(np.std([x.value for x in e], ddof=1))),
                ("seed sd beyond sampling", seed_sd),
            )
            for name, fn in summaries:
                cells = []
                for k in keys:
                    estimates = [n[k] for _, n in members if math.isfinite(n[k].value) and math.isfinite(n[k].se)]
                    cells.append(f"{fn(estimates):.3g}" if len(estimates) == len(members) else "n/a")
                lines.append([group, f"**{name}** ({len(members)} runs)", *cells])
    if not lines:
        return ""
    headers = ["group", "run (last point)", *keys]
    return "## Spread over training seeds\n\n" + tabulate(
        lines, headers=headers, tablefmt="github", disable_numparse=True
    )


def draw(curves: Curves, points: Mapping[str, Sequence[RunRecord | Point]], path: Path) -> None:
    import matplotlib.pyplot as plt

    from calbench.leaderboard.plots import save

    candidates = [
        ("calibration_score", "calibration score (quick, 42 prompts)"),
        ("arithmetic exact_flexible", "arithmetic exact_flexible"),
        *((f"{label} score", f"calibration score: {label}") for label in SPLIT_LABELS.values()),
    ]
    pts = as_points(points)
    present = {k for run in pts.values() for point in run for k in point.numbers}
    metrics = [(k, label) for k, label in candidates if k in present]
    fig, axes = plt.subplots(1, len(metrics), figsize=(max(11, 3.6 * len(metrics)), 4), squeeze=False)
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
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Learning curves: 95% intervals", fontsize=10)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def ends(
    curves: Curves,
    points: Mapping[str, Sequence[RunRecord | Point]],
    references: Sequence[RunRecord | Scored] = (),
) -> str:
    """The prompt-set protocol's comparison: each run at its last point, beside reference systems'
    records (their sampling evaluations: the same numbers); "" for another protocol."""
    evaluations = (*curves.protocol, *curves.final)
    if not any(SPLIT_TASKS[s] in e.tasks for e in evaluations for s in ("train", "interp", "wide")):
        return ""
    keys = [f"{label} {what}" for label in SPLIT_LABELS.values() for what in ("score", "rho")]
    lines = []
    pts = as_points(points)
    for run in curves.runs:
        if run.name in pts:
            last = pts[run.name][-1]
            step = f"{last.curve['step']} ({last.curve['examples']:,} examples)"
            lines.append([run.label, step, *(fmt(last.numbers.get(k, UNDEFINED)) for k in keys)])
    for reference in scored_records(references):
        cells = []
        for split in SPLIT_LABELS:
            for value in (reference.split_score(split), reference.split_following(split)):
                cells.append(value if isinstance(value, str) else fmt(value))
        lines.append([f"{reference.name} (reference)", "n/a", *cells])
    headers = ["run", "last point", *keys]
    return "## At the end of training, beside the references\n\n" + tabulate(
        lines, headers=headers, tablefmt="github", disable_numparse=True
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
        " (`calbench.leaderboard.numbers.split_score`, `split_following`)."
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
            if any(p.curve.get("train_loss") is not None for run in points.values() for p in run)
            else ""
        )
        + f"\n\n![learning curves]({plot})\n\n"
        + "\n\n".join(
            part for part in (ends(curves, points, references), spread(curves, points), table(curves, points)) if part
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


def with_results_dir(curves: Curves, results_dir: Path) -> Curves:
    return replace(curves, results_dir=results_dir)


__all__ = ["Curves", "RecipeError", "load", "run_curves", "write"]
