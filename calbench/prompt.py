"""The numeric sampling prompt: rendering, reading it back, and wrapping it for a model.

The prompt is one user turn::

    Generate exactly ONE random number from {a|an} {Display} distribution with
    parameters {k1}={v1}, {k2}={v2}. Output ONLY the number.

Parameter values are the 4-significant-digit values the ``Target`` was built from, so
the text and the law agree exactly, and ``read_prompt`` recovers the very same target
from any text that contains a rendered prompt (a chat-templated context included).
"""

from __future__ import annotations

import re
from typing import Any

from calbench.families import ALL_FAMILIES, Target, format_value, get_family

TEMPLATE = (
    "Generate exactly ONE random number from {article} {display} distribution with "
    "parameters {params}. Output ONLY the number."
)

_PROMPT_RE = re.compile(
    r"Generate exactly ONE random number from (?:a|an) (?P<display>.+?) distribution with "
    r"parameters (?P<params>.*?)\. Output ONLY the number\."
)
_BY_DISPLAY = {f.display: f.name for f in ALL_FAMILIES.values()}


def prompt_text(target: Target) -> str:
    """The user turn asking for one draw from ``target``."""
    family = target.family
    params = ", ".join(f"{k}={format_value(v)}" for k, v in target.items)
    return TEMPLATE.format(article=family.article, display=family.display, params=params)


def read_prompt(text: str) -> Target:
    """Recover the target from text containing a rendered prompt (the last one, if several).

    Raises:
        ValueError: if ``text`` holds no calbench numeric prompt, or names an unknown family
            or parameters that do not match the family's table row.
    """
    return target_in(text, _PROMPT_RE, "calbench numeric prompt")


def target_in(text: str, pattern: re.Pattern[str], what: str) -> Target:
    """The target of the last match of ``pattern`` (groups ``display`` and ``params``) in ``text``."""
    matches = list(pattern.finditer(text))
    if not matches:
        raise ValueError(f"no {what} found in {text[-200:]!r}")
    m = matches[-1]
    display = m.group("display")
    if display not in _BY_DISPLAY:
        raise ValueError(f"unknown distribution {display!r} in prompt")
    family = get_family(_BY_DISPLAY[display])
    params: dict[str, float] = {}
    for pair in m.group("params").split(", "):
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"malformed parameter {pair!r} in prompt")
        params[name] = int(value) if re.fullmatch(r"-?\d+", value) else float(value)
    if tuple(params) != family.param_names:
        raise ValueError(f"{family.name}: prompt gives parameters {tuple(params)}, expected {family.param_names}")
    return family.target(params)


def chat_messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def render(tokenizer: Any, text: str) -> str:
    """The exact string a model is conditioned on.

    With a chat template: one user turn plus the generation prompt, thinking disabled
    (``enable_thinking=False`` is ignored by templates that do not use it). Without one
    (base models): the bare prompt and a newline, so that the answer starts on a fresh
    line; digit tokenizers then split the answer exactly as they would on its own.
    """
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            chat_messages(text), tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        return str(rendered)
    return text + "\n"


def encode(tokenizer: Any, rendered: str) -> list[int]:
    """Token ids of a rendered prompt, never with a second BOS.

    Chat templates of Llama 3 and Gemma already write the BOS token; tokenizing such a
    string with special tokens added would start the sequence with BOS twice.
    """
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and rendered.startswith(bos))
    return list(tokenizer(rendered, add_special_tokens=add_special)["input_ids"])
