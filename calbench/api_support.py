"""What calbench sends to a model behind an OpenAI-compatible API, and what it refuses first.

lm-eval's API backends (``local-completions``, ``local-chat-completions``,
``openai-chat-completions``) send ``seed=1234`` (their ``seed`` model argument) with every
request, and lm-eval's evaluator sends a prompt's N samples as N identical requests: against a
server that honours seeds (vLLM does) the N samples are one answer N times. calbench's tasks
therefore send each sample as its own request with its own seed (``sample_seed``: reproducible
from the run's ``--seed``), which the backends' payload takes over their fixed one (they spread
the request's settings after it). ``check_api_args`` refuses, in one line, what would send one
seed to every sample anyway: a ``seed=`` model argument, a backend whose payload keeps its own
seed, or one that reads one answer per request when told ``n=``.

``BACKENDS`` is the table of what each backend sends: the task's settings, less ``do_sample``
(an API samples at temperature 1; it has no such switch) and less what the API has no
parameter for (named in one line, never dropped silently); ``sent_settings`` applies it.
Everything here is pure: no request is sent (``calbench.endpoint`` asks the server).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class ApiSetupError(ValueError):
    """A run on an API backend that would not draw each sample independently, or could not run."""


@dataclass(frozen=True)
class ApiBackend:
    """One lm-eval API backend: its request kind and the task settings it does not send."""

    kind: str  # "chat" (messages) or "completions" (a prompt string)
    withheld: Mapping[str, str] = field(default_factory=dict)  # setting -> why it is not sent
    samples_per_request: bool = False  # reads n answers per request (calbench's own backends)
    sequential: bool = True  # lm-eval sends requests of distinct settings (each sample's seed) one at a time


# The API has no switch for sampling: temperature 1 samples. Every backend drops do_sample itself.
NOT_SENT_ANYWHERE = {"do_sample": "an API samples whenever the temperature is above 0; it has no such switch"}
OPENAI_WITHHELD = {
    "top_k": "OpenAI's API has no top-k and refuses it; its sampling is never truncated by rank",
    "repetition_penalty": "OpenAI's API has no repetition penalty and refuses it; its presence and frequency "
    "penalties default to 0",
}
BACKENDS: Mapping[str, ApiBackend] = {
    "local-completions": ApiBackend("completions"),
    "local-chat-completions": ApiBackend("chat"),
    "openai-chat-completions": ApiBackend("chat", OPENAI_WITHHELD),
    "calbench-completions": ApiBackend("completions", samples_per_request=True, sequential=False),
    "calbench-chat-completions": ApiBackend("chat", samples_per_request=True, sequential=False),
}
# Model arguments that mark a run on an API backend when the backend's name is not known
# (plain lm_eval without a chat template: the task sees the model arguments, not the model).
API_MARKERS = ("base_url",)
SEED_MODULUS = 2**31 - 1  # seeds fit a signed 32-bit integer: every server takes them
METADATA_BACKEND = "calbench_backend"  # the task metadata that names the backend (calbench eval sets it)
METADATA_PLAN = "calbench_api"  # what the task sent, written into lm-eval's task config (the run record reads it)


def is_api_run(backend: str | None, model_args: Mapping[str, Any]) -> bool:
    """Whether a run sends its requests to an API: a known API backend, or model arguments
    only the API backends take (``base_url``)."""
    return backend in BACKENDS or any(key in model_args for key in API_MARKERS)


def sample_seed(run_seed: int, task: str, doc: str, index: int) -> int:
    """The seed of sample ``index`` of document ``doc`` of ``task``: a hash of the four, so
    samples, prompts and tasks never share one, and a rerun with the same ``--seed`` sends
    the same seeds (in [0, 2^31 - 1))."""
    digest = hashlib.sha256(f"{run_seed}\x1f{task}\x1f{doc}\x1f{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def withheld(backend: str | None) -> dict[str, str]:
    """The task settings ``backend`` does not send, each with why (do_sample everywhere)."""
    spec = BACKENDS.get(backend or "")
    return {**NOT_SENT_ANYWHERE, **(dict(spec.withheld) if spec else {})}


def sent_settings(gen: Mapping[str, Any], backend: str | None, seed: int) -> dict[str, Any]:
    """A sample's request settings: the task's, less what ``backend`` does not send, with its seed."""
    held = withheld(backend)
    return {**{k: v for k, v in gen.items() if k not in held}, "seed": seed}


def withheld_line(gen: Mapping[str, Any], backend: str | None) -> str | None:
    """One line naming the task settings ``backend`` does not send (None when it sends them all but do_sample)."""
    spec = BACKENDS.get(backend or "")
    named = {k: why for k, why in (spec.withheld if spec else {}).items() if k in gen}
    if not named:
        return None
    parts = "; ".join(f"{k}={gen[k]} ({why})" for k, why in named.items())
    return f"{backend} does not send {parts}"


def check_api_args(backend: str | None, model_args: Mapping[str, Any]) -> None:
    """Refuse, in one line, model arguments that would send one seed to all N samples of a prompt,
    or ask a backend for what it cannot do."""
    if "seed" in model_args:
        raise ApiSetupError(
            f"seed={model_args['seed']} in --model_args: lm-eval's API backends send it with every request, so "
            "the N samples of a prompt would be one draw N times; calbench gives each sample its own seed, "
            "derived from the run's --seed: remove seed= (set --seed to change the draws)"
        )
    spec = BACKENDS.get(backend or "")
    if "n" in model_args and not (spec and spec.samples_per_request):
        raise ApiSetupError(
            f"n={model_args['n']} in --model_args: {backend or 'this backend'} reads one answer per request "
            "(it would keep one of n and drop the rest); calbench-chat-completions and calbench-completions "
            "send n samples per request"
        )
    if "n" in model_args:
        n = model_args["n"]
        if isinstance(n, bool) or not isinstance(n, int | str) or not str(n).isdigit() or not 1 <= int(n) <= 128:
            raise ApiSetupError(f"n={n}: samples per request must be a whole number from 1 to 128")


def plan(gen: Mapping[str, Any], backend: str | None, run_seed: int, requests: int) -> dict[str, Any]:
    """What a sampling task sends on an API backend, as the run's task config records it
    (``requests``: a prompt's requests before a backend joins them ``n`` at a time)."""
    return {
        "backend": backend,
        "sent": {k: v for k, v in gen.items() if k not in withheld(backend)},
        "withheld": {k: why for k, why in withheld(backend).items() if k in gen},
        "seed": f"one per sample: sample_seed({run_seed}, task, document id, sample index)",
        "run_seed": run_seed,
        "requests_per_prompt": requests,
    }


def join_samples(requests: Sequence[tuple[Any, ...]], n: int) -> list[list[int]]:
    """The indices of ``requests`` (lm-eval's ``(context, settings)`` pairs) in runs of at most
    ``n`` that differ in their seed only: the samples one request of ``n`` completions serves."""
    groups: dict[str, list[int]] = {}
    for i, args in enumerate(requests):
        settings = {k: v for k, v in dict(args[1]).items() if k != "seed"}
        groups.setdefault(json.dumps([args[0], settings], sort_keys=True, default=str), []).append(i)
    return [run[j : j + n] for run in groups.values() for j in range(0, len(run), max(1, n))]
