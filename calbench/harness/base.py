"""The base of calbench's lm-eval tasks: one JSON record per document, aggregated by calbench.

lm-eval prints a ``<metric>_stderr`` value next to each metric; calbench fills it with the
metric's standard error. Per-family results appear in lm-eval's own table: besides the
overall metrics (equal weight over families), each task reports ``<metric>/<family>``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.task import ConfigurableTask

from calbench import api_support
from calbench.families import ALL_FAMILIES
from calbench.metrics import catalog
from calbench.stats import Summary

logger = logging.getLogger(__name__)
DEFAULT_RUN_SEED = 1234  # lm-eval's default fewshot seed


def _is_template_api(lm: Any) -> bool:
    from lm_eval.models.api_models import TemplateAPI

    return isinstance(lm, TemplateAPI)


def api_backend(lm: Any) -> str | None:
    """The lm-eval name of an API model's backend (its class's name for one calbench does not know)."""
    if not _is_template_api(lm):
        return None
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI, OpenAIChatCompletion

    named = getattr(type(lm), "CALBENCH_NAME", None)
    for cls, name in ((OpenAIChatCompletion, "openai-chat-completions"), (LocalChatCompletion, "local-chat-completions"),
                      (LocalCompletionsAPI, "local-completions")):  # fmt: skip
        if named is None and type(lm) is cls:
            return name
    return named or type(lm).__name__


PROBE_SEED = 271828  # a seed no backend sends of its own accord


def check_payload_seed(lm: Any, backend: str | None) -> None:
    """Refuse a backend whose request keeps its own seed over the one a request's settings give
    (the seed guard could not work): build its payload for one probe request, send nothing."""
    from lm_eval.models.openai_completions import LocalChatCompletion

    messages: Any = [{"role": "user", "content": "1"}] if isinstance(lm, LocalChatCompletion) else "1"
    gen = {"until": [], "max_gen_toks": 1, "temperature": 1.0, "seed": PROBE_SEED}
    try:
        payload = lm._create_payload(messages, generate=True, gen_kwargs=gen, seed=getattr(lm, "_seed", 0), eos=None)
    except (AssertionError, TypeError, KeyError, ValueError, AttributeError) as err:
        raise api_support.ApiSetupError(
            f"--model {backend}: calbench cannot tell whether its requests carry each sample's own seed ({err!r})"
        ) from None
    if not isinstance(payload, dict) or payload.get("seed") != PROBE_SEED:
        sent = payload.get("seed") if isinstance(payload, dict) else None
        raise api_support.ApiSetupError(
            f"--model {backend}: its requests carry its own seed ({sent}) whatever a request asks, so the N "
            "samples of a prompt would be one draw N times: use local-chat-completions or local-completions"
        )


def keep_all(resps: Sequence[Sequence[str]], docs: Sequence[dict[str, Any]]) -> Sequence[Sequence[str]]:
    """Filter that keeps every repeat (lm-eval's default keeps only the first)."""
    return resps


def metric_keys(metrics: Sequence[str], family: str | None = None, stderr: bool = True) -> list[str]:
    """Names a document reports: ``<metric>``, or ``<metric>/<family>`` when ``family`` is given."""
    names = list(metrics) if family is None else [f"{m}/{family}" for m in metrics]
    # A metric's standard error must come after the metric: lm-eval first writes "N/A"
    # under "<metric>_stderr", then the aggregation of our "<metric>_stderr" replaces it.
    return [k for name in names for k in ((name, f"{name}_stderr") if stderr else (name,))]


def content_key(records: list[dict[str, Any]]) -> str:
    """The records' content as one string: equal records, equal key (all a summary depends on)."""
    return json.dumps(records, sort_keys=True, default=repr)


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
    GROUPS: tuple[str, ...] = tuple(ALL_FAMILIES)  # its values, in report order (the 30, then training-only laws)

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
        self._summaries: dict[str, Summary] = {}  # this task's summaries, by their records' content
        self._aggregations: dict[str, Callable[[list[Any]], float]] | None = None
        self._run_seed = DEFAULT_RUN_SEED
        self._per_sample = False  # each sample its own request (an API backend): process_results joins them

    def set_fewshot_seed(self, seed: int | None = None) -> None:
        """lm-eval hands every task the run's seed (``--seed``'s fourth value, 1234 unless set):
        on an API backend it is the seed each sample's own seed is derived from."""
        super().set_fewshot_seed(seed)
        self._run_seed = DEFAULT_RUN_SEED if seed is None else int(seed)

    def build_all_requests(self, **kwargs: Any) -> None:
        """lm-eval's requests; on an API backend, a sampling request's N repeats become N requests,
        each with its own seed (``calbench.api_support``), or the run is refused in one line."""
        super().build_all_requests(**kwargs)
        lm = getattr(kwargs.get("chat_template"), "__self__", None)  # the model, where lm-eval hands it over
        metadata = self.config.metadata or {}
        backend = api_backend(lm) if lm is not None else metadata.get(api_support.METADATA_BACKEND)
        api = lm is not None and _is_template_api(lm)
        if not (api or (lm is None and api_support.is_api_run(backend, metadata))):
            return
        api_support.check_api_args(backend, metadata)
        if lm is not None:
            check_payload_seed(lm, backend)
        self._instances = self._one_request_per_sample(list(self.instances), backend)

    def _one_request_per_sample(self, instances: list[Instance], backend: str | None) -> list[Instance]:
        out: list[Instance] = []
        index: Counter[Any] = Counter()  # a document's samples so far
        sampled: dict[str, Any] | None = None  # the task's sampling settings (one per task)
        for inst in instances:
            gen = inst.args[1] if inst.request_type == "generate_until" and len(inst.args) > 1 else None
            if not isinstance(gen, dict) or gen.get("do_sample") is not True:
                out.append(inst)  # greedy requests and scoring: one answer, nothing to draw apart
                continue
            if sampled is None:
                sampled = gen
            doc = str(inst.doc.get("id", inst.doc_id)) if isinstance(inst.doc, dict) else str(inst.doc_id)
            for _ in range(int(inst.repeats or 1)):
                k = index[inst.doc_id]
                index[inst.doc_id] += 1
                seed = api_support.sample_seed(self._run_seed, str(self.config.task), doc, k)
                arguments = (inst.args[0], api_support.sent_settings(gen, backend, seed), *inst.args[2:])
                out.append(
                    Instance(inst.request_type, inst.doc, arguments, idx=k, metadata=(inst.task_name, inst.doc_id, 1))
                )
        if sampled is not None:
            line = api_support.withheld_line(sampled, backend)
            if line:
                logger.warning("%s: %s", self.config.task, line)
            record = api_support.plan(sampled, backend, self._run_seed, max(index.values()))
            self.config.metadata = {**(self.config.metadata or {}), api_support.METADATA_PLAN: record}
            self._per_sample = True
        return out

    def fewshot_context(
        self,
        doc: dict[str, Any],
        num_fewshot: int,
        system_instruction: str | None = None,
        apply_chat_template: bool = False,
        fewshot_as_multiturn: bool = False,
        chat_template: Callable[..., str] | None = None,
        gen_prefix: str | None = None,
    ) -> Any:
        """lm-eval's context, and for a model without a chat template the prompt's line ended.

        A base model is conditioned on the prompt and a newline (``calbench.prompt.render``),
        as the training add-on trains it: its answer starts on a fresh line. lm-eval would
        send the bare prompt, and a model trained on the line's end then answers from another
        context (a Gemma-3-270M adapter wrote ``27641`` for ``2.7641``). Under a chat template
        the context is lm-eval's own, unchanged.
        """
        context = super().fewshot_context(
            doc,
            num_fewshot,
            system_instruction=system_instruction,
            apply_chat_template=apply_chat_template,
            fewshot_as_multiturn=fewshot_as_multiturn,
            chat_template=chat_template,
            gen_prefix=gen_prefix,
        )
        if (apply_chat_template and chat_template) or gen_prefix or not isinstance(context, str):
            return context
        return context if context.endswith("\n") else context + "\n"

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # Same as lm-eval's custom_dataset path, without its warning about --metadata.
        self.dataset = self.config.custom_dataset(**(self.config.metadata or {}), **(self.config.dataset_kwargs or {}))

    @staticmethod
    def summarize(records: list[dict[str, Any]]) -> Summary:
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
        if self._per_sample:  # one request per sample: the prompt's N answers, as one request's N
            results = [[r for group in results for r in (group if isinstance(group, list) else [group])]]
        record = self.record(doc, results)
        optional = [m for m in self.OPTIONAL if record.get(m) is not None]
        # Another group's keys get only the group (their aggregation leaves this record out):
        # lm-eval logs every key's value, and a full record under each group's keys made
        # samples logs tens of megabytes.
        mine, stub = record.get(self.GROUP), {self.GROUP: record.get(self.GROUP)}
        return {k: record if g in (None, mine) else stub for k, g in self._grouped_keys(optional)}

    def aggregation(self) -> dict[str, Callable[[list[Any]], float]]:
        # lm-eval asks for the whole map once per metric key (``task.aggregation()[metric]``): built
        # once per task, not once per key (hundreds of keys: quadratic, 22 of 146 s of the protocol
        # tasks' reference runs)
        if self._aggregations is None:
            self._aggregations = {k: partial(self._aggregate, k) for k in self._all_keys(self.OPTIONAL)}
        return self._aggregations

    def _aggregate(self, key: str, items: list[dict[str, Any]]) -> float:
        """One metric key's value (or its standard error), from the summary of its records."""
        base, stderr, _ = key.partition("_stderr")
        metric, _, family = base.partition("/")
        records = [i for i in items if not family or i[self.GROUP] == family]
        if not records:  # a family all of whose prompts `--limit` left out
            return float("nan")
        summary = self._summary(records)
        estimate = summary.families[family][metric] if family else summary.overall[metric]
        return estimate.se if stderr else estimate.value

    def _summary(self, records: list[dict[str, Any]]) -> Summary:
        """``summarize(records)``, computed once per content: lm-eval aggregates each metric key
        apart (414 keys for calbench_numeric_unseen), and every key of the task (or of one
        family) gets the same records."""
        key = content_key(records)
        if key not in self._summaries:
            self._summaries[key] = type(self).summarize(records)
        return self._summaries[key]

    def higher_is_better(self) -> dict[str, bool]:
        return {k: catalog.higher_is_better(k) for k in self._all_keys(self.OPTIONAL)}
