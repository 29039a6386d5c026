"""lm-eval adapters for the numeric sampling tasks: documents, filter, task class, aggregations.

The task YAML in ``tasks/`` names everything here by dotted path. This module only
translates between lm-eval's shapes and calbench's pure functions (``sampling_scores``, ``likelihood_metrics``).

Per-family results appear in lm-eval's own table: besides the overall metrics (equal
weight over families), each task reports ``<metric>/<family>``. lm-eval prints a
``<metric>_stderr`` value next to its metric; calbench fills it with the metric's
standard error (see ``calbench.sampling_scores``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.task import ConfigurableTask

from calbench import enumeration_metrics, likelihood_metrics, policy, protocols, sampling_scores
from calbench.answer_tokens import terminator
from calbench.families import FAMILIES, make_target, split_points
from calbench.parse import classify
from calbench.prompt import prompt_text
from calbench.sampling_metrics import iqr
from calbench.space import DEFAULT_DECIMALS, EVAL_MAX_BINS, Space, canonical_space
from calbench.stats import UNDEFINED, Estimate, quadrature_mean

SPLIT_CHOICES = ("unseen", "heldout", "all")
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
    if calbench_protocol != "independent" and calbench_protocol not in protocols.PROTOCOLS:
        raise ValueError(
            f"calbench_protocol must be one of {('independent', *protocols.PROTOCOLS)}, got {calbench_protocol!r}"
        )
    text = prompt_text if calbench_protocol == "independent" else partial(protocols.protocol_text, calbench_protocol)
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
                    "prompt": text(target),
                }
            )
    return {"test": datasets.Dataset.from_list(rows)}


def keep_all(resps: Sequence[Sequence[str]], docs: Sequence[dict[str, Any]]) -> Sequence[Sequence[str]]:
    """Filter that keeps every repeat (lm-eval's default keeps only the first)."""
    return resps


def metric_keys(metrics: Sequence[str], family: str | None = None, stderr: bool = True) -> list[str]:
    """Names a document reports: ``<metric>``, or ``<metric>/<family>`` when ``family`` is given."""
    names = list(metrics) if family is None else [f"{m}/{family}" for m in metrics]
    # A metric's standard error must come after the metric: lm-eval first writes "N/A"
    # under "<metric>_stderr", then the aggregation of our "<metric>_stderr" replaces it.
    return [k for name in names for k in ((name, f"{name}_stderr") if stderr else (name,))]


def _aggregate(
    summarize: Callable[[list[dict[str, Any]]], sampling_scores.Summary],
    group: str,
    key: str,
    items: list[dict[str, Any]],
) -> float:
    base, stderr, _ = key.partition("_stderr")
    metric, _, family = base.partition("/")
    records = [i for i in items if not family or i[group] == family]
    if not records:  # a family all of whose prompts `--limit` left out
        return float("nan")
    summary = summarize(records)
    estimate = summary.families[family][metric] if family else summary.overall[metric]
    return estimate.se if stderr else estimate.value


class CalbenchTask(ConfigurableTask):
    """A ConfigurableTask scored by calbench: one JSON record per document, aggregated by calbench.

    Subclasses name their metrics and turn (document, model outputs) into a record.
    ``--metadata '{"num_samples": N}'`` sets ``repeats`` for a run (sampling tasks only: a
    likelihood task scores every answer once, whatever N).
    """

    OVERALL: tuple[str, ...] = ()  # reported over the whole task
    PER_FAMILY: tuple[str, ...] = ()  # also reported per family
    OPTIONAL: tuple[str, ...] = ()  # reported only when a record defines them
    STDERR = True  # calbench fills lm-eval's stderr column
    SAMPLED = True  # False: one answer per item whatever num_samples (greedy tasks)
    GROUP = "family"  # the document column (and record key) the per-group metrics split on
    GROUPS: tuple[str, ...] = tuple(FAMILIES)  # its values, in report order

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        config = dict(config or {})
        config.pop("class", None)  # lm-eval hands the YAML's own `class:` key back to us
        super().__init__(config=config, **kwargs)
        n = (self.config.metadata or {}).get("num_samples")
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{self.config.task}: metadata num_samples must be a positive integer, got {n!r}")
            if self.config.output_type == "generate_until" and self.SAMPLED:  # exact tasks score each answer once
                self.config.repeats = n
        # Every document reports every family's keys (each aggregation keeps its own
        # family's records), so lm-eval sees equal counts for all metrics.
        split = self.dataset[self.config.test_split]
        present = set(split[self.GROUP]) if self.GROUP in split.column_names else set()
        self._families = [f for f in self.GROUPS if f in present]

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # Same as lm-eval's custom_dataset path, without its warning about --metadata.
        self.dataset = self.config.custom_dataset(**(self.config.metadata or {}), **(self.config.dataset_kwargs or {}))

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> sampling_scores.Summary:
        raise NotImplementedError

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _grouped_keys(self, optional: Sequence[str]) -> list[tuple[str, str | None]]:
        """Every key a document reports, with its group (None: overall)."""
        overall = [(k, None) for k in metric_keys([*self.OVERALL, *optional], stderr=self.STDERR)]
        per_family = [*self.PER_FAMILY, *optional]
        return overall + [(k, f) for f in self._families for k in metric_keys(per_family, f, self.STDERR)]

    def _all_keys(self, optional: Sequence[str]) -> list[str]:
        return [k for k, _ in self._grouped_keys(optional)]

    def process_results(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        record = self.record(doc, results)
        optional = [m for m in self.OPTIONAL if record.get(m) is not None]
        # Another group's keys get only the group (their aggregation leaves this record out):
        # lm-eval logs every key's value, and a full record under each group's keys made
        # samples logs tens of megabytes.
        mine, stub = record.get(self.GROUP), {self.GROUP: record.get(self.GROUP)}
        return {k: record if g in (None, mine) else stub for k, g in self._grouped_keys(optional)}

    def aggregation(self) -> dict[str, Callable[[list[Any]], float]]:
        keys = self._all_keys(self.OPTIONAL)
        return {k: partial(_aggregate, type(self).summarize, self.GROUP, k) for k in keys}

    def higher_is_better(self) -> dict[str, bool]:
        return {k: policy.higher_is_better(k) for k in self._all_keys(self.OPTIONAL)}


class SamplingTask(CalbenchTask):
    """N samples per prompt, scored against the prompt's law (``calbench.sampling_scores``)."""

    OVERALL: tuple[str, ...] = (
        *sampling_scores.FAMILY_METRICS,
        *sampling_scores.OVERALL_ONLY,
        *(f"{m}_median" for m in sampling_scores.MEDIAN_METRICS),
    )
    PER_FAMILY: tuple[str, ...] = sampling_scores.FAMILY_METRICS

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> sampling_scores.Summary:
        return sampling_scores.summarize(sampling_scores.PromptScore.from_dict(r) for r in records)

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        responses = results[0]
        if isinstance(responses, str):  # a filter that kept one response only
            responses = [responses]
        target = make_target(doc["family"], json.loads(doc["params"]))
        return sampling_scores.score_prompt(target, list(responses)).to_dict()


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
        if protocols.SEED_SLOT not in ctx:
            raise ValueError(f"{self.config.task}: the context has no seed slot {protocols.SEED_SLOT!r}")
        return [
            Instance(
                request_type="generate_until",
                doc=doc,
                arguments=(
                    ctx.replace(protocols.SEED_SLOT, protocols.seed_string(self.seed, doc["id"], i)),
                    dict(self.config.generation_kwargs),
                ),
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
    def summarize(records: list[dict[str, Any]]) -> sampling_scores.Summary:
        summary = SamplingTask.summarize([{k: v for k, v in r.items() if k != "protocol"} for r in records])
        return protocol_summary(summary, records)

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        responses = [r for group in results for r in ([group] if isinstance(group, str) else group)]
        target = make_target(doc["family"], json.loads(doc["params"]))
        items, extras = protocols.samples_of(self.protocol, responses, target)
        per = protocols.PROTOCOLS[self.protocol].items
        valid = [
            sum(1 for i in items[j * per : (j + 1) * per] if classify(i, target).valid) for j in range(len(responses))
        ]
        extras["tokens_per_valid"] = protocols.tokens_per_valid([self._tokens(r) for r in responses], valid)
        return {**sampling_scores.score_prompt(target, items).to_dict(), "protocol": extras}


def protocol_metrics(protocol: str) -> tuple[str, ...]:
    """The diagnostics a protocol task reports besides the sampling metrics."""
    extra = {"batch": ("lag1_autocorr", "runs_z", "duplicate_excess"), "verbalized": ("verbalized_w1_iqr",)}
    return ("well_formed_rate", "tokens_per_valid", *extra.get(protocol, ()))


def protocol_summary(summary: sampling_scores.Summary, records: list[dict[str, Any]]) -> sampling_scores.Summary:
    """``summary`` with the protocol diagnostics added: per family the mean over prompts, then
    equal weight over families (prompts or families without a value left out)."""
    names = sorted({k for r in records for k in r.get("protocol", {})})
    for name in names:
        for family in summary.families:
            values = [_pair(r["protocol"].get(name)) for r in records if r["family"] == family]
            summary.families[family][name] = quadrature_mean(values, nan="omit")
        summary.overall[name] = quadrature_mean([summary.families[f][name] for f in summary.families], nan="omit")
    return summary


def _pair(pair: Any) -> Estimate:
    if not pair or pair[0] is None:
        return UNDEFINED
    return Estimate(float(pair[0]), math.nan if pair[1] is None else float(pair[1]))


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
    """The model's exact probability of every canonical answer (``calbench.likelihood_metrics``)."""

    OVERALL = likelihood_metrics.METRICS
    PER_FAMILY = likelihood_metrics.METRICS
    OPTIONAL = ("logit_kl",)  # needs per-token log-probs: calbench-hf and calbench-oracle
    STDERR = False  # exact given the model: no sampling noise to report

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> sampling_scores.Summary:
        return likelihood_metrics.summarize(records)

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
        return likelihood_metrics.score_choices(target, space, lls[:-1], anchor=lls[-1])


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
    and the law's answer space (``answer_enumeration.AnswerSpace``: support, integer or not, and
    the window the metrics clip values to)."""
    budget = {"nodes": int(nodes), "batch": int(batch), "residual": float(residual), "refine": bool(refine)}
    budget["resolution"] = resolution * iqr(target)
    space = {
        "support": list(target.support()),
        "integer": bool(target.integer),
        "window": list(enumeration_metrics.window(target)),
    }
    return {"budget": budget, "space": space}


class EnumerationTask(CalbenchTask):
    """The sample-free numeric tasks: each prompt's whole answer distribution, enumerated
    (``calbench.answer_enumeration``) and scored against its law (``calbench.enumeration_metrics``).

    One request per prompt, of calbench's own kind, with the sampling task's generation
    settings (the distribution enumerated is that of its samples). ``--metadata`` sets the
    budget: ``calbench_enum_nodes`` (prefixes expanded, default 2000), ``calbench_enum_residual``
    (stop once the frontier holds at most this mass, 0.01) and ``calbench_enum_resolution``
    (resolve prefixes narrower than this many IQRs within the law's window, 0.01) and
    ``calbench_enum_refine`` (1: spend the prefixes left over on resolved ones, 0 by default).
    """

    OVERALL = (*enumeration_metrics.METRICS, *(f"{m}_median" for m in enumeration_metrics.MEDIAN_METRICS))
    PER_FAMILY = enumeration_metrics.METRICS
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
    def summarize(records: list[dict[str, Any]]) -> sampling_scores.Summary:
        return enumeration_metrics.summarize(records)

    def record(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        target = make_target(doc["family"], json.loads(doc["params"]))
        return enumeration_metrics.score_enumeration(target, results[0])


def _refuse_enumeration(self: Any, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
    raise NotImplementedError(
        f"{type(self).__name__} cannot enumerate a model's answers, which the sample-free tasks "
        f"(calbench_numeric_*_exact) need: run them with --model calbench-hf, or a calbench reference"
    )


# lm-eval runs a request by calling the model's method named after its kind: without this, a
# backend that lacks it would fail with a bare AttributeError under plain `lm_eval` as well.
if not hasattr(LM, policy.ENUMERATE_ANSWERS):
    setattr(LM, policy.ENUMERATE_ANSWERS, _refuse_enumeration)
