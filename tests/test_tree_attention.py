"""The trie scorer and the likelihood metrics equal brute force on tiny models."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from scipy import stats

from calbench.answer_tokens import answer_tokens, terminator
from calbench.backends.tree_attention import score_trie
from calbench.families import make_target
from calbench.metrics import likelihood
from calbench.prompt import encode, prompt_text, render
from calbench.space import canonical_space
from calbench.trie import build_trie
from tests.helpers import load_model, load_tokenizer


@pytest.fixture(scope="module", params=["tiny_split", "tiny_merge"])
def setup(request):
    """A model, its prompt ids, a canonical space and its trie (200 strings, 2 decimals)."""
    path = request.getfixturevalue(request.param)
    tok, model = load_tokenizer(path), load_model(path)
    target = make_target("skellam", {"mu1": 3, "mu2": 5}) if request.param == "tiny_merge" else None
    target = target or make_target("gaussian", {"mu": 3.5, "sigma": 3})
    space = canonical_space(target, 2, 200)
    rendered = render(tok, prompt_text(target))
    seqs = answer_tokens(tok, rendered, space.strings, terminator(tok, chat=bool(tok.chat_template)))
    return model, encode(tok, rendered), space, build_trie(seqs, space.masses), seqs


@torch.no_grad()
def brute_force(model, prompt, seqs):
    """Full-vocabulary log-softmax at every answer position, one forward per string."""
    out = []
    for s in seqs:
        logits = model(torch.tensor([prompt + s])).logits[0].double()
        out.append(torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(s)], dim=-1))
    return out


@pytest.mark.parametrize("chunk", [7, None])  # tiny chunks exercise the cache across chunks
def test_scorer_equals_brute_force(setup, chunk):
    model, prompt, _, trie, seqs = setup
    scores = score_trie(model, prompt, trie, chunk=chunk)
    full = brute_force(model, prompt, seqs)
    expected = np.array([sum(float(lp[k, t]) for k, t in enumerate(s)) for lp, s in zip(full, seqs, strict=True)])
    np.testing.assert_allclose(scores.path_logprob(trie), expected, atol=1e-4, rtol=0)
    greedy = [all(int(lp[k].argmax()) == t for k, t in enumerate(s)) for lp, s in zip(full, seqs, strict=True)]
    assert scores.path_greedy(trie).tolist() == greedy


def test_logit_kl_and_seq_kl_equal_brute_force(setup):
    model, prompt, space, trie, seqs = setup
    scores = score_trie(model, prompt, trie)
    full = brute_force(model, prompt, seqs)
    # Brute force: for every string and position, KL(q || softmax) over the whole vocabulary.
    q_dense = {}
    for s, m in zip(seqs, space.masses, strict=True):
        for k in range(len(s)):
            q_dense.setdefault(tuple(s[:k]), {}).setdefault(s[k], 0.0)
            q_dense[tuple(s[:k])][s[k]] += m
    expected = 0.0
    for s, m, lp in zip(seqs, space.masses, full, strict=True):
        per = 0.0
        for k in range(len(s)):
            node = q_dense[tuple(s[:k])]
            total = sum(node.values())
            q = np.zeros(lp.shape[1])
            for tok_id, mass in node.items():
                q[tok_id] = mass / total
            per += float(np.sum(q[q > 0] * (np.log(q[q > 0]) - lp[k].numpy()[q > 0])))
        expected += m * per / len(s)
    assert likelihood.logit_kl(trie, scores.edge_logprob) == pytest.approx(expected, rel=1e-5)
    logp = np.array([sum(float(lp[k, t]) for k, t in enumerate(s)) for lp, s in zip(full, seqs, strict=True)])
    assert likelihood.seq_kl(space.masses, scores.path_logprob(trie)) == pytest.approx(
        float(np.sum(space.masses * (np.log(space.masses) - logp))), rel=1e-5
    )


def test_a_model_equal_to_its_target_scores_zero():
    # Edge log-probabilities set to log q: every node KL, logit_kl and seq_kl vanish.
    seqs = [[1, 2, 9], [1, 3, 9], [4, 9]]
    trie = build_trie(seqs, np.array([0.2, 0.3, 0.5]))
    edges = np.log(trie.q())
    assert np.allclose(likelihood.node_kl(trie, edges), 0.0)
    assert likelihood.logit_kl(trie, edges) == pytest.approx(0.0, abs=1e-12)
    path = likelihood.edge_logprobs(trie, [[float(edges[n]) for n in row[row >= 0]] for row in trie.string_nodes()])
    np.testing.assert_allclose(path[1:], edges[1:])


def test_exact_w1_against_scipy():
    rng = np.random.default_rng(1)
    values = np.sort(rng.normal(size=50))
    p = rng.dirichlet(np.ones(50))
    q = rng.dirichlet(np.ones(50))
    got = likelihood.exact_w1(values, p, np.log(q) + 3.0)  # unnormalised: renormalised over Y
    assert got == pytest.approx(stats.wasserstein_distance(values, values, q, p), rel=1e-10)
    assert likelihood.exact_w1(values, p, np.log(p)) == pytest.approx(0.0, abs=1e-12)


def test_seq_kl_and_mass():
    p = np.array([0.5, 0.5, 0.0])
    logq = np.log([0.25, 0.25, 0.5])
    assert likelihood.seq_kl(p, logq) == pytest.approx(np.log(2))
    assert likelihood.canonical_mass(logq) == pytest.approx(1.0)


def test_token_logprobs_survive_pickling():
    x = likelihood.TokenLogprobs([3, 4], [-0.5, -0.25])
    y = pickle.loads(pickle.dumps(x))
    assert float(y) == -0.75 and y.token_ids == (3, 4) and y.token_logprobs == (-0.5, -0.25)
