"""A run record in the formats others read: an Every Eval Ever 0.3.0 file, and the ``model-index``
block of a Hugging Face model card.

**Every Eval Ever** (the ``every-eval-ever`` package's ``eval.schema.json``, version 0.3.0): one
file per record, one ``evaluation_results`` entry per task metric (the calibration score from the
stored samples first), each with its direction (``lower_is_better``), its range (``min_score``,
``max_score``; ``"Infinity"`` where unbounded) from ``calbench.metrics.catalog``, its standard
error, and in its details the samples per prompt, the run's seeds and, on an API backend, the
parameters sent. calbench's prompts are generated, not a hosted dataset: ``source_type: other``.

**model-index**: the form the Hub renders for a benchmark it does not know (``task``, ``dataset``
with a free ``type``, ``metrics``): the card's headline numbers, unverified.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from calbench import __version__
from calbench.leaderboard.pages.numbers import Scored, samples_per_prompt, scored
from calbench.leaderboard.records.record_types import RunRecord
from calbench.metrics import catalog
from calbench.stats import Estimate
from calbench.task_names import NUMERIC_SPLITS

SCHEMA_VERSION = "0.3.0"
SOURCE = "calbench leaderboard"
SCORE_DESCRIPTION = (
    "calbench calibration score (0-100): how closely the valid answers follow the distribution each "
    "prompt asks for, free of the samples per prompt (calbench/metrics/calibration.py)"
)


def _bound(x: float) -> float | str:
    return "Infinity" if x == math.inf else "-Infinity" if x == -math.inf else x


def _metric_config(metric: str, description: str) -> dict[str, Any]:
    found = catalog.find(metric)
    low, high = (found.low, found.high) if found is not None else (-math.inf, math.inf)
    return {
        "evaluation_description": description,
        "metric_id": f"calbench.{metric}",
        "metric_name": metric,
        "lower_is_better": not catalog.higher_is_better(metric),
        "score_type": "continuous",
        "min_score": _bound(low),
        "max_score": _bound(high),
    }


def _score(estimate: Estimate, details: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"score": estimate.value, "details": dict(details)}
    if math.isfinite(estimate.se):
        out["uncertainty"] = {"standard_error": {"value": estimate.se, "method": "calbench (analytic or bootstrap)"}}
    return out


def _generation(entry: Mapping[str, Any]) -> dict[str, Any]:
    gen = entry.get("generation") or {}
    args: dict[str, Any] = {}
    for key in ("temperature", "top_p", "top_k"):
        if isinstance(gen.get(key), int | float) and not isinstance(gen.get(key), bool):
            args[key] = gen[key]
    if isinstance(gen.get("max_gen_toks"), int) and gen["max_gen_toks"] >= 1:
        args["max_tokens"] = gen["max_gen_toks"]
    out: dict[str, Any] = {"generation_args": args}
    if "api" in entry:
        out["additional_details"] = {"api": json.dumps(entry["api"], sort_keys=True)}
    return out


def every_eval_ever(item: RunRecord | Scored, retrieved: float) -> dict[str, Any]:
    """The record as an Every Eval Ever 0.3.0 file (``retrieved``: the Unix time it is written)."""
    s = scored([item])[0]
    record = s.record
    model = record.get("model", {})
    evaluations = record.get("evaluations", {})
    name = str(model.get("endpoint_model") or model.get("pretrained") or record["name"])
    api = bool(model.get("endpoint_model"))
    details = {k: str(v) for k, v in model.items() if v is not None and k not in ("backend",)}
    model_info = {
        "name": record["name"],
        "id": name if not model.get("adapter") else f"{name}+{model['adapter']}",
        "inference_engine": {"name": str(model.get("backend"))},
        "additional_details": {
            "deployment_type": "externally_managed" if api else "self_deployed",
            "model_availability": "unknown" if api else "open_weights",
            **details,
        },
    }
    n = samples_per_prompt(record)
    seeds = {name: e.get("seeds") or {} for name, e in evaluations.items()}
    common = {
        "samples_per_prompt": "n/a" if n is None else str(n),
        "seeds": json.dumps(seeds, sort_keys=True),
        "record": record["name"],
    }
    results: list[dict[str, Any]] = []
    score = s.calibration_score
    if isinstance(score, Estimate) and math.isfinite(score.value):
        results.append(
            {
                "evaluation_result_id": "calbench/calibration_score",
                "evaluation_name": "calbench calibration score",
                "source_data": {"dataset_name": "calbench numeric sampling prompts", "source_type": "other"},
                "metric_config": _metric_config("calibration_score", SCORE_DESCRIPTION),
                "score_details": _score(score, common),
            }
        )
    for task, entry in record["tasks"].items():
        evaluation: Mapping[str, Any] = evaluations.get(entry["evaluation"], {})
        task_details = {
            **common,
            "samples_per_prompt": str(entry.get("samples_per_prompt") or 1),
            "prompts": str(entry.get("prompts")),
            "seeds": json.dumps(evaluation.get("seeds") or {}, sort_keys=True),
            "evaluation": entry["evaluation"],
            **({"api_seed": str(entry["api"].get("seed"))} if "api" in entry else {}),
        }
        for metric, (value, se) in entry["overall"].items():
            if value is None or not math.isfinite(value) or metric.endswith("_stderr"):
                continue
            found = catalog.find(metric)
            results.append(
                {
                    "evaluation_result_id": f"{task}/{metric}",
                    "evaluation_name": task,
                    "source_data": {
                        "dataset_name": task,
                        "source_type": "other",
                        "additional_details": {
                            "generator": "calbench's tasks (generated prompts)",
                            "version": str(entry.get("version")),
                        },
                    },
                    "metric_config": _metric_config(metric, found.meaning if found else f"{task}: {metric}"),
                    "score_details": _score(Estimate(value, math.nan if se is None else se), task_details),
                    "generation_config": _generation(entry),
                }
            )
    packages = record.get("packages", {})
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": f"calbench/{name}/{int(retrieved)}",
        "retrieved_timestamp": str(int(retrieved)),
        "source_metadata": {
            "source_name": SOURCE,
            "source_type": "evaluation_run",
            "source_organization_name": "calbench",
            "evaluator_relationship": "third_party",
            "additional_details": {"command": record["command"], "calbench_commit": str(record.get("calbench_commit"))},
        },
        "eval_library": {
            "name": "lm_eval",
            "version": str(packages.get("lm_eval") or packages.get("lm-eval") or "unknown"),
            "additional_details": {"calbench": str(packages.get("calbench") or __version__), "tasks": "calbench"},
        },
        "model_info": model_info,
        "evaluation_results": results,
    }


def model_index(item: RunRecord | Scored) -> list[dict[str, Any]]:
    """The card's ``model-index``: the record's calibration score, valid rate, pit_w1 and the
    score on each split, as the Hub renders an unregistered benchmark."""
    s = scored([item])[0]
    values: list[tuple[str, str, Any]] = [
        ("calibration_score", "calibration score (0-100)", s.calibration_score),
        ("valid_rate", "valid rate", s.valid_rate),
        ("pit_w1", "pit_w1 (lower is better)", s.mean_pit_w1),
    ]
    for split in NUMERIC_SPLITS:
        values.append((f"calibration_score_{split}", f"calibration score, {split} split", s.split_score(split)))
    metrics = [
        {"type": key, "name": label, "value": float(f"{v.value:.3g}"), "verified": False}
        for key, label, v in values
        if isinstance(v, Estimate) and math.isfinite(v.value)
    ]
    return [
        {
            "name": s.name,
            "results": [
                {
                    "task": {"type": "text-generation", "name": "Distributional calibration"},
                    "dataset": {"name": "calbench numeric sampling prompts", "type": "calbench"},
                    "metrics": metrics,
                }
            ],
        }
    ]
