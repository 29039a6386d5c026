"""lm-eval adapters for the transfer tasks: open-ended generation, MCQ balance, NoveltyBench.

Like ``calbench.harness``, these only translate between lm-eval's shapes and calbench's
pure functions (``openended``, ``mcq``, ``noveltybench``). Standard errors over prompts
fill lm-eval's stderr column (each task's summary says how).
"""

from __future__ import annotations

import math
from typing import Any

from lm_eval.api.instance import Instance

from calbench.harness.base import CalbenchTask
from calbench.metrics import mcq, noveltybench, openended
from calbench.policy import FIRST_TOKEN_METADATA, FIRST_TOKEN_SUPPORT
from calbench.stats import Estimate, Summary, bootstrap_median, rate, rate_se, sample_mean


def open_ended_docs(**_: Any) -> dict[str, Any]:
    import datasets

    rows = [
        {"id": i, "category": c, "prompt": p}
        for i, (c, p) in enumerate(zip(openended.CATEGORIES, openended.prompts(), strict=True))
    ]
    return {"test": datasets.Dataset.from_list(rows)}


class OpenEndedTask(CalbenchTask):
    """N samples per prompt (any backend) plus the first answer token's distribution (calbench-hf)."""

    SUPPORT = tuple(f"support_{round(p * 100)}" for p in openended.SUPPORT_LEVELS)
    OVERALL = ("unique_answers", "answer_entropy", "top_answer_share")
    OPTIONAL = (*SUPPORT, "support_90_median")

    def construct_requests(self, doc: dict[str, Any], ctx: Any, **kwargs: Any) -> list[Instance]:
        """The sampling request and, with a chat template on a backend that serves it
        (``calbench-hf``), one ``first_token_support`` request: the first answer token's
        distribution after the prompt."""
        sampling = super().construct_requests(doc, ctx, **kwargs)
        requests = list(sampling) if isinstance(sampling, list) else [sampling]
        if kwargs.get("apply_chat_template") and (self.config.metadata or {}).get(FIRST_TOKEN_METADATA):
            task, doc_id, _ = kwargs["metadata"]
            # lm-eval runs a request by calling the model's method named after its kind.
            support = Instance(FIRST_TOKEN_SUPPORT, doc, (ctx,), len(requests), metadata=(task, doc_id, 1))
            requests.append(support)
        return requests

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> Summary:
        # Support sizes exist only where calbench-hf scored the first answer token: "omit".
        overall = {m: sample_mean([r[m] for r in records], nan="omit") for m in OpenEndedTask.OVERALL}
        for m in OpenEndedTask.SUPPORT:
            overall[m] = sample_mean([r.get(m) for r in records], nan="omit")
        overall["support_90_median"] = bootstrap_median([r.get("support_90") for r in records], nan="omit", seed=0)
        return Summary({}, overall, len(records))

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        answers = results[0] if isinstance(results[0], list) else [results[0]]
        record: dict[str, Any] = {"id": doc["id"], **openended.sample_stats(answers)}
        support = results[1][0] if len(results) > 1 else None
        if support:
            record |= {f"support_{round(p * 100)}": float(k) for p, k in support.items()}
            record["support_90_median"] = record["support_90"]
        return record


def mcq_docs(**_: Any) -> dict[str, Any]:
    import datasets

    return {"test": datasets.Dataset.from_list([{"id": 0, "prompt": mcq.PROMPT}])}


class MCQTask(CalbenchTask):
    """N independent generations of one question-writing prompt; balance of the correct letters."""

    OVERALL = (
        "tv_distance",
        *(f"freq_{x}" for x in mcq.LETTERS),
        "chi2",
        "parse_rate",
        "tv_distance_lenient",
        "parse_rate_lenient",
    )

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> Summary:
        strict = [x for r in records for x in r["strict"]]
        lenient = [x for r in records for x in r["lenient"]]
        b, bl = mcq.balance(strict), mcq.balance(lenient)
        n, parsed = len(strict), int(b["parsed"])
        overall = {
            "tv_distance": Estimate(b["tv_distance"], mcq.bootstrap_tv(strict)),
            "chi2": Estimate(b["chi2"], math.nan),
            "parse_rate": rate(parsed, n),
            "tv_distance_lenient": Estimate(bl["tv_distance"], mcq.bootstrap_tv(lenient)),
            "parse_rate_lenient": rate(int(bl["parsed"]), n),
        }
        for x in mcq.LETTERS:
            k = round(b.get(f"freq_{x}", math.nan) * parsed) if parsed else 0
            overall[f"freq_{x}"] = Estimate(b.get(f"freq_{x}", math.nan), rate_se(k, parsed) if parsed else math.nan)
        return Summary({}, overall, len(records))

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        generations = results[0] if isinstance(results[0], list) else [results[0]]
        return {
            "id": doc["id"],
            "strict": [mcq.parse_strict(g) for g in generations],
            "lenient": [mcq.parse_lenient(g) for g in generations],
        }


def noveltybench_docs(
    calbench_split: str = "curated",
    calbench_data_files: str | None = None,
    calbench_num_prompts: int | None = None,
    **_: Any,
) -> dict[str, Any]:
    """NoveltyBench prompts: the hub dataset in real use, or a local JSONL (``calbench_data_files``);
    ``calbench_num_prompts`` keeps the first N in the split's own order (a fixed subset: the
    same ids for every system, and the run stays a full run of its task)."""
    import datasets

    if calbench_split not in ("curated", "wildchat"):
        raise ValueError(f"calbench_split must be 'curated' or 'wildchat', got {calbench_split!r}")
    if calbench_data_files:
        data = datasets.load_dataset("json", data_files=calbench_data_files, split="train")
    else:
        data = datasets.load_dataset(noveltybench.HUB_DATASET, split=calbench_split)
    if calbench_num_prompts is not None:
        n = calbench_num_prompts
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= len(data):
            raise ValueError(f"calbench_num_prompts must be a whole number in 1..{len(data)}, got {n!r}")
        data = data.select(range(n))
    return {"test": data.select_columns(["id", "prompt"])}


class NoveltyTask(CalbenchTask):
    """k generations per prompt; the lite partition in-task, full scoring by ``calbench noveltybench score``."""

    OVERALL = ("distinct_lite",)

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> Summary:
        return Summary(
            {}, {"distinct_lite": sample_mean([r["distinct_lite"] for r in records], nan="omit")}, len(records)
        )

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        generations = results[0] if isinstance(results[0], list) else [results[0]]
        labels = noveltybench.partition(generations, noveltybench.lite_equivalent)
        return {"id": doc["id"], "distinct_lite": float(noveltybench.distinct(labels))}
