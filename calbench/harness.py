"""lm-eval adapters for the numeric sampling tasks: documents, filter, task class, aggregations.

The task YAML in ``tasks/`` names everything here by dotted path. This module only
translates between lm-eval's shapes and calbench's pure functions (``scoring``).

Per-family results appear in lm-eval's own table: besides the overall metrics (equal
weight over families), each task reports ``<metric>/<family>``. lm-eval prints a
``<metric>_stderr`` value next to its metric; calbench fills it with the metric's
standard error (see ``calbench.scoring``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from lm_eval.api.task import ConfigurableTask

from calbench import scoring
from calbench.families import FAMILIES, make_target, split_points
from calbench.prompt import prompt_text

SPLIT_CHOICES = ("unseen", "heldout", "all")
POINT_CHOICES = ("selected", "full")


def numeric_docs(calbench_split: str = "unseen", calbench_points: str = "selected", **_: Any) -> dict[str, Any]:
    """lm-eval ``custom_dataset``: one document per prompt of the chosen split.

    lm-eval also passes the task metadata and the run's ``--model_args``/``--metadata``
    as keyword arguments; they are ignored here.
    """
    import datasets

    if calbench_split not in SPLIT_CHOICES:
        raise ValueError(f"calbench_split must be one of {SPLIT_CHOICES}, got {calbench_split!r}")
    if calbench_points not in POINT_CHOICES:
        raise ValueError(f"calbench_points must be one of {POINT_CHOICES}, got {calbench_points!r}")
    splits = ("unseen", "heldout") if calbench_split == "all" else (calbench_split,)
    rows = []
    for split in splits:
        for i, target in enumerate(split_points(split, calbench_points)):  # type: ignore[arg-type]
            rows.append(
                {
                    "id": f"{split}/{i}",
                    "split": split,
                    "family": target.family.name,
                    "params": json.dumps(target.params),
                    "target": target.key,
                    "prompt": prompt_text(target),
                }
            )
    return {"test": datasets.Dataset.from_list(rows)}


def keep_all(resps: Sequence[Sequence[str]], docs: Sequence[dict[str, Any]]) -> Sequence[Sequence[str]]:
    """Filter that keeps every repeat (lm-eval's default keeps only the first)."""
    return resps


def metric_keys(family: str | None = None) -> list[str]:
    """Names a document reports; per-family names when ``family`` is given."""
    if family is None:
        names = [*scoring.FAMILY_METRICS, *scoring.OVERALL_ONLY, *(f"{m}_median" for m in scoring.MEDIAN_METRICS)]
    else:
        names = [f"{m}/{family}" for m in scoring.FAMILY_METRICS]
    # A metric's standard error must come after the metric: lm-eval first writes "N/A"
    # under "<metric>_stderr", then the aggregation of our "<metric>_stderr" replaces it.
    return [k for name in names for k in (name, f"{name}_stderr")]


def _estimate(key: str, items: list[dict[str, Any]]) -> scoring.Estimate:
    metric, _, family = key.partition("/")
    records = [scoring.PromptScore.from_dict(i) for i in items if not family or i["family"] == family]
    if not records:  # a family all of whose prompts `--limit` left out
        return scoring.Estimate(float("nan"), float("nan"))
    summary = scoring.summarize(records)
    return summary.families[family][metric] if family else summary.overall[metric]


def _aggregator(key: str) -> Callable[[list[dict[str, Any]]], float]:
    base, stderr, _ = key.partition("_stderr")
    if stderr:
        return lambda items: _estimate(base, items).se
    return lambda items: _estimate(key, items).value


def _higher_is_better(key: str) -> bool:
    metric = key.partition("/")[0].removesuffix("_stderr").removesuffix("_median")
    return scoring.HIGHER_IS_BETTER.get(metric, False)


ALL_KEYS = metric_keys() + [k for f in FAMILIES for k in metric_keys(f)]
AGGREGATIONS = {k: _aggregator(k) for k in ALL_KEYS}
HIGHER = {k: _higher_is_better(k) for k in ALL_KEYS}


class SamplingTask(ConfigurableTask):
    """A ConfigurableTask that scores N samples per prompt against the prompt's law.

    ``--metadata '{"num_samples": N}'`` sets the number of samples per prompt for a run
    (the task's ``repeats``), with plain ``lm_eval`` as with ``calbench eval``.
    """

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        config = dict(config or {})
        config.pop("class", None)  # lm-eval hands the YAML's own `class:` key back to us
        super().__init__(config=config, **kwargs)
        n = (self.config.metadata or {}).get("num_samples")
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{self.config.task}: metadata num_samples must be a positive integer, got {n!r}")
            self.config.repeats = n
        # Every document reports every family's keys (each aggregation keeps its own
        # family's records), so lm-eval sees equal counts for all metrics.
        families = set(self.dataset[self.config.test_split]["family"])
        self._keys = metric_keys() + [k for f in FAMILIES if f in families for k in metric_keys(f)]

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # Same as lm-eval's custom_dataset path, without its warning about --metadata.
        self.dataset = self.config.custom_dataset(**(self.config.metadata or {}), **(self.config.dataset_kwargs or {}))

    def process_results(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        responses = results[0]
        if isinstance(responses, str):  # a filter that kept one response only
            responses = [responses]
        target = make_target(doc["family"], json.loads(doc["params"]))
        record = scoring.score_prompt(target, list(responses)).to_dict()
        return dict.fromkeys(self._keys, record)

    def aggregation(self) -> dict[str, Callable[[list[Any]], float]]:
        return AGGREGATIONS

    def higher_is_better(self) -> dict[str, bool]:
        return HIGHER
