"""``calbench leaderboard run RECIPE.yaml``: a row from its recipe, end to end.

For a row (``calbench.leaderboard.recipes.loader``):

1. **The adapter.** If the recipe names one that is not there, it is trained
   (``calbench train`` with the recipe's options, in ``<workdir>/<row>/train``: an
   interrupted training resumes) and copied into place. If it is there, the recipe must be
   what trained it: ``calbench train --same-as`` compares the options, defaults resolved,
   and a disagreement is refused. A full fine-tune's weights (``fine_tune:``) stay in
   ``<workdir>/<row>/train`` (trained there if missing, checked so if there) and are evaluated
   there; their card and training record, without the weights, are copied to the recipe's
   ``card`` folder, with a paragraph on rebuilding them and their SHA-256.
2. **The evaluations**, in the recipe's order. Each is one lm-eval run (``calbench eval``)
   in its own process, writing to ``<workdir>/<row>/<evaluation>/`` (lm-eval's folder named
   after the model's path is flattened away), or the adapter's drift (``calbench drift``).
   An evaluation is finished when the row's record holds it with the same hash (its
   settings and the system's, the adapter's weights included) or its folder holds a
   finished run of it: a rerun skips it. An interrupted evaluation starts again from the
   beginning, with the same seeds, so its numbers are those of an uninterrupted run
   (lm-eval's seeds are set once per run: a run resumed midway would sample differently).
3. **The record**: every evaluation's tasks (those run now from their output, the others
   from the record), the resolved recipe and its hash, saved; then the leaderboard is
   rendered.

A protocol matrix runs each of its systems so; a trade-off recipe is rendered from records.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from calbench import lm_eval_io, model_catalogue
from calbench.leaderboard import WORKDIR
from calbench.leaderboard.errors import RecipeError, RefusedRunError
from calbench.leaderboard.recipes.fields import Evaluation
from calbench.leaderboard.recipes.loader import Recipe
from calbench.leaderboard.records import store
from calbench.leaderboard.records.record_types import EvaluationPart, RunRecord
from calbench.leaderboard.run.commands import not_trained_as, run_calbench, say, train
from calbench.provenance import sha256_file, sha256_json, weights_hash, write_json
from calbench.train_record import ADAPTER, RUN_FILE, TRAIN_RECORD

MARKER = "calbench_evaluation.json"  # written when an evaluation has finished
ADAPTER_FILES_LEFT_OUT = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")  # the base model's
CARD_FILES = ("README.md", TRAIN_RECORD, "config.json", "generation_config.json")  # a full fine-tune's, committed
REBUILD = "## Weights"


# ---------------------------------------------------------------- the adapter


def ensure_adapter(recipe: Recipe, workdir: Path) -> None:
    """The recipe's adapter in place: trained if missing, checked against the recipe if there."""
    if recipe.adapter is None:
        return
    assert recipe.model is not None  # a recipe's adapter needs its model (recipes.load_row)
    folder = Path(recipe.adapter)
    present = (folder / "adapter_config.json").is_file()
    if present and recipe.train is not None:
        why = not_trained_as(recipe.model, recipe.train, folder)
        if why is not None:
            raise RefusedRunError(
                f"{folder} was not trained as {recipe.path} says ({why}): fix the recipe, or move the adapter away to retrain it"
            )
        return
    if present:
        return
    if recipe.train is None:
        raise RecipeError(f"{recipe.path}: no adapter at {folder}, and no adapter.train to make one")
    run = workdir / recipe.name / "train"
    train(recipe.name, recipe.model, recipe.train, run, what="training the adapter")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(run / ADAPTER, partial, ignore=shutil.ignore_patterns(*ADAPTER_FILES_LEFT_OUT))
    portable_output(partial / TRAIN_RECORD, recipe.name)
    partial.rename(folder)
    say(f"{recipe.name}: adapter written to {folder}")


def fine_tune_weights(recipe: Recipe, workdir: Path) -> Path:
    """A full fine-tune row's weights folder: its training run's final model in ``<workdir>/<row>/train``."""
    return workdir / recipe.name / "train" / ADAPTER


def ensure_fine_tune(recipe: Recipe, workdir: Path, may_train: bool = True) -> None:
    """A full fine-tune row's weights in the work folder, trained (or resumed) if the run has not
    finished, checked against the recipe if it has (every checkpoint kept, as a curve's run keeps
    them: curves and rows share run folders); then its card folder written if missing or if it
    names other weights or another training record. ``may_train`` False (``--no-train``): refuse
    instead of training."""
    if recipe.fine_tune is None:
        return
    assert recipe.model is not None and recipe.train is not None  # (recipes.load_row)
    run = workdir / recipe.name / "train"
    weights = fine_tune_weights(recipe, workdir)
    if "," in str(weights) or "=" in str(weights):
        raise RefusedRunError(f"{weights}: a work folder whose path has ',' or '=' cannot be passed as pretrained=")
    finished = (run / RUN_FILE).is_file() and json.loads((run / RUN_FILE).read_text()).get("finished") is True
    if finished and (weights / TRAIN_RECORD).is_file():
        why = not_trained_as(recipe.model, recipe.train, weights)
        if why is not None:
            raise RefusedRunError(
                f"{weights} was not trained as {recipe.path} says ({why}): fix the recipe, or use another --workdir"
            )
    elif finished:
        raise RefusedRunError(
            f"{run} holds a finished run without its weights ({weights} is gone): move the run folder away to retrain"
        )
    elif not may_train:
        raise RefusedRunError(f"{recipe.name}: its weights are not in {run} and --no-train forbids training them")
    else:
        what = "training the full fine-tune (its weights stay here)"
        train(recipe.name, recipe.model, recipe.train, run, "--keep-checkpoints", "0", what=what)
    if weights_hash(weights) is None:
        raise RefusedRunError(f"{recipe.name}: no weights in {weights} after training")
    card = Path(recipe.fine_tune)
    if not card_is_current(card, weights, recipe.name):
        write_fine_tune_card(recipe, weights, card)


def card_is_current(card: Path, weights: Path, row: str) -> bool:
    """Whether a fine-tune's card folder names these weights' hash and holds their training record."""
    try:
        text = (card / "README.md").read_text()
        summary = json.loads((card / TRAIN_RECORD).read_text())
        trained = portable_summary(weights / TRAIN_RECORD, row)
    except (OSError, ValueError):
        return False
    return f"`{weights_hash(weights)}`" in text.split(REBUILD, 1)[-1] and summary == trained


def write_fine_tune_card(recipe: Recipe, weights: Path, card: Path) -> None:
    """Copy a full fine-tune's card and training record (not its weights) to ``card``, the card
    ending with how to rebuild the weights and their SHA-256 (``provenance.weights_hash``)."""
    partial = card.with_name(card.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in CARD_FILES:
        if (weights / name).is_file():
            shutil.copy2(weights / name, partial / name)
    portable_output(partial / TRAIN_RECORD, recipe.name)
    files = sorted(weights.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files) / 2**20
    listed = "\n".join(f"- `{f.name}`: SHA-256 `{sha256_file(f)}`" for f in files)
    text = (
        (partial / "README.md").read_text().rstrip("\n").replace("<this folder>", f"DIR/{recipe.name}/train/{ADAPTER}")
    )
    text += (
        f"\n\n{REBUILD}\n\nNot in this folder ({size:,.0f} MiB of safetensors): "
        f"`{recipe.command} --workdir DIR` trains them in `DIR/{recipe.name}/train` (an interrupted "
        f"training resumes), writes them to `DIR/{recipe.name}/train/{ADAPTER}` (the folder to load: "
        "`pretrained=` on hf or vLLM) and evaluates them there. The published weights:\n\n"
        f"{listed}\n\nand their hash as the row's record names it (`model.weights_sha256`, "
        f"`calbench.provenance.weights_hash`): `{weights_hash(weights)}`. Rebuilt weights that hash "
        "otherwise (another machine's floating-point order) are evaluated afresh, and the record then "
        "names their hash.\n"
    )
    (partial / "README.md").write_text(text)
    shutil.rmtree(card, ignore_errors=True)
    partial.rename(card)
    say(f"{recipe.name}: the fine-tune's card and training record written to {card} (its weights stay in {weights})")


def portable_summary(summary: Path, row: str) -> dict[str, Any]:
    """A training record as published: its run folder named ``<workdir>/<row>/train``, as the
    records name evaluations' folders (the folder it trained in is this machine's)."""
    data = json.loads(summary.read_text())
    data["config"]["output"] = f"<workdir>/{row}/train"
    return dict(data)


def portable_output(summary: Path, row: str) -> None:
    """Rewrite a published adapter's (or fine-tune's) training record as ``portable_summary``."""
    summary.write_text(json.dumps(portable_summary(summary, row), indent=2))


# ---------------------------------------------------------------- one evaluation


def system_spec(recipe: Recipe) -> dict[str, Any]:
    """What an evaluation's numbers depend on besides its own settings: the system."""
    return {
        "backend": recipe.backend,
        "model": recipe.model,
        "model_args": dict(recipe.model_args),
        "adapter": recipe.adapter,
        "adapter_sha256": weights_hash(recipe.adapter) if recipe.adapter else None,
    }


def evaluation_hash(recipe: Recipe, evaluation: Evaluation) -> str:
    return sha256_json({"system": system_spec(recipe), "evaluation": evaluation.spec()}, 16)


def eval_arguments(recipe: Recipe, evaluation: Evaluation, out: Path) -> list[str]:
    """``calbench eval``'s arguments for one evaluation, writing under ``out``."""
    args = ["--model", recipe.backend]
    if recipe.model is not None:
        pairs = {"pretrained": model_folder(recipe, out.parent.parent), **recipe.model_args}
        if recipe.adapter:
            pairs["peft"] = recipe.adapter
        args += ["--model_args", ",".join(f"{k}={v}" for k, v in pairs.items())]
    if evaluation.chat_template:
        args.append("--apply_chat_template")
    if evaluation.samples_per_prompt is not None:
        args += ["--num-samples", str(evaluation.samples_per_prompt)]
    args += ["--tasks", ",".join(evaluation.tasks)]
    if evaluation.metadata:
        args += ["--metadata", json.dumps(dict(evaluation.metadata))]
    return [*args, "--output_path", str(out)]


def model_folder(recipe: Recipe, workdir: Path) -> str:
    """What ``pretrained=`` names: a full fine-tune's weights in the work folder, else the row's model
    (a catalogue name resolved to its folder)."""
    assert recipe.model is not None
    if recipe.fine_tune is not None:
        return str(fine_tune_weights(recipe, workdir))
    return model_catalogue.resolve(recipe.model)


def _portable(args: Sequence[str], recipe: Recipe, workdir: Path) -> str:
    """An evaluation's command as the record shows it: the model's folder as its catalogue lookup,
    a full fine-tune's as ``<workdir>/<row>/train/adapter``."""
    text = shlex.join(["calbench", "eval", *args])
    if recipe.fine_tune is not None:
        text = text.replace(str(fine_tune_weights(recipe, workdir)), f"<workdir>/{recipe.name}/train/{ADAPTER}")
    if recipe.model in model_catalogue.CATALOGUE:
        text = text.replace(model_catalogue.resolve(recipe.model), f"$(calbench models path {recipe.model})")
    return text


def _flatten(out: Path) -> Path:
    """lm-eval writes into ``out/<the model's path, sanitized>/``: move its files up into ``out``."""
    found = lm_eval_io.latest_results(out)
    if found is None:
        raise RefusedRunError(f"{out}: the evaluation wrote no results file")
    if found.parent != out:
        for f in list(found.parent.iterdir()):
            f.replace(out / f.name)
        found.parent.rmdir()
    return out / found.name


def finished_output(out: Path, key: str, weights: str | None = None) -> dict[str, Any] | None:
    """The marker of a finished run of this evaluation in ``out`` (None: not finished, or other
    settings, or another model's weights than ``weights``, the model folder's hash now)."""
    try:
        marker = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("recipe_sha256") != key:
        return None
    return marker if weights is None or marker.get("weights_sha256") == weights else None


def model_weights(recipe: Recipe, workdir: Path) -> str | None:
    """The hash of the recipe's model folder's weights now (None for a reference or a hub id): an
    evaluation is finished only for the weights that made it, not for the folder's path."""
    if recipe.model is None:
        return None
    return weights_hash(model_folder(recipe, workdir))


def run_evaluation(
    recipe: Recipe, evaluation: Evaluation, out: Path, key: str, weights: str | None = None
) -> dict[str, Any]:
    """Run one evaluation into ``out`` (emptied first) and mark it finished."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.time()
    if evaluation.kind == "drift":
        assert recipe.model is not None and recipe.adapter is not None
        base = model_catalogue.resolve(recipe.model)
        args = ["drift", "--model", base, "--adapter", recipe.adapter, "--output", str(out / "drift.json")]
        shown = _portable(args, recipe, out.parent.parent).replace("calbench eval drift", "calbench drift")
        say(f"{recipe.name}: {evaluation.name}: {shown}")
        done = run_calbench(args)
        result = "drift.json"
    else:
        args = eval_arguments(recipe, evaluation, out)
        shown = _portable(args, recipe, out.parent.parent)
        say(f"{recipe.name}: {evaluation.name}: {shown}")
        done = run_calbench(["eval", *args])
        result = ""
    if done.returncode != 0:
        raise RefusedRunError(
            f"{recipe.name}: evaluation {evaluation.name} failed (exit {done.returncode}); rerun to retry it"
        )
    if not result:
        result = _flatten(out).name
    marker = {
        "evaluation": evaluation.name,
        "recipe_sha256": key,
        "command": shown.replace(str(out), f"<workdir>/{recipe.name}/{evaluation.name}"),
        "seconds": round(time.time() - started, 1),
        "result": result,
        "weights_sha256": weights,
    }
    write_json(out / MARKER, marker)
    return marker


def part_of_output(recipe: Recipe, evaluation: Evaluation, out: Path, marker: Mapping[str, Any]) -> EvaluationPart:
    """An evaluation's part of the record, from its finished output."""
    meta = {k: marker[k] for k in ("recipe_sha256", "command", "seconds")}
    if evaluation.kind == "drift":
        drift = store.adapter_drift(out / str(marker["result"]), recipe.adapter)
        return cast(EvaluationPart, {**meta, "tasks": {}, "drift": drift})
    part = store.evaluation_part(out / str(marker["result"]), evaluation.name)
    return cast(EvaluationPart, {**part, **meta})


def part_of_record(record: RunRecord, name: str) -> EvaluationPart:
    """An evaluation's part, taken back out of a stored record."""
    meta = {k: v for k, v in record["evaluations"][name].items() if k != "tasks"}
    part = cast(EvaluationPart, meta)
    part["tasks"] = {t: e for t, e in record["tasks"].items() if e["evaluation"] == name}
    if part["tasks"]:
        part["model"] = {**record["model"]}
    elif "drift" in record:
        part["drift"] = {**record["drift"]}
    return part


# ---------------------------------------------------------------- a row


def recipe_of_command(command: str) -> Path | None:
    """The recipe a record's command ran (``calbench leaderboard run PATH [# ...]``), or None."""
    try:
        words = shlex.split(command.split("#", 1)[0])
    except ValueError:
        return None
    return Path(words[3]) if words[:3] == ["calbench", "leaderboard", "run"] and len(words) > 3 else None


def owner_of(recipe: Recipe, results_dir: Path) -> str:
    """The recipe file that makes a record, as a path from the record's folder (``recipe_file``):
    relative, so a repository's own store names its recipes wherever it is cloned; from a store
    outside it (a shared ``--results-dir``) the path runs into the repository that made it, so
    another repository's recipe at the same place in its tree is not the owner."""
    return Path(os.path.relpath(Path(recipe.path).resolve(), Path(results_dir).resolve())).as_posix()


def check_same_recipe(recipe: Recipe, stored: RunRecord, results_dir: Path) -> None:
    """Refuse to replace a record that another recipe (or ``leaderboard add``) made, or that holds
    evaluations the recipe no longer has (their tasks would leave the record unsaid). A record names
    its recipe's file from its own folder (``owner_of``); one written before it did is this recipe's
    only if its command names this recipe and the store lies inside the current folder (the
    repository root a run works from), where that command's relative path means this file."""
    path = results_dir / (recipe.name + ".json")
    owner = stored.get("recipe_file")
    if owner is not None:
        mine = (Path(results_dir).resolve() / owner).resolve() == Path(recipe.path).resolve()
        why = f"the recipe {owner} (from {results_dir})"
    else:
        theirs = recipe_of_command(str(stored.get("command", "")))
        here = Path(results_dir).resolve().is_relative_to(Path.cwd().resolve())
        mine = theirs is not None and here and theirs.resolve() == Path(recipe.path).resolve()
        why = repr(stored.get("command")) + ("" if here else f", in a store outside {Path.cwd()}")
    if not mine:
        raise RefusedRunError(
            f"{path} was made by {why}, not by {recipe.path}: pass --replace to replace it, or rename the recipe"
        )
    dropped = sorted(set(stored["evaluations"]) - {e.name for e in recipe.evaluations})
    if dropped:
        raise RefusedRunError(
            f"{recipe.name}: the stored record has evaluations {dropped} that {recipe.path} no longer has: "
            "pass --replace to drop them from the record"
        )


def existing_record(recipe: Recipe, results_dir: Path) -> RunRecord | None:
    if not (results_dir / f"{recipe.name}.json").is_file():
        return None
    return store.named_records(results_dir, [recipe.name])[0]


def run_row(
    recipe: Recipe,
    workdir: Path = WORKDIR,
    results_dir: Path | None = None,
    only: Sequence[str] | None = None,
    rerun: bool = False,
    replace: bool = False,
    may_train: bool = True,
) -> Path:
    """Train what is missing, run what is not finished, and save the row's record (module docstring).
    A stored record of the same name is replaced only if this recipe made it and it holds no
    evaluation the recipe has dropped, or with ``replace``; ``may_train`` False refuses to train a
    full fine-tune's missing weights."""
    results_dir = Path(results_dir or recipe.results_dir)
    for name in only or ():
        recipe.evaluation(name)  # an unknown name is refused before anything runs
    stored = existing_record(recipe, results_dir)
    if stored is not None and not replace:
        check_same_recipe(recipe, stored, results_dir)
    ensure_adapter(recipe, workdir)
    ensure_fine_tune(recipe, workdir, may_train)
    weights = model_weights(recipe, workdir)
    if stored is not None and weights is not None and stored["model"].get("weights_sha256") not in (None, weights):
        say(
            f"{recipe.name}: the model's weights changed ({stored['model']['weights_sha256']} in the record, "
            f"{weights} now): every evaluation runs again"
        )
        stored = None
    parts: dict[str, EvaluationPart] = {}
    new_numbers = stored is None  # an evaluation run now, or an output the record does not hold yet
    chosen = [e for e in recipe.evaluations if not only or e.name in only]
    for i, evaluation in enumerate(recipe.evaluations, 1):
        key = evaluation_hash(recipe, evaluation)
        out = workdir / recipe.name / evaluation.name
        previous = stored["evaluations"].get(evaluation.name) if stored is not None else None
        in_record = previous is not None and previous.get("recipe_sha256") == key
        marker = finished_output(out, key, weights)
        step = f"{recipe.name}: evaluation {i}/{len(recipe.evaluations)} {evaluation.name!r}"
        if evaluation in chosen and (rerun or (not in_record and marker is None)):
            marker = run_evaluation(recipe, evaluation, out, key, weights)
            parts[evaluation.name] = part_of_output(recipe, evaluation, out, marker)
            new_numbers = True
        elif marker is not None:
            say(f"{step}: finished in {out}")
            parts[evaluation.name] = part_of_output(recipe, evaluation, out, marker)
            new_numbers = new_numbers or not in_record
        elif in_record:
            assert stored is not None
            say(f"{step}: finished (in the record)")
            parts[evaluation.name] = part_of_record(stored, evaluation.name)
        else:
            say(f"{step}: not run (left out by --only)")
    drift = next((p["drift"] for p in parts.values() if "drift" in p), None)
    record = store.assemble_record(recipe.name, recipe.type, recipe.command, parts, drift, recipe.resolved())
    record["recipe_file"] = owner_of(recipe, results_dir)
    if not new_numbers and stored is not None:  # the same numbers: the commit and packages that made them stay
        record["calbench_commit"], record["packages"] = stored.get("calbench_commit"), stored["packages"]
    path = store.save_record(record, results_dir)
    say(f"{recipe.name}: record {path}")
    return path
