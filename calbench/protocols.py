"""Sampling protocols: how a model is asked for samples, and how its answers become samples (pure).

Every protocol asks about the same law with the same words ("from {a|an} {Display}
distribution with parameters k1=v1, ..."), so the target is read back from any of them
(``read_target``) and the references can answer each in its own format. The table
``PROTOCOLS`` is the one place the protocols live (independent requests' template is
``calbench.prompt``'s); the protocol tasks' YAML is written from it
(``tasks/scripts/generate_protocol_tasks.py``), and ``tests/test_prompts_golden.py`` pins the
hash of every task's prompts with the task's version, which moves when one changes.

* ``independent``: one fresh request per sample, in ``calbench.prompt``'s words (the tasks
  without a protocol suffix: ``calbench_numeric_unseen``, ...).
* ``batch``: one request asks for K numbers separated by commas (the batch protocol of
  Zhao et al. 2026 as the paper's code words it); every valid item of the list is a sample,
  items past the K-th are ignored and missing ones count as invalid, so the valid rate is
  per item. Serial dependence within lists is reported.
* ``seeded``: each request carries a fresh random seed string, reproducible from the task
  seed, the document and the request's index (``seed_string``), and asks the model to use it.
* ``ssot``: String Seed of Thought (Misaki & Akiba 2025): the model first writes a random
  string, then derives the number from it, and ends with ``Answer: <number>`` on its own
  line; the answer is that line's number (reasoning blocks stripped first).
* ``verbalized``: Verbalized Sampling (Zhang et al. 2025): the model lists k candidate
  values with their probabilities, one ``<value>: <probability>`` per line; calbench
  renormalises the probabilities (a malformed list is invalid), draws one value per response
  with a generator seeded from the response and its index, and also scores the listed
  distribution itself.

Each row of ``PROTOCOLS`` carries what is particular to its protocol: its turn, its marker (the
text that tells its turns apart, ``protocol_in``), what its responses yield (``Protocol.yields``:
the answers, how many responses were well formed, what its diagnostics read), the names of its
diagnostics, and a reference system's answer (``Protocol.reference``). The diagnostics themselves
(serial dependence within batch lists, the verbalized distribution's W1, well-formed rates, tokens
per valid sample) are ``calbench.metrics.protocol_diagnostics``'s. A new protocol is a row here
(a subclass where its responses or its reference answer differ), its diagnostics there, and its
tasks written by ``tasks/scripts/generate_protocol_tasks.py``.
"""

from __future__ import annotations

import math
import re
import string
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calbench.families import Target, format_value
from calbench.parse import NUMBER_RE, classify, in_support, strip_think
from calbench.prompt import TEMPLATE, target_in
from calbench.stats import seed_for
from calbench.task_names import SAMPLING_SETS, task_of

BATCH_K = 10  # numbers per batch response (a prompt's N samples take N / K requests)
VERBALIZED_K = 5  # candidates per verbalized response
SEED_LENGTH = 12  # characters of a seeded request's seed
SEED_ALPHABET = string.ascii_letters + string.digits
SEED_SLOT = "<<calbench-seed>>"  # where each request's seed goes in the rendered context

_LAW = "from {article} {display} distribution with parameters {params}."


class Responder(typing.Protocol):
    """What a reference system offers a protocol's reference answer (``calbench.backends.references``)."""

    rng: np.random.Generator

    def answer(self, target: Target) -> str: ...

    def value(self, target: Target, rng: np.random.Generator | None = None) -> str: ...


@dataclass(frozen=True)
class Yield:
    """What one prompt's responses yield under a protocol."""

    items: list[str]  # the answer strings, scored like independent answers
    well_formed: int  # responses in the protocol's format
    parsed: list[Any]  # per response, what its diagnostics read (a batch's items, a verbalized list)


@dataclass(frozen=True)
class Protocol:
    """One way of asking for samples: its user turn, its token budget, its tasks' names, the text
    that marks its turns, what its responses yield, the diagnostics it reports and how a reference
    system answers it. This row is ``independent``'s: every response is one answer."""

    name: str
    template: str  # fields: article, display, params (the law); k (batch, verbalized); seed (seeded)
    max_gen_toks: int
    items: int = 1  # samples one response yields (K for batch)
    task_suffix: str = ""  # its tasks are calbench_numeric_<set><suffix>
    marker: str | None = None  # text only this protocol's turns hold (``protocol_in``)
    k: int = 1  # numbers (batch) or candidates (verbalized) one turn asks for
    # metrics it reports besides well_formed_rate and tokens_per_valid, each computed by
    # calbench.metrics.protocol_diagnostics.DIAGNOSTICS from ``Yield.parsed``
    diagnostics: tuple[str, ...] = ()

    def yields(self, responses: Sequence[str], target: Target) -> Yield:
        return Yield(list(responses), len(responses), list(responses))

    def reference(self, system: Responder, context: str, target: Target) -> str:
        """A reference system's response to one of this protocol's turns."""
        return system.answer(target)


class Batch(Protocol):
    """K numbers per response: every valid item of the list is a sample (items past the K-th
    ignored, missing ones invalid); well formed: exactly K numbers."""

    def yields(self, responses: Sequence[str], target: Target) -> Yield:
        lists = [batch_items(r, self.k) for r in responses]
        return Yield([i for row in lists for i in row], sum(batch_well_formed(r, self.k) for r in responses), lists)

    def reference(self, system: Responder, context: str, target: Target) -> str:
        return ", ".join(system.value(target) for _ in range(self.k))


class Seeded(Protocol):
    """One answer per response; the reference draws with the seed its turn carries."""

    def reference(self, system: Responder, context: str, target: Target) -> str:
        seed = context.split(str(self.marker), 1)[1].split(".", 1)[0]
        return system.value(target, np.random.default_rng(seed_for("reference seed", seed)))


class Ssot(Protocol):
    """The answer is the last ``Answer:`` line's; well formed: there is one."""

    def yields(self, responses: Sequence[str], target: Target) -> Yield:
        items = [ssot_answer(r) for r in responses]
        return Yield(items, sum(bool(i) for i in items), items)

    def reference(self, system: Responder, context: str, target: Target) -> str:
        noise = "".join(SEED_ALPHABET[i] for i in system.rng.integers(0, len(SEED_ALPHABET), 16))
        return f"{noise}\nAnswer: {system.value(target)}"


class VerbalizedSampling(Protocol):
    """k candidates with probabilities per response; one seeded draw from each list is the answer;
    well formed: a list that parses. The reference lists k draws at equal probabilities."""

    def yields(self, responses: Sequence[str], target: Target) -> Yield:
        listed = [parse_verbalized(r, target) for r in responses]
        items = [verbalized_draw(v, r, target, i) for i, (v, r) in enumerate(zip(listed, responses, strict=True))]
        return Yield(items, sum(v is not None for v in listed), listed)

    def reference(self, system: Responder, context: str, target: Target) -> str:
        return "\n".join(f"{system.value(target)}: {1 / self.k:.6g}" for _ in range(self.k))


PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        Protocol("independent", TEMPLATE, max_gen_toks=32),  # calbench.prompt's plain prompt
        Batch(
            "batch",
            "You are a random number generator. Generate exactly {k} independent samples "
            + _LAW
            + " Output ONLY the numbers, separated by commas.",
            max_gen_toks=16 * BATCH_K,
            items=BATCH_K,
            task_suffix="_batch",
            marker="You are a random number generator.",
            k=BATCH_K,
            diagnostics=("lag1_autocorr", "runs_z", "duplicate_excess"),
        ),
        Seeded(
            "seeded",
            "Random seed: {seed}. Use this seed to generate exactly ONE random number "
            + _LAW
            + " Output ONLY the number.",
            max_gen_toks=32,
            task_suffix="_seeded",
            marker="Random seed: ",
        ),
        Ssot(
            "ssot",
            "Generate exactly ONE random number " + _LAW + " First write a random string of 16 characters on "
            "its own line. Then derive the number from that string so that it follows the distribution. "
            "End with a final line of the form: Answer: <number>",
            max_gen_toks=256,
            task_suffix="_ssot",
            marker="Answer: <number>",
        ),
        VerbalizedSampling(
            "verbalized",
            "Consider ONE random number drawn " + _LAW + " List {k} possible values of it, each with the "
            "probability of drawing it, one per line as <value>: <probability>. Output ONLY the list.",
            max_gen_toks=24 * VERBALIZED_K,
            task_suffix="_verbalized",
            marker="<value>: <probability>",
            k=VERBALIZED_K,
            diagnostics=("verbalized_w1_iqr",),
        ),
    )
}
INDEPENDENT = PROTOCOLS["independent"]

_LAW_RE = re.compile(r"from (?:a|an) (?P<display>.+?) distribution with parameters (?P<params>.*?)\.(?=\s|$)")


def protocol_text(protocol: str, target: Target, seed: str = SEED_SLOT) -> str:
    """The user turn of ``protocol`` for ``target`` (a seeded turn keeps ``SEED_SLOT`` unless given a seed)."""
    p = PROTOCOLS[protocol]
    family = target.family
    params = ", ".join(f"{k}={format_value(v)}" for k, v in target.items)
    return p.template.format(article=family.article, display=family.display, params=params, k=p.k, seed=seed)


VARIANTS = tuple(name for name, p in PROTOCOLS.items() if p.task_suffix)  # the protocols with task variants


def protocol_in(text: str) -> Protocol:
    """The protocol whose turn ``text`` holds: the first whose marker it holds, else independent."""
    return next((p for p in PROTOCOLS.values() if p.marker is not None and p.marker in text), INDEPENDENT)


def protocol_of(text: str) -> str:
    """Which protocol's turn ``text`` holds ("independent" when none of the others), by name."""
    return protocol_in(text).name


def read_target(text: str) -> Target:
    """The law a protocol's turn asks about (the last one in ``text``); ValueError if none."""
    return target_in(text, _LAW_RE, "calbench protocol prompt")


def seed_string(task_seed: int, doc_id: str, index: int) -> str:
    """The seed of request ``index`` of document ``doc_id``: the same on every rerun, different per request."""
    rng = np.random.default_rng(seed_for("protocol seed", task_seed, doc_id, index))
    return "".join(SEED_ALPHABET[i] for i in rng.integers(0, len(SEED_ALPHABET), SEED_LENGTH))


# ---- responses -> samples ---------------------------------------------------------------------

_ITEM_SPLIT = re.compile(r"\s*[,\n]\s*")


def batch_items(response: str, k: int = BATCH_K) -> list[str]:
    """The K answer strings of a batch response: its comma- (or line-) separated items, the first
    K of them, padded with "" (invalid) when there are fewer."""
    body = strip_think(response).strip().strip("[]").strip()
    items = [i for i in _ITEM_SPLIT.split(body)] if body else []
    items = items[:k]
    return items + [""] * (k - len(items))


def batch_well_formed(response: str, k: int = BATCH_K) -> bool:
    """Exactly K items, each a number."""
    body = strip_think(response).strip().strip("[]").strip()
    items = _ITEM_SPLIT.split(body) if body else []
    return len(items) == k and all(NUMBER_RE.fullmatch(i) for i in items)


_FINAL = re.compile(r"(?im)^\s*answer\s*:\s*(?P<answer>[^\n]*?)\s*$")


def ssot_answer(response: str) -> str:
    """The number on the last ``Answer: ...`` line ("" when there is none)."""
    matches = list(_FINAL.finditer(strip_think(response)))
    return matches[-1].group("answer").strip().rstrip(".") if matches else ""


_CANDIDATE = re.compile(r"^\s*(?:[-*]\s+|\d+[.)]\s+)?(?P<value>\S+?)\s*:\s*(?P<prob>\S+?)\s*%?\s*$")


@dataclass(frozen=True)
class Verbalized:
    """A parsed verbalized list: candidate values and their renormalised probabilities."""

    values: np.ndarray
    probs: np.ndarray


def parse_verbalized(response: str, target: Target) -> Verbalized | None:
    """The listed distribution, or None for a malformed list (a line that is not
    ``<value>: <probability>``, a value outside the law's support, a negative or non-finite
    probability, or probabilities summing to 0). Percentages are read as such."""
    lines = [line for line in strip_think(response).strip().splitlines() if line.strip()]
    if not lines:
        return None
    values, probs = [], []
    for line in lines:
        m = _CANDIDATE.match(line)
        if not m:
            return None
        answer = classify(m.group("value"), target)
        prob = m.group("prob")
        if not (answer.valid and NUMBER_RE.fullmatch(prob)):
            return None
        p = float(prob) / (100.0 if line.rstrip().endswith("%") else 1.0)
        if not (math.isfinite(p) and p >= 0):
            return None
        values.append(float(answer.value))  # type: ignore[arg-type]
        probs.append(p)
    total = sum(probs)
    if not total > 0:
        return None
    merged: dict[float, float] = {}
    for v, p in zip(values, probs, strict=True):
        merged[v] = merged.get(v, 0.0) + p / total
    keys = sorted(merged)
    return Verbalized(np.array(keys), np.array([merged[v] for v in keys]))


def verbalized_draw(listed: Verbalized | None, response: str, target: Target, index: int = 0) -> str:
    """One value drawn from the listed distribution, with a generator seeded from the target, the
    response's index among the prompt's responses and its text (the same responses in the same
    order always give the same draws; equal lists at two indices draw independently); "" for
    a malformed list."""
    if listed is None:
        return ""
    rng = np.random.default_rng(seed_for("verbalized draw", target.key, index, response))
    value = float(listed.values[rng.choice(listed.values.size, p=listed.probs)])
    return format_value(value) if in_support(value, target) else ""


def task_protocol(task: str) -> str:
    """The protocol a sampling task's name ends with (``..._<protocol>``; independent when none)."""
    return max((p for p in PROTOCOLS.values() if task.endswith(p.task_suffix)), key=lambda p: len(p.task_suffix)).name


def sampling_protocol(task: str) -> str | None:
    """The sampling protocol of a numeric sampling task (``calbench_numeric_<set>[_<protocol>]``), else None."""
    for name in SAMPLING_SETS:
        for p in PROTOCOLS.values():
            if task == task_of(name, p.task_suffix):
                return p.name
    return None
