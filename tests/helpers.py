"""Oracles and loaders shared by the tests, one copy each (``from tests.helpers import ...``).

Each oracle is written independently of the calbench code it checks: in-context
tokenization by the tokenizer itself, a pooled chi-square test by scipy, task YAML read
as plain data, the valid rate recomputed from the logged samples by the parser alone.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import yaml
from numpy.typing import ArrayLike
from scipy import stats

# ---- tiers ------------------------------------------------------------------------------


def integration_except(fast: Any, values: Iterable[Any]) -> list[Any]:
    """``parametrize`` values where only ``fast`` runs in the fast tier; the others are
    marked ``integration`` (plain ``pytest`` skips them, ``pytest -m ""`` runs them)."""
    return [v if v == fast else pytest.param(v, marks=pytest.mark.integration) for v in values]


# ---- models -----------------------------------------------------------------------------


def load_tokenizer(path: str | Path) -> Any:
    """A fresh tokenizer of a local model folder (fresh: some tests change it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_model(path: str | Path) -> Any:
    """A local causal LM in float32, in eval mode (a fresh copy: some tests wrap or train it)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def evaluate_local(backend: str, tasks: Sequence[str], path: str | Path | None = None, **kwargs: Any) -> Any:
    """An lm-eval run through ``calbench.evaluation`` on the CPU, of a local model folder (if any) in float32."""
    from calbench import evaluation

    kwargs.setdefault("output_path", None)
    model_args = f"pretrained={path},dtype=float32" if path else kwargs.pop("model_args", "")
    return evaluation.evaluate(backend, list(tasks), model_args=model_args, device="cpu", **kwargs)


REFERENCES = ("calbench-oracle", "calbench-collapsed")  # the reference systems (conftest.references runs them)


def plain_lm_eval(pretrained: str | Path, tasks: str, output: Path, *extra: str) -> Any:
    """The documented command as a user types it: plain ``lm_eval`` on the ``hf`` backend, a local
    model folder in float32 on the CPU, calbench's task folder, the chat template, results and
    samples logs under ``output``; ``extra`` adds lm_eval flags. The finished process (not checked)."""
    from calbench import tasks_path

    cmd = [
        "lm_eval", "--model", "hf", "--model_args", f"pretrained={pretrained},dtype=float32",
        "--include_path", str(tasks_path()), "--tasks", tasks, "--apply_chat_template", "--device", "cpu",
        "--output_path", str(output), "--log_samples", *extra,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


# ---- tokenization -----------------------------------------------------------------------


def in_context_tokens(tokenizer: Any, prompt: str, answers: Iterable[str]) -> list[list[int]]:
    """Each answer's token ids as the tokenizer splits the whole ``prompt + answer``.

    The oracle for ``calbench.answer_tokens``: the ids after the prompt's own ids. The
    prompt's ids must begin every joint tokenization, or "after the prompt" means nothing.
    """
    whole = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out = []
    for answer in answers:
        joint = tokenizer(prompt + answer, add_special_tokens=False)["input_ids"]
        assert joint[: len(whole)] == whole, f"{answer!r} merges with the end of the prompt"
        out.append(joint[len(whole) :])
    return out


# ---- statistics -------------------------------------------------------------------------


class ChiSquare(NamedTuple):
    statistic: float
    pvalue: float
    cells: int  # after pooling


def pooled_chisquare(observed: ArrayLike, expected: ArrayLike, min_expected: float = 5.0) -> Any:
    """scipy's chi-square test after pooling every cell expecting fewer than ``min_expected`` into one.

    Returns scipy's statistic and p-value, and the number of cells tested.
    """
    obs, exp = np.asarray(observed, dtype=float), np.asarray(expected, dtype=float)
    big = exp >= min_expected
    if not big.all():
        obs = np.append(obs[big], obs[~big].sum())
        exp = np.append(exp[big], exp[~big].sum())
    result = stats.chisquare(obs, exp)
    return ChiSquare(float(result.statistic), float(result.pvalue), int(obs.size))


def z_score(task_results: Mapping[str, Any], key: str) -> float:
    """A sampling metric over its standard error, from one task's lm-eval results (``<key>,samples``)."""
    return float(task_results[f"{key},samples"] / task_results[f"{key}_stderr,samples"])


# ---- task YAML --------------------------------------------------------------------------


class TaskLoader(yaml.SafeLoader):
    """Reads task YAML as data (nothing runs): ``!function x`` stays the string "!function x",
    and a key given twice in one mapping is an error (YAML would silently keep the last)."""


def _function_tag(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    return f"!function {loader.construct_scalar(node)}"


def _no_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    assert not dupes, f"duplicate keys {dupes} at {node.start_mark}"
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


TaskLoader.add_constructor("!function", _function_tag)
TaskLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def load_task_yaml(path: str | Path) -> Any:
    """One task YAML file as data (``TaskLoader``)."""
    return yaml.load(Path(path).read_text(), Loader=TaskLoader)  # a SafeLoader subclass: nothing is executed


# ---- logged samples ---------------------------------------------------------------------


def read_samples_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of an lm-eval ``samples_*.jsonl`` log."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def valid_rates(samples: Iterable[Mapping[str, Any]]) -> tuple[Any, dict[str, Any]]:
    """The overall and per-family valid rate of a numeric sampling run, from its logged samples.

    By the definition, as ``calbench.stats.Estimate``s: per prompt the share of its responses
    that ``calbench.parse.classify`` calls valid (standard error ``stats.rate_se``), per family
    the mean over its prompts, overall the mean over families (errors added in quadrature).
    """
    from calbench.families import make_target
    from calbench.parse import classify
    from calbench.stats import Estimate, rate_se

    by_family: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for sample in samples:
        doc = sample["doc"]
        target = make_target(doc["family"], json.loads(doc["params"]))
        responses = sample["resps"][0]
        by_family[doc["family"]].append((sum(classify(r, target).valid for r in responses), len(responses)))

    def mean(parts: Sequence[tuple[float, float]]) -> Any:
        return Estimate(
            float(np.mean([v for v, _ in parts])), float(np.sqrt(sum(se**2 for _, se in parts)) / len(parts))
        )

    families = {f: mean([(k / n, rate_se(k, n)) for k, n in counts]) for f, counts in by_family.items()}
    return mean([(e.value, e.se) for e in families.values()]), families


# ---- sampling only what a test reads ----------------------------------------------------


NUMBER_CHARS = frozenset("0123456789+-.eE")  # what an answer may hold once reasoning and whitespace are gone


def never_parses(prefix: str) -> bool:
    """Whether no text that begins with ``prefix`` parses as a number (``calbench.parse``): a
    character that no number holds stands before the first ``<`` (text before it is never inside a
    reasoning block, and only surrounding whitespace is stripped). Whitespace, and the replacement
    character an incomplete multi-byte token decodes to, leave the answer open. A test that reads
    only an answer's validity may stop a sample here: every continuation classifies the same."""
    head = prefix.split("<", 1)[0]
    return any(c not in NUMBER_CHARS and not c.isspace() and c != "\ufffd" for c in head)


def sample_until_decided(
    model: Any,
    prompts: list[Any],
    counts: list[int],
    max_gen_toks: int,
    temperature: float,
    stop: set[int],
    decided: Callable[[list[int]], bool],
    chunk: int = 4,
) -> list[list[list[int]]]:
    """``calbench.backends.sampler.sample_many`` (same arguments, same result), ``chunk`` tokens at
    a time: after each chunk a sample whose tokens so far are ``decided`` is not continued. Each
    sample's law is the sampler's: a prefix goes on by sampling after the prompt and that prefix
    (the chain rule), so only where a sample stops changes, never what it reads."""
    import torch

    from calbench.backends import sampler

    done: list[list[list[int]]] = [[] for _ in prompts]
    pending = [(i, list[int](), c) for i, c in enumerate(counts) if c]  # (prompt, tokens so far, count)
    used = 0
    while pending:
        steps = min(chunk, max_gen_toks - used)
        rows = [torch.cat([prompts[i], torch.tensor(t, dtype=prompts[i].dtype)]) for i, t, _ in pending]
        batch = sampler.sample_many(model, rows, [c for *_, c in pending], steps, temperature, stop)
        going: dict[tuple[int, tuple[int, ...]], int] = {}
        for (i, tokens, _), samples in zip(pending, batch, strict=True):
            for new in samples:
                whole = [*tokens, *new]
                if len(new) < steps or (new and new[-1] in stop) or used + steps >= max_gen_toks or decided(whole):
                    done[i].append(whole)
                else:
                    going[(i, tuple(whole))] = going.get((i, tuple(whole)), 0) + 1
        pending = [(i, list(t), c) for (i, t), c in going.items()]
        used += steps
    return [[s[j] for j in torch.randperm(len(s)).tolist()] for s in done]
