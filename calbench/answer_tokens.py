"""Answer strings tokenized the way the model sees them, and the token that ends an answer.

Strings are the canonical answers tokenized *in context* (the answer slice of
prompt + answer, so the boundary matches what the model sees) followed by the model's
terminator: its end-of-turn token for chat models (``<|im_end|>``, ``<|eot_id|>``,
``<end_of_turn>``), its EOS for base models. ``calbench.trie`` turns them into a trie.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np


def terminator(tokenizer: Any, chat: bool) -> int:
    """The token that ends an answer: end-of-turn for chat models, EOS for base models.

    The end-of-turn token is read off the chat template itself: the special token that
    follows an assistant message's content (``<|im_end|>`` for ChatML and Qwen,
    ``<|eot_id|>`` for Llama 3, ``<end_of_turn>`` for Gemma). Tokenizer EOS otherwise.
    """
    if chat and getattr(tokenizer, "chat_template", None):
        marker = "\u2063calbench\u2063"
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": marker}], tokenize=False
        )
        after = str(text).split(marker, 1)[-1]
        ids = tokenizer(after, add_special_tokens=False)["input_ids"]
        special = set(getattr(tokenizer, "all_special_ids", []))
        if ids and ids[0] in special:
            return int(ids[0])
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{type(tokenizer).__name__} has no EOS token to end answers with")
    return int(tokenizer.eos_token_id)


def answer_tokens(tokenizer: Any, rendered: str, answers: Sequence[str], end: int | None) -> list[list[int]]:
    """Token ids of each answer as it follows ``rendered`` in context, plus the terminator ``end``.

    Tokenizing the whole prompt once per answer is exact but slow. Decimal answers for a
    byte-level BPE tokenizer (GPT-2's pre-tokenizer: sign, digit runs and the point are
    separate words) are assembled from the BPE of their words, each computed once.
    Otherwise all answers are tokenized in one call, joined by a special token
    (tokenizers split on special tokens before anything else, so each piece is tokenized
    on its own): first each answer alone, then, if that disagrees, each after a short
    tail of the prompt that starts at a special token or a line break. A sample of
    answers is checked against in-context tokenization, and any disagreement falls back
    to the exact path for all of them.
    In context means after the whole prompt, or, for a fast tokenizer, after the prompt's
    end from its last special token on (the same tokens: nothing merges across a special
    token). Answers tokenized alone do not depend on the prompt and are cached per tokenizer.
    """
    context = _context(tokenizer, rendered)
    rng = random.Random(len(answers))
    probe = sorted({0, len(answers) - 1, *rng.sample(range(len(answers)), min(8, len(answers)))})
    whole = tokenizer(context, add_special_tokens=False)["input_ids"]
    joint = tokenizer([context + answers[i] for i in probe], add_special_tokens=False)["input_ids"]
    if joint[0][: len(whole)] != whole:  # probe 0 is answers[0]
        raise ValueError(
            f"the prompt's last tokens change when an answer follows ({answers[0]!r}): "
            "the answer boundary is not a token boundary for this tokenizer"
        )
    exact = [ids[len(whole) :] for ids in joint]
    out: list[list[int]] | None = None
    for attempt in (
        lambda: _by_pieces(tokenizer, answers),
        lambda: _joined(tokenizer, "", answers),
        lambda: _joined(tokenizer, _tail(tokenizer, rendered), answers),
    ):
        out = attempt()
        if out is not None and all(out[i] == e for i, e in zip(probe, exact, strict=True)):
            break
        out = None
    if out is None:
        out = _slice_after(tokenizer, context, answers)
    suffix = [] if end is None else [end]
    return [ids + suffix for ids in out]


def _slice_after(tokenizer: Any, prefix: str, texts: Sequence[str]) -> list[list[int]]:
    """Tokens of each ``prefix + text`` after the prefix's own tokens (one call per text)."""
    base = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    joint = tokenizer([prefix + t for t in texts], add_special_tokens=False)["input_ids"]
    return [ids[base:] for ids in joint]


# Answers tokenized alone after a special token, per tokenizer (bounded: cleared when full).
_ALONE: weakref.WeakKeyDictionary[Any, dict[str, list[int]]] = weakref.WeakKeyDictionary()
_ALONE_MAX = 2_000_000


def _joined(tokenizer: Any, prefix: str, texts: Sequence[str]) -> list[list[int]] | None:
    """Tokens of each ``prefix + text`` after the prefix, from one encode of all of them.

    Each piece is preceded by a special token ``sep``. None when the tokenizer has no
    special token that encodes to one id, when a text contains it, or when a piece does
    not start with the prefix's tokens.
    """
    for sep in getattr(tokenizer, "all_special_tokens", []):
        head = tokenizer(sep + prefix, add_special_tokens=False)["input_ids"]
        if sep and head and tokenizer.convert_tokens_to_ids(sep) == head[0] and sep not in prefix:
            break
    else:
        return None
    try:
        cache = _ALONE.setdefault(tokenizer, {}) if not prefix else {}
    except TypeError:  # not weak-referenceable
        cache = {}
    if len(cache) + len(texts) > _ALONE_MAX:
        cache.clear()
    todo = list(dict.fromkeys(t for t in texts if t not in cache))
    if any(sep in t for t in todo):
        return None
    if todo:
        ids = tokenizer(sep + sep.join(prefix + t for t in todo), add_special_tokens=False, verbose=False)["input_ids"]
        marks = np.flatnonzero(np.asarray(ids) == head[0]).tolist()
        if len(marks) != len(todo):
            return None
        marks.append(len(ids))
        lead = head[1:]
        if lead and any(ids[a + 1 : a + 1 + len(lead)] != lead for a in marks[:-1]):
            return None
        pieces = [ids[a + 1 + len(lead) : b] for a, b in itertools.pairwise(marks)]
        cache.update(zip(todo, pieces, strict=True))
    return [cache[t] for t in texts]


_DECIMALS = re.compile(r"(?:-?[0-9]+(?:\.[0-9]+)?\n)+")  # decimal numbers, one per line
# Per tokenizer: its BPE model and the token ids of words seen so far, or None (not byte-level BPE).
_PIECES: weakref.WeakKeyDictionary[Any, tuple[Any, dict[str, list[int]]] | None] = weakref.WeakKeyDictionary()


def _byte_level_bpe(tokenizer: Any) -> tuple[Any, dict[str, list[int]]] | None:
    """The BPE model of a fast tokenizer that is exactly: no normalizer, GPT-2 byte-level
    pre-tokenizer (its regex splits a decimal number into sign, digit runs and point),
    BPE without dropout, and no added token made of digits, signs or points; else None."""
    try:
        if tokenizer in _PIECES:
            return _PIECES[tokenizer]
    except TypeError:  # not weak-referenceable
        return None
    state: tuple[Any, dict[str, list[int]]] | None = None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
        added = [str(a.get("content", "")) for a in spec.get("added_tokens") or []]
        if (
            spec.get("normalizer") is None
            and pre.get("type") == "ByteLevel"
            and pre.get("use_regex", True)
            and not pre.get("add_prefix_space", False)
            and model.get("type") == "BPE"
            and not model.get("dropout")
            and not any(a and set(a) <= set("-.0123456789") for a in added)
        ):
            state = (backend.model, {})
    _PIECES[tokenizer] = state
    return state


def _by_pieces(tokenizer: Any, texts: Sequence[str]) -> list[list[int]] | None:
    """Tokens of decimal answers alone, from the BPE of their words (sign, digits, point, digits)."""
    state = _byte_level_bpe(tokenizer)
    if state is None or not _DECIMALS.fullmatch("\n".join(texts) + "\n"):
        return None
    model, cache = state
    if len(cache) > _ALONE_MAX:
        cache.clear()
    get = cache.get

    def word(w: str) -> list[int]:
        ids = cache[w] = [t.id for t in model.tokenize(w)]
        return ids

    minus, point = get("-") or word("-"), get(".") or word(".")
    out = []
    for t in texts:
        neg = t[0] == "-"
        whole, dot, frac = t[neg:].partition(".")
        ids = get(whole) or word(whole)
        if neg:
            ids = minus + ids
        out.append(ids + point + (get(frac) or word(frac)) if dot else ids)
    return out


def _context(tokenizer: Any, rendered: str) -> str:
    """The end of the prompt from its last special token on (fast tokenizers), else the whole prompt."""
    if not getattr(tokenizer, "is_fast", False):
        return rendered
    at = max((rendered.rfind(t) for t in getattr(tokenizer, "all_special_tokens", []) if t), default=-1)
    return rendered[max(at, 0) :]


def _tail(tokenizer: Any, rendered: str) -> str:
    """The shortest end of the prompt that starts right after a special token or a newline."""
    cut = max(rendered.rfind("\n", 0, len(rendered) - 1) + 1, 0)
    for token in getattr(tokenizer, "all_special_tokens", []):
        at = rendered.rfind(token)
        if at >= 0:
            cut = max(cut, at + len(token))
    return rendered[cut:]
