"""The results store's checks: which runs it accepts, and what a stored record must look like.

A run is accepted only at pure T=1 sampling (greedy for the greedy tasks), over every prompt
(no ``--limit``, no ``--samples``), and on stock hf or vLLM only with a model whose
``generation_config.json`` changes nothing the tasks did not override (``calbench.policy``).
A record is validated field by field on every save and load; each refusal names the field
(``calbench.leaderboard.records.record_types`` names the shape it checks).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calbench.families import ALL_FAMILIES, FAMILIES
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.records.record_types import TaskEntry
from calbench.lm_eval_io import args_dict, model_args
from calbench.metrics.catalog import find
from calbench.policy import GREEDY_TASKS, PURE_SAMPLING, active_generation_config, decoding_deviations
from calbench.task_names import EXACT_TASKS, LIKELIHOOD_TASKS, NUMERIC_SPLITS, SAMPLING_TASKS

ENTRY_TYPES = (
    "reference",
    "base",
    "instruct",
    "fine-tuned adapter",
    "fine-tuned",
    "prompting method",
)  # fine-tuned: every weight
SCHEMA = 2  # 2: evaluations, per-task evaluation names, stored per-item scores, the recipe


def _generation_settings(results: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(task, generation settings) of each generating task: its YAML's, with ``--gen_kwargs`` over them."""
    override = args_dict(results.get("config", {}).get("gen_kwargs"))
    return [
        (task, {**task_config.get("generation_kwargs", {}), **override})
        for task, task_config in results.get("configs", {}).items()
        if task_config.get("output_type") == "generate_until"
    ]


def check_run(results: Mapping[str, Any], source: str = "run") -> None:
    """Refuse runs that are not comparable: ``--limit`` or ``--samples``, or sampling other than pure T=1."""
    config = results.get("config", {})
    if config.get("limit") not in (None, 0):
        raise RefusedRunError(f"{source}: run with --limit {config['limit']}; leaderboard runs score every prompt")
    for task, counts in results.get("n-samples", {}).items():
        if isinstance(counts, dict) and counts.get("effective") != counts.get("original"):
            raise RefusedRunError(
                f"{source}: task {task} scored {counts.get('effective')} of its {counts.get('original')} prompts "
                "(--samples or --limit); leaderboard runs score every prompt"
            )
    for task, gen in _generation_settings(results):
        repeats = results.get("configs", {}).get(task, {}).get("repeats") or 1
        if gen.get("seed") is not None and isinstance(repeats, int) and repeats > 1:
            raise RefusedRunError(
                f"{source}: task {task} sends its {repeats} repeats of a prompt with one per-request seed "
                f"(seed={gen['seed']}): a seeded engine (vLLM) returns {repeats} identical samples, not {repeats} draws; "
                "drop the seed from the generation settings (lm-eval's --seed seeds the run)"
            )
        wrong = decoding_deviations(task, gen)
        if wrong and task in GREEDY_TASKS:
            raise RefusedRunError(
                f"{source}: task {task} did not decode greedily ({', '.join(wrong)}); the leaderboard needs do_sample=False"
            )
        if wrong:
            pure = ", ".join(f"{k}={v}" for k, v in PURE_SAMPLING.items())
            raise RefusedRunError(
                f"{source}: task {task} did not sample at pure T=1 ({', '.join(wrong)}); the leaderboard needs {pure}"
            )


GENERATION_CONFIG_BACKENDS = ("hf", "vllm")  # they apply a model's generation_config.json to sampling
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name: taken for a hub id when no such folder is here


def check_generation_config(results: Mapping[str, Any], source: str = "run") -> None:
    """Refuse a run on stock hf or vLLM whose model's ``generation_config.json`` changes sampling
    (a repetition penalty, top-k, ...) in a way the tasks' settings did not override.

    ``calbench-hf`` samples pure T=1 with its own sampler, which reads no generation config.
    """
    backend = results.get("config", {}).get("model")
    pretrained = model_args(results).get("pretrained")
    if backend not in GENERATION_CONFIG_BACKENDS or not pretrained:
        return
    path = _generation_config_file(str(pretrained), model_args(results).get("revision"))
    if path is None and not Path(str(pretrained)).exists() and not HUB_ID.fullmatch(str(pretrained)):
        raise RefusedRunError(
            f"{source}: the model {pretrained} cannot be found from {Path.cwd()}, so its generation_config.json "
            "cannot be checked: add the run from the folder it was started in (or with the model's absolute path)"
        )
    if path is None:
        return  # a folder without one, or a hub model not in this machine's cache: nothing here to check against
    try:
        generation_config = json.loads(path.read_text())
    except ValueError as err:
        raise RefusedRunError(f"{source}: unreadable {path} ({err})") from err
    for task, gen in _generation_settings(results):
        active = active_generation_config(generation_config, gen)
        if task in GREEDY_TASKS:  # temperature, top_p, top_k: nothing without sampling
            active = [a for a in active if a.split("=", 1)[0] not in PURE_SAMPLING]
        if active:
            raise RefusedRunError(
                f"{source}: task {task} on {backend}: the model's {path} sets {', '.join(active)}, which "
                f"{backend} applies to sampling and the task did not override; run it on calbench-hf, or "
                "override them with --gen_kwargs to their neutral values"
            )


def _generation_config_file(pretrained: str, revision: str | None) -> Path | None:
    """The model's generation_config.json: in its folder, or for a hub id in the local hub cache."""
    local = Path(pretrained) / "generation_config.json"
    if local.is_file():
        return local
    if Path(pretrained).exists():
        return None  # a folder without one: transformers' defaults, which the tasks override
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(pretrained, "generation_config.json", revision=revision)
    except (ImportError, ValueError):  # not a hub id
        return None
    return Path(cached) if isinstance(cached, str) else None


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_name(name: object) -> str:
    """A record name is a name: it becomes a file name and a table row, never a path."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise RefusedRunError(
            f"record name {name!r}: use letters, digits and . _ + - (at most 100, starting with a letter or digit)"
        )
    return name


def _problem(field: str, why: str) -> RefusedRunError:
    return RefusedRunError(f"{field}: {why}")


def _check_pair(field: str, pair: Any, calbench_task: bool = True) -> None:
    if not (isinstance(pair, list) and len(pair) == 2):
        raise _problem(field, f"must be [value, standard error], got {pair!r}")
    for part, x in zip(("value", "standard error"), pair, strict=True):
        if x is not None and (isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x)):
            raise _problem(field, f"the {part} must be a finite number or null, got {x!r}")
    value, se = pair
    if se is not None and se < 0:
        raise _problem(field, f"a standard error cannot be negative ({se})")
    metric = find(field.rsplit(".", 1)[-1])
    if metric is None:
        if calbench_task:
            raise _problem(field, "not a metric calbench reports (calbench.metrics.catalog)")
        return  # an lm-eval task's own metric: no range known
    if value is not None and not metric.allows(value):
        raise _problem(field, f"{metric.name} lies in {metric.range}, got {value}")


def validate_record(record: Any, source: str = "record") -> None:
    """Refuse a record whose fields have the wrong types or impossible values, naming the field."""
    try:
        if not isinstance(record, dict):
            raise _problem("record", "must be a JSON object")
        if record.get("schema") != SCHEMA:
            raise _problem("schema", f"unknown record schema {record.get('schema')!r}")
        check_name(record.get("name"))
        if record.get("type") not in ENTRY_TYPES:
            raise _problem("type", f"{record.get('type')!r} is not one of {', '.join(ENTRY_TYPES)}")
        if not isinstance(record.get("command"), str):
            raise _problem("command", f"must be a string, got {record.get('command')!r}")
        evaluations = record.get("evaluations")
        if not isinstance(evaluations, dict) or not evaluations:
            raise _problem("evaluations", "must be an object with at least one evaluation")
        for name, evaluation in evaluations.items():
            if not isinstance(evaluation, dict) or not isinstance(evaluation.get("tasks"), list):
                raise _problem(f"evaluations.{name}", "must be an object with its list of tasks")
        tasks = record.get("tasks")
        if not isinstance(tasks, dict) or not tasks:
            raise _problem("tasks", "must be an object with at least one task")
        for task, entry in tasks.items():
            _validate_task(f"tasks.{task}", task, entry)
            if entry.get("evaluation") not in evaluations or task not in evaluations[entry["evaluation"]]["tasks"]:
                raise _problem(
                    f"tasks.{task}.evaluation", f"{entry.get('evaluation')!r} is not an evaluation that ran it"
                )
        recipe = record.get("recipe")
        if recipe is not None and not (isinstance(recipe, dict) and isinstance(record.get("recipe_sha256"), str)):
            raise _problem("recipe", "must be an object, with its recipe_sha256")
        rescored = record.get("rescored", {})
        if not (isinstance(rescored, dict) and all(isinstance(v, str | type(None)) for v in rescored.values())):
            raise _problem("rescored", "must be an object of metric: commit")
        owner = record.get("recipe_file")
        if owner is not None and not (isinstance(owner, str) and owner.endswith((".yaml", ".yml"))):
            raise _problem("recipe_file", f"must be the path of a recipe file, got {owner!r}")
        model = record.get("model", {})
        if not isinstance(model, dict) or any(v is not None and not isinstance(v, str) for v in model.values()):
            raise _problem("model", "must be an object of strings (or null)")
        drift = record.get("drift")
        if drift is not None:
            if not isinstance(drift, dict):
                raise _problem("drift", "must be an object")
            if drift.get("drift_kl") is None:
                raise _problem("drift.drift_kl", "missing: a drift is a KL")
            _check_pair("drift.drift_kl", [drift.get("drift_kl"), drift.get("drift_kl_se")])
    except RefusedRunError as err:
        raise RefusedRunError(f"{source}: {err}") from None


def _validate_task(field: str, task: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise _problem(field, "must be an object")
    for key in ("samples", "items"):
        if key in entry and not (isinstance(entry[key], list) and all(isinstance(x, dict) for x in entry[key])):
            raise _problem(f"{field}.{key}", "must be a list of objects")
    for key in ("version", "samples_per_prompt", "prompts"):
        value = entry.get(key)
        whole = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
        if value is not None and not (whole and value >= 0):
            raise _problem(f"{field}.{key}", f"must be a whole number, got {value!r}")
    overall = entry.get("overall")
    if not isinstance(overall, dict):
        raise _problem(f"{field}.overall", "must be an object of metrics")
    ours = task.startswith("calbench_")  # lm-eval's own tasks' metrics are theirs
    for metric, pair in overall.items():
        _check_pair(f"{field}.overall.{metric}", pair, ours)
    families = entry.get("families")
    if families is None:
        if task in (*SAMPLING_TASKS.values(), *LIKELIHOOD_TASKS.values(), *EXACT_TASKS.values()):
            raise _problem(f"{field}.families", "missing: a numeric task reports every family")
        return
    if not isinstance(families, dict):
        raise _problem(f"{field}.families", "must be an object of families")
    for split in NUMERIC_SPLITS:
        if task in (SAMPLING_TASKS[split], LIKELIHOOD_TASKS[split], EXACT_TASKS[split]):
            expected = {f for f, fam in FAMILIES.items() if fam.eval_split == split}
            if set(families) != expected:
                missing, extra = sorted(expected - set(families)), sorted(set(families) - expected)
                raise _problem(f"{field}.families", f"missing {missing}, unexpected {extra}")
    for family, metrics in families.items():
        if family not in ALL_FAMILIES or not isinstance(metrics, dict):
            raise _problem(f"{field}.families.{family}", "not a calbench family with an object of metrics")
        for metric, pair in metrics.items():
            _check_pair(f"{field}.families.{family}.{metric}", pair, ours)


def _whole(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer() and value >= 0


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def validate_stored(source: str, kind: str, values: list[Any], entry: TaskEntry, one_per_request: bool = False) -> None:
    """Refuse stored samples or per-item scores (``samples/<name>.json``) that a run cannot have
    produced: per prompt, a calbench family and its target, a whole number of responses and at
    most that many valid answers, each a finite number (with one sample per request, as many
    responses as the record's ``samples_per_prompt``); per item, finite scores within their
    metric's range; one entry per scored document."""
    prompts = entry.get("prompts")
    header = entry.get("samples_per_prompt") if one_per_request and kind == "samples" else None
    if prompts is not None and len(values) != prompts:
        raise RefusedRunError(f"{source}: {len(values)} {kind} stored, the task scored {prompts} documents")
    for n, value in enumerate(values, 1):
        where = f"{source}: {kind}[{n}]"
        if not isinstance(value, dict):
            raise RefusedRunError(f"{where}: must be an object")
        if kind == "samples":
            family, target, count, answers = (value.get(k) for k in ("family", "target", "n", "values"))
            if family not in ALL_FAMILIES or not (isinstance(target, str) and target.startswith(f"{family}(")):
                raise RefusedRunError(f"{where}: family {family!r} and target {target!r} are not a calbench law")
            if not _whole(count) or count is None:
                raise RefusedRunError(f"{where}.n: must be a whole number, got {count!r}")
            if header is not None and count != header:
                raise RefusedRunError(f"{where}.n: {count} responses, the record says {header} samples per prompt")
            if not isinstance(answers, list) or len(answers) > float(count) or not all(map(_finite, answers)):
                raise RefusedRunError(f"{where}.values: must be at most n={count} finite numbers")
        else:
            scores = value.get("scores")
            if not isinstance(scores, dict):
                raise RefusedRunError(f"{where}.scores: must be an object of metrics")
            for metric, score in scores.items():
                known = find(metric)
                if score is not None and not (_finite(score) and (known is None or known.allows(score))):
                    raise RefusedRunError(f"{where}.scores.{metric}: {score!r} is not a possible value")
