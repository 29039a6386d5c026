"""The prefix-sharing sampler: row bookkeeping, the KV cache it reorders, and the law of whole samples."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from calbench.backends import sampler
from tests.helpers import load_model, pooled_chisquare, sample_until_decided


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


def test_shared_prefix_leaves_each_prompt_a_token():
    t = torch.tensor
    assert sampler.shared_prefix([t([1, 2, 3, 4]), t([1, 2, 5])]) == 2
    assert sampler.shared_prefix([t([1, 2, 3]), t([1, 2, 3, 4])]) == 2  # the shorter keeps its last token
    assert sampler.shared_prefix([t([7, 2]), t([1, 2])]) == 0
    assert sampler.shared_prefix([t([1, 2, 3])]) == 2


def _prompts_with_a_common_head(vocab: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    head = torch.randint(0, vocab, (4,), generator=g)
    return [torch.cat([head, torch.randint(0, vocab, (k,), generator=g)]) for k in (1, 3, 6)]


@torch.no_grad()
@pytest.mark.parametrize("lengths", ["ragged", "even"])
def test_side_by_side_rows_match_each_prompt_alone(tiny_split, lengths):
    # Prompts of different lengths after one common prefix (left-padded, masked): each row's
    # next-token logits after its prompt and then after each of two continuation tokens equal
    # a forward over that prompt alone.
    model = load_model(tiny_split)
    prompts = _prompts_with_a_common_head(model.config.vocab_size)
    if lengths == "even":
        prompts = [torch.cat([p[:4], p[-1:]]) for p in prompts]
    cache, logits, mask, sizes = sampler._prefill(model, prompts)
    assert (mask is None) == (lengths == "even")
    alone = torch.stack([model(input_ids=p[None]).logits[0, -1] for p in prompts])
    torch.testing.assert_close(logits, alone, atol=1e-4, rtol=1e-4)
    follow = torch.tensor([[5, 1], [9, 9], [2, 7]])
    origin = torch.arange(3)
    for step in range(follow.shape[1]):
        logits = sampler._step(model, follow[:, step : step + 1], cache, mask, sizes, origin, step)
        alone = [
            model(input_ids=torch.cat([p, f[: step + 1]])[None]).logits[0, -1]
            for p, f in zip(prompts, follow, strict=True)
        ]
        torch.testing.assert_close(logits, torch.stack(alone), atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_side_by_side_samples_follow_each_prompt(tiny_split):
    # The whole-sample law per prompt (as in test_whole_samples_follow_the_model), for three
    # prompts of different lengths decoded as one batch.
    model = load_model(tiny_split)
    prompts = _prompts_with_a_common_head(model.config.vocab_size)
    stop = set(range(0, model.config.vocab_size, 2))
    temperature, counts = 0.1, [4000, 3000, 5000]

    def prob(prompt: torch.Tensor, seq: tuple[int, ...]) -> float:
        logits = model(input_ids=torch.cat([prompt, torch.tensor(seq)])[None]).logits[0, prompt.numel() - 1 :]
        logp = torch.log_softmax(logits.double() / temperature, -1)
        return float(logp[torch.arange(len(seq)), torch.tensor(seq)].sum().exp())

    torch.manual_seed(2)
    per_prompt = sampler.sample_many(model, prompts, counts, 3, temperature, stop)
    assert [len(s) for s in per_prompt] == counts
    for prompt, samples, n in zip(prompts, per_prompt, counts, strict=True):
        seen = [tuple(s) for s in samples]
        cells = sorted(set(seen), key=seen.count, reverse=True)[:10]
        expected = np.array([prob(prompt, c) * n for c in cells])
        observed = np.array([seen.count(c) for c in cells], dtype=float)
        rest = n - expected.sum()
        assert rest > 5
        assert pooled_chisquare(np.append(observed, n - observed.sum()), np.append(expected, rest)).pvalue > 1e-4


@torch.no_grad()
def test_a_decided_sample_ends_where_it_is_decided_and_keeps_its_law(tiny_split):
    # tests.helpers.sample_until_decided (the sampler, a chunk of tokens at a time) ends a sample at
    # the first chunk's end where decided(tokens) holds: no sample goes on past a decided prefix
    # there, none stops before one, and each sample's law is still the model's probability of its tokens.
    model = load_model(tiny_split)
    prompt = torch.tensor([5, 6, 7])
    stop, temperature, n, length, chunk = {2}, 0.1, 6000, 4, 2

    def decided(tokens: list[int]) -> bool:
        return tokens[-1] % 3 == 0

    def prob(seq: tuple[int, ...]) -> float:
        logits = model(input_ids=torch.cat([prompt, torch.tensor(seq)])[None]).logits[0, prompt.numel() - 1 :]
        logp = torch.log_softmax(logits.double() / temperature, -1)
        return float(logp[torch.arange(len(seq)), torch.tensor(seq)].sum().exp())

    torch.manual_seed(3)
    (samples,) = sample_until_decided(model, [prompt], [n], length, temperature, stop, decided, chunk=chunk)
    assert len(samples) == n
    for s in samples:
        assert not any(decided(s[:k]) for k in range(chunk, len(s), chunk))
        assert not any(s[k - 1] in stop for k in range(1, len(s)))
        assert len(s) == length or s[-1] in stop or decided(s)
    seen = [tuple(s) for s in samples]
    assert sum(len(s) < length and s[-1] not in stop for s in seen) > 100  # the helper did end samples
    cells = sorted(set(seen), key=seen.count, reverse=True)[:10]
    expected = np.array([prob(c) * n for c in cells])
    observed = np.array([seen.count(c) for c in cells], dtype=float)
    assert n - expected.sum() > 5
    assert (
        pooled_chisquare(np.append(observed, n - observed.sum()), np.append(expected, n - expected.sum())).pvalue > 1e-4
    )


@torch.no_grad()
def test_side_by_side_edge_cases(tiny_split):
    model = load_model(tiny_split)
    t = torch.tensor
    assert sampler.sample_many(model, [t([5, 6]), t([5, 7, 8])], [2, 1], 0, 1.0, {2}) == [[[], []], [[]]]
    # nothing shared: each prompt is sampled on its own
    out = sampler.sample_many(model, [t([5, 6]), t([7, 8, 9])], [3, 4], 2, 1.0, set())
    assert [len(s) for s in out] == [3, 4] and all(len(x) == 2 for s in out for x in s)
    with pytest.raises(ValueError, match="one count per prompt"):
        sampler.sample_many(model, [t([5, 6])], [1, 2], 2, 1.0, {2})
