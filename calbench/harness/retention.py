"""lm-eval adapters for the offline retention suite (tag ``calbench_retention_offline``).

The items and checkers are ``calbench.metrics.retention``'s; this module only builds lm-eval
documents and turns responses into per-item records. ``calbench_arithmetic`` and
``calbench_format_following`` decode greedily (``policy.GREEDY_TASKS``) and report their
accuracies overall and per level / instruction kind (``<metric>/<level>``), each a rate with
its Agresti-Coull standard error; ``calbench_mmlu_mini`` is a plain lm-eval
``multiple_choice`` task (``acc``) over ``retention.mmlu_questions`` of lm-eval's own MMLU exemplars. Every item's scores are
in the samples log, which ``calbench retention-delta`` pairs across two runs.
"""

from __future__ import annotations

import json
from typing import Any

from calbench import lm_eval_io
from calbench.harness.base import CalbenchTask
from calbench.metrics import retention
from calbench.stats import Estimate, Summary, rate


def _dataset(rows: list[dict[str, Any]]) -> dict[str, Any]:
    import datasets

    return {"test": datasets.Dataset.from_list(rows)}


def arithmetic_docs(calbench_per_level: int = 20, calbench_seed: int = 0, **_: Any) -> dict[str, Any]:
    items = retention.arithmetic_items(calbench_per_level, calbench_seed)
    return _dataset([{**item, "prompt": retention.arithmetic_prompt(item["question"])} for item in items])


def format_docs(calbench_per_kind: int = 10, calbench_seed: int = 0, **_: Any) -> dict[str, Any]:
    return _dataset(retention.format_items(calbench_per_kind, calbench_seed))


def mmlu_docs(**_: Any) -> dict[str, Any]:
    items, _skipped = retention.mmlu_questions(lm_eval_io.mmlu_exemplars())
    return _dataset([{**item, "prompt": retention.mmlu_prompt(item)} for item in items])


def _rates(records: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Estimate]:
    return {m: rate(int(sum(r[m] for r in records)), len(records)) for m in metrics}


class _GreedyTask(CalbenchTask):
    """One greedy answer per item, scored by a checker into 0/1 metrics, reported per group."""

    SAMPLED = False

    @classmethod
    def summarize(cls, records: list[dict[str, Any]]) -> Summary:
        groups = {g: [r for r in records if r[cls.GROUP] == g] for g in dict.fromkeys(r[cls.GROUP] for r in records)}
        return Summary(
            {g: _rates(rs, cls.OVERALL) for g, rs in groups.items()}, _rates(records, cls.OVERALL), len(records)
        )

    def score(self, doc: dict[str, Any], response: str) -> dict[str, float]:
        raise NotImplementedError

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        response = results[0] if isinstance(results[0], str) else results[0][0]
        return {"id": doc["id"], self.GROUP: doc[self.GROUP], **self.score(doc, response)}


class ArithmeticTask(_GreedyTask):
    """``exact_strict`` (the whole answer is the number) and ``exact_flexible`` (its last number)."""

    OVERALL = PER_FAMILY = ("exact_strict", "exact_flexible")
    GROUP, GROUPS = "level", retention.ARITHMETIC_LEVELS

    def score(self, doc: dict[str, Any], response: str) -> dict[str, float]:
        return retention.arithmetic_scores(response, int(doc["answer"]))


class FormatTask(_GreedyTask):
    """``strict_acc`` and ``loose_acc`` (IFEval's loose variants) of the one instruction per prompt."""

    OVERALL = PER_FAMILY = ("strict_acc", "loose_acc")
    GROUP, GROUPS = "kind", retention.FORMAT_KINDS

    def score(self, doc: dict[str, Any], response: str) -> dict[str, float]:
        return retention.follows(doc["kind"], json.loads(doc["args"]), response)
