"""The results store: run records built from lm-eval's output, saved, and loaded.

A **run record** (one JSON file per system under ``leaderboards/results/``) gathers the
lm-eval results of one system (a model, optionally an adapter, on one backend) over
calbench's tasks, with everything needed to trust and reproduce it: model revision or
weight hash, adapter hash, backend, task versions and lm-eval's task hashes, generation
settings, seeds, calbench commit, package versions, the command (with ``calbench leaderboard
run``, the resolved recipe and its hash), and the metrics with standard errors. Each task
names the evaluation (one lm-eval run) it came from. Runs the store does not accept are
refused (``calbench.leaderboard.records.checks``).

What the analyses need beyond the metrics is kept beside each record, in
``samples/<name>.json``: the valid answers of every numeric sampling task (any protocol),
from which the scores and plots are computed (``calbench.metrics.prompt_scores``), and the
per-item scores of every other task that logged its samples (the retention suite's and
NoveltyBench's items, each sample-free prompt's record), from which ``calbench
retention-delta`` and the trade-off pair items. lm-eval's raw output is not needed after.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from calbench import api_support, lm_eval_io, protocols
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.records.checks import (
    ENTRY_TYPES,
    SCHEMA,
    check_generation_config,
    check_name,
    check_run,
    validate_record,
    validate_stored,
)
from calbench.leaderboard.records.record_types import (
    Drift,
    EvaluationEntry,
    EvaluationPart,
    ModelPart,
    Pair,
    RunRecord,
    StoredItem,
    StoredPrompt,
    TaskEntry,
)
from calbench.provenance import (
    LinkedPathError,
    atomic_write,
    calbench_commit,
    check_no_links,
    exclusive_lock,
    package_versions,
    sha256_json,
    weights_hash,
)
from calbench.stats import Estimate


def _estimates(e: Mapping[str, Estimate]) -> dict[str, Pair]:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {k: [num(v.value), num(v.se)] for k, v in e.items()}


def _families(task_results: Mapping[str, Any], task: str) -> dict[str, dict[str, Pair]] | None:
    """A calbench numeric task's per-family metrics (None for the other tasks)."""
    if not task.startswith("calbench_numeric"):
        return None
    _, families = lm_eval_io.read_task(task_results, lm_eval_io.metrics_of(task_results))
    return {f: _estimates(e) for f, e in families.items()}


def model_part(results: Mapping[str, Any]) -> ModelPart:
    """The system a run evaluated: backend, model and adapter (``peft=`` on hf, ``lora_local_path=``
    on vLLM) with their weights' hashes, dtype and chat template."""
    config, args = results.get("config", {}), lm_eval_io.model_args(results)
    pretrained = args.get("pretrained")
    adapter = args.get("peft") or args.get("lora_local_path")
    part: ModelPart = {}
    if api_support.is_api_run(config.get("model"), args):  # a model behind an API: the endpoint's name for it
        part = {"endpoint_model": _text(args.get("model") or pretrained), "endpoint": _text(args.get("base_url"))}
    return {
        **part,
        "backend": config.get("model"),
        "pretrained": Path(str(pretrained)).name if pretrained and Path(str(pretrained)).is_dir() else pretrained,
        "revision": args.get("revision") or config.get("model_revision"),
        "weights_sha256": weights_hash(pretrained),
        "adapter": Path(str(adapter)).as_posix() if adapter else None,
        "adapter_sha256": weights_hash(adapter),
        "dtype": args.get("dtype"),
        "chat_template_sha256": results.get("chat_template_sha"),
    }


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def evaluation_part(results_file: Path, evaluation: str) -> EvaluationPart:
    """One evaluation (one lm-eval run) of a record: its system, seeds, task hashes and tasks."""
    results = lm_eval_io.load_results(results_file)
    check_run(results, str(results_file))
    check_generation_config(results, str(results_file))
    config = results.get("config", {})
    model = model_part(results)
    tasks: dict[str, TaskEntry] = {}
    for task, task_results in results["results"].items():
        task_config = results.get("configs", {}).get(task, {})
        entry: TaskEntry = {
            "evaluation": evaluation,
            "version": results.get("versions", {}).get(task),
            "samples_per_prompt": task_config.get("repeats"),
            "generation": task_config.get("generation_kwargs"),
            "prompts": results.get("n-samples", {}).get(task, {}).get("effective"),
            "overall": _estimates(lm_eval_io.overall_metrics(task_results)),
        }
        families = _families(task_results, task)
        if families is not None:
            entry["families"] = families
        api = (task_config.get("metadata") or {}).get(api_support.METADATA_PLAN)
        if isinstance(api, dict):  # on an API backend: the parameters sent and withheld, the seed per sample
            entry["api"] = api
        protocol = protocols.sampling_protocol(task)
        try:
            if protocol is not None:
                entry["samples"] = cast(
                    list[StoredPrompt],
                    lm_eval_io.prompt_values(lm_eval_io.task_samples(results_file, task, results), task, protocol),
                )
            elif task in results.get("configs", {}) and _log_if_any(results_file, task) is not None:  # a task
                logged = lm_eval_io.task_samples(results_file, task, results)
                entry["items"] = cast(list[StoredItem], lm_eval_io.item_scores(logged, list(entry["overall"])))
        except ValueError as err:  # a missing or malformed samples log
            raise RefusedRunError(str(err)) from err
        tasks[task] = entry
    return {
        "model": model,
        "seeds": {k: config.get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")},
        "task_hashes": dict(results.get("task_hashes", {})),
        "tasks": tasks,
    }


def _log_if_any(results_file: Path, task: str) -> Path | None:
    try:
        return lm_eval_io.samples_log(results_file, task)
    except lm_eval_io.LmEvalOutputError:
        return None  # run without --log_samples: no per-item scores for this task


def _system(model: ModelPart) -> tuple[str | None, ...]:
    """A system is its backend, its model and adapter, and their weights: two folders of one name
    with other weights are two systems."""
    keys = ("backend", "pretrained", "weights_sha256", "adapter", "adapter_sha256")
    return tuple(model.get(k) for k in keys)  # type: ignore[misc]  # (TypedDict.get of a variable key)


def assemble_record(
    name: str,
    entry_type: str,
    command: str,
    parts: Mapping[str, EvaluationPart],
    drift: Drift | None = None,
    recipe: Mapping[str, Any] | None = None,
) -> RunRecord:
    """One system's record from its evaluations (``evaluation_part``s by evaluation name)."""
    check_name(name)
    if entry_type not in ENTRY_TYPES:
        raise RefusedRunError(f"entry type {entry_type!r} is not one of {', '.join(ENTRY_TYPES)}")
    models = [part["model"] for part in parts.values() if "model" in part]  # lm-eval runs (not the drift)
    if not models:
        raise RefusedRunError(f"{name}: no lm-eval evaluation given")
    systems = {_system(model) for model in models}
    if len(systems) > 1:
        raise RefusedRunError(f"{name}: the evaluations come from different systems: {sorted(map(str, systems))}")
    record: RunRecord = {
        "schema": SCHEMA,
        "name": name,
        "type": entry_type,
        "command": command,
        "model": ModelPart(**models[0]),
        "evaluations": {},
        "tasks": {},
    }
    if recipe is not None:
        record["recipe"] = dict(recipe)
        record["recipe_sha256"] = recipe_hash(recipe)
    for evaluation, part in parts.items():
        for task, entry in part["tasks"].items():
            if task in record["tasks"]:
                raise RefusedRunError(
                    f"{name}: task {task} is in two evaluations ({record['tasks'][task]['evaluation']} and "
                    f"{evaluation}): pass one run per task"
                )
            record["tasks"][task] = {**entry, "evaluation": evaluation}
        meta = {k: v for k, v in part.items() if k not in ("model", "tasks", "drift")}
        record["evaluations"][evaluation] = cast(EvaluationEntry, {**meta, "tasks": list(part["tasks"])})
    if drift is not None:
        record["drift"] = {**drift}
    record["calbench_commit"] = calbench_commit()
    record["packages"] = package_versions()
    validate_record(record, name)
    return record


def recipe_hash(recipe: Mapping[str, Any]) -> str:
    return sha256_json(recipe, 16)


def build_record(
    name: str,
    entry_type: str,
    results_files: Sequence[Path],
    command: str,
    drift: Drift | None = None,
) -> RunRecord:
    """One system's run record from its lm-eval ``results_*.json`` files (each one evaluation,
    named ``run-1``, ``run-2``, ... in the order given)."""
    check_name(name)  # before any file is read: a name is never a path
    if entry_type not in ENTRY_TYPES:
        raise RefusedRunError(f"entry type {entry_type!r} is not one of {', '.join(ENTRY_TYPES)}")
    if not results_files:
        raise RefusedRunError(f"{name}: no results files given")
    try:
        parts = {f"run-{i}": evaluation_part(Path(p), f"run-{i}") for i, p in enumerate(results_files, 1)}
    except lm_eval_io.LmEvalOutputError as err:
        raise RefusedRunError(str(err)) from err
    return assemble_record(name, entry_type, command, parts, drift)


STORED = ("samples", "items")  # what a task entry keeps beside the record, in samples/<name>.json


STORE_LOCK = ".calbench_store.lock"


@contextlib.contextmanager
def store_lock(folder: Path) -> Iterator[None]:
    """One writer at a time in a results folder (an exclusive lock, waited for; the kernel drops
    it if its holder dies): a record and its samples file are always written together."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(exclusive_lock(folder / STORE_LOCK, wait=True))
        except OSError as err:
            raise RefusedRunError(f"{folder}: cannot lock the results folder ({err.strerror})") from err
        yield


def save_record(record: RunRecord, folder: Path, replace: bool = True) -> Path:
    """``<folder>/<name>.json`` (readable) and what it stores beside it (valid answers, per-item
    scores) in ``<folder>/samples/<name>.json``, whose SHA-256 the record keeps. Under the
    store's lock, never through a symbolic link inside ``folder``; an existing record of the same
    name is replaced only with ``replace``."""
    check_name(record["name"])
    validate_record(record, record["name"])
    head: dict[str, Any] = copy.deepcopy(dict(record))  # the record's file: what is not stored beside it
    samples = {t: e.pop(k) for t, e in head["tasks"].items() for k in STORED if k in e}
    path = folder / f"{record['name']}.json"
    text = json.dumps(samples, sort_keys=True, separators=(",", ":")) + "\n" if samples else None
    head.pop("samples_sha256", None)
    if text is not None:
        head["samples_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    try:
        with store_lock(folder):
            if not replace and (path.exists() or path.is_symlink()):
                raise RefusedRunError(f"{path} exists: pass --replace to replace the record {record['name']!r}")
            if text is not None:
                atomic_write(folder / "samples" / path.name, text, no_links=folder)
            else:
                check_no_links(folder / "samples" / path.name, folder)
                (folder / "samples" / path.name).unlink(missing_ok=True)  # no stale samples beside a new record
            atomic_write(path, json.dumps(head, indent=1, sort_keys=True) + "\n", no_links=folder)
    except LinkedPathError as err:
        raise RefusedRunError(str(err)) from err
    return path


def load_record(path: Path) -> RunRecord:
    """One run record file with what it stores beside it, validated (``validate_record``)."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except ValueError as err:
        raise RefusedRunError(f"{path}: not JSON ({err})") from err
    validate_record(record, str(path))
    if record["name"] != path.stem:
        raise RefusedRunError(f"{path}: name: {record['name']!r} is not the file's name {path.stem!r}")
    if record.get("recipe") is not None and record.get("recipe_sha256") != recipe_hash(record["recipe"]):
        raise RefusedRunError(f"{path}: recipe: not the recipe its recipe_sha256 names (edited?)")
    samples = path.parent / "samples" / path.name
    digest = record.pop("samples_sha256", None)
    if digest is not None and not samples.is_file():
        raise RefusedRunError(f"{path}: its samples file {samples} is missing")
    if samples.is_file():
        text = samples.read_text()
        if digest is not None and hashlib.sha256(text.encode()).hexdigest() != digest:
            raise RefusedRunError(f"{samples}: not the file saved with {path.name} (SHA-256 differs: edited?)")
        try:
            stored = json.loads(text)
        except ValueError as err:
            raise RefusedRunError(f"{samples}: not JSON ({err})") from err
        if not isinstance(stored, dict):
            raise RefusedRunError(f"{samples}: not an object of tasks")
        for task, values in stored.items():
            if task not in record["tasks"] or not isinstance(values, list):
                raise RefusedRunError(f"{samples}: {task}: no such task in the record, or not a list")
            protocol = protocols.sampling_protocol(task)
            kind = "samples" if protocol is not None else "items"
            one_per_response = protocol is not None and protocols.PROTOCOLS[protocol].items == 1
            validate_stored(f"{samples}: {task}", kind, values, record["tasks"][task], one_per_response)
            record["tasks"][task][kind] = values
    return cast(RunRecord, record)  # validated: a run record


def is_record_file(path: Path) -> bool:
    """Whether a JSON file looks like a run record (not an lm-eval results file)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "schema" in data and "results" not in data


def remove_record(folder: Path, name: str) -> None:
    """Delete the record ``name`` and its stored answers, under the store's lock (never through a link)."""
    path = Path(folder) / f"{check_name(name)}.json"
    with store_lock(Path(folder)):
        check_no_links(path, Path(folder))
        check_no_links(Path(folder) / "samples" / path.name, Path(folder))
        path.unlink(missing_ok=True)
        (Path(folder) / "samples" / path.name).unlink(missing_ok=True)


def load_records(folder: Path) -> list[RunRecord]:
    """Every run record of a results folder, each validated (``validate_record``), in file-name order."""
    return [load_record(path) for path in sorted(Path(folder).glob("*.json"))]


NUMBERS = ("overall", "families", "samples", "items", "version", "samples_per_prompt", "generation", "prompts")


def differences(a: RunRecord, b: RunRecord) -> list[str]:
    """Where two records' numbers differ (``task: field``; the drift; the system's weights), for
    checking that a recipe reproduced a row: what they were measured from, not when or where."""
    out = []
    for task in sorted(set(a["tasks"]) | set(b["tasks"])):
        if task not in a["tasks"] or task not in b["tasks"]:
            out.append(f"{task}: only in {a['name'] if task in a['tasks'] else b['name']}")
            continue
        x, y = a["tasks"][task], b["tasks"][task]
        # per-item scores stored by one only (a run whose samples logs were not kept) are not a difference
        keys = [k for k in NUMBERS if k != "items" or ("items" in x and "items" in y)]
        out += [f"{task}: {key}" for key in keys if x.get(key) != y.get(key)]
    if a.get("drift") != b.get("drift"):
        out.append("drift")
    out += [
        f"model: {k}" for k in ("weights_sha256", "adapter_sha256", "backend") if a["model"].get(k) != b["model"].get(k)
    ]
    return out


def agreement(a: RunRecord, b: RunRecord) -> list[tuple[str, str, float]]:
    """How far two records' overall metrics are apart, task by task, for two runs that need not
    draw the same samples (another CPU's float kernels): ``(task:metric, "z", |Δ| / sqrt(se_a² +
    se_b²))`` where both have a standard error, else ``(task:metric, "relative", |Δ| / |a|)``;
    the largest first."""
    out = []
    for task in sorted(set(a["tasks"]) & set(b["tasks"])):
        x, y = a["tasks"][task]["overall"], b["tasks"][task]["overall"]
        for metric in sorted(set(x) & set(y)):
            (va, sa), (vb, sb) = x[metric], y[metric]
            if va is None or vb is None or va == vb:
                continue
            if sa and sb:
                out.append((f"{task}:{metric}", "z", abs(va - vb) / math.hypot(sa, sb)))
            else:
                out.append((f"{task}:{metric}", "relative", abs(va - vb) / max(abs(va), 1e-300)))
    return sorted(out, key=lambda t: -t[2])


def named_records(folder: Path, names: Sequence[str]) -> list[RunRecord]:
    """The run records ``names`` of a results folder (``<name>.json``), in that order; refused if one
    is missing. Only these are read: another file of the store that is not a record (or not one
    any more) does not stop a run of these."""
    missing = [n for n in names if not (Path(folder) / f"{check_name(n)}.json").is_file()]
    if missing:
        raise RefusedRunError(f"no run record named {', '.join(missing)} in {folder}")
    out = []
    for n in names:
        record = load_record(Path(folder) / f"{n}.json")
        if record["name"] != n:
            raise RefusedRunError(f"{Path(folder) / f'{n}.json'}: holds the record {record['name']!r}, not {n!r}")
        out.append(record)
    return out


def adapter_drift(drift_file: Path, adapter: str | Path | None) -> Drift:
    """The drift of ``adapter`` in a ``calbench drift --output`` file (adapters compared as paths)."""
    runs = json.loads(Path(drift_file).read_text())["drift"]
    matches = [v for k, v in runs.items() if Path(k).resolve() == Path(adapter or "").resolve()]
    if not matches:
        raise RefusedRunError(f"{drift_file} has no drift for adapter {adapter}")
    return cast(Drift, dict(matches[0]))


def add_record(
    name: str,
    entry_type: str,
    results_files: Sequence[Path],
    command: str,
    results_dir: Path,
    drift_file: Path | None = None,
    adapter: str | Path | None = None,
    replace: bool = False,
) -> Path:
    """Build one system's record (with its adapter's drift, if given) and save it under
    ``results_dir``; an existing record of that name is replaced only with ``replace``."""
    drift = adapter_drift(drift_file, adapter) if drift_file else None
    return save_record(build_record(name, entry_type, results_files, command, drift), results_dir, replace)
