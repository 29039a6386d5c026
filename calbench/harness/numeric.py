"""The numeric sampling tasks: documents, the filter that keeps every repeat, the task classes.

The task YAML in ``tasks/`` names everything by dotted path (``calbench.harness``
re-exports it). These only translate between lm-eval's shapes and calbench's pure
functions (``calbench.metrics.prompt_scores``, ``calbench.protocols``).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from lm_eval.api.instance import Instance

from calbench import protocols
from calbench.families import make_target
from calbench.harness.base import CalbenchTask
from calbench.metrics import prompt_scores, protocol_diagnostics
from calbench.param_ranges import prompt_set
from calbench.parse import classify
from calbench.stats import UNDEFINED, Estimate, family_means
from calbench.task_names import NUMERIC_SPLITS, SPLIT_CHOICES

POINT_CHOICES = ("selected", "full")


def numeric_docs(
    calbench_split: str = "unseen", calbench_points: str = "selected", calbench_protocol: str = "independent", **_: Any
) -> dict[str, Any]:
    """lm-eval ``custom_dataset``: one document per prompt of the chosen split (in the
    protocol's words: ``calbench.protocols``).

    lm-eval also passes the task metadata and the run's ``--model_args``/``--metadata``
    as keyword arguments; they are ignored here.
    """
    import datasets

    if calbench_split not in SPLIT_CHOICES:
        raise ValueError(f"calbench_split must be one of {SPLIT_CHOICES}, got {calbench_split!r}")
    if calbench_points not in POINT_CHOICES:
        raise ValueError(f"calbench_points must be one of {POINT_CHOICES}, got {calbench_points!r}")
    if calbench_protocol not in protocols.PROTOCOLS:
        raise ValueError(f"calbench_protocol must be one of {tuple(protocols.PROTOCOLS)}, got {calbench_protocol!r}")
    splits = NUMERIC_SPLITS if calbench_split == "all" else (calbench_split,)
    rows = []
    for split in splits:
        for i, target in enumerate(prompt_set(split, calbench_points)):
            rows.append(
                {
                    "id": f"{split}/{i}",
                    "split": split,
                    "family": target.family.name,
                    "params": json.dumps(target.params),
                    "target": target.key,
                    "prompt": protocols.protocol_text(calbench_protocol, target),
                }
            )
    return {"test": datasets.Dataset.from_list(rows)}


class SamplingTask(CalbenchTask):
    """N samples per prompt, scored against the prompt's law (``calbench.metrics.prompt_scores``)."""

    OVERALL: tuple[str, ...] = (
        *prompt_scores.FAMILY_METRICS,
        *prompt_scores.MOMENT_METRICS,
        *prompt_scores.OVERALL_ONLY,
        *(f"{m}_median" for m in prompt_scores.MEDIAN_METRICS),
    )
    PER_FAMILY: tuple[str, ...] = (*prompt_scores.FAMILY_METRICS, *prompt_scores.MOMENT_METRICS)

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> prompt_scores.Summary:
        return prompt_scores.summarize(prompt_scores.PromptScore.from_dict(r) for r in records)

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        responses = results[0]
        if isinstance(responses, str):  # a filter that kept one response only
            responses = [responses]
        target = make_target(doc["family"], json.loads(doc["params"]))
        return prompt_scores.score_prompt(target, list(responses)).to_dict()


class ProtocolTask(SamplingTask):
    """A sampling protocol other than independent requests (``calbench.protocols``): the same
    prompts' laws, targets and metrics, plus the protocol's diagnostics and the generated
    tokens per valid sample.

    ``num_samples`` is samples per prompt: a batch prompt gets ceil(N / K) requests. A seeded
    prompt's requests each carry their own seed (one request per seed, so ``repeats`` distinct
    contexts). Tokens are counted with the tokenizer of ``pretrained`` (or ``tokenizer``) in the
    model arguments; without one (the references) as UTF-8 bytes.
    """

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self.protocol = str((self.config.dataset_kwargs or {}).get("calbench_protocol"))
        if self.protocol not in protocols.PROTOCOLS:
            raise ValueError(
                f"{self.config.task}: dataset_kwargs.calbench_protocol must be one of {list(protocols.PROTOCOLS)}"
            )
        metadata = self.config.metadata or {}
        items = protocols.PROTOCOLS[self.protocol].items
        if metadata.get("num_samples") is not None and items > 1:
            self.config.repeats = -(-int(metadata["num_samples"]) // items)
        self.seed = int(metadata.get("calbench_seed", 0))
        self._tokenizer_source = metadata.get("tokenizer") or metadata.get("pretrained")
        self.OVERALL = (*SamplingTask.OVERALL, *protocol_metrics(self.protocol))
        self.PER_FAMILY = (*SamplingTask.PER_FAMILY, *protocol_metrics(self.protocol))

    def construct_requests(self, doc: dict[str, Any], ctx: Any, **kwargs: Any) -> Any:
        if self.protocol != "seeded":
            return super().construct_requests(doc, ctx, **kwargs)
        task, doc_id, repeats = kwargs.pop("metadata")
        kwargs.pop("apply_chat_template", None)
        kwargs.pop("chat_template", None)
        # An API chat backend's context is its messages as JSON text (lm-eval's JsonChatStr): the slot is in there
        text = ctx.prompt if hasattr(ctx, "prompt") and isinstance(ctx.prompt, str) else ctx
        if not isinstance(text, str) or protocols.SEED_SLOT not in text:
            raise ValueError(f"{self.config.task}: the context has no seed slot {protocols.SEED_SLOT!r}")

        def seeded(i: int) -> Any:
            filled = text.replace(protocols.SEED_SLOT, protocols.seed_string(self.seed, doc["id"], i))
            return filled if text is ctx else type(ctx)(filled)

        return [
            Instance(
                request_type="generate_until",
                doc=doc,
                arguments=(seeded(i), dict(self.config.generation_kwargs)),
                idx=i,
                metadata=(task, doc_id, 1),
                **kwargs,
            )
            for i in range(repeats)
        ]

    @lru_cache(maxsize=1)  # noqa: B019 - one task object, one tokenizer
    def _tokenizer(self) -> Any:
        if not self._tokenizer_source:
            return None
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(self._tokenizer_source))
        except (OSError, ValueError):
            return None

    def _tokens(self, text: str) -> int:
        tok = self._tokenizer()
        if tok is None:
            return len(text.encode())
        return len(tok(text, add_special_tokens=False)["input_ids"])

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> prompt_scores.Summary:
        summary = SamplingTask.summarize([{k: v for k, v in r.items() if k != "protocol"} for r in records])
        return protocol_summary(summary, records)

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        responses = [r for group in results for r in ([group] if isinstance(group, str) else group)]
        target = make_target(doc["family"], json.loads(doc["params"]))
        items, extras = protocol_diagnostics.samples_of(self.protocol, responses, target)
        per = protocols.PROTOCOLS[self.protocol].items
        valid = [
            sum(1 for i in items[j * per : (j + 1) * per] if classify(i, target).valid) for j in range(len(responses))
        ]
        extras["tokens_per_valid"] = protocol_diagnostics.tokens_per_valid([self._tokens(r) for r in responses], valid)
        return {**prompt_scores.score_prompt(target, items).to_dict(), "protocol": extras}


def protocol_metrics(protocol: str) -> tuple[str, ...]:
    """The diagnostics a protocol task reports besides the sampling metrics (its row's, ``Protocol.diagnostics``)."""
    return ("well_formed_rate", "tokens_per_valid", *protocols.PROTOCOLS[protocol].diagnostics)


def protocol_summary(summary: prompt_scores.Summary, records: list[dict[str, Any]]) -> prompt_scores.Summary:
    """``summary`` with the protocol diagnostics added: per family the mean over prompts, then
    equal weight over families (prompts or families without a value left out)."""
    names = sorted({k for r in records for k in r.get("protocol", {})})
    groups = {f: [r for r in records if r["family"] == f] for f in summary.families}
    families, overall = family_means(groups, names, lambda r, m: _pair(r["protocol"].get(m)), nan="omit")
    for family, metrics in families.items():
        summary.families[family].update(metrics)
    summary.overall.update(overall)
    return summary


def _pair(pair: Any) -> Estimate:
    if not pair or pair[0] is None:
        return UNDEFINED
    return Estimate(float(pair[0]), math.nan if pair[1] is None else float(pair[1]))
