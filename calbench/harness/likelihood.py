"""The likelihood tasks: the model's exact probability of every canonical answer."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from lm_eval.api.instance import Instance

from calbench.answer_tokens import terminator
from calbench.families import make_target
from calbench.harness.base import CalbenchTask
from calbench.harness.numeric import numeric_docs
from calbench.metrics import likelihood
from calbench.space import DEFAULT_DECIMALS, EVAL_MAX_BINS, Space, canonical_space
from calbench.stats import Summary


def likelihood_docs(
    calbench_split: str = "unseen",
    calbench_points: str = "selected",
    calbench_decimals: int = DEFAULT_DECIMALS,
    calbench_max_bins: int = EVAL_MAX_BINS,
    calbench_terminator: str | None = None,
    pretrained: Any = None,
    tokenizer: Any = None,
    **_: Any,
) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` of the likelihood tasks: each prompt with its canonical answers.

    The choices are every canonical string followed by the model's terminator, whose
    text comes from the model's tokenizer (``pretrained`` or ``tokenizer`` in
    ``--model_args``), or from ``--metadata '{"calbench_terminator": ...}'``.
    """
    import datasets

    end = calbench_terminator if calbench_terminator is not None else _terminator_text(tokenizer or pretrained)
    docs = numeric_docs(calbench_split, calbench_points)["test"].to_list()
    for doc in docs:
        space = _space(doc["family"], doc["params"], calbench_decimals, calbench_max_bins)
        doc["choices"] = [s + end for s in space.strings]
        doc["decimals"] = calbench_decimals
        doc["max_bins"] = calbench_max_bins
    return {"test": datasets.Dataset.from_list(docs)}


@lru_cache(maxsize=4096)
def _space(family: str, params: str, decimals: int, max_bins: int) -> Space:
    """A document's canonical space, built once: its choices and the scoring of its answers share it."""
    return canonical_space(make_target(family, json.loads(params)), decimals, max_bins)


def _terminator_text(source: Any) -> str:
    if source is None:
        raise ValueError(
            "calbench likelihood tasks score each answer with the model's end-of-turn/EOS token: "
            "pass pretrained=... (or tokenizer=...) in --model_args, or set it with "
            '--metadata \'{"calbench_terminator": "<|im_end|>"}\''
        )
    from transformers import AutoTokenizer

    tok = source if not isinstance(source, str) else AutoTokenizer.from_pretrained(source)
    token = tok.convert_ids_to_tokens(terminator(tok, chat=bool(getattr(tok, "chat_template", None))))
    return str(token)


class LikelihoodTask(CalbenchTask):
    """The model's exact probability of every canonical answer (``calbench.metrics.likelihood``)."""

    OVERALL = likelihood.METRICS
    PER_FAMILY = likelihood.METRICS
    OPTIONAL = ("logit_kl",)  # needs per-token log-probs: calbench-hf and calbench-oracle
    STDERR = False  # exact given the model: no sampling noise to report

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> Summary:
        return likelihood.summarize(records)

    def construct_requests(self, doc: dict[str, Any], ctx: Any, **kwargs: Any) -> list[Instance]:
        """The choices' requests, then one more for the delimiter alone (the anchor).

        lm-eval moves the prompt's trailing whitespace (a chat template's final newline)
        into every continuation, and the task's delimiter is one too; their
        log-probability, scored alone, is subtracted from every answer's, so calbench
        conditions on exactly the prompt the model samples from.
        """
        requests = list(super().construct_requests(doc, ctx, **kwargs))
        first_choice = self.doc_to_choice(doc)[0]
        first = requests[0].arguments[1]
        delimiter = first[: len(first) - len(first_choice)]
        extra = {k: v for k, v in kwargs.items() if k not in ("apply_chat_template", "chat_template")}
        anchor = Instance(request_type="loglikelihood", doc=doc, arguments=(ctx, delimiter), idx=len(requests), **extra)
        return [*requests, anchor]

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        target = make_target(doc["family"], json.loads(doc["params"]))
        space = _space(doc["family"], doc["params"], doc["decimals"], doc["max_bins"])
        lls = [r[0] for r in results]
        return likelihood.score_choices(target, space, lls[:-1], anchor=lls[-1])
