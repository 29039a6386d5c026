"""calbench's policies, each defined once: pure T=1 sampling, greedy decoding, the run defaults.

* **Pure T=1 sampling** (``PURE_SAMPLING``): ``do_sample``, temperature 1, top_p 1, top_k 0
  (vLLM's -1 also disables top-k), every one given explicitly: left out, a backend
  applies its own or the model's defaults (HF generate: top_k 50). The task YAML sets
  exactly these, ``calbench-hf`` runs its own sampler only when they hold (at any
  temperature), and the results store refuses runs that deviate.
* **Greedy decoding** (``GREEDY``) for the capability tasks (``GREEDY_TASKS``: the offline
  retention suite's generating tasks, scored like lm-eval's GSM8K and IFEval): ``do_sample``
  false, every other setting neutral; the results store holds them to it.
* **Run defaults**: ``enable_thinking=False`` for the backends that take it, so
  hybrid-reasoning chat templates answer directly (templates without it ignore it);
  reference systems have no tokenizer, so their answers end where their text ends;
  ``calbench-hf`` serves the first-token-support request kind.

Metric directions and ranges are ``calbench.metrics.catalog``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PURE_SAMPLING: Mapping[str, Any] = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
GREEDY: Mapping[str, Any] = {"do_sample": False, "temperature": 0.0}
GREEDY_TASKS = ("calbench_arithmetic", "calbench_format_following")
TOP_K_OFF = (0, -1)  # 0: HF and vLLM; -1: vLLM's "no top-k"
# Other settings that change sampling, and the values at which they do nothing. A model's
# generation_config.json may set them (and temperature, top_p, top_k): stock hf and vLLM
# apply it unless the request overrides it, so the tasks override the usual one
# (repetition_penalty) and the results store refuses runs where one stayed active.
NEUTRAL_SETTINGS: Mapping[str, tuple[Any, ...]] = {
    "repetition_penalty": (1.0,),
    "encoder_repetition_penalty": (1.0,),
    "presence_penalty": (0.0,),
    "frequency_penalty": (0.0,),
    "min_p": (None, 0.0),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "min_tokens": (None, 0),
    "bad_words_ids": (None, []),
    "suppress_tokens": (None, []),
    "begin_suppress_tokens": (None, []),
    "sequence_bias": (None, {}),
    "exponential_decay_length_penalty": (None,),
    "num_beams": (None, 1),
}
# Where to stop, not how to sample: lm-eval's max_gen_toks and the aliases it accepts for it.
NOT_SAMPLING = ("until", "max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")

THINKING_BACKENDS = ("hf", "vllm", "calbench-hf")  # lm-eval backends that accept enable_thinking
THINKING_DEFAULT = "enable_thinking=False"
MAX_SAMPLES = 100_000  # samples per prompt: the paper's 1000, a hundred times over; more is a typo
REFERENCE_MODELS = ("calbench-oracle", "calbench-collapsed", "calbench-lookup")
REFERENCE_TERMINATOR = ""  # the metadata calbench_terminator of a reference system
# calbench-hf's own request kind: the top-p support of the next token after a prompt. Tasks
# ask for it only when the run's metadata says the backend serves it (runner sets it).
FIRST_TOKEN_SUPPORT = "first_token_support"
FIRST_TOKEN_METADATA = "calbench_first_token_support"
FIRST_TOKEN_BACKENDS = ("calbench-hf",)
# The sample-free tasks' request kind: the whole distribution of the numeric answer a model
# samples (``calbench.backends.enumeration``). Only these backends serve it; the rest refuse.
ENUMERATE_ANSWERS = "enumerate_numeric_answers"
ENUMERATION_BACKENDS = ("calbench-hf", *REFERENCE_MODELS)


def sampling_deviations(gen: Mapping[str, Any], any_temperature: bool = False) -> list[str]:
    """The settings of ``gen`` that are not pure T=1 sampling (``name=value``); [] if none.

    ``any_temperature`` accepts any positive temperature (plain softmax sampling at T).
    """

    def number(key: str) -> float | None:
        try:
            return float(gen[key])
        except (KeyError, TypeError, ValueError):
            return None

    wrong = []
    if gen.get("do_sample") is not True:
        wrong.append(f"do_sample={gen.get('do_sample')}")
    temperature = number("temperature")
    if temperature is None or (temperature <= 0 if any_temperature else temperature != 1.0):
        wrong.append(f"temperature={gen.get('temperature')}")
    if number("top_p") != 1.0:
        wrong.append(f"top_p={gen.get('top_p')}")
    if "top_k" not in gen or gen["top_k"] not in TOP_K_OFF or isinstance(gen["top_k"], bool):
        wrong.append(f"top_k={gen.get('top_k')}")
    for key, value in gen.items():  # anything else must be one of the settings that do nothing
        if key not in PURE_SAMPLING and key not in NOT_SAMPLING and not is_neutral(key, value):
            wrong.append(f"{key}={value}")
    return wrong


def greedy_deviations(gen: Mapping[str, Any]) -> list[str]:
    """The settings of ``gen`` that are not greedy decoding (``name=value``); [] if none."""
    wrong = [] if gen.get("do_sample") is False else [f"do_sample={gen.get('do_sample')}"]
    for key, value in gen.items():  # sampling knobs do nothing without sampling; the others must be neutral
        if key not in (*PURE_SAMPLING, *NOT_SAMPLING) and not is_neutral(key, value):
            wrong.append(f"{key}={value}")
    return wrong


def decoding_deviations(task: str, gen: Mapping[str, Any]) -> list[str]:
    """How a task's generation settings depart from its policy: greedy for ``GREEDY_TASKS``, else pure T=1."""
    return greedy_deviations(gen) if task in GREEDY_TASKS else sampling_deviations(gen)


def is_neutral(key: str, value: Any) -> bool:
    """Whether ``key=value`` leaves pure sampling as it is (``NEUTRAL_SETTINGS``, and the pure values)."""
    if key in PURE_SAMPLING:
        return not sampling_deviations({**PURE_SAMPLING, key: value})
    neutral = NEUTRAL_SETTINGS.get(key)
    if neutral is None or isinstance(value, bool):
        return False
    return any(value == n and type(value) in (type(n), int, float) for n in neutral if n is not None) or (
        value is None and None in neutral
    )


def active_generation_config(generation_config: Mapping[str, Any], gen: Mapping[str, Any]) -> list[str]:
    """Settings of a model's generation_config.json that change sampling and that ``gen`` does not
    override with a neutral value (``name=value``); what stock hf and vLLM would silently apply."""
    out = []
    for key in (*PURE_SAMPLING, *NEUTRAL_SETTINGS):
        if key == "do_sample" or key not in generation_config or is_neutral(key, generation_config[key]):
            continue
        if not (key in gen and is_neutral(key, gen[key])):
            out.append(f"{key}={generation_config[key]}")
    return out


def needs_thinking_default(model: str, model_args: str | Mapping[str, Any] | None) -> bool:
    """Whether calbench adds ``enable_thinking=False`` to these ``--model_args`` (text or parsed)."""
    given = model_args if isinstance(model_args, Mapping) else str(model_args or "")
    return (
        model in THINKING_BACKENDS
        and bool(model_args)
        and not any(key in given for key in ("enable_thinking", "chat_template_args"))
    )


def run_metadata(model: str) -> dict[str, Any]:
    """The task metadata calbench adds to a run of ``model`` (user metadata wins over it)."""
    out: dict[str, Any] = {}
    if model in REFERENCE_MODELS:
        out["calbench_terminator"] = REFERENCE_TERMINATOR
    if model in FIRST_TOKEN_BACKENDS:
        out[FIRST_TOKEN_METADATA] = True
    return out
