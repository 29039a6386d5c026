"""One walk over trie nodes serves the exact logit KL and the full-trie training loss.

``Trie.path_weights`` gives each node Σ_{y visits it} m(y) / (L_y + 1). At τ = 1 the
full-trie training loss of one prompt (``FullTrieCollator`` + ``soft_kl``) is then exactly
the prompt's ``logit_kl`` computed from the tree-attention scorer's edge log-probabilities.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calbench.backends.tree_attention import score_trie
from calbench.metrics.likelihood import logit_kl, node_kl
from calbench.training.config import TrainConfig
from calbench.training.data import Example, FullTrieCollator
from calbench.training.trainer import build
from calbench.trie import build_trie


def test_path_weights_by_hand():
    # Strings: [1, 9] (mass .5), [2, 9] (mass .3), [1, 3, 9] (mass .2).
    trie = build_trie([[1, 9], [2, 9], [1, 3, 9]], np.array([0.5, 0.3, 0.2]))
    w = trie.path_weights()
    node = {tuple(p[:d]): trie.string_nodes()[s][d - 1] for s, p in enumerate(trie.paths()) for d in range(1, len(p))}
    assert w[0] == pytest.approx(0.5 / 2 + 0.3 / 2 + 0.2 / 3)  # every string visits the root
    assert w[node[(1,)]] == pytest.approx(0.5 / 2 + 0.2 / 3)
    assert w[node[(2,)]] == pytest.approx(0.3 / 2)
    assert w[node[(1, 3)]] == pytest.approx(0.2 / 3)
    leaves = trie.ends
    assert np.all(w[leaves] == 0)  # a string's last node predicts nothing
    assert w.sum() == pytest.approx(1.0)  # each string spreads its mass over its L + 1 positions


def test_logit_kl_is_the_path_weighted_node_kl():
    rng = np.random.default_rng(0)
    trie = build_trie([[1, 9], [2, 9], [1, 3, 9], [1, 4, 4, 9]], rng.dirichlet(np.ones(4)))
    edges = np.log(rng.uniform(0.05, 1.0, trie.n_nodes))
    kl = node_kl(trie, edges)
    by_string = []  # the per-token mean KL along each string, weighted by its mass
    for path, end in zip(trie.paths(), trie.ends, strict=True):
        node, visited = 0, [0]  # the root, then the node after each token but the last
        for token in path[:-1]:
            node = next(int(c) for c in trie.children(node) if trie.tokens[c] == token)
            visited.append(node)
        by_string.append(trie.mass[end] * np.mean(kl[visited]))
    assert logit_kl(trie, edges) == pytest.approx(sum(by_string) / trie.mass[trie.ends].sum(), rel=1e-12)


def test_full_trie_loss_at_tau_one_equals_the_exact_logit_kl(tiny_split, tmp_path):
    config = TrainConfig(
        model=str(tiny_split),
        output=str(tmp_path),
        prompts=12,
        method="soft",
        soft_paths="all",
        max_bins=40,
        decimals=2,
        tau=1.0,
        use_cpu=True,
    )
    trainer, data = build(config.resolve())
    model = trainer.model.eval()
    prompt = 3
    trie = data.trie(prompt, 2, 40)
    assert trie.q()[1:].min() > 1e-6  # no target below the loss's clamp: the two must agree exactly
    batch = FullTrieCollator(data, 2, 40, row_nodes=9)([Example(prompt, 0)])
    with torch.no_grad():
        loss = float(trainer.compute_loss(model, batch))
        scores = score_trie(model, data.prompt_ids[prompt], trie)
    assert loss == pytest.approx(logit_kl(trie, scores.edge_logprob), rel=1e-5)
    assert loss > 0.1  # an untrained adapter is far from the target
