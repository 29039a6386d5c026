"""``calbench eval --dry-run``: what a run would send, counted before anything is sent.

The tasks are built as lm-eval builds them (their documents, ``--limit``, the samples per prompt
of ``--num-samples`` or ``--metadata``), without a model. For each task: the prompts, the
samples per prompt, the requests (on an API backend one per sample, or one per ``n`` samples
with calbench's API backends; a batch protocol's request holds K samples), the prompt tokens
(each request sends its prompt again) and at most how many answer tokens (``max_gen_toks``
per completion). Tokens are counted with the tokenizer of ``tokenizer=`` or ``pretrained=``
when the model arguments name a local one, else estimated at 4 characters per token; a chat
template adds its own few tokens per request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text under BPE tokenizers


@dataclass(frozen=True)
class TaskCost:
    task: str
    prompts: int
    samples_per_prompt: int
    requests: int
    prompt_tokens: int
    answer_tokens_max: int


def _counter(model_args: Mapping[str, Any]) -> tuple[Any, str]:
    """A token counter and what it is: a local tokenizer's, or 4 characters per token."""
    for key in ("tokenizer", "pretrained"):
        source = model_args.get(key)
        if isinstance(source, str) and Path(source).expanduser().is_dir():
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(Path(source).expanduser()))
            return (
                lambda text, tok=tok: len(tok(text, add_special_tokens=False)["input_ids"])
            ), f"the tokenizer of {key}="
    return (lambda text: math.ceil(len(text) / CHARS_PER_TOKEN)), f"about {CHARS_PER_TOKEN} characters per token"


def preview(
    tasks: Sequence[str],
    include_path: str,
    metadata: Mapping[str, Any],
    model_args: Mapping[str, Any],
    limit: float | None = None,
    samples_per_request: int = 1,
) -> tuple[list[TaskCost], str]:
    """Each task's cost, and how tokens were counted."""
    from lm_eval.tasks import TaskManager, get_task_dict

    from calbench import protocols

    manager = TaskManager(include_path=include_path, include_defaults=False, metadata=dict(metadata))
    count, how = _counter(model_args)
    out = []
    for name, task in _leaves(get_task_dict(list(tasks), manager)):
        docs = list(task.eval_docs)
        if limit is not None:
            docs = docs[: int(limit) if limit >= 1 else math.ceil(len(docs) * limit)]
        repeats = int(task.config.repeats or 1)
        gen = task.config.generation_kwargs or {}
        sampled = task.config.output_type == "generate_until" and gen.get("do_sample") is True
        per_request = 1
        protocol = (task.config.dataset_kwargs or {}).get("calbench_protocol")
        if protocol in protocols.PROTOCOLS:
            per_request = protocols.PROTOCOLS[protocol].items
        joined = samples_per_request if sampled else 1
        requests = len(docs) * math.ceil(repeats / joined)
        prompt_tokens = sum(count(str(task.doc_to_text(d))) for d in docs) * math.ceil(repeats / joined)
        answer = int(gen.get("max_gen_toks", 256)) if task.config.output_type == "generate_until" else 0
        out.append(
            TaskCost(name, len(docs), repeats * per_request, requests, prompt_tokens, len(docs) * repeats * answer)
        )
    return out, how


def _leaves(tasks: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    """A task dict's tasks (groups opened), by name."""
    out = []
    for key, value in tasks.items():
        if isinstance(value, Mapping):
            out += _leaves(value)
        else:
            config = getattr(value, "config", None)
            out.append((str(config.task) if config is not None else str(key), value))
    return out


def render(costs: Sequence[TaskCost], how: str, backend: str, samples_per_request: int) -> str:
    from tabulate import tabulate

    rows = [
        [c.task, c.prompts, c.samples_per_prompt, f"{c.requests:,}", f"{c.prompt_tokens:,}", f"{c.answer_tokens_max:,}"]
        for c in costs
    ]
    total = [sum(getattr(c, k) for c in costs) for k in ("requests", "prompt_tokens", "answer_tokens_max")]
    table = tabulate(
        rows, headers=["task", "prompts", "samples/prompt", "requests", "prompt tokens", "answer tokens (at most)"]
    )
    n = f", n={samples_per_request} samples per request" if samples_per_request > 1 else ""
    return (
        f"calbench eval --dry-run: nothing was sent. --model {backend}{n}; tokens: {how}\n{table}\n"
        f"total: {total[0]:,} requests, about {total[1]:,} prompt tokens and at most {total[2]:,} answer tokens"
    )
