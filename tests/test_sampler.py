"""The prefix-sharing sampler: row bookkeeping, the KV cache it reorders, and the law of whole samples."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from calbench import sampler
from tests.helpers import load_model, pooled_chisquare


@pytest.mark.parametrize("seed", range(100))
def test_arrange_moves_each_prefix_onto_its_parent_cache(seed):
    rng = random.Random(seed)
    rows = rng.randint(1, 12)
    parent = sorted(p for p in range(rows) for _ in range(rng.choice([0, 0, 1, 1, 1, 2, 3])))
    slot, src, dst = sampler.arrange(parent)
    m = len(parent)
    assert sorted(slot) == list(range(m))
    assert not set(dst) & set(src)  # the moves can run at once
    cache = list(range(max(rows, m)))  # row r holds the cache of prefix r
    for s, d in zip(src, dst, strict=True):
        cache[d] = s
    assert [cache[s] for s in slot] == parent
    # only rows that must move do: one per prefix that is not its parent's first child left in place
    stay = {p for p in parent if p < m}
    assert len(src) == m - len(stay)


@torch.no_grad()
@pytest.mark.parametrize("buffers", [True, False], ids=["row-buffers", "hf-select"])
def test_row_cache_matches_a_fresh_forward(tiny_split, buffers, monkeypatch):
    # Split, end and move rows at random for several steps; each row's next-token logits
    # must equal a full forward over the prompt and that row's tokens.
    if not buffers:  # every layer takes transformers' batch_select_indices path
        monkeypatch.setattr(sampler, "DynamicLayer", type("NotALayer", (), {}))
    model = load_model(tiny_split)
    rng, vocab = random.Random(0), model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, 7), generator=torch.Generator().manual_seed(0))
    out = model(input_ids=prompt, use_cache=True)
    cache = sampler.RowCache(out.past_key_values, rows=16, steps=8)
    assert any(isinstance(layer, sampler._RowBuffer) for layer in cache.cache.layers) == buffers
    seqs: list[list[int]] = [[]]
    for _ in range(8):
        parent = sorted(p for p in range(len(seqs)) for _ in range(rng.choice([0, 1, 1, 2, 3])))[:16] or [0]
        slot = cache.arrange(torch.tensor(parent)).tolist()
        new = [[] for _ in parent]
        for j, p in enumerate(parent):
            new[slot[j]] = [*seqs[p], rng.randrange(vocab)]
        seqs = new
        step = torch.tensor([[s[-1]] for s in seqs])
        logits = model(input_ids=step, past_key_values=cache.cache, use_cache=True).logits[:, -1]
        fresh = torch.stack(
            [model(input_ids=torch.cat([prompt[0], torch.tensor(s)])[None]).logits[0, -1] for s in seqs]
        )
        torch.testing.assert_close(logits, fresh, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_whole_samples_follow_the_model(tiny_split):
    # Sequences of up to 3 tokens, ended early by a stop set of half the vocabulary (so rows
    # end, split and move every step): the frequencies of whole samples match their exact
    # probabilities. The cells are the commonest samples of a separate pilot run.
    model = load_model(tiny_split)
    prompt = torch.randint(0, model.config.vocab_size, (1, 5), generator=torch.Generator().manual_seed(1))
    stop = set(range(0, model.config.vocab_size, 2))
    temperature, n = 0.1, 6000

    def prob(seq: list[int]) -> float:
        logits = model(input_ids=torch.cat([prompt[0], torch.tensor(seq)])[None]).logits[0, prompt.shape[1] - 1 :]
        logp = torch.log_softmax(logits.double() / temperature, -1)
        return float(logp[torch.arange(len(seq)), torch.tensor(seq)].sum().exp())

    torch.manual_seed(0)
    pilot = [tuple(s) for s in sampler.sample(model, prompt, 2000, 3, temperature, stop)]
    cells = sorted(set(pilot), key=pilot.count, reverse=True)[:12]
    torch.manual_seed(1)
    samples = [tuple(s) for s in sampler.sample(model, prompt, n, 3, temperature, stop)]
    assert len(samples) == n
    assert all(len(s) == 3 or s[-1] in stop for s in samples)
    assert all(t not in stop for s in samples for t in s[:-1])
    expected = np.array([prob(list(c)) * n for c in cells])
    observed = np.array([samples.count(c) for c in cells], dtype=float)
    assert any(len(c) < 3 for c in cells) and any(len(c) == 3 for c in cells)  # early ends among the cells
    rest = n - expected.sum()  # one more cell: every other sample
    assert rest > 5
    assert pooled_chisquare(np.append(observed, n - observed.sum()), np.append(expected, rest)).pvalue > 1e-4


@torch.no_grad()
def test_sample_edge_cases(tiny_split):
    model = load_model(tiny_split)
    prompt = torch.tensor([[5, 6, 7]])
    assert sampler.sample(model, prompt, 4, 0, 1.0, {2}) == [[], [], [], []]
    samples = sampler.sample(model, prompt, 50, 2, 1.0, set())  # no stop token: every sample runs to the limit
    assert len(samples) == 50 and all(len(s) == 2 for s in samples)
    with pytest.raises(ValueError, match="one prompt row"):
        sampler.sample(model, prompt.expand(2, -1), 4, 2, 1.0, {2})
