"""The whole distribution of a model's numeric answers to one prompt, by best-first enumeration.

A sampled answer counts when its text, stripped of surrounding whitespace, is one number
(``calbench.parse``): optional sign, digits with at most one point, an optional exponent.
That language is small, so instead of sampling, :func:`enumerate_answers` walks the
model's token tree directly. It keeps a frontier of token prefixes whose decoded text can
still become a valid answer and always expands the most probable one next (in batches,
the prompt computed once, each prefix attending to its ancestors through a tree mask as in
``calbench.backends.tree_attention``). Expanding a prefix gives its next-token distribution, which
splits the prefix's probability exactly into

* answers that end here (the stop token after a complete number, or a number at the
  sampler's token cap), merged by value ("7", "7.0" and "+7" are one answer);
* mass that leaves the language (any token whose text cannot continue a number): *invalid*;
* longer prefixes, pushed onto the frontier, or cut by the resolution rule (given the law's
  :class:`AnswerSpace`): a prefix whose every continuation without an exponent lies outside
  the law's support (or, for an integer law, has a nonzero decimal) is *impossible* whatever
  it becomes; one past the decimal point of a continuous law's answer whose continuations
  all lie inside the support and, clipped to the window the metrics clip values to, in an
  interval narrower than the resolution tolerance is *resolved*: its value is known to within
  the tolerance, so it is set aside. With ``Budget.refine`` (off by default: it spends the
  whole budget), set-aside prefixes are expanded with the nodes left once the unresolved
  mass is at most the residual target (most probable first, until they too hold at most
  that mass), to learn how much of their mass ends as a number. What is still set aside at
  the end counts as a valid answer at its clipped interval's midpoint. That moves each of its
  answers by at most half the interval's width *if* it goes on to end as a plain number; the
  share that would instead run on into text
  ("3.14 is pi") or an exponent is unknown, which is why ``resolved_mass`` is reported beside
  the valid mass: the exact valid mass lies between valid mass - resolved mass and valid mass
  + residual mass. The window makes the far tail cheap ("31." for a law whose window ends at
  11 is resolved at 11 at once). An open integer part is never resolved: "100" goes on into
  text ("100 random numbers") far too often.

Tokens are read by what they decode to in context (whatever the tokenizer merges: " 3",
".5", "\\n\\n" and special tokens, which the sampler's decoding drops, are all handled), and
each complete answer's full token sequence is decoded once more the way the sampler decodes
it, so a tokenizer whose decoding is not a concatenation of its tokens is caught
(``decode_mismatch_mass``). Every path of the sampler ends in exactly one of these
outcomes, so complete + invalid + impossible + resolved + frontier mass is 1 up to floating
point.

Known limits, all counted as invalid mass: a ``<think>`` block (the parser strips it; the
backend refuses models with a think-end token instead of guessing), a whitespace character
split across byte tokens, a space that a tokenizer's ``clean_up_tokenization_spaces`` would
delete before a point (" ."), and token ids past the tokenizer's end (padded logits).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np
import torch

from calbench.backends.tree_attention import output_cache, tree_forward
from calbench.metrics.enumeration import Enumeration
from calbench.parse import parse_number

# Lexer states of the answer language [ws] [+-] (digits [. digits*] | . digits) [eE [+-] digits] [ws].
LEAD, SIGN, INT, DOT, POINT, FRAC, EXP, EXP_SIGN, EXP_DIGITS, TRAIL = range(10)
ACCEPTING = frozenset({INT, POINT, FRAC, EXP_DIGITS, TRAIL})
RESOLVABLE = frozenset({SIGN, INT, DOT, POINT, FRAC})  # a mantissa still open, no exponent yet
DIGITS = frozenset("0123456789")


def _char(state: int, c: str) -> int | None:
    """The lexer state after one more character; None once the text can no longer be a number."""
    if c.isspace():  # str.strip() removes exactly these around the number
        return state if state in (LEAD, TRAIL) else TRAIL if state in ACCEPTING else None
    if state == TRAIL:
        return None
    if c in DIGITS:
        return {LEAD: INT, SIGN: INT, INT: INT, DOT: FRAC, POINT: FRAC, FRAC: FRAC}.get(
            state, EXP_DIGITS if state in (EXP, EXP_SIGN, EXP_DIGITS) else None
        )
    if c in "+-":
        return SIGN if state == LEAD else EXP_SIGN if state == EXP else None
    if c == ".":
        return DOT if state in (LEAD, SIGN) else POINT if state == INT else None
    if c in "eE":
        return EXP if state in (INT, POINT, FRAC) else None
    return None


def advance(state: int, text: str) -> int | None:
    """The lexer state after ``text`` (None: it left the language)."""
    for c in text:
        next_state = _char(state, c)
        if next_state is None:
            return None
        state = next_state
    return state


def value_range(state: int, number: str, exponents: bool = False) -> tuple[float, float]:
    """The interval holding every value that continuations of ``number`` can reach: without an
    exponent (the resolution rule's interval), or with one (``exponents``: any power of ten of
    the mantissa, so the whole half-line of the sign while the mantissa is still open)."""
    negative = number.startswith("-")
    magnitude = number.lstrip("+-")
    if state == LEAD:
        return -math.inf, math.inf
    if state == TRAIL:
        return float(number), float(number)
    if state in (EXP, EXP_SIGN, EXP_DIGITS) or (exponents and state != TRAIL):
        mantissa = magnitude.lower().partition("e")[0]
        fixed = state in (EXP, EXP_SIGN, EXP_DIGITS) and float(mantissa or 0) == 0  # "0e" stays 0
        lo, hi = (0.0, 0.0) if fixed else (0.0, math.inf)
    elif state == SIGN:
        lo, hi = 0.0, math.inf
    elif state == INT:
        lo, hi = float(magnitude), math.inf  # more digits only make it larger
    elif state == DOT:
        lo, hi = 0.0, 1.0
    else:  # POINT, FRAC: the next decimal place, exactly (a float sum can land an ulp low)
        digits = len(magnitude.partition(".")[2])
        lo = float(magnitude)
        hi = math.nextafter(float(Decimal(magnitude) + Decimal(1).scaleb(-digits)), math.inf)
    return (-hi, -lo) if negative else (lo, hi)


@dataclass(frozen=True)
class TokenTable:
    """What every token of a vocabulary decodes to in the middle of an answer.

    ``texts[t]`` is token t's text in context (decoded after an anchor token, so a leading
    space a tokenizer drops at the start of a text is kept), "" for tokens decoding drops
    (special tokens); ``stop`` ends a sample. ``candidates`` are the tokens whose text is
    made only of number characters and whitespace: every other token leaves the language.
    """

    texts: tuple[str, ...]
    stop: frozenset[int]
    candidates: np.ndarray

    @classmethod
    def build(cls, decode: Callable[[list[int]], str], vocab_size: int, stop: Sequence[int], anchor: int) -> TokenTable:
        head = decode([anchor])
        texts = []
        for t in range(vocab_size):
            text = decode([anchor, t])
            texts.append(text[len(head) :] if text.startswith(head) else "\x00")  # \x00: never in the language
        allowed = DIGITS | set("+-.eE")
        keep = [t for t, s in enumerate(texts) if t not in stop and all(c in allowed or c.isspace() for c in s)]
        return cls(tuple(texts), frozenset(int(s) for s in stop), np.array(keep, dtype=np.int64))


@dataclass(frozen=True)
class AnswerSpace:
    """What the law makes of a value, for the resolution rule (module docstring): its support,
    whether only integers are possible, and the window the metrics clip values to."""

    support: tuple[float, float]
    integer: bool = False
    window: tuple[float, float] = (-math.inf, math.inf)

    def clip(self, lo: float, hi: float) -> tuple[float, float]:
        """The interval [lo, hi] clipped to the window (a point at its edge when outside)."""
        w_lo, w_hi = self.window
        return min(max(lo, w_lo), w_hi), max(min(hi, w_hi), w_lo)


def answer_space(settings: dict[str, Any]) -> AnswerSpace:
    """An :class:`AnswerSpace` from its JSON form (``harness.enumeration_settings``)."""
    lo, hi = settings["support"]
    w_lo, w_hi = settings["window"]
    return AnswerSpace((float(lo), float(hi)), bool(settings["integer"]), (float(w_lo), float(w_hi)))


@dataclass(frozen=True)
class Budget:
    """When to stop: after ``nodes`` expansions or once the frontier holds at most ``residual``
    (and, with ``refine``, the resolved prefixes too); ``resolution`` is the absolute interval
    width below which a prefix is resolved (0: the resolution rule is off)."""

    nodes: int = 2000
    residual: float = 0.01
    resolution: float = 0.0
    batch: int = 64
    refine: bool = False


class _Prefix(NamedTuple):
    """A frontier entry; heapq pops the smallest tuple: the most probable first (``order`` breaks ties)."""

    priority: float  # -log-probability
    order: int
    parent: int  # the expanded prefix it extends (0: the prompt)
    token: int
    depth: int  # generated tokens, its own included
    state: int
    number: str


class _Search:
    """The mutable state of one enumeration (see :func:`enumerate_answers`)."""

    def __init__(self, table: TokenTable, budget: Budget, max_tokens: int, space: AnswerSpace | None) -> None:
        self.table, self.budget, self.max_tokens, self.space = table, budget, max_tokens, space
        self.frontier: list[_Prefix] = []
        self.frontier_mass = 0.0  # kept as prefixes come and go (the result sums them afresh)
        self.summed = False  # frontier_mass re-summed exactly since the last push
        self.complete: dict[tuple[int, ...], float] = {}  # token path -> mass
        self.deferred: list[_Prefix] = []  # resolved prefixes, expanded only with nodes to spare
        self.deferred_mass = 0.0
        self.invalid = 0.0
        self.impossible = 0.0
        self.paths: list[tuple[int, ...]] = []  # of expanded prefixes
        self.parents: list[int] = []
        self.pushed = 0
        self.by_state: dict[int, tuple[np.ndarray, np.ndarray, list[str]]] = {}
        self.stop = torch.tensor(sorted(table.stop), dtype=torch.long)

    def moves(self, state: int, width: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """For every candidate token (below the logits' ``width``): its id, the state after it (-1:
        it leaves the language) and the characters it adds to the number; cached per state."""
        if state not in self.by_state:
            cand = self.table.candidates
            cand = cand[cand < width]  # a tokenizer longer than the model's logits: the rest is invalid
            after = [advance(state, self.table.texts[t]) for t in cand.tolist()]
            added = [
                "".join(c for c in self.table.texts[t] if not c.isspace()) if a is not None else ""
                for t, a in zip(cand.tolist(), after, strict=True)
            ]
            self.by_state[state] = (cand, np.array([-1 if a is None else a for a in after], dtype=np.int64), added)
        return self.by_state[state]

    def resolvable(self, state: int, number: str) -> tuple[float, float] | None:
        """What the resolution rule makes of a prefix: None (expand it), (nan, nan) when it is
        impossible, else the clipped interval it is resolved to (module docstring)."""
        if self.space is None or state not in RESOLVABLE or self.budget.resolution <= 0:
            return None
        lo, hi = value_range(state, number)
        s_lo, s_hi = self.space.support
        fraction = number.partition(".")[2]
        if hi < s_lo or lo > s_hi or (self.space.integer and fraction.strip("0")):
            return math.nan, math.nan
        if state not in (POINT, FRAC) or self.space.integer or not (s_lo <= lo and hi <= s_hi):
            return None  # an open integer part ("100" still ends as text often), or straddling
        c_lo, c_hi = self.space.clip(lo, hi)
        return (c_lo, c_hi) if c_hi - c_lo < self.budget.resolution else None

    def expand(self, prefix: _Prefix | None, logprob: torch.Tensor) -> None:
        """Split a prefix's mass over its next tokens (``prefix`` None: the prompt itself)."""
        index = len(self.paths) - 1  # the caller registered the prefix
        base = 0.0 if prefix is None else -prefix.priority
        state, number, depth = (LEAD, "", 0) if prefix is None else (prefix.state, prefix.number, prefix.depth)
        path = self.paths[index]
        mass = math.exp(base)
        lp = logprob.double()
        stop_lp = torch.logsumexp(lp[self.stop], 0).item() if self.stop.numel() else -math.inf
        cand, after, added = self.moves(state, lp.numel())
        cand_lp = lp[torch.from_numpy(cand)].numpy()
        child_mass = np.exp(base + cand_lp)
        kept = math.exp(stop_lp) + float(np.exp(cand_lp).sum())
        self.invalid += mass * max(0.0, 1.0 - kept)  # every token that is no candidate
        stop_mass = mass * math.exp(stop_lp)
        if state in ACCEPTING:
            self.complete[path] = self.complete.get(path, 0.0) + stop_mass
        else:
            self.invalid += stop_mass
        dead = after < 0
        self.invalid += float(child_mass[dead].sum())  # candidates that break the number here
        live = np.flatnonzero(~dead & (child_mass > 0))
        if depth + 1 >= self.max_tokens:  # the sampler's token cap: the text so far is the answer
            done = np.isin(after[live], list(ACCEPTING))
            for i in live[done].tolist():
                self.complete[(*path, int(cand[i]))] = float(child_mass[i])
            self.invalid += float(child_mass[live[~done]].sum())
            return
        for i in live.tolist():
            next_state, child_number, m = int(after[i]), number + added[i], float(child_mass[i])
            interval = self.resolvable(next_state, child_number)
            if interval is not None and math.isnan(interval[0]):
                self.impossible += m
                continue
            self.pushed += 1
            child = _Prefix(-(base + cand_lp[i]), self.pushed, index, int(cand[i]), depth + 1, next_state, child_number)
            if interval is not None:
                self.deferred_mass += m
                heapq.heappush(self.deferred, child)
            else:
                self.frontier_mass += m
                self.summed = False
                heapq.heappush(self.frontier, child)

    def open_frontier(self) -> bool:
        """Whether unresolved mass above the residual target is left (summed afresh before saying no)."""
        if self.frontier_mass > self.budget.residual:
            return True
        if not self.summed:  # once per drop below the target, not once per refining batch
            self.frontier_mass = math.fsum(math.exp(-p.priority) for p in self.frontier)  # no drift
            self.summed = True
        return self.frontier_mass > self.budget.residual

    def next_batch(self) -> list[_Prefix]:
        """The prefixes to expand next, most probable first: unresolved ones while their mass is
        above the residual target, then, with the nodes left, resolved ones (to learn how much
        of their mass ends as a number rather than running on into text). Empty: stop."""
        room = min(self.budget.nodes - len(self.paths), self.budget.batch)
        if room <= 0:
            return []
        if self.open_frontier():
            heap = self.frontier
        elif self.budget.refine and self.deferred and self.deferred_mass > self.budget.residual:
            heap = self.deferred
        else:
            return []
        batch = [heapq.heappop(heap) for _ in range(min(room, len(heap)))]
        taken = sum(math.exp(-p.priority) for p in batch)
        if heap is self.frontier:
            self.frontier_mass -= taken
        else:
            self.deferred_mass = max(0.0, self.deferred_mass - taken)
        return batch


@torch.no_grad()
def enumerate_answers(
    model: Any,
    prompt_ids: Sequence[int],
    table: TokenTable,
    max_tokens: int,
    budget: Budget = Budget(),
    temperature: float = 1.0,
    space: AnswerSpace | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> Enumeration:
    """The distribution of the number a model samples after ``prompt_ids`` (module docstring).

    Samples are what softmax sampling at ``temperature`` draws: up to ``max_tokens`` tokens,
    ending at a token of ``table.stop``. ``space`` (the law's) enables the resolution rule;
    ``decode`` (the sampler's own decoding of a token sequence) re-checks
    every complete answer.
    """
    if temperature <= 0:
        raise ValueError(f"enumerate_answers needs a positive sampling temperature, got {temperature}")
    if max_tokens < 1:  # the sampler returns "" for every sample: no number
        empty = np.zeros((0, 3))
        return Enumeration(np.zeros(0), np.zeros(0), empty, empty, invalid_mass=1.0)
    search = _Search(table, budget, max_tokens, space)
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([list(prompt_ids)], device=device), use_cache=True)
    prompt_kv = [(kv[0], kv[1]) for kv in output_cache(out)]
    n_prompt = len(prompt_ids)
    search.paths.append(())
    search.parents.append(-1)
    search.expand(None, torch.log_softmax(out.logits[0, -1].double() / temperature, -1).cpu())
    del out
    store: list[tuple[torch.Tensor, torch.Tensor]] = [(k[:, :, :0], v[:, :, :0]) for k, v in prompt_kv]
    tokens_fed = n_prompt
    while batch := search.next_batch():
        # Each prefix sees the prompt, the expanded prefixes on its path and itself.
        chains = [_chain(search.parents, p.parent) for p in batch]
        columns = sorted({a for chain in chains for a in chain if a > 0})
        at = {a: i for i, a in enumerate(columns)}
        allowed = np.zeros((len(batch), n_prompt + len(columns) + len(batch)), dtype=bool)
        allowed[:, :n_prompt] = True
        for row, chain in enumerate(chains):
            allowed[row, [n_prompt + at[a] for a in chain if a > 0]] = True
            allowed[row, n_prompt + len(columns) + row] = True
        picks = torch.tensor([a - 1 for a in columns], dtype=torch.long, device=device)
        past = [
            (torch.cat([pk, sk.index_select(2, picks)], 2), torch.cat([pv, sv.index_select(2, picks)], 2))
            for (pk, pv), (sk, sv) in zip(prompt_kv, store, strict=True)
        ]
        logits, kv = tree_forward(
            model,
            [p.token for p in batch],
            [n_prompt - 1 + p.depth for p in batch],
            allowed,
            past,
        )
        store = [
            (torch.cat([sk, k[:, :, -len(batch) :]], 2), torch.cat([sv, v[:, :, -len(batch) :]], 2))
            for (sk, sv), (k, v) in zip(store, kv, strict=True)
        ]
        tokens_fed += len(batch)
        logprobs = torch.log_softmax(logits.double() / temperature, -1).cpu()
        for row, prefix in enumerate(batch):
            search.paths.append((*search.paths[prefix.parent], prefix.token))
            search.parents.append(prefix.parent)
            search.expand(prefix, logprobs[row])
    return _result(search, table, decode, tokens_fed)


def _resolved(search: _Search, prefix: _Prefix) -> tuple[float, float, float]:
    """(midpoint, width, mass) of a resolved prefix left unexpanded."""
    lo, hi = search.resolvable(prefix.state, prefix.number) or (math.nan, math.nan)
    return (lo + hi) / 2, hi - lo, math.exp(-prefix.priority)


def _chain(parents: list[int], node: int) -> list[int]:
    """The expanded prefixes from ``node`` up to (not including) the prompt (index 0)."""
    chain = []
    while node > 0:
        chain.append(node)
        node = parents[node]
    return chain


def _result(search: _Search, table: TokenTable, decode: Callable[[list[int]], str] | None, tokens: int) -> Enumeration:
    by_value: dict[float, float] = {}
    best: dict[float, tuple[float, str]] = {}
    mismatch = 0.0
    invalid = search.invalid
    for path, mass in search.complete.items():
        text = "".join(table.texts[t] for t in path)
        value = parse_number(text)
        if decode is not None:
            checked = parse_number(decode(list(path)))
            if checked != value:
                mismatch += mass
                value = checked
        if value is None:
            invalid += mass
            continue
        by_value[value] = by_value.get(value, 0.0) + mass
        if mass > best.get(value, (-1.0, ""))[0]:
            best[value] = (mass, text.strip())
    values = np.array(sorted(by_value), dtype=float)
    frontier = np.array(
        [(*value_range(p.state, p.number, exponents=True), math.exp(-p.priority)) for p in search.frontier],
        dtype=float,
    ).reshape(-1, 3)
    return Enumeration(
        values=values,
        masses=np.array([by_value[v] for v in values.tolist()], dtype=float),
        resolved=np.array([_resolved(search, p) for p in search.deferred], dtype=float).reshape(-1, 3),
        frontier=frontier,
        invalid_mass=invalid,
        impossible_mass=search.impossible,
        decode_mismatch_mass=mismatch,
        nodes=len(search.paths),
        tokens_fed=tokens,
        texts={v: best[v][1] for v in values.tolist()},
    )
