"""Learning curves, run: each run of a curve recipe trained, then its checkpoints scored.

``run_curves`` trains each run in ``<workdir>/<run>/train`` (``--keep-checkpoints 0``: every
checkpoint kept; an interrupted run resumes), then scores the base model (step 0; not with
``score_base: false``) and every checkpoint with the recipe's protocol (or, with ``score_every:
N``, every N-th checkpoint and the last one): each point is a row of its own
(``calbench.leaderboard.run.rows``, finished points skipped), stored in
``<results>/curves/<run>/step-<N>.json`` with its step, examples seen, wall time and tokens
(without per-item scores or per-family metrics: ``light``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from calbench.leaderboard import WORKDIR
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages.numbers import Scored
from calbench.leaderboard.recipes.curves import CurveRun, Curves
from calbench.leaderboard.recipes.loader import Recipe
from calbench.leaderboard.records import store
from calbench.leaderboard.records.record_types import RunRecord
from calbench.leaderboard.run.commands import not_trained_as, run_calbench, say
from calbench.leaderboard.run.commands import train as train_run
from calbench.leaderboard.run.rows import run_row
from calbench.provenance import write_json
from calbench.stats import Estimate
from calbench.task_names import EXACT_TASKS, LIKELIHOOD_TASKS, SAMPLING_TASKS
from calbench.train_record import (
    ADAPTER,
    CHECKPOINT_FILE,
    INTERPOLATED,
    TRAIN_RECORD,
    complete_checkpoints,
    logged_loss,
    trainer_log,
)


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


def point_row(curves: Curves, run: CurveRun, step: int, adapter: Path | None, last: bool = False) -> Recipe:
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
        if run.interpolate is not None:
            written += _interpolated(curves, run, workdir)
            continue
        done = (train_folder / ADAPTER / TRAIN_RECORD).is_file()
        if not train and not done and not complete_checkpoints(train_folder):
            say(f"{run.name}: no complete checkpoint in {train_folder} yet: nothing scored")
            continue
        if train and not done:
            train_run(run.name, run.model, run.train, train_folder, "--keep-checkpoints", "0")
        summary_file = train_folder / ADAPTER / TRAIN_RECORD
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
        if summary is not None:
            check_trained_as(run, train_folder / ADAPTER)
        every = run.score_every or curves.score_every
        points = to_score(complete_checkpoints(train_folder), every, summary is not None, curves.score_base)
        if summary is not None:
            drop_stale_points(curves, run, {step for step, _ in points})
        for step, adapter in points:
            recipe = point_row(curves, run, step, adapter, last=summary is not None and step == int(summary["steps"]))
            if step == 0:
                _share_base(curves, run)
            path = run_row(recipe, workdir / run.name / "points")
            record = portable(light(store.load_record(path)), workdir, run.name)
            marker = json.loads((adapter / CHECKPOINT_FILE).read_text()) if adapter else {}
            cost = summary or {"steps": step, **marker}  # the run's averages, or so far
            examples = step * int(run.train["effective_batch"])
            history = summary["loss_history"] if summary else trainer_log(adapter)
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
                **({"distribution": summary["distribution"]} if summary and summary.get("distribution") else {}),
            }
            written.append(store.save_record(record, curves.folder(run.name)))
    return written


def _interpolated(curves: Curves, run: CurveRun, workdir: Path) -> list[Path]:
    """A WiSE-FT run (``CurveRun.interpolate``): its source run's final weights interpolated toward the
    base model (``calbench interpolate``, once), scored as one point at the source's last step with the
    recipe's final protocol."""
    assert run.interpolate is not None
    source, alpha = run.interpolate
    tuned = workdir / source / "train" / ADAPTER
    if not (tuned / TRAIN_RECORD).is_file():
        say(f"{run.name}: {source} has not finished training: nothing interpolated yet")
        return []
    model = workdir / run.name / "train" / ADAPTER
    if not (model / INTERPOLATED).is_file():
        args = [
            "interpolate",
            "--base",
            run.model,
            "--tuned",
            str(tuned),
            "--alpha",
            str(alpha),
            "--output",
            str(model),
        ]
        say(f"{run.name}: calbench {' '.join(args)}")
        if run_calbench(args).returncode != 0:
            raise RefusedRunError(f"{run.name}: calbench interpolate failed (its output is above)")
    summary = json.loads((model / TRAIN_RECORD).read_text())
    step = int(summary["steps"])
    path = run_row(point_row(curves, run, step, model, last=True), workdir / run.name / "points")
    record = portable(light(store.load_record(path)), workdir)
    record["curve"] = {
        "train_loss": logged_loss(summary["loss_history"], step),
        "run": run.name,
        "label": run.label,
        "step": step,
        "examples": int(summary["examples"]),
        "train": dict(run.train),
        "interpolate": {"run": source, "alpha": alpha},
        "wall_seconds": float(summary.get("wall_seconds", 0.0)),
        "tokens_rank0": int(summary.get("tokens_seen_rank0", 0)),
        "seconds_per_step": round(float(summary.get("wall_seconds", 0.0)) / max(step, 1), 2),
        "tokens_per_step": round(float(summary.get("tokens_seen_rank0", 0)) / max(step, 1), 1),
        **({"distribution": summary["distribution"]} if summary.get("distribution") else {}),
    }
    return [store.save_record(record, curves.folder(run.name))]


def check_trained_as(run: CurveRun, adapter: Path) -> None:
    """A finished run was trained with the recipe's options (``calbench train --same-as``), or
    ``RefusedRunError``: a recipe changed after its run finished is neither scored as if it had
    been retrained nor retrained over the run folder (remove the folder to retrain)."""
    why = not_trained_as(run.model, run.train, adapter)
    if why is not None:
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
            say(f"{run.name}: removing the point at step {step}: not a checkpoint this run scores")
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


PATH_OPTIONS = ("--output_path", "--output")  # options whose value is a folder: the work folder itself may stand there


def portable(record: RunRecord, workdir: Path, run: str | None = None) -> RunRecord:
    """A point's checkpoint lies in the machine's ``workdir`` (``--workdir``, often outside the
    tree): the record names it ``<workdir>/...``, in its adapter, its recipe and its commands.

    Only paths are replaced: a path under the run's own folder ``<workdir>/<run>/`` (any run's
    when ``run`` is not given) where a path stands (a word's start, or after ``=`` or ``,``), and
    the work folder itself as the value of ``--output_path`` or ``--output``. A command word or a
    task named like the folder (``--workdir calbench``, ``eval``) stays, and so does a model
    that merely lies inside an absolute work folder (``pretrained=`` of ``/data/models/m`` with
    ``--workdir /data``)."""

    given = re.escape(str(Path(workdir).expanduser()))
    starts = r"(?:(?<=^)|(?<=[\s=,'\"]))"
    under = rf"(?=/{re.escape(run)}/)" if run is not None else r"(?=/)"
    option = "|".join(rf"(?<={re.escape(o)}[ =])" for o in PATH_OPTIONS)
    where = re.compile(rf"{starts}{given}{under}|(?:{option}){given}(?=$|[\s'\"])")

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


CHOICE = "calbench_choice.json"  # what ``choose`` wrote beside the checkpoint it copied
COPIED_FILES = (  # a checkpoint's model or adapter, its tokenizer and marker: not its optimizer's state
    *("model.safetensors", "adapter_model.safetensors", "adapter_config.json", "config.json"),
    *("generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"),
    *("special_tokens_map.json", CHECKPOINT_FILE),
)


def split_scores(records: Sequence[RunRecord], split: str) -> dict[int, Estimate]:
    """step -> the calibration score on ``split`` of each curve point that has one."""
    scores = {}
    for record in records:
        value = Scored(record).split_score(split)
        if not isinstance(value, str) and math.isfinite(value.value):
            scores[int(record["curve"]["step"])] = value
    return scores


def choose(curves: Curves, run_name: str, workdir: Path = WORKDIR, split: str = "validation") -> Path:
    """Copy a run's checkpoint with the best score on ``split`` (the validation families unless said;
    its stored points' scores, ties to the earlier step) out of its run folder into
    ``<workdir>/<run>/chosen``, with ``calbench_choice.json`` saying which and why: the weights
    to publish when the last step is not the best one, chosen without looking at the held-out
    families. ``RefusedRunError`` if the run has no scored point on ``split`` or no such checkpoint."""
    import shutil

    run = next((r for r in curves.runs if r.name == run_name), None)
    if run is None:
        raise RefusedRunError(
            f"{curves.path}: no run named {run_name!r} (runs: {', '.join(r.name for r in curves.runs)})"
        )
    folder = curves.folder(run.name)
    records = [store.load_record(path) for path in sorted(folder.glob("step-*.json"))] if folder.is_dir() else []
    scores = split_scores(records, split)
    if not scores:
        raise RefusedRunError(f"{run.name}: no stored point scored on {split} in {folder}: run its curve first")
    best = max(scores, key=lambda step: (scores[step].value, -step))
    found = dict(complete_checkpoints(workdir / run.name / "train"))
    source = found.get(best)
    if source is None and (workdir / run.name / "train" / ADAPTER / TRAIN_RECORD).is_file():
        summary = json.loads((workdir / run.name / "train" / ADAPTER / TRAIN_RECORD).read_text())
        source = workdir / run.name / "train" / ADAPTER if int(summary["steps"]) == best else None
    if source is None:
        raise RefusedRunError(
            f"{run.name}: step {best} scores best on {split}, but its checkpoint is gone from {workdir}"
        )
    out = workdir / run.name / "chosen"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name in COPIED_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
    write_json(
        out / CHOICE,
        {
            "run": run.name,
            "criterion": f"the highest calibration score on {split} (calbench.leaderboard.pages.numbers.Scored.split_score)",
            "step": best,
            "scores": {str(step): [round(e.value, 4), round(e.se, 4)] for step, e in sorted(scores.items())},
        },
    )
    say(f"{run.name}: step {best} chosen on {split} ({scores[best].value:.4g}); copied to {out}")
    return out
