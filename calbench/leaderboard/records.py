"""The results store: run records checked, built, saved and loaded, with their provenance.

A **run record** (one JSON file per system under ``leaderboards/results/``) gathers the
lm-eval results of one system (a model, optionally an adapter, on one backend) over
calbench's tasks, with everything needed to trust and reproduce it: model revision or
weight hash, adapter hash, backend, task versions, generation settings, seeds, calbench
commit, package versions, the exact command, and the metrics with standard errors. Runs
that are not pure T=1 sampling (``calbench.policy``), or that used ``--limit``, are refused.
The sampled values of the numeric sampling tasks (any protocol) are kept beside each record
(the scores and plots are computed from them).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from calbench import protocols, results_tables
from calbench.families import FAMILIES, make_target
from calbench.leaderboard.numbers import (
    EXACT_TASKS,
    LIKELIHOOD_TASKS,
    NUMERIC_SPLITS,
    SAMPLING_TASKS,
    sampling_protocol,
)
from calbench.parse import classify
from calbench.policy import GREEDY_TASKS, PURE_SAMPLING, active_generation_config, decoding_deviations
from calbench.stats import Estimate

ENTRY_TYPES = ("reference", "base", "instruct", "fine-tuned adapter", "prompting method")
SCHEMA = 1
PACKAGES = ("calbench", "lm_eval", "transformers", "torch", "peft", "numpy", "scipy")


class RefusedRunError(ValueError):
    """A run the leaderboard does not accept (not pure T=1 sampling, ``--limit``, bad input)."""


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (``lm_eval`` and ``lm-eval`` alike); missing ones left out.

    The one version reader of run records and adapter cards.
    """
    out = {}
    for name in names:
        try:
            out[name] = importlib_metadata.version(name.replace("_", "-"))
        except importlib_metadata.PackageNotFoundError:
            continue
    return out


# ---------------------------------------------------------------- run records


def _generation_settings(results: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(task, generation settings) of each generating task: its YAML's, with ``--gen_kwargs`` over them."""
    override = results_tables.args_dict(results.get("config", {}).get("gen_kwargs"))
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


def check_generation_config(results: Mapping[str, Any], source: str = "run") -> None:
    """Refuse a run on stock hf or vLLM whose model's ``generation_config.json`` changes sampling
    (a repetition penalty, top-k, ...) in a way the tasks' settings did not override.

    ``calbench-hf`` samples pure T=1 with its own sampler, which reads no generation config.
    """
    backend = results.get("config", {}).get("model")
    pretrained = results_tables.model_args(results).get("pretrained")
    if backend not in GENERATION_CONFIG_BACKENDS or not pretrained:
        return
    path = _generation_config_file(str(pretrained), results_tables.model_args(results).get("revision"))
    if path is None:
        return  # a hub model not in this machine's cache: nothing here to check against
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


def _sha256(path: Path, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:limit]


def _weights_hash(folder: str | None) -> str | None:
    """SHA-256 (16 hex) of a local model or adapter folder's weight files; None for hub ids."""
    if not folder or not Path(folder).is_dir():
        return None
    files = sorted(Path(folder).glob("*.safetensors")) or sorted(Path(folder).glob("*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + _sha256(f).encode())
    return digest.hexdigest()[:16]


def _calbench_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def _estimates(e: Mapping[str, Estimate]) -> dict[str, list[float | None]]:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {k: [num(v.value), num(v.se)] for k, v in e.items()}


def _task_metrics(task_results: Mapping[str, Any], task: str) -> dict[str, Any]:
    overall = _estimates(results_tables.overall_metrics(task_results))
    if task.startswith("calbench_numeric"):
        _, families = results_tables.read_task(task_results, results_tables.metrics_of(task_results))
        return {"overall": overall, "families": {f: _estimates(e) for f, e in families.items()}}
    return {"overall": overall}


STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(\.\d+)?$")


def samples_log(results_file: Path, task: str) -> Path:
    """The samples log lm-eval wrote with ``results_file`` (same run: the same timestamp in its name)."""
    # lm-eval names both files after the run's start, results_<stamp>.json (or <name>_<stamp>.json
    # for --output_path <name>.json) and samples_<task>_<stamp>.jsonl.
    found_stamp = STAMP.search(results_file.stem)
    stamp = found_stamp.group(0) if found_stamp else results_file.stem.removeprefix("results_")
    log = results_file.parent / f"samples_{task}_{stamp}.jsonl"
    if not log.is_file():
        others = sorted(p.name for p in results_file.parent.glob(f"samples_{task}_*.jsonl"))
        found = f" (only other runs' logs: {', '.join(others)})" if others else ""
        raise RefusedRunError(
            f"{results_file}: no samples log {log.name} of this run{found}: it was deleted, or the run had no --log_samples"
        )
    return log


def prompt_values(
    samples: Iterable[Mapping[str, Any]], where: str = "samples", protocol: str = "independent"
) -> list[dict[str, Any]]:
    """Valid parsed answers per prompt, in order, of a numeric sampling task's logged samples
    (lm-eval's per-sample records: a log's lines, or a run's ``results["samples"][task]``);
    under a sampling protocol, the samples its responses yield (``protocols.samples_of``)."""
    prompts = []
    for n, sample in enumerate(samples, 1):
        try:
            doc = sample["doc"]
            target = make_target(doc["family"], json.loads(doc["params"]))
            groups = sample["resps"] if protocol != "independent" else sample["resps"][:1]
            responses = [r for group in groups for r in group]  # a seeded prompt: one group per seed
            if not all(isinstance(group, list) for group in groups) or not all(isinstance(r, str) for r in responses):
                raise TypeError("resps is not a list of lists of strings")
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise RefusedRunError(f"{where}:{n}: not a calbench sample record ({err})") from err
        if protocol != "independent":
            responses = protocols.samples_of(protocol, responses, target)[0]
        answers = [classify(text, target) for text in responses]
        prompts.append(
            {
                "family": doc["family"],
                "target": doc["target"],
                "n": len(answers),
                "values": [float(f"{a.value:.6g}") for a in answers if a.valid and a.value is not None],
            }
        )
    if not prompts:
        raise RefusedRunError(f"{where}: the samples log is empty")
    return prompts


def file_prompt_values(samples_file: Path, protocol: str = "independent") -> list[dict[str, Any]]:
    """``prompt_values`` of a samples log file."""

    def lines() -> Iterator[dict[str, Any]]:
        with samples_file.open() as f:
            for n, line in enumerate(f, 1):
                try:
                    yield json.loads(line)
                except ValueError as err:
                    raise RefusedRunError(
                        f"{samples_file}:{n}: not a calbench sample record (not JSON: {err})"
                    ) from err

    return prompt_values(lines(), str(samples_file), protocol)


def build_record(
    name: str,
    entry_type: str,
    results_files: Sequence[Path],
    command: str,
    drift: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One system's run record from its lm-eval ``results_*.json`` files (several runs merge)."""
    check_name(name)
    if entry_type not in ENTRY_TYPES:
        raise RefusedRunError(f"entry type {entry_type!r} is not one of {', '.join(ENTRY_TYPES)}")
    if not results_files:
        raise RefusedRunError(f"{name}: no results files given")
    record: dict[str, Any] = {"schema": SCHEMA, "name": name, "type": entry_type, "command": command, "tasks": {}}
    systems = set()
    for path in results_files:
        try:
            results = results_tables.load(path)
        except (OSError, ValueError) as err:
            raise RefusedRunError(f"{path}: not a readable lm-eval results file ({err})") from err
        check_run(results, str(path))
        check_generation_config(results, str(path))
        config, args = results.get("config", {}), results_tables.model_args(results)
        pretrained = args.get("pretrained")
        adapter = args.get("peft") or args.get("lora_local_path")
        system = (config.get("model"), pretrained and Path(str(pretrained)).name, adapter)
        systems.add(system)
        if len(systems) > 1:
            raise RefusedRunError(f"{name}: the results files come from different systems: {sorted(map(str, systems))}")
        record["model"] = {
            "backend": config.get("model"),
            "pretrained": Path(str(pretrained)).name if pretrained and Path(str(pretrained)).is_dir() else pretrained,
            "revision": args.get("revision") or config.get("model_revision"),
            "weights_sha256": _weights_hash(pretrained),
            "adapter": Path(str(adapter)).as_posix() if adapter else None,
            "adapter_sha256": _weights_hash(adapter),
            "dtype": args.get("dtype"),
            "chat_template_sha256": results.get("chat_template_sha"),
        }
        record["seeds"] = {k: config.get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")}
        for task, task_results in results["results"].items():
            if task in record["tasks"]:
                raise RefusedRunError(
                    f"{name}: task {task} is in two of the results files (again in {path}): pass one run per task"
                )
            task_config = results.get("configs", {}).get(task, {})
            entry = {
                "version": results.get("versions", {}).get(task),
                "samples_per_prompt": task_config.get("repeats"),
                "generation": task_config.get("generation_kwargs"),
                "prompts": results.get("n-samples", {}).get(task, {}).get("effective"),
                **_task_metrics(task_results, task),
            }
            protocol = sampling_protocol(task)
            if protocol is not None:
                entry["samples"] = file_prompt_values(samples_log(Path(path), task), protocol)
            record["tasks"][task] = entry
    if drift is not None:
        record["drift"] = dict(drift)
    record["calbench_commit"] = _calbench_commit()
    record["packages"] = package_versions()
    validate_record(record, name)
    return record


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: never half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def save_record(record: Mapping[str, Any], folder: Path) -> Path:
    """``<folder>/<name>.json`` (readable) and the sampled values in ``<folder>/samples/<name>.json``."""
    check_name(record["name"])
    head = copy.deepcopy(dict(record))
    samples = {t: e.pop("samples") for t, e in head["tasks"].items() if "samples" in e}
    path = folder / f"{record['name']}.json"
    if samples:
        atomic_write(folder / "samples" / path.name, json.dumps(samples, sort_keys=True, separators=(",", ":")) + "\n")
    atomic_write(path, json.dumps(head, indent=1, sort_keys=True) + "\n")
    return path


def load_records(folder: Path) -> list[dict[str, Any]]:
    """Every run record of a results folder, each validated (``validate_record``), in file-name order."""
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except ValueError as err:
            raise RefusedRunError(f"{path}: not JSON ({err})") from err
        validate_record(record, str(path))
        if record["name"] != path.stem:
            raise RefusedRunError(f"{path}: name: {record['name']!r} is not the file's name {path.stem!r}")
        samples = path.parent / "samples" / path.name
        if samples.is_file():
            try:
                stored = json.loads(samples.read_text())
            except ValueError as err:
                raise RefusedRunError(f"{samples}: not JSON ({err})") from err
            for task, values in stored.items():
                if task not in record["tasks"] or not isinstance(values, list):
                    raise RefusedRunError(f"{samples}: {task}: no such task in the record, or not a list")
                record["tasks"][task]["samples"] = values
        records.append(record)
    return records


def named_records(folder: Path, names: Sequence[str]) -> list[dict[str, Any]]:
    """The run records ``names`` of a results folder, in that order; refused if one is missing."""
    by_name = {r["name"]: r for r in load_records(folder)}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise RefusedRunError(f"no run record named {', '.join(missing)} in {folder}")
    return [by_name[n] for n in names]


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_name(name: object) -> str:
    """A record name is a name: it becomes a file name and a table row, never a path."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise RefusedRunError(
            f"record name {name!r}: use letters, digits and . _ + - (at most 100, starting with a letter or digit)"
        )
    return name


# Ranges of stored values: shares in [0, 1]; distances, sizes and divergences at least 0.
SHARES = ("valid_rate", "support_violation_rate", "gof_pass_rate", "ks_at_n", "parse_rate", "parse_rate_lenient",
          "top_answer_share", "freq_A", "freq_B", "freq_C", "freq_D", "canonical_mass", "exact_strict",
          "exact_flexible", "strict_acc", "loose_acc", "acc", "valid_mass", "support_violation_mass",
          "invalid_mass", "residual_mass")  # fmt: skip
NON_NEGATIVE = ("w1", "w1_iqr", "pit_w1", "pit_ks", "exact_w1", "exact_w1_iqr", "logit_kl", "tv_distance",
                "tv_distance_lenient",
                "unique_answers", "answer_entropy", "distinct_lite", "chi2", "enum_w1", "enum_w1_iqr",
                "enum_w1_iqr_bound", "enum_pit_w1")  # fmt: skip
SLACK = 1e-9  # rounding: an exact KL of -1e-17, a mass of 1 + 1e-12


def _problem(field: str, why: str) -> RefusedRunError:
    return RefusedRunError(f"{field}: {why}")


def _check_pair(field: str, pair: Any) -> None:
    if not (isinstance(pair, list) and len(pair) == 2):
        raise _problem(field, f"must be [value, standard error], got {pair!r}")
    for part, x in zip(("value", "standard error"), pair, strict=True):
        if x is not None and (isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x)):
            raise _problem(field, f"the {part} must be a finite number or null, got {x!r}")
    value, se = pair
    if se is not None and se < 0:
        raise _problem(field, f"a standard error cannot be negative ({se})")
    metric = field.rsplit(".", 1)[-1].removesuffix("_median")
    if value is None:
        return
    if metric in SHARES and not -SLACK <= value <= 1 + SLACK:
        raise _problem(field, f"a share must lie in [0, 1], got {value}")
    if (metric in NON_NEGATIVE or (metric.startswith("support_") and metric != "support_violation_rate")) and (
        value < -SLACK
    ):
        raise _problem(field, f"must be at least 0, got {value}")


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
        tasks = record.get("tasks")
        if not isinstance(tasks, dict) or not tasks:
            raise _problem("tasks", "must be an object with at least one task")
        for task, entry in tasks.items():
            _validate_task(f"tasks.{task}", task, entry)
        model = record.get("model", {})
        if not isinstance(model, dict) or any(v is not None and not isinstance(v, str) for v in model.values()):
            raise _problem("model", "must be an object of strings (or null)")
        drift = record.get("drift")
        if drift is not None:
            if not isinstance(drift, dict):
                raise _problem("drift", "must be an object")
            _check_pair("drift.drift_kl", [drift.get("drift_kl"), drift.get("drift_kl_se")])
            if drift.get("drift_kl") is None or drift["drift_kl"] < -1e-6:  # float32 logits: -1e-8 happens
                raise _problem("drift.drift_kl", f"must be a KL (at least 0), got {drift.get('drift_kl')!r}")
    except RefusedRunError as err:
        raise RefusedRunError(f"{source}: {err}") from None


def _validate_task(field: str, task: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise _problem(field, "must be an object")
    for key in ("version", "samples_per_prompt", "prompts"):
        value = entry.get(key)
        whole = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
        if value is not None and not (whole and value >= 0):
            raise _problem(f"{field}.{key}", f"must be a whole number, got {value!r}")
    overall = entry.get("overall")
    if not isinstance(overall, dict):
        raise _problem(f"{field}.overall", "must be an object of metrics")
    for metric, pair in overall.items():
        _check_pair(f"{field}.overall.{metric}", pair)
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
        if family not in FAMILIES or not isinstance(metrics, dict):
            raise _problem(f"{field}.families.{family}", "not a calbench family with an object of metrics")
        for metric, pair in metrics.items():
            _check_pair(f"{field}.families.{family}.{metric}", pair)


def adapter_drift(drift_file: Path, adapter: str | Path | None) -> dict[str, Any]:
    """The drift of ``adapter`` in a ``calbench drift --output`` file (adapters compared as paths)."""
    runs = json.loads(Path(drift_file).read_text())["drift"]
    matches = [v for k, v in runs.items() if Path(k).resolve() == Path(adapter or "").resolve()]
    if not matches:
        raise RefusedRunError(f"{drift_file} has no drift for adapter {adapter}")
    return dict(matches[0])


def add_record(
    name: str,
    entry_type: str,
    results_files: Sequence[Path],
    command: str,
    results_dir: Path,
    drift_file: Path | None = None,
    adapter: str | Path | None = None,
) -> Path:
    """Build one system's record (with its adapter's drift, if given) and save it under ``results_dir``."""
    drift = adapter_drift(drift_file, adapter) if drift_file else None
    return save_record(build_record(name, entry_type, results_files, command, drift), results_dir)
