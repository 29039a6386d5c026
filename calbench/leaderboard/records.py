"""The results store: run records checked, built, saved and loaded, with their provenance.

A **run record** (one JSON file per system under ``leaderboards/results/``) gathers the
lm-eval results of one system (a model, optionally an adapter, on one backend) over
calbench's tasks, with everything needed to trust and reproduce it: model revision or
weight hash, adapter hash, backend, task versions, generation settings, seeds, calbench
commit, package versions, the exact command, and the metrics with standard errors. Runs
that are not pure T=1 sampling (``calbench.policy``), or that used ``--limit``, are refused.
The sampled values of the numeric sampling tasks are kept beside each record (for plots).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from calbench import results_tables
from calbench.families import make_target
from calbench.leaderboard.score import SAMPLING_TASKS
from calbench.parse import classify
from calbench.policy import PURE_SAMPLING, sampling_deviations
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


def check_run(results: Mapping[str, Any], source: str = "run") -> None:
    """Refuse runs that are not comparable: ``--limit``, or sampling other than pure T=1."""
    config = results.get("config", {})
    if config.get("limit") not in (None, 0):
        raise RefusedRunError(f"{source}: run with --limit {config['limit']}; leaderboard runs score every prompt")
    override = config.get("gen_kwargs") or {}
    if isinstance(override, str):
        from lm_eval.utils import simple_parse_args_string

        override = simple_parse_args_string(override)
    for task, task_config in results.get("configs", {}).items():
        if task_config.get("output_type") != "generate_until":
            continue
        gen = {**task_config.get("generation_kwargs", {}), **override}
        wrong = sampling_deviations(gen)
        if wrong:
            pure = ", ".join(f"{k}={v}" for k, v in PURE_SAMPLING.items())
            raise RefusedRunError(
                f"{source}: task {task} did not sample at pure T=1 ({', '.join(wrong)}); the leaderboard needs {pure}"
            )


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


def _model_args(results: Mapping[str, Any]) -> dict[str, Any]:
    args = results.get("config", {}).get("model_args") or {}
    if isinstance(args, str):
        from lm_eval.utils import simple_parse_args_string

        args = simple_parse_args_string(args)
    return dict(args)


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


def _sample_values(samples_file: Path) -> list[dict[str, Any]]:
    """Valid parsed answers per prompt of a numeric sampling task's samples log (for plots)."""
    prompts = []
    with samples_file.open() as f:
        for line in f:
            sample = json.loads(line)
            doc = sample["doc"]
            target = make_target(doc["family"], json.loads(doc["params"]))
            answers = [classify(text, target) for text in sample["resps"][0]]
            prompts.append(
                {
                    "family": doc["family"],
                    "target": doc["target"],
                    "n": len(answers),
                    "values": [float(f"{a.value:.6g}") for a in answers if a.valid and a.value is not None],
                }
            )
    return prompts


def build_record(
    name: str,
    entry_type: str,
    results_files: Sequence[Path],
    command: str,
    drift: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One system's run record from its lm-eval ``results_*.json`` files (several runs merge)."""
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
        config, args = results.get("config", {}), _model_args(results)
        pretrained = args.get("pretrained")
        adapter = args.get("peft") or args.get("lora_local_path")
        system = (config.get("model"), pretrained and Path(str(pretrained)).name, adapter)
        systems.add(system)
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
            task_config = results.get("configs", {}).get(task, {})
            entry = {
                "version": results.get("versions", {}).get(task),
                "samples_per_prompt": task_config.get("repeats"),
                "generation": task_config.get("generation_kwargs"),
                "prompts": results.get("n-samples", {}).get(task, {}).get("effective"),
                **_task_metrics(task_results, task),
            }
            if task in SAMPLING_TASKS.values():
                logs = sorted(Path(path).parent.glob(f"samples_{task}_*.jsonl"))
                if logs:
                    entry["samples"] = _sample_values(logs[-1])
            record["tasks"][task] = entry
    if len(systems) > 1:
        raise RefusedRunError(f"{name}: the results files come from different systems: {sorted(map(str, systems))}")
    if drift is not None:
        record["drift"] = dict(drift)
    record["calbench_commit"] = _calbench_commit()
    record["packages"] = package_versions()
    return record


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def save_record(record: Mapping[str, Any], folder: Path) -> Path:
    """``<folder>/<name>.json`` (readable) and the sampled values in ``<folder>/samples/<name>.json``."""
    head = copy.deepcopy(dict(record))
    samples = {t: e.pop("samples") for t, e in head["tasks"].items() if "samples" in e}
    path = folder / f"{record['name']}.json"
    if samples:
        _atomic_write(folder / "samples" / path.name, json.dumps(samples, sort_keys=True, separators=(",", ":")) + "\n")
    _atomic_write(path, json.dumps(head, indent=1, sort_keys=True) + "\n")
    return path


def load_records(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("schema") != SCHEMA:
            raise RefusedRunError(f"{path}: unknown record schema {record.get('schema')!r}")
        samples = path.parent / "samples" / path.name
        if samples.is_file():
            for task, values in json.loads(samples.read_text()).items():
                record["tasks"][task]["samples"] = values
        records.append(record)
    return records


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
