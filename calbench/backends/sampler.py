"""Prefix-sharing softmax sampling: n answers to one prompt, the prompt computed once.

``calbench-hf`` samples the N repeats of a numeric prompt here, and distinct prompts with
the same settings side by side (:func:`sample_many`: their common prefix computed once,
their own suffixes left-padded and masked; a seeded prompt's requests differ only in
the seed). The batch holds one row per distinct prefix with a count: samples that share
their first k tokens share the law of the next one, so each step draws ``count`` next
tokens per row (a multinomial split, exactly the law of n independent samples). Rows
split when their draws differ and leave the batch when they end.

Decoding is bounded by the model's matrix products, so the rest is kept small: the KV
cache lives in buffers sized for every row and step up front (a step writes one position
instead of concatenating the whole cache), a step that ends or splits rows copies only
the rows that move (:func:`arrange`), and draws invert each row's CDF in place
(``torch.multinomial`` takes seconds per step over a 49k-token vocabulary).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from calbench.backends.tree_attention import cache_kwarg, output_cache


def arrange(parent: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Rows for the next step's prefixes, moving as few cached rows as possible.

    ``parent[j]`` is the current row that continuing prefix j extends (ascending; a row
    whose prefixes all ended has none). Returns ``slot``, the row each prefix takes, and
    the moves ``(src, dst)`` that put its cache there: a row's first child stays in place, further children take the rows of ended prefixes
    or new rows at the end, and children of rows past the new end move into the holes
    left. No destination is the source of another move, so the moves can run at once.
    """
    m = len(parent)
    slot = [-1] * m
    held = [False] * m
    previous = -1
    for j, p in enumerate(parent):
        if p != previous and p < m:
            slot[j] = p
            held[p] = True
        previous = p
    dst = [s for s in range(m) if not held[s]]
    movers = [j for j in range(m) if slot[j] < 0]
    for j, s in zip(movers, dst, strict=True):
        slot[j] = s
    return slot, [parent[j] for j in movers], dst


class _RowBuffer(DynamicLayer):
    """A cache layer whose keys and values sit in buffers for ``rows`` rows and ``steps`` more positions."""

    def __init__(self, layer: DynamicLayer, rows: int, steps: int) -> None:
        super().__init__()
        keys, values = layer.keys, layer.values
        assert keys is not None and values is not None
        self.device = keys.device
        self.length = keys.shape[-2]
        self.rows = keys.shape[0]
        self._keys = keys.new_empty(rows, keys.shape[1], self.length + steps, keys.shape[3])
        self._values = values.new_empty(rows, values.shape[1], self.length + steps, values.shape[3])
        self._keys[: self.rows, :, : self.length] = keys
        self._values[: self.rows, :, : self.length] = values
        self.is_initialized = True
        self._expose()

    def _expose(self) -> None:
        self.keys = self._keys[: self.rows, :, : self.length]
        self.values = self._values[: self.rows, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        end = self.length + key_states.shape[-2]
        self._keys[: self.rows, :, self.length : end] = key_states
        self._values[: self.rows, :, self.length : end] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def move(self, src: torch.Tensor, dst: torch.Tensor, rows: int) -> None:
        if src.numel():
            self._keys[dst, :, : self.length] = self._keys[src, :, : self.length]
            self._values[dst, :, : self.length] = self._values[src, :, : self.length]
        self.rows = rows
        self._expose()


class RowCache:
    """A prompt's KV cache made to hold up to ``rows`` decoding rows for ``steps`` more tokens.

    Plain ``DynamicLayer`` layers become row buffers; any other layer type (sliding
    windows, ...) keeps transformers' own ``batch_select_indices``.
    """

    def __init__(self, cache: Any, rows: int, steps: int) -> None:
        self.cache = cache
        layers = getattr(cache, "layers", [])
        for i, layer in enumerate(layers):
            if type(layer) is DynamicLayer and layer.is_initialized:
                layers[i] = _RowBuffer(layer, rows, steps)
        self._buffers = [layer for layer in layers if isinstance(layer, _RowBuffer)]
        self._others = [layer for layer in layers if not isinstance(layer, _RowBuffer)] if layers else [cache]

    def arrange(self, parent: torch.Tensor) -> torch.Tensor:
        """Reorder the rows for the prefixes extending rows ``parent``; returns each prefix's row."""
        parents = parent.tolist()
        slot, src, dst = arrange(parents)
        device = parent.device
        src_t, dst_t = torch.tensor(src, device=device), torch.tensor(dst, device=device)
        for buffer in self._buffers:
            buffer.move(src_t, dst_t, len(slot))
        if self._others:
            order = [0] * len(slot)
            for s, p in zip(slot, parents, strict=True):
                order[s] = p
            for layer in self._others:
                layer.batch_select_indices(torch.tensor(order, device=device))
        return torch.tensor(slot, device=device)


def _draw(logits: torch.Tensor, counts: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
    """``counts[r]`` draws from row r's softmax at ``temperature`` (0: its most likely token):
    the distinct (row, token) pairs and their multiplicity."""
    if temperature == 0:  # greedy: the first maximum, as HF generate takes it
        return torch.arange(counts.numel(), device=logits.device), logits.argmax(-1), counts
    logits = logits.float()
    cdf = (logits - logits.amax(-1, keepdim=True)).div_(temperature).exp_().cumsum_(-1)
    width = int(counts.max())
    draws = torch.rand(counts.numel(), width, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    draws[torch.arange(width, device=cdf.device)[None, :] >= counts[:, None]] = float("inf")
    picked = torch.searchsorted(cdf, draws).clamp_max(cdf.shape[-1] - 1)
    valid = torch.isfinite(draws)
    rows = torch.arange(counts.numel(), device=cdf.device)[:, None].expand_as(picked)
    children, multiplicity = torch.unique(torch.stack([rows[valid], picked[valid]], 1), dim=0, return_counts=True)
    return children[:, 0], children[:, 1], multiplicity


def sample(
    model: Any, prompt: torch.Tensor, n: int, max_gen_toks: int, temperature: float, stop: set[int]
) -> list[list[int]]:
    """n independent samples of softmax sampling at ``temperature`` after ``prompt`` (one row of token ids).

    A sample ends with its first token in ``stop`` (kept) or after ``max_gen_toks``
    tokens. Returned in random order: the n samples are exchangeable.
    """
    if prompt.shape[0] != 1:
        raise ValueError(f"sample() takes one prompt row, got {prompt.shape[0]}")
    return sample_many(model, [prompt[0]], [n], max_gen_toks, temperature, stop)[0]


def shared_prefix(prompts: list[torch.Tensor]) -> int:
    """How many leading tokens every prompt shares, leaving each at least one token of its own."""
    shortest = min(int(p.numel()) for p in prompts)
    length = shortest - 1
    for other in prompts[1:]:
        differ = (prompts[0][:length] != other[:length]).nonzero()
        if differ.numel():
            length = int(differ[0])
    return length


@torch.no_grad()
def _prefill(model: Any, prompts: list[torch.Tensor]) -> tuple[Any, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The prompts' KV cache, one row each, their next-token logits, the attention mask of the
    cache (None when no row is padded) and each prompt's length.

    Several prompts share their common prefix, computed once; their own suffixes follow it,
    left-padded to one length and masked, so every row's last position is its prompt's end.
    """
    lengths = torch.tensor([int(p.numel()) for p in prompts], device=prompts[0].device)
    if len(prompts) == 1:
        out = model(input_ids=prompts[0][None], use_cache=True)
        return output_cache(out), out.logits[:, -1], None, lengths
    common = shared_prefix(prompts)
    head = model(input_ids=prompts[0][None, :common], use_cache=True)
    cache = output_cache(head)
    cache.batch_repeat_interleave(len(prompts))
    width = int(lengths.max()) - common
    ids = prompts[0].new_zeros(len(prompts), width)
    own = torch.zeros(len(prompts), width, dtype=torch.long, device=ids.device)
    for r, p in enumerate(prompts):
        ids[r, width - (p.numel() - common) :] = p[common:]
        own[r, width - (p.numel() - common) :] = 1
    padded = bool((own == 0).any())
    mask = torch.cat([own.new_ones(len(prompts), common), own], 1) if padded else None
    positions = (common + own.cumsum(1) - 1).clamp_min(common) if padded else None
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_kwarg(model): cache}
    )
    return cache, out.logits[:, -1], mask, lengths


def _step(
    model: Any,
    ids: torch.Tensor,
    cache: Any,
    prompt_mask: torch.Tensor | None,
    lengths: torch.Tensor,
    origin: torch.Tensor,
    step: int,
) -> torch.Tensor:
    """Next-token logits after feeding generated token ``step`` (``ids``, one per row) to rows
    continuing prompts ``origin``, of ``lengths`` and padding ``prompt_mask`` (:func:`_prefill`)."""
    extra: dict[str, torch.Tensor] = {}
    if prompt_mask is not None:
        mask = prompt_mask[origin]
        extra["attention_mask"] = torch.cat([mask, mask.new_ones(ids.shape[0], step + 1)], 1)
        extra["position_ids"] = (lengths[origin] + step)[:, None]
    return model(input_ids=ids, use_cache=True, **{cache_kwarg(model): cache}, **extra).logits[:, -1]


@torch.no_grad()
def sample_many(
    model: Any,
    prompts: list[torch.Tensor],
    counts: list[int],
    max_gen_toks: int,
    temperature: float,
    stop: set[int],
) -> list[list[list[int]]]:
    """``counts[i]`` independent samples after each of ``prompts`` (1-D token ids), decoded as one batch
    (at ``temperature`` 0, greedy: each prompt's one continuation, ``counts[i]`` times).

    The prompts share their common prefix (:func:`shared_prefix`) and each prompt's samples
    share its KV cache; a row's law is exactly that of sampling its prompt alone. Returns,
    per prompt, its samples in random order; a sample ends as in :func:`sample`.
    """
    if len(prompts) != len(counts) or not prompts:
        raise ValueError(
            f"sample_many() takes one count per prompt, got {len(prompts)} prompts and {len(counts)} counts"
        )
    if len(prompts) > 1 and shared_prefix(prompts) == 0:  # nothing shared: no row may attend to padding alone
        return [
            sample_many(model, [p], [c], max_gen_toks, temperature, stop)[0]
            for p, c in zip(prompts, counts, strict=True)
        ]
    if max_gen_toks < 1:
        return [[[] for _ in range(c)] for c in counts]
    device = prompts[0].device
    n = sum(counts)
    stop_ids = torch.tensor(sorted(stop), dtype=torch.long, device=device)
    prompt_cache, logits, prompt_mask, lengths = _prefill(model, prompts)
    cache = RowCache(prompt_cache, rows=n, steps=max_gen_toks)
    tokens = torch.empty(n, max_gen_toks, dtype=torch.long, device=device)  # row r's prefix
    origin = torch.arange(len(prompts), device=device)  # the prompt row r continues
    weights = torch.tensor(counts, device=device)
    done: list[list[tuple[list[int], int]]] = [[] for _ in prompts]
    for step in range(max_gen_toks):
        parent, token, multiplicity = _draw(logits, weights, temperature)
        ended = torch.isin(token, stop_ids) | (step == max_gen_toks - 1)
        for p, t, c in zip(parent[ended].tolist(), token[ended].tolist(), multiplicity[ended].tolist(), strict=True):
            done[int(origin[p])].append(([*tokens[p, :step].tolist(), t], c))
        go = (~ended).nonzero(as_tuple=True)[0]
        if go.numel() == 0:
            break
        parent, token = parent[go], token[go]
        slot = cache.arrange(parent)
        prefixes = tokens[parent, :step]
        tokens[slot, :step] = prefixes
        tokens[slot, step] = token
        weights = torch.empty_like(multiplicity[go]).index_put_((slot,), multiplicity[go])
        origin = torch.empty_like(origin[parent]).index_put_((slot,), origin[parent])
        logits = _step(model, tokens[: slot.numel(), step : step + 1], cache.cache, prompt_mask, lengths, origin, step)
    result = []
    for finished in done:
        samples = [row for row, c in finished for _ in range(c)]
        result.append([samples[i] for i in torch.randperm(len(samples)).tolist()])
    return result
