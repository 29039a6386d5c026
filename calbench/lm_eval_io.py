"""Everything that reads what lm-eval wrote or installed: results files, samples logs and their
names, the records in a log, and the MMLU exemplars the retention suite asks about.

lm-eval writes one ``results_<stamp>.json`` per run (``<name>_<stamp>.json`` for
``--output_path <name>.json``) and, with ``--log_samples``, one
``samples_<task>_<stamp>.jsonl`` per task, one JSON record per document. It stores every
calbench metric as ``"<metric>[/<family>],<filter>"`` with its standard error under
``"<metric>[/<family>]_stderr,<filter>"``; ``read_task`` turns that back into estimates.
A logged document (``"doc"``, ``"resps"``, ``"doc_hash"``, ...) becomes the plain values the
pure scorers take: a numeric prompt's stored answers (``prompt_values``), a document's numeric
scores (``item_scores``), a NoveltyBench prompt's generations (``noveltybench_items``).

Every failure to read is an ``LmEvalOutputError`` naming the file (and line).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from calbench.api_support import METADATA_PLAN
from calbench.families import FAMILIES, make_target
from calbench.metrics.prompt_scores import stored_answers
from calbench.stats import Estimate


class LmEvalOutputError(ValueError):
    """An lm-eval results file or samples log that is missing, unreadable or not what it should be."""


def load_results(path: Path) -> dict[str, Any]:
    """An lm-eval results file as a dict."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise LmEvalOutputError(f"{path}: not a readable lm-eval results file ({err})") from err
    if not isinstance(data, dict):
        raise LmEvalOutputError(f"{path}: not a readable lm-eval results file (not a JSON object)")
    return data


STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(\.\d+)?$")


def samples_log(results_file: Path, task: str) -> Path:
    """The samples log lm-eval wrote with ``results_file`` (same run: the same timestamp in its name)."""
    found_stamp = STAMP.search(results_file.stem)
    stamp = found_stamp.group(0) if found_stamp else results_file.stem.removeprefix("results_")
    log = results_file.parent / f"samples_{task}_{stamp}.jsonl"
    if not log.is_file():
        others = sorted(p.name for p in results_file.parent.glob(f"samples_{task}_*.jsonl"))
        found = f" (only other runs' logs: {', '.join(others)})" if others else ""
        raise LmEvalOutputError(
            f"{results_file}: no samples log {log.name} of this run{found}: it was deleted, or the run had no --log_samples"
        )
    return log


def read_samples(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a samples log, one per document, in order (a bad line names its number)."""
    if not Path(path).is_file():
        raise LmEvalOutputError(f"{path}: no such samples log")
    with Path(path).open() as f:
        for n, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except ValueError as err:
                raise LmEvalOutputError(f"{path}:{n}: not an lm-eval sample record (not JSON: {err})") from err
            if not isinstance(record, dict):
                raise LmEvalOutputError(f"{path}:{n}: not an lm-eval sample record (not a JSON object)")
            yield record


NOVELTYBENCH_LOG = re.compile(r"samples_calbench_noveltybench_(curated|wildchat)_")


def noveltybench_log(path: Path) -> tuple[str, list[dict[str, Any]]]:
    """The split (from lm-eval's file name) and the records of a NoveltyBench task's samples log."""
    match = NOVELTYBENCH_LOG.match(Path(path).name)
    if match is None:
        raise LmEvalOutputError(f"{Path(path).name}: not a samples log of calbench_noveltybench_curated or _wildchat")
    return match.group(1), list(read_samples(path))


def noveltybench_items(samples: Sequence[Mapping[str, Any]], where: str = "samples") -> list[dict[str, Any]]:
    """The (id, prompt, generations) items of a ``calbench_noveltybench_<split>`` task's logged samples."""
    items = []
    for n, sample in enumerate(samples, 1):
        try:
            generations = sample["resps"][0]
            items.append({"id": sample["doc"]["id"], "prompt": sample["doc"]["prompt"], "generations": generations})
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError(f"{where}:{n}: not an lm-eval sample record ({err})") from err
        if not isinstance(generations, list) or not all(isinstance(g, str) for g in generations):
            raise ValueError(f"{where}:{n}: the generations (resps[0]) must be a list of strings")
        if not generations:
            raise ValueError(f"{where}:{n}: a prompt without generations")
    if not items:
        raise ValueError(f"{where}: the samples log is empty")
    return items


def prompt_values(
    samples: Iterable[Mapping[str, Any]], where: str = "samples", protocol: str = "independent"
) -> list[dict[str, Any]]:
    """Valid parsed answers per prompt, in order, of a numeric sampling task's logged samples
    (lm-eval's per-sample records: a log's lines, or a run's ``results["samples"][task]``), as a
    run record stores them (``prompt_scores.stored_answers``; under a sampling protocol, the
    samples its responses yield)."""
    prompts = []
    for n, sample in enumerate(samples, 1):
        try:
            doc = sample["doc"]
            target = make_target(doc["family"], json.loads(doc["params"]))
            groups = sample["resps"]  # one per request: the prompt's one, or a seeded prompt's one per seed
            responses = [r for group in groups for r in group]
            if not all(isinstance(group, list) for group in groups) or not all(isinstance(r, str) for r in responses):
                raise TypeError("resps is not a list of lists of strings")
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise ValueError(f"{where}:{n}: not a calbench sample record ({err})") from err
        count, values = stored_answers(responses, target, protocol)
        prompts.append({"family": doc["family"], "target": doc["target"], "n": count, "values": values})
    if not prompts:
        raise ValueError(f"{where}: the samples log is empty")
    return prompts


HASH_CHARS = 16  # of a document's content hash: enough to tell two documents apart, a quarter of the size


def item_scores(samples: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Each logged document's numeric value of ``metrics``, with what pairs it across runs: its
    id, the hash of its content, lm-eval's filter, and the document's calbench id, family,
    target, level or kind where it has them."""
    out = []
    for sample in samples:
        scores = {m: v for m in metrics if (v := item_value(sample, m)) is not None}
        raw = sample.get("doc")
        doc: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        out.append(
            {
                "doc_id": sample.get("doc_id"),
                "doc_hash": str(sample.get("doc_hash"))[:HASH_CHARS],
                "filter": str(sample.get("filter", "none")),
                "doc": {k: doc[k] for k in ("id", "family", "target", "level", "kind") if k in doc},
                "scores": scores,
            }
        )
    return out


def task_samples(results_file: Path, task: str, results: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every record of ``task``'s samples log of the run of ``results_file``, checked to be that
    run's log by its content (``check_log``), not only by the timestamp in its name."""
    log = samples_log(results_file, task)
    records = list(read_samples(log))
    check_log(load_results(results_file) if results is None else results, task, records, log)
    return records


def _request_settings(record: Mapping[str, Any]) -> list[Any]:
    """The generation settings of each generate request of a logged document: its second
    argument (lm-eval logs the arguments as a list, or as ``{"gen_args_0": {"arg_0": ...,
    "arg_1": ...}}``). A request of one argument (calbench-hf's ``first_token_support`` beside
    the open-ended task's samples: the context alone) has none, and is not one of them."""
    arguments = record.get("arguments")
    requests = arguments.values() if isinstance(arguments, Mapping) else arguments or []
    out = []
    for request in requests:
        if isinstance(request, Mapping) and "arg_1" in request:
            out.append(request["arg_1"])
        elif isinstance(request, list) and len(request) > 1:
            out.append(request[1])
    return out


def check_log(results: Mapping[str, Any], task: str, records: Sequence[Mapping[str, Any]], log: Path) -> None:
    """Refuse a samples log that is not the log of this run's ``task``: lm-eval's task hash over
    the logged documents, prompts and targets (so another task's log, a ``--limit`` run's, or
    one with records missing, fails), the number of documents, each document's number of
    responses (the task's ``repeats``) and the generation settings of its requests."""
    if not records:
        raise LmEvalOutputError(f"{log}: the samples log is empty")
    where = f"{log}: not the samples log of this run's {task}"
    counts = results.get("n-samples", {}).get(task, {})
    effective = counts.get("effective") if isinstance(counts, Mapping) else None
    if effective is not None and len(records) != effective:
        raise LmEvalOutputError(f"{where} ({len(records)} documents logged, the run scored {effective})")
    doc_ids = [r.get("doc_id") for r in records]
    if len(set(map(str, doc_ids))) != len(doc_ids):
        raise LmEvalOutputError(f"{where} (a document is logged twice)")
    expected = results.get("task_hashes", {}).get(task)
    if expected:
        try:
            found = hash_string("".join(r["doc_hash"] + r["prompt_hash"] + r["target_hash"] for r in records))
        except (KeyError, TypeError) as err:
            raise LmEvalOutputError(f"{where} (a record lacks lm-eval's hashes: {err})") from err
        if found != expected:
            raise LmEvalOutputError(f"{where} (its documents, prompts or targets differ: task hash mismatch)")
    config = results.get("configs", {}).get(task, {})
    repeats, settings = config.get("repeats"), config.get("generation_kwargs")
    api = (config.get("metadata") or {}).get(METADATA_PLAN)
    if isinstance(api, Mapping):  # an API backend: one request per sample, each with its own seed
        for n, record in enumerate(records, 1):
            _check_per_sample(record, api, f"{where} (document {n}")
        return
    for n, record in enumerate(records, 1):
        responses = record.get("resps") or []
        group = responses[0] if isinstance(responses, list) and len(responses) == 1 else None
        if isinstance(repeats, int) and isinstance(group, list) and len(group) != repeats:  # (protocols: several)
            raise LmEvalOutputError(f"{where} (document {n}: {len(group)} responses, the task repeats {repeats})")
        if settings is not None and config.get("output_type") == "generate_until":
            logged = _request_settings(record)
            canonical = json.dumps(settings, sort_keys=True, default=str)
            other = [s for s in logged if json.dumps(s, sort_keys=True, default=str) != canonical]
            if other:
                raise LmEvalOutputError(f"{where} (document {n} was generated with other settings: {other[0]})")


def _check_per_sample(record: Mapping[str, Any], api: Mapping[str, Any], where: str) -> None:
    """A document of a run on an API backend: its requests are the task's (``api["requests_per_prompt"]``),
    each sent with the settings the run says it sent and a seed of its own."""
    responses = record.get("resps") or []
    logged = _request_settings(record)
    expected = api.get("requests_per_prompt")
    if isinstance(expected, int) and (len(responses) != expected or len(logged) != expected):
        raise LmEvalOutputError(f"{where}: {len(responses)} requests, the run sent {expected} per prompt)")
    canonical = json.dumps(api.get("sent"), sort_keys=True, default=str)
    seeds = []
    for request in logged:
        settings = dict(request) if isinstance(request, Mapping) else {}
        seeds.append(settings.pop("seed", None))
        if json.dumps(settings, sort_keys=True, default=str) != canonical:
            raise LmEvalOutputError(f"{where} was sent with other settings: {settings})")
    if any(not isinstance(seed, int) for seed in seeds) or len(set(seeds)) != len(seeds):
        raise LmEvalOutputError(f"{where}: its samples do not each have a seed of their own: {seeds[:5]})")


def hash_string(text: str) -> str:
    """lm-eval's own hash of a string (``lm_eval.utils.hash_string``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def item_value(sample: Mapping[str, Any], metric: str) -> float | None:
    """A logged document's value of ``metric``, if it is a number (calbench's tasks log each
    document's record under every metric key; lm-eval's own log the number)."""
    value = sample.get(metric)
    if isinstance(value, Mapping):
        value = value.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def latest_results(output_path: Path, since: float = 0.0) -> Path | None:
    """The newest lm-eval ``results_*.json`` under ``output_path`` written after ``since`` (for an
    ``output_path`` that names a ``.json`` file, the ``<name>_<stamp>.json`` beside it)."""
    path = Path(output_path)
    if path.suffix == ".json":
        found = (p for p in path.parent.glob(f"{path.stem}_*.json") if STAMP.search(p.stem))
    else:
        found = path.rglob("results_*.json")
    candidates = [p for p in found if p.stat().st_mtime >= since]
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


# ---------------------------------------------------------------- a results file's fields

SAMPLING_METRICS = ("w1", "w1_iqr", "excess_w1", "excess_w1_iqr", "valid_rate")
LIKELIHOOD_METRICS = ("seq_kl", "canonical_mass", "exact_w1_iqr", "logit_kl")
ENUMERATION_METRICS = ("valid_mass", "enum_w1_iqr", "enum_w1_iqr_bound", "enum_pit_w1", "residual_mass")


def metrics_of(task_results: Mapping[str, Any]) -> tuple[str, ...]:
    """The per-family metrics a calbench numeric task's results hold (sampling, sample-free or likelihood)."""
    if "w1_iqr,samples" in task_results:
        return SAMPLING_METRICS
    return ENUMERATION_METRICS if any(k.startswith("enum_w1_iqr,") for k in task_results) else LIKELIHOOD_METRICS


def args_dict(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """lm-eval's ``k=v,k2=v2`` arguments (or an already parsed mapping) as a dict."""
    if not value:
        return {}
    if isinstance(value, str):
        from lm_eval.utils import simple_parse_args_string

        return dict(simple_parse_args_string(value))
    return dict(value)


def model_args(results: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--model_args`` of an lm-eval results dict, as a dict."""
    return args_dict(results.get("config", {}).get("model_args"))


def model_label(results: Mapping[str, Any]) -> str:
    """A readable name for the evaluated system: the adapter, the model folder, or the backend."""
    config = results.get("config", {})
    args = model_args(results)
    for key in ("peft", "lora_local_path", "pretrained"):
        if args.get(key):
            return Path(str(args[key]).rstrip("/")).name + (" + adapter" if key != "pretrained" else "")
    return str(config.get("model", "model"))


def _filter(task_results: Mapping[str, Any]) -> str:
    """lm-eval's filter name in the result keys ("samples" for sampling tasks, "none" otherwise)."""
    return "samples" if any(k.endswith(",samples") for k in task_results) else "none"


def _get(results: Mapping[str, Any], key: str, flt: str) -> Estimate:
    def num(v: Any) -> float:
        return float(v) if isinstance(v, int | float) else math.nan

    return Estimate(num(results.get(f"{key},{flt}")), num(results.get(f"{key}_stderr,{flt}")))


def read_task(
    task_results: Mapping[str, Any], metrics: Sequence[str]
) -> tuple[dict[str, Estimate], dict[str, dict[str, Estimate]]]:
    """(overall, per-family) estimates of ``metrics`` in one calbench task's lm-eval results."""
    flt = _filter(task_results)
    overall = {m: _get(task_results, m, flt) for m in metrics}
    families = {
        f: {m: _get(task_results, f"{m}/{f}", flt) for m in metrics}
        for f in FAMILIES
        if f"{metrics[0]}/{f},{flt}" in task_results
    }
    return overall, families


def overall_metrics(task_results: Mapping[str, Any]) -> dict[str, Estimate]:
    """Every overall (non per-family) metric of a task's lm-eval results, with its standard error."""
    out: dict[str, Estimate] = {}
    for key in task_results:
        metric, _, flt = key.partition(",")
        numeric = isinstance(task_results[key], int | float)
        if numeric and flt and "/" not in metric and not metric.endswith("_stderr"):
            out[metric] = _get(task_results, metric, flt)
    return out


# ---------------------------------------------------------------- what lm-eval installed

MMLU_FILE = ("tasks", "mmlu", "flan_cot_fewshot", "_cot_prompts.json")


def mmlu_file() -> Path:
    """The installed lm-eval's MMLU chain-of-thought exemplars; FileNotFoundError naming the path if absent."""
    import lm_eval

    path = Path(lm_eval.__file__).parent.joinpath(*MMLU_FILE)
    if not path.is_file():
        raise FileNotFoundError(
            f"mmlu_mini reads its questions from the installed lm-eval, and {path} is missing: "
            "install lm-eval (pip install 'lm-eval>=0.4') with its task files"
        )
    return path


def mmlu_exemplars(path: Path | None = None) -> dict[str, str]:
    """subject -> its exemplar text, from ``path`` or the installed lm-eval's file (``mmlu_file``):
    what ``calbench.metrics.retention.mmlu_questions`` parses."""
    return dict(json.loads((path or mmlu_file()).read_text()))
