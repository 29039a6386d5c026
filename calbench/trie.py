"""Token tries held as arrays, and answer strings tokenized the way the model sees them.

A ``Trie`` stores one row per node (the root is node 0): the token on the edge into the
node, its parent, its depth and the target mass of all strings through it. Children of
node p are ``child_idx[child_ptr[p]:child_ptr[p + 1]]``. The next-token target at p is

    q(v | p) = mass[child] / mass[p]   for the child reached by token v.

Strings are the canonical answers tokenized *in context* (the answer slice of
prompt + answer, so the boundary matches what the model sees) followed by the model's
terminator: its end-of-turn token for chat models (``<|im_end|>``, ``<|eot_id|>``,
``<end_of_turn>``), its EOS for base models.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Trie:
    tokens: np.ndarray  # (N,) int64, token on the edge into the node; -1 at the root
    parent: np.ndarray  # (N,) int64, parent node; -1 at the root
    depth: np.ndarray  # (N,) int64, 0 at the root
    mass: np.ndarray  # (N,) float64, target mass of the strings through the node (1 at the root)
    ends: np.ndarray  # (S,) int64, the node where string s ends
    child_ptr: np.ndarray  # (N + 1,) int64, CSR offsets into child_idx
    child_idx: np.ndarray  # (N - 1,) int64, children grouped by parent, in node order

    @property
    def n_nodes(self) -> int:
        return int(self.tokens.size)

    @property
    def n_strings(self) -> int:
        return int(self.ends.size)

    def children(self, node: int) -> np.ndarray:
        return self.child_idx[self.child_ptr[node] : self.child_ptr[node + 1]]

    def inner(self) -> np.ndarray:
        """Ids of the nodes with children (the root first): the nodes whose next token is scored."""
        return np.flatnonzero(self.child_ptr[1:] > self.child_ptr[:-1])

    def mark_paths(self, nodes: np.ndarray, column: np.ndarray, out: np.ndarray) -> None:
        """Tree attention: set ``out[i, column[a]]`` for ``nodes[i]`` and each of its ancestors
        ``a`` below the root (``column`` maps node ids to columns of ``out``)."""
        rows = np.arange(nodes.size)
        walk = np.asarray(nodes).copy()
        while np.any(walk > 0):  # the node itself, then one step up per pass
            live = walk > 0
            out[rows[live], column[walk[live]]] = True
            walk = np.where(live, self.parent[np.maximum(walk, 0)], 0)

    def q(self) -> np.ndarray:
        """Target probability of the edge into each node, q(token | parent) (nan at the root)."""
        out = np.full(self.n_nodes, np.nan)
        out[1:] = self.mass[1:] / self.mass[self.parent[1:]]
        return out

    def paths(self) -> list[list[int]]:
        """The token sequence of every string (slow; for tests and debugging)."""
        out = []
        for end in self.ends.tolist():
            path = []
            while end > 0:
                path.append(int(self.tokens[end]))
                end = int(self.parent[end])
            out.append(path[::-1])
        return out

    def string_nodes(self) -> np.ndarray:
        """(S, max depth) node ids along each string's path, -1 padded."""
        width = int(self.depth[self.ends].max(initial=0))
        out = np.full((self.n_strings, width), -1, dtype=np.int64)
        nodes = self.ends.copy()
        for col in range(width - 1, -1, -1):
            # Walk up from each end; strings shorter than `width` finish early.
            has = self.depth[nodes] > col
            out[has, col] = nodes[has]
            nodes = np.where(has, self.parent[nodes], nodes)
        return out


def build_trie(
    sequences: Sequence[Sequence[int]], masses: np.ndarray | None = None, allow_prefixes: bool = False
) -> Trie:
    """The prefix trie of token sequences, weighted by ``masses`` (uniform by default).

    Built one depth at a time with ``numpy.unique`` over (parent, token) keys, so a
    16384-string space takes milliseconds. Sequences must be non-empty, and none may be
    a strict prefix of another (a terminator at the end guarantees it) unless
    ``allow_prefixes``: then a string may end at an inner node (scoring lm-eval's
    arbitrary continuations; targets need terminated strings).
    """
    n = len(sequences)
    if n == 0:
        raise ValueError("cannot build a trie of no strings")
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=n)
    if lengths.min() == 0:
        raise ValueError("empty token sequence in trie")
    flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(lengths.sum()))
    width = int(lengths.max())
    padded = np.full((n, width), -1, dtype=np.int64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded[np.repeat(np.arange(n), lengths), np.arange(flat.size) - starts] = flat
    w = np.full(n, 1.0 / n) if masses is None else np.asarray(masses, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"{n} sequences but {w.size} masses")

    vocab = int(flat.max()) + 1  # (parent, token) pairs as one integer key
    tokens, parents, depths, mass = [np.array([-1])], [np.array([-1])], [np.array([0])], [np.array([w.sum()])]
    node_of = np.zeros(n, dtype=np.int64)  # current node of each string
    ends = np.full(n, -1, dtype=np.int64)
    next_id = 1
    for d in range(width):
        alive = np.flatnonzero(lengths > d)
        uniq, inverse = np.unique(node_of[alive] * vocab + padded[alive, d], return_inverse=True)
        inverse = inverse.reshape(-1)
        ids = next_id + np.arange(len(uniq))
        tokens.append(uniq % vocab)
        parents.append(uniq // vocab)
        depths.append(np.full(len(uniq), d + 1))
        mass.append(np.bincount(inverse, weights=w[alive], minlength=len(uniq)))
        node_of[alive] = ids[inverse]
        done = alive[lengths[alive] == d + 1]
        ends[done] = node_of[done]
        next_id += len(uniq)

    parent = np.concatenate(parents)
    order = np.argsort(parent[1:], kind="stable") + 1
    counts = np.bincount(parent[1:], minlength=next_id)
    child_ptr = np.concatenate([[0], np.cumsum(counts)])
    trie = Trie(
        tokens=np.concatenate(tokens),
        parent=parent,
        depth=np.concatenate(depths),
        mass=np.concatenate(mass),
        ends=ends,
        child_ptr=child_ptr,
        child_idx=order,
    )
    if not allow_prefixes and np.any(counts[trie.ends] > 0):
        raise ValueError("a sequence is a strict prefix of another; append a terminator")
    return trie


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
