"""The sample-free numeric tasks: each prompt's whole answer distribution, enumerated."""

from __future__ import annotations

import json
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.model import LM

from calbench import policy
from calbench.families import make_target
from calbench.harness.base import CalbenchTask
from calbench.metrics import enumeration
from calbench.metrics.sampling import iqr
from calbench.stats import Summary

ENUMERATION_DEFAULTS = {"nodes": 2000, "residual": 0.01, "resolution": 0.01, "batch": 64, "refine": 0}


def enumeration_settings(
    target: Any,
    nodes: float = ENUMERATION_DEFAULTS["nodes"],
    residual: float = ENUMERATION_DEFAULTS["residual"],
    resolution: float = ENUMERATION_DEFAULTS["resolution"],
    batch: float = ENUMERATION_DEFAULTS["batch"],
    refine: float = ENUMERATION_DEFAULTS["refine"],
) -> dict[str, Any]:
    """The enumeration request's settings for a prompt's law: the budget (``resolution`` in IQRs)
    and the law's answer space (``enumeration.AnswerSpace``: support, integer or not, and
    the window the metrics clip values to)."""
    budget = {"nodes": int(nodes), "batch": int(batch), "residual": float(residual), "refine": bool(refine)}
    budget["resolution"] = resolution * iqr(target)
    space = {
        "support": list(target.support()),
        "integer": bool(target.integer),
        "window": list(enumeration.window(target)),
    }
    return {"budget": budget, "space": space}


class EnumerationTask(CalbenchTask):
    """The sample-free numeric tasks: each prompt's whole answer distribution, enumerated
    (``calbench.backends.enumeration``) and scored against its law (``calbench.metrics.enumeration``).

    One request per prompt, of calbench's own kind, with the sampling task's generation
    settings (the distribution enumerated is that of its samples). ``--metadata`` sets the
    budget: ``calbench_enum_nodes`` (prefixes expanded, default 2000), ``calbench_enum_residual``
    (stop once the frontier holds at most this mass, 0.01) and ``calbench_enum_resolution``
    (resolve prefixes narrower than this many IQRs within the law's window, 0.01) and
    ``calbench_enum_refine`` (1: spend the prefixes left over on resolved ones, 0 by default).
    """

    OVERALL = (*enumeration.METRICS, *(f"{m}_median" for m in enumeration.MEDIAN_METRICS))
    PER_FAMILY = enumeration.METRICS
    STDERR = False  # exact given the model, up to the reported bound
    SAMPLED = False

    def _settings(self, target: Any) -> dict[str, Any]:
        metadata = self.config.metadata or {}
        values = {k: float(metadata.get(f"calbench_enum_{k}", v)) for k, v in ENUMERATION_DEFAULTS.items()}
        if (
            values["nodes"] < 1
            or values["batch"] < 1
            or not 0 <= values["residual"] <= 1
            or values["resolution"] < 0
            or values["refine"] not in (0, 1)
        ):
            raise ValueError(f"{self.config.task}: bad enumeration settings {values}")
        return enumeration_settings(target, **values)

    def construct_requests(self, doc: dict[str, Any], ctx: Any, **kwargs: Any) -> list[Instance]:
        task, doc_id, _ = kwargs["metadata"]
        target = make_target(doc["family"], json.loads(doc["params"]))
        arguments = (ctx, dict(self.config.generation_kwargs), self._settings(target))
        return [Instance(policy.ENUMERATE_ANSWERS, doc, arguments, 0, metadata=(task, doc_id, 1))]

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> Summary:
        return enumeration.summarize(records)

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        target = make_target(doc["family"], json.loads(doc["params"]))
        return enumeration.score_enumeration(target, results[0])


def _refuse_enumeration(self: Any, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
    raise NotImplementedError(
        f"{type(self).__name__} cannot enumerate a model's answers, which the sample-free tasks "
        f"(calbench_numeric_*_exact) need: run them with --model calbench-hf, or a calbench reference"
    )


# lm-eval runs a request by calling the model's method named after its kind: without this, a
# backend that lacks it would fail with a bare AttributeError under plain `lm_eval` as well.
if not hasattr(LM, policy.ENUMERATE_ANSWERS):
    setattr(LM, policy.ENUMERATE_ANSWERS, _refuse_enumeration)
