"""Reference systems that run through the same lm-eval pipeline as any model.

* ``calbench-oracle`` reads the family and parameters back from each prompt and answers
  with an exact draw from that law: its excess W1 is zero up to sampling noise.
* ``calbench-collapsed`` always answers the law's mode: a fully collapsed sampler.
* ``calbench-lookup`` answers a training family's prompt with an exact draw from the law of its
  nearest training-grid prompt (``calbench.param_ranges.nearest_training_prompt``: Euclidean in
  the parameters' units, log scale for scale-like parameters, linear for locations), and a
  held-out family's with no number: perfect memorisation of the training set. An adapter that
  beats it on the unseen split has learned more than a lookup.

Both answer the sample-free tasks too, with their whole distribution: the oracle the law
on its canonical space, the collapsed reference a point mass at the mode.

Both answer every sampling protocol (``calbench.protocols``) in its own format: the oracle
with K exact draws for a batch, an exact draw from a generator seeded by the request's seed,
an SSoT-shaped answer, and a verbalized list of k exact draws with probability 1/k each (one
value drawn from it is an exact draw); the collapsed reference with the mode throughout.

Both check, end to end, that the prompts, the parser and the metrics agree
(``calbench.backends.register`` adds them to lm-eval's registry).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from lm_eval.api.model import LM
from tqdm import tqdm

from calbench import protocols
from calbench.families import Target, ppf
from calbench.metrics.enumeration import Enumeration
from calbench.metrics.likelihood import TokenLogprobs
from calbench.param_ranges import is_training_family, nearest_training_prompt
from calbench.space import DEFAULT_DECIMALS, HARD_MAX_BINS, canonical_space
from calbench.trie import build_trie

MODE_GRID = 20001


@lru_cache(maxsize=8192)
def mode(target: Target) -> float:
    """The law's mode; the middle of the tied maxima when the density is flat (Uniform). Cached:
    the N repeats of a prompt ask for it N times."""
    law = target.law
    lo, hi = target.support()
    lo = lo if np.isfinite(lo) else float(ppf(law, 1e-4))
    hi = hi if np.isfinite(hi) else float(ppf(law, 1 - 1e-4))
    if target.integer:
        xs = np.arange(lo, hi + 1)
        density = law.pmf(xs)
    else:
        xs = np.linspace(lo, hi, MODE_GRID)
        with np.errstate(divide="ignore"):
            density = law.pdf(xs)
    top = np.flatnonzero(density >= np.nanmax(density) * (1 - 1e-9))
    return float(xs[top[len(top) // 2]])


@lru_cache(maxsize=8192)
def _target_of(context: str) -> Target:
    # The N repeats of a prompt arrive as N identical contexts: read each once.
    return protocols.read_target(context)


def format_answer(value: float, target: Target) -> str:
    if target.integer:
        return str(round(value))
    return f"{value:.{DEFAULT_DECIMALS}f}"


class ReferenceLM(LM):
    """Answers calbench numeric prompts without a language model."""

    name = "reference"

    def __init__(self, seed: int = 1234, **_: Any) -> None:
        super().__init__()
        self.rng = np.random.default_rng(int(seed))

    def answer(self, target: Target) -> str:
        raise NotImplementedError

    def value(self, target: Target, rng: np.random.Generator | None = None) -> str:
        """One answer's number, formatted (the oracle: an exact draw; ``rng`` defaults to its own)."""
        return self.answer(target)

    def respond(self, context: str) -> str:
        """The answer to one request, in the format of the protocol its prompt uses (its row's ``reference``)."""
        return protocols.protocol_in(context).reference(self, context, _target_of(context))

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        return [self.respond(r.args[0]) for r in tqdm(requests, desc=f"{self.name} answers", disable=disable_tqdm)]

    def distribution(self, target: Target) -> Enumeration:
        """The reference's whole answer distribution (the sample-free tasks)."""
        return _point_masses([float(self.answer(target))], [1.0])

    def enumerate_numeric_answers(self, requests: list[Any], disable_tqdm: bool = False) -> list[Enumeration]:
        return [self.distribution(_target_of(r.args[0])) for r in tqdm(requests, disable=disable_tqdm)]

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise NotImplementedError(f"{self.name} answers sampling tasks only")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError(f"{self.name} answers sampling tasks only")

    @property
    def tokenizer_name(self) -> str:
        return self.name

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        # No template: the prompt text is all a reference needs to read.
        return "\n".join(m["content"] for m in chat_history)


class OracleLM(ReferenceLM):
    """An exact draw from the prompt's law (full float precision, so nothing is rounded away).

    For likelihood tasks it answers with the exact target probabilities P_Y: its
    "tokens" are the answer's characters plus an end marker, each with its trie target
    q, so its sequence KL and logit KL are 0 and its canonical mass is 1.
    """

    name = "calbench-oracle"

    def answer(self, target: Target) -> str:
        return self.value(target)

    def value(self, target: Target, rng: np.random.Generator | None = None) -> str:
        value = target.law.rvs(random_state=self.rng if rng is None else rng)
        return str(int(value)) if target.integer else repr(float(value))

    def distribution(self, target: Target) -> Enumeration:
        """The law on its canonical space with the hard target's resolution (5 decimals, 16,384
        points; integer laws exact): its W1 to the law is that discretisation alone."""
        space = canonical_space(target, DEFAULT_DECIMALS, HARD_MAX_BINS)
        return _point_masses(space.values.tolist(), space.masses.tolist())

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        by_context: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            by_context.setdefault(request.args[0], []).append(i)
        out: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        for context, indices in tqdm(by_context.items(), desc=f"{self.name} likelihoods", disable=disable_tqdm):
            answers = [requests[i].args[1].strip() for i in indices]
            for i, scored in zip(indices, _exact_logprobs(_target_of(context), answers), strict=True):
                out[i] = (scored, False)
        return out


class CollapsedLM(ReferenceLM):
    """Always the mode of the prompt's law, in the canonical format."""

    name = "calbench-collapsed"

    def answer(self, target: Target) -> str:
        return format_answer(mode(target), target)


class LookupLM(OracleLM):
    """Exact draws from the nearest training-grid prompt's law; no number for a held-out family."""

    name = "calbench-lookup"
    NO_ANSWER = "no training prompt of this family"

    def value(self, target: Target, rng: np.random.Generator | None = None) -> str:
        if not is_training_family(target.family):
            return self.NO_ANSWER
        return super().value(nearest_training_prompt(target), rng)

    def distribution(self, target: Target) -> Enumeration:
        if not is_training_family(target.family):  # every answer invalid
            empty = np.zeros((0, 3))
            return Enumeration(np.zeros(0), np.zeros(0), empty, empty, 1.0)
        return super().distribution(nearest_training_prompt(target))

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise NotImplementedError(f"{self.name} answers sampling tasks only")


def _point_masses(values: list[float], masses: list[float]) -> Enumeration:
    empty = np.zeros((0, 3))
    return Enumeration(np.asarray(values, dtype=float), np.asarray(masses, dtype=float), empty, empty, 0.0)


END = 0x110000  # the oracle's end-of-answer "token": one past the last Unicode code point


def _exact_logprobs(target: Target, answers: list[str]) -> list[TokenLogprobs]:
    """Target log-probabilities of canonical answers (character by character); "" scores 0."""
    strings = [a for a in answers if a]
    decimals = len(strings[0].partition(".")[2]) if strings else 0
    space = canonical_space(target, decimals, max(len(strings), 1))
    if tuple(strings) != space.strings:
        raise ValueError(f"calbench-oracle: the continuations are not a canonical space of {target.key}")
    sequences = [[ord(c) for c in s] + [END] for s in strings]
    trie = build_trie(sequences, space.masses)
    q = trie.q()
    nodes = trie.string_nodes()
    scored = iter(TokenLogprobs(seq, np.log(q[nodes[i, : len(seq)]])) for i, seq in enumerate(sequences))
    return [next(scored) if a else TokenLogprobs((), ()) for a in answers]


MODELS: dict[str, type[ReferenceLM]] = {
    "calbench-oracle": OracleLM,
    "calbench-collapsed": CollapsedLM,
    "calbench-lookup": LookupLM,
}
