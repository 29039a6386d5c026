"""Prefix-sharing softmax sampling: n answers to one prompt, the prompt computed once.

``calbench-hf`` samples the N repeats of a numeric prompt here. The batch holds one row
per distinct prefix with a count: samples that share their first k tokens share the law
of the next one, so each step draws ``count`` next tokens per row (a multinomial split,
exactly the law of n independent samples). Rows split when their draws differ and leave
the batch when they end.

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

from calbench.tree_attention import cache_kwarg, output_cache


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
        self.rows = 1
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
        self.rows = len(slot)
        return torch.tensor(slot, device=device)


def _draw(logits: torch.Tensor, counts: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
    """``counts[r]`` draws from row r's softmax at ``temperature``: the distinct (row, token) pairs and their multiplicity."""
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


@torch.no_grad()
def sample(
    model: Any, prompt: torch.Tensor, n: int, max_gen_toks: int, temperature: float, stop: set[int]
) -> list[list[int]]:
    """n independent samples of softmax sampling at ``temperature`` after ``prompt`` (one row of token ids).

    A sample ends with its first token in ``stop`` (kept) or after ``max_gen_toks``
    tokens. Returned in random order: the n samples are exchangeable.
    """
    if prompt.shape[0] != 1:
        raise ValueError(f"sample() takes one prompt row, got {prompt.shape[0]}")
    if max_gen_toks < 1:
        return [[] for _ in range(n)]
    device = prompt.device
    stop_ids = torch.tensor(sorted(stop), dtype=torch.long, device=device)
    kwarg = cache_kwarg(model)
    out = model(input_ids=prompt, use_cache=True)
    cache = RowCache(output_cache(out), rows=n, steps=max_gen_toks)
    logits = out.logits[:, -1]
    tokens = torch.empty(n, max_gen_toks, dtype=torch.long, device=device)  # row r's prefix
    counts = torch.tensor([n], device=device)
    done: list[tuple[list[int], int]] = []
    for step in range(max_gen_toks):
        parent, token, multiplicity = _draw(logits, counts, temperature)
        ended = torch.isin(token, stop_ids) | (step == max_gen_toks - 1)
        for p, t, c in zip(parent[ended].tolist(), token[ended].tolist(), multiplicity[ended].tolist(), strict=True):
            done.append(([*tokens[p, :step].tolist(), t], c))
        go = (~ended).nonzero(as_tuple=True)[0]
        if go.numel() == 0:
            break
        parent, token = parent[go], token[go]
        slot = cache.arrange(parent)
        prefixes = tokens[parent, :step]
        tokens[slot, :step] = prefixes
        tokens[slot, step] = token
        counts = torch.empty_like(multiplicity[go]).index_put_((slot,), multiplicity[go])
        out = model(input_ids=tokens[: slot.numel(), step : step + 1], use_cache=True, **{kwarg: cache.cache})
        logits = out.logits[:, -1]
    samples = [row for row, c in done for _ in range(c)]
    order = torch.randperm(len(samples)).tolist()
    return [samples[i] for i in order]
